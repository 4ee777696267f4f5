//! BCC's tools as the documents type them: `tplist`, `trace`, `argdist`,
//! `funccount`, `funclatency`, `stackcount` and `memleak`, each run as a
//! link of that name (or `sdt NAME`) on the C fixtures of
//! `tests/fixtures/bcc`, whose figures follow from their code: the LWN
//! article's `simple-c`, which prints the seconds it fires its probe
//! with, and `bcc.c`, whose modes fire probes with known values, call
//! functions a known number of times, take 20 ms, reach a probe through
//! three known call paths, and leak known allocations. Where bpftrace
//! 0.17 counts the same thing, the same test runs it and compares.
//!
//! These tests need root, a C compiler with `<sys/sdt.h>`, and for the
//! comparisons bpftrace 0.17, `unshare` and `timeout`: with `CI=true` a
//! missing one fails them, elsewhere they print a loud SKIP. bpftrace
//! runs in a private mount namespace with tracefs mounted (0.17 needs
//! it); the machine's own mounts are never touched.

mod list_common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use list_common::{assert_no_panic, have, readelf_notes, require};
use sdt_testing::fixture::C;
use serde_json::Value;

/// The fixtures, built once: `bcc` at -O0 with frame pointers, so that
/// every function keeps its frame and its calls, and `simple-c`.
struct Fixtures {
    bcc: PathBuf,
    simple_c: PathBuf,
}

fn fixtures() -> Option<&'static Fixtures> {
    static FIXTURES: OnceLock<Option<Fixtures>> = OnceLock::new();
    FIXTURES
        .get_or_init(|| {
            if !sdt_testing::require_root()
                || !require(have("cc"), "a C compiler (cc)")
                || !require(
                    Path::new("/usr/bin/timeout").exists(),
                    "timeout (coreutils)",
                )
            {
                return None;
            }
            let flags = ["-O0", "-g", "-fno-omit-frame-pointer"];
            let bcc = C::new("tests/fixtures/bcc/bcc.c").flags(&flags).try_build();
            if !require(bcc.is_ok(), "<sys/sdt.h> (Debian: systemtap-sdt-dev)") {
                return None;
            }
            let simple_c = C::new("tests/fixtures/bcc/simple-c.c")
                .flags(&["-O0", "-g"])
                .output("simple-c")
                .build();
            Some(Fixtures {
                bcc: bcc.ok()?,
                simple_c,
            })
        })
        .as_ref()
}

/// One test's directory, holding copies of the fixtures (named `bcc` and
/// `simple-c`, as the documents' command lines name them) and links to
/// sdt named after BCC's tools.
struct Case {
    dir: PathBuf,
}

impl Case {
    fn new(name: &str) -> Option<Case> {
        let fixtures = fixtures()?;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("bcc-tools")
            .join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::copy(&fixtures.bcc, dir.join("bcc")).unwrap();
        std::fs::copy(&fixtures.simple_c, dir.join("simple-c")).unwrap();
        for tool in [
            "tplist",
            "trace",
            "argdist",
            "funccount",
            "funclatency",
            "stackcount",
            "memleak",
            // BCC's and Debian's names too.
            "trace.py",
            "tplist-bpfcc",
        ] {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sdt"), dir.join("bin").join(tool))
                .unwrap();
        }
        Some(Case { dir })
    }

    /// `program ARGS` in the case's directory, with a minute at most.
    fn run(&self, program: &Path, args: &[&str]) -> Output {
        let out = Command::new("timeout")
            .args(["-k", "5", "60"])
            .arg(program)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run timeout");
        assert_no_panic(&out);
        out
    }

