//! Probes defined at run time (`sdt::dynamic`): the object they live in is
//! one every reader reads, loading maps it and unloading unmaps it (also
//! while a tracer is attached), and sdt and bpftrace trace them in a
//! running process, exactly, before and after the provider is rebuilt
//! with more probes; also when it is loaded from a temporary file because
//! `memfd_create` is denied.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use common::{
    fixture_crate, readelf_notes, readelf_sections, require_tool, require_tracing, run, stdout_of,
    tempdir,
};
use sdt::dynamic::{Arg, ArgType, Backing, Provider};
use sdt_testing::sdt_binary;
use serde_json::Value;

fn maps() -> String {
    std::fs::read_to_string("/proc/self/maps").unwrap()
}

#[test]
fn the_image_is_read_by_readelf_gdb_and_sdt_list() {
    let provider = Provider::new("image")
        .unwrap()
        .probe(
            "compiled",
            &[ArgType::U64, ArgType::Str, ArgType::I32, ArgType::Bytes],
        )
        .unwrap()
        .probe("many", &[ArgType::I8; 8])
        .unwrap()
        .probe("none", &[])
        .unwrap();
    let dir = tempdir("dynamic-image");
    let path = dir.join("image.so");
    std::fs::write(&path, provider.image().unwrap()).unwrap();

    let notes = readelf_notes(&path);
    let specs: Vec<(&str, &str)> = notes
        .iter()
        .map(|n| (n.name.as_str(), n.args.as_str()))
        .collect();
    assert_eq!(
        specs,
        [
            ("compiled", "8@%rdi 8@%rsi -4@%edx 8@%rcx 8@%r8"),
            (
                "many",
                "-1@%dil -1@%sil -1@%dl -1@%cl -1@%r8b -1@%r9b -1@8(%rsp) -1@16(%rsp)"
            ),
            ("none", ""),
        ]
    );
    let sections = readelf_sections(&path);
    let section = |name: &str| sections.iter().find(|s| s.name == name).unwrap().clone();
    let (base, probes, text) = (
        section(".stapsdt.base"),
        section(".probes"),
        section(".text"),
    );
    let mut semaphores = BTreeSet::new();
    for note in &notes {
        assert_eq!(note.provider, "image");
        assert_eq!(note.base, base.addr);
        assert!((text.addr..text.addr + text.size).contains(&note.pc));
        assert!((probes.addr..probes.addr + probes.size).contains(&note.semaphore));
        assert_eq!(note.semaphore % 2, 0);
        semaphores.insert(note.semaphore);
    }
    assert_eq!(semaphores.len(), 3, "one semaphore per probe");

    let listed = run(Command::new(sdt_binary())
        .args(["list", "--json"])
        .arg(&path));
    assert!(listed.status.success(), "sdt list: {listed:?}");
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    for probe in listed.as_array().unwrap() {
        let site = &probe["sites"][0];
        assert_eq!(site["file_offset"], site["address"], "{probe}");
        assert_eq!(
            site["semaphore_offset"], site["semaphore_address"],
            "{probe}"
        );
    }
    assert_eq!(listed.as_array().unwrap().len(), 3);

    if require_tool("gdb") {
        let gdb = stdout_of(
            "gdb",
            &[
                "-nx",
                "-batch",
                "-ex",
                "info probes",
                path.to_str().unwrap(),
            ],
        );
        for name in ["compiled", "many", "none"] {
            assert!(
                gdb.lines()
                    .any(|l| l.split_whitespace().take(3).eq(["stap", "image", name])),
                "gdb lacks image:{name}:\n{gdb}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn loading_maps_the_object_and_unloading_unmaps_it() {
    let definition = Provider::new("mapped")
        .unwrap()
        .probe("first", &[ArgType::U64])
        .unwrap();
    let loaded = definition.load().unwrap();
    assert_eq!(loaded.backing(), Backing::Memfd);
    assert!(maps().contains("/memfd:sdt-mapped (deleted)"));
    let first = loaded.probe("first").unwrap();
    assert!(!first.enabled(), "nobody traces it");
    // Disabled: nothing happens, and the function is not even called.
    first.fire(&[Arg::from(1u64)]);
    assert!(loaded.probe("second").is_none());

    // Two providers at once are two objects.
    let other = Provider::new("mapped_too")
        .unwrap()
        .probe("p", &[])
        .unwrap()
        .load()
        .unwrap();
    let definition = loaded.unload();
    let maps_now = maps();
    assert!(
        !maps_now.contains("/memfd:sdt-mapped (deleted)"),
        "{maps_now}"
    );
    assert!(maps_now.contains("/memfd:sdt-mapped_too (deleted)"));
    drop(other);
    assert!(!maps().contains("sdt-mapped_too"));

    // Rebuilt with one more probe.
    let loaded = definition
        .probe("second", &[ArgType::Str])
        .unwrap()
        .load()
        .unwrap();
    let names: Vec<&str> = loaded.probes().iter().map(|p| p.name()).collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(loaded.probe("second").unwrap().slots(), 1);
}

/// The fixture, running, and its standard output line by line.
struct Fixture {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Fixture {
    fn start(args: &[&str]) -> Fixture {
        let mut child = Command::new(fixture_crate("dynamic", "sdt-dynamic-fixture"))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the fixture");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Fixture { child, lines }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line, which must be `expected`.
    fn expect(&mut self, expected: &str) {
        let line = self.lines.next().and_then(Result::ok);
        assert_eq!(line.as_deref(), Some(expected), "the fixture said");
    }

    /// The next line, which must be one of `expected`.
    fn expect_either(&mut self, expected: &[&str]) {
        let line = self.lines.next().and_then(Result::ok);
        assert!(
            line.as_deref().is_some_and(|l| expected.contains(&l)),
            "the fixture said {line:?}, not one of {expected:?}"
        );
    }

    fn finish(mut self) {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "fixture: {status}");
    }
}

impl Drop for Fixture {
    /// A test that failed half-way ends the fixture it started.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The objects of process `pid` that `sdt list -p` lists with `jit:*`
/// probes: (path, probe names).
fn listed(pid: u32) -> (String, Vec<String>) {
    let output =
        run(Command::new(sdt_binary()).args(["list", "--json", "-p", &pid.to_string(), "jit:*"]));
    assert!(output.status.success(), "sdt list -p: {output:?}");
    let probes: Value = serde_json::from_slice(&output.stdout).unwrap();
    let probes = probes.as_array().unwrap();
    let paths: BTreeSet<&str> = probes.iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert_eq!(paths.len(), 1, "one object: {paths:?}");
    let names = probes
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    let path = paths.into_iter().next().unwrap().to_string();
    (path, names)
}

/// Which tracer reads the script: the length `str()` takes counts a NUL
/// in sdt, as in bpftrace 0.23 and later, and not in bpftrace 0.17.
#[derive(Clone, Copy)]
enum Reader {
    Sdt,
    Bpftrace017,
}

/// The script both tracers run: print `compiled`'s arguments (a `&str`
/// in 3 and 4), count the last probe the fixture fires, and exit when it
/// has fired `hits` times.
fn script(path: &str, last: &str, hits: u64, reader: Reader) -> String {
    let target = format!("usdt:{path}:jit");
    let bytes = match reader {
        Reader::Sdt => "str(arg3, arg4 + 1)",
        Reader::Bpftrace017 => "str(arg3, arg4)",
    };
    let mut text = format!(
        "{target}:compiled {{ printf(\"%d %s %d %s %d\\n\", arg0, str(arg1), arg2, {bytes}, arg4); }}\n"
    );
    if last != "compiled" {
        text.push_str(&format!(
            "{target}:{last} {{ printf(\"{last} %d %d\\n\", arg0, arg1); }}\n"
        ));
    }
    text.push_str(&format!(
        "{target}:{last} {{ @n++; if (@n == {hits}) {{ exit(); }} }}\n"
    ));
    text
}

/// Checks the lines a tracer printed: `compiled` exactly `hits` times with
/// i from 0 to hits - 1, and `last` (if not `compiled`) `hits` times.
fn check_lines(tracer: &str, out: &str, last: &str, round: u64, hits: u64) {
    let compiled: BTreeSet<u64> = out
        .lines()
        .filter_map(|l| l.strip_suffix(" hot_loop -7 bytes! 6"))
        .map(|i| i.parse().unwrap())
        .collect();
    let hit_lines = out
        .lines()
        .filter(|l| l.ends_with(" hot_loop -7 bytes! 6"))
        .count();
    assert_eq!(hit_lines as u64, hits, "{tracer}: compiled hits:\n{out}");
    assert_eq!(compiled, (0..hits).collect(), "{tracer}: compiled's arg0");
    if last != "compiled" {
        let expected: BTreeSet<String> = (0..hits)
            .map(|i| format!("{last} {round} {}", -(i as i64)))
            .collect();
        let got: BTreeSet<String> = out
            .lines()
            .filter(|l| l.starts_with(&format!("{last} ")))
            .map(str::to_string)
            .collect();
        let count = out
            .lines()
            .filter(|l| l.starts_with(&format!("{last} ")))
            .count();
        assert_eq!((count as u64, got), (hits, expected), "{tracer}:\n{out}");
    }
}

#[test]
fn sdt_and_bpftrace_count_every_hit_before_and_after_a_rebuild() {
    if !require_tracing() {
        return;
    }
    const HITS: u64 = 200;
    let mut fixture = Fixture::start(&[&HITS.to_string(), "3", "--unload-traced"]);
    let pid = fixture.pid().to_string();

    // Round 1: `sdt run -p`, by the path `sdt list -p` prints.
    fixture.expect("loaded 1 Memfd enabled=false");
    let (path, names) = listed(fixture.pid());
    assert!(
        path.starts_with(&format!("/proc/{pid}/fd/")),
        "a memfd the process holds is named by its descriptor: {path}"
    );
    assert_eq!(names, ["compiled"]);
    let out = run(Command::new(sdt_binary()).args([
        "run",
        "-p",
        &pid,
        "-e",
        &script(&path, "compiled", HITS, Reader::Sdt),
    ]));
    assert!(out.status.success(), "sdt run: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    check_lines("sdt run", &text, "compiled", 1, HITS);
    fixture.expect("fired 1");
    // The tracer has exited: the kernel lowered the semaphore.
    fixture.expect("detached 1");
    fixture.expect("unloaded 1 mapped=false");

    // Round 2, rebuilt with a probe more: bpftrace 0.17, by the same kind of path.
    fixture.expect("loaded 2 Memfd enabled=false");
    let (path, names) = listed(fixture.pid());
    assert_eq!(names, ["compiled", "round2"]);
    let out = run(Command::new("bpftrace")
        .args([
            "-p",
            &pid,
            "-e",
            &script(&path, "round2", HITS, Reader::Bpftrace017),
        ])
        .stdin(Stdio::null()));
    assert!(out.status.success(), "bpftrace: {out:?}");
    check_lines(
        "bpftrace",
        &String::from_utf8_lossy(&out.stdout),
        "round2",
        2,
        HITS,
    );
    fixture.expect("fired 2");
    fixture.expect("detached 2");
    fixture.expect("unloaded 2 mapped=false");

    // Round 3: `sdt trace -p`, every object of the process, until the
    // process ends; the provider is unloaded while it is still attached.
    fixture.expect("loaded 3 Memfd enabled=false");
    let trace = Command::new(sdt_binary())
        .args(["trace", "-p", &pid, "-s", "1", "-s", "3:4", "jit:compiled"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fixture.expect("fired 3");
    fixture.expect("unloaded 3 mapped=false");
    // The fixture exits after its last round, and sdt with it. (A Ctrl-C
    // here would race with that exit, which already stops sdt: a stop
    // signal after the stop ends sdt at once.)
    let out = trace.wait_with_output().unwrap();
    assert!(out.status.success(), "sdt trace: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<&str> = text.lines().collect();
    assert_eq!(events.len() as u64, HITS, "sdt trace:\n{text}");
    for (i, event) in events.iter().enumerate() {
        assert!(
            event.ends_with(&format!(
                " jit:compiled arg0={i} arg1=\"hot_loop\" arg2=-7 arg3=\"bytes!\" arg4=6"
            )),
            "{event}"
        );
    }
    fixture.finish();
}

#[test]
fn without_memfd_the_object_comes_from_a_deleted_temporary_file() {
    if !require_tracing() {
        return;
    }
    const HITS: u64 = 50;
    let mut fixture = Fixture::start(&[&HITS.to_string(), "1", "--deny-memfd"]);
    let pid = fixture.pid().to_string();
    fixture.expect("loaded 1 TempFile enabled=false");
    let (path, _) = listed(fixture.pid());
    let file = path
        .strip_suffix(" (deleted)")
        .unwrap_or_else(|| panic!("a deleted file: {path}"));
    assert!(file.contains("/sdt-jit-"), "{file}");
    assert!(!Path::new(file).exists(), "{file} was not unlinked");
    // bpftrace 0.17 cannot open a deleted file; sdt opens it through map_files.
    let out = run(Command::new(sdt_binary()).args([
        "run",
        "-p",
        &pid,
        "-e",
        &script("", "compiled", HITS, Reader::Sdt),
    ]));
    assert!(out.status.success(), "sdt run: {out:?}");
    check_lines(
        "sdt run",
        &String::from_utf8_lossy(&out.stdout),
        "compiled",
        1,
        HITS,
    );
    fixture.expect("fired 1");
    fixture.expect("detached 1");
    fixture.expect("unloaded 1 mapped=false");
    fixture.finish();
}

/// Runs `sdt ARGS` to its end; returns (stdout, stderr). Under `-c`, the
/// command writes to sdt's standard output too: what both write while
/// both run can interleave within a line, so events that must be read
/// line by line go to a file (`-o`).
fn sdt_to_the_end(args: &[&str]) -> (String, String) {
    let out = run(Command::new(sdt_binary()).args(args).stdin(Stdio::null()));
    assert!(out.status.success(), "sdt {args:?}: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The fixture's own lines, in order (`-c` gives it sdt's standard
/// output), without whether the probe was enabled when `load` returned:
/// sdt attaches as soon as the object is mapped, which can be before
/// `dlopen` returns.
fn fixture_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| {
            ["loaded ", "fired ", "detached ", "unloaded "]
                .iter()
                .any(|s| l.starts_with(s))
        })
        .map(|l| l.split(" enabled=").next().unwrap_or(l))
        .collect()
}

#[test]
fn sdt_trace_c_attaches_to_each_provider_the_command_defines_while_it_runs() {
    if !require_tracing() {
        return;
    }
    trace_c_two_rounds("", "Memfd");
}

#[test]
fn sdt_trace_c_attaches_to_providers_loaded_from_deleted_temporary_files() {
    if !require_tracing() {
        return;
    }
    trace_c_two_rounds("--deny-memfd", "TempFile");
}

/// `sdt trace -c` on the fixture's two rounds, each a new object of
/// `backing`, with the fixture's `option`.
fn trace_c_two_rounds(option: &str, backing: &str) {
    const HITS: u64 = 200;
    let fixture = fixture_crate("dynamic", "sdt-dynamic-fixture");
    let command = format!("{} {HITS} 2 --stay-traced {option}", fixture.display());
    let dir = tempdir(&format!("trace-c-{backing}"));
    let events_file = dir.join("events");
    let (out, err) = sdt_to_the_end(&[
        "trace",
        "-o",
        events_file.to_str().unwrap(),
        "-c",
        &command,
        "-s",
        "1",
        "-s",
        "3:4",
        "jit:compiled",
    ]);
    let events_text = std::fs::read_to_string(&events_file).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    // Each round's object was attached, and went away when unloaded.
    assert_eq!(
        fixture_lines(&out),
        [
            format!("loaded 1 {backing}").as_str(),
            "fired 1",
            "unloaded 1 mapped=false",
            format!("loaded 2 {backing}").as_str(),
            "fired 2",
            "unloaded 2 mapped=false",
        ],
        "{out}\n{err}"
    );
    // Every hit of both rounds, in order, with every argument exact.
    let events: Vec<&str> = events_text.lines().collect();
    assert_eq!(events.len() as u64, 2 * HITS, "{events_text}\n{err}");
    for (n, event) in events.iter().enumerate() {
        let i = n as u64 % HITS;
        assert!(
            event.ends_with(&format!(
                " sdt-dynamic-fix jit:compiled arg0={i} arg1=\"hot_loop\" arg2=-7 arg3=\"bytes!\" arg4=6"
            )),
            "{event}"
        );
    }
    // The spec waited for an object, said so, and each round's was
    // attached.
    assert!(
        err.contains("jit:compiled: ")
            && err.contains("which the command runs, has no probe jit:compiled")
            && err.contains("sdt attaches it if the command maps an object that has it"),
        "{err}"
    );
    // A memfd is named by the descriptor the process holds, a deleted
    // file by its path.
    let pid = events[0].split_whitespace().nth(1).unwrap();
    let object = if backing == "Memfd" {
        format!("/proc/{pid}/fd/")
    } else {
        "/sdt-jit-".to_string()
    };
    let attached: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sdt: attached "))
        .collect();
    assert_eq!(attached.len(), 2, "{err}");
    for line in attached {
        assert!(
            line.contains(&object)
                && line.ends_with(&format!(":jit:compiled (1 site) in process {pid}")),
            "{line}"
        );
    }
    assert!(
        err.contains(&format!("sdt: {} events, 0 lost, 2 sites", 2 * HITS)),
        "{err}"
    );
}

#[test]
fn sdt_run_c_reads_the_arguments_of_every_round_including_a_probe_added_by_a_rebuild() {
    if !require_tracing() {
        return;
    }
    const HITS: u64 = 150;
    let fixture = fixture_crate("dynamic", "sdt-dynamic-fixture");
    let command = format!("{} {HITS} 2 --stay-traced", fixture.display());
    let script = "usdt:*:jit:compiled { @compiled[str(arg1), (int32)arg2, str(arg3, arg4 + 1)] = count(); @arg0 = sum(arg0); }
                  usdt::jit:round* { @rounds[arg0] = count(); @arg1 = sum((int64)arg1); }";
    let (out, err) = sdt_to_the_end(&["run", "-f", "json", "-c", &command, "-e", script]);
    let maps: Vec<Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v["type"] == "map")
        .collect();
    let map = |name: &str| {
        maps.iter()
            .find_map(|m| m["data"].get(name).cloned())
            .unwrap_or_else(|| panic!("no {name} in:\n{out}\n{err}"))
    };
    let sum = (0..HITS).sum::<u64>();
    assert_eq!(
        map("@compiled"),
        serde_json::json!({"hot_loop,-7,bytes!": 2 * HITS}),
        "{err}"
    );
    assert_eq!(map("@arg0"), serde_json::json!(2 * sum));
    assert_eq!(map("@rounds"), serde_json::json!({"2": HITS}));
    assert_eq!(map("@arg1"), serde_json::json!(-(sum as i64)));
}

#[test]
fn sdt_run_p_attaches_to_the_provider_rebuilt_after_it_started() {
    if !require_tracing() {
        return;
    }
    const HITS: u64 = 100;
    let mut fixture = Fixture::start(&[&HITS.to_string(), "2", "--stay-traced"]);
    let pid = fixture.pid().to_string();
    fixture.expect("loaded 1 Memfd enabled=false");
    // Round 1's object is there at the start; round 2's is not, and
    // neither is its probe `round2`.
    let script = format!(
        "usdt:*:jit:compiled {{ @compiled = count(); }}
         usdt:*:jit:round2 {{ @round2 = count(); @arg1 = sum((int64)arg1); if (@round2 == {HITS}) {{ exit(); }} }}"
    );
    let tracer = Command::new(sdt_binary())
        .args(["run", "-p", &pid, "-e", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fixture.expect("fired 1");
    fixture.expect("unloaded 1 mapped=false");
    // sdt, attached all along, may have attached to round 2's object
    // before `load` returned: the probe may already be enabled then.
    fixture.expect_either(&[
        "loaded 2 Memfd enabled=false",
        "loaded 2 Memfd enabled=true",
    ]);
    fixture.expect("fired 2");
    fixture.expect("unloaded 2 mapped=false");
    let out = tracer.wait_with_output().unwrap();
    assert!(out.status.success(), "sdt run: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let sum = (0..HITS).sum::<u64>() as i64;
    for line in [
        format!("@compiled: {}", 2 * HITS),
        format!("@round2: {HITS}"),
        format!("@arg1: {}", -sum),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    fixture.finish();
}
