//! `runner schedule apply` and `export`: schedules as code, against the real binary.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{forge_running, json, sh_quote, stderr, stdout, wait_until, Backend, Env};

const T0: &str = "2026-11-23T10:00:30Z";
const LONG: Duration = Duration::from_secs(120);

fn write(env: &Env, name: &str, text: &str) -> PathBuf {
    let path = env.path(name);
    std::fs::write(&path, text).expect("write file");
    path
}

fn apply(env: &Env, file: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["schedule", "apply", file.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    env.run(&args)
}

const FILE: &str = r#"
[backup]
cron = "30 2 * * *"
tz = "Europe/Berlin"
command = ["/usr/local/bin/backup", "--label", "nightly run"]
timeout = "2h"

[heartbeat]
cron = "* * * * *"
command = "echo alive"

["reports.daily"]
cron = "0 9 * * MON-FRI"
command = "./report.sh > out.txt"
max_attempts = 5
backoff_base = "1m"
paused = true
"#;

/// Every schedule's settings as `schedule list --json` reports them, by name.
fn listed(env: &Env) -> String {
    let mut out = env.ok(&["schedule", "list", "--json"]);
    // Times move on between two listings; the settings do not.
    out.retain(|c| c != '\r');
    let value: serde_json::Value = serde_json::from_str(&out).expect("json");
    let mut rows: Vec<String> = value
        .as_array()
        .expect("array")
        .iter()
        .map(|s| {
            format!(
                "{} {} {} {} {} {} {} {} {} {} {}",
                s["name"],
                s["cron"],
                s["timezone"],
                s["command"],
                s["workdir"],
                s["state"],
                s["max_attempts"],
                s["timeout_secs"],
                s["backoff_base_secs"],
                s["backoff_max_secs"],
                s["grace_secs"]
            )
        })
        .collect();
    rows.sort();
    rows.join("\n")
}

#[test]
fn apply_creates_then_is_idempotent() {
    let env = Env::new(); // apply creates the database, as `schedule add` does
    let file = write(&env, "schedules.toml", FILE);
    let out = apply(&env, &file, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("+ backup\n+ heartbeat\n+ reports.daily\n")
            && text.contains("applied ")
            && text.contains("3 added, 0 changed, 0 removed, 0 unchanged"),
        "{text}"
    );
    let show = env.ok(&["schedule", "show", "backup"]);
    assert!(
        show.contains("/usr/local/bin/backup --label 'nightly run'"),
        "{show}"
    );
    assert!(
        show.contains("Europe/Berlin") && show.contains("timeout 2h"),
        "{show}"
    );
    // Defaults of `schedule add` for what the file leaves out.
    assert!(
        show.contains("3 max") && show.contains("30s doubling, at most 1h"),
        "{show}"
    );
    assert!(env
        .ok(&["schedule", "show", "reports.daily"])
        .contains("state:        paused"));

    let before = listed(&env);
    let revisions = env.sql.query_strings(
        "SELECT name || ':' || revision || ':' || updated_at FROM job_definitions ORDER BY name",
        &[],
    );
    let again = env.ok(&["schedule", "apply", file.to_str().expect("utf-8")]);
    assert!(
        again.contains("= backup\n= heartbeat\n= reports.daily\n")
            && again.contains("no changes: the database already matches"),
        "{again}"
    );
    assert_eq!(listed(&env), before);
    assert_eq!(
        env.sql.query_strings("SELECT name || ':' || revision || ':' || updated_at FROM job_definitions ORDER BY name", &[]),
        revisions,
        "an unchanged schedule is not rewritten"
    );
}

#[test]
fn apply_changes_what_differs_from_the_next_fire_time() {
    let env = Env::init();
    let file = write(&env, "schedules.toml", FILE);
    env.ok(&[
        "--now",
        T0,
        "schedule",
        "apply",
        file.to_str().expect("utf-8"),
    ]);
    // Five minutes later, heartbeat's command and backup's timeout change.
    let changed = FILE
        .replace("timeout = \"2h\"", "timeout = \"3h\"")
        .replace("command = \"echo alive\"", "command = \"echo still alive\"");
    let file = write(&env, "schedules.toml", &changed);
    let out = env.ok(&[
        "--now",
        "2026-11-23T10:05:30Z",
        "schedule",
        "apply",
        file.to_str().expect("utf-8"),
    ]);
    assert!(
        out.contains("~ backup (timeout: 2h → 3h)\n")
            && out.contains("~ heartbeat (command: echo alive → echo still alive)\n")
            && out.contains("= reports.daily\n")
            && out.contains("0 added, 2 changed, 0 removed, 1 unchanged"),
        "{out}"
    );
    // The instants that came due under the old settings were materialised first (catch-up
    // latest: the newest pending, the others skipped), as `schedule edit` does.
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id WHERE d.name = 'heartbeat'", &[]),
        5
    );
    assert_eq!(
        env.sql.query_strings(
            "SELECT command FROM job_definitions WHERE name = 'heartbeat'",
            &[]
        ),
        ["echo still alive"]
    );
    // Its next instant is after the apply: none is materialised twice.
    let next = env.ok(&[
        "--now",
        "2026-11-23T10:05:30Z",
        "schedule",
        "next",
        "heartbeat",
        "-n",
        "1",
    ]);
    assert_eq!(next.trim(), "2026-11-23T10:06:00+00:00");
}

