//! Help that teaches: examples in every command's help, the durations and times topics, the time
//! forms every time flag accepts, and the warnings `schedule add` and `edit` give about traps.

use std::process::Command;

use crate::common::{json, stderr, stdout, Env, BIN};

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("runner");
    assert!(out.status.success(), "runner {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// The commands a help page lists under "Commands:" (not the wrapped lines of their summaries).
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn every_command_has_examples_in_its_help() {
    let commands = listed_commands(&help(&["--help"]));
    assert!(commands.len() >= 15, "{commands:?}");
    assert!(commands.contains(&"help".to_string()));
    let mut paths: Vec<Vec<String>> = commands.iter().map(|c| vec![c.clone()]).collect();
    let schedule_commands: Vec<String> = listed_commands(&help(&["schedule", "--help"]))
        .into_iter()
        .filter(|c| c != "help")
        .collect();
    assert!(schedule_commands.len() >= 10, "{schedule_commands:?}");
    paths.extend(
        schedule_commands
            .into_iter()
            .map(|c| vec!["schedule".to_string(), c]),
    );
    for path in paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let text = help(&args);
        assert!(text.contains("\nExamples:\n  "), "runner {args:?}:\n{text}");
        // `runner help COMMAND` prints the same page.
        let mut via_help = vec!["help"];
        via_help.extend(path.iter().map(String::as_str));
        assert_eq!(help(&via_help), text, "runner {via_help:?}");
    }
    assert!(help(&["--help"]).contains("runner help durations"));
}

