//! Stopping cleanly on SIGINT, SIGTERM and SIGHUP.
//!
//! The signals are blocked and read from a signalfd that the caller puts
//! in the same epoll set as the ring buffer, so a signal simply ends the
//! wait: no handler runs at an arbitrary point, and the normal shut-down
//! path (detach, drain, report) always runs. SIGKILL cannot be caught and
//! needs nothing: the kernel closes sdt's descriptors, which detaches
//! every uprobe and lowers every semaphore.

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::Error;

/// The stop signals, blocked and readable from a descriptor.
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Blocks the stop signals in this thread (and every thread it starts
    /// later; call it before starting any) and opens a signalfd for them.
    pub fn block() -> Result<Signals, Error> {
        let mut set = SigSet::empty();
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            set.add(signal);
        }
        set.thread_block().map_err(|e| Error::Io {
            what: "blocking signals",
            source: e.into(),
        })?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(|e| Error::Io {
                what: "opening a signalfd",
                source: e.into(),
            })?;
        Ok(Signals { fd })
    }

    /// The signal that arrived, if any.
    pub fn take(&self) -> Option<i32> {
        match self.fd.read_signal() {
            Ok(Some(info)) => Some(info.ssi_signo as i32),
            _ => None,
        }
    }

    /// Calls `then` with the next stop signal, from a thread of its own,
    /// so that a second Ctrl-C is seen whatever the caller is busy with
    /// while it shuts down.
    pub fn on_next(self, then: impl FnOnce(i32) + Send + 'static) {
        std::thread::spawn(move || loop {
            let mut fds = [rustix::event::PollFd::new(
                &self.fd,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
            if let Some(signal) = self.take() {
                then(signal);
                return;
            }
        });
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
