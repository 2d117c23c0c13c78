//! `runner schedule add/list/show/edit/rm/pause/resume/next` through the real binary: text and
//! JSON shapes, fire times in the schedule's zone, and how edits, pauses and resumes move the
//! materialisation cursor (checked with `runner tick --now`).

use chrono::DateTime;
use serde_json::Value;

use crate::common::{assert_read_at, epoch, json as parse_json, never, stderr, utc, Env};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Every JSON time is a pair: `<key>` an RFC 3339 UTC string (or null) and `<key>_epoch` the same
/// instant in epoch seconds (or null). Checks every pair in `value`, recursively; returns how many
/// non-null pairs it saw, so callers can make sure the check was not vacuous.
fn check_time_pairs(value: &Value) -> usize {
    let mut seen = 0;
    match value {
        Value::Array(items) => seen += items.iter().map(check_time_pairs).sum::<usize>(),
        Value::Object(map) => {
            for (key, v) in map {
                seen += check_time_pairs(v);
                let Some(base) = key.strip_suffix("_epoch") else {
                    continue;
                };
                let text = map
                    .get(base)
                    .unwrap_or_else(|| panic!("{key} has no {base} partner in {value}"));
                match (text, v) {
                    (Value::Null, Value::Null) => {}
                    (Value::String(s), Value::Number(n)) => {
                        assert!(
                            s.ends_with('Z'),
                            "{base} = {s:?} is not in UTC (RFC 3339 with Z)"
                        );
                        assert_eq!(
                            Some(epoch(s)),
                            n.as_i64(),
                            "{base} = {s:?} disagrees with {key} = {n}"
                        );
                        seen += 1;
                    }
                    other => panic!("{base}/{key} are not a time pair: {other:?}"),
                }
            }
        }
        _ => {}
    }
    seen
}

/// The lines of command output that are fire times (ISO 8601 with an offset), trimmed.
fn time_lines(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|l| DateTime::parse_from_rfc3339(l).is_ok())
        .map(str::to_string)
        .collect()
}

fn definition_row(env: &Env, name: &str) -> Vec<String> {
    env.sql.query_strings(&format!(
        "SELECT cron || '|' || timezone || '|' || command || '|' || coalesce(workdir, '') || '|' ||
                max_attempts || '|' || timeout_secs || '|' || backoff_base_secs || '|' ||
                backoff_max_secs || '|' || overlap || '|' || catch_up || '|' || grace_secs || '|' ||
                paused || '|' || materialized_through || '|' || coalesce(CAST(next_fire_at AS TEXT), '') || '|' ||
                updated_at
         FROM job_definitions WHERE name = '{name}'"
    ), &[])
}

/// (scheduled_for as UTC text, status, command) of every run of a schedule, oldest first.
fn runs_of(env: &Env, name: &str) -> Vec<(String, String, String)> {
    env.sql
        .query_rows(
            "SELECT r.scheduled_for, r.status, r.command FROM job_runs r
             JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = $1 ORDER BY r.scheduled_for, r.id",
            &[&name],
        )
        .iter()
        .map(|r| (utc(r[0].i64()), r[1].string(), r[2].string()))
        .collect()
}

// ---------------------------------------------------------------------------
// add
// ---------------------------------------------------------------------------

#[test]
fn add_prints_the_next_five_fire_times_in_the_schedules_zone() {
    let env = Env::init();
    // New York springs forward on 2026-03-08: 02:30 does not exist that day, so the fixed-time
    // job runs once at 03:00 EDT, then at 02:30 EDT on the following days.
    let out = env.add_at(
        Some("2026-03-07T12:00:00Z"),
        "backup",
        "30 2 * * *",
        &["--tz", "America/New_York"],
        "echo hello world",
    );
    assert!(out.contains("backup"), "{out}");
    assert!(out.contains("America/New_York"), "names the zone:\n{out}");
    assert_eq!(
        time_lines(&out),
        [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00",
            "2026-03-11T02:30:00-04:00",
            "2026-03-12T02:30:00-04:00",
        ],
        "{out}"
    );

    // Berlin crosses its own transition inside the five: the offset in the output follows it.
    let out = env.add_at(
        Some("2026-03-27T00:00:00Z"),
        "noon",
        "0 12 * * *",
        &["--tz", "Europe/Berlin"],
        "true",
    );
    assert_eq!(
        time_lines(&out),
        [
            "2026-03-27T12:00:00+01:00",
            "2026-03-28T12:00:00+01:00",
            "2026-03-29T12:00:00+02:00",
            "2026-03-30T12:00:00+02:00",
            "2026-03-31T12:00:00+02:00",
        ],
        "{out}"
    );

    // What was stored: the words of the command joined, the zone, and the cursor at --now.
    assert_eq!(
        env.sql.query_strings("SELECT command || '|' || timezone || '|' || cron FROM job_definitions WHERE name = 'backup'", &[]),
        ["echo hello world|America/New_York|30 2 * * *"]
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT next_fire_at FROM job_definitions WHERE name = 'backup'",
            &[]
        ),
        epoch("2026-03-08T07:00:00Z")
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
}

