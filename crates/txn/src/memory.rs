//! Memory and spill accounting shared by the assembler and the committed
//! transactions it hands out (which may live on another thread).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Accounting {
    used: AtomicUsize,
    peak: AtomicUsize,
    spilled: AtomicU64,
}

impl Accounting {
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    pub fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::Relaxed);
    }

    pub fn charge(&self, n: usize) {
        let now = self.used.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    pub fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }

    pub fn spilled(&self) -> u64 {
        self.spilled.load(Ordering::Relaxed)
    }

    pub fn spill_grew(&self, n: u64) {
        self.spilled.fetch_add(n, Ordering::Relaxed);
    }

    pub fn spill_shrank(&self, n: u64) {
        self.spilled.fetch_sub(n, Ordering::Relaxed);
    }
}
