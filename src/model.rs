//! The domain's vocabulary: run states, policies, error codes, and the rows the store returns.
//! Stored as text; converted here, at the boundary, and nowhere else.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::backoff::RetryPolicy;
use crate::clock::Now;
use crate::exit::Failure;
pub use crate::policy::{CatchUp, Leftovers, Overlap};
use crate::process::COMMAND_MAX_BYTES;
use crate::schedule::Timing;
use crate::text_enum::text_enum;

text_enum!(
    /// Where a run is in its life. Transitions: pending → running → succeeded | pending (retry) |
    /// dead; pending → cancelled; running → cancelled; never run → skipped.
    RunStatus {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Dead => "dead",
        Cancelled => "cancelled",
        Skipped => "skipped",
    },
    "run status"
);

impl RunStatus {
    /// Finished for good: nothing will change it but an explicit `retry`.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Dead | RunStatus::Cancelled | RunStatus::Skipped
        )
    }
}

/// How a schedule's last run ended (`runner_job_last_run_status`): when, and in which status.
/// Only runs that ran count (succeeded, dead or cancelled): a skipped instant never ran.
///
/// "Last" is the latest finish; among runs that finished in the same second, dead counts as
/// later than cancelled, and cancelled than succeeded. A total order on what is stored, so the
/// last run is the same whichever of the runs pruning deleted first, in whichever batches
/// (`prune` keeps the last of those it deletes on their schedule, by this order: see
/// [`LastRun::rank_sql`]), and a success in the same second never hides a death.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRun {
    finished_at: i64,
    status: RunStatus,
}

impl LastRun {
    /// The statuses that count, in the order `rank` ranks them at the same finish.
    const RANKED: [RunStatus; 3] = [RunStatus::Succeeded, RunStatus::Cancelled, RunStatus::Dead];

    /// `None` for a run that did not run, or has not finished.
    pub fn of(finished_at: i64, status: RunStatus) -> Option<LastRun> {
        Self::RANKED.contains(&status).then_some(LastRun {
            finished_at,
            status,
        })
    }

    pub fn finished_at(self) -> i64 {
        self.finished_at
    }

    pub fn status(self) -> RunStatus {
        self.status
    }

    fn rank(self) -> (i64, usize) {
        // Every status `of` accepts is ranked.
        let tie = Self::RANKED.iter().position(|s| *s == self.status);
        (self.finished_at, tie.unwrap_or(0))
    }

    /// SQL ranking the status in `column` as `LastRun` does at the same finish: the larger wins
    /// (NULL for a status that does not count).
    pub fn rank_sql(column: &str) -> String {
        let whens: String = Self::RANKED
            .iter()
            .enumerate()
            .map(|(rank, status)| format!(" WHEN '{}' THEN {rank}", status.as_str()))
            .collect();
        format!("(CASE {column}{whens} END)")
    }
}

impl Ord for LastRun {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for LastRun {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

text_enum!(
    /// Why a run exists.
    Trigger {
        Schedule => "schedule",
        Manual => "manual",
    },
    "trigger"
);

text_enum!(
    /// What happened to a run, as its timeline (`job_events.kind`) records it.
    EventKind {
        Enqueued => "ENQUEUED",
        Skipped => "SKIPPED",
        Claimed => "CLAIMED",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
        Recovered => "RECOVERED",
        RetryScheduled => "RETRY_SCHEDULED",
        Dead => "DEAD",
        Cancelled => "CANCELLED",
        Retried => "RETRIED",
        LeaseLost => "LEASE_LOST",
        Leftovers => "LEFTOVERS",
        AttemptClosed => "ATTEMPT_CLOSED",
        GivenBack => "GIVEN_BACK",
    },
    "event kind"
);

/// An event to add to a run's timeline: what happened, with its details (stored as JSON text).
/// The store adds when (the time of the write it belongs to) and who (the actor's owner).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    pub detail: serde_json::Value,
}

impl NewEvent {
    fn new(kind: EventKind, detail: serde_json::Value) -> NewEvent {
        NewEvent { kind, detail }
    }

    /// A run was claimed: attempt `attempt` starts on `host`.
    pub fn claimed(attempt: u32, host: &str) -> NewEvent {
        NewEvent::new(
            EventKind::Claimed,
            json!({ "attempt": attempt, "host": host }),
        )
    }

    /// A claim was given back before its job's command started (the tick ran out of open files,
    /// or was told to stop): attempt `attempt` never ran, and is not counted.
    pub fn given_back(attempt: u32, reason: &str) -> NewEvent {
        NewEvent::new(
            EventKind::GivenBack,
            json!({ "attempt": attempt, "reason": reason }),
        )
    }

