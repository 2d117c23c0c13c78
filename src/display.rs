//! How times, durations and captured output are shown: one place, so every command agrees.

use std::time::Duration;

use chrono::SecondsFormat;

use crate::clock::from_epoch;
use crate::tz::Tz;

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

/// An instant as JSON carries it: RFC 3339 in UTC, e.g. `2026-03-08T07:00:00Z`. A view puts it
/// beside the same instant in epoch seconds, as `<name>` and `<name>_epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime(pub i64);

impl serde::Serialize for UtcTime {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&utc_time(self.0))
    }
}

/// A span of time for people: the one duration format of every command, for how long an attempt
/// took, how long ago a tick ran, how far apart two clocks are, a schedule's timeout or grace.
/// At most two units, the larger first, written as the duration flags take them (so a printed
/// value can be pasted back into `--timeout` or `--grace`): `250ms`, `42s`, `3m5s`, `10m`,
/// `2h10m`; from a day on, days and hours (`1d3h`, `45d`), for the gaps a clock step makes.
pub fn duration(span: Duration) -> String {
    let secs = span.as_secs();
    let (larger, smaller) = match secs {
        0 => {
            return match span.subsec_millis() {
                0 => "0s".to_string(),
                ms => format!("{ms}ms"),
            }
        }
        1..=59 => return format!("{secs}s"),
        60..=3599 => ((secs / 60, "m"), (secs % 60, "s")),
        3600..=86_399 => ((secs / 3600, "h"), (secs % 3600 / 60, "m")),
        _ => ((secs / 86_400, "d"), (secs % 86_400 / 3600, "h")),
    };
    match smaller {
        (0, _) => format!("{}{}", larger.0, larger.1),
        _ => format!("{}{}{}{}", larger.0, larger.1, smaller.0, smaller.1),
    }
}

/// Whole seconds exactly, in the units and spelling of [`duration`] (`1d`, `1h30m`, `2d3h4m5s`):
/// what a file that is read back (`schedule export`) must say, where `duration` rounds to two
/// units.
pub fn exact_duration(secs: u64) -> String {
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
    ];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    match text.is_empty() {
        true => "0s".to_string(),
        false => text,
    }
}

