//! Step 4: execute claimed runs, supervised synchronously: one loop starts jobs behind their
//! gate, polls the children (whose timeouts and leftovers `process` enforces), heart-beats the
//! leases and claims more while due work exists. Signals only set a flag that this loop reads.
//!
//! A job's command starts only after its attempt is durably recorded (pid, start time, lease
//! token) and its lease verified still held: the jobs of one claim are spawned blocked at their
//! gate, their starts committed in one transaction, and only the ones that landed released. A
//! runner that dies before that commit leaves shells that exit without running anything.
//!
//! While the jobs end quickly, the tick prepares the next ones ahead of a free slot: claimed,
//! spawned at their gate by helper threads (a spawn waits for the shell's `exec`, which the
//! supervisor would otherwise wait out with nothing else done), their starts recorded, held until
//! a job ends, then released at once. At most `--concurrency` jobs run their command; up to
//! `max(--concurrency, MIN_AHEAD)` more may wait, prepared, at the gate. Both are lowered where
//! the open-file limit cannot hold their pipes ([`Slots`]).
//!
//! A store call can wait (another process's lock, up to 15 s): meanwhile a [`Tender`] thread
//! keeps the running jobs' timeouts and sees their ends when they happen, writing nothing. A
//! heartbeat, a start or an end that waited out the lock is tried again while the leases hold,
//! after a pause that grows ([`LockPause`]) (a job whose start is not written waits at its
//! gate); a claim that did changed nothing, and is tried again at the next look while the tick
//! may claim.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::claim::claim_due;
use super::record::{
    decide_ends, record_decided, record_decided_then_claim, record_end, results_durable,
    write_end_with, DecidedEnds, End, StopReason, KILL_GRACE,
};
use super::{attempt_marker, runner_error, test_hook, OnShutdown, Tick};
use crate::display::utc_time;
use crate::model::{
    AfterFailure, AttemptFailure, AttemptHolder, AttemptResult, CapturedOutput, ClaimedRun,
    ErrorCode, Fenced, GivenBack, LeaseToken, NeverStartedCloses, NewEvent, StartRecord,
};
use crate::process::{
    procfs, wakeup::Wakeup, FilesExhausted, JobSpec, RunningJob, SpawnError, SpawnErrorKind,
    SPAWN_SIDE_BY_SIDE_FROM,
};
use crate::store::Commit;

/// How long the pipes may stay open after the shell exited (a process that escaped containment
/// holding them).
const PIPE_LEAK_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the loop wakes to poll children when no job's exit wakes it (no [`Wakeup`], or
/// `run --wait`; with one, never sooner than `WOKEN_POLL_FLOOR`): a tenth of the youngest job's
/// age, within these bounds. Most short jobs end within a millisecond or two, so young jobs are
/// polled often (each poll is a `waitpid` per job; measured against a 1 ms floor, 0.2 ms drains
/// short jobs 5-10% faster: the round's jobs are seen to end sooner, in rounds only a little
/// smaller); a job that has run for a while is polled rarely (its end a few ms late costs
/// nothing).
const MIN_POLL_INTERVAL: Duration = Duration::from_micros(200);
/// The shortest sleep when a job's exit ends it ([`Wakeup`]): the timer then only serves what no
/// exit announces. (Measured, four ticks of two slots draining 10,000 runs of `true`: a floor of
/// 1 ms took 85,000 context switches, 3 ms 77,000, 10 ms 74,000, at about the same speed.)
const WOKEN_POLL_FLOOR: Duration = Duration::from_millis(3);
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// With free slots and nothing due, look for newly due work this often.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Jobs are prepared ahead of a free slot only while the latest job to end ran for less than
/// this: a prepared run shows as running while it waits, so it should not wait behind long jobs.
const PREPARE_AHEAD_BELOW: Duration = Duration::from_millis(50);
/// How long decided ends may wait for the claim whose transaction they would share. Their runs
/// are no longer heart-beaten: they must be written well within a lease.
const HOLD_ENDS_AT_MOST: Duration = Duration::from_millis(20);
/// A prepared job whose lease was last seen held longer ago than this has it looked at again
/// (a heartbeat) before its gate opens: meanwhile its run may have been cancelled, or its lease
/// taken over, and a job released on an old look would run a command nobody wants run. In a
/// drain of short jobs a prepared job waits a few ms, and none is looked at twice.
const LEASE_RECHECK_AT_GATE: Duration = Duration::from_millis(100);
/// The least number of jobs prepared ahead (when any are): with fewer, a tick of low
/// concurrency claims and records one run per transaction.
const MIN_AHEAD: usize = 8;
/// How often the [`Tender`] looks whether the supervisor is still in the same store call: one
/// seen twice, so lasting this long at least, has its jobs tended, and again at this interval.
/// A write takes well under a millisecond; only a wait for another process's lock (SQLite's
/// write lock, a PostgreSQL row lock: up to 15 s) or a slow server lasts this long.
const TEND_HELD_UP_AFTER: Duration = Duration::from_millis(50);
/// The pause before a heartbeat, starts or ends that met another process's lock are written
/// again, after the first try that met it: it doubles with each further try that meets it, up to
/// `LOCKED_WRITE_PAUSE_MAX` (and a tenth of the lease), and is the first again once a write lands
/// ([`LockPause`]). A write that waited out the lock (SQLite's 15 s wait) barely notices; one
/// refused at once (a PostgreSQL lock timeout, SQLite's busy that skips the wait to avoid a
/// deadlock) would otherwise be tried again at every turn of the loop, a core spent until the
/// leases ran out.
const LOCKED_WRITE_PAUSE_FIRST: Duration = Duration::from_millis(10);
const LOCKED_WRITE_PAUSE_MAX: Duration = Duration::from_secs(1);
/// Helper threads that spawn prepared jobs. Two: a spawn is CPU work of the new shell (its
/// `exec`), and this machine class has two cores; more threads measured no faster.
const SPAWN_THREADS: usize = 2;

/// Claimed runs to spawn at their gate, and what came of each (`None`: not tried, a spawn before
/// it having found no descriptor left): one batch per helper, so that a claim costs each helper
/// one wake-up, and its starts are recorded together.
type SpawnRequest = Vec<(ClaimedRun, JobSpec)>;
type Spawned = Vec<(ClaimedRun, Option<Result<RunningJob, SpawnError>>)>;

/// Why a claim was given back (`GIVEN_BACK`), its job never started: no descriptor was left.
const OUT_OF_FILES_REASON: &str = "the tick ran out of open files; its job never started";
/// Why a claim was given back (`GIVEN_BACK`): its job was prepared at its gate when the tick was
/// told to stop.
const STOPPED_REASON: &str = "the tick was stopped before its job's command started";

/// The helper threads that spawn claimed jobs at their gate while the supervisor goes on.
struct Spawner<'a> {
    /// `None` when no helper thread could be started: the supervisor spawns itself.
    requests: Option<Sender<SpawnRequest>>,
    spawned: Receiver<Spawned>,
    /// Handed to the helpers, not back yet.
    in_flight: usize,
    /// Ends the supervisor's sleep when a job's shell exits or spawned jobs come back; without
    /// it (the system refused a socket pair, an eventfd or the handler) the supervisor polls on
    /// a timer.
    wakeup: Option<&'a Wakeup>,
    /// Set by the first spawn that found no descriptor left: no spawn is tried after it, and the
    /// tick claims no more.
    exhausted: &'a FilesExhausted,
}

fn spawn_requested(
    requests: &Mutex<Receiver<SpawnRequest>>,
    spawned: &Sender<Spawned>,
    wakeup: Option<&Wakeup>,
    exhausted: &FilesExhausted,
) {
    loop {
        // One helper waits on the queue at a time; the other waits for the lock.
        let request = requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .recv();
        let Ok(batch) = request else {
            return;
        };
        let jobs = batch
            .into_iter()
            .map(|(run, spec)| {
                // Every request is answered, even by a spawn that panicked: the supervisor waits
                // for each one it handed over.
                let job = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    RunningJob::spawn_unless_exhausted(&spec, exhausted)
                }))
                .unwrap_or_else(|_| {
                    Some(Err(SpawnError {
                        kind: SpawnErrorKind::Other,
                        message: "the spawning thread panicked".to_string(),
                    }))
                });
                (run, job)
            })
            .collect();
        // The supervisor is gone (it never leaves with spawns in flight): the jobs' gates close
        // as they are dropped, and their shells exit without running the command.
        if spawned.send(jobs).is_err() {
            return;
        }
        if let Some(wakeup) = wakeup {
            wakeup.wake();
        }
    }
}

struct Active {
    run: ClaimedRun,
    job: RunningJob,
    stopped: Option<StopReason>,
    /// When its lease was last seen held: when the transaction that recorded its start, or the
    /// latest heartbeat, returned.
    lease_seen_at: Instant,
}

impl Active {
    /// Stop a running job because the runner was asked to exit (unless stopped already).
    fn stop_for_shutdown(&mut self, on_shutdown: OnShutdown) {
        if self.stopped.is_none() {
            self.job.kill(Instant::now());
            self.stopped = Some(StopReason::Shutdown(on_shutdown));
        }
    }
}

/// The running jobs, handed to the [`Tender`] while the supervisor is in a store call.
#[derive(Default)]
struct Lent {
    jobs: Vec<Active>,
    /// Store calls made with jobs lent, counted; the tender tells one call from the next by it.
    calls: u64,
    in_call: bool,
}

/// Tends the running jobs while the supervisor is held up in a store call: a write waits up to
/// 15 s for another process's lock (a `sqlite3 runner.db VACUUM`, a `migrate`, a `prune`, a
/// PostgreSQL session holding a run's row), and meanwhile nothing else would send a due SIGTERM
/// or SIGKILL (a timeout, a kill's grace, a shutdown), or see a job end when it does (so that
/// its duration is the job's). It touches no database: what it sees is recorded by the
/// supervisor as usual once the call returns. Its thread looks every `TEND_HELD_UP_AFTER`, and
/// only at a counter, so a store call that does not wait costs two uncontended locks.
struct Tender {
    lent: Arc<Mutex<Lent>>,
    /// `None` when no thread could be started: the jobs wait for the supervisor, as before.
    thread: Option<(Sender<()>, JoinHandle<()>)>,
}

