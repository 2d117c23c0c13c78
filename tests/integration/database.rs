//! Where the database lives, who may create it, and how the binary refuses a database it cannot
//! use: missing, corrupt, a directory, another program's, or from a newer runner. Also the
//! validation of `schedule add`: bad input exits 2, says what is wrong, and writes nothing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::common::{
    add_finished_history, forge_running, forge_stopping, json, mode, real_now, stderr, utc,
    Backend, Env, UNDO_JOB_STOPPING, UNDO_PRUNED_LAST_RUN, UNDO_TIMING_CHANGED,
};
use crate::sqlite_only;

/// Every path under `dir` (relative), sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            out.push(path.strip_prefix(dir).expect("prefix").to_path_buf());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

fn no_panic(err: &str) {
    assert!(
        !err.contains("panicked"),
        "a panic instead of an error:\n{err}"
    );
    assert!(!err.contains("RUST_BACKTRACE"), "{err}");
}

/// Commands that need an existing database. Commands this build does not have yet (clap's
/// "unrecognized subcommand") are skipped so the list can name those the contract promises.
const NEEDS_DATABASE: &[&[&str]] = &[
    &["tick"],
    &["schedule", "list"],
    &["schedule", "list", "--json"],
    &["schedule", "show", "x"],
    &["schedule", "next", "x"],
    &["schedule", "edit", "x", "--tz", "UTC"],
    &["schedule", "rm", "x"],
    &["schedule", "pause", "x"],
    &["schedule", "resume", "x"],
    &["run", "x"],
    &["history"],
    &["show", "1"],
    &["status"],
    &["retry", "1"],
    &["cancel", "1"],
    &["prune"],
    &["metrics"],
];

fn unknown_subcommand(err: &str) -> bool {
    err.contains("unrecognized subcommand")
}

// ---------------------------------------------------------------------------
// A missing database
// ---------------------------------------------------------------------------

#[test]
fn commands_other_than_init_and_add_refuse_a_missing_database_and_create_nothing() {
    sqlite_only!("a missing database file");
    let env = Env::new();
    let db = env.path("state/runner/runner.db");
    let shown = db.to_str().expect("utf-8");
    let mut checked = 0;
    for args in NEEDS_DATABASE {
        let out = env
            .cmd()
            .env("RUNNER_DB", &db)
            .args(*args)
            .output()
            .expect("spawn");
        let err = stderr(&out);
        if unknown_subcommand(&err) {
            continue;
        }
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(
            err.contains(shown),
            "{args:?} does not name the path: {err}"
        );
        no_panic(&err);
        assert!(
            tree(env.dir.path()).is_empty(),
            "{args:?} left {:?}",
            tree(env.dir.path())
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} commands checked");
}

/// Values that name no database outliving the command are bad input (exit 2), from `--db` and
/// from `RUNNER_DB` alike, and create nothing. `:memory:` (SQLite's in-memory database) let
/// `schedule add` say "added schedule x", store nothing, and leave an empty file `:memory:`. A
/// mistyped PostgreSQL URL (`postgres:/host/db`) became a SQLite file in the working directory
/// (on several hosts, one each); it is refused with the URL forms runner takes, and a password
/// in it is not repeated. So is a libpq key=value connection string.
#[test]
fn names_of_no_lasting_database_are_refused_and_create_nothing() {
    let env = Env::new();
    let cases: &[(&str, &str)] = &[
        (":memory:", "in-memory database"),
        ("postgres:/db.example.com/runner", "postgres://"),
        ("postgresql:/x", "postgres://"),
        ("sqlite:///abs/path", "./NAME"),
        ("file:x.db", "./NAME"),
        (
            "POSTGRES://runner:secret@db.example.com/runner",
            "lower case: postgres://runner:***@db.example.com/runner",
        ),
        // An @ left in the password: the rest of it was taken for the host, and shown.
        (
            "postgres://runner:se@secret@127.0.0.1:1/runner",
            "more than one @ before its host",
        ),
        // A libpq connection string became a SQLite file of that name, password and all.
        (
            "host=127.0.0.1 dbname=runner password=secret",
            "key=value connection string (host=...)",
        ),
    ];
    for &(value, says) in cases {
        for args in [
            &["init"][..],
            &[
                "schedule", "add", "x", "--cron", "@daily", "-q", "--", "true",
            ],
            &["schedule", "list"],
        ] {
            let by_flag = env
                .cmd()
                .args(["--db", value])
                .args(args)
                .output()
                .expect("spawn");
            let by_env = env
                .cmd()
                .env("RUNNER_DB", value)
                .args(args)
                .output()
                .expect("spawn");
            for (how, out) in [("--db", by_flag), ("RUNNER_DB", by_env)] {
                let err = stderr(&out);
                assert_eq!(out.status.code(), Some(2), "{how} {value} {args:?}: {err}");
                assert!(err.contains(says), "{how} {value} {args:?}: {err}");
                assert!(!err.contains("secret"), "{how} {value} {args:?}: {err}");
                no_panic(&err);
                assert!(
                    tree(env.dir.path()).is_empty(),
                    "{how} {value} {args:?} left {:?}",
                    tree(env.dir.path())
                );
            }
        }
    }
}

#[test]
fn init_and_schedule_add_create_the_database_0600_in_a_0700_directory() {
    sqlite_only!("file and directory modes");
    let env = Env::new();
    for (how, args) in [
        ("init", &["init"][..]),
        (
            "add",
            &["schedule", "add", "job", "--cron", "@daily", "--", "true"][..],
        ),
    ] {
        let db = env.path(&format!("{how}/deeper/runner.db"));
        let out = env
            .cmd()
            .env("RUNNER_DB", &db)
            .args(args)
            .output()
            .expect("spawn");
        assert!(out.status.success(), "{how}: {}", stderr(&out));
        assert_eq!(mode(&db), 0o600, "{how}: database mode");
        assert_eq!(mode(&env.path(how)), 0o700, "{how}: created directory");
        assert_eq!(
            mode(&env.path(&format!("{how}/deeper"))),
            0o700,
            "{how}: created directory"
        );
        // It is a runner database: the commands that need one now work on it.
        let out = env
            .cmd()
            .env("RUNNER_DB", &db)
            .args(["schedule", "list", "--json"])
            .output()
            .expect("spawn");
        assert!(out.status.success(), "{how}: {}", stderr(&out));
    }
    assert_eq!(
        Connection::open(env.path("add/deeper/runner.db"))
            .expect("open")
            .query_row("SELECT name FROM job_definitions", [], |r| r
                .get::<_, String>(0))
            .expect("row"),
        "job"
    );
}

#[test]
fn an_existing_directory_keeps_its_mode() {
    sqlite_only!("file and directory modes");
    let env = Env::new();
    let dir = env.path("shared");
    fs::create_dir(&dir).expect("mkdir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).expect("chmod");
    let db = dir.join("runner.db");
    let out = env
        .cmd()
        .env("RUNNER_DB", &db)
        .arg("init")
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&dir), 0o750, "an existing directory is not chmod-ed");
}

