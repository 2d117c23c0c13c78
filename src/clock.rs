//! The only place that reads the wall clock. `--now TIME` shifts it: time starts at TIME and
//! advances in real time, so tests and replays control "now" without faking sleeps.

use chrono::{DateTime, TimeZone, Utc};
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// The wall time this clock read when the process started, and when that was.
    start_wall: DateTime<Utc>,
    started: Instant,
}

impl Clock {
    /// The system clock, or one starting at `now` when given.
    #[allow(clippy::disallowed_methods)] // this module is the clock
    pub fn new(now: Option<DateTime<Utc>>) -> Clock {
        Clock {
            start_wall: now.unwrap_or_else(Utc::now),
            started: Instant::now(),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        let elapsed = chrono::Duration::from_std(self.started.elapsed()).unwrap_or_default();
        self.start_wall + elapsed
    }

    /// Now as UTC epoch seconds, the unit of every time stored in the database.
    pub fn epoch(&self) -> i64 {
        self.now().timestamp()
    }
}

/// Epoch seconds back to a UTC time (out-of-range values clamp to the epoch).
pub fn from_epoch(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).single().unwrap_or_default()
}
