//! The holder: the `-c` command's process before it becomes the command.
//!
//! sdt starts itself again as `sdt __hold FD PROGRAM ARGS...` (see
//! [`crate::HeldChild`]). The holder waits for one byte on descriptor FD,
//! which sdt writes once the probes are attached, then closes FD, undoes
//! the one thing Rust's runtime changed in it (SIGPIPE ignored), and
//! `exec`s the command, looked up in `PATH` as a shell does. Everything
//! else (signal mask, ignored signals, environment, other descriptors,
//! working directory) is as sdt's `posix_spawn` set it up, and `exec`
//! keeps it.

use std::ffi::{CString, OsString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;

/// The first argument that makes sdt the holder.
pub const HOLD_ARG: &str = "__hold";

/// The byte that lets the command run.
pub(crate) const GO: u8 = b'g';

/// Exit status when the command cannot be run, as a shell's.
const NOT_FOUND: i32 = 127;
const NOT_EXECUTABLE: i32 = 126;

/// Runs the holder with `args`, the words after [`HOLD_ARG`]; never
/// returns. The caller must not have created threads or opened
/// descriptors that are not close-on-exec.
pub fn main(args: Vec<OsString>) -> ! {
    let mut args = args.into_iter();
    let fd = args
        .next()
        .and_then(|fd| fd.into_string().ok()?.parse::<i32>().ok())
        .filter(|&fd| fd > 2);
    let argv: Vec<CString> = args
        .map(|a| CString::new(a.into_vec()).unwrap_or_default())
        .collect();
    let (Some(fd), Some(program)) = (fd, argv.first()) else {
        eprintln!("sdt: {HOLD_ARG} is sdt's own: it takes a descriptor and a command");
        std::process::exit(2);
    };
    // SAFETY: sdt passed this descriptor, the read end of a pipe, for the
    // holder alone; nothing else in this process owns it.
    #[allow(unsafe_code)]
    let gate = unsafe { OwnedFd::from_raw_fd(fd) };
    let released = wait_for_go(&gate);
    drop(gate);
    if !released {
        // sdt ended before the probes were attached: run nothing.
        std::process::exit(NOT_FOUND);
    }
    crate::inherit::restore_sigpipe();
    let err = nix::unistd::execvp(program, &argv).unwrap_err();
    eprintln!("sdt: cannot run `{}`: {err}", program.to_string_lossy());
    std::process::exit(match err {
        nix::errno::Errno::ENOENT => NOT_FOUND,
        _ => NOT_EXECUTABLE,
    });
}

/// Whether sdt wrote [`GO`] before closing its end.
fn wait_for_go(gate: &OwnedFd) -> bool {
    let mut byte = [0u8];
    loop {
        match rustix::io::read(gate, &mut byte) {
            Ok(1) => return byte[0] == GO,
            Err(rustix::io::Errno::INTR) => continue,
            _ => return false,
        }
    }
}
