//! One clock for every process of a run: `CLOCK_MONOTONIC`, which Linux shares between
//! processes and which keeps running while a process is stopped (SIGSTOP). Critical
//! sections recorded by different workers are compared on it.

use std::time::{Duration, Instant};

/// Nanoseconds on the system-wide monotonic clock.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` (also `CLOCK_MONOTONIC` on Linux, but opaque) on the same scale as
/// [`now_ns`]: the lock's `valid_until` becomes comparable with other processes' times.
pub fn instant_ns(instant: Instant) -> u64 {
    let (base, base_ns) = *OFFSET;
    if instant >= base {
        base_ns + nanos(instant - base)
    } else {
        base_ns.saturating_sub(nanos(base - instant))
    }
}

/// One `Instant` and its [`now_ns`] value, read once per process: both clocks are
/// `CLOCK_MONOTONIC`, so one pair maps every instant. Of a few tries, the one whose two
/// `now_ns` reads are closest around the `Instant` (the least chance of a preemption
/// between the reads) is kept.
static OFFSET: std::sync::LazyLock<(Instant, u64)> = std::sync::LazyLock::new(|| {
    (0..16)
        .map(|_| {
            let before = now_ns();
            let instant = Instant::now();
            let after = now_ns();
            (after - before, instant, before + (after - before) / 2)
        })
        .min_by_key(|(gap, _, _)| *gap)
        .map(|(_, instant, ns)| (instant, ns))
        .expect("sixteen tries")
});

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_map_onto_the_shared_clock() {
        let before = now_ns();
        let later = Instant::now() + Duration::from_millis(250);
        let mapped = instant_ns(later);
        let after = now_ns();
        // The mapping is exact up to the time between the two clock reads.
        assert!(mapped >= before + 250_000_000, "{mapped} vs {before}");
        assert!(mapped <= after + 250_000_000, "{mapped} vs {after}");
        let earlier = instant_ns(Instant::now() - Duration::from_millis(100));
        assert!(earlier <= now_ns() - 100_000_000);
    }
}
