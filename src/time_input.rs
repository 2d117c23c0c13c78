//! Times as people type them on the command line (`--since`, `--from`, `--to`, `--now`, and
//! `--at`): one parser, so every flag that takes a time accepts the same forms. Durations too
//! ([`parse_duration`]): one parser for every flag, setting and TOML field that takes one.
//!
//! * `2026-11-23` (midnight), `2026-11-23T10:30`, `2026-11-23 10:30` (seconds optional),
//!   `10:30` (today);
//! * RFC 3339 with an offset, e.g. `2026-11-23T10:30:00+01:00` or `...Z`;
//! * a wall-clock time is in the flag's own zone, unless an IANA zone follows it after a space:
//!   `2026-11-23 10:30 Europe/Paris`, `10:30 America/New_York` ("today" is then that zone's).
//!   The flag's zone is UTC for `--since`, `--from`, `--to` and `--now`, and the schedule's for
//!   `why --at`: parsing leaves it open, and the flag gives it when it resolves the time;
//! * where the flag says so (`--since`), a duration before now: `2h`, `7d`, `1h30m`.
//!
//! Pure: parsing needs no clock; [`TimeInput::resolve`] takes `now` for "today" and "ago".

use std::time::Duration;

use chrono::{DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

use crate::schedule::{parse_zone, LAST_YEAR};
use crate::tz::Tz;

/// What the forms above mean, for error messages (the full story is `runner help times`).
pub const TIME_FORMS: &str = "use 2026-11-23, 2026-11-23T10:30, 2026-11-23 10:30, 10:30 (today) \
     or RFC 3339 like 2026-11-23T10:30:00+01:00; UTC unless a zone follows, e.g. \
     '10:30 Europe/Paris' (see `runner help times`)";

/// A time as typed, before `now` gives "today" and "ago" a meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeInput {
    /// An instant given with its offset (RFC 3339).
    Instant(DateTime<Utc>),
    /// A wall-clock time; no date means today in its zone. `zone` is the one typed after it;
    /// `None`: none was, and the flag's own zone applies (see [`TimeInput::resolve`]).
    Local {
        date: Option<NaiveDate>,
        time: NaiveTime,
        zone: Option<Tz>,
    },
    /// This long before now (only from [`parse_since`]).
    Ago(Duration),
}

impl TimeInput {
    /// Whether `now` is needed to resolve it (a time of day alone, or a duration before now).
    pub fn needs_now(&self) -> bool {
        matches!(
            self,
            TimeInput::Ago(_) | TimeInput::Local { date: None, .. }
        )
    }

    /// A wall-clock time as the date and time of day it names in its zone (`flag_zone` when
    /// none was typed), with that zone; no date means `now`'s date there. `None` for an instant
    /// or a duration. Not yet an instant: that time may occur twice in the zone, or not at all.
    pub fn wall_clock(&self, flag_zone: Tz, now: DateTime<Utc>) -> Option<(NaiveDateTime, Tz)> {
        match *self {
            TimeInput::Local { date, time, zone } => {
                let zone = zone.unwrap_or(flag_zone);
                Some((on_date_or_today(date, time, zone, now), zone))
            }
            TimeInput::Instant(_) | TimeInput::Ago(_) => None,
        }
    }

    /// The instant meant, a wall-clock time without a zone being in `flag_zone` and `now` the
    /// command's clock. A wall-clock time that occurs twice (a repeated hour) means the first;
    /// one that does not occur (a daylight-saving gap) is an error, since no instant is meant.
    pub fn resolve(&self, flag_zone: Tz, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        match *self {
            TimeInput::Instant(at) => Ok(at),
            TimeInput::Ago(span) => chrono::TimeDelta::from_std(span)
                .ok()
                .and_then(|span| now.checked_sub_signed(span))
                .ok_or_else(|| "that duration reaches before any representable time".to_string()),
            TimeInput::Local { date, time, zone } => {
                let zone = zone.unwrap_or(flag_zone);
                let local = on_date_or_today(date, time, zone, now);
                match zone.from_local_datetime(&local) {
                    LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                        Ok(at.with_timezone(&Utc))
                    }
                    LocalResult::None => Err(format!(
                        "{} does not exist in {zone}: the clocks skip it (daylight saving); \
                         give a time after the change, or an offset",
                        local.format("%Y-%m-%d %H:%M")
                    )),
                }
            }
        }
    }
}

