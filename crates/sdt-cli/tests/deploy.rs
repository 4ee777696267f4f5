//! The deployment in `deploy/`, for real: the Kubernetes manifests
//! checked offline against Kubernetes' own schemas, and the OCI image
//! built from `deploy/Containerfile` with podman, measured, and run the
//! way the DaemonSet's pod runs it.
//!
//! Containers cannot run on the machines this project tests on (podman:
//! "cgroups in hybrid mode not supported"), so the image's root file
//! system is exported and entered the way a container runtime sets it up
//! for the DaemonSet's pod: a mount namespace of its own, the image's
//! files read-only, the node's /proc (`hostPID`) and /sys, the ConfigMap
//! in kubelet's layout (`..data`), the node's root at /host, a tmpfs at
//! /tmp, `no_new_privs`, and as root only the capabilities the DaemonSet
//! adds. There sdt lists and traces processes of the node by PID, and
//! serves the ConfigMap's programs, with exact counts. Then each
//! capability the DaemonSet adds is dropped in turn, and something sdt
//! must do fails without it: the set is the least that works.
//!
//! Podman keeps its storage in a temporary directory (vfs driver) and
//! runs in a mount namespace of its own, so nothing is left on the
//! machine. The Python tools come from a virtual environment of the
//! test's own, pinned by `tests/fixtures/deploy/requirements.txt`. Every
//! process a test starts is ended by its PID. With `CI=true` a missing
//! tool or privilege fails the test; elsewhere it prints a loud SKIP.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sdt_testing::{have, require};
use serde_json::Value;

/// Kubernetes versions the manifests are checked against: the first with
/// `appArmorProfile` in a security context, and the newest that the
/// pinned kubernetes-validate knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

/// The most the image may weigh, in bytes.
const IMAGE_LIMIT: u64 = 25_000_000;

/// What makes `sdt run` say on standard output that its probes are
/// attached.
const NOTIFY: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test's own virtual environment with the pinned kubernetes-validate
/// (and PyYAML, which it brings): made once, under the target directory.
/// The first run fetches the packages from PyPI; later ones find the pins
/// satisfied and need no network.
fn venv() -> Option<&'static Path> {
    static VENV: OnceLock<Option<PathBuf>> = OnceLock::new();
    VENV.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-venv");
        if !dir.join("bin/pip").exists() {
            let made = Command::new("/usr/bin/python3")
                .args(["-m", "venv"])
                .arg(&dir)
                .output()
                .is_ok_and(|o| o.status.success());
            if !require(
                made,
                "python3 -m venv (Debian's python3-venv; scripts/install-deps)",
            ) {
                let _ = std::fs::remove_dir_all(&dir);
                return None;
            }
        }
        let pip = Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(repo().join("tests/fixtures/deploy/requirements.txt"))
            .output()
            .unwrap();
        require(
            pip.status.success(),
            &format!(
                "kubernetes-validate from PyPI, pinned in tests/fixtures/deploy/requirements.txt ({})",
                String::from_utf8_lossy(&pip.stderr).trim()
            ),
        )
        .then_some(dir)
    })
    .as_deref()
}

/// What `kubectl apply -f deploy/kubernetes/` applies, in its order.
fn applied_files() -> Vec<PathBuf> {
    yaml_files(&repo().join("deploy/kubernetes"))
}

