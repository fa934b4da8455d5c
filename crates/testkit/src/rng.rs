//! A small seeded generator for randomized tests: xorshift64 (Marsaglia, "Xorshift
//! RNGs", 2003), fast and reproducible. The seed comes from an environment variable
//! or the clock and is printed, so a failing run can be replayed.

/// xorshift64 with a printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (made odd: xorshift's state must never be zero).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// A generator seeded from the environment variable `var`, else from the clock;
    /// prints the seed and how to replay it.
    pub fn from_env(var: &str) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("random seed: {seed} ({var}={seed} replays it)");
        Rng::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// An index into a slice of `len` elements (0 when `len` is 0).
    pub fn index(&mut self, len: usize) -> usize {
        // usize is at most 64 bits wide, so the value fits.
        self.below(len as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        // 42 and 43 are the same state once made odd.
        let (mut a, mut b) = (Rng::new(42), Rng::new(43));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below(7) < 7 && b.index(7) < 7);
            assert_eq!((a.below(0), b.index(0)), (0, 0));
        }
    }
}
