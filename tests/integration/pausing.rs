//! Steering a whole schedule: `schedule pause` holds its pending runs (retries and manual runs
//! too) until `resume`, `--cancel-pending` cancels them, `--for` ends the pause at the first tick
//! after it; `cancel --schedule` cancels every pending and running run; `edit --no-workdir`.
//! Through the real binary, times pinned with `--now`.

use std::time::Duration;

use crate::common::{
    assert_read_at, epoch, json, never_near, process_alive, run_ids, status_of, stderr, stdout,
    wait_until, Bg, Env,
};

const T0: &str = "2026-07-01T10:30:00Z";

fn at<'a>(now: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--now", now];
    all.extend_from_slice(args);
    all
}

#[test]
fn pause_holds_manual_runs_and_retries_until_resume_without_a_false_lag_alarm() {
    let env = Env::init();
    let flag = env.path("healed");
    // Fails until the flag file exists; retried after 60s.
    let command = format!("test -e '{}' || exit 7", flag.display());
    let backoff = ["--backoff-base", "60s", "--backoff-max", "60s"];
    env.add_at(Some(T0), "job", &never_near(T0), &backoff, &command);
    env.ok(&at(T0, &["run", "job"]));
    env.tick_at("2026-07-01T10:30:01Z");
    let retrying = run_ids(&env, "job")[0];
    assert_eq!(
        status_of(&env, retrying),
        "pending",
        "waits out its backoff"
    );
    std::fs::write(&flag, "").expect("flag");

    let out = env.ok(&at("2026-07-01T10:30:10Z", &["schedule", "pause", "job"]));
    assert!(out.contains("paused schedule job"), "{out}");
    assert!(out.contains("1 pending run held until it resumes"), "{out}");
    // A manual run of a paused schedule is queued and held; `--wait` would wait forever: refused.
    let out = env.ok(&at("2026-07-01T10:30:20Z", &["run", "job"]));
    assert!(
        out.contains("held until `runner schedule resume job`"),
        "{out}"
    );
    let manual = run_ids(&env, "job")[1];
    let err = env.fails(2, &at("2026-07-01T10:30:20Z", &["run", "job", "--wait"]));
    assert!(err.contains("schedule job is paused"), "{err}");
    assert!(err.contains("runner schedule resume job"), "{err}");
    assert_eq!(
        run_ids(&env, "job").len(),
        2,
        "a refused --wait queues nothing"
    );

    // Long after the retry and the manual run came due, a tick starts neither, and finishes at
    // once (held runs are not due work it waits for: a spinning tick would run its full hour).
    let later = "2026-07-01T11:30:00Z";
    let (out, _) = env.tick_within(
        &["--now", later, "--max-tick", "1h"],
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(status_of(&env, retrying), "pending");
    assert_eq!(status_of(&env, manual), "pending");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_attempts WHERE run_id = $1",
            &[&retrying]
        ),
        1,
        "no attempt while paused"
    );

    // Held runs are not late: no oldest due, no lag, no due-lag warning; status counts them.
    let report = json(&env.ok(&at(later, &["status", "--json"])));
    assert_eq!(report["held_by_pause"], 2, "{report}");
    assert!(report["oldest_due"].is_null(), "{report}");
    let text = env.ok(&at(later, &["status"]));
    assert!(text.contains("2 runs held by paused schedules"), "{text}");
    let metrics = env.ok(&at(later, &["metrics"]));
    assert!(
        metrics.contains("\nrunner_oldest_due_lag_seconds 0\n"),
        "{metrics}"
    );
    let check = env.run(&at(later, &["status", "--check", "--max-due-lag", "1m"]));
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));

    // Resumed: the next tick runs both.
    let out = env.ok(&at("2026-07-01T11:31:00Z", &["schedule", "resume", "job"]));
    assert!(out.contains("resumed schedule job"), "{out}");
    env.tick_at("2026-07-01T11:31:01Z");
    assert_eq!(status_of(&env, retrying), "succeeded");
    assert_eq!(status_of(&env, manual), "succeeded");
    let report = json(&env.ok(&at("2026-07-01T11:31:02Z", &["status", "--json"])));
    assert_eq!(report["held_by_pause"], 0, "{report}");
}

