//! IANA time zones as chrono time zones, from the zone database compiled into the binary, so every
//! host computes the same instants whatever its `/usr/share/zoneinfo` holds.
//!
//! The database is jiff's bundled copy, kept as bytes: a zone is parsed the first time a process
//! asks for it. (chrono-tz, used before, holds a pointer in every transition of every zone, and
//! the loader rewrote those 1.1 MB of tables at every start: half a millisecond of each command.)
//! The daylight-saving rules of `schedule::zone` see only chrono's `TimeZone`, implemented here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};

use chrono::{
    Datelike, FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone,
    Timelike, Utc,
};
use jiff::tz::{AmbiguousOffset, TimeZoneDatabase};
use jiff::Timestamp;

/// An IANA time zone ("Europe/Berlin", "UTC"). Cheap to copy; equal when the names are.
#[derive(Clone, Copy)]
pub struct Tz(&'static jiff::tz::TimeZone);

/// The name given is not a zone of the compiled-in database (names are case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownZone;

/// The database's placeholder for "no zone set yet": not a place, so no zone runner takes.
const NO_ZONE: &str = "Factory";

static UTC_ZONE: jiff::tz::TimeZone = jiff::tz::TimeZone::UTC;

/// Every zone this process has looked up, by the name it was asked for: each is parsed once, and
/// lives as long as the process (there are a few hundred names at most).
static ZONES: Mutex<BTreeMap<String, Tz>> = Mutex::new(BTreeMap::new());

impl Tz {
    pub const UTC: Tz = Tz(&UTC_ZONE);

    /// The zone's IANA name, as it was asked for.
    pub fn name(self) -> &'static str {
        self.0.iana_name().unwrap_or("UTC")
    }
}

/// The names of the compiled-in database that [`Tz::from_str`] takes, sorted: what shell
/// completion offers for `--tz`. Listed once per process, when first asked for.
pub fn names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<&'static str> = TimeZoneDatabase::bundled()
            .available()
            .map(|name| &*name.as_str().to_string().leak())
            // The database lists each name as written, so only its placeholder is not taken.
            .filter(|name| *name != NO_ZONE)
            .collect();
        names.sort_unstable();
        names
    })
}

impl FromStr for Tz {
    type Err = UnknownZone;

    /// Exactly a name of the database: jiff would also take "america/new_york", which runner has
    /// never accepted (a schedule's zone is shown and compared as it was written). `Factory`,
    /// the database's placeholder for "no zone set yet", is refused: it is not a place.
    fn from_str(name: &str) -> Result<Tz, UnknownZone> {
        let mut zones = ZONES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&tz) = zones.get(name) {
            return Ok(tz);
        }
        let zone = TimeZoneDatabase::bundled()
            .get(name)
            .ok()
            .filter(|zone| zone.iana_name() == Some(name) && name != NO_ZONE)
            .ok_or(UnknownZone)?;
        let tz = Tz(Box::leak(Box::new(zone)));
        zones.insert(name.to_string(), tz);
        Ok(tz)
    }
}

impl PartialEq for Tz {
    fn eq(&self, other: &Tz) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Tz {}

impl fmt::Debug for Tz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Tz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A zone's offset at one instant, with the zone (chrono gets the zone back from a date's offset).
#[derive(Clone, Copy, Debug)]
pub struct TzOffset {
    tz: Tz,
    fixed: FixedOffset,
}

impl Offset for TzOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl fmt::Display for TzOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.fixed, f)
    }
}

impl Tz {
    fn offset(self, offset: jiff::tz::Offset) -> TzOffset {
        // jiff's offsets stay within ±25:59:59, chrono's within ±23:59:59; no zone has ever
        // been more than 15:56:48 from UTC.
        let fixed = FixedOffset::east_opt(offset.seconds()).unwrap_or(Utc.fix());
        TzOffset { tz: self, fixed }
    }

    /// The offset at an instant given in seconds; an instant beyond jiff's range (years ±9999)
    /// takes the offset at the nearer end of it (no schedule fires there).
    fn offset_at(self, epoch: i64) -> TzOffset {
        let clamped = epoch.clamp(Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
        let instant = Timestamp::from_second(clamped).unwrap_or(Timestamp::UNIX_EPOCH);
        self.offset(self.0.to_offset(instant))
    }
}

impl TimeZone for Tz {
    type Offset = TzOffset;

