//! What only the PostgreSQL backend has: its schema versioning, its connections (passwords, TLS,
//! errors that name the server and never the password), several hosts draining one database.
//! Each test gets a database of its own on the server at `RUNNER_TEST_PG` (`./test` starts one);
//! without it these tests say so and pass.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use postgres::{Client, NoTls};
use tempfile::TempDir;

use super::common::{epoch, json, never, stderr, stdout, wait_until, BIN};

/// A database of its own on the test server, dropped at the end.
struct PgEnv {
    dir: TempDir,
    server: String,
    name: String,
    url: String,
}

impl PgEnv {
    /// `None` (after saying why) when no test server is configured.
    fn new() -> Option<PgEnv> {
        if std::env::var("RUNNER_TEST_BACKEND").as_deref() == Ok("sqlite") {
            return None; // ./test runs these in its PostgreSQL pass
        }
        let Some(server) = std::env::var("RUNNER_TEST_PG")
            .ok()
            .filter(|v| !v.is_empty())
        else {
            eprintln!("skipped: RUNNER_TEST_PG is not set (./test starts a PostgreSQL server)");
            return None;
        };
        let name = format!("runner_pg_{:016x}", fastrand::u64(..));
        let mut admin = Client::connect(&server, NoTls).expect("connect to RUNNER_TEST_PG");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        let url = database_url(&server, &name);
        let dir = tempfile::Builder::new()
            .prefix("runner-test-")
            .tempdir()
            .expect("tempdir");
        Some(PgEnv {
            dir,
            server,
            name,
            url,
        })
    }

    fn init() -> Option<PgEnv> {
        let env = PgEnv::new()?;
        env.ok(&["init"]);
        Some(env)
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env("RUNNER_DB", &self.url)
            .env("HOME", self.dir.path())
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .env_remove("XDG_STATE_HOME")
            .current_dir(self.dir.path());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("spawn runner")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "runner {args:?} failed ({:?})\nstdout: {}\nstderr: {}",
            out.status.code(),
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }

    fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "runner {args:?}: expected exit {code}\nstdout: {}\nstderr: {}",
            stdout(&out),
            stderr(&out)
        );
        stderr(&out)
    }

    fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the test database")
    }

    fn count(&self, sql: &str) -> i64 {
        self.client().query_one(sql, &[]).expect(sql).get(0)
    }
}

impl Drop for PgEnv {
    fn drop(&mut self) {
        if let Ok(mut admin) = Client::connect(&self.server, NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// The server URL with another database: `postgres://u@h:p/postgres` -> `.../NAME`.
fn database_url(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (server, String::new()),
    };
    let (host_part, _) = base.rsplit_once('/').expect("a URL with a database");
    format!("{host_part}/{name}{query}")
}

/// `postgres://postgres@127.0.0.1:5432/db` with another user (and password).
fn with_user(url: &str, userinfo: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{userinfo}@{host}")
}

#[test]
fn init_creates_the_schema_and_other_commands_need_it() {
    let Some(env) = PgEnv::new() else { return };
    let err = env.fails(4, &["status"]);
    assert!(err.contains("has no runner schema"), "{err}");
    assert!(err.contains("runner init"), "{err}");
    assert!(err.contains("127.0.0.1"), "the host is named: {err}");
    env.ok(&["init"]);
    env.ok(&["init"]); // idempotent

    // Every PostgreSQL migration (0002: runs keep their zone; 0003: timed pauses; 0004:
    // dead-runs counters per schedule; 0005: the covering index of metrics; 0006: attempts name
    // their schedule; 0007: the indexes by status hold finished runs only; 0008: one running
    // run of a `forbid` schedule, held by a unique index; 0009: the last success pruning
    // deleted; 0010: the last run pruning deleted; 0011: a cancelled run's job being stopped;
    // 0012: when a schedule's timing last changed).
    assert_eq!(
        env.count("SELECT max(version) FROM runner_schema_version"),
        12
    );
    // The constraints and indexes SQLite has, partial ones included.
    let indexes = env.count(
        "SELECT count(*) FROM pg_indexes WHERE indexname IN ('job_runs_one_per_instant', 'job_runs_due',
             'job_runs_leases', 'job_definitions_due', 'job_attempts_open', 'job_definitions_pause_ends',
             'job_runs_status', 'job_runs_status_history', 'job_runs_definition_status_history')
           AND indexdef LIKE '% WHERE %'",
    );
    assert_eq!(indexes, 9);
    // A newer schema than this runner knows: refused, exit 4.
    env.client()
        .batch_execute("INSERT INTO runner_schema_version VALUES (99, 0)")
        .expect("forge");
    let err = env.fails(4, &["status"]);
    assert!(err.contains("schema version 99"), "{err}");
    let err = env.fails(4, &["init"]);
    assert!(err.contains("upgrade runner"), "{err}");
}

#[test]
fn schedule_add_creates_the_schema_and_a_tick_executes_runs() {
    let Some(env) = PgEnv::new() else { return };
    env.ok(&[
        "schedule",
        "add",
        "hello",
        "--cron",
        "* * * * *",
        "--",
        "echo",
        "hi",
    ]);
    env.ok(&["run", "hello"]);
    env.ok(&["tick"]);
    let history: serde_json::Value =
        serde_json::from_str(&env.ok(&["history", "--json"])).expect("json");
    assert_eq!(history[0]["status"], "succeeded", "{history:#}");
    let shown = env.ok(&["show", "1"]);
    assert!(shown.contains("hi"), "{shown}");
    // The last tick is recorded by the database's clock (the only host here is the server's).
    let skew = env.count(
        "SELECT abs(value - extract(epoch FROM now())::bigint) FROM runner_state WHERE key = 'last_tick_at'",
    );
    assert!(
        skew < 600,
        "last_tick_at is {skew}s away from the database's clock"
    );
}

/// Four "hosts" (ticks with their own owner, at once) drain one queue: every run executes
/// exactly once and succeeds.
#[test]
fn ticks_on_several_hosts_run_every_run_exactly_once() {
    let Some(env) = PgEnv::init() else { return };
    let log = env.dir.path().join("ran.log");
    let command = format!("echo $RUNNER_RUN_ID >> {}", log.display());
    env.ok(&[
        "--now",
        "2030-01-01T00:00:30Z",
        "schedule",
        "add",
        "every-minute",
        "--cron",
        "* * * * *",
        "--catch-up",
        "all",
        "--overlap",
        "allow",
        "--",
        &command,
    ]);
    // 100 minutes later: 100 instants are due (catch-up all).
    let later = "2030-01-01T01:40:30Z";
    let ticks: Vec<_> = (0..4)
        .map(|host| {
            env.cmd()
                .args([
                    "--now",
                    later,
                    "tick",
                    "--owner",
                    &format!("host-{host}"),
                    "--concurrency",
                    "4",
                ])
                .spawn()
                .expect("spawn tick")
        })
        .collect();
    for mut tick in ticks {
        assert!(tick.wait().expect("wait").success());
    }
    let runs = env.count("SELECT count(*) FROM job_runs");
    assert_eq!(runs, 100, "one run per instant");
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    let mut ids: Vec<&str> = ran.lines().collect();
    let executed = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(executed, ids.len(), "a run executed twice: {ran}");
    // Every due run executed (a tick keeps claiming while due work exists).
    let succeeded = env.count("SELECT count(*) FROM job_runs WHERE status = 'succeeded'");
    let skipped = env.count("SELECT count(*) FROM job_runs WHERE status = 'skipped'");
    assert_eq!(succeeded + skipped, runs);
    assert_eq!(succeeded as usize, executed);
    assert_eq!(executed, 100, "{ran}");
    assert_eq!(env.count("SELECT count(*) FROM job_attempts"), 100);
}

/// A claim reads the due runs in the order of their index and stops at its batch, however long
/// the backlog and whatever the planner's statistics say. Here 5,000 runs became due at once and
/// nobody analyzed the table since, so the planner believes it nearly empty: the claim once
/// hashed the schedules, read every due run and sorted them, so each claim of a drain read the
/// whole backlog. Counted by the server (`pg_stat_user_indexes`), not timed.
#[test]
fn a_claim_reads_its_batch_not_the_whole_backlog() {
    let Some(env) = PgEnv::init() else { return };
    env.ok(&[
        "schedule",
        "add",
        "backlog",
        "--cron",
        &never(),
        "--overlap",
        "allow",
        "--",
        "true",
    ]);
    env.client()
        .execute(
            "INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
                 max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
                 idempotency_key, created_at)
             SELECT d.id, 'manual', 0, 'pending', 0, d.command, d.max_attempts, d.timeout_secs,
                 d.backoff_base_secs, d.backoff_max_secs, 'backlog:' || i, 0
             FROM generate_series(1, 5000) i, job_definitions d",
            &[],
        )
        .expect("insert the backlog");
    let before = index_entries_read(&env);
    // The tick dies right after its first claim committed: one claim, nothing else of the drain.
    let out = env
        .cmd()
        .env("RUNNER_TEST_HOOK", "claimed:kill")
        .args(["tick", "--concurrency", "2"])
        .output()
        .expect("spawn tick");
    assert!(
        out.status.code().is_none(),
        "the tick was to be killed: {out:?}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts"),
        2,
        "one claim of two runs"
    );
    let read = index_entries_read(&env) - before;
    assert!(
        read < 100,
        "one claim of 2 runs read {read} index entries of job_runs (5,000 due)"
    );
}

