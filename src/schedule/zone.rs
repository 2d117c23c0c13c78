//! When a schedule fires: its cron fields evaluated in the wall-clock time of an IANA zone, and
//! the daylight-saving rules that turn naive local times into instants:
//!
//! * spring forward: a fixed-time job whose local time falls in the skipped
//!   range runs once, at the transition instant; wildcard jobs have no
//!   instants there;
//! * fall back: wildcard jobs run in both passes of the repeated range,
//!   fixed-time jobs only in the first one;
//! * one fire per distinct instant.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};

use super::{CronError, CronSchedule};
use crate::tz::Tz;

impl CronSchedule {
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
        self.walk(tz, after, horizon_end(tz, after))
            .take(limit)
            .collect()
    }

    /// The first fire instant strictly after `after` (None only if none within the search horizon).
    pub fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.fire_times_after(tz, after, 1).into_iter().next()
    }

    /// Fire instants in (after, until], ascending. If there are more than `keep_newest`,
    /// return only the newest `keep_newest` of them plus the count of older ones dropped.
    /// Memory is bounded by `keep_newest`, and so is the time, whatever the length of the range:
    /// the newest are found by searching back from `until`, and the older ones are counted up to
    /// `OLDER_COUNT_LIMIT` (a tick after years of downtime, or a clock set years ahead, would
    /// otherwise walk every minute of those years before it ran anything).
    pub fn fire_times_between(
        &self,
        tz: Tz,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        keep_newest: usize,
    ) -> FireTimes {
        let newest = self.newest_between(tz, after, until, keep_newest);
        let mut older_dropped = newest.dropped;
        let mut older_uncounted = false;
        if newest.searched_after > after {
            let mut counted: u64 = 0;
            for _ in self.walk_until(tz, after, newest.searched_after) {
                if counted == OLDER_COUNT_LIMIT {
                    older_uncounted = true;
                    break;
                }
                counted += 1;
            }
            older_dropped += counted;
        }
        FireTimes {
            instants: newest.instants,
            older_dropped,
            older_uncounted,
        }
    }

    /// The newest `keep` fire instants in (after, until], ascending. The search starts an hour
    /// before `until` and reaches back in windows that grow fourfold until one holds `keep`
    /// instants or reaches `after`, so its cost follows how far back those instants lie, not how
    /// long ago `after` is.
    pub(super) fn newest_between(
        &self,
        tz: Tz,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        keep: usize,
    ) -> Newest {
        // croner finds no time from the year 5000 on: searching back from a later `until`
        // would find nothing in each window until one reached `after`, then walk all of it.
        let until = until.min(last_searchable_instant(tz));
        let mut span = TimeDelta::hours(1);
        loop {
            let from = until
                .checked_sub_signed(span)
                .map_or(after, |from| from.max(after));
            let mut kept: VecDeque<DateTime<Utc>> = VecDeque::new();
            let mut dropped: u64 = 0;
            for instant in self.walk_until(tz, from, until) {
                if kept.len() == keep {
                    dropped += 1;
                    if kept.pop_front().is_none() {
                        continue; // keep == 0
                    }
                }
                kept.push_back(instant);
            }
            if kept.len() >= keep || from <= after {
                return Newest {
                    instants: kept.into(),
                    dropped,
                    searched_after: from,
                };
            }
            span = span.checked_mul(4).unwrap_or(TimeDelta::MAX);
        }
    }

    /// The fire instants in (after, until], ascending.
    fn walk_until(
        &self,
        tz: Tz,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        // No naive local time this far past `until` can map to an instant at or before it.
        let end = local_of(tz, until)
            .and_then(|local| local.checked_add_signed(TimeDelta::days(2)))
            .unwrap_or(NaiveDateTime::MAX);
        let walk = (until > after).then(|| self.walk(tz, after, end));
        walk.into_iter()
            .flatten()
            .take_while(move |instant| *instant <= until)
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
}

/// The last year whose fire times are computed: croner's searches stop when they reach the next.
pub const LAST_YEAR: i32 = croner::YEAR_UPPER_LIMIT - 1;

