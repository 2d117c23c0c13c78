//! `runner why`: what happened to one instant of a schedule, and why. The decision, pure: the
//! command reads the facts (the schedule, the instants its runs were for, the runs of the
//! instants in question, the last tick, a running run) at one moment and hands them here with
//! `now`; this module finds the instant a question is about and names the cause. `cli/why.rs`
//! prints it.
//!
//! A schedule's instants are its current expression's since it was created and those its
//! recorded runs were materialised for: after `schedule edit --cron` or `--tz`, the runs of the
//! old expression are still what became of its instants then.
//!
//! The DST rules are the schedule's own (`schedule::resolve_local`, `CronSchedule::dst_rule`):
//! this module only asks where a wall-clock time lands, never re-derives it.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::model::{Definition, Overlap, RunStatus};
use crate::schedule::{resolve_local, LocalTime, Timing};
use crate::store::{RunAfterCursor, RunView, StoppingView};

/// How many of a schedule's latest instants `why` without `--at` looks through for one that did
/// not succeed.
pub const LOOK_BACK: usize = 1000;

/// The schedule's latest instants at or before `now`, newest first, at most `LOOK_BACK`: its
/// expression's since it was created, and those its latest schedule runs were materialised for
/// (`recorded`: at or before `now`, newest first, at most `LOOK_BACK`, as
/// `Store::recorded_instants` reads them; manual runs are no instant), which an expression or
/// zone it has changed from may have named. The first is its last fire time: never one from
/// before it existed.
///
/// Once a recorded run shows the expression changed, the current one's instants count only from
/// the last change of its cron or zone (`timing_since`): before it the old expression ruled (an
/// edit materialises every instant due under the old settings first, so each has its run), and
/// the new one's times then were never instants.
pub fn latest_instants(
    definition: &Definition,
    timing: &Timing,
    now: i64,
    recorded: &[i64],
) -> Vec<i64> {
    let changed = recorded.iter().any(|t| !timing.fires_at(*t));
    let since = match changed {
        true => timing_since(definition),
        false => definition.created_at,
    };
    let mut instants = timing.latest(since, now, LOOK_BACK);
    instants.extend_from_slice(recorded);
    instants.sort_unstable_by(|a, b| b.cmp(a));
    instants.dedup();
    instants.truncate(LOOK_BACK);
    instants
}

/// Since when the schedule's current cron and zone rule: their last change, or its creation.
pub fn timing_since(definition: &Definition) -> i64 {
    definition.timing_changed_at.max(definition.created_at)
}

/// When the schedule's cron or zone last changed, if that was at or after `t` and since it was
/// created: what happened at `t` is then judged by an expression it did not have at `t`, and
/// runner keeps no earlier one. A change in `t`'s own second may have come after it: it counts.
/// Other changes (a pause, a resume, a reanchor, a new command) leave its timing alone and say
/// nothing here.
pub fn timing_changed_since(definition: &Definition, t: i64) -> Option<i64> {
    let changed = definition.timing_changed_at;
    (changed > definition.created_at && changed >= t).then_some(changed)
}

/// When the schedule's cron or zone changed after the time that `cause` judged by the expression
/// it has now, if it did: for `not_in_cron`, the time asked (one that did not exist: the fire
/// time after it); for `passed_over`, the tick that counted the instant (`counted_in`, which
/// counted by the expression it had then). None for every other cause: a run tells what
/// happened whatever the expression, and the others are not judged across a change.
pub fn judged_across_change(
    definition: &Definition,
    located: Option<&Located>,
    cause: &Cause,
    counted_in: Option<&RunAfterCursor>,
) -> Option<i64> {
    let judged = match (cause.outcome().unwrap_or(cause), located) {
        (Cause::PassedOver { .. }, _) => counted_in?.created_at,
        (Cause::NotInCron, Some(Located::NotInCron { asked, after, .. })) => asked.or(*after)?,
        _ => return None,
    };
    timing_changed_since(definition, judged)
}

/// What `why` decides from, read at one moment.
pub struct Facts<'a> {
    pub definition: &'a Definition,
    pub timing: &'a Timing,
    pub now: i64,
    /// When the latest tick ran (None: no tick ever ran on this database).
    pub last_tick_at: Option<i64>,
    /// A run of this schedule that is running now.
    pub running_run_id: Option<i64>,
    /// A run of this schedule cancelled while running whose job is still being stopped (the
    /// earliest deadline, if several).
    pub stopping: Option<&'a StoppingView>,
}

/// A time asked about (`--at`): an instant, or a wall-clock time in the schedule's zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Instant(DateTime<Utc>),
    Local(NaiveDateTime),
}

/// Where a time asked about lands among the schedule's fire instants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// One of its fire instants: what happened to it is in the database.
    Fire(i64),
    /// Not a fire instant of the expression in its zone, yet the schedule has a run recorded
    /// for it: its expression or zone changed after that run was materialised, and the run
    /// tells what happened.
    Recorded(i64),
    /// Not a fire instant of the expression in its zone: no run could exist for it, unless one
    /// of an expression or zone since changed from (`or_recorded` makes that `Recorded`). `asked` is
    /// None for a wall-clock time that did not exist (spring forward). The nearest fire instants
    /// before and after it (None: none within the 401-year search horizon).
    NotInCron {
        asked: Option<i64>,
        before: Option<i64>,
        after: Option<i64>,
    },
    /// A wall-clock time the schedule names that did not exist (spring forward). A fixed-time
    /// job runs at the first instant after the gap instead; a wildcard job has no instant in the
    /// gap, and its first instant after the gap is the one whose fate is told (its run, or why
    /// there is none). `after` is that instant either way (None: none within the search horizon).
    Gap {
        local: NaiveDateTime,
        after: Option<i64>,
        wildcard: bool,
    },
    /// A wall-clock time the schedule names that happened twice (fall back). A fixed-time job
    /// fires in the first pass only; a wildcard job in both. `second_asked`: the question named
    /// the second pass (an offset was given).
    Repeated {
        local: NaiveDateTime,
        first: i64,
        second: i64,
        second_asked: bool,
        wildcard: bool,
    },
}

