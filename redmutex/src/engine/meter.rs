//! What a locker counts of its own activity — acquires, holds, renewals, losses — for
//! [`Locker::stats`](crate::Locker::stats), and, with the `metrics` feature, for the
//! application's `metrics` recorder.
//!
//! Counting is a handful of relaxed atomic additions per acquire, release and renewal: cheap
//! enough to leave on always. The metrics are labelled by the locker's name
//! ([`Locker::with_name`](crate::Locker::with_name)) and the primitive's kind, never by key:
//! keys are unbounded, and a metrics backend must not get one series per key.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// A snapshot of what one locker (with its clones) did since it was built: see
/// [`Locker::stats`](crate::Locker::stats).
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let lock = locker.acquire("report", Duration::from_secs(10)).await?;
/// let stats = locker.stats();
/// assert_eq!(stats.held, 1);
/// assert!(stats.acquired >= 1);
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockerStats {
    /// Guards alive now: locks, leases, permits, read and write guards, leaderships not yet
    /// released, dropped or detached (a lost lease counts until it is dropped).
    pub held: u64,
    /// Acquires in progress now: trying, or waiting between tries.
    pub waiting: u64,
    /// Acquires that succeeded.
    pub acquired: u64,
    /// Of those, the ones that did not succeed at their first try.
    pub acquired_after_waiting: u64,
    /// Acquires that gave up because the lock stayed held ([`Error::NotObtained`]).
    ///
    /// [`Error::NotObtained`]: crate::Error::NotObtained
    pub not_obtained: u64,
    /// Acquires that ended with any other error (Redis unreachable, no quorum). Input
    /// refused before any request is not counted as an acquire at all.
    pub failed: u64,
    /// Time spent in acquires that ended, whatever their outcome.
    pub wait_time: Duration,
    /// The longest of those acquires.
    pub longest_wait: Duration,
    /// Explicit releases that Redis answered (released, or found no longer held). The
    /// background release of a dropped guard is not counted.
    pub released: u64,
    /// Keep-alive renewals that went through.
    pub renewals: u64,
    /// Keep-alive renewals that failed (and were retried, while the lease was still valid).
    pub renewal_failures: u64,
    /// Leases lost: found not held, or not renewed in time, or at their hold limit.
    pub lost: u64,
}

/// How an acquire ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    NotObtained,
    Failed,
}

impl Outcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::NotObtained => "not_obtained",
            Outcome::Failed => "error",
        }
    }
}

/// A locker's counters (shared by its clones and by everything it hands out).
#[derive(Debug, Default)]
pub(crate) struct Meter {
    /// The locker's name: the `locker` label of its metrics.
    name: Option<Arc<str>>,
    held: AtomicI64,
    waiting: AtomicI64,
    acquired: AtomicU64,
    acquired_after_waiting: AtomicU64,
    not_obtained: AtomicU64,
    failed: AtomicU64,
    wait_nanos: AtomicU64,
    longest_wait_nanos: AtomicU64,
    released: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    lost: AtomicU64,
}

impl Meter {
    pub(crate) fn named(name: Option<Arc<str>>) -> Meter {
        #[cfg(feature = "metrics")]
        describe();
        Meter {
            name,
            ..Meter::default()
        }
    }

    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub(crate) fn snapshot(&self) -> LockerStats {
        let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let gauge = |gauge: &AtomicI64| u64::try_from(gauge.load(Ordering::Relaxed)).unwrap_or(0);
        LockerStats {
            held: gauge(&self.held),
            waiting: gauge(&self.waiting),
            acquired: count(&self.acquired),
            acquired_after_waiting: count(&self.acquired_after_waiting),
            not_obtained: count(&self.not_obtained),
            failed: count(&self.failed),
            wait_time: Duration::from_nanos(count(&self.wait_nanos)),
            longest_wait: Duration::from_nanos(count(&self.longest_wait_nanos)),
            released: count(&self.released),
            renewals: count(&self.renewals),
            renewal_failures: count(&self.renewal_failures),
            lost: count(&self.lost),
        }
    }

    /// An acquire of `kind` starts: counted as waiting until the mark is dropped (also when
    /// the acquire is cancelled).
    pub(crate) fn start_acquire(self: &Arc<Self>, kind: &'static str) -> WaitMark {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.gauge("redmutex_waiting", kind, 1.0);
        WaitMark {
            meter: self.clone(),
            kind,
            started: Instant::now(),
        }
    }

