//! Cron schedules with Debian cron semantics (Vixie cron 3.0, crontab(5)),
//! evaluated in the wall-clock time of an IANA time zone, and the catch-up
//! policy for instants that were missed.
//!
//! The syntax check is our own: Debian's grammar is strict and every error
//! names the field and the value. The validated fields are normalized to plain
//! numeric lists and handed to `croner`, which only does the field matching on
//! naive local date-times. Turning naive local times into instants, including
//! the daylight-saving rules, is done here:
//!
//! * spring forward: a fixed-time job whose local time falls in the skipped
//!   range runs once, at the transition instant; wildcard jobs have no
//!   instants there;
//! * fall back: wildcard jobs run in both passes of the repeated range,
//!   fixed-time jobs only in the first one;
//! * one fire per distinct instant.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{
    DateTime, LocalResult, NaiveDateTime, Offset, SecondsFormat, TimeDelta, TimeZone, Utc,
};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

/// A cron expression, a time zone name or a catch-up policy that was rejected.
/// `Display` is a complete message for a human.
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

/// How far (in seconds) the UTC offset may move across a transition that we
/// have to look around: naive local order and instant order only disagree
/// within this window. Real-world transitions move the clock by at most two
/// hours.
const SHIFT_WINDOW_SECS: i64 = 3 * 3600;

/// How far ahead `next_after`/`fire_times_after` search. Every valid
/// expression fires at least once in any 400-year Gregorian cycle.
const HORIZON_DAYS: i64 = 401 * 366;

/// The longest skipped local range we step over when moving a fixed-time job
/// out of a spring-forward gap (whole days have been skipped, e.g. Samoa 2011).
const MAX_GAP_MINUTES: u32 = 48 * 60;

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DOW_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FULL_MONTH_NAMES: [(&str, &str); 12] = [
    ("JANUARY", "JAN"),
    ("FEBRUARY", "FEB"),
    ("MARCH", "MAR"),
    ("APRIL", "APR"),
    ("JUNE", "JUN"),
    ("JULY", "JUL"),
    ("AUGUST", "AUG"),
    ("SEPT", "SEP"),
    ("SEPTEMBER", "SEP"),
    ("OCTOBER", "OCT"),
    ("NOVEMBER", "NOV"),
    ("DECEMBER", "DEC"),
];
const FULL_DOW_NAMES: [(&str, &str); 11] = [
    ("SUNDAY", "SUN"),
    ("MONDAY", "MON"),
    ("TUES", "TUE"),
    ("TUESDAY", "TUE"),
    ("WEDS", "WED"),
    ("WEDNESDAY", "WED"),
    ("THUR", "THU"),
    ("THURS", "THU"),
    ("THURSDAY", "THU"),
    ("FRIDAY", "FRI"),
    ("SATURDAY", "SAT"),
];

const MACROS: [(&str, [&str; 5]); 7] = [
    ("@yearly", ["0", "0", "1", "1", "*"]),
    ("@annually", ["0", "0", "1", "1", "*"]),
    ("@monthly", ["0", "0", "1", "*", "*"]),
    ("@weekly", ["0", "0", "*", "*", "0"]),
    ("@daily", ["0", "0", "*", "*", "*"]),
    ("@midnight", ["0", "0", "*", "*", "*"]),
    ("@hourly", ["0", "*", "*", "*", "*"]),
];
const MACRO_LIST: &str = "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

const FIELDS: [Field; 5] = [
    Field::Minute,
    Field::Hour,
    Field::DayOfMonth,
    Field::Month,
    Field::DayOfWeek,
];

impl Field {
    fn label(self) -> &'static str {
        match self {
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    fn min(self) -> u32 {
        match self {
            Field::Minute | Field::Hour | Field::DayOfWeek => 0,
            Field::DayOfMonth | Field::Month => 1,
        }
    }

    fn max(self) -> u32 {
        match self {
            Field::Minute => 59,
            Field::Hour => 23,
            Field::DayOfMonth => 31,
            Field::Month => 12,
            Field::DayOfWeek => 7,
        }
    }

    /// The names this field accepts, and the number of the first name.
    fn names(self) -> (&'static [&'static str], u32) {
        match self {
            Field::Month => (&MONTH_NAMES, 1),
            Field::DayOfWeek => (&DOW_NAMES, 0),
            _ => (&[], 0),
        }
    }

    /// What a value of this field is, for "... is not X".
    fn what(self) -> &'static str {
        match self {
            Field::Month => "a month",
            Field::DayOfWeek => "a day of the week",
            _ => "a number",
        }
    }

    /// What the field accepts, phrased as advice.
    fn accepted(self) -> &'static str {
        match self {
            Field::Minute => "use 0-59",
            Field::Hour => "use 0-23",
            Field::DayOfMonth => "use 1-31",
            Field::Month => "use 1-12 or JAN-DEC",
            Field::DayOfWeek => "use 0-7 (0 and 7 are Sunday) or SUN-SAT",
        }
    }
}

/// The set of values of one field, as bits (bit n = value n).
type Bits = u64;

fn has_bit(bits: Bits, n: u32) -> bool {
    n < 64 && bits & (1u64 << n) != 0
}

fn bit_values(bits: Bits) -> impl Iterator<Item = u32> {
    (0..64u32).filter(move |&n| has_bit(bits, n))
}

/// Parses one field into its value set. Errors are the part of the message
/// after "<field> field: ".
fn parse_field(field: Field, text: &str) -> Result<Bits, String> {
    let mut bits: Bits = 0;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!(
                "\"{text}\" has an empty list item; separate values with single commas (e.g. 1,15)"
            ));
        }
        bits |= parse_item(field, item)?;
    }
    if field == Field::DayOfWeek && has_bit(bits, 7) {
        // 7 is another name for Sunday.
        bits = (bits & !(1u64 << 7)) | 1;
    }
    Ok(bits)
}

/// Parses one list item: `*`, `n`, `a-b`, `*/s` or `a-b/s`.
fn parse_item(field: Field, item: &str) -> Result<Bits, String> {
    let (base, step_text) = match item.split_once('/') {
        Some((base, step)) => (base, Some(step)),
        None => (item, None),
    };
    let step = match step_text {
        None => None,
        Some(s) => Some(parse_step(item, s)?),
    };

    let (low, high) = if base == "*" {
        (field.min(), field.max())
    } else if let Some((a, b)) = base.split_once('-') {
        if a.is_empty() || b.is_empty() || b.contains('-') {
            return Err(format!(
                "\"{item}\" is not a valid range; write ranges as a-b (e.g. {}-{}); {}",
                field.min(),
                field.max(),
                field.accepted()
            ));
        }
        let low = parse_value(field, a)?;
        let high = parse_value(field, b)?;
        if low > high {
            let hint = if field == Field::DayOfWeek && high == 0 {
                format!("; Sunday is also 7, so write {low}-7")
            } else {
                format!("; write the smaller value first ({high}-{low})")
            };
            return Err(format!("\"{item}\" is a reversed range{hint}"));
        }
        (low, high)
    } else if base.is_empty() {
        return Err(format!(
            "\"{item}\" has nothing before the /: a step needs * or a range before it \
             (e.g. */{})",
            step.unwrap_or(1)
        ));
    } else {
        let value = parse_value(field, base)?;
        if let Some(step) = step {
            return Err(format!(
                "\"{item}\" has a step without a range: a step needs * or a range before it \
                 (e.g. */{step} or {value}-{}/{step})",
                field.max()
            ));
        }
        (value, value)
    };

    let step = step.unwrap_or(1);
    let mut bits: Bits = 0;
    let mut value = low;
    while value <= high {
        bits |= 1u64 << value;
        value = match value.checked_add(step) {
            Some(v) => v,
            None => break,
        };
    }
    Ok(bits)
}

fn parse_step(item: &str, step: &str) -> Result<u32, String> {
    if step.is_empty() {
        return Err(format!(
            "\"{item}\" has no step after the /; write steps as */n or a-b/n (e.g. */5)"
        ));
    }
    if !step.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "\"{item}\" has the step \"{step}\", which is not a number; \
             write steps as */n or a-b/n with n of 1 or more"
        ));
    }
    match step.parse::<u32>() {
        Ok(0) => Err(format!(
            "\"{item}\" has a step of 0; the step must be 1 or more"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("\"{item}\" has a step that is too large")),
    }
}

