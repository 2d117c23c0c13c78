//! Clock steps (issue 9, item 6): a wall clock that steps forward under a running tick, a tick
//! whose clock is ahead (`--now` in the future) followed by ticks on the real clock, schedules
//! pushed into the future and re-anchored, and a database restored from a snapshot.
//!
//! The tests compare the binary's clock with the real one, so they read the real clock too.
//! Nothing here depends on the machine's speed: every wait polls to a generous deadline.

use std::collections::BTreeSet;
use std::fs;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::observe::{parse_exposition, promtool_check, sample};
use crate::common::{
    assert_read_at, duration_between, forge_last_tick, json, last_tick_at, never, real_now, stderr,
    stdout, utc, wait_until, Env, CLOCK_SLACK_SECS, RETRY_AT_ONCE,
};
use crate::sqlite_only;

/// The test-only hook in `src/clock.rs`: every clock reading adds the seconds in this file.
const STEP_FILE_ENV: &str = "RUNNER_TEST_CLOCK_STEP_FILE";
const DAY: i64 = 86_400;
const DEADLINE: Duration = Duration::from_secs(120);

fn runs(env: &Env, name: &str, status: &str) -> i64 {
    env.sql.query_i64(
        &format!(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = '{name}' AND r.status = '{status}'"
        ),
        &[],
    )
}

/// `runner metrics`, validated by the strict parser and `promtool check metrics` (see
/// `observe.rs`); returns a metric's value.
fn metric(env: &Env, name: &str) -> f64 {
    let text = env.ok(&["metrics"]);
    promtool_check(&text);
    let (types, samples) = parse_exposition(&text);
    assert_eq!(types.get(name).map(String::as_str), Some("gauge"), "{text}");
    sample(&samples, name, &[]).unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

/// Creates the file a test's job waits for when dropped, so that a failing test does not leave
/// the job (and its tick) running.
struct ReleaseOnDrop(std::path::PathBuf);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let _ = fs::write(&self.0, "");
    }
}

/// Wait for a child to exit, to a deadline; kill it and panic if it does not.
fn finish(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap");
            panic!("{what} did not exit within {DEADLINE:?}: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

// ---------------------------------------------------------------------------------------------
// A wall-clock step forward under a running tick
// ---------------------------------------------------------------------------------------------

/// The wall clock steps a day forward while a job runs. The tick's heartbeats must write leases
/// by the stepped clock (the one the next tick judges them by): another tick then finds the lease
/// valid and leaves the healthy job alone, and the run succeeds on its first attempt.
#[test]
fn heartbeats_after_a_forward_clock_step_write_leases_by_the_stepped_clock() {
    let env = Env::init();
    let step_file = env.path("clock-step");
    let started = env.path("started");
    let release = env.path("release");
    let _release_on_failure = ReleaseOnDrop(release.clone());
    let with_step = |args: &[&str]| -> Command {
        let mut cmd = env.cmd();
        cmd.env(STEP_FILE_ENV, &step_file).args(args);
        cmd
    };
    // The job runs until the test releases it: no fixed sleep decides how long.
    env.add(
        "steady",
        &[],
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            started.display(),
            release.display()
        ),
    );
    env.ok(&["run", "steady"]);
    // A 15 s lease is heart-beaten every 5 s and leaves the second tick below 10 s of slack.
    let lease = 15;
    let first = with_step(&["tick", "--lease", &format!("{lease}s")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tick");
    wait_until(DEADLINE, "the job to start", || started.exists());

    let before_step = real_now();
    fs::write(env.path("clock-step.tmp"), DAY.to_string()).expect("write step");
    fs::rename(env.path("clock-step.tmp"), &step_file).expect("step the clock");
    let stepped = before_step + DAY;
    let lease_row = || -> (String, Option<i64>, Option<i64>) {
        let run = env.sql.query_row(
            "SELECT status, heartbeat_at, lease_expires_at FROM job_runs",
            &[],
        );
        (run[0].string(), run[1].opt_i64(), run[2].opt_i64())
    };
    wait_until(DEADLINE, "a heartbeat by the stepped clock", || {
        lease_row().1.is_some_and(|at| at >= stepped)
    });
    let (status, heartbeat_at, lease_expires_at) = lease_row();
    assert_eq!(status, "running");
    let heartbeat_at = heartbeat_at.expect("heartbeat_at");
    assert_eq!(
        lease_expires_at,
        Some(heartbeat_at + lease),
        "the lease runs from the heartbeat's (stepped) clock"
    );

    // The next tick reads the stepped clock too: the lease is valid, the job is left alone.
    let out = with_step(&["tick"]).output().expect("second tick");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "the second tick had nothing to say");
    assert_eq!(lease_row().0, "running", "the healthy job was recovered");

    fs::write(&release, "").expect("release the job");
    let out = finish(first, "the first tick");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "the first tick had nothing to say");
    let run = env.sql.query_row(
        "SELECT status, attempt, error_code, finished_at FROM job_runs",
        &[],
    );
    let (status, attempt, error_code, finished_at) = (
        run[0].string(),
        run[1].i64(),
        run[2].opt_string(),
        run[3].i64(),
    );
    assert_eq!(
        (status.as_str(), attempt, error_code),
        ("succeeded", 1, None),
        "not recovered (LEASE:EXPIRED) or killed (SIGNAL:SIGKILL)"
    );
    assert!(finished_at >= stepped, "recorded by the stepped clock");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE kind IN ('RECOVERED', 'LEASE_LOST', 'FAILED')",
            &[]
        ),
        0
    );
}

