//! Persistence behind one trait, one file per backend, each with its own SQL. The tick and the
//! commands speak only to `Store`; a backend is chosen from the `--db` location.

mod sqlite;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::exit::Failure;
use crate::model::{
    Actor, AttemptResult, ClaimedRun, Definition, ExpiredLease, Fenced, NewRun, Settings,
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
        if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
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
            Location::Postgres(url) => match url.split_once('@') {
                Some((credentials, rest)) => {
                    let user = credentials
                        .rsplit_once(':')
                        .map_or(credentials, |(user, _)| user);
                    write!(f, "{user}:***@{rest}")
                }
                None => f.write_str(url),
            },
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
    pub expected_updated_at: i64,
    pub new_through: i64,
    pub next_fire_at: Option<i64>,
}

pub trait Store {
    /// Where this store lives, for messages.
    fn describe(&self) -> String;

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
    fn remove_definition(&mut self, name: &str) -> Result<bool>;
    fn definition(&self, name: &str) -> Result<Option<Definition>>;
    fn definitions(&self) -> Result<Vec<Definition>>;
    fn last_result(&self, definition_id: i64) -> Result<Option<LastResult>>;

    // ---- the tick ----
    fn record_tick(&mut self, now: i64) -> Result<()>;
    /// Enabled definitions whose next fire time is at or before `now`.
    fn due_definitions(&self, now: i64) -> Result<Vec<Definition>>;
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
    /// one short transaction.
    fn claim(
        &mut self,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
        only_run: Option<i64>,
    ) -> Result<Vec<ClaimedRun>>;
    /// Remember the child's pid and start time, so a later recovery can kill a leftover group.
    fn record_process(
        &mut self,
        run: &ClaimedRun,
        pid: u32,
        start_time: Option<u64>,
    ) -> Result<Fenced>;
    /// Extend the leases this runner holds; returns the tokens still held (the rest are lost).
    fn heartbeat(
        &mut self,
        tokens: &[String],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<String>>;
    /// Record an attempt's end, fenced by its lease token.
    fn finish_attempt(&mut self, result: &AttemptResult, actor: &Actor) -> Result<Fenced>;
    /// Enqueue a manual run due now; returns its id.
    fn enqueue_manual(&mut self, definition: &Definition, now: i64, actor: &Actor) -> Result<i64>;
}
