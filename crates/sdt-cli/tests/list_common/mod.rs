//! Helpers for the `sdt` binary's tests: running it, building the C
//! fixtures of `sdt list`, and comparing its view of the notes with
//! readelf's (from `sdt-testing`, which also decides what a missing tool
//! means: a failure in CI, a loud SKIP elsewhere).

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sdt_testing::fixture::C;
pub use sdt_testing::{have, readelf_notes, readelf_sections, require, Note, Section};
use serde_json::Value;

/// The `sdt` binary under test.
pub fn sdt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sdt"))
}

/// `provider:name` of each listed probe.
pub fn probe_names<'a>(probes: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    probes
        .into_iter()
        .map(|p| {
            format!(
                "{}:{}",
                p["provider"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Runs `sdt` with `args`, returning its output.
pub fn run<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    sdt().args(args).output().expect("run sdt")
}

/// Runs `sdt list --json ARGS...`, asserting success, and returns the probes.
pub fn list_json<I, S>(args: I) -> Vec<Value>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = sdt();
    cmd.args(["list", "--json"]).args(args);
    let out = cmd.output().expect("run sdt");
    assert_success(&out, &format!("{cmd:?}"));
    serde_json::from_slice::<Value>(&out.stdout)
        .expect("sdt list --json prints JSON")
        .as_array()
        .expect("a JSON array")
        .clone()
}

pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_panic(out);
}

pub fn assert_no_panic(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "sdt panicked: {stderr}");
}

/// The C fixtures of `tests/fixtures/list`, compiled for this test binary.
pub struct Fixtures {
    pub dir: PathBuf,
    /// `probes.c` as a PIE, linked against `libsem.so`.
    pub pie: PathBuf,
    /// `probes.c` linked with `-no-pie`.
    pub nopie: PathBuf,
    /// `libsem.c` as a shared library with semaphores.
    pub lib: PathBuf,
}

/// The fixtures, compiled once per test binary into `name`'s own
/// directory, or `None` (after a SKIP notice) where no compiler or
/// `<sys/sdt.h>` is installed.
pub fn fixtures(name: &str) -> Option<Fixtures> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("list-fixtures-{name}"));
    if !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    let cc = |source: &str| {
        C::new(format!("tests/fixtures/list/{source}"))
            .flags(&["-O2"])
            .dir(&dir)
    };
    let lib = cc("libsem.c")
        .flags(&["-fPIC", "-shared"])
        .output("libsem.so")
        .try_build();
    if let Err(why) = &lib {
        eprintln!("{why}");
    }
    let Ok(lib) = lib else {
        require(false, "<sys/sdt.h> (Debian: systemtap-sdt-dev)");
        return None;
    };
    let program =
        |flags: &[&str], out: &str| cc("probes.c").flags(flags).link(&lib).output(out).build();
    Some(Fixtures {
        pie: program(&["-fPIE", "-pie"], "probes-pie"),
        nopie: program(&["-no-pie"], "probes-nopie"),
        dir,
        lib,
    })
}

