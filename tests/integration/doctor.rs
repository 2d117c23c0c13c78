//! `runner doctor` against the real binary: the cron files and /proc it inspects are replaced by
//! temp ones through its test-only variables, so the real /etc and crontab are never touched.
//! The tests run on either backend, but those about the database file (SQLite only) and those
//! about a `postgres://` URL (PostgreSQL only).

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{stdout, wrapped, Backend, Env, BIN};
use crate::sqlite_only;

/// A temp /etc with `cron_d` as /etc/cron.d/runner (if any), a temp /proc with a cron daemon (if
/// `daemon`), no user crontab; then `runner doctor ARGS`.
fn doctor(env: &Env, cron_d: Option<&str>, daemon: bool, args: &[&str]) -> Output {
    doctor_cmd(env, cron_d, daemon, args)
        .output()
        .expect("runner doctor")
}

/// [`doctor`]'s command, not run yet.
fn doctor_cmd(env: &Env, cron_d: Option<&str>, daemon: bool, args: &[&str]) -> Command {
    let etc = env.path("etc");
    std::fs::create_dir_all(etc.join("cron.d")).expect("etc");
    if let Some(text) = cron_d {
        let file = etc.join("cron.d/runner");
        std::fs::write(&file, text).expect("cron.d file");
        // As `install -m 644` puts it, whatever the umask: cron ignores a group-writable file.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let proc = env.path("proc");
    if daemon {
        std::fs::create_dir_all(proc.join("4242")).expect("proc");
        std::fs::write(
            proc.join("4242/stat"),
            "4242 (cron) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n",
        )
        .expect("stat");
    } else {
        std::fs::create_dir_all(&proc).expect("proc");
    }
    let mut cmd = env.cmd();
    cmd.arg("doctor")
        .args(args)
        .env("RUNNER_DOCTOR_ETC", &etc)
        .env("RUNNER_DOCTOR_PROC", &proc)
        .env("RUNNER_DOCTOR_CRONTAB", env.path("no-user-crontab"));
    cmd
}

/// The passwd entry of the user the tests run as.
fn my_passwd_entry() -> nix::unistd::User {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .expect("passwd")
        .expect("a passwd entry")
}

fn me() -> String {
    my_passwd_entry().name
}

/// The packaged line's shape: variables, then `runner tick` as this user, on the test's database.
fn cron_d(env: &Env, extra: &str) -> String {
    cron_d_for(env.sql.location(), extra)
}

/// [`cron_d`] with `RUNNER_DB` set to `database`.
fn cron_d_for(database: &str, extra: &str) -> String {
    format!(
        "SHELL=/bin/sh\n{extra}RUNNER_DB={database}\nMAILTO=\"\"\n* * * * * {} {BIN} tick\n",
        me()
    )
}

/// The `cron line` check of [`check_of`] for the cron.d file `cron_d` and the database
/// `database` (`--db`), a cron daemon running.
fn cron_line_check(env: &Env, cron_d: &str, database: &str) -> (String, String, Option<String>) {
    let out = doctor(env, Some(cron_d), true, &["--json", "--db", database]);
    check_of(&out, "cron line")
}

/// A check's `(status, message, fix)` in `doctor --json`'s report.
fn check_of(out: &Output, check: &str) -> (String, String, Option<String>) {
    let report: Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
    let found = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["check"] == check)
        .unwrap_or_else(|| panic!("no check {check:?} in {}", stdout(out)));
    // Every check carries every field: `fix` is null unless it failed (it used to be left out).
    for field in ["check", "status", "message", "fix"] {
        assert!(found.get(field).is_some(), "{field} missing from {found}");
    }
    assert_eq!(found["fix"].is_null(), found["status"] != "fail", "{found}");
    (
        found["status"].as_str().expect("status").to_string(),
        found["message"].as_str().expect("message").to_string(),
        found["fix"].as_str().map(str::to_string),
    )
}

/// Ends a test of doctor on PostgreSQL when the suite runs on SQLite, saying so on stdout.
macro_rules! postgres_only {
    () => {
        if Backend::current() != Backend::Postgres {
            println!("skipped: PostgreSQL only (doctor on a postgres:// URL)");
            return;
        }
    };
}

fn checks(out: &Output) -> Vec<(String, String, String)> {
    let report: Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            (
                c["check"].as_str().expect("check").to_string(),
                c["status"].as_str().expect("status").to_string(),
                c["message"].as_str().expect("message").to_string(),
            )
        })
        .collect()
}

fn status_of(out: &Output, check: &str) -> (String, String) {
    checks(out)
        .into_iter()
        .find(|(name, _, _)| name == check)
        .map(|(_, status, message)| (status, message))
        .unwrap_or_else(|| panic!("no check {check:?} in {}", stdout(out)))
}

/// A database cron would run happily: commands that resolve under /usr/bin:/bin, a recent tick.
fn good_setup() -> Env {
    let env = Env::init();
    env.ok(&[
        "schedule",
        "add",
        "hello",
        "--cron",
        "0 3 * * *",
        "--",
        "echo hi",
    ]);
    env.ok(&[
        "schedule",
        "add",
        "list",
        "--cron",
        "0 4 * * *",
        "--",
        "ls -l /",
    ]);
    env.ok(&["tick"]);
    env
}

#[test]
fn a_good_setup_passes_every_check() {
    sqlite_only!("every check passes, the database file's permissions among them");
    let env = good_setup();
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &[]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        crate::common::stderr(&out)
    );
    assert!(text.contains("all checks passed"), "{text}");
    assert!(text.contains("ok    cron line: "), "{text}");

    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["ok"], Value::Bool(true));
    assert_eq!(report["findings"], 0);
    let names: Vec<String> = checks(&out).into_iter().map(|c| c.0).collect();
    for wanted in [
        "cron line",
        "runner binary",
        "cron daemon",
        "permissions",
        "last tick",
        "commands",
    ] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} in {names:?}");
    }
    assert!(
        checks(&out).iter().all(|c| c.1 == "ok"),
        "{:?}",
        checks(&out)
    );
}

