//! How times, durations and captured output are shown: one place, so every command agrees.

use chrono::SecondsFormat;
use chrono_tz::Tz;
use serde_json::{json, Value};

use crate::clock::from_epoch;

/// ISO 8601 with the zone's offset, e.g. `2026-03-08T03:00:00-04:00`.
pub fn local_time(epoch: i64, tz: Tz) -> String {
    from_epoch(epoch)
        .with_timezone(&tz)
        .to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// RFC 3339 in UTC, e.g. `2026-03-08T07:00:00Z`: the form JSON output carries.
pub fn utc_time(epoch: i64) -> String {
    from_epoch(epoch).to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A JSON time pair: `{"<key>": RFC 3339 UTC, "<key>_epoch": seconds}` merged into `object`.
pub fn put_time(object: &mut serde_json::Map<String, Value>, key: &str, epoch: Option<i64>) {
    object.insert(
        key.to_string(),
        epoch.map_or(Value::Null, |e| json!(utc_time(e))),
    );
    object.insert(
        format!("{key}_epoch"),
        epoch.map_or(Value::Null, |e| json!(e)),
    );
}

/// A short human duration: `850ms`, `42s`, `3m 5s`, `2h 1m`.
pub fn short_duration(ms: i64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// How far apart two clocks are, for people: `45s`, `3m 5s`, `5h 2m`, then whole days and hours
/// (`45d`, `26960d 12h`) for the gaps a clock step makes.
pub fn clock_gap(secs: i64) -> String {
    let secs = secs.saturating_abs();
    if secs < 2 * 86_400 {
        return short_duration(secs.saturating_mul(1000));
    }
    match (secs / 86_400, (secs % 86_400) / 3600) {
        (days, 0) => format!("{days}d"),
        (days, hours) => format!("{days}d {hours}h"),
    }
}

/// Captured job output made safe for a terminal: valid UTF-8 text passes, except control
/// characters and escape sequences, which are shown escaped (`\x1b`, `\r`), never interpreted.
/// Newlines and tabs are kept.
pub fn escape_output(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => shown.push(c),
            '\r' => shown.push_str("\\r"),
            c if c.is_control() => shown.push_str(&format!("\\x{:02x}", c as u32)),
            c => shown.push(c),
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_control_sequences() {
        assert_eq!(escape_output(b"\x1b[2Jhi\r\n"), "\\x1b[2Jhi\\r\n");
        assert_eq!(escape_output(b"a\tb\x07"), "a\tb\\x07");
        assert_eq!(
            escape_output("caf\u{e9} \u{9b}".as_bytes()),
            "caf\u{e9} \\x9b"
        );
    }

    #[test]
    fn local_time_has_offset() {
        let tz: Tz = "America/New_York".parse().expect("zone");
        assert_eq!(local_time(1_772_953_200, tz), "2026-03-08T03:00:00-04:00");
        assert_eq!(utc_time(1_772_953_200), "2026-03-08T07:00:00Z");
    }
}
