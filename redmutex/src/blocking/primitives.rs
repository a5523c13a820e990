//! The blocking handles of the other primitives: each wraps the async handle and hands
//! out the blocking [`Acquire`] and guards.

use std::future::IntoFuture;
use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};

use super::guard::{Acquire, Lease};
use super::runtime::Runtime;
use crate::connection::Connection;
use crate::engine::tally::FailedTry;
use crate::error::Error;
use crate::ops::listing::ListedLock;
use crate::primitives::election::{ElectionKey, Leader};
use crate::primitives::fair::FairKey;
use crate::primitives::rwlock::{ReadKey, WriteKey};
use crate::primitives::semaphore::Permits;

/// A counting semaphore: [`crate::Semaphore`], with blocking calls.
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let exports = locker.semaphore("exports", 3)?;
/// let permit = exports.acquire(1, Duration::from_secs(30)).deadline(Duration::from_secs(60)).call()?;
/// println!("{:?} in use", exports.inspect()?.and_then(|seen| seen.permits));
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore<C: Connection> {
    inner: crate::Semaphore<C>,
    runtime: Runtime,
}

impl<C: Connection> std::fmt::Debug for Semaphore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<C: Connection> Semaphore<C> {
    pub(crate) fn new(inner: crate::Semaphore<C>, runtime: Runtime) -> Semaphore<C> {
        Semaphore { inner, runtime }
    }

    /// `permits` permits for `ttl`: set it up, then [`call`](Acquire::call) it. See
    /// [`crate::Semaphore::acquire`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let exports = locker.semaphore("exports", 3)?;
    /// let two = exports.acquire(2, Duration::from_secs(30)).call()?;
    /// let one = exports.acquire(1, Duration::from_secs(30)).call()?;
    /// let refused = exports.acquire(1, Duration::from_secs(30)).call(); // one try: none left
    /// assert!(refused.unwrap_err().is_not_obtained());
    /// two.release()?;
    /// one.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, permits: u32, ttl: Duration) -> Acquire<C, Permits> {
        Acquire {
            inner: self.inner.acquire(permits, ttl),
            runtime: self.runtime.clone(),
        }
    }

    /// Who holds permits now: [`crate::Semaphore::inspect`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let exports = locker.semaphore("exports", 3)?;
    /// let permits = exports.acquire(2, Duration::from_secs(30)).metadata("host-7").call()?;
    /// let seen = exports.inspect()?.expect("held");
    /// assert_eq!(seen.permits, Some((2, 3)));
    /// assert_eq!(seen.holders[0].metadata.as_deref(), Some("host-7"));
    /// permits.release()?;
    /// assert!(exports.inspect()?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.inspect())?
    }

    /// The most permits held at once.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let exports = locker.semaphore("exports", 3)?;
    /// assert_eq!(exports.limit(), 3);
    /// let all = exports.acquire(exports.limit(), Duration::from_secs(30)).call()?; // all of it
    /// assert_eq!(exports.inspect()?.unwrap().permits, Some((3, 3)));
    /// all.release()?;
    /// # Ok(()) }
    /// ```
    pub fn limit(&self) -> u32 {
        self.inner.limit()
    }

    /// The semaphore's key, as stored in Redis.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::blocking::Locker::build(|| async {
    ///     Ok(redmutex::Locker::in_memory().with_prefix("app:"))
    /// })?;
    /// let exports = locker.semaphore("exports", 3)?;
    /// assert_eq!(exports.key(), b"app:exports"); // with the locker's prefix
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }
}

/// A fair lock: [`crate::FairLock`], with blocking calls.
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let deploys = locker.fair_lock("deploy")?;
/// let guard = deploys.acquire(Duration::from_secs(60)).deadline(Duration::from_secs(600)).call()?;
/// println!("{:?} waiting behind us", deploys.inspect()?.and_then(|seen| seen.waiters));
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock<C: Connection> {
    inner: crate::FairLock<C>,
    runtime: Runtime,
}

