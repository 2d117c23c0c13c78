//! Batched writes keep their per-item guarantees: schedules materialised many to a transaction
//! still get exactly one run per instant each, however many ticks race, and one schedule whose
//! write fails is reported and left for the next tick without taking the others down with it.

use std::process::Stdio;

use std::time::Duration;

use super::common::{status_of, stderr, wait_until, Backend, Env, BIN};
use crate::sqlite_only;

/// 2026-01-01T00:00:00Z; the schedules below were handled through the minute before.
const MIDNIGHT: i64 = 1_767_225_600;

/// `n` every-minute schedules `job-1`..`job-n`, handled through 23:59:00, due at 00:00:00.
/// Each of the `n` schedules of `due_schedules` has its one run at midnight, and no other.
fn assert_each_materialised_once(env: &Env, n: i64) {
    assert_eq!(
        env.sql.query_i64(
            &format!(
                "SELECT count(DISTINCT definition_id) FROM job_runs WHERE scheduled_for = {MIDNIGHT}"
            ),
            &[]
        ),
        n
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), n);
}

fn due_schedules(env: &Env, n: i64) {
    env.sql.exec("WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < $1)
             INSERT INTO job_definitions (name, cron, timezone, command, materialized_through,
                 next_fire_at, created_at, updated_at)
             SELECT 'job-' || i, '* * * * *', 'UTC', 'true', $2 - 60, $2, $2 - 60, $2 - 60 FROM seq", &[&n, &MIDNIGHT]);
}

#[test]
fn racing_ticks_materialise_many_batches_once_each() {
    let env = Env::init();
    // More than two batches' worth.
    let n = 1_234;
    due_schedules(&env, n);
    let ticks: Vec<_> = (0..3)
        .map(|_| {
            env.cmd()
                .args(["--now", "2026-01-01T00:00:01Z", "tick", "--max-tick", "0s"])
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn tick")
        })
        .collect();
    for tick in ticks {
        let out = tick.wait_with_output().expect("wait");
        assert!(out.status.success(), "tick failed: {}", stderr(&out));
    }
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), n);
    assert_eq!(
        env.sql.query_i64(
            &format!(
            "SELECT count(DISTINCT definition_id) FROM job_runs WHERE scheduled_for = {MIDNIGHT}"
        ),
            &[]
        ),
        n
    );
    // Every cursor moved to the tick's time: 00:00:01 by `--now`, seconds later when a slow
    // machine commits a later batch after the `--now` clock moved on (it advances in real time),
    // and never as far as the next instant (00:01), which must still be materialised.
    assert_eq!(
        env.sql.query_i64(
            &format!(
                "SELECT count(*) FROM job_definitions
                 WHERE materialized_through >= {MIDNIGHT} + 1 AND materialized_through < {MIDNIGHT} + 60"
            ),
            &[]
        ),
        n
    );
    // One ENQUEUED event per run, none for the ticks that lost the race.
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE kind = 'ENQUEUED'",
            &[]
        ),
        n
    );
}

