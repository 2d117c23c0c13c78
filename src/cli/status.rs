//! `runner status`: health at a glance. Run counts, the oldest due-but-unclaimed run, running
//! runs and their leases, cancelled runs whose job is still being stopped, retries in flight, the
//! last day's failures, when cron last ran a tick, and the database's size. Warnings (no recent
//! tick, expired leases, a clock behind or ahead) never change the exit code: the command
//! worked, and what it found is in its output (and in `warnings` in JSON). `--check` is the
//! exception, for monitoring: see `check`.

use std::fmt::Write as _;

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::check::{evaluate, Thresholds};
use super::{emit, emit_json, parse_duration, zone, Ctx};
use crate::clock::{behind_by, CLOCK_TOLERANCE_SECS};
use crate::display::{
    age, bytes, count, duration_of_secs, escape_line, local_time, utc_time, UtcTime,
};
use crate::exit::Failure;
use crate::model::{Definition, RunStatus};
use crate::store::{DefinitionRow, Health, OpenMode, RunBrief, RunningView, StoppingView};

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
    /// (OK), 1 (WARNING: a due run waits too long, or a tick ran with a clock ahead of this
    /// host's) or 2 (CRITICAL: no recent tick, an expired lease, or a run gone dead lately).
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
    let location = store.describe();
    let report = Report::of(&health, &warnings, now, &location);
    if args.json {
        return emit_json(&report);
    }
    emit(&render(&report)?)
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
            duration_of_secs(now - at),
            utc_time(at)
        )),
        Some(at) if at - now > CLOCK_TOLERANCE_SECS => warnings.push(format!(
            "the last tick ran at {}, {} ahead of this host's clock ({}): it ran with a clock \
             ahead (--now, or a wrong host clock)",
            utc_time(at),
            duration_of_secs(at - now),
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
            duration_of_secs(behind),
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

/// `status` as it prints and as `--json` carries it: both rendered from this, so they cannot
/// drift.
#[derive(Debug, Serialize)]
struct Report<'a> {
    now: UtcTime,
    now_epoch: i64,
    /// Every status, zeros included, in `RunStatus::ALL` order.
    counts: Counts<'a>,
    oldest_due: Option<Due<'a>>,
    /// Pending runs held by a paused schedule: they wait for its resume, so they are not in
    /// `oldest_due`.
    held_by_pause: i64,
    running: Vec<Running<'a>>,
    /// Runs cancelled while running whose job is still being stopped: until it is, their
    /// `forbid` schedule's runs wait.
    stopping: Vec<Stopping<'a>>,
    expired_leases: Vec<Running<'a>>,
    retries_in_flight: Vec<Retries>,
    last_24h: Recent<'a>,
    last_tick_at: Option<UtcTime>,
    last_tick_at_epoch: Option<i64>,
    /// Negative when the last tick ran with a clock ahead of this one (a warning says so).
    last_tick_age_secs: Option<i64>,
    last_prune_at: Option<UtcTime>,
    last_prune_at_epoch: Option<i64>,
    database: Database<'a>,
    warnings: &'a [String],
    /// How many running runs hold an expired lease (`expired_leases` lists those in `running`).
    #[serde(skip)]
    expired_lease_count: i64,
}

/// Run counts by status: a JSON object, a line of text, both in status order.
#[derive(Debug)]
struct Counts<'a>(&'a [(RunStatus, i64)]);

impl Serialize for Counts<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(status, n)| (status.as_str(), n)))
    }
}

/// A run named in the report.
#[derive(Debug, Serialize)]
struct Brief<'a> {
    run_id: i64,
    job: &'a str,
    scheduled_for: UtcTime,
    scheduled_for_epoch: i64,
    attempt: u32,
    max_attempts: u32,
    /// The run's times print in its schedule's zone.
    #[serde(skip)]
    timezone: &'a str,
}

impl<'a> Brief<'a> {
    fn of(run: &'a RunBrief) -> Self {
        Brief {
            run_id: run.id,
            job: &run.job,
            scheduled_for: UtcTime(run.scheduled_for),
            scheduled_for_epoch: run.scheduled_for,
            attempt: run.attempt,
            max_attempts: run.max_attempts,
            timezone: &run.timezone,
        }
    }
}

