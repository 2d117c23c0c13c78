//! One integration crate: every test drives the real `runner` binary on temp databases.

mod common;
mod crash;
mod damage;
mod database;
mod execution;
mod faults;
mod materialize;
mod observe;
mod recovery;
mod schedules;
