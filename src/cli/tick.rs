//! `runner tick`: what cron runs every minute.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::{actor, parse_duration, Ctx};
use crate::exit::Failure;
use crate::store::OpenMode;
use crate::tick::{tick, OnShutdown, TickOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs executed at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub concurrency: usize,
    /// Runs claimed per claim transaction at most.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub batch: usize,
    /// Lease length; heart-beaten every third of it. A run whose runner stops heart-beating is
    /// recovered this long after its last heartbeat.
    // "60s" is `tick::DEFAULT_LEASE` (a test checks it).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub lease: Duration,
    /// Stop claiming new runs once the tick is this old (then wait for running jobs).
    #[arg(long, value_name = "DUR", default_value = "50s", value_parser = parse_duration)]
    pub max_tick: Duration,
    /// Owner id written on leases [default: HOST:PID].
    #[arg(long, value_name = "ID")]
    pub owner: Option<String>,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    if args.owner.as_deref().is_some_and(|o| o.trim().is_empty()) {
        return Err(Failure::usage(
            "--owner must not be empty (the default is HOST:PID)",
        ));
    }
    if args.concurrency == 0 || args.batch == 0 {
        return Err(Failure::usage(
            "--concurrency and --batch must be at least 1",
        ));
    }
    if args.lease < MIN_LEASE || args.lease > MAX_LEASE {
        return Err(Failure::usage(
            "--lease must be between 3s (it is heart-beaten every third of it) and 24h",
        ));
    }
    if args.max_tick > MAX_LEASE {
        return Err(Failure::usage("--max-tick must be at most 24h"));
    }
    let mut store = ctx.open(OpenMode::Execute)?;
    let options = TickOptions {
        actor: actor(args.owner),
        concurrency: args.concurrency,
        batch: args.batch,
        lease: args.lease,
        max_tick: args.max_tick,
        stream_output: false,
        shutdown: shutdown_flag()?,
        on_shutdown: OnShutdown::Retry,
    };
    let report = tick(
        store.as_mut(),
        &ctx.clock,
        &options,
        &mut fastrand::Rng::new(),
    )?;
    if ctx.verbose {
        crate::complain!(
            "runner: tick done: {} recovered, {} materialised, {} executed, {} errors",
            report.recovered,
            report.materialized,
            report.executed.len(),
            report.errors.count
        );
        if report.resumed > 0 {
            crate::complain!(
                "runner: resumed {} schedule(s) whose pause had ended",
                report.resumed
            );
        }
        if let Some((removed, cutoff)) = report.auto_pruned {
            crate::complain!(
                "runner: automatic pruning removed {}",
                super::prune::describe(removed, &crate::display::utc_time(cutoff))
            );
            if let Some(left) = super::prune::describe_left(removed.left) {
                crate::complain!("runner: automatic pruning {left}");
            }
        }
        if let Some(why) = report.auto_prune_skipped {
            crate::complain!("runner: automatic pruning skipped: {why}");
        }
    }
    // Each error was printed as it happened; the exit code tells cron and scripts.
    if report.errors.connection_lost {
        return Err(Failure::TickConnectionLost(report.errors.count).into());
    }
    if report.errors.database_refused {
        return Err(Failure::TickRefused(report.errors.count).into());
    }
    if report.errors.count > 0 {
        return Err(Failure::TickErrors(report.errors.count).into());
    }
    if report.met_lock() {
        return Err(Failure::TickLocked.into());
    }
    Ok(())
}

const MIN_LEASE: Duration = Duration::from_secs(3);
/// Long enough for any heartbeat gap; short enough that the arithmetic on it cannot overflow.
const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// SIGTERM, SIGINT and SIGHUP only set this flag; the supervisor loop stops the jobs and exits.
pub fn shutdown_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .context("installing signal handlers")?;
    }
    Ok(flag)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    #[test]
    fn the_lease_flags_default_is_the_default_lease() {
        let cli = Cli::try_parse_from(["runner", "tick"]).expect("parses");
        let Command::Tick(args) = cli.command else {
            panic!("not a tick");
        };
        assert_eq!(args.lease, crate::tick::DEFAULT_LEASE);
    }
}
