//! Perf-event probes and the kernel's view of the traced process, on C
//! fixtures whose figures are known: three busy threads sampled at 99 Hz
//! (each thread's samples against the CPU time it reports), a process
//! that touches a known number of new pages (its page faults, and none of
//! another process's), `curtask->real_parent->tgid` against the
//! fixture's own `getppid()`, kernel stacks and symbols against
//! `/proc/kallsyms`, hardware counters where the machine has none, and
//! the `-l` listing of perf-event probes.
//!
//! These attach real probes, so they need root. With `CI=true` a missing
//! privilege or tool fails the test; elsewhere the test prints a loud SKIP.

mod list_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use list_common::{assert_no_panic, have, require, sdt};
use sdt_testing::fixture::C;
use serde_json::Value;

/// Fixture `name` of `tests/fixtures/kernel`, built with frame pointers
/// (so user stacks unwind), or `None` (a SKIP, or a failure in CI).
fn fixture(name: &str) -> Option<PathBuf> {
    if !sdt_testing::require_root() || !require(have("cc"), "a C compiler (cc)") {
        return None;
    }
    Some(
        C::new(format!("tests/fixtures/kernel/{name}.c"))
            .flags(&["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
            .build(),
    )
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

/// The maps of `-f json` output, by name: each a key-to-value object.
fn json_maps(stdout: &[u8]) -> BTreeMap<String, Value> {
    let mut maps = BTreeMap::new();
    for line in String::from_utf8_lossy(stdout).lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if record["type"] == "map" {
            for (name, value) in record["data"].as_object().unwrap() {
                maps.insert(name.clone(), value.clone());
            }
        }
    }
    maps
}

/// A map's integer entries, by key.
fn counts(map: &Value) -> BTreeMap<String, u64> {
    map.as_object()
        .map(|entries| {
            entries
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn profile_samples_each_busy_thread_at_99_hz_of_its_cpu_time() {
    let Some(busy) = fixture("busy") else { return };
    let report = std::env::temp_dir().join(format!("sdt-busy-{}.txt", std::process::id()));
    let command = format!("{} 3 {}", busy.display(), report.display());
    let out = run_ok(&[
        "-f",
        "json",
        "-c",
        &command,
        "-e",
        "profile:hz:99 { @samples[tid] = count(); @where[ustack(1)] = count(); }",
    ]);
    let maps = json_maps(&out.stdout);
    let samples = counts(&maps["@samples"]);
    let threads: Vec<(String, f64)> = std::fs::read_to_string(&report)
        .expect("the fixture's report")
        .lines()
        .map(|l| {
            let (tid, ns) = l.split_once(' ').unwrap();
            (tid.to_string(), ns.parse::<f64>().unwrap() / 1e9)
        })
        .collect();
    let _ = std::fs::remove_file(&report);
    assert_eq!(threads.len(), 3);
    let window = 3.0;
    let total_cpu: f64 = threads.iter().map(|t| t.1).sum();
    let total_samples: u64 = threads
        .iter()
        .map(|(t, _)| samples.get(t).copied().unwrap_or(0))
        .sum();
    for (tid, cpu_seconds) in &threads {
        let got = samples.get(tid).copied().unwrap_or(0) as f64;
        let expected = 99.0 * cpu_seconds;
        // No sample is lost: at least 99 a second of the CPU time the
        // thread used. On a shared virtual machine the CPU clock also
        // counts time the host took from the guest, which the thread's
        // own clock does not, so the count may be higher; but a thread
        // runs on one CPU at a time, so never more than 99 a second of
        // the wall time.
        assert!(
            got >= 0.75 * expected - 4.0 && got <= 99.0 * window + 4.0,
            "thread {tid} used {cpu_seconds:.3} s of CPU: {expected:.0} samples expected at 99 Hz, {got} taken ({samples:?})"
        );
        // Each thread's share of the samples is its share of the CPU.
        let share = got / total_samples as f64;
        let cpu_share = cpu_seconds / total_cpu;
        assert!(
            (share - cpu_share).abs() <= 0.12,
            "thread {tid}: {share:.2} of the samples, {cpu_share:.2} of the CPU ({samples:?} against {threads:?})"
        );
    }
    // Every sample of a busy thread is in the busy function, and only
    // the traced process is sampled: its main thread waits in the kernel.
    let sampled: u64 = samples.values().sum();
    let busy_threads: u64 = threads
        .iter()
        .map(|(t, _)| samples.get(t).copied().unwrap_or(0))
        .sum();
    assert!(
        sampled - busy_threads <= 2,
        "{samples:?} against {threads:?}"
    );
    let in_spin: u64 = counts(&maps["@where"])
        .iter()
        .filter(|(stack, _)| stack.trim().starts_with("spin_here+"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        in_spin as f64 >= 0.9 * total_samples as f64,
        "{in_spin} of {total_samples} samples in spin_here: {}",
        maps["@where"]
    );
}

/// The profile of work a program marks with USDT probes: only the thread
/// inside the marked span is sampled, at 99 Hz of its CPU time.
#[test]
fn profile_filters_on_state_usdt_probes_keep() {
    let Some(busy) = fixture("busy") else { return };
    let report = std::env::temp_dir().join(format!("sdt-marked-{}.txt", std::process::id()));
    let command = format!("{} 2 {}", busy.display(), report.display());
    let bin = busy.display().to_string();
    let script = format!(
        "usdt:{bin}:busy:marked_start {{ @on[tid] = 1; }} \
         usdt:{bin}:busy:marked_done {{ delete(@on[tid]); }} \
         profile:hz:99 /@on[tid]/ {{ @samples[tid] = count(); }}"
    );
    let out = run_ok(&["-f", "json", "-c", &command, "-e", &script]);
    let samples = counts(&json_maps(&out.stdout)["@samples"]);
    let threads = std::fs::read_to_string(&report).expect("the fixture's report");
    let _ = std::fs::remove_file(&report);
    // The first line is the marked thread.
    let (tid, ns) = threads.lines().next().unwrap().split_once(' ').unwrap();
    let expected = 99.0 * ns.parse::<f64>().unwrap() / 1e9;
    assert_eq!(samples.keys().collect::<Vec<_>>(), [tid], "{samples:?}");
    // As in the test above: at least 99 a second of its CPU time, at
    // most 99 a second of the wall time.
    let got = samples[tid] as f64;
    assert!(
        got >= 0.75 * expected - 4.0 && got <= 99.0 * 2.0 + 4.0,
        "{got} samples of the marked thread, {expected:.0} expected"
    );
}

#[test]
fn page_faults_count_the_traced_process_and_no_other() {
    let Some(faults) = fixture("faults") else {
        return;
    };
    const PAGES: u64 = 3000;
    // Another process faults the same pages meanwhile: none of its faults
    // may be counted.
    let mut other = Command::new(&faults)
        .args([&PAGES.to_string(), "0.5"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the other process");
    let command = format!("{} {PAGES} 0.5", faults.display());
    let out = run_ok(&[
        "-f",
        "json",
        "-c",
        &command,
        "-e",
        "software:page-faults:1 { @faults[pid] = count(); } software:faults:100 { @hundreds[pid] = count(); }",
    ]);
    let other_pid = other.id().to_string();
    assert!(other.wait().unwrap().success());
    let traced = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("the fixture prints its pid")
        .trim()
        .to_string();
    let maps = json_maps(&out.stdout);
    let faults_by_pid = counts(&maps["@faults"]);
    assert_eq!(
        faults_by_pid.keys().collect::<Vec<_>>(),
        [&traced],
        "only the traced process: {faults_by_pid:?} (the other was {other_pid})"
    );
    let counted = faults_by_pid[&traced];
    assert!(counted >= PAGES, "{counted} faults for {PAGES} new pages");
    // Every hundredth fault fires the second probe.
    let hundreds = counts(&maps["@hundreds"]);
    // The count of 100 is counted on each CPU over every process (the
    // other faults meanwhile), so the traced process's share of its
    // firings is near, not exactly, a hundredth of its faults.
    let n = hundreds.get(&traced).copied().unwrap_or(0) as f64;
    let hundredth = counted as f64 / 100.0;
    assert!(
        (n - hundredth).abs() <= hundredth / 2.0 + 3.0,
        "{n} firings of software:faults:100 for {counted} faults"
    );
}

#[test]
fn curtask_reads_the_parent_the_process_sees() {
    let Some(family) = fixture("family") else {
        return;
    };
    if !require(
        Path::new("/sys/kernel/btf/vmlinux").exists(),
        "the kernel's BTF (/sys/kernel/btf/vmlinux)",
    ) {
        return;
    }
    let bin = family.display().to_string();
    // The fixture's parent is the shell, which waits for it.
    let command = format!("/bin/sh -c '{bin}; true'");
    let script = format!(
        "uprobe:{bin}:report {{ $t = (struct task_struct *)curtask; \
         printf(\"%d %d %d %s %s\\n\", arg0, curtask->real_parent->tgid, $t->real_parent->pid, curtask->comm, $t->real_parent->comm); }}"
    );
    let out = run_ok(&["-c", &command, "-e", &script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.split(' ').count() == 5)
        .unwrap_or_else(|| panic!("no report line: {stdout}"));
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(
        words[0], words[1],
        "getppid() against real_parent->tgid: {line}"
    );
    assert_eq!(
        words[0], words[2],
        "getppid() against real_parent->pid: {line}"
    );
    assert_eq!(words[3], "family", "{line}");
    assert_eq!(words[4], "sh", "{line}");
}

/// `/proc/kallsyms` names, for checking kernel frames against.
fn kernel_functions() -> std::collections::HashSet<String> {
    std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

#[test]
fn kstack_in_a_tracepoint_names_kernel_functions() {
    if !sdt_testing::require_root() {
        return;
    }
    let out = run_ok(&[
        "-f",
        "json",
        "-c",
        "/bin/sleep 0.05",
        "-e",
        "tracepoint:syscalls:sys_enter_clock_nanosleep /pid == cpid/ { @[kstack] = count(); }",
    ]);
    let maps = json_maps(&out.stdout);
    let stacks = counts(&maps["@"]);
    assert_eq!(stacks.values().sum::<u64>(), 1, "{stacks:?}");
    let known = kernel_functions();
    let stack = stacks.keys().next().unwrap();
    let frames: Vec<&str> = stack
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(frames.len() >= 3, "{stack:?}");
    for frame in &frames {
        let (name, offset) = frame.rsplit_once('+').expect("name+offset");
        assert!(known.contains(name), "{name} is no kernel function");
        offset.parse::<u64>().expect("a decimal offset");
    }
    // The system call came in through the kernel's entry code.
    assert!(
        frames.iter().any(|f| f.starts_with("do_syscall_64+")),
        "{frames:?}"
    );
    // perf mode: a tab, the address in hex, the symbol; two frames.
    let out = run_ok(&[
        "-c",
        "/bin/sleep 0.05",
        "-e",
        "tracepoint:syscalls:sys_enter_clock_nanosleep /pid == cpid/ { printf(\"%s|\", kstack(perf, 2)); }",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = stdout.split('|').next().unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 2, "{stdout:?}");
    let (addr, sym) = lines[0]
        .strip_prefix('\t')
        .and_then(|l| l.split_once(' '))
        .unwrap_or_else(|| panic!("{stdout:?}"));
    assert!(u64::from_str_radix(addr, 16).unwrap() >= 0xffff_0000_0000_0000);
    assert_eq!(sym, frames[0]);
}

#[test]
fn kaddr_and_ksym_agree_with_kallsyms() {
    if !sdt_testing::require_root() {
        return;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let address = |name: &str| {
        kallsyms
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .map(|l| u64::from_str_radix(&l[..16], 16).unwrap())
    };
    let schedule = address("schedule").expect("schedule in /proc/kallsyms");
    let out = run_ok(&[
        "-e",
        "BEGIN { printf(\"%lu %s %s\\n\", kaddr(\"schedule\"), ksym(kaddr(\"schedule\") + 4), ksym(0)); exit(); }",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim(), format!("{schedule} schedule 0x0"));
    // jiffies is a variable: listed only by kernels built with
    // CONFIG_KALLSYMS_ALL, and an error that says so elsewhere.
    let out = sdt()
        .args([
            "run",
            "-e",
            "BEGIN { printf(\"%lu\\n\", kaddr(\"jiffies\")); exit(); }",
        ])
        .output()
        .unwrap();
    assert_no_panic(&out);
    match address("jiffies") {
        Some(jiffies) => {
            assert!(out.status.success());
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                jiffies.to_string()
            );
            assert_ne!(jiffies, 0);
        }
        None => {
            assert!(!out.status.success());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("Failed to resolve kernel symbol: jiffies"),
                "{stderr}"
            );
            assert!(stderr.contains("CONFIG_KALLSYMS_ALL"), "{stderr}");
        }
    }
}

#[test]
fn hardware_probes_need_a_pmu() {
    if !sdt_testing::require_root() {
        return;
    }
    let out = sdt()
        .args([
            "run",
            "-e",
            "hardware:cycles:1000000 { @ = count(); exit(); }",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_no_panic(&out);
    let has_pmu = std::fs::read_dir("/sys/bus/event_source/devices")
        .unwrap()
        .flatten()
        .any(|d| {
            let name = d.file_name();
            let name = name.to_string_lossy();
            name.starts_with("cpu") || name.starts_with("armv8_pmu")
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    if has_pmu {
        assert!(out.status.success(), "{stderr}");
    } else {
        // This VM: one line that says what is missing.
        assert!(!out.status.success());
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("Attaching"))
            .collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(
            errors[0].contains("no hardware performance counter"),
            "{stderr}"
        );
    }
}

#[test]
fn perf_event_probes_are_listed_as_bpftrace_lists_them() {
    let out = sdt().args(["run", "-l", "software:*"]).output().unwrap();
    assert!(out.status.success());
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // Each name and alias of the kernel's software events, sorted.
    let mut expected: Vec<String> = sdt_lang::perf::SOFTWARE
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.alias))
        .map(|n| format!("software:{n}:"))
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
    assert!(lines.contains(&"software:faults:".to_string()));
    let out = sdt().args(["run", "-l", "profile:*"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "profile:hz:\nprofile:ms:\nprofile:s:\nprofile:us:\n"
    );
    let out = sdt()
        .args(["run", "-l", "hardware:*cycles"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hardware:bus-cycles:\nhardware:cpu-cycles:\nhardware:cycles:\nhardware:ref-cycles:\n"
    );
}
