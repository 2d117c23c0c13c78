//! What `/proc` says about processes: start times (so a reused pid is never signalled), process
//! groups, the environment marker every job process carries, and the children this runner
//! adopted as a subreaper. Linux only, like the rest of the runner.

use std::fs;
use std::io::Read;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::{getpgrp, Pid};

/// How long a process inside an exec (no environment and no command line to read yet) is looked
/// at again before it counts as a stranger. An exec takes microseconds, but a process preempted
/// inside it on a loaded host can take tens of milliseconds.
const EXEC_WAIT: Duration = Duration::from_secs(2);

/// How many looks (1 ms apart) that find an empty environment beside a command line make a
/// process one started with an empty environment.
const ENV_EMPTY_LOOKS: u32 = 3;

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `Z`, ...
    pub state: u8,
    /// The parent: 2 (kthreadd) for kernel threads.
    pub ppid: i32,
    pub pgrp: i32,
    /// Field 22, clock ticks since boot: with the pid, it names one process for good.
    pub start_time: u64,
}

impl Stat {
    /// A zombie is dead: it holds no files, no locks, and runs nothing.
    pub fn is_live(&self) -> bool {
        self.state != b'Z' && self.state != b'X'
    }
}

/// Parse a `/proc/<pid>/stat` line. The command name may contain spaces and `)`, so the fields
/// are counted from the last `)`.
pub fn parse_stat(stat: &[u8]) -> Option<Stat> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // fields[0] is field 3 (state), [1] field 4 (ppid), [2] field 5 (pgrp), [19] field 22
    // (starttime).
    Some(Stat {
        state: *fields.first()?.as_bytes().first()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

pub fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    let path = format!("/proc/{pid}/stat");
    // The kernel writes the whole line at the first read, so one read into a buffer larger than
    // any line returns all of it: `fs::read` would also ask for the size (which `/proc` gives
    // as 0), read 32 bytes, then the rest, then once more to meet the end. A tick reads this
    // for every job it starts.
    let mut file = fs::File::open(&path).ok()?;
    let mut line = [0u8; 2048];
    let read = file.read(&mut line).ok()?;
    if read < line.len() {
        parse_stat(&line[..read])
    } else {
        parse_stat(&fs::read(&path).ok()?)
    }
}

/// The start time of a process; `None` if there is no such process or it is unreadable.
pub fn process_start_time(pid: u32) -> Option<u64> {
    stat(i32::try_from(pid).ok()?).map(|s| s.start_time)
}

/// Whether the process `pid` that started at `start_time` is still alive (not a zombie). An
/// unknown start time proves nothing: such a process is taken to be alive.
pub fn is_alive(pid: u32, start_time: Option<u64>) -> bool {
    let Some(stat) = i32::try_from(pid).ok().and_then(stat) else {
        return false;
    };
    stat.is_live() && start_time.is_none_or(|t| t == stat.start_time)
}

/// `pid comm`, for saying which process was found (`1234 sleep`).
pub fn describe(pid: i32) -> String {
    // Bytes, not a string: the kernel cuts a name at 15 bytes, mid-character if it must, and
    // the name (what is left of it) still says which process it was.
    let comm = fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("{pid} {}", String::from_utf8_lossy(&comm).trim_end())
}

/// The environment entries (`KEY=VALUE`) that mark one attempt's processes: every process a job
/// starts inherits them, wherever it moves (another process group, another session), unless it
/// deliberately clears its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub entries: Vec<String>,
}

impl Marker {
    /// Whether the process's initial environment holds every entry of the marker. Unreadable
    /// (gone, a zombie, another user's): false.
    pub fn is_carried_by(&self, pid: i32) -> bool {
        // A process in the middle of an exec (a job's `setsid` becoming its daemon) shows an
        // empty environment, and an empty command line, until the kernel has set up the new
        // program's: look again, rather than take it for a stranger (a kill that missed it
        // would close the attempt with it alive). A program started with an empty environment
        // (`env -i`) shows its command line beside it, time after time; one such look proves
        // nothing, as the exec may have ended between the two reads, or the next begun.
        let deadline = Instant::now() + EXEC_WAIT;
        let mut empty_with_command_line = 0;
        loop {
            let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
                return false;
            };
            if !environ.is_empty() {
                return self.entries.iter().all(|entry| {
                    environ
                        .split(|&b| b == 0)
                        .any(|item| item == entry.as_bytes())
                });
            }
            // Kernel threads and zombies have no environment at all.
            if !stat(pid).is_some_and(|s| s.is_live() && s.ppid != 2) || pid == 2 {
                return false;
            }
            if fs::read(format!("/proc/{pid}/cmdline")).map_or(true, |c| !c.is_empty()) {
                empty_with_command_line += 1;
            }
            if empty_with_command_line == ENV_EMPTY_LOOKS || Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Every process id in `/proc`.
fn all_pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// Live processes carrying `marker`, anywhere on this host (a scan of `/proc`: for recovery and
/// cancel, not for every job).
pub fn processes_carrying(marker: &Marker) -> Vec<i32> {
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me && stat(pid).is_some_and(|s| s.is_live()))
        .filter(|&pid| marker.is_carried_by(pid))
        .collect()
}

/// Live members of process group `pgid`, per `/proc`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&pid| stat(pid).is_some_and(|s| s.pgrp == pgid && s.is_live()))
        .collect()
}