    /// An attempt left open under a run that moved on without it was closed.
    pub fn attempt_closed(attempt: u32, code: &ErrorCode, detail: &str) -> NewEvent {
        NewEvent::new(
            EventKind::AttemptClosed,
            json!({
                "attempt": attempt,
                "error_code": code.to_string(),
                "detail": truncate_detail(detail, EVENT_DETAIL_MAX),
            }),
        )
    }
}

impl NewEvent {
    /// A pending run was cancelled here because `runner migrate` moved it (with its schedule) to
    /// the database shown as `to`, where it runs instead.
    pub fn moved(attempt: u32, to: &str) -> NewEvent {
        NewEvent::new(
            EventKind::Cancelled,
            json!({ "from": "pending", "attempt": attempt, "moved_to": to }),
        )
    }
}

/// The error detail of a pending run that `runner migrate` moved to `to`.
pub fn moved_detail(to: &str) -> String {
    truncate_detail(&format!("moved to {to}"), ERROR_DETAIL_MAX)
}

/// An event's copy of an error detail is shorter still than the run's.
const EVENT_DETAIL_MAX: usize = 200;

/// The secret a run's holder proves itself with: every write about a running run is fenced by
/// it (applied only while the run is running under this token), so a runner that lost its lease
/// (cancelled, or recovered by another runner) can never overwrite what came after.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for LeaseToken {
    fn from(token: String) -> LeaseToken {
        LeaseToken(token)
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Classifiable failure reasons, `CATEGORY:SUB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    Exit(i32),
    Signal(String),
    Timeout,
    SpawnNotFound,
    SpawnPermission,
    SpawnOther,
    LeaseExpired,
    Cancelled,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorCode::Exit(code) => write!(f, "EXIT:{code}"),
            ErrorCode::Signal(name) => write!(f, "SIGNAL:{name}"),
            ErrorCode::Timeout => f.write_str("TIMEOUT"),
            ErrorCode::SpawnNotFound => f.write_str("SPAWN:NOT_FOUND"),
            ErrorCode::SpawnPermission => f.write_str("SPAWN:PERMISSION"),
            ErrorCode::SpawnOther => f.write_str("SPAWN:OTHER"),
            ErrorCode::LeaseExpired => f.write_str("LEASE:EXPIRED"),
            ErrorCode::Cancelled => f.write_str("CANCELLED"),
        }
    }
}

/// `error_detail` is a short summary, never a whole log.
pub const ERROR_DETAIL_MAX: usize = 1024;

/// Shorten `text` to at most `max` bytes on a char boundary, marking the cut.
pub fn truncate_detail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let marker = "…";
    let mut end = max - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// A schedule's settings: everything `schedule add` takes besides the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub cron: String,
    pub timezone: String,
    pub command: String,
    pub workdir: Option<String>,
    pub max_attempts: u32,
    pub timeout_secs: i64,
    pub backoff_base_secs: i64,
    pub backoff_max_secs: i64,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub grace_secs: i64,
    pub leftovers: Leftovers,
    pub paused: bool,
}

impl Settings {
    /// When the schedule fires: its expression in its zone. An invalid one is a usage error
    /// (exit 2).
    pub fn timing(&self) -> anyhow::Result<Timing> {
        Timing::parse(&self.cron, &self.timezone).map_err(crate::exit::Failure::usage)
    }

    /// Whether these settings' timing differs from the one a schedule's row holds (`stored_cron`
    /// and `stored_zone`, None where the row's value cannot be read): another zone, or an
    /// expression that fires at other instants. The same expression written otherwise (other
    /// spacing, `@hourly` for `0 * * * *`) is the same timing: `timing_changed_at` stays.
    pub fn timing_differs(&self, stored_cron: Option<&str>, stored_zone: Option<&str>) -> bool {
        if stored_zone != Some(self.timezone.as_str()) {
            return true;
        }
        let Some(stored_cron) = stored_cron else {
            return true;
        };
        match (
            crate::schedule::CronSchedule::parse(stored_cron),
            crate::schedule::CronSchedule::parse(&self.cron),
        ) {
            (Ok(stored), Ok(new)) => !stored.same_instants(&new),
            _ => stored_cron != self.cron,
        }
    }
}

/// The most attempts a schedule may ask for: enough for any sane retry policy.
const MAX_ATTEMPTS_LIMIT: u32 = 1000;
const NAME_MAX_CHARS: usize = 200;
/// The longest duration a setting may hold.
pub const DURATION_MAX_SECS: u64 = 10 * 365 * 86_400;

/// A schedule's name as `schedule add` accepts it: what a shell word and a log line can carry.
pub fn validate_name(name: &str) -> anyhow::Result<()> {
    let problem = if name.is_empty() {
        Some("must not be empty".to_string())
    } else if name.chars().count() > NAME_MAX_CHARS {
        Some(format!("is longer than {NAME_MAX_CHARS} characters"))
    } else if name.starts_with('-') {
        Some("must not start with '-'".to_string())
    } else if name
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || crate::display::is_bidi_control(c))
    {
        Some("must not contain spaces, control characters or bidi controls".to_string())
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Failure::usage(format!(
            "schedule name \"{}\" {problem}; e.g. nightly-backup, reports.daily",
            crate::display::escape_line(&truncate_detail(name, 60))
        ))),
        None => Ok(()),
    }
}

/// A change to a schedule's settings as asked for (the flags of `schedule add` and `edit`):
/// `None` keeps the current value. Nothing in it is checked yet: `Settings::changed` does that,
/// once, and its errors name the flag to fix.
#[derive(Debug, Clone, Default)]
pub struct SettingsChange {
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub max_attempts: Option<i64>,
    pub timeout: Option<Duration>,
    pub backoff_base: Option<Duration>,
    pub backoff_max: Option<Duration>,
    pub overlap: Option<Overlap>,
    pub catch_up: Option<CatchUp>,
    pub grace: Option<Duration>,
    /// An empty path unsets it (the job runs in the tick's directory).
    pub workdir: Option<PathBuf>,
    pub leftovers: Option<Leftovers>,
    /// Set the schedule paused (`false` keeps the current state).
    pub paused: bool,
    pub command: Option<String>,
}

impl Settings {
    /// A new schedule of `cron` with every other setting at its default: what `schedule add`
    /// documents as `[add: X]`. No command yet: `changed` insists on one.
    pub fn defaults(cron: &str) -> Settings {
        Settings {
            cron: cron.to_string(),
            timezone: "UTC".to_string(),
            command: String::new(),
            workdir: None,
            max_attempts: 3,
            timeout_secs: 3600,
            backoff_base_secs: 30,
            backoff_max_secs: 3600,
            overlap: Overlap::Forbid,
            catch_up: CatchUp::Latest,
            grace_secs: 300,
            leftovers: Leftovers::Kill,
            paused: false,
        }
    }

    /// These settings with `change` applied, all validated (usage errors, exit 2). The working
    /// directory is resolved to an absolute path, so the job runs where it was meant to whatever
    /// directory the tick starts in.
    pub fn changed(&self, change: &SettingsChange) -> anyhow::Result<Settings> {
        let mut s = self.clone();
        if let Some(cron) = &change.cron {
            s.cron = cron.trim().to_string();
        }
        if let Some(tz) = &change.timezone {
            s.timezone = tz.trim().to_string();
        }
        if let Some(n) = change.max_attempts {
            s.max_attempts = u32::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_ATTEMPTS_LIMIT).contains(n))
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "--max-attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}, not {n}"
                    ))
                })?;
        }
        if let Some(d) = change.timeout {
            s.timeout_secs = duration_secs("timeout", d, 1)?;
        }
        if let Some(d) = change.backoff_base {
            s.backoff_base_secs = duration_secs("backoff-base", d, 0)?;
        }
        if let Some(d) = change.backoff_max {
            s.backoff_max_secs = duration_secs("backoff-max", d, 0)?;
        }
        if s.backoff_max_secs < s.backoff_base_secs {
            return Err(Failure::usage(format!(
                "--backoff-max ({}) must not be shorter than --backoff-base ({})",
                crate::display::duration_of_secs(s.backoff_max_secs),
                crate::display::duration_of_secs(s.backoff_base_secs),
            )));
        }
        if let Some(policy) = change.overlap {
            s.overlap = policy;
        }
        if let Some(policy) = change.catch_up {
            s.catch_up = policy;
        }
        if let Some(policy) = change.leftovers {
            s.leftovers = policy;
        }
        if let Some(d) = change.grace {
            s.grace_secs = duration_secs("grace", d, 0)?;
        }
        // An empty directory (`--workdir ''`, `--no-workdir`) unsets it: the tick's.
        if let Some(dir) = &change.workdir {
            s.workdir = match dir.as_os_str().is_empty() {
                true => None,
                false => Some(resolve_workdir(dir)?),
            };
        }
        if change.paused {
            s.paused = true;
        }
        if let Some(command) = &change.command {
            s.command = command.clone();
        }
        if s.command.trim().is_empty() {
            return Err(Failure::usage(
                "no command given; put it after `--`, e.g. `-- /usr/local/bin/backup --full`",
            ));
        }
        if s.command.contains('\0') {
            return Err(Failure::usage("the command must not contain a NUL byte"));
        }
        if s.command.len() > COMMAND_MAX_BYTES {
            // Accepted, it could never start: every attempt would fail with E2BIG.
            return Err(Failure::usage(format!(
                "the command is {} bytes; a job's command can be at most {COMMAND_MAX_BYTES} \
                 bytes (what the kernel passes to `sh -c`, less what the runner puts before it): \
                 put it in a script and schedule the script",
                s.command.len(),
            )));
        }
        crate::schedule::CronSchedule::parse(&s.cron).map_err(Failure::usage)?;
        crate::schedule::parse_zone(&s.timezone).map_err(Failure::usage)?;
        Ok(s)
    }
}

/// Whole seconds of a duration setting (`--timeout` etc.), refusing values that do not fit.
fn duration_secs(flag: &str, value: Duration, min_secs: u64) -> anyhow::Result<i64> {
    let secs = value.as_secs();
    if secs < min_secs {
        return Err(Failure::usage(format!(
            "--{flag} must be at least {min_secs}s"
        )));
    }
    i64::try_from(secs)
        .ok()
        .filter(|s| *s as u64 <= DURATION_MAX_SECS)
        .ok_or_else(|| Failure::usage(format!("--{flag} is too large (at most 10 years)")))
}

/// `--workdir`: an existing directory, made absolute.
fn resolve_workdir(dir: &Path) -> anyhow::Result<String> {
    let resolved = match dir.canonicalize() {
        Ok(p) if p.is_dir() => p,
        Ok(_) => {
            return Err(Failure::usage(format!(
                "--workdir {}: not a directory",
                dir.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::usage(format!(
                "--workdir {}: no such directory",
                dir.display()
            )))
        }
        Err(e) => return Err(Failure::usage(format!("--workdir {}: {e}", dir.display()))),
    };
    Ok(resolved.to_string_lossy().into_owned())
}

/// A row of `job_definitions`.
#[derive(Debug, Clone)]
pub struct Definition {
    pub id: i64,
    pub name: String,
    pub settings: Settings,
    pub materialized_through: i64,
    pub next_fire_at: Option<i64>,
    pub created_at: i64,
    /// When any setting last changed (an edit, a pause, a resume, a reanchor too).
    pub updated_at: i64,
    /// When its timing (cron or zone) last changed: `created_at` for a schedule never edited so,
    /// 0 for one whose times were unreadable when the column was added (read as `created_at`).
    pub timing_changed_at: i64,
    pub revision: i64,
    /// `schedule pause --for`: the first tick at or after this time resumes the schedule.
    /// Meaningful only while `settings.paused`.
    pub paused_until: Option<i64>,
}

/// A schedule's cursor: every instant up to `materialized_through` is handled (run, skipped or
/// deliberately not replayed); it next fires at `next_fire_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub materialized_through: i64,
    pub next_fire_at: Option<i64>,
}

#[cfg(test)]
impl Definition {
    /// A schedule as unit tests need one: `settings` under `name`, its cursor and times at 0.
    pub(crate) fn fixture(name: &str, settings: Settings) -> Definition {
        Definition {
            id: 1,
            name: name.to_string(),
            settings,
            materialized_through: 0,
            next_fire_at: None,
            created_at: 0,
            updated_at: 0,
            timing_changed_at: 0,
            revision: 0,
            paused_until: None,
        }
    }
}

impl Definition {
    /// When a timed pause ends, if the schedule is paused for a while (`paused_until` is written
    /// through this: an end without a pause means nothing, so resuming drops it wherever it
    /// happens: `resume`, `edit --active`, `schedule apply`, a tick after the end).
    pub fn pause_end(&self) -> Option<i64> {
        self.paused_until.filter(|_| self.settings.paused)
    }

