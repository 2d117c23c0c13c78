//! `runner retry RUN_ID` and `runner cancel RUN_ID|--schedule NAME`: an operator steering runs.
//! Which states allow which request is decided once, in `Steer::allows`, under the write lock.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::show::find_run;
use super::{actor, emit, find_definition_row, held_by_pause, Ctx, SCHEDULE_NAME};
use crate::display::{count, escape_line, local_time};
use crate::exit::Failure;
use crate::model::{Actor, RunStatus, Steer, Steered};
use crate::store::{OpenMode, RunFilter, RunView, Store};
use crate::tick::record::KILL_GRACE;
use crate::tick::recover::{runner_alive, stop_attempt, Stopped};

#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    /// Run id, as `runner history` lists it.
    pub run_id: i64,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["run_id", "schedule"])))]
pub struct CancelArgs {
    /// Run id, as `runner history` lists it.
    pub run_id: Option<i64>,
    /// Cancel every pending and running run of this schedule instead of one run.
    #[arg(long, value_name = "NAME", value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub schedule: Option<String>,
}

pub fn retry(args: RetryArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let run = find_run(store.as_ref(), args.run_id)?;
    let steered = store.steer(run.id, Steer::Retry, ctx.clock.epoch(), &actor(None))?;
    let (attempt, max_attempts, raised_max_from) = match steered {
        Steered::Done {
            attempt,
            max_attempts,
            raised_max_from,
            ..
        } => (attempt, max_attempts, raised_max_from),
        Steered::NotFound => return Err(gone(run.id)),
        Steered::Refused { status, attempt } => {
            let why = match status {
                RunStatus::Pending => format!(
                    "run {} is pending and has not failed yet; the next tick runs it when due",
                    run.id
                ),
                RunStatus::Running => format!(
                    "run {} is running (attempt {attempt}); wait for it, or `runner cancel {}` first",
                    run.id, run.id
                ),
                finished => format!(
                    "run {} has status {finished}; only dead runs and runs waiting to retry can be retried; \
                     for a new run of {} use `runner run {}`",
                    run.id, run.job, run.job
                ),
            };
            return Err(Failure::usage(why));
        }
    };
    let raised = raised_max_from
        .map(|before| format!(" (max attempts raised from {before} to {max_attempts})"))
        .unwrap_or_default();
    let next = attempt + 1;
    let held = match find_definition_row(store.as_ref(), &run.job)? {
        Ok(definition) => held_by_pause(&definition, ctx.clock.epoch()),
        Err(_) => None,
    };
    let when = match held {
        Some(held) => format!("attempt {next} of {max_attempts}{raised}; {held}"),
        None => format!("attempt {next} of {max_attempts} runs at the next tick{raised}"),
    };
    emit(&format!(
        "run {} of {} is due now: {when}\n",
        run.id, run.job
    ))
}

pub fn cancel(args: CancelArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let me = actor(None);
    let run_id = match (args.run_id, args.schedule) {
        (Some(run_id), _) => run_id,
        (None, Some(name)) => return cancel_schedule(store.as_mut(), ctx, &me, &name),
        (None, None) => unreachable!("clap requires RUN_ID or --schedule"),
    };
    let run = find_run(store.as_ref(), run_id)?;
    match cancel_run(store.as_mut(), ctx, &me, &run)? {
        Cancelled::Running { how, .. } => {
            emit(&format!("cancelled run {} of {}; {how}\n", run.id, run.job))
        }
        Cancelled::Pending => emit(&format!(
            "cancelled run {} of {} (it was pending, scheduled {})\n",
            run.id,
            run.job,
            local_time(run.scheduled_for, super::zone(&run.timezone))
        )),
        Cancelled::Gone => Err(gone(run.id)),
        Cancelled::Finished(status) => Err(Failure::usage(format!(
            "run {} has already finished ({status}); only pending or running runs can be cancelled",
            run.id
        ))),
    }
}

