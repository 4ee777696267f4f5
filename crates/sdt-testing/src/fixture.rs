//! C and C++ fixtures, compiled once per test binary.
//!
//! Integration tests trace small C programs from `tests/fixtures`. Each
//! test binary compiles the ones it needs the first time a test asks, and
//! every later ask gets the same file: the build is cached for the life of
//! the process, keyed by everything that goes into it (compiler, sources,
//! flags, libraries, output name and directory), so two tests that want
//! the same build share it and two that want different flags never
//! overwrite each other's file.
//!
//! ```no_run
//! use sdt_testing::fixture::C;
//! let lib = C::new("tests/fixtures/trace/libsema.c")
//!     .flags(&["-O2", "-g", "-fPIC", "-shared"])
//!     .output("libsema.so")
//!     .build();
//! let program = C::new("tests/fixtures/trace/semaprog.c")
//!     .flags(&["-O2", "-g"])
//!     .link(&lib)
//!     .build();
//! ```
//!
//! Unless the caller names a directory ([`C::dir`]), each build gets a
//! directory of its own under the target directory's `tmp/c-fixtures`,
//! named after its first source and a hash of the build: split-DWARF
//! `.dwo` files, named after the objects, cannot collide there. The
//! compiler runs in that directory, so nothing it writes lands in the
//! source tree.
//!
//! The cache assumes that a source does not change while the tests run,
//! which holds for `tests/fixtures`; a test that writes a source of its
//! own writes the same text each time.

use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// The builds made so far, by command line and directory.
type Builds = HashMap<Vec<OsString>, Result<PathBuf, String>>;

/// A C (or C++) program, shared library or object to build.
#[derive(Clone, Debug)]
pub struct C {
    compiler: &'static str,
    sources: Vec<PathBuf>,
    flags: Vec<String>,
    /// Flags after the sources: `-L`, `-l` and `-rpath`.
    link: Vec<String>,
    output: Option<String>,
    dir: Option<PathBuf>,
}

impl C {
    /// A build of `source` with `cc`. A relative path is taken from the
    /// workspace's root (`tests/fixtures/...`).
    pub fn new(source: impl AsRef<Path>) -> C {
        C {
            compiler: "cc",
            sources: vec![from_root(source.as_ref())],
            flags: Vec::new(),
            link: Vec::new(),
            output: None,
            dir: None,
        }
    }

    /// A build of `source` with `c++`.
    pub fn cxx(source: impl AsRef<Path>) -> C {
        C {
            compiler: "c++",
            ..C::new(source)
        }
    }

    /// One more source (or object) file to compile into the same output.
    pub fn source(mut self, source: impl AsRef<Path>) -> C {
        self.sources.push(from_root(source.as_ref()));
        self
    }

    /// Compiler flags, before the sources.
    pub fn flags(mut self, flags: &[&str]) -> C {
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// Flags after the sources, where the linker wants `-lNAME`.
    pub fn libs(mut self, flags: &[&str]) -> C {
        self.link.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// Links against `library` (a `libNAME.so` this builder made), found
    /// at run time through an rpath to its directory.
    pub fn link(mut self, library: &Path) -> C {
        let dir = library.parent().expect("a library in a directory");
        let name = library
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.strip_prefix("lib"))
            .expect("a library named libNAME.so");
        self.link.extend([
            format!("-L{}", dir.display()),
            format!("-l{name}"),
            format!("-Wl,-rpath,{}", dir.display()),
        ]);
        self
    }

    /// The output's file name; by default the first source's, without its
    /// extension.
    pub fn output(mut self, name: &str) -> C {
        self.output = Some(name.to_string());
        self
    }

    /// The directory to build in, instead of one of the build's own.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> C {
        self.dir = Some(dir.into());
        self
    }

    /// The built file, compiled by the first call with these settings;
    /// panics with the compiler's messages if it fails.
    pub fn build(&self) -> PathBuf {
        self.try_build().unwrap_or_else(|why| panic!("{why}"))
    }

