//! Which file sdt reads and attaches to when the traced process does not
//! cooperate: real containers, mount tricks, files replaced on disk and
//! PIDs that pass to another process.
//!
//! Every case runs as root, in namespaces that the test makes itself with
//! `unshare` (util-linux) or that the target makes with `unshare(2)`; none
//! has a network. The target is `tests/fixtures/containers/target.c`,
//! which loads `libprobe.so` with `dlopen`. Both exist in two builds with
//! different probes: the file the process maps (`cont:*`) and the one it
//! might steer sdt to (`host:*`). Seeing a `host:` probe, missing a hit, or
//! an open of the other file (watched with inotify) fails the test.

mod list_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use list_common::{assert_no_panic, assert_success, have, probe_names, require, sdt};
use rustix::fs::inotify;
use sdt_testing::fixture::C;
use serde_json::Value;

/// The fixtures, each in its `cont` and `host` build.
struct Fixtures {
    target: PathBuf,
    target_host: PathBuf,
    lib: PathBuf,
    lib_host: PathBuf,
}

fn fixtures() -> Option<Fixtures> {
    if !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("containers-fixtures");
    let cc = |out: &str, source: &str, flags: &[&str]| {
        C::new(format!("tests/fixtures/containers/{source}"))
            .flags(&["-O2"])
            .flags(flags)
            .dir(&dir)
            .output(out)
            .build()
    };
    Some(Fixtures {
        target: cc("target", "target.c", &[]),
        target_host: cc("target-host", "target.c", &["-DHOST"]),
        lib: cc("libprobe.so", "libprobe.c", &["-fPIC", "-shared"]),
        lib_host: cc(
            "libprobe-host.so",
            "libprobe.c",
            &["-DHOST", "-fPIC", "-shared"],
        ),
    })
}

/// Root, `unshare`, and the fixtures; or a SKIP (a failure in CI).
fn setup() -> Option<Fixtures> {
    if !sdt_testing::require_root()
        || !require(have("unshare"), "unshare (util-linux)")
        || !require(have("pivot_root"), "pivot_root (util-linux)")
    {
        return None;
    }
    fixtures()
}

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sdt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // World-readable, for the test that lists without privileges.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {from:?} to {to:?}: {e}"));
}

/// A running target: a process that fires its probes on request.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The target itself, which is not `child` when `unshare` forks it.
    pid: u32,
}

impl Target {
    /// Starts `command` and waits for its "ready". A file just written can
    /// still be open for writing in a child that another test thread forked
    /// meanwhile ("Text file busy", until that child calls exec): retried.
    fn start(command: &mut Command) -> Target {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for _ in 0..100 {
            let mut child = match command.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                result => result.expect("start target"),
            };
            let mut stdout = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            if line == "ready\n" {
                let pid = forked_child(child.id()).unwrap_or(child.id());
                return Target {
                    stdin: child.stdin.take(),
                    child,
                    stdout,
                    pid,
                };
            }
            let _ = child.wait();
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            assert!(
                stderr.contains("Text file busy"),
                "{command:?} did not start: {stderr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{command:?} stayed busy for two seconds");
    }

    fn pid(&self) -> String {
        self.pid.to_string()
    }

    /// Fires both probes `n` times; returns the library's semaphore as it
    /// was before.
    fn fire(&mut self, n: u32) -> u32 {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{n}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[..2], ["fired", n.to_string().as_str()], "{line:?}");
        fields[2].parse().unwrap()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take()); // end of input: the target exits
        let _ = self.child.wait();
    }
}

