//! DTrace provider files (`.d`) for `<sys/sdt.h>` probes: one parser, and
//! what is made from a file.
//!
//! * [`ProviderFile::header`]: the C header of `dtrace -h`, as SystemTap's
//!   `dtrace` writes it (`PROVIDER_NAME(...)`, `PROVIDER_NAME_ENABLED()`).
//! * [`ProviderFile::semaphores_object`]: the object of `dtrace -G`, the
//!   probes' semaphores, written without a C compiler.
//! * [`ProviderFile::rust`]: `sdt::provider!` declarations of the same
//!   probes, which [`Builder`] writes for `sdt::include_provider!`.
//! * [`command`]: SystemTap's `dtrace` command line, which `sdt dtrace`
//!   (or sdt installed as `dtrace`) takes.
//!
//! # What a provider file may hold
//!
//! `provider NAME { probe NAME(TYPE, ...); ... };` declarations, with C
//! and C++ comments; `typedef`s (of any C type, structures included);
//! `struct`, `union` and `enum` declarations, `translator` and `inline`
//! definitions (skipped: `<sys/sdt.h>` probes have no translated
//! arguments); `#pragma` lines (ignored); and object-like `#define NAME
//! TEXT` and `#undef`, which apply from there on, as the preprocessor would
//! apply them. PostgreSQL's `probes.d` declares its argument types that way
//! (`#define Oid unsigned int`). A probe's translated arguments (`probe
//! p(int a) : (string b)`) are accepted and dropped, and `(void)` declares
//! none, as in C.
//!
//! Other directives (`#include`, `#if`, function-like macros) need the C
//! preprocessor, which runs when asked (`dtrace -C`,
//! [`Builder::preprocess`]); without it they are errors that name their
//! line and column. SystemTap's `dtrace` ignores every `#` line when it
//! is not asked to run the preprocessor, `#define`s included, which is
//! harmless for its header (types only appear in comments there) and
//! would be wrong for Rust, where types matter.
//!
//! Every error names the file, line and column, and shows the line.
//!
//! The parser reads untrusted bytes (`fuzz/fuzz_targets/dtrace.rs`): it
//! never panics, and nests and expands boundedly.

#![forbid(unsafe_code)]

mod build;
pub mod command;
mod cpp;
mod diag;
mod header;
mod lexer;
mod parse;
mod rust;
mod semaphores;
mod types;

use std::path::{Path, PathBuf};

pub use build::Builder;
pub use cpp::Preprocessor;
pub use diag::Diagnostic;
pub use header::{macro_name, semaphore_symbol};
pub use parse::{Param, Probe, Provider, ProviderFile};
pub use types::ArgType;

/// Everything that can go wrong with a provider file.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The file says something wrong, at a line and column.
    Parse(Diagnostic),
    /// A file could not be read or written.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The C preprocessor could not run, or failed.
    Preprocessor(String),
    /// The object could not be written.
    Object(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Parse(d) => write!(f, "{d}"),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Preprocessor(why) => f.write_str(why),
            Error::Object(why) => write!(f, "cannot write the object: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<Diagnostic> for Error {
    fn from(d: Diagnostic) -> Error {
        Error::Parse(d)
    }
}

impl ProviderFile {
    /// Reads and parses the file at `path`.
    pub fn read(path: &Path) -> Result<ProviderFile, Error> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path.display().to_string();
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            diag::Source::new(name.clone(), text)
                .error(at..at + 1, "the file is not UTF-8 text here")
        })?;
        Ok(ProviderFile::parse(&name, text)?)
    }
}