#[test]
fn pause_cancel_pending_cancels_them_with_an_event_each() {
    let env = Env::init();
    let marker = env.path("ran");
    env.add("job", &[], &format!("touch '{}'", marker.display()));
    let first = env.enqueue("job");
    let second = env.enqueue("job");
    let out = env.ok(&["schedule", "pause", "job", "--cancel-pending"]);
    assert!(out.contains("paused schedule job"), "{out}");
    assert!(out.contains("cancelled 2 pending runs"), "{out}");
    for id in [first, second] {
        assert_eq!(status_of(&env, id), "cancelled");
        assert_eq!(
            env.sql.query_i64(
                "SELECT count(*) FROM job_events WHERE run_id = $1 AND kind = 'CANCELLED'",
                &[&id]
            ),
            1
        );
    }
    // Already paused: it still cancels what is pending (nothing now), and says so.
    let out = env.ok(&["schedule", "pause", "job", "--cancel-pending"]);
    assert!(out.contains("already paused"), "{out}");
    assert!(out.contains("cancelled 0 pending runs"), "{out}");
    env.ok(&["schedule", "resume", "job"]);
    env.ok(&["tick"]);
    assert!(!marker.exists(), "a cancelled run was executed");
}

#[test]
fn cancel_schedule_cancels_its_pending_and_running_runs() {
    let env = Env::init();
    let pidfile = env.path("job.pid");
    let command = format!("echo $$ > '{}'; sleep 30", pidfile.display());
    env.add("sleeper", &[], &command);
    // overlap forbid (the default): the second run waits behind the first.
    env.enqueue("sleeper");
    env.enqueue("sleeper");
    env.add("other", &[], "true");
    let other = env.enqueue("other");
    let ids = run_ids(&env, "sleeper");
    let bg = Bg::spawn(
        &env,
        "tick",
        &["tick", "--lease", "3s", "--owner", "bg-tick"],
    )
    .with_job_pidfile(&pidfile);
    wait_until(Duration::from_secs(60), "the first job to start", || {
        bg.job_pid().is_some() && status_of(&env, ids[0]) == "running"
    });
    let job = bg.job_pid().expect("pid");

    let out = env.ok(&["cancel", "--schedule", "sleeper"]);
    assert!(
        out.contains("cancelled 2 runs of sleeper: 1 pending, 1 running"),
        "{out}"
    );
    assert!(out.contains(&format!("run {}:", ids[0])), "{out}");
    assert_eq!(status_of(&env, ids[0]), "cancelled");
    assert_eq!(status_of(&env, ids[1]), "cancelled");
    wait_until(
        Duration::from_secs(60),
        "the job's process group to be killed",
        || !process_alive(job),
    );
    let out = bg.finish(Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Another schedule's run is not touched (the tick ran it).
    assert_eq!(status_of(&env, other), "succeeded");

    let out = env.ok(&["cancel", "--schedule", "sleeper"]);
    assert!(out.contains("nothing to cancel"), "{out}");
    env.fails(3, &["cancel", "--schedule", "nosuch"]);
    // Exactly one of RUN_ID and --schedule.
    env.fails(2, &["cancel"]);
    env.fails(2, &["cancel", &ids[0].to_string(), "--schedule", "sleeper"]);
}

#[test]
fn pause_for_resumes_at_the_first_tick_after_it_and_runs_from_its_end() {
    let env = Env::init();
    env.add_at(Some(T0), "hourly", "0 * * * *", &[], "true");
    let out = env.ok(&at(T0, &["schedule", "pause", "hourly", "--for", "30m"]));
    // 30 minutes after the time `pause` read, a little after T0 on a busy machine. Said as
    // stored; then exactly 11:00, so that the ticks below fall before and after it.
    let until = env.sql.query_i64(
        "SELECT paused_until FROM job_definitions WHERE name = 'hourly'",
        &[],
    );
    assert_read_at(until, T0, 30 * 60, "the pause's end");
    let until_local = chrono::DateTime::from_timestamp(until, 0)
        .expect("in range")
        .to_rfc3339();
    assert!(
        out.contains(&format!("paused schedule hourly until {until_local}")),
        "{out}"
    );
    env.sql.exec(
        "UPDATE job_definitions SET paused_until = $1 WHERE name = 'hourly'",
        &[&epoch("2026-07-01T11:00:00Z")],
    );
    let show = env.ok(&at(T0, &["schedule", "show", "hourly"]));
    assert!(
        show.contains("state:        paused until 2026-07-01T11:00:00+00:00"),
        "{show}"
    );
    let list = json(&env.ok(&at(T0, &["schedule", "list", "--json"])));
    assert_eq!(list[0]["state"], "paused", "{list}");
    assert_eq!(list[0]["paused_until"], "2026-07-01T11:00:00Z", "{list}");
    assert!(env
        .ok(&at(T0, &["schedule", "list"]))
        .contains("(paused until 2026-07-01T11:00:00+00:00)"));

    // Before its end, a tick leaves it paused.
    env.tick_at("2026-07-01T10:59:30Z"); // 30 s before: room for a slow machine
    assert!(env
        .ok(&at(T0, &["schedule", "show", "hourly"]))
        .contains("paused until"));
    assert!(run_ids(&env, "hourly").is_empty());

    // The first tick from the end resumes it; the instant at the end is the schedule's again.
    let err = env.tick(&["--now", "2026-07-01T11:00:05Z", "-v"]);
    assert!(err.contains("resumed 1 schedule"), "{err}");
    let show = env.ok(&at("2026-07-01T11:00:05Z", &["schedule", "show", "hourly"]));
    assert!(show.contains("state:        active"), "{show}");
    let runs = run_ids(&env, "hourly");
    assert_eq!(runs.len(), 1, "the 11:00 instant");
    assert_eq!(status_of(&env, runs[0]), "succeeded");
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_definitions WHERE paused_until IS NOT NULL",
            &[]
        ),
        0
    );
}

