//! SPDK's way of using bpftrace, on sdt.
//!
//! SPDK ships `scripts/bpftrace.sh`: it asks `bpftrace -l -p PID` where each
//! probe lives, puts that path and the PID into a script, appends a BEGIN
//! block that fills maps with the names of state enums, and runs
//! `bpftrace -p PID -e PROGRAM [-o FILE]`. Its `scripts/bpf/*.bt` declare
//! C structs, cast probe arguments to them, print strings, call `usym`,
//! filter tracepoints by PID and so on.
//!
//! These tests run a wrapper that works the same way and scripts that use
//! the same constructs (`tests/fixtures/spdk`, sdt's own text) against
//! `spdk_tgt`, a C fixture that fires SPDK's probes with SPDK's argument
//! shapes and logs what it did, with a directory holding `bpftrace` (a
//! symlink to sdt) first in `PATH`. What each script prints is compared,
//! line by line, with what the script prints for what the log says.
//!
//! The fixture waits for a line on its standard input before it works, and
//! the tests send it only once the tracer is ready: when every probe site
//! the script uses holds a breakpoint in the fixture's memory (BEGIN has
//! run by then: sdt runs it before it attaches), or, for a script of
//! tracepoints only, when its first `interval` has printed.
//!
//! They attach real probes: root is needed. With `CI=true` a missing
//! privilege or tool fails them; elsewhere they print a loud SKIP.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;

use sdt_testing::fixture::C;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sdt_testing::{have, readelf_notes, require, require_root};

/// Longest wait for anything: the tests take about a second each.
const TIMEOUT: Duration = Duration::from_secs(15);

/// The state names, in SPDK's order; the wrapper reads them from the
/// fixture's header, this test from here.
const TARGET_STATES: [&str; 12] = [
    "INIT_NONE",
    "INIT_CREATE_TARGET",
    "INIT_CREATE_POLL_GROUPS",
    "INIT_START_SUBSYSTEMS",
    "RUNNING",
    "FINI_STOP_SUBSYSTEMS",
    "FINI_STOP_LISTEN",
    "FINI_DESTROY_SUBSYSTEMS",
    "FINI_DESTROY_POLL_GROUPS",
    "FINI_DESTROY_TARGET",
    "STOPPED",
    "ERROR",
];
const SUBSYSTEM_STATES: [&str; 8] = [
    "INACTIVE",
    "ACTIVATING",
    "ACTIVE",
    "PAUSING",
    "PAUSED",
    "RESUMING",
    "DEACTIVATING",
    "NUM_STATES",
];

/// The probes nvmf.bt uses: every one SPDK's scripts/bpf/nvmf.bt uses,
/// and nvmf_transport_poll_group_create.
const NVMF_PROBES: [&str; 32] = [
    "nvmf_tgt_state",
    "nvmf_tgt_add_transport",
    "nvmf_create_poll_group",
    "nvmf_destroy_poll_group",
    "nvmf_subsystem_create",
    "nvmf_subsystem_destroy",
    "nvmf_subsystem_change_state",
    "nvmf_subsystem_change_state_done",
    "nvmf_pg_change_state",
    "nvmf_pg_change_state_done",
    "nvmf_subsystem_add_host",
    "nvmf_subsystem_add_listener",
    "nvmf_subsystem_add_ns",
    "nvmf_ctrlr_create",
    "nvmf_subsystem_add_ctrlr",
    "nvmf_ctrlr_add_qpair",
    "nvmf_poll_group_add_qpair",
    "nvmf_ctrlr_add_io_qpair",
    "nvmf_transport_poll_group_create",
    "nvmf_destroy_poll_group_qpairs",
    "nvmf_poll_group_add_subsystem",
    "nvmf_poll_group_remove_subsystem",
    "nvmf_transport_poll_group_add",
    "nvmf_transport_poll_group_remove",
    "nvmf_qpair_disconnect",
    "nvmf_poll_group_drain_qpair",
    "nvmf_poll_group_remove_qpair",
    "nvmf_transport_qpair_fini",
    "nvmf_subsystem_remove_ctrlr",
    "nvmf_ctrlr_destruct",
    "nvmf_subsystem_remove_listener",
    "nvmf_subsystem_remove_host",
];