// ---------------------------------------------------------------------------
// The default location
// ---------------------------------------------------------------------------

#[test]
fn default_location_honours_xdg_state_home() {
    sqlite_only!("the default database file");
    let env = Env::new();
    let xdg = env.path("xdg");
    let out = env
        .cmd()
        .env_remove("RUNNER_DB")
        .env("XDG_STATE_HOME", &xdg)
        .arg("init")
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    let db = xdg.join("runner/runner.db");
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&xdg.join("runner")), 0o700);
    assert!(
        !env.path(".local").exists(),
        "HOME is not used when XDG_STATE_HOME is set"
    );
    // And the other commands find it there.
    let out = env
        .cmd()
        .env_remove("RUNNER_DB")
        .env("XDG_STATE_HOME", &xdg)
        .args(["schedule", "add", "job", "--cron", "@daily", "--", "true"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    let count: i64 = Connection::open(&db)
        .expect("open")
        .query_row("SELECT count(*) FROM job_definitions", [], |r| r.get(0))
        .expect("count");
    assert_eq!(count, 1);
}

#[test]
fn default_location_falls_back_to_home() {
    sqlite_only!("the default database file");
    let env = Env::new();
    let db = env.path(".local/state/runner/runner.db");
    let shown = db.to_str().expect("utf-8");

    // Missing: named, and nothing created.
    for args in [&["tick"][..], &["schedule", "list"][..]] {
        let out = env
            .cmd()
            .env_remove("RUNNER_DB")
            .args(args)
            .output()
            .expect("spawn");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(err.contains(shown), "{args:?} does not name {shown}: {err}");
        assert!(
            tree(env.dir.path()).is_empty(),
            "{:?}",
            tree(env.dir.path())
        );
    }
    // An empty XDG_STATE_HOME counts as unset.
    let out = env
        .cmd()
        .env_remove("RUNNER_DB")
        .env("XDG_STATE_HOME", "")
        .arg("init")
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&env.path(".local/state/runner")), 0o700);
    let out = env
        .cmd()
        .env_remove("RUNNER_DB")
        .args(["tick"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn db_flag_overrides_runner_db() {
    sqlite_only!("database files");
    let env = Env::new();
    let flag = env.path("flag.db");
    // env.cmd() sets RUNNER_DB to env.db; --db wins.
    let out = env
        .cmd()
        .args(["--db", flag.to_str().expect("utf-8"), "init"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(flag.exists());
    assert!(!env.db.exists(), "RUNNER_DB was used despite --db");
}

// ---------------------------------------------------------------------------
// Databases the binary must refuse
// ---------------------------------------------------------------------------

/// Run each command against `db`; each must exit 4 with a message (containing `says`) and
/// no panic.
fn refused(env: &Env, db: &Path, says: &str) {
    for args in [
        &["tick"][..],
        &["init"],
        &["schedule", "list"],
        &["schedule", "add", "job", "--cron", "@daily", "--", "true"],
    ] {
        let out = env
            .cmd()
            .env("RUNNER_DB", db)
            .args(args)
            .output()
            .expect("spawn");
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(4),
            "{args:?} on {}: {err}",
            db.display()
        );
        assert!(
            err.to_lowercase().contains(&says.to_lowercase()),
            "{args:?}: message should say {says:?}: {err}"
        );
        no_panic(&err);
    }
}

#[test]
fn a_file_of_garbage_is_refused_untouched() {
    sqlite_only!("a damaged database file");
    let env = Env::new();
    let db = env.path("runner.db");
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&db, &garbage).expect("write");
    refused(&env, &db, db.to_str().expect("utf-8"));
    assert_eq!(
        fs::read(&db).expect("read"),
        garbage,
        "the file was modified"
    );
    assert_eq!(
        tree(env.dir.path()),
        [PathBuf::from("runner.db")],
        "no stray files"
    );

    // Plain text too.
    fs::write(&db, "this is not a database\n").expect("write");
    refused(&env, &db, "not");
}

#[test]
fn a_runner_database_with_corrupt_pages_is_refused_without_a_panic() {
    sqlite_only!("a damaged database file");
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "job",
        "* * * * *",
        &[],
        "true",
    );
    env.ok(&["--now", "2026-01-01T00:30:00Z", "tick"]);
    let mut bytes = fs::read(&env.db).expect("read");
    assert!(bytes.len() > 3 * 4096, "{} bytes", bytes.len());
    // Keep the header page, scramble the rest.
    for (i, b) in bytes.iter_mut().enumerate().skip(4096) {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
    }
    fs::write(&env.db, &bytes).expect("write");
    for args in [
        &["tick"][..],
        &["schedule", "list"],
        &["schedule", "show", "job"],
    ] {
        let out = env.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(
            err.contains("malformed") || err.contains("corrupt"),
            "{args:?}: {err}"
        );
        no_panic(&err);
    }
}

#[test]
fn a_directory_as_the_database_is_refused() {
    sqlite_only!("a directory in place of the database file");
    let env = Env::new();
    let dir = env.path("a-directory");
    fs::create_dir(&dir).expect("mkdir");
    refused(&env, &dir, "directory");
    assert!(tree(&dir).is_empty(), "{:?}", tree(&dir));
}

/// A device or a FIFO is not a database: refused (exit 4) before SQLite makes a -journal beside
/// it.
#[test]
fn a_device_or_a_fifo_as_the_database_is_refused() {
    sqlite_only!("a device or a FIFO in place of the database file");
    let env = Env::new();
    refused(&env, Path::new("/dev/null"), "not a regular file");
    assert!(!Path::new("/dev/null-journal").exists());
    let fifo = env.path("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    refused(&env, &fifo, "not a regular file");
}

#[test]
fn a_database_from_a_newer_runner_is_refused() {
    sqlite_only!("PRAGMA user_version");
    let env = Env::init();
    env.add_at(None, "job", "@daily", &[], "true");
    Connection::open(&env.db)
        .expect("open")
        .execute_batch("PRAGMA user_version = 99")
        .expect("set version");
    refused(&env, &env.db, "99");
    let conn = env.sql.sqlite();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 99, "the newer database was not downgraded");
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        1
    );
}