/// [`duration`] of whole seconds as the store keeps them; a negative span (clocks disagree)
/// shows as `0s`.
pub fn duration_of_secs(secs: i64) -> String {
    duration(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

/// How long ago `at` was, at `now`: `3m ago`; or, when `at` is ahead of this clock by more than
/// the clocks may disagree (a tick given `--now` in the future, another host's clock), `44m in
/// the future of this clock`, never a misleading `0s ago`.
pub fn age(at: i64, now: i64) -> String {
    if at - now > crate::clock::CLOCK_TOLERANCE_SECS {
        format!("{} in the future of this clock", duration_of_secs(at - now))
    } else {
        format!("{} ago", duration_of_secs(now - at))
    }
}

/// [`duration`] of milliseconds as the store keeps them.
pub fn duration_of_ms(ms: i64) -> String {
    duration(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// A size for people: `812 B`, `1.4 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Captured job output made safe for a terminal: valid UTF-8 text passes, except control
/// characters, escape sequences and bidirectional-text controls, which are shown escaped (`\x1b`,
/// `\r`, `\u{202e}`), never interpreted. Newlines and tabs are kept.
pub fn escape_output(bytes: &[u8]) -> String {
    escape(&String::from_utf8_lossy(bytes), true)
}

/// A stored value (a command, a name, a directory) made safe for one line of a table or a
/// `key: value` listing: like `escape_output`, and newlines and tabs are escaped too (`\n`, `\t`),
/// so a value never breaks the layout it is printed in.
pub fn escape_line(text: &str) -> String {
    escape(text, false)
}

/// Bidirectional-text controls: embeddings and overrides (U+202A–U+202E), isolates
/// (U+2066–U+2069) and marks (U+200E, U+200F, U+061C). Not control characters to Unicode, but they
/// reorder what a terminal shows ("Trojan Source"), so a command could display as something else.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

fn escape(text: &str, keep_layout: bool) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' if keep_layout => shown.push(c),
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\r' => shown.push_str("\\r"),
            c if c.is_control() => shown.push_str(&format!("\\x{:02x}", c as u32)),
            c if is_bidi_control(c) => shown.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => shown.push(c),
        }
    }
    shown
}

/// `1 schedule`, `1,204 finished runs`: a count (of any integer type, never negative) with its
/// noun, thousands grouped. The one way a number of things is written.
pub fn count(n: impl std::fmt::Display, noun: &str) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if digits == "1" {
        format!("{grouped} {noun}")
    } else {
        format!("{grouped} {noun}s")
    }
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
    fn escapes_bidi_controls() {
        for c in [
            '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200e}', '\u{200f}',
        ] {
            let shown = escape_output(format!("a{c}b").as_bytes());
            assert_eq!(shown, format!("a\\u{{{:x}}}b", c as u32));
            assert_eq!(escape_line(&format!("a{c}b")), shown);
        }
        assert_eq!(escape_output("x\u{202e}y\n".as_bytes()), "x\\u{202e}y\n");
        // Ordinary right-to-left text is text, not a control.
        assert_eq!(
            escape_line("\u{5e9}\u{5dc}\u{5d5}\u{5dd}"),
            "\u{5e9}\u{5dc}\u{5d5}\u{5dd}"
        );
    }

    #[test]
    fn escape_line_keeps_everything_on_one_line() {
        assert_eq!(
            escape_line("printf '\x1b[31m'\nrm -rf /\tx\r"),
            "printf '\\x1b[31m'\\nrm -rf /\\tx\\r"
        );
        assert_eq!(
            escape_line("plain /usr/bin/backup --full"),
            "plain /usr/bin/backup --full"
        );
    }

    #[test]
    fn durations_have_one_format() {
        let d = |secs: u64| duration(Duration::from_secs(secs));
        assert_eq!(duration(Duration::ZERO), "0s");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_millis(1500)), "1s");
        assert_eq!(d(45), "45s");
        assert_eq!(d(600), "10m");
        assert_eq!(d(185), "3m5s");
        assert_eq!(d(3600), "1h");
        assert_eq!(d(7800), "2h10m");
        assert_eq!(d(86_400 + 3 * 3600 + 5), "1d3h");
        assert_eq!(d(45 * 86_400 + 1800), "45d");
        assert_eq!(duration_of_secs(-5), "0s");
        assert_eq!(duration_of_ms(2), "2ms");
        assert_eq!(exact_duration(0), "0s");
        assert_eq!(exact_duration(86_400), "1d");
        assert_eq!(exact_duration(5400), "1h30m");
        assert_eq!(
            exact_duration(2 * 86_400 + 3 * 3600 + 4 * 60 + 5),
            "2d3h4m5s"
        );
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 * 1024 * 1024), "5.0 MiB");
    }

    #[test]
    fn local_time_has_offset() {
        let tz: Tz = "America/New_York".parse().expect("zone");
        assert_eq!(local_time(1_772_953_200, tz), "2026-03-08T03:00:00-04:00");
        assert_eq!(utc_time(1_772_953_200), "2026-03-08T07:00:00Z");
    }

    #[test]
    fn counts_group_thousands() {
        assert_eq!(count(1, "schedule"), "1 schedule");
        assert_eq!(count(0, "event"), "0 events");
        assert_eq!(count(1204, "finished run"), "1,204 finished runs");
        assert_eq!(count(1_234_567, "event"), "1,234,567 events");
        assert_eq!(count(1_i64, "run"), "1 run");
        assert_eq!(count(12_000_i64, "attempt"), "12,000 attempts");
    }
}