/// The tick that ends a `pause --for` starts the runs the pause held (a manual run here), as the
/// next tick after `schedule resume` would, even when no instant of the schedule is due with it:
/// it had read that no run was due before it resumed the schedule, and left them a minute.
#[test]
fn the_tick_that_ends_a_timed_pause_starts_the_held_runs() {
    let env = Env::init();
    env.add_at(Some(T0), "held", &never_near(T0), &[], "true");
    env.ok(&at(T0, &["schedule", "pause", "held", "--for", "30m"]));
    env.ok(&at("2026-07-01T10:31:00Z", &["run", "held"]));
    env.tick_at("2026-07-01T10:32:00Z");
    let run = run_ids(&env, "held")[0];
    assert_eq!(status_of(&env, run), "pending", "held by the pause");

    let err = env.tick(&["--now", "2026-07-01T11:05:00Z", "-v"]);
    assert!(err.contains("resumed 1 schedule"), "{err}");
    assert_eq!(status_of(&env, run), "succeeded", "{err}");
}

/// Between the end of a `pause --for` and the tick that resumes the schedule, every command
/// judges it as that tick will: resumed from the end. `simulate` shows the instant at the end
/// running, `list` says the pause has ended, and `edit` (or `apply`) materialises the instants
/// due since the end under the old settings before its change, where it had dropped them.
#[test]
fn an_ended_timed_pause_is_judged_as_the_next_tick_will() {
    let env = Env::init();
    let t0 = "2030-03-01T00:00:00Z";
    let after = "2030-03-01T00:07:00Z";
    env.add_at(Some(t0), "q", "*/5 * * * *", &[], "true");
    env.ok(&at(t0, &["schedule", "pause", "q", "--for", "5m"]));
    env.sql.exec(
        "UPDATE job_definitions SET paused_until = $1 WHERE name = 'q'",
        &[&epoch("2030-03-01T00:05:00Z")],
    );

    let simulated = json(&env.ok(&at(
        after,
        &[
            "schedule",
            "simulate",
            "q",
            "--from",
            "2030-03-01T00:01:00Z",
            "--to",
            after,
            "--json",
        ],
    )));
    let instants = simulated["instants"].as_array().expect("instants");
    assert_eq!(instants.len(), 1, "{simulated}");
    assert_eq!(instants[0]["at"], "2030-03-01T00:05:00Z");
    assert_eq!(instants[0]["decision"], "run", "{simulated}");
    let list = env.ok(&at(after, &["schedule", "list"]));
    assert!(list.contains("ended: the next tick resumes it"), "{list}");
    // `why` said "paused" and advised `schedule resume`, which would have dropped the instant.
    let why = json(&env.ok(&at(after, &["why", "q", "--json"])));
    assert_eq!(why["instant"], "2030-03-01T00:05:00Z", "{why}");
    assert_eq!(why["cause"], "no_tick_since", "{why}");

    let out = env.ok(&at(
        after,
        &["schedule", "edit", "q", "--timeout", "10m", "-q"],
    ));
    assert!(
        out.contains("1 instant(s) already due were materialised"),
        "{out}"
    );
    env.tick_at(after);
    let runs = run_ids(&env, "q");
    assert_eq!(runs.len(), 1, "the 00:05 instant");
    assert_eq!(status_of(&env, runs[0]), "succeeded");

    // `resume` after the end resumes from the end too: the 00:15 instant is not dropped.
    env.ok(&at(after, &["schedule", "pause", "q", "--for", "5m"]));
    env.sql.exec(
        "UPDATE job_definitions SET paused_until = $1 WHERE name = 'q'",
        &[&epoch("2030-03-01T00:15:00Z")],
    );
    let out = env.ok(&at("2030-03-01T00:17:00Z", &["schedule", "resume", "q"]));
    assert!(out.contains("its pause had ended"), "{out}");
    env.tick_at("2030-03-01T00:17:00Z");
    let runs = run_ids(&env, "q");
    assert_eq!(runs.len(), 2, "and the 00:15 instant");
}

