//! `runner why NAME [--at TIME]`: why an instant of a schedule did or did not run. This file
//! reads the facts through the store and prints; `crate::why` decides the cause.

use std::collections::HashMap;

use anyhow::Result;
use chrono::{DateTime, Datelike, NaiveTime, Timelike, Utc};
use serde::Serialize;

use super::history::RunRow;
use super::{emit, emit_json, find_definition, Ctx, SCHEDULE_NAME};
use crate::display::{age, count, duration_of_secs, escape_line, local_time, UtcTime};
use crate::exit::Failure;
use crate::model::{Definition, Overlap, RunStatus};
use crate::store::{OpenMode, RunAfterCursor, RunFilter, RunView, StoppingView};
use crate::tick::materialize::{
    counted_as_passed_over, with_ended_pause_resumed, INSTANTS_RECORDED_LIMIT,
};
use crate::time_input::{parse_time_or, within_fire_times, TimeInput};
use crate::tz::Tz;
use crate::why::{
    explain, judged_across_change, latest_instants, locate, pick_latest, timing_changed_since,
    timing_since, At, Cause, Facts, Latest, Located, LOOK_BACK,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
    /// The time to explain [default: the latest instant that did not produce a succeeded run].
    /// RFC 3339 with an offset (2026-11-23T10:30:00Z, 2026-11-23T10:30:00-05:00), or a
    /// wall-clock time in the SCHEDULE's zone (not UTC): 2026-11-23T10:30, "2026-11-23 10:30",
    /// 2026-11-23 (midnight) or 10:30 (today there), unless a zone follows ("10:30
    /// Europe/Paris"). See `runner help times`.
    #[arg(long, value_name = "TIME", value_parser = parse_at)]
    pub at: Option<TimeInput>,
    /// Machine-readable output: one object, with a stable `cause`.
    #[arg(long)]
    pub json: bool,
}

/// Parse `--at`: `time_input`'s forms, with its own message, since a wall-clock time without a
/// zone is in the schedule's zone rather than UTC.
fn parse_at(value: &str) -> Result<TimeInput, String> {
    parse_time_or(value, || {
        format!(
            "{:?} is not a time; use RFC 3339 (2026-11-23T10:30:00Z), or a time in the \
             schedule's zone: 2026-11-23T10:30, \"2026-11-23 10:30\", 2026-11-23 or 10:30 (today), \
             or in another zone: \"10:30 Europe/Paris\" (see `runner help times`)",
            value.trim()
        )
    })
}

/// What `--at` names for a schedule in `tz`, `now` giving "today" (the schedule zone's). A
/// wall-clock time in the schedule's zone stays one, unresolved: in a daylight-saving gap or a
/// repeated hour it is a question `why` answers. In another zone it is the instant it names
/// there (the first of a repeated hour; a gap there is an error).
///
/// A time after the last year fire times are computed in (in the schedule's zone) is refused:
/// any answer about it ("does not fire then") would be false.
fn at_of(at: &TimeInput, tz: Tz, now: DateTime<Utc>) -> Result<At, String> {
    let asked = match at.wall_clock(tz, now) {
        Some((local, zone)) if zone == tz => At::Local(local),
        _ => At::Instant(at.resolve(tz, now)?),
    };
    let local = match asked {
        At::Local(local) => local,
        At::Instant(t) => t.with_timezone(&tz).naive_local(),
    };
    let shown = format!("{} in {tz}", local.format("%Y-%m-%d %H:%M"));
    within_fire_times(shown, local.year())?;
    Ok(asked)
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let mut definition = find_definition(store.as_ref(), &args.name)?;
    let timing = definition.settings.timing()?;
    let now = ctx.clock.read();
    // A `pause --for` that has ended is the next tick's to resume, from its end: judged so.
    with_ended_pause_resumed(&mut definition, now.secs())?;
    let running_run_id = store
        .history(&RunFilter {
            definition_id: Some(definition.id),
            status: Some(RunStatus::Running),
            since: None,
            limit: 1,
        })?
        .first()
        .map(|r| r.id);
    let stopping = store.stopping_runs(definition.id)?;
    let facts = Facts {
        definition: &definition,
        timing: &timing,
        now: now.secs(),
        last_tick_at: store.last_tick_at()?,
        running_run_id,
        stopping: stopping.first(),
    };
    // The instants its runs were materialised for are its instants too, of whatever expression
    // it had then: the latest, read by instant (manual runs, however many, are not read).
    let recorded = store.recorded_instants(definition.id, now.secs(), LOOK_BACK)?;
    let instants = latest_instants(&definition, &timing, now.secs(), &recorded);
    let (question, located, mut runs) = match args.at {
        Some(at) => {
            let asked = at_of(&at, timing.tz, now.time())
                .map_err(|e| Failure::usage(format!("--at: {e}")))?;
            let located = locate(&timing, asked);
            // Looked up by instant, however old: `recorded` holds only the latest.
            let there = match located.off_cron() {
                Some(t) => store.runs_at_instants(definition.id, &[t])?,
                None => Vec::new(),
            };
            (Question::At(at), Some(located.or_recorded(&there)), None)
        }
        None => {
            // The runs of the instants looked through, in one query.
            let runs = by_instant(store.runs_at_instants(definition.id, &instants)?);
            let latest = pick_latest(&definition, &instants, &runs);
            let located = match latest {
                Latest::NotSucceeded(t) | Latest::AllSucceeded { newest: t, .. } => {
                    Some(Located::of_instant(&timing, t))
                }
                Latest::None => None,
            };
            (Question::Latest(latest), located, Some(runs))
        }
    };
    let instant = located.as_ref().and_then(Located::instant);
    let run = match (instant, runs.as_mut()) {
        // One of the instants looked through: its run, if it has one, is read already.
        (Some(t), Some(runs)) => runs.remove(&t),
        (Some(t), None) => store
            .runs_at_instants(definition.id, &[t])?
            .into_iter()
            .next(),
        (None, _) => None,
    };
    // An instant ticks passed with no run: a tick may have passed it over among more missed
    // instants than it records, and counted it in the reason of the next run it recorded.
    let counted_in = match instant {
        Some(t) if run.is_none() && t <= definition.materialized_through => store
            .first_run_after(definition.id, t)?
            .filter(|after| counted_as_passed_over(&timing, t, after)),
        _ => None,
    };
    let cause = match &located {
        Some(located) => explain(&facts, located, run.as_ref(), counted_in.as_ref()),
        None => Cause::NoInstantYet,
    };
    let last_fire = instants.first().copied();
    let open_hosts = open_attempt_hosts(&stopping);
    let why = Why::of(
        &facts,
        &question,
        located.as_ref(),
        &cause,
        (run.as_ref(), counted_in.as_ref(), &open_hosts),
        last_fire,
    );
    if args.json {
        return emit_json(&why);
    }
    emit(&render(&why))
}

