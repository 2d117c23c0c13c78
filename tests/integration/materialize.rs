//! `runner tick --now T` turns due schedules into `job_runs` rows: exactly one row per instant
//! however many ticks race, the catch-up policies, daylight-saving days, repeated and
//! out-of-order ticks, paused schedules.
//!
//! Every schedule here runs `true`, so the tick's execution step is harmless; runs are counted by
//! `scheduled_for`, and statuses are read knowing that due runs were executed.

use std::collections::BTreeSet;
use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{epoch, stderr, utc, Env};

/// `(scheduled_for as UTC text, status, skip_reason)` of a schedule's rows, oldest first.
fn rows(env: &Env, name: &str) -> Vec<(String, String, Option<String>)> {
    env.sql
        .query_rows(
            "SELECT r.scheduled_for, r.status, r.skip_reason FROM job_runs r
             JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = $1 AND r.trigger = 'schedule' ORDER BY r.scheduled_for, r.id",
            &[&name],
        )
        .iter()
        .map(|r| (utc(r[0].i64()), r[1].string(), r[2].opt_string()))
        .collect()
}

/// The instants of a schedule's rows (any status) within [from, to), as UTC text.
fn instants_between(env: &Env, name: &str, from: &str, to: &str) -> Vec<String> {
    rows(env, name)
        .into_iter()
        .map(|(at, _, _)| at)
        .filter(|at| epoch(at) >= epoch(from) && epoch(at) < epoch(to))
        .collect()
}

/// A tick at `now` that must succeed silently.
fn tick(env: &Env, now: &str) {
    let err = env.tick_at(now);
    assert!(err.is_empty(), "tick --now {now}: stderr: {err}");
}

/// A tick whose clock is behind the latest tick's: it succeeds, with one warning line.
fn tick_behind(env: &Env, now: &str) {
    let out = env.run(&["--now", now, "tick"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && err.lines().count() == 1
            && err.starts_with("runner: warning: this host's clock"),
        "tick --now {now}: exit {:?}, stderr: {err}",
        out.status.code()
    );
}

/// Ticks at every step from `from` to `to` inclusive.
fn tick_every(env: &Env, from: &str, to: &str, step_secs: i64) {
    let mut t = epoch(from);
    while t <= epoch(to) {
        tick(env, &utc(t));
        t += step_secs;
    }
}

/// Every row is one distinct (schedule, instant): the invariant behind "exactly once".
fn assert_one_row_per_instant(env: &Env) {
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs WHERE trigger = 'schedule'", &[]),
        env.sql.query_i64("SELECT count(*) FROM (SELECT DISTINCT definition_id, scheduled_for FROM job_runs WHERE trigger = 'schedule') AS instants", &[]),
        "some instant has two rows"
    );
}

// ---------------------------------------------------------------------------
// (a) racing ticks
// ---------------------------------------------------------------------------

