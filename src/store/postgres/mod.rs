//! The PostgreSQL backend, for several hosts sharing one database: the same tables and the same
//! rules as SQLite, with PostgreSQL's own ways of being safe under concurrency:
//!
//! - claims take due runs with `FOR UPDATE SKIP LOCKED` in one short `UPDATE ... RETURNING`
//!   transaction, so ticks on many hosts never wait for each other's rows nor take the same run;
//! - materialisation compare-and-swaps the schedule's cursor (the row lock serialises racing
//!   ticks) and inserts with `ON CONFLICT DO NOTHING` on the one-run-per-instant index;
//! - every fenced write presents the lease token, exactly as in SQLite;
//! - times are whatever the caller's clock says, and that clock follows the database's clock
//!   (see `read_server_facts`), so hosts with skewed clocks still agree on leases and due times.
//!
//! Errors are mapped to `Failure` here (`connect::failure`): busy (exit 5) for lock and statement
//! timeouts, serialization failures and deadlocks; the server named in every message.

mod connect;
pub mod pgpass;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{ToSql, Type};
use postgres::{Client, GenericClient, IsolationLevel, Row, Statement, Transaction};

use self::connect::Server;
use super::JobRunStats;
use super::{definition_row, WriteDenied, SETTINGS_COLUMNS};
use super::{
    Applied, AttemptView, BatchReader, Claimed, Commit, CursorMove, DefinitionChanges,
    DefinitionRow, DueReader, EventView, Health, Imported, LastResult, LeftForLater,
    Materialization, MigratedOut, MigrationBatches, OpenMode, PendingWork, PruneCounts, Reanchored,
    Removal, RowLocks, Rows, RunAfterCursor, RunBrief, RunFilter, RunView, RunningView,
    SchemaVersions, StoppingView, Storage, Store, Table, Value, RECENT_LISTED, RUNNING_LISTED,
};
use crate::backoff::RetryPolicy;
use crate::exit::Failure;
use crate::model::{
    Actor, AttemptEnd, AttemptHolder, CatchUp, ClaimedRun, ColumnProblem, Definition, ErrorCode,
    EventKind, ExpiredLease, Fenced, GivenBack, LastRun, LeaseToken, Leftovers, NeverStartedClose,
    NeverStartedCloses, NewEvent, NewRun, OrphanClose, OverdueStop, Overlap, RunChange, RunState,
    RunStatus, Settings, StartRecord, Steer, Steered, Steering,
};

/// What the `Store` trait's methods return: errors already classified (`Failure`), the server
/// named in them.
type StoreResult<T> = super::Result<T>;

/// Migrations, in order; `runner_schema_version` records each one applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/postgres/0001_init.sql"),
    include_str!("../../../migrations/postgres/0002_run_zone.sql"),
    include_str!("../../../migrations/postgres/0003_pause_until.sql"),
    include_str!("../../../migrations/postgres/0004_dead_per_job.sql"),
    include_str!("../../../migrations/postgres/0005_metrics_covering.sql"),
    include_str!("../../../migrations/postgres/0006_attempt_schedule.sql"),
    include_str!("../../../migrations/postgres/0007_finished_indexes.sql"),
    include_str!("../../../migrations/postgres/0008_one_forbid_run.sql"),
    include_str!("../../../migrations/postgres/0009_pruned_success.sql"),
    include_str!("../../../migrations/postgres/0010_pruned_last_run.sql"),
    include_str!("../../../migrations/postgres/0011_job_stopping.sql"),
    include_str!("../../../migrations/postgres/0012_timing_changed_at.sql"),
];

/// Serialises concurrent `init`s (and first opens) of one database: a transaction-scoped
/// advisory lock on this key ("runner" in ASCII).
const MIGRATION_LOCK: i64 = 0x72_75_6e_6e_65_72;
/// Serialises writes of the clock marks: see `lock_clock_marks`.
const CLOCK_MARKS_LOCK: i64 = MIGRATION_LOCK + 1;

/// How long a connection may sit idle before its next use checks that the server has not ended
/// the session meanwhile (`PostgresStore::client`). The statements of a tick's busy moments come
/// one after the other, and pay nothing; a heartbeat or a job's end, after the job ran, pays one
/// round trip, and so does each claim a tick with a free slot makes every second while its jobs
/// run. Well under that second: at 1 s, the first of those claims after the jobs' starts were
/// written came a few ms short of it, was sent unprobed, and met a restart as a lost connection.
const IDLE_PROBE_AFTER: Duration = Duration::from_millis(200);

/// Parameters of a statement.
type Params<'a> = Vec<&'a (dyn ToSql + Sync)>;

pub struct PostgresStore {
    client: RefCell<Client>,
    server: Server,
    /// The URL as given (to connect again), and with its password masked (to show).
    url: String,
    shown: String,
    /// The schema version found on connecting, before any migration (0: no schema yet).
    found_version: i64,
    /// A deferred commit may have come after the last durable one: `sync` has work to do.
    unsynced: std::cell::Cell<bool>,
    /// Which connection `client` holds (see `prepared`).
    connection: std::cell::Cell<u64>,
    /// When `client` was last used: see `client()`.
    last_used: std::cell::Cell<Instant>,
    /// How the server ended the session, as a probe found it while connecting again failed:
    /// what each later use reports until a connection is made again (`client()`).
    farewell: RefCell<Option<String>>,
    /// The plans its sessions allow, and how long they wait (to connect again the same way).
    plans: connect::Plans,
    patience: connect::Patience,
    /// What names this database in a job's marker, as the server knows it (`Store::identity`).
    identity: String,
}

/// Connections made by this process, numbered so a prepared statement is only ever used on the
/// connection that prepared it.
static CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_connection() -> u64 {
    CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// The connection the current `read`/`write` works on.
    static CURRENT_CONNECTION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Statements prepared so far, by connection and SQL text.
    static PREPARED: RefCell<HashMap<(u64, String), Statement>> = RefCell::default();
}

/// The connection, held for one `read`, `write` or `snapshot`: `prepared` works on it until it
/// is dropped, and then on the one held before again (another store's `write` may run inside
/// this one's, as `migrate` does with its source and target).
struct Held<'a> {
    client: std::cell::RefMut<'a, Client>,
    outer: u64,
    /// When the connection was last used, set on letting it go.
    last_used: &'a std::cell::Cell<Instant>,
}

impl std::ops::Deref for Held<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        CURRENT_CONNECTION.with(|c| c.set(self.outer));
        self.last_used.set(Instant::now());
    }
}

/// `sql` prepared once per connection. A statement given as text is prepared at every use (a
/// round trip of its own before it runs); the statements a tick runs per job are prepared once,
/// which halves the round trips per job.
/// Works in a transaction or on the connection itself (a statement alone is its own transaction).
fn prepared(client: &mut impl GenericClient, sql: &str) -> Result<Statement> {
    let key = (CURRENT_CONNECTION.with(|c| c.get()), sql.to_string());
    if let Some(statement) = PREPARED.with(|p| p.borrow().get(&key).cloned()) {
        return Ok(statement);
    }
    let statement = client.prepare(sql)?;
    PREPARED.with(|p| p.borrow_mut().insert(key, statement.clone()));
    Ok(statement)
}

/// The one row `sql` returns, the statement prepared once per connection (`prepared`).
fn query_one_prepared(
    client: &mut impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    let statement = prepared(client, sql)?;
    Ok(client.query_one(&statement, params)?)
}

impl PostgresStore {
    pub fn open(url: &str, shown: &str, mode: OpenMode) -> Result<PostgresStore> {
        let mut store = PostgresStore::connect(url, shown, mode)?;
        store.found_version = match store.schema(mode)? {
            Some(version) => version,
            None => {
                return Err(Failure::database(format!(
                    "{} has no runner schema; create it with `runner init --db URL` \
                     (or `runner schedule add`), or point --db / RUNNER_DB at another database",
                    store.server
                )))
            }
        };
        store.read_server_facts()?;
        Ok(store)
    }

    /// `open` (`MustExist` or `Peek`), or `None` when the database has no runner schema yet:
    /// what a missing SQLite file is to a command that only looks (`schedule apply --dry-run`,
    /// completion). Creates nothing.
    pub fn open_if_present(
        url: &str,
        shown: &str,
        mode: OpenMode,
    ) -> Result<Option<PostgresStore>> {
        let mut store = PostgresStore::connect(url, shown, mode)?;
        let Some(version) = store.schema(mode)? else {
            return Ok(None);
        };
        store.found_version = version;
        store.read_server_facts()?;
        Ok(Some(store))
    }

    /// What `url` names (user, server, database; never the password, nor the parameters),
    /// without connecting: two spellings of one URL name it alike. (A job's marker names the
    /// database as the server knows it instead: `Store::identity`.)
    pub fn url_key(url: &str, shown: &str) -> Result<String> {
        Ok(connect::server_of(url, shown)?.identity())
    }

    /// The connection, before the schema is looked at.
    fn connect(url: &str, shown: &str, mode: OpenMode) -> Result<PostgresStore> {
        let plans = match mode {
            OpenMode::Execute => connect::Plans::Indexed,
            OpenMode::MustExist | OpenMode::CreateIfMissing | OpenMode::Peek => connect::Plans::Any,
        };
        let patience = match mode {
            OpenMode::Peek => connect::Patience::Glance,
            _ => connect::Patience::Work,
        };
        let (client, server) = connect::connect(url, shown, plans, patience)?;
        Ok(PostgresStore {
            client: RefCell::new(client),
            server,
            url: url.to_string(),
            shown: shown.to_string(),
            found_version: 0,
            unsynced: std::cell::Cell::new(false),
            connection: std::cell::Cell::new(next_connection()),
            last_used: std::cell::Cell::new(Instant::now()),
            farewell: RefCell::new(None),
            plans,
            patience,
            identity: String::new(),
        })
    }

    /// The schema version found, as `migrate` finds it for `mode`; a peek only reads it, and
    /// refuses a schema older than this runner's rather than bring it up to date.
    fn schema(&self, mode: OpenMode) -> Result<Option<i64>> {
        if mode != OpenMode::Peek {
            return self.migrate(mode == OpenMode::CreateIfMissing);
        }
        let known = MIGRATIONS.len() as i64;
        match self.read(schema_version)? {
            Some(version) if version > known => Err(self.newer_schema(version)),
            Some(version) if version < known => Err(Failure::database(format!(
                "{} has schema version {version}, older than this runner's ({known}); \
                 `runner init` brings it up to date",
                self.server
            ))),
            found => Ok(found),
        }
    }

    /// Bring the schema up to date, creating it if there is none and `create` says so (`init`,
    /// `schedule add`); refuse a database with a newer one, or with another application's tables
    /// where runner's would go (exit 4). Returns the version it found (0: none, and created), or
    /// `None` when there is no schema and `create` is false. (Even a command that only reads
    /// fails where a command that writes would: a check mode must fail where what it checks
    /// would.)
    fn migrate(&self, create: bool) -> Result<Option<i64>> {
        let known = MIGRATIONS.len() as i64;
        // Every command connects through here: a schema up to date costs this one read.
        let version = self.read(schema_version)?;
        crate::tick::test_hook("schema-version-read");
        match version {
            Some(version) if version > known => return Err(self.newer_schema(version)),
            Some(version) if version == known => return Ok(Some(version)),
            _ => {}
        }
        let server = self.server.to_string();
        self.write(|tx| {
            // Another runner may be migrating right now: wait for it, then look again. Only
            // under the lock is "no schema version" a fact about the tables beside it: without
            // it, an `init` could commit the whole schema between the two reads, and its tables
            // be taken for another application's.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            let version = match schema_version(tx)? {
                Some(version) if version > known => return Err(newer_schema(&server, version)),
                Some(version) => version,
                None => {
                    refuse_foreign_tables(tx, &self.server)?;
                    if !create {
                        return Ok(None);
                    }
                    0
                }
            };
            if version == known {
                return Ok(Some(version));
            }
            // A migration may rewrite the history (version 6 fills in every attempt's
            // schedule): the statement timeout is for a tick's statements, not for it. Waiting
            // for locks is still bounded (lock_timeout).
            tx.batch_execute("SET LOCAL statement_timeout = 0")?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS runner_schema_version (
                     version    bigint PRIMARY KEY,
                     applied_at bigint NOT NULL
                 )",
            )
            .map_err(|e| match version {
                0 => creation_failure(&self.server, &e),
                _ => migration_failure(&self.server, version, version as usize + 1, &e),
            })?;
            for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                tx.batch_execute(sql)
                    .map_err(|e| migration_failure(&self.server, version, index + 1, &e))?;
                tx.execute(
                    "INSERT INTO runner_schema_version (version, applied_at)
                     VALUES ($1, extract(epoch FROM now())::bigint)",
                    &[&(index as i64 + 1)],
                )?;
            }
            crate::tick::test_hook("schema-migrated");
            Ok(Some(version))
        })
        .map_err(Into::into)
    }

    fn newer_schema(&self, version: i64) -> anyhow::Error {
        newer_schema(&self.server.to_string(), version)
    }

    /// One round trip on opening, for two facts of the server's.
    ///
    /// Its clock: make this process's clock follow the database's. Hosts sharing a database
    /// decide lease expiry and due times by the same clock only if they read the same clock: the
    /// database's. Reading `now()` in every statement would change every query and the `Store`
    /// trait (which takes `now` from the caller, so that tests can pass any time); instead the
    /// database clock is read once here, at connect, and its difference from this host's clock
    /// (measured at the middle of the round trip) is added to every reading of the runner's clock
    /// (`crate::clock::follow_database`). `--now` still wins: a shifted clock starts at the given
    /// time whatever either clock says.
    ///
    /// The database's identity for job markers: the cluster's system identifier (unique per
    /// `initdb`), the database and the schema, whatever URL reached them. (The URL as written
    /// named it before: the same database through `localhost` or `127.0.0.1`, or as another user,
    /// was taken for another, and its jobs were missed by cancel and recovery.) A role that may not
    /// read the system identifier gets the server's address instead.
    fn read_server_facts(&mut self) -> Result<()> {
        let before = crate::clock::host_epoch_millis();
        let (database_ms, identity): (i64, String) = self.read(|client| {
            let row = client.query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                        'postgres:' || coalesce(
                            CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
                                 THEN (SELECT system_identifier FROM pg_control_system())::text END,
                            host(inet_server_addr()) || ':' || inet_server_port(),
                            'local')
                        || '/' || current_database() || '/' || current_schema()",
                &[],
            )?;
            Ok((row.try_get(0)?, row.try_get(1)?))
        })?;
        let after = crate::clock::host_epoch_millis();
        crate::clock::follow_database(database_ms - (before + after) / 2);
        self.identity = identity;
        Ok(())
    }

    /// The connection, connected again if the server ended the last one (it restarted, or an
    /// administrator ended the session) or the network failed it: a tick outlives both, and its
    /// next heartbeat or result should land.
    ///
    /// The client learns that the server ended its session only by sending on it: the reply to
    /// the next statement is the server's farewell (`terminating connection due to administrator
    /// command`), sent when the session ended, maybe long before. So the first write after a
    /// restart used to fail, and with it a job's end: the run was recovered once its lease expired,
    /// and the job ran again. A statement that failed so is not sent again: from its reply alone,
    /// nothing proves that it did not run (a session ended by a shutdown that came while it
    /// committed answers the same way), and running a claim or a job's start twice is worse than
    /// the recovery. Instead, a connection left idle for `IDLE_PROBE_AFTER` is first asked an
    /// empty query, which does nothing wherever it lands: if that finds the session ended, the
    /// work goes to a new connection, and the loss cost nothing. A statement that meets a loss
    /// anyway (one that came while it ran, or within the idle time) fails and says so.
    ///
    /// Where connecting again fails (the server is still restarting), nothing was sent: the
    /// error says so (`Failure::ServerAway`), so that a tick can do without a claim it could not
    /// make, and names the loss as the statement would have met it.
    fn client(&self) -> StoreResult<Held<'_>> {
        let mut client = self.client.borrow_mut();
        let ended = self.ended_while_idle(&mut client);
        if let Some(loss) = &ended {
            *self.farewell.borrow_mut() = Some(connect::cause(loss));
        }
        if client.is_closed() {
            let (fresh, _) = connect::connect(&self.url, &self.shown, self.plans, self.patience)
                .map_err(|error| {
                    connect::server_away(&self.server, self.farewell.borrow().as_deref(), error)
                })?;
            *client = fresh;
            self.connection.set(next_connection());
        }
        self.farewell.take();
        let outer = CURRENT_CONNECTION.with(|c| c.replace(self.connection.get()));
        Ok(Held {
            client,
            outer,
            last_used: &self.last_used,
        })
    }

    /// How the server ended the session while it sat idle, if it did, found by an empty query
    /// (one round trip) that failed as the client saw the connection close. A probe that times
    /// out proves nothing: the work is sent on the connection, and meets what it meets.
    fn ended_while_idle(&self, client: &mut Client) -> Option<postgres::Error> {
        if client.is_closed() || self.last_used.get().elapsed() < IDLE_PROBE_AFTER {
            return None;
        }
        client
            .is_valid(connect::CONNECT_TIMEOUT)
            .err()
            .filter(|_| client.is_closed())
    }

    /// Run `work` on the connection, outside any transaction, with errors mapped to `Failure`.
    fn read<T>(&self, work: impl FnOnce(&mut Client) -> Result<T>) -> StoreResult<T> {
        let mut client = self.client()?;
        work(&mut client).map_err(|e| self.classify(e).into())
    }

    /// Run `work` in one read-committed transaction: committed if it returns Ok, rolled back
    /// otherwise; errors mapped to `Failure`.
    fn write<T>(&self, work: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> StoreResult<T> {
        let mut client = self.client()?;
        let result = (|| {
            let mut tx = client.transaction()?;
            let value = work(&mut tx)?;
            tx.commit()?;
            Ok(value)
        })();
        result.map_err(|e| self.classify(e).into())
    }

    /// `write`, committed as `commit` says: a deferred commit is asynchronous
    /// (`synchronous_commit = off` for this transaction). PostgreSQL's WAL is one ordered log, so
    /// the next synchronous commit, of any session, flushes every asynchronous one before it.
    fn write_with<T>(
        &self,
        commit: Commit,
        work: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
    ) -> StoreResult<T> {
        if commit == Commit::Durable {
            return self.write(work);
        }
        // Set on beginning: a rollback leaves `sync` one needless commit, never a missed one.
        self.unsynced.set(true);
        self.write(|tx| {
            tx.batch_execute("SET LOCAL synchronous_commit = off")?;
            work(tx)
        })
    }

    /// Run `work` in one read-only snapshot (repeatable read): every number it reads comes from
    /// the same moment.
    fn snapshot<T>(&self, work: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> StoreResult<T> {
        let mut client = self.client()?;
        let result = (|| {
            let mut tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let value = work(&mut tx)?;
            tx.commit()?;
            Ok(value)
        })();
        result.map_err(|e| self.classify(e).into())
    }

    /// `claim`, or `claim_run` when `only` names the run: one claim, one statement (its own
    /// transaction, committed asynchronously: see `CLAIM_SQL`), one round trip.
    fn claim_where(
        &self,
        only: Option<i64>,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
    ) -> StoreResult<Claimed> {
        let sql = CLAIM_SQL.replace("{only}", if only.is_some() { "AND r.id = $11" } else { "" });
        let (prefix, suffix) = claimed_detail(&actor.host);
        // Set before: a failure leaves `sync` one needless commit, never a missed one.
        self.unsynced.set(true);
        self.read(|client| {
            let (lease_expires_at, batch) = (now + lease_secs, batch as i64);
            let (pid, start_time) = (i64::from(actor.pid), actor.start_time.map(|t| t as i64));
            let kind = EventKind::Claimed.as_str();
            let mut params: Params<'_> = vec![
                &actor.owner,
                &lease_expires_at,
                &now,
                &batch,
                &actor.host,
                &pid,
                &start_time,
                &kind,
                &prefix,
                &suffix,
            ];
            if let Some(run_id) = &only {
                params.push(run_id);
            }
            let claim = prepared(client, &sql)?;
            // Another claim started a run of one of these `forbid` schedules after this
            // statement's snapshot: the unique index refused the second. Claim again, from a
            // snapshot that sees it running.
            let mut tries = 0;
            let rows = loop {
                match client.query(&claim, &params) {
                    Err(e) if tries < CLAIM_TRIES && second_forbid_run(&e) => tries += 1,
                    result => break result?,
                }
            };
            let more_due = match rows.first() {
                Some(row) => row.try_get(0)?,
                None => anyhow::bail!("the claim returned no row"),
            };
            let mut runs = Vec::with_capacity(rows.len());
            // The first row carries `more_due` alone when nothing was claimed.
            for r in rows
                .iter()
                .filter(|r| matches!(r.try_get(1), Ok(Some::<i64>(_))))
            {
                let leftovers: String = r.try_get(14)?;
                runs.push(ClaimedRun {
                    run_id: r.try_get(1)?,
                    definition_id: r.try_get(2)?,
                    job_name: r.try_get(3)?,
                    attempt: u32_at(r, 4)?,
                    retry: RetryPolicy::from_secs(u32_at(r, 5)?, r.try_get(10)?, r.try_get(11)?),
                    scheduled_for: r.try_get(6)?,
                    command: r.try_get(7)?,
                    workdir: r.try_get(8)?,
                    timeout_secs: r.try_get(9)?,
                    idempotency_key: r.try_get(12)?,
                    lease_token: token_at(r, 13)?,
                    leftovers: leftovers.parse().unwrap_or(Leftovers::Kill),
                });
            }
            // RETURNING gives no order: claim order is due order, ids break ties.
            runs.sort_by_key(|run| run.run_id);
            Ok(Claimed { runs, more_due })
        })
    }

    /// A PostgreSQL error becomes a `Failure` with the server named; others pass through.
    fn classify(&self, error: anyhow::Error) -> anyhow::Error {
        match error.downcast_ref::<postgres::Error>() {
            Some(pg) => connect::failure(&self.server, pg),
            None => error,
        }
    }
}

