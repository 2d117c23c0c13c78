//! Bad input: every invalid name, expression, number, duration or flag exits 2 with a message and
//! writes nothing.

use crate::common::{stderr, Env};

// ---------------------------------------------------------------------------------------------
// bad input
// ---------------------------------------------------------------------------------------------

/// Every invalid input exits 2 with a message and writes nothing.
#[test]
fn bad_input_is_exit_2_with_a_message_and_nothing_written() {
    let env = Env::init();
    env.add("x", &[], "true");
    env.ok(&["tick"]);
    let long_name = "n".repeat(120 * 1024); // near the kernel's 128 KiB limit for one argument
    let add_named = |name: &str| -> Vec<String> {
        ["schedule", "add", name, "--cron", "@daily", "--", "true"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let add_with = |flags: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["schedule", "add", "y", "--cron", "@daily"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(flags.iter().map(|s| s.to_string()));
        args.extend(["--".to_string(), "true".to_string()]);
        args
    };
    let words = |args: &[&str]| -> Vec<String> { args.iter().map(|s| s.to_string()).collect() };
    let mut cases: Vec<Vec<String>> = vec![
        // names
        add_named(""),
        add_named(&long_name),
        add_named("a\u{1}b"),
        add_named("a\nb"),
        add_named("a\tb"),
        add_named("\u{1b}[2J"),
        add_named("x'); DROP TABLE job_runs;--"),
        add_named("-x"),
        add_named("x"), // taken
        // cron expressions
        words(&["schedule", "add", "y", "--cron", "", "--", "true"]),
        words(&["schedule", "add", "y", "--", "true"]), // no --cron
        words(&["schedule", "add", "y", "--cron", "@daily"]), // no command
        words(&["schedule", "add", "y", "--cron", "@daily", "--", "   "]),
        // numbers and durations
        add_with(&["--max-attempts", "-1"]),
        add_with(&["--max-attempts", "0"]),
        add_with(&["--max-attempts", "1001"]),
        add_with(&["--max-attempts", "99999999999"]),
        add_with(&["--max-attempts", "lots"]),
        add_with(&["--timeout", "0s"]),
        add_with(&["--timeout", "-1s"]),
        add_with(&["--timeout", "99999999999h"]),
        add_with(&["--timeout", "5 parsecs"]),
        add_with(&["--timeout", ""]),
        add_with(&["--backoff-base", "2h", "--backoff-max", "1h"]),
        add_with(&["--grace", "soon"]),
        add_with(&["--overlap", "sometimes"]),
        add_with(&["--catch-up", "most"]),
        add_with(&["--workdir", "/no/such/dir"]),
        words(&["schedule", "edit", "x"]), // nothing to change
        words(&["schedule", "edit", "x", "--max-attempts", "0"]),
        words(&["schedule", "edit", "x", "--cron", "61 * * * *"]),
        words(&["schedule", "next", "--cron", "* * * * *", "-n", "0"]),
        words(&["schedule", "next", "--cron", "* * * * *", "-n", "-1"]),
        words(&[
            "schedule",
            "next",
            "--cron",
            "* * * * *",
            "-n",
            "99999999999",
        ]),
        // An empty --db (a script's unset variable) is not the default database.
        words(&[
            "--db", "", "schedule", "add", "z", "--cron", "@daily", "--", "true",
        ]),
        words(&["--db", "", "init"]),
        // A pause longer than any duration setting (its end printed as 1970 once): refused.
        words(&["schedule", "pause", "x", "--for", "100000000d"]),
        words(&["schedule", "pause", "x", "--for", "4018d"]),
        words(&["tick", "--concurrency", "0"]),
        words(&["tick", "--concurrency", "-1"]),
        words(&["tick", "--batch", "0"]),
        words(&["tick", "--lease", "1s"]),
        words(&["tick", "--lease", "forever"]),
        words(&["tick", "--max-tick", "-5s"]),
        words(&["--now", "yesterday", "tick"]),
        words(&["--now", "2026-13-01T00:00:00Z", "tick"]),
        words(&["run"]),
        words(&["frobnicate"]),
    ];
    for cron in [
        "* * * *",
        "* * * * * *",
        "61 * * * *",
        "0/10 * * * *",
        "*/0 * * * *",
        "@reboot",
        "0 0 30 2 *",
        "0 0 L * *",
        "1,,2 * * * *",
        "0 0 * * MONDAY",
        "0 0 * JANUARY *",
    ] {
        cases.push(words(&[
            "schedule", "add", "y", "--cron", cron, "--", "true",
        ]));
    }
    for zone in [
        "Mars/Olympus_Mons",
        "UTC+99",
        "UTC'; DROP TABLE job_runs;--",
        "",
    ] {
        cases.push(add_with(&["--tz", zone]));
    }
    let before = env.sql.snapshot();
    for args in &cases {
        let out = env.cmd().args(args).output().expect("spawn");
        let shown: Vec<String> = args
            .iter()
            .map(|a| {
                if a.len() > 60 {
                    format!("<{} bytes>", a.len())
                } else {
                    a.clone()
                }
            })
            .collect();
        assert_eq!(out.status.code(), Some(2), "{shown:?}: {}", stderr(&out));
        assert!(stderr(&out).trim().len() > 10, "{shown:?}: no message");
        assert!(
            !stderr(&out).contains("panicked"),
            "{shown:?}: {}",
            stderr(&out)
        );
        assert_eq!(
            env.sql.snapshot(),
            before,
            "{shown:?} wrote to the database"
        );
    }
    // Nothing created either, when the database does not exist yet.
    let fresh = Env::new();
    let taken = add_named("x"); // valid where no schedule x exists
    for args in cases
        .iter()
        .filter(|a| a.first().is_some_and(|w| w == "schedule") && **a != taken)
    {
        let out = fresh.cmd().args(args).output().expect("spawn");
        assert_ne!(out.status.code(), Some(0), "{:?}", &args[..3]);
        assert!(
            !fresh.sql.created(),
            "{:?} created the database",
            &args[..3]
        );
    }
}

/// A huge lease must be refused, not wrapped: `--lease 18446744073709551615s` became a lease of
/// -1 s, so the next tick "recovered" a live run and killed its job.
#[test]
fn huge_lease_is_refused() {
    let env = Env::init();
    for lease in [
        "18446744073709551615s",
        "9223372036854775807s",
        "99999999999h",
    ] {
        let err = env.fails(2, &["tick", "--lease", lease]);
        assert!(err.contains("--lease"), "{err}");
    }
}

/// humantime also reads months (`M`, `month`) and years (`y`, `yr`, `year`) as 30.44 and 365.25
/// days: `--timeout 10M`, meant as ten minutes, was 304 days. Every duration, wherever it is
/// given, refuses them (exit 2, saying to write days) and writes nothing.
#[test]
fn month_and_year_units_are_refused_wherever_a_duration_is_taken() {
    let env = Env::init();
    env.add("x", &[], "true");
    let toml = env.path("schedules.toml");
    std::fs::write(
        &toml,
        "[y]\ncron = \"@daily\"\ncommand = \"true\"\ntimeout = \"10M\"\n",
    )
    .expect("write schedules.toml");
    let add = |flag: &str, value: &str| -> Vec<String> {
        [
            "schedule", "add", "y", "--cron", "@daily", flag, value, "--", "true",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let words = |args: &[&str]| -> Vec<String> { args.iter().map(|s| s.to_string()).collect() };
    let cases: Vec<Vec<String>> = vec![
        add("--timeout", "10M"),
        add("--grace", "5M"),
        add("--backoff-base", "1month"),
        add("--backoff-max", "1y"),
        words(&["schedule", "edit", "x", "--timeout", "2 months"]),
        words(&["schedule", "pause", "x", "--for", "1year"]),
        words(&["tick", "--lease", "1M"]),
        words(&["tick", "--max-tick", "1M"]),
        words(&["prune", "--older-than", "1y"]),
        words(&["status", "--check", "--max-tick-age", "1M"]),
        words(&["status", "--check", "--dead-window", "1yr"]),
        words(&["status", "--check", "--max-due-lag", "2 years"]),
        words(&["history", "--since", "1y"]),
        words(&["schedule", "apply", toml.to_str().expect("utf-8")]),
    ];
    let before = env.sql.snapshot();
    let check = |args: &[String], out: std::process::Output| {
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("write days"), "{args:?}: {err}");
        assert_eq!(env.sql.snapshot(), before, "{args:?} wrote to the database");
    };
    for args in &cases {
        check(args, env.cmd().args(args).output().expect("spawn"));
    }
    let prune = words(&["prune"]);
    let out = env
        .cmd()
        .args(&prune)
        .env("RUNNER_RETENTION", "1y")
        .output()
        .expect("spawn");
    check(&prune, out);
}

/// An unknown macro followed by more fields (`@every 5m`, as other cron tools write it) is said to
/// be no known macro, as the macro alone is; it was told to be the whole expression, as if
/// `@every` alone were one.
#[test]
fn an_unknown_macro_followed_by_fields_is_not_a_known_macro() {
    let env = Env::init();
    for args in [
        &["schedule", "next", "--cron", "@every 5m"][..],
        &["schedule", "add", "y", "--cron", "@every 5m", "--", "true"],
    ] {
        let err = env.fails(2, args);
        assert!(
            err.contains(
                "invalid cron expression \"@every 5m\": \"@every\" is not a known macro; use one \
                 of @yearly"
            ),
            "{args:?}: {err}"
        );
        assert!(!err.contains("whole expression"), "{args:?}: {err}");
    }
    // A known macro with more fields is still told to stand alone.
    let err = env.fails(2, &["schedule", "next", "--cron", "@daily 5"]);
    assert!(
        err.contains("the macro \"@daily\" must be the whole expression"),
        "{err}"
    );
}

/// A missing argument's usage line names what is missing, not `--db`: RUNNER_DB set (as every
/// test's command has it) is not a flag typed. clap took it for one, and `runner cancel` said
/// `Usage: runner cancel --db <PATH|URL> <RUN_ID|--schedule <NAME>>`.
#[test]
fn a_usage_line_does_not_name_the_db_flag_runner_db_set() {
    let env = Env::new();
    for (args, usage) in [
        (
            &["cancel"][..],
            "Usage: runner cancel <RUN_ID|--schedule <NAME>>",
        ),
        (&["show"], "Usage: runner show <RUN_ID>"),
        (&["run"], "Usage: runner run <NAME>"),
        (
            &["schedule", "add", "x"],
            "Usage: runner schedule add --cron <EXPR> <NAME> [-- <COMMAND>...]",
        ),
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(2), "runner {args:?}");
        let message = stderr(&out);
        assert!(
            message.lines().any(|line| line == usage),
            "runner {args:?}: {message}"
        );
        assert!(!message.contains("--db"), "runner {args:?}: {message}");
    }
}