/// The hosts of the open attempts of the first of `stopping` (the run `Facts` names), its newest
/// attempt's first, each once: a run another host recovered and retried can have two attempts
/// open, the stalled host's and the retry's, and the wait ends when both jobs are stopped.
fn open_attempt_hosts(stopping: &[StoppingView]) -> Vec<&str> {
    let Some(first) = stopping.first() else {
        return Vec::new();
    };
    let mut hosts = Vec::new();
    // One view per open attempt, a run's together (`Store::stopping_runs`).
    for view in stopping.iter().filter(|s| s.run.id == first.run.id) {
        if let Some(host) = view.host.as_deref().filter(|h| !hosts.contains(h)) {
            hosts.push(host);
        }
    }
    hosts
}

fn by_instant(runs: Vec<RunView>) -> HashMap<i64, RunView> {
    runs.into_iter().map(|r| (r.scheduled_for, r)).collect()
}

/// What was asked: a time, or the latest instant that did not succeed (and which that was).
enum Question {
    At(TimeInput),
    Latest(Latest),
}

/// The answer as it prints and as `--json` carries it.
#[derive(Debug, Serialize)]
struct Why<'a> {
    schedule: &'a str,
    cron: &'a str,
    timezone: &'a str,
    paused: bool,
    overlap: Overlap,
    /// The schedule's latest instant at or before now (since it was created: its expression's,
    /// or a recorded run's of an expression it has changed from), and its next fire time after
    /// now.
    last_fire_at: Option<UtcTime>,
    last_fire_at_epoch: Option<i64>,
    next_fire_at: Option<UtcTime>,
    next_fire_at_epoch: Option<i64>,
    /// The clock's reading the answer is for.
    now: UtcTime,
    now_epoch: i64,
    /// When the latest tick ran (null: never).
    last_tick_at: Option<UtcTime>,
    last_tick_at_epoch: Option<i64>,
    /// `--at` resolved to an instant (null without --at, or for a wall-clock time that did not
    /// exist); the latest instant otherwise is `instant`.
    asked: Option<UtcTime>,
    asked_epoch: Option<i64>,
    /// The fire instant whose fate is told (null when there is none).
    instant: Option<UtcTime>,
    instant_epoch: Option<i64>,
    /// Why: ran, running, pending, retrying, waiting_behind_forbid, waiting_behind_stop, dead,
    /// cancelled,
    /// skipped_catch_up, skipped_overlap, no_tick_since, not_materialised, paused, not_yet_due,
    /// not_in_cron, dst_gap, dst_repeated, before_schedule, not_recorded, passed_over,
    /// no_instant_yet.
    cause: &'static str,
    /// For dst_gap and dst_repeated: the cause for the instant the DST rule chose (for a
    /// wildcard job in a gap, which has no instant there: its first instant after the gap).
    outcome: Option<&'static str>,
    /// The run of `instant`, as `history --json` lists it.
    run: Option<RunRow<'a>>,
    /// The running run a due run of a forbid schedule waits for.
    running_run_id: Option<i64>,
    /// For passed_over: the skipped run whose reason counts the instant.
    counted_in_run_id: Option<i64>,
    /// For waiting_behind_stop: the cancelled run whose job a due run of a forbid schedule
    /// waits to see stopped.
    stopping: Option<Stopping<'a>>,
    /// For not_in_cron and passed_over: when the schedule's cron or zone changed, when that was
    /// after the time asked (not_in_cron) or the tick that counted the instant (passed_over),
    /// which are judged by the expression it has now, not the one it had then (null otherwise).
    timing_changed_at: Option<UtcTime>,
    timing_changed_at_epoch: Option<i64>,
    /// For not_in_cron: the nearest fire times before and after the time asked.
    nearest_before: Option<UtcTime>,
    nearest_before_epoch: Option<i64>,
    nearest_after: Option<UtcTime>,
    nearest_after_epoch: Option<i64>,
    /// The daylight-saving rule that placed `instant`, if one did.
    dst: Option<Dst>,
    /// What happened, in words: the lines the text output prints.
    explanation: Vec<String>,
    /// Commands that tell more.
    hints: Vec<String>,
}