fn newer_schema(server: &str, version: i64) -> anyhow::Error {
    Failure::database(format!(
        "{server} has runner schema version {version}, newer than this runner understands ({}); \
         upgrade runner",
        MIGRATIONS.len()
    ))
}

/// Migration `version` failed, of a database found at schema version `found` (0: none). A table
/// (or index, or type) of one of runner's names that is already there, in a database without
/// runner's schema version, is another application's: this is not a runner database (exit 4), as
/// SQLite says of a file that is not runner's, and nothing was created (the migration is one
/// transaction). An older schema this user may not change (the first command after an upgrade,
/// run as a user with only the privileges a tick needs) takes the tables' owner: granting this
/// user the tables' privileges, what a missing privilege is otherwise told, would not do.
/// Anything else is classified as any error is.
fn migration_failure(
    server: &Server,
    found: i64,
    version: usize,
    error: &postgres::Error,
) -> anyhow::Error {
    if matches!(
        error.code(),
        Some(&SqlState::DUPLICATE_TABLE | &SqlState::DUPLICATE_OBJECT)
    ) {
        return not_a_runner_database(server, &connect::cause(error));
    }
    if found > 0 && error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        return Failure::database(format!(
            "{server}: the database is at schema version {found}, this runner needs {}; run \
             `runner init` as the tables' owner (applying migration {version}: {})",
            MIGRATIONS.len(),
            connect::cause(error)
        ));
    }
    connect::failure(server, error).context(format!("applying PostgreSQL migration {version}"))
}

/// Creating runner's first table failed. For want of a privilege, what this user lacks is CREATE
/// on the schema (there are no runner tables yet whose privileges it could be given); anything
/// else is classified as any error is.
fn creation_failure(server: &Server, error: &postgres::Error) -> anyhow::Error {
    if error.code() != Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        return connect::failure(server, error);
    }
    Failure::database(format!(
        "{server}: {}; runner's tables are not created yet: grant this user CREATE on that \
         schema, or run `runner init` as its owner (of `public`, the database's owner)",
        connect::cause(error)
    ))
}

/// Exit 4: the database holds another application's tables where runner's would go (`why`).
fn not_a_runner_database(server: &Server, why: &str) -> anyhow::Error {
    Failure::database(format!(
        "{server} is not a runner database: {why}; point --db at another database"
    ))
}

/// The tables runner's migrations create, read from them (`CREATE TABLE name`). Not
/// `runner_schema_version`: created `IF NOT EXISTS` beside them, it is runner's wherever found.
fn created_tables() -> Vec<String> {
    let mut names: Vec<String> = MIGRATIONS
        .iter()
        .flat_map(|sql| sql.split("CREATE TABLE ").skip(1))
        .filter_map(|rest| {
            let rest = rest
                .trim_start()
                .trim_start_matches("IF NOT EXISTS")
                .trim_start();
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// In a database without runner's schema version, tables of the names runner's schema creates
/// are another application's: refuse the database (exit 4) before creating anything, as SQLite
/// refuses a file that is not runner's. (Other tables are fine: a database may be shared.)
fn refuse_foreign_tables(client: &mut impl GenericClient, server: &Server) -> Result<()> {
    let names = created_tables();
    let found: Vec<String> = client
        .query(
            "SELECT relname::text FROM pg_class
             WHERE relname = ANY($1) AND pg_table_is_visible(oid) ORDER BY relname",
            &[&names],
        )?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    if found.is_empty() {
        return Ok(());
    }
    Err(not_a_runner_database(
        server,
        &format!(
            "it holds {} without runner's schema version",
            found.join(", ")
        ),
    ))
}

/// The schema version applied, or `None` when the database has no runner schema.
///
/// Whether the table exists is read from `pg_class`, not by `to_regclass`: that looks the name
/// up in the session's cache without taking a lock, and a session that missed it once (before
/// waiting for the migration lock while another `init` created it) keeps missing it until its
/// transaction ends, when the tables beside it are plainly there.
fn schema_version(client: &mut impl GenericClient) -> Result<Option<i64>> {
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_class
                            WHERE relname = 'runner_schema_version' AND pg_table_is_visible(oid))",
            &[],
        )?
        .try_get(0)?;
    if !exists {
        return Ok(None);
    }
    Ok(client
        .query_one("SELECT max(version) FROM runner_schema_version", &[])?
        .try_get(0)?)
}

/// A count or attempt number stored as bigint, as the `u32` the model uses (the schema's checks
/// keep them in range; anything beyond saturates).
fn u32_at(row: &Row, index: usize) -> Result<u32, postgres::Error> {
    let value: i64 = row.try_get(index)?;
    Ok(u32::try_from(value.max(0)).unwrap_or(u32::MAX))
}

fn opt_u32_at(row: &Row, index: usize) -> Result<Option<u32>, postgres::Error> {
    let value: Option<i64> = row.try_get(index)?;
    Ok(value.map(|v| u32::try_from(v.max(0)).unwrap_or(u32::MAX)))
}

fn opt_u64_at(row: &Row, index: usize) -> Result<Option<u64>, postgres::Error> {
    let value: Option<i64> = row.try_get(index)?;
    Ok(value.map(|v| v.max(0) as u64))
}

fn opt_i32_at(row: &Row, index: usize) -> Result<Option<i32>, postgres::Error> {
    let value: Option<i64> = row.try_get(index)?;
    Ok(value.map(|v| i32::try_from(v).unwrap_or(i32::MAX)))
}

fn status_at(row: &Row, index: usize) -> Result<RunStatus> {
    let text: String = row.try_get(index)?;
    text.parse()
        .map_err(|_| anyhow::anyhow!("unexpected run status {text:?}"))
}

const DEFINITION_COLUMNS: &str = "id, name, cron, timezone, command, workdir, max_attempts, timeout_secs, \
     backoff_base_secs, backoff_max_secs, overlap, catch_up, grace_secs, paused, materialized_through, \
     next_fire_at, created_at, updated_at, revision, leftovers, paused_until, timing_changed_at";

/// The schedules a tick materialises, served by `job_definitions_due` (`$1`: now; `$2`: the
/// limit, NULL for none). Unlike SQLite, a column cannot hold a value of the wrong type here, so
/// every row's due-ness can be judged.
fn due_definitions_query() -> String {
    format!(
        "SELECT {DEFINITION_COLUMNS} FROM job_definitions
         WHERE {DUE_SCHEDULE}
         ORDER BY next_fire_at, id
         LIMIT $2"
    )
}

/// `Store::due_reader` for PostgreSQL: a second connection that reads the due schedules a batch
/// at a time, each batch one short statement outside any transaction, from where the last one
/// ended (by next fire time, then id). No transaction stays open between batches: the tick's
/// connection may wait out a lock (up to the lock timeout) while this one waits for it to take
/// the next batch, and a transaction left idle meanwhile would be ended by the server
/// (`idle_in_transaction_session_timeout`), losing the connection. The schedules the tick has
/// materialised since are no longer due and are not met again; those it read itself (`read`)
/// are passed over by id. A schedule whose next fire time another session moved back behind
/// where this reader is (an edit) waits for the next tick, its cursor unmoved. What it reads
/// only plans instants: a run's command and settings are read on the tick's connection, in the
/// statement that writes it.
struct PostgresDueReader {
    client: Client,
    server: Server,
    due_after: Statement,
    now: i64,
    /// The next fire time and id of the last schedule read.
    last: (i64, i64),
    read: HashSet<i64>,
}

impl PostgresDueReader {
    fn open(store: &PostgresStore, now: i64, read: HashSet<i64>) -> Result<PostgresDueReader> {
        let (mut client, server) =
            connect::connect(&store.url, &store.shown, store.plans, store.patience)?;
        // `job_definitions_due` serves it: next_fire_at from `$2` on, in order.
        let due_after = client.prepare(&format!(
            "SELECT {DEFINITION_COLUMNS} FROM job_definitions
             WHERE {DUE_SCHEDULE} AND next_fire_at >= $2 AND (next_fire_at > $2 OR id > $3)
             ORDER BY next_fire_at, id
             LIMIT $4"
        ))?;
        Ok(PostgresDueReader {
            client,
            server,
            due_after,
            now,
            last: (i64::MIN, i64::MIN),
            read,
        })
    }
}

impl DueReader for PostgresDueReader {
    fn next_batch(&mut self, limit: usize) -> StoreResult<Vec<DefinitionRow>> {
        let mut batch = Vec::with_capacity(limit);
        while batch.len() < limit {
            let wanted = (limit - batch.len()) as i64;
            let (after_fire, after_id) = self.last;
            let rows = self
                .client
                .query(
                    &self.due_after,
                    &[&self.now, &after_fire, &after_id, &wanted],
                )
                .map_err(|e| connect::failure(&self.server, &e))?;
            for row in &rows {
                let id: i64 = row.get(0);
                let next_fire_at: Option<i64> = row.get("next_fire_at");
                self.last = (next_fire_at.unwrap_or(i64::MAX), id);
                if !self.read.remove(&id) {
                    batch.push(definition_from_row(row));
                }
            }
            if (rows.len() as i64) < wanted {
                break;
            }
        }
        Ok(batch)
    }
}

/// The one conversion of a `job_definitions` row (selected with `DEFINITION_COLUMNS`). The
/// schema's types and checks keep most damage out; what is left (a count beyond `u32`, a cron
/// expression or zone that does not parse) comes back as a `DamagedDefinition` naming the columns.
fn definition_from_row(row: &Row) -> DefinitionRow {
    let mut columns = Columns {
        row,
        problems: Vec::new(),
    };
    let definition = Definition {
        id: columns.get("id"),
        name: columns.get("name"),
        settings: Settings {
            cron: columns.get("cron"),
            timezone: columns.get("timezone"),
            command: columns.get("command"),
            workdir: columns.get("workdir"),
            max_attempts: columns.count("max_attempts"),
            timeout_secs: columns.get("timeout_secs"),
            backoff_base_secs: columns.get("backoff_base_secs"),
            backoff_max_secs: columns.get("backoff_max_secs"),
            overlap: columns.parsed("overlap", Overlap::Forbid),
            catch_up: columns.parsed("catch_up", CatchUp::Latest),
            grace_secs: columns.get("grace_secs"),
            leftovers: columns.parsed("leftovers", Leftovers::Kill),
            paused: columns.get::<i64>("paused") == 1,
        },
        materialized_through: columns.get("materialized_through"),
        next_fire_at: columns.get("next_fire_at"),
        created_at: columns.get("created_at"),
        updated_at: columns.get("updated_at"),
        timing_changed_at: columns.get("timing_changed_at"),
        revision: columns.get("revision"),
        paused_until: columns.get("paused_until"),
    };
    definition_row(definition, columns.problems)
}

/// Reads a row column by column, noting each column that does not convert instead of failing
/// the whole row.
struct Columns<'a> {
    row: &'a Row,
    problems: Vec<ColumnProblem>,
}