#[test]
fn a_schedule_whose_write_fails_fails_alone_and_its_instant_waits() {
    let env = Env::init();
    due_schedules(&env, 3);
    // Forged: inserting a run of job-2 fails (as a full disk or a damaged index might). On
    // PostgreSQL the batch's runs are one statement, so this also checks that the statement's
    // failure does not take job-1 and job-3 with it.
    let (refuse, allow): (&[&str], &str) = match Backend::current() {
        Backend::Sqlite => (
            &["CREATE TRIGGER refuse_job_2 BEFORE INSERT ON job_runs
               WHEN NEW.definition_id = (SELECT id FROM job_definitions WHERE name = 'job-2')
               BEGIN SELECT RAISE(ABORT, 'forged failure'); END"],
            "DROP TRIGGER refuse_job_2",
        ),
        Backend::Postgres => (
            &[
                "CREATE FUNCTION refuse_job_2() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF NEW.definition_id = (SELECT id FROM job_definitions WHERE name = 'job-2') THEN
                         RAISE EXCEPTION 'forged failure';
                     END IF;
                     RETURN NEW;
                 END $$",
                "CREATE TRIGGER refuse_job_2 BEFORE INSERT ON job_runs
                 FOR EACH ROW EXECUTE FUNCTION refuse_job_2()",
            ],
            "DROP TRIGGER refuse_job_2 ON job_runs",
        ),
    };
    for sql in refuse {
        env.sql.exec(sql, &[]);
    }
    let out = env.run(&["--now", "2026-01-01T00:00:30Z", "tick", "--max-tick", "0s"]);
    assert!(!out.status.success(), "a runner error is reported");
    let err = stderr(&out);
    assert!(
        err.contains("schedule job-2") && err.contains("forged failure"),
        "{err}"
    );
    assert!(!err.contains("job-1") && !err.contains("job-3"), "{err}");
    let runs_of = |name: &str| {
        env.sql.query_i64(
            &format!(
                "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = '{name}' AND r.scheduled_for = {MIDNIGHT}"
            ),
            &[],
        )
    };
    assert_eq!(
        (runs_of("job-1"), runs_of("job-2"), runs_of("job-3")),
        (1, 0, 1)
    );
    // job-2's cursor did not move: the instant is not lost, the next tick materialises it.
    assert_eq!(
        env.sql.query_i64(
            "SELECT materialized_through FROM job_definitions WHERE name = 'job-2'",
            &[]
        ),
        MIDNIGHT - 60
    );
    env.sql.exec(allow, &[]);
    env.ok(&["--now", "2026-01-01T00:00:40Z", "tick", "--max-tick", "0s"]);
    assert_eq!(
        (runs_of("job-1"), runs_of("job-2"), runs_of("job-3")),
        (1, 1, 1)
    );
}

/// With more due schedules than one batch, a tick reads the next batch while it writes one (on
/// SQLite, on a second connection). A schedule whose write fails stays due, yet is reported once
/// and tried once, whether it was in the first batch or a later one, and the others all
/// materialise once.
#[test]
fn failing_schedules_among_many_batches_are_reported_once_each() {
    let env = Env::init();
    let n = 1_234;
    due_schedules(&env, n);
    let refused = "(SELECT id FROM job_definitions WHERE name IN ('job-2', 'job-1100'))";
    let refuse: Vec<String> = match Backend::current() {
        Backend::Sqlite => vec![format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON job_runs
             WHEN NEW.definition_id IN {refused}
             BEGIN SELECT RAISE(ABORT, 'forged failure'); END"
        )],
        Backend::Postgres => vec![
            format!(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF NEW.definition_id IN {refused} THEN
                         RAISE EXCEPTION 'forged failure';
                     END IF;
                     RETURN NEW;
                 END $$"
            ),
            "CREATE TRIGGER refuse BEFORE INSERT ON job_runs
             FOR EACH ROW EXECUTE FUNCTION refuse()"
                .to_string(),
        ],
    };
    for sql in &refuse {
        env.sql.exec(sql, &[]);
    }
    let out = env.run(&["--now", "2026-01-01T00:00:30Z", "tick", "--max-tick", "0s"]);
    assert!(!out.status.success(), "a runner error is reported");
    let err = stderr(&out);
    for name in ["job-2", "job-1100"] {
        let reported = err
            .lines()
            .filter(|l| l.contains(&format!("schedule {name}:")))
            .count();
        assert_eq!(reported, 1, "{name} reported {reported} times: {err}");
    }
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        n - 2
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE kind = 'ENQUEUED'",
            &[]
        ),
        n - 2
    );
    assert_eq!(
        env.sql.query_i64(
            &format!(
                "SELECT count(*) FROM job_definitions WHERE materialized_through = {MIDNIGHT} - 60"
            ),
            &[]
        ),
        2,
        "the failing schedules' instant waits for the next tick"
    );
}

