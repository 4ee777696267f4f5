//! Running the C preprocessor over a provider file, as `dtrace -C` does.
//!
//! Without it, sdt reads object-like `#define`s itself (what real
//! provider files such as PostgreSQL's use), and refuses anything else
//! that needs the preprocessor with the line and column of the directive.
//! With it, the file goes through `$CPP` (default `cpp`, split at
//! whitespace) with the `-I` and `-D` options given, and the line markers
//! in its output keep errors pointing at the original file and line.

use std::path::Path;
use std::process::Command;

use crate::Error;

/// How to run the preprocessor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preprocessor {
    /// Options passed before the file, such as `-I/usr/include/x` and
    /// `-DNAME=VALUE`.
    pub options: Vec<String>,
}

impl Preprocessor {
    /// The preprocessed text of `path`.
    pub fn run(&self, path: &Path) -> Result<String, Error> {
        let cpp = std::env::var("CPP").ok().filter(|c| !c.trim().is_empty());
        let cpp = cpp.as_deref().unwrap_or("cpp");
        let mut words = cpp.split_whitespace();
        let program = words.next().unwrap_or("cpp");
        let output = Command::new(program)
            .args(words)
            .args(&self.options)
            .arg(path)
            .output()
            .map_err(|e| {
                Error::Preprocessor(format!(
                    "cannot run `{cpp}` (set $CPP to the C preprocessor): {e}"
                ))
            })?;
        if !output.status.success() {
            return Err(Error::Preprocessor(format!(
                "`{cpp}` failed on {} ({}):\n{}",
                path.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            )));
        }
        String::from_utf8(output.stdout)
            .map_err(|_| Error::Preprocessor(format!("`{cpp}` wrote text that is not UTF-8")))
    }
}
