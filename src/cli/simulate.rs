//! `runner schedule simulate NAME|--cron EXPR --from TIME --to TIME`: the instants a schedule
//! fires at in a window, the daylight-saving rule that placed any of them, and, for a schedule,
//! which of them its catch-up policy would run or skip if no tick ran during the window.

use anyhow::Result;
use chrono::TimeDelta;
use comfy_table::Table;
use serde::Serialize;

use super::{emit, emit_json, find_definition, where_fire_times_stop, Ctx, SCHEDULE_NAME};
use crate::display::{count, duration_of_secs, escape_line, local_time, UtcTime};
use crate::exit::Failure;
use crate::model::CatchUp;
use crate::schedule::{plan_catch_up, Decision, Timing};
use crate::store::OpenMode;
use crate::tick::materialize::with_ended_pause_resumed;
use crate::time_input::{parse_time, TimeInput};
use crate::tz::Tz;

/// The most fire times one simulation lists: enough for a year of a job every five minutes.
const MAX_INSTANTS: usize = 200_000;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["name", "cron"])))]
pub struct Args {
    /// Schedule name (or use --cron).
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: Option<String>,
    /// Simulate an expression instead of a schedule (no catch-up then).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// Zone for --cron [default: UTC]. Not with NAME: a schedule's fire times are in its own
    /// zone (change it with `schedule edit NAME --tz ZONE`).
    #[arg(long, value_name = "ZONE", requires = "cron", conflicts_with = "name",
          value_parser = super::Offering::<String>::listed(crate::tz::names), hide_possible_values = true)]
    pub tz: Option<String>,
    /// Start of the window (inclusive), e.g. 2026-03-08 or 2026-03-08T01:00, UTC unless a zone
    /// follows (see `runner help times`).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub from: TimeInput,
    /// End of the window (inclusive): when the first tick after it runs.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub to: TimeInput,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// A simulation as it prints and as `--json` carries it.
#[derive(Debug, Serialize)]
struct Simulation {
    /// The schedule's name; null for --cron.
    schedule: Option<String>,
    cron: String,
    timezone: String,
    /// The schedule's catch-up policy and grace; null for --cron.
    catch_up: Option<CatchUp>,
    grace_secs: Option<i64>,
    /// A paused schedule materialises nothing, so there are no decisions.
    paused: bool,
    from: UtcTime,
    from_epoch: i64,
    to: UtcTime,
    to_epoch: i64,
    instants: Vec<Instant>,
}

/// One fire instant of the window.
#[derive(Debug, Serialize)]
struct Instant {
    at: UtcTime,
    at_epoch: i64,
    local: String,
    /// The daylight-saving rule that placed it, if one did.
    dst: Option<Dst>,
    /// What the first tick after the window would do with it: `run` or `skip` (null for --cron
    /// or a paused schedule), and why it would skip.
    decision: Option<&'static str>,
    reason: Option<String>,
}

