//! Running one job's shell command as a supervised child process.
//!
//! A job is `/bin/sh -c COMMAND` in its own process group. Its stdout and
//! stderr are drained concurrently by one reader thread per pipe, keeping only
//! the last [`OUTPUT_TAIL_BYTES`] of each. [`RunningJob::poll`] is non-blocking:
//! it reaps the child, enforces the timeout (SIGTERM to the group, SIGKILL after
//! the grace period) and makes sure a grandchild holding the pipes open cannot
//! make us wait forever.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::os::unix::process::{CommandExt, ExitStatusExt};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{getpgrp, Pid};

/// How many bytes of each output stream are kept (the tail).
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;

/// After the pipe-leak SIGKILL, how long the readers get to drain what is left
/// before they are abandoned.
const LEAK_DRAIN: Duration = Duration::from_millis(250);

/// Size of one read from a pipe.
const READ_CHUNK: usize = 64 * 1024;

/// The shell that runs every job.
const SHELL: &str = "/bin/sh";

/// Everything needed to start one job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub command: String,
    pub workdir: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// SIGTERM → SIGKILL delay.
    pub kill_grace: Duration,
    /// After the shell exits, how long to wait for the pipes to close.
    pub pipe_leak_timeout: Duration,
    /// Also copy output live to our stdout/stderr.
    pub stream_output: bool,
}

/// Why a job could not be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnErrorKind {
    NotFound,
    Permission,
    Other,
}

/// Failure to start a job (a result, not a panic).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SpawnError {
    pub kind: SpawnErrorKind,
    pub message: String,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The shell exited with this code. `-1` if its status could not be
    /// collected (someone else reaped it), which should never happen.
    Exited(i32),
    /// Raw signal number; the job was killed by a signal it did not get from us.
    Signalled(i32),
    /// We killed it for exceeding the timeout.
    TimedOut,
    /// We killed it because the caller asked (cancel / lease lost).
    Killed,
}

/// The result of a job, returned once by [`RunningJob::poll`].
#[derive(Debug, Clone)]
pub struct Finished {
    pub outcome: Outcome,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    pub stdout_total: u64,
    pub stderr_total: u64,
    /// From spawn until the shell was seen to have exited.
    pub duration: Duration,
}

// ---------------------------------------------------------------------------
// Output capture
// ---------------------------------------------------------------------------

/// Keeps the last `cap` bytes written to it.
#[derive(Debug)]
struct TailBuffer {
    cap: usize,
    buf: Vec<u8>,
    /// When `buf` is full: index of the oldest byte (= next write position).
    pos: usize,
}

