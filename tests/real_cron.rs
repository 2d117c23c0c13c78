//! Real cron: Debian's cron daemon runs `runner tick` from `crontab.example` (adapted to a temp
//! database and the built binary) and a `* * * * *` schedule gets materialised, executed and
//! recorded `succeeded`.
//!
//! Ignored by default: it needs root, installs the `cron` package when missing, starts the
//! daemon, and replaces root's crontab for up to ~150 s (restored afterwards, even on failure).
//! `./test` runs it with `--ignored` when `CI=true` or `RUNNER_CRON_TEST=1`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_runner");
const EXAMPLE: &str = include_str!("../crontab.example");
/// Cron reads crontabs at the start of a minute and the schedule fires at the next minute:
/// up to two minute boundaries plus the job itself.
const BUDGET: Duration = Duration::from_secs(150);

fn sh(script: &str) -> Output {
    Command::new("/bin/sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("run /bin/sh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn cron_binary() -> Option<PathBuf> {
    ["/usr/sbin/cron", "/sbin/cron", "/usr/bin/cron"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Install Debian's `cron` package when the daemon is missing.
fn ensure_cron_installed() -> PathBuf {
    if let Some(cron) = cron_binary() {
        return cron;
    }
    let install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cron";
    let mut out = sh(install);
    if !out.status.success() {
        // Package lists may be missing or stale in a fresh container.
        let update = sh("DEBIAN_FRONTEND=noninteractive apt-get update -qq");
        assert!(
            update.status.success(),
            "apt-get update failed: {}",
            text(&update.stderr)
        );
        out = sh(install);
    }
    assert!(
        out.status.success(),
        "apt-get install cron failed: {}",
        text(&out.stderr)
    );
    cron_binary().expect("cron installed but no cron binary found")
}

/// Pids of running processes named `cron` (zombies excluded).
fn cron_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.split_once(" (")
                    .and_then(|(_, rest)| rest.rsplit_once(") "))
                    .is_some_and(|(comm, state)| comm == "cron" && !state.starts_with('Z'))
            })
        })
        .collect()
}

/// The cron daemon, started by this test if it was not running; stopped again on drop if so.
struct Daemon {
    started: Vec<u32>,
}

