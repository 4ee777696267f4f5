//! Stopping cleanly on SIGINT, SIGTERM and SIGHUP.
//!
//! The signals are blocked and read from a signalfd that sits in the same
//! epoll set as the ring buffer, so a signal simply ends the wait: no
//! handler runs at an arbitrary point, and the normal shut-down path
//! (detach, drain, report) always runs. SIGKILL cannot be caught, and needs
//! nothing: the kernel closes sdt's descriptors, which detaches every
//! uprobe and lowers every semaphore.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use anyhow::Context;
use sdt_trace::Session;

/// Epoll token of the signalfd.
pub const TOKEN: u64 = 1;

const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

pub struct Signals {
    fd: OwnedFd,
}

impl Signals {
    /// Blocks the stop signals in this thread (and every thread it starts
    /// later) and opens a signalfd for them.
    pub fn block() -> anyhow::Result<Signals> {
        // SAFETY: the sigset is initialised by sigemptyset before use, and
        // the calls only read it.
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in STOP_SIGNALS {
                libc::sigaddset(&mut set, signal);
            }
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error()).context("blocking signals");
            }
            libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error()).context("opening signalfd");
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(Signals {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn watch(&self, session: &mut Session) -> anyhow::Result<()> {
        session.watch(self.fd.as_fd(), TOKEN)?;
        Ok(())
    }

    /// The signal that arrived, if any.
    pub fn take(&self) -> Option<libc::c_int> {
        // SAFETY: signalfd_siginfo is plain data, and read(2) writes at most
        // its size into it.
        unsafe {
            let mut info: libc::signalfd_siginfo = std::mem::zeroed();
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            let n = libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            );
            (n == size as isize).then_some(info.ssi_signo as libc::c_int)
        }
    }
}