impl TailBuffer {
    fn new(cap: usize) -> TailBuffer {
        TailBuffer {
            cap,
            buf: Vec::new(),
            pos: 0,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        if self.cap == 0 {
            return;
        }
        if data.len() >= self.cap {
            self.buf.clear();
            self.buf.extend_from_slice(&data[data.len() - self.cap..]);
            self.pos = 0;
            return;
        }
        if self.buf.len() < self.cap {
            let n = (self.cap - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        while !data.is_empty() {
            let n = (self.cap - self.pos).min(data.len());
            self.buf[self.pos..self.pos + n].copy_from_slice(&data[..n]);
            self.pos = (self.pos + n) % self.cap;
            data = &data[n..];
        }
    }

    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buf.len());
        out.extend_from_slice(&self.buf[self.pos..]);
        out.extend_from_slice(&self.buf[..self.pos]);
        out
    }
}

#[derive(Debug)]
struct Capture {
    tail: TailBuffer,
    total: u64,
}

#[derive(Debug, Clone, Copy)]
enum StreamTo {
    Stdout,
    Stderr,
}

fn stream_chunk(to: StreamTo, data: &[u8]) {
    // Errors (e.g. our stdout is a closed pipe) must not stop the capture.
    match to {
        StreamTo::Stdout => {
            let mut out = io::stdout().lock();
            let _ = out.write_all(data);
            let _ = out.flush();
        }
        StreamTo::Stderr => {
            let mut err = io::stderr().lock();
            let _ = err.write_all(data);
            let _ = err.flush();
        }
    }
}

fn lock(capture: &Mutex<Capture>) -> MutexGuard<'_, Capture> {
    capture
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn drain<R: Read>(mut src: R, capture: &Mutex<Capture>, stream: Option<StreamTo>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let chunk = &buf[..n];
                {
                    let mut c = lock(capture);
                    c.tail.push(chunk);
                    c.total += n as u64;
                }
                if let Some(to) = stream {
                    stream_chunk(to, chunk);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// One pipe's reader thread and what it has captured so far.
struct Reader {
    capture: Arc<Mutex<Capture>>,
    handle: Option<JoinHandle<()>>,
    abandoned: bool,
}

impl Reader {
    fn spawn<R: Read + Send + 'static>(
        name: &str,
        src: R,
        stream: Option<StreamTo>,
    ) -> io::Result<Reader> {
        let capture = Arc::new(Mutex::new(Capture {
            tail: TailBuffer::new(OUTPUT_TAIL_BYTES),
            total: 0,
        }));
        let shared = Arc::clone(&capture);
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || drain(src, &shared, stream))?;
        Ok(Reader {
            capture,
            handle: Some(handle),
            abandoned: false,
        })
    }

    /// True once the reader reached EOF (joined) or was abandoned. Never blocks.
    fn settled(&mut self) -> bool {
        if let Some(handle) = &self.handle {
            if handle.is_finished() {
                if let Some(handle) = self.handle.take() {
                    // Finished: join returns at once. A panic is ignored (the
                    // captured data so far is still in `capture`).
                    let _ = handle.join();
                }
            }
        }
        self.handle.is_none() || self.abandoned
    }

    fn snapshot(&self) -> (Vec<u8>, u64) {
        let c = lock(&self.capture);
        (c.tail.to_vec(), c.total)
    }
}

// ---------------------------------------------------------------------------
// Running job
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopCause {
    TimedOut,
    Killed,
}

#[derive(Debug, Clone, Copy)]
enum ExitKind {
    Status(ExitStatus),
    /// `try_wait` failed (e.g. ECHILD): the status is lost.
    Lost,
}

/// A spawned job, supervised by repeated calls to [`RunningJob::poll`].
pub struct RunningJob {
    child: Child,
    pgid: i32,
    started: Instant,
    deadline: Option<Instant>,
    kill_grace: Duration,
    pipe_leak_timeout: Duration,
    cause: Option<StopCause>,
    term_sent_at: Option<Instant>,
    /// SIGKILL escalation done (sent, or found unnecessary).
    kill_done: bool,
    exit: Option<(ExitKind, Instant)>,
    leak_kill_at: Option<Instant>,
    stdout: Reader,
    stderr: Reader,
    finished: bool,
}

impl std::fmt::Debug for RunningJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningJob")
            .field("pid", &self.pgid)
            .field("cause", &self.cause)
            .field("exit", &self.exit)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

fn classify(err: &io::Error) -> SpawnErrorKind {
    match err.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOENT) => SpawnErrorKind::NotFound,
        Some(Errno::EACCES) | Some(Errno::EPERM) => SpawnErrorKind::Permission,
        Some(_) => SpawnErrorKind::Other,
        None => match err.kind() {
            io::ErrorKind::NotFound => SpawnErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => SpawnErrorKind::Permission,
            _ => SpawnErrorKind::Other,
        },
    }
}

fn spawn_error(workdir: Option<&Path>, command: &str, err: &io::Error) -> SpawnError {
    let message = match workdir {
        _ if err.raw_os_error() == Some(Errno::E2BIG as i32) => format!(
            "cannot start {SHELL}: the command is {} bytes, more than the kernel accepts in one \
             argument (128 KiB) or in all of them with the environment; put it in a script and \
             schedule the script",
            command.len()
        ),
        Some(dir) => format!("cannot start {SHELL} in {}: {err}", dir.display()),
        None => format!("cannot start {SHELL}: {err}"),
    };
    SpawnError {
        kind: classify(err),
        message,
    }
}

fn signal_group(pgid: i32, sig: Signal) -> bool {
    // pgid <= 1 would address our own group (0) or be meaningless; never do it.
    pgid > 1 && killpg(Pid::from_raw(pgid), sig).is_ok()
}

/// Whether the process group still has members we can signal.
fn group_alive(pgid: i32) -> bool {
    pgid > 1 && killpg(Pid::from_raw(pgid), None).is_ok()
}

