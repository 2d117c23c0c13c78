//! The benchmark suite: what `runner` costs on top of the work itself, measured side by side with
//! baselines and peers in the same run. `./bench` runs it (see BENCHMARKS.md); `./bench --quick`
//! runs every scenario at small sizes and checks only that the results are right (every run
//! succeeded once, nothing executed twice), which `cargo test` also does, so the suite never rots.
//!
//! Scenarios (sizes at full scale):
//! - S1 drain 10,000 due runs of `true` with one `tick --concurrency 8`, beside `xargs -P8` and a
//!   minimal program (8 threads that only spawn `/bin/sh -c true` and wait), a program that
//!   spawns each job as runner does (gate, pipes, process group, variables) with no database,
//!   and peers;
//! - S2 one tick materialising 100,000 due schedules;
//! - S3 an idle tick (1,000 schedules, nothing due, 1,000,000 finished runs) as cron starts it
//!   (after a pause, recording its heartbeat), and one right after another, each beside
//!   `sqlite3 DB 'select 1'` started the same way;
//! - S4 the latency of one claim transaction (p50/p99) with 0 and 1,000,000 finished runs;
//! - S5 4 concurrent ticks (`--concurrency 2` each: 8 jobs at once, as S1) draining 10,000 runs,
//!   counting duplicate executions;
//! - S6 peak RSS of the S1 and S2 ticks (needs GNU time at /usr/bin/time);
//! - S7 `history --limit 50`, `status`, `metrics` with 1,000,000 runs and with 1,000.
//!
//! S1, S2 and S5 have PostgreSQL rows too, the tick given `--db postgres://...`, when a server is at
//! hand: `RUNNER_BENCH_PG` (or `--db URL`) names one on which the suite may CREATE DATABASE
//! (`./bench` starts a private one with PostgreSQL's default durability); beside S1's the peer
//! pgqueuer drains the same jobs on the same server. Without a server those rows are skipped,
//! with a note.
//!
//! Large histories are seeded with SQL straight into a database `runner init` created (one
//! INSERT ... SELECT per table), not by running jobs. Asserts correctness, never speed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rusqlite::Connection;

/// 2026-01-01T00:00:30Z: the clock S2's tick runs at (`--now`), 30 s after its schedules fired.
const S2_NOW: i64 = 1_767_225_630;
const S2_NOW_TEXT: &str = "2026-01-01T00:00:30Z";

struct Sizes {
    drain: usize,
    schedules: usize,
    idle_schedules: usize,
    history_large: usize,
    history_small: usize,
    claims: usize,
    repeats: usize,
    /// Whole-process timings (S3, S7) are short: more repetitions.
    process_repeats: usize,
}

const FULL: Sizes = Sizes {
    drain: 10_000,
    schedules: 100_000,
    idle_schedules: 1_000,
    history_large: 1_000_000,
    history_small: 1_000,
    claims: 200,
    repeats: 3,
    process_repeats: 11,
};

const QUICK: Sizes = Sizes {
    drain: 200,
    schedules: 1_000,
    idle_schedules: 100,
    history_large: 10_000,
    history_small: 100,
    claims: 20,
    repeats: 1,
    process_repeats: 2,
};

struct Options {
    sizes: Sizes,
    quick: bool,
    peers: bool,
    only: Option<Vec<String>>,
    /// Another runner binary to measure (an older build, for before/after figures).
    runner: Option<PathBuf>,
    /// A PostgreSQL server URL on which the suite may create databases: the PostgreSQL rows.
    postgres: Option<String>,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let options = parse_args()?;
    let runner = match &options.runner {
        Some(path) => {
            std::fs::canonicalize(path).with_context(|| format!("--runner {}", path.display()))?
        }
        None => runner_binary()?,
    };
    let work = tempfile::tempdir().context("creating a temporary directory")?;
    let mut suite = Suite {
        runner,
        work: work.path().to_path_buf(),
        options,
        report: Vec::new(),
    };
    suite.header()?;
    if suite.wants("S1") || suite.wants("S6") {
        suite.s1()?;
    }
    if suite.wants("S1") {
        suite.s1_postgres()?;
    }
    if suite.wants("S2") || suite.wants("S6") {
        suite.s2()?;
    }
    if suite.wants("S2") {
        suite.s2_postgres()?;
    }
    if suite.wants("S3") || suite.wants("S4") || suite.wants("S7") {
        suite.history_scenarios()?;
    }
    if suite.wants("S5") {
        suite.s5()?;
    }
    suite.print_summary();
    Ok(())
}

fn parse_args() -> Result<Options> {
    // `cargo test` runs this target without arguments: the quick check, no peers.
    let mut quick = true;
    let mut peers = None;
    let mut only = None;
    let mut repeats = None;
    let mut runner = None;
    let mut postgres = std::env::var("RUNNER_BENCH_PG")
        .ok()
        .filter(|url| !url.is_empty());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--full" => quick = false,
            "--quick" => quick = true,
            "--peers" => peers = Some(true),
            "--no-peers" => peers = Some(false),
            "--only" => {
                let list = args.next().context("--only needs a list such as S1,S3")?;
                only = Some(list.split(',').map(|s| s.trim().to_uppercase()).collect());
            }
            "--repeats" => {
                let n = args.next().context("--repeats needs a number")?;
                repeats = Some(n.parse::<usize>().context("--repeats needs a number")?);
            }
            "--runner" => runner = Some(PathBuf::from(args.next().context("--runner needs a path")?)),
            "--db" => {
                let url = args.next().context("--db needs a postgres:// URL")?;
                ensure!(
                    url.starts_with("postgres://") || url.starts_with("postgresql://"),
                    "--db {url}: give a PostgreSQL server URL (postgres://USER@HOST:PORT/DB) on \
                     which the suite may create databases; SQLite rows use temporary files"
                );
                postgres = Some(url);
            }
            "--no-postgres" => postgres = None,
            // What cargo passes to bench targets.
            "--bench" => {}
            other => bail!("unknown argument {other:?} (try --full, --quick, --only S1,S2, --repeats N, --peers, --no-peers, --runner PATH, --db URL, --no-postgres)"),
        }
    }
    let mut sizes = if quick { QUICK } else { FULL };
    if let Some(n) = repeats {
        ensure!(n >= 1, "--repeats must be at least 1");
        sizes.repeats = n;
        sizes.process_repeats = sizes.process_repeats.max(n);
    }
    Ok(Options {
        sizes,
        quick,
        peers: peers.unwrap_or(!quick),
        only,
        runner,
        postgres,
    })
}