    /// BCC's `tool` (a link of that name) with `args`, which must succeed.
    fn tool(&self, tool: &str, args: &[&str]) -> String {
        let out = self.run(&self.dir.join("bin").join(tool), args);
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {:?}\n{}",
            out.status,
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `sdt ARGS`, which must succeed.
    fn sdt(&self, args: &[&str]) -> String {
        let out = self.run(Path::new(env!("CARGO_BIN_EXE_sdt")), args);
        assert!(
            out.status.success(),
            "sdt {args:?} failed: {:?}\n{}",
            out.status,
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// BCC's `tool` with `args`, which must fail; its standard error.
    fn refused(&self, tool: &str, args: &[&str]) -> String {
        let out = self.run(&self.dir.join("bin").join(tool), args);
        assert!(!out.status.success(), "{tool} {args:?} succeeded");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        stderr
    }

    /// Starts `./NAME ARGS` in the background, its standard output in a
    /// file; waits until it has printed a line.
    fn start(&self, name: &str, args: &[&str]) -> (Child, PathBuf) {
        let log = self.dir.join(format!("{name}.out"));
        let child = Command::new(self.dir.join(name))
            .args(args)
            .current_dir(&self.dir)
            .stdout(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the fixture");
        for _ in 0..200 {
            if std::fs::metadata(&log).is_ok_and(|m| m.len() > 0) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        (child, log)
    }

    /// bpftrace 0.17 with `args`, in a mount namespace of its own with
    /// tracefs, or `None` (a SKIP, or a failure in CI) without it.
    fn bpftrace(&self, args: &[&str]) -> Option<String> {
        if !require(have("bpftrace"), "bpftrace 0.17")
            || !require(have("unshare"), "unshare (util-linux)")
        {
            return None;
        }
        let script = "mountpoint -q /sys/kernel/tracing || \
             mount -t tracefs nodev /sys/kernel/tracing || exit 99; exec \"$@\"";
        // bpftrace 0.17 now and then loses its -c child (`waitpid(N)
        // returned unexpected error`) and prints nothing: once more.
        for _ in 0..3 {
            let out = Command::new("timeout")
                .args([
                    "-k",
                    "5",
                    "60",
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                ])
                .args(["sh", "-c", script, "sh", "bpftrace"])
                .args(args)
                .current_dir(&self.dir)
                .output()
                .expect("run bpftrace");
            assert_ne!(out.status.code(), Some(99), "no tracefs for bpftrace");
            let stdout = text(&out.stdout);
            if !text(&out.stderr).contains("returned unexpected error") {
                return Some(stdout);
            }
        }
        panic!("bpftrace {args:?} kept losing its child");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The integers of a bpftrace map's lines `@NAME[KEY]: N`, by key.
fn bpftrace_counts(out: &str, name: &str) -> Vec<(String, i64)> {
    let mut counts: Vec<(String, i64)> = out
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('[')?;
            let (key, count) = rest.rsplit_once("]: ")?;
            Some((key.to_string(), count.trim().parse().ok()?))
        })
        .collect();
    counts.sort();
    counts
}

// ----------------------------------------------------------------- tplist

/// BCC's `-vv` words for an operand `readelf -n` shows (the forms the
/// fixture's compiler gives): `-8@-16(%rbp)` → `8 signed   bytes @ *(bp - 16)`.
fn bcc_argument(spec: &str) -> String {
    let (size, operand) = spec.split_once('@').unwrap();
    let signed = if size.starts_with('-') {
        "signed  "
    } else {
        "unsigned"
    };
    let register = |r: &str| {
        let r = r.trim_start_matches('%');
        match r.strip_prefix('r') {
            Some(f) if ["ax", "bx", "cx", "dx", "si", "di", "bp", "sp"].contains(&f) => {
                f.to_string()
            }
            _ => r.to_string(),
        }
    };
    let place = match operand.split_once('(') {
        Some((offset, base)) => {
            let offset: i64 = if offset.is_empty() {
                0
            } else {
                offset.parse().unwrap()
            };
            let sign = if offset < 0 { "-" } else { "+" };
            let base = register(base.trim_end_matches(')'));
            format!("*({base} {sign} {})", offset.unsigned_abs())
        }
        None => register(operand),
    };
    format!("{} {signed} bytes @ {place}", size.trim_start_matches('-'))
}

#[test]
fn tplist_lists_simple_c_s_probe_and_its_argument_as_bcc_does() {
    let Some(case) = Case::new("tplist") else {
        return;
    };
    let note = readelf_notes(&case.dir.join("simple-c"))
        .into_iter()
        .find(|n| n.name == "test-probe")
        .expect("simple-c's note");
    assert_eq!(
        case.tool("tplist", &["-l", "./simple-c"]),
        "./simple-c simple-c:test-probe\n"
    );
    assert_eq!(
        case.tool("tplist", &["-v", "-l", "./simple-c"]),
        "simple-c:test-probe [sema 0x0]\n  1 location(s)\n  1 argument(s)\n"
    );
    // The LWN article's `tplist.py -vv -l ./simple-c`.
    let detailed = format!(
        "simple-c:test-probe [sema 0x0]\n  location #1 ./simple-c {:#x}\n    argument #1 {}\n",
        note.pc,
        bcc_argument(&note.args)
    );
    assert_eq!(case.tool("tplist", &["-vv", "-l", "./simple-c"]), detailed);
    assert_eq!(
        case.tool("tplist-bpfcc", &["-vv", "-l", "./simple-c"]),
        detailed
    );
    assert_eq!(
        case.sdt(&["tplist", "-v", "-v", "-l", "./simple-c"]),
        detailed
    );
    // A filter is a glob on the whole provider:name.
    let filtered = case.tool("tplist", &["-l", "./bcc", "bcc:[lv]*"]);
    assert_eq!(filtered, "./bcc bcc:leaf\n./bcc bcc:value\n");
    assert_eq!(case.tool("tplist", &["-l", "./bcc", "value"]), "");

    // A process: its objects under /proc/PID/root.
    let (child, _) = case.start("simple-c", &["100", "100"]);
    let listed = case.tool("tplist", &["-p", &child.id().to_string()]);
    let path = case.dir.join("simple-c");
    assert_eq!(
        listed,
        format!(
            "/proc/{}/root{} simple-c:test-probe\n",
            child.id(),
            path.display()
        )
    );
    stop(child);

    // JSON, for scripts.
    let json: Value =
        serde_json::from_str(&case.tool("tplist", &["--json", "-l", "./bcc"])).unwrap();
    let names: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["leaf", "value", "size"]);
    let located = &json[1]["locations"];
    assert_eq!(located.as_array().unwrap().len(), 1);
    assert_eq!(
        located[0]["arguments"].as_array().unwrap().len(),
        2,
        "bcc:value has two arguments"
    );

    // The kernel's tracepoints, without tracefs mounted by anyone.
    let tracepoints = case.tool("tplist", &["sched:sched_process_e*"]);
    assert_eq!(
        tracepoints,
        "sched:sched_process_exec\nsched:sched_process_exit\n"
    );
    let fields = case.tool("tplist", &["-v", "sched:sched_process_exit"]);
    assert!(fields.starts_with("sched:sched_process_exit\n"), "{fields}");
    assert!(fields.contains("\n    char comm[16];\n"), "{fields}");
    assert!(fields.contains("\n    pid_t pid;\n"), "{fields}");
    assert!(!fields.contains("common_"), "{fields}");

    let refused = case.refused("tplist", &["-l", "no-such-library-anywhere"]);
    assert!(refused.contains("USDT failed to instrument path no-such-library-anywhere"));
}

// ------------------------------------------------------------------ trace

/// The program's printed values: one a line.
fn values(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn trace_prints_the_seconds_simple_c_prints_as_the_lwn_article_shows() {
    let Some(case) = Case::new("trace-simple-c") else {
        return;
    };
    let (child, log) = case.start("simple-c", &["200", "100"]);
    let pid = child.id().to_string();
    // The article's command line, options after the probe.
    let out = case.tool(
        "trace",
        &[
            "u:./simple-c:test-probe \"%u\", arg1",
            "-T",
            "-p",
            &pid,
            "-M",
            "4",
        ],
    );
    stop(child);
    let printed = values(&log);
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("TIME     PID     TID     COMM            FUNC             -")
    );
    let mut seen = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [time, _, _, _, _, value] = fields.as_slice() else {
            panic!("not BCC's columns: {line:?}");
        };
        assert_eq!(time.len(), 8, "{line}");
        assert_eq!(
            line,
            format!(
                "{time} {pid:<7} {pid:<7} {:<15} {:<16} {value}",
                "simple-c", "test-probe"
            )
        );
        seen.push(value.to_string());
    }
    assert_eq!(seen.len(), 4, "{out}");
    // Exactly what the program printed, one after the other.
    assert!(
        printed.windows(4).any(|w| w == seen.as_slice()),
        "{seen:?} is not a run of {printed:?}"
    );

    // Through `sdt trace`, with a command sdt starts: -t and -C.
    let out = case.sdt(&[
        "trace",
        "-t",
        "-C",
        "--cmd",
        "./simple-c 20 5",
        "u:./simple-c:test-probe \"%u\", arg1",
    ]);
    let (events, printed): (Vec<&str>, Vec<&str>) =
        out.lines().skip(1).partition(|l| l.contains("test-probe"));
    assert!(
        out.starts_with("TIME     CPU PID     TID     COMM            FUNC             -\n"),
        "{out}"
    );
    let traced: Vec<&str> = events
        .iter()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(traced, printed, "{out}");
    for event in &events {
        let time: f64 = event[..8].trim().parse().unwrap();
        assert!((0.0..60.0).contains(&time), "{event}");
    }

    // bpftrace 0.17 sees the same values of the same probe.
    let script = "usdt:./simple-c:simple-c:test-probe { printf(\"%u\\n\", arg0); }";
    if let Some(out) = case.bpftrace(&["-e", script, "-c", "./simple-c 20 5"]) {
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("Attaching"))
            .collect();
        // Each value twice, in whatever order the two print them: once
        // by the program, once by bpftrace.
        assert_eq!(lines.len(), 10, "{lines:?}");
        for value in &lines {
            let times = lines.iter().filter(|l| *l == value).count();
            assert_eq!(times % 2, 0, "{lines:?}");
        }
    }
}

#[test]
fn trace_takes_bcc_s_predicates_formats_and_filters() {
    let Some(case) = Case::new("trace-bcc") else {
        return;
    };
    // A predicate, and arguments counted from 1.
    let out = case.tool(
        "trace",
        &[
            "--cmd",
            "./bcc values",
            "u:./bcc:value (arg1 == 3) \"v=%d i=%d\", arg1, arg2",
        ],
    );
    let want: Vec<String> = (0..20).map(|n| format!("v=3 i={}", 5 * n + 3)).collect();
    assert_eq!(messages(&out), want, "{out}");
    // -M stops after N events; -f keeps the messages holding the text.
    let out = case.tool(
        "trace",
        &[
            "-M",
            "3",
            "--cmd",
            "./bcc values",
            "u:./bcc:value \"%d\", arg2",
        ],
    );
    assert_eq!(messages(&out), ["0", "1", "2"]);
    let out = case.tool(
        "trace",
        &[
            "-f",
            "i=9",
            "--cmd",
            "./bcc values",
            "u:./bcc:value \"v=%d i=%d\", arg1, arg2",
        ],
    );
    let mut want = vec!["v=4 i=9".to_string()];
    want.extend((90..100).map(|i| format!("v={} i={i}", i % 5)));
    assert_eq!(messages(&out), want, "{out}");
    // -A counts identical events, most frequent first, at -M.
    let out = case.tool(
        "trace",
        &[
            "-A",
            "-M",
            "100",
            "--cmd",
            "./bcc values",
            "u:./bcc:value \"%d\", arg1",
        ],
    );
    assert_eq!(out.matches("\n-->COUNT 20\n\n").count(), 5, "{out}");
    // A signature names a function's parameters; %s reads a string.
    let out = case.tool(
        "trace",
        &[
            "--cmd",
            "./bcc calls",
            "p:./bcc:greet(char *who) \"hello %s\", who",
        ],
    );
    assert_eq!(messages(&out), ["hello world", "hello world"], "{out}");
    // Without a format: FUNC ends the line, after its padding, as in BCC.
    let out = case.tool("trace", &["--cmd", "./bcc slow 3", "p:./bcc:slow"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "PID     TID     COMM            FUNC             "
    );
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[1..].iter().all(|l| l.ends_with("slow             ")));
}

/// The message of each event of `trace`'s output.
fn messages(out: &str) -> Vec<String> {
    out.lines()
        .skip(1)
        // PID, TID, COMM and FUNC take 7, 7, 15 and 16 columns.
        .map(|l| l.get(49..).unwrap_or("").to_string())
        .collect()
}

#[test]
fn trace_shows_return_values_stacks_and_json_and_refuses_kernel_probes() {
    let Some(case) = Case::new("trace-more") else {
        return;
    };
    // A return probe's retval, in the C library by its short name; -n
    // keeps the command's events (not those of sdt's own start-up code).
    let out = case.tool(
        "trace",
        &[
            "-n",
            "bcc",
            "--cmd",
            "./bcc leaks",
            "r:c:malloc (retval != 0) \"%lx\", retval",
        ],
    );
    assert_eq!(
        out.lines().count(),
        1 + 9,
        "3 leaked, 5 freed, 1 reallocated: {out}"
    );
    // -U: the user stack under each event, then a blank line.
    let out = case.tool(
        "trace",
        &[
            "-U",
            "-M",
            "1",
            "--cmd",
            "./bcc stacks",
            "u:./bcc:leaf (arg1 == 1) \"%d\", arg1",
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].ends_with(" leaf             1"), "{out}");
    for (line, function) in lines[2..5].iter().zip(["leaf", "alpha", "main"]) {
        assert!(
            line.starts_with(&format!("        {function}+0x")) && line.ends_with(" [bcc]"),
            "{out}"
        );
    }
    assert_eq!(lines.last(), Some(&""), "{out}");
    // JSON, for scripts.
    let out = case.tool(
        "trace",
        &[
            "--json",
            "--cmd",
            "./bcc values",
            "u:./bcc:size \"%d\", arg1",
        ],
    );
    let sizes: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["message"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut want = vec!["3"; 10];
    want.extend(["100"; 5]);
    want.extend(["5000"; 2]);
    assert_eq!(sizes, want);

    // What cannot be done is said in one line.
    let refused = case.refused("trace", &["x:a:b"]);
    assert!(
        refused.contains("error in probe 'x:a:b': probe type must be"),
        "{refused}"
    );
    let refused = case.refused("trace", &["do_sys_open"]);
    assert!(refused.contains("kernel functions (kprobes)"), "{refused}");
    let refused = case.refused("trace", &["u:./bcc:nope"]);
    assert!(
        refused.contains("unrecognized USDT probe nope"),
        "{refused}"
    );
    let refused = case.refused("trace", &["-B", "u:./bcc:value"]);
    assert!(refused.contains("trace: -B is not supported"), "{refused}");

    // At a tracepoint, -K the kernel stack (its frames in `[kernel]`),
    // then -U the user stack.
    let out = case.tool(
        "trace",
        &[
            "-K",
            "-U",
            "--cmd",
            "./bcc slow 1",
            "t:syscalls:sys_enter_clock_nanosleep \"%d\", args->flags",
        ],
    );
    let frames: Vec<&str> = out.lines().skip(2).filter(|l| !l.is_empty()).collect();
    let kernel = frames
        .iter()
        .take_while(|f| f.ends_with(" [kernel]"))
        .count();
    assert!(kernel > 0, "{out}");
    assert!(
        frames[..kernel]
            .iter()
            .any(|f| f.contains("do_syscall_64+0x")),
        "{out}"
    );
    assert!(
        frames[kernel..]
            .iter()
            .any(|f| f.starts_with("        main+0x") && f.ends_with(" [bcc]")),
        "{out}"
    );
}

// ---------------------------------------------------------------- argdist

#[test]
fn argdist_counts_and_histograms_give_exact_counts() {
    let Some(case) = Case::new("argdist") else {
        return;
    };
    let out = case.tool(
        "argdist",
        &[
            "-i",
            "60",
            "--cmd",
            "./bcc values",
            "-C",
            "u:./bcc:value():u64:arg1",
            "-H",
            "u:./bcc:size():u64:arg1",
            "-C",
            "u:./bcc:value()#calls",
        ],
    );
    let (time, rest) = out.split_once('\n').unwrap();
    assert!(
        time.starts_with('[') && time.ends_with(']') && time.len() == 10,
        "{out}"
    );
    // Every -C first, then every -H, as BCC orders them.
    assert_eq!(
        rest,
        "u:./bcc:value():u64:arg1\n\
         \tCOUNT      EVENT\n\
         \t20         arg1 = 0\n\
         \t20         arg1 = 1\n\
         \t20         arg1 = 2\n\
         \t20         arg1 = 3\n\
         \t20         arg1 = 4\n\
         calls\n\
         \tCOUNT      EVENT\n\
         \t100        total calls\n\
         \x20    arg1                : count     distribution\n\
         \x20        0 -> 1          : 0        |                                        |\n\
         \x20        2 -> 3          : 10       |****************************************|\n\
         \x20        4 -> 7          : 0        |                                        |\n\
         \x20        8 -> 15         : 0        |                                        |\n\
         \x20       16 -> 31         : 0        |                                        |\n\
         \x20       32 -> 63         : 0        |                                        |\n\
         \x20       64 -> 127        : 5        |********************                    |\n\
         \x20      128 -> 255        : 0        |                                        |\n\
         \x20      256 -> 511        : 0        |                                        |\n\
         \x20      512 -> 1023       : 0        |                                        |\n\
         \x20     1024 -> 2047       : 0        |                                        |\n\
         \x20     2048 -> 4095       : 0        |                                        |\n\
         \x20     4096 -> 8191       : 2        |********                                |\n"
    );
    // bpftrace 0.17 counts the same.
    let script =
        "usdt:./bcc:bcc:value { @v[arg0] = count(); } usdt:./bcc:bcc:size { @s[arg0] = count(); }";
    if let Some(out) = case.bpftrace(&["-e", script, "-c", "./bcc values"]) {
        let want: Vec<(String, i64)> = (0..5).map(|v| (v.to_string(), 20)).collect();
        assert_eq!(bpftrace_counts(&out, "@v"), want, "{out}");
        let sizes = [("100", 5), ("3", 10), ("5000", 2)].map(|(k, n)| (k.to_string(), n));
        assert_eq!(bpftrace_counts(&out, "@s"), sizes, "{out}");
    }
    // A filter, a string, the top values, a label; a return probe's
    // $latency in a histogram: five 20 ms calls in 16 -> 31.
    let out = case.tool(
        "argdist",
        &[
            "-i",
            "60",
            "-T",
            "2",
            "--cmd",
            "./bcc values",
            "-C",
            "u:./bcc:value():u64,u64:arg1,arg2%2:arg1 >= 3#odd and even",
        ],
    );
    assert!(
        out.ends_with(
            "odd and even\n\tCOUNT      EVENT\n\t10         arg1 = 4, arg2%2 = 0\n\t10         arg1 = 4, arg2%2 = 1\n"
        ),
        "{out}"
    );
    let out = case.tool(
        "argdist",
        &[
            "-i",
            "60",
            "--cmd",
            "./bcc calls",
            "-C",
            "p:./bcc:greet(char *who):char*:who",
        ],
    );
    assert!(out.ends_with("\t2          who = world\n"), "{out}");
    let out = case.tool(
        "argdist",
        &[
            "-i",
            "60",
            "--cmd",
            "./bcc slow 5",
            "-H",
            "r:./bcc:slow():u64:$latency/1000000#ms",
        ],
    );
    assert!(
        out.contains("\n     ms                  : count     distribution\n")
            && out.contains("\n        16 -> 31         : 5        |****************************************|\n"),
        "{out}"
    );
    // JSON.
    let out = case.tool(
        "argdist",
        &[
            "--json",
            "-i",
            "60",
            "--cmd",
            "./bcc values",
            "-C",
            "u:./bcc:value()",
        ],
    );
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["counts"][0]["count"], 100);
    assert_eq!(report["counts"][0]["event"], "total calls");

    let refused = case.refused("argdist", &["-C", "p:c:malloc"]);
    assert!(
        refused.contains(
            "error parsing probe 'p:c:malloc': function signature 'malloc' has an invalid format"
        ),
        "{refused}"
    );
    let refused = case.refused("argdist", &[]);
    assert!(
        refused.contains("at least one specifier is required"),
        "{refused}"
    );
}

// -------------------------------------------------------------- funccount

#[test]
fn funccount_counts_calls_over_a_glob_exactly() {
    let Some(case) = Case::new("funccount") else {
        return;
    };
    let counted = "Tracing 2 functions for \"./bcc:count_me_*\"... Hit Ctrl-C to end.\n\
         \n\
         FUNC                                    COUNT\n\
         count_me_beta                               3\n\
         count_me_alpha                              7\n\
         Detaching...\n";
    assert_eq!(
        case.tool("funccount", &["--cmd", "./bcc calls", "./bcc:count_me_*"]),
        counted
    );
    // A regular expression, matched from the start.
    let out = case.tool(
        "funccount",
        &["-r", "--cmd", "./bcc calls", "./bcc:count_me_(alpha|beta)$"],
    );
    assert!(
        out.ends_with(&counted[counted.find('\n').unwrap()..]),
        "{out}"
    );
    // bpftrace 0.17 counts the same calls.
    let script = "uprobe:./bcc:count_me_* { @[probe] = count(); }";
    if let Some(out) = case.bpftrace(&["-e", script, "-c", "./bcc calls"]) {
        assert_eq!(
            bpftrace_counts(&out, "@"),
            [
                ("uprobe:./bcc:count_me_alpha".to_string(), 7),
                ("uprobe:./bcc:count_me_beta".to_string(), 3)
            ],
            "{out}"
        );
    }
    // USDT probes by name, and tracepoints of the command only.
    let out = case.tool("funccount", &["--cmd", "./bcc values", "u:./bcc:*"]);
    assert!(
        out.starts_with("Tracing 3 functions for \"u:./bcc:*\""),
        "{out}"
    );
    assert!(
        out.ends_with("size                                       17\nvalue                                     100\nDetaching...\n"),
        "{out}"
    );
    let out = case.tool(
        "funccount",
        &[
            "--cmd",
            "./bcc slow 3",
            "t:syscalls:sys_enter_clock_nanosleep",
        ],
    );
    assert!(
        out.contains("\nsyscalls:sys_enter_clock_nanosleep          3\n"),
        "{out}"
    );
    // Through sdt, as JSON.
    let out = case.sdt(&[
        "funccount",
        "--json",
        "--cmd",
        "./bcc calls",
        "./bcc:count_me_*",
    ]);
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["functions"][1]["func"], "count_me_alpha");
    assert_eq!(report["functions"][1]["count"], 7);

    let refused = case.refused("funccount", &["./bcc:nothing_like_this*"]);
    assert!(
        refused.contains("No functions matched by pattern ^nothing_like_this.*$"),
        "{refused}"
    );
    let refused = case.refused("funccount", &["vfs_read"]);
    assert!(refused.contains("kernel functions (kprobes)"), "{refused}");
}

// ------------------------------------------------------------ funclatency

/// A log2 histogram's rows with a count: `(low, high, count)`.
fn buckets(out: &str) -> Vec<(u64, u64, u64)> {
    out.lines()
        .filter_map(|line| {
            let (range, rest) = line.split_once(" : ")?;
            let (low, high) = range.trim().split_once(" -> ")?;
            let count: u64 = rest.split_whitespace().next()?.parse().ok()?;
            let range = (low.parse().ok()?, high.trim().parse().ok()?, count);
            (count > 0).then_some(range)
        })
        .collect()
}

#[test]
fn funclatency_puts_calls_of_a_20_ms_function_in_16_to_31_ms() {
    let Some(case) = Case::new("funclatency") else {
        return;
    };
    let out = case.tool("funclatency", &["-m", "-c", "./bcc slow 4", "./bcc:slow"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "Tracing 1 functions for \"./bcc:slow\"... Hit Ctrl-C to end."
    );
    assert_eq!(lines[1..3], ["", ""], "{out}");
    // Traced everywhere, a library's functions are shown apart by process.
    assert!(lines[3].starts_with("Function = slow ["), "{out}");
    assert_eq!(
        lines[4],
        "     msecs               : count     distribution"
    );
    assert_eq!(
        lines[5],
        "         0 -> 1          : 0        |                                        |"
    );
    assert_eq!(
        lines[9],
        "        16 -> 31         : 4        |****************************************|"
    );
    assert_eq!(buckets(&out), [(16, 31, 4)], "{out}");
    // BCC's arithmetic: the total in the unit, truncated; the average of
    // that, truncated.
    let numbers: Vec<u64> = lines[11]
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [average, total, 4] = numbers[..] else {
        panic!("not BCC's average line: {out}");
    };
    assert_eq!(
        lines[11],
        format!("avg = {average} msecs, total: {total} msecs, count: 4")
    );
    assert_eq!(average, total / 4, "{out}");
    assert!((80..128).contains(&total), "{out}");
    assert_eq!(lines[12..], ["", "Detaching..."], "{out}");

    // One process: one histogram; -d ends it after a report.
    let (child, _) = case.start("bcc", &["slow", "300"]);
    let pid = child.id().to_string();
    let out = case.tool("funclatency", &["-u", "-d", "1", "-p", &pid, "./bcc:slow"]);
    stop(child);
    assert!(!out.contains("Function ="), "{out}");
    // None can be faster than 20 ms; a loaded machine may make one slower.
    let found = buckets(&out);
    let total: u64 = found.iter().map(|b| b.2).sum();
    let in_20_ms = found.iter().find(|b| (b.0, b.1) == (16384, 32767));
    assert!(in_20_ms.is_some_and(|b| b.2 * 10 >= total * 9), "{out}");
    assert!(found.iter().all(|b| b.0 >= 16384), "{out}");
    assert!(out.contains(" usecs, count: "), "{out}");

    // bpftrace 0.17 puts them in the same bucket.
    let script = "uprobe:./bcc:slow { @s[tid] = nsecs; } \
        uretprobe:./bcc:slow { @ms = hist((nsecs - @s[tid]) / 1000000); delete(@s[tid]); }";
    if let Some(out) = case.bpftrace(&["-e", script, "-c", "./bcc slow 4"]) {
        assert!(out.contains("[16, 32)               4 |"), "{out}");
    }
    let refused = case.refused("funclatency", &["./bcc:a:b"]);
    assert!(
        refused.contains("unrecognized pattern format './bcc:a:b'"),
        "{refused}"
    );
}

// ------------------------------------------------------------- stackcount

#[test]
fn stackcount_folds_the_three_call_paths_exactly() {
    let Some(case) = Case::new("stackcount") else {
        return;
    };
    let paths = [
        ("main;alpha;leaf", 20),
        ("main;beta;leaf", 30),
        ("main;gamma_;beta;leaf", 50),
    ];
    // BCC's -f, with the probe's stack: `comm;root;...;leaf count`, the
    // comm empty without -P, least frequent first.
    let check = |out: &str, comm: &str| {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let start = &lines[0][..=lines[0].find(";main;").unwrap()];
        assert!(start.starts_with(&format!("{comm};")), "{out}");
        for (line, (path, count)) in lines.iter().zip(paths) {
            assert_eq!(*line, format!("{start}{path} {count}"), "{out}");
        }
    };
    check(
        &case.tool(
            "stackcount",
            &["-f", "--cmd", "./bcc stacks", "u:./bcc:leaf"],
        ),
        "",
    );
    check(
        &case.tool(
            "stackcount",
            &["-f", "-P", "--cmd", "./bcc stacks", "u:./bcc:leaf"],
        ),
        "bcc",
    );
    // A function's entry, and BCC's form through `sdt stackcount`.
    check(
        &case.sdt(&["stackcount", "-f", "--cmd", "./bcc stacks", "./bcc:leaf"]),
        "",
    );
    // sdt's own form still means what it meant.
    let own = case.sdt(&[
        "stackcount",
        "-f",
        "folded",
        "-c",
        "./bcc stacks",
        "bcc:leaf",
    ]);
    assert!(
        own.lines().next().unwrap().ends_with("main;alpha;leaf 20"),
        "{own}"
    );

    // BCC's text: each stack leaf first, its count, a blank line.
    let out = case.tool("stackcount", &["--cmd", "./bcc stacks", "u:./bcc:leaf"]);
    let first = out.split("\n\n").nth(1).unwrap();
    let frames = first.lines().count() - 1;
    assert_eq!(first.lines().nth(frames), Some("    20"), "{out}");
    assert_eq!(
        first.lines().take(3).collect::<Vec<_>>(),
        ["  leaf", "  alpha", "  main"],
        "{out}"
    );
    let out = case.tool(
        "stackcount",
        &["-P", "--cmd", "./bcc stacks", "u:./bcc:leaf"],
    );
    assert!(out.starts_with("Tracing 1 functions for \"u:./bcc:leaf\"... Hit Ctrl-C to end.\n\n"));
    assert!(out.ends_with("\nDetaching...\n"), "{out}");
    let first = out.split("\n\n").nth(1).unwrap();
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines[..3], ["  leaf", "  alpha", "  main"], "{out}");
    assert!(lines[lines.len() - 2].starts_with("    bcc ["), "{out}");
    assert_eq!(lines[lines.len() - 1], "    20", "{out}");

    // bpftrace 0.17 counts the same stacks (as addresses, once the
    // command has gone): the same counts at the same depths.
    let script = "usdt:./bcc:bcc:leaf { @[ustack] = count(); }";
    if let Some(out) = case.bpftrace(&["-e", script, "-c", "./bcc stacks"]) {
        let ours = case.tool(
            "stackcount",
            &["-f", "--cmd", "./bcc stacks", "u:./bcc:leaf"],
        );
        let mut want: Vec<(usize, i64)> = ours
            .lines()
            .map(|l| {
                let (stack, count) = l.rsplit_once(' ').unwrap();
                (stack.split(';').count() - 1, count.parse().unwrap())
            })
            .collect();
        let mut theirs = Vec::new();
        let mut depth = 0;
        for line in out.lines() {
            if line.starts_with("    ") {
                depth += 1;
            } else if let Some(count) = line.strip_prefix("]: ") {
                theirs.push((depth, count.parse().unwrap()));
                depth = 0;
            }
        }
        want.sort();
        theirs.sort();
        assert_eq!(theirs, want, "{out}");
    }
    // At a tracepoint, the kernel stack too: with -d, `-` between the
    // user frames and the kernel's.
    let out = case.tool(
        "stackcount",
        &[
            "-d",
            "-f",
            "--cmd",
            "./bcc slow 3",
            "t:syscalls:sys_enter_clock_nanosleep",
        ],
    );
    let (stack, count) = out.trim().rsplit_once(' ').unwrap();
    assert_eq!(count, "3", "{out}");
    let (user, kernel) = stack.split_once(";-;").unwrap();
    assert!(user.starts_with(';') && user.contains(";main;"), "{out}");
    assert!(kernel.contains("do_syscall_64"), "{out}");
    // Uprobes and USDT probes fire in user mode: no kernel stack there.
    let refused = case.refused("stackcount", &["-K", "u:./bcc:leaf"]);
    assert!(refused.contains("kernel stack is empty"), "{refused}");
}

// ---------------------------------------------------------------- memleak

#[test]
fn memleak_reports_what_is_never_freed_by_its_stack() {
    let Some(case) = Case::new("memleak") else {
        return;
    };
    let out = case.tool("memleak", &["-c", "./bcc leaks"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "Executing './bcc leaks' and tracing the resulting process."
    );
    assert!(lines[1].starts_with("Attaching to pid ") && lines[1].ends_with(", Ctrl+C to quit."));
    assert!(
        lines[2].ends_with("] Top 10 stacks with outstanding allocations:"),
        "{out}"
    );
    // Largest last; each frame `0xADDRESS\tfunc+0xOFF [module]`.
    let mut stacks: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in out.lines() {
        if let Some(frame) = line.strip_prefix("\t\t") {
            stacks
                .last_mut()
                .expect("a stack before its frames")
                .1
                .push(frame);
        } else if let Some(head) = line.strip_prefix('\t') {
            stacks.push((head, Vec::new()));
        }
    }
    let heads: Vec<&str> = stacks.iter().map(|s| s.0).collect();
    assert_eq!(
        heads,
        [
            "256 bytes in 1 allocations from stack",
            "300 bytes in 3 allocations from stack",
            "800 bytes in 2 allocations from stack"
        ],
        "{out}"
    );
    for ((_, frames), function) in stacks
        .iter()
        .zip(["leak_aligned", "leak_malloc", "leak_calloc"])
    {
        let frame = regex_like_frame(frames[0]);
        assert_eq!(frame, (function, "bcc"), "{out}");
        assert_eq!(regex_like_frame(frames[1]), ("main", "bcc"), "{out}");
    }
    assert!(
        !out.contains("churn"),
        "freed allocations are not reported: {out}"
    );

    // -a: each allocation, by size; -z and -Z; --sort count -T 1.
    let out = case.tool("memleak", &["-a", "-c", "./bcc leaks"]);
    let sizes: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("\taddr = "))
        .map(|l| l.split(" size = ").nth(1).unwrap())
        .collect();
    assert_eq!(sizes, ["100", "100", "100", "256", "400", "400"], "{out}");
    let out = case.tool("memleak", &["-z", "200", "-c", "./bcc leaks"]);
    assert_eq!(out.matches(" allocations from stack").count(), 2, "{out}");
    let out = case.tool("memleak", &["-Z", "200", "-c", "./bcc leaks"]);
    assert!(
        out.contains("\t300 bytes in 3 allocations from stack\n"),
        "{out}"
    );
    assert_eq!(out.matches(" allocations from stack").count(), 1, "{out}");
    let out = case.tool(
        "memleak",
        &["--sort", "count", "-T", "1", "-c", "./bcc leaks"],
    );
    assert!(
        out.contains("] Top 1 stacks with outstanding allocations:\n\t300 bytes in 3 allocations"),
        "{out}"
    );
    // Younger than -o: nothing.
    let out = case.tool("memleak", &["-o", "5000", "-c", "./bcc leaks"]);
    assert!(!out.contains("allocations from stack"), "{out}");
    // -t: each allocation and free.
    let out = case.tool("memleak", &["-t", "-c", "./bcc leaks"]);
    assert_eq!(
        out.matches("alloc entered, size = 100\n").count(),
        3,
        "{out}"
    );
    assert_eq!(out.matches(", size = 64\n").count(), 5 * 2, "{out}");
    // JSON.
    let out = case.tool("memleak", &["--json", "-c", "./bcc leaks"]);
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["stacks"][2]["bytes"], 800);
    assert_eq!(report["stacks"][2]["allocations"], 2);

