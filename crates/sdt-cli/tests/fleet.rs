//! Metrics and spans for a fleet, for real: Debian's Prometheus scraping
//! `sdt run --serve`, an OTLP receiver decoding what `sdt run --otlp`
//! pushes with the OpenTelemetry project's own protobuf definitions
//! (Python's `opentelemetry-proto`), collectors that stall or refuse, and
//! `sdt serve` with a broken program, a changed one and a restarted
//! target. The fixture (`tests/fixtures/fleet/requests.c`) fires known
//! counts and known latencies. And the way sdt is deployed: the static
//! binary of `scripts/build-static` in an empty root, and the command of
//! `contrib/sdt.service` run with only the unit's capabilities.
//!
//! They attach real probes and run real servers on loopback ports the
//! kernel picks; every process they start is ended by its PID. With
//! `CI=true` a missing privilege or tool fails the test; elsewhere it
//! prints a loud SKIP.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use sdt_testing::fixture::C;
use serde_json::Value;

fn sdt() -> Command {
    Command::new(sdt_testing::sdt_binary())
}

/// A copy of the fixture of its own for test `name`: probes attached by
/// path follow a file, so tests that run at once must not share one.
fn fixture(name: &str) -> Option<PathBuf> {
    let built = built()?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fleet")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("requests");
    let _ = std::fs::remove_file(&copy);
    std::fs::copy(built, &copy).unwrap();
    Some(copy)
}

/// The fixture, built once.
fn built() -> Option<PathBuf> {
    if !sdt_testing::require_root() || !sdt_testing::require(sdt_testing::have("cc"), "cc") {
        return None;
    }
    Some(
        C::new("tests/fixtures/fleet/requests.c")
            .flags(&["-O2"])
            .build(),
    )
}