impl Located {
    /// The fire instant whose run tells what happened, if there is one.
    pub fn instant(&self) -> Option<i64> {
        match *self {
            Located::Fire(t) | Located::Recorded(t) => Some(t),
            Located::NotInCron { .. } => None,
            Located::Gap { after, .. } => after,
            Located::Repeated {
                first,
                second,
                second_asked,
                wildcard,
                ..
            } => Some(if wildcard && second_asked {
                second
            } else {
                first
            }),
        }
    }

    /// For a time the expression does not fire at, the instant it names: the schedule may have a
    /// run recorded there all the same, from before its expression or zone changed.
    pub fn off_cron(&self) -> Option<i64> {
        match *self {
            Located::NotInCron { asked, .. } => asked,
            _ => None,
        }
    }

    /// This, or `Recorded` when `recorded` (the schedule's runs at `off_cron`) holds a run of
    /// that instant: the database knows what became of it, whatever the expression says now.
    pub fn or_recorded(self, recorded: &[RunView]) -> Located {
        match self.off_cron() {
            Some(t) if recorded.iter().any(|r| r.scheduled_for == t) => Located::Recorded(t),
            _ => self,
        }
    }

    /// Where `instant`, one of `latest_instants`, lands: a fire instant of the expression, or
    /// one only a recorded run names.
    pub fn of_instant(timing: &Timing, instant: i64) -> Located {
        if timing.fires_at(instant) {
            Located::Fire(instant)
        } else {
            Located::Recorded(instant)
        }
    }
}

/// Where `at` lands for a schedule of `timing`.
pub fn locate(timing: &Timing, at: At) -> Located {
    let instant = match at {
        At::Instant(t) => t,
        At::Local(local) => {
            let named = timing.cron.matches_local(local);
            match resolve_local(timing.tz, local) {
                LocalTime::Single(t) => t,
                LocalTime::Repeated(first, second) if named => {
                    return Located::Repeated {
                        local,
                        first: first.timestamp(),
                        second: second.timestamp(),
                        second_asked: false,
                        wildcard: timing.cron.is_wildcard(),
                    }
                }
                LocalTime::Repeated(first, _) => first,
                LocalTime::Skipped { after } if named => {
                    let wildcard = timing.cron.is_wildcard();
                    let after = after.map(|t| t.timestamp());
                    return Located::Gap {
                        local,
                        // A fixed-time job runs at the gap's end itself; a wildcard job at its
                        // next fire time from there (the end itself for `*/30`, 03:15 for
                        // `15 * * * *`).
                        after: match wildcard {
                            true => after.and_then(|t| timing.next_after(t - 1)),
                            false => after,
                        },
                        wildcard,
                    };
                }
                // A skipped time the expression does not name: its neighbours are those of the
                // gap.
                LocalTime::Skipped { after } => {
                    let after = after.map(|t| t.timestamp());
                    return Located::NotInCron {
                        asked: None,
                        before: after
                            .and_then(|t| timing.latest(i64::MIN, t - 1, 1).first().copied()),
                        after: after.and_then(|t| timing.next_after(t - 1)),
                    };
                }
            }
        }
    };
    let epoch = instant.timestamp();
    if timing.fires_at(epoch) {
        return Located::Fire(epoch);
    }
    // An instant given with its offset can be the second pass of a repeated hour that a
    // fixed-time job fires in the first pass of only.
    let local = instant.with_timezone(&timing.tz).naive_local();
    if timing.cron.matches_local(local) {
        if let LocalTime::Repeated(first, second) = resolve_local(timing.tz, local) {
            return Located::Repeated {
                local,
                first: first.timestamp(),
                second: second.timestamp(),
                second_asked: instant == second,
                wildcard: timing.cron.is_wildcard(),
            };
        }
    }
    Located::NotInCron {
        asked: Some(epoch),
        before: timing.latest(i64::MIN, epoch - 1, 1).first().copied(),
        after: timing.next_after(epoch),
    }
}

