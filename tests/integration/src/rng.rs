//! A small seeded generator (SplitMix64) for the randomized tests, so that a run is reproducible
//! from the seed it prints, without a crate.

/// SplitMix64: each value is the state advanced by a constant and mixed.
pub struct Rng(u64);

impl Rng {
    /// A generator whose first value is the mix of `state` advanced once: the same sequence for
    /// the same state.
    pub fn from_state(state: u64) -> Rng {
        Rng(state)
    }

    /// Stream `stream` of `seed`: threads of one run each take a stream of their own.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, each as likely.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}
