//! Executing runs: the real binary claims, runs, retries and records jobs on a temp database.
//! Every test polls to a deadline; background ticks and job processes are killed on drop.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{
    assert_given_back, event_kinds, json, last_attempt, last_run_id, never, process_alive,
    read_pid, run_row, said_one_line, sh_quote, status_of, stderr, stdout, wait_until, wrapped, Bg,
    Env, Strays, Val, OUT_OF_FILES, RETRY_AT_ONCE,
};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// An integer field of an event's JSON detail.
fn detail_i64(detail: &Val, field: &str) -> i64 {
    json(&detail.string())[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} is not an integer in {detail:?}"))
}

/// Run ticks (synchronously) until `done` or the deadline; every tick must exit 0.
/// Returns each tick's stderr, in order.
fn tick_until(
    env: &Env,
    timeout: Duration,
    what: &str,
    args: &[&str],
    mut done: impl FnMut() -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut errs = Vec::new();
    let mut tick = vec!["tick"];
    tick.extend_from_slice(args);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} ticking until {what}; stderr so far: {errs:?}"
        );
        let out = env.run(&tick);
        assert!(out.status.success(), "tick failed: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "a tick prints nothing on stdout");
        errs.push(stderr(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
    errs
}

/// Insert `runs` manual runs of schedule `name`, all long due.
fn insert_due_runs(env: &Env, name: &str, runs: i64) {
    let past: i64 = 1_600_000_000; // 2020: long due
    let inserted = env.sql.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command, workdir,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key, created_at)
         SELECT d.id, 'manual', $1, 'pending', $1, d.command, d.workdir, d.max_attempts, d.timeout_secs,
             d.backoff_base_secs, d.backoff_max_secs, d.name || '@bulk:' || n.i, $1
         FROM n, job_definitions d WHERE d.name = $3",
        &[&past, &runs, &name],
    );
    assert_eq!(inserted as i64, runs);
}

// ---------------------------------------------------------------------------
// (1) many runs, four concurrent ticks: each executed exactly once
// ---------------------------------------------------------------------------

#[test]
fn two_thousand_runs_drained_by_four_concurrent_ticks_each_run_exactly_once() {
    const RUNS: i64 = 2000;
    let env = Env::init();
    let file = env.path("ids");
    let command = format!("echo $RUNNER_RUN_ID >> {}", sh_quote(&file));
    env.add("drain", &["--overlap", "allow"], &command);
    insert_due_runs(&env, "drain", RUNS);

    let started = Instant::now();
    // A safety net against a hang, not a speed test: 2,000 spawns on a loaded 2-core machine
    // can take minutes.
    let deadline = started + Duration::from_secs(900);
    let mut owners_used = HashSet::new();
    let mut round = 0;
    while env.sql.query_i64(
        "SELECT count(*) FROM job_runs WHERE status IN ('pending', 'running')",
        &[],
    ) > 0
    {
        assert!(Instant::now() < deadline, "runs not drained in time");
        round += 1;
        let ticks: Vec<Bg> = (0..4)
            .map(|i| {
                let owner = format!("tick-{i}");
                owners_used.insert(owner.clone());
                Bg::spawn(
                    &env,
                    &format!("tick-{round}-{i}"),
                    &[
                        "tick",
                        "--concurrency",
                        "4",
                        "--max-tick",
                        "120s",
                        "--owner",
                        &owner,
                    ],
                )
            })
            .collect();
        for tick in ticks {
            let out = tick.finish(Duration::from_secs(150));
            assert!(out.status.success(), "tick failed: {}", stderr(&out));
            assert_eq!(stdout(&out), "");
            assert_eq!(stderr(&out), "", "a tick whose jobs succeed prints nothing");
        }
    }
    let elapsed = started.elapsed();
    eprintln!("drained {RUNS} runs with 4 ticks in {elapsed:?} ({round} round(s))");

    let expected: HashSet<String> = env
        .sql
        .query_strings("SELECT CAST(id AS TEXT) FROM job_runs", &[])
        .into_iter()
        .collect();
    assert_eq!(expected.len() as i64, RUNS);
    let text = fs::read_to_string(&file).expect("ids file");
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        *seen.entry(line).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "ids executed more than once: {twice:?}");
    let got: HashSet<String> = seen.keys().map(|s| s.to_string()).collect();
    assert_eq!(got, expected, "every run id appears exactly once");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded' AND attempt = 1",
            &[]
        ),
        RUNS
    );
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_attempts", &[]),
        RUNS
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE kind = 'SUCCEEDED'",
            &[]
        ),
        RUNS
    );
    let owners = env
        .sql
        .query_i64("SELECT count(DISTINCT owner) FROM job_attempts", &[]);
    assert!(
        owners >= 2,
        "the four ticks should share the work, only {owners} owner(s) did"
    );
}

// ---------------------------------------------------------------------------
// (1b) short jobs are prepared ahead of a free slot, but never run ahead of it
// ---------------------------------------------------------------------------

/// While its jobs end quickly, a tick holds the next runs prepared at their gate (claimed, started
/// and recorded); their commands still wait for a free slot: at most `--concurrency` commands
/// run at once, and every run executes once.
#[test]
fn a_tick_that_prepares_short_jobs_ahead_never_runs_more_than_its_concurrency() {
    const RUNS: i64 = 300;
    const CONCURRENCY: i64 = 3;
    let env = Env::init();
    let (lock, count, peaks) = (env.path("lock"), env.path("count"), env.path("peaks"));
    fs::write(&count, "0\n").expect("count file");
    // Each job counts itself in and out under a lock, and notes how many ran as it came in.
    let (lock, count, peaks) = (sh_quote(&lock), sh_quote(&count), sh_quote(&peaks));
    let command = format!(
        "exec 9>>{lock}; flock 9; n=$(($(cat {count}) + 1)); echo $n >{count}; \
         echo \"$RUNNER_RUN_ID $n\" >>{peaks}; flock -u 9; flock 9; \
         echo $(($(cat {count}) - 1)) >{count}; flock -u 9"
    );
    env.add("short", &["--overlap", "allow"], &command);
    insert_due_runs(&env, "short", RUNS);

    // A safety net against a hang, not a speed test.
    let concurrency = CONCURRENCY.to_string();
    let (out, _) = env.tick_within(
        &["--concurrency", &concurrency, "--max-tick", "15m"],
        Duration::from_secs(1200),
    );
    assert!(out.status.success(), "tick failed: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "a tick whose jobs succeed prints nothing");

    let text = fs::read_to_string(env.path("peaks")).expect("peaks file");
    let mut runs_seen = HashSet::new();
    for line in text.lines() {
        let (run, running) = line.split_once(' ').expect("RUN COUNT");
        assert!(
            runs_seen.insert(run.to_string()),
            "run {run} executed twice"
        );
        let running: i64 = running.parse().expect("a count");
        assert!(
            (1..=CONCURRENCY).contains(&running),
            "{running} commands ran at once with --concurrency {CONCURRENCY}"
        );
    }
    assert_eq!(runs_seen.len() as i64, RUNS, "every run executed");
    assert_eq!(
        fs::read_to_string(env.path("count")).expect("count").trim(),
        "0"
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded' AND attempt = 1",
            &[]
        ),
        RUNS
    );
}

