//! [`Locker`]: the entry point over one Redis connection.

use std::sync::Arc;
use std::time::Duration;

use crate::args::{self, Keys};
use crate::backend::replication::Replication;
use crate::backend::Backend;
use crate::connection::Connection;
use crate::engine::acquire::Acquire;
use crate::engine::context::Context;
use crate::engine::inspect::{LockInfo, LockKeyReader};
use crate::engine::meter::{LockerStats, Meter};
use crate::engine::renewer::RenewerSlot;
use crate::engine::waiting;
use crate::engine::wakeup::{Hub, WakeUpState};
use crate::error::{Argument, Error};
use crate::fence::MIN_FENCE_RETENTION;
use crate::primitives::election::Election;
use crate::primitives::fair::FairLock;
use crate::primitives::mutex;
use crate::primitives::rwlock::RwLock;
use crate::primitives::semaphore::Semaphore;
use crate::pubsub::WakeUpSource;
use crate::quorum::QuorumSettings;
use crate::scripts::Claim;
use crate::token::Token;

/// Takes locks on one Redis server over a connection you already have — or, built with
/// [`Locker::redlock`], on a quorum of independent servers.
///
/// Cloning a `Locker` is cheap (it clones the connection handles); every operation clones
/// the connection for itself, so one locker can be shared by any number of tasks.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let conn = client.get_multiplexed_async_connection().await?;
/// let locker = redmutex::Locker::new(conn).with_prefix("myapp:lock:");
///
/// let lock = locker.acquire("daily-export", Duration::from_secs(30)).await?;
/// // ... only one process in the fleet runs this ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker<C: Connection> {
    /// The backend, renewer, wake-up hub and fence settings, shared with every acquire and
    /// guard this locker hands out.
    pub(crate) context: Arc<Context<C>>,
    pub(crate) prefix: Arc<[u8]>,
}

#[cfg(feature = "memory")]
impl Locker<redmutex_memory::MemoryRedis> {
    /// A locker over a new, empty in-memory server ([`MemoryRedis`](redmutex_memory::MemoryRedis)),
    /// with push wake-up: for your tests, **not for production** (feature `memory`). Every
    /// primitive works as over Redis; see [`crate::memory`] for the clock and for fault
    /// injection. [`Locker::connection`] is the server's handle.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("job", std::time::Duration::from_secs(30)).await?;
    /// assert_eq!(locker.connection().keys(), [b"job".to_vec()]);
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn in_memory() -> Locker<redmutex_memory::MemoryRedis> {
        Locker::in_memory_on(&redmutex_memory::MemoryRedis::new())
    }

    /// Another locker over the same in-memory server as `redis` (a clone of its handle):
    /// what another process would be over one Redis server, with push wake-up.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::{Duration, Instant};
    /// use redmutex::{memory::MemoryRedis, retry, Locker};
    /// let redis = MemoryRedis::new();
    /// // Two "processes" over one server:
    /// let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis));
    /// let lock = a.acquire("job", Duration::from_secs(30)).await?;
    /// let waiter = tokio::spawn(async move {
    ///     let every_10s = retry::constant(Duration::from_secs(10));
    ///     b.acquire("job", Duration::from_secs(30)).retry(every_10s).await
    /// });
    /// tokio::time::sleep(Duration::from_millis(20)).await; // `b` waits
    /// let released = Instant::now();
    /// lock.release().await?;
    /// waiter.await??;
    /// assert!(released.elapsed() < Duration::from_secs(1)); // woken by the release
    /// # Ok(()) }
    /// ```
    pub fn in_memory_on(
        redis: &redmutex_memory::MemoryRedis,
    ) -> Locker<redmutex_memory::MemoryRedis> {
        Locker::new(redis.clone())
            .with_wake_up([redis])
            .expect("one wake-up source for one node")
    }
}

impl<C: Connection> Locker<C> {
    /// A locker over `conn`, storing each lock under exactly its key.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Any redis-rs async connection will do; here the in-memory server (feature `memory`).
    /// let locker = redmutex::Locker::new(redmutex::memory::MemoryRedis::new());
    /// let lock = locker.acquire("daily-export", Duration::from_secs(30)).await?;
    /// assert_eq!(locker.connection().keys(), [b"daily-export".to_vec()]);
    /// assert!(!locker.wakes_up()); // waiters poll, unless built `with_wake_up`
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(conn: C) -> Locker<C> {
        Locker::over(Backend::single(conn))
    }

