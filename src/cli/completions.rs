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
        name,
        &mut script,
    );
    emit(&String::from_utf8(script).context("completion script is not UTF-8")?)
}