/// Started with SIGCHLD ignored (by a parent that set it so: it survives `exec`), doctor still
/// reads the exit status of the `sh` it asks whether each command resolves: it used to find
/// every command missing.
#[test]
fn a_doctor_started_with_sigchld_ignored_still_finds_the_commands() {
    let env = good_setup();
    let doctor = doctor_cmd(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    let out = wrapped(&["env", "--ignore-signal=CHLD"], &doctor)
        .output()
        .expect("doctor under env");
    let (status, message) = status_of(&out, "commands");
    assert_eq!(status, "ok", "{message}");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn no_crontab_line_and_no_daemon_are_findings() {
    let env = good_setup();
    let out = doctor(&env, None, false, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message) = status_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.contains("no crontab line runs `runner tick`"),
        "{message}"
    );
    assert_eq!(status_of(&out, "cron daemon").0, "fail");
    assert_eq!(status_of(&out, "commands").0, "ok");

    // A line for another database is not a line for this one: both paths are named.
    let other = format!(
        "RUNNER_DB=/var/lib/elsewhere/runner.db\n* * * * * {} {BIN} tick\n",
        me()
    );
    let out = doctor(&env, Some(&other), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let (status, message) = status_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.contains("/var/lib/elsewhere/runner.db"),
        "{message}"
    );
    assert!(message.contains(env.sql.location()), "{message}");
}

/// The Debian package installs /etc/cron.d/runner with its tick line commented out: with no
/// other tick line, doctor names that line and says to uncomment it (and, when the file names
/// another database, to change the value that names it: the file's RUNNER_DB line, or the `--db`
/// the line carries), as the README tells package users. It used to say only to install
/// crontab.example as /etc/cron.d/runner, which would replace the package's file with a line for
/// /usr/local/bin/runner.
#[test]
fn the_packages_commented_tick_line_is_the_one_to_uncomment() {
    let env = good_setup();
    let packaged = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/deb/cron.d"),
    )
    .expect("packaging/deb/cron.d");
    let number = packaged
        .lines()
        .position(|line| line.starts_with('#') && line.ends_with("/usr/bin/runner tick"))
        .expect("the commented tick line")
        + 1;
    let path = env.path("etc/cron.d/runner").display().to_string();
    let message = format!(
        "no crontab line runs `runner tick` (looked at your crontab, /etc/crontab and \
         /etc/cron.d); line {number} of {path} runs `test -x /usr/bin/runner && /usr/bin/runner \
         tick` as runner, but is commented out"
    );
    let uncomment = format!(
        "uncomment line {number} of {path} (`sudoedit {path}`): the runner package installs its \
         tick line commented out"
    );
    let database = runner::store::masked_url(env.sql.location());

    // As installed: its RUNNER_DB names the package's database, not this one.
    let out = doctor(&env, Some(&packaged), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, said, fix) = check_of(&out, "cron line");
    assert_eq!((status.as_str(), said.as_str()), ("fail", message.as_str()));
    assert_eq!(
        fix,
        Some(format!(
            "{uncomment}, and change the `RUNNER_DB=` line above {path}:{number} from \
             `/var/lib/runner/runner.db` to `{database}`"
        ))
    );

    // Its line edited to carry `--db`, which wins over the file's RUNNER_DB: that value is the
    // one to change. The fix said to set RUNNER_DB above it, which changes nothing.
    let with_db = packaged.replace(
        "/usr/bin/runner tick",
        "/usr/bin/runner --db /var/lib/runner/other.db tick",
    );
    let out = doctor(&env, Some(&with_db), true, &["--json"]);
    let (_, _, fix) = check_of(&out, "cron line");
    assert_eq!(
        fix,
        Some(format!(
            "{uncomment}, and change the `--db` value of {path}:{number} from \
             `/var/lib/runner/other.db` to `{database}`"
        ))
    );
    // `--db` naming this database: uncommenting is all, whatever the file's RUNNER_DB says.
    let with_db = packaged.replace(
        "/usr/bin/runner tick",
        &format!("/usr/bin/runner --db {} tick", env.sql.location()),
    );
    let out = doctor(&env, Some(&with_db), true, &["--json"]);
    assert_eq!(check_of(&out, "cron line").2, Some(uncomment.clone()));

    // Its RUNNER_DB this database: uncommenting is all.
    let this = packaged.replace("/var/lib/runner/runner.db", env.sql.location());
    let out = doctor(&env, Some(&this), true, &["--json"]);
    let (_, said, fix) = check_of(&out, "cron line");
    assert_eq!(said, message);
    assert_eq!(fix, Some(uncomment));

    // Without the commented line, the old advice stands.
    let comments: String = packaged
        .lines()
        .filter(|line| !line.ends_with("/usr/bin/runner tick"))
        .map(|line| format!("{line}\n"))
        .collect();
    let out = doctor(&env, Some(&comments), true, &["--json"]);
    let (_, said, fix) = check_of(&out, "cron line");
    assert!(said.ends_with("/etc/cron.d)"), "{said}");
    assert!(
        fix.expect("a fix")
            .contains("(or install crontab.example as /etc/cron.d/runner)"),
        "{said}"
    );
}

/// The cron line's fix is advice to paste: it names the database by its absolute path (a
/// crontab's directory is not this one), says what named this database (`--db` here, not the
/// shell), and, for a line whose user does not exist, says to create the user rather than to set
/// a `RUNNER_DB` the line may already set.
#[test]
fn the_cron_line_fix_is_one_that_works() {
    sqlite_only!("a relative database path");
    let env = good_setup();
    let other = format!(
        "RUNNER_DB=/var/lib/elsewhere/runner.db\n* * * * * {} {BIN} tick\n",
        me()
    );
    let relative = std::path::Path::new(env.sql.location())
        .strip_prefix(env.path(""))
        .expect("the database is in the test's directory")
        .display()
        .to_string();
    let out = doctor_cmd(&env, Some(&other), true, &["--json", "--db", &relative])
        .env_remove("RUNNER_DB")
        .output()
        .expect("runner doctor");
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    let fix = fix.expect("a fix");
    assert!(message.contains(env.sql.location()), "{message}");
    assert_eq!(
        fix,
        format!(
            "change the `RUNNER_DB=` line above {}/runner:2 from `/var/lib/elsewhere/runner.db` \
             to `{}`, or point your shell at the database cron uses (you gave --db)",
            env.path("etc/cron.d").display(),
            env.sql.location()
        )
    );

    // The line of a user who does not exist (crontab.example copied before its `useradd`).
    let nobody_yet = format!(
        "RUNNER_DB={}\n* * * * * no-such-user-here {BIN} tick\n\
         */5 * * * * no-such-user-here {BIN} tick\n",
        env.sql.location()
    );
    let out = doctor(&env, Some(&nobody_yet), true, &["--json"]);
    let (_, message, fix) = check_of(&out, "cron line");
    assert!(
        message.contains("names user \"no-such-user-here\", who does not exist"),
        "{message}"
    );
    let fix = fix.expect("a fix");
    assert!(
        fix.starts_with("create the user no-such-user-here (`sudo useradd --system"),
        "{fix}"
    );
    assert!(!fix.contains("RUNNER_DB"), "{fix}");
    assert_eq!(
        fix.matches("create the user").count(),
        1,
        "once per user: {fix}"
    );
}

/// A line that names its database on its command (`--db`, `RUNNER_DB=` before the binary) wins
/// over any `RUNNER_DB=` line of its crontab: the fix changes the value on the command. It said
/// to set RUNNER_DB in that crontab, which changes nothing.
#[test]
fn the_cron_line_fix_for_a_database_named_on_the_command_changes_that_value() {
    let env = Env::new();
    let database = env.path("mine.db").display().to_string();
    for (command, fix) in [
        (
            "--db /var/lib/elsewhere/runner.db tick",
            format!(
                "change the `--db` value of {}/runner:1 from `/var/lib/elsewhere/runner.db` \
                 to `{database}`",
                env.path("etc/cron.d").display()
            ),
        ),
        (
            "tick --db=/var/lib/elsewhere/runner.db",
            format!(
                "change the `--db` value of {}/runner:1 from `/var/lib/elsewhere/runner.db` \
                 to `{database}`",
                env.path("etc/cron.d").display()
            ),
        ),
    ] {
        let crontab = format!("* * * * * {} {BIN} {command}\n", me());
        let (status, message, found) = cron_line_check(&env, &crontab, &database);
        assert_eq!(status, "fail", "{crontab}: {message}");
        assert_eq!(
            found.as_deref(),
            Some(
                format!("{fix}, or point your shell at the database cron uses (you gave --db)")
                    .as_str()
            ),
            "{crontab}"
        );
    }
    let crontab = format!(
        "RUNNER_DB=/var/lib/a.db\n* * * * * {} RUNNER_DB=/var/lib/b.db {BIN} tick\n",
        me()
    );
    let (_, _, found) = cron_line_check(&env, &crontab, &database);
    assert_eq!(
        found,
        Some(format!(
            "change the `RUNNER_DB=` value on the command of {}/runner:2 from `/var/lib/b.db` to \
             `{database}`, or point your shell at the database cron uses (you gave --db)",
            env.path("etc/cron.d").display()
        )),
        "{crontab}"
    );
}

