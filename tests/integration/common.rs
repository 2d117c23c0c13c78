//! The harness: each test gets its own temp directory and database, and drives the real
//! `runner` binary the way cron and users do.
//!
//! One suite, two backends. `RUNNER_TEST_BACKEND` picks the database each test gets:
//! - `sqlite` (the default): a temp SQLite file, `cargo test --release --test integration`;
//! - `postgres`: a fresh database per test on the server at `RUNNER_TEST_PG`, a URL on which
//!   the tests may CREATE DATABASE (dropped when the test ends), e.g.
//!   `RUNNER_TEST_BACKEND=postgres RUNNER_TEST_PG=postgres://postgres@127.0.0.1:5433/postgres
//!   cargo test --release --test integration`.
//!
//! Tests read and forge state through [`TestDb`], whose SQL (`$1` placeholders, no
//! backend-only functions) means the same on both. Tests about a database file (permissions,
//! corruption, WAL, PRAGMAs, the `schema.sql` match) begin with `sqlite_only!("why")` and say
//! on stdout that they were skipped under PostgreSQL.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use postgres::types::Type as PgType;
use runner::process::process_start_time;
use rusqlite::Connection;
use serde_json::Value;
use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_runner");

pub struct Env {
    pub dir: TempDir,
    /// The SQLite file (under PostgreSQL a path nothing uses: tests of files are SQLite-only).
    pub db: PathBuf,
    /// The database the binary is given, and the test's queries of it.
    pub sql: TestDb,
}

