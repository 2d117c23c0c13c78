//! The only place that reads the wall clock. `--now TIME` shifts it: time starts at TIME and
//! advances in real time, so tests and replays control "now" without faking sleeps.

use chrono::{DateTime, TimeZone, Utc};
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Real wall time when the process started and the time it should read as.
    offset_secs: i64,
    started: Instant,
    start_wall: DateTime<Utc>,
}

impl Clock {
    /// The system clock, or one starting at `now` when given.
    #[allow(clippy::disallowed_methods)] // this module is the clock
    pub fn new(now: Option<DateTime<Utc>>) -> Clock {
        let real = Utc::now();
        let start_wall = now.unwrap_or(real);
        Clock {
            offset_secs: start_wall.timestamp() - real.timestamp(),
            started: Instant::now(),
            start_wall,
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

    /// Whether `--now` moved this clock away from the system clock.
    pub fn is_shifted(&self) -> bool {
        self.offset_secs != 0
    }
}

/// Epoch seconds back to a UTC time (out-of-range values clamp to the epoch).
pub fn from_epoch(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).single().unwrap_or_default()
}
