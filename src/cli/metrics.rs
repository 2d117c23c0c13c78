//! `runner metrics`: the Prometheus text exposition format (version 0.0.4), for node_exporter's
//! textfile collector. Write it atomically, so the collector never reads half a file:
//!
//! ```sh
//! runner metrics > /var/lib/node_exporter/textfile/runner.prom.tmp \
//!   && mv /var/lib/node_exporter/textfile/runner.prom.tmp /var/lib/node_exporter/textfile/runner.prom
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use anyhow::Result;

use super::status::{schedules_ahead, RECENT_SECS};
use super::{emit, Ctx};
use crate::model::{LastRun, RunStatus};
use crate::store::{DefinitionRow, Health, JobRunStats, OpenMode};

#[derive(Debug, clap::Args)]
pub struct Args {}

/// The quantiles `runner_run_duration_seconds` reports.
const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

pub fn run(_args: Args, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let now = ctx.clock.epoch();
    let since = now - RECENT_SECS;
    let health = store.health(now, since)?;
    let durations = store.attempt_durations(since)?;
    let definitions = store.definitions()?;
    let ahead = schedules_ahead(&definitions, now).len();
    let mut out = exposition(
        &health,
        durations_by_job(&definitions, &durations),
        ahead,
        now,
    )?;
    per_job(&mut out, &store.job_run_stats()?)?;
    emit(&out)
}

/// The statuses a run that ran ends in (a skipped instant never ran), in the order their
/// `runner_job_last_run_status` series are written.
const RAN: [RunStatus; 3] = [RunStatus::Succeeded, RunStatus::Dead, RunStatus::Cancelled];

/// Per-job families, one series per schedule (and status): cardinality is bounded by the number
/// of schedules, never by the number of runs. `runner_dead_runs_total` has only its `{job}`
/// series: an unlabelled database-wide one beside them would be counted twice by `sum()`.
fn per_job(out: &mut String, stats: &[JobRunStats]) -> std::fmt::Result {
    let mut by_job: BTreeMap<&str, Vec<&JobRunStats>> = BTreeMap::new();
    for row in stats {
        by_job.entry(&row.job).or_default().push(row);
    }
    family(
        out,
        "runner_job_last_success_timestamp_seconds",
        "gauge",
        "When the job's latest succeeded run finished (Unix time); absent until one has. Alert \
         when time() minus it exceeds twice the job's interval.",
    )?;
    for (job, rows) in &by_job {
        // The runs kept, or those pruned: a job failing for longer than the retention still
        // had its last success then.
        let kept = rows
            .iter()
            .filter(|r| r.status == Some(RunStatus::Succeeded))
            .find_map(|r| r.last_finished_at);
        let pruned = rows.iter().find_map(|r| r.pruned_success_at);
        if let Some(at) = kept.max(pruned) {
            writeln!(
                out,
                "runner_job_last_success_timestamp_seconds{{job=\"{}\"}} {at}",
                label(job)
            )?;
        }
    }

    family(
        out,
        "runner_job_last_run_status",
        "gauge",
        "1 for the status the job's latest finished run ended in (succeeded, dead or cancelled), \
         0 for the others; absent until a run has finished; pruning runs does not remove it.",
    )?;
    for (job, rows) in &by_job {
        // The runs kept, or those pruned: a yearly job's last run is still the last once the
        // retention has deleted it. Runs finished in the same second: see `LastRun`.
        let kept = rows
            .iter()
            .filter_map(|r| LastRun::of(r.last_finished_at?, r.status?))
            .max();
        let pruned = rows.iter().find_map(|r| r.pruned_last_run);
        if let Some(last) = kept.max(pruned) {
            let last = last.status();
            for status in RAN {
                writeln!(
                    out,
                    "runner_job_last_run_status{{job=\"{}\",status=\"{}\"}} {}",
                    label(job),
                    status.as_str(),
                    u8::from(status == last)
                )?;
            }
        }
    }

    family(
        out,
        "runner_job_runs_total",
        "counter",
        "Runs of the job the database holds, by status. Pruning and retry lower it, which \
         Prometheus reads as a counter reset.",
    )?;
    for (job, rows) in &by_job {
        for status in RunStatus::ALL {
            let runs = rows
                .iter()
                .find(|r| r.status == Some(*status))
                .map_or(0, |r| r.runs);
            writeln!(
                out,
                "runner_job_runs_total{{job=\"{}\",status=\"{}\"}} {runs}",
                label(job),
                status.as_str()
            )?;
        }
    }

    family(
        out,
        "runner_dead_runs_total",
        "counter",
        "Runs of the job that went dead (all attempts failed). Retry and prune never lower it; \
         the series goes when its schedule is removed.",
    )?;
    for (job, rows) in &by_job {
        writeln!(
            out,
            "runner_dead_runs_total{{job=\"{}\"}} {}",
            label(job),
            rows[0].dead_runs_total
        )?;
    }
    Ok(())
}

