//! Starting the `-c` command so that tracing is live before its first instruction.
//!
//! `std::process::Command::spawn` only returns once the child has called
//! `exec`, which is too late: the command's `main` may already have passed
//! the probes we want. So the child stops between `fork` and `exec`: its
//! `pre_exec` hook reports its PID on one pipe and then blocks reading a
//! second pipe. Meanwhile `spawn` runs on a helper thread. The tracer attaches
//! with the child's PID as filter (the kernel applies the filter to the
//! process, so it holds across `exec`), then releases the child by closing the
//! second pipe, and only then does `spawn` return.
//!
//! The hook also restores the default signal mask, because the tracer blocks
//! SIGINT and SIGTERM for its own signalfd and a blocked mask survives `exec`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::thread::JoinHandle;

use anyhow::{bail, Context};

/// A command that has forked but not yet called `exec`.
pub struct HeldChild {
    pid: i32,
    release: OwnedFd,
    spawner: JoinHandle<io::Result<Child>>,
}

impl HeldChild {
    /// Forks `argv` and holds the child just before `exec`.
    pub fn spawn(argv: &[String]) -> anyhow::Result<Self> {
        let Some((program, args)) = argv.split_first() else {
            bail!("-c needs a command to run");
        };
        let (pid_read, pid_write) = pipe()?;
        let (release_read, release_write) = pipe()?;

        let mut command = Command::new(program);
        command.args(args);
        let pid_write_fd = pid_write.as_raw_fd();
        let release_read_fd = release_read.as_raw_fd();
        let release_write_fd = release_write.as_raw_fd();
        // SAFETY: the hook runs in the forked child and only makes
        // async-signal-safe calls (getpid, write, read, close, sigprocmask).
        unsafe {
            command.pre_exec(move || {
                libc::close(release_write_fd);
                let pid = libc::getpid().to_ne_bytes();
                if libc::write(pid_write_fd, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                    return Err(io::Error::last_os_error());
                }
                libc::close(pid_write_fd);
                // Blocks until the tracer closes its end: EOF means "go".
                let mut byte = 0u8;
                libc::read(release_read_fd, (&mut byte as *mut u8).cast(), 1);
                libc::close(release_read_fd);
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                Ok(())
            });
        }
        // The thread keeps the child's ends of the pipes open until `spawn`
        // returns, so they are still there when it forks; dropping them then
        // turns a failed start into EOF on our end.
        let spawner = std::thread::spawn(move || {
            let result = command.spawn();
            drop((pid_write, release_read));
            result
        });

        let mut pid = [0u8; 4];
        let mut file = std::fs::File::from(pid_read);
        if let Err(err) = io::Read::read_exact(&mut file, &mut pid) {
            drop(release_write);
            return match spawner.join() {
                Ok(Err(spawn_err)) => {
                    Err(spawn_err).with_context(|| format!("cannot run {program}"))
                }
                _ => Err(err).context("the command did not start"),
            };
        }
        Ok(Self {
            pid: i32::from_ne_bytes(pid),
            release: release_write,
            spawner,
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Kills the child before it runs anything, for when tracing cannot start.
    pub fn abandon(self) {
        // SAFETY: kill(2) has no memory-safety preconditions; the PID is our
        // own child, which cannot be reaped (and reused) before `spawn`
        // returns below.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        if let Ok(Ok(mut child)) = self.release_and_join() {
            let _ = child.wait();
        }
    }

    /// Lets the child call `exec` and returns it once it has.
    pub fn release(self) -> anyhow::Result<Child> {
        match self.release_and_join() {
            Ok(result) => result.context("cannot run the -c command"),
            Err(_) => bail!("the thread that starts the -c command panicked"),
        }
    }

    fn release_and_join(self) -> std::thread::Result<io::Result<Child>> {
        drop(self.release);
        self.spawner.join()
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