#[test]
fn add_stores_every_flag_and_show_reports_it() {
    let env = Env::init();
    let workdir = env.path("work");
    std::fs::create_dir(&workdir).expect("mkdir");
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "tuned",
        "*/5 * * * *",
        &[
            "--tz",
            "Asia/Tokyo",
            "--max-attempts",
            "5",
            "--timeout",
            "90s",
            "--backoff-base",
            "10s",
            "--backoff-max",
            "5m",
            "--overlap",
            "allow",
            "--catch-up",
            "all",
            "--grace",
            "2m",
            "--workdir",
            workdir.to_str().expect("utf-8 path"),
            "--paused",
        ],
        "make report",
    );
    let show = parse_json(&env.ok(&["schedule", "show", "tuned", "--json"]));
    let canonical = workdir.canonicalize().expect("canonical");
    for (key, want) in [
        ("name", serde_json::json!("tuned")),
        ("cron", serde_json::json!("*/5 * * * *")),
        ("timezone", serde_json::json!("Asia/Tokyo")),
        ("command", serde_json::json!("make report")),
        ("workdir", serde_json::json!(canonical.to_str())),
        ("state", serde_json::json!("paused")),
        ("max_attempts", serde_json::json!(5)),
        ("timeout_secs", serde_json::json!(90)),
        ("backoff_base_secs", serde_json::json!(10)),
        ("backoff_max_secs", serde_json::json!(300)),
        ("overlap", serde_json::json!("allow")),
        ("catch_up", serde_json::json!("all")),
        ("grace_secs", serde_json::json!(120)),
        ("next_fire_at", Value::Null),
        ("next_fire_at_epoch", Value::Null),
        ("last_result", Value::Null),
    ] {
        assert_eq!(show[key], want, "{key} in {show:#}");
    }
    // Created when `schedule add` read its clock: its --now, or a little after on a busy machine.
    let created = show["created_at_epoch"].as_i64().expect("created_at_epoch");
    assert_read_at(created, "2026-01-01T00:00:00Z", 0, "created_at");
    assert_eq!(show["created_at"], utc(created), "{show:#}");
    assert_eq!(check_time_pairs(&show), 2);

    let text = env.ok(&["schedule", "show", "tuned"]);
    for want in [
        "tuned",
        "*/5 * * * *",
        "wildcard",
        "Asia/Tokyo",
        "make report",
        canonical.to_str().expect("utf-8"),
        "paused",
        "allow",
        "all",
    ] {
        assert!(text.contains(want), "show lacks {want:?}:\n{text}");
    }
}

// ---------------------------------------------------------------------------
// list / show
// ---------------------------------------------------------------------------

