//! Step 2: every enabled schedule whose fire time has come gets one run per instant, by its
//! catch-up and overlap policies. The cursor move and the inserts share one transaction, and the
//! cursor is compare-and-swapped, so racing ticks never create a second run for an instant.
//! Schedules are written `MATERIALIZE_BATCH` to a transaction (each with its own
//! compare-and-swap): one commit per batch, not one per schedule. With more than a batch due,
//! a thread reads the next batch on a second connection while the current one is written, and
//! no more than a few batches are ever held in memory.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::mpsc::SyncSender;

use anyhow::Result;
use chrono::{DateTime, SecondsFormat, Utc};

use super::Tick;
use crate::clock::{from_epoch, Now};
use crate::model::{Actor, CatchUp, Cursor, Definition, NewRun, Overlap, RunStatus, Settings};
use crate::schedule::{plan_catch_up, Decision, FireTimes, Timing};
use crate::store::{
    Applied, CursorMove, DefinitionChanges, DefinitionRow, DueReader, Materialization, RowLocks,
    RunAfterCursor, Store, MATERIALIZE_BATCH,
};

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

/// Resume a paused schedule at `at` (`schedule resume`, and a tick once a `pause --for` has
/// ended): instants up to `at` were paused and are never replayed; from then on it fires as usual.
pub fn resume_definition(d: &mut Definition, at: i64) -> Result<()> {
    d.set_cursor(restart_cursor(&d.settings, d.materialized_through, at)?);
    d.settings.paused = false;
    d.paused_until = None;
    Ok(())
}

/// Before materialising: resume each schedule whose `pause --for` has ended, as `schedule resume`
/// does, but from the end of the pause rather than from now: instants at or after the end belong
/// to the schedule again, and this tick's materialisation runs or skips them by its catch-up
/// policy, exactly as for any tick that came late. Each is written only if nobody changed the
/// schedule since it was read (a `pause`, `resume` or `edit` meanwhile wins).
pub fn resume_ended_pauses(tick: &mut Tick<'_>) -> Result<()> {
    let now = tick.clock.epoch();
    for row in tick.store.ended_pauses(now)? {
        match row {
            Ok(definition) => {
                if resume_if_pause_ended(&mut *tick.store, definition, now)? {
                    tick.report.resumed += 1;
                }
            }
            Err(damaged) => {
                let e = anyhow::anyhow!("its pause has ended, but it is damaged: {damaged}");
                super::runner_error(&mut tick.report.errors, damaged.label(), &e);
            }
        }
    }
    Ok(())
}

