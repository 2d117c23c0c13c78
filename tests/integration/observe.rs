//! See and steer what ran: `history`, `show`, `status`, `metrics`, `retry`, `cancel`, `prune`,
//! on real databases through the real binary. Times are pinned with `--now`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::common::{process_alive, stderr, stdout, wait_until, Env, BIN};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// `<key>` and `<key>_epoch` for each time key.
fn with_epochs(plain: &[&str], times: &[&str]) -> BTreeSet<String> {
    let mut all = set(plain);
    for t in times {
        all.insert(t.to_string());
        all.insert(format!("{t}_epoch"));
    }
    all
}

fn add(env: &Env, now: &str, name: &str, cron: &str, extra: &[&str], command: &str) {
    let mut args = vec!["--now", now, "schedule", "add", name, "--cron", cron];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", command]);
    env.ok(&args);
}

/// A tick at `now` that must exit 0 and print nothing on stdout; returns its stderr.
fn tick(env: &Env, now: &str) -> String {
    let out = env
        .cmd()
        .args(["--now", now, "tick"])
        .output()
        .expect("tick");
    assert!(
        out.status.success(),
        "tick --now {now}: exit {:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    assert_eq!(stdout(&out), "", "a tick prints nothing on stdout");
    stderr(&out)
}

fn one(env: &Env, sql: &str) -> i64 {
    env.count(sql)
}

fn run_ids(env: &Env, job: &str) -> Vec<i64> {
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

fn status_of(env: &Env, run_id: i64) -> String {
    env.strings(&format!("SELECT status FROM job_runs WHERE id = {run_id}"))
        .pop()
        .unwrap_or_default()
}

/// Insert `count` runs of schedule `job` that finished (succeeded) `age_secs` before `now`, each
/// with one attempt and two events: one fast INSERT ... SELECT per table.
fn insert_finished_runs(env: &Env, job: &str, count: i64, now: i64, age_secs: i64) {
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

fn epoch(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("time")
        .timestamp()
}

fn time_at(epoch: i64) -> String {
    chrono::DateTime::from_timestamp(epoch, 0)
        .expect("epoch")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A `runner tick` in the background, and the job process group it runs; both killed on drop.
struct BackgroundTick {
    child: Option<Child>,
    job_pidfile: std::path::PathBuf,
}

impl BackgroundTick {
    fn start(env: &Env, args: &[&str], job_pidfile: &Path) -> BackgroundTick {
        let child = env
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tick");
        BackgroundTick {
            child: Some(child),
            job_pidfile: job_pidfile.to_path_buf(),
        }
    }

    fn job_pid(&self) -> Option<u32> {
        fs::read_to_string(&self.job_pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Wait for the tick to exit; returns (exit code, stderr).
    fn finish(mut self, timeout: Duration) -> (Option<i32>, String) {
        let mut child = self.child.take().expect("running");
        let mut exited = None;
        wait_until(timeout, "the background tick to exit", || {
            exited = child.try_wait().expect("try_wait");
            exited.is_some()
        });
        let mut err = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut err);
        }
        (exited.and_then(|s| s.code()), err)
    }
}

impl Drop for BackgroundTick {
    fn drop(&mut self) {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pgid) = self.job_pid().filter(|p| *p > 1 && process_alive(*p)) {
            let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
        }
    }
}

// ---------------------------------------------------------------------------
// history
// ---------------------------------------------------------------------------

const HISTORY_KEYS: &[&str] = &[
    "id",
    "job",
    "timezone",
    "trigger",
    "status",
    "attempt",
    "max_attempts",
    "duration_ms",
    "exit_code",
    "error_code",
    "error_detail",
    "skip_reason",
];
const HISTORY_TIMES: &[&str] = &[
    "scheduled_for",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
];

/// Three hours of an hourly job in New York (succeeds) and an hourly job in UTC (fails, one
/// attempt): six runs, 12:00Z to 14:00Z.
fn hourly_history() -> Env {
    let env = Env::init();
    let t0 = "2026-07-01T11:30:00Z";
    add(
        &env,
        t0,
        "report",
        "0 * * * *",
        &["--tz", "America/New_York"],
        "echo done",
    );
    add(
        &env,
        t0,
        "flaky",
        "0 * * * *",
        &["--max-attempts", "1"],
        "echo broken >&2; exit 3",
    );
    for hour in ["12", "13", "14"] {
        tick(&env, &format!("2026-07-01T{hour}:00:30Z"));
    }
    env
}

#[test]
fn history_lists_runs_newest_first_in_their_schedules_zone() {
    let env = hourly_history();
    let out = env.ok(&["history"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "header and six runs:\n{out}");
    for column in [
        "RUN",
        "JOB",
        "SCHEDULED",
        "STATUS",
        "ATTEMPT",
        "DURATION",
        "RESULT",
    ] {
        assert!(lines[0].contains(column), "header lacks {column}: {out}");
    }
    // Newest first: 14:00 (both jobs, the later id first), then 13:00, then 12:00.
    let order: Vec<(&str, &str)> = lines[1..]
        .iter()
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            (words[1], words[2])
        })
        .collect();
    assert_eq!(
        order,
        vec![
            ("flaky", "2026-07-01T14:00:00+00:00"),
            ("report", "2026-07-01T10:00:00-04:00"),
            ("flaky", "2026-07-01T13:00:00+00:00"),
            ("report", "2026-07-01T09:00:00-04:00"),
            ("flaky", "2026-07-01T12:00:00+00:00"),
            ("report", "2026-07-01T08:00:00-04:00"),
        ],
        "{out}"
    );
    let report = lines[2];
    assert!(
        report.contains("succeeded") && report.contains("1/3") && report.contains("exit 0"),
        "{report}"
    );
    let flaky = lines[1];
    assert!(
        flaky.contains("dead") && flaky.contains("1/1") && flaky.contains("EXIT:3"),
        "{flaky}"
    );
    assert!(!out.contains('\x1b'), "no colours into a pipe: {out:?}");
}

#[test]
fn history_filters_by_name_status_since_and_limit() {
    let env = hourly_history();
    let ids = |args: &[&str]| -> Vec<i64> {
        let mut all = vec!["history", "--json"];
        all.extend_from_slice(args);
        json(&env.ok(&all))
            .as_array()
            .expect("array")
            .iter()
            .map(|r| r["id"].as_i64().expect("id"))
            .collect()
    };
    let report = run_ids(&env, "report");
    let flaky = run_ids(&env, "flaky");
    let mut newest_report = report.clone();
    newest_report.reverse();
    assert_eq!(ids(&["report"]), newest_report);
    assert_eq!(ids(&["--status", "dead"]).len(), 3);
    assert!(ids(&["--status", "dead"])
        .iter()
        .all(|id| flaky.contains(id)));
    assert_eq!(ids(&["report", "--status", "dead"]), Vec::<i64>::new());
    assert_eq!(ids(&["--limit", "2"]).len(), 2);
    // --since as a time, and as a duration before now.
    assert_eq!(ids(&["--since", "2026-07-01T13:00:00Z"]).len(), 4);
    assert_eq!(
        ids(&["--now", "2026-07-01T14:30:00Z", "--since", "45m"]).len(),
        2
    );
    assert_eq!(
        ids(&["--now", "2026-07-01T14:30:00Z", "--since", "1h30m", "flaky"]).len(),
        2
    );

    // Refusals: a bad status names the accepted values; a bad --since or --limit; no such job.
    let err = env.fails(2, &["history", "--status", "failed"]);
    assert!(
        err.contains("pending, running, succeeded, dead, cancelled, skipped"),
        "{err}"
    );
    let err = env.fails(2, &["history", "--since", "yesterday"]);
    assert!(
        err.contains("RFC 3339") && err.contains("duration"),
        "{err}"
    );
    env.fails(2, &["history", "--limit", "0"]);
    let err = env.fails(3, &["history", "nosuchjob"]);
    assert!(err.contains("nosuchjob"), "{err}");
}

#[test]
fn history_json_shape() {
    let env = hourly_history();
    let runs = json(&env.ok(&["history", "--json"]));
    let runs = runs.as_array().expect("array");
    assert_eq!(runs.len(), 6);
    for run in runs {
        assert_eq!(keys(run), with_epochs(HISTORY_KEYS, HISTORY_TIMES), "{run}");
    }
    let dead = &runs[0];
    assert_eq!(dead["job"], "flaky");
    assert_eq!(dead["status"], "dead");
    assert_eq!(dead["trigger"], "schedule");
    assert_eq!(dead["scheduled_for"], "2026-07-01T14:00:00Z");
    assert_eq!(dead["scheduled_for_epoch"], epoch("2026-07-01T14:00:00Z"));
    assert_eq!(dead["attempt"], 1);
    assert_eq!(dead["max_attempts"], 1);
    assert_eq!(dead["exit_code"], 3);
    assert_eq!(dead["error_code"], "EXIT:3");
    assert!(dead["error_detail"]
        .as_str()
        .expect("detail")
        .contains("broken"));
    assert!(dead["duration_ms"].as_i64().is_some());
    let ok = &runs[1];
    assert_eq!(ok["job"], "report");
    assert_eq!(ok["timezone"], "America/New_York");
    assert_eq!(ok["status"], "succeeded");
    assert_eq!(ok["exit_code"], 0);
    assert_eq!(ok["error_code"], Value::Null);
    assert_eq!(ok["skip_reason"], Value::Null);
    // Empty is an empty array, not an error.
    assert_eq!(
        json(&env.ok(&["history", "--json", "--status", "cancelled"])),
        Value::Array(vec![])
    );
}

#[test]
fn history_into_a_closed_pipe_exits_0() {
    let env = Env::init();
    add(
        &env,
        "2026-07-01T00:00:00Z",
        "many",
        "0 0 1 1 *",
        &[],
        "true",
    );
    // More than a pipe buffer of output (64 KiB), so the writes hit the closed pipe.
    insert_finished_runs(&env, "many", 3000, epoch("2026-07-01T00:00:00Z"), 60);
    let out = Command::new("bash")
        .args([
            "-c",
            r#"set -o pipefail; "$RUNNER" history --limit 3000 | head -n 1"#,
        ])
        .env("RUNNER", BIN)
        .env("RUNNER_DB", &env.db)
        .env_remove("NO_COLOR")
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "history | head exited {:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    assert!(stdout(&out).starts_with(" RUN"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn history_colours_only_on_a_terminal_and_never_with_no_color_or_json() {
    let env = hourly_history();
    // Into a pipe: plain (checked in the test above too), also with --json.
    assert!(!env.ok(&["history"]).contains('\x1b'));
    assert!(!env.ok(&["history", "--json"]).contains('\x1b'));
    // On a terminal: `script` gives the command a pseudo-terminal.
    let on_tty = |no_color: Option<&str>, args: &str| -> String {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &format!("{BIN} history {args}"), "/dev/null"])
            .env("RUNNER_DB", &env.db)
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd.output().expect("script");
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    if Command::new("script").arg("--version").output().is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI needs `script` (util-linux) for the terminal colour test"
        );
        eprintln!("skipping the terminal half: no `script` command");
        return;
    }
    let coloured = on_tty(None, "");
    assert!(
        coloured.contains("\x1b["),
        "a terminal gets colours: {coloured:?}"
    );
    assert!(!on_tty(Some("1"), "").contains("\x1b["), "NO_COLOR=1");
    assert!(!on_tty(None, "--json").contains("\x1b["), "--json");
    // NO_COLOR set but empty does not count (no-color.org).
    assert!(on_tty(Some(""), "").contains("\x1b["), "NO_COLOR=''");
}