/// target/release/runner, next to this benchmark's own directory (target/release/deps/).
fn runner_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let runner = exe
        .parent()
        .and_then(Path::parent)
        .context("locating the target directory")?
        .join("runner");
    ensure!(
        runner.exists(),
        "{} is missing: run `cargo build --release` (./bench does)",
        runner.display()
    );
    Ok(runner)
}

/// A peer: a Python script in benches/peers/ that drains N jobs of `sh -c true`, WORKERS at a
/// time, from a queue it is given (`SCRIPT QUEUE N WORKERS`), and prints the seconds it took.
struct Peer {
    /// The module to import, and the name of its virtual environment.
    module: &'static str,
    /// What pip installs there.
    requirements: &'static [&'static str],
    script: &'static str,
    label: &'static str,
}

const HUEY: Peer = Peer {
    module: "huey",
    requirements: &["huey>=2.5,<3"],
    script: "huey_drain.py",
    label: "peer: huey 2.x, SQLite storage, 8 threads",
};

/// On the PostgreSQL server of the PostgreSQL rows, in a database of its own.
const PGQUEUER: Peer = Peer {
    module: "pgqueuer",
    requirements: &["pgqueuer>=1,<2", "asyncpg"],
    script: "pgqueuer_drain.py",
    label: "peer: pgqueuer 1.x, same PostgreSQL, 8 at a time",
};

/// `runner schedule add` of the drains' schedule `bench`, which never fires by itself (its runs
/// are seeded); the command follows.
const ADD_BENCH: [&str; 8] = [
    "schedule",
    "add",
    "bench",
    "--cron",
    "0 0 1 1 *",
    "--overlap",
    "allow",
    "--",
];

/// One measured line of the report.
struct Line {
    scenario: &'static str,
    label: String,
    /// Samples in the line's unit.
    samples: Vec<f64>,
    unit: &'static str,
    /// "runner / reference" wording, when the line is compared with another of the same run.
    ratio: Option<(f64, String)>,
}

struct Suite {
    runner: PathBuf,
    work: PathBuf,
    options: Options,
    report: Vec<Line>,
}

/// A scenario's database: a temporary SQLite file, or a database on the PostgreSQL server, which
/// the runner is given with `--db URL`.
enum BenchDb {
    Sqlite(PathBuf),
    Postgres(String),
}

impl BenchDb {
    /// What `RUNNER_DB` names.
    fn location(&self) -> &OsStr {
        match self {
            BenchDb::Sqlite(path) => path.as_os_str(),
            BenchDb::Postgres(url) => OsStr::new(url),
        }
    }

    /// A runner command line on it: `--db URL` first for PostgreSQL.
    fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = match self {
            BenchDb::Sqlite(_) => Vec::new(),
            BenchDb::Postgres(url) => vec!["--db", url.as_str()],
        };
        all.extend_from_slice(args);
        all
    }

    fn check_drained(&self, n: usize) -> Result<()> {
        match self {
            BenchDb::Sqlite(path) => check_drained(path, n),
            BenchDb::Postgres(url) => pg_check_drained(url, n),
        }
    }

    /// S2's check: `n` pending runs, one per schedule, all for the instant that was due.
    fn check_materialised(&self, n: usize) -> Result<()> {
        let sql = "SELECT count(*), count(DISTINCT definition_id),
                          count(*) FILTER (WHERE status = 'pending' AND scheduled_for = $1)
                   FROM job_runs";
        let due = S2_NOW - 30;
        let (runs, schedules, pending): (i64, i64, i64) = match self {
            BenchDb::Sqlite(path) => Connection::open(path)?
                .query_row(sql, [due], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?,
            BenchDb::Postgres(url) => {
                let row =
                    postgres::Client::connect(url, postgres::NoTls)?.query_one(sql, &[&due])?;
                (row.get(0), row.get(1), row.get(2))
            }
        };
        ensure!(
            (runs, schedules, pending) == (n as i64, n as i64, n as i64),
            "S2: expected {n} pending runs, one per schedule, found {runs} runs of {schedules} \
             schedules ({pending} pending for the due instant)"
        );
        Ok(())
    }
}

impl Suite {
    fn wants(&self, scenario: &str) -> bool {
        self.options
            .only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }

    fn header(&self) -> Result<()> {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let commit = Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let mode = if self.options.quick {
            "quick (small sizes; checks results, not speed)"
        } else {
            "full"
        };
        println!(
            "runner benchmark suite: {mode}; {cores} cores; commit {commit}; {} repetitions (median, min-max)",
            self.options.sizes.repeats
        );
        Ok(())
    }

