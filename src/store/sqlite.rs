//! The embedded SQLite backend: WAL, `synchronous=FULL`, foreign keys on every connection, a
//! busy timeout, `BEGIN IMMEDIATE` for every write transaction, never `INSERT OR REPLACE`.

use std::collections::HashSet;
use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use rusqlite::types::{FromSql, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{
    named_params, params, CachedStatement, Connection, OpenFlags, OptionalExtension, Row,
    Statement, Transaction, TransactionBehavior,
};

use super::sqlite_files as files;
use super::{definition_row, SETTINGS_COLUMNS};
use super::{
    Applied, AttemptView, BatchReader, Claimed, Commit, CursorMove, DefinitionChanges,
    DefinitionRow, DueReader, EventView, Health, Imported, JobRunStats, LastResult, LeftForLater,
    Materialization, MigratedOut, MigrationBatches, OpenMode, PendingWork, PruneCounts, Reanchored,
    Removal, Result, RowLocks, Rows, RunAfterCursor, RunBrief, RunFilter, RunView, RunningView,
    SchemaVersions, StoppingView, Storage, Store, Table, Value, RECENT_LISTED, RUNNING_LISTED,
};
use crate::backoff::RetryPolicy;
use crate::exit::{Classified, Failure, BUSY, DATABASE};
use crate::model::{
    Actor, AttemptEnd, AttemptHolder, CatchUp, ClaimedRun, ColumnProblem, Definition, ErrorCode,
    ExpiredLease, Fenced, GivenBack, LastRun, LeaseToken, Leftovers, NeverStartedClose,
    NeverStartedCloses, NewEvent, NewRun, OrphanClose, OverdueStop, Overlap, RunChange, RunState,
    RunStatus, Settings, StartRecord, Steer, Steered, Steering,
};

/// A file's application id, schema version (`user_version`) and number of schema objects.
type Header = (i64, i64, i64);

/// `PRAGMA application_id`: marks a file as a runner database ("RUNR").
const APPLICATION_ID: i64 = 0x5255_4E52;
/// Migrations, in order; `PRAGMA user_version` counts how many were applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_init.sql"),
    include_str!("../../migrations/0002_observe.sql"),
    include_str!("../../migrations/0003_containment.sql"),
    include_str!("../../migrations/0004_run_zone.sql"),
    include_str!("../../migrations/0005_pause_until.sql"),
    include_str!("../../migrations/0006_dead_per_job.sql"),
    include_str!("../../migrations/0007_metrics_covering.sql"),
    include_str!("../../migrations/0008_run_tally.sql"),
    include_str!("../../migrations/0009_attempt_schedule.sql"),
    include_str!("../../migrations/0010_finished_indexes.sql"),
    include_str!("../../migrations/0011_undecidable_schedules.sql"),
    include_str!("../../migrations/0012_one_forbid_run.sql"),
    include_str!("../../migrations/0013_status_check_pairs.sql"),
    include_str!("../../migrations/0014_pruned_success.sql"),
    include_str!("../../migrations/0015_pruned_last_run.sql"),
    include_str!("../../migrations/0016_job_stopping.sql"),
    include_str!("../../migrations/0017_timing_changed_at.sql"),
];
/// How long a statement waits for another runner's write lock before giving up (exit 5).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(15);
/// How much each try adds to the longest sleep of the busy handler. A tick holds the write lock
/// for well under a millisecond, so waiters look again soon: with four ticks draining at once,
/// sleeps of 1 ms and more (doubling) kept them waiting for a free lock, about 8% slower than these.
const BUSY_STEP: Duration = Duration::from_micros(200);
const BUSY_MAX_SLEEP: Duration = Duration::from_millis(20);

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// The schema version found on opening, before any migration (0: no schema yet).
    found_version: i64,
    /// What `PRAGMA synchronous` is set to now: FULL for durable commits, NORMAL for deferred.
    synchronous: Commit,
    /// A deferred commit may have come after the last durable one: `sync` has work to do.
    unsynced: bool,
    /// In WAL mode, the WAL file as SQLite names it: the tick's durable commits are made deferred
    /// and then this file is synced, outside the write lock (see `sync_wal`). `None` outside WAL
    /// mode, where a durable commit is a FULL one.
    wal: Option<WalFile>,
    /// What this connection has written so far: decides whether its close checkpoints.
    written: Written,
}

/// What a connection has written, for its close (see `impl Drop for SqliteStore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Nothing,
    /// Only the tick marks (`record_tick`): the last tick's time, the clock's high water.
    TickMarks,
    /// Anything else: runs, results, schedules, a migration.
    More,
}

/// How large a `-wal` holding only tick marks may grow before a close copies it into the
/// database: about an hour of idle ticks (4 KiB pages), so that opening the database, which
/// reads the whole `-wal` when no other connection has it open, stays cheap.
const IDLE_WAL_LIMIT: u64 = 256 * 1024;

/// The `-wal` file of an open WAL database, for `SqliteStore::sync_wal`.
struct WalFile {
    path: PathBuf,
    /// Its directory entry was synced (once per process: the file may be new).
    directory_synced: bool,
}

/// SQLite errors leave the store classified: the exit code they mean and the user's next step.
impl From<rusqlite::Error> for super::Error {
    fn from(error: rusqlite::Error) -> super::Error {
        sql_error(error).into()
    }
}

/// A SQLite error as `anyhow::Error`, classified (see `exit::Classified`).
fn sql_error(error: rusqlite::Error) -> anyhow::Error {
    use rusqlite::ErrorCode as C;
    let (code, hint) = match error.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => (
            Some(BUSY),
            Some("the database stayed locked by another process beyond the wait limit; it is safe to retry"),
        ),
        Some(C::NotADatabase | C::DatabaseCorrupt) => (
            Some(DATABASE),
            Some("the file is not a SQLite database or is corrupt; restore it from a backup or point --db elsewhere"),
        ),
        Some(C::ReadOnly | C::PermissionDenied | C::CannotOpen) => (
            Some(DATABASE),
            Some("check that the database file and its directory are writable by this user"),
        ),
        Some(C::DiskFull) => (
            None,
            Some("the disk is full; free space and run again (nothing was committed)"),
        ),
        Some(C::SystemIoFailure) => (
            None,
            Some(
                "an I/O error: check that the disk is not full and that the database's directory is \
                 writable (SQLite keeps its -wal and -shm files next to the database)",
            ),
        ),
        _ => (None, None),
    };
    Classified {
        code,
        hint,
        error: Box::new(error),
    }
    .into()
}

/// Lease tokens are stored as text.
impl ToSql for LeaseToken {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for LeaseToken {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<LeaseToken> {
        String::column_result(value).map(LeaseToken::from)
    }
}

/// The last connection to close a WAL database copies the `-wal` into the database file and
/// removes it (a checkpoint: the `-wal` synced, the database written and synced). For an idle
/// tick, whose one write is its tick marks, that was four fsyncs a minute (with the new `-wal`'s
/// header and directory) to make durable what needs no durability: a power cut that loses the
/// marks costs one minute of "last tick". So a connection that wrote nothing else leaves the
/// `-wal` (and `-shm`) as they are, for the next connection that writes anything else, or the
/// close that finds the `-wal` past `IDLE_WAL_LIMIT`, to checkpoint. Every other commit is made
/// durable as before: explicitly (`sync`, FULL commits), or by the checkpoint of its own close.
/// Readers read the `-wal` (read-only users too: SQLite reads it without writing the `-shm`).
impl Drop for SqliteStore {
    fn drop(&mut self) {
        // The database as SQLite opened it (a symlink resolved): its sidecars are next to it.
        let Some(db) = self
            .conn
            .path()
            .filter(|_| self.wal.is_some())
            .map(PathBuf::from)
        else {
            return;
        };
        let leave_wal =
            self.written != Written::More && (1..=IDLE_WAL_LIMIT).contains(&files::wal_bytes(&db));
        if !leave_wal {
            return;
        }
        // Refused only on a closed connection, where no close will checkpoint anyway.
        let _ = self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        );
        if self.written == Written::TickMarks {
            files::match_database_mode(&db);
        }
    }
}

impl SqliteStore {
    pub fn open(path: &Path, mode: OpenMode) -> Result<SqliteStore> {
        let shown = path.display();
        // A device, a FIFO or a socket: SQLite would fail on it with an I/O error, after making a
        // -journal beside it (in /dev for --db /dev/null). (A directory has its own message.)
        if path.metadata().is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            return Err(Failure::database(format!(
                "{shown} is not a regular file, so not a runner database; point --db at a file"
            ))
            .into());
        }
        // Check before opening: opening replays a WAL file, which is exactly what an attacker
        // who could write next to the database would have planted.
        if mode == OpenMode::Execute && path.exists() {
            super::sqlite_security::check_executable_database(path)?;
        }
        if path.is_dir() {
            return Err(Failure::database(format!(
                "{shown} is a directory, not a runner database; point --db at a file"
            ))
            .into());
        }
        if !exists(path)? {
            if mode != OpenMode::CreateIfMissing {
                return Err(Failure::database(format!(
                    "no runner database at {shown}; create it with `runner init` \
                     (or `runner schedule add`), or point --db / RUNNER_DB at an existing one"
                ))
                .into());
            }
            create_private_file(path)?;
        } else if mode != OpenMode::CreateIfMissing && is_empty_file(path) {
            // An empty file is not a database yet; only init and schedule add may make it one.
            return Err(Failure::database(format!(
                "{shown} is an empty file, not a runner database; create one with `runner init`"
            ))
            .into());
        }
        // A user who cannot write the database only reads it. Read it in SQLite's immutable mode
        // when nobody has it open and its -wal is empty: otherwise SQLite would create -wal and
        // -shm files next to it with the database's (read-only) mode, and leave them behind to
        // block its owner's next write. That holds for the commands that may create a database
        // too (`init`, `schedule add`), once it exists: a write then fails naming the file, and
        // leaves nothing behind. Only an empty file, which they must make a database, is not
        // read immutable.
        if path.metadata().is_ok_and(|m| m.len() > 0)
            && (!files::writable(path) || mode == OpenMode::Peek)
            && !files::maybe_in_use(path)
            && files::immutable_read_sees_everything(path)
        {
            return Self::open_immutable(path, mode);
        }
        // READ_WRITE without CREATE: SQLite opens a read-only file read-only, so reads still work
        // and writes fail with a clear error. A peek opens it read-only whatever its mode.
        let access = match mode {
            OpenMode::Peek => OpenFlags::SQLITE_OPEN_READ_ONLY,
            _ => OpenFlags::SQLITE_OPEN_READ_WRITE,
        };
        let flags = access | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| cannot_open(path, &e))?;
        let mut store = SqliteStore {
            conn,
            path: path.to_path_buf(),
            found_version: 0,
            synchronous: Commit::Durable,
            unsynced: false,
            wal: None,
            written: Written::Nothing,
        };
        let header = match store.configure(mode) {
            Ok(header) => header,
            // Reading a WAL database needs its -shm file; in a directory this user cannot write,
            // SQLite cannot create it ("attempt to write a readonly database"). Without changes
            // waiting in the -wal, the database file alone is the whole database: read it
            // immutable. Otherwise say exactly why it cannot be read.
            Err(e) if is_read_only(&e) => {
                drop(store);
                if files::immutable_read_sees_everything(path) {
                    return Self::open_immutable(path, mode)
                        .map_err(|_| open_error(path, e).into());
                }
                return Err(match files::unreadable_sidecar(path)
                    .or_else(|| files::unreadable_wal(path))
                {
                    Some(why) => Failure::database(why),
                    None => read_only_error(path, e),
                }
                .into());
            }
            Err(e) => return Err(open_error(path, e).into()),
        };
        store.migrate(header, mode)?;
        Ok(store)
    }

    /// Open read-only through `file:PATH?immutable=1`: no locks, no -shm, no -wal. Only for a
    /// database whose -wal is empty (see `files::immutable_read_sees_everything`).
    fn open_immutable(path: &Path, mode: OpenMode) -> Result<SqliteStore> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(immutable_uri(path), flags)
            .map_err(|e| cannot_open(path, &e))?;
        let mut store = SqliteStore {
            conn,
            path: path.to_path_buf(),
            found_version: 0,
            synchronous: Commit::Durable,
            unsynced: false,
            wal: None,
            written: Written::Nothing,
        };
        let header = store.configure(mode).map_err(|e| open_error(path, e))?;
        store.migrate(header, mode)?;
        Ok(store)
    }

    /// Set the connection up; returns the file's header (`header`), read before anything else.
    fn configure(&mut self, mode: OpenMode) -> rusqlite::Result<Header> {
        self.conn.busy_handler(Some(wait_while_busy))?;
        // Reading the header first turns a garbage file into NotADatabase here, not mid-command.
        // Only a runner database this runner understands, or a new one that this command may
        // create, is switched to WAL: switching is a change to the file, and another
        // application's database, a newer runner's, or an empty one that only `init` may make
        // ours, is refused untouched (by `migrate`, next).
        let header = self.header()?;
        let (app_id, version, tables) = header;
        let new = app_id == 0 && tables == 0 && mode == OpenMode::CreateIfMissing;
        let ours = (app_id == APPLICATION_ID || new) && version <= MIGRATIONS.len() as i64;
        if ours && !self.conn.is_readonly(rusqlite::MAIN_DB)? && self.enable_wal()? == "wal" {
            self.wal = self.conn.path().map(|db| WalFile {
                path: files::sidecar(Path::new(db), "-wal"),
                directory_synced: false,
            });
        }
        // temp_store is left at SQLite's default: a statement's rollback journal (kept while a
        // statement of a larger transaction runs, so it can be undone alone) is held in memory up
        // to 64 KiB, which every statement of materialising, claiming and recording stays within,
        // and only a larger one (deleting a schedule with its history, a migration, a large sort)
        // goes on to a temporary file. Kept in memory whatever its size (temp_store = MEMORY, the
        // setting until 986c64e), deleting a schedule with 600,000 runs took 250 MB.
        self.conn
            .execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
        // The query planner stability guarantee: a plan never depends on a bound value. Without
        // it, SQLite prepared statements on the tables with partial indexes again at every new
        // binding (measured: a tenth of materialising's cost); no query here needs a bound value
        // to pick its index.
        self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        Ok(header)
    }

    /// Switch to WAL. While another process is creating the database, this pragma can fail with
    /// SQLITE_BUSY without consulting the busy handler, so retry it here on the same terms.
    fn enable_wal(&self) -> rusqlite::Result<String> {
        let started = std::time::Instant::now();
        loop {
            match self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            {
                Ok(mode) => return Ok(mode.to_ascii_lowercase()),
                Err(e)
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                        && started.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(Duration::from_millis(fastrand::u64(1..=20)));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Bring the schema up to date, or refuse a database that is not ours or is newer, by the
    /// header `configure` read (the version is read again under the write lock before migrating).
    fn migrate(&mut self, (app_id, version, tables): Header, mode: OpenMode) -> Result<()> {
        let shown = self.path.display().to_string();
        let known = MIGRATIONS.len() as i64;
        // A SQLite file with nothing in it (another program's new database, or one an `init` on
        // a full disk left behind) is not a runner database yet: as with an empty file, only the
        // commands that may create one make it one; a read must not write a schema.
        if (app_id, version, tables) == (0, 0, 0) && mode != OpenMode::CreateIfMissing {
            return Err(Failure::database(format!(
                "{shown} is an empty SQLite database, not a runner database; create one with \
                 `runner init`"
            ))
            .into());
        }
        if version > known {
            return Err(Failure::database(format!(
                "{shown} has schema version {version}, newer than this runner understands ({known}); \
                 upgrade runner"
            )).into());
        }
        // Not ours: marked by another application, or holding tables without our mark.
        if app_id != APPLICATION_ID && (app_id != 0 || tables > 0) {
            return Err(Failure::database(format!(
                "{shown} is a SQLite database but not a runner database; point --db elsewhere"
            ))
            .into());
        }
        self.found_version = version;
        if version == known {
            return Ok(());
        }
        if mode == OpenMode::Peek {
            return Err(Failure::database(format!(
                "{shown} has schema version {version}, older than this runner's ({known}); \
                 `runner init` brings it up to date"
            ))
            .into());
        }
        let tx = self
            .write()
            .map_err(anyhow::Error::from)
            .with_context(|| format!("migrating {shown}"))?;
        // Re-read inside the lock: another process may have migrated meanwhile.
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let found_version = version;
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql)
                .map_err(sql_error)
                .with_context(|| format!("applying migration {} to {shown}", index + 1))?;
        }
        // A migration may edit a table's text in sqlite_schema (13 does), which, unlike DDL, does
        // not increment the schema version: increment it, so that every connection, this one and
        // other processes', reads the schema again before its next statement.
        let schema_version: i64 = tx.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {known};
             PRAGMA schema_version = {};",
            schema_version + 1
        ))?;
        tx.commit()
            .map_err(anyhow::Error::from)
            .with_context(|| format!("migrating {shown}"))?;
        self.found_version = found_version;
        Ok(())
    }

    /// The application id, schema version and number of schema objects (`Header`), read in one
    /// statement, so from one snapshot: read one by one, a process migrating the file meanwhile
    /// could make a brand-new runner database look like someone else's (tables, but no
    /// application id yet).
    fn header(&self) -> rusqlite::Result<Header> {
        self.conn.query_row(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_master)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// Begin a durable write transaction (`BEGIN IMMEDIATE`: take the write lock now, not
    /// mid-way).
    fn write(&mut self) -> Result<WriteTx<'_>> {
        self.write_with(Commit::Durable)
    }

    /// Begin a write transaction whose commit is `commit`. In WAL mode `synchronous = FULL`
    /// syncs the WAL at every commit, and `NORMAL` at none: the WAL is one ordered log, so the
    /// next FULL commit (or checkpoint) syncs every deferred commit before it too.
    fn write_with(&mut self, commit: Commit) -> Result<WriteTx<'_>> {
        if self.synchronous != commit {
            let level = match commit {
                Commit::Durable => "FULL",
                Commit::Deferred => "NORMAL",
            };
            self.conn.pragma_update(None, "synchronous", level)?;
            self.synchronous = commit;
        }
        // Set on beginning, not on committing: a deferred transaction that rolls back leaves
        // `sync` one needless commit, never a missed one; and its close a needless checkpoint.
        self.unsynced |= commit == Commit::Deferred;
        self.written = Written::More;
        if self.conn.is_readonly(rusqlite::MAIN_DB)? {
            return Err(cannot_write(&self.path, None).into());
        }
        match self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
        {
            Ok(tx) => Ok(WriteTx {
                tx,
                path: &self.path,
            }),
            // The database file is writable, but a -wal or -shm file (or the directory) is not:
            // name the file at fault, not the database.
            Err(e) if is_read_only(&e) => Err(cannot_write(&self.path, Some(e)).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Begin a write transaction that must be durable before the caller acts on it, on the
    /// tick's hot path: in WAL mode it commits deferred and [`synced`](Self::synced) then syncs
    /// the WAL after the write lock is released, so other runners commit during the fsync
    /// instead of waiting for it; outside WAL mode it is a FULL commit.
    fn write_then_sync(&mut self) -> Result<WriteTx<'_>> {
        let commit = if self.wal.is_some() {
            Commit::Deferred
        } else {
            Commit::Durable
        };
        self.write_with(commit)
    }

    /// After a commit begun with [`write_then_sync`](Self::write_then_sync): make it, and every
    /// commit before it, durable.
    fn synced(&mut self) -> Result<()> {
        if self.wal.is_some() {
            self.sync_wal()
        } else {
            // It was a FULL commit: on disk, with every deferred one before it.
            self.unsynced = false;
            Ok(())
        }
    }

    /// One fenced write per item, all in one transaction made durable before this returns
    /// ([`write_then_sync`](Self::write_then_sync), then [`synced`](Self::synced)): `write`
    /// says whether the item's lease still held and its write landed.
    fn fenced_each_durably<T>(
        &mut self,
        items: &[T],
        write: impl Fn(&Transaction<'_>, &T) -> Result<bool>,
    ) -> Result<Vec<Fenced>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let tx = self.write_then_sync()?;
        let mut landed = Vec::with_capacity(items.len());
        for item in items {
            landed.push(Fenced::landed_if(write(&tx, item)?));
        }
        tx.commit()?;
        self.synced()?;
        Ok(landed)
    }

    /// Sync the WAL file, which is all a FULL commit adds to a deferred one (SQLite makes the
    /// same fsync, but holding the write lock). Every commit of this connection so far is then on
    /// disk: its frames are in the WAL, or a checkpoint copied them to the database file, and a
    /// checkpoint syncs the WAL before and the database file after. The directory is synced once
    /// too, as SQLite does for a new WAL file. Should the WAL file be missing (SQLite removes it
    /// only when the last connection closes, so never while this one is open), a FULL commit
    /// does it.
    fn sync_wal(&mut self) -> Result<()> {
        let Some(wal) = self.wal.as_mut() else {
            return self.sync_by_commit();
        };
        match std::fs::File::open(&wal.path).and_then(|file| file.sync_data()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.sync_by_commit(),
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot sync {}", wal.path.display()))
                    .into())
            }
        }
        if !wal.directory_synced {
            let directory = files::directory(&wal.path);
            std::fs::File::open(&directory)
                .and_then(|dir| dir.sync_all())
                .with_context(|| format!("cannot sync directory {}", directory.display()))?;
            wal.directory_synced = true;
        }
        self.unsynced = false;
        Ok(())
    }

    /// Make every commit so far durable with a FULL commit of its own.
    fn sync_by_commit(&mut self) -> Result<()> {
        let tx = self.write()?;
        // A commit that changes nothing writes nothing and syncs nothing: count the syncs, so
        // this one has a page to write, and its fsync covers the whole WAL before it.
        tx.execute(
            "INSERT INTO runner_state (key, value) VALUES ('syncs', 1)
             ON CONFLICT (key) DO UPDATE SET value = value + 1",
            [],
        )?;
        tx.commit()?;
        self.unsynced = false;
        Ok(())
    }

    /// `claim`, or `claim_run` when `only` names the run: one claim, one statement.
    fn claim_where(
        &mut self,
        only: Option<i64>,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
    ) -> Result<Claimed> {
        // Nothing due at all (an idle tick, a recheck): a read says so, without the write lock
        // and without compiling the claim. Work that becomes due meanwhile waits for the next
        // claim, as it would have had this one come a moment sooner.
        if !self.anything_due(now)? {
            return Ok(Claimed {
                runs: Vec::new(),
                more_due: false,
            });
        }
        let tx = self.write_with(Commit::Deferred)?;
        let claimed = claim_in(&tx, only, actor, now, lease_secs, batch)?;
        tx.commit()?;
        Ok(claimed)
    }
}