/// Each job's durations (ms), from `(schedule id, ms)`. A damaged schedule row still names its
/// job; a schedule removed since the durations were read has no series, as in the other per-job
/// families.
fn durations_by_job<'a>(
    definitions: &'a [DefinitionRow],
    durations: &[(i64, i64)],
) -> BTreeMap<&'a str, Vec<i64>> {
    // Grouped by id first: one hash per duration, not a search among the names.
    let mut by_id: HashMap<i64, Vec<i64>> = HashMap::new();
    for (definition_id, ms) in durations {
        by_id.entry(*definition_id).or_default().push(*ms);
    }
    definitions
        .iter()
        .map(|row| match row {
            Ok(d) => d,
            Err(damaged) => &damaged.definition,
        })
        .filter_map(|d| Some((d.name.as_str(), by_id.remove(&d.id)?)))
        .collect()
}

fn exposition(
    h: &Health,
    durations_by_job: BTreeMap<&str, Vec<i64>>,
    schedules_ahead: usize,
    now: i64,
) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    family(
        &mut out,
        "runner_runs",
        "gauge",
        "Runs in the database, by status.",
    )?;
    for (status, n) in &h.counts {
        writeln!(
            out,
            "runner_runs{{status=\"{}\"}} {n}",
            label(status.as_str())
        )?;
    }

    family(
        &mut out,
        "runner_run_duration_seconds",
        "summary",
        "Duration of job attempts that finished in the last 24 hours, by job (a sliding window: \
         use quantiles and sum/count, not rate()).",
    )?;
    for (job, mut ms) in durations_by_job {
        let name = label(job);
        ms.sort_unstable();
        for q in QUANTILES {
            writeln!(
                out,
                "runner_run_duration_seconds{{job=\"{name}\",quantile=\"{q}\"}} {}",
                seconds(nearest_rank(&ms, q))
            )?;
        }
        let sum: i64 = ms.iter().sum();
        writeln!(
            out,
            "runner_run_duration_seconds_sum{{job=\"{name}\"}} {}",
            seconds(sum)
        )?;
        writeln!(
            out,
            "runner_run_duration_seconds_count{{job=\"{name}\"}} {}",
            ms.len()
        )?;
    }

    family(
        &mut out,
        "runner_last_tick_timestamp_seconds",
        "gauge",
        "When the last tick started, by its clock (Unix time; 0 if none ever ran). Alert when it \
         falls behind.",
    )?;
    writeln!(
        out,
        "runner_last_tick_timestamp_seconds {}",
        h.last_tick_at.unwrap_or(0)
    )?;

    family(
        &mut out,
        "runner_clock_behind_seconds",
        "gauge",
        "How far this host's clock is behind the latest time a tick's clock read (0 when it is \
         not). Over a minute: the clock stepped back, or a tick ran with a clock ahead.",
    )?;
    let behind = h.clock_high_water.map_or(0, |high| (high - now).max(0));
    writeln!(out, "runner_clock_behind_seconds {behind}")?;

    family(
        &mut out,
        "runner_schedules_ahead_of_clock",
        "gauge",
        "Schedules whose cursor lies more than a minute ahead of this host's clock: they do not \
         fire until the clock gets there (see runner schedule reanchor).",
    )?;
    writeln!(out, "runner_schedules_ahead_of_clock {schedules_ahead}")?;

    family(
        &mut out,
        "runner_oldest_due_lag_seconds",
        "gauge",
        "How long the oldest due run has waited to be claimed (0 if none waits).",
    )?;
    let lag = h.oldest_due.as_ref().map_or(0, |r| (now - r.run_at).max(0));
    writeln!(out, "runner_oldest_due_lag_seconds {lag}")?;

    family(
        &mut out,
        "runner_expired_leases",
        "gauge",
        "Running runs whose lease expired: their runner stopped heart-beating.",
    )?;
    writeln!(out, "runner_expired_leases {}", h.expired_leases)?;

    family(
        &mut out,
        "runner_database_size_bytes",
        "gauge",
        "Size on disk of the SQLite database file plus its write-ahead log; on PostgreSQL, of runner's tables.",
    )?;
    writeln!(
        out,
        "runner_database_size_bytes {}",
        h.storage.total_bytes()
    )?;
    Ok(out)
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) -> std::fmt::Result {
    writeln!(out, "# HELP {name} {}", help_text(help))?;
    writeln!(out, "# TYPE {name} {kind}")
}

/// A label value, escaped per the exposition format: backslash, double quote, newline.
fn label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// HELP text, escaped per the exposition format: backslash and newline.
fn help_text(value: &str) -> String {
    value.replace('\\', r"\\").replace('\n', r"\n")
}

