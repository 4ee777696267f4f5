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

use rustix::io::Errno;

use crate::builder::CodegenError;
use crate::program::VerifierLog;

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
            | Error::Verifier { error, .. } => error.raw_os_error(),
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
