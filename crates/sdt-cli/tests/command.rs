//! The `-c` command runs as if sdt were not there: it starts with the
//! signal mask, ignored signals, environment and descriptors sdt's parent
//! gave sdt; it sees SIGTERM from its own parent (the `nbdkit --run`
//! shape); sdt ends promptly on SIGINT or SIGTERM even when the command
//! ignores them, and a second one ends it at once; and what BEGIN prints
//! comes before anything the command prints.
//!
//! These attach real probes, so they need root. With `CI=true` a missing
//! privilege or tool fails the test; elsewhere the test prints a loud SKIP.

mod list_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;

struct Built {
    sigstate: PathBuf,
    server: PathBuf,
}

/// The fixtures of `tests/fixtures/command`, built once.
fn built() -> Option<Built> {
    if !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    let compile = |name: &str| {
        C::new(format!("tests/fixtures/command/{name}.c"))
            .flags(&["-O2", "-Wall"])
            .build()
    };
    Some(Built {
        sigstate: compile("sigstate"),
        server: compile("server"),
    })
}

fn setup() -> Option<Built> {
    if !sdt_testing::require_root() {
        return None;
    }
    built()
}

/// A process this test started, with its output going to files: a pipe
/// would stay open as long as any process the command left behind.
struct Started {
    child: std::process::Child,
    out_path: PathBuf,
    err_path: PathBuf,
    started: Instant,
}

fn start(mut command: Command) -> Started {
    let dir = tempfile_dir();
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let child = command
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start sdt");
    Started {
        child,
        out_path,
        err_path,
        started: Instant::now(),
    }
}

impl Started {
    fn pid(&self) -> rustix::process::Pid {
        rustix::process::Pid::from_child(&self.child)
    }

