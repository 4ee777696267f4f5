//! The fast path through `sdt run` and `sdt trace`, on the Rust fixture
//! whose probes come from the `sdt` crate with its `fastpath` feature
//! (`tests/fixtures/fastpath`): every hit counted and every argument read
//! exactly, the same results as the kernel's path, bpftrace still seeing
//! every hit through the kernel at the same time, a script whose probes
//! take both paths keeping one order, and a program that runs on when
//! sdt is killed.
//!
//! One sdt at a time serves the fast path (it holds the abstract socket
//! programs register on), so the tests here take turns.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sdt_testing::fastpath::Running as Fixture;
use sdt_testing::{have, require, require_root};

static TURN: Mutex<()> = Mutex::new(());

/// The fixture, with root; `None` (a loud skip, a failure in CI) without.
fn fixture() -> Option<PathBuf> {
    if !require_root() {
        return None;
    }
    sdt_testing::fastpath::program()
}

fn sdt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sdt"))
}

/// `sdt run -c` on the fixture fed `input`, with `script` (in which
/// `FIXTURE` names the fixture); the kernel's path only with `kernel`.
fn run_on_input(fixture: &Path, input: &str, script: &str, kernel: bool) -> Output {
    let dir = sdt_testing::fixture::target_tmpdir().join("fastpath-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let input_file = dir.join(format!("input-{}", std::process::id()));
    std::fs::write(&input_file, input).unwrap();
    let mut command = sdt();
    command
        .args(["run", "-v", "-c"])
        .arg(format!(
            "sh -c '{} < {}'",
            fixture.display(),
            input_file.display()
        ))
        .arg("-e")
        .arg(script.replace("FIXTURE", &fixture.display().to_string()));
    if kernel {
        command.env("SDT_FASTPATH", "0");
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn sdt_run_counts_every_hit_and_reads_every_argument_over_the_fast_path() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else {
        return;
    };
    let script = "usdt:FIXTURE:acc:hit { @hits[str(arg2)] = count(); @sum[str(arg2)] = sum(arg0); \
                  @low = min((int32)arg1); @under[str(arg2)] = hist(arg0); }
                  usdt:FIXTURE:acc:text { @words[str(arg1, arg2 + 1)] = count(); @len = sum(arg2); }";
    let fast = run_on_input(&fixture, "1000 4\n", script, false);
    let (out, err) = (text(&fast.stdout), text(&fast.stderr));
    assert!(fast.status.success(), "{err}");
    assert!(err.contains("acc:hit takes the fast path"), "{err}");
    assert!(err.contains("acc:text takes the fast path"), "{err}");
    // 4 threads × 1000 × 2 probes, every one through shared memory.
    assert!(
        err.contains("sdt: 8000 hits came by the fast path"),
        "{err}"
    );
    for thread in 0..4 {
        assert!(
            out.contains(&format!("@hits[thread-{thread}]: 1000\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!("@sum[thread-{thread}]: 500500\n")),
            "{out}"
        );
    }
    assert!(out.contains("@low: -1000\n"), "{out}");
    assert!(
        out.contains("@words[even]: 2000\n@words[odd]: 2000\n"),
        "{out}"
    );
    // 2000 × "even" and 2000 × "odd".
    assert!(out.contains("@len: 14000\n"), "{out}");
    assert!(!err.contains("dropped"), "{err}");
    // The kernel's path gives the same output.
    let kernel = run_on_input(&fixture, "1000 4\n", script, true);
    assert!(kernel.status.success(), "{}", text(&kernel.stderr));
    assert!(!text(&kernel.stderr).contains("came by the fast path"));
    assert_eq!(text(&kernel.stdout), out);
}

#[test]
fn sdt_trace_writes_every_event_exactly_over_the_fast_path() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else {
        return;
    };
    let dir = sdt_testing::fixture::target_tmpdir().join("fastpath-trace");
    std::fs::create_dir_all(&dir).unwrap();
    let (input, events) = (dir.join("input"), dir.join("events.txt"));
    std::fs::write(&input, "500 2\n").unwrap();
    let f = fixture.display().to_string();
    let out = sdt()
        .args(["trace", "-c"])
        .arg(format!("sh -c '{f} < {}'", input.display()))
        .arg("-o")
        .arg(&events)
        .args([format!("{f}:acc:hit"), format!("{f}:acc:text")])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("sdt: 2000 events, 0 lost, "), "{err}");
    assert!(
        err.contains(" sites (2000 events by the fast path)"),
        "{err}"
    );
    // TIME PID TID COMM PROBE ARGS..., each thread's hits in its order.
    let written = std::fs::read_to_string(&events).unwrap();
    let mut by_thread: std::collections::BTreeMap<u32, Vec<(String, Vec<i64>)>> =
        Default::default();
    for line in written.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let args = fields[5..]
            .iter()
            .map(|a| a.split_once('=').unwrap().1.parse().unwrap())
            .collect();
        by_thread
            .entry(fields[2].parse().unwrap())
            .or_default()
            .push((fields[4].to_string(), args));
    }
    assert_eq!(by_thread.len(), 2, "{written}");
    for hits in by_thread.values() {
        assert_eq!(hits.len(), 1000);
        for (i, pair) in hits.chunks(2).enumerate() {
            let i = i as i64 + 1;
            assert_eq!(pair[0].0, "acc:hit");
            assert_eq!(&pair[0].1[..2], &[i, -i]);
            assert_eq!(pair[1].0, "acc:text");
            assert_eq!(pair[1].1[0], i);
            assert_eq!(pair[1].1[2], if i % 2 == 0 { 4 } else { 3 }, "the length");
        }
    }
}

/// Starts `sdt run -p PID` with `script`, its output piped.
fn run_on_pid(fixture: &Path, pid: u32, script: &str) -> Child {
    sdt()
        .args(["run", "-v", "-p", &pid.to_string(), "-e"])
        .arg(script.replace("FIXTURE", &fixture.display().to_string()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn bpftrace_still_counts_every_hit_through_the_kernel_meanwhile() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(program) = fixture() else {
        return;
    };
    if !require(have("bpftrace"), "bpftrace 0.17") || !require(have("unshare"), "unshare") {
        return;
    }
    let mut fixture = Fixture::start(&program);
    let traced = run_on_pid(
        &program,
        fixture.pid(),
        "usdt:FIXTURE:acc:hit { @ = count(); }",
    );
    fixture.wait_enabled(true);
    // bpftrace 0.17 needs tracefs, mounted in a namespace of its own.
    let mut bpftrace = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "[ -e /sys/kernel/tracing/uprobe_events ] || \
             mount -t tracefs nodev /sys/kernel/tracing || exit 99; exec \"$@\"",
        )
        .args(["sh", "bpftrace", "-p", &fixture.pid().to_string(), "-e"])
        .arg(format!(
            "BEGIN {{ printf(\"attached\\n\"); }} usdt:{}:acc:hit {{ @ = count(); }}",
            program.display()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bpftrace_out = BufReader::new(bpftrace.stdout.take().unwrap());
    // BEGIN runs once every probe is attached.
    let mut line = String::new();
    while line != "attached\n" {
        line.clear();
        assert!(
            bpftrace_out.read_line(&mut line).unwrap() > 0,
            "bpftrace ended"
        );
    }
    assert_eq!(fixture.ask("1000 2"), "fired 1000\n");
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut bpftrace_out, &mut rest).unwrap();
        rest
    });
    // Both end with the process and print their maps. bpftrace 0.17 may
    // miss that, or a SIGINT that comes between two of its polls: after
    // a while it is asked again, as a user would press Ctrl-C again.
    fixture.end();
    let started = Instant::now();
    while bpftrace.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "bpftrace never ended"
        );
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_secs(5) {
            let pid = rustix::process::Pid::from_raw(bpftrace.id() as i32).unwrap();
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
    }
    let rest = reader.join().unwrap();
    assert!(rest.contains("@: 2000\n"), "bpftrace printed {rest}");
    let sdt_output = traced.wait_with_output().unwrap();
    let (out, err) = (text(&sdt_output.stdout), text(&sdt_output.stderr));
    assert!(out.contains("@: 2000\n"), "{out}{err}");
    assert!(
        err.contains("sdt: 2000 hits came by the fast path"),
        "{err}"
    );
}

