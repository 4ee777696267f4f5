//! The language tools on the real runtimes: exact call counts of a known
//! workload (`tests/fixtures/tools`: fib(15) is 1,973 calls of `fib`, and
//! `nap` sleeps 1 s once) for Java, Python, Ruby and PHP, and the
//! sleeping method on top of `calls -L` with its time within 20%
//! (1 s: long enough to stay above fib, whose inclusive times add up
//! once per level of recursion); the exact `flow` tree of a fixed call
//! tree; N forced collections seen by `gc`.
//!
//! These attach real probes, so they need root (or CAP_BPF and
//! CAP_PERFMON). With `CI=true` a missing privilege or runtime fails the
//! test; elsewhere the test prints a loud SKIP.

mod list_common;

use std::path::{Path, PathBuf};
use std::process::Output;

use list_common::{assert_no_panic, have, require, sdt};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tools")
}

/// Whether `language`'s runtime is here to test (after a SKIP, or a
/// failure in CI, when it is not).
fn available(language: &str) -> bool {
    if !sdt_testing::require_root() {
        return false;
    }
    let ok = |path: &str, what: &str| require(Path::new(path).exists(), what);
    match language {
        "python" => ok("/usr/bin/python3.11", "Debian's python3.11"),
        "ruby" => require(have("ruby"), "ruby (Debian's package)"),
        "php" => ok("/usr/bin/php8.2", "php8.2-cli"),
        "java" => ok(&format!("{JAVA_HOME}/bin/javac"), "OpenJDK 17's javac"),
        _ => unreachable!(),
    }
}

const JAVA_HOME: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// The command that runs `language`'s fixture `name` (`Tree.java` for
/// Java's `tree`) with `args`, or `None` when the runtime is missing.
fn fixture_command(language: &str, name: &str, args: &str) -> Option<String> {
    if !available(language) {
        return None;
    }
    let dir = fixtures();
    Some(match language {
        "python" => format!("/usr/bin/python3.11 {}/{name}.py {args}", dir.display()),
        // Without RubyGems, Ruby starts without collecting.
        "ruby" => format!("ruby --disable-gems {}/{name}.rb {args}", dir.display()),
        "php" => format!("/usr/bin/php8.2 {}/{name}.php {args}", dir.display()),
        "java" => {
            let class = format!("{}{}", name[..1].to_uppercase(), &name[1..]);
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tools-java");
            let status = std::process::Command::new(format!("{JAVA_HOME}/bin/javac"))
                .arg("-d")
                .arg(&out)
                .arg(dir.join(format!("{class}.java")))
                .status()
                .expect("run javac");
            assert!(status.success(), "javac {class}.java");
            format!("{JAVA_HOME}/bin/java -cp {} {class} {args}", out.display())
        }
        _ => unreachable!(),
    })
}

