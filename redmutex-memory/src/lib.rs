//! An in-process stand-in for a Redis server, for tests: **not for production** (its data
//! lives in one process and dies with it, so it coordinates nothing between processes).
//! Users of redmutex reach it as `redmutex::memory` (feature `memory`), and
//! `redmutex::Locker::in_memory()` is a locker over a new one.
//!
//! [`MemoryRedis`] is a connection, like redis-rs's (it implements
//! [`redis::aio::ConnectionLike`]), to a server that lives in memory: give it to
//! `redmutex::Locker::new` (or use `Locker::in_memory`, which adds push wake-up through
//! [`MemoryRedis::subscriber`]) and every primitive works as over Redis — owner checks,
//! fences, multi-key locks, wake-up, keep-alive and the lost signal, semaphores, fair and
//! read-write locks, elections — because the server runs redmutex's own Lua scripts (in
//! Lua 5.1, the version inside Redis) over an implementation of the commands they use. A
//! conformance suite runs the same cases against it and against real servers. It has no
//! replicas and answers no `WAIT`, so a locker with replication fails every acquire on it
//! with Redis's "unknown command" error.
//!
//! Time is tokio's: keys expire on [`tokio::time::Instant`], so a test that pauses the
//! clock (`#[tokio::test(start_paused = true)]`, `tokio::time::advance`) decides when a
//! TTL runs out, without sleeping. For faults, [`MemoryRedis::expire_now`] ends a key's
//! TTL at once, [`MemoryRedis::take_over`] lets another owner take a key,
//! [`MemoryRedis::restart_empty`] forgets everything as a server restarted without
//! persistence does, [`MemoryRedis::fail_over`] promotes a replica that had only what a
//! [`MemoryRedis::snapshot`] took, and [`MemoryRedis::fail_next`] makes the next requests fail as a
//! dropped connection would.
//!
//! ```
//! use std::time::Duration;
//! use redmutex::Locker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redmutex::Error> {
//! let locker = Locker::in_memory();
//! let lock = locker.acquire("job:nightly", Duration::from_secs(30)).await?;
//! // Another process would find it held:
//! let other = Locker::in_memory_on(locker.connection());
//! assert!(other.acquire("job:nightly", Duration::from_secs(30)).await.unwrap_err().is_not_obtained());
//! lock.release().await?;
//! # Ok(()) }
//! ```

mod broker;
mod glob;
mod keyspace;
mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::time::Instant;

use broker::Broker;
pub use broker::{Published, Subscriber};
use keyspace::{CommandError, Reply};
use server::Server;

/// A connection to an in-memory Redis stand-in, for tests: see the [crate] docs.
/// Clones share the same server; [`MemoryRedis::new`] makes another, empty one.
///
/// Not for production: it coordinates nothing between processes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, Locker};
///
/// let redis = MemoryRedis::new();
/// let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis)); // two "processes"
/// let lock = a.acquire("job", Duration::from_secs(30)).await?;
/// assert!(b.acquire("job", Duration::from_secs(30)).await.unwrap_err().is_not_obtained());
/// assert_eq!(redis.keys(), [b"job".to_vec()]);
/// assert!(redis.ttl("job").unwrap() <= Duration::from_secs(30));
/// lock.release().await?;
/// assert!(redis.keys().is_empty(), "nothing left behind");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryRedis {
    shared: Arc<Shared>,
}

/// The keys a replica holds: what [`MemoryRedis::snapshot`] took, for
/// [`MemoryRedis::fail_over`].
///
/// ```
/// let redis = redmutex::memory::MemoryRedis::new();
/// let replica = redis.snapshot();
/// assert!(replica.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct Snapshot(keyspace::Keyspace);

impl Snapshot {
    /// Whether it holds no key at all (expired ones included).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// assert!(!locker.connection().snapshot().is_empty()); // the lock's key
    /// lock.release().await?;
    /// assert!(locker.connection().snapshot().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct Shared {
    server: Mutex<Server>,
    broker: Arc<Broker>,
    /// The server's Unix time, in microseconds, at `origin`.
    origin_unix_us: u64,
    origin: Instant,
    /// How fast the server's clock runs against tokio's (1.0: as fast).
    rate: f64,
    /// Requests still to fail ([`MemoryRedis::fail_next`]).
    failures: AtomicU64,
    /// Requests answered or failed so far.
    requests: AtomicU64,
}

impl Default for MemoryRedis {
    fn default() -> Self {
        MemoryRedis::new()
    }
}

