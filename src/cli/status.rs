//! `runner status`: health at a glance. Run counts, the oldest due-but-unclaimed run, running
//! runs and their leases, retries in flight, the last day's failures, when cron last ran a tick,
//! and the database's size. Warnings (no recent tick, expired leases, a clock behind or ahead)
//! never change the exit code: the command worked, and what it found is in its output (and in
//! `warnings` in JSON). `--check` is the exception, for monitoring: see `check`.

use std::fmt::Write as _;

use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Map, Value};

use super::check::{evaluate, Thresholds};
use super::{emit, emit_json, parse_duration, secs_text, zone, Ctx};
use crate::clock::{behind_by, CLOCK_TOLERANCE_SECS};
use crate::display::{clock_gap, escape_line, local_time, put_time, utc_time};
use crate::exit::Failure;
use crate::model::Definition;
use crate::store::{DefinitionRow, Health, OpenMode, RunBrief, RunningView};

/// A tick older than this means cron is not running `runner tick` every minute.
pub const STALE_TICK_SECS: i64 = 120;
/// "Recent" failures: the last 24 hours.
pub const RECENT_SECS: i64 = 86_400;
/// Schedules named in the "cursor ahead of the clock" warning at most (all are counted).
const AHEAD_LISTED: usize = 5;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Machine-readable output.
    #[arg(long, conflicts_with = "check")]
    pub json: bool,
    /// Monitoring-plugin mode: print one summary line naming the rules that fired, and exit 0
    /// (OK), 1 (WARNING: a due run waits too long) or 2 (CRITICAL: no recent tick, an expired
    /// lease, or a run gone dead lately).
    #[arg(long)]
    pub check: bool,
    /// With --check: critical when no tick ran for longer than this.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "3m", requires = "check")]
    pub max_tick_age: Duration,
    /// With --check: critical when a run went dead within this long.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "1h", requires = "check")]
    pub dead_window: Duration,
    /// With --check: warning when a due run has waited longer than this to be claimed.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "5m", requires = "check")]
    pub max_due_lag: Duration,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let now = ctx.clock.epoch();
    if args.check {
        let thresholds = Thresholds {
            max_tick_age: args.max_tick_age,
            dead_window: args.dead_window,
            max_due_lag: args.max_due_lag,
        };
        let verdict = evaluate(
            &store.health(now, thresholds.recent_since(now))?,
            now,
            &thresholds,
        );
        emit(&format!("{}\n", verdict.summary))?;
        return match verdict.level.exit_code() {
            0 => Ok(()),
            code => Err(Failure::Verdict(code).into()),
        };
    }
    let health = store.health(now, now - RECENT_SECS)?;
    let definitions = store.definitions()?;
    let warnings = warnings(&health, &schedules_ahead(&definitions, now), now);
    if args.json {
        return emit_json(&json_report(&health, &warnings, now, &store.describe()));
    }
    emit(&render(&health, &warnings, now, &store.describe())?)
}

/// Schedules whose cursor lies ahead of now by more than the clock tolerance, the furthest
/// first: a tick with a clock ahead moved it there, and they do not fire until the clock gets
/// there (or `runner schedule reanchor` moves them back).
pub fn schedules_ahead(definitions: &[DefinitionRow], now: i64) -> Vec<&Definition> {
    // A damaged row's cursor cannot be trusted; `schedule list` shows it as damaged.
    let mut ahead: Vec<&Definition> = definitions
        .iter()
        .filter_map(|row| row.as_ref().ok())
        .filter(|d| d.materialized_through - now > CLOCK_TOLERANCE_SECS)
        .collect();
    ahead.sort_by_key(|d| std::cmp::Reverse(d.materialized_through));
    ahead
}

/// What an operator must act on. The tick is the only thing that moves work, so "no tick
/// lately" (or a last tick in the future) comes first.
pub fn warnings(h: &Health, ahead: &[&Definition], now: i64) -> Vec<String> {
    let mut warnings = Vec::new();
    match h.last_tick_at {
        None => warnings.push(
            "no tick has run yet: add `runner tick` to a crontab (see crontab.example)".to_string(),
        ),
        Some(at) if now - at > STALE_TICK_SECS => warnings.push(format!(
            "the last tick ran {} ago ({}): is cron running `runner tick` every minute?",
            secs_text(now - at),
            utc_time(at)
        )),
        Some(at) if at - now > CLOCK_TOLERANCE_SECS => warnings.push(format!(
            "the last tick ran at {}, {} ahead of this host's clock ({}): it ran with a clock \
             ahead (--now, or a wrong host clock)",
            utc_time(at),
            clock_gap(at - now),
            utc_time(now)
        )),
        Some(_) => {}
    }
    if let (Some(behind), Some(high)) = (behind_by(now, h.clock_high_water), h.clock_high_water) {
        warnings.push(format!(
            "this host's clock ({}) is {} behind the latest time a tick saw ({}): the clock \
             stepped back, or a tick ran with a clock ahead; ticks warn and skip automatic \
             pruning until the clock gets there (see `runner schedule reanchor --help`)",
            utc_time(now),
            clock_gap(behind),
            utc_time(high)
        ));
    }
    if !ahead.is_empty() {
        let mut names: Vec<String> = ahead
            .iter()
            .take(AHEAD_LISTED)
            .map(|d| {
                format!(
                    "{} (cursor at {})",
                    d.name,
                    utc_time(d.materialized_through)
                )
            })
            .collect();
        if ahead.len() > AHEAD_LISTED {
            names.push(format!("and {} more", ahead.len() - AHEAD_LISTED));
        }
        warnings.push(format!(
            "{} schedule(s) will not fire until the clock reaches their cursor, which a tick \
             with a clock ahead moved there: {}; `runner schedule reanchor NAME... | --all` \
             moves them back to now",
            ahead.len(),
            names.join(", ")
        ));
    }
    if h.expired_leases > 0 {
        warnings.push(format!(
            "{} running run(s) hold an expired lease: their runner stopped heart-beating \
             (crashed, killed or hung); the next tick recovers them",
            h.expired_leases
        ));
    }
    warnings
}

