//! Why nothing fired, said (issue 25): a program without the probe is
//! named, with where a runtime with probes is; a shim or wrapper script is
//! said to be one, never guessed past, and what it runs is traced once it
//! runs; an attach point that never found its probe is told at the end;
//! and a runtime probe that waits for a switch (CPython's profile
//! function, the JVM's -XX:+ExtendedDTraceProbes) and fired too little
//! gets the switch named, from hits its programs counted exactly.
//!
//! Real programs: Debian's CPython 3.11, OpenJDK 17, a C program firing
//! CPython's probe names, a copy of `true` standing in for a python built
//! without probes. These attach probes, so they need root; with `CI=true`
//! a missing privilege or runtime fails the test, elsewhere it prints a
//! loud SKIP.

mod list_common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;
use serde_json::Value;

const PYTHON: &str = "/usr/bin/python3.11";
const JAVA_HOME: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// Whether Debian's python3.11 is here, as root can trace it.
fn python() -> bool {
    sdt_testing::require_root() && require(Path::new(PYTHON).exists(), "Debian's python3.11")
}

/// A directory of this test's own under the target directory, empty.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("hints")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes an executable file.
fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> String {
    format!("{}:/usr/bin:/bin", dir.display())
}

/// Runs `command`, which must not panic and must succeed.
fn succeeds(command: &mut Command) -> (String, String) {
    let out = command.output().expect("run sdt");
    assert_no_panic(&out);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{command:?} failed:\n{stderr}");
    (stdout, stderr)
}

fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `{"type": "hint"}` records of JSON output.
fn json_hints(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["type"] == "hint")
        .map(|v| v["data"].clone())
        .collect()
}

