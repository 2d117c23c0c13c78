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
