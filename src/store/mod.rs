//! Persistence behind one trait, one file per backend, each with its own SQL. The tick and the
//! commands speak only to `Store`; a backend is chosen from the `--db` location.

mod postgres;
mod sqlite;
pub(crate) mod sqlite_files;
mod sqlite_security;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::exit::Failure;
use crate::model::{
    Actor, AttemptEnd, AttemptHolder, ClaimedRun, ColumnProblem, DamagedDefinition, Definition,
    ExpiredLease, Fenced, GivenBack, LastRun, LeaseToken, NeverStartedCloses, NewEvent, NewRun,
    OrphanClose, OverdueStop, RunStatus, Settings, StartRecord, Steer, Steered,
};

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// An error of the store. A backend error is classified where it is met (`exit::Classified`:
/// its exit code and hint), by the backend's `From` conversion, so nothing above the store
/// knows backend types. Converts into `anyhow::Error` with `?`.
#[derive(Debug)]
pub struct Error(anyhow::Error);

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<anyhow::Error> for Error {
    fn from(error: anyhow::Error) -> Error {
        Error(error)
    }
}

impl From<Error> for anyhow::Error {
    fn from(error: Error) -> anyhow::Error {
        error.0
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Error {
        Error(error.into())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

/// What opening may do to a missing database, and what it checks first.
/// Why a tick could not write a database it connects to and reads (`Store::write_denied`):
/// each cause has its own fix, so `doctor` is told which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteDenied {
    /// The server is a standby (in recovery).
    Standby,
    /// Its sessions are read-only (`default_transaction_read_only`).
    ReadOnlySessions,
    /// The runner tables this user lacks SELECT, INSERT, UPDATE or DELETE on.
    Privileges(Vec<String>),
}

impl std::fmt::Display for WriteDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteDenied::Standby => {
                f.write_str("the server is a standby (in recovery): it takes no writes")
            }
            WriteDenied::ReadOnlySessions => {
                f.write_str("its sessions are read-only (default_transaction_read_only is on)")
            }
            WriteDenied::Privileges(tables) => write!(
                f,
                "this user lacks SELECT, INSERT, UPDATE or DELETE on {}",
                tables.join(", ")
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    MustExist,
    /// Only `init` and `schedule add` may create one.
    CreateIfMissing,
    /// For commands that execute jobs (`tick`, `run --wait`): it must exist, and the backend
    /// refuses a database that someone else could have written (whoever writes it decides what
    /// runs; for SQLite see `sqlite_security`).
    Execute,
    /// A look that changes nothing, for shell completion (`completions --schedule-names`), which
    /// runs while someone types: read only (nothing created, migrated or switched to WAL; a
    /// schema older than this runner's is refused, not brought up to date), and on PostgreSQL
    /// short timeouts whatever the URL says: an answer later than that is no use.
    Peek,
}

/// Where the database lives, from `--db` / `RUNNER_DB` / the XDG default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    pub fn parse(value: &str) -> Location {
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            Location::Postgres(value.to_string())
        } else {
            Location::Sqlite(PathBuf::from(value))
        }
    }

    /// A SQLite path made absolute against the working directory, for where the path is kept or
    /// read elsewhere (a moved run's detail, advice for a crontab, whose directory is another).
    /// As given when there is no working directory to resolve it against.
    pub fn absolute(&self) -> Location {
        match self {
            Location::Sqlite(path) => {
                Location::Sqlite(std::path::absolute(path).unwrap_or_else(|_| path.clone()))
            }
            postgres => postgres.clone(),
        }
    }

    /// The PostgreSQL database a URL names, without connecting: its user, server and database,
    /// with the defaults a connection would fill in (never the password or the parameters), so
    /// two spellings of one URL compare equal (host names are compared as written: `doctor`
    /// matching a crontab's URL). `None` for a SQLite path or a URL that does not parse.
    pub fn postgres_url_key(&self) -> Option<String> {
        match self {
            Location::Sqlite(_) => None,
            Location::Postgres(url) => PostgresStore::url_key(url, &self.to_string()).ok(),
        }
    }

    /// `XDG_STATE_HOME`'s value as the XDG spec lets it count: a relative one is invalid and must
    /// be ignored. (This process's, or the one a crontab sets for its tick.)
    pub fn state_home(value: Option<&std::ffi::OsStr>) -> Option<&Path> {
        value.map(Path::new).filter(|path| path.is_absolute())
    }

    /// `$XDG_STATE_HOME/runner/runner.db`, else `~/.local/state/runner/runner.db`.
    pub fn default_path() -> anyhow::Result<PathBuf> {
        if let Some(state) = Location::state_home(std::env::var_os("XDG_STATE_HOME").as_deref()) {
            return Ok(state.join("runner/runner.db"));
        }
        let home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Failure::usage(
                    "neither XDG_STATE_HOME nor HOME is set; pass --db PATH or set RUNNER_DB",
                )
            })?;
        Ok(Path::new(&home).join(".local/state/runner/runner.db"))
    }
}

impl std::fmt::Display for Location {
    /// Never prints a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => f.write_str(&masked_url(url)),
        }
    }
}

/// A PostgreSQL URL as it may be shown or stored: both places a password can be given are
/// masked as `***` (`user:PASSWORD@` and the `password=` parameter), the rest kept. Every
/// message, output and record naming a PostgreSQL database goes through here (as
/// `Location`'s `Display`, or `doctor` for the URLs in a crontab's lines).
pub fn masked_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    mask_password_parameter(&format!("{scheme}://{}", mask_userinfo(rest)))
}

/// `user:password@host...` -> `user:***@host...`. The credentials end at the first `@` (as
/// the URL is parsed), stretched over any further `@` before the path or parameters, so a
/// password holding an unescaped `@` is masked whole.
fn mask_userinfo(rest: &str) -> String {
    let Some(first_at) = rest.find('@') else {
        return rest.to_string();
    };
    let after = &rest[first_at + 1..];
    let host_end = after.find(['/', '?']).unwrap_or(after.len());
    let end = after[..host_end]
        .rfind('@')
        .map_or(first_at, |at| first_at + 1 + at);
    let (userinfo, host) = (&rest[..end], &rest[end + 1..]);
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***@{host}"),
        None => rest.to_string(),
    }
}

/// `...?sslmode=require&password=secret` -> `...?sslmode=require&password=***`: a parameter is
/// recognised wherever `?` or `&` starts one, so no parsing of the rest can let it through, and
/// its value runs to the next `&`, as the postgres crate reads it. The name is compared as that
/// crate compares it too, after percent-decoding (it takes `pass%77ord=` for `password=`), and
/// more loosely, in any case and with blanks around it: the crate refuses `PASSWORD=` and
/// `sslpassword=` (libpq's key passphrase) as unknown, but the error shows the URL.
fn mask_password_parameter(url: &str) -> String {
    let mut shown = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(start) = rest.find(['?', '&']) {
        shown.push_str(&rest[..=start]);
        rest = &rest[start + 1..];
        let Some(name_end) = rest.find('=') else {
            break;
        };
        if is_password_name(&rest[..name_end]) {
            let value_end = rest[name_end..]
                .find('&')
                .map_or(rest.len(), |at| name_end + at);
            shown.push_str(&rest[..=name_end]);
            shown.push_str("***");
            rest = &rest[value_end..];
        }
    }
    shown.push_str(rest);
    shown
}

/// Whether a URL parameter's name, as written, names a password (see `mask_password_parameter`).
fn is_password_name(name: &str) -> bool {
    let decoded = percent_decoded(name);
    let name = decoded.trim_ascii();
    name.eq_ignore_ascii_case(b"password") || name.eq_ignore_ascii_case(b"sslpassword")
}

/// `text` percent-decoded as the postgres crate decodes a URL's parts: `%` and two hex digits
/// is that byte; any other `%` stays as written.
pub(crate) fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let hex = |at: usize| bytes.get(at).and_then(|&b| char::from(b).to_digit(16));
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match (bytes[at], hex(at + 1), hex(at + 2)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits make at most 0xff.
                decoded.push((high * 16 + low) as u8);
                at += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    decoded
}

pub fn open(location: &Location, mode: OpenMode) -> anyhow::Result<Box<dyn Store>> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(SqliteStore::open(path, mode)?)),
        Location::Postgres(url) => Ok(Box::new(PostgresStore::open(
            url,
            &location.to_string(),
            mode,
        )?)),
    }
}

/// The database at `location` opened as `OpenMode::MustExist` does, or `None` when there is no
/// runner database there yet (a missing SQLite file; a PostgreSQL database without runner's
/// schema), for a command that only looks and creates nothing (`schedule apply --dry-run`).
pub fn open_if_present(location: &Location) -> anyhow::Result<Option<Box<dyn Store>>> {
    match location {
        Location::Sqlite(path) if !sqlite::exists(path)? => Ok(None),
        Location::Sqlite(_) => open(location, OpenMode::MustExist).map(Some),
        Location::Postgres(url) => {
            Ok(
                PostgresStore::open_if_present(url, &location.to_string(), OpenMode::MustExist)?
                    .map(|store| Box::new(store) as Box<dyn Store>),
            )
        }
    }
}

/// The database at `location` as `OpenMode::CreateIfMissing` would find it, without creating or
/// writing anything: `None` where that mode would make a new one (a missing or empty SQLite
/// file; a PostgreSQL database without runner's schema), else as `open_if_present` opens it. For
/// a check of what a command that creates the database would do (`schedule apply --dry-run`).
pub fn open_without_creating(location: &Location) -> anyhow::Result<Option<Box<dyn Store>>> {
    match location {
        Location::Sqlite(path) if sqlite::is_empty_file(path) => Ok(None),
        _ => open_if_present(location),
    }
}

/// The database at `location` opened as `OpenMode::Peek`, or `None` where there is no runner
/// database yet (a missing or empty SQLite file; a PostgreSQL database without runner's schema).
pub fn peek(location: &Location) -> anyhow::Result<Option<Box<dyn Store>>> {
    match location {
        Location::Sqlite(path) if !sqlite::exists(path)? || sqlite::is_empty_file(path) => Ok(None),
        Location::Sqlite(_) => open(location, OpenMode::Peek).map(Some),
        Location::Postgres(url) => {
            Ok(
                PostgresStore::open_if_present(url, &location.to_string(), OpenMode::Peek)?
                    .map(|store| Box::new(store) as Box<dyn Store>),
            )
        }
    }
}

