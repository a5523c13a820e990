//! The same locks for programs that are not async (command-line tools, build scripts, sync
//! web frameworks): feature `blocking`.
//!
//! Every type here wraps the async type of the same name — one implementation under both
//! APIs, so every guarantee of [`safety`](crate::safety) holds as stated there. As in
//! `reqwest::blocking`, a runtime of the locker's own, on one dedicated thread, drives the
//! connections and runs what goes on in the background: keep-alive renewals, push wake-up,
//! releases of dropped guards. Renewals therefore go on while the calling thread is busy
//! (or blocked in a long computation); a blocking call runs its request on the calling
//! thread and returns when it is answered.
//!
//! - **Inside an async runtime** every blocking call returns [`Error::InsideRuntime`]
//!   instead of panicking or stalling the runtime: use the async API there.
//! - **A dropped guard** ([`Lock`], [`Lease`], [`Leadership`]) is released (or resigned),
//!   and the drop waits for the release at most [`RELEASE_WAIT_ON_DROP`]; past that, or
//!   inside an async runtime, the release goes on in the background.
//! - The runtime's thread ends when the last locker, handle and guard made from it is
//!   gone.
//!
//! ```no_run
//! use std::time::Duration;
//! use redmutex::{blocking, retry};
//!
//! # fn main() -> Result<(), redmutex::Error> {
//! let locker = blocking::Locker::connect("redis://127.0.0.1:6379")?;
//! let lock = locker
//!     .acquire("job:nightly", Duration::from_secs(30))
//!     .retry(retry::constant(Duration::from_millis(200)))
//!     .deadline(Duration::from_secs(10))
//!     .call()?;
//! let lease = lock.keep_alive()?; // renewed on the locker's thread from now on
//! for step in 0..100 {
//!     if lease.is_lost() {
//!         break; // stop at once: someone else may hold it now
//!     }
//!     // ... step `step` of the work ...
//! }
//! lease.release()?;
//! # Ok(()) }
//! ```

mod guard;
mod primitives;
mod runtime;

use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::connection::Connection;
use crate::engine::inspect::LockInfo;
use crate::engine::meter::LockerStats;
use crate::error::Error;
use crate::ops::listing::ListedLock;
use crate::token::Token;
pub use guard::{Acquire, Lease, Lock};
pub use primitives::{Campaign, Election, FairLock, Leadership, Observe, RwLock, Semaphore};
use runtime::Runtime;

/// How long dropping a blocking guard waits for its release (or resignation) to be
/// confirmed before letting it finish in the background.
pub const RELEASE_WAIT_ON_DROP: Duration = Duration::from_secs(1);

/// A [`crate::Locker`] with blocking calls, and a runtime of its own (see the
/// [module](self) docs). Cheap to clone; clones share the runtime.
///
/// # Examples
/// ```no_run
/// # fn main() -> Result<(), redmutex::Error> {
/// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
/// match locker.acquire("job", std::time::Duration::from_secs(30)).call() {
///     Ok(lock) => lock.release()?,
///     Err(e) if e.is_not_obtained() => println!("someone else runs it"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker<C: Connection> {
    inner: crate::Locker<C>,
    runtime: Runtime,
}

impl<C: Connection> std::fmt::Debug for Locker<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Locker")
            .field(&self.inner)
            .finish()
    }
}

impl Locker<ConnectionManager> {
    /// Connects to `url` ([`crate::connection::connect`]) with push wake-up
    /// ([`crate::Locker::with_wake_up`]) over a second connection to the same server.
    ///
    /// # Errors
    /// As [`crate::connection::connect`]; [`Error::InsideRuntime`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::blocking::Locker::connect("redis://127.0.0.1:6379")?;
    /// let lock = locker.acquire("nightly", std::time::Duration::from_secs(30)).call()?;
    /// lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn connect(url: &str) -> Result<Locker<ConnectionManager>, Error> {
        let url = url.to_string();
        Locker::build(move || async move {
            let client = redis::Client::open(url.as_str())?;
            let conn = crate::connection::connect_client(client.clone()).await?;
            crate::Locker::new(conn).with_wake_up([client])
        })
    }
}

