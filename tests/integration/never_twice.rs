//! Never twice, never dropped, nothing left behind: the edges where crashes, cancels and
//! leftovers used to break the promise. Races are made deterministic with the test-only
//! `RUNNER_TEST_HOOK` (kill or stall the tick at a named point) or with forged database state;
//! no test relies on a sleep winning a race.

use std::fs;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::{
    assert_given_back, forge_vanished_runner, json, last_run_id, process_alive, processes_of_run,
    read_pid, real_now, sh_quote, status_of, stderr, utc, wait_until, Bg, Env, Strays,
    STOPPED_BEFORE_START,
};
use crate::sqlite_only;

const LONG: Duration = Duration::from_secs(120);

fn lines(path: &std::path::Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A time far enough ahead that every lease written now has expired.
fn an_hour_later() -> String {
    utc(real_now() + 3600)
}

// ---------------------------------------------------------------------------
// A tick keeps executing due work, whatever order jobs finish in
// ---------------------------------------------------------------------------

/// A forbid schedule yields one run at a time; a quick job of another schedule ending first
/// used to make the tick believe nothing was due, leaving 9 of 10 runs to later ticks.
#[test]
fn one_tick_drains_a_forbid_queue_whatever_order_jobs_end() {
    let env = Env::init();
    let log = env.path("log");
    env.ok(&[
        "schedule",
        "add",
        "queue",
        "--cron",
        "* * * * *",
        "--catch-up",
        "all",
        "--now",
        "2026-01-01T00:00:30Z",
        "--",
        &format!("sleep 0.3; echo $RUNNER_RUN_ID >> {}", sh_quote(&log)),
    ]);
    env.ok(&[
        "schedule",
        "add",
        "quick",
        "--cron",
        "* * * * *",
        "--now",
        "2026-01-01T00:00:30Z",
        "--",
        "true",
    ]);
    // Ten minutes later: ten due instants of `queue`, one (latest) of `quick`.
    let out = env.run(&["tick", "--max-tick", "10m", "--now", "2026-01-01T00:10:30Z"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let count = |status: &str| {
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = 'queue' AND r.status = $1",
            &[&status],
        )
    };
    assert_eq!(
        count("succeeded"),
        10,
        "one tick must drain the whole queue"
    );
    assert_eq!(count("pending"), 0);
    let mut ran = lines(&log);
    ran.sort();
    ran.dedup();
    assert_eq!(ran.len(), 10, "each run once: {:?}", lines(&log));
}

// ---------------------------------------------------------------------------
// The start gate: a command runs only after its attempt is durably recorded
// ---------------------------------------------------------------------------

/// The tick dies after spawning the job's shell (held at its gate) but before recording its
/// start, and again after recording but before opening the gate: either way the command never
/// runs; recovery retries the run and it executes exactly once.
#[test]
fn a_job_never_starts_unless_its_attempt_is_recorded_first() {
    for point in ["spawned", "recorded"] {
        let env = Env::init();
        let log = env.path("log");
        env.add(
            "once",
            &["--backoff-base", "0s", "--backoff-max", "0s"],
            &format!("echo \"attempt $RUNNER_ATTEMPT\" >> {}", sh_quote(&log)),
        );
        let run = env.enqueue("once");
        let out = env
            .cmd()
            .args(["tick", "--lease", "3s"])
            .env("RUNNER_TEST_HOOK", format!("{point}:kill"))
            .output()
            .expect("tick");
        assert_eq!(
            out.status.code(),
            None,
            "{point}: the hook kills the tick: {}",
            stderr(&out)
        );
        // The shell at the gate sees its pipe close and exits without running anything.
        wait_until(LONG, "the gated shell to exit", || {
            processes_of_run(&env, run).is_empty()
        });
        assert!(
            lines(&log).is_empty(),
            "{point}: the command ran: {:?}",
            lines(&log)
        );
        let recorded_pid = env.sql.query_opt_string(
            "SELECT CAST(child_pid AS TEXT) FROM job_attempts WHERE run_id = $1 AND attempt = 1",
            &[&run],
        );
        assert_eq!(
            recorded_pid.is_some(),
            point == "recorded",
            "{point}: the pid is recorded exactly when the start landed"
        );

        // Once the lease has expired, a tick recovers the run and executes it, once.
        let out = env.run(&["tick", "--now", &an_hour_later()]);
        assert!(out.status.success(), "{point}: {}", stderr(&out));
        assert_eq!(status_of(&env, run), "succeeded", "{point}");
        assert_eq!(lines(&log), vec!["attempt 2".to_string()], "{point}");
    }
}

/// A tick stalls between its claim and starting the job; meanwhile the lease expires and
/// another tick recovers and executes the run. When the stalled tick wakes, its start is
/// refused: the command runs once, not twice.
#[test]
fn a_tick_that_stalls_after_claiming_never_starts_a_run_taken_over() {
    let env = Env::init();
    let (run, log, go, mut stalled) = claim_and_stall(&env);
    let out = env.run(&["tick", "--now", &an_hour_later()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, run), "succeeded");
    fs::write(&go, "").expect("release the stalled tick");
    let out = stalled.finish();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lines(&log), vec!["attempt 2".to_string()]);
    assert_eq!(status_of(&env, run), "succeeded");
}

/// A tick stalls after claiming until its lease has expired (forged: nobody took it over yet).
/// It must not start the command: recovery may retry the run at any moment. It ends the attempt
/// itself, as recovery would (`LEASE:EXPIRED`, retried by its policy: at once), saying its
/// command never ran; the retry runs once.
#[test]
fn a_tick_that_stalls_past_its_lease_never_starts_the_run() {
    let env = Env::init();
    let (run, log, go, mut stalled) = claim_and_stall(&env);
    env.sql.exec(
        "UPDATE job_runs SET lease_expires_at = 1 WHERE id = $1",
        &[&run],
    );
    fs::write(&go, "").expect("release the stalled tick");
    let out = stalled.finish();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        lines(&log),
        vec!["attempt 2".to_string()],
        "started on an expired lease"
    );
    assert_never_started(&env, run, "LEASE:EXPIRED");
    // Nothing is left to retry.
    let out = env.run(&["tick", "--now", &an_hour_later()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lines(&log), vec!["attempt 2".to_string()]);
    assert_eq!(status_of(&env, run), "succeeded");
}

/// A run cancelled while its job waits at the gate (its start recorded, the tick stalled before
/// opening it, as a prepared job waits behind long jobs) never runs its command: a job that
/// waited has its lease looked at again before its gate opens.
#[test]
fn a_run_cancelled_while_its_job_waits_at_the_gate_never_starts() {
    let env = Env::init();
    let (run, log) = queue_logging_run(&env);
    let go = env.path("go");
    let mut cmd = env.cmd();
    cmd.arg("tick").env(
        "RUNNER_TEST_HOOK",
        format!("recorded:wait={}", go.display()),
    );
    let mut stalled = StalledTick::spawn(cmd, &env);
    wait_for_recorded_starts(&env, 1);
    let out = env.run(&["cancel", &run.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The gate may open without a second look within 0.1 s of the start's commit (a cancel
    // that close is no different from one just after the start): wait well past that.
    std::thread::sleep(Duration::from_millis(300));
    fs::write(&go, "").expect("release the stalled tick");
    let out = stalled.finish();
    assert!(
        out.status.code().is_some(),
        "the tick exits by itself: {:?}",
        out.status
    );
    assert!(
        lines(&log).is_empty(),
        "a cancelled run's command ran: {:?}",
        lines(&log)
    );
    // Its attempt is closed saying so, not as a job the tick terminated.
    assert_cancelled_at_its_gate(&env, run);
}

/// Another host recovered the run (its lease expired) while the tick that claimed it stalled
/// before recording its job's start, leaving the attempt open for this host (forged: the run is
/// pending again, its attempt open). The start is refused, the job never runs, and the tick
/// closes the attempt at once as `LEASE:EXPIRED`, saying its command never ran, instead of
/// leaving it for a later tick to find orphaned.
#[test]
fn a_start_refused_after_recovery_elsewhere_closes_the_attempt_at_once() {
    let env = Env::init();
    let (run, log) = queue_logging_run(&env);
    let mut stalled = StalledTick::at(&env, &["tick", "--lease", "600s"], "spawned", "");
    env.sql.exec(
        "UPDATE job_runs SET status = 'pending', owner = NULL, lease_token = NULL,
             lease_expires_at = NULL, heartbeat_at = NULL, running_alone = NULL,
             run_at = 4102444800, error_code = 'LEASE:EXPIRED'
         WHERE id = $1",
        &[&run],
    );
    let (status, err) = stalled.go_on();
    assert!(status.success(), "{err}");
    assert!(lines(&log).is_empty(), "its command ran: {:?}", lines(&log));
    assert_eq!(status_of(&env, run), "pending");
    assert_never_started(&env, run, "LEASE:EXPIRED");
}

/// A run still the tick's whose start was refused (its lease expired while the tick stalled) is
/// cancelled just as the tick comes to close its attempt: the close reads the run and writes in
/// one fenced store call, so the attempt is closed as cancelled (`CANCELLED`, its command never
/// ran), not written as the expired lease the tick saw a moment before. (Stalled before the
/// spawn's start is recorded, the lease forged expired; then stalled again where the attempt is
/// closed, and cancelled there.)
#[test]
fn a_run_cancelled_as_its_never_started_attempt_is_closed_is_closed_as_cancelled() {
    let env = Env::init();
    let (run, log) = queue_logging_run(&env);
    let (spawned, closing) = (env.path("spawned"), env.path("closing"));
    let mut cmd = env.cmd();
    cmd.args(["tick", "--lease", "600s"]).env(
        "RUNNER_TEST_HOOK",
        format!(
            "spawned:wait={},closing-unstarted:wait={}",
            spawned.display(),
            closing.display()
        ),
    );
    let mut stalled = StalledTick::spawn(cmd, &env);
    let reached = |path: &std::path::Path| path.with_extension("reached").exists();
    wait_until(LONG, "the tick to stall after the spawn", || {
        reached(&spawned)
    });
    env.sql.exec(
        "UPDATE job_runs SET lease_expires_at = 1 WHERE id = $1",
        &[&run],
    );
    fs::write(&spawned, "").expect("go on");
    wait_until(LONG, "the tick to come to close the attempt", || {
        reached(&closing)
    });
    let out = env.run(&["cancel", &run.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    fs::write(&closing, "").expect("go on");
    let out = stalled.finish();
    let said = fs::read_to_string(&stalled.stderr).unwrap_or_default();
    assert!(out.status.success(), "{said}");
    assert!(lines(&log).is_empty(), "its command ran: {:?}", lines(&log));
    assert_cancelled_at_its_gate(&env, run);
}

/// `run` was cancelled while its job waited at its gate: its attempt closed as `CANCELLED`, as a
/// job that never started ([`assert_never_started`]), and its job not waited for.
fn assert_cancelled_at_its_gate(env: &Env, run: i64) {
    assert_eq!(status_of(env, run), "cancelled");
    assert_never_started(env, run, "CANCELLED");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE id = $1 AND stopping_by IS NOT NULL",
            &[&run]
        ),
        0,
        "run {run}: its job is not waited for"
    );
}

/// Attempt 1 of `run` is closed with `code`, as a job that never started: it took no time, and
/// the event that tells its end (`ATTEMPT_CLOSED`, or `RECOVERED` when the tick wrote the end of
/// a run still its own) says its command never ran.
fn assert_never_started(env: &Env, run: i64, code: &str) {
    let attempt = env.sql.query_row(
        "SELECT CAST(finished_at IS NOT NULL AS integer), error_code, error_detail, duration_ms
         FROM job_attempts WHERE run_id = $1 AND attempt = 1",
        &[&run],
    );
    assert_eq!(attempt[0].i64(), 1, "the attempt is closed");
    assert_eq!(attempt[1].opt_string().as_deref(), Some(code));
    let detail = attempt[2].opt_string().unwrap_or_default();
    assert!(detail.contains("its command never ran"), "{detail}");
    assert_eq!(attempt[3].opt_i64(), Some(0), "it took no time");
    let event = env.sql.query_opt_string(
        "SELECT detail FROM job_events
         WHERE run_id = $1 AND kind IN ('ATTEMPT_CLOSED', 'RECOVERED')",
        &[&run],
    );
    assert!(
        event
            .as_deref()
            .is_some_and(|d| d.contains(code) && d.contains("its command never ran")),
        "{event:?}"
    );
}

/// The look at a waiting job's lease fails (the store cannot answer): a job seen holding its
/// lease less than a lease ago is released, as a running job keeps running when a heartbeat
/// fails; the failure is reported. (Stalled after recording the start, then every heartbeat
/// fails.)
#[test]
fn a_job_whose_gate_check_fails_soon_after_its_start_is_released() {
    let env = Env::init();
    let log = env.path("log");
    env.add("held", &[], &format!("echo ran >> {}", sh_quote(&log)));
    let run = env.enqueue("held");
    let mut stalled = StalledTick::at(
        &env,
        &["tick", "--lease", "60s"],
        "recorded",
        ",heartbeat:fail",
    );
    // Past LEASE_RECHECK_AT_GATE (0.1 s), far short of the lease.
    std::thread::sleep(Duration::from_millis(300));
    let (status, err) = stalled.go_on();
    assert!(status.code().is_some(), "{status:?}");
    assert!(err.contains("heartbeat"), "the failure is reported: {err}");
    assert_eq!(lines(&log), ["ran"]);
    assert_eq!(status_of(&env, run), "succeeded");
}

/// The look at a waiting job's lease fails, and the job has not been seen holding its lease for
/// a whole lease: another runner may have recovered it, so it never starts. The tick stalls past
/// the lease (3 s) after recording the start; it ends by itself.
#[test]
fn a_job_whose_gate_check_fails_a_lease_after_its_start_never_starts() {
    let env = Env::init();
    let (run, log) = queue_logging_run(&env);
    let mut stalled = StalledTick::at(
        &env,
        &["tick", "--lease", "3s"],
        "recorded",
        ",heartbeat:fail",
    );
    std::thread::sleep(Duration::from_millis(3500));
    let (status, _) = stalled.go_on();
    assert!(status.code().is_some(), "{status:?}");
    assert!(lines(&log).is_empty(), "its command ran: {:?}", lines(&log));
    // As if its lease had expired: retried by its policy.
    assert_eq!(status_of(&env, run), "pending");
    assert_eq!(
        env.sql.query_string(
            "SELECT error_code FROM job_attempts WHERE run_id = $1",
            &[&run]
        ),
        "LEASE:EXPIRED"
    );
}

/// A tick told to stop (SIGTERM) while jobs whose starts it recorded wait at their gate stops
/// them there and gives their claims back: their commands never ran, so the shutdown spends none
/// of their attempts. Each run is pending again, due at once, its attempt row gone and a
/// `GIVEN_BACK` event saying why, and the next tick runs it, though it has one attempt. Before,
/// each was recorded as stopped (`SIGNAL:SIGTERM`) and, with one attempt, went dead without ever
/// running. The tick is stalled right after recording the starts, and signalled there, so the
/// jobs are still held when it goes on.
#[test]
fn a_tick_stopped_while_jobs_wait_at_their_gate_gives_them_back() {
    let env = Env::init();
    let (runs, log, mut stalled) = runs_held_at_their_gates(&env, 3);
    kill(Pid::from_raw(stalled.pid() as i32), Signal::SIGTERM).expect("SIGTERM the tick");
    let (status, said) = stalled.go_on();
    assert_eq!(status.code(), Some(0), "it did what it was asked: {said}");

    assert_eq!(lines(&log), Vec::<String>::new(), "no command ran");
    for &run in &runs {
        assert_given_back(&env, run, STOPPED_BEFORE_START, &said);
    }

    env.tick(&[]);
    for &run in &runs {
        assert_eq!(status_of(&env, run), "succeeded", "run {run}");
        assert_eq!(
            env.sql.query_i64s(
                "SELECT attempt FROM job_attempts WHERE run_id = $1",
                &[&run]
            ),
            [1],
            "run {run}: its one attempt ran"
        );
    }
    let mut ran = lines(&log);
    ran.sort();
    let mut expected: Vec<String> = runs.iter().map(i64::to_string).collect();
    expected.sort();
    assert_eq!(ran, expected, "each command ran once");
}

/// A tick told to stop (SIGTERM) while a run it prepared at its gate is cancelled: the give-back
/// is refused (the run is no longer the claim's), and the attempt is closed as any job stopped at
/// its gate whose run was cancelled (`CANCELLED`, its command never ran), not recorded as a job
/// the shutdown terminated (`SIGNAL:SIGTERM`); the other prepared run is given back.
#[test]
fn a_run_cancelled_at_its_gate_when_its_tick_is_stopped_stays_cancelled() {
    let env = Env::init();
    let (runs, log, mut stalled) = runs_held_at_their_gates(&env, 2);
    let (cancelled, kept) = (runs[0], runs[1]);
    let out = env.run(&["cancel", &cancelled.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    kill(Pid::from_raw(stalled.pid() as i32), Signal::SIGTERM).expect("SIGTERM the tick");
    let (status, said) = stalled.go_on();
    assert_eq!(status.code(), Some(0), "{said}");

    assert_eq!(lines(&log), Vec::<String>::new(), "no command ran");
    assert_cancelled_at_its_gate(&env, cancelled);
    assert_given_back(&env, kept, STOPPED_BEFORE_START, &said);
}

/// A tick told to stop (SIGTERM) keeps heart-beating the jobs it stopped while they clean up:
/// a cleanup that outlasts the lease is not taken for a dead runner's job, and another tick's
/// recovery does not kill it halfway. (Lease 5 s, a heartbeat every second; the cleanup waits
/// for the test, which runs a recovery tick 6 s after the cleanup began: past where the lease,
/// kept in whole seconds, would have expired without heartbeats, and 4 s before the grace ends
/// in a SIGKILL. Either side has 4 s to spare: a heartbeat late by that much, or a test that
/// slow.)
#[test]
fn a_stopping_tick_heart_beats_its_jobs_while_they_clean_up() {
    let env = Env::init();
    let (log, go) = (env.path("log"), env.path("go"));
    env.add(
        "tidy",
        &["--backoff-base", "10m"],
        &format!(
            "trap 'echo cleaning >> {log}; while [ ! -e {go} ]; do sleep 0.1; done; \
             echo cleaned >> {log}; exit 0' TERM; echo ready >> {log}; sleep 60 & wait",
            log = sh_quote(&log),
            go = sh_quote(&go)
        ),
    );
    let run = env.enqueue("tidy");
    let mut cmd = env.cmd();
    cmd.args(["tick", "--lease", "5s"]);
    let mut stopping = StalledTick::spawn(cmd, &env);
    wait_for_recorded_starts(&env, 1);
    // Its start is recorded before its shell runs: wait for the shell's trap too, or a loaded
    // machine can deliver the SIGTERM before the trap exists, and the shell just dies.
    wait_until(LONG, "the job to set its trap", || lines(&log) == ["ready"]);
    kill(Pid::from_raw(stopping.pid() as i32), Signal::SIGTERM).expect("SIGTERM the tick");
    wait_until(LONG, "the job to start cleaning up", || {
        lines(&log) == ["ready", "cleaning"]
    });
    std::thread::sleep(Duration::from_secs(6));
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    fs::write(&go, "").expect("let the cleanup finish");
    let out = stopping.finish();
    assert!(out.status.code().is_some(), "{:?}", out.status);
    assert_eq!(
        lines(&log),
        ["ready", "cleaning", "cleaned"],
        "the cleanup ran to its end"
    );
    assert_eq!(
        env.sql.query_strings(
            "SELECT error_code FROM job_attempts WHERE run_id = $1 AND finished_at IS NOT NULL",
            &[&run],
        ),
        vec!["SIGNAL:SIGTERM".to_string()],
        "recorded by the tick that stopped it, not recovered"
    );
}

/// Recovery's write is fenced on the expiry it read, not only on the lease token: a holder
/// whose late heartbeat renews an expired lease between recovery's read and its write keeps its
/// run. Otherwise the run would be retried while its job, on another host, goes on running
/// until its next heartbeat. The recovering tick is stalled right after its read; the renewal
/// is forged (another host's runner, as `forge_running`), then the tick goes on.
#[test]
fn recovery_never_takes_a_lease_renewed_after_it_looked() {
    let env = Env::init();
    env.add("held", &["--backoff-base", "10m"], "true");
    let run = env.enqueue("held");
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', attempt = 1, owner = 'elsewhere:1',
                 lease_token = 'late', lease_expires_at = 1, heartbeat_at = 1, started_at = 1
         WHERE id = $1",
        &[&run],
    );
    env.sql.exec(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token,
             started_at, definition_id)
         SELECT $1, 1, 'elsewhere:1', 'elsewhere', 1, 'late', 1, definition_id
         FROM job_runs WHERE id = $1",
        &[&run],
    );
    let mut stalled = StalledTick::at(&env, &["tick", "--max-tick", "0s"], "recovering", "");
    env.sql.exec(
        "UPDATE job_runs SET lease_expires_at = 4102444800, heartbeat_at = 2
         WHERE id = $1 AND lease_token = 'late'",
        &[&run],
    );
    let (status, err) = stalled.go_on();
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(status_of(&env, run), "running", "the renewed lease is kept");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE id = $1 AND lease_token = 'late'",
            &[&run],
        ),
        1,
        "still held by its runner"
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1 AND finished_at IS NULL",
            &[&run],
        ),
        1,
        "its attempt stays open, with its runner"
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE run_id = $1 AND kind = 'LEASE_LOST'",
            &[&run],
        ),
        0,
        "the refused recovery is no stale runner's write: no LEASE_LOST event"
    );
}

