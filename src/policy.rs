//! The policies a schedule is configured with: what to do with missed instants (`CatchUp`), with
//! a newly due run while one is running (`Overlap`), and with what a job leaves behind
//! (`Leftovers`). Each is a value with one parser, for flags and stored columns alike; the rules
//! that apply them live with what they decide (`schedule::catch_up`, the tick, `process`).

use crate::text_enum::text_enum;

text_enum!(
    /// What to do with scheduled instants that were missed (the runner was not ticking, or a
    /// tick came late).
    CatchUp {
        /// Run only the newest missed instant.
        Latest => "latest",
        /// Run every missed instant, up to [`crate::schedule::CATCH_UP_ALL_LIMIT`] of the newest.
        All => "all",
        /// Run an instant only if it is younger than the grace period (`schedule::catch_up::missed`).
        None => "none",
    },
    "catch-up policy"
);

text_enum!(
    /// What to do with a newly due run while another run of the same schedule is running.
    Overlap {
        Forbid => "forbid",
        Allow => "allow",
    },
    "overlap policy"
);

/// How the skip reason of an instant that `forbid` skipped begins: `why` tells an overlap skip
/// from a catch-up skip by it.
const OVERLAP_SKIP_PREFIX: &str = "overlap forbid:";

impl Overlap {
    /// Why an instant of a `forbid` schedule was skipped: run `running` of it was still running
    /// when the instant was materialised.
    pub fn forbid_skip_reason(running: i64) -> String {
        format!("{OVERLAP_SKIP_PREFIX} run {running} of this schedule is still running")
    }

    /// Whether a recorded skip reason is `forbid_skip_reason`'s (not catch-up's).
    pub fn is_overlap_skip(reason: &str) -> bool {
        reason.starts_with(OVERLAP_SKIP_PREFIX)
    }
}

text_enum!(
    /// What happens to the processes a job leaves behind when its main process (the shell)
    /// exits on its own: `kill` them (TERM, then KILL), as systemd does for a service's control
    /// group, or `keep` them, for jobs that deliberately start daemons. A timeout or a cancel stops
    /// everything of the attempt either way.
    Leftovers {
        Kill => "kill",
        Keep => "keep",
    },
    "leftover policy"
);

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn overlap_skips_are_told_from_catch_up_skips() {
        let reason = Overlap::forbid_skip_reason(7);
        assert_eq!(
            reason,
            "overlap forbid: run 7 of this schedule is still running"
        );
        assert!(Overlap::is_overlap_skip(&reason));
        assert!(!Overlap::is_overlap_skip(
            "catch-up latest: superseded by 2026-11-23T10:00:00Z"
        ));
        assert!(!Overlap::is_overlap_skip("missed by 10m 0s (grace 5m 0s)"));
    }

    #[test]
    fn every_policy_parses_the_same_way() {
        assert_eq!(" Forbid ".parse::<Overlap>(), Ok(Overlap::Forbid));
        assert_eq!("KEEP".parse::<Leftovers>(), Ok(Leftovers::Keep));
        assert_eq!(
            "sometimes".parse::<Overlap>().map_err(|e| e.to_string()),
            Err("invalid overlap policy \"sometimes\"; use one of: forbid, allow".to_string())
        );
        assert_eq!(
            "most".parse::<CatchUp>().map_err(|e| e.to_string()),
            Err("invalid catch-up policy \"most\"; use one of: latest, all, none".to_string())
        );
    }
}