#[derive(Debug, Serialize)]
struct Due<'a> {
    #[serde(flatten)]
    run: Brief<'a>,
    due_at: UtcTime,
    due_at_epoch: i64,
    lag_secs: i64,
}

#[derive(Debug, Serialize)]
struct Running<'a> {
    #[serde(flatten)]
    run: Brief<'a>,
    owner: &'a str,
    host: Option<&'a str>,
    started_at: Option<UtcTime>,
    started_at_epoch: Option<i64>,
    heartbeat_at: Option<UtcTime>,
    heartbeat_at_epoch: Option<i64>,
    lease_expires_at: UtcTime,
    lease_expires_at_epoch: i64,
    lease_expired: bool,
}

impl<'a> Running<'a> {
    fn of(r: &'a RunningView, now: i64) -> Self {
        Running {
            run: Brief::of(&r.run),
            owner: &r.owner,
            host: r.host.as_deref(),
            started_at: r.attempt_started_at.map(UtcTime),
            started_at_epoch: r.attempt_started_at,
            heartbeat_at: r.heartbeat_at.map(UtcTime),
            heartbeat_at_epoch: r.heartbeat_at,
            lease_expires_at: UtcTime(r.lease_expires_at),
            lease_expires_at_epoch: r.lease_expires_at,
            lease_expired: r.lease_expires_at < now,
        }
    }
}

/// A run cancelled while running whose job is still being stopped, and where: one per open
/// attempt (a run that another host recovered and retried can have two).
#[derive(Debug, Serialize)]
struct Stopping<'a> {
    #[serde(flatten)]
    run: Brief<'a>,
    /// The open attempt's number (the run's `attempt`, or an older one another host's recovery
    /// left open), host and processes (null once every attempt is closed or gone).
    open_attempt: Option<u32>,
    host: Option<&'a str>,
    runner_pid: Option<u32>,
    child_pid: Option<u32>,
    /// By when the tick holding it must have stopped the job; after that, the next tick on its
    /// host stops it.
    stopping_by: UtcTime,
    stopping_by_epoch: i64,
    overdue: bool,
}

impl<'a> Stopping<'a> {
    fn of(s: &'a StoppingView, now: i64) -> Self {
        Stopping {
            run: Brief::of(&s.run),
            open_attempt: s.attempt,
            host: s.host.as_deref(),
            runner_pid: s.runner_pid,
            child_pid: s.child_pid,
            stopping_by: UtcTime(s.stopping_by),
            stopping_by_epoch: s.stopping_by,
            overdue: s.stopping_by < now,
        }
    }
}

#[derive(Debug, Serialize)]
struct Retries {
    attempt: u32,
    runs: i64,
}

#[derive(Debug, Serialize)]
struct Recent<'a> {
    since: UtcTime,
    since_epoch: i64,
    top_errors: Vec<ErrorCount<'a>>,
    dead_runs: i64,
    dead: Vec<Dead<'a>>,
}

#[derive(Debug, Serialize)]
struct ErrorCount<'a> {
    error_code: &'a str,
    attempts: i64,
}

#[derive(Debug, Serialize)]
struct Dead<'a> {
    #[serde(flatten)]
    run: Brief<'a>,
    error_code: Option<&'a str>,
    finished_at: Option<UtcTime>,
    finished_at_epoch: Option<i64>,
}

#[derive(Debug, Serialize)]
struct Database<'a> {
    location: &'a str,
    size_bytes: u64,
    /// `None` (null) on PostgreSQL, whose WAL is the server's, not this database's.
    wal_bytes: Option<u64>,
    oldest_run: Option<Brief<'a>>,
}

