//! `prune` and the tick's own hourly prune: what is deleted (finished runs with their attempts
//! and events, never pending or running ones), in batches, by `RUNNER_RETENTION`, without
//! letting a tick run a pruned instant again or blocking the ticks meanwhile.

use std::process::Stdio;
use std::time::Duration;

use crate::common::{
    assert_read_at, epoch, insert_finished_runs, json, never, never_near, real_now, run_ids,
    status_of, stderr, stdout, utc, wait_until, Backend, Bg, Env, UNDO_JOB_STOPPING,
    UNDO_PRUNED_LAST_RUN, UNDO_TIMING_CHANGED,
};

/// The cutoff `prune --older-than AGE` at `--now NOW` printed: AGE before the time it read, which
/// a busy machine makes a little later than NOW.
fn cutoff_of(out: &str, now: &str, age_secs: i64) -> String {
    let cutoff = out
        .split_once(" that finished before ")
        .and_then(|(_, rest)| rest.get(..20))
        .unwrap_or_else(|| panic!("no cutoff in {out:?}"));
    assert_read_at(epoch(cutoff), now, -age_secs, "the cutoff");
    cutoff.to_string()
}

#[test]
fn prune_dry_run_then_prune_never_touches_pending_or_running() {
    let env = Env::init();
    let t0 = "2026-07-01T00:00:00Z";
    env.add_at(Some(t0), "tenmin", "*/10 * * * *", &[], "true");
    env.add_at(
        Some(t0),
        "failing",
        &never_near(t0),
        &["--backoff-base", "1h", "--backoff-max", "1h"],
        "exit 2",
    );
    let pidfile = env.path("job.pid");
    env.add_at(
        Some(t0),
        "sleeper",
        &never_near(t0),
        &[],
        &format!("echo $$ > '{}'; sleep 30", pidfile.display()),
    );
    for minute in ["10", "20", "30"] {
        env.tick_at(&format!("2026-07-01T00:{minute}:30Z"));
    }
    // A run waiting to retry, and one skipped (overlap) besides the succeeded ones.
    env.ok(&["--now", "2026-07-01T00:31:00Z", "run", "failing"]);
    env.tick_at("2026-07-01T00:31:01Z");
    // A running run, held by a tick that stops claiming after a second.
    env.ok(&["--now", "2026-07-01T00:32:00Z", "run", "sleeper"]);
    let bg = Bg::spawn(
        &env,
        "tick",
        &["--now", "2026-07-01T00:32:01Z", "tick", "--max-tick", "1s"],
    )
    .with_job_pidfile(&pidfile);
    let sleeper = run_ids(&env, "sleeper")[0];
    wait_until(Duration::from_secs(20), "the sleeper to run", || {
        status_of(&env, sleeper) == "running" && bg.job_pid().is_some()
    });
    std::thread::sleep(Duration::from_millis(1500)); // past its --max-tick: it claims no more
                                                     // A pending run nobody has claimed.
    env.ok(&["--now", "2026-07-01T00:33:00Z", "run", "tenmin"]);

    let count = |sql: &str| env.sql.query_i64(sql, &[]);
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
    let cutoff = cutoff_of(&out, "2026-07-02T00:00:00Z", 3600);
    assert_eq!(
        out,
        format!(
            "would remove 3 runs ({attempts} attempts, {events} events) that finished before \
             {cutoff} (dry run; nothing was deleted)\n"
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
    let cutoff = cutoff_of(&out, "2026-07-02T00:00:00Z", 3600);
    assert_eq!(
        out,
        format!(
            "removed 3 runs ({attempts} attempts, {events} events) that finished before \
             {cutoff}\n"
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
    let out = bg.finish(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn pruning_a_schedules_history_never_lets_a_tick_run_its_instants_again() {
    let env = Env::init();
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
        "tenmin",
        "*/10 * * * *",
        &[],
        "true",
    );
    for minute in ["10", "20", "30", "40"] {
        env.tick_at(&format!("2026-07-01T00:{minute}:05Z"));
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
        env.tick_at(now);
        assert_eq!(
            run_ids(&env, "tenmin"),
            Vec::<i64>::new(),
            "a tick at {now} re-materialised a pruned instant"
        );
    }
    // The next instant after the cursor still runs.
    env.tick_at("2026-07-01T00:50:05Z");
    assert_eq!(run_ids(&env, "tenmin").len(), 1);
}

#[test]
fn prune_deletes_in_batches_of_5000_runs() {
    let env = Env::init();
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
        "bulk",
        &never_near("2026-07-01T00:00:00Z"),
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
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_attempts", &[]),
        0
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_events", &[]), 0);
}

#[test]
fn prune_retention_comes_from_runner_retention() {
    let env = Env::init();
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
        "kept",
        &never_near("2026-07-01T00:00:00Z"),
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
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
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
        &never(),
        "--paused",
        "--",
        "true",
    ]);
    let tick_with = |retention: Option<&str>| {
        let out = tick_with_retention(&env, retention);
        assert_eq!(stderr(&out), "", "a pruning tick stays quiet");
    };
    // Retention off: nothing happens.
    let now = real_now();
    insert_finished_runs(&env, "old", 50, now, 40 * 86_400);
    tick_with(Some("off"));
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 50);
    // Default 30 days: the first tick prunes the 40-day-old runs.
    let before = real_now();
    tick_with(None);
    let after = real_now();
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    let pruned_at = env.sql.query_i64(
        "SELECT value FROM runner_state WHERE key = 'last_prune_at'",
        &[],
    );
    assert!((before..=after).contains(&pruned_at), "{pruned_at}");
    // Within the hour: not again.
    insert_finished_runs(&env, "old", 50, real_now() + 1, 40 * 86_400);
    tick_with(None);
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 50);
    // An hour later (the turn's time moved back an hour, as if it had passed): again. Status
    // says when.
    env.sql.exec(
        "UPDATE runner_state SET value = value - 3600 WHERE key = 'last_prune_at'",
        &[],
    );
    let before = real_now();
    // With -v it says what it removed (and only then speaks).
    let out = env
        .cmd()
        .args(["-v", "tick"])
        .env_remove("RUNNER_RETENTION")
        .output()
        .expect("tick");
    let after = real_now();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "runner: automatic pruning removed 50 runs (50 attempts, 100 events) that finished before "
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    let report = json(&env.ok(&["status", "--json"]));
    let pruned_at = report["last_prune_at_epoch"].as_i64().expect("last prune");
    assert!((before..=after).contains(&pruned_at), "{report}");
}

/// `status`'s "last prune" (`last_prune_at` in `--json`) is the latest prune of either kind: a
/// `runner prune` counts, with automatic pruning off (an operator pruning from their own cron saw
/// none) and after an automatic prune alike. A manual prune leaves the automatic one's hourly
/// turn alone: the tick still applies its own retention when its turn comes.
#[test]
fn last_prune_is_the_latest_prune_of_either_kind() {
    let env = Env::init();
    env.add("a", &[], "true");
    let runs = || env.sql.query_i64("SELECT count(*) FROM job_runs", &[]);
    let auto_turn = || {
        env.sql.query_i64s(
            "SELECT value FROM runner_state WHERE key = 'last_prune_at'",
            &[],
        )
    };
    // The last prune `status` shows, checked against its text; `None` when it shows none.
    let last_prune = || -> Option<i64> {
        let report = json(&env.ok(&["status", "--json"]));
        let text = env.ok(&["status"]);
        let at = report["last_prune_at_epoch"].as_i64();
        match at {
            Some(at) => assert!(
                text.contains(&format!("last prune:      {}\n", utc(at))),
                "{text}"
            ),
            None => assert!(!text.contains("last prune:"), "{text}"),
        }
        at
    };
    let manual_prune = || -> (i64, i64) {
        let before = real_now();
        let out = env.ok(&["prune", "--older-than", "30d"]);
        assert!(out.starts_with("removed 5 runs"), "{out}");
        (before, real_now())
    };

    // Automatic pruning off: the tick never prunes, and `runner prune` is the only one.
    insert_finished_runs(&env, "a", 5, real_now(), 40 * 86_400);
    tick_with_retention(&env, Some("off"));
    assert_eq!(runs(), 5);
    assert_eq!(last_prune(), None);
    let (before, after) = manual_prune();
    assert_eq!(runs(), 0);
    let at = last_prune().expect("the manual prune");
    assert!((before..=after).contains(&at), "{at}");
    assert_eq!(auto_turn(), [0i64; 0], "the automatic turn is not taken");

    // The tick's turn was never taken: it prunes by its own retention, the manual prune
    // notwithstanding, and is now the last prune.
    insert_finished_runs(&env, "a", 5, real_now(), 41 * 86_400);
    let before = real_now();
    tick_with_retention(&env, None);
    let after = real_now();
    assert_eq!(runs(), 0);
    let turn = auto_turn()[0];
    assert!((before..=after).contains(&turn), "{turn}");
    assert_eq!(last_prune(), Some(turn));

    // A manual prune after an automatic one (its turn moved back ten minutes, as if taken then):
    // the manual one is the last, and the turn stays where it was.
    env.sql.exec(
        "UPDATE runner_state SET value = value - 600 WHERE key = 'last_prune_at'",
        &[],
    );
    insert_finished_runs(&env, "a", 5, real_now(), 42 * 86_400);
    let (before, after) = manual_prune();
    let at = last_prune().expect("the manual prune");
    assert!((before..=after).contains(&at), "{at}");
    assert_eq!(auto_turn(), [turn - 600]);
}

#[test]
fn ticks_keep_succeeding_while_a_big_prune_runs() {
    let env = Env::init();
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
        "bulk",
        &never_near("2026-07-01T00:00:00Z"),
        &[],
        "true",
    );
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
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
        let at = utc(now + 60 * ticks);
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
    let live_pending = env.sql.query_i64(
        "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = 'live' AND r.status IN ('pending', 'running')",
        &[],
    );
    assert_eq!(live_pending, 0, "every live run executed");
    assert!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'",
            &[]
        ) >= ticks
    );
}