// ---------------------------------------------------------------------------
// show
// ---------------------------------------------------------------------------

#[test]
fn show_escapes_control_characters_from_job_output() {
    let env = Env::init();
    let t0 = "2026-07-01T11:59:00Z";
    add(
        &env,
        t0,
        "noisy",
        "0 * * * *",
        &[],
        r"printf 'before\033[2Jafter\rback\n'; printf 'bell\007\n' >&2",
    );
    tick(&env, "2026-07-01T12:00:05Z");
    let id = run_ids(&env, "noisy")[0];
    let out = env.run(&["show", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let raw = &out.stdout;
    assert!(
        !raw.contains(&0x1b) && !raw.contains(&b'\r') && !raw.contains(&0x07),
        "raw control bytes reached the terminal: {:?}",
        stdout(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains(r"before\x1b[2Jafter\rback"),
        "stdout tail shown escaped:\n{text}"
    );
    assert!(text.contains(r"bell\x07"), "stderr tail escaped:\n{text}");
    for expected in [
        &format!("run {id} of noisy"),
        "succeeded on attempt 1 of 3",
        "2026-07-01T12:00:00+00:00",
        "attempt 1: exit 0",
        "owner:",
        "started:",
        "finished:",
        "events:",
        "ENQUEUED",
        "CLAIMED",
        "SUCCEEDED",
    ] {
        assert!(text.contains(expected), "show lacks {expected:?}:\n{text}");
    }

    // JSON: the tails are escaped strings too.
    let shown = json(&env.ok(&["show", &id.to_string(), "--json"]));
    let attempt = &shown["attempts"][0];
    assert_eq!(attempt["stdout_tail"], "before\\x1b[2Jafter\\rback\n");
    assert_eq!(attempt["stderr_tail"], "bell\\x07\n");
    env.fails(3, &["show", "999999"]);
    env.fails(3, &["show", "999999", "--json"]);
    env.fails(2, &["show", "not-a-number"]);
}

#[test]
fn show_json_shape() {
    let env = hourly_history();
    let id = run_ids(&env, "flaky")[0];
    let shown = json(&env.ok(&["show", &id.to_string(), "--json"]));
    let mut plain: Vec<&str> = HISTORY_KEYS.to_vec();
    plain.extend([
        "command",
        "workdir",
        "idempotency_key",
        "owner",
        "attempts",
        "events",
    ]);
    let mut times: Vec<&str> = HISTORY_TIMES.to_vec();
    times.extend(["lease_expires_at", "heartbeat_at"]);
    assert_eq!(keys(&shown), with_epochs(&plain, &times));
    assert_eq!(shown["id"], id);
    assert_eq!(shown["command"], "echo broken >&2; exit 3");
    let attempts = shown["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        keys(&attempts[0]),
        with_epochs(
            &[
                "attempt",
                "owner",
                "host",
                "runner_pid",
                "child_pid",
                "duration_ms",
                "outcome",
                "exit_code",
                "error_code",
                "error_detail",
                "stdout_tail",
                "stderr_tail",
                "stdout_bytes",
                "stderr_bytes",
            ],
            &["started_at", "finished_at"]
        )
    );
    assert_eq!(attempts[0]["outcome"], "failed");
    assert_eq!(attempts[0]["error_code"], "EXIT:3");
    assert_eq!(attempts[0]["stderr_tail"], "broken\n");
    assert_eq!(attempts[0]["stderr_bytes"], 7);
    let events = shown["events"].as_array().expect("events");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["ENQUEUED", "CLAIMED", "FAILED", "DEAD"]);
    for e in events {
        assert_eq!(keys(e), with_epochs(&["kind", "actor", "detail"], &["at"]));
        assert!(e["detail"].is_object(), "detail is parsed JSON: {e}");
    }
}

// ---------------------------------------------------------------------------
// status
// ---------------------------------------------------------------------------

const STATUS_KEYS: &[&str] = &[
    "counts",
    "oldest_due",
    "running",
    "expired_leases",
    "retries_in_flight",
    "last_24h",
    "last_tick_age_secs",
    "database",
    "warnings",
];
const STATUS_TIMES: &[&str] = &["now", "last_tick_at", "last_prune_at"];

#[test]
fn status_warns_before_the_first_tick_and_when_ticks_stop() {
    let env = Env::init();
    // Never ticked: a warning, exit 0, in text and JSON.
    let out = env.ok(&["status"]);
    assert!(out.starts_with("WARNING: no tick has run yet"), "{out}");
    let report = json(&env.ok(&["status", "--json"]));
    assert_eq!(keys(&report), with_epochs(STATUS_KEYS, STATUS_TIMES));
    assert_eq!(report["last_tick_at"], Value::Null);
    let warnings = report["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0]
        .as_str()
        .expect("text")
        .contains("no tick has run yet"));

    tick(&env, "2026-07-01T12:00:00Z");
    // 30 s later: healthy.
    let report = json(&env.ok(&["--now", "2026-07-01T12:00:30Z", "status", "--json"]));
    assert_eq!(report["warnings"], Value::Array(vec![]), "{report}");
    assert_eq!(report["last_tick_at"], "2026-07-01T12:00:00Z");
    assert_eq!(report["last_tick_at_epoch"], epoch("2026-07-01T12:00:00Z"));
    let out = env.ok(&["--now", "2026-07-01T12:00:30Z", "status"]);
    assert!(!out.contains("WARNING"), "{out}");
    // Five minutes later: cron is not running the tick.
    let out = env.ok(&["--now", "2026-07-01T12:05:00Z", "status"]);
    assert!(
        out.starts_with("WARNING: the last tick ran 5m 0s ago"),
        "{out}"
    );
    let report = json(&env.ok(&["--now", "2026-07-01T12:05:00Z", "status", "--json"]));
    assert_eq!(report["last_tick_age_secs"], 300);
    assert!(report["warnings"][0]
        .as_str()
        .expect("warning")
        .contains("last tick ran"));
}

#[test]
fn status_reports_due_work_retries_failures_and_the_database() {
    let env = Env::init();
    let t0 = "2026-07-01T11:00:00Z";
    add(&env, t0, "ok", "0 0 1 1 *", &[], "true");
    add(
        &env,
        t0,
        "retrying",
        "0 0 1 1 *",
        &["--backoff-base", "1h", "--backoff-max", "2h"],
        "exit 4",
    );
    add(
        &env,
        t0,
        "doomed",
        "0 0 1 1 *",
        &["--max-attempts", "1"],
        "exit 5",
    );
    for job in ["ok", "retrying", "doomed"] {
        env.ok(&["--now", "2026-07-01T12:00:00Z", "run", job]);
    }
    tick(&env, "2026-07-01T12:00:01Z");
    // Enqueued, not ticked: due and waiting.
    env.ok(&["--now", "2026-07-01T12:00:10Z", "run", "ok"]);
    let due_id = *run_ids(&env, "ok").last().expect("run");

    let report = json(&env.ok(&["--now", "2026-07-01T12:01:40Z", "status", "--json"]));
    let counts = &report["counts"];
    assert_eq!(
        keys(counts),
        set(&[
            "pending",
            "running",
            "succeeded",
            "dead",
            "cancelled",
            "skipped"
        ])
    );
    assert_eq!(counts["pending"], 2, "{report}");
    assert_eq!(counts["succeeded"], 1);
    assert_eq!(counts["dead"], 1);
    assert_eq!(counts["running"], 0);
    assert_eq!(counts["cancelled"], 0);
    let due = &report["oldest_due"];
    assert_eq!(due["run_id"], due_id, "{report}");
    assert_eq!(due["job"], "ok");
    let lag = due["lag_secs"].as_i64().expect("lag");
    assert!((89..=92).contains(&lag), "lag {lag}");
    assert_eq!(
        keys(due),
        with_epochs(
            &["run_id", "job", "attempt", "max_attempts", "lag_secs"],
            &["scheduled_for", "due_at"]
        )
    );
    assert_eq!(
        report["retries_in_flight"],
        serde_json::json!([{ "attempt": 2, "runs": 1 }])
    );
    let recent = &report["last_24h"];
    assert_eq!(
        keys(recent),
        with_epochs(&["top_errors", "dead_runs", "dead"], &["since"])
    );
    assert_eq!(recent["dead_runs"], 1);
    assert_eq!(recent["dead"][0]["job"], "doomed");
    assert_eq!(recent["dead"][0]["error_code"], "EXIT:5");
    let errors: HashSet<String> = recent["top_errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| {
            format!(
                "{}={}",
                e["error_code"].as_str().unwrap_or("?"),
                e["attempts"]
            )
        })
        .collect();
    assert_eq!(
        errors,
        HashSet::from(["EXIT:4=1".into(), "EXIT:5=1".into()])
    );
    let db = &report["database"];
    assert_eq!(
        keys(db),
        set(&["location", "size_bytes", "wal_bytes", "oldest_run"])
    );
    assert!(db["size_bytes"].as_i64().expect("size") > 0);
    assert_eq!(db["location"], env.db.display().to_string());
    assert_eq!(db["oldest_run"]["job"], "ok");
    assert_eq!(report["warnings"], Value::Array(vec![]));

    let text = env.ok(&["--now", "2026-07-01T12:01:40Z", "status"]);
    for expected in [
        "runs:            pending 2, running 0, succeeded 1, dead 1, cancelled 0, skipped 0",
        &format!("oldest due:      run {due_id} (ok)"),
        "waiting 1m ",
        "retries:         attempt 2: 1 run",
        "EXIT:4 (1 attempt), EXIT:5 (1 attempt)",
        "dead (24h):      1",
        "last tick:       2026-07-01T12:00:01Z (1m ",
        "oldest run kept: run 1 (ok)",
    ] {
        assert!(
            text.contains(expected),
            "status lacks {expected:?}:\n{text}"
        );
    }
    assert!(!text.contains("WARNING"), "{text}");
}

// ---------------------------------------------------------------------------
// cancel and retry
// ---------------------------------------------------------------------------

#[test]
fn cancel_of_a_running_run_stops_its_process_group_and_status_shows_its_lease() {
    let env = Env::init();
    let pidfile = env.path("job.pid");
    let command = format!("echo $$ > '{}'; sleep 30", pidfile.display());
    add(
        &env,
        "2026-07-01T11:00:00Z",
        "sleeper",
        "0 0 1 1 *",
        &[],
        &command,
    );
    env.ok(&["run", "sleeper"]);
    let bg = BackgroundTick::start(
        &env,
        &["tick", "--lease", "3s", "--owner", "bg-tick"],
        &pidfile,
    );
    let run_id = run_ids(&env, "sleeper")[0];
    wait_until(Duration::from_secs(20), "the job to start", || {
        bg.job_pid().is_some() && status_of(&env, run_id) == "running"
    });
    let job = bg.job_pid().expect("pid");

    // status: the running run with its owner, host and lease; 10 minutes on, its lease expired.
    let report = json(&env.ok(&["status", "--json"]));
    let running = &report["running"][0];
    assert_eq!(running["run_id"], run_id, "{report}");
    assert_eq!(running["owner"], "bg-tick");
    assert!(running["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert_eq!(running["lease_expired"], false);
    assert!(running["lease_expires_at_epoch"].as_i64().is_some());
    assert_eq!(report["expired_leases"], Value::Array(vec![]));
    let later = time_at(running["lease_expires_at_epoch"].as_i64().expect("expiry") + 600);
    let report = json(&env.ok(&["--now", &later, "status", "--json"]));
    assert_eq!(report["expired_leases"][0]["run_id"], run_id, "{report}");
    assert!(
        report["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().unwrap_or("").contains("expired lease")),
        "{report}"
    );
    let text = env.ok(&["--now", &later, "status"]);
    assert!(text.contains("lease EXPIRED"), "{text}");
    assert!(text.contains("expired lease"), "{text}");
    // And in history, shown running with how long it has run.
    assert!(env.ok(&["history", "sleeper"]).contains("running"));

    // Retrying a running run makes no sense.
    let err = env.fails(2, &["retry", &run_id.to_string()]);
    assert!(err.contains("running"), "{err}");

    let out = env.ok(&["cancel", &run_id.to_string()]);
    assert!(out.contains(&format!("cancelled run {run_id}")), "{out}");
    assert!(out.contains("next heartbeat"), "{out}");
    assert_eq!(status_of(&env, run_id), "cancelled");
    wait_until(
        Duration::from_secs(20),
        "the job's process group to be killed",
        || !process_alive(job),
    );
    let (code, err) = bg.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "the tick still succeeds: {err}");

    let conn = env.conn();
    let (lease, owner, finished, code): (Option<String>, Option<String>, Option<i64>, String) =
        conn.query_row(
            "SELECT lease_token, owner, finished_at, error_code FROM job_runs WHERE id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("run");
    assert_eq!((lease, owner), (None, None));
    assert!(finished.is_some());
    assert_eq!(code, "CANCELLED");
    // The tick closed the attempt when the job stopped.
    let attempt_code: Option<String> = conn
        .query_row(
            "SELECT error_code FROM job_attempts WHERE run_id = ?1 AND finished_at IS NOT NULL",
            [run_id],
            |r| r.get(0),
        )
        .expect("closed attempt");
    assert_eq!(attempt_code.as_deref(), Some("CANCELLED"));
    let kinds = env.strings(&format!(
        "SELECT kind FROM job_events WHERE run_id = {run_id} ORDER BY id"
    ));
    assert!(kinds.contains(&"CANCELLED".to_string()), "{kinds:?}");

    // Cancelled is final: neither cancel nor retry applies.
    let err = env.fails(2, &["cancel", &run_id.to_string()]);
    assert!(err.contains("already finished"), "{err}");
    env.fails(2, &["retry", &run_id.to_string()]);
}

#[test]
fn cancel_of_a_pending_run_means_it_never_runs() {
    let env = Env::init();
    let marker = env.path("ran");
    add(
        &env,
        "2026-07-01T11:00:00Z",
        "once",
        "0 0 1 1 *",
        &[],
        &format!("touch '{}'", marker.display()),
    );
    env.ok(&["run", "once"]);
    let id = run_ids(&env, "once")[0];
    let out = env.ok(&["cancel", &id.to_string()]);
    assert!(
        out.contains(&format!("cancelled run {id} of once")),
        "{out}"
    );
    env.ok(&["tick"]);
    assert!(!marker.exists(), "a cancelled run was executed");
    assert_eq!(status_of(&env, id), "cancelled");
    assert_eq!(
        one(
            &env,
            &format!("SELECT count(*) FROM job_runs WHERE id = {id} AND finished_at IS NOT NULL")
        ),
        1
    );
    let shown = json(&env.ok(&["show", &id.to_string(), "--json"]));
    let last = shown["events"].as_array().expect("events").last().cloned();
    assert_eq!(
        last.as_ref().map(|e| e["kind"].clone()),
        Some("CANCELLED".into())
    );
    assert_eq!(
        last.map(|e| e["detail"]["from"].clone()),
        Some("pending".into())
    );
    env.fails(3, &["cancel", "424242"]);
    env.fails(3, &["retry", "424242"]);
}

#[test]
fn retry_of_a_dead_run_allows_one_more_attempt_and_keeps_counting() {
    let env = Env::init();
    let flag = env.path("healed");
    // Fails until the flag file exists.
    let command = format!("test -e '{}' || exit 7", flag.display());
    add(
        &env,
        "2026-07-01T11:00:00Z",
        "fragile",
        "0 0 1 1 *",
        &[
            "--max-attempts",
            "2",
            "--backoff-base",
            "0s",
            "--backoff-max",
            "0s",
        ],
        &command,
    );
    env.ok(&["--now", "2026-07-01T12:00:00Z", "run", "fragile"]);
    let id = run_ids(&env, "fragile")[0];
    tick(&env, "2026-07-01T12:00:01Z");
    tick(&env, "2026-07-01T12:00:05Z");
    assert_eq!(status_of(&env, id), "dead");

    let out = env.ok(&["--now", "2026-07-01T12:01:00Z", "retry", &id.to_string()]);
    assert!(
        out.contains("attempt 3 of 3") && out.contains("raised from 2 to 3"),
        "{out}"
    );
    let row = |what: &str| {
        one(
            &env,
            &format!("SELECT {what} FROM job_runs WHERE id = {id}"),
        )
    };
    assert_eq!(status_of(&env, id), "pending");
    assert_eq!(row("attempt"), 2, "attempts keep counting");
    assert_eq!(row("max_attempts"), 3);
    assert_eq!(row("finished_at IS NULL"), 1);
    let shown = json(&env.ok(&["show", &id.to_string(), "--json"]));
    let retried = shown["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["kind"] == "RETRIED")
        .cloned()
        .expect("a RETRIED event");
    assert_eq!(retried["detail"]["from"], "dead");
    assert_eq!(retried["detail"]["next_attempt"], 3);
    assert_eq!(retried["detail"]["max_attempts_before"], 2);

    fs::write(&flag, "").expect("flag");
    tick(&env, "2026-07-01T12:01:01Z");
    assert_eq!(status_of(&env, id), "succeeded");
    assert_eq!(row("attempt"), 3);
    assert_eq!(
        one(
            &env,
            &format!("SELECT count(*) FROM job_attempts WHERE run_id = {id}")
        ),
        3
    );
    // Succeeded: nothing to retry.
    let err = env.fails(2, &["retry", &id.to_string()]);
    assert!(
        err.contains("succeeded") && err.contains("runner run fragile"),
        "{err}"
    );
}

#[test]
fn retry_of_a_run_waiting_out_its_backoff_makes_it_due_now() {
    let env = Env::init();
    add(
        &env,
        "2026-07-01T11:00:00Z",
        "slowretry",
        "0 0 1 1 *",
        &["--backoff-base", "1h", "--backoff-max", "1h"],
        "exit 9",
    );
    env.ok(&["--now", "2026-07-01T12:00:00Z", "run", "slowretry"]);
    let id = run_ids(&env, "slowretry")[0];
    // Not yet tried: nothing to retry.
    let err = env.fails(2, &["retry", &id.to_string()]);
    assert!(err.contains("not failed yet"), "{err}");

    tick(&env, "2026-07-01T12:00:01Z");
    assert_eq!(status_of(&env, id), "pending");
    let run_at = one(
        &env,
        &format!("SELECT run_at FROM job_runs WHERE id = {id}"),
    );
    assert!(run_at > epoch("2026-07-01T12:20:00Z"), "a backoff delay");
    // A tick now does nothing; after retry it runs attempt 2.
    tick(&env, "2026-07-01T12:00:10Z");
    assert_eq!(
        one(
            &env,
            &format!("SELECT attempt FROM job_runs WHERE id = {id}")
        ),
        1
    );
    let out = env.ok(&["--now", "2026-07-01T12:00:20Z", "retry", &id.to_string()]);
    assert!(out.contains("attempt 2 of 3"), "{out}");
    assert!(
        one(
            &env,
            &format!("SELECT run_at FROM job_runs WHERE id = {id}")
        ) <= epoch("2026-07-01T12:00:21Z")
    );
    assert_eq!(
        one(
            &env,
            &format!("SELECT max_attempts FROM job_runs WHERE id = {id}")
        ),
        3,
        "attempts were left: the limit stays"
    );
    tick(&env, "2026-07-01T12:00:30Z");
    assert_eq!(
        one(
            &env,
            &format!("SELECT attempt FROM job_runs WHERE id = {id}")
        ),
        2
    );
    assert_eq!(
        env.strings(&format!(
            "SELECT kind FROM job_events WHERE run_id = {id} AND kind = 'RETRIED'"
        ))
        .len(),
        1
    );
}

// ---------------------------------------------------------------------------
// metrics
// ---------------------------------------------------------------------------

/// A strict reading of the Prometheus text format (0.0.4): every line is a HELP, a TYPE or a
/// sample; each family has one HELP and one TYPE before its samples and its samples together;
/// names and labels are well formed, label values correctly escaped, values floats; no series
/// twice. Returns family name -> type, and each sample as (name, labels, value).
pub(super) type Sample = (String, Vec<(String, String)>, f64);

pub(super) fn parse_exposition(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    fn family_of(name: &str, types: &HashMap<String, String>) -> Option<String> {
        if types.contains_key(name) {
            return Some(name.to_string());
        }
        for suffix in ["_sum", "_count", "_bucket"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if matches!(
                    types.get(base).map(String::as_str),
                    Some("summary" | "histogram")
                ) {
                    return Some(base.to_string());
                }
            }
        }
        None
    }
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut finished_families: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut series: HashSet<String> = HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line in exposition");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(is_name(name), "bad name {name}");
            assert!(helps.insert(name.to_string()), "HELP twice for {name}");
            let mut chars = help.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    assert!(
                        matches!(chars.next(), Some('\\' | 'n')),
                        "bad escape in HELP: {line}"
                    );
                }
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name type");
            assert!(is_name(name), "bad name {name}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "bad type {kind}"
            );
            assert!(helps.contains(name), "HELP before TYPE for {name}");
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "TYPE twice for {name}"
            );
            if let Some(previous) = current.replace(name.to_string()) {
                finished_families.insert(previous);
            }
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment line: {line}");
        // name{labels} value
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => panic!("sample without value: {line}"),
        };
        assert!(is_name(name), "bad sample name in {line}");
        let family = family_of(name, &types)
            .unwrap_or_else(|| panic!("sample {name} before its TYPE: {line}"));
        assert_eq!(
            Some(&family),
            current.as_ref(),
            "samples of {family} not together: {line}"
        );
        assert!(!finished_families.contains(&family));
        let mut labels = Vec::new();
        let mut rest = rest;
        if let Some(after) = rest.strip_prefix('{') {
            let mut chars = after.char_indices();
            let mut label_name = String::new();
            let end;
            loop {
                let (i, c) = chars.next().expect("unterminated labels");
                match c {
                    '}' => {
                        end = i;
                        break;
                    }
                    ',' => {}
                    '=' => {
                        assert!(is_name(&label_name), "bad label name in {line}");
                        assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                        let mut value = String::new();
                        loop {
                            match chars.next().expect("unterminated label value").1 {
                                '"' => break,
                                '\\' => match chars.next().expect("escape").1 {
                                    '\\' => value.push('\\'),
                                    '"' => value.push('"'),
                                    'n' => value.push('\n'),
                                    other => panic!("bad escape \\{other} in {line}"),
                                },
                                '\n' => panic!("raw newline in label value"),
                                c => value.push(c),
                            }
                        }
                        labels.push((std::mem::take(&mut label_name), value));
                    }
                    c => label_name.push(c),
                }
            }
            rest = &after[end + 1..];
        }
        let value = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("no space before value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value {v:?} in {line}")),
        };
        let mut sorted = labels.clone();
        sorted.sort();
        assert!(
            series.insert(format!("{name}{sorted:?}")),
            "series twice: {line}"
        );
        if types.get(&family).map(String::as_str) == Some("summary") && name == family {
            assert!(
                labels.iter().any(|(k, _)| k == "quantile"),
                "summary sample without quantile: {line}"
            );
        }
        samples.push((name.to_string(), labels, value));
    }
    (types, samples)
}

