//! A sleep that ends when a child of this runner exits or another thread asks, so the tick's
//! loop need not wake every 0.2 ms to look for ends (four ticks of two slots each did so about
//! 110,000 times in one drain of 10,000 short jobs).
//!
//! A child's exit is heard through a SIGCHLD handler (signal-hook's self-pipe: the handler writes
//! a byte to a socket the sleep polls). No thread blocks SIGCHLD: a job's shell inherits the
//! signal mask of the thread that spawns it (Rust's spawn keeps it), so a blocked SIGCHLD would
//! reach every job that `exec`s a program, and that program would never hear its own children
//! exit. With a handler, SIGCHLD is never discarded, whichever thread takes it; and a runner
//! started with SIGCHLD ignored (children then reap themselves, and the exit codes are lost)
//! gets the handler's disposition instead while it runs jobs.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;
use signal_hook::SigId;

/// The supervisor's sleep: the read end of the SIGCHLD handler's socket, and an eventfd other
/// threads write.
pub struct Wakeup {
    child_exited: UnixStream,
    handler: SigId,
    asked: EventFd,
}

impl Wakeup {
    /// Install the SIGCHLD handler and open the descriptors; `None` if the system refuses (the
    /// caller then polls on a timer).
    pub fn new() -> Option<Wakeup> {
        let (child_exited, write_end) = UnixStream::pair().ok()?;
        child_exited.set_nonblocking(true).ok()?;
        let asked =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .ok()?;
        let handler =
            signal_hook::low_level::pipe::register(signal_hook::consts::SIGCHLD, write_end).ok()?;
        Some(Wakeup {
            child_exited,
            handler,
            asked,
        })
    }

    /// End the current or next [`sleep`](Self::sleep), from any thread.
    pub fn wake(&self) {
        // Fails only when the counter is about to overflow: a wake-up is pending anyway.
        let _ = self.asked.write(1);
    }

    /// Sleep until a child exits, [`wake`](Self::wake) is called, or `timeout` passes; an exit
    /// or a wake-up since the last sleep ends it at once.
    pub fn sleep(&self, timeout: Duration) {
        let mut fds = [
            PollFd::new(self.child_exited.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.asked.as_fd(), PollFlags::POLLIN),
        ];
        // An error (EINTR from a signal) ends the sleep early, which costs one poll.
        let _ = ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None);
        // Consume what ended it, so the next sleep waits for what comes next. A byte stands for
        // any number of exits (signals coalesce, and a full socket drops bytes): the caller looks
        // at every job anyway.
        let mut bytes = [0u8; 64];
        while matches!((&self.child_exited).read(&mut bytes), Ok(n) if n > 0) {}
        let _ = self.asked.read();
    }
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        // Closes the write end too. SIGCHLD keeps signal-hook's handler, which does nothing
        // more: children are still reaped by whoever waits for them.
        signal_hook::low_level::unregister(self.handler);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use std::time::Instant;

    #[test]
    fn a_sigchld_or_a_wake_up_ends_the_sleep_and_a_timeout_ends_it_otherwise() {
        let wakeup = Wakeup::new().expect("socket, handler and eventfd");
        let long = Duration::from_secs(60);

        nix::sys::signal::raise(Signal::SIGCHLD).expect("raise");
        let started = Instant::now();
        wakeup.sleep(long);
        assert!(started.elapsed() < long, "SIGCHLD did not end the sleep");

        wakeup.wake();
        let started = Instant::now();
        wakeup.sleep(long);
        assert!(
            started.elapsed() < long,
            "the wake-up did not end the sleep"
        );

        // Both were consumed: now only the timeout ends it. Other tests' children exit meanwhile
        // (every SIGCHLD of this process ends the sleep), so wait for a quiet 50 ms.
        let deadline = Instant::now() + long;
        loop {
            let started = Instant::now();
            wakeup.sleep(Duration::from_millis(50));
            if started.elapsed() >= Duration::from_millis(50) {
                break;
            }
            assert!(Instant::now() < deadline, "the sleep never timed out");
        }
    }
}
