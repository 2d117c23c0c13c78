//! The traps a new or changed schedule falls into, found before it first fires: cron's OR rule for
//! days, daylight-saving changes that move or merge a fixed-time job's runs, a timeout that makes
//! `forbid` skip runs, a grace too short for `--catch-up none` to run anything, and a command path
//! that depends on where the tick runs. `schedule add` and
//! `edit` print them as warnings; none of them is an error, since each can be what was meant.

use std::collections::BTreeSet;
use std::path::Path;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::{DstRule, Timing};
use crate::display::duration_of_secs;
use crate::policy::{CatchUp, Overlap};

/// How far ahead the daylight-saving check looks.
const DST_HORIZON_DAYS: i64 = 366;
/// How many upcoming instants the shortest interval between fire times is measured over.
const INTERVAL_SAMPLE: usize = 1000;

/// The settings of a schedule as they will be stored, as far as the checks need them.
pub struct Proposed<'a> {
    pub timing: &'a Timing,
    pub timeout_secs: i64,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub grace_secs: i64,
    pub command: &'a str,
    pub workdir: Option<&'a Path>,
}

/// Which trap: the CLI warns about those its flags touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trap {
    /// Day-of-month and day-of-week both restricted: either matching is enough.
    DaysEither,
    /// A fixed-time job whose local time falls in a gap or a repeated hour within a year.
    DaylightSaving,
    /// The timeout is longer than the shortest interval between instants, with `forbid`.
    TimeoutOverlap,
    /// `--catch-up none` with a grace shorter than a tick's lateness.
    ShortGrace,
    /// The command's first word is a relative path and there is no working directory.
    RelativeCommand,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub trap: Trap,
    /// A complete sentence for a person.
    pub message: String,
}

/// Every trap these settings fall into, looking ahead from `now`.
pub fn traps(proposed: &Proposed, now: DateTime<Utc>) -> Vec<Warning> {
    let mut found = Vec::new();
    let mut warn = |trap, message: Option<String>| {
        if let Some(message) = message {
            found.push(Warning { trap, message });
        }
    };
    warn(Trap::DaysEither, days_either(proposed.timing));
    warn(Trap::DaylightSaving, daylight_saving(proposed.timing, now));
    warn(Trap::TimeoutOverlap, timeout_overlap(proposed, now));
    warn(Trap::ShortGrace, short_grace(proposed));
    warn(
        Trap::RelativeCommand,
        relative_command(proposed.command, proposed.workdir),
    );
    found
}

fn days_either(timing: &Timing) -> Option<String> {
    timing.cron.days_either().then(|| {
        format!(
            "`{}` restricts both the day of month and the day of week, so it fires on days that \
             match EITHER (cron's OR rule: `0 0 1,15 * FRI` runs on the 1st, the 15th and every \
             Friday); to require both, keep one field `*` and test the other in the command",
            timing.cron.expression()
        )
    })
}

