//! The harness: each test gets its own temp directory and database, and drives the real
//! `runner` binary the way cron and users do.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use rusqlite::Connection;
use serde_json::Value;
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

/// A cron expression that never fires during a test (1 January, at least weeks away): runs come
/// from `runner run`.
pub const NEVER: &str = "0 0 1 1 *";

impl Env {
    /// `runner schedule add NAME --cron NEVER FLAGS -- COMMAND`: runs come from `runner run`.
    pub fn add(&self, name: &str, flags: &[&str], command: &str) {
        self.add_at(None, name, NEVER, flags, command);
    }

    /// `runner [--now NOW] schedule add NAME --cron CRON FLAGS -- COMMAND`.
    pub fn add_at(&self, now: Option<&str>, name: &str, cron: &str, flags: &[&str], command: &str) {
        let mut args = Vec::new();
        if let Some(now) = now {
            args.extend(["--now", now]);
        }
        args.extend(["schedule", "add", name, "--cron", cron]);
        args.extend_from_slice(flags);
        args.extend(["--", command]);
        self.ok(&args);
    }

    /// `runner run NAME`; returns the run id it printed.
    pub fn enqueue(&self, name: &str) -> i64 {
        let out = self.ok(&["run", name]);
        out.split_whitespace()
            .nth(2)
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("no run id in {out:?}"))
    }

    /// `runner tick ARGS`, which must exit 0 and print nothing on stdout; returns its stderr.
    pub fn tick(&self, args: &[&str]) -> String {
        let out = self.cmd().arg("tick").args(args).output().expect("tick");
        assert!(
            out.status.success(),
            "tick {args:?}: exit {:?}: {}",
            out.status.code(),
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "a tick prints nothing on stdout");
        stderr(&out)
    }

    /// `runner --now NOW tick`, as [`Env::tick`].
    pub fn tick_at(&self, now: &str) -> String {
        let out = self.run(&["--now", now, "tick"]);
        assert!(
            out.status.success(),
            "tick --now {now}: exit {:?}: {}",
            out.status.code(),
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "a tick prints nothing on stdout");
        stderr(&out)
    }

    /// `runner tick ARGS` with a deadline; returns its output, whatever its exit, and how long it
    /// took.
    pub fn tick_within(&self, args: &[&str], limit: Duration) -> (Output, Duration) {
        let mut cmd = self.cmd();
        cmd.arg("tick").args(args);
        timed(cmd, limit)
    }
}

/// Run a command, killing it and failing the test if it takes longer than `limit`.
pub fn timed(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.expect("wait"), started.elapsed()),
        Err(_) => {
            kill9(pid);
            panic!("{cmd:?} still running after {limit:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading what the binary wrote
// ---------------------------------------------------------------------------------------------

pub fn one_i64(env: &Env, sql: &str, p: impl rusqlite::Params) -> i64 {
    env.conn().query_row(sql, p, |r| r.get(0)).expect(sql)
}

pub fn one_opt_string(env: &Env, sql: &str, p: impl rusqlite::Params) -> Option<String> {
    env.conn().query_row(sql, p, |r| r.get(0)).expect(sql)
}

/// The status of a run ("" if there is no such run).
pub fn status_of(env: &Env, run_id: i64) -> String {
    one_opt_string(env, "SELECT status FROM job_runs WHERE id = ?1", [run_id]).unwrap_or_default()
}

/// The ids of a schedule's runs, oldest first.
pub fn run_ids(env: &Env, job: &str) -> Vec<i64> {
    let conn = env.conn();
    let mut stmt = conn
        .prepare(
            "SELECT r.id FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = ?1 ORDER BY r.id",
        )
        .expect("prepare");
    let rows = stmt
        .query_map([job], |r| r.get::<_, i64>(0))
        .expect("query");
    rows.map(|r| r.expect("row")).collect()
}

/// The id of the newest run of a schedule.
pub fn last_run_id(env: &Env, name: &str) -> i64 {
    *run_ids(env, name)
        .last()
        .unwrap_or_else(|| panic!("no run of {name}"))
}

/// Insert `count` runs of schedule `job` that finished (succeeded) `age_secs` before `now`, each
/// with one attempt and two events: one fast INSERT ... SELECT per table.
pub fn insert_finished_runs(env: &Env, job: &str, count: i64, now: i64, age_secs: i64) {
    let conn = env.conn();
    conn.execute_batch("PRAGMA foreign_keys = ON;").expect("fk");
    let done = now - age_secs;
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, attempt, command,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
             created_at, started_at, finished_at)
         SELECT d.id, 'manual', ?3 - i, 'succeeded', ?3 - i, 1, 'true', 3, 60, 30, 60,
                d.name || '@bulk:' || ?3 || ':' || i, ?3 - i, ?3 - i, ?3 - i + 1
         FROM n, job_definitions d WHERE d.name = ?1",
        rusqlite::params![job, count, done],
    )
    .expect("insert runs");
    conn.execute(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token, started_at,
             finished_at, duration_ms, outcome, exit_code)
         SELECT id, 1, 'bulk', 'bulk', 1, 'bulk-' || id, started_at, finished_at, 1000, 'succeeded', 0
         FROM job_runs WHERE idempotency_key LIKE '%@bulk:' || ?1 || ':%'",
        [done],
    )
    .expect("insert attempts");
    conn.execute(
        "INSERT INTO job_events (run_id, at, kind, actor, detail)
         SELECT id, created_at, k.kind, 'bulk', '{}'
         FROM job_runs, (SELECT 'ENQUEUED' AS kind UNION ALL SELECT 'SUCCEEDED') k
         WHERE idempotency_key LIKE '%@bulk:' || ?1 || ':%'",
        [done],
    )
    .expect("insert events");
}