#[cfg(feature = "memory")]
impl Locker<redmutex_memory::MemoryRedis> {
    /// A blocking locker over a new in-memory server, for tests: see
    /// [`crate::Locker::in_memory`]. Not for production.
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] only.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::blocking::Locker::in_memory()?;
    /// let lock = locker.acquire("job", std::time::Duration::from_secs(30)).call()?;
    /// lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn in_memory() -> Result<Locker<redmutex_memory::MemoryRedis>, Error> {
        Locker::build(|| async { Ok(crate::Locker::in_memory()) })
    }
}

impl<C: Connection> Locker<C> {
    /// Builds any async locker — Redlock, cluster, Sentinel, TLS, your own settings —
    /// inside the new runtime, where its connections must be made (redis-rs starts their
    /// tasks on the runtime that creates them), and wraps it.
    ///
    /// # Errors
    /// What `build` returns; [`Error::InsideRuntime`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redmutex::Error> {
    /// let urls = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
    /// let locker = redmutex::blocking::Locker::build(move || async move {
    ///     let nodes = urls.iter().map(|url| redmutex::connection::connect_lazy(url)).collect::<Result<Vec<_>, _>>()?;
    ///     Ok(redmutex::Locker::redlock(nodes)?.with_prefix("myapp:"))
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn build<F, Fut>(build: F) -> Result<Locker<C>, Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<crate::Locker<C>, Error>>,
    {
        let runtime = Runtime::new()?;
        // `build` itself runs inside the runtime too: redis-rs may start tasks as soon as
        // a connection is made (even a lazy one).
        let inner = runtime.call(async { build().await })??;
        Ok(Locker { inner, runtime })
    }

    /// The async locker inside, for its settings and getters.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let locker = locker.clone(); // clones share the runtime
    /// assert_eq!(locker.as_async().prefix(), b"");
    /// assert!(!locker.as_async().is_cluster());
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::Locker<C> {
        &self.inner
    }