/// A run's "dead" line is printed only once its result is durable, never between the deferred
/// commit of its end (shared with the claim after it) and the sync that makes it durable, where
/// a power cut would lose a result already reported. The tick is stalled right after the
/// deferred write.
#[test]
fn a_dead_run_is_reported_only_once_its_result_is_durable() {
    let env = Env::init();
    env.add("doomed", &["--max-attempts", "1"], "exit 3");
    let run = env.enqueue("doomed");
    let mut stalled = StalledTick::at(&env, &["tick"], "ends-deferred", "");
    let said = fs::read_to_string(env.path("stalled.err")).unwrap_or_default();
    assert!(!said.contains("is dead"), "reported before durable: {said}");
    let (status, said) = stalled.go_on();
    assert!(status.code().is_some(), "{status:?}");
    assert!(
        said.contains(&format!(
            "runner: job doomed run {run} is dead after 1 attempt(s): EXIT:3"
        )),
        "{said}"
    );
}

/// Two ticks on PostgreSQL judge "nothing of this `forbid` schedule is running" from two
/// snapshots. Here another host's claim of run X is made but not committed (the test holds it
/// open), and an older run R becomes due: the tick, whose snapshot sees neither X running nor
/// anything but R as the oldest, picks R. The unique index on running `forbid` runs makes it
/// wait for the other claim, then refuses it; the tick claims again, sees X running, and R
/// never starts beside it.
#[test]
fn two_claims_never_start_two_runs_of_a_forbid_schedule() {
    if crate::common::Backend::current() != crate::common::Backend::Postgres {
        println!("skipped: PostgreSQL only (SQLite's claims hold one write lock)");
        return;
    }
    let env = Env::init();
    let log = env.path("log");
    env.add(
        "alone",
        &["--backoff-base", "10m"],
        &format!("echo \"$RUNNER_RUN_ID\" >> {}", sh_quote(&log)),
    );
    let x = env.enqueue("alone");
    let r = env.enqueue("alone");
    let mut other_host = postgres::Client::connect(env.sql.location(), postgres::NoTls)
        .expect("connect as the other host");
    let mut claim = other_host.transaction().expect("begin");
    claim
        .execute(
            "UPDATE job_runs SET status = 'running', attempt = 1, owner = 'elsewhere:1',
                 lease_token = 'other', lease_expires_at = 4102444800, heartbeat_at = 1,
                 started_at = 1, running_alone = 1
             WHERE id = $1",
            &[&x],
        )
        .expect("the other host's claim");
    // R is due before X: the tick's claim takes R, the oldest due run it can see pending.
    env.sql.exec(
        "UPDATE job_runs SET run_at = run_at - 60 WHERE id = $1",
        &[&r],
    );
    let mut tick = env
        .cmd()
        .arg("tick")
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(env.path("tick.err")).expect("err"))
        .spawn()
        .expect("spawn tick");
    wait_until(
        LONG,
        "the tick to wait for the other claim, run R, or exit",
        || {
            env.sql.query_i64(
                "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            ) > 0
                || !lines(&log).is_empty()
                || tick.try_wait().expect("try_wait").is_some()
        },
    );
    claim.commit().expect("the other host's claim commits");
    let status = tick.wait().expect("tick");
    let err = fs::read_to_string(env.path("tick.err")).unwrap_or_default();
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        lines(&log).is_empty(),
        "run R started beside X: {:?}",
        lines(&log)
    );
    assert_eq!(status_of(&env, r), "pending");
    assert_eq!(status_of(&env, x), "running");
}

