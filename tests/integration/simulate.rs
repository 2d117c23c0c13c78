//! `runner schedule simulate`: fire times in a window, the DST rule behind any of them, and what
//! catch-up would do with them; checked against what a real tick then does.

use crate::common::{duration_secs, epoch, json, stderr, stdout, Env};
use serde_json::Value;

fn instants(report: &Value) -> &Vec<Value> {
    report["instants"].as_array().expect("instants")
}

fn field<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    instants(report).iter().map(|i| &i[name]).collect()
}

#[test]
fn an_expression_lists_its_fire_times_and_names_the_dst_rule_behind_each() {
    let env = Env::new();
    // New York springs forward on 2026-03-08: 02:30 does not exist that day.
    let report = json(&env.ok(&[
        "schedule",
        "simulate",
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2026-03-07T00:00:00Z",
        "--to",
        "2026-03-10T00:00:00Z",
        "--json",
    ]));
    assert_eq!(
        field(&report, "at"),
        [
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z"
        ]
    );
    assert_eq!(
        field(&report, "local"),
        [
            "2026-03-07T02:30:00-05:00",
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00"
        ]
    );
    let dst = field(&report, "dst");
    assert!(dst[0].is_null() && dst[2].is_null(), "{report}");
    assert_eq!(dst[1]["rule"], "gap");
    assert!(
        dst[1]["note"].as_str().expect("note").contains("02:30"),
        "{report}"
    );
    // An expression has no catch-up policy: nothing is decided.
    assert!(field(&report, "decision").iter().all(|d| d.is_null()));
    assert!(report["schedule"].is_null() && report["catch_up"].is_null());

    // Falling back on 2026-11-01, 01:00-02:00 comes twice: a wildcard job runs in both passes.
    let text = env.ok(&[
        "schedule",
        "simulate",
        "--cron",
        "30 * * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2026-11-01T05:00:00Z",
        "--to",
        "2026-11-01T07:00:00Z",
    ]);
    assert!(text.contains("2 fire times"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("2026-11-01T01:30:00-04:00")
                && l.contains("repeated hour: first pass")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("2026-11-01T01:30:00-05:00")
                && l.contains("repeated hour: second pass")),
        "{text}"
    );
    // A fixed-time job runs in the first pass only.
    let report = json(&env.ok(&[
        "schedule",
        "simulate",
        "--cron",
        "30 1 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2026-11-01T00:00:00Z",
        "--to",
        "2026-11-02T00:00:00Z",
        "--json",
    ]));
    assert_eq!(field(&report, "at"), ["2026-11-01T05:30:00Z"]);
    assert_eq!(instants(&report)[0]["dst"]["rule"], "repeated_first");
}

/// What simulate says the first tick after the window runs and skips is what that tick does. The
/// window starts before the schedule was added: those instants it never materialises.
#[test]
fn catch_up_decisions_match_what_the_tick_then_does() {
    let added = "2026-07-01T00:00:30Z";
    let from = "2026-06-30T22:00:00Z";
    let until = "2026-07-01T06:10:00Z";
    for (policy, grace, runs) in [("latest", "5m", 1), ("all", "5m", 6), ("none", "2h", 2)] {
        let env = Env::init();
        env.add_at(
            Some(added),
            policy,
            "0 * * * *",
            &["--catch-up", policy, "--grace", grace],
            "true",
        );
        let report = json(&env.ok(&[
            "schedule", "simulate", policy, "--from", from, "--to", until, "--json",
        ]));
        assert_eq!(report["schedule"], policy);
        assert_eq!(report["catch_up"], policy);
        // 22:00, 23:00 and 00:00 came before the schedule was added (its cursor is 00:00:30).
        let (before, after) = instants(&report).split_at(3);
        for i in before {
            assert!(i["decision"].is_null(), "{i}");
            let reason = i["reason"].as_str().expect("reason");
            assert!(reason.contains("at or before its cursor"), "{i}");
        }
        let decided: Vec<(i64, String)> = after
            .iter()
            .map(|i| {
                (
                    i["at_epoch"].as_i64().expect("epoch"),
                    i["decision"].as_str().expect("decision").to_string(),
                )
            })
            .collect();
        assert_eq!(decided.len(), 6, "01:00 to 06:00: {report}");
        assert_eq!(
            decided.iter().filter(|(_, d)| d == "run").count(),
            runs,
            "{policy}: {report}"
        );
        for i in after {
            assert_eq!(i["decision"] == "skip", i["reason"].is_string(), "{i}");
        }
        let text = env.ok(&[
            "schedule", "simulate", policy, "--from", from, "--to", until,
        ]);
        assert!(
            text.contains("3 instants at or before the schedule's cursor it never materialises"),
            "{text}"
        );
        assert_eq!(
            env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
            0,
            "simulate writes nothing"
        );

        env.tick_at(until);
        let actual: Vec<(i64, String)> = env
            .sql
            .query_strings(
                "SELECT scheduled_for || ' ' || status FROM job_runs ORDER BY scheduled_for",
                &[],
            )
            .iter()
            .map(|row| {
                let (at, status) = row.split_once(' ').expect("row");
                let decision = if status == "skipped" { "skip" } else { "run" };
                (at.parse().expect("epoch"), decision.to_string())
            })
            .collect();
        assert_eq!(actual, decided, "{policy}");
    }
}

