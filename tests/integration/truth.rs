//! Output that tells the truth: a running retry is shown as itself, a timeout says which signals
//! it took, `show` prints the end of long output and says what it left out, old runs keep their
//! zone, and `init` says what it did. Real binary, both backends.

use std::fs;
use std::time::Duration;

use crate::common::*;
use crate::sqlite_only;

const LONG: Duration = Duration::from_secs(60);

/// The error detail of a run's only attempt.
fn attempt_detail(env: &Env, run: i64) -> String {
    env.sql.query_string(
        "SELECT error_detail FROM job_attempts WHERE run_id = $1 AND attempt = 1",
        &[&run],
    )
}

// ---------------------------------------------------------------------------
// history/show while a retry runs
// ---------------------------------------------------------------------------

#[test]
fn a_running_retry_shows_its_own_state_and_elapsed_time() {
    let env = Env::init();
    let flag = env.path("fixed");
    let go = env.path("go");
    env.add(
        "flaky",
        &[
            "--max-attempts",
            "3",
            // At least 5 minutes (jitter keeps half): the first tick cannot retry it itself.
            "--backoff-base",
            "10m",
            "--backoff-max",
            "10m",
        ],
        &format!(
            "test -e {} || {{ echo boom >&2; exit 3; }}",
            sh_quote(&flag)
        ),
    );
    let run = env.enqueue("flaky");
    env.tick(&[]);
    assert_eq!(status_of(&env, run), "pending", "attempt 1 failed");

    // Attempt 2, an hour later (past the retry delay), held after its start is recorded.
    let later = utc(real_now() + 3600);
    let mut cmd = env.cmd();
    cmd.args(["--now", &later, "tick"])
        .env(
            "RUNNER_TEST_HOOK",
            format!("recorded:wait={}", go.display()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut tick = cmd.spawn().expect("spawn tick");
    let _stop = Cleanup(|| {
        let _ = fs::write(&go, "");
    });
    wait_until(LONG, "attempt 2 to be recorded", || {
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1 AND attempt = 2",
            &[&run],
        ) == 1
    });
    let started = env.sql.query_i64(
        "SELECT started_at FROM job_attempts WHERE run_id = $1 AND attempt = 2",
        &[&run],
    );
    // Two hours into attempt 2, by the clock.
    let at = utc(started + 7200);

    let out = env.ok(&["--now", &at, "history"]);
    let line = out.lines().nth(1).expect("a run");
    assert!(line.contains("running") && line.contains("2/3"), "{out}");
    assert!(line.contains(" 2h "), "attempt 2's elapsed time: {out}");
    assert!(
        line.contains("running; attempt 1: EXIT:3"),
        "attempt 1's error, named as attempt 1's: {out}"
    );

    let runs = json(&env.ok(&["--now", &at, "history", "--json"]));
    let r = &runs[0];
    assert_eq!(r["status"], "running");
    assert_eq!(r["attempt"], 2);
    let elapsed = r["elapsed_secs"].as_i64().expect("elapsed_secs");
    assert!((7200..7200 + 600).contains(&elapsed), "{r}");
    assert!(
        r["duration_ms"].is_null() && r["exit_code"].is_null(),
        "{r}"
    );
    assert_eq!(r["error_code"], "EXIT:3");
    assert_eq!(r["error_attempt"], 1, "{r}");

    let shown = env.ok(&["--now", &at, "show", &run.to_string()]);
    assert!(
        shown.contains("status:     running: attempt 2 of 3 for 2h, held by"),
        "{shown}"
    );
    assert!(
        shown.contains("error:      attempt 1: exited with status 3: boom"),
        "{shown}"
    );
    assert!(shown.contains("attempt 2: running for 2h"), "{shown}");

    // Attempt 2 succeeds: nothing of attempt 1's error is the run's result any more.
    fs::write(&flag, "").expect("flag");
    fs::write(&go, "").expect("go");
    assert!(tick.wait().expect("tick").success());
    assert_eq!(status_of(&env, run), "succeeded");
    let r = &json(&env.ok(&["history", "--json"]))[0];
    assert!(
        r["elapsed_secs"].is_null() && r["error_attempt"].is_null(),
        "{r}"
    );
    assert_eq!(r["exit_code"], 0);
}

// ---------------------------------------------------------------------------
// TIMEOUT details
// ---------------------------------------------------------------------------

#[test]
fn a_timeout_that_sigterm_ends_says_so_and_sends_no_sigkill() {
    let env = Env::init();
    env.add(
        "slow",
        &["--timeout", "1s", "--max-attempts", "1"],
        "sleep 60",
    );
    let run = env.enqueue("slow");
    let (out, _) = env.tick_within(&[], LONG);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, run), "dead");
    let detail = attempt_detail(&env, run);
    assert!(
        detail.starts_with("timed out after 1s: SIGTERM at ") && detail.contains(", exited at "),
        "{detail}"
    );
    assert!(!detail.contains("SIGKILL"), "{detail}");
    let shown = env.ok(&["show", &run.to_string()]);
    assert!(shown.contains(&format!("detail:     {detail}")), "{shown}");
}