impl RunningJob {
    /// Start `/bin/sh -c COMMAND` in a new process group.
    pub fn spawn(spec: &JobSpec) -> Result<RunningJob, SpawnError> {
        let mut cmd = Command::new(SHELL);
        cmd.arg("-c")
            .arg(&spec.command)
            .process_group(0)
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &spec.workdir {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| spawn_error(spec.workdir.as_deref(), &spec.command, &e))?;
        let started = Instant::now();
        let pgid = i32::try_from(child.id()).unwrap_or(0);

        let readers = Self::start_readers(&mut child, spec.stream_output);
        let (stdout, stderr) = match readers {
            Ok(r) => r,
            Err(err) => {
                // Cannot supervise it: do not leave it running.
                signal_group(pgid, Signal::SIGKILL);
                let _ = child.kill();
                let _ = child.wait();
                return Err(SpawnError {
                    kind: SpawnErrorKind::Other,
                    message: format!("cannot start output reader for {SHELL}: {err}"),
                });
            }
        };

        Ok(RunningJob {
            child,
            pgid,
            started,
            deadline: started.checked_add(spec.timeout),
            kill_grace: spec.kill_grace,
            pipe_leak_timeout: spec.pipe_leak_timeout,
            cause: None,
            term_sent_at: None,
            kill_done: false,
            exit: None,
            leak_kill_at: None,
            stdout,
            stderr,
            finished: false,
        })
    }

    fn start_readers(child: &mut Child, stream: bool) -> io::Result<(Reader, Reader)> {
        let out: ChildStdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("stdout pipe missing"))?;
        let err: ChildStderr = child
            .stderr
            .take()
            .ok_or_else(|| io::Error::other("stderr pipe missing"))?;
        let stdout = Reader::spawn("job-stdout", out, stream.then_some(StreamTo::Stdout))?;
        let stderr = Reader::spawn("job-stderr", err, stream.then_some(StreamTo::Stderr))?;
        Ok((stdout, stderr))
    }

    /// The shell's pid, which is also the process group id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn reap(&mut self, now: Instant) {
        if self.exit.is_some() {
            return;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => self.exit = Some((ExitKind::Status(status), now)),
            Ok(None) => {}
            Err(_) => self.exit = Some((ExitKind::Lost, now)),
        }
    }

    fn send_term(&mut self, now: Instant) {
        if self.term_sent_at.is_none() {
            signal_group(self.pgid, Signal::SIGTERM);
            self.term_sent_at = Some(now);
        }
    }

    fn send_kill(&mut self) {
        signal_group(self.pgid, Signal::SIGKILL);
        self.kill_done = true;
    }

    /// Non-blocking: reaps the child if it exited, enforces the timeout
    /// (TERM, then KILL after grace) and pipe-leak handling. Returns
    /// `Some(Finished)` exactly once, when the child is reaped and both readers
    /// finished (or were abandoned after the leak timeout).
    pub fn poll(&mut self, now: Instant) -> Option<Finished> {
        if self.finished {
            return None;
        }
        self.reap(now);

        // Timeout: only while the shell is still running.
        if self.exit.is_none() && self.cause.is_none() && self.deadline.is_some_and(|d| now >= d) {
            self.cause = Some(StopCause::TimedOut);
            self.send_term(now);
        }

        // Escalation: SIGKILL the group `kill_grace` after SIGTERM. Once the
        // shell is gone, only wait for the grace if the group still has members.
        if let Some(term_at) = self.term_sent_at {
            if !self.kill_done {
                if self.exit.is_some() && !group_alive(self.pgid) {
                    self.kill_done = true;
                } else if now.saturating_duration_since(term_at) >= self.kill_grace {
                    self.send_kill();
                }
            }
        }

        // Pipe leak: the shell exited but something still holds the pipes.
        let mut readers_done = self.stdout.settled() & self.stderr.settled();
        if let Some((_, exited_at)) = self.exit {
            if !readers_done {
                match self.leak_kill_at {
                    None => {
                        if now.saturating_duration_since(exited_at) >= self.pipe_leak_timeout {
                            self.send_kill();
                            self.leak_kill_at = Some(now);
                        }
                    }
                    Some(killed_at) => {
                        if now.saturating_duration_since(killed_at) >= LEAK_DRAIN {
                            // Something outside the group holds the pipe: give up
                            // on it (the thread ends whenever the pipe closes).
                            self.stdout.abandoned = true;
                            self.stderr.abandoned = true;
                            readers_done = true;
                        }
                    }
                }
            }
        }

        let (exit, exited_at) = self.exit?;
        let escalation_pending = self.term_sent_at.is_some() && !self.kill_done;
        if !readers_done || escalation_pending {
            return None;
        }

        self.finished = true;
        let outcome = match (self.cause, exit) {
            (Some(StopCause::TimedOut), _) => Outcome::TimedOut,
            (Some(StopCause::Killed), _) => Outcome::Killed,
            (None, ExitKind::Status(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => Outcome::Exited(code),
                (None, Some(sig)) => Outcome::Signalled(sig),
                (None, None) => Outcome::Exited(-1),
            },
            (None, ExitKind::Lost) => Outcome::Exited(-1),
        };
        let (stdout_tail, stdout_total) = self.stdout.snapshot();
        let (stderr_tail, stderr_total) = self.stderr.snapshot();
        Some(Finished {
            outcome,
            stdout_tail,
            stderr_tail,
            stdout_total,
            stderr_total,
            duration: exited_at.saturating_duration_since(self.started),
        })
    }

    /// Ask to stop the job: SIGTERM to the group now, SIGKILL after
    /// `kill_grace` (enforced by [`poll`](Self::poll)). The outcome becomes
    /// `Killed` unless the shell already exited on its own (or timed out);
    /// leftover group members are signalled either way.
    pub fn kill(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        self.reap(now);
        if self.exit.is_none() && self.cause.is_none() {
            self.cause = Some(StopCause::Killed);
        }
        if self.exit.is_none() || group_alive(self.pgid) {
            self.send_term(now);
        }
    }
}

