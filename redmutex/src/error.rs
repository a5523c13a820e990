//! Errors, sorted by what the caller should do about them: [`Error`] and what its variants
//! carry.

use std::fmt;
use std::time::Duration;

use crate::classify::{is_no_permission, is_transient_redis};
pub use crate::quorum::{NodeError, NodeFailure, QuorumFailure};

/// Everything that can go wrong, sorted by what the caller should do:
///
/// | variant | meaning | what to do |
/// |---|---|---|
/// | [`Error::NotObtained`] | someone else holds the lock (until the deadline) | try later, or give up |
/// | [`Error::NotHeld`] | the lock expired or was taken over | stop the guarded work now |
/// | [`Error::InvalidArgument`] | bad input, caught before any Redis call | fix the call |
/// | [`Error::Redis`] | connection, timeout, auth, permission… | see [`Error::is_transient`] |
/// | [`Error::NoQuorum`] | Redlock: too few nodes agreed (down, slow, or lock lost on some) | see [`Error::is_transient`] |
/// | [`Error::NotReplicated`] | too few replicas confirmed in time ([`Locker::with_replication`](crate::Locker::with_replication)) | try later; check the replicas |
/// | [`Error::Random`] | the operating system gave no random bytes for a token | nothing sent; fix the system |
/// | [`Error::InsideRuntime`] | a [blocking](crate::blocking) call inside an async runtime | nothing sent; use the async API there |
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) {
/// use std::time::Duration;
/// match locker.acquire("nightly-report", Duration::from_secs(30)).await {
///     Ok(lock) => { /* do the work */ let _ = lock.release().await; }
///     Err(e) if e.is_not_obtained() => println!("another worker runs it"),
///     Err(e) if e.is_transient() => println!("Redis trouble, try again later: {e}"),
///     Err(e) => panic!("misconfigured: {e}"),
/// }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by someone else and the retry strategy or the deadline ran out.
    NotObtained(NotObtained),
    /// The lock is no longer held by this owner: it expired, was deleted, or another owner
    /// took it. Any work that relied on it must stop.
    NotHeld,
    /// An argument was rejected before anything was sent to Redis — or, for what only the
    /// server can know (a semaphore's limit that its current holders do not share), by the
    /// server, with nothing written.
    InvalidArgument(InvalidArgument),
    /// Redis could not be reached or refused the command.
    Redis(redis::RedisError),
    /// Redlock: too few nodes agreed, because they could not be reached, answered too
    /// slowly, or refused the command. Which nodes and why is in the [`QuorumFailure`].
    /// (When some node answered that another owner holds the lock, an acquire reports
    /// [`Error::NotObtained`] instead; when too many nodes answered that this owner's lock
    /// is gone, a refresh or release reports [`Error::NotHeld`].)
    NoQuorum(Box<QuorumFailure>),
    /// The operating system could not provide random bytes for a token.
    Random(String),
    /// Too few replicas confirmed the write in time (see
    /// [`Locker::with_replication`](crate::Locker::with_replication)): an acquire was undone,
    /// a refresh or fence does not count (the lock stays valid only as long as before); a
    /// release that keeps the lock for its minimum hold went through on the master, but a
    /// failover may end that hold early. Transient: the replicas may catch up.
    NotReplicated(NotReplicated),
    /// A call of the [blocking API](crate::blocking) was made on a thread that runs an
    /// async runtime, where waiting would stall that runtime: use the async API there.
    /// Nothing was sent.
    InsideRuntime,
}

/// Details of [`Error::NotObtained`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::{retry, Error};
/// let _held = locker.acquire("report", Duration::from_secs(30)).await?;
/// let tried = locker.acquire("report", Duration::from_secs(30))
///     .retry(retry::constant(Duration::from_millis(100)))
///     .deadline(Duration::from_secs(1))
///     .await;
/// let Err(Error::NotObtained(why)) = tried else { panic!("held all along") };
/// assert_eq!(why.attempts, 11); // at 0 ms, 100 ms, ..., 1 s
/// assert_eq!(why.elapsed, Duration::from_secs(1));
/// assert!(why.last_error.is_none(), "every try found it held");
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct NotObtained {
    /// How many tries were made.
    pub attempts: u32,
    /// Time from the start of the acquire to giving up.
    pub elapsed: Duration,
    /// The last transient Redis error seen among the tries, if any: when some tries failed
    /// on the network rather than on a held lock, this says why.
    pub last_error: Option<redis::RedisError>,
    /// Redlock: how the last try failed, node by node.
    pub no_quorum: Option<Box<QuorumFailure>>,
}