/// A SQLite file with no tables (another program's new database, or what an `init` on a full disk
/// leaves) is not a runner database: a read or a tick refuses it untouched, as it does an empty
/// file, and only `init` (or `schedule add`) makes it one. Reads used to write the schema into it.
#[test]
fn an_empty_sqlite_database_is_refused_untouched_until_init() {
    sqlite_only!("a SQLite file with no tables");
    let env = Env::new();
    {
        let conn = Connection::open(&env.db).expect("create");
        conn.execute_batch("CREATE TABLE t (x); DROP TABLE t;")
            .expect("a header, no tables");
    }
    let before = fs::read(&env.db).expect("read");
    assert!(!before.is_empty());
    for args in [
        &["tick"][..],
        &["history"],
        &["status"],
        &["schedule", "list"],
    ] {
        let out = env.cmd().args(args).output().expect("spawn");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {err}");
        assert!(
            err.contains("is an empty SQLite database, not a runner database")
                && err.contains("runner init"),
            "{args:?}: {err}"
        );
        no_panic(&err);
        assert!(
            fs::read(&env.db).expect("read") == before,
            "{args:?} changed the file"
        );
    }
    env.ok(&["init"]);
    env.ok(&["status"]);
}

#[test]
fn a_sqlite_database_of_another_program_is_refused_untouched() {
    sqlite_only!("a SQLite file of another program");
    let env = Env::new();
    {
        let conn = Connection::open(&env.db).expect("create");
        conn.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices (total) VALUES (9.5);")
            .expect("other schema");
    }
    let before = fs::read(&env.db).expect("read");
    refused(&env, &env.db, "not a runner database");
    // Byte for byte: not even switched to WAL (a change to its header).
    assert!(
        fs::read(&env.db).expect("read") == before,
        "the file changed"
    );
    let tables = env.sql.query_strings(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        &[],
    );
    assert_eq!(
        tables,
        ["invoices"],
        "runner added tables to someone else's database"
    );
    let version: i64 = env
        .sql
        .sqlite()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 0);
}

// ---------------------------------------------------------------------------
// init and the schema
// ---------------------------------------------------------------------------

fn normalise_sql(sql: &str) -> String {
    sql.lines()
        .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")")
        // ALTER TABLE ADD COLUMN appends ", col ..." on the line after the last column.
        .replace(" ,", ",")
}

fn schema_of(conn: &Connection) -> Vec<(String, String, String, String)> {
    let mut stmt = conn
        .prepare(
            "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master
             WHERE name NOT LIKE 'sqlite_%' OR type = 'index' ORDER BY name",
        )
        .expect("prepare");
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                normalise_sql(&r.get::<_, String>(3)?),
            ))
        })
        .expect("query");
    rows.map(|r| r.expect("row")).collect()
}

