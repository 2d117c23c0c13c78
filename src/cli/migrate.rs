//! `runner migrate --to URL|PATH [--history]`: move every schedule, its cursor exactly, and the
//! runs that must not be lost to another database (from a single-host SQLite file to
//! PostgreSQL, typically), so that no instant runs twice and none is lost.
//!
//! The order is what makes it safe: the source's write lock is held throughout (no tick can
//! materialise or claim meanwhile), the target is written and committed in one transaction, and
//! only then are the source's schedules paused and its moved pending runs cancelled, in the
//! source transaction, which commits last.

use std::cell::Cell;

use anyhow::Result;

use super::{actor, Ctx};
use crate::display::{count, escape_line};
use crate::exit::{self, Failure};
use crate::model::{moved_detail, NewEvent, RunStatus};
use crate::store::{self, Imported, Location, MigratedOut, MigrationCounts, OpenMode, RunFilter};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The database to move to: a postgres:// URL, or a SQLite file path. Created (or its schema
    /// brought up to date) like `runner init` does. It must hold no schedule of the same names.
    #[arg(long, value_name = "URL|PATH", value_parser = super::DatabaseName,
          value_hint = clap::ValueHint::FilePath)]
    pub to: String,
    /// Move the finished runs too, with their attempts and events. Without it only pending runs
    /// move (with their attempts and events); finished ones stay, and each schedule brings its
    /// last success and last run from them (for `metrics`), as it always brings its dead-runs
    /// counter.
    #[arg(long)]
    pub history: bool,
}

pub fn run(args: Args, ctx: &Ctx) -> Result<()> {
    // Absolute: the source keeps it in each moved run's detail, and the advice names it for cron.
    let to = Location::parse(&args.to).absolute();
    if to == ctx.location {
        return Err(same_database(&ctx.location.to_string()));
    }
    let mut source = ctx.open(OpenMode::MustExist)?;
    // Before creating anything: a running run means a tick is at work (checked again, under
    // the lock, by `migrate_out`).
    let running = source.history(&RunFilter {
        status: Some(RunStatus::Running),
        limit: 1000,
        ..RunFilter::default()
    })?;
    if !running.is_empty() {
        // A lease that has expired: its tick died (`kill -9`, a reboot), and with cron stopped
        // no tick will recover the run, so waiting for it would never end.
        let now = ctx.clock.epoch();
        let (orphaned, held): (Vec<_>, Vec<_>) = running
            .iter()
            .partition(|r| r.lease_expires_at.is_some_and(|expiry| expiry < now));
        if held.is_empty() {
            let ids: Vec<i64> = orphaned.iter().map(|r| r.id).collect();
            return Err(orphaned_runs(&source.describe(), &ids));
        }
        let ids: Vec<i64> = running.iter().map(|r| r.id).collect();
        return Err(tick_active(&source.describe(), &ids));
    }
    let mut target = store::open(&to, OpenMode::CreateIfMissing).map_err(about_the_target)?;
    if target.identity() == source.identity() {
        return Err(same_database(&source.describe()));
    }
    let (from, shown_to) = (source.describe(), target.describe());
    let now = ctx.clock.epoch();
    let detail = moved_detail(&shown_to);
    // Set once the target committed: from then on a failure leaves both databases holding the
    // schedules, and the user must hear exactly that.
    let written = Cell::new(false);
    let outcome = source.migrate_out(
        args.history,
        now,
        &actor(None),
        &detail,
        &|attempt| NewEvent::moved(attempt, &shown_to),
        &mut |migration| match target
            .import_migration(migration)
            .map_err(|e| about_the_target(e.into()))?
        {
            Imported::Done => {
                written.set(true);
                if crate::tick::test_fault("migrated") {
                    anyhow::bail!("RUNNER_TEST_HOOK=migrated:fail");
                }
                Ok(())
            }
            Imported::NamesTaken(names) => Err(Failure::usage(format!(
                "{shown_to} already has schedules named {}; nothing was moved or changed. The \
                 target must hold none of the schedules moved: remove or rename them there, or \
                 move to another database",
                names
                    .iter()
                    .map(|n| escape_line(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        },
    );
    let counts = match outcome {
        Ok(MigratedOut::Done(counts)) => counts,
        Ok(MigratedOut::Running(ids)) => return Err(tick_active(&from, &ids)),
        Err(e) if written.get() => {
            // Not chained: the cause's own exit code (busy: "safe to retry") would mislead.
            return Err(anyhow::anyhow!(
                "the schedules were written to {shown_to}, but pausing them in {from} failed: {e:#}. \
                 Both databases now hold them: stop ticking {from} now (remove or change its cron \
                 line), then pause its schedules with `runner --db {from} schedule pause NAME`"
            ));
        }
        Err(e) => return Err(e.into()),
    };
    say!("{}", summary(&counts, args.history, &shown_to));
    say!(
        "the schedules in {from} are now paused and its moved pending runs cancelled; point \
         `runner tick` (cron's RUNNER_DB or --db) at {shown_to}"
    );
    Ok(())
}

/// "moved 12 schedules, 3 pending runs (and 1,204 finished runs, 2,310 attempts, 5,002 events)
/// to postgres://host/db".
fn summary(c: &MigrationCounts, history: bool, to: &str) -> String {
    let moved = format!(
        "moved {}, {}",
        count(c.schedules, "schedule"),
        count(c.pending_runs, "pending run")
    );
    if history {
        format!(
            "{moved} (and {}, {}, {}) to {to}",
            count(c.finished_runs, "finished run"),
            count(c.attempts, "attempt"),
            count(c.events, "event")
        )
    } else {
        format!(
            "{moved} (with {}, {}) to {to}; finished runs stay behind (--history moves them)",
            count(c.attempts, "attempt"),
            count(c.events, "event")
        )
    }
}

/// The target's errors name the flag that named it: the store's advice speaks of `--db`, which
/// here names the source. The exit code stays the error's own.
fn about_the_target(error: anyhow::Error) -> anyhow::Error {
    let text = format!("{error:#}{}", exit::hint_suffix(&error))
        .replace("point --db / RUNNER_DB at", "give --to")
        .replace("point --db elsewhere", "give --to another database")
        .replace("point --db at", "give --to");
    match exit::code_for(&error) {
        exit::DATABASE => Failure::database(text),
        exit::BUSY => Failure::Busy(text).into(),
        exit::USAGE => Failure::usage(text),
        _ => anyhow::anyhow!(text),
    }
}

fn same_database(shown: &str) -> anyhow::Error {
    Failure::usage(format!(
        "--to names the database migrated from ({shown}); give another database"
    ))
}

fn orphaned_runs(from: &str, ids: &[i64]) -> anyhow::Error {
    let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    Failure::usage(format!(
        "{from} has running runs whose leases have expired ({}): the tick that ran them stopped \
         without recording them; nothing was moved or changed. Run `runner tick` once (it \
         recovers them: each is retried or goes dead by its policy) or `runner cancel ID` each, \
         then migrate again",
        ids.join(", ")
    ))
}

fn tick_active(from: &str, ids: &[i64]) -> anyhow::Error {
    let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    Failure::usage(format!(
        "{from} has running runs ({}): a tick is at work; nothing was moved or changed. Stop \
         cron's `runner tick` for it (comment out its line), wait for those runs to finish \
         (`runner history --status running`), then migrate again",
        ids.join(", ")
    ))
}
