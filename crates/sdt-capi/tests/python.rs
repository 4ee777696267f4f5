//! libsdt.so from C and from Python's `ctypes`: the header compiles and
//! the library defines, loads, fires and unloads probes, which sdt and
//! bpftrace 0.17 trace exactly, before and after a rebuild.

use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use sdt_testing::{built_by, have, require, require_root, sdt_binary};
use serde_json::Value;

fn libsdt() -> PathBuf {
    built_by("sdt-capi", "libsdt.so")
}

fn output(command: &mut Command) -> std::process::Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", command.get_program()))
}

#[test]
fn c_programs_build_against_the_header_and_library() {
    if !require(have("cc"), "cc") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sdt-capi-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("use.c");
    std::fs::write(
        &source,
        r#"
#include <libsdt.h>
#include <stdio.h>
#include <string.h>

int main(void) {
	if (sdt_provider_new("no good") != NULL || strstr(sdt_last_error(), "invalid provider name") == NULL)
		return 1;
	sdt_provider *p = sdt_provider_new("capp");
	enum sdt_arg_type types[] = { SDT_ARG_U64, SDT_ARG_STR, SDT_ARG_BYTES };
	if (sdt_provider_add_probe(p, "request", types, 3) != 0)
		return 2;
	if (sdt_provider_probe(p, "request") != NULL)
		return 3; /* not loaded yet */
	if (sdt_provider_load(p) != 0 || sdt_provider_add_probe(p, "late", types, 1) != -1)
		return 4;
	const sdt_probe *request = sdt_provider_probe(p, "request");
	if (request == NULL || sdt_probe_enabled(request) != 0)
		return 5;
	uint64_t args[] = { 200, (uintptr_t)"/", (uintptr_t)"body", 4 };
	if (sdt_probe_fire(request, args, 4) != 0)
		return 6;
	if (sdt_provider_unload(p) != 0 || sdt_provider_add_probe(p, "late", types, 1) != 0)
		return 7;
	if (sdt_provider_load(p) != 0 || sdt_provider_probe(p, "late") == NULL)
		return 8;
	sdt_provider_free(p);
	puts("ok");
	return 0;
}
"#,
    )
    .unwrap();
    let lib = libsdt();
    let lib_dir = lib.parent().unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let program = dir.join("use");
    let built = output(
        Command::new("cc")
            .args(["-Wall", "-Werror", "-o"])
            .arg(&program)
            .arg(&source)
            .arg("-I")
            .arg(&include)
            .arg("-L")
            .arg(lib_dir)
            .arg("-lsdt"),
    );
    assert!(
        built.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = output(Command::new(&program).env("LD_LIBRARY_PATH", lib_dir));
    assert_eq!(
        (
            ran.status.code(),
            String::from_utf8_lossy(&ran.stdout).as_ref()
        ),
        (Some(0), "ok\n"),
        "{ran:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// tests/probes.py, running, and its standard output line by line.
struct Script {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Script {
    fn expect(&mut self, expected: &str) {
        let line = self.lines.next().and_then(Result::ok);
        assert_eq!(line.as_deref(), Some(expected), "probes.py said");
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path `sdt list -p` prints for the object holding `pyapp:*`.
fn listed(pid: &str) -> String {
    let out = output(Command::new(sdt_binary()).args(["list", "--json", "-p", pid, "pyapp:*"]));
    assert!(out.status.success(), "sdt list: {out:?}");
    let probes: Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = probes[0]["path"].as_str().unwrap().to_string();
    assert!(path.starts_with(&format!("/proc/{pid}/fd/")), "{path}");
    path
}

/// Prints `request`'s arguments (bytes and their length in 2 and 3) and
/// `last`'s, and exits once `last` has fired `hits` times. `nul_counted`:
/// the length `str()` takes counts a NUL (sdt, as bpftrace 0.23 and
/// later), or not (bpftrace 0.17).
fn script(path: &str, last: &str, hits: u64, nul_counted: bool) -> String {
    let target = format!("usdt:{path}:pyapp");
    let bytes = if nul_counted {
        "str(arg2, arg3 + 1)"
    } else {
        "str(arg2, arg3)"
    };
    let mut text =
        format!("{target}:request {{ printf(\"%d %s %s\\n\", arg0, str(arg1), {bytes}); }}\n");
    if last != "request" {
        text.push_str(&format!(
            "{target}:{last} {{ printf(\"{last} %d\\n\", arg0); }}\n"
        ));
    }
    text.push_str(&format!(
        "{target}:{last} {{ @n++; if (@n == {hits}) {{ exit(); }} }}\n"
    ));
    text
}

fn check(tracer: &str, out: &[u8], last: &str, hits: u64) {
    let out = String::from_utf8_lossy(out);
    let requests: Vec<&str> = out
        .lines()
        .filter(|l| l.ends_with(" /index.html <html>"))
        .collect();
    let expected: Vec<String> = (0..hits)
        .map(|i| format!("{} /index.html <html>", 200 + i))
        .collect();
    assert_eq!(requests, expected, "{tracer}:\n{out}");
    if last != "request" {
        let got: Vec<&str> = out.lines().filter(|l| l.starts_with(last)).collect();
        let expected: Vec<String> = (0..hits)
            .map(|i| format!("{last} {}", -(i as i64)))
            .collect();
        assert_eq!(got, expected, "{tracer}:\n{out}");
    }
}

#[test]
fn python_defines_probes_that_sdt_and_bpftrace_trace() {
    if !(require(have("python3"), "python3")
        && require(have("bpftrace"), "bpftrace")
        && require_root())
    {
        return;
    }
    const HITS: u64 = 100;
    let mut child = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probes.py"))
        .arg(libsdt())
        .args([&HITS.to_string(), "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python3");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut script_run = Script { child, lines };
    let pid = script_run.child.id().to_string();

    script_run.expect("loaded 1 enabled=0");
    let path = listed(&pid);
    let out = output(Command::new(sdt_binary()).args([
        "run",
        "-p",
        &pid,
        "-e",
        &script(&path, "request", HITS, true),
    ]));
    assert!(out.status.success(), "sdt run: {out:?}");
    check("sdt run", &out.stdout, "request", HITS);
    script_run.expect("fired 1");
    script_run.expect("detached 1");
    script_run.expect("unloaded 1 mapped=False");

    script_run.expect("loaded 2 enabled=0");
    let path = listed(&pid);
    let out = output(
        Command::new("bpftrace")
            .args(["-p", &pid, "-e", &script(&path, "round2", HITS, false)])
            .stdin(Stdio::null()),
    );
    assert!(out.status.success(), "bpftrace: {out:?}");
    check("bpftrace", &out.stdout, "round2", HITS);
    script_run.expect("fired 2");
    script_run.expect("detached 2");
    script_run.expect("unloaded 2 mapped=False");
    let status = script_run.child.wait().unwrap();
    assert!(status.success(), "probes.py: {status}");
}

#[test]
fn sdt_trace_c_sees_the_probes_python_defines_after_it_starts() {
    if !(require(have("python3"), "python3") && require_root()) {
        return;
    }
    const HITS: u64 = 100;
    let command = format!(
        "python3 {} {} {HITS} 2 --stay-traced",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/probes.py")
            .display(),
        libsdt().display()
    );
    // The events go to a file: probes.py writes to sdt's standard output
    // too, and two writers of one pipe can interleave within a line.
    let events_file = std::env::temp_dir().join(format!("sdt-capi-events-{}", std::process::id()));
    let out = output(
        Command::new(sdt_binary())
            .args(["trace", "-o"])
            .arg(&events_file)
            .args(["-c", &command, "-s", "1", "-s", "2:3", "pyapp:request"])
            .stdin(Stdio::null()),
    );
    assert!(out.status.success(), "sdt trace: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let events = std::fs::read_to_string(&events_file).unwrap();
    std::fs::remove_file(&events_file).ok();
    // Whether `request` was enabled when `load` returned depends on how
    // soon sdt attached: it may be before `dlopen` returns.
    let steps: Vec<&str> = text
        .lines()
        .map(|l| l.split(" enabled=").next().unwrap_or(l))
        .collect();
    assert_eq!(
        steps,
        [
            "loaded 1",
            "fired 1",
            "unloaded 1 mapped=False",
            "loaded 2",
            "fired 2",
            "unloaded 2 mapped=False"
        ],
        "{text}"
    );
    let hits: Vec<String> = events
        .lines()
        .filter_map(|l| l.split_once(" pyapp:request "))
        .map(|(_, args)| args.to_string())
        .collect();
    let expected: Vec<String> = (0..2 * HITS)
        .map(|n| {
            format!(
                "arg0={} arg1=\"/index.html\" arg2=\"<html>\" arg3=6",
                200 + n % HITS
            )
        })
        .collect();
    assert_eq!(hits, expected, "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn sdt_trace_c_follows_forked_workers_that_each_define_probes() {
    if !(require(have("python3"), "python3") && require_root()) {
        return;
    }
    const WORKERS: u64 = 3;
    const HITS: u64 = 50;
    let command = format!(
        "python3 {} {} {WORKERS} {HITS}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/forked.py")
            .display(),
        libsdt().display()
    );
    let events_file = std::env::temp_dir().join(format!("sdt-capi-forked-{}", std::process::id()));
    let out = output(
        Command::new(sdt_binary())
            .args(["trace", "--json", "-o"])
            .arg(&events_file)
            .args(["-c", &command, "pyfork:hit"])
            .stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sdt trace: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "workers done\n");
    let events: Vec<Value> = std::fs::read_to_string(&events_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_file(&events_file).ok();
    let (summary, hits) = events.split_last().unwrap();
    // Each worker's hits, in its order, from its own process.
    let mut by_worker: std::collections::BTreeMap<u64, (Vec<u64>, Vec<u64>)> = Default::default();
    for hit in hits {
        let worker = hit["args"][0].as_u64().unwrap();
        let entry = by_worker.entry(worker).or_default();
        entry.0.push(hit["args"][1].as_u64().unwrap());
        entry.1.push(hit["pid"].as_u64().unwrap());
    }
    assert_eq!(by_worker.len() as u64, WORKERS, "{stderr}");
    let mut pids = std::collections::BTreeSet::new();
    for (worker, (is, worker_pids)) in &by_worker {
        assert_eq!(*is, (0..HITS).collect::<Vec<_>>(), "worker {worker}");
        assert!(worker_pids.iter().all(|p| *p == worker_pids[0]));
        pids.insert(worker_pids[0]);
    }
    assert_eq!(pids.len() as u64, WORKERS, "one process each");
    // One object per worker, each attached once.
    assert_eq!(summary["summary"]["sites"], WORKERS, "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("sdt: attached "))
            .count() as u64,
        WORKERS,
        "{stderr}"
    );
}
