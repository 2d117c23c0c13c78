//! Fault injection: contention, hung and hostile jobs, database faults (missing, unreadable,
//! read-only, corrupt, newer, disk full), bad input, clock jumps, and the security promises.
//!
//! Tests that need root (tmpfs mounts, `chattr`, dropping to `nobody`) check for it and, when
//! they cannot run, say so on stdout and return: they never pass silently by accident of setup
//! without a printed note.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::common::{process_alive, stderr, stdout, wait_until, Env, BIN};

/// A cron expression that never fires during a test (1 January, at least weeks away): runs
/// come from `runner run`.
const NEVER: &str = "0 0 1 1 *";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/// Runs its closure when dropped: unmount, un-chattr, kill a daemon, whatever the test ends.
struct Cleanup<F: FnMut()>(F);

impl<F: FnMut()> Drop for Cleanup<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn add(env: &Env, name: &str, flags: &[&str], command: &str) {
    let mut args = vec!["schedule", "add", name, "--cron", NEVER];
    args.extend_from_slice(flags);
    args.extend(["--", command]);
    env.ok(&args);
}

/// `runner run NAME`; returns the run id it printed.
fn enqueue(env: &Env, name: &str) -> i64 {
    let out = env.ok(&["run", name]);
    out.split_whitespace()
        .nth(2)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no run id in {out:?}"))
}

/// Run a command, killing it and failing the test if it takes longer than `limit`.
fn timed(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.expect("wait"), started.elapsed()),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{cmd:?} still running after {limit:?}");
        }
    }
}

/// `runner tick ARGS` with a deadline; returns its output and how long it took.
fn tick(env: &Env, args: &[&str], limit: Duration) -> (Output, Duration) {
    let mut cmd = env.cmd();
    cmd.arg("tick").args(args);
    timed(cmd, limit)
}

struct RunRow {
    status: String,
    error_code: Option<String>,
    error_detail: Option<String>,
}

fn run_row(env: &Env, id: i64) -> RunRow {
    env.conn()
        .query_row(
            "SELECT status, error_code, error_detail FROM job_runs WHERE id = ?1",
            [id],
            |r| {
                Ok(RunRow {
                    status: r.get(0)?,
                    error_code: r.get(1)?,
                    error_detail: r.get(2)?,
                })
            },
        )
        .expect("run row")
}

struct AttemptRow {
    duration_ms: i64,
    stdout_tail: Vec<u8>,
    stderr_tail: Vec<u8>,
    stdout_bytes: i64,
    stderr_bytes: i64,
}

fn last_attempt(env: &Env, run: i64) -> AttemptRow {
    env.conn()
        .query_row(
            "SELECT duration_ms, stdout_tail, stderr_tail, stdout_bytes, stderr_bytes
             FROM job_attempts WHERE run_id = ?1 ORDER BY attempt DESC LIMIT 1",
            [run],
            |r| {
                Ok(AttemptRow {
                    duration_ms: r.get(0)?,
                    stdout_tail: r.get::<_, Option<Vec<u8>>>(1)?.unwrap_or_default(),
                    stderr_tail: r.get::<_, Option<Vec<u8>>>(2)?.unwrap_or_default(),
                    stdout_bytes: r.get(3)?,
                    stderr_bytes: r.get(4)?,
                })
            },
        )
        .expect("attempt row")
}

/// Everything a command could have written, in one comparable string.
fn snapshot(db: &Path) -> String {
    let conn = Connection::open(db).expect("open");
    let mut out = String::new();
    let tables: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .expect("tables");
        let rows = stmt.query_map([], |r| r.get(0)).expect("tables");
        rows.map(|r| r.expect("row")).collect()
    };
    for table in tables {
        // Every column of every row, quoted: any change shows.
        let columns: Vec<String> = {
            let mut stmt = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .expect("columns");
            let rows = stmt.query_map([], |r| r.get(0)).expect("columns");
            rows.map(|r| r.expect("row")).collect()
        };
        let quoted = columns
            .iter()
            .map(|c| format!("quote(\"{c}\")"))
            .collect::<Vec<_>>()
            .join(" || ',' || ");
        let dump: Option<String> = conn
            .query_row(
                &format!("SELECT group_concat({quoted}, ';') FROM \"{table}\""),
                [],
                |r| r.get(0),
            )
            .expect("dump");
        out.push_str(&format!("{table}: {}\n", dump.unwrap_or_default()));
    }
    out
}

fn integrity(db: &Path) -> String {
    Connection::open(db)
        .expect("open")
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check")
}

