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
    /// The delay is `d = min(max, base * 2^(attempt-1))` with "equal jitter": the retry is due
    /// uniformly at one of the whole seconds from `d/2` to `d` after the failure. Half the delay
    /// is kept so a retry never comes immediately; the other half is spread so many runs failing
    /// together (a dependency went down) do not retry in lockstep.
    pub fn retry_at(&self, attempt: u32, now_ms: i64, rng: &mut fastrand::Rng) -> Option<i64> {
        if attempt >= self.attempts {
            return None;
        }
        let ceiling = exponential(attempt, self.base, self.max);
        let (earliest, latest) = retry_window(now_ms, ceiling);
        Some(rng.i64(earliest..=latest))
    }
}

/// The whole epoch seconds a retry may be due at after a failure at `now_ms` with the capped
/// delay `ceiling`. Runs become due at whole seconds (`run_at <= now` in epoch seconds), so the
/// window is rounded inwards: its start *up* from the failure plus half the delay (a retry never
/// comes sooner than that), its end *down* from the failure plus the delay (never later than the
/// cap, counted from the exact failure or from the whole second `finished_at` records).
///
/// A delay under 2 s may hold no whole second in `[d/2, d]` (1 s after a failure at .7 s: 1.2 s
/// to 1.7 s): the cap wins, and the retry is due at the last whole second within it, which still
/// comes after the failure. A zero delay is due at once, so the same tick retries it.
fn retry_window(now_ms: i64, ceiling: Duration) -> (i64, i64) {
    let ceiling_ms = i64::try_from(ceiling.as_millis()).unwrap_or(i64::MAX);
    let half_ms = ceiling_ms - ceiling_ms / 2;
    let earliest = now_ms
        .saturating_add(half_ms)
        .saturating_add(999)
        .div_euclid(1000);
    let latest = now_ms.saturating_add(ceiling_ms).div_euclid(1000);
    (earliest.min(latest), latest)
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
    fn jitter_spreads_simultaneous_failures() {
        let policy = RetryPolicy::from_secs(10, 30, 3600);
        let mut rng = fastrand::Rng::with_seed(1);
        let ats: std::collections::HashSet<_> = (0..50)
            .map(|_| policy.retry_at(6, 10_000_000, &mut rng))
            .collect();
        assert!(
            ats.len() > 40,
            "retry times should differ, got {}",
            ats.len()
        );
    }

    #[test]
    fn same_seed_same_retry_times() {
        let policy = RetryPolicy::from_secs(10, 30, 3600);
        let draw = || {
            let mut rng = fastrand::Rng::with_seed(42);
            (1..6)
                .map(|n| policy.retry_at(n, 10_000_000, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(), draw());
    }

    /// Due at a whole second: never sooner than half the delay after the exact failure time,
    /// never later than the delay after it. (Rounding from the whole-second "now" would let a
    /// retry come up to a second early; rounding up from the failure plus the drawn delay, up to
    /// a second past the cap.)
    #[test]
    fn retry_is_due_at_a_whole_second_within_half_to_the_full_delay() {
        let policy = RetryPolicy::from_secs(3, 1, 2);
        for now_ms in [10_000, 10_001, 10_499, 10_500, 10_999] {
            for seed in 0..100 {
                let Some(at) = policy.retry_at(2, now_ms, &mut fastrand::Rng::with_seed(seed))
                else {
                    panic!("attempt 2 of 3 is retried");
                };
                assert!(at * 1000 >= now_ms + 1000, "{at} s: sooner than 1 s");
                assert!(at * 1000 <= now_ms + 2000, "{at} s: later than 2 s");
            }
        }
        // A delay of 1 s holds a whole second in [0.5 s, 1 s] after a failure at .3 s, none after
        // one at .7 s: the cap wins, the retry is due at the second 0.3 s after it.
        let policy = RetryPolicy::from_secs(2, 1, 1);
        for (now_ms, due) in [(10_000, 11), (10_300, 11), (10_700, 11), (10_999, 11)] {
            for seed in 0..20 {
                let mut rng = fastrand::Rng::with_seed(seed);
                assert_eq!(policy.retry_at(1, now_ms, &mut rng), Some(due), "{now_ms}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The cap is kept to the second: a retry is due no later than `--backoff-max` after the
        /// failure, whether counted from its exact time or from its recorded `finished_at` (the
        /// whole second it fell in), and no sooner than half the capped delay after it.
        #[test]
        fn a_retry_is_never_past_the_cap_nor_before_half_the_delay(
            attempt in 1u32..40,
            base_secs in 0i64..=7200,
            max_secs in 0i64..=7200,
            now_ms in 1_000_000_000_000i64..1_000_000_100_000,
            seed: u64,
        ) {
            let policy = RetryPolicy::from_secs(attempt + 1, base_secs, max_secs);
            let ceiling = exponential(attempt, policy.base, policy.max);
            let Some(at) = policy.retry_at(attempt, now_ms, &mut fastrand::Rng::with_seed(seed))
            else {
                panic!("attempt {attempt} of {} is retried", attempt + 1);
            };
            let ceiling_ms = ceiling.as_millis() as i64;
            proptest::prop_assert!(at * 1000 <= now_ms + ceiling_ms, "{at} s: past the cap");
            proptest::prop_assert!(at - now_ms.div_euclid(1000) <= max_secs.max(0));
            // A delay of 2 s or more leaves a whole second in [d/2, d] after any failure time.
            if ceiling >= Duration::from_secs(2) {
                proptest::prop_assert!(at * 1000 >= now_ms + ceiling_ms / 2, "{at} s: too soon");
            }
            if !ceiling.is_zero() {
                proptest::prop_assert!(at * 1000 > now_ms, "{at} s: not after the failure");
            }
        }
    }

    /// Still jittered under the cap: failures at one instant, a delay capped at 1 h, retry at
    /// many different seconds, the latest ones among them.
    #[test]
    fn retries_at_the_cap_are_still_spread() {
        let policy = RetryPolicy::from_secs(20, 30, 3600);
        let mut rng = fastrand::Rng::with_seed(5);
        let now_ms = 1_000_000_000_500;
        let ats: std::collections::HashSet<i64> = (0..500)
            .map(|_| policy.retry_at(12, now_ms, &mut rng).expect("retried"))
            .collect();
        assert!(ats.len() > 300, "only {} distinct retry times", ats.len());
        let latest = now_ms / 1000 + 3600;
        assert!(ats.iter().all(|&at| at <= latest && at >= latest - 1800));
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
        let policy = RetryPolicy::from_secs(5, 0, 3600);
        assert_eq!(policy.retry_at(4, 5_500, &mut rng), Some(5));
    }
}
