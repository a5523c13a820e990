//! [`Locker`]: the entry point over one Redis connection.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Acquire;
use crate::args::{self, Keys};
use crate::connection::Connection;
use crate::error::Error;
use crate::lock::{refresh_owned, release_owned};
use crate::renewer::RenewerSlot;
use crate::scripts;
use crate::token::{parse_value, StoredValue, Token};

/// Takes locks on one Redis server over a connection you already have.
///
/// Cloning a `Locker` is cheap (it clones the connection handle); every operation clones
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
    conn: C,
    prefix: Arc<[u8]>,
    /// Renews the leases of this locker and its clones; started on the first keep-alive.
    renewer: Arc<RenewerSlot<C>>,
}

impl<C: Connection> Locker<C> {
    /// A locker over `conn`, storing each lock under exactly its key.
    pub fn new(conn: C) -> Locker<C> {
        Locker {
            conn,
            prefix: Arc::from(&b""[..]),
            renewer: Arc::new(RenewerSlot::new()),
        }
    }

    /// Prepends `prefix` to every key this locker touches, e.g. `"myapp:lock:"`.
    pub fn with_prefix(mut self, prefix: impl AsRef<[u8]>) -> Locker<C> {
        self.prefix = Arc::from(prefix.as_ref());
        self
    }

    /// The key prefix (empty by default).
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The connection this locker uses.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// Starts acquiring a lock on `key` for `ttl`; configure and `.await` the returned
    /// [`Acquire`]. One try unless a retry strategy is given.
    ///
    /// The key is stored as `SET key token[metadata] NX PX ttl`, with a fresh 128-bit
    /// token from the OS CSPRNG.
    ///
    /// # Errors (when awaited)
    /// [`Error::NotObtained`] when the lock stayed held by someone else;
    /// [`Error::InvalidArgument`] for an empty or oversized key, a TTL outside
    /// [`MIN_TTL`](crate::MIN_TTL)..=[`MAX_TTL`](crate::MAX_TTL) or oversized metadata,
    /// before anything is sent; [`Error::Redis`] when every try failed on Redis errors, or
    /// at once on a non-transient one (authentication, permission).
    ///
    /// # Cancel safety
    /// See [`Acquire`].
    pub fn acquire<'a>(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Acquire<'a, C> {
        Acquire::new(
            self.conn.clone(),
            self.renewer.clone(),
            Keys::new(&self.prefix, [key]),
            ttl,
        )
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
        Acquire::new(
            self.conn.clone(),
            self.renewer.clone(),
            Keys::new(&self.prefix, keys),
            ttl,
        )
    }

    /// Looks at `key` without owning it: held or free, remaining TTL, metadata.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or oversized key; [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn inspect(&self, key: impl AsRef<[u8]>) -> Result<LockInfo, Error> {
        let keys = Keys::new(&self.prefix, [key])?;
        let full_key = keys.get(0).expect("one key");
        let mut conn = self.conn.clone();
        let raw = scripts::idempotent!(scripts::inspect(&mut conn, full_key))?;
        let ttl = u64::try_from(raw.pttl).ok().map(Duration::from_millis);
        let (held, metadata, foreign) = match (raw.kind.as_str(), raw.value) {
            ("none", _) => (false, None, false),
            ("string", Some(value)) => match parse_value(&value) {
                StoredValue::Redmutex { metadata, .. } => (true, metadata, false),
                StoredValue::Foreign => (true, None, true),
            },
            _ => (true, None, true),
        };
        Ok(LockInfo {
            key: full_key.to_vec(),
            held,
            ttl,
            metadata,
            foreign,
        })
    }

    /// Releases the lock on `keys` held by `token`, for an owner that kept only the token
    /// (e.g. another process, or a script that ran `redmutex acquire`).
    ///
    /// # Errors
    /// As [`Lock::release`](crate::Lock::release), plus [`Error::InvalidArgument`] for bad keys.
    ///
    /// # Cancel safety
    /// If cancelled, the release may or may not have reached Redis.
    pub async fn release_with_token<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        token: &Token,
    ) -> Result<(), Error> {
        let keys = Keys::new(&self.prefix, keys)?;
        release_owned(&mut self.conn.clone(), &keys, token).await
    }

    /// Sets a new TTL on the lock on `keys` held by `token`, if every key still holds it.
    ///
    /// # Errors
    /// As [`Lock::refresh`](crate::Lock::refresh), plus [`Error::InvalidArgument`] for bad keys.
    ///
    /// # Cancel safety
    /// If cancelled, the new TTL may or may not have been applied.
    pub async fn refresh_with_token<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        token: &Token,
        ttl: Duration,
    ) -> Result<(), Error> {
        let keys = Keys::new(&self.prefix, keys)?;
        let ttl_ms = args::ttl_millis(ttl)?;
        refresh_owned(&mut self.conn.clone(), &keys, token, ttl_ms).await
    }
}

impl<C: Connection> std::fmt::Debug for Locker<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .finish_non_exhaustive()
    }
}

/// What [`Locker::inspect`] sees at a key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key as stored in Redis (with the locker's prefix).
    pub key: Vec<u8>,
    /// Whether the key exists, i.e. nobody can acquire it now.
    pub held: bool,
    /// Remaining time to live; `None` when the key is missing or has no expiry.
    pub ttl: Option<Duration>,
    /// The metadata stored by the holder, if it is a redmutex lock that has some.
    pub metadata: Option<String>,
    /// The key holds something redmutex did not write (another type, or a value without
    /// a redmutex token). redmutex will not acquire it, and never modifies it.
    pub foreign: bool,
}

impl LockInfo {
    /// The key as text (invalid UTF-8 replaced).
    pub fn key_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.key)
    }
}
