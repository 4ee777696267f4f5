//! Helpers for the `sdt trace` tests: the C fixtures of
//! `tests/fixtures/trace`, built once per test binary.

#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};

use sdt_testing::fixture::C;
use sdt_testing::{have, require};

pub struct Fixtures {
    pub argforms: PathBuf,
    pub badsites: PathBuf,
    pub threads: PathBuf,
    pub libsema: PathBuf,
    pub semaprog: PathBuf,
}

/// The C fixtures of `tests/fixtures/trace`, built once per test binary.
pub fn fixtures() -> Option<Fixtures> {
    if !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-fixtures");
    let cc = |source: &str| {
        C::new(format!("tests/fixtures/trace/{source}"))
            .flags(&["-O2", "-g"])
            .dir(&dir)
    };
    let libsema = cc("libsema.c")
        .flags(&["-fPIC", "-shared"])
        .output("libsema.so")
        .build();
    Some(Fixtures {
        argforms: cc("argforms.c").build(),
        badsites: cc("badsites.c").build(),
        threads: cc("threads.c").flags(&["-pthread"]).build(),
        semaprog: cc("semaprog.c").link(&libsema).build(),
        libsema,
    })
}

pub fn setup() -> Option<Fixtures> {
    if !sdt_testing::require_root() {
        return None;
    }
    fixtures()
}
