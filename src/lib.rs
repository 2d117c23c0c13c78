//! `runner`: cron wakes `runner tick`; the database decides what runs.
//!
//! Pure logic (`schedule`, `backoff`) is kept apart from I/O (`store`, `process`); `tick` wires
//! the steps of one tick together and `cli` the commands.

pub mod backoff;
pub mod cli;
pub mod clock;
pub mod display;
pub mod exit;
pub mod model;
pub mod policy;
pub mod process;
pub mod schedule;
pub mod stderr;
pub mod store;
pub mod text_enum;
pub mod tick;
pub mod time_input;
pub mod tz;
pub mod why;
