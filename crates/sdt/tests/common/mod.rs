//! Shared by the integration tests: building the fixture program in a given
//! link configuration, reading it with `readelf`, and deciding whether a
//! test that needs root and BPF may run.
//!
//! Every test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

pub use sdt_testing::{
    have, readelf_notes, readelf_sections, require, require_root, Note, Section,
};

/// How the fixture is compiled and linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    pub release: bool,
    pub lto: Lto,
    pub linker: Linker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lto {
    Off,
    Thin,
    Fat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Linker {
    /// Whatever rustc picks (rust-lld on x86-64 Linux since 1.90).
    Default,
    Bfd,
    Gold,
    Lld,
}

impl Config {
    /// The release build that the readers' tests use.
    pub const RELEASE: Config = Config {
        release: true,
        lto: Lto::Off,
        linker: Linker::Default,
    };

    fn dir_name(self) -> String {
        format!(
            "{}-{:?}-{:?}",
            if self.release { "release" } else { "debug" },
            self.lto,
            self.linker
        )
        .to_lowercase()
    }
}

/// Builds the fixture program (tests/fixtures/probe) in `config`, once per
/// test binary, and returns the executable's path.
pub fn fixture(config: Config) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<Config, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    // Held during the build: cargo would serialise concurrent builds anyway.
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(&config) {
        return path.clone();
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target_dir = fixtures_target_dir().join(config.dir_name());
    let mut rustflags = vec!["-C", "link-arg=-Wl,--gc-sections"];
    match config.linker {
        Linker::Default => {}
        // rustc links through cc; the last -fuse-ld wins over its own.
        Linker::Bfd => rustflags.push("-Clink-arg=-fuse-ld=bfd"),
        Linker::Gold => rustflags.push("-Clink-arg=-fuse-ld=gold"),
        Linker::Lld => rustflags.push("-Clink-arg=-fuse-ld=lld"),
    }
    let lto = match config.lto {
        Lto::Off => "off",
        Lto::Thin => "thin",
        Lto::Fat => "fat",
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(workspace.join("tests/fixtures/probe/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        .env("CARGO_PROFILE_RELEASE_LTO", lto)
        .env("CARGO_PROFILE_DEV_LTO", lto)
        .env_remove("RUSTFLAGS");
    if config.release {
        command.arg("--release");
    }
    let output = run(&mut command);
    assert!(
        output.status.success(),
        "building the fixture ({config:?}) failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = target_dir
        .join(if config.release { "release" } else { "debug" })
        .join("sdt-fixture");
    built.insert(config, path.clone());
    path
}

/// A directory for fixture builds next to this test's own target directory,
/// so that they are cached between runs and cleaned by `cargo clean`.
fn fixtures_target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>
    let target = exe
        .ancestors()
        .nth(3)
        .expect("test executable inside a target directory");
    target.join("sdt-fixtures")
}

/// Runs `command`, panicking with its name if it cannot be started.
pub fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", command.get_program()))
}

/// Runs `program args...` and returns its standard output; panics with its
/// standard error when it fails.
pub fn stdout_of(program: &str, args: &[&str]) -> String {
    let output = run(Command::new(program).args(args));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Whether a test that needs `program` may run: a missing tool fails the
/// test under CI=true and skips it loudly elsewhere.
pub fn require_tool(program: &str) -> bool {
    require(have(program), program)
}

/// Whether a test that attaches BPF programs may run: it needs root and
/// bpftrace.
pub fn require_tracing() -> bool {
    require_tool("bpftrace") && require_root()
}

/// One `PT_LOAD` program header, as `readelf -l` prints it.
#[derive(Clone, Debug)]
pub struct Load {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub flags: String,
}

/// What `readelf` says about an ELF file.
pub struct Elf {
    pub path: PathBuf,
    pub notes: Vec<Note>,
    pub sections: Vec<Section>,
    pub loads: Vec<Load>,
}

impl Elf {
    pub fn read(path: &Path) -> Elf {
        let file = path.to_str().expect("UTF-8 path");
        Elf {
            path: path.to_owned(),
            notes: readelf_notes(path),
            sections: readelf_sections(path),
            loads: parse_loads(&stdout_of("readelf", &["-l", "-W", file])),
        }
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    pub fn notes_of(&self, provider: &str, name: &str) -> Vec<&Note> {
        self.notes
            .iter()
            .filter(|n| n.provider == provider && n.name == name)
            .collect()
    }

    /// The `PT_LOAD` segment holding `vaddr` in the file.
    pub fn load_of(&self, vaddr: u64) -> Option<&Load> {
        self.loads
            .iter()
            .find(|l| (l.vaddr..l.vaddr + l.filesz).contains(&vaddr))
    }

    /// `len` bytes of the file at virtual address `vaddr`.
    pub fn bytes_at(&self, vaddr: u64, len: usize) -> Vec<u8> {
        let load = self
            .load_of(vaddr)
            .unwrap_or_else(|| panic!("{vaddr:#x} is in no PT_LOAD segment"));
        let offset = (vaddr - load.vaddr + load.offset) as usize;
        std::fs::read(&self.path).expect("read ELF file")[offset..offset + len].to_vec()
    }
}

fn hex(text: &str) -> u64 {
    let text = text.trim().trim_end_matches(',');
    u64::from_str_radix(text.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("bad hex {text:?}: {e}"))
}

fn parse_loads(text: &str) -> Vec<Load> {
    text.lines()
        .filter_map(|line| {
            // "  LOAD 0x013450 0x0000000000014450 0x0000000000014450 0x03e620 0x03e620 R E 0x1000"
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.first() != Some(&"LOAD") {
                return None;
            }
            Some(Load {
                offset: hex(fields[1]),
                vaddr: hex(fields[2]),
                filesz: hex(fields[4]),
                flags: fields[6..fields.len() - 1].concat(),
            })
        })
        .collect()
}

/// What a traced run printed.
pub struct Traced {
    pub program: String,
    pub tracer: String,
}

/// Starts `bin args...`, which waits for its probe to be enabled, traces it
/// with `bpftrace -p` (bpftrace 0.17 raises semaphores only for a given
/// process), and returns what both printed once the program has exited.
pub fn trace(bin: &str, args: &[&str], script: &str) -> Traced {
    let program = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture");
    let tracer = run(Command::new("bpftrace")
        .args(["-p", &program.id().to_string(), "-e", script])
        .stdin(Stdio::null()));
    let program = program.wait_with_output().expect("wait for the fixture");
    assert!(
        program.status.success(),
        "fixture failed: {}",
        program.status
    );
    assert!(
        tracer.status.success(),
        "bpftrace failed: {}",
        String::from_utf8_lossy(&tracer.stderr)
    );
    Traced {
        program: String::from_utf8_lossy(&program.stdout).into_owned(),
        tracer: String::from_utf8_lossy(&tracer.stdout).into_owned(),
    }
}

/// A fresh directory under the system's temporary directory.
pub fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sdt-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// Builds the fixture crate `tests/fixtures/DIR` (release, its own target
/// directory) once per test binary, and returns its executable `BIN`.
pub fn fixture_crate(dir: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(dir) {
        return path.clone();
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target_dir = fixtures_target_dir().join(dir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = run(Command::new(cargo)
        .args(["build", "--quiet", "--release", "--manifest-path"])
        .arg(
            workspace
                .join("tests/fixtures")
                .join(dir)
                .join("Cargo.toml"),
        )
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("RUSTFLAGS"));
    assert!(
        output.status.success(),
        "building tests/fixtures/{dir} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = target_dir.join("release").join(bin);
    built.insert(dir.to_string(), path.clone());
    path
}
