//! Starting the `-c` command so that tracing is live before its first
//! instruction, and so that it starts exactly as a shell would start it.
//!
//! The command is started in two steps. sdt spawns a copy of itself as
//! `sdt __hold FD PROGRAM ARGS...` (see [`crate::hold`]), which waits on a
//! pipe; the process keeps its PID across `exec`, so the tracer attaches
//! with that PID while it waits, then writes one byte to let it `exec` the
//! command. If sdt ends without releasing it, the pipe closes and the
//! holder exits without running the command, as bpftrace's child does.
//!
//! What the command inherits is what sdt's parent gave sdt, not what sdt
//! has made of it:
//!
//! * the signal mask and the ignored signals of sdt's start
//!   ([`Inherited`]), through `posix_spawn`'s attributes, so that a server
//!   that shuts down on SIGTERM still does (sdt blocks SIGTERM for its own
//!   signalfd, and a plain spawn would pass that on);
//! * sdt's environment, untouched: no shell sits in between (dash would
//!   add `PWD`), and the holder changes nothing;
//! * sdt's descriptors: everything sdt opens is close-on-exec, and the
//!   pipe's end the holder reads is a descriptor number that was free in
//!   sdt, so it shadows nothing the command should inherit; the holder
//!   closes it before `exec`.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use nix::spawn::{posix_spawn, PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags};
use rustix::io::{fcntl_setfd, Errno, FdFlags};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{waitpid, Pid, WaitOptions, WaitStatus};

use crate::hold::{GO, HOLD_ARG};
use crate::inherit::Inherited;
use crate::Error;

/// A command that has started but not yet run its program.
///
/// The running program must hand `sdt __hold ...` to [`crate::hold::main`]
/// (sdt's `main` does it first thing), because the holder is this same
/// program, started again through `/proc/self/exe`.
pub struct HeldChild {
    pid: Pid,
    /// sdt's end of the pipe; one byte on it releases the command.
    gate: OwnedFd,
}

impl HeldChild {
    /// Splits `command` like a shell would, and starts it held.
    pub fn spawn_command(command: &str) -> Result<HeldChild, Error> {
        let argv = shlex::split(command)
            .filter(|argv| !argv.is_empty())
            .ok_or_else(|| Error::BadCommand(command.to_string()))?;
        HeldChild::spawn(&argv)
    }

    /// Starts `argv` held before its program runs.
    pub fn spawn(argv: &[String]) -> Result<HeldChild, Error> {
        let Some(program) = argv.first() else {
            return Err(Error::BadCommand(String::new()));
        };
        resolve(program)?;
        let io = |what| {
            move |e: rustix::io::Errno| Error::Io {
                what,
                source: e.into(),
            }
        };
        let (wait_end, gate) = pipe_with(PipeFlags::CLOEXEC)
            .map_err(io("creating the pipe that holds the command"))?;
        // Only the holder may keep its end across `posix_spawn`.
        fcntl_setfd(&wait_end, FdFlags::empty())
            .map_err(io("creating the pipe that holds the command"))?;
        let mut args = vec![
            c_string("sdt".into()),
            c_string(HOLD_ARG.into()),
            c_string(wait_end.as_raw_fd().to_string().into()),
        ];
        args.extend(argv.iter().map(|a| c_string(a.into())));
        let env: Vec<CString> = std::env::vars_os()
            .map(|(name, value)| {
                let mut pair = name;
                pair.push("=");
                pair.push(value);
                c_string(pair)
            })
            .collect();
        let inherited = Inherited::at_start();
        let not_runnable = |why: String| Error::NotRunnable {
            program: program.clone(),
            why,
        };
        let spawned = (|| {
            let mut attr = PosixSpawnAttr::init()?;
            attr.set_sigmask(&inherited.mask())?;
            attr.set_sigdefault(&inherited.defaults())?;
            attr.set_flags(
                PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
            )?;
            let actions = PosixSpawnFileActions::init()?;
            posix_spawn(Path::new("/proc/self/exe"), &actions, &attr, &args, &env)
        })();
        drop(wait_end);
        let cannot_start =
            |why: &dyn std::fmt::Display| not_runnable(format!("cannot start sdt's holder: {why}"));
        let pid = spawned.map_err(|e| cannot_start(&e))?;
        // nix's PID, as rustix's for waiting; posix_spawn's is positive.
        let pid = Pid::from_raw(pid.as_raw()).ok_or_else(|| cannot_start(&"no PID"))?;
        Ok(HeldChild { pid, gate })
    }

    /// The PID, which the command keeps.
    pub fn pid(&self) -> i32 {
        self.pid.as_raw_pid()
    }

    /// Lets the command run.
    pub fn release(self) -> RunningChild {
        // A holder that has died already (killed) gets EPIPE, which is
        // harmless: its status tells the rest.
        let _ = rustix::io::write(&self.gate, &[GO]);
        RunningChild {
            pid: self.pid,
            status: None,
        }
    }

