//! Probe arguments that are global and static variables, which gcc writes
//! relative to the instruction pointer: `some_global(%rip)`,
//! `8+some_record(%rip)` (-fPIE, -fPIC), `some_record+8(%rip)` and
//! `ring(,%rax,4)` (-fno-pie), `calls.0(%rip)` (a static local). They are
//! read in a PIE, in an executable that is not position-independent and in
//! a shared library, under `sdt trace -c`, `sdt run -c`, `-p` on a running
//! process, and system-wide with two processes loaded at different
//! addresses.
//!
//! The fixture (`tests/fixtures/rip`) changes every variable between hits
//! by a rule of its seed, which [`expected`] repeats, so that a read from
//! any other address gives other values. Readelf first confirms that the
//! operands are the forms this file is about: if gcc stops writing them,
//! these tests fail instead of passing on registers.
//!
//! They attach real probes: root is needed. With `CI=true` a missing
//! privilege or tool fails them; elsewhere they print a loud SKIP.

mod list_common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use list_common::{assert_no_panic, have, list_json, readelf_notes, require, sdt};
use sdt_testing::fixture::C;
use serde_json::Value;

/// Hits per run of the fixture (its `HITS`).
const HITS: i64 = 5;

/// Longest wait for anything; each test takes about a second.
const TIMEOUT: Duration = Duration::from_secs(20);

struct Built {
    /// `prog.c` and `other.c` as a PIE.
    pie: PathBuf,
    /// The same, not position-independent (`-fno-pie -no-pie`).
    nopie: PathBuf,
    /// The PIE without its symbol table.
    stripped: PathBuf,
    /// `lib.c`, which both programs load.
    lib: PathBuf,
}

/// Builds the fixture once per test binary.
fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Option<Built>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !require(have("cc"), "a C compiler (cc)")
                || !require(have("readelf"), "readelf (binutils)")
                || !require(have("strip"), "strip (binutils)")
            {
                return None;
            }
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rip-fixtures");
            std::fs::create_dir_all(&dir).unwrap();
            let dir = dir.canonicalize().unwrap();
            let cc = |source: &str| {
                C::new(format!("tests/fixtures/rip/{source}"))
                    .flags(&["-O2", "-g", "-Wall"])
                    .dir(&dir)
            };
            let lib = cc("lib.c")
                .flags(&["-fPIC", "-shared"])
                .output("librip.so")
                .build();
            let program = |out: &str, mode: &[&str]| {
                cc("prog.c")
                    .source("tests/fixtures/rip/other.c")
                    .flags(mode)
                    .link(&lib)
                    .output(out)
                    .build()
            };
            let pie = program("prog-pie", &["-fPIE", "-pie"]);
            let nopie = program("prog-nopie", &["-fno-pie", "-no-pie"]);
            let stripped = dir.join("prog-stripped");
            let status = Command::new("strip")
                .arg("-o")
                .arg(&stripped)
                .arg(&pie)
                .status()
                .expect("run strip");
            assert!(status.success(), "strip failed");
            Some(Built {
                pie,
                nopie,
                stripped,
                lib,
            })
        })
        .as_ref()
}

fn setup() -> Option<&'static Built> {
    if !sdt_testing::require_root() {
        return None;
    }
    built()
}

/// What `provider:name` passes at hit `i` of a run with `seed`, argument
/// by argument, as the fixture's comments say; `None` where the argument
/// cannot be read.
fn expected(probe: &str, seed: i64, i: i64) -> Vec<Option<i64>> {
    let some_global = (seed * 1000 + 7 * i) * if i % 2 == 1 { -1 } else { 1 };
    match probe {
        "p:g" | "p:g5" => vec![Some(some_global)],
        "p:f" => vec![Some(seed + 3 * i)],
        "p:s" => vec![Some(seed * 10 + i)],
        "p:a" => vec![Some(seed * 100 - i)],
        "p:l" => vec![Some(i + 1)],
        "p:idx" => vec![Some(i), Some(seed * 100 + 1000 * (i & 7) - i)],
        "p:shadow" => vec![None, Some(some_global)],
        "lib:g" => vec![Some(seed * 2000 + 11 * i)],
        "lib:f" => vec![Some((seed * 2 + 5 * i) * if i % 2 == 1 { 1 } else { -1 })],
        other => panic!("no expectation for {other}"),
    }
}

