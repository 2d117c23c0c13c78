//! `runner completions SHELL`: a completion script for bash, zsh or fish, generated from the
//! command-line definition itself, so it can never offer a command or flag that does not exist.
//! Where a command takes a schedule's name, the script asks `runner completions
//! --schedule-names` for the names, from the database the line being completed names.

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::{emit, Cli, Ctx};
use crate::store;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["shell", "schedule_names"])))]
pub struct Args {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: Option<Shell>,
    /// Print the database's schedule names, one a line, which the scripts offer where a command
    /// takes one. Reads only: where there is no database yet it prints nothing (exit 0) and
    /// creates none; on PostgreSQL it gives up after 2 seconds.
    #[arg(long)]
    pub schedule_names: bool,
}

/// What an argument taking an existing schedule's name offers in the generated scripts (see
/// `cli::SCHEDULE_NAME`), replaced in each script by a call of `runner completions
/// --schedule-names`: a word no shell's generator quotes or changes.
pub const SCHEDULE_NAMES: &str = "RUNNER_SCHEDULE_NAMES";

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

pub fn run(shell: Shell) -> Result<()> {
    let mut command = Cli::command();
    let name = command.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::from(shell),
        &mut command,
        &name,
        &mut script,
    );
    let mut script = String::from_utf8(script).context("completion script is not UTF-8")?;
    if let Shell::Fish = shell {
        fish_arguments(&name, &command, &[], &mut script);
    }
    emit(&offer_schedule_names(shell, &script))
}

/// `runner completions --schedule-names`: every schedule's name, one a line (a damaged row's
/// too, unless its name is what is damaged). The database is peeked at (`OpenMode::Peek`):
/// nothing is created or changed, and none there yet is no names, not an error.
pub fn schedule_names(ctx: &Ctx) -> Result<()> {
    let Some(store) = store::peek(&ctx.location)? else {
        return Ok(());
    };
    let names: String = store
        .definitions()?
        .iter()
        .filter_map(|row| match row {
            Ok(definition) => Some(definition.name.as_str()),
            Err(damaged) => damaged.name(),
        })
        .map(|name| format!("{name}\n"))
        .collect();
    emit(&names)
}

/// The script with each `SCHEDULE_NAMES` placeholder replaced by a call of the shell function
/// that lists the names, and that function added.
fn offer_schedule_names(shell: Shell, script: &str) -> String {
    match shell {
        // In `opts="..."` and `compgen -W "..."`: the names are words among the others.
        Shell::Bash => format!(
            "{BASH_NAMES}\n{}",
            script.replace(SCHEDULE_NAMES, "$(__runner_schedule_names)")
        ),
        // `:name -- Schedule name:(PLACEHOLDER)`: the action becomes the function.
        Shell::Zsh => {
            let script = script.replace(&format!("({SCHEDULE_NAMES})"), "_runner_schedule_names");
            // Before the last lines, which call `_runner` when the file is autoloaded.
            match script.find("\nif [ \"$funcstack[1]\" = \"_runner\" ]") {
                Some(end) => format!("{}\n{ZSH_NAMES}{}", &script[..end], &script[end..]),
                None => format!("{script}\n{ZSH_NAMES}"),
            }
        }
        // `-a "PLACEHOLDER\t''"` for an option, `-a "PLACEHOLDER"` for a positional (ours).
        Shell::Fish => format!(
            "{}\n{FISH_NAMES}",
            script
                .replace(
                    &format!("{SCHEDULE_NAMES}\\t''"),
                    "(__fish_runner_schedule_names)"
                )
                .replace(SCHEDULE_NAMES, "(__fish_runner_schedule_names)")
        ),
    }
}

/// bash: the names, from the database `--db` names on the line (`--db PATH`, `--db=PATH`, as
/// typed: quotes removed, a URL's pieces joined again) or else RUNNER_DB or the default. A word
/// is unquoted by `eval` only when it holds no expansion or command (`$`, backquotes, unquoted
/// `;&|<>()`), and without globbing: completing must never run what the line holds.
const BASH_NAMES: &str = r#"__runner_dequote() {
    local safe='^([^'\''"\$`;&|<>()]|\\.|'\''[^'\'']*'\''|"([^"\$`]|\\.)*")+$'
    [[ $1 =~ $safe ]] || return 1
    local noglob=1
    [[ $- == *f* ]] || noglob=0
    set -f
    eval "__runner_word=($1)" 2>/dev/null
    local ok=$?
    (( noglob )) || set +f
    return $ok
}

