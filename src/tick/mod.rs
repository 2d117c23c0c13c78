//! One tick, step by step: record it, look at what there is to do, recover expired leases,
//! materialise due schedules, then claim and execute due runs until none are left or the tick is
//! old enough to stop, recording each attempt's end; finally apply the retention. A step with
//! nothing to do is skipped.

// The steps, numbered in the order a tick runs them, so that listing this folder reads as the
// tick does.
#[path = "1_recover.rs"]
pub mod recover;
#[path = "2_materialize.rs"]
pub mod materialize;
#[path = "3_claim.rs"]
pub mod claim;
#[path = "4_execute.rs"]
pub mod execute;
#[path = "5_record.rs"]
pub mod record;
#[path = "6_prune.rs"]
pub mod prune;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::clock::Clock;
use crate::model::{Actor, LeaseToken};
use crate::process::Marker;
use crate::store::Store;

/// The lease a tick takes when not told otherwise (`tick --lease`'s default, which clap spells
/// "60s": a test checks they agree), and the one `run --wait` always takes.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

pub struct TickOptions {
    pub actor: Actor,
    pub concurrency: usize,
    pub batch: usize,
    pub lease: Duration,
    pub max_tick: Duration,
    /// Stream the jobs' output to the terminal (`run --wait`) instead of capturing only.
    pub stream_output: bool,
    /// Set by SIGTERM/SIGINT/SIGHUP: stop claiming, stop the jobs, record them, exit.
    pub shutdown: Arc<AtomicBool>,
    /// What stopping early means for the runs this tick holds.
    pub on_shutdown: OnShutdown,
}

impl TickOptions {
    /// The lease length in seconds, clamped so the lease arithmetic can never overflow, whatever
    /// the caller passed.
    pub fn lease_secs(&self) -> i64 {
        self.lease.as_secs().clamp(3, 86_400) as i64
    }
}

/// What a shutdown signal means for the runs being executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnShutdown {
    /// cron or an admin stopped the runner: the attempt failed (`SIGNAL:SIGTERM`) and the run is
    /// retried by its policy. A run prepared at its gate, its command not started, is given back
    /// instead: no attempt spent.
    Retry,
    /// Ctrl-C on `run --wait`: the person at the terminal means to stop this run for good.
    Cancel,
}

/// What a tick tells its caller; problems are already printed as they happen.
#[derive(Debug, Default)]
pub struct TickReport {
    pub recovered: usize,
    /// Schedules resumed because their `pause --for` ended.
    pub resumed: usize,
    pub materialized: usize,
    pub executed: Vec<record::Executed>,
    /// Runner errors that did not stop the tick (printed as they were met).
    pub errors: RunnerErrors,
    /// Attempts (run id, attempt) that ended but whose end could not be written because the
    /// connection to the database was lost: recovery decides them once their leases expire.
    /// (Other failed ends are named by their own error lines.)
    pub unrecorded: Vec<(i64, u32)>,
    /// Jobs spawned at their gate that never started because the database stopped taking writes
    /// before their release ([`Tick::writes_stopped`]): their shells exited without running the
    /// command, and recovery retries their runs once their leases expire.
    pub not_started: usize,
    /// Runs whose claim was given back, their command never run: their job could not start for
    /// want of a descriptor (the tick's open-file limit, or the system's), or waited at its gate
    /// when the tick was told to stop. Pending again, no attempt spent.
    pub given_back: Vec<i64>,
    /// Another process held the database's lock through the tick's latest claim (it waited the
    /// whole wait), and still when the tick stopped claiming (`--max-tick`), with runs still
    /// due: they wait for the next tick. Said in one line when met; the tick exits 5 (busy, safe
    /// to retry), unless it met runner errors.
    pub claims_locked: bool,
    /// Jobs spawned at their gate whose start could not be written while their leases held:
    /// another process held the database's lock through every try. Their commands never ran;
    /// they were stopped at the gate, their runs left to recovery once their leases expire. Said
    /// in one line; the tick exits 5, unless it met runner errors.
    pub starts_locked: usize,
    /// Runs whose lease expired that recovery could not close: another process held the
    /// database's lock through its write. Left to the next tick's recovery (said in one line; the
    /// tick exits 5, unless it met runner errors).
    pub recovery_locked: usize,
    /// Due schedules that materialisation passed over: another session held their rows locked
    /// past the lock timeout (PostgreSQL), their cursors unmoved. Left to the next tick (said in
    /// one line; the tick exits 5, unless it met runner errors).
    pub materialize_locked: usize,
    /// Runs whose job this tick stopped at its gate, its command never run, because the run was
    /// no longer its to start (cancelled, or its lease expired, between its claim and the job's
    /// release): their attempts are closed, saying so.
    pub stopped_at_gate: Vec<i64>,
    /// Why automatic pruning did not run, when the clock may not decide it.
    pub auto_prune_skipped: Option<&'static str>,
    /// What automatic pruning removed (and left for the next prune), if anything, and its cutoff
    /// (runs finished before it).
    pub auto_pruned: Option<(crate::store::PruneCounts, i64)>,
    /// The stderr lines of runs that went dead, written deferred and not durable yet
    /// (`record::results_durable` prints them).
    pub dead_not_yet_durable: Vec<String>,
}

