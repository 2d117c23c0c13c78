//! Step 4: claim due runs under a lease and execute them, supervised synchronously: one loop
//! polls the children, enforces their timeouts (inside `process`) and heart-beats the leases.
//! Signals only set a flag that this loop reads.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{runner_error, TickOptions, TickReport};
use crate::clock::Clock;
use crate::display::utc_time;
use crate::model::{
    Actor, AfterFailure, AttemptResult, ClaimedRun, ErrorCode, Fenced, ERROR_DETAIL_MAX,
};
use crate::process::{signal_name, Finished, JobSpec, Outcome, RunningJob, SpawnErrorKind};
use crate::store::Store;
use crate::tick::recover::after_failure;

/// SIGTERM → SIGKILL grace for a job that times out or is stopped.
pub const KILL_GRACE: Duration = Duration::from_secs(10);
/// How long the pipes may stay open after the shell exited (a grandchild holding them).
const PIPE_LEAK_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the loop wakes to poll children: a tenth of the youngest job's age, within these
/// bounds. Most short jobs end within milliseconds, so young jobs are polled often; a job that
/// has run for a while is polled rarely (its end a few ms late costs nothing).
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(1);
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// With free slots and nothing due, look for newly due work this often.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

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
enum StopReason {
    /// The lease is gone: cancelled, or recovered by another runner.
    LeaseLost,
    /// This runner was asked to exit.
    Shutdown,
}

struct Active {
    run: ClaimedRun,
    job: RunningJob,
    started: Instant,
    stopped: Option<StopReason>,
}

pub fn execute_due(
    store: &mut dyn Store,
    clock: &Clock,
    options: &TickOptions,
    rng: &mut fastrand::Rng,
    report: &mut TickReport,
) -> Result<()> {
    let started = Instant::now();
    // Clamped so the lease arithmetic below can never overflow, whatever the caller passed.
    let lease_secs = options.lease.as_secs().clamp(3, 86_400) as i64;
    let heartbeat_every = Duration::from_secs((lease_secs / 3).max(1) as u64);
    let mut last_heartbeat = Instant::now();
    let mut active: Vec<Active> = Vec::new();
    let mut next_claim = Instant::now();
    let mut nothing_due = false;
    let mut claimed_only_run = false;

    loop {
        let shutting_down = options.shutdown.load(Ordering::Relaxed);
        if shutting_down {
            for a in active.iter_mut().filter(|a| a.stopped.is_none()) {
                a.job.kill(Instant::now());
                a.stopped = Some(StopReason::Shutdown);
            }
        }
        let young = started.elapsed() < options.max_tick && !shutting_down && !claimed_only_run;
        let room = options
            .concurrency
            .saturating_sub(active.len())
            .min(options.batch);
        if young && room > 0 && Instant::now() >= next_claim {
            match store.claim(
                &options.actor,
                clock.epoch(),
                lease_secs,
                room,
                options.only_run,
            ) {
                Ok(claimed) => {
                    // An empty claim means nothing is due. A short one does not: a forbid
                    // schedule yields one run at a time, so its next run is claimed when this
                    // one ends. Either way, do not ask again before a job ends or the recheck.
                    nothing_due = claimed.is_empty();
                    if claimed.len() < room {
                        next_claim = Instant::now() + RECHECK_INTERVAL;
                    }
                    claimed_only_run = options.only_run.is_some() && !claimed.is_empty();
                    for run in claimed {
                        if let Some(a) = start(store, clock, run, options, rng, report) {
                            active.push(a);
                        }
                    }
                }
                Err(e) => {
                    runner_error(&mut report.errors, "claiming runs", &e);
                    nothing_due = true;
                    next_claim = Instant::now() + RECHECK_INTERVAL;
                }
            }
        }
        if active.is_empty() && (nothing_due || !young) {
            return Ok(());
        }

        let now = Instant::now();
        let mut index = 0;
        while index < active.len() {
            if let Some(finished) = active[index].job.poll(now) {
                let done = active.swap_remove(index);
                record(
                    store,
                    clock,
                    &options.actor,
                    &done.run,
                    Ok(finished),
                    done.stopped,
                    rng,
                    report,
                );
                if !nothing_due {
                    // A slot is free and the last claim found work: more may be due right now.
                    // (After an empty claim, the periodic recheck finds work that comes due
                    // later, without taking the write lock on every job's end.)
                    next_claim = Instant::now();
                }
            } else {
                index += 1;
            }
        }

        if !active.is_empty() && last_heartbeat.elapsed() >= heartbeat_every {
            last_heartbeat = Instant::now();
            heartbeat(store, clock, lease_secs, &mut active, report);
        }
        std::thread::sleep(poll_interval(&active));
    }
}

