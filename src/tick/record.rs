//! Step 4c: an attempt ended; classify how, decide what happens to its run (done, retry after a
//! jittered backoff, dead, cancelled) and write it, fenced by the lease token. The failure
//! decision lives here, once, for executed and recovered attempts alike.

use std::time::Duration;

use super::{runner_error, OnShutdown, Tick};
use crate::backoff::retry_delay;
use crate::model::{
    AfterFailure, AttemptResult, ClaimedRun, ErrorCode, Fenced, Leftovers, ERROR_DETAIL_MAX,
};
use crate::process::{signal_name, Finished, Outcome, SpawnErrorKind};

/// SIGTERM → SIGKILL grace for a job that times out or is stopped.
pub const KILL_GRACE: Duration = Duration::from_secs(10);

/// One attempt this tick executed, for the caller (`run --wait` exits with its code).
#[derive(Debug, Clone)]
pub struct Executed {
    pub run_id: i64,
    pub attempt: u32,
    pub outcome: Result<Outcome, SpawnErrorKind>,
    pub error_code: Option<ErrorCode>,
    pub after: Option<AfterFailure>,
    pub recorded: Fenced,
}

/// Why the runner stopped a job itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The lease is gone: cancelled, or recovered by another runner.
    LeaseLost,
    /// This runner was asked to exit.
    Shutdown(OnShutdown),
}

/// How an attempt ended: the job's result, or why its shell could not start.
pub type Ended = Result<Finished, (SpawnErrorKind, String)>;

/// Classify an attempt's end and write it, fenced by its lease token.
pub fn record_end(
    tick: &mut Tick<'_>,
    run: &ClaimedRun,
    ended: Ended,
    stopped: Option<StopReason>,
) {
    let now_ms = tick.clock.now().timestamp_millis();
    let (failure, exit_code, outcome) = match &ended {
        Ok(finished) => {
            let exit_code = match finished.outcome {
                Outcome::Exited(code) => Some(code),
                _ => None,
            };
            (
                classify(finished, stopped, run.timeout_secs),
                exit_code,
                Ok(finished.outcome.clone()),
            )
        }
        Err((kind, message)) => {
            let code = match kind {
                SpawnErrorKind::NotFound => ErrorCode::SpawnNotFound,
                SpawnErrorKind::Permission => ErrorCode::SpawnPermission,
                SpawnErrorKind::Other => ErrorCode::SpawnOther,
            };
            (Some((code, message.clone())), None, Err(*kind))
        }
    };
    let after = failure.as_ref().map(|_| {
        if stopped == Some(StopReason::Shutdown(OnShutdown::Cancel)) {
            AfterFailure::Cancelled
        } else {
            after_failure(
                run.attempt,
                run.max_attempts,
                run.backoff_base_secs,
                run.backoff_max_secs,
                now_ms,
                tick.rng,
            )
        }
    });
    let finished = ended.as_ref().ok();
    let leftovers = finished.map_or_else(Vec::new, |f| f.leftovers.clone());
    let result = AttemptResult {
        run_id: run.run_id,
        attempt: run.attempt,
        lease_token: run.lease_token.clone(),
        finished_at: now_ms.div_euclid(1000),
        duration_ms: finished.map_or(0, |f| f.duration.as_millis() as i64),
        failure: failure
            .clone()
            .zip(after)
            .map(|((code, detail), after)| (code, detail, after)),
        exit_code,
        stdout_tail: finished.map_or_else(Vec::new, |f| f.stdout_tail.clone()),
        stderr_tail: finished.map_or_else(Vec::new, |f| f.stderr_tail.clone()),
        stdout_bytes: finished.map_or(0, |f| f.stdout_total),
        stderr_bytes: finished.map_or(0, |f| f.stderr_total),
        // A timeout or a stop ends everything of the attempt; a normal end, by its policy.
        leftovers_killed: run.leftovers == Leftovers::Kill || failure.is_some(),
        leftovers,
        attempt_left_open: false,
    };
    let recorded = match tick.store.finish_attempt(&result, &tick.options.actor) {
        Ok(recorded) => recorded,
        Err(e) => {
            // The lease will expire and recovery will retry the run: at-least-once holds.
            let context = format!("run {}: recording attempt {}", run.run_id, run.attempt);
            runner_error(&mut tick.report.errors, context, &e);
            Fenced::LeaseLost
        }
    };
    let error_code = failure.map(|(code, _)| code);
    if recorded == Fenced::Applied && after == Some(AfterFailure::Dead) {
        if let Some(code) = &error_code {
            print_dead(&run.job_name, run.run_id, run.attempt, code);
        }
    }
    tick.report.executed.push(Executed {
        run_id: run.run_id,
        attempt: run.attempt,
        outcome,
        error_code,
        after,
        recorded,
    });
}

/// `None` for success; otherwise the error code and a short detail.
fn classify(
    finished: &Finished,
    stopped: Option<StopReason>,
    timeout_secs: i64,
) -> Option<(ErrorCode, String)> {
    let stderr_hint = last_line(&finished.stderr_tail);
    let with_hint = |text: String| match &stderr_hint {
        Some(line) => format!("{text}: {line}"),
        None => text,
    };
    let (code, detail) = match (&finished.outcome, stopped) {
        (Outcome::Exited(0), _) => return None,
        (Outcome::Exited(code), _) => (ErrorCode::Exit(*code), with_hint(format!("exited with status {code}"))),
        (Outcome::Signalled(signo), _) => {
            let name = signal_name(*signo);
            (ErrorCode::Signal(name.clone()), with_hint(format!("killed by {name}")))
        }
        (Outcome::TimedOut, _) => (
            ErrorCode::Timeout,
            format!(
                "ran longer than its timeout of {}; its process group got SIGTERM, then SIGKILL after {}s",
                humantime::format_duration(Duration::from_secs(timeout_secs.max(0) as u64)),
                KILL_GRACE.as_secs()
            ),
        ),
        (Outcome::Killed, Some(StopReason::Shutdown(OnShutdown::Cancel))) => {
            (ErrorCode::Cancelled, "interrupted at the terminal (run --wait); the job was terminated and the run cancelled".into())
        }
        (Outcome::Killed, Some(StopReason::Shutdown(OnShutdown::Retry))) => {
            (ErrorCode::Signal("SIGTERM".into()), "the runner was asked to stop; the job was terminated".into())
        }
        (Outcome::Killed, _) => {
            (ErrorCode::Cancelled, "the run was cancelled or its lease was lost; the job was terminated".into())
        }
    };
    Some((
        code,
        crate::model::truncate_detail(&detail, ERROR_DETAIL_MAX),
    ))
}

/// The last non-empty line of captured stderr, shortened: the likeliest explanation of a failure.
fn last_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(crate::model::truncate_detail(
        &crate::display::escape_output(line.as_bytes()),
        300,
    ))
}

/// The one stderr line a tick prints for a run that went dead (cron mails it).
pub fn print_dead(job: &str, run_id: i64, attempts: u32, code: &ErrorCode) {
    crate::complain!("runner: job {job} run {run_id} is dead after {attempts} attempt(s): {code}");
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