    /// The runner with `RUNNER_DB` set: a SQLite path, or a postgres:// URL.
    fn runner_cmd(&self, db: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(&self.runner);
        c.env("RUNNER_DB", db)
            .env_remove("RUNNER_RETENTION")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    fn runner_ok(&self, db: impl AsRef<OsStr>, args: &[&str]) -> Result<()> {
        let output = self
            .runner_cmd(db)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running runner {args:?}"))?;
        ensure!(
            output.status.success(),
            "runner {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    fn fresh_db(&self, name: &str) -> Result<PathBuf> {
        let db = self.work.join(format!("{name}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        self.runner_ok(&db, &["init"])?;
        Ok(db)
    }

    fn add_line(&mut self, line: Line) {
        print_line(&line);
        self.report.push(line);
    }

    // ---- S1 (and S6 for its tick) ----

    fn s1(&mut self) -> Result<()> {
        let n = self.options.sizes.drain;
        println!("\nS1: drain {n} due runs of `true`, 8 at a time");
        let mut xargs = Vec::new();
        let mut minimal = Vec::new();
        let mut like_runner = Vec::new();
        let mut runner = Vec::new();
        let mut rss = Vec::new();
        for _ in 0..self.options.sizes.repeats {
            xargs.push(rate(n, time(|| xargs_true(n))?));
            minimal.push(rate(n, time(|| spawn_and_wait(n, 8))?));
            like_runner.push(rate(n, time(|| spawn_as_runner_does(n, 8))?));
            let db = self.drain_db("s1", n, "true")?;
            let (elapsed, peak) =
                self.timed_tick(&db, &["tick", "--concurrency", "8", "--max-tick", "1h"])?;
            check_drained(&db, n)?;
            runner.push(rate(n, elapsed));
            rss.extend(peak);
        }
        let fastest = median(&xargs).max(median(&minimal));
        let ratio = |samples: &[f64]| Some((median(samples) / fastest, "faster baseline".into()));
        let r = ratio(&runner);
        self.add_line(Line {
            scenario: "S1",
            label: "runner tick --concurrency 8".into(),
            samples: runner.clone(),
            unit: "jobs/s",
            ratio: r,
        });
        let r = ratio(&xargs);
        self.add_line(Line {
            scenario: "S1",
            label: "xargs -P8 sh -c true (no bookkeeping)".into(),
            samples: xargs,
            unit: "jobs/s",
            ratio: r,
        });
        let r = ratio(&minimal);
        self.add_line(Line {
            scenario: "S1",
            label: "8 threads spawning sh -c true".into(),
            samples: minimal,
            unit: "jobs/s",
            ratio: r,
        });
        // Not a floor (the faster baseline is): what the bookkeeping adds is runner against it.
        let r = ratio(&like_runner);
        let bookkeeping = median(&runner) / median(&like_runner);
        self.add_line(Line {
            scenario: "S1",
            label: "8 threads spawning as runner does, no database".into(),
            samples: like_runner.clone(),
            unit: "jobs/s",
            ratio: r,
        });
        // Wall time each job adds to the drain over the faster baseline, at the same concurrency.
        let overhead_us = (1.0 / median(&runner) - 1.0 / fastest) * 1e6;
        let bookkeeping_us = (1.0 / median(&runner) - 1.0 / median(&like_runner)) * 1e6;
        println!("    runner adds about {overhead_us:.0} us of wall time per job to the drain");
        println!(
            "    runner / spawning as runner does: {bookkeeping:.2} (the database's share: about \
             {bookkeeping_us:.0} us per job)"
        );
        if self.options.peers {
            self.peers(n, median(&runner))?;
        }
        if !rss.is_empty() {
            self.add_line(Line {
                scenario: "S6",
                label: format!("peak RSS of the S1 tick ({n} runs)"),
                samples: rss,
                unit: "MB",
                ratio: None,
            });
        }
        Ok(())
    }

    /// A database holding `n` due manual runs of one schedule (that never fires by itself)
    /// whose command is `command`.
    fn drain_db(&self, name: &str, n: usize, command: &str) -> Result<PathBuf> {
        let db = self.fresh_db(name)?;
        let mut add = ADD_BENCH.to_vec();
        add.push(command);
        self.runner_ok(&db, &add)?;
        let conn = Connection::open(&db)?;
        conn.execute(
            "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
             INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
                 workdir, max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
                 idempotency_key, created_at)
             SELECT d.id, 'manual', ?2, 'pending', ?2, d.command, d.workdir, d.max_attempts,
                 d.timeout_secs, d.backoff_base_secs, d.backoff_max_secs, 'bench:' || i, ?2
             FROM seq, job_definitions d WHERE d.name = 'bench'",
            rusqlite::params![n as i64, epoch_now() - 5],
        )?;
        Ok(db)
    }

    /// Run one runner command to its end: its wall time, and its peak RSS in MB when GNU time
    /// is there to tell.
    fn timed_tick(&self, db: impl AsRef<OsStr>, args: &[&str]) -> Result<(Duration, Option<f64>)> {
        let gnu_time = Path::new("/usr/bin/time");
        let rss_file = self.work.join("rss");
        let mut cmd = if gnu_time.exists() {
            let mut c = Command::new(gnu_time);
            c.arg("-f")
                .arg("%M")
                .arg("-o")
                .arg(&rss_file)
                .arg(&self.runner)
                .env("RUNNER_DB", db.as_ref())
                .env_remove("RUNNER_RETENTION")
                .stdout(Stdio::null());
            c
        } else {
            self.runner_cmd(db)
        };
        cmd.args(args).stderr(Stdio::piped());
        let start = Instant::now();
        let output = cmd.output().context("running a tick")?;
        let elapsed = start.elapsed();
        ensure!(
            output.status.success(),
            "runner {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rss = std::fs::read_to_string(&rss_file)
            .ok()
            .and_then(|s| s.trim().lines().last()?.trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0);
        Ok((elapsed, rss))
    }

    fn peers(&mut self, n: usize, runner_rate: f64) -> Result<()> {
        let work = self.work.clone();
        self.peer(&HUEY, n, runner_rate, |i| {
            Ok(work.join(format!("huey-{i}.db")).display().to_string())
        })
    }

    /// Run `peer` `repeats` times on `n` jobs, 8 at a time, its queue (a file, a database URL)
    /// given by `queue(repetition)`; report its rate and runner's against it.
    fn peer(
        &mut self,
        peer: &Peer,
        n: usize,
        runner_rate: f64,
        queue: impl Fn(usize) -> Result<String>,
    ) -> Result<()> {
        let python = match peer_python(&runner_binary()?, peer.module, peer.requirements) {
            Ok(python) => python,
            Err(why) => {
                println!("    {}: not installed ({why}); skipped", peer.module);
                return Ok(());
            }
        };
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches/peers")
            .join(peer.script);
        let mut samples = Vec::new();
        for i in 0..self.options.sizes.repeats {
            let output = Command::new(&python)
                .arg(&script)
                .arg(queue(i)?)
                .arg(n.to_string())
                .arg("8")
                .output()
                .with_context(|| format!("running the {} peer", peer.module))?;
            ensure!(
                output.status.success(),
                "the {} peer failed: {}",
                peer.module,
                String::from_utf8_lossy(&output.stderr)
            );
            let secs: f64 = String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse()
                .with_context(|| format!("reading the {} peer's time", peer.module))?;
            samples.push(n as f64 / secs);
        }
        let ratio = runner_rate / median(&samples);
        self.add_line(Line {
            scenario: "S1",
            label: peer.label.into(),
            samples,
            unit: "jobs/s",
            ratio: None,
        });
        println!("    runner / {}: {ratio:.2}", peer.module);
        Ok(())
    }

    // ---- S2 (and S6 for its tick) ----

    fn s2(&mut self) -> Result<()> {
        self.s2_on(None)
    }

    fn s2_postgres(&mut self) -> Result<()> {
        let Some(server) = self.postgres_server("S2") else {
            return Ok(());
        };
        self.s2_on(Some(&server))?;
        pg_drop(&server, "runner_bench_s2")
    }

    /// S2 on SQLite, or on the PostgreSQL `server`.
    fn s2_on(&mut self, server: Option<&str>) -> Result<()> {
        let n = self.options.sizes.schedules;
        let on = match server {
            None => String::new(),
            Some(server) => format!(" on PostgreSQL ({})", pg_settings(server)?),
        };
        println!("\nS2{on}: one tick materialising {n} due schedules");
        let mut rates = Vec::new();
        let mut secs = Vec::new();
        let mut rss = Vec::new();
        for _ in 0..self.options.sizes.repeats {
            let db = self.s2_db(server, n)?;
            let args = db.args(&["--now", S2_NOW_TEXT, "tick", "--max-tick", "0s"]);
            let (elapsed, peak) = self.timed_tick(db.location(), &args)?;
            db.check_materialised(n)?;
            rates.push(n as f64 / elapsed.as_secs_f64());
            secs.push(elapsed.as_secs_f64());
            rss.extend(peak);
        }
        let backend = if server.is_some() { ", PostgreSQL" } else { "" };
        self.add_line(Line {
            scenario: "S2",
            label: format!("materialise {n} schedules, whole tick{backend}"),
            samples: secs,
            unit: "s",
            ratio: None,
        });
        self.add_line(Line {
            scenario: "S2",
            label: format!("materialisation rate{backend}"),
            samples: rates,
            unit: "rows/s",
            ratio: None,
        });
        if !rss.is_empty() {
            self.add_line(Line {
                scenario: "S6",
                label: format!("peak RSS of the S2 tick ({n} schedules){backend}"),
                samples: rss,
                unit: "MB",
                ratio: None,
            });
        }
        Ok(())
    }

    /// A fresh database holding `n` every-minute schedules, due 30 s before `S2_NOW`, as a tick
    /// a minute before `S2_NOW` left it (`ticked_at`).
    fn s2_db(&self, server: Option<&str>, n: usize) -> Result<BenchDb> {
        let (through, due) = (S2_NOW - 60, S2_NOW - 30);
        Ok(match server {
            None => {
                let db = self.fresh_db("s2")?;
                seed_definitions(&db, n, through, Some(due), "* * * * *")?;
                Connection::open(&db)?.execute_batch(&ticked_at(through))?;
                BenchDb::Sqlite(db)
            }
            Some(server) => {
                let url = self.pg_fresh_db(server, "runner_bench_s2")?;
                let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
                client.execute(
                    "INSERT INTO job_definitions (name, cron, timezone, command,
                         materialized_through, next_fire_at, created_at, updated_at)
                     SELECT 'job-' || i, '* * * * *', 'UTC', 'true', $2, $3, $2, $2
                     FROM generate_series(1, $1::bigint) i",
                    &[&(n as i64), &through, &due],
                )?;
                client.batch_execute(&ticked_at(through))?;
                BenchDb::Postgres(url)
            }
        })
    }

    // ---- S3, S7, S4: one large and one small history ----

    fn history_scenarios(&mut self) -> Result<()> {
        let sizes = &self.options.sizes;
        let (large_n, small_n, schedules) = (
            sizes.history_large,
            sizes.history_small,
            sizes.idle_schedules,
        );
        let start = Instant::now();
        let large = self.fresh_db("large")?;
        seed_history(&large, schedules, large_n)?;
        self.fold_as_an_hourly_tick_would(&large)?;
        let small = self.fresh_db("small")?;
        seed_history(&small, schedules, small_n)?;
        self.fold_as_an_hourly_tick_would(&small)?;
        println!(
            "\n(seeded {large_n} and {small_n} finished runs, {schedules} schedules, in {:.1} s)",
            start.elapsed().as_secs_f64()
        );
        if self.wants("S3") {
            self.s3(&large, large_n, schedules)?;
        }
        if self.wants("S7") {
            self.s7(&large, &small, large_n, small_n)?;
        }
        if self.wants("S4") {
            self.s4(&large, large_n)?;
        }
        Ok(())
    }

    /// A database this old has had its run tally folded by the hourly tick: let a tick of the
    /// runner under test do it now (its last fold marked two hours ago). Through the binary, not
    /// this suite's own store, which would migrate the database past an older `--runner`'s
    /// schema; a runner from before the tally has none to fold. The tick also takes the hour's
    /// automatic-prune turn (nothing is past retention), so S3 measures idle ticks only.
    fn fold_as_an_hourly_tick_would(&self, db: &Path) -> Result<()> {
        let conn = Connection::open(db)?;
        let has_tally: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'job_run_tally')",
            [],
            |r| r.get(0),
        )?;
        if !has_tally {
            return Ok(());
        }
        conn.execute(
            "UPDATE runner_state SET value = ?1 WHERE key = 'tally_folded_at'",
            [epoch_now() - 7200],
        )?;
        drop(conn);
        self.runner_ok(db, &["tick"])?;
        let folded: bool = Connection::open(db)?.query_row(
            "SELECT (SELECT value FROM runner_state WHERE key = 'tally_through')
                    = (SELECT max(id) FROM job_runs)",
            [],
            |r| r.get(0),
        )?;
        ensure!(folded, "the seeded history was not folded by a tick");
        Ok(())
    }

    /// Two kinds of idle tick, each beside `sqlite3 DB 'select 1'` started the same way:
    /// - as cron starts it: after a pause (here a second; cron's is a minute), recording its
    ///   heartbeat (`last_tick_at`), which is a write: appended to the `-wal` the tick before left,
    ///   unsynced, and left there (runner's builds before this one checkpointed it into the
    ///   database on close and removed it: four fsyncs). This is the S3 figure.
    /// - right after another, in the same second: the heartbeat is current, nothing is written,
    ///   and the process runs warm. Until this suite measured both, S3 was this one.
    fn s3(&mut self, db: &Path, history: usize, schedules: usize) -> Result<()> {
        println!("\nS3: idle tick, {schedules} schedules, nothing due, {history} finished runs");
        let repeats = self.options.sizes.process_repeats;
        let before = run_count(db)?;
        let has_sqlite3 = which("sqlite3");
        if !has_sqlite3 {
            println!("    sqlite3 CLI not found: no baseline (apt-get install sqlite3)");
        }
        let sqlite3 = || {
            time(|| {
                let status = Command::new("sqlite3")
                    .arg(db)
                    .arg("select 1")
                    .stdout(Stdio::null())
                    .status()?;
                ensure!(status.success(), "sqlite3 failed");
                Ok(())
            })
            .map(ms)
        };
        let (mut cron, mut cron_cpu, mut again) = (Vec::new(), Vec::new(), Vec::new());
        let (mut baseline, mut baseline_again) = (Vec::new(), Vec::new());
        let mut heartbeat = last_tick_at(db);
        for _ in 0..repeats {
            wait_for_the_next_second();
            let cpu_before = children_cpu_ms()?;
            cron.push(ms(time(|| self.runner_ok(db, &["tick"]))?));
            cron_cpu.push(children_cpu_ms()? - cpu_before);
            let recorded = last_tick_at(db);
            ensure!(
                recorded > heartbeat || recorded.is_none(),
                "S3: an idle tick after a pause did not record its heartbeat"
            );
            heartbeat = recorded;
            again.push(ms(time(|| self.runner_ok(db, &["tick"]))?));
            if has_sqlite3 {
                wait_for_the_next_second();
                baseline.push(sqlite3()?);
                baseline_again.push(sqlite3()?);
            }
        }
        ensure!(
            run_count(db)? == before,
            "S3: an idle tick changed the number of runs"
        );
        let ratio = |samples: &[f64], of: &[f64]| {
            has_sqlite3.then(|| {
                (
                    median(samples) / median(of),
                    "sqlite3 'select 1'".to_string(),
                )
            })
        };
        let lines = [
            (
                "runner tick as cron starts it (a pause before; records its heartbeat)",
                ratio(&cron, &baseline),
                cron,
            ),
            ("  its CPU time (user + sys)", None, cron_cpu),
            (
                "runner tick right after another (nothing to write)",
                ratio(&again, &baseline_again),
                again,
            ),
        ];
        for (label, ratio, samples) in lines {
            self.add_line(Line {
                scenario: "S3",
                label: label.into(),
                samples,
                unit: "ms",
                ratio,
            });
        }
        if has_sqlite3 {
            for (label, samples) in [
                ("sqlite3 DB 'select 1' after a pause", baseline),
                ("sqlite3 DB 'select 1' right after another", baseline_again),
            ] {
                self.add_line(Line {
                    scenario: "S3",
                    label: label.into(),
                    samples,
                    unit: "ms",
                    ratio: None,
                });
            }
        }
        Ok(())
    }

    fn s7(&mut self, large: &Path, small: &Path, large_n: usize, small_n: usize) -> Result<()> {
        println!("\nS7: reading commands with {large_n} vs {small_n} runs");
        let repeats = self.options.sizes.process_repeats;
        for args in [
            &["history", "--limit", "50"][..],
            &["status"][..],
            &["metrics"][..],
        ] {
            let mut big = Vec::new();
            let mut little = Vec::new();
            for _ in 0..repeats {
                big.push(ms(time(|| self.runner_ok(large, args))?));
                little.push(ms(time(|| self.runner_ok(small, args))?));
            }
            let ratio = Some((median(&big) / median(&little), format!("{small_n} runs")));
            self.add_line(Line {
                scenario: "S7",
                label: format!("runner {} ({large_n} runs)", args.join(" ")),
                samples: big,
                unit: "ms",
                ratio,
            });
            self.add_line(Line {
                scenario: "S7",
                label: format!("runner {} ({small_n} runs)", args.join(" ")),
                samples: little,
                unit: "ms",
                ratio: None,
            });
        }
        Ok(())
    }

    fn s4(&mut self, large: &Path, history: usize) -> Result<()> {
        let claims = self.options.sizes.claims;
        println!("\nS4: latency of one claim transaction ({claims} claims of one run each)");
        let empty = self.drain_db("s4-empty", claims, "true")?;
        add_pending(large, claims, self.options.sizes.idle_schedules)?;
        let mut lines = Vec::new();
        for (db, what) in [
            (empty.as_path(), "0 finished runs".to_string()),
            (large, format!("{history} finished runs")),
        ] {
            let latencies = claim_latencies(db, claims)?;
            lines.push((what, latencies));
        }
        let p99_empty = percentile(&lines[0].1, 0.99);
        for (what, latencies) in lines {
            let p50 = percentile(&latencies, 0.50);
            let p99 = percentile(&latencies, 0.99);
            self.add_line(Line {
                scenario: "S4",
                label: format!("claim p50, {what}"),
                samples: vec![p50],
                unit: "ms",
                ratio: None,
            });
            self.add_line(Line {
                scenario: "S4",
                label: format!("claim p99, {what}"),
                samples: vec![p99],
                unit: "ms",
                ratio: Some((p99 / p99_empty, "p99 with 0 runs".into())),
            });
        }
        Ok(())
    }

    // ---- S5 ----

    fn s5(&mut self) -> Result<()> {
        self.s5_on(None)?;
        if let Some(server) = self.postgres_server("S5") {
            self.s5_on(Some(&server))?;
            pg_drop(&server, "runner_bench_s5")?;
            pg_drop(&server, "runner_bench_s5_one")?;
        }
        Ok(())
    }

    /// S5 on a SQLite file (`server` None), or on a database of the PostgreSQL server.
    fn s5_on(&mut self, server: Option<&str>) -> Result<()> {
        let n = self.options.sizes.drain;
        let (on, suffix) = match server {
            None => (String::new(), ""),
            Some(server) => (
                format!(" on PostgreSQL ({})", pg_settings(server)?),
                ", PostgreSQL",
            ),
        };
        println!("\nS5{on}: 4 concurrent ticks (--concurrency 2 each) draining {n} runs");
        let mut four = Vec::new();
        let mut one = Vec::new();
        for i in 0..self.options.sizes.repeats {
            let log = self.work.join(format!("s5-{i}.log"));
            let _ = std::fs::remove_file(&log);
            let command = format!("echo $RUNNER_RUN_ID >> {}", log.display());
            let db = self.drain(server, "s5", n, &command)?;
            let elapsed = time(|| {
                let ticks = (0..4)
                    .map(|host| {
                        let owner = format!("host-{host}");
                        self.runner_cmd(db.location())
                            .args(db.args(&["tick", "--owner", &owner, "--concurrency", "2"]))
                            .args(["--max-tick", "1h"])
                            .stderr(Stdio::piped())
                            .spawn()
                            .context("starting a tick")
                    })
                    .collect::<Result<Vec<_>>>()?;
                for t in ticks {
                    let output = t.wait_with_output()?;
                    ensure!(
                        output.status.success(),
                        "a tick failed: {}",
                        String::from_utf8_lossy(&output.stderr)
                    );
                }
                Ok(())
            })?;
            db.check_drained(n)?;
            check_executed_once(&log, n)?;
            four.push(rate(n, elapsed));
            // The single-tick reference, on the same command.
            let _ = std::fs::remove_file(&log);
            let db = self.drain(server, "s5-one", n, &command)?;
            let args = db.args(&["tick", "--concurrency", "8", "--max-tick", "1h"]);
            let elapsed = time(|| self.runner_ok(db.location(), &args))?;
            db.check_drained(n)?;
            check_executed_once(&log, n)?;
            one.push(rate(n, elapsed));
        }
        let ratio = Some((median(&four) / median(&one), "one tick".into()));
        self.add_line(Line {
            scenario: "S5",
            label: format!("4 ticks x --concurrency 2, 0 duplicates{suffix}"),
            samples: four,
            unit: "jobs/s",
            ratio,
        });
        self.add_line(Line {
            scenario: "S5",
            label: format!("1 tick x --concurrency 8 (same jobs){suffix}"),
            samples: one,
            unit: "jobs/s",
            ratio: None,
        });
        Ok(())
    }

    /// `drain_db` on a SQLite file (`server` None), or `pg_drain_db` on the server.
    fn drain(&self, server: Option<&str>, name: &str, n: usize, command: &str) -> Result<BenchDb> {
        Ok(match server {
            None => BenchDb::Sqlite(self.drain_db(name, n, command)?),
            Some(server) => {
                let name = format!("runner_bench_{}", name.replace('-', "_"));
                BenchDb::Postgres(self.pg_drain_db(server, &name, n, command)?)
            }
        })
    }

    // ---- the PostgreSQL rows of S1 and S5 (S2's are `s2_on`) ----

    /// The PostgreSQL server, or `None` after saying the rows of `scenario` are skipped.
    fn postgres_server(&self, scenario: &str) -> Option<String> {
        let server = self.options.postgres.clone();
        if server.is_none() {
            println!(
                "\n{scenario} on PostgreSQL: skipped, no server (./bench starts one; or set \
                 RUNNER_BENCH_PG or give --db postgres://...)"
            );
        }
        server
    }

    /// A fresh database `name` on the server, its schema made by `runner init`; its URL.
    fn pg_fresh_db(&self, server: &str, name: &str) -> Result<String> {
        let url = pg_recreate(server, name)?;
        self.runner_ok(&url, &["--db", &url, "init"])?;
        Ok(url)
    }

    /// As `drain_db`, on PostgreSQL.
    fn pg_drain_db(&self, server: &str, name: &str, n: usize, command: &str) -> Result<String> {
        let url = self.pg_fresh_db(server, name)?;
        let mut add = vec!["--db", url.as_str()];
        add.extend(ADD_BENCH);
        add.push(command);
        self.runner_ok(&url, &add)?;
        let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
        client.execute(
            "INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
                 workdir, max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
                 idempotency_key, created_at)
             SELECT d.id, 'manual', $2, 'pending', $2, d.command, d.workdir, d.max_attempts,
                 d.timeout_secs, d.backoff_base_secs, d.backoff_max_secs, 'bench:' || i, $2
             FROM generate_series(1, $1::bigint) i, job_definitions d WHERE d.name = 'bench'",
            &[&(n as i64), &(epoch_now() - 5)],
        )?;
        Ok(url)
    }