/// The optional ServiceMonitor, for the Prometheus Operator.
fn operator_files() -> Vec<PathBuf> {
    yaml_files(&repo().join("deploy/kubernetes/prometheus-operator"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Every document of `files`, as JSON (PyYAML reads them).
fn documents(venv: &Path, files: &[PathBuf]) -> Vec<Value> {
    let out = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import json, sys, yaml\n\
             docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d is not None]\n\
             print(json.dumps(docs))",
        ])
        .args(files)
        .output()
        .unwrap();
    assert!(out.status.success(), "reading the manifests: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The one document of `kind`.
fn one<'d>(docs: &'d [Value], kind: &str) -> &'d Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in the manifests");
    found[0]
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Whether every label `selector` asks for is in `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
}

/// The DaemonSet's one container.
fn container(daemonset: &Value) -> &Value {
    let containers = daemonset["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The volume mounted at `path` in the DaemonSet's pod.
fn volume_at<'d>(daemonset: &'d Value, path: &str) -> &'d Value {
    let mount = container(daemonset)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("nothing mounted at {path}"));
    let read_only = mount["readOnly"].as_bool().unwrap_or(false);
    assert_eq!(read_only, path != "/tmp", "{mount}");
    daemonset["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("no volume {}", mount["name"]))
}

/// The port of `--listen HOST:PORT` in the container's arguments.
fn listen_port(args: &[String]) -> u16 {
    let at = args.iter().position(|a| a == "--listen").expect("--listen");
    let address: SocketAddr = args[at + 1].parse().unwrap();
    assert!(
        address.ip().is_unspecified(),
        "the pod must listen on its own address: {address}"
    );
    address.port()
}

/// The capabilities the DaemonSet adds, by Kubernetes' names (`BPF`).
fn added_capabilities(daemonset: &Value) -> Vec<String> {
    let capabilities = &container(daemonset)["securityContext"]["capabilities"];
    assert_eq!(strings(&capabilities["drop"]), ["ALL"]);
    strings(&capabilities["add"])
}

#[test]
fn the_manifests_validate_offline_and_agree_with_each_other() {
    let Some(venv) = venv() else {
        return;
    };
    let applied = applied_files();
    let docs = documents(venv, &applied);
    // Offline: in a network namespace with no interface, when root can
    // make one. The schemas come inside the package.
    let offline = rustix::process::geteuid().is_root() && have("unshare");
    let validate = venv.join("bin/kubernetes-validate");
    let check = |files: &[PathBuf], version: &str| -> Output {
        let mut command = if offline {
            let mut command = Command::new("unshare");
            command.arg("--net").arg(&validate);
            command
        } else {
            Command::new(&validate)
        };
        command
            .args(["--strict", "--kubernetes-version", version])
            .args(files)
            .output()
            .unwrap()
    };
    for version in KUBERNETES_VERSIONS {
        let out = check(&applied, version);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "Kubernetes {version}:\n{text}");
        assert_eq!(
            text.matches(" passed for resource ").count(),
            docs.len(),
            "each resource passed against {version}:\n{text}"
        );
    }
    // --strict refuses a field Kubernetes does not have.
    let broken_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-broken");
    std::fs::create_dir_all(&broken_dir).unwrap();
    let broken = broken_dir.join("daemonset.yaml");
    let daemonset_text =
        std::fs::read_to_string(repo().join("deploy/kubernetes/20-daemonset.yaml")).unwrap();
    assert!(daemonset_text.contains("      hostPID: true\n"));
    std::fs::write(
        &broken,
        daemonset_text.replace("      hostPID: true\n", "      hostPid: true\n"),
    )
    .unwrap();
    let out = check(std::slice::from_ref(&broken), KUBERNETES_VERSIONS[1]);
    assert!(!out.status.success(), "a misspelt field passed: {out:?}");
    let _ = std::fs::remove_dir_all(&broken_dir);

    // What the resources say of each other.
    let namespace = one(&docs, "Namespace");
    let name = &namespace["metadata"]["name"];
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged",
        "hostPID and these capabilities pass only the privileged Pod Security level"
    );
    for doc in docs.iter().chain(&documents(venv, &operator_files())) {
        if doc["kind"] != "Namespace" {
            assert_eq!(&doc["metadata"]["namespace"], name, "{}", doc["kind"]);
        }
    }
    let daemonset = one(&docs, "DaemonSet");
    let pod = &daemonset["spec"]["template"];
    assert!(selects(
        &daemonset["spec"]["selector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    assert_eq!(pod["spec"]["hostPID"], true);
    let tolerations = pod["spec"]["tolerations"].as_array().unwrap();
    assert!(
        tolerations
            .iter()
            .any(|t| t["operator"] == "Exists" && t.get("key").is_none()),
        "every node, tainted or not: {tolerations:?}"
    );
    let container = container(daemonset);
    assert!(
        container.get("command").is_none(),
        "the image's entrypoint, sdt, runs"
    );
    let args = strings(&container["args"]);
    assert_eq!(args[0], "serve");
    let port = listen_port(&args);
    let ports = container["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["containerPort"], port);
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], port.to_string());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], "/metrics", "{probe}");
        assert_eq!(get["port"], "metrics", "{probe}");
    }
    let security = &container["securityContext"];
    assert_eq!(security["privileged"], false);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["runAsUser"], 0);
    assert!(!added_capabilities(daemonset).is_empty());
    // The programs' directory is the ConfigMap, the writable /tmp a
    // memory-backed emptyDir, /host the node's root.
    let programs = volume_at(daemonset, args.last().unwrap());
    let configmap = one(&docs, "ConfigMap");
    assert_eq!(programs["configMap"]["name"], configmap["metadata"]["name"]);
    assert!(volume_at(daemonset, "/tmp")["emptyDir"].is_object());
    assert_eq!(volume_at(daemonset, "/host")["hostPath"]["path"], "/");
    let data = configmap["data"].as_object().unwrap();
    assert!(data.keys().any(|k| k.ends_with(".bt")));
    for (key, text) in data {
        assert!(key.ends_with(".bt") || key.ends_with(".conf"), "{key}");
        // The node's files, as the pod sees them.
        for line in text.as_str().unwrap().lines() {
            for spec in ["usdt:/", "uprobe:/", "uretprobe:/"] {
                if let Some((_, path)) = line.split_once(spec) {
                    assert!(path.starts_with("host/"), "{key}: {line}");
                }
            }
        }
    }
    // The headless Service, and the ServiceMonitor that finds it.
    let service = one(&docs, "Service");
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert!(selects(
        &service["spec"]["selector"],
        &pod["metadata"]["labels"]
    ));
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(service_port["port"], port);
    assert_eq!(service_port["targetPort"], "metrics");
    let operator = documents(venv, &operator_files());
    let monitor = one(&operator, "ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service_port["name"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
}

/// A directory of its own in /tmp, which every user may pass through (as
/// a pod's root without CAP_DAC_READ_SEARCH must, to reach it through
/// /host), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sdt-deploy-{name}-{}", std::process::id()));
        let scratch = Scratch(dir);
        scratch.remove();
        std::fs::create_dir(&scratch.0).unwrap();
        std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        scratch
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// Removes the directory, once sure that nothing is mounted under it
    /// here: the pod's mounts (the node's root among them) live only in
    /// the mount namespaces of the commands, which have ended.
    fn remove(&self) {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let prefix = format!("{}/", self.0.display());
        for line in mounts.lines() {
            let point = line.split(' ').nth(4).unwrap();
            assert!(
                !point.starts_with(&prefix) && point != self.0.to_str().unwrap(),
                "{point} is mounted in the test's own namespace; not removing {}",
                self.0.display()
            );
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Podman with its storage (vfs), run and temporary directories in a
/// directory of the test's, in a mount namespace where /run and /var/lib
/// are empty: podman makes directories there otherwise (its network
/// configuration, a blob cache), which would outlive the test.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn command(&self, args: &[&str]) -> Command {
        let d = self.dir.display();
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib && exec \"$@\"")
            .args([
                "sh",
                "podman",
                "--storage-driver",
                "vfs",
                "--events-backend",
                "none",
            ])
            .arg(format!("--root={d}/root"))
            .arg(format!("--runroot={d}/run"))
            .arg(format!("--tmpdir={d}/tmp"))
            .args(args)
            .current_dir(repo());
        command
    }

    /// Runs podman; its standard output.
    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(out.status.success(), "podman {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The image, built and unpacked.
struct Image {
    /// Its size as podman reports it, in bytes.
    size: u64,
    /// Its config: `Entrypoint`, `Cmd`, ...
    config: Value,
    /// Its root file system.
    rootfs: PathBuf,
}

/// Builds the image with `podman build -f deploy/Containerfile .` from the
/// checkout, exports its root file system into `scratch/rootfs`, and
/// removes the image.
fn build_image(scratch: &Scratch) -> Image {
    let podman = Podman {
        dir: scratch.path().join("podman"),
    };
    let tag = format!("localhost/sdt-deploy-test:{}", std::process::id());
    podman.run(&[
        "build",
        "--quiet",
        "-f",
        "deploy/Containerfile",
        "-t",
        &tag,
        ".",
    ]);
    let inspected: Value = serde_json::from_str(&podman.run(&["image", "inspect", &tag])).unwrap();
    let size = inspected[0]["Size"].as_u64().unwrap();
    let config = inspected[0]["Config"].clone();
    let container = podman.run(&["create", &tag]);
    let tar = scratch.path().join("rootfs.tar");
    podman.run(&["export", "-o", tar.to_str().unwrap(), container.trim()]);
    podman.run(&["rm", container.trim()]);
    podman.run(&["rmi", &tag]);
    assert_eq!(
        podman.run(&["images", "--quiet"]).trim(),
        "",
        "no image left"
    );
    let rootfs = scratch.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let untar = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&rootfs)
        .status()
        .unwrap();
    assert!(untar.success());
    std::fs::remove_file(&tar).unwrap();
    Image {
        size,
        config,
        rootfs,
    }
}

/// Every file and directory under `root`, relative to it.
fn tree(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
                found.insert(format!("{relative}/"));
            } else {
                found.insert(relative);
            }
        }
    }
    found
}

/// Writes `files` into `dir` as kubelet writes a ConfigMap volume: the
/// files in a directory named for the time, `..data` a symlink to it, and
/// each file a symlink through `..data`. An update writes a new
/// directory, swaps `..data` to it with one rename, fixes the links and
/// removes the old directory.
fn kubelet_write(dir: &Path, generation: u32, files: &[(String, String)]) {
    let stamp = format!("..2026_11_27_00_00_0{generation}.000000000");
    std::fs::create_dir(dir.join(&stamp)).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(&stamp).join(name), text).unwrap();
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::os::unix::fs::symlink(&stamp, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !files.iter().any(|(f, _)| *f == name) {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    for (name, _) in files {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

/// The root file system of the image, entered the way a container
/// runtime enters it for the DaemonSet's pod.
struct Pod {
    root: PathBuf,
    configmap: PathBuf,
    hosts: PathBuf,
}

/// The pod's mounts, then sdt. The mount points are made beforehand, as a
/// runtime makes them; /sys is bound without what is mounted on it
/// (tracefs, cgroups), as a pod's fresh sysfs is; the image's files are
/// read-only.
const POD_SETUP: &str = r#"set -e
mount --bind "$ROOT" "$ROOT"
mount --rbind / "$ROOT/host"
mount -o remount,bind,ro "$ROOT/host"
mount -t proc proc "$ROOT/proc"
mount --bind /sys "$ROOT/sys"
mount -o remount,bind,ro "$ROOT/sys"
mount -t tmpfs -o mode=755 tmpfs "$ROOT/dev"
touch "$ROOT/dev/null"
mount --bind /dev/null "$ROOT/dev/null"
mount -t tmpfs -o mode=1777,size=16m tmpfs "$ROOT/tmp"
mount --bind "$CONFIGMAP" "$ROOT/etc/sdt"
mount -o remount,bind,ro "$ROOT/etc/sdt"
mount --bind "$HOSTS" "$ROOT/etc/hosts"
mount -o remount,bind,ro "$ROOT"
exec setpriv --no-new-privs --inh-caps=-all --bounding-set="$CAPS" chroot "$ROOT" /usr/bin/sdt "$@"
"#;

impl Pod {
    fn new(scratch: &Scratch, image: &Image) -> Pod {
        let root = image.rootfs.clone();
        for dir in ["host", "proc", "sys", "dev", "tmp", "etc/sdt"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("etc/hosts"), "").unwrap();
        let configmap = scratch.path().join("configmap");
        std::fs::create_dir(&configmap).unwrap();
        let hosts = scratch.path().join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.1 collector.test\n").unwrap();
        Pod {
            root,
            configmap,
            hosts,
        }
    }

    /// `sdt ARGS` in the pod, as root holding only `capabilities`
    /// (Kubernetes' names) and CAP_SYS_CHROOT, which the `chroot` that
    /// enters the root needs (a runtime enters it with pivot_root before
    /// it drops its own).
    fn sdt(&self, capabilities: &[String], args: &[&str]) -> Command {
        let mut caps = String::from("-all,+sys_chroot");
        for cap in capabilities {
            caps.push_str(&format!(",+{}", cap.to_lowercase()));
        }
        let mut command = Command::new("unshare");
        command
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                POD_SETUP,
                "sh",
            ])
            .args(args)
            .env("ROOT", &self.root)
            .env("CONFIGMAP", &self.configmap)
            .env("HOSTS", &self.hosts)
            .env("CAPS", caps)
            .stdin(Stdio::null());
        command
    }
}

/// A process of the node that fires `deploy:tick` on request.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Target {
    fn start(program: &Path) -> Target {
        Target::spawn(&mut Command::new(program))
    }

    /// The workload as `command` starts it (through `unshare`, say).
    fn spawn(command: &mut Command) -> Target {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
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

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Fires `deploy:tick` `n` times, with 1 to `n`.
    fn fire(&mut self, n: u32) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{n}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line, format!("fired {n}\n"));
    }

    /// Ends the input; the target exits.
    fn end(&mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A process the test started, its standard output and error read line
/// by line; killed by its PID if still running when dropped.
struct Started {
    child: Child,
    out: Receiver<String>,
    err: Receiver<String>,
    seen_out: Vec<String>,
    seen_err: Vec<String>,
}

fn lines_of(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl Started {
    fn spawn(command: &mut Command) -> Started {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = lines_of(child.stdout.take().unwrap());
        let err = lines_of(child.stderr.take().unwrap());
        Started {
            child,
            out,
            err,
            seen_out: Vec::new(),
            seen_err: Vec::new(),
        }
    }

    fn pump(&mut self) {
        self.seen_out.extend(self.out.try_iter());
        self.seen_err.extend(self.err.try_iter());
    }

    /// Waits for the `n`th line of standard output (`out`) or error
    /// containing `text`; returns it.
    fn wait_for(&mut self, out: bool, text: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.pump();
            let seen = if out { &self.seen_out } else { &self.seen_err };
            let matching: Vec<&String> = seen.iter().filter(|l| l.contains(text)).collect();
            if matching.len() >= n {
                return matching[n - 1].clone();
            }
            let ended = self.child.try_wait().unwrap();
            assert!(
                Instant::now() < deadline && ended.is_none(),
                "no `{text}` (#{n}); ended: {ended:?}; stdout: {:#?}; stderr: {:#?}",
                self.seen_out,
                self.seen_err
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Waits for the end, at most `within`; the status and everything
    /// printed.
    fn finish(mut self, within: Duration) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "did not end within {within:?}; stderr: {:#?}",
                self.seen_err
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The readers end with the pipes.
        self.seen_out.extend(self.out.iter());
        self.seen_err.extend(self.err.iter());
        (status, self.seen_out.join("\n"), self.seen_err.join("\n"))
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET path` over HTTP/1.0; the body of a 200 answer.
fn http_get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.contains(" 200 "), "{head}");
    body.to_string()
}