/// Pruning a job's last success does not take its last-success metric with it: a job failing
/// for longer than the retention still reports when it last succeeded (an alert on the series
/// keeps firing), on either backend; the series goes only with the schedule.
#[test]
fn a_pruned_last_success_stays_in_the_metrics() {
    let env = Env::init();
    let t0 = "2025-01-01T00:00:00Z";
    env.add_at(
        Some(t0),
        "daily",
        "0 3 * * *",
        &["--max-attempts", "1"],
        "true",
    );
    env.tick_at("2025-01-01T03:00:02Z");
    env.ok(&[
        "--now",
        "2025-01-01T04:00:00Z",
        "schedule",
        "edit",
        "daily",
        "--quiet",
        "--",
        "exit 1",
    ]);
    env.run(&["--now", "2025-01-02T03:00:02Z", "tick"]);
    let last_success = |env: &Env| {
        env.ok(&["metrics"])
            .lines()
            .find(|l| l.starts_with("runner_job_last_success_timestamp_seconds{job=\"daily\"}"))
            .map(str::to_string)
    };
    let before = last_success(&env).expect("the series, before the prune");
    // The run finished as the tick's clock (started at 03:00:02) advanced: however slowly.
    let at: i64 = before
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a timestamp");
    assert!(
        (epoch("2025-01-01T03:00:02Z")..epoch("2025-01-01T04:00:00Z")).contains(&at),
        "{before}"
    );

    let out = env.ok(&["prune", "--older-than", "1d"]);
    assert!(out.starts_with("removed 2 runs"), "{out}");
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        0,
        "every run was pruned"
    );
    assert_eq!(last_success(&env), Some(before));

    env.ok(&["schedule", "rm", "daily"]);
    assert_eq!(last_success(&env), None);
}