// ---------------------------------------------------------------------------
// (2) timeout: SIGTERM ignored → SIGKILL after the grace, grandchild included
// ---------------------------------------------------------------------------

/// A job that ignores SIGTERM (and whose child does too) is SIGKILLed 10 s after its timeout,
/// recorded as TIMEOUT with one line for the dead run, and nothing of it survives.
#[test]
fn timeout_kills_a_job_ignoring_sigterm_and_its_grandchild() {
    let env = Env::init();
    let mut strays = Strays::default();
    let pidfile = env.path("grandchild.pid");
    let command = format!(
        "trap '' TERM; sleep 60 & echo $! > {}; wait",
        sh_quote(&pidfile)
    );
    env.add(
        "stubborn",
        // Long enough for the shell to set its trap before the timeout, however loaded the
        // machine: a SIGTERM before it would simply end the job.
        &["--timeout", "5s", "--max-attempts", "1"],
        &command,
    );
    env.ok(&["run", "stubborn"]);
    let run_id = last_run_id(&env, "stubborn");
    let started = Instant::now();
    let tick = Bg::spawn(&env, "tick", &["tick"]);
    let grandchild = read_pid(&pidfile, Duration::from_secs(10));
    strays.pid(grandchild);
    let job = env.sql.query_i64(
        "SELECT child_pid FROM job_attempts WHERE run_id = $1",
        &[&run_id],
    ) as u32;
    strays.group(job);
    assert!(process_alive(grandchild));

    let out = tick.finish(Duration::from_secs(120));
    let elapsed = started.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    // 5 s timeout, SIGTERM ignored, SIGKILL after the 10 s grace; well before the job's 60 s.
    assert!(
        elapsed >= Duration::from_secs(15) && elapsed < Duration::from_secs(58),
        "killed after {elapsed:?}"
    );
    wait_until(Duration::from_secs(5), "the grandchild to die", || {
        !process_alive(grandchild)
    });
    assert!(!process_alive(job), "the job's shell survived");
    assert_eq!(status_of(&env, run_id), "dead");
    assert_eq!(
        env.sql
            .query_opt_string("SELECT error_code FROM job_runs WHERE id = $1", &[&run_id])
            .as_deref(),
        Some("TIMEOUT")
    );
    assert_eq!(
        env.sql
            .query_opt_string(
                "SELECT error_code FROM job_attempts WHERE run_id = $1 AND attempt = 1",
                &[&run_id]
            )
            .as_deref(),
        Some("TIMEOUT")
    );
    // The detail says what happened: SIGTERM did not end it, SIGKILL did.
    let detail = env.sql.query_string(
        "SELECT error_detail FROM job_attempts WHERE run_id = $1 AND attempt = 1",
        &[&run_id],
    );
    assert!(
        detail.starts_with("timed out after 5s: SIGTERM at ") && detail.contains(", SIGKILL at "),
        "{detail}"
    );
    assert!(!detail.contains("exited"), "{detail}");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one dead line: {err}");
    assert!(
        err.contains("stubborn") && err.contains("is dead after 1 attempt(s): TIMEOUT"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// (3) retries: exactly max_attempts, jittered exponential delays, then dead
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct Attempt {
    attempt: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: Option<i64>,
    error_code: Option<String>,
}

#[test]
fn failing_job_retries_within_jitter_bounds_then_goes_dead_with_one_stderr_line() {
    let env = Env::init();
    let stamps = env.path("stamps");
    // Each attempt logs when it ran (ns resolution), then fails.
    let command = format!(
        "echo \"$RUNNER_ATTEMPT $(date +%s.%N)\" >> {}; exit 3",
        sh_quote(&stamps)
    );
    env.add(
        "flaky",
        &[
            "--max-attempts",
            "3",
            "--backoff-base",
            "1s",
            "--backoff-max",
            "2s",
        ],
        &command,
    );
    env.ok(&["run", "flaky"]);
    let run_id = last_run_id(&env, "flaky");
    let errs = tick_until(
        &env,
        Duration::from_secs(30),
        "the run is dead",
        &[],
        || status_of(&env, run_id) == "dead",
    );

    assert_eq!(
        env.sql
            .query_opt_string("SELECT error_code FROM job_runs WHERE id = $1", &[&run_id])
            .as_deref(),
        Some("EXIT:3")
    );
    assert_eq!(
        env.sql
            .query_i64("SELECT attempt FROM job_runs WHERE id = $1", &[&run_id]),
        3
    );
    let attempts: Vec<Attempt> = env
        .sql
        .query_rows(
            "SELECT attempt, started_at, finished_at, exit_code, error_code FROM job_attempts
             WHERE run_id = $1 ORDER BY attempt",
            &[&run_id],
        )
        .iter()
        .map(|r| Attempt {
            attempt: r[0].i64(),
            started_at: r[1].i64(),
            finished_at: r[2].i64(),
            exit_code: r[3].opt_i64(),
            error_code: r[4].opt_string(),
        })
        .collect();
    assert_eq!(attempts.len(), 3, "exactly 3 attempts: {attempts:?}");
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.attempt, i as i64 + 1);
        assert_eq!(a.exit_code, Some(3));
        assert_eq!(a.error_code.as_deref(), Some("EXIT:3"));
    }
    let retries: Vec<(i64, i64, i64)> = env
        .sql
        .query_rows(
            "SELECT at, detail FROM job_events
             WHERE run_id = $1 AND kind = 'RETRY_SCHEDULED' ORDER BY id",
            &[&run_id],
        )
        .iter()
        .map(|r| {
            (
                r[0].i64(),
                detail_i64(&r[1], "next_attempt"),
                detail_i64(&r[1], "run_at_epoch"),
            )
        })
        .collect();
    assert_eq!(retries.len(), 2, "two retries scheduled: {retries:?}");
    for (n, (at, next, run_at)) in retries.iter().enumerate() {
        let attempt = n + 1; // the failed attempt
        let run_at = *run_at;
        assert_eq!(*next, attempt as i64 + 1);
        let finished = attempts[n].finished_at;
        assert_eq!(*at, finished);
        // d = min(max, base * 2^(n-1)); run_at is a whole second d/2 to d after the exact
        // failure time (the last one within d when none is d/2 or more after it), finished_at
        // the failure time rounded down: so run_at - finished_at is in [ceil(d/2), d], never
        // past the cap.
        let d_ms = (1000_i64 << (attempt - 1)).min(2000);
        let lo = (d_ms / 2 + 999) / 1000;
        let hi = d_ms / 1000;
        let delay = run_at - finished;
        assert!(
            (lo..=hi).contains(&delay),
            "retry after attempt {attempt}: delay {delay}s not in [{lo}, {hi}]"
        );
        // The next attempt started no sooner than scheduled, and not a backoff of the defaults
        // (minutes) later: ticks run every 100 ms, and a loaded machine gets a wide margin.
        let next_started = attempts[n + 1].started_at;
        assert!(
            next_started >= run_at && next_started <= run_at + 30,
            "attempt {} started at {next_started}, scheduled for {run_at}",
            attempt + 1
        );
    }
    // In real time too: attempt n+1 starts no sooner than d/2 after attempt n ran (the DB keeps
    // whole seconds only), and not minutes later than d. With d = 1 s no whole second may lie in
    // [d/2, d] after the failure: the cap wins, so the retry is only sure to come after it.
    let runs: Vec<(u32, f64)> = fs::read_to_string(&stamps)
        .expect("stamps")
        .lines()
        .map(|l| {
            let (n, t) = l.split_once(' ').expect("stamp line");
            (n.parse().expect("attempt"), t.parse().expect("time"))
        })
        .collect();
    assert_eq!(
        runs.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "{runs:?}"
    );
    for n in 1..=2_usize {
        let d = (1u64 << (n - 1)).min(2) as f64;
        let soonest = if d >= 2.0 { d / 2.0 } else { 0.0 };
        let gap = runs[n].1 - runs[n - 1].1;
        assert!(
            gap > soonest && gap <= d + 30.0,
            "attempt {} ran {gap:.3}s after attempt {n}; the delay must be in ({soonest}, {d}]s",
            n + 1,
        );
    }
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE run_id = $1 AND kind = 'FAILED'",
            &[&run_id]
        ),
        3
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE run_id = $1 AND kind = 'DEAD'",
            &[&run_id]
        ),
        1
    );

    // Only the tick that made the run dead printed, and exactly one line.
    let printed: Vec<&String> = errs.iter().filter(|e| !e.is_empty()).collect();
    assert_eq!(printed.len(), 1, "tick stderr: {errs:?}");
    let line = printed[0];
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("flaky") && line.contains(&run_id.to_string()) && line.contains("EXIT:3"),
        "{line}"
    );
    assert_eq!(errs.last(), Some(printed[0]), "the last tick made it dead");
}

