//! The read-write lock: many readers or one writer, writers first (`rwlock.lua` says how
//! they are kept). A writer holds the key as a mutex does, so its refresh, renewal, TTL and
//! fences are the mutex's operations; readers are members of a sorted set at the key, each
//! with its own expiry on the server's clock. Acquiring, keep-alive, wake-up and release on
//! drop are the engine's; this file says what the keys are and how the scripts are called.

use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use crate::args::{self, Keys};
use crate::connection::Connection;
use crate::engine::acquire::Acquire;
use crate::engine::context::Context;
use crate::engine::guard::Lock;
use crate::error::{Argument, Error, InvalidArgument};
use crate::fence::{companion_key, counter_key, Companion};
use crate::primitives::mutex;
use crate::scripts::{
    add_holder_renewal, eval_whole, held, holder_keys, operations, Call, ChangeViaRefresh, Claim,
    Conn, Obtain, ObtainTry, Operation, Operations, Queue, ScriptConn, Waits,
};
use crate::token::{Channels, Token, TOKEN_LEN};

operations!(
    "primitives/rwlock.lua", "scripts/holders.lua";
    OBTAIN_READ = "obtain_read",
    OBTAIN_WRITE = "obtain_write",
    RELEASE_READ = "release_read",
    RELEASE_WRITE = "release_write",
    DOWNGRADE = "downgrade",
    REFRESH_READ = "refresh",
    RENEW_READ = "renew",
    TTL_READ = "ttl",
    FENCE_READ = "fence",
    RAISE_FENCE_READ = "raise_fence",
    GUARDED_READ = "guarded",
);

/// A read-write lock: many readers at once, or one writer; a waiting writer keeps new
/// readers out. Made by [`Locker::rw_lock`](crate::Locker::rw_lock); cheap to clone.
///
/// [`read`](RwLock::read) and [`write`](RwLock::write) have every option of a lock's
/// acquire ([`Acquire`]: retry strategies, deadline, failed-try callback, metadata, fences,
/// push wake-up, minimum hold) and hand out a [`ReadGuard`] or a [`WriteGuard`] — each a
/// [`Lock`] with refresh, release, keep-alive with the lost signal, `run(work)` and release
/// on drop. A writer can [`downgrade`](Lock::downgrade) to a reader without letting go;
/// there is no upgrade (two readers upgrading at once would wait for each other forever).
///
/// **How it is kept** (the guarantee itself is in [`safety`](crate::safety)): a writer holds
/// the key as a plain lock does, so a plain [`Locker::acquire`](crate::Locker::acquire) of the
/// same name excludes readers and writers and is excluded by them. Readers are members of a
/// sorted set at the key, each scored by its own expiry on the *server's* clock: a crashed
/// reader is dropped once its own TTL passes, however many live readers renew theirs. Writers
/// first: a writer that waits registers an intent beside the key, renewed by each of its tries
/// (at least every third of the [heartbeat](RwLock::with_heartbeat)); while one is live no new
/// reader gets in, so a stream of readers cannot starve writers. A writer that gives up, is
/// cancelled or crashes stops keeping readers out (at once, or within its heartbeat). Works on
/// one node, Redlock (a reader and a writer on two quorums meet on a node, which refuses the
/// second) and Redis Cluster (all keys in one hash slot).
///
/// Writers take [fences](Lock::fence) as a lock does; a reader's fence is the current one
/// — that of the latest writer — so data a reader saw can be checked against later writes.
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::retry;
/// let config = locker.rw_lock("config")?;
/// // Many readers at once...
/// let reader = config.read(Duration::from_secs(10)).await?;
/// reader.release().await?;
/// // ...or one writer, who keeps new readers out while it waits.
/// let writer = config
///     .write(Duration::from_secs(10))
///     .retry(retry::constant(Duration::from_millis(100)))
///     .deadline(Duration::from_secs(5))
///     .await?;
/// let reader = writer.downgrade().await?; // keeps reading what it wrote
/// reader.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock<C: Connection> {
    pub(crate) context: Arc<Context<C>>,
    key: Keys,
    heartbeat: Duration,
}

/// A read-write lock held by a reader: a [`Lock`] on a [`ReadKey`].
pub type ReadGuard<C> = Lock<C, ReadKey>;