/// A run cancelled while running whose job is still being stopped, and where.
#[derive(Debug, Serialize)]
struct Stopping<'a> {
    run_id: i64,
    /// Its latest open attempt's host (null once every attempt is closed or gone).
    host: Option<&'a str>,
    /// The hosts of all its open attempts, the latest's first: two when another host recovered
    /// and retried the run, leaving the stalled host's attempt open.
    open_attempt_hosts: Vec<&'a str>,
    /// By when the tick holding it must have stopped the job; after that, the next tick on its
    /// host stops it.
    stopping_by: UtcTime,
    stopping_by_epoch: i64,
}

#[derive(Debug, Serialize)]
struct Dst {
    rule: &'static str,
    note: String,
}

impl<'a> Why<'a> {
    fn of(
        facts: &Facts<'a>,
        question: &Question,
        located: Option<&Located>,
        cause: &Cause,
        (run, counted_in, open_hosts): (Option<&'a RunView>, Option<&RunAfterCursor>, &[&'a str]),
        last_fire: Option<i64>,
    ) -> Why<'a> {
        let d = facts.definition;
        let timing = facts.timing;
        let instant = located.and_then(Located::instant);
        let asked = match located {
            Some(Located::NotInCron { asked, .. }) => *asked,
            Some(Located::Repeated {
                first,
                second,
                second_asked,
                ..
            }) => Some(if *second_asked { *second } else { *first }),
            Some(Located::Fire(t) | Located::Recorded(t))
                if matches!(question, Question::At(_)) =>
            {
                Some(*t)
            }
            _ => None,
        };
        let (nearest_before, nearest_after) = match located {
            Some(Located::NotInCron { before, after, .. }) => (*before, *after),
            _ => (None, None),
        };
        let next_fire = timing.next_after(d.handled_through(facts.now));
        let timing_changed = judged_across_change(d, located, cause, counted_in);
        let text = Text {
            facts,
            tz: timing.tz,
            counted_in,
            timing_changed,
            open_hosts,
        };
        let changed = matches!(located, Some(Located::Recorded(_)));
        // The rule of an expression the schedule has changed from is not known: only the
        // current one's is told, of its own instants.
        let dst = instant
            .filter(|_| !changed)
            .and_then(|t| timing.cron.dst_rule(timing.tz, crate::clock::from_epoch(t)))
            .map(|rule| Dst {
                rule: rule.as_str(),
                note: rule.note(),
            });
        let mut explanation = text.question(question, located);
        if changed {
            explanation.push(text.changed());
        }
        // A DST cause tells its rule in full; otherwise a note on the rule that placed it.
        if let Some(dst) = dst.as_ref().filter(|_| cause.outcome().is_none()) {
            explanation.push(format!("Note: {}.", dst.note));
        }
        let mut hints = Vec::new();
        text.cause(cause, located, instant, run, &mut explanation, &mut hints);
        Why {
            schedule: &d.name,
            cron: &d.settings.cron,
            timezone: &d.settings.timezone,
            paused: d.settings.paused,
            overlap: d.settings.overlap,
            last_fire_at: last_fire.map(UtcTime),
            last_fire_at_epoch: last_fire,
            next_fire_at: next_fire.map(UtcTime),
            next_fire_at_epoch: next_fire,
            now: UtcTime(facts.now),
            now_epoch: facts.now,
            last_tick_at: facts.last_tick_at.map(UtcTime),
            last_tick_at_epoch: facts.last_tick_at,
            asked: asked.map(UtcTime),
            asked_epoch: asked,
            instant: instant.map(UtcTime),
            instant_epoch: instant,
            cause: cause.name(),
            outcome: cause.outcome().map(Cause::name),
            run: run.map(|r| RunRow::of(r, facts.now)),
            running_run_id: match cause.outcome().unwrap_or(cause) {
                Cause::WaitingBehindForbid { running_run_id } => Some(*running_run_id),
                _ => None,
            },
            counted_in_run_id: match cause.outcome().unwrap_or(cause) {
                Cause::PassedOver { run_id } => Some(*run_id),
                _ => None,
            },
            stopping: match cause.outcome().unwrap_or(cause) {
                Cause::WaitingBehindStop { .. } => facts.stopping.map(|s| Stopping {
                    run_id: s.run.id,
                    host: s.host.as_deref(),
                    open_attempt_hosts: open_hosts.to_vec(),
                    stopping_by: UtcTime(s.stopping_by),
                    stopping_by_epoch: s.stopping_by,
                }),
                _ => None,
            },
            timing_changed_at: timing_changed.map(UtcTime),
            timing_changed_at_epoch: timing_changed,
            nearest_before: nearest_before.map(UtcTime),
            nearest_before_epoch: nearest_before,
            nearest_after: nearest_after.map(UtcTime),
            nearest_after_epoch: nearest_after,
            dst,
            explanation,
            hints,
        }
    }
}

