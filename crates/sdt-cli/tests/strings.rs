//! Strings on pages the traced program never touched, read on every hit,
//! and reads that fail, reported.
//!
//! The fixture (`tests/fixtures/strings/requests.c`) passes "GET" 700
//! times and "POST" 300 times, each from a page of `.rodata` that is not
//! in its page tables when the probe fires, as a string literal it never
//! reads itself is not; built as a PIE program, a non-PIE program and a
//! shared library. A program that cannot fault the page in reads nothing
//! there (bpftrace 0.17 prints `@r[]: 1000`); sdt must count every
//! string, under `-c`, `-p` and system-wide, in `sdt run` (`str()`,
//! `str(p, n)`, `buf()`, a struct's char array) and in `sdt trace -s`,
//! and in the metrics of `--serve`. With `bad`, one more hit passes a
//! pointer to an unmapped page: that hit still counts, and the run says
//! which read failed, where, and with which error. An attach point
//! without a file finds the library `dlopen` maps, also where another
//! attach point named it.
//!
//! They attach real probes, so they need root. With `CI=true` a missing
//! privilege or tool fails the test; elsewhere it prints a loud SKIP.

mod list_common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;

/// The fixture, three ways.
struct Built {
    pie: PathBuf,
    nopie: PathBuf,
    /// A PIE program whose probes are in `librequests.so`.
    shared: PathBuf,
    library: PathBuf,
    /// A program that opens the library with `dlopen` once it runs.
    loader: PathBuf,
}

fn built() -> Option<Built> {
    if !sdt_testing::require_root() || !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    let c = |file: &str| C::new(format!("tests/fixtures/strings/{file}")).flags(&["-O2", "-g"]);
    let program = |flags: &[&str], out: &str| {
        c("untouched.c")
            .source("tests/fixtures/strings/requests.c")
            .flags(flags)
            .output(out)
            .build()
    };
    let library = c("requests.c")
        .flags(&["-fPIC", "-shared"])
        .output("librequests.so")
        .build();
    Some(Built {
        pie: program(&["-fPIE", "-pie"], "untouched-pie"),
        nopie: program(&["-fno-pie", "-no-pie"], "untouched-nopie"),
        shared: c("untouched.c")
            .link(&library)
            .output("untouched-shared")
            .build(),
        loader: c("loader.c").libs(&["-ldl"]).build(),
        library,
    })
}

/// A copy of `file` for one test alone: probes attached system-wide by
/// path must not see another test's runs.
fn own_copy(file: &Path, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("strings")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(file.file_name().unwrap());
    let _ = std::fs::remove_file(&copy);
    std::fs::copy(file, &copy).unwrap();
    copy
}

/// The script: every way `sdt run` reads the strings. Under `-c` and
/// `-p` the run ends with the process; system-wide, `exit()` at
/// `fleet:done` ends it.
fn script(object: &Path, exit_at_done: bool) -> String {
    let o = object.display();
    let done = if exit_at_done {
        format!("usdt:{o}:fleet:done {{ exit(); }}\n")
    } else {
        String::new()
    };
    format!(
        "usdt:{o}:fleet:req {{ @hits = count(); @str[str(arg0)] = count(); \
         @counted[str(arg0, arg2 + 1)] = count(); @buf[buf(arg0, arg2)] = count(); \
         @member[((struct request *)arg3)->method] = count(); }}\n{done}"
    )
}

