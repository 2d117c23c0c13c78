//! Step 3: take due runs under a lease, in one short transaction (see `Store::claim` for which
//! runs a claim may take).

use anyhow::Result;

use super::{test_hook, Tick};
use crate::model::ClaimedRun;
use crate::store::Claimed;

/// Claim up to `room` due runs, each under a fresh lease of `lease_secs`.
pub fn claim_due(tick: &mut Tick<'_>, room: usize, lease_secs: i64) -> Result<Claimed> {
    let options = tick.options;
    let claimed = tick
        .store
        .claim(&options.actor, tick.clock.epoch(), lease_secs, room)?;
    test_hook("claimed");
    Ok(claimed)
}

/// Claim run `run_id` alone (`run --wait`), if the claim rule lets it start now.
pub fn claim_run(tick: &mut Tick<'_>, run_id: i64) -> Result<Option<ClaimedRun>> {
    let options = tick.options;
    let claimed = tick.store.claim_run(
        run_id,
        &options.actor,
        tick.clock.epoch(),
        options.lease_secs(),
    )?;
    test_hook("claimed");
    Ok(claimed)
}
