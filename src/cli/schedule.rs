//! `runner schedule ...`: define, change and inspect schedules.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use comfy_table::Table;
use serde_json::{json, Value};

use super::{
    actor, find_definition, find_definition_row, parse_whole_seconds, unknown_schedule, Ctx,
};
use crate::display::{escape_line, local_time, put_time};
use crate::exit::Failure;
use crate::model::{
    repair_flag, Cursor, DamagedDefinition, Definition, Leftovers, Overlap, RepairFlag, Settings,
    SettingsChange, Steer, Steered,
};
use crate::schedule::{parse_zone, CatchUp};
use crate::store::{DefinitionRow, OpenMode, Removal, Store};
use crate::tick::materialize::materialize_definition;
use crate::timing::Timing;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Define a schedule; prints its next 5 fire times.
    Add(AddArgs),
    /// All schedules with their next fire time and last result.
    List(JsonFlag),
    /// One schedule in full.
    ///
    /// A damaged schedule (a stored value this runner cannot act on) is shown with what could be
    /// read, marked damaged with the problem and the repair, and the command exits 4.
    Show(NameJson),
    /// Change a schedule; takes effect from its next fire time.
    ///
    /// Also repairs a damaged schedule: give a flag for each damaged column (`schedule list`
    /// names them), e.g. `--tz UTC` or `--max-attempts 3`. It fires again from now on; instants
    /// that passed while it was damaged are not replayed.
    Edit(EditArgs),
    /// Delete a schedule with its runs and their history.
    ///
    /// Refused (exit 2) while a run of the schedule is running: removing the schedule kills that
    /// run's job. With --force, each running run is cancelled first, as `runner cancel` does (the
    /// tick holding it terminates its process group at its next heartbeat), and then the
    /// schedule is removed.
    Rm(RmArgs),
    /// Stop materialising runs for a schedule.
    Pause(Name),
    /// Materialise again, from now on (the paused period is not replayed).
    Resume(Name),
    /// Preview fire times after now (`--now` applies).
    Next(NextArgs),
    /// Move schedules that a clock ahead pushed into the future back to now.
    ///
    /// A tick whose clock was ahead (`--now` in the future, or a host clock that was wrong and
    /// was corrected) moves each schedule's cursor to its time; with the clock right again, such
    /// a schedule does not fire until the clock catches up with its cursor. `status` lists these
    /// schedules, and ticks print a warning while their clock is behind.
    ///
    /// For each schedule whose cursor lies more than a minute ahead of now, reanchor moves the
    /// cursor back to now: its next fire time becomes the first instant after now. It records
    /// no run. Instants after now that the tick with the clock ahead recorded as skipped are
    /// forgotten, so they are decided again when they come; instants it ran (or left pending
    /// until their time) keep their run and are not materialised again. A schedule whose cursor
    /// is not ahead is left alone (and says so). Safe while ticks run.
    ///
    /// `--all` re-anchors every schedule and also lowers the latest time a tick saw to now, so
    /// ticks stop warning that this clock is behind: use it once the clock is known to be right.
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
    Apply(super::apply::ApplyArgs),
    /// Print schedules in the TOML format `schedule apply` reads (`export | apply` is a no-op).
    Export(super::apply::ExportArgs),
}

#[derive(Debug, clap::Args)]
pub struct Name {
    /// Schedule name.
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct RmArgs {
    /// Schedule name.
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
    pub name: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// Schedule name (unique).
    pub name: String,
    #[command(flatten)]
    pub flags: SettingsFlags,
}

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// Schedule name.
    pub name: String,
    #[command(flatten)]
    pub flags: SettingsFlags,
    /// Resume a paused schedule (the paused period is not replayed).
    #[arg(long, conflicts_with = "paused")]
    pub active: bool,
}

