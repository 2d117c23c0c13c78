//! Database faults: a busy database (eight ticks and readers at once), and one that is missing,
//! unreadable, read-only, corrupt, newer, or whose disk fills up.
//!
//! Tests that need root (tmpfs mounts, `chattr`, dropping to `nobody`) check for it and, when
//! they cannot run, say so on stdout and return: they never pass silently by accident of setup
//! without a printed note.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::common::{
    chmod, duration_secs, is_root, json, last_attempt, last_run_id, never, real_now, run_row,
    said_one_line, sh, status_of, stderr, stdout, subcommands, timed, wait_until, Backend, Bg,
    Cleanup, Env, BIN,
};
use crate::sqlite_only;

// ---------------------------------------------------------------------------------------------
// a busy database
// ---------------------------------------------------------------------------------------------

/// Eight ticks start at once on 160 due runs while readers (and a writer) loop: nobody sees
/// "database is locked", every command exits 0, every run executes exactly once (no crash, so
/// exactly once, not just at least once). Reports the claim wait (due → job started).
#[test]
fn contention_eight_ticks_and_readers_never_see_a_locked_database() {
    let env = Env::init();
    let log = env.path("log");
    env.add(
        "c",
        &["--overlap", "allow"],
        &format!("echo \"$RUNNER_RUN_ID $(date +%s%N)\" >> {}", log.display()),
    );
    const RUNS: usize = 160;
    for _ in 0..RUNS {
        env.enqueue("c");
    }
    let commands = subcommands();
    let mut readers: Vec<Vec<&str>> =
        vec![vec!["schedule", "list"], vec!["schedule", "list", "--json"]];
    for (command, args) in [
        ("status", vec!["status"]),
        ("history", vec!["history", "--limit", "20"]),
        ("prune", vec!["prune", "--older-than", "30d"]),
    ] {
        if commands.contains(command) {
            readers.push(args);
        } else {
            println!("contention: `runner {command}` does not exist in this build; not exercised");
        }
    }
    let t0: u128 = String::from_utf8_lossy(&sh("date +%s%N").stdout)
        .trim()
        .parse()
        .expect("nanotime");

    let done = AtomicBool::new(false);
    let failures = Mutex::new(Vec::<String>::new());
    let check = |what: String, out: &Output| {
        let err = stderr(out);
        if !out.status.success() || err.contains("locked") || err.contains("busy") {
            failures
                .lock()
                .expect("lock")
                .push(format!("{what}: exit {:?}: {err}", out.status.code()));
        }
    };
    let mut reader_calls = 0;
    std::thread::scope(|scope| {
        let ticks: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let (out, _) =
                        env.tick_within(&["--concurrency", "4"], Duration::from_secs(120));
                    check("tick".into(), &out);
                })
            })
            .collect();
        let reader = scope.spawn(|| {
            let mut calls = 0;
            while !done.load(Ordering::Relaxed) {
                for args in &readers {
                    check(format!("runner {}", args.join(" ")), &env.run(args));
                    calls += 1;
                }
                // A writer in the crowd too: it enqueues work the ticks may or may not take.
                check("runner run c".into(), &env.run(&["run", "c"]));
                calls += 1;
            }
            calls
        });
        for t in ticks {
            t.join().expect("tick thread");
        }
        done.store(true, Ordering::Relaxed);
        reader_calls = reader.join().expect("reader thread");
    });
    // The runs the writer added late are taken by one more tick.
    // Given all the time it needs: the eight ticks stop claiming after the default 50s, and on a
    // loaded machine they may leave many runs.
    let (out, _) = env.tick_within(
        &["--concurrency", "8", "--max-tick", "30m"],
        Duration::from_secs(1800),
    );
    check("final tick".into(), &out);
    let failures = failures.into_inner().expect("lock");
    assert!(failures.is_empty(), "{failures:#?}");

    let total = env.sql.query_i64("SELECT count(*) FROM job_runs", &[]);
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'",
            &[]
        ),
        total,
        "every run succeeds"
    );
    let mut executions: BTreeMap<i64, usize> = BTreeMap::new();
    let mut waits = Vec::new();
    for line in std::fs::read_to_string(&log).expect("log").lines() {
        let (id, at) = line.split_once(' ').expect("log line");
        let id: i64 = id.parse().expect("id");
        *executions.entry(id).or_default() += 1;
        if id <= RUNS as i64 {
            let at: u128 = at.parse().expect("nanotime");
            waits.push(at.saturating_sub(t0) as f64 / 1e6);
        }
    }
    let twice: Vec<_> = executions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "runs executed more than once: {twice:?}");
    assert_eq!(executions.len() as i64, total, "every run executed");
    waits.sort_by(f64::total_cmp);
    let pct = |p: f64| waits[((waits.len() as f64 * p).ceil() as usize).clamp(1, waits.len()) - 1];
    println!(
        "contention: 8 ticks, {total} runs, {reader_calls} reader/writer calls alongside; \
         due -> job started: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (includes process start)",
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
}

/// The very first ticks of a database, eight at once: each records its tick time and the clock's
/// high-water mark, rows that do not exist yet. On PostgreSQL, eight `INSERT ... ON CONFLICT`s of
/// the same two new rows deadlocked now and then (CI saw "deadlock detected", exit 5); the race
/// is in the server's row insertion, so it cannot be forced: this repeats it on fresh databases
/// (about one round in fifteen deadlocked before the fix; none may now).
#[test]
fn first_ticks_of_a_new_database_eight_at_once_all_succeed() {
    for round in 0..20 {
        let env = Env::init();
        let failures: Vec<String> = std::thread::scope(|scope| {
            let ticks: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| env.tick_within(&[], Duration::from_secs(120)).0))
                .collect();
            ticks
                .into_iter()
                .map(|t| t.join().expect("tick thread"))
                .filter(|out| !out.status.success() || !stderr(out).is_empty())
                .map(|out| format!("exit {:?}: {}", out.status.code(), stderr(&out)))
                .collect()
        });
        assert!(failures.is_empty(), "round {round}: {failures:#?}");
        assert_eq!(
            env.sql.query_i64(
                "SELECT count(*) FROM runner_state WHERE key IN ('last_tick_at', 'clock_high_water')",
                &[]
            ),
            2,
            "round {round}: both clock marks recorded"
        );
    }
}

/// What a job wrote with `date +%s%N` into the file `name` of the test's directory.
fn nanos_in(env: &Env, name: &str) -> i64 {
    let text = std::fs::read_to_string(env.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {text:?}: {e}"))
}

/// When the file `name` of the test's directory was written, in epoch nanoseconds.
fn written_at(env: &Env, name: &str) -> i64 {
    let modified = std::fs::metadata(env.path(name))
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let since_epoch = modified
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since_epoch.as_nanos()).expect("fits")
}