    /// Where its fire times still to come start: `now`, or its cursor when that lies ahead of
    /// `now` (a tick whose clock ran ahead handled every instant up to it, and such a schedule
    /// fires again only once the clock passes its cursor). What `list`, `show`, `next`, `edit`
    /// and `why` call its next fire times come after this.
    pub fn handled_through(&self, now: i64) -> i64 {
        self.materialized_through.max(now)
    }

    /// [`handled_through`](Self::handled_through) as the instant a preview of fire times
    /// (`next`, `edit`) starts after: `now` itself, to the nanosecond, unless the cursor lies
    /// ahead.
    pub fn previews_after(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> chrono::DateTime<chrono::Utc> {
        crate::clock::from_epoch(self.handled_through(now.timestamp())).max(now)
    }

    pub fn set_cursor(&mut self, cursor: Cursor) {
        self.materialized_through = cursor.materialized_through;
        self.next_fire_at = cursor.next_fire_at;
    }
}

/// One column of a stored definition that this runner cannot act on, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnProblem {
    /// The `job_definitions` column, e.g. `max_attempts`.
    pub column: &'static str,
    /// What is wrong with its value, e.g. `5000000000 is out of range (1 to 4294967295)`.
    pub problem: String,
}

impl fmt::Display for ColumnProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The problem quotes the stored value: shown escaped, like any stored text.
        write!(
            f,
            "{}: {}",
            self.column,
            crate::display::escape_line(&self.problem)
        )
    }
}

/// A `job_definitions` row that does not make a sound `Definition`: a value out of range, a
/// policy this runner does not know, a NULL where a value is required, a cron expression or time
/// zone that does not parse. It stops its own schedule only: the others keep running.
#[derive(Debug, Clone)]
pub struct DamagedDefinition {
    /// What could be read. A damaged column holds a placeholder: never act on it.
    pub definition: Definition,
    /// Every damaged column, in column order (never empty).
    pub problems: Vec<ColumnProblem>,
}

impl DamagedDefinition {
    pub fn is_damaged(&self, column: &str) -> bool {
        self.problems.iter().any(|p| p.column == column)
    }

    /// The schedule's name, unless that is what is damaged.
    pub fn name(&self) -> Option<&str> {
        (!self.is_damaged("name")).then_some(self.definition.name.as_str())
    }

    /// How messages name the schedule: by name, or by id when even the name is unreadable.
    pub fn label(&self) -> String {
        match self.name() {
            Some(name) => format!("schedule {}", crate::display::escape_line(name)),
            None => format!("schedule with id {}", self.definition.id),
        }
    }