    fn s1_postgres(&mut self) -> Result<()> {
        let Some(server) = self.postgres_server("S1") else {
            return Ok(());
        };
        let n = self.options.sizes.drain;
        println!(
            "\nS1 on PostgreSQL ({}): drain {n} due runs of `true`, 8 at a time",
            pg_settings(&server)?
        );
        let mut runner = Vec::new();
        for _ in 0..self.options.sizes.repeats {
            let db = self.drain(Some(&server), "s1", n, "true")?;
            let args = db.args(&["tick", "--concurrency", "8", "--max-tick", "1h"]);
            let (elapsed, _) = self.timed_tick(db.location(), &args)?;
            db.check_drained(n)?;
            runner.push(rate(n, elapsed));
        }
        pg_drop(&server, "runner_bench_s1")?;
        let runner_rate = median(&runner);
        self.add_line(Line {
            scenario: "S1",
            label: "runner tick --concurrency 8, PostgreSQL".into(),
            samples: runner,
            unit: "jobs/s",
            ratio: None,
        });
        if self.options.peers {
            self.peer(&PGQUEUER, n, runner_rate, |_| {
                pg_recreate(&server, "runner_bench_pgqueuer")
            })?;
            pg_drop(&server, "runner_bench_pgqueuer")?;
        }
        Ok(())
    }