/// A system crontab line whose user field holds the `RUNNER_DB=...` assignment (a user crontab's
/// line copied into /etc/cron.d) has no user field: doctor says so and shows the line with one.
/// It used to advise creating a user named `RUNNER_DB=...` with `useradd`.
#[test]
fn a_cron_d_line_without_its_user_field_is_named_so() {
    let env = good_setup();
    let database = env.sql.location();
    let line = format!("* * * * * RUNNER_DB={database} {BIN} tick");
    let out = doctor(
        &env,
        Some(&format!("SHELL=/bin/sh\n{line}\n")),
        true,
        &["--json"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    let shown_database = runner::store::masked_url(database);
    let assignment = format!("RUNNER_DB={shown_database}");
    assert!(
        message.contains(&format!(
            "/runner:2 has no user field: `{assignment}` stands where its user goes (lines of \
             /etc/crontab and /etc/cron.d are `min hour dom mon dow USER command`)"
        )),
        "{message}"
    );
    assert!(!message.contains("does not exist"), "{message}");
    let fix = fix.expect("a fix");
    assert_eq!(
        fix,
        format!(
            "put the user the tick runs as after the time fields: \
             `* * * * * {} {assignment} {BIN} tick`",
            me()
        )
    );
    assert!(!fix.contains("useradd"), "{fix}");

    // The line as doctor shows it works.
    let fixed = format!("* * * * * {} RUNNER_DB={database} {BIN} tick\n", me());
    let out = doctor(&env, Some(&fixed), true, &["--json"]);
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "ok", "{message}");
}

/// A system crontab line without its user field, whose binary then stands where the user goes
/// (`* * * * * /usr/bin/runner tick`: cron looks for a user named `/usr/bin/runner`, and runs
/// nothing), is named so, with the line as it should be. Doctor used to take `tick` for its
/// command and say that no line runs `runner tick`.
#[test]
fn a_cron_d_line_whose_binary_stands_where_its_user_goes_is_named_so() {
    let env = good_setup();
    let database = env.sql.location();
    let out = doctor(
        &env,
        Some(&format!(
            "SHELL=/bin/sh\nRUNNER_DB={database}\n* * * * * {BIN} tick\n"
        )),
        true,
        &["--json"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.contains(&format!(
            "/runner:3 has no user field: `{BIN}` stands where its user goes (lines of \
             /etc/crontab and /etc/cron.d are `min hour dom mon dow USER command`)"
        )),
        "{message}"
    );
    assert!(!message.contains("no crontab line runs"), "{message}");
    assert!(!message.contains("does not exist"), "{message}");
    let fix = fix.expect("a fix");
    assert_eq!(
        fix,
        format!(
            "put the user the tick runs as after the time fields: `* * * * * {} {BIN} tick`",
            me()
        )
    );

    // The line as doctor shows it works.
    let fixed = format!(
        "SHELL=/bin/sh\nRUNNER_DB={database}\n* * * * * {} {BIN} tick\n",
        me()
    );
    let out = doctor(&env, Some(&fixed), true, &["--json"]);
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "ok", "{message}");
}

/// The same line with the binary written `runner`, when a system user named `runner` exists (as
/// the README's system install creates): cron takes `runner` for the user and runs `tick` as it,
/// which is no tick either. Doctor used to take the line for a job of user `runner` that runs no
/// tick, and said no line runs `runner tick` at all. Needs root, for a passwd of the test's own
/// (bind-mounted over /etc/passwd in a mount namespace of doctor's own).
#[test]
fn a_cron_d_line_without_its_user_field_is_named_so_when_a_user_runner_exists() {
    let env = good_setup();
    let passwd = env.path("passwd");
    let mut users = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    if !users.lines().any(|l| l.starts_with("runner:")) {
        users.push_str("runner:x:64999:64999::/nonexistent:/usr/sbin/nologin\n");
    }
    std::fs::write(&passwd, users).expect("passwd");
    let database = env.sql.location();
    let cmd = doctor_cmd(
        &env,
        Some(&format!(
            "SHELL=/bin/sh\nRUNNER_DB={database}\n* * * * * runner tick\n"
        )),
        true,
        &["--json"],
    );
    let bound = r#"mount --bind "$1" /etc/passwd && shift && exec "$@""#;
    let out = with_cmd(wrapped(
        &[
            "unshare",
            "-m",
            "sh",
            "-c",
            bound,
            "sh",
            &passwd.display().to_string(),
        ],
        &cmd,
    ));
    if out.stdout.is_empty() {
        println!(
            "a user named runner: cannot mount a passwd of the test's own (not root?): skipped: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.contains(
            "/runner:3 has no user field: `runner` stands where its user goes (lines of \
             /etc/crontab and /etc/cron.d are `min hour dom mon dow USER command`)"
        ),
        "{message}"
    );
    assert!(!message.contains("no crontab line runs"), "{message}");
    assert_eq!(
        fix.as_deref(),
        Some(
            format!(
                "put the user the tick runs as after the time fields: `* * * * * {} runner tick`",
                me()
            )
            .as_str()
        )
    );
}

#[test]
fn a_command_missing_from_crons_path_is_named_with_its_schedule() {
    let env = good_setup();
    // A tool the user's shell might find (it is in a bin directory of theirs) but cron's
    // PATH=/usr/bin:/bin does not.
    let bin = env.path("bin");
    std::fs::create_dir(&bin).expect("bin");
    let tool = bin.join("runner-doctor-test-tool");
    std::fs::write(&tool, "#!/bin/sh\nexit 0\n").expect("tool");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    env.ok(&[
        "schedule",
        "add",
        "report",
        "--cron",
        "0 5 * * *",
        "--",
        "LANG=C runner-doctor-test-tool --daily",
    ]);
    let gone = env.path("gone");
    std::fs::create_dir(&gone).expect("workdir");
    env.ok(&[
        "schedule",
        "add",
        "cleanup",
        "--cron",
        "0 6 * * *",
        "--workdir",
        gone.to_str().expect("utf-8"),
        "--",
        "echo x",
    ]);
    std::fs::remove_dir(&gone).expect("rm workdir");

    let out = doctor(&env, Some(&cron_d(&env, "")), true, &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  commands: cleanup: its workdir ")
            && text.contains(
                "report: `runner-doctor-test-tool` is not found with cron's PATH=/usr/bin:/bin"
            ),
        "{text}"
    );
    assert!(
        !text.contains("hello:") && !text.contains("list:"),
        "{text}"
    );

    // With the tool's directory on the crontab's PATH, it resolves; the workdir is still missing.
    let path = format!("PATH={}:/usr/bin:/bin\n", bin.display());
    let out = doctor(&env, Some(&cron_d(&env, &path)), true, &["--json"]);
    let (status, message) = status_of(&out, "commands");
    assert_eq!(status, "fail");
    assert!(
        message.contains("cleanup") && !message.contains("report"),
        "{message}"
    );
}

/// The first word is found as the shell parses the command: a subshell, an operator without
/// blanks, a leading redirection do not hide it (they used to be taken as part of it, and fail);
/// a command that is not there still fails, inside a subshell too; one only the shell can tell is
/// named as not checked, and fails nothing.
#[test]
fn the_commands_check_finds_the_first_word_as_the_shell_does() {
    let env = Env::init();
    for (name, command) in [
        ("subshell", "(cd /tmp && ls) >/dev/null"),
        ("joined", "true&&echo ok"),
        ("redirected", ">/tmp/x echo hi"),
        ("expanded", "$TOOL --run"),
    ] {
        env.ok(&["schedule", "add", name, "--cron", "@daily", "--", command]);
    }
    env.ok(&["tick"]);
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    let (status, message) = status_of(&out, "commands");
    assert_eq!(status, "ok", "{message}");
    assert!(
        message.starts_with("4 schedule(s): every command resolves under cron's environment")
            && message.ends_with(
                "; not checked, as only the shell can tell what runs first: expanded (`$TOOL`)"
            ),
        "{message}"
    );

    for (name, command) in [
        ("missing", "nosuchcmd-xyz --flag"),
        ("missing-in-subshell", "(nosuchcmd-xyz)"),
    ] {
        env.ok(&["schedule", "add", name, "--cron", "@daily", "--", command]);
    }
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message) = status_of(&out, "commands");
    assert_eq!(status, "fail");
    let findings: Vec<&str> = message.split("; ").collect();
    assert_eq!(findings.len(), 3, "{message}");
    for (finding, name) in findings.iter().zip(["missing", "missing-in-subshell"]) {
        assert!(
            finding.starts_with(&format!(
                "{name}: `nosuchcmd-xyz` is not found with cron's PATH=/usr/bin:/bin (from "
            )),
            "{message}"
        );
    }
    assert_eq!(
        findings[2], "not checked, as only the shell can tell what runs first: expanded (`$TOOL`)",
        "{message}"
    );
}