// ---------------------------------------------------------------------------------------------
// A tick with a clock ahead
// ---------------------------------------------------------------------------------------------

/// A tick 45 days ahead (`--now`) must not apply the retention by its clock: the history stays.
/// An explicit `prune` with `--now` does what it is asked, with a warning.
#[test]
fn a_tick_45_days_ahead_does_not_prune_history() {
    let env = Env::init();
    // Never due within the 45 days ahead below, whatever today's date, so only manual runs run
    // (a paused schedule would hold them).
    env.add("job", &[], "true");
    for _ in 0..3 {
        env.ok(&["run", "job"]);
    }
    assert_eq!(env.tick(&[]), "");
    assert_eq!(runs(&env, "job", "succeeded"), 3);

    let ahead = real_now() + 45 * DAY;
    assert_eq!(env.tick_at(&utc(ahead)), "", "the tick ahead says nothing");
    assert_eq!(
        runs(&env, "job", "succeeded"),
        3,
        "the tick ahead pruned history"
    );
    // Back on the real clock: behind the latest tick, so still no pruning (and a warning).
    let err = env.tick(&[]);
    assert!(err.contains("behind"), "{err}");
    assert_eq!(runs(&env, "job", "succeeded"), 3);

    // Asked for explicitly: done, but said.
    let out = env.run(&["--now", &utc(ahead), "prune", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("would remove 3 runs"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).starts_with("runner: warning: the clock is shifted by --now"),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["--now", &utc(ahead), "prune"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("shifted by --now"),
        "{}",
        stderr(&out)
    );
    assert_eq!(runs(&env, "job", "succeeded"), 0);
    // On the real clock, no warning.
    let out = env.run(&["prune", "--dry-run"]);
    assert_eq!(stderr(&out), "");
}

/// After a tick 45 days ahead, a tick on the real clock says so in one stderr line (and exits
/// 0), `status` warns in text and JSON, and `metrics` shows how far behind the clock is.
#[test]
fn a_tick_behind_the_latest_tick_warns_once_and_status_and_metrics_say_so() {
    let env = Env::init();
    // Fires at the tick 45 days ahead below, which moves its cursor there (a schedule that does
    // not fire keeps its cursor); on the real clock before it, only if the test spans a midnight,
    // which changes nothing here.
    env.add_at(None, "daily", "0 0 * * *", &[], "true");
    assert_eq!(env.tick(&[]), "");
    assert_eq!(env.tick(&[]), "", "ticks on one clock do not warn");
    // Half an hour more than 45 days, so that the gap reads "45d" however long the ticks take.
    let ahead = real_now() + 45 * DAY + 1800;
    assert_eq!(env.tick_at(&utc(ahead)), "");
    // The time the tick ahead read, a little after `ahead` on a busy machine: the latest time a
    // tick saw, and the schedule's cursor.
    let saw = env.sql.query_i64(
        "SELECT value FROM runner_state WHERE key = 'clock_high_water'",
        &[],
    );
    assert_read_at(saw, &utc(ahead), 0, "the latest time a tick saw");
    let cursor = env.sql.query_i64(
        "SELECT materialized_through FROM job_definitions WHERE name = 'daily'",
        &[],
    );
    assert_read_at(cursor, &utc(ahead), 0, "the cursor");

    let err = env.tick(&[]);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line for cron to mail: {err}");
    assert!(
        lines[0].starts_with("runner: warning: this host's clock (")
            && lines[0].contains(&format!(
                "is 45d behind the latest time a tick saw ({})",
                utc(saw)
            ))
            && lines[0].contains("runner schedule reanchor"),
        "{err}"
    );

    let text = env.ok(&["status"]);
    assert!(
        text.contains("WARNING: this host's clock (") && text.contains("45d behind"),
        "{text}"
    );
    assert!(
        text.contains("WARNING: 1 schedule(s) will not fire until the clock reaches their cursor")
            && text.contains(&format!("daily (cursor at {})", utc(cursor))),
        "{text}"
    );
    let report = json(&env.ok(&["status", "--json"]));
    let warnings: Vec<&str> = report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w.as_str().expect("text"))
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("45d behind")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("daily (cursor at")),
        "{warnings:?}"
    );

    let behind = metric(&env, "runner_clock_behind_seconds");
    let now = real_now();
    assert!(
        behind >= (ahead - now) as f64 && behind <= (45 * DAY + 1800 + 600) as f64,
        "runner_clock_behind_seconds {behind}"
    );
    assert_eq!(metric(&env, "runner_schedules_ahead_of_clock"), 1.0);

    // The warning is a warning, every tick until the clock gets there or is re-anchored.
    let err = env.tick(&[]);
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A last tick in the future (it ran with a clock ahead) makes `status` warn; after a tick on
/// the real clock, `status` and `metrics` show that tick, and its age grows as time passes (the
/// last tick is no longer a maximum that stays "0s ago" forever).
#[test]
fn status_warns_about_a_last_tick_in_the_future_then_shows_the_real_one() {
    let env = Env::init();
    let far = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
        .expect("time")
        .timestamp();
    assert_eq!(env.tick_at(&utc(far)), "");
    // The tick recorded the time it read, a little after `far` on a busy machine; what follows
    // reads the time stored, which is then exactly `far`.
    assert_read_at(last_tick_at(&env), &utc(far), 0, "the tick's time");
    forge_last_tick(&env, &utc(far));

    let text = env.ok(&["status"]);
    assert!(
        text.starts_with("WARNING: the last tick ran at 2099-01-01T00:00:00Z, ")
            && text.contains("ahead of this host's clock"),
        "{text}"
    );
    assert!(
        text.contains("last tick:       2099-01-01T00:00:00Z ("),
        "{text}"
    );
    assert!(text.contains("in the future of this clock)"), "{text}");
    let report = json(&env.ok(&["status", "--json"]));
    assert_eq!(report["last_tick_at"], "2099-01-01T00:00:00Z");
    assert!(
        report["last_tick_age_secs"].as_i64().expect("age") < 0,
        "{report}"
    );
    assert!(report["warnings"][0]
        .as_str()
        .expect("warning")
        .contains("ahead of this host's clock"));
    assert_eq!(
        metric(&env, "runner_last_tick_timestamp_seconds"),
        far as f64
    );
    // `why` says the same of that tick, not "0s ago".
    env.ok(&[
        "schedule",
        "add",
        "yearly",
        "--cron",
        &never(),
        "--",
        "true",
    ]);
    let why = env.ok(&["why", "yearly"]);
    assert!(
        why.contains("last tick:      2099-01-01T00:00:00+00:00 (")
            && why.contains(" in the future of this clock)")
            && !why.contains("0s ago"),
        "{why}"
    );

    let before = real_now();
    env.tick(&[]);
    let after = real_now();
    let report = json(&env.ok(&["status", "--json"]));
    let at = report["last_tick_at_epoch"].as_i64().expect("last tick");
    assert!((before..=after).contains(&at), "{report}");
    assert!(
        report["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .all(|w| !w.as_str().expect("text").contains("the last tick ran")),
        "{report}"
    );
    let text = env.ok(&["status"]);
    assert!(
        text.contains(&format!("last tick:       {} (", utc(at))) && !text.contains("future"),
        "{text}"
    );
    assert_eq!(
        metric(&env, "runner_last_tick_timestamp_seconds"),
        at as f64
    );
    // Ten minutes on, the real last tick is ten minutes old: the "is cron running?" warning
    // works again.
    let later = utc(at + 600);
    let text = env.ok(&["--now", &later, "status"]);
    let age = duration_between(&text, "WARNING: the last tick ran ", " ago");
    assert!((600..=600 + CLOCK_SLACK_SECS).contains(&age), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Re-anchoring schedules pushed into the future
// ---------------------------------------------------------------------------------------------

/// A tick in 2099 moves an every-minute schedule's cursor there; on the real clock it never
/// fires. `schedule reanchor` brings it back, and the next tick on the real clock fires it.
#[test]
fn reanchor_brings_a_schedule_pushed_to_2099_back_and_the_next_real_tick_fires_it() {
    let env = Env::init();
    // Added just before 2099, so the tick there has one hour of instants to look at.
    env.add_at(
        Some("2098-12-31T23:00:00Z"),
        "minutely",
        "* * * * *",
        &[],
        "true",
    );
    // Fires at the tick in 2099 below, and next in 2100.
    env.add_at(None, "yearly", "0 0 1 1 *", &[], "true");
    assert_eq!(env.tick(&[]), "");
    let far = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:30Z")
        .expect("time")
        .timestamp();
    assert_eq!(env.tick_at(&utc(far)), "");
    let executed = runs(&env, "minutely", "succeeded");
    assert_eq!(executed, 1, "the tick in 2099 ran its latest instant");

    // On the real clock: nothing fires, and the schedule says when it would.
    let err = env.tick(&[]);
    assert!(err.contains("behind"), "{err}");
    assert_eq!(runs(&env, "minutely", "succeeded"), executed);
    let listed = json(&env.ok(&["schedule", "show", "minutely", "--json"]));
    assert_eq!(listed["next_fire_at"], "2099-01-01T00:01:00Z");

    // Re-anchored as of two minutes ago, so that the next real tick has instants to fire without
    // this test waiting for the next minute.
    let anchor = real_now() - 120;
    let out = env.ok(&["--now", &utc(anchor), "schedule", "reanchor", "minutely"]);
    assert!(
        out.starts_with("reanchored minutely: next fire 2099-01-01T00:01:00+00:00 -> "),
        "{out}"
    );
    let stored = env.sql.query_i64(
        "SELECT materialized_through FROM job_definitions WHERE name = 'minutely'",
        &[],
    );
    assert!((anchor..anchor + 60).contains(&stored), "cursor {stored}");
    // The clock is still behind the latest tick: the tick warns, and fires the schedule.
    let err = env.tick(&[]);
    assert!(err.contains("behind"), "{err}");
    assert_eq!(
        runs(&env, "minutely", "succeeded"),
        executed + 1,
        "catch-up latest: the newest instant since the re-anchor ran"
    );
    let newest = env.sql.query_i64(
        "SELECT max(scheduled_for) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = 'minutely' AND r.status = 'succeeded' AND r.scheduled_for < 4000000000",
        &[],
    );
    assert!(newest > anchor && newest <= real_now(), "ran {newest}");

    // --all on the real clock: the yearly schedule comes back; minutely is not ahead any more;
    // the latest time a tick saw comes back to now, so ticks stop warning.
    let out = env.ok(&["schedule", "reanchor", "--all"]);
    assert!(
        out.contains("minutely: left alone, its cursor is not ahead of now"),
        "{out}"
    );
    assert!(
        out.contains("reanchored yearly: next fire 2100-01-01T00:00:00+00:00 -> "),
        "{out}"
    );
    assert!(
        out.contains("the latest time a tick saw was 2099-01-01T00:00:3"),
        "{out}"
    );
    assert_eq!(env.tick(&[]), "", "no more warnings");
    let report = json(&env.ok(&["status", "--json"]));
    assert_eq!(report["warnings"], Value::Array(vec![]), "{report}");
    assert_eq!(metric(&env, "runner_clock_behind_seconds"), 0.0);
    assert_eq!(metric(&env, "runner_schedules_ahead_of_clock"), 0.0);
    // Again: nothing left to move.
    let out = env.ok(&["schedule", "reanchor", "yearly"]);
    assert!(out.starts_with("yearly: left alone"), "{out}");
    // A name that does not exist: exit 3, nothing moved.
    let err = env.fails(3, &["schedule", "reanchor", "yearly", "nope"]);
    assert!(err.contains("no schedule named \"nope\""), "{err}");
    let err = env.fails(2, &["schedule", "reanchor"]);
    assert!(err.contains("--all"), "{err}");
}

/// A tick 45 days ahead recorded the daily instants in between as skipped (catch-up latest).
/// Re-anchoring forgets those skips, so each instant is decided again when it comes; the one
/// instant that tick ran keeps its run.
#[test]
fn reanchor_forgets_instants_skipped_ahead_of_their_time() {
    let env = Env::init();
    env.add_at(None, "daily", "0 3 * * *", &[], "true");
    let now = real_now();
    assert_eq!(env.tick_at(&utc(now + 45 * DAY)), "");
    let skipped_ahead = runs(&env, "daily", "skipped");
    assert!((43..=45).contains(&skipped_ahead), "{skipped_ahead}");
    assert_eq!(runs(&env, "daily", "succeeded"), 1);

    let out = env.ok(&["schedule", "reanchor", "daily"]);
    assert!(out.starts_with("reanchored daily: next fire "), "{out}");
    assert!(
        out.contains(&format!(
            "forgot {skipped_ahead} skipped instant(s) after now"
        )),
        "{out}"
    );
    assert!(out.contains("kept 1 run(s) of instants after now"), "{out}");
    assert_eq!(runs(&env, "daily", "skipped"), 0);
    assert_eq!(runs(&env, "daily", "succeeded"), 1);

    // A day and a bit later, that day's 03:00 instant runs (it is not blocked by a skip).
    let out = env.run(&["--now", &utc(now + DAY + 3600), "tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(runs(&env, "daily", "succeeded"), 2);
}

/// A tick five days ahead records the newest 1,000 instants of an every-5-minutes schedule and
/// counts the 440 older ones (from its cursor on) in the oldest skip's reason. Re-anchoring one
/// day after that cursor forgets that skip with the others after now, but 288 of the instants it
/// counted lie before now: they are neither run again nor recorded anywhere else. The re-anchor
/// records the newest of them as skipped, its reason counting the 287 others, so `history`,
/// `show` and `why` tell of them. The same with more older instants than a tick counts one by
/// one (an every-minute schedule 120 days ahead), whose reason names the cursor instead.
#[test]
fn reanchor_keeps_a_record_of_the_instants_before_now_a_tick_ahead_only_counted() {
    let env = Env::init();
    env.add_at(
        Some("2030-01-01T00:00:00Z"),
        "every5",
        "*/5 * * * *",
        &[],
        "true",
    );
    env.tick_at("2030-01-06T00:00:30Z");
    let counted = |name: &str| {
        env.sql.query_i64(
            &format!(
                "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
                 WHERE d.name = '{name}' AND r.skip_reason LIKE '%older missed instants%'"
            ),
            &[],
        )
    };
    assert_eq!(
        counted("every5"),
        1,
        "the oldest skip counts the older instants"
    );

    let now = "2030-01-02T00:00:30Z";
    let out = env.ok(&["--now", now, "schedule", "reanchor", "every5"]);
    assert!(
        out.contains(
            "  recorded 2030-01-02T00:00:00+00:00 as skipped, the newest instant before now that \
             tick passed over without a record: passed over by a tick whose clock was ahead (at \
             2030-01-06T00:00:30Z), which kept no record of it; recorded by schedule reanchor; \
             287 older missed instants were not recorded\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("forgot 999 skipped instant(s) after now"),
        "{out}"
    );
    let skipped = json(&env.ok(&[
        "--now", now, "history", "every5", "--status", "skipped", "--json",
    ]));
    let skipped = skipped.as_array().expect("array");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0]["scheduled_for"], "2030-01-02T00:00:00Z");
    let reason = skipped[0]["skip_reason"].as_str().expect("reason");
    assert!(
        reason.ends_with("; 287 older missed instants were not recorded"),
        "{reason}"
    );
    let run_id = skipped[0]["id"].as_i64().expect("id").to_string();
    let shown = json(&env.ok(&["--now", now, "show", &run_id, "--json"]));
    assert_eq!(shown["events"][0]["kind"], "SKIPPED", "{shown}");
    assert_eq!(shown["events"][0]["detail"]["reason"], reason, "{shown}");
    // `why` tells of the latest instant, and of the others through its reason.
    let why = json(&env.ok(&["--now", now, "why", "every5", "--json"]));
    assert_eq!(why["instant"], "2030-01-02T00:00:00Z", "{why}");
    assert_eq!(why["cause"], "skipped_catch_up", "{why}");
    assert_eq!(why["run"]["skip_reason"], reason, "{why}");
    // The next instant is decided when it comes: the next tick runs it.
    env.tick_at("2030-01-02T00:05:30Z");
    let ran = json(&env.ok(&[
        "--now",
        now,
        "why",
        "every5",
        "--at",
        "2030-01-02T00:05:00Z",
        "--json",
    ]));
    assert_eq!(ran["cause"], "ran", "{ran}");

    // More older instants than a tick counts: the reason names the cursor they came after.
    env.add_at(
        Some("2030-01-06T00:00:00Z"),
        "minutely",
        "* * * * *",
        &[],
        "true",
    );
    env.tick_at("2030-05-01T00:00:30Z");
    assert_eq!(counted("minutely"), 1);
    let now = "2030-03-01T00:00:30Z";
    let out = env.ok(&["--now", now, "schedule", "reanchor", "minutely"]);
    let since_cursor = 54 * 1440 - 1;
    assert!(
        out.contains(&format!(
            "  recorded 2030-03-01T00:00:00+00:00 as skipped, the newest instant before now \
             that tick passed over without a record: passed over by a tick whose clock was ahead \
             (at 2030-05-01T00:00:30Z), which kept no record of it; recorded by schedule \
             reanchor; {since_cursor} older missed instants were not recorded\n"
        )),
        "{out}"
    );
    assert_eq!(runs(&env, "minutely", "skipped"), 1);
}

// ---------------------------------------------------------------------------------------------
// A VM restored from a snapshot
// ---------------------------------------------------------------------------------------------

/// The database goes back to a snapshot taken while a job ran. Its cursor goes back with it:
/// the instants after the snapshot are materialised again by the catch-up policy, and the run
/// that was running at snapshot time (its runner is gone) is recovered once its lease expired.
#[test]
fn a_database_restored_from_a_snapshot_catches_up_and_recovers_its_running_run() {
    sqlite_only!("restores a copy of the database file");
    let env = Env::init();
    let started = env.path("started");
    let release = env.path("release");
    let _release_on_failure = ReleaseOnDrop(release.clone());
    let t0 = "2030-01-01T00:00:30Z";
    let base = chrono::DateTime::parse_from_rfc3339(t0)
        .expect("time")
        .timestamp();
    // The retry is due the moment recovery closes attempt 1, in the same tick.
    env.add_at(
        Some("2030-01-01T00:00:00Z"),
        "every5",
        "*/5 * * * *",
        &RETRY_AT_ONCE,
        &format!(
            "touch '{}'; [ \"$RUNNER_ATTEMPT\" = 2 ] || while [ ! -e '{}' ]; do sleep 0.05; done",
            started.display(),
            release.display()
        ),
    );
    env.add_at(
        Some("2030-01-01T00:00:00Z"),
        "all-of-them",
        "*/5 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    // The tick at 00:05:30 runs both 00:05 instants; the snapshot is taken while every5 runs.
    let first = env
        .cmd()
        .args(["--now", &utc(base + 300), "tick", "--lease", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tick");
    wait_until(DEADLINE, "the job to start", || started.exists());
    wait_until(DEADLINE, "all-of-them to finish", || {
        runs(&env, "all-of-them", "succeeded") == 1
    });
    let snapshot = env.path("snapshot.db");
    env.sql
        .sqlite()
        .execute("VACUUM INTO ?1", [snapshot.to_str().expect("path")])
        .expect("snapshot");
    fs::write(&release, "").expect("release the job");
    let out = finish(first, "the first tick");
    assert!(out.status.success(), "{}", stderr(&out));
    fs::remove_file(&started).expect("reset");

    // Restore: the snapshot replaces the database (and its WAL).
    for suffix in ["-wal", "-shm"] {
        let mut path = env.db.clone().into_os_string();
        path.push(suffix);
        let _ = fs::remove_file(path);
    }
    fs::rename(&snapshot, &env.db).expect("restore");
    assert_eq!(
        runs(&env, "every5", "running"),
        1,
        "running at snapshot time"
    );

    // The host comes back 30 minutes later.
    let err = env.tick_at(&utc(base + 1800));
    assert_eq!(
        err, "",
        "nothing to warn about: the clock is ahead of the snapshot"
    );
    // The run that was running: its lease expired, so it was recovered and retried (attempt 2).
    let run = env.sql.query_row(
        "SELECT status, attempt FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = 'every5' AND r.scheduled_for = $1",
        &[&(base - 30 + 300)],
    );
    let (status, attempt) = (run[0].string(), run[1].i64());
    assert_eq!((status.as_str(), attempt), ("succeeded", 2));
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE error_code = 'LEASE:EXPIRED'",
            &[]
        ),
        1
    );
    // The instants after the snapshot (00:10 .. 00:30): catch-up latest runs the newest and
    // skips the others; catch-up all runs each.
    assert_eq!(runs(&env, "every5", "skipped"), 4);
    assert_eq!(runs(&env, "every5", "succeeded"), 2);
    assert_eq!(runs(&env, "all-of-them", "succeeded"), 1 + 5);
}

// ---------------------------------------------------------------------------------------------
// `--now` jumping back and forth
// ---------------------------------------------------------------------------------------------

/// `--now` jumps a day forward, then an hour back: every instant exists once, catch-up policies
/// decide what runs, nothing crashes, nothing executes twice.
#[test]
fn clock_jumps_create_no_duplicate_instants() {
    let env = Env::init();
    let log = env.path("log");
    let at = |t: &str| vec!["--now".to_string(), t.to_string()];
    for policy in ["latest", "all", "none"] {
        let mut args = at("2030-01-01T00:30:00Z");
        args.extend(
            [
                "schedule",
                "add",
                policy,
                "--cron",
                "0 * * * *",
                "--catch-up",
                policy,
                "--",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        args.push(format!(
            "echo \"$RUNNER_JOB $RUNNER_SCHEDULED_AT\" >> {}",
            log.display()
        ));
        let out = env.cmd().args(&args).output().expect("spawn");
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let tick_at = |t: &str| {
        let out = env
            .cmd()
            .args(["--now", t, "tick", "--concurrency", "8"])
            .output()
            .expect("spawn");
        assert!(out.status.success(), "tick at {t}: {}", stderr(&out));
    };
    tick_at("2030-01-01T01:00:30Z"); // 01:00 due
    tick_at("2030-01-02T01:00:30Z"); // a day forward: 24 instants due
    tick_at("2030-01-02T00:00:30Z"); // an hour back: nothing new
    tick_at("2030-01-01T12:00:00Z"); // back half a day: still nothing
    tick_at("2030-01-02T02:00:30Z"); // 02:00 due
    tick_at("2030-01-02T02:00:40Z"); // again: nothing new

    let count = |sql: &str| env.sql.query_i64(sql, &[]);
    assert_eq!(
        count("SELECT count(*) FROM (SELECT definition_id, scheduled_for FROM job_runs GROUP BY 1, 2 HAVING count(*) > 1) AS duplicates"),
        0,
        "duplicate instants"
    );
    let by = |policy: &str, status: &str| {
        count(&format!(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = '{policy}' AND r.status = '{status}'"
        ))
    };
    // 01:00 day 1, then 02:00 day 1 .. 01:00 day 2 (24), then 02:00 day 2: 26 instants each.
    for policy in ["latest", "all", "none"] {
        let total = by(policy, "succeeded") + by(policy, "skipped");
        assert_eq!(total, 26, "{policy}: every instant recorded once");
    }
    assert_eq!(by("all", "succeeded"), 26, "all: every missed instant runs");
    assert_eq!(
        by("latest", "succeeded"),
        3,
        "latest: only the newest of the missed day runs"
    );
    assert_eq!(
        by("none", "succeeded"),
        3,
        "none: the on-time instant of the jump runs, the missed do not"
    );
    assert_eq!(
        count("SELECT count(*) FROM job_runs WHERE status = 'skipped' AND (skip_reason IS NULL OR skip_reason = '')"),
        0,
        "every skip has a reason"
    );
    // The jobs' own account: every executed instant exactly once.
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_string)
        .collect();
    let unique: BTreeSet<&String> = lines.iter().collect();
    assert_eq!(unique.len(), lines.len(), "an instant executed twice");
    assert_eq!(lines.len(), 26 + 3 + 3);
}

/// After a tick whose clock ran ahead, every command that names a schedule's next fire times
/// (`list`, `show`, `next NAME`, the ones `edit` prints, `why`'s) names the first one after its
/// cursor: the instants in between were handled by that tick and will not run.
#[test]
fn after_a_tick_ahead_every_preview_starts_at_the_cursor() {
    let env = Env::init();
    env.add_at(Some("2026-05-01T09:59:30Z"), "h", "0 * * * *", &[], "true");
    env.tick_at("2026-05-03T10:00:00Z");
    let earlier = ["--now", "2026-05-01T10:30:00Z"];
    let cmd = |args: &[&str]| env.ok(&[&earlier[..], args].concat());

    let show = json(&cmd(&["schedule", "show", "h", "--json"]));
    assert_eq!(show["next_fire_at"], "2026-05-03T11:00:00Z", "{show}");
    let next = json(&cmd(&["schedule", "next", "h", "-n", "2", "--json"]));
    assert_eq!(next[0]["at"], "2026-05-03T11:00:00Z", "{next}");
    assert_eq!(next[1]["at"], "2026-05-03T12:00:00Z", "{next}");
    // `--cron` has no cursor: its fire times come after now.
    let bare = json(&cmd(&["schedule", "next", "--cron", "0 * * * *", "--json"]));
    assert_eq!(bare[0]["at"], "2026-05-01T11:00:00Z", "{bare}");
    let why = json(&cmd(&["why", "h", "--json"]));
    assert_eq!(why["next_fire_at"], "2026-05-03T11:00:00Z", "{why}");

    let edited = cmd(&["schedule", "edit", "h", "--cron", "0,30 * * * *"]);
    assert!(
        edited.contains("next 5 fire times (UTC):\n  2026-05-03T10:30:00+00:00\n"),
        "{edited}"
    );
    // And the tick agrees: nothing of the edited cron runs before the cursor.
    env.tick_at("2026-05-01T11:30:30Z");
    let history = json(&env.ok(&["history", "h", "--json", "--limit", "1000"]));
    for run in history.as_array().expect("runs") {
        let at = run["scheduled_for"].as_str().expect("scheduled_for");
        assert!(
            at <= "2026-05-03T10:00:00Z",
            "a run before the cursor: {run}"
        );
    }
}

/// `schedule next -n N` looks 400 years ahead: an expression that fires fewer times in them
/// prints what there is and says so on stderr (29 February: 97 times).
#[test]
fn next_says_when_it_finds_fewer_fire_times_than_asked() {
    let env = Env::new();
    let out = env.run(&[
        "--now",
        "2026-01-01T00:00:00Z",
        "schedule",
        "next",
        "--cron",
        "0 0 29 2 *",
        "-n",
        "100",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 97);
    assert_eq!(
        stderr(&out),
        "runner: note: only 97 fire times within about 400 years ahead (as far as it looks), \
         fewer than the 100 asked for\n"
    );
}
