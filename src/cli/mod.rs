//! The command line: global flags, one module per subcommand, one dispatch match.

/// `println!` for command results, except that a reader that went away (`... | head`) is not an
/// error (see `emit`). Use inside functions returning `anyhow::Result`.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::emit(&format!("{}\n", format_args!($($arg)*)))?
    };
}

mod apply;
mod check;
mod completions;
mod doctor;
mod help;
mod history;
mod init;
mod man;
mod metrics;
mod migrate;
mod prune;
mod reanchor;
mod run;
mod schedule;
mod show;
mod simulate;
mod status;
mod steer;
mod tick;
mod why;

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use clap::{CommandFactory, Parser, Subcommand};

use crate::clock::Clock;
use crate::exit::Failure;
use crate::model::Actor;
use crate::store::{self, Location, OpenMode, Store};
use crate::tz::Tz;

/// A cron + database job runner: cron wakes `runner tick` every minute; the database decides
/// what runs, who holds it, and what happened.
#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    propagate_version = true,
    max_term_width = 100,
    // Our own `help` command also knows the topics (durations, times).
    disable_help_subcommand = true,
    after_help = help::TOPICS,
    after_long_help = concat!(
        "Examples:\n",
        "  runner init\n",
        "  runner schedule add backup --cron '0 3 * * *' -- /usr/local/bin/backup\n",
        "  # the crontab line (crontab -e), with runner's full path: cron's PATH is /usr/bin:/bin\n",
        "  * * * * * /usr/local/bin/runner tick\n",
        "  runner history --since 2h\n",
        "\n",
        "Help topics:\n",
        "  runner help durations   how to write a duration: 30s, 5m, 1h30m, 2d\n",
        "  runner help times       how to write a time: 2026-11-23, 2026-11-23 10:30, 10:30, RFC 3339"
    )
)]
pub struct Cli {
    /// Database: a SQLite file path, or a postgres:// URL for several hosts [default:
    /// $XDG_STATE_HOME/runner/runner.db, else ~/.local/state/runner/runner.db].
    #[arg(long, global = true, env = "RUNNER_DB", value_name = "PATH|URL",
          value_hint = clap::ValueHint::FilePath)]
    pub db: Option<String>,

    /// Also say on stderr what was done: the tick's summary, each batch `prune` deletes. (One
    /// level: there is nothing more to say.)
    #[arg(short, long, global = true)]
    pub verbose: bool,

    /// Pretend the clock starts at TIME and advances in real time: a date, a date and time (UTC
    /// unless a zone follows) or RFC 3339 (see `runner help times`). For tests and replays: a tick
    /// with --now never prunes by itself.
    #[arg(long, global = true, value_name = "TIME", value_parser = crate::time_input::parse_fixed_time)]
    pub now: Option<DateTime<Utc>>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Create or migrate the database (idempotent).
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner init\n",
        "  runner --db /var/lib/runner/runner.db init\n",
        "  runner --db postgres://runner@db.example.com/runner init"
    ))]
    Init(init::Args),
    /// One tick: recover expired leases, materialise due schedules, claim and execute due runs.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  # the crontab line (crontab -e): every minute, with runner's full path (cron's PATH\n",
        "  # is /usr/bin:/bin)\n",
        "  * * * * * /usr/local/bin/runner tick\n",
        "  runner -v tick    # and say what it did\n",
        "  runner tick --concurrency 8"
    ))]
    Tick(tick::Args),
    /// Define, change and inspect schedules.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule add backup --cron '0 3 * * *' -- /usr/local/bin/backup\n",
        "  runner schedule list\n",
        "  runner schedule next --cron '*/15 9-17 * * MON-FRI' --tz Europe/Paris"
    ))]
    #[command(subcommand)]
    Schedule(schedule::Command),
    /// Enqueue a manual run of a schedule now.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner run backup           # queued: the next tick runs it\n",
        "  runner run backup --wait    # run it here, now, and exit with its code"
    ))]
    Run(run::Args),
    /// Past and pending runs, newest first.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner history\n",
        "  runner history backup --since 2h\n",
        "  runner history --status dead --since 2026-11-01\n",
        "  runner history --since '2026-11-23 10:30 Europe/Paris' --json"
    ))]
    History(history::Args),
    /// One run: every attempt, its output tails, every event.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner show 42\n",
        "  runner show 42 --json"
    ))]
    Show(show::Args),
    /// Why an instant of a schedule did or did not run.
    ///
    /// Prints the schedule's last and next fire times, then what happened to one instant: by
    /// default the latest one that did not produce a succeeded run, or the time given with --at.
    /// The cause is one of: it ran (the run and its result), it is running, pending, retrying
    /// (attempt n of m, due at T), waiting behind a running run of its forbid schedule, dead (its
    /// error), cancelled, skipped by catch-up or by overlap (the recorded reason), not
    /// materialised because no tick has run since (the last tick), the schedule is paused, the
    /// time is not an instant of the cron expression (the nearest before and after), or it fell
    /// in a daylight-saving gap or repeated hour (the rule that applied). Reads only.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner why backup    # the latest instant of backup that did not succeed\n",
        "  runner why backup --at 02:30    # today's 02:30 in backup's zone\n",
        "  runner why backup --at '2026-03-08 02:30'\n",
        "  runner why backup --at 2026-11-23T07:30:00Z --json"
    ))]
    Why(why::Args),
    /// Health at a glance: run counts, due and running work, failures, the last tick.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner status\n",
        "  runner status --json\n",
        "  runner status --check --max-tick-age 5m    # for Nagios, Icinga, systemd"
    ))]
    Status(status::Args),
    /// Prometheus text exposition format, for node_exporter's textfile collector.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  # for node_exporter's textfile collector: write, then rename, so it never reads half a file\n",
        "  runner metrics > DIR/runner.prom.tmp && mv DIR/runner.prom.tmp DIR/runner.prom"
    ))]
    Metrics(metrics::Args),
    /// Put a dead run back to pending now, or make a run waiting to retry due now.
    ///
    /// A dead run goes back to pending, due now; a pending run that is waiting out a backoff
    /// delay after a failed attempt becomes due now. A RETRIED event is recorded.
    ///
    /// Attempts keep counting: the next attempt is the run's attempt + 1. A dead run has used all
    /// its attempts, so its max attempts is raised by one to allow exactly one more (if that
    /// fails too, the run is dead again).
    ///
    /// Refused (exit 2) for runs that succeeded, were cancelled or skipped, are running, or are
    /// pending without a failed attempt; enqueue a new run with `runner run NAME`.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner history --status dead\n",
        "  runner retry 42"
    ))]
    Retry(steer::RetryArgs),
    /// Cancel a pending run, or stop a running one (its process group is terminated).
    ///
    /// A pending run becomes cancelled and never runs. A running run becomes cancelled at once
    /// and loses its lease; the tick executing it notices at its next heartbeat (within a third
    /// of the lease) and terminates the job's process group (SIGTERM, then SIGKILL). A CANCELLED
    /// event is recorded.
    ///
    /// Refused (exit 2) for runs that already finished.
    ///
    /// With --schedule NAME, every pending and running run of that schedule is cancelled this
    /// way, and the command says how many (runs that finish meanwhile are left alone). New runs
    /// still come from its cron expression: `runner schedule pause NAME` stops those.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner history --status running\n",
        "  runner cancel 42\n",
        "  runner cancel --schedule backup"
    ))]
    Cancel(steer::CancelArgs),
    /// Delete finished runs past retention, with their attempts and events, in small batches.
    ///
    /// Deletes runs that succeeded, went dead, were cancelled or skipped and finished longer ago
    /// than the retention, with their attempts and events, 5,000 runs per short transaction,
    /// pausing between them so ticks running meanwhile are not blocked. Pending and running
    /// runs are never deleted. Pruning never makes a tick run an instant again: each schedule
    /// remembers which instants it handled.
    ///
    /// The tick applies the retention by itself at most once an hour; set RUNNER_RETENTION
    /// (e.g. 90d, or off) where the tick runs, e.g. in the crontab, to change it.
    ///
    /// The database file does not shrink: SQLite reuses the freed pages.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner prune --older-than 90d --dry-run\n",
        "  runner prune --older-than 90d"
    ))]
    Prune(prune::Args),
    /// Move every schedule, its cursor, and its pending runs to another database (e.g. from
    /// SQLite to PostgreSQL); --history moves the finished runs too.
    ///
    /// No instant runs twice and none is lost: the schedules arrive with their cursors exactly
    /// (the target's next tick materialises exactly the instants this database had not), and
    /// the pending runs (due, or waiting to retry) with their attempt counts, idempotency keys,
    /// attempts and events. It all happens while this database's write lock is held, so no tick
    /// runs here meanwhile; the target is written in one transaction; then, here, every
    /// schedule is paused and every moved pending run cancelled ("moved to ..."), so a cron
    /// line left ticking this database runs nothing.
    ///
    /// Refused (exit 2, nothing changed anywhere) while a run is running here, when the target
    /// already has a schedule of one of the names, or when --to is this database.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner migrate --to postgres://runner@db.example.com/runner\n",
        "  runner migrate --to postgres://runner@db.example.com/runner --history\n",
        "  runner --db old.db migrate --to new.db"
    ))]
    Migrate(migrate::Args),
    /// Check the cron setup: the cron line, the daemon, the last tick, the database's
    /// permissions, and the schedules' commands under cron's environment.
    ///
    /// Looks for a line running `runner tick` for this database in your crontab, /etc/crontab and
    /// /etc/cron.d; a running cron daemon; a tick in the last 2 minutes; a database and directory
    /// that a tick run by you accepts; and, for each schedule, that its command's first word
    /// resolves under cron's minimal environment (`env -i`, the crontab's PATH or /usr/bin:/bin,
    /// HOME from passwd, no XDG_*) and that its workdir exists. Run it as the user cron runs the
    /// tick as. Exit 0 when every check passes, 1 with the findings and how to fix each.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner doctor\n",
        "  sudo -u runner runner --db /var/lib/runner/runner.db doctor"
    ))]
    Doctor(doctor::Args),
    /// Print a completion script for bash, zsh or fish.
    ///
    /// Generated from this command line, so it offers exactly runner's commands and flags. Needs
    /// no database.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  # install, then start a new shell\n",
        "  runner completions bash | sudo tee /etc/bash_completion.d/runner\n",
        "  runner completions zsh | sudo tee /usr/local/share/zsh/site-functions/_runner\n",
        "  runner completions fish > ~/.config/fish/completions/runner.fish"
    ))]
    Completions(completions::Args),
    /// Print the man page (roff, section 1).
    ///
    /// Generated from this command line: the global options, then every command with its
    /// summary. Needs no database.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner man | sudo tee /usr/local/share/man/man1/runner.1\n",
        "  runner man | man -l -"
    ))]
    Man(man::Args),
    /// Help on a command, or on a topic: durations, times.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner help durations\n",
        "  runner help times\n",
        "  runner help schedule add"
    ))]
    Help(help::Args),
}

