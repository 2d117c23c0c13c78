//! Step 1: runs whose lease expired (their runner died or hung) are closed as `LEASE:EXPIRED`
//! and retried or made dead by their policy. Their processes on this host are killed first, and
//! the attempt is closed only once they are gone, so a run never has two attempts alive at once
//! here. Attempts left open under a run that moved on without them (cancelled while their
//! runner was gone) are stopped and closed the same way, and so are those of a run cancelled
//! while running whose runner, alive or not, did not stop its job in time.
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
    OrphanClose,
};
use crate::process::procfs::{self, Killed};
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
            let killed = kill_processes(&identity, tick.store.former_identity(), holder, None);
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

/// Attempts of this host left open under a run that no longer holds them (cancelled while their
/// runner was gone, recovered by another host, or whose processes would not die before): stop
/// what is left of them, then close them. One whose runner is alive is left to that runner, which learns at its next
/// heartbeat that it lost the lease, stops the job and closes the attempt itself.
pub fn stop_orphaned_attempts(tick: &mut Tick<'_>) -> Result<()> {
    let actor = &tick.options.actor;
    for holder in tick.store.orphaned_attempts(&actor.host, RECOVER_BATCH)? {
        if runner_alive(&holder) {
            continue;
        }
        if let Stopped::StillAlive(processes) =
            stop_attempt(tick.store, tick.clock, actor, &holder)?
        {
            let error = anyhow::anyhow!(
                "its processes would not die ({}); its attempt stays open until they do",
                processes.join(", ")
            );
            let context = format!("run {}: stopping attempt {}", holder.run_id, holder.attempt);
            runner_error(&mut tick.report.errors, context, &error);
        }
    }
    Ok(())
}

/// Runs cancelled while running whose job the tick holding them did not stop in time (by their
/// lease's expiry and the kill grace: that tick died or hung): the processes of their open
/// attempts on this host (the current one, and an older one that another host's recovery left
/// open) are stopped as `cancel` stops those of a runner that is gone, whether or not the runner
/// is alive, and the attempts closed, so their `forbid` schedule's next run never starts beside
/// them. Their attempts on other hosts are left to those hosts' ticks (as for an expired lease),
/// and no longer hold the schedule back; one here whose processes would not die still does.
pub fn stop_overdue(tick: &mut Tick<'_>) -> Result<()> {
    let actor = &tick.options.actor;
    for overdue in tick
        .store
        .overdue_stops(tick.clock.epoch(), RECOVER_BATCH)?
    {
        for holder in overdue.holders.iter().filter(|h| h.host == actor.host) {
            if let Stopped::StillAlive(processes) =
                stop_attempt(tick.store, tick.clock, actor, holder)?
            {
                let error = anyhow::anyhow!(
                    "its run was cancelled, but its processes would not die ({}); its attempt \
                     stays open until they do",
                    processes.join(", ")
                );
                let context = format!("run {}: stopping attempt {}", holder.run_id, holder.attempt);
                runner_error(&mut tick.report.errors, context, &error);
            }
        }
        tick.store.release_stop(overdue.run_id, &actor.host)?;
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
/// time (SIGTERM, SIGKILL after the grace) and, once none is left, close the attempt: as
/// cancelled when its run was, else as `LEASE:EXPIRED` (another host recovered the run). Used by
/// `cancel`, by the tick's sweep of orphaned attempts and by `stop_overdue`.
pub fn stop_attempt(
    store: &mut dyn Store,
    clock: &Clock,
    actor: &Actor,
    holder: &AttemptHolder,
) -> Result<Stopped> {
    let killed = kill_processes(
        &store.identity(),
        store.former_identity(),
        holder,
        Some(KILL_GRACE),
    );
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

/// Kill every process of the attempt on this host (`term_grace`: SIGTERM first, then SIGKILL
/// after it; `None`: SIGKILL at once) and wait until they are gone.
fn kill_processes(
    identity: &str,
    former: Option<String>,
    holder: &AttemptHolder,
    term_grace: Option<std::time::Duration>,
) -> Killed {
    let recorded = holder.child_pid.map(|pid| (pid, holder.child_start_time));
    let kill = |identity: &str| {
        let marker = attempt_marker(identity, holder.run_id, &holder.lease_token);
        procfs::kill_attempt(&marker, recorded, term_grace)
    };
    let killed = kill(identity);
    // Nothing under today's marker: a job an older runner started carries the former one.
    match former.filter(|f| f != identity) {
        Some(former) if killed.all_gone && killed.processes.is_empty() => kill(&former),
        _ => killed,
    }
}