/// Another process (a `sqlite3 runner.db VACUUM`, a `migrate`) holds the write lock for 12 s
/// while a tick writes a job's end: meanwhile its other job is still stopped at its timeout (the
/// job logs when its SIGTERM came: near 5 s, not when the lock was released, 12 s after it was
/// taken), and the ended job is recorded with the duration and end it had, not the ones the
/// tick could record them at.
#[test]
fn a_tick_waiting_for_the_write_lock_still_times_jobs_out_and_times_their_ends() {
    let env = Env::init();
    let file = |name: &str| crate::common::sh_quote(&env.path(name));
    env.add(
        "slow",
        &["--timeout", "5s", "--max-attempts", "1"],
        &format!(
            "trap 'date +%s%N > {}; exit 0' TERM; date +%s%N > {}; sleep 60 & wait",
            file("slow.term"),
            file("slow.start")
        ),
    );
    // Ends once the lock is held, so that the tick's write of its end waits for the lock.
    env.add(
        "quick",
        &["--max-attempts", "1"],
        &format!(
            "date +%s%N > {}; while [ ! -e {} ]; do sleep 0.05; done; date +%s%N > {}",
            file("quick.start"),
            file("locked"),
            file("quick.end")
        ),
    );
    let slow = env.enqueue("slow");
    let quick = env.enqueue("quick");
    let tick = Bg::spawn(&env, "tick", &["tick", "--concurrency", "2"]);
    wait_until(Duration::from_secs(30), "both jobs to start", || {
        env.path("slow.start").exists() && env.path("quick.start").exists()
    });
    wait_until(Duration::from_secs(30), "the write lock", || {
        env.sql.hold_write_lock_then(Duration::from_secs(12), || {
            std::fs::write(env.path("locked"), "").expect("write locked");
        })
    });
    let out = tick.finish(Duration::from_secs(60));
    assert!(out.status.success(), "tick failed: {}", stderr(&out));

    let (started, termed) = (nanos_in(&env, "slow.start"), nanos_in(&env, "slow.term"));
    let locked = written_at(&env, "locked");
    assert!(
        termed > locked,
        "the timeout came before the lock was taken ({} ms after): this test tests nothing",
        (locked - started) / 1_000_000
    );
    let term_after_ms = (termed - started) / 1_000_000;
    assert!(
        term_after_ms < 9_000,
        "SIGTERM {term_after_ms} ms after the start, for a timeout of 5 s"
    );
    let row = run_row(&env, slow);
    assert_eq!(row.error_code.as_deref(), Some("TIMEOUT"));
    let detail = row.error_detail.unwrap_or_default();
    let term_at = detail
        .strip_prefix("timed out after 5s: SIGTERM at ")
        .and_then(|rest| rest.split_once(','))
        .map(|(at, _)| duration_secs(at))
        .unwrap_or_else(|| panic!("detail: {detail}"));
    assert!(term_at < 9, "detail: {detail}");

    let own_ms = (nanos_in(&env, "quick.end") - nanos_in(&env, "quick.start")) / 1_000_000;
    let recorded_ms = last_attempt(&env, quick).duration_ms;
    assert!(
        (recorded_ms - own_ms).abs() < 2_000,
        "recorded {recorded_ms} ms, the job ran {own_ms} ms"
    );
    let finished_at = env.sql.query_i64(
        "SELECT finished_at FROM job_attempts WHERE run_id = $1",
        &[&quick],
    );
    let ended_at = nanos_in(&env, "quick.end") / 1_000_000_000;
    assert!(
        finished_at <= ended_at + 2,
        "finished_at {finished_at}, the job ended at {ended_at}"
    );
}

/// A job that fails while the tick is held up in a store call (its heartbeat waits 10 s for
/// another process's write lock) is retried its backoff after it really ended, not after the
/// tick could record it: the retry time is counted from the attempt's recorded `finished_at`.
/// (The test hook holds the first heartbeat, 10 s into the tick, until the lock is taken; the
/// job fails once it is.) With a backoff of exactly 2 s, the retry is due 1 to 2 s after the
/// recorded end (equal jitter, at a whole second, never past the cap); counted from the lock's release
/// it would be 8 s or more after. (Due by the release, the retry may run in the same tick.)
#[test]
fn a_retry_is_counted_from_the_jobs_end_not_from_a_late_record_of_it() {
    let env = Env::init();
    let file = |name: &str| crate::common::sh_quote(&env.path(name));
    env.add(
        "flaky",
        &[
            "--max-attempts",
            "2",
            "--backoff-base",
            "2s",
            "--backoff-max",
            "2s",
        ],
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; date +%s > {}.$RUNNER_ATTEMPT; exit 1",
            file("locked"),
            file("flaky.end")
        ),
    );
    let run = env.enqueue("flaky");
    let gate = env.path("gate");
    let tick = Bg::spawn_hooked(
        &env,
        "tick",
        &["tick", "--lease", "30s"],
        &format!("heartbeat:wait={}", gate.display()),
    );
    wait_until(Duration::from_secs(60), "the first heartbeat", || {
        env.path("gate.reached").exists()
    });
    wait_until(Duration::from_secs(30), "the write lock", || {
        env.sql.hold_write_lock_then(Duration::from_secs(10), || {
            std::fs::write(env.path("locked"), "").expect("write locked");
            std::fs::write(&gate, "").expect("open the gate");
        })
    });
    let released = real_now();
    let out = tick.finish(Duration::from_secs(60));
    assert!(out.status.success(), "tick failed: {}", stderr(&out));

    let finished_at = env.sql.query_i64(
        "SELECT finished_at FROM job_attempts WHERE run_id = $1 AND attempt = 1",
        &[&run],
    );
    let ended_at: i64 = std::fs::read_to_string(env.path("flaky.end.1"))
        .expect("the job ran")
        .trim()
        .parse()
        .expect("an epoch second");
    assert!(
        (ended_at - 1..=ended_at + 1).contains(&finished_at),
        "finished_at {finished_at}, the job ended at {ended_at}"
    );
    assert!(
        released - ended_at >= 5,
        "the job ended at {ended_at}, only {} s before the lock was released: this test tests \
         nothing",
        released - ended_at
    );
    let retry_at = json(
        &env.sql
            .query_rows(
                "SELECT detail FROM job_events WHERE run_id = $1 AND kind = 'RETRY_SCHEDULED'",
                &[&run],
            )
            .first()
            .expect("a retry scheduled")[0]
            .string(),
    )["run_at_epoch"]
        .as_i64()
        .expect("run_at_epoch");
    assert!(
        (finished_at + 1..=finished_at + 2).contains(&retry_at),
        "retry at {retry_at}, {} s after the attempt's recorded end {finished_at}, for a \
         backoff of 2 s (the lock was released at {released})",
        retry_at - finished_at
    );
}

/// A heartbeat that waited the whole 15 s for the write lock, while the lease still holds, is
/// tried again at once: the tick keeps its job, records it, and exits 0. (The test hook holds
/// the first heartbeat, 12 s into the tick, until the lock is taken, for 17 s.)
#[test]
fn a_heartbeat_that_waits_out_the_lock_is_tried_again_while_the_lease_holds() {
    let env = Env::init();
    env.add("long", &["--max-attempts", "1"], "sleep 31");
    let run = env.enqueue("long");
    let tick = tick_held_then_locked_out(
        &env,
        &["tick", "--lease", "36s"],
        "heartbeat",
        "the first heartbeat",
        Duration::from_secs(17),
    );
    let out = tick.finish(Duration::from_secs(60));
    assert!(out.status.success(), "tick failed: {}", stderr(&out));
    assert!(
        !stderr(&out).contains("heartbeat"),
        "stderr: {}",
        stderr(&out)
    );
    assert_eq!(status_of(&env, run), "succeeded");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1",
            &[&run]
        ),
        1
    );
}

