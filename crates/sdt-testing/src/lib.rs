//! Test support shared by the workspace's integration tests.
//!
//! * **Gating.** A test that needs a tool, root or BPF must run in CI: with
//!   `CI=true` a missing requirement fails the test. Elsewhere it prints a
//!   loud SKIP line and the test passes, so a laptop without
//!   `systemtap-sdt-dev` can still run the rest.
//! * **readelf.** An independent reader of the same notes and section
//!   headers that `sdt-elf` parses, for cross-checks.
//! * **Cgroups.** [`cgroup::Cgroup`], a cgroup v2 directory of a test's
//!   own, removed when dropped.
//! * **Fixtures.** [`fixture::C`] compiles the C programs the tests trace,
//!   once per test binary.
//!
//! Failures here panic: this crate only ever runs inside tests.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod cgroup;
pub mod fastpath;
pub mod fixture;

/// Whether the tests run in CI (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Returns `available`; if it is false, fails the test in CI and prints a
/// SKIP line elsewhere. `what` names the missing requirement.
pub fn require(available: bool, what: &str) -> bool {
    if !available {
        assert!(!in_ci(), "required for this test in CI: {what}");
        // Straight to stderr: the test harness hides the `eprintln!` of
        // passing tests, and a skip must be seen.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIP: {what} is missing; this test did not run ***\n"
        );
    }
    available
}

/// Whether `program --version` runs.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this process runs as root; see [`require`].
pub fn require_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    require(root, "root (tracing needs CAP_BPF and CAP_PERFMON)")
}

/// A file that `cargo build --release -p PACKAGE` makes (the `sdt`
/// binary, `libsdt.so`), for tests of other packages: the one that
/// `cargo test --workspace --release` built next to the running test, or
/// else a fresh build in a target directory of its own.
pub fn built_by(package: &str, file: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/release/deps/TEST
    let sibling = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|p| p.join(file));
    if let Some(path) = sibling.filter(|p| p.is_file()) {
        return path;
    }
    let target = exe
        .ancestors()
        .nth(3)
        .expect("test executable inside a target directory")
        .join("sdt-fixtures")
        .join(package);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            package,
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        output.status.success(),
        "building {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    target.join("release").join(file)
}

/// The `sdt` binary; see [`built_by`].
pub fn sdt_binary() -> PathBuf {
    built_by("sdt-cli", "sdt")
}

/// One `.note.stapsdt` note as `readelf -n` prints it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Note {
    pub provider: String,
    pub name: String,
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    /// The argument specs, space-separated; empty when there are none.
    pub args: String,
}

/// A section header as `readelf -S` prints it.
#[derive(Clone, Debug)]
pub struct Section {
    pub name: String,
    /// `PROGBITS`, `NOBITS`, ...
    pub kind: String,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
}

fn readelf(flags: &[&str], path: &Path) -> String {
    let out = Command::new("readelf")
        .args(flags)
        .arg(path)
        .output()
        .expect("run readelf");
    assert!(out.status.success(), "readelf {flags:?} {path:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `stapsdt` notes of a file, from `readelf -n --wide`.
pub fn readelf_notes(path: &Path) -> Vec<Note> {
    let text = readelf(&["-n", "--wide"], path);
    let mut notes = Vec::new();
    let mut current: Option<Note> = None;
    for line in text.lines() {
        let line = line.trim_start();
        // With --wide, the provider shares the line of the note header.
        if let Some((_, provider)) = line.split_once("Provider: ") {
            notes.extend(current.take());
            current = Some(Note {
                provider: provider.to_owned(),
                name: String::new(),
                pc: 0,
                base: 0,
                semaphore: 0,
                args: String::new(),
            });
        } else if let Some(note) = current.as_mut() {
            if let Some(name) = line.strip_prefix("Name: ") {
                note.name = name.to_owned();
            } else if let Some(location) = line.strip_prefix("Location: ") {
                // "0x…, Base: 0x…, Semaphore: 0x…"
                let fields: Vec<u64> = location
                    .split(", ")
                    .map(|f| {
                        let hex = f.rsplit("0x").next().unwrap_or_default();
                        u64::from_str_radix(hex, 16).expect("hex address")
                    })
                    .collect();
                (note.pc, note.base, note.semaphore) = (fields[0], fields[1], fields[2]);
            } else if let Some(args) = line.strip_prefix("Arguments:") {
                note.args = args.strip_prefix(' ').unwrap_or(args).to_owned();
            }
        }
    }
    notes.extend(current);
    notes
}

/// The section headers of a file, from `readelf -S --wide`.
pub fn readelf_sections(path: &Path) -> Vec<Section> {
    readelf(&["-S", "--wide"], path)
        .lines()
        .filter_map(|line| {
            // "  [Nr] Name Type Address Off Size ES Flg Lk Inf Al"
            let rest = line.trim_start().strip_prefix('[')?;
            let (_, rest) = rest.split_once(']')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            Some(Section {
                name: fields.first()?.to_string(),
                kind: fields.get(1)?.to_string(),
                addr: hex(fields.get(2)?)?,
                offset: hex(fields.get(3)?)?,
                size: hex(fields.get(4)?)?,
            })
        })
        .collect()
}