#[test]
fn init_is_idempotent_and_keeps_data() {
    sqlite_only!("sqlite_master and PRAGMA user_version");
    let env = Env::init();
    let first = schema_of(&env.sql.sqlite());
    let version = env.sql.query_i64("PRAGMA user_version", &[]);
    assert!(version >= 1, "user_version {version}");
    assert!(first.iter().any(|(_, name, _, _)| name == "job_runs"));
    env.add_at(None, "job", "@daily", &[], "true");
    for _ in 0..2 {
        env.ok(&["init"]);
    }
    assert_eq!(schema_of(&env.sql.sqlite()), first);
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        1
    );
    assert_eq!(env.sql.query_i64("PRAGMA user_version", &[]), version);
    assert_eq!(mode(&env.db), 0o600);
}

#[test]
fn schema_sql_matches_the_schema_the_binary_creates() {
    sqlite_only!("schema.sql is the SQLite schema");
    let env = Env::init();
    let made = schema_of(&env.sql.sqlite());
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("schema.sql"))
        .expect("schema.sql");
    let reference = Connection::open(env.path("reference.db")).expect("open");
    reference.execute_batch(&text).expect("schema.sql runs");
    let documented = schema_of(&reference);
    assert!(made.len() >= 10, "{made:?}");
    for (a, b) in made.iter().zip(&documented) {
        assert_eq!(a, b, "schema.sql and the binary disagree");
    }
    assert_eq!(
        made.len(),
        documented.len(),
        "{made:#?}\nvs\n{documented:#?}"
    );
}

/// How many temporary b-trees the program of a run's insert opens: SQLite codes an IN list of
/// more than two constants in a CHECK as one, built again for every row.
fn temporary_btrees_per_run(conn: &Connection) -> usize {
    // A connection notices a new schema version when a statement reads the database, which
    // EXPLAIN does not.
    let _: i64 = conn
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .expect("read");
    let mut explain = conn
        .prepare(
            "EXPLAIN INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at,
                 idempotency_key, created_at, command, max_attempts, timeout_secs,
                 backoff_base_secs, backoff_max_secs)
             VALUES (1, 'manual', 0, 'pending', 0, 'k', 0, 'true', 1, 1, 0, 0)",
        )
        .expect("explain");
    explain
        .query_map([], |r| r.get::<_, String>(1))
        .expect("query")
        .map(|op| op.expect("opcode"))
        .filter(|op| op == "OpenEphemeral")
        .count()
}

const STATUS_CHECK_LIST: &str =
    "CHECK (status IN (''pending'', ''running'', ''succeeded'', ''dead'', ''cancelled'', ''skipped''))";
const STATUS_CHECK_PAIRS: &str =
    "CHECK (status IN (''pending'', ''running'') OR status IN (''succeeded'', ''dead'')
                             OR status IN (''cancelled'', ''skipped''))";

/// A database from before cancelled runs kept when their job must be stopped by (SQLite schema
/// version 15, PostgreSQL 10), holding a run cancelled while running whose attempt is still
/// open, migrates with that run's `stopping_by` at its cancel (so overdue: the next tick deals
/// with its job before the schedule's next run starts), and no other run's set: not a cancelled
/// run whose attempt was closed, nor a running one. `status` lists it as overdue; a tick on
/// another host than the job's leaves the job to that host and no longer waits for it.
#[test]
fn a_cancelled_run_with_an_open_attempt_migrates_overdue_to_be_stopped() {
    let env = Env::init();
    env.add("job", &[], "true");
    let (open, closed, running) = (env.enqueue("job"), env.enqueue("job"), env.enqueue("job"));
    let cancelled_at = real_now() - 3600;
    forge_stopping(&env, open, "far-host", cancelled_at, cancelled_at + 30);
    forge_stopping(&env, closed, "far-host", cancelled_at, cancelled_at + 30);
    env.sql.exec(
        "UPDATE job_attempts SET finished_at = started_at, outcome = 'failed' WHERE run_id = $1",
        &[&closed],
    );
    forge_running(&env, running);
    // As version 15 left it: no `stopping_by`, nor its index (nor version 17's column).
    for undo in UNDO_TIMING_CHANGED.into_iter().chain(UNDO_JOB_STOPPING) {
        env.sql.exec(undo, &[]);
    }
    let (old, new) = match Backend::current() {
        Backend::Sqlite => {
            env.sql
                .sqlite()
                .execute_batch("PRAGMA user_version = 15")
                .expect("downgrade");
            (15, 17)
        }
        Backend::Postgres => {
            env.sql
                .exec("DELETE FROM runner_schema_version WHERE version >= 11", &[]);
            (10, 12)
        }
    };
    let out = env.ok(&["init"]);
    assert!(
        out.starts_with("migrated ")
            && out.contains(&format!(" from schema version {old} to {new}")),
        "{out}"
    );
    let stopping_by = |run: i64| {
        env.sql
            .query_column("SELECT stopping_by FROM job_runs WHERE id = $1", &[&run])[0]
            .opt_i64()
    };
    assert_eq!(stopping_by(open), Some(cancelled_at));
    assert_eq!(stopping_by(closed), None);
    assert_eq!(stopping_by(running), None);

    let report = json(&env.ok(&["status", "--json"]));
    let stopping = report["stopping"].as_array().expect("stopping");
    assert_eq!(stopping.len(), 1, "{report}");
    assert_eq!(stopping[0]["run_id"], open);
    assert_eq!(stopping[0]["stopping_by_epoch"], cancelled_at);
    assert_eq!(stopping[0]["overdue"], true);
    assert_eq!(stopping[0]["host"], "far-host");

    env.tick_at(&utc(real_now()));
    assert_eq!(stopping_by(open), None);
    let report = json(&env.ok(&["status", "--json"]));
    assert_eq!(report["stopping"], serde_json::json!([]), "{report}");
}

