//! Step 4: execute claimed runs, supervised synchronously: one loop starts jobs behind their
//! gate, polls the children (whose timeouts and leftovers `process` enforces), heart-beats the
//! leases and claims more while due work exists. Signals only set a flag that this loop reads.
//!
//! A job's command starts only after its attempt is durably recorded (pid, start time, lease
//! token) and its lease verified still held: the jobs of one claim are spawned blocked at their
//! gate, their starts committed in one transaction, and only the ones that landed released. A
//! runner that dies before that commit leaves shells that exit without running anything.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::claim::claim_due;
use super::record::{
    decide_ends, record_decided, record_decided_then_claim, record_end, DecidedEnds, End,
    StopReason, KILL_GRACE,
};
use super::{attempt_marker, runner_error, test_hook, Tick};
use crate::display::utc_time;
use crate::model::{ClaimedRun, Fenced, LeaseToken, StartRecord};
use crate::process::{procfs, JobSpec, RunningJob};
use crate::store::Commit;

/// How long the pipes may stay open after the shell exited (a process that escaped containment
/// holding them).
const PIPE_LEAK_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the loop wakes to poll children: a tenth of the youngest job's age, within these
/// bounds. Most short jobs end within a millisecond or two, so young jobs are polled often (each
/// poll is a `waitpid` per job; measured against a 1 ms floor, 0.2 ms drains short jobs 5-10%
/// faster: the round's jobs are seen to end sooner, in rounds only a little smaller); a job that
/// has run for a while is polled rarely (its end a few ms late costs nothing).
const MIN_POLL_INTERVAL: Duration = Duration::from_micros(200);
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// With free slots and nothing due, look for newly due work this often.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

struct Active {
    run: ClaimedRun,
    job: RunningJob,
    stopped: Option<StopReason>,
}

/// The supervisor's view of due work, from its latest claim.
struct Claiming {
    /// When to claim next (a free slot alone does not mean work is due).
    next_at: Instant,
    /// The latest claim took nothing.
    took_nothing: bool,
    /// The latest claim left due work behind (beyond the batch, or behind a running run of a
    /// `forbid` schedule, which may be one of ours).
    more_due: bool,
    /// A job ended since the latest claim: the database may hold newly due work (the next run
    /// of its `forbid` schedule, a retry due at once).
    ended_since: bool,
}

/// The jobs this runner supervises, with their leases.
struct Supervisor {
    active: Vec<Active>,
    lease_secs: i64,
    heartbeat_every: Duration,
    last_heartbeat: Instant,
    /// The database's identity, for the jobs' markers.
    identity: String,
}

impl Supervisor {
    fn new(tick: &mut Tick<'_>) -> Supervisor {
        // Orphans of our jobs (a double fork, `setsid`) are re-parented to us, where their end
        // of job sweep finds them by marker.
        procfs::become_subreaper();
        let lease_secs = tick.options.lease_secs();
        Supervisor {
            active: Vec::new(),
            lease_secs,
            heartbeat_every: Duration::from_secs((lease_secs / 3).max(1) as u64),
            last_heartbeat: Instant::now(),
            identity: tick.store.identity(),
        }
    }

    /// On a shutdown signal, stop every job not stopped yet.
    fn stop_all_on_shutdown(&mut self, tick: &Tick<'_>) -> bool {
        let shutting_down = tick.options.shutdown.load(Ordering::Relaxed);
        if shutting_down {
            for a in self.active.iter_mut().filter(|a| a.stopped.is_none()) {
                a.job.kill(Instant::now());
                a.stopped = Some(StopReason::Shutdown(tick.options.on_shutdown));
            }
        }
        shutting_down
    }

    /// Poll every job once: the attempts that ended since the previous poll (a few ms ago),
    /// decided, to be recorded together.
    fn poll(&mut self, tick: &mut Tick<'_>) -> DecidedEnds {
        let now = Instant::now();
        let mut ends = Vec::new();
        let mut index = 0;
        while index < self.active.len() {
            if let Some(finished) = self.active[index].job.poll(now) {
                let done = self.active.swap_remove(index);
                ends.push(End {
                    run: done.run,
                    ended: Ok(finished),
                    stopped: done.stopped,
                });
            } else {
                index += 1;
            }
        }
        decide_ends(tick, ends)
    }