/// The value of the one sample of `/metrics` whose line starts `series`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The address in a `.../metrics` line.
fn metrics_address(line: &str) -> SocketAddr {
    let at = line.find("http://").unwrap() + "http://".len();
    let rest = &line[at..];
    rest[..rest.find('/').unwrap()].parse().unwrap()
}

/// Compiles a fixture of `tests/fixtures/deploy` into `out`.
fn compile(compiler: &str, source: &str, out: &Path) {
    let status = Command::new(compiler)
        .args(["-O2", "-o"])
        .arg(out)
        .arg(repo().join("tests/fixtures/deploy").join(source))
        .status()
        .unwrap();
    assert!(status.success(), "{compiler} {source}");
}

/// A command's status and output, for messages.
fn output_text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Runs `sql` in PostgreSQL 15's single-user mode on a cluster of its own
/// in `dir`, as the `postgres` user: each statement one transaction.
fn postgres_single_user(dir: &Path, sql: &str) {
    let chown = Command::new("chown")
        .arg("postgres:postgres")
        .arg(dir)
        .status()
        .unwrap();
    assert!(chown.success());
    let data = dir.join("data");
    let as_postgres = |program: &str| {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/{program}")])
            .current_dir(dir);
        command
    };
    let initdb = as_postgres("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres"])
        .output()
        .unwrap();
    assert!(initdb.status.success(), "{}", output_text(&initdb));
    let mut single = as_postgres("postgres")
        .arg("--single")
        .arg("-D")
        .arg(&data)
        .arg("postgres")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    single
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    let out = single.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
}