impl Tender {
    fn start(shutdown: Arc<AtomicBool>, on_shutdown: OnShutdown) -> Tender {
        let lent = Arc::new(Mutex::new(Lent::default()));
        let (stop, stopped) = mpsc::channel();
        let tended = Arc::clone(&lent);
        let thread = std::thread::Builder::new()
            .name("job-tender".to_string())
            .spawn(move || tend_held_up(&tended, &stopped, &shutdown, on_shutdown))
            .ok()
            .map(|handle| (stop, handle));
        Tender { lent, thread }
    }

    /// Make `call` (a store call) with the running jobs in the tender's hands; they are back in
    /// `active` when it returns (or unwinds).
    fn lend<R>(&self, active: &mut Vec<Active>, call: impl FnOnce() -> R) -> R {
        if self.thread.is_none() || active.is_empty() {
            return call();
        }
        {
            let mut lent = lock(&self.lent);
            lent.jobs = std::mem::take(active);
            lent.calls += 1;
            lent.in_call = true;
        }
        let _back = GiveBack {
            lent: &self.lent,
            to: active,
        };
        call()
    }
}

impl Drop for Tender {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.thread.take() {
            drop(stop);
            let _ = handle.join();
        }
    }
}

/// Returns the lent jobs to the supervisor when dropped.
struct GiveBack<'a> {
    lent: &'a Mutex<Lent>,
    to: &'a mut Vec<Active>,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        let mut lent = lock(self.lent);
        lent.in_call = false;
        *self.to = std::mem::take(&mut lent.jobs);
    }
}

fn lock(lent: &Mutex<Lent>) -> MutexGuard<'_, Lent> {
    lent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The tender's thread, until the supervisor is done: tend the lent jobs of a store call seen
/// in progress at two looks in a row.
fn tend_held_up(
    lent: &Mutex<Lent>,
    stop: &Receiver<()>,
    shutdown: &AtomicBool,
    on_shutdown: OnShutdown,
) {
    let mut seen_in_call = None;
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(TEND_HELD_UP_AFTER) {
        let mut lent = lock(lent);
        if !lent.in_call {
            seen_in_call = None;
            continue;
        }
        if seen_in_call == Some(lent.calls) {
            let shutting_down = shutdown.load(Ordering::Relaxed);
            for a in &mut lent.jobs {
                if shutting_down {
                    a.stop_for_shutdown(on_shutdown);
                }
                a.job.tend(Instant::now());
            }
        }
        seen_in_call = Some(lent.calls);
    }
}

/// The supervisor's view of due work, from its latest claim.
struct Claiming {
    /// When to claim next (a free slot alone does not mean work is due).
    next_at: Instant,
    /// The latest claim took nothing.
    took_nothing: bool,
    /// The latest claim left due work behind (beyond the batch, or behind a running run of a
    /// `forbid` schedule, which may be one of ours).
    more_due: bool,
    /// A job ended since the latest claim: the database may hold newly due work (the next run
    /// of its `forbid` schedule, a retry due at once).
    ended_since: bool,
    /// The latest claim waited out another process's lock (busy after the whole wait), and
    /// what it met: it changed nothing, and is tried again at the next look.
    locked: Option<anyhow::Error>,
}

/// Which jobs a heartbeat is for.
#[derive(Clone, Copy)]
enum Beaten {
    All,
    /// The first `n` prepared ones, about to be released.
    Prepared(usize),
}

/// What a heartbeat found.
enum Beat {
    /// Every lease held, or (`lost`) some were gone: their jobs are stopped.
    Answered { lost: bool },
    /// The store could not say (reported; nothing is stopped).
    Failed,
    /// The database stayed locked by another process through the whole wait (or refused at
    /// once), and every lease was seen held less than a lease ago: not reported, the periodic
    /// heartbeat tried again after a pause (`Supervisor::heartbeat_pause`).
    Locked,
}

/// The jobs this runner supervises, with their leases.
struct Supervisor {
    /// Released: running their command (at most `--concurrency`).
    active: Vec<Active>,
    /// Prepared ahead: started and recorded, held at the gate until a slot frees.
    ready: VecDeque<Active>,
    /// The latest job to end ran briefly: prepare the next ones ahead of a free slot.
    prepare_ahead: bool,
    /// Prepare ahead whatever the jobs' durations (`RUNNER_TEST_HOOK=prepare-ahead:always`): a
    /// test of the gate then does not hang on how fast the machine runs its jobs.
    prepare_ahead_always: bool,
    lease_secs: i64,
    heartbeat_every: Duration,
    next_heartbeat: Instant,
    /// The latest periodic heartbeat (or look at prepared jobs' leases) met another process's
    /// lock while the leases held: the heartbeat is tried again when `heartbeat_pause` says.
    heartbeat_locked: bool,
    heartbeat_pause: LockPause,
    /// The database's identity, for the jobs' markers.
    identity: String,
    /// A job could not start for want of a descriptor (`EMFILE`, `ENFILE`), and the tick said so.
    out_of_files_said: bool,
    tender: Tender,
    /// Ends whose write met another process's lock while their leases held: written again
    /// when `ends_pause` says, or with the next ends (see `record::record_decided`).
    unwritten: DecidedEnds,
    ends_pause: LockPause,
    /// Jobs at their gate whose start met another process's lock while their leases held:
    /// written again when `starts_pause` says (see [`record_gated_starts`]).
    locked_starts: Option<LockedStarts>,
    starts_pause: LockPause,
}

/// When a write that met another process's lock while its leases held (a heartbeat, starts at
/// their gate, ends: one of these per kind) is tried again: after a pause that doubles with
/// each try that meets the lock, from `LOCKED_WRITE_PAUSE_FIRST` up to `LOCKED_WRITE_PAUSE_MAX`
/// (and a tenth of the lease), never later than the moment the first of its leases runs out,
/// where its last try is made (a lease that runs out is given up as before). Once a write of the
/// tick lands (`Tick::writes_landed`), the lock is evidently free: the write is tried at once,
/// and its pause is the first again. Pure: the caller passes the time and that count.
struct LockPause {
    /// The pause after the next try that meets the lock.
    next: Duration,
    /// How long `next` may grow.
    ceiling: Duration,
    /// When the write is tried again.
    retry_at: Instant,
    /// `Tick::writes_landed` when the latest try met the lock.
    landed: u64,
}

impl LockPause {
    fn new(lease: Duration, now: Instant) -> LockPause {
        LockPause {
            next: LOCKED_WRITE_PAUSE_FIRST,
            ceiling: LOCKED_WRITE_PAUSE_MAX.min(lease / 10),
            retry_at: now,
            landed: 0,
        }
    }

    /// A try met the lock at `now`, `landed` writes of the tick having landed, the first of its
    /// leases running out in `lease_left`: it is tried again after the pause, which grows.
    fn met(&mut self, now: Instant, landed: u64, lease_left: Duration) {
        if landed != self.landed {
            // A write landed since the lock was last met: it was free meanwhile.
            self.next = LOCKED_WRITE_PAUSE_FIRST;
        }
        self.retry_at = now + self.next.min(lease_left);
        self.next = (self.next * 2).min(self.ceiling);
        self.landed = landed;
    }

    /// How long until the write is tried again: nothing once its pause is over, or once a write
    /// of the tick landed since it met the lock.
    fn left(&self, now: Instant, landed: u64) -> Duration {
        if landed != self.landed {
            return Duration::ZERO;
        }
        self.retry_at.saturating_duration_since(now)
    }

    fn due(&self, now: Instant, landed: u64) -> bool {
        self.left(now, landed).is_zero()
    }
}

/// How long until the first of some leases runs out, each last seen held at the instant given
/// (a whole lease for none): nothing once one has.
fn lease_left(lease: Duration, seen: impl IntoIterator<Item = Instant>) -> Duration {
    seen.into_iter()
        .map(|at| lease.saturating_sub(at.elapsed()))
        .min()
        .unwrap_or(lease)
}

/// Jobs spawned at their gate whose start could not be written for another process's lock,
/// and what the latest try met. Their commands wait at the gate: none runs before its start is
/// durable.
struct LockedStarts {
    jobs: Vec<Active>,
    met: anyhow::Error,
}

impl Supervisor {
    fn new(tick: &mut Tick<'_>) -> Supervisor {
        // Orphans of our jobs (a double fork, `setsid`) are re-parented to us, where their end
        // of job sweep finds them by marker.
        procfs::become_subreaper();
        let lease_secs = tick.options.lease_secs();
        let heartbeat_every = Duration::from_secs((lease_secs / 3).max(1) as u64);
        let prepare_ahead_always =
            super::test_hook_action("prepare-ahead").is_some_and(|action| action == "always");
        let lease = Duration::from_secs(lease_secs.unsigned_abs());
        let pause = || LockPause::new(lease, Instant::now());
        Supervisor {
            active: Vec::new(),
            ready: VecDeque::new(),
            prepare_ahead: prepare_ahead_always,
            prepare_ahead_always,
            lease_secs,
            heartbeat_every,
            next_heartbeat: Instant::now() + heartbeat_every,
            heartbeat_locked: false,
            heartbeat_pause: pause(),
            identity: tick.store.identity(),
            out_of_files_said: false,
            tender: Tender::start(Arc::clone(&tick.options.shutdown), tick.options.on_shutdown),
            unwritten: DecidedEnds::default(),
            ends_pause: pause(),
            locked_starts: None,
            starts_pause: pause(),
        }
    }

