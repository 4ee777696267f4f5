//! A helper for build scripts: a provider file in, `sdt::provider!`
//! declarations out, for `sdt::include_provider!`.
//!
//! ```no_run
//! // build.rs, whose `fn main()` holds this:
//! sdt_dtrace::Builder::new("src/probes.d").generate();
//! ```
//!
//! ```ignore
//! // src/main.rs
//! sdt::include_provider!("probes.d");
//!
//! fn start(xid: u32) {
//!     postgresql::transaction__start!(xid);
//! }
//! ```
//!
//! The declarations go to `$OUT_DIR/sdt-dtrace/FILE.rs`, FILE being the
//! provider file's name, which is what `include_provider!("FILE")`
//! includes; cargo is told to run the script again when the file changes.
//! Why a build script and not a procedural macro: the `sdt` crate stays
//! free of dependencies, and a build script reads files and runs the
//! preprocessor where cargo expects that to happen.

use std::path::{Path, PathBuf};

use crate::{cpp::Preprocessor, Error, ProviderFile};

/// Turns a provider file into Rust declarations, for build scripts.
#[derive(Clone, Debug)]
pub struct Builder {
    path: PathBuf,
    preprocessor: Option<Preprocessor>,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// A builder for the provider file at `path` (relative to the package,
    /// where build scripts run).
    pub fn new(path: impl AsRef<Path>) -> Builder {
        Builder {
            path: path.as_ref().to_path_buf(),
            preprocessor: None,
            out_dir: None,
        }
    }

    /// Runs the C preprocessor (`$CPP`, else `cpp`) over the file first, as
    /// `dtrace -C` does: for files with `#include`, `#if` or function-like
    /// macros.
    pub fn preprocess(mut self) -> Builder {
        self.preprocessor.get_or_insert_with(Preprocessor::default);
        self
    }

    /// Adds `-I DIR` to the preprocessor's options (and turns it on).
    pub fn include(mut self, dir: impl AsRef<Path>) -> Builder {
        let options = &mut self
            .preprocessor
            .get_or_insert_with(Preprocessor::default)
            .options;
        options.push(format!("-I{}", dir.as_ref().display()));
        self
    }

    /// Adds `-D NAME[=VALUE]` to the preprocessor's options (and turns it on).
    pub fn define(mut self, name: &str, value: Option<&str>) -> Builder {
        let options = &mut self
            .preprocessor
            .get_or_insert_with(Preprocessor::default)
            .options;
        options.push(match value {
            Some(value) => format!("-D{name}={value}"),
            None => format!("-D{name}"),
        });
        self
    }

    /// Writes into `dir` instead of `$OUT_DIR`.
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Builder {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Writes the declarations; returns the file written.
    pub fn try_generate(self) -> Result<PathBuf, Error> {
        let file = match &self.preprocessor {
            Some(cpp) => {
                let text = cpp.run(&self.path)?;
                ProviderFile::parse(&self.path.display().to_string(), text)?
            }
            None => ProviderFile::read(&self.path)?,
        };
        let rust = file.rust()?;
        let out_dir = match self.out_dir {
            Some(dir) => dir,
            None => PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| Error::Io {
                path: PathBuf::from("$OUT_DIR"),
                source: std::io::Error::other(
                    "not set: call this from a build script, or set out_dir()",
                ),
            })?),
        }
        .join("sdt-dtrace");
        let name = self.path.file_name().ok_or_else(|| Error::Io {
            path: self.path.clone(),
            source: std::io::Error::other("not a file name"),
        })?;
        let mut out = out_dir.join(name);
        out.as_mut_os_string().push(".rs");
        std::fs::create_dir_all(&out_dir).map_err(|source| Error::Io {
            path: out_dir.clone(),
            source,
        })?;
        std::fs::write(&out, rust).map_err(|source| Error::Io {
            path: out.clone(),
            source,
        })?;
        Ok(out)
    }

    /// Writes the declarations, for a build script: cargo reruns the script
    /// when the file changes, and an error stops the build with the file,
    /// line and column it is at, and the line underlined.
    pub fn generate(self) {
        println!("cargo::rerun-if-changed={}", self.path.display());
        println!("cargo::rerun-if-env-changed=CPP");
        if let Err(err) = self.try_generate() {
            // Cargo shows the first line on its own; the whole error, the
            // underlined line included, is in the script's output below it.
            let text = err.to_string();
            println!("cargo::error={}", text.lines().next().unwrap_or_default());
            eprintln!("{text}");
            std::process::exit(1);
        }
    }
}