/// A job ends while another process holds the write lock for 20 s, longer than the 15 s a write
/// waits: its end is tried again while the run's lease holds, so the run is recorded once,
/// succeeded, and its job is not run again. The job ends after the tick stopped claiming
/// (`--max-tick 1s`, as a job that outlives the default 50 s does), so its end is written alone,
/// not with a claim.
#[test]
fn an_end_that_waits_out_the_lock_is_tried_again_while_the_lease_holds() {
    let env = Env::init();
    let file = |name: &str| crate::common::sh_quote(&env.path(name));
    env.add(
        "job",
        &["--max-attempts", "3", "--backoff-base", "1s"],
        &format!(
            "echo $RUNNER_ATTEMPT >> {}; sleep 2; while [ ! -e {} ]; do sleep 0.05; done",
            file("log"),
            file("locked")
        ),
    );
    let run = env.enqueue("job");
    let tick = Bg::spawn(&env, "tick", &["tick", "--max-tick", "1s"]);
    wait_until(Duration::from_secs(30), "the job to start", || {
        env.path("log").exists()
    });
    wait_until(Duration::from_secs(30), "the write lock", || {
        env.sql.hold_write_lock_then(Duration::from_secs(20), || {
            std::fs::write(env.path("locked"), "").expect("write locked");
        })
    });
    let out = tick.finish(Duration::from_secs(90));
    assert!(out.status.success(), "tick failed: {}", stderr(&out));
    assert!(!stderr(&out).contains("error"), "stderr: {}", stderr(&out));
    assert_eq!(status_of(&env, run), "succeeded");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1",
            &[&run]
        ),
        1
    );
    let ran = std::fs::read_to_string(env.path("log")).expect("log");
    assert_eq!(ran, "1\n", "the job ran once");
}

/// A tick (`--concurrency 2`, and `extra`) runs `held` until the test releases it, its other
/// slot free, and stalls at its look for more runs (the `polling` hook) while two runs of
/// `quick` are queued; then another process holds the write lock for 20 s, longer than the 15 s
/// a write waits, and the tick's claim meets it. Returns the tick once the lock is released and
/// `held` let go, with the run ids (`held` first).
fn a_claim_waits_out_the_lock(env: &Env, extra: &[&str]) -> (Bg, Vec<i64>) {
    let file = |name: &str| crate::common::sh_quote(&env.path(name));
    env.add(
        "held",
        &["--max-attempts", "1"],
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            file("held.started"),
            file("release")
        ),
    );
    env.add(
        "quick",
        &["--max-attempts", "1", "--overlap", "allow"],
        &format!("echo $RUNNER_RUN_ID >> {}", file("log")),
    );
    let held = env.enqueue("held");
    let go = env.path("go");
    let mut args = vec!["tick", "--concurrency", "2"];
    args.extend(extra);
    let tick = Bg::spawn_hooked(
        env,
        "tick",
        &args,
        &format!("polling:wait={}", go.display()),
    );
    wait_until(
        Duration::from_secs(60),
        "the tick to look for more runs",
        || env.path("go.reached").exists(),
    );
    assert!(env.path("held.started").exists(), "held runs");
    let quick = [env.enqueue("quick"), env.enqueue("quick")];
    wait_until(Duration::from_secs(30), "the write lock", || {
        env.sql.hold_write_lock_then(Duration::from_secs(20), || {
            std::fs::write(&go, "").expect("let the tick claim");
        })
    });
    std::fs::write(env.path("release"), "").expect("release held");
    (tick, vec![held, quick[0], quick[1]])
}

/// The runs of `quick` that ran, by run id, as many times as each ran.
fn quick_ran(env: &Env) -> Vec<i64> {
    let log = std::fs::read_to_string(env.path("log")).unwrap_or_default();
    log.lines()
        .map(|id| id.parse().expect("a run id"))
        .collect()
}

/// A claim made while another process holds the write lock (a `VACUUM`, a `migrate`) for longer
/// than the 15 s a write waits changed nothing: it used to stop the tick's claiming, with a line
/// and exit 1, and the runs due waited for the next minute. Now it is tried again at the next
/// look: the tick claims them once the lock is released, runs each once, and exits 0 in silence.
#[test]
fn a_claim_that_waits_out_the_lock_is_tried_again_at_the_next_look() {
    let env = Env::init();
    let (tick, runs) = a_claim_waits_out_the_lock(&env, &[]);
    let out = tick.finish(Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "nothing to report");
    for run in &runs {
        assert_eq!(status_of(&env, *run), "succeeded", "run {run}");
        assert_eq!(
            env.sql.query_i64(
                "SELECT count(*) FROM job_attempts WHERE run_id = $1",
                &[run]
            ),
            1,
            "run {run}: one attempt"
        );
    }
    let mut ran = quick_ran(&env);
    ran.sort_unstable();
    assert_eq!(ran, runs[1..], "each run of quick ran once");
}

/// The same lock, still held when the tick stops claiming (`--max-tick`, shorter than the claim's
/// 15 s wait): the runs still due wait for the next tick, one line says so, and the tick exits 5
/// (busy, safe to retry), not 1. The next tick runs each once.
#[test]
fn a_claim_still_locked_when_the_tick_stops_claiming_leaves_the_runs_to_the_next_tick() {
    let env = Env::init();
    let (tick, runs) = a_claim_waits_out_the_lock(&env, &["--max-tick", "14s"]);
    let out = tick.finish(Duration::from_secs(120));
    let err = said_one_line(&out, 5, "runner: error: claiming runs: ");
    assert!(
        err.contains(
            "the database stayed locked by another process until this tick stopped claiming \
             (--max-tick 14s): the runs due wait for the next tick"
        ),
        "{err}"
    );
    assert_eq!(status_of(&env, runs[0]), "succeeded");
    for run in &runs[1..] {
        assert_eq!(status_of(&env, *run), "pending", "run {run}");
    }
    assert_eq!(quick_ran(&env), Vec::<i64>::new(), "no run of quick ran");
    env.tick(&["--concurrency", "2"]);
    let mut ran = quick_ran(&env);
    ran.sort_unstable();
    assert_eq!(ran, runs[1..], "each run of quick ran once");
}

/// A tick (`args`) in the background, held at the test hook point `hook` (`reached`: what the
/// wait for it is called) until another process holds the write lock, which it then holds for
/// `hold` while the tick goes on. Returns the tick once the lock is released.
fn tick_held_then_locked_out(
    env: &Env,
    args: &[&str],
    hook: &str,
    reached: &str,
    hold: Duration,
) -> Bg {
    let go = env.path("go");
    let tick = Bg::spawn_hooked(env, "tick", args, &format!("{hook}:wait={}", go.display()));
    wait_until(Duration::from_secs(60), reached, || {
        env.path("go.reached").exists()
    });
    wait_until(Duration::from_secs(30), "the write lock", || {
        env.sql.hold_write_lock_then(hold, || {
            std::fs::write(&go, "").expect("let the tick go on");
        })
    });
    tick
}

