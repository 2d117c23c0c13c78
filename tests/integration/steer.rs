//! Steer what runs: `run` (manual runs), `cancel` of a running or pending run, `retry` of a dead
//! run or of one waiting out its backoff, and the jitter of retries, on real databases through
//! the real binary. Times are pinned with `--now`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::common::{
    assert_read_at, epoch, event_kinds, forge_second_attempt, json, last_run_id, never_near,
    process_alive, real_now, run_ids, sh_quote, status_of, stderr, stdout, utc, wait_until, Bg,
    Env, CLOCK_SLACK_SECS, RETRY_AT_ONCE,
};

#[test]
fn cancel_of_a_running_run_stops_its_process_group_and_status_shows_its_lease() {
    let env = Env::init();
    let pidfile = env.path("job.pid");
    let command = format!("echo $$ > '{}'; sleep 30", pidfile.display());
    env.add("sleeper", &[], &command);
    env.ok(&["run", "sleeper"]);
    let bg = Bg::spawn(
        &env,
        "tick",
        // Short enough that the cancel is seen within seconds (a heartbeat every 5 s), long
        // enough that a stalled machine does not let the lease expire under `status` below.
        &["tick", "--lease", "15s", "--owner", "bg-tick"],
    )
    .with_job_pidfile(&pidfile);
    let run_id = run_ids(&env, "sleeper")[0];
    wait_until(Duration::from_secs(20), "the job to start", || {
        bg.job_pid().is_some() && status_of(&env, run_id) == "running"
    });
    let job = bg.job_pid().expect("pid");

    // status: the running run with its owner, host and lease; 10 minutes on, its lease expired.
    let report = json(&env.ok(&["status", "--json"]));
    let running = &report["running"][0];
    assert_eq!(running["run_id"], run_id, "{report}");
    assert_eq!(running["owner"], "bg-tick");
    assert!(running["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert_eq!(running["lease_expired"], false);
    assert!(running["lease_expires_at_epoch"].as_i64().is_some());
    assert_eq!(report["expired_leases"], Value::Array(vec![]));
    let later = utc(running["lease_expires_at_epoch"].as_i64().expect("expiry") + 600);
    let report = json(&env.ok(&["--now", &later, "status", "--json"]));
    assert_eq!(report["expired_leases"][0]["run_id"], run_id, "{report}");
    assert!(
        report["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().unwrap_or("").contains("expired lease")),
        "{report}"
    );
    let text = env.ok(&["--now", &later, "status"]);
    assert!(text.contains("lease EXPIRED"), "{text}");
    assert!(text.contains("expired lease"), "{text}");
    // And in history, shown running with how long it has run.
    assert!(env.ok(&["history", "sleeper"]).contains("running"));

    // Retrying a running run makes no sense.
    let err = env.fails(2, &["retry", &run_id.to_string()]);
    assert!(err.contains("running"), "{err}");

    let out = env.ok(&["cancel", &run_id.to_string()]);
    assert!(out.contains(&format!("cancelled run {run_id}")), "{out}");
    assert!(out.contains("next heartbeat"), "{out}");
    assert_eq!(status_of(&env, run_id), "cancelled");
    wait_until(
        Duration::from_secs(20),
        "the job's process group to be killed",
        || !process_alive(job),
    );
    let out = bg.finish(Duration::from_secs(30));
    assert_eq!(
        out.status.code(),
        Some(0),
        "the tick still succeeds: {}",
        stderr(&out)
    );

    let run = env.sql.query_row(
        "SELECT lease_token, owner, finished_at, error_code FROM job_runs WHERE id = $1",
        &[&run_id],
    );
    let (lease, owner, finished, code) = (
        run[0].opt_string(),
        run[1].opt_string(),
        run[2].opt_i64(),
        run[3].string(),
    );
    assert_eq!((lease, owner), (None, None));
    assert!(finished.is_some());
    assert_eq!(code, "CANCELLED");
    // The tick closed the attempt when the job stopped.
    let attempt_code = env.sql.query_opt_string(
        "SELECT error_code FROM job_attempts WHERE run_id = $1 AND finished_at IS NOT NULL",
        &[&run_id],
    );
    assert_eq!(attempt_code.as_deref(), Some("CANCELLED"));
    let kinds = event_kinds(&env, run_id);
    // A cancel asked for, not a stale write: the attempt closed, no LEASE_LOST.
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["CANCELLED".to_string(), "ATTEMPT_CLOSED".to_string()],
        "{kinds:?}"
    );

    // Cancelled is final: neither cancel nor retry applies.
    let err = env.fails(2, &["cancel", &run_id.to_string()]);
    assert!(err.contains("already finished"), "{err}");
    env.fails(2, &["retry", &run_id.to_string()]);
}

/// A job that ends by itself after its run was cancelled, before the tick holding it learns of
/// the cancel (at its next heartbeat: a lease of 10 minutes puts that minutes away): the run
/// stays cancelled, and the attempt's closing event says it had already ended, not that the tick
/// stopped its job. `run --wait` says its end was not the run's, not that a retry is scheduled.
#[test]
fn a_cancelled_job_that_ends_by_itself_is_told_as_such() {
    let env = Env::init();
    let (go, started) = (env.path("go"), env.path("started"));
    // The job says it started: a run is `running` from its claim, and a cancel that came before
    // its start was recorded would keep its command from running at all.
    let command = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; echo done",
        started.display(),
        go.display()
    );
    env.add("waiter", &[], &command);

    let run_id = env.enqueue("waiter");
    let bg = Bg::spawn(&env, "tick", &["tick", "--lease", "600s"]);
    wait_until(Duration::from_secs(60), "the job to start", || {
        started.exists()
    });
    env.ok(&["cancel", &run_id.to_string()]);
    fs::write(&go, "").expect("go");
    let out = bg.finish(Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(&env, run_id), "cancelled");
    let closed = env.sql.query_opt_string(
        "SELECT detail FROM job_events WHERE run_id = $1 AND kind = 'ATTEMPT_CLOSED'",
        &[&run_id],
    );
    assert!(
        closed.as_deref().is_some_and(|d| d.contains(
            "the run was cancelled; its attempt had already succeeded when the tick learnt of it"
        )),
        "{closed:?}"
    );

    // The same through `run --wait` (its lease is a minute: whether the job ends first or is
    // stopped at the heartbeat, its end is not the run's).
    fs::remove_file(&go).expect("rm go");
    fs::remove_file(&started).expect("rm started");
    let waiting = Bg::spawn(&env, "wait", &["run", "waiter", "--wait"]);
    wait_until(Duration::from_secs(60), "the job to start", || {
        started.exists()
    });
    let waited = run_ids(&env, "waiter")
        .into_iter()
        .find(|id| status_of(&env, *id) == "running")
        .expect("the waited run");
    env.ok(&["cancel", &waited.to_string()]);
    fs::write(&go, "").expect("go");
    let out = waiting.finish(Duration::from_secs(120));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "runner: run {waited} attempt 1 succeeded, but the run was no longer this runner's"
        )) || err.contains(&format!(
            "runner: run {waited} attempt 1 failed: CANCELLED, but the run was no longer this \
             runner's"
        )),
        "{err}"
    );
    assert!(!err.contains("retry scheduled"), "{err}");
    assert_eq!(status_of(&env, waited), "cancelled");
}

