//! Step 4c: an attempt ended; classify how, decide what happens to its run (done, retry after a
//! jittered backoff, dead, cancelled) and write it, fenced by the lease token. The failure
//! decision lives here, once, for executed and recovered attempts alike.

use std::time::Duration;

use anyhow::Result;

use super::{runner_error, OnShutdown, Tick};
use crate::model::{
    AfterFailure, AttemptEnd, AttemptFailure, AttemptResult, ClaimedRun, ErrorCode, Fenced,
    Leftovers, ERROR_DETAIL_MAX,
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
    let now = tick.clock.read();
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
    let failure = failure.map(|(code, detail)| AttemptFailure {
        code,
        detail,
        then: if stopped == Some(StopReason::Shutdown(OnShutdown::Cancel)) {
            AfterFailure::Cancelled
        } else {
            AfterFailure::by_policy(&run.retry, run.attempt, now, tick.rng)
        },
    });
    let after = failure.as_ref().map(|f| f.then);
    let error_code = failure.as_ref().map(|f| f.code.clone());
    let finished = ended.as_ref().ok();
    let leftovers = finished.map_or_else(Vec::new, |f| f.leftovers.clone());
    let result = AttemptResult {
        run_id: run.run_id,
        attempt: run.attempt,
        lease_token: run.lease_token.clone(),
        finished_at: now.secs(),
        duration_ms: finished.map_or(0, |f| f.duration.as_millis() as i64),
        // A timeout or a stop ends everything of the attempt; a normal end, by its policy.
        leftovers_killed: run.leftovers == Leftovers::Kill || failure.is_some(),
        failure,
        exit_code,
        stdout_tail: finished.map_or_else(Vec::new, |f| f.stdout_tail.clone()),
        stderr_tail: finished.map_or_else(Vec::new, |f| f.stderr_tail.clone()),
        stdout_bytes: finished.map_or(0, |f| f.stdout_total),
        stderr_bytes: finished.map_or(0, |f| f.stderr_total),
        leftovers,
    };
    let recorded = match write_end(tick, &run.job_name, result) {
        Ok(recorded) => recorded,
        Err(e) => {
            // The lease will expire and recovery will retry the run: at-least-once holds.
            let context = format!("run {}: recording attempt {}", run.run_id, run.attempt);
            runner_error(&mut tick.report.errors, context, &e);
            Fenced::LeaseLost
        }
    };
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
                crate::display::duration_of_secs(timeout_secs),
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

/// Write an attempt's end, executed or recovered alike: decide what it does to its run
/// (`AttemptEnd::decide`), write that fenced by its lease token, and print the one stderr line
/// a run that went dead gets (cron mails it).
pub fn write_end(tick: &mut Tick<'_>, job: &str, result: AttemptResult) -> Result<Fenced> {
    let end = AttemptEnd::decide(result);
    let fenced = tick.store.finish_attempt(&end, &tick.options.actor)?;
    if let Some(failure) = &end.result.failure {
        if fenced == Fenced::Applied && failure.then == AfterFailure::Dead {
            crate::complain!(
                "runner: job {job} run {} is dead after {} attempt(s): {}",
                end.result.run_id,
                end.result.attempt,
                failure.code
            );
        }
    }
    Ok(fenced)
}