    /// A job could not start for want of a descriptor, though the tick holds no more jobs than
    /// its count of them allows: another process took the system's last ones, or something of
    /// this one took more than counted. Its run is given back ([`give_back_unstarted`]); the
    /// tick claims no more (the next would fail alike: [`FilesExhausted`]) and says so, once.
    fn ran_out_of_files(&mut self, tick: &mut Tick<'_>, run: &ClaimedRun, message: &str) {
        if std::mem::replace(&mut self.out_of_files_said, true) {
            return;
        }
        let error = anyhow::anyhow!(
            "{message}; the tick claims no more runs (the jobs it holds go on to their end). If \
             this comes again, raise the open-file limit (`ulimit -n`, and its hard limit) or \
             lower --concurrency"
        );
        let context = format!("run {}: starting attempt {}", run.run_id, run.attempt);
        runner_error(&mut tick.report.errors, context, &error);
    }

    /// On a shutdown signal, stop every job not stopped yet; the ones whose start is still to be
    /// written never start (their runs are left to recovery: the database is locked). The prepared ones never run their
    /// command: a tick gives their runs back ([`give_back_prepared`](Self::give_back_prepared));
    /// `run --wait` (Ctrl-C: the run is cancelled for good) records them as any stopped job.
    fn stop_all_on_shutdown(&mut self, tick: &mut Tick<'_>) {
        if !tick.options.shutdown.load(Ordering::Relaxed) {
            return;
        }
        if let Some(locked) = self.locked_starts.take() {
            let why = "the runner was asked to stop while the database stayed locked by \
                       another process";
            give_up_locked_starts(tick, locked, why);
        }
        let on_shutdown = tick.options.on_shutdown;
        for a in &mut self.active {
            a.stop_for_shutdown(on_shutdown);
        }
        match on_shutdown {
            OnShutdown::Retry => self.give_back_prepared(tick),
            OnShutdown::Cancel => {
                while let Some(mut a) = self.ready.pop_front() {
                    a.stopped = Some(StopReason::Shutdown(on_shutdown));
                    self.admit_stopped(a);
                }
            }
        }
    }

    /// A tick told to stop gives back the runs prepared at their gate: their commands never ran,
    /// so the shutdown (a host's reboot, cron stopped) spends none of their attempts. Each job is
    /// stopped at its gate first, its shell seen gone: the give-back removes the attempt row
    /// that holds its pid, after which nothing would look for it. A run cancelled or recovered
    /// meanwhile has its attempt closed as any job stopped at its gate
    /// ([`close_never_started`](Self::close_never_started)). Should the give-back fail, or the
    /// database have stopped taking writes before (nothing is written then: see
    /// [`leave_at_gate_if_writes_stopped`](Self::leave_at_gate_if_writes_stopped)), the leases
    /// expire and recovery retries the runs by their policy, as after a crash.
    fn give_back_prepared(&mut self, tick: &mut Tick<'_>) {
        self.leave_at_gate_if_writes_stopped(tick);
        let runs: Vec<ClaimedRun> = std::mem::take(&mut self.ready)
            .into_iter()
            .map(|a| {
                a.job.abort();
                a.run
            })
            .collect();
        let doing = "giving back runs prepared at their gate when the tick was told to stop";
        let Some(landed) = give_back_claims(tick, &runs, STOPPED_REASON, doing, self) else {
            return;
        };
        let refused = runs
            .into_iter()
            .zip(landed)
            .filter_map(|(run, landed)| (landed != Fenced::Applied).then_some(run))
            .collect();
        self.close_never_started(tick, refused);
    }

    /// Poll every job once: the attempts that ended since the previous poll (a few ms ago),
    /// decided, to be recorded together, after the ends to be written again: those go with new
    /// ones (a try anyway), or alone once their pause is over.
    fn poll(&mut self, tick: &mut Tick<'_>) -> DecidedEnds {
        let now = Instant::now();
        let mut ends = Vec::new();
        let mut index = 0;
        while index < self.active.len() {
            if let Some(finished) = self.active[index].job.poll(now) {
                self.prepare_ahead =
                    self.prepare_ahead_always || finished.duration < PREPARE_AHEAD_BELOW;
                let done = self.active.swap_remove(index);
                ends.push(End {
                    run: done.run,
                    ended: Ok(finished),
                    stopped: done.stopped,
                    lease_seen_at: done.lease_seen_at,
                });
            } else {
                index += 1;
            }
        }
        let ended = decide_ends(tick, ends);
        if ended.is_empty() && !self.ends_pause.due(Instant::now(), tick.writes_landed) {
            return ended;
        }
        let mut decided = std::mem::take(&mut self.unwritten);
        decided.append(ended);
        decided
    }

    /// Keep ends whose write met another process's lock, to be tried again after a pause
    /// (`record::record_decided`).
    fn write_again(&mut self, tick: &Tick<'_>, again: Option<DecidedEnds>) {
        if let Some(again) = again {
            self.unwritten.append(again);
            let left = lease_left(self.lease(), self.unwritten.leases_seen());
            self.ends_pause
                .met(Instant::now(), tick.writes_landed, left);
        }
    }

    /// Jobs held: running, or prepared at their gate.
    fn holding(&self) -> bool {
        !self.active.is_empty() || !self.ready.is_empty()
    }

    /// Heart-beat the leases when a third of the lease has passed since the last time, or, after
    /// a heartbeat that found the database locked while the leases still held, once its pause is
    /// over.
    fn heartbeat_if_due(&mut self, tick: &mut Tick<'_>) {
        let now = Instant::now();
        let due = if self.heartbeat_locked {
            self.heartbeat_pause.due(now, tick.writes_landed)
        } else {
            now >= self.next_heartbeat
        };
        if self.holding() && due {
            self.heartbeat_locked = false;
            self.next_heartbeat = now + self.heartbeat_every;
            match self.heartbeat(tick, Beaten::All) {
                Beat::Answered { lost: true } => self.stop_lost_at_gate(tick),
                Beat::Answered { lost: false } | Beat::Failed | Beat::Locked => {}
            }
            self.leave_at_gate_if_writes_stopped(tick);
        }
    }