/// A database from before schedules kept when their timing last changed (SQLite schema version
/// 16, PostgreSQL 11) migrates with each schedule's `timing_changed_at` at its `updated_at`: the
/// latest its timing can have changed, the best value known (for the paused schedule, later than
/// its timing changed). From then on only a change of cron or zone moves it.
#[test]
fn a_schedule_from_before_timing_changed_at_migrates_with_its_last_update() {
    let env = Env::init();
    for name in ["edited", "paused"] {
        env.add_at(Some("2026-11-23T08:30:00Z"), name, "0 * * * *", &[], "true");
    }
    let edit = |now: &str, args: &[&str]| {
        let mut all = vec!["--now", now, "schedule"];
        all.extend_from_slice(args);
        env.ok(&all);
    };
    edit(
        "2026-11-23T09:10:00Z",
        &["edit", "edited", "--cron", "30 * * * *", "-q"],
    );
    edit("2026-11-23T09:20:00Z", &["pause", "paused"]);
    for undo in UNDO_TIMING_CHANGED {
        env.sql.exec(undo, &[]);
    }
    let (old, new) = match Backend::current() {
        Backend::Sqlite => {
            env.sql
                .sqlite()
                .execute_batch("PRAGMA user_version = 16")
                .expect("downgrade");
            (16, 17)
        }
        Backend::Postgres => {
            env.sql
                .exec("DELETE FROM runner_schema_version WHERE version >= 12", &[]);
            (11, 12)
        }
    };
    let out = env.ok(&["init"]);
    assert!(
        out.starts_with("migrated ")
            && out.contains(&format!(" from schema version {old} to {new}")),
        "{out}"
    );
    let timing_changed = |name: &str| {
        utc(env.sql.query_i64(
            "SELECT timing_changed_at FROM job_definitions WHERE name = $1",
            &[&name.to_string()],
        ))
    };
    assert_eq!(timing_changed("edited"), "2026-11-23T09:10:00Z");
    assert_eq!(timing_changed("paused"), "2026-11-23T09:20:00Z");
    // A resume leaves it; a new zone moves it.
    edit("2026-11-23T09:30:00Z", &["resume", "paused"]);
    assert_eq!(timing_changed("paused"), "2026-11-23T09:20:00Z");
    edit(
        "2026-11-23T09:40:00Z",
        &["edit", "paused", "--tz", "Europe/Paris", "-q"],
    );
    assert_eq!(timing_changed("paused"), "2026-11-23T09:40:00Z");
}

/// Version 13 edits a CHECK's text in sqlite_schema (SQLite cannot ALTER one): the runs stay
/// valid, the database stays sound, another process's open connection reads the new text, and
/// the states allowed are the same.
#[test]
fn version_13s_status_check_migrates_and_every_connection_reads_it() {
    sqlite_only!("forges SQLite schema version 12");
    let env = Env::init();
    env.add("job", &[], "true");
    env.enqueue("job");
    env.ok(&["tick"]);
    let pending = env.enqueue("job");
    let watcher = env.sql.sqlite();
    assert_eq!(temporary_btrees_per_run(&watcher), 0);
    // As version 12 left it: the six states in one list (and no version 14 to 17 columns).
    for undo in UNDO_TIMING_CHANGED
        .into_iter()
        .chain(UNDO_JOB_STOPPING)
        .chain(UNDO_PRUNED_LAST_RUN)
    {
        env.sql.exec(undo, &[]);
    }
    env.sql.exec(
        "ALTER TABLE job_definitions DROP COLUMN pruned_success_at",
        &[],
    );
    let forge = env.sql.sqlite();
    let cookie: i64 = forge
        .query_row("PRAGMA schema_version", [], |r| r.get(0))
        .expect("schema_version");
    forge
        .execute_batch(&format!(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = replace(sql, '{STATUS_CHECK_PAIRS}', '{STATUS_CHECK_LIST}')
             WHERE name = 'job_runs';
             PRAGMA schema_version = {};
             PRAGMA writable_schema = OFF;
             PRAGMA user_version = 12;",
            cookie + 1
        ))
        .expect("downgrade");
    assert_eq!(temporary_btrees_per_run(&watcher), 1, "the forgery took");

    let out = env.ok(&["init"]);
    assert!(
        out.starts_with(&format!(
            "migrated {} from schema version 12 to 17",
            env.db.display()
        )),
        "{out}"
    );
    assert_eq!(temporary_btrees_per_run(&watcher), 0, "not read again");
    let check: String = watcher
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    let statuses = env.sql.query_i64(
        "SELECT count(*) FROM job_runs WHERE status IN ('pending', 'succeeded')",
        &[],
    );
    assert_eq!(statuses, 2);
    // Every state is still allowed ('running' with its lease), and nothing else.
    let set = |status: &str| {
        watcher.execute(
            "UPDATE job_runs SET status = ?1,
                 owner = iif(?1 = 'running', 'o', NULL),
                 lease_token = iif(?1 = 'running', 't', NULL),
                 lease_expires_at = iif(?1 = 'running', 1, NULL)
             WHERE id = ?2",
            rusqlite::params![status, pending],
        )
    };
    for status in [
        "running",
        "succeeded",
        "dead",
        "cancelled",
        "skipped",
        "pending",
    ] {
        assert_eq!(set(status).expect(status), 1, "{status}");
    }
    for status in ["bogus", "Pending", ""] {
        let refused = set(status).expect_err(status).to_string();
        assert!(refused.contains("CHECK constraint failed"), "{refused}");
    }
}

