//! `sdt run` on real programs: children followed and unrelated processes
//! left alone, CPython, libstdc++, the JVM under `-c`, a uretprobe latency
//! histogram, demangled C++ and Rust symbols after the program exited,
//! uprobe offsets checked, tracepoints without tracefs mounted, globals
//! read through `uaddr()` in a PIE program, and `clear()`, `zero()`,
//! `delete()` and `print()` taking effect where they stand.
//!
//! These attach real probes, so they need root (or CAP_BPF, CAP_PERFMON
//! and CAP_SYS_ADMIN). With `CI=true` a missing privilege or tool fails
//! the test; elsewhere the test prints a loud SKIP.

mod list_common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;

struct Built {
    forker: PathBuf,
    thrower: PathBuf,
    net: PathBuf,
    globals: PathBuf,
    order: PathBuf,
}

/// The fixtures of `tests/fixtures/run`, built once.
fn built() -> Option<Built> {
    if !require(have("cc"), "a C compiler (cc)") || !require(have("c++"), "a C++ compiler (c++)") {
        return None;
    }
    let compile = |fixture: C, extra: &[&str]| fixture.flags(&["-O2", "-g"]).flags(extra).build();
    let c = |file: &str| C::new(format!("tests/fixtures/run/{file}"));
    Some(Built {
        forker: compile(c("forker.c"), &[]),
        thrower: compile(
            C::cxx("tests/fixtures/run/thrower.cpp"),
            &["-fno-omit-frame-pointer"],
        ),
        net: compile(c("net.c"), &[]),
        globals: compile(c("globals.c"), &["-fPIE", "-pie"]),
        order: compile(c("order.c"), &["-pthread"]),
    })
}

fn setup() -> Option<Built> {
    if !sdt_testing::require_root() {
        return None;
    }
    built()
}