    /// The jobs a heartbeat extends the leases of: all, or the first `n` prepared ones; not the
    /// ones whose lease is known lost. Jobs stopped for a shutdown are heart-beaten too: their
    /// grace (and what they leave behind) can outlast a short lease, and recovery would then
    /// kill them in the middle of their cleanup.
    fn beaten(&mut self, which: Beaten) -> Vec<&mut Active> {
        let jobs: Box<dyn Iterator<Item = &mut Active>> = match which {
            Beaten::All => Box::new(self.active.iter_mut().chain(self.ready.iter_mut())),
            Beaten::Prepared(n) => Box::new(self.ready.iter_mut().take(n)),
        };
        jobs.filter(|a| a.stopped != Some(StopReason::LeaseLost))
            .collect()
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs.max(0).unsigned_abs())
    }

    /// Extend the leases of the jobs `which` names; a job whose lease is gone is stopped. One
    /// that found the database locked while the leases held (`Beat::Locked`) has the periodic
    /// heartbeat come again after a pause ([`LockPause`]), at the latest when the first lease
    /// runs out.
    fn heartbeat(&mut self, tick: &mut Tick<'_>, which: Beaten) -> Beat {
        let tokens: Vec<LeaseToken> = self
            .beaten(which)
            .iter()
            .map(|a| a.run.lease_token.clone())
            .collect();
        // The current wall clock: a lease is "now plus the lease" whatever happened to the clock.
        let now = tick.clock.epoch();
        let lease_expires_at = now + self.lease_secs;
        let beat = self.lend(|| {
            if super::test_fault("heartbeat") {
                Err(anyhow::anyhow!("forged failure").into())
            } else if let Some(locked) = super::test_lock_fault("heartbeat-locked") {
                Err(locked.into())
            } else {
                tick.store.heartbeat(&tokens, now, lease_expires_at)
            }
        });
        let lease = self.lease();
        // The same jobs as `tokens`, in the same order: nothing changes which are beaten (a
        // shutdown the tender saw meanwhile stops a job for that, not for a lost lease).
        let mut beating = self.beaten(which);
        match beat {
            Ok(held) => {
                tick.write_landed();
                // As of its commit, which a cancel committed later cannot tell from one after the
                // job's release. (Not the instant it was asked: a slow store would then have the
                // jobs at the gate looked at again and again.)
                let seen_at = Instant::now();
                let mut lost = false;
                for (a, held) in beating.iter_mut().zip(held) {
                    if held == Fenced::LeaseLost {
                        // Cancelled, or recovered by another runner: this job must stop now. (One
                        // stopped for a shutdown already is, and keeps that reason.)
                        a.job.kill(Instant::now());
                        a.stopped.get_or_insert(StopReason::LeaseLost);
                        lost = true;
                    } else {
                        a.lease_seen_at = seen_at;
                    }
                }
                Beat::Answered { lost }
            }
            Err(e) => {
                let e = e.into();
                // Another process held the write lock (or the rows) for the whole wait, and the
                // jobs' timeouts and ends were seen to meanwhile (`Tender`): while every lease
                // still holds, nothing is lost yet, and the heartbeat is tried again after a
                // pause (the periodic one, of every job: the first of all their leases to run
                // out bounds it).
                let held_yet = beating.iter().all(|a| a.lease_seen_at.elapsed() < lease);
                if crate::exit::is_busy(&e) && held_yet {
                    let seen: Vec<Instant> = (self.beaten(Beaten::All).iter())
                        .map(|a| a.lease_seen_at)
                        .collect();
                    let left = lease_left(lease, seen);
                    self.heartbeat_pause
                        .met(Instant::now(), tick.writes_landed, left);
                    self.heartbeat_locked = true;
                    return Beat::Locked;
                }
                // The server ended the session and is not back yet (a restart): nothing was
                // sent. While every lease still holds, nothing is lost yet: claim nothing until
                // the next heartbeat (or a job's end) lands on a new connection. Not with jobs
                // at their gate: none may start once the connection is lost.
                let running_only = matches!(which, Beaten::All) && self.ready.is_empty();
                if crate::exit::is_server_away(&e) && held_yet && running_only {
                    tick.server_away = true;
                    return Beat::Failed;
                }
                // Keep running: the next heartbeat may succeed before the lease runs out.
                runner_error(&mut tick.report.errors, "heartbeat", &e);
                Beat::Failed
            }
        }
    }

    /// Make `call` (a store call) with the running jobs tended meanwhile ([`Tender`]).
    fn lend<R>(&mut self, call: impl FnOnce() -> R) -> R {
        self.tender.lend(&mut self.active, call)
    }

    /// A prepared run whose lease is gone never runs its command: stopped at the gate. One whose
    /// lease is known lost (cancelled, or recovered) has its attempt closed at once
    /// ([`close_never_started`](Self::close_never_started)); one whose lease could not be
    /// confirmed is recorded as any stopped job (`LEASE:EXPIRED`).
    fn stop_lost_at_gate(&mut self, tick: &mut Tick<'_>) {
        let (stopped, ready) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition::<Vec<_>, _>(|a| a.stopped.is_some());
        self.ready = ready.into();
        let mut lost = Vec::new();
        for a in stopped {
            if a.stopped == Some(StopReason::LeaseLost) {
                a.job.abort();
                lost.push(a.run);
            } else {
                self.admit_stopped(a);
            }
        }
        self.close_never_started(tick, lost);
    }

    /// Runs whose job this tick stopped at its gate, its command never run, because the run was
    /// no longer this tick's to start: their start was refused, or a look at their lease found
    /// it lost. Their attempts are closed at once ([`close_unstarted`]), so that none stays open
    /// (with a cancelled run's `forbid` schedule waiting behind a job that never existed) until
    /// a later tick finds it orphaned. Should a write fail, that later tick closes it, as before.
    fn close_never_started(&mut self, tick: &mut Tick<'_>, runs: Vec<ClaimedRun>) {
        for run in runs {
            let closed = self.lend(|| close_unstarted(tick, &run));
            match closed {
                Ok(()) => tick.report.stopped_at_gate.push(run.run_id),
                Err(e) => {
                    let context = format!(
                        "run {}: closing attempt {}, whose job never started",
                        run.run_id, run.attempt
                    );
                    runner_error(&mut tick.report.errors, context, &e);
                    tick.write_failed(&e);
                }
            }
        }
    }

    /// Once the database stopped taking writes (a full disk, a read-only database, a lost
    /// connection: `Tick::writes_stopped`), no prepared job starts, even one whose lease a
    /// heartbeat (on a new connection) just renewed: nothing may be able to record its end (it
    /// would then run again once recovered), and a look at its lease that cannot reach the
    /// database proves nothing. Their shells exit at the gate, having run nothing of the command;
    /// their runs are left to their leases' expiry, and recovery retries them by their policy
    /// (`report_unrecorded` counts them). Nothing is written for them here: recovery ends their
    /// attempts (`LEASE:EXPIRED`).
    fn leave_at_gate_if_writes_stopped(&mut self, tick: &mut Tick<'_>) {
        if !tick.writes_stopped() {
            return;
        }
        for a in self.ready.drain(..) {
            a.job.abort();
            tick.report.not_started += 1;
        }
    }

    /// Release prepared jobs into the slots that are free; none once the tick is told to stop
    /// (the next `stop_all_on_shutdown` stops them at their gate), nor once the database stopped
    /// taking writes (`leave_at_gate_if_writes_stopped`). Jobs that waited at their gate have
    /// their leases looked at first (`LEASE_RECHECK_AT_GATE`).
    fn admit_ready(&mut self, tick: &mut Tick<'_>, concurrency: usize) {
        loop {
            self.leave_at_gate_if_writes_stopped(tick);
            let free = concurrency.saturating_sub(self.active.len());
            let next = self.ready.len().min(free);
            if next == 0 || tick.options.shutdown.load(Ordering::Relaxed) {
                return;
            }
            let waited = self
                .ready
                .iter()
                .take(next)
                .any(|a| a.lease_seen_at.elapsed() >= LEASE_RECHECK_AT_GATE);
            if waited {
                let lost = match self.heartbeat(tick, Beaten::Prepared(next)) {
                    Beat::Answered { lost } => lost,
                    // The look met a lost connection: none of them starts (the loop's next turn
                    // leaves them at their gate).
                    Beat::Failed if tick.writes_stopped() => continue,
                    // The store cannot say (reported, unless it was only locked while every
                    // lease held: the periodic heartbeat tries again after a pause). A job seen
                    // holding its lease less than a lease ago holds it still, unless cancelled
                    // meanwhile, which the periodic heartbeat then finds, as it does for running
                    // jobs; one not seen for a whole lease may have been recovered, and never
                    // starts.
                    Beat::Failed | Beat::Locked => {
                        let lease = self.lease();
                        let mut unseen = false;
                        for a in self.ready.iter_mut().take(next) {
                            if a.lease_seen_at.elapsed() >= lease {
                                a.stopped = Some(StopReason::LeaseUnconfirmed);
                                unseen = true;
                            }
                        }
                        unseen
                    }
                };
                if lost {
                    // Fewer are left at the front: look again at which may go.
                    self.stop_lost_at_gate(tick);
                    continue;
                }
            }
            for mut a in self.ready.drain(..next) {
                a.job.release();
                self.active.push(a);
            }
        }
    }

    /// A prepared job stopped before its release (its lease lost, or a shutdown): killed at the
    /// gate, so its command never runs, then opened so that it is polled and recorded as any
    /// stopped job. It takes no slot's worth of work.
    fn admit_stopped(&mut self, mut a: Active) {
        a.job.kill(Instant::now());
        a.job.release();
        self.active.push(a);
    }

    /// Runs claimed but not released yet (their start to be written again included), or not
    /// back from the spawner.
    fn in_hand(&self, spawner: &Spawner) -> usize {
        let locked = self
            .locked_starts
            .as_ref()
            .map_or(0, |locked| locked.jobs.len());
        self.active.len() + self.ready.len() + locked + spawner.in_flight
    }

    /// Write again the starts that met another process's lock, once their pause is over (see
    /// [`record_gated_starts`]).
    fn retry_locked_starts(&mut self, tick: &mut Tick<'_>) {
        if !self.starts_pause.due(Instant::now(), tick.writes_landed) {
            return;
        }
        if let Some(locked) = self.locked_starts.take() {
            record_gated_starts(tick, locked.jobs, self);
        }
    }

    /// Starts that met another process's lock, with the earlier ones that met it: they are
    /// written again after a pause ([`LockPause`]). Handed back (`Err`) when a lease already ran
    /// out: they never start.
    fn hold_locked_starts(
        &mut self,
        tick: &Tick<'_>,
        locked: LockedStarts,
    ) -> Result<(), LockedStarts> {
        let left = lease_left(self.lease(), locked.jobs.iter().map(|a| a.lease_seen_at));
        if left.is_zero() {
            return Err(locked);
        }
        self.starts_pause
            .met(Instant::now(), tick.writes_landed, left);
        self.locked_starts = Some(locked);
        Ok(())
    }

    /// How long until the next try of the writes that met another process's lock; `None` when
    /// none waits.
    fn until_locked_retry(&self, tick: &Tick<'_>) -> Option<Duration> {
        let (now, landed) = (Instant::now(), tick.writes_landed);
        let waiting = [
            (self.locked_starts.is_some(), &self.starts_pause),
            (!self.unwritten.is_empty(), &self.ends_pause),
            (
                self.heartbeat_locked && self.holding(),
                &self.heartbeat_pause,
            ),
        ];
        waiting
            .into_iter()
            .filter(|(waits, _)| *waits)
            .map(|(_, pause)| pause.left(now, landed))
            .min()
    }

    /// How long the loop may sleep: until the next poll of the jobs; with none running, until
    /// the next try of writes that met the lock, in steps short enough to see a shutdown signal
    /// soon.
    fn pause(&self, tick: &Tick<'_>) -> Duration {
        match self.until_locked_retry(tick) {
            Some(left) if self.active.is_empty() => left.min(MAX_POLL_INTERVAL),
            _ => poll_interval(&self.active),
        }
    }

    fn sleep(&self, tick: &Tick<'_>) {
        std::thread::sleep(self.pause(tick));
    }

    /// Until the next poll is due, or a spawned job comes back (returned, to be recorded).
    fn wait(&self, tick: &Tick<'_>, spawner: &mut Spawner) -> Spawned {
        if self.ready.is_empty() && spawner.in_flight == 0 && !self.active.is_empty() {
            test_hook("running");
        }
        if let Some(wakeup) = spawner.wakeup {
            // Ends are seen as they come, so the timer is only for what no exit announces: a
            // timeout, a kill's grace, pipes still being read, a second look for leftovers.
            wakeup.sleep(self.pause(tick).max(WOKEN_POLL_FLOOR));
            return match spawner.spawned.try_recv() {
                Ok(spawned) => spawned,
                Err(TryRecvError::Empty) => Vec::new(),
                Err(TryRecvError::Disconnected) => spawner.helpers_gone(),
            };
        }
        if spawner.in_flight == 0 {
            self.sleep(tick);
            return Vec::new();
        }
        match spawner.spawned.recv_timeout(self.pause(tick)) {
            Ok(spawned) => spawned,
            Err(RecvTimeoutError::Timeout) => Vec::new(),
            Err(RecvTimeoutError::Disconnected) => spawner.helpers_gone(),
        }
    }
}

impl Spawner<'_> {
    /// The helpers are gone (which they never are while the queue is open): what they held is
    /// lost unstarted, its leases expire into recovery; the supervisor spawns from now on.
    fn helpers_gone(&mut self) -> Spawned {
        self.in_flight = 0;
        self.requests = None;
        Vec::new()
    }
}

