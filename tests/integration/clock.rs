//! Clock steps (issue 9, item 6): a wall clock that steps forward under a running tick.
//!
//! The tests compare the binary's clock with the real one, so they read the real clock too.
//! Nothing here depends on the machine's speed: every wait polls to a generous deadline.

use std::fs;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{stderr, wait_until, Env};

/// The test-only hook in `src/clock.rs`: every clock reading adds the seconds in this file.
const STEP_FILE_ENV: &str = "RUNNER_TEST_CLOCK_STEP_FILE";
const DAY: i64 = 86_400;
const DEADLINE: Duration = Duration::from_secs(120);

#[allow(clippy::disallowed_methods)] // the tests hold the binary's clock against the real one
fn real_now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn one(env: &Env, sql: &str) -> i64 {
    env.count(sql)
}

/// A paused schedule: it only runs when `runner run NAME` asks, whatever the clock says.
fn add_paused(env: &Env, name: &str, command: &str) {
    env.ok(&[
        "schedule",
        "add",
        name,
        "--cron",
        "0 0 1 1 *",
        "--paused",
        "--",
        command,
    ]);
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
    add_paused(
        &env,
        "steady",
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
        env.conn()
            .query_row(
                "SELECT status, heartbeat_at, lease_expires_at FROM job_runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("the run")
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
    let (status, attempt, error_code, finished_at): (String, i64, Option<String>, i64) = env
        .conn()
        .query_row(
            "SELECT status, attempt, error_code, finished_at FROM job_runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("the run");
    assert_eq!(
        (status.as_str(), attempt, error_code),
        ("succeeded", 1, None),
        "not recovered (LEASE:EXPIRED) or killed (SIGNAL:SIGKILL)"
    );
    assert!(finished_at >= stepped, "recorded by the stepped clock");
    assert_eq!(
        one(
            &env,
            "SELECT count(*) FROM job_events WHERE kind IN ('RECOVERED', 'LEASE_LOST', 'FAILED')"
        ),
        0
    );
}
