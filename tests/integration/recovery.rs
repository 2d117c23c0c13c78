//! Recovery from a crashed runner: `kill -9` of a tick while its job runs. After the lease
//! expires the next tick kills the leftover job, closes attempt 1 as `LEASE:EXPIRED` and runs
//! attempt 2, and the job never runs twice at the same time.

use std::fs;
use std::time::{Duration, Instant};

use crate::common::{
    event_kinds, json, process_alive, read_pid, sh_quote, stderr, stdout, wait_until, Bg, Env,
    Strays, Val,
};

#[test]
fn kill_9_of_a_tick_then_recovery_kills_the_leftover_and_retries_without_overlap() {
    let env = Env::init();
    let mut strays = Strays::default();
    let lock = env.path("job.lock");
    let log = env.path("job.log");
    let violations = env.path("violations");
    let sleep_pidfile = env.path("sleep.pid");
    // The job holds an exclusive flock for its whole life (fd 9 is inherited by its `sleep`).
    // A second copy running while the first still lives cannot take it and records a violation.
    // Attempt 1 sleeps (and is orphaned by the kill -9); later attempts finish at once.
    let command = format!(
        "exec 9>{lock}; flock -n 9 || {{ echo \"attempt $RUNNER_ATTEMPT\" >> {violations}; exit 1; }}; \
         echo \"start $RUNNER_ATTEMPT $$\" >> {log}; echo printed; \
         if [ \"$RUNNER_ATTEMPT\" = 1 ]; then sleep 30 & echo $! > {pid}; wait; fi; \
         echo \"end $RUNNER_ATTEMPT\" >> {log}",
        lock = sh_quote(&lock),
        violations = sh_quote(&violations),
        log = sh_quote(&log),
        pid = sh_quote(&sleep_pidfile),
    );
    // Zero backoff: the retry is due the moment recovery closes attempt 1, in the same tick,
    // so the leftover must already be gone by then.
    env.add(
        "locked",
        &["--backoff-base", "0s", "--backoff-max", "0s"],
        &command,
    );
    let run_id = env.enqueue("locked");

    let mut tick = Bg::spawn(&env, "tick-1", &["tick", "--lease", "3s"]);
    let sleep_pid = read_pid(&sleep_pidfile, Duration::from_secs(10));
    strays.pid(sleep_pid);
    let shell = env.sql.query_i64(
        "SELECT child_pid FROM job_attempts WHERE run_id = $1 AND attempt = 1",
        &[&run_id],
    ) as u32;
    strays.group(shell);
    assert!(tick.pid() > 0);
    tick.kill9();
    assert!(process_alive(shell) && process_alive(sleep_pid));
    let killed_at = Instant::now();

    // Ticks before the lease expires leave the run alone; then one recovers and retries it.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = env
            .sql
            .query_opt_string("SELECT status FROM job_runs WHERE id = $1", &[&run_id])
            .unwrap_or_default();
        if status == "succeeded" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "run not recovered and retried in time (status {status})"
        );
        let was_running_attempt_1 = env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE id = $1 AND status = 'running' AND attempt = 1",
            &[&run_id],
        ) == 1;
        let out = env.run(&["tick", "--lease", "3s"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            !violations.exists(),
            "the job ran twice at once: {}",
            fs::read_to_string(&violations).unwrap_or_default()
        );
        assert_eq!(stdout(&out), "");
        assert_eq!(
            stderr(&out),
            "",
            "a recovered-and-retried run prints nothing"
        );
        if was_running_attempt_1 && process_alive(sleep_pid) {
            // The leftover must never outlive the tick that recovered its run.
            let recovered = env.sql.query_i64(
                "SELECT count(*) FROM job_attempts WHERE run_id = $1 AND attempt = 1
                 AND finished_at IS NOT NULL",
                &[&run_id],
            ) == 1;
            assert!(
                !recovered,
                "attempt 1 was closed while its sleep still runs"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let recovered_after = killed_at.elapsed();

    wait_until(
        Duration::from_secs(5),
        "the leftover job to be dead",
        || !process_alive(sleep_pid) && !process_alive(shell),
    );
    assert!(
        !violations.exists(),
        "the job ran twice at once: {}",
        fs::read_to_string(&violations).unwrap_or_default()
    );
    let log_text = fs::read_to_string(&log).expect("log");
    let starts: Vec<&str> = log_text
        .lines()
        .filter(|l| l.starts_with("start"))
        .collect();
    assert_eq!(starts.len(), 2, "{log_text}");
    assert!(starts[0].starts_with("start 1 ") && starts[1].starts_with("start 2 "));
    assert!(
        !log_text.contains("end 1"),
        "attempt 1 was killed: {log_text}"
    );
    assert!(log_text.ends_with("end 2\n"), "{log_text}");

    let attempts: Vec<(i64, Option<String>, Option<String>)> = env
        .sql
        .query_rows(
            "SELECT attempt, outcome, error_code FROM job_attempts WHERE run_id = $1 ORDER BY attempt",
            &[&run_id],
        )
        .iter()
        .map(|r| (r[0].i64(), r[1].opt_string(), r[2].opt_string()))
        .collect();
    assert_eq!(
        attempts,
        vec![
            (1, Some("failed".into()), Some("LEASE:EXPIRED".into())),
            (2, Some("succeeded".into()), None),
        ]
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE run_id = $1 AND kind = 'RECOVERED'",
            &[&run_id]
        ),
        1
    );
    // Attempt 1 printed, to a runner that is gone: its output is not known, not "empty".
    let shown = json(&env.ok(&["show", &run_id.to_string(), "--json"]));
    let (first, second) = (&shown["attempts"][0], &shown["attempts"][1]);
    for field in ["stdout_tail", "stderr_tail", "stdout_bytes", "stderr_bytes"] {
        assert!(first[field].is_null(), "{field}: {shown}");
    }
    assert_eq!(second["stdout_tail"], "printed\n", "{shown}");
    assert_eq!(second["stdout_bytes"], 8, "{shown}");
    let text = env.ok(&["show", &run_id.to_string()]);
    assert!(
        text.contains("  output:     not kept (its runner did not see the attempt end)\n"),
        "{text}"
    );
    let detail = env
        .sql
        .query_opt_string(
            "SELECT error_detail FROM job_attempts WHERE run_id = $1 AND attempt = 1",
            &[&run_id],
        )
        .unwrap_or_default();
    assert!(
        detail.contains("killed"),
        "detail says the leftover was killed: {detail}"
    );
    // Lease 3 s: recovered after seconds, not after the default lease's minute (a loaded machine
    // gets a wide margin below it).
    assert!(
        recovered_after < Duration::from_secs(45),
        "recovery took {recovered_after:?}"
    );
}

/// A runner that stalls (no heartbeat) loses its lease to the next tick, which kills the job
/// and retries the run. When the stalled runner wakes and reports its attempt, the write is
/// refused: neither the run nor the attempt rows the recovering runner wrote change. (It stalls
/// at a test hook, where it holds no transaction: one stopped at a random moment, say inside a
/// heartbeat, would hold the database's write lock, and the rescuers would wait on it.)
#[test]
fn a_stalled_runner_that_wakes_after_takeover_cannot_overwrite_anything() {
    let env = Env::init();
    let mut strays = Strays::default();
    let sleep_pidfile = env.path("sleep.pid");
    let log = env.path("job.log");
    let command = format!(
        "if [ \"$RUNNER_ATTEMPT\" = 1 ]; then sleep 30 & echo $! > {pid}; wait; fi; \
         echo \"done $RUNNER_ATTEMPT\" >> {log}",
        pid = sh_quote(&sleep_pidfile),
        log = sh_quote(&log),
    );
    env.add(
        "stalled",
        &["--backoff-base", "0s", "--backoff-max", "0s"],
        &command,
    );
    let run_id = env.enqueue("stalled");

    let go = env.path("go");
    let stalled = Bg::spawn_hooked(
        &env,
        "stalled-tick",
        &["tick", "--lease", "3s", "--owner", "stalled-runner"],
        &format!("running:wait={}", go.display()),
    );
    let sleep_pid = read_pid(&sleep_pidfile, Duration::from_secs(10));
    strays.pid(sleep_pid);
    strays.group(env.sql.query_i64(
        "SELECT child_pid FROM job_attempts WHERE run_id = $1 AND attempt = 1",
        &[&run_id],
    ) as u32);
    let reached = env.path("go.reached");
    wait_until(Duration::from_secs(60), "the tick to stall", || {
        reached.exists()
    });

    let deadline = Instant::now() + Duration::from_secs(90);
    while env
        .sql
        .query_opt_string("SELECT status FROM job_runs WHERE id = $1", &[&run_id])
        .as_deref()
        != Some("succeeded")
    {
        assert!(
            Instant::now() < deadline,
            "the run was not taken over in time"
        );
        let out = env.run(&["tick", "--lease", "3s", "--owner", "rescuer"]);
        assert!(out.status.success(), "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !process_alive(sleep_pid),
        "the stalled runner's job was killed"
    );
    let snapshot = |env: &Env| -> Vec<Vec<Val>> {
        let mut rows = env.sql.query_rows(
            "SELECT status, attempt, owner, lease_token, error_code, error_detail, finished_at
             FROM job_runs WHERE id = $1",
            &[&run_id],
        );
        rows.extend(env.sql.query_rows(
            "SELECT attempt, owner, outcome, exit_code, error_code, error_detail, finished_at,
                    duration_ms, stdout_bytes, stderr_bytes
             FROM job_attempts WHERE run_id = $1 ORDER BY attempt",
            &[&run_id],
        ));
        rows
    };
    let before = snapshot(&env);

    // The stalled runner wakes and reports its (killed) attempt 1.
    fs::write(&go, "").expect("let the stalled tick go on");
    let out = stalled.finish(Duration::from_secs(20));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        snapshot(&env),
        before,
        "the stale runner changed recorded rows"
    );
    assert_eq!(
        env.sql.query_strings(
            &format!(
                "SELECT actor FROM job_events WHERE run_id = {run_id} AND kind = 'LEASE_LOST'"
            ),
            &[]
        ),
        vec!["stalled-runner".to_string()],
        "the refused report is recorded as an event"
    );
    assert_eq!(
        env.sql.query_strings(&format!(
            "SELECT kind FROM job_events WHERE run_id = {run_id} AND actor = 'stalled-runner' ORDER BY id"
        ), &[]),
        vec!["CLAIMED".to_string(), "LEASE_LOST".to_string()]
    );
    assert_eq!(
        env.sql.query_strings(
            &format!("SELECT error_code FROM job_attempts WHERE run_id = {run_id} AND attempt = 1"),
            &[]
        ),
        vec!["LEASE:EXPIRED".to_string()]
    );
    assert_eq!(fs::read_to_string(&log).expect("log"), "done 2\n");
}

/// SQLite gives a new run the id of a removed newest one. A runner whose run was removed under it
/// (its schedule removed, by hand here) and whose result is refused must not record anything on
/// the new run that now has its id: the refusal belongs to a run that is gone.
#[test]
fn a_refused_result_is_not_recorded_on_a_new_run_that_reuses_the_id() {
    crate::sqlite_only!(
        "SQLite reuses the id of a removed newest row; PostgreSQL's sequences do not"
    );
    let env = Env::init();
    env.add("gone", &[], "true");
    env.add("other", &[], "true");
    let first = env.enqueue("gone");
    let gate = env.path("gate");
    let mut tick = env
        .cmd()
        .args(["tick"])
        .env(
            "RUNNER_TEST_HOOK",
            format!("recorded:wait={}", gate.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn tick");
    let reached = env.path("gate.reached");
    wait_until(
        Duration::from_secs(60),
        "the tick to record the start",
        || reached.exists(),
    );
    // The run and its attempt removed (as removing the schedule with its history does), and a new
    // run of another schedule takes the same id.
    env.sql
        .exec("DELETE FROM job_runs WHERE id = $1", &[&first]);
    let reused = env.enqueue("other");
    assert_eq!(reused, first, "SQLite reuses the id");
    fs::write(&gate, "").expect("open the gate");
    assert!(tick.wait().expect("tick").code().is_some());
    let kinds = event_kinds(&env, reused);
    // (The same tick may go on to claim and run the new run: its own events.)
    assert!(
        !kinds
            .iter()
            .any(|k| k == "LEASE_LOST" || k == "ATTEMPT_CLOSED"),
        "the removed run's refusal landed on run {reused}: {kinds:?}"
    );
}

/// The jobs of several attempts left behind by a tick that died (`kill -9`), whose runs were
/// cancelled meanwhile (two stops overdue, one orphaned), and that live through SIGTERM, are
/// stopped together by the next tick: SIGTERM to each while all of them still live, one grace
/// for all, then SIGKILL; each attempt is then closed as cancelled. (They were stopped one after
/// another, a grace each: the last job's first SIGTERM came after the first job's SIGKILL.) Each
/// job holds its lock for its whole life (fd 9, inherited by its `sleep`), and at its first
/// SIGTERM logs how many of the three locks are held (looking with SIGTERM ignored: the processes
/// it forks get their own); SIGKILL comes a whole grace (10 s) after the SIGTERMs. Its runner
/// gone, its output goes nowhere: a write to the runner's pipe would end it by SIGPIPE.
#[test]
fn jobs_left_behind_by_a_dead_tick_are_stopped_together_with_one_grace() {
    let env = Env::init();
    let mut strays = Strays::default();
    let (lock, pid) = (env.path("lock"), env.path("pid"));
    let term = env.path("term");
    let command = format!(
        "exec 9> {lock}.$RUNNER_RUN_ID >/dev/null 2>&1; flock 9; \
         on_term() {{ held=$(trap '' TERM; for l in {lock}.*; do flock -n \"$l\" true || echo; done | wc -l); \
             echo \"$RUNNER_RUN_ID $held\" >> {term}; }}; \
         trap on_term TERM; echo $$ > {pid}.$RUNNER_RUN_ID; while :; do sleep 1 & wait $!; done",
        lock = sh_quote(&lock),
        pid = sh_quote(&pid),
        term = sh_quote(&term),
    );
    let runs: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            env.add(name, &[], &command);
            env.enqueue(name)
        })
        .collect();
    let mut tick = Bg::spawn(&env, "tick", &["tick", "--concurrency", "3"]);
    for run in &runs {
        let pidfile = env.path(&format!("pid.{run}"));
        strays.group(read_pid(&pidfile, Duration::from_secs(60)));
    }
    tick.kill9();
    // Cancelled while their runner was gone: runs 1 and 2 with their stop overdue, run 3 left to
    // the sweep of orphaned attempts.
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', owner = NULL, lease_token = NULL,
                 lease_expires_at = NULL, heartbeat_at = NULL, running_alone = NULL,
                 finished_at = started_at, error_code = 'CANCELLED',
                 stopping_by = CASE WHEN id = $1 THEN NULL ELSE 1 END",
        &[&runs[2]],
    );
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let logged = fs::read_to_string(&term).unwrap_or_default();
    let mut terms: Vec<&str> = logged.lines().collect();
    terms.sort_unstable();
    let all_alive: Vec<String> = runs.iter().map(|run| format!("{run} 3")).collect();
    assert_eq!(
        terms, all_alive,
        "each job got one SIGTERM while all three lived: {logged:?}"
    );
    let closed = env.sql.query_strings(
        "SELECT error_code FROM job_attempts WHERE finished_at IS NOT NULL ORDER BY run_id",
        &[],
    );
    assert_eq!(closed, ["CANCELLED", "CANCELLED", "CANCELLED"]);
    for run in &runs {
        assert!(
            event_kinds(&env, *run)
                .iter()
                .any(|k| k == "ATTEMPT_CLOSED"),
            "{:?}",
            event_kinds(&env, *run)
        );
    }
    let waiting = env.sql.query_i64(
        "SELECT count(*) FROM job_runs WHERE stopping_by IS NOT NULL",
        &[],
    );
    assert_eq!(waiting, 0, "no run waits for its job any more");
}