/// `time` on `date`, or on `now`'s date in `zone` when there is none.
fn on_date_or_today(
    date: Option<NaiveDate>,
    time: NaiveTime,
    zone: Tz,
    now: DateTime<Utc>,
) -> NaiveDateTime {
    date.unwrap_or_else(|| now.with_timezone(&zone).date_naive())
        .and_time(time)
}

/// A duration as people type it: humantime's syntax (`90s`, `10m`, `1h30m`, `2d`, `1w`, `250ms`),
/// without its months and years. humantime counts a month as 30.44 days and a year as 365.25
/// days, and takes `M` for a month, so `--timeout 10M` (meant as ten minutes) was 304 days;
/// neither has a fixed length, so they are refused with a word to write days.
pub fn parse_duration(value: &str) -> Result<Duration, DurationError> {
    if let Some(unit) = calendar_unit(value) {
        return Err(DurationError::Calendar {
            value: value.to_string(),
            unit: unit.to_string(),
        });
    }
    humantime::parse_duration(value).map_err(|e| DurationError::Syntax {
        value: value.to_string(),
        reason: match e {
            // humantime's own list ends in "months, years": units refused here.
            humantime::DurationError::UnknownUnit { unit, .. } => {
                format!("unknown time unit {unit:?}; the units are ms, s, m, h, d and w")
            }
            other => other.to_string(),
        },
    })
}

/// Why a duration was refused. Its message names the value; callers that know better words for
/// a syntax error (a variable's name, the other forms a flag takes) use their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// A month or year unit (`M`, `month`, `y`, `yr`, `years`, ...).
    Calendar { value: String, unit: String },
    /// Not a duration at all; `reason` is humantime's.
    Syntax { value: String, reason: String },
}

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurationError::Calendar { value, unit } => {
                let (what, instead) = match unit.as_str() {
                    "M" | "month" | "months" => ("months", "30d for 30 days, or 10m for minutes"),
                    _ => ("years", "365d for 365 days"),
                };
                write!(
                    f,
                    "{value:?}: {unit:?} counts {what}, which have no fixed length; write days, \
                     e.g. {instead} (see `runner help durations`)"
                )
            }
            DurationError::Syntax { value, reason } => write!(
                f,
                "{value:?} is not a duration ({reason}); use e.g. 90s, 10m, 1h30m"
            ),
        }
    }
}

/// The first month or year unit in `value`, if any. humantime reads a unit as a maximal run of
/// ASCII letters (and `µ`) after a number; these are the runs it takes for months and years.
fn calendar_unit(value: &str) -> Option<&str> {
    value
        .split(|c: char| !(c.is_ascii_alphabetic() || c == 'µ'))
        .find(|unit| {
            matches!(
                *unit,
                "M" | "month" | "months" | "y" | "yr" | "yrs" | "year" | "years"
            )
        })
}

/// A time (no durations): the forms in the module's doc.
pub fn parse_time(value: &str) -> Result<TimeInput, String> {
    parse_time_or(value, || format!("{value:?} is not a time; {TIME_FORMS}"))
}

/// A time, as [`parse_time`], for a flag that tells what a time is in its own words
/// (`not_a_time`). A time followed by an unknown zone is told so in the words `--tz` uses,
/// whichever flag it was given to.
pub fn parse_time_or(
    value: &str,
    not_a_time: impl FnOnce() -> String,
) -> Result<TimeInput, String> {
    parse_time_only(value).map_err(|e| match e {
        NotATime::UnknownZone(message) => message,
        NotATime::Unreadable => not_a_time(),
    })
}

/// `--since`: a time, or a duration before now (`2h` = two hours ago).
pub fn parse_since(value: &str) -> Result<TimeInput, String> {
    match parse_time_only(value) {
        Ok(time) => return Ok(time),
        Err(NotATime::UnknownZone(message)) => return Err(message),
        Err(NotATime::Unreadable) => {}
    }
    match parse_duration(value.trim()) {
        Ok(duration) => Ok(TimeInput::Ago(duration)),
        Err(e @ DurationError::Calendar { .. }) => Err(e.to_string()),
        Err(DurationError::Syntax { .. }) => Err(format!(
            "{value:?} is neither a duration before now (e.g. 90m, 2h, 7d; see `runner help \
             durations`) nor a time; {TIME_FORMS}"
        )),
    }
}