/// Schedule `job`: two attempts, the second at once, its command logging its attempt (see
/// [`attempts_logged`]).
fn add_attempt_logging_job(env: &Env) {
    let log = crate::common::sh_quote(&env.path("log"));
    env.add(
        "job",
        &["--max-attempts", "2", "--backoff-base", "0s"],
        &format!("echo $RUNNER_ATTEMPT >> {log}"),
    );
}

/// The attempts `job` logged (`$RUNNER_ATTEMPT`), one line each time its command ran.
fn attempts_logged(env: &Env) -> String {
    std::fs::read_to_string(env.path("log")).unwrap_or_default()
}

/// A tick (`args`) claims a run of `job` and spawns its job at its gate, where the `spawned` hook
/// holds it until another process holds the write lock, for 20 s: longer than the 15 s a write
/// waits, so the start's write meets the lock. Returns the tick once the lock is released, and
/// the run.
fn a_start_waits_out_the_lock(env: &Env, args: &[&str]) -> (Bg, i64) {
    add_attempt_logging_job(env);
    let run = env.enqueue("job");
    let tick = tick_held_then_locked_out(
        env,
        args,
        "spawned",
        "the job spawned at its gate",
        Duration::from_secs(20),
    );
    (tick, run)
}

/// A start whose write waits out another process's lock (a `VACUUM`, a `migrate`) changed
/// nothing: it used to be a runner error, the job stopped at its gate and the tick exiting 1.
/// Now the job waits at its gate and its start is written again while its lease holds: once the
/// lock is released it starts, runs once, and the tick exits 0 in silence.
#[test]
fn a_start_that_waits_out_the_lock_is_tried_again_while_the_lease_holds() {
    let env = Env::init();
    let (tick, run) = a_start_waits_out_the_lock(&env, &["tick"]);
    let out = tick.finish(Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "nothing to report");
    assert_eq!(status_of(&env, run), "succeeded");
    assert_eq!(attempts_logged(&env), "1\n", "the job ran once");
}

/// The same lock, outlasting the lease (12 s, shorter than the 15 s the write waits): the job
/// never starts (its command never runs), one line says so, and the tick exits 5 (busy, safe to
/// retry), not 1. Its run is left to recovery, and the next tick runs it once.
#[test]
fn a_start_locked_beyond_its_lease_stops_the_job_at_its_gate_and_exits_5() {
    let env = Env::init();
    let (tick, run) = a_start_waits_out_the_lock(&env, &["tick", "--lease", "12s"]);
    let out = tick.finish(Duration::from_secs(120));
    let err = said_one_line(&out, 5, "runner: error: recording the start of jobs: ");
    assert!(
        err.contains(
            "the database stayed locked by another process for as long as the leases held: \
             1 job was stopped at its gate (its command never ran), and recovery retries it \
             by its policy once its lease expires"
        ),
        "{err}"
    );
    assert_eq!(attempts_logged(&env), "", "its command never ran");
    assert_eq!(status_of(&env, run), "running", "left to recovery");
    // Its lease expired while the tick waited: the next tick recovers the run and runs it.
    env.tick(&[]);
    assert_eq!(status_of(&env, run), "succeeded");
    assert_eq!(attempts_logged(&env), "2\n", "the job ran once");
}

/// A start whose write another process's lock refuses at once, without the 15 s wait (a
/// PostgreSQL lock timeout, SQLite's busy that skips its wait to avoid a deadlock; forged by a
/// hook that counts the tries): it used to be written again at every turn of the tick's loop, a
/// core spent until the lease ran out (over a thousand tries in 5 s). Now each try comes after a
/// pause that grows up to a tenth of the lease: a few tens at most, and fewer on a slower machine.
/// The job never starts; the tick says so and exits 5, as when the lock outlasts the lease.
#[test]
fn a_start_refused_at_once_by_a_lock_is_tried_again_after_a_growing_pause() {
    let env = Env::init();
    env.add(
        "job",
        &[],
        &format!(
            "echo $RUNNER_ATTEMPT >> {}",
            crate::common::sh_quote(&env.path("log"))
        ),
    );
    let run = env.enqueue("job");
    let tries = env.path("tries");
    let tick = Bg::spawn_hooked(
        &env,
        "tick",
        &["tick", "--lease", "5s"],
        &format!("record-starts:fail-counted={}", tries.display()),
    );
    let out = tick.finish(Duration::from_secs(120));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(
            "the database stayed locked by another process for as long as the leases held: 1 job \
             was stopped at its gate (its command never ran)"
        ),
        "{err}"
    );
    let tried = tries_counted(&tries);
    assert!(
        (2..=40).contains(&tried),
        "the start was written {tried} times over a lease of 5 s"
    );
    assert_eq!(attempts_logged(&env), "", "its command never ran");
    assert_eq!(status_of(&env, run), "running", "left to recovery");
}