/// A job left behind by a tick killed with `kill -9` that traps SIGTERM, writes one line to the
/// file `term` for each, and goes on (its loop's `sleep`s, new processes all through the grace,
/// get theirs too). Its output goes nowhere: the shell's "Terminated" for a `sleep` to the pipe
/// of the dead tick would end it on SIGPIPE. Returns its run and its shell's pid, once the tick
/// is dead.
fn a_job_that_lives_through_sigterm_left_behind(env: &Env, strays: &mut Strays) -> (i64, u32) {
    let pidfile = env.path("pid");
    let command = format!(
        "exec >/dev/null 2>&1; trap 'echo TERM >> {term}' TERM; echo $$ > {pid}; \
         while :; do sleep 1 & wait $!; done",
        term = sh_quote(&env.path("term")),
        pid = sh_quote(&pidfile),
    );
    env.add("stubborn", &[], &command);
    let run = env.enqueue("stubborn");
    let mut tick = Bg::spawn(env, "tick", &["tick"]);
    let shell = read_pid(&pidfile, Duration::from_secs(60));
    strays.group(shell);
    tick.kill9();
    (run, shell)
}

/// What a stop of [`a_job_that_lives_through_sigterm_left_behind`] must leave: one SIGTERM to
/// its shell however long the grace (a TERM every round of the wait ran its trap hundreds of
/// times), the job gone (SIGKILL after the grace), its attempt closed as cancelled.
fn stopped_with_one_sigterm(env: &Env, run: i64, shell: u32) {
    assert_eq!(
        fs::read_to_string(env.path("term")).unwrap_or_default(),
        "TERM\n",
        "one SIGTERM"
    );
    assert!(!process_alive(shell), "the job was stopped");
    let closed = env.sql.query_strings(
        "SELECT error_code FROM job_attempts WHERE run_id = $1 AND finished_at IS NOT NULL",
        &[&run],
    );
    assert_eq!(closed, ["CANCELLED"]);
}

