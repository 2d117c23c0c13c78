//! Cron schedules, zones and catch-up (see `syntax`).

mod syntax;

pub use syntax::*;