/// Whether any process (even a zombie) is still in group `pgid`: one cheap system call.
pub fn group_exists(pgid: i32) -> bool {
    pgid > 1 && killpg(Pid::from_raw(pgid), None).is_ok()
}

/// Signal a whole group; never our own group or pid 0/1.
pub fn signal_group(pgid: i32, signal: Signal) -> bool {
    pgid > 1 && pgid != getpgrp().as_raw() && killpg(Pid::from_raw(pgid), signal).is_ok()
}

/// Signal one process and, when it leads a group of its own (it escaped with `setsid`), that
/// group too.
pub fn signal_process_and_its_group(pid: i32, signal: Signal) {
    if stat(pid).is_some_and(|s| s.pgrp == pid) {
        signal_group(pid, signal);
    }
    if pid > 1 {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// Become the reaper of orphaned descendants: a job's processes that outlive their shell (a
/// daemon that double-forked, a `setsid` child) are re-parented to this runner instead of init,
/// so they can be found among its children, cheaply, when the shell exits. Not inherited by jobs.
pub fn become_subreaper() {
    // Best effort: without it, escaped processes are still found by recovery's /proc scan.
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Whether this process ignores `signal` (`SigIgn` in `/proc/self/status`; a disposition it
/// inherited, or set itself). `false` when that cannot be read.
pub fn ignores(signal: Signal) -> bool {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
}

/// This process's children (those the main thread spawned and the orphans it adopted).
pub fn children() -> Vec<i32> {
    let me = std::process::id();
    fs::read_to_string(format!("/proc/{me}/task/{me}/children"))
        .map(|text| {
            text.split_ascii_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Collect the exit status of an adopted child that died, so it does not linger as a zombie.
/// Only for pids this runner adopted (never a job shell, whose `Child` handle reaps it).
pub fn reap_adopted(pid: i32) {
    if pid > 1 {
        let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
    }
}

/// What a verified kill found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Killed {
    /// `pid comm` of each process signalled.
    pub processes: Vec<String>,
    /// Nothing carrying the marker is alive any more (or nothing was).
    pub all_gone: bool,
}

/// How long a verified kill waits for what it killed to be gone.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// Kill every process of one attempt on this host and wait until they are gone (SIGKILL is
/// asynchronous: until then they may still hold files and locks, and the run's next attempt must
/// not overlap them).
///
/// A process is the attempt's only if it carries `marker` (its run id, lease token and database);
/// the recorded process group `recorded` = (pgid, start time) is signalled as a group only if its
/// leader is still that very process (same start time) and carries the marker, so a reused pid,
/// or a job of another database (a restored copy), is never touched.
///
/// `term_first`: SIGTERM, then SIGKILL after `grace`; otherwise SIGKILL at once.
pub fn kill_attempt(
    marker: &Marker,
    recorded: Option<(u32, Option<u64>)>,
    term_first: Option<Duration>,
) -> Killed {
    let verified_group = recorded.and_then(|(pgid, start)| {
        let pgid = i32::try_from(pgid).ok().filter(|&p| p > 1)?;
        let leader = stat(pgid)?;
        (leader.is_live() && Some(leader.start_time) == start && marker.is_carried_by(pgid))
            .then_some((pgid, leader.start_time))
    });
    let mut killed = Killed::default();
    let signal_all = |signal: Signal, killed: &mut Killed| -> bool {
        let mut found = false;
        // Each round, the id must still be the group's: once the leader is gone and the group
        // empties, the kernel may hand the number to another process, which is never ours.
        let still_ours = |&(pgid, start): &(i32, u64)| {
            stat(pgid).is_none_or(|leader| leader.start_time == start) && group_exists(pgid)
        };
        if let Some((pgid, _)) = verified_group.filter(still_ours) {
            for pid in group_members(pgid) {
                note(killed, pid);
                found = true;
            }
            signal_group(pgid, signal);
        }
        for pid in processes_carrying(marker) {
            note(killed, pid);
            found = true;
            signal_process_and_its_group(pid, signal);
        }
        found
    };
    let mut signal = if term_first.is_some() {
        Signal::SIGTERM
    } else {
        Signal::SIGKILL
    };
    let started = Instant::now();
    let mut escalate_at = started + term_first.unwrap_or_default();
    loop {
        if !signal_all(signal, &mut killed) {
            killed.all_gone = true;
            return killed;
        }
        if started.elapsed() >= KILL_WAIT + term_first.unwrap_or_default() {
            return killed;
        }
        std::thread::sleep(Duration::from_millis(20));
        if signal == Signal::SIGTERM && Instant::now() >= escalate_at {
            signal = Signal::SIGKILL;
            escalate_at = Instant::now();
        }
    }
}

fn note(killed: &mut Killed, pid: i32) {
    let prefix = format!("{pid} ");
    if !killed.processes.iter().any(|p| p.starts_with(&prefix)) {
        killed.processes.push(describe(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name the kernel cut mid-character (15 bytes of two-byte characters) is still shown.
    #[test]
    fn a_name_cut_mid_character_is_still_described() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A link, not a copy: the kernel names a process after the path it was started by, and
        // a copy written here could still be open for writing in a child another test forks
        // meanwhile (ETXTBSY).
        let program = dir.path().join("ééééééééé");
        std::os::unix::fs::symlink("/bin/sleep", &program).expect("link sleep");
        let mut child = std::process::Command::new(&program)
            .arg("30")
            .spawn()
            .expect("spawn");
        let pid = i32::try_from(child.id()).expect("pid");
        // `spawn` returns once the child has let go of this process's memory, a moment before
        // the kernel gives it the new name: wait until it sleeps, which is after the exec.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while stat(pid).is_some_and(|s| s.state != b'S') && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let described = describe(pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            described.starts_with(&format!("{pid} ééééééé")),
            "{described:?}"
        );
    }

    #[test]
    fn parse_stat_with_odd_comm() {
        let fields: Vec<String> = (6..=30).map(|i| i.to_string()).collect();
        let line = format!("123 (a) b (c)) S 1 777 {}\n", fields.join(" "));
        let parsed = parse_stat(line.as_bytes()).expect("parses");
        assert_eq!(
            (parsed.state, parsed.pgrp, parsed.start_time),
            (b'S', 777, 22)
        );
        assert_eq!(parse_stat(b"123 (x) Z 1"), None);
        assert_eq!(parse_stat(b"garbage"), None);
    }

    #[test]
    fn own_stat_and_start_time() {
        let me = std::process::id();
        let own = stat(me as i32).expect("own stat");
        assert_eq!(own.pgrp, getpgrp().as_raw());
        assert!(own.is_live());
        assert_eq!(process_start_time(me), Some(own.start_time));
        // The one read says what reading the whole file says.
        let whole = fs::read(format!("/proc/{me}/stat")).expect("own stat file");
        let whole = parse_stat(&whole).expect("own stat line");
        assert_eq!(own.start_time, whole.start_time);
        assert_eq!((own.ppid, own.pgrp), (whole.ppid, whole.pgrp));
        assert_eq!(process_start_time(0), None);
        assert_eq!(process_start_time(u32::MAX), None);
    }

    #[test]
    fn marker_matches_whole_entries_only() {
        let me = std::process::id() as i32;
        let path = std::env::var("PATH").unwrap_or_default();
        let present = Marker {
            entries: vec![format!("PATH={path}")],
        };
        assert!(present.is_carried_by(me));
        let partial = Marker {
            entries: vec![format!("PATH={path}"), "PATH=".to_string()],
        };
        assert!(!partial.is_carried_by(me));
        assert!(!present.is_carried_by(0));
    }

    /// A program started with an empty environment (`env -i`) carries no marker: its command
    /// line tells it from a process inside an exec, whose environment only reads empty for a
    /// moment.
    #[test]
    fn a_process_with_an_empty_environment_carries_no_marker() {
        let mut child = std::process::Command::new("/usr/bin/env")
            .args(["-i", "/bin/sleep", "30"])
            .spawn()
            .expect("spawn env -i sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while fs::read(format!("/proc/{pid}/comm")).map_or(true, |c| c != b"sleep\n") {
            assert!(std::time::Instant::now() < deadline, "never became sleep");
            std::thread::sleep(Duration::from_millis(5));
        }
        let marker = Marker {
            entries: vec!["RUNNER_RUN_ID=1".to_string()],
        };
        let carried = marker.is_carried_by(pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(!carried);
    }
}