/// Why `tick` would refuse to execute jobs from this database (see `OpenMode::Execute`), if it
/// would: `init` and `schedule add` warn at once rather than at the first tick under cron.
pub fn execution_refusal(location: &Location) -> Option<anyhow::Error> {
    match location {
        Location::Sqlite(path) => sqlite_security::check_executable_database(path).err(),
        Location::Postgres(_) => None,
    }
}

/// What one claim transaction took, and whether due work is left that it did not take: runs
/// beyond the batch, or held back because a run of their `forbid` schedule is running. The tick
/// keeps claiming while that is so, whatever order its jobs finish in.
#[derive(Debug, Clone, Default)]
pub struct Claimed {
    pub runs: Vec<ClaimedRun>,
    pub more_due: bool,
}

/// What each step of a tick would find at a moment, read at once: a tick skips the steps with
/// nothing to do, and with them their own reads (a fifth of an idle tick, before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingWork {
    /// A `running` run whose lease expired (`expired_leases` would return it).
    pub expired_leases: bool,
    /// An open attempt of this host whose run moved on without it (`orphaned_attempts`).
    pub orphaned_attempts: bool,
    /// A cancelled run whose job was not stopped in time (`overdue_stops`).
    pub overdue_stops: bool,
    /// A schedule whose timed pause ended (`ended_pauses`).
    pub ended_pauses: bool,
    /// A schedule due, or one whose due-ness cannot be judged (`due_definitions`).
    pub due_schedules: bool,
    /// Due work to claim (`anything_due`).
    pub due_runs: bool,
}

/// The columns a schedule's `Settings` are stored in, in the order each backend binds them (its
/// `SettingsParams`): the statements that insert and rewrite a schedule name them through this.
pub(crate) const SETTINGS_COLUMNS: &str = "cron, timezone, command, workdir, max_attempts, \
     timeout_secs, backoff_base_secs, backoff_max_secs, overlap, catch_up, grace_secs, paused, \
     leftovers";

/// A `job_definitions` row as read: sound, or damaged (its problems named, the others unaffected).
pub type DefinitionRow = std::result::Result<Definition, Box<DamagedDefinition>>;

/// A `job_definitions` row as a backend read it, with the columns that did not convert: sound,
/// or damaged, naming those columns and any setting a runner cannot act on
/// (`Settings::problems`), so one bad row never fails a query for the others.
pub(crate) fn definition_row(
    definition: Definition,
    mut problems: Vec<ColumnProblem>,
) -> DefinitionRow {
    problems.extend(definition.settings.problems(&problems));
    if problems.is_empty() {
        Ok(definition)
    } else {
        Err(Box::new(DamagedDefinition {
            definition,
            problems,
        }))
    }
}

/// What `schedule apply` writes in one transaction (see `Store::apply_definitions`).
#[derive(Debug, Clone, Default)]
pub struct DefinitionChanges {
    /// New schedules: name, settings, first fire time.
    pub add: Vec<(String, Settings, Option<i64>)>,
    /// Schedules rewritten as `update_definition` does, each only if its `revision` is unchanged.
    pub update: Vec<Definition>,
    /// Schedules deleted with their runs, by name, each only if none of its runs is running.
    pub remove: Vec<String>,
}

/// What `Store::apply_definitions` did: everything, or nothing and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// Nothing changed: this schedule changed or vanished since it was read, or its name is taken.
    Conflict(String),
    /// Nothing changed: a run of this schedule, which was to be removed, is running.
    Running(String),
}

/// What removing a schedule did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The schedule and its runs are gone.
    Removed,
    NotFound,
    /// Nothing removed: these runs of the schedule are running (removing the schedule would
    /// take their lease and so kill their jobs), or were cancelled and their attempt is still
    /// open (their job is yet to be stopped). Cancel them first, and wait for the attempts to
    /// close (`cli::steer::cancel_before_removal`).
    Running(Vec<i64>),
}

/// A run as listed by `schedule list` ("last result").
#[derive(Debug, Clone)]
pub struct LastResult {
    pub run_id: i64,
    pub status: String,
    pub scheduled_for: i64,
    pub error_code: Option<String>,
}

/// One schedule's share of a batched materialisation (`Store::materialize_batch`): its cursor
/// move, and its plan (the runs to insert, given the id of a run of it that is running now).
pub struct Materialization {
    pub cursor: CursorMove,
    pub plan: Box<dyn FnMut(Option<i64>) -> Vec<NewRun>>,
}

/// What a materialisation does with a schedule row another session holds locked. Only
/// PostgreSQL locks rows; SQLite locks the whole database, and always waits (its busy timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLocks {
    /// Wait for it, up to the lock timeout. The holder is normally another tick materialising
    /// the same schedule, which commits within milliseconds; the compare-and-swap then finds the
    /// cursor moved, and nothing is left to report.
    Wait,
    /// Pass over it untouched, its cursor unmoved, so that a later tick materialises its
    /// instants (its catch-up policy deciding, as for a tick that came late). For a tick that
    /// has already waited out the lock timeout once: the holder is not another tick's short
    /// write, and waiting again, per batch or per schedule, would only add up.
    PassOver,
}

/// `materialize_together`'s results as `materialize_batch` gives them: a schedule passed over
/// for its lock is busy (exit 5, safe to retry), with `waited`, the error of the wait that came
/// first, when there was one in this batch.
fn passed_over_as_busy(
    inserted: Vec<Option<usize>>,
    waited: Option<&anyhow::Error>,
) -> Vec<Result<usize>> {
    let cause = match waited {
        Some(error) => format!("{error:#}"),
        None => "another session held its row locked; passed over, as this tick had already \
                 waited out the lock timeout once"
            .to_string(),
    };
    inserted
        .into_iter()
        .map(|n| n.ok_or_else(|| Error(crate::exit::Failure::Busy(cause.clone()).into())))
        .collect()
}

/// Schedules materialised per write transaction: one commit (one fsync) for all of them, and a
/// write lock held for tens of milliseconds, not seconds.
pub const MATERIALIZE_BATCH: usize = 500;

/// A change to a definition's cursor that only applies if nobody else moved it first.
#[derive(Debug, Clone, Copy)]
pub struct CursorMove {
    pub definition_id: i64,
    /// The definition as read: the move applies only if neither changed since.
    pub expected_through: i64,
    pub expected_revision: i64,
    pub new_through: i64,
    pub next_fire_at: Option<i64>,
}

/// What moving a schedule's cursor back did besides (see `Store::reanchor_definition`).
#[derive(Debug, Clone, Default)]
pub struct Reanchored {
    /// Skipped instants after the new cursor, deleted so they are decided again when they come.
    pub skips_forgotten: u64,
    /// Other runs of instants after the new cursor (run early, or pending until their time):
    /// kept, and those instants are not materialised again.
    pub runs_kept: u64,
    /// The skipped run written for instants at or before the new cursor that a forgotten skip's
    /// reason counted (see `tick::materialize::passed_over_before`).
    pub recorded: Option<NewRun>,
}

/// The oldest schedule run after a time (a cursor being moved back, as it was before the move;
/// an instant `why` asks about): if it is skipped, its reason may count older instants that have
/// no run of their own.
#[derive(Debug, Clone)]
pub struct RunAfterCursor {
    pub id: i64,
    pub scheduled_for: i64,
    pub status: RunStatus,
    pub skip_reason: Option<String>,
    pub created_at: i64,
}

/// Which runs `history` lists: newest first (by scheduled time), at most `limit`.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub definition_id: Option<i64>,
    pub status: Option<RunStatus>,
    /// Only runs scheduled at or after this time.
    pub since: Option<i64>,
    pub limit: usize,
}

/// A run as `history` and `show` present it, with its latest attempt's result.
#[derive(Debug, Clone)]
pub struct RunView {
    pub id: i64,
    pub job: String,
    /// The schedule's zone: the run's times print in it.
    pub timezone: String,
    pub trigger: String,
    pub status: RunStatus,
    pub scheduled_for: i64,
    pub run_at: i64,
    pub attempt: u32,
    pub max_attempts: u32,
    pub command: String,
    pub workdir: Option<String>,
    pub idempotency_key: String,
    pub owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub heartbeat_at: Option<i64>,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
    pub skip_reason: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The latest attempt: when it started, how long it took (None while running), its exit code.
    pub last_attempt_started_at: Option<i64>,
    pub last_duration_ms: Option<i64>,
    pub last_exit_code: Option<i32>,
    /// Cancelled while running, and its job not yet known to be stopped: by when the tick
    /// holding it must have stopped it (after that, recovery does).
    pub stopping_by: Option<i64>,
}

/// One attempt of a run, for `show`.
#[derive(Debug, Clone)]
pub struct AttemptView {
    pub attempt: u32,
    pub owner: String,
    pub host: String,
    pub runner_pid: u32,
    pub child_pid: Option<u32>,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub duration_ms: Option<i64>,
    pub outcome: Option<String>,
    pub exit_code: Option<i32>,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
    /// NULL while the attempt runs, and for one its runner never saw end (closed by recovery).
    pub stdout_tail: Option<Vec<u8>>,
    pub stderr_tail: Option<Vec<u8>>,
    pub stdout_bytes: Option<i64>,
    pub stderr_bytes: Option<i64>,
}

/// One event of a run's timeline.
#[derive(Debug, Clone)]
pub struct EventView {
    pub at: i64,
    pub kind: String,
    pub actor: String,
    /// JSON text, as stored.
    pub detail: Option<String>,
}

/// A run named in `status`: due, running, dead, or the oldest kept.
#[derive(Debug, Clone)]
pub struct RunBrief {
    pub id: i64,
    pub job: String,
    pub timezone: String,
    pub scheduled_for: i64,
    pub run_at: i64,
    pub attempt: u32,
    pub max_attempts: u32,
    pub error_code: Option<String>,
    pub finished_at: Option<i64>,
}

