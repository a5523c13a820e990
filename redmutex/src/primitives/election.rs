//! Leader election, after etcd's `concurrency.Election`: candidates campaign for one key;
//! the leader holds it as a mutex does — its value is the lock's metadata, its term the
//! lock's fence — kept alive by a lease; everyone can read the leader and observe changes,
//! announced on a channel beside the key (`election.lua` has the operations of its own).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use redis::{Cmd, ScriptInvocation};
use tokio::time::Instant;

use crate::args::{self, Keys};
use crate::connection::Connection;
use crate::engine::acquire::Acquire;
use crate::engine::context::Context;
use crate::engine::inspect::{LockInfo, LockKeyReader};
use crate::engine::lease::{KeepAlive, Lease};
use crate::engine::waiting::Waiting;
use crate::error::{Argument, Error};
use crate::primitives::mutex;
use crate::retry::{self, Jitter, RetryExt};
use crate::scripts::{
    held, operations, send_notice, Call, ChangeViaRefresh, Claim, Conn, Obtain, ObtainTry,
    Operations, Waiter,
};
use crate::token::{Channels, Token};

operations!(
    "primitives/election.lua";
    PROCLAIM = "proclaim",
    ANNOUNCE = "announce",
);

/// How long a leader's lease lasts unless an election says otherwise
/// ([`Election::with_ttl`]): 15 s, renewed every 5 s — client-go's lease duration.
pub const DEFAULT_ELECTION_TTL: Duration = Duration::from_secs(15);

/// What an announcement to observers says: wake all of a locker's observers.
const EVERYONE: &str = "1000000";

/// A leader election: candidates in every process [`campaign`](Election::campaign); one
/// leads at a time, for a term, until it [resigns](Leadership::resign) or its lease is
/// lost; anyone can read the [`leader`](Election::leader) and
/// [`observe`](Election::observe) changes. Made by
/// [`Locker::election`](crate::Locker::election); cheap to clone.
///
/// **How it is kept** (the guarantee itself is in [`safety`](crate::safety)): the leader holds the
/// election's key as a lock, kept alive by a [`Lease`] (renewed every third of the TTL,
/// with the loud lost signal); its value is the lock's metadata and its **term** the lock's
/// fence, so terms only go up and a resource can refuse a deposed leader's writes. Every
/// change of leader or value is announced beside the key, for observers, who also poll so
/// that an expiry is noticed. Works on one node, Redlock (the term is the quorum's fence)
/// and Redis Cluster. Needs fences (not [`Locker::without_fences`](crate::Locker::without_fences)).
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::ConnectionManager>) -> Result<(), redmutex::Error> {
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("host-7:8080").await?; // waits until this one leads
/// println!("leading in term {}", leadership.term());
/// let outcome = leadership.run(async {
///     // ... schedule jobs; cancelled the moment the leadership is lost ...
/// }).await;
/// # let _ = outcome;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election<C: Connection> {
    context: Arc<Context<C>>,
    key: Keys,
    ttl: Duration,
}

impl<C: Connection> std::fmt::Debug for Election<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// The leader as anyone reads it ([`Election::leader`], [`Election::observe`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("host-7:8080").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!((leader.value.as_str(), leader.term), ("host-7:8080", Some(leadership.term())));
/// assert!(leader.ttl.unwrap() <= election.ttl());
/// # drop(leadership);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value it campaigned with, or proclaimed since.
    pub value: String,
    /// Its term: the fence it took when it won, above every earlier leader's (Redlock: as
    /// a quorum of the nodes store, whatever a rival's failed try left on a minority).
    pub term: Option<u64>,
    /// How long its lease lasts unless renewed.
    pub ttl: Option<Duration>,
}

impl Leader {
    /// Who leads, as `info` says; an error when nobody can tell (Redlock: nodes that did not
    /// answer might complete an owner's quorum — "nobody leads" would be a guess).
    fn from_info(info: LockInfo) -> Result<Option<Leader>, Error> {
        // (Redlock: foreign data or a rival's claim on a minority does not unseat the
        // owner holding a quorum.)
        let owned = info.owned.map_err(Error::NoQuorum)?;
        Ok(owned.then(|| Leader {
            value: info.metadata.unwrap_or_default(),
            term: info.fence,
            ttl: info.ttl,
        }))
    }