fn start(
    store: &mut dyn Store,
    clock: &Clock,
    run: ClaimedRun,
    options: &TickOptions,
    rng: &mut fastrand::Rng,
    report: &mut TickReport,
) -> Option<Active> {
    let spec = JobSpec {
        command: run.command.clone(),
        workdir: run.workdir.as_ref().map(PathBuf::from),
        env: vec![
            ("RUNNER_JOB".into(), run.job_name.clone()),
            ("RUNNER_RUN_ID".into(), run.run_id.to_string()),
            ("RUNNER_ATTEMPT".into(), run.attempt.to_string()),
            ("RUNNER_SCHEDULED_AT".into(), utc_time(run.scheduled_for)),
            ("RUNNER_IDEMPOTENCY_KEY".into(), run.idempotency_key.clone()),
            ("RUNNER_LEASE_TOKEN".into(), run.lease_token.clone()),
        ],
        timeout: Duration::from_secs(run.timeout_secs.max(1) as u64),
        kill_grace: KILL_GRACE,
        pipe_leak_timeout: PIPE_LEAK_TIMEOUT,
        stream_output: options.only_run.is_some(),
    };
    match RunningJob::spawn(&spec) {
        Ok(job) => {
            let pid = job.pid();
            let start_time = crate::process::process_start_time(pid);
            let mut active = Active {
                run,
                job,
                started: Instant::now(),
                stopped: None,
            };
            match store.record_process(&active.run, pid, start_time) {
                Ok(Fenced::Applied) => {}
                Ok(Fenced::LeaseLost) => {
                    active.job.kill(Instant::now());
                    active.stopped = Some(StopReason::LeaseLost);
                }
                Err(e) => {
                    let context = format!("run {}: recording its process", active.run.run_id);
                    runner_error(&mut report.errors, context, &e);
                }
            }
            Some(active)
        }
        Err(spawn_error) => {
            record(
                store,
                clock,
                &options.actor,
                &run,
                Err((spawn_error.kind, spawn_error.message)),
                None,
                rng,
                report,
            );
            None
        }
    }
}

fn poll_interval(active: &[Active]) -> Duration {
    let youngest = active.iter().map(|a| a.started.elapsed()).min();
    // No job left means the loop is about to claim more: do not sleep long.
    youngest
        .map_or(MIN_POLL_INTERVAL, |age| age / 10)
        .clamp(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL)
}

fn heartbeat(
    store: &mut dyn Store,
    clock: &Clock,
    lease_secs: i64,
    active: &mut [Active],
    report: &mut TickReport,
) {
    let tokens: Vec<String> = active
        .iter()
        .filter(|a| a.stopped.is_none())
        .map(|a| a.run.lease_token.clone())
        .collect();
    let now = clock.epoch();
    match store.heartbeat(&tokens, now, now + lease_secs) {
        Ok(held) => {
            for a in active.iter_mut().filter(|a| a.stopped.is_none()) {
                if !held.contains(&a.run.lease_token) {
                    // Cancelled, or recovered by another runner: this job must stop now.
                    a.job.kill(Instant::now());
                    a.stopped = Some(StopReason::LeaseLost);
                }
            }
        }
        Err(e) => {
            // Keep running: the next heartbeat may succeed before the lease runs out.
            runner_error(&mut report.errors, "heartbeat", &e);
        }
    }
}

/// Classify an attempt's end and write it, fenced by its lease token.
#[allow(clippy::too_many_arguments)]
fn record(
    store: &mut dyn Store,
    clock: &Clock,
    actor: &Actor,
    run: &ClaimedRun,
    ended: Result<Finished, (SpawnErrorKind, String)>,
    stopped: Option<StopReason>,
    rng: &mut fastrand::Rng,
    report: &mut TickReport,
) {
    let now_ms = clock.now().timestamp_millis();
    let now = now_ms.div_euclid(1000);
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
        after_failure(
            run.attempt,
            run.max_attempts,
            run.backoff_base_secs,
            run.backoff_max_secs,
            now_ms,
            rng,
        )
    });
    let empty = Vec::new();
    let finished = ended.as_ref().ok();
    let result = AttemptResult {
        run_id: run.run_id,
        attempt: run.attempt,
        lease_token: run.lease_token.clone(),
        finished_at: now,
        duration_ms: finished.map_or(0, |f| f.duration.as_millis() as i64),
        failure: failure
            .clone()
            .zip(after)
            .map(|((code, detail), after)| (code, detail, after)),
        exit_code,
        stdout_tail: finished.map_or_else(|| empty.clone(), |f| f.stdout_tail.clone()),
        stderr_tail: finished.map_or_else(|| empty.clone(), |f| f.stderr_tail.clone()),
        stdout_bytes: finished.map_or(0, |f| f.stdout_total),
        stderr_bytes: finished.map_or(0, |f| f.stderr_total),
    };
    let recorded = match store.finish_attempt(&result, actor) {
        Ok(recorded) => recorded,
        Err(e) => {
            // The lease will expire and recovery will retry the run: at-least-once holds.
            let context = format!("run {}: recording attempt {}", run.run_id, run.attempt);
            runner_error(&mut report.errors, context, &e);
            Fenced::LeaseLost
        }
    };
    let error_code = failure.map(|(code, _)| code);
    if recorded == Fenced::Applied && after == Some(AfterFailure::Dead) {
        if let Some(code) = &error_code {
            print_dead(&run.job_name, run.run_id, run.attempt, code);
        }
    }
    report.executed.push(Executed {
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
        (Outcome::Killed, Some(StopReason::Shutdown)) => {
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