    /// The problems, one after another: `max_attempts: ...; timezone: ...`.
    pub fn problem_text(&self) -> String {
        let problems: Vec<String> = self.problems.iter().map(|p| p.to_string()).collect();
        problems.join("; ")
    }

    /// The command that repairs the row, or what to do when no flag of `schedule edit` can.
    pub fn repair_hint(&self) -> String {
        let Some(name) = self.name() else {
            return format!(
                "its name cannot be read, so no runner command can address it; delete it with \
                 `sqlite3 DB \"DELETE FROM job_definitions WHERE id = {}\"` and add it again",
                self.definition.id
            );
        };
        let name = crate::display::escape_line(name);
        let mut flags: Vec<&str> = Vec::new();
        for problem in &self.problems {
            match repair_flag(problem.column) {
                Some(RepairFlag::Flag(flag)) if !flags.contains(&flag) => flags.push(flag),
                Some(_) => {}
                None => {
                    return format!(
                        "no flag of `schedule edit` sets {}; remove it with `runner schedule rm {name}` \
                         and add it again, or restore the database from a backup",
                        problem.column
                    )
                }
            }
        }
        if flags.is_empty() {
            // Only columns that any edit rewrites (the cursor, updated_at) are damaged.
            return format!(
                "any edit rewrites it, e.g. `runner schedule edit {name} --max-attempts N`"
            );
        }
        format!(
            "repair it with `runner schedule edit {name} {}`",
            flags.join(" ")
        )
    }
}

impl fmt::Display for DamagedDefinition {
    /// One line: which schedule, which columns, how to repair it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is damaged ({}); it does not run until repaired: {}",
            self.label(),
            self.problem_text(),
            self.repair_hint()
        )
    }
}

/// How `schedule edit` repairs a damaged column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairFlag {
    /// This flag sets the column.
    Flag(&'static str),
    /// Every edit rewrites the column (the materialisation cursor, the update time).
    AnyEdit,
}

/// Which flag of `schedule edit` writes a `job_definitions` column; `None`: no flag does.
pub fn repair_flag(column: &str) -> Option<RepairFlag> {
    use RepairFlag::{AnyEdit, Flag};
    Some(match column {
        "cron" => Flag("--cron EXPR"),
        "timezone" => Flag("--tz ZONE"),
        "command" => Flag("-- COMMAND"),
        "workdir" => Flag("--workdir DIR"),
        "max_attempts" => Flag("--max-attempts N"),
        "timeout_secs" => Flag("--timeout DUR"),
        "backoff_base_secs" => Flag("--backoff-base DUR"),
        "backoff_max_secs" => Flag("--backoff-max DUR"),
        "overlap" => Flag("--overlap POLICY"),
        "catch_up" => Flag("--catch-up POLICY"),
        "grace_secs" => Flag("--grace DUR"),
        "paused" => Flag("--active|--paused"),
        "materialized_through"
        | "next_fire_at"
        | "created_at"
        | "updated_at"
        | "timing_changed_at"
        | "revision"
        | "paused_until" => AnyEdit,
        _ => return None,
    })
}

impl Settings {
    /// What a runner cannot act on in these settings, whatever wrote them: an expression or zone
    /// that does not parse, or a value outside what the schema allows. The store reports such a
    /// row as damaged instead of failing every query that reads it. Columns in `skip` (already
    /// found damaged) are not checked again.
    pub fn problems(&self, skip: &[ColumnProblem]) -> Vec<ColumnProblem> {
        let skipped = |column: &str| skip.iter().any(|p| p.column == column);
        let mut found = Vec::new();
        let mut check = |column: &'static str, problem: Option<String>| {
            if let Some(problem) = problem.filter(|_| !skipped(column)) {
                found.push(ColumnProblem { column, problem });
            }
        };
        check("cron", crate::schedule::cron_problem(&self.cron));
        check(
            "timezone",
            crate::schedule::parse_zone(&self.timezone)
                .err()
                .map(|_| format!("{:?} is not a known IANA time zone", self.timezone)),
        );
        check(
            "command",
            self.command
                .trim()
                .is_empty()
                .then(|| "is empty".to_string()),
        );
        check(
            "max_attempts",
            (self.max_attempts < 1).then(|| format!("is {}, less than 1", self.max_attempts)),
        );
        check(
            "timeout_secs",
            (self.timeout_secs < 1).then(|| format!("is {}, less than 1", self.timeout_secs)),
        );
        for (column, value) in [
            ("backoff_base_secs", self.backoff_base_secs),
            ("grace_secs", self.grace_secs),
        ] {
            check(column, (value < 0).then(|| format!("is {value}, negative")));
        }
        if !skipped("backoff_base_secs") {
            check(
                "backoff_max_secs",
                (self.backoff_max_secs < self.backoff_base_secs).then(|| {
                    format!(
                        "is {}, less than backoff_base_secs ({})",
                        self.backoff_max_secs, self.backoff_base_secs
                    )
                }),
            );
        }
        found
    }
}

/// A run about to be inserted by materialisation or `run NAME`.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub trigger: Trigger,
    pub scheduled_for: i64,
    /// `Some(reason)`: recorded as skipped, never executed.
    pub skip_reason: Option<String>,
    /// What the job gets as `RUNNER_IDEMPOTENCY_KEY`: the same for every attempt of the run.
    pub idempotency_key: String,
}

impl NewRun {
    /// The run of schedule `name` for the instant `scheduled_for`: its key names the schedule and
    /// the instant (`nightly@2026-03-08T02:30:00Z`), the same whichever tick materialises it.
    pub fn scheduled(name: &str, scheduled_for: i64, skip_reason: Option<String>) -> NewRun {
        let instant = crate::display::utc_time(scheduled_for);
        NewRun {
            trigger: Trigger::Schedule,
            scheduled_for,
            skip_reason,
            idempotency_key: format!("{name}@{instant}"),
        }
    }

    /// A manual run of schedule `name`, due `now`: its key (`nightly@manual:EPOCH:NONCE`) is
    /// unique by its nonce, since several manual runs may share one second; the caller draws the
    /// nonce from the OS.
    pub fn manual(name: &str, now: i64, nonce: u64) -> NewRun {
        NewRun {
            trigger: Trigger::Manual,
            scheduled_for: now,
            skip_reason: None,
            idempotency_key: format!("{name}@manual:{now}:{nonce:016x}"),
        }
    }

    /// `skipped` (finished as it is inserted) or `pending`.
    pub fn status(&self) -> RunStatus {
        match self.skip_reason {
            Some(_) => RunStatus::Skipped,
            None => RunStatus::Pending,
        }
    }