/// `run` and `retry` on a paused schedule say the run is held, and until when; the tick then
/// holds it, as they said.
#[test]
fn run_and_retry_say_when_a_paused_schedule_holds_the_run() {
    let env = Env::init();
    env.add_at(
        Some(T0),
        "h",
        &never_near(T0),
        &["--max-attempts", "1"],
        "exit 2",
    );
    env.ok(&at(T0, &["run", "h"]));
    env.tick_at(T0);
    let run = run_ids(&env, "h")[0];
    assert_eq!(status_of(&env, run), "dead");

    env.ok(&at(T0, &["schedule", "pause", "h"]));
    let out = env.ok(&at(T0, &["retry", &run.to_string()]));
    assert!(
        out.contains("the schedule is paused, so the run is held until `runner schedule resume h`"),
        "{out}"
    );
    env.ok(&at(T0, &["schedule", "pause", "h", "--for", "1h"]));
    let out = env.ok(&at(T0, &["run", "h"]));
    assert!(
        out.contains("the schedule is paused until ")
            && out.contains("so the run is held until then"),
        "{out}"
    );
    env.tick_at(T0);
    assert_eq!(status_of(&env, run), "pending", "held");
    // `show` said "due, the next tick runs it" of a held run.
    let show = env.ok(&at(T0, &["show", &run.to_string()]));
    assert!(
        show.contains("attempt 2 at ") && show.contains("so the run is held until then"),
        "{show}"
    );
    let manual = run_ids(&env, "h")[0].max(run_ids(&env, "h")[1]);
    let show = env.ok(&at(T0, &["show", &manual.to_string()]));
    assert!(
        show.contains("status:     pending: the schedule is paused until "),
        "{show}"
    );
}