impl TickReport {
    /// Whether another process's lock kept a write of the tick from landing, its work left to
    /// the next tick (said when met; exit 5, busy and safe to retry).
    pub fn met_lock(&self) -> bool {
        self.claims_locked
            || self.starts_locked > 0
            || self.recovery_locked > 0
            || self.materialize_locked > 0
    }
}

/// The runner errors a tick met, each printed as one line to stderr when met (cron mails them),
/// except a lost connection's: the first is printed, saying what the tick does about it, and the
/// later ones only counted. While the database server is away every write meets the same error
/// (each heartbeat, each end, the sync): a line for each flooded cron's mail and said nothing new.
#[derive(Debug, Default)]
pub struct RunnerErrors {
    /// Every runner error met, printed or not.
    pub count: usize,
    /// The connection to the database was lost (PostgreSQL: the server stopped or restarted, the
    /// session was terminated, the network went). The tick claims nothing more; what it holds is
    /// seen to its end and recorded if the connection comes back (the store connects again for
    /// each write), else recovered once its lease expires. The tick exits 4.
    pub connection_lost: bool,
    /// A write met an error of the database itself (exit 4): it became read-only while the tick
    /// ran (SQLite: the file or its `-wal` made immutable; PostgreSQL: a read-only session or
    /// server). The tick exits 4, as any command that meets a read-only database, not 1.
    pub database_refused: bool,
}

/// What the steps of a tick share: the store, the clock, the options (who we are), randomness
/// for backoff jitter, and the report they add to.
pub struct Tick<'a> {
    pub store: &'a mut dyn Store,
    pub clock: &'a Clock,
    pub options: &'a TickOptions,
    pub rng: &'a mut fastrand::Rng,
    pub report: &'a mut TickReport,
    /// A start or a result could not be written (a full disk, a database gone read-only,
    /// another process's lock held through the whole wait: for a result, past its lease), nor a
    /// claim for any reason but a lock: claim no more, so that no further job runs whose result
    /// this tick may not be able to record. The jobs it holds are seen to their end; the next
    /// tick starts afresh. Set by [`Tick::write_failed`]. (A claim that only waited out another
    /// process's lock changed nothing: the tick claims again at its next look for due work.)
    pub writes_failed: bool,
    /// One of those writes failed other than for a lock (see [`Tick::writes_stopped`]).
    pub writes_refused: bool,
    /// The database server was found away while jobs ran (PostgreSQL restarting): a claim poll
    /// or a heartbeat found the session ended and could not connect again, so it sent nothing.
    /// Claim nothing until a later write (a heartbeat, a job's end) lands on a new connection,
    /// which shows the server back ([`Tick::write_landed`]): no job starts meanwhile whose start
    /// or end may not be written.
    pub server_away: bool,
    /// Writes of the supervisor that landed (a heartbeat, starts, ends), counted by
    /// [`Tick::write_landed`]: one that landed after a write met another process's lock shows
    /// the lock free, and that write is tried again at once (`execute::LockPause`).
    pub writes_landed: u64,
}

