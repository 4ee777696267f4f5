//! Errors, each phrased to tell the user what went wrong and what to try.
//!
//! Errors that wrap another (an `io::Error`, an [`ElfError`]) expose it as
//! their `source()` and leave it out of their own message, so that a
//! reporter walking the chain (`anyhow`'s `{:#}`) prints each part once.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened or mapped.
    #[error("cannot read {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file is not an ELF file, or its headers are broken.
    #[error("{}", path.display())]
    Elf {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: ElfError,
    },
    /// No process has this PID.
    #[error("no process with PID {pid}")]
    NoSuchProcess {
        /// The PID.
        pid: u32,
    },
    /// A process exists but its mappings cannot be read.
    #[error(
        "cannot read the mappings of process {pid} ({}); it needs root, or ptrace access to that process",
        path.display()
    )]
    Process {
        /// The PID.
        pid: u32,
        /// The file that could not be read.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file that a process maps could not be opened in a way that proves
    /// it is the mapped file; nothing else was read in its place.
    #[error("not reading {} of process {pid}: {reason}", path.display())]
    Unverified {
        /// The process.
        pid: u32,
        /// The file, as the process names it.
        path: PathBuf,
        /// Why, for a human.
        reason: String,
    },
    /// A program or library name matched nothing.
    #[error(
        "no program or library named `{name}` in PATH, the loader cache or the standard \
         library directories; give its path instead"
    )]
    NotFound {
        /// The name as given.
        name: String,
    },
    /// A probe pattern is not a valid glob.
    #[error("invalid probe pattern `{pattern}`")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// Why.
        #[source]
        source: globset::Error,
    },
}

impl Error {
    /// The message and each cause after it, `a: b: c`, on one line (as
    /// `anyhow`'s `{:#}` prints a chain): for a warning about one file
    /// among many, where the error does not end the command.
    pub fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// What is wrong with bytes that should be an ELF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// The bytes do not start with the ELF magic number.
    #[error("not an ELF file")]
    NotElf,
    /// The file is truncated or its headers are inconsistent.
    #[error("corrupt or truncated ELF file: {0}")]
    Corrupt(&'static str),
}

/// Why the memory at a symbol that an argument names
/// ([`crate::SymbolMemory`]) cannot be found in a file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SymbolError {
    /// `.L` names are the assembler's own labels (string constants, jump
    /// targets): they never reach a symbol table.
    #[error("`{0}` is a label local to the assembler, which no symbol table keeps")]
    AssemblerLabel(String),
    /// The file defines no data symbol of that name: it was stripped (a
    /// stripped file keeps only the symbols it exports), or the symbol is
    /// defined elsewhere.
    #[error(
        "`{0}` is not in the file's symbol table (is the file stripped? a stripped file \
         keeps only the symbols it exports)"
    )]
    Missing(String),
    /// Two symbols of that name at different addresses: `static`
    /// variables of one name in different source files.
    #[error(
        "the file has several symbols named `{0}` (statics of one name in different \
         source files), and which one the probe means cannot be told"
    )]
    Ambiguous(String),
    /// The address is in no segment that the file loads, so it would not
    /// be moved with the file: reading it would read something else.
    #[error("`{symbol}` at {address:#x} is outside every segment the file loads")]
    NotLoaded {
        /// The operand's symbol and offset, such as `table+8`.
        symbol: String,
        /// Its link-time address.
        address: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_follow_the_message_once_each() {
        let open = Error::Open {
            path: "/lib/x.so".into(),
            source: io::Error::other("disk on fire"),
        };
        assert_eq!(open.with_causes(), "cannot read /lib/x.so: disk on fire");
        let elf = Error::Elf {
            path: "/lib/x.so".into(),
            source: ElfError::Corrupt("section headers past the end"),
        };
        assert_eq!(
            elf.with_causes(),
            "/lib/x.so: corrupt or truncated ELF file: section headers past the end"
        );
        let alone = Error::NoSuchProcess { pid: 7 };
        assert_eq!(alone.with_causes(), alone.to_string());
    }
}