#[test]
fn a_database_others_can_write_is_a_finding() {
    sqlite_only!("the permissions of the database file");
    let env = good_setup();
    std::fs::set_permissions(&env.db, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message) = status_of(&out, "permissions");
    assert_eq!(status, "fail");
    assert!(
        message.contains("writable by group or others (mode 0666)"),
        "{message}"
    );
    assert!(message.contains("chmod 600"), "{message}");
    assert_eq!(status_of(&out, "cron line").0, "ok");
}

/// A `runner tick` line in a file Debian's cron ignores (writable by group or others, not
/// root's, linked twice, a name with a dot) runs nothing: it is a finding with the command that
/// fixes it, where it used to pass. A file that is root's and not writable by others passes,
/// through a symbolic link too.
#[test]
fn a_cron_line_in_a_file_cron_ignores_is_a_finding() {
    let env = good_setup();
    let line = cron_d(&env, "");
    let cron_file = env.path("etc/cron.d/runner");
    let with_mode = |mode: u32| {
        let cmd = doctor_cmd(&env, Some(&line), true, &["--json"]);
        std::fs::set_permissions(&cron_file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        with_cmd(cmd)
    };
    for mode in [0o666, 0o646, 0o664] {
        let out = with_mode(mode);
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        let (status, message, fix) = check_of(&out, "cron line");
        assert_eq!(status, "fail");
        assert_eq!(
            message,
            format!(
                "{}:4 runs `{BIN} tick` as {} for this database, but cron ignores {}: it is \
                 writable by group or others (mode {mode:04o})",
                cron_file.display(),
                me(),
                cron_file.display()
            )
        );
        assert_eq!(
            fix.as_deref(),
            Some(&*format!("`sudo chmod go-w {}`", cron_file.display()))
        );
        // The line is still the one the other checks speak for.
        assert_eq!(check_of(&out, "runner binary").0, "ok");
    }
    for mode in [0o644, 0o600, 0o640, 0o755] {
        let (status, message, _) = check_of(&with_mode(mode), "cron line");
        assert_eq!(status, "ok", "mode {mode:o}: {message}");
    }

    // Linked twice: cron reads neither name.
    let second = env.path("second-link");
    let cmd = doctor_cmd(&env, Some(&line), true, &["--json"]);
    std::fs::hard_link(&cron_file, &second).expect("hard link");
    let (status, message, _) = check_of(&with_cmd(cmd), "cron line");
    assert_eq!(status, "fail");
    assert!(message.ends_with("it has 2 hard links"), "{message}");
    std::fs::remove_file(&second).expect("rm link");

    // Through a symbolic link, the file elsewhere: read when both are root's (the test's own
    // /etc stand-in is this user's, who stands for root).
    let elsewhere = env.path("runner-crontab");
    std::fs::rename(&cron_file, &elsewhere).expect("move");
    std::os::unix::fs::symlink(&elsewhere, &cron_file).expect("symlink");
    let out = with_cmd(doctor_cmd(&env, None, true, &["--json"]));
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "ok", "{message}");
    std::fs::remove_file(&cron_file).expect("rm symlink");

    // A name with a dot: the line is found, and the rename that makes cron read it is given.
    let dotted = env.path("etc/cron.d/runner.cron");
    std::fs::rename(&elsewhere, &dotted).expect("rename");
    let out = with_cmd(doctor_cmd(&env, None, true, &["--json"]));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.ends_with(&format!(
            "cron ignores {}: its name has characters other than letters, digits, `_` and `-`",
            dotted.display()
        )),
        "{message}"
    );
    assert_eq!(
        fix.as_deref(),
        Some(&*format!(
            "`sudo mv {} {}`",
            dotted.display(),
            env.path("etc/cron.d/runner-cron").display()
        ))
    );
    // With a line cron reads beside it, that one is the line: the leftover is not a finding.
    let out = doctor(&env, Some(&line), true, &["--json"]);
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "ok", "{message}");
    assert!(
        message.starts_with(&format!("{}:4 ", cron_file.display())),
        "{message}"
    );
}

/// Cron requires root to own its system crontabs and their symbolic links. (Only root can give
/// a file to another user; as anyone else the test says so and returns.)
#[test]
fn a_cron_line_in_a_file_root_does_not_own_is_a_finding() {
    if !crate::common::is_root() {
        println!("skipped: only root can give the crontab file to another user");
        return;
    }
    let env = good_setup();
    let line = cron_d(&env, "");
    let cron_file = env.path("etc/cron.d/runner");
    let nobody_name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(65534))
        .ok()
        .flatten()
        .map_or_else(|| "65534".to_string(), |u| u.name);

    let cmd = doctor_cmd(&env, Some(&line), true, &["--json"]);
    std::os::unix::fs::chown(&cron_file, Some(65534), None).expect("chown");
    let (status, message, fix) = check_of(&with_cmd(cmd), "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.ends_with(&format!("it is owned by {nobody_name}, not root")),
        "{message}"
    );
    assert_eq!(
        fix.as_deref(),
        Some(&*format!("`sudo chown root {}`", cron_file.display()))
    );

    // A symbolic link of another user's, to root's file.
    let elsewhere = env.path("runner-crontab");
    std::fs::write(&elsewhere, &line).expect("crontab");
    std::fs::remove_file(&cron_file).expect("rm");
    std::os::unix::fs::symlink(&elsewhere, &cron_file).expect("symlink");
    std::os::unix::fs::lchown(&cron_file, Some(65534), None).expect("lchown");
    let out = with_cmd(doctor_cmd(&env, None, true, &["--json"]));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.ends_with(&format!(
            "it is a symbolic link owned by {nobody_name}, not root"
        )),
        "{message}"
    );
    assert_eq!(
        fix.as_deref(),
        Some(&*format!("`sudo chown -h root {}`", cron_file.display()))
    );
}

