//! Parse, run the command, map the error to an exit code: once, here.

use clap::Parser;

use runner::cli::{dispatch, Cli};
use runner::exit::{self, Failure};

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(()) => exit::SUCCESS,
        Err(error) => {
            let code = exit::code_for(&error);
            let job_spoke = error
                .chain()
                .any(|c| matches!(c.downcast_ref::<Failure>(), Some(Failure::JobExit(_))));
            if !job_spoke {
                eprintln!("runner: error: {error:#}");
                if let Some(hint) = exit::sqlite_hint(&error) {
                    eprintln!("runner: hint: {hint}");
                }
            }
            code
        }
    };
    std::process::exit(code);
}
