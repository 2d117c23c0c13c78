//! What `/proc` says about processes: start times (so a reused pid is never signalled), process
//! groups, the environment marker every job process carries, and the children this runner
//! adopted as a subreaper. Linux only, like the rest of the runner.

use std::collections::HashSet;
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
        initial_environment(pid).is_some_and(|environ| self.is_in(&environ))
    }

    /// Whether `environ` (`/proc/PID/environ`: entries ended by NUL) holds every entry.
    fn is_in(&self, environ: &[u8]) -> bool {
        self.entries.iter().all(|entry| {
            environ
                .split(|&b| b == 0)
                .any(|item| item == entry.as_bytes())
        })
    }
}

/// A process's initial environment; `None` when unreadable (gone, a zombie, another user's, a
/// kernel thread) or when it is empty.
fn initial_environment(pid: i32) -> Option<Vec<u8>> {
    // A process in the middle of an exec (a job's `setsid` becoming its daemon) shows an empty
    // environment, and an empty command line, until the kernel has set up the new program's:
    // look again, rather than take it for a stranger (a kill that missed it would close the
    // attempt with it alive). A program started with an empty environment (`env -i`) shows its
    // command line beside it, time after time; one such look proves nothing, as the exec may
    // have ended between the two reads, or the next begun.
    let deadline = Instant::now() + EXEC_WAIT;
    let mut empty_with_command_line = 0;
    loop {
        let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
        if !environ.is_empty() {
            return Some(environ);
        }
        // Kernel threads and zombies have no environment at all.
        if !stat(pid).is_some_and(|s| s.is_live() && s.ppid != 2) || pid == 2 {
            return None;
        }
        if fs::read(format!("/proc/{pid}/cmdline")).map_or(true, |c| !c.is_empty()) {
            empty_with_command_line += 1;
        }
        if empty_with_command_line == ENV_EMPTY_LOOKS || Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
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

/// A live process of this host, as one look at `/proc` saw it.
#[derive(Debug, Clone)]
struct Seen {
    pid: i32,
    stat: Stat,
    /// Its initial environment (`None`: unreadable).
    environ: Option<Vec<u8>>,
}

impl Seen {
    fn carries(&self, marker: &Marker) -> bool {
        self.environ
            .as_deref()
            .is_some_and(|environ| marker.is_in(environ))
    }
}

/// Every live process of this host but this runner, with its environment: one scan of `/proc`
/// (for recovery and cancel, not for every job), whatever the number of attempts looked for.
fn census() -> Vec<Seen> {
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = stat(pid).filter(Stat::is_live)?;
            Some(Seen {
                pid,
                stat,
                environ: initial_environment(pid),
            })
        })
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

/// One attempt whose processes a verified kill stops.
#[derive(Debug, Clone)]
pub struct KillTarget {
    /// What every process of it carries (its run id, lease token and database).
    pub marker: Marker,
    /// What they carry instead when an older runner started them (the database's former
    /// identity): looked for when nothing carries `marker` as the kill begins.
    pub former: Option<Marker>,
    /// Its recorded process group: the pgid and its leader's start time.
    pub recorded: Option<(u32, Option<u64>)>,
}

/// What a kill of one target signals, as decided from the first look at `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Aim<'a> {
    marker: &'a Marker,
    /// The recorded group (pgid, its leader's start time), if its leader is still that very
    /// process and carries the marker.
    group: Option<(i32, u64)>,
}

/// Which marker and which group are `target`'s: the former marker only when no process in
/// `seen` carries today's; the recorded group only when its leader is still the recorded
/// process (same start time) and carries the marker, so a reused pid, or a job of another
/// database (a restored copy), is never touched.
fn aim<'a>(target: &'a KillTarget, seen: &[Seen]) -> Aim<'a> {
    let marker = match &target.former {
        Some(former) if !seen.iter().any(|s| s.carries(&target.marker)) => former,
        _ => &target.marker,
    };
    let group = target.recorded.and_then(|(pgid, start)| {
        let pgid = i32::try_from(pgid).ok().filter(|&p| p > 1)?;
        let leader = seen.iter().find(|s| s.pid == pgid)?;
        (Some(leader.stat.start_time) == start && leader.carries(marker))
            .then_some((pgid, leader.stat.start_time))
    });
    Aim { marker, group }
}

/// The processes of an attempt in `seen`: the members of its group `group` (when the group is
/// still the verified one), and those carrying `marker`, wherever they are.
fn belonging(marker: &Marker, group: Option<i32>, seen: &[Seen]) -> (Vec<i32>, Vec<i32>) {
    let members = group.map_or_else(Vec::new, |pgid| {
        seen.iter()
            .filter(|s| s.stat.pgrp == pgid)
            .map(|s| s.pid)
            .collect()
    });
    let carriers = seen
        .iter()
        .filter(|s| s.carries(marker))
        .map(|s| s.pid)
        .collect();
    (members, carriers)
}

