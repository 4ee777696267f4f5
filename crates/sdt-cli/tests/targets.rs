//! Targets as a cluster names them: several processes at once
//! (`-p A,B`), and every process of a cgroup v2 directory (`--cgroup`),
//! including one that joins it after tracing has started.
//!
//! The workload fires `deploy:tick` as many times as it is told on its
//! standard input, so every count below follows from what the test asked.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use sdt_testing::cgroup::Cgroup;
use sdt_testing::fixture::C;
use sdt_testing::{require, require_root};

const SDT: &str = env!("CARGO_BIN_EXE_sdt");

/// The workload, built; `None` (failing the test in CI) without a C
/// compiler and `<sys/sdt.h>`.
fn workload() -> Option<PathBuf> {
    let built = C::new("tests/fixtures/deploy/target.c").try_build();
    if let Err(why) = &built {
        require(false, &format!("the workload built ({why})"));
    }
    built.ok()
}

/// A copy of the workload, ended (by its PID) when dropped.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Target {
    fn start(program: &Path) -> Target {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Target {
            stdin: child.stdin.take(),
            child,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn fire(&mut self, n: u32) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{n}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line, format!("fired {n}\n"));
    }

    /// Ends its input; it exits.
    fn end(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// sdt, started with `args`; its standard error is read until it says
/// `ready_word`.
struct Sdt {
    child: Child,
    stderr: BufReader<std::process::ChildStderr>,
    /// Its standard error up to the word waited for.
    said: String,
}

impl Sdt {
    fn start(args: &[&str], ready_word: &str) -> Sdt {
        let mut child = Command::new(SDT)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = String::new();
        while !seen.contains(ready_word) {
            assert!(
                Instant::now() < deadline,
                "sdt never said {ready_word}: {seen}"
            );
            if stderr.read_line(&mut seen).unwrap() == 0 {
                panic!("sdt ended before {ready_word}: {seen}");
            }
        }
        Sdt {
            child,
            stderr,
            said: seen,
        }
    }

    /// Waits for sdt to end (on its own, or after `interrupt`), and gives
    /// its standard output and the rest of its standard error.
    fn finish(mut self) -> (String, String) {
        let mut out = String::new();
        std::io::Read::read_to_string(self.child.stdout.as_mut().unwrap(), &mut out).unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut self.stderr, &mut err).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}: {out}\n{err}");
        (out, err)
    }

    /// Ctrl-C, by PID.
    fn interrupt(&self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::INT,
        )
        .unwrap();
    }
}