    /// The same leader with the same value (the TTL aside, which runs down).
    fn same(a: &Option<Leader>, b: &Option<Leader>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => a.term == b.term && a.value == b.value,
            _ => false,
        }
    }
}

impl<C: Connection> Election<C> {
    pub(crate) fn new(context: Arc<Context<C>>, key: Keys) -> Result<Election<C>, Error> {
        if !context.fences.enabled {
            return Err(Error::invalid(
                Argument::Fences,
                "an election's terms are fences: use a locker with fences (not without_fences)",
            ));
        }
        Ok(Election {
            context,
            key,
            ttl: DEFAULT_ELECTION_TTL,
        })
    }

    /// The leader's lease TTL ([`DEFAULT_ELECTION_TTL`] unless set): a leader that dies is
    /// replaced within it; it renews every third of it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] ([`Argument::Ttl`]) for a TTL a lease could not keep
    /// alive (as [`Lock::keep_alive`](crate::Lock::keep_alive) checks it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let election = locker.election("scheduler")?.with_ttl(Duration::from_secs(3))?;
    /// let leadership = election.campaign("host-7:8080").await?;
    /// assert!(locker.connection().ttl("scheduler").unwrap() <= Duration::from_secs(3));
    /// let too_short = locker.election("scheduler")?.with_ttl(Duration::from_millis(2));
    /// assert!(matches!(too_short, Err(redmutex::Error::InvalidArgument(e))
    ///     if e.argument == redmutex::error::Argument::Ttl));
    /// # drop(leadership);
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Self, Error> {
        args::ttl_millis(ttl)?;
        let quorum = self.context.backend.quorum_settings();
        KeepAlive::new().check(ttl, quorum)?;
        self.ttl = ttl;
        Ok(self)
    }