impl<'a> Report<'a> {
    fn of(h: &'a Health, warnings: &'a [String], now: i64, location: &'a str) -> Self {
        let since = now - RECENT_SECS;
        let running: Vec<Running> = h.running.iter().map(|r| Running::of(r, now)).collect();
        let expired_leases = h
            .running
            .iter()
            .filter(|r| r.lease_expires_at < now)
            .map(|r| Running::of(r, now))
            .collect();
        Report {
            now: UtcTime(now),
            now_epoch: now,
            counts: Counts(&h.counts),
            oldest_due: h.oldest_due.as_ref().map(|run| Due {
                run: Brief::of(run),
                due_at: UtcTime(run.run_at),
                due_at_epoch: run.run_at,
                lag_secs: (now - run.run_at).max(0),
            }),
            held_by_pause: h.held_by_pause,
            running,
            stopping: h.stopping.iter().map(|s| Stopping::of(s, now)).collect(),
            expired_leases,
            retries_in_flight: h
                .retries_in_flight
                .iter()
                .map(|&(attempt, runs)| Retries { attempt, runs })
                .collect(),
            last_24h: Recent {
                since: UtcTime(since),
                since_epoch: since,
                top_errors: h
                    .top_errors
                    .iter()
                    .map(|(code, n)| ErrorCount {
                        error_code: code,
                        attempts: *n,
                    })
                    .collect(),
                dead_runs: h.dead_recent,
                dead: h
                    .dead_recent_runs
                    .iter()
                    .map(|run| Dead {
                        run: Brief::of(run),
                        error_code: run.error_code.as_deref(),
                        finished_at: run.finished_at.map(UtcTime),
                        finished_at_epoch: run.finished_at,
                    })
                    .collect(),
            },
            last_tick_at: h.last_tick_at.map(UtcTime),
            last_tick_at_epoch: h.last_tick_at,
            last_tick_age_secs: h.last_tick_at.map(|at| now - at),
            last_prune_at: h.last_prune_at.map(UtcTime),
            last_prune_at_epoch: h.last_prune_at,
            database: Database {
                location,
                size_bytes: h.storage.total_bytes(),
                wal_bytes: h.storage.wal_bytes,
                oldest_run: h.oldest_run.as_ref().map(Brief::of),
            },
            warnings,
            expired_lease_count: h.expired_leases,
        }
    }
}

fn render(report: &Report) -> Result<String, std::fmt::Error> {
    let now = report.now_epoch;
    let mut out = String::new();
    for warning in report.warnings {
        writeln!(out, "WARNING: {warning}")?;
    }
    if !report.warnings.is_empty() {
        writeln!(out)?;
    }
    let counts: Vec<String> = report
        .counts
        .0
        .iter()
        .map(|(status, n)| format!("{status} {n}"))
        .collect();
    writeln!(out, "runs:            {}", counts.join(", "))?;

    match &report.oldest_due {
        Some(due) => writeln!(
            out,
            "oldest due:      run {} ({}), due {}, waiting {}",
            due.run.run_id,
            escape_line(due.run.job),
            local_time(due.due_at_epoch, zone(due.run.timezone)),
            duration_of_secs(now - due.due_at_epoch)
        )?,
        None => writeln!(out, "oldest due:      none (nothing waits to be claimed)")?,
    }
    match report.held_by_pause {
        0 => {}
        1 => writeln!(out, "held:            1 run held by a paused schedule")?,
        n => writeln!(out, "held:            {n} runs held by paused schedules")?,
    }

    let running_total = report
        .counts
        .0
        .iter()
        .find(|(s, _)| *s == RunStatus::Running)
        .map_or(0, |(_, n)| *n);
    if report.running.is_empty() {
        writeln!(out, "running:         none")?;
    } else {
        let listed = if running_total > report.running.len() as i64 {
            format!(
                " (the {} with the earliest lease expiry)",
                report.running.len()
            )
        } else {
            String::new()
        };
        writeln!(out, "running:         {running_total}{listed}")?;
        for r in &report.running {
            let lease = if r.lease_expired {
                format!(
                    "lease EXPIRED {} ago",
                    duration_of_secs(now - r.lease_expires_at_epoch)
                )
            } else {
                format!(
                    "lease until {}",
                    local_time(r.lease_expires_at_epoch, zone(r.run.timezone))
                )
            };
            writeln!(
                out,
                "  run {} ({}) attempt {}/{}, owner {} on {}, {lease}",
                r.run.run_id,
                escape_line(r.run.job),
                r.run.attempt,
                r.run.max_attempts,
                escape_line(r.owner),
                escape_line(r.host.unwrap_or("?")),
            )?;
        }
    }
    render_stopping(&mut out, report)?;
    let expired: Vec<String> = report
        .expired_leases
        .iter()
        .map(|r| r.run.run_id.to_string())
        .collect();
    if report.expired_lease_count == 0 {
        writeln!(out, "expired leases:  none")?;
    } else {
        writeln!(
            out,
            "expired leases:  {} (run {})",
            report.expired_lease_count,
            expired.join(", ")
        )?;
    }

    if report.retries_in_flight.is_empty() {
        writeln!(out, "retries:         none in flight")?;
    } else {
        let retries: Vec<String> = report
            .retries_in_flight
            .iter()
            .map(|r| format!("attempt {}: {}", r.attempt, count(r.runs, "run")))
            .collect();
        writeln!(out, "retries:         {}", retries.join(", "))?;
    }

    let recent = &report.last_24h;
    if recent.top_errors.is_empty() {
        writeln!(out, "errors (24h):    none")?;
    } else {
        let errors: Vec<String> = recent
            .top_errors
            .iter()
            .map(|e| format!("{} ({})", e.error_code, count(e.attempts, "attempt")))
            .collect();
        writeln!(out, "errors (24h):    {}", errors.join(", "))?;
    }
    // The store lists the latest few; say so when there are more, as `running` does.
    let listed = if recent.dead_runs > recent.dead.len() as i64 {
        format!(
            " (the {} latest; the others: runner history --status dead)",
            recent.dead.len()
        )
    } else {
        String::new()
    };
    writeln!(out, "dead (24h):      {}{listed}", recent.dead_runs)?;
    for dead in &recent.dead {
        writeln!(
            out,
            "  run {} ({}) {} at {}",
            dead.run.run_id,
            escape_line(dead.run.job),
            dead.error_code.unwrap_or("?"),
            dead.finished_at_epoch.map_or_else(
                || "?".to_string(),
                |t| local_time(t, zone(dead.run.timezone))
            )
        )?;
    }

    match report.last_tick_at_epoch {
        Some(at) => writeln!(out, "last tick:       {} ({})", utc_time(at), age(at, now))?,
        None => writeln!(out, "last tick:       never")?,
    }
    if let Some(at) = report.last_prune_at_epoch {
        writeln!(out, "last prune:      {}", utc_time(at))?;
    }
    let database = &report.database;
    let wal = database
        .wal_bytes
        .map(|wal| format!(" (of which WAL {})", bytes(wal)))
        .unwrap_or_default();
    writeln!(
        out,
        "database:        {}, {}{wal}",
        database.location,
        bytes(database.size_bytes),
    )?;
    match &database.oldest_run {
        Some(run) => writeln!(
            out,
            "oldest run kept: run {} ({}), scheduled {}",
            run.run_id,
            escape_line(run.job),
            local_time(run.scheduled_for_epoch, zone(run.timezone))
        )?,
        None => writeln!(out, "oldest run kept: none")?,
    }
    Ok(out)
}