/// What happened to an instant, or why nothing could: one distinct, named cause each. `name` is
/// the stable string `why --json` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Its run succeeded.
    Ran,
    /// Its run is running now.
    Running,
    /// Its run is pending: due (waiting for a tick to claim it) or not due yet.
    Pending,
    /// Its run failed an attempt and waits to retry.
    Retrying,
    /// Its run is pending, but its schedule is paused: no tick starts it until `schedule resume`.
    HeldByPause,
    /// Its run is due, but a run of its `forbid` schedule is running: it waits for that one.
    WaitingBehindForbid { running_run_id: i64 },
    /// Its run is due, but the job of a run of its `forbid` schedule cancelled while running is
    /// still being stopped: it waits until it is.
    WaitingBehindStop { stopping_run_id: i64 },
    /// Its run used up its attempts.
    Dead,
    /// Its run was cancelled.
    Cancelled,
    /// Recorded as skipped by the catch-up policy.
    SkippedCatchUp,
    /// Recorded as skipped by `overlap forbid`.
    SkippedOverlap,
    /// No tick has run since it came due, so no run exists for it yet.
    NoTickSince,
    /// A tick ran after it came due, yet none materialised it (that tick failed on this schedule,
    /// or its clock was behind).
    NotMaterialised,
    /// The schedule is paused: paused schedules materialise nothing, and resuming does not
    /// replay the paused period.
    Paused,
    /// It is still to come.
    NotYetDue,
    /// The expression does not fire then, and no run of the schedule is recorded then.
    NotInCron,
    /// The time asked did not exist (spring forward); what happened to the instant the job ran
    /// at instead (a wildcard job: its first instant after the gap), if it has one.
    DstGap { outcome: Option<Box<Cause>> },
    /// The time asked happened twice (fall back); what happened to the instant the rules chose.
    DstRepeated { outcome: Box<Cause> },
    /// Before the schedule existed.
    BeforeSchedule,
    /// The schedule's cursor passed it, but no run of it is kept: the schedule was paused then
    /// or changed since (neither replays what it passed over), or the run was pruned.
    NotRecorded,
    /// A tick passed it over without a row, among more missed instants than it records, and
    /// counted it in the reason of the oldest run it recorded (skipped): `run_id`.
    PassedOver { run_id: i64 },
    /// The schedule has not fired since it was created (no instant to tell of).
    NoInstantYet,
}

impl Cause {
    /// The stable name `why --json` carries.
    pub fn name(&self) -> &'static str {
        match self {
            Cause::Ran => "ran",
            Cause::Running => "running",
            Cause::Pending => "pending",
            Cause::Retrying => "retrying",
            Cause::HeldByPause => "held_by_pause",
            Cause::WaitingBehindForbid { .. } => "waiting_behind_forbid",
            Cause::WaitingBehindStop { .. } => "waiting_behind_stop",
            Cause::Dead => "dead",
            Cause::Cancelled => "cancelled",
            Cause::SkippedCatchUp => "skipped_catch_up",
            Cause::SkippedOverlap => "skipped_overlap",
            Cause::NoTickSince => "no_tick_since",
            Cause::NotMaterialised => "not_materialised",
            Cause::Paused => "paused",
            Cause::NotYetDue => "not_yet_due",
            Cause::NotInCron => "not_in_cron",
            Cause::DstGap { .. } => "dst_gap",
            Cause::DstRepeated { .. } => "dst_repeated",
            Cause::BeforeSchedule => "before_schedule",
            Cause::NotRecorded => "not_recorded",
            Cause::PassedOver { .. } => "passed_over",
            Cause::NoInstantYet => "no_instant_yet",
        }
    }

    /// For a DST cause, what happened to the instant the rules chose.
    pub fn outcome(&self) -> Option<&Cause> {
        match self {
            Cause::DstGap { outcome } => outcome.as_deref(),
            Cause::DstRepeated { outcome } => Some(outcome),
            _ => None,
        }
    }
}

/// Why `located` did or did not run, given the run of its instant (`Located::instant`), if the
/// database has one, and else the run whose reason counts that instant among those its tick
/// passed over (`counted_in`: see `tick::materialize::counted_as_passed_over`).
pub fn explain(
    facts: &Facts,
    located: &Located,
    run: Option<&RunView>,
    counted_in: Option<&RunAfterCursor>,
) -> Cause {
    let of_instant = |t: i64| outcome(facts, t, run, counted_in);
    match located {
        Located::Fire(t) | Located::Recorded(t) => of_instant(*t),
        Located::NotInCron { .. } => Cause::NotInCron,
        Located::Gap { .. } => Cause::DstGap {
            outcome: located.instant().map(|t| Box::new(of_instant(t))),
        },
        Located::Repeated { .. } => Cause::DstRepeated {
            outcome: Box::new(of_instant(located.instant().unwrap_or_default())),
        },
    }
}

/// What happened to fire instant `instant`, whose run (if any) is `run`.
fn outcome(
    facts: &Facts,
    instant: i64,
    run: Option<&RunView>,
    counted_in: Option<&RunAfterCursor>,
) -> Cause {
    if let Some(run) = run {
        return of_run(facts, run);
    }
    let d = facts.definition;
    if instant > d.materialized_through {
        if d.settings.paused {
            Cause::Paused
        } else if instant > facts.now {
            Cause::NotYetDue
        } else if facts.last_tick_at.is_some_and(|tick| tick >= instant) {
            Cause::NotMaterialised
        } else {
            Cause::NoTickSince
        }
    } else if instant <= d.created_at {
        // `schedule add` counts every instant up to its own time as handled.
        Cause::BeforeSchedule
    } else if let Some(counting) = counted_in {
        Cause::PassedOver {
            run_id: counting.id,
        }
    } else {
        Cause::NotRecorded
    }
}

