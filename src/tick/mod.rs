//! One tick, step by step: record it, recover expired leases, materialise due schedules, then
//! claim and execute due runs until none are left or the tick is old enough to stop.

pub mod execute;
pub mod materialize;
pub mod prune;
pub mod recover;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::clock::Clock;
use crate::model::Actor;
use crate::store::Store;

pub struct TickOptions {
    pub actor: Actor,
    pub concurrency: usize,
    pub batch: usize,
    pub lease: Duration,
    pub max_tick: Duration,
    /// Execute only this run (`run --wait`), with its output streamed to the terminal.
    pub only_run: Option<i64>,
    /// Set by SIGTERM/SIGINT/SIGHUP: stop claiming, stop the jobs, record them, exit.
    pub shutdown: Arc<AtomicBool>,
}

/// What a tick tells its caller; problems are already printed as they happen.
#[derive(Debug, Default)]
pub struct TickReport {
    pub recovered: usize,
    pub materialized: usize,
    pub executed: Vec<execute::Executed>,
    /// Runner errors that did not stop the tick (one stderr line each was printed).
    pub errors: usize,
    /// Why automatic pruning did not run, when the clock may not decide it.
    pub auto_prune_skipped: Option<&'static str>,
}

pub fn tick(
    store: &mut dyn Store,
    clock: &Clock,
    options: &TickOptions,
    rng: &mut fastrand::Rng,
) -> Result<TickReport> {
    let mut report = TickReport::default();
    let now = clock.epoch();
    let high_water = store.record_tick(now)?;
    let clock_behind = crate::clock::behind_by(now, high_water);
    if let (Some(behind), Some(high)) = (clock_behind, high_water) {
        warn_clock_behind(now, high, behind);
    }
    report.recovered = recover::recover_expired(store, clock, &options.actor, rng)?;
    report.materialized =
        materialize::materialize_due(store, clock.now(), &options.actor, &mut report.errors)?;
    execute::execute_due(store, clock, options, rng, &mut report)?;
    // Retention is measured from now: only the real clock, and one that is not behind what the
    // database has seen, may decide what is old enough to delete.
    report.auto_prune_skipped = if clock.is_shifted() {
        Some("the clock is shifted by --now")
    } else if clock_behind.is_some() {
        Some("the clock is behind the latest time a tick saw")
    } else {
        None
    };
    if report.auto_prune_skipped.is_none() {
        prune::auto_prune(store, clock, &mut report.errors);
    }
    Ok(report)
}

/// One stderr line (cron mails it) when this tick's clock is behind the latest time a tick saw:
/// the host's clock stepped back, or an earlier tick ran with a clock ahead (`--now`, a wrong
/// clock). Not a runner error: the tick does its work; schedules whose cursor moved past now
/// wait until the clock gets there, or until `runner schedule reanchor`.
fn warn_clock_behind(now: i64, high_water: i64, behind: i64) {
    crate::complain!(
        "runner: warning: this host's clock ({}) is {} behind the latest time a tick saw ({}); \
         schedules whose cursor moved past now will not fire until then - see \
         'runner schedule reanchor --help'",
        crate::display::utc_time(now),
        crate::display::clock_gap(behind),
        crate::display::utc_time(high_water),
    );
}

/// Print one line to stderr about a runner problem (cron mails it).
/// Count a runner problem that does not stop the tick and print it as one line to stderr (cron
/// mails it), with a hint when the cause is one the user can act on (disk full, permissions).
pub fn runner_error(errors: &mut usize, context: impl std::fmt::Display, error: &anyhow::Error) {
    *errors += 1;
    crate::complain!("runner: error: {context}: {error:#}");
    if let Some(hint) = crate::exit::sqlite_hint(error) {
        crate::complain!("runner: hint: {hint}");
    }
}