fn expired(h: &Health, now: i64) -> impl Iterator<Item = &RunningView> {
    h.running.iter().filter(move |r| r.lease_expires_at < now)
}

fn brief_json(run: &RunBrief) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("run_id".into(), json!(run.id));
    o.insert("job".into(), json!(run.job));
    put_time(&mut o, "scheduled_for", Some(run.scheduled_for));
    o.insert("attempt".into(), json!(run.attempt));
    o.insert("max_attempts".into(), json!(run.max_attempts));
    o
}

fn running_json(r: &RunningView, now: i64) -> Value {
    let mut o = brief_json(&r.run);
    o.insert("owner".into(), json!(r.owner));
    o.insert("host".into(), json!(r.host));
    put_time(&mut o, "started_at", r.attempt_started_at);
    put_time(&mut o, "heartbeat_at", r.heartbeat_at);
    put_time(&mut o, "lease_expires_at", Some(r.lease_expires_at));
    o.insert("lease_expired".into(), json!(r.lease_expires_at < now));
    Value::Object(o)
}

fn json_report(h: &Health, warnings: &[String], now: i64, location: &str) -> Value {
    let mut o = Map::new();
    put_time(&mut o, "now", Some(now));
    let counts: Map<String, Value> = h
        .counts
        .iter()
        .map(|(status, n)| (status.as_str().to_string(), json!(n)))
        .collect();
    o.insert("counts".into(), Value::Object(counts));
    let oldest_due = h.oldest_due.as_ref().map(|run| {
        let mut d = brief_json(run);
        put_time(&mut d, "due_at", Some(run.run_at));
        d.insert("lag_secs".into(), json!((now - run.run_at).max(0)));
        Value::Object(d)
    });
    o.insert("oldest_due".into(), oldest_due.unwrap_or(Value::Null));
    o.insert(
        "running".into(),
        h.running.iter().map(|r| running_json(r, now)).collect(),
    );
    o.insert(
        "expired_leases".into(),
        expired(h, now).map(|r| running_json(r, now)).collect(),
    );
    o.insert(
        "retries_in_flight".into(),
        h.retries_in_flight
            .iter()
            .map(|(attempt, runs)| json!({ "attempt": attempt, "runs": runs }))
            .collect(),
    );
    let mut recent = Map::new();
    put_time(&mut recent, "since", Some(now - RECENT_SECS));
    recent.insert(
        "top_errors".into(),
        h.top_errors
            .iter()
            .map(|(code, n)| json!({ "error_code": code, "attempts": n }))
            .collect(),
    );
    recent.insert("dead_runs".into(), json!(h.dead_recent));
    recent.insert(
        "dead".into(),
        h.dead_recent_runs
            .iter()
            .map(|run| {
                let mut d = brief_json(run);
                d.insert("error_code".into(), json!(run.error_code));
                put_time(&mut d, "finished_at", run.finished_at);
                Value::Object(d)
            })
            .collect(),
    );
    o.insert("last_24h".into(), Value::Object(recent));
    put_time(&mut o, "last_tick_at", h.last_tick_at);
    // Negative when the last tick ran with a clock ahead of this one (a warning says so).
    o.insert(
        "last_tick_age_secs".into(),
        json!(h.last_tick_at.map(|at| now - at)),
    );
    put_time(&mut o, "last_prune_at", h.last_prune_at);
    let mut database = Map::new();
    database.insert("location".into(), json!(location));
    database.insert(
        "size_bytes".into(),
        json!(h.storage.database_bytes + h.storage.wal_bytes),
    );
    database.insert("wal_bytes".into(), json!(h.storage.wal_bytes));
    database.insert(
        "oldest_run".into(),
        h.oldest_run
            .as_ref()
            .map_or(Value::Null, |run| Value::Object(brief_json(run))),
    );
    o.insert("database".into(), Value::Object(database));
    o.insert("warnings".into(), json!(warnings));
    Value::Object(o)
}