    fn print_summary(&self) {
        println!("\nsummary (median, min-max; ratio against the named line of the same run)");
        println!("| id | measurement | median | min-max | ratio |\n|---|---|---|---|---|");
        for line in &self.report {
            let (lo, hi) = min_max(&line.samples);
            let ratio = line
                .ratio
                .as_ref()
                .map_or(String::new(), |(r, of)| format!("{r:.2} x {of}"));
            println!(
                "| {} | {} | {} {} | {}-{} | {} |",
                line.scenario,
                line.label.trim(),
                fmt(median(&line.samples)),
                line.unit,
                fmt(lo),
                fmt(hi),
                ratio
            );
        }
    }
}

fn print_line(line: &Line) {
    let (lo, hi) = min_max(&line.samples);
    let ratio = line
        .ratio
        .as_ref()
        .map_or(String::new(), |(r, of)| format!("  {r:.2} x {of}"));
    println!(
        "  {:<52} {:>10} {:<6} ({}-{}){}",
        line.label,
        fmt(median(&line.samples)),
        line.unit,
        fmt(lo),
        fmt(hi),
        ratio
    );
}

fn fmt(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn time(f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed())
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(samples: &[f64]) -> f64 {
    percentile(samples, 0.5)
}

/// The nearest-rank percentile.
fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn min_max(samples: &[f64]) -> (f64, f64) {
    samples
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &s| {
            (lo.min(s), hi.max(s))
        })
}