/// A write transaction of the store ([`SqliteStore::write_with`]): SQLite's `Transaction`, whose
/// commit says what stops it when a file of the database was made read-only after it was opened.
struct WriteTx<'a> {
    tx: Transaction<'a>,
    path: &'a Path,
}

impl<'a> std::ops::Deref for WriteTx<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Transaction<'a> {
        &self.tx
    }
}

impl WriteTx<'_> {
    /// Commit. The database, its `-wal` or its directory made read-only or immutable while the
    /// command ran (`chattr +i`, as root; a `chmod` does not stop a file already open) fails the
    /// commit as SQLite's I/O error: said as a read-only database is when the command opens it
    /// (exit 4), naming the file at fault, not as a disk failure.
    fn commit(self) -> Result<()> {
        let path = self.path;
        self.tx.commit().map_err(|error| {
            let io_error = error.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure);
            if io_error && !files::write_problems(path).is_empty() {
                cannot_write(path, Some(error)).into()
            } else {
                error.into()
            }
        })
    }
}

/// The claim's statements (see `Store::claim`), inside the caller's write transaction.
fn claim_in(
    tx: &Transaction<'_>,
    only: Option<i64>,
    actor: &Actor,
    now: i64,
    lease_secs: i64,
    batch: usize,
) -> Result<Claimed> {
    let sql = claim_sql(only.is_some());
    let runs: Vec<ClaimedRun> = {
        let mut stmt = tx.prepare_cached(&sql)?;
        let lease_expires_at = now + lease_secs;
        let batch = batch as i64;
        let mut params = named_params! {
            ":owner": actor.owner,
            ":lease_expires_at": lease_expires_at,
            ":now": now,
            ":batch": batch,
        }
        .to_vec();
        if let Some(run_id) = &only {
            params.push((":run_id", run_id as &dyn ToSql));
        }
        let rows = stmt.query_map(params.as_slice(), |r| {
            let leftovers: String = r.get(13)?;
            Ok(ClaimedRun {
                run_id: r.get(0)?,
                definition_id: r.get(1)?,
                job_name: r.get(2)?,
                attempt: r.get(3)?,
                retry: RetryPolicy::from_secs(r.get(4)?, r.get(9)?, r.get(10)?),
                scheduled_for: r.get(5)?,
                command: r.get(6)?,
                workdir: r.get(7)?,
                timeout_secs: r.get(8)?,
                idempotency_key: r.get(11)?,
                lease_token: r.get(12)?,
                leftovers: leftovers.parse().unwrap_or(Leftovers::Kill),
            })
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for run in &runs {
        tx.prepare_cached(
            "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, runner_start_time, lease_token,
                 started_at, definition_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            run.run_id,
            run.attempt,
            actor.owner,
            actor.host,
            actor.pid,
            actor.start_time.map(|t| t as i64),
            run.lease_token,
            now,
            run.definition_id
        ])?;
        let event = NewEvent::claimed(run.attempt, &actor.host);
        insert_event(tx, run.run_id, now, actor, &event)?;
    }
    let more_due: bool = tx
        .prepare_cached(MORE_DUE_SQL)?
        .query_row([now], |r| r.get(0))?;
    Ok(Claimed { runs, more_due })
}

thread_local! {
    /// When the current lock wait began (SQLite calls the busy handler with count 0 first).
    static BUSY_SINCE: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// SQLite's busy handler: while another runner holds the write lock, sleep a jittered delay
/// that grows by BUSY_STEP per try, up to BUSY_MAX_SLEEP (jittered, so waiting runners do not
/// retry in lockstep), and try again, until BUSY_TIMEOUT has passed; then the statement fails
/// with SQLITE_BUSY (exit 5).
fn wait_while_busy(count: i32) -> bool {
    let now = std::time::Instant::now();
    let since = BUSY_SINCE.with(|cell| {
        if count == 0 || cell.get().is_none() {
            cell.set(Some(now));
        }
        cell.get().unwrap_or(now)
    });
    if now.duration_since(since) >= BUSY_TIMEOUT {
        return false;
    }
    let tries = u32::try_from(count).unwrap_or(0).saturating_add(1);
    let ceiling = BUSY_STEP.saturating_mul(tries).min(BUSY_MAX_SLEEP);
    let floor = BUSY_STEP / 4;
    std::thread::sleep(floor + (ceiling - floor).mul_f64(fastrand::f64()));
    true
}

/// Classify an error met while opening: a broken file is "not a database" (exit 4), a lock held
/// too long is busy (exit 5); anything else keeps the SQLite error in the chain, so its exit code
/// and hint (read-only, disk full, permissions) follow from it, with the path named.
fn open_error(path: &Path, error: rusqlite::Error) -> anyhow::Error {
    use rusqlite::ErrorCode as C;
    match error.sqlite_error_code() {
        Some(C::NotADatabase | C::DatabaseCorrupt) => not_a_database(path, &error),
        Some(C::DatabaseBusy | C::DatabaseLocked) => Failure::Busy(format!(
            "{} stayed locked by another process for more than {}s; try again",
            path.display(),
            BUSY_TIMEOUT.as_secs()
        ))
        .into(),
        _ => sql_error(error).context(format!("opening database {}", path.display())),
    }
}

/// SQLite could not read or write because a file or directory is read-only for this user.
fn is_read_only(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
    )
}

/// A read that failed on a read-only file: name the files at fault when they can be seen.
fn read_only_error(path: &Path, error: rusqlite::Error) -> anyhow::Error {
    let problems = files::write_problems(path);
    if problems.is_empty() {
        return open_error(path, error);
    }
    Failure::database(format!(
        "cannot read {} ({error}): {}",
        path.display(),
        problems.join("; ")
    ))
}

/// This command must write, and this user cannot: say which file or directory stops it.
fn cannot_write(path: &Path, error: Option<rusqlite::Error>) -> anyhow::Error {
    let problems = files::write_problems(path);
    let why = if problems.is_empty() {
        "make the file, its -wal and -shm files and its directory writable by this user".to_string()
    } else {
        problems.join("; ")
    };
    let cause = error.map(|e| format!(" ({e})")).unwrap_or_default();
    Failure::database(format!(
        "{} is read-only for this user{cause}: reading works, but this command must write; {why}",
        path.display()
    ))
}

/// Why SQLite could not open the database at `path`. A file this user may not read is said to
/// be so, not as SQLite's "unable to open database file" about the URI it was given (looked at
/// only once the open failed: every command opens the database).
fn cannot_open(path: &Path, error: &rusqlite::Error) -> anyhow::Error {
    let shown = path.display();
    let unreadable =
        std::fs::File::open(path).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied);
    Failure::database(match unreadable {
        true => format!(
            "cannot read {shown}: permission denied; run as the user that owns it \
             (e.g. `sudo -u runner ...`) or give this user read access"
        ),
        false => format!("cannot open database {shown}: {error}"),
    })
}

/// Whether the database file is an empty file: not a database yet, which only the commands that
/// may create one (`OpenMode::CreateIfMissing`) make one.
pub fn is_empty_file(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file() && m.len() == 0)
}

/// Whether the database file exists. A directory above it that this user may not enter hides it
/// (`Path::exists` says "no"): that is said as such, not as a missing database to create.
pub fn exists(path: &Path) -> Result<bool> {
    path.try_exists().map_err(|e| {
        let blocked = path
            .ancestors()
            .skip(1)
            .filter(|d| !d.as_os_str().is_empty())
            .find(|d| d.try_exists().is_ok_and(|there| there) && std::fs::read_dir(d).is_err());
        let wherein = blocked.map_or(String::new(), |d| format!(" (in {})", d.display()));
        Failure::database(format!(
            "cannot reach {}: {e}{wherein}; run as the user that owns the database (e.g. `sudo -u \
             runner ...`) or give this user access to its directory",
            path.display()
        ))
        .into()
    })
}

/// `file:` URI of `path` with `immutable=1`, percent-encoding what a URI path cannot hold.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(byte as char)
            }
            other => uri.push_str(&format!("%{other:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

fn not_a_database(path: &Path, error: &dyn std::fmt::Display) -> anyhow::Error {
    Failure::database(format!(
        "{} is not a usable runner database ({error}); restore it from a backup or point --db elsewhere",
        path.display()
    ))
}

/// Create the database file 0600 (and any missing directories 0700): it holds the commands that
/// `runner` will execute, so, like a crontab, nobody else may write it.
fn create_private_file(path: &Path) -> Result<()> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                Failure::database(format!("cannot create directory {}: {e}", dir.display()))
            })?;
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()), // a racing init made it
        Err(e) => {
            Err(Failure::database(format!("cannot create database {}: {e}", path.display())).into())
        }
    }
}

const DEFINITION_COLUMNS: &str = "id, name, cron, timezone, command, workdir, max_attempts, timeout_secs, \
     backoff_base_secs, backoff_max_secs, overlap, catch_up, grace_secs, paused, materialized_through, \
     next_fire_at, created_at, updated_at, revision, leftovers, paused_until, timing_changed_at";

/// The schedules a tick materialises: the due ones, served by `job_definitions_due` in its
/// order, then those whose due-ness cannot be judged, so a damaged one is reported every tick
/// rather than silently never due (`definition_from_row` reports it damaged). The second
/// condition is `job_definitions_undecidable`'s WHERE, word for word, which is how SQLite knows
/// that index (normally empty) serves it: without it, this half read every schedule on every
/// tick. UNION ALL, with the second half leaving out the rows of the first: a UNION would sort
/// every due row to find duplicates (a tenth of materialising 100,000).
fn due_definitions_query() -> String {
    format!(
        "SELECT {DEFINITION_COLUMNS} FROM job_definitions
         WHERE {DUE_SCHEDULE}
         UNION ALL
         SELECT {DEFINITION_COLUMNS} FROM job_definitions
         WHERE {UNDECIDABLE_SCHEDULE}
           AND NOT coalesce({DUE_SCHEDULE}, 0)
         ORDER BY next_fire_at, id
         LIMIT ?2"
    )
}

/// What each step of a tick looks for, written once for the step's own read and for
/// `pending_work`'s (`?1` is now in both). A `running` run whose lease expired (runs as `r`):
const EXPIRED_LEASE: &str = "r.status = 'running' AND r.lease_expires_at < ?1";
/// A cancelled run whose job was not known stopped by its deadline (`job_runs_stopping`; runs
/// as `r`):
const OVERDUE_STOP: &str = "r.stopping_by IS NOT NULL AND r.stopping_by < ?1";
/// A paused schedule whose timed pause ended:
const ENDED_PAUSE: &str = "paused = 1 AND paused_until <= ?1";
/// A due schedule:
const DUE_SCHEDULE: &str = "paused = 0 AND next_fire_at <= ?1";
/// A schedule whose due-ness cannot be judged (`job_definitions_undecidable`'s WHERE):
const UNDECIDABLE_SCHEDULE: &str = "(typeof(paused) <> 'integer' OR paused NOT IN (0, 1)
    OR typeof(next_fire_at) NOT IN ('integer', 'null'))";
/// An open attempt (`a`) of the host in parameter `host` whose run (`r`) moved on without it:
fn orphaned_attempt(host: &str) -> String {
    format!(
        "a.host = {host} AND a.finished_at IS NULL
         AND NOT (r.status = 'running' AND r.lease_token IS a.lease_token)"
    )
}

/// `Store::pending_work`: each step's condition in one EXISTS, served by the index its step's
/// read uses (`?1` now, `?2` the host).
fn pending_work_query() -> String {
    format!(
        "SELECT
             EXISTS (SELECT 1 FROM job_runs r WHERE {EXPIRED_LEASE}),
             EXISTS (SELECT 1 FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
                     WHERE {}),
             EXISTS (SELECT 1 FROM job_runs r INDEXED BY job_runs_stopping WHERE {OVERDUE_STOP}),
             EXISTS (SELECT 1 FROM job_definitions WHERE {ENDED_PAUSE}),
             EXISTS (SELECT 1 FROM job_definitions WHERE {DUE_SCHEDULE})
                 OR EXISTS (SELECT 1 FROM job_definitions WHERE {UNDECIDABLE_SCHEDULE}),
             ({MORE_DUE_SQL})",
        orphaned_attempt("?2")
    )
}

/// `Store::due_reader` for SQLite: a second, read-only connection to the same database. Each
/// batch is one short read (its own snapshot), so the tick's connection checkpoints and resets
/// the WAL as usual meanwhile. The schedules the tick has materialised since are no longer due
/// and are not met again; those it has read but not yet written (a batch or two) are met and
/// passed over by id, before their other columns are converted. What it reads only plans
/// instants: a run's command and settings are read on the tick's connection, in the transaction
/// that writes the run, after its cursor's compare-and-swap.
struct SqliteDueReader {
    conn: Connection,
    now: i64,
    returned: HashSet<i64>,
}

impl SqliteDueReader {
    fn open(path: &Path, now: i64, read: HashSet<i64>) -> rusqlite::Result<SqliteDueReader> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags)?;
        conn.busy_handler(Some(wait_while_busy))?;
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        Ok(SqliteDueReader {
            conn,
            now,
            returned: read,
        })
    }
}

impl super::DueReader for SqliteDueReader {
    fn next_batch(&mut self, limit: usize) -> Result<Vec<DefinitionRow>> {
        let mut stmt = self.conn.prepare_cached(&due_definitions_query())?;
        let mut rows = stmt.query(params![self.now, -1])?;
        let mut batch = Vec::with_capacity(limit);
        while batch.len() < limit {
            let Some(row) = rows.next()? else { break };
            if self.returned.insert(row.get(0)?) {
                batch.push(definition_from_row(row));
            }
        }
        Ok(batch)
    }
}

/// The one conversion of a `job_definitions` row (selected with `DEFINITION_COLUMNS`). A row
/// whose columns do not convert (an out-of-range integer, unknown policy text, a NULL, a blob) or
/// whose settings a runner cannot act on (`Settings::problems`) comes back as a
/// `DamagedDefinition` naming every bad column, so it never fails a query for the other rows.
fn definition_from_row(row: &Row<'_>) -> DefinitionRow {
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
            max_attempts: columns.get("max_attempts"),
            timeout_secs: columns.get("timeout_secs"),
            backoff_base_secs: columns.get("backoff_base_secs"),
            backoff_max_secs: columns.get("backoff_max_secs"),
            overlap: columns.parsed("overlap", Overlap::Forbid),
            catch_up: columns.parsed("catch_up", CatchUp::Latest),
            grace_secs: columns.get("grace_secs"),
            leftovers: columns.parsed("leftovers", Leftovers::Kill),
            paused: columns.flag("paused"),
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

/// Reads a row column by column, noting each column that does not convert (with a placeholder in
/// its place) instead of failing the whole row.
struct Columns<'a, 'r> {
    row: &'a Row<'r>,
    problems: Vec<ColumnProblem>,
}

/// The position of each of `DEFINITION_COLUMNS`: a row read by name asks SQLite for every
/// column's name in turn, a tenth of the cost of reading 100,000 due schedules.
fn definition_column(column: &str) -> usize {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| DEFINITION_COLUMNS.split(", ").collect());
    names
        .iter()
        .position(|name| *name == column)
        .unwrap_or_else(|| panic!("{column} is not one of DEFINITION_COLUMNS"))
}

impl Columns<'_, '_> {
    fn get<T: rusqlite::types::FromSql + Default>(&mut self, column: &'static str) -> T {
        match self.row.get::<_, T>(definition_column(column)) {
            Ok(value) => value,
            Err(error) => {
                let problem = self.describe(column, &error);
                self.problems.push(ColumnProblem { column, problem });
                T::default()
            }
        }
    }

