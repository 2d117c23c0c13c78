//! The crash loop: ticks are `kill -9`ed at random moments (mid-claim, mid-job, mid-completion)
//! while a steady stream of runs comes due. Afterwards the database must be intact, every run
//! must have succeeded, and no run may ever have executed twice at the same time.
//!
//! Every job holds `flock` on a per-run lock file while it runs (and jobs of the `forbid`
//! schedule also on a per-schedule lock): if the lock is taken, some other live process is
//! executing the same run, which is a violation the job writes to the log. The log also gives
//! every attempt's start and end, so sequential re-runs (a killed runner's run executed again
//! after its lease expired: at-least-once) are counted, and overlaps checked a second way.
//!
//! Meanwhile another process holds the database's write lock in short bursts (50 ms), so ticks are
//! also killed while they wait for it: between spawning a job and recording its start, above all.
//! Every job that started must have had its start recorded first (the start gate), and when all is
//! over no process carrying a run's marker may be left on the host.
//!
//! `RUNNER_CRASH_SECS` (default 60) bounds the killing phase; the soak before a release runs it
//! for 5 minutes or more: `RUNNER_CRASH_SECS=300 cargo test --release --test integration crash`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::{database_marker, never, Backend, Env};

const LEASE: &str = "3s";
/// Ticks alive at once during the killing phase.
const LIVE_TICKS: usize = 3;
/// A tick is killed this long after its start at most.
const MAX_KILL_DELAY_MS: u64 = 1500;
/// The feeders keep about this many runs of each `allow` schedule due.
const BACKLOG: i64 = 12;

/// The job: take the per-run lock (and the per-schedule lock for `forbid`) without waiting; if
/// it is taken, another live process runs the same run: record a violation.
const JOB_SH: &str = r#"D=$(dirname "$0")
if [ "$1" = forbid ]; then
  flock -n -E 76 "$D/locks/job-$RUNNER_JOB" flock -n -E 75 "$D/locks/run-$RUNNER_RUN_ID" sh "$D/body.sh"
else
  flock -n -E 75 "$D/locks/run-$RUNNER_RUN_ID" sh "$D/body.sh"
fi
rc=$?
if [ $rc -eq 75 ]; then echo "violation run $RUNNER_JOB $RUNNER_RUN_ID $RUNNER_ATTEMPT" >> "$D/log"; fi
if [ $rc -eq 76 ]; then echo "violation schedule $RUNNER_JOB $RUNNER_RUN_ID $RUNNER_ATTEMPT" >> "$D/log"; fi
exit $rc
"#;

/// Runs for 0.2 to 0.9 s (dash has no $RANDOM; the pid is random enough). Log lines are
/// appended under `flock`, so lines of concurrent jobs never interleave.
const BODY_SH: &str = r#"D=$(dirname "$0")
flock "$D/log" sh -c 'echo "start $RUNNER_RUN_ID $RUNNER_ATTEMPT $(date +%s%N)" >> "$1"' sh "$D/log"
sleep 0.$(( $$ % 8 + 2 ))
flock "$D/log" sh -c 'echo "end $RUNNER_RUN_ID $RUNNER_ATTEMPT $(date +%s%N)" >> "$1"' sh "$D/log"
"#;

/// The write lock is held this long per burst, with a random pause of up to twice that between.
const LOCK_BURST: Duration = Duration::from_millis(50);

/// Every tick process still alive is killed when the test ends, however it ends.
struct Ticks(Vec<(Child, Instant, Option<Instant>, usize)>);

impl Drop for Ticks {
    fn drop(&mut self) {
        for (child, ..) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Default, Debug)]
struct Attempt {
    start: Option<u128>,
    end: Option<u128>,
    starts: usize,
}