/// The `-c` program is a python3.11 without probes (a copy of `true`
/// standing in for a build without `--with-dtrace`), reached through a
/// `#!/usr/bin/env python3.11` script and through `env python3.11`:
/// that copy is named, said to have no such probe, and Debian's
/// python3.11 is named as one that has them. At the end, the attach
/// point is said never to have been attached.
#[test]
fn a_program_without_the_probe_is_named_with_one_that_has_it() {
    if !python() {
        return;
    }
    let dir = scratch("no-probe");
    let fake = dir.join("python3.11");
    std::fs::copy("/usr/bin/true", &fake).unwrap();
    let script = dir.join("app.py");
    executable(&script, "#!/usr/bin/env python3.11\nprint('hello')\n");
    let lacks = format!(
        "usdt::python:function__entry: {}, which the command runs, has no probe python:function__entry, nor do the libraries it links",
        fake.display()
    );
    let elsewhere = format!(
        "{} has no python probes: this python was built without USDT probes (build it with ./configure --with-dtrace); {PYTHON} has them",
        fake.display()
    );

    let program = "usdt::python:function__entry { @ = count(); }";
    let (stdout, stderr) = succeeds(
        sdt()
            .env("PATH", path_with(&dir))
            .args(["run", "-c"])
            .arg(&script)
            .args(["-e", program]),
    );
    assert!(
        stderr.contains(&format!("sdt: warning: {lacks}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("sdt: hint: {elsewhere}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "sdt: warning: usdt::python:function__entry was never attached: no object the command mapped has it"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.matches(&elsewhere).count(), 1, "said once: {stderr}");
    assert!(!stderr.contains("matches no probe yet"), "{stderr}");
    assert!(!stdout.contains("@:"), "{stdout}");

    // sdt trace, through `env`: the spec as typed.
    let (_, stderr) = succeeds(sdt().env("PATH", path_with(&dir)).args([
        "trace",
        "-c",
        "env python3.11 -c pass",
        "python:function__entry",
    ]));
    assert!(
        stderr.contains(&format!(
            "sdt: warning: python:function__entry: {}, which the command runs, has no probe",
            fake.display()
        )),
        "{stderr}"
    );
    // With --json, in the summary: every other line stays an event.
    let (stdout, _) = succeeds(sdt().env("PATH", path_with(&dir)).args([
        "trace",
        "--json",
        "-c",
        "env python3.11 -c pass",
        "python:function__entry",
    ]));
    let summary: Value = serde_json::from_str(stdout.trim()).expect("one summary line");
    let kinds: Vec<&Value> = summary["summary"]["hints"]
        .as_array()
        .unwrap_or_else(|| panic!("no hints in {summary}"))
        .iter()
        .map(|h| &h["kind"])
        .collect();
    assert_eq!(kinds, ["no_probe", "no_probe", "unattached"], "{summary}");
    assert_eq!(
        summary["summary"]["hints"][0]["probes"][0],
        "python:function__entry"
    );

    // JSON: the same sentences, as records.
    let (stdout, _) = succeeds(
        sdt()
            .env("PATH", path_with(&dir))
            .args(["run", "-f", "json", "-c"])
            .arg(&script)
            .args(["-e", program]),
    );
    let hints = json_hints(&stdout);
    let kinds: Vec<&str> = hints.iter().map(|h| h["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["no_probe", "no_probe", "unattached"], "{stdout}");
    assert_eq!(hints[0]["probes"][0], "usdt::python:function__entry");
    assert!(hints[0]["text"].as_str().unwrap().starts_with(&lacks));
}

/// A pyenv-style shim (a shell script named python3.11 that execs the
/// real interpreter) is said to be a script that decides what it runs;
/// no file is named before the command runs it, libpython (which it never
/// runs) not at all; the interpreter it execs is attached once mapped,
/// and every return of fib(15) is counted (function__return fires at
/// every return, with or without a profile function). The language
/// tools do the same (switching the profile function on through the
/// environment, which the shim passes on), and count fib's 1,973 calls
/// exactly.
#[test]
fn a_shim_is_said_to_be_one_and_what_it_runs_is_traced() {
    if !python() {
        return;
    }
    let dir = scratch("shim");
    let shim = dir.join("python3.11");
    executable(&shim, &format!("#!/bin/sh\nexec {PYTHON} \"$@\"\n"));
    let fib = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tools/fib.py"),
    )
    .unwrap();
    // The interpreter is attached only once the command has mapped it,
    // which takes the kernel's uprobe registration (a grace period):
    // tens of milliseconds here, as long as CPython's whole start-up. The
    // script gives it that time before it counts.
    let script = dir.join("fib.py");
    executable(
        &script,
        &format!("#!/usr/bin/env python3.11\nimport time\ntime.sleep(0.5)\n{fib}"),
    );
    let command = format!("{} --no-nap", script.display());
    let note = format!(
        "`python3.11` is {}, a sh script that decides what it runs only when it runs (a shim or a wrapper)",
        shim.display()
    );

    let (stdout, stderr) = succeeds(sdt().env("PATH", path_with(&dir)).args([
        "run",
        "-c",
        &command,
        "-e",
        r#"usdt::python:function__return /str(arg1) == "fib"/ { @ = count(); }"#,
    ]));
    assert!(stdout.contains("@: 1973"), "{stdout}\n{stderr}");
    let note_line = stderr
        .lines()
        .find(|l| l.contains(&note))
        .unwrap_or_else(|| panic!("no note about the shim: {stderr}"));
    assert!(
        note_line.starts_with("sdt: note: usdt::python:function__return: "),
        "{note_line}"
    );
    assert!(!note_line.contains(PYTHON), "{note_line}");
    assert!(
        stderr.contains(&format!(
            "sdt: attached usdt:{PYTHON}:python:function__return"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("libpython"), "{stderr}");
    assert!(!stderr.contains("never attached"), "{stderr}");

    for lang in [&[][..], &["-l", "python"][..]] {
        let (stdout, stderr) = succeeds(
            sdt()
                .env("PATH", path_with(&dir))
                .args(["calls", "--json"])
                .args(lang)
                .args(["-c", &command]),
        );
        assert!(stderr.contains(&note), "{lang:?}: {stderr}");
        assert!(!stderr.contains("libpython"), "{lang:?}: {stderr}");
        assert!(
            stderr.contains("Tracing the command in the python it runs, once it maps it"),
            "{lang:?}: {stderr}"
        );
        let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        let fib = report["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["method"] == "fib")
            .unwrap_or_else(|| panic!("no fib in {report}"));
        assert_eq!(fib["calls"], 1973, "{lang:?}: {report}");
    }
}

/// The hits of counted probes are counted exactly, before any predicate
/// (a probe that fired is told from one whose predicate kept it quiet):
/// CPython's entry probe fired 3 times beside 100 returns (less than a
/// tenth as often), and 0 times beside 10, each said with the switch;
/// 20 entries beside 100 returns (a profile function written in Python
/// adds returns without entries), or entries alone, say nothing.
#[test]
fn switch_probes_are_counted_exactly_before_the_predicate() {
    if !sdt_testing::require_root() {
        return;
    }
    let built = C::new("tests/fixtures/hints/gated.c").try_build();
    if let Err(why) = &built {
        require(false, &format!("the fixture built ({why})"));
        return;
    }
    let gated = built.unwrap();
    let program = format!(
        "usdt:{0}:python:function__entry /arg2 > 1000/ {{ @e = count(); }} usdt:{0}:python:function__return /arg2 > 1000/ {{ @r = count(); }}",
        gated.display()
    );
    let hint = |entries: u32, returns: u32| {
        let (stdout, stderr) = succeeds(sdt().args([
            "run",
            "-c",
            &format!("{} {entries} {returns}", gated.display()),
            "-e",
            &program,
        ]));
        assert!(
            !stdout.contains('@'),
            "the predicates held nothing: {stdout}"
        );
        stderr
            .lines()
            .find(|l| l.starts_with("sdt: hint: "))
            .map(str::to_string)
    };
    let said = hint(3, 100).expect("a hint");
    assert!(
        said.starts_with("sdt: hint: python:function__entry fired 3 times, python:function__return 100 times: CPython 3.11 fires function__entry at every call only while a profile or trace function is set (sys.setprofile, sys.settrace)"),
        "{said}"
    );
    let said = hint(0, 10).expect("a hint");
    assert!(
        said.starts_with(
            "sdt: hint: python:function__entry fired 0 times, python:function__return 10 times: "
        ),
        "{said}"
    );
    assert_eq!(hint(20, 100), None);
    assert_eq!(hint(5, 0), None);
}

/// CPython 3.11 without a profile function: the entries of fib.py (a
/// handful, where start-up closes generators) beside its returns get the
/// switch named, on standard error and as a JSON record; with the
/// program's own profile function, or under `sdt calls`, which sets one
/// for the command, nothing is said.
#[test]
fn cpython_without_a_profile_function_is_told_its_switch() {
    if !python() {
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tools");
    let fib = format!("{PYTHON} {}/fib.py --no-nap", fixtures.display());
    let program = "usdt::python:function__entry { @e = count(); } usdt::python:function__return { @r = count(); }";
    let (_, stderr) = succeeds(sdt().args(["run", "-c", &fib, "-e", program]));
    let hint = stderr
        .lines()
        .find(|l| l.starts_with("sdt: hint: python:function__entry fired "))
        .unwrap_or_else(|| panic!("no hint: {stderr}"));
    assert!(hint.contains("sys.setprofile"), "{hint}");
    assert!(
        hint.contains("sdt calls and sdt flow switch it on"),
        "{hint}"
    );

    let (stdout, _) = succeeds(sdt().args(["run", "-f", "json", "-c", &fib, "-e", program]));
    let hints = json_hints(&stdout);
    assert_eq!(hints.len(), 1, "{stdout}");
    assert_eq!(hints[0]["kind"], "switch");
    assert_eq!(
        hints[0]["probes"],
        serde_json::json!(["python:function__entry"])
    );

    // The program sets its own profile function.
    let setprofile = format!("{PYTHON} {}/setprofile.py", fixtures.display());
    let (_, stderr) = succeeds(sdt().args(["run", "-c", &setprofile, "-e", program]));
    assert!(!stderr.contains("hint:"), "{stderr}");
    // sdt calls switches it on.
    let (_, stderr) = succeeds(sdt().args(["calls", "-c", &fib]));
    assert!(!stderr.contains("hint:"), "{stderr}");
}

/// OpenJDK 17 without -XX:+ExtendedDTraceProbes: method__entry (in the
/// libjvm the launcher loads, attached once mapped) fired 0 times, and
/// the flag is named, in sdt's voice and in bpftrace's (whose standard
/// output stays bpftrace's); with the flag, or under `sdt calls`, the
/// calls are there and nothing is said.
#[test]
fn a_jvm_without_extended_probes_is_told_the_flag() {
    if !sdt_testing::require_root()
        || !require(
            Path::new(&format!("{JAVA_HOME}/bin/javac")).exists(),
            "OpenJDK 17's javac",
        )
    {
        return;
    }
    let dir = scratch("java");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tools");
    let status = Command::new(format!("{JAVA_HOME}/bin/javac"))
        .arg("-d")
        .arg(&dir)
        .arg(fixtures.join("Fib.java"))
        .status()
        .unwrap();
    assert!(status.success(), "javac Fib.java");
    let java = |flags: &str| format!("{JAVA_HOME}/bin/java {flags} -cp {} Fib", dir.display());
    let program = "usdt::hotspot:method__entry { @ = count(); }";
    let flag = "-XX:+ExtendedDTraceProbes";

    let (stdout, stderr) = succeeds(sdt().args(["run", "-c", &java(""), "-e", program]));
    assert!(
        stderr.contains("sdt: note: usdt::hotspot:method__entry: ")
            && stderr.contains("/lib/server/libjvm.so, which java loads, has it"),
        "{stderr}"
    );
    let hint = format!("sdt: hint: hotspot:method__entry fired 0 times: the JVM fires its method, allocation and monitor probes only when started with {flag}");
    assert!(stderr.contains(&hint), "{stderr}");
    assert!(!stdout.contains("@:"), "{stdout}");

    let (stdout, stderr) = succeeds(sdt().args(["run", "-c", &java(flag), "-e", program]));
    assert!(!stderr.contains("hint:"), "{stderr}");
    let calls: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("@: "))
        .unwrap_or_else(|| panic!("no count: {stdout}"))
        .parse()
        .unwrap();
    assert!(calls >= 1973, "{calls} method entries");

    // As bpftrace: the hint on standard error in its words, its standard
    // output as it would be.
    let bin = scratch("java-bpftrace");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sdt"), bin.join("bpftrace")).unwrap();
    let out = Command::new(bin.join("bpftrace"))
        .args(["-c", &java(""), "-e", program])
        .output()
        .unwrap();
    assert_no_panic(&out);
    let (stdout, stderr) = texts(&out);
    assert!(
        stderr.contains("HINT: hotspot:method__entry fired 0 times: "),
        "{stderr}"
    );
    assert!(!stdout.contains("hint"), "{stdout}");
    assert!(stdout.starts_with("Attaching 0 probes...\n"), "{stdout}");

    let (_, stderr) = succeeds(sdt().args(["calls", "-c", &java("")]));
    assert!(!stderr.contains("hint:"), "{stderr}");
}

/// A running process whose python has no probes (Debian's python3.11
/// with its notes removed, standing in for a build without them): named
/// by its PID and program at the start, with where a python with probes
/// is, and said never attached at the end.
#[test]
fn a_process_without_the_probe_is_named() {
    if !python() || !require(have("objcopy"), "objcopy (binutils)") {
        return;
    }
    let dir = scratch("process");
    let stripped = dir.join("python3.11");
    let status = Command::new("objcopy")
        .args(["--remove-section", ".note.stapsdt", PYTHON])
        .arg(&stripped)
        .status()
        .unwrap();
    assert!(status.success(), "objcopy");
    let mut process = Command::new(&stripped)
        .args(["-c", "import time; time.sleep(1)"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = process.id().to_string();
    let out = sdt()
        .args([
            "run",
            "-p",
            &pid,
            "-e",
            "usdt::python:function__entry { @ = count(); }",
        ])
        .output()
        .unwrap();
    let _ = process.kill();
    let _ = process.wait();
    assert_no_panic(&out);
    let (_, stderr) = texts(&out);
    assert!(
        stderr.contains(&format!(
            "sdt: warning: usdt::python:function__entry: process {pid} ({}) maps no object with a probe python:function__entry; sdt attaches it if it maps one",
            stripped.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "sdt: hint: {} has no python probes: this python was built without USDT probes",
            stripped.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "usdt::python:function__entry was never attached: no object the process mapped has it"
        ),
        "{stderr}"
    );
}

/// PHP 8.2 without `USE_ZEND_DTRACE=1` and Ruby 3.1 without a TracePoint:
/// their call probes fired 0 times, and the switch is named; with the
/// switch (in the command, or set by `sdt calls`), fib's 1,973 calls are
/// counted and nothing is said.
#[test]
fn php_and_ruby_without_their_switches_are_told_them() {
    if !sdt_testing::require_root()
        || !require(Path::new("/usr/bin/php8.2").exists(), "php8.2-cli")
        || !require(have("ruby"), "ruby (Debian's package)")
    {
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tools");
    let fib_calls = |stdout: &str| -> u64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("@: "))
            .unwrap_or_else(|| panic!("no count: {stdout}"))
            .parse()
            .unwrap()
    };

    let php = format!("/usr/bin/php8.2 {}/fib.php", fixtures.display());
    let program = r#"usdt::php:function__entry /str(arg0) == "fib"/ { @ = count(); }"#;
    let (stdout, stderr) = succeeds(sdt().args(["run", "-c", &php, "-e", program]));
    assert!(
        stderr.contains("sdt: hint: php:function__entry fired 0 times: PHP fires its function, execute and compile probes only when started with USE_ZEND_DTRACE=1"),
        "{stderr}"
    );
    assert!(!stdout.contains("@:"), "{stdout}");
    let switched = format!("env USE_ZEND_DTRACE=1 {php}");
    let (stdout, stderr) = succeeds(sdt().args(["run", "-c", &switched, "-e", program]));
    assert_eq!(fib_calls(&stdout), 1973, "{stderr}");
    assert!(!stderr.contains("hint:"), "{stderr}");

    // Ruby's probes are in libruby, which ruby links: attached once
    // mapped, said so at the start.
    let ruby = format!("ruby --disable-gems {}/fib.rb", fixtures.display());
    let program = "usdt::ruby:method__entry { @ = count(); }";
    let (stdout, stderr) = succeeds(sdt().args(["run", "-c", &ruby, "-e", program]));
    assert!(
        stderr.contains("sdt: note: usdt::ruby:method__entry: ")
            && stderr.contains("libruby-3.1.so")
            && stderr.contains("has it; sdt attaches it once the command has mapped that file"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sdt: hint: ruby:method__entry fired 0 times: Ruby fires method__entry and method__return only while a TracePoint for :call and :return is enabled"),
        "{stderr}"
    );
    assert!(!stdout.contains("@:"), "{stdout}");
    let (_, stderr) = succeeds(sdt().args(["calls", "-c", &ruby]));
    assert!(!stderr.contains("hint:"), "{stderr}");
}