/// `why` asks for a schedule's first run after an instant ticks passed with no run
/// (`first_run_after`: was it counted as passed over?). It reads that from the index of one
/// entry per scheduled instant, which holds no manual run: through the index of all of the
/// schedule's runs it would step over every manual run after the instant, 5,000 here, to find
/// no run of its own. Counted by the server (`pg_stat_user_indexes`), not timed.
#[test]
fn why_looks_for_the_first_run_after_an_instant_past_the_manual_runs() {
    let Some(env) = PgEnv::init() else { return };
    env.ok(&[
        "--now",
        "2026-01-01T00:00:00Z",
        "schedule",
        "add",
        "hourly",
        "--cron",
        "0 * * * *",
        "-q",
        "--",
        "true",
    ]);
    // Ticks passed January without a run of it (it was paused then), and it was run by hand,
    // 5,000 times, after the instant asked about.
    let mut client = env.client();
    client
        .execute(
            "UPDATE job_definitions SET materialized_through = $1, next_fire_at = $2",
            &[
                &epoch("2026-02-01T00:00:00Z"),
                &epoch("2026-02-01T01:00:00Z"),
            ],
        )
        .expect("move the cursor");
    client
        .execute(
            "INSERT INTO job_runs (definition_id, trigger, scheduled_for, status, run_at, command,
                 max_attempts, timeout_secs, backoff_base_secs, backoff_max_secs,
                 idempotency_key, created_at, finished_at)
             SELECT d.id, 'manual', t, 'succeeded', t, d.command, d.max_attempts,
                 d.timeout_secs, d.backoff_base_secs, d.backoff_max_secs, 'manual:' || t, t, t
             FROM generate_series($1::bigint + 1, $1::bigint + 5000) t, job_definitions d",
            &[&epoch("2026-01-10T06:00:00Z")],
        )
        .expect("insert the manual runs");
    drop(client);
    let before = index_entries_read(&env);
    let out = env.ok(&[
        "--now",
        "2026-02-01T00:30:00Z",
        "why",
        "hourly",
        "--at",
        "2026-01-10T05:00:00Z",
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(report["cause"], "not_recorded", "{report}");
    let read = index_entries_read(&env) - before;
    assert!(
        read < 100,
        "why read {read} index entries of job_runs (5,000 manual runs after the instant)"
    );
}

/// Index entries of `job_runs` read so far, once every other session on the database has ended
/// (a session's counts reach the statistics when it ends).
fn index_entries_read(env: &PgEnv) -> i64 {
    super::common::wait_until(
        Duration::from_secs(120),
        "the other sessions on the test database to end",
        || {
            env.count(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            ) == 0
        },
    );
    env.count(
        "SELECT coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
         WHERE relname = 'job_runs'",
    )
}

#[test]
fn a_wrong_password_or_a_server_that_is_down_exit_4_naming_the_host_never_the_password() {
    let Some(env) = PgEnv::init() else { return };
    let Ok(user) = std::env::var("RUNNER_TEST_PG_PASSWORD_USER") else {
        eprintln!("skipped: RUNNER_TEST_PG_PASSWORD_USER is not set");
        return;
    };
    let wrong = with_user(&env.url, &format!("{user}:not-the-Password-42"));
    let out = env
        .cmd()
        .args(["--db", &wrong, "status"])
        .output()
        .expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("127.0.0.1"), "the host is named: {err}");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(
        !err.contains("not-the-Password-42"),
        "the password is printed: {err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    // Nothing listens on port 1: unreachable, exit 4, the host named, the password not.
    let down = "postgres://someone:Secret-77@127.0.0.1:1/runner";
    let out = env
        .cmd()
        .args(["--db", down, "tick"])
        .output()
        .expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");
    assert!(!err.contains("Secret-77"), "the password is printed: {err}");
}

/// The port of a server (this test's listener) that accepts every connection and holds it open,
/// reading and writing nothing: a stopped postmaster, a proxy whose server is down.
fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    port
}