/// A process for good: its pid and its start time (a reused pid is another process).
type Process = (i32, u64);

/// The processes of an attempt in `seen` that SIGTERM is sent to this round: those that
/// [`belonging`] found (`members` of its group, `carriers` of its marker), and the members of a
/// group a carrier leads (it escaped with `setsid`); but none in `termed`, the processes already
/// sent one. Each process gets one SIGTERM, when first seen (one the job forks during the grace
/// too), and its whole grace to act on it: a TERM trap is run once.
fn to_terminate(
    (members, carriers): (&[i32], &[i32]),
    seen: &[Seen],
    termed: &HashSet<Process>,
) -> Vec<Process> {
    let leaders: Vec<i32> = seen
        .iter()
        .filter(|s| s.stat.pgrp == s.pid && carriers.contains(&s.pid))
        .map(|s| s.pid)
        .collect();
    seen.iter()
        .filter(|s| {
            members.contains(&s.pid) || carriers.contains(&s.pid) || leaders.contains(&s.stat.pgrp)
        })
        .map(|s| (s.pid, s.stat.start_time))
        .filter(|process| !termed.contains(process))
        .collect()
}

/// Kill every process of each attempt of `targets` on this host and wait until they are gone
/// (SIGKILL is asynchronous: until then they may still hold files and locks, and a run's next
/// attempt must not overlap them). One `Killed` per target, in their order.
///
/// `term_first`: SIGTERM once to each of every target's processes (those that appear during the
/// grace get theirs when first seen), one grace for all of them (it ends as soon as all are
/// gone), then SIGKILL to what is left, again each round until it is gone; otherwise SIGKILL at
/// once. The targets are stopped together, not one after another: N jobs that ignore SIGTERM
/// take one grace, not N.
pub fn kill_attempts(targets: &[KillTarget], term_first: Option<Duration>) -> Vec<Killed> {
    if targets.is_empty() {
        return Vec::new();
    }
    let mut seen = census();
    let aims: Vec<Aim> = targets.iter().map(|target| aim(target, &seen)).collect();
    let mut killed = vec![Killed::default(); targets.len()];
    let grace = term_first.unwrap_or_default();
    let mut terminating = term_first.is_some();
    let mut termed = HashSet::new();
    let started = Instant::now();
    loop {
        for (aim, killed) in aims.iter().zip(killed.iter_mut()) {
            if killed.all_gone {
                continue;
            }
            let group = verified_group(aim);
            let (members, carriers) = belonging(aim.marker, group, &seen);
            for &pid in members.iter().chain(&carriers) {
                note(killed, pid);
            }
            if terminating {
                for process in to_terminate((&members, &carriers), &seen, &termed) {
                    terminate(process);
                    termed.insert(process);
                }
            } else {
                kill_all(group, &carriers);
            }
            killed.all_gone = members.is_empty() && carriers.is_empty();
        }
        if killed.iter().all(|k| k.all_gone) || started.elapsed() >= KILL_WAIT + grace {
            return killed;
        }
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() >= grace {
            terminating = false;
        }
        seen = census();
    }
}

/// `aim`'s group, if the id is still the group's: once the leader is gone and the group
/// empties, the kernel may hand the number to another process, which is never ours.
fn verified_group(aim: &Aim<'_>) -> Option<i32> {
    aim.group
        .filter(|&(pgid, start)| {
            stat(pgid).is_none_or(|leader| leader.start_time == start) && group_exists(pgid)
        })
        .map(|(pgid, _)| pgid)
}

/// SIGTERM to one process, unless its pid is another process's by now. One by one, never
/// through the group: a group signal would reach again those already sent one, and one forked
/// since the census, which the next round would send another.
fn terminate((pid, start): Process) {
    if pid > 1 && stat(pid).is_some_and(|s| s.start_time == start) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}