#[test]
fn a_plain_pause_or_resume_drops_the_end_of_a_timed_pause() {
    let env = Env::init();
    env.add_at(Some(T0), "hourly", "0 * * * *", &[], "true");
    env.ok(&at(T0, &["schedule", "pause", "hourly", "--for", "30m"]));
    let out = env.ok(&at(T0, &["schedule", "pause", "hourly"]));
    assert_eq!(out.trim(), "paused schedule hourly", "{out}");
    // No end any more: a tick long after leaves it paused.
    env.tick_at("2026-07-01T12:00:05Z");
    let show = env.ok(&at("2026-07-01T12:00:05Z", &["schedule", "show", "hourly"]));
    assert!(show.contains("state:        paused\n"), "{show}");
    assert!(run_ids(&env, "hourly").is_empty());

    // Resume drops an end too; a pause set by `edit --paused` has none.
    env.ok(&at(T0, &["schedule", "pause", "hourly", "--for", "1d"]));
    env.ok(&at(
        "2026-07-01T12:00:06Z",
        &["schedule", "resume", "hourly"],
    ));
    env.ok(&at(
        "2026-07-01T12:00:07Z",
        &["schedule", "edit", "hourly", "--paused"],
    ));
    env.tick_at("2026-07-03T12:00:05Z");
    let show = env.ok(&at("2026-07-03T12:00:05Z", &["schedule", "show", "hourly"]));
    assert!(show.contains("state:        paused\n"), "{show}");

    env.fails(2, &["schedule", "pause", "hourly", "--for", "0s"]);
    env.fails(2, &["schedule", "pause", "hourly", "--for", "soon"]);
}

/// Each run of schedule `name` as `scheduled_for status`, oldest instant first.
fn runs_of(env: &Env, name: &str) -> Vec<String> {
    env.sql
        .query_rows(
            "SELECT r.scheduled_for, r.status FROM job_runs r
             JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = $1 ORDER BY r.scheduled_for",
            &[&name],
        )
        .iter()
        .map(|row| {
            let at = chrono::DateTime::from_timestamp(row[0].i64(), 0).expect("in range");
            format!("{} {}", at.format("%H:%M"), row[1].string())
        })
        .collect()
}

/// The paused period starts at the pause: an instant already due when `pause` comes (no tick
/// since: cron's tick late, or still starting) belongs to the schedule before it. `pause`
/// materialises it first, as that tick would have (by the catch-up policy), says so, and holds
/// its run (or cancels it with `--cancel-pending`); it dropped them. So for the instants since
/// the end of a `pause --for` that has ended. `resume` of a plain pause still continues from now.
#[test]
fn a_pause_materialises_the_instants_already_due_first_and_holds_their_runs() {
    let env = Env::init();
    let t0 = "2030-03-01T00:00:00Z";
    env.add_at(Some(t0), "q", "*/5 * * * *", &[], "true");
    let out = env.ok(&at("2030-03-01T00:05:30Z", &["schedule", "pause", "q"]));
    assert!(
        out.contains("1 instant already due was materialised first"),
        "{out}"
    );
    assert!(out.contains("1 pending run held until it resumes"), "{out}");
    env.tick_at("2030-03-01T00:06:00Z");
    assert_eq!(runs_of(&env, "q"), ["00:05 pending"], "held by the pause");
    // Resumed from now: the paused period (00:10, 00:15) is not replayed; the held run starts.
    let out = env.ok(&at("2030-03-01T00:17:00Z", &["schedule", "resume", "q"]));
    assert_eq!(out.trim(), "resumed schedule q", "{out}");
    env.tick_at("2030-03-01T00:17:00Z");
    assert_eq!(runs_of(&env, "q"), ["00:05 succeeded"]);

    // A pause whose end has passed, paused again (plainly, or for a while) before the tick that
    // would resume it: the instants since its end are the schedule's.
    for (name, again) in [("plain", &[][..]), ("timed", &["--for", "1h"])] {
        env.add_at(Some(t0), name, "*/5 * * * *", &[], "true");
        env.ok(&at(t0, &["schedule", "pause", name, "--for", "5m"]));
        env.sql.exec(
            "UPDATE job_definitions SET paused_until = $1 WHERE name = $2",
            &[&epoch("2030-03-01T00:05:00Z"), &name],
        );
        let out = env.ok(&at(
            "2030-03-01T00:06:00Z",
            &[&["schedule", "pause", name][..], again].concat(),
        ));
        assert!(
            out.contains("1 instant already due was materialised first"),
            "{name}: {out}"
        );
        env.tick_at("2030-03-01T00:07:00Z");
        assert_eq!(runs_of(&env, name), ["00:05 pending"], "{name}");
    }

    // By the catch-up policy (latest: the newest runs, the older are skipped), and
    // `--cancel-pending` cancels the run it materialised with the others.
    env.add_at(Some(t0), "c", "*/5 * * * *", &[], "true");
    let out = env.ok(&at(
        "2030-03-01T00:16:00Z",
        &["schedule", "pause", "c", "--cancel-pending"],
    ));
    assert!(
        out.contains("3 instants already due were materialised first"),
        "{out}"
    );
    assert!(out.contains("cancelled 1 pending run"), "{out}");
    assert_eq!(
        runs_of(&env, "c"),
        ["00:05 skipped", "00:10 skipped", "00:15 cancelled"]
    );
}