// ---------------------------------------------------------------------------
// /proc helpers and leftovers
// ---------------------------------------------------------------------------

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line.
fn parse_start_time(stat: &[u8]) -> Option<u64> {
    // "pid (comm) state ppid ...": comm may contain spaces and ')', so split
    // at the last ')'. Fields after it start at field 3 (state).
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// starttime (field 22, clock ticks since boot) of `/proc/<pid>/stat`; `None`
/// if there is no such process or it is unreadable.
pub fn process_start_time(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// `(state, pgrp)`: fields 3 and 5 of a `/proc/<pid>/stat` line.
fn parse_state_pgrp(stat: &[u8]) -> Option<(u8, i32)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether a process that is not yet dead (a zombie is dead: it holds no files, no locks)
/// belongs to process group `pgid`, per `/proc`. False where `/proc` cannot be read.
fn group_has_live_members(pgid: i32) -> bool {
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry
            .file_name()
            .to_str()
            .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|pid| fs::read(format!("/proc/{pid}/stat")).ok())
            .and_then(|stat| parse_state_pgrp(&stat))
            .is_some_and(|(state, pgrp)| pgrp == pgid && state != b'Z' && state != b'X')
    })
}

/// How long [`kill_leftover_group`] waits for the killed group to be gone.
const LEFTOVER_EXIT_WAIT: Duration = Duration::from_secs(5);

