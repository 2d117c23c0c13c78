//! Cron schedules with Debian cron semantics (Vixie cron 3.0, crontab(5)), evaluated in the
//! wall-clock time of an IANA time zone, and the catch-up policy for instants that were missed.
//! Pure: every function takes the instant it reasons about.
//!
//! * `syntax`: parsing and rejecting expressions, and matching naive local times;
//! * `zone`: zones, fire times and the daylight-saving rules;
//! * `catch_up`: which of several due instants run;
//! * `warnings`: the traps a new or changed schedule falls into.

mod catch_up;
mod syntax;
mod warnings;
mod zone;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

pub use catch_up::{plan_catch_up, Decision, CATCH_UP_ALL_LIMIT};
pub use syntax::CronSchedule;
pub use warnings::{traps, Proposed, Trap, Warning};
pub use zone::{parse_zone, DstRule, FireTimes};

use crate::clock::from_epoch;

/// A cron expression or a time zone name that was rejected. `Display` is a complete message for
/// a human.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CronError {
    pub message: String,
}

impl CronError {
    fn new(message: impl Into<String>) -> Self {
        CronError {
            message: message.into(),
        }
    }
}

/// A schedule's timing: its parsed cron expression in its zone, speaking epoch seconds as the
/// store does.
pub struct Timing {
    pub cron: CronSchedule,
    pub tz: Tz,
}

impl Timing {
    /// Parse an expression and a zone name.
    pub fn parse(cron: &str, zone: &str) -> Result<Timing, CronError> {
        Ok(Timing {
            cron: CronSchedule::parse(cron)?,
            tz: parse_zone(zone)?,
        })
    }

    /// The first fire instant strictly after `epoch`.
    pub fn next_after(&self, epoch: i64) -> Option<i64> {
        self.cron
            .next_after(self.tz, from_epoch(epoch))
            .map(|t| t.timestamp())
    }

    /// The next `count` fire instants strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<i64> {
        self.cron
            .fire_times_after(self.tz, after, count)
            .iter()
            .map(|t| t.timestamp())
            .collect()
    }
}

/// What the tests of every part share: instants from text, expressions that must parse, zones.
#[cfg(test)]
mod testing {
    use super::CronSchedule;
    use chrono::{DateTime, Utc};
    use chrono_tz::Tz;

    pub const NY: Tz = chrono_tz::America::New_York;
    pub const BERLIN: Tz = chrono_tz::Europe::Berlin;
    pub const LORD_HOWE: Tz = chrono_tz::Australia::Lord_Howe;

    pub fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test instant")
            .with_timezone(&Utc)
    }

    pub fn sched(expr: &str) -> CronSchedule {
        match CronSchedule::parse(expr) {
            Ok(s) => s,
            Err(e) => panic!("{expr:?} should parse: {e}"),
        }
    }
}
