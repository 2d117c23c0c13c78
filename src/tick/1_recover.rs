//! Step 1: runs whose lease expired (their runner died or hung) are closed as `LEASE:EXPIRED`
//! and retried or made dead by their policy. Their processes on this host are killed first, and
//! the attempt is closed only once they are gone, so a run never has two attempts alive at once
//! here. Attempts left open under a run that moved on without them (cancelled while their
//! runner was gone) are stopped and closed the same way, and so are those of a run cancelled
//! while running whose runner, alive or not, did not stop its job in time. Those two kinds are
//! stopped together, with one kill grace for all: a tick's due runs wait for one grace, not for
//! one per job that ignores SIGTERM.
//!
//! Across hosts (several hosts sharing a PostgreSQL database), a host recovers another host's
//! expired lease too, so the run is retried; but it cannot stop processes there, so it leaves
//! the attempt open, and the owning host's next tick, finding an open attempt of its own whose run
//! moved on without it, kills what is left of it and closes it.
//!
//! A process is an attempt's only if it carries the attempt's marker (`attempt_marker`): its
//! recorded pid is signalled only while that pid still has its recorded start time, so a reused
//! pid, or a job started from another copy of the database, is never touched.

use anyhow::Result;

use super::record::{write_end, KILL_GRACE};
use super::{attempt_marker, runner_error, Tick};
use crate::clock::Clock;
use crate::model::{
    Actor, AfterFailure, AttemptFailure, AttemptHolder, AttemptResult, ErrorCode, Fenced,
    OrphanClose, OverdueStop,
};
use crate::process::procfs::{self, KillTarget, Killed};
use crate::store::Store;

/// Recovered per tick at most; the rest wait for the next tick (keeps the tick's writes short).
const RECOVER_BATCH: usize = 100;