/// The tries a `fail-counted=PATH` hook counted in PATH.
fn tries_counted(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

/// A heartbeat that another process's lock refuses at once (forged by a hook that counts the
/// tries) while the lease holds: it used to be tried again at every turn of the tick's loop
/// (every 50 ms beside a job that has run a while, more often beside young ones), some 80 times
/// in the 4 s between the first heartbeat and the job's end. Now each try comes after a pause
/// that grows up to a second: about ten, and fewer on a slower machine. The job is not
/// disturbed: its end lands, and the tick exits 0 in silence.
#[test]
fn a_heartbeat_refused_at_once_by_a_lock_is_tried_again_after_a_growing_pause() {
    let env = Env::init();
    env.add("job", &["--max-attempts", "1"], "sleep 8");
    let run = env.enqueue("job");
    let tries = env.path("tries");
    // A heartbeat every 4 s; the job ends 4 s before its lease would run out.
    let tick = Bg::spawn_hooked(
        &env,
        "tick",
        &["tick", "--lease", "12s"],
        &format!("heartbeat-locked:fail-counted={}", tries.display()),
    );
    let out = tick.finish(Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "nothing to report");
    assert_eq!(status_of(&env, run), "succeeded");
    let tried = tries_counted(&tries);
    assert!(
        (2..=25).contains(&tried),
        "the heartbeat was written {tried} times in the 4 s before the job ended"
    );
}

/// A job's end that another process's lock refuses at once (forged, counted): it used to be
/// tried again at every turn of the tick's loop, every few ms with no job left running, until
/// its lease ran out (hundreds of tries). Now after a pause that grows up to a tenth of the
/// lease: a few tens at most, and fewer on a slower machine. The last try comes when the lease
/// runs out: the end is then reported, as one that waited out the lock for as long, and its run
/// is left to recovery. The job ends after the tick stopped claiming (`--max-tick 1s`), so its
/// end is written alone, not with a claim.
#[test]
fn an_end_refused_at_once_by_a_lock_is_tried_again_after_a_growing_pause() {
    let env = Env::init();
    let log = crate::common::sh_quote(&env.path("log"));
    env.add(
        "job",
        &["--max-attempts", "1"],
        &format!("echo $RUNNER_ATTEMPT >> {log}; sleep 2"),
    );
    let run = env.enqueue("job");
    let tries = env.path("tries");
    let tick = Bg::spawn_hooked(
        &env,
        "tick",
        &["tick", "--lease", "5s", "--max-tick", "1s"],
        &format!("record-ends-locked:fail-counted={}", tries.display()),
    );
    let out = tick.finish(Duration::from_secs(120));
    let err = said_one_line(
        &out,
        1,
        &format!("runner: error: run {run}: recording attempt 1: "),
    );
    assert!(err.contains("the database is locked"), "{err}");
    let tried = tries_counted(&tries);
    assert!(
        (2..=40).contains(&tried),
        "the end was written {tried} times over a lease of 5 s"
    );
    assert_eq!(attempts_logged(&env), "1\n", "the job ran once");
    assert_eq!(status_of(&env, run), "running", "left to recovery");
}

/// Recovery's write of an expired run waits out another process's lock: it used to end the tick
/// there, its other steps not taken (a due run not executed). Now the run is left to the next
/// tick's recovery, one line says so, the tick goes on (the due run is executed once the lock is
/// released), and it exits 5 (busy, safe to retry).
#[test]
fn a_recovery_that_waits_out_the_lock_is_left_to_the_next_tick() {
    let env = Env::init();
    add_attempt_logging_job(&env);
    let log = crate::common::sh_quote(&env.path("log"));
    env.add("quick", &[], &format!("echo quick >> {log}"));
    let expired = env.enqueue("job");
    crate::common::forge_vanished_runner(&env, expired, None);
    let quick = env.enqueue("quick");
    let tick = tick_held_then_locked_out(
        &env,
        &["tick"],
        "recovering",
        "the tick to recover",
        Duration::from_secs(20),
    );
    let out = tick.finish(Duration::from_secs(120));
    let start = format!("runner: error: run {expired}: recovering its expired lease: ");
    let err = said_one_line(&out, 5, &start);
    assert!(
        err.contains(
            "the database stayed locked by another process: 1 run whose lease expired waits for \
             the next tick's recovery"
        ),
        "{err}"
    );
    assert_eq!(status_of(&env, expired), "running", "left to the next tick");
    assert_eq!(status_of(&env, quick), "succeeded", "the tick went on");
    env.tick(&[]);
    assert_eq!(status_of(&env, expired), "succeeded");
    assert_eq!(attempts_logged(&env), "quick\n2\n", "each ran once");
}

/// The database becomes read-only while a tick's job runs (SQLite: the database and its `-wal`
/// made immutable, as root; PostgreSQL: forged, each write refused as by a read-only server).
/// The job's end cannot be written: the tick says the database is read-only and exits 4, as any
/// command that meets a read-only database, not 1 (SQLite said "disk I/O error", with a hint
/// about a full disk).
#[test]
fn a_database_made_read_only_mid_tick_is_exit_4() {
    let env = Env::init();
    let file = |name: &str| crate::common::sh_quote(&env.path(name));
    env.add(
        "held",
        &["--max-attempts", "1"],
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            file("started"),
            file("release")
        ),
    );
    let run = env.enqueue("held");
    // One slot, taken: no claim while the job runs, so the tick's next write is the job's end.
    let tick = Bg::spawn(&env, "tick", &["tick", "--concurrency", "1"]);
    wait_until(Duration::from_secs(60), "the job to start", || {
        env.path("started").exists()
    });
    let Some(_writable_again) = make_read_only(&env) else {
        println!("read-only mid-tick: root and chattr +i unavailable here: skipped");
        return;
    };
    std::fs::write(env.path("release"), "").expect("release the job");
    let out = tick.finish(Duration::from_secs(120));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "stderr: {err}");
    assert!(
        err.contains(&format!("runner: error: run {run}: recording attempt 1: "))
            && err.contains("read-only"),
        "{err}"
    );
    assert!(
        err.lines().all(|line| line.starts_with("runner: error: ")),
        "{err}"
    );
    assert!(!err.contains("disk I/O error; hint"), "{err}");
}

/// `chattr FLAG PATH`; whether it did.
fn chattr(flag: &str, path: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(path)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Make the test's database read-only for the runner that has it open, until the guard is
/// dropped; `None` where this cannot be done here (SQLite, not root or no `chattr`). Not the
/// `-shm` file, which SQLite maps into memory: a write to it would kill the tick (SIGBUS).
fn make_read_only(env: &Env) -> Option<Cleanup<Box<dyn FnMut() + '_>>> {
    match Backend::current() {
        Backend::Sqlite => {
            let files = [env.db.clone(), env.path("runner.db-wal")];
            let made = is_root() && files.iter().all(|file| chattr("+i", file));
            // Dropped, it undoes what was made.
            let undo = Cleanup(Box::new(move || {
                for file in &files {
                    chattr("-i", file);
                }
            }) as Box<dyn FnMut()>);
            made.then_some(undo)
        }
        Backend::Postgres => {
            // Every write to the runs refused as a read-only server refuses it. (What an
            // administrator would do, `ALTER SYSTEM SET default_transaction_read_only` and a
            // reload, which reaches sessions already open, would make every test's database on
            // the shared test server read-only.)
            for sql in [
                "CREATE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     RAISE EXCEPTION 'forged read-only server'
                         USING ERRCODE = 'read_only_sql_transaction';
                 END $$",
                "CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE OR DELETE ON job_runs
                 FOR EACH STATEMENT EXECUTE FUNCTION refuse_writes()",
            ] {
                env.sql.exec(sql, &[]);
            }
            Some(Cleanup(Box::new(|| {})))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// a missing, unreadable, read-only, corrupt, newer or full database
// ---------------------------------------------------------------------------------------------

/// Commands that must not create a database.
const NON_CREATING: &[&[&str]] = &[
    &["tick"],
    &["schedule", "list"],
    &["schedule", "show", "x"],
    &["schedule", "rm", "x"],
    &["schedule", "pause", "x"],
    &["schedule", "next", "x"],
    &["run", "x"],
    &["run", "x", "--wait"],
];

#[test]
fn missing_database_is_exit_4_and_nothing_is_created() {
    sqlite_only!("a missing database file");
    let env = Env::new();
    for db in [env.db.clone(), env.path("no/such/dir/runner.db")] {
        for args in NON_CREATING {
            let mut cmd = env.cmd();
            cmd.arg("--db").arg(&db).args(*args);
            let out = cmd.output().expect("spawn");
            assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(&db.display().to_string()),
                "{args:?}: names the path: {}",
                stderr(&out)
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(env.dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "created: {left:?}");
}

#[test]
fn directory_instead_of_database_is_exit_4() {
    sqlite_only!("a directory in place of the database file");
    let env = Env::new();
    std::fs::create_dir(&env.db).expect("mkdir");
    for args in NON_CREATING.iter().copied().chain([&["init"][..]]) {
        let err = env.fails(4, args);
        assert!(err.contains("directory"), "{args:?}: {err}");
    }
}

/// A file this user cannot read: exit 4 naming it. As root (who reads anything) the runner is
/// run as `nobody` with setpriv.
#[test]
fn unreadable_database_is_exit_4() {
    sqlite_only!("file permissions");
    let env = Env::init();
    env.add("a", &[], "true");
    if !is_root() {
        chmod(&env.db, 0o000);
        for args in [&["schedule", "list"][..], &["tick"]] {
            let err = env.fails(4, args);
            assert!(err.contains(&env.db.display().to_string()), "{err}");
        }
        chmod(&env.db, 0o600);
        return;
    }
    if !Path::new("/usr/bin/setpriv").exists() {
        println!("unreadable database: running as root without setpriv: skipped");
        return;
    }
    // A directory nobody owns, a database nobody owns with mode 000: only root could read it.
    chmod(env.dir.path(), 0o711);
    let home = env.path("nobody");
    std::fs::create_dir(&home).expect("mkdir");
    let db = home.join("runner.db");
    std::fs::copy(&env.db, &db).expect("copy");
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).expect("chown");
    std::os::unix::fs::chown(&db, Some(65534), Some(65534)).expect("chown");
    chmod(&db, 0o000);
    for args in [&["schedule", "list"][..], &["tick"], &["run", "a"]] {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                BIN,
                "--db",
            ])
            .arg(&db)
            .args(args)
            .env_remove("RUNNER_DB")
            .env("HOME", &home)
            .current_dir(&home)
            .output()
            .expect("setpriv");
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&db.display().to_string()),
            "{args:?}: names the path: {}",
            stderr(&out)
        );
    }
}

