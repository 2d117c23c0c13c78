//! `runner why NAME [--at TIME]`: one test per cause, each on state made by real ticks under
//! `--now` or forged through `env.sql`, so time is deterministic.

use crate::common::{
    assert_read_at, epoch, forge_last_tick, forge_running, forge_second_attempt, forge_stopping,
    insert_finished_runs, json, last_tick_at, Env,
};
use serde_json::Value;

/// `runner --now NOW why ARGS --json`.
fn why(env: &Env, now: &str, args: &[&str]) -> Value {
    let mut all = vec!["--now", now, "why"];
    all.extend_from_slice(args);
    all.push("--json");
    json(&env.ok(&all))
}

/// `runner --now NOW why ARGS` (text).
fn why_text(env: &Env, now: &str, args: &[&str]) -> String {
    let mut all = vec!["--now", now, "why"];
    all.extend_from_slice(args);
    env.ok(&all)
}

fn explanation(report: &Value) -> String {
    report["explanation"]
        .as_array()
        .expect("explanation")
        .iter()
        .map(|l| l.as_str().expect("line"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn hints(report: &Value) -> String {
    report["hints"]
        .as_array()
        .expect("hints")
        .iter()
        .map(|l| l.as_str().expect("hint"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An hourly schedule running COMMAND, added at 08:30 UTC on 2026-11-23.
fn hourly(env: &Env, name: &str, flags: &[&str], command: &str) {
    env.add_at(
        Some("2026-11-23T08:30:00Z"),
        name,
        "0 * * * *",
        flags,
        command,
    );
}

#[test]
fn a_run_that_succeeded_ran() {
    let env = Env::init();
    hourly(&env, "ok", &[], "true");
    env.tick_at("2026-11-23T09:00:05Z");
    let report = why(
        &env,
        "2026-11-23T09:30:00Z",
        &["ok", "--at", "2026-11-23T09:00:00Z"],
    );
    assert_eq!(report["cause"], "ran", "{report}");
    assert_eq!(report["instant"], "2026-11-23T09:00:00Z");
    assert_eq!(report["run"]["status"], "succeeded");
    let id = report["run"]["id"].as_i64().expect("run id");
    assert!(
        hints(&report).contains(&format!("runner show {id}")),
        "{report}"
    );
    assert!(explanation(&report).contains(&format!("Ran: run {id} succeeded")));

    // Without --at: every instant it knows of succeeded, so it tells of the latest.
    let report = why(&env, "2026-11-23T09:30:00Z", &["ok"]);
    assert_eq!(report["cause"], "ran", "{report}");
    assert_eq!(report["instant"], "2026-11-23T09:00:00Z");
    assert!(report["asked"].is_null());
    assert!(
        explanation(&report).contains("1 since 2026-11-23T09:00:00+00:00, succeeded"),
        "{report}"
    );
}

#[test]
fn an_instant_catch_up_skipped_says_so_with_the_recorded_reason() {
    let env = Env::init();
    hourly(&env, "late", &["--catch-up", "latest"], "true");
    // Cron was down from 09:00 to 11:00: catch-up latest runs 11:00 and skips 09:00 and 10:00.
    env.tick_at("2026-11-23T11:00:05Z");
    let report = why(
        &env,
        "2026-11-23T11:30:00Z",
        &["late", "--at", "2026-11-23 10:00"],
    );
    assert_eq!(report["cause"], "skipped_catch_up", "{report}");
    assert_eq!(report["run"]["status"], "skipped");
    let reason = report["run"]["skip_reason"].as_str().expect("skip reason");
    assert!(
        reason.starts_with("catch-up latest: superseded by"),
        "{reason}"
    );
    assert!(explanation(&report).contains(reason), "{report}");

    // The latest instant that did not succeed is that one too.
    let report = why(&env, "2026-11-23T11:30:00Z", &["late"]);
    assert_eq!(report["cause"], "skipped_catch_up", "{report}");
    assert_eq!(report["instant"], "2026-11-23T10:00:00Z");
}

#[test]
fn an_instant_overlap_skipped_names_the_running_run() {
    let env = Env::init();
    hourly(&env, "long", &["--overlap", "forbid"], "true");
    let running = env.enqueue("long");
    forge_running(&env, running);
    env.tick_at("2026-11-23T09:00:05Z");
    let report = why(&env, "2026-11-23T09:30:00Z", &["long", "--at", "09:00"]);
    assert_eq!(report["cause"], "skipped_overlap", "{report}");
    let reason = report["run"]["skip_reason"].as_str().expect("skip reason");
    assert!(
        reason.contains(&format!("run {running} of this schedule is still running")),
        "{reason}"
    );
    assert!(
        explanation(&report).contains("Skipped by overlap"),
        "{report}"
    );
}

#[test]
fn an_instant_no_tick_has_materialised_names_the_last_tick() {
    let env = Env::init();
    hourly(&env, "idle", &[], "true");
    env.tick_at("2026-11-23T08:45:00Z");
    // The tick recorded the time it read, a little after 08:45 on a busy machine; `why` says
    // the time stored, which is then exactly 08:45.
    assert_read_at(
        last_tick_at(&env),
        "2026-11-23T08:45:00Z",
        0,
        "the tick's time",
    );
    forge_last_tick(&env, "2026-11-23T08:45:00Z");
    // Cron stopped: 09:00 and 10:00 came with no tick.
    let report = why(
        &env,
        "2026-11-23T10:10:00Z",
        &["idle", "--at", "2026-11-23T09:00"],
    );
    assert_eq!(report["cause"], "no_tick_since", "{report}");
    assert!(report["run"].is_null());
    assert_eq!(report["last_tick_at"], "2026-11-23T08:45:00Z");
    assert_eq!(report["last_tick_at_epoch"], epoch("2026-11-23T08:45:00Z"));
    assert!(
        explanation(&report).contains("the last tick ran at 2026-11-23T08:45:00+00:00"),
        "{report}"
    );
    assert!(hints(&report).contains("runner doctor"), "{report}");
    // Without --at: the latest such instant.
    let report = why(&env, "2026-11-23T10:10:00Z", &["idle"]);
    assert_eq!(report["cause"], "no_tick_since", "{report}");
    assert_eq!(report["instant"], "2026-11-23T10:00:00Z");
    let text = why_text(&env, "2026-11-23T10:10:00Z", &["idle"]);
    assert!(
        text.contains("last tick:      2026-11-23T08:45:00+00:00"),
        "{text}"
    );
    assert!(text.contains("runner doctor"), "{text}");
}

#[test]
fn an_instant_of_a_paused_schedule_says_it_is_paused() {
    let env = Env::init();
    hourly(&env, "held", &[], "true");
    env.ok(&["--now", "2026-11-23T08:40:00Z", "schedule", "pause", "held"]);
    env.tick_at("2026-11-23T09:00:05Z");
    let report = why(&env, "2026-11-23T09:30:00Z", &["held", "--at", "09:00"]);
    assert_eq!(report["cause"], "paused", "{report}");
    assert_eq!(report["paused"], true);
    assert!(report["run"].is_null());
    let said = explanation(&report);
    // No history of pause times is kept: it says so rather than guess.
    assert!(said.contains("held is paused"), "{said}");
    assert!(said.contains("no record of when it was paused"), "{said}");
    assert!(hints(&report).contains("runner schedule resume held"));
    assert_eq!(
        why(&env, "2026-11-23T09:30:00Z", &["held"])["cause"],
        "paused"
    );
}

#[test]
fn a_time_outside_the_cron_expression_shows_the_nearest_instants() {
    let env = Env::init();
    env.add_at(
        Some("2026-11-01T00:00:00Z"),
        "nightly",
        "30 2 * * *",
        &["--tz", "America/New_York"],
        "true",
    );
    // 10:30 today, in the schedule's zone (New York), whichever form it is written in.
    for at in [
        "10:30",
        "2026-11-23T10:30",
        "2026-11-23 10:30",
        "2026-11-23T15:30:00Z",
    ] {
        let report = why(&env, "2026-11-23T16:00:00Z", &["nightly", "--at", at]);
        assert_eq!(report["cause"], "not_in_cron", "{at}: {report}");
        assert_eq!(report["asked"], "2026-11-23T15:30:00Z", "{at}: {report}");
        assert!(report["instant"].is_null() && report["run"].is_null());
        assert_eq!(report["nearest_before"], "2026-11-23T07:30:00Z", "{at}");
        assert_eq!(report["nearest_after"], "2026-11-24T07:30:00Z", "{at}");
    }
    let text = why_text(&env, "2026-11-23T16:00:00Z", &["nightly", "--at", "10:30"]);
    assert!(
        text.contains(
            "Nearest instants: before 2026-11-23T02:30:00-05:00, after 2026-11-24T02:30:00-05:00"
        ),
        "{text}"
    );
    // The schedule's last and next fire times, in its zone.
    assert!(
        text.contains("last fire time: 2026-11-23T02:30:00-05:00"),
        "{text}"
    );
    assert!(
        text.contains("next fire time: 2026-11-24T02:30:00-05:00"),
        "{text}"
    );
}

/// A time given with seconds is echoed with them: `--at 08:03:30` used to be echoed as "08:03",
/// a minute that is a fire instant of the schedule, though the time asked is not.
#[test]
fn a_time_asked_with_seconds_is_echoed_with_them() {
    let env = Env::init();
    env.add_at(
        Some("2026-11-23T08:00:00Z"),
        "often",
        "* * * * *",
        &[],
        "true",
    );
    for (at, given) in [
        (
            "08:03:30",
            "Asked about 08:03:30 today in UTC (2026-11-23T08:03:30+00:00).",
        ),
        (
            "2026-11-23 08:03:30",
            "Asked about 2026-11-23 08:03:30 in UTC (2026-11-23T08:03:30+00:00).",
        ),
        // Without seconds, or with none past the minute: the minute, as before.
        (
            "08:03",
            "Asked about 08:03 today in UTC (2026-11-23T08:03:00+00:00).",
        ),
        (
            "08:03:00",
            "Asked about 08:03 today in UTC (2026-11-23T08:03:00+00:00).",
        ),
    ] {
        let text = why_text(&env, "2026-11-23T09:00:00Z", &["often", "--at", at]);
        assert!(text.contains(given), "{at}: {text}");
    }
}

#[test]
fn a_time_in_a_dst_gap_says_the_job_ran_at_the_first_valid_time_after() {
    let env = Env::init();
    env.add_at(
        Some("2026-03-01T00:00:00Z"),
        "spring",
        "30 2 * * *",
        &["--tz", "America/New_York"],
        "true",
    );
    // 2026-03-08 02:30 did not exist in New York: the job ran at 03:00 EDT (07:00Z).
    env.tick_at("2026-03-08T07:00:05Z");
    let report = why(
        &env,
        "2026-03-08T12:00:00Z",
        &["spring", "--at", "2026-03-08 02:30"],
    );
    assert_eq!(report["cause"], "dst_gap", "{report}");
    assert_eq!(report["outcome"], "ran");
    assert_eq!(report["instant"], "2026-03-08T07:00:00Z");
    assert_eq!(report["run"]["status"], "succeeded");
    assert!(
        report["asked"].is_null(),
        "02:30 names no instant: {report}"
    );
    let said = explanation(&report);
    assert!(
        said.contains("02:30 did not exist on 2026-03-08 in America/New_York"),
        "{said}"
    );
    assert!(
        said.contains("first valid time after the gap: 2026-03-08T03:00:00-04:00"),
        "{said}"
    );
}

/// Fire times are computed up to the start of the year 5000: `why --at` a time after 4999 is
/// refused (exit 2) as `--now` is, rather than answered "does not fire then, nearest none".
#[test]
fn a_time_after_the_last_year_of_fire_times_is_refused() {
    let env = Env::init();
    env.add_at(
        Some("2026-10-31T12:00:00Z"),
        "fx",
        "30 2 * * *",
        &["-q", "--tz", "America/New_York"],
        "true",
    );
    for at in [
        "6000-03-08 02:30",
        "5000-01-01",
        // 5000-01-01 01:00 in New York, the schedule's zone.
        "5000-01-01T06:00:00Z",
        "5000-06-01 10:30 Europe/Paris",
    ] {
        let err = env.fails(2, &["why", "fx", "--at", at]);
        assert!(
            err.contains("after 4999, the last year runner computes fire times in"),
            "{at}: {err}"
        );
        env.fails(2, &["why", "fx", "--at", at, "--json"]);
    }
    // The last year itself is answered, to its end in the schedule's zone: 4999-12-31 02:30
    // is one of its instants, to come, and 5000-01-01T02:30Z is 4999-12-31 21:30 there.
    let now = "2026-11-01T06:31:00Z";
    let report = why(&env, now, &["fx", "--at", "4999-12-31 02:30"]);
    assert_eq!(report["cause"], "not_yet_due", "{report}");
    let report = why(&env, now, &["fx", "--at", "5000-01-01T02:30:00Z"]);
    assert_eq!(report["cause"], "not_in_cron", "{report}");
    assert_eq!(report["nearest_before"], "4999-12-31T07:30:00Z", "{report}");
}

/// A wildcard job has no instant in a gap: `why` tells what became of its first instant after
/// the gap, as it does of a fixed-time job's moved one, and never claims it fired when it has
/// not (a date to come, or one before the schedule existed).
#[test]
fn a_time_in_a_dst_gap_tells_what_became_of_a_wildcard_jobs_next_instant() {
    let env = Env::init();
    env.add_at(
        Some("2026-10-31T12:00:00Z"),
        "wc",
        "*/30 * * * *",
        &["-q", "--tz", "America/New_York"],
        "true",
    );
    let now = "2026-11-01T06:31:00Z";
    for (at, instant, outcome, words) in [
        // New York springs forward on 2027-03-14: 03:00 EDT is 07:00Z, still to come.
        (
            "2027-03-14 02:30",
            "2027-03-14T07:00:00Z",
            "not_yet_due",
            "Not yet due",
        ),
        // And on 2026-03-08, before the schedule existed.
        (
            "2026-03-08 02:30",
            "2026-03-08T07:00:00Z",
            "before_schedule",
            "Before the schedule existed",
        ),
    ] {
        let report = why(&env, now, &["wc", "--at", at]);
        assert_eq!(report["cause"], "dst_gap", "{report}");
        assert_eq!(report["outcome"], outcome, "{at}: {report}");
        assert_eq!(report["instant"], instant, "{at}: {report}");
        let said = explanation(&report);
        assert!(said.contains("A wildcard job has no instants"), "{said}");
        assert!(said.contains(words), "{at}: {said}");
        assert!(!said.contains("fired"), "{at}: {said}");
        let text = why_text(&env, now, &["wc", "--at", at]);
        assert!(text.contains(words), "{at}: {text}");
    }

    // Its first instant after a gap it lived through ran: the run tells.
    let env = Env::init();
    env.add_at(
        Some("2026-03-08T06:45:00Z"),
        "wc",
        "*/30 * * * *",
        &["-q", "--tz", "America/New_York"],
        "true",
    );
    env.tick_at("2026-03-08T07:00:05Z");
    let report = why(
        &env,
        "2026-03-08T12:00:00Z",
        &["wc", "--at", "2026-03-08 02:30"],
    );
    assert_eq!(report["cause"], "dst_gap", "{report}");
    assert_eq!(report["outcome"], "ran", "{report}");
    assert_eq!(report["instant"], "2026-03-08T07:00:00Z");
    assert_eq!(report["run"]["status"], "succeeded", "{report}");
}

#[test]
fn a_time_in_a_repeated_hour_says_the_job_ran_once_in_the_first_pass() {
    let env = Env::init();
    env.add_at(
        Some("2026-10-25T00:00:00Z"),
        "autumn",
        "30 1 * * *",
        &["--tz", "America/New_York"],
        "true",
    );
    // 2026-11-01 01:30 came twice in New York: 05:30Z (EDT) and 06:30Z (EST).
    env.tick_at("2026-11-01T05:30:05Z");
    let report = why(
        &env,
        "2026-11-01T12:00:00Z",
        &["autumn", "--at", "2026-11-01T01:30"],
    );
    assert_eq!(report["cause"], "dst_repeated", "{report}");
    assert_eq!(report["outcome"], "ran");
    assert_eq!(report["instant"], "2026-11-01T05:30:00Z");
    assert_eq!(report["run"]["status"], "succeeded");
    let said = explanation(&report);
    assert!(
        said.contains("01:30 happened twice on 2026-11-01 in America/New_York"),
        "{said}"
    );
    assert!(said.contains("runs once, in the first pass"), "{said}");

    // The second pass, named by its offset, is no instant of a fixed-time job.
    let report = why(
        &env,
        "2026-11-01T12:00:00Z",
        &["autumn", "--at", "2026-11-01T01:30:00-05:00"],
    );
    assert_eq!(report["cause"], "dst_repeated", "{report}");
    assert_eq!(report["asked"], "2026-11-01T06:30:00Z");
    assert_eq!(report["instant"], "2026-11-01T05:30:00Z");
    let said = explanation(&report);
    assert!(
        said.contains("the second is not an instant of it"),
        "{said}"
    );
    // The instant asked about is named, in the schedule's zone, as given.
    assert!(
        said.contains("Asked about 2026-11-01T01:30:00-05:00."),
        "{said}"
    );
}

/// `queue`, hourly under `--overlap forbid`, whose 09:00 run a tick made and ran, forged due
/// again (pending, no attempt): the run id.
fn a_forbid_schedules_0900_run_due_again(env: &Env) -> i64 {
    hourly(env, "queue", &["--overlap", "forbid"], "true");
    env.tick_at("2026-11-23T09:00:05Z");
    let waiting = crate::common::last_run_id(env, "queue");
    env.sql.exec(
        "UPDATE job_runs SET status = 'pending', attempt = 0, started_at = NULL,
                 finished_at = NULL
         WHERE id = $1",
        &[&waiting],
    );
    waiting
}

#[test]
fn a_due_run_of_a_forbid_schedule_waits_behind_the_running_one() {
    let env = Env::init();
    let waiting = a_forbid_schedules_0900_run_due_again(&env);
    // Forged: a manual run of the schedule holds a lease.
    let running = env.enqueue("queue");
    forge_running(&env, running);
    let report = why(&env, "2026-11-23T09:30:00Z", &["queue", "--at", "09:00"]);
    assert_eq!(report["cause"], "waiting_behind_forbid", "{report}");
    assert_eq!(report["running_run_id"], running);
    assert_eq!(report["run"]["id"], waiting);
    assert!(
        explanation(&report).contains(&format!("run {running} of queue is running")),
        "{report}"
    );
    assert!(hints(&report).contains(&format!("runner show {running}")));
}

/// `queue`'s 09:00 run due again (the first of the pair returned), and a manual run of it
/// cancelled while running on far-host (the second), its job to be stopped by 09:31 (forged).
fn waiting_behind_a_run_cancelled_on_far_host(env: &Env) -> (i64, i64) {
    let waiting = a_forbid_schedules_0900_run_due_again(env);
    let cancelled = env.enqueue("queue");
    forge_stopping(
        env,
        cancelled,
        "far-host",
        epoch("2026-11-23T09:20:00Z"),
        epoch("2026-11-23T09:31:00Z"),
    );
    (waiting, cancelled)
}

/// A due run of a `forbid` schedule waits while the job of a run cancelled while running is
/// still being stopped: `why` names that run, its host and the time by which it is stopped at
/// the latest (and, past it, that the next tick on that host stops it).
#[test]
fn a_due_run_of_a_forbid_schedule_waits_behind_a_cancelled_job_being_stopped() {
    let env = Env::init();
    let (waiting, cancelled) = waiting_behind_a_run_cancelled_on_far_host(&env);
    let report = why(&env, "2026-11-23T09:30:00Z", &["queue", "--at", "09:00"]);
    assert_eq!(report["cause"], "waiting_behind_stop", "{report}");
    assert_eq!(report["run"]["id"], waiting);
    assert_eq!(report["running_run_id"], Value::Null);
    assert_eq!(report["stopping"]["run_id"], cancelled, "{report}");
    assert_eq!(report["stopping"]["host"], "far-host");
    assert_eq!(
        report["stopping"]["open_attempt_hosts"],
        serde_json::json!(["far-host"])
    );
    assert_eq!(report["stopping"]["stopping_by"], "2026-11-23T09:31:00Z");
    assert_eq!(
        report["stopping"]["stopping_by_epoch"],
        epoch("2026-11-23T09:31:00Z")
    );
    let said = explanation(&report);
    assert!(
        said.contains(&format!(
            "Waiting: run {cancelled} (cancelled) is still being stopped on far-host, by \
             2026-11-23T09:31:00+00:00 at the latest; run {waiting}, due since \
             2026-11-23T09:00:00+00:00, starts once that job is stopped, as the overlap policy of queue is forbid."
        )),
        "{said}"
    );
    assert!(!said.contains("That time is past"), "{said}");
    assert!(hints(&report).contains(&format!("runner show {cancelled}")));
    let text = why_text(&env, "2026-11-23T09:30:00Z", &["queue", "--at", "09:00"]);
    assert!(
        text.contains(&format!(
            "Waiting: run {cancelled} (cancelled) is still being stopped on far-host"
        )),
        "{text}"
    );

    // Past that time: the next tick on its host stops it.
    let report = why(&env, "2026-11-23T09:40:00Z", &["queue", "--at", "09:00"]);
    assert_eq!(report["cause"], "waiting_behind_stop", "{report}");
    assert!(
        explanation(&report).contains("That time is past: its tick died or hung, and the next tick on far-host stops the job."),
        "{report}"
    );
}

/// The cancelled run another host recovered and retried has two attempts open, the stalled
/// host's and the retry's: `why` names both hosts (`host` stays its latest open attempt's).
#[test]
fn a_run_waiting_behind_a_cancelled_run_with_two_open_attempts_names_both_hosts() {
    let env = Env::init();
    let (waiting, cancelled) = waiting_behind_a_run_cancelled_on_far_host(&env);
    // Forged too: attempt 2, the retry, open on near-host when the run was cancelled (attempt 1
    // stalled on far-host).
    forge_second_attempt(&env, cancelled, "near:4343", "near-host", 4343);
    env.sql.exec(
        "UPDATE job_runs SET attempt = 2 WHERE id = $1",
        &[&cancelled],
    );
    let report = why(&env, "2026-11-23T09:30:00Z", &["queue", "--at", "09:00"]);
    assert_eq!(report["cause"], "waiting_behind_stop", "{report}");
    assert_eq!(report["run"]["id"], waiting);
    assert_eq!(report["stopping"]["run_id"], cancelled, "{report}");
    assert_eq!(report["stopping"]["host"], "near-host", "{report}");
    assert_eq!(
        report["stopping"]["open_attempt_hosts"],
        serde_json::json!(["near-host", "far-host"]),
        "{report}"
    );
    let text = why_text(&env, "2026-11-23T09:30:00Z", &["queue", "--at", "09:00"]);
    assert!(
        text.contains(&format!(
            "Waiting: run {cancelled} (cancelled) is still being stopped on near-host and \
             far-host, by 2026-11-23T09:31:00+00:00 at the latest;"
        )),
        "{text}"
    );
    // Past that time, each host's next tick stops the job there.
    let report = why(&env, "2026-11-23T09:40:00Z", &["queue", "--at", "09:00"]);
    assert!(
        explanation(&report).contains(
            "That time is past: its tick died or hung, and the next tick on each of near-host \
             and far-host stops its job there."
        ),
        "{report}"
    );
}

#[test]
fn a_run_waiting_to_retry_says_which_attempt_comes_when() {
    let env = Env::init();
    hourly(
        &env,
        "flaky",
        &["--max-attempts", "3", "--backoff-base", "10m"],
        "exit 3",
    );
    env.tick_at("2026-11-23T09:00:05Z");
    let report = why(&env, "2026-11-23T09:01:00Z", &["flaky", "--at", "09:00"]);
    assert_eq!(report["cause"], "retrying", "{report}");
    assert_eq!(report["run"]["attempt"], 1);
    assert_eq!(report["run"]["max_attempts"], 3);
    assert_eq!(report["run"]["error_code"], "EXIT:3");
    let due = report["run"]["run_at_epoch"].as_i64().expect("run_at");
    assert!(due > epoch("2026-11-23T09:01:00Z"), "{report}");
    let said = explanation(&report);
    assert!(
        said.contains("attempt 1 of 3 failed (EXIT:3") && said.contains("attempt 2 of 3 is due at"),
        "{said}"
    );
}

#[test]
fn a_dead_run_gives_its_error() {
    let env = Env::init();
    hourly(&env, "broken", &["--max-attempts", "1"], "exit 7");
    env.tick_at("2026-11-23T09:00:05Z");
    let report = why(&env, "2026-11-23T09:30:00Z", &["broken"]);
    assert_eq!(report["cause"], "dead", "{report}");
    assert_eq!(report["instant"], "2026-11-23T09:00:00Z");
    assert_eq!(report["run"]["error_code"], "EXIT:7");
    let id = report["run"]["id"].as_i64().expect("run id");
    let said = explanation(&report);
    assert!(said.contains("EXIT:7: exited with status 7"), "{said}");
    assert!(hints(&report).contains(&format!("runner retry {id}")));
}

#[test]
fn a_run_of_an_expression_since_changed_is_still_an_instant_of_the_schedule() {
    let env = Env::init();
    env.add_at(
        Some("2026-11-28T08:00:00Z"),
        "daily",
        "0 9 * * *",
        &["--max-attempts", "1"],
        "exit 4",
    );
    // The expression fired at 09:00 the day before, but the schedule did not exist yet.
    let report = why(&env, "2026-11-28T08:30:00Z", &["daily"]);
    assert!(report["last_fire_at"].is_null(), "{report}");
    assert_eq!(report["cause"], "no_instant_yet", "{report}");
    let text = why_text(&env, "2026-11-28T08:30:00Z", &["daily"]);
    assert!(text.contains("last fire time: none"), "{text}");

    env.tick_at("2026-11-28T09:00:05Z");
    env.ok(&[
        "--now",
        "2026-11-28T09:31:00Z",
        "schedule",
        "edit",
        "daily",
        "--cron",
        "0 10 * * *",
        "-q",
    ]);
    // The dead 09:00 run, of the expression before the edit, is the latest that did not succeed.
    let report = why(&env, "2026-11-28T09:32:00Z", &["daily"]);
    assert_eq!(report["cause"], "dead", "{report}");
    assert_eq!(report["instant"], "2026-11-28T09:00:00Z");
    assert_eq!(report["last_fire_at"], "2026-11-28T09:00:00Z");
    assert_eq!(report["run"]["error_code"], "EXIT:4");
    let id = report["run"]["id"].as_i64().expect("run id");
    let said = explanation(&report);
    assert!(
        said.starts_with("2026-11-28T09:00:00+00:00: the latest instant that did not succeed."),
        "{said}"
    );
    assert!(
        said.contains(
            "`0 10 * * *` in UTC does not fire then: the schedule's cron or zone changed"
        ),
        "{said}"
    );
    assert!(said.contains(&format!("Dead: run {id} failed")), "{said}");
    let text = why_text(&env, "2026-11-28T09:32:00Z", &["daily"]);
    assert!(
        text.contains("last fire time: 2026-11-28T09:00:00+00:00"),
        "{text}"
    );

    // Asked about, that instant is found in history rather than called no instant.
    for at in ["2026-11-28T09:00:00Z", "09:00"] {
        let report = why(&env, "2026-11-28T09:32:00Z", &["daily", "--at", at]);
        assert_eq!(report["cause"], "dead", "{at}: {report}");
        assert_eq!(report["asked"], "2026-11-28T09:00:00Z", "{at}");
        assert_eq!(report["instant"], "2026-11-28T09:00:00Z", "{at}");
        assert_eq!(report["run"]["id"], id, "{at}");
        assert!(
            explanation(&report).contains("cron or zone changed after this run"),
            "{at}: {report}"
        );
        assert!(hints(&report).contains(&format!("runner retry {id}")));
    }
    // A time neither expression fires at is still none of its instants.
    let report = why(&env, "2026-11-28T09:32:00Z", &["daily", "--at", "09:30"]);
    assert_eq!(report["cause"], "not_in_cron", "{report}");
    assert!(report["run"].is_null());

    // Edited again, after the new expression's time that day (11:00, to 10:30): the edit first
    // materialised 10:00 under `0 10 * * *` (its run is pending, no tick since), and 10:30, the
    // new expression's time that day, was never an instant.
    env.ok(&[
        "--now",
        "2026-11-28T11:00:00Z",
        "schedule",
        "edit",
        "daily",
        "--cron",
        "30 10 * * *",
        "-q",
    ]);
    let report = why(&env, "2026-11-28T11:05:00Z", &["daily"]);
    assert_eq!(report["cause"], "pending", "{report}");
    assert_eq!(report["instant"], "2026-11-28T10:00:00Z", "{report}");
    assert_eq!(report["last_fire_at"], "2026-11-28T10:00:00Z", "{report}");
}

#[test]
fn scheduled_runs_are_found_however_many_manual_runs_came_after_them() {
    let env = Env::init();
    env.add_at(
        Some("2026-11-26T08:00:00Z"),
        "daily",
        "0 9 * * *",
        &["--max-attempts", "1"],
        "exit 4",
    );
    env.tick_at("2026-11-27T09:00:05Z");
    env.tick_at("2026-11-28T09:00:05Z");
    env.ok(&[
        "--now",
        "2026-11-28T09:05:00Z",
        "schedule",
        "edit",
        "daily",
        "--cron",
        "0 10 * * *",
        "-q",
    ]);
    // More manual runs than `why` looks through instants, all newer than the scheduled ones:
    // 09:10:00 to 09:29:59.
    insert_finished_runs(&env, "daily", 1200, epoch("2026-11-28T09:30:00Z"), 0);
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE trigger = 'manual' AND scheduled_for > $1",
            &[&epoch("2026-11-28T09:00:00Z")],
        ),
        1200
    );
    // The dead 09:00 run, of the expression before the edit, is still the latest instant that
    // did not succeed, and the last fire time; the new expression's 10:00 the day before was
    // never an instant.
    let report = why(&env, "2026-11-28T09:45:00Z", &["daily"]);
    assert_eq!(report["cause"], "dead", "{report}");
    assert_eq!(report["instant"], "2026-11-28T09:00:00Z", "{report}");
    assert_eq!(report["last_fire_at"], "2026-11-28T09:00:00Z", "{report}");
    assert_eq!(report["run"]["trigger"], "schedule", "{report}");
    let text = why_text(&env, "2026-11-28T09:45:00Z", &["daily"]);
    assert!(
        text.contains("last fire time: 2026-11-28T09:00:00+00:00"),
        "{text}"
    );
    assert!(
        text.contains("2026-11-28T09:00:00+00:00: the latest instant that did not succeed."),
        "{text}"
    );
    // Once it succeeded, the instant before it is the latest that did not.
    env.sql.exec(
        "UPDATE job_runs SET status = 'succeeded', error_code = NULL, error_detail = NULL
         WHERE trigger = 'schedule' AND scheduled_for = $1",
        &[&epoch("2026-11-28T09:00:00Z")],
    );
    let report = why(&env, "2026-11-28T09:45:00Z", &["daily"]);
    assert_eq!(report["cause"], "dead", "{report}");
    assert_eq!(report["instant"], "2026-11-27T09:00:00Z", "{report}");
    assert_eq!(report["last_fire_at"], "2026-11-28T09:00:00Z", "{report}");
}

#[test]
fn json_is_one_object_with_a_stable_cause_and_times_in_utc_and_epoch() {
    let env = Env::init();
    hourly(&env, "shape", &[], "true");
    env.tick_at("2026-11-23T09:00:05Z");
    let report = why(&env, "2026-11-23T09:30:00Z", &["shape", "--at", "09:00"]);
    let object = report.as_object().expect("one object");
    for key in [
        "schedule",
        "cron",
        "timezone",
        "paused",
        "overlap",
        "last_fire_at",
        "last_fire_at_epoch",
        "next_fire_at",
        "next_fire_at_epoch",
        "now",
        "now_epoch",
        "last_tick_at",
        "last_tick_at_epoch",
        "asked",
        "asked_epoch",
        "instant",
        "instant_epoch",
        "cause",
        "outcome",
        "run",
        "running_run_id",
        "counted_in_run_id",
        "stopping",
        "nearest_before",
        "nearest_before_epoch",
        "nearest_after",
        "nearest_after_epoch",
        "dst",
        "explanation",
        "hints",
    ] {
        assert!(object.contains_key(key), "no {key}: {report}");
    }
    assert_eq!(report["schedule"], "shape");
    assert_eq!(report["last_fire_at"], "2026-11-23T09:00:00Z");
    assert_eq!(report["last_fire_at_epoch"], epoch("2026-11-23T09:00:00Z"));
    assert_eq!(report["next_fire_at"], "2026-11-23T10:00:00Z");
    assert_eq!(report["asked_epoch"], epoch("2026-11-23T09:00:00Z"));
    assert_eq!(report["instant_epoch"], epoch("2026-11-23T09:00:00Z"));
    // The run is the entry `history --json` lists for it.
    let history = json(&env.ok(&["history", "shape", "--json"]));
    assert_eq!(report["run"], history[0], "{report}");
    // The text prints the same explanation.
    let text = why_text(&env, "2026-11-23T09:30:00Z", &["shape", "--at", "09:00"]);
    for line in report["explanation"].as_array().expect("lines") {
        assert!(text.contains(line.as_str().expect("line")), "{text}");
    }
}

#[test]
fn an_unknown_schedule_is_not_found_and_a_bad_time_is_a_usage_error() {
    let env = Env::init();
    let err = env.fails(3, &["why", "nope"]);
    assert!(err.contains("no schedule named \"nope\""), "{err}");
    hourly(&env, "there", &[], "true");
    let err = env.fails(2, &["why", "there", "--at", "yesterday"]);
    assert!(err.contains("10:30 (today)"), "{err}");
}

/// A tick after a long outage records a schedule's newest 1,000 instants and counts the older
/// ones in the reason of the oldest it records (skipped): asked about one of those, `why` names
/// that run and quotes its reason, as `history` and `show` tell of it. It used to say no run of
/// it is recorded, though ticks passed it (paused, changed or pruned).
/// An hourly schedule from New Year, first ticked on 15 March: 1,752 instants, the newest 1,000
/// recorded, the older ones counted in the reason of the oldest recorded run (skipped).
fn hourly_since_new_year_ticked_in_march(env: &Env) {
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "hourly",
        "0 * * * *",
        &["--catch-up", "latest"],
        "true",
    );
    env.tick_at("2026-03-15T00:00:05Z");
}

/// The run of schedule NAME whose reason counts instants its tick did not record.
fn counting(env: &Env, name: &str) -> i64 {
    env.sql.query_i64(
        "SELECT r.id FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
         WHERE d.name = $1 AND r.skip_reason LIKE '%older missed instants%'",
        &[&name.to_string()],
    )
}

#[test]
fn an_instant_a_tick_counted_but_did_not_record_names_the_run_that_counted_it() {
    let env = Env::init();
    hourly_since_new_year_ticked_in_march(&env);
    let run = counting(&env, "hourly");
    let reason = env
        .sql
        .query_opt_string("SELECT skip_reason FROM job_runs WHERE id = $1", &[&run])
        .expect("a reason");
    assert!(
        reason.ends_with("; 752 older missed instants were not recorded"),
        "{reason}"
    );
    let now = "2026-03-15T00:30:00Z";
    // The oldest counted instant, and the newest, just before the run that counted them.
    for at in ["2026-01-01T01:00:00Z", "2026-02-01T08:00:00Z"] {
        let report = why(&env, now, &["hourly", "--at", at]);
        assert_eq!(report["cause"], "passed_over", "{at}: {report}");
        assert_eq!(report["instant"], at);
        assert!(report["run"].is_null(), "{report}");
        assert_eq!(report["counted_in_run_id"], run, "{report}");
        let said = explanation(&report);
        assert!(said.contains(&format!("run {run}")), "{said}");
        assert!(said.contains(&format!("\"{reason}\"")), "{said}");
        assert!(!said.contains("No run of it is recorded"), "{said}");
        assert!(
            hints(&report).contains(&format!("runner show {run}")),
            "{report}"
        );
    }
    // The run that counted them is recorded: it is told as itself.
    let report = why(&env, now, &["hourly", "--at", "2026-02-01T09:00:00Z"]);
    assert_eq!(report["cause"], "skipped_catch_up", "{report}");
    assert_eq!(report["run"]["id"], run);

    // A tick too far behind to count them all says "more than", since its cursor.
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "minutely",
        "* * * * *",
        &["--catch-up", "latest"],
        "true",
    );
    env.tick_at("2026-04-01T00:00:05Z");
    let run = counting(&env, "minutely");
    let report = why(
        &env,
        "2026-04-01T00:30:00Z",
        &["minutely", "--at", "2026-01-05 12:00"],
    );
    assert_eq!(report["cause"], "passed_over", "{report}");
    assert_eq!(report["counted_in_run_id"], run, "{report}");
    let said = explanation(&report);
    assert!(said.contains("; more than "), "{said}");
    assert!(
        said.contains(" older missed instants, since 2026-01-01T00:00:00Z, were not recorded\"."),
        "{said}"
    );
    assert!(
        said.contains("recorded the 1,000 newest missed instants, as many as a tick records"),
        "{said}"
    );
    let text = why_text(
        &env,
        "2026-04-01T00:30:00Z",
        &["minutely", "--at", "2026-01-05 12:00"],
    );
    assert!(text.contains(&format!("runner show {run}")), "{text}");
}

/// `runner --now NOW schedule ARGS -q`: a change that leaves the schedule's timing alone, or not.
fn schedule_at(env: &Env, now: &str, args: &[&str]) {
    let mut all = vec!["--now", now, "schedule"];
    all.extend_from_slice(args);
    env.ok(&all);
}

/// Which instants a run's reason counts is judged by the schedule's expression now: after a
/// change of its cron or zone, the one it had when the tick counted them may have been another,
/// and runner keeps no record of it. `why` says so rather than answer as if the expression had
/// never changed. A pause, a resume or a new command leaves the expression as it was: no note
/// (it used to come after any change, by `updated_at`).
#[test]
fn an_instant_counted_as_passed_over_before_an_edit_says_the_expression_may_have_differed() {
    let env = Env::init();
    hourly_since_new_year_ticked_in_march(&env);
    let run = counting(&env, "hourly");
    let now = "2026-03-15T00:30:00Z";
    let at = "2026-01-20T10:00:00Z";
    let no_note = |after: &str| {
        let report = why(&env, now, &["hourly", "--at", at]);
        assert_eq!(report["cause"], "passed_over", "{after}: {report}");
        assert_eq!(report["counted_in_run_id"], run, "{after}: {report}");
        assert!(report["timing_changed_at"].is_null(), "{after}: {report}");
        assert!(!explanation(&report).contains("Note:"), "{after}: {report}");
    };
    no_note("the tick");
    schedule_at(&env, "2026-03-15T00:05:00Z", &["pause", "hourly"]);
    no_note("a pause");
    schedule_at(&env, "2026-03-15T00:06:00Z", &["resume", "hourly"]);
    no_note("a resume");
    schedule_at(
        &env,
        "2026-03-15T00:07:00Z",
        &[
            "edit",
            "hourly",
            "--timeout",
            "5m",
            "-q",
            "--",
            "echo",
            "hi",
        ],
    );
    no_note("a new command and timeout");
    schedule_at(
        &env,
        "2026-03-15T00:08:00Z",
        &["edit", "hourly", "--cron", "0 * * * *", "-q"],
    );
    no_note("the same expression again");

    // Half-hourly from now on: the run that counted still stands at one of its instants, so the
    // count is judged by it, over half-hours the hourly expression never fired at. A pause
    // after the edit does not move the time the note gives.
    schedule_at(
        &env,
        "2026-03-15T00:10:00Z",
        &["edit", "hourly", "--cron", "0,30 * * * *", "-q"],
    );
    schedule_at(&env, "2026-03-15T00:20:00Z", &["pause", "hourly"]);
    for at in [at, "2026-01-20T10:30:00Z"] {
        let report = why(&env, now, &["hourly", "--at", at]);
        assert_eq!(report["cause"], "passed_over", "{at}: {report}");
        assert_eq!(report["counted_in_run_id"], run, "{at}: {report}");
        assert_eq!(
            report["timing_changed_at"], "2026-03-15T00:10:00Z",
            "{at}: {report}"
        );
        let said = explanation(&report);
        assert!(
            said.contains(&format!(
                "Note: the schedule's cron or zone changed at 2026-03-15T00:10:00+00:00, after \
                 that tick. Which instants run {run} counts is judged by `0,30 * * * *` in UTC, \
                 the expression it has now; that run counted the old expression's instants, and \
                 this time may not have been one of them."
            )),
            "{at}: {said}"
        );
        let text = why_text(&env, now, &["hourly", "--at", at]);
        assert!(
            text.contains("may not have been one of them"),
            "{at}: {text}"
        );
    }
}

/// A time the expression does not fire at is judged by the expression the schedule has now. Asked
/// about a time before its cron or zone last changed, `why` says when that changed and that the
/// expression it had then may have fired at it (here it did: the schedule was paused, so no run
/// is recorded there); about a time after, nothing of the kind, whatever changed since (a
/// resume).
#[test]
fn a_time_not_in_cron_before_a_change_of_timing_says_the_expression_changed_since() {
    let env = Env::init();
    hourly(&env, "job", &[], "true");
    schedule_at(&env, "2026-11-23T08:45:00Z", &["pause", "job"]);
    let now = "2026-11-23T11:00:00Z";
    // Before any change of timing, a time the expression does not fire at has no note.
    let report = why(&env, now, &["job", "--at", "2026-11-23T09:30:00Z"]);
    assert_eq!(report["cause"], "not_in_cron", "{report}");
    assert!(report["timing_changed_at"].is_null(), "{report}");
    assert!(!explanation(&report).contains("Note:"), "{report}");

    schedule_at(
        &env,
        "2026-11-23T10:10:00Z",
        &["edit", "job", "--cron", "30 * * * *", "-q"],
    );
    schedule_at(&env, "2026-11-23T10:15:00Z", &["resume", "job"]);
    // 09:00 was an instant of `0 * * * *` (paused); 09:15 of neither.
    for at in ["2026-11-23T09:00:00Z", "09:15"] {
        let report = why(&env, now, &["job", "--at", at]);
        assert_eq!(report["cause"], "not_in_cron", "{at}: {report}");
        assert_eq!(
            report["timing_changed_at"], "2026-11-23T10:10:00Z",
            "{at}: {report}"
        );
        let said = explanation(&report);
        assert!(
            said.contains(
                "Note: the schedule's cron or zone changed at 2026-11-23T10:10:00+00:00, after \
                 this time, which is judged by `30 * * * *` in UTC, the expression it has now; \
                 the one it had then may have fired at it."
            ),
            "{at}: {said}"
        );
    }
    let text = why_text(&env, now, &["job", "--at", "09:00"]);
    assert!(text.contains("may have fired at it"), "{text}");
    // After the change (10:12, before the resume; 10:45, after it): judged by the expression
    // that ruled then, with no note.
    for at in ["10:12", "10:45"] {
        let report = why(&env, now, &["job", "--at", at]);
        assert_eq!(report["cause"], "not_in_cron", "{at}: {report}");
        assert!(report["timing_changed_at"].is_null(), "{at}: {report}");
        assert!(!explanation(&report).contains("Note:"), "{at}: {report}");
    }
}