/// Runs `sdt run ARGS`; returns its output after checking it succeeded.
fn run_ok(args: &[&str]) -> Output {
    let out = sdt().arg("run").args(args).output().expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "sdt run {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
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

#[test]
fn children_are_followed_and_no_follow_keeps_to_one_process() {
    let Some(b) = setup() else { return };
    let forker = b.forker.display().to_string();
    let script = format!(
        "usdt:{forker}:forker:hit {{ @hits[pid] = count(); @all = count(); @at[usym(reg(\"ip\"))] = count(); }}"
    );
    let command = format!("{forker} 3 7");
    let out = run_ok(&["-c", &command, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let hits = map_lines(&stdout, "hits");
    assert_eq!(hits.len(), 4, "the command and its 3 children: {stdout}");
    assert!(hits.values().all(|&n| n == 7), "7 hits in each: {stdout}");
    assert!(stdout.contains("@all: 28"), "{stdout}");
    // The children had exited before the map was printed; their addresses
    // still resolve (one key per process, the same function in each).
    let at: Vec<&str> = stdout.lines().filter(|l| l.starts_with("@at[")).collect();
    assert_eq!(at.len(), 4, "{stdout}");
    assert!(
        at.iter()
            .all(|l| l.starts_with("@at[hits]: 7") || l.starts_with("@at[main]: 7")),
        "{stdout}"
    );
    // Each process saw its semaphore raised.
    let raised = stderr
        .lines()
        .filter(|l| l.starts_with("forker:") && l.ends_with("semaphore 1"))
        .count();
    assert_eq!(raised, 4, "{stderr}");

    let out = run_ok(&["--no-follow", "-c", &command, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let hits = map_lines(&stdout, "hits");
    assert_eq!(hits.len(), 1, "the command only: {stdout}");
    assert!(stdout.contains("@all: 7"), "{stdout}");
}

/// Runs the forker under `sdt run EXTRA -c 'forker 2 5 go'` while
/// another instance of it, started first and not a child of the command,
/// hits the same probe. Returns what sdt printed and what the other
/// instance printed on stderr.
fn beside_an_unrelated_instance(b: &Built, extra: &[&str]) -> (String, String) {
    let forker = b.forker.display().to_string();
    let mut other = Command::new(&b.forker)
        .args(["1", "5", "go"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = format!(
        "usdt:{forker}:forker:hit {{ @hits[pid] = count(); }} \
         BEGIN {{ printf(\"tracing\\n\"); }}"
    );
    let command = format!("{forker} 2 5 go");
    let mut traced = sdt()
        .arg("run")
        .args(extra)
        .args(["-B", "line", "-c", &command, "-e", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(traced.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "tracing");
    // BEGIN runs before the probes are attached; the command waits on its
    // standard input until they are, so let it reach main first.
    std::thread::sleep(std::time::Duration::from_millis(300));
    other.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let other_out = other.wait_with_output().unwrap();
    traced.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(traced.wait().unwrap().success());
    (
        rest.join("\n"),
        String::from_utf8_lossy(&other_out.stderr).into_owned(),
    )
}

/// The PIDs an instance of the forker reported on stderr.
fn forker_pids(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| {
            Some(
                l.strip_prefix("forker: pid ")?
                    .split_whitespace()
                    .next()?
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn hits_of_an_unrelated_instance_are_not_counted() {
    let Some(b) = setup() else { return };
    let (stdout, other) = beside_an_unrelated_instance(&b, &[]);
    let hits = map_lines(&stdout, "hits");
    assert_eq!(
        hits.len(),
        3,
        "the command and its 2 children only: {stdout}"
    );
    assert!(hits.values().all(|&n| n == 5), "{stdout}");
    let others = forker_pids(&other);
    assert_eq!(others.len(), 2, "{other}");
    for pid in others {
        assert!(
            !hits.contains_key(&pid),
            "{pid} is not in the tree: {stdout}"
        );
    }
}

#[test]
fn with_no_follow_an_unrelated_instance_is_untouched() {
    let Some(b) = setup() else { return };
    let (stdout, other) = beside_an_unrelated_instance(&b, &["--no-follow"]);
    let hits = map_lines(&stdout, "hits");
    assert_eq!(hits.len(), 1, "the command only: {stdout}");
    // Its semaphore stayed down, in both of its processes.
    assert_eq!(other.matches("semaphore 0").count(), 2, "{other}");
}

#[test]
fn exit_status_of_the_command_passes_through() {
    let Some(b) = setup() else { return };
    let _ = b;
    let out = sdt()
        .args(["run", "-e", "BEGIN { }", "-c", "sh -c 'exit 7'"])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn cpython_calls_are_counted_exactly() {
    let python = Path::new("/usr/bin/python3.11");
    if !require(python.exists(), "Debian's /usr/bin/python3.11") || !sdt_testing::require_root() {
        return;
    }
    fn calls(n: u64) -> u64 {
        if n < 2 {
            1
        } else {
            1 + calls(n - 1) + calls(n - 2)
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/trace/fib.py");
    let command = format!("{} {} 15", python.display(), script.display());
    let out = run_ok(&[
        "-c",
        &command,
        "-e",
        "usdt:/usr/bin/python3.11:python:function__entry { @[str(arg1)] = count(); }",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let counts = map_lines(&stdout, "");
    assert_eq!(
        counts.get("fib").copied(),
        Some(calls(15) as i64),
        "{stdout}"
    );
}

#[test]
fn libstdcxx_throws_and_a_uretprobe_latency_histogram() {
    let Some(b) = setup() else { return };
    let thrower = b.thrower.display().to_string();
    let script = format!(
        "usdt:libstdc++:libstdcxx:throw {{ @throws = count(); }}\n\
         uprobe:{thrower}:\"shop::nap*\" {{ @start[tid] = nsecs; }}\n\
         uretprobe:{thrower}:\"shop::nap*\" /@start[tid]/ {{ @ms = lhist((nsecs - @start[tid]) / 1000000, 0, 100, 20); delete(@start[tid]); }}"
    );
    let command = format!("{thrower} 9");
    let out = run_ok(&["-c", &command, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("@throws: 9"), "{stdout}");
    // Two naps of 3 ms and three of 40 ms, in buckets wide enough for a
    // loaded machine's delays.
    let bucket = |label: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(label))
            .and_then(|l| l[16..].split_whitespace().next()?.parse::<u64>().ok())
    };
    assert_eq!(bucket("[0, 20)"), Some(2), "{stdout}");
    assert_eq!(bucket("[40, 60)"), Some(3), "{stdout}");
}

#[test]
fn cpp_and_rust_symbols_are_demangled_even_after_the_program_exits() {
    let Some(b) = setup() else { return };
    let thrower = b.thrower.display().to_string();
    // The map is printed after the program has exited.
    let script = format!(
        "uprobe:{thrower}:\"shop::checkout(int)\" {{ @sym[usym(reg(\"ip\"))] = count(); @stack[ustack(2)] = count(); @f[func] = count(); }}"
    );
    let out = run_ok(&["-c", &format!("{thrower} 4"), "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("@sym[shop::checkout(int)]: 4"), "{stdout}");
    assert!(stdout.contains("@f[shop::checkout(int)]: 4"), "{stdout}");
    // At the function's first instruction its caller's frame is not yet
    // linked (as in every frame-pointer unwinder); the frame above it is.
    let frames: Vec<&str> = stdout
        .split("@stack[\n")
        .nth(1)
        .and_then(|rest| rest.split("]:").next())
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect();
    assert_eq!(frames.first(), Some(&"shop::checkout(int)+0"), "{stdout}");
    assert!(
        frames
            .get(1)
            .is_some_and(|f| f.contains('+') && !f.starts_with("0x")),
        "the second frame is symbolized: {stdout}"
    );

    // A Rust program built by this workspace: `summary` runs only while
    // the `inventory` probe, whose argument it builds, is traced.
    let example = Path::new(env!("CARGO_BIN_EXE_sdt")).with_file_name("sdt-example");
    if !require(
        example.exists(),
        "target/release/sdt-example (cargo build --release -p sdt-example)",
    ) {
        return;
    }
    let example = example.display().to_string();
    let out = run_ok(&[
        "-c",
        &format!("{example} --orders 2 --interval-ms 1"),
        "-e",
        &format!(
            "uprobe:{example}:\"sdt_example::summary\" {{ @[usym(reg(\"ip\")), func] = count(); }} \
             usdt:{example}:shop:inventory {{ }}"
        ),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("@[sdt_example::summary, sdt_example::summary]: "),
        "{stdout}"
    );
}

#[test]
fn the_jvm_under_c_is_traced_in_a_library_it_loads_later() {
    let jvm = Path::new("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so");
    if !require(jvm.exists(), "OpenJDK 17's libjvm.so") || !sdt_testing::require_root() {
        return;
    }
    let java = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";
    let script = format!(
        "usdt:{}:hotspot:vm__init__end {{ @init = count(); }} usdt:{}:hotspot:thread__start {{ @threads = count(); }}",
        jvm.display(),
        jvm.display()
    );
    let out = run_ok(&[
        "-c",
        &format!("{java} -Xshare:auto -version"),
        "-e",
        &script,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("@init: 1"), "{stdout}");
    let threads: i64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("@threads: ")?.parse().ok())
        .unwrap_or(0);
    assert!(threads >= 2, "JVM threads start at init: {stdout}");
}

#[test]
fn uprobe_offsets_must_start_an_instruction() {
    let Some(b) = setup() else { return };
    let forker = b.forker.display().to_string();
    let dump = |spec: &str| {
        let out = sdt()
            .args([
                "run",
                "--dump",
                "-e",
                &format!("uprobe:{forker}:{spec} {{ }}"),
            ])
            .output()
            .unwrap();
        assert_no_panic(&out);
        out
    };
    // The function's first instruction is a 10-byte `movabs`.
    for inside in [1, 2, 9] {
        let out = dump(&format!("ten_byte_load+{inside}"));
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "offset {inside} is inside an instruction of ten_byte_load"
            )),
            "{stderr}"
        );
    }
    let out = dump("ten_byte_load+10");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = dump("ten_byte_load+100000");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("past its end"));
}

#[test]
fn tracepoints_work_without_tracefs_mounted() {
    let Some(b) = setup() else { return };
    let _ = b;
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.contains(" - tracefs "));
    let out = run_ok(&[
        "-c",
        "cat /etc/hostname",
        "-e",
        "tracepoint:syscalls:sys_enter_openat /pid == cpid/ { @[str(args->filename)] = count(); }",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("@[/etc/hostname]: 1"), "{stdout}");
    let after = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.contains(" - tracefs "));
    assert_eq!(mounted, after, "sdt mounted nothing");
}

#[test]
fn ntop_prints_ipv4_and_ipv6_addresses_read_from_the_program() {
    let Some(b) = setup() else { return };
    let net = b.net.display().to_string();
    let script = format!(
        "struct conn {{ uint32_t v4; uint8_t v6[16]; }};\n\
         usdt:{net}:net:accepted {{ $c = (struct conn *)arg0; \
         printf(\"%s %s\\n\", ntop($c->v4), ntop(10, $c->v6)); @[ntop(2, $c->v4)] = count(); }}"
    );
    let out = run_ok(&["-c", &net, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("10.1.2.3 2001:db8::1\n"), "{stdout}");
    assert!(stdout.contains("@[10.1.2.3]: 1"), "{stdout}");
}

#[test]
fn uaddr_reads_the_globals_of_a_pie_program() {
    let Some(b) = setup() else { return };
    let exe = b.globals.to_str().unwrap();
    let script = format!(
        "usdt:{exe}:globals:tick {{ printf(\"tick %d %u %ld\\n\", *uaddr(\"counter\"), \
         *uaddr(\"flag\"), *uaddr(\"big\")); }} \
         uprobe:{exe}:step {{ printf(\"step %d %d\\n\", arg0, *uaddr(\"counter\")); }}"
    );
    let out = run_ok(&["-e", &script, "-c", exe]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The program's own log and sdt's lines share standard output.
    let logged: Vec<&str> = stdout.lines().filter(|l| l.starts_with("tick")).collect();
    assert_eq!(
        logged.len(),
        10,
        "5 from the program, 5 from sdt:\n{stdout}"
    );
    let mut counts = BTreeMap::new();
    for line in &logged {
        *counts.entry(*line).or_insert(0) += 1;
    }
    assert!(
        counts.len() == 5 && counts.values().all(|&n| n == 2),
        "every line the program logged is printed once more from uaddr():\n{stdout}"
    );
    let steps: Vec<&str> = stdout.lines().filter(|l| l.starts_with("step")).collect();
    assert_eq!(
        steps,
        [
            "step 0 43",
            "step 1 46",
            "step 2 49",
            "step 3 52",
            "step 4 55"
        ],
        "{stdout}"
    );

    let refused = sdt()
        .args(["run", "-e"])
        .arg(format!(
            "uretprobe:{exe}:step {{ printf(\"%d\\n\", *uaddr(\"counter\")); }}"
        ))
        .output()
        .unwrap();
    assert_no_panic(&refused);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("uaddr() is not available in uretprobe probes"),
        "{err}"
    );

    let unknown = sdt()
        .args(["run", "-e"])
        .arg(format!(
            "usdt:{exe}:globals:tick {{ printf(\"%d\\n\", *uaddr(\"countr\")); }}"
        ))
        .output()
        .unwrap();
    assert_no_panic(&unknown);
    assert!(!unknown.status.success());
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(err.contains("defines no symbol `countr`"), "{err}");
    assert!(err.contains("1:"), "the error points at the script: {err}");
}

#[test]
fn map_statements_take_effect_where_they_stand() {
    let Some(b) = setup() else { return };
    let order = b.order.display().to_string();
    // The fixture fires reset, fill(0, 100), fill(1, 101), sleeps, and
    // does it again. A clear() that reached the map after the fills (as
    // one done by user space on reading its record does) would leave @v
    // empty.
    let script = format!(
        "usdt:{order}:t:reset {{ clear(@v); }}
         usdt:{order}:t:fill {{ @v[arg0] = arg1; }}
         usdt:{order}:t:count {{ @n = count(); @on[arg0] = count(); }}
         usdt:{order}:t:zero {{ zero(@n); }}
         usdt:{order}:t:snap {{ print(@v); delete(@v[0]); print(@v); printf(\"snapped\\n\"); }}"
    );
    let out = run_ok(&["-c", &order, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (snaps, at_exit) = stdout
        .split_once("snapped\n")
        .expect("the snap probe fired");
    // print() shows the map as it is where it stands: the delete() after
    // the first print is in the second only.
    let lines: Vec<&str> = snaps.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines,
        ["@v[0]: 100", "@v[1]: 101", "@v[1]: 101"],
        "{stdout}"
    );
    assert_eq!(
        map_lines(at_exit, "v"),
        BTreeMap::from([("1".to_string(), 101)]),
        "{stdout}"
    );
    // zero() zeroes every CPU's count: one count per CPU after it.
    let cpus = map_lines(at_exit, "on").len() as i64;
    assert!(cpus >= 1, "{stdout}");
    assert!(
        at_exit.contains(&format!("@n: {cpus}\n")),
        "{cpus} CPUs: {stdout}"
    );
}