/// Parses a single value: a number in the field's range or a three-letter name.
fn parse_value(field: Field, token: &str) -> Result<u32, String> {
    let accepted = field.accepted();
    if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
        return match token.parse::<u32>() {
            Ok(v) if (field.min()..=field.max()).contains(&v) => Ok(v),
            _ => Err(format!("\"{token}\" is out of range; {accepted}")),
        };
    }

    let upper = token.to_ascii_uppercase();
    if !upper.is_empty() && upper.bytes().all(|b| b.is_ascii_alphabetic()) {
        let (names, first) = field.names();
        if let Some(index) = names.iter().position(|name| *name == upper) {
            // At most 12 names, so the index fits.
            return Ok(first + u32::try_from(index).unwrap_or(0));
        }
        if matches!(upper.as_str(), "L" | "W" | "LW") {
            return Err(unsupported(token, accepted));
        }
        let full_month = FULL_MONTH_NAMES.iter().find(|(full, _)| *full == upper);
        let full_dow = FULL_DOW_NAMES.iter().find(|(full, _)| *full == upper);
        let is_month = MONTH_NAMES.contains(&upper.as_str());
        let is_dow = DOW_NAMES.contains(&upper.as_str());
        if let Some((_, short)) = full_month {
            return Err(if field == Field::Month {
                format!(
                    "\"{token}\" is a full month name; only three-letter names are accepted \
                     (here {short}); {accepted}"
                )
            } else {
                format!(
                    "\"{token}\" is a month name, which only the month field accepts; {accepted}"
                )
            });
        }
        if let Some((_, short)) = full_dow {
            return Err(if field == Field::DayOfWeek {
                format!(
                    "\"{token}\" is a full day name; only three-letter names are accepted \
                     (here {short}); {accepted}"
                )
            } else {
                format!(
                    "\"{token}\" is a day-of-week name, which only the day-of-week field \
                     accepts; {accepted}"
                )
            });
        }
        if is_month {
            return Err(format!(
                "\"{token}\" is a month name, which only the month field accepts; {accepted}"
            ));
        }
        if is_dow {
            return Err(format!(
                "\"{token}\" is a day-of-week name, which only the day-of-week field accepts; \
                 {accepted}"
            ));
        }
        return Err(format!("\"{token}\" is not {}; {accepted}", field.what()));
    }

    if upper.contains(['L', 'W', '#', '?']) {
        return Err(unsupported(token, accepted));
    }
    if token.contains('*') {
        return Err(format!(
            "\"{token}\" is not valid: * stands alone or as */n; {accepted}"
        ));
    }
    if token.is_empty() {
        return Err(format!("a value is missing; {accepted}"));
    }
    Err(format!("\"{token}\" is not {}; {accepted}", field.what()))
}

fn unsupported(token: &str, accepted: &str) -> String {
    format!(
        "\"{token}\" is not supported: Debian cron has no L, W, # or ? syntax; {accepted}, \
         ranges (a-b), lists (a,b) and steps (*/n, a-b/n)"
    )
}

fn days_in_month_max(month: u32) -> u32 {
    match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A validated cron schedule (Debian semantics).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    wildcard: bool,
    /// Day-of-month and day-of-week must both match (one of them starts with `*`).
    days_and: bool,
    minutes: Bits,
    hours: Bits,
    days_of_month: Bits,
    months: Bits,
    days_of_week: Bits,
    cron: Cron,
}

impl CronSchedule {
    /// Parse and validate (Debian syntax). Err message names field + value.
    pub fn parse(expr: &str) -> Result<CronSchedule, CronError> {
        let trimmed = expr.trim();
        let fail =
            |msg: String| CronError::new(format!("invalid cron expression \"{trimmed}\": {msg}"));

        let tokens: Vec<&str> = trimmed.split_whitespace().collect();
        let fields: [&str; 5] = match tokens.first() {
            Some(first) if first.starts_with('@') => {
                if tokens.len() > 1 {
                    return Err(fail(format!(
                        "the macro \"{first}\" must be the whole expression, without other fields"
                    )));
                }
                expand_macro(first).map_err(fail)?
            }
            _ => match <[&str; 5]>::try_from(tokens.as_slice()) {
                Ok(fields) => fields,
                Err(_) => return Err(fail(field_count_message(tokens.len()))),
            },
        };

        let mut bits: [Bits; 5] = [0; 5];
        for ((field, text), slot) in FIELDS.iter().zip(fields.iter()).zip(bits.iter_mut()) {
            *slot = parse_field(*field, text)
                .map_err(|msg| fail(format!("{} field: {msg}", field.label())))?;
        }
        let [minutes, hours, days_of_month, months, days_of_week] = bits;
        let [minute_text, hour_text, dom_text, month_text, dow_text] = fields;

        let wildcard = minute_text.starts_with('*') || hour_text.starts_with('*');
        let days_and = dom_text.starts_with('*') || dow_text.starts_with('*');

        // With the OR rule every month has every weekday, so the expression
        // fires. With the AND rule it fires iff some listed day exists in some
        // listed month: over any 28 years without a skipped leap day (such as
        // 2000-2027) every date, Feb 29 included, falls on every weekday.
        // (The tests cross-check this with a 29-year search from 2000.)
        if days_and {
            let possible = bit_values(months)
                .any(|m| bit_values(days_of_month).any(|d| d <= days_in_month_max(m)));
            if !possible {
                return Err(fail(format!(
                    "day-of-month field: \"{dom_text}\" never occurs in month field \
                     \"{month_text}\" (no such date), so the expression would never fire"
                )));
            }
        }

        let normalized = [minutes, hours, days_of_month, months, days_of_week]
            .iter()
            .map(|&b| {
                bit_values(b)
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(" ");
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .dom_and_dow(days_and)
            .build()
            .parse(&normalized)
            .map_err(|e| {
                fail(format!(
                    "internal error: the normalized pattern \"{normalized}\" was rejected: {e}"
                ))
            })?;

        Ok(CronSchedule {
            expression: trimmed.to_string(),
            wildcard,
            days_and,
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            cron,
        })
    }

    /// The expression exactly as the user wrote it (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// true for wildcard jobs (minute or hour field starts with `*`, or @hourly).
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// Fire instants strictly after `after`, ascending, at most `limit`.
    pub fn fire_times_after(
        &self,
        tz: Tz,
        after: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        if limit == 0 {
            return Vec::new();
        }
        let end = local_of(tz, after)
            .and_then(|local| local.checked_add_signed(TimeDelta::days(HORIZON_DAYS)))
            .unwrap_or(NaiveDateTime::MAX);
        self.walk(tz, after, end).take(limit).collect()
    }

    /// The first fire instant strictly after `after` (None only if none within the search horizon).
    pub fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.fire_times_after(tz, after, 1).into_iter().next()
    }

    /// Fire instants in (after, until], ascending. If there are more than `keep_newest`,
    /// return only the newest `keep_newest` of them plus the count of older ones dropped.
    /// Memory is bounded by `keep_newest`, whatever the length of the range.
    pub fn fire_times_between(
        &self,
        tz: Tz,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        keep_newest: usize,
    ) -> FireTimes {
        let mut kept: VecDeque<DateTime<Utc>> = VecDeque::new();
        let mut older_dropped: u64 = 0;
        if until > after {
            // No naive local time this far past `until` can map to an instant
            // at or before it.
            let end = local_of(tz, until)
                .and_then(|local| local.checked_add_signed(TimeDelta::days(2)))
                .unwrap_or(NaiveDateTime::MAX);
            for instant in self.walk(tz, after, end) {
                if instant > until {
                    break;
                }
                if keep_newest == 0 {
                    older_dropped += 1;
                    continue;
                }
                if kept.len() == keep_newest {
                    kept.pop_front();
                    older_dropped += 1;
                }
                kept.push_back(instant);
            }
        }
        FireTimes {
            instants: kept.into(),
            older_dropped,
        }
    }

    /// Walks the fire instants after `after`, searching naive local times up to `end`.
    fn walk(&self, tz: Tz, after: DateTime<Utc>, end: NaiveDateTime) -> FireIter<'_> {
        // A naive local time before local(after) can still map to an instant
        // after `after` if the offset drops (fall back) shortly after it.
        let start = local_of(tz, after).and_then(|local| {
            let now_offset = offset_secs(tz, after);
            let lowest_soon = (1..=3)
                .filter_map(|h| after.checked_add_signed(TimeDelta::hours(h)))
                .map(|t| offset_secs(tz, t))
                .min()
                .unwrap_or(now_offset);
            let lookback = (now_offset - lowest_soon).clamp(0, SHIFT_WINDOW_SECS);
            // Exclusive searches start one second later.
            local.checked_sub_signed(TimeDelta::seconds(lookback + 1))
        });
        FireIter {
            schedule: self,
            tz,
            after,
            cursor: start.unwrap_or(NaiveDateTime::MIN),
            end,
            pending: BTreeMap::new(),
            last: None,
            exhausted: start.is_none(),
        }
    }