/// `count` runs of schedule `held` (`--overlap allow`, one attempt), whose command appends its
/// run id to the returned log, and a tick (`--concurrency COUNT`) stalled right after recording
/// their starts, their jobs held at their gates. Returns the runs, the log and the tick.
fn runs_held_at_their_gates(
    env: &Env,
    count: usize,
) -> (Vec<i64>, std::path::PathBuf, StalledTick) {
    let log = env.path("log");
    env.add(
        "held",
        &["--overlap", "allow", "--max-attempts", "1"],
        &format!("echo \"$RUNNER_RUN_ID\" >> {}", sh_quote(&log)),
    );
    let runs: Vec<i64> = (0..count).map(|_| env.enqueue("held")).collect();
    let concurrency = count.to_string();
    let args = ["tick", "--concurrency", &concurrency];
    let stalled = StalledTick::at(env, &args, "recorded", "");
    wait_for_recorded_starts(env, count as i64);
    (runs, log, stalled)
}

/// Wait until `count` jobs' starts are on record (their pids in their attempts).
fn wait_for_recorded_starts(env: &Env, count: i64) {
    wait_until(LONG, "the jobs' starts to be recorded", || {
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE child_pid IS NOT NULL",
            &[],
        ) == count
    });
}

/// A run of schedule `held` (retried 10 min after a failure), whose command appends `ran` to the
/// returned log.
fn queue_logging_run(env: &Env) -> (i64, std::path::PathBuf) {
    let log = env.path("log");
    env.add(
        "held",
        &["--backoff-base", "10m"],
        &format!("echo ran >> {}", sh_quote(&log)),
    );
    (env.enqueue("held"), log)
}

