//! Many hosts, one database, at full size: four ticks, each with its own `--owner` and, where
//! `unshare -u` is allowed (root), its own host name, drain 10,000 due runs of a job that logs
//! its run id and attempt under `flock`. Every run executes exactly once, with one attempt. Then
//! the same with one of the four `kill -9`'d mid-drain: later ticks, their clocks past the
//! lease, recover its runs, every run ends succeeded and no two attempts of a run overlap.
//!
//! On the suite's backend: PostgreSQL (what several hosts share) in the PostgreSQL pass, one
//! SQLite file in the SQLite pass. The drain gets many minutes against hangs; nothing here
//! measures speed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    kill9, on_other_host, processes_of_run, real_now, sh_quote, stderr, unshare_allowed, utc,
    wait_until, Env,
};

const RUNS: i64 = 10_000;
const TICKS: usize = 4;
/// Against hangs only: the whole drain, however slow the machine.
const DRAIN_GUARD: Duration = Duration::from_secs(30 * 60);
/// The host whose tick is killed in the second test, after this many lines of its own in the log
/// (a start and an end per job): its next job stalls so that it dies holding a running run.
const STALL_AFTER_LINES: usize = 40;

/// Whether each tick may have a host name of its own; said once per test when not.
fn namespaces_allowed() -> bool {
    let allowed = unshare_allowed();
    if !allowed {
        println!(
            "note: `unshare -u` is not allowed here (it needs root): the ticks run as plain \
             processes on this host, told apart by --owner only"
        );
    }
    allowed
}

