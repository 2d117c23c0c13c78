//! Step 5: an attempt ended; classify how, decide what happens to its run (done, retry after a
//! jittered backoff, dead, cancelled) and write it, fenced by the lease token. The failure
//! decision lives here, once, for executed and recovered attempts alike.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{runner_error, test_hook, OnShutdown, Tick};
use crate::model::{
    AfterFailure, AttemptEnd, AttemptFailure, AttemptResult, CapturedOutput, ClaimedRun, ErrorCode,
    Fenced, Leftovers,
};
use crate::process::{signal_name, Finished, Outcome, Signals, SpawnErrorKind};
use crate::store::{Claimed, Commit, Result as StoreResult};

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
    /// Whether its end was written (`Fenced::LeaseLost`: refused, the run no longer this
    /// runner's), or why the write failed.
    pub recorded: Result<Fenced, WriteFailed>,
}

/// An attempt's end whose write failed (a full disk, a read-only database, a lost connection):
/// nothing was written, and its lease expires into recovery. The error was printed when met.
#[derive(Debug, Clone)]
pub struct WriteFailed {
    /// The error, as printed.
    pub cause: String,
    /// The exit code it means (`exit::code_for`): what a command that met it exits with.
    pub exit_code: i32,
}

impl WriteFailed {
    fn of(error: &anyhow::Error) -> WriteFailed {
        WriteFailed {
            cause: format!("{error:#}"),
            exit_code: crate::exit::code_for(error),
        }
    }
}

/// Why the runner stopped a job itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The lease is gone: cancelled, or recovered by another runner.
    LeaseLost,
    /// A prepared job's lease could not be looked at (the store did not answer) and it had not
    /// been seen held for a whole lease: it may have been recovered, so it never starts.
    LeaseUnconfirmed,
    /// This runner was asked to exit.
    Shutdown(OnShutdown),
}

/// How an attempt ended: the job's result, or why its shell could not start.
pub type Ended = Result<Finished, (SpawnErrorKind, String)>;

/// One attempt that ended, to be recorded.
pub struct End {
    pub run: ClaimedRun,
    pub ended: Ended,
    pub stopped: Option<StopReason>,
    /// When its lease was last seen held (its start recorded, a heartbeat, its claim): its end
    /// is tried again until a lease after that (see [`record_decided`]).
    pub lease_seen_at: Instant,
}

/// Classify an attempt's end and write it, fenced by its lease token. Returns it if it is to be
/// tried again (see [`record_decided`]).
#[must_use]
pub fn record_end(tick: &mut Tick<'_>, end: End) -> Option<DecidedEnds> {
    let decided = decide_ends(tick, vec![end]);
    record_decided(tick, decided, Commit::Durable)
}

/// Attempts' ends, classified and decided (what each does to its run), not written yet: kept
/// as they are until they are written, however many tries that takes.
#[derive(Default)]
pub struct DecidedEnds {
    /// Per end: its job's name (for the line of a run that went dead).
    jobs: Vec<String>,
    /// Per end: what to write.
    ends: Vec<AttemptEnd>,
    /// Per end: what the report says of it once written.
    reports: Vec<Unreported>,
}

/// An attempt's end as the tick's report will tell it, once written.
struct Unreported {
    run: ClaimedRun,
    outcome: Result<Outcome, SpawnErrorKind>,
    error_code: Option<ErrorCode>,
    after: Option<AfterFailure>,
    lease_seen_at: Instant,
}

impl DecidedEnds {
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Add later ends, to be written with these in one transaction.
    pub fn append(&mut self, later: DecidedEnds) {
        self.jobs.extend(later.jobs);
        self.ends.extend(later.ends);
        self.reports.extend(later.reports);
    }

    /// When each of their leases was last seen held.
    pub fn leases_seen(&self) -> impl Iterator<Item = Instant> + '_ {
        self.reports.iter().map(|r| r.lease_seen_at)
    }

    /// Whether one of these runs is to be retried by `now`: a claim right after may take it.
    pub fn retry_due_by(&self, now: i64) -> bool {
        self.reports
            .iter()
            .any(|r| matches!(r.after, Some(AfterFailure::RetryAt(at)) if at <= now))
    }
}