impl Tick<'_> {
    /// A claim, a start, a result or their sync could not be written: claim no more. Unless the
    /// write only waited out another process's lock, which ends, the database stopped taking
    /// writes.
    pub fn write_failed(&mut self, error: &anyhow::Error) {
        self.writes_failed = true;
        if !crate::exit::is_busy(error) {
            self.writes_refused = true;
        }
    }

    /// A write to the database landed: if the server had been found away, it is back, and the
    /// tick may claim again; writes that met another process's lock need not wait for it.
    pub fn write_landed(&mut self) {
        self.server_away = false;
        self.writes_landed += 1;
    }

    /// The database stopped taking writes: one failed for good (SQLite: a full disk, a
    /// read-only file; PostgreSQL: a read-only or full server), or the connection to PostgreSQL
    /// was lost. From then on no prepared job leaves its gate: nothing may be able to record its
    /// end, and it would run again once its lease expired.
    pub fn writes_stopped(&self) -> bool {
        self.writes_refused || self.report.errors.connection_lost
    }
}

pub fn tick(
    store: &mut dyn Store,
    clock: &Clock,
    options: &TickOptions,
    rng: &mut fastrand::Rng,
) -> Result<TickReport> {
    let mut report = TickReport::default();
    let now = clock.epoch();
    let high_water = store.record_tick(now)?;
    let clock_behind = crate::clock::behind_by(now, high_water);
    if let (Some(behind), Some(high)) = (clock_behind, high_water) {
        warn_clock_behind(now, high, behind);
    }
    let mut tick = Tick {
        store,
        clock,
        options,
        rng,
        report: &mut report,
        writes_failed: false,
        writes_refused: false,
        server_away: false,
        writes_landed: 0,
    };
    // One read says which steps have anything to do; the others are skipped, with their own
    // reads (cron's usual minute has nothing to do: an idle tick 2.2 -> 2.0 ms). A step that
    // changed schedules or runs may have made the next step's work: that step then looks itself.
    let pending = tick.store.pending_work(now, &options.actor.host)?;
    if pending.expired_leases {
        recover::recover_expired(&mut tick)?;
    }
    if pending.overdue_stops || pending.orphaned_attempts {
        recover::stop_left_behind(&mut tick, pending.overdue_stops, pending.orphaned_attempts)?;
    }
    if pending.ended_pauses {
        materialize::resume_ended_pauses(&mut tick)?;
    }
    if pending.due_schedules || tick.report.resumed > 0 {
        materialize::materialize_due(&mut tick)?;
    }
    // A resumed schedule's held runs were not due to the read above: they are now.
    let runs_changed = tick.report.recovered + tick.report.resumed + tick.report.materialized > 0;
    if (pending.due_runs || runs_changed) && !tick.report.errors.connection_lost {
        execute::execute_due(&mut tick)?;
    }
    if tick.writes_stopped() {
        // Pruning and the tally wait for the next tick: they would only meet the failure again.
        report_unrecorded(&report);
        return Ok(report);
    }
    // Retention is measured from now: only the real clock, and one that is not behind what the
    // database has seen, may decide what is old enough to delete.
    tick.report.auto_prune_skipped = if clock.is_shifted() {
        Some("the clock is shifted by --now")
    } else if clock_behind.is_some() {
        Some("the clock is behind the latest time a tick saw")
    } else {
        None
    };
    if tick.report.auto_prune_skipped.is_none() {
        prune::auto_prune(&mut tick);
    }
    prune::fold_run_tally(&mut tick);
    Ok(report)
}