#[test]
fn a_script_whose_probes_take_both_paths_keeps_one_order() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else {
        return;
    };
    // `ustack` is only known in the kernel: acc:text keeps its path.
    let script = "usdt:FIXTURE:acc:hit { @hits = count(); printf(\"hit %d %d\\n\", tid, arg0); }
                  usdt:FIXTURE:acc:text { @texts = count(); @stacks[ustack(1)] = count();
                                          printf(\"text %d %d\\n\", tid, arg0); }";
    let output = run_on_input(&fixture, "300 2\n", script, false);
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{err}");
    assert!(err.contains("acc:hit takes the fast path"), "{err}");
    assert!(
        err.contains("acc:text takes the kernel's path: a stack is only known in the kernel"),
        "{err}"
    );
    assert!(err.contains("sdt: 600 hits came by the fast path"), "{err}");
    assert!(
        out.contains("@hits: 600\n") && out.contains("@texts: 600\n"),
        "{out}"
    );
    // Each thread fires hit(i) then text(i): its lines alternate, in
    // order, although one probe's come through the kernel and the
    // other's are replayed later.
    let mut by_thread: std::collections::BTreeMap<&str, Vec<(&str, u32)>> = Default::default();
    for line in out
        .lines()
        .filter(|l| l.starts_with("hit ") || l.starts_with("text "))
    {
        let fields: Vec<&str> = line.split(' ').collect();
        by_thread
            .entry(fields[1])
            .or_default()
            .push((fields[0], fields[2].parse().unwrap()));
    }
    assert_eq!(by_thread.len(), 2, "{out}");
    for lines in by_thread.values() {
        let expected: Vec<(&str, u32)> =
            (1..=300).flat_map(|i| [("hit", i), ("text", i)]).collect();
        assert_eq!(lines, &expected);
    }
}

#[test]
fn a_tracer_killed_with_sigkill_leaves_the_program_running_with_its_probes_off() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(program) = fixture() else {
        return;
    };
    let mut fixture = Fixture::start(&program);
    let mut traced = run_on_pid(
        &program,
        fixture.pid(),
        "usdt:FIXTURE:acc:hit { @ = count(); }",
    );
    fixture.wait_enabled(true);
    // Registered, writing into the shared rings.
    assert_eq!(fixture.ask("100 2"), "fired 100\n");
    traced.kill().unwrap();
    traced.wait().unwrap();
    // The anchors' uprobes went with sdt: the semaphore falls, and the
    // program runs on, its probes off.
    fixture.wait_enabled(false);
    assert_eq!(fixture.ask("10000 2"), "fired 10000\n");
    let started = Instant::now();
    let loop_ns = fixture.ask("loop 1000000");
    assert!(loop_ns.starts_with("loop_ns "), "{loop_ns}");
    assert!(started.elapsed() < Duration::from_secs(30));
    fixture.end();
}

