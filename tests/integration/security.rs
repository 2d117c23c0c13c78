//! The security promises: a database others can write is refused (a planted WAL cannot inject
//! commands), new databases are private, jobs inherit no descriptors, names are data, stored
//! output cannot inject terminal escapes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rusqlite::Connection;

use crate::common::{
    chmod, is_root, last_attempt, mode, never, process_alive, read_pid, run_row, sh, stderr,
    stdout, subcommands, Backend, Cleanup, Env, Seen, BIN,
};
use crate::sqlite_only;

// ---------------------------------------------------------------------------------------------
// security
// ---------------------------------------------------------------------------------------------

/// A database (or directory) others can write is refused for execution, with the fix in the
/// message, and the job never runs.
#[test]
fn database_others_can_write_is_refused() {
    sqlite_only!("file permissions");
    let env = Env::init();
    let marker = env.path("ran");
    env.add("a", &[], &format!("touch {}", marker.display()));
    let dir = env.dir.path().to_path_buf();
    let refused = |what: &str, needle: &str| {
        env.enqueue("a");
        for args in [&["tick"][..], &["run", "a", "--wait"]] {
            let err = env.fails(4, args);
            assert!(err.contains(needle), "{what}: {args:?}: {err}");
            assert!(err.contains("refusing"), "{what}: {err}");
        }
        assert!(!marker.exists(), "{what}: the job ran");
    };
    chmod(&env.db, 0o666);
    refused("file 0666", "chmod 600");
    chmod(&env.db, 0o620);
    refused("file 0620", "chmod 600");
    chmod(&env.db, 0o600);
    chmod(&dir, 0o777);
    refused("directory 0777", "chmod go-w");
    chmod(&dir, 0o1777);
    refused("directory 1777 (sticky)", "sticky");
    chmod(&dir, 0o700);
    if is_root() {
        std::os::unix::fs::chown(&env.db, Some(65534), None).expect("chown");
        refused("file owned by nobody", "owned by uid 65534");
        std::os::unix::fs::chown(&env.db, Some(0), None).expect("chown");
    } else {
        println!("security: not root, cannot give the database to another user: owner check not exercised");
    }
    // A symlink from a private directory into a shared one is judged by where it points.
    let shared = env.path("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o1777);
    std::fs::rename(&env.db, shared.join("runner.db")).expect("move");
    std::os::unix::fs::symlink(shared.join("runner.db"), &env.db).expect("symlink");
    refused("symlink into a 1777 directory", "shared");
    // Fixed: it runs.
    chmod(&shared, 0o700);
    env.ok(&["tick"]);
    assert!(
        marker.exists(),
        "the job runs once the database is private again"
    );
}

/// A victim database in a sticky world-writable directory (like /tmp), and beside it, as
/// `victim.db-wal`, the WAL an attacker planted: the attacker's whole database, whose schedule
/// `a` runs `attacker_command` and has a run due, as WAL frames left un-checkpointed.
fn plant_a_wal(env: &Env, attacker_command: &str) -> (PathBuf, PathBuf) {
    let shared = env.path("tmp");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o1777);
    let victim = shared.join("victim.db");
    let attacker = env.path("attacker.db");
    let with = |db: &Path, args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.arg("--db").arg(db).args(args);
        let out = cmd.output().expect("spawn");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    for (db, command) in [(&victim, "true"), (&attacker, attacker_command)] {
        with(db, &["init"]);
        with(
            db,
            &["schedule", "add", "a", "--cron", &never(), "--", command],
        );
    }
    with(&attacker, &["run", "a"]);
    // The attacker's whole database as WAL frames, left un-checkpointed (connection leaked).
    let conn = Connection::open(&attacker).expect("open");
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0; VACUUM;")
        .expect("vacuum into the WAL");
    let mut wal = attacker.as_os_str().to_owned();
    wal.push("-wal");
    let mut planted = victim.as_os_str().to_owned();
    planted.push("-wal");
    let planted = PathBuf::from(planted);
    std::fs::copy(PathBuf::from(wal), &planted).expect("plant the WAL");
    std::mem::forget(conn);
    (victim, planted)
}

