//! What an acquire's failed tries add up to: the reason each failed, as the caller's
//! observer sees it, and the error the acquire ends with.

use std::time::Duration;

use tokio::time::Instant;

use crate::args::Keys;
use crate::backend::common::Attempt;
use crate::error::{Error, NotObtained};
use crate::quorum::QuorumFailure;

/// What [`Acquire::on_failed_try`](crate::Acquire::on_failed_try) is told about each
/// failed try.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use redmutex::retry;
/// # let locker = redmutex::Locker::in_memory();
/// let held = locker.acquire("job", Duration::from_secs(30)).await?;
/// let tries = Arc::new(Mutex::new(Vec::new()));
/// let log = Arc::clone(&tries);
/// let tried = locker
///     .acquire("job", Duration::from_secs(30))
///     .retry(retry::constant(Duration::from_secs(1)).take(2))
///     .on_failed_try(move |failed| log.lock().unwrap().push((failed.attempt, failed.next_delay)))
///     .await;
/// assert!(tried.unwrap_err().is_not_obtained());
/// let pause = Some(Duration::from_secs(1));
/// assert_eq!(*tries.lock().unwrap(), [(1, pause), (2, pause), (3, None)]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct FailedTry<'e> {
    /// 1 for the first try.
    pub attempt: u32,
    /// Why it failed.
    pub reason: TryFailure<'e>,
    /// Time since the acquire started.
    pub elapsed: Duration,
    /// The pause before the next try, or `None` when this was the last one (the strategy
    /// ended or the deadline passed).
    pub next_delay: Option<Duration>,
    /// A fair lock's waiter: how many live waiters are ahead of it in line, as this try
    /// found (`Some(0)`: next, once the holder releases); `None` for other primitives.
    pub ahead: Option<u32>,
}

/// Why one try failed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use redmutex::{retry, TryFailure};
/// # let locker = redmutex::Locker::in_memory();
/// let held = locker.acquire("job", Duration::from_secs(30)).await?;
/// locker.connection().fail_next(1); // the next try meets a dropped connection
/// let reasons = Arc::new(Mutex::new(Vec::new()));
/// let log = Arc::clone(&reasons);
/// let tried = locker
///     .acquire("job", Duration::from_secs(30))
///     .retry(retry::constant(Duration::from_millis(10)).take(1))
///     .on_failed_try(move |failed| log.lock().unwrap().push(match failed.reason {
///         TryFailure::Held { key } => format!("held: {}", String::from_utf8_lossy(key)),
///         TryFailure::Redis(_) => "redis error".to_string(),
///         _ => "no quorum".to_string(),
///     }))
///     .await;
/// assert!(tried.unwrap_err().is_not_obtained());
/// assert_eq!(*reasons.lock().unwrap(), ["redis error", "held: job"]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum TryFailure<'e> {
    /// This key (with the locker's prefix) is held by another owner — for a semaphore,
    /// too few of its permits are free.
    Held {
        /// The key found held.
        key: &'e [u8],
    },
    /// A transient Redis error (unreachable, timeout, loading, failover…).
    Redis(&'e redis::RedisError),
    /// Redlock: too few nodes agreed; [`QuorumFailure::held`] and
    /// [`QuorumFailure::unreachable`] say why.
    NoQuorum(&'e QuorumFailure),
}

impl TryFailure<'_> {
    /// Whether the try found the claim held by others — on a quorum: held on so many
    /// nodes that no quorum is left — rather than failing to ask.
    pub(crate) fn found_held(&self) -> bool {
        match self {
            TryFailure::Held { .. } => true,
            TryFailure::NoQuorum(failure) => failure.blocks(failure.held()),
            TryFailure::Redis(_) => false,
        }
    }
}

/// The callback given to [`Acquire::on_failed_try`](crate::Acquire::on_failed_try).
pub(crate) type Observer<'a> = Box<dyn FnMut(&FailedTry<'_>) + Send + 'a>;

/// The failed tries of one acquire so far.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) attempts: u32,
    /// Some try found the claim held by others (rather than Redis unreachable).
    saw_held: bool,
    last_error: Option<redis::RedisError>,
    last_quorum: Option<Box<QuorumFailure>>,
}

impl Tally {
    /// Forgets that a try found the claim held: the acquire ends with the last error
    /// itself (see `Acquire::fail_fast`), not "not obtained".
    pub(crate) fn forget_held(&mut self) {
        self.saw_held = false;
    }

    /// Counts a try that did not obtain (`attempt`, for `keys`): why it failed, as the
    /// observer is told — or the error that ends the acquire at once.
    pub(crate) fn record<'t>(
        &'t mut self,
        attempt: Attempt,
        keys: &'t Keys,
    ) -> Result<TryFailure<'t>, Error> {
        match attempt {
            // (Or it queued behind this locker's waiters without asking.)
            Attempt::Held { index, .. } => {
                self.saw_held = true;
                let key = keys.get(index).unwrap_or_default();
                Ok(TryFailure::Held { key })
            }
            Attempt::Failed { error, .. } => Ok(TryFailure::Redis(self.last_error.insert(error))),
            Attempt::Ended { error, .. } => Err(error),
            Attempt::NoQuorum { failure, .. } => {
                // "Held by someone else" only when the other owners' nodes alone leave no
                // quorum; otherwise it is an outage (with a stale key somewhere).
                self.saw_held |= failure.blocks(failure.held());
                // Refused for good (auth, permission) on so many nodes that no retry can
                // reach a quorum.
                if failure.is_refused_for_good() {
                    return Err(Error::NoQuorum(failure));
                }
                Ok(TryFailure::NoQuorum(self.last_quorum.insert(failure)))
            }
            Attempt::Obtained(_) => unreachable!("an obtained try is not a failure"),
        }
    }

    /// The error of an acquire that gave up after these tries, started at `started`.
    pub(crate) fn into_error(self, started: Instant) -> Error {
        match (self.last_error, self.last_quorum) {
            (Some(e), _) if !self.saw_held => Error::Redis(e),
            (_, Some(failure)) if !self.saw_held => Error::NoQuorum(failure),
            (last_error, no_quorum) => Error::NotObtained(NotObtained {
                attempts: self.attempts,
                elapsed: started.elapsed(),
                last_error,
                no_quorum,
            }),
        }
    }
}