#[test]
fn prune_removes_what_the_file_does_not_name_and_refuses_a_running_run() {
    let env = Env::init();
    env.add_at(None, "by-hand", "@daily", &[], "true");
    let file = write(&env, "schedules.toml", FILE);
    let out = env.ok(&["schedule", "apply", file.to_str().expect("utf-8")]);
    assert!(
        out.contains("1 schedule(s) not in the file left alone (--prune removes them)"),
        "{out}"
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_definitions WHERE name = 'by-hand'",
            &[]
        ),
        1
    );

    // A running run of it (forged): --prune refuses, and changes nothing.
    let run = env.enqueue("by-hand");
    forge_running(&env, run);
    let small = write(
        &env,
        "small.toml",
        "[heartbeat]\ncron = \"* * * * *\"\ncommand = \"echo alive\"\n",
    );
    // A dry run refuses as the apply does: a check mode fails where the apply would.
    for extra in [&[][..], &["--dry-run"]] {
        let mut args = vec![
            "schedule",
            "apply",
            small.to_str().expect("utf-8"),
            "--prune",
        ];
        args.extend_from_slice(extra);
        let err = env.fails(2, &args);
        assert!(
            err.contains("--prune would remove by-hand with a running run")
                && err.contains("--force"),
            "{extra:?}: {err}"
        );
    }
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        4
    );

    env.sql.exec(
        "UPDATE job_runs SET status = 'succeeded', lease_token = NULL, owner = NULL,
                 lease_expires_at = NULL, finished_at = 1",
        &[],
    );
    let out = env.ok(&[
        "schedule",
        "apply",
        small.to_str().expect("utf-8"),
        "--prune",
    ]);
    assert!(
        out.contains("- backup\n- by-hand\n- reports.daily\n= heartbeat\n")
            && out.contains("0 added, 0 changed, 3 removed, 1 unchanged"),
        "{out}"
    );
    assert_eq!(
        env.sql
            .query_strings("SELECT name FROM job_definitions", &[]),
        ["heartbeat"]
    );
    assert_eq!(
        env.sql.query_i64("SELECT count(*) FROM job_runs", &[]),
        0,
        "their runs went with them"
    );
}