/// `cancel --schedule NAME`: every pending and running run of the schedule, each as
/// `cancel RUN_ID` cancels it. Runs that finish meanwhile are left alone.
fn cancel_schedule(store: &mut dyn Store, ctx: &Ctx, me: &Actor, name: &str) -> Result<()> {
    let definition_id = match find_definition_row(store, name)? {
        Ok(definition) => definition.id,
        // A damaged schedule's runs can still be cancelled.
        Err(damaged) => damaged.definition.id,
    };
    let name = escape_line(name);
    // Pending first: a pending run of a `forbid` schedule would otherwise start as soon as the
    // running one stops.
    let mut runs = runs_of(store, definition_id, RunStatus::Pending)?;
    runs.extend(runs_of(store, definition_id, RunStatus::Running)?);
    let (mut pending, mut running) = (0, Vec::new());
    for run in &runs {
        match cancel_run(store, ctx, me, run)? {
            Cancelled::Pending => pending += 1,
            Cancelled::Running { how, .. } => running.push(format!("run {}: {how}", run.id)),
            Cancelled::Gone | Cancelled::Finished(_) => {}
        }
    }
    let total = pending + running.len();
    let mut out = match total {
        0 => format!("schedule {name} has no pending or running runs; nothing to cancel\n"),
        _ => format!(
            "cancelled {} of {name}: {pending} pending, {} running\n",
            count(total, "run"),
            running.len()
        ),
    };
    for line in running {
        out.push_str(&format!("  {line}\n"));
    }
    emit(&out)
}

/// The runs of a schedule in `status`, oldest first.
pub fn runs_of(store: &dyn Store, definition_id: i64, status: RunStatus) -> Result<Vec<RunView>> {
    let mut runs = store.history(&RunFilter {
        definition_id: Some(definition_id),
        status: Some(status),
        since: None,
        limit: i64::MAX as usize,
    })?;
    runs.reverse();
    Ok(runs)
}

/// What cancelling one run did.
pub enum Cancelled {
    /// It was pending: it never runs.
    Pending,
    /// It was running, on this attempt: `how` says who stops its job (see `stop_cancelled`).
    Running { attempt: u32, how: String },
    /// It no longer exists.
    Gone,
    /// It had already finished, with this status: nothing changed.
    Finished(RunStatus),
}

/// Cancel one run as `cancel RUN_ID` does: a pending run never runs; a running one loses its
/// lease and its job is stopped (`stop_cancelled`).
pub fn cancel_run(
    store: &mut dyn Store,
    ctx: &Ctx,
    me: &Actor,
    run: &RunView,
) -> Result<Cancelled> {
    Ok(
        match store.steer(run.id, Steer::Cancel, ctx.clock.epoch(), me)? {
            Steered::Done {
                from: RunStatus::Running,
                attempt,
                ..
            } => Cancelled::Running {
                attempt,
                how: stop_cancelled(store, ctx, me, run, attempt)?,
            },
            Steered::Done { .. } => Cancelled::Pending,
            Steered::NotFound => Cancelled::Gone,
            Steered::Refused { status, .. } => Cancelled::Finished(status),
        },
    )
}

/// A running run of a schedule about to be removed (`schedule rm --force`, `schedule apply
/// --prune --force`), cancelled as `cancel RUN_ID` does before the schedule and the attempt's
/// record are gone (if its runner died, nobody could find and stop the job afterwards). Says
/// what it cancelled (nothing when the run had finished or vanished meanwhile), then waits until
/// its job is stopped (`wait_until_stopped`).
pub fn cancel_before_removal(
    store: &mut dyn Store,
    ctx: &Ctx,
    me: &Actor,
    run: &RunView,
) -> Result<()> {
    match cancel_run(store, ctx, me, run)? {
        Cancelled::Running { attempt, how } => {
            say!(
                "cancelled running run {} (attempt {attempt}); {how}",
                run.id
            )
        }
        // It failed and went back to wait for a retry meanwhile.
        Cancelled::Pending => {
            say!("cancelled pending run {}", run.id);
            return Ok(());
        }
        Cancelled::Gone => return Ok(()),
        // Cancelled before, perhaps with its job still to be stopped.
        Cancelled::Finished(_) => {}
    }
    wait_until_stopped(store, ctx, me, run)
}

