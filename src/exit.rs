//! Exit codes, and the error kinds that choose them. `main` maps an error to a code here, once.

use std::fmt;

pub const SUCCESS: i32 = 0;
pub const RUNTIME: i32 = 1;
pub const USAGE: i32 = 2;
pub const NOT_FOUND: i32 = 3;
pub const DATABASE: i32 = 4;
pub const BUSY: i32 = 5;

/// An error that decides the exit code. Anything else (plain `anyhow` errors) exits 1.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Bad flag, cron expression, zone, duration, or a request that makes no sense in this state.
    #[error("{0}")]
    Usage(String),
    /// No such schedule or run.
    #[error("{0}")]
    NotFound(String),
    /// Database missing, unreadable, not a runner database, newer schema, or read-only.
    #[error("{0}")]
    Database(String),
    /// The database stayed locked beyond the wait limit; safe to retry.
    #[error("{0}")]
    Busy(String),
    /// `run --wait`: the job's own exit code. Not an error message: the job already spoke.
    #[error("job exited with code {0}")]
    JobExit(i32),
}

impl Failure {
    pub fn usage(message: impl fmt::Display) -> anyhow::Error {
        Failure::Usage(message.to_string()).into()
    }
    pub fn not_found(message: impl fmt::Display) -> anyhow::Error {
        Failure::NotFound(message.to_string()).into()
    }
    pub fn database(message: impl fmt::Display) -> anyhow::Error {
        Failure::Database(message.to_string()).into()
    }
}

/// The exit code for an error: the first `Failure` in its chain, else a classified SQLite error,
/// else 1.
pub fn code_for(error: &anyhow::Error) -> i32 {
    for cause in error.chain() {
        if let Some(failure) = cause.downcast_ref::<Failure>() {
            return match failure {
                Failure::Usage(_) => USAGE,
                Failure::NotFound(_) => NOT_FOUND,
                Failure::Database(_) => DATABASE,
                Failure::Busy(_) => BUSY,
                Failure::JobExit(code) => *code,
            };
        }
        if let Some(sqlite) = cause.downcast_ref::<rusqlite::Error>() {
            if let Some(code) = sqlite_exit_code(sqlite) {
                return code;
            }
        }
    }
    RUNTIME
}

fn sqlite_exit_code(error: &rusqlite::Error) -> Option<i32> {
    use rusqlite::ErrorCode as C;
    match error.sqlite_error_code()? {
        C::DatabaseBusy | C::DatabaseLocked => Some(BUSY),
        C::NotADatabase
        | C::DatabaseCorrupt
        | C::CannotOpen
        | C::ReadOnly
        | C::PermissionDenied => Some(DATABASE),
        _ => None,
    }
}

/// Write one line to stderr. Unlike `eprintln!`, a closed or full stderr is ignored instead of
/// panicking: a tick must go on supervising its jobs even when nobody reads its complaints.
pub fn stderr_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `eprintln!` that never panics (see `stderr_line`).
#[macro_export]
macro_rules! complain {
    ($($arg:tt)*) => { $crate::exit::stderr_line(format_args!($($arg)*)) };
}

/// A hint appended to SQLite errors whose cause a user can act on.
pub fn sqlite_hint(error: &anyhow::Error) -> Option<&'static str> {
    use rusqlite::ErrorCode as C;
    let sqlite = error
        .chain()
        .find_map(|c| c.downcast_ref::<rusqlite::Error>())?;
    Some(match sqlite.sqlite_error_code()? {
        C::DatabaseBusy | C::DatabaseLocked => {
            "the database stayed locked by another runner beyond the wait limit; it is safe to retry"
        }
        C::NotADatabase | C::DatabaseCorrupt => {
            "the file is not a SQLite database or is corrupt; restore it from a backup or point --db elsewhere"
        }
        C::ReadOnly | C::PermissionDenied | C::CannotOpen => {
            "check that the database file and its directory are writable by this user"
        }
        C::DiskFull => "the disk is full; free space and run again (nothing was committed)",
        C::SystemIoFailure => {
            "an I/O error: check that the disk is not full and that the database's directory is \
             writable (SQLite keeps its -wal and -shm files next to the database)"
        }
        _ => return None,
    })
}