/// Start `runner tick --now now` `n` times at once; wait (to a deadline) for all of them.
fn race_ticks(env: &Env, now: &str, n: usize, round: usize) {
    let children: Vec<(Child, std::path::PathBuf)> = (0..n)
        .map(|i| {
            let err = env.path(&format!("race-{round}-{i}.stderr"));
            let child = env
                .cmd()
                .args(["--now", now, "tick"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(&err).expect("stderr file"))
                .spawn()
                .expect("spawn tick");
            (child, err)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (mut child, err) in children {
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("a racing tick --now {now} did not finish within 60s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let text = std::fs::read_to_string(&err).expect("stderr");
        assert!(
            !text.contains("database is locked") && !text.contains("panicked"),
            "tick --now {now}: {text}"
        );
        assert!(
            status.success(),
            "a racing tick --now {now} exited {:?}: {text}",
            status.code()
        );
        assert!(text.is_empty(), "a clean tick prints nothing: {text}");
    }
}

#[test]
fn eight_racing_ticks_make_exactly_one_run_per_due_instant() {
    let env = Env::init();
    let t0 = "2026-01-01T00:00:00Z";
    env.add_at(
        Some(t0),
        "all-a",
        "*/10 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    env.add_at(
        Some(t0),
        "all-b",
        "*/10 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    env.add_at(Some(t0), "latest", "*/10 * * * *", &[], "true");
    env.add_at(
        Some(t0),
        "minutely",
        "* * * * *",
        &["--catch-up", "all"],
        "true",
    );

    // Three rounds of eight simultaneous ticks, each round 35 minutes after the last.
    let mut now = epoch(t0);
    for round in 0..3 {
        now += 35 * 60;
        race_ticks(&env, &utc(now), 8, round);

        let every = |step: i64| -> Vec<String> {
            (epoch(t0) / step + 1..=now / step)
                .map(|k| utc(k * step))
                .collect()
        };
        for name in ["all-a", "all-b", "latest"] {
            let got: Vec<String> = rows(&env, name).into_iter().map(|r| r.0).collect();
            assert_eq!(got, every(600), "{name} after round {round}");
        }
        let got: Vec<String> = rows(&env, "minutely").into_iter().map(|r| r.0).collect();
        assert_eq!(got, every(60), "minutely after round {round}");
        assert_one_row_per_instant(&env);
        // catch-up latest ran one instant per round and skipped the rest.
        assert_eq!(
            rows(&env, "latest")
                .iter()
                .filter(|r| r.1 != "skipped")
                .count(),
            round + 1
        );
    }
    // The due runs were each claimed and executed once, by one of the racing ticks.
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status NOT IN ('succeeded', 'skipped')",
            &[]
        ),
        0
    );
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_attempts", &[]),
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'",
            &[]
        )
    );
}

// ---------------------------------------------------------------------------
// (b) catch-up
// ---------------------------------------------------------------------------

#[test]
fn catch_up_after_five_hours_without_ticks() {
    let env = Env::init();
    let t0 = "2026-01-01T00:00:00Z";
    env.add_at(
        Some(t0),
        "latest",
        "0 * * * *",
        &["--catch-up", "latest"],
        "true",
    );
    env.add_at(Some(t0), "all", "0 * * * *", &["--catch-up", "all"], "true");
    env.add_at(
        Some(t0),
        "none",
        "0 * * * *",
        &["--catch-up", "none"],
        "true",
    );
    // none with a grace longer than the lateness: the newest instant is not missed.
    env.add_at(
        Some(t0),
        "none-15m",
        "0 * * * *",
        &["--catch-up", "none", "--grace", "15m"],
        "true",
    );
    tick(&env, t0);
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);

    // Ticks stop; 01:00..05:00 are missed; the next tick comes at 05:10.
    tick(&env, "2026-01-01T05:10:00Z");
    let missed: Vec<String> = (1..=5).map(|h| format!("2026-01-01T0{h}:00:00Z")).collect();

    let check = |name: &str, ran: &[&str], reason_has: &str| {
        let rows = rows(&env, name);
        let instants: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(instants, missed, "{name}: one row per missed instant");
        for (at, status, reason) in &rows {
            if ran.contains(&at.as_str()) {
                assert_eq!(status, "succeeded", "{name} {at}");
                assert_eq!(reason, &None, "{name} {at}");
            } else {
                assert_eq!(status, "skipped", "{name} {at}");
                let reason = reason.as_deref().unwrap_or_default();
                assert!(
                    reason.contains(reason_has),
                    "{name} {at}: skip reason {reason:?} should mention {reason_has:?}"
                );
            }
        }
    };
    check("latest", &["2026-01-01T05:00:00Z"], "latest");
    check(
        "all",
        &[
            "2026-01-01T01:00:00Z",
            "2026-01-01T02:00:00Z",
            "2026-01-01T03:00:00Z",
            "2026-01-01T04:00:00Z",
            "2026-01-01T05:00:00Z",
        ],
        "",
    );
    check("none", &[], "missed");
    check("none-15m", &["2026-01-01T05:00:00Z"], "missed");

    // The counts the acceptance list names: 1, 5, 0 runs; the rest skipped.
    let runs = |name: &str, status: &str| rows(&env, name).iter().filter(|r| r.1 == status).count();
    assert_eq!(
        (runs("latest", "succeeded"), runs("latest", "skipped")),
        (1, 4)
    );
    assert_eq!((runs("all", "succeeded"), runs("all", "skipped")), (5, 0));
    assert_eq!((runs("none", "succeeded"), runs("none", "skipped")), (0, 5));
    // Every skipped row has a SKIPPED event with its reason.
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs r WHERE r.status = 'skipped'
             AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.run_id = r.id AND e.kind = 'SKIPPED')", &[]),
        0
    );
    assert_one_row_per_instant(&env);
}

