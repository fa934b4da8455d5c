//! The one backoff every retry loop uses: a first pause, doubling, capped.

use std::time::Duration;

/// Pauses between tries: `initial`, then doubling, at most `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The pause before the next try; the one after it is twice as long.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        d
    }

    /// Back to the first pause (the thing waited for came back).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The pause after `tries` tries in a row, for a caller that counts
    /// them itself.
    pub fn after(&self, tries: u32) -> Duration {
        self.initial
            .saturating_mul(1u32 << tries.min(31))
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_its_cap_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(500));
        let seen: Vec<_> = (0..5).map(|_| b.next_delay()).collect();
        assert_eq!(seen, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
        assert_eq!(b.after(0), ms(100));
        assert_eq!(b.after(2), ms(400));
        assert_eq!(b.after(u32::MAX), ms(500));
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
    }
}
