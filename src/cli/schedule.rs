//! `runner schedule ...`: define, change and inspect schedules.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::ValueHint;
use comfy_table::Table;
use serde::Serialize;

use super::steer::{cancel_before_removal, cancel_run, Cancelled};
use super::{
    actor, find_definition, find_definition_row, parse_whole_seconds, unknown_schedule,
    where_fire_times_stop, Ctx, Offering, SCHEDULE_NAME,
};
use crate::display::{count, duration_of_secs, escape_line, local_time, UtcTime};
use crate::exit::Failure;
use crate::model::RunStatus;
use crate::model::{
    repair_flag, CatchUp, DamagedDefinition, Definition, Leftovers, Overlap, RepairFlag, Settings,
    SettingsChange,
};
use crate::schedule::{search_horizon, traps, Proposed, Timing, Trap};
use crate::store::{DefinitionRow, LastResult, OpenMode, Removal, Store};
use crate::tick::materialize::{
    restart_cursor, resume_definition, resume_if_pause_ended, settle_due,
};
use crate::tz::Tz;

#[derive(Debug, clap::Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Define a schedule; prints its next 5 fire times.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  # every night at 03:00 Berlin time\n",
        "  runner schedule add backup --cron '0 3 * * *' --tz Europe/Berlin -- /usr/local/bin/backup --full\n",
        "  # every 5 minutes, 4 minutes at most, so runs never pile up\n",
        "  runner schedule add sync --cron '*/5 * * * *' --timeout 4m -- rsync -a /srv/ mirror:/srv/\n",
        "  # weekdays at 09:00, from a working directory, created paused\n",
        "  runner schedule add report --cron '0 9 * * MON-FRI' --workdir /srv/app --paused -- ./bin/report\n",
        "\n",
        "Durations (--timeout, --backoff-base, --backoff-max, --grace): `runner help durations`.\n",
        "\n",
        "Warnings (on stderr, exit 0; --quiet silences them) point out traps: day of month and day\n",
        "of week both restricted (cron's OR rule); a fixed time that daylight saving skips or\n",
        "repeats within a year; a --timeout longer than the interval with --overlap forbid; a\n",
        "relative command path without --workdir."
    ))]
    Add(AddArgs),
    /// All schedules with their next fire time and last result.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule list\n",
        "  runner schedule list --json"
    ))]
    List(JsonFlag),
    /// One schedule in full.
    ///
    /// A damaged schedule (a stored value this runner cannot act on) is shown with what could be
    /// read, marked damaged with the problem and the repair, and the command exits 4.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule show backup\n",
        "  runner schedule show backup --json"
    ))]
    Show(NameJson),
    /// Change a schedule; takes effect from its next fire time.
    ///
    /// Also repairs a damaged schedule: give a flag for each damaged column (`schedule list`
    /// names them), e.g. `--tz UTC` or `--max-attempts 3`. It fires again from now on; instants
    /// that passed while it was damaged are not replayed.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule edit backup --cron '30 3 * * *'\n",
        "  runner schedule edit backup --timeout 2h --max-attempts 5\n",
        "  runner schedule edit backup -- /usr/local/bin/backup --incremental\n",
        "  runner schedule edit backup --active    # resume"
    ))]
    Edit(EditArgs),
    /// Delete a schedule with its runs and their history.
    ///
    /// Refused (exit 2) while a run of the schedule is running: removing the schedule kills that
    /// run's job. With --force, each running run is cancelled first, as `runner cancel` does (the
    /// tick holding it terminates its process group at its next heartbeat), and then the
    /// schedule is removed.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule rm backup\n",
        "  runner schedule rm backup --force    # cancel its running run first"
    ))]
    Rm(RmArgs),
    /// Stop a schedule: no new runs, and its pending runs wait.
    ///
    /// A paused schedule materialises no runs, and its runs that are already pending (scheduled
    /// runs not yet started, retries waiting for their time, manual runs from `runner run`) are
    /// held: no tick starts them until the schedule is resumed. `status` counts them. A run that
    /// is running when the schedule is paused runs on (`runner cancel --schedule NAME` stops it).
    /// The pause starts now: instants already due (no tick since) are materialised first, as a
    /// tick would have, and their runs are held too.
    ///
    /// With --cancel-pending, the pending runs are cancelled instead of held (a CANCELLED event
    /// each, as `runner cancel RUN_ID` records). With --for, the first tick at or after that
    /// time resumes the schedule, exactly as `schedule resume` would; a plain pause (or resume)
    /// drops such an end.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule pause backup\n",
        "  runner schedule pause backup --for 2h\n",
        "  runner schedule pause backup --cancel-pending\n",
        "  runner schedule resume backup"
    ))]
    Pause(PauseArgs),
    /// Materialise again, from now on (the paused period is not replayed); held runs start.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule pause backup\n",
        "  runner schedule resume backup"
    ))]
    Resume(Name),
    /// Preview fire times after now (`--now` applies).
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule next backup\n",
        "  runner schedule next backup -n 20\n",
        "  runner schedule next --cron '0 9 * * MON-FRI' --tz Europe/Paris\n",
        "  runner --now 2027-03-27 schedule next --cron '30 2 * * *' --tz Europe/Berlin"
    ))]
    Next(NextArgs),
    /// Move schedules that a clock ahead pushed into the future back to now.
    ///
    /// A tick whose clock was ahead (`--now` in the future, or a host clock that was wrong and
    /// was corrected) moves each schedule's cursor to its time; with the clock right again, such
    /// a schedule does not fire until the clock catches up with its cursor. `status` lists these
    /// schedules, and ticks print a warning while their clock is behind.
    ///
    /// For each schedule whose cursor lies more than a minute ahead of now, reanchor moves the
    /// cursor back to now: its next fire time becomes the first instant after now. Instants
    /// after now that the tick with the clock ahead recorded as skipped are forgotten, so they
    /// are decided again when they come; instants it ran (or left pending until their time) keep
    /// their run and are not materialised again. If a forgotten skip was the one whose reason
    /// counted older instants that tick passed over without a row each, those of them at or
    /// before now get a record: the newest is recorded as skipped, its reason counting the
    /// others. It records no other run. A schedule whose cursor is not ahead is left alone (and
    /// says so). Safe while ticks run.
    ///
    /// `--all` re-anchors every schedule and also lowers the latest time a tick saw to now, so
    /// ticks stop warning that this clock is behind: use it once the clock is known to be right.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner status    # lists schedules whose cursor is ahead\n",
        "  runner schedule reanchor backup\n",
        "  runner schedule reanchor --all"
    ))]
    Reanchor(super::reanchor::Args),
    /// Make the schedules match a TOML file: add, change, leave alone, and with --prune remove.
    ///
    /// The file has one table per schedule, named by the schedule, with the fields of `schedule
    /// add` in snake_case (cron, command, tz, max_attempts, timeout, backoff_base, backoff_max,
    /// overlap, catch_up, grace, workdir, leftovers, paused); a field left out takes the default
    /// of `schedule add`. `command` is a string run by /bin/sh -c, or an array of words run
    /// without a shell. Changes take effect from the next fire time, as with `edit`.
    ///
    /// Prints `+ added`, `~ changed (field: old → new)`, `- removed`, `= unchanged`. All changes
    /// are written in one transaction; an invalid file changes nothing and the error names the
    /// file, line, schedule and field. Applying the same file again changes nothing.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule export > schedules.toml\n",
        "  runner schedule apply schedules.toml --dry-run\n",
        "  runner schedule apply schedules.toml\n",
        "  runner schedule apply schedules.toml --prune    # also remove schedules not in the file"
    ))]
    Apply(super::apply::ApplyArgs),
    /// Print schedules in the TOML format `schedule apply` reads (`export | apply` is a no-op).
    ///
    /// A damaged schedule cannot be exported: it is left out and named on stderr, the rest is
    /// printed, and the command exits 4. Do not apply such a file with --prune: it would remove
    /// the schedules left out.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  runner schedule export > schedules.toml\n",
        "  runner schedule export backup"
    ))]
    Export(super::apply::ExportArgs),
    /// The fire times in a window, and what catch-up would do with them.
    ///
    /// Lists the instants a schedule (or --cron EXPR in --tz ZONE) fires at from --from to --to,
    /// both included, and marks those a daylight-saving rule placed: a fixed-time job whose local
    /// time falls in a spring-forward gap runs once at the transition; in a repeated fall-back
    /// hour a wildcard job runs in both passes and a fixed-time job in the first only.
    ///
    /// For a schedule, it also says which instants its catch-up policy would run and which it
    /// would skip (and why) if no tick ran during the window, i.e. what the first tick at --to
    /// would do. It reads the schedule and writes nothing.
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  # Berlin springs forward on 2027-03-28: the 02:30 run moves to 03:00\n",
        "  runner schedule simulate --cron '30 2 * * *' --tz Europe/Berlin --from 2027-03-27 --to 2027-03-29\n",
        "  # what the first tick after a 6-hour outage would do\n",
        "  runner schedule simulate backup --from '2026-11-23 00:00' --to '2026-11-23 06:00'"
    ))]
    Simulate(super::simulate::Args),
}