/// `@[pid]: N` lines as (pid, N).
fn counts(text: &str) -> Vec<(u32, u64)> {
    let mut found: Vec<(u32, u64)> = text
        .lines()
        .filter_map(|l| {
            let (key, n) = l.strip_prefix("@[")?.split_once("]: ")?;
            Some((key.parse().ok()?, n.trim().parse().ok()?))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn several_processes_are_each_traced_exactly_until_the_last_ends() {
    if !require_root() {
        return;
    }
    let Some(program) = workload() else {
        return;
    };
    let path = program.display().to_string();
    let (mut a, mut b, mut other) = (
        Target::start(&program),
        Target::start(&program),
        Target::start(&program),
    );
    let pids = format!("{},{}", a.pid(), b.pid());
    let script = format!("usdt:{path}:deploy:tick {{ @[pid] = count(); }}");
    let run = Sdt::start(&["run", "-p", &pids, "-e", &script], "Attaching");
    // The trace says it has attached once tracing is live.
    let trace = Sdt::start(&["trace", "-p", &pids, "deploy:tick"], "tracing");
    let stacks = Sdt::start(
        &[
            "stackcount",
            "-P",
            "-f",
            "folded",
            "-p",
            &pids,
            "deploy:tick",
        ],
        "Attaching",
    );
    std::thread::sleep(Duration::from_millis(200));
    a.fire(3);
    b.fire(5);
    other.fire(7);
    a.end();
    // One traced process still runs: so does sdt.
    std::thread::sleep(Duration::from_millis(300));
    b.fire(2);
    b.end();
    let (out, _) = run.finish();
    assert_eq!(
        counts(&out),
        [(a.pid(), 3), (b.pid(), 7)],
        "every hit of both processes, none of the third: {out}"
    );
    let (out, err) = trace.finish();
    let hits = |pid: u32| {
        out.lines()
            .filter(|l| l.contains(&format!(" {pid} ")))
            .count()
    };
    assert_eq!(
        (hits(a.pid()), hits(b.pid()), hits(other.pid())),
        (3, 7, 0),
        "{out}"
    );
    assert!(err.contains("10 events, 0 lost"), "{err}");
    // Folded stacks by process: `target;PID;...;main N`.
    let (out, _) = stacks.finish();
    let stacked = |pid: u32| -> u64 {
        out.lines()
            .filter(|l| l.split(';').nth(1) == Some(pid.to_string().as_str()))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert_eq!(
        (stacked(a.pid()), stacked(b.pid()), stacked(other.pid())),
        (3, 7, 0),
        "{out}"
    );
}

#[test]
fn a_cgroup_is_traced_with_the_processes_that_join_it_later() {
    if !require_root() {
        return;
    }
    let Some(program) = workload() else {
        return;
    };
    let cgroup = Cgroup::create("joined");
    if !require(cgroup.is_some(), "a writable cgroup v2 hierarchy") {
        return;
    }
    let cgroup = cgroup.unwrap();
    let path = program.display().to_string();
    let (mut inside, mut outside) = (Target::start(&program), Target::start(&program));
    cgroup.enter(inside.pid());
    let dir = cgroup.dir().display().to_string();
    let script = format!("usdt:{path}:deploy:tick {{ @[pid] = count(); }}");
    let run = Sdt::start(&["run", "--cgroup", &dir, "-e", &script], "Attaching");
    std::thread::sleep(Duration::from_millis(200));
    inside.fire(4);
    outside.fire(6);
    // A process that joins the cgroup after tracing started is traced.
    let mut later = Target::start(&program);
    later.fire(1);
    cgroup.enter(later.pid());
    later.fire(9);
    std::thread::sleep(Duration::from_millis(100));
    run.interrupt();
    let (out, _) = run.finish();
    assert_eq!(counts(&out), [(inside.pid(), 4), (later.pid(), 9)], "{out}");
    // The cgroup named as /proc/PID/cgroup shows it works alike; one that
    // does not exist is a one-line error.
    let name = cgroup
        .dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let out = Command::new(SDT)
        .args([
            "run",
            "--cgroup",
            &format!("/{name}/missing"),
            "-e",
            &script,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no such cgroup"), "{err}");
    inside.end();
    outside.end();
    later.end();
}

/// `GET /metrics` over HTTP/1.0: the body.
fn scrape(address: &str) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[test]
fn a_served_program_traces_the_cgroup_its_config_names_and_labels_it() {
    if !require_root() {
        return;
    }
    let Some(program) = workload() else {
        return;
    };
    let cgroup = Cgroup::create("served");
    if !require(cgroup.is_some(), "a writable cgroup v2 hierarchy") {
        return;
    }
    let cgroup = cgroup.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let name = format!("/{}", cgroup.dir().file_name().unwrap().to_string_lossy());
    std::fs::write(
        dir.path().join("ticks.bt"),
        format!(
            "usdt:{}:deploy:tick {{ @ticks = count(); }}\n",
            program.display()
        ),
    )
    .unwrap();
    // As /proc/PID/cgroup names it.
    std::fs::write(dir.path().join("ticks.conf"), format!("cgroup = {name}\n")).unwrap();
    let (mut inside, mut outside) = (Target::start(&program), Target::start(&program));
    cgroup.enter(inside.pid());
    let serve = Sdt::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            &dir.path().display().to_string(),
        ],
        "ticks: up",
    );
    let at = serve.said.find("http://").unwrap() + "http://".len();
    let listen = serve.said[at..].split('/').next().unwrap().to_string();
    inside.fire(8);
    outside.fire(3);
    let text = scrape(&listen);
    let series = format!("sdt_ticks_total{{program=\"ticks\",cgroup=\"{name}\"}} 8");
    assert!(text.lines().any(|l| l == series), "{series} in\n{text}");
    serve.interrupt();
    serve.finish();
    inside.end();
    outside.end();
}