/// The interrupts intr-wakeups.bt leaves out, by name.
const FRAMEWORK_INTERRUPTS: [&str; 4] = [
    "thread_process_interrupts",
    "thread_interrupt_msg_process",
    "event_queue_run_batch",
    "interrupt_timerfd_process",
];

struct Built {
    /// `tests/fixtures/spdk`: the wrapper and the scripts.
    src: PathBuf,
    /// The fixture.
    spdk_tgt: PathBuf,
    /// Holds `bpftrace`, a symlink to sdt.
    bin: PathBuf,
}

/// Builds the fixture and the `bpftrace` link once per test binary.
fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Option<Built>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !require_root()
                || !require(have("cc"), "a C compiler (cc)")
                || !require(have("readelf"), "readelf (binutils)")
                || !require(have("bash"), "bash")
            {
                return None;
            }
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/spdk");
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("spdk");
            let bin = dir.join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            let spdk_tgt = C::new(src.join("spdk_tgt.c"))
                .flags(&["-O2", "-g", "-fPIE", "-pie", "-pthread", "-Wall"])
                .dir(&dir)
                .build();
            let link = bin.join("bpftrace");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sdt"), &link).unwrap();
            Some(Built { src, spdk_tgt, bin })
        })
        .as_ref()
}

/// A running `spdk_tgt`.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pid: i32,
    log: PathBuf,
}

impl Target {
    /// Starts the fixture and waits until its reactors sleep.
    fn start(b: &Built, name: &str) -> Target {
        let log = b.spdk_tgt.with_file_name(format!("{name}.log"));
        let mut child = Command::new(&b.spdk_tgt)
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start spdk_tgt");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut target = Target {
            pid: child.id() as i32,
            child,
            stdin,
            stdout,
            log,
        };
        target.expect_line("ready");
        target
    }

    fn expect_line(&mut self, want: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), want, "spdk_tgt's standard output");
    }

    /// Lets it do its work.
    fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Lets it exit once its work is done.
    fn release(&mut self) {
        self.stdin = None;
    }

    /// Waits for it to end; returns its log.
    fn finish(mut self) -> Vec<String> {
        self.release();
        let status = wait_for(&mut self.child, "spdk_tgt");
        assert!(status.success(), "spdk_tgt: {status}");
        let log = std::fs::read_to_string(&self.log).unwrap();
        log.lines().map(str::to_string).collect()
    }

    /// The address where the fixture's executable is loaded.
    fn load_base(&self, exe: &Path) -> u64 {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid)).unwrap();
        maps.lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.len() >= 6
                    && Path::new(fields[5]) == exe
                    && u64::from_str_radix(fields[2], 16) == Ok(0))
                .then(|| u64::from_str_radix(fields[0].split('-').next()?, 16).ok())
                .flatten()
            })
            .expect("the executable's first mapping")
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not end within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The wrapper running a script against a target, in its own process
/// group, as a terminal would run it.
struct Wrapper {
    child: Child,
    lines: Receiver<String>,
    /// Standard output so far.
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

/// What the wrapper printed.
struct Ran {
    status: ExitStatus,
    stdout: Vec<String>,
    /// The generated program (the wrapper echoes it), then sdt's messages.
    stderr: String,
}

impl Wrapper {
    fn start(
        b: &Built,
        target: &Target,
        scripts: &[&str],
        params: &[&str],
        outfile: Option<&Path>,
    ) -> Wrapper {
        let path = format!(
            "{}:{}",
            b.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new("bash");
        command
            .arg(b.src.join("bpftrace.sh"))
            .arg(target.pid.to_string())
            .args(scripts.iter().map(|s| b.src.join(s)))
            .env("PATH", path)
            .env("ECHO_PROGRAM", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if !params.is_empty() {
            command.arg("--").args(params);
        }
        if let Some(file) = outfile {
            command.env("BPF_OUTFILE", file);
        }
        let mut child = command.spawn().expect("run bpftrace.sh");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
            text
        });
        Wrapper {
            child,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Fails the test with what the wrapper said if it has ended.
    fn check_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let stderr = self.stderr.take().unwrap().join().unwrap();
            panic!(
                "bpftrace.sh ended early ({status}):\nstdout: {:?}\nstderr:\n{stderr}",
                self.seen
            );
        }
    }

