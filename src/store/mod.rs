//! Persistence behind one trait, one file per backend, each with its own SQL. The tick and the
//! commands speak only to `Store`; a backend is chosen from the `--db` location.

mod sqlite;
pub(crate) mod sqlite_files;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::exit::Failure;
use crate::model::{
    Actor, AttemptHolder, AttemptResult, ClaimedRun, DamagedDefinition, Definition, ErrorCode,
    ExpiredLease, Fenced, NewRun, RunStatus, Settings, StartRecord,
};

pub use sqlite::SqliteStore;

/// Whether opening may create a missing database. Only `init` and `schedule add` may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    MustExist,
    CreateIfMissing,
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

    /// `$XDG_STATE_HOME/runner/runner.db`, else `~/.local/state/runner/runner.db`.
    pub fn default_path() -> Result<PathBuf> {
        // The XDG spec: a relative XDG_STATE_HOME is invalid and must be ignored.
        if let Some(state) =
            std::env::var_os("XDG_STATE_HOME").filter(|v| Path::new(v).is_absolute())
        {
            return Ok(Path::new(&state).join("runner/runner.db"));
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
            // scheme://user:password@host/db: hide the password, keep the rest.
            Location::Postgres(url) => {
                let masked = url.split_once("://").and_then(|(scheme, rest)| {
                    let (userinfo, host) = rest.rsplit_once('@')?;
                    let (user, _password) = userinfo.split_once(':')?;
                    Some(format!("{scheme}://{user}:***@{host}"))
                });
                f.write_str(masked.as_deref().unwrap_or(url))
            }
        }
    }
}

pub fn open(location: &Location, mode: OpenMode) -> Result<Box<dyn Store>> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(SqliteStore::open(path, mode)?)),
        Location::Postgres(_) => Err(Failure::usage(format!(
            "{location}: the PostgreSQL backend is not available in this build yet; use a SQLite path"
        ))),
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

/// A `job_definitions` row as read: sound, or damaged (its problems named, the others unaffected).
pub type DefinitionRow = std::result::Result<Definition, Box<DamagedDefinition>>;

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
    /// take their lease and so kill their jobs). Cancel them first.
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reanchored {
    /// Skipped instants after the new cursor, deleted so they are decided again when they come.
    pub skips_forgotten: u64,
    /// Other runs of instants after the new cursor (run early, or pending until their time):
    /// kept, and those instants are not materialised again.
    pub runs_kept: u64,
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
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
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

/// Everything `status` and `metrics` report, read in one snapshot.
#[derive(Debug, Clone)]
pub struct Health {
    /// Every status, zeros included, in `RunStatus::ALL` order.
    pub counts: Vec<(RunStatus, i64)>,
    /// The pending run that has been due the longest without being claimed.
    pub oldest_due: Option<RunBrief>,
    /// Running runs, the earliest lease expiry first (expired ones first), at most `RUNNING_LISTED`.
    pub running: Vec<RunningView>,
    /// Running runs whose lease expired before `now`: their runner stopped heart-beating.
    pub expired_leases: i64,
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
    pub last_prune_at: Option<i64>,
    /// Runs that ever went dead in this database (retry and prune never lower it).
    pub dead_runs_total: i64,
    pub oldest_run: Option<RunBrief>,
    pub storage: Storage,
}

/// How much space the database takes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Storage {
    /// The main file (pages in use and free).
    pub database_bytes: u64,
    /// The write-ahead log not yet folded into the main file.
    pub wal_bytes: u64,
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
}

impl std::ops::AddAssign for PruneCounts {
    fn add_assign(&mut self, other: PruneCounts) {
        self.runs += other.runs;
        self.attempts += other.attempts;
        self.events += other.events;
    }
}

/// The states pruning may delete: finished for good. Never pending or running.
pub const PRUNABLE: [RunStatus; 4] = [
    RunStatus::Succeeded,
    RunStatus::Dead,
    RunStatus::Cancelled,
    RunStatus::Skipped,
];

/// An operator's request on one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    Retry,
    Cancel,
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

pub trait Store {
    /// Where this store lives, for messages.
    fn describe(&self) -> String;
    /// What names this database on this host in a job's marker (`RUNNER_DATABASE`): a job's
    /// processes are only ever signalled by runners of the database that started them, never by
    /// one working on a restored copy elsewhere.
    fn identity(&self) -> String;

    // ---- schedules ----
    /// Errors with `Failure::Usage` when the name is taken.
    fn add_definition(
        &mut self,
        name: &str,
        settings: &Settings,
        now: i64,
        next_fire_at: Option<i64>,
    ) -> Result<Definition>;
    /// Rewrites settings and the cursor (pause/resume/edit). Fails if the definition vanished.
    fn update_definition(&mut self, definition: &Definition, now: i64) -> Result<()>;
    /// Delete a schedule with its runs, unless a run of it is running.
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
    fn last_result(&self, definition_id: i64) -> Result<Option<LastResult>>;

