//! The only place that reads the wall clock, and what the runner makes of clock steps.
//!
//! Every reading is the system's wall clock *at that moment* plus a fixed offset: zero normally;
//! with `--now TIME`, TIME minus the wall time when the command started, so the clock starts at
//! TIME and advances in real time. Reading the wall clock each time (not "start time plus
//! monotonic time") matters for a long tick: after a wall-clock step, its heartbeats write leases
//! by the stepped clock, which is the clock the next tick judges them by, so a step forward does
//! not make a healthy job's lease look expired.
//!
//! With PostgreSQL, hosts share one database and must agree on one clock: the database's. The
//! store measures how far the database's clock is from this host's when it connects
//! (`follow_database`), and every reading of an unshifted clock adds that difference, so hosts
//! whose clocks disagree still agree on lease expiry and due times.

use std::path::PathBuf;
use std::sync::OnceLock;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};

/// How far clocks may disagree before the runner calls it a clock step: ticks on several hosts
/// race, and their clocks are only as close as NTP keeps them.
pub const CLOCK_TOLERANCE_SECS: i64 = 60;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Added to the wall clock at every reading: `--now` minus the wall time at start, or zero.
    offset: TimeDelta,
    shifted: bool,
}

impl Clock {
    /// The system clock, or one starting at `now` when given.
    pub fn new(now: Option<DateTime<Utc>>) -> Clock {
        match now {
            Some(start) => Clock {
                offset: start.signed_duration_since(wall_clock()),
                shifted: true,
            },
            None => Clock {
                offset: TimeDelta::zero(),
                shifted: false,
            },
        }
    }

    /// One reading: the "now" of one decision.
    pub fn read(&self) -> Now {
        let wall = wall_clock();
        // `--now` pins the clock to the time given; otherwise it is the database's, when the
        // store said how far that is from this host's.
        let offset = if self.shifted {
            self.offset
        } else {
            database_skew()
        };
        Now(wall.checked_add_signed(offset).unwrap_or(wall))
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.read().time()
    }

    /// Now as UTC epoch seconds, the unit of every time stored in the database.
    pub fn epoch(&self) -> i64 {
        self.read().secs()
    }

    /// Whether `--now` moved this clock away from the system clock. A shifted clock is a test or
    /// a replay: it must not do what only the real clock may decide (automatic pruning).
    pub fn is_shifted(&self) -> bool {
        self.shifted
    }
}

/// One reading of the clock, taken once per decision and handed to everything that decision
/// needs, in the unit each part needs: schedules a time, the store epoch seconds, a retry time
/// epoch milliseconds (so it is never rounded early).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Now(DateTime<Utc>);

impl Now {
    pub fn time(self) -> DateTime<Utc> {
        self.0
    }

    /// Epoch seconds, the unit of every time stored in the database.
    pub fn secs(self) -> i64 {
        self.0.timestamp()
    }

    pub fn millis(self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The reading `ago` before this one (a monotonic interval measured back from it).
    pub fn earlier_by(self, ago: std::time::Duration) -> Now {
        let ago = TimeDelta::from_std(ago).unwrap_or(TimeDelta::zero());
        Now(self.0.checked_sub_signed(ago).unwrap_or(self.0))
    }
}

/// How far `now` lies behind `high_water` (the latest time a tick's clock read), if by more than
/// the tolerance: the clock stepped back, or a tick ran with a clock ahead.
pub fn behind_by(now: i64, high_water: Option<i64>) -> Option<i64> {
    high_water
        .map(|high| high.saturating_sub(now))
        .filter(|behind| *behind > CLOCK_TOLERANCE_SECS)
}

/// Epoch seconds back to a UTC time (out-of-range values clamp to the epoch).
pub fn from_epoch(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).single().unwrap_or_default()
}

/// How far the database's clock is ahead of this host's (negative: behind), set once when a
/// store whose clock is shared by several hosts connects (PostgreSQL). Zero until then, and for
/// SQLite, whose only clock is this host's.
static DATABASE_SKEW: OnceLock<TimeDelta> = OnceLock::new();

/// From now on, unshifted clocks read the database's clock: this host's plus `skew_millis`.
/// Only the first call counts (one database per process).
pub fn follow_database(skew_millis: i64) {
    let _ = DATABASE_SKEW.set(TimeDelta::milliseconds(skew_millis));
}

fn database_skew() -> TimeDelta {
    DATABASE_SKEW.get().copied().unwrap_or_default()
}

/// This host's clock in epoch milliseconds, unshifted by `--now` and by the test step: what the
/// database's clock is compared with to measure the skew (so the test step, like `--now`, stays
/// a shift on top of whichever clock the runner follows).
#[allow(clippy::disallowed_methods)] // this module is the clock
pub fn host_epoch_millis() -> i64 {
    Utc::now().timestamp_millis()
}

#[allow(clippy::disallowed_methods)] // this module is the clock
fn wall_clock() -> DateTime<Utc> {
    let wall = Utc::now();
    wall.checked_add_signed(test_clock_step()).unwrap_or(wall)
}

/// TEST-ONLY HOOK, not a feature, and not documented for users: when the environment variable
/// `RUNNER_TEST_CLOCK_STEP_FILE` names a file, every wall-clock reading adds the whole seconds
/// written in that file (a missing, empty or unreadable file adds 0). The integration tests
/// (`tests/integration/clock.rs`) use it to step the "system clock" under a running tick, which
/// they cannot do to the machine's real clock. It can do nothing `--now` cannot already do.
const TEST_CLOCK_STEP_FILE: &str = "RUNNER_TEST_CLOCK_STEP_FILE";

fn test_clock_step() -> TimeDelta {
    static STEP_FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let step_file = STEP_FILE.get_or_init(|| {
        std::env::var_os(TEST_CLOCK_STEP_FILE)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    step_file
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| text.trim().parse::<i64>().ok())
        .and_then(TimeDelta::try_seconds)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_starts_at_the_given_time_and_advances() {
        let start = Utc
            .with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
            .single()
            .expect("a valid time");
        let clock = Clock::new(Some(start));
        assert!(clock.is_shifted());
        let read = clock.now();
        assert!(
            read >= start && read < start + TimeDelta::seconds(60),
            "{read}"
        );
        assert!(!Clock::new(None).is_shifted());
    }

    #[test]
    fn behind_only_beyond_the_tolerance() {
        assert_eq!(behind_by(1000, None), None);
        assert_eq!(behind_by(1000, Some(900)), None);
        assert_eq!(behind_by(1000, Some(1000 + CLOCK_TOLERANCE_SECS)), None);
        assert_eq!(behind_by(1000, Some(1000 + 86_400)), Some(86_400));
    }
}
