//! Step 2: runs whose lease expired (their runner died or hung) are closed as `LEASE:EXPIRED`
//! and retried or made dead by their policy. A leftover process group of the lost attempt on
//! this host is killed first, so the job never runs twice at once here.

use std::time::Duration;

use anyhow::Result;

use crate::backoff::retry_delay;
use crate::clock::Clock;
use crate::model::{Actor, AfterFailure, AttemptResult, ErrorCode, ExpiredLease, Fenced};
use crate::process::kill_leftover_group;
use crate::store::Store;

/// Recovered per tick at most; the rest wait for the next tick (keeps the tick's writes short).
const RECOVER_BATCH: usize = 100;

pub fn recover_expired(
    store: &mut dyn Store,
    clock: &Clock,
    actor: &Actor,
    rng: &mut fastrand::Rng,
) -> Result<usize> {
    let mut recovered = 0;
    for lease in store.expired_leases(clock.epoch(), RECOVER_BATCH)? {
        let killed = kill_leftover(&lease, actor);
        let now = clock.epoch();
        let after = after_failure(
            lease.attempt,
            lease.max_attempts,
            lease.backoff_base_secs,
            lease.backoff_max_secs,
            clock.now().timestamp_millis(),
            rng,
        );
        let mut detail = format!(
            "lease expired at {} (its runner stopped heart-beating)",
            crate::display::utc_time(lease.lease_expires_at)
        );
        if killed {
            detail.push_str(&format!(
                "; killed its leftover process group {}",
                lease.child_pid.unwrap_or_default()
            ));
        }
        let result = AttemptResult {
            run_id: lease.run_id,
            attempt: lease.attempt,
            lease_token: lease.lease_token.clone(),
            finished_at: now,
            duration_ms: lease
                .attempt_started_at
                .map_or(0, |s| (now - s).max(0) * 1000),
            failure: Some((ErrorCode::LeaseExpired, detail, after)),
            exit_code: None,
            stdout_tail: Vec::new(),
            stderr_tail: Vec::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
        };
        if store.finish_attempt(&result, actor)? == Fenced::Applied {
            recovered += 1;
            if after == AfterFailure::Dead {
                super::execute::print_dead(
                    &lease.job_name,
                    lease.run_id,
                    lease.attempt,
                    &ErrorCode::LeaseExpired,
                );
            }
        }
    }
    Ok(recovered)
}

fn kill_leftover(lease: &ExpiredLease, actor: &Actor) -> bool {
    match (lease.host.as_deref(), lease.child_pid) {
        (Some(host), Some(pid)) if host == actor.host => {
            kill_leftover_group(pid, lease.child_start_time)
        }
        _ => false,
    }
}

/// Retry after a jittered backoff, or dead once `max_attempts` have been made.
///
/// `now_ms` is the failure time in epoch milliseconds. Runs become due at whole seconds
/// (`run_at <= now` in epoch seconds), so the retry time is rounded *up* from the exact
/// failure time plus the delay: a retry never comes sooner than its delay (rounding from the
/// whole-second "now" would let it come up to a second early). A zero delay is due at once.
pub fn after_failure(
    attempt: u32,
    max_attempts: u32,
    base_secs: i64,
    max_secs: i64,
    now_ms: i64,
    rng: &mut fastrand::Rng,
) -> AfterFailure {
    if attempt >= max_attempts {
        return AfterFailure::Dead;
    }
    let delay = retry_delay(
        attempt,
        Duration::from_secs(base_secs.max(0) as u64),
        Duration::from_secs(max_secs.max(0) as u64),
        rng,
    );
    let due_ms = now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
    let whole_secs = due_ms.div_euclid(1000);
    // No delay (base 0): due now, so this very tick retries it.
    let round_up = !delay.is_zero() && due_ms.rem_euclid(1000) != 0;
    AfterFailure::RetryAt(whole_secs + i64::from(round_up))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_is_never_sooner_than_its_delay() {
        for now_ms in [10_000, 10_001, 10_499, 10_500, 10_999] {
            for seed in 0..100 {
                let delay = retry_delay(
                    2,
                    Duration::from_secs(1),
                    Duration::from_secs(2),
                    &mut fastrand::Rng::with_seed(seed),
                );
                let after = after_failure(2, 3, 1, 2, now_ms, &mut fastrand::Rng::with_seed(seed));
                let AfterFailure::RetryAt(at) = after else {
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
        assert_eq!(after_failure(3, 3, 1, 2, 0, &mut rng), AfterFailure::Dead);
        assert_eq!(after_failure(1, 1, 1, 2, 0, &mut rng), AfterFailure::Dead);
        // No backoff: due at once (the same tick retries it).
        for now_ms in [5_000, 5_001, 5_999] {
            assert_eq!(
                after_failure(1, 2, 0, 0, now_ms, &mut rng),
                AfterFailure::RetryAt(5)
            );
        }
    }
}