    /// Heart-beat the leases when a third of the lease has passed since the last time.
    fn heartbeat_if_due(&mut self, tick: &mut Tick<'_>) {
        if !self.active.is_empty() && self.last_heartbeat.elapsed() >= self.heartbeat_every {
            self.last_heartbeat = Instant::now();
            heartbeat(tick, self.lease_secs, &mut self.active);
        }
    }

    fn sleep(&self) {
        std::thread::sleep(poll_interval(&self.active));
    }
}

/// Execute due runs: claim while there is room and due work, supervise the jobs, record each
/// end, until nothing is due and nothing runs, or the tick is old enough to stop claiming.
pub fn execute_due(tick: &mut Tick<'_>) -> Result<()> {
    let options = tick.options;
    let started = Instant::now();
    let mut supervisor = Supervisor::new(tick);
    let mut claiming = Claiming {
        next_at: Instant::now(),
        took_nothing: false,
        more_due: false,
        ended_since: false,
    };

    loop {
        let shutting_down = supervisor.stop_all_on_shutdown(tick);
        let young = started.elapsed() < options.max_tick && !shutting_down;

        // The ends first, then the claim of what they leave room for.
        let ends = supervisor.poll(tick);
        let ended = !ends.is_empty();
        if ended {
            claiming.ended_since = true;
            if claiming.more_due || ends.retry_due_by(tick.clock.epoch()) {
                claiming.next_at = Instant::now();
            }
        }
        if supervisor.active.is_empty() {
            // Before exiting, claim once more: these ends may have made work due.
            claiming.next_at = claiming.next_at.min(Instant::now());
        }

        let room = options
            .concurrency
            .saturating_sub(supervisor.active.len())
            .min(options.batch);
        let claim_now = young && room > 0 && Instant::now() >= claiming.next_at;
        if claim_now {
            claiming.ended_since = false;
            // With ends to record, they and the claim are one store call, the ends deferred:
            // the durable commit of the new starts makes them durable too (one fsync for both),
            // and `sync` below does if nothing starts.
            let claimed = if ended {
                record_decided_then_claim(tick, ends, room, supervisor.lease_secs)
            } else {
                claim_due(tick, room, supervisor.lease_secs)
            };
            match claimed {
                Ok(claimed) => {
                    claiming.took_nothing = claimed.runs.is_empty();
                    claiming.more_due = claimed.more_due;
                    // Nothing more due: look again after the recheck interval (or when a job
                    // ends). More due but not taken: a job of ours may be what holds it back.
                    claiming.next_at = if claimed.more_due && claimed.runs.len() == room {
                        Instant::now()
                    } else {
                        Instant::now() + RECHECK_INTERVAL
                    };
                    start_all(tick, claimed.runs, &mut supervisor);
                }
                Err(e) => {
                    runner_error(&mut tick.report.errors, "claiming runs", &e);
                    claiming.took_nothing = true;
                    claiming.more_due = false;
                    claiming.next_at = Instant::now() + RECHECK_INTERVAL;
                }
            }
            // Nothing is reported, and nothing waited for, before the results are durable.
            if ended {
                if let Err(e) = tick.store.sync() {
                    runner_error(&mut tick.report.errors, "syncing results", &e.into());
                }
            }
        } else if ended {
            record_decided(tick, ends, Commit::Durable);
        }

        // Done when nothing runs and the latest claim, made after every end, found nothing to
        // take (whatever is still due is held back by another runner's run, which that runner
        // claims after it), or when the tick is old enough.
        let settled = claiming.took_nothing && !claiming.ended_since;
        if supervisor.active.is_empty() && (settled || !young) {
            return Ok(());
        }
        supervisor.heartbeat_if_due(tick);
        supervisor.sleep();
    }
}

/// Execute runs already claimed (`run --wait`), claiming nothing more: start them, supervise
/// them and record each end.
pub fn execute_claimed(tick: &mut Tick<'_>, runs: Vec<ClaimedRun>) {
    let mut supervisor = Supervisor::new(tick);
    start_all(tick, runs, &mut supervisor);
    while !supervisor.active.is_empty() {
        supervisor.stop_all_on_shutdown(tick);
        let ends = supervisor.poll(tick);
        if !ends.is_empty() {
            record_decided(tick, ends, Commit::Durable);
        }
        supervisor.heartbeat_if_due(tick);
        if !supervisor.active.is_empty() {
            supervisor.sleep();
        }
    }
}