/// Wait until the attempt of a cancelled run is closed: the tick holding it stops its job at its
/// next heartbeat (every third of its lease), or, once that runner is gone, this command does.
/// Only then may the schedule go: removing it removes the attempt's record, the one way a tick
/// finds the job should its runner die before stopping it. Gives up (exit 1, nothing removed)
/// after a lease and the kill grace.
fn wait_until_stopped(store: &mut dyn Store, ctx: &Ctx, me: &Actor, run: &RunView) -> Result<()> {
    // The run's own lease, or, when it no longer says, the default one.
    let lease = match (run.lease_expires_at, run.heartbeat_at) {
        (Some(expires), Some(beat)) if expires > beat => {
            Duration::from_secs((expires - beat).unsigned_abs())
        }
        _ => crate::tick::DEFAULT_LEASE,
    };
    let limit = lease + KILL_GRACE + Duration::from_secs(5);
    let started = Instant::now();
    let mut said = false;
    while let Some(holder) = store.open_attempt(run.id, run.attempt)? {
        if holder.host == me.host && !runner_alive(&holder) {
            // Its runner is gone: stop what is left here (errors if it would not die).
            say!(
                "run {}: {}",
                run.id,
                stop_cancelled(store, ctx, me, run, holder.attempt)?
            );
            continue;
        }
        if started.elapsed() > limit {
            return Err(anyhow::anyhow!(
                "run {} of {} is cancelled, but attempt {} on host {} has not been stopped yet; \
                 nothing was removed: run the command again once `runner show {}` shows the \
                 attempt ended",
                run.id,
                escape_line(&run.job),
                holder.attempt,
                holder.host,
                run.id
            ));
        }
        if !said {
            say!(
                "waiting for the tick holding run {} to stop its job (at its next heartbeat)",
                run.id
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// After a running run was cancelled: say who stops its job, or, when the runner holding it is
/// gone (same host), stop the job's processes here and close the attempt. Errors if they would
/// not die (the attempt stays open; the next tick on this host tries again).
fn stop_cancelled(
    store: &mut dyn Store,
    ctx: &Ctx,
    me: &Actor,
    run: &RunView,
    attempt: u32,
) -> Result<String> {
    Ok(match store.open_attempt(run.id, attempt)? {
        None => "its attempt had already ended".to_string(),
        Some(holder) if holder.host != me.host => format!(
            "attempt {attempt} runs on host {}: the tick there terminates it at its next \
             heartbeat, or, if that runner is gone, the next tick on {} does",
            holder.host, holder.host
        ),
        Some(holder) if runner_alive(&holder) => format!(
            "the tick running attempt {attempt} (owner {}, pid {}) terminates its process \
             group at its next heartbeat",
            run.owner.as_deref().unwrap_or("?"),
            holder.runner_pid
        ),
        Some(holder) => match stop_attempt(store, &ctx.clock, me, &holder)? {
            Stopped::Closed(killed) if killed.is_empty() => format!(
                "its runner (pid {}) was gone and nothing of attempt {attempt} was left; \
                 the attempt is closed",
                holder.runner_pid
            ),
            Stopped::Closed(killed) => format!(
                "its runner (pid {}) was gone, so this command terminated what was left of \
                 attempt {attempt}: {}",
                holder.runner_pid,
                killed.join(", ")
            ),
            Stopped::StillAlive(alive) => {
                return Err(anyhow::anyhow!(
                    "cancelled run {} of {}, but its runner (pid {}) is gone and these \
                     processes of attempt {attempt} would not die: {}; the attempt stays \
                     open and the next tick tries again",
                    run.id,
                    run.job,
                    holder.runner_pid,
                    alive.join(", ")
                ))
            }
        },
    })
}

/// The run vanished between reading and steering it (pruned, or its schedule removed).
fn gone(run_id: i64) -> anyhow::Error {
    Failure::not_found(format!("run {run_id} no longer exists"))
}
