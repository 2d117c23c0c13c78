//! The domain's vocabulary: run states, policies, error codes, and the rows the store returns.
//! Stored as text; converted here, at the boundary, and nowhere else.

use std::fmt;
use std::str::FromStr;

use crate::schedule::CatchUp;

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }, $what:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "{:?} is not a {}; use one of: {}",
                        other, $what, [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

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

text_enum!(
    /// What to do with a newly due run while another run of the same schedule is running.
    Overlap {
        Forbid => "forbid",
        Allow => "allow",
    },
    "overlap policy"
);

text_enum!(
    /// What happens to the processes a job leaves behind when its main process (the shell)
    /// exits on its own: `kill` them (TERM, then KILL), as systemd does for a service's control
    /// group, or `keep` them, for jobs that deliberately start daemons. A timeout or a cancel stops
    /// everything of the attempt either way.
    Leftovers {
        Kill => "kill",
        Keep => "keep",
    },
    "leftover policy"
);

text_enum!(
    /// Why a run exists.
    Trigger {
        Schedule => "schedule",
        Manual => "manual",
    },
    "trigger"
);

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

/// A row of `job_definitions`.
#[derive(Debug, Clone)]
pub struct Definition {
    pub id: i64,
    pub name: String,
    pub settings: Settings,
    pub materialized_through: i64,
    pub next_fire_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub revision: i64,
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
        "materialized_through" | "next_fire_at" | "created_at" | "updated_at" | "revision" => {
            AnyEdit
        }
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
        check(
            "cron",
            crate::schedule::CronSchedule::parse(&self.cron)
                .err()
                .map(|e| e.to_string()),
        );
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
}

/// A run this runner now holds under lease, with what it needs to execute it.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub run_id: i64,
    pub definition_id: i64,
    pub job_name: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub scheduled_for: i64,
    pub command: String,
    pub workdir: Option<String>,
    pub timeout_secs: i64,
    pub backoff_base_secs: i64,
    pub backoff_max_secs: i64,
    pub idempotency_key: String,
    pub lease_token: String,
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

/// The result of one attempt, as the runner that held the lease reports it.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: String,
    pub finished_at: i64,
    pub duration_ms: i64,
    /// `None`: succeeded.
    pub failure: Option<(ErrorCode, String, AfterFailure)>,
    pub exit_code: Option<i32>,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// What the job left behind when its shell exited (`pid comm`), and whether it was killed.
    pub leftovers: Vec<String>,
    pub leftovers_killed: bool,
    /// The run is recovered from another host: the attempt's processes live there, out of this
    /// host's reach, so the attempt stays open until that host's next tick has stopped them and
    /// closes it (`recover::stop_orphaned_attempts`).
    pub attempt_left_open: bool,
}

/// Whether a fenced write landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    Applied,
    /// The lease token no longer matches (the run was recovered, cancelled or deleted):
    /// nothing was overwritten; the refusal is recorded as an event when the run still exists.
    LeaseLost,
}

/// A running run whose lease expired: its runner died or hung.
#[derive(Debug, Clone)]
pub struct ExpiredLease {
    pub run_id: i64,
    pub job_name: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub lease_token: String,
    pub lease_expires_at: i64,
    pub backoff_base_secs: i64,
    pub backoff_max_secs: i64,
    /// The attempt's processes as recorded (`None` only for a damaged database).
    pub holder: Option<AttemptHolder>,
}

/// An attempt's processes, as recorded: enough to find them on their host and to tell whether
/// the runner holding them is alive. Nothing is signalled unless it carries the attempt's marker.
#[derive(Debug, Clone)]
pub struct AttemptHolder {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: String,
    pub host: String,
    pub runner_pid: u32,
    pub runner_start_time: Option<u64>,
    pub child_pid: Option<u32>,
    pub child_start_time: Option<u64>,
    pub started_at: i64,
}

/// A job process's start, recorded before its command is released.
#[derive(Debug, Clone)]
pub struct StartRecord {
    pub run_id: i64,
    pub attempt: u32,
    pub lease_token: String,
    pub child_pid: u32,
    pub child_start_time: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damaged(name: &str, columns: &[&'static str]) -> DamagedDefinition {
        DamagedDefinition {
            definition: Definition {
                id: 7,
                name: name.to_string(),
                settings: Settings {
                    cron: "* * * * *".to_string(),
                    timezone: "UTC".to_string(),
                    command: "true".to_string(),
                    workdir: None,
                    max_attempts: 3,
                    timeout_secs: 60,
                    backoff_base_secs: 30,
                    backoff_max_secs: 60,
                    overlap: Overlap::Forbid,
                    catch_up: CatchUp::Latest,
                    grace_secs: 300,
                    leftovers: Leftovers::Kill,
                    paused: false,
                },
                materialized_through: 0,
                next_fire_at: None,
                created_at: 0,
                updated_at: 0,
                revision: 0,
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