    /// A policy stored as text (`FromStr` at the boundary).
    fn parsed<T: std::str::FromStr>(&mut self, column: &'static str, placeholder: T) -> T
    where
        T::Err: std::fmt::Display,
    {
        let noted = self.problems.len();
        let text: String = self.get(column);
        if self.problems.len() > noted {
            return placeholder;
        }
        text.parse().unwrap_or_else(|e: T::Err| {
            self.problems.push(ColumnProblem {
                column,
                problem: e.to_string(),
            });
            placeholder
        })
    }

    /// A 0/1 flag: anything else is damage, not "true".
    fn flag(&mut self, column: &'static str) -> bool {
        let noted = self.problems.len();
        let value: i64 = self.get(column);
        match value {
            _ if self.problems.len() > noted => false,
            0 => false,
            1 => true,
            other => {
                self.problems.push(ColumnProblem {
                    column,
                    problem: format!("holds {other}, not 0 or 1"),
                });
                false
            }
        }
    }

    /// What is wrong with a column's value, for a person.
    fn describe(&self, column: &str, error: &rusqlite::Error) -> String {
        use rusqlite::types::ValueRef;
        let shown = match self.row.get_ref(definition_column(column)) {
            Ok(ValueRef::Null) => return "is NULL, but a value is required".to_string(),
            Ok(ValueRef::Integer(i)) => i.to_string(),
            Ok(ValueRef::Real(r)) => format!("{r} (a real number)"),
            Ok(ValueRef::Text(t)) => format!(
                "{:?}",
                crate::model::truncate_detail(&String::from_utf8_lossy(t), 60)
            ),
            Ok(ValueRef::Blob(b)) => format!("a blob of {} bytes", b.len()),
            Err(e) => return e.to_string(),
        };
        // The text columns; all others hold integers (times, counts, seconds).
        let wanted = match column {
            "name" | "cron" | "timezone" | "command" | "workdir" | "overlap" | "catch_up" => "text",
            _ => "an integer",
        };
        match error {
            rusqlite::Error::IntegralValueOutOfRange(..) => {
                format!("{shown} is out of range (at most {})", u32::MAX)
            }
            rusqlite::Error::InvalidColumnType(..) => format!("holds {shown}, not {wanted}"),
            other => format!("holds {shown}, which is not valid {wanted} ({other})"),
        }
    }
}

/// `Store::close_orphaned_attempt` within `tx`: whether it closed the attempt.
fn close_orphan_in(
    tx: &Connection,
    holder: &AttemptHolder,
    now: i64,
    close: &OrphanClose,
    actor: &Actor,
) -> Result<bool> {
    // Never the attempt a runner still holds: only one whose run moved on without it. One
    // whose job never started took no time and printed nothing; another's output went with
    // its runner (NULL: not kept).
    let closed = tx.execute(
        "UPDATE job_attempts SET finished_at = ?4,
             duration_ms = CASE WHEN ?7 THEN 0 ELSE max(0, ?4 - started_at) * 1000 END,
             outcome = 'failed', error_code = ?5, error_detail = ?6,
             stdout_tail = CASE WHEN ?7 THEN x'' END, stderr_tail = CASE WHEN ?7 THEN x'' END,
             stdout_bytes = CASE WHEN ?7 THEN 0 END, stderr_bytes = CASE WHEN ?7 THEN 0 END
         WHERE run_id = ?1 AND attempt = ?2 AND lease_token = ?3 AND finished_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM job_runs WHERE id = ?1 AND status = 'running' AND lease_token = ?3)",
        params![
            holder.run_id,
            holder.attempt,
            holder.lease_token,
            now,
            close.code.to_string(),
            close.detail,
            close.never_started
        ],
    )?;
    if closed == 1 {
        insert_event(tx, holder.run_id, now, actor, &close.event)?;
        tx.execute(&super::job_stopped_sql("?1", None), [holder.run_id])?;
    }
    Ok(closed == 1)
}

/// One attempt's decided end inside the caller's transaction, fenced by its token (see
/// `Store::finish_attempt`).
fn finish_in(tx: &Connection, end: &AttemptEnd, actor: &Actor) -> Result<Fenced> {
    let (result, run) = (&end.result, &end.run);
    let output = result.output.as_ref();
    // Cached: every attempt's end runs these two statements (compiling them each time was a
    // twentieth of a draining tick's CPU).
    let changed = tx.prepare_cached(
            "UPDATE job_runs SET status = ?3, run_at = coalesce(?4, run_at), owner = NULL, lease_token = NULL,
                 lease_expires_at = NULL, heartbeat_at = NULL, error_code = ?5, error_detail = ?6, finished_at = ?7
             WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
               AND (?8 IS NULL OR lease_expires_at = ?8)",
        )?
        .execute(params![
            result.run_id, result.lease_token, run.status.as_str(), run.run_at, run.error_code,
            run.error_detail, run.finished_at, result.lease_expired_at
        ])?;
    let applied = changed == 1;
    // The attempt row is fenced by the same token and closed by the runner that held it: when
    // its run write landed, or when the run was cancelled under it (cancel leaves the open
    // attempt to its runner). An attempt a recovering runner closed is never rewritten. One
    // recovered from another host stays open for that host to stop and close.
    let closed = tx.prepare_cached(
            "UPDATE job_attempts SET finished_at = ?4, duration_ms = ?5, outcome = ?6, exit_code = ?7, error_code = ?8,
                 error_detail = ?9, stdout_tail = ?10, stderr_tail = ?11, stdout_bytes = ?12, stderr_bytes = ?13
             WHERE run_id = ?1 AND attempt = ?2 AND lease_token = ?3 AND finished_at IS NULL
               AND ((?14 AND NOT ?15) OR EXISTS (SELECT 1 FROM job_runs WHERE id = ?1 AND status = 'cancelled'))",
        )?
        .execute(params![
            result.run_id, result.attempt, result.lease_token, result.finished_at, result.duration_ms,
            end.outcome.as_str(), result.exit_code, run.error_code, run.error_detail,
            output.map(|o| &o.stdout_tail), output.map(|o| &o.stderr_tail),
            output.map(|o| o.stdout_bytes as i64), output.map(|o| o.stderr_bytes as i64), applied,
            result.attempt_left_open
        ])?;
    let at = result.finished_at;
    if !applied && closed == 1 {
        // Closed under its cancelled run: its job is stopped, and so the run's, unless another
        // attempt of it is still open.
        tx.prepare_cached(&super::job_stopped_sql("?1", None))?
            .execute([result.run_id])?;
    }
    if !applied {
        // The run this attempt held: one whose attempt row is still there (a removed schedule's
        // runs and attempts are gone, and SQLite gives a new run the id of a removed newest one).
        let current = tx
            .query_row(
                "SELECT r.status FROM job_runs r
                 WHERE r.id = ?1
                   AND EXISTS (SELECT 1 FROM job_attempts a WHERE a.run_id = r.id AND a.lease_token = ?2)",
                params![result.run_id, result.lease_token],
                |r| status_from(0, r.get(0)?),
            )
            .optional()?;
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
        // runner_dead_runs_total{job}: a counter, so retry and prune never lower it.
        tx.execute(&super::count_dead_sql("?1"), [result.run_id])?;
    }
    Ok(Fenced::Applied)
}

/// The columns of `job_definitions` a run copies (`Snapshot`), in the order of the run's own.
macro_rules! snapshot_columns {
    () => {
        "command, workdir, max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, leftovers, timezone"
    };
}
const SNAPSHOT_LEN: usize = 8;

const MOVE_CURSOR: &str = "UPDATE job_definitions SET materialized_through = ?4, next_fire_at = ?5
WHERE id = ?1 AND materialized_through = ?2 AND revision = ?3 AND paused = 0";
/// A schedule's snapshot, and its running run (for the overlap policy), if any: the oldest,
/// by `min(id)`, not `ORDER BY id LIMIT 1`, which its index (`job_runs_running_by_definition`,
/// by schedule and `running_alone`) does not hold in id order: a sort for every schedule
/// materialised made S2's tick 10% slower.
const SNAPSHOT_AND_RUNNING: &str = concat!(
    "SELECT ",
    snapshot_columns!(),
    ",
    (SELECT min(id) FROM job_runs WHERE definition_id = ?1 AND status = 'running')
FROM job_definitions WHERE id = ?1"
);
/// A plain `VALUES` insert, without `RETURNING` (nor `INSERT ... SELECT`): SQLite copies every
/// page such a statement touches into a statement journal (one run touches a dozen b-trees).
const INSERT_RUN: &str = concat!(
    "INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, idempotency_key,
    skip_reason, created_at, finished_at, ",
    snapshot_columns!(),
    ")
VALUES (?1, ?2, ?3, ?4, ?3, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
ON CONFLICT (definition_id, scheduled_for) WHERE trigger = 'schedule' DO NOTHING"
);
const INSERT_EVENT: &str =
    "INSERT INTO job_events (run_id, at, kind, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5)";

/// The statements of materialising, looked up once per transaction rather than once per run
/// (a cached statement is found by hashing its text), and the time and actor of its writes.
struct Materializer<'c> {
    conn: &'c Connection,
    now: i64,
    actor: &'c Actor,
    move_cursor: CachedStatement<'c>,
    snapshot: CachedStatement<'c>,
    insert_run: CachedStatement<'c>,
    insert_event: CachedStatement<'c>,
}

impl<'c> Materializer<'c> {
    fn new(conn: &'c Connection, now: i64, actor: &'c Actor) -> rusqlite::Result<Self> {
        Ok(Materializer {
            conn,
            now,
            actor,
            move_cursor: conn.prepare_cached(MOVE_CURSOR)?,
            snapshot: conn.prepare_cached(SNAPSHOT_AND_RUNNING)?,
            insert_run: conn.prepare_cached(INSERT_RUN)?,
            insert_event: conn.prepare_cached(INSERT_EVENT)?,
        })
    }

    /// One schedule's materialisation inside the caller's transaction: compare-and-swap its
    /// cursor, then insert the planned runs (each once per instant) with their events.
    fn write(
        &mut self,
        cursor: CursorMove,
        plan: &mut dyn FnMut(Option<i64>) -> Vec<NewRun>,
    ) -> Result<usize> {
        let (now, actor) = (self.now, self.actor);
        let moved = self.move_cursor.execute(params![
            cursor.definition_id,
            cursor.expected_through,
            cursor.expected_revision,
            cursor.new_through,
            cursor.next_fire_at
        ])?;
        if moved == 0 {
            return Ok(0); // another tick materialised these instants, or the schedule changed
        }
        // What each run copies of its schedule, read after the cursor moved in this transaction.
        let (snapshot, running) = self.snapshot.query_row([cursor.definition_id], |r| {
            Ok((
                Snapshot::from_row(r)?,
                r.get::<_, Option<i64>>(SNAPSHOT_LEN)?,
            ))
        })?;
        let mut inserted = 0;
        for run in plan(running) {
            let id = insert_run(
                &mut self.insert_run,
                self.conn,
                cursor.definition_id,
                &snapshot,
                &run,
                now,
            )?;
            if let Some(run_id) = id {
                inserted += 1;
                insert_event_with(&mut self.insert_event, run_id, now, actor, &run.event())?;
            }
        }
        Ok(inserted)
    }
}

/// A schedule's command and policies as a new run copies them, values as stored.
struct Snapshot([rusqlite::types::Value; SNAPSHOT_LEN]);

impl Snapshot {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Snapshot> {
        let mut values = std::array::from_fn(|_| rusqlite::types::Value::Null);
        for (i, value) in values.iter_mut().enumerate() {
            *value = row.get(i)?;
        }
        Ok(Snapshot(values))
    }

    /// Schedule `definition_id`'s snapshot; `None` when it is gone.
    fn read(tx: &Connection, definition_id: i64) -> Result<Option<Snapshot>> {
        Ok(tx
            .prepare_cached(concat!(
                "SELECT ",
                snapshot_columns!(),
                " FROM job_definitions WHERE id = ?1"
            ))?
            .query_row([definition_id], Snapshot::from_row)
            .optional()?)
    }
}

/// Record `event` on run `run_id`'s timeline, at `at`, by `actor`.
fn insert_event(
    tx: &Connection,
    run_id: i64,
    at: i64,
    actor: &Actor,
    event: &NewEvent,
) -> Result<()> {
    insert_event_with(
        &mut *tx.prepare_cached(INSERT_EVENT)?,
        run_id,
        at,
        actor,
        event,
    )
}

/// `insert_event` with its statement (`INSERT_EVENT`) prepared by the caller.
fn insert_event_with(
    insert: &mut Statement<'_>,
    run_id: i64,
    at: i64,
    actor: &Actor,
    event: &NewEvent,
) -> Result<()> {
    insert.execute(params![
        run_id,
        at,
        event.kind.as_str(),
        actor.owner,
        event.detail.to_string()
    ])?;
    Ok(())
}

/// Insert a run of definition `definition_id` with its `snapshot`, as `run` says, by `insert`
/// (`INSERT_RUN`) on `conn`; `None` when its instant already has a schedule run (one run per
/// instant).
/// Insert one run of schedule `definition_id` with its event, in `tx`: its id, or None if its
/// instant has a run already.
fn insert_one_run(
    tx: &Connection,
    definition_id: i64,
    run: &NewRun,
    now: i64,
    actor: &Actor,
) -> Result<Option<i64>> {
    let snapshot = Snapshot::read(tx, definition_id)?.ok_or_else(|| {
        anyhow::anyhow!(
            "the schedule of run {} was removed meanwhile",
            run.idempotency_key
        )
    })?;
    let run_id = insert_run(
        &mut *tx.prepare_cached(INSERT_RUN)?,
        tx,
        definition_id,
        &snapshot,
        run,
        now,
    )?;
    if let Some(run_id) = run_id {
        insert_event(tx, run_id, now, actor, &run.event())?;
    }
    Ok(run_id)
}

fn insert_run(
    insert: &mut Statement<'_>,
    conn: &Connection,
    definition_id: i64,
    snapshot: &Snapshot,
    run: &NewRun,
    now: i64,
) -> Result<Option<i64>> {
    let status = run.status();
    let finished_at = status.is_final().then_some(now);
    let [command, workdir, max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, leftovers, timezone] =
        &snapshot.0;
    let inserted = insert.execute(params![
        definition_id,
        run.trigger.as_str(),
        run.scheduled_for,
        status.as_str(),
        run.idempotency_key,
        run.skip_reason,
        now,
        finished_at,
        command,
        workdir,
        max_attempts,
        timeout_secs,
        backoff_base_secs,
        backoff_max_secs,
        leftovers,
        timezone,
    ])?;
    Ok((inserted == 1).then(|| conn.last_insert_rowid()))
}

fn status_from(index: usize, text: String) -> rusqlite::Result<RunStatus> {
    text.parse().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unexpected run status {text:?}").into(),
        )
    })
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

fn run_view_from_row(row: &Row<'_>) -> rusqlite::Result<RunView> {
    Ok(RunView {
        id: row.get(0)?,
        job: row.get(1)?,
        timezone: row.get(2)?,
        trigger: row.get(3)?,
        status: status_from(4, row.get(4)?)?,
        scheduled_for: row.get(5)?,
        run_at: row.get(6)?,
        attempt: row.get(7)?,
        max_attempts: row.get(8)?,
        command: row.get(9)?,
        workdir: row.get(10)?,
        idempotency_key: row.get(11)?,
        owner: row.get(12)?,
        lease_expires_at: row.get(13)?,
        heartbeat_at: row.get(14)?,
        error_code: row.get(15)?,
        error_detail: row.get(16)?,
        skip_reason: row.get(17)?,
        created_at: row.get(18)?,
        started_at: row.get(19)?,
        finished_at: row.get(20)?,
        last_attempt_started_at: row.get(21)?,
        last_duration_ms: row.get(22)?,
        last_exit_code: row.get(23)?,
        stopping_by: row.get(24)?,
    })
}

/// After `RUN_VIEW`: a schedule's runs of some instants, one index probe per instant
/// (`job_runs_definition_history`).
const RUNS_AT_INSTANTS: &str = "
WHERE r.definition_id = ?1 AND r.trigger = 'schedule'
  AND r.scheduled_for IN (SELECT value FROM json_each(?2))";

/// The instants of a schedule's latest runs of its own (`recorded_instants`): at most `?3` entries
/// of the partial index that holds schedule runs only, newest first. Named, since without
/// statistics SQLite takes `job_runs_definition_history`, which holds manual runs too: it would
/// step over every manual run newer than the runs it looks for, a million of them if so many
/// were made.
const RECORDED_INSTANTS: &str = "
SELECT scheduled_for FROM job_runs INDEXED BY job_runs_one_per_instant
WHERE definition_id = ?1 AND trigger = 'schedule' AND scheduled_for <= ?2
ORDER BY scheduled_for DESC LIMIT ?3";

/// The oldest schedule run of a schedule after a time (`first_run_after`, and the one
/// `reanchor_definition` shows its `record`), read from the index of one run per instant. Named,
/// as for `RECORDED_INSTANTS`: without statistics SQLite takes `job_runs_definition_history`,
/// and would step over every manual run after the time before finding none of its own.
const FIRST_RUN_AFTER: &str = "
SELECT id, scheduled_for, status, skip_reason, created_at FROM job_runs
    INDEXED BY job_runs_one_per_instant
WHERE definition_id = ?1 AND trigger = 'schedule' AND scheduled_for > ?2
ORDER BY scheduled_for LIMIT 1";