/// Details of [`Error::NotReplicated`].
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{Error, Locker, Replication};
/// let conn = redmutex::connection::connect("redis://127.0.0.1:6379").await?;
/// let replication = Replication::new(2, Duration::from_millis(50));
/// let locker = Locker::new(conn).with_replication(replication)?;
/// match locker.acquire("payout:7", Duration::from_secs(10)).await {
///     Ok(lock) => lock.release().await?,
///     Err(Error::NotReplicated(why)) => {
///         assert!(why.acked < why.wanted && !why.on_disk); // the acquire was undone
///         eprintln!("{why}"); // e.g. "confirmed by 1 of 2 replicas within 50ms"
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotReplicated {
    /// How many replicas confirmed within the timeout.
    pub acked: u32,
    /// How many had to.
    pub wanted: u32,
    /// How long they were waited for.
    pub timeout: Duration,
    /// Whether they had to have it on disk ([`Replication::on_disk`](crate::Replication::on_disk)).
    pub on_disk: bool,
}

impl fmt::Display for NotReplicated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.on_disk {
            true => "fsynced by the master and",
            false => "confirmed by",
        };
        write!(
            f,
            "{what} {} of {} replicas within {:?}",
            self.acked, self.wanted, self.timeout
        )
    }
}

/// Details of [`Error::InvalidArgument`].
///
/// ```
/// use redmutex::{error::Argument, Error};
/// let metadata = "x".repeat(redmutex::limits::MAX_METADATA_LEN + 1);
/// let Err(Error::InvalidArgument(bad)) = redmutex::limits::check_metadata(&metadata) else {
///     panic!("too much metadata is refused");
/// };
/// assert_eq!(bad.argument, Argument::Metadata);
/// assert!(bad.reason.contains("above the maximum"), "{}", bad.reason);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidArgument {
    /// Which argument was wrong.
    pub argument: Argument,
    /// Why, in words.
    pub reason: String,
}

/// The argument named by an [`InvalidArgument`].
///
/// ```
/// use redmutex::{error::Argument, Error};
/// let Err(Error::InvalidArgument(bad)) = redmutex::limits::check_keys("app:", ["job", "job"]) else {
///     panic!("a key given twice is refused");
/// };
/// assert_eq!(bad.argument, Argument::Keys);
/// assert_eq!(bad.argument.to_string(), "keys"); // as the error's message names it
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Argument {
    /// A lock key.
    Key,
    /// The list of keys of a multi-key lock.
    Keys,
    /// A time to live.
    Ttl,
    /// Metadata stored with the token.
    Metadata,
    /// A token given back to the library.
    Token,
    /// A key prefix.
    Prefix,
    /// A keep-alive renewal interval.
    Interval,
    /// The node list of a Redlock locker.
    Nodes,
    /// Fencing tokens: asked for on a locker without them, or a retention period out of
    /// range.
    Fences,
    /// A semaphore's limit: zero, too large, or not the one its current holders agreed on.
    Limit,
    /// How many permits of a semaphore to take: zero, or more than its limit.
    Permits,
    /// A fair lock's waiters' heartbeat: out of range.
    Heartbeat,
    /// Replica confirmation settings: no replica, a timeout out of range, or a topology
    /// where it does not apply.
    Replication,
    /// Guarded writes ([`Writes`](crate::Writes)): none, a command that cannot be sent, a
    /// key outside the lock's hash slot on a cluster, or a topology where they do not
    /// apply (Redlock).
    Writes,
}

impl Error {
    pub(crate) fn invalid(argument: Argument, reason: impl Into<String>) -> Error {
        Error::InvalidArgument(InvalidArgument {
            argument,
            reason: reason.into(),
        })
    }

    /// The lock is held by someone else (or, for a [fair lock](crate::FairLock), others are
    /// ahead in line): trying again later may succeed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let held = locker.acquire("report", Duration::from_secs(30)).await?;
    /// let busy = locker.acquire("report", Duration::from_secs(30)).await.unwrap_err();
    /// assert!(busy.is_not_obtained());
    /// held.release().await?;
    /// let lock = locker.acquire("report", Duration::from_secs(30)).await?; // later, it is free
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_not_obtained(&self) -> bool {
        matches!(self, Error::NotObtained(_))
    }