/// A read-write lock held by its writer: a [`Lock`] on a [`WriteKey`].
pub type WriteGuard<C> = Lock<C, WriteKey>;

impl<C: Connection> RwLock<C> {
    /// A read-write lock at `key` (with the prefix, checked).
    pub(crate) fn new(context: Arc<Context<C>>, key: Keys) -> RwLock<C> {
        RwLock {
            context,
            key,
            heartbeat: args::DEFAULT_HEARTBEAT,
        }
    }

    /// How long a waiting writer keeps readers out without a sign of life
    /// ([`DEFAULT_HEARTBEAT`](crate::limits::DEFAULT_HEARTBEAT) unless set): a waiting writer tries
    /// at least every third of it. Shorter: a crashed writer keeps readers out for less
    /// time; longer: fewer tries while waiting.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] ([`Argument::Heartbeat`]) below
    /// [`MIN_HEARTBEAT`](crate::limits::MIN_HEARTBEAT) or above
    /// [`MAX_TTL`](crate::limits::MAX_TTL).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let config = locker.rw_lock("config")?.with_heartbeat(Duration::from_secs(1))?;
    /// assert_eq!(config.heartbeat(), Duration::from_secs(1));
    /// let too_short = locker.rw_lock("config")?.with_heartbeat(Duration::from_millis(1));
    /// assert!(matches!(too_short, Err(redmutex::Error::InvalidArgument(e))
    ///     if e.argument == redmutex::error::Argument::Heartbeat));
    /// # Ok(()) }
    /// ```
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> Result<Self, Error> {
        self.heartbeat = args::check_heartbeat(heartbeat, "a waiting writer's")?;
        Ok(self)
    }

    /// The waiting writers' heartbeat.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let config = locker.rw_lock("config")?;
    /// assert_eq!(config.heartbeat(), redmutex::limits::DEFAULT_HEARTBEAT);
    /// # Ok(()) }
    /// ```
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// The lock key as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let config = locker.rw_lock("config")?;
    /// assert_eq!(config.key(), b"app:config");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.key.get(0).expect("one key")
    }

    /// Starts acquiring the lock for reading, for `ttl`; configure and `.await` the
    /// returned [`Acquire`]. One try unless a retry strategy is given. Readers share the
    /// lock; a try fails while a writer holds it or waits for it. With wake-up, a writer's
    /// release (or the last waiting writer giving up) lets every waiting reader try at once.
    ///
    /// # Errors (when awaited)
    /// As [`Locker::acquire`](crate::Locker::acquire); [`Error::InvalidArgument`] with
    /// [`Argument::Key`] when the lock's keys hold data of another kind (e.g. a semaphore
    /// of the same name).
    ///
    /// # Cancel safety
    /// See [`Acquire`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let config = locker.rw_lock("config")?;
    /// let first = config.read(Duration::from_secs(10)).await?;
    /// let second = config.read(Duration::from_secs(10)).metadata("host=web-2").await?;
    /// assert_eq!(config.inspect().await?.unwrap().holder_count, 2); // readers share
    /// let writer = config.write(Duration::from_secs(10)).await;
    /// assert!(writer.unwrap_err().is_not_obtained());
    /// # drop((first, second));
    /// # Ok(()) }
    /// ```
    pub fn read<'a>(&self, ttl: Duration) -> Acquire<'a, C, ReadKey> {
        let key = ReadKey {
            keys: RwKeys::new(self.key.clone()),
        };
        Acquire::new(self.context.clone(), Ok(key), ttl)
    }

    /// Starts acquiring the lock for writing, for `ttl`; configure and `.await` the
    /// returned [`Acquire`]. One try unless a retry strategy is given. While a try that may
    /// wait finds the lock held, its intent keeps new readers out; the intent ends when
    /// the writer gets the lock, gives up, is cancelled, or stops trying for a heartbeat.
    /// Pauses are bounded by the holder's TTL and a third of the heartbeat, whatever the
    /// strategy says — bound the wait with a [`deadline`](Acquire::deadline).
    ///
    /// # Errors (when awaited)
    /// As [`read`](RwLock::read).
    ///
    /// # Cancel safety
    /// See [`Acquire`]: a dropped acquire also ends its intent (in the background).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let (config, ttl) = (locker.rw_lock("config")?, Duration::from_secs(10));
    /// let reader = config.read(ttl).await?;
    /// let write = config.write(ttl).retry(retry::constant(Duration::from_millis(100)));
    /// let waiting = tokio::spawn(async move { write.deadline(Duration::from_secs(5)).await });
    /// tokio::time::sleep(Duration::from_millis(10)).await; // it found the lock read
    /// assert!(config.read(ttl).await.unwrap_err().is_not_obtained()); // no new readers
    /// reader.release().await?;
    /// let writer = waiting.await.unwrap()?;
    /// assert_eq!(config.inspect().await?.unwrap().kind, redmutex::state::LockKind::Lock);
    /// # drop(writer);
    /// # Ok(()) }
    /// ```
    pub fn write<'a>(&self, ttl: Duration) -> Acquire<'a, C, WriteKey> {
        let key = WriteKey {
            keys: RwKeys::new(self.key.clone()),
            heartbeat_ms: self.heartbeat.as_millis().try_into().unwrap_or(u64::MAX),
        };
        Acquire::new(self.context.clone(), Ok(key), ttl)
    }
}

