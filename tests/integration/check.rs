//! `runner status --check`: the monitoring-plugin exit codes (0 OK, 1 WARNING, 2 CRITICAL) and
//! the one summary line naming the rule that fired, on forged database states at fixed times.

use crate::common::*;

const T: &str = "2026-11-23T12:00:00Z";

/// `runner --now NOW status --check ARGS`: its exit code and its stdout.
fn check(env: &Env, now: &str, args: &[&str]) -> (i32, String) {
    let mut all = vec!["--now", now, "status", "--check"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    (out.status.code().expect("exit code"), stdout(&out))
}

/// A database whose last tick ran at `T`, with a schedule `job` that has one pending run.
fn ticked_with_a_run() -> (Env, i64) {
    let env = Env::init();
    env.add("job", &[], "true");
    let run = env.enqueue("job");
    env.sql.exec(
        "UPDATE job_runs SET run_at = $1 WHERE id = $2",
        &[&(epoch(T) + 600), &run],
    );
    env.tick_at(T);
    // The tick recorded the time it read, a little after T on a busy machine: the ages below
    // count from T.
    forge_last_tick(&env, T);
    (env, run)
}

#[test]
fn healthy_exits_zero_with_one_ok_line() {
    let (env, _) = ticked_with_a_run();
    let (code, out) = check(&env, "2026-11-23T12:01:00Z", &[]);
    assert_eq!(code, 0, "{out}");
    // 1m, give or take how long `status` took to read its clock.
    let age = duration_between(&out, "RUNNER OK - healthy, last tick ", " ago\n");
    assert!((60..=60 + CLOCK_SLACK_SECS).contains(&age), "{out}");
}

#[test]
fn a_stale_tick_is_critical_past_max_tick_age() {
    let (env, _) = ticked_with_a_run();
    let (code, out) = check(&env, "2026-11-23T12:05:12Z", &[]);
    assert_eq!(code, 2, "{out}");
    let age = duration_between(
        &out,
        "RUNNER CRITICAL - no tick for ",
        " (max-tick-age 3m)\n",
    );
    assert!((312..=312 + CLOCK_SLACK_SECS).contains(&age), "{out}");
    // The threshold is a flag.
    let (code, out) = check(&env, "2026-11-23T12:05:12Z", &["--max-tick-age", "10m"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_run_holding_an_expired_lease_is_critical() {
    let (env, run) = ticked_with_a_run();
    env.sql.exec(
        "UPDATE job_runs SET status = 'running', attempt = 1, owner = 'gone:1',
                 lease_token = 'tok', lease_expires_at = $1, heartbeat_at = $1, started_at = $1
             WHERE id = $2",
        &[&(epoch(T) - 30), &run],
    );
    let (code, out) = check(&env, "2026-11-23T12:01:00Z", &[]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(out, "RUNNER CRITICAL - 1 run(s) hold an expired lease\n");
}

#[test]
fn a_run_gone_dead_within_the_window_is_critical() {
    let (env, run) = ticked_with_a_run();
    env.sql.exec(
        "UPDATE job_runs SET status = 'dead', attempt = 1, finished_at = $1,
                 error_code = 'EXIT:1', error_detail = 'exit code 1'
             WHERE id = $2",
        &[&(epoch(T) - 20 * 60), &run],
    );
    let (code, out) = check(&env, "2026-11-23T12:01:00Z", &[]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        out,
        "RUNNER CRITICAL - 1 run(s) went dead (dead-window 1h)\n"
    );
    // Outside a shorter window it no longer counts.
    let (code, out) = check(&env, "2026-11-23T12:01:00Z", &["--dead-window", "10m"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_due_run_waiting_too_long_is_a_warning() {
    let (env, run) = ticked_with_a_run();
    env.sql.exec(
        "UPDATE job_runs SET run_at = $1 WHERE id = $2",
        &[&(epoch(T) - 600), &run],
    );
    let (code, out) = check(&env, "2026-11-23T12:01:00Z", &[]);
    assert_eq!(code, 1, "{out}");
    let lag = duration_between(
        &out,
        &format!("RUNNER WARNING - run {run} due for "),
        " (max-due-lag 5m)\n",
    );
    assert!((660..=660 + CLOCK_SLACK_SECS).contains(&lag), "{out}");
}

#[test]
fn threshold_flags_need_check() {
    let env = Env::init();
    env.fails(2, &["status", "--max-tick-age", "5m"]);
    env.fails(2, &["status", "--check", "--json"]);
}
