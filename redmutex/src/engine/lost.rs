//! How a lease ends: the reason, the state a lease shares with its renewer and its
//! watchers, and the margin by which a loss is announced before the validity ends.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why a lease ended.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::LostReason;
/// # let locker = redmutex::Locker::in_memory();
/// let lease = locker.acquire("job", Duration::from_secs(30)).await?.keep_alive()?;
/// locker.connection().take_over("job", Duration::from_secs(60)); // another owner has it now
/// let reason = lease.lost().await; // the next renewal finds out
/// assert!(matches!(reason, LostReason::NotHeld));
/// assert_eq!(reason.to_string(), "lock lost: it expired or another owner took it");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LostReason {
    /// A renewal found the lock no longer held: it expired, was deleted, or another owner
    /// took it.
    NotHeld,
    /// No renewal got through before the lease ran out (Redis unreachable, frozen, or too
    /// slow); `last_error` is the last error a renewal got, if any (a request that simply
    /// never came back has none).
    Unreachable {
        /// The last renewal error seen.
        last_error: Option<redis::RedisError>,
    },
    /// The [`KeepAlive::max_hold`](crate::KeepAlive::max_hold) limit was reached and the lock
    /// expired.
    HoldLimitReached,
    /// The owner released or dropped the lease: not a loss, but the lock is not held any
    /// more, so guarded work must stop all the same.
    Released,
    /// The owner stopped the renewal ([`Lease::stop`](crate::Lease::stop)); the lock may still
    /// be held until its TTL, but nothing renews it.
    Stopped,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::NotHeld => f.write_str("lock lost: it expired or another owner took it"),
            LostReason::Unreachable {
                last_error: Some(e),
            } => {
                write!(
                    f,
                    "lock lost: no renewal reached Redis in time (last error: {e})"
                )
            }
            LostReason::Unreachable { last_error: None } => {
                f.write_str("lock lost: no renewal reached Redis in time")
            }
            LostReason::HoldLimitReached => {
                f.write_str("lock ended: the maximum hold time was reached")
            }
            LostReason::Released => f.write_str("lock released by its owner"),
            LostReason::Stopped => f.write_str("lock renewal stopped by its owner"),
        }
    }
}

impl std::error::Error for LostReason {}

/// What a lease, its renewer and its watchers share.
pub(crate) struct LeaseState {
    /// Why and when (by this process's monotonic clock) the lease ended; the first end wins.
    ended: OnceLock<(LostReason, Instant)>,
    cancel: CancellationToken,
    /// Set when a renewal finds that another process asked this holder to let go
    /// (`Locker::request_release`), and whoever waits for that is woken. (A flag and a
    /// `Notify`, which allocate nothing: every lease has them.)
    asked: AtomicBool,
    asked_notify: tokio::sync::Notify,
    valid_until: Mutex<Instant>,
    renewals: AtomicU64,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant) -> LeaseState {
        LeaseState {
            ended: OnceLock::new(),
            cancel: CancellationToken::new(),
            asked: AtomicBool::new(false),
            asked_notify: tokio::sync::Notify::new(),
            valid_until: Mutex::new(valid_until),
            renewals: AtomicU64::new(0),
        }
    }

    /// Records why the lease ended (the first reason wins) and wakes every watcher. A
    /// lost lease's validity ends with it: a lease declared lost may be released at once (so that
    /// nobody waits for a lock its owner gave up on), and a holder that looks at
    /// `valid_until` rather than at the signal must not go on believing.
    pub(crate) fn end(&self, reason: LostReason) {
        let now = Instant::now();
        let _ = self.ended.set((reason, now));
        let lost = !matches!(
            self.reason(),
            Some(LostReason::Released | LostReason::Stopped)
        );
        if lost {
            let mut valid_until = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
            *valid_until = (*valid_until).min(now);
        }
        self.cancel.cancel();
    }

    /// Records that another process asked the holder to let go, and wakes whoever waits
    /// for that.
    pub(crate) fn ask_release(&self) {
        self.asked.store(true, Ordering::Release);
        self.asked_notify.notify_waiters();
    }

    /// Whether another process asked the holder to let go.
    pub(crate) fn release_requested(&self) -> bool {
        self.asked.load(Ordering::Acquire)
    }

    /// Completes once another process asked the holder to let go.
    pub(crate) async fn asked(&self) {
        loop {
            // Registered before the flag is read, so that a request between the two wakes it.
            let notified = self.asked_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.release_requested() {
                return;
            }
            notified.await;
        }
    }

    /// Why the lease ended, if it has.
    pub(crate) fn reason(&self) -> Option<&LostReason> {
        self.ended.get().map(|(reason, _)| reason)
    }

    /// When the lease ended, if it has.
    pub(crate) fn ended_at(&self) -> Option<Instant> {
        self.ended.get().map(|&(_, at)| at)
    }

    /// How many renewals succeeded.
    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// A token cancelled when the lease ends.
    pub(crate) fn cancellation_token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    pub(crate) fn renewed(&self, valid_until: Instant) {
        self.set_valid_until(valid_until);
        self.renewals.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_valid_until(&self, valid_until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = valid_until;
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) async fn ended(&self) -> LostReason {
        self.cancel.cancelled().await;
        self.reason()
            .cloned()
            .expect("the reason is set before cancelling")
    }
}