impl<C: Connection> std::fmt::Debug for RwLock<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("heartbeat", &self.heartbeat)
            .finish_non_exhaustive()
    }
}

/// The keys of one read-write lock, all in the key's hash slot.
#[derive(Debug, Clone)]
struct RwKeys {
    keys: Keys,
    /// The readers' details.
    details: Vec<u8>,
    /// The waiting writers' intents.
    intents: Vec<u8>,
    counter: Vec<u8>,
}

impl RwKeys {
    fn new(keys: Keys) -> RwKeys {
        let key = keys.get(0).expect("one key");
        RwKeys {
            details: companion_key(key, Companion::Readers),
            intents: companion_key(key, Companion::Intents),
            counter: counter_key(key),
            keys,
        }
    }

    fn key(&self) -> &[u8] {
        self.keys.get(0).expect("one key")
    }

    /// The lock key, the details and the intents: what taking, leaving and reading need.
    fn add_all(&self, add: &mut dyn FnMut(&[u8])) {
        add(self.key());
        add(&self.details);
        add(&self.intents);
    }

    /// A try: the three keys, then (fenced) the counter.
    fn call(&self, operation: &'static Operation, fenced: bool) -> ScriptInvocation<'static> {
        let mut call = operation.script(self.keys.channels()).prepare_invoke();
        self.add_all(&mut |key| {
            call.key(key);
        });
        if fenced {
            call.key(&self.counter);
        }
        call
    }

    /// The reply `{ status, detail }` of either acquire script.
    fn obtained(&self, (status, detail): (i64, i64), fenced: bool) -> Obtain {
        match status {
            -2 => Obtain::Refused(InvalidArgument {
                argument: Argument::Key,
                reason: format!(
                    "{:?} (or the keys beside it) holds data that is not a redmutex \
                     read-write lock, e.g. a semaphore of the same name; choose another name",
                    String::from_utf8_lossy(self.key())
                ),
            }),
            status => Obtain::from_reply((status.max(0) as usize, detail), fenced),
        }
    }
}

/// What a [`ReadGuard`] holds: a reader's place in a read-write lock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::{Lock, claim::ReadKey};
/// let config = locker.rw_lock("config")?;
/// let reader: Lock<_, ReadKey> = config.read(Duration::from_secs(10)).await?;
/// assert_eq!(reader.key(), b"config");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReadKey {
    keys: RwKeys,
}

impl ReadKey {
    /// The key, as stored in Redis (users read it from the guard: this type only
    /// appears as a guard's type parameter).
    pub(crate) fn key(&self) -> &[u8] {
        self.keys.key()
    }
}

/// What a [`WriteGuard`] holds: a read-write lock's key, as its writer.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::{Lock, claim::WriteKey};
/// let config = locker.rw_lock("config")?;
/// let writer: Lock<_, WriteKey> = config.write(Duration::from_secs(10)).await?;
/// assert_eq!(writer.key(), b"config");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct WriteKey {
    keys: RwKeys,
    heartbeat_ms: u64,
}