/// The words of an answer, times in the schedule's zone.
struct Text<'f, 'a> {
    facts: &'f Facts<'a>,
    tz: Tz,
    /// The skipped run whose reason counts the instant told of, if a tick passed it over.
    counted_in: Option<&'f RunAfterCursor>,
    /// When the schedule's cron or zone changed after what the cause judges by the expression it
    /// has now (`judged_across_change`).
    timing_changed: Option<i64>,
    /// The hosts of the open attempts of the cancelled run a due run waits for.
    open_hosts: &'f [&'a str],
}

impl Text<'_, '_> {
    fn at(&self, epoch: i64) -> String {
        local_time(epoch, self.tz)
    }

    fn name(&self) -> String {
        escape_line(&self.facts.definition.name)
    }

    /// The first line: which instant this is about.
    fn question(&self, question: &Question, located: Option<&Located>) -> Vec<String> {
        let line = match (question, located) {
            (Question::Latest(Latest::NotSucceeded(t)), _) => {
                format!("{}: the latest instant that did not succeed.", self.at(*t))
            }
            (
                Question::Latest(Latest::AllSucceeded {
                    newest,
                    count,
                    since,
                }),
                _,
            ) => format!(
                "{}: the latest instant. Every instant runner has a record of, {count} since {}, \
                 succeeded.",
                self.at(*newest),
                self.at(*since)
            ),
            (Question::Latest(Latest::None), _) => return Vec::new(),
            (Question::At(at), located) => {
                let resolved = match located {
                    Some(Located::Fire(t) | Located::Recorded(t)) => Some(*t),
                    Some(Located::NotInCron { asked, .. }) => *asked,
                    _ => None,
                };
                let given = match *at {
                    TimeInput::Local {
                        date: Some(date),
                        time,
                        zone,
                    } => format!(
                        "{} {} in {}",
                        date.format("%Y-%m-%d"),
                        clock_time(time),
                        zone.unwrap_or(self.tz)
                    ),
                    TimeInput::Local {
                        date: None,
                        time,
                        zone,
                    } => format!("{} today in {}", clock_time(time), zone.unwrap_or(self.tz)),
                    // An instant names itself, whatever it locates to (a fire instant, none,
                    // or one pass of a repeated hour).
                    TimeInput::Instant(t) => self.at(t.timestamp()),
                    TimeInput::Ago(_) => resolved.map(|t| self.at(t)).unwrap_or_default(),
                };
                match (resolved, located) {
                    (Some(_), _) if matches!(at, TimeInput::Instant(_)) => {
                        format!("Asked about {given}.")
                    }
                    (Some(t), _) => format!("Asked about {given} ({}).", self.at(t)),
                    (None, Some(Located::NotInCron { .. })) => format!(
                        "Asked about {given}, a time that did not exist there (the clocks went \
                         forward)."
                    ),
                    (None, _) => format!("Asked about {given}."),
                }
            }
        };
        vec![line]
    }

    /// That the instant told of is a recorded run's the expression no longer names.
    fn changed(&self) -> String {
        let d = self.facts.definition;
        format!(
            "Note: `{}` in {} does not fire then: the schedule's cron or zone changed after this run \
             was recorded (last at {}).",
            escape_line(&d.settings.cron),
            self.tz,
            self.at(timing_since(d))
        )
    }