/// `child`'s output once it exits, killed and failing the test (naming `what`) if it has not
/// within `limit`.
fn output_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: runner was still connecting after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A server that accepts the connection and never answers (a stopped postmaster, a proxy whose
/// server is down): connecting gives up after `connect_timeout`, exit 4, the host named, the
/// password not. Whether or not TLS is asked for (the first thing sent differs). Needs no test
/// server: the listener is this test's.
#[test]
fn a_server_that_accepts_and_never_answers_times_out_exit_4() {
    let port = silent_server();
    let home = tempfile::tempdir().expect("tempdir");
    for params in ["connect_timeout=1", "connect_timeout=1&sslmode=disable"] {
        let url = format!("postgres://someone:Secret-88@127.0.0.1:{port}/runner?{params}");
        let child = Command::new(BIN)
            .args(["--db", &url, "status", "--check"])
            .env("HOME", home.path())
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn runner");
        // Generous: the point is that it ends, not how fast.
        let out = output_within(child, Duration::from_secs(60), params);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(4), "{params}: {err}");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(err.contains("timed out"), "{err}");
        assert!(!err.contains("Secret-88"), "the password is printed: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

/// The schedule names for completion wait 2 s at most for a server, whatever the URL's
/// connect_timeout says: someone is waiting at a TAB. (The listener is this test's.)
#[test]
fn schedule_names_give_up_on_a_server_that_never_answers_after_two_seconds() {
    let port = silent_server();
    let home = tempfile::tempdir().expect("tempdir");
    let url = format!("postgres://someone@127.0.0.1:{port}/runner?connect_timeout=600");
    let child = Command::new(BIN)
        .args(["--db", &url, "completions", "--schedule-names"])
        .env("HOME", home.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn runner");
    // Generous: the point is that it ends, and the message says after how long.
    let out = output_within(child, Duration::from_secs(120), "schedule names");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("timed out after 2s"), "{err}");
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
}

/// A password given as the `password=` parameter is masked wherever the URL is shown or stored,
/// as a `user:password@` one is: `init`, `status` (text and JSON), the header of `schedule
/// export`, a URL error, and the source's record of where `migrate` moved a run.
#[test]
fn a_password_given_as_a_url_parameter_is_never_printed_nor_stored() {
    let Some(env) = PgEnv::new() else { return };
    const SECRET: &str = "Param-Secret-93";
    // The test server trusts this user: the password is sent and never checked.
    let url = format!("{}?password={SECRET}&connect_timeout=10", env.url);
    let masked = "?password=***&connect_timeout=10";
    let never_shown = |what: &str, text: &str| {
        assert!(!text.contains(SECRET), "{what} shows the password: {text}");
    };
    let on = |args: &[&str]| {
        let mut all = vec!["--db", url.as_str()];
        all.extend_from_slice(args);
        env.ok(&all)
    };
    let created = on(&["init"]);
    never_shown("init", &created);
    assert!(created.contains(masked), "{created}");
    on(&[
        "schedule",
        "add",
        "hello",
        "--cron",
        "* * * * *",
        "--",
        "true",
    ]);
    let status = on(&["status"]);
    never_shown("status", &status);
    assert!(status.contains(masked), "{status}");
    let json: serde_json::Value = serde_json::from_str(&on(&["status", "--json"])).expect("json");
    let location = json["database"]["location"].as_str().expect("location");
    never_shown("status --json", location);
    assert!(location.ends_with(masked), "{json:#}");
    let exported = on(&["schedule", "export"]);
    never_shown("schedule export", &exported);
    assert!(exported.contains(masked), "{exported}");

    let bad = format!("{}?password={SECRET}&sslmode=sometimes", env.url);
    let err = env.fails(2, &["--db", &bad, "status"]);
    never_shown("a URL error", &err);
    assert!(
        err.contains("invalid value \"sometimes\" for parameter sslmode"),
        "{err}"
    );
    // A password parameter whose name is refused is masked all the same.
    let bad = format!("{}?PASSWORD={SECRET}", env.url);
    let err = env.fails(2, &["--db", &bad, "status"]);
    never_shown("a URL error", &err);
    assert!(err.contains("unknown parameter \"PASSWORD\""), "{err}");

    // Moved from SQLite: the source records where each pending run went, the password masked.
    let old = env.dir.path().join("old.db");
    let old = old.to_str().expect("utf-8");
    env.ok(&[
        "--db", old, "schedule", "add", "moving", "--cron", "@daily", "--", "true",
    ]);
    env.ok(&["--db", old, "run", "moving"]);
    let moved = env.ok(&["--db", old, "migrate", "--to", &url]);
    never_shown("migrate", &moved);
    let source = rusqlite::Connection::open(old).expect("open the source");
    let text = |sql: &str| -> String { source.query_row(sql, [], |row| row.get(0)).expect(sql) };
    let recorded =
        text("SELECT group_concat(detail, ' ') FROM job_events WHERE kind = 'CANCELLED'");
    never_shown("the CANCELLED event", &recorded);
    assert!(recorded.contains(masked), "{recorded}");
    let detail = text("SELECT error_detail FROM job_runs WHERE status = 'cancelled'");
    never_shown("the cancelled run", &detail);
}

/// A database that is read-only for this session (a standby, or `default_transaction_read_only`)
/// refuses each command that writes with exit 4, saying so and naming the database, as a
/// read-only SQLite file does; reading still works.
#[test]
fn a_read_only_database_refuses_writes_with_exit_4() {
    let Some(env) = PgEnv::init() else { return };
    env.ok(&[
        "schedule",
        "add",
        "hello",
        "--cron",
        "* * * * *",
        "--",
        "true",
    ]);
    env.client()
        .batch_execute(&format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            env.name
        ))
        .expect("make the database read-only");
    for args in [
        &["schedule", "add", "other", "--cron", "@daily", "--", "true"][..],
        &["run", "hello"],
        &["tick"],
        &["schedule", "pause", "hello"],
    ] {
        let err = env.fails(4, args);
        assert!(err.contains("is read-only"), "{args:?}: {err}");
        assert!(err.contains("read-only transaction"), "the cause: {err}");
        assert!(
            err.contains("127.0.0.1") && err.contains(&env.name),
            "the database is named: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    env.ok(&["status"]);
    env.ok(&["schedule", "list"]);
}

/// A database already holding another application's table of one of runner's names is not a
/// runner database: exit 4, as SQLite says of a file that is not runner's, and nothing created.
#[test]
fn a_database_with_another_applications_tables_is_not_a_runner_database() {
    let Some(env) = PgEnv::new() else { return };
    env.client()
        .batch_execute("CREATE TABLE job_definitions (id int PRIMARY KEY, title text)")
        .expect("another application's table");
    for args in [
        &["init"][..],
        &["schedule", "add", "hello", "--cron", "@daily", "--", "true"],
    ] {
        let err = env.fails(4, args);
        assert!(err.contains("not a runner database"), "{args:?}: {err}");
        assert!(err.contains("job_definitions"), "the table is named: {err}");
        assert!(err.contains(&env.name), "the database is named: {err}");
    }
    // A dry run refuses it too: a check mode fails where the apply it checks would.
    let file = env.dir.path().join("schedules.toml");
    std::fs::write(&file, "[hello]\ncron = \"@daily\"\ncommand = \"true\"\n").expect("write");
    let file = file.to_str().expect("utf-8");
    let err = env.fails(4, &["schedule", "apply", file, "--dry-run"]);
    assert!(err.contains("not a runner database"), "{err}");
    assert_eq!(
        env.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        1,
        "nothing created beside the other application's table"
    );
}

/// Two `init`s of one empty database at once both succeed (the README: init is idempotent, and
/// concurrent ones wait for each other). One finds no schema version and stalls there
/// (`RUNNER_TEST_HOOK` point `schema-version-read`) while the other creates the whole schema;
/// released, it must take the tables it now sees for runner's own, not another application's.
#[test]
fn an_init_beside_another_init_of_an_empty_database_succeeds() {
    let Some(env) = PgEnv::new() else { return };
    let gate = env.dir.path().join("gate");
    let stalled = env
        .cmd()
        .arg("init")
        .env(
            "RUNNER_TEST_HOOK",
            format!("schema-version-read:wait={}", gate.display()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn init");
    let reached = env.dir.path().join("gate.reached");
    wait_until(
        Duration::from_secs(120),
        "the first init to read the schema version",
        || reached.exists(),
    );
    env.ok(&["init"]);
    std::fs::write(&gate, "").expect("open the gate");
    let out = stalled.wait_with_output().expect("init");
    assert!(
        out.status.success(),
        "the stalled init failed ({:?}): {}",
        out.status.code(),
        stderr(&out)
    );
    assert_eq!(
        env.count("SELECT max(version) FROM runner_schema_version"),
        12
    );
}

/// The same, the other way round: one `init` is creating the schema, not committed yet
/// (`RUNNER_TEST_HOOK` point `schema-migrated`, the migration lock held), while another finds
/// no schema version and waits for that lock. Once the first commits, the second must see the
/// schema whole (the server's cache of names looked up before the wait must not hide it).
#[test]
fn an_init_waiting_for_another_init_to_commit_succeeds() {
    let Some(env) = PgEnv::new() else { return };
    let gate = env.dir.path().join("gate");
    let quiet = std::process::Stdio::piped;
    let first = env
        .cmd()
        .arg("init")
        .env(
            "RUNNER_TEST_HOOK",
            format!("schema-migrated:wait={}", gate.display()),
        )
        .stdout(quiet())
        .stderr(quiet())
        .spawn()
        .expect("spawn init");
    let reached = env.dir.path().join("gate.reached");
    wait_until(
        Duration::from_secs(120),
        "the first init to create the schema",
        || reached.exists(),
    );
    let second = env
        .cmd()
        .arg("init")
        .stdout(quiet())
        .stderr(quiet())
        .spawn()
        .expect("spawn init");
    wait_until(
        Duration::from_secs(120),
        "the second init to wait for the migration lock",
        || {
            env.count(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                 WHERE d.datname = current_database() AND l.locktype = 'advisory'
                   AND NOT l.granted",
            ) > 0
        },
    );
    std::fs::write(&gate, "").expect("open the gate");
    for (which, init) in [("first", first), ("second", second)] {
        let out = init.wait_with_output().expect("init");
        assert!(
            out.status.success(),
            "the {which} init failed ({:?}): {}",
            out.status.code(),
            stderr(&out)
        );
    }
    assert_eq!(
        env.count("SELECT max(version) FROM runner_schema_version"),
        12
    );
}

/// The privileges runner needs, as the README lists them. `init` by a role that may not create
/// tables in the schema says that is what it lacks (CREATE on the schema, or `init` by its
/// owner), not the runner tables' privileges: there are no tables yet. Once they exist, a role
/// without their privileges is told to get them; with SELECT, INSERT, UPDATE and DELETE on them
/// (nothing on sequences: the ids are identity columns) every command works.
#[test]
fn a_role_is_told_the_privileges_it_lacks_and_works_with_those_the_readme_lists() {
    let Some(env) = PgEnv::new() else { return };
    let role = format!("{}_limited", env.name);
    // Before PostgreSQL 15 every role may create tables in `public`.
    env.client()
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC"
        ))
        .expect("create a role");
    let limited = with_user(&env.url, &role);
    let as_limited = |args: &[&str]| run_as(&env, &limited, args);
    let init = as_limited(&["init"]);
    let add = as_limited(&["schedule", "add", "hello", "--cron", "@daily", "--", "true"]);
    env.ok(&["init"]);
    let status = as_limited(&["status"]);
    env.client()
        .batch_execute(&format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        ))
        .expect("grant");
    let granted: Vec<(String, Output)> = [
        &["init"][..],
        &["schedule", "add", "hello", "--cron", "@daily", "--", "true"],
        &["run", "hello"],
        &["tick"],
        &["history"],
        &["schedule", "pause", "hello"],
        &["prune", "--older-than", "0s"],
        &["schedule", "rm", "hello"],
    ]
    .iter()
    .map(|args| (args.join(" "), as_limited(args)))
    .collect();
    let _ = env
        .client()
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));

    for out in [&init, &add] {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(err.contains("permission denied for schema public"), "{err}");
        assert!(
            err.contains("grant this user CREATE on that schema, or run `runner init` as"),
            "{err}"
        );
        assert!(!err.contains("tables' privileges"), "{err}");
    }
    let err = stderr(&status);
    assert_eq!(status.status.code(), Some(4), "{err}");
    assert!(
        err.contains("grant this user the runner tables' privileges"),
        "{err}"
    );
    for (args, out) in &granted {
        assert!(out.status.success(), "runner {args}: {}", stderr(out));
    }
    let history = stdout(&granted[4].1);
    assert!(history.contains("succeeded"), "the run ran: {history}");
}

#[test]
fn the_password_comes_from_pgpassword_or_the_password_file() {
    let Some(env) = PgEnv::init() else { return };
    let Ok(user) = std::env::var("RUNNER_TEST_PG_PASSWORD_USER") else {
        eprintln!("skipped: RUNNER_TEST_PG_PASSWORD_USER is not set");
        return;
    };
    let url = with_user(&env.url, &user);
    // Without a password the server refuses, and the message names the places one comes from
    // (the driver's own said "invalid configuration: password missing"); the role may not read
    // the tables either way, so a login that worked shows as a permission error, not an
    // authentication one.
    let pgpass = env.dir.path().join(".pgpass");
    let no_password = |out: &Output| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(err.contains("127.0.0.1"), "the host is named: {err}");
        assert!(
            err.contains(&format!(
                "none was found in the URL, PGPASSWORD or the password file ({})",
                pgpass.display()
            )),
            "{err}"
        );
        assert!(!err.contains("invalid configuration"), "{err}");
    };
    no_password(&env.run(&["--db", &url, "status"]));
    let logged_in = |out: &Output| {
        let err = stderr(out);
        assert!(!err.contains("authentication failed"), "{err}");
        assert!(!err.contains("password"), "{err}");
    };
    let out = env
        .cmd()
        .args(["--db", &url, "status"])
        .env("PGPASSWORD", "right-password")
        .output()
        .expect("run");
    logged_in(&out);
    std::fs::write(&pgpass, format!("127.0.0.1:*:*:{user}:right-password\n")).expect("write");
    use std::os::unix::fs::PermissionsExt;
    // A file others may read is ignored, with a warning, as libpq does: no password then.
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = env.run(&["--db", &url, "status"]);
    no_password(&out);
    assert!(
        stderr(&out).contains("group or world access"),
        "{}",
        stderr(&out)
    );
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = env
        .cmd()
        .args(["--db", &url, "status"])
        .output()
        .expect("run");
    logged_in(&out);
}