/// `--prune --force` cancels a running run of a schedule it removes first, as `schedule rm
/// --force` and `runner cancel` do, then removes the schedule with its runs.
#[test]
fn prune_with_force_cancels_a_running_run_then_removes_its_schedule() {
    let env = Env::init();
    env.add("by-hand", &[], "true");
    let run = env.enqueue("by-hand");
    forge_running(&env, run);
    let file = write(&env, "empty.toml", "");
    let out = apply(&env, &file, &["--prune", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = stdout(&out);
    assert!(
        out.contains(&format!("cancelled running run {run} ")) && out.contains("- by-hand\n"),
        "{out}"
    );
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        0
    );
    assert_eq!(env.sql.query_i64("SELECT count(*) FROM job_runs", &[]), 0);
}

/// On PostgreSQL, `apply --prune` locks a schedule it removes, then its runs, as `schedule rm`
/// does: a tick that would materialise and start a run of it meanwhile waits for the removal, so
/// no run of it starts only to be deleted under its job. The removal is stalled inside its
/// transaction; the test goes on once the tick waits for a lock, ran the job, or exited.
#[test]
fn a_tick_waits_for_prune_to_remove_a_schedule_it_would_run() {
    if Backend::current() != Backend::Postgres {
        println!("skipped: PostgreSQL only (SQLite's write lock covers the whole removal)");
        return;
    }
    let env = Env::init();
    let (ran, gate) = (env.path("ran"), env.path("gate"));
    env.add_at(
        Some(T0),
        "doomed",
        "* * * * *",
        &[],
        &format!("echo ran >> {}", sh_quote(&ran)),
    );
    let file = write(&env, "empty.toml", "");
    let quiet = || Stdio::null();
    let mut prune = env.cmd();
    prune
        .args([
            "schedule",
            "apply",
            file.to_str().expect("utf-8"),
            "--prune",
        ])
        .env(
            "RUNNER_TEST_HOOK",
            format!("removal-locked:wait={}", gate.display()),
        )
        .stdout(quiet())
        .stderr(quiet());
    let mut prune = prune.spawn().expect("spawn apply");
    let reached = env.path("gate.reached");
    wait_until(LONG, "the removal to hold its locks", || reached.exists());
    let mut tick = env
        .cmd()
        .args(["--now", "2026-11-23T10:05:30Z", "tick", "--max-tick", "30s"])
        .stdout(quiet())
        .stderr(quiet())
        .spawn()
        .expect("spawn tick");
    wait_until(LONG, "the tick to wait for the lock, run, or exit", || {
        env.sql.query_i64(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        ) > 0
            || ran.exists()
            || tick.try_wait().expect("try_wait").is_some()
    });
    std::fs::write(&gate, "").expect("open the gate");
    assert!(prune.wait().expect("apply").success());
    assert!(tick.wait().expect("tick").code().is_some());
    assert!(!ran.exists(), "a run of the schedule being removed started");
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        0
    );
}

#[test]
fn dry_run_prints_the_plan_and_changes_nothing() {
    let env = Env::init();
    env.add_at(None, "by-hand", "@daily", &[], "true");
    env.add_at(None, "heartbeat", "* * * * *", &[], "echo old");
    let file = write(&env, "schedules.toml", FILE);
    let before = listed(&env);
    let out = env.ok(&[
        "schedule",
        "apply",
        file.to_str().expect("utf-8"),
        "--prune",
        "--dry-run",
    ]);
    assert!(
        out.contains(
            "+ backup\n+ reports.daily\n~ heartbeat (command: echo old → echo alive)\n- by-hand\n"
        ) && out.contains(
            "dry run, nothing changed: would be 2 added, 1 changed, 1 removed, 0 unchanged"
        ),
        "{out}"
    );
    assert_eq!(listed(&env), before);

    // On a database that does not exist yet (a missing SQLite file; a PostgreSQL database
    // without runner's schema), a dry run shows everything as added and creates nothing.
    let fresh = Env::new();
    let out = fresh.ok(&[
        "schedule",
        "apply",
        file.to_str().expect("utf-8"),
        "--dry-run",
    ]);
    assert!(out.contains("would be 3 added"), "{out}");
    match fresh.sql.backend() {
        Backend::Sqlite => assert!(!fresh.db.exists()),
        Backend::Postgres => assert_eq!(
            fresh.sql.query_i64(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
                &[]
            ),
            0,
            "a dry run created tables"
        ),
    }
}