/// A `runner tick` line that cron does not run every minute (`@reboot`, `@hourly`, `0 * * * *`)
/// is a finding, where it used to pass; `*/1` is every minute, and a line that is every minute
/// beside one that is not is the line.
#[test]
fn a_cron_line_not_every_minute_is_a_finding() {
    let env = good_setup();
    let tick = format!("{} {BIN} tick", me());
    let with_schedule = |schedules: &[&str]| {
        let lines: String = schedules.iter().map(|s| format!("{s} {tick}\n")).collect();
        let text = format!("RUNNER_DB={}\n{lines}", env.sql.location());
        doctor(&env, Some(&text), true, &["--json"])
    };
    for schedule in ["@reboot", "@hourly", "0 * * * *", "*/5 * * * *"] {
        let out = with_schedule(&[schedule]);
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        let (status, message, fix) = check_of(&out, "cron line");
        assert_eq!(status, "fail");
        assert!(
            message.ends_with(&format!(
                "for this database, but its schedule `{schedule}` is not every minute"
            )),
            "{message}"
        );
        assert!(
            fix.expect("a fix")
                .starts_with("make the line's time fields `* * * * *`"),
            "{schedule}"
        );
    }
    for schedules in [&["*/1 * * * *"][..], &["@reboot", "* * * * *"]] {
        let out = with_schedule(schedules);
        let (status, message, _) = check_of(&out, "cron line");
        assert_eq!(status, "ok", "{schedules:?}: {message}");
    }
}

/// A `runner tick` line naming a database the tick refuses (exit 2 every minute: here a URL
/// whose scheme is in capitals) ticks no database, so doctor cannot tell which one it was meant
/// for: it fails the cron line check with the tick's own reason, in /etc/cron.d or in the user's
/// crontab, beside a line that works too. It used to be listed as a line for another database,
/// a file named like the URL under the user's home.
#[test]
fn a_cron_line_naming_a_database_the_tick_refuses_is_a_finding() {
    let env = good_setup();
    let refused = format!("RUNNER_DB=POSTGRES://u@h/db {BIN} tick");
    let reason = format!(
        "runs `{refused}` as {}, but the tick refuses the database it names (exit 2): write the \
         URL's scheme in lower case: postgres://u@h/db",
        me()
    );
    let takes_it = "name the database as runner takes it: a file path (./NAME for a name with a \
                    colon) or a postgres:// URL";

    // Alone, in /etc/cron.d.
    let alone = format!("* * * * * {} {refused}\n", me());
    let out = doctor(&env, Some(&alone), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert_eq!(
        message,
        format!(
            "no `runner tick` line uses this database ({}): {}:1 {reason}",
            env.sql.location(),
            env.path("etc/cron.d/runner").display()
        )
    );
    assert_eq!(fix.as_deref(), Some(takes_it));

    // In the user's crontab, beside a line of /etc/cron.d that works for this database: that
    // line is still the one the other checks speak for.
    let user_crontab = env.path("no-user-crontab");
    std::fs::write(&user_crontab, format!("* * * * * {refused}\n")).expect("crontab");
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    std::fs::remove_file(&user_crontab).expect("rm crontab");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, fix) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert_eq!(
        message,
        format!(
            "{}:4 runs `{BIN} tick` as {} for this database; your crontab (crontab -l):1 \
             {reason}",
            env.path("etc/cron.d/runner").display(),
            me()
        )
    );
    assert_eq!(fix.as_deref(), Some(takes_it));
    assert_eq!(check_of(&out, "runner binary").0, "ok");
}

/// Cron ends a command at its first unescaped `%` (crontab(5)), so a `runner tick` line naming a
/// database with a `%` in its path or in a URL's percent-encoded password runs `runner --db
/// .../a` every minute, which exits 2. Doctor used to pass such a line; it now fails it with the
/// fix, and passes the line written with `\%`, which cron runs as meant. (Needs no database: the
/// cron line check reads only the crontab.)
#[test]
fn a_cron_line_an_unescaped_percent_cuts_short_is_a_finding() {
    let env = Env::new();
    let sqlite = env.path("a%b.db").display().to_string();
    let postgres = "postgres://runner:p%2Dx@127.0.0.1:1/jobs".to_string();
    for database in [sqlite.clone(), postgres] {
        let user_crontab = env.path("no-user-crontab");
        let line = format!("{BIN} --db {database} tick");
        std::fs::write(&user_crontab, format!("* * * * * {line}\n")).expect("crontab");
        let out = with_cmd(doctor_cmd(&env, None, true, &["--json", "--db", &database]));
        let (status, message, fix) = check_of(&out, "cron line");
        assert_eq!(status, "fail", "{message}");
        let shown = runner::store::masked_url(&database);
        let runs = match database == sqlite {
            true => format!("`{BIN} --db {}`", env.path("a").display()),
            false => "what comes before the `%`".to_string(),
        };
        assert_eq!(
            message,
            format!(
                "your crontab (crontab -l):1 runs `{BIN} --db {shown} tick` as {} for this \
                 database, but cron runs only {runs}: it ends a command at its first unescaped % \
                 and sends the rest to the command's standard input",
                me()
            )
        );
        assert_eq!(
            fix.as_deref(),
            Some(
                format!(
                    "cron turns an unescaped % into a newline: write it \\% (`{BIN} --db {} \
                     tick`), or set `RUNNER_DB={shown}` on a line of its own above the line \
                     (cron takes a variable line's % as written) and drop it from the command",
                    shown.replace('%', "\\%")
                )
                .as_str()
            )
        );
        // Not even the part of the password before the `%`.
        assert!(!stdout(&out).contains("runner:p"), "{}", stdout(&out));

        // Escaped, or set on a variable line of its own, cron runs it as written.
        for crontab in [
            format!("* * * * * {}\n", line.replace('%', "\\%")),
            format!("RUNNER_DB={database}\n* * * * * {BIN} tick\n"),
        ] {
            std::fs::write(&user_crontab, &crontab).expect("crontab");
            let out = with_cmd(doctor_cmd(&env, None, true, &["--json", "--db", &database]));
            let (status, message, _) = check_of(&out, "cron line");
            assert_eq!(status, "ok", "{crontab}: {message}");
        }
    }
}

