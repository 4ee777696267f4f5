//! Pictures, tested as a person would look at them: folded stacks of a C
//! fixture's three known call paths, the `--flamegraph` SVG opened in
//! headless Chromium (widths in proportion, search working), the
//! `--timeline` file opened in speedscope served from localhost (the
//! slices' durations as the viewer prints them match the fixture's
//! sleeps), `printf` lines on a timeline, and a timeline that reaches its
//! limit and says so.
//!
//! The browser tests install playwright-core and speedscope from the npm
//! registry into `target/npm-pictures` on first use, drive Debian's
//! `chromium`, and keep their screenshots in
//! `target/test-artifacts/pictures/`. With `CI=true`, a missing chromium,
//! node, or npm registry fails them; elsewhere they print a loud SKIP.

mod list_common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;
use serde_json::Value;

/// Versions of the viewers the tests install.
const PLAYWRIGHT: &str = "playwright-core@1.65.1";
const SPEEDSCOPE: &str = "speedscope@1.25.0";
const CHROMIUM: &str = "/usr/bin/chromium";

fn target_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is TARGET/tmp.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_path_buf()
}

fn fixtures_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pictures")
}

/// Where screenshots and the files they show are kept.
fn artifacts() -> PathBuf {
    let dir = target_dir().join("test-artifacts/pictures");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The fixture, built once: at -O0 with frame pointers, so that every
/// function (the leaf included) has a frame and the stacks are exactly
/// the calls in the source.
fn fixture() -> Option<PathBuf> {
    if !sdt_testing::require_root() || !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    let built = C::new(fixtures_src().join("pictures.c"))
        .flags(&["-O0", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .build();
    Some(built)
}

/// Runs sdt with `args`, checks it succeeded, returns its output.
fn sdt_ok(args: &[&str]) -> Output {
    let out = sdt().args(args).output().expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "sdt {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The three call paths of `pictures stacks`, leaf last, and their hits.
const PATHS: [(&str, i64); 3] = [
    ("main;alpha;leaf", 20),
    ("main;beta;leaf", 30),
    ("main;gamma_;beta;leaf", 50),
];

/// Checks folded lines are exactly the fixture's three paths with their
/// counts, each under the same frames below `main` (the C library's start
/// code, as far as the unwinder gets) and under `roots`.
fn assert_three_paths(folded: &str, roots: &str) {
    let lines: Vec<(&str, i64)> = folded
        .lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("`stack count`");
            (stack, count.parse().expect("a count"))
        })
        .collect();
    assert_eq!(lines.len(), 3, "{folded}");
    let below_main = |stack: &str| {
        let frames: Vec<&str> = stack.split(';').collect();
        let main = frames.iter().position(|f| *f == "main").expect("main");
        frames[..main]
            .iter()
            .map(|f| format!("{f};"))
            .collect::<String>()
    };
    let start = below_main(lines[0].0);
    assert!(start.starts_with(roots), "{folded}");
    for ((stack, count), (path, hits)) in lines.iter().zip(PATHS) {
        assert_eq!(*stack, format!("{start}{path}"), "{folded}");
        assert_eq!(*count, hits, "{folded}");
    }
}

#[test]
fn folded_stacks_are_exactly_the_three_call_paths() {
    let Some(fixture) = fixture() else { return };
    let bin = fixture.display().to_string();
    let command = format!("{bin} stacks");
    let script = format!(
        "usdt:{bin}:stacks:leaf {{ @[ustack] = count(); @paths = count(); printf(\"hit\\n\"); }}"
    );
    let out = sdt_ok(&["run", "-f", "folded", "-c", &command, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_three_paths(&stdout, "");
    // Everything else is text on standard error.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("@paths: 100"), "{stderr}");
    assert_eq!(stderr.matches("hit\n").count(), 100, "{stderr}");

    // Other parts of the key are the root frames.
    let script = format!("usdt:{bin}:stacks:leaf {{ @[comm, ustack] = count(); }}");
    let out = sdt_ok(&["run", "-f", "folded", "-c", &command, "-e", &script]);
    assert_three_paths(&String::from_utf8_lossy(&out.stdout), "pictures;");

    // Two stack-keyed maps: a flame graph each, named after the map.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pictures-two-maps");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let flame = dir.join("flame.svg").display().to_string();
    let script = format!(
        "usdt:{bin}:stacks:leaf {{ @all[ustack] = count(); if (arg0 == 1) {{ @alpha[ustack] = count(); }} }}"
    );
    let out = sdt_ok(&["run", "--flamegraph", &flame, "-c", &command, "-e", &script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["flame@all.svg", "flame@alpha.svg"], "{stderr}");
    let all = std::fs::read_to_string(dir.join("flame@all.svg")).unwrap();
    let alpha = std::fs::read_to_string(dir.join("flame@alpha.svg")).unwrap();
    assert!(all.contains("<title>main (100 hits, 100.00%)</title>"));
    assert!(alpha.contains("<title>main (20 hits, 100.00%)</title>"));
    assert!(!alpha.contains("<title>beta"), "only alpha's path");
}

#[test]
fn stackcount_counts_the_three_call_paths() {
    let Some(fixture) = fixture() else { return };
    let bin = fixture.display().to_string();
    let command = format!("{bin} stacks");
    // A USDT probe as `sdt trace` takes it, and the function it is in.
    for probe in [format!("{bin}:stacks:leaf"), format!("uprobe:{bin}:leaf")] {
        let out = sdt_ok(&["stackcount", "-f", "folded", "-c", &command, &probe]);
        assert_three_paths(&String::from_utf8_lossy(&out.stdout), "");
    }
    // Per process: the command's name and PID are the root frames.
    let probe = format!("{bin}:stacks:leaf");
    let out = sdt_ok(&["stackcount", "-P", "-f", "folded", "-c", &command, &probe]);
    let folded = String::from_utf8_lossy(&out.stdout);
    assert_three_paths(&folded, "pictures;");
    let pids: std::collections::BTreeSet<&str> = folded
        .lines()
        .map(|l| l.split(';').nth(1).unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "{folded}");
    assert!(pids.iter().all(|p| p.parse::<u32>().is_ok()), "{folded}");

    // As text, each stack leaf first with its count; and as a flame graph.
    let svg = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stackcount.svg");
    let _ = std::fs::remove_file(&svg);
    let probe = format!("{bin}:stacks:leaf");
    let flag = svg.display().to_string();
    let out = sdt_ok(&["stackcount", "--flamegraph", &flag, "-c", &command, &probe]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("    leaf+").count(), 3, "{text}");
    for count in ["]: 20\n", "]: 30\n", "]: 50\n"] {
        assert!(text.contains(count), "{text}");
    }
    let svg = std::fs::read_to_string(&svg).expect("the flame graph");
    assert!(
        svg.contains("<title>gamma_ (50 hits, 50.00%)</title>"),
        "{svg}"
    );

    // The program it runs is sdt's language, shown as it is.
    let out = sdt_ok(&["stackcount", "--print-program", "-c", &command, &probe]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "// sdt stackcount: how often each user stack reaches the probes.\n\
             usdt:\"{bin}\":stacks:leaf {{\n  @[ustack] = count();\n}}\n"
        )
    );
    // A probe it cannot take is one line, not a panic.
    let out = sdt().args(["stackcount", "uprobe:x"]).output().unwrap();
    assert_no_panic(&out);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Installs the browser driver and speedscope from the npm registry
/// (once), returning their `node_modules`; `None` (a SKIP, or a failure
/// in CI) when node, npm's registry or chromium is missing.
fn viewers() -> Option<&'static Path> {
    static INSTALLED: OnceLock<Option<PathBuf>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            if !require(Path::new(CHROMIUM).exists(), "chromium (Debian's package)")
                || !require(have("node"), "node")
                || !require(have("npm"), "npm")
            {
                return None;
            }
            let dir = target_dir().join("npm-pictures");
            let modules = dir.join("node_modules");
            let wanted = [PLAYWRIGHT, SPEEDSCOPE];
            let present = wanted.iter().all(|spec| {
                let (name, version) = spec.rsplit_once('@').unwrap();
                std::fs::read_to_string(modules.join(name).join("package.json"))
                    .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")))
            });
            if !present {
                std::fs::create_dir_all(&dir).unwrap();
                let out = Command::new("npm")
                    .args([
                        "install",
                        "--no-audit",
                        "--no-fund",
                        "--no-save",
                        "--prefix",
                    ])
                    .arg(&dir)
                    .args(wanted)
                    .output()
                    .expect("run npm");
                if !require(
                    out.status.success(),
                    &format!(
                        "the npm registry (npm install {} failed: {})",
                        wanted.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                ) {
                    return None;
                }
            }
            Some(modules)
        })
        .as_deref()
}

/// Runs a browser script of the fixtures with `args`; returns what it
/// printed, as JSON.
fn browse(modules: &Path, script: &str, args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(fixtures_src().join(script))
        .args(args)
        .env("NODE_PATH", modules)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn a_flame_graph_shows_the_three_paths_in_proportion_and_searches() {
    let Some(fixture) = fixture() else { return };
    let Some(modules) = viewers() else { return };
    let bin = fixture.display().to_string();
    let svg = artifacts().join("flamegraph.svg");
    let _ = std::fs::remove_file(&svg);
    let script = format!("usdt:{bin}:stacks:leaf {{ @stacks[ustack] = count(); }}");
    let command = format!("{bin} stacks");
    let out = sdt_ok(&[
        "run",
        "--flamegraph",
        svg.to_str().unwrap(),
        "-c",
        &command,
        "-e",
        &script,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "flame graph of @stacks written to {}",
            svg.display()
        )),
        "{stderr}"
    );
    let shots = artifacts().join("flamegraph");
    let seen = browse(
        modules,
        "flamegraph.cjs",
        &[svg.to_str().unwrap(), shots.to_str().unwrap(), "beta"],
    );
    // The width each frame is drawn with, by its tooltip's name.
    let width = |name: &str| -> Vec<f64> {
        seen["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["title"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{name} ("))
            })
            .map(|f| f["width"].as_f64().unwrap())
            .collect()
    };
    let all = width("main")[0];
    assert!(all > 500.0, "main is drawn across the page: {seen}");
    let alpha = width("alpha")[0];
    let gamma = width("gamma_")[0];
    let mut betas = width("beta");
    betas.sort_by(f64::total_cmp);
    let near = |w: f64, share: f64| (w / all - share).abs() < 0.01;
    assert!(near(alpha, 0.2), "alpha: {alpha} of {all}");
    assert!(near(betas[0], 0.3), "main;beta: {betas:?} of {all}");
    assert!(near(gamma, 0.5), "gamma_: {gamma} of {all}");
    assert!(near(betas[1], 0.5), "gamma_;beta: {betas:?} of {all}");
    assert_eq!(width("leaf").len(), 3, "{seen}");
    // Searching for beta finds both of its frames: 30% + 50% of the hits.
    assert_eq!(seen["matched"], "Matched: 80.0%", "{seen}");
    let highlighted: Vec<&str> = seen["highlighted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(highlighted.len(), 2, "{seen}");
    assert!(
        highlighted.iter().all(|h| h.starts_with("beta (")),
        "{seen}"
    );
    assert!(shots.with_extension("png").exists());
}

/// The one-command CPU flame graph: `profile:hz:99` of a process with
/// three threads busy in one function, drawn with `--flamegraph` and
/// opened in Chromium, shows that function across the graph.
#[test]
fn a_cpu_flame_graph_of_busy_threads_is_their_busy_function() {
    if !sdt_testing::require_root() || !require(have("cc"), "a C compiler (cc)") {
        return;
    }
    let Some(modules) = viewers() else { return };
    let busy = C::new(fixtures_src().join("../kernel/busy.c"))
        .flags(&["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .build();
    let svg = artifacts().join("cpu.svg");
    let _ = std::fs::remove_file(&svg);
    let report = artifacts().join("cpu-threads.txt");
    let command = format!("{} 2 {}", busy.display(), report.display());
    let out = sdt_ok(&[
        "run",
        "--flamegraph",
        svg.to_str().unwrap(),
        "-c",
        &command,
        "-e",
        "profile:hz:99 { @[ustack] = count(); }",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("flame graph of @ written to"), "{stderr}");
    let shots = artifacts().join("cpu");
    let seen = browse(
        modules,
        "flamegraph.cjs",
        &[svg.to_str().unwrap(), shots.to_str().unwrap(), "spin_here"],
    );
    let frames = seen["frames"].as_array().unwrap();
    let width = |f: &Value| f["width"].as_f64().unwrap();
    let all = frames.iter().map(width).fold(0.0, f64::max);
    assert!(all > 500.0, "the root is drawn across the page: {seen}");
    let spin: f64 = frames
        .iter()
        .filter(|f| f["title"].as_str().unwrap().starts_with("spin_here ("))
        .map(width)
        .sum();
    assert!(spin / all > 0.95, "spin_here is {spin} of {all}: {seen}");
    let worker = frames
        .iter()
        .any(|f| f["title"].as_str().unwrap().starts_with("worker ("));
    assert!(worker, "spin_here is called by worker: {seen}");
    let matched: f64 = seen["matched"]
        .as_str()
        .unwrap()
        .trim_start_matches("Matched: ")
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!(matched > 95.0, "{seen}");
    assert!(shots.with_extension("png").exists());
}

/// Checks `json` is a Trace Event file with what its format requires of
/// every event; returns the events.
fn trace_events(json: &[u8]) -> Vec<Value> {
    let file: Value = serde_json::from_slice(json).expect("the timeline is JSON");
    let events = file["traceEvents"].as_array().expect("traceEvents").clone();
    for e in &events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "name: {e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "pid, tid: {e}");
        match ph {
            "M" => assert!(e["args"]["name"].is_string(), "{e}"),
            "X" => {
                assert!(e["ts"].is_number() && e["dur"].is_number(), "{e}");
                assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
            }
            "i" => assert!(e["ts"].is_number() && e["s"] == "t", "{e}"),
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    events
}

/// A local HTTP server for a directory, stopped (by its PID) when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
            .arg("--directory")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 -m http.server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        let port = line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A duration as speedscope prints it (`100.12ms (67%)`), in ms.
fn viewer_ms(text: &str) -> f64 {
    let number = text.split_whitespace().next().unwrap_or_default();
    let (value, scale) = if let Some(v) = number.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = number.strip_suffix("µs") {
        (v, 0.001)
    } else if let Some(v) = number.strip_suffix('s') {
        (v, 1000.0)
    } else {
        panic!("not a duration: {text}")
    };
    value.parse::<f64>().expect("a number") * scale
}

#[test]
fn a_timeline_opens_in_speedscope_with_the_fixtures_durations() {
    let Some(fixture) = fixture() else { return };
    let Some(modules) = viewers() else { return };
    let bin = fixture.display().to_string();
    // Speedscope's page, and the timeline beside it (same origin).
    let site = Path::new(env!("CARGO_TARGET_TMPDIR")).join("speedscope-site");
    let _ = std::fs::remove_dir_all(&site);
    std::fs::create_dir_all(&site).unwrap();
    let release = modules.join("speedscope/dist/release");
    for entry in std::fs::read_dir(&release).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), site.join(entry.file_name())).unwrap();
    }
    let timeline = artifacts().join("timeline.json");
    let command = format!("{bin} sleeps");
    let out = sdt_ok(&[
        "trace",
        "--timeline",
        timeline.to_str().unwrap(),
        "-c",
        &command,
        &format!("{bin}:timeline:*"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("could not pair"), "{stderr}");
    let json = std::fs::read(&timeline).unwrap();
    let events = trace_events(&json);
    // One track per thread, named comm (tid).
    let tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tracks.len(), 2, "{tracks:?}");
    assert!(
        tracks.iter().any(|t| t.starts_with("worker-a (")),
        "{tracks:?}"
    );
    assert!(
        tracks.iter().any(|t| t.starts_with("worker-b (")),
        "{tracks:?}"
    );
    assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), 4);
    std::fs::copy(&timeline, site.join("timeline.json")).unwrap();

    let server = Server::start(&site);
    let url = format!(
        "http://127.0.0.1:{0}/index.html#profileURL=http://127.0.0.1:{0}/timeline.json",
        server.port
    );
    let shots = artifacts().join("timeline");
    let seen = browse(modules, "timeline.cjs", &[&url, shots.to_str().unwrap()]);
    drop(server);
    assert_eq!(seen["errors"], Value::Array(Vec::new()), "{seen}");
    // Each thread's slices, as the viewer prints their durations, by the
    // thread's name and the slice's argument.
    let mut durations: BTreeMap<(String, String), f64> = BTreeMap::new();
    for profile in seen["profiles"].as_array().unwrap() {
        // speedscope's name: "PROCESS (pid N), THREAD (tid N)".
        let name = profile["name"].as_str().unwrap();
        let name = name.rsplit(", ").next().unwrap();
        let thread = if name.starts_with("worker-a (") {
            "worker-a"
        } else if name.starts_with("worker-b (") {
            "worker-b"
        } else {
            panic!("an unexpected thread: {name}")
        };
        for row in profile["rows"].as_array().unwrap() {
            let slice = row["name"].as_str().unwrap();
            let arg = slice
                .split("\"arg0\":")
                .nth(1)
                .and_then(|r| r.split('}').next())
                .unwrap_or_else(|| panic!("no argument in {slice}"));
            let base = slice.split_whitespace().next().unwrap();
            let key = (format!("{thread} {base}"), arg.to_string());
            durations.insert(key, viewer_ms(row["total"].as_str().unwrap()));
        }
    }
    // The fixture's sleeps: at least that long, and not much longer.
    let expected = [
        ("worker-a timeline:step", "1", 100.0),
        ("worker-a timeline:step", "2", 50.0),
        ("worker-b timeline:task", "1", 120.0),
        ("worker-b timeline:task", "2", 60.0),
    ];
    assert_eq!(durations.len(), expected.len(), "{durations:?}");
    for (slice, arg, ms) in expected {
        let shown = durations[&(slice.to_string(), arg.to_string())];
        assert!(
            shown >= ms && shown < ms + 40.0,
            "{slice}({arg}) shows {shown} ms for a {ms} ms sleep: {durations:?}"
        );
    }
    assert!(artifacts().join("timeline-1.png").exists());
}

#[test]
fn printf_lines_are_instants_on_their_threads() {
    let Some(fixture) = fixture() else { return };
    let bin = fixture.display().to_string();
    let timeline = Path::new(env!("CARGO_TARGET_TMPDIR")).join("printf-timeline.json");
    let command = format!("{bin} sleeps");
    let script = format!("usdt:{bin}:timeline:* {{ printf(\"%s %s %d\\n\", comm, probe, arg0); }}");
    let out = sdt_ok(&[
        "run",
        "--timeline",
        timeline.to_str().unwrap(),
        "-c",
        &command,
        "-e",
        &script,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events = trace_events(&std::fs::read(&timeline).unwrap());
    let tracks: BTreeMap<u64, &str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    let instants: Vec<&Value> = events.iter().filter(|e| e["ph"] == "i").collect();
    // Every line printed is an instant named after it, in the order printed.
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("worker-"))
        .collect();
    let names: Vec<&str> = instants
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, lines);
    assert_eq!(lines.len(), 8, "{stdout}");
    let mut last = 0.0;
    for e in &instants {
        // On the track of the thread that printed it.
        let comm = e["name"].as_str().unwrap().split(' ').next().unwrap();
        let track = tracks[&e["tid"].as_u64().unwrap()];
        assert!(track.starts_with(&format!("{comm} (")), "{e} on {track}");
        let ts = e["ts"].as_f64().unwrap();
        assert!(ts >= last, "in the one global order: {e}");
        last = ts;
    }
    // The kernel's times: worker-a's first step took its 100 ms sleep.
    let at = |line: &str| {
        instants
            .iter()
            .find(|e| e["name"].as_str().unwrap().ends_with(line))
            .and_then(|e| e["ts"].as_f64())
            .unwrap()
    };
    let step = (at("step__done 1") - at("step__start 1")) / 1000.0;
    assert!((100.0..140.0).contains(&step), "{step} ms");
}

#[test]
fn a_timeline_stops_at_its_limit_and_says_so() {
    let Some(fixture) = fixture() else { return };
    let bin = fixture.display().to_string();
    let timeline = Path::new(env!("CARGO_TARGET_TMPDIR")).join("limit-timeline.json");
    let command = format!("{bin} ticks 2000000");
    let out = sdt_ok(&[
        "trace",
        "--buffer-size",
        "64M",
        "-o",
        "/dev/null",
        "--timeline",
        timeline.to_str().unwrap(),
        "-c",
        &command,
        &format!("{bin}:stacks:tick"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let path = timeline.display();
    assert!(
        stderr.contains(&format!(
            "the timeline {path} has reached its limit of 1000000 events: later events are left out"
        )),
        "{stderr}"
    );
    let events = trace_events(&std::fs::read(&timeline).unwrap());
    let _ = std::fs::remove_file(&timeline);
    // The limit counts every event but the process's name at the end.
    assert_eq!(events.len(), 1_000_001);
    let delivered: u64 = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("sdt: ")?
                .split(" events, ")
                .next()?
                .parse()
                .ok()
        })
        .expect("the summary line");
    let left_out = delivered + 1 - 1_000_000;
    assert!(
        stderr.contains(&format!(
            "the timeline {path} holds 1000000 events; {left_out} more were left out"
        )),
        "{stderr}"
    );
}

/// Frames are demangled (C++), and named by their object where the
/// symbol is unknown (a stripped program).
#[test]
fn folded_frames_are_demangled_or_named_by_their_object() {
    let Some(fixture) = fixture() else { return };
    if !require(have("c++"), "a C++ compiler (c++)") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pictures-frames");
    std::fs::create_dir_all(&dir).unwrap();

    // C++: a function in a namespace, by its demangled name.
    let thrower = dir.join("thrower");
    let status = Command::new("c++")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&thrower)
        .arg(fixtures_src().join("../run/thrower.cpp"))
        .status()
        .unwrap();
    assert!(status.success(), "building thrower.cpp");
    let command = format!("{} 4", thrower.display());
    let probe = format!("uprobe:{}:shop::checkout(int)", thrower.display());
    let out = sdt_ok(&["stackcount", "-f", "folded", "-c", &command, &probe]);
    let folded = String::from_utf8_lossy(&out.stdout);
    assert_eq!(folded.lines().count(), 1, "{folded}");
    // (At a function's first instruction, the frame-pointer walk skips
    // its caller: the frame above is the caller's caller.)
    assert!(folded.ends_with(";shop::checkout(int) 4\n"), "{folded}");
    assert!(folded.starts_with("__libc_start"), "{folded}");

    // Stripped: the program's own frames are its name in brackets, so
    // that alpha's and beta's paths (three frames each) fold together.
    let stripped = dir.join("pictures-stripped");
    std::fs::copy(fixture, &stripped).unwrap();
    let status = Command::new("strip").arg(&stripped).status().unwrap();
    assert!(status.success(), "strip");
    let bin = stripped.display().to_string();
    let command = format!("{bin} stacks");
    let probe = format!("{bin}:stacks:leaf");
    let out = sdt_ok(&["stackcount", "-f", "folded", "-c", &command, &probe]);
    let folded = String::from_utf8_lossy(&out.stdout);
    let own = "[pictures-stripped]";
    let lines: Vec<(usize, &str)> = folded
        .lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').unwrap();
            let frames = stack.split(';').filter(|f| *f == own).count();
            assert!(stack.ends_with(own), "{folded}");
            (frames, count)
        })
        .collect();
    assert_eq!(lines, [(3, "50"), (4, "50")], "{folded}");
}