/// The nearest-rank quantile of sorted values.
fn nearest_rank(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(job: &str, status: RunStatus, runs: i64, at: i64) -> JobRunStats {
        JobRunStats {
            job: job.into(),
            status: Some(status),
            runs,
            last_finished_at: Some(at),
            dead_runs_total: 4,
            pruned_success_at: None,
            pruned_last_run: None,
        }
    }

    fn ran(at: i64, status: RunStatus) -> Option<LastRun> {
        Some(LastRun::of(at, status).expect("a status that ran"))
    }

    /// The `runner_job_last_run_status` series of `job` that is 1.
    fn last_status(out: &str, job: &str) -> Option<String> {
        let prefix = format!("runner_job_last_run_status{{job=\"{job}\",status=\"");
        out.lines()
            .filter_map(|line| line.strip_prefix(&prefix)?.strip_suffix("\"} 1"))
            .map(String::from)
            .next()
    }

    #[test]
    fn per_job_series_name_the_last_status_and_escape_the_job() {
        let mut out = String::new();
        let rows = [
            stats("a\"b", RunStatus::Succeeded, 3, 100),
            stats("a\"b", RunStatus::Dead, 1, 200),
            JobRunStats {
                job: "idle".into(),
                status: None,
                runs: 0,
                last_finished_at: None,
                dead_runs_total: 0,
                pruned_success_at: None,
                pruned_last_run: None,
            },
            // Every success pruned long ago, and dead runs since.
            JobRunStats {
                pruned_success_at: Some(50),
                ..stats("failing", RunStatus::Dead, 9, 900)
            },
        ];
        per_job(&mut out, &rows).expect("writing to a String");
        assert!(out.contains("runner_job_last_success_timestamp_seconds{job=\"a\\\"b\"} 100\n"));
        assert!(out.contains("runner_job_last_run_status{job=\"a\\\"b\",status=\"dead\"} 1\n"));
        assert!(out.contains("runner_job_last_run_status{job=\"a\\\"b\",status=\"succeeded\"} 0\n"));
        assert!(out.contains("runner_job_runs_total{job=\"a\\\"b\",status=\"succeeded\"} 3\n"));
        assert!(out.contains("runner_job_runs_total{job=\"idle\",status=\"pending\"} 0\n"));
        assert!(out.contains("runner_dead_runs_total{job=\"a\\\"b\"} 4\n"));
        assert!(out.contains("runner_dead_runs_total{job=\"idle\"} 0\n"));
        assert!(!out.contains("runner_job_last_run_status{job=\"idle\""));
        assert!(!out.contains("runner_job_last_success_timestamp_seconds{job=\"idle\""));
        assert!(out.contains("runner_job_last_success_timestamp_seconds{job=\"failing\"} 50\n"));
    }

    /// The last run is the later of the runs kept and the one pruning kept on the schedule;
    /// runs finished in the same second rank dead, then cancelled, then succeeded.
    #[test]
    fn the_last_run_is_the_later_of_the_kept_and_the_pruned() {
        let no_runs = |job: &str, pruned_last_run| JobRunStats {
            job: job.into(),
            status: None,
            runs: 0,
            last_finished_at: None,
            dead_runs_total: 0,
            pruned_success_at: None,
            pruned_last_run,
        };
        let rows = [
            // Every run pruned: the pruned one says it.
            no_runs("yearly", ran(100, RunStatus::Dead)),
            // A run kept after it (a skipped instant never counts, however late).
            JobRunStats {
                pruned_last_run: ran(100, RunStatus::Dead),
                ..stats("recovered", RunStatus::Succeeded, 1, 200)
            },
            JobRunStats {
                pruned_last_run: ran(100, RunStatus::Dead),
                ..stats("recovered", RunStatus::Skipped, 1, 300)
            },
            // A run kept before it (pruned by a shorter retention since, or held then).
            JobRunStats {
                pruned_last_run: ran(300, RunStatus::Cancelled),
                ..stats("older-kept", RunStatus::Succeeded, 1, 200)
            },
            // The same second: dead over cancelled over succeeded, kept or pruned.
            JobRunStats {
                pruned_last_run: ran(100, RunStatus::Succeeded),
                ..stats("tie", RunStatus::Cancelled, 1, 100)
            },
            stats("tie-kept", RunStatus::Dead, 1, 100),
            stats("tie-kept", RunStatus::Succeeded, 1, 100),
            no_runs("never", None),
        ];
        let mut out = String::new();
        per_job(&mut out, &rows).expect("writing to a String");
        let last = |job| last_status(&out, job);
        assert_eq!(last("yearly").as_deref(), Some("dead"), "{out}");
        assert_eq!(last("recovered").as_deref(), Some("succeeded"), "{out}");
        assert_eq!(last("older-kept").as_deref(), Some("cancelled"), "{out}");
        assert_eq!(last("tie").as_deref(), Some("cancelled"), "{out}");
        assert_eq!(last("tie-kept").as_deref(), Some("dead"), "{out}");
        assert_eq!(last("never"), None, "{out}");
        assert!(!out.contains("runner_job_last_run_status{job=\"never\""));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("x\ny"), r"x\ny");
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 0.5), 50);
        assert_eq!(nearest_rank(&v, 0.99), 99);
        assert_eq!(nearest_rank(&[7], 0.9), 7);
        assert_eq!(nearest_rank(&[], 0.5), 0);
    }
}