impl Columns<'_> {
    fn get<T: for<'r> postgres::types::FromSql<'r> + Default>(
        &mut self,
        column: &'static str,
    ) -> T {
        match self.row.try_get::<_, T>(column) {
            Ok(value) => value,
            Err(error) => {
                self.problems.push(ColumnProblem {
                    column,
                    problem: format!("cannot be read ({})", connect::cause(&error)),
                });
                T::default()
            }
        }
    }

    /// A count kept as bigint that the model holds as `u32`.
    fn count(&mut self, column: &'static str) -> u32 {
        let value: i64 = self.get(column);
        u32::try_from(value).unwrap_or_else(|_| {
            self.problems.push(ColumnProblem {
                column,
                problem: format!("{value} is out of range (at most {})", u32::MAX),
            });
            0
        })
    }

    /// A policy stored as text (`FromStr` at the boundary).
    fn parsed<T: std::str::FromStr>(&mut self, column: &'static str, placeholder: T) -> T
    where
        T::Err: std::fmt::Display,
    {
        let text: String = self.get(column);
        text.parse().unwrap_or_else(|e: T::Err| {
            self.problems.push(ColumnProblem {
                column,
                problem: e.to_string(),
            });
            placeholder
        })
    }
}

/// A schedule's settings as parameters $1 to $13 (in `SETTINGS_COLUMNS` order, placeholders
/// `SETTINGS_VALUES`), then a statement's own parameters ($14 on): the one binding of those
/// columns, for the insert and the rewrite of a schedule.
struct SettingsParams<'a> {
    settings: &'a Settings,
    /// Counts and flags are bigint columns; policies are stored as their text.
    max_attempts: i64,
    paused: i64,
    overlap: &'static str,
    catch_up: &'static str,
    leftovers: &'static str,
}

const SETTINGS_VALUES: &str = "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13";

impl<'a> SettingsParams<'a> {
    fn of(settings: &'a Settings) -> SettingsParams<'a> {
        SettingsParams {
            settings,
            max_attempts: i64::from(settings.max_attempts),
            paused: i64::from(settings.paused),
            overlap: settings.overlap.as_str(),
            catch_up: settings.catch_up.as_str(),
            leftovers: settings.leftovers.as_str(),
        }
    }

    /// The settings, then `rest`.
    fn then(&'a self, rest: &[&'a (dyn ToSql + Sync)]) -> Params<'a> {
        let s = self.settings;
        let mut params: Params<'a> = vec![
            &s.cron,
            &s.timezone,
            &s.command,
            &s.workdir,
            &self.max_attempts,
            &s.timeout_secs,
            &s.backoff_base_secs,
            &s.backoff_max_secs,
            &self.overlap,
            &self.catch_up,
            &s.grace_secs,
            &self.paused,
            &self.leftovers,
        ];
        params.extend_from_slice(rest);
        params
    }
}

/// Insert a schedule with its cursor at `now`; `None` when the name is taken.
fn insert_definition(
    tx: &mut Transaction<'_>,
    name: &str,
    s: &Settings,
    now: i64,
    next_fire_at: Option<i64>,
) -> Result<Option<Row>> {
    let settings = SettingsParams::of(s);
    Ok(tx.query_opt(
        &format!(
            "INSERT INTO job_definitions ({SETTINGS_COLUMNS}, name, materialized_through, next_fire_at,
                 created_at, updated_at, timing_changed_at)
             VALUES ({SETTINGS_VALUES}, $14, $15, $16, $15, $15, $15)
             ON CONFLICT (name) DO NOTHING
             RETURNING {DEFINITION_COLUMNS}"
        ),
        &settings.then(&[&name, &now, &next_fire_at]),
    )?)
}

/// Lock schedule `name` for its removal, then its runs: materialisation and manual runs wait for
/// the schedule's row, and a claim passes locked runs over, so no run of it can start between
/// this check and the delete. `None` when there is no such schedule; otherwise its id and its
/// running runs (a removal must refuse while there are any).
fn lock_for_removal(tx: &mut Transaction<'_>, name: &str) -> Result<Option<(i64, Vec<i64>)>> {
    let Some(definition) = tx.query_opt(
        "SELECT id FROM job_definitions WHERE name = $1 FOR UPDATE",
        &[&name],
    )?
    else {
        return Ok(None);
    };
    let id: i64 = definition.try_get(0)?;
    // Running, or cancelled with an attempt still open (its job is yet to be stopped, and that
    // attempt's record is how a tick finds it should its runner die).
    let running = tx
        .query(
            "SELECT r.id, r.status = 'running'
                    OR EXISTS (SELECT 1 FROM job_attempts a WHERE a.run_id = r.id AND a.finished_at IS NULL)
             FROM job_runs r WHERE r.definition_id = $1 ORDER BY r.id FOR UPDATE OF r",
            &[&id],
        )?
        .iter()
        .filter(|row| row.try_get::<_, bool>(1).unwrap_or(true))
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    crate::tick::test_hook("removal-locked");
    Ok(Some((id, running)))
}

/// Rewrite a schedule's settings and cursor (the cursor never moves back), bumping its revision;
/// only while its revision is still `expected_revision`, when given. The timing changed now if
/// the cron or the zone differs from the stored one, read under the row's lock first
/// (`Settings::timing_differs`: the same expression spaced otherwise is no change). Returns the
/// rows changed.
fn rewrite_definition(
    tx: &mut Transaction<'_>,
    d: &Definition,
    now: i64,
    expected_revision: Option<i64>,
) -> Result<u64> {
    let stored = tx.query_opt(
        "SELECT cron, timezone FROM job_definitions WHERE id = $1 FOR UPDATE",
        &[&d.id],
    )?;
    let timing_changed = stored.is_none_or(|row| {
        let cron: Option<String> = row.try_get(0).ok();
        let zone: Option<String> = row.try_get(1).ok();
        d.settings.timing_differs(cron.as_deref(), zone.as_deref())
    });
    let settings = SettingsParams::of(&d.settings);
    Ok(tx.execute(
        &format!(
            "UPDATE job_definitions SET ({SETTINGS_COLUMNS}) = ({SETTINGS_VALUES}),
                 materialized_through = greatest(materialized_through, $15),
                 next_fire_at = $16, updated_at = $17, revision = revision + 1, paused_until = $19,
                 timing_changed_at = CASE WHEN $20 THEN $17 ELSE timing_changed_at END
             WHERE id = $14 AND revision = coalesce($18, revision)"
        ),
        &settings.then(&[
            &d.id,
            &d.materialized_through,
            &d.next_fire_at,
            &now,
            &expected_revision,
            &d.pause_end(),
            &timing_changed,
        ]),
    )?)
}

/// Take, until the transaction ends, the lock that serialises writes of the clock marks
/// (`last_tick_at`, `clock_high_water`), so two ticks never both read the old high-water mark.
///
/// A row lock cannot do it: on a new database the rows do not exist yet, so there is nothing to
/// lock, and concurrent first ticks inserting both rows with `ON CONFLICT` deadlock on each
/// other's half-inserted rows (seen under eight ticks at once). An advisory lock exists whether
/// or not the rows do, and is scoped to this database.
fn lock_clock_marks(tx: &mut Transaction<'_>) -> Result<()> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CLOCK_MARKS_LOCK])?;
    Ok(())
}

/// Lock the schedules whose dead-runs counter these ends may raise, in id order, before any run
/// row: `remove_definition` locks a schedule and then its runs, and concurrent group commits
/// lock schedules in the same order, so taking the schedule only after its run could deadlock.
fn lock_dead_schedules(tx: &mut Transaction<'_>, ends: &[AttemptEnd]) -> Result<()> {
    let runs: Vec<i64> = ends
        .iter()
        .filter(|end| end.counts_dead)
        .map(|end| end.result.run_id)
        .collect();
    if !runs.is_empty() {
        tx.execute(
            "SELECT id FROM job_definitions
             WHERE id IN (SELECT definition_id FROM job_runs WHERE id = ANY($1))
             ORDER BY id FOR NO KEY UPDATE",
            &[&runs],
        )?;
    }
    Ok(())
}

/// `Store::finish_attempts` for a group whose every lease is still held, in one statement (its
/// own transaction: `FINISH_ALL_SQL`), committed as `commit` says. False, having written
/// nothing, if a lease is not held: the caller then writes the group end by end.
fn finish_all(
    client: &mut Client,
    ends: &[AttemptEnd],
    actor: &Actor,
    commit: Commit,
) -> Result<bool> {
    let column = |f: &dyn Fn(&AttemptEnd) -> i64| ends.iter().map(f).collect::<Vec<i64>>();
    let run_ids = column(&|e| e.result.run_id);
    let tokens: Vec<&str> = ends.iter().map(|e| e.result.lease_token.as_str()).collect();
    let statuses: Vec<&str> = ends.iter().map(|e| e.run.status.as_str()).collect();
    let run_ats: Vec<Option<i64>> = ends.iter().map(|e| e.run.run_at).collect();
    let error_codes: Vec<Option<&str>> = ends.iter().map(|e| e.run.error_code.as_deref()).collect();
    let error_details: Vec<Option<&str>> =
        ends.iter().map(|e| e.run.error_detail.as_deref()).collect();
    let finished_ats: Vec<Option<i64>> = ends.iter().map(|e| e.run.finished_at).collect();
    let attempts = column(&|e| i64::from(e.result.attempt));
    let ended_ats = column(&|e| e.result.finished_at);
    let durations = column(&|e| e.result.duration_ms);
    let outcomes: Vec<&str> = ends.iter().map(|e| e.outcome.as_str()).collect();
    let exit_codes: Vec<Option<i64>> = ends
        .iter()
        .map(|e| e.result.exit_code.map(i64::from))
        .collect();
    let outputs = || ends.iter().map(|e| e.result.output.as_ref());
    let stdout_tails: Vec<Option<&[u8]>> =
        outputs().map(|o| o.map(|o| &o.stdout_tail[..])).collect();
    let stderr_tails: Vec<Option<&[u8]>> =
        outputs().map(|o| o.map(|o| &o.stderr_tail[..])).collect();
    let stdout_bytes: Vec<Option<i64>> = outputs()
        .map(|o| o.map(|o| o.stdout_bytes as i64))
        .collect();
    let stderr_bytes: Vec<Option<i64>> = outputs()
        .map(|o| o.map(|o| o.stderr_bytes as i64))
        .collect();
    let left_open: Vec<bool> = ends.iter().map(|e| e.result.attempt_left_open).collect();
    let events = || {
        ends.iter()
            .flat_map(|e| e.events.iter().map(move |v| (e, v)))
    };
    let event_runs: Vec<i64> = events().map(|(e, _)| e.result.run_id).collect();
    let event_ats: Vec<i64> = events().map(|(e, _)| e.result.finished_at).collect();
    let event_kinds: Vec<&str> = events().map(|(_, v)| v.kind.as_str()).collect();
    let event_details: Vec<String> = events().map(|(_, v)| v.detail.to_string()).collect();
    let count = ends.len() as i64;
    let synchronous_commit = (commit == Commit::Deferred).then_some("off");
    let row = query_one_prepared(
        client,
        FINISH_ALL_SQL,
        &[
            &run_ids,
            &tokens,
            &statuses,
            &run_ats,
            &error_codes,
            &error_details,
            &finished_ats,
            &attempts,
            &ended_ats,
            &durations,
            &outcomes,
            &exit_codes,
            &stdout_tails,
            &stderr_tails,
            &stdout_bytes,
            &stderr_bytes,
            &left_open,
            &event_runs,
            &event_ats,
            &event_kinds,
            &event_details,
            &actor.owner,
            &count,
            &synchronous_commit,
        ],
    )?;
    Ok(row.try_get(1)?)
}

/// `finish_all`'s statement. `held` locks every run still held under its token (read committed:
/// a run changed since the statement began is read as it is now); only if that is every one of
/// them do the runs move to their end, their attempts close and their events go in, in order.
/// The attempt is closed as `finish_in` closes it when the run write landed: unless it is left
/// open for another host, or the run was cancelled (by this very write).
const FINISH_ALL_SQL: &str = "
WITH e AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                         $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::bigint[],
                         $13::bytea[], $14::bytea[], $15::bigint[], $16::bigint[], $17::bool[])
        AS e(run_id, lease_token, status, run_at, error_code, error_detail, finished_at, attempt,
             ended_at, duration_ms, outcome, exit_code, stdout_tail, stderr_tail, stdout_bytes,
             stderr_bytes, left_open)
), held AS (
    SELECT r.id FROM job_runs r JOIN e ON r.id = e.run_id
    WHERE r.lease_token = e.lease_token AND r.status = 'running'
    FOR UPDATE OF r
), every AS (
    SELECT count(*) = $23 AS held FROM held
), finished AS (
    UPDATE job_runs r SET status = e.status, run_at = coalesce(e.run_at, r.run_at), owner = NULL,
        lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL, error_code = e.error_code,
        error_detail = e.error_detail, finished_at = e.finished_at
    FROM e
    WHERE (SELECT held FROM every) AND r.id = e.run_id AND r.lease_token = e.lease_token
      AND r.status = 'running'
    RETURNING r.id
), closed AS (
    UPDATE job_attempts a SET finished_at = e.ended_at, duration_ms = e.duration_ms,
        outcome = e.outcome, exit_code = e.exit_code, error_code = e.error_code,
        error_detail = e.error_detail, stdout_tail = e.stdout_tail, stderr_tail = e.stderr_tail,
        stdout_bytes = e.stdout_bytes, stderr_bytes = e.stderr_bytes
    FROM e JOIN finished f ON f.id = e.run_id
    WHERE a.run_id = e.run_id AND a.attempt = e.attempt AND a.lease_token = e.lease_token
      AND a.finished_at IS NULL AND (NOT e.left_open OR e.status = 'cancelled')
), events AS (
    INSERT INTO job_events (run_id, at, kind, actor, detail)
    SELECT v.run_id, v.at, v.kind, $22, v.detail
    FROM unnest($18::bigint[], $19::bigint[], $20::text[], $21::text[]) WITH ORDINALITY
        AS v(run_id, at, kind, detail, n)
    WHERE v.run_id IN (SELECT id FROM finished)
    ORDER BY v.n
)
SELECT set_config('synchronous_commit', coalesce($24, current_setting('synchronous_commit')), true),
       (SELECT held FROM every)";

/// Lock run `run_id`'s row until the transaction ends, before one of its attempts is closed
/// and `job_stopped_sql` looks whether another is still open. Two hosts closing a cancelled
/// run's two open attempts at the same moment then take turns: under read committed each
/// statement sees what was committed before it began, so without the lock each could see the
/// other's attempt still open, neither ending the wait (the run's `forbid` schedule then waited
/// until the deadline); with it the later close sees the earlier's, and ends the wait.
fn lock_run(tx: &mut Transaction<'_>, run_id: i64) -> Result<()> {
    let lock = prepared(tx, "SELECT 1 FROM job_runs WHERE id = $1 FOR UPDATE")?;
    tx.execute(&lock, &[&run_id])?;
    Ok(())
}

/// `Store::close_orphaned_attempt` within `tx`, the run's row locked (`lock_run`): whether it
/// closed the attempt.
fn close_orphan_in(
    tx: &mut Transaction<'_>,
    holder: &AttemptHolder,
    now: i64,
    close: &OrphanClose,
    actor: &Actor,
) -> Result<bool> {
    // Never the attempt a runner still holds: only one whose run moved on without it.
    // One whose job never started took no time and printed nothing; another's output
    // went with its runner (NULL: not kept).
    let closed = tx.execute(
        "UPDATE job_attempts SET finished_at = $4,
             duration_ms = CASE WHEN $7 THEN 0 ELSE greatest(0, $4 - started_at) * 1000 END,
             outcome = 'failed', error_code = $5, error_detail = $6,
             stdout_tail = CASE WHEN $7 THEN ''::bytea END,
             stderr_tail = CASE WHEN $7 THEN ''::bytea END,
             stdout_bytes = CASE WHEN $7 THEN 0 END, stderr_bytes = CASE WHEN $7 THEN 0 END
         WHERE run_id = $1 AND attempt = $2 AND lease_token = $3 AND finished_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM job_runs WHERE id = $1 AND status = 'running' AND lease_token = $3)",
        &[
            &holder.run_id,
            &i64::from(holder.attempt),
            &holder.lease_token.as_str(),
            &now,
            &close.code.to_string(),
            &close.detail,
            &close.never_started,
        ],
    )?;
    if closed == 1 {
        insert_event(tx, holder.run_id, now, actor, &close.event)?;
        tx.execute(&super::job_stopped_sql("$1", None), &[&holder.run_id])?;
        crate::tick::test_hook("orphan-closed");
    }
    Ok(closed == 1)
}