/// The child that `unshare --fork` started, if `pid` has one.
fn forked_child(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A running `sdt trace --json`.
struct Tracer {
    child: Child,
    _stderr: BufReader<ChildStderr>,
}

impl Tracer {
    /// Starts `sdt trace --json ARGS` and waits until its probes are live.
    fn start(args: &[&str]) -> Tracer {
        let mut child = spawn_sdt_trace(args);
        let stderr = wait_until_tracing(&mut child, args);
        Tracer {
            child,
            _stderr: stderr,
        }
    }

    /// Stops sdt with SIGINT; returns its events and summary.
    fn stop(mut self) -> (Vec<Value>, Value) {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::INT,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "sdt did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut out = Vec::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        let mut lines: Vec<Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("each line is JSON"))
            .collect();
        let summary = lines.pop().expect("a summary line")["summary"].clone();
        (lines, summary)
    }
}

fn spawn_sdt_trace(args: &[&str]) -> Child {
    sdt()
        .args(["trace", "--json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sdt")
}

/// Reads sdt's standard error until it says its probes are live.
fn wait_until_tracing(sdt: &mut Child, args: &[&str]) -> BufReader<ChildStderr> {
    let mut stderr = BufReader::new(sdt.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("tracing") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "sdt trace {args:?} ended before tracing"
        );
    }
    stderr
}

/// `provider:name(arg0)` of each event, in order.
fn hits(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{}:{}({})", e["provider"], e["name"], e["args"][0]).replace('"', ""))
        .collect()
}

/// `n` hits of each probe, one after the other as the target fires them.
fn expected_hits(n: u32, probes: &[&str]) -> Vec<String> {
    (0..n)
        .flat_map(|i| probes.iter().map(move |p| format!("{p}({i})")))
        .collect()
}

/// Reports any open or read of the watched files.
struct OpenWatch {
    fd: OwnedFd,
    files: Vec<(i32, PathBuf)>,
}

impl OpenWatch {
    fn new(files: &[&Path]) -> OpenWatch {
        let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .expect("inotify_init");
        let files = files
            .iter()
            .map(|file| {
                let wd = inotify::add_watch(
                    &fd,
                    *file,
                    inotify::WatchFlags::OPEN | inotify::WatchFlags::ACCESS,
                )
                .expect("inotify_add_watch");
                (wd, file.to_path_buf())
            })
            .collect();
        OpenWatch { fd, files }
    }

    fn assert_untouched(&self) {
        let mut buf = [MaybeUninit::uninit(); 4096];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        if let Ok(event) = reader.next() {
            let file = self.files.iter().find(|(wd, _)| *wd == event.wd());
            panic!("{file:?} was opened or read: {:?}", event.events());
        }
    }
}

/// `sdt list --json -p PID`: the probe names listed for each path.
fn list_by_path(pid: &str) -> Vec<(String, String)> {
    list_common::list_json(["-p", pid])
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap().to_string(),
                probe_names([p]).remove(0),
            )
        })
        .collect()
}

fn listed(listing: &[(String, String)], path: &str) -> Vec<String> {
    listing
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, probe)| probe.clone())
        .collect()
}

fn assert_no_host_probe(listing: &[(String, String)]) {
    assert!(
        listing.iter().all(|(_, probe)| !probe.starts_with("host:")),
        "sdt read the other file: {listing:?}"
    );
}

/// `sdt list -p PID` as root without CAP_SYS_ADMIN and
/// CAP_CHECKPOINT_RESTORE: `/proc/PID/map_files` is closed to it, so it
/// must open files by name inside the process's root.
fn list_without_map_files(pid: &str) -> Output {
    let out = Command::new("setpriv")
        .args(["--bounding-set=-sys_admin,-checkpoint_restore", "--"])
        .arg(env!("CARGO_BIN_EXE_sdt"))
        .args(["list", "-p", pid])
        .output()
        .expect("run setpriv");
    assert_no_panic(&out);
    out
}

/// Case 1: a process in a container of its own (mount and PID namespace,
/// its own root) is listed and traced in its own files, although the host
/// has different files at the same paths, which sdt never opens.
#[test]
fn a_container_is_traced_in_its_own_files_never_the_hosts() {
    let Some(f) = setup() else { return };
    let dir = TempDir::new("container");
    let root = dir.path().join("root");
    // The same path in the container and on the host.
    let inside = PathBuf::from(format!(
        "/usr/lib/sdt-container-test-{}",
        std::process::id()
    ));
    let in_root = |path: &Path| root.join(path.strip_prefix("/").unwrap());
    let (target, lib) = (inside.join("target"), inside.join("libprobe.so"));
    copy(&f.target, &in_root(&target));
    copy(&f.lib, &in_root(&lib));
    // Its C library and loader, where the loader looks for them.
    let ldd = Command::new("ldd")
        .arg(&f.target)
        .output()
        .expect("run ldd");
    for word in String::from_utf8_lossy(&ldd.stdout).split_whitespace() {
        if word.starts_with('/') {
            copy(Path::new(word), &in_root(Path::new(word)));
        }
    }
    let host = HostFiles::new(&inside);
    copy(&f.target_host, &target);
    copy(&f.lib_host, &lib);
    let watch = OpenWatch::new(&[&target, &lib]);

    // As container runtimes do: the root directory becomes the root mount
    // of the new mount namespace (pivot_root), and the host's is out of
    // sight, so the maps name the files by their paths in the container.
    std::fs::create_dir_all(root.join(".old")).unwrap();
    let mut process = Target::start(
        Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "sh", "-c"])
            .arg(r#"mount --bind "$0" "$0" && cd "$0" && pivot_root . .old && exec "$1" "$2""#)
            .arg(&root)
            .arg(&target)
            .arg(&lib),
    );
    assert_ne!(
        process.pid,
        process.child.id(),
        "the target runs under unshare"
    );
    let own_root = std::fs::metadata(format!("/proc/{}/root", process.pid)).unwrap();
    assert_eq!(
        own_root.ino(),
        std::fs::metadata(&root).unwrap().ino(),
        "the target has its own root"
    );

    let pid = process.pid();
    let listing = list_by_path(&pid);
    let (target_name, lib_name) = (target.to_str().unwrap(), lib.to_str().unwrap());
    assert_eq!(listed(&listing, target_name), ["cont:in_program"]);
    assert_eq!(listed(&listing, lib_name), ["cont:mapped_one"]);
    assert_no_host_probe(&listing);

    let tracer = Tracer::start(&["-p", &pid, "cont:*"]);
    assert!(process.fire(5) > 0, "the kernel raised the semaphore");
    let (events, summary) = tracer.stop();
    assert_eq!(
        hits(&events),
        expected_hits(5, &["cont:in_program", "cont:mapped_one"])
    );
    for event in &events {
        let path = event["path"].as_str().unwrap();
        assert!(path == target_name || path == lib_name, "{event}");
    }
    assert_eq!(summary["lost"], 0);
    watch.assert_untouched();
    drop(host);
}