/// The attack the directory rule stops: in a sticky world-writable directory (like /tmp) anyone
/// can create `runner.db-wal` while the database is closed. SQLite replays whatever valid WAL it
/// finds, so a planted WAL replaces the whole database, commands included.
#[test]
fn planted_wal_in_a_sticky_directory_cannot_inject_commands() {
    sqlite_only!("a planted WAL file");
    let env = Env::new();
    let pwned = env.path("pwned");
    let (victim, planted) = plant_a_wal(&env, &format!("touch {}", pwned.display()));
    if is_root() {
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).expect("chown");
    }
    let err = env.fails(4, &["--db", victim.to_str().expect("utf-8"), "tick"]);
    assert!(err.contains("sticky"), "{err}");
    assert!(
        !pwned.exists(),
        "the planted WAL made runner execute the attacker's command"
    );
}

/// Same attack, one step further: the refusal must come before SQLite opens the database, or the
/// planted WAL is already checkpointed into the database file when runner closes it.
#[test]
fn refused_database_is_not_modified_by_a_planted_wal() {
    sqlite_only!("a planted WAL file");
    let env = Env::new();
    let (victim, _) = plant_a_wal(&env, "echo injected");
    let before = std::fs::read(&victim).expect("read");
    env.fails(4, &["--db", victim.to_str().expect("utf-8"), "tick"]);
    assert!(
        std::fs::read(&victim).expect("read") == before,
        "the refused database was rewritten (the planted WAL was checkpointed into it)"
    );
}

/// New databases are private whatever the umask: the file 0600 (and SQLite's -wal/-shm, which
/// copy its mode), a created directory 0700.
#[test]
fn new_databases_are_private() {
    sqlite_only!("file modes");
    let env = Env::new();
    let nested = env.path("state/runner/runner.db");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 000; {BIN} --db {} init && {BIN} --db {} schedule add a --cron '{}' -- true",
            nested.display(),
            env.db.display(),
            never()
        ))
        .env("HOME", env.dir.path())
        .output()
        .expect("sh");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&nested), 0o600, "init");
    assert_eq!(
        mode(nested.parent().expect("dir")),
        0o700,
        "created directory"
    );
    assert_eq!(
        mode(env.path("state").as_path()),
        0o700,
        "created directory"
    );
    assert_eq!(mode(&env.db), 0o600, "schedule add");
    // While a job runs, the database is open: its sidecar files exist, and are private.
    let modes = env.path("modes");
    env.add(
        "stat",
        &[],
        &format!(
            "stat -c '%n %a' {db}-wal {db}-shm > {out}",
            db = env.db.display(),
            out = modes.display()
        ),
    );
    env.enqueue("stat");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("umask 000; exec {BIN} tick"))
        .env("RUNNER_DB", &env.db)
        .output()
        .expect("sh");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&modes).expect("modes");
    assert_eq!(text.lines().count(), 2, "{text}");
    for line in text.lines() {
        assert!(line.ends_with(" 600"), "{line}");
    }
}

/// Jobs get stdin, stdout and stderr, nothing else: no database handle, and none of the
/// descriptors the runner itself inherited. The classic cron line `flock -n LOCK runner tick`
/// shows why: a job inheriting the lock, leaving a daemon behind, would block every later tick.
#[test]
fn jobs_inherit_no_descriptors() {
    let env = Env::init();
    let daemon = env.path("daemon.pid");
    let lock = env.path("tick.lock");
    // `keep`: the daemon outlives its job on purpose, to show it holds none of the tick's locks.
    env.add(
        "fds",
        &["--leftovers", "keep"],
        &format!(
            "ls -l /proc/$$/fd; setsid sleep 120 </dev/null >/dev/null 2>&1 & echo $! > {}",
            daemon.display()
        ),
    );
    let run = env.enqueue("fds");
    // The runner inherits fd 7 (the database file itself; under PostgreSQL, some other file)
    // and the flock descriptor.
    let inherited = match env.sql.backend() {
        Backend::Sqlite => env.db.clone(),
        Backend::Postgres => {
            let file = env.path("inherited");
            std::fs::write(&file, "").expect("a file to inherit");
            file
        }
    };
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7<{inherited}; exec flock -n {lock} {BIN} tick",
            inherited = inherited.display(),
            lock = lock.display()
        ))
        .env("RUNNER_DB", env.sql.location())
        .current_dir(env.dir.path())
        .output()
        .expect("sh");
    let pid = read_pid(&daemon, Duration::from_secs(10));
    let daemon_seen = Seen::now(pid);
    let _kill = Cleanup(move || daemon_seen.kill9());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(last_attempt(&env, run).stdout_tail).expect("fd listing");
    let fds: BTreeSet<String> = text
        .lines()
        .filter(|l| l.contains(" -> "))
        .filter_map(|l| {
            l.split(" -> ")
                .next()?
                .split_whitespace()
                .last()
                .map(str::to_string)
        })
        .collect();
    let expected: BTreeSet<String> = ["0", "1", "2"].iter().map(|s| s.to_string()).collect();
    assert_eq!(fds, expected, "the job's descriptors:\n{text}");
    assert!(!text.contains("runner.db"), "{text}");
    assert!(process_alive(pid));
    let again = sh(&format!("flock -n {} true", lock.display()));
    assert!(
        again.status.success(),
        "the job's daemon holds the tick's lock"
    );
}