// A job that ignores SIGTERM and is SIGKILLed: execution.rs
// (`timeout_kills_a_job_ignoring_sigterm_and_its_grandchild`) checks its detail.

// ---------------------------------------------------------------------------
// show --tail / --no-output
// ---------------------------------------------------------------------------

#[test]
fn show_prints_the_last_lines_and_says_what_it_left_out() {
    let env = Env::init();
    // 120 lines (372 bytes) on stdout, 3 on stderr.
    env.add("chatty", &[], "seq 1 120; printf 'a\\nb\\nc\\n' >&2");
    let run = env.enqueue("chatty").to_string();
    env.tick(&[]);

    let out = env.ok(&["show", &run]);
    assert!(out.contains("  stdout (372 bytes):\n"), "{out}");
    assert!(
        out.contains(
            "    … 70 earlier lines (201 B) kept but not shown; --tail 0 shows all 120 lines\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("\n    71\n") && out.contains("\n    120\n"),
        "{out}"
    );
    assert!(!out.contains("\n    70\n"), "{out}");
    // A short stream is shown whole, with no note.
    assert!(
        out.contains("  stderr (6 bytes):\n    a\n    b\n    c\n"),
        "{out}"
    );
    assert_eq!(out.matches('…').count(), 1, "{out}");

    let out = env.ok(&["show", &run, "--tail", "5"]);
    assert!(
        out.contains("… 115 earlier lines (352 B) kept but not shown; --tail 0 shows all 120 lines\n    116\n"),
        "{out}"
    );
    assert!(!out.contains("\n    115\n"), "{out}");

    let out = env.ok(&["show", &run, "--tail", "0"]);
    assert!(
        out.contains("  stdout (372 bytes):\n    1\n    2\n"),
        "{out}"
    );
    assert!(!out.contains('…'), "{out}");

    let out = env.ok(&["show", &run, "--no-output"]);
    assert!(
        out.contains("  stdout:     372 bytes, 120 lines (not shown: --no-output)\n"),
        "{out}"
    );
    assert!(
        out.contains("  stderr:     6 bytes, 3 lines (not shown: --no-output)\n"),
        "{out}"
    );
    assert!(!out.contains("\n    120\n"), "{out}");

    // --json always carries all that was kept; the text-only flags are refused with it.
    let detail = json(&env.ok(&["show", &run, "--json"]));
    assert_eq!(
        detail["attempts"][0]["stdout_tail"]
            .as_str()
            .expect("stdout_tail")
            .lines()
            .count(),
        120
    );
    env.fails(2, &["show", &run, "--json", "--tail", "5"]);
    env.fails(2, &["show", &run, "--json", "--no-output"]);
}

// ---------------------------------------------------------------------------
// A run's zone
// ---------------------------------------------------------------------------

#[test]
fn runs_keep_the_zone_they_were_scheduled_in() {
    let env = Env::init();
    env.add_at(
        Some("2026-11-20T12:00:00Z"),
        "paris",
        "0 9 * * *",
        &["--tz", "Europe/Paris"],
        "true",
    );
    // The 09:00 Paris instant of 2026-11-21 is materialised (and run) in Paris time.
    env.tick_at("2026-11-21T08:00:30Z");
    let run = last_run_id(&env, "paris");
    env.ok(&["schedule", "edit", "paris", "--tz", "America/New_York"]);

    let out = env.ok(&["history", "paris"]);
    assert!(out.contains("2026-11-21T09:00:00+01:00"), "{out}");
    let shown = env.ok(&["show", &run.to_string()]);
    assert!(shown.contains("times in Europe/Paris"), "{shown}");
    assert!(
        shown.contains("scheduled:  2026-11-21T09:00:00+01:00"),
        "{shown}"
    );
    assert_eq!(
        json(&env.ok(&["history", "--json"]))[0]["timezone"],
        "Europe/Paris"
    );

    // A run made before runs kept their zone falls back to its schedule's.
    env.sql
        .exec("UPDATE job_runs SET timezone = NULL WHERE id = $1", &[&run]);
    let out = env.ok(&["history", "paris"]);
    assert!(out.contains("2026-11-21T03:00:00-05:00"), "{out}");
}

// ---------------------------------------------------------------------------
// init
// ---------------------------------------------------------------------------

#[test]
fn init_says_what_it_created_and_quiet_silences_it() {
    let env = Env::new();
    let created = env.ok(&["init"]);
    let again = env.ok(&["init"]);
    match env.sql.backend() {
        Backend::Sqlite => {
            let db = env.db.display();
            assert_eq!(
                created,
                format!("created {db} (mode 0600, schema version 17)\n")
            );
            assert_eq!(
                again,
                format!("database {db} is up to date (mode 0600, schema version 17)\n")
            );
        }
        Backend::Postgres => {
            assert!(
                created.starts_with("created the runner schema in postgres")
                    && created.ends_with(" (schema version 12)\n"),
                "{created}"
            );
            assert!(
                again.ends_with(" is up to date (schema version 12)\n"),
                "{again}"
            );
            // The server and database are named, never the password.
            let url = env.sql.location();
            if let Some(password) = url
                .split_once("://")
                .and_then(|(_, rest)| rest.rsplit_once('@'))
                .and_then(|(userinfo, _)| userinfo.split_once(':'))
                .map(|(_, password)| password)
            {
                assert!(!created.contains(password), "{created}");
                assert!(created.contains(":***@"), "{created}");
            }
        }
    }
    assert_eq!(env.ok(&["init", "--quiet"]), "");
}

#[test]
fn init_says_it_migrated_an_older_database_whose_runs_keep_their_schedules_zone() {
    sqlite_only!("forges an older SQLite schema version");
    let env = Env::init();
    env.add("old", &["--tz", "Asia/Tokyo"], "true");
    let run = env.enqueue("old").to_string();
    // As schema version 3 left it: no zone on runs (and no timed pauses, version 5's, nor
    // dead-runs counters per schedule, version 6's, nor the run tally, version 8's, nor each
    // attempt's schedule, version 9's, nor the index of undecidable schedules, version 11's, nor
    // the runs' running_alone, version 12's; version 13 changed only the text of a CHECK; nor the
    // last success pruned, version 14's, nor the last run pruned, version 15's, nor the runs'
    // stopping_by, version 16's).
    undo_attempt_schedule(&env);
    env.sql
        .sqlite()
        .execute_batch(SQLITE_BEFORE_TALLY)
        .expect("downgrade");
    env.sql
        .sqlite()
        .execute_batch(
            "DROP INDEX job_definitions_undecidable;
             ALTER TABLE job_definitions DROP COLUMN dead_runs_total;
             ALTER TABLE job_runs DROP COLUMN timezone;
             DROP INDEX job_definitions_pause_ends;
             ALTER TABLE job_definitions DROP COLUMN paused_until;
             PRAGMA user_version = 3;",
        )
        .expect("downgrade");
    let out = env.ok(&["init"]);
    assert_eq!(
        out,
        format!(
            "migrated {} from schema version 3 to 17 (mode 0600)\n",
            env.db.display()
        )
    );
    let shown = env.ok(&["show", &run]);
    assert!(shown.contains("times in Asia/Tokyo"), "{shown}");
}