/// `@name[key]: value` lines of a map, from text output.
fn map_lines(stdout: &str, name: &str) -> BTreeMap<String, i64> {
    let prefix = format!("@{name}[");
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (key, value) = rest.split_once("]: ")?;
            Some((key.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

fn counts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Every read of the script counted 700 GETs and 300 POSTs, and nothing
/// failed.
fn assert_every_string_read(out: &Output, what: &str) {
    assert_no_panic(out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {stderr}");
    let want = counts(&[("GET", 700), ("POST", 300)]);
    for map in ["str", "counted", "buf", "member"] {
        assert_eq!(map_lines(&stdout, map), want, "{what}: @{map}\n{stdout}");
    }
    assert!(stdout.contains("@hits: 1000"), "{what}: {stdout}");
    assert!(!stderr.contains("failed"), "{what}: {stderr}");
}

fn run(args: &[&str]) -> Output {
    sdt().arg("run").args(args).output().expect("run sdt")
}

#[test]
fn every_string_is_read_under_c_in_pie_non_pie_and_a_library() {
    let Some(b) = built() else { return };
    for (program, object) in [
        (&b.pie, &b.pie),
        (&b.nopie, &b.nopie),
        (&b.shared, &b.library),
    ] {
        let command = format!("{} 1000", program.display());
        let out = run(&["-c", &command, "-e", &script(object, false)]);
        assert_every_string_read(&out, &command);
    }
    // Through perf events too, the paths of kernels before uprobe_multi.
    for mechanism in ["perf-link", "perf-ioctl"] {
        let command = format!("{} 1000", b.pie.display());
        let script = script(&b.pie, false);
        let out = run(&["--attach-with", mechanism, "-c", &command, "-e", &script]);
        assert_every_string_read(&out, mechanism);
    }
}

#[test]
fn every_string_is_read_in_a_library_opened_later() {
    let Some(b) = built() else { return };
    let command = format!("{} {} 1000", b.loader.display(), b.library.display());
    let out = run(&[
        "-c",
        &command,
        "-e",
        "usdt::fleet:req { @str[str(arg0)] = count(); }",
    ]);
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("sdt: attached usdt:"), "{stderr}");
    assert_eq!(
        map_lines(&stdout, "str"),
        counts(&[("GET", 700), ("POST", 300)]),
        "{stderr}"
    );
    assert!(!stderr.contains("failed"), "{stderr}");
}

/// An attach point without a file means every object the process maps,
/// also one that another attach point attached to by name before the
/// process mapped it: `fleet:req` counts in the library `fleet:done`
/// named.
#[test]
fn an_attach_point_without_a_file_also_attaches_where_another_named_the_object() {
    let Some(b) = built() else { return };
    let command = format!("{} {} 1000", b.loader.display(), b.library.display());
    let script = format!(
        "usdt:{}:fleet:done {{ @done = count(); }}\nusdt::fleet:req {{ @req = count(); }}",
        b.library.display()
    );
    let out = run(&["-c", &command, "-e", &script]);
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("@done: 1\n"), "{stdout}\n{stderr}");
    assert!(stdout.contains("@req: 1000\n"), "{stdout}\n{stderr}");
}

#[test]
fn every_string_is_read_under_p() {
    let Some(b) = built() else { return };
    // Copies of their own: another test's tracer of the same file would
    // raise the semaphore the fixture waits for.
    let pie = own_copy(&b.pie, "p");
    let library = own_copy(&b.library, "p");
    let loaded = [b.loader.as_os_str(), library.as_os_str()];
    for (command, object) in [(vec![pie.as_os_str()], &pie), (loaded.to_vec(), &library)] {
        // It waits for the tracer to raise its semaphore.
        let mut child = Command::new(command[0])
            .args(&command[1..])
            .arg("1000")
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let out = run(&["-p", &pid, "-e", &script(object, false)]);
        let status = child.wait().unwrap();
        assert!(status.success(), "the fixture: {status}");
        assert_every_string_read(&out, &format!("-p {pid} ({})", object.display()));
    }
}

#[test]
fn every_string_is_read_system_wide() {
    let Some(b) = built() else { return };
    let object = own_copy(&b.nopie, "wide");
    let mut sdt = sdt()
        .args(["run", "-e", &script(&object, true)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(sdt.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("Attaching") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "sdt ended early");
    }
    let fixture = Command::new(&object).arg("1000").output().unwrap();
    assert!(fixture.status.success(), "{fixture:?}");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let mut stdout = Vec::new();
    sdt.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    let status = sdt.wait().unwrap();
    let out = Output {
        status,
        stdout,
        stderr: rest.into_bytes(),
    };
    assert_every_string_read(&out, "system-wide");
}

#[test]
fn sdt_trace_reads_every_string() {
    let Some(b) = built() else { return };
    let command = format!("{} 1000", b.shared.display());
    let out = sdt()
        .args(["trace", "--json", "-s", "0:2", "-s", "3", "-c", &command])
        .arg("fleet:req")
        .output()
        .unwrap();
    assert_no_panic(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mut seen: BTreeMap<(String, String), i64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let hit: serde_json::Value = serde_json::from_str(line).unwrap();
        if hit.get("summary").is_some() {
            continue;
        }
        let text = |n: usize| hit["args"][n].as_str().unwrap_or("<null>").to_string();
        *seen.entry((text(0), text(3))).or_default() += 1;
    }
    let want: BTreeMap<(String, String), i64> = [
        (("GET".to_string(), "GET".to_string()), 700),
        (("POST".to_string(), "POST".to_string()), 300),
    ]
    .into();
    assert_eq!(seen, want, "{stderr}");
    assert!(!stderr.contains("failed"), "{stderr}");
}

#[test]
fn a_read_that_fails_is_counted_and_reported_with_its_probe_and_place() {
    let Some(b) = built() else { return };
    let command = format!("{} 1000 bad", b.pie.display());
    let object = b.pie.display().to_string();
    let script = script(&b.pie, false);
    let out = run(&["-c", &command, "-e", &script]);
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The hit counts; what it read is empty.
    assert!(stdout.contains("@hits: 1001"), "{stdout}");
    assert_eq!(
        map_lines(&stdout, "str"),
        counts(&[("", 1), ("GET", 700), ("POST", 300)])
    );
    // Each read of it is reported, once, with its place in the script.
    let probe = format!("usdt:{object}:fleet:req");
    for read in [
        "str(arg0)",
        "str(arg0, arg2 + 1)",
        "buf(arg0, arg2)",
        "((struct request *)arg3)->method",
    ] {
        let at = script.find(read).unwrap();
        let column = at - script[..at].rfind('\n').map_or(0, |n| n + 1) + 1;
        let line = script[..at].matches('\n').count() + 1;
        let want = format!(
            "sdt: {read} at stdin:{line}:{column}-{} in {probe} failed 1 time, error -14 (EFAULT",
            column + read.len()
        );
        assert_eq!(
            stderr.lines().filter(|l| l.starts_with(&want)).count(),
            1,
            "{want}\n{stderr}"
        );
    }

    // In JSON, as an object of its own.
    let out = run(&["-f", "json", "-c", &command, "-e", &script]);
    assert!(out.status.success());
    let failed: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "failed_reads")
        .collect();
    assert_eq!(failed.len(), 1, "{}", String::from_utf8_lossy(&out.stdout));
    let reads = failed[0]["data"].as_array().unwrap();
    assert_eq!(reads.len(), 4, "{reads:?}");
    let first = &reads[0];
    assert_eq!(first["read"], "str(arg0)");
    assert_eq!(first["probe"], probe.as_str());
    assert_eq!(first["count"], 1);
    assert_eq!(first["error"], -14);
    assert!(
        first["at"].as_str().unwrap().starts_with("stdin:1:"),
        "{first}"
    );

    // sdt trace shows the hit as unreadable, and says so at the end.
    let out = sdt()
        .args(["trace", "-s", "0", "-c", &command, "fleet:req"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.matches("<unreadable 0x").count(), 1, "{stdout}");
    assert_eq!(stdout.matches("arg0=\"GET\"").count(), 700);
    assert!(
        stderr.contains("sdt: arg0 as a string in usdt::fleet:req failed 1 time, error -14"),
        "{stderr}"
    );
}

/// `sdt run --serve`: the labels count every string, and the failed read
/// is a series of `sdt_failed_reads_total`.
#[test]
fn serve_exports_every_string_and_the_failed_read() {
    let Some(b) = built() else { return };
    let object = own_copy(&b.pie, "serve");
    let o = object.display();
    let dir = object.parent().unwrap();
    let script = dir.join("methods.bt");
    let text = format!("usdt:{o}:fleet:req {{ @requests[str(arg0)] = count(); }}\n");
    std::fs::write(&script, &text).unwrap();
    let column = text.find("str(arg0)").unwrap() + 1;
    let sdt = Serving::start(&script);
    let metrics = sdt.address;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http_get(metrics).contains("sdt_up{program=\"methods\"} 1") {
        assert!(Instant::now() < deadline, "never up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let fixture = Command::new(&object)
        .args(["1000", "bad"])
        .output()
        .unwrap();
    assert!(fixture.status.success(), "{fixture:?}");
    let want = [
        "sdt_requests_total{program=\"methods\",arg0=\"GET\"} 700".to_string(),
        "sdt_requests_total{program=\"methods\",arg0=\"POST\"} 300".to_string(),
        "sdt_requests_total{program=\"methods\",arg0=\"\"} 1".to_string(),
        format!(
            "sdt_failed_reads_total{{program=\"methods\",probe=\"usdt:{o}:fleet:req\",read=\"str(arg0)\",at=\"{}:1:{column}-{}\"}} 1",
            script.display(),
            column + "str(arg0)".len()
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = http_get(metrics);
        let missing: Vec<&String> = want.iter().filter(|w| !text.contains(w.as_str())).collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "missing {missing:#?} in\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    sdt.stop();
}

/// `sdt run --serve 127.0.0.1:0 SCRIPT`, ended by its PID.
struct Serving {
    child: Child,
    address: SocketAddr,
}

impl Serving {
    fn start(script: &Path) -> Serving {
        let mut child = sdt()
            .args(["run", "--serve", "127.0.0.1:0"])
            .arg(script)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("/metrics") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "sdt ended early");
        }
        // Keep reading, so that sdt never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let at = line.find("http://").unwrap() + "http://".len();
        let rest = &line[at..];
        let address = rest[..rest.find('/').unwrap()].parse().unwrap();
        Serving { child, address }
    }

    fn stop(mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        self.child.wait().unwrap();
    }
}

fn http_get(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}