impl Cli {
    /// The command line, parsed; on a mistake, clap's message and exit 2.
    pub fn from_command_line() -> Cli {
        Cli::try_parse().unwrap_or_else(|error| usage_as_typed(error).exit())
    }
}

/// clap takes a flag its environment variable set for one typed, and a missing argument's usage
/// line names the flags typed: with RUNNER_DB set, `runner cancel` said `Usage: runner cancel
/// --db <PATH|URL> <RUN_ID|--schedule <NAME>>`, as if --db were what was missing. The same
/// command line parsed without the variable fails the same way, with the usage line of what was
/// typed. (The variable is still read for the command: this is only the error's text.)
fn usage_as_typed(error: clap::Error) -> clap::Error {
    if error.kind() != clap::error::ErrorKind::MissingRequiredArgument {
        return error;
    }
    let typed = Cli::command().mut_arg("db", |db| db.env(None));
    match typed.try_get_matches() {
        Err(again) if again.kind() == error.kind() => again,
        _ => error,
    }
}

/// What every command gets: where the database is, the clock, and who we are.
pub struct Ctx {
    pub location: Location,
    pub clock: Clock,
    pub verbose: bool,
}

impl Ctx {
    pub fn open(&self, mode: OpenMode) -> Result<Box<dyn Store>> {
        store::open(&self.location, mode)
    }