/// A run whose command logs its attempt; a tick that claimed it and stalls right after the claim
/// until the file `go` exists. Returns the run, the log, `go` and the stalled tick.
fn claim_and_stall(env: &Env) -> (i64, std::path::PathBuf, std::path::PathBuf, StalledTick) {
    let log = env.path("log");
    let go = env.path("go");
    env.add(
        "once",
        &["--backoff-base", "0s", "--backoff-max", "0s"],
        &format!("echo \"attempt $RUNNER_ATTEMPT\" >> {}", sh_quote(&log)),
    );
    let run = env.enqueue("once");
    let mut cmd = env.cmd();
    cmd.args(["tick", "--lease", "3s"])
        .env("RUNNER_TEST_HOOK", format!("claimed:wait={}", go.display()));
    let stalled = StalledTick::spawn(cmd, env);
    wait_until(LONG, "the stalled tick to claim the run", || {
        status_of(env, run) == "running"
    });
    (run, log, go, stalled)
}

/// A tick started with a test hook, in the background.
struct StalledTick {
    child: Option<std::process::Child>,
    /// The file that lets a tick stalled by [`at`](Self::at) go on.
    go: Option<std::path::PathBuf>,
    stderr: std::path::PathBuf,
}

impl StalledTick {
    fn spawn(mut cmd: std::process::Command, env: &Env) -> StalledTick {
        let stderr = env.path("stalled.err");
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(fs::File::create(env.path("stalled.out")).expect("out"))
            .stderr(fs::File::create(&stderr).expect("err"))
            .spawn()
            .expect("spawn tick");
        StalledTick {
            child: Some(child),
            go: None,
            stderr,
        }
    }

