//! `runner history [NAME]`: past and pending runs, newest first.

use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use comfy_table::{Cell, Color, ContentArrangement, Table};
use serde_json::{json, Map, Value};

use super::{colour_wanted, emit, emit_json, find_definition_row, parse_time, zone, Ctx};
use crate::display::{duration_of_ms, duration_of_secs, escape_line, local_time, put_time};
use crate::model::{truncate_detail, RunStatus};
use crate::store::{OpenMode, RunFilter, RunView};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only runs of this schedule.
    pub name: Option<String>,
    /// Only runs in this state: pending, running, succeeded, dead, cancelled or skipped.
    #[arg(long, value_name = "S")]
    pub status: Option<RunStatus>,
    /// Only runs scheduled in the last DUR (e.g. 2h, 7d) or at or after TIME (RFC 3339).
    #[arg(long, value_name = "DUR|TIME", value_parser = parse_since)]
    pub since: Option<Since>,
    /// Show at most N runs.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub limit: u32,
    /// Machine-readable output: an array of runs.
    #[arg(long)]
    pub json: bool,
}

/// `--since`: a duration before now, or a point in time.
#[derive(Debug, Clone, Copy)]
pub enum Since {
    Ago(Duration),
    At(DateTime<Utc>),
}

fn parse_since(value: &str) -> Result<Since, String> {
    if let Ok(at) = parse_time(value) {
        return Ok(Since::At(at));
    }
    humantime::parse_duration(value)
        .map(Since::Ago)
        .map_err(|_| {
            format!(
                "{value:?} is neither a duration (e.g. 90m, 2h, 7d) nor an RFC 3339 time \
             (e.g. 2026-03-08T00:00:00Z)"
            )
        })
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let definition_id = match &args.name {
        // A damaged schedule's runs are listed too: only its id is needed.
        Some(name) => Some(match find_definition_row(store.as_ref(), name)? {
            Ok(definition) => definition.id,
            Err(damaged) => damaged.definition.id,
        }),
        None => None,
    };
    let now = ctx.clock.epoch();
    let since = args.since.map(|since| match since {
        Since::Ago(ago) => now.saturating_sub(i64::try_from(ago.as_secs()).unwrap_or(i64::MAX)),
        Since::At(at) => at.timestamp(),
    });
    let runs = store.history(&RunFilter {
        definition_id,
        status: args.status,
        since,
        limit: args.limit as usize,
    })?;
    if args.json {
        return emit_json(&Value::Array(
            runs.iter().map(|r| Value::Object(run_json(r))).collect(),
        ));
    }
    if runs.is_empty() {
        return emit("no runs match\n");
    }
    emit(&table(&runs, now, colour_wanted(false)))
}

fn table(runs: &[RunView], now: i64, colour: bool) -> String {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_content_arrangement(ContentArrangement::Disabled);
    if colour {
        table.enforce_styling();
    } else {
        table.force_no_tty();
    }
    table.set_header([
        "RUN",
        "JOB",
        "SCHEDULED",
        "STATUS",
        "ATTEMPT",
        "DURATION",
        "RESULT",
    ]);
    for r in runs {
        let mut status = Cell::new(r.status.as_str());
        if colour {
            status = status.fg(status_colour(r.status));
        }
        table.add_row(vec![
            Cell::new(r.id),
            Cell::new(escape_line(&r.job)),
            Cell::new(local_time(r.scheduled_for, zone(&r.timezone))),
            status,
            Cell::new(format!("{}/{}", r.attempt, r.max_attempts)),
            Cell::new(duration_text(r, now)),
            Cell::new(result_text(r)),
        ]);
    }
    let mut text = table.trim_fmt();
    text.push('\n');
    text
}

fn status_colour(status: RunStatus) -> Color {
    match status {
        RunStatus::Succeeded => Color::Green,
        RunStatus::Dead => Color::Red,
        RunStatus::Running => Color::Cyan,
        RunStatus::Pending => Color::Yellow,
        RunStatus::Cancelled | RunStatus::Skipped => Color::DarkGrey,
    }
}

/// The latest attempt's duration; for a running run, how long it has been running.
fn duration_text(r: &RunView, now: i64) -> String {
    match (r.status, r.last_duration_ms, r.last_attempt_started_at) {
        (RunStatus::Running, _, Some(started)) => duration_of_secs(now - started),
        (_, Some(ms), _) => duration_of_ms(ms),
        _ => "-".to_string(),
    }
}

/// Exit status or error code, with what happens next for a run waiting to retry.
fn result_text(r: &RunView) -> String {
    match r.status {
        RunStatus::Skipped => r.skip_reason.as_deref().map_or_else(
            || "skipped".to_string(),
            |reason| truncate_detail(&escape_line(reason), 60),
        ),
        RunStatus::Pending if r.attempt >= 1 => format!(
            "{}, retry at {}",
            r.error_code.as_deref().unwrap_or("failed"),
            local_time(r.run_at, zone(&r.timezone))
        ),
        _ => match (&r.error_code, r.last_exit_code) {
            (Some(code), _) => code.clone(),
            (None, Some(code)) => format!("exit {code}"),
            (None, None) => "-".to_string(),
        },
    }
}

/// A run as JSON: the shape of each `history --json` entry, and the top of `show --json`.
pub fn run_json(r: &RunView) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("id".into(), json!(r.id));
    o.insert("job".into(), json!(r.job));
    o.insert("timezone".into(), json!(r.timezone));
    o.insert("trigger".into(), json!(r.trigger));
    o.insert("status".into(), json!(r.status.as_str()));
    put_time(&mut o, "scheduled_for", Some(r.scheduled_for));
    put_time(&mut o, "run_at", Some(r.run_at));
    o.insert("attempt".into(), json!(r.attempt));
    o.insert("max_attempts".into(), json!(r.max_attempts));
    o.insert("duration_ms".into(), json!(r.last_duration_ms));
    o.insert("exit_code".into(), json!(r.last_exit_code));
    o.insert("error_code".into(), json!(r.error_code));
    o.insert("error_detail".into(), json!(r.error_detail));
    o.insert("skip_reason".into(), json!(r.skip_reason));
    put_time(&mut o, "created_at", Some(r.created_at));
    put_time(&mut o, "started_at", r.started_at);
    put_time(&mut o, "finished_at", r.finished_at);
    o
}