/// A line an unescaped `%` cuts short into one that ticks another database (`tick --db
/// .../a%b.db` runs `tick --db .../a`) is a finding whatever database doctor checks: the one cron
/// ticks instead, another, or one beside which a line works. Doctor used to list it as a line
/// "for" the database it names, without its `%` finding, unless it checked that very database.
#[test]
fn a_percent_cut_line_for_another_database_is_a_finding_too() {
    let env = Env::new();
    let cut = env.path("a%b.db").display().to_string();
    let ticked = env.path("a").display().to_string();
    let other = env.path("c.db").display().to_string();
    let user_crontab = env.path("no-user-crontab");
    std::fs::write(&user_crontab, format!("* * * * * {BIN} tick --db {cut}\n")).expect("crontab");
    let finding = format!(
        "your crontab (crontab -l):1 runs `{BIN} tick --db {cut}` as {}, but cron runs only \
         `{BIN} tick --db {ticked}`: it ends a command at its first unescaped % and sends the \
         rest to the command's standard input",
        me()
    );
    let escape = format!(
        "cron turns an unescaped % into a newline: write it \\% (`{BIN} tick --db {}`)",
        cut.replace('%', "\\%")
    );
    for (database, works) in [(&ticked, None), (&other, None), (&other, Some(&other))] {
        let cron_d = works.map(|works| cron_d_for(works, ""));
        let out = with_cmd(doctor_cmd(
            &env,
            cron_d.as_deref(),
            true,
            &["--json", "--db", database],
        ));
        let (status, message, fix) = check_of(&out, "cron line");
        assert_eq!(status, "fail", "{database}: {message}");
        assert!(message.contains(&finding), "{database}: {message}");
        let fix = fix.expect("a fix");
        assert!(fix.contains(&escape), "{database}: {fix}");
        if works.is_some() {
            assert!(
                message.starts_with(&format!(
                    "{}:4 runs `{BIN} tick` as {} for this database; ",
                    env.path("etc/cron.d/runner").display(),
                    me()
                )),
                "{message}"
            );
        }
    }
}

/// Cron takes a crontab's variable lines as written (crontab(5)): `RUNNER_DB=$HOME/x.db` has the
/// tick open a file named `$HOME/x.db` in cron's working directory, the home directory. Doctor
/// used to expand `$HOME` there, as a shell would, and passed the line for `~/x.db`; it now reads
/// it as cron does, and says the path looks unintended, with the line written out. On the
/// command, where the shell expands it, `$HOME` still passes. (Needs no database: the cron line
/// check reads only the crontab, and doctor creates nothing.)
#[test]
fn a_crontab_variable_line_is_not_expanded_as_a_shell_would() {
    let env = Env::new();
    let home = my_passwd_entry().dir;
    // Never created: a name of this test's own, in the real home directory.
    let name = format!(
        "{}.db",
        env.dir
            .path()
            .file_name()
            .expect("a name")
            .to_string_lossy()
    );
    let meant = home.join(&name).display().to_string();
    let crontab = format!("RUNNER_DB=$HOME/{name}\n* * * * * {} {BIN} tick\n", me());
    let (status, message, fix) = cron_line_check(&env, &crontab, &meant);
    assert_eq!(status, "fail", "{message}");
    assert!(
        message.contains(&format!(
            "/runner:2 runs `{BIN} tick` as {}, but cron takes its variable lines as written, \
             expanding nothing: `RUNNER_DB=$HOME/{name}` names the file {}",
            me(),
            home.join("$HOME").join(&name).display()
        )),
        "{message}"
    );
    assert!(
        fix.as_deref().is_some_and(|fix| fix.contains(&format!(
            "write the path out in full in that variable line: `RUNNER_DB={meant}`"
        ))),
        "{fix:?}"
    );

    // Written out, or on the command, where the shell expands it, the line is this database's.
    for crontab in [
        format!("RUNNER_DB={meant}\n* * * * * {} {BIN} tick\n", me()),
        format!("* * * * * {} RUNNER_DB=$HOME/{name} {BIN} tick\n", me()),
        format!("* * * * * {} {BIN} --db ~/{name} tick\n", me()),
    ] {
        let (status, message, _) = cron_line_check(&env, &crontab, &meant);
        assert_eq!(status, "ok", "{crontab}: {message}");
    }
    assert!(!home.join(&name).exists());
}

/// `XDG_STATE_HOME=` is a variable line too: cron does not expand it. `$HOME/state` is no
/// absolute path, which runner ignores (as the XDG spec says), so the tick uses the default under
/// the home directory; an absolute path with a `$` names a directory of that very name. Either
/// way the line fails, with the path written out as the fix.
#[test]
fn a_crontab_xdg_state_home_line_is_not_expanded_as_a_shell_would() {
    let env = Env::new();
    let home = my_passwd_entry().dir;
    let meant = home.join("state/runner/runner.db").display().to_string();
    let crontab = format!(
        "XDG_STATE_HOME=$HOME/state\n* * * * * {} {BIN} tick\n",
        me()
    );
    let (status, message, fix) = cron_line_check(&env, &crontab, &meant);
    assert_eq!(status, "fail", "{message}");
    assert!(
        message.contains(&format!(
            "/runner:2 runs `{BIN} tick` as {}, but cron takes its variable lines as written, \
             expanding nothing: `XDG_STATE_HOME=$HOME/state` is not an absolute path, which \
             runner ignores: the tick uses {}",
            me(),
            home.join(".local/state/runner/runner.db").display()
        )),
        "{message}"
    );
    assert!(
        fix.as_deref().is_some_and(|fix| fix.contains(&format!(
            "write the path out in full in that variable line: `XDG_STATE_HOME={}`",
            home.join("state").display()
        ))),
        "{fix:?}"
    );

    // An absolute path with a `$` in it is a directory of that very name.
    let state = env.path("state");
    let literal = format!("{}/$LOGNAME", state.display());
    let crontab = format!("XDG_STATE_HOME={literal}\n* * * * * {} {BIN} tick\n", me());
    let (status, message, fix) = cron_line_check(&env, &crontab, &meant);
    assert_eq!(status, "fail", "{message}");
    assert!(
        message.contains(&format!(
            "`XDG_STATE_HOME={literal}` names the directory {literal}: the tick uses \
             {literal}/runner/runner.db"
        )),
        "{message}"
    );
    assert!(
        fix.as_deref().is_some_and(|fix| fix.contains(
            "write the directory out in full in that variable line, as an absolute path"
        )),
        "{fix:?}"
    );
}

/// A crontab's `RUNNER_DB=` or `XDG_STATE_HOME=` line picks no database for a tick line that
/// names its own on its command (`--db`, `RUNNER_DB=` before the binary): however it is written,
/// and whatever database it names, the line ticks this database and passes.
#[test]
fn a_variable_line_a_tick_line_overrides_fails_nothing() {
    let env = Env::new();
    let database = env.sql.location().to_string();
    for variable in [
        "RUNNER_DB=/var/lib/elsewhere/runner.db",
        "RUNNER_DB=$HOME/elsewhere.db",
        "RUNNER_DB=~/elsewhere.db",
        "XDG_STATE_HOME=$HOME/state",
    ] {
        for command in [
            format!("{BIN} --db {database} tick"),
            format!("{BIN} tick --db={database}"),
            format!("RUNNER_DB={database} {BIN} tick"),
        ] {
            let crontab = format!("{variable}\n* * * * * {} {command}\n", me());
            let (status, message, fix) = cron_line_check(&env, &crontab, &database);
            assert_eq!(status, "ok", "{crontab}: {message} {fix:?}");
        }
    }
}

