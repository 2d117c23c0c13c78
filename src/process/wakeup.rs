//! A sleep that ends when a child of this runner exits or another thread asks, so the tick's
//! loop need not wake every 0.2 ms to look for ends (four ticks of two slots each did so about
//! 110,000 times in one drain of 10,000 short jobs).
//!
//! SIGCHLD is blocked in the thread that makes the [`Wakeup`], and so in every thread it starts
//! afterwards, and read through a signalfd: blocked, it stays pending instead of being discarded
//! (its default action), whichever thread's child exited. Jobs still start with no signal
//! blocked: Rust's spawn sets the child's mask to empty. A thread started before, with SIGCHLD
//! not blocked, may take the signal and lose it; the sleep then ends at its timeout, as the
//! polling did. So `runner tick` blocks it first thing ([`block_child_exits`]), before its
//! database connection can start a thread.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;

/// Block SIGCHLD in this thread and the threads it starts from now on (see the module's text).
/// Returns the set blocked; `None` if the system refused.
pub fn block_child_exits() -> Option<SigSet> {
    let mut sigchld = SigSet::empty();
    sigchld.add(Signal::SIGCHLD);
    sigchld.thread_block().ok()?;
    Some(sigchld)
}

/// The supervisor's sleep: a signalfd for SIGCHLD and an eventfd other threads write.
pub struct Wakeup {
    child_exited: SignalFd,
    asked: EventFd,
}

impl Wakeup {
    /// Block SIGCHLD in this thread (and the threads it starts from now on) and open the two
    /// descriptors; `None` if the system refuses either (the caller then polls on a timer).
    pub fn new() -> Option<Wakeup> {
        let sigchld = block_child_exits()?;
        let child_exited =
            SignalFd::with_flags(&sigchld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).ok()?;
        let asked =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .ok()?;
        Some(Wakeup {
            child_exited,
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
        // An error (EINTR from another signal) ends the sleep early, which costs one poll.
        let _ = ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None);
        // Consume what ended it, so the next sleep waits for what comes next. SIGCHLD is not
        // queued: one pending signal stands for any number of exits, and the caller looks at
        // every job anyway.
        while let Ok(Some(_)) = self.child_exited.read_signal() {}
        let _ = self.asked.read();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_sigchld_or_a_wake_up_ends_the_sleep_and_a_timeout_ends_it_otherwise() {
        // In a thread of its own: the SIGCHLD block stays with that thread.
        std::thread::spawn(|| {
            let wakeup = Wakeup::new().expect("signalfd and eventfd");
            let long = Duration::from_secs(60);

            // Sent to this thread (`raise`): a child's exit is sent to the process, and in this
            // test process other threads (which do not block it) may take it.
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

            // Both were consumed: now only the timeout ends it.
            let started = Instant::now();
            wakeup.sleep(Duration::from_millis(50));
            assert!(started.elapsed() >= Duration::from_millis(50));

            // A job's shell starts with nothing blocked.
            let out = std::process::Command::new("sh")
                .args(["-c", "sed -n 's/^SigBlk:[[:space:]]*//p' /proc/$$/status"])
                .output()
                .expect("sh");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "0000000000000000"
            );
        })
        .join()
        .expect("the test thread");
    }
}