/// A running run and its lease.
#[derive(Debug, Clone)]
pub struct RunningView {
    pub run: RunBrief,
    pub owner: String,
    pub host: Option<String>,
    pub attempt_started_at: Option<i64>,
    pub heartbeat_at: Option<i64>,
    pub lease_expires_at: i64,
}

/// A run cancelled while running whose job is still being stopped (its `stopping_by` is set),
/// and where one of its open attempts runs: one view per open attempt (a run that another host
/// recovered and retried can have two), or one with none once they are closed or gone.
#[derive(Debug, Clone)]
pub struct StoppingView {
    pub run: RunBrief,
    /// The open attempt's number, host and processes (None once every attempt is closed or
    /// gone).
    pub attempt: Option<u32>,
    pub host: Option<String>,
    pub runner_pid: Option<u32>,
    pub child_pid: Option<u32>,
    /// By when the tick holding it must have stopped its job; after that, the next tick on its
    /// host does.
    pub stopping_by: i64,
}

/// Everything `status` and `metrics` report, read in one snapshot.
#[derive(Debug, Clone)]
pub struct Health {
    /// Every status, zeros included, in `RunStatus::ALL` order.
    pub counts: Vec<(RunStatus, i64)>,
    /// The pending run that has been due the longest without being claimed (runs held by a
    /// paused schedule are not due: they wait for its resume).
    pub oldest_due: Option<RunBrief>,
    /// Pending runs held by their paused schedule (due or not).
    pub held_by_pause: i64,
    /// Running runs, the earliest lease expiry first (expired ones first), at most `RUNNING_LISTED`.
    pub running: Vec<RunningView>,
    /// Running runs whose lease expired before `now`: their runner stopped heart-beating.
    pub expired_leases: i64,
    /// Runs cancelled while running whose job is still being stopped, one per open attempt,
    /// the earliest `stopping_by` first, at most `RUNNING_LISTED`.
    pub stopping: Vec<StoppingView>,
    /// Runs between attempts or retrying now, by the attempt number they are on or will be on.
    pub retries_in_flight: Vec<(u32, i64)>,
    /// Error codes of attempts that finished since `recent_since`, most frequent first.
    pub top_errors: Vec<(String, i64)>,
    /// Runs that went dead since `recent_since`: how many, and the latest few.
    pub dead_recent: i64,
    pub dead_recent_runs: Vec<RunBrief>,
    /// When the latest tick ran, by its own clock.
    pub last_tick_at: Option<i64>,
    /// The latest time any tick's clock read. Ahead of now: this clock stepped back, or a tick
    /// ran with a clock ahead.
    pub clock_high_water: Option<i64>,
    /// When the latest prune of either kind ran: the tick's automatic one (its turn) or a
    /// `runner prune` (not a `--dry-run`).
    pub last_prune_at: Option<i64>,
    pub oldest_run: Option<RunBrief>,
    pub storage: Storage,
}

/// A schedule's runs in one status, for per-job metrics (`Store::job_run_stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRunStats {
    pub job: String,
    /// `None`: the schedule has no runs at all (it still gets its row).
    pub status: Option<RunStatus>,
    pub runs: i64,
    /// The latest `finished_at` among these runs.
    pub last_finished_at: Option<i64>,
    /// The schedule's runs that ever went dead (the same on each of its rows): retry and prune
    /// never lower it.
    pub dead_runs_total: i64,
    /// The latest finish among the schedule's succeeded runs that pruning deleted (the same on
    /// each of its rows).
    pub pruned_success_at: Option<i64>,
    /// The last, by `LastRun`'s order, of the schedule's runs that ran and that pruning deleted
    /// (the same on each of its rows).
    pub pruned_last_run: Option<LastRun>,
}

/// How much space the database takes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Storage {
    /// SQLite: the main file's size on disk. PostgreSQL: the runner tables' (indexes and TOAST
    /// included).
    pub database_bytes: u64,
    /// The write-ahead log not yet folded into the main file; `None` where the database has no
    /// log of its own (PostgreSQL's WAL belongs to the whole server).
    pub wal_bytes: Option<u64>,
}

impl Storage {
    /// The space the database takes: its main file and its write-ahead log, if it has one, as
    /// they are on disk.
    pub fn total_bytes(&self) -> u64 {
        self.database_bytes + self.wal_bytes.unwrap_or(0)
    }
}

/// Running runs listed by `status` at most (they are counted in full).
pub const RUNNING_LISTED: usize = 50;
/// Error codes and dead runs listed by `status` at most.
pub const RECENT_LISTED: usize = 10;

/// Rows deleted (or that would be) by pruning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneCounts {
    pub runs: u64,
    pub attempts: u64,
    pub events: u64,
    /// What the batch that found nothing more to delete passed over.
    pub left: LeftForLater,
}

/// Runs past the cutoff that a prune left for the next one because another command was changing
/// their schedules at that moment (a long `schedule apply`, a `schedule rm`), and how many
/// schedules. Only PostgreSQL passes runs over; SQLite has one writer, so never any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftForLater {
    pub runs: u64,
    pub schedules: u64,
}

impl std::ops::AddAssign for PruneCounts {
    /// Sums what was deleted; what was left is the latest batch's word (only the last batch of a
    /// prune, the one that found nothing more to delete, says it).
    fn add_assign(&mut self, other: PruneCounts) {
        self.runs += other.runs;
        self.attempts += other.attempts;
        self.events += other.events;
        self.left = other.left;
    }
}

/// The states pruning may delete: finished for good. Never pending or running.
pub const PRUNABLE: [RunStatus; 4] = [
    RunStatus::Succeeded,
    RunStatus::Dead,
    RunStatus::Cancelled,
    RunStatus::Skipped,
];

/// The schema version a store found when it was opened (0: none, the schema was created) and
/// the version it has now, after any migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaVersions {
    pub found: i64,
    pub current: i64,
}

/// A column's value as both backends store it: every runner column is an integer, text, bytes or
/// NULL (SQLite INTEGER/TEXT/BLOB, PostgreSQL bigint/text/bytea), so rows copy between backends
/// column by column without either knowing the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Integer(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    pub fn integer(&self) -> Option<i64> {
        match self {
            Value::Integer(value) => Some(*value),
            _ => None,
        }
    }
}

/// Rows of one table with every column it has (`SELECT *`), so a column added by a later
/// migration is carried without this code naming it.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

impl Rows {
    fn column(&self, name: &str) -> Result<usize> {
        self.columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| Error(anyhow::anyhow!("the rows to move have no {name} column")))
    }
}

/// A batch of what `runner migrate` moves from one database to another (see
/// `Store::migrate_out`): every schedule (with its dead-runs counter, history or not: it is the
/// schedule's; without history, with the last success and last run of the finished runs left
/// behind, see `carry_last_runs`) in the first batch, and in each up to [`MIGRATE_BATCH`] of the runs that must not be
/// lost (pending ones; with history, every run), in id order, with their attempts and events.
/// Ids are the source's.
#[derive(Debug, Clone, Default)]
pub struct Migration {
    pub definitions: Rows,
    pub runs: Rows,
    pub attempts: Rows,
    pub events: Rows,
}