/// Many runs failing together must not retry in lockstep, and none sooner than d/2.
#[test]
fn simultaneous_failures_retry_spread_over_half_to_full_delay() {
    const RUNS: usize = 20;
    let env = Env::init();
    env.add(
        "herd",
        &[
            "--overlap",
            "allow",
            "--max-attempts",
            "2",
            "--backoff-base",
            "4s",
            "--backoff-max",
            "4s",
        ],
        "exit 3",
    );
    for _ in 0..RUNS {
        env.ok(&["run", "herd"]);
    }
    let out = env.run(&["tick", "--concurrency", "20", "--batch", "20"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "first failures are retried, not dead");
    let delays: Vec<i64> = env
        .sql
        .query_rows(
            "SELECT e.detail, a.finished_at
             FROM job_events e JOIN job_attempts a ON a.run_id = e.run_id AND a.attempt = 1
             WHERE e.kind = 'RETRY_SCHEDULED'",
            &[],
        )
        .iter()
        .map(|r| detail_i64(&r[0], "run_at_epoch") - r[1].i64())
        .collect();
    assert_eq!(delays.len(), RUNS);
    // d = 4 s: each retry due at a whole second 2 s to 4 s after the exact failure time; counted
    // from the failure time rounded down (`finished_at`), 2 s to 4 s too: never past the cap.
    assert!(
        delays.iter().all(|d| (2..=4).contains(d)),
        "delays out of [2, 4]: {delays:?}"
    );
    let distinct: HashSet<_> = delays.iter().collect();
    assert!(distinct.len() >= 2, "retries in lockstep: {delays:?}");
}

// ---------------------------------------------------------------------------
// (4) fencing: a stale lease token cannot complete the run; heartbeat notices the loss
// ---------------------------------------------------------------------------

fn forge_lease(env: &Env, run_id: i64) {
    let changed = env.sql.exec(
        "UPDATE job_runs SET lease_token = 'forged-token', owner = 'other-runner'
         WHERE id = $1 AND status = 'running'",
        &[&run_id],
    );
    assert_eq!(changed, 1);
}

fn assert_untouched_by_stale_runner(env: &Env, run_id: i64, refused: &str) {
    // Every column: the run as the stale runner found it must be exactly as forged.
    let row = env.sql.query_row(
        "SELECT status, lease_token, owner, error_code, error_detail, finished_at
         FROM job_runs WHERE id = $1",
        &[&run_id],
    );
    assert_eq!(
        row,
        [
            Val::Text("running".into()),
            Val::Text("forged-token".into()),
            Val::Text("other-runner".into()),
            Val::Null,
            Val::Null,
            Val::Null
        ],
        "status, lease_token, owner, error_code, error_detail, finished_at"
    );
    let lost: Vec<String> = env
        .sql
        .query_column(
            "SELECT detail FROM job_events WHERE run_id = $1 AND kind = 'LEASE_LOST'",
            &[&run_id],
        )
        .iter()
        .map(|detail| {
            json(&detail.string())["refused"]
                .as_str()
                .unwrap_or_else(|| panic!("no refused outcome in {detail:?}"))
                .to_string()
        })
        .collect();
    assert_eq!(lost, vec![refused.to_string()], "one LEASE_LOST event");
    assert_eq!(
        env.sql.query_i64(
            &format!(
                "SELECT count(*) FROM job_events WHERE run_id = {run_id}
             AND kind IN ('SUCCEEDED', 'FAILED', 'RETRY_SCHEDULED', 'DEAD')"
            ),
            &[]
        ),
        0,
        "no outcome recorded by the stale runner"
    );
}

#[test]
fn completion_with_a_stale_lease_token_is_refused() {
    let env = Env::init();
    let mut strays = Strays::default();
    let started = env.path("started");
    let release = env.path("release");
    let finished = env.path("finished");
    let command = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done; touch {}",
        sh_quote(&started),
        sh_quote(&release),
        sh_quote(&finished)
    );
    env.add("fenced", &[], &command);
    env.ok(&["run", "fenced"]);
    let run_id = last_run_id(&env, "fenced");
    // A long lease: the first heartbeat (lease/3 = 20 s) comes long after the job ends, so it
    // is the completion write that meets the forged token.
    let tick = Bg::spawn(&env, "tick", &["tick", "--lease", "60s"]);
    wait_until(Duration::from_secs(10), "the job to start", || {
        started.exists()
    });
    strays.group(env.sql.query_i64(
        "SELECT child_pid FROM job_attempts WHERE run_id = $1",
        &[&run_id],
    ) as u32);
    forge_lease(&env, run_id);
    fs::write(&release, "").expect("release");
    let out = tick.finish(Duration::from_secs(15));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(finished.exists(), "the job ran to its end");
    assert_untouched_by_stale_runner(&env, run_id, "succeeded");
}