/// Runs the fixture: `n` requests, `works` pieces of work.
fn fire(fixture: &Path, n: u32, works: u32) -> Output {
    let out = Command::new(fixture)
        .args([n.to_string(), works.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    out
}

/// A process the test started, its standard error read line by line.
struct Started {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Started {
    fn spawn(command: &mut Command) -> Started {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Started {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line of standard error containing `text`; returns it.
    fn wait_for(&mut self, text: &str) -> String {
        self.wait_for_nth(text, 1)
    }

    /// Waits for the `n`th line of standard error containing `text`,
    /// counting those seen before; returns it.
    fn wait_for_nth(&mut self, text: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let matching: Vec<&String> = self.seen.iter().filter(|l| l.contains(text)).collect();
            if matching.len() >= n {
                return matching[n - 1].clone();
            }
            assert!(
                Instant::now() < deadline,
                "no `{text}` (#{n}) on standard error; seen: {:#?}",
                self.seen
            );
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(line);
            }
        }
    }

    /// The address of `.../metrics` in a line.
    fn metrics_address(&mut self) -> SocketAddr {
        let line = self.wait_for("/metrics");
        let at = line.find("http://").unwrap() + "http://".len();
        let rest = &line[at..];
        rest[..rest.find('/').unwrap()].parse().unwrap()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Sends SIGTERM and waits for the end, at most `within`.
    fn stop(mut self, within: Duration) -> std::process::ExitStatus {
        self.signal(rustix::process::Signal::TERM);
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("did not end within {within:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// `GET path` over HTTP/1.0; the body.
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

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The program of the metrics tests: requests by method and status
/// (named by a pragma), by command (named from the key), and their
/// latencies.
fn requests_script(fixture: &Path) -> String {
    let f = fixture.display();
    format!(
        "// sdt: labels @requests = method, status\n\
         usdt:{f}:fleet:request {{ @requests[str(arg0), arg1] = count(); @by_command[comm] = count(); @latency_ns = hist(arg2); }}\n"
    )
}

/// `n` requests of the fixture: how many of each (method, status).
fn expected(n: u32) -> BTreeMap<(&'static str, u32), u32> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let method = if i % 4 == 0 { "POST" } else { "GET" };
        let status = if i % 10 == 0 { 500 } else { 200 };
        *counts.entry((method, status)).or_default() += 1;
    }
    counts
}

/// Percent-encodes a query for a URL.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The scalar or single-sample result of a Prometheus query, if any.
fn prometheus_query(prometheus: SocketAddr, query: &str) -> Option<f64> {
    let body = http_get(
        prometheus,
        &format!("/api/v1/query?query={}", encode(query)),
    );
    let reply: Value = serde_json::from_str(&body).ok()?;
    let result = &reply["data"]["result"];
    let value = match result.as_array() {
        Some(samples) if samples.len() == 1 => &samples[0]["value"][1],
        Some(_) => return None,
        None => &result[1],
    };
    value.as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_known_counts_and_latencies() {
    let Some(fixture) = fixture("prometheus") else {
        return;
    };
    let fixture = fixture.as_path();
    if !sdt_testing::require(
        sdt_testing::have("prometheus"),
        "Debian's prometheus (scripts/install-deps)",
    ) {
        return;
    }
    let dir = temp_dir("fleet-prometheus");
    let script = write_script(&dir, "reqs.bt", &requests_script(fixture));
    let mut sdt = Started::spawn(sdt().args(["run", "--serve", "127.0.0.1:0"]).arg(&script));
    let metrics = sdt.metrics_address();
    // Up once the probes are attached (system-wide, by path).
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&http_get(metrics, "/metrics"), "sdt_up{program=\"reqs\"}") != Some(1.0) {
        assert!(Instant::now() < deadline, "never up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let n = 1000;
    fire(fixture, n, 0);

    let prometheus_port = free_port();
    let config = write_script(
        &dir,
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sdt\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    );
    let prometheus_address: SocketAddr = format!("127.0.0.1:{prometheus_port}").parse().unwrap();
    let _prometheus = Started::spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={prometheus_address}")),
    );
    let get_200 = "sdt_requests_total{method=\"GET\",status=\"200\"}";
    let want = expected(n);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = TcpStream::connect(prometheus_address).is_ok()
            && prometheus_query(prometheus_address, get_200)
                == Some(f64::from(want[&("GET", 200)]));
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never saw {get_200} = {}; /metrics has:\n{}",
            want[&("GET", 200)],
            http_get(metrics, "/metrics")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Every series, by the label names the pragma gave.
    for ((method, status), count) in &want {
        let query = format!("sdt_requests_total{{method=\"{method}\",status=\"{status}\"}}");
        assert_eq!(
            prometheus_query(prometheus_address, &query),
            Some(f64::from(*count)),
            "{query}"
        );
    }
    // A label named from the key expression `comm`.
    let by_command = "sdt_by_command_total{comm=\"requests\"}";
    assert_eq!(
        prometheus_query(prometheus_address, by_command),
        Some(f64::from(n))
    );
    // Half the latencies are 1000 ns, half 300000 ns.
    let quantile = |q: f64| {
        prometheus_query(
            prometheus_address,
            &format!("histogram_quantile({q}, sdt_latency_ns_bucket)"),
        )
        .unwrap()
    };
    let (low, high) = (quantile(0.25), quantile(0.75));
    assert!(511.0 < low && low <= 1023.0, "p25 {low}, in [512, 1024)");
    assert!(
        262_143.0 < high && high <= 524_287.0,
        "p75 {high}, in [256K, 512K)"
    );
    let sum = prometheus_query(prometheus_address, "sdt_latency_ns_sum").unwrap();
    assert_eq!(
        sum,
        f64::from(n / 2) * 1000.0 + f64::from(n / 2) * 300_000.0
    );
    assert_eq!(
        prometheus_query(prometheus_address, "sdt_up{program=\"reqs\"}"),
        Some(1.0)
    );
    // A scrape reset nothing: the counter is whole on /metrics too.
    let text = http_get(metrics, "/metrics");
    assert_eq!(
        sample(
            &text,
            "sdt_requests_total{program=\"reqs\",method=\"GET\",status=\"200\"}"
        ),
        Some(f64::from(want[&("GET", 200)]))
    );
    assert!(sdt.stop(Duration::from_secs(10)).success());
}

/// The venv `scripts/install-deps` makes for the receiver.
fn receiver_python() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/venv/bin/python");
    let works = Command::new(&python)
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    sdt_testing::require(
        works,
        "Python's opentelemetry-proto in target/venv (scripts/install-deps)",
    )
    .then_some(python)
}

/// The OTLP receiver, ended when dropped (also when a test fails).
struct Collector(Child);

impl Collector {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The OTLP receiver in `mode`, and its port.
fn receiver(python: &Path, mode: &str) -> (Collector, u16, mpsc::Receiver<String>) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fleet/otlp_receiver.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the receiver's port")
        .parse()
        .unwrap();
    (Collector(child), port, rx)
}

fn span_script(fixture: &Path) -> String {
    let f = fixture.display();
    format!(
        "{}// sdt: span work = usdt:{f}:fleet:work__start .. usdt:{f}:fleet:work__done with job = str(arg1)\n\
         usdt:{f}:fleet:work__start {{ printf(\"start %d\\n\", arg0); }}\n",
        requests_script(fixture)
    )
}

#[test]
fn an_otlp_receiver_decodes_the_metrics_and_the_spans() {
    let Some(fixture) = fixture("otlp") else {
        return;
    };
    let fixture = fixture.as_path();
    let Some(python) = receiver_python() else {
        return;
    };
    let (mut receiver, port, messages) = receiver(&python, "answer");
    let dir = temp_dir("fleet-otlp");
    let script = write_script(&dir, "work.bt", &span_script(fixture));
    let (n, works) = (1000, 3);
    let out = sdt()
        .args(["run", "--otlp", &format!("http://127.0.0.1:{port}")])
        .args(["--otlp-interval", "0.3", "--service-name", "fleet-test"])
        .arg("-c")
        .arg(format!("{} {n} {works}", fixture.display()))
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The span records are not in the output; the script's own printf is.
    assert!(!stdout.contains("__sdt"), "{stdout}");
    assert_eq!(stdout.matches("start ").count(), works as usize, "{stdout}");
    // What the receiver decoded, once sdt has ended (it pushes at the end).
    std::thread::sleep(Duration::from_millis(300));
    receiver.stop();
    let decoded: Vec<Value> = messages
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    assert!(decoded
        .iter()
        .all(|m| m["content_type"] == "application/x-protobuf"));
    // The last metrics push has the whole counts.
    let last = decoded
        .iter()
        .rev()
        .find(|m| m["signal"] == "metrics")
        .expect("metrics were pushed");
    assert_eq!(last["resource"]["service.name"], "fleet-test");
    let metric = |name: &str| {
        last["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {last}"))
            .clone()
    };
    let requests = metric("sdt_requests");
    assert_eq!(requests["kind"], "sum");
    assert_eq!(requests["monotonic"], true);
    for ((method, status), count) in expected(n) {
        let point = requests["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| {
                p["attributes"]["method"] == method
                    && p["attributes"]["status"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        == Some(status)
            })
            .unwrap_or_else(|| panic!("no {method} {status} in {requests}"));
        assert_eq!(point["value"], count, "{method} {status}");
    }
    let latency = metric("sdt_latency_ns");
    let point = &latency["points"][0];
    assert_eq!(point["count"], n);
    assert_eq!(
        point["sum"].as_f64(),
        Some(f64::from(n / 2) * 1000.0 + f64::from(n / 2) * 300_000.0)
    );
    // Each bucket alone: 500 in (511, 1023], 500 in (262143, 524287].
    let bounds: Vec<f64> = serde_json::from_value(point["bounds"].clone()).unwrap();
    let counts: Vec<u64> = serde_json::from_value(point["counts"].clone()).unwrap();
    let at = |bound: f64| counts[bounds.iter().position(|b| *b == bound).unwrap()];
    assert_eq!((at(1023.0), at(524_287.0)), (500, 500));
    assert_eq!(counts.iter().sum::<u64>(), u64::from(n));
    // Exactly the pieces of work as spans, with their names and durations.
    let spans: Vec<&Value> = decoded
        .iter()
        .filter(|m| m["signal"] == "traces")
        .flat_map(|m| m["spans"].as_array().unwrap())
        .collect();
    assert_eq!(spans.len(), works as usize, "{spans:#?}");
    for (k, span) in (1..).zip(&spans) {
        assert_eq!(span["name"], "work");
        assert_eq!(span["attributes"]["job"], format!("job-{k}"));
        let pid = span["attributes"]["process.pid"].as_i64().unwrap();
        assert!(pid > 0 && span["attributes"]["thread.id"] == pid);
        let ms = (span["end"].as_u64().unwrap() - span["start"].as_u64().unwrap()) as f64 / 1e6;
        let want = 20.0 * f64::from(k);
        assert!(ms >= want && ms < want + 200.0, "job-{k} took {ms} ms");
        assert_eq!(span["trace_id"].as_str().unwrap().len(), 32);
    }
}

/// Runs the span program under a collector in `mode`; returns sdt's
/// output and how long the whole run took.
fn against(python: &Path, fixture: &Path, mode: &str) -> (Output, Duration) {
    let (mut receiver, port, _) = receiver(python, mode);
    let dir = temp_dir(&format!("fleet-{mode}"));
    let script = write_script(&dir, "work.bt", &span_script(fixture));
    let start = Instant::now();
    let out = sdt()
        .args(["run", "--otlp", &format!("http://127.0.0.1:{port}")])
        .args(["--otlp-interval", "0.2"])
        .arg("-c")
        .arg(format!("{} 200000 3", fixture.display()))
        .arg(&script)
        .output()
        .unwrap();
    let took = start.elapsed();
    receiver.stop();
    assert!(out.status.success(), "{out:?}");
    (out, took)
}

#[test]
fn a_collector_that_stalls_or_refuses_slows_neither_the_program_nor_the_output() {
    let Some(fixture) = fixture("collectors") else {
        return;
    };
    let fixture = fixture.as_path();
    let Some(python) = receiver_python() else {
        return;
    };
    let took_ns = |out: &Output| -> f64 {
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("took_ns"))
            .unwrap()
            .to_string();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (healthy, _) = against(&python, fixture, "answer");
    for mode in ["stall", "refuse"] {
        let (out, took) = against(&python, fixture, mode);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The output is whole: the program's printf and its maps.
        assert_eq!(stdout.matches("start ").count(), 3, "{mode}: {stdout}");
        assert!(
            stdout.contains("@requests[GET, 200]: 140000"),
            "{mode}: {stdout}"
        );
        // The 200,000 probe hits took about as long as with a healthy
        // collector (the collector is never in their way).
        let (slow, normal) = (took_ns(&out), took_ns(&healthy));
        assert!(
            slow < normal * 3.0 + 20e6,
            "{mode}: {slow} ns against {normal} ns"
        );
        // The end waits for the collector 2 s at most.
        assert!(
            took < Duration::from_secs(10),
            "{mode}: the run took {took:?}"
        );
        // And what could not be sent is said.
        assert!(stderr.contains("3 dropped"), "{mode}: {stderr}");
    }
}

#[test]
fn serve_runs_a_directory_survives_a_broken_program_reloads_and_follows_restarts() {
    let Some(fixture) = fixture("serve") else {
        return;
    };
    let fixture = fixture.as_path();
    let dir = temp_dir("fleet-serve");
    let f = fixture.display();
    write_script(
        &dir,
        "broken.bt",
        &format!("usdt:{f}:fleet:request {{ @x = no_such_function(arg0); }}\n"),
    );
    let changing = write_script(
        &dir,
        "changing.bt",
        &format!("usdt:{f}:fleet:request {{ @by_method[str(arg0)] = count(); }}\n"),
    );
    write_script(
        &dir,
        "steady.bt",
        &format!("usdt:{f}:fleet:request {{ @requests = count(); }}\n"),
    );
    write_script(
        &dir,
        "unsafe.bt",
        &format!("usdt:{f}:fleet:request {{ system(\"true\"); }}\n"),
    );
    let mut sdt = Started::spawn(sdt().args(["serve", "--listen", "127.0.0.1:0"]).arg(&dir));
    let metrics = sdt.metrics_address();
    // Programs load in their own threads: their lines come in any order.
    for line in ["changing: up", "steady: up", "broken: ", "unsafe: "] {
        sdt.wait_for(line);
    }
    let scrape = || http_get(metrics, "/metrics");
    let text = scrape();
    assert_eq!(
        sample(&text, "sdt_up{program=\"broken\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sdt_up{program=\"unsafe\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sdt_up{program=\"steady\"}"),
        Some(1.0),
        "{text}"
    );
    let log = sdt.seen.join("\n");
    assert!(
        log.contains("broken: ")
            && log.contains("broken.bt:1:")
            && log.contains("no_such_function"),
        "{log}"
    );
    assert!(
        log.contains("unsafe: ") && log.contains("never run commands"),
        "{log}"
    );

    // The target runs (it started after sdt: probes attach by path).
    fire(fixture, 100, 0);
    let text = scrape();
    assert_eq!(
        sample(&text, "sdt_requests_total{program=\"steady\"}"),
        Some(100.0)
    );
    let get = "sdt_by_method_total{program=\"changing\",arg0=\"GET\"}";
    assert_eq!(sample(&text, get), Some(75.0), "{text}");

    // One program changes; SIGHUP.
    std::fs::write(
        &changing,
        format!(
            "// sdt: labels @by_status = status\nusdt:{f}:fleet:request {{ @by_status[arg1] = count(); }}\n"
        ),
    )
    .unwrap();
    sdt.signal(rustix::process::Signal::HUP);
    sdt.wait_for("SIGHUP");
    sdt.wait_for_nth("changing: up", 2);
    // The target restarts: a new process of the same program.
    fire(fixture, 100, 0);
    let text = scrape();
    // The unchanged program kept its counter and saw the new process.
    assert_eq!(
        sample(&text, "sdt_requests_total{program=\"steady\"}"),
        Some(200.0),
        "{text}"
    );
    // The changed one counts afresh, as it now says.
    assert_eq!(sample(&text, get), None, "{text}");
    let ok = "sdt_by_status_total{program=\"changing\",status=\"200\"}";
    assert_eq!(sample(&text, ok), Some(90.0), "{text}");
    assert_eq!(sample(&text, "sdt_up{program=\"broken\"}"), Some(0.0));
    let status = sdt.stop(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

/// The static `sdt` that `scripts/build-static` makes.
fn static_sdt() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../static/sdt");
    sdt_testing::require(
        path.is_file(),
        "target/static/sdt (bash scripts/build-static)",
    )
    .then_some(path)
}

/// Runs `script` with `sh` in a mount namespace of its own.
fn in_mount_namespace(script: &str) -> Command {
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", script]);
    command
}

#[test]
fn the_static_binary_needs_no_library_and_runs_in_an_empty_root() {
    let Some(sdt) = static_sdt() else {
        return;
    };
    if !sdt_testing::require_root()
        || !sdt_testing::require(sdt_testing::have("cc"), "cc")
        || !sdt_testing::require(sdt_testing::have("unshare"), "unshare")
    {
        return;
    }
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(&sdt)
        .output()
        .unwrap();
    assert!(dynamic.status.success());
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(!dynamic.contains("NEEDED"), "{dynamic}");

    // The root: sdt, a static target and a program; the kernel's /proc
    // and /sys are mounted on empty directories for `run` and `serve`.
    let root = temp_dir("fleet-empty-root");
    std::fs::copy(&sdt, root.join("sdt")).unwrap();
    C::new("tests/fixtures/fleet/requests.c")
        .flags(&["-static", "-O2"])
        .dir(&root)
        .build();
    write_script(
        &root.join("programs"),
        "requests.bt",
        "usdt:/requests:fleet:request { @requests[arg1] = count(); }\n",
    );
    std::fs::create_dir(root.join("proc")).unwrap();
    std::fs::create_dir(root.join("sys")).unwrap();
    let entries = std::fs::read_dir(&root).unwrap().count();
    assert_eq!(
        entries, 5,
        "the root holds only sdt, the target, the program and two mount points"
    );
    let r = root.display();

    let list = Command::new("chroot")
        .arg(&root)
        .args(["/sdt", "list", "/requests"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{list:?}");
    assert!(text.contains("/requests fleet:request"), "{text}");

    let mounts = format!("mount -t proc proc {r}/proc && mount -t sysfs sysfs {r}/sys");
    let run = in_mount_namespace(&format!(
        "{mounts} && exec chroot {r} /sdt run -e 'usdt:/requests:fleet:request {{ @n = count(); }}' -c '/requests 25 0'"
    ))
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{run:?}");
    assert!(text.contains("@n: 25"), "{text}");

    let mut serve = Started::spawn(&mut in_mount_namespace(&format!(
        "{mounts} && exec chroot {r} /sdt serve --listen 127.0.0.1:0 /programs"
    )));
    let metrics = serve.metrics_address();
    serve.wait_for("requests: up");
    fire(&root.join("requests"), 40, 0);
    let text = http_get(metrics, "/metrics");
    let ok = "sdt_requests_total{program=\"requests\",arg1=\"200\"}";
    assert_eq!(sample(&text, ok), Some(36.0), "{text}");
    let status = serve.stop(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

/// `KEY=` values of a systemd unit, in order.
fn unit_values<'u>(unit: &'u str, key: &str) -> Vec<&'u str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// setpriv's form of a unit's capability list: `-all,+bpf,+perfmon`.
fn setpriv_caps(unit_caps: &str) -> String {
    let mut caps = String::from("-all");
    for cap in unit_caps.split_whitespace() {
        let name = cap.strip_prefix("CAP_").expect("CAP_ names").to_lowercase();
        caps.push_str(&format!(",+{name}"));
    }
    caps
}

/// A directory every user can read, outside the checkout, removed when
/// dropped (also when a test fails).
struct Public(PathBuf);

impl Public {
    fn new() -> Public {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sdt-fleet-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Public(dir)
    }

    /// A copy of the executable `from`, named `name`, that anyone may run.
    fn copy(&self, from: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let to = self.0.join(name);
        std::fs::copy(from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        to
    }
}

impl Drop for Public {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_systemd_unit_serves_as_another_user_with_only_its_capabilities() {
    let Some(fixture) = fixture("unit") else {
        return;
    };
    if !sdt_testing::require(sdt_testing::have("setpriv"), "setpriv") {
        return;
    }
    let unit_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/sdt.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let [exec] = unit_values(&unit, "ExecStart")[..] else {
        panic!("one ExecStart in {unit}");
    };
    let [ambient] = unit_values(&unit, "AmbientCapabilities")[..] else {
        panic!("one AmbientCapabilities in {unit}");
    };
    let [bounding] = unit_values(&unit, "CapabilityBoundingSet")[..] else {
        panic!("one CapabilityBoundingSet in {unit}");
    };
    assert_eq!(unit_values(&unit, "DynamicUser"), ["yes"], "not root");
    let mut words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(words[..2], ["/usr/local/bin/sdt", "serve"], "{exec}");
    assert_eq!(words.last(), Some(&"/etc/sdt"), "{exec}");

    // The unit as systemd reads it, with this build's sdt.
    let sdt_path = sdt_testing::sdt_binary();
    let sdt_text = sdt_path.to_str().unwrap();
    if sdt_testing::require(sdt_testing::have("systemd-analyze"), "systemd-analyze") {
        let dir = temp_dir("fleet-unit");
        let copy = dir.join("sdt.service");
        std::fs::write(&copy, unit.replace("/usr/local/bin/sdt", sdt_text)).unwrap();
        let verify = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        assert!(verify.status.success(), "{verify:?}");
    }

    // Its command, as a user that owns nothing here (as DynamicUser
    // makes one), holding only the unit's capabilities. The checkout may
    // be private (a `mktemp -d`), so sdt, the traced program and the
    // programs directory are copied where that user can read them.
    let public = Public::new();
    let sdt_copy = public.copy(&sdt_path, "sdt");
    let fixture = public.copy(&fixture, "unit");
    let programs = public.0.join("programs");
    std::fs::create_dir(&programs).unwrap();
    write_script(
        &programs,
        "requests.bt",
        &format!(
            "usdt:{}:fleet:request {{ @requests = count(); }}\n",
            fixture.display()
        ),
    );
    for path in [&programs, &programs.join("requests.bt")] {
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    let listen = words
        .iter()
        .position(|w| *w == "--listen")
        .expect("--listen");
    words[listen + 1] = "127.0.0.1:0";
    let programs_text = programs.to_str().unwrap();
    *words.last_mut().unwrap() = programs_text;
    let sdt_copy_text = sdt_copy.to_str().unwrap();
    words[0] = sdt_copy_text;
    let as_unit = |ambient: &str, bounding: &str| {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps={ambient}"))
            .arg(format!("--ambient-caps={ambient}"))
            .arg(format!("--bounding-set={bounding}"))
            .args(&words);
        command
    };
    let mut serve = Started::spawn(&mut as_unit(
        &setpriv_caps(ambient),
        &setpriv_caps(bounding),
    ));
    let metrics = serve.metrics_address();
    serve.wait_for("requests: up");
    // Run by root: sdt traces what other users run.
    fire(&fixture, 30, 0);
    let text = http_get(metrics, "/metrics");
    assert_eq!(
        sample(&text, "sdt_requests_total{program=\"requests\"}"),
        Some(30.0),
        "{text}"
    );
    let status = serve.stop(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");

    // The capabilities are what it needs: without them it says so.
    let without = as_unit("-all", "-all").output().unwrap();
    let text = String::from_utf8_lossy(&without.stderr);
    assert!(!without.status.success(), "{text}");
    assert!(text.contains("CAP_BPF and CAP_PERFMON"), "{text}");
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL 15 cluster on a Unix socket in a temporary directory
/// (outside the checkout, which the `postgres` user may not enter), run by
/// that user; stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
}

impl Postgres {
    fn as_postgres(&self, program: &str) -> Command {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/{program}")])
            .current_dir(self.dir.path());
        command
    }

    fn start() -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("sdt-fleet-postgres.")
            .tempdir()
            .unwrap();
        let chown = Command::new("chown")
            .arg("postgres:postgres")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(chown.success());
        let cluster = Postgres { dir };
        let data = cluster.dir.path().join("data");
        let socket = format!("-k {} -c listen_addresses=''", cluster.dir.path().display());
        let log = cluster.dir.path().join("log");
        for args in [
            vec![
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
            ],
            vec![
                "-D",
                data.to_str().unwrap(),
                "-o",
                &socket,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        ] {
            let program = if args.len() == 6 { "initdb" } else { "pg_ctl" };
            let out = cluster.as_postgres(program).args(&args).output().unwrap();
            assert!(out.status.success(), "{program}: {out:?}");
        }
        cluster
    }

    fn postmaster(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).unwrap();
        text.lines().next().unwrap().to_string()
    }

    fn psql(&self, sql: &str) {
        let mut child = Command::new("runuser")
            .args(["-u", "postgres", "--", "psql", "-q", "-X", "-h"])
            .arg(self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sql.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "psql");
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

/// `sdt dbslower --otlp` on PostgreSQL 15: of 30 fast queries and 3 slow
/// ones, exactly the slow ones arrive as spans, each with its text and
/// its duration.
#[test]
fn dbslower_sends_exactly_the_slow_queries_as_spans() {
    if !sdt_testing::require_root()
        || !sdt_testing::require(Path::new(PG_BIN).join("postgres").exists(), "PostgreSQL 15")
        || !sdt_testing::require(sdt_testing::have("runuser"), "runuser (util-linux)")
    {
        return;
    }
    let Some(python) = receiver_python() else {
        return;
    };
    let (mut receiver, port, messages) = receiver(&python, "answer");
    let cluster = Postgres::start();
    let slow = [
        ("SELECT pg_sleep(0.15);", 150.0),
        ("SELECT pg_sleep(0.25);", 250.0),
        ("SELECT pg_sleep(0.2), 'third';", 200.0),
    ];
    let mut sql = String::new();
    for i in 1..=30 {
        sql.push_str(&format!("SELECT {i};\n"));
        if i % 10 == 5 {
            sql.push_str(slow[i / 10].0);
            sql.push('\n');
        }
    }
    let mut dbslower = Started::spawn(
        sdt()
            .args(["dbslower", "postgres", "--json", "-m", "100"])
            .args(["-p", &cluster.postmaster()])
            .args(["--otlp", &format!("http://127.0.0.1:{port}")])
            .args(["--service-name", "db-test"]),
    );
    dbslower.wait_for("Tracing");
    cluster.psql(&sql);
    dbslower.signal(rustix::process::Signal::INT);
    // Ended by the SIGINT it was sent, as a tool ends at Ctrl-C.
    let status = dbslower.child.wait().unwrap();
    let interrupted = std::os::unix::process::ExitStatusExt::signal(&status) == Some(2);
    assert!(
        status.success() || interrupted,
        "{status:?}: {:?}",
        dbslower.seen
    );
    let mut stdout = String::new();
    dbslower
        .child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(
        stdout.lines().filter(|l| l.contains("\"query\"")).count(),
        3,
        "{stdout}"
    );
    // sdt sent everything before it ended.
    std::thread::sleep(Duration::from_millis(300));
    receiver.stop();
    let decoded: Vec<Value> = messages
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    let spans: Vec<&Value> = decoded
        .iter()
        .filter(|m| m["signal"] == "traces")
        .inspect(|m| assert_eq!(m["resource"]["service.name"], "db-test"))
        .flat_map(|m| m["spans"].as_array().unwrap())
        .collect();
    assert_eq!(spans.len(), slow.len(), "{spans:#?}");
    for (span, (text, ms)) in spans.iter().zip(slow) {
        assert_eq!(span["name"], "postgresql");
        assert_eq!(span["attributes"]["db.query.text"], text, "{span}");
        assert_eq!(span["attributes"]["db.system.name"], "postgresql");
        let pid = span["attributes"]["process.pid"].as_i64().unwrap();
        // A backend is a process of one thread.
        assert!(pid > 0 && span["attributes"]["thread.id"] == pid, "{span}");
        let took = (span["end"].as_u64().unwrap() - span["start"].as_u64().unwrap()) as f64 / 1e6;
        assert!(took >= ms && took < ms + 150.0, "{text} took {took} ms");
    }
}

/// `sdt gc --otlp` on Ruby: each of 7 `GC.start` collections arrives as
/// one span, as long as the row `gc` prints for it says.
#[test]
fn gc_sends_each_collection_as_a_span() {
    if !sdt_testing::require_root()
        || !sdt_testing::require(sdt_testing::have("ruby"), "ruby (Debian's ruby)")
    {
        return;
    }
    let Some(python) = receiver_python() else {
        return;
    };
    let (mut receiver, port, messages) = receiver(&python, "answer");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tools/collect.rb");
    let out = sdt()
        .args([
            "gc",
            "--json",
            "--otlp",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--service-name", "gc-test", "-c"])
        .arg(format!("ruby --disable-gems {} 7", script.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 7, "{rows:?}");
    std::thread::sleep(Duration::from_millis(300));
    receiver.stop();
    let spans: Vec<Value> = messages
        .try_iter()
        .map(|l| serde_json::from_str::<Value>(&l).unwrap())
        .filter(|m| m["signal"] == "traces")
        .inspect(|m| assert_eq!(m["resource"]["service.name"], "gc-test"))
        .flat_map(|m| m["spans"].as_array().unwrap().clone())
        .collect();
    assert_eq!(spans.len(), rows.len(), "{spans:#?}");
    for (span, row) in spans.iter().zip(&rows) {
        assert_eq!(span["name"], "gc", "{span}");
        let took = span["end"].as_u64().unwrap() - span["start"].as_u64().unwrap();
        assert_eq!(took, row["duration_ns"].as_u64().unwrap(), "{span} {row}");
        assert!(
            span["attributes"]["process.pid"].as_i64().unwrap() > 0,
            "{span}"
        );
    }
}
