//! Keep-alive: leases that renew themselves while work runs, and say loudly — in time to
//! stop the work — when they are lost.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::args::Keys;
use crate::connection::Connection;
use crate::engine::guard::Lock;
use crate::engine::lost::{loss_margin, LeaseState, LostReason, LostSignal};
use crate::engine::renewer::{Entry, Registration};
use crate::engine::wakeup::Listening;
use crate::error::{Argument, Error};
use crate::quorum::{Drift, QuorumSettings};
use crate::scripts::Held;
use crate::token;

/// Keep-alive settings for [`Lock::keep_alive_with`].
///
/// ```
/// use std::time::Duration;
/// let settings = redmutex::KeepAlive::new()
///     .interval(Duration::from_secs(2))          // default: a third of the TTL
///     .max_hold(Duration::from_secs(3600));       // stop renewing after an hour
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepAlive {
    interval: Option<Duration>,
    max_hold: Option<Duration>,
}

impl KeepAlive {
    /// Renew every third of the TTL, for as long as the lease is kept.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("reindex", Duration::from_secs(30)).await?;
    /// let lease = lock.keep_alive_with(redmutex::KeepAlive::new())?; // as `keep_alive()`
    /// tokio::time::sleep(Duration::from_secs(25)).await; // renewed at 10 s and 20 s
    /// assert_eq!(lease.renewals(), 2);
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn new() -> KeepAlive {
        KeepAlive::default()
    }

    /// Renew this often. Must be at least 1 ms and shorter than the lock's TTL; a third of
    /// the TTL (the default) leaves room for two failed renewals before the lease runs out.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::KeepAlive;
    /// let often = KeepAlive::new().interval(Duration::from_secs(2));
    /// let lock = locker.acquire("reindex", Duration::from_secs(30)).await?;
    /// let lease = lock.keep_alive_with(often)?;
    /// tokio::time::sleep(Duration::from_secs(9)).await; // renewed at 2, 4, 6 and 8 s
    /// assert_eq!(lease.renewals(), 4);
    /// lease.release().await?;
    /// let ttl = Duration::from_secs(30);
    /// assert!(KeepAlive::new().interval(Duration::ZERO).check(ttl, None).is_err());
    /// assert!(KeepAlive::new().interval(ttl).check(ttl, None).is_err());
    /// # Ok(()) }
    /// ```
    pub fn interval(mut self, interval: Duration) -> KeepAlive {
        self.interval = Some(interval);
        self
    }

    /// Hold the lock for at most this long in all, counted from the acquire: the last
    /// renewals are shortened so that the lock expires at that point. The lease reports
    /// [`LostReason::HoldLimitReached`] just before that (by the loss margin, as every loss
    /// is reported before the key can expire).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::{KeepAlive, LostReason};
    /// let start = tokio::time::Instant::now();
    /// let at_most = KeepAlive::new().max_hold(Duration::from_secs(90));
    /// let lock = locker.acquire("export", Duration::from_secs(30)).await?;
    /// let lease = lock.keep_alive_with(at_most)?;
    /// assert!(matches!(lease.lost().await, LostReason::HoldLimitReached)); // just before 90 s
    /// assert!(start.elapsed() > Duration::from_secs(89));
    /// tokio::time::sleep_until(start + Duration::from_secs(90)).await;
    /// assert!(locker.connection().keys().is_empty()); // expired: free for others
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> KeepAlive {
        self.max_hold = Some(max_hold);
        self
    }

    /// Whether a lock of `ttl` can be kept alive with these settings — on one node with
    /// its default drift allowance (1 %), on a Redlock locker with `redlock`'s (both
    /// shorten the lease; see [`Locker::with_drift`](crate::Locker::with_drift)) — checked
    /// without Redis, so that a caller can refuse before it acquires anything.
    /// [`Lock::keep_alive_with`] makes the same check.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the interval is below 1 ms, or the interval plus the
    /// loss margin (TTL/100 + 2 ms, at most half the TTL) plus the drift allowance is not
    /// below the TTL.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redmutex::{KeepAlive, QuorumSettings};
    /// assert!(KeepAlive::new().check(Duration::from_secs(30), None).is_ok());
    /// assert!(KeepAlive::new().check(Duration::from_millis(1), None).is_err());
    /// let redlock = QuorumSettings::new();
    /// // 6 ms can be kept alive on one node, not with the 2.06 ms Redlock drift allowance.
    /// assert!(KeepAlive::new().check(Duration::from_millis(6), None).is_ok());
    /// assert!(KeepAlive::new().check(Duration::from_millis(6), Some(&redlock)).is_err());
    /// ```
    pub fn check(&self, ttl: Duration, redlock: Option<&QuorumSettings>) -> Result<(), Error> {
        let drift = redlock.map_or(Drift::ONE_NODE.of(ttl), |settings| settings.drift(ttl));
        self.check_with_drift(ttl, drift).map(|_| ())
    }