#[derive(Debug, clap::Args)]
pub struct Name {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
    /// Resume by itself at the first tick at or after this long from now (e.g. 30m, 2h, 1d).
    #[arg(long = "for", value_name = "DUR", value_parser = parse_whole_seconds)]
    pub for_duration: Option<Duration>,
    /// Cancel the schedule's pending runs instead of holding them until resume.
    #[arg(long)]
    pub cancel_pending: bool,
}

#[derive(Debug, clap::Args)]
pub struct RmArgs {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
    /// Also when a run of it is running: cancel that run (its job is killed), then remove.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct JsonFlag {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct NameJson {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
// `--cron` is shared with `edit`, where it is optional; a new schedule needs one.
#[command(mut_arg("cron", |arg| arg.required(true)))]
pub struct AddArgs {
    /// Schedule name (unique).
    pub name: String,
    #[command(flatten)]
    pub flags: SettingsFlags,
    /// Print no warnings about the schedule's traps (the OR rule for days, daylight saving, a
    /// timeout that skips runs, a relative command path).
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// Schedule name.
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: String,
    #[command(flatten)]
    pub flags: SettingsFlags,
    /// Resume a paused schedule (the paused period is not replayed).
    #[arg(long, conflicts_with = "paused")]
    pub active: bool,
    /// Print no warnings about the changed settings' traps (see `schedule add --help`).
    #[arg(short, long)]
    pub quiet: bool,
}

// The flags `add` takes and `edit` may change. `[add: X]` is the default for a new schedule;
// `edit` keeps the current value of every flag it is not given. (Not a doc comment: clap would
// make it the about of `add` and `edit`, which build their flattened flags after their own.)
#[derive(Debug, clap::Args)]
pub struct SettingsFlags {
    /// Cron expression, Debian cron syntax: five fields or a macro like @daily.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// IANA time zone the expression is evaluated in [add: UTC].
    #[arg(long, value_name = "ZONE", value_parser = Offering::<String>::listed(crate::tz::names),
          hide_possible_values = true)]
    pub tz: Option<String>,
    /// Attempts before a run is dead [add: 3].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_attempts: Option<i64>,
    /// Maximum runtime of one attempt, e.g. 30s, 5m, 1h30m; whole seconds like every duration
    /// here (see `runner help durations`) [add: 1h].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// First retry delay, doubled each attempt [add: 30s].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub backoff_base: Option<Duration>,
    /// Longest retry delay [add: 1h].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub backoff_max: Option<Duration>,
    /// While a run is running, skip (forbid) or also run (allow) a newly due one [add: forbid].
    #[arg(long, value_name = "POLICY", value_parser = Offering::<Overlap>::new(Overlap::NAMES),
          hide_possible_values = true)]
    pub overlap: Option<Overlap>,
    /// Missed instants: run the latest, all (newest 100), or none [add: latest].
    #[arg(long, value_name = "POLICY", value_parser = Offering::<CatchUp>::new(CatchUp::NAMES),
          hide_possible_values = true)]
    pub catch_up: Option<CatchUp>,
    /// How late an instant may start before it counts as missed (catch-up none) [add: 5m].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub grace: Option<Duration>,
    /// Working directory of the job [add: the tick's]; `--workdir ''` unsets it (edit).
    // Any path, the empty one included (clap's own path parser refuses it).
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath,
          value_parser = OsStringValueParser::new().map(PathBuf::from))]
    pub workdir: Option<PathBuf>,
    /// Unset the working directory: the job runs in the tick's (same as `--workdir ''`).
    #[arg(long, conflicts_with = "workdir")]
    pub no_workdir: bool,
    /// When the job's shell exits, kill what it left running in its process group and any
    /// escaped process carrying its marker (kill), or leave it running, for jobs that start
    /// daemons on purpose (keep) [add: kill].
    #[arg(long, value_name = "POLICY", value_parser = Offering::<Leftovers>::new(Leftovers::NAMES),
          hide_possible_values = true)]
    pub leftovers: Option<Leftovers>,
    /// Create (or set) the schedule paused.
    #[arg(long)]
    pub paused: bool,
    /// The command, run by /bin/sh -c (words are joined with spaces).
    #[arg(last = true, value_name = "COMMAND", value_hint = ValueHint::CommandWithArguments)]
    pub command: Vec<String>,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["name", "cron"])))]
