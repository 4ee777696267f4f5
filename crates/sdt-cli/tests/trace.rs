//! `sdt trace` on real programs: C fixtures built with `<sys/sdt.h>`, and
//! Debian's CPython 3.11.
//!
//! These tests attach real uprobes, so they need root (or CAP_BPF and
//! CAP_PERFMON). With `CI=true` a missing privilege or tool fails the test;
//! elsewhere the test prints a loud SKIP.

mod list_common;
mod trace_common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use list_common::{assert_no_panic, have, require, sdt};
use rustix::process::Signal;
use serde_json::Value;
use trace_common::{fixtures, setup, Fixtures};

/// Runs `sdt trace --json -o FILE ARGS` to completion; returns events,
/// summary, and sdt's own output (with `-c`, the command's output is on
/// standard output, while the events are in FILE).
fn trace_json(name: &str, args: &[&str]) -> (Vec<Value>, Value, Output) {
    trace_json_as(sdt(), name, args)
}

/// [`trace_json`] with sdt's command set up by the caller (its
/// environment, its directory).
fn trace_json_as(mut sdt: Command, name: &str, args: &[&str]) -> (Vec<Value>, Value, Output) {
    let events_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.ndjson"));
    let out = sdt
        .args(["trace", "--json", "-o"])
        .arg(&events_file)
        .args(args)
        .output()
        .expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "sdt trace {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (events, summary) = parse_json_lines(&std::fs::read(&events_file).unwrap());
    (events, summary, out)
}

fn parse_json_lines(bytes: &[u8]) -> (Vec<Value>, Value) {
    let mut lines: Vec<Value> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("each line is JSON"))
        .collect();
    let summary = lines.pop().expect("a summary line");
    (lines, summary["summary"].clone())
}

fn args_of(events: &[Value], probe: &str) -> Vec<Vec<Value>> {
    events
        .iter()
        .filter(|e| e["name"] == probe)
        .map(|e| e["args"].as_array().unwrap().clone())
        .collect()
}

fn ints(values: &[i128]) -> Vec<Value> {
    values
        .iter()
        .map(|&v| serde_json::from_str(&v.to_string()).unwrap())
        .collect()
}

#[test]
fn every_x86_64_argument_form_reads_back_exactly() {
    let Some(f) = setup() else { return };
    // The kernel's best mechanism, and the ones older kernels fall back to
    // (perf-ioctl has no cookies, so each site gets a program of its own).
    for mechanism in ["uprobe-multi", "perf-link", "perf-ioctl"] {
        argument_forms(&f, mechanism);
    }
}