impl<C: Connection> std::fmt::Debug for FairLock<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<C: Connection> FairLock<C> {
    pub(crate) fn new(inner: crate::FairLock<C>, runtime: Runtime) -> FairLock<C> {
        FairLock { inner, runtime }
    }

    /// The lock for `ttl`, in arrival order: [`crate::FairLock::acquire`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let deploys = locker.fair_lock("deploy")?;
    /// let guard = deploys.acquire(Duration::from_secs(60)).call()?;
    /// assert!(deploys.inspect()?.is_some());
    /// guard.release()?;
    /// assert!(deploys.inspect()?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, ttl: Duration) -> Acquire<C, FairKey> {
        Acquire {
            inner: self.inner.acquire(ttl),
            runtime: self.runtime.clone(),
        }
    }

    /// The holder and the line: [`crate::FairLock::inspect`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let deploys = locker.fair_lock("deploy")?;
    /// let guard = deploys.acquire(Duration::from_secs(60)).call()?;
    /// let next = deploys.clone();
    /// let waiter = std::thread::spawn(move || {
    ///     let queued = next.acquire(Duration::from_secs(60)).deadline(Duration::from_secs(5));
    ///     queued.retry(redmutex::retry::constant(Duration::from_millis(10))).call()
    /// });
    /// while deploys.inspect()?.and_then(|seen| seen.waiters).unwrap_or(0) == 0 {
    ///     std::thread::sleep(Duration::from_millis(1)); // until the waiter is in line
    /// }
    /// guard.release()?; // the first in line gets it
    /// waiter.join().unwrap()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.inspect())?
    }

    /// The lock's key, as stored in Redis.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let deploys = locker.fair_lock("deploy")?;
    /// assert_eq!(deploys.key(), b"deploy");
    /// let guard = deploys.acquire(Duration::from_secs(60)).call()?;
    /// assert!(locker.connection().ttl(deploys.key()).is_some()); // the holder's key
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }
}

/// A read-write lock: [`crate::RwLock`], with blocking calls.
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let catalog = locker.rw_lock("catalog")?;
/// let read = catalog.read(Duration::from_secs(30)).call()?;
/// read.release()?;
/// let write = catalog.write(Duration::from_secs(30)).deadline(Duration::from_secs(5)).call()?;
/// let read = write.downgrade()?; // readers may join now
/// read.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock<C: Connection> {
    inner: crate::RwLock<C>,
    runtime: Runtime,
}

impl<C: Connection> std::fmt::Debug for RwLock<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<C: Connection> RwLock<C> {
    pub(crate) fn new(inner: crate::RwLock<C>, runtime: Runtime) -> RwLock<C> {
        RwLock { inner, runtime }
    }

    /// A read hold for `ttl`, shared with other readers: [`crate::RwLock::read`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let catalog = locker.rw_lock("catalog")?;
    /// let a = catalog.read(Duration::from_secs(30)).call()?;
    /// let b = catalog.read(Duration::from_secs(30)).call()?; // readers share it
    /// assert_eq!(catalog.inspect()?.unwrap().holder_count, 2);
    /// a.release()?;
    /// b.release()?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self, ttl: Duration) -> Acquire<C, ReadKey> {
        Acquire {
            inner: self.inner.read(ttl),
            runtime: self.runtime.clone(),
        }
    }

    /// The write hold for `ttl`, alone: [`crate::RwLock::write`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let catalog = locker.rw_lock("catalog")?;
    /// let write = catalog.write(Duration::from_secs(30)).call()?;
    /// let read = catalog.read(Duration::from_secs(30)).call(); // one try: the writer is alone
    /// assert!(read.unwrap_err().is_not_obtained());
    /// write.release()?;
    /// catalog.read(Duration::from_secs(30)).call()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self, ttl: Duration) -> Acquire<C, WriteKey> {
        Acquire {
            inner: self.inner.write(ttl),
            runtime: self.runtime.clone(),
        }
    }

    /// The readers, the writer and who waits: [`crate::RwLock::inspect`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let catalog = locker.rw_lock("catalog")?;
    /// let write = catalog.write(Duration::from_secs(30)).metadata("import").call()?;
    /// let seen = catalog.inspect()?.expect("held");
    /// assert_eq!(seen.kind, redmutex::state::LockKind::Lock); // a writer: nobody waits
    /// assert_eq!(seen.holders[0].metadata.as_deref(), Some("import"));
    /// write.release()?;
    /// assert!(catalog.inspect()?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.inspect())?
    }

    /// The lock's key, as stored in Redis.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let catalog = locker.rw_lock("catalog")?;
    /// assert_eq!(catalog.key(), b"catalog");
    /// let write = catalog.write(Duration::from_secs(30)).call()?;
    /// assert!(locker.connection().ttl(catalog.key()).is_some()); // the writer's key
    /// write.release()?;
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }
}