pub(super) fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find_map(|(n, l, v)| {
        let matches = n == name
            && labels.len() == l.len()
            && labels
                .iter()
                .all(|(k, val)| l.iter().any(|(lk, lv)| lk == k && lv == val));
        matches.then_some(*v)
    })
}

/// `promtool check metrics`, when installed (CI installs it: .ci/run).
pub(super) fn promtool_check(text: &str) {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI must validate metrics with promtool (apt-get install prometheus)"
        );
        eprintln!("promtool not installed: metrics checked by the strict parser only");
        return;
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- metrics ---\n{text}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn metrics_are_valid_exposition_format() {
    let env = Env::init();
    let t0 = "2026-07-01T11:00:00Z";
    // A name with characters label values must escape.
    let odd = r#"we"ird\job"#;
    add(&env, t0, odd, "0 0 1 1 *", &[], "true");
    add(
        &env,
        t0,
        "doomed",
        "0 0 1 1 *",
        &["--max-attempts", "1"],
        "exit 1",
    );
    for job in [odd, odd, "doomed"] {
        env.ok(&["--now", "2026-07-01T12:00:00Z", "run", job]);
    }
    tick(&env, "2026-07-01T12:00:01Z");
    env.ok(&["--now", "2026-07-01T12:00:02Z", "run", "doomed"]);

    let text = env.ok(&["--now", "2026-07-01T12:01:02Z", "metrics"]);
    promtool_check(&text);
    let (types, samples) = parse_exposition(&text);
    assert_eq!(types["runner_runs"], "gauge");
    assert_eq!(types["runner_run_duration_seconds"], "summary");
    assert_eq!(types["runner_last_tick_timestamp_seconds"], "gauge");
    assert_eq!(types["runner_dead_runs_total"], "counter");
    assert_eq!(types["runner_oldest_due_lag_seconds"], "gauge");
    for (status, n) in [
        ("pending", 1.0),
        ("running", 0.0),
        ("succeeded", 2.0),
        ("dead", 1.0),
        ("cancelled", 0.0),
        ("skipped", 0.0),
    ] {
        assert_eq!(
            sample(&samples, "runner_runs", &[("status", status)]),
            Some(n),
            "runner_runs{{status={status}}}\n{text}"
        );
    }
    assert!(
        text.contains(r#"job="we\"ird\\job""#),
        "label value escaped:\n{text}"
    );
    assert_eq!(
        sample(
            &samples,
            "runner_run_duration_seconds_count",
            &[("job", odd)]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &samples,
            "runner_run_duration_seconds_count",
            &[("job", "doomed")]
        ),
        Some(1.0)
    );
    assert!(sample(
        &samples,
        "runner_run_duration_seconds",
        &[("job", odd), ("quantile", "0.5")]
    )
    .is_some());
    assert_eq!(
        sample(&samples, "runner_last_tick_timestamp_seconds", &[]),
        Some(epoch("2026-07-01T12:00:01Z") as f64)
    );
    assert_eq!(sample(&samples, "runner_dead_runs_total", &[]), Some(1.0));
    let lag = sample(&samples, "runner_oldest_due_lag_seconds", &[]).expect("lag");
    assert!((59.0..=62.0).contains(&lag), "lag {lag}");

    // The dead-runs counter never goes down: not on retry, not on prune.
    let dead = *run_ids(&env, "doomed").first().expect("dead run");
    env.ok(&["retry", &dead.to_string()]);
    env.ok(&[
        "--now",
        "2030-01-01T00:00:00Z",
        "prune",
        "--older-than",
        "1d",
    ]);
    let text = env.ok(&["metrics"]);
    promtool_check(&text);
    let (_, samples) = parse_exposition(&text);
    assert_eq!(sample(&samples, "runner_dead_runs_total", &[]), Some(1.0));
    assert_eq!(
        sample(&samples, "runner_runs", &[("status", "dead")]),
        Some(0.0)
    );
}

#[test]
fn metrics_of_a_fresh_database_are_valid_too() {
    let env = Env::init();
    let text = env.ok(&["metrics"]);
    promtool_check(&text);
    let (_, samples) = parse_exposition(&text);
    assert_eq!(
        sample(&samples, "runner_last_tick_timestamp_seconds", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(&samples, "runner_runs", &[("status", "pending")]),
        Some(0.0)
    );
}

#[test]
fn the_strict_parser_rejects_malformed_expositions() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"y\"} 1\n";
    parse_exposition(good);
    for bad in [
        "a_total 1\n",                                                          // no TYPE
        "# HELP a A.\n# TYPE a gauge\na{x=\"y\\q\"} 1\n",                       // bad escape
        "# HELP a A.\n# TYPE a gauge\na{x=\"y\"} one\n",                        // bad value
        "# HELP a A.\n# TYPE a gauge\na 1\na 2\n",                              // series twice
        "# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\nb 1\na 1\n", // not together
        "# HELP a A.\n# TYPE a gauge\na 1",                                     // no final newline
    ] {
        let result = std::panic::catch_unwind(|| parse_exposition(bad));
        assert!(result.is_err(), "accepted:\n{bad}");
    }
}

// ---------------------------------------------------------------------------
// prune
// ---------------------------------------------------------------------------

#[test]
fn prune_dry_run_then_prune_never_touches_pending_or_running() {
    let env = Env::init();
    let t0 = "2026-07-01T00:00:00Z";
    add(&env, t0, "tenmin", "*/10 * * * *", &[], "true");
    add(
        &env,
        t0,
        "failing",
        "0 0 1 1 *",
        &["--backoff-base", "1h", "--backoff-max", "1h"],
        "exit 2",
    );
    let pidfile = env.path("job.pid");
    add(
        &env,
        t0,
        "sleeper",
        "0 0 1 1 *",
        &[],
        &format!("echo $$ > '{}'; sleep 30", pidfile.display()),
    );
    for minute in ["10", "20", "30"] {
        tick(&env, &format!("2026-07-01T00:{minute}:30Z"));
    }
    // A run waiting to retry, and one skipped (overlap) besides the succeeded ones.
    env.ok(&["--now", "2026-07-01T00:31:00Z", "run", "failing"]);
    tick(&env, "2026-07-01T00:31:01Z");
    // A running run, held by a tick that stops claiming after a second.
    env.ok(&["--now", "2026-07-01T00:32:00Z", "run", "sleeper"]);
    let bg = BackgroundTick::start(
        &env,
        &["--now", "2026-07-01T00:32:01Z", "tick", "--max-tick", "1s"],
        &pidfile,
    );
    let sleeper = run_ids(&env, "sleeper")[0];
    wait_until(Duration::from_secs(20), "the sleeper to run", || {
        status_of(&env, sleeper) == "running" && bg.job_pid().is_some()
    });
    std::thread::sleep(Duration::from_millis(1500)); // past its --max-tick: it claims no more
                                                     // A pending run nobody has claimed.
    env.ok(&["--now", "2026-07-01T00:33:00Z", "run", "tenmin"]);

    let count = |sql: &str| one(&env, sql);
    let finished = count(
        "SELECT count(*) FROM job_runs WHERE status IN ('succeeded', 'dead', 'cancelled', 'skipped')",
    );
    let unfinished = count("SELECT count(*) FROM job_runs WHERE status IN ('pending', 'running')");
    assert_eq!(finished, 3, "three succeeded runs of tenmin");
    assert_eq!(unfinished, 3, "retrying, running, pending");
    let attempts = count(
        "SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
         WHERE r.status = 'succeeded'",
    );
    let events = count(
        "SELECT count(*) FROM job_events e JOIN job_runs r ON r.id = e.run_id
         WHERE r.status = 'succeeded'",
    );

    let later = ["--now", "2026-07-02T00:00:00Z"];
    let mut args = later.to_vec();
    args.extend(["prune", "--older-than", "1h", "--dry-run"]);
    let out = env.ok(&args);
    assert_eq!(
        out,
        format!(
            "would remove 3 runs ({attempts} attempts, {events} events) that finished before \
             2026-07-01T23:00:00Z (dry run; nothing was deleted)\n"
        )
    );
    assert_eq!(
        count("SELECT count(*) FROM job_runs"),
        6,
        "dry run deleted nothing"
    );

    let mut args = later.to_vec();
    args.extend(["prune", "--older-than", "1h"]);
    let out = env.ok(&args);
    assert_eq!(
        out,
        format!(
            "removed 3 runs ({attempts} attempts, {events} events) that finished before \
             2026-07-01T23:00:00Z\n"
        )
    );
    assert_eq!(
        count("SELECT count(*) FROM job_runs WHERE status IN ('pending', 'running')"),
        3,
        "pending and running runs are untouched"
    );
    assert_eq!(count("SELECT count(*) FROM job_runs"), 3);
    assert_eq!(
        count("SELECT count(*) FROM job_attempts WHERE run_id NOT IN (SELECT id FROM job_runs)"),
        0,
        "no orphan attempts"
    );
    assert_eq!(
        count("SELECT count(*) FROM job_events WHERE run_id NOT IN (SELECT id FROM job_runs)"),
        0,
        "no orphan events"
    );
    let mut args = later.to_vec();
    args.extend(["prune", "--older-than", "1h"]);
    assert!(env.ok(&args).starts_with("nothing to prune"));
    assert_eq!(status_of(&env, sleeper), "running");

    // Clean up the running job through the product: cancel stops it.
    env.ok(&["cancel", &sleeper.to_string()]);
    let (code, err) = bg.finish(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn pruning_a_schedules_history_never_lets_a_tick_run_its_instants_again() {
    let env = Env::init();
    add(
        &env,
        "2026-07-01T00:00:00Z",
        "tenmin",
        "*/10 * * * *",
        &[],
        "true",
    );
    for minute in ["10", "20", "30", "40"] {
        tick(&env, &format!("2026-07-01T00:{minute}:05Z"));
    }
    assert_eq!(run_ids(&env, "tenmin").len(), 4);
    let out = env.ok(&[
        "--now",
        "2026-08-15T00:00:00Z",
        "prune",
        "--older-than",
        "1d",
    ]);
    assert!(out.starts_with("removed 4 runs"), "{out}");
    assert_eq!(run_ids(&env, "tenmin").len(), 0);
    // Ticks inside the pruned period, on and between handled instants: nothing comes back.
    for now in [
        "2026-07-01T00:10:00Z",
        "2026-07-01T00:20:30Z",
        "2026-07-01T00:35:00Z",
        "2026-07-01T00:40:05Z",
    ] {
        tick(&env, now);
        assert_eq!(
            run_ids(&env, "tenmin"),
            Vec::<i64>::new(),
            "a tick at {now} re-materialised a pruned instant"
        );
    }
    // The next instant after the cursor still runs.
    tick(&env, "2026-07-01T00:50:05Z");
    assert_eq!(run_ids(&env, "tenmin").len(), 1);
}

#[test]
fn prune_deletes_in_batches_of_5000_runs() {
    let env = Env::init();
    add(
        &env,
        "2026-07-01T00:00:00Z",
        "bulk",
        "0 0 1 1 *",
        &[],
        "true",
    );
    let now = epoch("2026-07-01T00:00:00Z");
    insert_finished_runs(&env, "bulk", 12_000, now, 40 * 86_400);
    let out = env.run(&["--now", "2026-07-01T00:00:00Z", "-v", "prune"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("removed 12000 runs (12000 attempts, 24000 events)"),
        "{}",
        stdout(&out)
    );
    let batches: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.contains("pruned a batch of"))
        .map(String::from)
        .collect();
    assert_eq!(batches.len(), 3, "{batches:#?}");
    assert!(
        batches[0].contains("batch of 5000 runs (5000 so far"),
        "{batches:?}"
    );
    assert!(
        batches[2].contains("batch of 2000 runs (12000 so far"),
        "{batches:?}"
    );
    assert_eq!(one(&env, "SELECT count(*) FROM job_runs"), 0);
    assert_eq!(one(&env, "SELECT count(*) FROM job_attempts"), 0);
    assert_eq!(one(&env, "SELECT count(*) FROM job_events"), 0);
}

#[test]
fn prune_retention_comes_from_runner_retention() {
    let env = Env::init();
    add(
        &env,
        "2026-07-01T00:00:00Z",
        "kept",
        "0 0 1 1 *",
        &[],
        "true",
    );
    let now = epoch("2026-07-01T00:00:00Z");
    insert_finished_runs(&env, "kept", 10, now, 10 * 86_400);
    let prune = |retention: Option<&str>, extra: &[&str]| {
        let mut cmd = env.cmd();
        cmd.args(["--now", "2026-07-01T00:00:00Z", "prune"])
            .args(extra);
        match retention {
            Some(r) => cmd.env("RUNNER_RETENTION", r),
            None => cmd.env_remove("RUNNER_RETENTION"),
        };
        cmd.output().expect("prune")
    };
    // Default 30 days: 10-day-old runs stay.
    let out = prune(None, &[]);
    assert!(
        stdout(&out).starts_with("nothing to prune"),
        "{}",
        stdout(&out)
    );
    let out = prune(Some("20d"), &["--dry-run"]);
    assert!(
        stdout(&out).starts_with("would remove 0 runs"),
        "{}",
        stdout(&out)
    );
    let out = prune(Some("5d"), &["--dry-run"]);
    assert!(
        stdout(&out).starts_with("would remove 10 runs"),
        "{}",
        stdout(&out)
    );
    // off: the tick does not prune, and prune needs an explicit --older-than.
    let out = prune(Some("off"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--older-than"), "{}", stderr(&out));
    let out = prune(Some("soon"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        prune(Some("off"), &["--older-than", "9d"]).status.code(),
        Some(0)
    );
    assert_eq!(one(&env, "SELECT count(*) FROM job_runs"), 0);
}

/// On the real clock: the automatic prune may not run on a clock shifted by `--now` (see
/// `clock.rs`), so this test ages its runs instead of moving its clock.
#[test]
fn the_tick_prunes_by_itself_at_most_once_an_hour() {
    let env = Env::init();
    env.ok(&[
        "schedule",
        "add",
        "old",
        "--cron",
        "0 0 1 1 *",
        "--paused",
        "--",
        "true",
    ]);
    let tick_with = |retention: Option<&str>| {
        let mut cmd = env.cmd();
        cmd.arg("tick");
        match retention {
            Some(r) => cmd.env("RUNNER_RETENTION", r),
            None => cmd.env_remove("RUNNER_RETENTION"),
        };
        let out = cmd.output().expect("tick");
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stderr(&out), "", "a pruning tick stays quiet");
    };
    // Retention off: nothing happens.
    let now = real_now();
    insert_finished_runs(&env, "old", 50, now, 40 * 86_400);
    tick_with(Some("off"));
    assert_eq!(one(&env, "SELECT count(*) FROM job_runs"), 50);
    // Default 30 days: the first tick prunes the 40-day-old runs.
    let before = real_now();
    tick_with(None);
    let after = real_now();
    assert_eq!(one(&env, "SELECT count(*) FROM job_runs"), 0);
    let pruned_at = one(
        &env,
        "SELECT value FROM runner_state WHERE key = 'last_prune_at'",
    );
    assert!((before..=after).contains(&pruned_at), "{pruned_at}");
    // Within the hour: not again.
    insert_finished_runs(&env, "old", 50, real_now() + 1, 40 * 86_400);
    tick_with(None);
    assert_eq!(one(&env, "SELECT count(*) FROM job_runs"), 50);
    // An hour later (the turn's time moved back an hour, as if it had passed): again. Status
    // says when.
    env.conn()
        .execute(
            "UPDATE runner_state SET value = value - 3600 WHERE key = 'last_prune_at'",
            [],
        )
        .expect("age the last prune");
    let before = real_now();
    tick_with(None);
    let after = real_now();
    assert_eq!(one(&env, "SELECT count(*) FROM job_runs"), 0);
    let report = json(&env.ok(&["status", "--json"]));
    let pruned_at = report["last_prune_at_epoch"].as_i64().expect("last prune");
    assert!((before..=after).contains(&pruned_at), "{report}");
}

/// The real clock, for tests that the automatic prune must see unshifted.
#[allow(clippy::disallowed_methods)]
fn real_now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[test]
fn ticks_keep_succeeding_while_a_big_prune_runs() {
    let env = Env::init();
    add(
        &env,
        "2026-07-01T00:00:00Z",
        "bulk",
        "0 0 1 1 *",
        &[],
        "true",
    );
    add(
        &env,
        "2026-07-01T00:00:00Z",
        "live",
        "* * * * *",
        &[],
        "true",
    );
    let now = epoch("2026-07-01T00:00:00Z");
    // Enough for about 20 batches, so ticks must interleave with them.
    insert_finished_runs(&env, "bulk", 100_000, now, 40 * 86_400);
    let mut pruner = env
        .cmd()
        .args(["--now", "2026-07-01T00:00:00Z", "prune"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prune");
    // Ticks (and manual runs) while it deletes: each must succeed, none may report a lock.
    // Their own hourly prune is off here, so the command does all the deleting.
    let mut ticks = 0;
    while pruner.try_wait().expect("try_wait").is_none() && ticks < 500 {
        ticks += 1;
        let at = time_at(now + 60 * ticks);
        env.ok(&["--now", &at, "run", "live"]);
        let out = env
            .cmd()
            .args(["--now", &at, "tick"])
            .env("RUNNER_RETENTION", "off")
            .output()
            .expect("tick");
        assert!(out.status.success(), "tick {ticks}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "tick {ticks} reported a problem");
    }
    let out = pruner.wait_with_output().expect("prune output");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("removed 100000 runs (100000 attempts, 200000 events)"),
        "{}",
        stdout(&out)
    );
    assert!(
        ticks >= 3,
        "the prune finished before ticks could interleave ({ticks})"
    );
    let live_pending = one(
        &env,
        "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = 'live' AND r.status IN ('pending', 'running')",
    );
    assert_eq!(live_pending, 0, "every live run executed");
    assert!(
        one(
            &env,
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'"
        ) >= ticks
    );
}
