//! A schedule's timing: its parsed cron expression in its zone.

use anyhow::Result;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::clock::from_epoch;
use crate::exit::Failure;
use crate::model::Settings;
use crate::schedule::{parse_zone, CronSchedule};

pub struct Timing {
    pub cron: CronSchedule,
    pub tz: Tz,
}

impl Timing {
    /// Parse the settings' expression and zone; invalid ones are usage errors (exit 2).
    pub fn of(settings: &Settings) -> Result<Timing> {
        Ok(Timing {
            cron: CronSchedule::parse(&settings.cron).map_err(Failure::usage)?,
            tz: parse_zone(&settings.timezone).map_err(Failure::usage)?,
        })
    }

    /// The first fire instant strictly after `epoch`.
    pub fn next_after(&self, epoch: i64) -> Option<i64> {
        self.cron
            .next_after(self.tz, from_epoch(epoch))
            .map(|t| t.timestamp())
    }

    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<i64> {
        self.cron
            .fire_times_after(self.tz, after, count)
            .iter()
            .map(|t| t.timestamp())
            .collect()
    }
}
