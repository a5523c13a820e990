//! The simulator's random numbers: SplitMix64, seeded, so that a run is a function of its
//! seed. Each part of a run (the plan, every task, every connection) draws from a stream
//! of its own, forked from the seed, so that leaving one part out (shrinking) does not
//! change what the others draw.

use std::time::Duration;

/// A seeded stream of random numbers.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A stream of its own, for one part of the run.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in `[low, high]`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let (low, high) = (low.as_micros() as u64, high.as_micros() as u64);
        Duration::from_micros(low + self.below(high.saturating_sub(low) + 1))
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Uniform in `[low, high)`.
    pub fn float(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream_and_forks_differ() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        let drawn: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        assert_eq!(drawn, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        let (mut x, mut y) = (a.fork(), a.fork());
        assert_ne!(x.next_u64(), y.next_u64());
        let d = Rng::new(9).between(Duration::from_millis(2), Duration::from_millis(3));
        assert!((Duration::from_millis(2)..=Duration::from_millis(3)).contains(&d));
        assert_eq!(Rng::new(1).below(1), 0);
    }
}
