//! Retry delays: capped exponential backoff with jitter. Pure: the random source is passed in.

use std::time::Duration;

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
    fn zero_base_means_no_delay() {
        let mut rng = fastrand::Rng::with_seed(3);
        assert_eq!(
            retry_delay(4, Duration::ZERO, MAX, &mut rng),
            Duration::ZERO
        );
    }
}