/// `runner ARGS` as a tick on host `host`: with `namespaces`, in a UTS namespace whose host name
/// is `host` (the child's pid is the runner's); else a plain process. `MANY_TICKS_HOST` tells
/// its jobs which host they run on either way.
fn on_host(env: &Env, namespaces: bool, host: &str, args: &[&str]) -> Command {
    let mut cmd = env.cmd();
    cmd.env("MANY_TICKS_HOST", host).args(args);
    if namespaces {
        cmd = on_other_host(&cmd, host);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// A schedule `many` that never fires by itself, whose job appends `start RUN ATTEMPT HOST` and
/// `end RUN ATTEMPT HOST` to the log under `flock`; with `MANY_TICKS_STALL` set, once the log
/// holds `STALL_AFTER_LINES` lines of its host, it touches `stalled` and sleeps (a job its tick
/// dies holding). Then `RUNS` due runs of it, seeded with SQL: `runner run` is too slow for 10,000.
fn seed(env: &Env) {
    let log = sh_quote(&env.path("ran.log"));
    let stalled = sh_quote(&env.path("stalled"));
    let line = |what: &str| {
        format!(
            r#"{{ flock 9 && echo "{what} $RUNNER_RUN_ID $RUNNER_ATTEMPT $MANY_TICKS_HOST" >&9; }} 9>>{log}"#
        )
    };
    let command = format!(
        r#"{start}
[ -z "$MANY_TICKS_STALL" ] || [ "$(grep -c " $MANY_TICKS_HOST\$" {log})" -lt {STALL_AFTER_LINES} ] || {{ touch {stalled}; sleep 600; }}
{end}"#,
        start = line("start"),
        end = line("end"),
    );
    // Retries wait 10 minutes: only the ticks of the clock an hour ahead retry a recovered run,
    // after the killed host's own tick has stopped what it left running.
    env.add(
        "many",
        &[
            "--overlap",
            "allow",
            "--backoff-base",
            "10m",
            "--backoff-max",
            "10m",
        ],
        &command,
    );
    let due = real_now() - 5;
    let inserted = env.sql.exec(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
         INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
             workdir, max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
             idempotency_key, created_at)
         SELECT d.id, 'manual', $2, 'pending', $2, d.command, d.workdir, d.max_attempts,
             d.timeout_secs, d.backoff_base_secs, d.backoff_max_secs, 'many:' || i, $2
         FROM n, job_definitions d WHERE d.name = 'many'",
        &[&RUNS, &due],
    );
    assert_eq!(inserted, RUNS as u64);
}

/// The drain's tick on host `host-I`: claims until nothing is due, however long that takes.
fn drain_tick(env: &Env, namespaces: bool, i: usize) -> Command {
    let host = format!("host-{i}");
    on_host(
        env,
        namespaces,
        &host,
        &[
            "tick",
            "--owner",
            &host,
            "--concurrency",
            "2",
            "--max-tick",
            "1h",
        ],
    )
}

/// Wait for every tick to exit 0; kill them all and fail after `DRAIN_GUARD`.
fn wait_all(mut ticks: Vec<Child>, started: Instant) {
    while !ticks.is_empty() {
        if started.elapsed() > DRAIN_GUARD {
            for tick in &mut ticks {
                let _ = tick.kill();
            }
            panic!("the drain still ran after {DRAIN_GUARD:?}");
        }
        let mut i = 0;
        while i < ticks.len() {
            if ticks[i].try_wait().expect("try_wait").is_some() {
                let out = ticks.remove(i).wait_with_output().expect("reap");
                assert!(out.status.success(), "a tick failed: {}", stderr(&out));
            } else {
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One line of the jobs' log.
#[derive(Debug)]
struct Logged {
    start: bool,
    run: i64,
    attempt: i64,
    host: String,
}

fn read_log(path: &Path) -> Vec<Logged> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 4, "a torn log line: {line:?}");
            Logged {
                start: match parts[0] {
                    "start" => true,
                    "end" => false,
                    other => panic!("a torn log line: {other:?} in {line:?}"),
                },
                run: parts[1].parse().expect("a run id"),
                attempt: parts[2].parse().expect("an attempt"),
                host: parts[3].to_string(),
            }
        })
        .collect()
}

/// From the log, per run: no attempt started twice, and no attempt started while another
/// attempt of its run had started and not ended, unless that one never ended at all (its job
/// was killed: `killed` lists those runs). Returns the attempts started per run.
fn attempts_in_log(log: &[Logged], killed: &BTreeSet<i64>) -> BTreeMap<i64, Vec<i64>> {
    let mut started: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut open: BTreeMap<i64, i64> = BTreeMap::new();
    for line in log {
        if line.start {
            let attempts = started.entry(line.run).or_default();
            assert!(
                !attempts.contains(&line.attempt),
                "run {} attempt {} executed twice",
                line.run,
                line.attempt
            );
            attempts.push(line.attempt);
            if let Some(other) = open.insert(line.run, line.attempt) {
                assert!(
                    killed.contains(&line.run),
                    "run {} attempt {} started while attempt {other} ran",
                    line.run,
                    line.attempt
                );
            }
        } else {
            assert_eq!(
                open.remove(&line.run),
                Some(line.attempt),
                "run {} attempt {} ended without its start (on {})",
                line.run,
                line.attempt,
                line.host
            );
        }
    }
    started
}

/// No attempt of a run began before the previous one was closed, by the database's record.
fn assert_attempts_never_overlap(env: &Env) {
    let overlapping = env.sql.query_i64(
        "SELECT count(*) FROM job_attempts a JOIN job_attempts b
           ON a.run_id = b.run_id AND a.attempt < b.attempt
         WHERE a.finished_at IS NULL OR a.finished_at > b.started_at",
        &[],
    );
    assert_eq!(overlapping, 0, "attempts of one run overlap");
}

/// Runs `ids` as the database tells them, attempts and events included: what a failed assertion
/// on them shows.
fn describe_runs(env: &Env, ids: &[i64]) -> String {
    let mut text = String::new();
    for &id in ids {
        let lines = env.sql.query_strings(
            "SELECT 'run ' || id || ': ' || status || ' attempt ' || attempt || ' owner '
                    || coalesce(owner, '-') || ' run_at ' || run_at
                    || ' lease until ' || coalesce(CAST(lease_expires_at AS TEXT), '-')
               FROM job_runs WHERE id = $1
             UNION ALL
             SELECT '  attempt ' || attempt || ' by ' || owner || ' on ' || host || ': '
                    || coalesce(outcome, 'open') || ' ' || coalesce(error_code, '')
                    || ' ' || coalesce(error_detail, '')
               FROM job_attempts WHERE run_id = $1
             UNION ALL
             SELECT '  event ' || kind || ' at ' || at || ' by ' || actor || ' '
                    || coalesce(CAST(detail AS TEXT), '')
               FROM job_events WHERE run_id = $1",
            &[&id],
        );
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

fn count(env: &Env, sql: &str) -> i64 {
    env.sql.query_i64(sql, &[])
}

#[test]
fn four_ticks_drain_10000_runs_each_exactly_once() {
    let env = Env::init();
    let namespaces = namespaces_allowed();
    seed(&env);
    let started = Instant::now();
    let ticks: Vec<Child> = (0..TICKS)
        .map(|i| drain_tick(&env, namespaces, i).spawn().expect("spawn tick"))
        .collect();
    wait_all(ticks, started);

    let log = read_log(&env.path("ran.log"));
    let per_run = attempts_in_log(&log, &BTreeSet::new());
    let ran: Vec<i64> = per_run.keys().copied().collect();
    assert_eq!(
        ran.len() as i64,
        RUNS,
        "runs executed, by the jobs' own log"
    );
    assert_eq!(
        ran,
        env.sql
            .query_i64s("SELECT id FROM job_runs ORDER BY id", &[]),
        "the runs executed are the runs seeded"
    );
    assert!(
        per_run.values().all(|attempts| attempts == &[1]),
        "each run executed once, as its attempt 1"
    );
    assert_eq!(
        log.len() as i64,
        2 * RUNS,
        "each job started and ended once"
    );
    let mut by_host: BTreeMap<&str, usize> = BTreeMap::new();
    for line in log.iter().filter(|l| l.start) {
        *by_host.entry(&line.host).or_default() += 1;
    }
    println!("jobs per host: {by_host:?}");

    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'"
        ),
        RUNS
    );
    assert_eq!(
        count(&env, "SELECT count(*) FROM job_runs WHERE attempt <> 1"),
        0
    );
    assert_eq!(count(&env, "SELECT count(*) FROM job_attempts"), RUNS);
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM job_attempts WHERE outcome <> 'succeeded' OR finished_at IS NULL"
        ),
        0
    );
    assert_attempts_never_overlap(&env);
}