    /// The leader's lease TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let election = locker.election("scheduler")?;
    /// assert_eq!(election.ttl(), redmutex::limits::DEFAULT_ELECTION_TTL);
    /// let election = election.with_ttl(Duration::from_secs(6))?;
    /// assert_eq!(election.ttl(), Duration::from_secs(6));
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The election's key as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let election = locker.election("scheduler")?;
    /// assert_eq!(election.key(), b"app:scheduler");
    /// let leadership = election.campaign("host-7:8080").await?;
    /// assert!(locker.connection().keys().contains(&election.key().to_vec()));
    /// # drop(leadership);
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.key.get(0).expect("one key")
    }

    /// Starts a campaign with `value`; `.await` the returned [`Campaign`] to wait until
    /// this candidate leads, which hands out its [`Leadership`] (kept alive from then on).
    /// It waits for as long as it takes unless given a [`deadline`](Campaign::deadline);
    /// woken by the leader's release (with [wake-up](crate::Locker::with_wake_up)), never
    /// later than the leader's expiry, and otherwise polling, backing off from 10 ms to a
    /// third of the TTL (or as [`retry`](Campaign::retry) says).
    ///
    /// A campaign never outlives its connection: the first try that fails for any reason
    /// but "someone else leads" (a connection lost, a timeout, no quorum) ends it with that
    /// error — campaign again if you want to; it never wins later without a live lease.
    ///
    /// # Errors (when awaited)
    /// [`Error::InvalidArgument`] for a value over
    /// [`MAX_METADATA_LEN`](crate::limits::MAX_METADATA_LEN), before any request;
    /// [`Error::Redis`] / [`Error::NoQuorum`] as above; [`Error::NotObtained`] when a
    /// deadline passed first.
    ///
    /// # Cancel safety
    /// Cancel safe: a campaign dropped while it waits leaves nothing behind (an attempt
    /// whose fate is unknown is released in the background, as for any acquire).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::{memory::MemoryRedis, Locker};
    /// let redis = MemoryRedis::new();
    /// let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis)); // two processes
    /// let first = a.election("scheduler")?.campaign("host-a").await?;
    /// let election = b.election("scheduler")?;
    /// let waiting = tokio::spawn(async move { election.campaign("host-b").await });
    /// let first_term = first.term();
    /// first.resign().await?; // wakes the waiting candidate
    /// let second = waiting.await.unwrap()?;
    /// assert!(second.term() > first_term);
    /// # drop(second);
    /// # Ok(()) }
    /// ```
    pub fn campaign<'a>(&self, value: impl Into<String>) -> Campaign<'a, C> {
        let key = ElectionKey::new(self.key.clone());
        let pauses = retry::exponential(Duration::from_millis(10), self.ttl / 3);
        let acquire = Acquire::new(self.context.clone(), Ok(key), self.ttl)
            .metadata(value)
            .with_fence()
            .retry(pauses.jitter(Jitter::equal()))
            .deadline(Duration::MAX)
            .fail_fast();
        Campaign { acquire }
    }

    /// The current leader, if any, as anyone reads it.
    ///
    /// # Errors
    /// [`Error::Redis`] (one node) when Redis cannot be asked; [`Error::NoQuorum`]
    /// (Redlock) when too few nodes answer to tell who leads — including when no owner
    /// holds a quorum of the nodes that answered but the others might complete one:
    /// "nobody leads" is never a guess.
    ///
    /// Redlock: a candidate caught between taking its claim on a quorum and making its
    /// term durable there (its nodes still store different fences) is read again after
    /// short pauses, for up to a third of the TTL, so that the term reported is the one
    /// the leader is handed, not the previous leader's.
    ///
    /// A leader deposed by a forced release with the lock-delay
    /// ([`Locker::force_release`](crate::Locker::force_release)) is still reported, with its
    /// term, until its TTL ends — and observers hear no change meanwhile: it may still be
    /// acting on its leadership (which is why the lock-delay keeps every other campaign
    /// out, see [`safety`](crate::safety) 13). [`Locker::describe`](crate::Locker::describe)
    /// tells such a key apart ([`ListedLock::forced`](crate::state::ListedLock::forced)).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let election = locker.election("scheduler")?;
    /// assert_eq!(election.leader().await?, None);
    /// let leadership = election.campaign("host-7:8080").await?;
    /// let leader = election.leader().await?.expect("someone leads");
    /// assert_eq!(leader.value, "host-7:8080");
    /// assert_eq!(leader.term, Some(leadership.term()));
    /// leadership.resign().await?;
    /// assert_eq!(election.leader().await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let key = self.key();
        let call = mutex::inspect_call(key, self.key.channels());
        let settle_by = Instant::now() + (self.ttl / 3).min(SETTLE_AT_MOST);
        let mut pause = Duration::from_millis(2);
        loop {
            let view = LockKeyReader { key };
            let info = self.context.backend.inspect(&view, &call).await?;
            // A candidate that died between its claim and its term leaves its nodes
            // unsettled until the claim expires: after a while, the term as it stands.
            if !info.settling || Instant::now() + pause > settle_by {
                return Leader::from_info(info);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The leader now, then one item per change — a new leader, a new value, no leader —
    /// for as long as the stream is polled. Driven by the announcements of every change
    /// (with [wake-up](crate::Locker::with_wake_up)); a leader's expiry, which nobody
    /// announces, is noticed when it happens, and the leader is read again at least every
    /// third of the election's TTL in any case. A read that fails yields the error, and the
    /// stream goes on after a pause of half a second (or a third of the TTL, when that is
    /// shorter); the first read that works after it is yielded
    /// whether or not the leader changed, so that an outage's end is seen.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::ConnectionManager>) -> Result<(), redmutex::Error> {
    /// use futures_util::StreamExt;
    /// let election = locker.election("scheduler")?;
    /// let mut changes = Box::pin(election.observe());
    /// while let Some(change) = changes.next().await {
    ///     match change? {
    ///         Some(leader) => println!("{} leads (term {:?})", leader.value, leader.term),
    ///         None => println!("no leader"),
    ///     }
    /// #   break;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the stream unsubscribes (after a moment's linger).
    pub fn observe(
        &self,
    ) -> impl Stream<Item = Result<Option<Leader>, Error>> + Send + 'static + use<C> {
        let mut waiting = Waiting::new(self.context.hub.clone(), false, 1);
        waiting.join(Some(&observers_channel(self.key(), self.key.channels())));
        let observer = Observer {
            election: self.clone(),
            waiting,
            last: None,
            first: true,
            pause_first: false,
        };
        futures_util::stream::unfold(observer, |mut observer| async move {
            let item = observer.next_change().await;
            Some((item, observer))
        })
    }
}