/// What the next tick makes of a schedule whose `pause --for` ended at or before `now`: resumed
/// from the end of the pause (the cursor counts the instants before the end as handled), its end
/// dropped. False, leaving it as it is, if the schedule is not paused for a while or its pause
/// has not ended yet. Commands that read a schedule before that tick (`why`, `simulate`) judge
/// it so.
pub fn with_ended_pause_resumed(definition: &mut Definition, now: i64) -> Result<bool> {
    match definition.pause_end() {
        Some(end) if end <= now => {
            resume_definition(definition, end - 1)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Resume `definition` in the store if its `pause --for` has ended, as the next tick would
/// (`with_ended_pause_resumed`), only if nobody changed it since it was read. `edit` and `apply`
/// do this first, so that the instants due since the end are materialised under the settings
/// they came due with, as that tick would have, not dropped by a change that restarts the
/// cursor. True if this call resumed it.
pub fn resume_if_pause_ended(
    store: &mut dyn Store,
    mut definition: Definition,
    now: i64,
) -> Result<bool> {
    if !with_ended_pause_resumed(&mut definition, now)? {
        return Ok(false);
    }
    let resumed = DefinitionChanges {
        update: vec![definition],
        ..DefinitionChanges::default()
    };
    Ok(matches!(
        store.apply_definitions(&resumed, now)?,
        Applied::Done
    ))
}

/// What a command that changes a schedule at `now` (`edit`, `apply`, `pause`) does first, as the
/// next tick would have: a `pause --for` that has ended is resumed from its end
/// (`resume_if_pause_ended`), then the instants already due are materialised by the settings and
/// policies they came due with (`materialize_definition`; none for a schedule still paused). The
/// instants before now belong to the schedule as it was, so a change, a pause included, takes
/// effect after them and drops none. Returns the schedule as stored then (read with `reread`)
/// and how many instants were materialised.
pub fn settle_due(
    store: &mut dyn Store,
    mut definition: Definition,
    now: Now,
    actor: &Actor,
    reread: impl Fn(&dyn Store) -> Result<Definition>,
) -> Result<(Definition, usize)> {
    if resume_if_pause_ended(store, definition.clone(), now.secs())? {
        definition = reread(store)?;
    }
    if definition.settings.paused {
        return Ok((definition, 0));
    }
    let materialized = materialize_definition(store, &definition, now, actor)?;
    // Read again whatever was written: the cursor may have moved (by this call, or a tick).
    Ok((reread(store)?, materialized))
}

pub fn materialize_due(tick: &mut Tick<'_>) -> Result<()> {
    let now = tick.clock.read();
    let mut writer = Writer {
        store: &mut *tick.store,
        errors: &mut tick.report.errors,
        actor: &tick.options.actor,
        now,
        timings: Timings::default(),
        inserted: 0,
        locks: RowLocks::Wait,
        held: 0,
        held_cause: None,
    };
    // An idle tick, and most others, find everything due in this first batch.
    let first = writer
        .store
        .due_definitions(now.secs(), Some(MATERIALIZE_BATCH))?;
    if first.len() < MATERIALIZE_BATCH {
        writer.write(first);
    } else {
        let read: HashSet<i64> = first.iter().map(definition_id).collect();
        let reader = if super::test_fault("due-reader") {
            Err(anyhow::anyhow!("forged failure").into())
        } else {
            writer.store.due_reader(now.secs(), read.clone())
        };
        let reader = reader.unwrap_or_else(|e: crate::store::Error| {
            // PostgreSQL at its connection limit, say: slower, but nothing is lost.
            crate::complain!(
                "runner: warning: cannot open a second connection to read the due schedules \
                     ({e}); reading them on this one"
            );
            None
        });
        match reader {
            // The next batch is read on another core while this one is written.
            Some(reader) => std::thread::scope(|scope| -> Result<()> {
                let (send, batches) = std::sync::mpsc::sync_channel(1);
                let started = std::thread::Builder::new()
                    .name("due-reader".to_string())
                    .spawn_scoped(scope, move || read_batches(reader, send));
                if started.is_err() {
                    // No thread to be had (a process limit): slower, but nothing is lost.
                    return write_all_here(&mut writer, first, &read);
                }
                writer.write(first);
                for batch in batches {
                    super::test_hook("read-batch");
                    writer.write(batch?);
                }
                Ok(())
            })?,
            None => write_all_here(&mut writer, first, &read)?,
        }
    }
    tick.report.materialized = writer.inserted;
    if let Some(cause) = &writer.held_cause {
        say_materialize_locked(cause, writer.held);
        tick.report.materialize_locked = writer.held;
    }
    Ok(())
}

/// Some schedules were locked by another session past the lock timeout: they were passed over,
/// their cursors unmoved, and the next tick materialises their instants (its catch-up policy
/// deciding, as for a tick that came late). One line says so (the tick exits 5: busy, safe to
/// retry); the others were materialised, and the tick went on.
fn say_materialize_locked(cause: &anyhow::Error, held: usize) {
    let schedules = match held {
        1 => "1 schedule stayed locked by another session: its due instants wait".to_string(),
        n => format!("{n} schedules stayed locked by another session: their due instants wait"),
    };
    crate::complain!(
        "runner: error: materialising schedules: {cause:#}; {schedules} for the next tick"
    );
}

/// Write the first batch, then every due schedule not in it, read on the tick's own connection.
fn write_all_here(
    writer: &mut Writer<'_>,
    first: Vec<DefinitionRow>,
    read: &HashSet<i64>,
) -> Result<()> {
    writer.write(first);
    let rest = writer.store.due_definitions(writer.now.secs(), None)?;
    let unread = rest
        .into_iter()
        .filter(|row| !read.contains(&definition_id(row)));
    writer.write(unread.collect());
    Ok(())
}

fn definition_id(row: &DefinitionRow) -> i64 {
    match row {
        Ok(definition) => definition.id,
        Err(damaged) => damaged.definition.id,
    }
}

/// Hand `reader`'s batches to the tick until none are left, or the tick stops taking them.
fn read_batches(
    mut reader: Box<dyn DueReader>,
    send: SyncSender<crate::store::Result<Vec<DefinitionRow>>>,
) {
    loop {
        let batch = reader.next_batch(MATERIALIZE_BATCH);
        let last = !matches!(&batch, Ok(rows) if rows.len() == MATERIALIZE_BATCH);
        if send.send(batch).is_err() || last {
            return;
        }
    }
}

/// Plans due schedules and writes them `MATERIALIZE_BATCH` to a transaction.
struct Writer<'t> {
    store: &'t mut dyn Store,
    errors: &'t mut super::RunnerErrors,
    actor: &'t Actor,
    now: Now,
    timings: Timings,
    inserted: usize,
    /// `Wait` until a write waits out a lock; from then on the tick passes over the rows still
    /// held, so that it waits once, not once per batch or per schedule.
    locks: RowLocks,
    /// Schedules passed over for a lock (or a busy database), left to the next tick.
    held: usize,
    /// What the first of them met.
    held_cause: Option<anyhow::Error>,
}

impl Writer<'_> {
    fn write(&mut self, rows: Vec<DefinitionRow>) {
        let mut names = Vec::with_capacity(MATERIALIZE_BATCH);
        let mut batch = Vec::with_capacity(MATERIALIZE_BATCH);
        let mut rows = rows.into_iter().peekable();
        while let Some(row) = rows.next() {
            match row {
                Ok(definition) => match self
                    .timings
                    .of(&definition)
                    .map(|planner| plan(&definition, &planner, self.now))
                {
                    Ok(m) => {
                        names.push(definition.name);
                        batch.push(m);
                    }
                    // One broken schedule must not stop the others.
                    Err(e) => super::runner_error(
                        self.errors,
                        format!("schedule {}", definition.name),
                        &e,
                    ),
                },
                Err(damaged) => {
                    // A damaged row stops its own schedule only: one line naming it, the column
                    // and the repair; the others still run.
                    self.errors.count += 1;
                    crate::complain!("runner: error: {damaged}");
                }
            }
            if batch.len() == MATERIALIZE_BATCH || (rows.peek().is_none() && !batch.is_empty()) {
                self.write_batch(std::mem::take(&mut batch), &mut names);
            }
        }
    }

    fn write_batch(&mut self, batch: Vec<Materialization>, names: &mut Vec<String>) {
        let count = batch.len();
        match self
            .store
            .materialize_batch(batch, self.now.secs(), self.actor, self.locks)
        {
            Ok(results) => {
                for (name, result) in names.drain(..).zip(results) {
                    match result.map_err(anyhow::Error::from) {
                        Ok(n) => self.inserted += n,
                        Err(e) if crate::exit::is_busy(&e) => self.left_locked(e, 1),
                        Err(e) => super::runner_error(self.errors, format!("schedule {name}"), &e),
                    }
                }
            }
            Err(e) => {
                names.clear();
                let e = anyhow::Error::from(e);
                if crate::exit::is_busy(&e) {
                    self.left_locked(e, count);
                } else {
                    let context = format!("materialising {count} schedules");
                    super::runner_error(self.errors, context, &e);
                }
            }
        }
    }

    /// `count` schedules were left, their cursors unmoved, for a lock another session held (see
    /// `say_materialize_locked`).
    fn left_locked(&mut self, cause: anyhow::Error, count: usize) {
        self.locks = RowLocks::PassOver;
        self.held += count;
        self.held_cause.get_or_insert(cause);
    }
}

/// Parsed timings by expression and zone: schedules often share one, and parsing it was most of
/// the CPU a schedule's materialisation cost. Each also keeps the plans made with it this tick.
#[derive(Default)]
struct Timings(HashMap<String, HashMap<String, Rc<Planner>>>);

impl Timings {
    fn of(&mut self, d: &Definition) -> Result<Rc<Planner>> {
        let (cron, zone) = (&d.settings.cron, &d.settings.timezone);
        if let Some(planner) = self.0.get(cron).and_then(|zones| zone_planner(zones, zone)) {
            return Ok(planner);
        }
        let planner = Rc::new(Planner {
            timing: d.settings.timing()?,
            plans: RefCell::default(),
        });
        let zones = self.0.entry(cron.clone()).or_default();
        zones.insert(zone.clone(), Rc::clone(&planner));
        Ok(planner)
    }
}

fn zone_planner(zones: &HashMap<String, Rc<Planner>>, zone: &str) -> Option<Rc<Planner>> {
    zones.get(zone).map(Rc::clone)
}

/// One timing, and the plans made with it during one tick. Planning depends only on the timing,
/// the cursor, the catch-up policy with its grace, and `now` (the same for the whole tick), so
/// schedules that share all of them (thousands of schedules due at the same minute, with the same
/// expression) share one plan: the fire times are walked and the catch-up decided once.
struct Planner {
    timing: Timing,
    plans: RefCell<HashMap<PlanKey, Rc<Planned>>>,
}

/// The cursor, the catch-up policy and its grace in seconds.
type PlanKey = (i64, CatchUp, i64);

/// The instants a cursor's schedule handles at `now`, each run or skipped by its catch-up
/// policy, and where its cursor moves.
struct Planned {
    instants: Vec<(DateTime<Utc>, Decision)>,
    new_through: i64,
    next_fire_at: Option<i64>,
}

impl Planner {
    fn plan(&self, through: i64, settings: &Settings, now: Now) -> Rc<Planned> {
        let key = (through, settings.catch_up, settings.grace_secs);
        if let Some(planned) = self.plans.borrow().get(&key) {
            return Rc::clone(planned);
        }
        let planned = Rc::new(self.plan_anew(through, settings, now));
        self.plans.borrow_mut().insert(key, Rc::clone(&planned));
        planned
    }

    fn plan_anew(&self, through: i64, settings: &Settings, now: Now) -> Planned {
        let timing = &self.timing;
        let new_through = through.max(now.secs());
        let due = timing.cron.fire_times_between(
            timing.tz,
            from_epoch(through),
            now.time(),
            INSTANTS_RECORDED_LIMIT,
        );
        let grace = std::time::Duration::from_secs(settings.grace_secs.max(0) as u64);
        let mut instants = plan_catch_up(&due.instants, now.time(), settings.catch_up, grace);
        // The oldest recorded instant tells of the older ones that were not recorded at all
        // (only when it is itself skipped: a run is never turned into a skip to carry the note).
        if let Some((_, Decision::Skip(reason))) =
            instants.first_mut().filter(|_| due.older_dropped > 0)
        {
            reason.push_str(&OlderNotRecorded::of(&due, through).note());
        }
        Planned {
            instants,
            new_through,
            next_fire_at: timing.next_after(new_through),
        }
    }
}

/// The note a tick appends to the reason of the oldest instant it records (as skipped) when
/// older ones were passed over without a row each: how many, and from which cursor when there
/// were more than it counted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OlderNotRecorded {
    count: u64,
    /// More than `count` (the count stopped at `OLDER_COUNT_LIMIT`); they came after `since`.
    more: bool,
    since: i64,
}