/// A cancel that lands between a tick's claim and the record of its job's start (the tick stalled
/// there by a hook): the job is stopped at its gate, its command never runs, and the tick closes
/// the attempt at once, saying its command never ran, so the next run of the `forbid` schedule
/// starts at the tick's next claim instead of waiting out the lease and the kill grace (the
/// lease is 10 minutes: nothing else closes the attempt within the test).
#[test]
fn a_run_cancelled_before_its_job_starts_closes_its_attempt_at_once() {
    let env = Env::init();
    let (log, go) = (env.path("log"), env.path("go"));
    env.add(
        "alone",
        &["--overlap", "forbid"],
        &format!("echo \"$RUNNER_RUN_ID\" >> {}", sh_quote(&log)),
    );
    let cancelled = env.enqueue("alone");
    let bg = Bg::spawn_hooked(
        &env,
        "tick",
        &["tick", "--lease", "600s", "--max-tick", "10m"],
        &format!("spawned:wait={}", go.display()),
    );
    let reached = env.path("go.reached");
    wait_until(
        Duration::from_secs(120),
        "the tick to spawn the job",
        || reached.exists(),
    );
    env.ok(&["cancel", &cancelled.to_string()]);
    // Due now, behind the cancelled run of its `forbid` schedule.
    let next = env.enqueue("alone");
    fs::write(&go, "").expect("let the tick go on");
    let out = bg.finish(Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));

    let ran = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !ran.lines().any(|l| l == cancelled.to_string()),
        "the cancelled run's command ran: {ran:?}"
    );
    assert_eq!(status_of(&env, cancelled), "cancelled");
    let attempt = env.sql.query_row(
        "SELECT CAST(finished_at IS NOT NULL AS integer), error_code, error_detail, duration_ms
         FROM job_attempts WHERE run_id = $1",
        &[&cancelled],
    );
    assert_eq!(attempt[0].i64(), 1, "the attempt is closed");
    assert_eq!(attempt[1].opt_string().as_deref(), Some("CANCELLED"));
    let detail = attempt[2].opt_string().unwrap_or_default();
    assert!(detail.contains("its command never ran"), "{detail}");
    assert_eq!(attempt[3].i64(), 0, "a job that never started took no time");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE id = $1 AND stopping_by IS NOT NULL",
            &[&cancelled]
        ),
        0,
        "no job is being stopped"
    );
    let closed = env.sql.query_opt_string(
        "SELECT detail FROM job_events WHERE run_id = $1 AND kind = 'ATTEMPT_CLOSED'",
        &[&cancelled],
    );
    assert!(
        closed
            .as_deref()
            .is_some_and(|d| d.contains("CANCELLED") && d.contains("its command never ran")),
        "{closed:?}"
    );
    let shown = env.ok(&["show", &cancelled.to_string()]);
    assert!(
        shown.contains("cancelled after 1 attempt(s)")
            && !shown.contains("being stopped")
            && shown.contains("its command never ran"),
        "{shown}"
    );
    let listed = json(&env.ok(&["history", "alone", "--json"]));
    let row = listed
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["id"] == cancelled))
        .unwrap_or_else(|| panic!("run {cancelled} in {listed}"));
    assert_eq!(row["status"], "cancelled", "{row}");
    // Its attempt ended (null: still running), having taken no time.
    assert_eq!(row["duration_ms"], 0, "{row}");

    // The tick's next claim took the schedule's next run: it did not wait behind a job that
    // never existed.
    assert_eq!(status_of(&env, next), "succeeded");
    assert_eq!(ran.lines().collect::<Vec<_>>(), [next.to_string()]);
}