/// A read-only database file: reads work, writes fail with exit 4 and a hint, nothing changes.
/// As root, permissions do not stop writes: the file is made immutable (`chattr +i`) instead.
#[test]
fn read_only_database_reads_work_and_writes_fail_clearly() {
    sqlite_only!("file permissions");
    let env = Env::init();
    env.add("a", &[], "true");
    let db = env.db.clone();
    let _restore = if is_root() {
        let out = Command::new("chattr").arg("+i").arg(&db).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            println!("read-only database: root and chattr +i unavailable here: skipped");
            return;
        }
        Cleanup(Box::new(move || {
            let _ = Command::new("chattr").arg("-i").arg(&db).output();
        }) as Box<dyn FnMut()>)
    } else {
        chmod(&db, 0o400);
        Cleanup(Box::new(move || chmod(&db, 0o600)) as Box<dyn FnMut()>)
    };
    let before = env.sql.snapshot();
    let listed = env.ok(&["schedule", "list"]);
    assert!(listed.contains('a'), "{listed}");
    env.ok(&["schedule", "show", "a"]);
    for args in [
        &["run", "a"][..],
        &["tick"],
        &["schedule", "pause", "a"],
        &["schedule", "add", "b", "--cron", &never(), "--", "true"],
    ] {
        let err = env.fails(4, args);
        assert!(
            err.contains("readonly") || err.contains("read-only"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("writable"),
            "{args:?}: a hint on what to fix: {err}"
        );
    }
    assert_eq!(env.sql.snapshot(), before, "nothing written");
}

/// Garbage, or a runner database with corrupt pages: exit 4, and the file is left as it was for
/// the user to inspect or restore (runner never "repairs" by rewriting).
#[test]
fn corrupt_database_is_exit_4_and_left_untouched() {
    sqlite_only!("a corrupt database file");
    let env = Env::new();
    let garbage: Vec<u8> = (0..50_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&env.db, &garbage).expect("write");
    chmod(&env.db, 0o600);
    for args in NON_CREATING.iter().copied().chain([&["init"][..]]) {
        let err = env.fails(4, args);
        assert!(
            err.contains("not a usable runner database") || err.contains("not a database"),
            "{args:?}: {err}"
        );
    }
    assert!(
        std::fs::read(&env.db).expect("read") == garbage,
        "the file was changed"
    );

    // A real runner database whose pages after the first are overwritten.
    let env = Env::init();
    env.add("a", &[], "true");
    env.enqueue("a");
    let mut bytes = std::fs::read(&env.db).expect("read");
    for (i, b) in bytes.iter_mut().enumerate().skip(4096) {
        *b = if i % 2 == 0 { 0xde } else { 0xad };
    }
    std::fs::write(&env.db, &bytes).expect("write");
    for args in [&["tick"][..], &["run", "a"], &["schedule", "list"]] {
        let err = env.fails(4, args);
        assert!(
            err.contains("corrupt") || err.contains("malformed"),
            "{args:?}: {err}"
        );
    }
}

/// A database written by a newer runner: exit 4 saying to upgrade; never migrated down.
#[test]
fn newer_schema_is_exit_4_and_left_alone() {
    sqlite_only!("PRAGMA user_version");
    let env = Env::init();
    Connection::open(&env.db)
        .expect("open")
        .execute_batch("PRAGMA user_version = 99")
        .expect("user_version");
    for args in NON_CREATING.iter().copied().chain([&["init"][..]]) {
        let err = env.fails(4, args);
        assert!(err.contains("upgrade runner"), "{args:?}: {err}");
    }
    assert_eq!(env.sql.query_i64("PRAGMA user_version", &[]), 99);
}

/// Mounts a small tmpfs (root only); unmounted by the guard.
fn small_tmpfs(dir: &Path, size: &str) -> Option<Cleanup<impl FnMut()>> {
    std::fs::create_dir_all(dir).expect("mkdir");
    let out = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = dir.to_path_buf();
    Some(Cleanup(move || {
        let _ = Command::new("umount").arg("-l").arg(&dir).output();
    }))
}