    /// The cause in words, and the commands that tell more.
    fn cause(
        &self,
        cause: &Cause,
        located: Option<&Located>,
        instant: Option<i64>,
        run: Option<&RunView>,
        lines: &mut Vec<String>,
        hints: &mut Vec<String>,
    ) {
        let facts = self.facts;
        let d = facts.definition;
        match cause {
            Cause::DstGap { outcome } => {
                if let Some(&Located::Gap {
                    local,
                    after,
                    wildcard,
                }) = located
                {
                    let skipped = format!(
                        "{} did not exist on {} in {} (the clocks went forward).",
                        local.format("%H:%M"),
                        local.format("%Y-%m-%d"),
                        self.tz
                    );
                    let at = |t: Option<i64>| t.map_or_else(|| "none".to_string(), |t| self.at(t));
                    lines.push(match wildcard {
                        false => format!(
                            "Daylight saving gap: {skipped} A fixed-time job runs once, at the \
                             first valid time after the gap: {}.",
                            at(after)
                        ),
                        // What became of that instant follows, as for a fixed-time job's.
                        true => format!(
                            "Daylight saving gap: {skipped} A wildcard job has no instants in \
                             the skipped time; its first instant after the gap is {}.",
                            at(after)
                        ),
                    });
                }
                if let (Some(outcome), Some(t)) = (outcome, instant) {
                    self.outcome(outcome, t, run, lines, hints);
                }
            }
            Cause::DstRepeated { outcome } => {
                if let Some(&Located::Repeated {
                    local,
                    first,
                    second,
                    second_asked,
                    wildcard,
                }) = located
                {
                    let twice = format!(
                        "{} happened twice on {} in {} ({}, then {}).",
                        local.format("%H:%M"),
                        local.format("%Y-%m-%d"),
                        self.tz,
                        self.at(first),
                        self.at(second)
                    );
                    let rule = if wildcard {
                        format!(
                            "A wildcard job runs in both passes; this is the {} one.",
                            if second_asked { "second" } else { "first" }
                        )
                    } else if second_asked {
                        "A fixed-time job runs once, in the first pass only; the second is not \
                         an instant of it."
                            .to_string()
                    } else {
                        "A fixed-time job runs once, in the first pass.".to_string()
                    };
                    lines.push(format!("Daylight saving, repeated hour: {twice} {rule}"));
                }
                if let Some(t) = instant {
                    self.outcome(outcome, t, run, lines, hints);
                }
            }
            Cause::NotInCron => {
                let (before, after) = match located {
                    Some(Located::NotInCron { before, after, .. }) => (*before, *after),
                    _ => (None, None),
                };
                let nearest = |t: Option<i64>| t.map_or_else(|| "none".to_string(), |t| self.at(t));
                lines.push(format!(
                    "Not an instant of {}: `{}` in {} does not fire then. Nearest instants: \
                     before {}, after {}.",
                    self.name(),
                    escape_line(&d.settings.cron),
                    self.tz,
                    nearest(before),
                    nearest(after)
                ));
                if let Some(changed) = self.timing_changed {
                    lines.push(format!(
                        "Note: the schedule's cron or zone changed at {}, after this time, which \
                         is judged by `{}` in {}, the expression it has now; the one it had then \
                         may have fired at it. runner keeps no record of the old expression.",
                        self.at(changed),
                        escape_line(&d.settings.cron),
                        self.tz
                    ));
                }
                hints.push(format!(
                    "runner schedule next {} -n 10   # the next fire times",
                    self.name()
                ));
            }
            Cause::NoInstantYet => {
                let first = facts
                    .timing
                    .next_after(d.created_at)
                    .map_or_else(|| "never".to_string(), |t| self.at(t));
                lines.push(format!(
                    "No instant yet: {} was created at {} and first fires at {first}.",
                    self.name(),
                    self.at(d.created_at)
                ));
            }
            other => {
                if let Some(t) = instant {
                    self.outcome(other, t, run, lines, hints);
                }
            }
        }
    }