pub fn recover_expired(tick: &mut Tick<'_>) -> Result<()> {
    let identity = tick.store.identity();
    let options = tick.options;
    let actor = &options.actor;
    let expired = tick
        .store
        .expired_leases(tick.clock.epoch(), RECOVER_BATCH)?;
    super::test_hook("recovering");
    let total = expired.len();
    for (done, lease) in expired.into_iter().enumerate() {
        let mut detail = format!(
            "lease expired at {} (its runner stopped heart-beating)",
            crate::display::utc_time(lease.lease_expires_at)
        );
        let elsewhere = lease.holder.as_ref().filter(|h| h.host != actor.host);
        if let Some(holder) = elsewhere {
            detail.push_str(&format!(
                "; its processes on {} are stopped by that host's next tick",
                holder.host
            ));
        }
        if let Some(holder) = lease.holder.as_ref().filter(|h| h.host == actor.host) {
            let former = tick.store.former_identity();
            let killed = kill_processes(&identity, former, &[holder], None).swap_remove(0);
            if !killed.all_gone {
                let error = anyhow::anyhow!(
                    "its processes would not die ({}); its attempt stays open until they do",
                    killed.processes.join(", ")
                );
                let context = format!("run {}: recovering attempt {}", lease.run_id, lease.attempt);
                runner_error(&mut tick.report.errors, context, &error);
                continue;
            }
            if !killed.processes.is_empty() {
                detail.push_str(&format!(
                    "; killed its leftover processes: {}",
                    killed.processes.join(", ")
                ));
            }
        }
        // One reading for the whole decision: when the attempt ended, and when it retries.
        let now = tick.clock.read();
        let then = AfterFailure::by_policy(&lease.retry, lease.attempt, now, tick.rng);
        let started_at = lease.holder.as_ref().map(|h| h.started_at);
        let result = AttemptResult {
            run_id: lease.run_id,
            attempt: lease.attempt,
            lease_token: lease.lease_token.clone(),
            finished_at: now.secs(),
            duration_ms: started_at.map_or(0, |s| (now.secs() - s).max(0) * 1000),
            failure: Some(AttemptFailure::new(ErrorCode::LeaseExpired, &detail, then)),
            exit_code: None,
            output: None,
            leftovers: Vec::new(),
            leftovers_killed: false,
            attempt_left_open: elsewhere.is_some(),
            lease_expired_at: Some(lease.lease_expires_at),
        };
        match write_end(tick, &lease.job_name, result) {
            Ok(Fenced::Applied) => tick.report.recovered += 1,
            Ok(Fenced::LeaseLost) => {}
            // Another process held the lock through the whole wait: nothing was written, and the
            // next write would wait as long. This run and the rest are left to the next tick's
            // recovery, and the tick goes on with its other steps.
            Err(e) if crate::exit::is_busy(&e) => {
                say_recovery_locked(tick, &e, lease.run_id, total - done);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Recovery's write of an expired run waited out another process's lock: one line says that
/// `left` runs wait for the next tick's recovery (the tick exits 5: busy, safe to retry).
fn say_recovery_locked(tick: &mut Tick<'_>, error: &anyhow::Error, run_id: i64, left: usize) {
    tick.report.recovery_locked = left;
    let runs = match left {
        1 => "1 run whose lease expired waits".to_string(),
        n => format!("{n} runs whose lease expired wait"),
    };
    crate::complain!(
        "runner: error: run {run_id}: recovering its expired lease: {error:#}; the database \
         stayed locked by another process: {runs} for the next tick's recovery"
    );
}

/// Why step 1 stops an attempt's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// Its run was cancelled while running, and the tick holding it did not stop its job in
    /// time (by its lease's expiry and the kill grace: that tick died or hung).
    OverdueStop,
    /// Its run moved on without it (cancelled while its runner was gone, recovered by another
    /// host, or its processes would not die before), and its runner is gone.
    Orphaned,
}

/// The attempts of this host that step 1 stops, each once: those of `overdue` runs here,
/// whether or not their runner is alive, then the `orphaned` ones whose runner is not
/// (`alive`): one whose runner is alive is left to that runner, which learns at its next
/// heartbeat that it lost the lease, stops the job and closes the attempt itself. An attempt of
/// an overdue run is orphaned too once its runner is gone: it is stopped as overdue.
fn left_behind(
    host: &str,
    overdue: &[OverdueStop],
    orphaned: Vec<AttemptHolder>,
    alive: impl Fn(&AttemptHolder) -> bool,
) -> Vec<(AttemptHolder, Left)> {
    let mut left: Vec<(AttemptHolder, Left)> = overdue
        .iter()
        .flat_map(|run| &run.holders)
        .filter(|holder| holder.host == host)
        .map(|holder| (holder.clone(), Left::OverdueStop))
        .collect();
    for holder in orphaned {
        let listed = left
            .iter()
            .any(|(h, _)| (h.run_id, h.attempt) == (holder.run_id, holder.attempt));
        if !listed && !alive(&holder) {
            left.push((holder, Left::Orphaned));
        }
    }
    left
}

/// Attempts of this host left behind: those of runs cancelled while running whose job the tick
/// holding them did not stop in time (`overdue`), and those left open under a run that no
/// longer holds them (`orphaned`). Their processes are stopped together, as `cancel` stops
/// those of a runner that is gone (SIGTERM to all, one kill grace, SIGKILL to what is left), and
/// each attempt is then closed, so an overdue run's `forbid` schedule's next run never starts
/// beside its job. An overdue run's attempts on other hosts are left to those hosts' ticks (as
/// for an expired lease), and no longer hold the schedule back; one here whose processes would
/// not die still does.
pub fn stop_left_behind(tick: &mut Tick<'_>, overdue: bool, orphaned: bool) -> Result<()> {
    let actor = &tick.options.actor;
    let overdue = if overdue {
        tick.store
            .overdue_stops(tick.clock.epoch(), RECOVER_BATCH)?
    } else {
        Vec::new()
    };
    let orphaned = if orphaned {
        tick.store.orphaned_attempts(&actor.host, RECOVER_BATCH)?
    } else {
        Vec::new()
    };
    let left = left_behind(&actor.host, &overdue, orphaned, runner_alive);
    let holders: Vec<&AttemptHolder> = left.iter().map(|(holder, _)| holder).collect();
    let stopped = stop_attempts(tick.store, tick.clock, actor, &holders)?;
    for ((holder, why), stopped) in left.iter().zip(stopped) {
        let Stopped::StillAlive(processes) = stopped else {
            continue;
        };
        let error = match why {
            Left::OverdueStop => anyhow::anyhow!(
                "its run was cancelled, but its processes would not die ({}); its attempt \
                 stays open until they do",
                processes.join(", ")
            ),
            Left::Orphaned => anyhow::anyhow!(
                "its processes would not die ({}); its attempt stays open until they do",
                processes.join(", ")
            ),
        };
        let context = format!("run {}: stopping attempt {}", holder.run_id, holder.attempt);
        runner_error(&mut tick.report.errors, context, &error);
    }
    for run in &overdue {
        tick.store.release_stop(run.run_id, &actor.host)?;
    }
    Ok(())
}

/// What became of an attempt whose runner is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Its processes are gone (these were killed) and the attempt is closed.
    Closed(Vec<String>),
    /// These would not die: the attempt stays open, and a later tick tries again.
    StillAlive(Vec<String>),
}

/// Whether the runner that holds an attempt is still alive (same pid, same start time).
pub fn runner_alive(holder: &AttemptHolder) -> bool {
    procfs::is_alive(holder.runner_pid, holder.runner_start_time)
}

/// Stop the processes of an attempt of this host whose runner is gone, or did not stop them in
/// time, and close it: [`stop_attempts`] of one. Used by `cancel`.
pub fn stop_attempt(
    store: &mut dyn Store,
    clock: &Clock,
    actor: &Actor,
    holder: &AttemptHolder,
) -> Result<Stopped> {
    Ok(stop_attempts(store, clock, actor, &[holder])?.swap_remove(0))
}

/// Stop the processes of attempts of this host whose runner is gone, or did not stop them in
/// time, all together (SIGTERM, SIGKILL after one grace for all) and close each one of which
/// none is left: as cancelled when its run was, else as `LEASE:EXPIRED` (another host recovered
/// the run). One `Stopped` per attempt, in their order.
pub fn stop_attempts(
    store: &mut dyn Store,
    clock: &Clock,
    actor: &Actor,
    holders: &[&AttemptHolder],
) -> Result<Vec<Stopped>> {
    let killed = kill_processes(
        &store.identity(),
        store.former_identity(),
        holders,
        Some(KILL_GRACE),
    );
    holders
        .iter()
        .zip(killed)
        .map(|(holder, killed)| close_stopped(store, clock, actor, holder, killed))
        .collect()
}

/// Close an attempt whose processes were stopped, unless some would not die.
fn close_stopped(
    store: &mut dyn Store,
    clock: &Clock,
    actor: &Actor,
    holder: &AttemptHolder,
    killed: Killed,
) -> Result<Stopped> {
    if !killed.all_gone {
        return Ok(Stopped::StillAlive(killed.processes));
    }
    let stopped = if killed.processes.is_empty() {
        "no process of it was left".to_string()
    } else {
        format!("stopped its processes: {}", killed.processes.join(", "))
    };
    let cancelled = store
        .run(holder.run_id)?
        .is_none_or(|run| run.status == crate::model::RunStatus::Cancelled);
    let close = if cancelled {
        let runner = if runner_alive(holder) {
            "had not stopped its job in time"
        } else {
            "was gone"
        };
        let detail = format!(
            "the run was cancelled while its runner (pid {}) {runner}; {stopped}",
            holder.runner_pid
        );
        OrphanClose::cancelled(holder.attempt, &detail)
    } else {
        let detail = format!(
            "its lease expired and another host recovered the run while its runner (pid {}) was gone; {stopped}",
            holder.runner_pid
        );
        OrphanClose::recovered_elsewhere(holder.attempt, &detail)
    };
    store.close_orphaned_attempt(holder, clock.epoch(), &close, actor)?;
    Ok(Stopped::Closed(killed.processes))
}

/// Kill every process of each attempt on this host (`term_grace`: SIGTERM first, then SIGKILL
/// after it; `None`: SIGKILL at once) and wait until they are gone. One `Killed` per holder.
fn kill_processes(
    identity: &str,
    former: Option<String>,
    holders: &[&AttemptHolder],
    term_grace: Option<std::time::Duration>,
) -> Vec<Killed> {
    // A job an older runner started carries the database's former identity.
    let former = former.filter(|f| f != identity);
    let targets: Vec<KillTarget> = holders
        .iter()
        .map(|holder| KillTarget {
            marker: attempt_marker(identity, holder.run_id, &holder.lease_token),
            former: former
                .as_deref()
                .map(|former| attempt_marker(former, holder.run_id, &holder.lease_token)),
            recorded: holder.child_pid.map(|pid| (pid, holder.child_start_time)),
        })
        .collect();
    procfs::kill_attempts(&targets, term_grace)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overdue runs' attempts here, whatever their runner, then orphaned ones whose runner is
    /// gone, each once: an overdue run's attempt is orphaned too once its runner is gone.
    #[test]
    fn left_behind_lists_each_attempt_here_once() {
        let holder = AttemptHolder::fixture;
        let overdue = [OverdueStop {
            run_id: 7,
            stopping_by: 100,
            holders: vec![holder(7, 1, "here"), holder(7, 2, "far")],
        }];
        let orphaned = vec![
            holder(7, 1, "here"),
            holder(8, 1, "here"),
            holder(9, 1, "here"),
        ];
        let alive = |h: &AttemptHolder| h.run_id == 9;
        let left: Vec<(i64, u32, Left)> = left_behind("here", &overdue, orphaned, alive)
            .into_iter()
            .map(|(h, why)| (h.run_id, h.attempt, why))
            .collect();
        assert_eq!(
            left,
            [(7, 1, Left::OverdueStop), (8, 1, Left::Orphaned)],
            "run 7's attempt on far is that host's; run 9's runner stops its job itself"
        );
    }
}