fn argument_forms(f: &Fixtures, mechanism: &str) {
    let command = format!("{} 3", f.argforms.display());
    let (events, summary, out) = trace_json(
        &format!("argforms-{mechanism}"),
        &[
            "--attach-with",
            mechanism,
            "--dump",
            "-c",
            &command,
            "fixture:*",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&mechanism.replace('-', "_")), "{stderr}");
    assert!(
        stderr.contains("call bpf_ringbuf_output"),
        "--dump shows the program: {stderr}"
    );

    let expect = |probe: &str, values: &[i128]| {
        let got = args_of(&events, probe);
        assert_eq!(got.len(), 3, "{probe} fired 3 times ({mechanism})");
        for args in got {
            assert_eq!(
                args,
                ints(values),
                "arguments of fixture:{probe} ({mechanism})"
            );
        }
    };
    // Registers and every sub-register width, with garbage in the upper bits.
    expect(
        "regs",
        &[
            -5,
            39612,
            -2,
            -16,
            3735928559,
            -1234567890123,
            -7,
            127,
            -1,
            9223372036854775808,
            -32768,
            1,
        ],
    );
    // Stack memory: displacements, sizes, signed and unsigned views of one byte.
    expect("memory", &[-42, 4886718345, -3, 65534, -2, -128, 128, -42]);
    // base + index * scale + displacement, with and without each part.
    expect("scaled", &[300, -500, 300, 100, -500]);
    expect("constants", &[0, -9, 5, -1234567890, 65535]);

    // One probe, three sites, each with its argument somewhere else.
    let mut multi = args_of(&events, "multi");
    multi.sort_by_key(|a| a[1].as_i64());
    assert_eq!(multi.len(), 9);
    for (n, args) in multi.iter().enumerate() {
        let site = (n / 3 + 1) as i128;
        assert_eq!(*args, ints(&[-site, site]), "site {site} of fixture:multi");
    }

    assert_eq!(summary["events"], 21);
    assert_eq!(summary["lost"], 0);
    assert_eq!(summary["sites"], 7);
    // One global order with monotonic timestamps.
    let times: Vec<u64> = events
        .iter()
        .map(|e| e["time_ns"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "timestamps go back");
}

#[test]
fn unsafe_sites_are_refused_and_unreadable_arguments_shown_as_null() {
    let Some(f) = setup() else { return };
    let command = f.badsites.display().to_string();
    let (events, summary, out) = trace_json("badsites", &["-c", &command, "bad:*"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`8@%xmm0`") && stderr.contains("vector register"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`1@%ah`") && stderr.contains("high-byte"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad:notnop") && stderr.contains("not a no-op"),
        "{stderr}"
    );
    // The sites whose argument cannot be read are traced all the same.
    assert_eq!(
        args_of(&events, "mixed"),
        vec![ints(&[-7]), vec![Value::Null], vec![Value::Null]]
    );
    assert_eq!(summary["sites"], 3);
}

/// Debian's CPython 3.11, when it is here and sdt may trace (after a
/// SKIP, or a failure in CI, when not).
fn python311() -> Option<&'static Path> {
    let python = Path::new("/usr/bin/python3.11");
    let here = require(python.exists(), "Debian's /usr/bin/python3.11");
    (here && sdt_testing::require_root()).then_some(python)
}

#[test]
fn cpython_function_entry_counts_every_call() {
    let Some(python) = python311() else {
        return;
    };
    fn calls(n: u64) -> u64 {
        if n < 2 {
            1
        } else {
            1 + calls(n - 1) + calls(n - 2)
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/trace/fib.py");
    let command = format!("{} {} 17", python.display(), script.display());
    let (events, summary, out) = trace_json(
        "cpython",
        &[
            "-s",
            "0",
            "-s",
            "1",
            "-c",
            &command,
            "python:function__entry",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| *l == "1597").count(),
        1,
        "fib(17) printed"
    );
    let fib: Vec<&Value> = events.iter().filter(|e| e["args"][1] == "fib").collect();
    assert_eq!(fib.len() as u64, calls(17), "one event per call of fib");
    for event in fib {
        assert!(
            event["args"][0].as_str().unwrap().ends_with("fib.py"),
            "{event}"
        );
        assert_eq!(event["comm"], "python3.11");
    }
    assert_eq!(summary["lost"], 0);
}

/// A `-c` command that is a script runs as the kernel runs it: named by
/// its path or found in `PATH`, it runs the interpreter of its `#!` line
/// (here through `env`), and a probe that names no file is looked for in
/// that interpreter. Both ways, one event per call of fib: fib(15) makes
/// 1,973 calls.
#[test]
fn a_script_command_is_traced_in_its_interpreter() {
    if python311().is_none() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-script");
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/trace/fib.py");
    let script = dir.join("fib-script");
    let text = std::fs::read_to_string(fixture).unwrap();
    std::fs::write(&script, format!("#!/usr/bin/env python3.11\n{text}")).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for command in ["./fib-script 15", "fib-script 15"] {
        let mut sdt = sdt();
        sdt.env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .current_dir(&dir);
        let args = [
            "-s",
            "0",
            "-s",
            "1",
            "-c",
            command,
            "python:function__entry",
        ];
        let (events, summary, _) = trace_json_as(sdt, "trace-script", &args);
        let fib = events.iter().filter(|e| e["args"][1] == "fib").count();
        assert_eq!(fib, 1973, "{command}: one event per call of fib");
        assert!(
            events.iter().all(|e| e["path"] == "/usr/bin/python3.11"),
            "{command}: the interpreter's probes"
        );
        assert_eq!(summary["lost"], 0);
    }
}

/// A running `semaprog`, whose every line says "SEMAPHORE FIRED INDEX".
struct Ticker {
    child: Child,
    lines: BufReader<ChildStdout>,
}

impl Ticker {
    fn start(f: &Fixtures, iterations: u32) -> Ticker {
        let mut child = Command::new(&f.semaprog)
            .args([iterations.to_string().as_str(), "5"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start semaprog");
        let lines = BufReader::new(child.stdout.take().unwrap());
        Ticker { child, lines }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads lines until one has the semaphore at `raised` (non-zero or zero).
    fn wait_for_semaphore(&mut self, raised: bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut line = String::new();
        while Instant::now() < deadline {
            line.clear();
            if self.lines.read_line(&mut line).unwrap() == 0 {
                panic!("semaprog ended");
            }
            let semaphore: u32 = line.split_whitespace().next().unwrap().parse().unwrap();
            if (semaphore != 0) == raised {
                return;
            }
        }
        panic!(
            "semaphore never became {}",
            if raised { "raised" } else { "zero" }
        );
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_sdt(args: &[&str]) -> Child {
    sdt()
        .arg("trace")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sdt")
}

/// Waits until sdt says its probes are live.
fn wait_until_tracing(sdt: &mut Child) -> BufReader<std::process::ChildStderr> {
    let mut stderr = BufReader::new(sdt.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "sdt ended before tracing"
        );
        if line.contains("tracing") {
            return stderr;
        }
    }
}

fn signal(child: &Child, signal: Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_child(child), signal).unwrap();
}

fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sdt did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn shared_library_semaphore_is_raised_and_lowered_however_sdt_exits() {
    let Some(f) = setup() else { return };
    for (name, sig) in [
        ("SIGINT", Signal::INT),
        ("SIGTERM", Signal::TERM),
        ("SIGKILL", Signal::KILL),
    ] {
        let mut ticker = Ticker::start(&f, 0);
        ticker.wait_for_semaphore(false);
        let pid = ticker.pid().to_string();
        // No target: with -p, every object the process maps is searched.
        let mut tracer = spawn_sdt(&["--json", "-p", &pid, "fixture_lib:tick"]);
        let _stderr = wait_until_tracing(&mut tracer);
        ticker.wait_for_semaphore(true);
        signal(&tracer, sig);
        let status = wait_with_timeout(&mut tracer, Duration::from_secs(10));
        ticker.wait_for_semaphore(false);
        if sig != Signal::KILL {
            assert!(status.success(), "{name}: sdt exited with {status:?}");
            let mut out = Vec::new();
            tracer.stdout.take().unwrap().read_to_end(&mut out).unwrap();
            let (events, summary) = parse_json_lines(&out);
            assert!(!events.is_empty(), "{name}: no events");
            assert!(
                events
                    .iter()
                    .all(|e| e["pid"].as_u64() == Some(u64::from(ticker.pid()))),
                "{name}: foreign pid"
            );
            let indices: Vec<i64> = events
                .iter()
                .map(|e| e["args"][0].as_i64().unwrap())
                .collect();
            assert!(
                indices.windows(2).all(|w| w[1] == w[0] + 1),
                "{name}: missed ticks {indices:?}"
            );
            assert_eq!(summary["lost"], 0);
        }
    }
}

#[test]
fn tracing_by_path_with_a_pid_ends_when_the_process_ends() {
    let Some(f) = setup() else { return };
    let mut ticker = Ticker::start(&f, 0);
    let pid = ticker.pid().to_string();
    let probe = format!("{}:fixture_lib:tick", f.libsema.display());
    let mut tracer = spawn_sdt(&["-p", &pid, &probe]);
    let _stderr = wait_until_tracing(&mut tracer);
    ticker.wait_for_semaphore(true);
    drop(ticker);
    let status = wait_with_timeout(&mut tracer, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[test]
fn without_a_pid_processes_started_later_are_traced() {
    let Some(f) = setup() else { return };
    let probe = format!("{}:fixture_lib:tick", f.libsema.display());
    let mut tracer = spawn_sdt(&["--json", &probe]);
    let _stderr = wait_until_tracing(&mut tracer);
    let later = Command::new(&f.semaprog)
        .args(["20", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start semaprog");
    let later_pid = u64::from(later.id());
    let mut later = later.wait_with_output().unwrap();
    assert!(later.status.success());
    signal(&tracer, Signal::INT);
    assert!(wait_with_timeout(&mut tracer, Duration::from_secs(10)).success());
    let mut out = Vec::new();
    tracer.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let (events, _) = parse_json_lines(&out);
    // Other tests run semaprog at the same time; system-wide sees them too.
    let ticks: Vec<i64> = events
        .iter()
        .filter(|e| e["pid"].as_u64() == Some(later_pid))
        .map(|e| e["args"][0].as_i64().unwrap())
        .collect();
    assert_eq!(
        ticks,
        (0..20).collect::<Vec<_>>(),
        "every tick of the later process"
    );
    // The program saw its semaphore raised on every call.
    later.stdout.retain(|&b| b != b'\r');
    let text = String::from_utf8(later.stdout).unwrap();
    assert!(
        text.lines()
            .all(|l| l.split_whitespace().nth(1) == Some("1")),
        "{text}"
    );
}

#[test]
fn command_exit_status_is_passed_through() {
    let Some(f) = setup() else { return };
    let command = format!("{} 1 7", f.argforms.display());
    let out = sdt()
        .args(["trace", "-c", &command, "fixture:regs"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

/// Runs sdt, expecting a one-line error.
fn expect_error(args: &[&str], needle: &str) {
    let out = sdt().args(args).output().expect("run sdt");
    assert_no_panic(&out);
    assert!(!out.status.success(), "{args:?} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(needle),
        "{args:?}: expected {needle:?} in {stderr}"
    );
}

#[test]
fn bad_requests_get_clear_errors() {
    let Some(f) = fixtures() else { return };
    let argforms = f.argforms.display();
    expect_error(
        &["trace", &format!("{argforms}:fixture:regz")],
        "did you mean `fixture:regs`",
    );
    expect_error(&["trace", "-p", "999999999", "fixture:regs"], "999999999");
    expect_error(&["trace", "fixture:regs"], "say which file");
    expect_error(&["trace", "/nonexistent/file:p:n"], "/nonexistent/file");
    expect_error(&["trace", &format!("{argforms}:justone")], "invalid probe");
    expect_error(
        &[
            "trace",
            "--buffer-size",
            "3M",
            &format!("{argforms}:fixture:regs"),
        ],
        "power of two",
    );
}

#[test]
fn without_privileges_the_error_names_the_capabilities() {
    let Some(f) = setup() else { return };
    if !require(have("setpriv"), "setpriv (util-linux)") {
        return;
    }
    // The unprivileged user must be able to reach both files, whatever the
    // permissions of the checkout's directories: copy them somewhere open.
    use std::os::unix::fs::PermissionsExt;
    let open = std::env::temp_dir().join(format!("sdt-unprivileged-{}", std::process::id()));
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (sdt_copy, target) = (open.join("sdt"), open.join("argforms"));
    std::fs::copy(env!("CARGO_BIN_EXE_sdt"), &sdt_copy).unwrap();
    std::fs::copy(&f.argforms, &target).unwrap();
    // A copy just written can still be open in a child that another test
    // thread forked meanwhile, until that child calls exec ("Text file busy").
    let mut attempts = 0;
    let out = loop {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ])
            .arg(&sdt_copy)
            .args(["trace", &format!("{}:fixture:regs", target.display())])
            .output()
            .unwrap();
        attempts += 1;
        if attempts == 100 || !String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::fs::remove_dir_all(&open).unwrap();
    assert_no_panic(&out);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"),
        "{stderr}"
    );
}

/// Builds the workspace's `sdt-example` (probes from the `sdt` crate) in a
/// target directory of its own, so that it does not wait on the lock of the
/// build that runs this test.
fn sdt_example() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdt-example-target");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .args([
                    "build",
                    "--quiet",
                    "--release",
                    "-p",
                    "sdt-example",
                    "--target-dir",
                ])
                .arg(&target)
                .status()
                .expect("run cargo");
            assert!(status.success(), "building sdt-example failed");
            target.join("release/sdt-example")
        })
        .clone()
}

#[test]
fn rust_probes_from_the_sdt_crate_read_back() {
    if !sdt_testing::require_root() {
        return;
    }
    let example = sdt_example();
    let command = format!("{} --orders 20 --interval-ms 1", example.display());
    let (events, summary, _) = trace_json(
        "sdt-example",
        &[
            "-s",
            "1:2",
            "-c",
            &command,
            "shop:order_received",
            "shop:order_declined",
            "shop:inventory",
        ],
    );
    let customers = ["ada", "grace", "barbara", "margaret"];
    let received = args_of(&events, "order_received");
    assert_eq!(received.len(), 20);
    for (id, args) in received.iter().enumerate() {
        let id = id as i64;
        // id, then the &str as pointer and length (read as one string), then cents.
        assert_eq!(args[0], id);
        assert_eq!(args[1], customers[id as usize % 4]);
        assert_eq!(args[2], customers[id as usize % 4].len());
        assert_eq!(args[3], 250 + (id % 7) * 125);
    }
    // A negative i32 stays negative.
    assert_eq!(
        args_of(&events, "order_declined"),
        vec![ints(&[9, -1]), ints(&[19, -2])]
    );
    // `inventory` is built only while its semaphore is raised: the kernel
    // raised it, so every charged order reported its stock.
    assert_eq!(args_of(&events, "inventory").len(), 18);
    assert_eq!(summary["lost"], 0);
}

/// docs/json.md's `sdt trace --json` example has exactly the fields sdt emits.
#[test]
fn schema_in_the_docs_matches_the_output() {
    let Some(f) = setup() else { return };
    let doc = include_str!("../../../docs/json.md");
    let section = &doc[doc
        .find("## `sdt trace --json`")
        .expect("docs/json.md documents sdt trace --json")..];
    let block = section
        .split("```json\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let (documented, documented_summary) = parse_json_lines(block.as_bytes());
    let command = format!("{} 1", f.argforms.display());
    let (events, summary, _) = trace_json("schema", &["-c", &command, "fixture:regs"]);
    let keys = |v: &Value| {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&documented[0]), keys(&events[0]));
    assert_eq!(keys(&documented_summary), keys(&summary));
}
