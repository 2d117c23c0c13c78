//! Parse, run the command, map the error to an exit code: once, here.

use runner::cli::{dispatch, Cli};
use runner::exit::{self, Failure};

fn main() {
    seed_jitter_from_the_os();
    let cli = Cli::from_command_line();
    let code = match dispatch(cli) {
        Ok(()) => exit::SUCCESS,
        Err(error) => {
            let code = exit::code_for(&error);
            let job_spoke = error
                .chain()
                .any(|c| c.downcast_ref::<Failure>().is_some_and(Failure::spoke));
            if !job_spoke {
                runner::complain!("runner: error: {error:#}{}", exit::hint_suffix(&error));
            }
            code
        }
    };
    std::process::exit(code);
}

/// fastrand seeds itself from the monotonic clock, which processes started together read alike:
/// ticks racing for one database would then draw the same backoff jitter and busy-wait sleeps,
/// and retry in lockstep. Seed this thread (the only one that draws) from the OS instead; should
/// the OS refuse, the clock's seed stays, and only the spread suffers.
fn seed_jitter_from_the_os() {
    if let Ok(seed) = getrandom::u64() {
        fastrand::seed(seed);
    }
}
