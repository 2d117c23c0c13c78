//! Damage and the smaller defects of issue 9: a damaged schedule row stops its own schedule only;
//! read-only users can read; durations are whole seconds; stored text is shown escaped; a bad
//! RUNNER_RETENTION says what it accepts; `schedule rm` does not kill a running run unasked.
//!
//! Damaged rows are forged with raw SQL, as a bad migration, a hand edit or another tool would
//! leave them. Tests that need another user run the binary as `nobody` with setpriv when they
//! run as root (permission bits do not bind root), and say so and return when they cannot.

use crate::common::{stderr, Env};

/// A cron expression that never fires during a test: runs come from `runner run`.
const NEVER: &str = "0 0 1 1 *";

fn forge(env: &Env, sql: &str) {
    env.conn()
        .execute_batch(&format!("PRAGMA ignore_check_constraints = ON; {sql}"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

// ---------------------------------------------------------------------------------------------
// stored text is shown escaped (item 9)
// ---------------------------------------------------------------------------------------------

/// `schedule show` used to print a command's escape sequences, newlines and bidi overrides raw.
#[test]
fn stored_commands_and_names_are_shown_escaped() {
    let env = Env::init();
    let command = "printf '\u{1b}[2J'\necho \u{202e}txt.exe\u{2066}";
    env.ok(&["schedule", "add", "a", "--cron", NEVER, "--", command]);
    let shown = env.ok(&["schedule", "show", "a"]);
    let line = shown
        .lines()
        .find(|l| l.starts_with("command:"))
        .expect("command line");
    assert_eq!(
        line, "command:      printf '\\x1b[2J'\\necho \\u{202e}txt.exe\\u{2066}",
        "{shown}"
    );
    for raw in ['\u{1b}', '\u{202e}', '\u{2066}'] {
        assert!(!shown.contains(raw), "{raw:?} raw in {shown:?}");
    }

    // A name forged with a bidi override and an escape is escaped wherever it is printed.
    forge(
        &env,
        "UPDATE job_definitions SET name = 'evil' || char(8238) || 'gpj' || char(27) WHERE name = 'a'",
    );
    env.ok(&["run", "evil\u{202e}gpj\u{1b}"]);
    for args in [&["schedule", "list"][..], &["history"], &["show", "1"]] {
        let out = env.ok(args);
        assert!(out.contains("evil\\u{202e}gpj\\x1b"), "{args:?}: {out}");
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{1b}'),
            "{args:?}: {out:?}"
        );
    }
    let out = env.ok(&["show", "1"]);
    assert!(out.contains("printf '\\x1b[2J'\\necho"), "{out}");

    // New names with bidi controls are refused.
    let err = env.fails(
        2,
        &[
            "schedule",
            "add",
            "a\u{202e}b",
            "--cron",
            NEVER,
            "--",
            "true",
        ],
    );
    assert!(err.contains("bidi"), "{err}");
    assert!(!err.contains('\u{202e}'), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// RUNNER_RETENTION (item 9)
// ---------------------------------------------------------------------------------------------

/// An invalid RUNNER_RETENTION used to fail every tick with humantime's "(expected number at
/// 0)". Now the one line about it names the variable, its value and what it accepts.
#[test]
fn an_invalid_runner_retention_names_the_variable_and_its_syntax() {
    let env = Env::init();
    let out = env
        .cmd()
        .env("RUNNER_RETENTION", "soon")
        .arg("tick")
        .output()
        .expect("tick");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let lines = lines_with(&err, "RUNNER_RETENTION");
    assert_eq!(lines.len(), 1, "{err}");
    for needle in ["RUNNER_RETENTION=\"soon\"", "30d", "2160h", "off"] {
        assert!(lines[0].contains(needle), "{needle}: {err}");
    }
    assert!(!err.contains("expected number"), "{err}");

    let out = env
        .cmd()
        .env("RUNNER_RETENTION", "soon")
        .args(["prune", "--dry-run"])
        .output()
        .expect("prune");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("RUNNER_RETENTION=\"soon\""),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("30d"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------------------------
// durations are whole seconds (item 9)
// ---------------------------------------------------------------------------------------------

/// `--timeout 1.5s` used to be stored as 1 s. Every duration stored in whole seconds now refuses
/// a fraction with exit 2, naming the flag.
#[test]
fn sub_second_durations_are_refused_for_every_flag_stored_in_seconds() {
    let env = Env::init();
    for (flag, value) in [
        ("--timeout", "1.5s"),
        ("--backoff-base", "2500ms"),
        ("--backoff-max", "90.5s"),
        ("--grace", "500ms"),
    ] {
        let err = env.fails(
            2,
            &[
                "schedule", "add", "x", "--cron", NEVER, flag, value, "--", "true",
            ],
        );
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(err.contains("whole seconds"), "{flag}: {err}");
    }
    assert_eq!(env.count("SELECT count(*) FROM job_definitions"), 0);
    env.ok(&[
        "schedule",
        "add",
        "x",
        "--cron",
        NEVER,
        "--timeout",
        "2s",
        "--",
        "true",
    ]);
    let err = env.fails(2, &["schedule", "edit", "x", "--timeout", "1.5s"]);
    assert!(
        err.contains("--timeout") && err.contains("whole seconds"),
        "{err}"
    );
    assert_eq!(
        env.count("SELECT timeout_secs FROM job_definitions WHERE name = 'x'"),
        2
    );
}