    /// The event that records its insertion.
    pub fn event(&self) -> NewEvent {
        match &self.skip_reason {
            Some(reason) => NewEvent::new(EventKind::Skipped, json!({ "reason": reason })),
            None => NewEvent::new(
                EventKind::Enqueued,
                json!({ "trigger": self.trigger.as_str() }),
            ),
        }
    }
}

/// A run this runner now holds under lease, with what it needs to execute it.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub run_id: i64,
    pub definition_id: i64,
    pub job_name: String,
    pub attempt: u32,
    /// `attempts` is the run's `max_attempts`.
    pub retry: RetryPolicy,
    pub scheduled_for: i64,
    pub command: String,
    pub workdir: Option<String>,
    pub timeout_secs: i64,
    pub idempotency_key: String,
    pub lease_token: LeaseToken,
    pub leftovers: Leftovers,
}

/// Who is acting: written on leases, attempts and events.
#[derive(Debug, Clone)]
pub struct Actor {
    pub owner: String,
    pub host: String,
    pub pid: u32,
    /// This process's start time (`/proc`), so others can tell whether it is still alive.
    pub start_time: Option<u64>,
}

/// What happens to a run after an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    RetryAt(i64),
    Dead,
    /// Stopped on purpose (Ctrl-C on `run --wait`): the run is cancelled, never retried.
    Cancelled,
}

impl AfterFailure {
    /// By the run's retry policy: retry after a jittered backoff, or dead once all its attempts
    /// have been made. `now` is when the attempt failed.
    pub fn by_policy(
        policy: &RetryPolicy,
        attempt: u32,
        now: Now,
        rng: &mut fastrand::Rng,
    ) -> AfterFailure {
        match policy.retry_at(attempt, now.millis(), rng) {
            Some(at) => AfterFailure::RetryAt(at),
            None => AfterFailure::Dead,
        }
    }
}

/// Why an attempt failed, and what its run does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFailure {
    pub code: ErrorCode,
    /// A short summary (at most `ERROR_DETAIL_MAX` bytes).
    pub detail: String,
    pub then: AfterFailure,
}

impl AttemptFailure {
    /// The detail is cut to `ERROR_DETAIL_MAX` bytes here, whatever went into it (a long
    /// working directory's path, a hundred leftover processes): the database refuses a longer
    /// one, and with it the attempt's whole record.
    pub fn new(code: ErrorCode, detail: &str, then: AfterFailure) -> AttemptFailure {
        AttemptFailure {
            code,
            detail: truncate_detail(detail, ERROR_DETAIL_MAX),
            then,
        }
    }
}

/// What an attempt's job printed, as kept: the end of each stream, and each stream's length.
#[derive(Debug, Clone, Default)]
pub struct CapturedOutput {
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

/// The result of one attempt, as the runner that held the lease reports it.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub finished_at: i64,
    pub duration_ms: i64,
    /// `None`: succeeded.
    pub failure: Option<AttemptFailure>,
    pub exit_code: Option<i32>,
    /// `None` when this runner never had it: recovery closes an attempt whose output went to a
    /// runner that is gone. Stored as NULL, so the attempt does not claim its job printed nothing.
    pub output: Option<CapturedOutput>,
    /// What the job left behind when its shell exited (`pid comm`), and whether it was killed.
    pub leftovers: Vec<String>,
    pub leftovers_killed: bool,
    /// The run is recovered from another host: the attempt's processes live there, out of this
    /// host's reach, so the attempt stays open until that host's next tick has stopped them and
    /// closes it (`recover::stop_orphaned_attempts`).
    pub attempt_left_open: bool,
    /// Recovery only: the lease expiry it found passed. Its write lands only while the run still
    /// has that expiry, so a holder that renewed its lease meanwhile (a late heartbeat) keeps its
    /// run, and the job never runs beside its retry.
    pub lease_expired_at: Option<i64>,
}

text_enum!(
    /// How an attempt ended, as its row (`job_attempts.outcome`) records it.
    AttemptOutcome {
        Succeeded => "succeeded",
        Failed => "failed",
    },
    "attempt outcome"
);

/// The run's side of an attempt's end: the state it moves to from `running` (the lease is
/// released in the same write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// `succeeded`, `pending` (to retry), `dead` or `cancelled`.
    pub status: RunStatus,
    /// When a retry is due (`pending` only); otherwise the run keeps its `run_at`.
    pub run_at: Option<i64>,
    /// Set when the run is finished for good; `None` while it is to be retried.
    pub finished_at: Option<i64>,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
}

/// An attempt's end, decided: what the store writes, fenced by the attempt's lease token, in one
/// transaction. The rules (the run's next state, the events that tell it, the dead count) are
/// here, once, whatever the backend; `Store::finish_attempt` says how it is written.
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    /// The attempt row's values (and the fence: run, attempt, lease token).
    pub result: AttemptResult,
    pub outcome: AttemptOutcome,
    pub run: RunEnd,
    /// Recorded, in order, when the write lands.
    pub events: Vec<NewEvent>,
    /// The run went dead: the dead-runs counter (which retry and prune never lower) rises by one.
    pub counts_dead: bool,
}

impl AttemptEnd {
    pub fn decide(result: AttemptResult) -> AttemptEnd {
        let at = result.finished_at;
        let attempt = result.attempt;
        let (outcome, run) = match &result.failure {
            None => (
                AttemptOutcome::Succeeded,
                RunEnd {
                    status: RunStatus::Succeeded,
                    run_at: None,
                    finished_at: Some(at),
                    error_code: None,
                    error_detail: None,
                },
            ),
            Some(failure) => {
                let (status, run_at) = match failure.then {
                    AfterFailure::RetryAt(when) => (RunStatus::Pending, Some(when)),
                    AfterFailure::Dead => (RunStatus::Dead, None),
                    AfterFailure::Cancelled => (RunStatus::Cancelled, None),
                };
                (
                    AttemptOutcome::Failed,
                    RunEnd {
                        status,
                        run_at,
                        finished_at: (status != RunStatus::Pending).then_some(at),
                        error_code: Some(failure.code.to_string()),
                        error_detail: Some(failure.detail.clone()),
                    },
                )
            }
        };
        let mut events = Vec::new();
        if !result.leftovers.is_empty() {
            events.push(NewEvent::new(
                EventKind::Leftovers,
                json!({
                    "attempt": attempt,
                    "killed": result.leftovers_killed,
                    "processes": result.leftovers,
                }),
            ));
        }
        let mut counts_dead = false;
        match &result.failure {
            None => events.push(NewEvent::new(
                EventKind::Succeeded,
                json!({ "attempt": attempt }),
            )),
            Some(failure) => {
                let kind = if failure.code == ErrorCode::LeaseExpired {
                    EventKind::Recovered
                } else {
                    EventKind::Failed
                };
                events.push(NewEvent::new(
                    kind,
                    json!({
                        "attempt": attempt,
                        "error_code": failure.code.to_string(),
                        "detail": truncate_detail(&failure.detail, EVENT_DETAIL_MAX),
                    }),
                ));
                events.push(match failure.then {
                    AfterFailure::RetryAt(when) => NewEvent::new(
                        EventKind::RetryScheduled,
                        json!({
                            "next_attempt": attempt + 1,
                            "run_at": crate::display::utc_time(when),
                            "run_at_epoch": when,
                        }),
                    ),
                    AfterFailure::Cancelled => NewEvent::new(
                        EventKind::Cancelled,
                        json!({ "from": RunStatus::Running.as_str(), "attempt": attempt }),
                    ),
                    AfterFailure::Dead => {
                        counts_dead = true;
                        NewEvent::new(EventKind::Dead, json!({ "attempts": attempt }))
                    }
                });
            }
        }
        AttemptEnd {
            result,
            outcome,
            run,
            events,
            counts_dead,
        }
    }

