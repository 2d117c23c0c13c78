//! `runner migrate --to URL|PATH [--history]`: schedules move with their cursors exactly, pending
//! runs move with their attempt counts and keys, nothing runs twice or is lost, and a refusal
//! changes nothing anywhere.
//!
//! Each test manages two databases: the source is the suite's backend (`env.sql`), the target
//! a second database, PostgreSQL (on `RUNNER_TEST_PG`; skipped with a note when it is unset) or
//! a SQLite file. Across the suite's two passes that is every pair of backends.

use crate::common::{
    add_finished_history, epoch, never, never_near, stderr, stdout, utc, Env, TestDb, Val,
};
use crate::sqlite_only;

/// A PostgreSQL database to migrate to, or `None` (the test says it was skipped).
fn postgres_target() -> Option<TestDb> {
    match std::env::var("RUNNER_TEST_PG") {
        Ok(server) if !server.is_empty() => Some(TestDb::postgres(&server)),
        _ => {
            println!("skipped: RUNNER_TEST_PG is unset, so there is no PostgreSQL to migrate to");
            None
        }
    }
}

fn sqlite_target(env: &Env) -> TestDb {
    TestDb::sqlite_file(env.path("target.db"))
}

/// `runner --db DB ARGS` (the flag beats the env's RUNNER_DB); must exit 0; returns stdout.
fn on(env: &Env, db: &TestDb, args: &[&str]) -> String {
    let out = env
        .cmd()
        .arg("--db")
        .arg(db.location())
        .args(args)
        .output()
        .expect("runner");
    assert!(
        out.status.success(),
        "runner --db {} {args:?}: exit {:?}\n{}{}",
        db.location(),
        out.status.code(),
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

const T0: &str = "2026-01-01T00:50:00Z";
const FIRST_TICK: &str = "2026-01-01T01:00:30Z";
const MIGRATE_AT: &str = "2026-01-01T01:01:00Z";
const LATER: &str = "2026-01-01T01:30:30Z";

/// The source's state before a migration: `every5` (every 5 minutes, catch-up all) ran 00:55 and
/// 01:00, its cursor at 01:00; `failing` failed its first attempt at 01:00 and waits to retry
/// (at most 10 minutes later); `doomed` went dead (the dead-runs counter is 1); `manual` has a
/// manual run pending.
fn source_with_cursors_and_pending_runs(env: &Env) {
    env.add_at(
        Some(T0),
        "every5",
        "*/5 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    env.add_at(
        Some(T0),
        "failing",
        "0 * * * *",
        &[
            "--max-attempts",
            "2",
            "--backoff-base",
            "10m",
            "--backoff-max",
            "10m",
        ],
        "exit 3",
    );
    env.add_at(
        Some(T0),
        "doomed",
        &never_near(T0),
        &["--max-attempts", "1"],
        "exit 1",
    );
    env.add_at(Some(T0), "manual", &never_near(T0), &[], "true");
    env.ok(&["--now", T0, "run", "doomed"]);
    env.tick_at(FIRST_TICK);
    env.ok(&["--now", FIRST_TICK, "run", "manual"]);
    assert_eq!(
        statuses(&env.sql),
        [
            ("doomed", "dead".to_string(), 1),
            ("every5", "succeeded".to_string(), 2),
            ("failing", "pending".to_string(), 1),
            ("manual", "pending".to_string(), 1),
        ]
        .map(|(j, s, n)| (j.to_string(), s, n))
    );
}

/// (job, status, runs), by job and status.
fn statuses(db: &TestDb) -> Vec<(String, String, i64)> {
    db.query_rows(
        "SELECT d.name, r.status, count(*) FROM job_runs r
         JOIN job_definitions d ON d.id = r.definition_id
         GROUP BY d.name, r.status ORDER BY d.name, r.status",
        &[],
    )
    .into_iter()
    .map(|row| (row[0].string(), row[1].string(), row[2].i64()))
    .collect()
}

/// Every column of a table but its id, the ids that point at other rows (which a migration
/// gives new values) and those in `except`, in an order both databases share: by schedule name,
/// then run key, then id. `runs` says which runs (an SQL condition on `r`).
fn carried(db: &TestDb, table: &str, runs: &str, except: &[&str]) -> Vec<Vec<Val>> {
    let columns: Vec<String> = db
        .columns(table)
        .into_iter()
        .filter(|c| !["id", "definition_id", "run_id"].contains(&c.as_str()))
        .filter(|c| !except.contains(&c.as_str()))
        .map(|c| format!("t.\"{c}\""))
        .collect();
    assert!(columns.len() > 3, "no columns of {table}");
    let columns = columns.join(", ");
    let sql = match table {
        "job_definitions" => format!("SELECT {columns} FROM job_definitions t ORDER BY t.name"),
        "job_runs" => format!(
            "SELECT {columns} FROM job_runs t JOIN job_runs r ON r.id = t.id
             WHERE {runs} ORDER BY t.idempotency_key"
        ),
        _ => format!(
            "SELECT {columns} FROM {table} t JOIN job_runs r ON r.id = t.run_id
             WHERE {runs} ORDER BY r.idempotency_key, t.id"
        ),
    };
    db.query_rows(&sql, &[])
}

/// Every row a migration carries, of the runs that `runs` selects.
fn carried_all(db: &TestDb, runs: &str) -> Vec<Vec<Vec<Val>>> {
    carried_all_but(db, runs, &[])
}

/// As `carried_all`, without the columns in `except`.
fn carried_all_but(db: &TestDb, runs: &str, except: &[&str]) -> Vec<Vec<Vec<Val>>> {
    ["job_definitions", "job_runs", "job_attempts", "job_events"]
        .map(|t| carried(db, t, runs, except))
        .to_vec()
}

/// The schedules' columns that say what pruning deleted: without `--history`, the finished runs
/// left behind are folded into them on the target (see `last_runs_move`).
const PRUNED_COLUMNS: [&str; 3] = [
    "pruned_success_at",
    "pruned_last_finished_at",
    "pruned_last_status",
];

/// Every job's `runner_job_last_success_timestamp_seconds` and `runner_job_last_run_status`
/// series in `db`.
fn last_runs(env: &Env, db: &TestDb) -> Vec<String> {
    on(env, db, &["metrics"])
        .lines()
        .filter(|l| {
            l.starts_with("runner_job_last_success_timestamp_seconds{")
                || l.starts_with("runner_job_last_run_status{")
        })
        .map(str::to_string)
        .collect()
}

/// How many rows each scheduled instant of `job` has (schedule runs only).
fn rows_per_instant(db: &TestDb, job: &str) -> Vec<(i64, i64)> {
    db.query_rows(
        "SELECT r.scheduled_for, count(*) FROM job_runs r
         JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = $1 AND r.trigger = 'schedule'
         GROUP BY r.scheduled_for ORDER BY r.scheduled_for",
        &[&job],
    )
    .into_iter()
    .map(|row| (row[0].i64(), row[1].i64()))
    .collect()
}

fn minutes(from: &str, to: &str, step: i64) -> Vec<i64> {
    (epoch(from)..=epoch(to))
        .step_by(step as usize * 60)
        .collect()
}

/// The main case: cursors and pending runs move exactly; the target's next tick materialises
/// exactly the instants the source had not (each once), runs the moved pending runs, and the
/// source, paused, runs nothing.
fn cursors_and_pending_runs_move_and_nothing_runs_twice(env: &Env, target: &TestDb) {
    source_with_cursors_and_pending_runs(env);
    // A pause with an end moves as it is; the source's must not end (below).
    env.ok(&[
        "--now", FIRST_TICK, "schedule", "pause", "doomed", "--for", "10m",
    ]);
    let pending = "r.status = 'pending'";
    let before = carried_all_but(&env.sql, pending, &PRUNED_COLUMNS);
    let metrics_before = last_runs(env, &env.sql);
    let keys = env.sql.query_strings(
        "SELECT idempotency_key FROM job_runs WHERE status = 'pending' ORDER BY idempotency_key",
        &[],
    );

    let out = env.ok(&["--now", MIGRATE_AT, "migrate", "--to", target.location()]);
    let shown = target.location();
    assert!(
        out.starts_with(&format!(
            "moved 4 schedules, 2 pending runs (with 1 attempt, 5 events) to {shown}; finished \
             runs stay behind (--history moves them)\n"
        )),
        "{out}"
    );
    assert!(out.contains("are now paused"), "{out}");

    // Every column of every schedule (cursor, revision, created_at, paused...) and of every
    // pending run, its attempt and its events arrived as they were; finished runs did not, but
    // each job's last success and last run did.
    assert_eq!(carried_all_but(target, "1 = 1", &PRUNED_COLUMNS), before);
    assert_eq!(last_runs(env, target), metrics_before);
    assert!(
        metrics_before
            .contains(&"runner_job_last_run_status{job=\"doomed\",status=\"dead\"} 1".to_string()),
        "{metrics_before:?}"
    );
    assert_eq!(
        target.query_strings(
            "SELECT idempotency_key FROM job_runs ORDER BY idempotency_key",
            &[]
        ),
        keys
    );

    // The source: every schedule paused, the moved runs cancelled, saying where they went.
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions WHERE paused = 0", &[]),
        0
    );
    assert_eq!(
        env.sql.query_strings(
            "SELECT error_detail FROM job_runs WHERE status = 'cancelled' ORDER BY id",
            &[]
        ),
        vec![format!("moved to {shown}"); 2]
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE kind = 'CANCELLED' AND detail LIKE '%moved_to%'",
            &[]
        ),
        2
    );
    // A cron line left on the old database runs nothing, also once a pause's end has passed:
    // the source's pauses have no end.
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_definitions WHERE paused_until IS NOT NULL",
            &[]
        ),
        0
    );
    let source_runs = env.sql.query_i64("SELECT count(*) FROM job_runs", &[]);
    env.tick_at(LATER);
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions WHERE paused = 0", &[]),
        0,
        "a schedule of the source resumed"
    );
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        source_runs
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status IN ('pending', 'running')",
            &[]
        ),
        0
    );

    // The target's tick: every instant after the source's cursor, each once; none before it.
    on(env, target, &["--now", LATER, "tick"]);
    let expected: Vec<(i64, i64)> = minutes("2026-01-01T01:05:00Z", "2026-01-01T01:30:00Z", 5)
        .into_iter()
        .map(|at| (at, 1))
        .collect();
    assert_eq!(rows_per_instant(target, "every5"), expected);
    // The retry ran its second (last) attempt there, under the same key; the manual run ran.
    assert_eq!(
        statuses(target),
        [
            ("every5", "succeeded", 6),
            ("failing", "dead", 1),
            ("manual", "succeeded", 1),
        ]
        .map(|(j, s, n)| (j.to_string(), s.to_string(), n))
    );
    assert_eq!(
        target.query_i64(
            "SELECT attempt FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = 'failing'",
            &[]
        ),
        2
    );
    // The dead-runs counters move with their schedules, even when the dead run stays behind;
    // the target counts its own from there.
    assert_eq!(dead_runs_total(target, "doomed"), 1);
    assert_eq!(dead_runs_total(target, "failing"), 1);
    assert_eq!(dead_runs_total(target, "every5"), 0);
}