/// A run's status and error, as `job_runs` holds them.
pub struct RunRow {
    pub status: String,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
}

pub fn run_row(env: &Env, id: i64) -> RunRow {
    env.conn()
        .query_row(
            "SELECT status, error_code, error_detail FROM job_runs WHERE id = ?1",
            [id],
            |r| {
                Ok(RunRow {
                    status: r.get(0)?,
                    error_code: r.get(1)?,
                    error_detail: r.get(2)?,
                })
            },
        )
        .expect("run row")
}

pub struct AttemptRow {
    pub duration_ms: i64,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    pub stdout_bytes: i64,
    pub stderr_bytes: i64,
}

pub fn last_attempt(env: &Env, run: i64) -> AttemptRow {
    env.conn()
        .query_row(
            "SELECT duration_ms, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes
             FROM job_attempts WHERE run_id = ?1 ORDER BY attempt DESC LIMIT 1",
            [run],
            |r| {
                Ok(AttemptRow {
                    duration_ms: r.get(0)?,
                    stdout_tail: r.get::<_, Option<Vec<u8>>>(1)?.unwrap_or_default(),
                    stderr_tail: r.get::<_, Option<Vec<u8>>>(2)?.unwrap_or_default(),
                    stdout_bytes: r.get(3)?,
                    stderr_bytes: r.get(4)?,
                })
            },
        )
        .expect("attempt row")
}

