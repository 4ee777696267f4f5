//! The fast path's Rust fixture (`tests/fixtures/fastpath`): a program
//! whose probes come from the `sdt` crate with its `fastpath` feature,
//! built once, and driven a line at a time on its input.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixture::{from_root, target_tmpdir};

/// The fixture, built once per target directory; `None`, after
/// [`crate::require`] has said so, if it cannot be built.
pub fn program() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = target_tmpdir().join("fastpath-fixture");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let built = Command::new(cargo)
                .args(["build", "--release", "--quiet", "--manifest-path"])
                .arg(from_root(Path::new("tests/fixtures/fastpath/Cargo.toml")))
                .arg("--target-dir")
                .arg(&target)
                .status()
                .is_ok_and(|s| s.success());
            crate::require(built, "the fast-path fixture built with cargo")
                .then(|| target.join("release/sdt-fastpath-fixture"))
        })
        .clone()
}

/// The fixture running, once it has said `ready`; killed (by its PID)
/// when dropped.
pub struct Running {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Running {
    /// Starts `program`.
    pub fn start(program: &Path) -> Running {
        Running::spawn(Command::new(program))
    }

    /// Starts `command`, which runs the fixture in the end (through
    /// `unshare`, say), with its input and output piped.
    pub fn spawn(mut command: Command) -> Running {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Running { child, out }
    }

    /// The process started (for `spawn`, the command's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line it prints.
    pub fn answer(&mut self) -> String {
        let mut answer = String::new();
        self.out.read_line(&mut answer).unwrap();
        answer
    }

    /// Sends one line, and returns the answer.
    pub fn ask(&mut self, line: &str) -> String {
        self.send(line);
        self.answer()
    }

    /// Waits until `acc:hit`'s semaphore is raised (`true`) or lowered.
    pub fn wait_enabled(&mut self, enabled: bool) {
        let wanted = format!("enabled {}\n", u8::from(enabled));
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.ask("enabled") != wanted {
            assert!(Instant::now() < deadline, "never {wanted}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes its input, and waits for it to end.
    pub fn end(mut self) {
        drop(self.child.stdin.take());
        self.child.wait().unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