fn crash_secs() -> u64 {
    std::env::var("RUNNER_CRASH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

#[test]
fn crash_loop_loses_nothing_and_never_runs_a_run_twice_at_once() {
    assert!(
        std::path::Path::new("/usr/bin/flock").exists() || which("flock"),
        "the crash loop needs flock(1) (util-linux)"
    );
    let env = Env::init();
    let dir = env.dir.path();
    std::fs::create_dir(dir.join("locks")).expect("locks dir");
    std::fs::create_dir(dir.join("ticklogs")).expect("ticklogs dir");
    std::fs::write(dir.join("job.sh"), JOB_SH).expect("job.sh");
    std::fs::write(dir.join("body.sh"), BODY_SH).expect("body.sh");
    let job = dir.join("job.sh");
    let job = job.to_str().expect("utf-8 path");
    // Never fire on their own (1 January, years away): the stream is manual runs, due at once.
    // Enough attempts that kills never make a run dead; retries come without backoff.
    let common = [
        "--cron",
        &never(),
        "--max-attempts",
        "1000",
        "--backoff-base",
        "0s",
    ];
    for (name, overlap) in [
        ("allow-a", "allow"),
        ("allow-b", "allow"),
        ("forbid", "forbid"),
    ] {
        let mut args = vec!["schedule", "add", name];
        args.extend(common);
        args.extend(["--overlap", overlap, "--", "sh", job, overlap]);
        env.ok(&args);
    }

    let secs = crash_secs();
    let stop = AtomicBool::new(false);
    let feeder_errors = Mutex::new(Vec::<String>::new());
    let mut ticks = Ticks(Vec::new());
    let (mut spawned, mut kills, mut natural) = (0usize, 0usize, 0usize);
    let mut rng = fastrand::Rng::new();
    let mut natural_failures = Vec::new();
    let mut natural_notes = Vec::new();

    std::thread::scope(|scope| {
        // The steady stream: two feeders enqueue manual runs (one in five for `forbid`, which
        // runs one at a time) whenever fewer than BACKLOG are due, so ticks always find work
        // and are killed mid-claim, mid-job and mid-completion rather than idle.
        let feed = || {
            let mut rng = fastrand::Rng::new();
            let mut fed = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let name = match rng.u8(0..5) {
                    0 => "forbid",
                    1 | 2 => "allow-a",
                    _ => "allow-b",
                };
                // `forbid` runs one at a time: keep its queue short, or it alone fills the
                // backlog while the other schedules starve.
                let backlog = if name == "forbid" { 2 } else { BACKLOG };
                let due = env.sql.query_i64(&format!(
                    "SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id
                     WHERE r.status = 'pending' AND d.name = '{name}'"
                ), &[]);
                if due < backlog {
                    let out = env.run(&["run", name]);
                    if out.status.success() {
                        fed += 1;
                    } else {
                        feeder_errors.lock().expect("lock").push(format!(
                            "runner run {name}: exit {:?}: {}",
                            out.status.code(),
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
                std::thread::sleep(Duration::from_millis(30));
            }
            fed
        };
        let feeders = [scope.spawn(feed), scope.spawn(feed)];
        // Another process of the database (here, a thread with its own connection) takes the
        // write lock in short bursts, so claims, starts and results wait for it, and ticks are
        // killed while they wait.
        let lock_holder = scope.spawn(|| {
            let mut rng = fastrand::Rng::new();
            let mut bursts = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if env.sql.hold_write_lock(LOCK_BURST) {
                    bursts += 1;
                }
                std::thread::sleep(LOCK_BURST * rng.u32(0..=2));
            }
            bursts
        });

        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            // Kill the ticks whose moment came; collect the ones that ended by themselves.
            let now = Instant::now();
            let mut index = 0;
            while index < ticks.0.len() {
                let (child, _, kill_at, id) = &mut ticks.0[index];
                if let Some(status) = child.try_wait().expect("try_wait") {
                    let id = *id;
                    ticks.0.swap_remove(index);
                    natural += 1;
                    let err = std::fs::read_to_string(dir.join(format!("ticklogs/{id}.err")))
                        .unwrap_or_default();
                    // A kill -9 of its neighbour is no excuse for a tick to fail.
                    if !status.success() || err.contains("locked") || err.contains("panick") {
                        natural_failures.push(format!("tick {id}: {status}: {err}"));
                    } else if !err.is_empty() {
                        natural_notes.push(format!("tick {id}: {}", err.trim()));
                    }
                    continue;
                }
                if kill_at.is_some_and(|at| now >= at) {
                    child.kill().expect("kill -9");
                    child.wait().expect("wait");
                    ticks.0.swap_remove(index);
                    kills += 1;
                    continue;
                }
                index += 1;
            }
            // Keep LIVE_TICKS alive: most are killed at a random moment, one in five is left to
            // finish on its own (short --max-tick) so clean ends interleave with crashes.
            while ticks.0.len() < LIVE_TICKS {
                spawned += 1;
                let killed = rng.u8(0..5) != 0;
                let kill_at = killed.then(|| {
                    Instant::now() + Duration::from_millis(rng.u64(0..=MAX_KILL_DELAY_MS))
                });
                let max_tick = if killed { "50s" } else { "1s" };
                let child = tick_command(&env, spawned, max_tick)
                    .spawn()
                    .expect("spawn tick");
                ticks.0.push((child, Instant::now(), kill_at, spawned));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        let fed: usize = feeders
            .into_iter()
            .map(|f| f.join().expect("feeder thread"))
            .sum();
        let bursts = lock_holder.join().expect("lock holder thread");
        println!(
            "crash loop: fed {fed} manual runs in {secs}s; the write lock was held {bursts} times"
        );
    });
    // Stop killing: the last ticks die like the others (their runs are recovered below).
    for (child, ..) in &mut ticks.0 {
        if child.try_wait().expect("try_wait").is_none() {
            child.kill().expect("kill -9");
            kills += 1;
        }
        let _ = child.wait();
    }
    ticks.0.clear();

    // Drain: leases expire, ticks recover and finish everything.
    let drain_deadline = Instant::now() + Duration::from_secs(120);
    let mut drain_ticks = 0;
    loop {
        let open = env.sql.query_i64(
            "SELECT count(*) FROM job_runs WHERE status IN ('pending', 'running')",
            &[],
        );
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < drain_deadline,
            "{open} runs still pending or running 120s after the last kill"
        );
        drain_ticks += 1;
        let out = env.run(&[
            "tick",
            "--lease",
            LEASE,
            "--concurrency",
            "4",
            "--max-tick",
            "5s",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("locked"),
            "drain tick: {:?}: {err}",
            out.status.code()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // ---- assertions ----
    let errors = feeder_errors.into_inner().expect("lock");
    assert!(
        errors.is_empty(),
        "runner run failed under the crash loop: {errors:#?}"
    );
    assert!(
        natural_failures.is_empty(),
        "ticks that ended by themselves failed: {natural_failures:#?}"
    );
    // A file killed writers leave behind (PostgreSQL has none, and enforces foreign keys itself).
    if env.sql.backend() == Backend::Sqlite {
        let conn = env.sql.sqlite();
        let integrity: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("integrity_check");
        assert_eq!(integrity, "ok");
        let fk: i64 = conn
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .expect("foreign_key_check");
        assert_eq!(fk, 0, "foreign key violations");
    }

    let statuses: BTreeMap<String, i64> = env
        .sql
        .query_rows("SELECT status, count(*) FROM job_runs GROUP BY status", &[])
        .iter()
        .map(|r| (r[0].string(), r[1].i64()))
        .collect();
    let runs: i64 = statuses.values().sum();
    assert!(runs > 0, "no runs were fed");
    assert_eq!(
        statuses.get("succeeded").copied().unwrap_or(0),
        runs,
        "every run must end succeeded: {statuses:?}"
    );

    // The database's own account: every attempt closed; all but the last closed by recovery.
    let unfinished = env.sql.query_i64(
        "SELECT count(*) FROM job_attempts WHERE finished_at IS NULL",
        &[],
    );
    assert_eq!(unfinished, 0, "attempts left open");
    let inconsistent = env.sql.query_i64("SELECT count(*) FROM job_runs r
         WHERE r.attempt <> (SELECT count(*) FROM job_attempts a WHERE a.run_id = r.id)
            OR NOT EXISTS (SELECT 1 FROM job_attempts a
                           WHERE a.run_id = r.id AND a.attempt = r.attempt AND a.outcome = 'succeeded')", &[]);
    assert_eq!(
        inconsistent, 0,
        "runs whose attempts do not add up (one row per attempt, the last one succeeded)"
    );
    let odd_failures = env.sql.query_strings("SELECT run_id || '/' || attempt || ': ' || coalesce(error_code, '?') || ' ' || coalesce(error_detail, '')
         FROM job_attempts a
         WHERE outcome = 'failed' AND error_code <> 'LEASE:EXPIRED'", &[]);
    assert!(
        odd_failures.is_empty(),
        "attempts failed for another reason than a lost runner: {odd_failures:#?}"
    );
    let recovered = env.sql.query_i64(
        "SELECT count(*) FROM job_attempts WHERE error_code = 'LEASE:EXPIRED'",
        &[],
    );
    let attempts = env.sql.query_i64("SELECT count(*) FROM job_attempts", &[]);

    // The jobs' own account.
    let log = std::fs::read_to_string(dir.join("log")).expect("job log");
    let violations: Vec<&str> = log.lines().filter(|l| l.starts_with("violation")).collect();
    let mut by_run: BTreeMap<i64, BTreeMap<u32, Attempt>> = BTreeMap::new();
    for line in log.lines().filter(|l| !l.starts_with("violation")) {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(kind), Some(run), Some(attempt), Some(at)) =
            (fields.first(), fields.get(1), fields.get(2), fields.get(3))
        else {
            panic!("bad log line {line:?}");
        };
        let run: i64 = run.parse().expect("run id");
        let attempt: u32 = attempt.parse().expect("attempt");
        let at: u128 = at.parse().expect("nanotime");
        let entry = by_run.entry(run).or_default().entry(attempt).or_default();
        match *kind {
            "start" => {
                entry.starts += 1;
                entry.start = Some(at);
            }
            "end" => entry.end = Some(at),
            other => panic!("bad log line kind {other:?}"),
        }
    }
    let mut twice_started = Vec::new();
    let mut overlaps = Vec::new();
    let mut reruns = 0;
    for (run, attempts) in &by_run {
        let mut intervals: Vec<(u128, Option<u128>, u32)> = Vec::new();
        for (attempt, a) in attempts {
            if a.starts > 1 {
                twice_started.push(format!("run {run} attempt {attempt}"));
            }
            if let Some(start) = a.start {
                intervals.push((start, a.end, *attempt));
            }
        }
        reruns += intervals.len().saturating_sub(1);
        intervals.sort();
        for pair in intervals.windows(2) {
            // An attempt without an end was killed (by recovery, or it died with its group): the
            // flock check covers it. One with an end must have ended before the next started.
            if let (Some(end), next_start) = (pair[0].1, pair[1].0) {
                if end > next_start {
                    overlaps.push(format!(
                        "run {run}: attempt {} ran until {end}, attempt {} started at {next_start}",
                        pair[0].2, pair[1].2
                    ));
                }
            }
        }
    }
    let db_runs: BTreeSet<i64> = env
        .sql
        .query_strings("SELECT CAST(id AS TEXT) FROM job_runs", &[])
        .iter()
        .map(|s| s.parse().expect("id"))
        .collect();
    let final_attempts: BTreeMap<i64, u32> = env
        .sql
        .query_strings("SELECT id || ' ' || attempt FROM job_runs", &[])
        .iter()
        .map(|s| {
            let (id, attempt) = s.split_once(' ').expect("pair");
            (id.parse().expect("id"), attempt.parse().expect("attempt"))
        })
        .collect();
    let mut unexecuted = Vec::new();
    for run in &db_runs {
        let last = final_attempts[run];
        let ended = by_run
            .get(run)
            .and_then(|a| a.get(&last))
            .is_some_and(|a| a.start.is_some() && a.end.is_some());
        if !ended {
            unexecuted.push(format!("run {run} attempt {last}"));
        }
    }
    let never_started = attempts - by_run.values().map(|a| a.len() as i64).sum::<i64>();
    // The start gate: a job that started had its start (pid, start time) recorded before.
    let recorded: BTreeSet<String> = env
        .sql
        .query_strings(
            "SELECT run_id || '/' || attempt FROM job_attempts WHERE child_pid IS NOT NULL",
            &[],
        )
        .into_iter()
        .collect();
    let untracked: Vec<String> = by_run
        .iter()
        .flat_map(|(run, attempts)| attempts.keys().map(move |a| format!("{run}/{a}")))
        .filter(|key| !recorded.contains(key))
        .collect();
    // Nothing a job started outlives the crash loop.
    let marked = format!("RUNNER_DATABASE={}", database_marker(&env));
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| crate::common::process_alive(pid))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == marked.as_bytes()))
        })
        .map(|pid| pid.to_string())
        .collect();

    println!(
        "crash loop: {secs}s, {spawned} ticks started, {kills} killed with SIGKILL, {natural} ended \
         by themselves, {drain_ticks} drain ticks; {runs} runs, {attempts} attempts, {recovered} \
         recovered (LEASE:EXPIRED), {reruns} sequential re-runs of a started job, {never_started} \
         attempts claimed but killed before the job started; {} concurrent executions",
        violations.len() + overlaps.len()
    );
    assert!(
        violations.is_empty(),
        "concurrent executions: {violations:#?}"
    );
    assert!(overlaps.is_empty(), "overlapping attempts: {overlaps:#?}");
    assert!(
        untracked.is_empty(),
        "jobs that started without their start recorded first: {untracked:#?}"
    );
    assert!(
        left.is_empty(),
        "processes carrying a run marker left: {left:?}"
    );
    assert!(
        twice_started.is_empty(),
        "an attempt (one claim) executed twice: {twice_started:#?}"
    );
    assert!(
        unexecuted.is_empty(),
        "succeeded runs whose succeeding attempt never ran to its end: {unexecuted:#?}"
    );
    assert!(kills > 0, "nothing was killed");
}

fn tick_command(env: &Env, id: usize, max_tick: &str) -> Command {
    let err = File::create(env.path(&format!("ticklogs/{id}.err"))).expect("tick stderr file");
    let mut cmd = env.cmd();
    cmd.args([
        "tick",
        "--lease",
        LEASE,
        "--concurrency",
        "4",
        "--max-tick",
        max_tick,
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::from(err));
    cmd
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