/// A stand-in for a collector: answers every HTTP request on `listener`
/// with 200 until `stop` is set; returns their request lines.
fn collector(
    listener: TcpListener,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut requests = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => panic!("accept: {e}"),
            };
            stream.set_nonblocking(false).unwrap();
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .unwrap();
            requests.push(request_line.trim().to_string());
        }
        requests
    })
}

/// What the image test needs: root, podman, the namespace tools, the
/// compilers, the static build and the venv (for the manifests).
fn image_requirements() -> Option<&'static Path> {
    let stripped = repo().join("target/static/stripped/sdt");
    let ok = sdt_testing::require_root()
        && require(
            have("podman"),
            "podman (Debian's podman; scripts/install-deps)",
        )
        && require(have("unshare"), "unshare (util-linux)")
        && require(have("setpriv"), "setpriv (util-linux)")
        && require(have("cc"), "cc")
        && require(have("c++"), "c++ (build-essential)")
        && require(
            stripped.is_file(),
            "target/static/stripped/sdt (bash scripts/build-static)",
        );
    if ok {
        venv()
    } else {
        None
    }
}

/// Why each capability the DaemonSet adds is there: a command that fails
/// without it.
enum Needs {
    /// `sdt run -p` of a process: loading programs, attaching.
    Run,
    /// `sdt list -p` of a process of another user or more capabilities:
    /// its /proc files.
    ListProcess,
    /// `sdt list -p` of a process whose program was deleted: only
    /// /proc/PID/map_files reaches it.
    ListDeleted,
    /// `sdt list` of a file in a directory only its owner may enter.
    ListPrivate,
}