/// An empty SQLite file is no database yet, and `apply` (like `init` and `schedule add`) makes it
/// one: the dry run plans as for a missing file, every schedule added, and writes nothing. It
/// refused the empty file (exit 4, "not a runner database") where the apply it checks succeeds.
#[test]
fn dry_run_on_an_empty_database_file_plans_as_the_apply_would() {
    crate::sqlite_only!("an empty database file");
    let env = Env::new();
    std::fs::write(&env.db, "").expect("empty file");
    let file = write(&env, "schedules.toml", FILE);
    let out = apply(&env, &file, &["--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("+ backup\n+ heartbeat\n+ reports.daily\n")
            && stdout(&out).contains("would be 3 added"),
        "{}",
        stdout(&out)
    );
    assert_eq!(std::fs::metadata(&env.db).expect("db").len(), 0, "written");
    let out = apply(&env, &file, &[]);
    assert!(
        out.status.success() && stdout(&out).contains("3 added"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_invalid_file_changes_nothing_and_names_file_line_and_field() {
    let env = Env::init();
    env.add_at(None, "heartbeat", "* * * * *", &[], "echo old");
    let before = listed(&env);
    // 40 schedules, the 40th with a bad cron expression; the first would change heartbeat.
    let mut text = String::from("[heartbeat]\ncron = \"* * * * *\"\ncommand = \"echo new\"\n");
    for i in 2..40 {
        text.push_str(&format!(
            "\n[job-{i}]\ncron = \"{} * * * *\"\ncommand = \"true\"\n",
            i % 60
        ));
    }
    text.push_str("\n[job-40]\ncommand = \"true\"\ncron = \"0 25 * * *\"\n");
    let line = text.lines().count();
    let file = write(&env, "bad.toml", &text);
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    assert!(
        err.contains(&format!("bad.toml:{line}: schedule job-40, field cron: "))
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(listed(&env), before);

    // An unknown key and a duplicate name: the file's own line, and the key.
    let file = write(
        &env,
        "unknown.toml",
        "[a]\ncron = \"* * * * *\"\ncommand = \"true\"\ntimeout_secs = 60\n",
    );
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    assert!(
        err.contains("unknown.toml:4: schedule a: unknown field `timeout_secs`"),
        "{err}"
    );
    let file = write(&env, "dup.toml", "[a]\ncron = \"* * * * *\"\ncommand = \"true\"\n\n[a]\ncron = \"@daily\"\ncommand = \"true\"\n");
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    assert!(
        err.contains("dup.toml:5: schedule a: named twice (its first table is at line 1)"),
        "{err}"
    );
    assert_eq!(listed(&env), before);
    assert_eq!(
        env.sql
            .query_i64("SELECT count(*) FROM job_definitions", &[]),
        1
    );
}

#[test]
fn an_invalid_file_lists_every_problem_at_once_and_changes_nothing() {
    let env = Env::init();
    env.add_at(None, "heartbeat", "* * * * *", &[], "echo old");
    let before = listed(&env);
    // Wrong types and an unknown key in two tables, two independent bad fields in a third, and
    // a fourth table that would change heartbeat.
    let text = "[heartbeat]\ncron = \"* * * * *\"\ncommand = \"echo new\"\n\n\
                [a]\ncron = \"@daily\"\ncommand = \"true\"\nmax_attempts = \"three\"\npaused = 1\n\n\
                [b]\ncron = \"@daily\"\ncommand = \"true\"\ntimeout_secs = 5\n\n\
                [c]\ncron = \"61 * * * *\"\ncommand = \"true\"\ntz = \"Mars/Olympus\"\n";
    let file = write(&env, "many.toml", text);
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    // One line each, in the file's order.
    let wanted = [
        "many.toml:8: schedule a, field max_attempts: invalid type",
        "many.toml:9: schedule a, field paused: invalid type",
        "many.toml:14: schedule b: unknown field `timeout_secs`",
        "many.toml:17: schedule c, field cron: invalid cron expression",
        "many.toml:19: schedule c, field tz: ",
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), wanted.len(), "{err}");
    for (line, wanted) in lines.iter().zip(wanted) {
        assert!(line.contains(wanted), "{wanted:?} in {err}");
    }
    assert!(err.trim_end().ends_with("(nothing was changed)"), "{err}");
    assert_eq!(listed(&env), before);
}

/// An empty command in the file is said in the file's terms, as an empty array is: it said "no
/// command given; put it after `--`", which is advice for the command line.
#[test]
fn an_empty_command_string_says_what_the_file_needs() {
    let env = Env::init();
    let text = "[a]\ncron = \"@daily\"\ncommand = \"\"\n\n\
                [b]\ncron = \"@daily\"\ncommand = \"  \"\n\n\
                [c]\ncron = \"@daily\"\ncommand = []\n";
    let file = write(&env, "empty.toml", text);
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    let wanted = [
        "empty.toml:3: schedule a, field command: the string is empty; give the command to run",
        "empty.toml:7: schedule b, field command: the string is empty; give the command to run",
        "empty.toml:11: schedule c, field command: the array is empty; give the program and its \
         arguments",
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), wanted.len(), "{err}");
    for (line, wanted) in lines.iter().zip(wanted) {
        assert!(line.contains(wanted), "{wanted:?} in {err}");
    }
    assert!(!err.contains("--"), "{err}");
}

/// A value of the wrong type is named by its TOML type, whatever the field's type: a date or a
/// time is not a "map" (toml hands one to serde as a map with a private key, whose name leaked
/// outside a table), an inline table is a table, an array an array (not a "sequence").
/// An array whose program is the empty string was stored as `'' x`, which the shell cannot run:
/// every run failed with 127. It is refused at apply time, as an empty array is. An empty
/// argument after the program is an argument like any other.
#[test]
fn an_empty_program_in_a_command_array_is_refused() {
    let env = Env::init();
    let text = "[a]\ncron = \"@daily\"\ncommand = [\"\"]\n\n\
                [b]\ncron = \"@daily\"\ncommand = [\"\", \"x\"]\n\n\
                [c]\ncron = \"@daily\"\ncommand = [\" \", \"x\"]\n\n\
                [d]\ncron = \"@daily\"\ncommand = [\"printf\", \"\"]\n";
    let file = write(&env, "empty.toml", text);
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    let wanted = [
        "empty.toml:3: schedule a, field command: the program (the array's first word) is \
         empty; give the program and its arguments",
        "empty.toml:7: schedule b, field command: the program (the array's first word) is \
         empty; give the program and its arguments",
        "empty.toml:11: schedule c, field command: the program (the array's first word) is \
         empty; give the program and its arguments",
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), wanted.len(), "{err}");
    for (line, wanted) in lines.iter().zip(wanted) {
        assert!(line.contains(wanted), "{wanted:?} in {err}");
    }
    assert!(!err.contains("schedule d"), "{err}");
    assert_eq!(env.ok(&["schedule", "list", "--json"]).trim(), "[]");
}

#[test]
fn a_wrong_type_is_named_as_toml_names_it() {
    let env = Env::init();
    let text = "x = 2026-11-30\n\n\
                [a]\ncron = \"@daily\"\ncommand = \"true\"\nmax_attempts = 2026-11-30\n\
                timeout = 07:32:00\npaused = 1979-05-27T07:32:00Z\ntz = 1979-05-27T07:32:00\n\
                grace = [\"5m\"]\noverlap = {}\n";
    let file = write(&env, "typed.toml", text);
    let err = env.fails(2, &["schedule", "apply", file.to_str().expect("utf-8")]);
    let wanted = [
        "typed.toml:1: invalid type: date, expected a schedule's table ([name] and its fields)",
        "typed.toml:6: schedule a, field max_attempts: invalid type: date, expected a whole \
         number: 2026-11-30",
        "typed.toml:7: schedule a, field timeout: invalid type: time, expected a string: 07:32:00",
        "typed.toml:8: schedule a, field paused: invalid type: offset date-time, expected true or \
         false: 1979-05-27T07:32:00Z",
        "typed.toml:9: schedule a, field tz: invalid type: date-time, expected a string: \
         1979-05-27T07:32:00",
        "typed.toml:10: schedule a, field grace: invalid type: array, expected a string: [\"5m\"]",
        "typed.toml:11: schedule a, field overlap: invalid type: table, expected a string: {}",
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), wanted.len(), "{err}");
    for (line, wanted) in lines.iter().zip(wanted) {
        assert!(line.contains(wanted), "{wanted:?} in {err}");
    }
    for serde_word in ["map", "sequence", "$__toml"] {
        assert!(!err.contains(serde_word), "{serde_word} in {err}");
    }
}

#[test]
fn a_tick_during_apply_creates_no_duplicate_instant() {
    let env = Env::init();
    let file = write(
        &env,
        "schedules.toml",
        "[every]\ncron = \"* * * * *\"\ncommand = \"true\"\ncatch_up = \"all\"\n",
    );
    env.ok(&[
        "--now",
        T0,
        "schedule",
        "apply",
        file.to_str().expect("utf-8"),
    ]);
    let changed = write(
        &env,
        "changed.toml",
        "[every]\ncron = \"* * * * *\"\ncommand = \"echo changed\"\ncatch_up = \"all\"\n",
    );

    // apply, five minutes later, stops after settling the due instants and before its
    // transaction; a tick runs there, a minute later still; then apply commits.
    let gate = env.path("gate");
    let apply = env
        .cmd()
        .args([
            "--now",
            "2026-11-23T10:05:30Z",
            "schedule",
            "apply",
            changed.to_str().expect("utf-8"),
        ])
        .env(
            "RUNNER_TEST_HOOK",
            format!("apply-commit:wait={}", gate.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn apply");
    wait_until(
        Duration::from_secs(120),
        "apply to settle the due instants",
        || env.sql.query_i64("SELECT count(*) FROM job_runs", &[]) == 5,
    );
    env.ok(&["--now", "2026-11-23T10:06:30Z", "tick", "--max-tick", "30s"]);
    std::fs::write(&gate, "").expect("open the gate");
    let out = apply.wait_with_output().expect("apply");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("~ every (command: true → echo changed)"),
        "{}",
        stdout(&out)
    );

    env.ok(&["--now", "2026-11-23T10:08:30Z", "tick", "--max-tick", "30s"]);
    // One run per instant from 10:01 to 10:08, none twice, and none lost.
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE trigger = 'schedule'",
            &[]
        ),
        8
    );
    assert_eq!(
        env.sql.query_i64(
            "SELECT count(DISTINCT scheduled_for) FROM job_runs WHERE trigger = 'schedule'",
            &[]
        ),
        8
    );
    assert_eq!(
        env.sql
            .query_i64("SELECT min(scheduled_for) FROM job_runs", &[]),
        1_795_428_060 // 2026-11-23T10:01:00Z
    );
    assert_eq!(
        env.sql
            .query_strings("SELECT command FROM job_definitions", &[]),
        ["echo changed"]
    );
}

