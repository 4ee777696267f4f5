//! `sdt list --json` must agree with `readelf -n` on every note of real,
//! large binaries: CPython, PostgreSQL, every installed JVM, libstdc++ and
//! cargo-nextest (a Rust program with USDT probes). In CI all of them are
//! required; elsewhere a missing one is a loud SKIP.

mod list_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use list_common::*;

fn check(path: &Path, what: &str) {
    if require(path.exists(), what) {
        cross_check(path);
    }
}

fn readelf_ok() -> bool {
    require(have("readelf"), "readelf (binutils)")
}

#[test]
fn python() {
    if readelf_ok() {
        check(
            Path::new("/usr/bin/python3.11"),
            "/usr/bin/python3.11 (python3.11)",
        );
    }
}

#[test]
fn postgres() {
    if readelf_ok() {
        check(
            Path::new("/usr/lib/postgresql/15/bin/postgres"),
            "/usr/lib/postgresql/15/bin/postgres (postgresql-15)",
        );
    }
}

#[test]
fn every_jvm() {
    if !readelf_ok() {
        return;
    }
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/jvm") {
        for entry in entries.flatten() {
            let libjvm = entry.path().join("lib/server/libjvm.so");
            // Debian's java-1.x names are symlinks to the same JDK.
            if libjvm.exists() && !entry.path().is_symlink() {
                found.push(libjvm);
            }
        }
    }
    if require(!found.is_empty(), "a JDK under /usr/lib/jvm (libjvm.so)") {
        for libjvm in found {
            cross_check(&libjvm);
        }
    }
}

#[test]
fn libstdcxx_as_the_loader_finds_it() {
    if !readelf_ok() {
        return;
    }
    // Ask the loader itself, not sdt's own resolver.
    let out = Command::new("ldconfig").arg("-p").output();
    let path = out.ok().and_then(|out| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| {
                let line = line.trim();
                (line.starts_with("libstdc++.so.6 ") && line.contains("x86-64"))
                    .then(|| PathBuf::from(line.rsplit(" => ").next().unwrap()))
            })
    });
    match path {
        Some(path) => check(&path, "libstdc++.so.6"),
        None => {
            require(false, "libstdc++.so.6 in the loader cache");
        }
    }
}

#[test]
fn cargo_nextest() {
    if !readelf_ok() {
        return;
    }
    let which = Command::new("which").arg("cargo-nextest").output();
    let path = which
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| PathBuf::from("/usr/local/bin/cargo-nextest"));
    check(&path, "cargo-nextest");
}
