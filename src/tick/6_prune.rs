//! Step 6, retention: runs finished longer ago than the retention (default 30 days,
//! `RUNNER_RETENTION`) are deleted with their attempts and events, in batches of a few thousand
//! runs per short transaction so ticks never wait long for the write lock. The tick does it at
//! most once an hour, after executing; `runner prune` does it on demand.
//!
//! After it, once an hour or when 250,000 wait, the runs made since the last fold are folded into
//! the run tally that `status` and `metrics` read (SQLite; see schema.sql's job_run_tally).
//!
//! Pruning cannot make a tick run an instant again: each schedule's cursor
//! (`materialized_through`), not its run rows, remembers which instants were handled.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::Tick;
use crate::store::{PruneCounts, Store};
use crate::time_input::DurationError;

/// Runs deleted per transaction: small enough that a tick waiting for the lock waits briefly.
pub const PRUNE_BATCH: usize = 5000;
/// Retention when `RUNNER_RETENTION` is unset.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// The tick prunes at most this often (across all runners sharing the database).
const AUTO_PRUNE_EVERY_SECS: i64 = 3600;
/// How long one tick may spend pruning; what is left waits for the next turn.
const AUTO_PRUNE_BUDGET: Duration = Duration::from_secs(10);
/// A pause between batches at least this long, and as long as the batch took: the lock is free
/// at least half the time.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// `RUNNER_RETENTION`: a duration (`30d`, `2160h`), or `off` to disable automatic pruning.
/// Unset or empty: 30 days.
pub fn retention_from_env() -> Result<Option<Duration>, String> {
    match std::env::var("RUNNER_RETENTION") {
        Ok(value) if !value.trim().is_empty() => parse_retention(value.trim()),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(Some(DEFAULT_RETENTION)),
        Err(std::env::VarError::NotUnicode(value)) => Err(format!(
            "RUNNER_RETENTION={:?} is not valid UTF-8; {RETENTION_SYNTAX}",
            value.to_string_lossy()
        )),
    }
}

/// What RUNNER_RETENTION accepts, for messages.
const RETENTION_SYNTAX: &str = "set it to a duration such as 30d or 2160h (a number and a unit: \
     s, m, h, d, w; combined like 1d12h), or to off to disable automatic pruning";

fn parse_retention(value: &str) -> Result<Option<Duration>, String> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    // Not humantime's own message ("expected number at 0"): it names neither the variable nor
    // what it accepts.
    match crate::time_input::parse_duration(value) {
        Ok(duration) => Ok(Some(duration)),
        Err(e @ DurationError::Calendar { .. }) => Err(format!("RUNNER_RETENTION={e}")),
        Err(DurationError::Syntax { .. }) => Err(format!(
            "RUNNER_RETENTION={value:?} is not a retention; {RETENTION_SYNTAX}"
        )),
    }
}

/// Delete finished runs older than `cutoff`, batch by batch, until none is left or `budget`
/// is spent. `on_batch` sees each batch's counts (for progress).
pub fn prune_finished(
    store: &mut dyn Store,
    cutoff: i64,
    budget: Option<Duration>,
    on_batch: &mut dyn FnMut(PruneCounts),
) -> Result<PruneCounts> {
    let started = Instant::now();
    let mut total = PruneCounts::default();
    loop {
        let batch_started = Instant::now();
        let batch = store.prune_batch(cutoff, PRUNE_BATCH)?;
        total += batch;
        if batch.runs == 0 {
            return Ok(total);
        }
        on_batch(batch);
        if budget.is_some_and(|b| started.elapsed() >= b) {
            return Ok(total);
        }
        // Leave the write lock free for a while: back-to-back transactions would starve a tick
        // whose busy handler polls for it.
        std::thread::sleep(batch_started.elapsed().max(MIN_PAUSE));
    }
}