/// The runs cancelled while running whose job is still being stopped: a section only when there
/// are some (a `forbid` schedule's runs wait for them).
fn render_stopping(out: &mut String, report: &Report) -> std::fmt::Result {
    let mut runs: Vec<i64> = report.stopping.iter().map(|s| s.run.run_id).collect();
    runs.dedup();
    match runs.len() {
        0 => return Ok(()),
        1 => writeln!(
            out,
            "stopping:        1 cancelled run whose job is still being stopped"
        )?,
        n => writeln!(
            out,
            "stopping:        {n} cancelled runs whose jobs are still being stopped"
        )?,
    }
    for s in &report.stopping {
        let host = escape_line(s.host.unwrap_or("?"));
        let pids: Vec<String> = [("runner pid", s.runner_pid), ("job pid", s.child_pid)]
            .into_iter()
            .filter_map(|(name, pid)| pid.map(|pid| format!("{name} {pid}")))
            .collect();
        let pids = match pids.is_empty() {
            true => String::new(),
            false => format!(" ({})", pids.join(", ")),
        };
        let by = local_time(s.stopping_by_epoch, zone(s.run.timezone));
        let deadline = if s.overdue {
            format!("OVERDUE since {by}: the next tick on {host} stops it")
        } else {
            format!("stopped by {by} at the latest")
        };
        // An attempt other than the run's own: one another host's recovery left open.
        let which = match s.open_attempt {
            Some(open) if open != s.run.attempt => format!("its attempt {open} "),
            _ => String::new(),
        };
        writeln!(
            out,
            "  run {} ({}) cancelled on attempt {}/{}, {which}stopping on {host}{pids}, {deadline}",
            s.run.run_id,
            escape_line(s.run.job),
            s.run.attempt,
            s.run.max_attempts,
        )?;
    }
    Ok(())
}
