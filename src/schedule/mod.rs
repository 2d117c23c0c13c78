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

pub use catch_up::{plan_catch_up, Decision, CATCH_UP_ALL_LIMIT};
pub use syntax::{cron_problem, CronSchedule};
pub use warnings::{traps, Proposed, Trap, Warning};
pub use zone::{
    last_searchable_instant, parse_zone, resolve_local, search_horizon, DstRule, FireTimes,
    LocalTime, LAST_YEAR,
};

use crate::clock::from_epoch;
use crate::tz::Tz;

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

    /// The newest `limit` fire instants in (`after`, `until`], newest first (`after` may be
    /// `i64::MIN`: no lower bound). Its cost follows how far back the instants lie, not how long
    /// ago `after` is; it looks no further back than the search horizon of `next_after` (401
    /// years).
    pub fn latest(&self, after: i64, until: i64, limit: usize) -> Vec<i64> {
        const HORIZON_SECS: i64 = 401 * 366 * 86_400;
        let after = after.max(until.saturating_sub(HORIZON_SECS));
        let newest = self
            .cron
            .newest_between(self.tz, from_epoch(after), from_epoch(until), limit);
        newest
            .instants
            .iter()
            .rev()
            .map(|t| t.timestamp())
            .collect()
    }

    /// Whether `epoch` is one of the schedule's fire instants.
    pub fn fires_at(&self, epoch: i64) -> bool {
        self.next_after(epoch - 1) == Some(epoch)
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

#[cfg(test)]
mod tests {
    use super::testing::utc;
    use super::Timing;

    fn timing(cron: &str, zone: &str) -> Timing {
        Timing::parse(cron, zone).expect("valid timing")
    }

    fn at(s: &str) -> i64 {
        utc(s).timestamp()
    }

    #[test]
    fn latest_reaches_back_as_far_as_it_must() {
        let minutely = timing("* * * * *", "UTC");
        assert_eq!(
            minutely.latest(i64::MIN, at("2026-11-23T10:30:30Z"), 3),
            [
                at("2026-11-23T10:30:00Z"),
                at("2026-11-23T10:29:00Z"),
                at("2026-11-23T10:28:00Z")
            ]
        );
        // `until` is included, `after` is not.
        assert_eq!(
            minutely.latest(at("2026-11-23T10:28:00Z"), at("2026-11-23T10:30:00Z"), 10),
            [at("2026-11-23T10:30:00Z"), at("2026-11-23T10:29:00Z")]
        );
        // Years back, for an expression that fires on 29 February.
        let leap = timing("0 0 29 2 *", "UTC");
        assert_eq!(
            leap.latest(i64::MIN, at("2026-11-23T00:00:00Z"), 2),
            [at("2024-02-29T00:00:00Z"), at("2020-02-29T00:00:00Z")]
        );
        assert!(leap
            .latest(at("2025-01-01T00:00:00Z"), at("2026-11-23T00:00:00Z"), 2)
            .is_empty());
        assert!(minutely
            .latest(i64::MIN, at("2026-11-23T00:00:00Z"), 0)
            .is_empty());
    }

    #[test]
    fn fires_at_only_its_instants() {
        let t = timing("30 2 * * *", "America/New_York");
        assert!(t.fires_at(at("2026-11-23T07:30:00Z")));
        assert!(!t.fires_at(at("2026-11-23T07:31:00Z")));
        // 02:30 did not exist on 8 March 2026: the job ran at the transition, 03:00 EDT.
        assert!(t.fires_at(at("2026-03-08T07:00:00Z")));
    }
}

/// What the tests of every part share: instants from text, expressions that must parse, zones.
#[cfg(test)]
mod testing {
    use super::CronSchedule;
    use crate::tz::Tz;
    use chrono::{DateTime, Utc};

    pub fn ny() -> Tz {
        "America/New_York".parse().expect("zone")
    }

    pub fn berlin() -> Tz {
        "Europe/Berlin".parse().expect("zone")
    }

    pub fn lord_howe() -> Tz {
        "Australia/Lord_Howe".parse().expect("zone")
    }

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