#[test]
fn tls_when_the_url_asks_for_it() {
    let Some(env) = PgEnv::init() else { return };
    if std::env::var("RUNNER_TEST_PG_TLS").is_err() {
        eprintln!("skipped: the test server has no TLS");
        return;
    }
    // The server's certificate names `localhost` and comes from a CA the system does not trust.
    let on = |host: &str, mode: &str| {
        let url = env.url.replacen("127.0.0.1", host, 1);
        format!("{url}?sslmode={mode}")
    };
    let status_with = |url: &str, trusted: bool| {
        let mut cmd = env.cmd();
        cmd.env_remove("SSL_CERT_DIR").args(["--db", url, "status"]);
        match std::env::var("RUNNER_TEST_PG_CA") {
            Ok(ca) if trusted => cmd.env("SSL_CERT_FILE", ca),
            _ => cmd.env_remove("SSL_CERT_FILE"),
        };
        cmd.output().expect("run")
    };
    let succeeds = |out: &Output| {
        assert!(out.status.success(), "stderr: {}", stderr(out));
    };
    let refused = |out: &Output, why: &str| {
        assert_eq!(out.status.code(), Some(4), "stderr: {}", stderr(out));
        assert!(stderr(out).contains(why), "{}", stderr(out));
    };
    // `require` encrypts and checks nothing; the verifying modes refuse an unknown CA.
    succeeds(&status_with(&on("127.0.0.1", "require"), false));
    refused(
        &status_with(&on("localhost", "verify-full"), false),
        "certificate",
    );
    refused(
        &status_with(&on("localhost", "verify-ca"), false),
        "certificate",
    );
    let Ok(_) = std::env::var("RUNNER_TEST_PG_CA") else {
        eprintln!("skipped the rest: the test server's CA is unknown");
        return;
    };
    // With the CA trusted: `verify-ca` takes the certificate whatever host it names,
    // `verify-full` only for the host it names.
    succeeds(&status_with(&on("127.0.0.1", "verify-ca"), true));
    succeeds(&status_with(&on("localhost", "verify-full"), true));
    // A value percent-encoded is decoded first, as libpq decodes it: the same mode.
    succeeds(&status_with(&on("localhost", "verify%2Dfull"), true));
    refused(
        &status_with(&on("127.0.0.1", "verify%2Dfull"), true),
        "certificate",
    );
    refused(
        &status_with(&on("127.0.0.1", "verify-full"), true),
        "certificate",
    );
}

/// `runner ARGS` as a tick on another host: in a UTS namespace of its own whose host name is
/// `host` (`unshare -u`, root only). `None` (after saying why) where namespaces are not allowed.
fn on_host(env: &PgEnv, host: &str, args: &[&str]) -> Option<Command> {
    if !super::common::unshare_allowed() {
        eprintln!("skipped: `unshare -u` is not allowed here (it needs root)");
        return None;
    }
    let mut cmd = env.cmd();
    cmd.args(args);
    Some(super::common::on_other_host(&cmd, host))
}

/// `runner ARGS` on a host whose clock is off by `shift` (faketime's `-f` offset, e.g. `+2h`):
/// the host's clock, not the database's, which is what `--now` and the test clock step cannot
/// do (both shift the clock the runner follows, the database's). `None` (after saying why)
/// without faketime (`.ci/run` installs it).
fn with_host_clock_off(env: &PgEnv, shift: &str, args: &[&str]) -> Option<Command> {
    let faketime = Command::new("faketime")
        .args(["-f", "+0", "true"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !faketime {
        eprintln!("skipped: faketime is not installed (Debian package faketime)");
        return None;
    }
    let mut cmd = env.cmd();
    // Only the wall clock is off: a monotonic clock moved back could fall before zero.
    cmd.args(args).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    Some(super::common::wrapped(&["faketime", "-f", shift], &cmd))
}

/// `schedule add` on a host whose clock is two hours ahead of the database's, or behind, saves
/// its creation and first fire time by the database's clock, as every other command does. (It
/// read the clock before connecting, the host's: ahead, the schedule did not fire for two hours;
/// behind, the first tick ran the instants of the two hours before it existed.)
#[test]
fn schedule_add_on_a_host_whose_clock_is_off_saves_the_databases_time() {
    let Some(env) = PgEnv::init() else { return };
    for (name, shift) in [("ahead", "+2h"), ("behind", "-2h")] {
        let args = [
            "schedule",
            "add",
            name,
            "--cron",
            "*/10 * * * *",
            "--",
            "true",
        ];
        let Some(mut add) = with_host_clock_off(&env, shift, &args) else {
            return;
        };
        let out = add.output().expect("spawn faketime");
        assert!(out.status.success(), "{shift}: {}", stderr(&out));
        let (created_off, first_fire_after) = {
            let row = env
                .client()
                .query_one(
                    "SELECT created_at - extract(epoch FROM now())::bigint, next_fire_at - created_at
                     FROM job_definitions WHERE name = $1",
                    &[&name],
                )
                .expect("the schedule's row");
            (row.get::<_, i64>(0), row.get::<_, i64>(1))
        };
        // Two hours are 7200 s; an hour apart is by the database's clock, however slow the add.
        assert!(
            created_off.abs() < 3600,
            "host clock {shift}: created {created_off}s from the database's now"
        );
        assert!(
            (1..=600).contains(&first_fire_after),
            "host clock {shift}: first fire {first_fire_after}s after its creation"
        );
    }
}

/// `schedule next NAME` on a host whose clock is off previews from the database's clock, as the
/// tick will fire (it read the clock before connecting: two hours ahead, it skipped two hours of
/// fire times).
#[test]
fn schedule_next_on_a_host_whose_clock_is_off_previews_from_the_databases_time() {
    let Some(env) = PgEnv::init() else { return };
    env.ok(&[
        "schedule",
        "add",
        "often",
        "--cron",
        "*/10 * * * *",
        "-q",
        "--",
        "true",
    ]);
    for shift in ["+2h", "-2h"] {
        let args = ["schedule", "next", "often", "-n", "1", "--json"];
        let Some(mut next) = with_host_clock_off(&env, shift, &args) else {
            return;
        };
        let out = next.output().expect("spawn faketime");
        assert!(out.status.success(), "{shift}: {}", stderr(&out));
        let first: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("next --json is JSON");
        let at = first[0]["at_epoch"].as_i64().expect("a fire time");
        let ahead = at - env.count("SELECT extract(epoch FROM now())::bigint");
        // Ten minutes at most by the database's clock; the host's is two hours off.
        assert!(
            (-60..=600).contains(&ahead),
            "host clock {shift}: the next fire time is {ahead}s from the database's now"
        );
    }
}

/// Two ticks (with `tick_args`), their clocks an hour and two past the database's: past any
/// lease and backoff, they recover and retry whatever an earlier tick left unfinished.
fn ticks_past_leases_and_backoffs(env: &PgEnv, tick_args: &[&str]) {
    for ahead in [3600, 7200] {
        let now = database_time_plus(env, ahead);
        env.ok(&[&["--now", now.as_str(), "tick"], tick_args].concat());
    }
}

/// The database's clock, `ahead` seconds on, as `--now` wants it.
fn database_time_plus(env: &PgEnv, ahead: i64) -> String {
    let epoch = env.count("SELECT extract(epoch FROM now())::bigint") + ahead;
    chrono::DateTime::from_timestamp(epoch, 0)
        .expect("a time")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A host recovers another host's expired lease (the run is retried) but cannot stop processes
/// there, so it leaves the attempt open; the owning host's next tick kills what the dead tick
/// left running and closes the attempt.
#[test]
fn a_host_recovers_another_hosts_lease_and_the_owner_stops_its_leftovers() {
    let Some(env) = PgEnv::init() else { return };
    let Some(mut tick_a) = on_host(&env, "host-a", &["tick", "--lease", "3s", "--owner", "a"])
    else {
        return;
    };
    // The job says it has passed its gate: a tick killed between recording the start and
    // opening the gate leaves a shell that exits without running the command.
    let started = env.dir.path().join("started");
    let command = format!(
        "touch {}; exec sleep 600",
        super::common::sh_quote(&started)
    );
    env.ok(&[
        "schedule",
        "add",
        "slow",
        "--cron",
        &never(),
        "--",
        &command,
    ]);
    env.ok(&["run", "slow"]);
    let mut tick_a = tick_a.spawn().expect("spawn tick on host-a");
    let mut job_pid = 0;
    super::common::wait_until(Duration::from_secs(120), "the job to start", || {
        job_pid =
            env.count("SELECT coalesce(max(child_pid), 0) FROM job_attempts WHERE run_id = 1");
        started.exists() && job_pid > 0 && super::common::process_alive(job_pid as u32)
    });
    tick_a.kill().expect("kill -9 the tick on host-a");
    tick_a.wait().expect("reap");
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts WHERE host = 'host-a'"),
        1
    );

    // host-b, its clock past the lease: recovers the run, leaves the attempt (and the job) alone.
    let later = database_time_plus(&env, 600);
    let out = on_host(&env, "host-b", &["--now", &later, "tick", "--owner", "b"])
        .expect("unshare")
        .output()
        .expect("tick on host-b");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        env.count(
            "SELECT count(*) FROM job_runs WHERE id = 1 AND status = 'pending' AND attempt = 1"
        ),
        1,
        "recovered and waiting to retry"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts WHERE run_id = 1 AND finished_at IS NULL"),
        1,
        "the attempt stays open for its host"
    );
    assert!(
        super::common::process_alive(job_pid as u32),
        "host-b cannot kill host-a's job"
    );
    let recovered = env.count(
        "SELECT count(*) FROM job_events WHERE run_id = 1 AND kind = 'RECOVERED'
           AND detail LIKE '%stopped by that host''s next tick%'",
    );
    assert_eq!(recovered, 1);

    // host-a's next tick: kills its leftover and closes the attempt.
    let out = on_host(&env, "host-a", &["--now", &later, "tick", "--owner", "a2"])
        .expect("unshare")
        .output()
        .expect("tick on host-a");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !super::common::process_alive(job_pid as u32),
        "the leftover job is killed"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM job_attempts WHERE run_id = 1 AND attempt = 1
               AND finished_at IS NOT NULL AND error_code = 'LEASE:EXPIRED'"
        ),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_events WHERE run_id = 1 AND kind = 'ATTEMPT_CLOSED'"),
        1
    );
}

