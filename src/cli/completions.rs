//! `runner completions SHELL`: a completion script for bash, zsh or fish, generated from the
//! command-line definition itself, so it can never offer a command or flag that does not exist.

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::{emit, Cli};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells we generate for (and test against their real shells).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl From<Shell> for clap_complete::Shell {
    fn from(shell: Shell) -> Self {
        match shell {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let mut command = Cli::command();
    let name = command.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::from(args.shell),
        &mut command,
        &name,
        &mut script,
    );
    let mut script = String::from_utf8(script).context("completion script is not UTF-8")?;
    if let Shell::Fish = args.shell {
        fish_arguments(&name, &command, &[], &mut script);
    }
    emit(&script)
}

/// clap_complete's fish script completes options only (its documented limit), so fish offered
/// file names after `runner help` and `runner completions`: one line more for each argument
/// that takes known values, in the form and with the helper of the generated lines.
fn fish_arguments(bin: &str, parent: &clap::Command, path: &[&str], script: &mut String) {
    for command in parent.get_subcommands() {
        let mut path = path.to_vec();
        path.push(command.get_name());
        let condition = match path.as_slice() {
            [first] => {
                format!("__fish_{bin}_using_subcommand {first}")
            }
            [first, rest @ ..] => format!(
                "__fish_{bin}_using_subcommand {first}; and __fish_seen_subcommand_from {}",
                rest.join(" ")
            ),
            [] => continue,
        };
        for argument in command.get_positionals() {
            let Some(values) = argument.get_value_parser().possible_values() else {
                continue;
            };
            let values: Vec<String> = values
                .filter(|value| !value.is_hide_set())
                .map(|value| value.get_name().to_string())
                .collect();
            script.push_str(&format!(
                "complete -c {bin} -n \"{condition}\" -f -a \"{}\"\n",
                values.join(" ")
            ));
        }
        fish_arguments(bin, command, &path, script);
    }
}
