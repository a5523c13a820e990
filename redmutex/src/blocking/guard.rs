//! The blocking acquire and what it hands out: each wraps the async type of the same name
//! and waits for it on the dedicated runtime (see `runtime.rs`); what needs no waiting is
//! read through `Deref` on the async type, not written again here.

use std::future::IntoFuture;
use std::ops::Deref;
use std::time::{Duration, Instant as StdInstant};

use super::runtime::Runtime;
use super::RELEASE_WAIT_ON_DROP;
use crate::args::Keys;
use crate::connection::Connection;
use crate::engine::lease::KeepAlive;
use crate::engine::lost::LostReason;
use crate::engine::tally::FailedTry;
use crate::error::Error;
use crate::primitives::rwlock::{ReadKey, WriteKey};
use crate::scripts::Held;
use crate::token::Token;

/// A blocking acquire: set it up like [`crate::Acquire`], then [`call`](Acquire::call).
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let lock = locker
///     .acquire("job", Duration::from_secs(30))
///     .metadata("host=build-7")
///     .retry(redmutex::retry::constant(Duration::from_millis(200)))
///     .deadline(Duration::from_secs(10))
///     .call()?;
/// # lock.release()?;
/// # Ok(()) }
/// ```
#[must_use = "an acquire does nothing until called"]
pub struct Acquire<C: Connection, P = Keys> {
    pub(crate) inner: crate::Acquire<'static, C, P>,
    pub(crate) runtime: Runtime,
}

impl<C: Connection, P: Held> Acquire<C, P> {
    fn map(
        self,
        f: impl FnOnce(crate::Acquire<'static, C, P>) -> crate::Acquire<'static, C, P>,
    ) -> Self {
        Acquire {
            inner: f(self.inner),
            runtime: self.runtime,
        }
    }

    /// Metadata stored with the token: [`crate::Acquire::metadata`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).metadata("host=build-7").call()?;
    /// // Anyone can see who holds it:
    /// assert_eq!(locker.inspect("job")?.metadata.as_deref(), Some("host=build-7"));
    /// # lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn metadata(self, metadata: impl Into<String>) -> Self {
        let metadata = metadata.into();
        self.map(|inner| inner.metadata(metadata))
    }

    /// Takes a fence with the lock: [`crate::Acquire::with_fence`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("ledger", Duration::from_secs(30)).with_fence().call()?;
    /// let fence = lock.fence_if_taken().expect("taken with the lock");
    /// lock.release()?;
    /// let next = locker.acquire("ledger", Duration::from_secs(30)).with_fence().call()?;
    /// assert!(next.fence_if_taken().unwrap() > fence); // storage can refuse the older one
    /// # next.release()?;
    /// # Ok(()) }
    /// ```
    pub fn with_fence(self) -> Self {
        self.map(|inner| inner.with_fence())
    }

    /// How to wait for a held lock: [`crate::Acquire::retry`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let held = locker.acquire("job", Duration::from_millis(50)).call()?;
    /// std::mem::forget(held); // a holder that died: the key expires after 50 ms
    /// let lock = locker
    ///     .acquire("job", Duration::from_secs(30))
    ///     .retry(redmutex::retry::constant(Duration::from_millis(10)))
    ///     .deadline(Duration::from_secs(1))
    ///     .call()?; // tried every 10 ms until it was free
    /// # lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn retry<S>(self, strategy: S) -> Self
    where
        S: IntoIterator<Item = Duration>,
        S::IntoIter: Send + 'static,
    {
        self.map(|inner| inner.retry(strategy))
    }

    /// How long to wait in all: [`crate::Acquire::deadline`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let held = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// let started = std::time::Instant::now();
    /// let busy = locker.acquire("job", Duration::from_secs(30));
    /// let busy = busy.deadline(Duration::from_millis(50)).call();
    /// assert!(busy.unwrap_err().is_not_obtained());
    /// assert!(started.elapsed() < Duration::from_secs(1)); // gave up at the deadline
    /// # held.release()?;
    /// # Ok(()) }
    /// ```
    pub fn deadline(self, deadline: Duration) -> Self {
        self.map(|inner| inner.deadline(deadline))
    }

