//! `runner help [TOPIC|COMMAND...]`: a command's help, as `runner COMMAND --help` prints it, or a
//! topic that several commands' flags share: how to write a duration, how to write a time.

use anyhow::Result;
use clap::CommandFactory;

use super::{emit, Cli, Offering};
use crate::exit::Failure;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// `durations`, `times`, or a command, e.g. `schedule add`.
    #[arg(value_name = "TOPIC|COMMAND", value_parser = Offering::<String>::new(OFFERED),
          hide_possible_values = true)]
    pub topic: Vec<String>,
}

/// What shell completion offers after `runner help`: the topics, then the commands. (Static, as
/// a completion script is; a test checks it against TOPICS and the command line.)
const OFFERED: &[&str] = &[
    "durations",
    "times",
    "init",
    "tick",
    "schedule",
    "run",
    "history",
    "show",
    "why",
    "status",
    "metrics",
    "retry",
    "cancel",
    "prune",
    "migrate",
    "doctor",
    "completions",
    "man",
    "help",
];

/// The topics, with a line each for `runner --help`.
pub const TOPICS: &str = "Help topics:
  runner help durations   how to write a duration: 30s, 5m, 1h30m, 2d
  runner help times       how to write a time: 2026-11-23, 2026-11-23 10:30, 10:30, RFC 3339";

/// The topics of [`TOPICS`] (the one list of them), with their summaries: ("durations", "how
/// to write a duration: ..."), for the man page.
pub fn topics() -> impl Iterator<Item = (&'static str, &'static str)> {
    TOPICS.lines().filter_map(|line| {
        let (topic, summary) = line.trim().strip_prefix("runner help ")?.split_once(' ')?;
        Some((topic, summary.trim_start()))
    })
}

const DURATIONS: &str = "\
Durations

A duration is a number and a unit; several are added up, written together or apart:
  30s   90s   5m   1h30m   '1h 30m'   2d   1w

Units: s (also sec, second(s)), m (min, minute(s)), h (hr, hour(s)), d (day(s)),
w (week(s)), and ms for milliseconds. Months and years have no fixed length: write days.

Flags and settings that take one:
  schedule add, edit   --timeout, --backoff-base, --backoff-max, --grace (whole seconds:
                       1.5s is refused rather than cut short)
  schedule apply       the same settings in the file: timeout, backoff_base, backoff_max,
                       grace (timeout = \"90m\")
  schedule pause       --for (whole seconds too)
  tick                 --lease, --max-tick
  status --check       --max-tick-age, --dead-window, --max-due-lag
  prune                --older-than, and RUNNER_RETENTION (which also takes `off`)
  history              --since 2h: from two hours before now on (it also takes a time:
                       `runner help times`)

Durations are shown the way the flags take them, with at most two units: 250ms, 42s, 3m5s,
10m, 2h10m, 1d3h.
";

const TIMES: &str = "\
Times

Flags that take a time (history --since, schedule simulate --from and --to, why --at, and
the global --now) accept:
  2026-11-23                  midnight at the start of that day
  2026-11-23T10:30            a date and a time of day (seconds optional: 10:30:15)
  '2026-11-23 10:30'          the same with a space (quote it for the shell)
  10:30                       today at 10:30 (not --now: today would come from the clock it
                              replaces)
  2026-11-23T10:30:00+01:00   RFC 3339, with its offset or Z for UTC

A time without an offset is in UTC, unless an IANA zone name follows it after a space:
  '2026-11-23 10:30 Europe/Paris'   '10:30 America/New_York'   '2026-11-23 Asia/Tokyo'
(\"today\" is then that zone's). A local time that happens twice, when clocks fall back, means
the first; one that does not exist, when they spring forward, is refused.

why --at is the exception: there a time without an offset or a zone is in the SCHEDULE's zone
(10:30 is 10:30 today there), and a time there that happens twice or not at all is not
refused: why says what the schedule did at that hour.

history --since also takes a duration: --since 2h means from two hours before now on.

Fire times are computed up to the start of the year 5000 in the schedule's zone: --now and
why --at (in the schedule's zone) take no year after 4999, and schedule simulate and next show
no fire time after that (both say where they stop, when that cuts them short).

Times are shown in the schedule's zone with its offset (2026-03-08T03:00:00-04:00), and in UTC
in --json output (2026-03-08T07:00:00Z).
";

pub fn run(args: Args) -> Result<()> {
    let words: Vec<&str> = args.topic.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["durations" | "duration"] => emit(DURATIONS),
        ["times" | "time"] => emit(TIMES),
        path => {
            let mut command = Cli::command();
            // Built, so each command's usage line names it in full (`runner schedule add`).
            command.build();
            let mut current = &mut command;
            for word in path {
                current = current.find_subcommand_mut(word).ok_or_else(|| {
                    Failure::usage(format!(
                        "no help topic or command {:?}; topics are durations and times, and \
                         `runner --help` lists the commands",
                        path.join(" ")
                    ))
                })?;
            }
            emit(&current.render_long_help().to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Every command's examples, with the command's path, e.g. (["schedule", "add"], "...").
    fn examples(command: &clap::Command, path: &[String], found: &mut Vec<(String, String)>) {
        for sub in command.get_subcommands() {
            let mut sub_path = path.to_vec();
            sub_path.push(sub.get_name().to_string());
            // clap's own `schedule help` has no examples to give.
            if sub.get_name() != "help" || path.is_empty() {
                let text = sub
                    .get_after_long_help()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                found.push((sub_path.join(" "), text));
            }
            examples(sub, &sub_path, found);
        }
    }

    #[test]
    fn every_command_has_examples_and_each_one_parses() {
        let mut found = Vec::new();
        examples(&Cli::command(), &[], &mut found);
        assert!(found.len() > 20, "{found:?}");
        let mut checked = 0;
        for (path, text) in &found {
            assert!(
                text.starts_with("Examples:\n"),
                "`runner {path} --help` has no examples"
            );
            for line in text.lines().map(str::trim) {
                if !line.starts_with("runner ") {
                    continue;
                }
                // The runner command itself: not what a shell does with its output.
                let end = [" #", " |", " >", " &&"]
                    .iter()
                    .filter_map(|cut| line.find(cut))
                    .min()
                    .unwrap_or(line.len());
                let words = shlex::split(&line[..end]).expect("shell words");
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("the example `{line}` of `runner {path}` does not parse:\n{e}");
                }
                checked += 1;
            }
        }
        assert!(checked > 40, "only {checked} examples checked");
    }

    #[test]
    fn topics_are_read_from_the_list_runner_help_prints() {
        let topics: Vec<_> = topics().collect();
        assert_eq!(
            topics,
            [
                ("durations", "how to write a duration: 30s, 5m, 1h30m, 2d"),
                (
                    "times",
                    "how to write a time: 2026-11-23, 2026-11-23 10:30, 10:30, RFC 3339"
                ),
            ]
        );
    }

    #[test]
    fn completion_offers_every_topic_and_command_after_help() {
        let topics = topics().map(|(topic, _)| topic.to_string());
        let command = Cli::command();
        let commands = command.get_subcommands().map(|c| c.get_name().to_string());
        let expected: Vec<String> = topics.chain(commands).collect();
        assert_eq!(OFFERED, expected);
    }

    #[test]
    fn topics_and_commands_resolve() {
        assert!(run(Args {
            topic: vec!["schedule".into(), "nope".into()]
        })
        .is_err());
    }
}