    // ---- the tick ----
    /// Record that a tick ran at `now` (its clock's reading): `last_tick_at` becomes `now`, the
    /// latest tick whatever its clock said, and the clock high-water mark (the latest time any
    /// tick's clock read) rises to `now` if it was lower. Returns the high-water mark as it was
    /// before, so the tick can tell whether its clock is behind what the database has seen.
    fn record_tick(&mut self, now: i64) -> Result<Option<i64>>;
    /// Enabled definitions whose next fire time is at or before `now`, and damaged rows whose
    /// pause flag or next fire time cannot be read (so a tick reports them instead of never
    /// seeing them).
    fn due_definitions(&self, now: i64) -> Result<Vec<DefinitionRow>>;
    /// In one transaction: if the cursor is still where `cursor` expects, insert the runs that
    /// `plan` returns (given the id of a run of this schedule that is running now, if any) and
    /// move the cursor. Returns the runs inserted; 0 if another tick got there first.
    fn materialize(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        plan: &mut dyn FnMut(Option<i64>) -> Vec<NewRun>,
    ) -> Result<usize>;
    /// Running runs whose lease expired before `now`, oldest first.
    fn expired_leases(&self, now: i64, limit: usize) -> Result<Vec<ExpiredLease>>;
    /// Claim up to `batch` due runs (only `only_run`, when given) under a fresh lease each, in
    /// one short transaction, opening an attempt for each.
    fn claim(
        &mut self,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
        only_run: Option<i64>,
    ) -> Result<Claimed>;
    /// In one transaction, record the processes of attempts about to be released (pid and start
    /// time, so recovery can find them) and extend their leases to `lease_expires_at`, each only
    /// if its lease is still held and unexpired at `now`. Per start, in order: whether it landed.
    /// Only a start that landed may run its command.
    fn record_starts(
        &mut self,
        starts: &[StartRecord],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<Fenced>>;
    /// Extend the leases this runner holds; returns the tokens still held (the rest are lost).
    fn heartbeat(
        &mut self,
        tokens: &[String],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<String>>;
    /// Record an attempt's end, fenced by its lease token.
    fn finish_attempt(&mut self, result: &AttemptResult, actor: &Actor) -> Result<Fenced>;
    /// The open attempt of a run, if any.
    fn open_attempt(&self, run_id: i64) -> Result<Option<AttemptHolder>>;
    /// Attempts on `host` still open whose run no longer holds them (cancelled or recovered
    /// under them): their processes may be alive and must be stopped before they are closed.
    fn orphaned_attempts(&self, host: &str, limit: usize) -> Result<Vec<AttemptHolder>>;
    /// Close an orphaned attempt (its processes are gone), with an event. False if it was closed
    /// meanwhile.
    fn close_orphaned_attempt(
        &mut self,
        holder: &AttemptHolder,
        now: i64,
        code: &ErrorCode,
        detail: &str,
        actor: &Actor,
    ) -> Result<bool>;
    /// Enqueue a manual run due now; returns its id.
    fn enqueue_manual(&mut self, definition: &Definition, now: i64, actor: &Actor) -> Result<i64>;

    /// `schedule reanchor`: in one transaction, if the schedule's cursor and revision are still
    /// what `cursor` expects, move the cursor to `cursor.new_through` (back: that is the point)
    /// and its next fire time to `cursor.next_fire_at`, bump the revision, and delete the
    /// schedule's `skipped` schedule runs scheduled after the new cursor (a tick whose clock was
    /// ahead decided them before their time; they are decided again when they come). Returns
    /// `None`, having changed nothing, when the schedule changed meanwhile.
    fn reanchor_definition(&mut self, cursor: CursorMove, now: i64) -> Result<Option<Reanchored>>;
    /// Lower the clock high-water mark to `now` if it is higher (`schedule reanchor --all`: the
    /// clock that saw it was wrong). Returns the mark it replaced, if it did.
    fn lower_clock_high_water(&mut self, now: i64) -> Result<Option<i64>>;

    // ---- see what ran ----
    /// Runs matching `filter`, newest first.
    fn history(&self, filter: &RunFilter) -> Result<Vec<RunView>>;
    fn run(&self, run_id: i64) -> Result<Option<RunView>>;
    fn attempts(&self, run_id: i64) -> Result<Vec<AttemptView>>;
    fn events(&self, run_id: i64) -> Result<Vec<EventView>>;
    /// The health report at `now`; "recent" means finished at or after `recent_since`.
    fn health(&self, now: i64, recent_since: i64) -> Result<Health>;
    /// Durations (ms) of attempts that finished at or after `since`, with their job name, in no
    /// particular order.
    fn attempt_durations(&self, since: i64) -> Result<Vec<(String, i64)>>;

    // ---- steer ----
    /// Retry or cancel one run, if its state allows it (see `Steer::allows`), recording an event.
    fn steer(&mut self, run_id: i64, request: Steer, now: i64, actor: &Actor) -> Result<Steered>;

    // ---- retention ----
    /// What pruning runs finished before `cutoff` would delete.
    fn prunable(&self, cutoff: i64) -> Result<PruneCounts>;
    /// Delete up to `limit` runs finished before `cutoff` (with their attempts and events) in one
    /// short transaction; returns what was deleted (0 runs: nothing left).
    fn prune_batch(&mut self, cutoff: i64, limit: usize) -> Result<PruneCounts>;
    /// Take the automatic-prune turn: true (and the turn is recorded) if no prune started in the
    /// last `every_secs`.
    fn claim_auto_prune(&mut self, now: i64, every_secs: i64) -> Result<bool>;
}

#[cfg(test)]
mod tests {
    use super::Location;

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
    }
}