/// Two jobs end while the tick is stopped, so one poll mostly records both ends together (its
/// output readers, woken with it, may leave one for the next poll); one of them lost its lease
/// meanwhile. Each end is fenced by its own token, grouped or not: the stale one is refused and
/// leaves its run untouched, the other lands whole (run, attempt, event).
#[test]
fn ends_recorded_together_are_each_fenced_by_their_own_token() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let env = Env::init();
    let mut strays = Strays::default();
    let started = env.path("started");
    let release = env.path("release");
    let command = format!(
        "touch {}.$RUNNER_RUN_ID; while [ ! -e {} ]; do sleep 0.01; done",
        sh_quote(&started),
        sh_quote(&release)
    );
    env.add("pair", &["--overlap", "allow"], &command);
    let (stale, fresh) = (env.enqueue("pair"), env.enqueue("pair"));
    // A long lease: no heartbeat comes before the ends are written.
    let tick = Bg::spawn(&env, "tick", &["tick", "--lease", "60s"]);
    let shells: Vec<u32> = [stale, fresh]
        .iter()
        .map(|run_id| {
            let marker = format!("{}.{run_id}", started.display());
            wait_until(Duration::from_secs(10), "both jobs to start", || {
                std::path::Path::new(&marker).exists()
            });
            let shell = env.sql.query_i64(
                "SELECT child_pid FROM job_attempts WHERE run_id = $1",
                &[run_id],
            ) as u32;
            strays.group(shell);
            shell
        })
        .collect();
    forge_lease(&env, stale);
    // Stopped, the tick cannot reap either job before both have ended.
    let tick_pid = Pid::from_raw(tick.pid() as i32);
    kill(tick_pid, Signal::SIGSTOP).expect("SIGSTOP the tick");
    fs::write(&release, "").expect("release");
    wait_until(Duration::from_secs(10), "both jobs to end", || {
        shells.iter().all(|&shell| !process_alive(shell))
    });
    kill(tick_pid, Signal::SIGCONT).expect("SIGCONT the tick");
    let out = tick.finish(Duration::from_secs(15));
    assert!(out.status.success(), "{}", stderr(&out));

    assert_untouched_by_stale_runner(&env, stale, "succeeded");
    assert_eq!(status_of(&env, fresh), "succeeded");
    let attempt = env.sql.query_row(
        "SELECT outcome, CASE WHEN finished_at IS NULL THEN 0 ELSE 1 END FROM job_attempts
         WHERE run_id = $1",
        &[&fresh],
    );
    assert_eq!(
        attempt,
        [Val::Text("succeeded".into()), Val::Int(1)],
        "outcome, closed"
    );
    assert_eq!(
        event_kinds(&env, fresh),
        ["ENQUEUED", "CLAIMED", "SUCCEEDED"]
    );
}

#[test]
fn heartbeat_that_finds_its_lease_taken_over_kills_the_job() {
    let env = Env::init();
    let mut strays = Strays::default();
    let pidfile = env.path("sleep.pid");
    // Far longer than any bound below: a job that was not stopped cannot pass for one that was.
    let command = format!("sleep 300 & echo $! > {}; wait", sh_quote(&pidfile));
    env.add("hb", &[], &command);
    env.ok(&["run", "hb"]);
    let run_id = last_run_id(&env, "hb");
    let started = Instant::now();
    // Lease 3 s: heartbeat every second.
    let tick = Bg::spawn(&env, "tick", &["tick", "--lease", "3s"]);
    let sleep_pid = read_pid(&pidfile, Duration::from_secs(10));
    strays.pid(sleep_pid);
    let shell = env.sql.query_i64(
        "SELECT child_pid FROM job_attempts WHERE run_id = $1",
        &[&run_id],
    ) as u32;
    strays.group(shell);
    forge_lease(&env, run_id);
    let out = tick.finish(Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(150),
        "the job was not stopped before its end: {:?}",
        started.elapsed()
    );
    wait_until(
        Duration::from_secs(30),
        "the job's processes to die",
        || !process_alive(sleep_pid) && !process_alive(shell),
    );
    assert_untouched_by_stale_runner(&env, run_id, "pending");
}

// ---------------------------------------------------------------------------
// (5) output: 50 MB to stdout, the last 64 KiB kept
// ---------------------------------------------------------------------------

#[test]
fn fifty_megabytes_of_stdout_finish_and_the_last_64_kib_are_kept() {
    let env = Env::init();
    env.add(
        "loud",
        &[],
        r"head -c 50000000 /dev/zero | tr '\0' x; printf END",
    );
    env.ok(&["run", "loud"]);
    let run_id = last_run_id(&env, "loud");
    let out = Bg::spawn(&env, "tick", &["tick"]).finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert_eq!(status_of(&env, run_id), "succeeded");
    let attempt = env.sql.query_row(
        "SELECT stdout_tail, stdout_bytes FROM job_attempts WHERE run_id = $1",
        &[&run_id],
    );
    let (tail, bytes) = (attempt[0].bytes(), attempt[1].i64());
    assert_eq!(bytes, 50_000_003);
    assert_eq!(tail.len(), 65536);
    assert!(tail.ends_with(b"xEND"));
    assert!(tail[..65533].iter().all(|&b| b == b'x'));
}

// ---------------------------------------------------------------------------
// (6) commands and directories that do not exist
// ---------------------------------------------------------------------------