pub struct NextArgs {
    /// Schedule name (or use --cron).
    #[arg(value_parser = SCHEDULE_NAME, hide_possible_values = true)]
    pub name: Option<String>,
    /// Preview an expression instead of a schedule.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// Zone for --cron [default: UTC]. Not with NAME: a schedule's fire times are in its own
    /// zone (change it with `schedule edit NAME --tz ZONE`).
    #[arg(long, value_name = "ZONE", requires = "cron", conflicts_with = "name",
          value_parser = super::Offering::<String>::listed(crate::tz::names), hide_possible_values = true)]
    pub tz: Option<String>,
    /// How many fire times (fewer when the expression fires fewer times within about 400 years
    /// ahead, which is as far as it looks).
    #[arg(short = 'n', default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub count: u16,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: Command, ctx: &Ctx) -> Result<()> {
    match command {
        Command::Add(args) => add(args, ctx),
        Command::List(args) => list(args, ctx),
        Command::Show(args) => show(args, ctx),
        Command::Edit(args) => edit(args, ctx),
        Command::Rm(args) => remove(args, ctx),
        Command::Pause(args) => pause(args, ctx),
        Command::Resume(args) => resume(args, ctx),
        Command::Next(args) => next(args, ctx),
        Command::Reanchor(args) => super::reanchor::run(args, ctx),
        Command::Apply(args) => super::apply::apply(args, ctx),
        Command::Export(args) => super::apply::export(args, ctx),
        Command::Simulate(args) => super::simulate::run(args, ctx),
    }
}

impl SettingsFlags {
    /// Whether these flags set the `job_definitions` column (for repairing a damaged one).
    fn sets(&self, column: &str) -> bool {
        match column {
            "cron" => self.cron.is_some(),
            "timezone" => self.tz.is_some(),
            "command" => !self.command.is_empty(),
            "workdir" => self.workdir.is_some() || self.no_workdir,
            "max_attempts" => self.max_attempts.is_some(),
            "timeout_secs" => self.timeout.is_some(),
            "backoff_base_secs" => self.backoff_base.is_some(),
            "backoff_max_secs" => self.backoff_max.is_some(),
            "overlap" => self.overlap.is_some(),
            "catch_up" => self.catch_up.is_some(),
            "grace_secs" => self.grace.is_some(),
            "paused" => self.paused,
            _ => false,
        }
    }

    /// The change these flags ask for (validated by `Settings::changed`).
    fn change(&self) -> SettingsChange {
        SettingsChange {
            cron: self.cron.clone(),
            timezone: self.tz.clone(),
            max_attempts: self.max_attempts,
            timeout: self.timeout,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            overlap: self.overlap,
            catch_up: self.catch_up,
            grace: self.grace,
            // An empty path unsets the directory (`Settings::changed`).
            workdir: match self.no_workdir {
                true => Some(PathBuf::new()),
                false => self.workdir.clone(),
            },
            leftovers: self.leftovers,
            paused: self.paused,
            command: (!self.command.is_empty()).then(|| self.command.join(" ")),
        }
    }
}