/// `cancel` of a run whose runner is gone sends its job's processes one SIGTERM each, as a tick
/// stopping its own job does, then SIGKILL after the grace.
#[test]
fn cancel_of_a_job_left_behind_sends_it_one_sigterm() {
    let env = Env::init();
    let mut strays = Strays::default();
    let (run, shell) = a_job_that_lives_through_sigterm_left_behind(&env, &mut strays);
    let said = env.ok(&["cancel", &run.to_string()]);
    assert!(said.contains("its runner"), "{said}");
    stopped_with_one_sigterm(&env, run, shell);
}

/// A tick's recovery of an attempt orphaned by a cancel (its runner gone) sends its job's
/// processes one SIGTERM each, then SIGKILL after the grace.
#[test]
fn recovery_of_a_job_left_behind_sends_it_one_sigterm() {
    let env = Env::init();
    let mut strays = Strays::default();
    let (run, shell) = a_job_that_lives_through_sigterm_left_behind(&env, &mut strays);
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', owner = NULL, lease_token = NULL,
                 lease_expires_at = NULL, heartbeat_at = NULL, running_alone = NULL,
                 finished_at = started_at, error_code = 'CANCELLED', stopping_by = NULL",
        &[],
    );
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stopped_with_one_sigterm(&env, run, shell);
}
