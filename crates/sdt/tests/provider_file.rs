//! Probes declared in a DTrace provider file and fired from Rust through
//! `sdt::include_provider!` (tests/fixtures/dprovider: typedefs, a macro,
//! strings, a pointer): every reader finds them, and bpftrace, gdb and
//! `sdt run` read their arguments exactly.
//!
//! `shop:order__placed` fires with `(42, -1250, "tea", "ada")`,
//! `shop:order__flags` with `(1, 7, -2, &order)`, `shop:tick` with none.

mod common;

use std::process::{Command, Stdio};

use common::{fixture_crate, readelf_notes, require_tool, require_tracing, run, stdout_of, trace};
use sdt_testing::sdt_binary;
use serde_json::Value;

fn fixture() -> String {
    fixture_crate("dprovider", "sdt-dprovider-fixture")
        .to_str()
        .unwrap()
        .to_string()
}

/// The sizes and signs of each probe's argument specs, as `-4`, `8`, ...
fn sizes(specs: &str) -> Vec<&str> {
    specs
        .split_whitespace()
        .map(|s| s.split_once('@').unwrap().0)
        .collect()
}

#[test]
fn readelf_and_sdt_list_see_the_declared_types() {
    let bin = fixture();
    let notes = readelf_notes(bin.as_ref());
    let shop: Vec<(&str, Vec<&str>)> = notes
        .iter()
        .filter(|n| n.provider == "shop")
        .map(|n| (n.name.as_str(), sizes(&n.args)))
        .collect();
    assert_eq!(
        shop,
        [
            // OrderId (a #define), cents_t (a typedef of int), two strings.
            ("order__placed", vec!["8", "-4", "8", "8"]),
            // bool, unsigned char, short, order_t *.
            ("order__flags", vec!["1", "1", "-2", "8"]),
            ("tick", vec![]),
        ]
    );

    let output = run(Command::new(sdt_binary()).args(["list", "--json", &bin, "shop:*"]));
    assert!(output.status.success(), "sdt list: {output:?}");
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["order__placed", "order__flags", "tick"]);
    let placed = &listed[0]["sites"][0];
    assert!(placed["semaphore_offset"].is_u64(), "{placed}");
    assert_eq!(placed["args"][1]["signed"], true);
}

#[test]
fn gdb_reads_the_arguments() {
    if !require_tool("gdb") {
        return;
    }
    let bin = fixture();
    let listing = stdout_of("gdb", &["-nx", "-batch", "-ex", "info probes", &bin]);
    for name in ["order__placed", "order__flags", "tick"] {
        assert!(
            listing
                .lines()
                .any(|l| l.split_whitespace().take(3).eq(["stap", "shop", name])),
            "gdb lacks shop:{name}:\n{listing}"
        );
    }
    let output = stdout_of(
        "gdb",
        &[
            "-nx",
            "-batch",
            "-ex",
            "break -probe-stap shop:order__placed",
            "-ex",
            "run",
            "-ex",
            "set language c",
            "-ex",
            "print $_probe_arg0",
            "-ex",
            "print $_probe_arg1",
            "-ex",
            "print (char *)$_probe_arg2",
            "-ex",
            "print (char *)$_probe_arg3",
            "--args",
            &bin,
            "1",
        ],
    );
    let values: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with('$'))
        .filter_map(|l| l.split_once(" = ").map(|(_, v)| v))
        .collect();
    assert_eq!(values.len(), 4, "gdb:\n{output}");
    for (value, expected) in values.iter().zip(["42", "-1250", "\"tea\"", "\"ada\""]) {
        assert!(
            value.ends_with(expected),
            "{value} is not {expected}:\n{output}"
        );
    }
}

#[test]
fn bpftrace_lists_the_probes_and_reads_the_arguments() {
    if !require_tracing() {
        return;
    }
    let bin = fixture();
    let listing = stdout_of("bpftrace", &["-l", &format!("usdt:{bin}:shop:*")]);
    for name in ["order__placed", "order__flags", "tick"] {
        assert!(
            listing
                .lines()
                .any(|l| l == format!("usdt:{bin}:shop:{name}")),
            "bpftrace -l lacks shop:{name}:\n{listing}"
        );
    }
    let script = format!(
        r#"usdt:{bin}:shop:order__placed {{ printf("placed %d %d %s %s\n", arg0, arg1, str(arg2), str(arg3)); }}
           usdt:{bin}:shop:order__flags {{ printf("flags %d %d %d %lu\n", arg0, arg1, arg2, arg3); }}
           usdt:{bin}:shop:tick {{ @ticks = count(); }}"#
    );
    let traced = trace(&bin, &["3", "--wait"], &script);
    let order = order_address(&traced.program);
    let lines: Vec<&str> = traced
        .tracer
        .lines()
        .filter(|l| l.starts_with("placed") || l.starts_with("flags"))
        .collect();
    let flags = format!("flags 1 7 -2 {order}");
    assert_eq!(
        lines,
        ["placed 42 -1250 tea ada", &flags].repeat(3),
        "bpftrace:\n{}",
        traced.tracer
    );
    assert!(traced.tracer.contains("@ticks: 3"), "{}", traced.tracer);
}

/// Under `-c`, so that the semaphores are raised as the program maps its
/// file: with this fixture's small `.data`, lld put them on the page that
/// ends the RELRO segment until `.probes` was made to start a page.
#[test]
fn sdt_run_reads_the_arguments() {
    if !require_tracing() {
        return;
    }
    let bin = fixture();
    let output = run(Command::new(sdt_binary())
        .args([
            "run",
            "-c",
            &format!("{bin} 2"),
            "-e",
            r#"usdt::shop:order__placed { printf("placed %d %d %s %s\n", arg0, arg1, str(arg2), str(arg3)); }
               usdt::shop:order__flags { printf("flags %d %d %d %lu\n", arg0, arg1, arg2, arg3); }"#,
        ])
        .stdin(Stdio::null()));
    assert!(output.status.success(), "sdt run: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    let order = order_address(&text);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("placed") || l.starts_with("flags"))
        .collect();
    let flags = format!("flags 1 7 -2 {order}");
    assert_eq!(
        lines,
        ["placed 42 -1250 tea ada", &flags].repeat(2),
        "{text}"
    );
}

/// The address the fixture printed as `order at 0x...`, in decimal.
fn order_address(program_output: &str) -> u64 {
    let hex = program_output
        .lines()
        .find_map(|l| l.strip_prefix("order at 0x"))
        .unwrap_or_else(|| panic!("no order address in {program_output:?}"));
    u64::from_str_radix(hex, 16).unwrap()
}
