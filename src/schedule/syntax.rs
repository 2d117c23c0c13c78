//! Debian cron syntax (Vixie cron 3.0, crontab(5)): parsing and rejection.
//!
//! The syntax check is our own: Debian's grammar is strict and every error names the field and
//! the value. The validated fields are normalized to plain numeric lists and handed to `croner`,
//! which only does the field matching on naive local date-times; `zone.rs` turns those into
//! instants.

use std::fmt;
use std::str::FromStr;

use chrono::NaiveDateTime;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use super::CronError;

pub(super) const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
pub(super) const DOW_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

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
            // Debian's cron accepts a reversed range and never fires it. What was meant is
            // either the wrap-around (FRI-MON: Friday through Monday) or the values between.
            let hint = if field == Field::DayOfWeek && high == 0 {
                format!("; Sunday is also 7, so write {low}-7")
            } else {
                // Day of week wraps through 7 (Sunday) to 1; other fields through their ends.
                let (max, min) = match field {
                    Field::DayOfWeek => (7, 1),
                    _ => (field.max(), field.min()),
                };
                let span = |a: u32, b: u32| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                };
                format!(
                    "; ranges do not wrap around: write {},{} for {low} through {high}, or \
                     {high}-{low} for the values between",
                    span(low, max),
                    span(min, high)
                )
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
    pub(super) expression: String,
    pub(super) wildcard: bool,
    /// Day-of-month and day-of-week must both match (one of them starts with `*`).
    pub(super) days_and: bool,
    pub(super) minutes: Bits,
    pub(super) hours: Bits,
    pub(super) days_of_month: Bits,
    pub(super) months: Bits,
    pub(super) days_of_week: Bits,
    pub(super) cron: Cron,
}

/// Why `expr` is not a valid cron expression, if it is not: `CronSchedule::parse`'s verdict,
/// remembered. Every schedule row read is checked (a damaged one is reported, not run), and a
/// tick reading a hundred thousand schedules that share a few expressions then parses each
/// expression once rather than once per row.
pub fn cron_problem(expr: &str) -> Option<String> {
    thread_local! {
        static VERDICTS: std::cell::RefCell<std::collections::HashMap<String, Option<String>>> =
            std::cell::RefCell::default();
    }
    VERDICTS.with(|verdicts| {
        if let Some(verdict) = verdicts.borrow().get(expr) {
            return verdict.clone();
        }
        let verdict = CronSchedule::parse(expr).err().map(|e| e.to_string());
        verdicts
            .borrow_mut()
            .insert(expr.to_string(), verdict.clone());
        verdict
    })
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
                // The macro first: `@every 5m` names no macro at all, whatever follows it.
                let fields = expand_macro(first).map_err(fail)?;
                if tokens.len() > 1 {
                    return Err(fail(format!(
                        "the macro \"{first}\" must be the whole expression, without other fields"
                    )));
                }
                fields
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

    /// Whether `other` fires at the same instants by the same daylight-saving rules, however each
    /// is written: the same values in every field, the same kind (wildcard or fixed-time) and
    /// the same day rule. `0 * * * *`, `0  *  * * *` and `@hourly` are one timing; `0 * * * *`
    /// and `0 0-23 * * *` are not (the first is a wildcard job).
    pub fn same_instants(&self, other: &CronSchedule) -> bool {
        let key = |c: &CronSchedule| {
            (
                c.minutes,
                c.hours,
                c.days_of_month,
                c.months,
                c.days_of_week,
                c.wildcard,
                c.days_and,
            )
        };
        key(self) == key(other)
    }

    /// The expression exactly as the user wrote it (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// true for wildcard jobs (minute or hour field starts with `*`, or @hourly).
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// Whether it fires every minute: `* * * * *`, however it is spelt (`*/1`, `0-59`, `0-7`).
    pub fn fires_every_minute(&self) -> bool {
        let all =
            |bits: Bits, values: std::ops::Range<u32>| values.into_iter().all(|n| has_bit(bits, n));
        let every_day_of_month = all(self.days_of_month, 1..32);
        let every_day_of_week = all(self.days_of_week, 0..7);
        let every_day = match self.days_and {
            true => every_day_of_month && every_day_of_week,
            false => every_day_of_month || every_day_of_week,
        };
        all(self.minutes, 0..60) && all(self.hours, 0..24) && all(self.months, 1..13) && every_day
    }

    /// Whether day-of-month and day-of-week are both restricted, so a day matches when either
    /// does (cron's OR rule).
    pub fn days_either(&self) -> bool {
        !self.days_and
    }

    /// Whether a naive local time matches the fields (Debian's day rule).
    /// Independent of croner; cross-checks it in debug builds and tests.
    pub fn matches_local(&self, local: NaiveDateTime) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::testing::{ny, sched, utc};
    use crate::tz::Tz;
    use chrono::{Datelike, NaiveDate, TimeDelta, Timelike};

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
    fn every_minute_is_recognised_however_it_is_spelt() {
        for expr in [
            "* * * * *",
            "*/1 * * * *",
            "0-59 0-23 1-31 1-12 0-7",
            "*/1 */1 */1 */1 */1",
            "* * * * 0-6",
            "* * 1-31 * MON",
        ] {
            assert!(sched(expr).fires_every_minute(), "{expr}");
        }
        for expr in [
            "0 * * * *",
            "@hourly",
            "*/2 * * * *",
            "* 0-22 * * *",
            "* * * * 1-5",
            "* * 1-30 * *",
        ] {
            assert!(!sched(expr).fires_every_minute(), "{expr}");
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
            for tz in [Tz::UTC, ny()] {
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
            &[
                "month field",
                "\"DEC-JAN\"",
                "reversed",
                "write 12,1 for 12 through 1",
            ],
        );
        assert_err(
            "* * * * SAT-SUN",
            &["day-of-week field", "\"SAT-SUN\"", "6-7"],
        );
        // Friday through Monday wraps through Sunday (7); the values between are 1-5.
        assert_err(
            "0 0 * * FRI-MON",
            &[
                "\"FRI-MON\"",
                "write 5-7,1 for 5 through 1",
                "or 1-5 for the values between",
            ],
        );
        assert_err("0 22-2 * * *", &["write 22-23,0-2 for 22 through 2"]);
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
        // An unknown macro followed by more fields is still no macro.
        let msg = err("@every 5m");
        assert!(msg.contains("\"@every\" is not a known macro"), "{msg}");
        assert!(!msg.contains("whole expression"), "{msg}");
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