#[test]
fn list_and_show_in_text_and_json() {
    let env = Env::init();
    assert!(
        env.ok(&["schedule", "list"]).contains("no schedules"),
        "an empty list says so"
    );
    assert_eq!(
        parse_json(&env.ok(&["schedule", "list", "--json"])),
        serde_json::json!([])
    );

    let t0 = "2026-03-07T12:00:00Z";
    env.add_at(
        Some(t0),
        "nightly",
        "30 2 * * *",
        &["--tz", "America/New_York"],
        "true",
    );
    env.add_at(Some(t0), "hourly", "@hourly", &[], "true");

    // Text: a table with a header and one row per schedule, times in the schedule's zone.
    let list = env.ok(&["--now", t0, "schedule", "list"]);
    let header = list.lines().next().expect("header");
    for column in ["NAME", "CRON", "ZONE", "STATE", "NEXT FIRE", "LAST RESULT"] {
        assert!(header.contains(column), "header lacks {column}:\n{list}");
    }
    let row = |name: &str| -> Vec<String> {
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{list}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let nightly = row("nightly");
    for want in [
        "America/New_York",
        "active",
        "2026-03-08T03:00:00-04:00",
        "-",
    ] {
        assert!(nightly.iter().any(|c| c == want), "{want}: {nightly:?}");
    }
    let hourly = row("hourly");
    for want in ["@hourly", "UTC", "active", "2026-03-07T13:00:00+00:00"] {
        assert!(hourly.iter().any(|c| c == want), "{want}: {hourly:?}");
    }

    // JSON: sorted by name, times as RFC 3339 UTC plus epoch seconds.
    let json = parse_json(&env.ok(&["--now", t0, "schedule", "list", "--json"]));
    let items = json.as_array().expect("array");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["name"], "hourly");
    assert_eq!(items[1]["name"], "nightly");
    assert_eq!(
        check_time_pairs(&json),
        6,
        "next_fire_at, created_at and timing_changed_at each"
    );
    let n = &items[1];
    assert_eq!(n["next_fire_at"], "2026-03-08T07:00:00Z");
    assert_eq!(n["next_fire_at_epoch"], epoch("2026-03-08T07:00:00Z"));
    assert_eq!(n["state"], "active");
    assert_eq!(n["timezone"], "America/New_York");
    // The defaults of DESIGN.md.
    assert_eq!(n["max_attempts"], 3);
    assert_eq!(n["timeout_secs"], 3600);
    assert_eq!(n["backoff_base_secs"], 30);
    assert_eq!(n["backoff_max_secs"], 3600);
    assert_eq!(n["overlap"], "forbid");
    assert_eq!(n["catch_up"], "latest");
    assert_eq!(n["grace_secs"], 300);
    assert_eq!(n["workdir"], Value::Null);
    assert_eq!(n["last_result"], Value::Null);

    // show --json is the list entry.
    let show = parse_json(&env.ok(&["--now", t0, "schedule", "show", "nightly", "--json"]));
    assert_eq!(&show, n);

    // After a tick the last result appears, in text and JSON.
    env.ok(&["--now", "2026-03-07T13:00:30Z", "tick"]);
    let t1 = "2026-03-07T13:00:31Z";
    let json = parse_json(&env.ok(&["--now", t1, "schedule", "show", "hourly", "--json"]));
    let last = &json["last_result"];
    assert_eq!(last["status"], "succeeded", "{json:#}");
    assert_eq!(last["scheduled_for"], "2026-03-07T13:00:00Z");
    assert!(last["run_id"].is_i64(), "{last}");
    assert_eq!(check_time_pairs(last), 1);
    assert_eq!(json["next_fire_at"], "2026-03-07T14:00:00Z");
    let list = env.ok(&["schedule", "list"]);
    let line = list
        .lines()
        .find(|l| l.trim_start().starts_with("hourly"))
        .expect("hourly row");
    assert!(line.contains("succeeded"), "{list}");

    let text = env.ok(&["--now", t1, "schedule", "show", "nightly"]);
    assert!(text.contains("2026-03-08T03:00:00-04:00"), "{text}");
    assert!(text.contains("fixed-time"), "{text}");

    // Unknown names are "not found".
    let err = env.fails(3, &["schedule", "show", "nope"]);
    assert!(err.contains("nope"), "{err}");
    env.fails(3, &["schedule", "show", "nope", "--json"]);
}

// ---------------------------------------------------------------------------
// next
// ---------------------------------------------------------------------------