/// Files at a path on the host, removed when dropped.
struct HostFiles(PathBuf);

impl HostFiles {
    fn new(dir: &Path) -> HostFiles {
        std::fs::create_dir_all(dir).unwrap();
        HostFiles(dir.to_path_buf())
    }
}

impl Drop for HostFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Case 2: after mapping its library, the target mounts over the library's
/// directory one in which the library's name is an absolute symlink to a
/// different library. Its maps still name the old path, which now leads to
/// the other file; sdt lists and traces the mapped library, and without
/// `map_files` refuses it by name. It never opens the other file.
#[test]
fn a_mount_over_the_library_cannot_steer_sdt_to_another_file() {
    let Some(f) = setup() else { return };
    if !require(have("setpriv"), "setpriv (util-linux)") {
        return;
    }
    let dir = TempDir::new("mount-swap");
    let (libdir, swapdir, hostdir) = (
        dir.path().join("lib"),
        dir.path().join("swap"),
        dir.path().join("host"),
    );
    let (lib, host_lib) = (libdir.join("libprobe.so"), hostdir.join("libprobe.so"));
    copy(&f.lib, &lib);
    copy(&f.lib_host, &host_lib);
    std::fs::create_dir_all(&swapdir).unwrap();
    std::os::unix::fs::symlink(&host_lib, swapdir.join("libprobe.so")).unwrap();
    let watch = OpenWatch::new(&[&host_lib]);

    let mut process = Target::start(
        Command::new(&f.target)
            .arg("--swap")
            .args([&libdir, &swapdir, &lib]),
    );
    let pid = process.pid();
    // The trap is set: the name in the maps now leads to the other file.
    let lib_name = lib.to_str().unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains(lib_name), "{maps}");
    let by_name = std::fs::metadata(format!("/proc/{pid}/root{lib_name}")).unwrap();
    assert_eq!(by_name.ino(), std::fs::metadata(&host_lib).unwrap().ino());
    let watch_untouched = || watch.assert_untouched();
    watch_untouched();

    let listing = list_by_path(&pid);
    assert_eq!(listed(&listing, lib_name), ["cont:mapped_one"]);
    assert_no_host_probe(&listing);

    let tracer = Tracer::start(&["-p", &pid, "cont:mapped_one"]);
    assert!(process.fire(4) > 0, "the semaphore of the mapped library");
    let (events, _) = tracer.stop();
    assert_eq!(hits(&events), expected_hits(4, &["cont:mapped_one"]));

    // Without map_files, the name is all there is: its file is not the
    // mapped one, so it is refused by name, and the rest is still listed.
    let out = list_without_map_files(&pid);
    assert_success(&out, "sdt list -p without map_files");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stderr.contains(&format!("not reading {lib_name} of process {pid}"))
            && stderr.contains("now leads to"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        !stdout.contains("host:") && !stdout.contains(lib_name),
        "{stdout}"
    );
    assert!(stdout.contains("cont:in_program"), "{stdout}");
    watch_untouched();
}