/// A leader election: [`crate::Election`], with blocking calls.
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("host-7").call()?; // waits until elected
/// println!("leading in term {}", leadership.term());
/// for change in election.observe().take(1) {
///     println!("leader now: {:?}", change?);
/// }
/// leadership.resign()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election<C: Connection> {
    inner: crate::Election<C>,
    runtime: Runtime,
}

impl<C: Connection> std::fmt::Debug for Election<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<C: Connection> Election<C> {
    pub(crate) fn new(inner: crate::Election<C>, runtime: Runtime) -> Election<C> {
        Election { inner, runtime }
    }

    /// The same election with leaderships of this TTL: [`crate::Election::with_ttl`].
    ///
    /// # Errors
    /// As the async call.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?.with_ttl(Duration::from_secs(3))?;
    /// assert_eq!(election.ttl(), Duration::from_secs(3));
    /// assert!(locker.election("scheduler")?.with_ttl(Duration::from_millis(2)).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(self, ttl: Duration) -> Result<Self, Error> {
        Ok(Election {
            inner: self.inner.with_ttl(ttl)?,
            runtime: self.runtime,
        })
    }

    /// Runs for leader with `value`: set it up, then [`call`](Campaign::call) it. See
    /// [`crate::Election::campaign`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let leadership = election.campaign("host-7").call()?; // nobody leads: elected at once
    /// assert_eq!(leadership.value(), "host-7");
    /// leadership.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn campaign(&self, value: impl Into<String>) -> Campaign<C> {
        Campaign {
            inner: self.inner.campaign(value),
            runtime: self.runtime.clone(),
        }
    }

    /// The current leader, if any: [`crate::Election::leader`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// assert_eq!(election.leader()?, None);
    /// let leadership = election.campaign("host-7").call()?;
    /// let leader = election.leader()?.expect("elected");
    /// assert_eq!((leader.value.as_str(), leader.term), ("host-7", Some(leadership.term())));
    /// # Ok(()) }
    /// ```
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        self.runtime.call(self.inner.leader())?
    }

    /// Every change of leader, as an iterator that blocks for the next one:
    /// [`crate::Election::observe`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let mut changes = election.observe();
    /// assert_eq!(changes.next().transpose()?, Some(None)); // nobody leads yet
    /// let leadership = election.campaign("host-7").call()?;
    /// let leader = changes.next().transpose()?.flatten().expect("a leader");
    /// assert_eq!(leader.value, "host-7");
    /// leadership.resign()?;
    /// assert_eq!(changes.next().transpose()?, Some(None)); // nobody leads again
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> Observe {
        Observe {
            changes: Box::pin(self.inner.observe()),
            runtime: self.runtime.clone(),
            refused: false,
        }
    }

    /// The election's key, as stored in Redis.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// assert_eq!(election.key(), b"scheduler");
    /// let leadership = election.campaign("host-7").call()?;
    /// assert!(locker.connection().ttl(election.key()).is_some()); // the leader holds it
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }

    /// The leader's lease TTL.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// assert_eq!(election.ttl(), redmutex::limits::DEFAULT_ELECTION_TTL);
    /// let leadership = election.campaign("host-7").call()?;
    /// let leader = election.leader()?.expect("elected");
    /// assert!(leader.ttl.unwrap() <= election.ttl()); // renewed before it runs out
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.inner.ttl()
    }
}