__runner_schedule_names() {
    local i word __runner_word db=() program="${COMP_WORDS[0]}"
    if __runner_dequote "$program"; then
        program="${__runner_word[0]}"
    fi
    for (( i = 1; i < COMP_CWORD; i++ )); do
        [[ ${COMP_WORDS[i]} == --db ]] || continue
        (( i++ ))
        [[ ${COMP_WORDS[i]} == = ]] && (( i++ ))
        # bash splits an unquoted word at : and = (COMP_WORDBREAKS): a URL comes in pieces.
        word="${COMP_WORDS[i]}"
        while (( i + 1 < COMP_CWORD )) &&
            [[ ${COMP_WORDS[i]} == [:=] || ${COMP_WORDS[i+1]} == [:=] ]]; do
            (( i++ ))
            word+="${COMP_WORDS[i]}"
        done
        if __runner_dequote "$word"; then
            db=(--db "${__runner_word[0]}")
        fi
    done
    "$program" "${db[@]}" completions --schedule-names 2>/dev/null
}
"#;

/// zsh: the names, from the database `--db` names on the line before the cursor (unquoted by
/// zsh's own `(z)` and `(Q)`), or else RUNNER_DB or the default.
const ZSH_NAMES: &str = r#"(( $+functions[_runner_schedule_names] )) ||
_runner_schedule_names() {
    local -a line names db
    local i
    line=(${(z)LBUFFER})
    for (( i = 2; i < $#line; i++ )); do
        case $line[i] in
            --db) db=(--db "${(Q)line[i+1]}") ;;
            --db=*) db=(--db "${(Q)${line[i]#--db=}}") ;;
        esac
    done
    names=(${(f)"$(${(Q)line[1]} $db completions --schedule-names 2>/dev/null)"})
    # What _arguments passes (the group, the description) goes on to compadd.
    compadd "$@" -a names
}
"#;

/// fish: the names, from the database `--db` names on the line (fish unquotes the tokens), or
/// else RUNNER_DB or the default.
const FISH_NAMES: &str = r#"function __fish_runner_schedule_names
    set -l line (commandline -opc)
    set -l db
    for i in (seq 2 (count $line))
        if test "$line[$i]" = --db
            set -l next (math $i + 1)
            if test $next -le (count $line)
                set db --db $line[$next]
            end
        else if string match -q -- '--db=*' $line[$i]
            set db --db (string replace -- --db= '' $line[$i])
        end
    end
    $line[1] $db completions --schedule-names 2>/dev/null
end
"#;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument (command path, value name) of `command` and its commands, with whether
    /// completion offers the schedule names for it.
    fn arguments(command: &clap::Command, path: &str, found: &mut Vec<(String, String, bool)>) {
        for sub in command.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            for arg in sub.get_arguments() {
                let value = match arg.get_value_names() {
                    Some(names) => names.iter().map(ToString::to_string).collect(),
                    None => arg.get_id().as_str().to_uppercase(),
                };
                let offers = arg
                    .get_value_parser()
                    .possible_values()
                    .is_some_and(|mut values| values.any(|v| v.get_name() == SCHEDULE_NAMES));
                found.push((path.trim().to_string(), value, offers));
            }
            arguments(sub, &path, found);
        }
    }

    /// Each argument that takes an existing schedule's name (a NAME, or NAMES) offers the
    /// names, and no other does: `schedule add`'s NAME is a new one.
    #[test]
    fn every_argument_taking_a_schedule_name_offers_the_names() {
        let mut found = Vec::new();
        let mut command = Cli::command();
        // Built: the commands' arguments are added only then (`defer`).
        command.build();
        arguments(&command, "", &mut found);
        let mut offering = Vec::new();
        for (path, value, offers) in found {
            let takes_name = (value == "NAME" || value == "NAMES") && path != "schedule add";
            assert_eq!(offers, takes_name, "runner {path} {value}");
            if offers {
                offering.push(path);
            }
        }
        assert_eq!(
            offering,
            [
                "schedule show",
                "schedule edit",
                "schedule rm",
                "schedule pause",
                "schedule resume",
                "schedule next",
                "schedule reanchor",
                "schedule export",
                "schedule simulate",
                "run",
                "history",
                "why",
                "cancel",
            ]
        );
    }
}
