//! `runner man`: the man page (roff, section 1), generated from the command-line definition.
//!
//! One page, as `runner man > runner.1` users expect: clap_mangen's NAME, SYNOPSIS, DESCRIPTION
//! and OPTIONS, then our own COMMANDS section. clap_mangen's SUBCOMMANDS section would point to
//! `runner-init(1)` and the like, pages that do not exist; ours names each command as it is
//! typed, with its summary (and `runner help`'s topics), and points to its `--help`.

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

use super::{emit, help, Cli};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<()> {
    // `<COMMAND>` in the synopsis, as `runner --help` says (clap_mangen would say `<subcommands>`).
    let cli = Cli::command().subcommand_value_name("COMMAND");
    let man = Man::new(cli.clone()).title("RUNNER");
    let mut body = Vec::new();
    man.render_title(&mut body)?;
    man.render_name_section(&mut body)?;
    man.render_synopsis_section(&mut body)?;
    man.render_description_section(&mut body)?;
    man.render_options_section(&mut body)?;
    commands_section(&cli).to_writer(&mut body)?;
    man.render_version_section(&mut body)?;
    let body = String::from_utf8(body).context("man page is not UTF-8")?;
    // Every rendered piece starts with roff's two-line apostrophe preamble; the page needs one.
    let preamble = Roff::new().render();
    emit(&format!("{preamble}{}", body.replace(&preamble, "")))
}

/// Every command as it is typed (`runner schedule add`), with its one-line summary.
fn commands_section(cli: &clap::Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    list_commands(&mut roff, cli, cli.get_name());
    roff.control("PP", []);
    roff.text([
        roman("Each command's options: "),
        bold("runner COMMAND --help"),
        roman("."),
    ]);
    roff
}

fn list_commands(roff: &mut Roff, parent: &clap::Command, prefix: &str) {
    let top = prefix == parent.get_name();
    // clap's own `help` under `schedule` is covered by the pointer to --help; runner's `help`
    // (the top level's) is a command of its own, with topics.
    let visible = parent
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && (top || c.get_name() != "help"));
    for command in visible {
        let name = format!("{prefix} {}", command.get_name());
        entry(roff, &name, command.get_about().map(ToString::to_string));
        list_commands(roff, command, &name);
        if top && command.get_name() == "help" {
            for (topic, summary) in help::topics() {
                // A sentence, as the commands' summaries are.
                let mut chars = summary.chars();
                let summary = chars
                    .next()
                    .map(|first| first.to_uppercase().chain(chars).collect());
                entry(roff, &format!("{name} {topic}"), summary);
            }
        }
    }
}

/// One `.TP` entry: the name as typed, in bold, then its summary.
fn entry(roff: &mut Roff, name: &str, summary: Option<String>) {
    roff.control("TP", []);
    roff.text([bold(name)]);
    if let Some(summary) = summary {
        roff.text([roman(summary)]);
    }
}