    /// A Redlock locker over independent Redis masters (not replicas of each other, not
    /// one cluster): a lock is held when a quorum of them — `n / 2 + 1` — holds it, so it
    /// survives the loss of any minority of nodes. Use an odd number of nodes; five is
    /// the usual choice. Judged with the default [`QuorumSettings`]; see
    /// [`with_quorum_settings`](Locker::with_quorum_settings).
    ///
    /// Everything else works as on one node: [`acquire`](Locker::acquire) and
    /// [`acquire_all`](Locker::acquire_all) (all keys on each node), retry strategies,
    /// [`Lock::refresh`](crate::Lock::refresh), [`Lock::release`](crate::Lock::release),
    /// keep-alive with the lost signal, and [`inspect`](Locker::inspect), which also shows
    /// each node's view. How the quorum is counted, and what it cannot protect against
    /// (nodes restarted without persistence), is in the [crate docs](crate#redlock).
    ///
    /// Connections that are down when the locker is built are fine as long as they
    /// reconnect by themselves: see [`connect_lazy`](crate::connection::connect_lazy).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty node list.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
    ///     .into_iter()
    ///     .map(redmutex::connection::connect_lazy)
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let locker = redmutex::Locker::redlock(nodes)?;
    /// let lock = locker.acquire("billing-run", Duration::from_secs(30)).await?;
    /// println!("valid for {:?}", lock.remaining_validity()); // TTL minus time taken and drift
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    #[doc(alias = "quorum")]
    pub fn redlock(nodes: impl IntoIterator<Item = C>) -> Result<Locker<C>, Error> {
        let conns: Vec<C> = nodes.into_iter().collect();
        if conns.is_empty() {
            return Err(Error::invalid(
                Argument::Nodes,
                "a Redlock locker needs at least one node",
            ));
        }
        Ok(Locker::over(Backend::redlock(
            conns,
            QuorumSettings::default(),
        )))
    }

