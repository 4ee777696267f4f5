//! `sdt dtrace` against SystemTap's `dtrace` (Debian's systemtap-sdt-dev),
//! on PostgreSQL 15's real `probes.d` and on a checked-in file with the
//! same constructs (tests/fixtures/dtrace/postgresql-like.d):
//!
//! * the headers are SystemTap's, byte for byte but for the first line,
//!   with and without `-C`;
//! * a C program that fires every probe, built against each header and
//!   `-G` object, has the same notes: names, argument specs, and
//!   semaphores (named by their symbols);
//! * `PROBE_ENABLED()` is false, true while `sdt trace` traces, and false
//!   again after;
//! * with lld, whose layout puts small data on the page that ends the
//!   RELRO segment, the semaphores of sdt's `-G` object are raised for a
//!   process started after the tracer attached (`sdt trace -c`), and
//!   SystemTap's are not (see sdt-dtrace's `semaphores` module);
//! * errors name the file, line and column; sdt installed as `dtrace`
//!   takes the same command line.
//!
//! PostgreSQL's file comes from Debian's `postgresql-15` source package,
//! fetched with `apt-get source` through a private apt configuration (the
//! machine's own is not touched) and kept in the target directory. In CI a
//! failed fetch fails the test; elsewhere it is skipped loudly. The
//! checked-in file is always tested.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use sdt_testing::{readelf_notes, require, require_root, Note};

const SDT: &str = env!("CARGO_BIN_EXE_sdt");

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dtrace")
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", command.get_program()))
}

fn ok(command: &mut Command) -> Output {
    let output = run(command);
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sdt-dtrace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// SystemTap's `dtrace`, a Python script, if installed.
fn systemtap_dtrace() -> bool {
    let script = std::fs::read("/usr/bin/dtrace").unwrap_or_default();
    require(
        script.starts_with(b"#!") && script.windows(6).any(|w| w == b"python"),
        "SystemTap's dtrace (Debian's systemtap-sdt-dev) at /usr/bin/dtrace",
    ) && require(sdt_testing::have("cc"), "cc")
}

/// PostgreSQL 15's `src/backend/utils/probes.d`, from Debian's source
/// package; `None` (a failure in CI) when it cannot be fetched.
fn postgresql_probes_d() -> Option<PathBuf> {
    static FETCHED: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let fetched = FETCHED.get_or_init(|| Mutex::new(fetch_postgresql_probes_d()));
    let path = fetched.lock().unwrap().clone();
    if require(
        path.is_some(),
        "PostgreSQL 15's probes.d (apt-get source postgresql-15 from deb.debian.org)",
    ) {
        path
    } else {
        None
    }
}

fn fetch_postgresql_probes_d() -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let cache = exe.ancestors().nth(3)?.join("sdt-fixtures/postgresql-15");
    let probes_d = cache.join("probes.d");
    if probes_d.is_file() {
        return Some(probes_d);
    }
    let work = scratch("apt");
    std::fs::create_dir_all(work.join("lists/partial")).ok()?;
    std::fs::write(
        work.join("sources.list"),
        "deb-src http://deb.debian.org/debian bookworm main\n",
    )
    .ok()?;
    let apt = |args: &[&str]| {
        let options = [
            format!(
                "Dir::Etc::SourceList={}",
                work.join("sources.list").display()
            ),
            "Dir::Etc::SourceParts=/dev/null".to_string(),
            format!("Dir::State::Lists={}", work.join("lists").display()),
            format!("Dir::Cache={}", work.join("cache").display()),
        ];
        let mut command = Command::new("apt-get");
        command.arg("-qq");
        for option in &options {
            command.args(["-o", option]);
        }
        command.args(args).current_dir(&work);
        let output = run(&mut command);
        if !output.status.success() {
            eprintln!(
                "apt-get {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        output.status.success()
    };
    if !apt(&["update"]) || !apt(&["source", "--download-only", "postgresql-15"]) {
        return None;
    }
    let tarball = std::fs::read_dir(&work)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".orig.tar.bz2"))?;
    let extracted = run(Command::new("tar")
        .arg("xjf")
        .arg(&tarball)
        .args(["--wildcards", "*/src/backend/utils/probes.d"])
        .current_dir(&work));
    if !extracted.status.success() {
        return None;
    }
    let found = std::fs::read_dir(&work)
        .ok()?
        .flatten()
        .map(|e| e.path().join("src/backend/utils/probes.d"))
        .find(|p| p.is_file())?;
    std::fs::create_dir_all(&cache).ok()?;
    std::fs::copy(found, &probes_d).ok()?;
    std::fs::remove_dir_all(&work).ok();
    Some(probes_d)
}

/// The provider files to test: the checked-in one, and PostgreSQL's.
fn provider_files() -> Vec<PathBuf> {
    let mut files = vec![fixtures().join("postgresql-like.d")];
    files.extend(postgresql_probes_d());
    files
}

/// Which `dtrace` makes the header and object.
#[derive(Clone, Copy, Debug)]
enum Dtrace {
    Sdt,
    SystemTap,
}