    /// The end of an acquire started with `mark`, after `attempts` tries.
    pub(crate) fn end_acquire(&self, mark: &WaitMark, outcome: Outcome, attempts: u32) {
        let waited = mark.started.elapsed();
        let counter = match outcome {
            Outcome::Acquired => &self.acquired,
            Outcome::NotObtained => &self.not_obtained,
            Outcome::Failed => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome == Outcome::Acquired && attempts > 1 {
            self.acquired_after_waiting.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.wait_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.longest_wait_nanos.fetch_max(nanos, Ordering::Relaxed);
        self.count(
            "redmutex_acquisitions_total",
            &[("kind", mark.kind), ("outcome", outcome.label())],
        );
        self.histogram("redmutex_wait_seconds", mark.kind, waited);
    }

    /// A guard of `kind` is handed out: counted as held until the mark is dropped.
    pub(crate) fn hold(self: &Arc<Self>, kind: &'static str, since: Instant) -> HeldMark {
        self.held.fetch_add(1, Ordering::Relaxed);
        self.gauge("redmutex_held", kind, 1.0);
        HeldMark {
            meter: self.clone(),
            kind,
            since,
        }
    }

    /// A release reached Redis.
    pub(crate) fn released(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
    }

    /// A keep-alive renewal went through (`true`) or failed.
    pub(crate) fn renewal(&self, renewed: bool) {
        let (counter, outcome) = match renewed {
            true => (&self.renewals, "renewed"),
            false => (&self.renewal_failures, "failed"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.count("redmutex_renewals_total", &[("outcome", outcome)]);
    }

    /// A lease was lost, for `reason` (a metrics label: `not_held`, `unreachable`,
    /// `hold_limit`).
    pub(crate) fn lost(&self, reason: &'static str) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        self.count("redmutex_losses_total", &[("reason", reason)]);
    }

    #[cfg(feature = "metrics")]
    fn labels(&self, more: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
        let locker = self.name.as_deref().unwrap_or("").to_owned();
        let mut labels = vec![metrics::Label::new("locker", locker)];
        labels.extend(
            (more.iter()).map(|&(key, value)| metrics::Label::from_static_parts(key, value)),
        );
        labels
    }

    #[cfg(feature = "metrics")]
    fn count(&self, name: &'static str, labels: &[(&'static str, &'static str)]) {
        metrics::counter!(name, self.labels(labels)).increment(1);
    }

    #[cfg(feature = "metrics")]
    fn gauge(&self, name: &'static str, kind: &'static str, change: f64) {
        metrics::gauge!(name, self.labels(&[("kind", kind)])).increment(change);
    }

    #[cfg(feature = "metrics")]
    fn histogram(&self, name: &'static str, kind: &'static str, value: Duration) {
        metrics::histogram!(name, self.labels(&[("kind", kind)])).record(value.as_secs_f64());
    }

    #[cfg(not(feature = "metrics"))]
    fn count(&self, _name: &'static str, _labels: &[(&'static str, &'static str)]) {}

    #[cfg(not(feature = "metrics"))]
    fn gauge(&self, _name: &'static str, _kind: &'static str, _change: f64) {}

    #[cfg(not(feature = "metrics"))]
    fn histogram(&self, _name: &'static str, _kind: &'static str, _value: Duration) {}
}

/// An acquire in progress (see [`Meter::start_acquire`]).
pub(crate) struct WaitMark {
    meter: Arc<Meter>,
    kind: &'static str,
    started: Instant,
}

impl WaitMark {
    /// Time since the acquire started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for WaitMark {
    fn drop(&mut self) {
        self.meter.waiting.fetch_sub(1, Ordering::Relaxed);
        self.meter.gauge("redmutex_waiting", self.kind, -1.0);
    }
}

/// A guard alive (see [`Meter::hold`]); dropping it records the hold time.
pub(crate) struct HeldMark {
    meter: Arc<Meter>,
    kind: &'static str,
    /// Read only for the hold-time histogram.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    since: Instant,
}

impl Drop for HeldMark {
    fn drop(&mut self) {
        self.meter.held.fetch_sub(1, Ordering::Relaxed);
        self.meter.gauge("redmutex_held", self.kind, -1.0);
        #[cfg(feature = "metrics")]
        (self.meter).histogram("redmutex_hold_seconds", self.kind, self.since.elapsed());
    }
}

/// Describes the metrics to the installed recorder (units and help texts), once per
/// process; a recorder installed later misses only the descriptions.
#[cfg(feature = "metrics")]
fn describe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use metrics::Unit;
        metrics::describe_counter!(
            "redmutex_acquisitions_total",
            "Acquires that ended, by locker, kind and outcome (acquired, not_obtained, error)"
        );
        metrics::describe_counter!(
            "redmutex_renewals_total",
            "Keep-alive renewals, by locker and outcome (renewed, failed)"
        );
        metrics::describe_counter!(
            "redmutex_losses_total",
            "Leases lost, by locker and reason (not_held, unreachable, hold_limit)"
        );
        metrics::describe_histogram!(
            "redmutex_wait_seconds",
            Unit::Seconds,
            "How long acquires took, from the first try to the outcome"
        );
        metrics::describe_histogram!(
            "redmutex_hold_seconds",
            Unit::Seconds,
            "How long guards were held, from the acquire to the release or drop"
        );
        metrics::describe_gauge!("redmutex_held", "Guards alive now, by locker and kind");
        metrics::describe_gauge!(
            "redmutex_waiting",
            "Acquires in progress now, by locker and kind"
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_acquires_holds_and_their_times() {
        let pause = |ms| std::thread::sleep(Duration::from_millis(ms));
        let meter = Arc::new(Meter::default());
        let first = meter.start_acquire("lock");
        let second = meter.start_acquire("semaphore");
        assert_eq!(meter.snapshot().waiting, 2);
        pause(30);
        meter.end_acquire(&first, Outcome::Acquired, 3);
        let held = meter.hold("lock", Instant::now());
        drop(first);
        pause(20);
        meter.end_acquire(&second, Outcome::NotObtained, 1);
        drop(second);
        meter.renewal(true);
        meter.renewal(false);
        meter.lost("not_held");
        let stats = meter.snapshot();
        assert_eq!((stats.waiting, stats.held), (0, 1));
        assert_eq!((stats.acquired, stats.acquired_after_waiting), (1, 1));
        assert_eq!((stats.not_obtained, stats.failed), (1, 0));
        assert!(stats.longest_wait >= Duration::from_millis(50));
        assert!(stats.wait_time >= stats.longest_wait + Duration::from_millis(30));
        assert_eq!(
            (stats.renewals, stats.renewal_failures, stats.lost),
            (1, 1, 1)
        );
        drop(held);
        assert_eq!(meter.snapshot().held, 0);
    }
}