#[allow(clippy::disallowed_methods)] // the bench seeds rows relative to the real clock
fn epoch_now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The CPU time (user + sys, ms) of this process's children that have ended and been waited
/// for: read before and after one of them runs, the difference is that child's own, to the
/// microsecond.
/// The heartbeat a tick records, `None` where the schema keeps none (an older `--runner`).
/// Read-only, so this look does not checkpoint the `-wal` an idle tick leaves for the next one,
/// which would make the next tick create a new `-wal`, unlike cron's next tick.
fn last_tick_at(db: &Path) -> Option<i64> {
    let conn = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row(
        "SELECT value FROM runner_state WHERE key = 'last_tick_at'",
        [],
        |r| r.get(0),
    )
    .ok()
}

/// Sleep into the next second of the wall clock (and a little past its start), where a tick
/// finds its heartbeat a second old.
#[allow(clippy::disallowed_methods)] // the real clock: the tick under test reads it too
fn wait_for_the_next_second() {
    let into_second = Duration::from_nanos(u64::from(chrono::Utc::now().timestamp_subsec_nanos()));
    std::thread::sleep(
        Duration::from_secs(1).saturating_sub(into_second) + Duration::from_millis(10),
    );
}

fn children_cpu_ms() -> Result<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage")?;
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
    Ok(ms(usage.user_time()) + ms(usage.system_time()))
}

/// The floor without bookkeeping, 1: `xargs -P8` running `sh -c true` `n` times.
fn xargs_true(n: usize) -> Result<()> {
    let status = Command::new("sh")
        .args(["-c", &format!("seq {n} | xargs -P8 -I{{}} sh -c true")])
        .status()?;
    ensure!(status.success(), "xargs failed");
    Ok(())
}

