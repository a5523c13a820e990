//! A small seeded generator (SplitMix64): the fault schedule and every worker's choices
//! come from the run's seed, so a run can be repeated.

/// SplitMix64: tiny, fast, and good enough to pick keys, pauses and faults.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`, mixed with `stream` (a worker or task index) so that
    /// streams of one seed differ.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "{low} > {high}");
        low + self.next_u64() % (high - low + 1)
    }

    /// An index below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.between(0, n as u64 - 1) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_same_numbers() {
        let take = |seed, stream| {
            let mut rng = Rng::new(seed, stream);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(take(7, 1), take(7, 1));
        assert_ne!(take(7, 1), take(7, 2));
        assert_ne!(take(7, 1), take(8, 1));
    }

    #[test]
    fn ranges_are_inclusive_and_respected() {
        let mut rng = Rng::new(1, 0);
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let n = rng.between(3, 6);
            assert!((3..=6).contains(&n));
            seen[(n - 3) as usize] = true;
            assert!(rng.below(5) < 5);
        }
        assert_eq!(seen, [true; 4]);
        assert_eq!(rng.between(9, 9), 9);
    }
}