/// PostgreSQL: `prune` holds a schedule's old runs when `schedule rm` of that schedule locks its
/// row and waits for those runs. Prune then must not wait for the schedule's row (to keep its
/// last success there): each would wait for the other, and the server would abort one of them
/// with "deadlock detected". The prune leaves that schedule's runs to the removal instead, and
/// still deletes the other schedules' runs, though a whole batch was the busy schedule's.
#[test]
fn a_prune_and_a_removal_of_the_same_schedule_never_deadlock() {
    if crate::common::Backend::current() != crate::common::Backend::Postgres {
        println!("skipped: PostgreSQL only (SQLite's write lock takes one writer at a time)");
        return;
    }
    let env = Env::init();
    let now = epoch("2026-07-02T00:00:00Z");
    env.add_at(
        Some("2026-06-01T00:00:00Z"),
        "old",
        &never_near("2026-06-01T00:00:00Z"),
        &[],
        "true",
    );
    env.add_at(
        Some("2026-06-01T00:00:00Z"),
        "other",
        &never_near("2026-06-01T00:00:00Z"),
        &[],
        "true",
    );
    // More than a batch (5,000) of the schedule to remove, made first, so picked first.
    insert_finished_runs(&env, "old", 5_001, now, 2 * 86_400);
    insert_finished_runs(&env, "other", 3, now, 86_400);

    let gate = env.path("gate");
    let prune = Bg::spawn_hooked(
        &env,
        "prune",
        &["--now", &utc(now), "prune", "--older-than", "1h"],
        &format!("prune-locked:wait={}", gate.display()),
    );
    let reached = env.path("gate.reached");
    wait_until(Duration::from_secs(60), "the prune to lock a batch", || {
        reached.exists()
    });
    let rm = Bg::spawn(&env, "rm", &["schedule", "rm", "old"]);
    wait_until(Duration::from_secs(60), "rm to wait for the runs", || {
        env.sql.query_i64(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        ) > 0
    });
    std::fs::write(&gate, "").expect("let the prune go on");
    let pruned = prune.finish(Duration::from_secs(60));
    assert!(pruned.status.success(), "{}", stderr(&pruned));
    assert!(
        stdout(&pruned).starts_with("removed 3 runs"),
        "the other schedule's runs: {}",
        stdout(&pruned)
    );
    let removed = rm.finish(Duration::from_secs(60));
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert!(stdout(&removed).contains("removed schedule old"));
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
}

