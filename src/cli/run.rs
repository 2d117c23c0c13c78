//! `runner run NAME [--wait]`: enqueue a manual run now; `--wait` executes it in the foreground
//! through the tick's own code path and exits with the job's exit code.

use std::time::Duration;

use anyhow::Result;

use super::tick::shutdown_flag;
use super::{actor, find_definition, held_by_pause, Ctx, SCHEDULE_NAME};
use crate::exit::Failure;
use crate::model::{AfterFailure, Fenced, NewRun};
use crate::process::{Outcome, SpawnErrorKind};
use crate::store::OpenMode;
use crate::tick::claim::claim_run;
use crate::tick::execute::execute_claimed;
use crate::tick::materialize::resume_if_pause_ended;
use crate::tick::{runner_error, OnShutdown, Tick, TickOptions, TickReport};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
    /// Execute it now in the foreground, streaming its output, and exit with its exit code.
    /// Refused (exit 2) while the schedule is paused: the run would be held until resume. If the
    /// schedule forbids overlap and another of its runs is running, or an earlier one is due
    /// (queued by `runner run`, or a retry made due), the run stays queued for the next tick and
    /// this exits 1.
    #[arg(long)]
    pub wait: bool,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(if args.wait {
        OpenMode::Execute
    } else {
        OpenMode::MustExist
    })?;
    let mut definition = find_definition(store.as_ref(), &args.name)?;
    let now = ctx.clock.epoch();
    // A `pause --for` that has ended is resumed first, as the next tick would.
    if resume_if_pause_ended(store.as_mut(), definition.clone(), now)? {
        definition = find_definition(store.as_ref(), &args.name)?;
    }
    let name = crate::display::escape_line(&definition.name);
    let held = held_by_pause(&definition, now);
    if held.is_some() && args.wait {
        // Its run would be held until the schedule resumes: waiting here could take forever.
        return Err(Failure::usage(format!(
            "schedule {name} is paused, so a run of it cannot start now; resume it first \
             (`runner schedule resume {name}`), or queue a run for when it resumes with \
             `runner run {name}` (no --wait)"
        )));
    }
    let me = actor(None);
    // From the OS, not from a generator seeded by the clock: processes started together read the
    // same clock, and their runs would share a key (the second insert refused, its run lost).
    let nonce =
        getrandom::u64().map_err(|e| anyhow::anyhow!("no random number from the OS: {e}"))?;
    let run = NewRun::manual(&definition.name, now, nonce);
    let run_id = store.enqueue(definition.id, &run, now, &me)?;
    if !args.wait {
        match held {
            Some(held) => say!("enqueued run {run_id} of {name}; {held}"),
            None => say!("enqueued run {run_id} of {name}; the next tick executes it"),
        }
        return Ok(());
    }
    let options = TickOptions {
        actor: me,
        concurrency: 1,
        batch: 1,
        lease: crate::tick::DEFAULT_LEASE,
        max_tick: Duration::from_secs(1),
        stream_output: true,
        shutdown: shutdown_flag()?,
        // Ctrl-C at the terminal means "stop this run", not "retry it at the next tick".
        on_shutdown: OnShutdown::Cancel,
    };
    let mut report = TickReport::default();
    // The tick's own steps, for this run alone: claim it, execute it, record its end.
    let mut tick = Tick {
        store: store.as_mut(),
        clock: &ctx.clock,
        options: &options,
        rng: &mut fastrand::Rng::new(),
        report: &mut report,
        writes_failed: false,
        writes_refused: false,
        server_away: false,
        writes_landed: 0,
    };
    match claim_run(&mut tick, run_id) {
        Ok(Some(claimed)) => execute_claimed(&mut tick, vec![claimed]),
        Ok(None) => {}
        Err(e) => runner_error(&mut tick.report.errors, "claiming runs", &e),
    }
    let Some(executed) = report.executed.first() else {
        if report.errors.connection_lost {
            // Said when it was met: the claim, or its start, could not be written, or the job was
            // left at its gate (said here).
            crate::tick::report_unrecorded(&report);
            return Err(Failure::TickConnectionLost(report.errors.count).into());
        }
        if report.given_back.contains(&run_id) {
            // Why was said when it was met.
            return Err(anyhow::anyhow!(
                "run {run_id} is queued again, no attempt spent: its job could not start for \
                 want of open files; a tick executes it when it can"
            ));
        }
        if report.stopped_at_gate.contains(&run_id) {
            return Err(anyhow::anyhow!(
                "run {run_id} was cancelled, or its lease expired, before its job started: its \
                 command never ran; `runner show {run_id}` tells what became of it"
            ));
        }
        if report.starts_locked > 0 {
            // Its start waited out another process's lock until its lease ran out (said when
            // given up): its command never ran, and recovery retries it.
            return Err(Failure::TickLocked.into());
        }
        if report.not_started > 0 {
            // Its start could not be written (said when met), so it was left at its gate.
            crate::tick::report_unrecorded(&report);
            return Err(Failure::TickErrors(report.errors.count).into());
        }
        return Err(anyhow::anyhow!(
            "run {run_id} is queued but could not start now: the schedule {name} forbids overlap \
             and another of its runs is running or due before this one, or it was paused just \
             now; a tick executes it when it can"
        ));
    };
    let unrecorded = report
        .unrecorded
        .contains(&(executed.run_id, executed.attempt));
    let ended = executed
        .error_code
        .as_ref()
        .map_or_else(|| "succeeded".to_string(), |code| format!("failed: {code}"));
    if unrecorded {
        // The lost connection was reported when met; what it means for this run is said here.
        crate::complain!(
            "runner: run {run_id} attempt {} {ended}, but the connection to the database did not \
             come back to record it: recovery retries the run by its policy once its lease \
             expires",
            executed.attempt
        );
        // Not the job's code: the run is not over. Exit as the loss means, as a failed write of
        // the end does (below).
        return Err(Failure::TickConnectionLost(report.errors.count).into());
    } else if let Err(failed) = &executed.recorded {
        // The write failed (a full disk, a read-only database): the run is still this runner's,
        // but nothing of its end was written. Exit as that error means, not with the job's code:
        // the run is not over.
        crate::complain!(
            "runner: run {run_id} attempt {} {ended}, but its end could not be written to the \
             database ({}): recovery retries the run by its policy once its lease expires",
            executed.attempt,
            failed.cause
        );
        return Err(Failure::EndNotRecorded(failed.exit_code).into());
    } else if matches!(executed.recorded, Ok(Fenced::LeaseLost)) {
        // Its end was not the run's to write: what comes next is not the retry policy's.
        crate::complain!(
            "runner: run {run_id} attempt {} {ended}, but the run was no longer this runner's \
             (cancelled, or recovered by another runner): `runner show {run_id}` tells what \
             became of it",
            executed.attempt
        );
    } else if let Some(code) = &executed.error_code {
        let next = match executed.after {
            Some(AfterFailure::RetryAt(at)) => Some(format!(
                "; retry scheduled at {}",
                crate::display::utc_time(at)
            )),
            // The record step said it, in the one line any run that goes dead gets (once its end
            // is durable): a second line here would say it again.
            Some(AfterFailure::Dead) => None,
            Some(AfterFailure::Cancelled) => Some("; the run is cancelled".to_string()),
            None => Some(String::new()),
        };
        if let Some(next) = next {
            crate::complain!(
                "runner: run {run_id} attempt {} failed: {code}{next}",
                executed.attempt
            );
        }
    }
    let exit_code = match &executed.outcome {
        // Interrupted at the terminal: exit as a shell does after Ctrl-C.
        _ if executed.after == Some(AfterFailure::Cancelled) => 130,
        Ok(Outcome::Exited(code)) => *code,
        Ok(Outcome::Signalled(signo)) => 128 + signo,
        Ok(Outcome::TimedOut) => 124, // as timeout(1)
        Ok(Outcome::Killed) => 143,   // 128 + SIGTERM
        Err(SpawnErrorKind::NotFound) => 127,
        Err(_) => 126,
    };
    if exit_code == 0 {
        Ok(())
    } else {
        Err(Failure::JobExit(exit_code).into())
    }
}
