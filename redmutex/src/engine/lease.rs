//! Keep-alive: leases that renew themselves while work runs, and say loudly — in time to
//! stop the work — when they are lost.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::args::Keys;
use crate::connection::Connection;
use crate::engine::guard::Lock;
use crate::engine::lost::{loss_margin, LeaseState, LostReason, LostSignal};
use crate::engine::renewer::{Entry, Registration};
use crate::error::{Argument, Error};
use crate::quorum::QuorumSettings;
use crate::token::Token;

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
    pub fn new() -> KeepAlive {
        KeepAlive::default()
    }

    /// Renew this often. Must be at least 1 ms and shorter than the lock's TTL; a third of
    /// the TTL (the default) leaves room for two failed renewals before the lease runs out.
    pub fn interval(mut self, interval: Duration) -> KeepAlive {
        self.interval = Some(interval);
        self
    }

    /// Hold the lock for at most this long in all, counted from the acquire: the last
    /// renewals are shortened so that the lock expires at that point, and the lease then
    /// ends with [`LostReason::HoldLimitReached`].
    pub fn max_hold(mut self, max_hold: Duration) -> KeepAlive {
        self.max_hold = Some(max_hold);
        self
    }

    /// Whether a lock of `ttl` can be kept alive with these settings — on a Redlock locker
    /// judged with `redlock` (its drift allowance shortens the lease) — checked without
    /// Redis, so that a caller can refuse before it acquires anything.
    /// [`Lock::keep_alive_with`] makes the same check.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the interval is below 1 ms, or the interval plus the
    /// loss margin (TTL/100 + 2 ms) plus the drift allowance is not below the TTL.
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
        let drift = redlock.map_or(Duration::ZERO, |settings| settings.drift(ttl));
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
pub struct Lease<C: Connection, P = Keys> {
    lock: Option<Lock<C, P>>,
    state: Arc<LeaseState>,
    registration: Registration,
}

impl<C: Connection, P> Lock<C, P> {
    /// Turns this lock into a [`Lease`] renewed in the background every third of its TTL,
    /// with a "lost" signal. See [`Lease`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the TTL is too short to renew in time (below about
    /// 5 ms); the lock is then dropped, which releases it.
    ///
    /// # Panics
    /// Outside a tokio runtime (the renewal runs on it).
    pub fn keep_alive(self) -> Result<Lease<C, P>, Error> {
        self.keep_alive_with(KeepAlive::new())
    }

    /// [`keep_alive`](Lock::keep_alive) with settings: renewal interval, maximum hold time.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an interval below 1 ms, or too long to renew before
    /// the lease runs out (interval + TTL/100 + 2 ms, plus the drift allowance on Redlock,
    /// must stay below the TTL); the lock is
    /// then dropped, which releases it.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn keep_alive_with(self, settings: KeepAlive) -> Result<Lease<C, P>, Error> {
        Lease::start(self, settings)
    }
}

impl<C: Connection, P> Lease<C, P> {
    fn start(lock: Lock<C, P>, settings: KeepAlive) -> Result<Lease<C, P>, Error> {
        let acquired_at = lock.acquired_at();
        let ttl = lock.lease_ttl();
        let drift = lock.context().backend.drift(ttl);
        let interval = settings.check_with_drift(ttl, drift)?;
        let state = Arc::new(LeaseState::new(lock.valid_until()));
        let entry = Entry {
            claim: lock.claim().clone(),
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
        };
        let context = lock.context();
        let registration = context
            .renewer
            .register(&context.backend, &context.meter, entry);
        Ok(Lease {
            lock: Some(lock),
            state,
            registration,
        })
    }

    /// The lock this lease renews.
    pub(crate) fn lock(&self) -> &Lock<C, P> {
        self.lock.as_ref().expect("present until consumed")
    }

    /// The owner's token.
    pub fn token(&self) -> Token {
        self.lock().token()
    }

    /// The metadata stored with the token, if any.
    pub fn metadata(&self) -> Option<&str> {
        self.lock().metadata()
    }

    /// The acquisition's fencing token, taken on the first call if the acquire did not
    /// take it (see [`Lock::fence`]); renewals keep it.
    ///
    /// # Errors
    /// As [`Lock::fence`]; [`Error::NotHeld`] once the lease is lost.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::fence`].
    pub async fn fence(&self) -> Result<u64, Error> {
        if let Some(fence) = self.lock().fence_if_taken() {
            return Ok(fence);
        }
        if self.is_lost() {
            return Err(Error::NotHeld);
        }
        self.lock().fence_within(self.valid_until()).await
    }

    /// The fence, if it was taken already (see [`Lock::fence_if_taken`]).
    pub fn fence_if_taken(&self) -> Option<u64> {
        self.lock().fence_if_taken()
    }

    /// The TTL each renewal sets (see [`Lock::lease_ttl`]).
    pub fn lease_ttl(&self) -> Duration {
        self.lock().lease_ttl()
    }

    /// Until when the lock is certainly held, as of the last successful renewal.
    pub fn valid_until(&self) -> Instant {
        self.state.valid_until()
    }

    /// How many renewals succeeded so far.
    pub fn renewals(&self) -> u64 {
        self.state.renewals()
    }

    /// Whether the lease was lost. Cheap: one atomic read.
    pub fn is_lost(&self) -> bool {
        self.state.reason().is_some()
    }

    /// Completes when the lease is lost, with the reason.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) -> LostReason {
        self.state.ended().await
    }

    /// A clonable watcher of this lease, e.g. for another task.
    pub fn signal(&self) -> LostSignal {
        LostSignal(self.state.clone())
    }

    /// A token cancelled when the lease ends (lost, released, stopped or dropped), for work
    /// that checks in cooperatively. Cancelling it yourself does not affect the lease.
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
    pub async fn release(mut self) -> Result<(), Error> {
        self.registration.unregister();
        self.state.end(LostReason::Released);
        self.take_lock().release().await
    }

    /// Stops renewal without releasing: the lock stays held until its TTL runs out (or
    /// it is refreshed or released through the returned [`Lock`]). Watchers see
    /// [`LostReason::Stopped`].
    pub fn stop(mut self) -> Lock<C, P> {
        self.registration.unregister();
        self.state.end(LostReason::Stopped);
        self.take_lock()
    }

    fn take_lock(&mut self) -> Lock<C, P> {
        let mut lock = self.lock.take().expect("present until consumed");
        let lost = matches!(
            self.state.reason(),
            Some(
                LostReason::NotHeld | LostReason::Unreachable { .. } | LostReason::HoldLimitReached
            )
        );
        // A lost lease's keys are gone (or about to be): nothing is valid any more.
        lock.set_valid_until(if lost {
            Instant::now()
        } else {
            self.state.valid_until()
        });
        lock
    }
}

/// A far-away instant for absurd hold limits, where `Instant` arithmetic would overflow.
const MAX_HOLD_HORIZON: Duration = Duration::from_secs(100 * 365 * 86_400);

impl<C: Connection, P> Drop for Lease<C, P> {
    fn drop(&mut self) {
        if self.lock.is_some() {
            self.registration.unregister();
            self.state.end(LostReason::Released);
            // The lock's own Drop releases it in the background.
        }
    }
}

impl<C: Connection, P> fmt::Debug for Lease<C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", &self.lock)
            .field("lost", &self.state.reason())
            .field("renewals", &self.renewals())
            .finish()
    }
}