    /// The built file, or the compiler's command and messages if it
    /// failed (for a test that turns a missing header into a SKIP).
    pub fn try_build(&self) -> Result<PathBuf, String> {
        static BUILT: Mutex<Option<Builds>> = Mutex::new(None);
        let (dir, output) = self.place();
        let command = self.command(&output);
        let mut key = command.clone();
        key.push(dir.clone().into_os_string());
        // Held while compiling: two tests asking at once build once.
        let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
        built
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert_with(|| compile(&dir, &command).map(|()| dir.join(output)))
            .clone()
    }

    /// The directory and file name of the output.
    fn place(&self) -> (PathBuf, String) {
        let stem = self.sources[0]
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let output = self.output.clone().unwrap_or_else(|| stem.clone());
        let dir = self.dir.clone().unwrap_or_else(|| {
            let mut hash = DefaultHasher::new();
            (
                self.compiler,
                &self.sources,
                &self.flags,
                &self.link,
                &output,
            )
                .hash(&mut hash);
            target_tmpdir()
                .join("c-fixtures")
                .join(format!("{stem}-{:016x}", hash.finish()))
        });
        (dir, output)
    }

    /// `COMPILER FLAGS SOURCES -o OUTPUT LINK`.
    fn command(&self, output: &str) -> Vec<OsString> {
        let mut command = vec![OsString::from(self.compiler)];
        command.extend(self.flags.iter().map(OsString::from));
        command.extend(self.sources.iter().map(|s| s.clone().into_os_string()));
        command.extend(["-o".into(), output.into()]);
        command.extend(self.link.iter().map(OsString::from));
        command
    }
}

/// Runs `command` in `dir`, which it creates.
fn compile(dir: &Path, command: &[OsString]) -> Result<(), String> {
    let shown = || {
        let words: Vec<_> = command.iter().map(|w| w.to_string_lossy()).collect();
        words.join(" ")
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let output = Command::new(&command[0])
        .args(&command[1..])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("running `{}`: {e}", shown()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "`{}` failed (is systemtap-sdt-dev installed?):\n{}",
        shown(),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// `path`, taken from the workspace's root if relative.
pub(crate) fn from_root(path: &Path) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The target directory's `tmp`, where Cargo points integration tests'
/// `CARGO_TARGET_TMPDIR`: the running test is `TARGET/PROFILE/deps/TEST`.
pub fn target_tmpdir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .expect("test executable inside a target directory")
        .join("tmp")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_source(name: &str, text: &str) -> PathBuf {
        let dir = target_tmpdir().join("c-fixture-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_build_is_made_once_and_flags_make_another() {
        if !crate::require(crate::have("cc"), "a C compiler (cc)") {
            return;
        }
        let source = fixture_source("exit.c", "int main(void) { return EXIT; }\n");
        let three = C::new(&source).flags(&["-DEXIT=3"]);
        let first = three.build();
        let modified = std::fs::metadata(&first).unwrap().modified().unwrap();
        assert_eq!(three.clone().build(), first, "the same build, cached");
        assert_eq!(
            std::fs::metadata(&first).unwrap().modified().unwrap(),
            modified,
            "not compiled again"
        );
        let four = C::new(&source).flags(&["-DEXIT=4"]).build();
        assert_ne!(four, first);
        for (program, code) in [(&first, 3), (&four, 4)] {
            let status = Command::new(program).status().unwrap();
            assert_eq!(status.code(), Some(code), "{program:?}");
        }
    }

    #[test]
    fn a_program_links_a_library_built_here() {
        if !crate::require(crate::have("cc"), "a C compiler (cc)") {
            return;
        }
        let lib = C::new(fixture_source("seven.c", "int seven(void) { return 7; }\n"))
            .flags(&["-fPIC", "-shared"])
            .output("libseven.so")
            .build();
        assert_eq!(lib.file_name().unwrap(), "libseven.so");
        let program = C::new(fixture_source(
            "calls.c",
            "int seven(void);\nint main(void) { return seven(); }\n",
        ))
        .link(&lib)
        .build();
        assert_eq!(Command::new(program).status().unwrap().code(), Some(7));
    }

    #[test]
    fn a_failed_build_says_what_the_compiler_said() {
        if !crate::require(crate::have("cc"), "a C compiler (cc)") {
            return;
        }
        let source = fixture_source("broken.c", "int main(void) { return }\n");
        let why = C::new(&source).try_build().unwrap_err();
        assert!(why.contains("broken.c") && why.contains("error"), "{why}");
    }
}