#[test]
fn next_previews_an_expression_without_a_database() {
    let env = Env::new();
    let preview = |args: &[&str]| {
        let mut all = vec!["--now", "2026-11-01T04:45:00Z", "schedule", "next"];
        all.extend_from_slice(args);
        env.ok(&all)
    };
    // New York falls back on 2026-11-01: a wildcard job fires in both passes of 01:xx.
    let out = preview(&["--cron", "*/30 * * * *", "--tz", "America/New_York"]);
    assert_eq!(
        time_lines(&out),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T02:00:00-05:00",
        ],
        "{out}"
    );
    let out = preview(&[
        "--cron",
        "*/30 * * * *",
        "--tz",
        "America/New_York",
        "-n",
        "2",
    ]);
    assert_eq!(time_lines(&out).len(), 2, "{out}");

    let json = parse_json(&preview(&[
        "--cron",
        "*/30 * * * *",
        "--tz",
        "America/New_York",
        "-n",
        "4",
        "--json",
    ]));
    let items = json.as_array().expect("array");
    let at: Vec<&str> = items
        .iter()
        .map(|i| i["at"].as_str().expect("at"))
        .collect();
    assert_eq!(
        at,
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z"
        ]
    );
    assert_eq!(items[2]["local"], "2026-11-01T01:00:00-05:00");
    assert_eq!(check_time_pairs(&json), 4);

    // Debian's day rule: either day field matches unless one starts with '*'.
    let out = env.ok(&[
        "--now",
        "2026-01-01T00:00:00Z",
        "schedule",
        "next",
        "--cron",
        "0 0 1,15 * FRI",
    ]);
    assert_eq!(
        time_lines(&out),
        [
            "2026-01-02T00:00:00+00:00",
            "2026-01-09T00:00:00+00:00",
            "2026-01-15T00:00:00+00:00",
            "2026-01-16T00:00:00+00:00",
            "2026-01-23T00:00:00+00:00",
        ]
    );
    let out = env.ok(&[
        "--now",
        "2026-01-01T00:00:00Z",
        "schedule",
        "next",
        "--cron",
        "0 0 */2 * MON",
    ]);
    assert_eq!(
        time_lines(&out),
        [
            "2026-01-05T00:00:00+00:00",
            "2026-01-19T00:00:00+00:00",
            "2026-02-09T00:00:00+00:00",
            "2026-02-23T00:00:00+00:00",
            "2026-03-09T00:00:00+00:00",
        ]
    );

    // Bad previews are usage errors.
    let err = env.fails(2, &["schedule", "next", "--cron", "0 0 * * * *"]);
    assert!(err.contains("0 0 * * * *"), "{err}");
    let err = env.fails(
        2,
        &[
            "schedule",
            "next",
            "--cron",
            "@daily",
            "--tz",
            "Mars/Olympus",
        ],
    );
    assert!(err.contains("Mars/Olympus"), "{err}");
    env.fails(2, &["schedule", "next", "--cron", "@daily", "-n", "0"]);
    env.fails(2, &["schedule", "next", "--tz", "UTC"]);
    env.fails(2, &["schedule", "next"]);

    // None of that needed, or created, a database.
    assert!(
        !env.sql.created(),
        "schedule next --cron created {}",
        env.sql.location()
    );
}

#[test]
fn next_for_a_schedule_follows_its_zone_and_now() {
    let env = Env::init();
    env.add_at(
        Some("2026-03-07T12:00:00Z"),
        "nightly",
        "30 2 * * *",
        &["--tz", "America/New_York"],
        "true",
    );
    let out = env.ok(&[
        "--now",
        "2026-03-08T06:00:00Z",
        "schedule",
        "next",
        "nightly",
        "-n",
        "3",
    ]);
    assert_eq!(
        time_lines(&out),
        [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00"
        ]
    );
    // "After now" is strict.
    let json = parse_json(&env.ok(&[
        "--now",
        "2026-03-08T07:00:00Z",
        "schedule",
        "next",
        "nightly",
        "-n",
        "1",
        "--json",
    ]));
    assert_eq!(json[0]["at"], "2026-03-09T06:30:00Z");
    assert_eq!(json[0]["at_epoch"], epoch("2026-03-09T06:30:00Z"));
    let err = env.fails(3, &["schedule", "next", "nope"]);
    assert!(err.contains("nope"), "{err}");

    // A schedule's fire times are in its own zone: `--tz` with NAME (valid or not) is refused as
    // `--cron` with NAME is, by `next` and `simulate` alike, rather than silently ignored.
    let window = ["--from", "2026-03-08", "--to", "2026-03-09"];
    for zone in ["Europe/Paris", "Mars/Olympus"] {
        for mut args in [
            vec!["schedule", "next", "nightly", "--tz", zone],
            [
                &["schedule", "simulate", "nightly", "--tz", zone][..],
                &window,
            ]
            .concat(),
        ] {
            let err = env.fails(2, &args);
            assert!(
                err.contains("--tz") && err.contains("NAME"),
                "{args:?}: {err}"
            );
            args.push("--json");
            env.fails(2, &args);
        }
    }
}

// ---------------------------------------------------------------------------
// edit
// ---------------------------------------------------------------------------