/// A schedule's dead-runs counter (`runner_dead_runs_total{job}`).
fn dead_runs_total(db: &TestDb, job: &str) -> i64 {
    db.query_i64(
        "SELECT dead_runs_total FROM job_definitions WHERE name = $1",
        &[&job],
    )
}

#[test]
fn to_postgres_cursors_and_pending_runs_move_and_nothing_runs_twice() {
    let Some(target) = postgres_target() else {
        return;
    };
    let env = Env::init();
    cursors_and_pending_runs_move_and_nothing_runs_twice(&env, &target);
}

#[test]
fn to_sqlite_cursors_and_pending_runs_move_and_nothing_runs_twice() {
    let env = Env::init();
    let target = sqlite_target(&env);
    cursors_and_pending_runs_move_and_nothing_runs_twice(&env, &target);
}

/// `--history` moves every run with its attempts and events (and the schedules their dead-runs
/// counters, as without it).
fn history_moves(env: &Env, target: &TestDb) {
    // A schedule made first and removed: the source's ids start at 2, the target's at 1, so an
    // id carried over unmapped points at the wrong schedule.
    env.add("gap", &[], "true");
    source_with_cursors_and_pending_runs(env);
    env.ok(&["schedule", "rm", "gap"]);
    let before = carried_all(&env.sql, "1 = 1");
    let count =
        |db: &TestDb, table: &str| db.query_i64(&format!("SELECT count(*) FROM {table}"), &[]);
    let counts: Vec<i64> = ["job_runs", "job_attempts", "job_events"]
        .iter()
        .map(|t| count(&env.sql, t))
        .collect();
    assert_eq!(dead_runs_total(&env.sql, "doomed"), 1);

    let out = env.ok(&[
        "--now",
        MIGRATE_AT,
        "migrate",
        "--to",
        target.location(),
        "--history",
    ]);
    assert!(
        out.starts_with(&format!(
            "moved 4 schedules, 2 pending runs (and 3 finished runs, {} attempts, {} events) to {}",
            counts[1],
            counts[2],
            target.location()
        )),
        "{out}"
    );
    assert_eq!(carried_all(target, "1 = 1"), before);
    assert_eq!(
        ["job_runs", "job_attempts", "job_events"]
            .iter()
            .map(|t| count(target, t))
            .collect::<Vec<_>>(),
        counts
    );
    assert_eq!(dead_runs_total(target, "doomed"), 1);
    // Each attempt names its run's schedule by the target's id (`metrics` reads it).
    assert_eq!(
        target.query_i64(
            "SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
             WHERE a.definition_id IS DISTINCT FROM r.definition_id",
            &[]
        ),
        0
    );
    assert!(
        on(env, target, &["--now", MIGRATE_AT, "metrics"])
            .contains("runner_run_duration_seconds_count{job=\"doomed\"} 1\n"),
        "the dead run's attempt counted under its job"
    );
    // `history` on the target shows them: 5 runs, the dead one among them.
    let shown = on(env, target, &["history", "--json"]);
    let runs = crate::common::json(&shown);
    let runs = runs.as_array().expect("a list");
    assert_eq!(runs.len(), 5, "{shown}");
    assert!(
        runs.iter()
            .any(|r| r["job"] == "doomed" && r["status"] == "dead"),
        "{shown}"
    );

    // And the cursors still hold: the target's tick runs 01:05..01:30, each once, with the two
    // moved instants (00:55, 01:00) not again.
    on(env, target, &["--now", LATER, "tick"]);
    let expected: Vec<(i64, i64)> = minutes("2026-01-01T00:55:00Z", "2026-01-01T01:30:00Z", 5)
        .into_iter()
        .map(|at| (at, 1))
        .collect();
    assert_eq!(rows_per_instant(target, "every5"), expected);
}

