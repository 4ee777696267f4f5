//! User stacks named after the process has gone, system-wide.
//!
//! Traced without `-p` or `-c`, nothing records the mappings of the
//! process that fires, and the fixture (`tests/fixtures/stacks/gone.c`, a
//! PIE program with frame pointers) fires `stacks:deep` from
//! `main -> outer -> inner` and `stacks:lib` from its library's
//! `lib_work`, then exits before sdt prints anything. Its stacks must
//! still name those functions and `main` (sdt records them by build ID
//! and file offset): in text, in folded stacks, and in `sdt stackcount`;
//! and `usym` of an address it printed names its function too.
//! Under `-p` and `-c` stacks stay as they were (see `pictures.rs`).
//!
//! They attach real probes, so they need root. With `CI=true` a missing
//! privilege or tool fails the test; elsewhere it prints a loud SKIP.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sdt_testing::fixture::C;

const SDT: &str = env!("CARGO_BIN_EXE_sdt");

/// How often the fixture fires `stacks:deep`.
const HITS: u32 = 10;

/// The fixture and its library, each a copy of this test's own (a probe
/// attached system-wide by path must not see another test's runs).
struct Fixture {
    program: PathBuf,
    library: PathBuf,
}

fn fixture(name: &str) -> Option<Fixture> {
    if !sdt_testing::require_root()
        || !sdt_testing::require(sdt_testing::have("cc"), "a C compiler (cc)")
    {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("stacks")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // At -O0 each function has set its frame up before its probe fires:
    // a probe on a function's first instruction hides its caller from a
    // frame-pointer walk.
    let flags = ["-O0", "-g", "-fno-omit-frame-pointer"];
    let library = C::new("tests/fixtures/stacks/gonelib.c")
        .flags(&flags)
        .flags(&["-fPIC", "-shared"])
        .output("libgonelib.so")
        .dir(&dir)
        .build();
    let program = C::new("tests/fixtures/stacks/gone.c")
        .flags(&flags)
        .flags(&["-fPIE", "-pie"])
        .link(&library)
        .dir(&dir)
        .build();
    Some(Fixture { program, library })
}

/// Runs `sdt ARGS` system-wide; once it has attached (it says so on
/// standard output, as bpftrace does for those who ask), runs the fixture
/// to its end, then ends sdt with SIGINT, so that everything sdt prints
/// comes after the fixture has gone. Its standard output and error.
fn after_the_process_has_gone(f: &Fixture, args: &[&str]) -> (String, String) {
    const ATTACHED: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";
    let mut sdt = Command::new(SDT)
        .args(args)
        .env(ATTACHED, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(sdt.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != ATTACHED {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "sdt ended early");
    }
    let run = Command::new(&f.program)
        .arg(HITS.to_string())
        .output()
        .unwrap();
    assert!(run.status.success(), "the fixture: {run:?}");
    let pid = rustix::process::Pid::from_raw(sdt.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let mut printed = String::new();
    stdout.read_to_string(&mut printed).unwrap();
    let mut stderr = String::new();
    sdt.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = sdt.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status}: {stderr}");
    (printed, stderr)
}

/// The function names of a text stack's frames (`name+offset`), each
/// checked to have its offset.
fn names(stack: &str) -> Vec<String> {
    stack
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|frame| {
            let (name, offset) = frame.rsplit_once('+').unwrap_or((frame, ""));
            assert!(
                offset.parse::<u64>().is_ok(),
                "a frame without a name: {frame}"
            );
            name.to_string()
        })
        .collect()
}

/// The stacks of map `@name` in text output, with their counts.
fn text_stacks(stdout: &str, name: &str) -> Vec<(Vec<String>, u64)> {
    let prefix = format!("@{name}[\n");
    stdout
        .split(&prefix)
        .skip(1)
        .map(|rest| {
            let (stack, count) = rest.split_once("]: ").unwrap();
            let count = count.lines().next().unwrap().trim().parse().unwrap();
            (names(stack), count)
        })
        .collect()
}

#[test]
fn system_wide_stacks_name_their_functions_after_the_process_has_gone() {
    let Some(f) = fixture("text") else { return };
    let script = format!(
        "usdt:{}:stacks:deep {{ @deep[ustack] = count(); printf(\"in %s\\n\", usym(reg(\"ip\"))); }}\n\
         usdt:{}:stacks:lib {{ @lib[ustack] = count(); @perf[ustack(perf)] = count(); \
         printf(\"in %s\\n\", usym(reg(\"ip\"))); }}",
        f.program.display(),
        f.library.display()
    );
    let (stdout, stderr) = after_the_process_has_gone(&f, &["run", "-e", &script]);
    let deep = text_stacks(&stdout, "deep");
    assert_eq!(deep.len(), 1, "{stdout}\n{stderr}");
    let (frames, count) = &deep[0];
    assert_eq!(*count, u64::from(HITS), "{stdout}\n{stderr}");
    // Below main, the C library's start, also named by its build ID.
    assert_eq!(
        frames[..3],
        ["inner", "outer", "main"],
        "{stdout}\n{stderr}"
    );
    assert!(frames.len() > 3, "{stdout}");

    let lib = text_stacks(&stdout, "lib");
    assert_eq!(lib.len(), 1, "{stdout}\n{stderr}");
    assert_eq!(lib[0].0[..2], ["lib_work", "main"], "{stdout}\n{stderr}");
    assert_eq!(lib[0].1, 1, "{stdout}");
    // perf's form names each frame's file.
    let library = f.library.display().to_string();
    let program = f.program.display().to_string();
    assert!(
        stdout.contains(" lib_work+") && stdout.contains(&format!("({library})")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("({program})")), "{stdout}");
    assert!(
        !stderr.contains("build ID"),
        "every object was found: {stderr}"
    );
    // An address printed after the process has gone is named too.
    assert_eq!(
        stdout.matches("in inner\n").count(),
        HITS as usize,
        "{stdout}\n{stderr}"
    );
    assert_eq!(stdout.matches("in lib_work\n").count(), 1, "{stdout}");
}

#[test]
fn system_wide_folded_stacks_and_stackcount_name_their_functions_after_the_process_has_gone() {
    let Some(f) = fixture("folded") else { return };
    let want = format!("main;outer;inner {HITS}");
    let script = format!(
        "usdt:{}:stacks:deep {{ @[ustack] = count(); }}",
        f.program.display()
    );
    let (stdout, stderr) = after_the_process_has_gone(&f, &["run", "-f", "folded", "-e", &script]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}\n{stderr}");
    assert!(lines[0].ends_with(&want), "{stdout}\n{stderr}");

    let probe = format!("{}:stacks:deep", f.program.display());
    let (stdout, stderr) = after_the_process_has_gone(&f, &["stackcount", "-f", "folded", &probe]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}\n{stderr}");
    assert!(lines[0].ends_with(&want), "{stdout}\n{stderr}");

    // The library's function, with the program's main below it.
    let probe = format!("{}:stacks:lib", f.library.display());
    let (stdout, stderr) = after_the_process_has_gone(&f, &["stackcount", "-f", "folded", &probe]);
    assert!(
        stdout.trim_end().ends_with("main;lib_work 1"),
        "{stdout}\n{stderr}"
    );
}