/// A campaign being configured: `.await` it to wait until this candidate leads (see
/// [`Election::campaign`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// let election = locker.election("scheduler")?;
/// let campaign = election.campaign("host-7:8080").deadline(Duration::from_secs(5));
/// let leadership = campaign.await?; // nobody leads: won at the first look
/// assert_eq!(leadership.value(), "host-7:8080");
/// # drop(leadership);
/// # Ok(()) }
/// ```
#[must_use = "a campaign does nothing until awaited"]
pub struct Campaign<'a, C: Connection> {
    acquire: Acquire<'a, C, ElectionKey>,
}

impl<'a, C: Connection> Campaign<'a, C> {
    /// Gives up after `deadline` ([`Error::NotObtained`]); without one, a campaign waits
    /// until it leads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let redis = redmutex::memory::MemoryRedis::new();
    /// let a = redmutex::Locker::in_memory_on(&redis);
    /// let b = redmutex::Locker::in_memory_on(&redis);
    /// let leader = a.election("scheduler")?.campaign("host-a").await?;
    /// let campaign = b.election("scheduler")?.campaign("host-b");
    /// let tried = campaign.deadline(Duration::from_secs(2)).await;
    /// assert!(tried.unwrap_err().is_not_obtained()); // host-a led all along
    /// # drop(leader);
    /// # Ok(()) }
    /// ```
    pub fn deadline(self, deadline: Duration) -> Self {
        Campaign {
            acquire: self.acquire.deadline(deadline),
        }
    }

    /// How long to pause between looks while another leads (the leader's release wakes
    /// the campaign sooner with wake-up, and no pause lasts past the leader's expiry).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::retry;
    /// let redis = redmutex::memory::MemoryRedis::new();
    /// let a = redmutex::Locker::in_memory_on(&redis);
    /// let b = redmutex::Locker::in_memory_on(&redis);
    /// let leader = a.election("scheduler")?.campaign("host-a").await?;
    /// // One look and no waiting: lead now or not at all.
    /// let tried = b.election("scheduler")?.campaign("host-b").retry(retry::none()).await;
    /// assert!(tried.unwrap_err().is_not_obtained());
    /// # drop(leader);
    /// # Ok(()) }
    /// ```
    pub fn retry<S>(self, strategy: S) -> Self
    where
        S: IntoIterator<Item = Duration>,
        S::IntoIter: Send + 'a,
    {
        Campaign {
            acquire: self.acquire.retry(strategy),
        }
    }

    /// Called after every look that found another leader, as
    /// [`Acquire::on_failed_try`] is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// # let redis = redmutex::memory::MemoryRedis::new();
    /// # let a = redmutex::Locker::in_memory_on(&redis);
    /// # let b = redmutex::Locker::in_memory_on(&redis);
    /// let leader = a.election("scheduler")?.campaign("host-a").await?;
    /// let mut looks = Vec::new();
    /// let tried = (b.election("scheduler")?.campaign("host-b"))
    ///     .retry(retry::constant(Duration::from_millis(100)))
    ///     .deadline(Duration::from_secs(1))
    ///     .on_failed_try(|failed| looks.push(failed.attempt))
    ///     .await;
    /// assert!(tried.unwrap_err().is_not_obtained());
    /// assert!(looks.len() >= 5 && looks[0] == 1);
    /// # drop(leader);
    /// # Ok(()) }
    /// ```
    pub fn on_failed_try(
        self,
        observer: impl FnMut(&crate::engine::tally::FailedTry<'_>) + Send + 'a,
    ) -> Self {
        Campaign {
            acquire: self.acquire.on_failed_try(observer),
        }
    }
}

impl<'a, C: Connection> std::future::IntoFuture for Campaign<'a, C> {
    type Output = Result<Leadership<C>, Error>;
    type IntoFuture =
        std::pin::Pin<Box<dyn Future<Output = Result<Leadership<C>, Error>> + Send + 'a>>;