    /// The renewal interval for a lease of `ttl` whose validity is shortened by `drift`,
    /// if it can be kept alive (see [`check`](KeepAlive::check)).
    fn check_with_drift(&self, ttl: Duration, drift: Duration) -> Result<Duration, Error> {
        let interval = self.interval.unwrap_or(ttl / 3);
        // A renewal must be able to land before the loss deadline, or the lease is lost
        // by construction.
        if interval >= Duration::from_millis(1) && interval + loss_margin(ttl) + drift < ttl {
            return Ok(interval);
        }
        let (argument, what) = match self.interval {
            Some(_) => (Argument::Interval, format!("interval {interval:?}")),
            None => (Argument::Ttl, format!("ttl {ttl:?}")),
        };
        Err(Error::invalid(
            argument,
            format!(
                "{what} cannot be kept alive: the interval must be at least 1ms and the \
                 interval + ttl/100 + 2ms (+ the Redlock drift allowance, {drift:?}) \
                 below the ttl ({ttl:?})"
            ),
        ))
    }
}

/// A lock that renews itself in the background until it is released, stopped, dropped —
/// or lost. Created by [`Lock::keep_alive`].
///
/// Renewal is owner-checked like [`Lock::refresh`]. The lease is declared lost when a
/// renewal finds the lock not held, or when no renewal got through before the lease's
/// validity ended (measured on this client's monotonic clock from the moment the last
/// successful renewal was *sent*; the signal fires slightly before that instant, even if
/// Redis does not answer at all). Watch it with [`lost`](Lease::lost),
/// [`is_lost`](Lease::is_lost), [`cancellation_token`](Lease::cancellation_token), or let
/// [`run`](Lease::run) cancel the work for you.
///
/// All leases of one [`Locker`](crate::Locker) are renewed by a single background task,
/// in batches: one script call renews up to a thousand leases.
///
/// # The lock inside
/// A lease dereferences to the [`Lock`] it renews: its token, metadata, fence, key or
/// permits, [`valid_until`](Lock::valid_until) (moved on by each renewal) and
/// [`write_if_held`](Lock::write_if_held) are the lock's, read through the lease. Once the
/// lease is lost, the lock sends nothing more: a fence not taken before and guarded writes
/// answer [`Error::NotHeld`], and its validity has ended.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// let lease = locker.acquire("ledger", Duration::from_secs(30)).await?.keep_alive()?;
/// let fence = lease.fence().await?; // the lock's fence, kept by every renewal
/// tokio::time::sleep(Duration::from_secs(55)).await; // renewed every 10 s meanwhile
/// assert_eq!(lease.remaining_validity(), Duration::from_millis(24_700)); // 30 s less 1 %, from 50 s
/// let mut writes = redmutex::Writes::new();
/// writes.add(redis::cmd("SET").arg("ledger:last").arg(fence), ["ledger:last"]);
/// lease.write_if_held(&writes).await?;
/// // Lost (another owner took the key): nothing more is sent for it.
/// locker.connection().take_over("ledger", Duration::from_secs(60));
/// lease.lost().await;
/// assert!(lease.write_if_held(&writes).await.unwrap_err().is_not_held());
/// assert_eq!(lease.fence().await?, fence); // taken while held, and still its own
/// assert_eq!(lease.remaining_validity(), Duration::ZERO);
/// let audit = locker.acquire("audit", Duration::from_secs(30)).await?.keep_alive()?;
/// locker.connection().expire_now("audit");
/// audit.lost().await;
/// assert!(audit.fence().await.unwrap_err().is_not_held()); // never taken: none now
/// # Ok(()) }
/// ```
///
/// # Dropping
/// Dropping a lease stops its renewal and releases the lock in the background, like
/// dropping a [`Lock`] (also as the program ends: see [`Lock`]'s "Dropping"); watchers
/// see [`LostReason::Released`].
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::ConnectionManager>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let lease = locker.acquire("reindex", Duration::from_secs(10)).await?.keep_alive()?;
/// let token = lease.cancellation_token(); // for work that checks in cooperatively
/// match lease.run(async move {
///     // A long job: the lock is renewed every ~3.3 s while it runs.
///     while !token.is_cancelled() { /* ... one step ... */ break; }
/// }).await {
///     Ok(()) => println!("done; lock released"),
///     Err(reason) => eprintln!("stopped early: {reason}"),
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lease stops renewal and releases the lock"]
pub struct Lease<C: Connection, P: Held = Keys> {
    lock: Option<Lock<C, P>>,
    state: Arc<LeaseState>,
    registration: Registration,
    /// With wake-up: where it hears at once that another process asks it to let go.
    _listening: Vec<Listening>,
}