    /// Called after each failed try: [`crate::Acquire::on_failed_try`]. It runs on the
    /// blocking API's own thread.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// use std::sync::{Arc, Mutex};
    /// let held = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// let tries = Arc::new(Mutex::new(Vec::new()));
    /// let seen = tries.clone();
    /// let busy = locker
    ///     .acquire("job", Duration::from_secs(30))
    ///     .retry(redmutex::retry::constant(Duration::from_millis(10)))
    ///     .deadline(Duration::from_millis(200))
    ///     .on_failed_try(move |failed| seen.lock().unwrap().push(failed.attempt))
    ///     .call();
    /// assert!(busy.unwrap_err().is_not_obtained());
    /// assert_eq!(tries.lock().unwrap()[..2], [1, 2]); // told of every failed try
    /// # held.release()?;
    /// # Ok(()) }
    /// ```
    pub fn on_failed_try(self, observer: impl FnMut(&FailedTry<'_>) + Send + 'static) -> Self {
        self.map(|inner| inner.on_failed_try(observer))
    }

    /// Keeps what is released held until then: [`crate::Acquire::min_hold`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// // Hourly: a fast run keeps the key for the hour, so no other host runs it again.
    /// let lock = locker.acquire("report:hourly", Duration::from_secs(60))
    ///     .min_hold(Duration::from_secs(3600))
    ///     .call()?;
    /// lock.release()?; // done quickly
    /// assert!(locker.inspect("report:hourly")?.held);
    /// let again = locker.acquire("report:hourly", Duration::from_secs(60)).call();
    /// assert!(again.unwrap_err().is_not_obtained());
    /// # Ok(()) }
    /// ```
    pub fn min_hold(self, min_hold: Duration) -> Self {
        self.map(|inner| inner.min_hold(min_hold))
    }

    /// Tries (and waits, as the retry strategy says) until the lock is obtained.
    ///
    /// # Errors
    /// As the async acquire; [`Error::InsideRuntime`] on a thread that runs an async
    /// runtime.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// match locker.acquire("job", Duration::from_secs(30)).call() {
    ///     Ok(lock) => lock.release()?, // ... after the work
    ///     Err(e) if e.is_not_obtained() => println!("someone else runs it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn call(self) -> Result<Lock<C, P>, Error> {
        let inner = self.runtime.call(self.inner.into_future())??;
        Ok(Lock::new(inner, self.runtime))
    }
}

/// A held lock (or permit, or read or write hold): [`crate::Lock`], with blocking calls.
/// Dropping it releases it, waiting at most [`RELEASE_WAIT_ON_DROP`] (inside an async
/// runtime the release is only started).
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let mut lock = locker.acquire("job", Duration::from_secs(30)).with_fence().call()?;
/// let fence = lock.fence()?; // taken with the lock: no round trip
/// lock.refresh(Duration::from_secs(60))?; // Err(NotHeld) if it was lost
/// println!("fence {fence}, {:?} left", lock.ttl()?);
/// lock.release()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lock releases it; keep it alive while the guarded work runs"]
pub struct Lock<C: Connection, P: Held = Keys> {
    // `None` only once it was given up (released, kept alive, detached).
    inner: Option<crate::Lock<C, P>>,
    runtime: Runtime,
}

impl<C: Connection, P: Held> Lock<C, P> {
    pub(crate) fn new(inner: crate::Lock<C, P>, runtime: Runtime) -> Lock<C, P> {
        Lock {
            inner: Some(inner),
            runtime,
        }
    }

    fn inner(&self) -> &crate::Lock<C, P> {
        self.inner.as_ref().expect("held until given up")
    }

    fn take(mut self) -> (crate::Lock<C, P>, Runtime) {
        let inner = self.inner.take().expect("held until given up");
        (inner, self.runtime.clone())
    }