fn add(args: AddArgs, ctx: &Ctx) -> Result<()> {
    crate::model::validate_name(&args.name)?;
    let cron = args.flags.cron.as_deref().ok_or_else(|| {
        Failure::usage("--cron EXPR is required, e.g. --cron '0 3 * * *' (Debian cron syntax)")
    })?;
    let settings = Settings::defaults(cron).changed(&args.flags.change())?;
    let timing = settings.timing()?;
    let mut store = ctx.open(OpenMode::CreateIfMissing)?;
    // Read once the store is open: on PostgreSQL, opening it sets the clock to the database's.
    // Read before, it was this host's, and a host clock hours ahead saved a first fire time
    // hours late (behind: a first tick replayed instants from before the schedule existed).
    let now = ctx.clock.read();
    let cursor = restart_cursor(&settings, now.secs(), now.secs())?;
    let definition =
        store.add_definition(&args.name, &settings, now.secs(), cursor.next_fire_at)?;
    ctx.warn_if_unsafe_for_tick();
    let state = if settings.paused { " (paused)" } else { "" };
    say!(
        "added schedule {}{state}: {} in {}",
        definition.name,
        settings.cron,
        settings.timezone
    );
    print_upcoming(&timing, now.time(), 5)?;
    if !args.quiet {
        // A new schedule: every trap is news, except a timeout the user did not choose (the
        // default hour is longer than many intervals, and `forbid` is what they asked for).
        let chose_timeout = args.flags.timeout.is_some() || args.flags.overlap.is_some();
        warn_traps(&settings, &timing, now.time(), |trap| {
            trap != Trap::TimeoutOverlap || chose_timeout
        });
    }
    Ok(())
}

/// Warn on stderr about the traps the schedule falls into that `relevant` keeps (those the
/// command's flags touched).
fn warn_traps(
    settings: &Settings,
    timing: &Timing,
    now: DateTime<Utc>,
    relevant: impl Fn(Trap) -> bool,
) {
    let proposed = Proposed {
        timing,
        timeout_secs: settings.timeout_secs,
        overlap: settings.overlap,
        catch_up: settings.catch_up,
        grace_secs: settings.grace_secs,
        command: &settings.command,
        workdir: settings.workdir.as_deref().map(std::path::Path::new),
    };
    for warning in traps(&proposed, now) {
        if relevant(warning.trap) {
            crate::complain!(
                "runner: warning: {} (--quiet silences this)",
                warning.message
            );
        }
    }
}

fn print_upcoming(timing: &Timing, after: DateTime<Utc>, count: usize) -> Result<()> {
    let times = timing.upcoming(after, count);
    if times.is_empty() {
        say!("it never fires again");
        return Ok(());
    }
    say!("next {} fire times ({}):", times.len(), timing.tz);
    for t in times {
        say!("  {}", local_time(t, timing.tz));
    }
    Ok(())
}

fn edit(args: EditArgs, ctx: &Ctx) -> Result<()> {
    let f = &args.flags;
    let nothing = f.cron.is_none()
        && f.tz.is_none()
        && f.max_attempts.is_none()
        && f.timeout.is_none()
        && f.backoff_base.is_none()
        && f.backoff_max.is_none()
        && f.overlap.is_none()
        && f.catch_up.is_none()
        && f.grace.is_none()
        && f.leftovers.is_none()
        && f.workdir.is_none()
        && !f.no_workdir
        && !f.paused
        && !args.active
        && f.command.is_empty();
    if nothing {
        return Err(Failure::usage(
            "nothing to change; give at least one flag of `schedule add`",
        ));
    }
    let mut store = ctx.open(OpenMode::MustExist)?;
    let (mut definition, repaired) = match find_definition_row(store.as_ref(), &args.name)? {
        Ok(definition) => (definition, None),
        Err(damaged) => {
            let repairs = |column: &str| match repair_flag(column) {
                Some(RepairFlag::Flag(_)) => {
                    args.flags.sets(column) || (column == "paused" && args.active)
                }
                Some(RepairFlag::AnyEdit) => true,
                None => false,
            };
            if !damaged.problems.iter().all(|p| repairs(p.column)) {
                return Err(Failure::database(format!(
                    "this edit leaves it damaged: {damaged}"
                )));
            }
            let columns: Vec<&str> = damaged.problems.iter().map(|p| p.column).collect();
            (damaged.definition.clone(), Some(columns.join(", ")))
        }
    };
    let change = args.flags.change();
    // An invalid change is refused before anything is written.
    definition.settings.changed(&change)?;
    let now = ctx.clock.read();
    // The edit takes effect from the next fire time after now. Instants that came due before the
    // edit belong to the old settings (those since the end of a `pause --for` that has ended
    // too): settle them as the next tick would have, even when the edit pauses the schedule (the
    // pause then holds their runs). Not for a damaged schedule: there are no old settings to run
    // them with.
    let mut earlier = 0;
    if repaired.is_none() {
        let reread = |store: &dyn Store| find_definition(store, &args.name);
        (definition, earlier) = settle_due(store.as_mut(), definition, now, &actor(None), reread)?;
    }
    let mut settings = definition.settings.changed(&change)?;
    if args.active {
        settings.paused = false;
    }
    if args.flags.paused {
        // A plain pause has no end (as `schedule pause` without --for).
        definition.paused_until = None;
    }
    let timing = settings.timing()?;
    let held = if settings.paused {
        "; the pause holds their runs"
    } else {
        ""
    };
    definition.settings = settings;
    // Instants up to now are handled (or, for a paused or damaged schedule, never replayed); the
    // next one follows the new timing.
    definition.set_cursor(restart_cursor(
        &definition.settings,
        definition.materialized_through,
        now.secs(),
    )?);
    store.update_definition(&definition, now.secs())?;
    let name = escape_line(&definition.name);
    match &repaired {
        Some(columns) => {
            // Read it back: the row must now be sound (exit 4 naming what is still wrong).
            find_definition(store.as_ref(), &args.name)?;
            say!("updated schedule {name}: repaired {columns}; it fires again from now on");
        }
        None => say!("updated schedule {name}"),
    }
    if earlier > 0 {
        say!("({earlier} instant(s) already due were materialised under the previous settings first{held})");
    }
    // From its cursor when that lies ahead (a tick whose clock ran ahead): no instant before it
    // will run.
    let now = ctx.clock.now();
    print_upcoming(&timing, definition.previews_after(now), 5)?;
    if !args.quiet {
        // Only the traps of what this edit changed: an old trap was warned about when it was set.
        let f = &args.flags;
        let timing_changed = f.cron.is_some() || f.tz.is_some();
        warn_traps(
            &definition.settings,
            &timing,
            ctx.clock.now(),
            |trap| match trap {
                Trap::DaysEither | Trap::DaylightSaving => timing_changed,
                Trap::TimeoutOverlap => f.timeout.is_some() || f.overlap.is_some(),
                Trap::ShortGrace => f.grace.is_some() || f.catch_up.is_some(),
                Trap::RelativeCommand => {
                    !f.command.is_empty() || f.workdir.is_some() || f.no_workdir
                }
            },
        );
    }
    Ok(())
}