// ---------------------------------------------------------------------------
// Bad input to `schedule add`
// ---------------------------------------------------------------------------

/// (extra args before `--`, command after `--` or None for no `--`, what the message must name)
type Case = (
    &'static [&'static str],
    Option<&'static [&'static str]>,
    &'static [&'static str],
);

const TRUE: Option<&[&str]> = Some(&["true"]);

const BAD_ADD: &[Case] = &[
    // Cron expressions Debian cron rejects, or that could never fire.
    (&["--cron", "0 0 * * * *"], TRUE, &["6", "fields"]),
    (&["--cron", "0 0 L * *"], TRUE, &["day-of-month", "L"]),
    (&["--cron", "0 0 15W * *"], TRUE, &["day-of-month", "15W"]),
    (&["--cron", "0 0 * * 1#2"], TRUE, &["day-of-week", "1#2"]),
    (&["--cron", "0 0 ? * *"], TRUE, &["day-of-month", "?"]),
    (&["--cron", "0/10 * * * *"], TRUE, &["minute", "0/10"]),
    (&["--cron", "*/0 * * * *"], TRUE, &["minute", "*/0"]),
    (&["--cron", "1,,2 * * * *"], TRUE, &["minute", "1,,2"]),
    (&["--cron", "0 0 * MON *"], TRUE, &["month", "MON"]),
    (&["--cron", "0 0 * * JAN"], TRUE, &["day-of-week", "JAN"]),
    (
        &["--cron", "0 0 * * MONDAY"],
        TRUE,
        &["day-of-week", "MONDAY"],
    ),
    (&["--cron", "@reboot"], TRUE, &["@reboot"]),
    (
        &["--cron", "0 0 30 2 *"],
        TRUE,
        &["day-of-month", "30", "never"],
    ),
    (&["--cron", "@HOURLY"], TRUE, &["@HOURLY"]),
    (&["--cron", "60 * * * *"], TRUE, &["minute", "60"]),
    (&["--cron", ""], TRUE, &["empty"]),
    // Zone, durations, policies, numbers.
    (
        &["--cron", "@daily", "--tz", "Mars/Olympus_Mons"],
        TRUE,
        &["Mars/Olympus_Mons", "zone"],
    ),
    (
        &["--cron", "@daily", "--timeout", "5x"],
        TRUE,
        &["timeout", "5x"],
    ),
    (
        &["--cron", "@daily", "--grace", "-1s"],
        TRUE,
        &["grace", "-1s"],
    ),
    (&["--cron", "@daily", "--timeout", "0s"], TRUE, &["timeout"]),
    (
        &["--cron", "@daily", "--max-attempts", "0"],
        TRUE,
        &["max-attempts", "0"],
    ),
    (
        &["--cron", "@daily", "--max-attempts", "-1"],
        TRUE,
        &["max-attempts", "-1"],
    ),
    (
        &[
            "--cron",
            "@daily",
            "--backoff-base",
            "10m",
            "--backoff-max",
            "1m",
        ],
        TRUE,
        &["backoff-max", "backoff-base"],
    ),
    (
        &["--cron", "@daily", "--overlap", "sometimes"],
        TRUE,
        &["overlap", "sometimes"],
    ),
    (
        &["--cron", "@daily", "--catch-up", "most"],
        TRUE,
        &["catch-up", "most"],
    ),
    // Missing pieces.
    (&["--catch-up", "all"], TRUE, &["--cron"]),
    (&["--cron", "@daily"], None, &["command"]),
    (&["--cron", "@daily"], Some(&[" "]), &["command"]),
    (
        &["--cron", "@daily", "--workdir", "/no/such/dir/here"],
        TRUE,
        &["/no/such/dir/here"],
    ),
];

fn add_args<'a>(name: &'a str, case: &Case) -> Vec<&'a str> {
    let (flags, command, _) = case;
    let mut args = vec!["schedule", "add", name];
    args.extend_from_slice(flags);
    if let Some(command) = command {
        args.push("--");
        args.extend_from_slice(command);
    }
    args
}

fn assert_names(args: &[&str], err: &str, wants: &[&str]) {
    assert!(!err.trim().is_empty(), "{args:?}: no message");
    for want in wants {
        assert!(
            err.contains(want),
            "{args:?}: the message should name {want:?}:\n{err}"
        );
    }
    no_panic(err);
}