/// A cancelled run has two open attempts (another host recovered and retried it), attempt 1 on
/// host-a and attempt 2 on host-b, their runners gone, its `forbid` schedule waiting for its job
/// (`stopping_by`). Each host's tick closes its own at the same moment: host-a's close is held by
/// a hook once it closed attempt 1 and looked whether another is open, before its commit, while
/// host-b's tick closes attempt 2. Each used to see the other's attempt still open (read
/// committed: the other's close was not committed when its statement began), so neither ended
/// the wait, and the schedule waited until the deadline. Now each close locks the run's row
/// first: host-b's waits for host-a's commit, then sees attempt 1 closed and ends the wait.
#[test]
fn two_hosts_closing_a_cancelled_runs_two_attempts_at_once_end_its_wait() {
    let Some(env) = PgEnv::init() else { return };
    let go = env.dir.path().join("go");
    let Some(mut tick_a) = on_host(&env, "host-a", &["tick"]) else {
        return;
    };
    tick_a.env(
        "RUNNER_TEST_HOOK",
        format!("orphan-closed:wait={}", go.display()),
    );
    env.ok(&[
        "schedule",
        "add",
        "alone",
        "--cron",
        &never(),
        "--overlap",
        "forbid",
        "--",
        "true",
    ]);
    env.ok(&["run", "alone"]);
    // Forged: cancelled on attempt 2, its job to be stopped by 2100, both attempts open under
    // runners that are gone (a reaped child's pid, a start time no live process has).
    let mut client = env.client();
    client
        .execute(
            "UPDATE job_runs SET status = 'cancelled', attempt = 2, started_at = 1, finished_at = 2,
                 error_code = 'CANCELLED', stopping_by = 4102444800
             WHERE id = 1",
            &[],
        )
        .expect("cancel the run");
    let mut gone = Command::new("true").spawn().expect("spawn true");
    gone.wait().expect("wait for true");
    let gone_pid = i64::from(gone.id());
    for (attempt, host) in [(1_i64, "host-a"), (2, "host-b")] {
        client
            .execute(
                "INSERT INTO job_attempts (run_id, attempt, owner, host, runner_pid,
                     runner_start_time, lease_token, started_at, definition_id)
                 SELECT 1, $1, $2, $2, $3, 1, $2, 1, definition_id FROM job_runs WHERE id = 1",
                &[&attempt, &host, &gone_pid],
            )
            .expect("an open attempt");
    }

    let mut tick_a = tick_a.spawn().expect("spawn the tick on host-a");
    let reached = go.with_extension("reached");
    wait_until(Duration::from_secs(120), "host-a's close", || {
        reached.exists()
    });
    let mut tick_b = on_host(&env, "host-b", &["tick"])
        .expect("unshare")
        .spawn()
        .expect("spawn the tick on host-b");
    // host-b's tick either ends (its close did not wait for host-a's) or waits for a lock
    // host-a's transaction holds.
    wait_until(Duration::from_secs(120), "host-b's close", || {
        tick_b.try_wait().expect("try_wait").is_some()
            || env.count(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            ) > 0
    });
    std::fs::write(&go, "").expect("let host-a commit");
    for (host, tick) in [("host-a", &mut tick_a), ("host-b", &mut tick_b)] {
        let status = tick.wait().expect("wait for the tick");
        assert!(status.success(), "the tick on {host}: {status:?}");
    }
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts WHERE run_id = 1 AND finished_at IS NULL"),
        0,
        "both attempts are closed"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 1 AND stopping_by IS NOT NULL"),
        0,
        "the run no longer waits for its job"
    );
}

/// After an upgrade, the first command to connect applies the newer schema, which takes the
/// tables' owner. A role with only the privileges a tick needs was told to be granted them
/// (which it had), by every command and by doctor; now it is told which versions differ and to
/// run `runner init` as the tables' owner, and once that is done it works.
#[test]
fn a_role_that_cannot_migrate_an_older_schema_is_told_to_run_init_as_the_owner() {
    let Some(env) = PgEnv::init() else { return };
    let latest = env.count("SELECT max(version) FROM runner_schema_version");
    let role = format!("{}_ticker", env.name);
    // The schema as version 10 left it (migrations 11 and 12 undone), the role granted what a
    // tick needs.
    env.client()
        .batch_execute(&format!(
            "ALTER TABLE job_definitions DROP COLUMN timing_changed_at;
             ALTER TABLE job_runs DROP COLUMN stopping_by;
             DELETE FROM runner_schema_version WHERE version >= 11;
             CREATE ROLE {role} LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        ))
        .expect("an older schema and a restricted role");
    let limited = with_user(&env.url, &role);
    let as_limited = |args: &[&str]| run_as(&env, &limited, args);
    let refused: Vec<(&str, Output)> = ["tick", "status", "doctor"]
        .into_iter()
        .map(|command| (command, as_limited(&[command])))
        .collect();
    env.ok(&["init"]);
    let after = as_limited(&["tick"]);
    let _ = env
        .client()
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));

    let told = format!(
        "the database is at schema version 10, this runner needs {latest}; run `runner init` as \
         the tables' owner"
    );
    for (command, out) in &refused {
        let said = format!("{}{}", stdout(out), stderr(out));
        assert!(said.contains(&told), "runner {command}: {said}");
        assert!(
            !said.contains("grant this user"),
            "runner {command}: {said}"
        );
        if *command != "doctor" {
            assert_eq!(out.status.code(), Some(4), "runner {command}: {said}");
        } else {
            assert!(!out.status.success(), "runner doctor: {said}");
        }
    }
    assert!(after.status.success(), "{}", stderr(&after));
}

/// The server goes away while a tick holds a running job: the tick says so in a line that
/// names the server, connects again, and nothing is lost: the run ends succeeded, attempts never
/// overlap. A restart as this test database's clients see it: the server ends their sessions
/// (`pg_terminate_backend`, what a fast shutdown does) and refuses new ones for a while; the
/// rest of the shared test server, and the tests running on it, go on undisturbed.
#[test]
fn a_server_restart_during_a_tick_fails_cleanly_and_nothing_is_lost() {
    let Some(env) = PgEnv::init() else { return };
    let started = env.dir.path().join("started");
    let release = env.dir.path().join("release");
    let command = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.1; done",
        started.display(),
        release.display()
    );
    env.ok(&[
        "schedule",
        "add",
        "steady",
        "--cron",
        &never(),
        "--",
        &command,
    ]);
    env.ok(&["run", "steady"]);
    let tick = env
        .cmd()
        .args(["tick", "--lease", "3s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tick");
    super::common::wait_until(Duration::from_secs(120), "the job to start", || {
        started.exists()
    });
    let mut admin = Client::connect(&env.server, NoTls).expect("connect as admin");
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {0} ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{0}';",
            env.name
        ))
        .expect("take the database away");
    // Let a heartbeat (every second) meet the lost connection, then bring the database back and
    // let the job end.
    std::thread::sleep(Duration::from_secs(3));
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            env.name
        ))
        .expect("bring the database back");
    std::fs::write(&release, "").expect("release the job");
    let out = tick.wait_with_output().expect("wait for the tick");
    let err = stderr(&out);
    // 4 when a heartbeat met the loss (the database could not be reached), 0 if none did.
    assert!(
        matches!(out.status.code(), Some(0 | 4 | 5)),
        "exit {:?}: {err}",
        out.status.code()
    );
    // One clear line per problem met, naming the server, and nothing else (none when every
    // write the tick had to make while the database was away could wait for its return).
    for line in err.lines() {
        assert!(
            line.starts_with("runner: error:") && line.contains("PostgreSQL at 127.0.0.1"),
            "{err}"
        );
    }
    // Later ticks (clocks past any lease and backoff) finish whatever is left.
    ticks_past_leases_and_backoffs(&env, &[]);
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 1 AND status = 'succeeded'"),
        1,
        "{err}"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM job_attempts a JOIN job_attempts b
               ON a.run_id = b.run_id AND a.attempt < b.attempt
             WHERE a.finished_at IS NULL OR a.finished_at > b.started_at"
        ),
        0,
        "attempts overlap"
    );
}