    /// # Cancel safety
    /// See [`Election::campaign`].
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let lock = self.acquire.await?;
            // The term, kept with the lock (`Lease::term`).
            lock.fence().await?;
            lock.keep_alive()
        })
    }
}

/// The state of one [`Election::observe`] stream.
struct Observer<C: Connection> {
    election: Election<C>,
    waiting: Waiting,
    last: Option<Leader>,
    /// The next read is yielded whatever it finds: the first, and the first after a
    /// failed one.
    first: bool,
    /// The last read failed: pause before the next.
    pause_first: bool,
}

impl<C: Connection> Observer<C> {
    async fn next_change(&mut self) -> Result<Option<Leader>, Error> {
        loop {
            let poll = Instant::now() + self.election.ttl / 3;
            if std::mem::take(&mut self.pause_first) {
                // No announcement comes while Redis does not answer: ask again soon.
                let again = Instant::now() + (self.election.ttl / 3).min(ASK_AGAIN_AFTER_FAILURE);
                self.waiting.pause(again).await;
                self.waiting.looked();
            }
            let leader = match self.election.leader().await {
                Ok(leader) => leader,
                Err(e) => {
                    // The next read that works is yielded whatever it finds: it tells
                    // the consumer that the leader is known again.
                    (self.pause_first, self.first) = (true, true);
                    return Err(e);
                }
            };
            if std::mem::take(&mut self.first) || !Leader::same(&self.last, &leader) {
                self.last = leader.clone();
                return Ok(leader);
            }
            // Unchanged: wait for an announcement, the leader's expiry, or the next poll.
            let expiry = (leader.as_ref())
                .and_then(|l| l.ttl)
                .map(|ttl| Instant::now() + ttl + Duration::from_millis(1));
            let wake = expiry.map_or(poll, |expiry| expiry.min(poll));
            self.waiting.pause(wake).await;
            self.waiting.looked();
        }
    }
}

/// The longest [`Election::leader`] waits for a new leader's term to settle on Redlock:
/// a campaign makes its term durable within one round trip of its claim.
const SETTLE_AT_MOST: Duration = Duration::from_secs(1);

/// How long an observer pauses after a read that failed (at most a third of the TTL).
const ASK_AGAIN_AFTER_FAILURE: Duration = Duration::from_millis(500);

/// The channel observers hear of changes on: the key and `:~e` (as `election.lua` names
/// it).
fn observers_channel(key: &[u8], channels: Channels) -> Vec<u8> {
    channels.name(key, b":~e")
}

/// A leader's hold on an election: the [`Lease`] over the election's key, with its
/// [`term`](Lease::term) and [`value`](Lease::value), and [`proclaim`](Lease::proclaim) and
/// [`resign`](Lease::resign) besides everything a lease does (renewed in the background;
/// its lost signal says the leadership is over). Dropping it resigns in the background.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("host-7:8080").await?;
/// assert!(!leadership.is_lost());
/// drop(leadership); // resigns in the background
/// tokio::time::sleep(Duration::from_millis(10)).await;
/// assert_eq!(election.leader().await?, None);
/// # Ok(()) }
/// ```
pub type Leadership<C> = Lease<C, ElectionKey>;