fn of_run(facts: &Facts, run: &RunView) -> Cause {
    match run.status {
        RunStatus::Succeeded => Cause::Ran,
        RunStatus::Running => Cause::Running,
        RunStatus::Dead => Cause::Dead,
        RunStatus::Cancelled => Cause::Cancelled,
        RunStatus::Skipped
            if run
                .skip_reason
                .as_deref()
                .is_some_and(Overlap::is_overlap_skip) =>
        {
            Cause::SkippedOverlap
        }
        RunStatus::Skipped => Cause::SkippedCatchUp,
        // The claim rule: a paused schedule's pending runs are held.
        RunStatus::Pending if facts.definition.settings.paused => Cause::HeldByPause,
        RunStatus::Pending => {
            // The claim rule: a due run of a `forbid` schedule waits while another is running,
            // and while the job of one cancelled while running is being stopped.
            let held_back =
                facts.definition.settings.overlap == Overlap::Forbid && run.run_at <= facts.now;
            let running = facts.running_run_id.filter(|&id| id != run.id);
            let stopping = facts.stopping.map(|s| s.run.id).filter(|&id| id != run.id);
            match (running, stopping) {
                (Some(running_run_id), _) if held_back => {
                    Cause::WaitingBehindForbid { running_run_id }
                }
                (None, Some(stopping_run_id)) if held_back => {
                    Cause::WaitingBehindStop { stopping_run_id }
                }
                _ if run.attempt >= 1 => Cause::Retrying,
                _ => Cause::Pending,
            }
        }
    }
}

/// Which instant `why` without `--at` tells of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latest {
    /// The newest instant that did not produce a succeeded run.
    NotSucceeded(i64),
    /// Every instant looked at (`count` of them, the oldest `since`) that the database still
    /// knows of succeeded: the newest of them.
    AllSucceeded {
        newest: i64,
        count: usize,
        since: i64,
    },
    /// The schedule has no instant since it was created.
    None,
}