    /// What happened to fire instant `t`, whose run is `run`.
    fn outcome(
        &self,
        cause: &Cause,
        t: i64,
        run: Option<&RunView>,
        lines: &mut Vec<String>,
        hints: &mut Vec<String>,
    ) {
        let facts = self.facts;
        let d: &Definition = facts.definition;
        let now = facts.now;
        if let Some(run) = run {
            hints.push(format!(
                "runner show {}   # its attempts, output and events",
                run.id
            ));
        }
        let line = match (cause, run) {
            (Cause::Ran, Some(r)) => format!(
                "Ran: run {} succeeded on attempt {} of {}{}.",
                r.id,
                r.attempt,
                r.max_attempts,
                r.finished_at
                    .map(|f| format!(", finished at {}", self.at(f)))
                    .unwrap_or_default()
            ),
            (Cause::Running, Some(r)) => {
                let mut line = format!(
                    "Running: run {} is on attempt {} of {}{}{}.",
                    r.id,
                    r.attempt,
                    r.max_attempts,
                    r.last_attempt_started_at
                        .map(|s| format!(", started at {}", self.at(s)))
                        .unwrap_or_default(),
                    r.owner
                        .as_deref()
                        .map(|o| format!(" by {}", escape_line(o)))
                        .unwrap_or_default()
                );
                if let Some(expiry) = r.lease_expires_at.filter(|&e| e < now) {
                    line.push_str(&format!(
                        " Its lease expired at {}: its runner stopped heart-beating, and the next \
                         tick recovers it.",
                        self.at(expiry)
                    ));
                }
                line
            }
            (Cause::Pending, Some(r)) if r.run_at <= now => format!(
                "Pending: run {} has been due since {}, waiting for a tick to claim it{}.",
                r.id,
                self.at(r.run_at),
                self.last_tick()
            ),
            (Cause::Pending, Some(r)) => {
                format!("Pending: run {} is due at {}.", r.id, self.at(r.run_at))
            }
            (Cause::HeldByPause, Some(r)) => format!(
                "Held: run {} is pending, but the schedule is paused: no tick starts it until \
                 `runner schedule resume {}` (or `runner cancel {}`).",
                r.id, r.job, r.id
            ),
            (Cause::Retrying, Some(r)) => format!(
                "Retrying: attempt {} of {} failed ({}); attempt {} of {} {} {}{}.",
                r.attempt,
                r.max_attempts,
                failure(r),
                r.attempt + 1,
                r.max_attempts,
                if r.run_at <= now {
                    "has been due since"
                } else {
                    "is due at"
                },
                self.at(r.run_at),
                if r.run_at <= now {
                    self.last_tick()
                } else {
                    String::new()
                }
            ),
            (Cause::WaitingBehindForbid { running_run_id }, Some(r)) => {
                hints.push(format!(
                    "runner show {running_run_id}   # the run it waits for"
                ));
                format!(
                    "Waiting behind a running run: run {} has been due since {}, but run \
                     {running_run_id} of {} is running and its overlap policy is forbid; it starts \
                     once run {running_run_id} ends.",
                    r.id,
                    self.at(r.run_at),
                    self.name()
                )
            }
            (Cause::WaitingBehindStop { stopping_run_id }, Some(r)) => {
                hints.push(format!(
                    "runner show {stopping_run_id}   # the cancelled run whose job it waits for"
                ));
                let by = facts.stopping.map_or(now, |s| s.stopping_by);
                let hosts: Vec<String> = self.open_hosts.iter().map(|h| escape_line(h)).collect();
                let on = match hosts.as_slice() {
                    [] => String::new(),
                    hosts => format!(" on {}", and_list(hosts)),
                };
                let mut line = format!(
                    "Waiting: run {stopping_run_id} (cancelled) is still being stopped{on}, by {} \
                     at the latest; run {}, due since {}, starts once that job is stopped, as \
                     the overlap policy of {} is forbid.",
                    self.at(by),
                    r.id,
                    self.at(r.run_at),
                    self.name()
                );
                if by < now {
                    // Each host's next tick stops the job there, and no longer waits for others.
                    let who = match hosts.as_slice() {
                        [_, _, ..] => {
                            format!(" on each of {} stops its job there", and_list(&hosts))
                        }
                        _ => format!("{on} stops the job"),
                    };
                    line.push_str(&format!(
                        " That time is past: its tick died or hung, and the next tick{who}."
                    ));
                }
                line
            }
            (Cause::Dead, Some(r)) => {
                hints.push(format!("runner retry {}   # one more attempt, now", r.id));
                format!(
                    "Dead: run {} failed all {} of its attempts; the last with {}.",
                    r.id,
                    r.attempt,
                    failure(r)
                )
            }
            (Cause::Cancelled, Some(r)) => format!(
                "Cancelled: run {} was cancelled{} after {} attempt(s).",
                r.id,
                r.finished_at
                    .map(|f| format!(" at {}", self.at(f)))
                    .unwrap_or_default(),
                r.attempt
            ),
            (Cause::SkippedCatchUp, Some(r)) => format!(
                "Skipped by catch-up (policy {}, grace {}): run {} was recorded as skipped: {}.",
                d.settings.catch_up,
                duration_of_secs(d.settings.grace_secs),
                r.id,
                escape_line(r.skip_reason.as_deref().unwrap_or("no reason recorded"))
            ),
            (Cause::SkippedOverlap, Some(r)) => format!(
                "Skipped by overlap (policy forbid): run {} was recorded as skipped: {}.",
                r.id,
                escape_line(r.skip_reason.as_deref().unwrap_or("no reason recorded"))
            ),
            (Cause::NoTickSince, _) => {
                hints.push(
                    "runner doctor   # checks the cron line, the cron daemon and the last tick"
                        .to_string(),
                );
                match facts.last_tick_at {
                    Some(tick) => format!(
                        "Not materialised yet: no tick has run since it came due; the last tick \
                         ran at {} ({}). Cron runs `runner tick` every minute when set up.",
                        self.at(tick),
                        age(tick, now)
                    ),
                    None => "Not materialised yet: no tick has ever run on this database. Cron \
                             runs `runner tick` every minute when set up."
                        .to_string(),
                }
            }
            (Cause::NotMaterialised, _) => {
                hints.push(
                    "runner doctor   # checks the cron line, the cron daemon and the last tick"
                        .to_string(),
                );
                format!(
                    "Not materialised: a tick ran at {}, after it came due, but no tick has \
                     materialised it; a tick that fails on a schedule says why on stderr (cron \
                     mails it), and one whose clock was behind leaves it for the next.",
                    facts
                        .last_tick_at
                        .map_or_else(|| "?".to_string(), |tick| self.at(tick))
                )
            }
            (Cause::Paused, _) => {
                hints.push(format!(
                    "runner schedule resume {}   # fire again from now on",
                    self.name()
                ));
                format!(
                    "Paused: {} is paused, so ticks materialise none of its instants, and \
                     resuming does not replay them. runner keeps no record of when it was paused; \
                     its settings last changed at {}.",
                    self.name(),
                    self.at(d.updated_at)
                )
            }
            (Cause::NotYetDue, _) => {
                format!("Not yet due: it comes in {}.", duration_of_secs(t - now))
            }
            (Cause::BeforeSchedule, _) => format!(
                "Before the schedule existed: {} was created at {}; a new schedule fires from its \
                 first instant after that.",
                self.name(),
                self.at(d.created_at)
            ),
            (Cause::NotRecorded, _) => format!(
                "No run of it is recorded, though ticks have passed it: the schedule was paused \
                 then (resuming does not replay a paused period), {}or its run was pruned \
                 (finished runs are deleted after the retention, 30 days by default).",
                timing_changed_since(d, t)
                    .map(|changed| format!(
                        "or its cron or zone changed since (at {}), ",
                        self.at(changed)
                    ))
                    .unwrap_or_default()
            ),
            (Cause::PassedOver { .. }, _) => match self.counted_in {
                Some(counting) => {
                    hints.push(format!(
                        "runner show {}   # the run whose reason counts it",
                        counting.id
                    ));
                    format!(
                        "Passed over: the tick at {} recorded the {}, as many as a tick records, \
                         and counted the older ones, this one among them, in the reason of run \
                         {} (the oldest it recorded, skipped, of {}): \"{}\".",
                        self.at(counting.created_at),
                        count(INSTANTS_RECORDED_LIMIT, "newest missed instant"),
                        counting.id,
                        self.at(counting.scheduled_for),
                        escape_line(counting.skip_reason.as_deref().unwrap_or_default())
                    )
                }
                None => format!("{}.", cause.name()),
            },
            // A cause that needs a run always has one; the others are told above.
            (other, _) => format!("{}.", other.name()),
        };
        lines.push(line);
        if let (Cause::PassedOver { .. }, Some(counting), Some(changed)) =
            (cause, self.counted_in, self.timing_changed)
        {
            lines.push(self.changed_since_counted(counting, changed));
        }
    }