/// Leader changes, from [`Election::observe`]: each `next` waits for the next one. Inside
/// an async runtime it yields [`Error::InsideRuntime`] and ends.
///
/// ```
/// # fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::blocking::Locker::in_memory()?;
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("host-7").call()?;
/// let mut changes: redmutex::blocking::Observe = election.observe();
/// let now = changes.next().expect("it never ends")?; // first, the leader now
/// assert_eq!(now.map(|leader| leader.value).as_deref(), Some("host-7"));
/// # Ok(()) }
/// ```
#[must_use = "an iterator does nothing unless iterated"]
pub struct Observe {
    changes: Pin<Box<dyn Stream<Item = Result<Option<Leader>, Error>> + Send>>,
    runtime: Runtime,
    /// Set once a call was refused inside an async runtime: the iterator has ended.
    refused: bool,
}

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observe")
    }
}

impl Iterator for Observe {
    type Item = Result<Option<Leader>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.refused {
            return None;
        }
        match self.runtime.call(self.changes.next()) {
            Ok(change) => change,
            Err(refused) => {
                self.refused = true;
                Some(Err(refused))
            }
        }
    }
}

/// A blocking campaign: set it up like [`crate::Campaign`], then [`call`](Campaign::call).
///
/// ```
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// # let locker = redmutex::blocking::Locker::in_memory()?;
/// let election = locker.election("scheduler")?;
/// let campaign = election.campaign("host-7").deadline(Duration::from_secs(10));
/// assert_eq!(election.leader()?, None); // nothing sent yet
/// let leadership = campaign.call()?;
/// assert_eq!(election.leader()?.map(|leader| leader.value).as_deref(), Some("host-7"));
/// # Ok(()) }
/// ```
#[must_use = "a campaign does nothing until called"]
pub struct Campaign<C: Connection> {
    inner: crate::Campaign<'static, C>,
    runtime: Runtime,
}

impl<C: Connection> Campaign<C> {
    /// How long to wait for leadership: [`crate::Campaign::deadline`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let leader = election.campaign("host-1").call()?;
    /// let tried = election.campaign("host-2").deadline(Duration::from_millis(50)).call();
    /// assert!(tried.unwrap_err().is_not_obtained()); // host-1 kept leading
    /// # Ok(()) }
    /// ```
    pub fn deadline(self, deadline: Duration) -> Self {
        Campaign {
            inner: self.inner.deadline(deadline),
            runtime: self.runtime,
        }
    }

    /// How to wait while another leads: [`crate::Campaign::retry`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use redmutex::retry;
    /// let election = locker.election("scheduler")?;
    /// let first = election.campaign("host-1").call()?;
    /// let resigns = std::thread::spawn(move || first.resign());
    /// let second = election
    ///     .campaign("host-2")
    ///     .retry(retry::constant(Duration::from_millis(10)))
    ///     .deadline(Duration::from_secs(5))
    ///     .call()?;
    /// assert_eq!(second.value(), "host-2");
    /// resigns.join().unwrap()?;
    /// # Ok(()) }
    /// ```
    pub fn retry<S>(self, strategy: S) -> Self
    where
        S: IntoIterator<Item = Duration>,
        S::IntoIter: Send + 'static,
    {
        Campaign {
            inner: self.inner.retry(strategy),
            runtime: self.runtime,
        }
    }