/// The database goes away while a tick runs a job, and stays away until the job has ended: the
/// tick used to print a line for every write that then failed (each heartbeat, the job's end, the
/// claim after it, the syncs, the automatic prune: cron mails them all) and exit 1. Now: one line
/// saying the connection was lost, one naming the run whose end could not be recorded, exit 4 (the
/// database cannot be reached); the job is seen to its end, not left running; once the database is
/// back, recovery retries the run exactly once, and it succeeds.
#[test]
fn a_lost_connection_is_one_line_exit_4_and_the_run_is_retried_once() {
    let Some(env) = PgEnv::init() else { return };
    let (starts, release) = queue_held_job(&env);
    // Heart-beaten every 5 s.
    let tick = env
        .cmd()
        .args(["tick", "--lease", "15s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tick");
    super::common::wait_until(Duration::from_secs(120), "the job to start", || {
        std::fs::read_to_string(&starts).is_ok_and(|s| s.ends_with('\n'))
    });
    let job_pid: u32 = std::fs::read_to_string(&starts)
        .expect("starts")
        .trim()
        .parse()
        .expect("the job's pid");
    let mut admin = Client::connect(&env.server, NoTls).expect("connect as admin");
    take_the_database_away(&env, &mut admin);
    // Two heartbeats or more meet the loss (each tried to connect again, and failed), then the
    // job ends while the database is still away.
    std::thread::sleep(Duration::from_secs(12));
    std::fs::write(&release, "").expect("release the job");
    let out = tick.wait_with_output().expect("wait for the tick");
    bring_the_database_back(&env, &mut admin);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line for the loss, one for the run: {err}"
    );
    assert!(
        lines[0].starts_with("runner: error: ")
            && lines[0].contains("lost the connection to PostgreSQL at 127.0.0.1")
            && lines[0].contains("claiming no more runs"),
        "{err}"
    );
    assert!(
        lines[1].contains("run 1 (attempt 1) was not recorded"),
        "{err}"
    );
    // The tick saw its job to the end: nothing of it is left running.
    assert!(
        !super::common::process_alive(job_pid),
        "the job outlived its tick"
    );
    // Later ticks (clocks past the lease and the backoff) recover the run and retry it once.
    ticks_past_leases_and_backoffs(&env, &[]);
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 1 AND status = 'succeeded'"),
        1,
        "{err}"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM job_attempts
             WHERE run_id = 1 AND attempt = 1 AND error_code = 'LEASE:EXPIRED'"
        ),
        1
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts WHERE run_id = 1"),
        2
    );
    let started = std::fs::read_to_string(&starts).expect("starts");
    assert_eq!(
        started.lines().count(),
        2,
        "run once, retried once: {started}"
    );
}

/// The server ends the tick's session while its job runs, and is back at once (a restart takes
/// well under a second, or an administrator ended the session): the tick learns it only by
/// sending its next statement, and the client used to connect again only for the statement after
/// that one. So the job's end, the first write after the restart, failed ("lost the
/// connection"), the tick exited 4, and once the lease expired the job ran a second time. Now the
/// end is recorded on the first try, on a new connection: the run succeeded, once.
#[test]
fn the_first_write_after_the_session_was_ended_lands_on_a_new_connection() {
    let Some(env) = PgEnv::init() else { return };
    let (starts, release) = queue_held_job(&env);
    let tick = env
        .cmd()
        .args(["tick", "--concurrency", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tick");
    // The job's start is recorded: the tick now sends nothing until the job ends (its first
    // heartbeat is 20 s away; if a slow machine reaches it, it is the first write instead).
    super::common::wait_until(Duration::from_secs(120), "the job's start", || {
        env.count("SELECT count(*) FROM job_attempts WHERE run_id = 1 AND child_pid IS NOT NULL")
            == 1
    });
    // The tick's sessions (runner names itself; the test's own are unnamed).
    let sessions = format!(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = '{}' AND application_name = 'runner'",
        env.name
    );
    let mut admin = Client::connect(&env.server, NoTls).expect("connect as admin");
    let pids: Vec<i32> = admin
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'runner'",
            &[&env.name],
        )
        .expect("the tick's sessions")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(pids.len(), 1, "the tick holds one session");
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pids[0]])
        .expect("end the tick's session");
    super::common::wait_until(Duration::from_secs(120), "the session to end", || {
        admin
            .query_one(sessions.as_str(), &[])
            .expect("sessions")
            .get::<_, i64>(0)
            == 0
    });
    // Idle for a while, as a connection is across a restart, before the job ends.
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&release, "").expect("release the job");
    let out = tick.wait_with_output().expect("wait for the tick");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err, "", "no error line");
    run_1_succeeded_at_its_one_attempt(&env, &starts);
}

/// The server restarts while a tick with a free slot runs a job: the tick looks for newly due
/// runs every second, and its claim met the restart (the session ended, the server not taking
/// connections yet): it said it lost the connection and exited 4, though its job's end was
/// recorded once the server was back and nothing was lost. Now the claim that finds the server
/// away sends nothing and is done without: the tick claims nothing while the server is away,
/// sees its job to its end, records it on a new connection, and exits 0 having printed nothing.
/// (The tick stalls at its claim while the database is taken away: the restart, as this
/// database's clients see it.) It then claimed nothing more until the next tick; now, its job's
/// end having landed on a new connection, it claims again: a run due once the server is back
/// runs in the same tick.
#[test]
fn a_restart_while_a_tick_looks_for_more_runs_costs_nothing() {
    let Some(env) = PgEnv::init() else { return };
    let (starts, release) = queue_held_job(&env);
    let later_log = env.dir.path().join("later");
    let later = format!("echo $RUNNER_RUN_ID >> {}", later_log.display());
    env.ok(&["schedule", "add", "later", "--cron", &never(), "--", &later]);
    let go = env.dir.path().join("go");
    let tick = env
        .cmd()
        .args(["tick", "--concurrency", "4"])
        .env("RUNNER_TEST_HOOK", format!("polling:wait={}", go.display()))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tick");
    let reached = env.dir.path().join("go.reached");
    wait_until(
        Duration::from_secs(120),
        "the tick to look for more runs",
        || reached.exists(),
    );
    let mut admin = Client::connect(&env.server, NoTls).expect("connect as admin");
    take_the_database_away(&env, &mut admin);
    std::fs::write(&go, "").expect("let the tick claim");
    // The claim meets the database away (it is made at once), then the database is back before
    // the job ends.
    std::thread::sleep(Duration::from_secs(3));
    bring_the_database_back(&env, &mut admin);
    env.ok(&["run", "later"]);
    std::fs::write(&release, "").expect("release the job");
    let out = tick.wait_with_output().expect("wait for the tick");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err, "", "nothing to report");
    run_1_succeeded_at_its_one_attempt(&env, &starts);
    assert_eq!(
        std::fs::read_to_string(&later_log).unwrap_or_default(),
        "2\n",
        "the run due once the server was back ran in the same tick, once"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 2 AND status = 'succeeded'"),
        1
    );
}

/// Jobs wait at their gate, their starts recorded, when the connection is lost (the tick stalled
/// there; the database then refuses connections and the tick's session is ended). The look at
/// their leases cannot reach the database, and nothing could record their ends: they used to be
/// released all the same (seen holding their leases less than a lease ago), ran with nobody to
/// record them, and ran again once recovery retried them. Now none starts: their shells exit at
/// the gate, the tick's last line counts them, and recovery retries each run, which runs once.
#[test]
fn jobs_at_their_gate_when_the_connection_is_lost_never_start() {
    lose_the_connection_with_jobs_at_their_gate("recorded");
}

/// The same, the loss met by the write of the jobs' starts (the tick stalled before it): they
/// never started before either, but the tick's last line did not say so.
#[test]
fn jobs_whose_starts_meet_the_lost_connection_are_counted_as_not_started() {
    lose_the_connection_with_jobs_at_their_gate("spawned");
}

