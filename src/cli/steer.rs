//! `runner retry RUN_ID` and `runner cancel RUN_ID`: an operator steering one run. Which states
//! allow which request is decided once, in `Steer::allows`, under the write lock.

use anyhow::Result;

use super::show::find_run;
use super::{actor, emit, Ctx};
use crate::display::local_time;
use crate::exit::Failure;
use crate::model::RunStatus;
use crate::store::{OpenMode, Steer, Steered};

#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    /// Run id, as `runner history` lists it.
    pub run_id: i64,
}

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// Run id, as `runner history` lists it.
    pub run_id: i64,
}

pub fn retry(args: RetryArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let run = find_run(store.as_ref(), args.run_id)?;
    let now = ctx.clock.epoch();
    let steered = store.steer(run.id, Steer::Retry, now, &actor(None))?;
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
    emit(&format!(
        "run {} of {} is due now: attempt {} of {max_attempts} runs at the next tick{raised}\n",
        run.id,
        run.job,
        attempt + 1
    ))
}

pub fn cancel(args: CancelArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let run = find_run(store.as_ref(), args.run_id)?;
    let now = ctx.clock.epoch();
    match store.steer(run.id, Steer::Cancel, now, &actor(None))? {
        Steered::Done {
            from: RunStatus::Running,
            attempt,
            closed_attempt,
            ..
        } => {
            let how = if closed_attempt {
                "its lease had already expired (no runner is heart-beating it), so its attempt was \
                 closed here"
                    .to_string()
            } else {
                format!(
                    "the tick running attempt {attempt} (owner {}) terminates its process group \
                     at its next heartbeat",
                    run.owner.as_deref().unwrap_or("?")
                )
            };
            emit(&format!("cancelled run {} of {}; {how}\n", run.id, run.job))
        }
        Steered::Done { .. } => emit(&format!(
            "cancelled run {} of {} (it was pending, scheduled {})\n",
            run.id,
            run.job,
            local_time(run.scheduled_for, super::zone(&run.timezone))
        )),
        Steered::NotFound => Err(gone(run.id)),
        Steered::Refused { status, .. } => Err(Failure::usage(format!(
            "run {} has already finished ({status}); only pending or running runs can be cancelled",
            run.id
        ))),
    }
}

/// The run vanished between reading and steering it (pruned, or its schedule removed).
fn gone(run_id: i64) -> anyhow::Error {
    Failure::not_found(format!("run {run_id} no longer exists"))
}