#[test]
fn to_postgres_history_moves_runs_attempts_events_and_the_dead_counter() {
    let Some(target) = postgres_target() else {
        return;
    };
    let env = Env::init();
    history_moves(&env, &target);
}

#[test]
fn to_sqlite_history_moves_runs_attempts_events_and_the_dead_counter() {
    let env = Env::init();
    let target = sqlite_target(&env);
    history_moves(&env, &target);
}

/// Each job's last success and last run, as `metrics` reports them, move with its schedule,
/// with `history` or without: then the target holds none of the finished runs, and the
/// schedules' pruned columns carry what they said, whether the source kept the runs or had
/// pruned them (either may be the later). With `history` the columns move as they are.
fn last_runs_move(env: &Env, target: &TestDb, history: bool) {
    let run_at = |job: &str, at: &str, command: &str| {
        env.ok(&[
            "--now", at, "schedule", "edit", job, "--quiet", "--", command,
        ]);
        env.run(&["--now", at, "run", job, "--wait"]);
    };
    for job in ["yearly", "fading", "back", "forged"] {
        env.add_at(
            Some(T0),
            job,
            &never_near(T0),
            &["--max-attempts", "1"],
            "true",
        );
    }
    // Pruned: `yearly` died; `fading` succeeded; `back` died.
    run_at("yearly", "2026-01-02T00:00:00Z", "exit 1");
    run_at("fading", "2026-01-02T00:00:00Z", "true");
    run_at("back", "2026-01-02T00:00:00Z", "exit 1");
    let out = env.ok(&[
        "--now",
        "2026-02-01T00:00:00Z",
        "prune",
        "--older-than",
        "1d",
    ]);
    assert!(out.starts_with("removed 3 runs"), "{out}");
    // Kept, later: `fading` died, `back` succeeded; `forged` succeeded, before a pruned run
    // forged on it (a run of the same schedule another command held while a prune passed).
    run_at("fading", "2026-03-01T00:00:00Z", "exit 1");
    run_at("back", "2026-03-01T00:00:00Z", "true");
    run_at("forged", "2026-03-01T00:00:00Z", "true");
    env.sql.exec(
        &format!(
            "UPDATE job_definitions SET pruned_success_at = {}, pruned_last_finished_at = {},
                 pruned_last_status = 'cancelled'
             WHERE name = 'forged'",
            epoch("2026-02-01T00:00:00Z"),
            epoch("2026-04-01T00:00:00Z")
        ),
        &[],
    );
    let before = last_runs(env, &env.sql);
    for (job, status) in [
        ("yearly", "dead"),
        ("fading", "dead"),
        ("back", "succeeded"),
        ("forged", "cancelled"),
    ] {
        let line = format!("runner_job_last_run_status{{job=\"{job}\",status=\"{status}\"}} 1");
        assert!(before.contains(&line), "{line} in {before:?}");
    }
    assert_eq!(
        before
            .iter()
            .filter(|l| l.starts_with("runner_job_last_success_timestamp_seconds"))
            .count(),
        3,
        "{before:?}"
    );
    let columns = carried_all(&env.sql, "1 = 1");

    let mut args = vec![
        "--now",
        "2026-04-02T00:00:00Z",
        "migrate",
        "--to",
        target.location(),
    ];
    if history {
        args.push("--history");
    }
    env.ok(&args);
    assert_eq!(last_runs(env, target), before);
    if history {
        assert_eq!(carried_all(target, "1 = 1"), columns);
    } else {
        assert_eq!(target.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
    }
}

#[test]
fn to_postgres_last_runs_move_without_history() {
    let Some(target) = postgres_target() else {
        return;
    };
    last_runs_move(&Env::init(), &target, false);
}

#[test]
fn to_sqlite_last_runs_move_without_history() {
    let env = Env::init();
    let target = sqlite_target(&env);
    last_runs_move(&env, &target, false);
}

#[test]
fn to_postgres_last_runs_move_with_history() {
    let Some(target) = postgres_target() else {
        return;
    };
    last_runs_move(&Env::init(), &target, true);
}

#[test]
fn to_sqlite_last_runs_move_with_history() {
    let env = Env::init();
    let target = sqlite_target(&env);
    last_runs_move(&env, &target, true);
}

/// A history larger than a batch of the migration (500 runs, read and written with their attempts
/// and events before the next is read, so that memory stays bounded: all at once, 610,000 runs
/// took `migrate` to 1 GB) moves whole: every run with its own attempts and events, under its
/// own schedule, whatever batch it fell in.
fn history_of_many_batches_moves_whole(env: &Env, target: &TestDb) {
    env.add("gap", &[], "true"); // the source's schedule ids start at 2, the target's at 1
    for name in ["bulk-0", "bulk-1", "bulk-2"] {
        env.add(name, &[], "true");
    }
    env.ok(&["schedule", "rm", "gap"]);
    let runs: i64 = 1_234;
    env.sql.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
             created_at, finished_at, attempt)
         SELECT d.id, 'manual', 1600000000 + n.i, 'succeeded', 1600000000 + n.i, d.command,
             d.max_attempts, d.timeout_secs, d.backoff_base_secs, d.backoff_max_secs,
             d.name || '@bulk:' || n.i, 1600000000 + n.i, 1600000001 + n.i, 1
         FROM n JOIN job_definitions d ON d.name = 'bulk-' || (n.i % 3)",
        &[&runs],
    );
    env.sql.exec(
        "INSERT INTO job_attempts (run_id, definition_id, attempt, owner, host, runner_pid,
             lease_token, started_at, finished_at, duration_ms, outcome)
         SELECT id, definition_id, 1, 'o', 'h', 1, idempotency_key, created_at, finished_at,
             1000, 'succeeded'
         FROM job_runs",
        &[],
    );
    for kind in ["ENQUEUED", "SUCCEEDED"] {
        env.sql.exec(
            "INSERT INTO job_events (run_id, at, kind, actor, detail)
             SELECT id, created_at, $1, 'test', '{\"key\":\"' || idempotency_key || '\"}'
             FROM job_runs",
            &[&kind],
        );
    }
    let before = carried_all(&env.sql, "1 = 1");

    let out = env.ok(&["migrate", "--to", target.location(), "--history"]);
    assert!(
        out.starts_with(&format!(
            "moved 3 schedules, 0 pending runs (and 1,234 finished runs, 1,234 attempts, 2,468 \
             events) to {}",
            target.location()
        )),
        "{out}"
    );
    assert_eq!(carried_all(target, "1 = 1"), before);
    // Each row points at its own run and schedule in the target: the key each carries is its
    // run's, and the run's key names its schedule.
    let misplaced = |sql: &str| target.query_i64(sql, &[]);
    assert_eq!(
        misplaced(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE r.idempotency_key NOT LIKE d.name || '@bulk:%'"
        ),
        0
    );
    assert_eq!(
        misplaced(
            "SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
             WHERE a.definition_id <> r.definition_id OR a.lease_token <> r.idempotency_key"
        ),
        0
    );
    assert_eq!(
        misplaced(
            "SELECT count(*) FROM job_events e JOIN job_runs r ON r.id = e.run_id
             WHERE e.detail <> '{\"key\":\"' || r.idempotency_key || '\"}'"
        ),
        0
    );
}