    /// Waits for a line of standard output that `found` accepts.
    fn wait_for_line(&mut self, found: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        while !self.seen.iter().any(|l| found(l)) {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => self.check_running(),
                Err(RecvTimeoutError::Disconnected) => {
                    self.check_running();
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            assert!(
                Instant::now() < deadline,
                "no such line within {TIMEOUT:?}: {:?}",
                self.seen
            );
        }
    }

    /// Waits until each address of the target's memory holds a breakpoint
    /// (int3): every probe there is attached, and BEGIN has run.
    fn wait_armed(&mut self, target: &Target, addresses: &[u64]) {
        assert!(!addresses.is_empty());
        let mem = std::fs::File::open(format!("/proc/{}/mem", target.pid)).unwrap();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let armed = addresses.iter().all(|&a| {
                let mut byte = [0u8];
                mem.read_exact_at(&mut byte, a).is_ok() && byte[0] == 0xcc
            });
            if armed {
                return;
            }
            self.check_running();
            assert!(
                Instant::now() < deadline,
                "probes not attached within {TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGINT to its process group, as Ctrl-C does.
    fn interrupt(&self) {
        let group = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process_group(group, rustix::process::Signal::INT).unwrap();
    }

    fn finish(mut self) -> Ran {
        let status = wait_for(&mut self.child, "bpftrace.sh");
        let stderr = self.stderr.take().unwrap().join().unwrap();
        let mut stdout = std::mem::take(&mut self.seen);
        stdout.extend(self.lines.iter());
        Ran {
            status,
            stdout,
            stderr,
        }
    }
}

/// Where the sites of `spdk:NAME` probes are in the target's memory.
fn usdt_sites(target: &Target, exe: &Path, names: &[&str]) -> Vec<u64> {
    let base = target.load_base(exe);
    let sites: Vec<u64> = readelf_notes(exe)
        .into_iter()
        .filter(|n| n.provider == "spdk" && names.contains(&n.name.as_str()))
        .map(|n| base + n.pc)
        .collect();
    assert!(sites.len() >= names.len(), "every probe has a site");
    sites
}

/// Where functions start in the target's memory.
fn function_entries(target: &Target, exe: &Path, names: &[&str]) -> Vec<u64> {
    let base = target.load_base(exe);
    let data = std::fs::read(exe).unwrap();
    let functions = sdt_elf::functions(&data).unwrap();
    names
        .iter()
        .map(|name| {
            base + functions
                .iter()
                .find(|f| f.name == *name)
                .unwrap_or_else(|| panic!("no function {name}"))
                .address
        })
        .collect()
}

/// `Attaching N probes...` for the sites of these USDT probes plus
/// `extra` more (BEGIN, END, intervals, tracepoints).
fn attaching(exe: &Path, names: &[&str], extra: usize) -> String {
    let sites = readelf_notes(exe)
        .into_iter()
        .filter(|n| n.provider == "spdk" && names.contains(&n.name.as_str()))
        .count();
    format!("Attaching {} probes...", sites + extra)
}

/// The probes fired, from the log: `(name, arguments)`.
fn probes(log: &[String]) -> Vec<(&str, Vec<&str>)> {
    log.iter()
        .filter_map(|l| l.strip_prefix("probe "))
        .map(|l| {
            let mut words = l.split(' ');
            (words.next().unwrap(), words.collect())
        })
        .collect()
}

fn calls<'l>(log: &'l [String], function: &str) -> Vec<Vec<&'l str>> {
    log.iter()
        .filter_map(|l| l.strip_prefix("call "))
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|words| words[0] == function)
        .map(|words| words[1..].to_vec())
        .collect()
}

fn state(names: &[&str], n: &str) -> String {
    names[n.parse::<usize>().unwrap()].to_string()
}

/// `usdt:/proc/PID/root/EXE:spdk:NAME`: how the wrapper writes a probe
/// that `bpftrace -l -p PID` lists, and so what `probe` is. (bpftrace 0.17
/// names every USDT probe of a `-p` process this way, however the script
/// spells its path; sdt keeps the path as written.)
fn probe_name(pid: i32, exe: &Path, name: &str) -> String {
    format!("usdt:/proc/{pid}/root{}:spdk:{name}", exe.display())
}

fn check_ran(ran: &Ran) {
    assert!(
        ran.status.success(),
        "bpftrace.sh: {}\nstdout: {:?}\nstderr:\n{}",
        ran.status,
        ran.stdout,
        ran.stderr
    );
    assert_eq!(sdt_messages(ran), "", "sdt complained");
}

/// The line of the generated program that holds `part`: its number (1
/// for the first) and its text, from the program the wrapper echoed.
fn program_line<'r>(ran: &'r Ran, part: &str) -> (usize, &'r str) {
    let end = "\tclear(@subsystem);\n}\n\n";
    let program = &ran.stderr[..ran.stderr.rfind(end).expect("the echoed program")];
    program
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains(part))
        .map(|(i, l)| (i + 1, l))
        .unwrap_or_else(|| panic!("no line with {part:?} in {program}"))
}