fn remove(args: RmArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let me = actor(None);
    // With --force, a run that starts between the cancel and the removal is cancelled in turn;
    // a schedule whose runs keep starting that fast is given up on after a few rounds.
    for _ in 0..5 {
        let running = match store.remove_definition(&args.name)? {
            Removal::Removed => {
                say!("removed schedule {} and its runs", escape_line(&args.name));
                return Ok(());
            }
            Removal::NotFound => return Err(unknown_schedule(&args.name)),
            Removal::Running(running) => running,
        };
        let runs = running
            .iter()
            .map(|id| store.run(*id))
            .collect::<crate::store::Result<Vec<_>>>()?;
        let runs: Vec<_> = runs.into_iter().flatten().collect();
        if !args.force {
            let listed: Vec<String> = runs
                .iter()
                .map(|r| {
                    format!(
                        "run {} (attempt {}, held by {})",
                        r.id,
                        r.attempt,
                        escape_line(r.owner.as_deref().unwrap_or("?"))
                    )
                })
                .collect();
            let name = escape_line(&args.name);
            return Err(Failure::usage(format!(
                "schedule {name} has {} running: {}; removing the schedule kills its job (the run is \
                 cancelled and the tick holding it terminates its process group at its next \
                 heartbeat). Wait for it to finish, or use `runner schedule rm {name} --force`",
                if listed.len() == 1 { "a run" } else { "runs" },
                listed.join(", ")
            )));
        }
        for run in &runs {
            cancel_before_removal(store.as_mut(), ctx, &me, run)?;
        }
    }
    Err(anyhow::anyhow!(
        "schedule {} keeps starting runs while being removed; pause it first (`runner schedule pause {}`), then remove it",
        escape_line(&args.name),
        escape_line(&args.name)
    ))
}

fn pause(args: PauseArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let definition = find_definition(store.as_ref(), &args.name)?;
    let read = ctx.clock.read();
    let now = read.secs();
    let until = match args.for_duration {
        None => None,
        Some(d) => Some(pause_end(now, d)?),
    };
    // The paused period starts now: the instants already due (no tick since; those since the end
    // of a `pause --for` that has ended too) belong to the schedule before it. Settled first, as
    // the next tick would have, by its catch-up policy; their runs are then held (or cancelled)
    // below like any pending run.
    let reread = |store: &dyn Store| find_definition(store, &args.name);
    let (mut definition, earlier) =
        settle_due(store.as_mut(), definition, read, &actor(None), reread)?;
    let name = escape_line(&definition.name);
    let zone = super::zone(&definition.settings.timezone);
    if definition.settings.paused && definition.pause_end() == until {
        say!(
            "schedule {name} is already paused{}",
            until_text(until, zone)
        );
    } else {
        definition.settings.paused = true;
        definition.paused_until = until;
        store.update_definition(&definition, now)?;
        say!("paused schedule {name}{}", until_text(until, zone));
    }
    if earlier > 0 {
        say!(
            "{} already due {} materialised first, as a tick would have: the pause starts after {}",
            count(earlier, "instant"),
            if earlier == 1 { "was" } else { "were" },
            if earlier == 1 { "it" } else { "them" }
        );
    }
    // Paused first, so no tick starts them meanwhile: the claim rule holds a paused schedule's runs.
    let pending = super::steer::runs_of(store.as_ref(), definition.id, RunStatus::Pending)?;
    if args.cancel_pending {
        let me = actor(None);
        let mut cancelled = 0;
        for run in &pending {
            // Nothing of a paused schedule starts, so each is still pending, or gone or finished
            // (cancelled meanwhile): those are left alone.
            if let Cancelled::Pending = cancel_run(store.as_mut(), ctx, &me, run)? {
                cancelled += 1;
            }
        }
        say!("cancelled {}", count(cancelled, "pending run"));
    } else if !pending.is_empty() {
        say!(
            "{} held until it resumes (`--cancel-pending` cancels them)",
            count(pending.len(), "pending run")
        );
    }
    Ok(())
}