/// [`expected`] for every hit of a run.
fn expected_run(probe: &str, seed: i64) -> Vec<Vec<Option<i64>>> {
    (0..HITS).map(|i| expected(probe, seed, i)).collect()
}

/// The argument specs of each probe of `path`, as readelf prints them.
fn readelf_specs(path: &Path) -> BTreeMap<String, String> {
    readelf_notes(path)
        .into_iter()
        .map(|n| (format!("{}:{}", n.provider, n.name), n.args))
        .collect()
}

#[test]
fn gcc_writes_the_operands_relative_to_the_instruction_pointer() {
    let Some(b) = built() else { return };
    let pie = readelf_specs(&b.pie);
    let nopie = readelf_specs(&b.nopie);
    let lib = readelf_specs(&b.lib);
    for specs in [&pie, &nopie] {
        assert_eq!(specs["p:g"], "-8@some_global(%rip)", "{specs:?}");
        assert_eq!(specs["p:s"], "-8@counter(%rip)", "{specs:?}");
        assert_eq!(specs["p:l"], "-4@calls.0(%rip)", "{specs:?}");
        assert_eq!(
            specs["p:shadow"], "-4@shadow(%rip) -8@some_global(%rip)",
            "{specs:?}"
        );
        assert_eq!(specs["p:g5"], "-8@some_global(%rip)", "{specs:?}");
    }
    // The offset before the symbol in position-independent code, after it
    // elsewhere.
    assert_eq!(pie["p:f"], "-4@8+some_record(%rip)");
    assert_eq!(pie["p:a"], "-4@12+table(%rip)");
    assert_eq!(nopie["p:f"], "-4@some_record+8(%rip)");
    assert_eq!(nopie["p:a"], "-4@table+12(%rip)");
    let idx = nopie["p:idx"].split_once(' ').unwrap().1;
    assert!(
        idx.starts_with("-4@ring(,%r") && idx.ends_with(",4)"),
        "an array element by an index register: {idx}"
    );
    assert_eq!(lib["lib:g"], "-8@lib_id(%rip)");
    assert_eq!(lib["lib:f"], "-4@8+lib_state(%rip)");
}