/// Standard error after the program the wrapper echoed, but for the line
/// `Attached N probes` (bpftrace 0.24's), which must be there once, and
/// count what `Attaching N probes...` (0.23's, on the output) counts.
fn sdt_messages(ran: &Ran) -> String {
    let end = "\tclear(@subsystem);\n}\n\n";
    let at = ran.stderr.rfind(end).expect("the echoed program") + end.len();
    let (attached, rest): (Vec<&str>, Vec<&str>) = ran.stderr[at..]
        .lines()
        .partition(|l| l.starts_with("Attached ") && l.contains(" probe"));
    assert_eq!(attached.len(), 1, "{}", ran.stderr);
    let count = |line: &str| line.split(' ').nth(1).map(str::to_string);
    if let Some(attaching) = ran.stdout.first().filter(|l| l.starts_with("Attaching ")) {
        assert_eq!(count(attached[0]), count(attaching), "{}", ran.stderr);
    }
    rest.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn nvmf_states_subsystems_and_connections() {
    let Some(b) = built() else { return };
    let exe = std::fs::canonicalize(&b.spdk_tgt).unwrap();
    // The target state is a static global, which gcc passes as
    // `4@sym(%rip)`: bpftrace 0.17 cannot read that; sdt must.
    let notes = readelf_notes(&exe);
    let state_note = notes.iter().find(|n| n.name == "nvmf_tgt_state").unwrap();
    assert!(state_note.args.contains("(%rip)"), "{state_note:?}");

    let mut target = Target::start(b, "nvmf");
    let mut wrapper = Wrapper::start(b, &target, &["nvmf.bt"], &[], None);
    wrapper.wait_armed(&target, &usdt_sites(&target, &exe, &NVMF_PROBES));
    target.go();
    target.release();
    let ran = wrapper.finish();
    let pid = target.pid;
    let log = target.finish();
    check_ran(&ran);

    // The wrapper put the object `bpftrace -l -p` listed into the script,
    // and the state names into BEGIN.
    let listed = format!("usdt:/proc/{pid}/root{}:", exe.display());
    assert!(
        ran.stderr
            .contains(&format!("{listed}nvmf_subsystem_change_state_done\n")),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("\t@target[4] = \"RUNNING\";\n"));
    assert!(ran.stderr.contains("\t@subsystem[4] = \"PAUSED\";\n"));

    let mut expected = Vec::new();
    for (name, a) in probes(&log) {
        let sub = |n: &str| state(&SUBSYSTEM_STATES, n);
        expected.push(match name {
            "nvmf_tgt_state" => format!("target: {}", state(&TARGET_STATES, a[0])),
            "nvmf_tgt_add_transport" => format!("target {}: transport {} added", a[1], a[0]),
            "nvmf_create_poll_group" => format!("poll group created on thread {}", a[0]),
            "nvmf_destroy_poll_group" => format!("poll group destroyed on thread {}", a[0]),
            "nvmf_subsystem_create" => format!("{}: created", a[0]),
            "nvmf_subsystem_destroy" => format!("{}: destroyed", a[0]),
            "nvmf_subsystem_change_state" => {
                format!("{}: {} -> {} begins", a[0], sub(a[2]), sub(a[1]))
            }
            "nvmf_subsystem_change_state_done" => format!(
                "{}: {} -> {} {}",
                a[0],
                sub(a[2]),
                sub(a[1]),
                if a[3] == "0" { "done" } else { "failed" }
            ),
            "nvmf_pg_change_state" => {
                format!("{}: thread {} to {} begins", a[0], a[2], sub(a[1]))
            }
            "nvmf_pg_change_state_done" => {
                format!("{}: thread {} to {} done", a[0], a[2], sub(a[1]))
            }
            "nvmf_subsystem_add_host" => format!("{}: host {} allowed", a[0], a[1]),
            "nvmf_subsystem_add_listener" => {
                format!("{}: listening on trtype {} {}:{}", a[0], a[1], a[2], a[3])
            }
            "nvmf_subsystem_add_ns" => format!("{}: namespace {} added", a[0], a[1]),
            "nvmf_ctrlr_create" => {
                format!("{}: controller {} created on thread {}", a[1], a[0], a[2])
            }
            "nvmf_subsystem_add_ctrlr" => {
                format!("{}: controller {} of host {} added", a[0], a[1], a[2])
            }
            "nvmf_ctrlr_add_qpair" => {
                format!(
                    "{}: qpair {} (qid {}) of host {} added",
                    a[2], a[0], a[1], a[3]
                )
            }
            "nvmf_poll_group_add_qpair" => {
                format!("qpair {} added to the poll group of thread {}", a[0], a[1])
            }
            "nvmf_ctrlr_add_io_qpair" => format!(
                "controller {}: I/O qpair {} (qid {}) on thread {}",
                a[0], a[1], a[2], a[3]
            ),
            "nvmf_transport_poll_group_create" => {
                format!("transport {}: poll group on thread {}", a[0], a[1])
            }
            "nvmf_destroy_poll_group_qpairs" => {
                format!("qpairs of the poll group of thread {} destroyed", a[0])
            }
            "nvmf_poll_group_add_subsystem" => {
                format!("{}: added to the poll group of thread {}", a[1], a[0])
            }
            "nvmf_poll_group_remove_subsystem" => format!(
                "{}: removed from poll group {} of thread {}",
                a[2], a[0], a[1]
            ),
            "nvmf_transport_poll_group_add" => format!(
                "transport: qpair {} (qid {}) added on thread {}",
                a[0], a[1], a[2]
            ),
            "nvmf_transport_poll_group_remove" => format!(
                "transport: qpair {} (qid {}) removed on thread {}",
                a[0], a[1], a[2]
            ),
            "nvmf_qpair_disconnect" => format!("qpair {} disconnected on thread {}", a[0], a[1]),
            "nvmf_poll_group_drain_qpair" => {
                format!("qpair {} drained on thread {}", a[0], a[1])
            }
            "nvmf_poll_group_remove_qpair" => format!(
                "qpair {} removed from the poll group of thread {}",
                a[0], a[1]
            ),
            "nvmf_transport_qpair_fini" => format!("transport: qpair {} finished", a[0]),
            "nvmf_subsystem_remove_ctrlr" => {
                format!("{}: controller {} of host {} removed", a[0], a[1], a[2])
            }
            "nvmf_ctrlr_destruct" => format!("controller {} destroyed on thread {}", a[0], a[1]),
            "nvmf_subsystem_remove_listener" => format!(
                "{}: no longer listening on trtype {} {}:{}",
                a[0], a[1], a[2], a[3]
            ),
            "nvmf_subsystem_remove_host" => {
                format!("{}: host {} no longer allowed", a[0], a[1])
            }
            _ => continue,
        });
    }
    // The fixture's life, in numbers: a target through all its states but
    // ERROR, two subsystems, seven state changes (one failed) over two
    // poll groups, a host with two queue pairs, and every probe once at
    // least.
    let count = |what: &str| expected.iter().filter(|l| l.contains(what)).count();
    assert_eq!(count("target: "), 11);
    assert_eq!(count(" begins"), 7 + 14);
    assert_eq!(count(" failed"), 1);
    assert!(expected.contains(&"nqn.2016-06.io.spdk:cnode1: ACTIVE -> PAUSED failed".into()));
    assert_eq!(count("disconnected on thread"), 2);
    assert_eq!(expected.len(), 98);
    for probe in NVMF_PROBES {
        assert!(
            log.iter()
                .any(|l| l.starts_with(&format!("probe {probe} "))),
            "{probe} fired"
        );
    }

    let (first, rest) = ran.stdout.split_first().expect("output");
    assert_eq!(*first, attaching(&exe, &NVMF_PROBES, 2));
    let events = rest.len() - 2;
    // The script reads `elapsed` twice per line, once for the
    // milliseconds and once for the rest (as SPDK's scripts do, and with
    // bpftrace the same): a line whose two reads straddle a millisecond
    // prints up to 1 ms early. Later lines are never earlier than that.
    let mut last = 0u64;
    let got: Vec<String> = rest[..events]
        .iter()
        .map(|line| {
            // `MS.NNNNNN: ` from elapsed, as SPDK's scripts print it.
            let (stamp, text) = line.split_once(": ").unwrap_or(("", line));
            let (ms, ns) = stamp.split_once('.').unwrap_or_else(|| panic!("{line}"));
            assert_eq!(ns.len(), 6, "{line}");
            let (ms, ns): (u64, u64) = (ms.parse().unwrap(), ns.parse().unwrap());
            let stamp = ms * 1_000_000 + ns;
            assert!(stamp + 1_000_000 > last, "time goes forward: {line}");
            last = last.max(stamp);
            text.to_string()
        })
        .collect();
    assert_eq!(got, expected);
    // Two newlines; the two maps END cleared print nothing, as in
    // bpftrace 0.26.
    assert_eq!(rest[events..], ["", ""]);
}

#[test]
fn send_msg_counts_callbacks_by_name_until_ctrl_c() {
    let Some(b) = built() else { return };
    let exe = std::fs::canonicalize(&b.spdk_tgt).unwrap();
    let outfile = b.spdk_tgt.with_file_name("send_msg.out");
    let _ = std::fs::remove_file(&outfile);
    let mut target = Target::start(b, "send_msg");
    let mut wrapper = Wrapper::start(b, &target, &["send_msg.bt"], &[], Some(&outfile));
    let entries = function_entries(
        &target,
        &exe,
        &["spdk_thread_send_msg", "spdk_for_each_channel"],
    );
    wrapper.wait_armed(&target, &entries);
    target.go();
    target.expect_line("done");
    // Ctrl-C while spdk_tgt still runs, as SPDK's documentation does it.
    wrapper.interrupt();
    let ran = wrapper.finish();
    let log = target.finish();
    check_ran(&ran);

    let mut want: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in calls(&log, "spdk_thread_send_msg") {
        *want.entry(("messages".into(), c[1].into())).or_default() += 1;
    }
    for c in calls(&log, "spdk_for_each_channel") {
        *want
            .entry(("channel_iterations".into(), c[0].into()))
            .or_default() += 1;
        *want
            .entry(("channel_completions".into(), c[1].into()))
            .or_default() += 1;
    }
    assert_eq!(want[&("messages".into(), "_call_channel".into())], 14);
    assert_eq!(
        want[&(
            "channel_iterations".into(),
            "subsystem_state_change_on_pg".into()
        )],
        7
    );
    assert_eq!(want.len(), 7);

    // As bpftrace with -o: the two newlines on standard output, the rest in
    // the file.
    assert_eq!(ran.stdout, ["", ""]);
    let text = std::fs::read_to_string(&outfile).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("Attaching 4 probes..."));
    let mut got = BTreeMap::new();
    let mut order = Vec::new();
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        // @map[key]: value
        let (map, rest) = line[1..]
            .split_once('[')
            .unwrap_or_else(|| panic!("{line}"));
        let (key, value) = rest.split_once("]: ").unwrap();
        let value: usize = value.parse().unwrap();
        order.push((map.to_string(), value));
        got.insert((map.to_string(), key.to_string()), value);
    }
    assert_eq!(got, want, "{text}");
    // Maps by name, each by value.
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "{text}");
    // Then nothing for @subsystem and @target, which END cleared: as in
    // bpftrace 0.26, a map without entries prints no line.
    assert_eq!(lines.collect::<Vec<_>>(), Vec::<&str>::new(), "{text}");
}

