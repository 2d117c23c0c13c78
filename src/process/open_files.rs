//! Room under the open-file limit for the jobs' pipes.
//!
//! A job held by a tick takes three descriptors (its gate and its two output pipes), and more
//! while it is being spawned. A tick started with a soft limit on open files (`ulimit -n`) too
//! low for its `--concurrency` would see its jobs fail to start, though nothing is wrong with
//! them (their claims given back, and no more runs claimed). So a tick raises its own soft limit as
//! far as its jobs need, up to the hard limit (any process may), and gives each job's shell the
//! limit the tick was started with back while the shell waits at its gate: a job sees the limits
//! its crontab line gave it, not the tick's. Where the hard limit holds less, the tick counts the
//! descriptors it has open (the database's, the standard streams, the wake-up's, whatever it
//! inherited) to know how many jobs the rest can hold.

use std::sync::OnceLock;

use rustix::process::{getrlimit, prlimit, setrlimit, Pid, Resource, Rlimit};

/// The limit this process was started with, once it raised its own: what jobs get back.
static STARTED_WITH: OnceLock<Rlimit> = OnceLock::new();

/// Raise the soft limit on open files toward `wanted`, up to the hard limit, if it is lower.
/// The soft limit then in force; `None` when there is none.
pub fn raise_toward(wanted: u64) -> Option<u64> {
    let started_with = getrlimit(Resource::Nofile);
    let soft = started_with.current?;
    if soft >= wanted {
        return Some(soft);
    }
    let raised = started_with.maximum.map_or(wanted, |hard| hard.min(wanted));
    if raised <= soft {
        return Some(soft);
    }
    let limit = Rlimit {
        current: Some(raised),
        maximum: started_with.maximum,
    };
    if setrlimit(Resource::Nofile, limit).is_err() {
        return Some(soft);
    }
    // What jobs get back: the limit before the first raise.
    let _ = STARTED_WITH.set(started_with);
    Some(raised)
}

/// How many descriptors this process has open with a number below `limit`: the room they take
/// under it. (One inherited above it takes none: a new descriptor gets the lowest free number,
/// and fails only when none below the limit is free.)
pub fn open_below(limit: u64) -> u64 {
    match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => {
            let below = entries
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
                .filter(|fd| *fd < limit)
                .count();
            // The directory's own descriptor is among them (it got a free number, so below the
            // limit), and is closed by now.
            u64::try_from(below).unwrap_or(u64::MAX).saturating_sub(1)
        }
        // Not one free below the limit: every number there is taken.
        Err(e) if is_out_of_files(&e) => limit,
        // No `/proc`: ask each number below the limit, at most `PROBE_AT_MOST` of them (a
        // system call each: milliseconds, once per tick with work, and only where `/proc` is
        // missing).
        Err(_) => (0..limit.min(PROBE_AT_MOST))
            .filter_map(|fd| i32::try_from(fd).ok())
            // An unused number is EBADF.
            .filter(|&fd| nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_ok())
            .count() as u64,
    }
}

/// The most descriptor numbers probed one by one where `/proc` cannot say.
const PROBE_AT_MOST: u64 = 65_536;

/// Whether `error` says this process (`EMFILE`) or the whole system (`ENFILE`) has no room for
/// another open file.
pub fn is_out_of_files(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error().map(nix::errno::Errno::from_raw),
        Some(nix::errno::Errno::EMFILE | nix::errno::Errno::ENFILE)
    )
}

/// Give the process `pid` (a job's shell at its gate) the open-file limit this process was
/// started with, if it raised its own.
pub fn give_back_to(pid: u32) {
    let (Some(limit), Some(pid)) = (
        STARTED_WITH.get(),
        i32::try_from(pid).ok().and_then(Pid::from_raw),
    ) else {
        return;
    };
    // Fails only if the shell is gone already; it then runs nothing.
    let _ = prlimit(Some(pid), Resource::Nofile, *limit);
}
