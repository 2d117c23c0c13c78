//! `runner history [NAME]`: past and pending runs, newest first.

use anyhow::Result;
use comfy_table::{Cell, Color, ContentArrangement, Table};
use serde::Serialize;

use super::{
    colour_wanted, emit, emit_json, find_definition_row, zone, Ctx, Offering, SCHEDULE_NAME,
};
use crate::display::{duration_of_ms, duration_of_secs, escape_line, local_time, UtcTime};
use crate::exit::Failure;
use crate::model::{truncate_detail, RunStatus};
use crate::store::{OpenMode, RunFilter, RunView};
use crate::time_input::{parse_since, TimeInput};
use crate::tz::Tz;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only runs of this schedule.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: Option<String>,
    /// Only runs in this state: pending, running, succeeded, dead, cancelled or skipped.
    #[arg(long, value_name = "S", value_parser = Offering::<RunStatus>::new(RunStatus::NAMES),
          hide_possible_values = true)]
    pub status: Option<RunStatus>,
    /// Only runs scheduled in the last DUR (e.g. 2h, 7d) or at or after TIME (e.g. 2026-11-23,
    /// 10:30, RFC 3339; UTC unless a zone follows). See `runner help durations` and `runner help
    /// times`.
    #[arg(long, value_name = "DUR|TIME", value_parser = parse_since)]
    pub since: Option<TimeInput>,
    /// Show at most N runs.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub limit: u32,
    /// Machine-readable output: an array of runs.
    #[arg(long)]
    pub json: bool,
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
    let clock_now = ctx.clock.now();
    let now = clock_now.timestamp();
    let since = match args.since {
        Some(since) => Some(
            since
                .resolve(Tz::UTC, clock_now)
                .map_err(|e| Failure::usage(format!("--since: {e}")))?
                .timestamp(),
        ),
        None => None,
    };
    let runs = store.history(&RunFilter {
        definition_id,
        status: args.status,
        since,
        limit: args.limit as usize,
    })?;
    let rows: Vec<RunRow> = runs.iter().map(|run| RunRow::of(run, now)).collect();
    if args.json {
        return emit_json(&rows);
    }
    if rows.is_empty() {
        return emit("no runs match\n");
    }
    emit(&table(&rows, colour_wanted(false)))
}

/// A run as `history` lists it: one row of the table, or one entry of `--json` (which `show
/// --json` extends). Both are rendered from this, so the two cannot drift.
#[derive(Debug, Serialize)]
pub struct RunRow<'a> {
    pub id: i64,
    pub job: &'a str,
    pub timezone: &'a str,
    pub trigger: &'a str,
    pub status: RunStatus,
    pub scheduled_for: UtcTime,
    pub scheduled_for_epoch: i64,
    pub run_at: UtcTime,
    pub run_at_epoch: i64,
    pub attempt: u32,
    pub max_attempts: u32,
    /// The latest attempt's (`attempt`): null while it runs.
    pub duration_ms: Option<i64>,
    /// A running run: how long its current attempt (`attempt`) has been running, by the clock.
    pub elapsed_secs: Option<i64>,
    /// The latest attempt's (`attempt`): null while it runs.
    pub exit_code: Option<i32>,
    /// The run's last error, and which attempt it describes (`error_attempt`): while attempt 2
    /// runs, attempt 1's. `error_attempt` is null for an error no attempt made (a cancel).
    pub error_code: Option<&'a str>,
    pub error_detail: Option<&'a str>,
    pub error_attempt: Option<u32>,
    pub skip_reason: Option<&'a str>,
    pub created_at: UtcTime,
    pub created_at_epoch: i64,
    pub started_at: Option<UtcTime>,
    pub started_at_epoch: Option<i64>,
    pub finished_at: Option<UtcTime>,
    pub finished_at_epoch: Option<i64>,
}