    /// Whether a naive local time matches the fields (Debian's day rule).
    /// Independent of croner; cross-checks it in debug builds and tests.
    fn matches_local(&self, local: NaiveDateTime) -> bool {
        use chrono::{Datelike, Timelike};
        let dom = has_bit(self.days_of_month, local.day());
        let dow = has_bit(self.days_of_week, local.weekday().num_days_from_sunday());
        let day = if self.days_and {
            dom && dow
        } else {
            dom || dow
        };
        local.second() == 0
            && has_bit(self.minutes, local.minute())
            && has_bit(self.hours, local.hour())
            && has_bit(self.months, local.month())
            && day
    }
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expression)
    }
}

impl FromStr for CronSchedule {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronSchedule::parse(s)
    }
}

fn expand_macro(token: &str) -> Result<[&'static str; 5], String> {
    if let Some((_, fields)) = MACROS.iter().find(|(name, _)| *name == token) {
        return Ok(*fields);
    }
    if token == "@reboot" {
        return Err(
            "@reboot is not supported: it is not a schedule; use cron's own @reboot crontab \
             line instead"
                .to_string(),
        );
    }
    let lower = token.to_ascii_lowercase();
    if lower == "@reboot" {
        return Err(format!(
            "\"{token}\" is not supported (macros are lower case, and @reboot is not a \
             schedule); use cron's own @reboot crontab line instead"
        ));
    }
    if MACROS.iter().any(|(name, _)| *name == lower) {
        return Err(format!(
            "the macro \"{token}\" must be written in lower case ({lower}); macros are {MACRO_LIST}"
        ));
    }
    Err(format!(
        "\"{token}\" is not a known macro; use one of {MACRO_LIST}, or five fields"
    ))
}

fn field_count_message(found: usize) -> String {
    let expected = "expected 5 fields (minute hour day-of-month month day-of-week)";
    match found {
        0 => format!("the expression is empty; {expected} or a macro such as @daily"),
        1..=4 => format!("{expected}, found {found}"),
        _ => format!(
            "{expected}, found {found}; seconds and year fields are not supported, and the \
             command does not belong in the schedule"
        ),
    }
}

/// The local wall time of an instant, or None when it is out of chrono's range.
fn local_of(tz: Tz, instant: DateTime<Utc>) -> Option<NaiveDateTime> {
    instant
        .naive_utc()
        .checked_add_signed(TimeDelta::seconds(offset_secs(tz, instant)))
}

/// The zone's UTC offset at an instant, in seconds east of UTC.
fn offset_secs(tz: Tz, instant: DateTime<Utc>) -> i64 {
    i64::from(
        tz.offset_from_utc_datetime(&instant.naive_utc())
            .fix()
            .local_minus_utc(),
    )
}

/// The instant a fixed-time job runs at when its local time `naive` was
/// skipped by a spring-forward transition: the transition instant, i.e. the
/// earliest instant whose local time is later than `naive`.
fn first_instant_after_gap(tz: Tz, naive: NaiveDateTime) -> Option<DateTime<Utc>> {
    let mut probe = naive;
    for _ in 0..MAX_GAP_MINUTES {
        probe = probe.checked_add_signed(TimeDelta::minutes(1))?;
        let valid = match tz.from_local_datetime(&probe) {
            LocalResult::Single(t) => t,
            LocalResult::Ambiguous(first, _) => first,
            LocalResult::None => continue,
        };
        // Transitions are on whole minutes nowadays; historical ones may not
        // be, so find the exact second in the last minute.
        let hi = valid.with_timezone(&Utc);
        let later_than_naive = |t: DateTime<Utc>| local_of(tz, t).is_some_and(|l| l > naive);
        let (mut lo_s, mut hi_s) = (-60i64, 0i64); // later_than_naive(hi + hi_s) holds
        while hi_s - lo_s > 1 {
            let mid = (lo_s + hi_s) / 2;
            match hi.checked_add_signed(TimeDelta::seconds(mid)) {
                Some(t) if later_than_naive(t) => hi_s = mid,
                _ => lo_s = mid,
            }
        }
        return hi.checked_add_signed(TimeDelta::seconds(hi_s));
    }
    None
}

/// Iterator over fire instants, ascending and distinct.
///
/// It walks matching naive local times with croner and maps each to its
/// instants. Around a fall-back transition the naive order differs from the
/// instant order, so instants wait in `pending` until the walk is far enough
/// ahead that no earlier instant can still appear.
struct FireIter<'a> {
    schedule: &'a CronSchedule,
    tz: Tz,
    after: DateTime<Utc>,
    /// The last naive local time searched; every earlier match is resolved.
    cursor: NaiveDateTime,
    /// Naive local times after this are not searched.
    end: NaiveDateTime,
    /// Candidate instants and the cursor position from which they are safe to emit.
    pending: BTreeMap<DateTime<Utc>, NaiveDateTime>,
    last: Option<DateTime<Utc>>,
    exhausted: bool,
}

impl FireIter<'_> {
    fn advance(&mut self) {
        match self.schedule.cron.find_next_occurrence(&self.cursor, false) {
            Ok(naive) if naive <= self.end => {
                self.cursor = naive;
                self.resolve(naive);
            }
            _ => self.exhausted = true,
        }
    }

    fn resolve(&mut self, naive: NaiveDateTime) {
        debug_assert!(
            self.schedule.matches_local(naive),
            "croner matched {naive} for {}",
            self.schedule.expression
        );
        match self.tz.from_local_datetime(&naive) {
            LocalResult::Single(t) => self.push(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, second) => {
                self.push(first.with_timezone(&Utc));
                if self.schedule.wildcard {
                    self.push(second.with_timezone(&Utc));
                }
            }
            LocalResult::None => {
                if !self.schedule.wildcard {
                    if let Some(t) = first_instant_after_gap(self.tz, naive) {
                        self.push(t);
                    }
                }
            }
        }
    }

    fn push(&mut self, instant: DateTime<Utc>) {
        if instant <= self.after || self.last.is_some_and(|last| instant <= last) {
            return;
        }
        if self.pending.contains_key(&instant) {
            return;
        }
        // A later naive time N' maps to an instant before `instant` only if
        // the offset was higher shortly before `instant` (a fall back), by
        // more than N' - local(instant). So wait until the cursor is past
        // local(instant) by that drop.
        let offset = offset_secs(self.tz, instant);
        let drop = (1..=3)
            .filter_map(|h| instant.checked_sub_signed(TimeDelta::hours(h)))
            .map(|t| offset_secs(self.tz, t) - offset)
            .max()
            .unwrap_or(0)
            .clamp(0, SHIFT_WINDOW_SECS);
        let ready_at = instant
            .naive_utc()
            .checked_add_signed(TimeDelta::seconds(offset + drop))
            .unwrap_or(NaiveDateTime::MAX);
        self.pending.insert(instant, ready_at);
    }
}

impl Iterator for FireIter<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        loop {
            if let Some((&instant, &ready_at)) = self.pending.first_key_value() {
                if self.exhausted || self.cursor >= ready_at {
                    self.pending.remove(&instant);
                    self.last = Some(instant);
                    return Some(instant);
                }
            } else if self.exhausted {
                return None;
            }
            self.advance();
        }
    }
}

/// Fire instants of a range, possibly truncated to the newest ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireTimes {
    pub instants: Vec<DateTime<Utc>>,
    pub older_dropped: u64,
}

/// Parse an IANA zone name ("UTC", "America/New_York").
pub fn parse_zone(name: &str) -> Result<Tz, CronError> {
    let trimmed = name.trim();
    trimmed.parse::<Tz>().map_err(|_| {
        CronError::new(format!(
            "unknown time zone \"{trimmed}\"; time zones are IANA names like Europe/Berlin, \
             America/New_York or UTC"
        ))
    })
}

/// What to do with scheduled instants that were missed (the runner was not
/// ticking, or a tick came late).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Run only the newest missed instant.
    Latest,
    /// Run every missed instant, up to [`CATCH_UP_ALL_LIMIT`] of the newest.
    All,
    /// Run an instant only if it is no older than the grace period.
    None,
}

/// The most missed instants `CatchUp::All` runs.
pub const CATCH_UP_ALL_LIMIT: usize = 100;

impl CatchUp {
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::None => "none",
        }
    }
}

impl fmt::Display for CatchUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CatchUp {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "latest" => Ok(CatchUp::Latest),
            "all" => Ok(CatchUp::All),
            "none" => Ok(CatchUp::None),
            _ => Err(CronError::new(format!(
                "invalid catch-up policy \"{}\"; use one of: latest, all, none",
                s.trim()
            ))),
        }
    }
}

/// Whether one due instant runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run,
    /// Skipped, with a short human reason.
    Skip(String),
}