    /// `runner ARGS` stalled at hook point `point` (`POINT:wait=PATH`, then the hooks in `more`,
    /// each after a comma), once it got there; [`go_on`](Self::go_on) lets it go on.
    fn at(env: &Env, args: &[&str], point: &str, more: &str) -> StalledTick {
        let go = env.path("go");
        let mut cmd = env.cmd();
        cmd.args(args).env(
            "RUNNER_TEST_HOOK",
            format!("{point}:wait={}{more}", go.display()),
        );
        let mut stalled = StalledTick::spawn(cmd, env);
        let reached = env.path("go.reached");
        wait_until(LONG, &format!("the tick to stall at {point}"), || {
            reached.exists()
        });
        stalled.go = Some(go);
        stalled
    }

    /// Let a tick stalled by [`at`](Self::at) go on: its exit status, and what it said on stderr.
    fn go_on(&mut self) -> (std::process::ExitStatus, String) {
        let go = self.go.take().expect("stalled by `at`");
        fs::write(&go, "").expect("let the stalled tick go on");
        let status = self.finish().status;
        (status, fs::read_to_string(&self.stderr).unwrap_or_default())
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    fn finish(&mut self) -> std::process::Output {
        let mut child = self.child.take().expect("running");
        let mut status = None;
        wait_until(LONG, "the stalled tick to exit", || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        });
        std::process::Output {
            status: status.expect("exited"),
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }
}

impl Drop for StalledTick {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// Ctrl-C on `run --wait` cancels the run
// ---------------------------------------------------------------------------

#[test]
fn ctrl_c_on_run_wait_cancels_the_run_and_exits_130() {
    let env = Env::init();
    let started = env.path("started");
    env.add(
        "long",
        &["--backoff-base", "0s", "--backoff-max", "0s"],
        &format!("echo $$ > {}; exec sleep 60", sh_quote(&started)),
    );
    let mut strays = Strays::default();
    let waiting = Bg::spawn(&env, "wait", &["run", "long", "--wait"]);
    let job = read_pid(&started, LONG);
    strays.group(job);
    kill(Pid::from_raw(waiting.pid() as i32), Signal::SIGINT).expect("SIGINT");
    let out = waiting.finish(LONG);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(!process_alive(job), "the job outlived the interrupt");
    let run = last_run_id(&env, "long");
    assert_eq!(status_of(&env, run), "cancelled");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_events WHERE run_id = $1 AND kind = 'CANCELLED'",
            &[&run]
        ),
        1
    );
    // The next tick does not run what the user just interrupted.
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, run), "cancelled");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1",
            &[&run]
        ),
        1
    );
}