/// A run that recovery took from another host and retried has two open attempts while that
/// host has not closed its own yet (recovery leaves that to it): `cancel` speaks of the retry's
/// attempt, the one it cancelled, and succeeds.
#[test]
fn cancel_of_a_retried_run_speaks_of_its_current_attempt() {
    let env = Env::init();
    env.add("retried", &[], "true");
    let run = env.enqueue("retried");
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', attempt = 2, owner = 'elsewhere:1',
                 lease_token = 'second', lease_expires_at = 4102444800, heartbeat_at = 1,
                 started_at = 1
         WHERE id = $1",
        &[&run],
    );
    for (attempt, owner, host, token) in [
        (1_i64, "gone:1", "gone-host", "first"),
        (2, "elsewhere:1", "elsewhere", "second"),
    ] {
        env.sql.exec(
            "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token,
                 started_at, definition_id)
             SELECT $1, $2, $3, $4, 1, $5, 1, definition_id FROM job_runs WHERE id = $1",
            &[&run, &attempt, &owner, &host, &token],
        );
    }
    let out = env.run(&["cancel", &run.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("attempt 2 runs on host elsewhere"),
        "{}",
        stdout(&out)
    );
    assert_eq!(status_of(&env, run), "cancelled");
}

/// Another host recovered a run whose tick here had stalled and retried it, leaving attempt 1
/// open for this host to close; attempt 2 was running on `far-host` when the run was cancelled.
/// This host's next tick stops and closes its orphaned attempt 1, but the job being stopped is
/// attempt 2's, still running there: the run keeps waiting for it (its `stopping_by` stays), and
/// the `forbid` schedule's next run is not claimed beside it. (Closing any attempt of the run
/// used to end the wait, and the next run started while attempt 2's job still ran.)
#[test]
fn closing_an_older_attempt_keeps_waiting_for_the_cancelled_runs_current_job() {
    let env = Env::init();
    let (cancelled, next, log) = queue_behind_two_open_attempts(&env, 1);

    env.tick(&[]);
    still_waiting_for_attempt(&env, 2, cancelled, next, &log);
    let status = json(&env.ok(&["status", "--json"]));
    let stopping = &status["stopping"][0];
    assert_eq!(stopping["run_id"], cancelled, "{status}");
    assert_eq!(stopping["attempt"], 2, "{status}");
    assert_eq!(stopping["host"], "far-host", "{status}");
}

/// The other way round: the run was retried here after `far-host` stalled, and cancelled while
/// attempt 2 ran here; its runner here is gone, so this host's next tick closes attempt 2, the
/// current one, first. Attempt 1's job may still be alive on `far-host`: the run keeps waiting
/// for it, and `status` says where. (Closing the current attempt used to end the
/// wait whatever other attempt of the run was still open.)
#[test]
fn closing_the_current_attempt_keeps_waiting_for_an_older_one_still_open() {
    let env = Env::init();
    let (cancelled, next, log) = queue_behind_two_open_attempts(&env, 2);

    env.tick(&[]);
    still_waiting_for_attempt(&env, 1, cancelled, next, &log);
    let status = json(&env.ok(&["status", "--json"]));
    let stopping = status["stopping"].as_array().expect("stopping");
    assert_eq!(stopping.len(), 1, "{status}");
    assert_eq!(stopping[0]["run_id"], cancelled, "{status}");
    assert_eq!(stopping[0]["attempt"], 2, "{status}");
    assert_eq!(stopping[0]["open_attempt"], 1, "{status}");
    assert_eq!(stopping[0]["host"], "far-host", "{status}");
    let text = env.ok(&["status"]);
    assert!(
        text.contains(&format!(
            "stopping:        1 cancelled run whose job is still being stopped\n  \
             run {cancelled} (alone) cancelled on attempt 2/3, its attempt 1 stopping on far-host \
             (runner pid 4242)"
        )),
        "{text}"
    );
    let shown = env.ok(&["show", &cancelled.to_string()]);
    assert!(shown.contains("its job is being stopped"), "{shown}");
}

/// Set up a `forbid` schedule `alone` (whose jobs append their run id to `log`) with a run
/// cancelled while attempt 2 ran, its job to be stopped by 2100, and attempts 1 and 2 both open
/// (another host recovered the run and retried it, leaving the stalled host's attempt open): the
/// one numbered `here` on this host, under a runner that is gone; the other on `far-host`
/// (runner pid 4242), which nothing here can reach. Then queue the schedule's next run. Returns
/// the cancelled run, the next run and `log`.
fn queue_behind_two_open_attempts(env: &Env, here: i64) -> (i64, i64, PathBuf) {
    let log = env.path("log");
    env.add(
        "alone",
        &["--overlap", "forbid"],
        &format!("echo \"$RUNNER_RUN_ID\" >> {}", sh_quote(&log)),
    );
    let cancelled = env.enqueue("alone");
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', attempt = 2, started_at = 1, finished_at = 2,
                 error_code = 'CANCELLED', stopping_by = $2
         WHERE id = $1",
        &[&cancelled, &STOPPING_BY_2100],
    );
    // The runner here is gone: a reaped child's pid, under a start time no live process has.
    let mut gone = Command::new("true").spawn().expect("spawn true");
    gone.wait().expect("wait for true");
    let gone_pid = i64::from(gone.id());
    let this_host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8");
    for attempt in [1_i64, 2] {
        let (owner, host, runner_pid) = if attempt == here {
            ("stalled:1", this_host.as_str(), gone_pid)
        } else {
            ("far:4242", "far-host", 4242)
        };
        env.sql.exec(
            "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, runner_start_time,
                 lease_token, started_at, definition_id)
             SELECT $1, $2, $3, $4, $5, 1, $6, 1, definition_id FROM job_runs WHERE id = $1",
            &[
                &cancelled,
                &attempt,
                &owner,
                &host,
                &runner_pid,
                &format!("token-{attempt}"),
            ],
        );
    }
    let next = env.enqueue("alone");
    (cancelled, next, log)
}