/// Calls of `fib(n)` (the naive recursion) at each depth, the outermost
/// call at depth 1: `calls[d - 1]`.
fn fib_calls_by_depth(n: u32, depth: usize, calls: &mut Vec<u64>) {
    if calls.len() < depth {
        calls.push(0);
    }
    calls[depth - 1] += 1;
    if n >= 2 {
        fib_calls_by_depth(n - 1, depth + 1, calls);
        fib_calls_by_depth(n - 2, depth + 1, calls);
    }
}

/// A flame graph's frames named `name`, each with its width's number
/// (`fib (1,973 calls, 99.90%)` gives 1973).
fn frames_named(svg: &str, name: &str) -> Vec<u64> {
    svg.split("<title>")
        .skip(1)
        .filter_map(|t| t.split_once("</title>"))
        .filter_map(|(title, _)| {
            let (frame, rest) = title.rsplit_once(" (")?;
            (frame == name).then(|| {
                let n = rest.split_once(' ').expect("a count").0;
                n.replace(',', "").parse().expect("a number")
            })
        })
        .collect()
}

#[test]
fn calls_flame_graph_of_python_fib_has_the_exact_depths_of_fib_15() {
    let python = Path::new("/usr/bin/python3.11");
    if !sdt_testing::require_root() || !require(python.exists(), "Debian's python3.11") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pictures-fib");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("fib.py");
    std::fs::write(
        &script,
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nfib(15)\n",
    )
    .unwrap();
    let command = format!("{} {}", python.display(), script.display());
    let frame = format!("{}.fib", script.display());
    let mut by_depth = Vec::new();
    fib_calls_by_depth(15, 1, &mut by_depth);
    assert_eq!(by_depth.iter().sum::<u64>(), 1973);
    // A frame at depth d is as wide as the calls at depth d and deeper.
    let wanted: Vec<u64> = (0..by_depth.len())
        .map(|d| by_depth[d..].iter().sum())
        .collect();

    // By calls.
    let svg = dir.join("calls.svg");
    let timeline = dir.join("calls.json");
    sdt_ok(&[
        "calls",
        "--flamegraph",
        &svg.display().to_string(),
        "--timeline",
        &timeline.display().to_string(),
        "-c",
        &command,
    ]);
    let drawn = std::fs::read_to_string(&svg).expect("the flame graph");
    assert_eq!(frames_named(&drawn, &frame), wanted, "{frame}");
    std::fs::copy(&svg, artifacts().join("calls-fib.svg")).unwrap();
    // The timeline: one slice per call, nested as deep as the recursion.
    let events = trace_events(&std::fs::read(&timeline).unwrap());
    let mut fibs: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == frame.as_str())
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap();
            (ts, ts + e["dur"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(fibs.len(), 1973);
    fibs.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut open: Vec<f64> = Vec::new();
    let mut deepest = vec![0u64; by_depth.len()];
    for (start, end) in fibs {
        while open.last().is_some_and(|&e| e <= start) {
            open.pop();
        }
        assert!(open.last().is_none_or(|&e| end <= e), "slices nest");
        open.push(end);
        deepest[open.len() - 1] += 1;
    }
    assert_eq!(deepest, by_depth, "the slices' depths");

    // The same stacks as folded lines on standard output, the table on
    // standard error: a line per depth of the recursion, counting the
    // calls at that depth.
    let out = sdt_ok(&["calls", "-f", "folded", "-c", &command]);
    let folded = String::from_utf8_lossy(&out.stdout);
    let module = format!("{}.<module>", script.display());
    let fib_lines: Vec<(usize, u64)> = folded
        .lines()
        .filter_map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("a count");
            let frames: Vec<&str> = stack.split(';').collect();
            (frames.first() == Some(&module.as_str()) && frames.len() > 1).then(|| {
                assert!(frames[1..].iter().all(|f| *f == frame), "{l}");
                (frames.len() - 1, count.parse().unwrap())
            })
        })
        .collect();
    let wanted_lines: Vec<(usize, u64)> = (1..).zip(by_depth.iter().copied()).collect();
    assert_eq!(fib_lines, wanted_lines, "{folded}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("# CALLS"),
        "the table goes to standard error"
    );

    // By time: the same stacks, each frame as wide as the time in it,
    // so narrower the deeper it is.
    let svg = dir.join("latency.svg");
    sdt_ok(&[
        "calls",
        "-L",
        "--flamegraph",
        &svg.display().to_string(),
        "-c",
        &command,
    ]);
    let drawn = std::fs::read_to_string(&svg).expect("the flame graph");
    assert!(drawn.contains(" ns, "), "widths in nanoseconds");
    let widths = frames_named(&drawn, &frame);
    // Inferno leaves out frames narrower than 0.1 pixel: by time, the
    // deepest calls (a microsecond or so in a run of Python's start-up)
    // may be; the outer ten never are.
    assert!((10..=by_depth.len()).contains(&widths.len()), "{widths:?}");
    assert!(widths.windows(2).all(|w| w[0] > w[1]), "{widths:?}");
}

