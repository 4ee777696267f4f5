//! `sdt list -p PID`: the probes of every ELF object a running process maps,
//! with paths as the process sees them.

mod list_common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use list_common::*;

/// A fixture process that waits on its standard input until dropped.
struct Waiting(Child);

impl Waiting {
    fn start(exe: &Path) -> Waiting {
        let mut child = spawn_retrying(
            Command::new(exe)
                .arg("wait")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        Waiting(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

/// Spawns `command`, retrying while the executable is "busy": a file the
/// test has just written can still be open for writing in a child that
/// another test thread forked meanwhile, until that child calls exec.
fn spawn_retrying(command: &mut Command) -> Child {
    for _ in 0..100 {
        match command.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => return result.expect("start fixture"),
        }
    }
    panic!("the fixture stayed busy for two seconds");
}

impl Drop for Waiting {
    fn drop(&mut self) {
        drop(self.0.stdin.take()); // EOF: the fixture exits
        let _ = self.0.wait();
    }
}

#[test]
fn lists_the_executable_and_its_libraries() {
    let Some(f) = fixtures("process") else { return };
    let process = Waiting::start(&f.pie);
    let pid = process.pid();
    let probes = list_json(["-p", &pid]);

    let exe = std::fs::canonicalize(&f.pie).unwrap();
    let lib = std::fs::canonicalize(&f.lib).unwrap();
    let (exe, lib) = (exe.to_str().unwrap(), lib.to_str().unwrap());
    assert_eq!(
        probe_names(probes.iter().filter(|p| p["path"] == exe)),
        [
            "fixture:tick",
            "fixture:args",
            "fixture:noargs",
            "fixture:floating"
        ]
    );
    assert_eq!(
        probe_names(probes.iter().filter(|p| p["path"] == lib)),
        ["libsem:request", "libsem:done"]
    );
    for probe in &probes {
        assert_eq!(probe["pid"].as_u64(), Some(u64::from(process.0.id())));
    }
    // The same probes, sites and offsets as listing the files directly.
    let direct = list_json([&f.lib]);
    let from_process: Vec<_> = probes.iter().filter(|p| p["path"] == lib).collect();
    for (a, b) in from_process.iter().zip(&direct) {
        assert_eq!(a["sites"], b["sites"]);
    }

    // Text output, with a pattern.
    let out = run(["list", "-p", &pid, "libsem:*"]);
    assert_success(&out, "sdt list -p PID PATTERN");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{lib} libsem:request\n{lib} libsem:done\n")
    );
}

#[test]
fn deleted_files_are_still_listed() {
    let Some(f) = fixtures("process") else { return };
    let copy = f.dir.join("probes-deleted");
    std::fs::copy(&f.pie, &copy).unwrap();
    let process = Waiting::start(&copy);
    let shown = format!(
        "{} (deleted)",
        std::fs::canonicalize(&copy).unwrap().display()
    );
    std::fs::remove_file(&copy).unwrap();
    let probes = list_json(["-p", &process.pid()]);
    assert_eq!(
        probe_names(probes.iter().filter(|p| p["path"] == shown.as_str())),
        [
            "fixture:tick",
            "fixture:args",
            "fixture:noargs",
            "fixture:floating"
        ],
        "{probes:#?}"
    );
}

#[test]
fn several_processes() {
    let Some(f) = fixtures("process") else { return };
    let (a, b) = (Waiting::start(&f.pie), Waiting::start(&f.nopie));
    let probes = list_json(["-p", &a.pid(), "-p", &b.pid(), "fixture:tick"]);
    let pids: Vec<_> = probes.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, [u64::from(a.0.id()), u64::from(b.0.id())]);
}
