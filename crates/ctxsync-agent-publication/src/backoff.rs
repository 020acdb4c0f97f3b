//! Reconnect backoff: exponential from an initial delay to a cap, with optional jitter so
//! agents that lost the same server do not all come back at the same instant.

use std::time::Duration;

/// The first retry delay after a transient failure.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(250);
/// The longest retry delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How retries are spaced: `initial`, doubling up to `max`. With `jitter`, each delay is
/// drawn from the upper quarter below it (75 % to 100 %), so the cap is never exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The first delay ([`DEFAULT_BACKOFF_INITIAL`]).
    pub initial: Duration,
    /// The longest delay ([`DEFAULT_BACKOFF_MAX`]).
    pub max: Duration,
    /// Whether each delay is drawn from 75 % to 100 % of its nominal value (on by default).
    pub jitter: bool,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self {
            initial: DEFAULT_BACKOFF_INITIAL,
            max: DEFAULT_BACKOFF_MAX,
            jitter: true,
        }
    }
}

/// The state of one retry sequence.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: BackoffPolicy,
    next: Duration,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new(policy: BackoffPolicy, seed: u64) -> Self {
        Self {
            policy,
            next: policy.initial,
            rng: seed | 1,
        }
    }

    /// The delay before the next attempt; each call doubles the following one.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.next.min(self.policy.max);
        self.next = base.saturating_mul(2).min(self.policy.max);
        if !self.policy.jitter {
            return base;
        }
        // xorshift64: statistical quality is irrelevant, only spreading matters.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let fraction = (self.rng % 1024) as u32; // 0..1024 → up to 25 % off
        base - base / 4 * fraction / 1024
    }

    /// The cap, exactly (no jitter): for waits that must never be shorter.
    pub(crate) fn longest(&self) -> Duration {
        self.policy.max
    }

    /// Back to `initial`, after an attempt succeeded.
    pub(crate) fn reset(&mut self) {
        self.next = self.policy.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(
            BackoffPolicy {
                jitter: false,
                ..BackoffPolicy::default()
            },
            7,
        );
        let delays: Vec<u128> = (0..10).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(
            delays,
            [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(250));
    }

    #[test]
    fn jitter_stays_within_the_upper_quarter() {
        let mut backoff = Backoff::new(BackoffPolicy::default(), 12345);
        let mut base = DEFAULT_BACKOFF_INITIAL;
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..40 {
            let delay = backoff.next_delay();
            assert!(
                delay <= base && delay >= base * 3 / 4,
                "{delay:?} vs {base:?}"
            );
            distinct.insert(delay);
            base = (base * 2).min(DEFAULT_BACKOFF_MAX);
        }
        assert!(distinct.len() > 5, "jitter should vary the delays");
    }
}
