//! `runner status --check`: health as a monitoring plugin sees it. A pure verdict from a `Health`
//! snapshot, `now` and the thresholds: one summary line and the monitoring-plugins exit code
//! (0 OK, 1 WARNING, 2 CRITICAL), so Nagios, Icinga and systemd `OnFailure=` can use it as is.

use std::time::Duration;

use crate::display::{duration_of_secs, exact_duration};
use crate::store::Health;

/// How bad it is, in the order monitoring plugins rank it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warning,
    Critical,
}

impl Level {
    /// The monitoring-plugins exit code.
    pub fn exit_code(self) -> i32 {
        match self {
            Level::Ok => 0,
            Level::Warning => 1,
            Level::Critical => 2,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warning => "WARNING",
            Level::Critical => "CRITICAL",
        }
    }
}

/// When each rule fires.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Critical: no tick for longer than this (cron stopped waking us).
    pub max_tick_age: Duration,
    /// Critical: a run went dead within this long before now.
    pub dead_window: Duration,
    /// Warning: a due run has waited longer than this to be claimed.
    pub max_due_lag: Duration,
}

impl Thresholds {
    /// The `recent_since` to read `Health` with, so its `dead_recent` counts the dead window.
    pub fn recent_since(&self, now: i64) -> i64 {
        now.saturating_sub(secs(self.dead_window))
    }
}

/// The verdict: the worst level among the rules that fired, and one line naming them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub level: Level,
    pub summary: String,
}