/// Execute due runs: claim while there is room and due work, supervise the jobs, record each
/// end, until nothing is due and nothing runs, or the tick is old enough to stop claiming.
pub fn execute_due(tick: &mut Tick<'_>) -> Result<()> {
    // Where nothing is due after all (the runs the tick recovered or made wait for a later
    // time), one read says so, and the tick starts no helper thread and installs no SIGCHLD
    // handler for it. (Cron's usual minute, with nothing to do, does not get here: `tick`'s
    // first look skips this step.) Should the read fail, the claim below meets the same error
    // and reports it.
    if let Ok(false) = tick.store.anything_due(tick.clock.epoch()) {
        return Ok(());
    }
    // Made before the descriptors are counted (it opens three), and before the helpers start:
    // its SIGCHLD handler is in place before the first job is spawned, so that no job's exit goes
    // unheard.
    let wakeup = Wakeup::new();
    let Some(slots) = slots_within_open_file_limit(tick) else {
        return Ok(());
    };
    let exhausted = FilesExhausted::default();
    let (requests, queue) = mpsc::channel::<SpawnRequest>();
    let (spawned, returned) = mpsc::channel::<Spawned>();
    let queue = Mutex::new(queue);
    std::thread::scope(|scope| {
        let mut helpers = 0;
        for _ in 0..SPAWN_THREADS {
            let (queue, spawned, wakeup) = (&queue, spawned.clone(), wakeup.as_ref());
            let exhausted = &exhausted;
            let helper = std::thread::Builder::new()
                .name("job-spawner".to_string())
                .spawn_scoped(scope, move || {
                    spawn_requested(queue, &spawned, wakeup, exhausted)
                });
            // No thread to be had: fewer helpers, or none, and the supervisor spawns itself.
            helpers += usize::from(helper.is_ok());
        }
        drop(spawned);
        let mut spawner = Spawner {
            requests: (helpers > 0).then_some(requests),
            spawned: returned,
            in_flight: 0,
            wakeup: wakeup.as_ref(),
            exhausted: &exhausted,
        };
        supervise_due(tick, &mut spawner, slots)
        // The spawner is dropped here: its queue closes, the helpers return, the scope joins them.
    })
}

/// Open files a tick takes besides its jobs' pipes that are not open yet when it counts the ones
/// it has (the database's, the standard streams, the wake-up's, whatever it inherited): the
/// output pump's epoll, opened with the first job, and the short-lived ones opened while jobs run
/// (the supervisor's `/proc` reads, SQLite's statement journal or a look at its directory, a
/// PostgreSQL connection made again beside the lost one).
const FILES_OPENED_LATER: u64 = 4;
/// Open files per job held (its gate, its stdout and stderr pipes), running or prepared ahead.
const FILES_PER_JOB: u64 = 3;
/// Open files a spawn under way takes beside those of the job it starts: the shell's ends of its
/// three pipes, and the two of the pipe that reports a failed `exec` where the spawn forks.
const FILES_PER_SPAWN: u64 = 5;
/// Raising the soft limit costs nothing: it is raised beyond the count by this much, where the
/// hard limit allows.
const FILES_HEADROOM: u64 = 64;

/// The slots the open-file limit holds, the soft limit raised as far as `--concurrency` needs
/// (up to the hard limit; see `process::open_files`). Fewer than asked (said on stderr), where
/// the hard limit holds fewer. `None` where it holds not even one job: said once as a runner
/// error, and nothing is claimed (the runs stay pending, no attempt spent).
fn slots_within_open_file_limit(tick: &mut Tick<'_>) -> Option<Slots> {
    use crate::process::open_files;
    let asked = Slots::asked(tick.options.concurrency);
    let needed = asked.files_needed(open_files::open_below(u64::MAX));
    let Some(limit) = open_files::raise_toward(needed.saturating_add(FILES_HEADROOM)) else {
        return Some(asked); // no limit
    };
    if needed <= limit {
        return Some(asked);
    }
    // Counted again: only the descriptors below the limit take room under it.
    let open = open_files::open_below(limit);
    let Some(slots) = asked.within(limit, open) else {
        let least = Slots::ONE.files_needed(open);
        let error = anyhow::anyhow!(
            "the open-file limit (ulimit -n) is {limit} and its hard limit allows no more; {open} \
             are open already, and running even one job at a time needs {least} in all, so the \
             tick claims no run (they stay pending, no attempt spent). Raise the hard limit \
             (limits.conf, or `ulimit -Hn` as root), or close what the tick inherits"
        );
        runner_error(&mut tick.report.errors, "running jobs", &error);
        return None;
    };
    if slots.running < asked.running {
        let (concurrency, needed, running) =
            (asked.running, asked.files_needed(open), slots.running);
        crate::complain!(
            "runner: warning: the open-file limit (ulimit -n) is {limit} and its hard limit \
             allows no more; --concurrency {concurrency} needs {needed}: this tick runs \
             {running} job{} at a time. Raise the hard limit (limits.conf, or `ulimit -Hn` as \
             root), or lower --concurrency",
            if running == 1 { "" } else { "s" }
        );
    }
    Some(slots)
}

/// How many jobs a tick runs at once, and how many more it may hold prepared at their gate.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Slots {
    running: usize,
    ahead: usize,
}

impl Slots {
    /// The least a tick works with: one job at a time, none prepared ahead.
    const ONE: Slots = Slots {
        running: 1,
        ahead: 0,
    };

    /// `--concurrency` slots, and `max(concurrency, MIN_AHEAD)` places ahead.
    fn asked(concurrency: usize) -> Slots {
        Slots {
            running: concurrency,
            ahead: concurrency.max(MIN_AHEAD),
        }
    }

    /// The files the tick may have open at once, `open` of them already: for each job it holds
    /// (running, or prepared ahead), for each spawn under way (one per helper, at most one per
    /// job held: a job is claimed only into room held for it), and the ones opened later.
    fn files_needed(self, open: u64) -> u64 {
        let jobs = self.running.saturating_add(self.ahead);
        let spawns = jobs.min(SPAWN_THREADS);
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        count(jobs)
            .saturating_mul(FILES_PER_JOB)
            .saturating_add(count(spawns).saturating_mul(FILES_PER_SPAWN))
            .saturating_add(open)
            .saturating_add(FILES_OPENED_LATER)
    }

    /// As many as fit in `limit` open files, `open` of them taken already: fewer places ahead
    /// first (they only save time), then fewer slots. `None` when not even one job fits: a job
    /// the tick has no descriptors for fails to start, though nothing is wrong with it (its
    /// claim given back, and the tick claiming no more).
    fn within(self, limit: u64, open: u64) -> Option<Slots> {
        if self.files_needed(open) <= limit {
            return Some(self);
        }
        let held = (1..self.running.saturating_add(self.ahead))
            .rev()
            .find(|&jobs| {
                let running = self.running.min(jobs);
                let ahead = jobs - running;
                Slots { running, ahead }.files_needed(open) <= limit
            })?;
        let running = self.running.min(held);
        Some(Slots {
            running,
            ahead: held - running,
        })
    }
}