impl Env {
    /// A fresh temp directory and database: under SQLite the file does not exist yet; under
    /// PostgreSQL the database exists, empty.
    pub fn new() -> Env {
        let dir = tempfile::Builder::new()
            .prefix("runner-test-")
            .tempdir()
            .expect("tempdir");
        let db = dir.path().join("runner.db");
        let sql = TestDb::new(dir.path());
        Env { dir, db, sql }
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
        cmd.env("RUNNER_DB", self.sql.location())
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
        assert_ok(args, &out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run started by a shell that first sets `limit` (the arguments of `ulimit`, e.g.
    /// `-v 65536`), and require exit 0; returns the whole output.
    pub fn ok_under_ulimit(&self, limit: &str, args: &[&str]) -> Output {
        let mut cmd = self.cmd();
        cmd.args(args);
        let script = format!("ulimit {limit} && exec \"$@\"");
        let out = wrapped(&["sh", "-c", &script, "sh"], &cmd)
            .output()
            .expect("spawn runner under ulimit");
        assert_ok(args, &out);
        out
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

/// `out` exited `code` having said one line on stderr (cron mails each line), starting with
/// `start`; returns stderr, for what else the line must say.
pub fn said_one_line(out: &Output, code: i32, start: &str) -> String {
    let said = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {said}");
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(said.starts_with(start), "{said}");
    said
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

/// The database a job's `RUNNER_DATABASE` names: the canonical path of the SQLite file, or, on
/// PostgreSQL, the cluster's system identifier, the database and the schema (whatever URL
/// reached them).
pub fn database_marker(env: &Env) -> String {
    match env.sql.backend() {
        Backend::Sqlite => fs::canonicalize(&env.db)
            .unwrap_or_else(|_| env.db.clone())
            .display()
            .to_string(),
        Backend::Postgres => env.sql.query_strings(
            "SELECT 'postgres:' || (SELECT system_identifier FROM pg_control_system())::text
                    || '/' || current_database() || '/' || current_schema()",
            &[],
        )[0]
        .clone(),
    }
}

/// Live processes on this host carrying the marker of a run of this env's database
/// (`RUNNER_RUN_ID` and `RUNNER_DATABASE` in their environment), whatever group or session they
/// moved to.
pub fn processes_of_run(env: &Env, run_id: i64) -> Vec<u32> {
    let wanted = [
        format!("RUNNER_RUN_ID={run_id}"),
        format!("RUNNER_DATABASE={}", database_marker(env)),
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

/// `schedule add` flags for a job with one retry, due the moment its first attempt ends.
pub const RETRY_AT_ONCE: [&str; 6] = [
    "--max-attempts",
    "2",
    "--backoff-base",
    "0s",
    "--backoff-max",
    "0s",
];

/// A cron expression that never falls due during a test on the real clock: runs come from
/// `runner run`. See [`never_near`]; a test whose clock is a fixed `--now` asks that instead.
pub fn never() -> String {
    yearly_far_from(real_now())
}

/// A cron expression that never falls due within months either side of `time` (RFC 3339), for a
/// test whose commands all run at `--now` times near it: runs come from `runner run`.
pub fn never_near(time: &str) -> String {
    yearly_far_from(epoch(time))
}

/// Once a year, at midnight on the 15th of the month half a year from `time`'s month: at least
/// five months after `time` and five before it, whatever its date. (A fixed date such as
/// `0 0 1 1 *` falls due within the test when it runs late on 31 December.)
fn yearly_far_from(time: i64) -> String {
    let month0 = DateTime::from_timestamp(time, 0)
        .expect("time in range")
        .month0();
    format!("0 0 15 {} *", (month0 + 6) % 12 + 1)
}

/// SQL that takes a SQLite database back to before schema version 8 (the run tally), for tests
/// that forge an older version and migrate it (after `undo_attempt_schedule`).
pub const SQLITE_BEFORE_TALLY: &str = "DROP TRIGGER job_run_tally_delete;
     DROP TRIGGER job_run_tally_update;
     DROP TABLE job_run_tally;
     DELETE FROM runner_state WHERE key IN ('tally_through', 'tally_folded_at');";

/// SQL that takes a database back to before the schedules kept their last run pruned (SQLite
/// schema version 15, PostgreSQL 10), on either backend.
pub const UNDO_PRUNED_LAST_RUN: [&str; 2] = [
    "ALTER TABLE job_definitions DROP COLUMN pruned_last_status",
    "ALTER TABLE job_definitions DROP COLUMN pruned_last_finished_at",
];

/// SQL that takes a database back to before cancelled runs kept when their job must be stopped
/// by (SQLite schema version 16, PostgreSQL 11), on either backend.
pub const UNDO_JOB_STOPPING: [&str; 2] = [
    "DROP INDEX job_runs_stopping",
    "ALTER TABLE job_runs DROP COLUMN stopping_by",
];

/// SQL that takes a database back to before the schedules kept when their timing last changed
/// (SQLite schema version 17, PostgreSQL 12), on either backend.
pub const UNDO_TIMING_CHANGED: [&str; 1] =
    ["ALTER TABLE job_definitions DROP COLUMN timing_changed_at"];

/// Take the database back to before attempts carried their schedule's id (SQLite schema version
/// 9, PostgreSQL 6), and so to before the runs' `running_alone` (12 and 8), the schedules'
/// pruned columns (14 and 9, 15 and 10), the runs' `stopping_by` (16 and 11) and the schedules'
/// `timing_changed_at` (17 and 12) too, on either backend, for tests that forge an older version
/// and migrate it.
pub fn undo_attempt_schedule(env: &Env) {
    for undo in [
        UNDO_TIMING_CHANGED[0],
        UNDO_JOB_STOPPING[0],
        UNDO_JOB_STOPPING[1],
        UNDO_PRUNED_LAST_RUN[0],
        UNDO_PRUNED_LAST_RUN[1],
        "ALTER TABLE job_definitions DROP COLUMN pruned_success_at",
        "DROP INDEX job_runs_running_by_definition",
        "ALTER TABLE job_runs DROP COLUMN running_alone",
        "CREATE INDEX job_runs_running_by_definition ON job_runs (definition_id)
             WHERE status = 'running'",
        "DROP INDEX job_attempts_finished",
        "ALTER TABLE job_attempts DROP COLUMN definition_id",
        "CREATE INDEX job_attempts_finished ON job_attempts (finished_at, run_id, duration_ms)
             WHERE finished_at IS NOT NULL",
    ] {
        env.sql.exec(undo, &[]);
    }
}

impl Env {
    /// `runner schedule add NAME --cron <never()> FLAGS -- COMMAND`: runs come from `runner run`.
    /// Returns what it printed.
    pub fn add(&self, name: &str, flags: &[&str], command: &str) -> String {
        self.add_at(None, name, &never(), flags, command)
    }

    /// `runner [--now NOW] schedule add NAME --cron CRON FLAGS -- COMMAND`, which must succeed;
    /// returns what it printed.
    pub fn add_at(
        &self,
        now: Option<&str>,
        name: &str,
        cron: &str,
        flags: &[&str],
        command: &str,
    ) -> String {
        let mut args = Vec::new();
        if let Some(now) = now {
            args.extend(["--now", now]);
        }
        args.extend(["schedule", "add", name, "--cron", cron]);
        args.extend_from_slice(flags);
        args.extend(["--", command]);
        self.ok(&args)
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

/// The status of a run ("" if there is no such run).
pub fn status_of(env: &Env, run_id: i64) -> String {
    env.sql
        .query_column("SELECT status FROM job_runs WHERE id = $1", &[&run_id])
        .first()
        .map(Val::string)
        .unwrap_or_default()
}

/// Make `run` look claimed by a runner of this host that vanished: `running` on attempt 1 under
/// a lease that expired long ago (token `tok`), its open attempt naming `child` (the job's pid
/// and its start time in /proc) or no process at all. The next tick recovers it.
pub fn forge_vanished_runner(env: &Env, run: i64, child: Option<(i64, i64)>) {
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', attempt = 1, owner = 'gone:1', lease_token = 'tok',
             lease_expires_at = 1, heartbeat_at = 1, started_at = 1 WHERE id = $1",
        &[&run],
    );
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8");
    env.sql.exec(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token, started_at,
             definition_id)
         SELECT $1, 1, 'gone:1', $2, 1, 'tok', 1, definition_id FROM job_runs WHERE id = $1",
        &[&run, &host],
    );
    if let Some((pid, start)) = child {
        env.sql.exec(
            "UPDATE job_attempts SET child_pid = $2, child_start_time = $3 WHERE run_id = $1",
            &[&run, &pid, &start],
        );
    }
}

/// The ids of a schedule's runs, oldest first.
pub fn run_ids(env: &Env, job: &str) -> Vec<i64> {
    env.sql.query_i64s(
        "SELECT r.id FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = $1 ORDER BY r.id",
        &[&job],
    )
}

/// The id of the newest run of a schedule.
pub fn last_run_id(env: &Env, name: &str) -> i64 {
    *run_ids(env, name)
        .last()
        .unwrap_or_else(|| panic!("no run of {name}"))
}

/// Forge run `run_id` as running under another host's runner (`elsewhere:1`), its lease valid
/// for years: nothing here can stop its job, only say who does.
pub fn forge_running(env: &Env, run_id: i64) {
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', attempt = 1, owner = 'elsewhere:1',
                 lease_token = 'forged', lease_expires_at = 4102444800, heartbeat_at = started_at
         WHERE id = $1",
        &[&run_id],
    );
}

/// Forge run `run_id` as cancelled while running on attempt 1 (at `cancelled_at`), its job still
/// being stopped by `stopping_by` at the latest: its attempt is open on `host` (runner pid 4242,
/// job pid 4251), which nothing here can reach.
pub fn forge_stopping(env: &Env, run_id: i64, host: &str, cancelled_at: i64, stopping_by: i64) {
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', attempt = 1, started_at = $2, finished_at = $2,
                 error_code = 'CANCELLED', stopping_by = $3
         WHERE id = $1",
        &[&run_id, &cancelled_at, &stopping_by],
    );
    env.sql.exec(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, child_pid, lease_token,
             started_at, definition_id)
         SELECT $1, 1, 'elsewhere:4242', $2, 4242, 4251, 'forged', $3, definition_id
         FROM job_runs WHERE id = $1",
        &[&run_id, &host, &cancelled_at],
    );
}

/// Forge attempt 2 of run `run_id` open on `host` (by `owner`, runner pid `runner_pid`), started
/// when the run did, as after another host recovered the run and retried it; the run's own row
/// is the caller's to forge.
pub fn forge_second_attempt(env: &Env, run_id: i64, owner: &str, host: &str, runner_pid: i64) {
    env.sql.exec(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token,
             started_at, definition_id)
         SELECT $1, 2, $2, $3, $4, 'second', started_at, definition_id
         FROM job_runs WHERE id = $1",
        &[&run_id, &owner, &host, &runner_pid],
    );
}

/// Insert `count` runs of schedule `job` that finished (succeeded) `age_secs` before `now`, each
/// with one attempt and two events: one fast INSERT ... SELECT per table.
pub fn insert_finished_runs(env: &Env, job: &str, count: i64, now: i64, age_secs: i64) {
    let done = now - age_secs;
    env.sql.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, attempt, command,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
             created_at, started_at, finished_at)
         SELECT d.id, 'manual', $3 - i, 'succeeded', $3 - i, 1, 'true', 3, 60, 30, 60,
                d.name || '@bulk:' || $3 || ':' || i, $3 - i, $3 - i, $3 - i + 1
         FROM n, job_definitions d WHERE d.name = $1",
        &[&job, &count, &done],
    );
    env.sql.exec(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token, started_at,
             finished_at, duration_ms, outcome, exit_code, definition_id)
         SELECT id, 1, 'bulk', 'bulk', 1, 'bulk-' || id, started_at, finished_at, 1000, 'succeeded', 0,
                definition_id
         FROM job_runs WHERE idempotency_key LIKE '%@bulk:' || $1 || ':%'",
        &[&done],
    );
    env.sql.exec(
        "INSERT INTO job_events (run_id, at, kind, actor, detail)
         SELECT id, created_at, k.kind, 'bulk', '{}'
         FROM job_runs, (SELECT 'ENQUEUED' AS kind UNION ALL SELECT 'SUCCEEDED') k
         WHERE idempotency_key LIKE '%@bulk:' || $1 || ':%'",
        &[&done],
    );
}

/// A run's status and error, as `job_runs` holds them.
pub struct RunRow {
    pub status: String,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
}

pub fn run_row(env: &Env, id: i64) -> RunRow {
    let row = env.sql.query_row(
        "SELECT status, error_code, error_detail FROM job_runs WHERE id = $1",
        &[&id],
    );
    RunRow {
        status: row[0].string(),
        error_code: row[1].opt_string(),
        error_detail: row[2].opt_string(),
    }
}

pub struct AttemptRow {
    pub duration_ms: i64,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    pub stdout_bytes: i64,
    pub stderr_bytes: i64,
}

pub fn last_attempt(env: &Env, run: i64) -> AttemptRow {
    let row = env.sql.query_row(
        "SELECT duration_ms, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes
         FROM job_attempts WHERE run_id = $1 ORDER BY attempt DESC LIMIT 1",
        &[&run],
    );
    AttemptRow {
        duration_ms: row[0].i64(),
        stdout_tail: row[1].opt_bytes().unwrap_or_default(),
        stderr_tail: row[2].opt_bytes().unwrap_or_default(),
        stdout_bytes: row[3].i64(),
        stderr_bytes: row[4].i64(),
    }
}

/// The kinds of `run`'s events, in order.
pub fn event_kinds(env: &Env, run: i64) -> Vec<String> {
    env.sql
        .query_column(
            "SELECT kind FROM job_events WHERE run_id = $1 ORDER BY id",
            &[&run],
        )
        .iter()
        .map(Val::string)
        .collect()
}

/// Part of the reason a `GIVEN_BACK` event gives for a claim whose job found no descriptor left.
pub const OUT_OF_FILES: &str = "ran out of open files";
/// Part of the reason a `GIVEN_BACK` event gives for a run prepared at its gate when its tick was
/// stopped by a signal.
pub const STOPPED_BEFORE_START: &str = "stopped before its job's command started";

/// `run` was claimed, its job never started, and its claim was given back: pending, due, no
/// attempt spent nor left open, no lease, and an event whose reason contains `reason`.
pub fn assert_given_back(env: &Env, run: i64, reason: &str, said: &str) {
    let row = env.sql.query_row(
        "SELECT status, attempt, error_code, owner, lease_token, lease_expires_at, started_at,
                running_alone
         FROM job_runs WHERE id = $1",
        &[&run],
    );
    assert_eq!(row[0].string(), "pending", "run {run}: {said}");
    assert_eq!(row[1].i64(), 0, "run {run}: no attempt spent: {said}");
    assert_eq!(row[2].opt_string(), None, "run {run}: {said}");
    for (column, value) in ["owner", "lease_token", "lease_expires_at", "started_at"]
        .iter()
        .zip(&row[3..7])
    {
        assert_eq!(*value, Val::Null, "run {run}: {column}: {said}");
    }
    assert_eq!(row[7], Val::Null, "run {run}: running_alone: {said}");
    let attempts = env.sql.query_val(
        "SELECT count(*) FROM job_attempts WHERE run_id = $1",
        &[&run],
    );
    assert_eq!(attempts.i64(), 0, "run {run}: no attempt row left: {said}");
    assert_eq!(
        event_kinds(env, run),
        ["ENQUEUED", "CLAIMED", "GIVEN_BACK"],
        "run {run}: {said}"
    );
    let detail = env.sql.query_val(
        "SELECT detail FROM job_events WHERE run_id = $1 AND kind = 'GIVEN_BACK'",
        &[&run],
    );
    let detail = json(&detail.string());
    assert_eq!(detail["attempt"], 1, "run {run}");
    assert!(
        detail["reason"]
            .as_str()
            .is_some_and(|r| r.contains(reason)),
        "run {run}: {detail}"
    );
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

/// How long a command may run, on a loaded machine, before it reads its clock: `--now X` starts
/// its clock at X and the clock runs on, so a time it takes as "now" lies in
/// `[X, X + CLOCK_SLACK_SECS]`. Generous for a stall, short beside the minutes the tests' times
/// differ by.
pub const CLOCK_SLACK_SECS: i64 = 20;

/// Asserts that `read` (epoch seconds), a time a command given `--now at` took as now (plus
/// `offset` seconds), is what it should be: within [`CLOCK_SLACK_SECS`] after it.
pub fn assert_read_at(read: i64, at: &str, offset: i64, what: &str) {
    let from = epoch(at) + offset;
    assert!(
        (from..=from + CLOCK_SLACK_SECS).contains(&read),
        "{what}: {} is not within {CLOCK_SLACK_SECS}s after {}",
        utc(read),
        utc(from)
    );
}

/// Seconds of a duration as the runner prints it (`42s`, `3m5s`, `2h10m`, `1d3h`).
pub fn duration_secs(text: &str) -> i64 {
    let mut total = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => panic!("{text:?} is not a duration"),
        };
        let n: i64 = number
            .parse()
            .unwrap_or_else(|_| panic!("{text:?} is not a duration"));
        total += n * unit;
        number.clear();
    }
    assert!(number.is_empty(), "{text:?} is not a duration");
    total
}