    /// Until when the lock is certainly held unless refreshed, on this process's clock.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// use std::time::Instant;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// assert!(lock.valid_until() <= Instant::now() + Duration::from_secs(30));
    /// assert!(lock.valid_until() > Instant::now()); // act only before it
    /// # lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> StdInstant {
        self.inner().valid_until().into_std()
    }

    /// The fence for this holder: [`crate::Lock::fence`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("ledger", Duration::from_secs(30)).call()?;
    /// let fence = lock.fence()?; // send it with every write the lock guards
    /// assert_eq!(lock.fence()?, fence); // one per acquisition
    /// lock.release()?;
    /// let next = locker.acquire("ledger", Duration::from_secs(30)).call()?;
    /// assert!(next.fence()? > fence);
    /// # next.release()?;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> Result<u64, Error> {
        self.runtime.call(self.inner().fence())?
    }

    /// Runs `writes` only while this owner holds the lock: [`crate::Lock::write_if_held`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job:7", Duration::from_secs(30)).call()?;
    /// let mut writes = redmutex::Writes::new();
    /// writes.add(redis::cmd("INCR").arg("job:7:runs"), ["job:7:runs"]);
    /// assert_eq!(lock.write_if_held(&writes)?, [redis::Value::Int(1)]);
    /// locker.connection().expire_now("job:7"); // lost meanwhile
    /// assert!(lock.write_if_held(&writes).unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn write_if_held(&self, writes: &crate::Writes) -> Result<Vec<redis::Value>, Error> {
        self.runtime.call(self.inner().write_if_held(writes))?
    }

    /// How long the lock has left, as Redis says: [`crate::Lock::ttl`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// let ttl = lock.ttl()?; // as the server counts it
    /// assert!(ttl <= Duration::from_secs(30) && ttl > Duration::from_secs(29));
    /// locker.connection().expire_now("job"); // expired meanwhile
    /// assert!(lock.ttl().unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Result<Duration, Error> {
        self.runtime.call(self.inner().ttl())?
    }

    /// Extends the lock to `ttl` from now: [`crate::Lock::refresh`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let mut lock = locker.acquire("job", Duration::from_secs(10)).call()?;
    /// lock.refresh(Duration::from_secs(60))?; // the work takes longer than planned
    /// assert!(lock.ttl()? > Duration::from_secs(10));
    /// locker.connection().take_over("job", Duration::from_secs(60)); // someone else has it
    /// assert!(lock.refresh(Duration::from_secs(60)).unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn refresh(&mut self, ttl: Duration) -> Result<(), Error> {
        let inner = self.inner.as_mut().expect("held until given up");
        self.runtime.call(inner.refresh(ttl))?
    }

    /// Releases the lock: [`crate::Lock::release`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`] (the lock is then released in the
    /// background, as a dropped one is).
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// lock.release()?;
    /// assert!(!locker.inspect("job")?.held);
    /// let late = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// locker.connection().expire_now("job");
    /// assert!(late.release().unwrap_err().is_not_held()); // it had expired
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<(), Error> {
        let (inner, runtime) = self.take();
        runtime.call(inner.release())?
    }

    /// Keeps the lock alive in the background: [`crate::Lock::keep_alive`]. Renewals run
    /// on the blocking API's own thread, however long the caller's thread is busy.
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_millis(600)).call()?.keep_alive()?;
    /// std::thread::sleep(Duration::from_millis(800)); // longer than the TTL: renewed meanwhile
    /// assert!(!lease.is_lost() && lease.renewals() >= 1);
    /// lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn keep_alive(self) -> Result<Lease<C, P>, Error> {
        self.keep_alive_with(KeepAlive::new())
    }

    /// [`keep_alive`](Lock::keep_alive) with settings of your own.
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// use redmutex::KeepAlive;
    /// let settings = KeepAlive::new().interval(Duration::from_millis(50));
    /// let lock = locker.acquire("job", Duration::from_millis(600)).call()?;
    /// let lease = lock.keep_alive_with(settings)?;
    /// std::thread::sleep(Duration::from_millis(200)); // renewed every 50 ms
    /// assert!(lease.renewals() >= 2);
    /// let too_slow = KeepAlive::new().interval(Duration::from_secs(1)); // not below the TTL
    /// let lock = locker.acquire("other", Duration::from_millis(300)).call()?;
    /// assert!(lock.keep_alive_with(too_slow).unwrap_err().is_invalid_argument());
    /// # lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn keep_alive_with(self, settings: KeepAlive) -> Result<Lease<C, P>, Error> {
        let (inner, runtime) = self.take();
        // Inside the runtime, where the renewer is started.
        let lease = runtime.call(async move { inner.keep_alive_with(settings) })??;
        Ok(Lease::new(lease, runtime))
    }

    /// Gives the lock up without releasing it: [`crate::Lock::detach`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("deploy", Duration::from_secs(300)).call()?;
    /// let token = lock.detach(); // not released on drop: it lives on until its TTL
    /// assert!(locker.inspect("deploy")?.held);
    /// locker.release_with_token(["deploy"], &token)?; // later, maybe by another program
    /// # Ok(()) }
    /// ```
    pub fn detach(self) -> Token {
        let (inner, _) = self.take();
        inner.detach()
    }
}

