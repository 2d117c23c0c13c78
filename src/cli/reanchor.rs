//! `runner schedule reanchor`: move schedules that a tick with a clock ahead pushed into the
//! future back to now, so they fire again by this host's clock. (Its own module because it is
//! about clock steps; `schedule.rs` only lists it.)
//!
//! Safe against a racing tick: the cursor is compare-and-swapped by its value and the schedule's
//! revision, and the move bumps the revision, so a tick that read the old cursor cannot move it
//! afterwards (its own compare-and-swap fails), and a tick that moved it first makes this one
//! read the schedule again.

use anyhow::Result;

use super::{actor, find_definition, zone, Ctx, SCHEDULE_NAME};
use crate::clock::CLOCK_TOLERANCE_SECS;
use crate::display::{duration_of_secs, local_time, utc_time};
use crate::exit::Failure;
use crate::model::{Actor, Definition};
use crate::store::{CursorMove, OpenMode, Reanchored, Store};
use crate::tick::materialize::passed_over_before;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Schedules to re-anchor.
    #[arg(value_name = "NAME", conflicts_with = "all", value_parser = SCHEDULE_NAME,
          hide_possible_values = true)]
    pub names: Vec<String>,
    /// Every schedule; and lower the latest time a tick saw to now, so ticks stop warning that
    /// this clock is behind.
    #[arg(long)]
    pub all: bool,
}

/// A schedule changed by someone else this many times in a row while we tried: give up.
const ATTEMPTS: usize = 5;

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    if args.names.is_empty() && !args.all {
        return Err(Failure::usage(
            "give the schedules to re-anchor (NAME...), or --all; `runner status` lists the \
             schedules whose cursor is ahead of the clock",
        ));
    }
    let mut store = ctx.open(OpenMode::MustExist)?;
    let now = ctx.clock.epoch();
    // Every name first: a typo fails (exit 3) before anything moves.
    let definitions = if args.all {
        // A damaged schedule is repaired with `schedule edit` first; its cursor is not moved.
        store
            .definitions()?
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    } else {
        args.names
            .iter()
            .map(|name| find_definition(store.as_ref(), name))
            .collect::<Result<Vec<_>>>()?
    };
    if definitions.is_empty() {
        say!("no schedules");
    }
    let me = actor(None);
    for definition in definitions {
        reanchor(store.as_mut(), definition, now, &me)?;
    }
    if args.all {
        if let Some(high_water) = store.lower_clock_high_water(now)? {
            say!(
                "the latest time a tick saw was {} ({} ahead); it is now {}, so ticks no longer \
                 warn that this clock is behind",
                utc_time(high_water),
                duration_of_secs(high_water - now),
                utc_time(now)
            );
        }
    }
    Ok(())
}

fn reanchor(store: &mut dyn Store, mut d: Definition, now: i64, me: &Actor) -> Result<()> {
    for _ in 0..ATTEMPTS {
        let tz = zone(&d.settings.timezone);
        let timing = d.settings.timing()?;
        let fire_text =
            |at: Option<i64>| at.map_or_else(|| "never".to_string(), |t| local_time(t, tz));
        let paused = if d.settings.paused { " (paused)" } else { "" };
        if d.materialized_through - now <= CLOCK_TOLERANCE_SECS {
            say!(
                "{}{paused}: left alone, its cursor is not ahead of now (next fire {})",
                d.name,
                fire_text(timing.next_after(d.materialized_through.max(now)))
            );
            return Ok(());
        }
        let next_fire_at = timing.next_after(now);
        let cursor = CursorMove {
            definition_id: d.id,
            expected_through: d.materialized_through,
            expected_revision: d.revision,
            new_through: now,
            next_fire_at,
        };
        // The instants before now that the skips it forgets counted get a record of their own.
        let record = |first_after: &_| passed_over_before(&d.name, &timing, now, first_after);
        match store.reanchor_definition(cursor, now, me, &record)? {
            Some(done) => {
                say!(
                    "reanchored {}{paused}: next fire {} -> {}",
                    d.name,
                    fire_text(d.next_fire_at),
                    fire_text(next_fire_at)
                );
                report_runs_after(&done, tz)?;
                return Ok(());
            }
            // A tick or another command changed it meanwhile: look again.
            None => d = find_definition(store, &d.name)?,
        }
    }
    Err(Failure::Busy(format!(
        "schedule {} kept changing while it was being re-anchored; it is safe to try again",
        d.name
    ))
    .into())
}

fn report_runs_after(done: &Reanchored, tz: crate::tz::Tz) -> Result<()> {
    if done.skips_forgotten > 0 {
        say!(
            "  forgot {} skipped instant(s) after now, skipped by the tick whose clock was ahead: \
             they are decided again when they come",
            done.skips_forgotten
        );
    }
    if done.runs_kept > 0 {
        say!(
            "  kept {} run(s) of instants after now (run early by that tick, or pending until \
             their time): those instants are not materialised again",
            done.runs_kept
        );
    }
    if let Some(run) = &done.recorded {
        say!(
            "  recorded {} as skipped, the newest instant before now that tick passed over \
             without a record: {}",
            local_time(run.scheduled_for, tz),
            run.skip_reason.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}
