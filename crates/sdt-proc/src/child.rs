//! Starting the `-c` command so that tracing is live before its first
//! instruction.
//!
//! The command runs under a tiny shell that first waits, then `exec`s it:
//! `sh -c 'exec 3<FIFO; read -r _ <&3; exec 3<&-; exec "$@"'`. The process keeps its PID
//! across `exec`, so the tracer attaches with that PID while the shell
//! waits, then lets it go. The wait is on a FIFO in a private directory
//! that sdt holds open for reading and writing: the shell's `read` blocks
//! until sdt closes its end, which it does to release the command, or
//! which the kernel does if sdt dies, so the command never hangs.
//!
//! This replaces a `fork` with a hook between `fork` and `exec`, which
//! needs `unsafe` in Rust; the shell costs about a millisecond.
//! `std::process::Command` resets the signal mask in the child, so the
//! signals sdt blocks for its signalfd are not blocked in the command.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use rustix::fs::{Mode, OFlags};

use crate::Error;

/// A command that has started but not yet run its program.
pub struct HeldChild {
    child: Child,
    /// sdt's end of the FIFO; closing it releases the command.
    gate: File,
    dir: PathBuf,
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
        let dir =
            std::env::temp_dir().join(format!("sdt-hold-{}-{}", std::process::id(), unique()));
        rustix::fs::mkdir(&dir, Mode::RWXU).map_err(|e| Error::Io {
            what: "creating a directory to hold the command",
            source: e.into(),
        })?;
        let fifo = dir.join("go");
        let cleanup = |dir: &Path| {
            let _ = std::fs::remove_file(dir.join("go"));
            let _ = std::fs::remove_dir(dir);
        };
        let made = rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        );
        if let Err(e) = made {
            cleanup(&dir);
            return Err(Error::Io {
                what: "creating the FIFO that holds the command",
                source: e.into(),
            });
        }
        // Read-write, so that the shell's open does not block and its read
        // ends when this end closes.
        let gate = match rustix::fs::open(&fifo, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(e) => {
                cleanup(&dir);
                return Err(Error::Io {
                    what: "opening the FIFO that holds the command",
                    source: e.into(),
                });
            }
        };
        let spawned = Command::new("/bin/sh")
            .arg("-c")
            .arg("exec 3<\"$1\"; read -r _ <&3; exec 3<&-; shift; exec \"$@\"")
            .arg("sdt-hold")
            .arg(&fifo)
            .args(argv)
            .spawn();
        match spawned {
            Ok(child) => Ok(HeldChild { child, gate, dir }),
            Err(e) => {
                cleanup(&dir);
                Err(Error::NotRunnable {
                    program: program.clone(),
                    why: format!("cannot start /bin/sh: {e}"),
                })
            }
        }
    }

    /// The PID, which the command keeps.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Lets the command run.
    pub fn release(self) -> Child {
        let HeldChild {
            mut child,
            gate,
            dir,
        } = self;
        // The shell must have opened the FIFO before it goes away, or its
        // open would fail; it does so within a millisecond of starting,
        // unless it was killed (`abandon`), which there is no waiting for.
        let fifo = dir.join("go");
        let opened = PathBuf::from(format!("/proc/{}/fd/3", child.id()));
        for _ in 0..5000 {
            if std::fs::read_link(&opened).is_ok_and(|target| target == fifo)
                || child.try_wait().is_ok_and(|status| status.is_some())
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(gate);
        let _ = std::fs::remove_file(dir.join("go"));
        let _ = std::fs::remove_dir(&dir);
        child
    }

    /// Kills the command before it runs anything, for when tracing cannot
    /// start.
    pub fn abandon(self) {
        let mut child = self.release_without_running();
        let _ = child.kill();
        let _ = child.wait();
    }

    fn release_without_running(self) -> Child {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::KILL,
        );
        self.release()
    }
}

/// Checks that `program` can be run, the way `exec` would look it up, so
/// that a typo is a clear error instead of a shell's complaint.
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

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The exit status as a shell reports it: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_waits_until_released_and_keeps_its_pid() {
        let argv: Vec<String> = ["sh", "-c", "exit 3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let held = HeldChild::spawn(&argv).unwrap();
        let pid = held.pid();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(
            cmdline.contains("sdt-hold"),
            "still the holding shell: {cmdline:?}"
        );
        let mut child = held.release();
        assert_eq!(child.id() as i32, pid);
        assert_eq!(exit_code(child.wait().unwrap()), 3);
    }

    #[test]
    fn abandoning_a_command_at_once_does_not_wait() {
        // Killed before its shell opened the FIFO: nothing to wait for.
        let argv: Vec<String> = ["sh", "-c", "exit 3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let started = std::time::Instant::now();
        HeldChild::spawn(&argv).unwrap().abandon();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "abandon took {:?}",
            started.elapsed()
        );
    }

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
    fn exit_codes_pass_through() {
        let argv: Vec<String> = ["sh", "-c", "exit 7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut child = HeldChild::spawn(&argv).unwrap().release();
        assert_eq!(exit_code(child.wait().unwrap()), 7);
        let argv: Vec<String> = ["sh", "-c", "kill -TERM $$"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut child = HeldChild::spawn(&argv).unwrap().release();
        assert_eq!(exit_code(child.wait().unwrap()), 128 + 15);
    }
}
