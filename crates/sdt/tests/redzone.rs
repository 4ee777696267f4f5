//! Tracing on the kernel's fast path never changes what a program computes.
//!
//! Linux 6.18 turns a traced 5-byte no-op into a call, which pushes a return
//! address into the red zone below the stack pointer. The fixture's
//! `redzone` mode calls two leaf functions that keep values below their
//! stack pointer across a probe site (see tests/fixtures/probe/src/redzone.rs)
//! and prints how many results were wrong: `safe`, a Rust function with an
//! `sdt` probe, and `hazard`, hand-written assembly around a bare 5-byte
//! no-op. Traced, `hazard` must go wrong, which shows that the experiment
//! can see corruption, and `safe` must not.

mod common;

use common::{fixture, require_tracing, stdout_of, trace, Config};

const CALLS: u64 = 20_000;

/// The fixture's report: `safe_wrong=N hazard_wrong=N hazard_site=XX`.
struct Report {
    safe_wrong: u64,
    hazard_wrong: u64,
    hazard_site: String,
}

fn report(output: &str) -> Report {
    let field = |key: &str| {
        output
            .split_whitespace()
            .find_map(|field| field.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key} in {output:?}"))
            .to_owned()
    };
    Report {
        safe_wrong: field("safe_wrong").parse().unwrap(),
        hazard_wrong: field("hazard_wrong").parse().unwrap(),
        hazard_site: field("hazard_site"),
    }
}

#[test]
fn untraced_results_are_right() {
    let path = fixture(Config::RELEASE);
    let output = stdout_of(path.to_str().unwrap(), &["redzone", &CALLS.to_string()]);
    let report = report(&output);
    assert_eq!((report.safe_wrong, report.hazard_wrong), (0, 0), "{output}");
    assert_eq!(report.hazard_site, "0f", "{output}");
}

#[test]
fn traced_fast_path_corrupts_the_bare_site_but_not_the_probe() {
    if !require_tracing() {
        return;
    }
    let path = fixture(Config::RELEASE);
    let bin = path.to_str().unwrap();
    let script = format!(
        "usdt:{bin}:redzone:safe {{ @safe = count(); }} \
         usdt:{bin}:redzone:hazard {{ @hazard = count(); }}"
    );
    let traced = trace(bin, &["redzone", &CALLS.to_string(), "--wait"], &script);
    for counter in ["@safe", "@hazard"] {
        assert!(
            traced.tracer.contains(&format!("{counter}: {CALLS}")),
            "every call must hit {counter}:\n{}",
            traced.tracer
        );
    }
    let report = report(&traced.program);
    match report.hazard_site.as_str() {
        // The kernel made the site a call: the fast path ran.
        "e8" => assert!(
            report.hazard_wrong > 0,
            "the bare site was not corrupted, so this test cannot see the hazard: {}",
            traced.program
        ),
        // A breakpoint: the kernel has no fast path to test.
        "cc" if !kernel_has_fast_path() => {
            eprintln!("NOTE: this kernel traps on probes; the fast path was not exercised")
        }
        site => panic!("unexpected first byte {site} at the traced site"),
    }
    assert_eq!(
        report.safe_wrong, 0,
        "tracing changed results: {}",
        traced.program
    );
}

/// Whether the kernel rewrites 5-byte no-ops (Linux 6.18 and later).
fn kernel_has_fast_path() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0)) >= (6, 18)
}

/// The compiler keeps the probing leaf function's locals above the stack
/// pointer: it reserves a frame (`sub $N,%rsp`) and addresses nothing below
/// `%rsp`, and the function calls nothing, so it stays a leaf.
#[test]
fn probing_leaf_function_does_not_use_the_red_zone() {
    if !common::require_tool("objdump") {
        return;
    }
    let path = fixture(Config::RELEASE);
    let bin = path.to_str().unwrap();
    let symbols = stdout_of("nm", &[bin]);
    let safe = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .find(|name| name.contains("7redzone4safe"))
        .expect("the symbol of redzone::safe");
    let code = stdout_of("objdump", &["-d", &format!("--disassemble={safe}"), bin]);
    let instructions: Vec<&str> = code.lines().filter(|l| l.contains(":\t")).collect();
    assert!(
        instructions
            .iter()
            .any(|i| i.contains("sub ") && i.ends_with(",%rsp")),
        "no frame reserved:\n{code}"
    );
    assert!(
        !instructions.iter().any(|i| i.contains("call")),
        "not a leaf function:\n{code}"
    );
    assert!(
        !instructions
            .iter()
            .any(|i| i.contains("-0x") && i.contains("(%rsp")),
        "data below %rsp:\n{code}"
    );
    assert!(
        instructions.iter().any(|i| i.contains("0f 1f 44 00 00")),
        "no 5-byte no-op site:\n{code}"
    );
}
