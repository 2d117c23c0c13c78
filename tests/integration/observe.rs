//! See what ran: `history`, `show`, `status`, `metrics`, on real databases through the real
//! binary. Times are pinned with `--now`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{
    add_finished_history, assert_read_at, duration_between, epoch, forge_last_tick, forge_stopping,
    forge_vanished_runner, insert_finished_runs, json, last_tick_at, never_near, run_ids,
    status_of, stderr, stdout, undo_attempt_schedule, Backend, Env, BIN, CLOCK_SLACK_SECS,
    SQLITE_BEFORE_TALLY,
};
use crate::sqlite_only;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

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
    "elapsed_secs",
    "exit_code",
    "error_code",
    "error_detail",
    "error_attempt",
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
    env.add_at(
        Some(t0),
        "report",
        "0 * * * *",
        &["--tz", "America/New_York"],
        "echo done",
    );
    env.add_at(
        Some(t0),
        "flaky",
        "0 * * * *",
        &["--max-attempts", "1"],
        "echo broken >&2; exit 3",
    );
    for hour in ["12", "13", "14"] {
        env.tick_at(&format!("2026-07-01T{hour}:00:30Z"));
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
    // --since as a time, and as a duration before now (the time `history` read, up to
    // CLOCK_SLACK_SECS after its --now: no run lies within that of a boundary).
    assert_eq!(ids(&["--since", "2026-07-01T13:00:00Z"]).len(), 4);
    assert_eq!(
        ids(&["--now", "2026-07-01T14:30:00Z", "--since", "45m"]).len(),
        2
    );
    assert_eq!(
        ids(&["--now", "2026-07-01T14:30:00Z", "--since", "1h45m", "flaky"]).len(),
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
    assert_eq!(dead["error_attempt"], 1);
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
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
        "many",
        &never_near("2026-07-01T00:00:00Z"),
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
        .env("RUNNER_DB", env.sql.location())
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
            .env("RUNNER_DB", env.sql.location())
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

/// A running attempt's output is stored when it ends: `show` says so, rather than "(empty)" for
/// a job that has already printed.
#[test]
fn show_of_a_running_attempt_does_not_call_its_output_empty() {
    let env = Env::init();
    let pidfile = env.path("job.pid");
    env.add(
        "talker",
        &[],
        &format!(
            "echo started; echo warn >&2; echo $$ > '{}'; sleep 30",
            pidfile.display()
        ),
    );
    let id = env.enqueue("talker");
    let bg = crate::common::Bg::spawn(&env, "tick", &["tick", "--max-tick", "1s"])
        .with_job_pidfile(&pidfile);
    crate::common::wait_until(std::time::Duration::from_secs(60), "the job to run", || {
        status_of(&env, id) == "running" && bg.job_pid().is_some()
    });
    let out = env.ok(&["show", &id.to_string()]);
    assert!(
        out.contains("  output:     kept when the attempt ends\n"),
        "{out}"
    );
    assert!(!out.contains("(empty)"), "{out}");
    // In JSON: null, not the empty string an attempt that printed nothing has.
    let shown = crate::common::json(&env.ok(&["show", &id.to_string(), "--json"]));
    let attempt = &shown["attempts"][0];
    assert!(attempt["finished_at"].is_null(), "{shown}");
    assert!(attempt["stdout_tail"].is_null(), "{shown}");
    assert!(attempt["stderr_tail"].is_null(), "{shown}");
}

#[test]
fn show_escapes_control_characters_from_job_output() {
    let env = Env::init();
    let t0 = "2026-07-01T11:59:00Z";
    env.add_at(
        Some(t0),
        "noisy",
        "0 * * * *",
        &[],
        r"printf 'before\033[2Jafter\rback\n'; printf 'bell\007\n' >&2",
    );
    env.tick_at("2026-07-01T12:00:05Z");
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
    times.extend(["lease_expires_at", "heartbeat_at", "stopping_by"]);
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
    "stopping",
    "expired_leases",
    "retries_in_flight",
    "held_by_pause",
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

    env.tick_at("2026-07-01T12:00:00Z");
    assert_read_at(
        last_tick_at(&env),
        "2026-07-01T12:00:00Z",
        0,
        "the tick's time",
    );
    // Exactly then, so that its age below is exact but for the time `status` takes.
    forge_last_tick(&env, "2026-07-01T12:00:00Z");
    // 30 s later: healthy.
    let report = json(&env.ok(&["--now", "2026-07-01T12:00:30Z", "status", "--json"]));
    assert_eq!(report["warnings"], Value::Array(vec![]), "{report}");
    assert_eq!(report["last_tick_at"], "2026-07-01T12:00:00Z");
    assert_eq!(report["last_tick_at_epoch"], epoch("2026-07-01T12:00:00Z"));
    let out = env.ok(&["--now", "2026-07-01T12:00:30Z", "status"]);
    assert!(!out.contains("WARNING"), "{out}");
    // Five minutes later: cron is not running the tick.
    let out = env.ok(&["--now", "2026-07-01T12:05:00Z", "status"]);
    let age = duration_between(&out, "WARNING: the last tick ran ", " ago");
    assert!((300..=300 + CLOCK_SLACK_SECS).contains(&age), "{out}");
    let report = json(&env.ok(&["--now", "2026-07-01T12:05:00Z", "status", "--json"]));
    let age = report["last_tick_age_secs"].as_i64().expect("age");
    assert!((300..=300 + CLOCK_SLACK_SECS).contains(&age), "{report}");
    assert!(report["warnings"][0]
        .as_str()
        .expect("warning")
        .contains("last tick ran"));
}

#[test]
fn status_reports_due_work_retries_failures_and_the_database() {
    let env = Env::init();
    let t0 = "2026-07-01T11:00:00Z";
    env.add_at(Some(t0), "ok", &never_near(t0), &[], "true");
    env.add_at(
        Some(t0),
        "retrying",
        &never_near(t0),
        &["--backoff-base", "1h", "--backoff-max", "2h"],
        "exit 4",
    );
    env.add_at(
        Some(t0),
        "doomed",
        &never_near(t0),
        &["--max-attempts", "1"],
        "exit 5",
    );
    for job in ["ok", "retrying", "doomed"] {
        env.ok(&["--now", "2026-07-01T12:00:00Z", "run", job]);
    }
    env.tick_at("2026-07-01T12:00:01Z");
    forge_last_tick(&env, "2026-07-01T12:00:01Z");
    // Enqueued, not ticked: due and waiting.
    env.ok(&["--now", "2026-07-01T12:00:10Z", "run", "ok"]);
    let due_id = *run_ids(&env, "ok").last().expect("run");
    // Due when `run` read its clock; exactly 12:00:10 so that the lag below is exact but for the
    // time `status` takes.
    let due_at = |env: &Env| {
        env.sql
            .query_i64("SELECT run_at FROM job_runs WHERE id = $1", &[&due_id])
    };
    assert_read_at(
        due_at(&env),
        "2026-07-01T12:00:10Z",
        0,
        "the run's due time",
    );
    env.sql.exec(
        "UPDATE job_runs SET run_at = $1 WHERE id = $2",
        &[&epoch("2026-07-01T12:00:10Z"), &due_id],
    );

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
    assert!((90..=90 + CLOCK_SLACK_SECS).contains(&lag), "lag {lag}");
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
    assert_eq!(db["location"], env.sql.location());
    // A SQLite database's -wal is its own; PostgreSQL's WAL is the server's: no figure.
    let wal_figure = env.sql.backend() == Backend::Sqlite;
    assert_eq!(db["wal_bytes"].is_u64(), wal_figure, "{db}");
    assert_eq!(db["wal_bytes"].is_null(), !wal_figure, "{db}");
    assert_eq!(db["oldest_run"]["job"], "ok");
    assert_eq!(report["warnings"], Value::Array(vec![]));

    let text = env.ok(&["--now", "2026-07-01T12:01:40Z", "status"]);
    for expected in [
        "runs:            pending 2, running 0, succeeded 1, dead 1, cancelled 0, skipped 0",
        &format!("oldest due:      run {due_id} (ok)"),
        "waiting 1m",
        "retries:         attempt 2: 1 run",
        "EXIT:4 (1 attempt), EXIT:5 (1 attempt)",
        "dead (24h):      1",
        "last tick:       2026-07-01T12:00:01Z (1m",
        "oldest run kept: run 1 (ok)",
    ] {
        assert!(
            text.contains(expected),
            "status lacks {expected:?}:\n{text}"
        );
    }
    assert!(!text.contains("WARNING"), "{text}");
    assert_eq!(text.contains("(of which WAL "), wal_figure, "{text}");
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

/// A run cancelled while running whose job is still being stopped is listed under `stopping:`
/// with where its job runs and by when it is stopped at the latest (then, past that time, that
/// the next tick on its host stops it), in text and JSON; none is listed once it is stopped.
#[test]
fn status_lists_a_cancelled_run_whose_job_is_still_being_stopped() {
    let env = Env::init();
    env.add("backup", &[], "true");
    let run = env.enqueue("backup");
    let (cancelled, by) = (epoch("2026-07-01T12:00:00Z"), epoch("2026-07-01T12:00:40Z"));
    let now = "2026-07-01T12:00:10Z";
    let text = env.ok(&["--now", now, "status"]);
    assert!(!text.contains("stopping:"), "{text}");
    assert_eq!(
        json(&env.ok(&["--now", now, "status", "--json"]))["stopping"],
        Value::Array(vec![])
    );

    forge_stopping(&env, run, "far-host", cancelled, by);
    let text = env.ok(&["--now", now, "status"]);
    assert!(
        text.contains(&format!(
            "running:         none\n\
             stopping:        1 cancelled run whose job is still being stopped\n  \
             run {run} (backup) cancelled on attempt 1/3, stopping on far-host (runner pid 4242, \
             job pid 4251), stopped by 2026-07-01T12:00:40+00:00 at the latest\n\
             expired leases:  none\n"
        )),
        "{text}"
    );
    let report = json(&env.ok(&["--now", now, "status", "--json"]));
    let stopping = report["stopping"].as_array().expect("stopping");
    assert_eq!(stopping.len(), 1, "{report}");
    let s = &stopping[0];
    assert_eq!(
        keys(s),
        with_epochs(
            &[
                "run_id",
                "job",
                "attempt",
                "max_attempts",
                "open_attempt",
                "host",
                "runner_pid",
                "child_pid",
                "overdue"
            ],
            &["scheduled_for", "stopping_by"]
        )
    );
    assert_eq!(s["run_id"], run);
    assert_eq!(s["open_attempt"], 1);
    assert_eq!(s["host"], "far-host");
    assert_eq!(s["runner_pid"], 4242);
    assert_eq!(s["child_pid"], 4251);
    assert_eq!(s["stopping_by"], "2026-07-01T12:00:40Z");
    assert_eq!(s["stopping_by_epoch"], by);
    assert_eq!(s["overdue"], false);

    // Past its deadline: the next tick on its host stops it.
    let later = "2026-07-01T12:01:00Z";
    let text = env.ok(&["--now", later, "status"]);
    assert!(
        text.contains(
            "stopping on far-host (runner pid 4242, job pid 4251), OVERDUE since \
             2026-07-01T12:00:40+00:00: the next tick on far-host stops it\n"
        ),
        "{text}"
    );
    let report = json(&env.ok(&["--now", later, "status", "--json"]));
    assert_eq!(report["stopping"][0]["overdue"], true, "{report}");

    // That tick, on another host, leaves the job to its own host's tick and no longer waits.
    env.tick_at(later);
    let text = env.ok(&["--now", later, "status"]);
    assert!(!text.contains("stopping:"), "{text}");
}

#[test]
fn status_says_when_it_lists_only_the_latest_dead_runs() {
    let env = Env::init();
    env.add("doomed", &["--max-attempts", "1"], "exit 5");
    for _ in 0..12 {
        env.enqueue("doomed");
    }
    env.tick(&[]);

    let text = env.ok(&["status"]);
    let listed = text.lines().filter(|l| l.starts_with("  run ")).count();
    assert_eq!(listed, 10, "{text}");
    assert!(
        text.contains(
            "dead (24h):      12 (the 10 latest; the others: runner history --status dead)"
        ),
        "{text}"
    );
    let report = json(&env.ok(&["status", "--json"]));
    assert_eq!(report["last_24h"]["dead_runs"], 12, "{report}");
    assert_eq!(
        report["last_24h"]["dead"].as_array().map(Vec::len),
        Some(10)
    );

    // All listed: no note.
    let env = Env::init();
    env.add("doomed", &["--max-attempts", "1"], "exit 5");
    env.enqueue("doomed");
    env.tick(&[]);
    let text = env.ok(&["status"]);
    assert!(text.contains("dead (24h):      1\n"), "{text}");
}

/// The database's size in `status` (text and JSON) and `metrics` is that of its files on disk:
/// the main file plus its `-wal`. It used to be the pages SQLite counts (which take in pages
/// that so far exist only in the `-wal`) plus the `-wal`: those pages twice. A connection held
/// open here keeps the `-wal` from being folded into the main file when runner closes.
#[test]
fn the_database_size_is_that_of_its_files_on_disk() {
    sqlite_only!("a SQLite database's files");
    let env = Env::init();
    let db = std::path::PathBuf::from(env.sql.location());
    let held = rusqlite::Connection::open(&db).expect("open");
    let _: i64 = held
        .query_row("SELECT count(*) FROM job_definitions", [], |r| r.get(0))
        .expect("read");
    let long = "x".repeat(3000);
    for n in 0..30 {
        env.ok(&[
            "schedule",
            "add",
            &format!("s{n}"),
            "--cron",
            "0 3 * * *",
            "--",
            "echo",
            &long,
        ]);
    }
    let on_disk = || {
        let size = |suffix: &str| {
            let mut name = db.clone().into_os_string();
            name.push(suffix);
            std::fs::metadata(&name).map_or(0, |m| m.len())
        };
        (size("") + size("-wal"), size("-wal"))
    };
    let (files, wal) = on_disk();
    assert!(wal > 0, "the -wal holds the schedules");
    let report = json(&env.ok(&["status", "--json"]));
    assert_eq!(on_disk(), (files, wal), "status changed the files");
    assert_eq!(
        report["database"]["size_bytes"], files,
        "{}",
        report["database"]
    );
    assert_eq!(
        report["database"]["wal_bytes"], wal,
        "{}",
        report["database"]
    );
    let metrics = env.ok(&["metrics"]);
    assert_eq!(on_disk(), (files, wal), "metrics changed the files");
    assert!(
        metrics.contains(&format!("\nrunner_database_size_bytes {files}\n")),
        "{files}: {metrics}"
    );
    drop(held);
}

#[test]
fn metrics_are_valid_exposition_format() {
    let env = Env::init();
    let t0 = "2026-07-01T11:00:00Z";
    // A name with characters label values must escape.
    let odd = r#"we"ird\job"#;
    env.add_at(Some(t0), odd, &never_near(t0), &[], "true");
    env.add_at(
        Some(t0),
        "doomed",
        &never_near(t0),
        &["--max-attempts", "1"],
        "exit 1",
    );
    for job in [odd, odd, "doomed"] {
        env.ok(&["--now", "2026-07-01T12:00:00Z", "run", job]);
    }
    env.tick_at("2026-07-01T12:00:01Z");
    let ticked_at = last_tick_at(&env);
    assert_read_at(ticked_at, "2026-07-01T12:00:01Z", 0, "the tick's time");
    env.ok(&["--now", "2026-07-01T12:00:02Z", "run", "doomed"]);
    // Due when `run` read its clock; exactly 12:00:02 so that the lag below is exact but for the
    // time `metrics` takes.
    let due = env
        .sql
        .query_i64("SELECT run_at FROM job_runs WHERE status = 'pending'", &[]);
    assert_read_at(due, "2026-07-01T12:00:02Z", 0, "the run's due time");
    env.sql.exec(
        "UPDATE job_runs SET run_at = $1 WHERE status = 'pending'",
        &[&epoch("2026-07-01T12:00:02Z")],
    );

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
        Some(ticked_at as f64)
    );
    assert_eq!(
        sample(&samples, "runner_dead_runs_total", &[("job", "doomed")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&samples, "runner_dead_runs_total", &[("job", odd)]),
        Some(0.0)
    );
    let lag = sample(&samples, "runner_oldest_due_lag_seconds", &[]).expect("lag");
    assert!(
        (60.0..=(60 + CLOCK_SLACK_SECS) as f64).contains(&lag),
        "lag {lag}"
    );

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
    assert_eq!(
        sample(&samples, "runner_dead_runs_total", &[("job", "doomed")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&samples, "runner_runs", &[("status", "dead")]),
        Some(0.0)
    );
}

/// `runner_dead_runs_total{job}` of every schedule, from a `runner metrics` that promtool and the
/// strict parser accept; no un-labelled series beside them.
fn dead_runs_totals(env: &Env, now: &str) -> Vec<(String, f64)> {
    let text = env.ok(&["--now", now, "metrics"]);
    promtool_check(&text);
    let (types, samples) = parse_exposition(&text);
    assert_eq!(types["runner_dead_runs_total"], "counter");
    samples
        .iter()
        .filter(|(name, ..)| name == "runner_dead_runs_total")
        .map(|(_, labels, value)| match labels.as_slice() {
            [(key, job)] if key == "job" => (job.clone(), *value),
            other => panic!("runner_dead_runs_total{other:?}: only {{job}}\n{text}"),
        })
        .collect()
}

fn totals(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
    pairs.iter().map(|(job, n)| (job.to_string(), *n)).collect()
}

#[test]
fn dead_runs_are_counted_per_job_and_retry_and_prune_never_lower_the_count() {
    let env = Env::init();
    let t0 = "2026-07-01T11:00:00Z";
    let once = ["--max-attempts", "1"];
    env.add_at(Some(t0), "doomed", &never_near(t0), &once, "exit 1");
    env.add_at(Some(t0), "fine", &never_near(t0), &once, "true");
    env.add_at(Some(t0), "lost", &never_near(t0), &once, "true");
    // Every schedule has its series from the start, at 0.
    let before = "2026-07-01T12:00:00Z";
    assert_eq!(
        dead_runs_totals(&env, before),
        totals(&[("doomed", 0.0), ("fine", 0.0), ("lost", 0.0)])
    );

    // An attempt that fails its last attempt: only its own job's counter rises.
    for job in ["doomed", "fine"] {
        env.ok(&["--now", before, "run", job]);
    }
    env.tick_at("2026-07-01T12:00:01Z");
    let doomed = *run_ids(&env, "doomed").first().expect("the doomed run");
    assert_eq!(status_of(&env, doomed), "dead");
    assert_eq!(
        dead_runs_totals(&env, "2026-07-01T12:00:02Z"),
        totals(&[("doomed", 1.0), ("fine", 0.0), ("lost", 0.0)])
    );

    // A run whose runner vanished (its lease expired, on its last attempt): recovery makes it
    // dead, and counts it on its own job.
    env.ok(&["--now", before, "run", "lost"]);
    let lost = *run_ids(&env, "lost").first().expect("the lost run");
    // On this host, with no process left: recovery closes the attempt too.
    forge_vanished_runner(&env, lost, None);
    env.tick_at("2026-07-01T12:00:03Z");
    assert_eq!(status_of(&env, lost), "dead");
    assert_eq!(
        dead_runs_totals(&env, "2026-07-01T12:00:04Z"),
        totals(&[("doomed", 1.0), ("fine", 0.0), ("lost", 1.0)])
    );

    // `retry` makes the dead run pending again: the counter stays.
    env.ok(&[
        "--now",
        "2026-07-01T12:00:05Z",
        "retry",
        &doomed.to_string(),
    ]);
    assert_eq!(status_of(&env, doomed), "pending");
    assert_eq!(
        dead_runs_totals(&env, "2026-07-01T12:00:06Z"),
        totals(&[("doomed", 1.0), ("fine", 0.0), ("lost", 1.0)])
    );

    // Pruning deletes the lost run (dead) and the fine one: the counters stay.
    let later = "2030-01-01T00:00:00Z";
    env.ok(&["--now", later, "prune", "--older-than", "1d"]);
    assert!(run_ids(&env, "lost").is_empty(), "the dead run was pruned");
    assert_eq!(
        dead_runs_totals(&env, later),
        totals(&[("doomed", 1.0), ("fine", 0.0), ("lost", 1.0)])
    );

    // A removed schedule's series goes with it.
    env.ok(&["schedule", "rm", "lost"]);
    assert_eq!(
        dead_runs_totals(&env, later),
        totals(&[("doomed", 1.0), ("fine", 0.0)])
    );
}

/// Runs per job and status as `runner metrics` reports them (`runner_job_runs_total`), checked
/// against `runner status --json`'s runs per status, and against counting every run in the
/// database. Zeros left out.
fn assert_runs_counted(env: &Env, now: &str, when: &str) {
    let text = env.ok(&["--now", now, "metrics"]);
    let (_, samples) = parse_exposition(&text);
    let mut reported = BTreeSet::new();
    let mut per_status: HashMap<String, i64> = HashMap::new();
    for (name, labels, value) in &samples {
        if name != "runner_job_runs_total" || *value == 0.0 {
            continue;
        }
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .expect("label")
        };
        *per_status.entry(label("status")).or_default() += *value as i64;
        reported.insert((label("job"), label("status"), *value as i64));
    }
    let mut counted = BTreeSet::new();
    for job in ["fine", "doomed"] {
        for status in [
            "pending",
            "running",
            "succeeded",
            "dead",
            "cancelled",
            "skipped",
        ] {
            let n = env.sql.query_i64(
                "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
                 WHERE d.name = $1 AND r.status = $2",
                &[&job, &status],
            );
            if n > 0 {
                counted.insert((job.to_string(), status.to_string(), n));
            }
        }
    }
    assert_eq!(reported, counted, "metrics, {when}");
    let status = json(&env.ok(&["--now", now, "status", "--json"]));
    let shown: HashMap<String, i64> = status["counts"]
        .as_object()
        .expect("counts")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_i64().expect("a count")))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(shown, per_status, "status, {when}");
}

/// A database's counts stay exact whether its runs were counted one by one or folded into the
/// tally in between (SQLite folds at most hourly; forced here by making the last fold old): runs
/// that change after a fold (finish, retry), runs pruned (the newest among them, whose id is
/// then given again), runs made since the fold, a schedule removed.
#[test]
fn status_and_metrics_count_every_run_across_folds() {
    let env = Env::init();
    let fold_at_next_tick = || {
        env.sql.exec(
            "UPDATE runner_state SET value = 0 WHERE key = 'tally_folded_at'",
            &[],
        )
    };
    let t0 = "2026-07-01T12:00:00Z";
    env.add_at(Some(t0), "fine", &never_near(t0), &[], "true");
    env.add_at(
        Some(t0),
        "doomed",
        &never_near(t0),
        &["--max-attempts", "1"],
        "exit 3",
    );
    for job in ["fine", "fine", "doomed", "doomed"] {
        env.ok(&["--now", t0, "run", job]);
    }
    // Folded while pending (a tick that runs nothing), then run: claimed, finished.
    fold_at_next_tick();
    env.ok(&["--now", "2026-07-01T12:00:00Z", "tick", "--max-tick", "0s"]);
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'pending'",
            &[]
        ),
        4,
        "the tick ran nothing"
    );
    assert_runs_counted(&env, "2026-07-01T12:00:00Z", "folded while pending");
    env.tick_at("2026-07-01T12:00:01Z");
    assert_runs_counted(
        &env,
        "2026-07-01T12:00:02Z",
        "after running the folded runs",
    );
    env.ok(&["--now", "2026-07-01T12:00:03Z", "run", "fine"]);
    fold_at_next_tick();
    env.tick_at("2026-07-01T12:00:04Z");
    env.ok(&["--now", "2026-07-01T12:00:05Z", "run", "doomed"]);
    assert_runs_counted(
        &env,
        "2026-07-01T12:00:06Z",
        "with a pending run made since the fold",
    );

    let doomed = run_ids(&env, "doomed");
    env.ok(&[
        "--now",
        "2026-07-01T12:00:07Z",
        "retry",
        &doomed[0].to_string(),
    ]);
    assert_eq!(status_of(&env, doomed[0]), "pending");
    assert_runs_counted(
        &env,
        "2026-07-01T12:00:08Z",
        "after a folded dead run's retry",
    );
    fold_at_next_tick();
    env.tick_at("2026-07-01T12:00:09Z");
    assert_runs_counted(&env, "2026-07-01T12:00:10Z", "after its second attempt");

    // Everything finished goes, the newest run too: the next run made gets its id again.
    let later = "2030-01-01T00:00:00Z";
    env.ok(&["--now", later, "prune", "--older-than", "1d"]);
    env.ok(&["--now", later, "run", "fine"]);
    assert_runs_counted(&env, later, "after pruning");
    env.tick_at("2030-01-01T00:00:01Z");
    assert_runs_counted(
        &env,
        "2030-01-01T00:00:02Z",
        "after running a run made after the prune",
    );

    env.ok(&["schedule", "rm", "doomed"]);
    assert_runs_counted(&env, "2030-01-01T00:00:03Z", "after removing a schedule");
}

