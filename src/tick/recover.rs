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
            now,
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
pub fn after_failure(
    attempt: u32,
    max_attempts: u32,
    base_secs: i64,
    max_secs: i64,
    now: i64,
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
    // Round up: a retry never comes sooner than its delay.
    AfterFailure::RetryAt(now + delay.as_millis().div_ceil(1000) as i64)
}
