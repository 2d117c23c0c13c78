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
    /// The connection to the database server was lost in the middle of the command (the server
    /// stopped or restarted, the session was terminated, the network went), and, where the
    /// store tried, could not be made again: the database cannot be reached (exit 4, as when
    /// connecting fails). A tick reports the first one and only counts the others, which say
    /// the same.
    #[error("{0}")]
    ConnectionLost(String),
    /// The same loss, found before anything was sent: the server ended the session while the
    /// connection sat idle (or an earlier statement met the loss), and connecting again failed
    /// (the server is restarting, or down). What was asked was certainly not done, so a caller
    /// that can do without it now (a tick's claim poll) may go on without it; otherwise it is
    /// the loss it is (exit 4).
    #[error("{0}")]
    ServerAway(String),
    /// The database stayed locked beyond the wait limit; safe to retry.
    #[error("{0}")]
    Busy(String),
    /// `run --wait`: the job's own exit code. Not an error message: the job already spoke.
    #[error("job exited with code {0}")]
    JobExit(i32),
    /// `status --check`: the monitoring-plugin code (1 warning, 2 critical). Not an error
    /// message: the summary line already said what fired.
    #[error("health check exited with code {0}")]
    Verdict(i32),
    /// `tick`: the runner errors it met (exit 1). Not an error message: each was printed as it
    /// happened, one line per error, and cron mails exactly those lines.
    #[error("the tick met {0} runner error(s)")]
    TickErrors(usize),
    /// `tick`, `run --wait`: another process held the database locked beyond what the tick
    /// could wait for (exit 5, as a command that waited out the lock: safe to retry): through
    /// its claims until it stopped claiming (`--max-tick`), runs still due; through the leases
    /// of jobs held at their gate, whose starts could not be written; or through recovery's
    /// write of an expired run. What was left is the next tick's. Not an error message: the
    /// tick said so in one line for each.
    #[error("the database stayed locked beyond the tick's wait")]
    TickLocked,
    /// `tick`: the database refused the tick's writes for good in the middle of its work
    /// (SQLite: a file made read-only or immutable; PostgreSQL: a read-only session or server),
    /// and nothing worse (a lost connection) was met: exit 4, as any command that meets a
    /// read-only database. Not an error message: each was printed when met.
    #[error("the database refused the tick's writes ({0} runner error(s))")]
    TickRefused(usize),
    /// `tick`, `run --wait`: the connection to the database was lost while jobs ran (exit 4, as
    /// when the database cannot be reached at all). Not an error message: the loss was printed
    /// when it was met, once, and what it left unrecorded once at the end.
    #[error("the tick lost its connection to the database ({0} runner error(s))")]
    TickConnectionLost(usize),
    /// `run --wait`: the job ended, but its end could not be written: the code the database's
    /// error means (4 for a read-only database, 1 for a full disk: `code_for` of that error). Not
    /// an error message: the error was printed when met, and what it means for the run after it.
    #[error("the end of the job could not be recorded (exit {0})")]
    EndNotRecorded(i32),
}

impl Failure {
    /// Whether the command already said all there is (its code is the message).
    pub fn spoke(&self) -> bool {
        matches!(
            self,
            Failure::JobExit(_)
                | Failure::Verdict(_)
                | Failure::TickErrors(_)
                | Failure::TickConnectionLost(_)
                | Failure::TickRefused(_)
                | Failure::TickLocked
                | Failure::EndNotRecorded(_)
        )
    }
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

/// A backend error, classified by the store that met it (this module knows no backend): the
/// exit code it means, if any, and what the user can do about it, if anything. It shows as the
/// backend's own error, so messages read the same whichever layer wraps it.
#[derive(Debug)]
pub struct Classified {
    /// `DATABASE` or `BUSY`; `None`: an error like any other (exit 1).
    pub code: Option<i32>,
    pub hint: Option<&'static str>,
    pub error: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for Classified {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// The exit code for an error: the first `Failure` in its chain, or classified backend error
/// that names one, else 1.
pub fn code_for(error: &anyhow::Error) -> i32 {
    for cause in error.chain() {
        if let Some(failure) = cause.downcast_ref::<Failure>() {
            return match failure {
                Failure::Usage(_) => USAGE,
                Failure::NotFound(_) => NOT_FOUND,
                Failure::Database(_) | Failure::ConnectionLost(_) | Failure::ServerAway(_) => {
                    DATABASE
                }
                Failure::TickConnectionLost(_) | Failure::TickRefused(_) => DATABASE,
                Failure::Busy(_) | Failure::TickLocked => BUSY,
                Failure::JobExit(code) | Failure::Verdict(code) | Failure::EndNotRecorded(code) => {
                    *code
                }
                Failure::TickErrors(_) => RUNTIME,
            };
        }
        if let Some(code) = cause.downcast_ref::<Classified>().and_then(|c| c.code) {
            return code;
        }
    }
    RUNTIME
}

/// Whether the error is busy ([`Failure::Busy`], [`Failure::TickLocked`], or a backend error
/// classified so): another process held a lock past the wait (exit 5, safe to retry).
pub fn is_busy(error: &anyhow::Error) -> bool {
    code_for(error) == BUSY
}

/// Whether the error is a lost connection to the database server ([`Failure::ConnectionLost`],
/// [`Failure::ServerAway`]): every later write of the command meets the same, until the server
/// is back.
pub fn is_connection_lost(error: &anyhow::Error) -> bool {
    error.chain().any(|c| {
        matches!(
            c.downcast_ref::<Failure>(),
            Some(Failure::ConnectionLost(_) | Failure::ServerAway(_))
        )
    })
}

/// Whether the error is a lost connection found before anything was sent ([`Failure::ServerAway`]):
/// what was asked was not done.
pub fn is_server_away(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|c| matches!(c.downcast_ref::<Failure>(), Some(Failure::ServerAway(_))))
}

/// `; hint: ...` when the error's backend said what the user can do about it, else "": appended
/// to the error's line, so that each error is one line (cron mails them).
pub fn hint_suffix(error: &anyhow::Error) -> String {
    hint(error)
        .map(|hint| format!("; hint: {hint}"))
        .unwrap_or_default()
}

/// What the user can do about an error, when its backend said (see `Classified`).
fn hint(error: &anyhow::Error) -> Option<&'static str> {
    error
        .chain()
        .find_map(|c| c.downcast_ref::<Classified>())?
        .hint
}