/// The duration in `text` between `before` and `after`, in seconds.
pub fn duration_between(text: &str, before: &str, after: &str) -> i64 {
    let start = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text:?}"))
        + before.len();
    let len = text[start..]
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} after {before:?} in {text:?}"));
    duration_secs(&text[start..start + len])
}

/// Set the time the last tick ran to `at`: a tick records the time it read, up to
/// [`CLOCK_SLACK_SECS`] after its `--now`, and a test that prints how long ago that was needs the
/// time exactly.
pub fn forge_last_tick(env: &Env, at: &str) {
    let updated = env.sql.exec(
        "UPDATE runner_state SET value = $1 WHERE key = 'last_tick_at'",
        &[&epoch(at)],
    );
    assert_eq!(updated, 1, "no last tick to forge");
}

/// The time the last tick ran, as stored.
pub fn last_tick_at(env: &Env) -> i64 {
    env.sql.query_i64(
        "SELECT value FROM runner_state WHERE key = 'last_tick_at'",
        &[],
    )
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
    /// The job's shell, as first read from `job_pidfile`.
    job: std::cell::Cell<Option<Seen>>,
}

impl Bg {
    pub fn spawn(env: &Env, label: &str, args: &[&str]) -> Bg {
        Bg::spawn_cmd(env, label, env.cmd().args(args))
    }