/// A crontab's `HOME=` line is the tick's `HOME` and working directory (cron sets it from passwd
/// only when the crontab does not): `$HOME`, `~/` and a relative path on the line resolve
/// against it. Doctor resolved them against the passwd entry's home.
#[test]
fn a_crontab_home_line_is_the_home_its_tick_line_resolves_against() {
    let env = Env::new();
    let home = env.path("cron-home");
    let meant = home.join("cron.db").display().to_string();
    for command in [
        "--db $HOME/cron.db tick",
        "--db ~/cron.db tick",
        "--db cron.db tick",
        "tick --db=${HOME}/cron.db",
    ] {
        let crontab = format!(
            "HOME={}\n* * * * * {} {BIN} {command}\n",
            home.display(),
            me()
        );
        let (status, message, _) = cron_line_check(&env, &crontab, &meant);
        assert_eq!(status, "ok", "{crontab}: {message}");
    }
    // A variable line is taken as written, from that working directory.
    let crontab = format!(
        "HOME={}\nRUNNER_DB=cron.db\n* * * * * {} {BIN} tick\n",
        home.display(),
        me()
    );
    let (status, message, _) = cron_line_check(&env, &crontab, &meant);
    assert_eq!(status, "ok", "{crontab}: {message}");
}

/// Runs a command made by [`doctor_cmd`].
fn with_cmd(mut cmd: Command) -> Output {
    cmd.output().expect("runner doctor")
}

/// The test's URL as another crontab might write it: `postgresql://`, a password (never shown;
/// the server trusts this user, and doctor connects only with its own URL), and a parameter.
fn respelt(url: &str) -> String {
    let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
    let (user, rest) = rest.split_once('@').expect("a user in RUNNER_TEST_PG");
    let joiner = if rest.contains('?') { '&' } else { '?' };
    format!("postgresql://{user}:cron-secret@{rest}{joiner}application_name=cron")
}

/// On PostgreSQL, doctor connects with the store's own open path and checks runner's schema; the
/// crontab line that ticks this database is found by the URL's user, server and database, not by
/// its text; the file permissions do not apply. A good setup passes (exit 0).
#[test]
fn a_good_postgres_setup_passes_the_database_check() {
    postgres_only!();
    let env = good_setup();
    let url = env.sql.location().to_string();
    let crontab = cron_d_for(&respelt(&url), "");
    let out = doctor(&env, Some(&crontab), true, &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        crate::common::stderr(&out)
    );
    let (status, message, _) = check_of(&out, "database");
    assert_eq!(status, "ok", "{message}");
    assert!(
        message.contains("schema is current") && message.contains(&url),
        "{message}"
    );
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "ok", "{message}");
    let (status, message, _) = check_of(&out, "permissions");
    assert_eq!(status, "skipped", "{message}");
    assert!(message.contains("not applicable"), "{message}");
    for check in ["runner binary", "cron daemon", "last tick", "commands"] {
        assert_eq!(check_of(&out, check).0, "ok", "{check}: {}", stdout(&out));
    }
    assert!(
        !stdout(&out).contains("cron-secret"),
        "a password is shown: {}",
        stdout(&out)
    );

    let out = doctor(&env, Some(&crontab), true, &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ok    database: connected to ")
            && text.contains("skip  permissions: not applicable")
            && text.contains("all checks passed"),
        "{text}"
    );

    // Another database on the same server is not this one: the line is named, its password not.
    let (base, _) = url.rsplit_once('/').expect("a database in the URL");
    let other = respelt(&format!("{base}/some_other_database"));
    let out = doctor(&env, Some(&cron_d_for(&other, "")), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "fail");
    assert!(
        message.contains("/some_other_database") && !message.contains("cron-secret"),
        "{message}"
    );
    assert_eq!(check_of(&out, "database").0, "ok");
}

/// A PostgreSQL database without runner's schema fails the database check with the hint to
/// create it, and doctor creates nothing there; the checks that read it are skipped.
#[test]
fn a_postgres_database_without_runners_schema_fails_with_the_init_hint() {
    postgres_only!();
    let env = Env::new();
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, fix) = check_of(&out, "database");
    assert_eq!(status, "fail");
    assert!(message.contains("has no runner schema"), "{message}");
    let fix = fix.expect("a fix");
    assert!(
        fix.contains(&format!("runner init --db {}", env.sql.location())),
        "{fix}"
    );
    assert_eq!(check_of(&out, "cron line").0, "ok");
    assert_eq!(check_of(&out, "last tick").0, "skipped");
    assert_eq!(check_of(&out, "commands").0, "skipped");
    assert!(!env.sql.created(), "doctor created tables");

    // Once initialised, the database check passes; no tick has run yet.
    env.ok(&["init"]);
    let out = doctor(&env, Some(&cron_d(&env, "")), true, &["--json"]);
    assert_eq!(check_of(&out, "database").0, "ok", "{}", stdout(&out));
    assert_eq!(check_of(&out, "last tick").0, "fail");
    assert_eq!(out.status.code(), Some(1));
}

/// A PostgreSQL database doctor connects to and reads, but a tick could not write, fails the
/// database check, saying why: a read-only session, or a user without the privileges the README
/// lists. It passed before, while every tick exited 4.
#[test]
fn a_postgres_database_a_tick_cannot_write_fails_the_database_check() {
    postgres_only!();
    let env = Env::init();
    let database = env.sql.query_string("SELECT current_database()", &[]);
    let role = format!("{database}_reader");
    env.sql.exec(&format!("CREATE ROLE {role} LOGIN"), &[]);
    env.sql.exec(
        &format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"),
        &[],
    );
    let url = env.sql.location();
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    let reader = doctor_cmd(&env, None, true, &["--json"])
        .env("RUNNER_DB", format!("{scheme}://{role}@{host}"))
        .output()
        .expect("runner doctor");
    env.sql.exec(
        &format!("ALTER DATABASE {database} SET default_transaction_read_only = on"),
        &[],
    );
    let read_only = doctor(&env, None, true, &["--json"]);
    for cleanup in [
        format!("ALTER DATABASE {database} RESET default_transaction_read_only"),
        format!("DROP OWNED BY {role}"),
        format!("DROP ROLE {role}"),
    ] {
        env.sql.exec(&cleanup, &[]);
    }

    let (status, message, fix) = check_of(&reader, "database");
    assert_eq!(status, "fail", "{}", stdout(&reader));
    assert!(
        message.contains(
            "but a tick cannot write it: this user lacks SELECT, INSERT, UPDATE or \
             DELETE on job_attempts, job_definitions, job_events, job_runs"
        ),
        "{message}"
    );
    // Another server is no fix for a missing grant, nor for a setting of this one's.
    let fix = fix.expect("a fix");
    assert!(fix.contains("Privileges"), "{fix}");
    assert!(!fix.contains("primary server"), "{fix}");
    let (status, message, fix) = check_of(&read_only, "database");
    assert_eq!(status, "fail", "{}", stdout(&read_only));
    assert!(
        message.contains("its sessions are read-only (default_transaction_read_only is on)"),
        "{message}"
    );
    let fix = fix.expect("a fix");
    assert!(
        fix.contains("turn default_transaction_read_only off"),
        "{fix}"
    );
    assert!(!fix.contains("primary server"), "{fix}");
}