fn run_after_from_row(row: &Row<'_>) -> rusqlite::Result<RunAfterCursor> {
    Ok(RunAfterCursor {
        id: row.get(0)?,
        scheduled_for: row.get(1)?,
        status: status_from(2, row.get(2)?)?,
        skip_reason: row.get(3)?,
        created_at: row.get(4)?,
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

// ---- the health report: one query per question, each served by an index ----

/// Runs per state: the tally the schema keeps of runs folded (`job_run_tally`, a few rows per
/// schedule) plus the runs made since the last fold (at most an hour's, or 250,000 and a
/// minute's), whatever the history.
const RUNS_PER_STATUS: &str = "
SELECT status, sum(runs) FROM (
    SELECT status, runs FROM job_run_tally WHERE runs > 0
    UNION ALL
    SELECT status, 1 FROM job_runs NOT INDEXED
    WHERE id > (SELECT value FROM runner_state WHERE key = 'tally_through'))
GROUP BY status";
/// The pending run due the longest (`job_runs_due`).
const OLDEST_DUE: &str = concat!(
    run_brief!(),
    "
FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
WHERE r.status = 'pending' AND r.run_at <= ?1 AND d.paused = 0
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
ORDER BY r.lease_expires_at, r.id LIMIT ?1"
);
/// Runs cancelled while running whose job is still being stopped, of one schedule (?1) or of
/// all (?1 NULL), the earliest deadline first, at most ?2 rows: one per open attempt (a run's
/// newest first), or one with none. Only the runs `job_runs_stopping` holds, normally none.
const STOPPING_RUNS: &str = concat!(
    run_brief!(),
    ", a.attempt, a.host, a.runner_pid, a.child_pid, r.stopping_by
FROM job_runs r INDEXED BY job_runs_stopping
JOIN job_definitions d ON d.id = r.definition_id
LEFT JOIN job_attempts a ON a.run_id = r.id AND a.finished_at IS NULL
WHERE r.stopping_by IS NOT NULL AND (?1 IS NULL OR r.definition_id = ?1)
ORDER BY r.stopping_by, r.id, a.attempt DESC LIMIT ?2"
);

/// `STOPPING_RUNS` of one schedule (`definition_id`) or of all, on `conn` (a transaction's, for
/// the health report's snapshot).
fn stopping_runs(
    conn: &Connection,
    definition_id: Option<i64>,
    limit: usize,
) -> rusqlite::Result<Vec<StoppingView>> {
    let mut stmt = conn.prepare_cached(STOPPING_RUNS)?;
    let rows = stmt.query_map(params![definition_id, limit as i64], |r| {
        let c = RUN_BRIEF_COLUMNS;
        Ok(StoppingView {
            run: run_brief_from_row(r)?,
            attempt: r.get(c)?,
            host: r.get(c + 1)?,
            runner_pid: r.get(c + 2)?,
            child_pid: r.get(c + 3)?,
            stopping_by: r.get(c + 4)?,
        })
    })?;
    rows.collect()
}
/// Running runs whose lease expired (`job_runs_leases`).
const COUNT_EXPIRED_LEASES: &str =
    "SELECT count(*) FROM job_runs WHERE status = 'running' AND lease_expires_at < ?1";
/// Runs retrying, by the attempt they are on: a pending run with attempts behind it waits out
/// a backoff delay (its next attempt is attempt + 1); a running run past its first attempt is a
/// retry executing now.
///
/// Two arms, not one OR: each reads its status's partial index (`job_runs_due`,
/// `job_runs_running_by_definition`), which SQLite does not do for the terms of an OR.
const RETRIES_IN_FLIGHT: &str = "
SELECT retry_attempt, count(*)
FROM (SELECT attempt + 1 AS retry_attempt FROM job_runs WHERE status = 'pending' AND attempt >= 1
      UNION ALL
      SELECT attempt FROM job_runs WHERE status = 'running' AND attempt >= 2)
GROUP BY retry_attempt ORDER BY retry_attempt";
/// Error codes of recently finished attempts, most frequent first (`job_attempts_errors`).
const TOP_ERRORS: &str = "
SELECT error_code, count(*) AS failures FROM job_attempts
WHERE finished_at >= ?1 AND error_code IS NOT NULL
GROUP BY error_code ORDER BY failures DESC, error_code LIMIT ?2";
/// Runs that went dead recently, the latest first; count(*) OVER () is how many matched in all,
/// before LIMIT keeps a few (`job_runs_status`).
const DEAD_RECENT: &str = concat!(
    run_brief!(),
    ", count(*) OVER ()
FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
WHERE r.status = 'dead' AND r.finished_at >= ?1
ORDER BY r.finished_at DESC, r.id DESC LIMIT ?2"
);
const RUNNER_STATE: &str = "
SELECT key, value FROM runner_state
WHERE key IN ('last_tick_at', 'last_prune_at', 'last_manual_prune_at')";
/// The latest time any tick's clock read. Databases from before `clock_high_water` existed kept
/// `last_tick_at` as a maximum, which is the same thing.
const CLOCK_HIGH_WATER: &str = "
SELECT coalesce((SELECT value FROM runner_state WHERE key = 'clock_high_water'),
                (SELECT value FROM runner_state WHERE key = 'last_tick_at'))";
/// The oldest run kept: the first in `job_runs_history`'s order, found before the join. As a
/// plain join ordered and limited, SQLite planned it, once `ANALYZE` had counted a large
/// history, as a scan of every run per schedule and a sort (0.2 s at a million runs).
const OLDEST_RUN: &str = concat!(
    run_brief!(),
    "
FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
WHERE r.id = (SELECT id FROM job_runs ORDER BY scheduled_for, id LIMIT 1)"
);
/// Durations of recently finished attempts with their schedule: `job_attempts_finished` alone,
/// no look-up of each attempt's run.
const ATTEMPT_DURATIONS: &str = "
SELECT definition_id, duration_ms FROM job_attempts
WHERE finished_at >= ?1 AND duration_ms IS NOT NULL";

/// Per schedule and status: how many runs, when the latest finished. The folded runs' tally plus
/// the runs made since the last fold, as `RUNS_PER_STATUS`.
const JOB_RUN_STATS: &str = "
WITH counted (definition_id, status, runs, last_finished_at) AS (
    SELECT definition_id, status, runs, last_finished_at FROM job_run_tally WHERE runs > 0
    UNION ALL
    SELECT definition_id, status, count(*), max(finished_at) FROM job_runs NOT INDEXED
    WHERE id > (SELECT value FROM runner_state WHERE key = 'tally_through')
    GROUP BY definition_id, status)
SELECT d.name, c.status, coalesce(sum(c.runs), 0), max(c.last_finished_at), d.dead_runs_total,
       d.pruned_success_at, d.pruned_last_finished_at, d.pruned_last_status
FROM job_definitions d
LEFT JOIN counted c ON c.definition_id = d.id
GROUP BY d.id, c.status
ORDER BY d.name, c.status";

/// Fold the runs made since the last fold (ids in (?1, ?2]) into the tally. NOT INDEXED: read
/// by id, not a whole index in (definition_id, status) order to save a small sort.
const FOLD_RUN_TALLY: &str = "
INSERT INTO job_run_tally (definition_id, status, runs, last_finished_at)
SELECT definition_id, status, count(*), max(finished_at) FROM job_runs NOT INDEXED
WHERE id > ?1 AND id <= ?2
GROUP BY definition_id, status
ON CONFLICT (definition_id, status) DO UPDATE SET
    runs = runs + excluded.runs,
    last_finished_at = max(coalesce(last_finished_at, excluded.last_finished_at),
                           coalesce(excluded.last_finished_at, last_finished_at))";

/// The `history` query for the filters given, with its parameters. Only the filters given appear
/// in the WHERE clause, so SQLite picks the index that serves them (`job_runs_history`,
/// `job_runs_definition_history`, `job_runs_status_history`,
/// `job_runs_definition_status_history`); an `(:x IS NULL OR ...)` form would defeat that.
///
/// The indexes by status hold finished runs only. Pending and running runs, work in flight, are
/// read from their own partial indexes and sorted; named with INDEXED BY, because without
/// statistics SQLite would rather walk all of history in order, looking for them.
fn history_query(filter: &RunFilter) -> (String, Vec<(&'static str, rusqlite::types::Value)>) {
    use rusqlite::types::Value;
    let mut conditions: Vec<&str> = Vec::new();
    let mut values = vec![(":limit", Value::from(filter.limit as i64))];
    let mut in_flight_index = None;
    if let Some(id) = filter.definition_id {
        conditions.push("r.definition_id = :definition_id");
        values.push((":definition_id", Value::from(id)));
    }
    match filter.status {
        None => {}
        Some(status) if status.is_final() => {
            conditions.push("r.status = :status AND r.finished_at IS NOT NULL");
            values.push((":status", Value::from(status.as_str().to_string())));
        }
        Some(RunStatus::Pending) => {
            conditions.push("r.status = 'pending'");
            in_flight_index = Some(if filter.definition_id.is_some() {
                "job_runs_pending_by_definition"
            } else {
                "job_runs_due"
            });
        }
        Some(_) => {
            conditions.push("r.status = 'running'");
            in_flight_index = Some("job_runs_running_by_definition");
        }
    }
    if let Some(since) = filter.since {
        conditions.push("r.scheduled_for >= :since");
        values.push((":since", Value::from(since)));
    }
    let where_clause = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let view = match in_flight_index {
        Some(index) => RUN_VIEW.replace(
            "FROM job_runs r\n",
            &format!("FROM job_runs r INDEXED BY {index}\n"),
        ),
        None => RUN_VIEW.to_string(),
    };
    let sql =
        format!("{view}\n{where_clause}\nORDER BY r.scheduled_for DESC, r.id DESC LIMIT :limit");
    (sql, values)
}

fn run_brief_from_row(row: &Row<'_>) -> rusqlite::Result<RunBrief> {
    Ok(RunBrief {
        id: row.get(0)?,
        job: row.get(1)?,
        timezone: row.get(2)?,
        scheduled_for: row.get(3)?,
        run_at: row.get(4)?,
        attempt: row.get(5)?,
        max_attempts: row.get(6)?,
        error_code: row.get(7)?,
        finished_at: row.get(8)?,
    })
}

/// The runs pruning may delete: finished for good before `:cutoff` (never pending or running),
/// and with no attempt still open (a cancelled run whose processes are yet to be stopped keeps
/// the attempt that lets a tick find them). Served by `job_runs_status (status, finished_at)`.
const PRUNABLE_RUNS: &str = "
SELECT id FROM job_runs
WHERE status IN ('succeeded', 'dead', 'cancelled', 'skipped') AND finished_at < :cutoff
  AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.run_id = job_runs.id AND a.finished_at IS NULL)";

/// Before a prune deletes the runs with ids in JSON array ?1: each schedule keeps the latest
/// finish of its succeeded runs among them (`pruned_success_at`, for the last-success metric).
const KEEP_PRUNED_SUCCESS: &str = "
UPDATE job_definitions
SET pruned_success_at = max(coalesce(pruned_success_at, pruned.at), pruned.at)
FROM (SELECT definition_id, max(finished_at) AS at FROM job_runs
      WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'succeeded'
      GROUP BY definition_id) AS pruned
WHERE job_definitions.id = pruned.definition_id";

/// The claim (see `Store::claim` for the rule), as `claim_sql` completes it.
const CLAIM_SQL: &str = "
UPDATE job_runs
SET status = 'running',
    owner = :owner,
    lease_token = lower(hex(randomblob(16))),
    lease_expires_at = :lease_expires_at,
    heartbeat_at = :now,
    attempt = attempt + 1,
    started_at = coalesce(started_at, :now),
    running_alone = (SELECT CASE overlap WHEN 'forbid' THEN 1 END FROM job_definitions WHERE id = definition_id)
WHERE id IN (
    SELECT r.id
    FROM job_runs r {due_index} JOIN job_definitions d ON d.id = r.definition_id
    WHERE r.status = 'pending' AND r.run_at <= :now AND d.paused = 0 {only}
      AND (d.overlap = 'allow' OR (
            -- forbid: nothing of this schedule running, and only its oldest due run
            NOT EXISTS (SELECT 1 FROM job_runs o WHERE o.definition_id = r.definition_id AND o.status = 'running')
            -- nor while the job of a run of it cancelled while running is being stopped
            AND NOT EXISTS (SELECT 1 FROM job_runs c INDEXED BY job_runs_stopping
                            WHERE c.definition_id = r.definition_id AND c.stopping_by IS NOT NULL)
            AND r.id = (SELECT p.id FROM job_runs p
                        WHERE p.definition_id = r.definition_id AND p.status = 'pending' AND p.run_at <= :now
                        ORDER BY p.run_at, p.id LIMIT 1)))
    ORDER BY r.run_at, r.id
    LIMIT :batch)
RETURNING id, definition_id, (SELECT name FROM job_definitions WHERE id = definition_id), attempt, max_attempts,
          scheduled_for, command, workdir, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
          lease_token, leftovers";

/// The claim of a batch, or of one run (`claim_run`, `:run_id`, looked up by id). A batch reads
/// the due runs through their partial index, in its order, and stops at the batch, whatever the
/// statistics: once `ANALYZE` had counted a large history, SQLite planned it as a walk over every
/// unpaused schedule, and a sort.
fn claim_sql(one_run: bool) -> String {
    let (due_index, only) = if one_run {
        ("", "AND r.id = :run_id")
    } else {
        ("INDEXED BY job_runs_due", "")
    };
    CLAIM_SQL
        .replace("{due_index}", due_index)
        .replace("{only}", only)
}

/// Whether due work is left after a claim (`job_runs_due`). Runs held by a paused schedule are not
/// due work: a tick must not keep claiming for them. The schedule is looked up by id for each due
/// run, not joined: once `ANALYZE` had counted the tables, SQLite planned the join as a walk
/// over every unpaused schedule with a look into its pending runs, in every idle tick (1,000
/// schedules: 60 us; 100,000: milliseconds).
const MORE_DUE_SQL: &str = "
SELECT EXISTS (SELECT 1 FROM job_runs r
               WHERE r.status = 'pending' AND r.run_at <= ?1
                 AND (SELECT d.paused = 0 FROM job_definitions d WHERE d.id = r.definition_id))";

/// The open attempt of a run, with what identifies its processes and its runner.
const ATTEMPT_HOLDER: &str = "
SELECT a.run_id, a.attempt, a.lease_token, a.host, a.runner_pid, a.runner_start_time, a.child_pid,
       a.child_start_time, a.started_at
FROM job_attempts a";

/// The `ATTEMPT_HOLDER` columns, starting at column `first` of `row`.
fn attempt_holder_from_row(row: &Row<'_>, first: usize) -> rusqlite::Result<AttemptHolder> {
    Ok(AttemptHolder {
        run_id: row.get(first)?,
        attempt: row.get(first + 1)?,
        lease_token: row.get(first + 2)?,
        host: row.get(first + 3)?,
        runner_pid: row.get(first + 4)?,
        runner_start_time: row.get::<_, Option<i64>>(first + 5)?.map(|t| t as u64),
        child_pid: row.get(first + 6)?,
        child_start_time: row.get::<_, Option<i64>>(first + 7)?.map(|t| t as u64),
        started_at: row.get(first + 8)?,
    })
}

/// The attempt a LEFT JOIN found for a run from column `first` on, if it found one.
fn joined_attempt_holder(row: &Row<'_>, first: usize) -> rusqlite::Result<Option<AttemptHolder>> {
    match row.get::<_, Option<i64>>(first)? {
        Some(_) => attempt_holder_from_row(row, first).map(Some),
        None => Ok(None),
    }
}

/// A schedule's settings as parameters ?1 to ?13 (in `SETTINGS_COLUMNS` order, placeholders
/// `SETTINGS_VALUES`), then a statement's own parameters (?14 on): the one binding of those
/// columns, for the insert and the rewrite of a schedule.
struct SettingsParams<'a> {
    settings: &'a Settings,
    /// The policies, stored as their text.
    overlap: &'static str,
    catch_up: &'static str,
    leftovers: &'static str,
}

const SETTINGS_VALUES: &str = "?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13";

impl<'a> SettingsParams<'a> {
    fn of(settings: &'a Settings) -> SettingsParams<'a> {
        SettingsParams {
            settings,
            overlap: settings.overlap.as_str(),
            catch_up: settings.catch_up.as_str(),
            leftovers: settings.leftovers.as_str(),
        }
    }

    /// The settings, then `rest`.
    fn then(&'a self, rest: &[&'a dyn ToSql]) -> Vec<&'a dyn ToSql> {
        let s = self.settings;
        let mut params: Vec<&dyn ToSql> = vec![
            &s.cron,
            &s.timezone,
            &s.command,
            &s.workdir,
            &s.max_attempts,
            &s.timeout_secs,
            &s.backoff_base_secs,
            &s.backoff_max_secs,
            &self.overlap,
            &self.catch_up,
            &s.grace_secs,
            &s.paused,
            &self.leftovers,
        ];
        params.extend_from_slice(rest);
        params
    }
}

/// Insert a schedule; 0 rows when the name is taken (`ON CONFLICT DO NOTHING`).
fn insert_definition(
    tx: &Transaction<'_>,
    name: &str,
    s: &Settings,
    now: i64,
    next_fire_at: Option<i64>,
) -> rusqlite::Result<usize> {
    let settings = SettingsParams::of(s);
    tx.execute(
        &format!(
            "INSERT INTO job_definitions ({SETTINGS_COLUMNS}, name, materialized_through, next_fire_at,
                 created_at, updated_at, timing_changed_at)
             VALUES ({SETTINGS_VALUES}, ?14, ?15, ?16, ?15, ?15, ?15)
             ON CONFLICT (name) DO NOTHING"
        ),
        settings.then(&[&name, &now, &next_fire_at]).as_slice(),
    )
}

/// Rewrite a schedule's settings and cursor (edit, pause, resume, apply), bumping its revision;
/// with `expected_revision`, only if its revision is still that. 0 rows: it vanished or changed.
/// The cursor never moves back. The timing changed now if the cron or the zone differs from the
/// stored one, read under the write lock first (`Settings::timing_differs`: the same expression
/// spaced otherwise is no change). Cursor and time columns that cannot be read (a damaged row
/// being repaired) are rewritten from `d` and `now`.
fn rewrite_definition(
    tx: &Transaction<'_>,
    d: &Definition,
    now: i64,
    expected_revision: Option<i64>,
) -> rusqlite::Result<usize> {
    // A value of another type (a damaged row) reads as None: it differs.
    let stored = tx
        .query_row(
            "SELECT cron, timezone FROM job_definitions WHERE id = ?1",
            [d.id],
            |r| Ok((r.get::<_, String>(0).ok(), r.get::<_, String>(1).ok())),
        )
        .optional()?;
    let timing_changed = stored
        .is_none_or(|(cron, zone)| d.settings.timing_differs(cron.as_deref(), zone.as_deref()));
    let settings = SettingsParams::of(&d.settings);
    tx.execute(
        &format!(
            "UPDATE job_definitions SET ({SETTINGS_COLUMNS}) = ({SETTINGS_VALUES}),
                 materialized_through = CASE typeof(materialized_through)
                     WHEN 'integer' THEN max(materialized_through, ?15) ELSE ?15 END,
                 next_fire_at = ?16, updated_at = ?17,
                 created_at = CASE typeof(created_at) WHEN 'integer' THEN created_at ELSE ?17 END,
                 revision = CASE typeof(revision) WHEN 'integer' THEN revision + 1 ELSE 1 END,
                 timing_changed_at = CASE WHEN typeof(timing_changed_at) = 'integer' AND NOT ?20
                     THEN timing_changed_at ELSE ?17 END,
                 paused_until = ?19
             WHERE id = ?14 AND (?18 IS NULL OR revision IS ?18)"
        ),
        settings
            .then(&[
                &d.id,
                &d.materialized_through,
                &d.next_fire_at,
                &now,
                &expected_revision,
                &d.pause_end(),
                &timing_changed,
            ])
            .as_slice(),
    )
}

/// The running runs of the schedule named `name`: checked under the write lock before deleting
/// it, so no run of it can start between the check and the delete.
/// The runs of a schedule that stand in the way of removing it: running, or cancelled with an
/// attempt still open (its job is yet to be stopped, and that attempt's record is how a tick
/// finds it should its runner die).
fn running_runs_of(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = tx.prepare(
        "SELECT r.id FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = ?1
           AND (r.status = 'running'
                OR EXISTS (SELECT 1 FROM job_attempts a WHERE a.run_id = r.id AND a.finished_at IS NULL))
         ORDER BY r.id",
    )?;
    let rows = stmt.query_map([name], |r| r.get(0))?;
    rows.collect()
}

/// A migrated value as a parameter.
impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Integer(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Blob(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
        })
    }
}

/// Every column of the rows `sql` selects, as `Value`s (`runner migrate`).
fn read_rows(stmt: &mut Statement<'_>, table: Table, params: &[i64]) -> Result<Rows> {
    let columns: Vec<String> = stmt.column_names().map(String::from).collect();
    let mut rows = Vec::new();
    let mut query = stmt.query(rusqlite::params_from_iter(params))?;
    while let Some(row) = query.next()? {
        let mut values = Vec::with_capacity(columns.len());
        for (index, column) in columns.iter().enumerate() {
            let odd = |what: &str| {
                anyhow::anyhow!(
                    "{}.{column} holds {what}, which runner never writes; nothing was moved",
                    table.name()
                )
            };
            values.push(match row.get_ref(index)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(v) => Value::Integer(v),
                ValueRef::Text(v) => Value::Text(
                    String::from_utf8(v.to_vec()).map_err(|_| odd("text that is not UTF-8"))?,
                ),
                ValueRef::Blob(v) => Value::Blob(v.to_vec()),
                ValueRef::Real(_) => return Err(odd("a real number").into()),
            });
        }
        rows.push(values);
    }
    Ok(Rows { columns, rows })
}

impl Store for SqliteStore {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn schema(&self) -> SchemaVersions {
        SchemaVersions {
            found: self.found_version,
            current: MIGRATIONS.len() as i64,
        }
    }

    fn identity(&self) -> String {
        std::fs::canonicalize(&self.path)
            .unwrap_or_else(|_| self.path.clone())
            .display()
            .to_string()
    }

    fn add_definition(
        &mut self,
        name: &str,
        s: &Settings,
        now: i64,
        next_fire_at: Option<i64>,
    ) -> Result<Definition> {
        let tx = self.write()?;
        if insert_definition(&tx, name, s, now, next_fire_at)? == 0 {
            return Err(Failure::usage(format!(
                "a schedule named {name:?} already exists; use `runner schedule edit {name}` to change it"
            )).into());
        }
        let definition = tx
            .query_row(
                &format!("SELECT {DEFINITION_COLUMNS} FROM job_definitions WHERE name = ?1"),
                [name],
                |row| Ok(definition_from_row(row)),
            )?
            .map_err(Failure::database)?;
        tx.commit()?;
        Ok(definition)
    }