/// A time that means the same whatever the clock says (for `--now`): a date, a date and time, or
/// RFC 3339; not a time of day alone, since "today" would come from the clock being replaced.
pub fn parse_fixed_time(value: &str) -> Result<DateTime<Utc>, String> {
    let input = parse_time(value)?;
    if input.needs_now() {
        return Err(format!(
            "{value:?} has no date; give one, e.g. 2026-11-23T10:30 (see `runner help times`)"
        ));
    }
    // Nothing here reads `now`: any instant will do. `--now` is in UTC unless a zone follows.
    let at = input.resolve(Tz::UTC, DateTime::UNIX_EPOCH)?;
    // A clock past the last year fire times are computed in would move every cursor there, for
    // good: no schedule would fire again.
    within_fire_times(format!("{value:?}"), at.year())?;
    Ok(at)
}

/// Refuse a time in a year after [`LAST_YEAR`]: fire times are computed up to the start of the
/// year 5000, so nothing said of a later time (a clock to move cursors to, an instant to explain)
/// would be true. `year` is the time's year where its fire times are computed (UTC for `--now`,
/// the schedule's zone for `why --at`); `shown` is the time as the message names it. The one
/// check of every time given that fire times are computed for.
pub fn within_fire_times(shown: impl std::fmt::Display, year: i32) -> Result<(), String> {
    if year > LAST_YEAR {
        return Err(format!(
            "{shown} is after {LAST_YEAR}, the last year runner computes fire times in"
        ));
    }
    Ok(())
}

/// Why a text is not a time.
enum NotATime {
    /// A time followed by a word that can only be meant as a zone, and is none: the message
    /// names it (`Europe/Pariss`, not "is not a time").
    UnknownZone(String),
    /// None of the forms.
    Unreadable,
}

fn parse_time_only(value: &str) -> Result<TimeInput, NotATime> {
    let value = value.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(value) {
        return Ok(TimeInput::Instant(at.with_timezone(&Utc)));
    }
    // A zone after the last space: `2026-11-23 10:30 Europe/Paris`.
    if let Some((text, word)) = value.rsplit_once(' ') {
        let text = text.trim_end();
        match parse_zone(word) {
            Ok(zone) => return wall_clock(text, Some(zone)).ok_or(NotATime::Unreadable),
            Err(unknown) if looks_like_zone(word) && wall_clock(text, None).is_some() => {
                return Err(NotATime::UnknownZone(unknown.to_string()))
            }
            Err(_) => {}
        }
    }
    wall_clock(value, None).ok_or(NotATime::Unreadable)
}

/// Whether a word after a time can only be meant as a zone: an IANA-looking name (`Europe/Paris`,
/// `europe/paris`, `Etc/GMT+5`) or an upper-case abbreviation (`UTC`, `CEST`, `GMT+1`), never a
/// time or a word like `tomorrow`.
fn looks_like_zone(word: &str) -> bool {
    let name_chars = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '+' | '-'));
    let starts_with_letter = word.starts_with(|c: char| c.is_ascii_alphabetic());
    let zone_shaped = word.contains('/') || !word.chars().any(|c| c.is_ascii_lowercase());
    name_chars && starts_with_letter && zone_shaped
}