/// Spawn the claimed runs at their gate, record their starts in one transaction, and release the
/// ones whose start landed; the others never run their command.
fn start_all(tick: &mut Tick<'_>, runs: Vec<ClaimedRun>, supervisor: &mut Supervisor) {
    let specs: Vec<JobSpec> = runs
        .iter()
        .map(|run| job_spec(tick, run, &supervisor.identity))
        .collect();
    let mut spawned = Vec::with_capacity(runs.len());
    for (run, job) in runs.into_iter().zip(RunningJob::spawn_all(&specs)) {
        match job {
            Ok(job) => spawned.push(Active {
                run,
                job,
                stopped: None,
            }),
            Err(error) => record_end(tick, run, Err((error.kind, error.message)), None),
        }
    }
    if spawned.is_empty() {
        return;
    }
    test_hook("spawned");
    let starts: Vec<StartRecord> = spawned
        .iter()
        .map(|a| StartRecord {
            run_id: a.run.run_id,
            attempt: a.run.attempt,
            lease_token: a.run.lease_token.clone(),
            child_pid: a.job.pid(),
            child_start_time: procfs::process_start_time(a.job.pid()),
        })
        .collect();
    let now = tick.clock.epoch();
    let landed = match tick
        .store
        .record_starts(&starts, now, now + supervisor.lease_secs)
    {
        Ok(landed) => landed,
        Err(e) => {
            // Not recorded, so not started: the leases expire and recovery retries the runs.
            runner_error(
                &mut tick.report.errors,
                "recording the start of jobs",
                &e.into(),
            );
            vec![Fenced::LeaseLost; spawned.len()]
        }
    };
    test_hook("recorded");
    for (mut a, landed) in spawned.into_iter().zip(landed) {
        if landed == Fenced::Applied {
            a.job.release();
            supervisor.active.push(a);
        } else {
            // Cancelled or taken over before it could start: it never runs.
            a.job.abort();
        }
    }
}

fn job_spec(tick: &Tick<'_>, run: &ClaimedRun, identity: &str) -> JobSpec {
    let marker = attempt_marker(identity, run.run_id, &run.lease_token);
    JobSpec {
        command: run.command.clone(),
        workdir: run.workdir.as_ref().map(PathBuf::from),
        env: vec![
            ("RUNNER_JOB".into(), run.job_name.clone()),
            ("RUNNER_RUN_ID".into(), run.run_id.to_string()),
            ("RUNNER_ATTEMPT".into(), run.attempt.to_string()),
            ("RUNNER_SCHEDULED_AT".into(), utc_time(run.scheduled_for)),
            ("RUNNER_IDEMPOTENCY_KEY".into(), run.idempotency_key.clone()),
            ("RUNNER_LEASE_TOKEN".into(), run.lease_token.to_string()),
            ("RUNNER_DATABASE".into(), identity.to_string()),
        ],
        timeout: Duration::from_secs(run.timeout_secs.max(1) as u64),
        kill_grace: KILL_GRACE,
        pipe_leak_timeout: PIPE_LEAK_TIMEOUT,
        stream_output: tick.options.stream_output,
        leftovers: run.leftovers,
        marker,
    }
}

fn poll_interval(active: &[Active]) -> Duration {
    let youngest = active.iter().map(|a| a.job.age()).min();
    // No job left means the loop is about to claim more: do not sleep long.
    let interval = youngest
        .map_or(MIN_POLL_INTERVAL, |age| age / 10)
        .clamp(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL);
    let floor = active.iter().map(|a| a.job.min_poll_gap()).max();
    interval.max(floor.unwrap_or_default())
}

fn heartbeat(tick: &mut Tick<'_>, lease_secs: i64, active: &mut [Active]) {
    let tokens: Vec<LeaseToken> = active
        .iter()
        .filter(|a| a.stopped.is_none())
        .map(|a| a.run.lease_token.clone())
        .collect();
    // The current wall clock: a lease is "now plus the lease" whatever happened to the clock.
    let now = tick.clock.epoch();
    match tick.store.heartbeat(&tokens, now, now + lease_secs) {
        Ok(held) => {
            let beating = active.iter_mut().filter(|a| a.stopped.is_none());
            for (a, held) in beating.zip(held) {
                if held == Fenced::LeaseLost {
                    // Cancelled, or recovered by another runner: this job must stop now.
                    a.job.kill(Instant::now());
                    a.stopped = Some(StopReason::LeaseLost);
                }
            }
        }
        Err(e) => {
            // Keep running: the next heartbeat may succeed before the lease runs out.
            runner_error(&mut tick.report.errors, "heartbeat", &e.into());
        }
    }
}