/// On PostgreSQL, a prune passes over the runs that ran of a schedule another command is changing
/// at that moment (deleting them writes the schedule's last success and last run, and waiting for
/// its row could deadlock), and says how many it left: the next prune takes them. Its skipped
/// runs, which change nothing of the schedule, are deleted. The tick's hourly prune says so only
/// with -v (cron mails what a tick prints).
#[test]
fn a_prune_says_how_many_runs_it_left_of_a_schedule_being_changed() {
    if crate::common::Backend::current() != crate::common::Backend::Postgres {
        println!("skipped: PostgreSQL only (SQLite's write lock takes one writer at a time)");
        return;
    }
    let env = Env::init();
    env.add("busy", &[], "true");
    env.add("other", &[], "true");
    let now = real_now();
    insert_finished_runs(&env, "busy", 41, now, 2 * 86_400);
    insert_finished_runs(&env, "other", 3, now, 86_400);
    // One of busy's runs was skipped: it never ran.
    env.sql.exec(
        "DELETE FROM job_attempts WHERE run_id = (SELECT min(id) FROM job_runs r
             WHERE r.definition_id = (SELECT id FROM job_definitions WHERE name = 'busy'))",
        &[],
    );
    env.sql.exec(
        "UPDATE job_runs SET status = 'skipped', attempt = 0, started_at = NULL
         WHERE id = (SELECT min(id) FROM job_runs r
             WHERE r.definition_id = (SELECT id FROM job_definitions WHERE name = 'busy'))",
        &[],
    );

    // The prune holds its first batch, both schedules' runs; then another command starts
    // changing `busy` (as `schedule apply` does: its row locked in an open transaction).
    let gate = env.path("gate");
    let prune = Bg::spawn_hooked(
        &env,
        "prune",
        &["prune", "--older-than", "1h"],
        &format!("prune-locked:wait={}", gate.display()),
    );
    wait_until(Duration::from_secs(60), "the prune to lock a batch", || {
        env.path("gate.reached").exists()
    });
    let mut other_command = postgres::Client::connect(env.sql.location(), postgres::NoTls)
        .expect("connect to the test database");
    let mut changing = other_command.transaction().expect("begin");
    changing
        .execute(
            "SELECT id FROM job_definitions WHERE name = 'busy' FOR NO KEY UPDATE",
            &[],
        )
        .expect("lock busy");
    std::fs::write(&gate, "").expect("let the prune go on");
    let pruned = prune.finish(Duration::from_secs(60));
    assert!(pruned.status.success(), "{}", stderr(&pruned));
    let out = stdout(&pruned);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("removed 4 runs (3 attempts, 8 events) that finished before "),
        "{out}"
    );
    assert_eq!(
        lines[1],
        "left 40 runs of 1 schedule(s) that another command was changing; the next prune takes \
         them"
    );
    let runs_of = |name: &str| {
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = $1",
            &[&name],
        )
    };
    assert_eq!((runs_of("busy"), runs_of("other")), (40, 0));
    // A dry run takes no lock: it counts them among what a prune would remove.
    let out = env.ok(&["prune", "--older-than", "1h", "--dry-run"]);
    assert!(out.starts_with("would remove 40 runs "), "{out}");

    // The tick's hourly prune leaves them too: quiet, unless asked.
    let prune_turn_due = || {
        env.sql.exec(
            "UPDATE runner_state SET value = value - 7200 WHERE key = 'last_prune_at'",
            &[],
        )
    };
    let tick = |args: &[&str]| {
        let out = env
            .cmd()
            .args(args)
            .arg("tick")
            .env("RUNNER_RETENTION", "1h")
            .output()
            .expect("tick");
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    prune_turn_due();
    assert_eq!(tick(&[]), "", "a tick says nothing without -v");
    assert_eq!(runs_of("busy"), 40);
    prune_turn_due();
    let err = tick(&["-v"]);
    assert!(
        err.contains(
            "runner: automatic pruning left 40 runs of 1 schedule(s) that another command was \
             changing; the next prune takes them"
        ),
        "{err}"
    );

    // Done changing: the next prune takes them, and says nothing of runs left.
    changing.rollback().expect("rollback");
    let out = env.ok(&["prune", "--older-than", "1h"]);
    assert!(out.starts_with("removed 40 runs "), "{out}");
    assert!(!out.contains("left"), "{out}");
    assert_eq!(runs_of("busy"), 0);
}