/// The subcommands this build has (`status`, `history`, `show`, `prune` are built elsewhere).
fn subcommands() -> BTreeSet<String> {
    let out = Command::new(BIN).arg("--help").output().expect("help");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn read_pid(path: &Path) -> u32 {
    let mut pid = 0;
    wait_until(Duration::from_secs(10), "a pid file", || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}

fn kill9(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn sh(script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh")
}

// ---------------------------------------------------------------------------------------------
// 2. contention
// ---------------------------------------------------------------------------------------------

/// Eight ticks start at once on 160 due runs while readers (and a writer) loop: nobody sees
/// "database is locked", every command exits 0, every run executes exactly once (no crash, so
/// exactly once, not just at least once). Reports the claim wait (due → job started).
#[test]
fn contention_eight_ticks_and_readers_never_see_a_locked_database() {
    let env = Env::init();
    let log = env.path("log");
    add(
        &env,
        "c",
        &["--overlap", "allow"],
        &format!("echo \"$RUNNER_RUN_ID $(date +%s%N)\" >> {}", log.display()),
    );
    const RUNS: usize = 160;
    for _ in 0..RUNS {
        enqueue(&env, "c");
    }
    let commands = subcommands();
    let mut readers: Vec<Vec<&str>> =
        vec![vec!["schedule", "list"], vec!["schedule", "list", "--json"]];
    for (command, args) in [
        ("status", vec!["status"]),
        ("history", vec!["history", "--limit", "20"]),
        ("prune", vec!["prune", "--older-than", "30d"]),
    ] {
        if commands.contains(command) {
            readers.push(args);
        } else {
            println!("contention: `runner {command}` does not exist in this build; not exercised");
        }
    }
    let t0: u128 = String::from_utf8_lossy(&sh("date +%s%N").stdout)
        .trim()
        .parse()
        .expect("nanotime");

    let done = AtomicBool::new(false);
    let failures = Mutex::new(Vec::<String>::new());
    let check = |what: String, out: &Output| {
        let err = stderr(out);
        if !out.status.success() || err.contains("locked") || err.contains("busy") {
            failures
                .lock()
                .expect("lock")
                .push(format!("{what}: exit {:?}: {err}", out.status.code()));
        }
    };
    let mut reader_calls = 0;
    std::thread::scope(|scope| {
        let ticks: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let (out, _) = tick(&env, &["--concurrency", "4"], Duration::from_secs(120));
                    check("tick".into(), &out);
                })
            })
            .collect();
        let reader = scope.spawn(|| {
            let mut calls = 0;
            while !done.load(Ordering::Relaxed) {
                for args in &readers {
                    check(format!("runner {}", args.join(" ")), &env.run(args));
                    calls += 1;
                }
                // A writer in the crowd too: it enqueues work the ticks may or may not take.
                check("runner run c".into(), &env.run(&["run", "c"]));
                calls += 1;
            }
            calls
        });
        for t in ticks {
            t.join().expect("tick thread");
        }
        done.store(true, Ordering::Relaxed);
        reader_calls = reader.join().expect("reader thread");
    });
    // The runs the writer added late are taken by one more tick.
    let (out, _) = tick(&env, &["--concurrency", "8"], Duration::from_secs(120));
    check("final tick".into(), &out);
    let failures = failures.into_inner().expect("lock");
    assert!(failures.is_empty(), "{failures:#?}");

    let total = env.count("SELECT count(*) FROM job_runs");
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE status = 'succeeded'"),
        total,
        "every run succeeds"
    );
    let mut executions: BTreeMap<i64, usize> = BTreeMap::new();
    let mut waits = Vec::new();
    for line in std::fs::read_to_string(&log).expect("log").lines() {
        let (id, at) = line.split_once(' ').expect("log line");
        let id: i64 = id.parse().expect("id");
        *executions.entry(id).or_default() += 1;
        if id <= RUNS as i64 {
            let at: u128 = at.parse().expect("nanotime");
            waits.push(at.saturating_sub(t0) as f64 / 1e6);
        }
    }
    let twice: Vec<_> = executions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "runs executed more than once: {twice:?}");
    assert_eq!(executions.len() as i64, total, "every run executed");
    waits.sort_by(f64::total_cmp);
    let pct = |p: f64| waits[((waits.len() as f64 * p).ceil() as usize).clamp(1, waits.len()) - 1];
    println!(
        "contention: 8 ticks, {total} runs, {reader_calls} reader/writer calls alongside; \
         due -> job started: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (includes process start)",
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
}

// ---------------------------------------------------------------------------------------------
// 3. hung and hostile jobs
// ---------------------------------------------------------------------------------------------