fn supervise_due(tick: &mut Tick<'_>, spawner: &mut Spawner, slots: Slots) -> Result<()> {
    let options = tick.options;
    let started = Instant::now();
    let mut supervisor = Supervisor::new(tick);
    let mut claiming = Claiming {
        next_at: Instant::now(),
        took_nothing: false,
        more_due: false,
        ended_since: false,
        locked: None,
    };
    // Whether the tick may claim: young enough, not told to stop, and nothing found that makes
    // a claim unwise (a write that failed, the server away, no descriptor left).
    let young = |tick: &Tick<'_>, spawner: &Spawner| {
        started.elapsed() < options.max_tick
            && !tick.options.shutdown.load(Ordering::Relaxed)
            && !tick.writes_failed
            && !tick.server_away
            && !spawner.exhausted.met()
            && !tick.report.errors.connection_lost
    };
    let mut returned: Spawned = Vec::new();
    // Ends decided but not written yet, and since when: they wait for the claim that is coming,
    // to share its transaction, but never longer than `HOLD_ENDS_AT_MOST`.
    let mut held: Option<(DecidedEnds, Instant)> = None;
    // Ends were written deferred, with a claim: the tick must not report before they are durable.
    let mut results_deferred = false;

    loop {
        supervisor.stop_all_on_shutdown(tick);
        let may_claim = young(tick, spawner);

        // The ends first, their slots given to prepared jobs at once, then the claim of what
        // they leave room for.
        let mut ends = supervisor.poll(tick);
        supervisor.admit_ready(tick, slots.running);
        returned.extend(spawner.spawned.try_iter().flatten());
        if !returned.is_empty() {
            spawner.in_flight -= returned.len();
            start_spawned(tick, std::mem::take(&mut returned), &mut supervisor);
            supervisor.admit_ready(tick, slots.running);
        }
        if supervisor.locked_starts.is_some() {
            supervisor.retry_locked_starts(tick);
            supervisor.admit_ready(tick, slots.running);
        }
        if !ends.is_empty() {
            claiming.ended_since = true;
            if claiming.more_due || ends.retry_due_by(tick.clock.epoch()) {
                claiming.next_at = Instant::now();
            }
        }
        let mut held_since = None;
        if let Some((mut earlier, since)) = held.take() {
            earlier.append(ends);
            ends = earlier;
            held_since = Some(since);
        }
        let ended = !ends.is_empty();
        if supervisor.in_hand(spawner) == 0 {
            // Before exiting, claim once more: these ends may have made work due.
            claiming.next_at = claiming.next_at.min(Instant::now());
        }

        let ahead = if supervisor.prepare_ahead {
            slots.ahead
        } else {
            0
        };
        let room = (slots.running + ahead)
            .saturating_sub(supervisor.in_hand(spawner))
            .min(options.batch);
        // While prepared jobs wait or spawns are under way, claim for several slots at once
        // (fewer, larger transactions); with none, for any free slot.
        let starving = supervisor.ready.is_empty() && spawner.in_flight == 0;
        let worth_claiming =
            starving || room >= claim_at_least(slots.running, ahead).min(options.batch);
        // A spawn that found no descriptor left just now (on a helper, its job perhaps not back
        // yet) stops this claim already; starts still to be written wait for a lock the claim
        // would wait for too.
        let claim_due_now = may_claim
            && !spawner.exhausted.met()
            && supervisor.locked_starts.is_none()
            && room > 0
            && Instant::now() >= claiming.next_at;
        if claim_due_now && worth_claiming {
            claiming.ended_since = false;
            // With ends to record, they and the claim are one store call, the ends deferred:
            // the durable commit of the new starts makes them durable too (one fsync for both),
            // and `sync` below does if nothing is to start.
            let lease_secs = supervisor.lease_secs;
            // A claim while jobs run comes after a wait: the connection sat idle meanwhile.
            let polling = !supervisor.active.is_empty();
            if polling && !ended {
                test_hook("polling");
            }
            let claimed = if ended {
                results_deferred = true;
                let (again, claimed) =
                    supervisor.lend(|| record_decided_then_claim(tick, ends, room, lease_secs));
                supervisor.write_again(tick, again);
                claimed
            } else {
                supervisor.lend(|| claim_due(tick, room, lease_secs))
            };
            let mut starting = false;
            match claimed {
                Ok(claimed) => {
                    claiming.locked = None;
                    claiming.took_nothing = claimed.runs.is_empty();
                    claiming.more_due = claimed.more_due;
                    // Nothing more due: look again after the recheck interval (or when a job
                    // ends). More due but not taken: a job of ours may be what holds it back.
                    claiming.next_at = if claimed.more_due && claimed.runs.len() == room {
                        Instant::now()
                    } else {
                        Instant::now() + RECHECK_INTERVAL
                    };
                    starting = !claimed.runs.is_empty();
                    dispatch(tick, claimed.runs, &mut supervisor, spawner);
                }
                // The server ended the session while the jobs ran and is not back yet (it is
                // restarting): nothing was sent, so nothing was claimed, and nothing is lost
                // yet. Claim nothing until the server is back: the jobs are tended, and their
                // ends and heartbeats written on a new connection; the first that lands shows
                // it back, and claiming resumes (`Tick::write_landed`). A write that cannot be
                // made reports the loss. Not with jobs at their gate: none may start once the
                // connection is lost.
                Err(e)
                    if polling
                        && supervisor.ready.is_empty()
                        && crate::exit::is_server_away(&e) =>
                {
                    tick.server_away = true;
                    claiming.took_nothing = true;
                    claiming.more_due = false;
                }
                // Another process held the lock through the whole wait (a `VACUUM`, a
                // `migrate`, a long prune; on PostgreSQL a session holding the rows or tables):
                // the claim's transaction rolled back, having changed nothing. Not an error yet:
                // the jobs go on, and the claim is tried again at the next look, as long as the
                // tick may claim. If it still meets the lock when the tick stops claiming, the
                // tick says so once (`say_claims_locked`).
                Err(e) if crate::exit::is_busy(&e) => {
                    claiming.took_nothing = false;
                    claiming.next_at = Instant::now() + RECHECK_INTERVAL;
                    claiming.locked = Some(e);
                }
                Err(e) => {
                    runner_error(&mut tick.report.errors, "claiming runs", &e);
                    tick.write_failed(&e);
                    claiming.took_nothing = true;
                    claiming.more_due = false;
                    claiming.next_at = Instant::now() + RECHECK_INTERVAL;
                }
            }
            // Nothing is reported, and nothing waited for, before the results are durable: the
            // starts' commit does it when runs were claimed (the tick never leaves before their
            // spawns are back and recorded).
            if ended && !starting {
                supervisor.lend(|| sync_results(tick));
            }
        } else if ended
            && claim_due_now
            && held_since.is_none_or(|since| since.elapsed() < HOLD_ENDS_AT_MOST)
        {
            // A claim comes as soon as a few more slots free: the ends wait to share its
            // transaction.
            held = Some((ends, held_since.unwrap_or_else(Instant::now)));
        } else if ended {
            let again = supervisor.lend(|| record_decided(tick, ends, Commit::Durable));
            supervisor.write_again(tick, again);
        }

        // Done when nothing runs, no end is left to write, and the latest claim, made after
        // every end, found nothing to take (whatever is still due is held back by another
        // runner's run, which that runner claims after it), or when the tick is old enough.
        // (Whether the tick may claim is asked again: what this turn wrote may have shown the
        // server back.)
        let settled = claiming.took_nothing && !claiming.ended_since;
        let done = supervisor.in_hand(spawner) == 0 && supervisor.unwritten.is_empty();
        if done && (settled || !young(tick, spawner)) {
            if let Some(error) = claiming.locked.take() {
                say_claims_locked(tick, &error, spawner.exhausted.met());
            }
            // Deferred results whose starts' commit never came (it failed) are made durable
            // before the tick reports; usually there is nothing left to sync. Nothing else this
            // tick defers needs it (its marks, a claim, materialised runs: see `store::Commit`),
            // so a tick that recorded no results this way syncs nothing.
            if results_deferred {
                sync_results(tick);
            }
            return Ok(());
        }
        supervisor.heartbeat_if_due(tick);
        let nothing_held = supervisor.in_hand(spawner) == 0 && supervisor.unwritten.is_empty();
        returned = if nothing_held && claiming.locked.is_some() {
            // Nothing held, and a claim to try again later (the last met the lock): wait for
            // it without spinning, in steps short enough to see a shutdown signal soon.
            let until_claim = claiming.next_at.saturating_duration_since(Instant::now());
            std::thread::sleep(until_claim.min(MAX_POLL_INTERVAL));
            Vec::new()
        } else {
            supervisor.wait(tick, spawner)
        };
    }
}

/// The tick stopped claiming (it reached `--max-tick`) while its latest claim still met
/// another process's lock: unless nothing is due after all (a read, which the lock does not
/// block), the due runs wait for the next tick, and one line says so (the tick exits 5: busy,
/// safe to retry). Not when the tick stopped claiming for another reason, said by its own line
/// (a failed write, a lost connection, no descriptor left) or asked for (a shutdown signal).
fn say_claims_locked(tick: &mut Tick<'_>, error: &anyhow::Error, out_of_files: bool) {
    let stopped_otherwise = tick.writes_failed
        || tick.server_away
        || out_of_files
        || tick.report.errors.connection_lost
        || tick.options.shutdown.load(Ordering::Relaxed);
    if stopped_otherwise {
        return;
    }
    if let Ok(false) = tick.store.anything_due(tick.clock.epoch()) {
        return;
    }
    tick.report.claims_locked = true;
    let max_tick = crate::display::duration_of_secs(tick.options.max_tick.as_secs() as i64);
    crate::complain!(
        "runner: error: claiming runs: {error:#}; the database stayed locked by another process \
         until this tick stopped claiming (--max-tick {max_tick}): the runs due wait for the \
         next tick"
    );
}

/// Make the results written deferred durable. If that fails, the runs that went dead are not
/// reported: their leases expire into recovery, which decides them again.
fn sync_results(tick: &mut Tick<'_>) {
    match tick.store.sync() {
        Ok(()) => results_durable(tick),
        Err(e) => {
            let e = e.into();
            runner_error(&mut tick.report.errors, "syncing results", &e);
            tick.write_failed(&e);
        }
    }
}

/// Hand claimed runs to the spawner's helpers, or, without helpers, spawn them here and start
/// them.
fn dispatch(
    tick: &mut Tick<'_>,
    runs: Vec<ClaimedRun>,
    supervisor: &mut Supervisor,
    spawner: &mut Spawner,
) {
    let requests_made = runs.len();
    let mut batch = with_specs(tick, runs, &supervisor.identity);
    let Some(requests) = &spawner.requests else {
        start_here(tick, batch, supervisor, spawner.exhausted);
        return;
    };
    // Shared among the helpers from the size `spawn_all` splits at, so that they spawn side by
    // side; a smaller batch goes to one helper, its starts then recorded in one transaction.
    let per_helper = if requests_made >= SPAWN_SIDE_BY_SIDE_FROM {
        requests_made.div_ceil(SPAWN_THREADS)
    } else {
        requests_made.max(1)
    };
    while !batch.is_empty() {
        let rest = batch.split_off(per_helper.min(batch.len()));
        let part = std::mem::replace(&mut batch, rest);
        let count = part.len();
        match requests.send(part) {
            Ok(()) => spawner.in_flight += count,
            // The helpers are gone (they never leave while the queue is open): spawn here.
            Err(mpsc::SendError(part)) => start_here(tick, part, supervisor, spawner.exhausted),
        }
    }
}

/// Execute runs already claimed (`run --wait`), claiming nothing more: start them, supervise
/// them and record each end.
pub fn execute_claimed(tick: &mut Tick<'_>, runs: Vec<ClaimedRun>) {
    let mut supervisor = Supervisor::new(tick);
    let batch = with_specs(tick, runs, &supervisor.identity);
    start_here(tick, batch, &mut supervisor, &FilesExhausted::default());
    supervisor.admit_ready(tick, usize::MAX);
    // Prepared ones remain only when a signal came first: the loop stops them at their gate.
    while !supervisor.active.is_empty()
        || !supervisor.ready.is_empty()
        || !supervisor.unwritten.is_empty()
        || supervisor.locked_starts.is_some()
    {
        supervisor.stop_all_on_shutdown(tick);
        if supervisor.locked_starts.is_some() {
            supervisor.retry_locked_starts(tick);
            supervisor.admit_ready(tick, usize::MAX);
        }
        let ends = supervisor.poll(tick);
        if !ends.is_empty() {
            let again = supervisor.lend(|| record_decided(tick, ends, Commit::Durable));
            supervisor.write_again(tick, again);
        }
        supervisor.heartbeat_if_due(tick);
        if !supervisor.active.is_empty() || supervisor.until_locked_retry(tick).is_some() {
            supervisor.sleep(tick);
        }
    }
}