/// A tick folds the run tally within the hour once more than 250,000 runs wait, so that `status`
/// and `metrics` never count more than that one by one; not with 250,000. (SQLite: PostgreSQL
/// keeps no tally.)
#[test]
fn a_tick_folds_the_run_tally_within_the_hour_once_250000_runs_wait() {
    sqlite_only!("the run tally");
    let env = Env::init();
    env.add("busy", &[], "true");
    add_finished_history(&env, "busy", 250_000);
    let t0 = "2026-07-01T12:00:00Z";
    // The last fold ten minutes ago: the hourly turn is not due.
    env.sql.exec(
        "UPDATE runner_state SET value = $1 WHERE key = 'tally_folded_at'",
        &[&(epoch(t0) - 600)],
    );
    let through = || {
        env.sql.query_i64(
            "SELECT value FROM runner_state WHERE key = 'tally_through'",
            &[],
        )
    };
    // Retention off: the history is older than 30 days, and pruning it is not this test's.
    let tick = |now: &str| {
        let out = env
            .cmd()
            .env("RUNNER_RETENTION", "off")
            .args(["--now", now, "tick"])
            .output()
            .expect("tick");
        assert!(out.status.success(), "{}", stderr(&out));
    };
    tick(t0);
    assert_eq!(through(), 0, "250,000 runs wait: none folded");
    env.ok(&["--now", t0, "run", "busy"]);
    tick("2026-07-01T12:00:01Z");
    assert_eq!(
        through(),
        env.sql.query_i64("SELECT max(id) FROM job_runs", &[]),
        "250,001 runs wait: all folded"
    );
    let metrics = env.ok(&["--now", "2026-07-01T12:00:02Z", "metrics"]);
    assert!(
        metrics.contains("runner_job_runs_total{job=\"busy\",status=\"succeeded\"} 250001\n"),
        "{metrics}"
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

#[test]
fn an_older_database_starts_each_jobs_dead_count_from_the_dead_runs_it_kept() {
    let env = Env::init();
    let t0 = "2026-07-01T11:00:00Z";
    let once = ["--max-attempts", "1"];
    env.add_at(Some(t0), "doomed", &never_near(t0), &once, "exit 1");
    env.add_at(Some(t0), "twice", &never_near(t0), &once, "exit 1");
    env.add_at(Some(t0), "fine", &never_near(t0), &once, "true");
    for (job, tick) in [
        ("doomed", "2026-07-01T12:00:01Z"),
        ("twice", "2026-07-01T12:00:02Z"),
        ("twice", "2026-07-01T12:00:03Z"),
        ("fine", "2026-07-01T12:00:04Z"),
    ] {
        env.ok(&["--now", "2026-07-01T12:00:00Z", "run", job]);
        env.tick_at(tick);
    }
    let durations_counted = |env: &Env| {
        let text = env.ok(&["--now", "2026-07-01T12:01:00Z", "metrics"]);
        let (_, samples) = parse_exposition(&text);
        samples
            .into_iter()
            .filter(|(name, ..)| name == "runner_run_duration_seconds_count")
            .map(|(_, labels, value)| (labels, value))
            .collect::<Vec<_>>()
    };
    let counted = durations_counted(&env);
    assert_eq!(counted.len(), 3, "{counted:?}");
    // As the previous schema version left it: one database-wide counter (here higher than the
    // dead runs kept, as after a prune), none per schedule.
    env.sql.exec(
        "ALTER TABLE job_definitions DROP COLUMN dead_runs_total",
        &[],
    );
    env.sql.exec(
        "INSERT INTO runner_state (key, value) VALUES ('dead_runs_total', 7)
         ON CONFLICT (key) DO UPDATE SET value = 7",
        &[],
    );
    undo_attempt_schedule(&env);
    let (old, new) = match Backend::current() {
        Backend::Sqlite => {
            let sqlite = env.sql.sqlite();
            sqlite
                .execute_batch(SQLITE_BEFORE_TALLY)
                .expect("downgrade");
            sqlite
                .execute_batch("PRAGMA user_version = 5")
                .expect("downgrade");
            (5, 17)
        }
        Backend::Postgres => {
            env.sql
                .exec("DELETE FROM runner_schema_version WHERE version >= 4", &[]);
            (3, 12)
        }
    };
    let out = env.ok(&["init"]);
    assert!(
        out.starts_with("migrated ")
            && out.contains(&format!(" from schema version {old} to {new}")),
        "{out}"
    );
    // Each schedule starts from its dead runs still kept; the global counter is gone.
    assert_eq!(
        dead_runs_totals(&env, "2026-07-01T12:01:00Z"),
        totals(&[("doomed", 1.0), ("fine", 0.0), ("twice", 2.0)])
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM runner_state WHERE key = 'dead_runs_total'",
            &[]
        ),
        0
    );
    // The attempts kept were given their schedules: each job's durations are counted as before.
    assert_eq!(durations_counted(&env), counted);
}
