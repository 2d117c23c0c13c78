//! The harness: each test gets its own temp directory and database, and drives the real
//! `runner` binary the way cron and users do.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_runner");

pub struct Env {
    pub dir: TempDir,
    pub db: PathBuf,
}

impl Env {
    /// A fresh temp directory; the database path inside it does not exist yet.
    pub fn new() -> Env {
        let dir = tempfile::Builder::new()
            .prefix("runner-test-")
            .tempdir()
            .expect("tempdir");
        let db = dir.path().join("runner.db");
        Env { dir, db }
    }

    /// A fresh database, initialised.
    pub fn init() -> Env {
        let env = Env::new();
        env.ok(&["init"]);
        env
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The binary with this env's database, a private HOME, and no inherited RUNNER_DB.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env("RUNNER_DB", &self.db)
            .env("HOME", self.dir.path())
            .env_remove("XDG_STATE_HOME")
            .env_remove("NO_COLOR")
            .current_dir(self.dir.path());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("spawn runner")
    }

    /// Run and require exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "runner {args:?} failed ({:?})\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run and require the given exit code; returns stderr.
    pub fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "runner {args:?}: expected exit {code}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// A read-only connection for assertions (the binary does all writes).
    pub fn conn(&self) -> Connection {
        let conn = Connection::open(&self.db).expect("open db");
        conn.busy_timeout(Duration::from_secs(30))
            .expect("busy timeout");
        conn
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.conn().query_row(sql, [], |r| r.get(0)).expect(sql)
    }

    pub fn strings(&self, sql: &str) -> Vec<String> {
        let conn = self.conn();
        let mut stmt = conn.prepare(sql).expect(sql);
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).expect(sql);
        rows.map(|r| r.expect("row")).collect()
    }
}

/// Poll `check` until it is true or `timeout` passes; panics with `what` on timeout.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether a process exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Live processes on this host carrying the marker of a run of this env's database
/// (`RUNNER_RUN_ID` and `RUNNER_DATABASE` in their environment), whatever group or session they
/// moved to.
pub fn processes_of_run(env: &Env, run_id: i64) -> Vec<u32> {
    let database = std::fs::canonicalize(&env.db).unwrap_or_else(|_| env.db.clone());
    let wanted = [
        format!("RUNNER_RUN_ID={run_id}"),
        format!("RUNNER_DATABASE={}", database.display()),
    ];
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| process_alive(pid))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                wanted
                    .iter()
                    .all(|w| environ.split(|&b| b == 0).any(|item| item == w.as_bytes()))
            })
        })
        .collect()
}