/// The `runner_job_last_run_status` and `runner_job_last_success_timestamp_seconds` series of
/// `job`, as `metrics` prints them.
fn last_run_series(env: &Env, job: &str) -> Vec<String> {
    let status = format!("runner_job_last_run_status{{job=\"{job}\",");
    let success = format!("runner_job_last_success_timestamp_seconds{{job=\"{job}\"}}");
    env.ok(&["metrics"])
        .lines()
        .filter(|l| l.starts_with(&status) || l.starts_with(&success))
        .map(str::to_string)
        .collect()
}

/// Pruning a job's last run does not take its last-run status with it: a job that runs less
/// often than the retention (a yearly job, a monthly one) still reports how its last run ended,
/// so an alert on a dead last run keeps firing, on either backend. Skipped instants pruned later
/// never count as its last run; a run kept after the pruned ones is the last.
#[test]
fn a_pruned_last_run_stays_in_the_metrics() {
    let env = Env::init();
    let t0 = "2025-01-01T00:00:00Z";
    // `died` succeeds, then dies; `recovered` dies, then succeeds. `--catch-up none`: the
    // instants a late tick finds are skipped, not run.
    for (job, first) in [("died", "true"), ("recovered", "exit 1")] {
        env.add_at(
            Some(t0),
            job,
            "0 3 * * *",
            &["--max-attempts", "1", "--catch-up", "none"],
            first,
        );
    }
    env.tick_at("2025-01-01T03:00:02Z");
    for (job, then) in [("died", "exit 1"), ("recovered", "true")] {
        env.ok(&[
            "--now",
            "2025-01-01T04:00:00Z",
            "schedule",
            "edit",
            job,
            "--quiet",
            "--",
            then,
        ]);
    }
    env.tick_at("2025-01-02T03:00:02Z");
    let before = [
        last_run_series(&env, "died"),
        last_run_series(&env, "recovered"),
    ];
    assert!(
        before[0]
            .contains(&"runner_job_last_run_status{job=\"died\",status=\"dead\"} 1".to_string()),
        "{before:?}"
    );
    assert!(
        before[1].contains(
            &"runner_job_last_run_status{job=\"recovered\",status=\"succeeded\"} 1".to_string()
        ),
        "{before:?}"
    );
    assert_eq!(
        before.iter().map(Vec::len).collect::<Vec<_>>(),
        [4, 4],
        "{before:?}"
    );

    let out = env.ok(&["prune", "--older-than", "1d"]);
    assert!(out.starts_with("removed 4 runs"), "{out}");
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    let after = [
        last_run_series(&env, "died"),
        last_run_series(&env, "recovered"),
    ];
    assert_eq!(after, before, "every run was pruned");

    // A late tick skips the missed instants (Jan 3 to 10): kept, they are not the last run, and
    // pruned, they do not replace it.
    env.tick_at("2025-01-10T04:00:00Z");
    assert!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'skipped'",
            &[]
        ) >= 2
    );
    let skipped = [
        last_run_series(&env, "died"),
        last_run_series(&env, "recovered"),
    ];
    assert_eq!(skipped, before, "skipped runs kept");
    env.ok(&["prune", "--older-than", "1d"]);
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    let skipped = [
        last_run_series(&env, "died"),
        last_run_series(&env, "recovered"),
    ];
    assert_eq!(skipped, before, "skipped runs pruned");

    // A run kept that finished after the pruned ones is the last.
    env.ok(&[
        "--now",
        "2025-01-11T00:00:00Z",
        "schedule",
        "edit",
        "died",
        "--quiet",
        "--",
        "true",
    ]);
    env.ok(&["--now", "2025-01-11T00:00:00Z", "run", "died", "--wait"]);
    let series = last_run_series(&env, "died");
    assert!(
        series.contains(
            &"runner_job_last_run_status{job=\"died\",status=\"succeeded\"} 1".to_string()
        ),
        "{series:?}"
    );
    assert!(
        series.contains(&"runner_job_last_run_status{job=\"died\",status=\"dead\"} 0".to_string()),
        "{series:?}"
    );
    assert_ne!(series, before[0]);

    // The series go with the schedule.
    env.ok(&["schedule", "rm", "recovered"]);
    assert_eq!(last_run_series(&env, "recovered"), Vec::<String>::new());
}