/// SIGKILL to the group and to each carrier (and the group it leads): repeated each round until
/// nothing is left, which is harmless, and reaches what was forked meanwhile.
fn kill_all(group: Option<i32>, carriers: &[i32]) {
    if let Some(pgid) = group {
        signal_group(pgid, Signal::SIGKILL);
    }
    for &pid in carriers {
        signal_process_and_its_group(pid, Signal::SIGKILL);
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

    /// A process as a census sees it, started at `start_time` in group `pgrp`, with `environ`.
    fn seen(pid: i32, pgrp: i32, start_time: u64, environ: &[&str]) -> Seen {
        let mut bytes = Vec::new();
        for entry in environ {
            bytes.extend_from_slice(entry.as_bytes());
            bytes.push(0);
        }
        Seen {
            pid,
            stat: Stat {
                state: b'S',
                ppid: 1,
                pgrp,
                start_time,
            },
            environ: Some(bytes),
        }
    }

    fn marker(token: &str) -> Marker {
        Marker {
            entries: vec!["RUNNER_RUN_ID=7".to_string(), format!("T={token}")],
        }
    }

    /// The former marker is looked for only when nothing carries today's; the recorded group
    /// only while its leader is that very process and carries the marker aimed at.
    #[test]
    fn a_kill_aims_at_todays_marker_first_and_a_verified_group_only() {
        let target = |recorded| KillTarget {
            marker: marker("now"),
            former: Some(marker("old")),
            recorded,
        };
        let today = [
            seen(40, 40, 100, &["RUNNER_RUN_ID=7", "T=now"]),
            seen(41, 40, 101, &["RUNNER_RUN_ID=7", "T=now"]),
            seen(50, 50, 200, &["RUNNER_RUN_ID=7", "T=old"]),
        ];
        let recorded = target(Some((40, Some(100))));
        let aimed = aim(&recorded, &today);
        assert_eq!(aimed.marker, &marker("now"));
        assert_eq!(aimed.group, Some((40, 100)));
        assert_eq!(
            belonging(aimed.marker, Some(40), &today),
            (vec![40, 41], vec![40, 41])
        );
        // A reused pid (another start time) is no group of the attempt's.
        let reused = target(Some((40, Some(99))));
        assert_eq!(aim(&reused, &today).group, None);
        // Nothing carries today's marker: the former one, and its group.
        let older = &today[2..];
        let former = target(Some((50, Some(200))));
        let aimed = aim(&former, older);
        assert_eq!(aimed.marker, &marker("old"));
        assert_eq!(aimed.group, Some((50, 200)));
        // A leader that carries another attempt's marker is not the attempt's.
        let stranger = [seen(60, 60, 300, &["RUNNER_RUN_ID=7", "T=other"])];
        let elsewhere = target(Some((60, Some(300))));
        let aimed = aim(&elsewhere, &stranger);
        assert_eq!(aimed.group, None);
        assert_eq!(belonging(aimed.marker, None, &stranger), (vec![], vec![]));
    }

    /// SIGTERM goes once to each process of an attempt: its group's members, the processes
    /// carrying its marker and the members of a group one of those leads, each when first seen;
    /// a later round picks only those that appeared since (a reused pid is a new process), never
    /// a stranger.
    #[test]
    fn each_process_of_an_attempt_is_sent_sigterm_once() {
        let ours = ["RUNNER_RUN_ID=7", "T=now"];
        let first = [
            seen(40, 40, 100, &ours),
            // In the group, its marker cleared (`env -i`).
            seen(41, 40, 101, &[]),
            // Escaped with `setsid`, and a member of its group that cleared its marker.
            seen(50, 50, 200, &ours),
            seen(51, 50, 201, &[]),
            // Strangers: another attempt's, and one in a group a stranger leads.
            seen(60, 60, 300, &["RUNNER_RUN_ID=7", "T=other"]),
            seen(61, 60, 301, &[]),
        ];
        // As a round of the kill decides it: what belongs to the attempt, then whom to send one.
        let to_terminate = |group: Option<i32>, seen: &[Seen], termed: &HashSet<Process>| {
            let (members, carriers) = belonging(&marker("now"), group, seen);
            to_terminate((&members, &carriers), seen, termed)
        };
        let mut termed = HashSet::new();
        let now = to_terminate(Some(40), &first, &termed);
        assert_eq!(now, [(40, 100), (41, 101), (50, 200), (51, 201)]);
        termed.extend(now);
        assert_eq!(to_terminate(Some(40), &first, &termed), []);
        // Forked during the grace (by a trap), and 41's pid given to a new process of the group.
        let later = [
            seen(40, 40, 100, &ours),
            seen(41, 40, 150, &ours),
            seen(42, 40, 151, &ours),
            seen(50, 50, 200, &ours),
            seen(52, 50, 152, &[]),
            seen(61, 60, 301, &[]),
        ];
        assert_eq!(
            to_terminate(Some(40), &later, &termed),
            [(41, 150), (42, 151), (52, 152)]
        );
        // A member of the recorded group whose leader is gone is the attempt's only while the
        // group is still the verified one.
        let leaderless = [seen(41, 40, 101, &[]), seen(50, 50, 200, &ours)];
        let none = HashSet::new();
        assert_eq!(
            to_terminate(Some(40), &leaderless, &none),
            [(41, 101), (50, 200)]
        );
        assert_eq!(to_terminate(None, &leaderless, &none), [(50, 200)]);
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
