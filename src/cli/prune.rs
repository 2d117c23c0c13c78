//! `runner prune`: delete finished runs past retention, with their attempts and events.

use std::time::Duration;

use anyhow::Result;

use super::{emit, parse_duration, Ctx};
use crate::display::utc_time;
use crate::exit::Failure;
use crate::store::{LeftForLater, OpenMode, PruneCounts};
use crate::tick::prune::{prune_finished, retention_from_env, PRUNE_BATCH};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Delete runs that finished longer ago than this, e.g. 90d (see `runner help durations`)
    /// [default: $RUNNER_RETENTION, else 30d].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Only count what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let retention = match args.older_than {
        Some(d) => d,
        None => retention_from_env()
            .map_err(Failure::usage)?
            .ok_or_else(|| {
                Failure::usage("RUNNER_RETENTION is off; give --older-than DUR to prune anyway")
            })?,
    };
    let mut store = ctx.open(OpenMode::MustExist)?;
    let now = ctx.clock.epoch();
    let cutoff = now
        .saturating_sub(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX))
        // Nothing finished before 1970: a larger retention keeps everything, and says so.
        .max(0);
    let before = utc_time(cutoff);
    if ctx.clock.is_shifted() {
        // Explicitly asked for, so done; but a shifted clock is how history gets deleted by
        // mistake, so say what it means.
        crate::complain!(
            "runner: warning: the clock is shifted by --now to {}: the retention counts from \
             there, so runs that finished before {before} are pruned",
            utc_time(now)
        );
    }
    if args.dry_run {
        let counts = store.prunable(cutoff)?;
        return emit(&format!(
            "would remove {} (dry run; nothing was deleted)\n",
            describe(counts, &before)
        ));
    }
    let verbose = ctx.verbose;
    let mut done = PruneCounts::default();
    let removed = prune_finished(store.as_mut(), cutoff, None, &mut |batch| {
        done += batch;
        if verbose {
            crate::complain!(
                "runner: pruned a batch of {} runs ({} so far, {PRUNE_BATCH} per batch)",
                batch.runs,
                done.runs
            );
        }
    })?;
    // For `status`'s "last prune" (the automatic one's hourly turn is left alone: this prune's
    // retention may not be the tick's). The runs are gone whether or not this is written, so a
    // failure here is a warning, not the command's failure.
    if let Err(e) = store.record_manual_prune(now) {
        crate::complain!("runner: warning: pruned, but could not record when, for `status`: {e:#}");
    }
    let left = match describe_left(removed.left) {
        Some(left) => format!("{left}\n"),
        None if removed.runs == 0 => {
            return emit(&format!(
                "nothing to prune: no runs finished before {before}\n"
            ))
        }
        None => String::new(),
    };
    emit(&format!("removed {}\n{left}", describe(removed, &before)))
}

/// "left 40 runs of 1 schedule(s) that another command was changing; the next prune takes them",
/// or nothing when none were left (always, on SQLite).
pub fn describe_left(left: LeftForLater) -> Option<String> {
    (left.runs > 0).then(|| {
        format!(
            "left {} runs of {} schedule(s) that another command was changing; the next prune \
             takes them",
            left.runs, left.schedules
        )
    })
}

/// "12 runs (12 attempts, 36 events) that finished before 2026-10-30T13:07:18Z"
pub fn describe(c: PruneCounts, before: &str) -> String {
    format!(
        "{} runs ({} attempts, {} events) that finished before {before}",
        c.runs, c.attempts, c.events
    )
}
