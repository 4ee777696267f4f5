//! The crate's error type.
//!
//! Errors name the operation that failed and, where the cause is common
//! and fixable, say what to do: missing privileges, a missing file, a
//! semaphore conflict with another tracer, a verifier rejection (with the
//! verifier's own words).
//!
//! Each message is whole: it includes the OS error it comes from, which is
//! therefore not also exposed as `source()` (a reporter that prints the
//! chain would print it twice).

use std::io;
use std::path::PathBuf;

use std::fmt;

use rustix::io::Errno;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong talking to the kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel refused for lack of privilege.
    #[error(
        "{op}: permission denied ({error}); tracing needs root, or the \
         capabilities CAP_BPF and CAP_PERFMON"
    )]
    PermissionDenied { op: &'static str, error: io::Error },

    /// A system call failed for another reason.
    #[error("{op}: {error}")]
    Syscall { op: &'static str, error: io::Error },

    /// The verifier rejected a program; the log says why.
    #[error("the BPF verifier rejected program `{name}` ({error}):\n{}", log.summary())]
    Verifier {
        name: String,
        error: io::Error,
        log: VerifierLog,
    },

    /// The file to probe does not exist.
    #[error("cannot attach uprobe: {} does not exist", path.display())]
    FileNotFound { path: PathBuf },

    /// The kernel refused a semaphore (`ref_ctr_offset`) registration.
    #[error(
        "cannot attach uprobe to {}: the kernel refused semaphore offset {ref_ctr_offset:#x} \
         for probe offset {offset:#x} (EINVAL); the site is probably already traced \
         with a different semaphore offset (by another tracer, or an earlier attach \
         of this one), or the semaphore offset is not in a writable mapping of the file",
        path.display()
    )]
    RefCtrConflict {
        path: PathBuf,
        offset: u64,
        ref_ctr_offset: u64,
    },

    /// The kernel lacks a feature that the request needs.
    #[error("not supported by this kernel: {0}")]
    Unsupported(String),

    /// A hardware perf event on a machine without the CPU's counters.
    #[error("this machine has no hardware performance counters (perf_event_open: {error}); virtual machines often have none, and profile:hz:N and software:cpu-clock sample the CPU without them")]
    NoHardwareCounters { error: io::Error },

    /// The request itself is malformed.
    #[error("invalid request: {0}")]
    Invalid(String),

    /// Generated code could not be assembled.
    #[error("code generation: {0}")]
    Codegen(#[from] CodegenError),
}

impl Error {
    /// Wraps a failed system call, singling out privilege errors.
    pub(crate) fn sys(op: &'static str, error: io::Error) -> Error {
        match Errno::from_io_error(&error) {
            Some(Errno::PERM | Errno::ACCESS) => Error::PermissionDenied { op, error },
            _ => Error::Syscall { op, error },
        }
    }

    /// The OS error number behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::PermissionDenied { error, .. }
            | Error::Syscall { error, .. }
            | Error::Verifier { error, .. }
            | Error::NoHardwareCounters { error } => error.raw_os_error(),
            Error::FileNotFound { .. } => Some(Errno::NOENT.raw_os_error()),
            Error::RefCtrConflict { .. } => Some(Errno::INVAL.raw_os_error()),
            _ => None,
        }
    }

    /// Whether the error is a lack of privilege.
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Error::PermissionDenied { .. })
    }
}

/// A mistake in generated code, found while assembling it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// A jump names a label that was never bound.
    #[error("jump at slot {slot} targets a label that was never bound")]
    UnboundLabel { slot: usize },
    /// A label was bound twice.
    #[error("label bound twice (at slot {first} and slot {second})")]
    LabelBoundTwice { first: usize, second: usize },
    /// A jump distance does not fit the 16-bit offset field.
    #[error("jump at slot {slot} is {distance} slots long, more than a 16-bit offset holds")]
    JumpTooFar { slot: usize, distance: i64 },
    /// An argument-codegen request that cannot be compiled (see [`crate::arg`]).
    #[error("{0}")]
    InvalidArg(String),
}

/// The verifier's log of a rejected program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifierLog(pub(crate) String);

impl VerifierLog {
    /// The whole log.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last `n` non-empty lines.
    pub fn last_lines(&self, n: usize) -> Vec<&str> {
        let mut lines: Vec<&str> = self
            .0
            .lines()
            .rev()
            .filter(|l| !l.trim().is_empty())
            .take(n)
            .collect();
        lines.reverse();
        lines
    }

    /// The lines that explain a rejection: the tail of the log, without
    /// the statistics the verifier appends (`processed N insns ...`).
    pub fn summary(&self) -> String {
        const LINES: usize = 12;
        let mut lines: Vec<&str> = self
            .0
            .lines()
            .rev()
            .filter(|l| !l.trim().is_empty())
            .skip_while(|l| is_statistics(l))
            .take(LINES)
            .collect();
        lines.reverse();
        if lines.is_empty() {
            return "(the verifier wrote no log)".to_owned();
        }
        lines.join("\n")
    }
}

fn is_statistics(line: &str) -> bool {
    [
        "processed ",
        "verification time",
        "stack depth",
        "max_states_per_insn",
    ]
    .iter()
    .any(|p| line.starts_with(p))
}

impl fmt::Display for VerifierLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