// ---------------------------------------------------------------------------
// cancel and recovery stop what a dead tick left running
// ---------------------------------------------------------------------------

/// A run of the `orphan` schedule whose tick was killed with `kill -9` while its job (`exec sleep
/// 60`, pid returned) runs on. The job's group is killed when the returned `Strays` drops.
fn orphaned_job(env: &Env) -> (i64, u32, std::path::PathBuf, Strays) {
    let started = env.path("started");
    env.add(
        "orphan",
        &[],
        &format!("echo $$ > {}; exec sleep 60", sh_quote(&started)),
    );
    let run = env.enqueue("orphan");
    let mut strays = Strays::default();
    let mut tick = Bg::spawn(env, "tick", &["tick"]);
    let job = read_pid(&started, LONG);
    strays.group(job);
    tick.kill9();
    (run, job, started, strays)
}

/// `kill -9` the tick, then `cancel` the run: cancel itself terminates the orphaned job (the
/// tick that would have is gone), closes its attempt, and the schedule can run again.
#[test]
fn cancel_stops_a_run_whose_tick_died() {
    let env = Env::init();
    let (run, job, started, mut strays) = orphaned_job(&env);
    assert!(process_alive(job));

    let said = env.ok(&["cancel", &run.to_string()]);
    assert!(said.contains("terminated"), "{said}");
    assert!(!process_alive(job), "cancel left the orphan running");
    assert!(processes_of_run(&env, run).is_empty());
    assert_eq!(status_of(&env, run), "cancelled");
    let attempt = env.sql.query_row(
        "SELECT finished_at, error_code FROM job_attempts WHERE run_id = $1",
        &[&run],
    );
    let (finished, code) = (attempt[0].opt_i64().is_some(), attempt[1].opt_string());
    assert!(finished, "the attempt stays open");
    assert_eq!(code.as_deref(), Some("CANCELLED"));
    let status_text = env.ok(&["status"]);
    assert!(
        status_text.contains("running:         none"),
        "{status_text}"
    );

    // A new run of the (forbid) schedule starts, alone.
    fs::remove_file(&started).expect("rm");
    let next = env.enqueue("orphan");
    let mut tick = Bg::spawn(&env, "tick-2", &["tick"]);
    let job = read_pid(&started, LONG);
    strays.group(job);
    assert_eq!(status_of(&env, next), "running");
    tick.kill9();
}

