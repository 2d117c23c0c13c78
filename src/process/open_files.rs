//! Room under the open-file limit for the jobs' pipes.
//!
//! A job held by a tick takes three descriptors (its gate and its two output pipes), and three
//! more while it is being spawned. A tick started with a soft limit on open files (`ulimit -n`)
//! too low for its `--concurrency` would see its jobs fail to start with `SPAWN:OTHER`, each
//! failure an attempt spent, though nothing is wrong with the job. So a tick raises its own soft
//! limit as far as its jobs need, up to the hard limit (any process may), and gives each job's
//! shell the limit the tick was started with back while the shell waits at its gate: a job sees
//! the limits its crontab line gave it, not the tick's.

use std::sync::OnceLock;

use rustix::process::{getrlimit, prlimit, setrlimit, Pid, Resource, Rlimit};

/// The limit this process was started with, once it raised its own: what jobs get back.
static STARTED_WITH: OnceLock<Rlimit> = OnceLock::new();

/// Make sure at least `needed` files can be open at once, raising the soft limit up to the hard
/// limit if it is lower. `Err` with the soft limit now in force when the hard limit is lower.
pub fn make_room_for(needed: u64) -> Result<(), u64> {
    let started_with = getrlimit(Resource::Nofile);
    let Some(soft) = started_with.current.filter(|soft| *soft < needed) else {
        return Ok(()); // unlimited, or enough
    };
    let raised = started_with.maximum.map_or(needed, |hard| hard.min(needed));
    if raised <= soft {
        return Err(soft);
    }
    let limit = Rlimit {
        current: Some(raised),
        maximum: started_with.maximum,
    };
    if setrlimit(Resource::Nofile, limit).is_err() {
        return Err(soft);
    }
    // What jobs get back: the limit before the first raise.
    let _ = STARTED_WITH.set(started_with);
    if raised < needed {
        Err(raised)
    } else {
        Ok(())
    }
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