#[test]
fn export_then_apply_is_a_no_op() {
    let env = Env::init();
    let workdir = env.path("work");
    std::fs::create_dir(&workdir).expect("workdir");
    env.add_at(
        None,
        "backup",
        "30 2 * * *",
        // A backoff base above the default maximum (1h): checked against the file's maximum.
        &[
            "--tz",
            "America/New_York",
            "--timeout",
            "90m",
            "--backoff-base",
            "2h",
            "--backoff-max",
            "1d",
        ],
        "/usr/local/bin/backup --full",
    );
    env.add_at(
        None,
        "odd.name-x",
        "@hourly",
        &[
            "--overlap",
            "allow",
            "--catch-up",
            "none",
            "--grace",
            "10m",
            "--leftovers",
            "keep",
            "--paused",
            "--max-attempts",
            "1",
            "--backoff-base",
            "5s",
            "--backoff-max",
            "7m",
            "--workdir",
            workdir.to_str().expect("utf-8"),
        ],
        "printf '%s\\n' \"$RUNNER_JOB\" > out",
    );
    let exported = env.ok(&["schedule", "export"]);
    assert!(
        exported.contains("[\"odd.name-x\"]") && exported.contains("timeout = \"1h30m\""),
        "{exported}"
    );
    let file = write(&env, "exported.toml", &exported);

    let out = env.ok(&[
        "schedule",
        "apply",
        file.to_str().expect("utf-8"),
        "--prune",
    ]);
    assert!(
        out.contains("= backup\n= odd.name-x\n") && out.contains("no changes"),
        "{out}"
    );

    // Into another database: the same schedules, which export the same.
    let other = Env::new();
    other.ok(&["schedule", "apply", file.to_str().expect("utf-8")]);
    assert_eq!(listed(&other), listed(&env));
    let body = |text: &str| text.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&other.ok(&["schedule", "export"])), body(&exported));

    // A pause's end is not in the file: export says so in a comment, and apply leaves it.
    env.ok(&["schedule", "pause", "backup", "--for", "1h"]);
    let paused = env.ok(&["schedule", "export", "backup"]);
    assert!(
        paused.contains("# backup is paused until ") && paused.contains("paused = true"),
        "{paused}"
    );
    let file = write(&env, "paused.toml", &paused);
    let out = env.ok(&["schedule", "apply", file.to_str().expect("utf-8")]);
    assert!(out.contains("no changes"), "{out}");
    let shown = json(&env.ok(&["schedule", "show", "backup", "--json"]));
    assert!(
        shown["paused_until"].is_string(),
        "the end was kept: {shown}"
    );
    env.ok(&["schedule", "resume", "backup"]);

    // Named schedules only; an unknown name is exit 3.
    let one = env.ok(&["schedule", "export", "backup"]);
    assert!(
        one.contains("[backup]") && !one.contains("odd.name"),
        "{one}"
    );
    env.fails(3, &["schedule", "export", "nope"]);
}