/// Three jobs of one claim, spawned at their gate; the tick stalled at `point` while the
/// database is taken away; then it goes on.
fn lose_the_connection_with_jobs_at_their_gate(point: &str) {
    let Some(env) = PgEnv::init() else { return };
    let log = env.dir.path().join("log");
    let go = env.dir.path().join("go");
    let command = format!("echo $RUNNER_RUN_ID >> {}", log.display());
    env.ok(&[
        "schedule",
        "add",
        "held",
        "--cron",
        &never(),
        "--overlap",
        "allow",
        "--",
        &command,
    ]);
    for _ in 0..3 {
        env.ok(&["run", "held"]);
    }
    let tick = env
        .cmd()
        .args(["tick", "--concurrency", "3"])
        .env("RUNNER_TEST_HOOK", format!("{point}:wait={}", go.display()))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tick");
    let out = lose_the_database_while_stalled(&env, tick, &go);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(ran, "", "no command ran: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line for the loss, one for the runs: {err}"
    );
    assert!(
        lines[0].contains("lost the connection to PostgreSQL at 127.0.0.1")
            && lines[0].contains("claiming no more runs"),
        "{err}"
    );
    assert!(
        lines[1].starts_with(
            "runner: error: the database stopped taking writes, so 3 prepared jobs were not \
             started (their commands never ran)"
        ),
        "{err}"
    );
    // Later ticks (clocks past the lease and the backoff) recover the runs and retry each once.
    ticks_past_leases_and_backoffs(&env, &["--concurrency", "3"]);
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE status = 'succeeded'"),
        3
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM job_attempts WHERE attempt = 1 AND error_code = 'LEASE:EXPIRED'"
        ),
        3
    );
    let mut ran: Vec<String> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_string)
        .collect();
    ran.sort();
    assert_eq!(ran, ["1", "2", "3"], "each command ran once");
}

/// `run --wait`: its job waits at its gate, its start recorded, when the connection is lost (as
/// above). It used to be released, ran with nobody to record its end, and `run` exited with the
/// job's code; now it never starts, `run` says so and exits 4, and recovery retries the run.
#[test]
fn run_wait_never_starts_its_job_at_the_gate_once_the_connection_is_lost() {
    let Some(env) = PgEnv::init() else { return };
    let log = env.dir.path().join("log");
    let go = env.dir.path().join("go");
    let command = format!("echo ran >> {}", log.display());
    env.ok(&[
        "schedule",
        "add",
        "held",
        "--cron",
        &never(),
        "--",
        &command,
    ]);
    let run = env
        .cmd()
        .args(["run", "held", "--wait"])
        .env(
            "RUNNER_TEST_HOOK",
            format!("recorded:wait={}", go.display()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn run --wait");
    let out = lose_the_database_while_stalled(&env, run, &go);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap_or_default(),
        "",
        "the command ran: {err}"
    );
    assert!(
        err.lines().last().is_some_and(|line| line.starts_with(
            "runner: error: the database stopped taking writes, so 1 prepared job was not \
             started (its command never ran)"
        )),
        "{err}"
    );
    ticks_past_leases_and_backoffs(&env, &[]);
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 1 AND status = 'succeeded'"),
        1
    );
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "ran\n",
        "run once"
    );
}

/// `run --wait`: the connection is lost while its job runs, and is still away when the job ends:
/// the end cannot be recorded. `run` used to exit with the job's code (0), as if the run were
/// over; now it says so and exits 4, as a lost connection means, and recovery retries the run.
#[test]
fn run_wait_whose_end_meets_the_lost_connection_exits_4() {
    let Some(env) = PgEnv::init() else { return };
    let (starts, release) = add_held_job(&env);
    let run = env
        .cmd()
        .args(["run", "held", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn run --wait");
    wait_until(Duration::from_secs(120), "the job to start", || {
        std::fs::read_to_string(&starts).is_ok_and(|s| s.ends_with('\n'))
    });
    let mut admin = Client::connect(&env.server, NoTls).expect("connect as admin");
    take_the_database_away(&env, &mut admin);
    std::fs::write(&release, "").expect("release the job");
    let out = run.wait_with_output().expect("wait for run --wait");
    bring_the_database_back(&env, &mut admin);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("but the connection to the database did not come back to record it"),
        "{err}"
    );
    ticks_past_leases_and_backoffs(&env, &[]);
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 1 AND status = 'succeeded'"),
        1,
        "{err}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts WHERE run_id = 1"),
        2,
        "the attempt whose end was lost, and its retry"
    );
}

/// Schedule `held` (see `add_held_job`), with one manual run of it queued. Returns `(starts,
/// release)`.
fn queue_held_job(env: &PgEnv) -> (PathBuf, PathBuf) {
    let held = add_held_job(env);
    env.ok(&["run", "held"]);
    held
}

/// Schedule `held`, whose job appends its pid to `starts` and then runs until `release` exists.
/// Returns `(starts, release)`.
fn add_held_job(env: &PgEnv) -> (PathBuf, PathBuf) {
    let starts = env.dir.path().join("starts");
    let release = env.dir.path().join("release");
    let command = format!(
        "echo $$ >> {}; while [ ! -e {} ]; do sleep 0.1; done",
        starts.display(),
        release.display()
    );
    env.ok(&[
        "schedule",
        "add",
        "held",
        "--cron",
        &never(),
        "--",
        &command,
    ]);
    (starts, release)
}

/// `runner`, stalled at its `RUNNER_TEST_HOOK` point until `go` exists: once it is there, the
/// database is taken away; past `LEASE_RECHECK_AT_GATE` (0.1 s) since the stall (the starts'
/// commit, at `recorded`), so that a gate opens only after a look at its lease, which meets the
/// loss, it goes on. Its output, once it has exited, with the database back.
fn lose_the_database_while_stalled(env: &PgEnv, runner: Child, go: &Path) -> Output {
    let reached = env.dir.path().join("go.reached");
    wait_until(Duration::from_secs(120), "the runner to stall", || {
        reached.exists()
    });
    let mut admin = Client::connect(&env.server, NoTls).expect("connect as admin");
    take_the_database_away(env, &mut admin);
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(go, "").expect("let the runner go on");
    let out = runner.wait_with_output().expect("wait for the runner");
    bring_the_database_back(env, &mut admin);
    out
}

/// The database refuses new connections and the runner's sessions are ended; returns once none
/// is left.
fn take_the_database_away(env: &PgEnv, admin: &mut Client) {
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {0} ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{0}';",
            env.name
        ))
        .expect("take the database away");
    wait_until(
        Duration::from_secs(120),
        "the runner's sessions to end",
        || {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND application_name = 'runner'",
                    &[&env.name],
                )
                .expect("sessions")
                .get::<_, i64>(0)
                == 0
        },
    );
}

fn bring_the_database_back(env: &PgEnv, admin: &mut Client) {
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            env.name
        ))
        .expect("bring the database back");
}

/// A backend's schema, in the terms both can report: each table's columns (type and
/// nullability, by name) and each index made by `CREATE INDEX` (not those behind a primary key
/// or UNIQUE constraint, which each backend names its own way).
#[derive(Debug, Default)]
struct Schema {
    tables: BTreeMap<String, BTreeMap<String, Column>>,
    indexes: BTreeMap<String, Index>,
}

#[derive(Debug, PartialEq)]
struct Column {
    /// `integer`, `text` or `blob`, from SQLite's INTEGER, TEXT and BLOB and PostgreSQL's
    /// bigint, text and bytea; any other type as the backend names it (which fails the match).
    ty: String,
    not_null: bool,
}

#[derive(Debug, PartialEq)]
struct Index {
    table: String,
    unique: bool,
    /// Whether it has a WHERE clause.
    partial: bool,
    /// Its key columns in order, each followed by ` DESC` when descending.
    columns: Vec<String>,
}

