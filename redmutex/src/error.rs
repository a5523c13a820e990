//! Errors, sorted by what the caller should do about them.

use std::fmt;
use std::time::Duration;

use crate::classify::{is_no_permission, is_transient_redis};
use crate::quorum::{NodeError, QuorumFailure};

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
    /// a refresh or fence does not count (the lock stays valid only as long as before).
    /// Transient: the replicas may catch up.
    NotReplicated(NotReplicated),
    /// A call of the [blocking API](crate::blocking) was made on a thread that runs an
    /// async runtime, where waiting would stall that runtime: use the async API there.
    /// Nothing was sent.
    InsideRuntime,
}

/// Details of [`Error::NotObtained`].
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
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidArgument {
    /// Which argument was wrong.
    pub argument: Argument,
    /// Why, in words.
    pub reason: String,
}

/// The argument named by an [`InvalidArgument`].
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
}

impl Error {
    pub(crate) fn invalid(argument: Argument, reason: impl Into<String>) -> Error {
        Error::InvalidArgument(InvalidArgument {
            argument,
            reason: reason.into(),
        })
    }

    /// The lock is held by someone else: trying again later may succeed.
    pub fn is_not_obtained(&self) -> bool {
        matches!(self, Error::NotObtained(_))
    }

    /// The lock was lost (expired or taken over): stop relying on it at once.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld)
    }

    /// The call itself was wrong; retrying the same call cannot help.
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument(_))
    }

    /// Retrying later may help: the lock was busy, or Redis was unreachable, timed out,
    /// was loading, failing over or redirecting. False for lost locks, bad arguments,
    /// authentication and permission failures, and script errors.
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
    /// rule [`acl_rule`](crate::acl_rule) prints (commands, `~PREFIX*`, `~{PREFIX*` and `&PREFIX*`).
    /// Redlock: so many nodes refused that no quorum can agree.
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
