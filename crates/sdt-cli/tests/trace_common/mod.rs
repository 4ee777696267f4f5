//! Helpers for the `sdt trace` tests: the C fixtures of
//! `tests/fixtures/trace`, built once per test binary.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sdt_testing::{have, require};

pub struct Fixtures {
    pub argforms: PathBuf,
    pub badsites: PathBuf,
    pub threads: PathBuf,
    pub libsema: PathBuf,
    pub semaprog: PathBuf,
}

/// Builds the C fixtures of `tests/fixtures/trace` once per test binary.
pub fn fixtures() -> Option<&'static Fixtures> {
    static BUILT: OnceLock<Option<Fixtures>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !require(have("cc"), "a C compiler (cc)") {
                return None;
            }
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/trace");
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-fixtures");
            std::fs::create_dir_all(&dir).expect("create fixture dir");
            let cc = |out: &str, args: &[&str]| -> PathBuf {
                let path = dir.join(out);
                let status = Command::new("cc")
                    .current_dir(&src)
                    .args(["-O2", "-g", "-o"])
                    .arg(&path)
                    .args(args)
                    .status()
                    .expect("run cc");
                assert!(
                    status.success(),
                    "cc failed building {out} (is systemtap-sdt-dev installed?)"
                );
                path
            };
            let libsema = cc("libsema.so", &["-fPIC", "-shared", "libsema.c"]);
            let rpath = format!("-Wl,-rpath,{}", dir.display());
            let libdir = format!("-L{}", dir.display());
            Some(Fixtures {
                argforms: cc("argforms", &["argforms.c"]),
                badsites: cc("badsites", &["badsites.c"]),
                threads: cc("threads", &["-pthread", "threads.c"]),
                semaprog: cc("semaprog", &["semaprog.c", &libdir, "-lsema", &rpath]),
                libsema,
            })
        })
        .as_ref()
}

pub fn setup() -> Option<&'static Fixtures> {
    if !sdt_testing::require_root() {
        return None;
    }
    fixtures()
}