/// Not a floor: `slots` threads that spawn each `sh -c true` with the process handling runner
/// gives every job, and no database: its own process group, runner's seven `RUNNER_*` variables
/// added to the environment, stdout and stderr piped and read to their end, stdin a pipe the
/// shell reads one line from before it runs the command (runner's start gate, opened at once
/// here). Runner against this line is what its bookkeeping costs.
fn spawn_as_runner_does(n: usize, slots: usize) -> Result<()> {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    on_threads(n, slots, |i| {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "read -r gate || exit 125; exec </dev/null; true"])
            .process_group(0)
            .envs([
                ("RUNNER_JOB", "bench".to_string()),
                ("RUNNER_RUN_ID", i.to_string()),
                ("RUNNER_ATTEMPT", "1".to_string()),
                ("RUNNER_SCHEDULED_AT", "2026-11-28T10:00:00Z".to_string()),
                ("RUNNER_IDEMPOTENCY_KEY", format!("bench:{i}")),
                ("RUNNER_LEASE_TOKEN", format!("{i:032x}")),
                ("RUNNER_DATABASE", "/var/lib/runner/runner.db".to_string()),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut gate = child.stdin.take().context("no stdin pipe")?;
        gate.write_all(b"\n")?;
        drop(gate);
        // `true` writes nothing: one pipe after the other cannot block.
        let mut output = Vec::new();
        child
            .stdout
            .take()
            .context("no stdout pipe")?
            .read_to_end(&mut output)?;
        child
            .stderr
            .take()
            .context("no stderr pipe")?
            .read_to_end(&mut output)?;
        ensure!(child.wait()?.success(), "sh -c true failed");
        Ok(())
    })
}

/// The floor without bookkeeping, 2: `slots` threads of this process that only spawn
/// `/bin/sh -c true` and wait for it, `n` times in all.
fn spawn_and_wait(n: usize, slots: usize) -> Result<()> {
    on_threads(n, slots, |_| {
        let status = Command::new("/bin/sh")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .status()?;
        ensure!(status.success(), "sh -c true failed");
        Ok(())
    })
}

/// Jobs `0..n` done by `slots` threads of this process, each taking the next job as it is free.
fn on_threads(n: usize, slots: usize, job: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..slots)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok(());
                        }
                        job(i)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a spawning thread panicked"))
    })
}

/// Every run succeeded on its first and only attempt.
fn check_drained(db: &Path, n: usize) -> Result<()> {
    let conn = Connection::open(db)?;
    let (succeeded, attempts, other): (i64, i64, i64) = conn.query_row(
        "SELECT (SELECT count(*) FROM job_runs WHERE status = 'succeeded' AND attempt = 1),
                (SELECT count(*) FROM job_attempts),
                (SELECT count(*) FROM job_runs WHERE status <> 'succeeded')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    ensure!(
        succeeded == n as i64 && attempts == n as i64 && other == 0,
        "expected {n} runs succeeded at their first attempt; found {succeeded}, {attempts} attempts, {other} runs not succeeded"
    );
    Ok(())
}

/// The jobs' own log (one run id per execution): each of the `n` runs executed exactly once.
fn check_executed_once(log: &Path, n: usize) -> Result<()> {
    let text = std::fs::read_to_string(log).context("reading the jobs' log")?;
    let mut ids: Vec<&str> = text.lines().collect();
    let executions = ids.len();
    ids.sort_unstable();
    ids.dedup();
    let duplicates = executions - ids.len();
    ensure!(
        duplicates == 0 && ids.len() == n,
        "{executions} executions of {} distinct runs ({duplicates} duplicates), expected {n} once each",
        ids.len()
    );
    Ok(())
}

fn run_count(db: &Path) -> Result<i64> {
    let conn = Connection::open(db)?;
    Ok(conn.query_row("SELECT count(*) FROM job_runs", [], |r| r.get(0))?)
}

/// `n` schedules `cron` (UTC, catch-up latest), handled through `through`, next firing at
/// `next_fire_at`.
fn seed_definitions(
    db: &Path,
    n: usize,
    through: i64,
    next_fire_at: Option<i64>,
    cron: &str,
) -> Result<()> {
    let conn = Connection::open(db)?;
    conn.execute(
        "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
         INSERT INTO job_definitions (name, cron, timezone, command, materialized_through,
             next_fire_at, created_at, updated_at)
         SELECT 'job-' || i, ?2, 'UTC', 'true', ?3, ?4, ?3, ?3 FROM seq",
        rusqlite::params![n as i64, cron, through, next_fire_at],
    )?;
    Ok(())
}

/// SQL that records the hourly turns of a tick at `at` (the run tally's fold and the automatic
/// prune), on SQLite or PostgreSQL. `init` takes them at the real time, which is after `S2_NOW`:
/// a tick told `--now S2_NOW` would find those turns recorded in the future and take them again
/// (as after a clock step back), folding every run it just made into the tally. A tick every
/// minute takes them once an hour, so S2 measures a tick that does not.
fn ticked_at(at: i64) -> String {
    format!(
        "UPDATE runner_state SET value = {at} WHERE key = 'tally_folded_at';
         INSERT INTO runner_state (key, value) VALUES ('last_prune_at', {at})
             ON CONFLICT (key) DO UPDATE SET value = excluded.value;"
    )
}

/// `schedules` schedules that are not due (yearly, next firing in a year), and `runs` finished
/// runs, the latest a minute ago, one every 2 seconds or, where three weeks would not hold them,
/// every second (a million runs: the last 11.6 days); all inside the default 30-day retention, so
/// a tick's prune has nothing to delete. 2% dead after 3 attempts, 1% skipped, the rest
/// succeeded; each executed run with its attempt(s) and three events; the run tally folded.
fn seed_history(db: &Path, schedules: usize, runs: usize) -> Result<()> {
    let now = epoch_now();
    seed_definitions(db, schedules, now, Some(now + 365 * 86_400), "0 0 1 1 *")?;
    let step = (21 * 86_400 / runs.max(1) as i64).clamp(1, 2);
    let mut conn = Connection::open(db)?;
    let tx = conn.transaction()?;
    tx.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, attempt,
             command, max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
             idempotency_key, error_code, error_detail, skip_reason, created_at, started_at,
             finished_at)
         SELECT 1 + i % ?2, 'schedule', ?3 - 60 - i * ?4,
                CASE WHEN i % 50 = 0 THEN 'dead' WHEN i % 100 = 1 THEN 'skipped' ELSE 'succeeded' END,
                ?3 - 60 - i * ?4,
                CASE WHEN i % 100 = 1 THEN 0 WHEN i % 50 = 0 THEN 3 ELSE 1 END,
                'true', 3, 3600, 30, 3600, 'seed-' || i,
                CASE WHEN i % 50 = 0 THEN 'EXIT:' || (1 + i % 3) END,
                CASE WHEN i % 50 = 0 THEN 'exited with status ' || (1 + i % 3) END,
                CASE WHEN i % 100 = 1 THEN 'overlap: another run was running' END,
                ?3 - 60 - i * ?4,
                CASE WHEN i % 100 <> 1 THEN ?3 - 60 - i * ?4 END,
                ?3 - 60 - i * ?4 + 1
         FROM n",
        rusqlite::params![runs as i64, schedules as i64, now, step],
    )?;
    // Each attempt names its schedule too, from schema 9 (`--runner OLD`: an older schema).
    let schedule_column = if tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('job_attempts') WHERE name = 'definition_id')",
        [],
        |r| r.get(0),
    )? {
        ", definition_id"
    } else {
        ""
    };
    tx.execute_batch(&format!(
        "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid, lease_token,
             started_at, finished_at, duration_ms, outcome, exit_code, error_code, error_detail,
             stdout_tail, stdout_bytes, stderr_bytes{schedule_column})
         SELECT id, attempt, 'seed:1', 'seed', 1, 'token-' || id, started_at, finished_at,
                1000 + id % 1000,
                CASE status WHEN 'dead' THEN 'failed' ELSE 'succeeded' END,
                CASE status WHEN 'dead' THEN CAST(substr(error_code, 6) AS INTEGER) ELSE 0 END,
                error_code, error_detail, CAST('done' AS BLOB), 4, 0{schedule_column}
         FROM job_runs WHERE attempt > 0;
         INSERT INTO job_events (run_id, at, kind, actor, detail)
         SELECT r.id, r.created_at + k.offset, k.kind, 'seed:1', '{{}}'
         FROM job_runs r
         JOIN (SELECT 0 AS offset, 'ENQUEUED' AS kind UNION ALL SELECT 0, 'CLAIMED'
               UNION ALL SELECT 1, 'SUCCEEDED') k
         WHERE r.attempt > 0;",
    ))?;
    tx.execute(
        "INSERT INTO runner_state (key, value) VALUES ('last_tick_at', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [now - 60],
    )?;
    tx.commit()?;
    conn.execute_batch("ANALYZE")?;
    Ok(())
}