/// The last instant whose local time in `tz` croner can search: the last second of `LAST_YEAR`
/// there (its searches stop at `croner::YEAR_UPPER_LIMIT`, 5000). No fire time comes after it.
pub fn last_searchable_instant(tz: Tz) -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(LAST_YEAR, 12, 31)
        .and_then(|day| day.and_hms_opt(23, 59, 59))
        .and_then(|local| tz.from_local_datetime(&local).earliest())
        .map_or(DateTime::<Utc>::MAX_UTC, |t| t.with_timezone(&Utc))
}

/// How far (in seconds) the UTC offset may move across a transition that we
/// have to look around: naive local order and instant order only disagree
/// within this window. Real-world transitions move the clock by at most two
/// hours.
const SHIFT_WINDOW_SECS: i64 = 3 * 3600;

/// How far ahead `next_after`/`fire_times_after` search. Every valid
/// expression fires at least once in any 400-year Gregorian cycle.
const HORIZON_DAYS: i64 = 401 * 366;

/// The last local time `fire_times_after` searches from `after`: `HORIZON_DAYS` ahead.
fn horizon_end(tz: Tz, after: DateTime<Utc>) -> NaiveDateTime {
    local_of(tz, after)
        .and_then(|local| local.checked_add_signed(TimeDelta::days(HORIZON_DAYS)))
        .unwrap_or(NaiveDateTime::MAX)
}

/// The last instant `fire_times_after` searches from `after` (its local time `HORIZON_DAYS`
/// ahead): where a search that finds fewer fire times than asked for stopped, unless the year
/// 5000 stopped it first.
pub fn search_horizon(tz: Tz, after: DateTime<Utc>) -> DateTime<Utc> {
    match resolve_local(tz, horizon_end(tz, after)) {
        // The search walks local times up to the end: both passes of a repeated one.
        LocalTime::Single(at) | LocalTime::Repeated(_, at) => at,
        LocalTime::Skipped { after } => after.unwrap_or(DateTime::<Utc>::MAX_UTC),
    }
}

/// The longest skipped local range we step over when moving a fixed-time job
/// out of a spring-forward gap (whole days have been skipped, e.g. Samoa 2011).
const MAX_GAP_MINUTES: u32 = 48 * 60;

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
    /// How many older instants were left out: all of them, or `OLDER_COUNT_LIMIT` more than the
    /// newest window held when `older_uncounted`.
    pub older_dropped: u64,
    /// More older instants were left out than were counted.
    pub older_uncounted: bool,
}

/// The newest instants of a range, and what the search for them saw.
pub(super) struct Newest {
    pub instants: Vec<DateTime<Utc>>,
    /// Instants of the window searched that were older than the ones kept.
    pub dropped: u64,
    /// The window searched was (searched_after, until]: nothing at or before it was looked at.
    pub searched_after: DateTime<Utc>,
}

/// How many of the instants older than the newest window `fire_times_between` counts one by one
/// (about 70 ms of walking for an every-minute expression): more are reported as "more than".
pub const OLDER_COUNT_LIMIT: u64 = 100_000;

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

/// Which daylight-saving rule placed a fire instant, when one did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DstRule {
    /// A fixed-time job whose local times (listed) fell in a spring-forward gap: it runs once,
    /// at the transition instant. `own`: the transition's local time is one of its times too
    /// (`0 1-4 * * *`: 02:00 did not exist, 03:00 did), and that one run stands for both.
    Gap {
        skipped: Vec<NaiveDateTime>,
        own: bool,
    },
    /// The first pass of a repeated (fall-back) hour. A fixed-time job runs only in this one.
    RepeatedFirst { wildcard: bool },
    /// The second pass of a repeated hour: wildcard jobs run in both.
    RepeatedSecond,
}

impl DstRule {
    /// A short name for JSON: `gap`, `repeated_first`, `repeated_second`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DstRule::Gap { .. } => "gap",
            DstRule::RepeatedFirst { .. } => "repeated_first",
            DstRule::RepeatedSecond => "repeated_second",
        }
    }

    /// What happened, for people.
    pub fn note(&self) -> String {
        match self {
            DstRule::Gap { skipped, own } => {
                let times: Vec<String> = skipped
                    .iter()
                    .map(|t| t.format("%H:%M").to_string())
                    .collect();
                let also = if *own {
                    ", which is also one of its own times"
                } else {
                    ""
                };
                format!(
                    "DST gap: {} did not exist that day; runs once, at the transition{also}",
                    times.join(", ")
                )
            }
            DstRule::RepeatedFirst { wildcard: false } => {
                "repeated hour: runs in the first pass only".to_string()
            }
            DstRule::RepeatedFirst { wildcard: true } => {
                "repeated hour: first pass (wildcard jobs run in both)".to_string()
            }
            DstRule::RepeatedSecond => "repeated hour: second pass".to_string(),
        }
    }
}