    fn from_offset(offset: &TzOffset) -> Tz {
        offset.tz
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<TzOffset> {
        self.offset_from_local_datetime(&local.and_time(NaiveTime::MIN))
    }

    /// One offset; two in a repeated (fall-back) hour, the earlier instant's first; none in a
    /// skipped (spring-forward) one.
    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<TzOffset> {
        let Some(civil) = civil(local) else {
            // Beyond jiff's years: the offset at the nearer end of them, as for an instant.
            return MappedLocalTime::Single(self.offset_at(local.and_utc().timestamp()));
        };
        match self.0.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => MappedLocalTime::Single(self.offset(offset)),
            AmbiguousOffset::Gap { .. } => MappedLocalTime::None,
            AmbiguousOffset::Fold { before, after } => {
                MappedLocalTime::Ambiguous(self.offset(before), self.offset(after))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> TzOffset {
        self.offset_from_utc_datetime(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> TzOffset {
        self.offset_at(utc.and_utc().timestamp())
    }
}

/// chrono's naive time as jiff's, or None outside jiff's years (±9999).
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    jiff::civil::DateTime::new(
        i16::try_from(local.year()).ok()?,
        local.month() as i8,
        local.day() as i8,
        local.hour() as i8,
        local.minute() as i8,
        local.second() as i8,
        // A leap second (chrono's nanosecond >= 1e9) is the second's last nanosecond here.
        local.nanosecond().min(999_999_999) as i32,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").expect("naive time")
    }

    /// Completion offers exactly the names `--tz` takes.
    #[test]
    fn the_names_listed_are_the_zones_taken() {
        let names = names();
        assert!(names.len() > 300, "{}", names.len());
        for name in ["UTC", "Europe/Berlin", "America/New_York"] {
            assert!(names.contains(&name), "{name}");
        }
        assert!(!names.contains(&NO_ZONE));
        assert!(names.iter().all(|name| name.parse::<Tz>().is_ok()));
        assert!(names.windows(2).all(|pair| pair[0] < pair[1]));
    }

    fn offsets(result: MappedLocalTime<TzOffset>) -> Vec<i32> {
        match result {
            MappedLocalTime::Single(o) => vec![o.fix().local_minus_utc()],
            MappedLocalTime::Ambiguous(a, b) => {
                vec![a.fix().local_minus_utc(), b.fix().local_minus_utc()]
            }
            MappedLocalTime::None => vec![],
        }
    }

    #[test]
    fn names_are_exact_and_looked_up_once() {
        let ny: Tz = "America/New_York".parse().expect("zone");
        assert_eq!(ny.name(), "America/New_York");
        assert_eq!(ny, "America/New_York".parse().expect("zone"));
        assert!(std::ptr::eq(
            ny.0,
            "America/New_York".parse::<Tz>().expect("zone").0
        ));
        assert_eq!("UTC".parse::<Tz>(), Ok(Tz::UTC));
        assert_eq!("US/Eastern".parse::<Tz>().map(Tz::name), Ok("US/Eastern"));
        let not_places = ["Factory", "Etc/Unknown", "posixrules", "localtime"];
        for unknown in ["america/new_york", "utc", "Mars/Olympus", "", " UTC"]
            .into_iter()
            .chain(not_places)
        {
            assert_eq!(unknown.parse::<Tz>(), Err(UnknownZone), "{unknown:?}");
        }
    }

    #[test]
    fn local_times_map_to_one_two_or_no_offsets() {
        let ny: Tz = "America/New_York".parse().expect("zone");
        let at = |text| offsets(ny.offset_from_local_datetime(&naive(text)));
        assert_eq!(at("2026-07-01 12:00:00"), [-4 * 3600]);
        assert_eq!(at("2026-03-08 02:30:00"), Vec::<i32>::new());
        assert_eq!(at("2026-11-01 01:30:00"), [-4 * 3600, -5 * 3600]);
        // Past the last transition the database lists: the zone's rule still applies.
        assert_eq!(at("2300-07-01 12:00:00"), [-4 * 3600]);
        // Beyond jiff's years: the offset at its edge (December 9999, standard time).
        let far = NaiveDate::from_ymd_opt(20_000, 7, 1)
            .and_then(|d| d.and_hms_opt(12, 0, 0))
            .expect("a naive time");
        assert_eq!(offsets(ny.offset_from_local_datetime(&far)), [-5 * 3600]);
    }

    #[test]
    fn instants_map_to_their_offsets() {
        let berlin: Tz = "Europe/Berlin".parse().expect("zone");
        let at = |text| berlin.offset_from_utc_datetime(&naive(text)).fix();
        assert_eq!(at("2026-01-15 00:00:00").local_minus_utc(), 3600);
        assert_eq!(at("2026-07-15 00:00:00").local_minus_utc(), 7200);
        let instant = berlin.from_utc_datetime(&naive("2026-07-15 00:00:00"));
        assert_eq!(instant.timezone(), berlin);
        assert_eq!(instant.to_rfc3339(), "2026-07-15T02:00:00+02:00");
        assert_eq!(
            Tz::UTC.offset_from_utc_datetime(&NaiveDateTime::MAX).fix(),
            Utc.fix()
        );
    }
}