    /// `runner ARGS` with the test hooks `hooks` (`RUNNER_TEST_HOOK`).
    pub fn spawn_hooked(env: &Env, label: &str, args: &[&str], hooks: &str) -> Bg {
        Bg::spawn_cmd(
            env,
            label,
            env.cmd().args(args).env("RUNNER_TEST_HOOK", hooks),
        )
    }

    fn spawn_cmd(env: &Env, label: &str, cmd: &mut Command) -> Bg {
        let out = env.path(&format!("{label}.stdout"));
        let err = env.path(&format!("{label}.stderr"));
        let child = cmd
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
            job: std::cell::Cell::new(None),
        }
    }

    /// The job this runner starts writes its pid (`echo $$`) here: its process group is killed
    /// on drop too.
    pub fn with_job_pidfile(mut self, path: &Path) -> Bg {
        self.job_pidfile = Some(path.to_path_buf());
        self
    }

    pub fn job_pid(&self) -> Option<u32> {
        if let Some(job) = self.job.get() {
            return Some(job.pid);
        }
        let path = self.job_pidfile.as_ref()?;
        let pid = fs::read_to_string(path).ok()?.trim().parse().ok()?;
        self.job.set(Some(Seen::now(pid)));
        Some(pid)
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
        if let Some(job) = self.job.get() {
            job.killpg9();
        }
    }
}

/// Process groups / pids a test started indirectly (jobs), seen when registered; SIGKILLed on
/// drop if they are still those processes (see [`Seen`]).
#[derive(Default)]
pub struct Strays {
    groups: Vec<Seen>,
    pids: Vec<Seen>,
}

impl Strays {
    pub fn group(&mut self, pgid: u32) {
        self.groups.push(Seen::now(pgid));
    }

