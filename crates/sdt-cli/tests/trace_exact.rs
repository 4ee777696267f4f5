//! The exact-count test of `sdt trace`, alone in its own test binary so
//! that no other test competes with it for the machine's two cores: two
//! threads hit one probe 1,000,000 times each, and every hit must be either
//! printed or counted as lost.

mod list_common;
mod trace_common;

use std::io::Read;
use std::path::Path;

use list_common::{assert_no_panic, sdt};
use trace_common::setup;

#[test]
fn two_threads_two_million_hits_all_accounted_for() {
    let Some(f) = setup() else { return };
    let out_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("two-million.txt");
    let command = format!("{} 1000000", f.threads.display());
    let out = sdt()
        .args(["trace", "-o"])
        .arg(&out_file)
        .args(["-c", &command, "fixture:hit"])
        .output()
        .expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (events, lost) = summary_counts(&stderr);
    let mut text = String::new();
    std::fs::File::open(&out_file)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let printed = text.lines().count() as u64;
    assert_eq!(printed, events, "every counted event was printed");
    assert_eq!(printed + lost, 2_000_000, "printed + lost must be exact");
    // An unoptimised sdt formats too slowly to keep up; the release build,
    // which CI tests, must.
    if !cfg!(debug_assertions) {
        assert_eq!(
            lost, 0,
            "the default buffer keeps up when writing to a file"
        );
        for thread in [1, 2] {
            let mine = text
                .lines()
                .filter(|l| l.contains(&format!("arg0={thread} ")))
                .count();
            assert_eq!(mine, 1_000_000, "thread {thread}");
        }
    }
}

/// Parses "sdt: E events, L lost, S sites" from stderr.
fn summary_counts(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(" events, ") && l.contains(" lost"))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (numbers[0], numbers[1])
}