#[test]
fn to_postgres_history_of_many_batches_moves_whole() {
    let Some(target) = postgres_target() else {
        return;
    };
    let env = Env::init();
    history_of_many_batches_moves_whole(&env, &target);
}

#[test]
fn to_sqlite_history_of_many_batches_moves_whole() {
    let env = Env::init();
    let target = sqlite_target(&env);
    history_of_many_batches_moves_whole(&env, &target);
}

/// `migrate --history` holds a batch at a time, not the history: 100,000 runs with an event each
/// move under a 64 MiB address-space limit (read all at once, as before c43a503, they do not:
/// 610,000 runs took 1 GB). SQLite to SQLite: a single-threaded process, whose address space is
/// about what it uses.
#[test]
fn a_long_history_migrates_in_little_memory() {
    sqlite_only!("an address-space limit on a process with no threads");
    let env = Env::init();
    env.add("big", &[], "true");
    add_finished_history(&env, "big", 100_000);
    let target = sqlite_target(&env);
    let out = env.ok_under_ulimit(
        "-v 65536",
        &["migrate", "--to", target.location(), "--history"],
    );
    assert!(
        stdout(&out).starts_with(
            "moved 1 schedule, 0 pending runs (and 100,000 finished runs, 0 attempts, 100,000 events)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        target.query_i64("SELECT count(*) FROM job_events", &[]),
        100_000
    );
}

/// Refusals change nothing in either database: a running run in the source (a tick at work), a
/// schedule name the target already has, the source itself as target.
fn refusals_change_nothing(env: &Env, target: &TestDb) {
    source_with_cursors_and_pending_runs(env);

    // A name clash: the target keeps its own `every5`, and nothing else arrives.
    on(
        env,
        target,
        &[
            "schedule",
            "add",
            "every5",
            "--cron",
            &never(),
            "--",
            "true",
        ],
    );
    on(
        env,
        target,
        &[
            "schedule",
            "add",
            "manual",
            "--cron",
            &never(),
            "--",
            "true",
        ],
    );
    let (source_before, target_before) = (env.sql.snapshot(), target.snapshot());
    let err = env.fails(
        2,
        &["--now", MIGRATE_AT, "migrate", "--to", target.location()],
    );
    assert!(
        err.contains("already has schedules named every5, manual"),
        "{err}"
    );
    assert!(err.contains("nothing was moved"), "{err}");
    assert_eq!(env.sql.snapshot(), source_before);
    assert_eq!(target.snapshot(), target_before);

    // The source as its own target.
    let err = env.fails(2, &["migrate", "--to", env.sql.location()]);
    assert!(err.contains("names the database migrated from"), "{err}");
    assert_eq!(env.sql.snapshot(), source_before);

    // A running run (forged: a tick holds it).
    on(env, target, &["schedule", "rm", "every5"]);
    on(env, target, &["schedule", "rm", "manual"]);
    let target_before = target.snapshot();
    let run = env.sql.query_i64(
        "SELECT r.id FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = 'manual'",
        &[],
    );
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', owner = 'other-host:1', lease_token = 'forged',
             lease_expires_at = $1, heartbeat_at = $2 WHERE id = $3",
        &[&(epoch(MIGRATE_AT) + 600), &epoch(MIGRATE_AT), &run],
    );
    let source_before = env.sql.snapshot();
    let err = env.fails(
        2,
        &["--now", MIGRATE_AT, "migrate", "--to", target.location()],
    );
    assert!(err.contains(&format!("has running runs ({run})")), "{err}");
    assert!(err.contains("nothing was moved or changed"), "{err}");
    assert_eq!(env.sql.snapshot(), source_before);
    assert_eq!(target.snapshot(), target_before);

    // Its lease expired (the tick was killed): no tick is at work, and waiting would never end.
    let err = env.fails(
        2,
        &[
            "--now",
            &utc(epoch(MIGRATE_AT) + 700),
            "migrate",
            "--to",
            target.location(),
        ],
    );
    assert!(
        err.contains(&format!(
            "has running runs whose leases have expired ({run})"
        )) && err.contains("the tick that ran them stopped without recording them; nothing")
            && err.contains("Run `runner tick` once"),
        "{err}"
    );
    assert_eq!(env.sql.snapshot(), source_before);
    assert_eq!(target.snapshot(), target_before);
}