impl WriteKey {
    /// The key, as stored in Redis (users read it from the guard: this type only
    /// appears as a guard's type parameter).
    pub(crate) fn key(&self) -> &[u8] {
        self.keys.key()
    }
}

/// A reader's operations are the read-write lock's own.
static READ_OPERATIONS: Operations = Operations {
    release: &RELEASE_READ,
    refresh: &REFRESH_READ,
    ttl: &TTL_READ,
    fence: &FENCE_READ,
    raise_fence: &RAISE_FENCE_READ,
    renew: &RENEW_READ,
    guarded: &GUARDED_READ,
};

/// Taking the key and leaving are the read-write lock's; the rest is the mutex's, on the
/// key.
static WRITE_OPERATIONS: Operations = Operations {
    release: &RELEASE_WRITE,
    refresh: &mutex::REFRESH,
    ttl: &mutex::TTL,
    fence: &mutex::FENCE,
    raise_fence: &mutex::RAISE_FENCE,
    renew: &mutex::RENEW,
    guarded: &mutex::GUARDED,
};

held!(ReadKey);

impl Claim for ReadKey {
    fn kind(&self) -> &'static str {
        "read"
    }

    fn keys(&self) -> &Keys {
        &self.keys.keys
    }

    /// The lock key, the details, then (fenced) the counter.
    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        let keys = &self.keys;
        holder_keys([keys.key(), &keys.details, &keys.counter], fenced, add);
    }

    /// The three keys and the key's line: the last reader's release hands the key to the
    /// first waiting writer's locker.
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.keys.add_all(add);
        add(&companion_key(self.keys.key(), Companion::Line));
    }

    fn operations(&self) -> &'static Operations {
        &READ_OPERATIONS
    }

    /// Readers share, and wait on a channel of their own: one announcement lets every
    /// waiting reader try.
    fn waits(&self) -> Waits {
        Waits {
            one_holder: false,
            channel: Some(readers_channel(self.keys.key(), self.keys.keys.channels())),
            ..Waits::one_holder(false)
        }
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        let mut call = self.keys.call(&OBTAIN_READ, request.terms.fenced);
        let metadata = request.terms.value.get(TOKEN_LEN + 1..).unwrap_or_default();
        // Where lockers line up, one waiting in the key's line keeps new readers out.
        let lined = self.keys.keys.lined();
        if lined {
            call.key(companion_key(self.keys.key(), Companion::Line));
        }
        call.arg(request.terms.token.as_bytes())
            .arg(request.terms.ttl_ms)
            .arg(metadata)
            .arg(if request.waiting() { "1" } else { "0" })
            .arg(request.terms.retention_ms)
            .arg(if lined { "1" } else { "0" });
        Box::pin(async move {
            let reply: (i64, i64) = call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok(self.keys.obtained(reply, request.terms.fenced))
        })
    }

    /// The key, its readers' details, and its ask companion (see `holders.lua`'s
    /// `renew`).
    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        add_holder_renewal(self, call, token, ttl_ms);
    }
}

held!(WriteKey);

