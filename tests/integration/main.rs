//! One integration crate: every test drives the real `runner` binary on temp databases.

mod common;