    /// Waits at most `limit`; a process still running then is killed (by
    /// its PID: it is this test's own) and the test fails.
    fn wait_at_most(mut self, limit: Duration, what: &str) -> (Output, Duration) {
        let read = |status, s: &Started| Output {
            status,
            stdout: std::fs::read(&s.out_path).unwrap_or_default(),
            stderr: std::fs::read(&s.err_path).unwrap_or_default(),
        };
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for sdt") {
                let out = read(status, &self);
                assert_no_panic(&out);
                return (out, self.started.elapsed());
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                let status = self.child.wait().expect("reap sdt");
                let out = read(status, &self);
                panic!(
                    "{what} still ran after {limit:?}; stdout: {} stderr: {}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A directory of this test process's own for output files.
fn tempfile_dir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "command-out-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `@name: value` and `@name[key]: value` lines of the text output.
fn maps(stdout: &str) -> BTreeMap<String, i64> {
    stdout
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(": ")?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// `SigBlk` and `SigIgn` of a `/proc/PID/status` printed in `text`.
fn signal_state(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| u64::from_str_radix(v.trim(), 16).expect("a hex set"))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    (field("SigBlk:"), field("SigIgn:"))
}

/// Blocked: SIGUSR1, SIGUSR2, SIGRTMIN+5. Ignored: SIGHUP, SIGQUIT,
/// SIGPIPE, SIGRTMIN+6. Neither set is what sdt would choose.
const BLOCKED: u64 = bit(10) | bit(12) | bit(39);
const IGNORED: u64 = bit(1) | bit(3) | bit(13) | bit(40);

/// Signal `n`'s bit in `/proc/PID/status`.
const fn bit(n: u32) -> u64 {
    1 << (n - 1)
}

/// Runs ARGS under a parent that blocks [`BLOCKED`] and ignores
/// [`IGNORED`]; returns the signal state that ARGS, or the `-c` command of
/// the sdt that ARGS starts, printed.
fn signal_state_under_sigstate(b: &Built, args: &[&str]) -> (u64, u64) {
    let out = Command::new(&b.sigstate)
        .arg(format!("{BLOCKED:x}"))
        .arg(format!("{IGNORED:x}"))
        .args(args)
        .output()
        .expect("run under sigstate");
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    signal_state(&stdout)
}

const SHOW_STATUS: &str = "grep -E 'SigBlk|SigIgn' /proc/self/status";

#[test]
fn the_command_gets_the_signal_state_sdt_was_given() {
    let Some(b) = setup() else { return };
    // What the command gets run by sdt's parent itself (and by bash; dash
    // clears the mask).
    let given =
        signal_state_under_sigstate(&b, &["grep", "-E", "SigBlk|SigIgn", "/proc/self/status"]);
    assert_eq!(given.0, BLOCKED, "{given:x?}");
    assert_eq!(given.1 & IGNORED, IGNORED, "{given:x?}");
    // Not sdt's own state: sdt blocks SIGINT, SIGTERM and SIGHUP for its
    // signalfd, and Rust's runtime ignores SIGPIPE.
    let sdt = env!("CARGO_BIN_EXE_sdt");
    let plain = signal_state_under_sigstate(&b, &[sdt, "run", "-e", "BEGIN {}", "-c", SHOW_STATUS]);
    assert_eq!(plain, given, "sdt run -c: {plain:x?}");
    let probe = format!("{}:srv:request", b.server.display());
    let traced = signal_state_under_sigstate(&b, &[sdt, "trace", "-c", SHOW_STATUS, &probe]);
    assert_eq!(traced, given, "sdt trace -c: {traced:x?}");
    let bash = format!("bash -c \"{SHOW_STATUS}\"");
    let tool = signal_state_under_sigstate(&b, &[sdt, "readline", "-c", &bash]);
    assert_eq!(tool, given, "sdt readline -c: {tool:x?}");

    // SIGPIPE not ignored by the parent is not ignored in the command,
    // whatever Rust's runtime did in sdt.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap - PIPE; exec {sdt} run -e 'BEGIN {{}}' -c \"{SHOW_STATUS}\""
        ))
        .output()
        .unwrap();
    let (_, ignored) = signal_state(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(ignored & bit(13), 0, "SIGPIPE: {ignored:x}");
}

#[test]
fn the_environment_and_descriptors_are_passed_on_untouched() {
    let Some(_) = setup() else { return };
    // No shell in between adds PWD, and fd 7, which the parent gave sdt,
    // is the command's fd 7.
    let out = Command::new("env")
        .args(["-i", "ALPHA=1", "BETA=two words", "PATH=/usr/bin:/bin"])
        .arg("bash")
        .arg("-c")
        .arg(format!(
            "exec 7</etc/hostname; exec {} run -q -e 'BEGIN {{}}' -c 'sh -c \"env; readlink /proc/self/fd/7\"'",
            env!("CARGO_BIN_EXE_sdt")
        ))
        .output()
        .unwrap();
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    // The inner sh adds its own PWD; bash's exec added what bash adds for
    // every command it runs. The variables given reach the command as they
    // were, and nothing sdt-specific is added.
    for expected in [
        "ALPHA=1",
        "BETA=two words",
        "PATH=/usr/bin:/bin",
        "/etc/hostname",
    ] {
        assert!(lines.contains(&expected), "{expected} in {stdout}");
    }
    assert!(
        !stdout.contains("SDT") && !stdout.contains("sdt-hold"),
        "nothing of sdt's own: {stdout}"
    );

    // Without any shell: the command's environment is sdt's, exactly.
    let out = Command::new("env")
        .args(["-i", "ALPHA=1", "PATH=/usr/bin:/bin"])
        .arg(env!("CARGO_BIN_EXE_sdt"))
        .args(["run", "-q", "-e", "BEGIN {}", "-c", "env"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let env: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(env, ["ALPHA=1", "PATH=/usr/bin:/bin"], "{stdout}");
}

#[test]
fn a_server_forked_by_the_command_ends_on_its_parents_sigterm() {
    let Some(b) = setup() else { return };
    // nbdkit --run's shape: the parent serves 50 requests through a forked
    // server, then SIGTERMs it. With SIGTERM blocked the server would never
    // end, nor would sdt.
    let server = b.server.display().to_string();
    let mut command = sdt();
    command
        .args(["run", "-c", &format!("{server} 50"), "-e"])
        .arg("usdt::srv:request { @requests = count(); } usdt::srv:shutdown { @shutdowns = count(); @handled = max(arg0); }");
    let (out, _) = start(command).wait_at_most(Duration::from_secs(30), "sdt run -c 'server 50'");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the server's clean exit: {stdout}"
    );
    let maps = maps(&stdout);
    assert_eq!(maps.get("@requests"), Some(&50), "{stdout}");
    assert_eq!(maps.get("@shutdowns"), Some(&1), "{stdout}");
    assert_eq!(maps.get("@handled"), Some(&50), "{stdout}");
}

#[test]
fn nbdkit_run_ends_under_sdt() {
    let Some(_) = setup() else { return };
    if !require(
        have("nbdkit") && have("nbdinfo"),
        "nbdkit and nbdinfo (Debian's nbdkit, libnbd-bin)",
    ) {
        return;
    }
    // The workflow the seed documents give, on Debian's nbdkit: the server
    // serves one connection to nbdinfo, then --run's parent SIGTERMs it.
    let mut command = sdt();
    command
        .args([
            "run",
            "-c",
            "nbdkit memory 1G --run 'nbdinfo --size \"$uri\"'",
            "-e",
        ])
        .arg("uprobe:libc:accept4 { @accepted[comm] = count(); }");
    let (out, _) = start(command).wait_at_most(Duration::from_secs(30), "nbdkit --run under sdt");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("1073741824"), "nbdinfo's size: {stdout}");
    assert_eq!(maps(&stdout).get("@accepted[nbdkit]"), Some(&1), "{stdout}");
}

#[test]
fn sigterm_ends_sdt_promptly_when_the_command_ignores_it() {
    let Some(b) = setup() else { return };
    if !require(have("timeout"), "timeout (coreutils)") {
        return;
    }
    let server = b.server.display().to_string();
    let mut command = Command::new("timeout");
    command
        .args(["-s", "TERM", "2", env!("CARGO_BIN_EXE_sdt"), "run", "-c"])
        .arg(format!("{server} stubborn"))
        .arg("-e")
        .arg("usdt::srv:tick { @ticks[arg0] = count(); } END { printf(\"END ran\\n\"); }");
    let (out, took) = start(command).wait_at_most(Duration::from_secs(20), "timeout 2 sdt run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(out.status.code(), Some(124), "timeout's own status");
    assert!(stdout.contains("END ran"), "{stdout}");
    // The map is printed, with the command's PID as its key: it ticked
    // about 200 times in 2 s, and it is gone now.
    let ticks: Vec<(String, i64)> = maps(&stdout)
        .into_iter()
        .filter(|(k, _)| k.starts_with("@ticks["))
        .collect();
    assert_eq!(ticks.len(), 1, "{stdout}");
    assert!(ticks[0].1 > 20, "{stdout}");
    let pid = ticks[0]
        .0
        .trim_start_matches("@ticks[")
        .trim_end_matches(']');
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    assert!(
        status.is_empty() || status.contains("State:\tZ"),
        "the stubborn command was killed: {status}"
    );
}

#[test]
fn exit_in_the_script_ends_a_command_that_ignores_sigterm() {
    let Some(b) = setup() else { return };
    let server = b.server.display().to_string();
    let mut command = sdt();
    command
        .args(["run", "-c", &format!("{server} stubborn"), "-e"])
        .arg("usdt::srv:tick { @ticks = count(); } interval:ms:300 { exit(); }");
    let (out, took) = start(command).wait_at_most(Duration::from_secs(20), "sdt run with exit()");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // SIGTERM is ignored, so sdt kills it: the status says SIGKILL.
    assert_eq!(out.status.code(), Some(128 + 9));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        maps(&stdout).get("@ticks").is_some_and(|&n| n > 5),
        "{stdout}"
    );
}

#[test]
fn a_second_signal_ends_sdt_at_once() {
    let Some(b) = setup() else { return };
    // END takes 20 s (system() waits for its command); the first SIGINT
    // starts it, the second must end sdt long before.
    let server = b.server.display().to_string();
    let mut command = sdt();
    command
        .args(["run", "--unsafe", "-c", &format!("{server} stubborn"), "-e"])
        .arg("usdt::srv:tick { @ticks = count(); } END { system(\"sleep 20\"); }");
    let running = start(command);
    let pid = running.pid();
    std::thread::sleep(Duration::from_millis(700));
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
    std::thread::sleep(Duration::from_millis(500));
    let second = Instant::now();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
    let (out, _) = running.wait_at_most(Duration::from_secs(15), "sdt after two SIGINTs");
    assert!(
        second.elapsed() < Duration::from_secs(2),
        "took {:?}",
        second.elapsed()
    );
    assert_eq!(out.status.code(), Some(128 + 2), "ended as by SIGINT");
}

#[test]
fn what_begin_prints_comes_before_the_commands_output() {
    let Some(_) = setup() else { return };
    for args in [
        &[
            "run",
            "-e",
            "BEGIN { printf(\"begin\\n\"); }",
            "-c",
            "echo command",
        ][..],
        &[
            "bpftrace",
            "-e",
            "BEGIN { printf(\"begin\\n\"); }",
            "-c",
            "echo command",
        ][..],
    ] {
        // Standard output is a pipe, so sdt's output is fully buffered.
        let out = sdt().args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout
            .lines()
            .filter(|l| ["begin", "command"].contains(l))
            .collect();
        assert_eq!(lines, ["begin", "command"], "{args:?}: {stdout}");
    }
}
