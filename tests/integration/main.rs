//! One integration crate: every test drives the real `runner` binary on temp databases.

mod apply;
mod clock;
mod common;
mod completions;
mod crash;
mod damage;
mod database;
mod doctor;
mod execution;
mod faults;
mod materialize;
mod never_twice;
mod observe;
mod recovery;
mod schedules;