/// One attempt's end within a group commit (see `Store::finish_attempt`).
fn finish_in(tx: &mut Transaction<'_>, end: &AttemptEnd, actor: &Actor) -> Result<Fenced> {
    let (result, run) = (&end.result, &end.run);
    let output = result.output.as_ref();
    let finish_run = prepared(
        tx,
        "UPDATE job_runs SET status = $3, run_at = coalesce($4, run_at), owner = NULL, lease_token = NULL,
             lease_expires_at = NULL, heartbeat_at = NULL, error_code = $5, error_detail = $6,
             finished_at = $7
         WHERE id = $1 AND lease_token = $2 AND status = 'running'
           AND ($8::bigint IS NULL OR lease_expires_at = $8)",
    )?;
    let changed = tx.execute(
        &finish_run,
        &[
            &result.run_id,
            &result.lease_token.as_str(),
            &run.status.as_str(),
            &run.run_at,
            &run.error_code,
            &run.error_detail,
            &run.finished_at,
            &result.lease_expired_at,
        ],
    )?;
    let applied = changed == 1;
    if !applied {
        // Not this runner's any more (when it is, the write above locked the row): closing an
        // attempt of a cancelled run ends its wait if it is the last one open (`lock_run`).
        lock_run(tx, result.run_id)?;
    }
    // The attempt row is fenced by the same token (see `Store::finish_attempt`).
    let finish_attempt = prepared(
        tx,
        "UPDATE job_attempts SET finished_at = $4, duration_ms = $5, outcome = $6, exit_code = $7,
             error_code = $8, error_detail = $9, stdout_tail = $10, stderr_tail = $11,
             stdout_bytes = $12, stderr_bytes = $13
         WHERE run_id = $1 AND attempt = $2 AND lease_token = $3 AND finished_at IS NULL
           AND (($14 AND NOT $15) OR EXISTS (SELECT 1 FROM job_runs WHERE id = $1 AND status = 'cancelled'))",
    )?;
    let closed = tx.execute(
        &finish_attempt,
        &[
            &result.run_id,
            &i64::from(result.attempt),
            &result.lease_token.as_str(),
            &result.finished_at,
            &result.duration_ms,
            &end.outcome.as_str(),
            &result.exit_code.map(i64::from),
            &run.error_code,
            &run.error_detail,
            &output.map(|o| &o.stdout_tail),
            &output.map(|o| &o.stderr_tail),
            &output.map(|o| o.stdout_bytes as i64),
            &output.map(|o| o.stderr_bytes as i64),
            &applied,
            &result.attempt_left_open,
        ],
    )?;
    let at = result.finished_at;
    if !applied && closed == 1 {
        // Closed under its cancelled run: its job is stopped, and so the run's, unless another
        // attempt of it is still open.
        let stopped = prepared(tx, &super::job_stopped_sql("$1", None))?;
        tx.execute(&stopped, &[&result.run_id])?;
    }
    if !applied {
        // The run this attempt held: one whose attempt row is still there (a removed schedule's
        // runs and attempts are gone, and SQLite may give a new run the same id).
        let current = tx
            .query_opt(
                "SELECT r.status FROM job_runs r
                 WHERE r.id = $1
                   AND EXISTS (SELECT 1 FROM job_attempts a WHERE a.run_id = r.id AND a.lease_token = $2)",
                &[&result.run_id, &result.lease_token.as_str()],
            )?
            .map(|r| status_at(&r, 0))
            .transpose()?;
        // A refused recovery is no stale runner's write: the holder renewed its lease, or
        // another tick recovered the run first. Nothing happened to the run; nothing to record.
        if let Some(current) = current.filter(|_| result.lease_expired_at.is_none()) {
            insert_event(tx, result.run_id, at, actor, &end.fenced(current))?;
        }
        return Ok(Fenced::LeaseLost);
    }
    for event in &end.events {
        insert_event(tx, result.run_id, at, actor, event)?;
    }
    if end.counts_dead {
        // runner_dead_runs_total{job}: a counter, so retry and prune never lower it. The
        // schedule's row is already locked (`lock_dead_schedules`).
        tx.execute(&super::count_dead_sql("$1"), &[&result.run_id])?;
    }
    Ok(Fenced::Applied)
}

/// Record `event` on run `run_id`'s timeline, at `at`, by `actor`.
fn insert_event(
    tx: &mut Transaction<'_>,
    run_id: i64,
    at: i64,
    actor: &Actor,
    event: &NewEvent,
) -> Result<()> {
    let insert = prepared(
        tx,
        "INSERT INTO job_events (run_id, at, kind, actor, detail) VALUES ($1, $2, $3, $4, $5)",
    )?;
    tx.execute(
        &insert,
        &[
            &run_id,
            &at,
            &event.kind.as_str(),
            &actor.owner,
            &event.detail.to_string(),
        ],
    )?;
    Ok(())
}

/// `Store::materialize_together` within `tx`, in two statements for the whole batch rather than
/// two per schedule: move every cursor that is still as read (each its own compare-and-swap),
/// then insert all the runs their plans return (`plan(i, running)` for `cursors[i]`), with their
/// events. Per schedule, in order: the runs inserted (0 if another tick got there first).
fn materialize_all(
    tx: &mut Transaction<'_>,
    cursors: &[CursorMove],
    now: i64,
    actor: &Actor,
    plan: &mut dyn FnMut(usize, Option<i64>) -> Vec<NewRun>,
) -> Result<Vec<usize>> {
    // A racing tick waits for each row's lock, then finds the cursor moved and skips the row;
    // the running run of each moved schedule is read in the same statement. Two ticks locking
    // the same schedules in different orders can deadlock, or a session can hold a row past the
    // lock timeout: the transaction is aborted, and the caller writes the batch again passing
    // over the rows still held (`Store::materialize_batch`, `materialize_unheld`).
    let move_cursors = prepared(
        tx,
        "UPDATE job_definitions d SET materialized_through = m.new_through, next_fire_at = m.next_fire_at
         FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
             AS m (id, expected_through, expected_revision, new_through, next_fire_at)
         WHERE d.id = m.id AND d.materialized_through = m.expected_through
             AND d.revision = m.expected_revision AND d.paused = 0
         RETURNING d.id, (SELECT r.id FROM job_runs r
                          WHERE r.definition_id = d.id AND r.status = 'running'
                          ORDER BY r.id LIMIT 1)",
    )?;
    let definition_ids: Vec<i64> = cursors.iter().map(|c| c.definition_id).collect();
    let expected_throughs: Vec<i64> = cursors.iter().map(|c| c.expected_through).collect();
    let expected_revisions: Vec<i64> = cursors.iter().map(|c| c.expected_revision).collect();
    let new_throughs: Vec<i64> = cursors.iter().map(|c| c.new_through).collect();
    let next_fire_ats: Vec<Option<i64>> = cursors.iter().map(|c| c.next_fire_at).collect();
    let moved: HashMap<i64, Option<i64>> = tx
        .query(
            &move_cursors,
            &[
                &definition_ids,
                &expected_throughs,
                &expected_revisions,
                &new_throughs,
                &next_fire_ats,
            ],
        )?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, postgres::Error>>()?;
    let plans: Vec<Vec<NewRun>> = cursors
        .iter()
        .enumerate()
        .map(|(i, c)| match moved.get(&c.definition_id) {
            Some(&running) => plan(i, running),
            None => Vec::new(),
        })
        .collect();
    let runs: Vec<(i64, &NewRun)> = cursors
        .iter()
        .zip(&plans)
        .flat_map(|(c, runs)| runs.iter().map(|run| (c.definition_id, run)))
        .collect();
    let inserted = insert_runs(tx, &runs, now, actor)?;
    let inserted_of = |runs: &Vec<NewRun>| {
        let is_inserted = |run: &&NewRun| inserted.contains_key(&run.idempotency_key);
        runs.iter().filter(is_inserted).count()
    };
    Ok(plans.iter().map(inserted_of).collect())
}

/// `materialize_all` for the schedules of `cursors` whose rows no other session holds locked
/// (`RowLocks::PassOver`): those rows are locked first, without waiting for the others
/// (`SKIP LOCKED`), and only they are written. Per schedule, in order: the runs inserted, or
/// `None` for one passed over whose cursor is still as read (its instants wait for a later
/// tick; one whose cursor has moved meanwhile, or that is gone, inserted 0, as with a wait).
fn materialize_unheld(
    tx: &mut Transaction<'_>,
    cursors: &[CursorMove],
    now: i64,
    actor: &Actor,
    plan: &mut dyn FnMut(usize, Option<i64>) -> Vec<NewRun>,
) -> Result<Vec<Option<usize>>> {
    let ids: Vec<i64> = cursors.iter().map(|c| c.definition_id).collect();
    let lock_unheld = prepared(
        tx,
        "SELECT id FROM job_definitions WHERE id = ANY($1) FOR UPDATE SKIP LOCKED",
    )?;
    let locked: HashSet<i64> = tx
        .query(&lock_unheld, &[&ids])?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, postgres::Error>>()?;
    let (unheld, held): (Vec<usize>, Vec<usize>) =
        (0..cursors.len()).partition(|&i| locked.contains(&cursors[i].definition_id));
    let mut results = vec![Some(0); cursors.len()];
    let unheld_cursors: Vec<CursorMove> = unheld.iter().map(|&i| cursors[i]).collect();
    let inserted = materialize_all(tx, &unheld_cursors, now, actor, &mut |j, running| {
        plan(unheld[j], running)
    })?;
    for (&i, n) in unheld.iter().zip(inserted) {
        results[i] = Some(n);
    }
    let held_cursors: Vec<CursorMove> = held.iter().map(|&i| cursors[i]).collect();
    let still_as_read = cursors_still_as_read(tx, &held_cursors)?;
    for i in held {
        if still_as_read.contains(&cursors[i].definition_id) {
            results[i] = None;
        }
    }
    Ok(results)
}

/// Which of `cursors` are still where they expect, as last committed (a read: a row another
/// session holds locked is read as it was before that session's changes).
fn cursors_still_as_read(tx: &mut Transaction<'_>, cursors: &[CursorMove]) -> Result<HashSet<i64>> {
    if cursors.is_empty() {
        return Ok(HashSet::new());
    }
    let ids: Vec<i64> = cursors.iter().map(|c| c.definition_id).collect();
    let throughs: Vec<i64> = cursors.iter().map(|c| c.expected_through).collect();
    let revisions: Vec<i64> = cursors.iter().map(|c| c.expected_revision).collect();
    let rows = tx.query(
        "SELECT d.id FROM job_definitions d
         JOIN unnest($1::bigint[], $2::bigint[], $3::bigint[])
             AS m (id, expected_through, expected_revision) ON d.id = m.id
         WHERE d.materialized_through = m.expected_through
             AND d.revision = m.expected_revision AND d.paused = 0",
        &[&ids, &throughs, &revisions],
    )?;
    Ok(rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, postgres::Error>>()?)
}

/// Insert each `(definition_id, run)`, copying its schedule's command and policies, as the run
/// says, with its `NewRun::event()`, in one statement. Returns the ids of the runs inserted, by
/// idempotency key; a run is left out where its instant already has a schedule run (one run per
/// instant) or its schedule is gone.
fn insert_runs(
    tx: &mut Transaction<'_>,
    runs: &[(i64, &NewRun)],
    now: i64,
    actor: &Actor,
) -> Result<HashMap<String, i64>> {
    if runs.is_empty() {
        return Ok(HashMap::new());
    }
    let insert = prepared(
        tx,
        "WITH planned AS (
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[],
                                  $6::text[], $7::bigint[], $8::text[], $9::text[])
                 WITH ORDINALITY AS p (definition_id, trigger, scheduled_for, status,
                                       idempotency_key, skip_reason, finished_at, kind, detail, n)
         ), run AS (
             INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command, workdir,
                 max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
                 skip_reason, created_at, finished_at, leftovers, timezone)
             SELECT d.id, p.trigger, p.scheduled_for, p.status, p.scheduled_for, d.command, d.workdir,
                 d.max_attempts, d.timeout_secs, d.backoff_base_secs, d.backoff_max_secs,
                 p.idempotency_key, p.skip_reason, $10::bigint, p.finished_at, d.leftovers, d.timezone
             FROM planned p JOIN job_definitions d ON d.id = p.definition_id
             ORDER BY p.n
             ON CONFLICT (definition_id, scheduled_for) WHERE trigger = 'schedule' DO NOTHING
             RETURNING id, idempotency_key
         ), event AS (
             INSERT INTO job_events (run_id, at, kind, actor, detail)
             SELECT run.id, $10::bigint, p.kind, $11::text, p.detail
             FROM run JOIN planned p USING (idempotency_key)
             ORDER BY run.id
         )
         SELECT idempotency_key, id FROM run",
    )?;
    let definition_ids: Vec<i64> = runs.iter().map(|(id, _)| *id).collect();
    let triggers: Vec<&str> = runs.iter().map(|(_, r)| r.trigger.as_str()).collect();
    let scheduled_fors: Vec<i64> = runs.iter().map(|(_, r)| r.scheduled_for).collect();
    let statuses: Vec<RunStatus> = runs.iter().map(|(_, r)| r.status()).collect();
    let status_names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    let keys: Vec<&str> = runs
        .iter()
        .map(|(_, r)| r.idempotency_key.as_str())
        .collect();
    let skip_reasons: Vec<Option<&str>> =
        runs.iter().map(|(_, r)| r.skip_reason.as_deref()).collect();
    let finished_ats: Vec<Option<i64>> = statuses
        .iter()
        .map(|s| s.is_final().then_some(now))
        .collect();
    let events: Vec<NewEvent> = runs.iter().map(|(_, r)| r.event()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let details: Vec<String> = events.iter().map(|e| e.detail.to_string()).collect();
    let rows = tx.query(
        &insert,
        &[
            &definition_ids,
            &triggers,
            &scheduled_fors,
            &status_names,
            &keys,
            &skip_reasons,
            &finished_ats,
            &kinds,
            &details,
            &now,
            &actor.owner,
        ],
    )?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, postgres::Error>>()
        .map_err(Into::into)
}

/// A lease token column.
fn token_at(row: &Row, index: usize) -> Result<LeaseToken, postgres::Error> {
    Ok(LeaseToken::from(row.try_get::<_, String>(index)?))
}

/// A run with its schedule and latest attempt, for `history` and `show`.
const RUN_VIEW: &str = "
SELECT r.id, d.name, coalesce(r.timezone, d.timezone), r.trigger, r.status, r.scheduled_for, r.run_at, r.attempt, r.max_attempts,
       r.command, r.workdir, r.idempotency_key, r.owner, r.lease_expires_at, r.heartbeat_at,
       r.error_code, r.error_detail, r.skip_reason, r.created_at, r.started_at, r.finished_at,
       a.started_at, a.duration_ms, a.exit_code, r.stopping_by
FROM job_runs r
JOIN job_definitions d ON d.id = r.definition_id
LEFT JOIN job_attempts a ON a.run_id = r.id AND a.attempt = r.attempt";

fn run_view_from_row(row: &Row) -> Result<RunView> {
    Ok(RunView {
        id: row.try_get(0)?,
        job: row.try_get(1)?,
        timezone: row.try_get(2)?,
        trigger: row.try_get(3)?,
        status: status_at(row, 4)?,
        scheduled_for: row.try_get(5)?,
        run_at: row.try_get(6)?,
        attempt: u32_at(row, 7)?,
        max_attempts: u32_at(row, 8)?,
        command: row.try_get(9)?,
        workdir: row.try_get(10)?,
        idempotency_key: row.try_get(11)?,
        owner: row.try_get(12)?,
        lease_expires_at: row.try_get(13)?,
        heartbeat_at: row.try_get(14)?,
        error_code: row.try_get(15)?,
        error_detail: row.try_get(16)?,
        skip_reason: row.try_get(17)?,
        created_at: row.try_get(18)?,
        started_at: row.try_get(19)?,
        finished_at: row.try_get(20)?,
        last_attempt_started_at: row.try_get(21)?,
        last_duration_ms: row.try_get(22)?,
        last_exit_code: opt_i32_at(row, 23)?,
        stopping_by: row.try_get(24)?,
    })
}

/// After `RUN_VIEW`: a schedule's runs of some instants (by `job_runs_definition_history`).
const RUNS_AT_INSTANTS: &str = "
WHERE r.definition_id = $1 AND r.trigger = 'schedule' AND r.scheduled_for = ANY($2)";