#[test]
fn sched_structs_arrays_and_casts() {
    let Some(b) = built() else { return };
    let exe = std::fs::canonicalize(&b.spdk_tgt).unwrap();
    let names = ["dynsched_balance", "dynsched_core_info", "dynsched_move"];
    let mut target = Target::start(b, "sched");
    let mut wrapper = Wrapper::start(b, &target, &["sched.bt"], &[], None);
    wrapper.wait_armed(&target, &usdt_sites(&target, &exe, &names));
    target.go();
    target.release();
    let ran = wrapper.finish();
    let log = target.finish();
    // The script reads `$share` and `$of_core` after the `if` that assigns
    // them, as scripts for bpftrace before 0.22 do: it runs as then, with
    // one warning for each, placed where it is first read.
    assert!(ran.status.success(), "{}", ran.stderr);
    let messages = sdt_messages(&ran);
    let warnings: Vec<&str> = messages.lines().filter(|l| l.contains("WARNING")).collect();
    let (line, text) = program_line(&ran, "arg2, $share, $of_core");
    let column = |name: &str| {
        let at = text.find(name).unwrap() + 1;
        format!("stdin:{line}:{at}-{}", at + name.len())
    };
    let rule = "is read after the block that assigns it: bpftrace 0.22 and later scope a variable to its block and refuse this; sdt takes it as earlier bpftrace did, as one variable for the whole probe, 0 until assigned";
    assert_eq!(
        warnings,
        [
            format!("{}: WARNING: $share {rule}", column("$share")),
            format!("{}: WARNING: $of_core {rule}", column("$of_core")),
        ],
        "{}",
        ran.stderr
    );

    let num = |s: &str| s.parse::<u64>().unwrap();
    let mut expected = vec![attaching(&exe, &names, 2)];
    // core -> (busy, idle) of the last balance
    let mut cores: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (name, a) in probes(&log) {
        match name {
            "dynsched_balance" => {
                cores.clear();
                expected.push(format!("balancing {} cores", a[0]));
            }
            "dynsched_core_info" => {
                // i, total idle, total busy, idle, busy, lcore, threads,
                // interrupt mode, first thread
                let (busy, idle) = (num(a[4]), num(a[3]));
                cores.insert(num(a[0]), (busy, idle));
                expected.push(format!(
                    "core {}: busy {busy} idle {idle} load {}% threads {} interrupt {} first thread {}",
                    a[0],
                    busy * 100 / (busy + idle),
                    a[6],
                    a[7],
                    a[8]
                ));
            }
            "dynsched_move" => {
                // thread, lcore, total busy, total idle, busy, idle, destination
                let (busy, idle) = (num(a[4]), num(a[5]));
                let core = cores[&num(a[1])];
                let (share, of_core) = match busy {
                    0 => (0, 0),
                    _ => (busy * 100 / (busy + idle), busy * 100 / (core.0 + core.1)),
                };
                expected.push(format!(
                    "thread {}: core {} -> {} busy {share}% ({of_core}% of its core), lifetime busy {} idle {}",
                    a[0], a[1], a[6], a[2], a[3]
                ));
            }
            _ => {}
        }
    }
    assert_eq!(expected.len(), 1 + 1 + 2 + 2);
    assert!(expected.contains(
        &"thread 2: core 0 -> 1 busy 30% (15% of its core), lifetime busy 2000 idle 1000".into()
    ));
    expected.extend(["".into(), "".into()]);
    for (map, pick) in [("core_busy", 0), ("core_idle", 1)] {
        let mut entries: Vec<(u64, u64)> = cores
            .iter()
            .map(|(core, v)| (*core, if pick == 0 { v.0 } else { v.1 }))
            .collect();
        entries.sort_by_key(|e| e.1);
        expected.extend(entries.iter().map(|(k, v)| format!("@{map}[{k}]: {v}")));
    }
    // The maps END cleared print nothing, as in bpftrace 0.26.
    assert_eq!(ran.stdout, expected);
}