impl std::fmt::Debug for MemoryRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRedis")
            .field("requests", &self.requests())
            .finish_non_exhaustive()
    }
}

/// What [`MemoryRedis::take_over`] stores: no redmutex token, so no redmutex owner's.
const FOREIGN_VALUE: &[u8] = b"taken over by another owner";

impl MemoryRedis {
    /// A new, empty server. Its clock starts at the system's time and then runs on tokio's
    /// clock (paused when the test pauses it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker};
    /// let (one, other) = (MemoryRedis::new(), MemoryRedis::new());
    /// let lock = Locker::in_memory_on(&one).acquire("job", Duration::from_secs(30)).await?;
    /// assert_eq!(one.clone().keys(), [b"job".to_vec()]); // a clone: the same server
    /// assert!(other.keys().is_empty()); // another server knows nothing of it
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn new() -> MemoryRedis {
        MemoryRedis::with_clock(SystemTime::now(), 1.0)
    }

    /// A new, empty server whose clock reads `start` now and then runs `rate` times as
    /// fast as tokio's clock: 1.0 exactly as fast, 1.01 one percent fast (its keys expire
    /// early by the clients' clocks), 0.99 one percent slow. For tests of what a drifting
    /// server clock does, and of runs that must not depend on the time of day. A `rate`
    /// outside 0.5 to 2.0 counts as the nearest of the two; NaN as 1.0.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use redmutex::{memory::MemoryRedis, Locker};
    /// let fast = MemoryRedis::with_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000), 1.01);
    /// let lock = Locker::in_memory_on(&fast).acquire("job", Duration::from_secs(10)).await?;
    /// tokio::time::advance(Duration::from_millis(9_850)).await; // 9.95 s on the server's clock
    /// assert!(fast.ttl("job").is_some());
    /// tokio::time::advance(Duration::from_millis(60)).await; // 9.91 s here, 10.01 s there
    /// assert_eq!(fast.ttl("job"), None, "expired by the server's fast clock");
    /// assert!(lock.release().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn with_clock(start: SystemTime, rate: f64) -> MemoryRedis {
        let broker = Arc::new(Broker::default());
        let origin_unix_us =
            (start.duration_since(UNIX_EPOCH)).map_or(0, |since| since.as_micros() as u64);
        let rate = match rate.is_nan() {
            true => 1.0,
            false => rate.clamp(0.5, 2.0),
        };
        MemoryRedis {
            shared: Arc::new(Shared {
                server: Mutex::new(Server::new(broker.clone())),
                broker,
                origin_unix_us,
                origin: Instant::now(),
                rate,
                failures: AtomicU64::new(0),
                requests: AtomicU64::new(0),
            }),
        }
    }

    fn server(&self) -> MutexGuard<'_, Server> {
        lock(&self.shared.server)
    }

    /// The server's time in Unix microseconds: where it started, plus tokio's clock since
    /// (at the server's rate).
    fn now_us(&self) -> u64 {
        let elapsed = self.shared.origin.elapsed().as_micros() as u64;
        let elapsed = match self.shared.rate == 1.0 {
            true => elapsed,
            false => (elapsed as f64 * self.shared.rate) as u64,
        };
        self.shared.origin_unix_us + elapsed
    }

    /// Ends `key`'s time to live now, as if it had run out (the key as stored, with the
    /// locker's prefix). Its holder learns of it at its next renewal, refresh or release,
    /// as over Redis. Returns whether the key existed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("job", std::time::Duration::from_secs(30)).await?;
    /// assert!(locker.connection().expire_now("job"));
    /// assert!(lock.release().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn expire_now(&self, key: impl AsRef<[u8]>) -> bool {
        let now_us = self.now_us();
        (self.server()).with_keyspace(now_us, |keyspace, now_ms| {
            keyspace.expire_now(key.as_ref(), now_ms)
        })
    }

    /// Lets another owner take `key` for `ttl`, as if the holder's key had expired and
    /// someone else's lock were there now: whatever the key held is replaced by a value
    /// that is no redmutex owner's. The former holder's next renewal, refresh or release
    /// finds it lost; acquires find it held until `ttl` has passed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// locker.connection().take_over("job", Duration::from_secs(5));
    /// let tried = locker.acquire("job", Duration::from_secs(30)).await;
    /// assert!(tried.unwrap_err().is_not_obtained());
    /// # Ok(()) }
    /// ```
    pub fn take_over(&self, key: impl AsRef<[u8]>, ttl: Duration) {
        let now_us = self.now_us();
        let ttl_ms = ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
        let set: Vec<Vec<u8>> = vec![
            b"SET".to_vec(),
            key.as_ref().to_vec(),
            FOREIGN_VALUE.to_vec(),
            b"PX".to_vec(),
            ttl_ms.to_string().into_bytes(),
        ];
        let written = self.server().execute(&set, now_us);
        debug_assert!(written.is_ok(), "{written:?}");
    }

    /// Restarts the server without persistence: every key and every loaded script is
    /// forgotten, and subscriber connections are dropped (push wake-up connects again by
    /// itself). Holders find their locks lost at their next renewal, refresh or release;
    /// fences count on from the server's clock, as over Redis.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let mut lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// locker.connection().restart_empty();
    /// assert!(lock.refresh(Duration::from_secs(30)).await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn restart_empty(&self) {
        self.server().restart_empty();
        self.shared.broker.disconnect_all();
    }

    /// What a replica in sync with this server holds at this moment: every key, with its
    /// data and its expiry (replicas receive expiries as absolute times). Give it to
    /// [`fail_over`](Self::fail_over) later to promote that replica, having missed every
    /// write since.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let before = locker.connection().snapshot(); // the replica's last sync
    /// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// let after = locker.connection().snapshot();
    /// assert!(before.is_empty() && !after.is_empty());
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(self.server().snapshot())
    }

    /// A failover to a replica that holds `replica` (from [`snapshot`](Self::snapshot)):
    /// the server's keys become exactly those — every write since the snapshot is lost,
    /// a key deleted since is back, with its old expiry — its loaded scripts are
    /// forgotten, and subscriber connections are dropped (push wake-up connects again by
    /// itself), as clients reconnecting to a promoted replica find. The clock runs on.
    /// Holders whose writes were lost find their locks lost at their next renewal,
    /// refresh or release; this is the fault
    /// `redmutex::Locker::with_replication` narrows.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let replica = locker.connection().snapshot(); // before the lock: it missed it
    /// let mut lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// locker.connection().fail_over(&replica);
    /// assert!(lock.refresh(Duration::from_secs(30)).await.unwrap_err().is_not_held());
    /// // A rival now takes the lock the holder was told it has.
    /// let rival = locker.acquire("job", Duration::from_secs(30)).await?;
    /// # rival.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fail_over(&self, replica: &Snapshot) {
        self.server().fail_over(&replica.0);
        self.shared.broker.disconnect_all();
    }

    /// Makes the next `requests` requests fail with a transient connection error (an I/O
    /// error, as a dropped connection gives) before the server sees them: redmutex retries
    /// them as it would over Redis. A script call counts as one request; so does a
    /// pipeline. Adds to any failures still pending.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let locker = redmutex::Locker::in_memory();
    /// locker.connection().fail_next(2);
    /// let lock = locker
    ///     .acquire("job", Duration::from_secs(30))
    ///     .retry(retry::constant(Duration::from_millis(10)))
    ///     .await?; // the third try gets through
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fail_next(&self, requests: u64) {
        self.shared.failures.fetch_add(requests, Ordering::SeqCst);
    }

    /// How many requests this server was sent (those [`fail_next`](Self::fail_next) failed
    /// included): to check what an operation costs.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory();
    /// let redis = locker.connection();
    /// locker.inspect("job").await?; // the first call also loads its script
    /// let before = redis.requests();
    /// assert!(!locker.inspect("job").await?.held);
    /// assert_eq!(redis.requests() - before, 1); // one script call
    /// redis.fail_next(1);
    /// assert!(!locker.inspect("job").await?.held); // retried after the failure
    /// assert_eq!(redis.requests() - before, 3); // the failed request counted too
    /// # Ok(()) }
    /// ```
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// A subscriber connection to this server's pub/sub (what push wake-up listens on):
    /// subscribe it to channels, and every `PUBLISH` on one of them arrives on the
    /// receiver, until the [`Subscriber`] is dropped or the server restarts or fails over
    /// (the receiver then ends, as a connection to a restarted Redis does).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use redmutex_memory::{MemoryRedis, Published};
    ///
    /// let mut redis = MemoryRedis::new();
    /// let (subscriber, mut messages) = redis.subscriber();
    /// subscriber.subscribe([b"news".to_vec()]);
    /// let heard: i64 = redis::cmd("PUBLISH").arg("news").arg("hello").query_async(&mut redis).await?;
    /// assert_eq!(heard, 1);
    /// let message = messages.recv().await.expect("published");
    /// assert_eq!(message, Published { channel: b"news".to_vec(), payload: b"hello".to_vec() });
    /// drop(subscriber);
    /// assert!(messages.recv().await.is_none(), "the connection is closed");
    /// # Ok(()) }
    /// ```
    pub fn subscriber(&self) -> (Subscriber, tokio::sync::mpsc::UnboundedReceiver<Published>) {
        self.shared.broker.open()
    }

    /// Every key that exists now, sorted (to check that nothing was left behind).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire_all(["b", "a"], Duration::from_secs(30)).await?;
    /// assert_eq!(locker.connection().keys(), [b"a".to_vec(), b"b".to_vec()]);
    /// lock.release().await?;
    /// assert!(locker.connection().keys().is_empty()); // nothing left behind
    /// # Ok(()) }
    /// ```
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let now_us = self.now_us();
        let mut keys =
            (self.server()).with_keyspace(now_us, |keyspace, now_ms| keyspace.keys(now_ms));
        keys.sort();
        keys
    }

    /// How long `key` has left: `None` when it does not exist or never expires (redmutex
    /// writes no such key).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// tokio::time::advance(Duration::from_secs(10)).await; // the server's clock is tokio's
    /// assert_eq!(locker.connection().ttl("job"), Some(Duration::from_secs(20)));
    /// assert_eq!(locker.connection().ttl("no-such-key"), None);
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self, key: impl AsRef<[u8]>) -> Option<Duration> {
        let now_us = self.now_us();
        let ttl = (self.server()).with_keyspace(now_us, |keyspace, now_ms| {
            keyspace.ttl_ms(key.as_ref(), now_ms)
        });
        ttl.flatten().map(Duration::from_millis)
    }

    /// One request, as the server answers it (or fails it, when told to).
    fn answer(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.shared.requests.fetch_add(1, Ordering::SeqCst);
        self.injected_failure()?;
        let args = arguments(cmd);
        let now_us = self.now_us();
        Ok(value_of(self.server().execute(&args, now_us)))
    }

    /// A pending injected failure, used up.
    fn injected_failure(&self) -> RedisResult<()> {
        let failures = &self.shared.failures;
        let take = |left: u64| left.checked_sub(1);
        match failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, take) {
            Ok(_) => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset (injected by MemoryRedis::fail_next)",
            )
            .into()),
            Err(_) => Ok(()),
        }
    }
}