impl<C: Connection, P: Held> Lock<C, P> {
    /// Turns this lock into a [`Lease`] renewed in the background every third of its TTL,
    /// with a "lost" signal. See [`Lease`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the TTL is too short to renew in time (as
    /// [`KeepAlive::check`] says: on one node, below 3 ms); the lock is then dropped, which
    /// releases it.
    ///
    /// # Panics
    /// Outside a tokio runtime (the renewal runs on it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lease = locker.acquire("reindex", Duration::from_secs(3)).await?.keep_alive()?;
    /// tokio::time::sleep(Duration::from_secs(10)).await; // well past the 3 s TTL
    /// assert!(!lease.is_lost());
    /// assert!(lease.renewals() >= 9); // one a second
    /// lease.release().await?;
    /// // Too short to be renewed in time:
    /// let brief = locker.acquire("flash", Duration::from_millis(2)).await?;
    /// assert!(brief.keep_alive().unwrap_err().is_invalid_argument());
    /// # Ok(()) }
    /// ```
    pub fn keep_alive(self) -> Result<Lease<C, P>, Error> {
        self.keep_alive_with(KeepAlive::new())
    }

    /// [`keep_alive`](Lock::keep_alive) with settings: renewal interval, maximum hold time.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an interval below 1 ms, or too long to renew before
    /// the lease runs out (see [`KeepAlive::check`]); the lock is then dropped, which
    /// releases it.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::KeepAlive;
    /// let settings = KeepAlive::new().interval(Duration::from_secs(5));
    /// let lock = locker.acquire("reindex", Duration::from_secs(30)).await?;
    /// let lease = lock.keep_alive_with(settings)?;
    /// tokio::time::sleep(Duration::from_secs(12)).await; // renewed at 5 s and 10 s
    /// assert_eq!(lease.renewals(), 2);
    /// lease.release().await?;
    /// let too_slow = KeepAlive::new().interval(Duration::from_secs(30)); // the TTL runs out first
    /// let lock = locker.acquire("reindex", Duration::from_secs(30)).await?;
    /// assert!(lock.keep_alive_with(too_slow).unwrap_err().is_invalid_argument());
    /// # Ok(()) }
    /// ```
    pub fn keep_alive_with(self, settings: KeepAlive) -> Result<Lease<C, P>, Error> {
        Lease::start(self, settings)
    }
}

impl<C: Connection, P: Held> Lease<C, P> {
    /// What tells this locker's waiters that the lease was lost, when it has wake-up.
    fn waiters_told(lock: &Lock<C, P>) -> Option<Box<dyn Fn() + Send + Sync>> {
        lock.context().hub.as_ref()?;
        // The channels are found when told: a waiter of this locker may line up (and draw
        // the locker's id) after the lease started.
        let (context, claim) = (lock.context().clone(), lock.shared_claim());
        Some(Box::new(move || {
            context.waiters_held_until(&*claim, Instant::now());
        }))
    }