#[test]
fn edit_takes_effect_from_the_next_fire_time() {
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "job",
        "0 * * * *",
        &[],
        "echo old",
    );
    env.ok(&["--now", "2026-01-01T01:00:00Z", "tick"]);
    assert_eq!(
        runs_of(&env, "job"),
        [(
            "2026-01-01T01:00:00Z".to_string(),
            "succeeded".to_string(),
            "echo old".to_string()
        )]
    );

    // At 01:30 the schedule becomes every 15 minutes with a new command.
    let out = env.ok(&[
        "--now",
        "2026-01-01T01:30:00Z",
        "schedule",
        "edit",
        "job",
        "--cron",
        "*/15 * * * *",
        "--",
        "echo",
        "new",
    ]);
    let upcoming = time_lines(&out);
    assert_eq!(
        upcoming.first().map(String::as_str),
        Some("2026-01-01T01:45:00+00:00"),
        "{out}"
    );
    assert_eq!(upcoming.len(), 5, "{out}");
    // What is stored agrees with what was printed: the cursor's next instant is after the edit,
    // not a time of the new expression that passed before the edit (01:15, 01:30).
    assert_eq!(
        env.sql.query_i64(
            "SELECT next_fire_at FROM job_definitions WHERE name = 'job'",
            &[]
        ),
        epoch("2026-01-01T01:45:00Z")
    );
    let show = parse_json(&env.ok(&["schedule", "show", "job", "--json"]));
    assert_eq!(show["cron"], "*/15 * * * *");
    assert_eq!(show["command"], "echo new");

    // A tick right after the edit has nothing to do: 01:15 and 01:30 are not replayed.
    env.ok(&["--now", "2026-01-01T01:31:00Z", "tick"]);
    assert_eq!(runs_of(&env, "job").len(), 1, "{:?}", runs_of(&env, "job"));

    // From the next fire time on, the new expression and command apply; the run already made keeps
    // the command it was created with.
    env.ok(&["--now", "2026-01-01T01:45:00Z", "tick"]);
    env.ok(&["--now", "2026-01-01T02:00:00Z", "tick"]);
    let runs = runs_of(&env, "job");
    let summary: Vec<(&str, &str)> = runs
        .iter()
        .map(|(at, _, cmd)| (at.as_str(), cmd.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("2026-01-01T01:00:00Z", "echo old"),
            ("2026-01-01T01:45:00Z", "echo new"),
            ("2026-01-01T02:00:00Z", "echo new"),
        ]
    );
    assert!(
        runs.iter().all(|(_, status, _)| status == "succeeded"),
        "{runs:?}"
    );
}

#[test]
fn edit_settles_instants_already_due_with_the_old_settings() {
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "daily",
        "0 3 * * *",
        &[],
        "echo old",
    );
    // 03:00 came due, but no tick has seen it yet when the command is changed at 03:00:20.
    env.ok(&[
        "--now",
        "2026-01-01T03:00:20Z",
        "schedule",
        "edit",
        "daily",
        "--",
        "echo",
        "new",
    ]);
    env.ok(&["--now", "2026-01-01T03:01:00Z", "tick"]);
    env.ok(&["--now", "2026-01-02T03:00:00Z", "tick"]);
    let runs: Vec<(String, String)> = runs_of(&env, "daily")
        .into_iter()
        .map(|(at, _, cmd)| (at, cmd))
        .collect();
    assert_eq!(
        runs,
        [
            ("2026-01-01T03:00:00Z".to_string(), "echo old".to_string()),
            ("2026-01-02T03:00:00Z".to_string(), "echo new".to_string()),
        ],
        "the 03:00 instant ran once, with the settings it came due under"
    );
}

#[test]
fn edit_rejects_bad_input_and_changes_nothing() {
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "job",
        "0 * * * *",
        &[],
        "true",
    );
    let before = definition_row(&env, "job");
    assert_eq!(before.len(), 1);
    let cases: &[(&[&str], &str)] = &[
        (&["--cron", "0 0 * * * *"], "fields"),
        (&["--cron", "61 * * * *"], "61"),
        (&["--tz", "Nowhere/Land"], "Nowhere/Land"),
        (&["--timeout", "5x"], "5x"),
        (&["--max-attempts", "0"], "max-attempts"),
        (&["--backoff-base", "2h"], "backoff-max"),
        (
            &["--workdir", "/definitely/not/here"],
            "/definitely/not/here",
        ),
        (&[], "nothing to change"),
    ];
    for &(args, names) in cases {
        let mut all = vec!["--now", "2026-01-01T00:30:00Z", "schedule", "edit", "job"];
        all.extend_from_slice(args);
        let err = env.fails(2, &all);
        assert!(err.contains(names), "{args:?}: {err}");
        assert_eq!(definition_row(&env, "job"), before, "{args:?} changed it");
    }
    let err = env.fails(3, &["schedule", "edit", "ghost", "--tz", "UTC"]);
    assert!(err.contains("ghost"), "{err}");
}