/// Documented behaviour: the command is run by `/bin/sh -c`, so a command that does not exist is
/// the shell's exit 127 (`EXIT:127`); `SPAWN:NOT_FOUND` means `/bin/sh` could not be started at
/// all, i.e. the working directory vanished after `schedule add` (which rejects a missing one).
/// `run --wait` exits 127 in both cases.
#[test]
fn missing_command_is_exit_127_and_missing_workdir_is_spawn_not_found() {
    let env = Env::init();
    env.add(
        "typo",
        &["--max-attempts", "1"],
        "no-such-command-for-runner-tests --flag",
    );
    env.ok(&["run", "typo"]);
    let typo = last_run_id(&env, "typo");
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, typo), "dead");
    let attempt = env.sql.query_row(
        "SELECT error_code, exit_code, stderr_tail FROM job_attempts WHERE run_id = $1",
        &[&typo],
    );
    let (code, exit, err_tail) = (
        attempt[0].opt_string(),
        attempt[1].opt_i64(),
        attempt[2].bytes(),
    );
    assert_eq!(code.as_deref(), Some("EXIT:127"));
    assert_eq!(exit, Some(127));
    assert!(
        String::from_utf8_lossy(&err_tail).contains("no-such-command-for-runner-tests"),
        "the shell's complaint is kept"
    );
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("EXIT:127"), "{err}");

    // A missing --workdir is refused when the schedule is defined.
    let missing = env.path("no-such-dir");
    let err = env.fails(
        2,
        &[
            "schedule",
            "add",
            "nowhere",
            "--cron",
            &never(),
            "--workdir",
            missing.to_str().expect("utf-8"),
            "--",
            "true",
        ],
    );
    assert!(err.contains("no-such-dir"), "{err}");

    // A workdir removed after the schedule was defined: /bin/sh cannot start there.
    let gone = env.path("gone");
    fs::create_dir(&gone).expect("mkdir");
    env.add(
        "moved",
        &[
            "--max-attempts",
            "1",
            "--workdir",
            gone.to_str().expect("utf-8"),
        ],
        "true",
    );
    fs::remove_dir(&gone).expect("rmdir");
    env.ok(&["run", "moved"]);
    let moved = last_run_id(&env, "moved");
    let out = env.run(&["tick"]);
    assert!(
        out.status.success(),
        "a spawn failure does not crash the tick"
    );
    assert_eq!(status_of(&env, moved), "dead");
    assert_eq!(
        env.sql
            .query_opt_string("SELECT error_code FROM job_runs WHERE id = $1", &[&moved])
            .as_deref(),
        Some("SPAWN:NOT_FOUND")
    );
    let detail = env
        .sql
        .query_opt_string(
            "SELECT error_detail FROM job_attempts WHERE run_id = $1",
            &[&moved],
        )
        .unwrap_or_default();
    assert!(
        detail.contains("gone"),
        "detail names the directory: {detail}"
    );
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("SPAWN:NOT_FOUND"), "{err}");

    // A removed workdir whose path is longer than a detail may be (1 KiB): the detail is cut,
    // not refused by the database with the whole record (which left the run running until its
    // lease expired, and the tick claiming nothing more).
    let deep = (0..5).fold(env.path("deep"), |dir, _| dir.join("d".repeat(200)));
    fs::create_dir_all(&deep).expect("mkdir -p");
    env.add(
        "deep",
        &[
            "--max-attempts",
            "1",
            "--workdir",
            deep.to_str().expect("utf-8"),
        ],
        "true",
    );
    fs::remove_dir_all(env.path("deep")).expect("rm -r");
    env.ok(&["run", "deep"]);
    let deep_run = last_run_id(&env, "deep");
    env.ok(&["run", "typo"]);
    let behind = last_run_id(&env, "typo");
    let out = env.run(&["tick", "--concurrency", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, deep_run), "dead");
    assert_eq!(status_of(&env, behind), "dead", "the tick went on claiming");
    let detail = env
        .sql
        .query_opt_string(
            "SELECT error_detail FROM job_runs WHERE id = $1 AND error_code = 'SPAWN:NOT_FOUND'",
            &[&deep_run],
        )
        .expect("SPAWN:NOT_FOUND, with a detail");
    assert!(
        detail.len() <= 1024 && detail.starts_with("cannot start /bin/sh in "),
        "{} bytes: {detail}",
        detail.len()
    );

    // `run --wait` reports both the same way, with exit 127.
    let out = env.run(&["run", "typo", "--wait"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    let out = env.run(&["run", "moved", "--wait"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert!(stderr(&out).contains("SPAWN:NOT_FOUND"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// (7) what a job sees
// ---------------------------------------------------------------------------

#[test]
fn job_sees_its_environment_and_workdir_across_attempts() {
    let env = Env::init();
    let work = env.path("work");
    fs::create_dir(&work).expect("mkdir");
    let command = r#"{ echo "job=$RUNNER_JOB"; echo "run=$RUNNER_RUN_ID"; echo "attempt=$RUNNER_ATTEMPT"; echo "at=$RUNNER_SCHEDULED_AT"; echo "key=$RUNNER_IDEMPOTENCY_KEY"; echo "token=$RUNNER_LEASE_TOKEN"; echo "inherited=$RUNNER_TEST_INHERITED"; echo "pwd=$(pwd -P)"; } > "env.$RUNNER_ATTEMPT"; [ "$RUNNER_ATTEMPT" -ge 2 ]"#;
    env.add_at(
        Some("2030-01-01T11:59:00Z"),
        "envjob",
        "0 12 * * *",
        &[
            &["--workdir", work.to_str().expect("utf-8")][..],
            &RETRY_AT_ONCE,
        ]
        .concat(),
        command,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !work.join("env.2").exists() {
        assert!(Instant::now() < deadline, "attempt 2 never ran");
        let out = env
            .cmd()
            .args(["--now", "2030-01-01T12:00:05Z", "tick"])
            .env("RUNNER_TEST_INHERITED", "from-the-tick")
            .output()
            .expect("tick");
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let run_id = last_run_id(&env, "envjob");
    wait_until(Duration::from_secs(10), "the run to succeed", || {
        status_of(&env, run_id) == "succeeded"
    });
    assert!(
        !env.path("env.1").exists(),
        "the job ran in its workdir, not the tick's"
    );

    let read = |attempt: u32| -> BTreeMap<String, String> {
        fs::read_to_string(work.join(format!("env.{attempt}")))
            .expect("env file")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let key = env
        .sql
        .query_opt_string(
            "SELECT idempotency_key FROM job_runs WHERE id = $1",
            &[&run_id],
        )
        .expect("key");
    let real_work = fs::canonicalize(&work).expect("canonicalize");
    let mut tokens = HashSet::new();
    for attempt in 1..=2 {
        let seen = read(attempt);
        assert_eq!(seen["job"], "envjob");
        assert_eq!(seen["run"], run_id.to_string());
        assert_eq!(seen["attempt"], attempt.to_string());
        let at = chrono::DateTime::parse_from_rfc3339(&seen["at"])
            .unwrap_or_else(|e| panic!("RUNNER_SCHEDULED_AT {:?}: {e}", seen["at"]));
        assert_eq!(at.timestamp(), 1_893_499_200, "2030-01-01T12:00:00Z");
        assert_eq!(
            seen["key"], key,
            "the idempotency key is stable across attempts"
        );
        assert!(!key.is_empty());
        let token = env
            .sql
            .query_opt_string(
                "SELECT lease_token FROM job_attempts WHERE run_id = $1 AND attempt = $2",
                &[&run_id, &attempt],
            )
            .expect("token");
        assert_eq!(seen["token"], token);
        tokens.insert(token);
        assert_eq!(seen["inherited"], "from-the-tick");
        assert_eq!(seen["pwd"], real_work.to_string_lossy());
    }
    assert_eq!(tokens.len(), 2, "each attempt has its own lease token");
}

// ---------------------------------------------------------------------------
// (8) overlap: forbid skips a newly due run while one is running; allow runs both
// ---------------------------------------------------------------------------

const T0: &str = "2030-01-01T00:00:30Z";
const T1: &str = "2030-01-01T00:01:00Z";
const T2: &str = "2030-01-01T00:02:00Z";
const T2_EPOCH: i64 = 1_893_456_120;

fn overlap_job(env: &Env, policy: &str) {
    let command = format!(
        "echo $RUNNER_RUN_ID >> {}; while [ ! -e {} ]; do sleep 0.05; done",
        sh_quote(&env.path("started")),
        sh_quote(&env.path("release"))
    );
    env.add_at(
        Some(T0),
        "every-minute",
        "* * * * *",
        &["--overlap", policy],
        &command,
    );
}

fn started_lines(env: &Env) -> usize {
    fs::read_to_string(env.path("started"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn overlap_forbid_skips_a_newly_due_run_while_one_is_running() {
    let env = Env::init();
    overlap_job(&env, "forbid");
    let tick_a = Bg::spawn(&env, "tick-a", &["--now", T1, "tick"]);
    wait_until(Duration::from_secs(10), "the 00:01 run to start", || {
        started_lines(&env) == 1
    });
    let out = env.run(&["--now", T2, "tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let run = env.sql.query_row(
        "SELECT status, skip_reason FROM job_runs WHERE scheduled_for = $1",
        &[&T2_EPOCH],
    );
    let (status, reason) = (run[0].string(), run[1].opt_string());
    assert_eq!(status, "skipped");
    let reason = reason.unwrap_or_default();
    assert!(reason.to_lowercase().contains("overlap"), "{reason}");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE kind = 'SKIPPED'",
            &[]
        ),
        1
    );
    assert_eq!(started_lines(&env), 1, "the skipped run never started");
    fs::write(env.path("release"), "").expect("release");
    let out = tick_a.finish(Duration::from_secs(70));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        env.sql
            .query_strings("SELECT status FROM job_runs ORDER BY scheduled_for", &[]),
        vec!["succeeded", "skipped"]
    );
}

#[test]
fn overlap_allow_runs_both_at_once() {
    let env = Env::init();
    overlap_job(&env, "allow");
    let tick_a = Bg::spawn(&env, "tick-a", &["--now", T1, "tick"]);
    wait_until(Duration::from_secs(10), "the 00:01 run to start", || {
        started_lines(&env) == 1
    });
    let tick_b = Bg::spawn(&env, "tick-b", &["--now", T2, "tick"]);
    wait_until(
        Duration::from_secs(10),
        "both runs to run side by side",
        || {
            started_lines(&env) == 2
                && env.sql.query_i64(
                    "SELECT count(*) FROM job_runs WHERE status = 'running'",
                    &[],
                ) == 2
        },
    );
    fs::write(env.path("release"), "").expect("release");
    for tick in [tick_a, tick_b] {
        let out = tick.finish(Duration::from_secs(70));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(
        env.sql
            .query_strings("SELECT status FROM job_runs ORDER BY scheduled_for", &[]),
        vec!["succeeded", "succeeded"]
    );
}

// ---------------------------------------------------------------------------
// (9) run --wait, and a quiet idle tick
// ---------------------------------------------------------------------------

/// A run that goes dead under `run --wait` gets one line from runner, after the job's own
/// output, and the job's exit code. It used to get two: the tick's "is dead after" line and
/// `run --wait`'s own "attempt 1 failed ...; the run is dead".
#[test]
fn run_wait_says_a_dead_run_in_one_line() {
    let env = Env::init();
    env.add(
        "doomed",
        &["--max-attempts", "1"],
        "echo err-line >&2; exit 3",
    );
    let out = env.run(&["run", "doomed", "--wait"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run = last_run_id(&env, "doomed");
    assert_eq!(status_of(&env, run), "dead");
    let said = stderr(&out);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines,
        [
            "err-line".to_string(),
            format!("runner: job doomed run {run} is dead after 1 attempt(s): EXIT:3")
        ],
        "{said}"
    );
}

#[test]
fn run_wait_streams_output_and_exits_with_the_job_code() {
    let env = Env::init();
    env.add("seven", &[], "echo out-line; echo err-line >&2; exit 7");
    env.add("fine", &[], "echo all-good");

    let out = env.run(&["run", "seven", "--wait"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stdout(&out).contains("out-line\n"), "{}", stdout(&out));
    assert!(stderr(&out).contains("err-line\n"), "{}", stderr(&out));
    assert!(!stdout(&out).contains("err-line"));
    let seven = last_run_id(&env, "seven");
    assert_eq!(
        env.sql
            .query_opt_string("SELECT error_code FROM job_runs WHERE id = $1", &[&seven])
            .as_deref(),
        Some("EXIT:7")
    );

    let out = env.run(&["run", "fine", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "all-good\n");
    assert_eq!(stderr(&out), "");
    assert_eq!(status_of(&env, last_run_id(&env, "fine")), "succeeded");

    // Nothing due (the failed run retries in 15-30 s): the tick is silent.
    let out = env.run(&["tick"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "");
}

#[test]
fn idle_tick_exits_zero_and_prints_nothing() {
    let env = Env::init();
    let started = Instant::now();
    let out = env.run(&["tick", "--max-tick", "3m"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "");
    // It does not wait out its --max-tick: a bound that says so on any machine, not a speed.
    assert!(
        started.elapsed() < Duration::from_secs(150),
        "an idle tick returns at once, took {:?}",
        started.elapsed()
    );
    env.add("later", &[], "true");
    let out = env.run(&["tick"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "");
}

// ---------------------------------------------------------------------------
// The signals a job starts with
// ---------------------------------------------------------------------------

/// A program a job `exec`s starts with no signal blocked, as it would from a terminal: one that
/// relies on SIGCHLD (a trap, an event loop) must get it. The tick used to block SIGCHLD in its
/// threads to hear its jobs end, and a spawned shell inherits its thread's mask.
#[test]
fn a_program_a_job_execs_starts_with_no_signal_blocked() {
    let env = Env::init();
    env.add(
        "masked",
        &["--overlap", "allow"],
        "exec grep SigBlk /proc/self/status",
    );
    let runs: Vec<i64> = (0..3).map(|_| env.enqueue("masked")).collect();
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for run in runs {
        let shown = String::from_utf8_lossy(&last_attempt(&env, run).stdout_tail).to_string();
        assert_eq!(shown.trim(), "SigBlk:\t0000000000000000", "run {run}");
    }
}

/// A tick started with SIGCHLD ignored (by a parent that set it so: it survives `exec`; here
/// coreutils' `env --ignore-signal`) still learns how its jobs ended: ignored, children reap
/// themselves and their exit codes are lost (every job used to end as `EXIT:-1`).
#[test]
fn a_tick_started_with_sigchld_ignored_still_records_exit_codes() {
    let env = Env::init();
    env.add("three", &["--max-attempts", "1"], "exit 3");
    let run = env.enqueue("three");
    let mut tick = env.cmd();
    tick.arg("tick");
    let out = wrapped(&["env", "--ignore-signal=CHLD"], &tick)
        .output()
        .expect("tick under env");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(run_row(&env, run).error_code.as_deref(), Some("EXIT:3"));
}

/// A tick started with a soft open-file limit too low for its jobs' pipes (`ulimit -S -n`)
/// raises its own up to the hard limit: before, every job failed to start (`SPAWN:OTHER`, an
/// attempt spent each tick until the run went dead). Each job gets the limit the tick was
/// started with back, and no descriptor of the tick's.
#[test]
fn a_tick_started_with_a_low_open_file_limit_runs_its_jobs_under_that_limit() {
    let env = Env::init();
    let runs: Vec<i64> = (0..6)
        .map(|i| {
            let name = format!("files-{i}");
            env.add(
                &name,
                &["--max-attempts", "1"],
                "ulimit -n; ls /proc/self/fd | wc -l",
            );
            env.enqueue(&name)
        })
        .collect();
    let out = env.ok_under_ulimit("-S -n 16", &["tick", "--concurrency", "6"]);
    assert_eq!(
        stderr(&out),
        "",
        "nothing to warn of: the hard limit allows enough"
    );
    for run in runs {
        assert_eq!(run_row(&env, run).error_code, None, "run {run}");
        assert_eq!(status_of(&env, run), "succeeded", "run {run}");
        // `ls` itself has stdin, stdout, stderr and the directory open.
        let output = String::from_utf8(last_attempt(&env, run).stdout_tail).expect("text");
        assert_eq!(output.split_whitespace().collect::<Vec<_>>(), ["16", "4"]);
    }
}

/// Where the hard limit is too low too, the tick runs as many jobs at a time as it has
/// descriptors for, and says so (cron mails it): the fix is the limit, not the jobs. Before, it
/// claimed and spawned for all its slots, and the jobs it had no pipes for failed to start
/// (`SPAWN:OTHER`, an attempt spent each): here 14 jobs held at once need 42 descriptors. (How
/// many run at a time depends on what the tick has open besides, which the test's own parents
/// may add to.)
#[test]
fn a_tick_whose_hard_open_file_limit_is_too_low_runs_fewer_jobs_at_a_time_and_says_so() {
    let env = Env::init();
    env.add(
        "many",
        &["--max-attempts", "1", "--overlap", "allow"],
        "sleep 0.2",
    );
    let runs: Vec<i64> = (0..14).map(|_| env.enqueue("many")).collect();
    let out = env.ok_under_ulimit("-n 40", &["tick", "--concurrency", "50"]);
    let warning = stderr(&out);
    for run in runs {
        assert_eq!(run_row(&env, run).error_code, None, "run {run}: {warning}");
        assert_eq!(status_of(&env, run), "succeeded", "run {run}: {warning}");
    }
    assert_eq!(
        warning.lines().count(),
        1,
        "one warning, nothing else: {warning}"
    );
    assert!(
        warning.starts_with(
            "runner: warning: the open-file limit (ulimit -n) is 40 and its hard limit allows no \
             more; --concurrency 50 needs "
        ) && warning.contains(" jobs at a time. Raise the hard limit (limits.conf, or `ulimit -Hn` as root), or lower --concurrency"),
        "{warning}"
    );
}

/// `runner tick ARGS` started by a shell that opens `inherited` descriptors on /dev/null (left
/// open across `exec`, as a careless parent leaves them) and sets the open-file limit (soft and
/// hard) to `limit`; its output, whatever its exit.
fn tick_under_file_limit(env: &Env, inherited: usize, limit: u64, args: &[&str]) -> Output {
    let mut cmd = env.cmd();
    cmd.arg("tick").args(args);
    let opened: String = (0..inherited)
        .map(|i| format!(" {}</dev/null", 5 + i))
        .collect();
    let script = format!("exec{opened} && ulimit -n {limit} && exec \"$@\"");
    wrapped(&["sh", "-c", &script, "sh"], &cmd)
        .output()
        .expect("spawn runner under ulimit")
}

/// Runs with one attempt each, side by side, that write to both pipes.
fn one_attempt_runs(env: &Env, count: usize) -> Vec<i64> {
    env.add(
        "fd",
        &["--max-attempts", "1", "--overlap", "allow"],
        "echo out; echo err >&2",
    );
    (0..count).map(|_| env.enqueue("fd")).collect()
}

/// The number of descriptors a tick's refusal says one job at a time needs.
fn least_files_said(refusal: &str) -> u64 {
    let (_, after) = refusal
        .split_once("one job at a time needs ")
        .unwrap_or_else(|| panic!("no least number of files in {refusal:?}"));
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no least number of files in {refusal:?}"))
}

/// Below the least a tick can run one job with (its database, its wake-up, what it inherited,
/// one job's pipes and one spawn's), it says so once and claims nothing: the runs stay pending,
/// no attempt spent. Before, it claimed them all and the jobs it had no descriptors for failed to
/// start, each run dead (`SPAWN:OTHER`) after its one attempt.
#[test]
fn a_tick_whose_open_file_limit_holds_no_job_says_so_and_claims_nothing() {
    let env = Env::init();
    let runs = one_attempt_runs(&env, 6);
    let out = tick_under_file_limit(&env, 3, 16, &["--concurrency", "4"]);
    let said = said_one_line(
        &out,
        1,
        "runner: error: running jobs: the open-file limit (ulimit -n) is 16 and its hard limit \
         allows no more; ",
    );
    assert!(
        said.contains("so the tick claims no run (they stay pending, no attempt spent)"),
        "{said}"
    );
    for run in runs {
        let row = run_row(&env, run);
        assert_eq!(
            (row.status.as_str(), row.error_code),
            ("pending", None),
            "run {run}"
        );
        let attempts = env.sql.query_row(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1",
            &[&run],
        );
        assert_eq!(attempts[0].i64(), 0, "run {run}: no attempt spent");
    }
}

/// At the least limit the tick says it needs, it runs one job at a time, and every job starts:
/// the count holds what the tick really has open (the database's files, the wake-up's socket
/// pair and eventfd, the output pump's epoll, descriptors it inherited) and what a spawn takes.
/// Before, its count of "64 besides the jobs" made it run one job at a time at any low limit,
/// and whatever the limit, the jobs after the first failed to start there.
#[test]
fn a_tick_at_the_least_open_file_limit_runs_every_job_one_at_a_time() {
    let env = Env::init();
    let runs = one_attempt_runs(&env, 8);
    let refusal = stderr(&tick_under_file_limit(&env, 3, 16, &["--concurrency", "4"]));
    let least = least_files_said(&refusal);
    let below = tick_under_file_limit(&env, 3, least - 1, &["--concurrency", "4"]);
    assert_eq!(below.status.code(), Some(1), "{}", stderr(&below));
    let out = tick_under_file_limit(&env, 3, least, &["--concurrency", "4"]);
    let warning = stderr(&out);
    assert!(out.status.success(), "{warning}");
    assert!(
        warning.contains("this tick runs 1 job at a time"),
        "{warning}"
    );
    for run in runs {
        let row = run_row(&env, run);
        assert_eq!(
            row.error_code, None,
            "run {run}: {:?} {warning}",
            row.error_detail
        );
        assert_eq!(row.status, "succeeded", "run {run}: {warning}");
        let attempt = last_attempt(&env, run);
        assert_eq!(
            (attempt.stdout_tail, attempt.stderr_tail),
            (b"out\n".to_vec(), b"err\n".to_vec())
        );
    }
}

/// A job that still cannot start for want of a descriptor, though the tick counted room for it
/// (here its limit is lowered under it while its first job runs, as another process taking the
/// system's last files, or a leak, would leave it): its claim is given back, no attempt spent
/// (the runner's problem, not the job's), and the tick claims no more runs, saying so once.
/// Before, it went on claiming, and every run it claimed spent an attempt failing to start; then
/// the run was retried by its policy, as any `SPAWN:OTHER`.
#[test]
fn a_job_that_finds_no_descriptor_left_stops_the_tick_claiming_and_says_so() {
    let env = Env::init();
    let (started, go) = (env.path("started"), env.path("go"));
    let first = add_held_first_job(&env, &started, &go);
    env.add(
        "rest",
        &["--max-attempts", "3", "--overlap", "allow"],
        "true",
    );
    let rest: Vec<i64> = (0..3).map(|_| env.enqueue("rest")).collect();
    let tick = Bg::spawn(&env, "tick", &["tick", "--concurrency", "1"]);
    wait_until(Duration::from_secs(60), "the first job to start", || {
        started.exists()
    });
    // The first job runs for longer than a tick prepares jobs ahead after: the next claim, once
    // it ends, takes one.
    leave_no_room_for_another_job(&tick);
    fs::write(&go, "").expect("go");
    let out = tick.finish(Duration::from_secs(60));
    let start = format!("runner: error: run {}: starting attempt 1: ", rest[0]);
    let said = said_one_line(&out, 1, &start);
    assert_eq!(status_of(&env, first), "succeeded", "{said}");
    assert_given_back(&env, rest[0], OUT_OF_FILES, &said);
    assert!(
        said.contains("(os error 24)")
            && said.contains("open-file limit")
            && said.contains("the tick claims no more runs"),
        "{said}"
    );
    for &run in &rest[1..] {
        let attempts = env.sql.query_row(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1",
            &[&run],
        );
        assert_eq!(attempts[0].i64(), 0, "run {run} was not claimed: {said}");
        assert_eq!(status_of(&env, run), "pending");
    }
}

/// A run of one attempt whose job finds no descriptor left at its spawn is the runner's problem,
/// not the job's: its claim is given back, and so are those claimed with it in the same batch
/// whose spawn was not tried yet. Each stays pending, due at once, attempt not spent, with no
/// attempt row left and a `GIVEN_BACK` event saying why, and the next tick runs it. Before, each
/// was recorded as a failed attempt (`SPAWN:OTHER`) and went dead.
#[test]
fn a_run_whose_job_finds_no_descriptor_left_is_given_back_and_runs_at_the_next_tick() {
    let env = Env::init();
    let (started, go) = (env.path("started"), env.path("go"));
    let first = add_held_first_job(&env, &started, &go);
    env.add(
        "once",
        &["--max-attempts", "1", "--overlap", "allow"],
        "echo ran",
    );
    let tick = Bg::spawn(&env, "tick", &["tick", "--concurrency", "3"]);
    wait_until(Duration::from_secs(60), "the first job to start", || {
        started.exists()
    });
    leave_no_room_for_another_job(&tick);
    // Due while the first job runs: the tick's next look claims both, in one batch, into the two
    // free slots.
    let runs: Vec<i64> = (0..2).map(|_| env.enqueue("once")).collect();
    wait_until(Duration::from_secs(60), "the runs to be given back", || {
        runs.iter().all(|&run| {
            let kinds = event_kinds(&env, run);
            kinds.last().map(String::as_str) != Some("CLAIMED") && kinds.len() > 1
        })
    });
    fs::write(&go, "").expect("go");
    let out = tick.finish(Duration::from_secs(60));
    let start = format!("runner: error: run {}: starting attempt 1: ", runs[0]);
    let said = said_one_line(&out, 1, &start);
    assert_eq!(status_of(&env, first), "succeeded", "{said}");
    assert!(said.contains("the tick claims no more runs"), "{said}");
    for &run in &runs {
        assert_given_back(&env, run, OUT_OF_FILES, &said);
    }

    let next = env.tick(&[]);
    assert_eq!(next, "", "the next tick runs them");
    for &run in &runs {
        let row = run_row(&env, run);
        assert_eq!(
            (row.status.as_str(), row.error_code),
            ("succeeded", None),
            "run {run}"
        );
        let attempts = env.sql.query_rows(
            "SELECT attempt, stdout_tail FROM job_attempts WHERE run_id = $1",
            &[&run],
        );
        assert_eq!(attempts.len(), 1, "run {run}: one attempt");
        assert_eq!(attempts[0][0].i64(), 1, "run {run}");
        assert_eq!(attempts[0][1].opt_bytes(), Some(b"ran\n".to_vec()));
        let attempt = env
            .sql
            .query_val("SELECT attempt FROM job_runs WHERE id = $1", &[&run]);
        assert_eq!(attempt.i64(), 1, "run {run}");
    }
}

/// `run --wait` whose job finds no descriptor left gives its run's claim back as a tick does,
/// and says the run is queued again; the next tick runs it. (The limit is found by trying, from
/// below: the first at which the run is claimed, the job's pipes then not fitting.) Before, the
/// run went dead (`SPAWN:OTHER`), and at the next limit up the job ran.
#[test]
fn run_wait_whose_job_finds_no_descriptor_left_gives_its_run_back() {
    let env = Env::init();
    env.add(
        "once",
        &["--max-attempts", "1", "--overlap", "allow"],
        "echo ran",
    );
    let mut given_back = None;
    for limit in 4..64 {
        let mut cmd = env.cmd();
        cmd.args(["run", "once", "--wait"]);
        let script = format!("ulimit -n {limit} && exec \"$@\"");
        let out = wrapped(&["sh", "-c", &script, "sh"], &cmd)
            .output()
            .expect("run --wait under ulimit");
        let said = stderr(&out);
        if said.contains("is queued again") {
            given_back = Some((out, said));
            break;
        }
        assert_ne!(
            out.status.code(),
            Some(0),
            "the job ran at a limit of {limit}, no run given back below it: {said}"
        );
    }
    let (out, said) = given_back.expect("a limit at which the run is given back");
    assert_eq!(out.status.code(), Some(1), "{said}");
    let run: i64 = said
        .split("runner: error: run ")
        .nth(2)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no run id in {said:?}"));
    assert!(
        said.starts_with(&format!(
            "runner: error: run {run}: starting attempt 1: cannot start /bin/sh: "
        )) && said.contains("(os error 24)")
            && said.contains(&format!(
                "runner: error: run {run} is queued again, no attempt spent"
            )),
        "{said}"
    );
    assert_given_back(&env, run, OUT_OF_FILES, &said);
    env.tick(&[]);
    assert_eq!(status_of(&env, run), "succeeded");
}

/// A schedule `first` of one attempt, and a run of it whose job touches `started`, then waits for
/// `go` to exist. Its run id.
fn add_held_first_job(env: &Env, started: &std::path::Path, go: &std::path::Path) -> i64 {
    env.add(
        "first",
        &["--max-attempts", "1"],
        &format!(
            "sleep 0.2; touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            sh_quote(started),
            sh_quote(go)
        ),
    );
    env.enqueue("first")
}

/// Lower the open-file limit of the running `tick` to what it has open now and two more: room
/// for the look at what its running job leaves, not for the next job's three pipes.
fn leave_no_room_for_another_job(tick: &Bg) {
    let open = fs::read_dir(format!("/proc/{}/fd", tick.pid()))
        .expect("the tick's descriptors")
        .count();
    let limit = format!("--nofile={}:{}", open + 2, open + 2);
    let pid = tick.pid().to_string();
    let lowered = Command::new("prlimit")
        .args(["--pid", &pid, &limit])
        .output()
        .expect("prlimit");
    assert!(lowered.status.success(), "{}", stderr(&lowered));
}

/// `run --wait` started with SIGCHLD ignored: it executes its run itself, without the tick's
/// handler for the signal. A job that succeeded was recorded as failed (`EXIT:-1`) and retried,
/// so it ran twice, and a failing one lost its exit code; the job's shell inherited the ignored
/// signal too.
#[test]
fn run_wait_started_with_sigchld_ignored_records_how_its_job_ended() {
    let env = Env::init();
    let log = env.path("ran.log");
    env.add(
        "once",
        &RETRY_AT_ONCE,
        &format!("echo ran >> {}", sh_quote(&log)),
    );
    env.add("three", &["--max-attempts", "1"], "exit 3");
    env.add("signals", &[], "grep SigIgn /proc/$$/status");
    let run_wait = |name: &str| {
        let mut cmd = env.cmd();
        cmd.args(["run", name, "--wait"]);
        wrapped(&["env", "--ignore-signal=CHLD"], &cmd)
            .output()
            .expect("run --wait under env")
    };

    let out = run_wait("once");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let once = last_run_id(&env, "once");
    assert_eq!(status_of(&env, once), "succeeded");
    // Nothing is due again: a tick runs nothing more.
    env.tick(&[]);
    assert_eq!(fs::read_to_string(&log).expect("the job's log"), "ran\n");

    let out = run_wait("three");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let three = last_run_id(&env, "three");
    assert_eq!(run_row(&env, three).error_code.as_deref(), Some("EXIT:3"));

    let out = run_wait("signals");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ignored = stdout(&out);
    let mask = u64::from_str_radix(ignored.trim().trim_start_matches("SigIgn:").trim(), 16)
        .unwrap_or_else(|_| panic!("{ignored:?}"));
    assert_eq!(
        mask & (1 << (17 - 1)),
        0,
        "the job's shell ignores SIGCHLD: {ignored}"
    );
}