/// Judge `h` (read with `recent_since = thresholds.recent_since(now)`) at `now`.
pub fn evaluate(h: &Health, now: i64, t: &Thresholds) -> Verdict {
    let mut fired: Vec<(Level, String)> = Vec::new();
    match h.last_tick_at {
        None => fired.push((Level::Critical, "no tick has ever run".to_string())),
        Some(at) if now - at > secs(t.max_tick_age) => fired.push((
            Level::Critical,
            format!(
                "no tick for {} (max-tick-age {})",
                duration_of_secs(now - at),
                shown(t.max_tick_age)
            ),
        )),
        Some(_) => {}
    }
    // A tick ran with a clock ahead (or this host's stepped back): until this clock gets there,
    // a schedule that tick moved ahead does not fire (plain `status` says which), and while
    // that tick is the last, the rule above cannot tell that cron stopped.
    if let Some(behind) = crate::clock::behind_by(now, h.clock_high_water) {
        fired.push((
            Level::Warning,
            format!(
                "this host's clock is {} behind the latest time a tick saw: until it gets there, \
                 schedules a tick moved ahead do not fire (see `runner status`)",
                duration_of_secs(behind)
            ),
        ));
    }
    if h.expired_leases > 0 {
        fired.push((
            Level::Critical,
            format!("{} run(s) hold an expired lease", h.expired_leases),
        ));
    }
    if h.dead_recent > 0 {
        fired.push((
            Level::Critical,
            format!(
                "{} run(s) went dead (dead-window {})",
                h.dead_recent,
                shown(t.dead_window)
            ),
        ));
    }
    if let Some(due) = &h.oldest_due {
        let lag = now - due.run_at;
        if lag > secs(t.max_due_lag) {
            fired.push((
                Level::Warning,
                format!(
                    "run {} due for {} (max-due-lag {})",
                    due.id,
                    duration_of_secs(lag),
                    shown(t.max_due_lag)
                ),
            ));
        }
    }
    // The worst first, so a line cut short by a pager still says what matters most.
    fired.sort_by_key(|(level, _)| std::cmp::Reverse(*level));
    let level = fired.first().map_or(Level::Ok, |(level, _)| *level);
    let what = if fired.is_empty() {
        let tick = h.last_tick_at.map_or_else(String::new, |at| {
            format!(", last tick {}", crate::display::age(at, now))
        });
        format!("healthy{tick}")
    } else {
        let reasons: Vec<String> = fired.into_iter().map(|(_, reason)| reason).collect();
        reasons.join("; ")
    };
    Verdict {
        level,
        summary: format!("RUNNER {} - {what}", level.as_str()),
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// A threshold exactly as given (not rounded to two units), in the units a duration is written
/// in: `3m`, `1h`, `1h30m15s`, `40d`, `1s500ms`. (humantime's own formatting says `40d` as
/// `1month 9days 13h 30m`, in a unit runner refuses as input.)
fn shown(d: Duration) -> String {
    // The part under a second as humantime writes it (`500ms`, `1ms 500us`), without spaces.
    let fraction = humantime::format_duration(Duration::from_nanos(d.subsec_nanos().into()))
        .to_string()
        .replace(' ', "");
    match (d.as_secs(), d.subsec_nanos()) {
        (secs, 0) => exact_duration(secs),
        (0, _) => fraction,
        (secs, _) => format!("{}{fraction}", exact_duration(secs)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{RunBrief, Storage};

    const NOW: i64 = 1_800_000_000;

    fn thresholds() -> Thresholds {
        Thresholds {
            max_tick_age: Duration::from_secs(180),
            dead_window: Duration::from_secs(3600),
            max_due_lag: Duration::from_secs(300),
        }
    }

    fn healthy() -> Health {
        Health {
            counts: Vec::new(),
            oldest_due: None,
            held_by_pause: 0,
            running: Vec::new(),
            expired_leases: 0,
            stopping: Vec::new(),
            retries_in_flight: Vec::new(),
            top_errors: Vec::new(),
            dead_recent: 0,
            dead_recent_runs: Vec::new(),
            last_tick_at: Some(NOW - 30),
            clock_high_water: Some(NOW - 30),
            last_prune_at: None,
            oldest_run: None,
            storage: Storage::default(),
        }
    }

    fn due(run_at: i64) -> RunBrief {
        RunBrief {
            id: 7,
            job: "backup".into(),
            timezone: "UTC".into(),
            scheduled_for: run_at,
            run_at,
            attempt: 0,
            max_attempts: 1,
            error_code: None,
            finished_at: None,
        }
    }

    #[test]
    fn thresholds_are_shown_in_the_units_they_are_written_in() {
        let shown_as = |ms: u64| shown(Duration::from_millis(ms));
        assert_eq!(shown_as(0), "0s");
        assert_eq!(shown_as(180_000), "3m");
        assert_eq!(shown_as(5_415_000), "1h30m15s");
        // Not "1month 9days 13h 30m": months are no unit of runner's.
        assert_eq!(shown_as(40 * 86_400_000), "40d");
        assert_eq!(shown_as(1_500), "1s500ms");
        assert_eq!(shown_as(250), "250ms");
        assert_eq!(shown(Duration::from_micros(500)), "500us");
        assert_eq!(shown(Duration::from_micros(1_000_001)), "1s1us");
    }

    #[test]
    fn healthy_is_ok() {
        let v = evaluate(&healthy(), NOW, &thresholds());
        assert_eq!(v.level, Level::Ok);
        assert_eq!(v.summary, "RUNNER OK - healthy, last tick 30s ago");
        assert_eq!(v.level.exit_code(), 0);
    }

    #[test]
    fn a_tick_with_a_clock_ahead_is_a_warning_not_0s_ago() {
        // The last tick itself ran a day ahead, or a tick did and later ones ran on time.
        for last_tick_at in [NOW + 86_400, NOW - 30] {
            let h = Health {
                last_tick_at: Some(last_tick_at),
                clock_high_water: Some(NOW + 86_400),
                ..healthy()
            };
            let v = evaluate(&h, NOW, &thresholds());
            assert_eq!(v.level, Level::Warning);
            assert_eq!(
                v.summary,
                "RUNNER WARNING - this host's clock is 1d behind the latest time a tick saw: \
                 until it gets there, schedules a tick moved ahead do not fire (see `runner \
                 status`)"
            );
        }
        // Within the clocks' tolerance: healthy, and said as it is.
        let h = Health {
            last_tick_at: Some(NOW + 2),
            clock_high_water: Some(NOW + 2),
            ..healthy()
        };
        let v = evaluate(&h, NOW, &thresholds());
        assert_eq!(v.level, Level::Ok);
        assert_eq!(v.summary, "RUNNER OK - healthy, last tick 0s ago");
    }

    #[test]
    fn stale_tick_is_critical_and_named() {
        let h = Health {
            last_tick_at: Some(NOW - 312),
            ..healthy()
        };
        let v = evaluate(&h, NOW, &thresholds());
        assert_eq!(v.level.exit_code(), 2);
        assert_eq!(
            v.summary,
            "RUNNER CRITICAL - no tick for 5m12s (max-tick-age 3m)"
        );
    }

    #[test]
    fn a_tick_exactly_at_the_limit_is_still_fine() {
        let h = Health {
            last_tick_at: Some(NOW - 180),
            ..healthy()
        };
        assert_eq!(evaluate(&h, NOW, &thresholds()).level, Level::Ok);
    }

    #[test]
    fn never_ticked_is_critical() {
        let h = Health {
            last_tick_at: None,
            ..healthy()
        };
        let v = evaluate(&h, NOW, &thresholds());
        assert_eq!(v.level, Level::Critical);
        assert_eq!(v.summary, "RUNNER CRITICAL - no tick has ever run");
    }

    #[test]
    fn expired_lease_and_dead_runs_are_critical() {
        let h = Health {
            expired_leases: 2,
            ..healthy()
        };
        assert_eq!(
            evaluate(&h, NOW, &thresholds()).summary,
            "RUNNER CRITICAL - 2 run(s) hold an expired lease"
        );
        let h = Health {
            dead_recent: 1,
            ..healthy()
        };
        assert_eq!(
            evaluate(&h, NOW, &thresholds()).summary,
            "RUNNER CRITICAL - 1 run(s) went dead (dead-window 1h)"
        );
    }

    #[test]
    fn due_lag_warns_only_past_its_threshold() {
        let h = Health {
            oldest_due: Some(due(NOW - 300)),
            ..healthy()
        };
        assert_eq!(evaluate(&h, NOW, &thresholds()).level, Level::Ok);
        let h = Health {
            oldest_due: Some(due(NOW - 301)),
            ..healthy()
        };
        let v = evaluate(&h, NOW, &thresholds());
        assert_eq!(v.level.exit_code(), 1);
        assert_eq!(
            v.summary,
            "RUNNER WARNING - run 7 due for 5m1s (max-due-lag 5m)"
        );
    }

    #[test]
    fn the_worst_rule_leads_and_every_fired_rule_is_named() {
        let h = Health {
            oldest_due: Some(due(NOW - 600)),
            last_tick_at: Some(NOW - 600),
            ..healthy()
        };
        let v = evaluate(&h, NOW, &thresholds());
        assert_eq!(v.level, Level::Critical);
        assert_eq!(
            v.summary,
            "RUNNER CRITICAL - no tick for 10m (max-tick-age 3m); run 7 due for 10m \
             (max-due-lag 5m)"
        );
    }

    #[test]
    fn dead_window_sets_what_recent_means() {
        assert_eq!(thresholds().recent_since(NOW), NOW - 3600);
    }
}