impl Daemon {
    fn ensure_running(cron: &Path) -> Daemon {
        if !cron_pids().is_empty() {
            return Daemon {
                started: Vec::new(),
            };
        }
        // Debian's cron daemonises itself; fall back to the init script.
        let out = Command::new(cron).output().expect("start cron");
        if !out.status.success() || !wait_for(Duration::from_secs(10), || !cron_pids().is_empty()) {
            let service = sh("service cron start");
            assert!(
                service.status.success(),
                "cannot start cron: {} {}",
                text(&out.stderr),
                text(&service.stderr)
            );
        }
        assert!(
            wait_for(Duration::from_secs(10), || !cron_pids().is_empty()),
            "the cron daemon is not running"
        );
        Daemon {
            started: cron_pids(),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        for &pid in &self.started {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

/// Root's crontab replaced for the test; the previous one (or none) restored on drop.
struct CrontabGuard {
    previous: Option<Vec<u8>>,
    dir: PathBuf,
}

impl CrontabGuard {
    fn install(content: &str, dir: &Path) -> CrontabGuard {
        let listed = Command::new("crontab")
            .arg("-l")
            .output()
            .expect("crontab -l");
        // `crontab -l` exits 1 with "no crontab for root" when there is none.
        let previous = listed.status.success().then_some(listed.stdout);
        let guard = CrontabGuard {
            previous,
            dir: dir.to_path_buf(),
        };
        let file = dir.join("crontab.test");
        fs::write(&file, content).expect("write crontab");
        let out = Command::new("crontab")
            .arg(&file)
            .output()
            .expect("crontab FILE");
        assert!(
            out.status.success(),
            "crontab refused the adapted crontab.example: {}\n{content}",
            text(&out.stderr)
        );
        guard
    }
}

impl Drop for CrontabGuard {
    fn drop(&mut self) {
        let restored = match &self.previous {
            Some(previous) => {
                let file = self.dir.join("crontab.previous");
                fs::write(&file, previous)
                    .ok()
                    .and_then(|()| Command::new("crontab").arg(&file).status().ok())
            }
            None => Command::new("crontab").arg("-r").status().ok(),
        };
        if !restored.is_some_and(|s| s.success()) {
            eprintln!("WARNING: could not restore root's previous crontab");
        }
    }
}

fn wait_for(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `crontab.example` (a system crontab line, with a user field) made into root's user crontab:
/// the temp database, the built binary, no mail. Everything else is kept as shipped.
fn adapt_example(db: &Path) -> String {
    let mut saw_db = false;
    let mut saw_mailto = false;
    let mut jobs = 0;
    let mut lines = Vec::new();
    for line in EXAMPLE.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            lines.push(line.to_string());
        } else if let Some(value) = trimmed.strip_prefix("RUNNER_DB=") {
            assert!(!value.is_empty());
            saw_db = true;
            lines.push(format!("RUNNER_DB={}", db.display()));
        } else if trimmed.starts_with("MAILTO=") {
            saw_mailto = true;
            lines.push("MAILTO=\"\"".to_string());
        } else if trimmed
            .split_once('=')
            .is_some_and(|(name, _)| !name.contains(char::is_whitespace))
        {
            lines.push(line.to_string()); // SHELL=, PATH= ...
        } else {
            let fields: Vec<&str> = trimmed.split_whitespace().collect();
            assert!(fields.len() >= 7, "unexpected crontab.example line: {line}");
            assert_eq!(
                fields[..5],
                ["*", "*", "*", "*", "*"],
                "runner tick runs every minute"
            );
            let command = &fields[6..];
            assert!(
                command[0].ends_with("/runner") && command.contains(&"tick"),
                "crontab.example runs `runner tick`: {line}"
            );
            // User crontab: no user field; the binary under test.
            let rest = command[1..].join(" ");
            lines.push(format!("* * * * * {BIN} {rest}"));
            jobs += 1;
        }
    }
    assert!(saw_db, "crontab.example sets RUNNER_DB");
    assert!(saw_mailto, "crontab.example sets MAILTO");
    assert_eq!(jobs, 1, "crontab.example has one runner line");
    lines.join("\n") + "\n"
}

fn runner(db: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .env("RUNNER_DB", db)
        .args(args)
        .output()
        .expect("run runner")
}

fn query_i64(db: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.busy_timeout(Duration::from_secs(30)).expect("busy");
    conn.query_row(sql, [], |r| r.get(0)).expect(sql)
}

#[test]
#[ignore = "needs root: installs and starts Debian's cron and replaces root's crontab for ~2 min"]
fn real_cron_runs_tick_and_a_scheduled_run_succeeds() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the real-cron test needs root"
    );
    let cron = ensure_cron_installed();
    let _daemon = Daemon::ensure_running(&cron);

    let dir = tempfile::Builder::new()
        .prefix("runner-cron-")
        .tempdir()
        .expect("tempdir");
    let db = dir.path().join("runner.db");
    let marker = dir.path().join("marker");
    let job = format!("echo \"$RUNNER_RUN_ID\" > '{}'", marker.display());
    let out = runner(
        &db,
        &[
            "schedule",
            "add",
            "cron-marker",
            "--cron",
            "* * * * *",
            "--",
            &job,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let crontab = adapt_example(&db);
    let _crontab = CrontabGuard::install(&crontab, dir.path());
    let started = Instant::now();

    let succeeded = wait_for(BUDGET, || {
        marker.exists()
            && query_i64(
                &db,
                "SELECT count(*) FROM job_runs WHERE trigger = 'schedule' AND status = 'succeeded'",
            ) >= 1
    });
    if !succeeded {
        let history = runner(&db, &["history"]);
        panic!(
            "no scheduled run succeeded within {BUDGET:?}\ncrontab:\n{crontab}\ncron running: {:?}\nhistory:\n{}{}",
            cron_pids(),
            text(&history.stdout),
            text(&history.stderr)
        );
    }
    eprintln!(
        "real cron: scheduled run succeeded {:?} after installing the crontab",
        started.elapsed()
    );

    // Materialised by the schedule, executed by cron's tick, recorded end to end.
    let run_id: i64 = fs::read_to_string(&marker)
        .expect("marker")
        .trim()
        .parse()
        .expect("the job wrote its run id");
    assert_eq!(
        query_i64(
            &db,
            &format!(
                "SELECT count(*) FROM job_runs WHERE id = {run_id} AND trigger = 'schedule'
                 AND status = 'succeeded' AND scheduled_for % 60 = 0"
            )
        ),
        1
    );
    for kind in ["ENQUEUED", "CLAIMED", "SUCCEEDED"] {
        assert_eq!(
            query_i64(
                &db,
                &format!(
                    "SELECT count(*) FROM job_events WHERE run_id = {run_id} AND kind = '{kind}'"
                )
            ),
            1,
            "{kind} event"
        );
    }
    assert!(
        query_i64(
            &db,
            "SELECT count(*) FROM runner_state WHERE key = 'last_tick_at'"
        ) == 1,
        "cron's tick was recorded"
    );
}