#[test]
fn to_postgres_refusals_change_nothing() {
    let Some(target) = postgres_target() else {
        return;
    };
    let env = Env::init();
    refusals_change_nothing(&env, &target);
}

#[test]
fn to_sqlite_refusals_change_nothing() {
    let env = Env::init();
    let target = sqlite_target(&env);
    refusals_change_nothing(&env, &target);
}

/// A refusal before anything was written creates no target database either.
#[test]
fn a_refused_migration_creates_no_target_file() {
    let env = Env::init();
    env.add("manual", &[], "true");
    let run = env.enqueue("manual");
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', owner = 'other-host:1', lease_token = 'forged',
             lease_expires_at = $1 WHERE id = $2",
        &[&(crate::common::real_now() + 600), &run],
    );
    let target = sqlite_target(&env);
    let err = env.fails(2, &["migrate", "--to", target.location()]);
    assert!(err.contains("a tick is at work"), "{err}");
    assert!(!target.created(), "the refused target was created");
}

/// A target given as a relative path is named by its absolute path: in the moved runs' detail,
/// which `history` and `show` read later from any directory, and in the advice for cron, whose
/// working directory is another. A target that cannot be used is named by its flag, `--to`
/// (the advice the store gives for a bad database speaks of `--db`, here the source).
#[test]
fn the_target_is_named_absolutely_and_by_its_flag() {
    let env = Env::init();
    env.add("manual", &[], "true");
    env.enqueue("manual");

    let other_app = env.path("other-app.db");
    let other = TestDb::sqlite_file(other_app.clone());
    other.exec("CREATE TABLE notes (body TEXT)", &[]);
    let before = env.sql.snapshot();
    let err = env.fails(4, &["migrate", "--to", "other-app.db"]);
    assert!(
        err.contains(&format!(
            "{} is a SQLite database but not a runner database; give --to another database",
            other_app.display()
        )),
        "{err}"
    );
    assert!(!err.contains("--db"), "{err}");
    assert_eq!(env.sql.snapshot(), before);

    let out = env.ok(&["migrate", "--to", "moved.db"]);
    let absolute = env.path("moved.db").display().to_string();
    assert!(
        out.contains(&format!(
            "point `runner tick` (cron's RUNNER_DB or --db) at {absolute}"
        )),
        "{out}"
    );
    assert_eq!(
        env.sql.query_strings(
            "SELECT error_detail FROM job_runs WHERE status = 'cancelled'",
            &[]
        ),
        vec![format!("moved to {absolute}")]
    );
}