/// Classify attempts' ends and decide what each does to its run.
pub fn decide_ends(tick: &mut Tick<'_>, ends: Vec<End>) -> DecidedEnds {
    let mut decided = DecidedEnds {
        jobs: Vec::with_capacity(ends.len()),
        ends: Vec::with_capacity(ends.len()),
        reports: Vec::with_capacity(ends.len()),
    };
    for end in ends {
        let (result, outcome, error_code, after) = attempt_result(tick, &end);
        decided.jobs.push(end.run.job_name.clone());
        decided.ends.push(AttemptEnd::decide(result));
        decided.reports.push(Unreported {
            run: end.run,
            outcome,
            error_code,
            after,
            lease_seen_at: end.lease_seen_at,
        });
    }
    decided
}

/// Write decided ends in one transaction (group commit: one write, not one per attempt), each
/// fenced by its own lease token, committed as `commit` says (a deferred group is made durable by
/// the caller before it waits or reports: see `Store::finish_attempts`).
///
/// If the write waited out another process's lock (a `VACUUM`, a `migrate`, a long prune; on
/// PostgreSQL a session holding a run's row) while every lease was seen held less than a lease
/// ago, nothing is reported: the ends are returned, for the caller to try again (the job
/// succeeded: given up, its run would be run again once its lease expired), after a pause that
/// grows (the supervisor's `LockPause`, so that a lock that refuses the write at once is not met
/// at every turn of its loop). They are not heart-beaten meanwhile (a heartbeat would wait for the
/// same lock): they are tried while the leases last seen hold, the last try when the first of them
/// runs out. If the write fails otherwise, none is recorded, and their leases expire into
/// recovery.
#[must_use]
pub fn record_decided(
    tick: &mut Tick<'_>,
    decided: DecidedEnds,
    commit: Commit,
) -> Option<DecidedEnds> {
    write_decided(tick, decided, commit, |tick, ends| {
        tick.store
            .finish_attempts(ends, &tick.options.actor, commit)
    })
}

/// Write decided ends deferred, and claim up to `room` runs under leases of `lease_secs`, in one
/// store call (one transaction where the backend can: `Store::finish_then_claim`). The ends are
/// made durable by the starts of what the claim took, or by the caller's `sync`. Returns the ends
/// to be tried again, as [`record_decided`] does, beside what the claim took.
pub fn record_decided_then_claim(
    tick: &mut Tick<'_>,
    decided: DecidedEnds,
    room: usize,
    lease_secs: i64,
) -> (Option<DecidedEnds>, Result<Claimed>) {
    let now = tick.clock.epoch();
    let mut claimed = None;
    let again = write_decided(tick, decided, Commit::Deferred, |tick, ends| {
        let actor = &tick.options.actor;
        let (finished, claim) = tick
            .store
            .finish_then_claim(ends, actor, now, lease_secs, room);
        claimed = Some(claim);
        finished
    });
    test_hook("ends-deferred");
    let claimed = match claimed {
        Some(claim) => claim.map_err(anyhow::Error::from),
        None => Err(anyhow::anyhow!("the claim was not made")),
    };
    if claimed.is_ok() {
        test_hook("claimed");
    }
    (again, claimed)
}