/// The longest command a schedule accepts is the longest a job can run: the kernel takes at most
/// 131,071 bytes in one argument, and the job's shell gets the runner's gate (69 bytes) before
/// the command. One byte more is refused by `add`, `edit` and `apply` (exit 2, the limit named),
/// rather than accepted and failed at every start (SPAWN:OTHER, E2BIG) until the run goes dead.
#[test]
fn the_longest_command_accepted_is_the_longest_that_runs() {
    const LONGEST: usize = 131_002;
    let env = Env::init();
    // `true`, then a no-op `:` whose argument pads the command to the length wanted.
    let command = |len: usize| format!("true;: {}", "x".repeat(len - 7));
    env.add("longest", &[], &command(LONGEST));
    let out = env.run(&["run", "longest", "--wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        env.sql
            .query_string("SELECT status FROM job_runs WHERE id = 1", &[]),
        "succeeded"
    );

    let too_long = command(LONGEST + 1);
    let refused = |err: &str| {
        assert!(
            err.contains("the command is 131003 bytes")
                && err.contains("at most 131002 bytes")
                && err.contains("script"),
            "{err}"
        );
    };
    let cron = never();
    refused(&env.fails(
        2,
        &[
            "schedule", "add", "longer", "--cron", &cron, "--", &too_long,
        ],
    ));
    refused(&env.fails(2, &["schedule", "edit", "longest", "--", &too_long]));
    let file = env.path("longer.toml");
    std::fs::write(
        &file,
        format!("[longer]\ncron = \"{cron}\"\ncommand = \"{too_long}\"\n"),
    )
    .expect("write file");
    refused(&env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]));
    assert_eq!(
        env.sql.query_strings(
            "SELECT name || ' ' || length(command) FROM job_definitions ORDER BY id",
            &[]
        ),
        ["longest 131002"]
    );
}

// ---------------------------------------------------------------------------
// rm
// ---------------------------------------------------------------------------

#[test]
fn rm_deletes_the_schedule_with_its_runs() {
    let env = Env::init();
    for name in ["keep", "drop"] {
        env.add_at(
            Some("2026-01-01T00:00:00Z"),
            name,
            "0 * * * *",
            &["--catch-up", "all"],
            "true",
        );
    }
    env.ok(&["--now", "2026-01-01T03:00:00Z", "tick"]);
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 6);
    let events_before = env.sql.query_i64("SELECT count(*) FROM job_events", &[]);
    assert!(events_before > 0);

    let out = env.ok(&["schedule", "rm", "drop"]);
    assert!(out.contains("drop"), "{out}");
    assert_eq!(
        env.sql
            .query_strings("SELECT name FROM job_definitions", &[]),
        ["keep"],
        "only the other schedule is left"
    );
    assert_eq!(runs_of(&env, "keep").len(), 3);
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        3,
        "its runs went with it"
    );
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_events e WHERE NOT EXISTS (SELECT 1 FROM job_runs r WHERE r.id = e.run_id)", &[]),
        0,
        "no orphaned events"
    );
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_attempts a WHERE NOT EXISTS (SELECT 1 FROM job_runs r WHERE r.id = a.run_id)", &[]),
        0,
        "no orphaned attempts"
    );
    assert!(!env.ok(&["schedule", "list"]).contains("drop"));

    let err = env.fails(3, &["schedule", "rm", "drop"]);
    assert!(err.contains("drop"), "{err}");
    env.fails(3, &["schedule", "show", "drop"]);
    // The name is free again.
    env.add_at(None, "drop", "@daily", &[], "true");
}

// ---------------------------------------------------------------------------
// pause / resume
// ---------------------------------------------------------------------------

