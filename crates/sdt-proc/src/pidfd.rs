//! Pidfds: handles on processes that cannot be confused with a later
//! process that reuses the PID.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use crate::Error;

/// A process, held by a pidfd: readable once the process has ended.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    pid: i32,
}

impl Pidfd {
    /// Opens process `pid`.
    pub fn open(pid: i32) -> Result<Pidfd, Error> {
        let raw = Pid::from_raw(pid).ok_or(Error::NoSuchProcess(pid))?;
        let fd = pidfd_open(raw, PidfdFlags::empty()).map_err(|_| Error::NoSuchProcess(pid))?;
        Ok(Pidfd { fd, pid })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to the process, never to a later one with its PID.
    pub fn kill(&self, signal: rustix::process::Signal) {
        let _ = rustix::process::pidfd_send_signal(&self.fd, signal);
    }

    /// Whether the process has ended (it may not have been reaped yet).
    pub fn ended(&self) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        poll(&mut fds, Some(&Timespec::default())).is_ok_and(|ready| ready > 0)
    }
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_a_process_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.1")
            .spawn()
            .unwrap();
        let pidfd = Pidfd::open(child.id() as i32).unwrap();
        assert!(!pidfd.ended());
        child.wait().unwrap();
        assert!(pidfd.ended());
        assert!(matches!(
            Pidfd::open(i32::MAX),
            Err(Error::NoSuchProcess(_))
        ));
    }
}
