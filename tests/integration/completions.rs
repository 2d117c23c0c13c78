//! `runner completions bash|zsh|fish` and `runner man`: loaded by the real shells and rendered by
//! the real `man` where installed (CI installs them: .ci/run), and never touching a database.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::{stderr, stdout, Env, BIN};

/// The binary's directory first on PATH, so shells find it as `runner`.
fn path_with_runner() -> String {
    let dir = Path::new(BIN).parent().expect("binary directory");
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", dir.display())
}

/// `runner` (and shells that run it) with RUNNER_DB in a directory that does not exist: opening
/// the database would fail, creating it would make the directory. HOME is the env's directory.
fn nowhere_db(env: &Env) -> std::path::PathBuf {
    env.path("nowhere/runner.db")
}

fn command(env: &Env, program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("RUNNER_DB", nowhere_db(env))
        .env("HOME", env.dir.path())
        .env("PATH", path_with_runner())
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("ZDOTDIR")
        .current_dir(env.dir.path());
    cmd
}

/// No database was opened or created, neither at RUNNER_DB nor at the default location.
fn assert_no_database(env: &Env) {
    let db_dir = nowhere_db(env);
    let db_dir = db_dir.parent().expect("parent");
    assert!(!db_dir.exists(), "{} was created", db_dir.display());
    let default = env.path(".local/state/runner");
    assert!(!default.exists(), "{} was created", default.display());
}

/// Run `runner ARGS` without a database; require exit 0 and silence on stderr.
fn runner(env: &Env, args: &[&str]) -> String {
    let out = command(env, BIN).args(args).output().expect("spawn runner");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "runner {args:?}: {:?}\nstderr: {}",
        out.status.code(),
        stderr(&out)
    );
    assert_no_database(env);
    stdout(&out)
}

/// Run a shell script; require exit 0 and nothing on stderr (the script loaded cleanly).
fn shell(env: &Env, program: &str, args: &[&str]) -> String {
    shell_with(env, program, args, &[])
}

/// `shell`, with these variables set too.
fn shell_with(env: &Env, program: &str, args: &[&str], vars: &[(&str, &str)]) -> String {
    let out = command(env, program)
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .expect("spawn shell");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{program} {args:?}: {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(&out),
        stderr(&out)
    );
    assert_no_database(env);
    stdout(&out)
}

/// Whether `program` can be run. Under CI=true it must be: .ci/run installs it.
fn installed(program: &str, package: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI must check this with the real `{program}` (apt-get install {package}; .ci/run does)"
        );
        eprintln!("note: `{program}` is not installed; checking the output's shape only");
    }
    found
}

/// The command names listed under "Commands:" in `runner ARGS --help` (clap's `help` aside).
fn commands_in_help(env: &Env, args: &[&str]) -> Vec<String> {
    let help = runner(env, &[args, &["--help"]].concat());
    let names: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect();
    assert!(
        names.len() > 1,
        "no commands in `runner {args:?} --help`:\n{help}"
    );
    names
}

/// The help topics `runner --help` lists, as typed: `runner help durations`, ...
fn help_topics(env: &Env) -> Vec<String> {
    let help = runner(env, &["--help"]);
    let topics: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Help topics:")
        .skip(1)
        .take_while(|line| line.starts_with("  runner help "))
        .filter_map(|line| line.trim().split("  ").next())
        .map(str::to_string)
        .collect();
    assert!(
        !topics.is_empty(),
        "no help topics in `runner --help`:\n{help}"
    );
    topics
}

/// What bash offers for the last of `words` (shell words: `runner history --status ''`), with
/// runner's completion script loaded, in the env's directory (which has files in it).
fn bash_complete(env: &Env, words: &str) -> Vec<String> {
    bash_complete_with(env, words, &[])
}