/// Given the due instants (ascending, all <= now), decide which run and which are skipped.
/// latest: only the newest runs, all others Skip. all: newest CATCH_UP_ALL_LIMIT run, older Skip.
/// none: an instant runs iff now - instant <= grace; otherwise Skip (missed).
/// The result has one entry per due instant, in the given order.
pub fn plan_catch_up(
    due: &[DateTime<Utc>],
    now: DateTime<Utc>,
    policy: CatchUp,
    grace: Duration,
) -> Vec<(DateTime<Utc>, Decision)> {
    match policy {
        CatchUp::Latest => {
            let newest_index = due
                .iter()
                .enumerate()
                .max_by_key(|(_, t)| **t)
                .map(|(i, _)| i);
            due.iter()
                .enumerate()
                .map(|(i, &t)| {
                    let decision = match newest_index {
                        Some(newest) if newest != i => Decision::Skip(format!(
                            "catch-up latest: superseded by {}",
                            due[newest].to_rfc3339_opts(SecondsFormat::Secs, true)
                        )),
                        _ => Decision::Run,
                    };
                    (t, decision)
                })
                .collect()
        }
        CatchUp::All => {
            let skipped = due.len().saturating_sub(CATCH_UP_ALL_LIMIT);
            due.iter()
                .enumerate()
                .map(|(i, &t)| {
                    let decision = if i < skipped {
                        Decision::Skip(format!(
                            "catch-up all: more than {CATCH_UP_ALL_LIMIT} missed instants"
                        ))
                    } else {
                        Decision::Run
                    };
                    (t, decision)
                })
                .collect()
        }
        CatchUp::None => {
            let grace_delta = TimeDelta::from_std(grace).unwrap_or(TimeDelta::MAX);
            due.iter()
                .map(|&t| {
                    let late = now.signed_duration_since(t);
                    let decision = if late <= grace_delta {
                        Decision::Run
                    } else {
                        Decision::Skip(format!(
                            "missed by {} (grace {})",
                            format_delta(late.to_std().unwrap_or(Duration::ZERO)),
                            format_delta(grace)
                        ))
                    };
                    (t, decision)
                })
                .collect()
        }
    }
}