/// Should the second connection not open (PostgreSQL at its connection limit, say), the tick
/// says so and reads the due schedules on its own connection: each still materialised once.
#[test]
fn without_a_second_connection_the_due_schedules_are_read_on_the_first() {
    let env = Env::init();
    let n = 1_234;
    due_schedules(&env, n);
    let out = env
        .cmd()
        .args(["--now", "2026-01-01T00:00:30Z", "tick", "--max-tick", "0s"])
        .env("RUNNER_TEST_HOOK", "due-reader:fail")
        .output()
        .expect("tick");
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("cannot open a second connection").count(),
        1,
        "{err}"
    );
    assert_each_materialised_once(&env, n);
}

/// `runner ARGS` on `env`'s database under `prlimit --nproc=1`: no thread and no process to be
/// had. As `nobody` (through setpriv, the database handed over) when the tests run as root, whom
/// the limit does not bind. `None`, with a note, where util-linux's tools are missing.
fn without_threads(env: &Env, args: &[&str]) -> Option<std::process::Output> {
    let tools = ["/usr/bin/prlimit", "/usr/bin/setpriv"];
    if tools
        .iter()
        .any(|tool| !std::path::Path::new(tool).exists())
    {
        println!("without threads: needs prlimit and setpriv (util-linux): skipped");
        return None;
    }
    let mut cmd = if nix::unistd::Uid::effective().is_root() {
        for path in [env.dir.path(), env.db.as_path()] {
            std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown");
        }
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "prlimit",
        ]);
        cmd
    } else {
        std::process::Command::new("prlimit")
    };
    cmd.args(["--nproc=1", "--", BIN])
        .args(args)
        .env("RUNNER_DB", &env.db)
        .env("HOME", env.dir.path())
        .current_dir(env.dir.path());
    Some(cmd.output().expect("runner under prlimit"))
}

/// With no thread to be had (a process limit reached), a tick reads the due schedules on its own
/// connection instead of a second one's thread: each is still materialised once, and the tick
/// neither panics nor fails.
#[test]
fn without_a_thread_to_be_had_the_due_schedules_are_read_on_the_tick_itself() {
    sqlite_only!("runs the binary on the database file as another user");
    let env = Env::init();
    let n = 1_234;
    due_schedules(&env, n);
    let args = ["--now", "2026-01-01T00:00:30Z", "tick", "--max-tick", "0s"];
    let Some(out) = without_threads(&env, &args) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert_each_materialised_once(&env, n);
}