/// `edit --paused` and `apply` with `paused = true` pause like `pause`: the instants already due
/// are materialised first under the settings they came due with, and held; they dropped them.
#[test]
fn edit_paused_and_apply_paused_materialise_the_instants_already_due_first() {
    let env = Env::init();
    let t0 = "2030-03-01T00:00:00Z";
    env.add_at(Some(t0), "e", "*/5 * * * *", &[], "true");
    env.add_at(Some(t0), "a", "*/5 * * * *", &[], "true");
    let out = env.ok(&at(
        "2030-03-01T00:05:30Z",
        &["schedule", "edit", "e", "--paused"],
    ));
    assert!(
        out.contains(
            "(1 instant(s) already due were materialised under the previous settings first; \
             the pause holds their runs)"
        ),
        "{out}"
    );
    let file = env.path("schedules.toml");
    std::fs::write(
        &file,
        "[a]\ncron = \"*/5 * * * *\"\ncommand = \"true\"\npaused = true\n",
    )
    .expect("write file");
    let file = file.to_str().expect("utf-8");
    let out = env.ok(&at("2030-03-01T00:05:30Z", &["schedule", "apply", file]));
    assert!(out.contains("1 changed"), "{out}");
    env.tick_at("2030-03-01T00:06:00Z");
    assert_eq!(runs_of(&env, "e"), ["00:05 pending"], "held by the pause");
    assert_eq!(runs_of(&env, "a"), ["00:05 pending"], "held by the pause");

    // Of a paused schedule nothing is due: `edit --paused` again materialises nothing.
    let out = env.ok(&at(
        "2030-03-01T00:11:00Z",
        &["schedule", "edit", "e", "--paused"],
    ));
    assert!(!out.contains("materialised"), "{out}");
    assert_eq!(runs_of(&env, "e"), ["00:05 pending"]);
}

/// `apply` of a file that says `paused = true`, after the end of a `pause --for` and before the
/// tick that resumes the schedule, compares the file with the schedule as that tick will have it:
/// resumed from the end. It resumes it so (the instants since the end are materialised) and then
/// pauses it for good, as the file says. It compared the schedule as stored (paused, as the file
/// says), reported "no changes", and the next tick resumed it and ran it.
#[test]
fn apply_paused_after_a_timed_pause_ended_pauses_it_for_good() {
    let env = Env::init();
    let t0 = "2030-03-01T00:00:00Z";
    let after = "2030-03-01T00:07:00Z";
    env.add_at(Some(t0), "q", "*/5 * * * *", &[], "true");
    env.ok(&at(t0, &["schedule", "pause", "q", "--for", "5m"]));
    let file = env.path("schedules.toml");
    std::fs::write(
        &file,
        "[q]\ncron = \"*/5 * * * *\"\ncommand = \"true\"\npaused = true\n",
    )
    .expect("write file");
    let file = file.to_str().expect("utf-8");
    let line = "~ q (paused: false → true; its pause ended at 2030-03-01T00:05:00+00:00, so it is \
                resumed from then first, as the next tick would)\n";

    // The dry run prints the same, and changes nothing.
    let out = env.ok(&at(after, &["schedule", "apply", file, "--dry-run"]));
    assert!(out.starts_with(line) && out.contains("1 changed"), "{out}");
    let shown = json(&env.ok(&at(after, &["schedule", "show", "q", "--json"])));
    assert!(shown["paused_until"].is_string(), "{shown}");

    let out = env.ok(&at(after, &["schedule", "apply", file]));
    assert!(out.starts_with(line) && out.contains("1 changed"), "{out}");
    let shown = json(&env.ok(&at(after, &["schedule", "show", "q", "--json"])));
    assert_eq!(shown["state"], "paused", "{shown}");
    assert!(shown["paused_until"].is_null(), "paused for good: {shown}");
    // The 00:05 instant, at the end, was the schedule's: materialised, and held by the pause.
    env.tick_at("2030-03-01T00:11:00Z");
    assert_eq!(runs_of(&env, "q"), ["00:05 pending"], "held, not run");
    let out = env.ok(&at("2030-03-01T00:12:00Z", &["schedule", "apply", file]));
    assert!(
        out.starts_with("= q\n") && out.contains("no changes"),
        "{out}"
    );
}