/// What only a leadership has: its term and value, proclaiming and resigning.
impl<C: Connection> Lease<C, ElectionKey> {
    /// The term: the fence taken when this candidate won, above every earlier leader's —
    /// pass it to resources that must refuse a deposed leader's writes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let election = locker.election("scheduler")?;
    /// let first = election.campaign("host-a").await?;
    /// let deposed = first.term();
    /// first.resign().await?;
    /// let second = election.campaign("host-b").await?;
    /// assert!(second.term() > deposed); // a resource refuses writes tagged `deposed` from now on
    /// # drop(second);
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        // Taken as it was won (see `Campaign`); never missing.
        self.fence_if_taken().unwrap_or_default()
    }

    /// The value it leads with (campaigned with, or proclaimed since).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let election = locker.election("scheduler")?;
    /// let leadership = election.campaign("host-7:8080").await?;
    /// assert_eq!(leadership.value(), "host-7:8080");
    /// assert_eq!(election.leader().await?.unwrap().value, leadership.value());
    /// # drop(leadership);
    /// # Ok(()) }
    /// ```
    pub fn value(&self) -> &str {
        self.metadata().unwrap_or_default()
    }

    /// Sets the leader's value for everyone to read, announced to observers; the lease's
    /// TTL is kept (not extended).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a value over
    /// [`MAX_METADATA_LEN`](crate::limits::MAX_METADATA_LEN), before any request;
    /// [`Error::NotHeld`] when this leadership is over (nothing changed);
    /// [`Error::Redis`] / [`Error::NoQuorum`] when it could not be confirmed (the old or
    /// the new value may stand).
    ///
    /// # Cancel safety
    /// If cancelled, the new value may or may not have been set; [`value`](Self::value)
    /// keeps the old one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let election = locker.election("scheduler")?;
    /// let mut leadership = election.campaign("host-7:8080").await?;
    /// leadership.proclaim("host-7:9090").await?;
    /// assert_eq!(leadership.value(), "host-7:9090");
    /// assert_eq!(election.leader().await?.unwrap().value, "host-7:9090");
    /// locker.connection().expire_now("scheduler"); // the lease ran out
    /// assert!(leadership.proclaim("host-7:7070").await.unwrap_err().is_not_held());
    /// assert_eq!(leadership.value(), "host-7:9090");
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        args::check_metadata(&value)?;
        let lock = self.lock();
        let mut call = PROCLAIM
            .script(lock.what().keys.channels())
            .prepare_invoke();
        call.key(lock.what().key())
            .arg(lock.token().as_bytes())
            .arg(value.as_bytes())
            .arg(EVERYONE);
        let via = ChangeViaRefresh {
            claim: lock.what().clone(),
            call,
        };
        let ttl_ms = args::ttl_millis(self.lease_ttl())?;
        let backend = &lock.context().backend;
        let valid_until = Some(self.valid_until());
        backend
            .refresh(&via, &lock.token(), ttl_ms, valid_until)
            .await?;
        self.set_metadata(value);
        Ok(())
    }

    /// Gives up the leadership: releases the key (announced to observers, and waking the
    /// next candidate).
    ///
    /// # Errors
    /// As [`Lease::release`]: [`Error::NotHeld`] if the leadership had been lost.
    ///
    /// # Cancel safety
    /// As [`Lease::release`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let election = locker.election("scheduler")?;
    /// let leadership = election.campaign("host-7:8080").await?;
    /// leadership.resign().await?;
    /// assert_eq!(election.leader().await?, None);
    /// let leadership = election.campaign("host-7:8080").await?;
    /// locker.connection().expire_now("scheduler"); // lost before it resigns
    /// assert!(leadership.resign().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<(), Error> {
        self.release().await
    }
}

/// What a [`Leadership`]'s lease holds: the election's key, as its leader.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use redmutex::{claim::ElectionKey, Lease};
/// let leadership = locker.election("scheduler")?.campaign("host-7:8080").await?;
/// let lease: Lease<_, ElectionKey> = leadership; // a leadership is a lease
/// assert!(!lease.is_lost());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ElectionKey {
    keys: Keys,
    /// What tells observers that the leader changed (see [`announcement`]).
    announcement: Cmd,
}

impl ElectionKey {
    fn new(keys: Keys) -> ElectionKey {
        let announcement = announcement(keys.get(0).expect("one key"), keys.channels());
        ElectionKey { keys, announcement }
    }