    /// The lock was lost (expired or taken over): stop relying on it at once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let mut lock = locker.acquire("report", Duration::from_secs(30)).await?;
    /// locker.connection().expire_now("report"); // the TTL ran out while the work went on
    /// let lost = lock.refresh(Duration::from_secs(30)).await.unwrap_err();
    /// assert!(lost.is_not_held() && !lost.is_transient());
    /// # Ok(()) }
    /// ```
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld)
    }

    /// The call itself was wrong; retrying the same call cannot help.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let sent = locker.connection().requests();
    /// let refused = locker.acquire("report", Duration::ZERO).await.unwrap_err();
    /// assert!(refused.is_invalid_argument() && !refused.is_transient());
    /// assert_eq!(locker.connection().requests(), sent, "caught before any request");
    /// # Ok(()) }
    /// ```
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument(_))
    }

    /// Retrying later may help: the lock was busy, too few replicas confirmed it, or Redis was
    /// unreachable, timed out, was loading, failing over or redirecting. False for lost locks,
    /// bad arguments, authentication and permission failures, and script errors.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// locker.connection().fail_next(1); // the connection drops once
    /// let dropped = locker.acquire("report", Duration::from_secs(30)).await.unwrap_err();
    /// assert!(dropped.is_transient());
    /// let lock = locker.acquire("report", Duration::from_secs(30)).await?; // so try again
    /// lock.release().await?;
    /// assert!(!redmutex::Error::NotHeld.is_transient());
    /// # Ok(()) }
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            Error::NotObtained(_) | Error::NotReplicated(_) => true,
            Error::Redis(e) => is_transient_redis(e),
            Error::NoQuorum(failure) => !failure.is_refused_for_good(),
            Error::NotHeld | Error::InvalidArgument(_) | Error::Random(_) => false,
            Error::InsideRuntime => false,
        }
    }

    /// Redis refused for lack of permission: the ACL user may not run a command redmutex
    /// needs, or not on this key or channel (`NOPERM`). Not transient: the user needs the
    /// rule [`acl_rule`](crate::check::acl_rule) prints (commands, `~PREFIX*`, `~{PREFIX*` and
    /// `&PREFIX*`).
    /// Redlock: so many nodes refused that no quorum can agree.
    ///
    /// ```
    /// use redis::{ErrorKind, RedisError, ServerErrorKind};
    /// let refusal = RedisError::from((
    ///     ErrorKind::Server(ServerErrorKind::NoPerm),
    ///     "NOPERM",
    ///     "this user has no permissions to run the 'evalsha' command".to_string(),
    /// ));
    /// let e = redmutex::Error::from(refusal);
    /// assert!(e.is_permission_denied() && !e.is_transient());
    /// assert!(redmutex::check::acl_rule("app:").contains("~app:*")); // what the user needs
    /// ```
    pub fn is_permission_denied(&self) -> bool {
        match self {
            Error::Redis(e) => is_no_permission(e),
            Error::NoQuorum(failure) => {
                let refusing = failure
                    .failures
                    .iter()
                    .filter(|f| matches!(&f.error, NodeError::Redis(e) if is_no_permission(e)))
                    .count();
                refusing > failure.nodes - failure.needed
            }
            _ => false,
        }
    }

    /// The Redis error behind this one, if any (for [`Error::NotObtained`], the last
    /// transient error seen while retrying). `None` for [`Error::NoQuorum`], whose
    /// per-node errors are in its [`QuorumFailure::failures`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let _held = locker.acquire("report", Duration::from_secs(30)).await?;
    /// locker.connection().fail_next(1); // the first try is lost on the way
    /// let e = locker.acquire("report", Duration::from_secs(30))
    ///     .retry(retry::constant(Duration::from_millis(100)))
    ///     .deadline(Duration::from_millis(500))
    ///     .await
    ///     .unwrap_err();
    /// assert!(e.is_not_obtained());
    /// assert_eq!(e.redis_error().map(|r| r.kind()), Some(redis::ErrorKind::Io));
    /// # Ok(()) }
    /// ```
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match self {
            Error::Redis(e) => Some(e),
            Error::NotObtained(n) => n.last_error.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotObtained(n) => {
                write!(
                    f,
                    "lock not obtained: held by another owner ({} {} in {:?})",
                    n.attempts,
                    if n.attempts == 1 { "try" } else { "tries" },
                    n.elapsed
                )?;
                if let Some(e) = &n.last_error {
                    write!(f, "; last Redis error: {e}")?;
                }
                if let Some(failure) = &n.no_quorum {
                    write!(f, "; last try: {failure}")?;
                }
                Ok(())
            }
            Error::NotHeld => f.write_str("lock not held: it expired or another owner took it"),
            Error::InvalidArgument(a) => write!(f, "invalid {}: {}", a.argument, a.reason),
            Error::Redis(e) if is_no_permission(e) => write!(
                f,
                "no permission: {e} (the Redis ACL user needs the commands, keys and \
                 channels of redmutex's minimal ACL rule)"
            ),
            Error::Redis(e) => write!(f, "redis error: {e}"),
            Error::NoQuorum(failure) => write!(f, "redlock: {failure}"),
            Error::Random(e) => write!(f, "no randomness for a lock token: {e}"),
            Error::NotReplicated(n) => write!(f, "not replicated: {n}"),
            Error::InsideRuntime => f.write_str(
                "a blocking redmutex call inside an async runtime (it would stall the \
                 runtime): use the async API there",
            ),
        }
    }
}

impl fmt::Display for Argument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Argument::Key => "key",
            Argument::Keys => "keys",
            Argument::Ttl => "ttl",
            Argument::Metadata => "metadata",
            Argument::Token => "token",
            Argument::Prefix => "prefix",
            Argument::Interval => "interval",
            Argument::Nodes => "nodes",
            Argument::Fences => "fences",
            Argument::Limit => "limit",
            Argument::Permits => "permits",
            Argument::Heartbeat => "heartbeat",
            Argument::Replication => "replication",
            Argument::Writes => "writes",
        })
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::NoQuorum(failure) => Some(failure.as_ref()),
            Error::NotObtained(NotObtained {
                last_error: Some(e),
                ..
            }) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::Redis(e)
    }
}