impl ConnectionLike for MemoryRedis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move { self.answer(cmd) })
    }

    /// A pipeline's commands run one after the other; a transaction's (`MULTI`…`EXEC`) at
    /// once, answered with one array as `EXEC` is.
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.shared.requests.fetch_add(1, Ordering::SeqCst);
            self.injected_failure()?;
            let now_us = self.now_us();
            let mut server = self.server();
            let replies: Vec<Value> = (pipeline.cmd_iter())
                .map(|cmd| value_of(server.execute(&arguments(cmd), now_us)))
                .collect();
            Ok(match pipeline.is_transaction() {
                true => vec![Value::Array(replies)],
                false => replies.into_iter().skip(offset).take(count).collect(),
            })
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

fn arguments(cmd: &Cmd) -> Vec<Vec<u8>> {
    (cmd.args_iter())
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes.to_vec(),
            // A cursor argument (redis-rs's `scan` iterators) starts at 0.
            _ => b"0".to_vec(),
        })
        .collect()
}

/// A reply as redis-rs reads it off the wire.
fn value_of(reply: Result<Reply, CommandError>) -> Value {
    match reply {
        Ok(reply) => value_of_reply(reply),
        Err(error) => {
            let line = format!(
                "-{}\r\n",
                error.to_string_reply().replace(['\r', '\n'], " ")
            );
            redis::parse_redis_value(line.as_bytes()).unwrap_or(Value::Nil)
        }
    }
}

fn value_of_reply(reply: Reply) -> Value {
    match reply {
        Reply::Nil => Value::Nil,
        Reply::Int(n) => Value::Int(n),
        Reply::Bulk(bytes) => Value::BulkString(bytes),
        Reply::Status("OK") => Value::Okay,
        Reply::Status(text) => Value::SimpleString(text.to_string()),
        Reply::Array(items) => Value::Array(items.into_iter().map(value_of_reply).collect()),
    }
}

/// `mutex`'s guard, poisoned or not: nothing here panics while holding one, and if
/// something did, the state it guards is still whole (never a second panic in a test's
/// `Drop`).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