/// A wall-clock time in one of the forms (no zone word: `zone` is the one that followed it).
fn wall_clock(text: &str, zone: Option<Tz>) -> Option<TimeInput> {
    let local = |date, time| Some(TimeInput::Local { date, time, zone });
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(at) = NaiveDateTime::parse_from_str(text, format) {
            return local(Some(at.date()), at.time());
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return local(Some(date), NaiveTime::MIN);
    }
    for format in ["%H:%M", "%H:%M:%S"] {
        if let Ok(time) = NaiveTime::parse_from_str(text, format) {
            return local(None, time);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test instant")
            .with_timezone(&Utc)
    }

    /// Parsed and resolved as the UTC flags do.
    fn at(value: &str, now: &str) -> String {
        match parse_time(value).and_then(|t| t.resolve(Tz::UTC, utc(now))) {
            Ok(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            Err(e) => format!("error: {e}"),
        }
    }

    const NOW: &str = "2026-11-23T18:00:00Z";

    #[test]
    fn every_form_is_utc_unless_a_zone_is_given() {
        assert_eq!(at("2026-11-20", NOW), "2026-11-20T00:00:00Z");
        assert_eq!(at("2026-11-20T10:30", NOW), "2026-11-20T10:30:00Z");
        assert_eq!(at("2026-11-20 10:30", NOW), "2026-11-20T10:30:00Z");
        assert_eq!(at("2026-11-20 10:30:15", NOW), "2026-11-20T10:30:15Z");
        assert_eq!(at(" 10:30 ", NOW), "2026-11-23T10:30:00Z");
        assert_eq!(at("10:30:05", NOW), "2026-11-23T10:30:05Z");
        assert_eq!(at("2026-11-20T10:30:00+01:00", NOW), "2026-11-20T09:30:00Z");
        assert_eq!(at("2026-11-20T10:30:00Z", NOW), "2026-11-20T10:30:00Z");
        assert_eq!(at("2026-11-20 10:30:00-05:00", NOW), "2026-11-20T15:30:00Z");
    }

    #[test]
    fn a_zone_after_the_time_places_it_in_that_zone() {
        assert_eq!(
            at("2026-11-20 10:30 Europe/Paris", NOW),
            "2026-11-20T09:30:00Z"
        );
        assert_eq!(at("2026-11-20T10:30 UTC", NOW), "2026-11-20T10:30:00Z");
        assert_eq!(
            at("2026-07-01 America/New_York", NOW),
            "2026-07-01T04:00:00Z"
        );
        // "Today" is the zone's: at 02:00 UTC on the 24th it is still the 23rd in New York.
        assert_eq!(
            at("10:30 America/New_York", "2026-11-24T02:00:00Z"),
            "2026-11-23T15:30:00Z"
        );
    }

    #[test]
    fn daylight_saving_gaps_are_refused_and_repeated_hours_mean_the_first() {
        let gap = at("2026-03-08 02:30 America/New_York", NOW);
        assert!(gap.contains("does not exist in America/New_York"), "{gap}");
        // 01:30 happens twice on 2026-11-01 in New York: EDT (-4) first.
        assert_eq!(
            at("2026-11-01 01:30 America/New_York", NOW),
            "2026-11-01T05:30:00Z"
        );
    }

    #[test]
    fn since_also_takes_a_duration_before_now() {
        let since = |value: &str| parse_since(value).and_then(|t| t.resolve(Tz::UTC, utc(NOW)));
        assert_eq!(since("2h"), Ok(utc("2026-11-23T16:00:00Z")));
        assert_eq!(since("1h30m"), Ok(utc("2026-11-23T16:30:00Z")));
        assert_eq!(since("2d"), Ok(utc("2026-11-21T18:00:00Z")));
        assert_eq!(since("10:30"), Ok(utc("2026-11-23T10:30:00Z")));
        assert_eq!(since("2026-11-23"), Ok(utc("2026-11-23T00:00:00Z")));
        let error = parse_since("yesterday").expect_err("not a time");
        assert!(error.contains("neither a duration"), "{error}");
        assert!(error.contains("runner help times"), "{error}");
    }

    #[test]
    fn durations_take_fixed_units_only() {
        let secs = |value: &str| parse_duration(value).map(|d| d.as_secs());
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("10m"), Ok(600));
        assert_eq!(secs("1h30m"), Ok(5400));
        assert_eq!(secs("1h 30m"), Ok(5400));
        assert_eq!(secs("2d"), Ok(172_800));
        assert_eq!(secs("1w"), Ok(604_800));
        assert_eq!(secs("3 minutes"), Ok(180));
        assert_eq!(secs("2hrs"), Ok(7200));
        // Every spelling humantime takes for a month or a year: it counts 30.44 and 365.25 days,
        // and `10M` meant as ten minutes was 304 days.
        for calendar in [
            "10M", "5 M", "1month", "2 months", "1y", "1yr", "2yrs", "1year", "2 years", "1d1y",
            "1y1d", "1.5M", "1h 2M", "M",
        ] {
            let error = parse_duration(calendar).expect_err(calendar);
            assert!(
                matches!(error, DurationError::Calendar { .. }),
                "{calendar:?}: {error:?}"
            );
            let message = error.to_string();
            assert!(message.contains("write days"), "{message}");
            assert!(message.contains(&format!("{calendar:?}")), "{message}");
        }
        for bad in ["", "soon", "5 parsecs", "10H", "-1s", "1Month"] {
            assert!(
                matches!(parse_duration(bad), Err(DurationError::Syntax { .. })),
                "{bad:?}"
            );
        }
        // An unknown unit is told the units runner takes, not humantime's, which end in months.
        let message = parse_duration("2mo").expect_err("mo").to_string();
        assert!(
            message.contains("unknown time unit \"mo\"; the units are ms, s, m, h, d and w"),
            "{message}"
        );
        assert!(!message.contains("month"), "{message}");
        // `--since` refuses them too, saying why rather than "neither a duration nor a time".
        let error = parse_since("1y").expect_err("a year");
        assert!(error.contains("write days"), "{error}");
    }

    #[test]
    fn durations_are_not_times() {
        let error = parse_time("2h").expect_err("a duration");
        assert!(error.contains("is not a time"), "{error}");
        for bad in [
            "",
            "25:00",
            "2026-13-01",
            "2026-11-23 10:30 Mars/Olympus",
            "noon",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} should be refused");
        }
    }

    /// A time followed by what can only be meant as a zone, but is none, is told so, in the
    /// words `--tz` uses, by every parser of times; other trailing words leave it "not a time".
    #[test]
    fn a_mistyped_zone_after_a_time_is_an_unknown_zone() {
        for (value, zone) in [
            ("2026-11-23 10:30 Europe/Pariss", "Europe/Pariss"),
            ("10:30 Europe/Pariss", "Europe/Pariss"),
            ("10:30 Mars/X", "Mars/X"),
            ("2026-11-23T10:30 europe/paris", "europe/paris"),
            ("2026-11-23 UTX", "UTX"),
            ("2026-11-23 10:30:15 GMT+25", "GMT+25"),
        ] {
            let unknown = format!("unknown time zone \"{zone}\"; time zones are IANA names");
            for error in [
                parse_time(value).expect_err(value),
                parse_since(value).expect_err(value),
            ] {
                assert!(error.starts_with(&unknown), "{value:?}: {error}");
            }
            if value.starts_with("2026") {
                let error = parse_fixed_time(value).expect_err(value);
                assert!(error.starts_with(&unknown), "{value:?}: {error}");
            }
        }
        for value in [
            "noon Europe/Paris",
            "10:30 tomorrow",
            "2026-11-23 25:00",
            "10:30 10:30",
            "2026-11-23 10:30 Europe/Paris extra",
        ] {
            let error = parse_time(value).expect_err(value);
            assert!(error.contains("is not a time"), "{value:?}: {error}");
        }
    }

    #[test]
    fn a_fixed_time_needs_a_date() {
        assert_eq!(
            parse_fixed_time("2026-11-23T10:30"),
            Ok(utc("2026-11-23T10:30:00Z"))
        );
        assert_eq!(
            parse_fixed_time("2026-03-08T02:30:00Z"),
            Ok(utc("2026-03-08T02:30:00Z"))
        );
        let error = parse_fixed_time("10:30").expect_err("no date");
        assert!(error.contains("has no date"), "{error}");
        assert!(parse_fixed_time("2h").is_err());
        assert_eq!(
            parse_fixed_time("4999-12-31T23:59:59Z"),
            Ok(utc("4999-12-31T23:59:59Z"))
        );
        let error = parse_fixed_time("9999-12-31").expect_err("past the last year");
        assert!(
            error.contains("after 4999, the last year runner computes fire times in"),
            "{error}"
        );
        assert_eq!(within_fire_times("then", 4999), Ok(()));
        assert_eq!(
            within_fire_times("then", 5000),
            Err("then is after 4999, the last year runner computes fire times in".to_string())
        );
    }
}