fn needs(capability: &str) -> Needs {
    match capability {
        "BPF" | "PERFMON" => Needs::Run,
        "SYS_PTRACE" => Needs::ListProcess,
        "CHECKPOINT_RESTORE" => Needs::ListDeleted,
        "DAC_READ_SEARCH" => Needs::ListPrivate,
        other => panic!(
            "the DaemonSet adds {other}: add to this test a command that fails without it, \
             or take it out of the DaemonSet"
        ),
    }
}

#[test]
fn the_image_is_small_and_traces_the_node_with_only_the_daemonsets_capabilities() {
    let Some(venv) = image_requirements() else {
        return;
    };
    let started = Instant::now();
    let docs = documents(venv, &applied_files());
    let daemonset = one(&docs, "DaemonSet");
    let capabilities = added_capabilities(daemonset);
    let args = strings(&container(daemonset)["args"]);
    let programs: Vec<(String, String)> = one(&docs, "ConfigMap")["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();

    // The image: small, sdt as its entrypoint, the DaemonSet's command as
    // its own, and nothing in it but sdt and the two files that name root.
    let scratch = Scratch::new("image");
    let image = build_image(&scratch);
    assert!(
        image.size <= IMAGE_LIMIT,
        "the image weighs {} bytes",
        image.size
    );
    eprintln!(
        "deploy: the image weighs {} bytes ({:.1} MB)",
        image.size,
        image.size as f64 / 1e6
    );
    assert_eq!(strings(&image.config["Entrypoint"]), ["/usr/bin/sdt"]);
    assert_eq!(strings(&image.config["Cmd"]), args);
    let files: Vec<String> = tree(&image.rootfs).into_iter().collect();
    assert_eq!(
        files,
        [
            "etc/",
            "etc/group",
            "etc/passwd",
            "usr/",
            "usr/bin/",
            "usr/bin/sdt"
        ]
    );
    let pod = Pod::new(&scratch, &image);

    // The node's processes: run by root, one from a directory only its
    // owner (nobody) may enter, one whose program is deleted once it runs.
    let private = scratch.path().join("private");
    std::fs::create_dir(&private).unwrap();
    compile("cc", "target.c", &private.join("target"));
    compile("cc", "target.c", &private.join("deleted"));
    compile("c++", "throw.cc", &scratch.path().join("sdt-deploy-thr"));
    let mut target = Target::start(&private.join("target"));
    let deleted = Target::start(&private.join("deleted"));
    std::fs::remove_file(private.join("deleted")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let chown = Command::new("chown")
        .arg("65534:65534")
        .arg(&private)
        .status()
        .unwrap();
    assert!(chown.success());
    let private_in_pod = format!("/host{}/target", private.display());

    // Each command a capability is needed for, with all of them.
    let list = |caps: &[String], args: &[&str]| pod.sdt(caps, args).output().unwrap();
    let listed = |out: &Output| {
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" deploy:tick")
    };
    let out = list(&capabilities, &["list", "-p", &target.pid()]);
    assert!(listed(&out), "{}", output_text(&out));
    let out = list(&capabilities, &["list", "-p", &deleted.pid()]);
    assert!(listed(&out), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(deleted)"),
        "{}",
        output_text(&out)
    );
    let out = list(&capabilities, &["list", &private_in_pod]);
    assert!(listed(&out), "{}", output_text(&out));
    let run = |caps: &[String], pid: &str| {
        let mut command = pod.sdt(
            caps,
            &[
                "run",
                "-p",
                pid,
                "-e",
                "usdt::deploy:tick { @ticks = count(); @sum = sum(arg0); }",
            ],
        );
        command.env(NOTIFY, "1");
        Started::spawn(&mut command)
    };
    // Exact counts, and the end of the process ends sdt.
    let mut traced = run(&capabilities, &target.pid());
    traced.wait_for(true, NOTIFY, 1);
    target.fire(25);
    target.end();
    let (status, stdout, stderr) = traced.finish(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("@ticks: 25"), "{stdout}");
    assert!(stdout.contains("@sum: 325"), "{stdout}");

    // Each capability dropped in turn: what needs it fails.
    let target = Target::start(&private.join("target"));
    for capability in &capabilities {
        let fewer: Vec<String> = capabilities
            .iter()
            .filter(|c| *c != capability)
            .cloned()
            .collect();
        let (failed, stderr) = match needs(capability) {
            Needs::Run => {
                let (status, stdout, stderr) =
                    run(&fewer, &target.pid()).finish(Duration::from_secs(30));
                (!status.success() && !stdout.contains(NOTIFY), stderr)
            }
            Needs::ListProcess => {
                let out = list(&fewer, &["list", "-p", &target.pid()]);
                (
                    !listed(&out),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            }
            Needs::ListDeleted => {
                let out = list(&fewer, &["list", "-p", &deleted.pid()]);
                (
                    !listed(&out),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            }
            Needs::ListPrivate => {
                let out = list(&fewer, &["list", &private_in_pod]);
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                (
                    !listed(&out) && stderr.contains("Permission denied"),
                    stderr,
                )
            }
        };
        assert!(failed, "all went well without {capability}:\n{stderr}");
        eprintln!("deploy: without {capability}: {}", stderr.trim());
    }
    drop(target);
    drop(deleted);

    // sdt serve with the DaemonSet's arguments (on a loopback port the
    // kernel picks, not the pod's), the ConfigMap's programs in kubelet's
    // layout, and one more of the test's: a file of the node, by path,
    // in a directory only its owner may enter.
    let ticks = |text: &str| {
        (
            "ticks.bt".to_string(),
            format!("{text}usdt:{private_in_pod}:deploy:tick {{ @ticks = count(); }}\n"),
        )
    };
    let mut files = programs.clone();
    files.push(ticks(""));
    kubelet_write(&pod.configmap, 1, &files);
    let mut serve_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listen = serve_args.iter().position(|a| *a == "--listen").unwrap();
    serve_args[listen + 1] = "127.0.0.1:0";
    // The PostgreSQL program attaches where PostgreSQL 15 is installed;
    // on a node without it, it is served as down.
    let have_postgres = require(
        Path::new(PG_BIN).join("postgres").exists(),
        "PostgreSQL 15 (scripts/install-deps)",
    );
    let mut serve = Started::spawn(&mut pod.sdt(&capabilities, &serve_args));
    let metrics = metrics_address(&serve.wait_for(false, "/metrics", 1));
    let up: Vec<&str> = files
        .iter()
        .map(|(name, _)| name.strip_suffix(".bt").unwrap())
        .filter(|name| have_postgres || *name != "postgresql")
        .collect();
    for program in &up {
        serve.wait_for(false, &format!("{program}: up"), 1);
    }
    if !have_postgres {
        serve.wait_for(false, "postgresql: ", 1);
    }
    let text = http_get(metrics, "/metrics");
    for (name, _) in &files {
        let program = name.strip_suffix(".bt").unwrap();
        let series = format!("sdt_up{{program=\"{program}\"}}");
        let want = if up.contains(&program) { 1.0 } else { 0.0 };
        assert_eq!(sample(&text, &series), Some(want), "{text}");
    }
    // A process started now is traced (probes attach by path).
    let mut target = Target::start(&private.join("target"));
    target.fire(40);
    // C++ exceptions through the node's libstdc++, by command.
    let thrown = Command::new(scratch.path().join("sdt-deploy-thr"))
        .arg("17")
        .output()
        .unwrap();
    assert!(thrown.status.success(), "{}", output_text(&thrown));
    // PostgreSQL's transactions: 3 committed and 2 aborted of this
    // cluster's (its initdb and other clusters of the machine add theirs).
    if have_postgres {
        let pg = scratch.path().join("postgres");
        std::fs::create_dir(&pg).unwrap();
        postgres_single_user(
            &pg,
            "SELECT 1;\nSELECT 2;\nSELECT 3;\nBEGIN;\nROLLBACK;\nBEGIN;\nROLLBACK;\n",
        );
    }
    let text = http_get(metrics, "/metrics");
    assert_eq!(
        sample(&text, "sdt_ticks_total{program=\"ticks\"}"),
        Some(40.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "sdt_cxx_exceptions_thrown_total{program=\"cxx-exceptions\",command=\"sdt-deploy-thr\"}"
        ),
        Some(17.0),
        "{text}"
    );
    if have_postgres {
        for (outcome, least) in [("commit", 3.0), ("abort", 2.0)] {
            let series = format!(
                "sdt_postgresql_transactions_total{{program=\"postgresql\",outcome=\"{outcome}\"}}"
            );
            let value = sample(&text, &series).unwrap_or_else(|| panic!("no {series}:\n{text}"));
            assert!(value >= least, "{series} {value}");
        }
    }

    // The ConfigMap changes as kubelet changes it (one rename of
    // `..data`); today SIGHUP reloads (see the ignored test below).
    let mut files = programs.clone();
    files.push(ticks("// sdt: name @ticks = deploy_ticks\n"));
    kubelet_write(&pod.configmap, 2, &files);
    serve.signal(rustix::process::Signal::HUP);
    serve.wait_for(false, "ticks: up", 2);
    target.fire(10);
    let text = http_get(metrics, "/metrics");
    assert_eq!(
        sample(&text, "sdt_deploy_ticks_total{program=\"ticks\"}"),
        Some(10.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sdt_ticks_total{program=\"ticks\"}"),
        None,
        "{text}"
    );
    // The unchanged programs kept their counters.
    assert_eq!(
        sample(
            &text,
            "sdt_cxx_exceptions_thrown_total{program=\"cxx-exceptions\",command=\"sdt-deploy-thr\"}"
        ),
        Some(17.0),
        "{text}"
    );
    serve.signal(rustix::process::Signal::TERM);
    let (status, _, stderr) = serve.finish(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{stderr}");
    drop(target);

    // --otlp to a collector named in the pod's /etc/hosts: the static
    // binary resolves names without NSS modules.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let received = collector(listener, stop.clone());
    let url = format!("http://collector.test:{port}");
    let out = pod
        .sdt(
            &capabilities,
            &[
                "run",
                "--otlp",
                &url,
                "-e",
                "BEGIN { @pushed = count(); exit(); }",
            ],
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let requests = received.join().unwrap();
    assert!(
        requests.iter().any(|r| r == "POST /v1/metrics HTTP/1.1"),
        "{requests:?}"
    );
    eprintln!("deploy: the image test took {:?}", started.elapsed());
}

/// What `sdt serve` must do in a pod: reload when kubelet updates the
/// ConfigMap, with no signal (nothing in the pod can send one).
#[test]
fn a_configmap_update_reloads_sdt_serve_without_a_signal() {
    let Some(venv) = image_requirements() else {
        return;
    };
    let docs = documents(venv, &applied_files());
    let daemonset = one(&docs, "DaemonSet");
    let capabilities = added_capabilities(daemonset);
    let args = strings(&container(daemonset)["args"]);
    let scratch = Scratch::new("watch");
    let image = build_image(&scratch);
    let pod = Pod::new(&scratch, &image);
    let bin = scratch.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    compile("cc", "target.c", &bin.join("target"));
    let path = format!("/host{}/target", bin.display());
    let program = |map: &str| format!("usdt:{path}:deploy:tick {{ @{map} = count(); }}\n");
    kubelet_write(
        &pod.configmap,
        1,
        &[
            ("a.bt".to_string(), program("a")),
            ("b.bt".to_string(), program("b")),
        ],
    );
    let mut serve_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listen = serve_args.iter().position(|a| *a == "--listen").unwrap();
    serve_args[listen + 1] = "127.0.0.1:0";
    let mut serve = Started::spawn(&mut pod.sdt(&capabilities, &serve_args));
    let metrics = metrics_address(&serve.wait_for(false, "/metrics", 1));
    serve.wait_for(false, "a: up", 1);
    serve.wait_for(false, "b: up", 1);
    let mut target = Target::start(&bin.join("target"));
    target.fire(5);

    // b changes, c is new, a stays: one rename of ..data, and no signal.
    kubelet_write(
        &pod.configmap,
        2,
        &[
            ("a.bt".to_string(), program("a")),
            ("b.bt".to_string(), program("b2")),
            ("c.bt".to_string(), program("c")),
        ],
    );
    serve.wait_for(false, "b: up", 2);
    serve.wait_for(false, "c: up", 1);
    target.fire(7);
    let text = http_get(metrics, "/metrics");
    assert_eq!(
        sample(&text, "sdt_a_total{program=\"a\"}"),
        Some(12.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sdt_b2_total{program=\"b\"}"),
        Some(7.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sdt_c_total{program=\"c\"}"),
        Some(7.0),
        "{text}"
    );
    assert_eq!(sample(&text, "sdt_b_total{program=\"b\"}"), None, "{text}");
    // A removed program stops.
    kubelet_write(&pod.configmap, 3, &[("a.bt".to_string(), program("a"))]);
    serve.wait_for(false, "b: removed", 1);
    serve.wait_for(false, "c: removed", 1);
    // No reload for nothing: a stays up once, however long it runs.
    std::thread::sleep(Duration::from_secs(2));
    serve.pump();
    assert_eq!(
        serve
            .seen_err
            .iter()
            .filter(|l| l.contains("a: up"))
            .count(),
        1,
        "{:#?}",
        serve.seen_err
    );
    serve.signal(rustix::process::Signal::TERM);
    let (status, _, stderr) = serve.finish(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{stderr}");
}

/// What `--cgroup` is for: a pod's processes, in their own cgroup and
/// their own PID and mount namespaces, traced by sdt from the image's
/// root, exactly, and none of the same program's hits outside the pod;
/// the metrics say which cgroup they count.
#[test]
fn a_pod_is_traced_by_its_cgroup_and_its_metrics_say_so() {
    let Some(venv) = image_requirements() else {
        return;
    };
    let docs = documents(venv, &applied_files());
    let capabilities = added_capabilities(one(&docs, "DaemonSet"));
    let cgroup = sdt_testing::cgroup::Cgroup::create("pod");
    if !sdt_testing::require(cgroup.is_some(), "a writable cgroup v2 hierarchy") {
        return;
    }
    let cgroup = cgroup.unwrap();
    let scratch = Scratch::new("pod-cgroup");
    let image = build_image(&scratch);
    let pod = Pod::new(&scratch, &image);
    let bin = scratch.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    compile("cc", "target.c", &bin.join("target"));
    // The pod's process enters its cgroup, then its namespaces.
    let mut inside = Target::spawn(Command::new("sh").args([
        "-c",
        r#"echo $$ > "$1/cgroup.procs" && exec unshare --pid --mount --fork "$2""#,
        "sh",
        &cgroup.dir().display().to_string(),
        &bin.join("target").display().to_string(),
    ]));
    let mut outside = Target::start(&bin.join("target"));
    let script = format!(
        "usdt:/host{}/target:deploy:tick {{ @ticks = count(); }}",
        bin.display()
    );
    let host_cgroup = format!("/host{}", cgroup.dir().display());
    let mut command = pod.sdt(
        &capabilities,
        &[
            "run",
            "--cgroup",
            &host_cgroup,
            "--serve",
            "127.0.0.1:0",
            "-e",
            &script,
        ],
    );
    command.env(NOTIFY, "1");
    let mut run = Started::spawn(&mut command);
    let metrics = metrics_address(&run.wait_for(false, "/metrics", 1));
    run.wait_for(true, NOTIFY, 1);
    inside.fire(6);
    outside.fire(4);
    let name = format!("/{}", cgroup.dir().file_name().unwrap().to_string_lossy());
    let text = http_get(metrics, "/metrics");
    assert_eq!(
        sample(
            &text,
            &format!("sdt_ticks_total{{program=\"-e\",cgroup=\"{name}\"}}")
        ),
        Some(6.0),
        "{text}"
    );
    run.signal(rustix::process::Signal::INT);
    let (status, stdout, stderr) = run.finish(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(stdout.contains("@ticks: 6"), "{stdout}");
    inside.end();
    outside.end();
}