/// A database from before schedules kept their last run pruned (SQLite schema version 14,
/// PostgreSQL 9) migrates to the version that does: `init` says so, the runs it holds still say
/// how the last one ended, and pruning them keeps it from then on.
#[test]
fn a_database_from_before_the_pruned_last_run_migrates_and_prune_keeps_it() {
    let env = Env::init();
    env.add("job", &["--max-attempts", "1"], "exit 1");
    env.run(&["--now", "2025-01-01T00:00:00Z", "run", "job", "--wait"]);
    let before = last_run_series(&env, "job");
    assert!(
        before.contains(&"runner_job_last_run_status{job=\"job\",status=\"dead\"} 1".to_string()),
        "{before:?}"
    );
    for undo in UNDO_TIMING_CHANGED
        .into_iter()
        .chain(UNDO_JOB_STOPPING)
        .chain(UNDO_PRUNED_LAST_RUN)
    {
        env.sql.exec(undo, &[]);
    }
    let (old, new) = match Backend::current() {
        Backend::Sqlite => {
            env.sql
                .sqlite()
                .execute_batch("PRAGMA user_version = 14")
                .expect("downgrade");
            (14, 17)
        }
        Backend::Postgres => {
            env.sql
                .exec("DELETE FROM runner_schema_version WHERE version >= 10", &[]);
            (9, 12)
        }
    };
    let out = env.ok(&["init"]);
    assert!(
        out.starts_with("migrated ")
            && out.contains(&format!(" from schema version {old} to {new}")),
        "{out}"
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_definitions
             WHERE pruned_last_finished_at IS NULL AND pruned_last_status IS NULL",
            &[]
        ),
        1
    );
    assert_eq!(last_run_series(&env, "job"), before);

    let out = env.ok(&["prune", "--older-than", "1d"]);
    assert!(out.starts_with("removed 1 run"), "{out}");
    assert_eq!(last_run_series(&env, "job"), before);
}

/// A tick with `RUNNER_RETENTION` set to `retention` (unset: `None`), which must succeed.
fn tick_with_retention(env: &Env, retention: Option<&str>) -> std::process::Output {
    let mut cmd = env.cmd();
    cmd.arg("tick");
    match retention {
        Some(r) => cmd.env("RUNNER_RETENTION", r),
        None => cmd.env_remove("RUNNER_RETENTION"),
    };
    let out = cmd.output().expect("tick");
    assert!(out.status.success(), "{}", stderr(&out));
    out
}