/// The notes in `sdt list --json` output, one per site.
pub fn sdt_notes(probes: &[Value]) -> Vec<Note> {
    let mut notes = Vec::new();
    for probe in probes {
        for site in probe["sites"].as_array().unwrap() {
            let args: Vec<&str> = site["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["spec"].as_str().unwrap())
                .collect();
            notes.push(Note {
                provider: probe["provider"].as_str().unwrap().to_owned(),
                name: probe["name"].as_str().unwrap().to_owned(),
                pc: site["note"]["pc"].as_u64().unwrap(),
                base: site["note"]["base"].as_u64().unwrap(),
                semaphore: site["note"]["semaphore"].as_u64().unwrap(),
                args: args.join(" "),
            });
        }
    }
    notes
}

/// The file offset of an address according to the section headers: an
/// independent check of `sdt`'s segment-based translation.
pub fn offset_by_sections(sections: &[Section], addr: u64) -> Option<u64> {
    sections
        .iter()
        .find(|s| s.kind != "NOBITS" && s.addr != 0 && addr >= s.addr && addr < s.addr + s.size)
        .map(|s| s.offset + (addr - s.addr))
}

/// Checks everything `sdt list --json` says about `path` against readelf
/// and the file's bytes: the same notes (provider, name, pc, base,
/// semaphore, argument specs), site offsets that hold a no-op, and
/// semaphore offsets that match the section headers.
pub fn cross_check(path: &Path) -> Vec<Value> {
    let probes = list_json([path]);
    let mut ours = sdt_notes(&probes);
    let mut theirs = readelf_notes(path);
    assert!(
        !theirs.is_empty(),
        "{path:?} has no probes according to readelf"
    );
    ours.sort();
    theirs.sort();
    assert_eq!(ours.len(), theirs.len(), "{path:?}: number of notes");
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a, b, "{path:?}");
    }

    let bytes = std::fs::read(path).unwrap();
    let sections = readelf_sections(path);
    let mut per_probe: BTreeMap<String, usize> = BTreeMap::new();
    for probe in &probes {
        let key = format!(
            "{}:{}",
            probe["provider"].as_str().unwrap(),
            probe["name"].as_str().unwrap()
        );
        *per_probe.entry(key.clone()).or_default() += 1;
        assert_eq!(probe["path"].as_str().unwrap(), path.to_str().unwrap());
        assert_eq!(probe["arch"], "x86-64");
        for site in probe["sites"].as_array().unwrap() {
            // Not prelinked: the corrected address is the note's.
            assert_eq!(site["address"], site["note"]["pc"], "{key}");
            let offset = site["file_offset"]
                .as_u64()
                .unwrap_or_else(|| panic!("{key}: no file offset"));
            let code = &bytes[offset as usize..];
            assert!(
                matches!(
                    sdt_elf::classify(sdt_elf::Arch::X86_64, code),
                    sdt_elf::SiteInstruction::Nop { .. }
                ),
                "{path:?} {key}: no nop at file offset {offset:#x}: {:02x?}",
                &code[..8]
            );
            let address = site["address"].as_u64().unwrap();
            assert_eq!(
                Some(offset),
                offset_by_sections(&sections, address),
                "{key}"
            );
            match site["semaphore_address"].as_u64() {
                Some(sem) => {
                    let sem_offset = site["semaphore_offset"].as_u64().unwrap();
                    assert_eq!(
                        Some(sem_offset),
                        offset_by_sections(&sections, sem),
                        "{key}"
                    );
                    assert_eq!(
                        sem_offset % 2,
                        0,
                        "{key}: the kernel needs 2-byte alignment"
                    );
                }
                None => {
                    assert_eq!(site["note"]["semaphore"], 0);
                    assert!(site["semaphore_offset"].is_null());
                }
            }
            for arg in site["args"].as_array().unwrap() {
                check_arg(&key, arg);
            }
        }
    }
    // Grouping: each provider:name appears once.
    assert!(
        per_probe.values().all(|&n| n == 1),
        "{path:?}: duplicate probes"
    );
    probes
}

/// Every argument of a real x86-64 file is either decoded or refused for a
/// reason that names a known limitation, never as garbage.
fn check_arg(key: &str, arg: &Value) {
    let spec = arg["spec"].as_str().unwrap();
    let location = &arg["location"];
    assert!(
        matches!(arg["size"].as_u64(), Some(1 | 2 | 4 | 8)),
        "{key}: {spec}"
    );
    match location["kind"].as_str().unwrap() {
        "register" | "memory" | "constant" => {}
        "symbol" => {
            let symbol = location["symbol"].as_str().unwrap();
            assert!(
                !symbol.is_empty() && spec.contains(symbol),
                "{key}: `{spec}` decoded as symbol `{symbol}`"
            );
        }
        "unsupported" => {
            let reason = location["reason"].as_str().unwrap();
            assert!(
                [
                    "vector register",
                    "instruction pointer",
                    "high-byte",
                    "symbol",
                    "segment",
                    "global offset table",
                    "thread-local"
                ]
                .iter()
                .any(|known| reason.contains(known)),
                "{key}: `{spec}` refused for an unexpected reason: {reason}"
            );
        }
        other => panic!("{key}: `{spec}` has location kind {other}"),
    }
}