#[test]
fn dump_says_which_path_each_probe_takes_and_why() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else {
        return;
    };
    let f = fixture.display();
    // The fast path is for named processes: a run over every process
    // keeps the kernel's path.
    let running = Fixture::start(&fixture);
    let pid = running.pid().to_string();
    let everything = sdt()
        .args(["run", "--dump", "-e"])
        .arg(format!("usdt:{f}:acc:hit {{ @ = count(); }}"))
        .output()
        .unwrap();
    assert!(!text(&everything.stdout).contains("fast path"));
    let out = sdt()
        .args(["run", "--dump", "-p", &pid, "-e"])
        .arg(format!(
            "usdt:{f}:acc:hit {{ @[str(arg2)] = count(); }} \
             usdt:{f}:acc:text {{ @tasks[curtask] = count(); }}"
        ))
        .output()
        .unwrap();
    let dump = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        dump.contains(&format!(
            "usdt:{f}:acc:hit takes the fast path: its hits come through memory the program shares, and replay_0 replays them"
        )),
        "{dump}"
    );
    assert!(
        dump.contains(&format!(
            "usdt:{f}:acc:text takes the kernel's path: curtask is only known in the kernel"
        )),
        "{dump}"
    );
    // The kernel's path is asked for: every probe takes it, silently.
    let kernel = sdt()
        .env("SDT_FASTPATH", "0")
        .args(["run", "--dump", "-p", &pid, "-e"])
        .arg(format!("usdt:{f}:acc:hit {{ @ = count(); }}"))
        .output()
        .unwrap();
    assert!(!text(&kernel.stdout).contains("fast path"));
}