    /// After creating or using a database where `tick` would refuse to execute (a directory
    /// others can write, such as /tmp), say so now rather than at the first tick under cron.
    pub fn warn_if_unsafe_for_tick(&self) {
        if let Some(e) = store::execution_refusal(&self.location) {
            crate::complain!("runner: warning: `runner tick` will refuse this database: {e:#}");
        }
    }
}

/// A database named on the command line (`--db`, `RUNNER_DB`, `migrate --to`): one check for
/// all of them, refusing what names no database that outlives the command. `''` names none:
/// taking it for the default would let a script whose variable is unset (`--db "$DB"`) act on the
/// user's own database.
pub fn named_database(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err(
            "an empty value names no database; give a file path or a postgres:// URL".to_string(),
        );
    }
    // SQLite's name for a database in memory, gone when the command ends: `schedule add` said
    // "added" and stored nothing (and left an empty file of that name behind).
    if value == ":memory:" {
        return Err(
            ":memory: is SQLite's in-memory database, gone when the command ends; runner needs \
             a database file that outlives it: give a file path (./:memory: for a file of that \
             name)"
                .to_string(),
        );
    }
    if let (Location::Sqlite(_), Some(scheme)) = (Location::parse(value), url_scheme(value)) {
        return Err(not_a_url_we_take(value, scheme));
    }
    // A libpq connection string (`host=db dbname=runner password=...`) taken for a file name
    // became a SQLite database of that name, its password in the file name and every message.
    // The value is not repeated: it may hold a password.
    if let Some(keyword) = libpq_keyword(value) {
        return Err(format!(
            "it begins like a PostgreSQL key=value connection string ({keyword}=...), which \
             runner does not take: give a URL, \
             postgres://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE; for a SQLite file whose name \
             begins so, write ./NAME"
        ));
    }
    Ok(value.to_string())
}