/// The run tally (`status` and `metrics` read it) takes in the runs made since its last fold at
/// most this often, across all runners sharing the database...
const FOLD_RUN_TALLY_EVERY_SECS: i64 = 3600;
/// ...or sooner (at most once a minute) when more runs than this wait: the readers count each
/// run not folded, `metrics` at about 0.6 us a run (600,000 runs: 0.36 s; 26 ms at a million
/// folded). They then count at most this many and a minute's more, within about 0.2 s at up to
/// 100,000 runs a minute; and a tick materialising 100,000 schedules does not also fold them.
const FOLD_RUN_TALLY_BACKLOG: i64 = 250_000;
/// Runs folded per transaction. Folding groups its runs by schedule and status, which SQLite
/// does by sorting them: all of an hour's runs in one transaction (6 million at 100,000 a minute)
/// held the write lock for seconds, and grew the tick by about 60 bytes a run while SQLite kept
/// its sorts in memory (`temp_store = MEMORY`, until 986c64e).
const FOLD_BATCH: i64 = 50_000;

/// Fold the runs made since the last fold into the run tally, once an hour or at a backlog,
/// batch by batch, pausing between batches as pruning does. A problem is printed and counted,
/// never fatal to the tick: the runs left out are counted where they are read, and folded at the
/// next turn.
pub fn fold_run_tally(tick: &mut Tick<'_>) {
    let now = tick.clock.epoch();
    let store = &mut *tick.store;
    let mut fold = || -> Result<()> {
        let Some(newest) =
            store.claim_tally_fold(now, FOLD_RUN_TALLY_EVERY_SECS, FOLD_RUN_TALLY_BACKLOG)?
        else {
            return Ok(());
        };
        loop {
            let batch_started = Instant::now();
            if !store.fold_run_tally_batch(newest, FOLD_BATCH)? {
                return Ok(());
            }
            std::thread::sleep(batch_started.elapsed().max(MIN_PAUSE));
        }
    };
    if let Err(e) = fold() {
        super::runner_error(&mut tick.report.errors, "folding the run tally", &e);
    }
}

/// The tick's step 5: apply the default retention if no runner did in the last hour. Problems
/// are printed (cron mails them) and counted, never fatal to the tick.
pub fn auto_prune(tick: &mut Tick<'_>) {
    let (store, errors) = (&mut *tick.store, &mut tick.report.errors);
    let retention = match retention_from_env() {
        Ok(Some(retention)) => retention,
        Ok(None) => return,
        Err(message) => {
            let error = anyhow::anyhow!(message);
            super::runner_error(errors, "automatic pruning skipped", &error);
            return;
        }
    };
    let now = tick.clock.epoch();
    let cutoff = now.saturating_sub(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX));
    let mut prune = || -> Result<PruneCounts> {
        if !store.claim_auto_prune(now, AUTO_PRUNE_EVERY_SECS)? {
            return Ok(PruneCounts::default());
        }
        prune_finished(store, cutoff, Some(AUTO_PRUNE_BUDGET), &mut |_| {})
    };
    match prune() {
        Ok(removed) if removed.runs > 0 || removed.left.runs > 0 => {
            tick.report.auto_pruned = Some((removed, cutoff))
        }
        Ok(_) => {}
        Err(e) => super::runner_error(errors, "automatic pruning", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_values() {
        assert_eq!(parse_retention("off"), Ok(None));
        assert_eq!(
            parse_retention("90d"),
            Ok(Some(Duration::from_secs(90 * 86_400)))
        );
        let message = parse_retention("soon").expect_err("not a duration");
        assert!(message.contains("RUNNER_RETENTION=\"soon\""), "{message}");
        assert!(
            message.contains("30d") && message.contains("off"),
            "{message}"
        );
        assert!(!message.contains("expected number"), "{message}");
        // humantime's months and years (1y = 365.25 days) are refused: write days.
        for calendar in ["1y", "6M", "1year", "12months"] {
            let message = parse_retention(calendar).expect_err("a calendar unit");
            assert!(message.starts_with("RUNNER_RETENTION="), "{message}");
            assert!(message.contains("write days"), "{message}");
        }
    }
}