/// A cheap, clonable view of a lease's fate, for code that does not own the lease.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::LostReason;
/// # let locker = redmutex::Locker::in_memory();
/// let lease = locker.acquire("job", Duration::from_secs(30)).await?.keep_alive()?;
/// let signal = lease.signal(); // for a task that does not own the lease
/// let work = tokio::spawn(async move {
///     tokio::select! {
///         reason = signal.lost() => Err(reason), // stop at once
///         () = tokio::time::sleep(Duration::from_secs(60)) => Ok("done"), // the work
///     }
/// });
/// lease.release().await?;
/// assert!(matches!(work.await.unwrap(), Err(LostReason::Released)));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LostSignal(pub(crate) Arc<LeaseState>);

impl LostSignal {
    /// Whether the lease has ended, for any [`LostReason`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::Locker::in_memory();
    /// let lease = locker.acquire("job", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// assert!(!signal.is_lost());
    /// lease.release().await?;
    /// assert!(signal.is_lost()); // released counts too: the guarded work must stop
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.0.reason().is_some()
    }

    /// Why the lease ended, if it has.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// # let locker = redmutex::Locker::in_memory();
    /// let lease = locker.acquire("job", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// assert!(signal.reason().is_none());
    /// let lock = lease.stop(); // still held, but nothing renews it
    /// assert!(matches!(signal.reason(), Some(LostReason::Stopped)));
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn reason(&self) -> Option<LostReason> {
        self.0.reason().cloned()
    }

    /// When the lease ended, by this process's monotonic clock: the moment redmutex
    /// decided it (a renewal's answer, the validity about to run out, a release), not the
    /// moment a watcher woke up to it. A loss is decided at the latest a little before the
    /// lease's validity ends (1 % of the TTL plus 2 ms, at most half the TTL: a renewal
    /// that finds the lock gone decides sooner), so that the signal reaches the work while
    /// the lock is still held; the lease's [`valid_until`](crate::Lock::valid_until) is
    /// then cut to this moment.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::Locker::in_memory();
    /// let lease = locker.acquire("job", Duration::from_secs(3)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// assert_eq!(signal.ended_at(), None);
    /// locker.connection().fail_next(1_000); // Redis unreachable from now on
    /// let valid_until = lease.valid_until();
    /// signal.lost().await;
    /// let ended_at = signal.ended_at().expect("ended");
    /// assert!(ended_at < valid_until); // announced while the lock was still held
    /// assert_eq!(lease.valid_until(), ended_at);
    /// # Ok(()) }
    /// ```
    pub fn ended_at(&self) -> Option<Instant> {
        self.0.ended_at()
    }

    /// Completes when the lease ends, with the reason.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// # let locker = redmutex::Locker::in_memory();
    /// let lease = locker.acquire("job", Duration::from_secs(3)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// locker.connection().fail_next(1_000); // Redis unreachable from now on
    /// let reason = signal.lost().await; // before the lease runs out
    /// assert!(matches!(reason, LostReason::Unreachable { last_error: Some(_) }));
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LostReason {
        self.0.ended().await
    }

    /// Whether another process asked the holder to let go (see
    /// [`Lease::release_requested`](crate::Lease::release_requested)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::Locker::in_memory();
    /// let lease = locker.acquire("job", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// locker.request_release("job").await?; // as another process would
    /// assert!(!signal.is_release_requested()); // not before the next renewal
    /// tokio::time::sleep(Duration::from_secs(11)).await;
    /// assert!(signal.is_release_requested() && !signal.is_lost());
    /// # lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_release_requested(&self) -> bool {
        self.0.release_requested()
    }

    /// Completes once another process has asked the holder to let go (see
    /// [`Lease::release_requested`](crate::Lease::release_requested)); never because the
    /// lease ended.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// # let locker = redmutex::Locker::in_memory();
    /// let lease = locker.acquire("job", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// let work = tokio::spawn(async move {
    ///     tokio::select! {
    ///         () = signal.release_requested() => "asked to stop: saved and stopped",
    ///         _ = signal.lost() => "lost",
    ///     }
    /// });
    /// locker.request_release("job").await?; // as another process would
    /// assert_eq!(work.await.unwrap(), "asked to stop: saved and stopped");
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_requested(&self) {
        self.0.asked().await;
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LostSignal").field(&self.0.reason()).finish()
    }
}

/// How long before the end of its validity a lease is declared lost: enough for the
/// signal to reach the work while the lock is still certainly held.
pub(crate) fn loss_margin(ttl: Duration) -> Duration {
    (ttl / 100 + Duration::from_millis(2)).min(ttl / 2)
}