    /// Called after each failed try, on the blocking API's own thread.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::sync::{Arc, Mutex};
    /// let election = locker.election("scheduler")?;
    /// let leader = election.campaign("host-1").call()?;
    /// let looks = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&looks);
    /// let tried = election
    ///     .campaign("host-2")
    ///     .on_failed_try(move |failed| log.lock().unwrap().push(failed.attempt))
    ///     .deadline(Duration::from_millis(50))
    ///     .call();
    /// assert!(tried.unwrap_err().is_not_obtained());
    /// assert_eq!(looks.lock().unwrap()[0], 1); // the first look found host-1 leading
    /// # Ok(()) }
    /// ```
    pub fn on_failed_try(self, observer: impl FnMut(&FailedTry<'_>) + Send + 'static) -> Self {
        Campaign {
            inner: self.inner.on_failed_try(observer),
            runtime: self.runtime,
        }
    }

    /// Waits until elected (or the deadline passes).
    ///
    /// # Errors
    /// As the async campaign; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let leadership = election.campaign("host-7").call()?;
    /// assert!(!leadership.is_lost()); // kept alive in the background from now on
    /// assert_eq!(election.leader()?.and_then(|leader| leader.term), Some(leadership.term()));
    /// # Ok(()) }
    /// ```
    pub fn call(self) -> Result<Leadership<C>, Error> {
        let inner = self.runtime.call(self.inner.into_future())??;
        Ok(Lease::new(inner, self.runtime))
    }
}

/// Leadership, kept alive in the background: [`crate::Leadership`], with blocking calls —
/// the blocking [`Lease`] over the election's key, with its term and value, proclaiming
/// and resigning. Dropping it resigns, waiting at most
/// [`RELEASE_WAIT_ON_DROP`](super::RELEASE_WAIT_ON_DROP).
///
/// ```
/// # fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::blocking::Locker::in_memory()?;
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("host-7").call()?;
/// assert!(!leadership.is_lost());
/// drop(leadership); // resigns
/// assert_eq!(election.leader()?, None);
/// # Ok(()) }
/// ```
pub type Leadership<C> = Lease<C, ElectionKey>;

/// What only a leadership has: its term and value, proclaiming and resigning.
impl<C: Connection> Lease<C, ElectionKey> {
    /// The term: a fence above every earlier leader's.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let first = election.campaign("host-1").call()?;
    /// let first_term = first.term();
    /// first.resign()?;
    /// let second = election.campaign("host-2").call()?;
    /// assert!(second.term() > first_term); // a resource can refuse writes fenced with first_term
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        self.inner().term()
    }

    /// The value it campaigned with, or proclaimed since.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let mut leadership = election.campaign("host-7").call()?;
    /// assert_eq!(leadership.value(), "host-7");
    /// leadership.proclaim("host-7 (draining)")?;
    /// assert_eq!(leadership.value(), "host-7 (draining)");
    /// # Ok(()) }
    /// ```
    pub fn value(&self) -> &str {
        self.inner().value()
    }

    /// Tells everyone a new value: [`crate::Leadership::proclaim`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let mut leadership = election.campaign("host-7").call()?;
    /// leadership.proclaim("host-7 (draining)")?;
    /// assert_eq!(election.leader()?.unwrap().value, "host-7 (draining)"); // for everyone
    /// # Ok(()) }
    /// ```
    pub fn proclaim(&mut self, value: impl Into<String>) -> Result<(), Error> {
        let (inner, runtime) = self.parts_mut();
        runtime.call(inner.proclaim(value))?
    }

    /// Steps down: [`crate::Leadership::resign`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// let election = locker.election("scheduler")?;
    /// let leadership = election.campaign("host-7").call()?;
    /// leadership.resign()?;
    /// assert_eq!(election.leader()?, None);
    /// let next = election.campaign("host-8").call()?; // elected at once
    /// assert!(next.term() > 0);
    /// # Ok(()) }
    /// ```
    pub fn resign(self) -> Result<(), Error> {
        let (inner, runtime) = self.take();
        runtime.call(inner.resign())?
    }
}