    pub fn pid(&mut self, pid: u32) {
        self.pids.push(Seen::now(pid));
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        for group in &self.groups {
            group.killpg9();
        }
        for process in &self.pids {
            process.kill9();
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

/// SIGKILL a child this test spawned and has not reaped (its pid cannot have been reused).
/// Any other process: [`Seen`].
pub fn kill9(pid: u32) {
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
}

/// A process as first seen: its pid and start time. The suite's jobs take pids fast enough to
/// wrap `pid_max` (often 32768) within seconds, so a pid learned earlier may name another test's
/// process by the time a cleanup kills it; a `Seen` kills only the process it saw.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pid: u32,
    start: Option<u64>,
}

impl Seen {
    pub fn now(pid: u32) -> Seen {
        Seen {
            pid,
            start: process_start_time(pid),
        }
    }

    /// The process still has the pid it was seen with.
    fn is_same(&self) -> bool {
        self.start.is_some() && process_start_time(self.pid) == self.start
    }

    /// SIGKILL the process, if it still is the one seen.
    pub fn kill9(&self) {
        if self.pid > 1 && self.is_same() {
            kill9(self.pid);
        }
    }

    /// SIGKILL the process group this process leads, if the group id still is its: its leader
    /// is the process seen, or is gone while members hold the id (an id held by a live group
    /// cannot be handed out again).
    pub fn killpg9(&self) {
        if self.pid > 1 && (self.is_same() || process_start_time(self.pid).is_none()) {
            let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        }
    }
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

/// Whether `unshare -u` (a UTS namespace: a host name of its own) is allowed here (root only).
pub fn unshare_allowed() -> bool {
    Command::new("unshare")
        .args(["-u", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cmd` as if on another host: in a UTS namespace of its own whose host name is `host`
/// (`unshare -u`; check [`unshare_allowed`] first), then `exec`ed, so the child's pid is the
/// command's own. Program, arguments, environment and directory are `cmd`'s.
pub fn on_other_host(cmd: &Command, host: &str) -> Command {
    wrapped(
        &[
            "unshare",
            "-u",
            "sh",
            "-c",
            r#"hostname "$1" && shift && exec "$@""#,
            "sh",
            host,
        ],
        cmd,
    )
}

/// Require that runner, run with `args`, exited 0.
fn assert_ok(args: &[&str], out: &Output) {
    assert!(
        out.status.success(),
        "runner {args:?} failed ({:?})\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `runs` finished runs of schedule `name` (manual, succeeded, long ago), each with one event,
/// inserted by SQL: a long history in a second or two.
pub fn add_finished_history(env: &Env, name: &str, runs: i64) {
    env.sql.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
             created_at, finished_at)
         SELECT d.id, 'manual', 1600000000 + i, 'succeeded', 1600000000 + i, 'true', 3, 60, 1, 1,
             d.name || '@' || i, 1600000000 + i, 1600000001 + i
         FROM n JOIN job_definitions d ON d.name = $2",
        &[&runs, &name],
    );
    env.sql.exec(
        "INSERT INTO job_events (run_id, at, kind, actor, detail)
         SELECT r.id, r.created_at, 'ENQUEUED', 'test', '{}'
         FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id WHERE d.name = $1",
        &[&name],
    );
}

/// `cmd` started by `wrapper` (a program and its arguments, which end by `exec`ing the rest):
/// `cmd`'s program and arguments follow the wrapper's, with `cmd`'s environment and directory.
pub fn wrapped(wrapper: &[&str], cmd: &Command) -> Command {
    let mut wrapped = Command::new(wrapper[0]);
    wrapped
        .args(&wrapper[1..])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
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

// ---------------------------------------------------------------------------------------------
// The test's database, on either backend
// ---------------------------------------------------------------------------------------------

/// Which backend the suite runs against: `RUNNER_TEST_BACKEND=sqlite` (the default) or
/// `postgres` (with `RUNNER_TEST_PG`, a server URL on which the tests may CREATE DATABASE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn current() -> Backend {
        match std::env::var("RUNNER_TEST_BACKEND").as_deref() {
            Err(_) | Ok("") | Ok("sqlite") => Backend::Sqlite,
            Ok("postgres") => Backend::Postgres,
            Ok(other) => panic!("RUNNER_TEST_BACKEND={other:?}: expected sqlite or postgres"),
        }
    }
}

/// Ends a test that only makes sense on SQLite (a database file: its permissions, corruption,
/// WAL, PRAGMAs) when the suite runs against another backend, saying so on stdout.
#[macro_export]
macro_rules! sqlite_only {
    ($why:expr) => {
        if $crate::common::Backend::current() != $crate::common::Backend::Sqlite {
            println!("skipped: SQLite only ({})", $why);
            return;
        }
    };
}

/// A value passed to or read from the test's database.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Val {
    pub fn opt_i64(&self) -> Option<i64> {
        match self {
            Val::Null => None,
            Val::Int(i) => Some(*i),
            other => panic!("not an integer: {other:?}"),
        }
    }

    pub fn i64(&self) -> i64 {
        self.opt_i64().expect("an integer, not NULL")
    }

    pub fn opt_string(&self) -> Option<String> {
        match self {
            Val::Null => None,
            Val::Text(s) => Some(s.clone()),
            other => panic!("not text: {other:?}"),
        }
    }

    pub fn string(&self) -> String {
        self.opt_string().expect("text, not NULL")
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.opt_bytes().expect("bytes, not NULL")
    }

    pub fn opt_bytes(&self) -> Option<Vec<u8>> {
        match self {
            Val::Null => None,
            Val::Bytes(b) => Some(b.clone()),
            other => panic!("not bytes: {other:?}"),
        }
    }
}

/// What a query's `$1`, `$2`, ... may be bound to, and the type PostgreSQL is told it has
/// (every integer column is a bigint).
pub trait Param {
    fn val(&self) -> Val;
    fn pg_type(&self) -> PgType;
}

impl Param for i64 {
    fn val(&self) -> Val {
        Val::Int(*self)
    }
    fn pg_type(&self) -> PgType {
        PgType::INT8
    }
}

impl Param for u32 {
    fn val(&self) -> Val {
        Val::Int((*self).into())
    }
    fn pg_type(&self) -> PgType {
        PgType::INT8
    }
}

impl Param for str {
    fn val(&self) -> Val {
        Val::Text(self.to_string())
    }
    fn pg_type(&self) -> PgType {
        PgType::TEXT
    }
}

impl Param for String {
    fn val(&self) -> Val {
        Val::Text(self.clone())
    }
    fn pg_type(&self) -> PgType {
        PgType::TEXT
    }
}

impl Param for Vec<u8> {
    fn val(&self) -> Val {
        Val::Bytes(self.clone())
    }
    fn pg_type(&self) -> PgType {
        PgType::BYTEA
    }
}

impl<T: Param + ?Sized> Param for &T {
    fn val(&self) -> Val {
        (**self).val()
    }
    fn pg_type(&self) -> PgType {
        (**self).pg_type()
    }
}

/// NULL, typed as `T`.
impl<T: Param + Default> Param for Option<T> {
    fn val(&self) -> Val {
        self.as_ref().map_or(Val::Null, Param::val)
    }
    fn pg_type(&self) -> PgType {
        self.as_ref()
            .map_or_else(|| T::default().pg_type(), Param::pg_type)
    }
}

/// The database one test works on, and the queries the test makes of it. Placeholders are
/// `$1`, `$2`, ...; the SQL must mean the same on SQLite and PostgreSQL (the schemas match:
/// every integer a 64-bit integer, times epoch seconds, flags 0/1, event details JSON text).
pub struct TestDb {
    location: String,
    kind: Kind,
}

enum Kind {
    Sqlite(PathBuf),
    Postgres {
        server: String,
        name: String,
        client: Mutex<Option<Box<postgres::Client>>>,
    },
}

impl TestDb {
    /// A fresh database for one test: under SQLite the file `dir/runner.db` (not created yet),
    /// under PostgreSQL a new, empty database on the server at `RUNNER_TEST_PG`, dropped again
    /// when the handle is.
    pub fn new(dir: &Path) -> TestDb {
        match Backend::current() {
            Backend::Sqlite => TestDb::sqlite_file(dir.join("runner.db")),
            Backend::Postgres => TestDb::postgres(
                &std::env::var("RUNNER_TEST_PG")
                    .expect("RUNNER_TEST_BACKEND=postgres needs RUNNER_TEST_PG, a server URL"),
            ),
        }
    }

    /// A SQLite database at `path` (not created yet), whatever the suite's backend: for tests
    /// that manage a second database (`migrate`).
    pub fn sqlite_file(path: PathBuf) -> TestDb {
        TestDb {
            location: path.display().to_string(),
            kind: Kind::Sqlite(path),
        }
    }

    /// A new, empty database on the PostgreSQL server at `server`, dropped again when the
    /// handle is, whatever the suite's backend.
    pub fn postgres(server: &str) -> TestDb {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "runner_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            fastrand::u32(..)
        );
        pg_admin(server, &format!("CREATE DATABASE {name}"));
        TestDb {
            location: with_database(server, &name),
            kind: Kind::Postgres {
                server: server.to_string(),
                name,
                client: Mutex::new(None),
            },
        }
    }

    /// What to give the binary as `--db` or `RUNNER_DB`.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// `location`, with PostgreSQL sessions opened through it named `name` (their
    /// `application_name`), for [`TestDb::wait_for_sessions_to_end`]. SQLite: `location`.
    pub fn location_named(&self, name: &str) -> String {
        match self.kind {
            Kind::Sqlite(_) => self.location.clone(),
            Kind::Postgres { .. } => {
                let joiner = if self.location.contains('?') {
                    '&'
                } else {
                    '?'
                };
                format!("{}{joiner}application_name={name}", self.location)
            }
        }
    }

    /// After `kill -9` of a runner that connected through `location_named(name)`: wait until the
    /// server has ended its sessions. A client killed just after sending COMMIT leaves the server
    /// to carry the commit out after the client is gone, so until then what the dead runner
    /// holds is not yet known. SQLite: nothing to wait for; a dead process writes nothing more.
    pub fn wait_for_sessions_to_end(&self, name: &str, timeout: Duration) {
        if self.backend() == Backend::Postgres {
            let sessions = || {
                self.query_i64(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND application_name = $1",
                    &[&name.to_string()],
                )
            };
            wait_until(
                timeout,
                &format!("the server to end {name}'s sessions"),
                || sessions() == 0,
            );
        }
    }

    pub fn backend(&self) -> Backend {
        match self.kind {
            Kind::Sqlite(_) => Backend::Sqlite,
            Kind::Postgres { .. } => Backend::Postgres,
        }
    }

    /// Whether anything created the database (SQLite: the file; PostgreSQL: any table).
    pub fn created(&self) -> bool {
        match &self.kind {
            Kind::Sqlite(path) => path.exists(),
            Kind::Postgres { .. } => {
                self.query_i64(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
                    &[],
                ) > 0
            }
        }
    }

    /// A connection to the SQLite file, for what only SQLite has (PRAGMAs, its WAL, forging past
    /// CHECK constraints). Tests that use it start with `sqlite_only!`.
    pub fn sqlite(&self) -> Connection {
        let Kind::Sqlite(path) = &self.kind else {
            panic!(
                "a SQLite-only step ran under {:?}: mark its test sqlite_only!",
                self.backend()
            );
        };
        let conn = Connection::open(path).expect("open db");
        conn.busy_timeout(Duration::from_secs(30))
            .expect("busy timeout");
        conn
    }

    /// Every row of a query, each as its columns' values.
    pub fn query_rows(&self, sql: &str, params: &[&dyn Param]) -> Vec<Vec<Val>> {
        let values: Vec<Val> = params.iter().map(|p| p.val()).collect();
        let types: Vec<PgType> = params.iter().map(|p| p.pg_type()).collect();
        match &self.kind {
            Kind::Sqlite(_) => {
                let conn = self.sqlite();
                let mut stmt = conn.prepare(&sqlite_placeholders(sql)).expect(sql);
                let columns = stmt.column_count();
                let rows = stmt
                    .query_map(
                        rusqlite::params_from_iter(values.iter().map(sqlite_value)),
                        |r| {
                            (0..columns)
                                .map(|i| r.get_ref(i).map(from_sqlite))
                                .collect()
                        },
                    )
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.map(|r| r.expect("row")).collect()
            }
            Kind::Postgres { .. } => self.with_client(|client| {
                let typed = postgres_params(&values, &types);
                client
                    .query_typed(sql, &typed)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
                    .iter()
                    .map(|row| (0..row.len()).map(|i| from_postgres(row, i)).collect())
                    .collect()
            }),
        }
    }

    /// The only row of a query.
    pub fn query_row(&self, sql: &str, params: &[&dyn Param]) -> Vec<Val> {
        let mut rows = self.query_rows(sql, params);
        assert_eq!(rows.len(), 1, "expected one row: {sql}");
        rows.pop().expect("one row")
    }

    /// The only value of a query: one row, one column.
    pub fn query_val(&self, sql: &str, params: &[&dyn Param]) -> Val {
        let row = self.query_row(sql, params);
        assert_eq!(row.len(), 1, "expected one column: {sql}");
        row.into_iter().next().expect("one column")
    }

    pub fn query_i64(&self, sql: &str, params: &[&dyn Param]) -> i64 {
        self.query_val(sql, params).i64()
    }

    pub fn query_opt_string(&self, sql: &str, params: &[&dyn Param]) -> Option<String> {
        self.query_val(sql, params).opt_string()
    }

    pub fn query_string(&self, sql: &str, params: &[&dyn Param]) -> String {
        self.query_val(sql, params).string()
    }

    /// The first column of every row.
    pub fn query_column(&self, sql: &str, params: &[&dyn Param]) -> Vec<Val> {
        self.query_rows(sql, params)
            .into_iter()
            .map(|row| row.into_iter().next().expect("a column"))
            .collect()
    }

    pub fn query_strings(&self, sql: &str, params: &[&dyn Param]) -> Vec<String> {
        self.query_column(sql, params)
            .iter()
            .map(Val::string)
            .collect()
    }

    pub fn query_i64s(&self, sql: &str, params: &[&dyn Param]) -> Vec<i64> {
        self.query_column(sql, params)
            .iter()
            .map(Val::i64)
            .collect()
    }

    /// Run one statement that writes (forged state); returns how many rows it changed.
    pub fn exec(&self, sql: &str, params: &[&dyn Param]) -> u64 {
        let values: Vec<Val> = params.iter().map(|p| p.val()).collect();
        let types: Vec<PgType> = params.iter().map(|p| p.pg_type()).collect();
        match &self.kind {
            Kind::Sqlite(_) => {
                let conn = self.sqlite();
                conn.execute_batch("PRAGMA foreign_keys = ON;")
                    .expect("foreign keys");
                conn.execute(
                    &sqlite_placeholders(sql),
                    rusqlite::params_from_iter(values.iter().map(sqlite_value)),
                )
                .unwrap_or_else(|e| panic!("{sql}: {e}")) as u64
            }
            Kind::Postgres { .. } => self.with_client(|client| {
                let typed = postgres_params(&values, &types);
                let statement = client
                    .prepare_typed(
                        sql,
                        &typed.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
                    )
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                let values: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    typed.iter().map(|(v, _)| *v).collect();
                client
                    .execute(&statement, &values)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }),
        }
    }

    /// Hold the write lock on every table for `hold`, as another writer would; false if it could
    /// not be had.
    pub fn hold_write_lock(&self, hold: Duration) -> bool {
        self.hold_write_lock_then(hold, || {})
    }

    /// [`hold_write_lock`](Self::hold_write_lock), calling `held` as soon as the lock is had.
    pub fn hold_write_lock_then(&self, hold: Duration, held: impl FnOnce()) -> bool {
        match &self.kind {
            Kind::Sqlite(_) => {
                let conn = self.sqlite();
                if conn.execute_batch("BEGIN IMMEDIATE").is_err() {
                    return false;
                }
                held();
                std::thread::sleep(hold);
                conn.execute_batch("COMMIT").expect("commit");
                true
            }
            Kind::Postgres { .. } => {
                // A connection of its own, as another writer has, and NOWAIT: waiting for one
                // table while holding another could deadlock with a runner; give up instead.
                let mut client = postgres::Client::connect(&self.location, postgres::NoTls)
                    .unwrap_or_else(|e| panic!("connect to the test database: {e}"));
                let mut tx = client.transaction().expect("begin");
                let tables: Vec<String> = tx
                    .query(
                        "SELECT quote_ident(table_name) FROM information_schema.tables
                         WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
                        &[],
                    )
                    .expect("tables")
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                // EXCLUSIVE: readers go on, every writer waits, as behind SQLite's write lock.
                if !tables.is_empty()
                    && tx
                        .batch_execute(&format!(
                            "LOCK TABLE {} IN EXCLUSIVE MODE NOWAIT",
                            tables.join(", ")
                        ))
                        .is_err()
                {
                    return false;
                }
                held();
                std::thread::sleep(hold);
                tx.commit().expect("commit");
                true
            }
        }
    }

    /// PostgreSQL: lock the rows `select` (a `SELECT ... FOR UPDATE`) picks on a connection of
    /// its own, as another session would (a hung peer, an open `psql`), and hold them while
    /// `held` runs; returns what it returned.
    pub fn holding_rows<T>(&self, select: &str, held: impl FnOnce() -> T) -> T {
        let mut client = postgres::Client::connect(&self.location, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test database: {e}"));
        let mut tx = client.transaction().expect("begin");
        tx.query(select, &[])
            .unwrap_or_else(|e| panic!("{select}: {e}"));
        let value = held();
        tx.commit().expect("commit");
        value
    }

    /// The columns of `table`, in the order the schema declares them.
    pub fn columns(&self, table: &str) -> Vec<String> {
        match self.kind {
            Kind::Sqlite(_) => self.query_strings(
                "SELECT name FROM pragma_table_info($1) ORDER BY cid",
                &[&table],
            ),
            Kind::Postgres { .. } => self.query_strings(
                "SELECT column_name::text FROM information_schema.columns
                 WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
                &[&table],
            ),
        }
    }

    /// Everything a command could have written, in one comparable string: every column of every
    /// row of every table.
    pub fn snapshot(&self) -> String {
        let mut out = String::new();
        match &self.kind {
            Kind::Sqlite(_) => {
                let tables = self.query_strings(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
                    &[],
                );
                for table in tables {
                    let columns = self.query_strings(
                        &format!("SELECT name FROM pragma_table_info('{table}')"),
                        &[],
                    );
                    let quoted = columns
                        .iter()
                        .map(|c| format!("quote(\"{c}\")"))
                        .collect::<Vec<_>>()
                        .join(" || ',' || ");
                    let dump = self.query_opt_string(
                        &format!("SELECT group_concat({quoted}, ';') FROM \"{table}\""),
                        &[],
                    );
                    out.push_str(&format!("{table}: {}\n", dump.unwrap_or_default()));
                }
            }
            Kind::Postgres { .. } => {
                let tables = self.query_strings(
                    "SELECT table_name::text FROM information_schema.tables
                     WHERE table_schema = 'public' ORDER BY 1",
                    &[],
                );
                for table in tables {
                    let dump = self.query_opt_string(
                        &format!(
                            "SELECT string_agg(t::text, ';' ORDER BY t::text) FROM \"{table}\" t"
                        ),
                        &[],
                    );
                    out.push_str(&format!("{table}: {}\n", dump.unwrap_or_default()));
                }
            }
        }
        out
    }

    fn with_client<T>(&self, f: impl FnOnce(&mut postgres::Client) -> T) -> T {
        let Kind::Postgres { client, .. } = &self.kind else {
            unreachable!("a PostgreSQL client for a SQLite database");
        };
        // A test that panicked while querying leaves the connection usable.
        let mut guard = client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let client = guard.get_or_insert_with(|| {
            Box::new(
                postgres::Client::connect(&self.location, postgres::NoTls)
                    .unwrap_or_else(|e| panic!("connect to the test database: {e}")),
            )
        });
        f(client)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Kind::Postgres {
            server,
            name,
            client,
        } = &mut self.kind
        {
            if let Ok(client) = client.get_mut() {
                client.take();
            }
            // FORCE: a runner a failed test left behind may still be connected.
            let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            if let Err(e) = postgres::Client::connect(server, postgres::NoTls)
                .and_then(|mut admin| admin.batch_execute(&drop))
            {
                eprintln!("could not drop the test database {name}: {e}");
            }
        }
    }
}

/// Run one statement on the server itself (not a test's database).
fn pg_admin(server: &str, sql: &str) {
    let mut admin = postgres::Client::connect(server, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect to RUNNER_TEST_PG: {e}"));
    admin
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The server URL with its database replaced by `name`.
fn with_database(server: &str, name: &str) -> String {
    let (scheme, rest) = server
        .split_once("://")
        .unwrap_or_else(|| panic!("RUNNER_TEST_PG={server:?} is not a postgres:// URL"));
    let (authority, query) = match rest.find(['/', '?']) {
        Some(i) => {
            let after = &rest[i..];
            let query = after.find('?').map_or("", |q| &after[q..]);
            (&rest[..i], query)
        }
        None => (rest, ""),
    };
    format!("{scheme}://{authority}/{name}{query}")
}

/// SQLite reads `$1` as a named parameter numbered by first appearance; `?1` is positional.
fn sqlite_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

fn sqlite_value(v: &Val) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    match v {
        Val::Null => Value::Null,
        Val::Int(i) => Value::Integer(*i),
        Val::Real(f) => Value::Real(*f),
        Val::Text(s) => Value::Text(s.clone()),
        Val::Bytes(b) => Value::Blob(b.clone()),
    }
}

fn from_sqlite(v: rusqlite::types::ValueRef<'_>) -> Val {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Val::Null,
        ValueRef::Integer(i) => Val::Int(i),
        ValueRef::Real(f) => Val::Real(f),
        ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Val::Bytes(b.to_vec()),
    }
}

/// Each value with the type it is sent as.
fn postgres_params<'a>(
    values: &'a [Val],
    types: &[PgType],
) -> Vec<(&'a (dyn postgres::types::ToSql + Sync), PgType)> {
    const NULL_INT: Option<i64> = None;
    const NULL_TEXT: Option<String> = None;
    const NULL_BYTES: Option<Vec<u8>> = None;
    values
        .iter()
        .zip(types)
        .map(|(v, t)| -> (&(dyn postgres::types::ToSql + Sync), PgType) {
            let value: &(dyn postgres::types::ToSql + Sync) = match v {
                Val::Null if *t == PgType::TEXT => &NULL_TEXT,
                Val::Null if *t == PgType::BYTEA => &NULL_BYTES,
                Val::Null => &NULL_INT,
                Val::Int(i) => i,
                Val::Real(f) => f,
                Val::Text(s) => s,
                Val::Bytes(b) => b,
            };
            (value, t.clone())
        })
        .collect()
}

/// A column as the same value SQLite would give: booleans (what a comparison yields) as 0/1.
fn from_postgres(row: &postgres::Row, i: usize) -> Val {
    let ty = row.columns()[i].type_().clone();
    let get = |r: Result<Option<Val>, postgres::Error>| {
        r.unwrap_or_else(|e| panic!("column {i} ({ty}): {e}"))
            .unwrap_or(Val::Null)
    };
    match ty {
        PgType::INT8 => get(row.try_get::<_, Option<i64>>(i).map(|v| v.map(Val::Int))),
        PgType::INT4 => get(row
            .try_get::<_, Option<i32>>(i)
            .map(|v| v.map(|v| Val::Int(v.into())))),
        PgType::INT2 => get(row
            .try_get::<_, Option<i16>>(i)
            .map(|v| v.map(|v| Val::Int(v.into())))),
        PgType::BOOL => get(row
            .try_get::<_, Option<bool>>(i)
            .map(|v| v.map(|v| Val::Int(v.into())))),
        PgType::FLOAT8 => get(row.try_get::<_, Option<f64>>(i).map(|v| v.map(Val::Real))),
        PgType::BYTEA => get(row
            .try_get::<_, Option<Vec<u8>>>(i)
            .map(|v| v.map(Val::Bytes))),
        PgType::TEXT | PgType::VARCHAR | PgType::NAME | PgType::BPCHAR => get(row
            .try_get::<_, Option<String>>(i)
            .map(|v| v.map(Val::Text))),
        other => panic!("column {i}: type {other} has no counterpart in the SQLite schema"),
    }
}
