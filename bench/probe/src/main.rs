//! The Rust side of bench/probe.sh.
//!
//! `sdt-bench-probe IMPL ARG N [--wait]` runs a loop of N iterations and
//! prints its cost in nanoseconds per iteration twice: wall-clock time, and
//! the thread's CPU time (user and system), which other load on the machine
//! inflates far less.
//!
//! * IMPL: `none` (no probe), `sdt` (this project's crate), `dynamic` (a
//!   probe of the crate's run-time API, `sdt::dynamic`, tested with
//!   `enabled()` before its argument is computed) or `probe` (the `probe`
//!   crate's `probe_lazy!`, which also skips its arguments while disabled).
//! * ARG: `expensive` (the probe's argument takes about a hundred
//!   multiplications) or `cheap` (the loop counter).
//! * `--wait`: first wait until a tracer has enabled the probe.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// An argument worth skipping when nobody traces.
#[inline(never)]
fn expensive(seed: u64) -> u64 {
    (0..100).fold(seed, |acc, i| {
        acc.wrapping_mul(6364136223846793005).wrapping_add(i)
    })
}

/// The calling thread's CPU time in nanoseconds.
fn cpu_time() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    now.tv_sec as f64 * 1e9 + now.tv_nsec as f64
}

/// Runs the loop; returns wall-clock and CPU nanoseconds.
macro_rules! timed_loop {
    ($n:expr, |$i:ident| $probe:expr) => {{
        let (start, cpu) = (Instant::now(), cpu_time());
        for $i in 0..$n {
            black_box($i);
            $probe;
        }
        (start.elapsed().as_nanos() as f64, cpu_time() - cpu)
    }};
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [imp, arg, n, rest @ ..] = args.as_slice() else {
        eprintln!("usage: sdt-bench-probe none|sdt|dynamic|probe expensive|cheap N [--wait]");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("N is a number");
    let expensive_arg = match arg.as_str() {
        "expensive" => true,
        "cheap" => false,
        other => panic!("unknown argument kind {other}"),
    };
    // Loaded before the tracer is waited for, so that it finds the probes.
    let runtime = sdt::dynamic::Provider::new("bench")
        .and_then(|p| p.probe("dyn_expensive", &[sdt::dynamic::ArgType::U64]))
        .and_then(|p| p.probe("dyn_cheap", &[sdt::dynamic::ArgType::U64]))
        .and_then(|p| p.load())
        .expect("load the run-time probes");
    let dyn_expensive = runtime.probe("dyn_expensive").unwrap();
    let dyn_cheap = runtime.probe("dyn_cheap").unwrap();
    if rest.first().map(String::as_str) == Some("--wait") {
        wait_for_tracer();
    }
    let (wall, cpu) = match (imp.as_str(), expensive_arg) {
        ("none", _) => timed_loop!(n, |i| ()),
        ("sdt", true) => timed_loop!(n, |i| sdt::probe!(bench, sdt_expensive, expensive(i))),
        ("sdt", false) => timed_loop!(n, |i| sdt::probe!(bench, sdt_cheap, i)),
        ("dynamic", true) => timed_loop!(n, |i| {
            if dyn_expensive.enabled() {
                dyn_expensive.fire(&[expensive(i).into()])
            }
        }),
        ("dynamic", false) => timed_loop!(n, |i| dyn_cheap.fire(&[i.into()])),
        ("probe", true) => timed_loop!(n, |i| {
            probe::probe_lazy!(bench, probe_expensive, expensive(i))
        }),
        ("probe", false) => timed_loop!(n, |i| probe::probe_lazy!(bench, probe_cheap, i)),
        (other, _) => panic!("unknown implementation {other}"),
    };
    println!("{:.3} {:.3}", wall / n as f64, cpu / n as f64);
}

/// Waits until the tracer has raised the semaphore of `bench:ready`, which
/// every traced run also traces: the `probe` crate's semaphores belong to
/// its call sites and cannot be read from here.
///
/// Each loop has a probe name of its own because bpftrace 0.17 raises only
/// one semaphore per probe name, and the `probe` crate gives each call site
/// its own.
fn wait_for_tracer() {
    let start = Instant::now();
    while !sdt::enabled!(bench, ready) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no tracer within a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // bpftrace raises semaphores before it attaches its probes.
    std::thread::sleep(Duration::from_millis(500));
    sdt::probe!(bench, ready);
}