impl Dtrace {
    fn command(self) -> Command {
        match self {
            Dtrace::Sdt => {
                let mut c = Command::new(SDT);
                c.arg("dtrace");
                c
            }
            Dtrace::SystemTap => Command::new("/usr/bin/dtrace"),
        }
    }

    /// Writes `probes.h` and `probes.o` for `provider_file` into `dir`.
    fn generate(self, provider_file: &Path, dir: &Path, cpp: bool) {
        for (flag, out) in [("-h", "probes.h"), ("-G", "probes.o")] {
            let mut command = self.command();
            if cpp {
                command.arg("-C");
            }
            ok(command
                .args([flag, "-s"])
                .arg(provider_file)
                .arg("-o")
                .arg(dir.join(out))
                .current_dir(dir));
        }
    }
}

#[test]
fn headers_are_systemtaps_with_and_without_cpp() {
    if !systemtap_dtrace() {
        return;
    }
    for file in provider_files() {
        for cpp in [false, true] {
            let dir = scratch("headers");
            Dtrace::Sdt.generate(&file, &dir, cpp);
            let ours = std::fs::read_to_string(dir.join("probes.h")).unwrap();
            Dtrace::SystemTap.generate(&file, &dir, cpp);
            let theirs = std::fs::read_to_string(dir.join("probes.h")).unwrap();
            let body = |h: &str| h.split_once('\n').map(|(_, rest)| rest.to_string());
            assert_eq!(body(&ours), body(&theirs), "{} (-C: {cpp})", file.display());
            assert!(ours.contains("_ENABLED() __builtin_expect ("), "{ours}");
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}

/// A C program that fires every probe of `header` once, behind its
/// `_ENABLED()` test, with distinct values computed at run time.
fn fire_every_probe(header: &str) -> String {
    let mut source = String::from(
        "#include \"probes.h\"\nint main(int argc, char **argv) {\n\tlong v = argc;\n\t(void)argv;\n",
    );
    for line in header.lines() {
        let Some(define) = line.strip_prefix("#define ") else {
            continue;
        };
        let Some((name, rest)) = define.split_once('(') else {
            continue;
        };
        if name.ends_with("_ENABLED") || !rest.ends_with(") \\") {
            continue;
        }
        let count = rest.matches("arg").count();
        let args: Vec<String> = (0..count).map(|i| format!("v + {i}")).collect();
        source.push_str(&format!(
            "\tif ({name}_ENABLED())\n\t\t{name}({});\n",
            args.join(", ")
        ));
    }
    source.push_str("\treturn 0;\n}\n");
    source
}

/// The notes of `binary`, with each semaphore named by its symbol.
fn notes_with_semaphores(binary: &Path) -> Vec<(Note, String)> {
    let symbols = String::from_utf8(ok(Command::new("nm").arg(binary)).stdout).unwrap();
    readelf_notes(binary)
        .into_iter()
        .map(|note| {
            // Other symbols may share the address (`__TMC_END__`).
            let names: Vec<&str> = symbols
                .lines()
                .filter_map(|l| {
                    let mut fields = l.split_whitespace();
                    let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                    let name = fields.nth(1)?;
                    (address == note.semaphore).then_some(name)
                })
                .collect();
            let semaphore = names
                .iter()
                .find(|n| n.ends_with("_semaphore"))
                .or(names.first())
                .map_or_else(
                    || format!("no symbol at {:#x}", note.semaphore),
                    |n| n.to_string(),
                );
            (note, semaphore)
        })
        .collect()
}

/// Builds `source` against the header and object in `dir`.
fn build_c(dir: &Path, source: &str, name: &str, extra: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let binary = dir.join(name);
    ok(Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&binary)
        .arg(&c)
        .arg(dir.join("probes.o"))
        .arg("-I")
        .arg(dir)
        .args(extra));
    binary
}

#[test]
fn c_programs_get_the_same_notes_as_with_systemtap() {
    if !systemtap_dtrace() {
        return;
    }
    for file in provider_files() {
        let mut built = Vec::new();
        for dtrace in [Dtrace::Sdt, Dtrace::SystemTap] {
            let dir = scratch("notes");
            dtrace.generate(&file, &dir, false);
            let header = std::fs::read_to_string(dir.join("probes.h")).unwrap();
            let binary = build_c(&dir, &fire_every_probe(&header), "all", &[]);
            let notes: Vec<(String, String, String, String)> = notes_with_semaphores(&binary)
                .into_iter()
                .map(|(n, semaphore)| (n.provider, n.name, n.args, semaphore))
                .collect();
            built.push(notes);
            std::fs::remove_dir_all(&dir).ok();
        }
        let probes = file_probe_count(&file);
        assert_eq!(
            built[0].len(),
            probes,
            "{}: a note per probe",
            file.display()
        );
        for (provider, name, _, semaphore) in &built[0] {
            assert_eq!(semaphore, &format!("{provider}_{name}_semaphore"));
        }
        assert_eq!(built[0], built[1], "{}", file.display());
    }
}

/// How many `probe` declarations `file` has.
fn file_probe_count(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("probe "))
        .count()
}