#[test]
fn bad_schedule_add_input_exits_2_and_writes_nothing() {
    let env = Env::init();
    env.add_at(Some("2026-01-01T00:00:00Z"), "taken", "@daily", &[], "true");
    let taken = env.sql.query_strings(
        "SELECT name || cron || command || updated_at FROM job_definitions",
        &[],
    );
    for case in BAD_ADD {
        let args = add_args("fresh", case);
        let err = env.fails(2, &args);
        assert_names(&args, &err, case.2);
        assert_eq!(
            env.sql.query_strings(
                "SELECT name || cron || command || updated_at FROM job_definitions",
                &[]
            ),
            taken,
            "{args:?} wrote something"
        );
    }
    // An empty name, a duplicate name.
    let err = env.fails(
        2,
        &["schedule", "add", "", "--cron", "@daily", "--", "true"],
    );
    assert_names(&["empty name"], &err, &["name", "empty"]);
    let err = env.fails(
        2,
        &[
            "--now",
            "2026-02-01T00:00:00Z",
            "schedule",
            "add",
            "taken",
            "--cron",
            "@hourly",
            "--",
            "false",
        ],
    );
    assert_names(&["duplicate"], &err, &["taken", "already exists"]);
    assert_eq!(
        env.sql.query_strings(
            "SELECT name || cron || command || updated_at FROM job_definitions",
            &[]
        ),
        taken,
        "the duplicate changed the existing schedule"
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
}

#[test]
fn bad_schedule_add_input_creates_no_database() {
    sqlite_only!("a database file not created");
    let env = Env::new();
    let db = env.path("state/runner.db");
    let run = |args: &[&str]| {
        let out = env
            .cmd()
            .env("RUNNER_DB", &db)
            .args(args)
            .output()
            .expect("spawn");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        stderr(&out)
    };
    for case in BAD_ADD {
        let args = add_args("fresh", case);
        let err = run(&args);
        assert_names(&args, &err, case.2);
        assert!(
            tree(env.dir.path()).is_empty(),
            "{args:?} left {:?}",
            tree(env.dir.path())
        );
    }
    let err = run(&["schedule", "add", "", "--cron", "@daily", "--", "true"]);
    assert_names(&["empty name"], &err, &["name"]);
    assert!(
        tree(env.dir.path()).is_empty(),
        "{:?}",
        tree(env.dir.path())
    );
}

/// Several processes using a database for the first time at once (cron starting ticks on many
/// hosts, a provisioning script adding schedules in parallel): all succeed, one database results.
#[test]
fn racing_first_use_creates_one_database() {
    sqlite_only!("creating the database file");
    for round in 0..10 {
        let env = Env::new();
        let db = env.path("fresh/runner.db");
        let children: Vec<_> = (0..8)
            .map(|i| {
                env.cmd()
                    .env("RUNNER_DB", &db)
                    .args([
                        "schedule",
                        "add",
                        &format!("s{i}"),
                        "--cron",
                        "@daily",
                        "--",
                        "true",
                    ])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("wait");
            assert!(out.status.success(), "round {round}: {}", stderr(&out));
        }
        let count: i64 = Connection::open(&db)
            .expect("open")
            .query_row("SELECT count(*) FROM job_definitions", [], |r| r.get(0))
            .expect("count");
        assert_eq!(count, 8, "round {round}");
        assert_eq!(mode(&db), 0o600);
    }
}

// ---- The files an idle tick leaves ----

/// A database with one schedule that never fires, ticked at whole minutes a day ahead of the real
/// clock (so no tick warns of a clock behind): `at(m)` is minute `m`, `base` minute 0.
struct IdleTicks {
    env: Env,
    base: i64,
}

impl IdleTicks {
    fn new() -> IdleTicks {
        let env = Env::init();
        env.add("job", &[], "true");
        let base = crate::common::real_now() / 60 * 60 + 86_400;
        IdleTicks { env, base }
    }

    fn at(&self, minute: i64) -> String {
        crate::common::utc(self.base + 60 * minute)
    }

    /// A tick at `minute`; returns the time it marked as its own (as a reader sees it): the time
    /// it read, which a busy machine makes a little later than its --now.
    fn tick(&self, minute: i64) -> i64 {
        self.env.tick_at(&self.at(minute));
        let marked = self.last_tick_at(false).expect("a tick mark");
        crate::common::assert_read_at(marked, &self.at(minute), 0, "the tick's mark");
        marked
    }

    /// Bytes in the database's `-wal` file (0 when there is none).
    fn wal_bytes(&self) -> u64 {
        fs::metadata(format!("{}-wal", self.env.db.display())).map_or(0, |m| m.len())
    }

    /// A read-only connection: to the database file alone (SQLite's immutable mode ignores the
    /// `-wal`), or as a reader sees it (it reads the `-wal`, and cannot checkpoint it).
    fn reader(&self, file_alone: bool) -> Connection {
        use rusqlite::OpenFlags;
        if file_alone {
            Connection::open_with_flags(
                format!("file:{}?immutable=1", self.env.db.display()),
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
            )
        } else {
            Connection::open_with_flags(&self.env.db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        }
        .expect("open read-only")
    }

    /// The last tick's time as stored, in the file alone or as a reader sees it.
    fn last_tick_at(&self, file_alone: bool) -> Option<i64> {
        self.reader(file_alone)
            .query_row(
                "SELECT value FROM runner_state WHERE key = 'last_tick_at'",
                [],
                |r| r.get(0),
            )
            .ok()
    }
}

/// A tick with nothing to do writes only its tick marks, whose loss in a power cut costs a
/// minute of "last tick": it leaves them in the `-wal` rather than copying them into the
/// database on close (four fsyncs a minute). Readers still see them. Anything else written is
/// checkpointed on close as before, so the database file alone holds every run and result.
#[test]
fn an_idle_tick_leaves_its_marks_in_the_wal_and_any_other_write_is_checkpointed() {
    sqlite_only!("SQLite's -wal file");
    let idle = IdleTicks::new();
    idle.tick(0);

    // Nothing due: the tick only records itself.
    let marked = idle.tick(1);
    let minute_1 = Some(marked);
    assert!(
        idle.wal_bytes() > 0,
        "the idle tick's marks are in the -wal"
    );
    assert_ne!(
        idle.last_tick_at(true),
        minute_1,
        "the file alone: not copied"
    );
    assert_eq!(idle.last_tick_at(false), minute_1, "a reader sees them");
    // Readers, and a tick that writes nothing at all, leave the -wal as it is.
    let status = crate::common::json(&idle.env.ok(&["--now", &idle.at(1), "status", "--json"]));
    assert_eq!(status["last_tick_at_epoch"], marked, "{status}");
    let minute_1 = Some(idle.tick(1));
    assert!(idle.wal_bytes() > 0);
    assert_ne!(idle.last_tick_at(true), minute_1);

    // A command that writes anything else checkpoints on close, the marks with it.
    idle.env.ok(&["--now", &idle.at(1), "run", "job"]);
    assert_eq!(idle.wal_bytes(), 0, "the run's write was checkpointed");
    assert_eq!(idle.last_tick_at(true), minute_1);
    // So does a tick that has work.
    let minute_2 = idle.tick(2);
    assert_eq!(
        idle.wal_bytes(),
        0,
        "the tick that ran the job checkpointed"
    );
    assert_eq!(idle.last_tick_at(true), Some(minute_2));
    let succeeded: i64 = idle
        .reader(true)
        .query_row(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(
        succeeded, 1,
        "the run's result is in the database file itself"
    );
}

/// Opening a database reads its whole `-wal` when no other connection has it open, so idle ticks
/// do not let it grow: the close that finds it past 256 KiB (about an hour of idle ticks)
/// checkpoints it.
#[test]
fn idle_ticks_never_grow_the_wal_past_its_limit() {
    sqlite_only!("SQLite's -wal file");
    let idle = IdleTicks::new();
    idle.tick(0);
    let mut checkpointed_at = None;
    for minute in 1..=120 {
        let marked = idle.tick(minute);
        let bytes = idle.wal_bytes();
        // The limit, plus the one tick's write that took it past.
        assert!(
            bytes <= 256 * 1024 + 64 * 1024,
            "minute {minute}: {bytes} bytes"
        );
        if bytes == 0 {
            checkpointed_at = Some(marked);
            break;
        }
    }
    let marked = checkpointed_at.expect("120 idle ticks never checkpointed the -wal");
    assert_eq!(idle.last_tick_at(true), Some(marked));
}

/// A user who can read the database but not write it (or its directory) reads the tick marks an
/// idle tick left in the `-wal`, as SQLite reads a WAL it cannot write. After a `chmod` of the
/// database, the `-wal` and `-shm` keep their old mode until the next tick gives them the
/// database's: until then the reader is told which file and why. As root, the reader is `nobody`
/// (setpriv); otherwise skipped.
#[test]
fn a_reader_who_cannot_write_reads_the_marks_an_idle_tick_left() {
    sqlite_only!("file permissions");
    if !crate::common::is_root() || !Path::new("/usr/bin/setpriv").exists() {
        println!("needs root and setpriv to read as another user: skipped");
        return;
    }
    let idle = IdleTicks::new();
    let db = &idle.env.db;
    let minute_0 = idle.tick(0);
    idle.tick(1);
    assert!(idle.wal_bytes() > 0);
    crate::common::chmod(idle.env.dir.path(), 0o755);
    crate::common::chmod(db, 0o644);
    let read_as_nobody = || {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(crate::common::BIN)
            .arg("--db")
            .arg(db)
            .args(["--now", &idle.at(2), "status", "--json"])
            .env_remove("RUNNER_DB")
            .env("HOME", "/")
            .current_dir("/")
            .output()
            .expect("setpriv")
    };
    let out = read_as_nobody();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("runner.db-wal is not readable by this user") && err.contains("runner tick"),
        "names the file and the fix: {err}"
    );

    let minute_2 = idle.tick(2);
    assert_eq!(mode(Path::new(&format!("{}-wal", db.display()))), 0o644);
    let out = read_as_nobody();
    assert!(out.status.success(), "{}", stderr(&out));
    let status = crate::common::json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(status["last_tick_at_epoch"], minute_2, "{status}");
    assert!(idle.wal_bytes() > 0, "the reader left the -wal as it was");
    assert_eq!(
        idle.last_tick_at(true),
        Some(minute_0),
        "and checkpointed nothing"
    );
}

/// A statement that changes much of a large history, inside a transaction (deleting a schedule
/// with its runs, here 200,000 of them with an event each), keeps its rollback journal in a
/// temporary file past 64 KiB, not in memory: held in memory, this one needed about 90 MB, and
/// 250 MB for 600,000 runs. Under a 64 MiB address-space limit it fails with "out of memory".
#[test]
fn removing_a_schedule_with_a_long_history_needs_little_memory() {
    sqlite_only!("SQLite's statement journals");
    let env = Env::init();
    env.add("big", &[], "true");
    env.add("small", &[], "true");
    add_finished_history(&env, "big", 200_000);
    env.ok_under_ulimit("-v 65536", &["schedule", "rm", "big"]);
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        0,
        "the runs went with their schedule"
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_events", &[]), 0);
}