/// Each claimed run with what starting its job takes.
fn with_specs(tick: &Tick<'_>, runs: Vec<ClaimedRun>, identity: &str) -> SpawnRequest {
    runs.into_iter()
        .map(|run| {
            let spec = job_spec(tick, &run, identity);
            (run, spec)
        })
        .collect()
}

/// Spawn the batch's jobs at their gate here (not on the helpers), then [`start_spawned`].
fn start_here(
    tick: &mut Tick<'_>,
    batch: SpawnRequest,
    supervisor: &mut Supervisor,
    exhausted: &FilesExhausted,
) {
    let (runs, specs): (Vec<ClaimedRun>, Vec<JobSpec>) = batch.into_iter().unzip();
    let spawned = runs
        .into_iter()
        .zip(RunningJob::spawn_all(&specs, exhausted))
        .collect();
    start_spawned(tick, spawned, supervisor);
}

/// Record the starts of jobs spawned at their gate in one transaction; the ones whose start
/// landed are prepared (held at the gate until a slot frees), the others never run their
/// command (refused: their attempts are closed, `Supervisor::close_never_started`). A job that
/// could not start ends its attempt, unless for want of a descriptor: its claim is given back.
fn start_spawned(tick: &mut Tick<'_>, spawned: Spawned, supervisor: &mut Supervisor) {
    let mut gated = Vec::with_capacity(spawned.len());
    let mut unstarted = Vec::new();
    // The claims were made before the spawns, so their leases were seen held earlier still; a
    // lease is long beside a spawn.
    let lease_seen_at = Instant::now();
    for (run, job) in spawned {
        match job {
            Some(Ok(job)) => gated.push(Active {
                run,
                job,
                stopped: None,
                lease_seen_at,
            }),
            Some(Err(error)) if error.kind == SpawnErrorKind::OutOfFiles => {
                supervisor.ran_out_of_files(tick, &run, &error.message);
                unstarted.push((run, error));
            }
            Some(Err(error)) => {
                let end = End {
                    run,
                    ended: Err((error.kind, error.message)),
                    stopped: None,
                    lease_seen_at,
                };
                let again = supervisor.lend(|| record_end(tick, end));
                supervisor.write_again(tick, again);
            }
            None => {
                let error = SpawnError {
                    kind: SpawnErrorKind::OutOfFiles,
                    message: "not started: a job spawned before it found no descriptor left"
                        .to_string(),
                };
                unstarted.push((run, error));
            }
        }
    }
    give_back_unstarted(tick, unstarted, supervisor);
    if gated.is_empty() {
        return;
    }
    test_hook("spawned");
    record_gated_starts(tick, gated, supervisor);
}

/// Record the starts of jobs held at their gate in one transaction, and prepare the ones that
/// landed (see [`start_spawned`]). A write that met another process's lock (busy, after the
/// whole wait or at once) changed nothing: while every one of their leases was seen held less
/// than a lease ago, the jobs wait at their gate and their starts are written again after a
/// pause that grows with each try ([`LockPause`]), the loop serving the other jobs
/// meanwhile; past that, they never start ([`give_up_locked_starts`]).
fn record_gated_starts(tick: &mut Tick<'_>, gated: Vec<Active>, supervisor: &mut Supervisor) {
    if tick.writes_stopped() {
        // Spawned after the database stopped taking writes (a claim is not made then either):
        // their starts are not written, and they never start; their leases expire into
        // recovery.
        for a in gated {
            a.job.abort();
            tick.report.not_started += 1;
        }
        return;
    }
    let starts: Vec<StartRecord> = gated
        .iter()
        .map(|a| StartRecord {
            run_id: a.run.run_id,
            attempt: a.run.attempt,
            lease_token: a.run.lease_token.clone(),
            child_pid: a.job.pid(),
            child_start_time: a.job.start_time(),
        })
        .collect();
    let now = tick.clock.epoch();
    let lease_expires_at = now + supervisor.lease_secs;
    let landed = match supervisor.lend(|| {
        if let Some(locked) = super::test_lock_fault("record-starts") {
            return Err(locked.into());
        }
        tick.store.record_starts(&starts, now, lease_expires_at)
    }) {
        Ok(landed) => {
            // A durable commit: the results written deferred before it are durable too.
            results_durable(tick);
            tick.write_landed();
            Some(landed)
        }
        Err(e) => {
            let e: anyhow::Error = e.into();
            if crate::exit::is_busy(&e) {
                // Nothing was written; the ones of an earlier try that met the lock are tried
                // with these.
                let mut jobs = supervisor
                    .locked_starts
                    .take()
                    .map_or_else(Vec::new, |earlier| earlier.jobs);
                jobs.extend(gated);
                // When to try again is the supervisor's to say.
                let locked = LockedStarts { jobs, met: e };
                if let Err(locked) = supervisor.hold_locked_starts(tick, locked) {
                    let why = "the database stayed locked by another process for as long as \
                               the leases held";
                    give_up_locked_starts(tick, locked, why);
                }
                return;
            }
            // Not recorded, so not started: the leases expire and recovery retries the runs.
            runner_error(&mut tick.report.errors, "recording the start of jobs", &e);
            tick.write_failed(&e);
            if tick.writes_stopped() {
                tick.report.not_started += gated.len();
            }
            None
        }
    };
    let seen_at = Instant::now();
    test_hook("recorded");
    let Some(landed) = landed else {
        for a in gated {
            a.job.abort();
        }
        return;
    };
    let mut refused = Vec::new();
    for (mut a, landed) in gated.into_iter().zip(landed) {
        if landed == Fenced::Applied {
            a.lease_seen_at = seen_at;
            supervisor.ready.push_back(a);
        } else {
            // Cancelled or taken over before it could start: it never runs.
            a.job.abort();
            refused.push(a.run);
        }
    }
    supervisor.close_never_started(tick, refused);
}

/// Jobs at their gate whose start could not be written for another process's lock (`why`: it
/// outlasted their leases, or a shutdown came first): they never start, their shells exit at the
/// gate having run nothing, and their runs are left to recovery once their leases expire (a
/// write to give their claims back would wait for the same lock). One line says so; the tick
/// claims no more, and exits 5 (busy, safe to retry).
fn give_up_locked_starts(tick: &mut Tick<'_>, locked: LockedStarts, why: &str) {
    let count = locked.jobs.len();
    for a in locked.jobs {
        a.job.abort();
    }
    tick.report.starts_locked += count;
    tick.write_failed(&locked.met);
    let (jobs, were, its, them, leases) = match count {
        1 => ("job", "was", "its", "it", "its lease expires"),
        _ => ("jobs", "were", "their", "them", "their leases expire"),
    };
    crate::complain!(
        "runner: error: recording the start of jobs: {:#}; {why}: {count} {jobs} {were} stopped \
         at {its} gate ({its} command{} never ran), and recovery retries {them} by {its} policy \
         once {leases}",
        locked.met,
        if count == 1 { "" } else { "s" }
    );
}

/// Close the attempt of a run whose job this tick stopped at its gate (see
/// `Supervisor::close_never_started`), as what became of the run says, in one fenced store call
/// that reads it (`Store::close_never_started`):
/// - still this tick's, its lease expired before the start could be recorded (the tick was held
///   up) and nobody recovered it yet: its end is written as recovery would write it
///   (`LEASE:EXPIRED`, retried by its policy), fenced by its token, saying its command never
///   ran;
/// - cancelled under it, or recovered (its lease expired) by another runner: closed as an
///   orphaned attempt is, fenced the same way (only this attempt, under this tick's token, and
///   only if its run no longer holds it so), as `CANCELLED` or `LEASE:EXPIRED`, an
///   `ATTEMPT_CLOSED` event saying its command never ran; a cancelled run's `forbid` schedule no
///   longer waits for its job;
/// - gone (its schedule was removed with its runs and their attempts): nothing.
fn close_unstarted(tick: &mut Tick<'_>, run: &ClaimedRun) -> Result<()> {
    test_hook("closing-unstarted");
    let now = tick.clock.read();
    let then = AfterFailure::by_policy(&run.retry, run.attempt, now, tick.rng);
    let detail = "its lease expired before its job's start could be recorded (the tick was held \
                  up); the job was stopped at its gate, and its command never ran";
    let result = AttemptResult {
        run_id: run.run_id,
        attempt: run.attempt,
        lease_token: run.lease_token.clone(),
        finished_at: now.secs(),
        duration_ms: 0,
        failure: Some(AttemptFailure::new(ErrorCode::LeaseExpired, detail, then)),
        exit_code: None,
        output: Some(CapturedOutput::default()),
        leftovers: Vec::new(),
        leftovers_killed: false,
        attempt_left_open: false,
        lease_expired_at: None,
    };
    let closes = NeverStartedCloses::of(run.attempt);
    let actor = &tick.options.actor;
    // Only what the close is fenced by is read from it.
    let holder = AttemptHolder {
        run_id: run.run_id,
        attempt: run.attempt,
        lease_token: run.lease_token.clone(),
        host: actor.host.clone(),
        runner_pid: actor.pid,
        runner_start_time: actor.start_time,
        child_pid: None,
        child_start_time: None,
        started_at: 0,
    };
    write_end_with(tick, &run.job_name, result, |tick, end| {
        let actor = &tick.options.actor;
        tick.store.close_never_started(end, &holder, &closes, actor)
    })?;
    Ok(())
}