/// The libpq connection keyword a value begins with, as in `host=db` or `dbname = runner`.
fn libpq_keyword(value: &str) -> Option<&str> {
    const KEYWORDS: [&str; 12] = [
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "sslmode",
        "service",
        "connect_timeout",
        "application_name",
        "options",
    ];
    let value = value.trim_start();
    let end = value
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(value.len());
    let (word, rest) = value.split_at(end);
    (KEYWORDS.contains(&word) && rest.trim_start().starts_with('=')).then_some(word)
}

/// The scheme a value begins with, as RFC 3986 writes one (`postgres:`, `sqlite:`, `file:`).
fn url_scheme(value: &str) -> Option<&str> {
    let (scheme, _) = value.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
    .then_some(scheme)
}

/// A value that begins like a URL but is not one runner takes (`postgres:/host/db`,
/// `POSTGRES://...`, `sqlite:///path`, `file:x.db`). Taken as a file name it became a SQLite
/// database in the working directory: on several hosts, each its own. A file whose name has a
/// colon is still reachable as `./NAME`. The value is not repeated: it may hold a password.
fn not_a_url_we_take(value: &str, scheme: &str) -> String {
    let postgres = ["postgres", "postgresql"];
    let rest = &value[scheme.len()..];
    if !postgres.contains(&scheme)
        && postgres.iter().any(|p| scheme.eq_ignore_ascii_case(p))
        && rest.starts_with("://")
    {
        // The postgres crate knows the scheme only in lower case.
        let lower = Location::Postgres(format!("{}{rest}", scheme.to_ascii_lowercase()));
        return format!("write the URL's scheme in lower case: {lower}");
    }
    format!(
        "it begins like a URL ({scheme}:), but the only URLs runner takes are \
         postgres://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE and postgresql://..., for PostgreSQL; \
         for a SQLite file whose name begins so, write ./NAME"
    )
}

/// `migrate --to`, checked by [`named_database`]. A parser of its own so that clap's error names
/// the flag but not the value, which may be a URL with a password. (`--db` and `RUNNER_DB` are
/// checked when a command opens its database: `help`, `completions` and `man` need none, and a
/// `RUNNER_DB` they cannot use must not stop them.)
#[derive(Debug, Clone, Copy)]
pub struct DatabaseName;

impl clap::builder::TypedValueParser for DatabaseName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let flag = arg.map(|arg| format!(" for '{arg}'")).unwrap_or_default();
        let refuse = |why: &str| {
            cmd.clone().error(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value{flag}: {why}"),
            )
        };
        let value = value.to_str().ok_or_else(|| refuse("not valid UTF-8"))?;
        named_database(value).map_err(|why| refuse(&why))
    }
}

/// A value parser that parses exactly as `T::from_str` does (clap's own choice for such a type),
/// and names the values taken, so that shell completion offers them instead of file names. Not
/// clap's `PossibleValuesParser`: that would take only the exact names (`--catch-up ALL` and
/// `' all'` are taken today) and change the messages for a wrong one. Pair it with
/// `hide_possible_values = true`: each flag's help already says its values in a sentence.
#[derive(Clone, Copy)]
pub struct Offering<T> {
    values: Offered,
    parses: std::marker::PhantomData<fn() -> T>,
}

/// What an [`Offering`] offers.
#[derive(Clone, Copy)]
enum Offered {
    Fixed(&'static [&'static str]),
    /// Listed when asked for (completion, help): building the command line's definition, which
    /// every command does, need not list them.
    Listed(fn() -> &'static [&'static str]),
}