fn tool(args: &[&str]) -> Output {
    let out = sdt().args(args).output().expect("run sdt");
    assert_no_panic(&out);
    assert!(
        out.status.success(),
        "sdt {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The last JSON report of a tool.
fn last_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_else(|| {
        panic!(
            "no output; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// The methods of a `calls` report whose name is `method`.
fn method<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    report["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .filter(|m| m["method"] == name)
        .collect()
}

fn exact_counts(language: &str) {
    let Some(cmd) = fixture_command(language, "fib", "") else {
        return;
    };
    let out = tool(&["calls", "--json", "-c", &cmd]);
    let report = last_json(&out);
    let fib = method(&report, "fib");
    assert_eq!(fib.len(), 1, "one fib in {report}");
    assert_eq!(
        fib[0]["calls"], 1973,
        "{language}: calls of fib in {report}"
    );
    assert_eq!(method(&report, "nap")[0]["calls"], 1, "{report}");
}

/// `calls -L`: `nap` (1 s) is the slowest method but for the one
/// that runs the whole program (`main`, Python's `<module>`), whose time
/// includes it.
fn latency(language: &str) {
    let Some(cmd) = fixture_command(language, "fib", "") else {
        return;
    };
    let out = tool(&["calls", "-L", "--json", "-c", &cmd]);
    let report = last_json(&out);
    let methods: Vec<&Value> = report["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .filter(|m| m["method"] != "main" && m["method"] != "<module>")
        .collect();
    let top: Vec<_> = methods.iter().take(5).collect();
    assert_eq!(
        methods[0]["method"], "nap",
        "{language}: the top 5: {top:?}"
    );
    let ms = methods[0]["total_ns"].as_u64().unwrap() as f64 / 1e6;
    assert!(
        (800.0..=1200.0).contains(&ms),
        "{language}: nap took {ms} ms"
    );
    let fib = method(&report, "fib");
    assert_eq!(fib[0]["calls"], 1973, "{language}: {report}");
}

#[test]
fn python_calls_are_counted_exactly() {
    exact_counts("python");
}

#[test]
fn ruby_calls_are_counted_exactly() {
    exact_counts("ruby");
}

#[test]
fn php_calls_are_counted_exactly() {
    exact_counts("php");
}

#[test]
fn java_calls_are_counted_exactly() {
    exact_counts("java");
}

#[test]
fn python_latency_puts_the_sleeper_on_top() {
    latency("python");
}

#[test]
fn ruby_latency_puts_the_sleeper_on_top() {
    latency("ruby");
}

#[test]
fn php_latency_puts_the_sleeper_on_top() {
    latency("php");
}

#[test]
fn java_latency_puts_the_sleeper_on_top() {
    latency("java");
}

/// A runtime without probes is refused in one line: Debian's python3.11
/// with its probe notes removed (objcopy) stands in for a build without
/// `--with-dtrace`.
#[test]
fn a_runtime_without_probes_is_refused_in_one_line() {
    if !require(
        Path::new("/usr/bin/python3.11").exists(),
        "Debian's python3.11",
    ) || !require(have("objcopy"), "objcopy (binutils)")
    {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tools-no-probes");
    std::fs::create_dir_all(&dir).unwrap();
    let python = dir.join("python3.11");
    let status = std::process::Command::new("objcopy")
        .args(["--remove-section", ".note.stapsdt", "/usr/bin/python3.11"])
        .arg(&python)
        .status()
        .unwrap();
    assert!(status.success(), "objcopy");
    let out = sdt()
        .args(["calls", "-c", &format!("{} -c pass", python.display())])
        .output()
        .unwrap();
    assert_no_panic(&out);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("built without USDT probes"), "{stderr}");
}

/// `flow -M tree_` on the fixed call tree gives exactly this, indentation
/// included (the METHOD column, after PID, TID and TIME).
fn exact_tree(language: &str, class: &str) {
    let Some(cmd) = fixture_command(language, "tree", "") else {
        return;
    };
    let class = class.replace("DIR", &fixtures().display().to_string());
    let out = tool(&["flow", "-M", "tree_", "-c", &cmd]);
    let text = String::from_utf8_lossy(&out.stdout);
    let methods: Vec<&str> = text.lines().skip(1).map(|l| &l[29..]).collect();
    let expected: Vec<String> = [
        "-> tree_top",
        "  -> tree_middle",
        "    -> tree_leaf",
        "    <- tree_leaf",
        "    -> tree_leaf",
        "    <- tree_leaf",
        "  <- tree_middle",
        "  -> tree_leaf",
        "  <- tree_leaf",
        "<- tree_top",
    ]
    .iter()
    .map(|l| {
        l.replace("> ", &format!("> {class}"))
            .replace("<- ", &format!("<- {class}"))
    })
    .collect();
    assert_eq!(methods, expected, "{language}:\n{text}");
    assert!(text.lines().next().unwrap().ends_with("METHOD"), "{text}");
}

#[test]
fn python_flow_is_the_exact_tree() {
    exact_tree("python", "DIR/tree.py.");
}

#[test]
fn ruby_flow_is_the_exact_tree() {
    exact_tree("ruby", "Object.");
}

#[test]
fn php_flow_is_the_exact_tree() {
    exact_tree("php", "");
}

#[test]
fn java_flow_is_the_exact_tree() {
    exact_tree("java", "Tree.");
}

/// The collections `gc --json` reports while `name` forces `n`.
fn collections(language: &str, name: &str, n: u32) -> Option<usize> {
    let cmd = fixture_command(language, name, &n.to_string())?;
    let out = tool(&["gc", "--json", "-c", &cmd]);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let event: Value = serde_json::from_str(line).expect("JSON");
        assert!(event["duration_ns"].as_u64().unwrap() > 0, "{line}");
    }
    Some(text.lines().count())
}

#[test]
fn java_system_gc_gives_one_collection_each() {
    if let Some(count) = collections("java", "collect", 7) {
        assert_eq!(count, 7);
    }
}

#[test]
fn ruby_gc_start_gives_one_collection_each() {
    if let Some(count) = collections("ruby", "collect", 7) {
        assert_eq!(count, 7);
    }
}

/// CPython collects on its own while it starts and when it ends (the
/// same number of times on every run): 7 `gc.collect()` calls give
/// exactly 7 more collections than none.
#[test]
fn python_gc_collect_gives_one_collection_each() {
    let (Some(none), Some(seven)) = (
        collections("python", "collect", 0),
        collections("python", "collect", 7),
    ) else {
        return;
    };
    assert_eq!(seven - none, 7, "{none} collections without gc.collect()");
}

/// The rows of `objnew --json` for class `class` while `name` allocates
/// `n` objects of `Foo`.
fn allocations(language: &str, class: &str, n: u32) {
    let Some(cmd) = fixture_command(language, "alloc", &n.to_string()) else {
        return;
    };
    let out = tool(&["objnew", "--json", "-c", &cmd]);
    let report = last_json(&out);
    let rows: Vec<&Value> = report["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .filter(|c| c["class"] == class)
        .collect();
    assert_eq!(rows.len(), 1, "{language}: {report}");
    assert_eq!(rows[0]["objects"], n, "{language}: {report}");
}

#[test]
fn java_allocations_of_foo_are_counted_exactly() {
    allocations("java", "Alloc$Foo", 1000);
}

#[test]
fn ruby_allocations_of_foo_are_counted_exactly() {
    allocations("ruby", "Foo", 1000);
}

/// `threads`: 5 Java threads named worker-0 to worker-4 each start and
/// stop once, with their names and thread ids.
#[test]
fn java_threads_are_reported_with_their_names() {
    let Some(cmd) = fixture_command("java", "threads", "5") else {
        return;
    };
    let out = tool(&["threads", "--json", "-c", &cmd]);
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .filter(|e: &Value| e["name"].as_str().unwrap().starts_with("worker-"))
        .collect();
    for i in 0..5 {
        let name = format!("worker-{i}");
        let mine: Vec<&Value> = events.iter().filter(|e| e["name"] == *name).collect();
        let kinds: Vec<&str> = mine.iter().map(|e| e["event"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["start", "stop"], "{name}:\n{text}");
        assert_eq!(mine[0]["tid"], mine[1]["tid"], "{name}:\n{text}");
        assert_ne!(mine[0]["tid"], mine[0]["pid"], "{name}:\n{text}");
    }
    assert_eq!(events.len(), 10, "{text}");
}