impl Migration {
    pub fn names(&self) -> Vec<String> {
        let index = self.definitions.columns.iter().position(|c| c == "name");
        self.definitions
            .rows
            .iter()
            .filter_map(|row| match index.map(|i| &row[i]) {
                Some(Value::Text(name)) => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// How many runs of each kind moved: pending (those `migrate_out` cancels in the source), and
    /// finished ones (history).
    pub fn pending_runs(&self) -> usize {
        let index = self.runs.columns.iter().position(|c| c == "status");
        self.runs
            .rows
            .iter()
            .filter(|row| index.map(|i| &row[i]) == Some(&Value::Text("pending".into())))
            .count()
    }
}

/// Runs per batch of a migration, read together with their attempts and events: a migration of
/// any size holds about this many in memory at once. (All at once, 610,000 runs and their events
/// took `migrate` to 1 GB.) An attempt keeps up to 64 KiB of each output stream: a batch of runs
/// of one attempt each is at most about 64 MB.
pub const MIGRATE_BATCH: i64 = 500;

/// A migration's rows, read batch by batch inside the source's transaction
/// (`Store::migrate_out`), for the target to write (`Store::import_migration`).
pub trait MigrationBatches {
    /// The next batch: the first holds every schedule, each the runs after the previous batch's
    /// with their attempts and events; `None` once every run to move was read.
    fn next_batch(&mut self) -> Result<Option<Migration>>;
}

/// Which rows a migration reads, the same SQL for every backend (`placeholder(n)` is the
/// backend's n-th parameter): every schedule; the runs to move (the pending ones, which would
/// otherwise be lost, or with `with_history` every run) after run id parameter 1, parameter 2 of
/// them; and the attempts, then the events, of the runs to move with ids after parameter 1 up to
/// parameter 2.
struct MigrationSql {
    definitions: &'static str,
    /// Without history: per schedule and status that ran, the latest finish among its runs,
    /// which stay behind (see `carry_last_runs`).
    last_runs_left: Option<String>,
    runs: String,
    attempts: String,
    events: String,
}

impl MigrationSql {
    fn new(with_history: bool, placeholder: fn(usize) -> String) -> MigrationSql {
        let moved = if with_history {
            ""
        } else {
            " AND status = 'pending'"
        };
        let (p1, p2) = (placeholder(1), placeholder(2));
        let of_moved_runs = |table: &str| {
            format!(
                "SELECT * FROM {table} WHERE run_id IN
                     (SELECT id FROM job_runs WHERE id > {p1} AND id <= {p2}{moved})
                 ORDER BY id"
            )
        };
        let last_runs_left = (!with_history).then(|| {
            format!(
                "SELECT definition_id, status, max(finished_at) AS finished_at FROM job_runs
                 WHERE finished_at IS NOT NULL AND {} IS NOT NULL
                 GROUP BY definition_id, status",
                LastRun::rank_sql("status")
            )
        });
        MigrationSql {
            definitions: "SELECT * FROM job_definitions ORDER BY id",
            last_runs_left,
            runs: format!("SELECT * FROM job_runs WHERE id > {p1}{moved} ORDER BY id LIMIT {p2}"),
            attempts: of_moved_runs("job_attempts"),
            events: of_moved_runs("job_events"),
        }
    }
}

/// Reads a migration batch by batch through `read` (a backend's: one table's rows for
/// `MigrationSql`'s SQL in its parameter syntax, with the integer parameters it takes), and
/// counts what it handed out.
pub struct BatchReader<F> {
    sql: MigrationSql,
    read: F,
    /// The last run id read; `None` before the first batch.
    after: Option<i64>,
    /// Every run to move was read.
    done: bool,
    counts: MigrationCounts,
}

impl<F> BatchReader<F>
where
    F: FnMut(Table, &str, &[i64]) -> Result<Rows>,
{
    /// The runs to move: with `with_history` every run, else the pending ones. `placeholder(n)`
    /// is the backend's n-th parameter.
    pub fn new(with_history: bool, placeholder: fn(usize) -> String, read: F) -> Self {
        BatchReader {
            sql: MigrationSql::new(with_history, placeholder),
            read,
            after: None,
            done: false,
            counts: MigrationCounts::default(),
        }
    }

    /// What was handed out, once the target has read every batch; an error (the source must
    /// then retire nothing) if it left runs unread.
    pub fn finish(self) -> anyhow::Result<MigrationCounts> {
        if !self.done {
            anyhow::bail!("the migration's target left runs unread; nothing was moved");
        }
        Ok(self.counts)
    }
}

impl<F> MigrationBatches for BatchReader<F>
where
    F: FnMut(Table, &str, &[i64]) -> Result<Rows>,
{
    fn next_batch(&mut self) -> Result<Option<Migration>> {
        if self.done {
            return Ok(None);
        }
        let first = self.after.is_none();
        let after = self.after.unwrap_or(i64::MIN);
        let definitions = if first {
            let mut definitions = (self.read)(Table::Definitions, self.sql.definitions, &[])?;
            if let Some(sql) = &self.sql.last_runs_left {
                let left = (self.read)(Table::Runs, sql, &[])?;
                carry_last_runs(&mut definitions, &left)?;
            }
            definitions
        } else {
            Rows::default()
        };
        let runs = (self.read)(Table::Runs, &self.sql.runs, &[after, MIGRATE_BATCH])?;
        let id = runs.column("id")?;
        let last = match runs.rows.last().map(|row| row[id].integer()) {
            Some(Some(last)) => last,
            Some(None) => return Err(Error(anyhow::anyhow!("a run to move has no id"))),
            None => after,
        };
        self.done = (runs.rows.len() as i64) < MIGRATE_BATCH;
        if runs.rows.is_empty() && !first {
            return Ok(None);
        }
        let batch = Migration {
            definitions,
            attempts: (self.read)(Table::Attempts, &self.sql.attempts, &[after, last])?,
            events: (self.read)(Table::Events, &self.sql.events, &[after, last])?,
            runs,
        };
        self.after = Some(last);
        self.counts += batch.counts();
        Ok(Some(batch))
    }
}

/// Without history, the finished runs stay behind, and with them what the per-job metrics read:
/// each schedule's last success and last run. Fold them into the schedule's pruned columns
/// (`left`: per schedule and status that ran, the latest finish among the runs that stay), so
/// that the target, which holds none of those runs, reports what the source did, as if they
/// had been pruned there.
fn carry_last_runs(definitions: &mut Rows, left: &Rows) -> Result<()> {
    use std::collections::HashMap;
    let odd = |what: &str| Error(anyhow::anyhow!("a schedule's runs to carry have {what}"));
    let (schedule, status, finished_at) = (
        left.column("definition_id")?,
        left.column("status")?,
        left.column("finished_at")?,
    );
    let mut last_runs: HashMap<i64, Vec<LastRun>> = HashMap::new();
    for row in &left.rows {
        let (Some(id), Some(at), Value::Text(text)) = (
            row[schedule].integer(),
            row[finished_at].integer(),
            &row[status],
        ) else {
            return Err(odd("a value of the wrong type"));
        };
        let status: RunStatus = text.parse().map_err(|_| odd("an unknown status"))?;
        last_runs
            .entry(id)
            .or_default()
            .extend(LastRun::of(at, status));
    }
    let id = definitions.column("id")?;
    let success_at = definitions.column("pruned_success_at")?;
    let last_at = definitions.column("pruned_last_finished_at")?;
    let last_status = definitions.column("pruned_last_status")?;
    for row in &mut definitions.rows {
        let Some(kept) = row[id].integer().and_then(|id| last_runs.remove(&id)) else {
            continue; // no run of it stays behind: its pruned columns say it all
        };
        let pruned_last = match (&row[last_at], &row[last_status]) {
            (Value::Integer(at), Value::Text(text)) => text
                .parse()
                .ok()
                .and_then(|status| LastRun::of(*at, status)),
            _ => None,
        };
        let kept_success = kept
            .iter()
            .filter(|run| run.status() == RunStatus::Succeeded)
            .map(|run| run.finished_at())
            .max();
        if let Some(at) = kept_success.max(row[success_at].integer()) {
            row[success_at] = Value::Integer(at);
        }
        if let Some(last) = kept.into_iter().chain(pruned_last).max() {
            row[last_at] = Value::Integer(last.finished_at());
            row[last_status] = Value::Text(last.status().as_str().to_string());
        }
    }
    Ok(())
}

/// The table a row of a `Migration` goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    Definitions,
    Runs,
    Attempts,
    Events,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Definitions => "job_definitions",
            Table::Runs => "job_runs",
            Table::Attempts => "job_attempts",
            Table::Events => "job_events",
        }
    }
}

/// Inserts one row of a table: its columns (the `id` column left out) and their values; returns
/// the id the target gave it.
pub type InsertRow<'a> = dyn FnMut(Table, &[String], &[Value]) -> Result<i64> + 'a;

/// The target side of `runner migrate`, for every backend, inside the backend's transaction:
/// if a schedule of one of the migration's names is among `existing` (the target's), return
/// `Imported::NamesTaken` (all of them) having written nothing; else write every batch through
/// `insert` (see [`insert_migration`]).
pub fn import_batches(
    batches: &mut dyn MigrationBatches,
    existing: &[String],
    insert: &mut InsertRow<'_>,
) -> Result<Imported> {
    let mut ids = MigratedIds::default();
    let mut first = true;
    while let Some(batch) = batches.next_batch()? {
        if std::mem::take(&mut first) {
            let taken = names_taken(&batch, existing);
            if !taken.is_empty() {
                return Ok(Imported::NamesTaken(taken));
            }
        }
        insert_migration(&batch, &mut ids, insert)?;
    }
    Ok(Imported::Done)
}

/// The new ids a migration's target gave the schedules, by their old ones: the runs and attempts
/// of every batch point at them. (A run's attempts and events come in its own batch.)
#[derive(Debug, Default)]
struct MigratedIds {
    definitions: std::collections::HashMap<i64, i64>,
}

/// Write a batch of a migration through `insert` (which inserts one row into a table, the `id`
/// column left out, and returns the id the target gave it), in dependency order, pointing each
/// run at its schedule's new id, each attempt at its run's and its schedule's, and each event at
/// its run's (schedules as `ids` holds them from the first batch). Shared by the backends so
/// the mapping is written once; each backend only inserts.
fn insert_migration(
    migration: &Migration,
    ids: &mut MigratedIds,
    insert: &mut InsertRow<'_>,
) -> Result<()> {
    use std::collections::HashMap;
    // `parents`: the columns naming rows copied before, with their old ids' new ones. `new_ids`
    // takes the rows' own, if anything points at them.
    let mut copy = |table: Table,
                    rows: &Rows,
                    parents: &[(&str, &HashMap<i64, i64>)],
                    mut new_ids: Option<&mut HashMap<i64, i64>>|
     -> Result<()> {
        if rows.rows.is_empty() {
            return Ok(()); // the schedules of a batch after the first
        }
        let id = rows.column("id")?;
        let parents = parents
            .iter()
            .map(|(column, ids)| Ok::<_, Error>((rows.column(column)?, *ids)))
            .collect::<Result<Vec<_>>>()?;
        let columns: Vec<String> = rows
            .columns
            .iter()
            .filter(|c| *c != "id")
            .cloned()
            .collect();
        for row in &rows.rows {
            let mut values = Vec::with_capacity(columns.len());
            for (index, value) in row.iter().enumerate() {
                if index == id {
                    continue;
                }
                match parents.iter().find(|(column, _)| *column == index) {
                    Some((_, ids)) => {
                        let new =
                            value
                                .integer()
                                .and_then(|old| ids.get(&old))
                                .ok_or_else(|| {
                                    Error(anyhow::anyhow!(
                                        "a row of {} points at a row that is not moved",
                                        table.name()
                                    ))
                                })?;
                        values.push(Value::Integer(*new));
                    }
                    None => values.push(value.clone()),
                }
            }
            let new_id = insert(table, &columns, &values)?;
            if let (Some(new_ids), Some(old)) = (new_ids.as_deref_mut(), row[id].integer()) {
                new_ids.insert(old, new_id);
            }
        }
        Ok(())
    };
    let definitions = &mut ids.definitions;
    let mut runs = HashMap::new();
    copy(
        Table::Definitions,
        &migration.definitions,
        &[],
        Some(definitions),
    )?;
    copy(
        Table::Runs,
        &migration.runs,
        &[("definition_id", definitions)],
        Some(&mut runs),
    )?;
    copy(
        Table::Attempts,
        &migration.attempts,
        &[("run_id", &runs), ("definition_id", definitions)],
        None,
    )?;
    copy(Table::Events, &migration.events, &[("run_id", &runs)], None)?;
    Ok(())
}

/// The SQL that inserts one row of `table` with `columns` (`placeholder(n)` is the backend's
/// n-th parameter, from 1) and returns its new id. The column names are the source database's
/// own, quoted.
pub fn insert_row_sql(
    table: Table,
    columns: &[String],
    placeholder: fn(usize) -> String,
) -> String {
    let names: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
    let values: Vec<String> = (1..=columns.len()).map(placeholder).collect();
    format!(
        "INSERT INTO {} ({}) VALUES ({}) RETURNING id",
        table.name(),
        names.join(", "),
        values.join(", ")
    )
}