/// Formats a duration compactly: `2h10m`, `5m`, `1d3h`, `45s`, `250ms`.
fn format_delta(d: Duration) -> String {
    let total = d.as_secs();
    if total == 0 {
        let ms = d.subsec_millis();
        return if ms == 0 {
            "0s".to_string()
        } else {
            format!("{ms}ms")
        };
    }
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total % 86_400 / 3600,
        total % 3600 / 60,
        total % 60,
    );
    let mut out = String::new();
    for (value, unit) in [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")] {
        if value > 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, NaiveDate, Timelike};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("test instant")
            .with_timezone(&Utc)
    }

    fn sched(expr: &str) -> CronSchedule {
        match CronSchedule::parse(expr) {
            Ok(s) => s,
            Err(e) => panic!("{expr:?} should parse: {e}"),
        }
    }

    fn err(expr: &str) -> String {
        match CronSchedule::parse(expr) {
            Ok(_) => panic!("{expr:?} should be rejected"),
            Err(e) => e.to_string(),
        }
    }

    fn assert_err(expr: &str, needles: &[&str]) {
        let msg = err(expr);
        assert!(
            msg.starts_with(&format!("invalid cron expression \"{}\": ", expr.trim())),
            "{msg}"
        );
        for needle in needles {
            assert!(msg.contains(needle), "{expr:?}: {msg:?} lacks {needle:?}");
        }
    }

    const NY: Tz = chrono_tz::America::New_York;
    const BERLIN: Tz = chrono_tz::Europe::Berlin;
    const LORD_HOWE: Tz = chrono_tz::Australia::Lord_Howe;

    /// Fire instants in the UTC window [from, to).
    fn fires(expr: &str, tz: Tz, from: &str, to: &str) -> Vec<String> {
        let from = utc(from) - TimeDelta::seconds(1);
        let to = utc(to) - TimeDelta::seconds(1);
        sched(expr)
            .fire_times_between(tz, from, to, usize::MAX)
            .instants
            .iter()
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
            .collect()
    }

    fn days_fired(expr: &str, from: &str, to: &str) -> Vec<u32> {
        let s = sched(expr);
        s.fire_times_between(Tz::UTC, utc(from), utc(to), usize::MAX)
            .instants
            .iter()
            .map(|t| t.day())
            .collect()
    }

    // ---------------------------------------------------------------- syntax

    #[test]
    fn accepts_every_syntax_form() {
        for expr in [
            "* * * * *",
            "0 0 * * *",
            "59 23 31 12 7",
            "0-59 0-23 1-31 1-12 0-7",
            "1,2,3 4,5 6,7 8,9 1,2",
            "*/5 */2 */3 */4 */2",
            "10-50/10 0-12/3 1-31/7 1-12/6 1-5/2",
            "*/15,7 * * * *",
            "0 0 * jan,Mar,DEC mon-FRI",
            "0 0 * JAN-jun sun,sat",
            "0 0 * feb-nov/2 MON-FRI/2",
            "  0\t0   *  *  *  ",
            "00 09 01 01 00",
            "0 0 1,15 * FRI",
            "0 0 29 2 *",
            "0 0 31 * *",
            "0 0 * * 5-7",
            "*/100 * * * *",
        ] {
            let s = sched(expr);
            assert_eq!(s.expression(), expr.trim());
            assert!(
                s.next_after(Tz::UTC, utc("2026-01-01T00:00:00Z")).is_some(),
                "{expr}"
            );
        }
    }

    #[test]
    fn parsed_fields_have_the_expected_values() {
        let s = sched("10-50/20 0-12/6 1-31/10 */5 MON-FRI/2");
        assert_eq!(bit_values(s.minutes).collect::<Vec<_>>(), [10, 30, 50]);
        assert_eq!(bit_values(s.hours).collect::<Vec<_>>(), [0, 6, 12]);
        assert_eq!(
            bit_values(s.days_of_month).collect::<Vec<_>>(),
            [1, 11, 21, 31]
        );
        assert_eq!(bit_values(s.months).collect::<Vec<_>>(), [1, 6, 11]);
        assert_eq!(bit_values(s.days_of_week).collect::<Vec<_>>(), [1, 3, 5]);
        // `*` in day-of-week spans 0-7, so */2 is 0,2,4,6 and */7 is Sunday.
        let s = sched("0 0 * * */2");
        assert_eq!(bit_values(s.days_of_week).collect::<Vec<_>>(), [0, 2, 4, 6]);
        let s = sched("0 0 * * */7");
        assert_eq!(bit_values(s.days_of_week).collect::<Vec<_>>(), [0]);
        let s = sched("0 0 * * 6-7");
        assert_eq!(bit_values(s.days_of_week).collect::<Vec<_>>(), [0, 6]);
        let s = sched("0 0 * oct-DEC Sun,wEd");
        assert_eq!(bit_values(s.months).collect::<Vec<_>>(), [10, 11, 12]);
        assert_eq!(bit_values(s.days_of_week).collect::<Vec<_>>(), [0, 3]);
    }

    #[test]
    fn names_in_any_case_match_numbers() {
        let from = utc("2026-01-01T00:00:00Z");
        for (named, numeric) in [
            ("0 0 * * mon-fri", "0 0 * * 1-5"),
            ("0 0 * * Sat,SUN", "0 0 * * 6,0"),
            ("0 0 1 jan,MAR,Dec *", "0 0 1 1,3,12 *"),
            ("0 0 1 Feb-Apr *", "0 0 1 2-4 *"),
        ] {
            assert_eq!(
                sched(named).fire_times_after(Tz::UTC, from, 30),
                sched(numeric).fire_times_after(Tz::UTC, from, 30),
                "{named}"
            );
        }
    }

    #[test]
    fn zero_and_seven_are_sunday() {
        let from = utc("2026-01-01T00:00:00Z");
        let zero = sched("0 0 * * 0").fire_times_after(Tz::UTC, from, 10);
        let seven = sched("0 0 * * 7").fire_times_after(Tz::UTC, from, 10);
        let sun = sched("0 0 * * sun").fire_times_after(Tz::UTC, from, 10);
        assert_eq!(zero, seven);
        assert_eq!(zero, sun);
        assert_eq!(zero.len(), 10);
        assert!(zero
            .iter()
            .all(|t| t.weekday() == chrono::Weekday::Sun && t.hour() == 0));
        assert_eq!(zero[0], utc("2026-01-04T00:00:00Z"));
    }

    #[test]
    fn macros_expand_like_debian() {
        let from = utc("2026-01-01T00:00:00Z");
        for (mac, expanded) in [
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@hourly", "0 * * * *"),
        ] {
            let m = sched(mac);
            let e = sched(expanded);
            assert_eq!(m.expression(), mac);
            assert_eq!(m.is_wildcard(), e.is_wildcard(), "{mac}");
            for tz in [Tz::UTC, NY] {
                assert_eq!(
                    m.fire_times_after(tz, from, 5),
                    e.fire_times_after(tz, from, 5),
                    "{mac}"
                );
            }
        }
        assert!(sched("@hourly").is_wildcard());
        assert!(!sched("@daily").is_wildcard());
        assert_eq!(
            sched("@weekly").next_after(Tz::UTC, from),
            Some(utc("2026-01-04T00:00:00Z"))
        );
    }

    #[test]
    fn wildcard_classification() {
        for expr in [
            "* * * * *",
            "*/5 1 * * *",
            "0 * * * *",
            "0 */2 * * *",
            "*,5 1 * * *",
        ] {
            assert!(sched(expr).is_wildcard(), "{expr}");
        }
        for expr in [
            "0 0 * * *",
            "0,30 2 * * *",
            "0-10 1-2 * * *",
            "5 1-2/1 * * *",
        ] {
            assert!(!sched(expr).is_wildcard(), "{expr}");
        }
    }

    #[test]
    fn rejects_wrong_field_counts() {
        assert_err("", &["empty", "5 fields"]);
        assert_err("   ", &["empty"]);
        assert_err("* * * *", &["expected 5 fields", "found 4"]);
        assert_err("0 0 * * * *", &["expected 5 fields", "found 6"]);
        assert_err("0 0 * * * /bin/true", &["found 6"]);
        assert_err("0 0 0 * * * 2026", &["found 7"]);
    }

    #[test]
    fn rejects_quartz_and_other_extensions() {
        assert_err(
            "0 0 L * *",
            &["day-of-month field", "\"L\"", "not supported", "use 1-31"],
        );
        assert_err(
            "0 0 15W * *",
            &["day-of-month field", "\"15W\"", "not supported"],
        );
        assert_err(
            "0 0 LW * *",
            &["day-of-month field", "\"LW\"", "not supported"],
        );
        assert_err(
            "0 0 * * 5L",
            &["day-of-week field", "\"5L\"", "not supported"],
        );
        assert_err(
            "0 0 * * 1#2",
            &["day-of-week field", "\"1#2\"", "not supported"],
        );
        assert_err(
            "0 0 ? * 1",
            &["day-of-month field", "\"?\"", "not supported"],
        );
        assert_err(
            "0 0 * * ?",
            &["day-of-week field", "\"?\"", "not supported"],
        );
        assert_err("0 0 W * *", &["day-of-month field", "\"W\""]);
    }

    #[test]
    fn rejects_bad_steps() {
        assert_err(
            "0/10 * * * *",
            &[
                "minute field",
                "\"0/10\"",
                "step needs * or a range",
                "*/10",
                "0-59/10",
            ],
        );
        assert_err("* 5/2 * * *", &["hour field", "\"5/2\"", "step needs"]);
        assert_err("*/0 * * * *", &["minute field", "\"*/0\"", "step of 0"]);
        assert_err(
            "* * 1-10/0 * *",
            &["day-of-month field", "\"1-10/0\"", "step of 0"],
        );
        assert_err("*/ * * * *", &["minute field", "\"*/\"", "no step"]);
        assert_err("*/x * * * *", &["minute field", "\"x\"", "not a number"]);
        assert_err("*/2/3 * * * *", &["minute field", "\"2/3\""]);
        assert_err("/10 * * * *", &["minute field"]);
    }

    #[test]
    fn rejects_empty_list_items() {
        assert_err(
            "1,,2 * * * *",
            &["minute field", "\"1,,2\"", "empty list item"],
        );
        assert_err("* 1, * * *", &["hour field", "\"1,\"", "empty list item"]);
        assert_err(
            "* * ,1 * *",
            &["day-of-month field", "\",1\"", "empty list item"],
        );
        assert_err("* * * * 1,2,", &["day-of-week field", "empty list item"]);
    }

    #[test]
    fn rejects_out_of_range_numbers() {
        assert_err(
            "60 * * * *",
            &["minute field", "\"60\"", "out of range", "use 0-59"],
        );
        assert_err(
            "* 24 * * *",
            &["hour field", "\"24\"", "out of range", "use 0-23"],
        );
        assert_err("* * 0 * *", &["day-of-month field", "\"0\"", "use 1-31"]);
        assert_err("* * 32 * *", &["day-of-month field", "\"32\"", "use 1-31"]);
        assert_err(
            "* * * 0 *",
            &["month field", "\"0\"", "use 1-12 or JAN-DEC"],
        );
        assert_err(
            "* * * 13 *",
            &["month field", "\"13\"", "use 1-12 or JAN-DEC"],
        );
        assert_err("* * * * 8", &["day-of-week field", "\"8\"", "SUN-SAT"]);
        assert_err("0-60 * * * *", &["minute field", "\"60\""]);
        assert_err(
            "99999999999999999999 * * * *",
            &["minute field", "out of range"],
        );
        assert_err(
            "-1 * * * *",
            &["minute field", "\"-1\"", "not a valid range"],
        );
        assert_err(
            "1-2-3 * * * *",
            &["minute field", "\"1-2-3\"", "not a valid range"],
        );
        assert_err(
            "5- * * * *",
            &["minute field", "\"5-\"", "not a valid range"],
        );
        assert_err("1.5 * * * *", &["minute field", "\"1.5\"", "not a number"]);
        assert_err("*-5 * * * *", &["minute field", "\"*\""]);
        assert_err("** * * * *", &["minute field", "\"**\""]);
    }

    #[test]
    fn rejects_reversed_ranges() {
        assert_err(
            "5-1 * * * *",
            &["minute field", "\"5-1\"", "reversed", "1-5"],
        );
        assert_err(
            "* * * DEC-JAN *",
            &["month field", "\"DEC-JAN\"", "reversed"],
        );
        assert_err(
            "* * * * SAT-SUN",
            &["day-of-week field", "\"SAT-SUN\"", "6-7"],
        );
        assert_err(
            "* * 20-10/2 * *",
            &["day-of-month field", "\"20-10/2\"", "reversed"],
        );
    }

    #[test]
    fn rejects_names_in_the_wrong_field_and_full_names() {
        assert_err(
            "0 0 * MON *",
            &["month field", "\"MON\"", "day-of-week name", "JAN-DEC"],
        );
        assert_err(
            "0 0 * * JAN",
            &["day-of-week field", "\"JAN\"", "month name", "SUN-SAT"],
        );
        assert_err(
            "0 0 * * mon-jan",
            &["day-of-week field", "\"jan\"", "month name"],
        );
        assert_err(
            "0 MON * * *",
            &["hour field", "\"MON\"", "day-of-week name"],
        );
        assert_err(
            "0 0 JAN * *",
            &["day-of-month field", "\"JAN\"", "month name"],
        );
        assert_err(
            "0 0 * * MONDAY",
            &["day-of-week field", "\"MONDAY\"", "full day name", "MON"],
        );
        assert_err(
            "0 0 * JANUARY *",
            &["month field", "\"JANUARY\"", "full month name", "JAN"],
        );
        assert_err("0 0 * * Thurs", &["day-of-week field", "\"Thurs\"", "THU"]);
        assert_err(
            "0 0 * MONDAY *",
            &["month field", "\"MONDAY\"", "day-of-week name"],
        );
        assert_err(
            "0 0 * JANX *",
            &["month field: \"JANX\" is not a month; use 1-12 or JAN-DEC"],
        );
        assert_eq!(
            err("0 0 * JANX *"),
            "invalid cron expression \"0 0 * JANX *\": month field: \"JANX\" is not a month; \
             use 1-12 or JAN-DEC"
        );
        assert_err(
            "0 0 * * FOO",
            &["day-of-week field", "\"FOO\"", "not a day of the week"],
        );
        assert_err("abc * * * *", &["minute field", "\"abc\"", "not a number"]);
    }

    #[test]
    fn rejects_reboot_and_unknown_or_upper_case_macros() {
        let msg = err("@reboot");
        assert!(msg.contains("@reboot"), "{msg}");
        assert!(
            msg.contains("use cron's own @reboot crontab line instead"),
            "{msg}"
        );
        assert_err("@REBOOT", &["@reboot crontab line"]);
        assert_err(
            "@weekdays",
            &["\"@weekdays\"", "not a known macro", "@daily"],
        );
        assert_err("@", &["\"@\"", "not a known macro"]);
        assert_err("@DAILY", &["\"@DAILY\"", "lower case", "@daily"]);
        assert_err("@Hourly", &["\"@Hourly\"", "lower case"]);
        assert_err("@daily 5", &["\"@daily\"", "whole expression"]);
    }

    #[test]
    fn rejects_expressions_that_never_fire() {
        assert_err(
            "0 0 30 2 *",
            &[
                "day-of-month field",
                "\"30\"",
                "month field",
                "\"2\"",
                "never fire",
            ],
        );
        assert_err(
            "0 0 31 4 *",
            &["day-of-month field", "\"31\"", "\"4\"", "never fire"],
        );
        assert_err("0 0 31 apr,jun,sep,nov *", &["never fire"]);
        assert_err("0 0 30,31 feb */2", &["never fire"]);
        // These do fire.
        sched("0 0 29 2 *");
        sched("0 0 31 4,5 *");
        // OR rule: the 30th of February never comes, but Mondays in February do.
        sched("0 0 30 2 MON");
        sched("0 0 29 2 */7");
    }

    /// The analytic never-fires check agrees with a search over 29 years from
    /// 2000, which includes every date on every weekday.
    #[test]
    fn never_fires_check_agrees_with_a_search() {
        let from = utc("2000-01-01T00:00:00Z");
        let until = utc("2029-01-01T00:00:00Z");
        let doms = ["*", "1", "29", "30", "31", "*/2", "30,31", "*/15"];
        let months = ["*", "2", "4", "2,4", "*/2", "jun", "2-3"];
        let dows = ["*", "0", "1", "*/3", "sat", "1-5"];
        for dom in doms {
            for month in months {
                for dow in dows {
                    let expr = format!("0 0 {dom} {month} {dow}");
                    let parsed = CronSchedule::parse(&expr);
                    // Check with the reference matcher, day by day.
                    let probe = sched(&format!("0 0 {dom} * {dow}"));
                    let month_bits = parse_field(Field::Month, month).expect("month");
                    let mut found = false;
                    let mut t = from;
                    while t < until && !found {
                        let n = t.naive_utc();
                        found = has_bit(month_bits, n.month()) && probe.matches_local(n);
                        t += TimeDelta::days(1);
                    }
                    assert_eq!(parsed.is_ok(), found, "{expr}");
                    if let Ok(s) = parsed {
                        let next = s.next_after(Tz::UTC, from - TimeDelta::seconds(1));
                        assert!(next.is_some_and(|n| n < until), "{expr}");
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------- day rule

    #[test]
    fn day_fields_or_when_neither_starts_with_star() {
        // January 2026: Fridays are 2, 9, 16, 23, 30.
        assert_eq!(
            days_fired(
                "0 0 1,15 * FRI",
                "2025-12-31T12:00:00Z",
                "2026-01-31T12:00:00Z"
            ),
            [1, 2, 9, 15, 16, 23, 30]
        );
    }

    #[test]
    fn day_fields_and_when_one_starts_with_star() {
        // January 2026: Mondays are 5, 12, 19, 26; the odd ones are 5 and 19.
        assert_eq!(
            days_fired(
                "0 0 */2 * MON",
                "2025-12-31T12:00:00Z",
                "2026-01-31T12:00:00Z"
            ),
            [5, 19]
        );
        // Day-of-week starting with * also switches to AND.
        assert_eq!(
            days_fired(
                "0 0 1-10 * */7",
                "2025-12-31T12:00:00Z",
                "2026-01-31T12:00:00Z"
            ),
            [4]
        );
        assert_eq!(
            days_fired(
                "0 0 * * FRI",
                "2025-12-31T12:00:00Z",
                "2026-01-31T12:00:00Z"
            ),
            [2, 9, 16, 23, 30]
        );
    }

    // ------------------------------------------------------------ calendar

    #[test]
    fn february_29_and_month_ends() {
        let s = sched("0 0 29 2 *");
        assert_eq!(
            s.next_after(Tz::UTC, utc("2026-01-01T00:00:00Z")),
            Some(utc("2028-02-29T00:00:00Z"))
        );
        // 2100 is not a leap year.
        assert_eq!(
            s.next_after(Tz::UTC, utc("2096-03-01T00:00:00Z")),
            Some(utc("2104-02-29T00:00:00Z"))
        );
        let s = sched("0 0 31 * *");
        let got = s.fire_times_after(Tz::UTC, utc("2026-01-01T00:00:00Z"), 7);
        let months: Vec<u32> = got.iter().map(|t| t.month()).collect();
        assert_eq!(months, [1, 3, 5, 7, 8, 10, 12]);
        assert!(got.iter().all(|t| t.day() == 31));
    }

    #[test]
    fn results_are_strictly_after() {
        let s = sched("0 0 * * *");
        assert_eq!(
            s.next_after(Tz::UTC, utc("2026-01-01T00:00:00Z")),
            Some(utc("2026-01-02T00:00:00Z"))
        );
        assert_eq!(
            s.next_after(Tz::UTC, utc("2025-12-31T23:59:59Z")),
            Some(utc("2026-01-01T00:00:00Z"))
        );
        let s = sched("* * * * *");
        assert_eq!(
            s.next_after(Tz::UTC, utc("2026-01-01T00:00:30Z")),
            Some(utc("2026-01-01T00:01:00Z"))
        );
        assert!(s
            .fire_times_after(Tz::UTC, utc("2026-01-01T00:00:00Z"), 0)
            .is_empty());
    }

    #[test]
    fn zones_shift_wall_clock() {
        let s = sched("0 9 * * *");
        assert_eq!(
            s.next_after(NY, utc("2026-01-05T00:00:00Z")),
            Some(utc("2026-01-05T14:00:00Z"))
        );
        assert_eq!(
            s.next_after(NY, utc("2026-07-05T00:00:00Z")),
            Some(utc("2026-07-05T13:00:00Z"))
        );
        assert_eq!(
            s.next_after(BERLIN, utc("2026-01-05T00:00:00Z")),
            Some(utc("2026-01-05T08:00:00Z"))
        );
    }

    // ------------------------------------------------------------------ DST

    #[test]
    fn new_york_spring_forward() {
        let day = ("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z");
        assert_eq!(
            fires("30 2 * * *", NY, day.0, day.1),
            ["2026-03-08T07:00:00Z"]
        );
        assert_eq!(
            fires("0,30 2 * * *", NY, day.0, day.1),
            ["2026-03-08T07:00:00Z"]
        );
        assert_eq!(
            fires("0 2,3 * * *", NY, day.0, day.1),
            ["2026-03-08T07:00:00Z"]
        );
        assert_eq!(
            fires("30 1-3 * * *", NY, day.0, day.1),
            [
                "2026-03-08T06:30:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-08T07:30:00Z"
            ]
        );
        let half_hours = fires("*/30 * * * *", NY, day.0, day.1);
        assert_eq!(half_hours.len(), 46);
        assert!(half_hours.contains(&"2026-03-08T06:30:00Z".to_string())); // 01:30 EST
        assert!(half_hours.contains(&"2026-03-08T07:00:00Z".to_string())); // 03:00 EDT
        let s = sched("*/30 * * * *");
        for t in s
            .fire_times_between(NY, utc(day.0), utc(day.1), usize::MAX)
            .instants
        {
            assert_ne!(t.with_timezone(&NY).hour(), 2, "{t}");
        }
        assert_eq!(fires("* 2 * * *", NY, day.0, day.1), Vec::<String>::new());
        // Other days are unaffected.
        assert_eq!(
            fires(
                "30 2 * * *",
                NY,
                "2026-03-09T05:00:00Z",
                "2026-03-10T04:00:00Z"
            ),
            ["2026-03-09T06:30:00Z"]
        );
    }

    #[test]
    fn new_york_fall_back() {
        let day = ("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z");
        assert_eq!(
            fires("30 1 * * *", NY, day.0, day.1),
            ["2026-11-01T05:30:00Z"]
        );
        assert_eq!(
            fires("*/30 1 * * *", NY, day.0, day.1),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:30:00Z"
            ]
        );
        let all = fires("*/30 * * * *", NY, day.0, day.1);
        assert_eq!(all.len(), 50);
        for t in [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
        ] {
            assert!(all.contains(&t.to_string()), "{t}");
        }
        // Starting inside the second pass: the fixed-time job already ran.
        let s = sched("30 1 * * *");
        assert_eq!(
            s.next_after(NY, utc("2026-11-01T06:10:00Z")),
            Some(utc("2026-11-02T06:30:00Z"))
        );
        // Wildcard jobs asked from inside the first pass see the second pass too.
        let s = sched("*/30 * * * *");
        assert_eq!(
            s.fire_times_after(NY, utc("2026-11-01T05:45:00Z"), 3),
            [
                utc("2026-11-01T06:00:00Z"),
                utc("2026-11-01T06:30:00Z"),
                utc("2026-11-01T07:00:00Z")
            ]
        );
        // ... and from the second pass, nothing of the first is repeated.
        assert_eq!(
            s.fire_times_after(NY, utc("2026-11-01T06:00:00Z"), 2),
            [utc("2026-11-01T06:30:00Z"), utc("2026-11-01T07:00:00Z")]
        );
    }

    #[test]
    fn berlin_dst() {
        let spring = ("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z");
        assert_eq!(
            fires("30 2 * * *", BERLIN, spring.0, spring.1),
            ["2026-03-29T01:00:00Z"]
        );
        assert_eq!(
            fires("0,30 2 * * *", BERLIN, spring.0, spring.1),
            ["2026-03-29T01:00:00Z"]
        );
        let s = sched("*/30 * * * *");
        let got = s.fire_times_between(BERLIN, utc(spring.0), utc(spring.1), usize::MAX);
        assert_eq!(got.instants.len(), 46);
        assert!(got
            .instants
            .iter()
            .all(|t| t.with_timezone(&BERLIN).hour() != 2));

        let autumn = ("2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z");
        assert_eq!(
            fires("30 2 * * *", BERLIN, autumn.0, autumn.1),
            ["2026-10-25T00:30:00Z"]
        );
        assert_eq!(
            fires("*/30 2 * * *", BERLIN, autumn.0, autumn.1),
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z"
            ]
        );
        assert_eq!(fires("*/30 * * * *", BERLIN, autumn.0, autumn.1).len(), 50);
    }

    #[test]
    fn lord_howe_half_hour_shifts() {
        // Lord Howe: 2026-10-04 02:00 +10:30 -> 02:30 +11; 2026-04-05 02:00 +11 -> 01:30 +10:30.
        let spring = ("2026-10-03T13:00:00Z", "2026-10-04T13:00:00Z");
        assert_eq!(
            fires("15 2 * * *", LORD_HOWE, spring.0, spring.1),
            ["2026-10-03T15:30:00Z"]
        );
        assert_eq!(
            fires("*/15 2 * * *", LORD_HOWE, spring.0, spring.1).len(),
            2
        );
        let autumn = ("2026-04-04T13:00:00Z", "2026-04-05T13:00:00Z");
        assert_eq!(
            fires("45 1 * * *", LORD_HOWE, autumn.0, autumn.1),
            ["2026-04-04T14:45:00Z"]
        );
        assert_eq!(
            fires("*/15 1 * * *", LORD_HOWE, autumn.0, autumn.1),
            [
                "2026-04-04T14:00:00Z",
                "2026-04-04T14:15:00Z",
                "2026-04-04T14:30:00Z",
                "2026-04-04T14:45:00Z",
                "2026-04-04T15:00:00Z",
                "2026-04-04T15:15:00Z",
            ]
        );
    }

    // ------------------------------------------------------- between/limits

    #[test]
    fn fire_times_between_keeps_the_newest() {
        let s = sched("0 * * * *");
        let after = utc("2026-01-01T00:00:00Z");
        let until = utc("2026-01-01T10:00:00Z");
        let all = s.fire_times_between(Tz::UTC, after, until, usize::MAX);
        assert_eq!(all.instants.len(), 10);
        assert_eq!(all.older_dropped, 0);
        assert_eq!(all.instants[0], utc("2026-01-01T01:00:00Z"));
        assert_eq!(all.instants[9], until);

        let newest = s.fire_times_between(Tz::UTC, after, until, 3);
        assert_eq!(
            newest,
            FireTimes {
                instants: vec![
                    utc("2026-01-01T08:00:00Z"),
                    utc("2026-01-01T09:00:00Z"),
                    utc("2026-01-01T10:00:00Z")
                ],
                older_dropped: 7
            }
        );
        let none = s.fire_times_between(Tz::UTC, after, until, 0);
        assert_eq!(none.instants, Vec::<DateTime<Utc>>::new());
        assert_eq!(none.older_dropped, 10);
        let empty = s.fire_times_between(Tz::UTC, until, after, 5);
        assert_eq!(empty.instants.len() as u64 + empty.older_dropped, 0);
        let same = s.fire_times_between(Tz::UTC, until, until, 5);
        assert!(same.instants.is_empty());

        // A year of minutes: exact count, bounded memory.
        let s = sched("* * * * *");
        let year = s.fire_times_between(
            Tz::UTC,
            utc("2025-01-01T00:00:00Z"),
            utc("2026-01-01T00:00:00Z"),
            2,
        );
        assert_eq!(
            year.instants,
            [utc("2025-12-31T23:59:00Z"), utc("2026-01-01T00:00:00Z")]
        );
        assert_eq!(year.older_dropped, 365 * 24 * 60 - 2);
    }

    #[test]
    fn many_minutes_are_strictly_increasing() {
        let s = sched("* * * * *");
        let start = utc("2026-10-20T00:00:00Z");
        let got = s.fire_times_after(BERLIN, start, 100_000);
        assert_eq!(got.len(), 100_000);
        assert!(got.windows(2).all(|w| w[0] < w[1]));
        // Every minute is an instant, the repeated hour included.
        assert_eq!(got[99_999], start + TimeDelta::minutes(100_000));
    }

    #[test]
    fn yearly_far_future_and_extremes() {
        let s = sched("@yearly");
        assert_eq!(
            s.next_after(Tz::UTC, utc("4000-06-01T00:00:00Z")),
            Some(utc("4001-01-01T00:00:00Z"))
        );
        // Beyond croner's year limit there is nothing, and no panic.
        let _ = s.next_after(NY, DateTime::<Utc>::MAX_UTC);
        let _ = s.fire_times_between(
            NY,
            DateTime::<Utc>::MIN_UTC,
            DateTime::<Utc>::MIN_UTC + TimeDelta::days(400),
            2,
        );
    }

    // -------------------------------------------------------------- zones

    #[test]
    fn zones_parse_by_iana_name() {
        assert_eq!(parse_zone("UTC"), Ok(Tz::UTC));
        assert_eq!(parse_zone("America/New_York"), Ok(NY));
        assert_eq!(parse_zone(" Europe/Berlin "), Ok(BERLIN));
        let e = parse_zone("Mars/Olympus").expect_err("unknown zone");
        assert!(e.to_string().contains("\"Mars/Olympus\""), "{e}");
        assert!(e.to_string().contains("IANA"), "{e}");
        assert!(e.to_string().contains("Europe/Berlin"), "{e}");
        assert!(parse_zone("").is_err());
    }

    // ------------------------------------------------------------ catch-up

    #[test]
    fn catch_up_policy_names() {
        for p in [CatchUp::Latest, CatchUp::All, CatchUp::None] {
            assert_eq!(p.as_str().parse::<CatchUp>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!("LATEST".parse::<CatchUp>(), Ok(CatchUp::Latest));
        let e = "sometimes"
            .parse::<CatchUp>()
            .expect_err("invalid")
            .to_string();
        assert!(e.contains("\"sometimes\""), "{e}");
        assert!(e.contains("latest, all, none"), "{e}");
    }

    fn five_missed() -> (Vec<DateTime<Utc>>, DateTime<Utc>) {
        let s = sched("0 * * * *");
        let due = s
            .fire_times_between(
                Tz::UTC,
                utc("2026-01-01T00:30:00Z"),
                utc("2026-01-01T05:10:00Z"),
                usize::MAX,
            )
            .instants;
        assert_eq!(due.len(), 5);
        (due, utc("2026-01-01T05:10:00Z"))
    }

    #[test]
    fn catch_up_latest_runs_only_the_newest() {
        let (due, now) = five_missed();
        let plan = plan_catch_up(&due, now, CatchUp::Latest, Duration::from_secs(300));
        assert_eq!(plan.len(), 5);
        assert_eq!(plan.iter().filter(|(_, d)| *d == Decision::Run).count(), 1);
        assert_eq!(plan[4], (utc("2026-01-01T05:00:00Z"), Decision::Run));
        for (t, d) in &plan[..4] {
            assert_eq!(
                d,
                &Decision::Skip("catch-up latest: superseded by 2026-01-01T05:00:00Z".into()),
                "{t}"
            );
        }
        assert!(plan_catch_up(&[], now, CatchUp::Latest, Duration::ZERO).is_empty());
    }

    #[test]
    fn catch_up_all_runs_up_to_the_limit() {
        let (due, now) = five_missed();
        let plan = plan_catch_up(&due, now, CatchUp::All, Duration::from_secs(300));
        assert!(plan.iter().all(|(_, d)| *d == Decision::Run));
        assert_eq!(plan.iter().map(|(t, _)| *t).collect::<Vec<_>>(), due);

        let s = sched("* * * * *");
        let many = s
            .fire_times_between(
                Tz::UTC,
                utc("2026-01-01T00:00:00Z"),
                utc("2026-01-01T02:30:00Z"),
                usize::MAX,
            )
            .instants;
        assert_eq!(many.len(), 150);
        let plan = plan_catch_up(
            &many,
            utc("2026-01-01T02:30:00Z"),
            CatchUp::All,
            Duration::ZERO,
        );
        assert_eq!(
            plan.iter().filter(|(_, d)| *d == Decision::Run).count(),
            CATCH_UP_ALL_LIMIT
        );
        assert!(plan[..50].iter().all(
            |(_, d)| *d == Decision::Skip("catch-up all: more than 100 missed instants".into())
        ));
        assert!(plan[50..].iter().all(|(_, d)| *d == Decision::Run));
    }

    #[test]
    fn catch_up_none_respects_grace() {
        let (due, now) = five_missed();
        let plan = plan_catch_up(&due, now, CatchUp::None, Duration::from_secs(300));
        assert_eq!(plan.iter().filter(|(_, d)| *d == Decision::Run).count(), 0);
        assert_eq!(plan[4].1, Decision::Skip("missed by 10m (grace 5m)".into()));
        assert_eq!(
            plan[3].1,
            Decision::Skip("missed by 1h10m (grace 5m)".into())
        );
        assert_eq!(
            plan[0].1,
            Decision::Skip("missed by 4h10m (grace 5m)".into())
        );

        let plan = plan_catch_up(&due, now, CatchUp::None, Duration::from_secs(600));
        assert_eq!(plan[4].1, Decision::Run);
        assert_eq!(plan.iter().filter(|(_, d)| *d == Decision::Run).count(), 1);
        let plan = plan_catch_up(
            &[utc("2026-01-01T02:50:00Z")],
            utc("2026-01-01T05:00:00Z"),
            CatchUp::None,
            Duration::from_secs(300),
        );
        assert_eq!(
            plan[0].1,
            Decision::Skip("missed by 2h10m (grace 5m)".into())
        );
    }

    #[test]
    fn delta_formatting() {
        assert_eq!(format_delta(Duration::ZERO), "0s");
        assert_eq!(format_delta(Duration::from_millis(250)), "250ms");
        assert_eq!(format_delta(Duration::from_secs(45)), "45s");
        assert_eq!(format_delta(Duration::from_secs(7800)), "2h10m");
        assert_eq!(
            format_delta(Duration::from_secs(86_400 + 3 * 3600 + 5)),
            "1d3h5s"
        );
    }

    // ------------------------------------------------------------ proptest

    const ZONES: [Tz; 4] = [Tz::UTC, NY, BERLIN, LORD_HOWE];

    fn field_piece(min: u32, max: u32, names: &'static [&'static str]) -> BoxedStrategy<String> {
        let value = (min..=max).prop_map(|v| v.to_string()).boxed();
        let value = if names.is_empty() {
            value
        } else {
            prop_oneof![
                value,
                (0..names.len(), any::<bool>()).prop_map(move |(i, lower)| {
                    let name = names[i];
                    if lower {
                        name.to_ascii_lowercase()
                    } else {
                        name.to_string()
                    }
                }),
            ]
            .boxed()
        };
        let range = (min..=max, min..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b)));
        let step = 1..=max.max(2);
        prop_oneof![
            3 => Just("*".to_string()),
            2 => step.clone().prop_map(|s| format!("*/{s}")),
            3 => value.clone(),
            2 => range.clone(),
            1 => (range, step).prop_map(|(r, s)| format!("{r}/{s}")),
            2 => proptest::collection::vec(value, 2..4).prop_map(|v| v.join(",")),
        ]
        .boxed()
    }

    fn expression() -> impl Strategy<Value = String> {
        (
            field_piece(0, 59, &[]),
            field_piece(0, 23, &[]),
            field_piece(1, 31, &[]),
            field_piece(1, 12, &MONTH_NAMES),
            field_piece(0, 7, &DOW_NAMES),
        )
            .prop_map(|(a, b, c, d, e)| format!("{a} {b} {c} {d} {e}"))
    }

    /// Brute force, minute by minute in UTC, straight from the rules.
    fn reference(
        s: &CronSchedule,
        tz: Tz,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let mut out = BTreeSet::new();
        let mut t = after
            .with_second(0)
            .and_then(|t| t.with_nanosecond(0))
            .expect("truncate")
            + TimeDelta::minutes(1);
        while t <= until {
            let local = local_of(tz, t).expect("local");
            if s.matches_local(local) {
                let first_pass = match tz.from_local_datetime(&local) {
                    LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc) == t,
                    _ => true,
                };
                if s.is_wildcard() || first_pass {
                    out.insert(t);
                }
            }
            if !s.is_wildcard() {
                // Local minutes skipped between t - 1min and t run at t.
                let mut skipped =
                    local_of(tz, t - TimeDelta::minutes(1)).expect("local") + TimeDelta::minutes(1);
                while skipped < local {
                    if s.matches_local(skipped) {
                        out.insert(t);
                        break;
                    }
                    skipped += TimeDelta::minutes(1);
                }
            }
            t += TimeDelta::minutes(1);
        }
        out.into_iter().collect()
    }

    const TRANSITIONS: [&str; 8] = [
        "2026-03-08T07:00:00Z", // New York spring
        "2026-11-01T06:00:00Z", // New York fall
        "2026-03-29T01:00:00Z", // Berlin spring
        "2026-10-25T01:00:00Z", // Berlin fall
        "2026-10-03T15:30:00Z", // Lord Howe spring
        "2026-04-04T15:00:00Z", // Lord Howe fall
        "2024-02-29T12:00:00Z",
        "2027-12-31T23:00:00Z",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn next_after_is_later_and_matches(
            expr in expression(),
            zone in 0..ZONES.len(),
            secs in 946_684_800i64..2_208_988_800i64,
        ) {
            let s = match CronSchedule::parse(&expr) {
                Ok(s) => s,
                // Random pieces can make AND-impossible dates.
                Err(e) => {
                    prop_assert!(e.to_string().contains("never fire"), "{}", e);
                    return Ok(());
                }
            };
            let tz = ZONES[zone];
            let after = DateTime::<Utc>::from_timestamp(secs, 0).expect("instant");
            let next = s.next_after(tz, after);
            prop_assert!(next.is_some(), "{} from {}", expr, after);
            let next = next.expect("checked");
            prop_assert!(next > after);
            let local = local_of(tz, next).expect("local");
            let in_gap = !s.is_wildcard()
                && offset_secs(tz, next - TimeDelta::seconds(1)) < offset_secs(tz, next);
            prop_assert!(s.matches_local(local) || in_gap, "{} {} {}", expr, next, local);
            prop_assert_eq!(s.cron.is_time_matching(&local).ok(), Some(s.matches_local(local)));

            let several = s.fire_times_after(tz, after, 8);
            prop_assert_eq!(several.first().copied(), Some(next));
            prop_assert!(several.windows(2).all(|w| w[0] < w[1]));
            // Resuming from any result continues the same sequence.
            if several.len() > 2 {
                prop_assert_eq!(&s.fire_times_after(tz, several[1], 6)[..], &several[2..]);
            }
        }

        #[test]
        fn matches_brute_force_around_transitions(
            expr in expression(),
            zone in 0..ZONES.len(),
            base in 0..TRANSITIONS.len(),
            shift_minutes in -1800i64..600,
        ) {
            let Ok(s) = CronSchedule::parse(&expr) else { return Ok(()); };
            let tz = ZONES[zone];
            let after = utc(TRANSITIONS[base])
                + TimeDelta::minutes(shift_minutes)
                + TimeDelta::seconds(17);
            let until = after + TimeDelta::hours(40);
            let got = s.fire_times_between(tz, after, until, usize::MAX);
            prop_assert_eq!(got.older_dropped, 0);
            prop_assert_eq!(got.instants, reference(&s, tz, after, until), "{} in {}", expr, tz);
        }
    }

    /// Every minute of the transition days, for a few hand-picked expressions.
    #[test]
    fn transition_days_match_brute_force() {
        let exprs = [
            "* * * * *",
            "*/7 * * * *",
            "0,30 2 * * *",
            "30 1 * * *",
            "15 1,2,3 * * *",
            "0 * * * *",
            "59 1 * * *",
            "0-59/20 2 * * *",
            "45 2 * * 0",
            "0 0 * * *",
        ];
        for expr in exprs {
            let s = sched(expr);
            for tz in ZONES {
                for at in TRANSITIONS {
                    let after = utc(at) - TimeDelta::hours(12);
                    let until = after + TimeDelta::hours(24);
                    assert_eq!(
                        s.fire_times_between(tz, after, until, usize::MAX).instants,
                        reference(&s, tz, after, until),
                        "{expr} {tz} {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn croner_agrees_with_own_matcher() {
        let start = NaiveDate::from_ymd_opt(2026, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .expect("date");
        for expr in [
            "0 0 1,15 * FRI",
            "0 0 */2 * MON",
            "*/13 3-5 * 2-3 sun",
            "0 12 1-7 * */7",
        ] {
            let s = sched(expr);
            let mut n = start;
            for _ in 0..(60 * 24 * 90 / 7) {
                assert_eq!(
                    s.cron.is_time_matching(&n).ok(),
                    Some(s.matches_local(n)),
                    "{expr} {n}"
                );
                n += TimeDelta::minutes(7);
            }
        }
    }
}