/// Which attempt the run's stored error describes. The run keeps its last error while it retries,
/// so once attempt 2 is claimed the error is attempt 1's; a pending or dead run's is that of its
/// latest attempt. A cancelled run's error is the cancel itself, and one with no attempt behind
/// it describes none.
pub fn error_attempt(status: RunStatus, attempt: u32, has_error: bool) -> Option<u32> {
    let described = match status {
        _ if !has_error => return None,
        RunStatus::Running => attempt.saturating_sub(1),
        RunStatus::Pending | RunStatus::Dead => attempt,
        RunStatus::Succeeded | RunStatus::Cancelled | RunStatus::Skipped => return None,
    };
    (described >= 1).then_some(described)
}

impl<'a> RunRow<'a> {
    /// The run as seen at `now` (the clock's: a running attempt's elapsed time).
    pub fn of(r: &'a RunView, now: i64) -> RunRow<'a> {
        let running_since = r
            .last_attempt_started_at
            .filter(|_| r.status == RunStatus::Running);
        RunRow {
            id: r.id,
            job: &r.job,
            timezone: &r.timezone,
            trigger: &r.trigger,
            status: r.status,
            scheduled_for: UtcTime(r.scheduled_for),
            scheduled_for_epoch: r.scheduled_for,
            run_at: UtcTime(r.run_at),
            run_at_epoch: r.run_at,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            duration_ms: r.last_duration_ms,
            elapsed_secs: running_since.map(|started| (now - started).max(0)),
            exit_code: r.last_exit_code,
            error_code: r.error_code.as_deref(),
            error_detail: r.error_detail.as_deref(),
            error_attempt: error_attempt(r.status, r.attempt, r.error_code.is_some()),
            skip_reason: r.skip_reason.as_deref(),
            created_at: UtcTime(r.created_at),
            created_at_epoch: r.created_at,
            started_at: r.started_at.map(UtcTime),
            started_at_epoch: r.started_at,
            finished_at: r.finished_at.map(UtcTime),
            finished_at_epoch: r.finished_at,
        }
    }
}

fn table(runs: &[RunRow], colour: bool) -> String {
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
            Cell::new(escape_line(r.job)),
            Cell::new(local_time(r.scheduled_for_epoch, zone(r.timezone))),
            status,
            Cell::new(format!("{}/{}", r.attempt, r.max_attempts)),
            Cell::new(duration_text(r)),
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

/// The latest attempt's duration; for a running run, how long its attempt has been running.
fn duration_text(r: &RunRow) -> String {
    match (r.elapsed_secs, r.duration_ms) {
        (Some(secs), _) => duration_of_secs(secs),
        (None, Some(ms)) => duration_of_ms(ms),
        (None, None) => "-".to_string(),
    }
}

/// Exit status or error code, with what happens next for a run waiting to retry.
fn result_text(r: &RunRow) -> String {
    match r.status {
        RunStatus::Skipped => r.skip_reason.map_or_else(
            || "skipped".to_string(),
            |reason| truncate_detail(&escape_line(reason), 60),
        ),
        // The current attempt is running: its result is not known yet. An earlier attempt's
        // error is named as that attempt's, never shown as if it were this one's.
        RunStatus::Running => match (r.error_attempt, r.error_code) {
            (Some(attempt), Some(code)) => format!("running; attempt {attempt}: {code}"),
            _ => "running".to_string(),
        },
        RunStatus::Pending if r.attempt >= 1 => format!(
            "{}, retry at {}",
            r.error_code.unwrap_or("failed"),
            local_time(r.run_at_epoch, zone(r.timezone))
        ),
        _ => match (r.error_code, r.exit_code) {
            (Some(code), _) => code.to_string(),
            (None, Some(code)) => format!("exit {code}"),
            (None, None) => "-".to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_is_attributed_to_the_attempt_that_made_it() {
        use RunStatus::*;
        assert_eq!(error_attempt(Running, 2, true), Some(1));
        assert_eq!(error_attempt(Running, 1, false), None);
        // Retried from a cancel that happened before any attempt: no attempt made that error.
        assert_eq!(error_attempt(Running, 1, true), None);
        assert_eq!(error_attempt(Pending, 1, true), Some(1));
        assert_eq!(error_attempt(Pending, 0, true), None);
        assert_eq!(error_attempt(Dead, 3, true), Some(3));
        assert_eq!(error_attempt(Cancelled, 2, true), None);
        assert_eq!(error_attempt(Succeeded, 2, false), None);
    }
}