/// The link-time address of `symbol` in `path`, from `readelf -s`.
fn readelf_symbol(path: &Path, symbol: &str) -> u64 {
    let out = Command::new("readelf")
        .args(["-s", "--wide"])
        .arg(path)
        .output()
        .expect("run readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() == 8 && fields[7] == symbol)
                .then(|| u64::from_str_radix(fields[1], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("readelf -s shows no {symbol}"))
}

#[test]
fn sdt_list_decodes_the_symbol_and_its_address() {
    let Some(b) = built() else { return };
    let probes = list_json([&b.pie]);
    let location = |name: &str, arg: usize| -> Value {
        probes
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("p:{name} is listed"))["sites"][0]["args"][arg]["location"]
            .clone()
    };
    assert_eq!(
        location("f", 0),
        serde_json::json!({"kind": "symbol", "symbol": "some_record", "offset": 8,
                           "base": null, "index": null, "scale": 1})
    );
    assert_eq!(location("l", 0)["symbol"], "calls.0");
    // docs/json.md's example of this kind has its fields.
    let example: Value = include_str!("../../../docs/json.md")
        .lines()
        .find(|l| l.starts_with(r#"{"kind":"symbol""#))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("docs/json.md shows a symbol location");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&example), keys(&location("f", 0)));
    let nopie = list_json([b.nopie.as_os_str(), "p:idx".as_ref()]);
    let ring = &nopie[0]["sites"][0]["args"][1]["location"];
    assert_eq!(ring["kind"], "symbol", "{ring}");
    assert_eq!(
        (&ring["symbol"], &ring["scale"]),
        (&"ring".into(), &4.into())
    );
    assert!(ring["index"].as_str().unwrap().starts_with('r'), "{ring}");

    // -v: the address in the file, as readelf has the symbol; or why not.
    let out = sdt().args(["list", "-v"]).arg(&b.pie).output().unwrap();
    assert_no_panic(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let record = readelf_symbol(&b.pie, "some_record");
    let want = format!(
        "arg0: 4-byte signed at some_record+8 (`8+some_record(%rip)`, address {:#x} in the file)",
        record + 8
    );
    assert!(text.contains(&want), "{want}\n{text}");
    assert!(
        text.contains("several symbols named `shadow`"),
        "two statics named shadow: {text}"
    );
    let out = sdt()
        .args(["list", "-v"])
        .arg(&b.stripped)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("`some_global` is not in the file's symbol table (is the file stripped?"),
        "{text}"
    );
}

/// Runs `sdt trace --json -o FILE ARGS` to completion; returns the events
/// and sdt's standard error.
fn trace_json(name: &str, args: &[&str]) -> (Vec<Value>, String) {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rip-{name}.ndjson"));
    let out = sdt()
        .args(["trace", "--json", "-o"])
        .arg(&file)
        .args(args)
        .output()
        .expect("run sdt");
    check(&out, "sdt trace");
    (
        json_events(&std::fs::read(&file).unwrap()),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(out: &Output, what: &str) {
    assert_no_panic(out);
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The event lines of `sdt trace --json` output, without the summary.
fn json_events(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).expect("each line is JSON"))
        .filter(|v| v.get("summary").is_none())
        .collect()
}

/// The arguments of every hit of `provider:name`, in order, for one PID
/// (or all, with `None`); `None` for an argument printed as null.
fn hits(events: &[Value], probe: &str, pid: Option<u32>) -> Vec<Vec<Option<i64>>> {
    events
        .iter()
        .filter(|e| {
            format!(
                "{}:{}",
                e["provider"].as_str().unwrap(),
                e["name"].as_str().unwrap()
            ) == probe
        })
        .filter(|e| pid.is_none_or(|pid| e["pid"] == pid))
        .map(|e| {
            e["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(Value::as_i64)
                .collect()
        })
        .collect()
}

const PROBES: [&str; 10] = [
    "p:g", "p:f", "p:s", "p:a", "p:l", "p:idx", "p:shadow", "p:g5", "lib:g", "lib:f",
];

#[test]
fn sdt_trace_c_reads_every_form_in_a_pie_and_a_non_pie_program() {
    let Some(b) = setup() else { return };
    let lib_probes = format!("{}:lib:*", b.lib.display());
    for (program, seed) in [(&b.pie, 3), (&b.nopie, 4)] {
        let command = format!("{} {seed}", program.display());
        let (events, stderr) = trace_json(
            &format!("trace-{seed}"),
            &["-c", &command, "p:*", &lib_probes],
        );
        for probe in PROBES {
            assert_eq!(
                hits(&events, probe, None),
                expected_run(probe, seed),
                "{probe} in {}",
                program.display()
            );
        }
        // The one argument that cannot be read is refused alone: its
        // site is traced, with the reason.
        assert!(
            stderr.contains("arg0 `-4@shadow(%rip)`: the file has several symbols named `shadow`"),
            "{stderr}"
        );
        assert!(stderr.contains("10 sites"), "{stderr}");
    }
}

#[test]
fn sdt_trace_c_refuses_only_the_arguments_a_stripped_file_cannot_name() {
    let Some(b) = setup() else { return };
    let command = format!("{} 9", b.stripped.display());
    let lib_probes = format!("{}:lib:*", b.lib.display());
    let (events, stderr) = trace_json("stripped", &["-c", &command, "p:*", &lib_probes]);
    assert!(
        stderr.contains(
            "arg0 `-8@some_global(%rip)`: `some_global` is not in the file's symbol table"
        ),
        "{stderr}"
    );
    // Every site is still traced; what needs no symbol is still read.
    assert_eq!(hits(&events, "p:g", None), vec![vec![None]; HITS as usize]);
    assert_eq!(
        hits(&events, "p:shadow", None),
        vec![vec![None, None]; HITS as usize]
    );
    for probe in ["p:idx", "lib:g", "lib:f"] {
        assert_eq!(
            hits(&events, probe, None),
            expected_run(probe, 9),
            "{probe}"
        );
    }
}

/// Runs `sdt run ARGS` to completion; returns its standard output.
fn run_ok(args: &[&str]) -> String {
    let out = sdt().arg("run").args(args).output().expect("run sdt");
    check(&out, "sdt run");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A script printing `NAME PID ARGS...` for each hit of the fixture's
/// readable probes in `program` and the library.
fn print_script(program: &Path, lib: &Path) -> String {
    let (program, lib) = (program.display(), lib.display());
    let mut script = String::new();
    for probe in PROBES {
        let (provider, name) = probe.split_once(':').unwrap();
        let object = if provider == "lib" { &lib } else { &program };
        let args: Vec<String> = expected(probe, 0, 0)
            .iter()
            .enumerate()
            .filter(|(_, value)| value.is_some())
            .map(|(n, _)| format!("(int64)arg{n}"))
            .collect();
        let format = vec!["%d"; args.len()].join(" ");
        script.push_str(&format!(
            "usdt:{object}:{provider}:{name} {{ printf(\"{probe} %d {format}\\n\", pid, {}); }}\n",
            args.join(", ")
        ));
    }
    script
}

/// `NAME PID VALUES...` lines into hits of `probe` for `pid`, with the
/// arguments the script did not print as `None`.
fn printed(stdout: &str, probe: &str, pid: u32) -> Vec<Vec<Option<i64>>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(probe)?.strip_prefix(' '))
        .filter_map(|rest| {
            let mut words = rest.split(' ');
            (words.next()?.parse::<u32>().ok()? == pid).then_some(words)
        })
        .map(|mut words| {
            expected(probe, 0, 0)
                .iter()
                .map(|readable| readable.map(|_| words.next().unwrap().parse().unwrap()))
                .collect()
        })
        .collect()
}

#[test]
fn sdt_run_c_reads_them_and_refuses_only_scripts_that_read_the_ambiguous_one() {
    let Some(b) = setup() else { return };
    for (program, seed) in [(&b.pie, 5), (&b.nopie, 6)] {
        let command = format!("{} {seed}", program.display());
        let stdout = run_ok(&["-c", &command, "-e", &print_script(program, &b.lib)]);
        let pid: u32 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("p:g ")?.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no p:g line: {stdout}"));
        for probe in PROBES {
            assert_eq!(
                printed(&stdout, probe, pid),
                expected_run(probe, seed),
                "{probe} in {}:\n{stdout}",
                program.display()
            );
        }
    }

    // The probe with an argument that cannot be read is traced by a
    // script that does not read it, and refused to one that does.
    let pie = b.pie.display();
    let command = format!("{pie} 1");
    let stdout = run_ok(&[
        "-c",
        &command,
        "-e",
        &format!("usdt:{pie}:p:shadow {{ @hits = count(); @sum = sum(arg1); }}"),
    ]);
    assert!(stdout.contains("@hits: 5"), "{stdout}");
    let sum: i64 = (0..HITS)
        .map(|i| expected("p:shadow", 1, i)[1].unwrap())
        .sum();
    assert!(stdout.contains(&format!("@sum: {sum}")), "{stdout}");
    let out = sdt()
        .args(["run", "-c", &command, "-e"])
        .arg(format!(
            "usdt:{pie}:p:shadow {{ printf(\"%d\\n\", arg0); }}"
        ))
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("arg0 `-4@shadow(%rip)`: the file has several symbols named `shadow`"),
        "{stderr}"
    );
}

/// A fixture process that waits for a line on its standard input.
struct Waiting {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Waiting {
    fn start(program: &Path, seed: i64) -> Waiting {
        let mut child = Command::new(program)
            .args([seed.to_string().as_str(), "wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the fixture");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Waiting {
            stdin: child.stdin.take(),
            stdout,
            child,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets it hit its probes, and waits for it to end. Checks that p:g5
    /// held a uprobe, which the kernel may have turned into a call; says
    /// which, for the log.
    fn go(&mut self) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let status = wait_for(&mut self.child, "the fixture");
        assert!(status.success(), "the fixture: {status}");
        match line.trim_end() {
            "site e8" => {} // the optimized path: a call into a trampoline
            "site cc" => eprintln!(
                "note: p:g5 kept its breakpoint: this kernel does not optimize uprobes, \
                 so only the breakpoint path was checked there"
            ),
            other => panic!("p:g5 held no uprobe after the hits: {other}"),
        }
    }

    /// The address where `object` is loaded: its mapping at file offset 0.
    fn base(&self, object: &Path) -> u64 {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).unwrap();
        maps.lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.len() >= 6 && Path::new(fields[5]) == object && fields[2] == "00000000")
                    .then(|| u64::from_str_radix(fields[0].split('-').next()?, 16).ok())
                    .flatten()
            })
            .unwrap_or_else(|| panic!("{} maps no {}", self.pid(), object.display()))
    }

    /// Waits until a uprobe's breakpoint is at each of `offsets` of the
    /// file `object` in this process.
    fn wait_for_breakpoints(&self, object: &Path, offsets: &[u64]) {
        let deadline = Instant::now() + TIMEOUT;
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.pid())).unwrap();
        loop {
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).unwrap();
            let armed = offsets.iter().all(|&offset| {
                maps.lines().any(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    if fields.len() < 6 || Path::new(fields[5]) != object {
                        return false;
                    }
                    let (start, end) = fields[0].split_once('-').unwrap();
                    let start = u64::from_str_radix(start, 16).unwrap();
                    let end = u64::from_str_radix(end, 16).unwrap();
                    let from = u64::from_str_radix(fields[2], 16).unwrap();
                    if offset < from || offset - from >= end - start {
                        return false;
                    }
                    let mut byte = [0u8];
                    std::os::unix::fs::FileExt::read_exact_at(
                        &mem,
                        &mut byte,
                        start + (offset - from),
                    )
                    .is_ok()
                        && byte[0] == 0xcc
                })
            });
            if armed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no breakpoints in {} within {TIMEOUT:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(child: &mut Child, what: &str) -> std::process::ExitStatus {
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

/// The file offsets of the sites of `provider:name` in `path`, from
/// `sdt list --json`.
fn site_offsets(path: &Path, probe: &str) -> Vec<u64> {
    list_json([path.as_os_str(), probe.as_ref()])
        .iter()
        .flat_map(|p| p["sites"].as_array().unwrap().clone())
        .map(|s| s["file_offset"].as_u64().unwrap())
        .collect()
}

#[test]
fn sdt_trace_p_reads_them_in_a_running_process() {
    let Some(b) = setup() else { return };
    let mut target = Waiting::start(&b.pie, 7);
    let pid = target.pid().to_string();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rip-p.ndjson");
    let mut tracer = sdt()
        .args(["trace", "--json", "-o"])
        .arg(&file)
        .args(["-p", &pid, "p:*", "lib:*"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sdt");
    let mut stderr = BufReader::new(tracer.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "sdt ended before tracing: {seen}"
        );
        seen.push_str(&line);
        if line.contains("tracing") {
            break;
        }
    }
    target.go();
    // With -p, sdt ends when the process does.
    let status = wait_for(&mut tracer, "sdt trace -p");
    stderr.read_to_string(&mut seen).unwrap();
    assert!(status.success(), "{seen}");
    assert!(!seen.contains("panicked"), "{seen}");
    let events = json_events(&std::fs::read(&file).unwrap());
    for probe in PROBES {
        assert_eq!(
            hits(&events, probe, None),
            expected_run(probe, 7),
            "{probe}"
        );
    }
}

#[test]
fn sdt_run_system_wide_reads_them_in_processes_loaded_at_different_addresses() {
    let Some(b) = setup() else { return };
    let mut first = Waiting::start(&b.pie, 11);
    let mut second = Waiting::start(&b.pie, 12);
    // Each process has the program and the library at its own address: the
    // same probe site fires at different addresses, with each process's
    // variables at different addresses too.
    assert_ne!(first.base(&b.pie), second.base(&b.pie));
    assert_ne!(first.base(&b.lib), second.base(&b.lib));

    let mut tracer = sdt()
        .args(["run", "-e", &print_script(&b.pie, &b.lib)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sdt");
    let program_sites: Vec<u64> = PROBES
        .iter()
        .filter(|p| p.starts_with("p:"))
        .flat_map(|p| site_offsets(&b.pie, p))
        .collect();
    let lib_sites: Vec<u64> = site_offsets(&b.lib, "lib:*");
    assert_eq!((program_sites.len(), lib_sites.len()), (8, 2));
    for target in [&first, &second] {
        target.wait_for_breakpoints(&b.pie, &program_sites);
        target.wait_for_breakpoints(&b.lib, &lib_sites);
    }
    first.go();
    second.go();
    // Without -p or -c, sdt runs until interrupted.
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&tracer),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = wait_for(&mut tracer, "sdt run");
    let mut stdout = String::new();
    tracer
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    tracer
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for (target, seed) in [(&first, 11), (&second, 12)] {
        for probe in PROBES {
            assert_eq!(
                printed(&stdout, probe, target.pid()),
                expected_run(probe, seed),
                "{probe} in process {} (seed {seed}):\n{stdout}",
                target.pid()
            );
        }
    }
}