/// A workdir that is gone since the schedule was added (a removed directory, a mount not up yet)
/// does not make `export | apply` fail: the file names it unchanged, as stored, and `edit` of
/// another field does not check it either. It used to fail the whole file (exit 2), blocking
/// every other change in it. A workdir the file changes, or a new schedule's, must still exist.
#[test]
fn an_unchanged_workdir_that_is_gone_does_not_block_apply() {
    let env = Env::init();
    let workdir = env.path("work");
    std::fs::create_dir(&workdir).expect("workdir");
    let dir = workdir.to_str().expect("utf-8");
    env.add_at(None, "job", "@daily", &["--workdir", dir], "true");
    env.add_at(None, "other", "@daily", &[], "true");
    let exported = env.ok(&["schedule", "export"]);
    std::fs::remove_dir(&workdir).expect("rmdir");

    let same = write(&env, "same.toml", &exported);
    let out = env.ok(&["schedule", "apply", same.to_str().expect("utf-8")]);
    assert!(out.contains("no changes"), "{out}");

    // Another schedule's change goes through beside it.
    let changed = write(
        &env,
        "changed.toml",
        &exported.replace("[other]\ncron = \"@daily\"", "[other]\ncron = \"@hourly\""),
    );
    assert_ne!(std::fs::read_to_string(&changed).expect("read"), exported);
    env.ok(&["schedule", "apply", changed.to_str().expect("utf-8")]);
    let shown = json(&env.ok(&["schedule", "show", "job", "--json"]));
    assert_eq!(shown["workdir"], dir, "{shown}");
    let shown = json(&env.ok(&["schedule", "show", "other", "--json"]));
    assert_eq!(shown["cron"], "@hourly", "{shown}");

    // Pointed at another missing directory, or a new schedule's: refused, nothing changed.
    let moved = write(
        &env,
        "moved.toml",
        &exported.replace(dir, &format!("{dir}-elsewhere")),
    );
    let out = apply(&env, &moved, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no such directory"),
        "{}",
        stderr(&out)
    );
    let new = write(
        &env,
        "new.toml",
        &format!(
            "{exported}\n[fresh]\ncron = \"@daily\"\ncommand = \"true\"\nworkdir = \"{dir}\"\n"
        ),
    );
    let out = apply(&env, &new, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("schedule fresh, field workdir")
            && stderr(&out).contains("no such directory"),
        "{}",
        stderr(&out)
    );
    env.fails(3, &["schedule", "show", "fresh"]);
}