impl CronSchedule {
    /// The DST rule that placed `instant`, one of this schedule's fire instants in `tz`, or None
    /// when its local time is an ordinary one.
    pub fn dst_rule(&self, tz: Tz, instant: DateTime<Utc>) -> Option<DstRule> {
        let local = local_of(tz, instant)?;
        let own = self.matches_local(local);
        // A fixed-time job's times in a gap move to the first instant after it: when this
        // instant is that one, the matching local times just before it did not exist. (A
        // wildcard job has no instants in a gap: nothing moves.)
        if !self.wildcard {
            let mut skipped = Vec::new();
            let mut probe = local;
            for _ in 0..MAX_GAP_MINUTES {
                probe = probe.checked_sub_signed(TimeDelta::minutes(1))?;
                if !matches!(tz.from_local_datetime(&probe), LocalResult::None) {
                    break;
                }
                if self.matches_local(probe) {
                    skipped.push(probe);
                }
            }
            if !skipped.is_empty() || !own {
                skipped.reverse();
                return Some(DstRule::Gap { skipped, own });
            }
        }
        match tz.from_local_datetime(&local) {
            LocalResult::Ambiguous(first, _) if first.with_timezone(&Utc) == instant => {
                Some(DstRule::RepeatedFirst {
                    wildcard: self.wildcard,
                })
            }
            LocalResult::Ambiguous(..) => Some(DstRule::RepeatedSecond),
            _ => None,
        }
    }
}

/// Where a wall-clock time of a zone falls: what a person means by "02:30 in New York".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalTime {
    /// An ordinary local time: one instant.
    Single(DateTime<Utc>),
    /// A local time that happened twice (fall back): its first and its second pass.
    Repeated(DateTime<Utc>, DateTime<Utc>),
    /// A local time that did not exist (spring forward). `after` is the first instant whose local
    /// time is later: where a fixed-time job due then runs instead (None out of range).
    Skipped { after: Option<DateTime<Utc>> },
}