const NOT_RECORDED_SUFFIX: &str = " older missed instants were not recorded";

impl OlderNotRecorded {
    /// What `due`, the instants after `since` a tick looked at, left unrecorded.
    fn of(due: &FireTimes, since: i64) -> OlderNotRecorded {
        OlderNotRecorded {
            count: due.older_dropped,
            more: due.older_uncounted,
            since,
        }
    }

    fn note(&self) -> String {
        if self.more {
            format!(
                "; more than {} older missed instants, since {}, were not recorded",
                self.count,
                from_epoch(self.since).to_rfc3339_opts(SecondsFormat::Secs, true)
            )
        } else {
            format!("; {}{NOT_RECORDED_SUFFIX}", self.count)
        }
    }

    /// The note at the end of a skip reason, if it has one (`since` is only known with `more`).
    fn parse(reason: &str) -> Option<OlderNotRecorded> {
        let (_, note) = reason.rsplit_once("; ")?;
        if let Some(count) = note.strip_suffix(NOT_RECORDED_SUFFIX) {
            return Some(OlderNotRecorded {
                count: count.parse().ok()?,
                more: false,
                since: i64::MIN,
            });
        }
        let rest = note
            .strip_prefix("more than ")?
            .strip_suffix(", were not recorded")?;
        let (count, since) = rest.split_once(" older missed instants, since ")?;
        Some(OlderNotRecorded {
            count: count.parse().ok()?,
            more: true,
            since: DateTime::parse_from_rfc3339(since).ok()?.timestamp(),
        })
    }
}