    fn start(mut lock: Lock<C, P>, settings: KeepAlive) -> Result<Lease<C, P>, Error> {
        let acquired_at = lock.acquired_at();
        let ttl = lock.lease_ttl();
        let drift = lock.context().backend.allowance();
        let interval = settings.check_with_drift(ttl, drift.of(ttl))?;
        let state = Arc::new(LeaseState::new(lock.valid_until()));
        lock.set_lease(Some(state.clone()));
        let entry = Entry {
            claim: lock.shared_claim(),
            token: lock.token(),
            ttl,
            drift,
            interval,
            next_renewal: acquired_at + interval,
            valid_until: lock.valid_until(),
            hold_until: settings.max_hold.map(|d| {
                acquired_at
                    .checked_add(d)
                    .unwrap_or(acquired_at + MAX_HOLD_HORIZON)
            }),
            keep_until: lock.keep_until(),
            state: state.clone(),
            on_loss: Self::waiters_told(&lock),
        };
        let context = lock.context();
        let registration = context
            .renewer
            .register(&context.backend, &context.meter, entry);
        let listening = match &context.hub {
            Some(hub) => {
                let keys = lock.claim().keys();
                (keys.iter())
                    .map(|key| token::ask_channel(key, keys.channels()))
                    .map(|channel| hub.listen(&channel, registration.prompt()))
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(Lease {
            lock: Some(lock),
            state,
            registration,
            _listening: listening,
        })
    }

    /// The lock this lease renews.
    pub(crate) fn lock(&self) -> &Lock<C, P> {
        self.lock.as_ref().expect("present until consumed")
    }

    /// Replaces the metadata kept with the claim (an election's proclaimed value, once the
    /// server has it).
    pub(crate) fn set_metadata(&mut self, metadata: String) {
        if let Some(lock) = self.lock.as_mut() {
            lock.set_metadata(metadata);
        }
    }

    /// How many renewals succeeded so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lease = locker.acquire("reindex", Duration::from_secs(3)).await?.keep_alive()?;
    /// assert_eq!(lease.renewals(), 0);
    /// tokio::time::sleep(Duration::from_millis(3500)).await; // renewed every second
    /// assert_eq!(lease.renewals(), 3);
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn renewals(&self) -> u64 {
        self.state.renewals()
    }

    /// Whether the lease was lost. Cheap: one atomic read.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let mut steps = 0;
    /// while !lease.is_lost() {
    ///     tokio::time::sleep(Duration::from_secs(3)).await; // one step of the work
    ///     steps += 1;
    ///     if steps == 2 {
    ///         locker.connection().take_over("reindex", Duration::from_secs(60)); // someone else
    ///     }
    /// }
    /// assert_eq!(steps, 4); // the renewal at 10 s found the lock lost
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.state.reason().is_some()
    }

    /// Completes when the lease is lost, with the reason.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let work = tokio::time::sleep(Duration::from_secs(3600)); // an hour of work
    /// locker.connection().expire_now("reindex"); // ... but the key is gone
    /// tokio::select! {
    ///     reason = lease.lost() => assert!(matches!(reason, LostReason::NotHeld)),
    ///     () = work => unreachable!("the next renewal finds the lock lost"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LostReason {
        self.state.ended().await
    }

    /// Whether another process asked this holder to let go
    /// ([`Locker::request_release`](crate::Locker::request_release)), as a renewal found.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let mut batches = 0;
    /// while !lease.is_release_requested() && !lease.is_lost() {
    ///     tokio::time::sleep(Duration::from_secs(4)).await; // one batch of the work
    ///     batches += 1;
    ///     if batches == 1 {
    ///         locker.request_release("reindex").await?; // as another process would
    ///     }
    /// }
    /// // Heard during the second batch: the locker has wake-up, so the request prompted a
    /// // renewal at once (without wake-up, the renewal at 10 s would bring it: 3 batches).
    /// assert_eq!(batches, 2);
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_release_requested(&self) -> bool {
        self.state.release_requested()
    }