/// The instant(s) a naive local time of `tz` names, by the same rules that place fire times.
pub fn resolve_local(tz: Tz, naive: NaiveDateTime) -> LocalTime {
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => LocalTime::Single(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, second) => {
            LocalTime::Repeated(first.with_timezone(&Utc), second.with_timezone(&Utc))
        }
        LocalResult::None => LocalTime::Skipped {
            after: first_instant_after_gap(tz, naive),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::syntax::{DOW_NAMES, MONTH_NAMES};
    use crate::schedule::testing::{berlin, lord_howe, ny, sched, utc};
    use chrono::{Datelike, SecondsFormat, Timelike};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

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
            s.next_after(ny(), utc("2026-01-05T00:00:00Z")),
            Some(utc("2026-01-05T14:00:00Z"))
        );
        assert_eq!(
            s.next_after(ny(), utc("2026-07-05T00:00:00Z")),
            Some(utc("2026-07-05T13:00:00Z"))
        );
        assert_eq!(
            s.next_after(berlin(), utc("2026-01-05T00:00:00Z")),
            Some(utc("2026-01-05T08:00:00Z"))
        );
    }

    // ------------------------------------------------------------------ DST

    #[test]
    fn new_york_spring_forward() {
        let day = ("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z");
        assert_eq!(
            fires("30 2 * * *", ny(), day.0, day.1),
            ["2026-03-08T07:00:00Z"]
        );
        assert_eq!(
            fires("0,30 2 * * *", ny(), day.0, day.1),
            ["2026-03-08T07:00:00Z"]
        );
        assert_eq!(
            fires("0 2,3 * * *", ny(), day.0, day.1),
            ["2026-03-08T07:00:00Z"]
        );
        assert_eq!(
            fires("30 1-3 * * *", ny(), day.0, day.1),
            [
                "2026-03-08T06:30:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-08T07:30:00Z"
            ]
        );
        let half_hours = fires("*/30 * * * *", ny(), day.0, day.1);
        assert_eq!(half_hours.len(), 46);
        assert!(half_hours.contains(&"2026-03-08T06:30:00Z".to_string())); // 01:30 EST
        assert!(half_hours.contains(&"2026-03-08T07:00:00Z".to_string())); // 03:00 EDT
        let s = sched("*/30 * * * *");
        for t in s
            .fire_times_between(ny(), utc(day.0), utc(day.1), usize::MAX)
            .instants
        {
            assert_ne!(t.with_timezone(&ny()).hour(), 2, "{t}");
        }
        assert_eq!(fires("* 2 * * *", ny(), day.0, day.1), Vec::<String>::new());
        // Other days are unaffected.
        assert_eq!(
            fires(
                "30 2 * * *",
                ny(),
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
            fires("30 1 * * *", ny(), day.0, day.1),
            ["2026-11-01T05:30:00Z"]
        );
        assert_eq!(
            fires("*/30 1 * * *", ny(), day.0, day.1),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:30:00Z"
            ]
        );
        let all = fires("*/30 * * * *", ny(), day.0, day.1);
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
            s.next_after(ny(), utc("2026-11-01T06:10:00Z")),
            Some(utc("2026-11-02T06:30:00Z"))
        );
        // Wildcard jobs asked from inside the first pass see the second pass too.
        let s = sched("*/30 * * * *");
        assert_eq!(
            s.fire_times_after(ny(), utc("2026-11-01T05:45:00Z"), 3),
            [
                utc("2026-11-01T06:00:00Z"),
                utc("2026-11-01T06:30:00Z"),
                utc("2026-11-01T07:00:00Z")
            ]
        );
        // ... and from the second pass, nothing of the first is repeated.
        assert_eq!(
            s.fire_times_after(ny(), utc("2026-11-01T06:00:00Z"), 2),
            [utc("2026-11-01T06:30:00Z"), utc("2026-11-01T07:00:00Z")]
        );
    }

    #[test]
    fn berlin_dst() {
        let spring = ("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z");
        assert_eq!(
            fires("30 2 * * *", berlin(), spring.0, spring.1),
            ["2026-03-29T01:00:00Z"]
        );
        assert_eq!(
            fires("0,30 2 * * *", berlin(), spring.0, spring.1),
            ["2026-03-29T01:00:00Z"]
        );
        let s = sched("*/30 * * * *");
        let got = s.fire_times_between(berlin(), utc(spring.0), utc(spring.1), usize::MAX);
        assert_eq!(got.instants.len(), 46);
        assert!(got
            .instants
            .iter()
            .all(|t| t.with_timezone(&berlin()).hour() != 2));

        let autumn = ("2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z");
        assert_eq!(
            fires("30 2 * * *", berlin(), autumn.0, autumn.1),
            ["2026-10-25T00:30:00Z"]
        );
        assert_eq!(
            fires("*/30 2 * * *", berlin(), autumn.0, autumn.1),
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z"
            ]
        );
        assert_eq!(
            fires("*/30 * * * *", berlin(), autumn.0, autumn.1).len(),
            50
        );
    }

    #[test]
    fn lord_howe_half_hour_shifts() {
        // Lord Howe: 2026-10-04 02:00 +10:30 -> 02:30 +11; 2026-04-05 02:00 +11 -> 01:30 +10:30.
        let spring = ("2026-10-03T13:00:00Z", "2026-10-04T13:00:00Z");
        assert_eq!(
            fires("15 2 * * *", lord_howe(), spring.0, spring.1),
            ["2026-10-03T15:30:00Z"]
        );
        assert_eq!(
            fires("*/15 2 * * *", lord_howe(), spring.0, spring.1).len(),
            2
        );
        let autumn = ("2026-04-04T13:00:00Z", "2026-04-05T13:00:00Z");
        assert_eq!(
            fires("45 1 * * *", lord_howe(), autumn.0, autumn.1),
            ["2026-04-04T14:45:00Z"]
        );
        assert_eq!(
            fires("*/15 1 * * *", lord_howe(), autumn.0, autumn.1),
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
                older_dropped: 7,
                older_uncounted: false,
            }
        );
        let none = s.fire_times_between(Tz::UTC, after, until, 0);
        assert_eq!(none.instants, Vec::<DateTime<Utc>>::new());
        assert_eq!(none.older_dropped, 10);
        let empty = s.fire_times_between(Tz::UTC, until, after, 5);
        assert_eq!(empty.instants.len() as u64 + empty.older_dropped, 0);
        let same = s.fire_times_between(Tz::UTC, until, until, 5);
        assert!(same.instants.is_empty());

        // Sixty days of minutes (under the counting limit): exact count, bounded memory.
        let s = sched("* * * * *");
        let days = s.fire_times_between(
            Tz::UTC,
            utc("2025-11-02T00:00:00Z"),
            utc("2026-01-01T00:00:00Z"),
            2,
        );
        assert_eq!(
            days.instants,
            [utc("2025-12-31T23:59:00Z"), utc("2026-01-01T00:00:00Z")]
        );
        assert_eq!(days.older_dropped, 60 * 24 * 60 - 2);
        assert!(!days.older_uncounted);
    }

    /// Searching back from past the last year croner searches starts at that year's last second
    /// in the schedule's zone: nothing is walked in vain, and no instant of that year is lost.
    #[test]
    fn the_last_year_is_searched_to_its_end() {
        let s = sched("* * * * *");
        for (tz, last) in [
            (Tz::UTC, "4999-12-31T23:59:00Z"),
            (berlin(), "4999-12-31T22:59:00Z"),
            (ny(), "5000-01-01T04:59:00Z"),
        ] {
            let got = s.fire_times_between(
                tz,
                utc("4999-12-31T00:00:00Z"),
                utc("5000-06-01T00:00:00Z"),
                3,
            );
            assert_eq!(got.instants.last(), Some(&utc(last)), "{tz}");
        }
    }

    /// Ten years of minutes (5.26 million instants): the newest are found without walking the
    /// years before them, and the older ones are counted only up to the limit. Walking them all
    /// took seconds per schedule, in a tick that heard no SIGTERM meanwhile.
    #[test]
    fn years_behind_are_not_walked() {
        let s = sched("* * * * *");
        let until = utc("2036-01-01T00:00:00Z");
        let got = s.fire_times_between(Tz::UTC, utc("2026-01-01T00:00:00Z"), until, 1000);
        assert_eq!(got.instants.len(), 1000);
        assert_eq!(got.instants[999], until);
        assert_eq!(got.instants[0], until - TimeDelta::minutes(999));
        assert!(got.older_uncounted);
        assert!(got.older_dropped > OLDER_COUNT_LIMIT);
        assert!(got.older_dropped < 2 * OLDER_COUNT_LIMIT);

        // Just under the limit, the count is exact.
        let after = until - TimeDelta::minutes(1000 + OLDER_COUNT_LIMIT as i64 - 5);
        let got = s.fire_times_between(Tz::UTC, after, until, 1000);
        assert_eq!(got.older_dropped, OLDER_COUNT_LIMIT - 5);
        assert!(!got.older_uncounted);
    }

    #[test]
    fn many_minutes_are_strictly_increasing() {
        let s = sched("* * * * *");
        let start = utc("2026-10-20T00:00:00Z");
        let got = s.fire_times_after(berlin(), start, 100_000);
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
        let _ = s.next_after(ny(), DateTime::<Utc>::MAX_UTC);
        let _ = s.fire_times_between(
            ny(),
            DateTime::<Utc>::MIN_UTC,
            DateTime::<Utc>::MIN_UTC + TimeDelta::days(400),
            2,
        );
    }

    // -------------------------------------------------------------- zones

    #[test]
    fn zones_parse_by_iana_name() {
        assert_eq!(parse_zone("UTC"), Ok(Tz::UTC));
        assert_eq!(parse_zone("America/New_York"), Ok(ny()));
        assert_eq!(parse_zone(" Europe/Berlin "), Ok(berlin()));
        let e = parse_zone("Mars/Olympus").expect_err("unknown zone");
        assert!(e.to_string().contains("\"Mars/Olympus\""), "{e}");
        assert!(e.to_string().contains("IANA"), "{e}");
        assert!(e.to_string().contains("Europe/Berlin"), "{e}");
        assert!(parse_zone("").is_err());
    }

    // ------------------------------------------------------------ proptest

    fn zones() -> [Tz; 4] {
        [Tz::UTC, ny(), berlin(), lord_howe()]
    }

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
            zone in 0..zones().len(),
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
            let tz = zones()[zone];
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
            zone in 0..zones().len(),
            base in 0..TRANSITIONS.len(),
            shift_minutes in -1800i64..600,
        ) {
            let Ok(s) = CronSchedule::parse(&expr) else { return Ok(()); };
            let tz = zones()[zone];
            let after = utc(TRANSITIONS[base])
                + TimeDelta::minutes(shift_minutes)
                + TimeDelta::seconds(17);
            let until = after + TimeDelta::hours(40);
            let got = s.fire_times_between(tz, after, until, usize::MAX);
            prop_assert_eq!(got.older_dropped, 0);
            prop_assert_eq!(got.instants, reference(&s, tz, after, until), "{} in {}", expr, tz);
        }

        /// The newest instants, found by searching back from `until` in growing windows, and the
        /// count of the older ones are those of a walk over the whole range, across transitions.
        #[test]
        fn newest_searched_back_match_brute_force(
            expr in expression(),
            zone in 0..zones().len(),
            base in 0..TRANSITIONS.len(),
            shift_minutes in -1800i64..600,
            keep in 0usize..40,
        ) {
            let Ok(s) = CronSchedule::parse(&expr) else { return Ok(()); };
            let tz = zones()[zone];
            let after = utc(TRANSITIONS[base])
                + TimeDelta::minutes(shift_minutes)
                + TimeDelta::seconds(17);
            let until = after + TimeDelta::hours(40);
            let all = reference(&s, tz, after, until);
            let got = s.fire_times_between(tz, after, until, keep);
            let kept = all.len().min(keep);
            prop_assert_eq!(&got.instants[..], &all[all.len() - kept..], "{} in {}", expr, tz);
            prop_assert_eq!(got.older_dropped, (all.len() - kept) as u64);
            prop_assert!(!got.older_uncounted);
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
            for tz in zones() {
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
    fn dst_rules_are_named() {
        let rules = |expr: &str, from: &str, to: &str| -> Vec<(String, Option<String>)> {
            let s = sched(expr);
            s.fire_times_between(ny(), utc(from), utc(to), usize::MAX)
                .instants
                .iter()
                .map(|&t| {
                    (
                        t.to_rfc3339_opts(SecondsFormat::Secs, true),
                        s.dst_rule(ny(), t).map(|r| r.note()),
                    )
                })
                .collect()
        };
        // Spring forward in New York, 2026-03-08: 02:00-03:00 local does not exist.
        assert_eq!(
            rules(
                "0,30 2 * * *",
                "2026-03-08T05:00:00Z",
                "2026-03-08T08:00:00Z"
            ),
            [(
                "2026-03-08T07:00:00Z".to_string(),
                Some(
                    "DST gap: 02:00, 02:30 did not exist that day; runs once, at the transition"
                        .to_string()
                )
            )]
        );
        // 02:00 did not exist; 03:00 did, and is a time of its own: one run stands for both.
        let moved = rules(
            "0 1-4 * * *",
            "2026-03-08T05:00:00Z",
            "2026-03-08T09:00:00Z",
        );
        assert_eq!(moved.len(), 3, "{moved:?}");
        assert_eq!(moved[0].1, None);
        assert_eq!(moved[1].0, "2026-03-08T07:00:00Z");
        assert_eq!(
            moved[1].1.as_deref(),
            Some(
                "DST gap: 02:00 did not exist that day; runs once, at the transition, which is \
                 also one of its own times"
            )
        );
        assert_eq!(moved[2].1, None);
        // Fall back, 2026-11-01: 01:00-02:00 local comes twice.
        assert_eq!(
            rules("30 1 * * *", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z"),
            [(
                "2026-11-01T05:30:00Z".to_string(),
                Some("repeated hour: runs in the first pass only".to_string())
            )]
        );
        let wildcard = rules("30 * * * *", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z");
        assert_eq!(
            wildcard,
            [
                (
                    "2026-11-01T05:30:00Z".to_string(),
                    Some("repeated hour: first pass (wildcard jobs run in both)".to_string())
                ),
                (
                    "2026-11-01T06:30:00Z".to_string(),
                    Some("repeated hour: second pass".to_string())
                ),
            ]
        );
        assert_eq!(
            rules("0 12 * * *", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z"),
            [("2026-03-08T16:00:00Z".to_string(), None)]
        );
    }
}