    /// The event recorded instead when the fence refused the write (the run, now in `current`,
    /// is no longer held under this attempt's token): a stale runner's write (`LEASE_LOST`), or,
    /// when an operator cancelled the run under this attempt, its attempt closed now that the
    /// job is stopped (`ATTEMPT_CLOSED`, as `cancel` records it when it stops the job itself):
    /// a cancel asked for, not a write lost.
    pub fn fenced(&self, current: RunStatus) -> NewEvent {
        if current == RunStatus::Cancelled {
            // Stopped by the tick for the cancel (`CANCELLED`), or ended before the tick learnt
            // of the cancel: then say so, and how, since its attempt records that.
            let detail = match &self.result.failure {
                Some(f) if f.code == ErrorCode::Cancelled => {
                    "the run was cancelled; the tick holding it stopped its job".to_string()
                }
                Some(f) => format!(
                    "the run was cancelled; its attempt had already ended ({}) when the tick \
                     learnt of it",
                    f.code
                ),
                None => "the run was cancelled; its attempt had already succeeded when the tick \
                         learnt of it"
                    .to_string(),
            };
            return NewEvent::attempt_closed(self.result.attempt, &ErrorCode::Cancelled, &detail);
        }
        NewEvent::new(
            EventKind::LeaseLost,
            json!({
                "attempt": self.result.attempt,
                "refused": self.run.status.as_str(),
                "error_code": self.run.error_code,
                "run_status": current.as_str(),
            }),
        )
    }
}

/// How an orphaned attempt (open under a run that moved on without it) is closed, decided: its
/// error, and the event that tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct OrphanClose {
    pub code: ErrorCode,
    /// At most `ERROR_DETAIL_MAX` bytes.
    pub detail: String,
    pub event: NewEvent,
    /// Its job never started (stopped at its gate): the attempt took no time and printed
    /// nothing, and is closed as such, not as one whose output went with a runner that is gone.
    pub never_started: bool,
}

/// How the attempt of a job stopped at its gate is closed when its run is no longer held
/// (`Store::close_never_started`): as the run's cancel, or its recovery by another runner, says.
#[derive(Debug, Clone)]
pub struct NeverStartedCloses {
    pub cancelled: OrphanClose,
    pub recovered: OrphanClose,
}

impl NeverStartedCloses {
    pub fn of(attempt: u32) -> NeverStartedCloses {
        NeverStartedCloses {
            cancelled: OrphanClose::never_started(attempt, true),
            recovered: OrphanClose::never_started(attempt, false),
        }
    }

    /// What becomes of the attempt `holder`, given its run's `status`, `attempt` and
    /// `lease_token` as the store read them: still held under the attempt's token, its end is
    /// written; else it is closed as cancelled if the run was cancelled on this attempt, and as
    /// recovered otherwise (recovered by another runner, perhaps claimed again since).
    pub fn decide(
        &self,
        holder: &AttemptHolder,
        status: RunStatus,
        attempt: u32,
        lease_token: Option<&str>,
    ) -> NeverStartedClose<'_> {
        if status == RunStatus::Running && lease_token == Some(holder.lease_token.as_str()) {
            NeverStartedClose::Finish
        } else if status == RunStatus::Cancelled && attempt == holder.attempt {
            NeverStartedClose::Orphan(&self.cancelled)
        } else {
            NeverStartedClose::Orphan(&self.recovered)
        }
    }
}

/// `NeverStartedCloses::decide`: how `Store::close_never_started` closes the attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NeverStartedClose<'a> {
    /// The run still holds the attempt: its end is written as `finish_attempt` writes it.
    Finish,
    /// The run moved on without it: the attempt is closed as an orphan, so.
    Orphan(&'a OrphanClose),
}

impl OrphanClose {
    /// Its processes are gone and the run had been cancelled.
    pub fn cancelled(attempt: u32, detail: &str) -> OrphanClose {
        OrphanClose::closed(ErrorCode::Cancelled, attempt, detail)
    }

    /// Its processes are gone, and another host had recovered the run when its lease expired.
    pub fn recovered_elsewhere(attempt: u32, detail: &str) -> OrphanClose {
        OrphanClose::closed(ErrorCode::LeaseExpired, attempt, detail)
    }

    /// Its job was stopped at its gate by the tick that claimed it, its command never run: the
    /// run was cancelled (`cancelled`), or its lease expired and it was recovered, between the
    /// claim and the job's release.
    pub fn never_started(attempt: u32, cancelled: bool) -> OrphanClose {
        let (code, why) = if cancelled {
            (ErrorCode::Cancelled, "the run was cancelled")
        } else {
            (
                ErrorCode::LeaseExpired,
                "its lease expired and another runner recovered the run",
            )
        };
        let detail = format!(
            "{why} before its job started; the job was stopped at its gate, and its command \
             never ran"
        );
        OrphanClose {
            never_started: true,
            ..OrphanClose::closed(code, attempt, &detail)
        }
    }

    fn closed(code: ErrorCode, attempt: u32, detail: &str) -> OrphanClose {
        let detail = truncate_detail(detail, ERROR_DETAIL_MAX);
        OrphanClose {
            event: NewEvent::attempt_closed(attempt, &code, &detail),
            code,
            detail,
            never_started: false,
        }
    }
}

/// An operator's request on one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    Retry,
    Cancel,
}

/// What a steer request reads of a run, under the write lock that its change is made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunState {
    pub status: RunStatus,
    pub attempt: u32,
    pub max_attempts: u32,
}

