//! Bounded exponential backoff with jitter, for retrying retriable errors
//! (after rskafka's `backoff.rs` and the Java client's
//! `retry.backoff.ms` / `retry.backoff.max.ms`, KIP-580).
//!
//! The random source is injectable, so tests get deterministic delays.

use std::time::Duration;

/// A source of uniform `u64`s for jitter.
pub type JitterSource = Box<dyn FnMut() -> u64 + Send>;

/// Exponential backoff: attempt `n` waits a random time in
/// `[d/2, d]` where `d = min(base * 2^n, max)`.
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    rng: JitterSource,
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff")
            .field("base", &self.base)
            .field("max", &self.max)
            .field("attempt", &self.attempt)
            .finish()
    }
}

impl Backoff {
    /// A backoff seeded from the OS random source.
    pub fn new(base: Duration, max: Duration) -> Self {
        let mut seed = [0u8; 8];
        // A failed draw only makes the jitter predictable.
        let _ = getrandom::fill(&mut seed);
        let mut state = u64::from_le_bytes(seed) | 1;
        Self::with_rng(
            base,
            max,
            Box::new(move || {
                // xorshift64*: plenty for jitter.
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                state.wrapping_mul(0x2545_f491_4f6c_dd1d)
            }),
        )
    }

    /// A backoff drawing jitter from `rng`.
    pub fn with_rng(base: Duration, max: Duration, rng: JitterSource) -> Self {
        Backoff {
            base,
            max: max.max(base),
            attempt: 0,
            rng,
        }
    }

    /// How many delays have been handed out.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.base.saturating_mul(1u32 << self.attempt.min(20));
        let ceiling = exp.min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let ceiling_ns = ceiling.as_nanos() as u64;
        let half = ceiling_ns / 2;
        let jitter = if half == 0 { 0 } else { (self.rng)() % (half + 1) };
        Duration::from_nanos(half + jitter)
    }

    /// Starts over from the base delay (after a success), keeping the
    /// jitter source: no new seed drawn from the OS (a system call).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Sleeps for the next delay.
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_bounded() {
        let mut b = Backoff::with_rng(
            Duration::from_millis(100),
            Duration::from_secs(1),
            Box::new(|| u64::MAX),
        );
        // u64::MAX % (half + 1) is deterministic; check the bounds per step.
        let mut prev_ceiling = Duration::ZERO;
        for n in 0..10 {
            let d = b.next_delay();
            let ceiling = Duration::from_millis(100 * (1 << n)).min(Duration::from_secs(1));
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "attempt {n}: {d:?} not in [{:?}, {ceiling:?}]",
                ceiling / 2
            );
            assert!(ceiling >= prev_ceiling);
            prev_ceiling = ceiling;
        }
        assert_eq!(b.attempts(), 10);
    }

    #[test]
    fn reset_starts_over_from_the_base_delay() {
        let mut b = Backoff::with_rng(Duration::from_millis(10), Duration::from_secs(1), Box::new(|| 0));
        for _ in 0..4 {
            b.next_delay();
        }
        assert_eq!(b.next_delay(), Duration::from_millis(80));
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.next_delay(), Duration::from_millis(5));
    }

    #[test]
    fn zero_jitter_gives_the_lower_bound() {
        let mut b = Backoff::with_rng(Duration::from_millis(10), Duration::from_millis(25), Box::new(|| 0));
        assert_eq!(b.next_delay(), Duration::from_millis(5));
        assert_eq!(b.next_delay(), Duration::from_millis(10));
        assert_eq!(b.next_delay(), Duration::from_micros(12_500));
        assert_eq!(b.next_delay(), Duration::from_micros(12_500));
    }
}
