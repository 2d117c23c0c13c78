//! `runner init`: create or migrate the database.

use anyhow::Result;

use super::Ctx;
use crate::store::OpenMode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, ctx: &Ctx) -> Result<()> {
    let store = ctx.open(OpenMode::CreateIfMissing)?;
    ctx.warn_if_unsafe_for_tick();
    if ctx.verbose {
        crate::complain!("runner: database ready at {}", store.describe());
    }
    Ok(())
}