/// A damaged schedule cannot be exported. It used to be left out with a warning and exit 0, so
/// the README's `export > schedules.toml`, then `apply --prune`, removed it and its runs. Now
/// export prints the rest, names what it left out and why, warns against --prune on stderr and
/// in the file, and exits 4 (as `schedule show` of a damaged schedule does).
#[test]
fn export_with_a_damaged_schedule_says_what_it_left_out_and_exits_4() {
    let env = Env::init();
    env.ok(&[
        "schedule",
        "add",
        "backup",
        "--cron",
        "30 2 * * *",
        "-q",
        "--",
        "/usr/local/bin/backup",
    ]);
    env.ok(&[
        "schedule",
        "add",
        "heartbeat",
        "--cron",
        "* * * * *",
        "-q",
        "--",
        "true",
    ]);
    env.sql.exec(
        "UPDATE job_definitions SET timezone = 'Mars/Olympus' WHERE name = 'backup'",
        &[],
    );
    let before = env.sql.snapshot();
    let out = env.run(&["schedule", "export"]);
    let (exported, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(4), "{err}");
    // What could be exported is printed, with a warning in the file itself.
    assert!(exported.contains("[heartbeat]"), "{exported}");
    assert!(!exported.contains("[backup]"), "{exported}");
    assert!(
        exported.contains("# INCOMPLETE: damaged, so left out: schedule backup.")
            && exported.contains("Do not apply this file with --prune"),
        "{exported}"
    );
    // Stderr names the schedule, the problem, and the danger of --prune.
    assert!(
        err.contains("not exported: schedule backup is damaged") && err.contains("Mars/Olympus"),
        "{err}"
    );
    assert!(err.contains("must not be applied with --prune"), "{err}");
    assert_eq!(env.sql.snapshot(), before, "export wrote to the database");
    // Exported by name, it is refused the same way (as before).
    let err = env.fails(4, &["schedule", "export", "backup"]);
    assert!(err.contains("Mars/Olympus"), "{err}");
}