/// The instants of a schedule's latest runs of its own (`recorded_instants`): the partial index
/// `job_runs_one_per_instant` holds schedule runs only, so manual runs are never stepped over.
const RECORDED_INSTANTS: &str = "
SELECT scheduled_for FROM job_runs
WHERE definition_id = $1 AND trigger = 'schedule' AND scheduled_for <= $2
ORDER BY scheduled_for DESC LIMIT $3";

/// The oldest schedule run of a schedule after a time (`first_run_after`, and the one
/// `reanchor_definition` shows its `record`), read from the index of one run per instant.
const FIRST_RUN_AFTER: &str = "
SELECT id, scheduled_for, status, skip_reason, created_at FROM job_runs
WHERE definition_id = $1 AND trigger = 'schedule' AND scheduled_for > $2
ORDER BY scheduled_for LIMIT 1";

fn run_after_from_row(row: &Row) -> Result<RunAfterCursor> {
    Ok(RunAfterCursor {
        id: row.try_get(0)?,
        scheduled_for: row.try_get(1)?,
        status: status_at(row, 2)?,
        skip_reason: row.try_get(3)?,
        created_at: row.try_get(4)?,
    })
}

const LAST_TICK_AT: &str = "SELECT value FROM runner_state WHERE key = 'last_tick_at'";

/// The columns of the short form of a run that `status` names (`run_brief_from_row`); queries
/// append their own columns after these.
macro_rules! run_brief {
    () => {
        "SELECT r.id, d.name, coalesce(r.timezone, d.timezone), r.scheduled_for, r.run_at, r.attempt, r.max_attempts, r.error_code,
       r.finished_at"
    };
}
const RUN_BRIEF_COLUMNS: usize = 9;

fn run_brief_from_row(row: &Row) -> Result<RunBrief> {
    Ok(RunBrief {
        id: row.try_get(0)?,
        job: row.try_get(1)?,
        timezone: row.try_get(2)?,
        scheduled_for: row.try_get(3)?,
        run_at: row.try_get(4)?,
        attempt: u32_at(row, 5)?,
        max_attempts: u32_at(row, 6)?,
        error_code: row.try_get(7)?,
        finished_at: row.try_get(8)?,
    })
}

// ---- the health report: one query per question, each served by an index ----

const COUNT_RUNS_BY_STATUS: &str = "SELECT status, count(*) FROM job_runs GROUP BY status";
/// The pending run due the longest (`job_runs_due`).
const OLDEST_DUE: &str = concat!(
    run_brief!(),
    "
FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
WHERE r.status = 'pending' AND r.run_at <= $1 AND d.paused = 0
ORDER BY r.run_at, r.id LIMIT 1"
);
/// Pending runs held by their paused schedule: not claimable (see `Store::claim`), so not late.
const HELD_BY_PAUSE: &str = "
SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
WHERE r.status = 'pending' AND d.paused = 1";
/// Running runs with their lease and attempt, the earliest expiry first (`job_runs_leases`).
const RUNNING_RUNS: &str = concat!(
    run_brief!(),
    ", r.owner, a.host, a.started_at, r.heartbeat_at, r.lease_expires_at
FROM job_runs r
JOIN job_definitions d ON d.id = r.definition_id
LEFT JOIN job_attempts a ON a.run_id = r.id AND a.attempt = r.attempt
WHERE r.status = 'running'
ORDER BY r.lease_expires_at, r.id LIMIT $1"
);
const COUNT_EXPIRED_LEASES: &str =
    "SELECT count(*) FROM job_runs WHERE status = 'running' AND lease_expires_at < $1";
/// Runs cancelled while running whose job is still being stopped, of one schedule ($1) or of
/// all ($1 NULL), the earliest deadline first, at most $2 rows: one per open attempt (a run's
/// newest first), or one with none. Only the runs `job_runs_stopping` holds, normally none.
const STOPPING_RUNS: &str = concat!(
    run_brief!(),
    ", a.attempt, a.host, a.runner_pid, a.child_pid, r.stopping_by
FROM job_runs r
JOIN job_definitions d ON d.id = r.definition_id
LEFT JOIN job_attempts a ON a.run_id = r.id AND a.finished_at IS NULL
WHERE r.stopping_by IS NOT NULL AND ($1::bigint IS NULL OR r.definition_id = $1)
ORDER BY r.stopping_by, r.id, a.attempt DESC LIMIT $2"
);

/// `STOPPING_RUNS` of one schedule (`definition_id`) or of all, on `client` (a transaction, for
/// the health report's snapshot).
fn stopping_runs(
    client: &mut impl GenericClient,
    definition_id: Option<i64>,
    limit: usize,
) -> Result<Vec<StoppingView>> {
    client
        .query(STOPPING_RUNS, &[&definition_id, &(limit as i64)])?
        .iter()
        .map(|r| {
            let c = RUN_BRIEF_COLUMNS;
            Ok(StoppingView {
                run: run_brief_from_row(r)?,
                attempt: opt_u32_at(r, c)?,
                host: r.try_get(c + 1)?,
                runner_pid: opt_u32_at(r, c + 2)?,
                child_pid: opt_u32_at(r, c + 3)?,
                stopping_by: r.try_get(c + 4)?,
            })
        })
        .collect()
}
/// Runs retrying, by the attempt they are on (see the SQLite backend).
const RETRIES_IN_FLIGHT: &str = "
SELECT CASE status WHEN 'pending' THEN attempt + 1 ELSE attempt END AS retry_attempt, count(*)
FROM job_runs
WHERE (status = 'pending' AND attempt >= 1) OR (status = 'running' AND attempt >= 2)
GROUP BY retry_attempt ORDER BY retry_attempt";
const TOP_ERRORS: &str = "
SELECT error_code, count(*) AS failures FROM job_attempts
WHERE finished_at >= $1 AND error_code IS NOT NULL
GROUP BY error_code ORDER BY failures DESC, error_code LIMIT $2";
const DEAD_RECENT: &str = concat!(
    run_brief!(),
    ", count(*) OVER ()
FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
WHERE r.status = 'dead' AND r.finished_at >= $1
ORDER BY r.finished_at DESC, r.id DESC LIMIT $2"
);
const RUNNER_STATE: &str = "
SELECT key, value FROM runner_state
WHERE key IN ('last_tick_at', 'last_prune_at', 'last_manual_prune_at')";
const CLOCK_HIGH_WATER: &str = "
SELECT coalesce((SELECT value FROM runner_state WHERE key = 'clock_high_water'),
                (SELECT value FROM runner_state WHERE key = 'last_tick_at'))";
const OLDEST_RUN: &str = concat!(
    run_brief!(),
    "
FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
ORDER BY r.scheduled_for, r.id LIMIT 1"
);
const ATTEMPT_DURATIONS: &str = "
SELECT definition_id, duration_ms FROM job_attempts
WHERE finished_at >= $1 AND duration_ms IS NOT NULL";
/// The space the runner's tables and their indexes take.
const STORAGE_BYTES: &str = "
SELECT coalesce(sum(pg_total_relation_size(c)), 0)::bigint
FROM unnest(ARRAY['job_definitions', 'job_runs', 'job_attempts', 'job_events', 'runner_state']::regclass[]) AS c";

/// The runs pruning may delete (each with its schedule, and whether it ran: not skipped):
/// finished for good before `$1`, with no attempt still open.
const PRUNABLE_RUNS: &str = "
SELECT id, definition_id, status <> 'skipped' FROM job_runs
WHERE status IN ('succeeded', 'dead', 'cancelled', 'skipped') AND finished_at < $1
  AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.run_id = job_runs.id AND a.finished_at IS NULL)";

/// The runs past `cutoff` of the schedules a prune batch found `busy` (locked by another command),
/// and how many of those schedules have any: what the prune leaves for the next one.
fn left_for_later(
    tx: &mut postgres::Transaction<'_>,
    cutoff: i64,
    busy: &[i64],
) -> Result<LeftForLater, postgres::Error> {
    if busy.is_empty() {
        return Ok(LeftForLater::default());
    }
    let row = tx.query_one(
        &format!(
            "SELECT count(*), count(DISTINCT definition_id) FROM ({PRUNABLE_RUNS}) p
             WHERE definition_id = ANY($2)"
        ),
        &[&cutoff, &busy],
    )?;
    Ok(LeftForLater {
        runs: row.try_get::<_, i64>(0)? as u64,
        schedules: row.try_get::<_, i64>(1)? as u64,
    })
}

/// Whether a claim would find due work (`Store::anything_due`): `CLAIM_SQL`'s `more` before
/// anything is claimed, read the same way (in due order, each run's schedule asked about).
const ANYTHING_DUE_SQL: &str = "
SELECT (SELECT r.id FROM job_runs r
        WHERE r.status = 'pending' AND r.run_at <= $1
          AND (SELECT d.paused = 0 FROM job_definitions d WHERE d.id = r.definition_id)
        ORDER BY r.run_at, r.id LIMIT 1) IS NOT NULL";

/// What each step of a tick looks for, written once for the step's own read and for
/// `pending_work`'s (`$1` is now in both). A `running` run whose lease expired (runs as `r`):
const EXPIRED_LEASE: &str = "r.status = 'running' AND r.lease_expires_at < $1";
/// A cancelled run whose job was not known stopped by its deadline (`job_runs_stopping`; runs
/// as `r`):
const OVERDUE_STOP: &str = "r.stopping_by IS NOT NULL AND r.stopping_by < $1";
/// A paused schedule whose timed pause ended:
const ENDED_PAUSE: &str = "paused = 1 AND paused_until <= $1";
/// A due schedule:
const DUE_SCHEDULE: &str = "paused = 0 AND next_fire_at <= $1";
/// An open attempt (`a`) of the host in parameter `host` whose run (`r`) moved on without it:
fn orphaned_attempt(host: &str) -> String {
    format!(
        "a.host = {host} AND a.finished_at IS NULL
         AND NOT (r.status = 'running' AND r.lease_token IS NOT DISTINCT FROM a.lease_token)"
    )
}

/// `Store::pending_work`: each step's condition in one EXISTS, served by the index its step's
/// read uses (`$1` now, `$2` the host).
fn pending_work_query() -> String {
    format!(
        "SELECT
             EXISTS (SELECT 1 FROM job_runs r WHERE {EXPIRED_LEASE}),
             EXISTS (SELECT 1 FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
                     WHERE {}),
             EXISTS (SELECT 1 FROM job_runs r WHERE {OVERDUE_STOP}),
             EXISTS (SELECT 1 FROM job_definitions WHERE {ENDED_PAUSE}),
             EXISTS (SELECT 1 FROM job_definitions WHERE {DUE_SCHEDULE}),
             ({ANYTHING_DUE_SQL})",
        orphaned_attempt("$2")
    )
}

/// Claim due runs: pick them with `FOR UPDATE OF r SKIP LOCKED` (rows another tick is claiming
/// are passed over, not waited for) and take them in the same statement. Under read committed,
/// a row another tick claimed and committed meanwhile is re-checked against `status = 'pending'`
/// when locked, so it is never taken twice. The overlap rule holds across hosts: a `forbid`
/// schedule's oldest due run is the only one of it that may be taken, and two ticks cannot both
/// lock it; two ticks whose snapshots differ on which run is the oldest, or on whether one is
/// running, are held apart by the unique index on running `forbid` runs (`running_alone`), whose
/// refusal `claim_where` answers by claiming again.
///
/// The due runs are read in the order of their index and the reading stops at the `LIMIT`,
/// whatever the backlog. Their schedule is asked about in a subquery for each run, not joined:
/// a join let the planner, when its estimates were low, hash the schedules, read every due run
/// and sort them (see `connect::Plans::Indexed`).
const CLAIM_SQL: &str = "
WITH picked AS (
    SELECT r.id
    FROM job_runs r
    WHERE r.status = 'pending' AND r.run_at <= $3
      {only}
      AND (SELECT d.paused = 0 AND (d.overlap = 'allow' OR (
                -- forbid: nothing of this schedule running, and only its oldest due run
                NOT EXISTS (SELECT 1 FROM job_runs o
                            WHERE o.definition_id = r.definition_id AND o.status = 'running')
                -- nor while the job of a run of it cancelled while running is being stopped
                AND NOT EXISTS (SELECT 1 FROM job_runs c
                                WHERE c.definition_id = r.definition_id AND c.stopping_by IS NOT NULL)
                AND r.id = (SELECT p.id FROM job_runs p
                            WHERE p.definition_id = r.definition_id AND p.status = 'pending' AND p.run_at <= $3
                            ORDER BY p.run_at, p.id LIMIT 1)))
           FROM job_definitions d WHERE d.id = r.definition_id)
    ORDER BY r.run_at, r.id
    LIMIT $4
    FOR UPDATE OF r SKIP LOCKED
), claimed AS (
    UPDATE job_runs AS r
    SET status = 'running',
        owner = $1,
        lease_token = replace(gen_random_uuid()::text, '-', ''),
        lease_expires_at = $2,
        heartbeat_at = $3,
        attempt = r.attempt + 1,
        started_at = coalesce(r.started_at, $3),
        running_alone = CASE d.overlap WHEN 'forbid' THEN 1 END
    FROM picked, job_definitions d
    WHERE r.id = picked.id AND d.id = r.definition_id AND r.status = 'pending'
    RETURNING r.id, r.definition_id, d.name, r.attempt, r.max_attempts, r.scheduled_for, r.command, r.workdir,
              r.timeout_secs, r.backoff_base_secs, r.backoff_max_secs, r.idempotency_key, r.lease_token, r.leftovers
), attempts AS (
    INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, runner_start_time, lease_token, started_at,
                              definition_id)
    SELECT id, attempt, $1, $5, $6, $7, lease_token, $3, definition_id FROM claimed ORDER BY id
), events AS (
    INSERT INTO job_events (run_id, at, kind, actor, detail)
    SELECT id, $3, $8, $1, $9::text || attempt || $10::text FROM claimed ORDER BY id
)
SELECT due.more, c.*
FROM (SELECT set_config('synchronous_commit', 'off', true) AS deferred,
             -- Runs held by a paused schedule are not due work: a tick must not keep claiming
             -- for them. The statement's snapshot still sees the runs it claims as pending; in
             -- due order (the claim's index), they come first and are passed over.
             (SELECT r.id FROM job_runs r
              WHERE r.status = 'pending' AND r.run_at <= $3
                AND (SELECT d.paused = 0 FROM job_definitions d WHERE d.id = r.definition_id)
                AND r.id NOT IN (SELECT id FROM claimed)
              ORDER BY r.run_at, r.id LIMIT 1) IS NOT NULL AS more) due
LEFT JOIN claimed c ON true";

/// How many times a claim is made again after the one-running-`forbid`-run index refused it.
const CLAIM_TRIES: u32 = 3;

/// The claim would have started a second running run of a `forbid` schedule (refused by the
/// unique index `job_runs_running_by_definition`).
fn second_forbid_run(error: &postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| {
        *db.code() == postgres::error::SqlState::UNIQUE_VIOLATION
            && db.constraint() == Some("job_runs_running_by_definition")
    })
}

/// `NewEvent::claimed`'s detail for `host`, split around the attempt number, so the claim's
/// statement can write it for attempts it numbers itself (`prefix || attempt || suffix`).
fn claimed_detail(host: &str) -> (String, String) {
    const SENTINEL: u32 = u32::MAX;
    let detail = NewEvent::claimed(SENTINEL, host).detail.to_string();
    // Quotes inside a JSON string are escaped, so this key can only be the attempt's own.
    let key = format!("\"attempt\":{SENTINEL}");
    let at = detail
        .find(&key)
        .expect("the claimed event's detail holds its attempt");
    let prefix = detail[..at + key.len() - SENTINEL.to_string().len()].to_string();
    (prefix, detail[at + key.len()..].to_string())
}

/// `Store::record_starts` in one statement: each start's lease is extended if it is still held
/// under its token and unexpired at `$7` (see the SQLite backend), and its attempt's process
/// recorded only then; returns the runs whose start landed (both written). The attempt update
/// reads `held`, so it runs after every lease is checked.
const RECORD_STARTS_SQL: &str = "
WITH s AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])
        AS s(run_id, lease_token, attempt, child_pid, child_start_time)
), held AS (
    UPDATE job_runs r SET lease_expires_at = $6, heartbeat_at = $7
    FROM s
    WHERE r.id = s.run_id AND r.lease_token = s.lease_token AND r.status = 'running'
      AND r.lease_expires_at >= $7
    RETURNING r.id
), recorded AS (
    UPDATE job_attempts a SET child_pid = s.child_pid, child_start_time = s.child_start_time
    FROM s JOIN held ON held.id = s.run_id
    WHERE a.run_id = s.run_id AND a.attempt = s.attempt AND a.lease_token = s.lease_token
      AND a.finished_at IS NULL
    RETURNING a.run_id
)
SELECT ARRAY(SELECT run_id FROM recorded)";

