//! Hooks for `redmutex-sim`, the deterministic simulator (feature `simulation`; not for
//! applications). A simulated run must be a function of its seed alone, so on a thread
//! that asked for it ([`deterministic`]) the few things that are random or real-time
//! elsewhere become seeded or virtual:
//!
//! - tokens and lockers' ids are drawn from the seed instead of the OS's random source
//!   (they order a semaphore's holders and a fair line's tickets, and show in traces);
//! - the seeds of jittered retry strategies likewise;
//! - short pauses between tries wait on tokio's timer rather than on a timer thread of
//!   their own, so that they follow tokio's paused, auto-advancing clock.
//!
//! On any other thread, and in a build without the feature, nothing changes.

use std::cell::RefCell;

use crate::splitmix::SplitMix64;

thread_local! {
    static DRAWS: RefCell<Option<SplitMix64>> = const { RefCell::new(None) };
}

/// While this lives, the current thread draws tokens, ids and jitter seeds from the seed
/// given to [`deterministic`], and waits on tokio's timer only. Dropping it ends that.
#[must_use = "the thread is deterministic only while the guard lives"]
#[derive(Debug)]
pub struct Deterministic {
    /// Not `Send`: the setting belongs to the thread that made it.
    _thread: std::marker::PhantomData<*const ()>,
}

/// Makes the current thread deterministic (see the module docs) until the guard is
/// dropped.
pub fn deterministic(seed: u64) -> Deterministic {
    DRAWS.with(|draws| *draws.borrow_mut() = Some(SplitMix64(seed)));
    Deterministic {
        _thread: std::marker::PhantomData,
    }
}

impl Drop for Deterministic {
    fn drop(&mut self) {
        DRAWS.with(|draws| *draws.borrow_mut() = None);
    }
}

/// Whether the current thread is deterministic.
pub(crate) fn active() -> bool {
    DRAWS.with(|draws| draws.borrow().is_some())
}

/// The next 64 seeded bits, when the current thread is deterministic.
pub(crate) fn next_u64() -> Option<u64> {
    DRAWS.with(|draws| draws.borrow_mut().as_mut().map(SplitMix64::next_u64))
}

/// 16 seeded bytes (a token's), when the current thread is deterministic.
pub(crate) fn draw_16() -> Option<[u8; 16]> {
    let (a, b) = (next_u64()?, next_u64()?);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_bytes_and_the_guard_ends_it() {
        let first = {
            let _guard = deterministic(7);
            assert!(active());
            [draw_16(), draw_16()]
        };
        assert!(!active());
        assert_eq!(draw_16(), None);
        let again = {
            let _guard = deterministic(7);
            [draw_16(), draw_16()]
        };
        assert_eq!(first, again);
        assert_ne!(first[0], first[1]);
        let other = {
            let _guard = deterministic(8);
            draw_16()
        };
        assert_ne!(first[0], other);
    }
}