/// Case 3: the executable is replaced on disk the way a package upgrade
/// does it (a new file renamed over the old name). The process keeps being
/// traced; listing marks the old file deleted and never reads the new one.
#[test]
fn a_program_replaced_on_disk_is_still_traced_and_listed_as_deleted() {
    let Some(f) = setup() else { return };
    if !require(have("setpriv"), "setpriv (util-linux)") {
        return;
    }
    let dir = TempDir::new("replaced");
    let (app, lib) = (dir.path().join("app"), dir.path().join("libprobe.so"));
    copy(&f.target, &app);
    copy(&f.lib, &lib);
    let mut process = Target::start(Command::new(&app).arg(&lib));
    let pid = process.pid();

    let before = Tracer::start(&["-p", &pid, "cont:in_program"]);
    process.fire(3);
    let new = dir.path().join("app.new");
    copy(&f.target_host, &new);
    std::fs::rename(&new, &app).unwrap();
    let watch = OpenWatch::new(&[&app]);
    process.fire(4);
    let (events, _) = before.stop();
    let mut expected = expected_hits(3, &["cont:in_program"]);
    expected.extend(expected_hits(4, &["cont:in_program"]));
    assert_eq!(hits(&events), expected, "traced across the replacement");

    let listing = list_by_path(&pid);
    let deleted = format!("{} (deleted)", app.display());
    assert_eq!(listed(&listing, &deleted), ["cont:in_program"]);
    assert_eq!(listed(&listing, lib.to_str().unwrap()), ["cont:mapped_one"]);
    assert_no_host_probe(&listing);

    // A trace that starts after the replacement finds the deleted file.
    let after = Tracer::start(&["-p", &pid, "cont:in_program"]);
    process.fire(2);
    let (events, _) = after.stop();
    assert_eq!(hits(&events), expected_hits(2, &["cont:in_program"]));

    // Only map_files reaches a deleted file; without it, sdt says so.
    let out = list_without_map_files(&pid);
    assert_success(&out, "sdt list -p without map_files");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("not reading {}", app.display())) && stderr.contains("deleted"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("host:") && stdout.contains("cont:mapped_one"),
        "{stdout}"
    );
    watch.assert_untouched();
}