impl<C: Connection> Lock<C, WriteKey> {
    /// Turns the write lock into a read lock without letting go: see
    /// [`WriteGuard::downgrade`](crate::WriteGuard::downgrade).
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let catalog = locker.rw_lock("catalog")?;
    /// let writer = catalog.write(Duration::from_secs(30)).call()?;
    /// // ... write ...; then keep reading without letting another writer in between:
    /// let reader = writer.downgrade()?;
    /// let another = catalog.read(Duration::from_secs(30)).call()?; // readers share again
    /// assert!(catalog.write(Duration::from_secs(30)).call().unwrap_err().is_not_obtained());
    /// # reader.release()?;
    /// # another.release()?;
    /// # Ok(()) }
    /// ```
    pub fn downgrade(self) -> Result<Lock<C, ReadKey>, Error> {
        let (inner, runtime) = self.take();
        let read = runtime.call(inner.downgrade())??;
        Ok(Lock::new(read, runtime))
    }
}

impl<C: Connection, P: Held> Deref for Lock<C, P> {
    type Target = crate::Lock<C, P>;

    /// The async lock inside, for what needs no waiting: its token, metadata, fence if
    /// taken, key or permits, lease TTL and remaining validity.
    fn deref(&self) -> &crate::Lock<C, P> {
        self.inner()
    }
}

impl<C: Connection, P: Held> std::fmt::Debug for Lock<C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => inner.fmt(f),
            None => f.write_str("Lock(given up)"),
        }
    }
}

impl<C: Connection, P: Held> Drop for Lock<C, P> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let release = async move {
                let _ = inner.release().await;
            };
            self.runtime.finish(release, RELEASE_WAIT_ON_DROP);
        }
    }
}

/// A lock kept alive in the background: [`crate::Lease`], with blocking calls. Dropping
/// it stops renewal and releases it, waiting at most [`RELEASE_WAIT_ON_DROP`].
///
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// let lease = locker.acquire("job", Duration::from_secs(10)).call()?.keep_alive()?;
/// let signal = lease.signal(); // for another thread
/// std::thread::spawn(move || {
///     while !signal.is_lost() { /* a step of the work */ }
/// });
/// if let Some(reason) = lease.lost_within(Duration::from_secs(60))? {
///     eprintln!("lost: {reason}");
/// }
/// lease.release().ok();
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lease stops renewal and releases the lock"]
pub struct Lease<C: Connection, P: Held = Keys> {
    inner: Option<crate::Lease<C, P>>,
    runtime: Runtime,
}

impl<C: Connection, P: Held> Lease<C, P> {
    pub(super) fn new(inner: crate::Lease<C, P>, runtime: Runtime) -> Lease<C, P> {
        Lease {
            inner: Some(inner),
            runtime,
        }
    }

    pub(super) fn inner(&self) -> &crate::Lease<C, P> {
        self.inner.as_ref().expect("held until given up")
    }

    /// The async lease, to change, and the runtime to run the change on.
    pub(super) fn parts_mut(&mut self) -> (&mut crate::Lease<C, P>, &Runtime) {
        let inner = self.inner.as_mut().expect("held until given up");
        (inner, &self.runtime)
    }

    pub(super) fn take(mut self) -> (crate::Lease<C, P>, Runtime) {
        let inner = self.inner.take().expect("held until given up");
        (inner, self.runtime.clone())
    }