fn daylight_saving(timing: &Timing, now: DateTime<Utc>) -> Option<String> {
    if timing.cron.is_wildcard() {
        // Wildcard jobs have no instants in a gap and run in both passes of a repeated hour:
        // nothing is moved or merged.
        return None;
    }
    let until = now.checked_add_signed(TimeDelta::days(DST_HORIZON_DAYS))?;
    let instants = timing
        .cron
        .fire_times_between(timing.tz, now, until, usize::MAX)
        .instants;
    let mut gaps = BTreeSet::new();
    let mut repeats = BTreeSet::new();
    for instant in instants {
        let date = |t: DateTime<Utc>| -> NaiveDate { t.with_timezone(&timing.tz).date_naive() };
        match timing.cron.dst_rule(timing.tz, instant) {
            Some(DstRule::Gap { .. }) => {
                gaps.insert(date(instant));
            }
            Some(DstRule::RepeatedFirst { .. }) => {
                repeats.insert(date(instant));
            }
            _ => {}
        }
    }
    let dates = |set: &BTreeSet<NaiveDate>| {
        set.iter()
            .map(|d| d.format("%Y-%m-%d").to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !gaps.is_empty() {
        parts.push(format!(
            "on {} its time does not exist (clocks spring forward), so it runs once, at the \
             change",
            dates(&gaps)
        ));
    }
    if !repeats.is_empty() {
        parts.push(format!(
            "on {} its time happens twice (clocks fall back), and it runs in the first pass only",
            dates(&repeats)
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "daylight saving in {}: {} (`runner schedule simulate` shows those days)",
            timing.tz,
            parts.join("; ")
        )
    })
}

/// A grace under a minute: cron starts a tick up to seconds after the minute, and its clock is
/// read after the process started, so with `--catch-up none` an instant is nearly always
/// "missed" (a grace of 0s: always).
const SHORT_GRACE_SECS: i64 = 60;

fn short_grace(proposed: &Proposed) -> Option<String> {
    (proposed.catch_up == CatchUp::None && proposed.grace_secs < SHORT_GRACE_SECS).then(|| {
        format!(
            "with --catch-up none, an instant runs only if a tick reaches it within --grace ({}), \
             and a tick started by cron reads its clock a moment after the minute (later when \
             busy): most instants would be skipped as missed; give --grace 1m or more",
            duration_of_secs(proposed.grace_secs)
        )
    })
}

fn timeout_overlap(proposed: &Proposed, now: DateTime<Utc>) -> Option<String> {
    if proposed.overlap != Overlap::Forbid {
        return None;
    }
    let instants = proposed.timing.upcoming(now, INTERVAL_SAMPLE);
    let shortest = instants.windows(2).map(|pair| pair[1] - pair[0]).min()?;
    (proposed.timeout_secs > shortest).then(|| {
        format!(
            "the timeout ({}) is longer than the {} between fire times, with --overlap forbid: \
             while a run takes longer than that, the instants that come due are skipped",
            duration_of_secs(proposed.timeout_secs),
            duration_of_secs(shortest)
        )
    })
}

fn relative_command(command: &str, workdir: Option<&Path>) -> Option<String> {
    if workdir.is_some() {
        return None;
    }
    let first = shlex::split(command)
        .and_then(|words| words.into_iter().next())
        .or_else(|| command.split_whitespace().next().map(str::to_string))?;
    // `~/bin/x` and `$HOME/bin/x` are expanded by the shell, not looked up from the directory.
    let relative = first.contains('/') && !first.starts_with(['/', '~', '$']);
    relative.then(|| {
        format!(
            "the command starts with the relative path {first} and there is no --workdir: it is \
             looked up from the directory the tick runs in (under cron, your home directory); \
             give --workdir DIR or an absolute path"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::testing::utc;

    const NOW: &str = "2026-11-23T12:00:00Z";

    fn check(cron: &str, zone: &str, timeout_secs: i64, overlap: Overlap) -> Vec<Warning> {
        let timing = Timing::parse(cron, zone).expect("valid schedule");
        traps(
            &Proposed {
                timing: &timing,
                timeout_secs,
                overlap,
                catch_up: CatchUp::Latest,
                grace_secs: 300,
                command: "/usr/bin/true",
                workdir: None,
            },
            utc(NOW),
        )
    }

    fn only(warnings: &[Warning], trap: Trap) -> Option<&str> {
        warnings
            .iter()
            .find(|w| w.trap == trap)
            .map(|w| w.message.as_str())
    }

    #[test]
    fn an_ordinary_schedule_has_no_traps() {
        assert_eq!(check("0 3 * * *", "UTC", 3600, Overlap::Forbid), []);
        assert_eq!(
            check("*/5 * * * *", "Europe/Berlin", 60, Overlap::Forbid),
            []
        );
        // Berlin's changes are at 02:00/03:00; 04:00 is never touched.
        assert_eq!(check("0 4 * * *", "Europe/Berlin", 60, Overlap::Forbid), []);
    }

    #[test]
    fn both_day_fields_restricted_warns_of_the_or_rule() {
        let found = check("0 0 1,15 * FRI", "UTC", 60, Overlap::Forbid);
        let message = only(&found, Trap::DaysEither).expect("OR rule");
        assert!(message.contains("`0 0 1,15 * FRI`"), "{message}");
        assert!(message.contains("every Friday"), "{message}");
        assert_eq!(
            only(
                &check("0 0 1,15 * *", "UTC", 60, Overlap::Forbid),
                Trap::DaysEither
            ),
            None
        );
        assert_eq!(
            only(
                &check("0 0 * * FRI", "UTC", 60, Overlap::Forbid),
                Trap::DaysEither
            ),
            None
        );
    }

    #[test]
    fn fixed_times_in_a_gap_or_a_repeated_hour_name_the_dates() {
        let found = check("30 2 * * *", "Europe/Berlin", 60, Overlap::Forbid);
        let message = only(&found, Trap::DaylightSaving).expect("DST");
        assert!(message.contains("Europe/Berlin"), "{message}");
        assert!(
            message.contains("on 2027-03-28 its time does not exist"),
            "{message}"
        );
        assert!(
            message.contains("on 2027-10-31 its time happens twice"),
            "{message}"
        );
        // Within a year: not the next spring's.
        assert!(!message.contains("2028"), "{message}");

        let found = check("30 1 * * *", "America/New_York", 60, Overlap::Forbid);
        let message = only(&found, Trap::DaylightSaving).expect("DST");
        assert!(
            message.contains("on 2027-11-07 its time happens twice"),
            "{message}"
        );
        assert!(!message.contains("does not exist"), "{message}");

        let both = check("30 2 * * *", "Europe/London", 60, Overlap::Forbid);
        assert_eq!(
            only(&both, Trap::DaylightSaving),
            None,
            "London changes at 01:00"
        );
        let both = check("30 1 * * *", "Europe/London", 60, Overlap::Forbid);
        let message = only(&both, Trap::DaylightSaving).expect("DST");
        assert!(
            message.contains("2027-03-28 its time does not exist"),
            "{message}"
        );
        assert!(
            message.contains("2027-10-31 its time happens twice"),
            "{message}"
        );
        // Wildcard jobs are not moved or merged.
        assert_eq!(
            only(
                &check("*/30 * * * *", "Europe/Berlin", 60, Overlap::Forbid),
                Trap::DaylightSaving
            ),
            None
        );
        assert_eq!(
            only(
                &check("30 2 * * *", "UTC", 60, Overlap::Forbid),
                Trap::DaylightSaving
            ),
            None
        );
    }

    #[test]
    fn a_timeout_longer_than_the_interval_with_forbid_skips_runs() {
        let found = check("*/15 * * * *", "UTC", 3600, Overlap::Forbid);
        let message = only(&found, Trap::TimeoutOverlap).expect("timeout");
        assert!(message.contains("(1h) is longer than the 15m"), "{message}");
        assert_eq!(
            only(
                &check("*/15 * * * *", "UTC", 3600, Overlap::Allow),
                Trap::TimeoutOverlap
            ),
            None
        );
        assert_eq!(
            only(
                &check("*/15 * * * *", "UTC", 900, Overlap::Forbid),
                Trap::TimeoutOverlap
            ),
            None
        );
        // The shortest interval counts: 00:00 and 00:10 are 10 minutes apart.
        let found = check("0,10 0 * * *", "UTC", 900, Overlap::Forbid);
        assert!(only(&found, Trap::TimeoutOverlap).is_some());
    }

    #[test]
    fn catch_up_none_with_a_grace_under_a_minute_warns() {
        let grace = |catch_up, grace_secs| {
            let timing = Timing::parse("* * * * *", "UTC").expect("valid");
            let proposed = Proposed {
                timing: &timing,
                timeout_secs: 30,
                overlap: Overlap::Forbid,
                catch_up,
                grace_secs,
                command: "/usr/bin/true",
                workdir: None,
            };
            short_grace(&proposed)
        };
        let message = grace(CatchUp::None, 0).expect("warns");
        assert!(message.contains("--grace (0s)"), "{message}");
        assert!(grace(CatchUp::None, 59).is_some());
        assert!(grace(CatchUp::None, 60).is_none());
        assert!(
            grace(CatchUp::Latest, 0).is_none(),
            "only none judges lateness"
        );
    }

    #[test]
    fn a_relative_command_path_without_workdir() {
        let relative = |command: &str, workdir: Option<&str>| {
            relative_command(command, workdir.map(Path::new)).is_some()
        };
        assert!(relative("./backup.sh --full", None));
        assert!(relative("bin/backup", None));
        assert!(relative("'scripts/my job.sh' x", None));
        assert!(!relative("./backup.sh", Some("/srv/app")));
        assert!(!relative("/usr/local/bin/backup", None));
        assert!(!relative("backup --to /srv", None));
        assert!(!relative("~/bin/backup", None));
        assert!(!relative("$HOME/bin/backup", None));
        let message = relative_command("./backup.sh", None).expect("relative");
        assert!(message.contains("./backup.sh"), "{message}");
        assert!(message.contains("--workdir"), "{message}");
    }
}
