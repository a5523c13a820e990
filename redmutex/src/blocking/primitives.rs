//! The blocking handles of the other primitives: each wraps the async handle and hands
//! out the blocking [`Acquire`] and guards.

use std::future::IntoFuture;
use std::pin::Pin;
use std::time::{Duration, Instant as StdInstant};

use futures_util::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::guard::Acquire;
use super::runtime::Runtime;
use super::RELEASE_WAIT_ON_DROP;
use crate::connection::Connection;
use crate::engine::lost::{LostReason, LostSignal};
use crate::engine::tally::FailedTry;
use crate::error::Error;
use crate::primitives::election::Leader;
use crate::primitives::fair::{FairKey, FairLockInfo};
use crate::primitives::rwlock::{ReadKey, RwLockInfo, WriteKey};
use crate::primitives::semaphore::{Permits, SemaphoreInfo};

/// A counting semaphore: [`crate::Semaphore`], with blocking calls.
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let exports = locker.semaphore("exports", 3)?;
/// let permit = exports.acquire(1, Duration::from_secs(30)).deadline(Duration::from_secs(60)).call()?;
/// println!("{} of 3 in use", exports.inspect()?.used);
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
    pub fn inspect(&self) -> Result<SemaphoreInfo, Error> {
        self.runtime.call(self.inner.inspect())?
    }

    /// The most permits held at once.
    pub fn limit(&self) -> u32 {
        self.inner.limit()
    }

    /// The semaphore's key, as stored in Redis.
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
/// println!("{} waiting behind us", deploys.inspect()?.waiters.len());
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
    pub fn inspect(&self) -> Result<FairLockInfo, Error> {
        self.runtime.call(self.inner.inspect())?
    }

    /// The lock's key, as stored in Redis.
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
    pub fn read(&self, ttl: Duration) -> Acquire<C, ReadKey> {
        Acquire {
            inner: self.inner.read(ttl),
            runtime: self.runtime.clone(),
        }
    }

    /// The write hold for `ttl`, alone: [`crate::RwLock::write`].
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
    pub fn inspect(&self) -> Result<RwLockInfo, Error> {
        self.runtime.call(self.inner.inspect())?
    }

    /// The lock's key, as stored in Redis.
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

    /// Runs for leader with `value`: set it up, then [`call`](Campaign::call) it. See
    /// [`crate::Election::campaign`].
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
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        self.runtime.call(self.inner.leader())?
    }

    /// Every change of leader, as an iterator that blocks for the next one:
    /// [`crate::Election::observe`].
    pub fn observe(&self) -> Observe {
        Observe {
            changes: Box::pin(self.inner.observe()),
            runtime: self.runtime.clone(),
        }
    }

    /// The election's key, as stored in Redis.
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }

    /// The leader's lease TTL.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl()
    }
}

/// Leader changes, from [`Election::observe`]: each `next` waits for the next one. Inside
/// an async runtime it yields [`Error::InsideRuntime`] and ends.
#[must_use = "an iterator does nothing unless iterated"]
pub struct Observe {
    changes: Pin<Box<dyn Stream<Item = Result<Option<Leader>, Error>> + Send>>,
    runtime: Runtime,
}

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observe")
    }
}

impl Iterator for Observe {
    type Item = Result<Option<Leader>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.runtime.call(self.changes.next()) {
            Ok(change) => change,
            Err(refused) => Some(Err(refused)),
        }
    }
}

/// A blocking campaign: set it up like [`crate::Campaign`], then [`call`](Campaign::call).
#[must_use = "a campaign does nothing until called"]
pub struct Campaign<C: Connection> {
    inner: crate::Campaign<'static, C>,
    runtime: Runtime,
}

impl<C: Connection> Campaign<C> {
    /// How long to wait for leadership: [`crate::Campaign::deadline`].
    pub fn deadline(self, deadline: Duration) -> Self {
        Campaign {
            inner: self.inner.deadline(deadline),
            runtime: self.runtime,
        }
    }

    /// How to wait while another leads: [`crate::Campaign::retry`].
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
    pub fn call(self) -> Result<Leadership<C>, Error> {
        let inner = self.runtime.call(self.inner.into_future())??;
        Ok(Leadership {
            inner: Some(inner),
            runtime: self.runtime,
        })
    }
}

/// Leadership, kept alive in the background: [`crate::Leadership`], with blocking calls.
/// Dropping it resigns, waiting at most [`RELEASE_WAIT_ON_DROP`].
#[must_use = "dropping a Leadership resigns it"]
pub struct Leadership<C: Connection> {
    inner: Option<crate::Leadership<C>>,
    runtime: Runtime,
}

impl<C: Connection> Leadership<C> {
    fn inner(&self) -> &crate::Leadership<C> {
        self.inner.as_ref().expect("held until given up")
    }

    /// The term: a fence above every earlier leader's.
    pub fn term(&self) -> u64 {
        self.inner().term()
    }

    /// The value it campaigned with, or proclaimed since.
    pub fn value(&self) -> &str {
        self.inner().value()
    }

    /// Until when it certainly leads, as of the last renewal.
    pub fn valid_until(&self) -> StdInstant {
        self.inner().valid_until().into_std()
    }

    /// Whether the leadership has ended.
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// A clonable view of the leadership's fate, for other threads.
    pub fn signal(&self) -> LostSignal {
        self.inner().signal()
    }

    /// A token cancelled when the leadership ends.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner().cancellation_token()
    }

    /// Waits until the leadership ends, and says why.
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] only.
    pub fn lost(&self) -> Result<LostReason, Error> {
        self.runtime.call(self.inner().lost())
    }

    /// Tells everyone a new value: [`crate::Leadership::proclaim`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    pub fn proclaim(&mut self, value: impl Into<String>) -> Result<(), Error> {
        let inner = self.inner.as_mut().expect("held until given up");
        self.runtime.call(inner.proclaim(value))?
    }

    /// Steps down: [`crate::Leadership::resign`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    pub fn resign(mut self) -> Result<(), Error> {
        let inner = self.inner.take().expect("held until given up");
        self.runtime.call(inner.resign())?
    }
}

impl<C: Connection> std::fmt::Debug for Leadership<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => inner.fmt(f),
            None => f.write_str("Leadership(given up)"),
        }
    }
}

impl<C: Connection> Drop for Leadership<C> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let resign = async move {
                let _ = inner.resign().await;
            };
            self.runtime.finish(resign, RELEASE_WAIT_ON_DROP);
        }
    }
}