/// Kill a leftover process group of a crashed runner's attempt, if and only if
/// it is safe: if `/proc/<pgid>` exists its start time must equal
/// `expected_start` (otherwise the pid was reused, or cannot be verified: do
/// nothing and return false); if the leader is gone, `killpg(pgid, SIGKILL)`
/// anyway. Returns true if a signal was delivered to something.
///
/// SIGKILL is asynchronous: `killpg` returns before the processes are gone and
/// have released what they hold (files, locks). So wait (up to
/// [`LEFTOVER_EXIT_WAIT`]) until no member is alive; only then may the caller
/// start the run's next attempt without the two overlapping.
pub fn kill_leftover_group(pgid: u32, expected_start: Option<u64>) -> bool {
    let killed = kill_leftover_group_now(pgid, expected_start);
    if killed {
        let raw = pgid as i32; // checked by kill_leftover_group_now
        let deadline = Instant::now() + LEFTOVER_EXIT_WAIT;
        while group_has_live_members(raw) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    killed
}

fn kill_leftover_group_now(pgid: u32, expected_start: Option<u64>) -> bool {
    let Ok(raw) = i32::try_from(pgid) else {
        return false;
    };
    if raw <= 1 || getpgrp().as_raw() == raw {
        return false;
    }
    if Path::new(&format!("/proc/{pgid}")).exists() {
        match (process_start_time(pgid), expected_start) {
            (Some(actual), Some(expected)) if actual == expected => {}
            _ => return false,
        }
    }
    signal_group(raw, Signal::SIGKILL)
}

/// Human signal name: 9 → "SIGKILL", 15 → "SIGTERM", unknown → "SIG<n>".
pub fn signal_name(signo: i32) -> String {
    match Signal::try_from(signo) {
        Ok(sig) => sig.as_str().to_string(),
        Err(_) => format!("SIG{signo}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(command: &str) -> JobSpec {
        JobSpec {
            command: command.to_string(),
            workdir: None,
            env: Vec::new(),
            timeout: Duration::from_secs(30),
            kill_grace: Duration::from_millis(500),
            pipe_leak_timeout: Duration::from_millis(300),
            stream_output: false,
        }
    }

    /// Poll until finished; panics after `limit`.
    fn run_until(job: &mut RunningJob, limit: Duration) -> Finished {
        let start = Instant::now();
        loop {
            let now = Instant::now();
            if let Some(f) = job.poll(now) {
                assert!(job.poll(Instant::now()).is_none(), "finished twice");
                return f;
            }
            assert!(
                now.duration_since(start) < limit,
                "job did not finish within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn run(s: &JobSpec) -> Finished {
        let mut job = RunningJob::spawn(s).unwrap();
        run_until(&mut job, Duration::from_secs(20))
    }

    /// True if the process is gone or a zombie (dead, waiting to be reaped).
    fn dead(pid: u32) -> bool {
        match fs::read(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => {
                let close = stat.iter().rposition(|&b| b == b')').unwrap();
                let state = stat[close + 2];
                state == b'Z' || state == b'X'
            }
        }
    }

    fn wait_dead(pid: u32, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if dead(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        dead(pid)
    }

    fn read_pid(path: &Path, limit: Duration) -> u32 {
        let start = Instant::now();
        loop {
            if let Ok(s) = fs::read_to_string(path) {
                if let Ok(pid) = s.trim().parse() {
                    return pid;
                }
            }
            assert!(start.elapsed() < limit, "pid file never written");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn tail_buffer_keeps_last_bytes_in_order() {
        let mut t = TailBuffer::new(5);
        t.push(b"ab");
        assert_eq!(t.to_vec(), b"ab");
        t.push(b"cde");
        assert_eq!(t.to_vec(), b"abcde");
        t.push(b"fg");
        assert_eq!(t.to_vec(), b"cdefg");
        t.push(b"hijk");
        assert_eq!(t.to_vec(), b"ghijk");
        t.push(b"0123456789");
        assert_eq!(t.to_vec(), b"56789");
        t.push(b"x");
        assert_eq!(t.to_vec(), b"6789x");
        for b in b"abcdefghijklmnopq" {
            t.push(&[*b]);
        }
        assert_eq!(t.to_vec(), b"mnopq");
    }

    #[test]
    fn exit_codes() {
        let f = run(&spec("exit 0"));
        assert_eq!(f.outcome, Outcome::Exited(0));
        let f = run(&spec("exit 3"));
        assert_eq!(f.outcome, Outcome::Exited(3));
    }

    #[test]
    fn signalled() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spec("ulimit -c 0; kill -SEGV $$");
        s.workdir = Some(dir.path().to_path_buf());
        let f = run(&s);
        assert_eq!(f.outcome, Outcome::Signalled(11));
        assert_eq!(signal_name(11), "SIGSEGV");
    }

    #[test]
    fn captures_stdout_and_stderr_separately() {
        let f = run(&spec("echo out; echo err >&2; printf more"));
        assert_eq!(f.outcome, Outcome::Exited(0));
        assert_eq!(f.stdout_tail, b"out\nmore");
        assert_eq!(f.stderr_tail, b"err\n");
        assert_eq!(f.stdout_total, 8);
        assert_eq!(f.stderr_total, 4);
    }

    #[test]
    fn large_output_does_not_deadlock() {
        let f = run(&spec(
            "head -c 50000000 /dev/zero; head -c 3000000 /dev/zero >&2; printf END",
        ));
        assert_eq!(f.outcome, Outcome::Exited(0));
        assert_eq!(f.stdout_total, 50_000_003);
        assert_eq!(f.stderr_total, 3_000_000);
        assert_eq!(f.stdout_tail.len(), OUTPUT_TAIL_BYTES);
        assert_eq!(f.stderr_tail.len(), OUTPUT_TAIL_BYTES);
        assert!(f.stdout_tail.ends_with(b"\0END"));
        assert!(f.stderr_tail.iter().all(|&b| b == 0));
    }

    #[test]
    fn timeout_escalates_to_sigkill() {
        let mut s = spec("trap '' TERM; sleep 30");
        s.timeout = Duration::from_millis(300);
        s.kill_grace = Duration::from_millis(500);
        let start = Instant::now();
        let f = run(&s);
        assert_eq!(f.outcome, Outcome::TimedOut);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn timeout_kills_background_grandchild() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // The grandchild ignores TERM and does not hold our pipes, so only the
        // SIGKILL escalation after the shell died can get rid of it.
        let mut s = spec(&format!(
            "(trap '' TERM; exec sleep 60) >/dev/null 2>&1 & echo $! > {}; sleep 30",
            pidfile.display()
        ));
        s.timeout = Duration::from_millis(400);
        s.kill_grace = Duration::from_millis(300);
        let mut job = RunningJob::spawn(&s).unwrap();
        let grandchild = read_pid(&pidfile, Duration::from_secs(5));
        let f = run_until(&mut job, Duration::from_secs(10));
        assert_eq!(f.outcome, Outcome::TimedOut);
        assert!(
            wait_dead(grandchild, Duration::from_secs(5)),
            "grandchild survived"
        );
    }

    #[test]
    fn timeout_kills_plain_background_sleep() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut s = spec(&format!(
            "sleep 60 & echo $! > {}; sleep 30",
            pidfile.display()
        ));
        s.timeout = Duration::from_millis(300);
        let mut job = RunningJob::spawn(&s).unwrap();
        let grandchild = read_pid(&pidfile, Duration::from_secs(5));
        let f = run_until(&mut job, Duration::from_secs(10));
        assert_eq!(f.outcome, Outcome::TimedOut);
        assert!(
            wait_dead(grandchild, Duration::from_secs(5)),
            "grandchild survived"
        );
    }

    #[test]
    fn pipe_leak_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut s = spec(&format!(
            "sleep 60 & echo $! > {}; echo done",
            pidfile.display()
        ));
        s.pipe_leak_timeout = Duration::from_millis(300);
        let start = Instant::now();
        let mut job = RunningJob::spawn(&s).unwrap();
        let f = run_until(&mut job, Duration::from_secs(5));
        assert!(
            start.elapsed() < Duration::from_millis(300 + 1500),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(f.outcome, Outcome::Exited(0));
        assert_eq!(f.stdout_tail, b"done\n");
        let grandchild = read_pid(&pidfile, Duration::from_secs(1));
        assert!(
            wait_dead(grandchild, Duration::from_secs(5)),
            "grandchild survived"
        );
    }

    #[test]
    fn missing_workdir_is_not_found() {
        let mut s = spec("true");
        s.workdir = Some(PathBuf::from("/no/such/dir/for/runner"));
        let err = RunningJob::spawn(&s).unwrap_err();
        assert_eq!(err.kind, SpawnErrorKind::NotFound, "{err}");
        assert!(err.message.contains("/no/such/dir/for/runner"), "{err}");
    }

    #[test]
    fn workdir_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spec("pwd -P");
        s.workdir = Some(dir.path().to_path_buf());
        let f = run(&s);
        let expected = fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&f.stdout_tail).trim_end(),
            expected.to_string_lossy()
        );
    }

    #[test]
    fn kill_gives_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut s = spec(&format!(
            "sleep 60 & echo $! > {}; sleep 30",
            pidfile.display()
        ));
        s.kill_grace = Duration::from_millis(300);
        let mut job = RunningJob::spawn(&s).unwrap();
        let grandchild = read_pid(&pidfile, Duration::from_secs(5));
        assert!(job.poll(Instant::now()).is_none());
        let start = Instant::now();
        job.kill(Instant::now());
        let f = run_until(&mut job, Duration::from_secs(5));
        assert_eq!(f.outcome, Outcome::Killed);
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(
            wait_dead(grandchild, Duration::from_secs(5)),
            "grandchild survived"
        );
    }

    #[test]
    fn kill_after_exit_keeps_exit_code() {
        let mut job = RunningJob::spawn(&spec("exit 4")).unwrap();
        let start = Instant::now();
        while !dead(job.pid()) {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(10));
        }
        job.kill(Instant::now());
        let f = run_until(&mut job, Duration::from_secs(5));
        assert_eq!(f.outcome, Outcome::Exited(4));
    }

    #[test]
    fn env_vars_are_visible() {
        let mut s = spec("printf '%s|%s' \"$RUNNER_TEST_A\" \"$RUNNER_TEST_B\"");
        s.env = vec![
            ("RUNNER_TEST_A".to_string(), "hello world".to_string()),
            ("RUNNER_TEST_B".to_string(), "x=y".to_string()),
        ];
        let f = run(&s);
        assert_eq!(f.stdout_tail, b"hello world|x=y");
    }

    #[test]
    fn streaming_still_captures() {
        let mut s = spec("echo streamed-out; echo streamed-err >&2");
        s.stream_output = true;
        let f = run(&s);
        assert_eq!(f.stdout_tail, b"streamed-out\n");
        assert_eq!(f.stderr_tail, b"streamed-err\n");
    }

    #[test]
    fn stdin_is_dev_null() {
        let f = run(&spec("cat; echo rc=$?"));
        assert_eq!(f.stdout_tail, b"rc=0\n");
    }

    #[test]
    fn start_time_of_self() {
        let t = process_start_time(std::process::id());
        assert!(t.is_some());
        assert_eq!(process_start_time(std::process::id()), t);
        assert_eq!(process_start_time(0), None);
        assert_eq!(process_start_time(u32::MAX), None);
    }

    #[test]
    fn parse_start_time_with_odd_comm() {
        let fields: Vec<String> = (3..=30).map(|i| i.to_string()).collect();
        let line = format!("123 (a) b (c)) {}\n", fields.join(" "));
        assert_eq!(parse_start_time(line.as_bytes()), Some(22));
        assert_eq!(parse_start_time(b"123 (x) S 1 2"), None);
        assert_eq!(parse_start_time(b"garbage"), None);
    }

    #[test]
    fn kill_leftover_group_checks_start_time() {
        let mut job = RunningJob::spawn(&spec("sleep 30")).unwrap();
        let pid = job.pid();
        let start = process_start_time(pid).unwrap();
        assert!(!kill_leftover_group(pid, Some(start + 1)));
        assert!(!kill_leftover_group(pid, None));
        assert!(job.poll(Instant::now()).is_none());
        assert!(!dead(pid));
        assert!(!kill_leftover_group(0, Some(0)));
        assert!(!kill_leftover_group(1, None));
        assert!(kill_leftover_group(pid, Some(start)));
        let f = run_until(&mut job, Duration::from_secs(5));
        assert_eq!(f.outcome, Outcome::Signalled(9));
    }

    #[test]
    fn kill_leftover_group_waits_until_the_group_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut job = RunningJob::spawn(&spec(&format!(
            "sleep 60 & echo $! > {}; sleep 30",
            pidfile.display()
        )))
        .unwrap();
        let grandchild = read_pid(&pidfile, Duration::from_secs(5));
        let pgid = job.pid();
        assert!(group_has_live_members(pgid as i32));
        assert!(kill_leftover_group(pgid, process_start_time(pgid)));
        // Both are dead when it returns, not merely signalled.
        assert!(!group_has_live_members(pgid as i32));
        assert!(dead(grandchild) && dead(pgid));
        let f = run_until(&mut job, Duration::from_secs(5));
        assert_eq!(f.outcome, Outcome::Signalled(9));
    }

    #[test]
    fn parse_state_and_group() {
        let fields: Vec<String> = (6..=30).map(|i| i.to_string()).collect();
        let line = format!("123 (a) b (c)) S 1 777 {}\n", fields.join(" "));
        assert_eq!(parse_state_pgrp(line.as_bytes()), Some((b'S', 777)));
        assert_eq!(parse_state_pgrp(b"123 (x) Z 1"), None);
        let own = fs::read(format!("/proc/{}/stat", std::process::id())).unwrap();
        assert_eq!(
            parse_state_pgrp(&own).map(|(_, pgrp)| pgrp),
            Some(getpgrp().as_raw())
        );
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(1000), "SIG1000");
    }
}