/// A job that ignores SIGTERM (and whose child does too) is SIGKILLed 10 s after its timeout,
/// recorded as TIMEOUT, and nothing of it survives.
#[test]
fn job_ignoring_sigterm_is_killed_after_the_grace() {
    let env = Env::init();
    let pidfile = env.path("sleep.pid");
    add(
        &env,
        "stubborn",
        &["--timeout", "1s", "--max-attempts", "1"],
        &format!(
            "trap '' TERM; sleep 60 & echo $! > {}; wait",
            pidfile.display()
        ),
    );
    let run = enqueue(&env, "stubborn");
    let (out, took) = tick(&env, &[], Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    let row = run_row(&env, run);
    assert_eq!(row.status, "dead");
    assert_eq!(row.error_code.as_deref(), Some("TIMEOUT"));
    assert!(
        stderr(&out).contains("is dead after 1 attempt(s): TIMEOUT"),
        "one line for the dead run: {}",
        stderr(&out)
    );
    // Timeout 1 s, then SIGTERM (ignored), then SIGKILL 10 s later.
    assert!(
        took >= Duration::from_secs(11) && took < Duration::from_secs(30),
        "tick took {took:?}"
    );
    let sleeper = read_pid(&pidfile);
    assert!(!process_alive(sleeper), "the TERM-ignoring child survived");
}

/// A job that forks a daemon into a new session: the daemon leaves the job's process group, so
/// the group kill cannot reach it. What runner guarantees: the tick still ends (a daemon holding
/// the output pipes is given up on after the pipe-leak timeout), the run is recorded by the
/// shell's exit status, and what the job printed before is kept. What it cannot do: stop the
/// daemon, which outlives the tick. This test pins both down.
#[test]
fn setsid_daemons_are_found_by_their_marker_and_killed_unless_kept() {
    let env = Env::init();
    let holding = env.path("holding.pid");
    let detached = env.path("detached.pid");
    let kept = env.path("kept.pid");
    add(
        &env,
        "holds-pipes",
        &[],
        &format!(
            "setsid sleep 300 & echo $! > {}; echo started",
            holding.display()
        ),
    );
    add(
        &env,
        "detached",
        &[],
        &format!(
            "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {}; echo started",
            detached.display()
        ),
    );
    add(
        &env,
        "kept",
        &["--leftovers", "keep"],
        &format!(
            "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {}; echo started",
            kept.display()
        ),
    );
    let daemons = Mutex::new(Vec::<u32>::new());
    let _kill_daemons = Cleanup(|| {
        for pid in daemons.lock().expect("lock").iter() {
            kill9(*pid);
        }
    });

    for (name, pidfile) in [("holds-pipes", &holding), ("detached", &detached)] {
        let run = enqueue(&env, name);
        let (out, _) = tick(&env, &[], Duration::from_secs(60));
        let daemon = read_pid(pidfile);
        daemons.lock().expect("lock").push(daemon);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(run_row(&env, run).status, "succeeded");
        assert_eq!(last_attempt(&env, run).stdout_tail, b"started\n");
        // It left the job's process group and session, but it carries the job's marker.
        assert!(
            !process_alive(daemon),
            "{name}: the setsid daemon outlived its job"
        );
        let conn = env.conn();
        let detail: String = conn
            .query_row(
                "SELECT detail FROM job_events WHERE run_id = ?1 AND kind = 'LEFTOVERS'",
                [run],
                |r| r.get(0),
            )
            .expect("a LEFTOVERS event");
        // Named by pid (its name is `setsid` or `sleep`, depending on whether it had exec'd yet).
        assert!(
            detail.contains(&format!("\"{daemon} ")) && detail.contains("\"killed\":true"),
            "{detail}"
        );
    }

    let run = enqueue(&env, "kept");
    let (out, _) = tick(&env, &[], Duration::from_secs(60));
    let daemon = read_pid(&kept);
    daemons.lock().expect("lock").push(daemon);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(run_row(&env, run).status, "succeeded");
    assert!(
        process_alive(daemon),
        "--leftovers keep: the daemon lives on"
    );
    let detail: String = env
        .conn()
        .query_row(
            "SELECT detail FROM job_events WHERE run_id = ?1 AND kind = 'LEFTOVERS'",
            [run],
            |r| r.get(0),
        )
        .expect("a LEFTOVERS event");
    assert!(detail.contains("\"killed\":false"), "{detail}");
    // A later tick does not kill what a finished attempt kept on purpose.
    env.ok(&["tick"]);
    assert!(process_alive(daemon), "a later tick killed a kept daemon");
}

/// Closing stdout early does not end the job: runner waits for the shell's exit status.
#[test]
fn job_closing_its_output_early_is_still_waited_for() {
    let env = Env::init();
    add(&env, "closes", &[], "exec >&-; sleep 1; echo bye >&2");
    add(
        &env,
        "closes-both",
        &["--max-attempts", "1"],
        "exec >&- 2>&-; sleep 1; exit 3",
    );
    let a = enqueue(&env, "closes");
    let b = enqueue(&env, "closes-both");
    let (out, _) = tick(&env, &[], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(run_row(&env, a).status, "succeeded");
    let attempt = last_attempt(&env, a);
    assert_eq!(attempt.stderr_tail, b"bye\n");
    assert!(attempt.duration_ms >= 1000, "{} ms", attempt.duration_ms);
    let row = run_row(&env, b);
    assert_eq!(
        (row.status.as_str(), row.error_code.as_deref()),
        ("dead", Some("EXIT:3"))
    );
    assert!(last_attempt(&env, b).duration_ms >= 1000);
}

/// Binary output is captured byte for byte (the last 64 KiB), counted in full, and nothing that
/// shows it breaks or passes raw control bytes to the terminal.
#[test]
fn binary_output_is_captured_and_shown_safely() {
    let env = Env::init();
    add(
        &env,
        "binary",
        &[],
        "head -c 100000 /dev/urandom; head -c 70000 /dev/urandom >&2; printf '\\033[2J\\033]0;pwned\\007' >&2",
    );
    let run = enqueue(&env, "binary");
    let (out, _) = tick(&env, &[], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(run_row(&env, run).status, "succeeded");
    let attempt = last_attempt(&env, run);
    assert_eq!(attempt.stdout_bytes, 100_000);
    assert_eq!(attempt.stderr_bytes, 70_000 + 14);
    assert_eq!(attempt.stdout_tail.len(), 64 * 1024);
    assert_eq!(attempt.stderr_tail.len(), 64 * 1024);
    assert!(attempt.stderr_tail.ends_with(b"\x1b]0;pwned\x07"));
    env.ok(&["schedule", "list"]);
    if subcommands().contains("show") {
        let out = env.run(&["show", &run.to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let raw: Vec<u8> = out
            .stdout
            .iter()
            .copied()
            .filter(|b| (*b < 0x20 && *b != b'\n' && *b != b'\t') || *b == 0x7f)
            .collect();
        assert!(
            raw.is_empty(),
            "`runner show` passed raw control bytes: {raw:?}"
        );
    } else {
        println!("binary output: `runner show` does not exist in this build; display not checked");
    }
}

/// A job killed by a signal is recorded as SIGNAL:<NAME>.
#[test]
fn job_exiting_by_signal_is_recorded_by_name() {
    let env = Env::init();
    add(&env, "kill", &["--max-attempts", "1"], "kill -KILL $$");
    add(&env, "term", &["--max-attempts", "1"], "kill -TERM $$");
    let kill = enqueue(&env, "kill");
    let term = enqueue(&env, "term");
    let (out, _) = tick(&env, &[], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        run_row(&env, kill).error_code.as_deref(),
        Some("SIGNAL:SIGKILL")
    );
    assert_eq!(
        run_row(&env, term).error_code.as_deref(),
        Some("SIGNAL:SIGTERM")
    );
    assert_eq!(run_row(&env, kill).status, "dead");
    let err = stderr(&out);
    assert!(
        err.contains("SIGNAL:SIGKILL") && err.contains("SIGNAL:SIGTERM"),
        "{err}"
    );
}

/// Commands up to the kernel's limit for one argument (128 KiB) run; a 200 KiB command is either
/// refused when it is added (exit 2, saying why) or, if stored, fails every attempt with a
/// SPAWN:OTHER error that says what to do: never a crash, never a silent success.
#[test]
fn huge_command_lines_work_or_fail_clearly() {
    let env = Env::init();
    // One argument to `runner` is also limited to 128 KiB: pass the command as several words.
    let filler = "x".repeat(50 * 1024);
    let words = [
        format!(": {filler}"),
        filler.clone(),
        "; echo ok".to_string(),
    ];
    let mut args = vec!["schedule", "add", "big", "--cron", NEVER, "--"];
    args.extend(words.iter().map(String::as_str));
    env.ok(&args);
    let run = enqueue(&env, "big");
    let (out, _) = tick(&env, &[], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        run_row(&env, run).status,
        "succeeded",
        "a 100 KiB command runs"
    );
    assert_eq!(last_attempt(&env, run).stdout_tail, b"ok\n");

    let huge: Vec<String> = (0..4).map(|_| "y".repeat(50 * 1024)).collect();
    let before = snapshot(&env.db);
    let mut args = vec![
        "schedule",
        "add",
        "huge",
        "--cron",
        NEVER,
        "--max-attempts",
        "1",
        "--",
        ":",
    ];
    args.extend(huge.iter().map(String::as_str));
    let out = env.run(&args);
    match out.status.code() {
        Some(2) => {
            let err = stderr(&out);
            assert!(err.contains("command"), "the refusal says why: {err}");
            assert_eq!(snapshot(&env.db), before, "nothing written");
        }
        Some(0) => {
            let run = enqueue(&env, "huge");
            let (out, _) = tick(&env, &[], Duration::from_secs(30));
            assert!(out.status.success(), "{}", stderr(&out));
            let row = run_row(&env, run);
            assert_eq!(row.status, "dead");
            assert_eq!(row.error_code.as_deref(), Some("SPAWN:OTHER"));
            let detail = row.error_detail.unwrap_or_default();
            assert!(
                detail.contains("bytes") && detail.contains("script"),
                "the error says what to do: {detail}"
            );
            env.ok(&["schedule", "list"]);
        }
        other => panic!(
            "schedule add of a 200 KiB command: exit {other:?}: {}",
            stderr(&out)
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// 4. database faults
// ---------------------------------------------------------------------------------------------

/// Commands that must not create a database.
const NON_CREATING: &[&[&str]] = &[
    &["tick"],
    &["schedule", "list"],
    &["schedule", "show", "x"],
    &["schedule", "rm", "x"],
    &["schedule", "pause", "x"],
    &["schedule", "next", "x"],
    &["run", "x"],
    &["run", "x", "--wait"],
];

#[test]
fn missing_database_is_exit_4_and_nothing_is_created() {
    let env = Env::new();
    for db in [env.db.clone(), env.path("no/such/dir/runner.db")] {
        for args in NON_CREATING {
            let mut cmd = env.cmd();
            cmd.arg("--db").arg(&db).args(*args);
            let out = cmd.output().expect("spawn");
            assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(&db.display().to_string()),
                "{args:?}: names the path: {}",
                stderr(&out)
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(env.dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "created: {left:?}");
}

#[test]
fn directory_instead_of_database_is_exit_4() {
    let env = Env::new();
    std::fs::create_dir(&env.db).expect("mkdir");
    for args in NON_CREATING.iter().copied().chain([&["init"][..]]) {
        let err = env.fails(4, args);
        assert!(err.contains("directory"), "{args:?}: {err}");
    }
}

/// A file this user cannot read: exit 4 naming it. As root (who reads anything) the runner is
/// run as `nobody` with setpriv.
#[test]
fn unreadable_database_is_exit_4() {
    let env = Env::init();
    add(&env, "a", &[], "true");
    if !is_root() {
        chmod(&env.db, 0o000);
        for args in [&["schedule", "list"][..], &["tick"]] {
            let err = env.fails(4, args);
            assert!(err.contains(&env.db.display().to_string()), "{err}");
        }
        chmod(&env.db, 0o600);
        return;
    }
    if !Path::new("/usr/bin/setpriv").exists() {
        println!("unreadable database: running as root without setpriv: skipped");
        return;
    }
    // A directory nobody owns, a database nobody owns with mode 000: only root could read it.
    chmod(env.dir.path(), 0o711);
    let home = env.path("nobody");
    std::fs::create_dir(&home).expect("mkdir");
    let db = home.join("runner.db");
    std::fs::copy(&env.db, &db).expect("copy");
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).expect("chown");
    std::os::unix::fs::chown(&db, Some(65534), Some(65534)).expect("chown");
    chmod(&db, 0o000);
    for args in [&["schedule", "list"][..], &["tick"], &["run", "a"]] {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                BIN,
                "--db",
            ])
            .arg(&db)
            .args(args)
            .env_remove("RUNNER_DB")
            .env("HOME", &home)
            .current_dir(&home)
            .output()
            .expect("setpriv");
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&db.display().to_string()),
            "{args:?}: names the path: {}",
            stderr(&out)
        );
    }
}

/// A read-only database file: reads work, writes fail with exit 4 and a hint, nothing changes.
/// As root, permissions do not stop writes: the file is made immutable (`chattr +i`) instead.
#[test]
fn read_only_database_reads_work_and_writes_fail_clearly() {
    let env = Env::init();
    add(&env, "a", &[], "true");
    let db = env.db.clone();
    let _restore = if is_root() {
        let out = Command::new("chattr").arg("+i").arg(&db).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            println!("read-only database: root and chattr +i unavailable here: skipped");
            return;
        }
        Cleanup(Box::new(move || {
            let _ = Command::new("chattr").arg("-i").arg(&db).output();
        }) as Box<dyn FnMut()>)
    } else {
        chmod(&db, 0o400);
        Cleanup(Box::new(move || chmod(&db, 0o600)) as Box<dyn FnMut()>)
    };
    let before = snapshot(&env.db);
    let listed = env.ok(&["schedule", "list"]);
    assert!(listed.contains('a'), "{listed}");
    env.ok(&["schedule", "show", "a"]);
    for args in [
        &["run", "a"][..],
        &["tick"],
        &["schedule", "pause", "a"],
        &["schedule", "add", "b", "--cron", NEVER, "--", "true"],
    ] {
        let err = env.fails(4, args);
        assert!(
            err.contains("readonly") || err.contains("read-only"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("writable"),
            "{args:?}: a hint on what to fix: {err}"
        );
    }
    assert_eq!(snapshot(&env.db), before, "nothing written");
}

/// Garbage, or a runner database with corrupt pages: exit 4, and the file is left as it was for
/// the user to inspect or restore (runner never "repairs" by rewriting).
#[test]
fn corrupt_database_is_exit_4_and_left_untouched() {
    let env = Env::new();
    let garbage: Vec<u8> = (0..50_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&env.db, &garbage).expect("write");
    chmod(&env.db, 0o600);
    for args in NON_CREATING.iter().copied().chain([&["init"][..]]) {
        let err = env.fails(4, args);
        assert!(
            err.contains("not a usable runner database") || err.contains("not a database"),
            "{args:?}: {err}"
        );
    }
    assert!(
        std::fs::read(&env.db).expect("read") == garbage,
        "the file was changed"
    );

    // A real runner database whose pages after the first are overwritten.
    let env = Env::init();
    add(&env, "a", &[], "true");
    enqueue(&env, "a");
    let mut bytes = std::fs::read(&env.db).expect("read");
    for (i, b) in bytes.iter_mut().enumerate().skip(4096) {
        *b = if i % 2 == 0 { 0xde } else { 0xad };
    }
    std::fs::write(&env.db, &bytes).expect("write");
    for args in [&["tick"][..], &["run", "a"], &["schedule", "list"]] {
        let err = env.fails(4, args);
        assert!(
            err.contains("corrupt") || err.contains("malformed"),
            "{args:?}: {err}"
        );
    }
}

/// A database written by a newer runner: exit 4 saying to upgrade; never migrated down.
#[test]
fn newer_schema_is_exit_4_and_left_alone() {
    let env = Env::init();
    Connection::open(&env.db)
        .expect("open")
        .execute_batch("PRAGMA user_version = 99")
        .expect("user_version");
    for args in NON_CREATING.iter().copied().chain([&["init"][..]]) {
        let err = env.fails(4, args);
        assert!(err.contains("upgrade runner"), "{args:?}: {err}");
    }
    assert_eq!(env.count("PRAGMA user_version"), 99);
}

/// Mounts a small tmpfs (root only); unmounted by the guard.
fn small_tmpfs(dir: &Path, size: &str) -> Option<Cleanup<impl FnMut()>> {
    std::fs::create_dir_all(dir).expect("mkdir");
    let out = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = dir.to_path_buf();
    Some(Cleanup(move || {
        let _ = Command::new("umount").arg("-l").arg(&dir).output();
    }))
}

/// The disk fills up in the middle of a tick (the job itself fills it): the tick does not crash
/// or corrupt anything, says "disk is full", and once space is freed the next ticks finish every
/// run (the filling job runs again: its result could not be recorded, at-least-once).
#[test]
fn disk_full_during_a_tick_loses_nothing() {
    let env = Env::new();
    let fs = env.path("fs");
    let Some(_mount) = (if is_root() {
        small_tmpfs(&fs, "4m")
    } else {
        None
    }) else {
        println!("disk full: cannot mount a tmpfs (not root, or not permitted): skipped");
        return;
    };
    let db = fs.join("runner.db");
    let run_in = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.arg("--db").arg(&db).args(args);
        cmd
    };
    let ok = |args: &[&str]| {
        let out = run_in(args).output().expect("spawn");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    ok(&["init"]);
    let once = env.path("filled-once");
    let filler = fs.join("filler");
    ok(&[
        "schedule", "add", "fill", "--cron", NEVER, "--max-attempts", "5", "--backoff-base", "0s", "--",
        &format!(
            "if [ ! -e {once} ]; then touch {once}; head -c 100M /dev/zero > {filler} 2>/dev/null; fi; echo filled",
            once = once.display(),
            filler = filler.display()
        ),
    ]);
    ok(&[
        "schedule",
        "add",
        "quiet",
        "--cron",
        NEVER,
        "--max-attempts",
        "5",
        "--backoff-base",
        "0s",
        "--",
        "echo quiet",
    ]);
    ok(&["run", "fill"]);
    for _ in 0..3 {
        ok(&["run", "quiet"]);
    }
    let (out, _) = timed(
        run_in(&["tick", "--lease", "3s", "--concurrency", "1"]),
        Duration::from_secs(60),
    );
    let err = stderr(&out);
    assert!(once.exists(), "the filling job ran");
    assert!(
        err.contains("disk is full"),
        "the tick says the disk is full: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "exit {:?}: {err}",
        out.status.code()
    );

    // While the disk is still full: no command may damage the database.
    for args in [
        &["tick", "--lease", "3s"][..],
        &["run", "quiet"],
        &["schedule", "list"],
    ] {
        let (out, _) = timed(run_in(args), Duration::from_secs(60));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }

    std::fs::remove_file(&filler).expect("free the space");
    assert_eq!(integrity(&db), "ok");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (out, _) = timed(run_in(&["tick", "--lease", "3s"]), Duration::from_secs(60));
        assert!(
            out.status.success(),
            "after freeing space: {}",
            stderr(&out)
        );
        let open: i64 = Connection::open(&db)
            .expect("open")
            .query_row(
                "SELECT count(*) FROM job_runs WHERE status <> 'succeeded'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} runs unfinished after the disk was freed"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(integrity(&db), "ok");
    let conn = Connection::open(&db).expect("open");
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))
        .expect("count");
    assert!(runs >= 4, "no run was lost: {runs}");
}

/// The same fault without root: a file size limit (RLIMIT_FSIZE, via prlimit) stops the tick in
/// the middle of a write (SIGXFSZ). Like a crash: the database stays intact, and the next ticks
/// finish every run (one that was running is re-run after its lease: at-least-once).
#[test]
fn file_size_limit_stops_a_tick_mid_write_and_loses_nothing() {
    if !Path::new("/usr/bin/prlimit").exists() {
        println!("file size limit: prlimit (util-linux) not found: skipped");
        return;
    }
    let env = Env::init();
    let log = env.path("log");
    // Each attempt stores 60 KB of output: the WAL outgrows the limit within a few runs.
    add(
        &env,
        "w",
        &["--max-attempts", "5", "--backoff-base", "0s"],
        &format!(
            "head -c 60000 /dev/zero | tr '\\0' a; echo $RUNNER_RUN_ID >> {}",
            log.display()
        ),
    );
    let runs: Vec<i64> = (0..12).map(|_| enqueue(&env, "w")).collect();
    let limit = std::fs::metadata(&env.db).expect("stat").len() + 200_000;
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--fsize={limit}"))
        .arg(BIN)
        .args(["tick", "--lease", "3s"])
        .env("RUNNER_DB", &env.db)
        .current_dir(env.dir.path());
    let (out, _) = timed(cmd, Duration::from_secs(60));
    assert!(
        !out.status.success(),
        "the tick was expected to hit the file size limit: {}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(integrity(&env.db), "ok");
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.count("SELECT count(*) FROM job_runs WHERE status <> 'succeeded'") > 0 {
        assert!(
            Instant::now() < deadline,
            "runs unfinished after the limit was lifted"
        );
        let (out, _) = tick(&env, &["--lease", "3s"], Duration::from_secs(60));
        assert!(out.status.success(), "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(integrity(&env.db), "ok");
    let ran: BTreeSet<i64> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| l.parse().expect("run id"))
        .collect();
    let expected: BTreeSet<i64> = runs.into_iter().collect();
    assert_eq!(ran, expected, "every run executed");
    println!(
        "file size limit: the tick died with {}; {} runs, {} attempts, all succeeded afterwards",
        out.status,
        env.count("SELECT count(*) FROM job_runs"),
        env.count("SELECT count(*) FROM job_attempts")
    );
}

/// What the user is told about a fault must match the fault. Today a full disk at open, and a
/// read-only directory, are reported as "not a usable runner database ... restore it from a
/// backup" (of a healthy database), and a tick that could not record its results exits 0.
#[test]
fn database_fault_messages_are_actionable() {
    let env = Env::new();
    let fs = env.path("fs");
    let Some(_mount) = (if is_root() {
        small_tmpfs(&fs, "2m")
    } else {
        None
    }) else {
        println!("fault messages: cannot mount a tmpfs: skipped");
        return;
    };
    let db = fs.join("runner.db");
    let runner = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.arg("--db").arg(&db).args(args);
        timed(cmd, Duration::from_secs(60)).0
    };
    let filler = fs.join("filler");
    for args in [
        &["init"][..],
        &[
            "schedule",
            "add",
            "fill",
            "--cron",
            NEVER,
            "--",
            &format!(
                "head -c 100M /dev/zero > {} 2>/dev/null; true",
                filler.display()
            ),
        ],
        &["run", "fill"],
    ] {
        let out = runner(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    // Full in the middle of the tick: the job fills the disk, its result cannot be recorded.
    let out = runner(&["tick", "--lease", "3s"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hint: the disk is full"),
        "{}",
        stderr(&out)
    );
    // Full before the tick: the first tick's exit freed its WAL, so fill what is left; now SQLite
    // cannot even create its shared-memory file.
    let top_up = fs.join("top-up");
    let _ = std::fs::write(&top_up, vec![0u8; 4 << 20]); // fails with ENOSPC once full: intended
    for args in [&["tick"][..], &["schedule", "list"]] {
        let out = runner(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("restore it from a backup"), "{args:?}: {err}");
        assert!(
            err.contains("full") || err.contains("space"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_file(&filler).expect("rm");
    std::fs::remove_file(&top_up).expect("rm");

    // A read-only directory (and file): the database is fine, say what is wrong.
    let env = Env::init();
    add(&env, "a", &[], "true");
    let dir = env.dir.path().to_path_buf();
    let db = env.db.clone();
    let chattr = |flag: &str, path: &Path| {
        Command::new("chattr")
            .arg(flag)
            .arg(path)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(chattr("+i", &db) && chattr("+i", &dir)) {
        chattr("-i", &db);
        println!("fault messages: chattr +i unavailable: read-only directory not checked");
        return;
    }
    let _restore = Cleanup(|| {
        chattr("-i", &dir);
        chattr("-i", &db);
    });
    let out = env.run(&["schedule", "list"]);
    let err = stderr(&out);
    assert!(
        out.status.success()
            || (!err.contains("restore it from a backup") && err.contains("directory")),
        "reads work, or the message names the directory: {err}"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. bad input
// ---------------------------------------------------------------------------------------------

/// Every invalid input exits 2 with a message and writes nothing.
#[test]
fn bad_input_is_exit_2_with_a_message_and_nothing_written() {
    let env = Env::init();
    add(&env, "x", &[], "true");
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
    let before = snapshot(&env.db);
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
        assert_eq!(snapshot(&env.db), before, "{shown:?} wrote to the database");
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
        assert!(!fresh.db.exists(), "{:?} created the database", &args[..3]);
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

// ---------------------------------------------------------------------------------------------
// 6. clock
// ---------------------------------------------------------------------------------------------

/// `--now` jumps a day forward, then an hour back: every instant exists once, catch-up policies
/// decide what runs, nothing crashes, nothing executes twice.
#[test]
fn clock_jumps_create_no_duplicate_instants() {
    let env = Env::init();
    let log = env.path("log");
    let at = |t: &str| vec!["--now".to_string(), t.to_string()];
    for policy in ["latest", "all", "none"] {
        let mut args = at("2030-01-01T00:30:00Z");
        args.extend(
            [
                "schedule",
                "add",
                policy,
                "--cron",
                "0 * * * *",
                "--catch-up",
                policy,
                "--",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        args.push(format!(
            "echo \"$RUNNER_JOB $RUNNER_SCHEDULED_AT\" >> {}",
            log.display()
        ));
        let out = env.cmd().args(&args).output().expect("spawn");
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let tick_at = |t: &str| {
        let out = env
            .cmd()
            .args(["--now", t, "tick", "--concurrency", "8"])
            .output()
            .expect("spawn");
        assert!(out.status.success(), "tick at {t}: {}", stderr(&out));
    };
    tick_at("2030-01-01T01:00:30Z"); // 01:00 due
    tick_at("2030-01-02T01:00:30Z"); // a day forward: 24 instants due
    tick_at("2030-01-02T00:00:30Z"); // an hour back: nothing new
    tick_at("2030-01-01T12:00:00Z"); // back half a day: still nothing
    tick_at("2030-01-02T02:00:30Z"); // 02:00 due
    tick_at("2030-01-02T02:00:40Z"); // again: nothing new

    let count = |sql: &str| env.count(sql);
    assert_eq!(
        count("SELECT count(*) FROM (SELECT definition_id, scheduled_for FROM job_runs GROUP BY 1, 2 HAVING count(*) > 1)"),
        0,
        "duplicate instants"
    );
    let by = |policy: &str, status: &str| {
        count(&format!(
            "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
             WHERE d.name = '{policy}' AND r.status = '{status}'"
        ))
    };
    // 01:00 day 1, then 02:00 day 1 .. 01:00 day 2 (24), then 02:00 day 2: 26 instants each.
    for policy in ["latest", "all", "none"] {
        let total = by(policy, "succeeded") + by(policy, "skipped");
        assert_eq!(total, 26, "{policy}: every instant recorded once");
    }
    assert_eq!(by("all", "succeeded"), 26, "all: every missed instant runs");
    assert_eq!(
        by("latest", "succeeded"),
        3,
        "latest: only the newest of the missed day runs"
    );
    assert_eq!(
        by("none", "succeeded"),
        3,
        "none: the on-time instant of the jump runs, the missed do not"
    );
    assert_eq!(
        count("SELECT count(*) FROM job_runs WHERE status = 'skipped' AND (skip_reason IS NULL OR skip_reason = '')"),
        0,
        "every skip has a reason"
    );
    // The jobs' own account: every executed instant exactly once.
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_string)
        .collect();
    let unique: BTreeSet<&String> = lines.iter().collect();
    assert_eq!(unique.len(), lines.len(), "an instant executed twice");
    assert_eq!(lines.len(), 26 + 3 + 3);
}

// ---------------------------------------------------------------------------------------------
// 7. security
// ---------------------------------------------------------------------------------------------

/// A database (or directory) others can write is refused for execution, with the fix in the
/// message, and the job never runs.
#[test]
fn database_others_can_write_is_refused() {
    let env = Env::init();
    let marker = env.path("ran");
    add(&env, "a", &[], &format!("touch {}", marker.display()));
    let dir = env.dir.path().to_path_buf();
    let refused = |what: &str, needle: &str| {
        enqueue(&env, "a");
        for args in [&["tick"][..], &["run", "a", "--wait"]] {
            let err = env.fails(4, args);
            assert!(err.contains(needle), "{what}: {args:?}: {err}");
            assert!(err.contains("refusing"), "{what}: {err}");
        }
        assert!(!marker.exists(), "{what}: the job ran");
    };
    chmod(&env.db, 0o666);
    refused("file 0666", "chmod 600");
    chmod(&env.db, 0o620);
    refused("file 0620", "chmod 600");
    chmod(&env.db, 0o600);
    chmod(&dir, 0o777);
    refused("directory 0777", "chmod go-w");
    chmod(&dir, 0o1777);
    refused("directory 1777 (sticky)", "sticky");
    chmod(&dir, 0o700);
    if is_root() {
        std::os::unix::fs::chown(&env.db, Some(65534), None).expect("chown");
        refused("file owned by nobody", "owned by uid 65534");
        std::os::unix::fs::chown(&env.db, Some(0), None).expect("chown");
    } else {
        println!("security: not root, cannot give the database to another user: owner check not exercised");
    }
    // A symlink from a private directory into a shared one is judged by where it points.
    let shared = env.path("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o1777);
    std::fs::rename(&env.db, shared.join("runner.db")).expect("move");
    std::os::unix::fs::symlink(shared.join("runner.db"), &env.db).expect("symlink");
    refused("symlink into a 1777 directory", "shared");
    // Fixed: it runs.
    chmod(&shared, 0o700);
    env.ok(&["tick"]);
    assert!(
        marker.exists(),
        "the job runs once the database is private again"
    );
}

/// The attack the directory rule stops: in a sticky world-writable directory (like /tmp) anyone
/// can create `runner.db-wal` while the database is closed. SQLite replays whatever valid WAL it
/// finds, so a planted WAL replaces the whole database, commands included.
#[test]
fn planted_wal_in_a_sticky_directory_cannot_inject_commands() {
    let env = Env::new();
    let shared = env.path("tmp");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o1777);
    let victim = shared.join("victim.db");
    let pwned = env.path("pwned");
    let attacker = env.path("attacker.db");
    let with = |db: &Path, args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.arg("--db").arg(db).args(args);
        let out = cmd.output().expect("spawn");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    with(&victim, &["init"]);
    with(
        &victim,
        &["schedule", "add", "a", "--cron", NEVER, "--", "true"],
    );
    with(&attacker, &["init"]);
    with(
        &attacker,
        &[
            "schedule",
            "add",
            "a",
            "--cron",
            NEVER,
            "--",
            &format!("touch {}", pwned.display()),
        ],
    );
    with(&attacker, &["run", "a"]);
    // The attacker's whole database as WAL frames, left un-checkpointed (connection leaked).
    let conn = Connection::open(&attacker).expect("open");
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0; VACUUM;")
        .expect("vacuum into the WAL");
    let mut wal = attacker.as_os_str().to_owned();
    wal.push("-wal");
    let planted = {
        let mut p = victim.as_os_str().to_owned();
        p.push("-wal");
        PathBuf::from(p)
    };
    std::fs::copy(PathBuf::from(wal), &planted).expect("plant the WAL");
    std::mem::forget(conn);
    if is_root() {
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).expect("chown");
    }
    let err = env.fails(4, &["--db", victim.to_str().expect("utf-8"), "tick"]);
    assert!(err.contains("sticky"), "{err}");
    assert!(
        !pwned.exists(),
        "the planted WAL made runner execute the attacker's command"
    );
}

/// Same attack, one step further: the refusal must come before SQLite opens the database, or the
/// planted WAL is already checkpointed into the database file when runner closes it.
#[test]
fn refused_database_is_not_modified_by_a_planted_wal() {
    let env = Env::new();
    let shared = env.path("tmp");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o1777);
    let victim = shared.join("victim.db");
    let attacker = env.path("attacker.db");
    for (db, command) in [(&victim, "true"), (&attacker, "echo injected")] {
        for args in [
            &["init"][..],
            &["schedule", "add", "a", "--cron", NEVER, "--", command],
        ] {
            let out = env
                .cmd()
                .arg("--db")
                .arg(db)
                .args(args)
                .output()
                .expect("spawn");
            assert!(out.status.success(), "{}", stderr(&out));
        }
    }
    let conn = Connection::open(&attacker).expect("open");
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0; VACUUM;")
        .expect("vacuum");
    let mut wal = attacker.as_os_str().to_owned();
    wal.push("-wal");
    let mut planted = victim.as_os_str().to_owned();
    planted.push("-wal");
    std::fs::copy(PathBuf::from(wal), PathBuf::from(planted)).expect("plant");
    std::mem::forget(conn);
    let before = std::fs::read(&victim).expect("read");
    env.fails(4, &["--db", victim.to_str().expect("utf-8"), "tick"]);
    assert!(
        std::fs::read(&victim).expect("read") == before,
        "the refused database was rewritten (the planted WAL was checkpointed into it)"
    );
}

/// New databases are private whatever the umask: the file 0600 (and SQLite's -wal/-shm, which
/// copy its mode), a created directory 0700.
#[test]
fn new_databases_are_private() {
    let env = Env::new();
    let nested = env.path("state/runner/runner.db");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 000; {BIN} --db {} init && {BIN} --db {} schedule add a --cron '{NEVER}' -- true",
            nested.display(),
            env.db.display()
        ))
        .env("HOME", env.dir.path())
        .output()
        .expect("sh");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&nested), 0o600, "init");
    assert_eq!(
        mode(nested.parent().expect("dir")),
        0o700,
        "created directory"
    );
    assert_eq!(
        mode(env.path("state").as_path()),
        0o700,
        "created directory"
    );
    assert_eq!(mode(&env.db), 0o600, "schedule add");
    // While a job runs, the database is open: its sidecar files exist, and are private.
    let modes = env.path("modes");
    add(
        &env,
        "stat",
        &[],
        &format!(
            "stat -c '%n %a' {db}-wal {db}-shm > {out}",
            db = env.db.display(),
            out = modes.display()
        ),
    );
    enqueue(&env, "stat");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("umask 000; exec {BIN} tick"))
        .env("RUNNER_DB", &env.db)
        .output()
        .expect("sh");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&modes).expect("modes");
    assert_eq!(text.lines().count(), 2, "{text}");
    for line in text.lines() {
        assert!(line.ends_with(" 600"), "{line}");
    }
}

/// Jobs get stdin, stdout and stderr, nothing else: no database handle, and none of the
/// descriptors the runner itself inherited. The classic cron line `flock -n LOCK runner tick`
/// shows why: a job inheriting the lock, leaving a daemon behind, would block every later tick.
#[test]
fn jobs_inherit_no_descriptors() {
    let env = Env::init();
    let daemon = env.path("daemon.pid");
    let lock = env.path("tick.lock");
    // `keep`: the daemon outlives its job on purpose, to show it holds none of the tick's locks.
    add(
        &env,
        "fds",
        &["--leftovers", "keep"],
        &format!(
            "ls -l /proc/$$/fd; setsid sleep 120 </dev/null >/dev/null 2>&1 & echo $! > {}",
            daemon.display()
        ),
    );
    let run = enqueue(&env, "fds");
    // The runner inherits fd 7 (the database itself) and the flock descriptor.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7<{db}; exec flock -n {lock} {BIN} tick",
            db = env.db.display(),
            lock = lock.display()
        ))
        .env("RUNNER_DB", &env.db)
        .current_dir(env.dir.path())
        .output()
        .expect("sh");
    let pid = read_pid(&daemon);
    let _kill = Cleanup(move || kill9(pid));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(last_attempt(&env, run).stdout_tail).expect("fd listing");
    let fds: BTreeSet<String> = text
        .lines()
        .filter(|l| l.contains(" -> "))
        .filter_map(|l| {
            l.split(" -> ")
                .next()?
                .split_whitespace()
                .last()
                .map(str::to_string)
        })
        .collect();
    let expected: BTreeSet<String> = ["0", "1", "2"].iter().map(|s| s.to_string()).collect();
    assert_eq!(fds, expected, "the job's descriptors:\n{text}");
    assert!(!text.contains("runner.db"), "{text}");
    assert!(process_alive(pid));
    let again = sh(&format!("flock -n {} true", lock.display()));
    assert!(
        again.status.success(),
        "the job's daemon holds the tick's lock"
    );
}

/// SQL is parameterised: names with quotes are stored and used verbatim; SQL in a zone or name is
/// data, never executed.
#[test]
fn quotes_in_names_are_data() {
    let env = Env::init();
    let names = [
        "o'brien",
        "x');DROP_TABLE_job_runs;--",
        "\"quoted\"",
        "semi;colon",
        "back\\slash",
        "100%_like",
    ];
    let log = env.path("log");
    for name in names {
        add(
            &env,
            name,
            &[],
            &format!("printf '%s\\n' \"$RUNNER_JOB\" >> {}", log.display()),
        );
        enqueue(&env, name);
    }
    env.fails(
        2,
        &[
            "schedule",
            "add",
            "x'); DROP TABLE job_runs;--",
            "--cron",
            NEVER,
            "--",
            "true",
        ],
    );
    env.fails(
        2,
        &[
            "schedule",
            "add",
            "z",
            "--cron",
            NEVER,
            "--tz",
            "UTC'); DROP TABLE job_runs;--",
            "--",
            "true",
        ],
    );
    env.fails(3, &["schedule", "show", "' OR '1'='1"]);
    env.fails(3, &["run", "' OR 1=1 --"]);
    env.ok(&["tick"]);
    let json: serde_json::Value =
        serde_json::from_str(&env.ok(&["schedule", "list", "--json"])).expect("json");
    let listed: BTreeSet<String> = json
        .as_array()
        .expect("array")
        .iter()
        .map(|d| d["name"].as_str().expect("name").to_string())
        .collect();
    let expected: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(listed, expected);
    let ran: BTreeSet<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ran, expected, "each job ran under its exact name");
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE status = 'succeeded'"),
        names.len() as i64
    );
    for name in names {
        env.ok(&["schedule", "show", name]);
    }
}

/// Job output is data: what is stored for display has its escape sequences neutralised
/// (error_detail here; `runner show` where it exists).
#[test]
fn stored_output_cannot_inject_terminal_escapes() {
    let env = Env::init();
    add(
        &env,
        "esc",
        &["--max-attempts", "1"],
        "printf '\\033[2J\\033]0;pwned\\007clear\\n'; printf 'boom \\033[31mred\\r\\n' >&2; exit 3",
    );
    let run = enqueue(&env, "esc");
    let (out, _) = tick(&env, &[], Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    let row = run_row(&env, run);
    let detail = row.error_detail.unwrap_or_default();
    assert!(
        !detail.contains('\u{1b}') && !detail.contains('\r'),
        "raw escapes in error_detail: {detail:?}"
    );
    assert!(detail.contains("\\x1b[31m"), "{detail:?}");
    assert!(
        !stderr(&out).contains('\u{1b}'),
        "the tick's own output: {}",
        stderr(&out)
    );
    if subcommands().contains("show") {
        let out = env.run(&["show", &run.to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "`runner show` printed raw escapes: {text:?}"
        );
        assert!(
            text.contains("\\x1b[2J"),
            "`runner show` shows them escaped: {text}"
        );
    } else {
        println!("terminal escapes: `runner show` does not exist in this build; only error_detail checked");
    }
}