/// The flags `add` takes and `edit` may change. `[add: X]` is the default for a new schedule;
/// `edit` keeps the current value of every flag it is not given.
#[derive(Debug, clap::Args)]
pub struct SettingsFlags {
    /// Cron expression, Debian cron syntax: five fields or a macro like @daily.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// IANA time zone the expression is evaluated in [add: UTC].
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Attempts before a run is dead [add: 3].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_attempts: Option<i64>,
    /// Maximum runtime of one attempt, in whole seconds like every duration here [add: 1h].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// First retry delay, doubled each attempt [add: 30s].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub backoff_base: Option<Duration>,
    /// Longest retry delay [add: 1h].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub backoff_max: Option<Duration>,
    /// While a run is running, skip (forbid) or also run (allow) a newly due one [add: forbid].
    #[arg(long, value_name = "POLICY", value_parser = parse_overlap)]
    pub overlap: Option<Overlap>,
    /// Missed instants: run the latest, all (newest 100), or none [add: latest].
    #[arg(long, value_name = "POLICY", value_parser = parse_catch_up)]
    pub catch_up: Option<CatchUp>,
    /// How late an instant may start before it counts as missed (catch-up none) [add: 5m].
    #[arg(long, value_name = "DUR", value_parser = parse_whole_seconds, allow_hyphen_values = true)]
    pub grace: Option<Duration>,
    /// Working directory of the job [add: the tick's].
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// When the job's shell exits, kill what it left running in its process group and any
    /// escaped process carrying its marker (kill), or leave it running, for jobs that start
    /// daemons on purpose (keep) [add: kill].
    #[arg(long, value_name = "POLICY", value_parser = parse_leftovers)]
    pub leftovers: Option<Leftovers>,
    /// Create (or set) the schedule paused.
    #[arg(long)]
    pub paused: bool,
    /// The command, run by /bin/sh -c (words are joined with spaces).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct NextArgs {
    /// Schedule name (or use --cron).
    #[arg(required_unless_present = "cron", conflicts_with = "cron")]
    pub name: Option<String>,
    /// Preview an expression instead of a schedule.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// Zone for --cron [default: UTC].
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub tz: Option<String>,
    /// How many fire times.
    #[arg(short = 'n', default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub count: u16,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

fn parse_overlap(value: &str) -> Result<Overlap, String> {
    value.parse()
}

fn parse_leftovers(value: &str) -> Result<Leftovers, String> {
    value.parse()
}

fn parse_catch_up(value: &str) -> Result<CatchUp, String> {
    value
        .parse()
        .map_err(|e: crate::schedule::CronError| e.to_string())
}

pub fn run(command: Command, ctx: &Ctx) -> Result<()> {
    match command {
        Command::Add(args) => add(args, ctx),
        Command::List(args) => list(args, ctx),
        Command::Show(args) => show(args, ctx),
        Command::Edit(args) => edit(args, ctx),
        Command::Rm(args) => remove(args, ctx),
        Command::Pause(args) => set_paused(args, ctx, true),
        Command::Resume(args) => set_paused(args, ctx, false),
        Command::Next(args) => next(args, ctx),
        Command::Reanchor(args) => super::reanchor::run(args, ctx),
        Command::Apply(args) => super::apply::apply(args, ctx),
        Command::Export(args) => super::apply::export(args, ctx),
    }
}

impl SettingsFlags {
    /// Whether these flags set the `job_definitions` column (for repairing a damaged one).
    fn sets(&self, column: &str) -> bool {
        match column {
            "cron" => self.cron.is_some(),
            "timezone" => self.tz.is_some(),
            "command" => !self.command.is_empty(),
            "workdir" => self.workdir.is_some(),
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
            workdir: self.workdir.clone(),
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
    let timing = Timing::of(&settings)?;
    let now = ctx.clock.epoch();
    let mut store = ctx.open(OpenMode::CreateIfMissing)?;
    let cursor = Cursor::restart(&settings, now, now)?;
    let definition = store.add_definition(&args.name, &settings, now, cursor.next_fire_at)?;
    ctx.warn_if_unsafe_for_tick();
    let state = if settings.paused { " (paused)" } else { "" };
    say!(
        "added schedule {}{state}: {} in {}",
        definition.name,
        settings.cron,
        settings.timezone
    );
    print_upcoming(&timing, ctx.clock.now(), 5)?;
    Ok(())
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
    let mut settings = definition.settings.changed(&args.flags.change())?;
    if args.active {
        settings.paused = false;
    }
    let timing = Timing::of(&settings)?;
    let now = ctx.clock.read();
    // The edit takes effect from the next fire time after now. Instants that came due before the
    // edit belong to the old settings: materialise them as the next tick would have (unless the
    // schedule is or becomes paused: pausing stops materialising at once, as `pause` does; or
    // it was damaged: there are no old settings to run them with).
    let earlier = if !definition.settings.paused && !settings.paused && repaired.is_none() {
        let n = materialize_definition(store.as_mut(), &definition, now, &actor(None))?;
        definition = find_definition(store.as_ref(), &args.name)?;
        n
    } else {
        0
    };
    definition.settings = settings;
    // Instants up to now are handled (or, for a paused or damaged schedule, never replayed); the
    // next one follows the new timing.
    definition.restart_cursor(now.secs())?;
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
        say!("({earlier} instant(s) already due were materialised under the previous settings first)");
    }
    print_upcoming(&timing, ctx.clock.now(), 5)?;
    Ok(())
}

fn remove(args: RmArgs, ctx: &Ctx) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let me = actor(None);
    let mut cancelled = Vec::new();
    // With --force, a run that starts between the cancel and the removal is cancelled in turn;
    // a schedule whose runs keep starting that fast is given up on after a few rounds.
    for _ in 0..5 {
        let running = match store.remove_definition(&args.name)? {
            Removal::Removed => {
                for line in &cancelled {
                    say!("{line}");
                }
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
        for run in runs {
            if let Steered::Done { attempt, .. } =
                store.steer(run.id, Steer::Cancel, ctx.clock.epoch(), &me)?
            {
                // Before the schedule (and so the attempt's record) is gone: if its runner died,
                // nobody else could find and stop the job afterwards.
                let how = super::steer::stop_cancelled(store.as_mut(), ctx, &me, &run, attempt)?;
                cancelled.push(format!(
                    "cancelled running run {} (attempt {attempt}); {how}",
                    run.id
                ));
            }
        }
    }
    Err(anyhow::anyhow!(
        "schedule {} keeps starting runs while being removed; pause it first (`runner schedule pause {}`), then remove it",
        escape_line(&args.name),
        escape_line(&args.name)
    ))
}

fn set_paused(args: Name, ctx: &Ctx, paused: bool) -> Result<()> {
    let mut store = ctx.open(OpenMode::MustExist)?;
    let mut definition = find_definition(store.as_ref(), &args.name)?;
    let verb = if paused { "paused" } else { "resumed" };
    if definition.settings.paused == paused {
        say!(
            "schedule {} is already {}",
            definition.name,
            if paused { "paused" } else { "active" }
        );
        return Ok(());
    }
    let now = ctx.clock.epoch();
    if !paused {
        // Resuming does not replay the paused period: catch-up starts from now.
        definition.restart_cursor(now)?;
    }
    definition.settings.paused = paused;
    store.update_definition(&definition, now)?;
    say!("{verb} schedule {}", definition.name);
    Ok(())
}

fn next(args: NextArgs, ctx: &Ctx) -> Result<()> {
    let timing = match (&args.name, &args.cron) {
        (Some(name), _) => {
            let store = ctx.open(OpenMode::MustExist)?;
            Timing::of(&find_definition(store.as_ref(), name)?.settings)?
        }
        (None, Some(cron)) => Timing::of(&Settings {
            timezone: args.tz.clone().unwrap_or_else(|| "UTC".to_string()),
            ..Settings::defaults(cron)
        })?,
        (None, None) => return Err(Failure::usage("give a schedule NAME or --cron EXPR")),
    };
    let times = timing.upcoming(ctx.clock.now(), usize::from(args.count));
    if args.json {
        let list: Vec<Value> = times
            .iter()
            .map(|t| fire_time_json(*t, timing.tz))
            .collect();
        say!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        for t in times {
            say!("{}", local_time(t, timing.tz));
        }
    }
    Ok(())
}

fn fire_time_json(epoch: i64, tz: Tz) -> Value {
    let mut object = serde_json::Map::new();
    put_time(&mut object, "at", Some(epoch));
    object.insert("local".into(), json!(local_time(epoch, tz)));
    Value::Object(object)
}

fn last_result_text(store: &dyn Store, definition: &Definition) -> Result<String> {
    Ok(match store.last_result(definition.id)? {
        Some(last) => match last.error_code {
            Some(code) => format!("{} {} (run {})", last.status, code, last.run_id),
            None => format!("{} (run {})", last.status, last.run_id),
        },
        None => "-".to_string(),
    })
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

/// A schedule as JSON: the shape of each `schedule list --json` entry and of `schedule show
/// --json`. A damaged one has `"state": "damaged"`, `problem`, `damaged_columns` and `repair`,
/// and null in place of every value it could not read.
fn definition_json(store: &dyn Store, row: &DefinitionRow, now: i64) -> Result<Value> {
    let (d, damaged) = split(row);
    let s = &d.settings;
    let mut object = serde_json::Map::new();
    object.insert("name".into(), json!(d.name));
    object.insert("cron".into(), json!(s.cron));
    object.insert("timezone".into(), json!(s.timezone));
    object.insert("command".into(), json!(s.command));
    object.insert("workdir".into(), json!(s.workdir));
    object.insert("state".into(), json!(state_text(row)));
    object.insert("max_attempts".into(), json!(s.max_attempts));
    object.insert("timeout_secs".into(), json!(s.timeout_secs));
    object.insert("backoff_base_secs".into(), json!(s.backoff_base_secs));
    object.insert("backoff_max_secs".into(), json!(s.backoff_max_secs));
    object.insert("overlap".into(), json!(s.overlap.as_str()));
    object.insert("catch_up".into(), json!(s.catch_up.as_str()));
    object.insert("grace_secs".into(), json!(s.grace_secs));
    object.insert("leftovers".into(), json!(s.leftovers.as_str()));
    put_time(
        &mut object,
        "next_fire_at",
        match row {
            Ok(d) if !d.settings.paused => upcoming_fire(d, now)?,
            _ => None,
        },
    );
    put_time(&mut object, "created_at", Some(d.created_at));
    let last = store.last_result(d.id)?.map(|l| {
        let mut last = serde_json::Map::new();
        last.insert("run_id".into(), json!(l.run_id));
        last.insert("status".into(), json!(l.status));
        last.insert("error_code".into(), json!(l.error_code));
        put_time(&mut last, "scheduled_for", Some(l.scheduled_for));
        Value::Object(last)
    });
    object.insert("last_result".into(), last.unwrap_or(Value::Null));
    if let Some(damaged) = damaged {
        // The keys are the columns' names: a damaged column's placeholder is never shown.
        for problem in &damaged.problems {
            if problem.column == "created_at" {
                put_time(&mut object, "created_at", None);
            } else if object.contains_key(problem.column) {
                object.insert(problem.column.into(), Value::Null);
            }
        }
        object.insert("problem".into(), json!(damaged.problem_text()));
        object.insert(
            "damaged_columns".into(),
            json!(damaged
                .problems
                .iter()
                .map(|p| p.column)
                .collect::<Vec<_>>()),
        );
        object.insert("repair".into(), json!(damaged.repair_hint()));
    }
    Ok(Value::Object(object))
}

/// The next fire time after now. (The stored `next_fire_at` is the materialisation cursor's
/// next instant, which lies in the past while no tick has run since.)
fn upcoming_fire(d: &Definition, now: i64) -> Result<Option<i64>> {
    Ok(Timing::of(&d.settings)?.next_after(d.materialized_through.max(now)))
}

/// NEXT FIRE: a time, `never`, `(paused)`, or what is wrong with a damaged schedule.
fn next_fire_text(row: &DefinitionRow, now: i64) -> Result<String> {
    let d = match row {
        Err(damaged) => return Ok(damaged.problem_text()),
        Ok(d) if d.settings.paused => return Ok("(paused)".to_string()),
        Ok(d) => d,
    };
    let tz = parse_zone(&d.settings.timezone).map_err(Failure::usage)?;
    Ok(upcoming_fire(d, now)?.map_or_else(|| "never".to_string(), |t| local_time(t, tz)))
}

/// A stored text column for a table or listing: escaped, or `?` when the row's value is damaged.
fn column_text(damaged: Option<&DamagedDefinition>, column: &str, value: &str) -> String {
    if damaged.is_some_and(|d| d.is_damaged(column)) {
        "?".to_string()
    } else {
        escape_line(value)
    }
}

fn list(args: JsonFlag, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::MustExist)?;
    let rows = store.definitions()?;
    if args.json {
        let list = rows
            .iter()
            .map(|row| definition_json(store.as_ref(), row, ctx.clock.epoch()))
            .collect::<Result<Vec<_>>>()?;
        say!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if rows.is_empty() {
        say!("no schedules yet; add one with `runner schedule add NAME --cron EXPR -- COMMAND`");
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["NAME", "CRON", "ZONE", "STATE", "NEXT FIRE", "LAST RESULT"]);
    for row in &rows {
        let (d, damaged) = split(row);
        let name = match damaged {
            Some(damaged) if damaged.name().is_none() => format!("(id {})", d.id),
            _ => escape_line(&d.name),
        };
        table.add_row([
            name,
            column_text(damaged, "cron", &d.settings.cron),
            column_text(damaged, "timezone", &d.settings.timezone),
            state_text(row).to_string(),
            next_fire_text(row, ctx.clock.epoch())?,
            last_result_text(store.as_ref(), d)?,
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
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&definition_json(
                store.as_ref(),
                &row,
                ctx.clock.epoch()
            )?)?
        );
    } else {
        show_text(store.as_ref(), &row, ctx.clock.epoch())?;
    }
    // A damaged schedule is shown, and the exit code says it cannot run (4: the stored row is bad).
    match row {
        Ok(_) => Ok(()),
        Err(damaged) => Err(Failure::database(damaged)),
    }
}

fn show_text(store: &dyn Store, row: &DefinitionRow, now: i64) -> Result<()> {
    let (d, damaged) = split(row);
    let s = &d.settings;
    let is_damaged =
        |columns: &[&str]| damaged.is_some_and(|x| columns.iter().any(|c| x.is_damaged(c)));
    let secs = |n: i64| humantime::format_duration(Duration::from_secs(n as u64)).to_string();
    let or_damaged = |columns: &[&str], text: String| {
        if is_damaged(columns) {
            "? (damaged)".to_string()
        } else {
            text
        }
    };
    say!("name:         {}", column_text(damaged, "name", &d.name));
    let kind = match row {
        Ok(_) => {
            if Timing::of(s)?.cron.is_wildcard() {
                "wildcard, "
            } else {
                "fixed-time, "
            }
        }
        Err(_) => "",
    };
    say!(
        "cron:         {} ({kind}{})",
        column_text(damaged, "cron", &s.cron),
        column_text(damaged, "timezone", &s.timezone)
    );
    say!(
        "command:      {}",
        column_text(damaged, "command", &s.command)
    );
    say!(
        "workdir:      {}",
        match &s.workdir {
            _ if is_damaged(&["workdir"]) => "?".to_string(),
            Some(dir) => escape_line(dir),
            None => "(the tick's)".to_string(),
        }
    );
    say!("state:        {}", state_text(row));
    if let Some(damaged) = damaged {
        // How to repair it follows on stderr, with the exit code.
        say!("problem:      {}", damaged.problem_text());
    }
    say!(
        "attempts:     {} max, timeout {}",
        or_damaged(&["max_attempts"], s.max_attempts.to_string()),
        or_damaged(&["timeout_secs"], secs(s.timeout_secs))
    );
    say!(
        "backoff:      {} doubling, at most {}, jittered",
        or_damaged(&["backoff_base_secs"], secs(s.backoff_base_secs)),
        or_damaged(&["backoff_max_secs"], secs(s.backoff_max_secs))
    );
    say!(
        "overlap:      {}",
        or_damaged(&["overlap"], s.overlap.to_string())
    );
    say!(
        "leftovers:    {}",
        or_damaged(&["leftovers"], s.leftovers.to_string())
    );
    say!(
        "catch-up:     {} (grace {})",
        or_damaged(&["catch_up"], s.catch_up.to_string()),
        or_damaged(&["grace_secs"], secs(s.grace_secs))
    );
    say!(
        "next fire:    {}",
        match row {
            Ok(_) => next_fire_text(row, now)?,
            Err(_) => "(none while damaged)".to_string(),
        }
    );
    say!("last result:  {}", last_result_text(store, d)?);
    Ok(())
}
