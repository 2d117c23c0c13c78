//! The command line: global flags, one module per subcommand, one dispatch match.

mod init;
mod run;
mod schedule;
mod tick;

use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};

use crate::clock::Clock;
use crate::exit::Failure;
use crate::model::Actor;
use crate::store::{self, Location, OpenMode, Store};

/// A cron + database job runner: cron wakes `runner tick` every minute; the database decides
/// what runs, who holds it, and what happened.
#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Database: a SQLite file path [default: $XDG_STATE_HOME/runner/runner.db, else
    /// ~/.local/state/runner/runner.db].
    #[arg(long, global = true, env = "RUNNER_DB", value_name = "PATH|URL")]
    pub db: Option<String>,

    /// More log output on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Pretend the clock starts at TIME (RFC 3339) and advances in real time. For tests and
    /// replays.
    #[arg(long, global = true, value_name = "TIME", value_parser = parse_time)]
    pub now: Option<DateTime<Utc>>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or migrate the database (idempotent).
    Init(init::Args),
    /// One tick: recover expired leases, materialise due schedules, claim and execute due runs.
    Tick(tick::Args),
    /// Define, change and inspect schedules.
    #[command(subcommand)]
    Schedule(schedule::Command),
    /// Enqueue a manual run of a schedule now.
    Run(run::Args),
}

/// What every command gets: where the database is, the clock, and who we are.
pub struct Ctx {
    pub location: Location,
    pub clock: Clock,
    pub verbose: u8,
}

impl Ctx {
    pub fn open(&self, mode: OpenMode) -> Result<Box<dyn Store>> {
        store::open(&self.location, mode)
    }
}

pub fn dispatch(cli: Cli) -> Result<()> {
    let location = match cli.db.as_deref().filter(|v| !v.is_empty()) {
        Some(value) => Location::parse(value),
        None => Location::Sqlite(Location::default_path()?),
    };
    let ctx = Ctx {
        location,
        clock: Clock::new(cli.now),
        verbose: cli.verbose,
    };
    match cli.command {
        Command::Init(args) => init::run(args, &ctx),
        Command::Tick(args) => tick::run(args, &ctx),
        Command::Schedule(command) => schedule::run(command, &ctx),
        Command::Run(args) => run::run(args, &ctx),
    }
}

/// This process as an actor on leases, attempts and events.
pub fn actor(owner: Option<String>) -> Actor {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_string());
    let pid = std::process::id();
    Actor {
        owner: owner.unwrap_or_else(|| format!("{host}:{pid}")),
        host,
        pid,
    }
}

pub fn parse_duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{value:?} is not a duration ({e}); use e.g. 90s, 10m, 1h30m"))
}

pub fn parse_time(value: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!("{value:?} is not an RFC 3339 time ({e}); use e.g. 2026-03-08T02:30:00Z")
        })
}

/// Whole seconds of a duration for storage, refusing values that do not fit.
pub fn duration_secs(flag: &str, value: Duration, min_secs: u64) -> Result<i64> {
    let secs = value.as_secs();
    if secs < min_secs {
        return Err(Failure::usage(format!(
            "--{flag} must be at least {min_secs}s"
        )));
    }
    i64::try_from(secs)
        .ok()
        .filter(|s| *s <= 10 * 365 * 86_400)
        .ok_or_else(|| Failure::usage(format!("--{flag} is too large (at most 10 years)")))
}