/// A PostgreSQL server doctor cannot reach is a finding naming the server and the cause, never
/// the password. (Needs no server: nothing listens on port 1.)
#[test]
fn an_unreachable_postgres_server_is_named_without_its_password() {
    let env = Env::new();
    let url = "postgres://runner:hunter2@127.0.0.1:1/runner";
    let out = doctor_cmd(&env, Some(&cron_d_for(url, "")), true, &["--json"])
        .env("RUNNER_DB", url)
        .output()
        .expect("runner doctor");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let (status, message, _) = check_of(&out, "database");
    assert_eq!(status, "fail");
    assert!(
        message
            .contains("cannot connect to PostgreSQL at 127.0.0.1:1 (database runner, user runner)"),
        "{message}"
    );
    assert_eq!(check_of(&out, "cron line").0, "ok", "{}", stdout(&out));
    let shown = format!("{}{}", stdout(&out), crate::common::stderr(&out));
    assert!(!shown.contains("hunter2"), "a password is shown: {shown}");
}

/// A password in a crontab's PostgreSQL URLs is never shown: doctor names the lines it finds
/// (their command, time fields and user field, as written) with every password masked, on the
/// command (`RUNNER_DB=URL`, `--db URL`, `--db=URL`, percent-encoded, as a parameter, a scheme in
/// capitals) or in the line's fields, in text and `--json`; both for lines that tick the
/// database doctor checks and for lines it lists as ticking another. They used to be shown as
/// written. (Needs no server: doctor checks a URL on port 1, where nothing listens.)
#[test]
fn a_password_in_a_crontab_is_never_shown() {
    let env = Env::new();
    let jobs = |password: &str| format!("postgres://runner:{password}@127.0.0.1:1/jobs");
    // Lines that tick the database doctor checks, none every minute, so each is named with its
    // finding; the first holds its URL in its time fields (a field short).
    let user_crontab = format!(
        "RUNNER_DB={}\n\
         * * * * RUNNER_DB={} {BIN} tick\n\
         @hourly {BIN} --db {} tick\n\
         @reboot {BIN} --db='postgresql://runner@127.0.0.1:1/jobs?sslmode=disable&password=secret-param' tick\n",
        jobs("secret-variable"),
        jobs("secret-fields"),
        jobs("secret%40percent"),
    );
    std::fs::write(env.path("no-user-crontab"), user_crontab).expect("crontab");
    // A line the tick refuses (shown whatever the database), and a user's crontab line copied
    // into /etc/cron.d, whose user field is then its `RUNNER_DB=URL`.
    let cron_d = format!(
        "* * * * * {me} RUNNER_DB={} {BIN} tick\n\
         * * * * * RUNNER_DB={} {BIN} tick\n\
         @daily {me} env RUNNER_DB={} {BIN} tick\n",
        jobs("secret-capitals").replace("postgres:", "POSTGRES:"),
        jobs("secret-user"),
        jobs("secret-env"),
        me = me(),
    );
    let doctor_on = |database: &str, args: &[&str]| {
        let out = doctor_cmd(&env, Some(&cron_d), true, args)
            .env("RUNNER_DB", database)
            .output()
            .expect("runner doctor");
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        let shown = format!("{}{}", stdout(&out), crate::common::stderr(&out));
        assert!(!shown.contains("secret"), "a password is shown: {shown}");
        shown
    };
    let masked = jobs("***");
    for args in [&[][..], &["--json"]] {
        // The lines of this database.
        let shown = doctor_on(&jobs("hunter2"), args);
        for line in [
            format!("its schedule `* * * * RUNNER_DB={masked}` is not every minute"),
            format!("runs `{BIN} --db {masked} tick`"),
            format!(
                "runs `{BIN} --db='postgresql://runner@127.0.0.1:1/jobs?sslmode=disable&password=***' tick`"
            ),
            format!("runs `RUNNER_DB={} {BIN} tick`", masked.replace("postgres:", "POSTGRES:")),
            format!("runs `env RUNNER_DB={masked} {BIN} tick`"),
        ] {
            assert!(shown.contains(&line), "{line} not in {shown}");
        }
        // Doctor checks another database: the lines are listed as ticking another.
        let shown = doctor_on(env.sql.location(), args);
        for line in [
            format!("has no user field: `RUNNER_DB={masked}` stands where its user goes"),
            format!("`* * * * * {} RUNNER_DB={masked} {BIN} tick`", me()),
            format!(
                "runs `RUNNER_DB={} {BIN} tick`",
                masked.replace("postgres:", "POSTGRES:")
            ),
        ] {
            let line = match args {
                [] => line,
                _ => line.replace('"', "\\\""),
            };
            assert!(shown.contains(&line), "{line} not in {shown}");
        }
    }
}

/// A line setting `RUNNER_DB` on its command to a URL whose database is named `runner` ticks
/// that database, and its binary is the word after it. The assignment used to be taken for the
/// binary (its last path segment is `runner`), so the line was said to tick the default SQLite
/// file and its binary to be missing. (Needs no server: nothing listens on port 1.)
#[test]
fn a_runner_db_url_naming_a_database_runner_is_not_the_binary() {
    let env = Env::new();
    let url = "postgres://runner@127.0.0.1:1/runner";
    std::fs::write(
        env.path("no-user-crontab"),
        format!("* * * * * RUNNER_DB={url} {BIN} tick\n"),
    )
    .expect("crontab");
    let out = doctor_cmd(&env, None, true, &["--json"])
        .env("RUNNER_DB", url)
        .output()
        .expect("runner doctor");
    let (status, message, _) = check_of(&out, "cron line");
    assert_eq!(status, "ok", "{message}");
    assert_eq!(
        message,
        format!(
            "your crontab (crontab -l):1 runs `RUNNER_DB={url} {BIN} tick` as {} for this database",
            me()
        )
    );
    let (status, message, _) = check_of(&out, "runner binary");
    assert_eq!((status.as_str(), message), ("ok", format!("{BIN} exists")));
}

/// A password set on a crontab line (`PGPASSWORD=secret`, or any other variable whose name ends
/// in PASSWORD) is masked as `***`, as a URL's password is, in the command and in the user field
/// that holds it. It used to be shown as written.
#[test]
fn a_password_variable_in_a_crontab_line_is_never_shown() {
    let env = good_setup();
    let database = env.sql.location();
    let shown_database = runner::store::masked_url(database);
    let on_line = format!(
        "* * * * * {} PGPASSWORD=secret-pg db_password='sec ret' RUNNER_DB={database} {BIN} tick\n",
        me()
    );
    // A user crontab's line copied into /etc/cron.d: its assignment stands where the user goes.
    let for_user = format!("* * * * * PGPASSWORD=secret-pg RUNNER_DB={database} {BIN} tick\n");
    for args in [&[][..], &["--json"]] {
        let out = doctor(&env, Some(&on_line), true, args);
        let shown = format!("{}{}", stdout(&out), crate::common::stderr(&out));
        assert!(
            !shown.contains("secret") && !shown.contains("sec ret"),
            "{shown}"
        );
        assert!(
            shown.contains(&format!(
                "runs `PGPASSWORD=*** db_password=*** RUNNER_DB={shown_database} {BIN} tick`"
            )),
            "{shown}"
        );
        let out = doctor(&env, Some(&for_user), true, args);
        let shown = format!("{}{}", stdout(&out), crate::common::stderr(&out));
        assert!(!shown.contains("secret"), "{shown}");
        for said in [
            "has no user field: `PGPASSWORD=***` stands where its user goes".to_string(),
            format!(
                "`* * * * * {} PGPASSWORD=*** RUNNER_DB={shown_database} {BIN} tick`",
                me()
            ),
        ] {
            assert!(shown.contains(&said), "{said} not in {shown}");
        }
    }
}