/// The slices of a timeline file: name, start and duration in
/// microseconds, and thread.
fn slices(path: &Path) -> Vec<(String, f64, f64, u64)> {
    trace_events(&std::fs::read(path).expect("the timeline"))
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                e["tid"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `--timeline` of the tools that see durations: `gc`, `flow` and
/// `dbslower` put on it exactly what they print, with the same durations.
#[test]
fn tools_timelines_hold_what_the_tools_show() {
    let python = Path::new("/usr/bin/python3.11");
    if !sdt_testing::require_root()
        || !require(python.exists(), "Debian's python3.11")
        || !require(have("cc"), "a C compiler (cc)")
    {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pictures-tools");
    std::fs::create_dir_all(&dir).unwrap();
    let tools = fixtures_src().join("../tools");
    let timeline = dir.join("timeline.json");
    let flag = timeline.display().to_string();

    // gc: each collection printed is a slice of the same duration.
    let command = format!(
        "{} {} 3",
        python.display(),
        tools.join("collect.py").display()
    );
    let out = sdt_ok(&["gc", "--json", "--timeline", &flag, "-c", &command]);
    let printed: Vec<(u64, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["duration_ns"].is_u64())
        .map(|v| {
            (
                v["tid"].as_u64().unwrap(),
                v["duration_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(printed.len() >= 3, "{printed:?}");
    let drawn: Vec<(u64, u64)> = slices(&timeline)
        .into_iter()
        .map(|(name, _, dur, tid)| {
            assert_eq!(name, "gc");
            (tid, (dur * 1000.0).round() as u64)
        })
        .collect();
    assert_eq!(drawn, printed);

    // flow: each call shown is a slice, nested as the calls are.
    let script = dir.join("fib.py");
    std::fs::write(
        &script,
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nfib(10)\n",
    )
    .unwrap();
    let command = format!("{} {}", python.display(), script.display());
    let out = sdt_ok(&["flow", "-M", "fib", "--timeline", &flag, "-c", &command]);
    let entries = String::from_utf8_lossy(&out.stdout).matches("-> ").count();
    assert_eq!(entries, 177, "fib(10) makes 177 calls");
    let fibs = slices(&timeline);
    assert_eq!(fibs.len(), 177);
    let name = format!("{}.fib", script.display());
    assert!(fibs.iter().all(|s| s.0 == name), "{fibs:?}");
    let outer = fibs.iter().max_by(|a, b| a.2.total_cmp(&b.2)).unwrap();
    assert!(
        fibs.iter()
            .all(|s| s.1 >= outer.1 && s.1 + s.2 <= outer.1 + outer.2),
        "every call within fib(10)'s slice"
    );

    // dbslower: each slow query is a slice named by its text, as long as
    // the query took.
    let server = C::new(tools.join("mysqld.c")).flags(&["-O2"]).build();
    let command = format!(
        "{} 'select 1' 'sleep 300' 'select 2' 'sleep 150'",
        server.display()
    );
    let out = sdt_ok(&[
        "dbslower",
        "mysql",
        "--json",
        "-m",
        "100",
        "--timeline",
        &flag,
        "-c",
        &command,
    ]);
    let printed: Vec<(String, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            let query = v["query"].as_str().unwrap().to_string();
            (query, v["duration_ns"].as_u64().unwrap())
        })
        .collect();
    let drawn: Vec<(String, u64)> = slices(&timeline)
        .into_iter()
        .map(|(name, _, dur, _)| (name, (dur * 1000.0).round() as u64))
        .collect();
    assert_eq!(drawn, printed);
    let names: Vec<&str> = drawn.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(names, ["sleep 300", "sleep 150"]);
}
