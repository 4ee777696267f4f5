//! Process control for sdt.
//!
//! * [`HeldChild`]: the `-c` command, started but held before its
//!   program runs, so that probes are attached before its first
//!   instruction, and started with the signal state, environment and
//!   descriptors sdt's parent gave sdt ([`Inherited`], [`hold`]).
//! * [`Signals`]: SIGINT, SIGTERM and SIGHUP read from a signalfd, so
//!   that a stop request ends a wait like any other event.
//! * [`Pidfd`]: a handle on a process that becomes readable when it
//!   ends, and that can never refer to a later process with the same PID.
//! * [`release_elsewhere`]: descriptors whose closing makes the kernel
//!   wait, closed by a short-lived process of sdt's own so that sdt exits
//!   at once.
//! * [`launch`]: what the `-c` command will run, read the way the kernel
//!   and `execvp` would (`env`, `PATH`, `#!` lines), without running it.
//!
//! `unsafe` is denied but in two places, each with its reason: the
//! `inherit` module ([`Inherited`]), which reads and sets signal
//! dispositions and signal sets at a level no safe wrapper reaches, and
//! the holder's adoption of the descriptor sdt passes it ([`hold`]).
//!
//! System calls come from `rustix` (pipes, pidfds, `poll`, `waitpid`,
//! `kill`, sockets). `nix` makes the ones rustix does not offer:
//! `posix_spawn` with its signal attributes, and the signal sets they
//! take; `signalfd` and blocking signals (`pthread_sigmask`); `execvp`,
//! which searches `PATH` as a shell does; and `signal`, which sets SIGPIPE
//! back. `libc` is left for what neither offers: reading a signal's
//! disposition without changing it (`sigaction`), and writing a
//! `sigset_t` word by word (both in `inherit`).

#![deny(unsafe_code)]

mod child;
pub mod hold;
mod inherit;
pub mod launch;
mod pidfd;
mod release;
mod signals;

pub use child::{HeldChild, RunningChild};
pub use inherit::Inherited;
pub use pidfd::Pidfd;
pub use release::{receive, release_elsewhere};
pub use signals::Signals;

/// What can go wrong starting or watching processes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot split the command `{0}` into words (check its quotes)")]
    BadCommand(String),
    #[error("cannot run `{program}`: {why}")]
    NotRunnable { program: String, why: String },
    #[error("no process with PID {0}")]
    NoSuchProcess(i32),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}