/// Everything a command could have written, in one comparable string.
pub fn snapshot(db: &Path) -> String {
    let conn = Connection::open(db).expect("open");
    let mut out = String::new();
    let tables: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .expect("tables");
        let rows = stmt.query_map([], |r| r.get(0)).expect("tables");
        rows.map(|r| r.expect("row")).collect()
    };
    for table in tables {
        // Every column of every row, quoted: any change shows.
        let columns: Vec<String> = {
            let mut stmt = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .expect("columns");
            let rows = stmt.query_map([], |r| r.get(0)).expect("columns");
            rows.map(|r| r.expect("row")).collect()
        };
        let quoted = columns
            .iter()
            .map(|c| format!("quote(\"{c}\")"))
            .collect::<Vec<_>>()
            .join(" || ',' || ");
        let dump: Option<String> = conn
            .query_row(
                &format!("SELECT group_concat({quoted}, ';') FROM \"{table}\""),
                [],
                |r| r.get(0),
            )
            .expect("dump");
        out.push_str(&format!("{table}: {}\n", dump.unwrap_or_default()));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Times and JSON
// ---------------------------------------------------------------------------------------------

/// Epoch seconds of an RFC 3339 time.
pub fn epoch(t: &str) -> i64 {
    DateTime::parse_from_rfc3339(t)
        .unwrap_or_else(|e| panic!("{t:?} is not RFC 3339: {e}"))
        .timestamp()
}

/// Epoch seconds as RFC 3339 UTC (`2026-01-01T00:00:00Z`).
pub fn utc(epoch: i64) -> String {
    DateTime::<Utc>::from_timestamp(epoch, 0)
        .expect("epoch in range")
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The real clock, for tests that hold the binary's clock against it.
#[allow(clippy::disallowed_methods)] // the test's own clock, not the runner's
pub fn real_now() -> i64 {
    Utc::now().timestamp()
}

pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// Processes and files
// ---------------------------------------------------------------------------------------------

/// A `runner` process started in the background; killed on drop, with the process group of the
/// job whose pid it writes to `job_pidfile` if one was given. Its stdout/stderr go to files so a
/// full pipe can never block it.
pub struct Bg {
    child: Option<Child>,
    out: PathBuf,
    err: PathBuf,
    job_pidfile: Option<PathBuf>,
}

impl Bg {
    pub fn spawn(env: &Env, label: &str, args: &[&str]) -> Bg {
        let out = env.path(&format!("{label}.stdout"));
        let err = env.path(&format!("{label}.stderr"));
        let child = env
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).expect("stdout file"))
            .stderr(fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn runner");
        Bg {
            child: Some(child),
            out,
            err,
            job_pidfile: None,
        }
    }

    /// The job this runner starts writes its pid (`echo $$`) here: its process group is killed
    /// on drop too.
    pub fn with_job_pidfile(mut self, path: &Path) -> Bg {
        self.job_pidfile = Some(path.to_path_buf());
        self
    }

    pub fn job_pid(&self) -> Option<u32> {
        let path = self.job_pidfile.as_ref()?;
        fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Wait up to `timeout` for it to exit; panics if it does not.
    pub fn finish(mut self, timeout: Duration) -> Output {
        let mut child = self.child.take().expect("not finished yet");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "runner did not exit within {timeout:?}\nstderr: {}",
                    fs::read_to_string(&self.err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: fs::read(&self.out).unwrap_or_default(),
            stderr: fs::read(&self.err).unwrap_or_default(),
        }
    }

    /// SIGKILL the runner itself (not its jobs, which live in their own process groups).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill -9");
            child.wait().expect("reap");
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pgid) = self.job_pid().filter(|p| *p > 1 && process_alive(*p)) {
            let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
        }
    }
}

/// Process groups / pids a test started indirectly (jobs); SIGKILLed on drop if still alive.
#[derive(Default)]
pub struct Strays {
    groups: Vec<u32>,
    pids: Vec<u32>,
}

impl Strays {
    pub fn group(&mut self, pgid: u32) {
        self.groups.push(pgid);
    }

    pub fn pid(&mut self, pid: u32) {
        self.pids.push(pid);
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        for &pgid in &self.groups {
            if pgid > 1 && process_alive(pgid) {
                let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
            }
        }
        for &pid in &self.pids {
            if pid > 1 && process_alive(pid) {
                kill9(pid);
            }
        }
    }
}

/// Runs its closure when dropped: unmount, un-chattr, kill a daemon, whatever the test ends.
pub struct Cleanup<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for Cleanup<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

pub fn kill9(pid: u32) {
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
}

/// Poll a file until it holds a pid.
pub fn read_pid(path: &Path, timeout: Duration) -> u32 {
    let mut pid = 0;
    wait_until(timeout, &format!("a pid in {}", path.display()), || {
        pid = fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}

/// Shell-quote a path for use inside a job command.
pub fn sh_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

pub fn sh(script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh")
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The permission bits of a file.
pub fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("stat").mode() & 0o7777
}

pub fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The subcommands this build has, from `runner --help`.
pub fn subcommands() -> BTreeSet<String> {
    let out = Command::new(BIN).arg("--help").output().expect("help");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}
