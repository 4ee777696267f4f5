//! Every common USDT reader finds the probes and reads their arguments.
//!
//! `fixture:values` fires with `(-7i32, "hello from rust", c"c string",
//! -3i8, true, 1 << 40, 65535u16)`; its argument slots are
//! `arg0 = -7`, `arg1, arg2 = "hello from rust", 15`, `arg3 = c"c string"`,
//! `arg4 = -3`, `arg5 = 1`, `arg6 = 1099511627776`, `arg7 = 65535`.

mod common;

use std::process::Command;

use common::{fixture, require_tool, require_tracing, run, stdout_of, tempdir, trace, Config};

const PROBES: [&str; 5] = [
    "fixture:values",
    "fixture:untyped",
    "fixture:shared",
    "redzone:safe",
    "redzone:hazard",
];

#[test]
fn readelf_lists_every_probe() {
    let path = fixture(Config::RELEASE);
    let notes = stdout_of("readelf", &["-n", path.to_str().unwrap()]);
    for probe in PROBES {
        let (provider, name) = probe.split_once(':').unwrap();
        assert!(
            notes.contains(&format!("Provider: {provider}\n    Name: {name}\n")),
            "readelf -n lacks {probe}:\n{notes}"
        );
    }
    assert!(
        notes.contains("Arguments: -4@%e"),
        "an i32 is -4@%e..:\n{notes}"
    );
}

#[test]
fn gdb_lists_probes_and_reads_arguments() {
    if !require_tool("gdb") {
        return;
    }
    let path = fixture(Config::RELEASE);
    let bin = path.to_str().unwrap();
    let listing = stdout_of("gdb", &["-nx", "-batch", "-ex", "info probes", bin]);
    for probe in PROBES {
        let (provider, name) = probe.split_once(':').unwrap();
        assert!(
            listing.lines().any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(..3) == Some(&["stap", provider, name])
            }),
            "gdb info probes lacks {probe}:\n{listing}"
        );
    }

    // gdb raises the semaphore when it inserts the probe's breakpoint.
    let mut args = vec!["-nx", "-batch", "-ex", "break -probe-stap fixture:values"];
    args.extend(["-ex", "run", "-ex", "set language c"]);
    let prints = [
        "$_probe_argc",
        "$_probe_arg0",
        "(char *)$_probe_arg1",
        "$_probe_arg2",
        "(char *)$_probe_arg3",
        "$_probe_arg4",
        "$_probe_arg5",
        "$_probe_arg6",
        "$_probe_arg7",
    ];
    let prints: Vec<String> = prints.iter().map(|p| format!("print {p}")).collect();
    for print in &prints {
        args.extend(["-ex", print]);
    }
    args.extend(["--args", bin, "values", "1"]);
    let output = stdout_of("gdb", &args);
    let values: Vec<&str> = output
        .lines()
        .filter_map(|line| line.strip_prefix('$'))
        .filter_map(|line| line.split_once(" = ").map(|(_, value)| value))
        .collect();
    let expected = [
        "8",
        "-7",
        "\"hello from rust\"",
        "15",
        "\"c string\"",
        "-3",
        "1",
        "1099511627776",
        "65535",
    ];
    assert_eq!(values.len(), expected.len(), "gdb output:\n{output}");
    for (value, expected) in values.iter().zip(expected) {
        assert!(
            value.ends_with(expected),
            "gdb printed {value}, expected {expected}:\n{output}"
        );
    }
}

#[test]
fn perf_lists_probes_from_its_buildid_cache() {
    if !require_tool("perf") {
        return;
    }
    let path = fixture(Config::RELEASE);
    // A private HOME: perf keeps its cache in ~/.debug.
    let home = tempdir("perf-home");
    let perf = |args: &[&str]| {
        let output = run(Command::new("perf").args(args).env("HOME", &home));
        assert!(output.status.success(), "perf {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    perf(&["buildid-cache", "--add", path.to_str().unwrap()]);
    let listing = perf(&["list", "sdt"]);
    for probe in PROBES {
        assert!(
            listing.contains(&format!("sdt_{probe} ")),
            "perf list lacks sdt_{probe}:\n{listing}"
        );
    }
    std::fs::remove_dir_all(&home).ok();
}

#[test]
fn bpftrace_lists_probes() {
    if !require_tracing() {
        return;
    }
    let path = fixture(Config::RELEASE);
    let bin = path.to_str().unwrap();
    let listing = stdout_of("bpftrace", &["-l", &format!("usdt:{bin}:*")]);
    for probe in PROBES {
        assert!(
            listing
                .lines()
                .any(|line| line == format!("usdt:{bin}:{probe}")),
            "bpftrace -l lacks {probe}:\n{listing}"
        );
    }
}

#[test]
fn bpftrace_reads_arguments_and_sees_every_site() {
    if !require_tracing() {
        return;
    }
    let path = fixture(Config::RELEASE);
    let bin = path.to_str().unwrap();
    // bpftrace 0.17 reads arg0 to arg5 only, and keeps the length `str()`
    // is given (0.23 and later, and sdt, count a NUL in it: `arg2 + 1`). `fixture:shared` has a site in
    // the binary and one in another crate, which share one semaphore:
    // bpftrace raises one semaphore per probe name, and sees both sites.
    let script = format!(
        r#"usdt:{bin}:fixture:values {{
            printf("%d|%s|%d|%s|%d|%d\n", arg0, str(arg1, arg2), arg2, str(arg3), arg4, arg5);
        }}
        usdt:{bin}:fixture:shared {{ @shared = count(); }}"#
    );
    let traced = trace(bin, &["values", "3", "--wait"], &script);
    let expected = "-7|hello from rust|15|c string|-3|1";
    let hits: Vec<&str> = traced
        .tracer
        .lines()
        .filter(|line| line.contains('|'))
        .collect();
    assert_eq!(hits.len(), 3, "bpftrace printed:\n{}", traced.tracer);
    for line in hits {
        assert_eq!(line, expected);
    }
    assert!(
        traced.tracer.contains("@shared: 2"),
        "both sites of fixture:shared:\n{}",
        traced.tracer
    );
}