fn render(
    h: &Health,
    warnings: &[String],
    now: i64,
    location: &str,
) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    for warning in warnings {
        writeln!(out, "WARNING: {warning}")?;
    }
    if !warnings.is_empty() {
        writeln!(out)?;
    }
    let counts: Vec<String> = h
        .counts
        .iter()
        .map(|(status, n)| format!("{status} {n}"))
        .collect();
    writeln!(out, "runs:            {}", counts.join(", "))?;

    match &h.oldest_due {
        Some(run) => writeln!(
            out,
            "oldest due:      run {} ({}), due {}, waiting {}",
            run.id,
            escape_line(&run.job),
            local_time(run.run_at, zone(&run.timezone)),
            secs_text(now - run.run_at)
        )?,
        None => writeln!(out, "oldest due:      none (nothing waits to be claimed)")?,
    }

    let running_total = h
        .counts
        .iter()
        .find(|(s, _)| *s == crate::model::RunStatus::Running)
        .map_or(0, |(_, n)| *n);
    if h.running.is_empty() {
        writeln!(out, "running:         none")?;
    } else {
        let listed = if running_total > h.running.len() as i64 {
            format!(" (the {} with the earliest lease expiry)", h.running.len())
        } else {
            String::new()
        };
        writeln!(out, "running:         {running_total}{listed}")?;
        for r in &h.running {
            let tz = zone(&r.run.timezone);
            let lease = if r.lease_expires_at < now {
                format!("lease EXPIRED {} ago", secs_text(now - r.lease_expires_at))
            } else {
                format!("lease until {}", local_time(r.lease_expires_at, tz))
            };
            writeln!(
                out,
                "  run {} ({}) attempt {}/{}, owner {} on {}, {lease}",
                r.run.id,
                escape_line(&r.run.job),
                r.run.attempt,
                r.run.max_attempts,
                escape_line(&r.owner),
                escape_line(r.host.as_deref().unwrap_or("?")),
            )?;
        }
    }
    let expired: Vec<String> = expired(h, now).map(|r| r.run.id.to_string()).collect();
    if h.expired_leases == 0 {
        writeln!(out, "expired leases:  none")?;
    } else {
        writeln!(
            out,
            "expired leases:  {} (run {})",
            h.expired_leases,
            expired.join(", ")
        )?;
    }

    if h.retries_in_flight.is_empty() {
        writeln!(out, "retries:         none in flight")?;
    } else {
        let retries: Vec<String> = h
            .retries_in_flight
            .iter()
            .map(|(attempt, runs)| format!("attempt {attempt}: {}", plural(*runs, "run")))
            .collect();
        writeln!(out, "retries:         {}", retries.join(", "))?;
    }

    if h.top_errors.is_empty() {
        writeln!(out, "errors (24h):    none")?;
    } else {
        let errors: Vec<String> = h
            .top_errors
            .iter()
            .map(|(code, n)| format!("{code} ({})", plural(*n, "attempt")))
            .collect();
        writeln!(out, "errors (24h):    {}", errors.join(", "))?;
    }
    writeln!(out, "dead (24h):      {}", h.dead_recent)?;
    for run in &h.dead_recent_runs {
        writeln!(
            out,
            "  run {} ({}) {} at {}",
            run.id,
            escape_line(&run.job),
            run.error_code.as_deref().unwrap_or("?"),
            run.finished_at
                .map_or_else(|| "?".to_string(), |t| local_time(t, zone(&run.timezone)))
        )?;
    }

    match h.last_tick_at {
        Some(at) if at - now > CLOCK_TOLERANCE_SECS => writeln!(
            out,
            "last tick:       {} ({} in the future of this clock)",
            utc_time(at),
            clock_gap(at - now)
        )?,
        Some(at) => writeln!(
            out,
            "last tick:       {} ({} ago)",
            utc_time(at),
            secs_text(now - at)
        )?,
        None => writeln!(out, "last tick:       never")?,
    }
    if let Some(at) = h.last_prune_at {
        writeln!(out, "last prune:      {}", utc_time(at))?;
    }
    writeln!(
        out,
        "database:        {location}, {} (of which WAL {})",
        bytes(h.storage.database_bytes + h.storage.wal_bytes),
        bytes(h.storage.wal_bytes)
    )?;
    match &h.oldest_run {
        Some(run) => writeln!(
            out,
            "oldest run kept: run {} ({}), scheduled {}",
            run.id,
            escape_line(&run.job),
            local_time(run.scheduled_for, zone(&run.timezone))
        )?,
        None => writeln!(out, "oldest run kept: none")?,
    }
    Ok(out)
}

/// `1 run`, `3 runs`.
fn plural(n: i64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `812 B`, `1.4 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn byte_sizes() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 * 1024 * 1024), "5.0 MiB");
    }
}