/// One stderr line (cron mails it) when this tick's clock is behind the latest time a tick saw:
/// the host's clock stepped back, or an earlier tick ran with a clock ahead (`--now`, a wrong
/// clock). Not a runner error: the tick does its work; schedules whose cursor moved past now
/// wait until the clock gets there, or until `runner schedule reanchor`.
fn warn_clock_behind(now: i64, high_water: i64, behind: i64) {
    crate::complain!(
        "runner: warning: this host's clock ({}) is {} behind the latest time a tick saw ({}); \
         schedules whose cursor moved past now will not fire until then - see \
         'runner schedule reanchor --help'",
        crate::display::utc_time(now),
        crate::display::duration_of_secs(behind),
        crate::display::utc_time(high_water),
    );
}

/// The environment entries every process of one attempt carries (`RUNNER_RUN_ID`,
/// `RUNNER_LEASE_TOKEN`, `RUNNER_DATABASE`): how recovery, cancel and the end of a job find its
/// processes, even those that left its process group, and how they tell them from a job of the
/// same run id in another database (a restored copy).
pub fn attempt_marker(database: &str, run_id: i64, lease_token: &LeaseToken) -> Marker {
    Marker {
        entries: vec![
            format!("RUNNER_RUN_ID={run_id}"),
            format!("RUNNER_LEASE_TOKEN={lease_token}"),
            format!("RUNNER_DATABASE={database}"),
        ],
    }
}

/// Count a runner problem that does not stop the tick and print it as one line to stderr (cron
/// mails it), with a hint on that line when the cause is one the user can act on (disk full,
/// permissions). A lost connection is printed once, saying what the tick does about it; the
/// same loss met again is only counted (see [`RunnerErrors`]).
pub fn runner_error(
    errors: &mut RunnerErrors,
    context: impl std::fmt::Display,
    error: &anyhow::Error,
) {
    errors.count += 1;
    if crate::exit::is_connection_lost(error) {
        if !errors.connection_lost {
            errors.connection_lost = true;
            crate::complain!(
                "runner: error: {context}: {error:#}; claiming no more runs: the jobs running go \
                 on to their end and are recorded if the connection comes back, else retried \
                 once their leases expire (this loss is not reported again)"
            );
        }
        return;
    }
    if crate::exit::code_for(error) == crate::exit::DATABASE {
        errors.database_refused = true;
    }
    crate::complain!(
        "runner: error: {context}: {error:#}{}",
        crate::exit::hint_suffix(error)
    );
}

/// Once the database stopped taking writes ([`Tick::writes_stopped`]): one line naming the
/// attempts that ended but could not be recorded for a lost connection (their jobs ran: recovery
/// retries them by their policy once their leases expire, so a job that did its work runs again,
/// as after a crash), and counting the jobs prepared at their gate that were not started (their
/// commands never ran; recovery retries them too). Nothing when every end was recorded, or named
/// by its own error line, and no prepared job was left unstarted.
pub fn report_unrecorded(report: &TickReport) {
    if let Some(line) = unrecorded_line(&report.unrecorded, report.not_started) {
        crate::complain!("{line}");
    }
}