#[derive(Debug, Serialize)]
struct Dst {
    rule: &'static str,
    note: String,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    // A schedule's store is opened before the clock is read: on PostgreSQL, opening it sets the
    // clock to the database's, whose date a time of day (`--from 10:30`) is on. The store goes
    // with its schedule's name to the match below, which needs the window read from that clock.
    let named = match &args.name {
        Some(name) => Some((name, ctx.open(OpenMode::MustExist)?)),
        None => None,
    };
    let now = ctx.clock.now();
    let resolve = |flag: &str, input: TimeInput| {
        input
            .resolve(Tz::UTC, now)
            .map_err(|e| Failure::usage(format!("--{flag}: {e}")))
    };
    let (from, to) = (resolve("from", args.from)?, resolve("to", args.to)?);
    if to < from {
        return Err(Failure::usage(format!(
            "--to ({}) is before --from ({}); the window runs from --from to --to",
            to.to_rfc3339(),
            from.to_rfc3339()
        )));
    }
    // `handled`: a schedule's cursor. A tick never materialises an instant at or before it again
    // (it came before the schedule was added, resumed or edited, or a tick handled it).
    let (schedule, timing, policy, paused, handled) = match (named, &args.cron) {
        (Some((name, store)), _) => {
            let mut d = find_definition(store.as_ref(), name)?;
            // The tick at --to resumes a `pause --for` that has ended by then, from its end.
            with_ended_pause_resumed(&mut d, to.timestamp())?;
            let s = &d.settings;
            let timing = s.timing()?;
            let policy = (s.catch_up, s.grace_secs);
            let handled = d.materialized_through;
            (
                Some(d.name.clone()),
                timing,
                Some(policy),
                s.paused,
                handled,
            )
        }
        (None, Some(cron)) => {
            let timing =
                Timing::parse(cron, args.tz.as_deref().unwrap_or("UTC")).map_err(Failure::usage)?;
            (None, timing, None, false, i64::MIN)
        }
        (None, None) => return Err(Failure::usage("give a schedule NAME or --cron EXPR")),
    };
    let window =
        timing
            .cron
            .fire_times_between(timing.tz, from - TimeDelta::seconds(1), to, MAX_INSTANTS);
    if window.older_dropped > 0 {
        return Err(Failure::usage(format!(
            "the window holds more than {}; give a shorter one",
            count(MAX_INSTANTS, "fire time")
        )));
    }
    if let Some(stop) = where_fire_times_stop(timing.tz, to) {
        crate::complain!(
            "runner: note: fire times are computed up to the year 5000 ({stop}); the window \
             shows none after it"
        );
    }
    // The first tick at --to decides the instants after the cursor; the rest it never sees.
    let seen = window
        .instants
        .partition_point(|t| t.timestamp() <= handled);
    let decisions = match policy {
        Some((catch_up, grace_secs)) if !paused => Some(plan_catch_up(
            &window.instants[seen..],
            to,
            catch_up,
            std::time::Duration::from_secs(u64::try_from(grace_secs).unwrap_or(0)),
        )),
        _ => None,
    };
    let instants = window
        .instants
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let decided = decisions.as_ref().zip(i.checked_sub(seen));
            let (decision, reason) = match decided.map(|(d, i)| &d[i].1) {
                Some(Decision::Run) => (Some("run"), None),
                Some(Decision::Skip(reason)) => (Some("skip"), Some(reason.clone())),
                None if decisions.is_some() => (
                    None,
                    Some(format!(
                        "at or before its cursor ({}): no tick materialises it",
                        local_time(handled, timing.tz)
                    )),
                ),
                None => (None, None),
            };
            Instant {
                at: UtcTime(t.timestamp()),
                at_epoch: t.timestamp(),
                local: local_time(t.timestamp(), timing.tz),
                dst: timing.cron.dst_rule(timing.tz, t).map(|rule| Dst {
                    rule: rule.as_str(),
                    note: rule.note(),
                }),
                decision,
                reason,
            }
        })
        .collect();
    let simulation = Simulation {
        schedule,
        cron: timing.cron.expression().to_string(),
        timezone: timing.tz.name().to_string(),
        catch_up: policy.map(|(catch_up, _)| catch_up),
        grace_secs: policy.map(|(_, grace)| grace),
        paused,
        from: UtcTime(from.timestamp()),
        from_epoch: from.timestamp(),
        to: UtcTime(to.timestamp()),
        to_epoch: to.timestamp(),
        instants,
    };
    if args.json {
        return emit_json(&simulation);
    }
    emit(&render(&simulation))
}

fn render(sim: &Simulation) -> String {
    let mut out = String::new();
    let what = match &sim.schedule {
        Some(name) => format!("{}: ", escape_line(name)),
        None => String::new(),
    };
    out.push_str(&format!(
        "{what}{} in {}, {} to {}: {}\n",
        escape_line(&sim.cron),
        sim.timezone,
        local_time(sim.from_epoch, zone_of(sim)),
        local_time(sim.to_epoch, zone_of(sim)),
        count(sim.instants.len(), "fire time")
    ));
    let decided = sim.instants.iter().filter(|i| i.decision.is_some()).count();
    // A schedule's instants have a CATCH-UP column: run, skip, or - before its cursor.
    let catch_up_column = sim.catch_up.is_some() && !sim.paused;
    if let (Some(policy), Some(grace)) = (sim.catch_up, sim.grace_secs) {
        if sim.paused {
            out.push_str(
                "the schedule is paused: ticks materialise none of them until it is resumed\n",
            );
        } else {
            let runs = sim
                .instants
                .iter()
                .filter(|i| i.decision == Some("run"))
                .count();
            let before_cursor = match sim.instants.len() - decided {
                0 => String::new(),
                n => format!(
                    "; {} at or before the schedule's cursor it never materialises again",
                    count(n, "instant")
                ),
            };
            out.push_str(&format!(
                "if no tick ran in the window, the first tick after it (catch-up {policy}, grace {}) \
                 runs {runs} and skips {}{before_cursor}\n",
                duration_of_secs(grace),
                decided - runs
            ));
        }
    }
    if sim.instants.is_empty() {
        return out;
    }
    out.push('\n');
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    let mut header = vec!["LOCAL TIME", "UTC"];
    if catch_up_column {
        header.push("CATCH-UP");
    }
    header.push("NOTE");
    table.set_header(header);
    for i in &sim.instants {
        let mut row = vec![i.local.clone(), crate::display::utc_time(i.at_epoch)];
        let mut notes: Vec<String> = Vec::new();
        if catch_up_column {
            row.push(i.decision.unwrap_or("-").to_string());
            notes.extend(i.reason.clone());
        }
        notes.extend(i.dst.as_ref().map(|d| d.note.clone()));
        row.push(notes.join("; "));
        table.add_row(row);
    }
    out.push_str(&table.trim_fmt());
    out.push('\n');
    out
}

fn zone_of(sim: &Simulation) -> Tz {
    super::zone(&sim.timezone)
}