#[test]
fn a_paused_schedule_decides_nothing_and_bad_windows_are_refused() {
    let env = Env::init();
    env.add_at(
        Some("2026-07-01T00:00:00Z"),
        "held",
        "0 * * * *",
        &["--paused"],
        "true",
    );
    let window = [
        "--from",
        "2026-07-01T00:00:00Z",
        "--to",
        "2026-07-01T03:00:00Z",
    ];
    let mut args = vec!["schedule", "simulate", "held"];
    args.extend(window);
    let text = env.ok(&args);
    assert!(text.contains("paused"), "{text}");
    args.push("--json");
    let report = json(&env.ok(&args));
    assert_eq!(report["paused"], true);
    assert_eq!(instants(&report).len(), 4, "00:00 to 03:00 inclusive");
    assert!(field(&report, "decision").iter().all(|d| d.is_null()));

    let mut unknown = vec!["schedule", "simulate", "nope"];
    unknown.extend(window);
    env.fails(3, &unknown);
    let err = env.fails(
        2,
        &[
            "schedule",
            "simulate",
            "--cron",
            "@hourly",
            "--from",
            "2026-07-02T00:00:00Z",
            "--to",
            "2026-07-01T00:00:00Z",
        ],
    );
    assert!(err.contains("--to") && err.contains("--from"), "{err}");
    let err = env.fails(
        2,
        &[
            "schedule",
            "simulate",
            "--cron",
            "* * * * *",
            "--from",
            "2020-01-01T00:00:00Z",
            "--to",
            "2030-01-01T00:00:00Z",
        ],
    );
    assert!(err.contains("shorter"), "{err}");
}

/// Fire times are computed up to the year 5000 (the cron crate's last): `simulate` and `next`
/// say so rather than show a window cut short without a word.
#[test]
fn previews_say_where_fire_times_stop() {
    let env = Env::new();
    let out = env.run(&[
        "schedule",
        "simulate",
        "--cron",
        "@yearly",
        "--from",
        "4990-01-01",
        "--to",
        "5010-01-01",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fire times are computed up to the year 5000"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("4999-01-01T00:00:00Z"));
    assert!(!stdout(&out).contains("5001-"));

    let out = env.run(&[
        "--now",
        "4997-01-01",
        "schedule",
        "next",
        "--cron",
        "@yearly",
        "-n",
        "5",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "up to the year 5000 (5000-01-01T00:00:00+00:00 in UTC, where runner stops computing \
             fire times)"
        ),
        "{}",
        stderr(&out)
    );
}

/// Fire times stop at the start of the year 5000 in the expression's zone, not in UTC: a window
/// past it there says so even when `--to` is in 4999 in UTC (Tokyo reaches 5000 at
/// 4999-12-31T15:00:00Z), and one that ends in 5000 in UTC but in 4999 in its zone (New York)
/// shows every fire time and says nothing of a cut.
#[test]
fn previews_say_where_fire_times_stop_in_the_schedules_zone() {
    let env = Env::new();
    let simulate = |tz: &str, from: &str, to: &str| {
        env.run(&[
            "schedule",
            "simulate",
            "--cron",
            "0 * * * *",
            "--tz",
            tz,
            "--from",
            from,
            "--to",
            to,
            "--json",
        ])
    };
    let out = simulate("Asia/Tokyo", "4999-12-31T10:00:00Z", "4999-12-31T20:00:00Z");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fire times are computed up to the year 5000"),
        "a window cut short without a word: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("5000-01-01T00:00:00+09:00"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        field(&json(&stdout(&out)), "at").last().copied(),
        Some(&Value::from("4999-12-31T14:00:00Z"))
    );

    let out = simulate(
        "America/New_York",
        "4999-12-31T20:00 America/New_York",
        "4999-12-31T23:59 America/New_York",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "nothing of the window was cut");
    assert_eq!(instants(&json(&stdout(&out))).len(), 4);
}

/// `schedule next` says where fire times stop as `simulate` does, in the schedule's zone (one
/// function decides for both). Near the end of 4999 the note names the start of the year 5000
/// there. Whether the search (about 401 years ahead) reached it is judged where the search ends
/// in the zone: from 4598-03-02T20:00:00Z it reaches the year 5000 in Tokyo (local 4598-03-03
/// plus 146,766 days is 5000-01-01), not in New York. It was judged by now's year in UTC (4598:
/// "within about 400 years" for both).
#[test]
fn next_says_where_fire_times_stop_in_the_schedules_zone() {
    let env = Env::new();
    let next = |now: &str, cron: &str, tz: &str, count: &str| {
        env.run(&[
            "--now", now, "schedule", "next", "--cron", cron, "--tz", tz, "-n", count,
        ])
    };
    let stops =
        |at: &str| format!("up to the year 5000 ({at}, where runner stops computing fire times)");

    for (now, tz, last, stop) in [
        (
            "4999-12-31T10:00:00Z",
            "Asia/Tokyo",
            "4999-12-31T23:00:00+09:00",
            "5000-01-01T00:00:00+09:00 in Asia/Tokyo",
        ),
        (
            "4999-12-31T18:00 America/New_York",
            "America/New_York",
            "4999-12-31T23:00:00-05:00",
            "5000-01-01T00:00:00-05:00 in America/New_York",
        ),
    ] {
        let out = next(now, "0 * * * *", tz, "24");
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains(last), "{tz}: {}", stdout(&out));
        assert!(
            stderr(&out).contains(&stops(stop)),
            "{tz}: {}",
            stderr(&out)
        );
    }

    // 29 February: 97 times from March 4598 to the end of 4999, fewer than asked.
    let out = next("4598-03-02T20:00:00Z", "0 0 29 2 *", "Asia/Tokyo", "200");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "runner: note: only 97 fire times {}, fewer than the 200 asked for\n",
            stops("5000-01-01T00:00:00+09:00 in Asia/Tokyo")
        )
    );
    let out = next(
        "4598-03-02T20:00:00Z",
        "0 0 29 2 *",
        "America/New_York",
        "200",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "runner: note: only 97 fire times within about 400 years ahead (as far as it looks), \
         fewer than the 200 asked for\n"
    );
}