/// The open attempt of a run, with what identifies its processes and its runner.
const ATTEMPT_HOLDER: &str = "
SELECT a.run_id, a.attempt, a.lease_token, a.host, a.runner_pid, a.runner_start_time, a.child_pid,
       a.child_start_time, a.started_at
FROM job_attempts a";

fn attempt_holder_from_row(row: &Row, first: usize) -> Result<AttemptHolder> {
    Ok(AttemptHolder {
        run_id: row.try_get(first)?,
        attempt: u32_at(row, first + 1)?,
        lease_token: token_at(row, first + 2)?,
        host: row.try_get(first + 3)?,
        runner_pid: u32_at(row, first + 4)?,
        runner_start_time: opt_u64_at(row, first + 5)?,
        child_pid: opt_u32_at(row, first + 6)?,
        child_start_time: opt_u64_at(row, first + 7)?,
        started_at: row.try_get(first + 8)?,
    })
}

/// The attempt a LEFT JOIN found for a run from column `first` on, if it found one.
fn joined_attempt_holder(row: &Row, first: usize) -> Result<Option<AttemptHolder>> {
    match row.try_get::<_, Option<i64>>(first)? {
        Some(_) => attempt_holder_from_row(row, first).map(Some),
        None => Ok(None),
    }
}

/// The `history` query for the filters given, with its parameters: only the filters given appear
/// in the WHERE clause, so the planner picks the index that serves them.
fn history_query(filter: &RunFilter) -> (String, Vec<Box<dyn ToSql + Sync>>) {
    let mut conditions: Vec<String> = Vec::new();
    let mut values: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(filter.limit as i64)];
    if let Some(id) = filter.definition_id {
        values.push(Box::new(id));
        conditions.push(format!("r.definition_id = ${}", values.len()));
    }
    if let Some(status) = filter.status {
        if status.is_final() {
            // The indexes by status hold finished runs only: saying so lets the planner use them.
            values.push(Box::new(status.as_str().to_string()));
            conditions.push(format!(
                "r.status = ${} AND r.finished_at IS NOT NULL",
                values.len()
            ));
        } else {
            // Pending or running, named literally, so that a generic plan can use its partial
            // index too.
            conditions.push(format!("r.status = '{}'", status.as_str()));
        }
    }
    if let Some(since) = filter.since {
        values.push(Box::new(since));
        conditions.push(format!("r.scheduled_for >= ${}", values.len()));
    }
    let where_clause = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let sql =
        format!("{RUN_VIEW}\n{where_clause}\nORDER BY r.scheduled_for DESC, r.id DESC LIMIT $1");
    (sql, values)
}

/// Every column of the rows `sql` selects, as `Value`s (`runner migrate`).
fn read_rows(tx: &mut Transaction<'_>, table: Table, sql: &str, params: &[i64]) -> Result<Rows> {
    let statement = tx.prepare(sql)?;
    let params: Params = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
    let columns: Vec<String> = statement
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let mut rows = Vec::new();
    for row in tx.query(&statement, &params)? {
        let mut values = Vec::with_capacity(columns.len());
        for (index, column) in statement.columns().iter().enumerate() {
            let ty = column.type_();
            let value = if *ty == Type::INT8 {
                row.try_get::<_, Option<i64>>(index)?.map(Value::Integer)
            } else if *ty == Type::TEXT {
                row.try_get::<_, Option<String>>(index)?.map(Value::Text)
            } else if *ty == Type::BYTEA {
                row.try_get::<_, Option<Vec<u8>>>(index)?.map(Value::Blob)
            } else {
                anyhow::bail!(
                    "{}.{} has type {ty}, which runner does not use; nothing was moved",
                    table.name(),
                    column.name()
                );
            };
            values.push(value.unwrap_or(Value::Null));
        }
        rows.push(values);
    }
    Ok(Rows { columns, rows })
}

/// A migrated value as a parameter of type `ty` (a NULL needs the column's type).
fn migrated_param(value: &Value, ty: &Type) -> Box<dyn ToSql + Sync> {
    match value {
        Value::Null if *ty == Type::TEXT => Box::new(None::<String>),
        Value::Null if *ty == Type::BYTEA => Box::new(None::<Vec<u8>>),
        Value::Null => Box::new(None::<i64>),
        Value::Integer(v) => Box::new(*v),
        Value::Text(v) => Box::new(v.clone()),
        Value::Blob(v) => Box::new(v.clone()),
    }
}

impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn schema(&self) -> SchemaVersions {
        SchemaVersions {
            found: self.found_version,
            current: MIGRATIONS.len() as i64,
        }
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn former_identity(&self) -> Option<String> {
        Some(self.server.identity())
    }

    fn add_definition(
        &mut self,
        name: &str,
        s: &Settings,
        now: i64,
        next_fire_at: Option<i64>,
    ) -> StoreResult<Definition> {
        self.write(|tx| {
            let Some(row) = insert_definition(tx, name, s, now, next_fire_at)? else {
                return Err(Failure::usage(format!(
                    "a schedule named {name:?} already exists; use `runner schedule edit {name}` to change it"
                )));
            };
            definition_from_row(&row).map_err(Failure::database)
        })
    }

    fn update_definition(&mut self, d: &Definition, now: i64) -> StoreResult<()> {
        let changed = self.write(|tx| rewrite_definition(tx, d, now, None))?;
        if changed == 0 {
            return Err(
                Failure::not_found(format!("schedule {:?} no longer exists", d.name)).into(),
            );
        }
        Ok(())
    }

    fn apply_definitions(&mut self, changes: &DefinitionChanges, now: i64) -> StoreResult<Applied> {
        self.write(|tx| {
            // A savepoint: a refusal rolls back whatever came before it, and the (empty)
            // transaction around it commits.
            let mut all = tx.transaction()?;
            for name in &changes.remove {
                let Some((id, running)) = lock_for_removal(&mut all, name)? else {
                    return Ok(Applied::Conflict(name.clone()));
                };
                if !running.is_empty() {
                    return Ok(Applied::Running(name.clone()));
                }
                all.execute("DELETE FROM job_definitions WHERE id = $1", &[&id])?;
            }
            for d in &changes.update {
                if rewrite_definition(&mut all, d, now, Some(d.revision))? == 0 {
                    return Ok(Applied::Conflict(d.name.clone()));
                }
            }
            for (name, settings, next_fire_at) in &changes.add {
                if insert_definition(&mut all, name, settings, now, *next_fire_at)?.is_none() {
                    return Ok(Applied::Conflict(name.clone()));
                }
            }
            all.commit()?;
            Ok(Applied::Done)
        })
    }

    fn remove_definition(&mut self, name: &str) -> StoreResult<Removal> {
        self.write(|tx| {
            let Some((id, running)) = lock_for_removal(tx, name)? else {
                return Ok(Removal::NotFound);
            };
            if !running.is_empty() {
                return Ok(Removal::Running(running));
            }
            tx.execute("DELETE FROM job_definitions WHERE id = $1", &[&id])?;
            Ok(Removal::Removed)
        })
    }

    fn definition(&self, name: &str) -> StoreResult<Option<DefinitionRow>> {
        self.read(|client| {
            Ok(client
                .query_opt(
                    &format!("SELECT {DEFINITION_COLUMNS} FROM job_definitions WHERE name = $1"),
                    &[&name],
                )?
                .map(|row| definition_from_row(&row)))
        })
    }

    fn definitions(&self) -> StoreResult<Vec<DefinitionRow>> {
        self.read(|client| {
            Ok(client
                .query(
                    &format!("SELECT {DEFINITION_COLUMNS} FROM job_definitions ORDER BY name, id"),
                    &[],
                )?
                .iter()
                .map(definition_from_row)
                .collect())
        })
    }

    fn last_result(&self, definition_id: i64) -> StoreResult<Option<LastResult>> {
        self.read(|client| {
            let row = client.query_opt(
                "SELECT id, status, scheduled_for, error_code FROM job_runs
                 WHERE definition_id = $1 AND status IN ('succeeded', 'dead', 'cancelled', 'skipped')
                   AND finished_at IS NOT NULL
                 ORDER BY scheduled_for DESC, id DESC LIMIT 1",
                &[&definition_id],
            )?;
            row.map(|r| {
                Ok(LastResult {
                    run_id: r.try_get(0)?,
                    status: r.try_get(1)?,
                    scheduled_for: r.try_get(2)?,
                    error_code: r.try_get(3)?,
                })
            })
            .transpose()
        })
    }

    fn record_tick(&mut self, now: i64) -> StoreResult<Option<i64>> {
        self.write_with(Commit::Deferred, |tx| {
            lock_clock_marks(tx)?;
            let high_water: Option<i64> = tx.query_one(CLOCK_HIGH_WATER, &[])?.try_get(0)?;
            tx.execute(
                "INSERT INTO runner_state (key, value) VALUES ('last_tick_at', $1), ('clock_high_water', $2)
                 ON CONFLICT (key) DO UPDATE SET value = CASE runner_state.key
                     WHEN 'clock_high_water' THEN greatest(runner_state.value, excluded.value)
                     ELSE excluded.value END",
                &[&now, &high_water.map_or(now, |high| high.max(now))],
            )?;
            Ok(high_water)
        })
    }

    fn due_definitions(&self, now: i64, limit: Option<usize>) -> StoreResult<Vec<DefinitionRow>> {
        // Each row is read as it arrives, not all rows first: with 100,000 due schedules, the
        // rows held at once were most of the tick's memory (122 MB).
        self.read(|client| {
            // LIMIT NULL is none.
            let limit = limit.map(|n| n as i64);
            let params: [&(dyn ToSql + Sync); 2] = [&now, &limit];
            let mut rows = client.query_raw(&due_definitions_query(), params)?;
            let mut due = Vec::new();
            while let Some(row) = rows.next()? {
                due.push(definition_from_row(&row));
            }
            Ok(due)
        })
    }

    fn due_reader(&self, now: i64, read: HashSet<i64>) -> StoreResult<Option<Box<dyn DueReader>>> {
        let reader = PostgresDueReader::open(self, now, read).map_err(|e| self.classify(e))?;
        Ok(Some(Box::new(reader)))
    }

    fn ended_pauses(&self, now: i64) -> StoreResult<Vec<DefinitionRow>> {
        // Served by `job_definitions_pause_ends`.
        self.read(|client| {
            Ok(client
                .query(
                    &format!(
                        "SELECT {DEFINITION_COLUMNS} FROM job_definitions
                         WHERE {ENDED_PAUSE}
                         ORDER BY paused_until, id"
                    ),
                    &[&now],
                )?
                .iter()
                .map(definition_from_row)
                .collect())
        })
    }

    fn materialize(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        plan: &mut dyn FnMut(Option<i64>) -> Vec<NewRun>,
    ) -> StoreResult<usize> {
        let inserted = self.write_with(Commit::Deferred, |tx| {
            materialize_all(tx, &[cursor], now, actor, &mut |_, running| plan(running))
        })?;
        Ok(inserted.into_iter().sum())
    }

    fn materialize_together(
        &mut self,
        batch: &mut [Materialization],
        now: i64,
        actor: &Actor,
        locks: RowLocks,
    ) -> StoreResult<Vec<Option<usize>>> {
        let cursors: Vec<CursorMove> = batch.iter().map(|m| m.cursor).collect();
        self.write_with(Commit::Deferred, |tx| {
            let mut plan = |i: usize, running| (batch[i].plan)(running);
            match locks {
                RowLocks::Wait => Ok(materialize_all(tx, &cursors, now, actor, &mut plan)?
                    .into_iter()
                    .map(Some)
                    .collect()),
                RowLocks::PassOver => materialize_unheld(tx, &cursors, now, actor, &mut plan),
            }
        })
    }

    fn expired_leases(&self, now: i64, limit: usize) -> StoreResult<Vec<ExpiredLease>> {
        self.read(|client| {
            client
                .query(
                    &format!(
                        "SELECT r.id, d.name, r.attempt, r.max_attempts, r.lease_token,
                                r.lease_expires_at, r.backoff_base_secs, r.backoff_max_secs,
                                a.run_id, a.attempt, a.lease_token, a.host, a.runner_pid,
                                a.runner_start_time, a.child_pid, a.child_start_time, a.started_at
                         FROM job_runs r
                         JOIN job_definitions d ON d.id = r.definition_id
                         LEFT JOIN job_attempts a ON a.run_id = r.id AND a.attempt = r.attempt
                         WHERE {EXPIRED_LEASE}
                         ORDER BY r.lease_expires_at
                         LIMIT $2"
                    ),
                    &[&now, &(limit as i64)],
                )?
                .iter()
                .map(|r| {
                    Ok(ExpiredLease {
                        run_id: r.try_get(0)?,
                        job_name: r.try_get(1)?,
                        attempt: u32_at(r, 2)?,
                        retry: RetryPolicy::from_secs(u32_at(r, 3)?, r.try_get(6)?, r.try_get(7)?),
                        lease_token: token_at(r, 4)?,
                        lease_expires_at: r.try_get(5)?,
                        holder: joined_attempt_holder(r, 8)?,
                    })
                })
                .collect()
        })
    }

    fn claim(
        &mut self,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
    ) -> StoreResult<Claimed> {
        self.claim_where(None, actor, now, lease_secs, batch)
    }

    fn anything_due(&self, now: i64) -> StoreResult<bool> {
        self.read(|client| {
            let due = prepared(client, ANYTHING_DUE_SQL)?;
            Ok(client.query_one(&due, &[&now])?.try_get(0)?)
        })
    }

    fn pending_work(&self, now: i64, host: &str) -> StoreResult<PendingWork> {
        self.read(|client| {
            let look = prepared(client, &pending_work_query())?;
            let row = client.query_one(&look, &[&now, &host])?;
            Ok(PendingWork {
                expired_leases: row.try_get(0)?,
                orphaned_attempts: row.try_get(1)?,
                overdue_stops: row.try_get(2)?,
                ended_pauses: row.try_get(3)?,
                due_schedules: row.try_get(4)?,
                due_runs: row.try_get(5)?,
            })
        })
    }

    fn claim_run(
        &mut self,
        run_id: i64,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
    ) -> StoreResult<Option<ClaimedRun>> {
        let claimed = self.claim_where(Some(run_id), actor, now, lease_secs, 1)?;
        Ok(claimed.runs.into_iter().next())
    }

    fn record_starts(
        &mut self,
        starts: &[StartRecord],
        now: i64,
        lease_expires_at: i64,
    ) -> StoreResult<Vec<Fenced>> {
        if starts.is_empty() {
            return Ok(Vec::new());
        }
        let run_ids: Vec<i64> = starts.iter().map(|s| s.run_id).collect();
        let tokens: Vec<&str> = starts.iter().map(|s| s.lease_token.as_str()).collect();
        let attempts: Vec<i64> = starts.iter().map(|s| i64::from(s.attempt)).collect();
        let pids: Vec<i64> = starts.iter().map(|s| i64::from(s.child_pid)).collect();
        let start_times: Vec<Option<i64>> = starts
            .iter()
            .map(|s| s.child_start_time.map(|t| t as i64))
            .collect();
        // One statement, so one implicit transaction: committed synchronously, in one round
        // trip whatever the number of starts.
        let recorded: Vec<i64> = self.read(|client| {
            let row = query_one_prepared(
                client,
                RECORD_STARTS_SQL,
                &[
                    &run_ids,
                    &tokens,
                    &attempts,
                    &pids,
                    &start_times,
                    &lease_expires_at,
                    &now,
                ],
            )?;
            Ok(row.try_get(0)?)
        })?;
        let landed: Vec<Fenced> = run_ids
            .iter()
            .map(|id| Fenced::landed_if(recorded.contains(id)))
            .collect();
        // Synchronous: every asynchronous commit before it is flushed too, if it wrote (a
        // transaction that changed nothing has no commit record to flush up to).
        if !recorded.is_empty() {
            self.unsynced.set(false);
        }
        Ok(landed)
    }

    fn give_back(
        &mut self,
        claims: &[GivenBack],
        now: i64,
        actor: &Actor,
    ) -> StoreResult<Vec<Fenced>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        // Rare (a tick that ran out of open files): a statement per write, in one transaction,
        // committed synchronously.
        let landed = self.write(|tx| {
            let back = prepared(
                tx,
                "UPDATE job_runs SET status = 'pending', owner = NULL, lease_token = NULL,
                     lease_expires_at = NULL, heartbeat_at = NULL, running_alone = NULL,
                     attempt = attempt - 1,
                     started_at = CASE WHEN attempt = 1 THEN NULL ELSE started_at END
                 WHERE id = $1 AND lease_token = $2 AND status = 'running' AND attempt = $3",
            )?;
            let unopened = prepared(
                tx,
                "DELETE FROM job_attempts
                 WHERE run_id = $1 AND attempt = $2 AND lease_token = $3 AND finished_at IS NULL",
            )?;
            let mut landed = Vec::with_capacity(claims.len());
            for claim in claims {
                let (token, attempt) = (claim.lease_token.as_str(), i64::from(claim.attempt));
                if tx.execute(&back, &[&claim.run_id, &token, &attempt])? == 1 {
                    tx.execute(&unopened, &[&claim.run_id, &attempt, &token])?;
                    insert_event(tx, claim.run_id, now, actor, &claim.event)?;
                    landed.push(Fenced::Applied);
                } else {
                    landed.push(Fenced::LeaseLost);
                }
            }
            Ok(landed)
        })?;
        // Synchronous: every asynchronous commit before it is flushed too, if it wrote.
        if landed.contains(&Fenced::Applied) {
            self.unsynced.set(false);
        }
        Ok(landed)
    }

    fn heartbeat(
        &mut self,
        tokens: &[LeaseToken],
        now: i64,
        lease_expires_at: i64,
    ) -> StoreResult<Vec<Fenced>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<&str> = tokens.iter().map(LeaseToken::as_str).collect();
        let held: Vec<String> = self.write(|tx| {
            tx.query(
                "UPDATE job_runs SET lease_expires_at = $1, heartbeat_at = $2
                 WHERE status = 'running' AND lease_token = ANY($3) RETURNING lease_token",
                &[&lease_expires_at, &now, &texts],
            )?
            .iter()
            .map(|r| Ok(r.try_get(0)?))
            .collect()
        })?;
        Ok(texts
            .iter()
            .map(|token| Fenced::landed_if(held.iter().any(|h| h == token)))
            .collect())
    }

    fn finish_attempts(
        &mut self,
        ends: &[AttemptEnd],
        actor: &Actor,
        commit: Commit,
    ) -> StoreResult<Vec<Fenced>> {
        if ends.is_empty() {
            return Ok(Vec::new());
        }
        // The usual group (every lease held, nobody dead, no recovery) in one statement, one
        // round trip; anything else, or a group that statement leaves alone, end by end in one
        // transaction.
        let distinct: std::collections::HashSet<i64> =
            ends.iter().map(|end| end.result.run_id).collect();
        let usual = |end: &AttemptEnd| !end.counts_dead && end.result.lease_expired_at.is_none();
        if distinct.len() == ends.len() && ends.iter().all(usual) {
            if commit == Commit::Deferred {
                self.unsynced.set(true);
            }
            if self.read(|client| finish_all(client, ends, actor, commit))? {
                return Ok(vec![Fenced::Applied; ends.len()]);
            }
        }
        self.write_with(commit, |tx| {
            lock_dead_schedules(tx, ends)?;
            ends.iter().map(|end| finish_in(tx, end, actor)).collect()
        })
    }

    fn sync(&mut self) -> StoreResult<()> {
        if !self.unsynced.get() {
            return Ok(());
        }
        // A transaction with an id writes a commit record, and a synchronous commit flushes the
        // WAL up to it: every asynchronous commit before it included.
        self.write(|tx| {
            tx.query_one("SELECT txid_current()", &[])?;
            Ok(())
        })?;
        self.unsynced.set(false);
        Ok(())
    }

    fn open_attempt(&self, run_id: i64, attempt: u32) -> StoreResult<Option<AttemptHolder>> {
        self.read(|client| {
            client
                .query_opt(
                    &format!(
                        "{ATTEMPT_HOLDER}
                         WHERE a.run_id = $1 AND a.attempt = $2 AND a.finished_at IS NULL"
                    ),
                    &[&run_id, &i64::from(attempt)],
                )?
                .map(|r| attempt_holder_from_row(&r, 0))
                .transpose()
        })
    }

    fn orphaned_attempts(&self, host: &str, limit: usize) -> StoreResult<Vec<AttemptHolder>> {
        self.read(|client| {
            client
                .query(
                    &format!(
                        "{ATTEMPT_HOLDER}
                         JOIN job_runs r ON r.id = a.run_id
                         WHERE {}
                         ORDER BY a.id LIMIT $2",
                        orphaned_attempt("$1")
                    ),
                    &[&host, &(limit as i64)],
                )?
                .iter()
                .map(|r| attempt_holder_from_row(r, 0))
                .collect()
        })
    }

    fn overdue_stops(&self, now: i64, limit: usize) -> StoreResult<Vec<OverdueStop>> {
        self.read(|client| {
            let rows = client
                .query(
                    &format!(
                        "SELECT r.id, r.stopping_by,
                                a.run_id, a.attempt, a.lease_token, a.host, a.runner_pid,
                                a.runner_start_time, a.child_pid, a.child_start_time, a.started_at
                         FROM (SELECT r.id, r.stopping_by FROM job_runs r
                               WHERE {OVERDUE_STOP}
                               ORDER BY r.stopping_by, r.id
                               LIMIT $2) r
                         LEFT JOIN job_attempts a ON a.run_id = r.id AND a.finished_at IS NULL
                         ORDER BY r.stopping_by, r.id, a.attempt"
                    ),
                    &[&now, &(limit as i64)],
                )?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, joined_attempt_holder(r, 2)?)))
                .collect::<Result<Vec<_>>>()?;
            Ok(super::overdue_stops_of(rows))
        })
    }

    fn release_stop(&mut self, run_id: i64, host: &str) -> StoreResult<()> {
        self.write(|tx| {
            tx.execute(&super::job_stopped_sql("$1", Some("$2")), &[&run_id, &host])?;
            Ok(())
        })
    }

    fn close_orphaned_attempt(
        &mut self,
        holder: &AttemptHolder,
        now: i64,
        close: &OrphanClose,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.write(|tx| {
            lock_run(tx, holder.run_id)?;
            close_orphan_in(tx, holder, now, close, actor)
        })
    }

    fn close_never_started(
        &mut self,
        end: &AttemptEnd,
        holder: &AttemptHolder,
        closes: &NeverStartedCloses,
        actor: &Actor,
    ) -> StoreResult<Fenced> {
        self.write_with(Commit::Durable, |tx| {
            // The schedule before the run, as every end that may count a dead run locks them.
            lock_dead_schedules(tx, std::slice::from_ref(end))?;
            // Locked: no cancel or recovery lands between this look and the write.
            let run = tx.query_opt(
                "SELECT status, attempt, lease_token FROM job_runs WHERE id = $1 FOR UPDATE",
                &[&holder.run_id],
            )?;
            let Some(run) = run else {
                return Ok(Fenced::LeaseLost);
            };
            let held: Option<String> = run.try_get(2)?;
            let decision = closes.decide(
                holder,
                status_at(&run, 0)?,
                u32_at(&run, 1)?,
                held.as_deref(),
            );
            match decision {
                NeverStartedClose::Finish => finish_in(tx, end, actor),
                NeverStartedClose::Orphan(close) => {
                    close_orphan_in(tx, holder, end.result.finished_at, close, actor)?;
                    Ok(Fenced::LeaseLost)
                }
            }
        })
    }

    fn enqueue(
        &mut self,
        definition_id: i64,
        run: &NewRun,
        now: i64,
        actor: &Actor,
    ) -> StoreResult<i64> {
        self.write(|tx| {
            let inserted = insert_runs(tx, &[(definition_id, run)], now, actor)?;
            let run_id = inserted.get(&run.idempotency_key).copied().ok_or_else(|| {
                anyhow::anyhow!(
                    "the schedule of run {} was removed meanwhile",
                    run.idempotency_key
                )
            })?;
            Ok(run_id)
        })
    }

    fn reanchor_definition(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        record: &dyn Fn(&RunAfterCursor) -> Option<NewRun>,
    ) -> StoreResult<Option<Reanchored>> {
        self.write(|tx| {
            let moved = tx.execute(
                "UPDATE job_definitions SET materialized_through = $4, next_fire_at = $5, updated_at = $6,
                     revision = revision + 1
                 WHERE id = $1 AND materialized_through = $2 AND revision = $3",
                &[
                    &cursor.definition_id,
                    &cursor.expected_through,
                    &cursor.expected_revision,
                    &cursor.new_through,
                    &cursor.next_fire_at,
                    &now,
                ],
            )?;
            if moved == 0 {
                return Ok(None);
            }
            let first_after = tx
                .query_opt(
                    FIRST_RUN_AFTER,
                    &[&cursor.definition_id, &cursor.new_through],
                )?
                .map(|row| run_after_from_row(&row))
                .transpose()?;
            let to_record = first_after.as_ref().and_then(record);
            let skips_forgotten = tx.execute(
                "DELETE FROM job_runs
                 WHERE definition_id = $1 AND trigger = 'schedule' AND status = 'skipped' AND scheduled_for > $2",
                &[&cursor.definition_id, &cursor.new_through],
            )?;
            let runs_kept: i64 = tx
                .query_one(
                    "SELECT count(*) FROM job_runs
                     WHERE definition_id = $1 AND trigger = 'schedule' AND scheduled_for > $2",
                    &[&cursor.definition_id, &cursor.new_through],
                )?
                .try_get(0)?;
            let recorded = match to_record {
                Some(run) => {
                    let inserted = insert_runs(tx, &[(cursor.definition_id, &run)], now, actor)?;
                    // Not inserted: its instant has a run already, which tells of it.
                    inserted.contains_key(&run.idempotency_key).then_some(run)
                }
                None => None,
            };
            Ok(Some(Reanchored {
                skips_forgotten,
                runs_kept: runs_kept as u64,
                recorded,
            }))
        })
    }

    fn lower_clock_high_water(&mut self, now: i64) -> StoreResult<Option<i64>> {
        self.write(|tx| {
            lock_clock_marks(tx)?;
            let high_water: Option<i64> = tx.query_one(CLOCK_HIGH_WATER, &[])?.try_get(0)?;
            Ok(match high_water {
                Some(high) if high > now => {
                    tx.execute(
                        "INSERT INTO runner_state (key, value) VALUES ('clock_high_water', $1)
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        &[&now],
                    )?;
                    Some(high)
                }
                _ => None,
            })
        })
    }

    fn history(&self, filter: &RunFilter) -> StoreResult<Vec<RunView>> {
        let (sql, values) = history_query(filter);
        let params: Params<'_> = values.iter().map(|v| v.as_ref()).collect();
        self.read(|client| {
            client
                .query(&sql, &params)?
                .iter()
                .map(run_view_from_row)
                .collect()
        })
    }

    fn run(&self, run_id: i64) -> StoreResult<Option<RunView>> {
        self.read(|client| {
            client
                .query_opt(&format!("{RUN_VIEW}\nWHERE r.id = $1"), &[&run_id])?
                .map(|r| run_view_from_row(&r))
                .transpose()
        })
    }

    fn runs_at_instants(&self, definition_id: i64, instants: &[i64]) -> StoreResult<Vec<RunView>> {
        let sql = format!("{RUN_VIEW}\n{RUNS_AT_INSTANTS}");
        self.read(|client| {
            client
                .query(&sql, &[&definition_id, &instants])?
                .iter()
                .map(run_view_from_row)
                .collect()
        })
    }

    fn first_run_after(
        &self,
        definition_id: i64,
        instant: i64,
    ) -> StoreResult<Option<RunAfterCursor>> {
        self.read(|client| {
            client
                .query_opt(FIRST_RUN_AFTER, &[&definition_id, &instant])?
                .map(|row| run_after_from_row(&row))
                .transpose()
        })
    }

    fn recorded_instants(
        &self,
        definition_id: i64,
        through: i64,
        limit: usize,
    ) -> StoreResult<Vec<i64>> {
        let limit = limit as i64;
        self.read(|client| {
            client
                .query(RECORDED_INSTANTS, &[&definition_id, &through, &limit])?
                .iter()
                .map(|r| Ok(r.try_get(0)?))
                .collect()
        })
    }

    fn write_denied(&self) -> StoreResult<Option<WriteDenied>> {
        // One privilege at a time: `has_table_privilege` with a list is true if any is held.
        const DENIED: &str = "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
                    ARRAY(SELECT t FROM unnest($1::text[]) t
                          WHERE CASE WHEN to_regclass(t) IS NULL THEN false
                                ELSE NOT (has_table_privilege(t, 'SELECT') AND has_table_privilege(t, 'INSERT')
                                          AND has_table_privilege(t, 'UPDATE') AND has_table_privilege(t, 'DELETE'))
                                END
                          ORDER BY t)";
        let tables = created_tables();
        let (recovery, read_only, lacking): (bool, bool, Vec<String>) = self.read(|client| {
            let row = client.query_one(DENIED, &[&tables])?;
            Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        })?;
        Ok(if recovery {
            Some(WriteDenied::Standby)
        } else if read_only {
            Some(WriteDenied::ReadOnlySessions)
        } else if !lacking.is_empty() {
            Some(WriteDenied::Privileges(lacking))
        } else {
            None
        })
    }

    fn stopping_runs(&self, definition_id: i64) -> StoreResult<Vec<StoppingView>> {
        self.read(|client| stopping_runs(client, Some(definition_id), RUNNING_LISTED))
    }

    fn last_tick_at(&self) -> StoreResult<Option<i64>> {
        self.read(|client| {
            Ok(client
                .query_opt(LAST_TICK_AT, &[])?
                .map(|r| r.try_get(0))
                .transpose()?)
        })
    }

    fn attempts(&self, run_id: i64) -> StoreResult<Vec<AttemptView>> {
        self.read(|client| {
            client
                .query(
                    "SELECT attempt, owner, host, runner_pid, child_pid, started_at, finished_at, duration_ms,
                            outcome, exit_code, error_code, error_detail, stdout_tail, stderr_tail, stdout_bytes,
                            stderr_bytes
                     FROM job_attempts WHERE run_id = $1 ORDER BY attempt",
                    &[&run_id],
                )?
                .iter()
                .map(|r| {
                    Ok(AttemptView {
                        attempt: u32_at(r, 0)?,
                        owner: r.try_get(1)?,
                        host: r.try_get(2)?,
                        runner_pid: u32_at(r, 3)?,
                        child_pid: opt_u32_at(r, 4)?,
                        started_at: r.try_get(5)?,
                        finished_at: r.try_get(6)?,
                        duration_ms: r.try_get(7)?,
                        outcome: r.try_get(8)?,
                        exit_code: opt_i32_at(r, 9)?,
                        error_code: r.try_get(10)?,
                        error_detail: r.try_get(11)?,
                        stdout_tail: r.try_get(12)?,
                        stderr_tail: r.try_get(13)?,
                        stdout_bytes: r.try_get(14)?,
                        stderr_bytes: r.try_get(15)?,
                    })
                })
                .collect()
        })
    }

    fn events(&self, run_id: i64) -> StoreResult<Vec<EventView>> {
        self.read(|client| {
            client
                .query(
                    "SELECT at, kind, actor, detail FROM job_events WHERE run_id = $1 ORDER BY id",
                    &[&run_id],
                )?
                .iter()
                .map(|r| {
                    Ok(EventView {
                        at: r.try_get(0)?,
                        kind: r.try_get(1)?,
                        actor: r.try_get(2)?,
                        detail: r.try_get(3)?,
                    })
                })
                .collect()
        })
    }

    fn health(&self, now: i64, recent_since: i64) -> StoreResult<Health> {
        self.snapshot(|tx| {
            let mut counts: Vec<(RunStatus, i64)> =
                RunStatus::ALL.iter().map(|s| (*s, 0)).collect();
            for row in tx.query(COUNT_RUNS_BY_STATUS, &[])? {
                let status = status_at(&row, 0)?;
                if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
                    entry.1 = row.try_get(1)?;
                }
            }

            let oldest_due = tx
                .query_opt(OLDEST_DUE, &[&now])?
                .map(|r| run_brief_from_row(&r))
                .transpose()?;
            let held_by_pause: i64 = tx.query_one(HELD_BY_PAUSE, &[])?.try_get(0)?;

            let running = tx
                .query(RUNNING_RUNS, &[&(RUNNING_LISTED as i64)])?
                .iter()
                .map(|r| {
                    let c = RUN_BRIEF_COLUMNS;
                    Ok(RunningView {
                        run: run_brief_from_row(r)?,
                        owner: r.try_get(c)?,
                        host: r.try_get(c + 1)?,
                        attempt_started_at: r.try_get(c + 2)?,
                        heartbeat_at: r.try_get(c + 3)?,
                        lease_expires_at: r.try_get(c + 4)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;

            let expired_leases: i64 = tx.query_one(COUNT_EXPIRED_LEASES, &[&now])?.try_get(0)?;
            let stopping = stopping_runs(tx, None, RUNNING_LISTED)?;

            let retries_in_flight = tx
                .query(RETRIES_IN_FLIGHT, &[])?
                .iter()
                .map(|r| Ok((u32_at(r, 0)?, r.try_get(1)?)))
                .collect::<Result<Vec<_>>>()?;

            let top_errors = tx
                .query(TOP_ERRORS, &[&recent_since, &(RECENT_LISTED as i64)])?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<Vec<_>>>()?;

            let dead_rows = tx.query(DEAD_RECENT, &[&recent_since, &(RECENT_LISTED as i64)])?;
            let dead_recent = match dead_rows.first() {
                Some(row) => row.try_get(RUN_BRIEF_COLUMNS)?,
                None => 0,
            };
            let dead_recent_runs = dead_rows
                .iter()
                .map(run_brief_from_row)
                .collect::<Result<Vec<_>>>()?;

            let (mut last_tick_at, mut last_prune_at) = (None, None);
            for row in tx.query(RUNNER_STATE, &[])? {
                let value: i64 = row.try_get(1)?;
                match row.try_get::<_, &str>(0)? {
                    "last_tick_at" => last_tick_at = Some(value),
                    // The automatic turn ('last_prune_at', named before manual prunes were recorded)
                    // or the last `runner prune`, whichever ran later.
                    "last_prune_at" | "last_manual_prune_at" => {
                        last_prune_at = last_prune_at.max(Some(value))
                    }
                    _ => {}
                }
            }

            let clock_high_water: Option<i64> = tx.query_one(CLOCK_HIGH_WATER, &[])?.try_get(0)?;

            let oldest_run = tx
                .query_opt(OLDEST_RUN, &[])?
                .map(|r| run_brief_from_row(&r))
                .transpose()?;

            let database_bytes: i64 = tx.query_one(STORAGE_BYTES, &[])?.try_get(0)?;
            let storage = Storage {
                database_bytes: database_bytes.max(0) as u64,
                wal_bytes: None,
            };

            Ok(Health {
                counts,
                oldest_due,
                held_by_pause,
                running,
                expired_leases,
                stopping,
                retries_in_flight,
                top_errors,
                dead_recent,
                dead_recent_runs,
                last_tick_at,
                clock_high_water,
                last_prune_at,
                oldest_run,
                storage,
            })
        })
    }

    fn attempt_durations(&self, since: i64) -> StoreResult<Vec<(i64, i64)>> {
        self.read(|client| {
            client
                .query(ATTEMPT_DURATIONS, &[&since])?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect()
        })
    }

    fn job_run_stats(&self) -> StoreResult<Vec<JobRunStats>> {
        // The runs are counted before the join: joining every run to its schedule first cost
        // 0.49 s at a million runs, this 0.29 s. Byte order of names, as SQLite sorts them.
        self.read(|client| {
            client
                .query(
                    "SELECT d.name, s.status, coalesce(s.runs, 0), s.last_finished_at,
                            d.dead_runs_total, d.pruned_success_at, d.pruned_last_finished_at,
                            d.pruned_last_status
                     FROM job_definitions d
                     LEFT JOIN (SELECT definition_id, status, count(*) AS runs,
                                       max(finished_at) AS last_finished_at
                                FROM job_runs GROUP BY definition_id, status) s
                       ON s.definition_id = d.id
                     ORDER BY d.name COLLATE \"C\", s.status COLLATE \"C\"",
                    &[],
                )?
                .iter()
                .map(|r| {
                    Ok(JobRunStats {
                        job: r.try_get(0)?,
                        status: match r.try_get::<_, Option<String>>(1)? {
                            Some(_) => Some(status_at(r, 1)?),
                            None => None,
                        },
                        runs: r.try_get(2)?,
                        last_finished_at: r.try_get(3)?,
                        dead_runs_total: r.try_get(4)?,
                        pruned_success_at: r.try_get(5)?,
                        pruned_last_run: match r.try_get::<_, Option<i64>>(6)? {
                            Some(at) => LastRun::of(at, status_at(r, 7)?),
                            None => None,
                        },
                    })
                })
                .collect()
        })
    }

    fn steer(
        &mut self,
        run_id: i64,
        request: Steer,
        now: i64,
        actor: &Actor,
    ) -> StoreResult<Steered> {
        self.write(|tx| {
            // Read and change under the row's lock: the state cannot move in between.
            let Some(row) = tx.query_opt(
                "SELECT status, attempt, max_attempts FROM job_runs WHERE id = $1 FOR UPDATE",
                &[&run_id],
            )?
            else {
                return Ok(Steered::NotFound);
            };
            let state = RunState {
                status: status_at(&row, 0)?,
                attempt: u32_at(&row, 1)?,
                max_attempts: u32_at(&row, 2)?,
            };
            let (change, event, steered) = match request.decide(state, now, actor) {
                Steering::Refuse(steered) => return Ok(steered),
                Steering::Apply {
                    change,
                    event,
                    steered,
                } => (change, event, steered),
            };
            let from = state.status.as_str();
            match change {
                RunChange::Requeue {
                    due_at,
                    max_attempts,
                } => tx.execute(
                    "UPDATE job_runs SET status = 'pending', run_at = $3, max_attempts = $4,
                         finished_at = NULL
                     WHERE id = $1 AND status = $2",
                    &[&run_id, &from, &due_at, &i64::from(max_attempts)],
                )?,
                // The CHECK constraints: only a running run holds a lease.
                RunChange::Cancel {
                    at,
                    detail,
                    stop_grace_secs,
                } => tx.execute(
                    "UPDATE job_runs SET status = 'cancelled', finished_at = $3, owner = NULL,
                         lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
                         error_code = $4, error_detail = $5,
                         stopping_by = CASE status WHEN 'running' THEN lease_expires_at + $6 END
                     WHERE id = $1 AND status = $2",
                    &[
                        &run_id,
                        &from,
                        &at,
                        &ErrorCode::Cancelled.to_string(),
                        &detail,
                        &stop_grace_secs,
                    ],
                )?,
            };
            insert_event(tx, run_id, now, actor, &event)?;
            Ok(steered)
        })
    }

    fn migrate_out(
        &mut self,
        with_history: bool,
        now: i64,
        actor: &Actor,
        moved_detail: &str,
        moved_event: &dyn Fn(u32) -> NewEvent,
        write: &mut dyn FnMut(&mut dyn MigrationBatches) -> anyhow::Result<()>,
    ) -> StoreResult<MigratedOut> {
        self.write(|tx| {
            // Reads go on, writes wait until the commit: no tick materialises, claims or
            // finishes anything between the read and the retirement.
            tx.batch_execute(
                "LOCK TABLE job_definitions, job_runs, job_attempts, job_events IN EXCLUSIVE MODE",
            )?;
            let running: Vec<i64> = tx
                .query(
                    "SELECT id FROM job_runs WHERE status = 'running' ORDER BY id",
                    &[],
                )?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if !running.is_empty() {
                return Ok(MigratedOut::Running(running));
            }
            let placeholder = |n| format!("${n}");
            let mut batches =
                BatchReader::new(with_history, placeholder, |table, sql: &str, params| {
                    Ok(read_rows(tx, table, sql, params)?)
                });
            write(&mut batches)?;
            let counts = batches.finish()?;
            // Written elsewhere and committed there: retire everything here, so a tick left
            // running on this database runs none of it.
            tx.execute(
                "UPDATE job_definitions SET paused = 1, paused_until = NULL, revision = revision + 1,
                     updated_at = $1",
                &[&now],
            )?;
            let pending = tx.query(
                "SELECT id, attempt FROM job_runs WHERE status = 'pending' ORDER BY id",
                &[],
            )?;
            for row in pending {
                let run_id: i64 = row.try_get(0)?;
                tx.execute(
                    "UPDATE job_runs SET status = 'cancelled', finished_at = $2, error_code = $3,
                         error_detail = $4
                     WHERE id = $1 AND status = 'pending'",
                    &[
                        &run_id,
                        &now,
                        &ErrorCode::Cancelled.to_string(),
                        &moved_detail,
                    ],
                )?;
                insert_event(tx, run_id, now, actor, &moved_event(u32_at(&row, 1)?))?;
            }
            Ok(MigratedOut::Done(counts))
        })
    }

    fn import_migration(&mut self, batches: &mut dyn MigrationBatches) -> StoreResult<Imported> {
        self.write(|tx| {
            // Ticks of this database go on meanwhile. Should another migration bring the same
            // names at the same moment, the unique name index refuses the second, which rolls back.
            let existing: Vec<String> = tx
                .query("SELECT name FROM job_definitions", &[])?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            let mut statements = std::collections::HashMap::new();
            Ok(super::import_batches(
                batches,
                &existing,
                &mut |table, columns, values| {
                    let statement = match statements.get(&table) {
                        Some(statement) => statement,
                        None => {
                            let sql = super::insert_row_sql(table, columns, |n| format!("${n}"));
                            let statement = tx.prepare(&sql).map_err(anyhow::Error::from)?;
                            statements.entry(table).or_insert(statement)
                        }
                    };
                    let params: Vec<Box<dyn ToSql + Sync>> = values
                        .iter()
                        .zip(statement.params())
                        .map(|(value, ty)| migrated_param(value, ty))
                        .collect();
                    let params: Params = params.iter().map(|p| p.as_ref()).collect();
                    let row = tx
                        .query_one(statement, &params)
                        .map_err(anyhow::Error::from)?;
                    Ok(row.try_get(0).map_err(anyhow::Error::from)?)
                },
            )?)
        })
    }

    fn prunable(&self, cutoff: i64) -> StoreResult<PruneCounts> {
        self.read(|client| {
            let row = client.query_one(
                &format!(
                    "WITH doomed AS ({PRUNABLE_RUNS})
                     SELECT (SELECT count(*) FROM doomed),
                            (SELECT count(*) FROM job_attempts WHERE run_id IN (SELECT id FROM doomed)),
                            (SELECT count(*) FROM job_events WHERE run_id IN (SELECT id FROM doomed))"
                ),
                &[&cutoff],
            )?;
            Ok(PruneCounts {
                runs: row.try_get::<_, i64>(0)? as u64,
                attempts: row.try_get::<_, i64>(1)? as u64,
                events: row.try_get::<_, i64>(2)? as u64,
                left: LeftForLater::default(),
            })
        })
    }

    fn prune_batch(&mut self, cutoff: i64, limit: usize) -> StoreResult<PruneCounts> {
        self.write(|tx| {
            // Each schedule keeps the latest finish of its succeeded runs deleted here, and how
            // the last of its runs that ran ended (for the last-success and last-run metrics; see
            // the SQLite schema's versions 14 and 15), so the schedules of the runs that ran are
            // written too, and locked without waiting: a removal locks a schedule's row,
            // then its runs, the other way round; waiting here for a schedule it holds, while
            // holding the runs it waits for, would be a deadlock. The runs of a schedule locked
            // elsewhere (`busy`) are left for a later prune, and picked again without them. (The
            // lock the update needs, not FOR UPDATE: that would also pass over every schedule a
            // run was just inserted for, whose key is shared.)
            let mut busy: Vec<i64> = Vec::new();
            let ids: Vec<i64> = loop {
                let picked = tx.query(
                    &format!(
                        "{PRUNABLE_RUNS} AND definition_id <> ALL($3)
                         LIMIT $2 FOR UPDATE SKIP LOCKED"
                    ),
                    &[&cutoff, &(limit as i64), &busy],
                )?;
                if picked.is_empty() {
                    // Nothing more to delete now: what is left past the cutoff is the runs of
                    // the busy schedules, for the next prune.
                    return Ok(PruneCounts {
                        left: left_for_later(tx, cutoff, &busy)?,
                        ..PruneCounts::default()
                    });
                }
                crate::tick::test_hook("prune-locked");
                let mut picked: Vec<(i64, i64, bool)> = picked
                    .iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                    .collect::<Result<_, postgres::Error>>()?;
                let mut wanted: Vec<i64> = picked
                    .iter()
                    .filter(|(_, _, ran)| *ran)
                    .map(|(_, schedule, _)| *schedule)
                    .collect();
                wanted.sort_unstable();
                wanted.dedup();
                // In id order: the lock order, and what `is_held` searches.
                let held: Vec<i64> = tx
                    .query(
                        "SELECT id FROM job_definitions WHERE id = ANY($1)
                         ORDER BY id FOR NO KEY UPDATE SKIP LOCKED",
                        &[&wanted],
                    )?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
                let is_held = |schedule: &i64| held.binary_search(schedule).is_ok();
                picked.retain(|(_, schedule, ran)| !ran || is_held(schedule));
                if !picked.is_empty() {
                    break picked.into_iter().map(|(id, _, _)| id).collect();
                }
                // Every run picked is a run that ran of a busy schedule: at least one more.
                busy.extend(wanted.into_iter().filter(|s| !is_held(s)));
            };
            // Counted before the delete: rows removed by ON DELETE CASCADE are not reported by it.
            let counts = tx.query_one(
                "SELECT (SELECT count(*) FROM job_attempts WHERE run_id = ANY($1)),
                        (SELECT count(*) FROM job_events WHERE run_id = ANY($1))",
                &[&ids],
            )?;
            tx.execute(
                "UPDATE job_definitions d SET pruned_success_at = GREATEST(d.pruned_success_at, p.at)
                 FROM (SELECT definition_id, max(finished_at) AS at FROM job_runs
                       WHERE id = ANY($1) AND status = 'succeeded' GROUP BY definition_id) p
                 WHERE d.id = p.definition_id",
                &[&ids],
            )?;
            tx.execute(&super::keep_pruned_last_run_sql("id = ANY($1)"), &[&ids])?;
            let runs = tx.execute("DELETE FROM job_runs WHERE id = ANY($1)", &[&ids])?;
            Ok(PruneCounts {
                runs,
                attempts: counts.try_get::<_, i64>(0)? as u64,
                events: counts.try_get::<_, i64>(1)? as u64,
                left: LeftForLater::default(),
            })
        })
    }

    /// No tally here: PostgreSQL counts runs per status and schedule where they are read. Row
    /// triggers keeping one would make concurrent ticks on several hosts queue (or deadlock) on
    /// the same few counter rows.
    fn claim_tally_fold(
        &mut self,
        _now: i64,
        _every_secs: i64,
        _backlog: i64,
    ) -> StoreResult<Option<i64>> {
        Ok(None)
    }

    fn fold_run_tally_batch(&mut self, _newest: i64, _limit: i64) -> StoreResult<bool> {
        Ok(false)
    }

    fn claim_auto_prune(&mut self, now: i64, every_secs: i64) -> StoreResult<bool> {
        self.write(|tx| {
            // A turn recorded in the future means the clock went back (or --now was used): take it.
            let taken = tx.execute(
                "INSERT INTO runner_state (key, value) VALUES ('last_prune_at', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value
                 WHERE runner_state.value <= excluded.value - $2 OR runner_state.value > excluded.value",
                &[&now, &every_secs],
            )?;
            Ok(taken == 1)
        })
    }

    fn record_manual_prune(&mut self, at: i64) -> StoreResult<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO runner_state (key, value) VALUES ('last_manual_prune_at', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&at],
            )?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::claimed_detail;
    use crate::model::NewEvent;

    #[test]
    fn the_tables_the_migrations_create_are_known() {
        assert_eq!(
            super::created_tables(),
            [
                "job_attempts",
                "job_definitions",
                "job_events",
                "job_runs",
                "runner_state"
            ]
        );
    }

    #[test]
    fn the_claim_writes_the_claimed_event_as_the_model_does() {
        for host in [
            "web-1",
            "a\"attempt\":4294967295",
            "tab\tquote\"back\\slash",
            "é",
        ] {
            let (prefix, suffix) = claimed_detail(host);
            for attempt in [1, 7, 42, u32::MAX] {
                assert_eq!(
                    format!("{prefix}{attempt}{suffix}"),
                    NewEvent::claimed(attempt, host).detail.to_string(),
                    "host {host:?}"
                );
            }
        }
    }
}