/// Write decided ends with `write` (a store call that writes them in one transaction, committed
/// as `commit` says, and returns per end whether it landed), then report them; or return them,
/// to be tried again (see [`record_decided`]).
fn write_decided(
    tick: &mut Tick<'_>,
    decided: DecidedEnds,
    commit: Commit,
    write: impl FnOnce(&mut Tick<'_>, &[AttemptEnd]) -> StoreResult<Vec<Fenced>>,
) -> Option<DecidedEnds> {
    let recorded: Vec<Result<Fenced, WriteFailed>> =
        match write_ends(tick, &decided.jobs, &decided.ends, commit, write) {
            Ok(recorded) => {
                tick.write_landed();
                recorded.into_iter().map(Ok).collect()
            }
            Err(e) if locked_while_leases_hold(tick, &decided, &e) => return Some(decided),
            Err(e) if crate::exit::is_connection_lost(&e) => {
                // Printed once for the whole tick (if this is the first error of the loss), then
                // named at its end: `report_unrecorded`.
                let runs = decided
                    .reports
                    .iter()
                    .map(|r| (r.run.run_id, r.run.attempt));
                tick.report.unrecorded.extend(runs);
                runner_error(&mut tick.report.errors, "recording the end of jobs", &e);
                tick.write_failed(&e);
                vec![Err(WriteFailed::of(&e)); decided.reports.len()]
            }
            Err(e) => {
                // The leases will expire and recovery will retry the runs: at-least-once holds.
                for Unreported { run, .. } in &decided.reports {
                    let context = format!("run {}: recording attempt {}", run.run_id, run.attempt);
                    runner_error(&mut tick.report.errors, context, &e);
                }
                tick.write_failed(&e);
                vec![Err(WriteFailed::of(&e)); decided.reports.len()]
            }
        };
    for (report, recorded) in decided.reports.into_iter().zip(recorded) {
        tick.report.executed.push(Executed {
            run_id: report.run.run_id,
            attempt: report.run.attempt,
            outcome: report.outcome,
            error_code: report.error_code,
            after: report.after,
            recorded,
        });
    }
    None
}

/// Whether a write of `decided` failed only for another process's lock (busy, after the whole
/// wait) while every one of their leases was seen held less than a lease ago: nothing is lost
/// yet, and it is tried again.
fn locked_while_leases_hold(tick: &Tick<'_>, decided: &DecidedEnds, error: &anyhow::Error) -> bool {
    let lease = Duration::from_secs(tick.options.lease_secs().unsigned_abs());
    crate::exit::is_busy(error)
        && decided
            .reports
            .iter()
            .all(|r| r.lease_seen_at.elapsed() < lease)
}

/// What an attempt's end writes (the classified result), and what the report needs of it.
fn attempt_result(
    tick: &mut Tick<'_>,
    end: &End,
) -> (
    AttemptResult,
    Result<Outcome, SpawnErrorKind>,
    Option<ErrorCode>,
    Option<AfterFailure>,
) {
    let (run, ended, stopped) = (&end.run, &end.ended, end.stopped);
    let now = tick.clock.read();
    let (failure, exit_code, outcome) = match ended {
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
                SpawnErrorKind::OutOfFiles | SpawnErrorKind::Other => ErrorCode::SpawnOther,
            };
            (Some((code, message.clone())), None, Err(*kind))
        }
    };
    let finished = ended.as_ref().ok();
    // When it ended, which is now unless the tick was held up (waiting for the database's lock)
    // and only records it later.
    let finished_at = finished.map_or(now, |f| now.earlier_by(f.ended_at.elapsed()));
    let failure = failure.map(|(code, detail)| {
        let then = if stopped == Some(StopReason::Shutdown(OnShutdown::Cancel)) {
            AfterFailure::Cancelled
        } else {
            // The backoff counts from the job's end, not from when the tick got to record it: a
            // tick held up by the lock must not lengthen the delay by its wait.
            AfterFailure::by_policy(&run.retry, run.attempt, finished_at, tick.rng)
        };
        AttemptFailure::new(code, &detail, then)
    });
    let after = failure.as_ref().map(|f| f.then);
    let error_code = failure.as_ref().map(|f| f.code.clone());
    let leftovers = finished.map_or_else(Vec::new, |f| f.leftovers.clone());
    let result = AttemptResult {
        run_id: run.run_id,
        attempt: run.attempt,
        lease_token: run.lease_token.clone(),
        finished_at: finished_at.secs(),
        duration_ms: finished.map_or(0, |f| f.duration.as_millis() as i64),
        // A timeout or a stop ends everything of the attempt; a normal end, by its policy.
        leftovers_killed: run.leftovers == Leftovers::Kill || failure.is_some(),
        failure,
        exit_code,
        // A job that could not start printed nothing.
        output: Some(
            finished.map_or_else(CapturedOutput::default, |f| CapturedOutput {
                stdout_tail: f.stdout_tail.clone(),
                stderr_tail: f.stderr_tail.clone(),
                stdout_bytes: f.stdout_total,
                stderr_bytes: f.stderr_total,
            }),
        ),
        leftovers,
        attempt_left_open: false,
        lease_expired_at: None,
    };
    (result, outcome, error_code, after)
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
            timeout_detail(timeout_secs, finished.duration, finished.signals),
        ),
        (Outcome::Killed, Some(StopReason::Shutdown(OnShutdown::Cancel))) => {
            (ErrorCode::Cancelled, "interrupted at the terminal (run --wait); the job was terminated and the run cancelled".into())
        }
        (Outcome::Killed, Some(StopReason::Shutdown(OnShutdown::Retry))) => {
            (ErrorCode::Signal("SIGTERM".into()), "the runner was asked to stop; the job was terminated".into())
        }
        (Outcome::Killed, Some(StopReason::LeaseUnconfirmed)) => {
            (ErrorCode::LeaseExpired, "its lease could not be confirmed for a whole lease (the database did not answer); the job was stopped at its gate, before its command ran".into())
        }
        (Outcome::Killed, _) => {
            (ErrorCode::Cancelled, "the run was cancelled or its lease was lost; the job was terminated".into())
        }
    };
    Some((code, detail))
}

