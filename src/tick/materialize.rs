//! Step 3: every enabled schedule whose fire time has come gets one run per instant, by its
//! catch-up and overlap policies. The cursor move and the inserts share one transaction, and the
//! cursor is compare-and-swapped, so racing ticks never create a second run for an instant.

use anyhow::Result;

use super::Tick;
use crate::clock::{from_epoch, Now};
use crate::model::{Actor, Cursor, Definition, NewRun, Overlap, Settings};
use crate::schedule::{plan_catch_up, Decision};
use crate::store::{CursorMove, Store};

/// How many instants of one schedule a tick looks at (and records, run or skipped) at most;
/// older missed instants are counted in a skip reason, not recorded one by one.
pub const INSTANTS_RECORDED_LIMIT: usize = 1000;

/// Where a cursor at `through` restarts at `now` (`schedule add`, `resume`, `edit`): every
/// instant up to now counts as handled, so a paused or damaged period is never replayed (a cursor
/// never moves back), and the schedule next fires at the first instant after that, by
/// `settings`.
pub fn restart_cursor(settings: &Settings, through: i64, now: i64) -> Result<Cursor> {
    let materialized_through = through.max(now);
    Ok(Cursor {
        materialized_through,
        next_fire_at: settings.timing()?.next_after(materialized_through),
    })
}

pub fn materialize_due(tick: &mut Tick<'_>) -> Result<()> {
    let (store, errors) = (&mut *tick.store, &mut tick.report.errors);
    let actor = &tick.options.actor;
    let now = tick.clock.read();
    let mut inserted = 0;
    for row in store.due_definitions(now.secs())? {
        let definition = match row {
            Ok(definition) => definition,
            Err(damaged) => {
                // A damaged row stops its own schedule only: one line naming it, the column and
                // the repair; the others still run.
                *errors += 1;
                crate::complain!("runner: error: {damaged}");
                continue;
            }
        };
        match materialize_one(store, &definition, now, actor) {
            Ok(n) => inserted += n,
            Err(e) => {
                // One broken schedule must not stop the others.
                super::runner_error(errors, format!("schedule {}", definition.name), &e);
            }
        }
    }
    tick.report.materialized = inserted;
    Ok(())
}

/// Materialise one definition's due instants (a no-op when none are due, it is paused, or
/// another process moved its cursor first). `schedule edit` uses it to settle instants that came
/// due under the old settings before applying new ones.
pub fn materialize_definition(
    store: &mut dyn Store,
    d: &Definition,
    now: Now,
    actor: &Actor,
) -> Result<usize> {
    if d.settings.paused || d.next_fire_at.is_none_or(|next| next > now.secs()) {
        return Ok(0);
    }
    materialize_one(store, d, now, actor)
}

fn materialize_one(
    store: &mut dyn Store,
    d: &Definition,
    now: Now,
    actor: &Actor,
) -> Result<usize> {
    let timing = d.settings.timing()?;
    let through = d.materialized_through;
    let new_through = through.max(now.secs());
    let due = timing.cron.fire_times_between(
        timing.tz,
        from_epoch(through),
        now.time(),
        INSTANTS_RECORDED_LIMIT,
    );
    let grace = std::time::Duration::from_secs(d.settings.grace_secs.max(0) as u64);
    let mut plan = plan_catch_up(&due.instants, now.time(), d.settings.catch_up, grace);
    // The oldest recorded instant tells of the older ones that were not recorded at all (only
    // when it is itself skipped: a run is never turned into a skip to carry the note).
    if let Some((_, Decision::Skip(reason))) = plan.first_mut().filter(|_| due.older_dropped > 0) {
        reason.push_str(&format!(
            "; {} older missed instants were not recorded",
            due.older_dropped
        ));
    }
    let cursor = CursorMove {
        definition_id: d.id,
        expected_through: through,
        expected_revision: d.revision,
        new_through,
        next_fire_at: timing.next_after(new_through),
    };
    let overlap = d.settings.overlap;
    let inserted = store.materialize(cursor, now.secs(), actor, &mut |running| {
        plan.iter()
            .map(|(at, decision)| {
                let skip_reason = match (decision, running) {
                    (Decision::Skip(reason), _) => Some(reason.clone()),
                    (Decision::Run, Some(run_id)) if overlap == Overlap::Forbid => Some(format!(
                        "overlap forbid: run {run_id} of this schedule is still running"
                    )),
                    (Decision::Run, _) => None,
                };
                NewRun::scheduled(&d.name, at.timestamp(), skip_reason)
            })
            .collect()
    })?;
    Ok(inserted)
}