    // BCC's usual form: a running process, INTERVAL COUNT. The fixture
    // allocates once memleak says it has attached.
    let (child, _) = case.start("bcc", &["leaks", "signal", "5000"]);
    let pid = child.id().to_string();
    let mut memleak = Command::new(case.dir.join("bin/memleak"))
        .args(["-p", &pid, "1", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start memleak");
    let mut lines = BufReader::new(memleak.stdout.take().unwrap()).lines();
    let attached = lines.next().unwrap().unwrap();
    assert_eq!(attached, format!("Attaching to pid {pid}, Ctrl+C to quit."));
    let target = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(target, rustix::process::Signal::USR1).unwrap();
    let out: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(memleak.wait().unwrap().success());
    stop(child);
    let out = out.join("\n");
    assert_eq!(
        out.matches(" stacks with outstanding allocations:").count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("\t800 bytes in 2 allocations from stack\n"),
        "{out}"
    );
    // The program the tool runs, for `sdt run`.
    let program = case.tool("memleak", &["--print-program", "-p", &pid]);
    assert!(program.starts_with("// sdt memleak: "), "{program}");
    assert!(program.contains("uretprobe:"), "{program}");

    let refused = case.refused("memleak", &[]);
    assert!(refused.contains("kernel allocations"), "{refused}");
    let refused = case.refused("memleak", &["-z", "10", "-Z", "5", "-c", "./bcc leaks"]);
    assert!(
        refused.contains("min_size (-z) can't be greater than max_size (-Z)"),
        "{refused}"
    );
}

/// `(function, module)` of a frame `0x%016x\tfunc+0xOFF [module]`.
fn regex_like_frame(line: &str) -> (&str, &str) {
    let rest = line
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{line:?}"));
    let (address, symbol) = rest.split_once('\t').unwrap();
    assert_eq!(address.len(), 16, "{line:?}");
    assert!(address.chars().all(|c| c.is_ascii_hexdigit()), "{line:?}");
    let (function, rest) = symbol.split_once("+0x").unwrap();
    let (offset, module) = rest.split_once(" [").unwrap();
    assert!(offset.chars().all(|c| c.is_ascii_hexdigit()), "{line:?}");
    (function, module.strip_suffix(']').unwrap())
}
