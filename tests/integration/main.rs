//! One integration crate: every test drives the real `runner` binary on temp databases.

mod common;
mod database;
mod execution;
mod materialize;
mod observe;
mod recovery;
mod schedules;