fn unrecorded_line(unrecorded: &[(i64, u32)], not_started: usize) -> Option<String> {
    const NAMED: usize = 10;
    let mut lost = Vec::new();
    if !unrecorded.is_empty() {
        let mut named: Vec<String> = unrecorded
            .iter()
            .take(NAMED)
            .map(|(run_id, attempt)| format!("run {run_id} (attempt {attempt})"))
            .collect();
        if unrecorded.len() > NAMED {
            named.push(format!("and {} more", unrecorded.len() - NAMED));
        }
        let (ends, were) = match unrecorded.len() {
            1 => ("end", "was"),
            _ => ("ends", "were"),
        };
        lost.push(format!(
            "the {ends} of {} {were} not recorded",
            named.join(", ")
        ));
    }
    if not_started > 0 {
        let (jobs, were, commands) = match not_started {
            1 => ("job", "was", "its command"),
            _ => ("jobs", "were", "their commands"),
        };
        lost.push(format!(
            "{not_started} prepared {jobs} {were} not started ({commands} never ran)"
        ));
    }
    if lost.is_empty() {
        return None;
    }
    let (it, its, leases) = match unrecorded.len() + not_started {
        1 => ("it", "its", "its lease expires"),
        _ => ("them", "their", "their leases expire"),
    };
    Some(format!(
        "runner: error: the database stopped taking writes, so {}: recovery retries {it} by \
         {its} policy once {leases}",
        lost.join(" and ")
    ))
}