/// Case 4: the `-p` target ends while sdt starts up, and its PID passes to
/// a new process of the same program before sdt attaches. sdt ends with
/// the target and never attaches to the newcomer.
///
/// `pid_reuse.sh` runs as PID 1 of a new PID namespace, where it can hand
/// a PID on deliberately (`ns_last_pid`). sdt writes its events to a FIFO,
/// and opening that blocks sdt after it has planned and before it attaches:
/// the script swaps the processes exactly there.
#[test]
fn a_reused_pid_is_never_attached() {
    let Some(f) = setup() else { return };
    let dir = TempDir::new("pid-reuse");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/containers/pid_reuse.sh");
    let out = Command::new("timeout")
        .args(["60", "unshare", "--pid", "--fork", "--mount-proc", "bash"])
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_sdt"))
        .args([&f.target, &f.lib])
        .arg(dir.path())
        .output()
        .expect("run unshare");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = |key: &str| -> String {
        report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {report}"))
            .to_string()
    };
    assert_eq!(value("old_pid"), value("new_pid"), "the PID was handed on");
    assert_ne!(value("sdt_status"), "0", "{report}");
    let stderr = std::fs::read_to_string(dir.path().join("sdt.err")).unwrap();
    assert!(
        stderr.contains(&format!(
            "process {} ended before sdt attached to it",
            value("old_pid")
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("tracing"), "sdt attached: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let events = std::fs::read_to_string(dir.path().join("events")).unwrap();
    assert_eq!(events, "", "events of the newcomer");
    assert_eq!(
        value("newcomer"),
        "max 0",
        "the newcomer's semaphore was raised"
    );
}

/// Without any privilege, `sdt list -p` of one's own process opens its
/// files by name inside its root, and checks them.
#[test]
fn an_unprivileged_user_lists_its_own_process() {
    let Some(f) = setup() else { return };
    if !require(have("setpriv"), "setpriv (util-linux)") {
        return;
    }
    let dir = TempDir::new("unprivileged");
    let (sdt_copy, app, lib) = (
        dir.path().join("sdt"),
        dir.path().join("app"),
        dir.path().join("libprobe.so"),
    );
    copy(Path::new(env!("CARGO_BIN_EXE_sdt")), &sdt_copy);
    copy(&f.target, &app);
    copy(&f.lib, &lib);
    let nobody = [
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ];
    let process = Target::start(Command::new("setpriv").args(nobody).arg(&app).arg(&lib));
    let pid = process.pid();
    assert_eq!(process.pid, process.child.id(), "setpriv execs the target");
    let out = Command::new("setpriv")
        .args(nobody)
        .arg(&sdt_copy)
        .args(["list", "-p", &pid])
        .output()
        .unwrap();
    assert_success(&out, "unprivileged sdt list -p");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "{} cont:in_program\n{} cont:mapped_one\n",
            app.display(),
            lib.display()
        )
    );
}

/// On btrfs, `/proc/PID/maps` gives the filesystem's device and `fstat` a
/// device of the subvolume. sdt matches them through the mount's device,
/// with `map_files` and without.
#[test]
fn a_process_on_a_btrfs_subvolume_is_listed() {
    let Some(f) = setup() else { return };
    if !require(have("mkfs.btrfs"), "mkfs.btrfs (Debian: btrfs-progs)")
        || !require(have("setpriv"), "setpriv (util-linux)")
    {
        return;
    }
    let dir = TempDir::new("btrfs");
    let image = dir.path().join("btrfs.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::File::create(&image)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    let mkfs = Command::new("mkfs.btrfs")
        .arg("-q")
        .arg(&image)
        .output()
        .unwrap();
    assert_success(&mkfs, "mkfs.btrfs");
    // Mounted in a mount namespace of the target's own, so nothing is left
    // mounted whatever happens to the test.
    let script = r#"set -e
        mount -o loop "$1" "$2"
        btrfs subvolume create "$2/sub" >/dev/null
        cp "$3" "$4" "$2/sub/"
        exec "$2/sub/target" "$2/sub/libprobe.so""#;
    let process = Target::start(
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(&image)
            .arg(&mnt)
            .args([&f.target, &f.lib]),
    );
    let pid = process.pid.to_string();
    assert_eq!(process.pid, process.child.id(), "unshare execs");
    let app = mnt.join("sub/target");
    let stat_dev = std::fs::metadata(format!("/proc/{pid}/exe")).unwrap().dev();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps.lines().find(|l| l.ends_with("sub/target")).unwrap();
    let maps_dev = line.split_whitespace().nth(3).unwrap();
    let (major, minor) = maps_dev.split_once(':').unwrap();
    assert_ne!(
        (
            u32::from_str_radix(major, 16).unwrap(),
            u32::from_str_radix(minor, 16).unwrap()
        ),
        (rustix::fs::major(stat_dev), rustix::fs::minor(stat_dev)),
        "btrfs reports the subvolume's device"
    );
    let listing = list_by_path(&pid);
    assert_eq!(listed(&listing, app.to_str().unwrap()), ["cont:in_program"]);
    let out = list_without_map_files(&pid);
    assert_success(&out, "sdt list -p without map_files");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("{} cont:in_program", app.display())),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A library that the `-c` command loads with `dlopen` does not exist in
/// its process when sdt plans the probes: a spec without a file is
/// attached to it once it is mapped, with its semaphore raised.
#[test]
fn a_library_the_command_loads_with_dlopen_is_attached_once_mapped() {
    if !sdt_testing::require_root() {
        return;
    }
    let Some(fixtures) = fixtures() else {
        return;
    };
    let dir = TempDir::new("dlopen-c");
    let events_file = dir.path().join("events.ndjson");
    let command = format!("{} {}", fixtures.target.display(), fixtures.lib.display());
    let mut sdt = sdt()
        .args(["trace", "--json", "-o"])
        .arg(&events_file)
        .args(["-c", &command, "cont:*"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sdt");
    // The command's standard output is sdt's.
    let mut stdout = BufReader::new(sdt.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mut stderr = BufReader::new(sdt.stderr.take().unwrap());
    let attached = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "sdt ended before attaching to the library"
        );
        if line.starts_with("sdt: attached ") {
            break line;
        }
    };
    assert_eq!(
        attached
            .trim_end()
            .rsplit_once(" in process ")
            .map(|(a, _)| a),
        Some(
            format!(
                "sdt: attached usdt:{}:cont:mapped_one (1 site)",
                fixtures.lib.display()
            )
            .as_str()
        ),
        "{attached}"
    );
    let mut stdin = sdt.stdin.take().unwrap();
    writeln!(stdin, "4").unwrap();
    stdin.flush().unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    // The library's semaphore, read by the command before it fired: the
    // kernel raised it when sdt attached.
    assert_eq!(line, "fired 4 1\n");
    drop(stdin); // the command exits at the end of its input, and sdt with it
    let status = sdt.wait().unwrap();
    assert!(status.success(), "{status}");
    let events: Vec<Value> = std::fs::read_to_string(&events_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, events) = events.split_last().unwrap();
    assert_eq!(
        hits(events),
        expected_hits(4, &["cont:in_program", "cont:mapped_one"])
    );
    assert_eq!(summary["summary"]["sites"], 2);
}