/// SQL is parameterised: names with quotes are stored and used verbatim; SQL in a zone or name is
/// data, never executed.
#[test]
fn quotes_in_names_are_data() {
    let env = Env::init();
    let names = [
        "o'brien",
        "x');DROP_TABLE_job_runs;--",
        "\"quoted\"",
        "semi;colon",
        "back\\slash",
        "100%_like",
    ];
    let log = env.path("log");
    for name in names {
        env.add(
            name,
            &[],
            &format!("printf '%s\\n' \"$RUNNER_JOB\" >> {}", log.display()),
        );
        env.enqueue(name);
    }
    env.fails(
        2,
        &[
            "schedule",
            "add",
            "x'); DROP TABLE job_runs;--",
            "--cron",
            &never(),
            "--",
            "true",
        ],
    );
    env.fails(
        2,
        &[
            "schedule",
            "add",
            "z",
            "--cron",
            &never(),
            "--tz",
            "UTC'); DROP TABLE job_runs;--",
            "--",
            "true",
        ],
    );
    env.fails(3, &["schedule", "show", "' OR '1'='1"]);
    env.fails(3, &["run", "' OR 1=1 --"]);
    env.ok(&["tick"]);
    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["schedule", "list", "--json"])).expect("json");
    let listed: BTreeSet<String> = json
        .as_array()
        .expect("array")
        .iter()
        .map(|d| d["name"].as_str().expect("name").to_string())
        .collect();
    let expected: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(listed, expected);
    let ran: BTreeSet<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ran, expected, "each job ran under its exact name");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'",
            &[]
        ),
        names.len() as i64
    );
    for name in names {
        env.ok(&["schedule", "show", name]);
    }
}

/// Job output is data: what is stored for display has its escape sequences neutralised
/// (error_detail here; `runner show` where it exists).
#[test]
fn stored_output_cannot_inject_terminal_escapes() {
    let env = Env::init();
    env.add(
        "esc",
        &["--max-attempts", "1"],
        "printf '\\033[2J\\033]0;pwned\\007clear\\n'; printf 'boom \\033[31mred\\r\\n' >&2; exit 3",
    );
    let run = env.enqueue("esc");
    let (out, _) = env.tick_within(&[], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    let row = run_row(&env, run);
    let detail = row.error_detail.unwrap_or_default();
    assert!(
        !detail.contains('\u{1b}') && !detail.contains('\r'),
        "raw escapes in error_detail: {detail:?}"
    );
    assert!(detail.contains("\\x1b[31m"), "{detail:?}");
    assert!(
        !stderr(&out).contains('\u{1b}'),
        "the tick's own output: {}",
        stderr(&out)
    );
    if subcommands().contains("show") {
        let out = env.run(&["show", &run.to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "`runner show` printed raw escapes: {text:?}"
        );
        assert!(
            text.contains("\\x1b[2J"),
            "`runner show` shows them escaped: {text}"
        );
    } else {
        println!("terminal escapes: `runner show` does not exist in this build; only error_detail checked");
    }
}