    /// The key, as stored in Redis (users read it from the guard: this type only
    /// appears as a guard's type parameter).
    pub(crate) fn key(&self) -> &[u8] {
        self.keys.get(0).expect("one key")
    }
}

/// The command that tells the election's observers that its leader changed; a hint (they
/// also poll), so one refused (an ACL user without the channel) or lost changes nothing. A
/// `PUBLISH`; on a cluster, the `announce` script, which publishes on the shard channel
/// (or, on a server without shard channels, as a `PUBLISH`: see `helpers.lua`'s
/// `announce_on`), sent whole since a node that lost its scripts must still hear it.
fn announcement(key: &[u8], channels: Channels) -> Cmd {
    match channels {
        Channels::Plain => redis::cmd("PUBLISH")
            .arg(observers_channel(key, channels))
            .arg(EVERYONE)
            .clone(),
        Channels::Sharded => redis::cmd("EVAL")
            .arg(ANNOUNCE.source(channels))
            .arg(1)
            .arg(key)
            .arg(EVERYONE)
            .clone(),
    }
}

held!(ElectionKey);

/// The mutex's claim on the key, with every change announced to observers: a win, and a
/// release (a resignation, or a dropped leadership).
impl Claim for ElectionKey {
    fn kind(&self) -> &'static str {
        "election"
    }

    fn keys(&self) -> &Keys {
        &self.keys
    }

    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        self.keys.script_keys(fenced, add);
    }

    fn operations(&self) -> &'static Operations {
        self.keys.operations()
    }

    /// The mutex's try; a candidate never lines its locker up (a key handed to a locker
    /// for a moment would read as a leader without a value).
    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        let waiter = (request.waiter).map(|waiter| Waiter {
            place: None,
            ..waiter
        });
        let request = ObtainTry { waiter, ..request };
        Box::pin(async move {
            let obtained = self.keys.obtain(&mut *conn, request).await?;
            if matches!(obtained, Obtain::Obtained { .. }) {
                send_notice(conn, Some(&self.announcement)).await;
            }
            Ok(obtained)
        })
    }

    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        self.keys.add_renewal(call, token, ttl_ms);
    }

    /// The lock's: the key, and its line where lockers line up — a candidate never joins
    /// it, but plain locks' and writers' waiters of the same name do, and a resignation
    /// hands the key to the first of them as any holder's release does.
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.keys.release_keys(add);
    }

    fn release_args(&self, token: &Token, keep_ms: u64, add: &mut dyn FnMut(&[u8])) {
        self.keys.release_args(token, keep_ms, add);
    }

    /// A release (a resignation, or a dropped leadership) tells observers at once.
    fn release_notice(&self) -> Option<Cmd> {
        Some(self.announcement.clone())
    }

    /// The lock's undo, unannounced: a failed try changed no leader.
    fn undo_unattended<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, ()> {
        self.keys.undo_unattended(conn, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observers_hear_on_a_channel_beside_the_key() {
        assert_eq!(
            observers_channel(b"app:sched", Channels::Plain),
            b"app:sched:~e".to_vec()
        );
    }

    #[test]
    fn a_change_is_a_new_term_or_value_not_a_shorter_ttl() {
        let leader = |term, value: &str, ttl| {
            Some(Leader {
                value: value.into(),
                term: Some(term),
                ttl: Some(Duration::from_millis(ttl)),
            })
        };
        assert!(Leader::same(&leader(3, "a", 900), &leader(3, "a", 100)));
        assert!(!Leader::same(&leader(3, "a", 900), &leader(4, "a", 900)));
        assert!(!Leader::same(&leader(3, "a", 900), &leader(3, "b", 900)));
        assert!(!Leader::same(&leader(3, "a", 900), &None));
        assert!(Leader::same(&None, &None));
    }

    #[test]
    fn the_proclamation_has_its_section() {
        assert!(PROCLAIM
            .source(Channels::Plain)
            .contains("local function owned("));
    }
}
