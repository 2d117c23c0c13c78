//! One integration crate: every test drives the real `runner` binary on temp databases.

mod apply;
mod bad_input;
mod batching;
mod check;
mod clock;
mod common;
mod completions;
mod crash;
mod damage;
mod database;
mod db_faults;
mod doctor;
mod execution;
mod harness;
mod hostile_jobs;
mod materialize;
mod migrate;
mod never_twice;
mod observe;
mod postgres;
mod prune;
mod recovery;
mod schedules;
mod security;
mod simulate;
mod steer;