/// A PostgreSQL target that is read-only (here `default_transaction_read_only`, as on a
/// standby) is refused with exit 4, and the advice names it by its flag: `--to`, not `--db`
/// (the source), whether the failing write creates its schema or moves the schedules.
#[test]
fn to_postgres_a_read_only_target_is_named_by_its_flag() {
    let (Some(fresh), Some(with_schema)) = (postgres_target(), postgres_target()) else {
        return;
    };
    let env = Env::init();
    env.add("manual", &[], "true");
    on(&env, &with_schema, &["init"]);
    for target in [&fresh, &with_schema] {
        target.exec(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = on',
                 current_database()); END $$",
            &[],
        );
        let before = env.sql.snapshot();
        let err = env.fails(4, &["migrate", "--to", target.location()]);
        assert!(err.contains("is read-only"), "{err}");
        assert!(err.contains("give --to the primary server"), "{err}");
        assert!(!err.contains("--db"), "{err}");
        assert_eq!(env.sql.snapshot(), before);
    }
}

/// The target committed, then the source failed before its own commit (`RUNNER_TEST_HOOK`
/// point `migrated`, after the target's commit): with `fail`, exit 1 and the message that both
/// databases hold the schedules and what to do; with `kill`, the process dies there. Either
/// way nothing is lost: the target holds every schedule, the source is exactly as it was (its
/// schedules unpaused, its pending runs pending), and migrating again to that target is refused
/// by the name clash, changing nothing.
fn a_source_failing_after_the_target_committed_loses_nothing(
    env: &Env,
    killed: &TestDb,
    failed: &TestDb,
) {
    source_with_cursors_and_pending_runs(env);
    let source_before = env.sql.snapshot();
    let migrate = |target: &TestDb, hook: &str| {
        env.cmd()
            .env("RUNNER_TEST_HOOK", hook)
            .args(["--now", MIGRATE_AT, "migrate", "--to", target.location()])
            .output()
            .expect("runner migrate")
    };
    let moved = |target: &TestDb| {
        target.query_strings("SELECT name FROM job_definitions ORDER BY name", &[])
    };
    let all = ["doomed", "every5", "failing", "manual"];

    let out = migrate(killed, "migrated:kill");
    assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));
    assert_eq!(moved(killed), all);
    assert_eq!(env.sql.snapshot(), source_before, "the source changed");

    let out = migrate(failed, "migrated:fail");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(stdout(&out), "", "no summary of a move that did not finish");
    for said in [
        format!("the schedules were written to {}", failed.location()),
        "but pausing them in".to_string(),
        "Both databases now hold them: stop ticking".to_string(),
        "schedule pause NAME".to_string(),
    ] {
        assert!(err.contains(&said), "{said:?} missing: {err}");
    }
    assert_eq!(moved(failed), all);
    assert_eq!(
        statuses(failed),
        statuses(&env.sql)
            .into_iter()
            .filter(|(_, status, _)| status == "pending")
            .collect::<Vec<_>>(),
        "the pending runs arrived"
    );
    assert_eq!(env.sql.snapshot(), source_before, "the source changed");
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions WHERE paused = 0", &[]),
        4,
        "the source's schedules stay unpaused"
    );

    // Migrating again is refused by name: nothing changes on either side.
    let target_before = failed.snapshot();
    let err = env.fails(
        2,
        &["--now", MIGRATE_AT, "migrate", "--to", failed.location()],
    );
    assert!(err.contains("already has schedules named"), "{err}");
    assert!(err.contains("nothing was moved or changed"), "{err}");
    assert_eq!(env.sql.snapshot(), source_before);
    assert_eq!(failed.snapshot(), target_before);
}