/// `bash_complete`, with these variables set too.
fn bash_complete_with(env: &Env, words: &str, vars: &[(&str, &str)]) -> Vec<String> {
    let program = format!(
        "source <(runner completions bash)\n\
         COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n\
         COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}\n\
         _runner runner \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    shell_with(env, "bash", &["-c", &program], vars)
        .lines()
        .map(str::to_string)
        .collect()
}

/// What fish offers for `line` (`complete -C`: the words, without their descriptions), with
/// runner's completion script loaded, in the env's directory.
fn fish_complete(env: &Env, line: &str) -> Vec<String> {
    let program = format!("runner completions fish | source; complete -C '{line}'");
    shell(env, "fish", &["--no-config", "-c", &program])
        .lines()
        .filter_map(|line| line.split('\t').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completion_loads_and_completes_commands_and_shells() {
    let env = Env::new();
    let script = runner(&env, &["completions", "bash"]);
    assert!(script.contains("_runner()"), "{script}");
    assert!(script.contains("schedule"), "no `schedule` in the script");

    let registered = shell(
        &env,
        "bash",
        &[
            "-c",
            "source <(runner completions bash) && complete -p runner",
        ],
    );
    assert!(
        registered.starts_with("complete ")
            && registered.contains("-F _runner")
            && registered.trim_end().ends_with(" runner"),
        "complete -p runner: {registered:?}"
    );

    // Complete as bash would: `runner sch<TAB>`, `runner schedule a<TAB>`, `runner completions <TAB>`.
    let complete = |words: &str| bash_complete(&env, words);
    assert_eq!(complete("runner sch"), ["schedule"]);
    assert_eq!(complete("runner schedule a"), ["add", "apply"]);
    // An empty word offers the flags too; the values are the three shells.
    let shells: Vec<String> = complete("runner completions ''")
        .into_iter()
        .filter(|word| !word.starts_with('-'))
        .collect();
    assert_eq!(shells, ["bash", "zsh", "fish"]);
}

/// The flags that take one of a few words, with those words: what completion must offer rather
/// than file names (the flags still take them in any case, as before).
const FIXED_VALUES: [(&str, &[&str]); 5] = [
    ("schedule add x --overlap", &["forbid", "allow"]),
    ("schedule edit x --catch-up", &["latest", "all", "none"]),
    ("schedule add x --leftovers", &["kill", "keep"]),
    (
        "history --status",
        &[
            "pending",
            "running",
            "succeeded",
            "dead",
            "cancelled",
            "skipped",
        ],
    ),
    ("completions", &["bash", "zsh", "fish"]),
];

#[test]
fn completion_offers_the_values_of_flags_that_take_a_fixed_set() {
    let env = Env::new();
    // Files that completing file names would offer.
    std::fs::write(env.path("somefile.txt"), "").expect("write");
    let script = runner(&env, &["completions", "bash"]);
    for (line, values) in FIXED_VALUES {
        let offered = bash_complete(&env, &format!("runner {line} ''"));
        let offered: Vec<&str> = offered
            .iter()
            .map(String::as_str)
            .filter(|word| !word.starts_with('-'))
            .collect();
        assert_eq!(offered, values, "bash: runner {line} <TAB>");
    }
    // `runner help <TAB>`: the topics, and the commands.
    let offered = bash_complete(&env, "runner help ''");
    for word in ["durations", "times", "schedule", "history"] {
        assert!(offered.iter().any(|w| w == word), "help <TAB>: {offered:?}");
    }
    assert!(!offered.iter().any(|w| w == "somefile.txt"), "{offered:?}");
    // A directory flag completes directories, a file flag files, and the command after `--`
    // a command (as the script declares them: bash leaves the rest to its own completion).
    let block = |flag: &str| -> String {
        let start = script
            .find(&format!("{flag})"))
            .unwrap_or_else(|| panic!("no {flag}"));
        script[start..]
            .split(";;")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        block("--workdir").contains("plusdirs"),
        "{}",
        block("--workdir")
    );
    for flag in ["--db", "--to"] {
        assert!(block(flag).contains("-o filenames"), "{}", block(flag));
    }
    let zsh = runner(&env, &["completions", "zsh"]);
    for (what, declared) in [
        ("--overlap", ":POLICY:(forbid allow)"),
        ("--workdir", ":DIR:_files -/"),
        ("the command after --", ":_cmdambivalent'"),
        ("help", ":(durations times init "),
    ] {
        assert!(zsh.contains(declared), "zsh: {what}: no {declared}");
    }

    if !installed("fish", "fish") {
        return;
    }
    let fish = |line: &str| -> Vec<String> {
        fish_complete(&env, &format!("runner {line} "))
            .into_iter()
            .filter(|word| !word.starts_with('-'))
            .collect()
    };
    for (line, values) in FIXED_VALUES {
        let mut offered = fish(line);
        let mut values = values.to_vec();
        offered.sort();
        values.sort();
        assert_eq!(offered, values, "fish: runner {line} <TAB>");
    }
    let offered = fish("help");
    assert!(offered.iter().any(|w| w == "durations"), "{offered:?}");
    assert!(!offered.iter().any(|w| w == "somefile.txt"), "{offered:?}");
}

/// `--tz` offers the zones the binary takes (its compiled-in database), and no file names: it
/// offered file names.
#[test]
fn completion_offers_the_zone_names_for_tz() {
    let env = Env::new();
    std::fs::write(env.path("somefile.txt"), "").expect("write");
    for line in [
        "schedule add x --tz ",
        "schedule edit x --tz ",
        "schedule next --cron @daily --tz ",
        "schedule simulate --cron @daily --tz ",
    ] {
        let offered = bash_complete(&env, &format!("runner {line}Europe/B"));
        for zone in ["Europe/Berlin", "Europe/Brussels", "Europe/Budapest"] {
            assert!(
                offered.iter().any(|w| w == zone),
                "bash: {line}: {offered:?}"
            );
        }
        assert!(
            offered.iter().all(|w| w.starts_with("Europe/B")),
            "bash: {line}: {offered:?}"
        );
        let offered = bash_complete(&env, &format!("runner {line}''"));
        assert!(offered.iter().any(|w| w == "UTC"), "bash: {line}");
        // Only names `--tz` takes: not the database's placeholder, not a file.
        for not_offered in ["Factory", "somefile.txt"] {
            assert!(!offered.iter().any(|w| w == not_offered), "bash: {line}");
        }
    }
    let zsh = runner(&env, &["completions", "zsh"]);
    assert!(zsh.contains(":ZONE:(Africa/Abidjan "), "zsh: no zones");

    if !installed("fish", "fish") {
        return;
    }
    let offered = fish_complete(&env, "runner schedule add x --tz Europe/B");
    assert!(
        offered.iter().any(|w| w == "Europe/Berlin"),
        "fish: {offered:?}"
    );
    assert!(
        offered.iter().all(|w| w.starts_with("Europe/B")),
        "fish: {offered:?}"
    );
}

/// The words each shell offers after `runner LINE`, flags left out: bash (LINE as shell words,
/// kept quoted as bash keeps them in COMP_WORDS), zsh (its names function called as its
/// completion calls it, with the line before the cursor) and fish, where installed.
fn names_offered(env: &Env, words: &str, line: &str, vars: &[(&str, &str)]) -> Vec<Vec<String>> {
    let not_flags = |offered: Vec<String>| -> Vec<String> {
        offered
            .into_iter()
            .filter(|word| !word.is_empty() && !word.starts_with('-'))
            .collect()
    };
    let mut offered = vec![not_flags(bash_complete_with(
        env,
        &format!("runner {words} ''"),
        vars,
    ))];
    let line = format!("runner {line} ");
    let with_line = [vars, &[("LINE", line.as_str())]].concat();
    if installed("zsh", "zsh") {
        let zsh = shell_with(
            env,
            "zsh",
            &[
                "-f",
                "-c",
                "autoload -U compinit; compinit -u; source <(runner completions zsh); \
                 compadd() { print -rl -- ${(P)2} }; LBUFFER=$LINE; _runner_schedule_names",
            ],
            &with_line,
        );
        offered.push(not_flags(zsh.lines().map(str::to_string).collect()));
    }
    if installed("fish", "fish") {
        let fish = shell_with(
            env,
            "fish",
            &[
                "--no-config",
                "-c",
                "runner completions fish | source; complete -C \"$LINE\"",
            ],
            &with_line,
        );
        let words = fish
            .lines()
            .filter_map(|line| line.split('\t').next())
            .map(str::to_string)
            .collect();
        offered.push(not_flags(words));
    }
    offered
}

/// Where a command takes a schedule's name, completion offers the names in the database: the
/// one `--db` names on the line being completed, else RUNNER_DB's.
#[test]
fn completion_offers_the_schedule_names_where_a_command_takes_one() {
    let env = Env::init();
    env.add("backup", &[], "true");
    env.add("report", &[], "true");
    let db = env.sql.location().to_string();
    let zsh = runner(&env, &["completions", "zsh"]);
    assert!(
        zsh.contains("':name -- Schedule name:_runner_schedule_names'"),
        "zsh: no names for NAME"
    );
    for line in [
        "run",
        "schedule show",
        "schedule rm",
        "schedule pause",
        "schedule edit",
        "history",
        "why",
        "cancel --schedule",
        "schedule export backup",
        "schedule reanchor",
    ] {
        // As typed: quoted (bash keeps the quotes in the word), or as `--db=VALUE`, which bash
        // splits at `=` and, unquoted, at each `:` of a URL.
        let typed = format!("--db '{db}' {line}");
        for offered in names_offered(&env, &format!("--db \"'{db}'\" {line}"), &typed, &[]) {
            assert_eq!(offered, ["backup", "report"], "runner {typed} <TAB>");
        }
        let typed = format!("--db={db} {line}");
        let split = db.replace(':', " : ");
        for offered in names_offered(&env, &format!("--db = {split} {line}"), &typed, &[]) {
            assert_eq!(offered, ["backup", "report"], "runner {typed} <TAB>");
        }
        for offered in names_offered(&env, line, line, &[("RUNNER_DB", &db)]) {
            assert_eq!(
                offered,
                ["backup", "report"],
                "RUNNER_DB: runner {line} <TAB>"
            );
        }
    }
    // A new schedule's name is not one of them (zsh: the script does not ask for them there).
    let offered = bash_complete_with(&env, "runner schedule add ''", &[("RUNNER_DB", &db)]);
    assert!(
        offered.iter().all(|word| word.starts_with('-')),
        "schedule add <TAB>: {offered:?}"
    );
    assert!(
        zsh.contains("':name -- Schedule name (unique):_default'"),
        "zsh: schedule add"
    );
}

/// No database, no names: nothing is offered, nothing printed, and no database or directory is
/// created, at RUNNER_DB, at the default location, or where `--db` points.
#[test]
fn completion_offers_no_names_and_creates_nothing_where_there_is_no_database() {
    let env = Env::new();
    assert_eq!(runner(&env, &["completions", "--schedule-names"]), "");
    let out = command(&env, BIN)
        .args(["completions", "--schedule-names"])
        .env_remove("RUNNER_DB")
        .output()
        .expect("spawn runner");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "{:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    let absent = env.path("absent/runner.db");
    let absent = absent.to_str().expect("UTF-8 path");
    for (words, line) in [
        ("run".to_string(), "run".to_string()),
        (
            format!("--db {absent} schedule rm"),
            format!("--db {absent} schedule rm"),
        ),
    ] {
        for offered in names_offered(&env, &words, &line, &[]) {
            assert!(offered.is_empty(), "runner {line} <TAB>: {offered:?}");
        }
    }
    assert!(!env.path("absent").exists(), "--db's directory was created");
    assert_no_database(&env);
}

/// A database whose path has spaces, quoted or escaped as typed.
#[test]
fn completion_offers_the_names_of_a_database_whose_path_has_spaces() {
    let env = Env::new();
    let db = env.path("my schedules/run ner.db");
    let db = db.to_str().expect("UTF-8 path").to_string();
    for args in [
        &["init"][..],
        &[
            "schedule", "add", "nightly", "--cron", "@daily", "--", "true",
        ],
    ] {
        let out = command(&env, BIN)
            .arg("--db")
            .arg(&db)
            .args(args)
            .output()
            .expect("spawn runner");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let escaped = db.replace(' ', "\\ ");
    for (words, line) in [
        (format!("--db \"'{db}'\" run"), format!("--db '{db}' run")),
        (
            format!("--db '{escaped}' run"),
            format!("--db {escaped} run"),
        ),
        (
            format!("--db \"\\\"{db}\\\"\" run"),
            format!("--db \"{db}\" run"),
        ),
    ] {
        for offered in names_offered(&env, &words, &line, &[]) {
            assert_eq!(offered, ["nightly"], "runner {line} <TAB>");
        }
    }
}

#[test]
fn zsh_completion_loads() {
    let env = Env::new();
    let script = runner(&env, &["completions", "zsh"]);
    assert!(script.starts_with("#compdef runner\n"), "{script}");
    assert!(script.contains("schedule"), "no `schedule` in the script");
    if !installed("zsh", "zsh") {
        return;
    }
    // -f: no rc files. compinit writes its dump in HOME, the env's directory.
    let registered = shell(
        &env,
        "zsh",
        &[
            "-f",
            "-c",
            "autoload -U compinit; compinit -u; source <(runner completions zsh); \
             print -r -- $_comps[runner]",
        ],
    );
    assert_eq!(
        registered.trim(),
        "_runner",
        "compdef did not register runner"
    );
}

#[test]
fn fish_completion_loads_and_completes_commands() {
    let env = Env::new();
    let script = runner(&env, &["completions", "fish"]);
    assert!(script.contains("complete -c runner"), "{script}");
    assert!(script.contains("schedule"), "no `schedule` in the script");
    if !installed("fish", "fish") {
        return;
    }
    let names = fish_complete(&env, "runner sch");
    assert_eq!(names, ["schedule"], "complete -C 'runner sch': {names:?}");
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_accepted_ones() {
    let env = Env::new();
    let out: Output = command(&env, BIN)
        .args(["completions", "tcsh"])
        .output()
        .expect("spawn runner");
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains("tcsh") && ["bash", "zsh", "fish"].iter().all(|s| message.contains(s)),
        "{message}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn man_page_names_every_command_and_renders() {
    let env = Env::new();
    let page = runner(&env, &["man"]);
    // roff's apostrophe preamble (`.ie`/`.el` defining \*(Aq) may come first; then the title.
    let mut lines = page
        .lines()
        .skip_while(|line| line.starts_with(".ie ") || line.starts_with(".el "));
    let title = lines.next().unwrap_or_default();
    assert!(title.starts_with(".TH RUNNER 1 "), "first line: {title:?}");
    assert_eq!(page.matches("\n.TH ").count(), 1, "one page, one .TH");
    assert_eq!(page.matches(".ds Aq").count(), 2, "one preamble");

    let top = commands_in_help(&env, &[]);
    assert!(top.iter().any(|c| c == "completions") && top.iter().any(|c| c == "man"));
    // runner's own `help` command, with its topics, as `runner --help` lists them.
    let topics = help_topics(&env);
    assert!(
        topics.contains(&"runner help durations".to_string()),
        "{topics:?}"
    );
    let typed: Vec<String> = top
        .iter()
        .map(|c| format!("runner {c}"))
        .chain(["runner help".to_string()])
        .chain(topics)
        .chain(
            commands_in_help(&env, &["schedule"])
                .iter()
                .map(|c| format!("runner schedule {c}")),
        )
        .collect();
    for name in &typed {
        let roff = format!("\\fB{}\\fR", name.replace('-', "\\-"));
        assert!(page.contains(&roff), "{name:?} missing from the man page");
    }

    if !installed("man", "man-db") {
        return;
    }
    let mut man = command(&env, "man")
        .args(["--warnings", "-l", "-"])
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn man");
    man.stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page to man");
    let out = man.wait_with_output().expect("man");
    let rendered = stdout(&out);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "man -l: {:?}\nstderr: {}",
        out.status.code(),
        stderr(&out)
    );
    assert!(rendered.starts_with("RUNNER(1)"), "{rendered}");
    for heading in ["NAME", "SYNOPSIS", "OPTIONS", "COMMANDS"] {
        assert!(
            rendered.lines().any(|line| line == heading),
            "no {heading} section:\n{rendered}"
        );
    }
    for name in &typed {
        assert!(
            rendered.lines().any(|line| line.trim() == name),
            "{name:?} not rendered:\n{rendered}"
        );
    }
    assert!(
        rendered.contains("RUNNER_DB"),
        "the man page does not mention RUNNER_DB"
    );
}

#[test]
fn completions_and_man_need_no_home_or_database_setting() {
    let env = Env::new();
    let bare = |args: &[&str]| -> Output {
        command(&env, BIN)
            .args(args)
            .env_remove("RUNNER_DB")
            .env_remove("HOME")
            .output()
            .expect("spawn runner")
    };
    // Where database commands cannot even say where the database would be...
    assert_eq!(bare(&["status"]).status.code(), Some(2));
    // ...these work.
    for args in [&["completions", "bash"][..], &["man"]] {
        let out = bare(args);
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "runner {args:?}: {:?}\nstderr: {}",
            out.status.code(),
            stderr(&out)
        );
    }
    // A RUNNER_DB that names no usable database stops the commands that use one, not these.
    for value in ["", ":memory:", "file:x.db"] {
        let with = |args: &[&str]| -> Output {
            command(&env, BIN)
                .args(args)
                .env("RUNNER_DB", value)
                .output()
                .expect("spawn runner")
        };
        let out = with(&["status"]);
        assert_eq!(out.status.code(), Some(2), "RUNNER_DB={value:?} status");
        assert!(
            stderr(&out).contains("invalid value for --db (or RUNNER_DB)"),
            "{}",
            stderr(&out)
        );
        for args in [
            &["completions", "bash"][..],
            &["man"],
            &["help", "durations"],
        ] {
            let out = with(args);
            assert!(
                out.status.success() && !out.stdout.is_empty(),
                "RUNNER_DB={value:?} runner {args:?}: {:?}\nstderr: {}",
                out.status.code(),
                stderr(&out)
            );
        }
    }
    assert_no_database(&env);
}