/// Nor does a tick that cannot start its spawning helpers, or its jobs: each run it claimed is
/// recorded as a failed spawn (`SPAWN:OTHER`), retried by its policy.
#[test]
fn without_a_thread_or_process_to_be_had_a_tick_records_failed_spawns() {
    sqlite_only!("runs the binary on the database file as another user");
    let env = Env::init();
    env.add(
        "a",
        &["--overlap", "allow", "--backoff-base", "10m"],
        "true",
    );
    let runs = [env.enqueue("a"), env.enqueue("a")];
    let Some(out) = without_threads(&env, &["tick", "--concurrency", "2"]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    for run in runs {
        assert_eq!(status_of(&env, run), "pending", "run {run} is retried");
        assert_eq!(
            env.sql.query_strings(
                "SELECT error_code FROM job_attempts WHERE run_id = $1",
                &[&run]
            ),
            vec!["SPAWN:OTHER".to_string()]
        );
    }
}

/// A supervisor's round records the ends of its jobs and claims the next runs in one
/// transaction; should the claim fail, the ends are still recorded, on their own.
#[test]
fn a_claim_that_fails_does_not_take_the_ends_before_it_with_it() {
    sqlite_only!("forges the failure with a SQLite trigger");
    let env = Env::init();
    env.add("a", &["--overlap", "allow"], "true");
    let first = env.enqueue("a");
    let second = env.enqueue("a");
    // Forged: once a run has succeeded, claiming fails (as a full disk might).
    env.sql
        .sqlite()
        .execute_batch(
            "CREATE TRIGGER refuse_claims BEFORE UPDATE OF status ON job_runs
             WHEN NEW.status = 'running' AND EXISTS (SELECT 1 FROM job_runs WHERE status = 'succeeded')
             BEGIN SELECT RAISE(ABORT, 'forged claim failure'); END;",
        )
        .expect("trigger");
    // One slot: the first run executes, and its end comes with the claim of the second.
    let out = env.run(&["tick", "--concurrency", "1"]);
    assert!(!out.status.success(), "a runner error is reported");
    let err = stderr(&out);
    assert!(err.contains("forged claim failure"), "{err}");
    assert!(!err.contains("recording attempt"), "{err}");
    assert_eq!(status_of(&env, first), "succeeded");
    let open_attempts = env.sql.query_i64(
        "SELECT count(*) FROM job_attempts WHERE run_id = $1 AND finished_at IS NULL",
        &[&first],
    );
    assert_eq!(open_attempts, 0, "the first run's attempt is closed");
    assert_eq!(status_of(&env, second), "pending");
    env.sql
        .sqlite()
        .execute_batch("DROP TRIGGER refuse_claims")
        .expect("drop trigger");
    env.tick(&[]);
    assert_eq!(status_of(&env, second), "succeeded");
}

/// A batch of schedules is materialised in its own transaction, on either backend, not by the
/// per-schedule fallback of `Store::materialize_batch`: that fallback makes the same runs, a
/// transaction each, so a broken batch would pass the tests above, only slower. Each schedule
/// keeps its own compare-and-swap: the same batch again changes nothing.
#[test]
fn a_batch_of_schedules_materialises_in_one_transaction_each_once() {
    use runner::model::{Actor, NewRun};
    use runner::store::{CursorMove, Location, Materialization, OpenMode, RowLocks};

    let env = Env::init();
    due_schedules(&env, 3);
    let mut store = runner::store::open(&Location::parse(env.sql.location()), OpenMode::MustExist)
        .expect("open the store");
    let actor = Actor {
        owner: "test:1".to_string(),
        host: "test".to_string(),
        pid: 1,
        start_time: None,
    };
    let batch = || -> Vec<Materialization> {
        (1..=3)
            .map(|i| {
                let name = format!("job-{i}");
                let definition_id = env.sql.query_i64(
                    "SELECT id FROM job_definitions WHERE name = $1",
                    &[&name.as_str()],
                );
                Materialization {
                    cursor: CursorMove {
                        definition_id,
                        expected_through: MIDNIGHT - 60,
                        expected_revision: 0,
                        new_through: MIDNIGHT + 1,
                        next_fire_at: Some(MIDNIGHT + 60),
                    },
                    plan: Box::new(move |running| {
                        assert_eq!(running, None, "nothing of {name} is running");
                        vec![NewRun::scheduled(&name, MIDNIGHT, None)]
                    }),
                }
            })
            .collect()
    };
    let inserted = store
        .materialize_together(&mut batch(), MIDNIGHT + 1, &actor, RowLocks::Wait)
        .expect("the batch's own transaction");
    assert_eq!(inserted, vec![Some(1); 3]);
    let again = store
        .materialize_together(&mut batch(), MIDNIGHT + 2, &actor, RowLocks::Wait)
        .expect("the batch's own transaction");
    assert_eq!(again, vec![Some(0); 3]);
    let count = |sql: &str| env.sql.query_i64(sql, &[&MIDNIGHT]);
    assert_eq!(
        count("SELECT count(*) FROM job_runs WHERE scheduled_for = $1"),
        3
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM job_events e JOIN job_runs r ON r.id = e.run_id
               WHERE r.scheduled_for = $1 AND e.kind = 'ENQUEUED'"
        ),
        3
    );
}