/// A run cancelled (here: forged, as by a runner of another host) while its tick was dead and
/// its job alive: the next tick on the job's host stops the job and closes the attempt, and never
/// closes it while the job lives.
#[test]
fn the_next_tick_stops_an_attempt_left_open_under_a_cancelled_run() {
    let env = Env::init();
    let (run, job, _, _strays) = orphaned_job(&env);
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', owner = NULL, lease_token = NULL,
             lease_expires_at = NULL, heartbeat_at = NULL, finished_at = $2
         WHERE id = $1",
        &[&run, &real_now()],
    );
    assert!(process_alive(job));
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!process_alive(job), "the orphan outlived the sweep");
    let detail = env
        .sql
        .query_opt_string(
            "SELECT error_detail FROM job_attempts WHERE run_id = $1 AND finished_at IS NOT NULL",
            &[&run],
        )
        .unwrap_or_default();
    assert!(detail.contains(&format!("{job} ")), "{detail}");
}

// ---------------------------------------------------------------------------
// Processes do not outlive the record
// ---------------------------------------------------------------------------

/// `cmd >>f 2>&1 & exit 1` with immediate retries: each attempt's background process is killed
/// when its shell exits, before the next attempt starts, so no two are ever alive at once, and
/// nothing is left when the run is dead.
#[test]
fn background_processes_die_with_their_attempt_before_the_next_one() {
    let env = Env::init();
    let lock = env.path("lock");
    let log = env.path("log");
    let violations = env.path("violations");
    env.add(
        "bg",
        &["--backoff-base", "0s", "--backoff-max", "0s"],
        &format!(
            "sh -c 'exec 9>{lock}; flock -n 9 || echo \"$RUNNER_ATTEMPT\" >> {violations}; \
             echo \"start $RUNNER_ATTEMPT\" >> {log}; sleep 30; echo \"end $RUNNER_ATTEMPT\" >> {log}' \
             >/dev/null 2>&1 & sleep 0.2; exit 1",
            lock = sh_quote(&lock),
            log = sh_quote(&log),
            violations = sh_quote(&violations),
        ),
    );
    let run = env.enqueue("bg");
    let out = env.run(&["tick", "--max-tick", "10m"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, run), "dead");
    assert!(
        processes_of_run(&env, run).is_empty(),
        "leftovers outlived the dead run"
    );
    assert!(!violations.exists(), "two attempts were alive at once");
    assert!(
        !lines(&log).iter().any(|l| l.starts_with("end")),
        "{:?}",
        lines(&log)
    );
    let events = env
        .sql
        .query_strings(
            "SELECT detail FROM job_events WHERE run_id = $1 AND kind = 'LEFTOVERS'",
            &[&run],
        )
        .iter()
        .filter(|detail| json(detail)["killed"] == true)
        .count();
    assert_eq!(events, 3, "one LEFTOVERS event per attempt");
}