/// Test-only crash and stall points, so tests can make races deterministic instead of hoping a
/// sleep wins them. `RUNNER_TEST_HOOK=POINT:kill` SIGKILLs this process at POINT;
/// `RUNNER_TEST_HOOK=POINT:wait=PATH` stalls there until PATH exists, having created
/// `PATH.reached` so the test knows it got there; `POINT:fail` fails there, at the points that
/// can (see [`test_fault`]), `POINT:fail-after=PATH` fails there once PATH exists (a job can
/// make the writes after it fail), and `POINT:fail-counted=PATH` fails there every time, adding
/// a line to PATH each time (a test counts the tries). Several may be given, comma-separated.
/// The points:
/// - `recovering`: expired leases read, before any is recovered;
/// - `claimed`: a claim committed, before any job is spawned;
/// - `spawned`: jobs spawned at their gate, before their start is recorded;
/// - `recorded`: starts recorded, before the gates open;
/// - `running`: every job in hand released and running, the tick about to wait for them, no
///   transaction open (where a tick stalls that neither heart-beats nor holds a lock);
/// - `polling`: a claim due while jobs run (a free slot, the connection idle since the last
///   statement), before it is made;
/// - `ends-deferred`: ends written deferred with a claim, not durable yet;
/// - `closing-unstarted`: a job stopped at its gate, its run no longer the tick's to start, before
///   its attempt is closed;
/// - `heartbeat` (`:fail` only): every heartbeat of a tick, the look at a job's lease at its
///   gate included;
/// - `due-reader` (`:fail` only): a tick opening its second connection for the due schedules;
/// - `read-batch`: a batch of due schedules that second connection read, in the tick's hands,
///   before it is written (the reader reads on meanwhile);
/// - `record-ends` (`:fail` and `:fail-after` only): a tick writing the ends of its jobs (as a
///   full disk fails it);
/// - `record-starts`, `record-ends-locked`, `heartbeat-locked` (`:fail` and `:fail-counted`
///   only): a tick writing the starts of its jobs, their ends, or a heartbeat, refused at once as
///   busy (as a PostgreSQL lock timeout, or SQLite's busy that skips its wait to avoid a
///   deadlock, refuses it: [`test_lock_fault`]);
/// - `apply-commit`: `schedule apply`, planned, before its commit;
/// - `migrated`: `migrate`, the target committed, the source not yet;
/// - `orphan-closed`: PostgreSQL's close of an orphaned attempt (or of one stopped at its gate
///   under a cancel or a recovery) has closed it and looked whether its run's job is stopped,
///   before its commit;
/// - `removal-locked`: PostgreSQL's `schedule rm` or `apply --prune` holds its locks on a
///   schedule and its runs, before the delete;
/// - `prune-locked`: PostgreSQL's prune holds its locks on a batch of runs, before it locks
///   their schedules.
///
/// Unset in real use; nothing else reads it.
pub fn test_hook(point: &str) {
    let Some(action) = test_hook_action(point) else {
        return;
    };
    if action == "kill" {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    } else if let Some(path) = action.strip_prefix("wait=") {
        let _ = std::fs::write(format!("{path}.reached"), "");
        while !std::path::Path::new(path).exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What `RUNNER_TEST_HOOK` asks at `point`: several `POINT:ACTION`s may be given, comma-separated.
fn test_hook_action(point: &str) -> Option<String> {
    let hooks = std::env::var("RUNNER_TEST_HOOK").ok()?;
    hooks
        .split(',')
        .filter_map(|hook| hook.split_once(':'))
        .find(|(at, _)| *at == point)
        .map(|(_, action)| action.to_string())
}

/// [`test_hook`] at a point that can also fail: true when `RUNNER_TEST_HOOK=POINT:fail`,
/// `POINT:fail-after=PATH` and PATH exists, or `POINT:fail-counted=PATH` (a line added to PATH),
/// and the caller then fails as if its database had (how a test reaches an error path no real
/// database can be made to take on cue).
pub fn test_fault(point: &str) -> bool {
    test_hook(point);
    let Some(action) = test_hook_action(point) else {
        return false;
    };
    if action == "fail" {
        return true;
    }
    if let Some(path) = action.strip_prefix("fail-counted=") {
        use std::io::Write;
        let tally = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        let _ = tally.and_then(|mut file| file.write_all(b"try\n"));
        return true;
    }
    action
        .strip_prefix("fail-after=")
        .is_some_and(|path| std::path::Path::new(path).exists())
}

/// [`test_fault`] at a point where another process's lock refuses a write at once: the busy
/// error the write then fails with.
pub fn test_lock_fault(point: &str) -> Option<anyhow::Error> {
    test_fault(point)
        .then(|| crate::exit::Failure::Busy("forged: the database is locked".into()).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Failure;

    #[test]
    fn a_lost_connection_is_counted_every_time_and_marks_the_tick() {
        let mut errors = RunnerErrors::default();
        let lost: anyhow::Error = Failure::ConnectionLost("lost the connection".into()).into();
        runner_error(&mut errors, "heartbeat", &lost);
        runner_error(&mut errors, "heartbeat", &lost.context("again"));
        assert_eq!(errors.count, 2);
        assert!(errors.connection_lost);
        let mut other = RunnerErrors::default();
        runner_error(&mut other, "claiming runs", &anyhow::anyhow!("disk full"));
        assert_eq!(other.count, 1);
        assert!(
            !other.connection_lost,
            "only a lost connection stops the claims so"
        );
    }

    #[test]
    fn the_unrecorded_line_names_the_runs_and_says_what_becomes_of_them() {
        assert_eq!(unrecorded_line(&[], 0), None);
        let one = unrecorded_line(&[(7, 2)], 0).expect("a line");
        assert!(
            one.contains("the end of run 7 (attempt 2) was not recorded"),
            "{one}"
        );
        assert!(
            one.ends_with("retries it by its policy once its lease expires"),
            "{one}"
        );
        let many: Vec<(i64, u32)> = (1..=12).map(|id| (id, 1)).collect();
        let line = unrecorded_line(&many, 0).expect("a line");
        assert!(line.contains("the ends of run 1 (attempt 1), "), "{line}");
        assert!(
            line.contains("run 10 (attempt 1), and 2 more were not"),
            "{line}"
        );
        assert!(line.ends_with("once their leases expire"), "{line}");
    }

    #[test]
    fn the_unrecorded_line_counts_the_prepared_jobs_not_started() {
        let one = unrecorded_line(&[], 1).expect("a line");
        assert_eq!(
            one,
            "runner: error: the database stopped taking writes, so 1 prepared job was not started \
             (its command never ran): recovery retries it by its policy once its lease expires"
        );
        let both = unrecorded_line(&[(7, 2)], 3).expect("a line");
        assert!(
            both.contains(
                "so the end of run 7 (attempt 2) was not recorded and 3 prepared jobs were not \
                 started (their commands never ran): recovery retries them by their policy once \
                 their leases expire"
            ),
            "{both}"
        );
    }
}