/// The change an operator's request makes to a run (applied only while the run is still in the
/// state it was read in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunChange {
    /// Back to `pending`, due at `due_at` (now: an older `run_at` would read as lag in
    /// `runner_oldest_due_lag_seconds` and as a retry time in the past in `history`), with
    /// `max_attempts`; no longer finished.
    Requeue { due_at: i64, max_attempts: u32 },
    /// `cancelled` at `at`, with error `CANCELLED` and `detail`; the lease (if any) is released,
    /// which is what tells the tick holding it (at its next heartbeat) to kill the job. A
    /// running run's job is then being stopped until its attempt closes: `stopping_by` is its
    /// lease's expiry plus `stop_grace_secs` (the tick holding it stops the job, SIGTERM then
    /// SIGKILL after the kill grace, at a heartbeat before that expiry), after which recovery
    /// stops it instead.
    Cancel {
        at: i64,
        detail: String,
        stop_grace_secs: i64,
    },
}

/// What a steer request decides for a run in a given state.
#[derive(Debug, Clone, PartialEq)]
pub enum Steering {
    /// Write `change` with `event`; the request then reports `steered`.
    Apply {
        change: RunChange,
        event: NewEvent,
        steered: Steered,
    },
    /// Not a state this request applies to: change nothing.
    Refuse(Steered),
}

impl Steer {
    /// The transitions an operator may ask for, written once. Retry: a dead run, or a pending
    /// run waiting out a backoff delay (it has had an attempt). Cancel: pending or running.
    pub fn allows(self, status: RunStatus, attempt: u32) -> bool {
        match self {
            Steer::Retry => {
                status == RunStatus::Dead || (status == RunStatus::Pending && attempt >= 1)
            }
            Steer::Cancel => matches!(status, RunStatus::Pending | RunStatus::Running),
        }
    }

    /// What this request does to a run found in `state`, at `now`, asked by `actor`.
    pub fn decide(self, state: RunState, now: i64, actor: &Actor) -> Steering {
        let RunState {
            status: from,
            attempt,
            max_attempts,
        } = state;
        if !self.allows(from, attempt) {
            return Steering::Refuse(Steered::Refused {
                status: from,
                attempt,
            });
        }
        match self {
            Steer::Retry => {
                // Attempts keep counting: a run that used them all gets exactly one more.
                let max_after = max_attempts.max(attempt + 1);
                let raised = (max_after != max_attempts).then_some(max_attempts);
                Steering::Apply {
                    change: RunChange::Requeue {
                        due_at: now,
                        max_attempts: max_after,
                    },
                    event: NewEvent::new(
                        EventKind::Retried,
                        json!({
                            "from": from.as_str(),
                            "next_attempt": attempt + 1,
                            "max_attempts": max_after,
                            "max_attempts_before": raised,
                        }),
                    ),
                    steered: Steered::Done {
                        from,
                        attempt,
                        max_attempts: max_after,
                        raised_max_from: raised,
                    },
                }
            }
            Steer::Cancel => Steering::Apply {
                change: RunChange::Cancel {
                    at: now,
                    detail: format!("cancelled by {}", actor.owner),
                    stop_grace_secs: crate::tick::record::KILL_GRACE.as_secs() as i64,
                },
                event: NewEvent::new(
                    EventKind::Cancelled,
                    json!({ "from": from.as_str(), "attempt": attempt }),
                ),
                steered: Steered::Done {
                    from,
                    attempt,
                    max_attempts,
                    raised_max_from: None,
                },
            },
        }
    }
}

/// What a retry or cancel found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Steered {
    /// Applied. `from` is the state the run was in.
    Done {
        from: RunStatus,
        attempt: u32,
        max_attempts: u32,
        /// Retry of a run that had used all its attempts: the limit it had before.
        raised_max_from: Option<u32>,
    },
    /// Not a state this request applies to; nothing changed.
    Refused {
        status: RunStatus,
        attempt: u32,
    },
    NotFound,
}

/// Whether a fenced write landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    Applied,
    /// The lease token no longer matches (the run was recovered, cancelled or deleted):
    /// nothing was overwritten; the refusal is recorded as an event when the run still exists.
    LeaseLost,
}

impl Fenced {
    /// `Applied` if the fenced write landed (its lease still held), else `LeaseLost`.
    pub fn landed_if(landed: bool) -> Fenced {
        if landed {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        }
    }
}

/// A running run whose lease expired: its runner died or hung.
#[derive(Debug, Clone)]
pub struct ExpiredLease {
    pub run_id: i64,
    pub job_name: String,
    pub attempt: u32,
    pub retry: RetryPolicy,
    pub lease_token: LeaseToken,
    pub lease_expires_at: i64,
    /// The attempt's processes as recorded (`None` only for a damaged database).
    pub holder: Option<AttemptHolder>,
}

/// A run cancelled while running whose job was not known to be stopped by its `stopping_by`:
/// the tick holding it died or hung before it could stop it.
#[derive(Debug, Clone)]
pub struct OverdueStop {
    pub run_id: i64,
    pub stopping_by: i64,
    /// Every attempt of it still open, oldest first: its current one, and one of another host
    /// that recovery retried, left for that host to close (none: closed meanwhile, or gone with
    /// a damaged database).
    pub holders: Vec<AttemptHolder>,
}

/// An attempt's processes, as recorded: enough to find them on their host and to tell whether
/// the runner holding them is alive. Nothing is signalled unless it carries the attempt's marker.
#[derive(Debug, Clone)]
pub struct AttemptHolder {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub host: String,
    pub runner_pid: u32,
    pub runner_start_time: Option<u64>,
    pub child_pid: Option<u32>,
    pub child_start_time: Option<u64>,
    pub started_at: i64,
}

#[cfg(test)]
impl AttemptHolder {
    /// An attempt as unit tests need one: attempt `attempt` of run `run_id` on `host`, under a
    /// token that names both, no process recorded.
    pub(crate) fn fixture(run_id: i64, attempt: u32, host: &str) -> AttemptHolder {
        AttemptHolder {
            run_id,
            attempt,
            lease_token: LeaseToken::from(format!("token-{run_id}-{attempt}")),
            host: host.to_string(),
            runner_pid: 1,
            runner_start_time: None,
            child_pid: None,
            child_start_time: None,
            started_at: 0,
        }
    }
}

/// A job process's start, recorded before its command is released.
#[derive(Debug, Clone)]
pub struct StartRecord {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub child_pid: u32,
    pub child_start_time: Option<u64>,
}