/// The job of the cancelled run with id `run` (a parameter in the backend's syntax) is known
/// stopped, or no longer waited for: it no longer holds back its `forbid` schedule
/// (`Store::claim`), once no attempt of the run is open any more. A run that another host
/// recovered and retried can have two (the stalled host's, left open for that host to close, and
/// the retry's), and whichever closes first says nothing of the other's job. With `host` (a
/// parameter too), once none is open on that host: past the deadline, an attempt on another host
/// is left to that host's tick and no longer waited for (`Store::release_stop`).
///
/// On PostgreSQL each close locks the run's row first, so two attempts of one run closed at the
/// same moment by two transactions take turns, and the later sees the earlier closed (under read
/// committed, each could otherwise see the other still open, and the run waited until its
/// deadline).
pub fn job_stopped_sql(run: &str, host: Option<&str>) -> String {
    let on_host = host.map_or(String::new(), |h| format!(" AND a.host = {h}"));
    format!(
        "UPDATE job_runs SET stopping_by = NULL
         WHERE id = {run} AND stopping_by IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM job_attempts a
                           WHERE a.run_id = {run} AND a.finished_at IS NULL{on_host})"
    )
}

/// `Store::overdue_stops`'s rows (a run, its `stopping_by` and one of its open attempts, if
/// any), ordered by run, gathered into one `OverdueStop` per run.
pub fn overdue_stops_of(
    rows: impl IntoIterator<Item = (i64, i64, Option<AttemptHolder>)>,
) -> Vec<OverdueStop> {
    let mut overdue: Vec<OverdueStop> = Vec::new();
    for (run_id, stopping_by, holder) in rows {
        match overdue.last_mut() {
            Some(last) if last.run_id == run_id => last.holders.extend(holder),
            _ => overdue.push(OverdueStop {
                run_id,
                stopping_by,
                holders: holder.into_iter().collect(),
            }),
        }
    }
    overdue
}

/// Raises by one the dead-runs counter of the schedule of the run that just went dead (the same
/// SQL for every backend, with the run's id as parameter 1 in the backend's syntax).
pub fn count_dead_sql(placeholder: &str) -> String {
    format!(
        "UPDATE job_definitions SET dead_runs_total = dead_runs_total + 1
         WHERE id = (SELECT definition_id FROM job_runs WHERE id = {placeholder})"
    )
}

/// Before a prune deletes the runs `doomed` names (a condition on `job_runs.id`, in the
/// backend's syntax): each schedule keeps the last of those runs that ran, by `LastRun`'s order,
/// in `pruned_last_finished_at` and `pruned_last_status`, unless the run it keeps there already
/// is as late (for `runner_job_last_run_status`). The order is total on what is stored, so the
/// result depends on neither the batches nor the order in which prunes deleted the runs. The
/// same SQL for every backend.
pub fn keep_pruned_last_run_sql(doomed: &str) -> String {
    let rank = LastRun::rank_sql;
    format!(
        "UPDATE job_definitions
         SET pruned_last_finished_at = pruned.at, pruned_last_status = pruned.ended
         FROM (SELECT definition_id, at, ended FROM
                   (SELECT definition_id, finished_at AS at, status AS ended,
                           row_number() OVER (PARTITION BY definition_id
                                              ORDER BY finished_at DESC, {status} DESC) AS nth
                    FROM job_runs WHERE {doomed} AND {status} IS NOT NULL) AS ranked
               WHERE nth = 1) AS pruned
         WHERE job_definitions.id = pruned.definition_id
           AND (job_definitions.pruned_last_finished_at IS NULL
                OR (pruned.at, {ended}) > (job_definitions.pruned_last_finished_at, {kept}))",
        status = rank("status"),
        ended = rank("pruned.ended"),
        kept = rank("job_definitions.pruned_last_status"),
    )
}

/// The names of `migration`'s schedules among `existing`, sorted.
fn names_taken(migration: &Migration, existing: &[String]) -> Vec<String> {
    let mut taken: Vec<String> = migration
        .names()
        .into_iter()
        .filter(|name| existing.contains(name))
        .collect();
    taken.sort();
    taken
}

/// What `Store::migrate_out` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigratedOut {
    /// Written elsewhere by the callback, then retired here; the counts moved.
    Done(MigrationCounts),
    /// Nothing read, written or changed: these runs are running (a tick is active).
    Running(Vec<i64>),
}

/// How much a migration moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrationCounts {
    pub schedules: usize,
    pub pending_runs: usize,
    pub finished_runs: usize,
    pub attempts: usize,
    pub events: usize,
}

impl std::ops::AddAssign for MigrationCounts {
    fn add_assign(&mut self, other: MigrationCounts) {
        self.schedules += other.schedules;
        self.pending_runs += other.pending_runs;
        self.finished_runs += other.finished_runs;
        self.attempts += other.attempts;
        self.events += other.events;
    }
}

impl Migration {
    pub fn counts(&self) -> MigrationCounts {
        let pending = self.pending_runs();
        MigrationCounts {
            schedules: self.definitions.rows.len(),
            pending_runs: pending,
            finished_runs: self.runs.rows.len() - pending,
            attempts: self.attempts.rows.len(),
            events: self.events.rows.len(),
        }
    }
}

/// What `Store::import_migration` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    Done,
    /// Nothing written: schedules of these names exist here already.
    NamesTaken(Vec<String>),
}

/// When a write transaction's commit must reach the disk.
///
/// Every commit is atomic and, once it returns, visible to every other runner and survives a
/// crash of this process (the operating system holds it). A power cut or kernel crash is what
/// durability is about: the database then comes back as it was at some commit, never half-way,
/// and never with a later commit kept while an earlier one is lost (SQLite's WAL and PostgreSQL's
/// WAL are both one ordered log). So a write that is safe to lose may be committed `Deferred`,
/// and the next `Durable` commit (of this runner or any other) makes it durable too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// On disk when the method returns (an fsync, or a synchronous commit).
    Durable,
    /// On disk at the latest with the next durable commit or `Store::sync`.
    Deferred,
}

/// Due schedules read a batch at a time (see `Store::due_reader`), each returned once, whatever
/// the tick's own connection has written meanwhile.
pub trait DueReader: Send {
    /// Up to `limit` due definitions, in `due_definitions`' order, that this reader has not
    /// returned before; fewer when no more are due.
    fn next_batch(&mut self, limit: usize) -> Result<Vec<DefinitionRow>>;
}

/// A backend persists what it is told, in the transaction it is told to use: every decision
/// (a run's next state, the events that tell it, retry, overlap at materialisation, idempotency
/// keys) is made in `model` and `tick` and handed over as values. Times are epoch seconds, taken
/// from the caller (`now`). Each method is one transaction unless it says otherwise; a write
/// transaction takes the write lock at its start. "Fenced by a token" means: applied only while
/// the run is `running` under that lease token (`LeaseToken`).
pub trait Store {
    /// Where this store lives, for messages (never a password).
    fn describe(&self) -> String;
    /// The schema version found on opening and the one it has now (`init` says which it did).
    fn schema(&self) -> SchemaVersions;
    /// What names this database on this host in a job's marker (`RUNNER_DATABASE`): a job's
    /// processes are only ever signalled by runners of the database that started them, never by
    /// one working on a restored copy elsewhere.
    fn identity(&self) -> String;
    /// What an older runner put in the marker for this database, if it differs (PostgreSQL: the
    /// URL as written): recovery and cancel look for that too, so jobs started before an upgrade
    /// are still found.
    fn former_identity(&self) -> Option<String> {
        None
    }

    // ---- schedules ----
    /// Insert a schedule with its cursor at `now` (`materialized_through`, `created_at`,
    /// `updated_at`, `timing_changed_at`) and `next_fire_at`. `Failure::Usage` when the name is
    /// taken.
    fn add_definition(
        &mut self,
        name: &str,
        settings: &Settings,
        now: i64,
        next_fire_at: Option<i64>,
    ) -> Result<Definition>;
    /// Rewrite settings and the cursor (pause/resume/edit): the cursor never moves back; the
    /// revision rises by one; `updated_at` becomes `now`, and so does `timing_changed_at` when
    /// the cron or the zone differs from the stored one (only then: `why` tells a change of
    /// timing from any other by it). `Failure::NotFound` if the definition vanished.
    fn update_definition(&mut self, definition: &Definition, now: i64) -> Result<()>;
    /// Delete a schedule with its runs (and their attempts and events), unless a run of it is
    /// running (checked under the write lock).
    fn remove_definition(&mut self, name: &str) -> Result<Removal>;
    /// `schedule apply`: in ONE transaction, delete `changes.remove` (with their runs), rewrite
    /// `changes.update` (settings and cursor exactly as `update_definition` writes them, each only
    /// if its `revision` is still the one read) and insert `changes.add` (as `add_definition`).
    /// All or nothing: on the first refusal, roll back and return it, having changed nothing:
    /// `Applied::Running(name)` if a schedule to remove has a running run (checked under the write
    /// lock), `Applied::Conflict(name)` if a schedule to update or remove changed or vanished
    /// since it was read, or a name to add is taken. Every backend must implement it with the
    /// same all-or-nothing rule; it is plain INSERT/UPDATE/DELETE, no tick logic.
    fn apply_definitions(&mut self, changes: &DefinitionChanges, now: i64) -> Result<Applied>;
    /// The schedule named `name`; a damaged row comes back as such, never as an error.
    fn definition(&self, name: &str) -> Result<Option<DefinitionRow>>;
    /// Every schedule, by name; damaged rows come back as such, never failing the others.
    fn definitions(&self) -> Result<Vec<DefinitionRow>>;
    /// The schedule's latest finished run (by scheduled time).
    fn last_result(&self, definition_id: i64) -> Result<Option<LastResult>>;