    /// Completes once another process has asked this holder to let go
    /// ([`Locker::request_release`](crate::Locker::request_release)): at the first renewal
    /// after the request, which with [wake-up](crate::Locker::with_wake_up) the request
    /// itself prompts at once. The lease still holds: release it (or let `run`'s work end) at a
    /// safe point. It never completes because the lease ended: wait for
    /// [`lost`](Lease::lost) beside it.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// locker.request_release("reindex").await?; // as another process would
    /// tokio::select! {
    ///     () = lease.release_requested() => lease.release().await?, // at a safe point
    ///     reason = lease.lost() => panic!("stop the work at once: {reason}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release_requested(&self) {
        self.state.asked().await;
    }

    /// A clonable watcher of this lease, e.g. for another task.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// let watcher = tokio::spawn(async move { signal.lost().await });
    /// lease.release().await?;
    /// assert!(matches!(watcher.await?, LostReason::Released));
    /// # Ok(()) }
    /// ```
    pub fn signal(&self) -> LostSignal {
        LostSignal(self.state.clone())
    }

    /// A token cancelled when the lease ends (lost, released, stopped or dropped), for work
    /// that checks in cooperatively. Cancelling it yourself does not affect the lease.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let token = lease.cancellation_token();
    /// let worker = tokio::spawn(async move {
    ///     let mut steps = 0;
    ///     while !token.is_cancelled() {
    ///         tokio::time::sleep(Duration::from_secs(1)).await; // one step of the work
    ///         steps += 1;
    ///     }
    ///     steps
    /// });
    /// tokio::time::sleep(Duration::from_millis(4500)).await;
    /// lease.release().await?;
    /// assert_eq!(worker.await?, 5);
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.state.cancellation_token()
    }

    /// Runs `work` under the lease: if the lease is lost first, `work` is dropped
    /// (cancelled) and the reason returned; if `work` finishes first, the lock is released
    /// and its output returned.
    ///
    /// # Cancel safety
    /// If this future is dropped, `work` is dropped with it and the lease is dropped, which
    /// releases the lock in the background.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// let hour = Duration::from_secs(3600);
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let rows = lease.run(async { tokio::time::sleep(hour).await; 42 }).await?;
    /// assert_eq!(rows, 42);
    /// assert!(locker.connection().keys().is_empty()); // released when done
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// locker.connection().expire_now("reindex");
    /// let cut_short = lease.run(tokio::time::sleep(hour)).await;
    /// assert!(matches!(cut_short, Err(LostReason::NotHeld)));
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(self, work: F) -> Result<F::Output, LostReason> {
        let outcome = tokio::select! {
            biased;
            reason = self.lost() => Err(reason),
            output = work => Ok(output),
        };
        match outcome {
            Ok(output) => {
                // The work is done; whether the release finds the lock or not changes
                // nothing for it.
                let _ = self.release().await;
                Ok(output)
            }
            Err(reason) => Err(reason),
        }
    }

    /// Stops renewal and deletes the keys still held by this owner.
    ///
    /// # Errors
    /// As [`Lock::release`]; [`Error::NotHeld`] if the lease had been lost.
    ///
    /// # Cancel safety
    /// Renewal stops at once; if cancelled, the release may or may not have reached Redis,
    /// and the dropped lock is released in the background.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// lease.release().await?;
    /// assert!(matches!(signal.reason(), Some(LostReason::Released)));
    /// assert!(locker.connection().keys().is_empty());
    /// let lease = locker.acquire("reindex", Duration::from_secs(30)).await?.keep_alive()?;
    /// locker.connection().expire_now("reindex");
    /// lease.lost().await;
    /// assert!(lease.release().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<(), Error> {
        self.registration.unregister();
        self.state.end(LostReason::Released);
        self.take_lock().release().await
    }

    /// Stops renewal without releasing: the lock stays held until its TTL runs out (or
    /// it is refreshed or released through the returned [`Lock`]). Watchers see
    /// [`LostReason::Stopped`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::LostReason;
    /// let lease = locker.acquire("handoff", Duration::from_secs(30)).await?.keep_alive()?;
    /// let signal = lease.signal();
    /// let lock = lease.stop();
    /// assert!(matches!(signal.reason(), Some(LostReason::Stopped)));
    /// assert!(locker.inspect("handoff").await?.held); // still held, no longer renewed
    /// tokio::time::sleep(Duration::from_secs(31)).await;
    /// assert!(lock.release().await.unwrap_err().is_not_held()); // expired by its TTL
    /// # Ok(()) }
    /// ```
    pub fn stop(mut self) -> Lock<C, P> {
        self.registration.unregister();
        self.state.end(LostReason::Stopped);
        self.take_lock()
    }

    fn take_lock(&mut self) -> Lock<C, P> {
        let mut lock = self.lock.take().expect("present until consumed");
        // What the renewals left: renewed, or (lost) ended with the loss.
        lock.set_lease(None);
        lock
    }
}

impl<C: Connection, P: Held> Deref for Lease<C, P> {
    type Target = Lock<C, P>;

    /// The lock this lease renews: its token, metadata, fence, validity (as the renewals
    /// keep it) and guarded writes are read there.
    fn deref(&self) -> &Lock<C, P> {
        self.lock()
    }
}

/// A far-away instant for absurd hold limits, where `Instant` arithmetic would overflow.
const MAX_HOLD_HORIZON: Duration = Duration::from_secs(100 * 365 * 86_400);

impl<C: Connection, P: Held> Drop for Lease<C, P> {
    fn drop(&mut self) {
        if self.lock.is_some() {
            self.registration.unregister();
            self.state.end(LostReason::Released);
            // The lock's own Drop releases it in the background.
        }
    }
}

impl<C: Connection, P: Held> fmt::Debug for Lease<C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", &self.lock)
            .field("lost", &self.state.reason())
            .field("renewals", &self.renewals())
            .finish()
    }
}