/// When a pause `--for` this long from `now` ends.
fn pause_end(now: i64, d: Duration) -> Result<i64> {
    // At most 10 years, as every duration setting: a pause without an end is `pause` alone.
    i64::try_from(d.as_secs())
        .ok()
        .filter(|secs| *secs > 0 && *secs as u64 <= crate::model::DURATION_MAX_SECS)
        .and_then(|secs| now.checked_add(secs))
        .ok_or_else(|| {
            Failure::usage(
                "--for must be at least 1s and at most 10 years, e.g. 30m, 2h, 1d (without \
                 --for, the pause has no end)",
            )
        })
}

/// " until T (resumes at the first tick after)", or nothing for a pause without an end.
fn until_text(until: Option<i64>, zone: Tz) -> String {
    until.map_or_else(String::new, |at| {
        format!(
            " until {} (the first tick from then resumes it)",
            local_time(at, zone)
        )
    })
}

fn resume(args: Name, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let mut definition = find_definition(store.as_ref(), &args.name)?;
    let name = escape_line(&definition.name);
    if !definition.settings.paused {
        say!("schedule {name} is already active");
        return Ok(());
    }
    let now = ctx.clock.epoch();
    // A `pause --for` that has ended resumes from its end, as the next tick would have: the
    // instants since are the schedule's, not part of the pause.
    if resume_if_pause_ended(store.as_mut(), definition.clone(), now)? {
        say!(
            "resumed schedule {name} (its pause had ended; the next tick catches up from the end)"
        );
        return Ok(());
    }
    resume_definition(&mut definition, now)?;
    store.update_definition(&definition, now)?;
    say!("resumed schedule {name}");
    Ok(())
}

fn next(args: NextArgs, ctx: &Ctx) -> Result<()> {
    let (timing, after) = match (&args.name, &args.cron) {
        (Some(name), _) => {
            // The store is opened before the clock is read: on PostgreSQL, opening it sets the
            // clock to the database's (as `add` does).
            let store = ctx.open(OpenMode::MustExist)?;
            let definition = find_definition(store.as_ref(), name)?;
            let timing = definition.settings.timing()?;
            (timing, definition.previews_after(ctx.clock.now()))
        }
        (None, Some(cron)) => {
            let timing =
                Timing::parse(cron, args.tz.as_deref().unwrap_or("UTC")).map_err(Failure::usage)?;
            (timing, ctx.clock.now())
        }
        (None, None) => return Err(Failure::usage("give a schedule NAME or --cron EXPR")),
    };
    let times = timing.upcoming(after, usize::from(args.count));
    if times.len() < usize::from(args.count) {
        // The search looks about 400 years ahead (`0 0 29 2 *` fires 97 or 98 times in them),
        // and no later than the year 5000 in the zone.
        let horizon = match where_fire_times_stop(timing.tz, search_horizon(timing.tz, after)) {
            Some(stop) => {
                format!("up to the year 5000 ({stop}, where runner stops computing fire times)")
            }
            None => "within about 400 years ahead (as far as it looks)".to_string(),
        };
        crate::complain!(
            "runner: note: only {} {horizon}, fewer than the {} asked for",
            count(times.len(), "fire time"),
            args.count
        );
    }
    let times: Vec<FireTime> = times.iter().map(|&t| FireTime::of(t, timing.tz)).collect();
    if args.json {
        say!("{}", serde_json::to_string_pretty(&times)?);
    } else {
        for t in times {
            say!("{}", t.local);
        }
    }
    Ok(())
}

/// One fire time of `schedule next`: the local time it prints, and in JSON the instant too.
#[derive(Debug, Serialize)]
struct FireTime {
    at: UtcTime,
    at_epoch: i64,
    local: String,
}

impl FireTime {
    fn of(epoch: i64, tz: Tz) -> FireTime {
        FireTime {
            at: UtcTime(epoch),
            at_epoch: epoch,
            local: local_time(epoch, tz),
        }
    }
}

/// A row as read, split into what could be read and, when damaged, what is wrong with it.
fn split(row: &DefinitionRow) -> (&Definition, Option<&DamagedDefinition>) {
    match row {
        Ok(definition) => (definition, None),
        Err(damaged) => (&damaged.definition, Some(damaged.as_ref())),
    }
}

/// The state `list` and `show` print: active, paused, or damaged.
fn state_text(row: &DefinitionRow) -> &'static str {
    match row {
        Err(_) => "damaged",
        Ok(d) if d.settings.paused => "paused",
        Ok(_) => "active",
    }
}