/// What a timeout did, from the signals the supervisor sent (times since the job started):
/// "timed out after 20s: SIGTERM at 20s, exited at 21s", or "…: SIGTERM at 20s, SIGKILL at 30s"
/// when the job outlived the grace. A shell that exited on SIGTERM while something it left behind
/// needed the SIGKILL gets both, in the order they happened.
fn timeout_detail(timeout_secs: i64, exited_at: Duration, signals: Signals) -> String {
    let at = crate::display::duration;
    let mut steps = Vec::new();
    if let Some(term) = signals.term_at {
        steps.push(format!("SIGTERM at {}", at(term)));
    }
    match signals.kill_at {
        Some(kill) if exited_at < kill => {
            steps.push(format!("exited at {}", at(exited_at)));
            steps.push(format!("SIGKILL at {} to what it left behind", at(kill)));
        }
        Some(kill) => steps.push(format!("SIGKILL at {}", at(kill))),
        None => steps.push(format!("exited at {}", at(exited_at))),
    }
    format!(
        "timed out after {}: {}",
        crate::display::duration_of_secs(timeout_secs),
        steps.join(", ")
    )
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
    write_end_with(tick, job, result, |tick, end| {
        tick.store.finish_attempt(end, &tick.options.actor)
    })
}

/// [`write_end`] by `write`, a durable store call that writes the decided end fenced by its
/// token (or something else in its place: `Store::close_never_started`) and says whether it
/// landed.
pub fn write_end_with(
    tick: &mut Tick<'_>,
    job: &str,
    result: AttemptResult,
    write: impl FnOnce(&mut Tick<'_>, &AttemptEnd) -> StoreResult<Fenced>,
) -> Result<Fenced> {
    let jobs = [job.to_string()];
    let ends = [AttemptEnd::decide(result)];
    let recorded = write_ends(tick, &jobs, &ends, Commit::Durable, |tick, ends| {
        Ok(vec![write(tick, &ends[0])?])
    })?;
    Ok(recorded[0])
}

/// Write several attempts' decided ends (each with its job's name) with `write`, in one
/// transaction committed as `commit` says. A run that went dead gets its stderr line once the
/// write is durable: at once for a durable commit, else at the next durable point
/// ([`results_durable`]).
fn write_ends(
    tick: &mut Tick<'_>,
    jobs: &[String],
    ends: &[AttemptEnd],
    commit: Commit,
    write: impl FnOnce(&mut Tick<'_>, &[AttemptEnd]) -> StoreResult<Vec<Fenced>>,
) -> Result<Vec<Fenced>> {
    if super::test_fault("record-ends") {
        anyhow::bail!("test fault: the results were not written");
    }
    if let Some(locked) = super::test_lock_fault("record-ends-locked") {
        return Err(locked);
    }
    let recorded = write(tick, ends)?;
    for ((job, end), fenced) in jobs.iter().zip(ends).zip(&recorded) {
        if let Some(failure) = &end.result.failure {
            if *fenced == Fenced::Applied && failure.then == AfterFailure::Dead {
                tick.report.dead_not_yet_durable.push(format!(
                    "runner: job {job} run {} is dead after {} attempt(s): {}",
                    end.result.run_id, end.result.attempt, failure.code
                ));
            }
        }
    }
    if commit == Commit::Durable {
        results_durable(tick);
    }
    Ok(recorded)
}

/// Every result written so far is durable (a durable commit, which makes the deferred ones
/// before it durable too, or a sync): say which runs went dead. Never before: a power cut would
/// lose a result already reported.
pub fn results_durable(tick: &mut Tick<'_>) {
    for line in tick.report.dead_not_yet_durable.drain(..) {
        crate::complain!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn a_timeout_detail_says_which_signals_were_sent_and_when() {
        let exited_on_term = Signals {
            term_at: Some(secs(20.04)),
            kill_at: None,
        };
        assert_eq!(
            timeout_detail(20, secs(21.5), exited_on_term),
            "timed out after 20s: SIGTERM at 20s, exited at 21s"
        );
        let killed = Signals {
            term_at: Some(secs(20.04)),
            kill_at: Some(secs(30.1)),
        };
        assert_eq!(
            timeout_detail(20, secs(30.2), killed),
            "timed out after 20s: SIGTERM at 20s, SIGKILL at 30s"
        );
        assert_eq!(
            timeout_detail(20, secs(20.5), killed),
            "timed out after 20s: SIGTERM at 20s, exited at 20s, SIGKILL at 30s to what it left behind"
        );
    }
}