    // ---- the tick ----
    /// Record that a tick ran at `now` (its clock's reading): `last_tick_at` becomes `now`, the
    /// latest tick whatever its clock said, and the clock high-water mark (the latest time any
    /// tick's clock read) rises to `now` if it was lower. Returns the high-water mark as it was
    /// before, so the tick can tell whether its clock is behind what the database has seen.
    ///
    /// Committed `Deferred`: a tick mark lost to a power cut is one minute's staleness, and an
    /// idle tick (cron's every-minute wake-up) does not wait for the disk at this commit.
    fn record_tick(&mut self, now: i64) -> Result<Option<i64>>;
    /// Enabled definitions whose next fire time is at or before `now`, and damaged rows whose
    /// pause flag or next fire time cannot be read (so a tick reports them instead of never
    /// seeing them), by next fire time then id; the first `limit` of them when one is given.
    fn due_definitions(&self, now: i64, limit: Option<usize>) -> Result<Vec<DefinitionRow>>;
    /// What `due_definitions(now, None)` returns, apart from the schedules in `read` (by id),
    /// read a batch at a time on a connection of its own, for a thread: a tick writes one batch
    /// while the next is read. `None` where that would not help (SQLite outside WAL mode): the
    /// caller reads them on this connection.
    fn due_reader(&self, _now: i64, _read: HashSet<i64>) -> Result<Option<Box<dyn DueReader>>> {
        Ok(None)
    }
    /// Paused definitions whose `paused_until` is at or before `now` (`pause --for` has ended):
    /// the tick resumes them (with `apply_definitions`, so only if unchanged since read).
    fn ended_pauses(&self, now: i64) -> Result<Vec<DefinitionRow>>;
    /// In one transaction: if the cursor is still where `cursor` expects (and the schedule is not
    /// paused), move it, then insert the runs that `plan` returns (given the id of a run of this
    /// schedule that is running now, if any), each with its `NewRun::event()`, copying the
    /// schedule's command and policies onto the run. An instant that already has a schedule run
    /// is left alone (one run per instant). Returns the runs inserted; 0 if another tick got
    /// there first.
    ///
    /// Committed `Deferred`: the cursor and its runs are lost together or kept together, and a
    /// lost materialisation is redone by the next tick (its catch-up policy deciding, as for a
    /// tick that came late), so no instant is run twice or dropped unrecorded.
    fn materialize(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        plan: &mut dyn FnMut(Option<i64>) -> Vec<NewRun>,
    ) -> Result<usize>;
    /// `materialize` for several schedules in one transaction, all or nothing: each keeps its
    /// own compare-and-swap on its cursor, and any failure (a bad schedule, a deadlock with a
    /// racing transaction, a row locked past the lock timeout) leaves nothing of the batch
    /// written. Per schedule, in order: the runs inserted (0 if another tick got there first),
    /// or, with `RowLocks::PassOver`, `None` for a schedule whose row another session held
    /// (nothing of it written; not one that another session has materialised meanwhile, which is
    /// 0).
    fn materialize_together(
        &mut self,
        batch: &mut [Materialization],
        now: i64,
        actor: &Actor,
        locks: RowLocks,
    ) -> Result<Vec<Option<usize>>>;
    /// `materialize` for several schedules, in one transaction when they all succeed. Should the
    /// transaction wait out a lock (busy: another session held a row past the lock timeout),
    /// the batch is written again passing over the rows still held: one wait per batch, not one
    /// per schedule. Should it fail otherwise, each is written again in its own transaction, so
    /// only the failing one fails (a savepoint per schedule would cost every schedule, for a
    /// failure that almost never happens). Per schedule, in order: the runs inserted, or its
    /// error; a schedule passed over for its lock has a busy error (exit 5), the first wait's.
    fn materialize_batch(
        &mut self,
        mut batch: Vec<Materialization>,
        now: i64,
        actor: &Actor,
        mut locks: RowLocks,
    ) -> Result<Vec<Result<usize>>> {
        let busy = match self.materialize_together(&mut batch, now, actor, locks) {
            Ok(inserted) => return Ok(passed_over_as_busy(inserted, None)),
            Err(e) if crate::exit::is_busy(&e.0) => e.0,
            Err(_) => return Ok(self.materialize_each(batch, now, actor, locks)),
        };
        if locks == RowLocks::Wait {
            locks = RowLocks::PassOver;
            match self.materialize_together(&mut batch, now, actor, locks) {
                Ok(inserted) => return Ok(passed_over_as_busy(inserted, Some(&busy))),
                Err(e) if crate::exit::is_busy(&e.0) => {}
                Err(_) => return Ok(self.materialize_each(batch, now, actor, locks)),
            }
        }
        // Busy without a row to pass over (SQLite's database lock, a statement timeout): the
        // next tick writes them all, their cursors unmoved.
        let busy = format!("{busy:#}");
        Ok(batch
            .iter()
            .map(|_| Err(Error(crate::exit::Failure::Busy(busy.clone()).into())))
            .collect())
    }
    /// Each schedule of `batch` in its own transaction (`materialize_batch`'s fallback). Once one
    /// waits out a lock, the rest pass over the rows still held.
    fn materialize_each(
        &mut self,
        batch: Vec<Materialization>,
        now: i64,
        actor: &Actor,
        mut locks: RowLocks,
    ) -> Vec<Result<usize>> {
        let mut results = Vec::with_capacity(batch.len());
        for mut m in batch {
            let one = std::slice::from_mut(&mut m);
            let result = match self.materialize_together(one, now, actor, locks) {
                Ok(inserted) => passed_over_as_busy(inserted, None).remove(0),
                Err(e) => Err(e),
            };
            if matches!(&result, Err(e) if crate::exit::is_busy(&e.0)) {
                locks = RowLocks::PassOver;
            }
            results.push(result);
        }
        results
    }
    /// Insert a manual run (`run NAME`) of the schedule, copying its command and policies, with
    /// its `NewRun::event()`. Returns its id.
    fn enqueue(&mut self, definition_id: i64, run: &NewRun, now: i64, actor: &Actor)
        -> Result<i64>;
    /// Running runs whose lease expired before `now`, oldest first, with their open attempt.
    fn expired_leases(&self, now: i64, limit: usize) -> Result<Vec<ExpiredLease>>;
    /// Claim up to `batch` claimable runs, by `run_at` then id, in one short transaction.
    ///
    /// The claim rule, the same for every backend and checked inside the claiming transaction so
    /// racing claims cannot both pass it: a run is claimable when it is `pending` with
    /// `run_at <= now`, its schedule is not paused (a pause holds its runs, retries and manual
    /// runs alike, until `resume`), and, if its schedule's overlap policy is `forbid`, no run of
    /// that schedule is `running` and it is the schedule's oldest such run (by `run_at`, then id).
    /// Nor, for `forbid`, while the job of a run of that schedule cancelled while running is
    /// being stopped (its `stopping_by` is set, `job_runs_stopping`): it lives until the tick
    /// holding it stops it at its next heartbeat and closes the attempt, or, past `stopping_by`,
    /// until recovery stops it (`overdue_stops`).
    /// So a claim never starts a second run of a `forbid` schedule, and never takes two at once.
    /// Where claims read from snapshots (PostgreSQL), the unique index on running `forbid` runs
    /// (`running_alone`, which the claim sets) refuses the second, and the claim is made again.
    ///
    /// Each claimed run becomes `running` under a fresh random lease token owned by
    /// `actor.owner`, expiring at `now + lease_secs`, with `heartbeat_at = now`, its attempt
    /// number one higher and `started_at` set if unset; an attempt row is opened for it (actor,
    /// token, `started_at = now`) and `NewEvent::claimed` recorded. `more_due` tells whether any
    /// `pending` run with `run_at <= now` of a schedule that is not paused is left after the claim.
    ///
    /// Committed `Deferred` (as is `claim_run`): a claim lost to a power cut is one whose runs
    /// never started (a start is recorded durably before its command runs, `record_starts`), so
    /// they are simply due again.
    fn claim(&mut self, actor: &Actor, now: i64, lease_secs: i64, batch: usize) -> Result<Claimed>;
    /// Whether `claim` at `now` would find due work: a `pending` run with `run_at <= now` of a
    /// schedule that is not paused. A read: no lock, nothing written.
    fn anything_due(&self, now: i64) -> Result<bool>;
    /// What a tick's steps would find at `now`, on host `host`, in one read: whether
    /// `expired_leases`, `orphaned_attempts`, `ended_pauses` and `due_definitions` would return
    /// anything, and `anything_due`. No lock, nothing written.
    fn pending_work(&self, now: i64, host: &str) -> Result<PendingWork>;
    /// Claim run `run_id` alone (`run --wait`), exactly as `claim` would, if the claim rule
    /// allows it now.
    fn claim_run(
        &mut self,
        run_id: i64,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
    ) -> Result<Option<ClaimedRun>>;
    /// In one transaction, record the processes of attempts about to be released (pid and start
    /// time, so recovery can find them) and extend their leases to `lease_expires_at`, each
    /// fenced by its token and only if its lease has not expired at `now`. Per start, in order:
    /// whether it landed. Only a start that landed may run its command. Committed `Durable`:
    /// this is the commit that makes the claims and deferred results before it durable too.
    fn record_starts(
        &mut self,
        starts: &[StartRecord],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<Fenced>>;
    /// In one transaction, give back claims whose command never ran: its spawn failed for want
    /// of a descriptor (or was not tried), or its job, prepared at its gate with its start
    /// recorded, was stopped there when the tick was told to stop, its shell seen gone. Each is
    /// fenced by its token (the run still `running` on that attempt under it), not by its
    /// lease's expiry: a command that never ran is given back whenever the run is still this
    /// claim's, and a recovery that read the lease before then finds its own write refused. The
    /// run returns to `pending` as its claim found it (lease released, its attempt number one
    /// lower, `started_at` unset again when this was its first attempt, `running_alone` cleared,
    /// `run_at` kept: due again at once), the attempt row its claim opened is deleted (with the
    /// process its start recorded, if any: nothing is left to look for), and its `event`
    /// recorded at `now`. Per claim, in order: whether it landed; a refused one (the run was
    /// cancelled or recovered meanwhile) changed nothing. Committed `Durable`, as
    /// `record_starts` is.
    fn give_back(&mut self, claims: &[GivenBack], now: i64, actor: &Actor) -> Result<Vec<Fenced>>;
    /// In one transaction, extend the lease of each token, fenced by it, to `lease_expires_at`
    /// (`heartbeat_at = now`). Per token, in order: whether it is still held (a lost one was
    /// cancelled or recovered: its job must stop).
    fn heartbeat(
        &mut self,
        tokens: &[LeaseToken],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<Fenced>>;
    /// Write an attempt's decided end, fenced by its token (and, for a recovery, by the lease
    /// expiry it read: `end.result.lease_expired_at`), in one transaction: the run moves to
    /// `end.run` (lease released), then `end.events` are recorded, and, if `end.counts_dead`, the
    /// dead-runs counter of the run's schedule rises by one. The attempt row is closed with `end.result` and
    /// `end.outcome` when the run write landed (unless `end.result.attempt_left_open`: recovered
    /// from another host, whose next tick closes it), or when the run was cancelled under it
    /// (cancel leaves the open attempt to its runner); one that a recovering runner closed is
    /// never rewritten. When the fence refuses and the run still exists, `end.fenced(current)` is
    /// recorded instead (except for a recovery, which records nothing), and nothing else changes.
    /// Committed `Durable`.
    fn finish_attempt(&mut self, end: &AttemptEnd, actor: &Actor) -> Result<Fenced> {
        let recorded = self.finish_attempts(std::slice::from_ref(end), actor, Commit::Durable)?;
        Ok(recorded[0])
    }
    /// `finish_attempt` for several attempts in one transaction (group commit), each fenced by
    /// its own token: all are committed when this returns, or none is. Per end, in order:
    /// whether it landed. `Deferred` is for a caller that makes them durable before it reports
    /// them or waits (its next `record_starts`, or `sync`): a power cut in between loses the
    /// group, whose leases then expire and recovery retries it, as if the runner had died.
    fn finish_attempts(
        &mut self,
        ends: &[AttemptEnd],
        actor: &Actor,
        commit: Commit,
    ) -> Result<Vec<Fenced>>;
    /// A supervisor's round: `finish_attempts(ends, actor, Deferred)`, then `claim(actor, now,
    /// lease_secs, batch)` for the slots they freed. Each keeps its own result: the ends land
    /// even when the claim fails. Both in one transaction where the backend has one for them
    /// (`finish_then_claim_together`); should it fail, or where there is none, the two calls.
    fn finish_then_claim(
        &mut self,
        ends: &[AttemptEnd],
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
    ) -> (Result<Vec<Fenced>>, Result<Claimed>) {
        let together = self.finish_then_claim_together(ends, actor, now, lease_secs, batch);
        if let Some(Ok((finished, claimed))) = together {
            return (Ok(finished), Ok(claimed));
        }
        // Rolled back (or never tried): one by one, so a failing claim keeps the ends.
        let finished = self.finish_attempts(ends, actor, Commit::Deferred);
        (finished, self.claim(actor, now, lease_secs, batch))
    }
    /// `finish_then_claim` as one all-or-nothing transaction, committed `Deferred`, or `None`
    /// where the backend gains nothing by it. SQLite has it: one turn at its single write lock,
    /// the turn that concurrent ticks queue for, instead of two. PostgreSQL does not: its ends
    /// and its claim are one statement each already.
    fn finish_then_claim_together(
        &mut self,
        _ends: &[AttemptEnd],
        _actor: &Actor,
        _now: i64,
        _lease_secs: i64,
        _batch: usize,
    ) -> Option<Result<(Vec<Fenced>, Claimed)>> {
        None
    }
    /// Make every commit this store made so far durable (one durable commit, if any `Deferred`
    /// one came after the last durable one; nothing otherwise).
    fn sync(&mut self) -> Result<()>;
    /// Attempt `attempt` of a run, if it is still open. (A run can have two open attempts: one
    /// of another host that recovery retried, left for that host to close, and the retry's.)
    fn open_attempt(&self, run_id: i64, attempt: u32) -> Result<Option<AttemptHolder>>;
    /// Attempts on `host` still open whose run no longer holds them (cancelled or recovered
    /// under them): their processes may be alive and must be stopped before they are closed.
    fn orphaned_attempts(&self, host: &str, limit: usize) -> Result<Vec<AttemptHolder>>;
    /// Runs cancelled while running whose job was not known stopped by their `stopping_by`
    /// (before `now`), at most `limit`, oldest first, each with every attempt of it still open
    /// (none once they are closed or gone).
    fn overdue_stops(&self, now: i64, limit: usize) -> Result<Vec<OverdueStop>>;
    /// Stop waiting for the job of overdue cancelled run `run_id` unless an attempt of it is
    /// still open on `host` (its processes would not die): its attempts on other hosts are out of
    /// this host's reach, left to their hosts' ticks. Its `forbid` schedule's runs may then
    /// start again.
    fn release_stop(&mut self, run_id: i64, host: &str) -> Result<()>;
    /// Close an orphaned attempt (its processes are gone) as failed with `close`'s error, and
    /// record `close.event`; never one its run still holds under its token. Its duration runs
    /// from its start, its output is not kept (NULL), unless `close.never_started`: then it took
    /// no time and printed nothing (empty). Its run, if cancelled and no other attempt of it is
    /// open, no longer waits for its job (`stopping_by` cleared: `job_stopped_sql`). False if it
    /// was closed meanwhile.
    fn close_orphaned_attempt(
        &mut self,
        holder: &AttemptHolder,
        now: i64,
        close: &OrphanClose,
        actor: &Actor,
    ) -> Result<bool>;
    /// Close the attempt `holder` of a run whose job its tick stopped at its gate, its command
    /// never run, as what became of the run says (`NeverStartedCloses::decide`), read in the
    /// same transaction (so no cancel or recovery lands between the look and the write):
    /// - still held under the attempt's token (its lease expired before the start could be
    ///   recorded, and nobody recovered it yet): `end` is written as `finish_attempt` writes it;
    /// - cancelled on this attempt: closed as `close_orphaned_attempt` closes it, with
    ///   `closes.cancelled`;
    /// - otherwise (recovered by another runner, perhaps claimed again since): likewise, with
    ///   `closes.recovered`.
    ///
    /// A run that is gone (its schedule removed with its runs) changes nothing. Whether `end`
    /// landed: `LeaseLost` when the run was no longer held (the attempt closed instead, or
    /// nothing to close). Committed `Durable`.
    fn close_never_started(
        &mut self,
        end: &AttemptEnd,
        holder: &AttemptHolder,
        closes: &NeverStartedCloses,
        actor: &Actor,
    ) -> Result<Fenced>;

    /// `schedule reanchor`: in one transaction, if the schedule's cursor and revision are still
    /// what `cursor` expects, move the cursor to `cursor.new_through` (back: that is the point)
    /// and its next fire time to `cursor.next_fire_at`, bump the revision, and delete the
    /// schedule's `skipped` schedule runs scheduled after the new cursor (a tick whose clock was
    /// ahead decided them before their time; they are decided again when they come). `record`
    /// is shown the oldest schedule run after the new cursor, as it was before the delete; the
    /// run it returns, if any, is inserted (with its event, by `actor`, at `now`), unless its
    /// instant has one. Returns `None`, having changed nothing, when the schedule changed
    /// meanwhile.
    fn reanchor_definition(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        record: &dyn Fn(&RunAfterCursor) -> Option<NewRun>,
    ) -> Result<Option<Reanchored>>;
    /// Lower the clock high-water mark to `now` if it is higher (`schedule reanchor --all`: the
    /// clock that saw it was wrong). Returns the mark it replaced, if it did.
    fn lower_clock_high_water(&mut self, now: i64) -> Result<Option<i64>>;

    // ---- see what ran ----
    /// Runs matching `filter`, newest first.
    fn history(&self, filter: &RunFilter) -> Result<Vec<RunView>>;
    fn run(&self, run_id: i64) -> Result<Option<RunView>>;
    /// The schedule runs (not manual ones) of definition `definition_id` scheduled at any of
    /// `instants` (at most one each), in no particular order: what became of those instants
    /// (`why`).
    fn runs_at_instants(&self, definition_id: i64, instants: &[i64]) -> Result<Vec<RunView>>;
    /// The oldest schedule run (not a manual one) of definition `definition_id` scheduled after
    /// `instant`, if any: a skipped one's reason may count `instant` among those its tick passed
    /// over without a row each (`why`; see `tick::materialize::counted_as_passed_over`).
    fn first_run_after(&self, definition_id: i64, instant: i64) -> Result<Option<RunAfterCursor>>;
    /// The instants of definition `definition_id`'s schedule runs (not manual ones) at or before
    /// `through`, newest first, at most `limit`: the instants its runs were materialised for,
    /// whatever expression it had then (`why`). Read by instant, so manual runs, however many,
    /// are never read.
    fn recorded_instants(&self, definition_id: i64, through: i64, limit: usize)
        -> Result<Vec<i64>>;
    /// When the latest tick ran, by its own clock (None: no tick ever ran).
    fn last_tick_at(&self) -> Result<Option<i64>>;
    /// Definition `definition_id`'s runs cancelled while running whose job is still being
    /// stopped, one per open attempt (a run's newest first), the earliest `stopping_by` first
    /// (`why`: they hold a `forbid` schedule back).
    fn stopping_runs(&self, definition_id: i64) -> Result<Vec<StoppingView>>;
    /// Why a tick could not write this database, though it connects and reads it (`doctor`):
    /// PostgreSQL names a server in recovery, a read-only session, or the runner tables its user
    /// lacks a privilege on. None where nothing says so; SQLite's file permissions are checked
    /// by `doctor` itself.
    fn write_denied(&self) -> Result<Option<WriteDenied>> {
        Ok(None)
    }
    fn attempts(&self, run_id: i64) -> Result<Vec<AttemptView>>;
    fn events(&self, run_id: i64) -> Result<Vec<EventView>>;
    /// The health report at `now`; "recent" means finished at or after `recent_since`.
    fn health(&self, now: i64, recent_since: i64) -> Result<Health>;
    /// Durations (ms) of attempts that finished at or after `since`, with their schedule's id,
    /// in no particular order.
    fn attempt_durations(&self, since: i64) -> Result<Vec<(i64, i64)>>;
    /// Per schedule and run status: how many runs the database holds and when the latest of them
    /// finished; one row with no status for a schedule without runs. By schedule name.
    fn job_run_stats(&self) -> Result<Vec<JobRunStats>>;

    // ---- steer ----
    /// An operator's request on one run, in one write transaction: read the run's `RunState`,
    /// and write what `request.decide(state, now, actor)` returns (its change, applied only if
    /// the status is still the one read, and its event). Returns the decision's `Steered`, or
    /// `Steered::NotFound` when there is no such run.
    fn steer(&mut self, run_id: i64, request: Steer, now: i64, actor: &Actor) -> Result<Steered>;

    // ---- migrate ----
    /// `runner migrate`, the source side, in ONE write transaction held from start to end (so no
    /// tick materialises or claims meanwhile; PostgreSQL: the tables are locked against writes):
    /// if any run is `running`, return `MigratedOut::Running` having changed nothing. Otherwise
    /// call `write` with a reader of every schedule (every column, its dead-runs counter among
    /// them), the `pending` runs (with `with_history`, every run), their attempts and events, in
    /// batches ([`MigrationBatches`]), which writes them elsewhere and commits there; if it fails,
    /// or leaves batches unread, roll back and return the error. Then
    /// pause every schedule (revision + 1, `updated_at = now`), and cancel each moved pending
    /// run (`finished_at = now`, error `CANCELLED` with `moved_detail`) with `moved_event(attempt)`
    /// recorded by `actor`, and commit. An error after `write` succeeded means both databases
    /// hold the schedules: the caller must say so.
    fn migrate_out(
        &mut self,
        with_history: bool,
        now: i64,
        actor: &Actor,
        moved_detail: &str,
        moved_event: &dyn Fn(u32) -> NewEvent,
        write: &mut dyn FnMut(&mut dyn MigrationBatches) -> anyhow::Result<()>,
    ) -> Result<MigratedOut>;
    /// `runner migrate`, the target side, in ONE transaction: if a schedule of one of the
    /// migration's names exists, return `Imported::NamesTaken` (all of them) having written
    /// nothing; else insert every row of every batch through `import_batches` (new ids, every
    /// column as read, the schedules' dead-runs counters among them), and commit.
    fn import_migration(&mut self, batches: &mut dyn MigrationBatches) -> Result<Imported>;

    // ---- retention ----
    /// What pruning runs finished before `cutoff` would delete.
    fn prunable(&self, cutoff: i64) -> Result<PruneCounts>;
    /// Delete up to `limit` runs finished before `cutoff` (with their attempts and events) in one
    /// short transaction; returns what was deleted (0 runs: nothing left).
    fn prune_batch(&mut self, cutoff: i64, limit: usize) -> Result<PruneCounts>;
    /// Take the run tally's fold turn, if no fold was taken in the last `every_secs` (or one is
    /// recorded in the future), or sooner, when more than `backlog` runs were made since the last
    /// fold and it was taken more than a minute ago: the newest run's id, which the turn folds
    /// through (with [`fold_run_tally_batch`](Self::fold_run_tally_batch)), if this call took
    /// it. SQLite only: PostgreSQL counts its runs where they are read, and never takes a turn.
    fn claim_tally_fold(&mut self, now: i64, every_secs: i64, backlog: i64) -> Result<Option<i64>>;
    /// Fold up to `limit` runs made since the last fold, none after run `newest`, into the run
    /// tally that `health` and `job_run_stats` read, in one short transaction; true if runs up
    /// to `newest` are left to fold.
    fn fold_run_tally_batch(&mut self, newest: i64, limit: i64) -> Result<bool>;
    /// Take the automatic-prune turn: true (and the turn is recorded) if no automatic prune
    /// started in the last `every_secs` (or one is recorded in the future: the clock went back).
    /// A `runner prune` never takes the turn: the tick applies its own retention on its hour.
    fn claim_auto_prune(&mut self, now: i64, every_secs: i64) -> Result<bool>;
    /// Record that a `runner prune` ran at `at`, apart from the automatic turn: the later of the
    /// two is what [`Health::last_prune_at`] reports.
    fn record_manual_prune(&mut self, at: i64) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::{
        overdue_stops_of, BatchReader, Location, MigrationBatches, MigrationCounts, Rows, Table,
        Value, MIGRATE_BATCH,
    };
    use crate::model::AttemptHolder;

    /// An overdue run's rows, one per open attempt (or one with none), make one `OverdueStop`
    /// with every attempt, in the order read.
    #[test]
    fn overdue_stops_gather_each_runs_open_attempts() {
        let holder = AttemptHolder::fixture;
        let overdue = overdue_stops_of([
            (7, 100, Some(holder(7, 1, "here"))),
            (7, 100, Some(holder(7, 2, "far"))),
            (8, 100, None),
            (9, 200, Some(holder(9, 1, "here"))),
        ]);
        let read: Vec<String> = overdue
            .iter()
            .map(|o| {
                let holders: Vec<String> = o
                    .holders
                    .iter()
                    .map(|h| format!("{} on {}", h.attempt, h.host))
                    .collect();
                format!(
                    "run {} by {}: {}",
                    o.run_id,
                    o.stopping_by,
                    holders.join(", ")
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                "run 7 by 100: 1 on here, 2 on far",
                "run 8 by 100: ",
                "run 9 by 200: 1 on here",
            ]
        );
    }

    /// The source retires nothing unless the target read every batch: `finish` refuses a
    /// migration whose runs were not all read, and counts what was handed out.
    #[test]
    fn a_migration_reader_finishes_only_once_every_run_was_read() {
        // Two runs, one pending; each table's read sees the parameters its statement takes.
        let read = |table: Table, _sql: &str, params: &[i64]| {
            let rows = match table {
                Table::Definitions => {
                    assert!(params.is_empty());
                    vec![vec![Value::Integer(1)]]
                }
                Table::Runs => {
                    assert_eq!(params.len(), 2);
                    [(1, "pending"), (2, "succeeded")]
                        .into_iter()
                        .filter(|(id, _)| *id > params[0])
                        .map(|(id, status)| vec![Value::Integer(id), Value::Text(status.into())])
                        .collect()
                }
                Table::Attempts | Table::Events => {
                    assert_eq!(params.len(), 2);
                    Vec::new()
                }
            };
            let columns = match table {
                Table::Runs => vec!["id".to_string(), "status".to_string()],
                _ => vec!["id".to_string()],
            };
            Ok(Rows { columns, rows })
        };
        let unread = BatchReader::new(true, |n| format!("?{n}"), read);
        assert!(unread.finish().is_err(), "nothing read");
        let mut reader = BatchReader::new(true, |n| format!("?{n}"), read);
        assert!(reader.next_batch().expect("first batch").is_some());
        const { assert!(2 < MIGRATE_BATCH, "one batch holds every run") };
        assert_eq!(
            reader.finish().expect("every run read"),
            MigrationCounts {
                schedules: 1,
                pending_runs: 1,
                finished_runs: 1,
                attempts: 0,
                events: 0,
            }
        );
    }

    #[test]
    fn postgres_urls_never_print_a_password() {
        let shown = |url: &str| Location::parse(url).to_string();
        assert_eq!(
            shown("postgres://app:s3cret@db:5432/runner"),
            "postgres://app:***@db:5432/runner"
        );
        assert_eq!(
            shown("postgresql://app:p@ss:w@db/runner"),
            "postgresql://app:***@db/runner"
        );
        assert_eq!(
            shown("postgres://app@db/runner"),
            "postgres://app@db/runner"
        );
        assert_eq!(shown("postgres://db/runner"), "postgres://db/runner");
        // The password as a parameter, alone, among others, and with both forms at once.
        assert_eq!(
            shown("postgres://app@db/runner?password=s3cret"),
            "postgres://app@db/runner?password=***"
        );
        assert_eq!(
            shown("postgres://app@db/runner?sslmode=require&password=s3@c&ret=x&connect_timeout=3"),
            "postgres://app@db/runner?sslmode=require&password=***&ret=x&connect_timeout=3"
        );
        assert_eq!(
            shown("postgres://app:pw?x@db/runner?password=s3cret"),
            "postgres://app:***@db/runner?password=***"
        );
        assert_eq!(
            shown("postgres://db/runner?application_name=a@b&password=p@q"),
            "postgres://db/runner?application_name=a@b&password=***"
        );
        assert_eq!(
            shown("postgres://app@db/runner?old_password=x"),
            "postgres://app@db/runner?old_password=x"
        );
    }

    /// The postgres crate percent-decodes a parameter's name: `pass%77ord=` gives it a password,
    /// which must not show. Spellings it refuses (`PASSWORD=`, ` password=`, `sslpassword=`)
    /// still hold a secret, and its error shows the URL: they are masked too.
    #[test]
    fn a_password_parameter_is_masked_however_its_name_is_written() {
        let shown = |url: &str| Location::parse(url).to_string();
        let config: ::postgres::Config = "postgres://app@db/runner?pass%77ord=s3cret"
            .parse()
            .expect("the crate takes a percent-encoded parameter name");
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(
            shown("postgres://app@db/runner?pass%77ord=s3cret"),
            "postgres://app@db/runner?pass%77ord=***"
        );
        assert_eq!(
            shown("postgres://app@db/runner?sslmode=require&%70%61%73%73%77%6F%72%64=s3cret&x=y"),
            "postgres://app@db/runner?sslmode=require&%70%61%73%73%77%6F%72%64=***&x=y"
        );
        assert_eq!(
            shown("postgres://app@db/runner?PASSWORD=s3cret"),
            "postgres://app@db/runner?PASSWORD=***"
        );
        assert_eq!(
            shown("postgres://app@db/runner?Pass%57ord=s3cret&sslmode=disable"),
            "postgres://app@db/runner?Pass%57ord=***&sslmode=disable"
        );
        assert_eq!(
            shown("postgres://app@db/runner?%20password%20=s3cret"),
            "postgres://app@db/runner?%20password%20=***"
        );
        assert_eq!(
            shown("postgres://app@db/runner?sslpassword=s3cret"),
            "postgres://app@db/runner?sslpassword=***"
        );
        // Not a password: a longer name, a `%` that encodes nothing, a parameter without a value.
        assert_eq!(
            shown("postgres://app@db/runner?pass%77ords=x&pass%7word=y&password"),
            "postgres://app@db/runner?pass%77ords=x&pass%7word=y&password"
        );
    }
}
