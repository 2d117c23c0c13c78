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
}

pub fn tick(
    store: &mut dyn Store,
    clock: &Clock,
    options: &TickOptions,
    rng: &mut fastrand::Rng,
) -> Result<TickReport> {
    let mut report = TickReport::default();
    store.record_tick(clock.epoch())?;
    report.recovered = recover::recover_expired(store, clock, &options.actor, rng)?;
    report.materialized =
        materialize::materialize_due(store, clock.now(), &options.actor, &mut report.errors)?;
    execute::execute_due(store, clock, options, rng, &mut report)?;
    prune::auto_prune(store, clock, &mut report.errors);
    Ok(report)
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