#[test]
fn to_postgres_a_source_failing_after_the_target_committed_loses_nothing() {
    let (Some(killed), Some(failed)) = (postgres_target(), postgres_target()) else {
        return;
    };
    let env = Env::init();
    a_source_failing_after_the_target_committed_loses_nothing(&env, &killed, &failed);
}

#[test]
fn to_sqlite_a_source_failing_after_the_target_committed_loses_nothing() {
    let env = Env::init();
    let killed = TestDb::sqlite_file(env.path("killed.db"));
    let failed = sqlite_target(&env);
    a_source_failing_after_the_target_committed_loses_nothing(&env, &killed, &failed);
}

/// The files in the test's directory, sorted: a refused target must create none.
fn files_in(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `--to` is checked as `--db` is, by the same check: a value that names no database is bad
/// input (exit 2) before anything is opened or created. (`--to ''` exited 4, "cannot create
/// database : No such file or directory".)
#[test]
fn a_target_that_names_no_database_is_refused_as_bad_input() {
    let env = Env::init();
    env.add("manual", &[], "true");
    let (before, files) = (env.sql.snapshot(), files_in(&env));
    for (target, says) in [
        ("", "an empty value names no database"),
        (":memory:", "in-memory database"),
        ("postgres:/db.example.com/runner", "postgres://"),
    ] {
        let err = env.fails(2, &["migrate", "--to", target]);
        assert!(err.contains(says), "--to {target:?}: {err}");
        assert!(err.contains("--to"), "--to {target:?}: {err}");
        assert_eq!(env.sql.snapshot(), before, "--to {target:?}");
        assert_eq!(files_in(&env), files, "--to {target:?} created a file");
    }
}
