//! Parse, run the command, map the error to an exit code: once, here.

use clap::Parser;

use runner::cli::{dispatch, Cli};
use runner::exit::{self, Failure};

fn main() {
    keep_inherited_descriptors_from_jobs();
    seed_jitter_from_the_os();
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(()) => exit::SUCCESS,
        Err(error) => {
            let code = exit::code_for(&error);
            let job_spoke = error
                .chain()
                .any(|c| c.downcast_ref::<Failure>().is_some_and(Failure::spoke));
            if !job_spoke {
                runner::complain!("runner: error: {error:#}");
                if let Some(hint) = exit::hint(&error) {
                    runner::complain!("runner: hint: {hint}");
                }
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

/// Jobs get stdin, stdout and stderr, nothing else. Descriptors this process opens are
/// close-on-exec already (Rust and SQLite open everything that way); the ones it inherited are
/// not, so mark them too. Otherwise, e.g. under `flock -n LOCK runner tick`, every job would
/// inherit the lock, and a job that leaves a daemon behind would hold it forever.
fn keep_inherited_descriptors_from_jobs() {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let inherited: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in inherited {
        // EBADF for the directory's own descriptor, closed by now: nothing to do.
        let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    }
}
