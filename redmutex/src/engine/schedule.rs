//! When an acquire tries: the retry strategy's pauses, bounded by the deadline, and a
//! pause that wakes at its own instant.

use std::iter::Peekable;
use std::time::Duration;

use tokio::time::Instant;

/// A retry strategy, as an acquire holds it.
pub(crate) type Retry<'a> = Box<dyn Iterator<Item = Duration> + Send + 'a>;

/// The tries of one acquire: when it started, until when it may try, and the pauses.
pub(crate) struct Schedule<'a> {
    /// Peeking tells whether this acquire may wait at all before its first try.
    retry: Peekable<Retry<'a>>,
    pub(crate) started: Instant,
    deadline: Option<Instant>,
}

impl<'a> Schedule<'a> {
    /// Starts now; no try starts after `deadline` from now (`None`: never).
    pub(crate) fn start(retry: Retry<'a>, deadline: Duration) -> Schedule<'a> {
        let started = Instant::now();
        Schedule {
            retry: retry.peekable(),
            started,
            deadline: started.checked_add(deadline),
        }
    }

    /// Whether the strategy has another pause: the acquire may wait.
    pub(crate) fn may_wait(&mut self) -> bool {
        self.retry.peek().is_some()
    }

    /// How long a try sent at `sent_at` may wait for its reply: a reply after the TTL is
    /// worthless (the claim would be gone by the time we knew), and none past the deadline.
    pub(crate) fn try_until(&self, sent_at: Instant, ttl: Duration) -> Option<Instant> {
        let until = sent_at.checked_add(ttl);
        match self.deadline.filter(|d| *d > sent_at) {
            Some(deadline) => Some(until.map_or(deadline, |t| t.min(deadline))),
            None => until,
        }
    }

    /// When the next try is due after a failed one at `now`; `None` when the strategy
    /// ended or the deadline passed. A pause that would end past the deadline ends at it,
    /// for one last try there.
    pub(crate) fn next_wake(&mut self, now: Instant) -> Option<Instant> {
        let delay = self.retry.next()?;
        match self.deadline {
            Some(deadline) if now >= deadline => None,
            Some(deadline) => Some(now.checked_add(delay).map_or(deadline, |t| t.min(deadline))),
            None => Some(now.checked_add(delay).unwrap_or(now + FAR_AWAY)),
        }
    }
}

/// An instant far enough away for pauses that would overflow `Instant`.
const FAR_AWAY: Duration = Duration::from_secs(86_400 * 365);

/// Pauses shorter than this wait on a timer of their own (see [`pause_until`]).
const PRECISE_BELOW: Duration = Duration::from_millis(100);

/// Waits until `wake`. tokio's timer wakes sleepers only on whole-millisecond ticks, all
/// that are due at once: waiters that drew pauses spread over a few milliseconds would all
/// try together at the next tick, the first would win, the rest find the lock held — and
/// the lock, released a fraction of a millisecond later, would lie free until the tick
/// after. (Measured: 16 tasks polling one key every [0, 10 ms) reached less than half the
/// acquisitions per second of a lock with a precise timer.) Short pauses therefore wait on
/// the `futures-timer` thread, which wakes each at its own instant; long ones, where a
/// millisecond does not matter, on tokio's timer.
pub(crate) async fn pause_until(wake: Instant) {
    let left = wake.saturating_duration_since(Instant::now());
    // A simulated run's time is tokio's alone (see `crate::simulation`).
    #[cfg(feature = "simulation")]
    let left = match crate::simulation::active() {
        true => PRECISE_BELOW,
        false => left,
    };
    match left < PRECISE_BELOW {
        true => futures_timer::Delay::new(left).await,
        false => tokio::time::sleep_until(wake).await,
    }
}