    /// The connection (the first node's, on Redlock).
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// // Here a `MemoryRedis`, with its helpers for tests:
    /// assert_eq!(locker.connection().keys(), [b"job".to_vec()]);
    /// # lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn connection(&self) -> &C {
        self.inner.connection()
    }

    /// Counters of this locker's acquisitions, waits, renewals and losses.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// let busy = locker.acquire("job", Duration::from_secs(30)).call();
    /// assert!(busy.unwrap_err().is_not_obtained());
    /// let stats = locker.stats();
    /// assert_eq!((stats.acquired, stats.not_obtained, stats.held), (1, 1, 1));
    /// lock.release()?;
    /// assert_eq!(locker.stats().held, 0);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> LockerStats {
        self.inner.stats()
    }

    fn wrap<P: Send + Sync + 'static>(
        &self,
        inner: crate::Acquire<'static, C, P>,
    ) -> Acquire<C, P> {
        Acquire {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// A lock on `key` for `ttl`: set it up, then [`call`](Acquire::call) it. See
    /// [`crate::Locker::acquire`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker
    ///     .acquire("nightly-report", Duration::from_secs(30))
    ///     .metadata("host=web-3")
    ///     .deadline(Duration::from_secs(5)) // wait up to 5 s for it
    ///     .call()?;
    /// assert_eq!(lock.metadata(), Some("host=web-3"));
    /// lock.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Acquire<C> {
        self.wrap(self.inner.acquire(key, ttl))
    }

    /// One lock on all of `keys`, all or nothing: [`crate::Locker::acquire_all`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let both = locker.acquire_all(["account:1", "account:2"], Duration::from_secs(10)).call()?;
    /// // All or nothing: one of the keys taken means none is.
    /// let overlap = locker.acquire_all(["account:2", "account:3"], Duration::from_secs(10));
    /// let overlap = overlap.call();
    /// assert!(overlap.unwrap_err().is_not_obtained());
    /// assert!(!locker.inspect("account:3")?.held);
    /// both.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_all<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        ttl: Duration,
    ) -> Acquire<C> {
        self.wrap(self.inner.acquire_all(keys, ttl))
    }

    /// A counting semaphore: [`crate::Locker::semaphore`].
    ///
    /// # Errors
    /// As the async call.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let uploads = locker.semaphore("uploads", 2)?; // at most 2 at a time
    /// let first = uploads.acquire(1, Duration::from_secs(30)).call()?;
    /// let second = uploads.acquire(1, Duration::from_secs(30)).call()?;
    /// assert!(uploads.acquire(1, Duration::from_secs(30)).call().unwrap_err().is_not_obtained());
    /// first.release()?;
    /// let third = uploads.acquire(1, Duration::from_secs(30)).call()?;
    /// # second.release()?;
    /// # third.release()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<[u8]>, limit: u32) -> Result<Semaphore<C>, Error> {
        Ok(Semaphore::new(
            self.inner.semaphore(name, limit)?,
            self.runtime.clone(),
        ))
    }

    /// A fair lock: [`crate::Locker::fair_lock`].
    ///
    /// # Errors
    /// As the async call.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let ledger = locker.fair_lock("ledger")?;
    /// let guard = ledger.acquire(Duration::from_secs(10)).call()?;
    /// assert!(ledger.inspect()?.is_some()); // held
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, key: impl AsRef<[u8]>) -> Result<FairLock<C>, Error> {
        Ok(FairLock::new(
            self.inner.fair_lock(key)?,
            self.runtime.clone(),
        ))
    }

    /// A read-write lock: [`crate::Locker::rw_lock`].
    ///
    /// # Errors
    /// As the async call.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let catalog = locker.rw_lock("catalog")?;
    /// let reader = catalog.read(Duration::from_secs(10)).call()?;
    /// let another = catalog.read(Duration::from_secs(10)).call()?; // readers share
    /// assert!(catalog.write(Duration::from_secs(10)).call().unwrap_err().is_not_obtained());
    /// # reader.release()?;
    /// # another.release()?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, key: impl AsRef<[u8]>) -> Result<RwLock<C>, Error> {
        Ok(RwLock::new(self.inner.rw_lock(key)?, self.runtime.clone()))
    }

    /// A leader election: [`crate::Locker::election`].
    ///
    /// # Errors
    /// As the async call.
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let election = locker.election("scheduler")?;
    /// let leadership = election.campaign("host-7").call()?;
    /// assert_eq!(election.leader()?.map(|leader| leader.value).as_deref(), Some("host-7"));
    /// leadership.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, key: impl AsRef<[u8]>) -> Result<Election<C>, Error> {
        Ok(Election::new(
            self.inner.election(key)?,
            self.runtime.clone(),
        ))
    }

    /// Who holds `key`, as anyone can see: [`crate::Locker::inspect`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).metadata("host=a").call()?;
    /// let info = locker.inspect("job")?;
    /// assert!(info.held && info.metadata.as_deref() == Some("host=a"));
    /// assert!(info.ttl.unwrap() <= Duration::from_secs(30));
    /// lock.release()?;
    /// assert!(!locker.inspect("job")?.held);
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, key: impl AsRef<[u8]>) -> Result<LockInfo, Error> {
        self.runtime.call(self.inner.inspect(key))?
    }

    /// Waits at most `timeout` for `key` to be free: [`crate::Locker::wait_released`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lock = locker.acquire("job", Duration::from_secs(30)).call()?;
    /// assert!(!locker.wait_released("job", Duration::from_millis(20))?); // still held
    /// lock.release()?;
    /// assert!(locker.wait_released("job", Duration::from_secs(1))?); // free now
    /// # Ok(()) }
    /// ```
    pub fn wait_released(&self, key: impl AsRef<[u8]>, timeout: Duration) -> Result<bool, Error> {
        self.runtime.call(self.inner.wait_released(key, timeout))?
    }

    /// Releases a lock by its owner's token: [`crate::Locker::release_with_token`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// // One process takes the lock and hands its token on, e.g. to a script:
    /// let token = locker.acquire("deploy", Duration::from_secs(300)).call()?.detach();
    /// // ... which releases it later, by that token:
    /// locker.release_with_token(["deploy"], &token)?;
    /// assert!(!locker.inspect("deploy")?.held);
    /// // Released once: a second release finds it not held.
    /// assert!(locker.release_with_token(["deploy"], &token).unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn release_with_token<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        token: &Token,
    ) -> Result<(), Error> {
        self.runtime
            .call(self.inner.release_with_token(keys, token))?
    }

    /// Refreshes a lock by its owner's token: [`crate::Locker::refresh_with_token`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let token = locker.acquire("deploy", Duration::from_secs(30)).call()?.detach();
    /// locker.refresh_with_token(["deploy"], &token, Duration::from_secs(600))?;
    /// assert!(locker.inspect("deploy")?.ttl.unwrap() > Duration::from_secs(30));
    /// # locker.release_with_token(["deploy"], &token)?;
    /// # Ok(()) }
    /// ```
    pub fn refresh_with_token<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        token: &Token,
        ttl: Duration,
    ) -> Result<(), Error> {
        self.runtime
            .call(self.inner.refresh_with_token(keys, token, ttl))?
    }

    /// Every lock under the prefix whose key matches `pattern`, all pages at once:
    /// [`crate::Locker::list`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let a = locker.acquire("jobs:a", Duration::from_secs(30)).call()?;
    /// let b = locker.acquire("jobs:b", Duration::from_secs(30)).call()?;
    /// let other = locker.acquire("cache", Duration::from_secs(30)).call()?;
    /// let mut keys: Vec<_> = locker.list("jobs:*")?.into_iter().map(|lock| lock.key).collect();
    /// keys.sort();
    /// assert_eq!(keys, [b"jobs:a".to_vec(), b"jobs:b".to_vec()]);
    /// # a.release()?; b.release()?; other.release()?;
    /// # Ok(()) }
    /// ```
    pub fn list(&self, pattern: &str) -> Result<Vec<ListedLock>, Error> {
        let listing = self.inner.list(pattern)?;
        self.runtime.call(listing.collect())?
    }

    /// One lock as [`list`](Locker::list) shows it: [`crate::Locker::describe`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let uploads = locker.semaphore("uploads", 4)?;
    /// let permits = uploads.acquire(3, Duration::from_secs(30)).call()?;
    /// let seen = locker.describe("uploads")?.expect("held");
    /// assert_eq!(seen.kind, redmutex::state::LockKind::Semaphore);
    /// assert_eq!(seen.permits, Some((3, 4)));
    /// assert_eq!(locker.describe("nothing-here")?, None);
    /// # permits.release()?;
    /// # Ok(()) }
    /// ```
    pub fn describe(&self, key: impl AsRef<[u8]>) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.describe(key))?
    }

    /// Asks whoever holds `key` to let it go: [`crate::Locker::request_release`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let lease = locker.acquire("deploy", Duration::from_millis(300)).call()?.keep_alive()?;
    /// assert!(locker.request_release("deploy")?.is_some()); // as another process would
    /// assert!(lease.release_requested_within(Duration::from_secs(5))?); // at its next renewal
    /// lease.release()?;
    /// # Ok(()) }
    /// ```
    pub fn request_release(&self, key: impl AsRef<[u8]>) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.request_release(key))?
    }

    /// An operator's release of someone else's lock: [`crate::Locker::force_release`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let stuck = locker.acquire("deploy", Duration::from_secs(3600));
    /// let stuck = stuck.metadata("host=gone").call()?;
    /// let taken = locker.force_release("deploy")?.expect("it was held");
    /// assert_eq!(taken.holders[0].metadata.as_deref(), Some("host=gone"));
    /// assert!(locker.inspect("deploy")?.held); // a tombstone, until the TTL ends
    /// // The holder finds out when it next renews, refreshes or releases:
    /// assert!(stuck.release().unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn force_release(&self, key: impl AsRef<[u8]>) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.force_release(key))?
    }

    /// An operator's release of a dead holder's lock, at once (breaking mutual exclusion
    /// if it lives): [`crate::Locker::force_release_now`].
    ///
    /// # Errors
    /// As the async call; [`Error::InsideRuntime`].
    ///
    /// ```
    /// # fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::blocking::Locker::in_memory()?;
    /// use std::time::Duration;
    /// let dead = locker.acquire("deploy", Duration::from_secs(3600)).call()?;
    /// let taken = locker.force_release_now("deploy")?.expect("it was held");
    /// assert!(!locker.inspect("deploy")?.held);
    /// # drop(dead);
    /// # Ok(()) }
    /// ```
    pub fn force_release_now(&self, key: impl AsRef<[u8]>) -> Result<Option<ListedLock>, Error> {
        self.runtime.call(self.inner.force_release_now(key))?
    }
}