/// A claim given back before its job started (`Store::give_back`): the run, its attempt and the
/// lease token that fence the write, and the event that tells why.
#[derive(Debug, Clone)]
pub struct GivenBack {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub event: NewEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The later finish wins; in one second dead, then cancelled, then succeeded; runs that did
    /// not run are no last run. The SQL ranks them the same way.
    #[test]
    fn the_same_expression_written_otherwise_is_the_same_timing() {
        let s = |cron: &str| Settings::defaults(cron);
        let differs = |new: &str, stored: &str| s(new).timing_differs(Some(stored), Some("UTC"));
        assert!(!differs("*/5 * * * *", "*/5 * * * *"));
        assert!(!differs("*/5  *\t* * *", "*/5 * * * *"));
        assert!(!differs("@hourly", "0 * * * *"));
        assert!(!differs("0 9 * * MON-FRI", "0 9 * * 1-5"));
        assert!(differs("*/10 * * * *", "*/5 * * * *"));
        // The same instants, but a wildcard job (minute or hour `*`) keeps other daylight-saving
        // rules.
        assert!(!differs("0-59/5 * * * *", "*/5 * * * *"));
        assert!(differs("0 0-23 * * *", "0 * * * *"));
        // The day rule: `*` in the day of month makes both day fields one condition.
        assert!(differs("0 9 1-31 * 1", "0 9 * * 1"));
        assert!(s("0 * * * *").timing_differs(Some("0 * * * *"), Some("Europe/Paris")));
        // A stored value that cannot be read or parsed differs from any.
        assert!(s("0 * * * *").timing_differs(None, Some("UTC")));
        assert!(s("0 * * * *").timing_differs(Some("0 * * * *"), None));
        assert!(differs("0 * * * *", "61 * * * *"));
    }

    #[test]
    fn the_last_run_is_the_latest_finish_then_the_worst_status() {
        let run = |at, status| LastRun::of(at, status).expect("ran");
        assert!(run(101, RunStatus::Succeeded) > run(100, RunStatus::Dead));
        assert!(run(100, RunStatus::Dead) > run(100, RunStatus::Cancelled));
        assert!(run(100, RunStatus::Cancelled) > run(100, RunStatus::Succeeded));
        for status in [RunStatus::Skipped, RunStatus::Pending, RunStatus::Running] {
            assert_eq!(LastRun::of(100, status), None);
        }
        assert_eq!(
            LastRun::rank_sql("s"),
            "(CASE s WHEN 'succeeded' THEN 0 WHEN 'cancelled' THEN 1 WHEN 'dead' THEN 2 END)"
        );
    }

    #[test]
    fn an_attempt_failures_detail_fits_the_database() {
        let long = format!(
            "killed its leftover processes: {}",
            "12345 sleep, ".repeat(100)
        );
        let failure = AttemptFailure::new(ErrorCode::LeaseExpired, &long, AfterFailure::Dead);
        assert!(
            failure.detail.len() <= ERROR_DETAIL_MAX,
            "{}",
            failure.detail.len()
        );
        assert!(failure
            .detail
            .starts_with("killed its leftover processes: 12345 sleep"));
    }

    /// The whole table: the attempt's end is written only while its run still runs under its
    /// token; otherwise the attempt is closed as cancelled only when the cancel was on this
    /// attempt, and as recovered in every other case.
    #[test]
    fn a_never_started_attempt_is_finished_only_while_held_else_closed_as_the_run_says() {
        let holder = AttemptHolder::fixture(1, 2, "h");
        let mine = holder.lease_token.as_str();
        let closes = NeverStartedCloses::of(holder.attempt);
        let (cancelled, recovered) = (
            NeverStartedClose::Orphan(&closes.cancelled),
            NeverStartedClose::Orphan(&closes.recovered),
        );
        let cases = [
            (RunStatus::Running, 2, Some(mine), NeverStartedClose::Finish),
            // Recovered and claimed again, by this attempt number or the next.
            (RunStatus::Running, 2, Some("theirs"), recovered),
            (RunStatus::Running, 3, Some("theirs"), recovered),
            (RunStatus::Cancelled, 2, None, cancelled),
            // Cancelled on a later attempt: this one was recovered first.
            (RunStatus::Cancelled, 3, None, recovered),
            (RunStatus::Pending, 2, None, recovered),
            (RunStatus::Dead, 2, None, recovered),
            (RunStatus::Succeeded, 3, None, recovered),
        ];
        for (status, attempt, token, expected) in cases {
            assert_eq!(
                closes.decide(&holder, status, attempt, token),
                expected,
                "{status:?} on attempt {attempt} under {token:?}"
            );
        }
        assert_eq!(closes.cancelled.code, ErrorCode::Cancelled);
        assert_eq!(closes.recovered.code, ErrorCode::LeaseExpired);
    }

    fn damaged(name: &str, columns: &[&'static str]) -> DamagedDefinition {
        DamagedDefinition {
            definition: Definition {
                id: 7,
                ..Definition::fixture(
                    name,
                    Settings {
                        command: "true".to_string(),
                        timeout_secs: 60,
                        backoff_max_secs: 60,
                        ..Settings::defaults("* * * * *")
                    },
                )
            },
            problems: columns
                .iter()
                .map(|column| ColumnProblem {
                    column,
                    problem: "bad".to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_damaged_row_says_how_to_repair_it() {
        let d = damaged("a", &["max_attempts", "timezone", "next_fire_at"]);
        assert_eq!(d.label(), "schedule a");
        assert_eq!(
            d.repair_hint(),
            "repair it with `runner schedule edit a --max-attempts N --tz ZONE`"
        );
        assert!(damaged("a", &["revision"])
            .repair_hint()
            .contains("any edit rewrites it"));
        assert!(damaged("a", &["id"])
            .repair_hint()
            .contains("schedule rm a"));
        let nameless = damaged("", &["name"]);
        assert_eq!(nameless.label(), "schedule with id 7");
        assert!(nameless.repair_hint().contains("WHERE id = 7"));
        assert_eq!(
            damaged("a", &["max_attempts"]).to_string(),
            "schedule a is damaged (max_attempts: bad); it does not run until repaired: \
             repair it with `runner schedule edit a --max-attempts N`"
        );
    }

    #[test]
    fn settings_problems_name_the_columns_a_runner_cannot_act_on() {
        let mut s = damaged("a", &[]).definition.settings;
        assert!(s.problems(&[]).is_empty());
        s.timezone = "Mars/Olympus".to_string();
        s.cron = "61 * * * *".to_string();
        s.backoff_max_secs = 1;
        let columns: Vec<_> = s.problems(&[]).iter().map(|p| p.column).collect();
        assert_eq!(columns, ["cron", "timezone", "backoff_max_secs"]);
        // Columns already found damaged are not judged again.
        let skip = [ColumnProblem {
            column: "backoff_base_secs",
            problem: "bad".to_string(),
        }];
        let columns: Vec<_> = s.problems(&skip).iter().map(|p| p.column).collect();
        assert_eq!(columns, ["cron", "timezone"]);
    }
}