/// The `stopping_by` forged on a cancelled run whose job is still being stopped: 2100, never
/// reached.
const STOPPING_BY_2100: i64 = 4_102_444_800;

/// The same from the stalled host's side: its tick is still running attempt 1's job when
/// another host's recovery retries the run and the run is cancelled while attempt 2 runs on
/// `far-host` (both forged under it). When attempt 1's job ends, the tick's late end is refused
/// but closes attempt 1 under the cancel; the run keeps waiting for attempt 2's job, and the
/// `forbid` schedule's next run is not claimed, by that tick nor the next. (The late end used to
/// end the wait.)
#[test]
fn a_late_end_of_an_older_attempt_keeps_waiting_for_the_cancelled_runs_current_job() {
    let env = Env::init();
    let log = env.path("log");
    let started = env.path("started");
    let go = env.path("go");
    // The first run's job waits for `go`; any later run's logs that it ran.
    env.add(
        "alone",
        &["--overlap", "forbid"],
        &format!(
            "if [ -e {started} ]; then echo \"$RUNNER_RUN_ID\" >> {log}; exit 0; fi; \
             touch {started}; while [ ! -e {go} ]; do sleep 0.1; done",
            started = sh_quote(&started),
            log = sh_quote(&log),
            go = sh_quote(&go),
        ),
    );
    let cancelled = env.enqueue("alone");
    let tick = Bg::spawn(&env, "tick", &["tick"]);
    wait_until(Duration::from_secs(120), "attempt 1's job to start", || {
        started.exists()
    });
    // Forged: recovered and retried elsewhere, then cancelled while attempt 2 runs on far-host,
    // its job to be stopped by 2100.
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', attempt = 2, owner = NULL, lease_token = NULL,
                 lease_expires_at = NULL, heartbeat_at = NULL, finished_at = started_at,
                 error_code = 'CANCELLED', stopping_by = $2
         WHERE id = $1",
        &[&cancelled, &STOPPING_BY_2100],
    );
    forge_second_attempt(&env, cancelled, "far:4242", "far-host", 4242);
    let next = env.enqueue("alone");
    fs::write(&go, "").expect("let attempt 1's job end");
    let out = tick.finish(Duration::from_secs(120));
    assert!(out.status.code().is_some(), "{:?}", out.status);
    env.tick(&[]);

    still_waiting_for_attempt(&env, 2, cancelled, next, &log);
}

/// Of the cancelled run's two attempts only `open` is open still; the run still waits for its job
/// (its `stopping_by` unchanged), so the `forbid` schedule's `next` run waits, and no job of the
/// schedule (which appends to `log`) ran.
fn still_waiting_for_attempt(env: &Env, open: i64, cancelled: i64, next: i64, log: &Path) {
    let still_open = env.sql.query_i64s(
        "SELECT attempt FROM job_attempts WHERE run_id = $1 AND finished_at IS NULL",
        &[&cancelled],
    );
    assert_eq!(still_open, [open], "only attempt {open} is still open");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE id = $1 AND stopping_by = $2",
            &[&cancelled, &STOPPING_BY_2100]
        ),
        1,
        "attempt {open}'s job is still being stopped"
    );
    assert_eq!(status_of(env, next), "pending", "the next run waits");
    assert!(!log.exists(), "a job of the schedule ran");
}

/// `--overlap forbid` holds while a cancelled run's job is still alive: the tick holding it stops
/// it only at its next heartbeat, and a new run of the schedule waits until its attempt closed.
#[test]
fn a_forbid_schedule_starts_no_run_while_a_cancelled_one_still_runs() {
    let env = Env::init();
    let log = env.path("log");
    let command = format!(
        "echo \"start $RUNNER_RUN_ID\" >> '{0}'; sleep 3; echo \"end $RUNNER_RUN_ID\" >> '{0}'",
        log.display()
    );
    env.add("alone", &[], &command);
    env.ok(&["run", "alone"]);
    // The default lease: its heartbeat (every 20 s) comes after the job's 3 s, so the cancelled
    // job runs to its end.
    let first = Bg::spawn(&env, "first", &["tick"]);
    wait_until(Duration::from_secs(60), "run 1 to start", || {
        fs::read_to_string(&log).is_ok_and(|l| l.contains("start 1"))
    });
    env.ok(&["cancel", "1"]);
    env.ok(&["run", "alone"]);
    env.ok(&["tick"]);
    first.finish(Duration::from_secs(120));
    // Had the second tick found it still held back, a later one runs it.
    env.ok(&["tick"]);
    let lines: Vec<String> = fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines, ["start 1", "end 1", "start 2", "end 2"], "overlap");
}

/// A `forbid` schedule whose run 1 holds `lock` (its pid in `pidfile`) and whose later runs log
/// whether run 1's job still held it when they started (`overlap`) or not (`alone`). The lock
/// goes with the last of run 1's processes, whatever pid the kernel hands out meanwhile. Run 1
/// sleeps 60 s, or, with `ignore_term`, never ends by itself: it writes `TERM` to the file `term`
/// for each SIGTERM and goes on, so that only SIGKILL stops it (the trap is set before the pid is
/// written, so no SIGTERM can come before it).
fn add_lock_holder(env: &Env, name: &str, ignore_term: bool) -> (PathBuf, PathBuf, PathBuf) {
    let (lock, pidfile, log) = (env.path("lock"), env.path("job.pid"), env.path("log"));
    let (trap, hold) = if ignore_term {
        (
            format!("trap 'echo TERM >> {}' TERM; ", sh_quote(&env.path("term"))),
            "while :; do sleep 1 & wait $!; done",
        )
    } else {
        (String::new(), "sleep 60")
    };
    let command = format!(
        "if [ \"$RUNNER_RUN_ID\" = 1 ]; then {trap}exec 9> {lock}; flock 9; echo $$ > {pid}; {hold}; \
         elif flock -n {lock} true; then echo \"alone $RUNNER_RUN_ID\" >> {log}; \
         else echo \"overlap $RUNNER_RUN_ID\" >> {log}; fi",
        lock = sh_quote(&lock),
        pid = sh_quote(&pidfile),
        log = sh_quote(&log),
    );
    env.add(name, &[], &command);
    (lock, pidfile, log)
}