#[test]
fn help_topics_explain_durations_and_times() {
    let durations = help(&["help", "durations"]);
    for text in ["30s", "5m", "1h30m", "2d", "--timeout", "--since 2h"] {
        assert!(durations.contains(text), "{text}: {durations}");
    }
    let times = help(&["help", "times"]);
    for text in [
        "2026-11-23T10:30",
        "'2026-11-23 10:30'",
        "10:30",
        "RFC 3339",
        "UTC",
        "Europe/Paris",
    ] {
        assert!(times.contains(text), "{text}: {times}");
    }
    // Flags point to them.
    assert!(help(&["history", "--help"]).contains("runner help times"));
    assert!(help(&["schedule", "add", "--help"]).contains("runner help durations"));
    let out = Command::new(BIN)
        .args(["help", "nonsense"])
        .output()
        .expect("runner");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("durations and times"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_shows_what_is_required() {
    let add = help(&["schedule", "add", "--help"]);
    assert!(
        add.contains("Usage: runner schedule add [OPTIONS] --cron <EXPR> <NAME>"),
        "{add}"
    );
    let env = Env::new();
    let err = env.fails(2, &["schedule", "add", "job", "--", "true"]);
    assert!(err.contains("--cron <EXPR>"), "{err}");
    let err = env.fails(2, &["schedule", "next"]);
    assert!(err.contains("--cron"), "{err}");
    // One -v: there are no levels to repeat it for.
    let verbose = help(&["--help"]);
    assert!(!verbose.contains("repeat"), "{verbose}");
    env.fails(2, &["-vv", "schedule", "list"]);
    // An overlap policy, not "a overlap policy".
    let err = env.fails(
        2,
        &[
            "schedule",
            "add",
            "j",
            "--cron",
            "* * * * *",
            "--overlap",
            "x",
            "--",
            "true",
        ],
    );
    assert!(err.contains("invalid overlap policy"), "{err}");
    assert!(!err.contains("a overlap"), "{err}");
}

/// Runs of an hourly schedule at 01:00 .. 12:00 UTC on 2026-11-23.
fn hourly_runs() -> Env {
    let env = Env::init();
    env.add_at(
        Some("2026-11-23T00:30:00Z"),
        "hourly",
        "0 * * * *",
        &["--catch-up", "all"],
        "true",
    );
    env.tick_at("2026-11-23T12:00:30Z");
    env
}

#[test]
fn since_accepts_dates_times_of_day_zones_rfc3339_and_durations() {
    let env = hourly_runs();
    let count = |since: &str| -> usize {
        let out = env.ok(&[
            "--now",
            "2026-11-23T12:30:00Z",
            "history",
            "--json",
            "--since",
            since,
        ]);
        json(&out).as_array().expect("runs").len()
    };
    assert_eq!(count("2026-11-23"), 12);
    assert_eq!(
        count("2026-11-23T10:30"),
        2,
        "10:30 UTC: the 11:00 and 12:00 runs"
    );
    assert_eq!(count("2026-11-23 10:30"), 2);
    assert_eq!(count("2026-11-23T10:30:00"), 2);
    assert_eq!(count("10:30"), 2, "today, by --now");
    assert_eq!(count("2026-11-23T10:30:00+01:00"), 3, "09:30 UTC");
    assert_eq!(count("2026-11-23T10:30:00Z"), 2);
    assert_eq!(count("2026-11-23 11:30 Europe/Paris"), 2, "10:30 UTC");
    assert_eq!(count("2h"), 2, "since 10:30, two hours before --now");
    assert_eq!(count("1d"), 12);
    // "Today" follows --now: on the 24th, 10:30 is after every run.
    let out = env.ok(&[
        "--now",
        "2026-11-24T12:00:00Z",
        "history",
        "--json",
        "--since",
        "10:30",
    ]);
    assert_eq!(json(&out).as_array().expect("runs").len(), 0);
    let err = env.fails(
        2,
        &["history", "--since", "2026-03-08 02:30 America/New_York"],
    );
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn simulate_and_now_take_the_same_forms() {
    let env = Env::new();
    let simulate = |from: &str, to: &str| -> Vec<String> {
        let out = env.ok(&[
            "--now",
            "2026-03-07",
            "schedule",
            "simulate",
            "--cron",
            "0 12 * * *",
            "--from",
            from,
            "--to",
            to,
            "--json",
        ]);
        json(&out)["instants"]
            .as_array()
            .expect("instants")
            .iter()
            .map(|i| i["at"].as_str().expect("at").to_string())
            .collect()
    };
    let two_days = ["2026-03-07T12:00:00Z", "2026-03-08T12:00:00Z"];
    assert_eq!(simulate("2026-03-07", "2026-03-09"), two_days);
    assert_eq!(simulate("2026-03-07T12:00", "2026-03-08 12:00"), two_days);
    assert_eq!(
        simulate("12:00", "2026-03-08T13:00:00+01:00"),
        two_days,
        "12:00 is today by --now; 13:00+01:00 is 12:00 UTC"
    );
    // --now takes a date, or a date and time, in UTC unless a zone follows...
    let next = |now: &str| -> String {
        let out = env.ok(&[
            "--now",
            now,
            "schedule",
            "next",
            "--cron",
            "0 12 * * *",
            "-n",
            "1",
            "--json",
        ]);
        json(&out)[0]["at"].as_str().expect("at").to_string()
    };
    assert_eq!(next("2026-03-07"), "2026-03-07T12:00:00Z");
    assert_eq!(next("2026-03-07T12:30"), "2026-03-08T12:00:00Z");
    assert_eq!(next("2026-03-07 12:30 Asia/Tokyo"), "2026-03-07T12:00:00Z");
    // ...but not a time of day alone: its date would come from the clock it replaces.
    let err = env.fails(
        2,
        &["--now", "10:30", "schedule", "next", "--cron", "0 12 * * *"],
    );
    assert!(err.contains("has no date"), "{err}");
    // ...nor one past the last year fire times are computed in: every cursor would move there.
    let err = env.fails(2, &["--now", "9999-12-31", "tick"]);
    assert!(
        err.contains("after 4999, the last year runner computes fire times in"),
        "{err}"
    );
}

/// A time followed by a mistyped zone is an unknown zone, as `--tz` says, wherever a time is
/// taken (`--now`, `history --since`, `why --at`, `simulate --from`): exit 2, not "is not a time".
#[test]
fn a_mistyped_zone_after_a_time_is_called_an_unknown_zone() {
    let env = Env::init();
    env.add("job", &[], "true");
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--now",
                "2026-11-23 10:30 Europe/Pariss",
                "schedule",
                "next",
                "--cron",
                "* * * * *",
            ],
            "Europe/Pariss",
        ),
        (
            &["history", "--since", "10:30 Europe/Pariss"],
            "Europe/Pariss",
        ),
        (&["why", "job", "--at", "10:30 Mars/X"], "Mars/X"),
        (
            &[
                "schedule",
                "simulate",
                "job",
                "--from",
                "2026-11-23 UTX",
                "--to",
                "2026-11-24",
            ],
            "UTX",
        ),
    ];
    for (args, zone) in cases {
        let err = env.fails(2, args);
        assert!(
            err.contains(&format!("unknown time zone \"{zone}\"")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("is not a time"), "{args:?}: {err}");
    }
    // A word that is no zone's shape after a time is still "not a time".
    let err = env.fails(2, &["history", "--since", "10:30 tomorrow"]);
    assert!(err.contains("nor a time"), "{err}");
}

/// `schedule add NAME ARGS`: exit 0, with its stderr.
fn add(env: &Env, args: &[&str]) -> String {
    let out = env.run(&[&["--now", "2026-11-23T12:00:00Z", "schedule", "add"], args].concat());
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

#[test]
fn add_and_edit_warn_about_traps_and_quiet_silences_them() {
    let env = Env::init();
    let cases: [(&[&str], &str); 4] = [
        (
            &["days", "--cron", "0 0 1,15 * FRI", "--", "/bin/true"],
            "runs on the 1st, the 15th and every Friday",
        ),
        (
            &[
                "dst",
                "--cron",
                "30 2 * * *",
                "--tz",
                "Europe/Berlin",
                "--",
                "/bin/true",
            ],
            "on 2027-03-28 its time does not exist",
        ),
        (
            &[
                "slow",
                "--cron",
                "*/15 * * * *",
                "--timeout",
                "1h",
                "--",
                "/bin/true",
            ],
            "the timeout (1h) is longer than the 15m between fire times",
        ),
        (
            &["relative", "--cron", "0 3 * * *", "--", "./backup.sh"],
            "relative path ./backup.sh",
        ),
    ];
    for (args, warning) in cases {
        let err = add(&env, args);
        assert!(err.contains("runner: warning: "), "{args:?}: {err}");
        assert!(err.contains(warning), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one warning: {err}");
        env.ok(&["schedule", "rm", args[0]]);
        for quiet in ["--quiet", "-q"] {
            let err = add(&env, &[&args[..1], &[quiet], &args[1..]].concat());
            assert_eq!(err, "", "{args:?} {quiet}");
            env.ok(&["schedule", "rm", args[0]]);
        }
    }
    // An ordinary schedule warns about nothing; with allow, a long timeout skips nothing.
    assert_eq!(
        add(
            &env,
            &[
                "plain",
                "--cron",
                "0 4 * * *",
                "--tz",
                "Europe/Berlin",
                "--",
                "true"
            ]
        ),
        ""
    );
    let err = add(
        &env,
        &[
            "many",
            "--cron",
            "*/15 * * * *",
            "--timeout",
            "1h",
            "--overlap",
            "allow",
            "--",
            "true",
        ],
    );
    assert_eq!(err, "");

    // edit warns about what it changed, and --quiet silences it.
    let edit = |args: &[&str]| -> String {
        let out = env.run(
            &[
                &["--now", "2026-11-23T12:00:00Z", "schedule", "edit", "plain"],
                args,
            ]
            .concat(),
        );
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stderr(&out)
    };
    let err = edit(&["--cron", "0 0 1 * MON"]);
    assert!(err.contains("cron's OR rule"), "{err}");
    assert_eq!(
        edit(&["--max-attempts", "5"]),
        "",
        "nothing it changed is a trap"
    );
    let err = edit(&["--", "bin/job"]);
    assert!(err.contains("relative path bin/job"), "{err}");
    assert_eq!(edit(&["--workdir", "/", "--", "bin/job"]), "");
    let err = edit(&["--cron", "30 1 * * *", "--tz", "America/New_York"]);
    assert!(
        err.contains("on 2027-11-07 its time happens twice"),
        "{err}"
    );
    assert_eq!(
        edit(&["--cron", "30 1 * * *", "--tz", "America/New_York", "-q"]),
        ""
    );
    let err = edit(&["--cron", "*/5 * * * *", "--timeout", "10m"]);
    assert!(err.contains("longer than the 5m between"), "{err}");
}

/// The flags an `--help` page lists under "Options:", each form apart (`-q`, `--quiet`).
fn listed_flags(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .filter(|l| l.starts_with("  -") || l.starts_with("      --"))
        .flat_map(|l| l.split([' ', ',']).filter(|w| w.starts_with('-')))
        .map(str::to_string)
        .collect()
}

/// The code spans of the first column of a table in `section` of docs/reference.md, with the
/// table's `\|` unescaped.
fn first_column_spans(reference: &str, section: &str) -> Vec<String> {
    reference
        .lines()
        .skip_while(|l| *l != section)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| `"))
        .flat_map(|row| {
            let cell = row[2..].split(" | ").next().unwrap_or_default();
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(|span| span.replace("\\|", "|"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The flags a synopsis like `show RUN_ID [--tail N | --no-output]` names (not `--` itself).
fn flags_in(synopsis: &str) -> Vec<String> {
    synopsis
        .split(|c: char| c.is_whitespace() || "[]|()".contains(c))
        .filter(|w| w.starts_with('-') && *w != "--")
        .map(str::to_string)
        .collect()
}

/// docs/reference.md calls itself the contract for commands and flags: it names every command
/// `runner --help` lists (and every `schedule` command) and, for each, every flag its `--help`
/// lists (in its row of the commands table, the settings table for `schedule add` and `edit`, or
/// the global flags); and every flag it names is one the command takes.
#[test]
fn the_reference_names_every_command_and_flag_the_binary_takes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference.md");
    let reference = std::fs::read_to_string(&path).expect("docs/reference.md");
    let global = first_column_spans(&reference, "## Global flags");
    let settings = first_column_spans(&reference, "## Commands")
        .into_iter()
        .filter(|span| span.starts_with('-'))
        .collect::<Vec<_>>();
    let rows = first_column_spans(&reference, "## Commands");
    let global_flags: Vec<String> = global.iter().flat_map(|s| flags_in(s)).collect();
    assert!(global_flags.contains(&"--db".to_string()), "{global:?}");
    assert!(
        settings.iter().any(|s| s.starts_with("--overlap")),
        "{settings:?}"
    );

    // Every command as typed; one with commands of its own (`schedule`) by those.
    let mut paths: Vec<Vec<String>> = Vec::new();
    for command in listed_commands(&help(&["--help"])) {
        let subcommands: Vec<String> = listed_commands(&help(&[&command, "--help"]))
            .into_iter()
            .filter(|c| c != "help")
            .collect();
        match subcommands.is_empty() {
            true => paths.push(vec![command]),
            false => paths.extend(subcommands.into_iter().map(|c| vec![command.clone(), c])),
        }
    }
    assert!(paths.len() > 25, "{paths:?}");
    assert!(paths.contains(&vec!["schedule".to_string(), "simulate".to_string()]));
    let mut missing = Vec::new();
    for path in &paths {
        let name = path.join(" ");
        // The synopses of this command: `schedule show ...` is not `show`'s.
        let synopses: Vec<&String> = rows
            .iter()
            .filter(|span| {
                let longest = paths
                    .iter()
                    .map(|p| p.join(" "))
                    .filter(|p| *span == p || span.starts_with(&format!("{p} ")))
                    .max_by_key(String::len);
                longest.as_deref() == Some(name.as_str())
            })
            .collect();
        if synopses.is_empty() {
            missing.push(format!("the command `{name}`"));
            continue;
        }
        let mut documented: Vec<String> = synopses.iter().flat_map(|s| flags_in(s)).collect();
        documented.extend(global_flags.iter().cloned());
        if name == "schedule add" || name == "schedule edit" {
            documented.extend(settings.iter().flat_map(|s| flags_in(s)));
        }
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let taken = listed_flags(&help(&args));
        assert!(
            taken.contains(&"--db".to_string()),
            "runner {args:?}: {taken:?}"
        );
        for flag in &taken {
            if !documented.contains(flag) {
                missing.push(format!("`{name} {flag}`"));
            }
        }
        for flag in synopses.iter().flat_map(|s| flags_in(s)) {
            assert!(
                taken.contains(&flag),
                "docs/reference.md gives `{name}` a flag {flag} that `runner {name} --help` does \
                 not list"
            );
        }
    }
    for flag in settings.iter().flat_map(|s| flags_in(s)) {
        let takes = |command: &str| listed_flags(&help(&["schedule", command, "--help"]));
        assert!(
            takes("add").contains(&flag) || takes("edit").contains(&flag),
            "docs/reference.md's setting {flag} is not a flag of `schedule add` or `edit`"
        );
    }
    assert!(
        missing.is_empty(),
        "docs/reference.md does not name: {}",
        missing.join(", ")
    );
}
