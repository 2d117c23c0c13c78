//! Damage and the smaller defects of issue 9: a damaged schedule row stops its own schedule only;
//! read-only users can read; durations are whole seconds; stored text is shown escaped; a bad
//! RUNNER_RETENTION says what it accepts; `schedule rm` does not kill a running run unasked.
//!
//! Damaged rows are forged with raw SQL, as a bad migration, a hand edit or another tool would
//! leave them. Tests that need another user run the binary as `nobody` with setpriv when they
//! run as root (permission bits do not bind root), and say so and return when they cannot.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use crate::common::{
    chmod, is_root, json, never, process_alive, stderr, stdout, wait_until, Bg, Env, BIN,
};
use crate::sqlite_only;

/// Damage past the schema's CHECK constraints and column types, as only SQLite lets a hand edit
/// or another tool do.
fn forge(env: &Env, sql: &str) {
    env.sql
        .sqlite()
        .execute_batch(&format!("PRAGMA ignore_check_constraints = ON; {sql}"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

// ---------------------------------------------------------------------------------------------
// stored text is shown escaped (item 9)
// ---------------------------------------------------------------------------------------------

/// `schedule show` used to print a command's escape sequences, newlines and bidi overrides raw.
#[test]
fn stored_commands_and_names_are_shown_escaped() {
    let env = Env::init();
    let command = "printf '\u{1b}[2J'\necho \u{202e}txt.exe\u{2066}";
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", command]);
    let shown = env.ok(&["schedule", "show", "a"]);
    let line = shown
        .lines()
        .find(|l| l.starts_with("command:"))
        .expect("command line");
    assert_eq!(
        line, "command:      printf '\\x1b[2J'\\necho \\u{202e}txt.exe\\u{2066}",
        "{shown}"
    );
    for raw in ['\u{1b}', '\u{202e}', '\u{2066}'] {
        assert!(!shown.contains(raw), "{raw:?} raw in {shown:?}");
    }

    // A name forged with a bidi override and an escape is escaped wherever it is printed.
    env.sql.exec(
        "UPDATE job_definitions SET name = $1 WHERE name = 'a'",
        &[&"evil\u{202e}gpj\u{1b}"],
    );
    env.ok(&["run", "evil\u{202e}gpj\u{1b}"]);
    // `status` names it too, as the oldest due run.
    for args in [
        &["schedule", "list"][..],
        &["history"],
        &["show", "1"],
        &["status"],
    ] {
        let out = env.ok(args);
        assert!(out.contains("evil\\u{202e}gpj\\x1b"), "{args:?}: {out}");
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{1b}'),
            "{args:?}: {out:?}"
        );
    }
    let out = env.ok(&["show", "1"]);
    assert!(out.contains("printf '\\x1b[2J'\\necho"), "{out}");

    // New names with bidi controls are refused.
    let err = env.fails(
        2,
        &[
            "schedule",
            "add",
            "a\u{202e}b",
            "--cron",
            &never(),
            "--",
            "true",
        ],
    );
    assert!(err.contains("bidi"), "{err}");
    assert!(!err.contains('\u{202e}'), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// RUNNER_RETENTION (item 9)
// ---------------------------------------------------------------------------------------------

/// An invalid RUNNER_RETENTION used to fail every tick with humantime's "(expected number at
/// 0)". Now the one line about it names the variable, its value and what it accepts.
#[test]
fn an_invalid_runner_retention_names_the_variable_and_its_syntax() {
    let env = Env::init();
    let out = env
        .cmd()
        .env("RUNNER_RETENTION", "soon")
        .arg("tick")
        .output()
        .expect("tick");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let lines = lines_with(&err, "RUNNER_RETENTION");
    assert_eq!(lines.len(), 1, "{err}");
    // One line per runner error, and no summary after it (cron mails exactly that line).
    assert_eq!(err.lines().count(), 1, "{err}");
    for needle in ["RUNNER_RETENTION=\"soon\"", "30d", "2160h", "off"] {
        assert!(lines[0].contains(needle), "{needle}: {err}");
    }
    assert!(!err.contains("expected number"), "{err}");

    let out = env
        .cmd()
        .env("RUNNER_RETENTION", "soon")
        .args(["prune", "--dry-run"])
        .output()
        .expect("prune");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("RUNNER_RETENTION=\"soon\""),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("30d"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------------------------
// durations are whole seconds (item 9)
// ---------------------------------------------------------------------------------------------

/// `--timeout 1.5s` used to be stored as 1 s. Every duration stored in whole seconds now refuses
/// a fraction with exit 2, naming the flag.
#[test]
fn sub_second_durations_are_refused_for_every_flag_stored_in_seconds() {
    let env = Env::init();
    for (flag, value) in [
        ("--timeout", "1.5s"),
        ("--backoff-base", "2500ms"),
        ("--backoff-max", "90.5s"),
        ("--grace", "500ms"),
    ] {
        let err = env.fails(
            2,
            &[
                "schedule",
                "add",
                "x",
                "--cron",
                &never(),
                flag,
                value,
                "--",
                "true",
            ],
        );
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(err.contains("whole seconds"), "{flag}: {err}");
    }
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        0
    );
    env.ok(&[
        "schedule",
        "add",
        "x",
        "--cron",
        &never(),
        "--timeout",
        "2s",
        "--",
        "true",
    ]);
    let err = env.fails(2, &["schedule", "edit", "x", "--timeout", "1.5s"]);
    assert!(
        err.contains("--timeout") && err.contains("whole seconds"),
        "{err}"
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT timeout_secs FROM job_definitions WHERE name = 'x'",
            &[]
        ),
        2
    );
}

// ---------------------------------------------------------------------------------------------
// read-only databases (item 9)
// ---------------------------------------------------------------------------------------------

/// Another user whose permission bits bind: `nobody` through setpriv when the tests run as root,
/// else this user. `None`, with a note on stdout, when neither works here.
struct Stranger {
    /// The directory the database lives in, owned by the stranger.
    dir: PathBuf,
    db: PathBuf,
    as_root: bool,
}

impl Stranger {
    /// Copy `env`'s database into a fresh directory of the stranger's.
    fn with_copy_of(env: &Env, test: &str) -> Option<Stranger> {
        let as_root = is_root();
        if as_root && !Path::new("/usr/bin/setpriv").exists() {
            println!("{test}: running as root without setpriv: skipped");
            return None;
        }
        chmod(env.dir.path(), 0o711);
        let dir = env.path("stranger");
        std::fs::create_dir(&dir).expect("mkdir");
        let db = dir.join("runner.db");
        std::fs::copy(&env.db, &db).expect("copy");
        if as_root {
            for path in [&dir, &db] {
                std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown");
            }
        }
        Some(Stranger { dir, db, as_root })
    }

    fn command(&self) -> Command {
        let mut cmd = if self.as_root {
            let mut cmd = Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
            cmd
        } else {
            Command::new(BIN)
        };
        cmd.arg("--db")
            .arg(&self.db)
            .env_remove("RUNNER_DB")
            .env("HOME", &self.dir)
            .current_dir("/");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("spawn")
    }

    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        // Let the temp dir be removed.
        chmod(&self.dir, 0o755);
    }
}

/// A database 0444 in a directory 0555: reads used to fail with exit 4 ("attempt to write a
/// readonly database"). They work now, leave no file behind, and a write says which file and
/// directory stop it.
#[test]
fn a_read_only_database_in_a_read_only_directory_can_be_read() {
    sqlite_only!("file permissions of the database and its WAL");
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", "echo hi"]);
    env.ok(&["run", "a"]);
    env.ok(&["tick"]);
    let Some(stranger) = Stranger::with_copy_of(&env, "read-only reads") else {
        return;
    };
    chmod(&stranger.db, 0o444);
    chmod(&stranger.dir, 0o555);
    for args in [
        &["history"][..],
        &["show", "1"],
        &["status"],
        &["schedule", "list"],
        &["schedule", "show", "a"],
        &["metrics"],
    ] {
        let out = stranger.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    assert!(stranger.run(&["history"]).stdout.starts_with(b" RUN"));
    assert_eq!(stranger.files(), ["runner.db"], "nothing left behind");

    let out = stranger.run(&["run", "a"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("read-only for this user"), "{err}");
    assert!(
        err.contains(&format!(
            "directory {} is not writable",
            stranger.dir.display()
        )),
        "names the directory: {err}"
    );
}

/// A database this user cannot reach (a directory above it it may not enter) or read (its own
/// mode) is said to be so: not "no runner database; create it with `runner init`", which would
/// send an operator who forgot `sudo -u runner` to make a second, empty database; and not as
/// SQLite's "unable to open database file" about an internal URI.
#[test]
fn an_unreachable_or_unreadable_database_is_not_called_missing() {
    sqlite_only!("file permissions of the database");
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", "echo hi"]);
    let Some(stranger) = Stranger::with_copy_of(&env, "unreachable database") else {
        return;
    };
    // The database's directory closed to the stranger.
    if stranger.as_root {
        std::os::unix::fs::chown(&stranger.dir, Some(0), Some(0)).expect("chown");
    }
    chmod(&stranger.dir, 0o700);
    if !stranger.as_root {
        chmod(&stranger.dir, 0o000);
    }
    for args in [&["status"][..], &["init"], &["schedule", "list"], &["tick"]] {
        let out = stranger.run(args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("cannot reach {}", stranger.db.display()))
                && err.contains("ermission denied")
                && err.contains(&format!("(in {})", stranger.dir.display())),
            "{args:?}: {err}"
        );
        assert!(!err.contains("runner init"), "{args:?}: {err}");
    }
    let out = stranger.run(&["doctor"]);
    let report = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        report.contains(&format!("cannot reach {}", stranger.db.display()))
            && !report.contains("does not exist"),
        "{report}"
    );

    // The directory open again, the file itself unreadable.
    chmod(&stranger.dir, 0o755);
    if stranger.as_root {
        std::os::unix::fs::chown(&stranger.db, Some(0), Some(0)).expect("chown");
    }
    chmod(&stranger.db, 0o000);
    for args in [&["status"][..], &["history"], &["init"]] {
        let out = stranger.run(args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "cannot read {}: permission denied",
                stranger.db.display()
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("immutable"), "{args:?}: {err}");
    }
    chmod(&stranger.db, 0o644);
}

/// A -wal with changes not yet in the database file cannot be read without creating -shm: the
/// message says exactly that instead of "attempt to write a readonly database".
#[test]
fn a_pending_wal_in_a_read_only_directory_is_explained() {
    sqlite_only!("file permissions of the database and its WAL");
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", "true"]);
    let Some(stranger) = Stranger::with_copy_of(&env, "pending wal") else {
        return;
    };
    // A writer that stopped without checkpointing: its -wal holds a committed change.
    {
        let conn = Connection::open(&stranger.db).expect("open");
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .expect("no checkpoint on close");
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0")
            .expect("no checkpoints");
        conn.execute(
            "UPDATE job_definitions SET command = 'echo changed' WHERE name = 'a'",
            [],
        )
        .expect("write");
    }
    let _ = std::fs::remove_file(format!("{}-shm", stranger.db.display()));
    let wal = PathBuf::from(format!("{}-wal", stranger.db.display()));
    assert!(
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0),
        "{:?}",
        stranger.files()
    );
    chmod(&stranger.db, 0o444);
    chmod(&stranger.dir, 0o555);
    let out = stranger.run(&["schedule", "list"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("is not writable"), "{err}");
    assert!(
        err.contains("runner.db-shm"),
        "names the file it needs: {err}"
    );
    assert!(err.contains("WAL mode"), "{err}");
    assert!(
        !err.contains("attempt to write a readonly database"),
        "{err}"
    );
}

/// -shm and -wal files left read-only (here by another program's read-only read) used to block
/// the owner's writes with a hint blaming the database file. Now the message names the -shm file.
#[test]
fn stale_read_only_sidecar_files_are_named_when_writes_fail() {
    sqlite_only!("file permissions of the database and its WAL");
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", "true"]);
    let Some(stranger) = Stranger::with_copy_of(&env, "stale sidecars") else {
        return;
    };
    // runner's own read of a read-only database leaves nothing behind.
    chmod(&stranger.db, 0o444);
    let out = stranger.run(&["schedule", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stranger.files(), ["runner.db"]);
    // A read-only SQLite connection (the sqlite3 shell, a backup tool) leaves -shm and -wal with
    // the database's read-only mode (SQLite gives them its owner when it runs as root).
    {
        let conn = Connection::open_with_flags(&stranger.db, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open");
        let n: i64 = conn
            .query_row("SELECT count(*) FROM job_definitions", [], |r| r.get(0))
            .expect("read");
        assert_eq!(n, 1);
    }
    let shm = format!("{}-shm", stranger.db.display());
    assert!(Path::new(&shm).exists(), "{:?}", stranger.files());
    chmod(&stranger.db, 0o600);
    let out = stranger.run(&["schedule", "add", "b", "--cron", &never(), "--", "true"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("{shm} is not writable")), "{err}");
    assert!(
        !err.contains(&format!("{} is not writable", stranger.db.display())),
        "the database file is writable: {err}"
    );
    assert!(!err.contains("check that the database file"), "{err}");
    // The fix it names works.
    chmod(Path::new(&shm), 0o600);
    let out = stranger.run(&["schedule", "add", "b", "--cron", &never(), "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The owner's own database made read-only (`chmod 400`) in a writable directory. A command
/// that may create a database (`schedule add`, `init`) used to open it as a writer would, so
/// SQLite created its -wal and -shm with the database's read-only mode; after `chmod 600` of the
/// database they still blocked the next write. Now such a command reads the file as any reader
/// does, a write fails naming the database and its fix, nothing is left behind, and that fix is
/// enough.
#[test]
fn a_refused_write_to_a_read_only_database_leaves_no_files_behind() {
    sqlite_only!("file permissions of the database and its WAL");
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", "true"]);
    let Some(stranger) = Stranger::with_copy_of(&env, "read-only writes") else {
        return;
    };
    chmod(&stranger.db, 0o400);
    let out = stranger.run(&["schedule", "add", "b", "--cron", &never(), "--", "true"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{} is not writable", stranger.db.display())),
        "names the database: {err}"
    );
    assert_eq!(stranger.files(), ["runner.db"], "nothing left behind");
    let out = stranger.run(&["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stranger.files(), ["runner.db"], "nothing left behind");

    chmod(&stranger.db, 0o600);
    let out = stranger.run(&["schedule", "add", "b", "--cron", &never(), "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------------------------
// one bad row stops everything (item 8)
// ---------------------------------------------------------------------------------------------

const T0: &str = "2030-01-01T00:00:30Z";
const T1: &str = "2030-01-01T00:05:30Z";

/// Two every-minute schedules, `a` and `b`, added at T0.
fn two_schedules() -> Env {
    let env = Env::init();
    for name in ["a", "b"] {
        env.ok(&[
            "--now",
            T0,
            "schedule",
            "add",
            name,
            "--cron",
            "* * * * *",
            "--",
            "true",
        ]);
    }
    env
}

fn runs_of(env: &Env, name: &str) -> i64 {
    env.sql.query_i64(
        &format!(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = '{name}' AND r.status = 'succeeded'"
        ),
        &[],
    )
}

/// `runner --now T tick`: its exit code and stderr.
fn tick_at(env: &Env, now: &str) -> (Option<i32>, String) {
    let out = env.run(&["--now", now, "tick"]);
    (out.status.code(), stderr(&out))
}

/// The `schedule list` row of `name` (its first column).
fn list_row(listed: &str, name: &str) -> String {
    listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{listed}"))
        .to_string()
}

/// max_attempts beyond u32 used to fail every tick ("Integer 5000000000 out of range at index 6")
/// and `schedule list`. Now the tick runs `b`, says one line about `a` naming the column, exits 1;
/// `list` marks `a` damaged; `edit --max-attempts` repairs it and it runs again.
#[test]
fn an_out_of_range_max_attempts_stops_only_its_schedule() {
    let env = two_schedules();
    env.sql.exec(
        "UPDATE job_definitions SET max_attempts = 5000000000 WHERE name = 'a'",
        &[],
    );

    let (code, err) = tick_at(&env, T1);
    assert_eq!(code, Some(1), "a damaged schedule is a runner error: {err}");
    assert!(!err.contains("at index"), "no raw conversion error: {err}");
    let about_a = lines_with(&err, "schedule a ");
    assert_eq!(about_a.len(), 1, "one line about a: {err}");
    assert!(
        about_a[0].contains("max_attempts") && about_a[0].contains("5000000000"),
        "names the column and value: {err}"
    );
    assert!(
        about_a[0].contains("runner schedule edit a --max-attempts"),
        "says how to repair it: {err}"
    );
    assert_eq!(runs_of(&env, "b"), 1, "b still ran: {err}");
    assert_eq!(runs_of(&env, "a"), 0);

    let out = env.run(&["--now", T1, "schedule", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = stdout(&out);
    let row = list_row(&listed, "a");
    assert!(
        row.contains("damaged") && row.contains("max_attempts"),
        "{listed}"
    );
    assert!(list_row(&listed, "b").contains("active"), "{listed}");

    let items = json(&env.ok(&["--now", T1, "schedule", "list", "--json"]));
    let a = &items[0];
    assert_eq!(a["name"], "a", "{items:#}");
    assert_eq!(a["state"], "damaged");
    assert!(a["problem"].as_str().unwrap_or("").contains("max_attempts"));
    assert_eq!(a["max_attempts"], Value::Null, "no placeholder shown");
    assert_eq!(a["next_fire_at"], Value::Null);
    assert_eq!(items[1]["state"], "active");
    assert_eq!(items[1]["max_attempts"], 3);

    // Commands that act on it refuse with exit 4 naming the column; history still works.
    for args in [
        &["run", "a"][..],
        &["schedule", "next", "a"],
        &["schedule", "pause", "a"],
    ] {
        let err = env.fails(4, args);
        assert!(err.contains("max_attempts"), "{args:?}: {err}");
    }
    env.ok(&["history", "a"]);

    // Repair: the edit sets the bad column; the schedule runs at the next tick.
    let out = env.ok(&["--now", T1, "schedule", "edit", "a", "--max-attempts", "3"]);
    assert!(out.contains("repaired max_attempts"), "{out}");
    assert_eq!(
        env.sql.query_i64(
            "SELECT max_attempts FROM job_definitions WHERE name = 'a'",
            &[]
        ),
        3
    );
    let (code, err) = tick_at(&env, "2030-01-01T00:07:30Z");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(runs_of(&env, "a"), 1);
}

/// A bogus zone used to make `schedule list` fail for all schedules with exit 2.
#[test]
fn a_bogus_timezone_is_listed_as_damaged_and_shown_with_exit_4() {
    let env = two_schedules();
    env.sql.exec(
        "UPDATE job_definitions SET timezone = 'Mars/Olympus' WHERE name = 'a'",
        &[],
    );

    let listed = env.ok(&["--now", T1, "schedule", "list"]);
    let row = list_row(&listed, "a");
    assert!(row.contains("damaged"), "{listed}");
    assert!(
        row.contains("timezone") && row.contains("Mars/Olympus"),
        "{listed}"
    );
    assert!(
        list_row(&listed, "b").contains("2030-01-01T00:06:00"),
        "{listed}"
    );

    // show: what can be read, marked damaged, and exit 4 naming the column.
    let out = env.run(&["--now", T1, "schedule", "show", "a"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("state:        damaged"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("command:      true"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("timezone"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--tz ZONE"), "{}", stderr(&out));
    let out = env.run(&["--now", T1, "schedule", "show", "a", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    let shown = json(&stdout(&out));
    assert_eq!(shown["state"], "damaged");
    assert_eq!(shown["timezone"], Value::Null);
    assert_eq!(shown["damaged_columns"], serde_json::json!(["timezone"]));
    env.ok(&["--now", T1, "schedule", "show", "b"]);

    let (code, err) = tick_at(&env, T1);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(lines_with(&err, "timezone").len(), 1, "{err}");
    assert!(err.contains("schedule a "), "{err}");
    assert_eq!(runs_of(&env, "b"), 1, "{err}");

    env.ok(&["--now", T1, "schedule", "edit", "a", "--tz", "UTC"]);
    let listed = env.ok(&["--now", T1, "schedule", "list"]);
    assert!(list_row(&listed, "a").contains("active"), "{listed}");
}

/// Every kind of damage is named by column: unknown policy text, text in an integer column, a
/// flag that is neither 0 nor 1, an unreadable name (then by id). Rows whose due time cannot be
/// read are reported by the tick too (they would otherwise never be due).
#[test]
fn every_kind_of_damage_is_named_and_the_rest_keep_running() {
    sqlite_only!("values of the wrong type, which only SQLite stores");
    let env = Env::init();
    for name in ["a", "b", "c", "d", "e"] {
        env.ok(&[
            "--now",
            T0,
            "schedule",
            "add",
            name,
            "--cron",
            "* * * * *",
            "--",
            "true",
        ]);
    }
    forge(
        &env,
        "UPDATE job_definitions SET overlap = 'sometimes' WHERE name = 'a';
         UPDATE job_definitions SET grace_secs = 'soon' WHERE name = 'b';
         UPDATE job_definitions SET paused = 7, next_fire_at = 'later' WHERE name = 'c';
         UPDATE job_definitions SET name = X'ff00' WHERE name = 'd';",
    );
    let damaged_id = env.sql.query_i64(
        "SELECT id FROM job_definitions WHERE typeof(name) = 'blob'",
        &[],
    );

    let out = env.run(&["--now", T1, "schedule", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = stdout(&out);
    for (name, column) in [("a", "overlap"), ("b", "grace_secs"), ("c", "paused")] {
        let row = list_row(&listed, name);
        assert!(
            row.contains("damaged") && row.contains(column),
            "{name}: {listed}"
        );
    }
    assert!(list_row(&listed, "c").contains("next_fire_at"), "{listed}");
    let by_id = format!("(id {damaged_id})");
    assert!(
        listed
            .lines()
            .any(|l| l.contains(&by_id) && l.contains("damaged") && l.contains("name")),
        "{listed}"
    );
    assert!(list_row(&listed, "e").contains("active"), "{listed}");

    let (code, err) = tick_at(&env, T1);
    assert_eq!(code, Some(1), "{err}");
    for needle in [
        "schedule a ",
        "schedule b ",
        "schedule c ",
        &format!("schedule with id {damaged_id} "),
    ] {
        assert_eq!(lines_with(&err, needle).len(), 1, "{needle}: {err}");
    }
    assert_eq!(runs_of(&env, "e"), 1, "{err}");

    // Two damaged columns: an edit that sets only one leaves it damaged and changes nothing.
    let before = env.sql.query_strings("SELECT quote(paused) || quote(next_fire_at) || revision FROM job_definitions WHERE name = 'c'", &[]);
    let err = env.fails(4, &["schedule", "edit", "c", "--max-attempts", "4"]);
    assert!(
        err.contains("paused") && err.contains("--active|--paused"),
        "{err}"
    );
    let after = env.sql.query_strings("SELECT quote(paused) || quote(next_fire_at) || revision FROM job_definitions WHERE name = 'c'", &[]);
    assert_eq!(before, after);
    // --active sets paused; every edit rewrites next_fire_at.
    env.ok(&["--now", T1, "schedule", "edit", "c", "--active"]);
    env.ok(&["--now", T1, "schedule", "edit", "a", "--overlap", "allow"]);
    env.ok(&["--now", T1, "schedule", "edit", "b", "--grace", "1m"]);
    let listed = env.ok(&["--now", T1, "schedule", "list"]);
    assert_eq!(
        listed.matches("damaged").count(),
        1,
        "only d is left: {listed}"
    );
}

/// A schedule whose due time cannot be read is reported by a tick that has nothing else to do:
/// the tick's first look, which decides which steps it takes, counts it as work.
#[test]
fn a_schedule_whose_due_time_cannot_be_read_is_reported_by_an_otherwise_idle_tick() {
    sqlite_only!("values of the wrong type, which only SQLite stores");
    let env = Env::init();
    env.ok(&[
        "--now",
        T0,
        "schedule",
        "add",
        "c",
        "--cron",
        "* * * * *",
        "--",
        "true",
    ]);
    forge(
        &env,
        "UPDATE job_definitions SET next_fire_at = 'later' WHERE name = 'c';",
    );
    let (code, err) = tick_at(&env, T1);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(lines_with(&err, "schedule c ").len(), 1, "{err}");
}

// ---------------------------------------------------------------------------------------------
// schedule rm of a running schedule (item 9)
// ---------------------------------------------------------------------------------------------

/// `schedule rm` used to delete a schedule whose run was running, killing its job without a word.
/// Now it refuses (exit 2) saying it would kill it; `--force` cancels the run (the tick holding it
/// kills the job at its next heartbeat) and says so.
/// Schedule `sleeper` (a job that sleeps 300 s), run once by a tick (`tick ARGS`) in the
/// background: the tick, and the job's pid once it runs.
fn sleeper_running(env: &Env, tick_args: &[&str]) -> (Bg, u32) {
    let pidfile = env.path("job.pid");
    let command = format!("echo $$ > '{}'; sleep 300", pidfile.display());
    env.ok(&[
        "schedule",
        "add",
        "sleeper",
        "--cron",
        &never(),
        "--",
        &command,
    ]);
    env.ok(&["run", "sleeper"]);
    let bg = Bg::spawn(env, "tick", tick_args).with_job_pidfile(&pidfile);
    wait_until(Duration::from_secs(30), "the job to run", || {
        bg.job_pid().is_some()
            && env.sql.query_i64(
                "SELECT count(*) FROM job_runs WHERE status = 'running'",
                &[],
            ) == 1
    });
    let job = bg.job_pid().expect("pid");
    (bg, job)
}

#[test]
fn rm_refuses_a_schedule_with_a_running_run_unless_forced() {
    let env = Env::init();
    // A heartbeat every 10 s: rarely one between rm's cancel and its look at the job, which
    // would stop the job before rm says it waits.
    let (bg, job) = sleeper_running(&env, &["tick", "--lease", "30s"]);

    let err = env.fails(2, &["schedule", "rm", "sleeper"]);
    assert!(err.contains("running"), "{err}");
    assert!(err.contains("kills"), "says it would kill the job: {err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        1
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'running'",
            &[]
        ),
        1
    );
    assert!(process_alive(job));

    // --force cancels the run, then waits for the tick to stop the job before removing the
    // record that would let a later tick find it.
    let out = env.ok(&["schedule", "rm", "sleeper", "--force"]);
    assert!(out.contains("cancelled running run 1"), "{out}");
    assert!(out.contains("terminates its process group"), "{out}");
    assert!(out.contains("waiting for the tick holding run 1"), "{out}");
    assert!(out.contains("removed schedule sleeper"), "{out}");
    assert!(!process_alive(job), "removed while its job was alive");
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        0
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    bg.finish(Duration::from_secs(60));
}

/// `schedule rm --force` while the tick holding the run dies (kill -9) before its heartbeat: the
/// job is stopped by rm itself, never left running with no record. (Removing the schedule at
/// once removed the attempt's record, and nothing could find the job again.)
#[test]
fn rm_force_stops_the_job_itself_when_its_tick_dies_meanwhile() {
    let env = Env::init();
    // The default lease: its heartbeat (every 20 s) does not come before the kill below.
    let (mut tick, job) = sleeper_running(&env, &["tick"]);
    let rm = Bg::spawn(&env, "rm", &["schedule", "rm", "sleeper", "--force"]);
    let said = env.path("rm.stdout");
    wait_until(Duration::from_secs(30), "rm to wait for the tick", || {
        std::fs::read_to_string(&said).is_ok_and(|out| out.contains("waiting for the tick"))
    });
    tick.kill9();
    let out = rm.finish(Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("removed schedule sleeper"), "{text}");
    // Stopped either by rm (the tick was gone) or by the tick's heartbeat, had it come first.
    assert!(!process_alive(job), "removed while its job was alive");
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
}

/// `schedule rm` of a schedule with nothing running is unchanged; its help mentions --force.
#[test]
fn rm_without_running_runs_removes_and_help_mentions_force() {
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", &never(), "--", "true"]);
    env.ok(&["run", "a"]);
    let out = env.ok(&["schedule", "rm", "a"]);
    assert!(out.contains("removed schedule a"), "{out}");
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    env.fails(3, &["schedule", "rm", "a"]);
    let help = env.ok(&["schedule", "rm", "--help"]);
    assert!(
        help.contains("--force") && help.contains("running"),
        "{help}"
    );
}
