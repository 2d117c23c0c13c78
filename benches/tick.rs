//! What does runner cost on top of just running the commands?
//!
//! `cargo bench --bench tick` drains N due runs of a tiny job with `runner tick` and compares
//! that, side by side, with spawning the same N commands directly (`/bin/sh -c`, same
//! concurrency) — the floor any runner pays. Also: an idle tick (nothing due), materialising a
//! day of missed minutes, and a claim race of several concurrent ticks. Prints a table; asserts
//! nothing about time.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 1000;
const CONCURRENCY: usize = 4;
const JOB: &str = "echo $RUNNER_RUN_ID > /dev/null";

fn runner() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/release/deps/tick-xxxx -> target/release/runner
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("runner")
}

fn cmd(db: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(runner());
    c.env("RUNNER_DB", db).args(args).stdout(Stdio::null());
    c
}

fn ok(mut c: Command) {
    let status = c.status().expect("spawn runner");
    assert!(status.success(), "{c:?} failed");
}

fn setup(dir: &Path, cron: &str) -> std::path::PathBuf {
    let db = dir.join("bench.db");
    ok(cmd(
        &db,
        &[
            "schedule",
            "add",
            "bench",
            "--cron",
            cron,
            "--overlap",
            "allow",
            "--",
            JOB,
        ],
    ));
    db
}

/// Insert `n` due manual runs of schedule `bench` in one transaction.
fn enqueue(db: &Path, n: usize) {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.execute(
        "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command, workdir,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key, created_at)
         SELECT d.id, 'manual', 1000 + i, 'pending', 1000, d.command, d.workdir, d.max_attempts, d.timeout_secs,
             d.backoff_base_secs, d.backoff_max_secs, 'bench:' || i || ':' || random(), 1000
         FROM seq, job_definitions d WHERE d.name = 'bench'",
        [n as i64],
    )
    .expect("insert runs");
}

fn pending(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.query_row(
        "SELECT count(*) FROM job_runs WHERE status IN ('pending', 'running')",
        [],
        |r| r.get(0),
    )
    .expect("count")
}

/// The baseline: the same commands spawned directly, CONCURRENCY at a time.
fn baseline(n: usize) -> Duration {
    let start = Instant::now();
    let mut children = Vec::new();
    for i in 0..n {
        if children.len() == CONCURRENCY {
            let mut child: std::process::Child = children.remove(0);
            child.wait().expect("wait");
        }
        children.push(
            Command::new("/bin/sh")
                .args(["-c", JOB])
                .env("RUNNER_RUN_ID", i.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn sh"),
        );
    }
    for mut child in children {
        child.wait().expect("wait");
    }
    start.elapsed()
}

fn drain(db: &Path, ticks: usize) -> Duration {
    let start = Instant::now();
    while pending(db) > 0 {
        let children: Vec<_> = (0..ticks)
            .map(|_| {
                cmd(
                    db,
                    &[
                        "tick",
                        "--concurrency",
                        &CONCURRENCY.to_string(),
                        "--max-tick",
                        "600s",
                    ],
                )
                .spawn()
                .expect("spawn tick")
            })
            .collect();
        for mut child in children {
            assert!(child.wait().expect("wait").success());
        }
    }
    start.elapsed()
}

fn per_run(d: Duration, n: usize) -> String {
    format!("{:>8.2} ms/run", d.as_secs_f64() * 1000.0 / n as f64)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick { 20 } else { RUNS };
    let dir = tempfile::tempdir().expect("tempdir");

    let base = baseline(runs);

    let db = setup(dir.path(), "0 0 1 1 *");
    enqueue(&db, runs);
    let one_tick = drain(&db, 1);

    enqueue(&db, runs);
    let four_ticks = drain(&db, 4);

    let idle_start = Instant::now();
    let idle_n = if quick { 3 } else { 20 };
    for _ in 0..idle_n {
        ok(cmd(&db, &["tick"]));
    }
    let idle = idle_start.elapsed() / idle_n;

    let dir2 = tempfile::tempdir().expect("tempdir");
    let db2 = dir2.path().join("bench.db");
    ok(cmd(
        &db2,
        &[
            "--now",
            "2026-01-01T00:00:00Z",
            "schedule",
            "add",
            "minutely",
            "--cron",
            "* * * * *",
            "--catch-up",
            "all",
            "--",
            "true",
        ],
    ));
    let catch_up_start = Instant::now();
    // A day of missed minutes: the tick records 1,000 instants (100 run, the rest skipped).
    ok(cmd(
        &db2,
        &["--now", "2026-01-02T00:00:00Z", "tick", "--max-tick", "0s"],
    ));
    let catch_up = catch_up_start.elapsed();

    println!("runner tick benchmark ({runs} runs of `{JOB}`, concurrency {CONCURRENCY})");
    println!(
        "{:<44} {:>10} {:>16} {:>8}",
        "case", "total", "per run", "ratio"
    );
    let row = |name: &str, d: Duration| {
        println!(
            "{:<44} {:>8.3} s {} {:>7.2}x",
            name,
            d.as_secs_f64(),
            per_run(d, runs),
            d.as_secs_f64() / base.as_secs_f64()
        );
    };
    row("baseline: /bin/sh -c directly", base);
    row("runner: 1 tick draining", one_tick);
    row("runner: 4 concurrent ticks draining", four_ticks);
    println!(
        "{:<44} {:>8.1} ms",
        "idle tick (nothing due), whole process",
        idle.as_secs_f64() * 1000.0
    );
    println!(
        "{:<44} {:>8.1} ms",
        "catch-up of a day of minutes (1 tick)",
        catch_up.as_secs_f64() * 1000.0
    );
}