    /// That the schedule's cron or zone changed (at `changed`) after the tick that counted an
    /// instant as passed over: which instants that run counted is judged by the expression the
    /// schedule has now, and runner keeps no record of the one it had then.
    fn changed_since_counted(&self, counting: &RunAfterCursor, changed: i64) -> String {
        let d = self.facts.definition;
        format!(
            "Note: the schedule's cron or zone changed at {}, after that tick. Which instants run \
             {} counts is judged by `{}` in {}, the expression it has now; that run counted the \
             old expression's instants, and this time may not have been one of them. runner \
             keeps no record of the old expression.",
            self.at(changed),
            counting.id,
            escape_line(&d.settings.cron),
            self.tz
        )
    }

    /// "; the last tick ran at T (N ago)", or that none ever ran.
    fn last_tick(&self) -> String {
        match self.facts.last_tick_at {
            Some(tick) => format!(
                " (the last tick ran at {}, {})",
                self.at(tick),
                age(tick, self.facts.now)
            ),
            None => " (no tick has ever run on this database)".to_string(),
        }
    }
}

/// A wall-clock time asked about, as precise as it was given: to the second when it has seconds
/// (`08:03:30` is not the minute `08:03`, which may be a fire instant), else to the minute.
fn clock_time(time: NaiveTime) -> String {
    let format = match time.second() {
        0 => "%H:%M",
        _ => "%H:%M:%S",
    };
    time.format(format).to_string()
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [rest @ .., last] if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.join(""),
    }
}