#[test]
fn a_script_that_compiles_for_the_kernel_compiles_with_the_fast_path_too() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else {
        return;
    };
    // Deeper and deeper expressions, up to more stack than a program has:
    // a replayed program has less (it runs under the batch's loop), and
    // where it does not fit, the probe takes the kernel's path.
    let running = Fixture::start(&fixture);
    let pid = running.pid().to_string();
    let mut expression = "arg0".to_string();
    let mut fell_back = false;
    for depth in 1..=12 {
        expression = format!("(arg1 * {depth} + {expression} * (arg0 + {depth}))");
        let script = format!(
            "usdt:{}:acc:hit {{ @x = sum({expression}); }}",
            fixture.display()
        );
        let dump = |kernel: bool| {
            let mut command = sdt();
            if kernel {
                command.env("SDT_FASTPATH", "0");
            }
            command
                .args(["run", "--dump", "-p", &pid, "-e", &script])
                .output()
                .unwrap()
        };
        let (kernel, fast) = (dump(true), dump(false));
        assert_eq!(
            kernel.status.success(),
            fast.status.success(),
            "depth {depth}: {}",
            text(&fast.stderr)
        );
        fell_back |= text(&fast.stdout).contains("every probe takes the kernel's path");
    }
    assert!(fell_back, "no depth needed the kernel's path");
}

#[test]
fn a_program_in_a_pid_namespace_of_its_own_is_shown_with_sdts_thread_ids() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(program) = fixture() else {
        return;
    };
    if !require(have("unshare"), "unshare") {
        return;
    }
    // The fixture is process 1 of a new PID namespace; its threads see
    // themselves as 2 and 3. Its hits carry those ids; sdt shows its own.
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--pid", "--fork", "--kill-child"])
        .arg(&program);
    let mut fixture = Fixture::spawn(unshare);
    // unshare's only child is the fixture.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", fixture.pid())).unwrap();
    let pid: u32 = children.trim().parse().unwrap();
    let events = sdt_testing::fixture::target_tmpdir().join("fastpath-namespace.txt");
    let traced = sdt()
        .args(["trace", "-p", &pid.to_string(), "-o"])
        .arg(&events)
        .arg(format!("{}:acc:hit", program.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    fixture.wait_enabled(true);
    assert_eq!(fixture.ask("50 2"), "fired 50\n");
    fixture.end();
    let err = text(&traced.wait_with_output().unwrap().stderr);
    assert!(err.contains("(100 events by the fast path)"), "{err}");
    let written = std::fs::read_to_string(&events).unwrap();
    let tids: std::collections::BTreeSet<u32> = written
        .lines()
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(fields[1], pid.to_string(), "{l}");
            fields[2].parse().unwrap()
        })
        .collect();
    assert_eq!(tids.len(), 2, "{written}");
    assert!(tids.iter().all(|&tid| tid > pid), "{tids:?} inside {pid}");
}

#[test]
fn exit_in_a_replayed_hit_stops_the_hits_after_it() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fixture) = fixture() else {
        return;
    };
    // One thread fires i = 1..=1000 in order; the 500th ends the run. Its
    // hits are replayed in order, so exactly 500 are counted.
    let script = "usdt:FIXTURE:acc:hit { @c = count(); if (arg0 == 500) { printf(\"at %d\\n\", arg0); exit(); } }
                  END { printf(\"end\\n\"); }";
    let output = run_on_input(&fixture, "1000 1\n", script, false);
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    assert!(err.contains("acc:hit takes the fast path"), "{err}");
    assert!(out.contains("at 500\nend\n"), "{out}");
    assert!(out.contains("@c: 500\n"), "{out}");
}
