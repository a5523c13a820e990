//! The seeded random numbers of every test, the simulator and the torture run: SplitMix64
//! (Steele, Lea, Flood 2014), so that a run, a fault schedule or a generated sequence is a
//! function of its seed and a failure can be named by it. Each part of a run draws from a
//! stream of its own ([`Rng::fork`], [`Rng::stream`]), so that leaving one part out
//! (shrinking) does not change what the others draw.
//!
//! ```
//! use std::time::Duration;
//! let mut rng = testkit::Rng::new(7);
//! let pause = rng.between(Duration::from_millis(10), Duration::from_millis(20));
//! assert!(pause >= Duration::from_millis(10) && pause <= Duration::from_millis(20));
//! assert_eq!(testkit::Rng::new(7).next_u64(), testkit::Rng::new(7).next_u64());
//! ```

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

    /// Stream number `stream` of `seed` (a worker's, a task's): streams of one seed differ,
    /// and each is a function of the pair.
    pub fn stream(seed: u64, stream: u64) -> Rng {
        Rng::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F))
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

    /// An index into something `len` long (`len` > 0).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
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
        items[self.index(items.len())]
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
        assert_ne!(Rng::stream(7, 1).next_u64(), Rng::stream(7, 2).next_u64());
        assert_eq!(Rng::stream(7, 1).next_u64(), Rng::stream(7, 1).next_u64());
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // The reference implementation's first outputs for state 0 (Vigna's splitmix64.c):
        // the stream of `Rng::new(s)` starts from state s ^ 0x5DEE_CE66_D1CE_4E5B.
        let mut rng = Rng::new(0x5DEE_CE66_D1CE_4E5B);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn ranges_are_inclusive_and_every_value_comes_up() {
        let mut rng = Rng::new(1);
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let d = rng.between(Duration::from_micros(3), Duration::from_micros(6));
            seen[(d.as_micros() - 3) as usize] = true;
            assert!(rng.index(5) < 5);
        }
        assert_eq!(seen, [true; 4]);
        let same = Duration::from_millis(9);
        assert_eq!(rng.between(same, same), same);
    }
}