/// With `all`, every handler after reactor_0's first sleep is shown. (The
/// default, the first handler after each sleep, depends on the scheduler:
/// a preemption of reactor_0 shows one handler more.)
#[test]
fn intr_wakeups_follow_reactor_0_off_the_cpu() {
    let Some(b) = built() else { return };
    let exe = std::fs::canonicalize(&b.spdk_tgt).unwrap();
    let names = [
        "interrupt_fd_process",
        "msg_exec",
        "event_exec",
        "timerfd_exec",
    ];
    let mut target = Target::start(b, "intr_wakeups");
    let mut wrapper = Wrapper::start(b, &target, &["intr-wakeups.bt"], &["all"], None);
    wrapper.wait_armed(&target, &usdt_sites(&target, &exe, &names));
    target.go();
    target.release();
    let ran = wrapper.finish();
    let pid = target.pid;
    let log = target.finish();
    check_ran(&ran);

    let mut expected = Vec::new();
    let mut wakeups = 0;
    for (name, a) in probes(&log) {
        let probe = probe_name(pid, &exe, name);
        expected.push(match name {
            "interrupt_fd_process" => {
                wakeups += 1;
                if FRAMEWORK_INTERRUPTS.contains(&a[0]) {
                    continue;
                }
                format!("{probe}: {} on fd {}, {}({})", a[0], a[1], a[2], a[3])
            }
            "msg_exec" | "timerfd_exec" => format!("{probe}: {}({})", a[0], a[1]),
            "event_exec" => format!("{probe}: {}({}, {})", a[0], a[1], a[2]),
            _ => continue,
        });
    }
    assert!(expected.iter().any(|l| l.contains("nvmf_tgt_accept on fd")));
    assert!(expected
        .iter()
        .any(|l| l.contains(":spdk:timerfd_exec: nvmf_poll_group_poll(0x")));
    assert!(expected
        .iter()
        .any(|l| l.contains(":spdk:event_exec: subsystem_init_done(0x")));
    assert_eq!(
        expected
            .iter()
            .filter(|l| l.contains("_call_channel("))
            .count(),
        14
    );

    let (first, rest) = ran.stdout.split_first().expect("output");
    assert_eq!(*first, attaching(&exe, &names, 1 + 2));
    let mut sleeps = 0;
    let mut got = Vec::new();
    let mut tail = Vec::new();
    for line in rest {
        if !tail.is_empty() || line.is_empty() {
            tail.push(line.as_str());
            continue;
        }
        let (ms, text) = line.split_once("ms").unwrap_or_else(|| panic!("{line}"));
        ms.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
        // Every reactor_0 of the machine counts: tests run in parallel.
        if text == ": reactor_0 sleeps" {
            sleeps += 1;
        } else {
            got.push(text.strip_prefix(' ').unwrap_or(text).to_string());
        }
    }
    assert_eq!(got, expected);
    assert!(sleeps >= 1, "reactor_0 slept at least once: {rest:?}");
    assert!(wakeups > 10);
    assert_eq!(tail, ["", "", "@slept: 1"]);
}