/// Each schedule's one run at midnight, by name: which of `due_schedules`' schedules have one.
fn materialised_names(env: &Env) -> Vec<String> {
    env.sql.query_strings(
        "SELECT d.name FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         ORDER BY d.id",
        &[],
    )
}

/// PostgreSQL: another session (a hung peer, an open `psql`) holds the rows of two due
/// schedules, one in each batch, through a tick. The tick waits out the lock timeout once, not
/// once per schedule, passes over those two (their cursors unmoved), materialises the others
/// and goes on, then exits 5 (busy, safe to retry) with one line, not a runner error per
/// schedule (exit 1). Once the lock is released, the next tick makes the two runs left: one run
/// per instant each. (The tick waits the server's 15 s once.)
#[test]
fn schedules_another_session_holds_are_left_to_the_next_tick_after_one_wait() {
    if Backend::current() != Backend::Postgres {
        println!("skipped: PostgreSQL only (row locks; SQLite's lock is the whole database's)");
        return;
    }
    let env = Env::init();
    let n = 600;
    due_schedules(&env, n);
    let out = env.sql.holding_rows(
        "SELECT id FROM job_definitions WHERE name IN ('job-2', 'job-550') FOR UPDATE",
        || env.run(&["--now", "2026-01-01T00:00:01Z", "tick", "--max-tick", "0s"]),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("lock timeout")
            && err.contains("2 schedules stayed locked by another session")
            && err.contains("wait for the next tick"),
        "{err}"
    );
    let made = materialised_names(&env);
    assert_eq!(made.len(), n as usize - 2, "the others' runs were made");
    assert!(!made.iter().any(|name| name == "job-2" || name == "job-550"));
    env.tick_at("2026-01-01T00:00:02Z");
    assert_each_materialised_once(&env, n);
}

/// PostgreSQL: past a batch of due schedules, a second connection reads the next batches while
/// the tick's connection writes. It must hold no transaction open between its reads: while the
/// writer waits (out a lock, say), a transaction left idle would be ended by the server after
/// runner's own `idle_in_transaction_session_timeout` (60 s), and the tick would report a lost
/// connection, half its schedules unmaterialised. Too slow to wait out here; instead the writer
/// is stalled with a batch in hand while the reader has read ahead, and no session of the
/// tick may then be idle in a transaction.
#[test]
fn the_second_connection_reading_due_schedules_holds_no_transaction_between_batches() {
    if Backend::current() != Backend::Postgres {
        println!("skipped: PostgreSQL only (runner's idle-in-transaction timeout)");
        return;
    }
    let env = Env::init();
    // Four batches: one read by the tick itself, three by the second connection.
    let n = 2_000;
    due_schedules(&env, n);
    let gate = env.path("gate");
    let mut tick = env
        .cmd()
        .args(["--now", "2026-01-01T00:00:01Z", "tick", "--max-tick", "0s"])
        .env(
            "RUNNER_TEST_HOOK",
            format!("read-batch:wait={}", gate.display()),
        )
        .spawn()
        .expect("spawn tick");
    let reached = env.path("gate.reached");
    let long = Duration::from_secs(120);
    wait_until(long, "the tick to hold a batch the reader read", || {
        reached.exists()
    });
    let sessions = |state: &str| {
        env.sql.query_i64(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'runner' AND state = $1",
            &[&state],
        )
    };
    // The reader reads ahead until the tick takes no more batches; then both sessions wait.
    wait_until(long, "the tick's sessions to wait", || {
        sessions("active") == 0
    });
    let idle_in_transaction = sessions("idle in transaction");
    std::fs::write(&gate, "").expect("open the gate");
    assert!(tick.wait().expect("tick").success());
    assert_eq!(idle_in_transaction, 0, "a session idled in a transaction");
    assert_each_materialised_once(&env, n);
}