impl<T> Offering<T> {
    /// `values`: what completion offers (`Overlap::NAMES`).
    pub const fn new(values: &'static [&'static str]) -> Self {
        Offering {
            values: Offered::Fixed(values),
            parses: std::marker::PhantomData,
        }
    }

    /// `values`: lists what completion offers (`tz::names`), when it is asked for.
    pub const fn listed(values: fn() -> &'static [&'static str]) -> Self {
        Offering {
            values: Offered::Listed(values),
            parses: std::marker::PhantomData,
        }
    }
}

impl<T> clap::builder::TypedValueParser for Offering<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let from_str: fn(&str) -> Result<T, T::Err> = T::from_str;
        from_str.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let values = match self.values {
            Offered::Fixed(values) => values,
            Offered::Listed(list) => list(),
        };
        Some(Box::new(
            values
                .iter()
                .map(|value| clap::builder::PossibleValue::new(*value)),
        ))
    }
}

/// The value parser of every argument that takes an existing schedule's name: a plain string,
/// for which completion offers the database's names (see `completions::SCHEDULE_NAMES`). Pair
/// it with `hide_possible_values = true`. (Not `schedule add`'s NAME: a new name.)
pub const SCHEDULE_NAME: Offering<String> = Offering::new(&[completions::SCHEDULE_NAMES]);

pub fn dispatch(cli: Cli) -> Result<()> {
    let clock = Clock::new(cli.now);
    // The database's location is worked out only for commands that use a database, so
    // `completions` and `man` work with no HOME, RUNNER_DB or database at all.
    let ctx = || -> Result<Ctx> {
        let location = match cli.db.as_deref() {
            Some(value) => Location::parse(&named_database(value).map_err(|why| {
                let default = match value.is_empty() {
                    true => " (for the default database, leave out --db and unset RUNNER_DB)",
                    false => "",
                };
                Failure::usage(format!(
                    "invalid value for --db (or RUNNER_DB): {why}{default}"
                ))
            })?),
            None => Location::Sqlite(Location::default_path()?),
        };
        Ok(Ctx {
            location,
            clock,
            verbose: cli.verbose,
        })
    };
    match cli.command {
        Command::Init(args) => init::run(args, &ctx()?),
        Command::Tick(args) => tick::run(args, &ctx()?),
        Command::Schedule(command) => schedule::run(command, &ctx()?),
        Command::Run(args) => run::run(args, &ctx()?),
        Command::History(args) => history::run(args, &ctx()?),
        Command::Show(args) => show::run(args, &ctx()?),
        Command::Why(args) => why::run(args, &ctx()?),
        Command::Status(args) => status::run(args, &ctx()?),
        Command::Metrics(args) => metrics::run(args, &ctx()?),
        Command::Retry(args) => steer::retry(args, &ctx()?),
        Command::Cancel(args) => steer::cancel(args, &ctx()?),
        Command::Prune(args) => prune::run(args, &ctx()?),
        Command::Migrate(args) => migrate::run(args, &ctx()?),
        Command::Doctor(args) => doctor::run(args, &ctx()?),
        Command::Completions(args) => match args.shell {
            Some(shell) => completions::run(shell),
            None => completions::schedule_names(&ctx()?),
        },
        Command::Man(args) => man::run(args),
        Command::Help(args) => help::run(args),
    }
}

/// Write a command's result to stdout. A reader that went away (`runner history | head`) is not
/// an error: the command did its work and nobody wants the rest.
pub fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("writing to stdout"),
    }
}

/// `--json` output: pretty, one document, newline-terminated.
pub fn emit_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