/// A schedule as `schedule list` and `schedule show` print it, and as JSON (each `list --json`
/// entry, and `show --json`): both rendered from this. A damaged schedule has `"state":
/// "damaged"`, `problem`, `damaged_columns` and `repair`, and None (null) in place of every value
/// it could not read.
#[derive(Debug, Serialize)]
struct ScheduleView<'a> {
    name: Option<&'a str>,
    cron: Option<&'a str>,
    timezone: Option<&'a str>,
    command: Option<&'a str>,
    workdir: Option<&'a str>,
    state: &'static str,
    max_attempts: Option<u32>,
    timeout_secs: Option<i64>,
    backoff_base_secs: Option<i64>,
    backoff_max_secs: Option<i64>,
    overlap: Option<Overlap>,
    catch_up: Option<CatchUp>,
    grace_secs: Option<i64>,
    leftovers: Option<Leftovers>,
    next_fire_at: Option<UtcTime>,
    next_fire_at_epoch: Option<i64>,
    /// `pause --for`: the first tick at or after this time resumes it.
    paused_until: Option<UtcTime>,
    paused_until_epoch: Option<i64>,
    created_at: Option<UtcTime>,
    created_at_epoch: Option<i64>,
    /// Since when its cron and zone rule: their last change, else its creation (`why` judges
    /// the times before it by them too, and says so).
    timing_changed_at: Option<UtcTime>,
    timing_changed_at_epoch: Option<i64>,
    last_result: Option<LastResultView<'a>>,
    #[serde(flatten)]
    damage: Option<Damage>,
    #[serde(skip)]
    id: i64,
    /// Whether the expression is a wildcard one; None while damaged.
    #[serde(skip)]
    wildcard: Option<bool>,
    #[serde(skip)]
    damaged: Option<&'a DamagedDefinition>,
    #[serde(skip)]
    now: i64,
}

#[derive(Debug, Serialize)]
struct LastResultView<'a> {
    run_id: i64,
    status: &'a str,
    error_code: Option<&'a str>,
    scheduled_for: UtcTime,
    scheduled_for_epoch: i64,
}

/// What is wrong with a damaged schedule, and the repair.
#[derive(Debug, Serialize)]
struct Damage {
    problem: String,
    damaged_columns: Vec<&'static str>,
    repair: String,
}

impl<'a> ScheduleView<'a> {
    fn of(row: &'a DefinitionRow, last: Option<&'a LastResult>, now: i64) -> Result<Self> {
        let (d, damaged) = split(row);
        let s = &d.settings;
        // A damaged column's placeholder is never shown: its value is None.
        let ok = |column: &str| !damaged.is_some_and(|x| x.is_damaged(column));
        let next_fire_at = match row {
            Ok(d) if !d.settings.paused => upcoming_fire(d, now)?,
            _ => None,
        };
        let created_at = ok("created_at").then_some(d.created_at);
        let paused_until = d.pause_end().filter(|_| ok("paused_until"));
        let timing_since =
            (ok("timing_changed_at") && ok("created_at")).then(|| crate::why::timing_since(d));
        Ok(ScheduleView {
            name: ok("name").then_some(d.name.as_str()),
            cron: ok("cron").then_some(s.cron.as_str()),
            timezone: ok("timezone").then_some(s.timezone.as_str()),
            command: ok("command").then_some(s.command.as_str()),
            workdir: s.workdir.as_deref().filter(|_| ok("workdir")),
            state: state_text(row),
            max_attempts: ok("max_attempts").then_some(s.max_attempts),
            timeout_secs: ok("timeout_secs").then_some(s.timeout_secs),
            backoff_base_secs: ok("backoff_base_secs").then_some(s.backoff_base_secs),
            backoff_max_secs: ok("backoff_max_secs").then_some(s.backoff_max_secs),
            overlap: ok("overlap").then_some(s.overlap),
            catch_up: ok("catch_up").then_some(s.catch_up),
            grace_secs: ok("grace_secs").then_some(s.grace_secs),
            leftovers: ok("leftovers").then_some(s.leftovers),
            next_fire_at: next_fire_at.map(UtcTime),
            next_fire_at_epoch: next_fire_at,
            paused_until: paused_until.map(UtcTime),
            paused_until_epoch: paused_until,
            created_at: created_at.map(UtcTime),
            created_at_epoch: created_at,
            timing_changed_at: timing_since.map(UtcTime),
            timing_changed_at_epoch: timing_since,
            last_result: last.map(|l| LastResultView {
                run_id: l.run_id,
                status: &l.status,
                error_code: l.error_code.as_deref(),
                scheduled_for: UtcTime(l.scheduled_for),
                scheduled_for_epoch: l.scheduled_for,
            }),
            damage: damaged.map(|x| Damage {
                problem: x.problem_text(),
                damaged_columns: x.problems.iter().map(|p| p.column).collect(),
                repair: x.repair_hint(),
            }),
            id: d.id,
            wildcard: match row {
                Ok(d) => Some(d.settings.timing()?.cron.is_wildcard()),
                Err(_) => None,
            },
            damaged,
            now,
        })
    }

    fn is_damaged(&self, column: &str) -> bool {
        self.damaged.is_some_and(|x| x.is_damaged(column))
    }

    /// NEXT FIRE: a time, `never`, `(paused)`, `(paused until T)`, or what is wrong with a
    /// damaged schedule.
    fn next_fire_text(&self) -> String {
        match (&self.damage, self.state, self.next_fire_at_epoch) {
            (Some(damage), _, _) => damage.problem.clone(),
            (None, "paused", _) => format!("({})", self.paused_text()),
            (None, _, Some(at)) => local_time(at, self.zone()),
            (None, _, None) => "never".to_string(),
        }
    }

    /// `paused`, or `paused until T` for a pause with an end (which has passed when the next
    /// tick has yet to resume it).
    fn paused_text(&self) -> String {
        match self.paused_until_epoch {
            Some(at) if at <= self.now => format!(
                "paused until {}, ended: the next tick resumes it",
                local_time(at, self.zone())
            ),
            Some(at) => format!("paused until {}", local_time(at, self.zone())),
            None => "paused".to_string(),
        }
    }