#[test]
fn enabled_macros_flip_while_sdt_traces() {
    if !(require(sdt_testing::have("cc"), "cc") && require_root()) {
        return;
    }
    const HITS: usize = 100;
    for file in provider_files() {
        let dir = scratch("enabled");
        Dtrace::Sdt.generate(&file, &dir, false);
        let source = std::fs::read_to_string(fixtures().join("enabled.c")).unwrap();
        let binary = build_c(&dir, &source, "enabled", &[]);
        let mut program = Command::new(&binary)
            .arg(HITS.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(program.stdout.take().unwrap()).lines();
        let mut expect = |want: &str| {
            let line = lines.next().and_then(Result::ok);
            assert_eq!(line.as_deref(), Some(want), "{}", file.display());
        };
        expect("before 0");
        let trace = Command::new(SDT)
            .args(["trace", "-p", &program.id().to_string(), "-s", "0"])
            .arg("postgresql:query__start")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        expect("fired");
        // Ctrl-C to the `sdt trace` this test started.
        let pid = rustix::process::Pid::from_raw(trace.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
        let traced = trace.wait_with_output().unwrap();
        expect("after 0");
        assert!(program.wait().unwrap().success());
        let text = String::from_utf8_lossy(&traced.stdout);
        let queries: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("postgresql:query__start arg0=\""))
            .map(|(_, q)| q.trim_end_matches('"'))
            .collect();
        let expected: Vec<String> = (0..HITS).map(|i| format!("select {i}")).collect();
        assert_eq!(queries, expected, "{}:\n{text}", file.display());
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn with_lld_only_sdts_semaphores_are_raised_in_processes_started_later() {
    if !(systemtap_dtrace()
        && require(sdt_testing::have("ld.lld"), "ld.lld (Debian's lld)")
        && require_root())
    {
        return;
    }
    let source = "#include \"probes.h\"\n#include <stdio.h>\n\
                  int main(void) {\n\tfor (int i = 0; i < 3; i++)\n\
                  \t\tif (POSTGRESQL_QUERY_START_ENABLED())\n\t\t\tPOSTGRESQL_QUERY_START(\"q\");\n\
                  \treturn 0;\n}\n";
    let file = fixtures().join("postgresql-like.d");
    let mut hits = Vec::new();
    for dtrace in [Dtrace::Sdt, Dtrace::SystemTap] {
        let dir = scratch("lld");
        dtrace.generate(&file, &dir, false);
        let binary = build_c(&dir, source, "small", &["-fuse-ld=lld"]);
        let traced = ok(Command::new(SDT)
            .args(["trace", "-c"])
            .arg(&binary)
            .arg("postgresql:query__start")
            .stdin(Stdio::null()));
        hits.push(String::from_utf8_lossy(&traced.stdout).lines().count());
        std::fs::remove_dir_all(&dir).ok();
    }
    assert_eq!(
        hits,
        [3, 0],
        "sdt's object: every hit; SystemTap's: its semaphore is raised in the RELRO mapping"
    );
}

#[test]
fn errors_name_the_line_and_column() {
    let dir = scratch("errors");
    let file = dir.join("bad.d");
    std::fs::write(
        &file,
        "provider p {\n\tprobe ok(int);\n\tprobe bad(int x;\n};\n",
    )
    .unwrap();
    let output = run(Command::new(SDT)
        .args(["dtrace", "-h", "-s"])
        .arg(&file)
        .current_dir(&dir));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:3:17: expected `,` or `)`, found `;`",
            file.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("3 |  probe bad(int x;\n"), "{stderr}");
    assert!(!dir.join("bad.h").exists(), "nothing is written on error");

    std::fs::write(&file, "#include <x.h>\nprovider p { probe q(); };\n").unwrap();
    let output = run(Command::new(SDT)
        .args(["dtrace", "-h", "-s"])
        .arg(&file)
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":1:2: `#include` needs the C preprocessor"),
        "{stderr}"
    );

    let output = run(Command::new(SDT).args(["dtrace", "-s", "x.d"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("give -h (a header) or -G"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn installed_as_dtrace_it_takes_the_command_line_directly() {
    let dir = scratch("as-dtrace");
    let link = dir.join("dtrace");
    std::os::unix::fs::symlink(SDT, &link).unwrap();
    let file = fixtures().join("postgresql-like.d");
    ok(Command::new(&link)
        .args(["-h", "-s"])
        .arg(&file)
        .current_dir(&dir));
    let header = std::fs::read_to_string(dir.join("postgresql-like.h")).unwrap();
    assert!(header.contains(
        "#define POSTGRESQL_QUERY_START(arg1) \\\nDTRACE_PROBE1 (postgresql, query__start, arg1)\n"
    ));
    ok(Command::new(&link)
        .args(["-G", "-s"])
        .arg(&file)
        .args(["-o", "semaphores.o", "ignored.o"])
        .current_dir(&dir));
    let symbols =
        String::from_utf8(ok(Command::new("nm").arg(dir.join("semaphores.o"))).stdout).unwrap();
    assert!(
        symbols.contains(" D postgresql_query__start_semaphore\n"),
        "{symbols}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