/// Of the schedule's latest instants (`instants`, newest first, as `latest_instants` lists them)
/// and their runs (by instant), the one `why` tells of.
///
/// An instant with no run is an answer when it is beyond the schedule's cursor (no tick, paused),
/// when it is the newest, or when runs of older instants are kept (so its own run was never
/// recorded). Older than every kept run, a missing run says nothing (pruned, or before history
/// was kept): the walk stops there.
pub fn pick_latest(
    definition: &Definition,
    instants: &[i64],
    runs: &HashMap<i64, RunView>,
) -> Latest {
    let oldest_kept = runs.keys().min().copied();
    let mut looked_at = 0;
    for &instant in instants {
        match runs.get(&instant) {
            Some(run) if run.status == RunStatus::Succeeded => {}
            Some(_) => return Latest::NotSucceeded(instant),
            None if instant > definition.materialized_through => {
                return Latest::NotSucceeded(instant)
            }
            None if looked_at == 0 || oldest_kept.is_none_or(|oldest| oldest < instant) => {
                return Latest::NotSucceeded(instant)
            }
            None => break,
        }
        looked_at += 1;
    }
    match instants.first() {
        Some(&newest) => Latest::AllSucceeded {
            newest,
            count: looked_at,
            since: instants[looked_at - 1],
        },
        None => Latest::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Settings;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test instant")
            .with_timezone(&Utc)
    }

    fn at(s: &str) -> i64 {
        utc(s).timestamp()
    }

    fn local(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M").expect("test local time")
    }

    fn definition(cron: &str, zone: &str, created: &str, through: &str) -> Definition {
        let mut settings = Settings::defaults(cron);
        settings.timezone = zone.to_string();
        settings.command = "true".to_string();
        Definition {
            materialized_through: at(through),
            created_at: at(created),
            updated_at: at(created),
            timing_changed_at: at(created),
            ..Definition::fixture("job", settings)
        }
    }

    fn run(id: i64, instant: &str, status: RunStatus) -> RunView {
        RunView {
            id,
            job: "job".to_string(),
            timezone: "UTC".to_string(),
            trigger: "schedule".to_string(),
            status,
            scheduled_for: at(instant),
            run_at: at(instant),
            attempt: 0,
            max_attempts: 3,
            command: "true".to_string(),
            workdir: None,
            idempotency_key: format!("job@{id}"),
            owner: None,
            lease_expires_at: None,
            heartbeat_at: None,
            error_code: None,
            error_detail: None,
            skip_reason: None,
            created_at: at(instant),
            started_at: None,
            finished_at: None,
            last_attempt_started_at: None,
            last_duration_ms: None,
            last_exit_code: None,
            stopping_by: None,
        }
    }

    struct Case {
        definition: Definition,
        timing: Timing,
        now: i64,
        last_tick_at: Option<i64>,
        running_run_id: Option<i64>,
        stopping: Option<StoppingView>,
    }

    impl Case {
        fn new(cron: &str, zone: &str, created: &str, through: &str, now: &str) -> Case {
            let definition = definition(cron, zone, created, through);
            let timing = definition.settings.timing().expect("timing");
            Case {
                definition,
                timing,
                now: at(now),
                last_tick_at: Some(at(through)),
                running_run_id: None,
                stopping: None,
            }
        }

        fn facts(&self) -> Facts<'_> {
            Facts {
                definition: &self.definition,
                timing: &self.timing,
                now: self.now,
                last_tick_at: self.last_tick_at,
                running_run_id: self.running_run_id,
                stopping: self.stopping.as_ref(),
            }
        }

        fn why_at(&self, asked: At, run: Option<&RunView>) -> Cause {
            let located = locate(&self.timing, asked);
            explain(&self.facts(), &located, run, None)
        }
    }

    /// A schedule of `cron` in New York from 1 March 2026, at noon UTC on 8 March, its cursor
    /// past that night's spring-forward gap (02:00 to 03:00 there, 07:00Z) at 08:00Z.
    fn spring_forward(cron: &str) -> Case {
        Case::new(
            cron,
            "America/New_York",
            "2026-03-01T00:00:00Z",
            "2026-03-08T08:00:00Z",
            "2026-03-08T12:00:00Z",
        )
    }

    /// A schedule of `cron` in New York from 1 October 2026, at noon UTC on 1 November, its
    /// cursor there: past that night's repeated hour (01:00 to 02:00 there, twice).
    fn fall_back(cron: &str) -> Case {
        Case::new(
            cron,
            "America/New_York",
            "2026-10-01T00:00:00Z",
            "2026-11-01T12:00:00Z",
            "2026-11-01T12:00:00Z",
        )
    }

    fn instant(s: &str) -> At {
        At::Instant(utc(s))
    }

    #[test]
    fn a_run_tells_what_happened() {
        let mut c = Case::new(
            "0 * * * *",
            "UTC",
            "2026-11-01T00:00:00Z",
            "2026-11-23T10:00:00Z",
            "2026-11-23T10:20:00Z",
        );
        let asked = instant("2026-11-23T10:00:00Z");
        let mut r = run(5, "2026-11-23T10:00:00Z", RunStatus::Succeeded);
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Ran);
        r.status = RunStatus::Dead;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Dead);
        r.status = RunStatus::Cancelled;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Cancelled);
        r.status = RunStatus::Running;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Running);
        r.status = RunStatus::Skipped;
        r.skip_reason = Some("catch-up latest: superseded by 2026-11-23T11:00:00Z".into());
        assert_eq!(c.why_at(asked, Some(&r)), Cause::SkippedCatchUp);
        r.skip_reason = Some(Overlap::forbid_skip_reason(4));
        assert_eq!(c.why_at(asked, Some(&r)), Cause::SkippedOverlap);
        r.status = RunStatus::Pending;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Pending);
        c.definition.settings.paused = true;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::HeldByPause);
        c.definition.settings.paused = false;
        r.attempt = 1;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Retrying);
    }

    #[test]
    fn a_due_run_of_a_forbid_schedule_waits_behind_the_running_one() {
        let mut c = Case::new(
            "0 * * * *",
            "UTC",
            "2026-11-01T00:00:00Z",
            "2026-11-23T10:00:00Z",
            "2026-11-23T10:20:00Z",
        );
        c.running_run_id = Some(4);
        let asked = instant("2026-11-23T10:00:00Z");
        let mut r = run(5, "2026-11-23T10:00:00Z", RunStatus::Pending);
        assert_eq!(
            c.why_at(asked, Some(&r)),
            Cause::WaitingBehindForbid { running_run_id: 4 }
        );
        // A retry that is not due yet waits for its time, not for the other run.
        r.attempt = 1;
        r.run_at = at("2026-11-23T10:30:00Z");
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Retrying);
        // With overlap allowed, nothing holds it back.
        c.definition.settings.overlap = Overlap::Allow;
        r.run_at = at("2026-11-23T10:00:00Z");
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Retrying);
    }

    #[test]
    fn a_due_run_of_a_forbid_schedule_waits_behind_a_cancelled_job_being_stopped() {
        let mut c = Case::new(
            "0 * * * *",
            "UTC",
            "2026-11-01T00:00:00Z",
            "2026-11-23T10:00:00Z",
            "2026-11-23T10:20:00Z",
        );
        c.stopping = Some(StoppingView {
            run: crate::store::RunBrief {
                id: 4,
                job: "job".to_string(),
                timezone: "UTC".to_string(),
                scheduled_for: at("2026-11-23T09:00:00Z"),
                run_at: at("2026-11-23T09:00:00Z"),
                attempt: 1,
                max_attempts: 3,
                error_code: Some("CANCELLED".to_string()),
                finished_at: Some(at("2026-11-23T10:10:00Z")),
            },
            attempt: Some(1),
            host: Some("vm".to_string()),
            runner_pid: Some(10),
            child_pid: Some(11),
            stopping_by: at("2026-11-23T10:21:10Z"),
        });
        let asked = instant("2026-11-23T10:00:00Z");
        let mut r = run(5, "2026-11-23T10:00:00Z", RunStatus::Pending);
        assert_eq!(
            c.why_at(asked, Some(&r)),
            Cause::WaitingBehindStop { stopping_run_id: 4 }
        );
        // A running run is named first.
        c.running_run_id = Some(6);
        assert_eq!(
            c.why_at(asked, Some(&r)),
            Cause::WaitingBehindForbid { running_run_id: 6 }
        );
        c.running_run_id = None;
        // Not due yet, or overlap allowed: nothing holds it back.
        r.run_at = at("2026-11-23T10:30:00Z");
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Pending);
        r.run_at = at("2026-11-23T10:00:00Z");
        c.definition.settings.overlap = Overlap::Allow;
        assert_eq!(c.why_at(asked, Some(&r)), Cause::Pending);
    }

    #[test]
    fn without_a_run_the_cursor_tick_and_pause_tell() {
        let mut c = Case::new(
            "0 * * * *",
            "UTC",
            "2026-11-01T00:00:00Z",
            "2026-11-23T09:00:00Z",
            "2026-11-23T10:20:00Z",
        );
        // Beyond the cursor, and the last tick was before it.
        assert_eq!(
            c.why_at(instant("2026-11-23T10:00:00Z"), None),
            Cause::NoTickSince
        );
        c.last_tick_at = None;
        assert_eq!(
            c.why_at(instant("2026-11-23T10:00:00Z"), None),
            Cause::NoTickSince
        );
        c.last_tick_at = Some(at("2026-11-23T10:01:00Z"));
        assert_eq!(
            c.why_at(instant("2026-11-23T10:00:00Z"), None),
            Cause::NotMaterialised
        );
        assert_eq!(
            c.why_at(instant("2026-11-23T11:00:00Z"), None),
            Cause::NotYetDue
        );
        c.definition.settings.paused = true;
        assert_eq!(
            c.why_at(instant("2026-11-23T10:00:00Z"), None),
            Cause::Paused
        );
        assert_eq!(
            c.why_at(instant("2026-11-23T11:00:00Z"), None),
            Cause::Paused
        );
        // Handled by the cursor, yet no run kept.
        assert_eq!(
            c.why_at(instant("2026-11-23T08:00:00Z"), None),
            Cause::NotRecorded
        );
        // Unless a tick counted it in a skipped run's reason, passing it over.
        let counting = RunAfterCursor {
            id: 12,
            scheduled_for: at("2026-11-23T09:00:00Z"),
            status: RunStatus::Skipped,
            skip_reason: Some("missed; 1 older missed instants were not recorded".into()),
            created_at: at("2026-11-23T09:00:05Z"),
        };
        let located = locate(&c.timing, instant("2026-11-23T08:00:00Z"));
        assert_eq!(
            explain(&c.facts(), &located, None, Some(&counting)),
            Cause::PassedOver { run_id: 12 }
        );
        // Before the schedule existed.
        assert_eq!(
            c.why_at(instant("2026-10-31T23:00:00Z"), None),
            Cause::BeforeSchedule
        );
    }

    #[test]
    fn a_time_the_expression_does_not_name_has_neighbours() {
        let c = Case::new(
            "30 2 * * *",
            "America/New_York",
            "2026-11-01T00:00:00Z",
            "2026-11-23T09:00:00Z",
            "2026-11-23T10:20:00Z",
        );
        let located = locate(&c.timing, At::Local(local("2026-11-23T10:30")));
        assert_eq!(
            located,
            Located::NotInCron {
                asked: Some(at("2026-11-23T15:30:00Z")),
                before: Some(at("2026-11-23T07:30:00Z")),
                after: Some(at("2026-11-24T07:30:00Z")),
            }
        );
        assert_eq!(located.instant(), None);
        assert_eq!(
            explain(&c.facts(), &located, None, None),
            Cause::NotInCron,
            "no run can exist for it"
        );
        assert_eq!(
            locate(&c.timing, At::Local(local("2026-11-23T02:30"))),
            Located::Fire(at("2026-11-23T07:30:00Z"))
        );
    }

    #[test]
    fn spring_forward_moves_a_fixed_time_job_and_tells_of_a_wildcard_ones_next_instant() {
        let c = spring_forward("30 2 * * *");
        let located = locate(&c.timing, At::Local(local("2026-03-08T02:30")));
        assert_eq!(
            located,
            Located::Gap {
                local: local("2026-03-08T02:30"),
                after: Some(at("2026-03-08T07:00:00Z")),
                wildcard: false,
            }
        );
        // 02:31 did not exist either, and the expression does not name it.
        assert_eq!(
            locate(&c.timing, At::Local(local("2026-03-08T02:31"))),
            Located::NotInCron {
                asked: None,
                before: Some(at("2026-03-07T07:30:00Z")),
                after: Some(at("2026-03-08T07:00:00Z")),
            }
        );
        let r = run(9, "2026-03-08T07:00:00Z", RunStatus::Succeeded);
        assert_eq!(
            explain(&c.facts(), &located, Some(&r), None),
            Cause::DstGap {
                outcome: Some(Box::new(Cause::Ran))
            }
        );
        let wildcard = spring_forward("*/30 * * * *");
        let located = locate(&wildcard.timing, At::Local(local("2026-03-08T02:30")));
        assert_eq!(
            located,
            Located::Gap {
                local: local("2026-03-08T02:30"),
                after: Some(at("2026-03-08T07:00:00Z")),
                wildcard: true,
            }
        );
        // Its first instant after the gap tells: 03:00 EDT, which the cursor passed (08:00Z)
        // with no run kept.
        assert_eq!(located.instant(), Some(at("2026-03-08T07:00:00Z")));
        assert_eq!(
            explain(&wildcard.facts(), &located, None, None),
            Cause::DstGap {
                outcome: Some(Box::new(Cause::NotRecorded))
            }
        );
        let r = run(4, "2026-03-08T07:00:00Z", RunStatus::Succeeded);
        assert_eq!(
            explain(&wildcard.facts(), &located, Some(&r), None),
            Cause::DstGap {
                outcome: Some(Box::new(Cause::Ran))
            }
        );
        // A wildcard job whose minute is not the gap's end: its next fire time after it.
        let quarter = spring_forward("15 * * * *");
        let located = locate(&quarter.timing, At::Local(local("2026-03-08T02:15")));
        assert_eq!(located.instant(), Some(at("2026-03-08T07:15:00Z")));
    }

    #[test]
    fn fall_back_runs_a_fixed_time_job_in_the_first_pass() {
        let c = fall_back("30 1 * * *");
        let (first, second) = (at("2026-11-01T05:30:00Z"), at("2026-11-01T06:30:00Z"));
        let naive = locate(&c.timing, At::Local(local("2026-11-01T01:30")));
        assert_eq!(
            naive,
            Located::Repeated {
                local: local("2026-11-01T01:30"),
                first,
                second,
                second_asked: false,
                wildcard: false,
            }
        );
        assert_eq!(naive.instant(), Some(first));
        // The second pass, named by its offset: not an instant, the first pass ran instead.
        let second_pass = locate(&c.timing, instant("2026-11-01T01:30:00-05:00"));
        assert_eq!(second_pass.instant(), Some(first));
        assert!(matches!(
            second_pass,
            Located::Repeated {
                second_asked: true,
                ..
            }
        ));
        let r = run(3, "2026-11-01T05:30:00Z", RunStatus::Dead);
        assert_eq!(
            explain(&c.facts(), &second_pass, Some(&r), None),
            Cause::DstRepeated {
                outcome: Box::new(Cause::Dead)
            }
        );
        // The first pass, named by its offset, is simply the instant.
        assert_eq!(
            locate(&c.timing, instant("2026-11-01T01:30:00-04:00")),
            Located::Fire(first)
        );
        // A wildcard job fires in both passes: the one asked is looked at.
        let wildcard = fall_back("30 * * * *");
        let naive = locate(&wildcard.timing, At::Local(local("2026-11-01T01:30")));
        assert_eq!(naive.instant(), Some(first));
        assert_eq!(
            locate(&wildcard.timing, instant("2026-11-01T01:30:00-05:00")),
            Located::Fire(second)
        );
    }

    #[test]
    fn the_latest_instant_that_did_not_succeed() {
        let d = definition(
            "0 * * * *",
            "UTC",
            "2026-11-01T00:00:00Z",
            "2026-11-23T09:00:00Z",
        );
        let hours = [
            at("2026-11-23T10:00:00Z"),
            at("2026-11-23T09:00:00Z"),
            at("2026-11-23T08:00:00Z"),
            at("2026-11-23T07:00:00Z"),
            at("2026-11-23T06:00:00Z"),
        ];
        let mut runs: HashMap<i64, RunView> = HashMap::new();
        for (id, (instant, status)) in [
            ("2026-11-23T09:00:00Z", RunStatus::Succeeded),
            ("2026-11-23T08:00:00Z", RunStatus::Dead),
            ("2026-11-23T07:00:00Z", RunStatus::Succeeded),
        ]
        .into_iter()
        .enumerate()
        {
            let r = run(id as i64 + 1, instant, status);
            runs.insert(r.scheduled_for, r);
        }
        // 10:00 is beyond the cursor: not materialised is an answer.
        assert_eq!(
            pick_latest(&d, &hours, &runs),
            Latest::NotSucceeded(hours[0])
        );
        // Without it, the dead 08:00 run, past the succeeded 09:00 one.
        assert_eq!(
            pick_latest(&d, &hours[1..], &runs),
            Latest::NotSucceeded(hours[2])
        );
        // 06:00 has no run and is older than every run kept: pruned, or before history; the
        // walk stops there, so all it saw succeeded.
        assert_eq!(
            pick_latest(&d, &hours[3..], &runs),
            Latest::AllSucceeded {
                newest: hours[3],
                count: 1,
                since: hours[3]
            }
        );
        // A gap among kept runs is an answer: never recorded.
        runs.remove(&hours[1]);
        assert_eq!(
            pick_latest(&d, &hours[1..], &runs),
            Latest::NotSucceeded(hours[1])
        );
        assert_eq!(pick_latest(&d, &[], &runs), Latest::None);
    }

    #[test]
    fn the_runs_of_an_expression_changed_since_are_instants_too() {
        // Created at 08:00 for 09:00 daily; its 09:00 run died; then edited to 10:00 daily.
        let mut c = Case::new(
            "0 10 * * *",
            "UTC",
            "2026-11-28T08:00:00Z",
            "2026-11-28T09:31:00Z",
            "2026-11-28T09:32:00Z",
        );
        // The expression's 10:00 of the day before is no instant of a schedule created after it.
        assert_eq!(
            latest_instants(&c.definition, &c.timing, c.now, &[]),
            Vec::<i64>::new()
        );
        let dead = run(1, "2026-11-28T09:00:00Z", RunStatus::Dead);
        let instants = latest_instants(&c.definition, &c.timing, c.now, &[dead.scheduled_for]);
        assert_eq!(instants, vec![dead.scheduled_for]);
        let runs = HashMap::from([(dead.scheduled_for, dead.clone())]);
        assert_eq!(
            pick_latest(&c.definition, &instants, &runs),
            Latest::NotSucceeded(dead.scheduled_for)
        );
        let located = Located::of_instant(&c.timing, dead.scheduled_for);
        assert_eq!(located, Located::Recorded(dead.scheduled_for));
        assert_eq!(
            explain(&c.facts(), &located, Some(&dead), None),
            Cause::Dead
        );
        // Asked about, the instant is the recorded run's, not a time the expression skips.
        let asked = locate(&c.timing, instant("2026-11-28T09:00:00Z"));
        assert_eq!(asked.off_cron(), Some(dead.scheduled_for));
        assert_eq!(
            asked.clone().or_recorded(std::slice::from_ref(&dead)),
            Located::Recorded(dead.scheduled_for)
        );
        assert!(matches!(asked.or_recorded(&[]), Located::NotInCron { .. }));
        // Edited after the new expression's time that day (11:00, not 09:31): its 10:00 was
        // never an instant, and the dead run stays the latest.
        let mut late = c.definition.clone();
        late.timing_changed_at = at("2026-11-28T11:00:00Z");
        late.updated_at = late.timing_changed_at;
        assert_eq!(
            latest_instants(
                &late,
                &c.timing,
                at("2026-11-28T11:05:00Z"),
                &[dead.scheduled_for]
            ),
            vec![dead.scheduled_for]
        );
        // Its instants since: the expression's and the run's, newest first.
        c.definition.materialized_through = at("2026-11-29T10:00:00Z");
        let later = latest_instants(
            &c.definition,
            &c.timing,
            at("2026-11-29T10:30:00Z"),
            &[dead.scheduled_for],
        );
        assert_eq!(
            later,
            vec![
                at("2026-11-29T10:00:00Z"),
                at("2026-11-28T10:00:00Z"),
                at("2026-11-28T09:00:00Z"),
            ]
        );
        // Paused since (10:20), which changed its settings but not its timing: its instants
        // still count from the edit at 09:31 the day before, not from the pause.
        c.definition.timing_changed_at = at("2026-11-28T09:31:00Z");
        c.definition.updated_at = at("2026-11-29T10:20:00Z");
        c.definition.settings.paused = true;
        assert_eq!(
            latest_instants(
                &c.definition,
                &c.timing,
                at("2026-11-29T10:30:00Z"),
                &[dead.scheduled_for]
            ),
            later
        );
    }

    #[test]
    fn only_a_change_of_timing_after_the_time_judged_is_told() {
        let mut c = Case::new(
            "0 * * * *",
            "UTC",
            "2026-11-01T00:00:00Z",
            "2026-11-23T10:00:00Z",
            "2026-11-23T11:00:00Z",
        );
        let asked = locate(&c.timing, instant("2026-11-23T09:30:00Z"));
        let later = locate(&c.timing, instant("2026-11-23T10:30:00Z"));
        let counting = |created: &str| RunAfterCursor {
            id: 12,
            scheduled_for: at("2026-11-23T10:00:00Z"),
            status: RunStatus::Skipped,
            skip_reason: Some("missed; 3 older missed instants were not recorded".into()),
            created_at: at(created),
        };
        let passed_over = Cause::PassedOver { run_id: 12 };
        let across = |c: &Case, located: &Located, cause: &Cause, counted_in| {
            judged_across_change(&c.definition, Some(located), cause, counted_in)
        };
        // Never changed since created, however often its other settings changed (a pause, a
        // resume, a new command: `updated_at`).
        c.definition.updated_at = at("2026-11-23T10:50:00Z");
        assert_eq!(
            timing_changed_since(&c.definition, at("2026-11-02T00:00:00Z")),
            None
        );
        assert_eq!(across(&c, &asked, &Cause::NotInCron, None), None);
        let before_change = counting("2026-11-23T10:00:05Z");
        assert_eq!(across(&c, &asked, &passed_over, Some(&before_change)), None);
        // Its cron changed at 10:10: after the time asked and the counting tick, not after what
        // came later. The change's own second counts.
        let change = at("2026-11-23T10:10:00Z");
        c.definition.timing_changed_at = change;
        assert_eq!(across(&c, &asked, &Cause::NotInCron, None), Some(change));
        assert_eq!(across(&c, &later, &Cause::NotInCron, None), None);
        assert_eq!(
            across(&c, &asked, &passed_over, Some(&before_change)),
            Some(change)
        );
        let same_second = counting("2026-11-23T10:10:00Z");
        assert_eq!(
            across(&c, &asked, &passed_over, Some(&same_second)),
            Some(change)
        );
        let after_change = counting("2026-11-23T10:10:01Z");
        assert_eq!(across(&c, &asked, &passed_over, Some(&after_change)), None);
        // A cause a run tells of is not judged by the expression.
        assert_eq!(across(&c, &asked, &Cause::Ran, Some(&before_change)), None);
        // Within a DST cause, its outcome is what is judged.
        let gap_outcome = Cause::DstGap {
            outcome: Some(Box::new(passed_over.clone())),
        };
        assert_eq!(
            across(&c, &asked, &gap_outcome, Some(&before_change)),
            Some(change)
        );
        // A value from before the column (0) or the creation itself is no change.
        c.definition.timing_changed_at = 0;
        assert_eq!(across(&c, &asked, &Cause::NotInCron, None), None);
        assert_eq!(timing_since(&c.definition), c.definition.created_at);
        c.definition.timing_changed_at = c.definition.created_at;
        assert_eq!(
            timing_changed_since(&c.definition, at("2026-10-01T00:00:00Z")),
            None
        );
    }

    #[test]
    fn a_time_that_did_not_exist_is_judged_at_the_fire_time_after_it() {
        let mut c = spring_forward("30 2 * * *");
        // 02:31 did not exist (the clocks went forward at 02:00): its fire time after is
        // 03:00 EDT (07:00Z).
        let located = locate(&c.timing, At::Local(local("2026-03-08T02:31")));
        assert!(matches!(located, Located::NotInCron { asked: None, .. }));
        c.definition.timing_changed_at = at("2026-03-08T07:00:00Z");
        assert_eq!(
            judged_across_change(&c.definition, Some(&located), &Cause::NotInCron, None),
            Some(at("2026-03-08T07:00:00Z"))
        );
        c.definition.timing_changed_at = at("2026-03-08T06:59:59Z");
        assert_eq!(
            judged_across_change(&c.definition, Some(&located), &Cause::NotInCron, None),
            None
        );
    }
}
