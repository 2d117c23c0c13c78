//! Damage and the smaller defects of issue 9: a damaged schedule row stops its own schedule only;
//! read-only users can read; durations are whole seconds; stored text is shown escaped; a bad
//! RUNNER_RETENTION says what it accepts; `schedule rm` does not kill a running run unasked.
//!
//! Damaged rows are forged with raw SQL, as a bad migration, a hand edit or another tool would
//! leave them. Tests that need another user run the binary as `nobody` with setpriv when they
//! run as root (permission bits do not bind root), and say so and return when they cannot.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::common::{stderr, Env, BIN};

/// A cron expression that never fires during a test: runs come from `runner run`.
const NEVER: &str = "0 0 1 1 *";

fn forge(env: &Env, sql: &str) {
    env.conn()
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
    env.ok(&["schedule", "add", "a", "--cron", NEVER, "--", command]);
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
    forge(
        &env,
        "UPDATE job_definitions SET name = 'evil' || char(8238) || 'gpj' || char(27) WHERE name = 'a'",
    );
    env.ok(&["run", "evil\u{202e}gpj\u{1b}"]);
    for args in [&["schedule", "list"][..], &["history"], &["show", "1"]] {
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
            NEVER,
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
                "schedule", "add", "x", "--cron", NEVER, flag, value, "--", "true",
            ],
        );
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(err.contains("whole seconds"), "{flag}: {err}");
    }
    assert_eq!(env.count("SELECT count(*) FROM job_definitions"), 0);
    env.ok(&[
        "schedule",
        "add",
        "x",
        "--cron",
        NEVER,
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
        env.count("SELECT timeout_secs FROM job_definitions WHERE name = 'x'"),
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
        let as_root = nix::unistd::geteuid().is_root();
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

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A database 0444 in a directory 0555: reads used to fail with exit 4 ("attempt to write a
/// readonly database"). They work now, leave no file behind, and a write says which file and
/// directory stop it.
#[test]
fn a_read_only_database_in_a_read_only_directory_can_be_read() {
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", NEVER, "--", "echo hi"]);
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

/// A -wal with changes not yet in the database file cannot be read without creating -shm: the
/// message says exactly that instead of "attempt to write a readonly database".
#[test]
fn a_pending_wal_in_a_read_only_directory_is_explained() {
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", NEVER, "--", "true"]);
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
    let env = Env::init();
    env.ok(&["schedule", "add", "a", "--cron", NEVER, "--", "true"]);
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
    let out = stranger.run(&["schedule", "add", "b", "--cron", NEVER, "--", "true"]);
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
    let out = stranger.run(&["schedule", "add", "b", "--cron", NEVER, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