/// Claims whose job never started for want of a descriptor (its spawn failed with `EMFILE` or
/// `ENFILE`, or was not tried after one that did): the runner's problem, not the job's, so no
/// attempt is spent: the claims are given back ([`give_back_claims`]). A run cancelled or
/// recovered meanwhile has its end recorded as before (`SPAWN:OTHER`: refused, or closing its
/// attempt under the cancel).
fn give_back_unstarted(
    tick: &mut Tick<'_>,
    unstarted: Vec<(ClaimedRun, SpawnError)>,
    supervisor: &mut Supervisor,
) {
    let (runs, errors): (Vec<ClaimedRun>, Vec<SpawnError>) = unstarted.into_iter().unzip();
    let doing = "giving back runs whose job could not start";
    let Some(landed) = give_back_claims(tick, &runs, OUT_OF_FILES_REASON, doing, supervisor) else {
        return;
    };
    for ((run, error), landed) in runs.into_iter().zip(errors).zip(landed) {
        if landed != Fenced::Applied {
            // Refused: cancelled or recovered meanwhile. The end is fenced the same way.
            let end = End {
                run,
                ended: Err((error.kind, error.message)),
                stopped: None,
                lease_seen_at: Instant::now(),
            };
            let again = supervisor.lend(|| record_end(tick, end));
            supervisor.write_again(tick, again);
        }
    }
}

/// Give back the claims of runs whose command never ran (`Store::give_back`), their shells gone
/// or never spawned: each run is pending again, due at once, its attempt row gone, a
/// `GIVEN_BACK` event saying `reason`. Per run, in order: whether it landed (a refused one was
/// cancelled or recovered meanwhile; the caller closes its attempt). `None` when the write
/// failed, said as a runner error (`doing`): the leases expire and recovery retries the runs by
/// their policy, as after a crash.
fn give_back_claims(
    tick: &mut Tick<'_>,
    runs: &[ClaimedRun],
    reason: &str,
    doing: &str,
    supervisor: &mut Supervisor,
) -> Option<Vec<Fenced>> {
    if runs.is_empty() {
        return None;
    }
    let claims: Vec<GivenBack> = runs
        .iter()
        .map(|run| GivenBack {
            run_id: run.run_id,
            attempt: run.attempt,
            lease_token: run.lease_token.clone(),
            event: NewEvent::given_back(run.attempt, reason),
        })
        .collect();
    let now = tick.clock.epoch();
    let actor = &tick.options.actor;
    match supervisor.lend(|| tick.store.give_back(&claims, now, actor)) {
        Ok(landed) => {
            // A durable commit: the results written deferred before it are durable too.
            results_durable(tick);
            for (run, landed) in runs.iter().zip(&landed) {
                if *landed == Fenced::Applied {
                    tick.report.given_back.push(run.run_id);
                }
            }
            Some(landed)
        }
        Err(e) => {
            let e = e.into();
            runner_error(&mut tick.report.errors, doing, &e);
            tick.write_failed(&e);
            if tick.report.errors.connection_lost {
                tick.report.not_started += runs.len();
            }
            None
        }
    }
}

fn job_spec(tick: &Tick<'_>, run: &ClaimedRun, identity: &str) -> JobSpec {
    let marker = attempt_marker(identity, run.run_id, &run.lease_token);
    JobSpec {
        command: run.command.clone(),
        workdir: run.workdir.as_ref().map(PathBuf::from),
        env: vec![
            ("RUNNER_JOB".into(), run.job_name.clone()),
            ("RUNNER_RUN_ID".into(), run.run_id.to_string()),
            ("RUNNER_ATTEMPT".into(), run.attempt.to_string()),
            ("RUNNER_SCHEDULED_AT".into(), utc_time(run.scheduled_for)),
            ("RUNNER_IDEMPOTENCY_KEY".into(), run.idempotency_key.clone()),
            ("RUNNER_LEASE_TOKEN".into(), run.lease_token.to_string()),
            ("RUNNER_DATABASE".into(), identity.to_string()),
        ],
        timeout: Duration::from_secs(run.timeout_secs.max(1) as u64),
        kill_grace: KILL_GRACE,
        pipe_leak_timeout: PIPE_LEAK_TIMEOUT,
        stream_output: tick.options.stream_output,
        leftovers: run.leftovers,
        marker,
    }
}

/// How many places (free slots and prepared places) a claim waits for while prepared jobs remain:
/// half of the `ahead` prepared places, or, for a tick with fewer slots than half of them, every
/// place but a slot-full of prepared jobs. A tick of few slots frees only a place or two per
/// round, so half its prepared places meant a claim, a transaction and a round of spawns for
/// every few jobs, and four ticks of two slots on one database queued for its write lock with
/// four times the transactions of one tick of eight. (Measured, four ticks of two slots
/// draining 10,000 runs of `true`, alternating: 5.07-5.46 s against 5.26-6.00 s, less CPU; one
/// tick of two slots alone, 3,000 runs: 1.62-1.75 s against 1.57-1.64 s, its first jobs of a
/// larger batch coming back later. At four slots and more nothing changes.)
fn claim_at_least(concurrency: usize, ahead: usize) -> usize {
    ahead.div_ceil(2).max(ahead.saturating_sub(concurrency))
}

fn poll_interval(active: &[Active]) -> Duration {
    let youngest = active.iter().map(|a| a.job.age()).min();
    // No job left means the loop is about to claim more: do not sleep long.
    let interval = youngest
        .map_or(MIN_POLL_INTERVAL, |age| age / 10)
        .clamp(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL);
    let floor = active.iter().map(|a| a.job.min_poll_gap()).max();
    interval.max(floor.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_that_meets_the_lock_again_waits_twice_as_long_up_to_a_tenth_of_the_lease() {
        let now = Instant::now();
        let mut pause = LockPause::new(Duration::from_secs(5), now);
        let lease_left = Duration::from_secs(4);
        let mut waited = Vec::new();
        for _ in 0..8 {
            pause.met(now, 0, lease_left);
            waited.push(pause.left(now, 0).as_millis());
        }
        assert_eq!(waited, [10, 20, 40, 80, 160, 320, 500, 500]);
        assert!(!pause.due(now, 0));
        assert!(pause.due(now + Duration::from_millis(500), 0));
        let long = LockPause::new(Duration::from_secs(60), now);
        assert_eq!(long.ceiling, LOCKED_WRITE_PAUSE_MAX);
    }

    #[test]
    fn the_last_try_of_a_write_that_meets_the_lock_comes_when_its_first_lease_runs_out() {
        let now = Instant::now();
        let mut pause = LockPause::new(Duration::from_secs(60), now);
        for _ in 0..10 {
            pause.met(now, 0, Duration::from_secs(30));
        }
        pause.met(now, 0, Duration::from_millis(300));
        assert_eq!(pause.left(now, 0), Duration::from_millis(300));
        assert!(pause.due(now + Duration::from_millis(300), 0));
    }

    #[test]
    fn a_write_that_lands_cuts_short_the_pause_and_the_next_starts_from_the_first() {
        let now = Instant::now();
        let mut pause = LockPause::new(Duration::from_secs(60), now);
        for _ in 0..10 {
            pause.met(now, 3, Duration::from_secs(30));
        }
        assert_eq!(pause.left(now, 3), LOCKED_WRITE_PAUSE_MAX);
        // Another write of the tick landed: the lock is free, the write goes at once.
        assert!(pause.due(now, 4));
        pause.met(now, 4, Duration::from_secs(30));
        assert_eq!(pause.left(now, 4), LOCKED_WRITE_PAUSE_FIRST);
    }

    #[test]
    fn the_lease_left_is_the_first_to_run_out_and_nothing_once_one_has() {
        let lease = Duration::from_secs(60);
        let now = Instant::now();
        let Some(earlier) = now.checked_sub(Duration::from_secs(20)) else {
            return; // the monotonic clock started less than 20 s ago
        };
        let left = lease_left(lease, [now, earlier]);
        assert!(left <= Duration::from_secs(40), "{left:?}");
        assert!(left > Duration::from_secs(30), "{left:?}");
        assert_eq!(lease_left(lease, []), lease);
        if let Some(long_ago) = now.checked_sub(Duration::from_secs(61)) {
            assert_eq!(lease_left(lease, [now, long_ago]), Duration::ZERO);
        }
    }

    #[test]
    fn a_tick_of_few_slots_claims_all_but_a_slot_full_of_its_prepared_places() {
        assert_eq!(claim_at_least(1, MIN_AHEAD), 7);
        assert_eq!(claim_at_least(2, MIN_AHEAD), 6);
        assert_eq!(claim_at_least(3, MIN_AHEAD), 5);
        // From four slots on, half the prepared places, as before.
        assert_eq!(claim_at_least(4, MIN_AHEAD), 4);
        assert_eq!(claim_at_least(8, 8), 4);
        assert_eq!(claim_at_least(32, 32), 16);
        // Nothing prepared ahead: any free slot.
        assert_eq!(claim_at_least(2, 0), 0);
    }

    #[test]
    fn slots_give_up_places_ahead_before_running_ones_to_fit_the_open_file_limit() {
        let open = 10;
        let asked = Slots::asked(50);
        // 100 jobs held, two spawns under way.
        assert_eq!(asked.files_needed(open), 3 * 100 + 5 * 2 + open + 4);
        assert_eq!(asked.within(asked.files_needed(open), open), Some(asked));
        let fewer_ahead = asked.within(open + 4 + 10 + 3 * 80, open).expect("fits");
        assert_eq!((fewer_ahead.running, fewer_ahead.ahead), (50, 30));
        let fewer_running = asked.within(open + 4 + 10 + 3 * 30, open).expect("fits");
        assert_eq!((fewer_running.running, fewer_running.ahead), (30, 0));
        assert_eq!(Slots::asked(1).ahead, MIN_AHEAD);
    }

    #[test]
    fn one_job_at_a_time_takes_its_pipes_and_one_spawn_and_less_is_none() {
        let open = 12;
        let one = Slots::ONE.files_needed(open);
        assert_eq!(one, open + 4 + 3 + 5);
        assert_eq!(Slots::asked(4).within(one, open), Some(Slots::ONE));
        assert_eq!(Slots::asked(4).within(one - 1, open), None);
        // Two jobs held may be spawned side by side, one per helper.
        let two = Slots {
            running: 2,
            ahead: 0,
        };
        assert_eq!(two.files_needed(open), open + 4 + 3 * 2 + 5 * 2);
        assert_eq!(
            Slots::asked(4).within(two.files_needed(open) - 1, open),
            Some(Slots::ONE)
        );
    }
}