// ---------------------------------------------------------------------------
// (c) daylight saving time
// ---------------------------------------------------------------------------

#[test]
fn dst_spring_forward_runs_the_skipped_fixed_time_once_after_the_jump() {
    let env = Env::init();
    env.add_at(
        Some("2026-03-07T12:00:00Z"),
        "nightly",
        "30 2 * * *",
        &["--tz", "America/New_York"],
        "true",
    );
    // Tick every 30 minutes across 2026-03-08 (02:00 EST jumps to 03:00 EDT at 07:00Z).
    tick_every(&env, "2026-03-08T00:00:00Z", "2026-03-08T12:00:00Z", 1800);
    let rows = rows(&env, "nightly");
    assert_eq!(
        rows,
        [(
            "2026-03-08T07:00:00Z".to_string(),
            "succeeded".to_string(),
            None
        )],
        "one run at 03:00 EDT"
    );
}

#[test]
fn dst_fall_back_fixed_time_runs_once_and_wildcard_runs_in_both_passes() {
    let env = Env::init();
    let tz = ["--tz", "America/New_York"];
    env.add_at(
        Some("2026-10-31T12:00:00Z"),
        "fixed",
        "30 1 * * *",
        &tz,
        "true",
    );
    env.add_at(
        Some("2026-10-31T12:00:00Z"),
        "wild",
        "*/30 * * * *",
        &tz,
        "true",
    );
    // Tick every 30 minutes across the repeated hour (01:00 EDT = 05:00Z, 01:00 EST = 06:00Z).
    tick_every(&env, "2026-11-01T03:00:00Z", "2026-11-01T09:00:00Z", 1800);

    assert_eq!(
        instants_between(
            &env,
            "fixed",
            "2026-11-01T04:00:00Z",
            "2026-11-02T04:00:00Z"
        ),
        ["2026-11-01T05:30:00Z"],
        "01:30 runs once, in the first pass"
    );
    assert_eq!(
        instants_between(&env, "wild", "2026-11-01T04:30:00Z", "2026-11-01T07:30:00Z"),
        [
            "2026-11-01T04:30:00Z", // 00:30 EDT
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-01T06:00:00Z", // 01:00 EST
            "2026-11-01T06:30:00Z", // 01:30 EST
            "2026-11-01T07:00:00Z", // 02:00 EST
        ]
    );
    // Ticking at every instant, each of them ran (none superseded by catch-up).
    for (at, status, _) in rows(&env, "wild") {
        if epoch(&at) >= epoch("2026-11-01T03:00:00Z") {
            assert_eq!(status, "succeeded", "wild {at}");
        }
    }
    assert_one_row_per_instant(&env);
}