/// The SQLite schema: `PRAGMA table_info` per table, and `PRAGMA index_list`/`index_xinfo` for
/// the indexes made by `CREATE INDEX` (origin `c`).
fn sqlite_schema(conn: &rusqlite::Connection) -> Schema {
    let rows = |sql: &str| -> Vec<Vec<rusqlite::types::Value>> {
        let mut stmt = conn.prepare(sql).expect(sql);
        let width = stmt.column_count();
        stmt.query_map([], |r| (0..width).map(|i| r.get(i)).collect())
            .expect(sql)
            .map(|row| row.expect(sql))
            .collect()
    };
    let text = |value: &rusqlite::types::Value| match value {
        rusqlite::types::Value::Text(text) => text.clone(),
        other => panic!("expected text, got {other:?}"),
    };
    let integer = |value: &rusqlite::types::Value| match value {
        rusqlite::types::Value::Integer(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    };
    let mut schema = Schema::default();
    // A primary key column is never NULL here (INTEGER PRIMARY KEY is the rowid; the others are
    // in WITHOUT ROWID tables), though `table_info` reports only the declared NOT NULL.
    for row in rows(
        "SELECT m.name, c.name, c.type, c.\"notnull\" OR c.pk > 0
         FROM sqlite_master m, pragma_table_info(m.name) c
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'",
    ) {
        let ty = match text(&row[2]).to_ascii_uppercase().as_str() {
            "INTEGER" => "integer".to_string(),
            "TEXT" => "text".to_string(),
            "BLOB" => "blob".to_string(),
            other => format!("SQLite {other}"),
        };
        let column = Column {
            ty,
            not_null: integer(&row[3]) != 0,
        };
        schema
            .tables
            .entry(text(&row[0]))
            .or_default()
            .insert(text(&row[1]), column);
    }
    for row in rows(
        "SELECT l.name, m.name, l.\"unique\", l.partial,
                (SELECT group_concat(name, ',') FROM
                    (SELECT i.name || CASE i.\"desc\" WHEN 1 THEN ' DESC' ELSE '' END AS name
                     FROM pragma_index_xinfo(l.name) i WHERE i.key = 1 ORDER BY i.seqno))
         FROM sqlite_master m, pragma_index_list(m.name) l
         WHERE m.type = 'table' AND l.origin = 'c'",
    ) {
        let index = Index {
            table: text(&row[1]),
            unique: integer(&row[2]) != 0,
            partial: integer(&row[3]) != 0,
            columns: text(&row[4]).split(',').map(str::to_string).collect(),
        };
        schema.indexes.insert(text(&row[0]), index);
    }
    schema
}

/// The PostgreSQL schema (the current schema of the database): `information_schema.columns`,
/// and `pg_index` for the indexes that back no primary key, UNIQUE or exclusion constraint.
fn postgres_schema(client: &mut Client) -> Schema {
    let mut schema = Schema::default();
    for row in client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable = 'NO'
             FROM information_schema.columns WHERE table_schema = current_schema()",
            &[],
        )
        .expect("columns")
    {
        let ty = match row.get::<_, &str>(2) {
            "bigint" => "integer".to_string(),
            "text" => "text".to_string(),
            "bytea" => "blob".to_string(),
            other => format!("PostgreSQL {other}"),
        };
        let column = Column {
            ty,
            not_null: row.get(3),
        };
        schema
            .tables
            .entry(row.get(0))
            .or_default()
            .insert(row.get(1), column);
    }
    for row in client
        .query(
            "SELECT i.relname::text, t.relname::text, x.indisunique, x.indpred IS NOT NULL,
                    array(SELECT pg_get_indexdef(x.indexrelid, k, true)
                                 || CASE WHEN x.indoption[k - 1] & 1 = 1 THEN ' DESC' ELSE '' END
                          FROM generate_series(1, x.indnkeyatts::int) k ORDER BY k)
             FROM pg_index x
             JOIN pg_class i ON i.oid = x.indexrelid
             JOIN pg_class t ON t.oid = x.indrelid
             JOIN pg_namespace n ON n.oid = t.relnamespace
             WHERE n.nspname = current_schema()
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                               WHERE c.conindid = x.indexrelid AND c.contype IN ('p', 'u', 'x'))",
            &[],
        )
        .expect("indexes")
    {
        let index = Index {
            table: row.get(1),
            unique: row.get(2),
            partial: row.get(3),
            columns: row.get(4),
        };
        schema.indexes.insert(row.get(0), index);
    }
    schema
}

/// The two backends cannot drift apart: the schema `runner init` makes on PostgreSQL (its
/// migrations/postgres/*.sql) has the tables, columns (type, nullability) and indexes (table,
/// uniqueness, partial or not, columns) of the one it makes on SQLite (migrations/*.sql, which
/// schema.sql shows). Both are read from the databases, so a column or index added to one
/// backend's migrations and not the other's fails here.
#[test]
fn the_postgres_schema_matches_the_sqlite_schema() {
    let Some(env) = PgEnv::init() else { return };
    let sqlite_db = env.dir.path().join("runner.db");
    let out = Command::new(BIN)
        .env("RUNNER_DB", &sqlite_db)
        .env("HOME", env.dir.path())
        .env_remove("XDG_STATE_HOME")
        .arg("init")
        .output()
        .expect("spawn runner");
    assert!(out.status.success(), "sqlite init: {}", stderr(&out));
    let mut sqlite = sqlite_schema(&rusqlite::Connection::open(&sqlite_db).expect("open"));
    let mut postgres = postgres_schema(&mut env.client());

    // Each backend's own bookkeeping: SQLite counts its migrations in PRAGMA user_version, and
    // keeps a run tally for `status` and `metrics` (PostgreSQL counts where it reads). SQLite
    // also indexes the schedules whose due-ness cannot be judged, a value of the wrong type in a
    // column, which PostgreSQL's typed columns cannot hold.
    assert!(
        postgres.tables.remove("runner_schema_version").is_some(),
        "{postgres:#?}"
    );
    assert!(
        sqlite.tables.remove("job_run_tally").is_some(),
        "{sqlite:#?}"
    );
    assert!(
        sqlite
            .indexes
            .remove("job_definitions_undecidable")
            .is_some(),
        "{sqlite:#?}"
    );
    assert!(
        sqlite.tables.len() >= 5 && sqlite.indexes.len() >= 10,
        "{sqlite:#?}"
    );
    let mut differences = Vec::new();
    let tables: BTreeSet<&String> = sqlite.tables.keys().chain(postgres.tables.keys()).collect();
    for table in tables {
        let (lite, pg) = (sqlite.tables.get(table), postgres.tables.get(table));
        let (Some(lite), Some(pg)) = (lite, pg) else {
            differences.push(format!(
                "table {table}: in SQLite {}, in PostgreSQL {}",
                lite.is_some(),
                pg.is_some()
            ));
            continue;
        };
        differences.extend(differ(table, lite, pg));
    }
    differences.extend(differ("index", &sqlite.indexes, &postgres.indexes));
    assert!(
        differences.is_empty(),
        "the schemas differ:\n{}",
        differences.join("\n")
    );
}

/// `what.key: SQLite ..., PostgreSQL ...` for each key whose entries differ (`None`: missing).
fn differ<T: PartialEq + std::fmt::Debug>(
    what: &str,
    sqlite: &BTreeMap<String, T>,
    postgres: &BTreeMap<String, T>,
) -> Vec<String> {
    let keys: BTreeSet<&String> = sqlite.keys().chain(postgres.keys()).collect();
    keys.into_iter()
        .filter(|key| sqlite.get(*key) != postgres.get(*key))
        .map(|key| {
            format!(
                "{what}.{key}: SQLite {:?}, PostgreSQL {:?}",
                sqlite.get(key),
                postgres.get(key)
            )
        })
        .collect()
}

/// The same database reached through another spelling of its URL (another user here; `localhost`
/// for `127.0.0.1` alike) is the same database to a job's marker: `cancel` of a run whose tick
/// died finds and stops its job. (The marker named the URL as written, and such a cancel closed
/// the attempt while the job ran on.)
#[test]
fn cancel_through_another_spelling_of_the_url_stops_the_job() {
    let Some(env) = PgEnv::init() else { return };
    let role = format!("{}_other", env.name);
    env.client()
        .batch_execute(&format!("CREATE ROLE {role} SUPERUSER LOGIN"))
        .expect("create role");
    let other = with_user(&env.url, &role);
    let pidfile = env.dir.path().join("job.pid");
    let command = format!("echo $$ > '{}'; sleep 300", pidfile.display());
    env.ok(&[
        "schedule",
        "add",
        "sleeper",
        "--cron",
        &never(),
        "--",
        &command,
    ]);
    env.ok(&["run", "sleeper"]);
    let mut tick = env.cmd().arg("tick").spawn().expect("spawn tick");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let job: u32 = loop {
        let pid = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|p| p.trim().parse().ok());
        if let Some(pid) = pid {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    tick.kill().expect("kill -9 the tick");
    tick.wait().expect("reap the tick");

    let out = env
        .cmd()
        .env("RUNNER_DB", &other)
        .args(["cancel", "1"])
        .output()
        .expect("cancel");
    let _ = env
        .client()
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
    let said = stdout(&out);
    let alive = super::common::process_alive(job);
    if alive {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(job as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(said.contains("terminated what was left"), "{said}");
    assert!(!alive, "the job still runs after cancel: {said}");
}

/// Run 1 succeeded, at one attempt, and its job (which notes each start in `starts`) ran once.
fn run_1_succeeded_at_its_one_attempt(env: &PgEnv, starts: &std::path::Path) {
    assert_eq!(
        env.count("SELECT count(*) FROM job_runs WHERE id = 1 AND status = 'succeeded'"),
        1,
        "the end was recorded"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM job_attempts WHERE run_id = 1"),
        1,
        "one attempt"
    );
    let started = std::fs::read_to_string(starts).expect("starts");
    assert_eq!(started.lines().count(), 1, "run once: {started}");
}

/// runner run with `RUNNER_DB` set to `url` (another role's URL for the same database).
fn run_as(env: &PgEnv, url: &str, args: &[&str]) -> Output {
    env.cmd()
        .env("RUNNER_DB", url)
        .args(args)
        .output()
        .expect("run")
}