    /// Ends the held command before it runs anything, for when tracing
    /// cannot start: the holder sees the pipe close and exits.
    pub fn abandon(self) {
        let HeldChild { pid, gate } = self;
        drop(gate);
        let _ = waitpid(Some(pid), WaitOptions::empty());
    }
}

/// A command that runs: sdt's child, reaped by [`RunningChild::wait`].
pub struct RunningChild {
    pid: Pid,
    /// The exit status, as a shell reports it, once reaped.
    status: Option<u8>,
}

impl RunningChild {
    pub fn pid(&self) -> i32 {
        self.pid.as_raw_pid()
    }

    /// Sends `signal`; a command that has ended is not signalled (its PID
    /// stays its own until it is reaped, so this never hits another).
    pub fn signal(&mut self, signal: rustix::process::Signal) {
        if self.try_wait().is_none() {
            let _ = rustix::process::kill_process(self.pid, signal);
        }
    }

    /// The exit status if the command has ended, without waiting.
    pub fn try_wait(&mut self) -> Option<u8> {
        if self.status.is_none() {
            self.status = reaped(waitpid(Some(self.pid), WaitOptions::NOHANG));
        }
        self.status
    }

    /// Waits for the command to end; returns its exit status.
    pub fn wait(&mut self) -> Result<u8, Error> {
        while self.status.is_none() {
            let waited = waitpid(Some(self.pid), WaitOptions::empty());
            if let Err(e) = waited {
                if e == Errno::INTR {
                    continue;
                }
                return Err(Error::Io {
                    what: "waiting for the -c command",
                    source: e.into(),
                });
            }
            self.status = reaped(waited);
        }
        Ok(self.status.unwrap_or(1))
    }
}

/// The exit status in `waited`, if the process has ended: its exit code,
/// or 128 plus the signal that ended it.
fn reaped(waited: rustix::io::Result<Option<(Pid, WaitStatus)>>) -> Option<u8> {
    let (_, status) = waited.ok()??;
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => Some(code as u8),
        (None, Some(signal)) => Some(128u8.wrapping_add(signal as u8)),
        (None, None) => None,
    }
}

/// A C string of `text`, which cannot hold a NUL: the words of a command
/// come from `shlex` and the environment from the kernel, neither of which
/// has one, but a NUL is dropped rather than trusted.
fn c_string(text: OsString) -> CString {
    let mut bytes = text.into_vec();
    bytes.retain(|&b| b != 0);
    CString::new(bytes).unwrap_or_default()
}

/// Checks that `program` can be run, the way `exec` would look it up, so
/// that a typo is a clear error instead of the holder's complaint.
fn resolve(program: &str) -> Result<(), Error> {
    let runnable = |path: &Path| {
        rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok() && path.is_file()
    };
    let not_runnable = |why: &str| Error::NotRunnable {
        program: program.to_string(),
        why: why.to_string(),
    };
    if program.contains('/') {
        return if runnable(Path::new(program)) {
            Ok(())
        } else if Path::new(program).exists() {
            Err(not_runnable("it is not an executable file"))
        } else {
            Err(not_runnable("no such file"))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    if std::env::split_paths(&path).any(|dir| runnable(&dir.join(program))) {
        Ok(())
    } else {
        Err(not_runnable("not found in PATH"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_programs_are_clear_errors() {
        let err = HeldChild::spawn_command("no-such-program-sdt --x")
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "cannot run `no-such-program-sdt`: not found in PATH"
        );
        let err = HeldChild::spawn_command("/etc/passwd").err().unwrap();
        assert!(err.to_string().contains("not an executable file"), "{err}");
        assert!(HeldChild::spawn_command("'unclosed").is_err());
    }

    #[test]
    fn statuses_read_as_a_shell_reports_them() {
        let start = |script: &str| {
            let child = std::process::Command::new("sh")
                .args(["-c", script])
                .spawn()
                .unwrap();
            (Pid::from_child(&child), child)
        };
        let waited = |pid, options| reaped(waitpid(Some(pid), options));
        let (exits, _child) = start("exit 7");
        assert_eq!(waited(exits, WaitOptions::empty()), Some(7));
        let (killed, _child) = start("kill -TERM $$");
        assert_eq!(waited(killed, WaitOptions::empty()), Some(128 + 15));
        let (runs, mut child) = start("sleep 10");
        assert_eq!(waited(runs, WaitOptions::NOHANG), None, "still running");
        child.kill().unwrap();
        assert_eq!(waited(runs, WaitOptions::empty()), Some(128 + 9));
    }

    #[test]
    fn words_with_a_nul_lose_it() {
        assert_eq!(c_string("a\0b".into()).as_bytes(), b"ab");
    }
}