/// A failed attempt's error: code and detail.
fn failure(r: &RunView) -> String {
    match (&r.error_code, &r.error_detail) {
        (Some(code), Some(detail)) => format!("{}: {}", escape_line(code), escape_line(detail)),
        (Some(code), None) => escape_line(code),
        (None, _) => "no error recorded".to_string(),
    }
}

fn render(why: &Why) -> String {
    let tz = super::zone(why.timezone);
    let at = |t: Option<i64>| t.map_or_else(|| "none".to_string(), |t| local_time(t, tz));
    let mut out = format!(
        "schedule {}: `{}` in {}{}\n",
        escape_line(why.schedule),
        escape_line(why.cron),
        escape_line(why.timezone),
        if why.paused { " (paused)" } else { "" }
    );
    out.push_str(&format!(
        "  last fire time: {}\n",
        at(why.last_fire_at_epoch)
    ));
    out.push_str(&format!(
        "  next fire time: {}\n",
        at(why.next_fire_at_epoch)
    ));
    out.push_str(&format!(
        "  last tick:      {}\n",
        why.last_tick_at_epoch.map_or_else(
            || "never".to_string(),
            |t| format!("{} ({})", local_time(t, tz), age(t, why.now_epoch))
        )
    ));
    out.push('\n');
    for line in &why.explanation {
        out.push_str(line);
        out.push('\n');
    }
    if !why.hints.is_empty() {
        out.push('\n');
        for hint in &why.hints {
            out.push_str(&format!("  {hint}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("instant")
            .with_timezone(&Utc)
    }

    /// `--at value` for a schedule in New York, at `now`.
    fn asked(value: &str, now: &str) -> String {
        let ny: Tz = "America/New_York".parse().expect("zone");
        let at = parse_at(value).expect(value);
        format!("{:?}", at_of(&at, ny, utc(now)).expect(value))
    }

    const NOW: &str = "2026-11-23T18:00:00Z";

    #[test]
    fn at_takes_instants_and_wall_clock_times_in_the_schedules_zone() {
        assert_eq!(
            asked("2026-11-23T10:30:00Z", NOW),
            "Instant(2026-11-23T10:30:00Z)"
        );
        assert_eq!(
            asked("2026-11-23T10:30:00-05:00", NOW),
            "Instant(2026-11-23T15:30:00Z)"
        );
        assert_eq!(asked("2026-11-23T10:30", NOW), "Local(2026-11-23T10:30:00)");
        assert_eq!(asked("2026-11-23 10:30", NOW), "Local(2026-11-23T10:30:00)");
        assert_eq!(
            asked("2026-11-23 10:30:15", NOW),
            "Local(2026-11-23T10:30:15)"
        );
        assert_eq!(asked("2026-11-23", NOW), "Local(2026-11-23T00:00:00)");
        assert_eq!(asked("10:30", NOW), "Local(2026-11-23T10:30:00)");
        // The schedule's own zone, typed: the same wall-clock time.
        assert_eq!(
            asked("10:30 America/New_York", NOW),
            "Local(2026-11-23T10:30:00)"
        );
        // Another zone: the instant it names there.
        assert_eq!(
            asked("2026-11-23 10:30 Europe/Paris", NOW),
            "Instant(2026-11-23T09:30:00Z)"
        );
        let e = parse_at("yesterday").expect_err("not a time");
        assert!(e.contains("10:30 (today)"), "{e}");
        assert!(e.contains("schedule's zone"), "{e}");
        assert!(parse_at("25:00").is_err());
        assert!(parse_at("2h").is_err());
    }

    #[test]
    fn a_local_time_in_a_gap_or_a_repeated_hour_stays_a_question() {
        // Neither exists once: they stay wall-clock times for `why` to explain.
        assert_eq!(asked("2026-03-08 02:30", NOW), "Local(2026-03-08T02:30:00)");
        assert_eq!(asked("2026-11-01 01:30", NOW), "Local(2026-11-01T01:30:00)");
        // In another zone a gap names no instant.
        let ny: Tz = "America/New_York".parse().expect("zone");
        let paris_gap = parse_at("2026-03-29 02:30 Europe/Paris").expect("parses");
        let e = at_of(&paris_gap, ny, utc(NOW)).expect_err("a gap in Paris");
        assert!(e.contains("does not exist in Europe/Paris"), "{e}");
    }

    #[test]
    fn today_is_the_schedule_zones_today() {
        let now = "2026-11-24T02:00:00Z";
        let at = parse_at("10:30").expect("a time");
        // 02:00 UTC on the 24th is still the 23rd in New York.
        assert_eq!(asked("10:30", now), "Local(2026-11-23T10:30:00)");
        assert_eq!(
            format!("{:?}", at_of(&at, Tz::UTC, utc(now)).expect("a time")),
            "Local(2026-11-24T10:30:00)"
        );
    }
}