impl Claim for WriteKey {
    fn kind(&self) -> &'static str {
        "write"
    }

    fn keys(&self) -> &Keys {
        &self.keys.keys
    }

    /// As the mutex's: the key, then (fenced) its counter.
    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        add(self.keys.key());
        if fenced {
            add(&self.keys.counter);
        }
    }

    /// The three keys (a writer that gives up ends its intent through its release), and
    /// the key's line, whose first locker hears of the release.
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.keys.add_all(add);
        add(&companion_key(self.keys.key(), Companion::Line));
    }

    fn operations(&self) -> &'static Operations {
        &WRITE_OPERATIONS
    }

    /// A waiting writer's intent lives in Redis and is renewed by its tries; it hears of
    /// releases on the key's own channel — or, where the keys have lines (not on a
    /// cluster), its locker lines up beside the key, in the line plain lock waiters use
    /// (see `rwlock.lua`), and hears of hand-offs on its turn channel.
    fn waits(&self) -> Waits {
        Waits {
            queue: Some(Queue {
                channel: self.keys.keys.channels().name(self.keys.key(), b""),
                every: Duration::from_millis(self.heartbeat_ms / 3),
            }),
            ..Waits::one_holder(self.keys.keys.lined())
        }
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        let mut call = self.keys.call(&OBTAIN_WRITE, request.terms.fenced);
        call.arg(&request.terms.value)
            .arg(request.terms.ttl_ms)
            .arg(TOKEN_LEN)
            .arg(if request.queue { "1" } else { "0" })
            .arg(self.heartbeat_ms)
            .arg(request.terms.retention_ms);
        if let Some(place) = request.place() {
            call.key(companion_key(self.keys.key(), Companion::Line));
            call.arg(place.locker.as_bytes());
        }
        Box::pin(async move {
            let reply: (i64, i64) = call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok(self.keys.obtained(reply, request.terms.fenced))
        })
    }

    /// As the mutex's renewal: one key per lease.
    /// The key and its ask companion, as the mutex's `renew` takes them.
    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        call.key(self.keys.key());
        call.key(companion_key(self.keys.key(), Companion::Ask));
        call.arg(1).arg(token.as_bytes()).arg(ttl_ms);
    }

    /// The release, told to keep the intent: a quorum's failed try undone on every node
    /// must not take the waiting writer's intent with it (it would keep readers out only
    /// between a try and its undo).
    fn undo_unattended<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, ()> {
        let mut cmd = self.release_eval(token, 0);
        cmd.arg(0).arg(KEEP_INTENT);
        Box::pin(async move { eval_whole(conn, cmd).await })
    }
}

/// `release_write`'s third argument: undo a try, keep the intent.
const KEEP_INTENT: &str = "keep-intent";

/// The channel waiting readers hear of a writer's release on: the key and `:~r` (as
/// `helpers.lua`'s `READERS` names it).
fn readers_channel(key: &[u8], channels: Channels) -> Vec<u8> {
    channels.name(key, b":~r")
}

impl<C: Connection> Lock<C, WriteKey> {
    /// The lock key, as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let writer = locker.rw_lock("config")?.write(Duration::from_secs(10)).await?;
    /// assert_eq!(writer.key(), b"app:config");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.what().key()
    }

    /// Turns this writer into a reader, atomically — no other writer can get in between —
    /// with the same token, metadata and fence, for the writer's lease TTL from now. Other
    /// readers may then join, unless a writer waits. (There is no upgrade: two readers
    /// upgrading at once would each wait for the other forever.) A kept-alive writer is
    /// [stopped](crate::Lease::stop) first, and the reader kept alive again.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the writer no longer holds the lock (nothing changed: it was
    /// lost before); [`Error::Redis`], [`Error::NoQuorum`] as for a refresh. On an error
    /// the writer is released, as a dropped guard would be.
    ///
    /// # Cancel safety
    /// Not cancel safe: a downgrade cancelled in flight may or may not have happened; the
    /// guard is consumed, and the key (writer's or reader's) expires by its TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let config = locker.rw_lock("config")?;
    /// let writer = config.write(Duration::from_secs(10)).await?;
    /// let token = writer.token();
    /// let reader = writer.downgrade().await?; // keeps reading what it wrote
    /// assert_eq!(reader.token(), token);
    /// let other = config.read(Duration::from_secs(10)).await?; // others may read now too
    /// assert_eq!(config.inspect().await?.unwrap().holder_count, 2);
    /// # drop((reader, other));
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<ReadGuard<C>, Error> {
        let keys = self.what().keys.clone();
        let ttl_ms = args::ttl_millis(self.lease_ttl())?;
        let mut call = DOWNGRADE.script(keys.keys.channels()).prepare_invoke();
        keys.add_all(&mut |key| {
            call.key(key);
        });
        call.arg(self.token().as_bytes()).arg(ttl_ms);
        let via = ChangeViaRefresh {
            claim: ReadKey { keys: keys.clone() },
            call,
        };
        self.convert(Arc::new(ReadKey { keys }), &via).await
    }
}

impl<C: Connection> Lock<C, ReadKey> {
    /// The lock key, as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let reader = locker.rw_lock("config")?.read(Duration::from_secs(10)).await?;
    /// assert_eq!(reader.key(), b"app:config");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.what().key()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_hear_on_a_channel_of_their_own_beside_the_key() {
        assert_eq!(
            readers_channel(b"app:config", Channels::Plain),
            b"app:config:~r".to_vec()
        );
    }
}