#[test]
fn syscalls_counted_per_tracepoint_every_second() {
    let Some(b) = built() else { return };
    let mut target = Target::start(b, "syscalls");
    let mut wrapper = Wrapper::start(b, &target, &["syscalls.bt"], &[], None);
    // Tracepoints leave no mark in the process: the first interval runs
    // after everything is attached.
    wrapper.wait_for_line(|l| l == "--");
    target.go();
    target.release();
    let ran = wrapper.finish();
    let log = target.finish();
    check_ran(&ran);

    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for function in ["getppid", "getuid"] {
        let n = calls(&log, function).len() as u64;
        want.insert(format!("tracepoint:syscalls:sys_enter_{function}"), n);
    }
    assert_eq!(want.values().copied().collect::<Vec<_>>(), [8, 3]);

    let tracepoints = Command::new(env!("CARGO_BIN_EXE_sdt"))
        .args(["bpftrace", "-l", "tracepoint:syscalls:sys_enter_get*"])
        .output()
        .unwrap();
    let tracepoints = String::from_utf8(tracepoints.stdout)
        .unwrap()
        .lines()
        .count();
    assert!(tracepoints > 10);
    let (first, rest) = ran.stdout.split_first().expect("output");
    assert_eq!(*first, format!("Attaching {} probes...", tracepoints + 3));

    // Each second: `--`, then the counts (nothing when there are none).
    // At the end: two newlines and the counts since the last second; the
    // two maps END cleared print nothing, as in bpftrace 0.26. The counts
    // add up to what the fixture did.
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    let mut seconds = 0;
    for line in rest {
        if line == "--" {
            seconds += 1;
        } else if let Some(entry) = line.strip_prefix("@syscalls[") {
            let (probe, n) = entry.split_once("]: ").unwrap();
            *got.entry(probe.to_string()).or_default() += n.parse::<u64>().unwrap();
        } else {
            assert_eq!(line, "", "{rest:?}");
        }
    }
    assert!(seconds >= 1);
    assert_eq!(got, want, "{rest:?}");
    // Last, the counts: @target, which END cleared, prints nothing.
    assert!(
        rest.last().is_some_and(|l| l.starts_with("@syscalls[")),
        "{rest:?}"
    );
}