/// The most fire times a simulation lists is 200,000: a window of exactly that many is shown,
/// one more is refused (exit 2), naming the limit as the README does.
#[test]
fn a_window_of_200000_fire_times_is_shown_and_one_more_refused() {
    let env = Env::new();
    let simulate = |to: &str| {
        env.run(&[
            "schedule",
            "simulate",
            "--cron",
            "* * * * *",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            to,
        ])
    };
    // 200,000 minutes, both ends included.
    let out = simulate("2026-05-19T21:19:00Z");
    assert!(out.status.success(), "{}", stderr(&out));
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert!(first.ends_with(": 200,000 fire times"), "{first}");
    assert!(stdout(&out).contains("2026-05-19T21:19:00Z"));

    let out = simulate("2026-05-19T21:20:00Z");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("the window holds more than 200,000 fire times; give a shorter one"),
        "{}",
        stderr(&out)
    );
}

/// With `--catch-up none`, an instant exactly `--grace` before `--to` is missed: a tick at `--to`
/// reads its clock a moment after it, so it skips that instant, and simulate says so. With a
/// grace of 0s every instant is missed, the one at `--to` itself included.
#[test]
fn an_instant_exactly_grace_before_the_end_is_missed_as_the_tick_misses_it() {
    for (grace, from, until, missed) in [
        (
            "0s",
            "2026-05-01T10:05:00Z",
            "2026-05-01T10:10:00Z",
            "missed by 1s (grace 0s)",
        ),
        (
            "5m",
            "2026-05-01T10:15:00Z",
            "2026-05-01T10:25:00Z",
            "missed by 5m1s (grace 5m)",
        ),
    ] {
        let env = Env::init();
        env.add_at(
            Some("2026-05-01T10:00:00Z"),
            "edge",
            "*/10 * * * *",
            &["-q", "--catch-up", "none", "--grace", grace],
            "true",
        );
        let report = json(&env.ok(&[
            "schedule", "simulate", "edge", "--from", from, "--to", until, "--json",
        ]));
        let edge = instants(&report).last().expect("an instant");
        assert_eq!(
            edge["at_epoch"].as_i64(),
            Some(epoch(until) - duration_secs(grace)),
            "{report}"
        );
        assert_eq!(edge["decision"], "skip", "grace {grace}: {report}");
        assert_eq!(edge["reason"], missed, "grace {grace}: {report}");
        let text = env.ok(&[
            "schedule", "simulate", "edge", "--from", from, "--to", until,
        ]);
        assert!(text.contains("runs 0 and skips"), "{text}");

        env.tick_at(until);
        let recorded = env.sql.query_strings(
            "SELECT status || ' ' || skip_reason FROM job_runs WHERE scheduled_for = $1",
            &[&edge["at_epoch"].as_i64().expect("epoch")],
        );
        assert_eq!(recorded.len(), 1, "grace {grace}: {recorded:?}");
        assert!(
            recorded[0].starts_with("skipped missed by "),
            "grace {grace}: {recorded:?}"
        );
    }
}
