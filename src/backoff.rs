//! Retry policy: how many attempts a run gets, and the capped exponential backoff with jitter
//! between them. Pure: the failure time and the random source are passed in.

use std::time::Duration;

/// A run's retry policy, as its schedule set it: `attempts` in all, the first retry after about
/// `base`, doubling, never more than `max`. The one place that decides "retry at T" or "dead".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// From the stored columns (`max_attempts`, `backoff_base_secs`, `backoff_max_secs`); a
    /// negative delay (only a damaged database holds one) counts as zero.
    pub fn from_secs(attempts: u32, base_secs: i64, max_secs: i64) -> RetryPolicy {
        let secs = |s: i64| Duration::from_secs(s.max(0) as u64);
        RetryPolicy {
            attempts,
            base: secs(base_secs),
            max: secs(max_secs),
        }
    }

    /// After attempt `attempt` (1-based) failed at `now_ms` (epoch milliseconds): the epoch second
    /// at which the run is due again, or `None` once all its attempts have been made (dead).
    ///
    /// Runs become due at whole seconds (`run_at <= now` in epoch seconds), so the retry time is
    /// rounded *up* from the exact failure time plus the delay: a retry never comes sooner than
    /// its delay (rounding from the whole-second "now" would let it come up to a second early).
    /// A zero delay is due at once, so the same tick retries it.
    pub fn retry_at(&self, attempt: u32, now_ms: i64, rng: &mut fastrand::Rng) -> Option<i64> {
        if attempt >= self.attempts {
            return None;
        }
        let delay = retry_delay(attempt, self.base, self.max, rng);
        let due_ms = now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        let whole_secs = due_ms.div_euclid(1000);
        let round_up = !delay.is_zero() && due_ms.rem_euclid(1000) != 0;
        Some(whole_secs + i64::from(round_up))
    }
}

/// The delay before the attempt after failed attempt `attempt` (1-based):
/// `d = min(max, base * 2^(attempt-1))`, then "equal jitter": uniform in `[d/2, d]`.
/// Half the delay is kept so a retry never comes immediately; the other half is spread so
/// many runs failing together (a dependency went down) do not retry in lockstep.
pub fn retry_delay(
    attempt: u32,
    base: Duration,
    max: Duration,
    rng: &mut fastrand::Rng,
) -> Duration {
    let ceiling = exponential(attempt, base, max);
    let half = ceiling / 2;
    let spread_ms = (ceiling - half).as_millis() as u64;
    half + Duration::from_millis(rng.u64(0..=spread_ms))
}

/// The un-jittered delay `min(max, base * 2^(attempt-1))`, saturating instead of overflowing.
pub fn exponential(attempt: u32, base: Duration, max: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(max).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_secs(30);
    const MAX: Duration = Duration::from_secs(3600);

    #[test]
    fn doubles_from_base_and_caps_at_max() {
        assert_eq!(exponential(1, BASE, MAX), Duration::from_secs(30));
        assert_eq!(exponential(2, BASE, MAX), Duration::from_secs(60));
        assert_eq!(exponential(3, BASE, MAX), Duration::from_secs(120));
        assert_eq!(exponential(8, BASE, MAX), MAX);
        assert_eq!(exponential(200, BASE, MAX), MAX);
    }

    #[test]
    fn jitter_stays_within_half_to_full_delay() {
        let mut rng = fastrand::Rng::with_seed(7);
        for attempt in 1..=12 {
            let ceiling = exponential(attempt, BASE, MAX);
            for _ in 0..200 {
                let d = retry_delay(attempt, BASE, MAX, &mut rng);
                assert!(d >= ceiling / 2 && d <= ceiling, "attempt {attempt}: {d:?}");
            }
        }
    }

    #[test]
    fn jitter_spreads_simultaneous_failures() {
        let mut rng = fastrand::Rng::with_seed(1);
        let delays: std::collections::HashSet<_> = (0..50)
            .map(|_| retry_delay(3, BASE, MAX, &mut rng))
            .collect();
        assert!(
            delays.len() > 40,
            "delays should differ, got {}",
            delays.len()
        );
    }

    #[test]
    fn same_seed_same_delays() {
        let a: Vec<_> = {
            let mut rng = fastrand::Rng::with_seed(42);
            (1..6)
                .map(|n| retry_delay(n, BASE, MAX, &mut rng))
                .collect()
        };
        let mut rng = fastrand::Rng::with_seed(42);
        let b: Vec<_> = (1..6)
            .map(|n| retry_delay(n, BASE, MAX, &mut rng))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn retry_is_never_sooner_than_its_delay() {
        let policy = RetryPolicy::from_secs(3, 1, 2);
        for now_ms in [10_000, 10_001, 10_499, 10_500, 10_999] {
            for seed in 0..100 {
                let delay = retry_delay(
                    2,
                    Duration::from_secs(1),
                    Duration::from_secs(2),
                    &mut fastrand::Rng::with_seed(seed),
                );
                let Some(at) = policy.retry_at(2, now_ms, &mut fastrand::Rng::with_seed(seed))
                else {
                    panic!("attempt 2 of 3 is retried");
                };
                let due_ms = now_ms + delay.as_millis() as i64;
                assert!(at * 1000 >= due_ms, "{at} < {due_ms} ms");
                assert!(at * 1000 < due_ms + 1000, "{at} rounds up by less than 1 s");
            }
        }
    }

    #[test]
    fn dead_after_max_attempts() {
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            RetryPolicy::from_secs(3, 1, 2).retry_at(3, 0, &mut rng),
            None
        );
        assert_eq!(
            RetryPolicy::from_secs(1, 1, 2).retry_at(1, 0, &mut rng),
            None
        );
        // No backoff: due at once (the same tick retries it).
        for now_ms in [5_000, 5_001, 5_999] {
            assert_eq!(
                RetryPolicy::from_secs(2, 0, 0).retry_at(1, now_ms, &mut rng),
                Some(5)
            );
        }
    }

    #[test]
    fn zero_base_means_no_delay() {
        let mut rng = fastrand::Rng::with_seed(3);
        assert_eq!(
            retry_delay(4, Duration::ZERO, MAX, &mut rng),
            Duration::ZERO
        );
    }
}