#[test]
fn pause_stops_materialising_and_resume_does_not_replay_the_paused_period() {
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "hourly",
        "0 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    env.ok(&["--now", "2026-01-01T01:00:00Z", "tick"]);
    assert_eq!(runs_of(&env, "hourly").len(), 1);

    let out = env.ok(&[
        "--now",
        "2026-01-01T01:10:00Z",
        "schedule",
        "pause",
        "hourly",
    ]);
    assert!(out.contains("paused"), "{out}");
    let show = parse_json(&env.ok(&["schedule", "show", "hourly", "--json"]));
    assert_eq!(show["state"], "paused");
    assert_eq!(show["next_fire_at"], Value::Null);
    let list = env.ok(&["schedule", "list"]);
    assert!(list.contains("paused"), "{list}");
    // Pausing twice is fine and says so.
    let again = env.ok(&[
        "--now",
        "2026-01-01T01:11:00Z",
        "schedule",
        "pause",
        "hourly",
    ]);
    assert!(again.contains("already"), "{again}");

    for now in [
        "2026-01-01T02:00:00Z",
        "2026-01-01T03:00:00Z",
        "2026-01-01T04:00:00Z",
    ] {
        env.ok(&["--now", now, "tick"]);
    }
    assert_eq!(runs_of(&env, "hourly").len(), 1, "paused: nothing new");

    let out = env.ok(&[
        "--now",
        "2026-01-01T04:30:00Z",
        "schedule",
        "resume",
        "hourly",
    ]);
    assert!(out.contains("resumed"), "{out}");
    let show = parse_json(&env.ok(&[
        "--now",
        "2026-01-01T04:30:00Z",
        "schedule",
        "show",
        "hourly",
        "--json",
    ]));
    assert_eq!(show["state"], "active");
    assert_eq!(show["next_fire_at"], "2026-01-01T05:00:00Z", "{show:#}");
    assert_eq!(
        env.sql.query_i64(
            "SELECT next_fire_at FROM job_definitions WHERE name = 'hourly'",
            &[]
        ),
        epoch("2026-01-01T05:00:00Z"),
        "the cursor itself starts at the resume time"
    );

    // catch-up all would run every missed instant, but the paused period is not missed: it is
    // not replayed, not even as skipped rows.
    env.ok(&["--now", "2026-01-01T04:31:00Z", "tick"]);
    assert_eq!(runs_of(&env, "hourly").len(), 1);
    env.ok(&["--now", "2026-01-01T05:00:00Z", "tick"]);
    let runs: Vec<(String, String)> = runs_of(&env, "hourly")
        .into_iter()
        .map(|(at, status, _)| (at, status))
        .collect();
    assert_eq!(
        runs,
        [
            ("2026-01-01T01:00:00Z".to_string(), "succeeded".to_string()),
            ("2026-01-01T05:00:00Z".to_string(), "succeeded".to_string()),
        ]
    );
    let again = env.ok(&["schedule", "resume", "hourly"]);
    assert!(again.contains("already"), "{again}");
    env.fails(3, &["schedule", "pause", "ghost"]);
    env.fails(3, &["schedule", "resume", "ghost"]);
}

#[test]
fn edit_can_pause_and_reactivate_without_replaying() {
    let env = Env::init();
    env.add_at(
        Some("2026-01-01T00:00:00Z"),
        "job",
        "*/10 * * * *",
        &["--catch-up", "all", "--paused"],
        "true",
    );
    assert!(stderr(&env.run(&["schedule", "list"])).is_empty());
    env.ok(&["--now", "2026-01-01T01:00:00Z", "tick"]);
    assert_eq!(runs_of(&env, "job").len(), 0, "created paused");
    env.ok(&[
        "--now",
        "2026-01-01T01:05:00Z",
        "schedule",
        "edit",
        "job",
        "--active",
    ]);
    env.ok(&["--now", "2026-01-01T01:06:00Z", "tick"]);
    assert_eq!(runs_of(&env, "job").len(), 0, "00:10..01:00 not replayed");
    env.ok(&["--now", "2026-01-01T01:10:00Z", "tick"]);
    assert_eq!(runs_of(&env, "job").len(), 1);
    env.ok(&[
        "--now",
        "2026-01-01T01:12:00Z",
        "schedule",
        "edit",
        "job",
        "--paused",
    ]);
    env.ok(&["--now", "2026-01-01T02:00:00Z", "tick"]);
    assert_eq!(runs_of(&env, "job").len(), 1);
}

// ---------------------------------------------------------------------------
// when the timing changed
// ---------------------------------------------------------------------------