/// [`add_lock_holder`]'s schedule `name`, its run 1 executed by a tick (`--lease 3s`) in the
/// background. Returns the lock, the log and the tick, once run 1's job holds the lock.
fn lock_held_by_run_1(env: &Env, name: &str, ignore_term: bool) -> (PathBuf, PathBuf, Bg) {
    let (lock, pidfile, log) = add_lock_holder(env, name, ignore_term);
    env.ok(&["run", name]);
    let bg = Bg::spawn(env, "tick", &["tick", "--lease", "3s"]).with_job_pidfile(&pidfile);
    wait_until(Duration::from_secs(60), "run 1's job to start", || {
        bg.job_pid().is_some()
    });
    (lock, log, bg)
}

fn tick_pid(bg: &Bg) -> Pid {
    Pid::from_raw(bg.pid() as i32)
}

/// The tick of [`lock_held_by_run_1`], hung (SIGSTOP) while run 1 was cancelled, resumed: it
/// ends well, run 1 still cancelled.
fn hung_tick_resumed_finds_run_1_cancelled(env: &Env, bg: Bg) {
    kill(tick_pid(&bg), Signal::SIGCONT).expect("SIGCONT the tick");
    let out = bg.finish(Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(status_of(env, 1), "cancelled");
}

/// Run 2 of [`lock_held_by_run_1`]'s schedule `name`, queued and executed by a tick an hour on,
/// runs alone: run 1's job was stopped first.
fn an_hour_on_run_2_runs_alone(env: &Env, name: &str, lock: &Path, log: &Path) {
    env.ok(&["run", name]);
    env.tick_at(&utc(real_now() + 3600));
    assert!(lock_free(lock), "run 1's job was stopped");
    assert_eq!(
        fs::read_to_string(log).expect("log"),
        "alone 2\n",
        "overlap"
    );
}

/// Whether the lock of `add_lock_holder` is free: run 1's job is gone.
fn lock_free(lock: &Path) -> bool {
    Command::new("flock")
        .args(["-n", &lock.display().to_string(), "true"])
        .status()
        .expect("flock")
        .success()
}

/// `--overlap forbid` waits for a cancelled run's job until the tick holding it has stopped it,
/// however long that takes: a job that ignores SIGTERM lives through the kill grace (10 s), far
/// past the tick's lease (3 s), and the schedule's next run, in that same tick, starts only once
/// SIGKILL has stopped it. (The wait used to end a lease after the cancel.) Meanwhile `show` and
/// `status` say so. Nothing here races the machine's speed: the job never ends by itself, its
/// TERM trap set before its pid is written; run 2 is enqueued, and `show` and `status` read,
/// while the tick is held (`running:wait`) before it can learn of the cancel.
#[test]
fn a_forbid_schedule_waits_for_a_cancelled_job_through_its_kill_grace() {
    let env = Env::init();
    let (lock, pidfile, log) = add_lock_holder(&env, "stubborn", true);
    env.ok(&["run", "stubborn"]);
    let held = env.path("held");
    let bg = Bg::spawn_hooked(
        &env,
        "tick",
        &["tick", "--lease", "3s"],
        &format!("running:wait={}", held.display()),
    )
    .with_job_pidfile(&pidfile);
    wait_until(Duration::from_secs(60), "run 1's job to start", || {
        bg.job_pid().is_some() && env.path("held.reached").exists()
    });
    env.ok(&["run", "stubborn"]);
    env.ok(&["cancel", "1"]);
    let shown = env.ok(&["show", "1"]);
    assert!(shown.contains("its job is being stopped"), "{shown}");
    let status = env.ok(&["status"]);
    assert!(
        status.contains(
            "stopping:        1 cancelled run whose job is still being stopped\n  run 1 (stubborn)"
        ),
        "{status}"
    );
    fs::write(&held, "").expect("let the tick go on");
    let out = bg.finish(Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(lock_free(&lock), "run 1's job was stopped");
    let term = fs::read_to_string(env.path("term")).unwrap_or_default();
    assert!(
        term.starts_with("TERM\n"),
        "run 1's job lived through SIGTERM, so SIGKILL stopped it: {term:?}"
    );
    assert_eq!(
        fs::read_to_string(&log).unwrap_or_default(),
        "alone 2\n",
        "run 2 ran in the same tick, once run 1's job was gone"
    );
    let shown = env.ok(&["show", "1"]);
    assert!(!shown.contains("being stopped"), "{shown}");
    let status = env.ok(&["status"]);
    assert!(!status.contains("stopping:"), "{status}");
}

/// A tick that hangs (SIGSTOP) holding a run that is then cancelled cannot stop its job. Once
/// the run's lease and the kill grace are past, the next tick's recovery stops it, as it stops
/// the jobs of expired leases (the runner's being alive notwithstanding), closes its attempt, and
/// only then starts the schedule's next run. (It used to start that run beside the job a lease
/// after the cancel, and no tick ever stopped the job: a cancelled run is not a running one.)
#[test]
fn a_hung_ticks_cancelled_job_is_stopped_before_its_schedule_runs_again() {
    let env = Env::init();
    let (lock, log, bg) = lock_held_by_run_1(&env, "hung", false);
    kill(tick_pid(&bg), Signal::SIGSTOP).expect("SIGSTOP the tick");
    let out = env.ok(&["cancel", "1"]);
    assert!(out.contains("next heartbeat"), "{out}");
    // An hour on: the hung tick's lease and the kill grace are long past.
    an_hour_on_run_2_runs_alone(&env, "hung", &lock, &log);
    let closed = env.sql.query_opt_string(
        "SELECT error_code FROM job_attempts WHERE run_id = 1 AND finished_at IS NOT NULL",
        &[],
    );
    assert_eq!(closed.as_deref(), Some("CANCELLED"));
    // The hung tick, resumed, finds its run cancelled and its attempt closed.
    hung_tick_resumed_finds_run_1_cancelled(&env, bg);
}

/// The same with two open attempts: the tick here holding attempt 1 hangs (SIGSTOP), another
/// host recovers the run and retries it, and the run is cancelled while attempt 2 runs on
/// `far-host` (forged). Past the deadline, the next tick here stops attempt 1's job, closes that
/// attempt, and only then starts the schedule's next run; attempt 2 is left to `far-host`'s tick
/// and no longer waited for. (Recovery used to look at the current attempt only: it found it on
/// another host and stopped waiting, leaving attempt 1's job running here, under a runner alive
/// but hung, beside the schedule's next run.)
#[test]
fn an_overdue_cancelled_runs_older_attempt_here_is_stopped_before_its_schedule_runs_again() {
    let env = Env::init();
    let (lock, log, bg) = lock_held_by_run_1(&env, "hung", false);
    kill(tick_pid(&bg), Signal::SIGSTOP).expect("SIGSTOP the tick");
    // Forged: recovered and retried on far-host, then cancelled while attempt 2 ran there, its
    // job to be stopped by the lease's expiry and the kill grace, as `cancel` sets it.
    env.sql.exec(
        "UPDATE job_runs SET status = 'cancelled', attempt = 2, owner = NULL, lease_token = NULL,
                 lease_expires_at = NULL, heartbeat_at = NULL, finished_at = started_at,
                 error_code = 'CANCELLED', stopping_by = lease_expires_at + 10
         WHERE id = 1",
        &[],
    );
    forge_second_attempt(&env, 1, "far:4242", "far-host", 4242);
    // An hour on: the deadline is long past.
    an_hour_on_run_2_runs_alone(&env, "hung", &lock, &log);
    let open = env.sql.query_i64s(
        "SELECT attempt FROM job_attempts WHERE run_id = 1 AND finished_at IS NULL",
        &[],
    );
    assert_eq!(open, [2], "attempt 2 is left to far-host");
    let closed = env.sql.query_opt_string(
        "SELECT error_code FROM job_attempts WHERE run_id = 1 AND attempt = 1",
        &[],
    );
    assert_eq!(closed.as_deref(), Some("CANCELLED"));
    hung_tick_resumed_finds_run_1_cancelled(&env, bg);
}

#[test]
fn cancel_of_a_pending_run_means_it_never_runs() {
    let env = Env::init();
    let marker = env.path("ran");
    env.add("once", &[], &format!("touch '{}'", marker.display()));
    env.ok(&["run", "once"]);
    let id = run_ids(&env, "once")[0];
    let out = env.ok(&["cancel", &id.to_string()]);
    assert!(
        out.contains(&format!("cancelled run {id} of once")),
        "{out}"
    );
    env.ok(&["tick"]);
    assert!(!marker.exists(), "a cancelled run was executed");
    assert_eq!(status_of(&env, id), "cancelled");
    assert_eq!(
        env.sql.query_i64(
            &format!("SELECT count(*) FROM job_runs WHERE id = {id} AND finished_at IS NOT NULL"),
            &[]
        ),
        1
    );
    let shown = json(&env.ok(&["show", &id.to_string(), "--json"]));
    let last = shown["events"].as_array().expect("events").last().cloned();
    assert_eq!(
        last.as_ref().map(|e| e["kind"].clone()),
        Some("CANCELLED".into())
    );
    assert_eq!(
        last.map(|e| e["detail"]["from"].clone()),
        Some("pending".into())
    );
    env.fails(3, &["cancel", "424242"]);
    env.fails(3, &["retry", "424242"]);
}

#[test]
fn retry_of_a_dead_run_allows_one_more_attempt_and_keeps_counting() {
    let env = Env::init();
    let flag = env.path("healed");
    // Fails until the flag file exists.
    let command = format!("test -e '{}' || exit 7", flag.display());
    env.add_at(
        Some("2026-07-01T11:00:00Z"),
        "fragile",
        &never_near("2026-07-01T11:00:00Z"),
        &RETRY_AT_ONCE,
        &command,
    );
    env.ok(&["--now", "2026-07-01T12:00:00Z", "run", "fragile"]);
    let id = run_ids(&env, "fragile")[0];
    env.tick_at("2026-07-01T12:00:01Z");
    env.tick_at("2026-07-01T12:00:05Z");
    assert_eq!(status_of(&env, id), "dead");

    let out = env.ok(&["--now", "2026-07-01T12:01:00Z", "retry", &id.to_string()]);
    assert!(
        out.contains("attempt 3 of 3") && out.contains("raised from 2 to 3"),
        "{out}"
    );
    let row = |what: &str| {
        env.sql
            .query_i64(&format!("SELECT {what} FROM job_runs WHERE id = {id}"), &[])
    };
    assert_eq!(status_of(&env, id), "pending");
    assert_eq!(row("attempt"), 2, "attempts keep counting");
    assert_eq!(row("max_attempts"), 3);
    assert_eq!(row("finished_at IS NULL"), 1);
    // Due now (when `retry` read its clock), not at the time it first failed: no false lag
    // alarm, no retry time in the past.
    let due = row("run_at");
    assert_read_at(due, "2026-07-01T12:01:00Z", 0, "the retried run's due time");
    let metrics = env.ok(&["--now", &utc(due), "metrics"]);
    let lag = metrics
        .lines()
        .find_map(|l| l.strip_prefix("runner_oldest_due_lag_seconds "))
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no lag in {metrics}"));
    assert!((0..=CLOCK_SLACK_SECS).contains(&lag), "{metrics}");
    let history = json(&env.ok(&["--now", &utc(due), "history", "--json"]));
    let listed = history.to_string();
    assert!(
        listed.contains(&format!("\"run_at_epoch\":{due}")),
        "{listed}"
    );
    let shown = json(&env.ok(&["show", &id.to_string(), "--json"]));
    let retried = shown["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["kind"] == "RETRIED")
        .cloned()
        .expect("a RETRIED event");
    assert_eq!(retried["detail"]["from"], "dead");
    assert_eq!(retried["detail"]["next_attempt"], 3);
    assert_eq!(retried["detail"]["max_attempts_before"], 2);

    fs::write(&flag, "").expect("flag");
    env.tick_at("2026-07-01T12:01:30Z"); // after the latest it can be due
    assert_eq!(status_of(&env, id), "succeeded");
    assert_eq!(row("attempt"), 3);
    assert_eq!(
        env.sql.query_i64(
            &format!("SELECT count(*) FROM job_attempts WHERE run_id = {id}"),
            &[]
        ),
        3
    );
    // Succeeded: nothing to retry.
    let err = env.fails(2, &["retry", &id.to_string()]);
    assert!(
        err.contains("succeeded") && err.contains("runner run fragile"),
        "{err}"
    );
}

#[test]
fn retry_of_a_run_waiting_out_its_backoff_makes_it_due_now() {
    let env = Env::init();
    env.add_at(
        Some("2026-07-01T11:00:00Z"),
        "slowretry",
        &never_near("2026-07-01T11:00:00Z"),
        &["--backoff-base", "1h", "--backoff-max", "1h"],
        "exit 9",
    );
    env.ok(&["--now", "2026-07-01T12:00:00Z", "run", "slowretry"]);
    let id = run_ids(&env, "slowretry")[0];
    // Not yet tried: nothing to retry.
    let err = env.fails(2, &["retry", &id.to_string()]);
    assert!(err.contains("not failed yet"), "{err}");

    env.tick_at("2026-07-01T12:00:01Z");
    assert_eq!(status_of(&env, id), "pending");
    let run_at = env
        .sql
        .query_i64(&format!("SELECT run_at FROM job_runs WHERE id = {id}"), &[]);
    assert!(run_at > epoch("2026-07-01T12:20:00Z"), "a backoff delay");
    // A tick now does nothing; after retry it runs attempt 2.
    env.tick_at("2026-07-01T12:00:10Z");
    assert_eq!(
        env.sql.query_i64(
            &format!("SELECT attempt FROM job_runs WHERE id = {id}"),
            &[]
        ),
        1
    );
    let out = env.ok(&["--now", "2026-07-01T12:00:20Z", "retry", &id.to_string()]);
    assert!(out.contains("attempt 2 of 3"), "{out}");
    // Due when `retry` read its clock, not at the end of the backoff.
    assert_read_at(
        env.sql
            .query_i64(&format!("SELECT run_at FROM job_runs WHERE id = {id}"), &[]),
        "2026-07-01T12:00:20Z",
        0,
        "the retried run's due time",
    );
    assert_eq!(
        env.sql.query_i64(
            &format!("SELECT max_attempts FROM job_runs WHERE id = {id}"),
            &[]
        ),
        3,
        "attempts were left: the limit stays"
    );
    env.tick_at("2026-07-01T12:01:00Z"); // after the latest it can be due
    assert_eq!(
        env.sql.query_i64(
            &format!("SELECT attempt FROM job_runs WHERE id = {id}"),
            &[]
        ),
        2
    );
    assert_eq!(
        event_kinds(&env, id)
            .iter()
            .filter(|kind| *kind == "RETRIED")
            .count(),
        1
    );
}

/// `run NAME --wait` of a `forbid` schedule whose earlier run is due does not jump the queue,
/// whether that run was queued by `runner run` with no tick since or is a failed run that `retry`
/// made due: it exits 1 saying so, its run stays pending, and the next tick executes both, each
/// once (forbid keeps a schedule's runs in order).
#[test]
fn run_wait_behind_an_earlier_due_run_of_a_forbid_schedule_stays_queued() {
    let env = Env::init();
    let log = env.path("ran.log");
    let lines = || fs::read_to_string(&log).unwrap_or_default().lines().count();
    let attempts = |run: i64| {
        env.sql.query_i64(
            &format!("SELECT count(*) FROM job_attempts WHERE run_id = {run}"),
            &[],
        )
    };
    let refused_wait = |name: &str| -> i64 {
        let out = env.run(&["run", name, "--wait"]);
        let waited = last_run_id(&env, name);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("run {waited} is queued but could not start now"))
                && err.contains("running or due before this one"),
            "{err}"
        );
        assert_eq!(status_of(&env, waited), "pending");
        assert_eq!(attempts(waited), 0, "not started");
        waited
    };

    // Queued by `runner run`, no tick since.
    env.add("j", &[], &format!("echo j >> {}", sh_quote(&log)));
    let queued = env.enqueue("j");
    let waited = refused_wait("j");
    assert_eq!(status_of(&env, queued), "pending");
    assert_eq!(lines(), 0, "nothing ran");
    env.tick(&[]);
    for run in [queued, waited] {
        assert_eq!(status_of(&env, run), "succeeded", "run {run}");
        assert_eq!(attempts(run), 1, "run {run} executed once");
    }
    assert_eq!(lines(), 2);

    // A failed run waiting out its backoff, made due by `retry`.
    let ok = env.path("ok");
    env.add(
        "k",
        &["--backoff-base", "1h", "--backoff-max", "1h"],
        &format!("test -e {} && echo k >> {}", sh_quote(&ok), sh_quote(&log)),
    );
    let failed = env.enqueue("k");
    env.tick(&[]);
    assert_eq!(status_of(&env, failed), "pending");
    assert_eq!(attempts(failed), 1);
    env.ok(&["retry", &failed.to_string()]);
    fs::write(&ok, "").expect("write ok");
    let waited = refused_wait("k");
    assert_eq!(lines(), 2, "nothing ran");
    env.tick(&[]);
    assert_eq!(status_of(&env, failed), "succeeded");
    assert_eq!(attempts(failed), 2, "its retry executed once");
    assert_eq!(status_of(&env, waited), "succeeded");
    assert_eq!(attempts(waited), 1, "executed once");
    assert_eq!(lines(), 4);
    env.tick(&[]);
    assert_eq!(lines(), 4, "a later tick runs nothing again");
}

/// Manual runs enqueued in the same second by processes that read the same monotonic instant
/// each get their own run: the nonce in their idempotency key comes from the OS, not from a
/// generator seeded by the clock (which gave two such runs one key: the second `runner run`
/// failed on the unique key, and its run was lost).
#[test]
fn manual_runs_enqueued_at_the_same_clock_reading_are_all_kept() {
    let env = Env::init();
    env.add("report", &[], "true");
    let frozen = frozen_monotonic_clock(&env);
    for _ in 0..3 {
        ok_under(
            &env,
            &frozen,
            &["--now", "2026-07-01T12:00:00Z", "run", "report"],
        );
    }
    let keys = env.sql.query_strings(
        "SELECT DISTINCT r.idempotency_key FROM job_runs r
         JOIN job_definitions d ON d.id = r.definition_id WHERE d.name = 'report'",
        &[],
    );
    assert_eq!(keys.len(), 3, "{keys:?}");
    // `report@manual:SECONDS:NONCE`, SECONDS when `run` read its clock.
    for key in &keys {
        let secs = key
            .strip_prefix("report@manual:")
            .and_then(|rest| rest.split(':').next())
            .and_then(|secs| secs.parse().ok())
            .unwrap_or_else(|| panic!("{key}"));
        assert_read_at(secs, "2026-07-01T12:00:00Z", 0, key);
    }
}

/// Ticks that read the same monotonic instant still draw their own backoff jitter: a failed run
/// in each of two databases, same schedule, same time, retries at two different times. (Seeded by
/// the clock, both drew the same delay: retries across ticks in lockstep.) The delay is drawn
/// from half a year and more, so two honest draws meet once in millions.
#[test]
fn ticks_reading_the_same_clock_draw_their_own_jitter() {
    let retry_ats: Vec<i64> = (0..2)
        .map(|_| {
            let env = Env::init();
            env.add(
                "flaky",
                &[
                    "--max-attempts",
                    "2",
                    "--backoff-base",
                    "365d",
                    "--backoff-max",
                    "365d",
                ],
                "exit 3",
            );
            let frozen = frozen_monotonic_clock(&env);
            env.ok(&["--now", "2026-07-01T12:00:00Z", "run", "flaky"]);
            ok_under(&env, &frozen, &["--now", "2026-07-01T12:00:00Z", "tick"]);
            let id = run_ids(&env, "flaky")[0];
            assert_eq!(status_of(&env, id), "pending", "waiting to retry");
            env.sql
                .query_i64(&format!("SELECT run_at FROM job_runs WHERE id = {id}"), &[])
        })
        .collect();
    assert_ne!(retry_ats[0], retry_ats[1], "the same jitter twice");
}

/// A C shim, preloaded into the binary, that stops the monotonic clock: every process reads the
/// same instant, as processes started together may (a crontab with two `runner run` lines, a
/// script enqueueing in parallel, ticks on one host). What must differ between such processes
/// must not come from that clock. Built with `cc`, the linker Rust builds with.
fn frozen_monotonic_clock(env: &Env) -> std::path::PathBuf {
    const SHIM: &str = r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (id == CLOCK_MONOTONIC) { ts->tv_sec = 4242; ts->tv_nsec = 0; return 0; }
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    return real(id, ts);
}
"#;
    let source = env.path("frozen.c");
    let shim = env.path("frozen.so");
    fs::write(&source, SHIM).expect("write the shim");
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("cc");
    assert!(cc.status.success(), "cc: {}", stderr(&cc));
    shim
}

/// Run the binary with `shim` preloaded; it must succeed.
fn ok_under(env: &Env, shim: &std::path::Path, args: &[&str]) {
    let out = env
        .cmd()
        .env("LD_PRELOAD", shim)
        .args(args)
        .output()
        .expect("spawn runner");
    assert!(out.status.success(), "runner {args:?}: {}", stderr(&out));
}