    /// Until when the lock is certainly held, as of the last renewal.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_millis(600)).call()?.keep_alive()?;
    /// let first = lease.valid_until();
    /// std::thread::sleep(Duration::from_millis(300));
    /// assert!(lease.valid_until() > first); // moved on by the renewal
    /// # lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> StdInstant {
        self.inner().valid_until().into_std()
    }

    /// Waits at most `timeout` for another process to ask this holder to let go (see
    /// [`crate::Lease::release_requested`]): whether one did.
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] only.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_millis(300)).call()?.keep_alive()?;
    /// assert!(!lease.release_requested_within(Duration::from_millis(50))?); // nobody asked
    /// # lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release_requested_within(&self, timeout: Duration) -> Result<bool, Error> {
        // The timer is made inside the runtime (the async block runs there).
        let waited =
            async { tokio::time::timeout(timeout, self.inner().release_requested()).await };
        Ok(self.runtime.call(waited)?.is_ok())
    }

    /// Waits until the lease ends, and says why.
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] only.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_millis(300)).call()?.keep_alive()?;
    /// locker.connection().take_over("job", Duration::from_secs(60));
    /// let reason = lease.lost()?; // blocks until the lease is lost
    /// assert!(matches!(reason, redmutex::LostReason::NotHeld));
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> Result<LostReason, Error> {
        self.runtime.call(self.inner().lost())
    }

    /// Waits at most `timeout` for the lease to end: the reason if it did.
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] only.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_millis(300)).call()?.keep_alive()?;
    /// assert!(lease.lost_within(Duration::from_millis(50))?.is_none()); // still held
    /// locker.connection().expire_now("job");
    /// assert!(lease.lost_within(Duration::from_secs(5))?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn lost_within(&self, timeout: Duration) -> Result<Option<LostReason>, Error> {
        // The timer is made inside the runtime (the async block runs there).
        let waited = async { tokio::time::timeout(timeout, self.inner().lost()).await };
        Ok(self.runtime.call(waited)?.ok())
    }

    /// The fence for this holder: [`crate::Lock::fence`] (a lease is its lock, renewed).
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_secs(30)).call()?.keep_alive()?;
    /// let fence = lease.fence()?; // taken once, kept by every renewal
    /// assert_eq!(lease.fence()?, fence);
    /// # lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> Result<u64, Error> {
        self.runtime.call(self.inner().fence())?
    }

    /// Runs `writes` only while this owner holds the lock:
    /// [`crate::Lock::write_if_held`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_secs(30)).call()?.keep_alive()?;
    /// let mut writes = redmutex::Writes::new();
    /// writes.add(redis::cmd("SET").arg("job:state").arg("done"), ["job:state"]);
    /// lease.write_if_held(&writes)?;
    /// # lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn write_if_held(&self, writes: &crate::Writes) -> Result<Vec<redis::Value>, Error> {
        self.runtime.call(self.inner().write_if_held(writes))?
    }

    /// Stops renewal and releases the lock: [`crate::Lease::release`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_secs(30)).call()?.keep_alive()?;
    /// lease.release()?; // renewal stops, the key is freed
    /// assert!(!locker.inspect("job")?.held);
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<(), Error> {
        let (inner, runtime) = self.take();
        runtime.call(inner.release())?
    }

    /// Stops renewal and gives back the lock, still held: [`crate::Lease::stop`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("job", Duration::from_secs(30)).call()?.keep_alive()?;
    /// let mut lock = lease.stop(); // no more renewals; still held
    /// assert!(locker.inspect("job")?.held);
    /// lock.refresh(Duration::from_secs(60))?; // by hand from now on
    /// # lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn stop(self) -> Lock<C, P> {
        let (inner, runtime) = self.take();
        Lock::new(inner.stop(), runtime)
    }
}

impl<C: Connection, P: Held> Deref for Lease<C, P> {
    type Target = crate::Lease<C, P>;

    /// The async lease inside, for what needs no waiting: whether it is lost, its
    /// renewals, its signal and cancellation token — and, through it, the lock's token,
    /// metadata, fence if taken, key or permits and remaining validity.
    fn deref(&self) -> &crate::Lease<C, P> {
        self.inner()
    }
}

impl<C: Connection, P: Held> std::fmt::Debug for Lease<C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => inner.fmt(f),
            None => f.write_str("Lease(given up)"),
        }
    }
}

impl<C: Connection, P: Held> Drop for Lease<C, P> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let release = async move {
                let _ = inner.release().await;
            };
            self.runtime.finish(release, RELEASE_WAIT_ON_DROP);
        }
    }
}