    fn update_definition(&mut self, d: &Definition, now: i64) -> Result<()> {
        let tx = self.write()?;
        if rewrite_definition(&tx, d, now, None)? == 0 {
            return Err(
                Failure::not_found(format!("schedule {:?} no longer exists", d.name)).into(),
            );
        }
        tx.commit()?;
        Ok(())
    }

    fn remove_definition(&mut self, name: &str) -> Result<Removal> {
        let tx = self.write()?;
        // Checked under the write lock: no run of it can start between the check and the delete.
        let running = running_runs_of(&tx, name)?;
        if !running.is_empty() {
            return Ok(Removal::Running(running));
        }
        let removed = tx.execute("DELETE FROM job_definitions WHERE name = ?1", [name])?;
        tx.commit()?;
        Ok(if removed > 0 {
            Removal::Removed
        } else {
            Removal::NotFound
        })
    }

    fn apply_definitions(&mut self, changes: &DefinitionChanges, now: i64) -> Result<Applied> {
        let tx = self.write()?;
        // Dropping `tx` without commit rolls back whatever came before a refusal.
        for name in &changes.remove {
            if !running_runs_of(&tx, name)?.is_empty() {
                return Ok(Applied::Running(name.clone()));
            }
            if tx.execute("DELETE FROM job_definitions WHERE name = ?1", [name])? == 0 {
                return Ok(Applied::Conflict(name.clone()));
            }
        }
        for d in &changes.update {
            if rewrite_definition(&tx, d, now, Some(d.revision))? == 0 {
                return Ok(Applied::Conflict(d.name.clone()));
            }
        }
        for (name, settings, next_fire_at) in &changes.add {
            if insert_definition(&tx, name, settings, now, *next_fire_at)? == 0 {
                return Ok(Applied::Conflict(name.clone()));
            }
        }
        tx.commit()?;
        Ok(Applied::Done)
    }