    /// A locker over a Redis Cluster connection (`redis::cluster_async::ClusterConnection`,
    /// feature `cluster`): each lock lives on the master of its key's hash slot, and the
    /// connection follows `MOVED`/`ASK` redirections and failovers.
    ///
    /// Everything works as on one node, with what the cluster requires: the keys of a
    /// multi-key lock must share a hash slot — give them a common `{hash tag}`, e.g.
    /// `{order-7}:payment` and `{order-7}:stock` — and keys that do not are refused with
    /// [`Error::InvalidArgument`] *before* anything is sent; fence counters live in their
    /// key's slot; keep-alive batches renewals per slot. For
    /// [`with_wake_up`](Locker::with_wake_up), give a `WakeUpSource::cluster(nodes)`:
    /// releases are announced on shard channels (`SPUBLISH`), which stay on the key's shard
    /// instead of crossing the cluster bus to every node, and the subscriber keeps a
    /// connection to each master it needs and follows each slot to its master (Redis 6.2,
    /// without shard channels, gets `PUBLISH` and `SUBSCRIBE`).
    ///
    /// A lock is as safe as its master: when the master fails and a replica that had not
    /// yet received the lock is promoted, another client can take the lock. Keep-alive
    /// notices — a renewal finds the lock gone and the lease is reported lost — but not
    /// before that renewal. Use Redlock over independent masters where that matters.
    ///
    /// ```no_run
    /// # #[cfg(feature = "cluster")]
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000", "redis://10.0.0.3:7000"];
    /// let conn = redis::cluster::ClusterClient::new(nodes.to_vec())?
    ///     .get_async_connection()
    ///     .await?;
    /// let locker = redmutex::Locker::cluster(conn);
    /// let lock = locker
    ///     .acquire_all(["{order-7}:payment", "{order-7}:stock"], Duration::from_secs(10))
    ///     .await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster(conn: C) -> Locker<C> {
        Locker::over(Backend::cluster(conn))
    }

    /// Whether this locker was built with [`Locker::cluster`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker};
    /// assert!(!Locker::in_memory().is_cluster());
    /// let cluster = Locker::cluster(MemoryRedis::new()); // a `ClusterConnection` in production
    /// assert!(cluster.is_cluster());
    /// // Keys of one lock must share a hash slot there: refused before anything is sent.
    /// let keys = ["order-7:payment", "order-7:stock"];
    /// let refused = cluster.acquire_all(keys, Duration::from_secs(10)).await;
    /// assert!(refused.unwrap_err().is_invalid_argument());
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.context.backend.is_cluster()
    }

    fn over(backend: Backend<C>) -> Locker<C> {
        Locker {
            context: Arc::new(Context::new(backend)),
            prefix: Arc::from(&b""[..]),
        }
    }

    /// This locker with its shared context changed by `edit` (for the builder methods;
    /// what was handed out before keeps the context it had).
    fn edit(mut self, edit: impl FnOnce(&mut Context<C>)) -> Locker<C> {
        let mut context = (*self.context).clone();
        edit(&mut context);
        self.context = Arc::new(context);
        self
    }

    /// Forbids fencing tokens on this locker: [`Lock::fence`](crate::Lock::fence) and
    /// [`Acquire::with_fence`] answer [`Error::InvalidArgument`], so no counter is ever
    /// written through it (e.g. for an ACL user without the counters' key pattern).
    ///
    /// Fences are taken only when asked for, so a locker whose holders never read them
    /// costs the same with or without this.
    ///
    /// ```
    /// # async fn demo(conn: redis::aio::MultiplexedConnection) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::new(conn).without_fences();
    /// let lock = locker.acquire("session:9f2c", Duration::from_secs(5)).await?;
    /// assert!(lock.fence().await.unwrap_err().is_invalid_argument());
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn without_fences(self) -> Locker<C> {
        self.edit(|context| context.fences.enabled = false)
    }

    /// Keeps each fence counter for `retention` after its last use (default
    /// [`DEFAULT_FENCE_RETENTION`](crate::limits::DEFAULT_FENCE_RETENTION), a day), so that keys
    /// locked once do not leave a counter forever. A counter that expired counts on from the
    /// server's clock in microseconds, so fences stay strictly increasing across its expiry
    /// as long as the server's clock is not set back by `retention` or more (the exact
    /// condition is in [Fencing tokens](crate#fencing-tokens)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a retention below a second or above
    /// [`MAX_TTL`](crate::limits::MAX_TTL).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::Locker;
    /// let locker = Locker::in_memory().with_fence_retention(Duration::from_secs(3600))?;
    /// let lock = locker.acquire("ledger", Duration::from_secs(10)).with_fence().await?;
    /// lock.release().await?;
    /// let left = locker.connection().keys(); // the fence counter, kept for an hour
    /// assert_eq!(left.len(), 1);
    /// assert_eq!(locker.connection().ttl(&left[0]), Some(Duration::from_secs(3600)));
    /// assert!(Locker::in_memory().with_fence_retention(Duration::ZERO).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_fence_retention(self, retention: Duration) -> Result<Locker<C>, Error> {
        if retention < MIN_FENCE_RETENTION || retention > args::MAX_TTL {
            return Err(Error::invalid(
                Argument::Fences,
                format!(
                    "a fence retention of {retention:?} is outside 1s..={}ms",
                    args::MAX_TTL.as_millis()
                ),
            ));
        }
        let retention_ms = retention.as_millis() as u64;
        Ok(self.edit(|context| context.fences.retention_ms = retention_ms))
    }

    /// How long fence counters are kept after their last use.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// assert_eq!(locker.fence_retention(), redmutex::limits::DEFAULT_FENCE_RETENTION); // a day
    /// let locker = locker.with_fence_retention(Duration::from_secs(3600))?;
    /// assert_eq!(locker.fence_retention(), Duration::from_secs(3600));
    /// # Ok(()) }
    /// ```
    pub fn fence_retention(&self) -> Duration {
        Duration::from_millis(self.context.fences.retention_ms)
    }

    /// The keys of one lock, with the prefix; on a cluster, checked to share a hash slot.
    /// Waiting lockers line up beside them only where one node decides and not on a
    /// cluster (see `Context::lined`); elsewhere the keys carry no lines, so that a release
    /// names no line that nobody can have joined (on Redlock, a line key less to send and
    /// to check on every node, each cycle). A cluster's are announced on shard channels
    /// (see [`Channels`](crate::token::Channels)).
    pub(crate) fn keys<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Keys, Error> {
        let keys = Keys::new(&self.prefix, keys)?;
        if self.is_cluster() {
            args::check_one_slot(&keys)?;
            return Ok(keys.without_lines().sharded());
        }
        if self.context.backend.quorum_settings().is_some() {
            return Ok(keys.without_lines());
        }
        Ok(keys)
    }

    /// Whether fences may be taken (see [`without_fences`](Locker::without_fences)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().without_fences();
    /// assert!(!locker.fences());
    /// let acquire = locker.acquire("ledger", Duration::from_secs(10));
    /// let lock = if locker.fences() { acquire.with_fence().await? } else { acquire.await? };
    /// assert_eq!(lock.fence_if_taken(), None);
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fences(&self) -> bool {
        self.context.fences.enabled
    }

    /// Wakes acquires that wait for a held lock as soon as it is released, instead of
    /// leaving them to poll: give one [`redis::Client`] per node (the same servers as the
    /// locker's connections, in the same order), for the subscriber connection this locker
    /// opens on each when an acquire first waits. (Anything that converts into a
    /// [`WakeUpSource`] will do: an in-memory server, with the feature `memory`.)
    ///
    /// How it works: an acquire that finds the key held and may wait (its
    /// [retry strategy](Acquire::retry) has a next pause) subscribes, marks the holder's
    /// value as awaited, and re-checks once the subscription is confirmed. On one node the
    /// waiting processes line up beside the key in the order they came: a release hands
    /// the key (a semaphore's permits) to the first process in line and tells that process
    /// alone, so a hand-off costs one message and one try however many processes wait, and
    /// nobody else takes the key meanwhile. On Redlock and a cluster the release announces
    /// itself on the key's channel and the woken waiters race for the key. Within a
    /// process, waiters are woken one at a time. Releases nobody waits for publish
    /// nothing, so the uncontended path costs the same as without wake-up.
    ///
    /// The retry strategy stays in force as the fallback, for what no message announces: a
    /// holder that died and let its key expire, a subscriber connection that dropped (it
    /// reconnects by itself). With wake-up, long pauses (e.g.
    /// [`retry::constant`](crate::retry::constant) of a second) cost nothing in latency.
    /// The deadline bounds the wait as before.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the number of clients differs from the number of
    /// nodes, or when a cluster locker is not given a cluster client (or another locker
    /// is).
    ///
    /// ```
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locker = redmutex::Locker::new(conn).with_wake_up([client])?;
    ///
    /// // Woken by the holder's release; polls once a second only as a fallback.
    /// let lock = locker
    ///     .acquire("daily-export", Duration::from_secs(30))
    ///     .retry(retry::constant(Duration::from_secs(1)))
    ///     .deadline(Duration::from_secs(60))
    ///     .await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    #[doc(alias = "pubsub")]
    pub fn with_wake_up(
        self,
        clients: impl IntoIterator<Item = impl Into<WakeUpSource>>,
    ) -> Result<Locker<C>, Error> {
        let sources: Vec<WakeUpSource> = clients.into_iter().map(Into::into).collect();
        let nodes = self.nodes().len();
        if sources.len() != nodes {
            return Err(Error::invalid(
                Argument::Nodes,
                format!(
                    "wake-up needs one client per node: {} given for {nodes}",
                    sources.len()
                ),
            ));
        }
        if let Some(source) = sources.iter().find(|s| s.sharded() != self.is_cluster()) {
            let why = match source.sharded() {
                true => {
                    "a cluster client is for a cluster locker (Locker::cluster); give one \
                         redis::Client per node"
                }
                false => {
                    "a cluster locker's wake-up needs WakeUpSource::cluster(nodes): \
                          releases are announced on shard channels, each heard from its \
                          own slot's master only"
                }
            };
            return Err(Error::invalid(Argument::Nodes, why));
        }
        let hub = Arc::new(Hub::new(sources, self.context.backend.needed()));
        Ok(self.edit(|context| context.hub = Some(hub)))
    }

    /// Whether [`with_wake_up`](Locker::with_wake_up) is on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::{memory::MemoryRedis, Locker};
    /// let redis = MemoryRedis::new();
    /// let polling = Locker::new(redis.clone());
    /// assert!(!polling.wakes_up());
    /// assert!(polling.with_wake_up([&redis])?.wakes_up());
    /// assert!(Locker::in_memory_on(&redis).wakes_up());
    /// # Ok(()) }
    /// ```
    pub fn wakes_up(&self) -> bool {
        self.context.hub.is_some()
    }

    /// Whether wake-up works right now: off, idle (nobody waited yet), connecting, working,
    /// or failing with the error of the node that fails — e.g. an ACL user that may not
    /// `SUBSCRIBE`. A failure is also logged once per change through `tracing`
    /// (`warn!`). Waiters poll per their retry strategy meanwhile.
    ///
    /// ```
    /// # fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) {
    /// if let redmutex::WakeUpState::Failing { node, error } = locker.wake_up_state() {
    ///     eprintln!("wake-up is not working on node {node}: {error}");
    /// }
    /// # }
    /// ```
    pub fn wake_up_state(&self) -> WakeUpState {
        (self.context.hub.as_ref()).map_or(WakeUpState::Off, |hub| hub.state())
    }

    /// Redlock: judge quorums with `settings` (node timeout, drift allowance, minimum
    /// validity). No effect on a single-node locker.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let drift = QuorumSettings::new().drift_factor(0.0).fixed_drift(Duration::from_millis(100));
    /// let locker = Locker::redlock(nodes)?.with_quorum_settings(drift);
    /// let start = tokio::time::Instant::now();
    /// let lock = locker.acquire("billing-run", Duration::from_secs(10)).await?;
    /// // Valid for the TTL less the time taken (none here) and the 100 ms drift allowance:
    /// assert_eq!(lock.valid_until(), start + Duration::from_millis(9_900));
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_quorum_settings(self, settings: QuorumSettings) -> Locker<C> {
        match self.context.backend.with_settings(settings) {
            Some(backend) => self.edit(|context| {
                context.backend = backend;
                // Leases already kept alive stay with the renewer of the old settings.
                context.renewer = Arc::new(RenewerSlot::new());
            }),
            None => self,
        }
    }

    /// How much less than its TTL every claim is trusted for, because the servers' clocks
    /// may run faster than this client's: `ttl × factor + fixed` (see
    /// [`safety`](crate::safety), "The holder's validity"). One node's default is 1 % of the
    /// TTL; Redlock's, 1 % and 2 ms ([`QuorumSettings`], whose drift part this sets). The
    /// same allowance lengthens what a [minimum hold](crate::Acquire::min_hold) asks the
    /// servers to keep. A `factor` outside 0..=1 counts as the nearest of the two; NaN as
    /// 0. Claims held already keep the allowance they were taken with.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let ttl = Duration::from_secs(10);
    /// let locker = redmutex::Locker::in_memory();
    /// let start = tokio::time::Instant::now();
    /// let lock = locker.acquire("job", ttl).await?;
    /// assert_eq!(lock.valid_until(), start + Duration::from_millis(9_900)); // 1 % less
    /// lock.release().await?;
    /// // Hosts whose clocks may run 5 % apart, and a coarse clock on top:
    /// let careful = locker.with_drift(0.05, Duration::from_millis(20));
    /// let lock = careful.acquire("job", ttl).await?;
    /// assert_eq!(lock.valid_until(), start + Duration::from_millis(9_480));
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_drift(self, factor: f64, fixed: Duration) -> Locker<C> {
        let drift = crate::quorum::Drift::new(factor, fixed);
        self.edit(|context| {
            context.backend = context.backend.with_drift(drift);
            // Leases already kept alive stay with the renewer of the old allowance.
            context.renewer = Arc::new(RenewerSlot::new());
        })
    }

    /// Makes every write of a lock count only once replicas confirm it: each acquire try
    /// that obtains, each refresh, keep-alive renewal and fence is followed by `WAIT`
    /// (`WAITAOF` with [`Replication::on_disk`]) on the same connection. An acquire that
    /// too few replicas confirm within the timeout is undone and ends with
    /// [`Error::NotReplicated`]; a refresh or fence so refused does not count (the lock's
    /// validity stays what it was); an unconfirmed renewal counts as failed, and a lease
    /// that no renewal gets confirmed for in time is lost. This narrows — it does not
    /// close — the window in which a failover to a replica loses a held lock: exactly
    /// what it covers is in [`safety`](crate::safety), "Replica confirmation".
    ///
    /// The wait holds the connection: on a multiplexed connection, other requests queue
    /// behind it for up to the timeout while the replicas lag, so keep the timeout short
    /// and below the connection's response timeout.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero replicas, a timeout outside 1 ms..=60 s, a
    /// Redlock locker (independent masters), or a cluster connection (`WAIT` would go to
    /// every master, not the key's).
    ///
    /// ```
    /// # async fn demo(conn: redis::aio::ConnectionManager) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{Locker, Replication};
    /// let locker = Locker::new(conn).with_replication(Replication::new(1, Duration::from_millis(50)))?;
    /// match locker.acquire("payout:7", Duration::from_secs(10)).await {
    ///     Ok(lock) => { /* held, and on one replica */ lock.release().await?; }
    ///     Err(redmutex::Error::NotReplicated(why)) => eprintln!("replica lagging: {why}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn with_replication(self, replication: Replication) -> Result<Locker<C>, Error> {
        replication.check()?;
        let backend = self.context.backend.replicated(Some(replication))?;
        Ok(self.edit(|context| {
            context.backend = backend;
            // Leases already kept alive stay with the renewer of the old backend.
            context.renewer = Arc::new(RenewerSlot::new());
        }))
    }

    /// The quorum settings of a Redlock locker; `None` for a single node.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// let settings = QuorumSettings::new().node_timeout(Duration::from_millis(50));
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let redlock = Locker::redlock(nodes)?.with_quorum_settings(settings);
    /// assert_eq!(redlock.quorum_settings(), Some(&settings));
    /// let single = Locker::in_memory().with_quorum_settings(settings); // no effect
    /// assert_eq!(single.quorum_settings(), None);
    /// # Ok(()) }
    /// ```
    pub fn quorum_settings(&self) -> Option<&QuorumSettings> {
        self.context.backend.quorum_settings()
    }

    /// Prepends `prefix` to every key this locker touches, e.g. `"myapp:lock:"`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("myapp:lock:");
    /// let lock = locker.acquire("daily-export", Duration::from_secs(30)).await?;
    /// assert_eq!(locker.connection().keys(), [b"myapp:lock:daily-export".to_vec()]);
    /// assert!(locker.inspect("daily-export").await?.held); // every call adds the prefix
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_prefix(mut self, prefix: impl AsRef<[u8]>) -> Locker<C> {
        self.prefix = Arc::from(prefix.as_ref());
        self
    }

    /// The key prefix (empty by default).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// assert_eq!(locker.prefix(), b"");
    /// let locker = locker.with_prefix("myapp:lock:");
    /// let stored = [locker.prefix(), b"daily-export"].concat(); // the key as Redis has it
    /// let lock = locker.acquire("daily-export", Duration::from_secs(30)).await?;
    /// assert!(locker.connection().ttl(&stored).is_some());
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Names this locker in its metrics (the `locker` label, with the `metrics` feature):
    /// metrics are labelled by locker and kind, never by key, whose number has no bound.
    /// Counting starts afresh: [`stats`](Locker::stats) of the renamed locker count what
    /// it and its clones do from now on.
    ///
    /// ```
    /// # fn demo(conn: redis::aio::MultiplexedConnection) {
    /// let locker = redmutex::Locker::new(conn).with_name("billing");
    /// assert_eq!(locker.name(), Some("billing"));
    /// # }
    /// ```
    pub fn with_name(self, name: impl Into<String>) -> Locker<C> {
        let name: Arc<str> = Arc::from(name.into());
        self.edit(|context| context.meter = Arc::new(Meter::named(Some(name))))
    }

    /// The name given with [`with_name`](Locker::with_name), if any.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory();
    /// assert_eq!(locker.name(), None);
    /// let billing = locker.with_name("billing");
    /// assert_eq!(billing.clone().name(), Some("billing")); // clones keep it
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.context.meter.name()
    }

    /// What this locker and its clones did so far, and what they hold and wait for now
    /// (in the manner of a connection pool's statistics): counters read with relaxed
    /// atomics, cheap enough to call per request. See [`LockerStats`].
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// let stats = locker.stats();
    /// println!(
    ///     "{} held, {} waiting; {} acquired ({} after waiting), {} not obtained, {} lost",
    ///     stats.held, stats.waiting, stats.acquired, stats.acquired_after_waiting,
    ///     stats.not_obtained, stats.lost,
    /// );
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> LockerStats {
        self.context.meter.snapshot()
    }

    /// The connection this locker uses (for Redlock, the first node's).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// let redis = locker.connection(); // here the in-memory server, with its test helpers
    /// assert!(redis.ttl("job").is_some());
    /// redis.expire_now("job");
    /// assert!(lock.release().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn connection(&self) -> &C {
        &self.nodes()[0]
    }

    /// The connection of every node: one for a single-node locker, N for Redlock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker};
    /// assert_eq!(Locker::in_memory().nodes().len(), 1);
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let redlock = Locker::redlock(nodes)?;
    /// let lock = redlock.acquire("billing-run", Duration::from_secs(10)).await?;
    /// let holding = redlock.nodes().iter().filter(|node| node.ttl("billing-run").is_some());
    /// assert!(holding.count() >= 2); // a quorum of the three
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> &[C] {
        self.context.backend.nodes()
    }

    /// A counting semaphore named `name` (with this locker's prefix) that lets at most
    /// `limit` permits be held at once, across all processes; see [`Semaphore`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: a bad name (as for a lock key), a limit of 0 or above
    /// [`MAX_PERMITS`](crate::limits::MAX_PERMITS), or a Redlock locker — permits counted on each
    /// node apart do not add up: with 2 permits on 3 nodes, three holders can each hold a
    /// quorum (AB, BC, AC). Use one node (with Sentinel for failover) or a cluster.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let uploads = locker.semaphore("uploads", 8)?;
    /// let permit = uploads.acquire(1, Duration::from_secs(60)).await?;
    /// // ... at most 8 of these run at once in the fleet ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<[u8]>, limit: u32) -> Result<Semaphore<C>, Error> {
        Semaphore::new(self.context.clone(), self.keys([name])?, limit)
    }

    /// A fair lock on `key` (with this locker's prefix): its waiters, in every process, get
    /// it in the order they came; see [`FairLock`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: a bad key (as for [`acquire`](Locker::acquire)), or a
    /// Redlock locker — each node would keep its own queue, and no order would hold
    /// across them. Use one node (with Sentinel for failover) or a cluster.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let ledger = locker.fair_lock("ledger")?;
    /// let guard = ledger.acquire(Duration::from_secs(10))
    ///     .retry(retry::constant(Duration::from_millis(500)))
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, key: impl AsRef<[u8]>) -> Result<FairLock<C>, Error> {
        FairLock::new(self.context.clone(), self.keys([key])?)
    }

    /// A read-write lock on `key` (with this locker's prefix): many readers at once or one
    /// writer, and a waiting writer keeps new readers out; see [`RwLock`]. Works on every
    /// kind of locker: one node, Redlock, Redis Cluster.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: a bad key (as for [`acquire`](Locker::acquire)).
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let prices = locker.rw_lock("prices")?;
    /// let reading = prices.read(Duration::from_secs(10)).await?;
    /// // ... read; other readers may read too, no writer writes ...
    /// reading.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, key: impl AsRef<[u8]>) -> Result<RwLock<C>, Error> {
        Ok(RwLock::new(self.context.clone(), self.keys([key])?))
    }

    /// A leader election on `key` (with this locker's prefix): candidates campaign, one
    /// leads at a time for a term; see [`Election`]. Works on every kind of locker.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: a bad key (as for [`acquire`](Locker::acquire)), or a
    /// locker [`without_fences`](Locker::without_fences) — terms are fences.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::ConnectionManager>) -> Result<(), redmutex::Error> {
    /// let election = locker.election("scheduler")?;
    /// match election.leader().await? {
    ///     Some(leader) => println!("{} leads", leader.value),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn election(&self, key: impl AsRef<[u8]>) -> Result<Election<C>, Error> {
        Election::new(self.context.clone(), self.keys([key])?)
    }

    /// Starts acquiring a lock on `key` for `ttl`; configure and `.await` the returned
    /// [`Acquire`]. One try unless a retry strategy is given.
    ///
    /// The key is stored as `SET key token-flag-metadata NX PX ttl`, with a fresh 128-bit
    /// token from the OS CSPRNG.
    ///
    /// # Errors (when awaited)
    /// [`Error::NotObtained`] when the lock stayed held by someone else;
    /// [`Error::NoQuorum`] (Redlock) when too few nodes could be reached or agreed in time;
    /// [`Error::InvalidArgument`] for an empty or oversized key, a TTL outside
    /// [`MIN_TTL`](crate::limits::MIN_TTL)..=[`MAX_TTL`](crate::limits::MAX_TTL) or oversized
    /// metadata,
    /// before anything is sent; [`Error::Redis`] when every try failed on Redis errors, or
    /// at once on a non-transient one (authentication, permission).
    ///
    /// # Cancel safety
    /// See [`Acquire`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("daily-export", Duration::from_secs(30)).await?;
    /// let again = locker.acquire("daily-export", Duration::from_secs(30)).await; // one try
    /// assert!(again.unwrap_err().is_not_obtained());
    /// let empty = locker.acquire("", Duration::from_secs(30)).await;
    /// assert!(empty.unwrap_err().is_invalid_argument());
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquire<'a>(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Acquire<'a, C> {
        self.acquire_all([key], ttl)
    }

    /// Like [`acquire`](Locker::acquire), for several keys at once, all or nothing: when any
    /// key is held by someone else, no key is set. Keys must be distinct and non-empty.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // Move money between two accounts: lock both or neither.
    /// let lock = locker.acquire_all(["account:17", "account:42"], Duration::from_secs(5)).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_all<'a, K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        ttl: Duration,
    ) -> Acquire<'a, C> {
        Acquire::new(self.context.clone(), self.keys(keys), ttl)
    }

    /// Looks at `key` without owning it: held or free, remaining TTL, metadata. On a
    /// Redlock locker, also each node's view ([`LockInfo::nodes`]); a node that cannot be
    /// reached shows its error there rather than failing the call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or oversized key; [`Error::Redis`] (single
    /// node); [`Error::NoQuorum`] (Redlock) when too few nodes answer to tell whether the
    /// key is held: unknown is never reported as free or held.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let acquire = locker.acquire("deploy", Duration::from_secs(30)).metadata("by=ci job=812");
    /// let lock = acquire.with_fence().await?;
    /// let info = locker.inspect("deploy").await?;
    /// assert!(info.held);
    /// assert_eq!(info.metadata.as_deref(), Some("by=ci job=812"));
    /// assert!(info.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(30)));
    /// assert_eq!(info.fence, lock.fence_if_taken());
    /// lock.release().await?;
    /// assert!(!locker.inspect("deploy").await?.held);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: impl AsRef<[u8]>) -> Result<LockInfo, Error> {
        let keys = self.keys([key])?;
        let key = keys.get(0).expect("one key");
        let call = mutex::inspect_call(key, keys.channels());
        self.context
            .backend
            .inspect(&LockKeyReader { key }, &call)
            .await
    }

    /// Waits until `key` is free — released by its holder, or expired — without taking it:
    /// `Ok(true)` once it is free, `Ok(false)` when `timeout` passed first
    /// (`Duration::MAX`: no limit). For "wait until the job that holds it has finished".
    ///
    /// With [wake-up](Locker::with_wake_up), the holder's release wakes it at once (the
    /// holder is marked as awaited, as a waiting acquire marks it); without, it polls,
    /// backing off from 10 ms to a second. Either way no wait lasts past the holder's
    /// expiry, when the key has one. Redlock: free means a quorum of nodes answered that
    /// they do not hold it (a node that cannot be asked may hold it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key, before any request; [`Error::Redis`] (one
    /// node) when Redis cannot be asked; [`Error::NoQuorum`] (Redlock) when, at the
    /// timeout, too few nodes answer to tell whether the key is free — unknown is never
    /// answered as free or held (until then the wait goes on).
    ///
    /// # Cancel safety
    /// Cancel safe: it never takes the key; a holder it marked as awaited only publishes
    /// its release.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// if locker.wait_released("deploy", Duration::from_secs(60)).await? {
    ///     println!("the deploy finished (or its holder died): go on");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_released(
        &self,
        key: impl AsRef<[u8]>,
        timeout: Duration,
    ) -> Result<bool, Error> {
        let keys = self.keys([key])?;
        let (key, channels) = (keys.get(0).expect("one key"), keys.channels());
        let backend = &self.context.backend;
        // (Redlock: free only when a quorum of nodes answered "free", held when the holders
        // leave too few for a quorum; otherwise unknown, an error — see `LockKeyReader`.)
        let read = |mark: bool| async move {
            let call = mutex::await_call(key, mark, channels);
            backend.inspect(&LockKeyReader { key }, &call).await
        };
        let channel = channels.name(key, b"");
        waiting::until_free(self.context.hub.as_ref(), &channel, timeout, read).await
    }

    /// Releases the lock on `keys` held by `token`, for an owner that kept only the token
    /// (e.g. another process, or a script that ran `redmutex acquire`).
    ///
    /// # Errors
    /// As [`Lock::release`](crate::Lock::release), plus [`Error::InvalidArgument`] for bad keys.
    ///
    /// # Cancel safety
    /// If cancelled, the release may or may not have reached Redis.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("nightly", Duration::from_secs(600)).await?;
    /// let saved = lock.detach().to_string(); // e.g. written to a file for a later step
    /// // Another process, with the token it was given:
    /// let other = redmutex::Locker::in_memory_on(locker.connection());
    /// let token: redmutex::Token = saved.parse()?;
    /// other.release_with_token(["nightly"], &token).await?;
    /// assert!(other.release_with_token(["nightly"], &token).await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn release_with_token<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        token: &Token,
    ) -> Result<(), Error> {
        let claim: Arc<dyn Claim> = Arc::new(self.keys(keys)?);
        self.context
            .backend
            .release(&claim, token, None, None)
            .await
    }

    /// Sets a new TTL on the lock on `keys` held by `token`, if every key still holds it.
    ///
    /// # Errors
    /// As [`Lock::refresh`](crate::Lock::refresh), plus [`Error::InvalidArgument`] for bad keys.
    ///
    /// # Cancel safety
    /// If cancelled, the new TTL may or may not have been applied.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let token = locker.acquire("nightly", Duration::from_secs(60)).await?.detach();
    /// let other = redmutex::Locker::in_memory_on(locker.connection());
    /// other.refresh_with_token(["nightly"], &token, Duration::from_secs(600)).await?;
    /// assert!(locker.connection().ttl("nightly").unwrap() > Duration::from_secs(60));
    /// let stranger = redmutex::Token::generate()?;
    /// let refused = other.refresh_with_token(["nightly"], &stranger, Duration::from_secs(600));
    /// assert!(refused.await.unwrap_err().is_not_held());
    /// # other.release_with_token(["nightly"], &token).await?;
    /// # Ok(()) }
    /// ```
    pub async fn refresh_with_token<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        token: &Token,
        ttl: Duration,
    ) -> Result<(), Error> {
        let keys = self.keys(keys)?;
        let ttl_ms = args::ttl_millis(ttl)?;
        (self.context.backend)
            .refresh(&keys, token, ttl_ms, None)
            .await?;
        Ok(())
    }
}

impl<C: Connection> std::fmt::Debug for Locker<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::Locker;
    use redmutex_memory::MemoryRedis;

    #[test]
    fn lockers_line_up_only_where_one_node_decides_and_not_on_a_cluster() {
        let lined = |locker: &Locker<MemoryRedis>| locker.keys(["job"]).unwrap().lined();
        assert!(lined(&Locker::in_memory()));
        assert!(!lined(&Locker::cluster(MemoryRedis::new())));
        let nodes = (0..3).map(|_| MemoryRedis::new());
        assert!(!lined(&Locker::redlock(nodes).unwrap()));
    }
}