/// Colours only for a person at a terminal: never with `--json`, into a pipe or file, or when
/// `NO_COLOR` is set (to anything but the empty string, per no-color.org).
pub fn colour_wanted(json: bool) -> bool {
    !json
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A schedule's zone for showing its runs' times; a zone this build no longer knows shows UTC.
pub fn zone(name: &str) -> Tz {
    crate::schedule::parse_zone(name).unwrap_or(Tz::UTC)
}

/// Where fire times stop in `tz`, as the previews (`schedule simulate`, `schedule next`) say it
/// (`5000-01-01T00:00:00+09:00 in Asia/Tokyo`: the start of the year 5000 there), when a search
/// that reaches `until` goes past it; `None` when it does not. Judged in the zone, not in UTC:
/// Tokyo gets there in 4999 (UTC), New York in 5000.
pub fn where_fire_times_stop(tz: Tz, until: DateTime<Utc>) -> Option<String> {
    let last = crate::schedule::last_searchable_instant(tz);
    (until > last).then(|| {
        format!(
            "{} in {}",
            crate::display::local_time(last.timestamp() + 1, tz),
            tz.name()
        )
    })
}

/// The schedule named `name`, to act on: exit 3 if there is none (saying how to list them), exit
/// 4 if its row is damaged (naming the column and the repair).
pub fn find_definition(store: &dyn Store, name: &str) -> Result<crate::model::Definition> {
    find_definition_row(store, name)?.map_err(Failure::database)
}

/// The schedule named `name`, damaged or not; exit 3 if there is none.
pub fn find_definition_row(store: &dyn Store, name: &str) -> Result<store::DefinitionRow> {
    store
        .definition(name)?
        .ok_or_else(|| unknown_schedule(name))
}

/// What keeps a run of `d` that is due at `now` from starting at the next tick, as the end of
/// a message: its schedule is paused (for good, or until a time). None when nothing does (an
/// ended `pause --for` is resumed by the next tick, which then starts the run).
pub fn held_by_pause(d: &crate::model::Definition, now: i64) -> Option<String> {
    if !d.settings.paused {
        return None;
    }
    let name = crate::display::escape_line(&d.name);
    let resume = format!("`runner schedule resume {name}`");
    Some(match d.pause_end() {
        Some(end) if end <= now => return None,
        Some(end) => format!(
            "the schedule is paused until {}, so the run is held until then (or {resume})",
            crate::display::local_time(end, zone(&d.settings.timezone))
        ),
        None => format!("the schedule is paused, so the run is held until {resume}"),
    })
}

/// "No such schedule" (exit 3), saying how to list them.
pub fn unknown_schedule(name: &str) -> anyhow::Error {
    Failure::not_found(format!(
        "no schedule named {name:?}; `runner schedule list` shows them"
    ))
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
        start_time: crate::process::process_start_time(pid),
    }
}

/// A duration flag (`--lease`, `--older-than`, ...): see [`crate::time_input::parse_duration`].
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    crate::time_input::parse_duration(value).map_err(|e| e.to_string())
}

/// A duration stored in whole seconds (`--timeout`, `--backoff-base`, `--backoff-max`,
/// `--grace`): a fraction of a second is refused rather than silently cut off.
pub fn parse_whole_seconds(value: &str) -> Result<Duration, String> {
    let duration = parse_duration(value)?;
    if duration.subsec_nanos() != 0 {
        return Err(format!(
            "{value:?} has a fraction of a second; durations are whole seconds, e.g. 2s, 90s, 1h30m"
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_name_that_begins_like_another_url_is_refused() {
        for taken in [
            "runner.db",
            "./postgres:/x",
            "/var/lib/runner/runner.db",
            "dir/a:b.db",
            "postgres://runner@db.example.com/runner",
            "postgresql:///runner?host=/run/postgresql",
            "~/x.db",
            "1a:b.db",
            "./host=db",
            "hosts=db.db",
            "host.db",
        ] {
            assert_eq!(named_database(taken).as_deref(), Ok(taken));
        }
        for (refused, says) in [
            (
                "postgres:/db.example.com/runner",
                "begins like a URL (postgres:)",
            ),
            ("postgresql:/x", "(postgresql:)"),
            ("sqlite:///abs/path", "(sqlite:)"),
            ("file:x.db", "(file:)"),
            ("file::memory:", "(file:)"),
            ("a+b.c-d:x", "(a+b.c-d:)"),
            ("POSTGRES://u@h/db", "lower case: postgres://u@h/db"),
            ("PostgreSQL://u@h/db", "lower case: postgresql://u@h/db"),
            (
                "host=db dbname=runner",
                "key=value connection string (host=...)",
            ),
            ("dbname = runner", "(dbname=...)"),
            (" user=runner host=/run/postgresql", "(user=...)"),
        ] {
            let message = named_database(refused).expect_err(refused);
            assert!(message.contains(says), "{refused}: {message}");
        }
        // A URL's password is never repeated.
        for refused in [
            "POSTGRES://u:secret@h/db",
            "postgres:/u:secret@h/db",
            "host=h password=secret",
        ] {
            let message = named_database(refused).expect_err(refused);
            assert!(!message.contains("secret"), "{message}");
        }
    }
}