    fn definition(&self, name: &str) -> Result<Option<DefinitionRow>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {DEFINITION_COLUMNS} FROM job_definitions WHERE name = ?1"),
                [name],
                |row| Ok(definition_from_row(row)),
            )
            .optional()?)
    }

    fn definitions(&self) -> Result<Vec<DefinitionRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {DEFINITION_COLUMNS} FROM job_definitions ORDER BY name, id"
        ))?;
        let rows = stmt.query_map([], |row| Ok(definition_from_row(row)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn last_result(&self, definition_id: i64) -> Result<Option<LastResult>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, status, scheduled_for, error_code FROM job_runs
                 WHERE definition_id = ?1 AND status IN ('succeeded', 'dead', 'cancelled', 'skipped')
                   AND finished_at IS NOT NULL
                 ORDER BY scheduled_for DESC, id DESC LIMIT 1",
                [definition_id],
                |r| {
                    Ok(LastResult { run_id: r.get(0)?, status: r.get(1)?, scheduled_for: r.get(2)?, error_code: r.get(3)? })
                },
            )
            .optional()?)
    }

    fn record_tick(&mut self, now: i64) -> Result<Option<i64>> {
        let written_before = self.written;
        let tx = self.write_with(Commit::Deferred)?;
        let high_water: Option<i64> = tx.query_row(CLOCK_HIGH_WATER, [], |r| r.get(0))?;
        tx.execute(
            "INSERT INTO runner_state (key, value) VALUES ('last_tick_at', ?1), ('clock_high_water', ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [now, high_water.map_or(now, |high| high.max(now))],
        )?;
        tx.commit()?;
        if written_before != Written::More {
            self.written = Written::TickMarks;
        }
        Ok(high_water)
    }

    fn due_definitions(&self, now: i64, limit: Option<usize>) -> Result<Vec<DefinitionRow>> {
        let mut stmt = self.conn.prepare_cached(&due_definitions_query())?;
        // A negative LIMIT is none.
        let limit = limit.map_or(-1, |n| n as i64);
        let rows = stmt.query_map(params![now, limit], |row| Ok(definition_from_row(row)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn due_reader(&self, now: i64, read: HashSet<i64>) -> Result<Option<Box<dyn DueReader>>> {
        // Outside WAL mode, its reads would hold off the tick's commits.
        if self.wal.is_none() {
            return Ok(None);
        }
        let reader =
            SqliteDueReader::open(&self.path, now, read).map_err(|e| open_error(&self.path, e))?;
        Ok(Some(Box::new(reader)))
    }

    fn ended_pauses(&self, now: i64) -> Result<Vec<DefinitionRow>> {
        // Served by `job_definitions_pause_ends`.
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {DEFINITION_COLUMNS} FROM job_definitions
             WHERE {ENDED_PAUSE}
             ORDER BY paused_until, id"
        ))?;
        let rows = stmt.query_map([now], |row| Ok(definition_from_row(row)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn materialize(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        plan: &mut dyn FnMut(Option<i64>) -> Vec<NewRun>,
    ) -> Result<usize> {
        let tx = self.write_with(Commit::Deferred)?;
        let inserted = Materializer::new(&tx, now, actor)?.write(cursor, plan)?;
        tx.commit()?;
        Ok(inserted)
    }

    fn materialize_together(
        &mut self,
        batch: &mut [Materialization],
        now: i64,
        actor: &Actor,
        // The database's lock is the only one: there is no row to pass over.
        _locks: RowLocks,
    ) -> Result<Vec<Option<usize>>> {
        // One transaction, no savepoint per schedule: a savepoint copies every page it touches
        // into a statement journal, a tenth of the whole cost.
        let tx = self.write_with(Commit::Deferred)?;
        let mut materializer = Materializer::new(&tx, now, actor)?;
        let inserted = batch
            .iter_mut()
            .map(|m| materializer.write(m.cursor, &mut m.plan).map(Some))
            .collect::<Result<Vec<_>>>()?;
        drop(materializer);
        tx.commit()?;
        Ok(inserted)
    }

    fn expired_leases(&self, now: i64, limit: usize) -> Result<Vec<ExpiredLease>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT r.id, d.name, r.attempt, r.max_attempts, r.lease_token, r.lease_expires_at,
                    r.backoff_base_secs, r.backoff_max_secs,
                    a.run_id, a.attempt, a.lease_token, a.host, a.runner_pid, a.runner_start_time,
                    a.child_pid, a.child_start_time, a.started_at
             FROM job_runs r
             JOIN job_definitions d ON d.id = r.definition_id
             LEFT JOIN job_attempts a ON a.run_id = r.id AND a.attempt = r.attempt
             WHERE {EXPIRED_LEASE}
             ORDER BY r.lease_expires_at
             LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![now, limit as i64], |r| {
            Ok(ExpiredLease {
                run_id: r.get(0)?,
                job_name: r.get(1)?,
                attempt: r.get(2)?,
                retry: RetryPolicy::from_secs(r.get(3)?, r.get(6)?, r.get(7)?),
                lease_token: r.get(4)?,
                lease_expires_at: r.get(5)?,
                holder: joined_attempt_holder(r, 8)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn claim(&mut self, actor: &Actor, now: i64, lease_secs: i64, batch: usize) -> Result<Claimed> {
        self.claim_where(None, actor, now, lease_secs, batch)
    }

    fn anything_due(&self, now: i64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(MORE_DUE_SQL)?
            .query_row([now], |r| r.get(0))?)
    }

    fn pending_work(&self, now: i64, host: &str) -> Result<PendingWork> {
        Ok(self
            .conn
            .prepare_cached(&pending_work_query())?
            .query_row(params![now, host], |r| {
                Ok(PendingWork {
                    expired_leases: r.get(0)?,
                    orphaned_attempts: r.get(1)?,
                    overdue_stops: r.get(2)?,
                    ended_pauses: r.get(3)?,
                    due_schedules: r.get(4)?,
                    due_runs: r.get(5)?,
                })
            })?)
    }

    fn claim_run(
        &mut self,
        run_id: i64,
        actor: &Actor,
        now: i64,
        lease_secs: i64,
    ) -> Result<Option<ClaimedRun>> {
        let claimed = self.claim_where(Some(run_id), actor, now, lease_secs, 1)?;
        Ok(claimed.runs.into_iter().next())
    }

    fn record_starts(
        &mut self,
        starts: &[StartRecord],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<Fenced>> {
        // Durable before any gate opens: every deferred commit before it is on disk too.
        self.fenced_each_durably(starts, |tx, start| {
            // The lease must still be ours and unexpired: a tick that stalled between claim and
            // start (past its lease) must not start a command that recovery may already retry.
            let held = tx
                .prepare_cached(
                    "UPDATE job_runs SET lease_expires_at = ?3, heartbeat_at = ?4
                     WHERE id = ?1 AND lease_token = ?2 AND status = 'running' AND lease_expires_at >= ?4",
                )?
                .execute(params![start.run_id, start.lease_token, lease_expires_at, now])?;
            Ok(held == 1
                && tx
                    .prepare_cached(
                        "UPDATE job_attempts SET child_pid = ?4, child_start_time = ?5
                         WHERE run_id = ?1 AND attempt = ?2 AND lease_token = ?3 AND finished_at IS NULL",
                    )?
                    .execute(params![
                        start.run_id,
                        start.attempt,
                        start.lease_token,
                        start.child_pid,
                        start.child_start_time.map(|t| t as i64)
                    ])?
                    == 1)
        })
    }

    fn give_back(&mut self, claims: &[GivenBack], now: i64, actor: &Actor) -> Result<Vec<Fenced>> {
        self.fenced_each_durably(claims, |tx, claim| {
            // As the claim found it: `started_at` is the first attempt's start, and this one
            // never started.
            let back = tx
                .prepare_cached(
                    "UPDATE job_runs SET status = 'pending', owner = NULL, lease_token = NULL,
                         lease_expires_at = NULL, heartbeat_at = NULL, running_alone = NULL,
                         attempt = attempt - 1,
                         started_at = CASE WHEN attempt = 1 THEN NULL ELSE started_at END
                     WHERE id = ?1 AND lease_token = ?2 AND status = 'running' AND attempt = ?3",
                )?
                .execute(params![claim.run_id, claim.lease_token, claim.attempt])?;
            if back == 1 {
                tx.prepare_cached(
                    "DELETE FROM job_attempts
                     WHERE run_id = ?1 AND attempt = ?2 AND lease_token = ?3 AND finished_at IS NULL",
                )?
                .execute(params![claim.run_id, claim.attempt, claim.lease_token])?;
                insert_event(tx, claim.run_id, now, actor, &claim.event)?;
            }
            Ok(back == 1)
        })
    }

    fn heartbeat(
        &mut self,
        tokens: &[LeaseToken],
        now: i64,
        lease_expires_at: i64,
    ) -> Result<Vec<Fenced>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders = vec!["?"; tokens.len()].join(", ");
        let sql = format!(
            "UPDATE job_runs SET lease_expires_at = ?, heartbeat_at = ?
             WHERE status = 'running' AND lease_token IN ({placeholders}) RETURNING lease_token"
        );
        let tx = self.write()?;
        let held: Vec<LeaseToken> = {
            let mut stmt = tx.prepare(&sql)?;
            let values = [lease_expires_at, now]
                .into_iter()
                .map(rusqlite::types::Value::from)
                .chain(
                    tokens
                        .iter()
                        .map(|t| rusqlite::types::Value::from(t.as_str().to_string())),
                );
            let rows = stmt.query_map(rusqlite::params_from_iter(values), |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        tx.commit()?;
        Ok(tokens
            .iter()
            .map(|token| Fenced::landed_if(held.contains(token)))
            .collect())
    }

    fn finish_attempts(
        &mut self,
        ends: &[AttemptEnd],
        actor: &Actor,
        commit: Commit,
    ) -> Result<Vec<Fenced>> {
        let tx = match commit {
            Commit::Durable => self.write_then_sync()?,
            Commit::Deferred => self.write_with(commit)?,
        };
        let recorded = ends
            .iter()
            .map(|end| finish_in(&tx, end, actor))
            .collect::<Result<Vec<_>>>()?;
        tx.commit()?;
        if commit == Commit::Durable {
            self.synced()?;
        }
        Ok(recorded)
    }

    fn finish_then_claim_together(
        &mut self,
        ends: &[AttemptEnd],
        actor: &Actor,
        now: i64,
        lease_secs: i64,
        batch: usize,
    ) -> Option<Result<(Vec<Fenced>, Claimed)>> {
        let together = self.write_with(Commit::Deferred).and_then(|tx| {
            let finished = ends
                .iter()
                .map(|end| finish_in(&tx, end, actor))
                .collect::<Result<Vec<_>>>()?;
            let claimed = claim_in(&tx, None, actor, now, lease_secs, batch)?;
            tx.commit()?;
            Ok((finished, claimed))
        });
        Some(together)
    }

    fn sync(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        self.sync_wal()
    }

    fn open_attempt(&self, run_id: i64, attempt: u32) -> Result<Option<AttemptHolder>> {
        Ok(self
            .conn
            .query_row(
                &format!(
                    "{ATTEMPT_HOLDER}
                     WHERE a.run_id = ?1 AND a.attempt = ?2 AND a.finished_at IS NULL"
                ),
                params![run_id, attempt],
                |r| attempt_holder_from_row(r, 0),
            )
            .optional()?)
    }

    fn orphaned_attempts(&self, host: &str, limit: usize) -> Result<Vec<AttemptHolder>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "{ATTEMPT_HOLDER}
             JOIN job_runs r ON r.id = a.run_id
             WHERE {}
             ORDER BY a.id LIMIT ?2",
            orphaned_attempt("?1")
        ))?;
        let rows = stmt.query_map(params![host, limit as i64], |r| {
            attempt_holder_from_row(r, 0)
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn overdue_stops(&self, now: i64, limit: usize) -> Result<Vec<OverdueStop>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT r.id, r.stopping_by,
                    a.run_id, a.attempt, a.lease_token, a.host, a.runner_pid, a.runner_start_time,
                    a.child_pid, a.child_start_time, a.started_at
             FROM (SELECT r.id, r.stopping_by FROM job_runs r INDEXED BY job_runs_stopping
                   WHERE {OVERDUE_STOP}
                   ORDER BY r.stopping_by, r.id
                   LIMIT ?2) r
             LEFT JOIN job_attempts a ON a.run_id = r.id AND a.finished_at IS NULL
             ORDER BY r.stopping_by, r.id, a.attempt"
        ))?;
        let rows = stmt.query_map(params![now, limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, joined_attempt_holder(r, 2)?))
        })?;
        Ok(super::overdue_stops_of(
            rows.collect::<rusqlite::Result<Vec<_>>>()?,
        ))
    }

    fn release_stop(&mut self, run_id: i64, host: &str) -> Result<()> {
        let tx = self.write()?;
        tx.execute(
            &super::job_stopped_sql("?1", Some("?2")),
            params![run_id, host],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn close_orphaned_attempt(
        &mut self,
        holder: &AttemptHolder,
        now: i64,
        close: &OrphanClose,
        actor: &Actor,
    ) -> Result<bool> {
        let tx = self.write()?;
        let closed = close_orphan_in(&tx, holder, now, close, actor)?;
        tx.commit()?;
        Ok(closed)
    }

    fn close_never_started(
        &mut self,
        end: &AttemptEnd,
        holder: &AttemptHolder,
        closes: &NeverStartedCloses,
        actor: &Actor,
    ) -> Result<Fenced> {
        let tx = self.write_then_sync()?;
        let run: Option<(RunStatus, u32, Option<String>)> = tx
            .query_row(
                "SELECT status, attempt, lease_token FROM job_runs WHERE id = ?1",
                [holder.run_id],
                |r| Ok((status_from(0, r.get(0)?)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let fenced = match run {
            None => Fenced::LeaseLost,
            Some((status, attempt, held)) => {
                match closes.decide(holder, status, attempt, held.as_deref()) {
                    NeverStartedClose::Finish => finish_in(&tx, end, actor)?,
                    NeverStartedClose::Orphan(close) => {
                        close_orphan_in(&tx, holder, end.result.finished_at, close, actor)?;
                        Fenced::LeaseLost
                    }
                }
            }
        };
        tx.commit()?;
        self.synced()?;
        Ok(fenced)
    }

    fn enqueue(
        &mut self,
        definition_id: i64,
        run: &NewRun,
        now: i64,
        actor: &Actor,
    ) -> Result<i64> {
        let tx = self.write()?;
        let run_id = insert_one_run(&tx, definition_id, run, now, actor)?
            .ok_or_else(|| anyhow::anyhow!("run {} exists already", run.idempotency_key))?;
        tx.commit()?;
        Ok(run_id)
    }

    fn reanchor_definition(
        &mut self,
        cursor: CursorMove,
        now: i64,
        actor: &Actor,
        record: &dyn Fn(&RunAfterCursor) -> Option<NewRun>,
    ) -> Result<Option<Reanchored>> {
        let tx = self.write()?;
        let moved = tx.execute(
            "UPDATE job_definitions SET materialized_through = ?4, next_fire_at = ?5, updated_at = ?6,
                 revision = revision + 1
             WHERE id = ?1 AND materialized_through = ?2 AND revision = ?3",
            params![
                cursor.definition_id,
                cursor.expected_through,
                cursor.expected_revision,
                cursor.new_through,
                cursor.next_fire_at,
                now
            ],
        )?;
        if moved == 0 {
            return Ok(None);
        }
        let first_after = tx
            .query_row(
                FIRST_RUN_AFTER,
                params![cursor.definition_id, cursor.new_through],
                run_after_from_row,
            )
            .optional()?;
        let to_record = first_after.as_ref().and_then(record);
        // Cascades to their events (a skipped run has no attempts).
        let skips_forgotten = tx.execute(
            "DELETE FROM job_runs
             WHERE definition_id = ?1 AND trigger = 'schedule' AND status = 'skipped' AND scheduled_for > ?2",
            params![cursor.definition_id, cursor.new_through],
        )?;
        let runs_kept: i64 = tx.query_row(
            "SELECT count(*) FROM job_runs
             WHERE definition_id = ?1 AND trigger = 'schedule' AND scheduled_for > ?2",
            params![cursor.definition_id, cursor.new_through],
            |r| r.get(0),
        )?;
        let recorded = match to_record {
            // Not inserted: its instant has a run already, which tells of it.
            Some(run) => insert_one_run(&tx, cursor.definition_id, &run, now, actor)?.map(|_| run),
            None => None,
        };
        tx.commit()?;
        Ok(Some(Reanchored {
            skips_forgotten: skips_forgotten as u64,
            runs_kept: runs_kept as u64,
            recorded,
        }))
    }

    fn lower_clock_high_water(&mut self, now: i64) -> Result<Option<i64>> {
        let tx = self.write()?;
        let high_water: Option<i64> = tx.query_row(CLOCK_HIGH_WATER, [], |r| r.get(0))?;
        let lowered = match high_water {
            Some(high) if high > now => {
                tx.execute(
                    "INSERT INTO runner_state (key, value) VALUES ('clock_high_water', ?1)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [now],
                )?;
                Some(high)
            }
            _ => None,
        };
        tx.commit()?;
        Ok(lowered)
    }

    fn history(&self, filter: &RunFilter) -> Result<Vec<RunView>> {
        let (sql, values) = history_query(filter);
        let values: Vec<(&str, &dyn rusqlite::ToSql)> = values
            .iter()
            .map(|(name, value)| (*name, value as &dyn rusqlite::ToSql))
            .collect();
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(values.as_slice(), run_view_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn run(&self, run_id: i64) -> Result<Option<RunView>> {
        Ok(self
            .conn
            .query_row(
                &format!("{RUN_VIEW}\nWHERE r.id = ?1"),
                [run_id],
                run_view_from_row,
            )
            .optional()?)
    }

    fn runs_at_instants(&self, definition_id: i64, instants: &[i64]) -> Result<Vec<RunView>> {
        // The instants travel as one JSON array, however many there are.
        let instants = serde_json::to_string(instants)?;
        let mut stmt = self
            .conn
            .prepare(&format!("{RUN_VIEW}\n{RUNS_AT_INSTANTS}"))?;
        let rows = stmt.query_map(params![definition_id, instants], run_view_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn first_run_after(&self, definition_id: i64, instant: i64) -> Result<Option<RunAfterCursor>> {
        Ok(self
            .conn
            .query_row(
                FIRST_RUN_AFTER,
                params![definition_id, instant],
                run_after_from_row,
            )
            .optional()?)
    }

    fn recorded_instants(
        &self,
        definition_id: i64,
        through: i64,
        limit: usize,
    ) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare(RECORDED_INSTANTS)?;
        let rows = stmt.query_map(params![definition_id, through, limit as i64], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn stopping_runs(&self, definition_id: i64) -> Result<Vec<StoppingView>> {
        Ok(stopping_runs(
            &self.conn,
            Some(definition_id),
            RUNNING_LISTED,
        )?)
    }

    fn last_tick_at(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(LAST_TICK_AT, [], |r| r.get(0))
            .optional()?)
    }

    fn attempts(&self, run_id: i64) -> Result<Vec<AttemptView>> {
        let mut stmt = self.conn.prepare(
            "SELECT attempt, owner, host, runner_pid, child_pid, started_at, finished_at, duration_ms, outcome,
                    exit_code, error_code, error_detail, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes
             FROM job_attempts WHERE run_id = ?1 ORDER BY attempt",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(AttemptView {
                attempt: r.get(0)?,
                owner: r.get(1)?,
                host: r.get(2)?,
                runner_pid: r.get(3)?,
                child_pid: r.get(4)?,
                started_at: r.get(5)?,
                finished_at: r.get(6)?,
                duration_ms: r.get(7)?,
                outcome: r.get(8)?,
                exit_code: r.get(9)?,
                error_code: r.get(10)?,
                error_detail: r.get(11)?,
                stdout_tail: r.get(12)?,
                stderr_tail: r.get(13)?,
                stdout_bytes: r.get(14)?,
                stderr_bytes: r.get(15)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn events(&self, run_id: i64) -> Result<Vec<EventView>> {
        let mut stmt = self.conn.prepare(
            "SELECT at, kind, actor, detail FROM job_events WHERE run_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok(EventView {
                at: r.get(0)?,
                kind: r.get(1)?,
                actor: r.get(2)?,
                detail: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn health(&self, now: i64, recent_since: i64) -> Result<Health> {
        // One read transaction: every number below comes from the same snapshot.
        let tx = self.conn.unchecked_transaction()?;

        let mut counts: Vec<(RunStatus, i64)> = RunStatus::ALL.iter().map(|s| (*s, 0)).collect();
        {
            let mut stmt = tx.prepare(RUNS_PER_STATUS)?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let status = status_from(0, row.get(0)?)?;
                if let Some(entry) = counts.iter_mut().find(|(s, _)| *s == status) {
                    entry.1 = row.get(1)?;
                }
            }
        }

        let oldest_due = tx
            .query_row(OLDEST_DUE, [now], run_brief_from_row)
            .optional()?;
        let held_by_pause: i64 = tx.query_row(HELD_BY_PAUSE, [], |r| r.get(0))?;

        let running = {
            let mut stmt = tx.prepare(RUNNING_RUNS)?;
            let rows = stmt.query_map([RUNNING_LISTED as i64], |r| {
                let c = RUN_BRIEF_COLUMNS;
                Ok(RunningView {
                    run: run_brief_from_row(r)?,
                    owner: r.get(c)?,
                    host: r.get(c + 1)?,
                    attempt_started_at: r.get(c + 2)?,
                    heartbeat_at: r.get(c + 3)?,
                    lease_expires_at: r.get(c + 4)?,
                })
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()?
        };

        let expired_leases: i64 = tx.query_row(COUNT_EXPIRED_LEASES, [now], |r| r.get(0))?;
        let stopping = stopping_runs(&tx, None, RUNNING_LISTED)?;

        let retries_in_flight = {
            let mut stmt = tx.prepare(RETRIES_IN_FLIGHT)?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()?
        };

        let top_errors = {
            let mut stmt = tx.prepare(TOP_ERRORS)?;
            let rows = stmt.query_map(params![recent_since, RECENT_LISTED as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()?
        };

        let (dead_recent, dead_recent_runs) = {
            let mut stmt = tx.prepare(DEAD_RECENT)?;
            let rows = stmt.query_map(params![recent_since, RECENT_LISTED as i64], |r| {
                Ok((run_brief_from_row(r)?, r.get::<_, i64>(RUN_BRIEF_COLUMNS)?))
            })?;
            let rows = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            let total = rows.first().map_or(0, |(_, total)| *total);
            (total, rows.into_iter().map(|(run, _)| run).collect())
        };

        let (mut last_tick_at, mut last_prune_at) = (None, None);
        {
            let mut stmt = tx.prepare(RUNNER_STATE)?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let value: i64 = row.get(1)?;
                match row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)? {
                    "last_tick_at" => last_tick_at = Some(value),
                    // The automatic turn ('last_prune_at', named before manual prunes were recorded)
                    // or the last `runner prune`, whichever ran later.
                    "last_prune_at" | "last_manual_prune_at" => {
                        last_prune_at = last_prune_at.max(Some(value))
                    }
                    _ => {}
                }
            }
        }

        let clock_high_water: Option<i64> = tx.query_row(CLOCK_HIGH_WATER, [], |r| r.get(0))?;

        let oldest_run = tx
            .query_row(OLDEST_RUN, [], run_brief_from_row)
            .optional()?;

        // The files as they are on disk, next to the database SQLite opened (a symbolic link
        // resolved). Not the pages SQLite counts: those take in pages so far written only to the
        // `-wal`, which would be counted twice beside it.
        let db = self
            .conn
            .path()
            .map_or_else(|| self.path.clone(), PathBuf::from);
        let storage = Storage {
            database_bytes: std::fs::metadata(&db).map_or(0, |m| m.len()),
            wal_bytes: Some(files::wal_bytes(&db)),
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
    }

    fn attempt_durations(&self, since: i64) -> Result<Vec<(i64, i64)>> {
        let mut stmt = self.conn.prepare(ATTEMPT_DURATIONS)?;
        let rows = stmt.query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn job_run_stats(&self) -> Result<Vec<JobRunStats>> {
        let mut stmt = self.conn.prepare(JOB_RUN_STATS)?;
        let rows = stmt.query_map([], |r| {
            Ok(JobRunStats {
                job: r.get(0)?,
                status: r
                    .get::<_, Option<String>>(1)?
                    .map(|text| status_from(1, text))
                    .transpose()?,
                runs: r.get(2)?,
                last_finished_at: r.get(3)?,
                dead_runs_total: r.get(4)?,
                pruned_success_at: r.get(5)?,
                pruned_last_run: match (r.get(6)?, r.get::<_, Option<String>>(7)?) {
                    (Some(at), Some(text)) => LastRun::of(at, status_from(7, text)?),
                    _ => None,
                },
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn steer(&mut self, run_id: i64, request: Steer, now: i64, actor: &Actor) -> Result<Steered> {
        let tx = self.write()?;
        // Read and change under the same write lock: the state cannot move in between.
        let found = tx
            .query_row(
                "SELECT status, attempt, max_attempts FROM job_runs WHERE id = ?1",
                [run_id],
                |r| {
                    Ok(RunState {
                        status: status_from(0, r.get(0)?)?,
                        attempt: r.get(1)?,
                        max_attempts: r.get(2)?,
                    })
                },
            )
            .optional()?;
        let Some(state) = found else {
            return Ok(Steered::NotFound);
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
                "UPDATE job_runs SET status = 'pending', run_at = ?3, max_attempts = ?4,
                     finished_at = NULL
                 WHERE id = ?1 AND status = ?2",
                params![run_id, from, due_at, max_attempts],
            )?,
            // The CHECK constraints: only a running run holds a lease.
            RunChange::Cancel {
                at,
                detail,
                stop_grace_secs,
            } => tx.execute(
                "UPDATE job_runs SET status = 'cancelled', finished_at = ?3, owner = NULL, lease_token = NULL,
                     lease_expires_at = NULL, heartbeat_at = NULL, error_code = ?4, error_detail = ?5,
                     stopping_by = CASE status WHEN 'running' THEN lease_expires_at + ?6 END
                 WHERE id = ?1 AND status = ?2",
                params![run_id, from, at, ErrorCode::Cancelled.to_string(), detail, stop_grace_secs],
            )?,
        };
        insert_event(&tx, run_id, now, actor, &event)?;
        tx.commit()?;
        Ok(steered)
    }

    fn migrate_out(
        &mut self,
        with_history: bool,
        now: i64,
        actor: &Actor,
        moved_detail: &str,
        moved_event: &dyn Fn(u32) -> NewEvent,
        write: &mut dyn FnMut(&mut dyn MigrationBatches) -> anyhow::Result<()>,
    ) -> Result<MigratedOut> {
        // BEGIN IMMEDIATE: the write lock from here to the commit, so no tick materialises,
        // claims or finishes anything between the read and the retirement.
        let tx = self.write()?;
        let running = tx
            .prepare("SELECT id FROM job_runs WHERE status = 'running' ORDER BY id")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        if !running.is_empty() {
            return Ok(MigratedOut::Running(running));
        }
        let placeholder = |n| format!("?{n}");
        let mut batches =
            BatchReader::new(with_history, placeholder, |table, sql: &str, params| {
                read_rows(&mut *tx.prepare_cached(sql)?, table, params)
            });
        write(&mut batches)?;
        let counts = batches.finish()?;
        // Written elsewhere and committed there: retire everything here, so a tick left running
        // on this database runs none of it.
        tx.execute(
            "UPDATE job_definitions SET paused = 1, paused_until = NULL, revision = revision + 1,
                 updated_at = ?1",
            [now],
        )?;
        let pending = tx
            .prepare("SELECT id, attempt FROM job_runs WHERE status = 'pending' ORDER BY id")?
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, u32>(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for (run_id, attempt) in pending {
            tx.execute(
                "UPDATE job_runs SET status = 'cancelled', finished_at = ?2, error_code = ?3,
                     error_detail = ?4
                 WHERE id = ?1 AND status = 'pending'",
                params![run_id, now, ErrorCode::Cancelled.to_string(), moved_detail],
            )?;
            insert_event(&tx, run_id, now, actor, &moved_event(attempt))?;
        }
        tx.commit()?;
        Ok(MigratedOut::Done(counts))
    }

    fn import_migration(&mut self, batches: &mut dyn MigrationBatches) -> Result<Imported> {
        let tx = self.write()?;
        let existing = tx
            .prepare("SELECT name FROM job_definitions")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        let imported = super::import_batches(batches, &existing, &mut |table, columns, values| {
            let sql = super::insert_row_sql(table, columns, |n| format!("?{n}"));
            Ok(tx
                .prepare_cached(&sql)?
                .query_row(rusqlite::params_from_iter(values), |r| r.get(0))?)
        })?;
        if imported == Imported::Done {
            tx.commit()?;
        }
        Ok(imported)
    }

    fn prunable(&self, cutoff: i64) -> Result<PruneCounts> {
        let (runs, attempts, events): (i64, i64, i64) = self.conn.query_row(
            &format!(
                "WITH doomed AS ({PRUNABLE_RUNS})
                 SELECT (SELECT count(*) FROM doomed),
                        (SELECT count(*) FROM job_attempts WHERE run_id IN (SELECT id FROM doomed)),
                        (SELECT count(*) FROM job_events WHERE run_id IN (SELECT id FROM doomed))"
            ),
            named_params! { ":cutoff": cutoff },
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(PruneCounts {
            runs: runs as u64,
            attempts: attempts as u64,
            events: events as u64,
            left: LeftForLater::default(),
        })
    }

    fn prune_batch(&mut self, cutoff: i64, limit: usize) -> Result<PruneCounts> {
        let tx = self.write()?;
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare_cached(&format!("{PRUNABLE_RUNS} LIMIT :limit"))?;
            let rows = stmt.query_map(
                named_params! { ":cutoff": cutoff, ":limit": limit as i64 },
                |r| r.get(0),
            )?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        if ids.is_empty() {
            return Ok(PruneCounts::default());
        }
        let batch = serde_json::to_string(&ids)?;
        // Counted before the delete: rows removed by ON DELETE CASCADE are not reported by it.
        let (attempts, events): (i64, i64) = tx.query_row(
            "SELECT (SELECT count(*) FROM job_attempts WHERE run_id IN (SELECT value FROM json_each(?1))),
                    (SELECT count(*) FROM job_events WHERE run_id IN (SELECT value FROM json_each(?1)))",
            [&batch],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        tx.execute(KEEP_PRUNED_SUCCESS, [&batch])?;
        tx.execute(
            &super::keep_pruned_last_run_sql("id IN (SELECT value FROM json_each(?1))"),
            [&batch],
        )?;
        let runs = tx.execute(
            "DELETE FROM job_runs WHERE id IN (SELECT value FROM json_each(?1))",
            [&batch],
        )?;
        tx.commit()?;
        Ok(PruneCounts {
            runs: runs as u64,
            attempts: attempts as u64,
            events: events as u64,
            // One writer at a time: no schedule is being changed under this transaction.
            left: LeftForLater::default(),
        })
    }

    fn claim_tally_fold(&mut self, now: i64, every_secs: i64, backlog: i64) -> Result<Option<i64>> {
        // The automatic prune's turn-taking (a turn recorded in the future is taken too), or a
        // backlog: run ids only grow, so the ids above the mark bound the runs made since (the
        // largest id is the last entry of the table's b-tree). Not twice in a minute, so that
        // ticks started together do not each take a turn at the same backlog. Read first
        // without the write lock: nearly every tick finds the turn not due.
        const DUE: &str = "key = 'tally_folded_at' AND (value <= ?1 - ?2 OR value > ?1
            OR (value <= ?1 - 60
                AND (SELECT coalesce(max(id), 0) FROM job_runs)
                    - (SELECT value FROM runner_state WHERE key = 'tally_through') > ?3))";
        let due: bool = self.conn.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM runner_state WHERE {DUE})"),
            params![now, every_secs, backlog],
            |r| r.get(0),
        )?;
        if !due {
            return Ok(None);
        }
        // Deferred: a turn lost in a crash is taken again by the next tick.
        let tx = self.write_with(Commit::Deferred)?;
        let taken = tx.execute(
            &format!("UPDATE runner_state SET value = ?1 WHERE {DUE}"),
            params![now, every_secs, backlog],
        )?;
        let newest: i64 = tx.query_row("SELECT coalesce(max(id), 0) FROM job_runs", [], |r| {
            r.get(0)
        })?;
        tx.commit()?;
        Ok((taken == 1).then_some(newest))
    }

    fn fold_run_tally_batch(&mut self, newest: i64, limit: i64) -> Result<bool> {
        // Deferred: a batch lost in a crash loses the tally and its mark together.
        let tx = self.write_with(Commit::Deferred)?;
        // Read again under the write lock: a prune or a deletion since the last batch may have
        // lowered the mark, and it must never pass the largest run id left (schema.sql's
        // job_run_tally_delete says why).
        let (through, largest): (i64, i64) = tx.query_row(
            "SELECT (SELECT value FROM runner_state WHERE key = 'tally_through'),
                    (SELECT coalesce(max(id), 0) FROM job_runs)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let end = newest.min(largest);
        let upto = end.min(through.saturating_add(limit));
        if upto > through {
            tx.execute(FOLD_RUN_TALLY, params![through, upto])?;
            tx.execute(
                "UPDATE runner_state SET value = ?1 WHERE key = 'tally_through'",
                [upto],
            )?;
        }
        tx.commit()?;
        Ok(upto < end)
    }

    fn claim_auto_prune(&mut self, now: i64, every_secs: i64) -> Result<bool> {
        // Read first without the write lock, as the fold does: nearly every tick finds the turn
        // not due. (No turn recorded yet is due.)
        let due: bool = self.conn.query_row(
            "SELECT coalesce((SELECT value <= ?1 - ?2 OR value > ?1
                              FROM runner_state WHERE key = 'last_prune_at'), 1)",
            params![now, every_secs],
            |r| r.get(0),
        )?;
        if !due {
            return Ok(false);
        }
        let tx = self.write()?;
        // A turn recorded in the future means the clock went back (or --now was used): take it.
        // Taken again under the write lock: another tick may have taken it since the read.
        let taken = tx.execute(
            "INSERT INTO runner_state (key, value) VALUES ('last_prune_at', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value
             WHERE runner_state.value <= excluded.value - ?2 OR runner_state.value > excluded.value",
            params![now, every_secs],
        )?;
        tx.commit()?;
        Ok(taken == 1)
    }

    fn record_manual_prune(&mut self, at: i64) -> Result<()> {
        let tx = self.write()?;
        tx.execute(
            "INSERT INTO runner_state (key, value) VALUES ('last_manual_prune_at', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [at],
        )?;
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("runner.db"), OpenMode::CreateIfMissing)
            .expect("open store");
        (dir, store)
    }

    /// Take the fold turn at `now` (once per `every` seconds) and fold batch by batch, `limit`
    /// runs at a time, as the tick does; true if the turn was taken.
    fn fold(store: &mut SqliteStore, now: i64, every: i64, limit: i64) -> bool {
        let Some(newest) = store
            .claim_tally_fold(now, every, 1_000)
            .expect("fold turn")
        else {
            return false;
        };
        while store.fold_run_tally_batch(newest, limit).expect("fold") {}
        true
    }

    /// `runner_state`'s value for `key`, if it has one.
    fn state_value(store: &SqliteStore, key: &str) -> Option<i64> {
        store
            .conn
            .query_row(
                "SELECT value FROM runner_state WHERE key = ?1",
                [key],
                |r| r.get(0),
            )
            .optional()
            .expect("read runner_state")
    }

    /// The detail lines of `EXPLAIN QUERY PLAN sql` (parameters left unbound).
    fn plan(store: &SqliteStore, sql: &str) -> Vec<String> {
        let mut stmt = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect(sql);
        let mut rows = stmt.raw_query();
        let mut lines = Vec::new();
        while let Some(row) = rows.next().expect("plan row") {
            lines.push(row.get::<_, String>(3).expect("plan detail"));
        }
        lines
    }

    /// A full table scan: `SCAN t` with no index (subqueries and json_each are not tables).
    fn full_scans(lines: &[String]) -> Vec<&String> {
        lines
            .iter()
            .filter(|l| {
                l.starts_with("SCAN ")
                    && !l.contains(" USING ")
                    && !l.contains("json_each")
                    && !l.starts_with("SCAN (")
                    && !l.starts_with("SCAN doomed")
                    // A few rows per schedule, whatever the history.
                    && !l.starts_with("SCAN job_run_tally")
            })
            .collect()
    }

    #[test]
    fn immutable_uris_escape_what_a_uri_path_cannot_hold() {
        assert_eq!(
            immutable_uri(Path::new("/srv/runner.db")),
            "file:/srv/runner.db?immutable=1"
        );
        assert_eq!(
            immutable_uri(Path::new("/a b/x?#%.db")),
            "file:/a%20b/x%3F%23%25.db?immutable=1"
        );
    }

    /// A schedule's settings: `true` every minute, a minute's timeout.
    fn every_minute_true() -> Settings {
        Settings {
            command: "true".to_string(),
            timeout_secs: 60,
            backoff_max_secs: 60,
            ..Settings::defaults("* * * * *")
        }
    }

    /// A store with the schedules `names`, `true` every minute, due at 60, then forged past the
    /// schema's checks by the statements `forge`.
    fn due_at_60_then(names: &[&str], forge: &str) -> (tempfile::TempDir, SqliteStore) {
        let (dir, mut store) = store();
        let settings = every_minute_true();
        for name in names {
            store
                .add_definition(name, &settings, 0, Some(60))
                .expect("add");
        }
        store
            .conn
            .execute_batch(&format!("PRAGMA ignore_check_constraints = ON; {forge}"))
            .expect("forge");
        (dir, store)
    }

    /// Each row's schedule name, or `damaged NAME`.
    fn row_names(rows: &[DefinitionRow]) -> Vec<String> {
        rows.iter()
            .map(|row| match row {
                Ok(d) => d.name.clone(),
                Err(damaged) => format!("damaged {}", damaged.name().unwrap_or("?")),
            })
            .collect()
    }

    /// Rows forged past the schema's checks come back damaged, one problem per bad column, and
    /// never fail the read of the others.
    #[test]
    fn damaged_rows_name_their_columns() {
        let (_dir, store) = due_at_60_then(
            &["a", "b", "c"],
            "UPDATE job_definitions SET max_attempts = 5000000000, catch_up = 'some' WHERE name = 'a';
             UPDATE job_definitions SET cron = '* * *', backoff_max_secs = 1 WHERE name = 'b';",
        );
        let rows = store.definitions().expect("definitions");
        let columns = |row: &DefinitionRow| -> Vec<&'static str> {
            match row {
                Ok(_) => Vec::new(),
                Err(damaged) => damaged.problems.iter().map(|p| p.column).collect(),
            }
        };
        assert_eq!(columns(&rows[0]), ["max_attempts", "catch_up"]);
        assert_eq!(columns(&rows[1]), ["cron", "backoff_max_secs"]);
        assert!(rows[2].is_ok());
        let due = store.due_definitions(60, None).expect("due");
        assert_eq!(due.iter().filter(|row| row.is_err()).count(), 2);
        assert!(matches!(
            store.definition("a").expect("read"),
            Some(Err(damaged)) if damaged.name() == Some("a")
        ));
    }

    /// A tick reads the due schedules and those whose due-ness cannot be judged, each through
    /// its own index: never every schedule, however many there are (with statistics that say
    /// 100,000 of them, too). The undecidable ones still come back, damaged, whether due or not.
    #[test]
    fn the_due_schedules_query_reads_no_schedule_that_is_not_due() {
        let (_dir, mut store) = store();
        let settings = every_minute_true();
        for (name, next_fire_at) in [("due", 60), ("later", 600), ("when", 600), ("how", 600)] {
            store
                .add_definition(name, &settings, 0, Some(next_fire_at))
                .expect("add");
        }
        store
            .conn
            .execute_batch(
                "PRAGMA ignore_check_constraints = ON;
                 UPDATE job_definitions SET next_fire_at = 'soon' WHERE name = 'when';
                 UPDATE job_definitions SET paused = 2 WHERE name = 'how';",
            )
            .expect("forge");
        let mut due = row_names(&store.due_definitions(60, None).expect("due"));
        due.sort();
        assert_eq!(due, ["damaged how", "damaged when", "due"]);

        for statistics in [
            "",
            "ANALYZE;
             DELETE FROM sqlite_stat1;
             INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES
               ('job_definitions', 'job_definitions_due', '100000 1'),
               ('job_definitions', 'job_definitions_undecidable', '1 1 1'),
               ('job_definitions', 'sqlite_autoindex_job_definitions_1', '100000 1');
             ANALYZE sqlite_schema;",
        ] {
            store.conn.execute_batch(statistics).expect("statistics");
            let lines = plan(&store, &due_definitions_query());
            assert!(full_scans(&lines).is_empty(), "full scan: {lines:#?}");
            assert!(
                lines
                    .iter()
                    .any(|l| l.contains("USING INDEX job_definitions_undecidable")),
                "the undecidable schedules are not read through their index: {lines:#?}"
            );
        }
    }

    /// A tick's second connection reads the due schedules a batch at a time, each once and in
    /// order: never one the tick read itself, nor one returned before, nor one the tick has
    /// materialised meanwhile (no longer due); damaged rows too. Its query streams: no sort.
    #[test]
    fn the_due_reader_returns_each_due_schedule_once() {
        let (_dir, store) = due_at_60_then(
            &["a", "b", "c", "d", "e", "f"],
            "UPDATE job_definitions SET paused = 2 WHERE name = 'f';",
        );
        let id = |name: &str| -> i64 {
            store
                .conn
                .query_row(
                    "SELECT id FROM job_definitions WHERE name = ?1",
                    [name],
                    |r| r.get(0),
                )
                .expect("id")
        };
        let names = |rows: Result<Vec<DefinitionRow>>| row_names(&rows.expect("batch"));
        let mut reader = store
            .due_reader(60, HashSet::from([id("a")]))
            .expect("open")
            .expect("SQLite has a reader");
        assert_eq!(names(reader.next_batch(2)), ["b", "c"]);
        store
            .conn
            .execute(
                "UPDATE job_definitions SET next_fire_at = 120 WHERE name = 'd'",
                [],
            )
            .expect("materialise d");
        assert_eq!(names(reader.next_batch(10)), ["e", "damaged f"]);
        assert!(names(reader.next_batch(10)).is_empty());

        let lines = plan(&store, &due_definitions_query());
        assert!(
            !lines.iter().any(|l| l.contains("TEMP B-TREE")),
            "the due schedules are sorted before the first is returned: {lines:#?}"
        );
    }

    #[test]
    fn observation_queries_use_indexes() {
        let (_dir, store) = store();
        let queries = [
            ("runs per status", RUNS_PER_STATUS.to_string()),
            ("oldest due", OLDEST_DUE.to_string()),
            ("held by pause", HELD_BY_PAUSE.to_string()),
            ("running", RUNNING_RUNS.to_string()),
            ("expired leases", COUNT_EXPIRED_LEASES.to_string()),
            ("retries", RETRIES_IN_FLIGHT.to_string()),
            ("top errors", TOP_ERRORS.to_string()),
            ("dead recent", DEAD_RECENT.to_string()),
            ("oldest run", OLDEST_RUN.to_string()),
            ("durations", ATTEMPT_DURATIONS.to_string()),
            ("prunable", format!("{PRUNABLE_RUNS} LIMIT 5000")),
        ];
        for (name, sql) in &queries {
            let lines = plan(&store, sql);
            assert!(
                full_scans(&lines).is_empty(),
                "{name}: full table scan in {lines:#?}"
            );
        }
        // The durations come from their index alone: no attempt's run looked up.
        assert_eq!(
            plan(&store, ATTEMPT_DURATIONS),
            ["SEARCH job_attempts USING COVERING INDEX job_attempts_finished (finished_at>?)"]
        );
        // Everything but the oldest run (the first entry of an index read in order) reads a
        // range, or the whole of an index of pending or running runs only: never an index of
        // all runs.
        let of_unfinished_runs = [
            "job_runs_due",
            "job_runs_pending_by_definition",
            "job_runs_leases",
            "job_runs_running_by_definition",
        ];
        for (name, sql) in queries.iter().filter(|(name, _)| *name != "oldest run") {
            let lines = plan(&store, sql);
            let scans_all = |line: &String| {
                (line.starts_with("SCAN r ") || line.starts_with("SCAN job_runs "))
                    && !of_unfinished_runs
                        .iter()
                        .any(|index| line.ends_with(&format!("INDEX {index}")))
            };
            assert!(
                !lines.iter().any(scans_all),
                "{name}: scans all runs: {lines:#?}"
            );
        }
    }

    /// The tally's readers read runs only by id, from the last fold on: never an index of all.
    #[test]
    fn tally_readers_read_only_the_runs_made_since_the_last_fold() {
        let (_dir, store) = store();
        for sql in [RUNS_PER_STATUS, JOB_RUN_STATS, FOLD_RUN_TALLY] {
            let lines = plan(&store, sql);
            let runs: Vec<_> = lines.iter().filter(|l| l.contains("job_runs")).collect();
            assert_eq!(
                runs,
                [if sql == FOLD_RUN_TALLY {
                    "SEARCH job_runs USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"
                } else {
                    "SEARCH job_runs USING INTEGER PRIMARY KEY (rowid>?)"
                }],
                "{lines:#?}"
            );
        }
    }

    /// What `status` and `metrics` must show, counted from every run (as before the tally).
    const STATS_COUNTED: &str = "
        SELECT d.name, r.status, count(r.id), max(r.finished_at), d.dead_runs_total
        FROM job_definitions d LEFT JOIN job_runs r ON r.definition_id = d.id
        GROUP BY d.id, r.status ORDER BY d.name, r.status";
    const STATUS_COUNTED: &str = "SELECT status, count(*) FROM job_runs GROUP BY status";

    type StatsRow = (String, Option<String>, i64, Option<i64>, i64);

    fn stats_rows(conn: &Connection, sql: &str) -> Vec<StatsRow> {
        let mut stmt = conn.prepare(sql).expect(sql);
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .expect(sql);
        rows.collect::<rusqlite::Result<_>>().expect(sql)
    }

    fn status_rows(conn: &Connection, sql: &str) -> Vec<(String, i64)> {
        let mut stmt = conn.prepare(sql).expect(sql);
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect(sql);
        let mut rows = rows.collect::<rusqlite::Result<Vec<_>>>().expect(sql);
        rows.sort();
        rows
    }

    /// The tally's readers agree with counting every run.
    fn assert_tally_counts(store: &SqliteStore, when: &str) {
        assert_eq!(
            stats_rows(&store.conn, JOB_RUN_STATS),
            stats_rows(&store.conn, STATS_COUNTED),
            "per schedule, {when}"
        );
        assert_eq!(
            status_rows(&store.conn, RUNS_PER_STATUS),
            status_rows(&store.conn, STATUS_COUNTED),
            "per status, {when}"
        );
    }

    fn add_definitions(conn: &Connection, n: i64) {
        conn.execute(
            "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
             INSERT INTO job_definitions (name, cron, command, materialized_through, created_at,
                 updated_at)
             SELECT 'job-' || i, '* * * * *', 'true', 0, 0, 0 FROM seq",
            [n],
        )
        .expect("definitions");
    }

    /// One run of `definition` in `status`, finished at `finished_at`.
    fn add_run(
        conn: &Connection,
        key: i64,
        definition: i64,
        status: &str,
        finished_at: Option<i64>,
    ) {
        conn.execute(
            "INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
                 max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
                 idempotency_key, created_at, finished_at, owner, lease_token, lease_expires_at)
             VALUES (?1, 'manual', ?2, ?3, ?2, 'true', 3, 60, 1, 1, 'k' || ?2, 0, ?4,
                 CASE WHEN ?5 THEN 'o' END, CASE WHEN ?5 THEN 't' END, CASE WHEN ?5 THEN 1 END)",
            params![definition, key, status, finished_at, status == "running"],
        )
        .expect("run");
    }

    /// Whatever the writes, and whenever folds come between them, `status`'s counts and
    /// `metrics`' per-schedule figures equal counting every run: runs made (in any status),
    /// moved between statuses (a retry clears a finish), given an earlier finish, deleted (the
    /// latest finish of a bucket, the newest run, whose id SQLite then gives again), a schedule
    /// deleted with its runs.
    #[test]
    fn the_run_tally_counts_what_counting_every_run_would() {
        let (_dir, mut store) = store();
        add_definitions(&store.conn, 5);
        let finish_of = |status: &str, n: i64| match status {
            "pending" | "running" => None,
            _ => Some(1_000 + n % 97),
        };
        // A small deterministic generator: the same sequence of writes every run.
        let mut seed: i64 = 12_345;
        let mut next = |below: i64| {
            seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
            (seed >> 16) % below // the high bits: the low ones of this generator cycle quickly
        };
        let mut key = 0;
        let mut folds = 0;
        for step in 0..1_500 {
            let conn = &store.conn;
            let newest: i64 = conn
                .query_row("SELECT coalesce(max(id), 1) FROM job_runs", [], |r| {
                    r.get(0)
                })
                .expect("newest");
            let id = 1 + next(newest);
            match next(12) {
                0..=3 => {
                    key += 1;
                    let status =
                        RunStatus::ALL[next(RunStatus::ALL.len() as i64) as usize].as_str();
                    add_run(
                        conn,
                        key,
                        1 + next(5),
                        status,
                        finish_of(status, next(1_000)),
                    );
                }
                4..=6 => {
                    let status =
                        RunStatus::ALL[next(RunStatus::ALL.len() as i64) as usize].as_str();
                    let running = status == "running";
                    conn.execute(
                        "UPDATE job_runs SET status = ?2, finished_at = ?3,
                             owner = CASE WHEN ?4 THEN 'o' END, lease_token = CASE WHEN ?4 THEN 't' END,
                             lease_expires_at = CASE WHEN ?4 THEN 1 END
                         WHERE id = ?1",
                        params![id, status, finish_of(status, next(1_000)), running],
                    )
                    .expect("move");
                }
                7 => {
                    conn.execute(
                        "UPDATE job_runs SET finished_at = finished_at - 50 WHERE id = ?1",
                        [id],
                    )
                    .expect("earlier finish");
                }
                8 | 9 => {
                    // The latest finish of a bucket goes as often as any other run.
                    conn.execute(
                        "DELETE FROM job_runs WHERE id = (SELECT id FROM job_runs
                             WHERE definition_id = (SELECT definition_id FROM job_runs WHERE id = ?1)
                             ORDER BY finished_at DESC LIMIT 1) OR id = ?1",
                        [id],
                    )
                    .expect("delete");
                }
                10 => {
                    // The newest runs go: the next run made is given their ids again.
                    conn.execute(
                        "DELETE FROM job_runs WHERE id >= (SELECT max(id) FROM job_runs) - ?1",
                        [next(3)],
                    )
                    .expect("delete the newest");
                }
                _ => {
                    folds += i64::from(fold(&mut store, 1_000_000 + step, 0, next(4) + 1));
                }
            }
            assert_tally_counts(&store, &format!("after step {step}"));
        }
        assert!(folds > 50, "{folds} folds");
        store
            .conn
            .execute("DELETE FROM job_definitions WHERE id = 3", [])
            .expect("a schedule removed");
        assert_tally_counts(&store, "after removing a schedule");
        let left: i64 = store
            .conn
            .query_row(
                "SELECT count(*) FROM job_run_tally WHERE definition_id = 3",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(left, 0, "the schedule's buckets went with it");
    }

    /// A fold is taken at most once per interval, and folds every run made since the last one.
    #[test]
    fn the_run_tally_is_folded_at_most_once_an_hour() {
        let (_dir, mut store) = store();
        add_definitions(&store.conn, 1);
        let through = |store: &SqliteStore| state_value(store, "tally_through");
        // When init folded (nothing): the next turn is an hour after it.
        let now = state_value(&store, "tally_folded_at").expect("init's fold");
        assert!(!fold(&mut store, now, 3600, 100), "init counts as a fold");
        add_run(&store.conn, 1, 1, "succeeded", Some(10));
        add_run(&store.conn, 2, 1, "pending", None);
        assert_eq!(through(&store), Some(0));
        assert!(fold(&mut store, now + 3600, 3600, 100));
        assert_eq!(through(&store), Some(2));
        add_run(&store.conn, 3, 1, "pending", None);
        assert!(!fold(&mut store, now + 3600 + 1_800, 3600, 100));
        assert_eq!(through(&store), Some(2), "not folded twice in an hour");
        assert_tally_counts(&store, "with a run made since the fold");
    }

    /// Within the hour, a backlog of more runs than the tick's bound takes the turn, not twice in
    /// a minute, and a fold resets it.
    #[test]
    fn a_backlog_of_runs_is_folded_within_the_hour() {
        let (_dir, mut store) = store();
        add_definitions(&store.conn, 1);
        let through = |store: &SqliteStore| state_value(store, "tally_through");
        let folded = state_value(&store, "tally_folded_at").expect("init's fold");
        let turn = |store: &mut SqliteStore, at: i64| {
            store
                .claim_tally_fold(folded + at, 3600, 3)
                .expect("fold turn")
        };
        for key in 1..=3 {
            add_run(&store.conn, key, 1, "succeeded", Some(10 + key));
        }
        assert_eq!(turn(&mut store, 120), None, "3 runs wait: not more than 3");
        add_run(&store.conn, 4, 1, "dead", Some(20));
        assert_eq!(
            turn(&mut store, 59),
            None,
            "not within a minute of the last fold"
        );
        assert_eq!(turn(&mut store, 120), Some(4), "4 runs wait: folded");
        assert_eq!(
            turn(&mut store, 150),
            None,
            "a turn taken: not again in a minute"
        );
        while store.fold_run_tally_batch(4, 2).expect("fold") {}
        assert_eq!(through(&store), Some(4));
        assert_tally_counts(&store, "after the backlog's fold");
        for key in 5..=7 {
            add_run(&store.conn, key, 1, "succeeded", Some(30 + key));
        }
        assert_eq!(turn(&mut store, 300), None, "the fold reset the backlog");
    }

    /// A turn folds in batches, each its own transaction, and writes between them are counted
    /// exactly: the newest runs deleted after the turn was taken (their ids given again to new
    /// runs) leave the mark at the largest run id, never past it.
    #[test]
    fn a_fold_in_batches_counts_the_writes_between_them() {
        let (_dir, mut store) = store();
        add_definitions(&store.conn, 2);
        let through = |store: &SqliteStore| state_value(store, "tally_through");
        for key in 1..=10 {
            add_run(&store.conn, key, 1 + key % 2, "succeeded", Some(100 + key));
        }
        let now = state_value(&store, "tally_folded_at").expect("init's fold") + 3600;
        let newest = store.claim_tally_fold(now, 3600, 1_000).expect("turn");
        assert_eq!(newest, Some(10));
        assert!(
            store.fold_run_tally_batch(10, 4).expect("fold"),
            "more to fold"
        );
        assert_eq!(through(&store), Some(4));
        assert_tally_counts(&store, "after the first batch");
        store
            .conn
            .execute("DELETE FROM job_runs WHERE id >= 8", [])
            .expect("the newest runs go");
        add_run(&store.conn, 11, 1, "dead", Some(300));
        assert!(
            !store.fold_run_tally_batch(10, 4).expect("fold"),
            "all folded"
        );
        assert_eq!(
            through(&store),
            Some(8),
            "the largest run id, not the turn's newest"
        );
        assert_tally_counts(&store, "after the last batch");
        for key in 12..=14 {
            add_run(&store.conn, key, 2, "pending", None);
        }
        assert!(!store.fold_run_tally_batch(10, 4).expect("fold"));
        assert_eq!(through(&store), Some(10), "never past the turn's newest id");
        assert_tally_counts(&store, "with runs made after the turn");
    }

    /// Takes a database back to schema version 8: attempts without their schedule's id (and
    /// runs without `running_alone`, version 12, schedules without the pruned columns of
    /// versions 14 and 15, runs without `stopping_by`, version 16, schedules without
    /// `timing_changed_at`, version 17; versions 10 and 11 may be applied again).
    const BEFORE_ATTEMPT_SCHEDULE: &str = "ALTER TABLE job_definitions DROP COLUMN timing_changed_at;
        DROP INDEX job_runs_stopping;
        ALTER TABLE job_runs DROP COLUMN stopping_by;
        ALTER TABLE job_definitions DROP COLUMN pruned_last_status;
        ALTER TABLE job_definitions DROP COLUMN pruned_last_finished_at;
        ALTER TABLE job_definitions DROP COLUMN pruned_success_at;
        DROP INDEX job_runs_running_by_definition;
        ALTER TABLE job_runs DROP COLUMN running_alone;
        CREATE INDEX job_runs_running_by_definition ON job_runs (definition_id) WHERE status = 'running';
        DROP INDEX job_attempts_finished;
        ALTER TABLE job_attempts DROP COLUMN definition_id;
        CREATE INDEX job_attempts_finished ON job_attempts (finished_at, run_id, duration_ms)
            WHERE finished_at IS NOT NULL;
        PRAGMA user_version = 8;";

    /// A database made before attempts named their schedule (version 8) gets the id filled in
    /// for every attempt it holds, and `metrics`' durations count them under their schedules.
    #[test]
    fn migrating_gives_every_attempt_kept_its_schedule() {
        let (dir, store) = store();
        store
            .conn
            .execute_batch(BEFORE_ATTEMPT_SCHEDULE)
            .expect("downgrade");
        add_definitions(&store.conn, 2);
        for (key, definition) in [(1, 1), (2, 2), (3, 2)] {
            add_run(&store.conn, key, definition, "succeeded", Some(100 + key));
            store
                .conn
                .execute(
                    "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid,
                         lease_token, started_at, finished_at, duration_ms, outcome)
                     VALUES (?1, 1, 'o', 'h', 1, 't', 100, 100 + ?1, 1000 * ?1, 'succeeded')",
                    [key],
                )
                .expect("attempt");
        }
        drop(store);
        let store =
            SqliteStore::open(&dir.path().join("runner.db"), OpenMode::MustExist).expect("migrate");
        let mut durations = store.attempt_durations(0).expect("durations");
        durations.sort_unstable();
        assert_eq!(durations, [(1, 1000), (2, 2000), (2, 3000)]);
        assert_eq!(
            store.attempt_durations(103).expect("durations"),
            [(2, 3000)]
        );
    }

    /// A database made before the tally (schema version 7) gets every run it holds folded.
    #[test]
    fn migrating_to_the_tally_folds_the_runs_already_kept() {
        let (dir, store) = store();
        store
            .conn
            .execute_batch(BEFORE_ATTEMPT_SCHEDULE)
            .expect("downgrade");
        store
            .conn
            .execute_batch(
                "DROP TRIGGER job_run_tally_delete; DROP TRIGGER job_run_tally_update;
                 DROP TABLE job_run_tally;
                 DELETE FROM runner_state WHERE key IN ('tally_through', 'tally_folded_at');
                 PRAGMA user_version = 7;",
            )
            .expect("downgrade");
        add_definitions(&store.conn, 2);
        for (key, (definition, status, finished)) in [
            (1, "succeeded", Some(10)),
            (1, "succeeded", Some(30)),
            (1, "dead", Some(20)),
            (2, "pending", None),
        ]
        .into_iter()
        .enumerate()
        {
            add_run(&store.conn, key as i64, definition, status, finished);
        }
        drop(store);
        let store =
            SqliteStore::open(&dir.path().join("runner.db"), OpenMode::MustExist).expect("migrate");
        let tally: Vec<(i64, String, i64, Option<i64>)> = {
            let mut stmt = store
                .conn
                .prepare("SELECT * FROM job_run_tally ORDER BY 1, 2")
                .expect("tally");
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .expect("tally");
            rows.collect::<rusqlite::Result<_>>().expect("tally")
        };
        assert_eq!(
            tally,
            [
                (1, "dead".to_string(), 1, Some(20)),
                (1, "succeeded".to_string(), 2, Some(30)),
                (2, "pending".to_string(), 1, None),
            ]
        );
        assert_tally_counts(&store, "after migrating");
    }

    /// A tick's durable commit releases the write lock before its fsync (another connection may
    /// write at once), is durable after `synced`, and syncs the WAL file itself rather than
    /// making a commit of its own to sync it.
    #[test]
    fn a_ticks_durable_commit_syncs_the_wal_outside_the_write_lock() {
        let (dir, mut store) = store();
        assert!(store.wal.is_some(), "the store is in WAL mode");
        let tx = store.write_then_sync().expect("begin");
        tx.execute(
            "INSERT INTO runner_state (key, value) VALUES ('probe', 1)",
            [],
        )
        .expect("write");
        tx.commit().expect("commit");
        assert!(store.unsynced, "committed, not yet synced");

        let other = Connection::open(dir.path().join("runner.db")).expect("open");
        other
            .execute_batch(
                "BEGIN IMMEDIATE; UPDATE runner_state SET value = 2 WHERE key = 'probe'; COMMIT;",
            )
            .expect("another writer commits while the first has not synced yet");

        store.synced().expect("sync");
        assert!(!store.unsynced);
        assert_eq!(
            state_value(&store, "syncs"),
            None,
            "synced by a commit, not by an fsync of the WAL"
        );
    }

    #[test]
    fn anything_due_sees_pending_runs_whose_time_came_of_schedules_not_paused() {
        let (_dir, store) = store();
        add_definitions(&store.conn, 1);
        assert!(!store.anything_due(60).expect("read"), "no run at all");
        add_run(&store.conn, 120, 1, "pending", None);
        assert!(
            !store.anything_due(60).expect("read"),
            "not due before its time"
        );
        assert!(store.anything_due(120).expect("read"));
        store
            .conn
            .execute("UPDATE job_definitions SET paused = 1 WHERE id = 1", [])
            .expect("pause");
        assert!(
            !store.anything_due(120).expect("read"),
            "a paused schedule's run is not due work"
        );
    }

    /// A claim that finds nothing due takes no write lock: an idle tick (or a recheck) neither
    /// waits for a runner that is writing nor holds it up. Once a run is due, the claim takes
    /// the lock as before.
    #[test]
    fn a_claim_with_nothing_due_takes_no_write_lock() {
        let (dir, mut store) = store();
        add_definitions(&store.conn, 1);
        let actor = Actor {
            owner: "test:1".to_string(),
            host: "test".to_string(),
            pid: 1,
            start_time: None,
        };
        let other = Connection::open(dir.path().join("runner.db")).expect("open");
        other
            .execute_batch("BEGIN IMMEDIATE")
            .expect("hold the write lock");
        let claimed = store
            .claim(&actor, 60, 30, 8)
            .expect("a claim with nothing due does not wait for the lock");
        assert!(claimed.runs.is_empty() && !claimed.more_due);
        other.execute_batch("COMMIT").expect("release");

        add_run(&store.conn, 60, 1, "pending", None);
        let claimed = store.claim(&actor, 60, 30, 8).expect("claim");
        assert_eq!(claimed.runs.len(), 1);
    }

    /// SQLite is built without the options `.cargo/config.toml` leaves out: STAT4 (on an analyzed
    /// database it would read every index's samples at each open, and under QPSG they inform no
    /// plan), COLUMN_METADATA (every statement would work out its columns' origins when it is
    /// prepared, for APIs runner never calls) and the extensions runner never uses (registered
    /// on every connection); and without the memory statistics runner never reads (kept under a
    /// global mutex at every allocation).
    #[test]
    fn sqlite_is_built_without_what_runner_does_not_use() {
        let (_dir, store) = store();
        let mut stmt = store
            .conn
            .prepare("PRAGMA compile_options")
            .expect("prepare");
        let options: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("options");
        // Read for real: rusqlite's bundled build sets these.
        assert!(
            options.iter().any(|o| o == "ENABLE_API_ARMOR"),
            "{options:?}"
        );
        assert!(options.iter().any(|o| o == "THREADSAFE=1"), "{options:?}");
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
        for left_out in [
            "ENABLE_STAT4",
            "ENABLE_COLUMN_METADATA",
            "ENABLE_FTS3",
            "ENABLE_FTS5",
            "ENABLE_RTREE",
            "ENABLE_DBSTAT_VTAB",
        ] {
            assert!(
                !options.iter().any(|o| o == left_out),
                "{left_out}: {options:?}"
            );
        }
    }

    /// An idle tick's automatic-prune turn, like its claim, is a read while the turn is not due:
    /// it does not wait for another connection's write lock. A due turn (none recorded, an hour
    /// old, or recorded in the future) is taken once.
    #[test]
    fn a_prune_turn_not_due_takes_no_write_lock() {
        let (dir, mut store) = store();
        let (now, hour) = (1_000_000, 3600);
        store
            .conn
            .execute("DELETE FROM runner_state WHERE key = 'last_prune_at'", [])
            .expect("no turn recorded");
        assert!(store.claim_auto_prune(now, hour).expect("none recorded"));
        let other = Connection::open(dir.path().join("runner.db")).expect("open");
        other
            .execute_batch("BEGIN IMMEDIATE")
            .expect("hold the write lock");
        assert!(!store
            .claim_auto_prune(now + hour - 1, hour)
            .expect("a turn not due does not wait for the lock"));
        other.execute_batch("COMMIT").expect("release");
        assert!(store
            .claim_auto_prune(now + hour, hour)
            .expect("an hour on"));
        assert!(!store.claim_auto_prune(now + hour, hour).expect("taken"));
        assert!(store
            .claim_auto_prune(now, hour)
            .expect("the clock went back"));
        assert_eq!(state_value(&store, "last_prune_at"), Some(now));
    }

    /// What prune keeps of a schedule's last run does not depend on the batches or their order:
    /// runs of one second rank dead, cancelled, succeeded; a skipped run never counts; an
    /// earlier run never replaces a later one. And `job_run_stats` reads it back.
    #[test]
    fn the_pruned_last_run_is_the_same_whatever_the_batches() {
        let (_dir, store) = store();
        add_definitions(&store.conn, 1);
        let runs = [
            (1, "succeeded", 100),
            (2, "dead", 100),
            (3, "cancelled", 100),
            (4, "skipped", 200),
            (5, "succeeded", 90),
            (6, "dead", 99),
        ];
        for (key, status, finished_at) in runs {
            add_run(&store.conn, key, 1, status, Some(finished_at));
        }
        let keep =
            super::super::keep_pruned_last_run_sql("id IN (SELECT value FROM json_each(?1))");
        let forward: Vec<i64> = runs.iter().map(|(key, _, _)| *key).collect();
        let backward: Vec<i64> = forward.iter().rev().copied().collect();
        let mut orders: Vec<Vec<Vec<i64>>> = vec![vec![forward.clone()]];
        for order in [forward, backward] {
            for start in 0..order.len() {
                let rotated = order[start..].iter().chain(&order[..start]);
                orders.push(rotated.map(|id| vec![*id]).collect());
            }
        }
        for batches in orders {
            store
                .conn
                .execute(
                    "UPDATE job_definitions
                     SET pruned_last_finished_at = NULL, pruned_last_status = NULL",
                    [],
                )
                .expect("reset");
            for batch in &batches {
                let batch = serde_json::to_string(batch).expect("json");
                store.conn.execute(&keep, [&batch]).expect("keep");
            }
            let kept: (i64, String) = store
                .conn
                .query_row(
                    "SELECT pruned_last_finished_at, pruned_last_status FROM job_definitions",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .expect("kept");
            assert_eq!(kept, (100, "dead".to_string()), "{batches:?}");
        }
        let stats = store.job_run_stats().expect("stats");
        assert!(stats
            .iter()
            .all(|s| s.pruned_last_run == LastRun::of(100, RunStatus::Dead)));
    }

    /// The statistics `ANALYZE` gathers on a large history (a million runs, a thousand schedules,
    /// no run pending), which SQLite's planner weighs.
    fn forge_large_history_statistics(store: &SqliteStore) {
        store
            .conn
            .execute_batch(
                "ANALYZE;
                 DELETE FROM sqlite_stat1;
                 INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES
                   ('job_definitions', 'job_definitions_due', '1000 1000'),
                   ('job_definitions', 'sqlite_autoindex_job_definitions_1', '1000 1'),
                   ('job_runs', 'job_runs_definition_status_history', '1000000 1000 1000 1 1 1'),
                   ('job_runs', 'job_runs_status_history', '1000000 333334 1 1'),
                   ('job_runs', 'job_runs_status', '1000000 333334 1'),
                   ('job_runs', 'job_runs_history', '1000000 1 1'),
                   ('job_runs', 'job_runs_definition_history', '1000000 1000 1'),
                   ('job_runs', 'job_runs_one_per_instant', '1000000 1000 1'),
                   ('job_runs', 'sqlite_autoindex_job_runs_1', '1000000 1');
                 ANALYZE sqlite_schema;",
            )
            .expect("forge statistics");
    }

    /// Whether anything is due (an idle tick's look, and the check after each claim), and the claim
    /// of a batch, read the due pending runs and look each one's schedule up by id, whatever the
    /// statistics: never a walk over every schedule, which an idle tick would pay every minute,
    /// and a claim in every round while it holds the write lock.
    #[test]
    fn the_look_for_due_work_and_the_claim_read_due_runs_not_every_schedule() {
        let (_dir, store) = store();
        for analyzed in [false, true] {
            if analyzed {
                forge_large_history_statistics(&store);
            }
            for sql in [
                MORE_DUE_SQL.to_string(),
                pending_work_query(),
                claim_sql(false),
            ] {
                let lines = plan(&store, &sql);
                assert!(
                    lines
                        .iter()
                        .any(|l| l.starts_with("SEARCH r USING INDEX job_runs_due")),
                    "analyzed: {analyzed}: {lines:#?}"
                );
                assert!(
                    !lines.iter().any(|l| l.starts_with("SCAN d")),
                    "analyzed: {analyzed}: walks every schedule: {lines:#?}"
                );
            }
            // A cancelled run's job being stopped holds its `forbid` schedule back: one probe
            // per claimed run's schedule, and the idle tick's look for overdue ones reads only
            // such runs.
            let lines = plan(&store, &claim_sql(false));
            assert!(
                lines
                    .iter()
                    .any(|l| l.contains("INDEX job_runs_stopping (definition_id=?")),
                "analyzed: {analyzed}: {lines:#?}"
            );
            let lines = plan(&store, &pending_work_query());
            assert!(
                lines.iter().any(|l| l.contains("INDEX job_runs_stopping")),
                "analyzed: {analyzed}: {lines:#?}"
            );
        }
    }

    /// The observation queries again, with the statistics `ANALYZE` gathers on a large history (a
    /// million runs, a thousand schedules), which SQLite's planner weighs: no query may turn into
    /// a scan of every run.
    #[test]
    fn observation_queries_use_indexes_on_an_analyzed_large_history() {
        let (_dir, store) = store();
        forge_large_history_statistics(&store);
        for (name, sql) in [
            ("oldest run", OLDEST_RUN),
            ("oldest due", OLDEST_DUE),
            ("running", RUNNING_RUNS),
            ("stopping", STOPPING_RUNS),
            ("dead recent", DEAD_RECENT),
            ("job run stats", JOB_RUN_STATS),
        ] {
            let lines = plan(&store, sql);
            assert!(
                !lines.iter().any(|l| {
                    l.contains("TEMP B-TREE FOR ORDER BY")
                        && lines.iter().any(|l| {
                            l.starts_with("SEARCH r USING INDEX job_runs_definition_history")
                        })
                }),
                "{name}: reads every run of every schedule and sorts them: {lines:#?}"
            );
            assert!(
                full_scans(&lines).iter().all(|l| l.starts_with("SCAN d")),
                "{name}: full scan in {lines:#?}"
            );
        }
    }

    #[test]
    fn runs_at_instants_looks_each_instant_up() {
        let (_dir, store) = store();
        let lines = plan(&store, &format!("{RUN_VIEW}\n{RUNS_AT_INSTANTS}"));
        assert!(full_scans(&lines).is_empty(), "full scan: {lines:#?}");
        // One index probe per instant, whichever (definition_id, scheduled_for) index serves it.
        assert!(
            lines.iter().any(|l| l.starts_with("SEARCH r USING INDEX")
                && l.contains("(definition_id=? AND scheduled_for=?)")),
            "not an index probe per instant: {lines:#?}"
        );
        assert!(store
            .runs_at_instants(1, &[1, 2, 3])
            .expect("query")
            .is_empty());
        assert_eq!(store.last_tick_at().expect("query"), None);
    }

    /// A store on which `sql`'s plan is `expected`, one line, with SQLite's defaults and again with
    /// the statistics of a large history.
    fn planned_whatever_the_statistics(
        sql: &str,
        expected: &str,
    ) -> (tempfile::TempDir, SqliteStore) {
        let (dir, store) = store();
        for analyzed in [false, true] {
            if analyzed {
                forge_large_history_statistics(&store);
            }
            let lines = plan(&store, sql);
            assert_eq!(lines, vec![expected.to_string()], "analyzed: {analyzed}");
        }
        (dir, store)
    }

    /// `why` reads the instants of a schedule's latest runs of its own from the index that holds
    /// no manual run alone (no table row), with or without statistics: never a walk over the
    /// manual runs newer than them, however many, nor a sort.
    #[test]
    fn recorded_instants_read_schedule_runs_only() {
        let (_dir, store) = planned_whatever_the_statistics(
            RECORDED_INSTANTS,
            "SEARCH job_runs USING COVERING INDEX job_runs_one_per_instant \
             (definition_id=? AND scheduled_for<?)",
        );
        assert!(store
            .recorded_instants(1, i64::MAX, 1000)
            .expect("query")
            .is_empty());
    }

    /// `why` (for an instant ticks passed with no run) and `schedule reanchor` read a schedule's
    /// oldest run after a time from the index that holds one entry per instant of its own, with
    /// or without statistics: one probe from that time on, never a walk over its manual runs or
    /// over the history of every schedule, nor a sort.
    #[test]
    fn first_run_after_reads_the_schedules_next_instant_from_its_index() {
        let (_dir, store) = planned_whatever_the_statistics(
            FIRST_RUN_AFTER,
            "SEARCH job_runs USING INDEX job_runs_one_per_instant \
             (definition_id=? AND scheduled_for>?)",
        );
        assert!(store.first_run_after(1, 0).expect("query").is_none());
    }

    #[test]
    fn history_queries_read_only_what_they_show() {
        let (_dir, store) = store();
        for definition_id in [None, Some(1)] {
            for status in [
                None,
                Some(RunStatus::Dead),
                Some(RunStatus::Pending),
                Some(RunStatus::Running),
            ] {
                for since in [None, Some(0)] {
                    let filter = RunFilter {
                        definition_id,
                        status,
                        since,
                        limit: 50,
                    };
                    let lines = plan(&store, &history_query(&filter).0);
                    let shown = format!("{filter:?}: {lines:#?}");
                    assert!(full_scans(&lines).is_empty(), "full scan: {shown}");
                    // Newest first straight from an index: no sort of every matching run. Only
                    // pending and running runs, work in flight, come from their own indexes in
                    // another order and are sorted.
                    let in_flight = status.is_some_and(|s| !s.is_final());
                    assert!(
                        in_flight || !lines.iter().any(|l| l == "USE TEMP B-TREE FOR ORDER BY"),
                        "sorts: {shown}"
                    );
                    let filtered = definition_id.is_some() || status.is_some() || since.is_some();
                    let own_indexes = [
                        "job_runs_due",
                        "job_runs_pending_by_definition",
                        "job_runs_running_by_definition",
                    ];
                    if in_flight {
                        assert!(
                            lines.iter().any(|l| l.starts_with("S")
                                && own_indexes
                                    .iter()
                                    .any(|index| l.contains(&format!("r USING INDEX {index}")))),
                            "pending or running runs not read from their own index: {shown}"
                        );
                    } else if filtered {
                        assert!(
                            lines.iter().any(|l| l.starts_with("SEARCH r USING")),
                            "a filter without an index: {shown}"
                        );
                    }
                }
            }
        }
    }
}