/// `export` between a `pause --for`'s end and the tick that resumes the schedule wrote
/// `paused = true`, so that applying its own output paused the schedule for good, unlike the
/// tick. It exports the schedule as the tick will have it, not paused, and says why.
#[test]
fn export_after_a_timed_pause_ended_exports_it_resumed() {
    let env = Env::init();
    let t0 = "2030-03-01T00:00:00Z";
    let after = "2030-03-01T00:07:00Z";
    env.add_at(Some(t0), "q", "*/5 * * * *", &[], "true");
    env.ok(&at(t0, &["schedule", "pause", "q", "--for", "5m"]));
    // Before the end, the pause is exported, its end named in a comment.
    let before = env.ok(&at("2030-03-01T00:04:00Z", &["schedule", "export"]));
    assert!(
        before.contains("paused = true") && before.contains("# q is paused until"),
        "{before}"
    );
    let exported = env.ok(&at(after, &["schedule", "export"]));
    assert!(
        !exported.contains("paused = true"),
        "not paused: {exported}"
    );
    assert!(
        exported.contains(
            "# q's pause ended at 2030-03-01T00:05:00Z (`pause --for`): the next tick resumes \
             it, so it is not paused in this file."
        ),
        "{exported}"
    );
    let file = env.path("schedules.toml");
    std::fs::write(&file, &exported).expect("write file");
    env.ok(&at(
        after,
        &["schedule", "apply", file.to_str().expect("utf-8")],
    ));
    let shown = json(&env.ok(&at(after, &["schedule", "show", "q", "--json"])));
    assert_eq!(
        shown["state"], "active",
        "resumed, as the tick would: {shown}"
    );
    // Resumed from the end: the 00:05 instant is the schedule's, and runs.
    env.tick_at("2030-03-01T00:08:00Z");
    assert_eq!(runs_of(&env, "q"), ["00:05 succeeded"]);
}

#[test]
fn edit_workdir_empty_or_no_workdir_unsets_it() {
    let env = Env::init();
    let dir = env.path("");
    let dir = dir.to_str().expect("utf-8").trim_end_matches('/');
    env.add("job", &["--workdir", dir], "pwd");
    let workdir =
        |env: &Env| json(&env.ok(&["schedule", "show", "job", "--json"]))["workdir"].clone();
    assert_eq!(workdir(&env), dir);
    env.ok(&["schedule", "edit", "job", "--workdir", ""]);
    assert!(workdir(&env).is_null());
    assert!(env
        .ok(&["schedule", "show", "job"])
        .contains("workdir:      (the tick's)"));
    env.ok(&["schedule", "edit", "job", "--workdir", dir]);
    assert_eq!(workdir(&env), dir);
    env.ok(&["schedule", "edit", "job", "--no-workdir"]);
    assert!(workdir(&env).is_null());
    env.fails(
        2,
        &["schedule", "edit", "job", "--no-workdir", "--workdir", dir],
    );

    // Both forms warn alike when the command is a relative path that now has no directory.
    env.add("relative", &["--workdir", dir], "./report.sh");
    for unset in [&["--workdir", ""][..], &["--no-workdir"]] {
        let out = env.run(&[&["schedule", "edit", "relative"][..], unset].concat());
        assert!(out.status.success(), "{unset:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("relative path ./report.sh"),
            "{unset:?}: {}",
            stderr(&out)
        );
        env.ok(&["schedule", "edit", "relative", "--workdir", dir]);
    }
}