/// The disk fills up in the middle of a tick (the job itself fills it): the tick does not crash
/// or corrupt anything, says "disk is full", and once space is freed the next ticks finish every
/// run (the filling job runs again: its result could not be recorded, at-least-once).
#[test]
fn disk_full_during_a_tick_loses_nothing() {
    sqlite_only!("a full disk under the database file");
    let env = Env::new();
    let fs = env.path("fs");
    let Some(_mount) = (if is_root() {
        small_tmpfs(&fs, "4m")
    } else {
        None
    }) else {
        println!("disk full: cannot mount a tmpfs (not root, or not permitted): skipped");
        return;
    };
    let db = fs.join("runner.db");
    let run_in = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.arg("--db").arg(&db).args(args);
        cmd
    };
    let ok = |args: &[&str]| {
        let out = run_in(args).output().expect("spawn");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    ok(&["init"]);
    let once = env.path("filled-once");
    let filler = fs.join("filler");
    ok(&[
        "schedule", "add", "fill", "--cron", &never(), "--max-attempts", "5", "--backoff-base", "0s", "--",
        &format!(
            "if [ ! -e {once} ]; then touch {once}; head -c 100M /dev/zero > {filler} 2>/dev/null; fi; echo filled",
            once = once.display(),
            filler = filler.display()
        ),
    ]);
    ok(&[
        "schedule",
        "add",
        "quiet",
        "--cron",
        &never(),
        "--max-attempts",
        "5",
        "--backoff-base",
        "0s",
        "--",
        "echo quiet",
    ]);
    ok(&["run", "fill"]);
    for _ in 0..3 {
        ok(&["run", "quiet"]);
    }
    let (out, _) = timed(
        run_in(&["tick", "--lease", "3s", "--concurrency", "1"]),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    assert!(once.exists(), "the filling job ran");
    assert!(
        err.contains("disk is full"),
        "the tick says the disk is full: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "exit {:?}: {err}",
        out.status.code()
    );

    // While the disk is still full: no command may damage the database.
    for args in [
        &["tick", "--lease", "3s"][..],
        &["run", "quiet"],
        &["schedule", "list"],
    ] {
        let (out, _) = timed(run_in(args), Duration::from_secs(60));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }

    std::fs::remove_file(&filler).expect("free the space");
    assert_eq!(integrity(&db), "ok");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (out, _) = timed(run_in(&["tick", "--lease", "3s"]), Duration::from_secs(60));
        assert!(
            out.status.success(),
            "after freeing space: {}",
            stderr(&out)
        );
        let open: i64 = Connection::open(&db)
            .expect("open")
            .query_row(
                "SELECT count(*) FROM job_runs WHERE status <> 'succeeded'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} runs unfinished after the disk was freed"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(integrity(&db), "ok");
    let conn = Connection::open(&db).expect("open");
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .expect("count");
    assert!(runs >= 4, "no run was lost: {runs}");
}

/// A tick that cannot write the result of a job (a full disk; here a test fault) claims nothing
/// more, so that no further job runs whose result it may not be able to record: it exits 1 once
/// what it holds has ended. Here a short job's end fails while a long one still runs: the tick
/// used to claim again a second later and run the queued jobs too. The runs it could not record
/// are recovered when their leases expire, and the next ticks run the rest.
#[test]
fn a_tick_that_cannot_record_a_result_claims_no_more() {
    let env = Env::init();
    let log = env.path("log");
    let job = |secs: &str| format!("echo $RUNNER_RUN_ID >> {}; sleep {secs}", log.display());
    env.add("slow", &["--backoff-base", "1s"], &job("4"));
    // `allow`: a quick run whose end was not written, still running to the database, does not
    // hold the others back.
    env.add(
        "quick",
        &["--backoff-base", "1s", "--overlap", "allow"],
        &job("0.1"),
    );
    let slow = env.enqueue("slow");
    let quick = env.enqueue("quick");
    let queued: Vec<i64> = (0..2).map(|_| env.enqueue("quick")).collect();
    let ran = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse::<i64>().expect("run id"))
            .collect::<BTreeSet<_>>()
    };
    let out = env
        .cmd()
        .env("RUNNER_TEST_HOOK", "record-ends:fail")
        .args(["tick", "--concurrency", "2", "--lease", "3s"])
        .output()
        .expect("tick");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        ran(),
        BTreeSet::from([slow, quick]),
        "nothing claimed after the failed write: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!("run {quick}: recording attempt 1")),
        "{}",
        stderr(&out)
    );

    // Their leases expire (3 s); later ticks recover them and run everything.
    let all: Vec<i64> = [slow, quick].into_iter().chain(queued).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while all.iter().any(|&run| status_of(&env, run) != "succeeded") {
        assert!(Instant::now() < deadline, "runs unfinished: {:?}", ran());
        std::thread::sleep(Duration::from_millis(500));
        let out = env
            .cmd()
            .args(["tick", "--lease", "3s", "--concurrency", "4"])
            .output()
            .expect("tick");
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

/// `run --wait` whose job ended but whose end could not be written (forged: the write of the end
/// refused, on PostgreSQL as a read-only database refuses it, on SQLite as any other write error
/// does): it names that error and exits with the code the error means (4 for a read-only
/// database, 1 for another failure), not the job's 0. It used to say the run was "no longer this
/// runner's", as if it had been cancelled, and exit 0. The run stays running, its lease to expire
/// into recovery.
#[test]
fn run_wait_names_the_error_that_kept_its_end_unwritten() {
    let env = Env::init();
    env.add("refused", &[], "true");
    let (refuse, code, cause): (&[&str], i32, &str) = match Backend::current() {
        Backend::Sqlite => (
            &[
                "CREATE TRIGGER refuse_end BEFORE UPDATE OF status ON job_runs
               WHEN NEW.status = 'succeeded'
               BEGIN SELECT RAISE(ABORT, 'forged write failure'); END",
            ],
            1,
            "forged write failure",
        ),
        Backend::Postgres => (
            &[
                "CREATE FUNCTION refuse_end() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF NEW.status = 'succeeded' THEN
                         RAISE EXCEPTION 'forged read-only database'
                             USING ERRCODE = 'read_only_sql_transaction';
                     END IF;
                     RETURN NEW;
                 END $$",
                "CREATE TRIGGER refuse_end BEFORE UPDATE ON job_runs
                 FOR EACH ROW EXECUTE FUNCTION refuse_end()",
            ],
            4,
            "forged read-only database",
        ),
    };
    for sql in refuse {
        env.sql.exec(sql, &[]);
    }
    let out = env.run(&["run", "refused", "--wait"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    let run = last_run_id(&env, "refused");
    assert!(
        err.contains(&format!(
            "runner: run {run} attempt 1 succeeded, but its end could not be written to the \
             database ("
        )) && err.contains(cause)
            && err.contains("recovery retries the run by its policy once its lease expires"),
        "{err}"
    );
    assert!(!err.contains("no longer this runner's"), "{err}");
    assert_eq!(status_of(&env, run), "running");
}

/// Once a write of a tick fails for good (a full disk, a read-only database; here a test fault
/// on every end written once the third job started), no job prepared at its gate is released:
/// their ends could not be recorded either, so they would run again once their leases expire.
/// Their shells are killed at the gate, the tick's last line counts them, and later ticks run
/// them once. (A job takes the slot of one that ended before that one's end is written: so the
/// job after the third may have started before the failure was met, not one more.)
#[test]
fn jobs_at_their_gate_never_start_once_writes_fail() {
    // Jobs are prepared ahead only while the latest one ran under 50 ms: the hook prepares them
    // ahead whatever a busy machine makes of that. A round whose claims still found no job
    // prepared (the slot freed before a claim for the next came) is tried again.
    for round in 0..5 {
        let env = Env::init();
        let log = env.path("log");
        let failing = env.path("failing");
        // Sequential (one slot): the third job to run makes every later end fail, and it and the
        // ones after it run long enough for an end held to share a claim's transaction (20 ms
        // at most) to be written before they end.
        env.add(
            "quick",
            &[
                "--overlap",
                "allow",
                "--max-attempts",
                "5",
                "--backoff-base",
                "0s",
            ],
            &format!(
                "echo $RUNNER_RUN_ID >> {log}; \
                 if [ $(wc -l < {log}) -ge 3 ]; then touch {failing}; sleep 0.3; fi",
                log = crate::common::sh_quote(&log),
                failing = crate::common::sh_quote(&failing),
            ),
        );
        let runs: Vec<i64> = (0..12).map(|_| env.enqueue("quick")).collect();
        let ran = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(|l| l.parse::<i64>().expect("run id"))
                .collect::<Vec<_>>()
        };
        let (out, _) = timed(
            {
                let mut cmd = env.cmd();
                cmd.env(
                    "RUNNER_TEST_HOOK",
                    format!(
                        "record-ends:fail-after={},prepare-ahead:always",
                        failing.display()
                    ),
                )
                .args(["tick", "--concurrency", "1", "--lease", "3s"]);
                cmd
            },
            Duration::from_secs(60),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let attempted = env.sql.query_i64("SELECT count(*) FROM job_attempts", &[]);
        let first = ran();
        let ran_count = i64::try_from(first.len()).expect("few");
        if attempted == ran_count && ran_count <= 4 {
            println!("round {round}: no job was prepared ahead: again");
            continue;
        }
        assert!(
            ran_count <= 4,
            "jobs left their gate after the writes failed: {first:?}; {err}"
        );
        let prepared = attempted - ran_count;
        let line = err.lines().last().unwrap_or_default();
        let (jobs, were) = if prepared == 1 {
            ("job", "was")
        } else {
            ("jobs", "were")
        };
        assert!(
            line.starts_with(&format!(
                "runner: error: the database stopped taking writes, so {prepared} prepared \
                 {jobs} {were} not started"
            )),
            "{err}"
        );

        // Their leases expire (3 s); later ticks run each of them once, their commands never
        // having run at the gate.
        let deadline = Instant::now() + Duration::from_secs(120);
        while runs.iter().any(|&run| status_of(&env, run) != "succeeded") {
            assert!(Instant::now() < deadline, "runs unfinished: {:?}", ran());
            std::thread::sleep(Duration::from_millis(500));
            let (out, _) = env.tick_within(&["--lease", "3s"], Duration::from_secs(60));
            assert!(out.status.success(), "{}", stderr(&out));
        }
        let all = ran();
        for run in &runs {
            if !first.contains(run) {
                let times = all.iter().filter(|r| *r == run).count();
                assert_eq!(times, 1, "run {run} ran {times} times: {all:?}");
            }
        }
        return;
    }
    panic!("no job was prepared ahead in 5 rounds");
}

/// The same fault without root: a file size limit (RLIMIT_FSIZE, via prlimit) stops the tick in
/// the middle of a write (SIGXFSZ). Like a crash: the database stays intact, and the next ticks
/// finish every run (one that was running is re-run after its lease: at-least-once).
#[test]
fn file_size_limit_stops_a_tick_mid_write_and_loses_nothing() {
    sqlite_only!("a file size limit on the database file");
    if !Path::new("/usr/bin/prlimit").exists() {
        println!("file size limit: prlimit (util-linux) not found: skipped");
        return;
    }
    let env = Env::init();
    let log = env.path("log");
    // Each attempt stores 60 KB of output: the WAL outgrows the limit within a few runs.
    env.add(
        "w",
        &["--max-attempts", "5", "--backoff-base", "0s"],
        &format!(
            "head -c 60000 /dev/zero | tr '\\0' a; echo $RUNNER_RUN_ID >> {}",
            log.display()
        ),
    );
    let runs: Vec<i64> = (0..12).map(|_| env.enqueue("w")).collect();
    let limit = std::fs::metadata(&env.db).expect("stat").len() + 200_000;
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--fsize={limit}"))
        .arg(BIN)
        .args(["tick", "--lease", "3s"])
        .env("RUNNER_DB", &env.db)
        .current_dir(env.dir.path());
    let (out, _) = timed(cmd, Duration::from_secs(60));
    assert!(
        !out.status.success(),
        "the tick was expected to hit the file size limit: {}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(integrity(&env.db), "ok");
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.sql.query_i64(
        "SELECT count(*) FROM job_runs WHERE status <> 'succeeded'",
        &[],
    ) > 0
    {
        assert!(
            Instant::now() < deadline,
            "runs unfinished after the limit was lifted"
        );
        let (out, _) = env.tick_within(&["--lease", "3s"], Duration::from_secs(60));
        assert!(out.status.success(), "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(integrity(&env.db), "ok");
    let ran: BTreeSet<i64> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| l.parse().expect("run id"))
        .collect();
    let expected: BTreeSet<i64> = runs.into_iter().collect();
    assert_eq!(ran, expected, "every run executed");
    println!(
        "file size limit: the tick died with {}; {} runs, {} attempts, all succeeded afterwards",
        out.status,
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        env.sql.query_i64("SELECT count(*) FROM job_attempts", &[])
    );
}

/// What the user is told about a fault must match the fault. Today a full disk at open, and a
/// read-only directory, are reported as "not a usable runner database ... restore it from a
/// backup" (of a healthy database), and a tick that could not record its results exits 0.
#[test]
fn database_fault_messages_are_actionable() {
    sqlite_only!("a full disk and a read-only directory");
    let env = Env::new();
    let fs = env.path("fs");
    let Some(_mount) = (if is_root() {
        small_tmpfs(&fs, "2m")
    } else {
        None
    }) else {
        println!("fault messages: cannot mount a tmpfs: skipped");
        return;
    };
    let db = fs.join("runner.db");
    let runner = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.arg("--db").arg(&db).args(args);
        timed(cmd, Duration::from_secs(60)).0
    };
    let filler = fs.join("filler");
    for args in [
        &["init"][..],
        &[
            "schedule",
            "add",
            "fill",
            "--cron",
            &never(),
            "--",
            &format!(
                "head -c 100M /dev/zero > {} 2>/dev/null; true",
                filler.display()
            ),
        ],
        &["run", "fill"],
    ] {
        let out = runner(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    // Full in the middle of the tick: the job fills the disk, its result cannot be recorded.
    let out = runner(&["tick", "--lease", "3s"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hint: the disk is full"),
        "{}",
        stderr(&out)
    );
    // The hint is on its error's line: one line per runner error.
    assert!(
        stderr(&out)
            .lines()
            .all(|line| line.starts_with("runner: ") && !line.starts_with("runner: hint")),
        "{}",
        stderr(&out)
    );
    // Full before the tick: the first tick's exit freed its WAL, so fill what is left; now SQLite
    // cannot even create its shared-memory file.
    let top_up = fs.join("top-up");
    let _ = std::fs::write(&top_up, vec![0u8; 4 << 20]); // fails with ENOSPC once full: intended
    for args in [&["tick"][..], &["schedule", "list"]] {
        let out = runner(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("restore it from a backup"), "{args:?}: {err}");
        assert!(
            err.contains("full") || err.contains("space"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_file(&filler).expect("rm");
    std::fs::remove_file(&top_up).expect("rm");

    // A read-only directory (and file): the database is fine, say what is wrong.
    let env = Env::init();
    env.add("a", &[], "true");
    let dir = env.dir.path().to_path_buf();
    let db = env.db.clone();
    let chattr = |flag: &str, path: &Path| {
        Command::new("chattr")
            .arg(flag)
            .arg(path)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(chattr("+i", &db) && chattr("+i", &dir)) {
        chattr("-i", &db);
        println!("fault messages: chattr +i unavailable: read-only directory not checked");
        return;
    }
    let _restore = Cleanup(|| {
        chattr("-i", &dir);
        chattr("-i", &db);
    });
    let out = env.run(&["schedule", "list"]);
    let err = stderr(&out);
    assert!(
        out.status.success()
            || (!err.contains("restore it from a backup") && err.contains("directory")),
        "reads work, or the message names the directory: {err}"
    );
}

fn integrity(db: &Path) -> String {
    Connection::open(db)
        .expect("open")
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check")
}