/// A schedule keeps when its timing (cron or zone) last changed, for `why`: set by `add`, moved
/// by an `edit` or an `apply` that changes the cron or the zone, and by nothing else. A pause, a
/// resume, a reanchor, a new command or policy, the same expression again: each moves
/// `updated_at` (checked, so each did write the schedule), never `timing_changed_at`.
#[test]
fn only_a_change_of_cron_or_zone_moves_when_the_timing_changed() {
    let env = Env::init();
    env.add_at(
        Some("2026-11-23T08:30:00Z"),
        "job",
        "0 * * * *",
        &[],
        "true",
    );
    let created = "2026-11-23T08:30:00Z";
    let stored = |updated: &str, timing: &str, after: &[&str]| {
        let row = env.sql.query_rows(
            "SELECT updated_at, timing_changed_at FROM job_definitions WHERE name = 'job'",
            &[],
        );
        assert_eq!(
            (utc(row[0][0].i64()), utc(row[0][1].i64())),
            (updated.to_string(), timing.to_string()),
            "after {after:?}"
        );
    };
    stored(created, created, &["schedule", "add"]);
    // At `now`, ARGS (which writes the schedule, moving `updated_at` to `now`); then the timing
    // changed at `timing`.
    let at = |now: &str, args: &[&str], timing: &str| {
        let mut all = vec!["--now", now];
        all.extend_from_slice(args);
        env.ok(&all);
        stored(now, timing, args);
    };
    let file = env.path("schedules.toml");
    let apply = ["schedule", "apply", file.to_str().expect("utf-8")];
    let write = |text: &str| std::fs::write(&file, text).expect("write file");
    // A tick far ahead, so that the reanchor below has a cursor to move back.
    env.tick_at("2026-11-23T12:00:05Z");
    at(
        "2026-11-23T09:00:00Z",
        &["schedule", "pause", "job"],
        created,
    );
    at(
        "2026-11-23T09:01:00Z",
        &["schedule", "resume", "job"],
        created,
    );
    let command = [
        "schedule",
        "edit",
        "job",
        "--timeout",
        "5m",
        "-q",
        "--",
        "echo",
        "hi",
    ];
    at("2026-11-23T09:02:00Z", &command, created);
    let same = ["schedule", "edit", "job", "--cron", "0 * * * *", "-q"];
    at("2026-11-23T09:03:00Z", &same, created);
    // Spaced otherwise, or spelt otherwise with the same instants, it is the same expression.
    let respaced = ["schedule", "edit", "job", "--cron", "0  *\t* * *", "-q"];
    at("2026-11-23T09:03:20Z", &respaced, created);
    let respelt = ["schedule", "edit", "job", "--cron", "@hourly", "-q"];
    at("2026-11-23T09:03:40Z", &respelt, created);
    at(
        "2026-11-23T09:04:00Z",
        &["schedule", "reanchor", "job"],
        created,
    );
    write("[job]\ncron = \"0 *  * * *\"\ncommand = \"echo other\"\n");
    at("2026-11-23T09:05:00Z", &apply, created);
    shows_timing_since(&env, created, "2026-11-23T08:30:00+00:00");

    let now = "2026-11-23T09:10:00Z";
    at(
        now,
        &["schedule", "edit", "job", "--tz", "Europe/Paris", "-q"],
        now,
    );
    shows_timing_since(&env, now, "2026-11-23T10:10:00+01:00");
    let now = "2026-11-23T09:11:00Z";
    at(
        now,
        &["schedule", "edit", "job", "--cron", "30 * * * *", "-q"],
        now,
    );
    write("[job]\ncron = \"45 * * * *\"\ntz = \"Europe/Paris\"\ncommand = \"echo other\"\n");
    let now = "2026-11-23T09:12:00Z";
    at(now, &apply, now);
}

/// `schedule show` (text and JSON) and `schedule list --json` say since when the schedule's cron
/// and zone rule, `timing` (UTC), shown in its zone as `local` by the text.
fn shows_timing_since(env: &Env, timing: &str, local: &str) {
    let shown = parse_json(&env.ok(&["schedule", "show", "job", "--json"]));
    let listed = parse_json(&env.ok(&["schedule", "list", "--json"]));
    for view in [&shown, &listed[0]] {
        assert_eq!(view["timing_changed_at"], timing, "{view:#}");
        assert_eq!(view["timing_changed_at_epoch"], epoch(timing), "{view:#}");
    }
    let text = env.ok(&["schedule", "show", "job"]);
    assert!(
        text.contains(&format!("\ntiming since: {local} (")),
        "{text}"
    );
}