/// `(sleep 4; echo done >>marker) & echo started` succeeds, and what it left running is killed
/// at once and said so in `show`.
#[test]
fn leftovers_after_success_are_killed_and_shown() {
    let env = Env::init();
    let marker = env.path("marker");
    env.add(
        "quick",
        &[],
        &format!(
            "(sleep 4; echo done >> {}) & echo started",
            sh_quote(&marker)
        ),
    );
    let run = env.enqueue("quick");
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, run), "succeeded");
    assert!(processes_of_run(&env, run).is_empty());
    let shown = env.ok(&["show", &run.to_string()]);
    // The subshell, and its `sleep` once it started: "killed 2 leftover processes: ...".
    assert!(shown.contains("leftovers:  killed "), "{shown}");
    assert!(shown.contains(" leftover process"), "{shown}");
    assert!(!marker.exists());
}

// ---------------------------------------------------------------------------
// Only the recorded process, and only if it is still the job's
// ---------------------------------------------------------------------------

/// A copy of the database restored elsewhere sees the live job's lease as expired; its tick must
/// not kill the live job (another database's), even with the same pid and start time on record.
#[test]
fn a_restored_copy_never_kills_the_live_databases_job() {
    sqlite_only!("restores a copy of the database file");
    let env = Env::init();
    let started = env.path("started");
    env.add(
        "live",
        &[],
        &format!("echo $$ > {}; exec sleep 60", sh_quote(&started)),
    );
    let run = env.enqueue("live");
    let mut strays = Strays::default();
    let tick = Bg::spawn(&env, "tick", &["tick", "--lease", "3s"]);
    let job = read_pid(&started, LONG);
    strays.group(job);
    wait_until(LONG, "the start to be recorded", || {
        env.sql
            .query_opt_string(
                "SELECT CAST(child_pid AS TEXT) FROM job_attempts WHERE run_id = $1",
                &[&run],
            )
            .is_some()
    });
    let copy = env.path("restored.db");
    env.sql
        .sqlite()
        .execute("VACUUM INTO ?1", [copy.to_string_lossy()])
        .expect("copy");
    let out = env
        .cmd()
        .env("RUNNER_DB", &copy)
        // Recover only: the copy's retry of the run is not this test's business.
        .args(["tick", "--max-tick", "0s", "--now", &an_hour_later()])
        .output()
        .expect("tick on the copy");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        process_alive(job),
        "a tick on a restored copy killed the live job"
    );
    drop(tick);
}

/// The recorded pid belongs to another process now (forged: an unrelated process, with its real
/// start time on record): recovery must not signal it, since it does not carry the job's marker.
#[test]
fn a_recorded_pid_that_is_not_the_jobs_is_never_signalled() {
    let env = Env::init();
    env.add(
        "victim",
        &["--backoff-base", "0s", "--backoff-max", "0s"],
        "true",
    );
    let run = env.enqueue("victim");
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep");
    let pid = bystander.id();
    let start = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(')')?;
            rest.split_whitespace().nth(19)?.parse::<i64>().ok()
        })
        .expect("start time");
    forge_vanished_runner(&env, run, Some((i64::from(pid), start)));
    let out = env.run(&["tick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let alive = bystander.try_wait().expect("try_wait").is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(alive, "recovery killed a process that was not the job's");
    assert_eq!(status_of(&env, run), "succeeded", "recovered and retried");
}
