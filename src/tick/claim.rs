//! Step 4a: take due runs under a lease, in one short transaction (see `Store::claim`).

use anyhow::Result;

use super::{test_hook, TickOptions};
use crate::clock::Clock;
use crate::store::{Claimed, Store};

/// Claim up to `room` due runs, each under a fresh lease of `lease_secs`.
pub fn claim_due(
    store: &mut dyn Store,
    clock: &Clock,
    options: &TickOptions,
    room: usize,
    lease_secs: i64,
) -> Result<Claimed> {
    let claimed = store.claim(
        &options.actor,
        clock.epoch(),
        lease_secs,
        room,
        options.only_run,
    )?;
    test_hook("claimed");
    Ok(claimed)
}