/// `schedule reanchor` moves schedule `name`'s cursor back to `through` and forgets the skipped
/// runs after it. The oldest of them (`first_after`) may be the one whose reason counts the
/// older instants its tick passed over without a row each, some of them at or before `through`:
/// once it is gone, nothing would tell of those. The skipped run that tells of them instead: at
/// the newest of them, its reason counting the older ones. None when `first_after` counts no
/// such instant, or all of them lie after `through` (they are decided again when they come).
pub fn passed_over_before(
    name: &str,
    timing: &Timing,
    through: i64,
    first_after: &RunAfterCursor,
) -> Option<NewRun> {
    if first_after.status != RunStatus::Skipped || first_after.scheduled_for <= through {
        return None;
    }
    let counted = OlderNotRecorded::parse(first_after.skip_reason.as_deref()?)?;
    let (newest, older) = if counted.more {
        // They are every instant since the cursor the note names.
        let due = timing.cron.fire_times_between(
            timing.tz,
            from_epoch(counted.since),
            from_epoch(through),
            1,
        );
        let newest = due.instants.first()?.timestamp();
        (newest, OlderNotRecorded::of(&due, counted.since))
    } else {
        // They are the `count` instants just before `first_after`: those after the cursor are
        // not lost, the others are.
        let after_cursor = timing.cron.fire_times_between(
            timing.tz,
            from_epoch(through),
            from_epoch(first_after.scheduled_for - 1),
            0,
        );
        if after_cursor.older_uncounted {
            return None;
        }
        let lost = counted.count.checked_sub(after_cursor.older_dropped)?;
        let newest = *timing.latest(i64::MIN, through, 1).first()?;
        let older = OlderNotRecorded {
            count: lost.checked_sub(1)?,
            more: false,
            since: i64::MIN,
        };
        (newest, older)
    };
    let mut reason = format!(
        "passed over by a tick whose clock was ahead (at {}), which kept no record of it; \
         recorded by schedule reanchor",
        from_epoch(first_after.created_at).to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    if older.count > 0 {
        reason.push_str(&older.note());
    }
    Some(NewRun::scheduled(name, newest, Some(reason)))
}

/// Whether `instant`, a fire instant of `timing` with no run of its own, is one of those a tick
/// passed over without a row each and counted instead in the reason of `first_after`, the
/// schedule's oldest run after it (the oldest its tick recorded, skipped: see
/// `INSTANTS_RECORDED_LIMIT`). They are the `count` fire instants just before that run, or,
/// when there were more than it counted, every one after the cursor its note names.
pub fn counted_as_passed_over(timing: &Timing, instant: i64, first_after: &RunAfterCursor) -> bool {
    // A run of an expression the schedule has since changed from counted that one's instants.
    if first_after.status != RunStatus::Skipped
        || first_after.scheduled_for <= instant
        || !timing.fires_at(first_after.scheduled_for)
    {
        return false;
    }
    let Some(counted) = first_after
        .skip_reason
        .as_deref()
        .and_then(OlderNotRecorded::parse)
    else {
        return false;
    };
    if counted.more {
        return instant > counted.since;
    }
    // Counted if no more than `count` fire instants lie from it up to the run.
    let from_it = timing.cron.fire_times_between(
        timing.tz,
        from_epoch(instant - 1),
        from_epoch(first_after.scheduled_for - 1),
        0,
    );
    !from_it.older_uncounted && from_it.older_dropped <= counted.count
}

/// Materialise one definition's due instants (a no-op when none are due, it is paused, or
/// another process moved its cursor first). `settle_due` uses it to settle the instants that came
/// due under a schedule's settings before a command changes them.
fn materialize_definition(
    store: &mut dyn Store,
    d: &Definition,
    now: Now,
    actor: &Actor,
) -> Result<usize> {
    if d.settings.paused || d.next_fire_at.is_none_or(|next| next > now.secs()) {
        return Ok(0);
    }
    let planner = Timings::default().of(d)?;
    let mut m = plan(d, &planner, now);
    Ok(store.materialize(m.cursor, now.secs(), actor, &mut m.plan)?)
}

/// What materialising `d` at `now` writes: its cursor move, and its runs by its catch-up and
/// overlap policies.
fn plan(d: &Definition, planner: &Planner, now: Now) -> Materialization {
    let planned = planner.plan(d.materialized_through, &d.settings, now);
    let cursor = CursorMove {
        definition_id: d.id,
        expected_through: d.materialized_through,
        expected_revision: d.revision,
        new_through: planned.new_through,
        next_fire_at: planned.next_fire_at,
    };
    let overlap = d.settings.overlap;
    let name = d.name.clone();
    let plan = Box::new(move |running: Option<i64>| {
        planned
            .instants
            .iter()
            .map(|(at, decision)| {
                let skip_reason = match (decision, running) {
                    (Decision::Skip(reason), _) => Some(reason.clone()),
                    (Decision::Run, Some(run_id)) if overlap == Overlap::Forbid => {
                        Some(Overlap::forbid_skip_reason(run_id))
                    }
                    (Decision::Run, _) => None,
                };
                NewRun::scheduled(&name, at.timestamp(), skip_reason)
            })
            .collect()
    });
    Materialization { cursor, plan }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).expect("time").timestamp()
    }

    #[test]
    fn the_note_of_older_instants_reads_back() {
        for note in [
            OlderNotRecorded {
                count: 440,
                more: false,
                since: i64::MIN,
            },
            OlderNotRecorded {
                count: 100_000,
                more: true,
                since: at("2030-01-01T00:00:00Z"),
            },
        ] {
            let reason = format!(
                "catch-up latest: superseded by 2030-01-06T00:00:00Z{}",
                note.note()
            );
            assert_eq!(OlderNotRecorded::parse(&reason), Some(note), "{reason}");
        }
        assert_eq!(
            OlderNotRecorded::parse("catch-up latest: superseded by 2030-01-06T00:00:00Z"),
            None
        );
        assert_eq!(OlderNotRecorded::parse("missed by 1m (grace 0s)"), None);
    }

    /// An every-5-minutes schedule whose tick at 2030-01-06T00:00:30Z counted the 440 instants
    /// since 2030-01-01T00:00:00Z before the oldest it recorded, 2030-01-02T12:45:00Z.
    fn counted_skip(status: RunStatus) -> RunAfterCursor {
        RunAfterCursor {
            id: 7,
            scheduled_for: at("2030-01-02T12:45:00Z"),
            status,
            skip_reason: Some(
                "catch-up latest: superseded by 2030-01-06T00:00:00Z; 440 older missed instants \
                 were not recorded"
                    .to_string(),
            ),
            created_at: at("2030-01-06T00:00:30Z"),
        }
    }

    #[test]
    fn the_counted_instants_before_the_cursor_get_a_record() {
        let timing = Timing::parse("*/5 * * * *", "UTC").expect("timing");
        let skip = counted_skip(RunStatus::Skipped);
        let run = passed_over_before("every5", &timing, at("2030-01-02T00:00:30Z"), &skip)
            .expect("a record");
        assert_eq!(run.scheduled_for, at("2030-01-02T00:00:00Z"));
        assert_eq!(run.idempotency_key, "every5@2030-01-02T00:00:00Z");
        let reason = run.skip_reason.expect("skipped");
        assert!(
            reason.starts_with(
                "passed over by a tick whose clock was ahead (at 2030-01-06T00:00:30Z)"
            ),
            "{reason}"
        );
        assert!(
            reason.ends_with("; 287 older missed instants were not recorded"),
            "{reason}"
        );
        // The oldest of them alone: no older ones to count.
        let run = passed_over_before("every5", &timing, at("2030-01-01T00:05:00Z"), &skip)
            .expect("a record");
        assert_eq!(run.scheduled_for, at("2030-01-01T00:05:00Z"));
        assert!(!run.skip_reason.expect("skipped").contains("older"));
        // Before the first of them: every one lies after the cursor and is decided again.
        let none = passed_over_before("every5", &timing, at("2030-01-01T00:04:00Z"), &skip);
        assert!(none.is_none(), "{none:?}");
        // A run, or a skip at or before the cursor, is not forgotten: it tells of them itself.
        let ran = counted_skip(RunStatus::Succeeded);
        assert!(passed_over_before("every5", &timing, at("2030-01-02T00:00:30Z"), &ran).is_none());
        assert!(passed_over_before("every5", &timing, at("2030-01-03T00:00:00Z"), &skip).is_none());
    }

    #[test]
    fn the_instants_a_skip_counted_are_told_as_passed_over() {
        let timing = Timing::parse("*/5 * * * *", "UTC").expect("timing");
        let skip = counted_skip(RunStatus::Skipped);
        let counted = |instant: &str| counted_as_passed_over(&timing, at(instant), &skip);
        // The 440 instants just before 2030-01-02T12:45:00Z: from 2030-01-01T00:05:00Z on.
        assert!(counted("2030-01-02T12:40:00Z"));
        assert!(counted("2030-01-01T00:05:00Z"));
        assert!(!counted("2030-01-01T00:00:00Z"), "the 441st before it");
        assert!(!counted("2030-01-02T12:45:00Z"), "the run's own instant");
        assert!(!counted("2030-01-02T12:50:00Z"), "after it");
        // Only a skip counts; and only of the expression that counted them.
        let ran = counted_skip(RunStatus::Succeeded);
        assert!(!counted_as_passed_over(
            &timing,
            at("2030-01-02T12:40:00Z"),
            &ran
        ));
        let hourly = Timing::parse("0 * * * *", "UTC").expect("timing");
        assert!(!counted_as_passed_over(
            &hourly,
            at("2030-01-02T12:00:00Z"),
            &skip
        ));
        // More than it counted: every instant since the cursor its note names.
        let mut more = skip.clone();
        more.skip_reason = Some(
            "catch-up latest: superseded by 2030-01-06T00:00:00Z; more than 100000 older missed \
             instants, since 2029-01-01T00:00:00Z, were not recorded"
                .to_string(),
        );
        assert!(counted_as_passed_over(
            &timing,
            at("2029-01-01T00:05:00Z"),
            &more
        ));
        assert!(!counted_as_passed_over(
            &timing,
            at("2029-01-01T00:00:00Z"),
            &more
        ));
        // A reason that counts nothing.
        let mut plain = skip;
        plain.skip_reason = Some("catch-up latest: superseded by 2030-01-06T00:00:00Z".into());
        assert!(!counted_as_passed_over(
            &timing,
            at("2030-01-02T12:40:00Z"),
            &plain
        ));
    }
}