#[test]
fn four_ticks_drain_10000_runs_and_one_killed_mid_drain_is_recovered() {
    let env = Env::init();
    let namespaces = namespaces_allowed();
    seed(&env);
    let started = Instant::now();
    // host-0's jobs stall once it has executed some: it is killed holding a running run.
    let mut doomed = drain_tick(&env, namespaces, 0)
        .env("MANY_TICKS_STALL", "1")
        .env("RUNNER_DB", env.sql.location_named("doomed"))
        .spawn()
        .expect("spawn tick");
    let ticks: Vec<Child> = (1..TICKS)
        .map(|i| drain_tick(&env, namespaces, i).spawn().expect("spawn tick"))
        .collect();
    let stalled = env.path("stalled");
    wait_until(DRAIN_GUARD, "host-0 to run jobs, then stall one", || {
        stalled.exists()
    });
    kill9(doomed.id());
    let status = doomed.wait().expect("reap the killed tick");
    assert_eq!(status.code(), None, "killed by a signal");
    // Killed after sending a claim's COMMIT, the tick still holds the claimed runs once the
    // server has carried it out.
    env.sql
        .wait_for_sessions_to_end("doomed", Duration::from_secs(5 * 60));
    let held = env.sql.query_i64s(
        "SELECT id FROM job_runs WHERE status = 'running' AND owner = 'host-0' ORDER BY id",
        &[],
    );
    assert!(!held.is_empty(), "host-0 died holding no run");
    wait_all(ticks, started);
    let unfinished = env.sql.query_i64s(
        "SELECT id FROM job_runs WHERE status <> 'succeeded' ORDER BY id",
        &[],
    );
    assert_eq!(
        unfinished,
        held,
        "the three live ticks drained everything but the dead tick's runs:\n{}",
        describe_runs(&env, &unfinished)
    );

    // An hour on, past the lease: another host recovers the dead tick's runs (on another host
    // name it cannot stop their processes and leaves their attempts open), then host-0's next
    // tick stops what its dead tick left running and closes those attempts; two hours on (the
    // retries wait 10 minutes), a tick runs the retries.
    let hour = real_now() + 3600;
    for (host, at) in [("host-1", hour), ("host-0", hour), ("host-2", hour + 3600)] {
        let now = utc(at);
        let out = on_host(
            &env,
            namespaces,
            host,
            &["--now", &now, "tick", "--owner", &format!("{host}-later")],
        )
        .output()
        .expect("tick");
        assert!(out.status.success(), "tick on {host}: {}", stderr(&out));
    }

    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM job_runs WHERE status = 'succeeded'"
        ),
        RUNS,
        "every run ends succeeded"
    );
    assert_attempts_never_overlap(&env);
    let recovered = env.sql.query_i64s(
        "SELECT DISTINCT run_id FROM job_events WHERE kind = 'RECOVERED' ORDER BY run_id",
        &[],
    );
    assert_eq!(
        recovered, held,
        "exactly the dead tick's runs were recovered"
    );
    for &run in &held {
        assert!(
            processes_of_run(&env, run).is_empty(),
            "run {run}: the dead tick's job still runs"
        );
    }
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM job_runs WHERE attempt <> 1 AND id NOT IN
               (SELECT run_id FROM job_events WHERE kind = 'RECOVERED')"
        ),
        0,
        "only recovered runs took a second attempt"
    );

    // The jobs' own log: every run executed, no attempt twice, no attempt begun while another
    // of its run was still going, except the stalled jobs the recovery killed.
    let log = read_log(&env.path("ran.log"));
    let per_run = attempts_in_log(&log, &held.iter().copied().collect());
    assert_eq!(
        per_run.len() as i64,
        RUNS,
        "runs executed, by the jobs' own log"
    );
    let ended: BTreeSet<i64> = log.iter().filter(|l| !l.start).map(|l| l.run).collect();
    assert_eq!(
        ended.len() as i64,
        RUNS,
        "every run had an attempt that ran to its end"
    );
    println!(
        "host-0 died holding runs {held:?}; {} runs took a second attempt",
        per_run.values().filter(|a| a.len() > 1).count()
    );
}