    fn zone(&self) -> Tz {
        super::zone(self.timezone.unwrap_or("UTC"))
    }

    fn last_result_text(&self) -> String {
        match &self.last_result {
            Some(last) => match last.error_code {
                Some(code) => format!("{} {} (run {})", last.status, code, last.run_id),
                None => format!("{} (run {})", last.status, last.run_id),
            },
            None => "-".to_string(),
        }
    }
}

/// Every schedule's view, with the last result each one needs.
fn views<'a>(
    rows: &'a [DefinitionRow],
    lasts: &'a [Option<LastResult>],
    now: i64,
) -> Result<Vec<ScheduleView<'a>>> {
    rows.iter()
        .zip(lasts)
        .map(|(row, last)| ScheduleView::of(row, last.as_ref(), now))
        .collect()
}

fn last_results(store: &dyn Store, rows: &[DefinitionRow]) -> Result<Vec<Option<LastResult>>> {
    rows.iter()
        .map(|row| Ok(store.last_result(split(row).0.id)?))
        .collect()
}

/// The next fire time after now. (The stored `next_fire_at` is the materialisation cursor's
/// next instant, which lies in the past while no tick has run since.)
fn upcoming_fire(d: &Definition, now: i64) -> Result<Option<i64>> {
    Ok(d.settings.timing()?.next_after(d.handled_through(now)))
}

fn list(args: JsonFlag, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let rows = store.definitions()?;
    let lasts = last_results(store.as_ref(), &rows)?;
    let views = views(&rows, &lasts, ctx.clock.epoch())?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&views)?);
        return Ok(());
    }
    if views.is_empty() {
        say!("no schedules yet; add one with `runner schedule add NAME --cron EXPR -- COMMAND`");
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["NAME", "CRON", "ZONE", "STATE", "NEXT FIRE", "LAST RESULT"]);
    let shown = |value: Option<&str>| value.map_or_else(|| "?".to_string(), escape_line);
    for view in &views {
        table.add_row([
            view.name
                .map_or_else(|| format!("(id {})", view.id), escape_line),
            shown(view.cron),
            shown(view.timezone),
            view.state.to_string(),
            view.next_fire_text(),
            view.last_result_text(),
        ]);
    }
    say!("{}", table.trim_fmt());
    for damaged in rows.iter().filter_map(|row| row.as_ref().err()) {
        crate::complain!("runner: warning: {damaged}");
    }
    Ok(())
}

fn show(args: NameJson, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let row = find_definition_row(store.as_ref(), &args.name)?;
    let last = store.last_result(split(&row).0.id)?;
    let view = ScheduleView::of(&row, last.as_ref(), ctx.clock.epoch())?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        show_text(&view)?;
    }
    // A damaged schedule is shown, and the exit code says it cannot run (4: the stored row is bad).
    match row {
        Ok(_) => Ok(()),
        Err(damaged) => Err(Failure::database(damaged)),
    }
}

fn show_text(view: &ScheduleView) -> Result<()> {
    let shown = |value: Option<&str>| value.map_or_else(|| "?".to_string(), escape_line);
    let or_damaged = |text: Option<String>| text.unwrap_or_else(|| "? (damaged)".to_string());
    let secs = |value: Option<i64>| or_damaged(value.map(duration_of_secs));
    say!("name:         {}", shown(view.name));
    let kind = match view.wildcard {
        Some(true) => "wildcard, ",
        Some(false) => "fixed-time, ",
        None => "",
    };
    say!(
        "cron:         {} ({kind}{})",
        shown(view.cron),
        shown(view.timezone)
    );
    say!(
        "timing since: {}",
        match (view.timing_changed_at_epoch, view.created_at_epoch) {
            (Some(at), Some(created)) if at == created =>
                format!("{} (when it was added)", local_time(at, view.zone())),
            (Some(at), _) => format!(
                "{} (when its cron or zone last changed)",
                local_time(at, view.zone())
            ),
            (None, _) => "? (damaged)".to_string(),
        }
    );
    say!("command:      {}", shown(view.command));
    say!(
        "workdir:      {}",
        match view.workdir {
            _ if view.is_damaged("workdir") => "?".to_string(),
            Some(dir) => escape_line(dir),
            None => "(the tick's)".to_string(),
        }
    );
    match view.state {
        "paused" => say!("state:        {}", view.paused_text()),
        state => say!("state:        {state}"),
    }
    if let Some(damage) = &view.damage {
        // How to repair it follows on stderr, with the exit code.
        say!("problem:      {}", damage.problem);
    }
    say!(
        "attempts:     {} max, timeout {}",
        or_damaged(view.max_attempts.map(|n| n.to_string())),
        secs(view.timeout_secs)
    );
    say!(
        "backoff:      {} doubling, at most {}, jittered",
        secs(view.backoff_base_secs),
        secs(view.backoff_max_secs)
    );
    say!(
        "overlap:      {}",
        or_damaged(view.overlap.map(|p| p.to_string()))
    );
    say!(
        "leftovers:    {}",
        or_damaged(view.leftovers.map(|p| p.to_string()))
    );
    say!(
        "catch-up:     {} (grace {})",
        or_damaged(view.catch_up.map(|p| p.to_string())),
        secs(view.grace_secs)
    );
    say!(
        "next fire:    {}",
        match view.damage {
            None => view.next_fire_text(),
            Some(_) => "(none while damaged)".to_string(),
        }
    );
    say!("last result:  {}", view.last_result_text());
    Ok(())
}
