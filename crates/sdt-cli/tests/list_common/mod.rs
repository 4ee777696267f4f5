//! Helpers for the `sdt list` tests: running the binary, building the C
//! fixtures, reading `readelf`'s view of the same notes.
//!
//! Tools the tests need (a C compiler with `<sys/sdt.h>`, `readelf`) are
//! required in CI (`CI=true`): a missing one fails the test there. Outside
//! CI the test prints a loud SKIP and passes, so a laptop without
//! `systemtap-sdt-dev` can still run the rest.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// The `sdt` binary under test.
pub fn sdt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sdt"))
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Returns whether `what` is available; if not, fails in CI and prints a
/// SKIP line elsewhere.
pub fn require(available: bool, what: &str) -> bool {
    if !available {
        assert!(!in_ci(), "required for this test in CI: {what}");
        // Straight to the file descriptor: the test harness captures
        // `eprintln!` of passing tests, and a skip must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIP: {what} is missing; this test did not run ***\n"
        );
    }
    available
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

/// Whether a program can be run.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
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

/// Compiles the fixtures once per test binary into `name`'s own directory,
/// or returns `None` (after a SKIP notice) where no compiler or
/// `<sys/sdt.h>` is installed.
pub fn fixtures(name: &str) -> Option<&'static Fixtures> {
    static BUILT: OnceLock<Option<Fixtures>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/list");
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("list-fixtures-{name}"));
            std::fs::create_dir_all(&dir).expect("create fixture dir");
            if !require(have("cc"), "a C compiler (cc)") {
                return None;
            }
            let lib = dir.join("libsem.so");
            let header = cc(
                &["-fPIC", "-shared", "-o"],
                &lib,
                &[source.join("libsem.c")],
            );
            if !require(header, "<sys/sdt.h> (Debian: systemtap-sdt-dev)") {
                return None;
            }
            let link = [
                OsStr::new("-L").to_owned(),
                dir.clone().into_os_string(),
                OsStr::new("-lsem").to_owned(),
                format!("-Wl,-rpath,{}", dir.display()).into(),
            ];
            let pie = dir.join("probes-pie");
            let nopie = dir.join("probes-nopie");
            for (flags, out) in [
                (&["-fPIE", "-pie", "-o"][..], &pie),
                (&["-no-pie", "-o"][..], &nopie),
            ] {
                let mut cmd = Command::new("cc");
                cmd.arg("-O2")
                    .args(flags)
                    .arg(out)
                    .arg(source.join("probes.c"))
                    .args(&link);
                let status = cmd.status().expect("run cc");
                assert!(status.success(), "{cmd:?} failed");
            }
            Some(Fixtures {
                dir,
                pie,
                nopie,
                lib,
            })
        })
        .as_ref()
}

/// Compiles with `cc -O2 FLAGS OUT SOURCES`; false if it fails.
fn cc(flags: &[&str], out: &Path, sources: &[PathBuf]) -> bool {
    let output = Command::new("cc")
        .arg("-O2")
        .args(flags)
        .arg(out)
        .args(sources)
        .output()
        .expect("run cc");
    if !output.status.success() {
        eprintln!("cc failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    output.status.success()
}

/// One note as both tools can print it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NoteView {
    pub provider: String,
    pub name: String,
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    pub args: String,
}

/// The `stapsdt` notes of a file as `readelf -n` prints them.
pub fn readelf_notes(path: &Path) -> Vec<NoteView> {
    let out = Command::new("readelf")
        .args(["-n", "--wide"])
        .arg(path)
        .output()
        .expect("run readelf");
    assert!(out.status.success(), "readelf -n {path:?} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut notes = Vec::new();
    let mut current: Option<NoteView> = None;
    for line in text.lines() {
        let line = line.trim_start();
        // With --wide, the provider shares the line of the note header.
        if let Some((_, provider)) = line.split_once("Provider: ") {
            notes.extend(current.take());
            current = Some(NoteView {
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
                let fields: Vec<u64> = location
                    .split(", ")
                    .map(|f| {
                        let hex = f.rsplit("0x").next().unwrap();
                        u64::from_str_radix(hex, 16).unwrap()
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

/// The notes in `sdt list --json` output, one per site.
pub fn sdt_notes(probes: &[Value]) -> Vec<NoteView> {
    let mut notes = Vec::new();
    for probe in probes {
        for site in probe["sites"].as_array().unwrap() {
            let args: Vec<&str> = site["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["spec"].as_str().unwrap())
                .collect();
            notes.push(NoteView {
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

/// A section header as `readelf -S` prints it.
#[derive(Clone, Debug)]
pub struct SectionView {
    pub name: String,
    pub kind: String,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
}

/// The section headers of a file, from `readelf -SW`.
pub fn readelf_sections(path: &Path) -> Vec<SectionView> {
    let out = Command::new("readelf")
        .args(["-S", "--wide"])
        .arg(path)
        .output()
        .expect("run readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|line| {
            // "  [Nr] Name Type Address Off Size ES Flg Lk Inf Al"
            let rest = line.trim_start().strip_prefix('[')?;
            let (_, rest) = rest.split_once(']')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            Some(SectionView {
                name: fields.first()?.to_string(),
                kind: fields.get(1)?.to_string(),
                addr: hex(fields.get(2)?)?,
                offset: hex(fields.get(3)?)?,
                size: hex(fields.get(4)?)?,
            })
        })
        .collect()
}

/// The file offset of an address according to the section headers: an
/// independent check of `sdt`'s segment-based translation.
pub fn offset_by_sections(sections: &[SectionView], addr: u64) -> Option<u64> {
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
        "unsupported" => {
            let reason = location["reason"].as_str().unwrap();
            assert!(
                [
                    "vector register",
                    "instruction pointer",
                    "high-byte",
                    "symbol",
                    "segment"
                ]
                .iter()
                .any(|known| reason.contains(known)),
                "{key}: `{spec}` refused for an unexpected reason: {reason}"
            );
        }
        other => panic!("{key}: `{spec}` has location kind {other}"),
    }
}
