//! Catch-up: when a tick finds several due instants (cron or the host was down, or a tick came
//! late), which of them run and which are recorded as skipped, and why.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

use crate::display::duration;
use crate::policy::CatchUp;

/// The most missed instants `CatchUp::All` runs.
pub const CATCH_UP_ALL_LIMIT: usize = 100;

/// Whether one due instant runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run,
    /// Skipped, with a short human reason.
    Skip(String),
}

/// Given the due instants (ascending, all <= now), decide which run and which are skipped.
/// latest: only the newest runs, all others Skip. all: newest CATCH_UP_ALL_LIMIT run, older Skip.
/// none: an instant runs iff it is younger than the grace at `now` (see [`missed`]); otherwise
/// Skip (missed). The result has one entry per due instant, in the given order.
///
/// The tick passes the time its clock read; `schedule simulate` passes `--to`, and the two agree
/// because of how `missed` draws its line.
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
                    let decision = if !missed(late, grace_delta) {
                        Decision::Run
                    } else {
                        // In whole seconds, rounded down (a tick seeing 09:00 at 09:10:00.3 says
                        // "missed by 10m"), but past the grace: 60.4 s late with a grace of 1m is
                        // not "missed by 1m (grace 1m)". An instant exactly the grace old reads
                        // the same ("1m1s") whether a tick saw it a moment late or simulate
                        // judged it at `--to` itself.
                        let late_secs = u64::try_from(late.num_seconds()).unwrap_or(0);
                        let shown = late_secs.max(grace.as_secs() + 1);
                        Decision::Skip(format!(
                            "missed by {} (grace {})",
                            duration(Duration::from_secs(shown)),
                            duration(grace)
                        ))
                    };
                    (t, decision)
                })
                .collect()
        }
    }
}

/// Whether an instant `late` old when a tick reads its clock is missed under `--catch-up none`
/// with `grace`: when it is the grace old or more.
///
/// A tick started at a minute reads its clock a moment after it, so at a tick an instant is
/// never exactly the grace old: one that is the grace old at the minute is a little more when
/// the tick looks, and missed (with a grace of 0s, every instant is). `schedule simulate`
/// decides at `--to` itself, as of a tick at `--to`: counting "exactly the grace" as missed is
/// what makes it agree with that tick. Fire times, `--to` and the grace are whole seconds, so
/// the two agree whenever the tick reads its clock less than a second after its minute.
pub fn missed(late: TimeDelta, grace: TimeDelta) -> bool {
    late >= grace
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::testing::{sched, utc};
    use crate::tz::Tz;

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

        // 05:00 is ten minutes old at 05:10: under a grace of 10m1s, not of 10m.
        let plan = plan_catch_up(&due, now, CatchUp::None, Duration::from_secs(601));
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
        // A fraction of a second past the grace reads as past it.
        let plan = plan_catch_up(
            &[utc("2026-01-01T05:00:00Z")],
            utc("2026-01-01T05:01:00Z") + TimeDelta::milliseconds(400),
            CatchUp::None,
            Duration::from_secs(60),
        );
        assert_eq!(
            plan[0].1,
            Decision::Skip("missed by 1m1s (grace 1m)".into())
        );
        // Well past it, a fraction of a second is not rounded up into one more second.
        let plan = plan_catch_up(
            &[utc("2026-01-01T05:00:00Z")],
            utc("2026-01-01T05:10:00Z") + TimeDelta::milliseconds(300),
            CatchUp::None,
            Duration::from_secs(300),
        );
        assert_eq!(plan[0].1, Decision::Skip("missed by 10m (grace 5m)".into()));
    }

    /// An instant exactly the grace old at the minute is missed, as a tick reading its clock a
    /// moment after that minute misses it, with the same words: `simulate` (deciding at `--to`)
    /// and the tick (a moment after `--now`) agree. One second younger, both run it.
    #[test]
    fn catch_up_none_misses_an_instant_exactly_the_grace_old() {
        let at = utc("2026-05-01T10:20:00Z");
        for (grace_secs, words) in [
            (0, "missed by 1s (grace 0s)"),
            (300, "missed by 5m1s (grace 5m)"),
        ] {
            let grace = Duration::from_secs(grace_secs);
            let minute = at + TimeDelta::seconds(grace_secs as i64);
            for now in [minute, minute + TimeDelta::milliseconds(40)] {
                let plan = plan_catch_up(&[at], now, CatchUp::None, grace);
                assert_eq!(plan[0].1, Decision::Skip(words.into()), "{now}");
            }
        }
        let grace = Duration::from_secs(300);
        for now in ["2026-05-01T10:24:59Z", "2026-05-01T10:24:59.900Z"] {
            let now: DateTime<Utc> = now.parse().expect("a time");
            let plan = plan_catch_up(&[at], now, CatchUp::None, grace);
            assert_eq!(plan[0].1, Decision::Run, "{now}");
        }
        assert!(missed(TimeDelta::zero(), TimeDelta::zero()));
        assert!(!missed(TimeDelta::seconds(299), TimeDelta::seconds(300)));
    }
}