#[test]
fn dst_in_berlin_with_fixed_time_lists() {
    // Fixed-time jobs written as lists: the case where a plain cron library goes wrong. One tick
    // after each transition day with catch-up all records every distinct instant of the day.
    let env = Env::init();
    let opts = ["--tz", "Europe/Berlin", "--catch-up", "all"];
    env.add_at(
        Some("2026-03-28T12:00:00Z"),
        "spring",
        "0,30 2 * * *",
        &opts,
        "true",
    );
    env.add_at(
        Some("2026-10-24T12:00:00Z"),
        "fall",
        "0,30 2 * * *",
        &opts,
        "true",
    );
    // 2026-03-29: 02:00 and 02:30 do not exist; both become 03:00 CEST (01:00Z): one run.
    tick(&env, "2026-03-29T12:00:00Z");
    assert_eq!(
        instants_between(
            &env,
            "spring",
            "2026-03-28T23:00:00Z",
            "2026-03-29T22:00:00Z"
        ),
        ["2026-03-29T01:00:00Z"]
    );
    env.ok(&["schedule", "pause", "spring"]);
    tick(&env, "2026-10-25T12:00:00Z");
    // 2026-10-25: 02:00 and 02:30 happen twice; a fixed-time job runs in the first pass only.
    assert_eq!(
        instants_between(&env, "fall", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"),
        ["2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z"]
    );
}

// ---------------------------------------------------------------------------
// (d) the same minute twice, (f) the clock jumping around
// ---------------------------------------------------------------------------

#[test]
fn the_same_minute_ticked_twice_creates_nothing_new() {
    let env = Env::init();
    let t0 = "2026-01-01T00:00:00Z";
    env.add_at(Some(t0), "minutely", "* * * * *", &[], "true");
    env.add_at(
        Some(t0),
        "every5",
        "*/5 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    tick(&env, "2026-01-01T00:05:00Z");
    let before = (rows(&env, "minutely"), rows(&env, "every5"));
    assert_eq!(before.0.len(), 5, "00:01..00:05: {:?}", before.0);
    assert_eq!(before.1.len(), 1);
    for now in [
        "2026-01-01T00:05:00Z",
        "2026-01-01T00:05:00Z",
        "2026-01-01T00:05:30Z",
        // Late in the minute, but not so late that a tick stalled before reading its clock
        // (CLOCK_SLACK_SECS) would read the next one.
        "2026-01-01T00:05:39Z",
    ] {
        tick(&env, now);
        assert_eq!(
            (rows(&env, "minutely"), rows(&env, "every5")),
            before,
            "tick at {now}"
        );
    }
    tick(&env, "2026-01-01T00:06:00Z");
    let after = rows(&env, "minutely");
    assert_eq!(after.len(), 6);
    assert_eq!(after[5].0, "2026-01-01T00:06:00Z");
    assert_eq!(rows(&env, "every5"), before.1);
}

#[test]
fn now_jumping_forward_a_day_and_back_an_hour_duplicates_nothing() {
    let env = Env::init();
    let t0 = "2026-01-01T00:00:00Z";
    env.add_at(Some(t0), "latest", "0 * * * *", &[], "true");
    env.add_at(Some(t0), "all", "0 * * * *", &["--catch-up", "all"], "true");
    tick(&env, "2026-01-01T01:00:00Z");
    tick(&env, "2026-01-02T01:00:00Z"); // a day later
    let hours = |n: i64| -> Vec<String> { (1..=n).map(|h| utc(epoch(t0) + h * 3600)).collect() };
    for name in ["latest", "all"] {
        let got: Vec<String> = rows(&env, name).into_iter().map(|r| r.0).collect();
        assert_eq!(got, hours(25), "{name}");
    }
    let snapshot = (rows(&env, "latest"), rows(&env, "all"));
    // Back an hour, and to the jump's own time again: nothing is materialised twice. The ticks
    // behind the latest tick's time say so (see clock.rs).
    tick_behind(&env, "2026-01-02T00:00:00Z");
    tick_behind(&env, "2026-01-02T00:30:00Z");
    tick(&env, "2026-01-02T01:00:00Z");
    assert_eq!((rows(&env, "latest"), rows(&env, "all")), snapshot);
    assert_one_row_per_instant(&env);
    // Forward again: only the new instant.
    tick(&env, "2026-01-02T02:00:00Z");
    for name in ["latest", "all"] {
        let got: Vec<String> = rows(&env, name).into_iter().map(|r| r.0).collect();
        assert_eq!(got, hours(26), "{name}");
    }
    let distinct: BTreeSet<String> = rows(&env, "all").into_iter().map(|r| r.0).collect();
    assert_eq!(distinct.len(), 26);
    assert_one_row_per_instant(&env);
}

// ---------------------------------------------------------------------------
// (e) paused schedules
// ---------------------------------------------------------------------------

#[test]
fn paused_schedules_materialise_nothing() {
    let env = Env::init();
    let t0 = "2026-01-01T00:00:00Z";
    env.add_at(
        Some(t0),
        "paused",
        "*/15 * * * *",
        &["--catch-up", "all", "--paused"],
        "true",
    );
    env.add_at(
        Some(t0),
        "later-paused",
        "*/15 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    env.add_at(
        Some(t0),
        "active",
        "*/15 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    tick(&env, "2026-01-01T00:15:00Z");
    assert_eq!(rows(&env, "later-paused").len(), 1);
    env.ok(&[
        "--now",
        "2026-01-01T00:20:00Z",
        "schedule",
        "pause",
        "later-paused",
    ]);
    tick_every(&env, "2026-01-01T00:30:00Z", "2026-01-01T02:00:00Z", 1800);
    assert_eq!(rows(&env, "paused").len(), 0);
    assert_eq!(rows(&env, "later-paused").len(), 1);
    // The ticks did materialise: the active schedule got every instant.
    assert_eq!(rows(&env, "active").len(), 8);
}

/// A tick records at most 1,000 instants of one schedule; the older ones are counted in the
/// oldest recorded skip's reason, and a run is never turned into a skip to carry that note.
#[test]
fn more_than_a_thousand_missed_instants_are_counted_not_lost() {
    let env = Env::init();
    // Two days of minutes missed (2,880 instants; the tick at +2d sees 2,880 due).
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "latest",
        "* * * * *",
        &[],
        "true",
    );
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "lenient",
        "* * * * *",
        &["--catch-up", "none", "--grace", "30d"],
        "true",
    );
    // One tick must run all 1,000 (a forbid schedule, one at a time): on a slow machine that
    // takes longer than the default 50s after which a tick stops claiming, so allow it the time.
    let out = env.run(&["--now", "2026-01-03T00:00:00Z", "tick", "--max-tick", "6h"]);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "tick: exit {:?}: {}",
        out.status.code(),
        stderr(&out)
    );

    let latest = rows(&env, "latest");
    assert_eq!(latest.len(), 1000, "the newest 1,000 instants are recorded");
    assert_eq!(
        latest.iter().filter(|r| r.1 != "skipped").count(),
        1,
        "latest runs one"
    );
    let (oldest_at, oldest_status, oldest_reason) = &latest[0];
    assert_eq!(oldest_at, "2026-01-02T07:21:00Z");
    assert_eq!(oldest_status, "skipped");
    let reason = oldest_reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("1880 older missed instants were not recorded"),
        "{reason}"
    );

    // catch-up none with a month of grace: all 1,000 recorded instants are within grace and run.
    let lenient = rows(&env, "lenient");
    assert_eq!(lenient.len(), 1000);
    assert!(
        lenient.iter().all(|r| r.1 != "skipped"),
        "no run turned into a skip: {:?}",
        &lenient[0]
    );
    // And the one tick kept claiming while due work existed: a forbid schedule yields one run
    // at a time, yet all 1,000 ran.
    assert!(
        lenient.iter().all(|r| r.1 == "succeeded"),
        "{} of 1000 ran",
        lenient.iter().filter(|r| r.1 == "succeeded").count()
    );
}

/// Ten years behind (a host restored from an old image, a clock set years ahead): the tick
/// records the newest 1,000 instants and runs the latest, without walking the 5 million minutes
/// before them one by one (which took seconds of CPU per schedule, and 9999-12-31 took hours);
/// the older ones are counted up to a limit, and the note says since when they were missed.
#[test]
fn years_of_missed_instants_are_not_walked_one_by_one() {
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "decade",
        "* * * * *",
        &[],
        "true",
    );
    let out = env.run(&["--now", "2036-01-01T00:00:00Z", "tick"]);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "tick: exit {:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    let decade = rows(&env, "decade");
    assert_eq!(decade.len(), 1000);
    assert_eq!(decade[999].0, "2036-01-01T00:00:00Z");
    assert_eq!(decade[999].1, "succeeded");
    let reason = decade[0].2.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("catch-up latest: superseded by 2036-01-01T00:00:00Z; more than ")
            && reason
                .ends_with(" older missed instants, since 2026-01-01T00:00:00Z, were not recorded"),
        "{reason}"
    );
}