/// `n` due manual pending runs, each of a different one of the `schedules` schedules (they
/// forbid overlap: one running run each).
fn add_pending(db: &Path, n: usize, schedules: usize) -> Result<()> {
    ensure!(n <= schedules, "S4 claims at most one run per schedule");
    let conn = Connection::open(db)?;
    conn.execute(
        "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
             max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs, idempotency_key,
             created_at)
         SELECT 1 + i % ?3, 'manual', ?2, 'pending', ?2, 'true', 3, 3600, 30, 3600,
             'claim-' || i, ?2
         FROM seq",
        rusqlite::params![n as i64, epoch_now() - 5, schedules as i64],
    )?;
    Ok(())
}

/// Claim the `n` due runs one per transaction, through runner's own store: each claim's
/// latency in ms.
fn claim_latencies(db: &Path, n: usize) -> Result<Vec<f64>> {
    use runner::store::{OpenMode, SqliteStore, Store};
    let mut store = SqliteStore::open(db, OpenMode::MustExist)?;
    let actor = runner::cli::actor(Some("bench:claims".into()));
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let claimed = store.claim(&actor, epoch_now(), 3600, 1)?;
        latencies.push(ms(start.elapsed()));
        ensure!(claimed.runs.len() == 1, "S4: a claim found no due run");
    }
    Ok(latencies)
}

/// A Python with `module` installed, in a virtual environment of its own under
/// target/bench-peers/ (`requirements` installed from PyPI on first use).
fn peer_python(
    runner: &Path,
    module: &str,
    requirements: &[&str],
) -> std::result::Result<PathBuf, String> {
    let venv = runner
        .parent()
        .and_then(Path::parent)
        .ok_or("no target directory")?
        .join("bench-peers")
        .join(module);
    let python = venv.join("bin/python");
    let has_module = |python: &Path| {
        Command::new(python)
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.exists() && has_module(&python) {
        return Ok(python);
    }
    let quiet = |c: &mut Command| c.stdout(Stdio::null()).stderr(Stdio::piped()).output();
    let made = quiet(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        .map_err(|e| format!("python3: {e}"))?;
    if !made.status.success() {
        return Err(format!(
            "python3 -m venv failed: {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let pip = quiet(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet"])
            .args(requirements),
    )
    .map_err(|e| format!("pip: {e}"))?;
    if !pip.status.success() || !has_module(&python) {
        return Err(format!(
            "pip install {} failed: {}",
            requirements.join(" "),
            String::from_utf8_lossy(&pip.stderr).trim()
        ));
    }
    Ok(python)
}

/// (Re)create database `name` on the PostgreSQL server, empty; its URL.
fn pg_recreate(server: &str, name: &str) -> Result<String> {
    pg_drop(server, name)?;
    let mut admin = postgres::Client::connect(server, postgres::NoTls)
        .context("connecting to the PostgreSQL server")?;
    admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
    Ok(with_database(server, name))
}

fn pg_drop(server: &str, name: &str) -> Result<()> {
    let mut admin = postgres::Client::connect(server, postgres::NoTls)
        .context("connecting to the PostgreSQL server")?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
    Ok(())
}

/// The server URL with its database replaced by `name`.
fn with_database(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (server, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{name}{query}")
}

/// "PostgreSQL 15.x, fsync on, synchronous_commit on": what the numbers were measured with.
fn pg_settings(server: &str) -> Result<String> {
    let mut client = postgres::Client::connect(server, postgres::NoTls)
        .context("connecting to the PostgreSQL server")?;
    let show = |client: &mut postgres::Client, what: &str| -> Result<String> {
        Ok(client.query_one(&format!("SHOW {what}"), &[])?.get(0))
    };
    let version = show(&mut client, "server_version")?;
    let fsync = show(&mut client, "fsync")?;
    let sync = show(&mut client, "synchronous_commit")?;
    Ok(format!(
        "PostgreSQL {version}, fsync {fsync}, synchronous_commit {sync}"
    ))
}

/// As `check_drained`, on PostgreSQL.
fn pg_check_drained(url: &str, n: usize) -> Result<()> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)?;
    let row = client.query_one(
        "SELECT (SELECT count(*) FROM job_runs WHERE status = 'succeeded' AND attempt = 1),
                (SELECT count(*) FROM job_attempts),
                (SELECT count(*) FROM job_runs WHERE status <> 'succeeded')",
        &[],
    )?;
    let (succeeded, attempts, other): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    ensure!(
        succeeded == n as i64 && attempts == n as i64 && other == 0,
        "expected {n} runs succeeded at their first attempt; found {succeeded}, {attempts} attempts, {other} runs not succeeded"
    );
    Ok(())
}
