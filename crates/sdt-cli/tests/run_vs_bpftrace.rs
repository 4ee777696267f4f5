//! `sdt run` against bpftrace 0.17: the same script, run by both on the
//! same program, must print the same thing.
//!
//! Each case runs a script with the real `bpftrace` and with sdt installed
//! under the name `bpftrace` (a symlink, so it takes bpftrace's command
//! line and prints `Attaching N probes...` on standard output), in the
//! same directory, tracing its own copy of `tests/fixtures/run/shop.c`
//! (or of `tests/fixtures/values/shapes.c` for values larger than a
//! register).
//! Standard output must be byte for byte the same, after normalising only
//! the order of map entries whose values are equal: bpftrace prints those
//! in the kernel hash table's order, which changes from run to run.
//! Exit statuses must be the same too.
//!
//! Where bpftrace 0.17 is wrong and sdt deliberately is not, the case is
//! not compared: `sdt_fixes_what_bpftrace_gets_wrong` checks sdt's
//! behaviour on its own, as does `values_beyond_what_bpftrace_0_17_takes`
//! for what 0.17 refuses. Bad scripts are checked on sdt alone too, since
//! sdt's diagnostics are its own.
//!
//! bpftrace 0.17 needs tracefs for uprobes, which this machine does not
//! mount; sdt must work without it. So each run gets a private mount
//! namespace (`unshare -m`): bpftrace's mounts tracefs for it alone, sdt's
//! unmounts it should the machine have it. Nothing is left mounted
//! afterwards, and the machine's own mounts are never touched.
//!
//! These tests need root, bpftrace, unshare and a C compiler with
//! `<sys/sdt.h>`. With `CI=true` a missing one fails the test; elsewhere
//! the test prints a loud SKIP.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use sdt_testing::fixture::C;
use sdt_testing::{have, require, require_root};

// ---------------------------------------------------------------- setup

/// What every case needs, made once per test binary.
struct Setup {
    /// The fixture, built with `-O2 -g`.
    shop: PathBuf,
    /// A symlink named `bpftrace` to the sdt binary under test.
    sdt_as_bpftrace: PathBuf,
    root: PathBuf,
}

/// Runs `"$@"` (bpftrace) in a private mount namespace that has tracefs
/// mounted, mounting it there unless the machine already has it.
const WITH_TRACEFS: &str = "[ -e /sys/kernel/tracing/uprobe_events ] || \
     mount -t tracefs nodev /sys/kernel/tracing || exit 99; exec \"$@\"";

/// Runs `"$@"` (sdt) in a private mount namespace without tracefs,
/// unmounting it there should the machine have it: sdt must not need it.
const WITHOUT_TRACEFS: &str = "while mountpoint -q /sys/kernel/tracing; do \
     umount /sys/kernel/tracing || exit 99; done; exec \"$@\"";

fn setup() -> Option<&'static Setup> {
    static SETUP: OnceLock<Option<Setup>> = OnceLock::new();
    SETUP
        .get_or_init(|| {
            if !require_root()
                || !require(have("bpftrace"), "bpftrace 0.17")
                || !require(have("unshare"), "unshare (util-linux)")
                || !require(have("cc"), "a C compiler (cc)")
            {
                return None;
            }
            let version = Command::new("bpftrace").arg("--version").output().ok()?;
            let version = String::from_utf8_lossy(&version.stdout).into_owned();
            if !require(
                version.starts_with("bpftrace v0.17."),
                &format!("bpftrace 0.17 (found {})", version.trim()),
            ) {
                return None;
            }
            let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run-vs-bpftrace");
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("bin")).unwrap();
            let shop = C::new("tests/fixtures/run/shop.c")
                .flags(&["-O2", "-g"])
                .dir(&root)
                .try_build();
            if !require(
                shop.is_ok(),
                "<sys/sdt.h> (Debian: systemtap-sdt-dev) for the fixture",
            ) {
                eprintln!("{}", shop.unwrap_err());
                return None;
            }
            let shop = shop.ok()?;
            let namespace = |script: &str| {
                Command::new("unshare")
                    .args(["--mount", "--propagation", "private", "sh", "-c", script])
                    .args(["sh", "true"])
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if !require(
                namespace(WITH_TRACEFS) && namespace(WITHOUT_TRACEFS),
                "private mount namespaces with and without tracefs",
            ) {
                return None;
            }
            let sdt_as_bpftrace = root.join("bin/bpftrace");
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sdt"), &sdt_as_bpftrace).unwrap();
            Some(Setup {
                shop,
                sdt_as_bpftrace,
                root,
            })
        })
        .as_ref()
}

/// One case: a directory of its own holding a copy of the fixture, so
/// that cases running in parallel never trace each other's processes.
struct Case {
    setup: &'static Setup,
    dir: PathBuf,
}

impl Case {
    fn new(name: &str) -> Option<Case> {
        let setup = setup()?;
        let dir = setup.root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&setup.shop, dir.join("shop")).unwrap();
        Some(Case { setup, dir })
    }

    /// Writes a script into the case's directory; returns its name there.
    fn script(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.join(name), text).unwrap();
        name.to_string()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `program ARGS` in the case's directory, in a private mount
    /// namespace set up by `namespace` (`WITH_TRACEFS` or
    /// `WITHOUT_TRACEFS`).
    fn run(&self, namespace: &str, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        // Nothing may hang the test run: each run gets a minute.
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
            .args(["sh", "-c", namespace, "sh"])
            .arg(program)
            .args(args)
            .current_dir(&self.dir)
            .env_remove("BPFTRACE_STRLEN")
            .env_remove("BPFTRACE_MAP_KEYS_MAX")
            .output()
            .expect("run timeout and unshare");
        assert_ne!(
            out.status.code(),
            Some(99),
            "could not set up the mount namespace: {}",
            text(&out.stderr)
        );
        out
    }

    /// bpftrace's run, the reference. bpftrace 0.17 now and then loses
    /// track of its `-c` child (`waitpid(N) returned unexpected error:
    /// 10`), then prints END's output before the probes' and its
    /// output means nothing: such a run is made again.
    fn bpftrace(&self, args: &[&str]) -> Output {
        let mut out = self.run(WITH_TRACEFS, "bpftrace", args);
        for _ in 0..3 {
            if !text(&out.stderr).contains("returned unexpected error") {
                break;
            }
            out = self.run(WITH_TRACEFS, "bpftrace", args);
        }
        out
    }

    /// sdt through the `bpftrace` symlink.
    fn sdt(&self, args: &[&str]) -> Output {
        let out = self.run(WITHOUT_TRACEFS, &self.setup.sdt_as_bpftrace, args);
        assert_no_panic(&out);
        out
    }

    /// sdt as `sdt SUBCOMMAND ARGS`.
    fn sdt_subcommand(&self, subcommand: &str, args: &[&str]) -> Output {
        let mut full = vec![subcommand];
        full.extend_from_slice(args);
        let out = self.run(WITHOUT_TRACEFS, env!("CARGO_BIN_EXE_sdt"), &full);
        assert_no_panic(&out);
        out
    }

    /// Runs `args` with both tools and asserts the same standard output
    /// (ties normalised) and exit status; returns sdt's output.
    fn same(&self, args: &[&str]) -> Output {
        let mut bt = self.bpftrace(args);
        let sdt = self.sdt(args);
        // On a loaded machine, bpftrace 0.17 now and then prints nothing
        // but `Attaching N probes...` for a `-c` command whose probes did
        // fire, and says nothing on standard error: that reference run is
        // made again (twice at most) before sdt's output is held to it.
        let lines = |out: &Output| without_blank_lines(&text(&out.stdout)).lines().count();
        for _ in 0..2 {
            if lines(&bt) > 1 || lines(&sdt) <= 1 {
                break;
            }
            bt = self.bpftrace(args);
        }
        assert_same(args, &bt, &sdt);
        sdt
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_no_panic(out: &Output) {
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "sdt panicked: {stderr}");
}

fn assert_same(args: &[&str], bt: &Output, sdt: &Output) {
    let (want, got) = (
        normalise(&without_blank_lines(&as_in_0_26(&text(&bt.stdout)))),
        normalise(&without_blank_lines(&text(&sdt.stdout))),
    );
    if want != got {
        panic!(
            "bpftrace {args:?}: standard output differs\n{}\n--- bpftrace stderr:\n{}\n--- sdt stderr:\n{}",
            diff(&want, &got),
            text(&bt.stderr),
            text(&sdt.stderr)
        );
    }
    assert_eq!(
        bt.status.code(),
        sdt.status.code(),
        "bpftrace {args:?}: exit status\n--- bpftrace stderr:\n{}\n--- sdt stderr:\n{}",
        text(&bt.stderr),
        text(&sdt.stderr)
    );
}

/// A line diff good enough to read a failure: `-` bpftrace, `+` sdt.
fn diff(want: &str, got: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut out = String::new();
    let mut first = a.len().min(b.len());
    for i in 0..a.len().min(b.len()) {
        if a[i] != b[i] {
            first = i;
            break;
        }
    }
    out.push_str(&format!("first difference at line {}:\n", first + 1));
    for line in a.iter().skip(first.saturating_sub(3)).take(30) {
        out.push_str(&format!("- {line}\n"));
    }
    out.push_str("...\n");
    for line in b.iter().skip(first.saturating_sub(3)).take(30) {
        out.push_str(&format!("+ {line}\n"));
    }
    out
}

// ------------------------------------------ what 0.26 prints differently

/// Scalar `count()` maps the scripts here leave without entries (by
/// `clear()`, or because their probe never fires): bpftrace 0.17 prints
/// them as 0, 0.26 not at all.
const EMPTY_SCALAR_COUNTS: &[&str] = &["@cc", "@never"];

/// Histograms the scripts here `zero()`: printed with no buckets, their
/// headers look like an empty string value's.
const ZEROED_HISTOGRAMS: &[&str] = &["@hz", "@lz"];

/// bpftrace 0.17's text output as bpftrace 0.26 prints it, which is what
/// sdt follows: every known difference between the two, in one place.
///
/// - A histogram's header has no trailing space (`@h:`, was `@h: `), also
///   that of a zeroed histogram, which has no buckets
///   ([`ZEROED_HISTOGRAMS`]).
/// - `stats()` prints as a record: `{ .count = 2, .average = 3, .total = 6 }`
///   (was `count 2, average 3, total 6`).
/// - Blank lines: 0.17 prints one after each `avg()` and `stats()` map and
///   one (two for `stats()`) for a map without entries, 0.26 none; both
///   print the two before the final maps and one after each histogram.
///   Blank lines are left out of the comparison (see `without_blank_lines`);
///   sdt-output's own tests and tests/language.rs pin them to 0.26.
/// - A scalar `count()` without entries prints nothing
///   ([`EMPTY_SCALAR_COUNTS`]).
/// - Pointers print in hex: the scripts here name their pointer fields
///   `ptr`.
/// - Array elements in keys print as their type says; the scripts' array
///   keys are `unsigned char` arrays, which 0.17 printed signed.
fn as_in_0_26(out: &str) -> String {
    let lines: Vec<&str> = out.split_inclusive('\n').collect();
    let mut kept: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_end_matches('\n');
        if EMPTY_SCALAR_COUNTS
            .iter()
            .any(|m| body == format!("{m}: 0"))
        {
            continue;
        }
        if body.starts_with('@')
            && body.ends_with(": ")
            && (lines.get(i + 1).is_some_and(|l| is_bucket(l))
                || ZEROED_HISTOGRAMS.contains(&map_name(body)))
        {
            kept.push(format!("{}\n", body.trim_end()));
            continue;
        }
        let mut line = line.to_string();
        if let Some((head, stats)) = body.split_once(": count ") {
            let parts: Vec<&str> = stats.splitn(2, ", average ").collect();
            if let [count, rest] = parts[..] {
                if let Some((average, total)) = rest.split_once(", total ") {
                    line = format!(
                        "{head}: {{ .count = {count}, .average = {average}, .total = {total} }}\n"
                    );
                }
            }
        }
        let mut from = 0;
        while let Some(found) = line[from..].find(".ptr = ") {
            let at = from + found + ".ptr = ".len();
            let digits = line[at..].bytes().take_while(u8::is_ascii_digit).count();
            if let Ok(n) = line[at..at + digits].parse::<u64>() {
                line.replace_range(at..at + digits, &format!("{n:#x}"));
            }
            from = at;
        }
        if line.starts_with('@') {
            line = unsigned_char_keys(&line, "[[", "]]");
        }
        kept.push(line);
    }
    kept.concat()
}

/// The array between `open` and `close` in `line` with its elements
/// from -128 to -1 as the `unsigned char`s they are.
fn unsigned_char_keys(line: &str, open: &str, close: &str) -> String {
    let (Some(from), Some(to)) = (line.find(open), line.find(close)) else {
        return line.to_string();
    };
    let from = from + open.len();
    if to < from {
        return line.to_string();
    }
    let elements: Vec<String> = line[from..to]
        .split(',')
        .map(|e| match e.parse::<i64>() {
            Ok(n) if (-128..0).contains(&n) => (n + 256).to_string(),
            _ => e.to_string(),
        })
        .collect();
    format!("{}{}{}", &line[..from], elements.join(","), &line[to..])
}

/// Integers in a JSON line that a double cannot hold exactly, quoted.
fn inexact_integers_quoted(line: &str) -> String {
    let mut out = String::new();
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push(c);
            continue;
        }
        if c == '-' || c.is_ascii_digit() {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !d.is_ascii_digit() {
                    break;
                }
                end = j + 1;
                chars.next();
            }
            let digits = &line[i..end];
            let exact = match digits.parse::<i128>() {
                Ok(n) => n as f64 as i128 == n,
                Err(_) => true,
            };
            if exact {
                out.push_str(digits);
            } else {
                out.push_str(&format!("\"{digits}\""));
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `out` without its blank lines (see `as_in_0_26`).
fn without_blank_lines(out: &str) -> String {
    out.split_inclusive('\n')
        .filter(|l| !l.trim_end_matches('\n').is_empty())
        .collect()
}

/// The JSON form of `as_in_0_26`, for one line of bpftrace 0.17's output:
/// `attached_probes` gives its number as `count` too, histogram buckets
/// are joined without spaces, structs have no spaces inside their braces,
/// integers a double cannot hold exactly are strings, the `unsigned char`
/// array keys are unsigned, and a scalar `count()` without entries prints
/// nothing (`None`).
fn json_as_in_0_26(line: &str) -> Option<String> {
    if let Some(probes) = line
        .strip_prefix(r#"{"type": "attached_probes", "data": {"probes": "#)
        .and_then(|rest| rest.strip_suffix("}}"))
    {
        return Some(format!(
            r#"{{"type": "attached_probes", "count": {probes}, "data": {{"probes": {probes}}}}}"#
        ));
    }
    if EMPTY_SCALAR_COUNTS
        .iter()
        .any(|m| line == format!(r#"{{"type": "map", "data": {{"{m}": 0}}}}"#))
    {
        return None;
    }
    let mut line = line.replace(r#"{ ""#, r#"{""#).replace(" }", "}");
    if line.starts_with(r#"{"type": "hist""#) {
        line = line.replace(r#"}, {"m"#, r#"},{"m"#);
    }
    line = unsigned_char_keys(&line, "{\"[", "]\":");
    Some(inexact_integers_quoted(&line))
}

// -------------------------------------------------------- normalisation

/// Sorts each run of adjacent map entries that bpftrace orders by value
/// and whose values are equal (one-line entries of the same map with the
/// same number; histograms of the same map with the same total count),
/// so that the hash table's order of ties does not matter. Everything
/// else is left exactly as it is.
fn normalise(out: &str) -> String {
    let lines: Vec<&str> = out.split_inclusive('\n').collect();
    let mut items: Vec<(Option<String>, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.starts_with('@')
            && line.ends_with(":\n")
            && lines.get(i).is_some_and(|l| is_bucket(l))
        {
            let mut block = line.to_string();
            let mut total = 0u64;
            while let Some(bucket) = lines.get(i).filter(|l| is_bucket(l)) {
                total += bucket[16..24].trim().parse::<u64>().unwrap_or(0);
                block.push_str(bucket);
                i += 1;
            }
            if lines.get(i) == Some(&"\n") {
                block.push('\n');
                i += 1;
            }
            items.push((Some(format!("{} hist {total}", map_name(line))), block));
            continue;
        }
        items.push((tie_key(line), line.to_string()));
    }
    let mut out = String::new();
    let mut start = 0;
    while start < items.len() {
        let mut end = start + 1;
        if items[start].0.is_some() {
            while end < items.len() && items[end].0 == items[start].0 {
                end += 1;
            }
        }
        let mut run: Vec<&String> = items[start..end].iter().map(|(_, t)| t).collect();
        run.sort();
        out.extend(run.into_iter().map(String::as_str));
        start = end;
    }
    out
}

/// `[2, 4)                 3 |@@@   |`: a histogram bucket line.
fn is_bucket(line: &str) -> bool {
    let line = line.trim_end_matches('\n');
    line.len() == 16 + 8 + 2 + 52 + 1
        && line.is_char_boundary(16)
        && line[16..24].trim().parse::<u64>().is_ok()
        && line[24..].starts_with(" |")
        && line.ends_with('|')
}

fn map_name(line: &str) -> &str {
    let end = line.find(['[', ':']).unwrap_or(line.len());
    &line[..end]
}

/// What an entry `@m[key]: value` is sorted by, when that is a number:
/// the map and the number (a stats line's average).
fn tie_key(line: &str) -> Option<String> {
    if !line.starts_with('@') {
        return None;
    }
    let (_, value) = line.trim_end_matches('\n').rsplit_once("]: ")?;
    let number = match value.strip_prefix("{ .count = ") {
        Some(stats) => stats.split(", .average = ").nth(1)?.split(',').next()?,
        None => value,
    };
    number.parse::<i128>().ok()?;
    Some(format!("{} {number}", map_name(line)))
}

/// The JSON form of `normalise`: in a keyed map's object, sorts each run
/// of adjacent entries with equal numbers (a stats object's average, a
/// histogram's total count).
fn normalise_json(line: &str) -> String {
    let Some(at) = line.find("\"data\": {\"@") else {
        return line.to_string();
    };
    let name_at = at + "\"data\": {".len();
    // The map's value: an object (`{"key": ...}`) if the map has keys.
    let Some((_, value)) = split_key(&line[name_at..]) else {
        return line.to_string();
    };
    let colon = line.len() - value.len();
    if !value.starts_with("{\"") {
        return line.to_string();
    }
    let Some(end) = line.len().checked_sub(2).filter(|&e| e > colon) else {
        return line.to_string();
    };
    let body = &line[colon + 1..end - 1];
    let entries = split_top_level(body);
    if entries.iter().any(|e| !e.starts_with('"')) {
        return line.to_string();
    }
    let number = |v: &str| -> Option<i128> {
        let v = v.trim();
        if let Ok(n) = v.parse() {
            return Some(n);
        }
        if let Some(avg) = v.split("\"average\": ").nth(1) {
            return avg.split(',').next()?.trim().parse().ok();
        }
        if v.starts_with('[') {
            let counts = v.split("\"count\": ").skip(1);
            return Some(
                counts
                    .filter_map(|c| c.split('}').next()?.parse::<i128>().ok())
                    .sum(),
            );
        }
        None
    };
    let keyed: Vec<(Option<i128>, &str)> = entries
        .iter()
        .map(|e| {
            let value = split_key(e).map(|(_, v)| v);
            (value.and_then(number), *e)
        })
        .collect();
    let mut sorted = Vec::new();
    let mut start = 0;
    while start < keyed.len() {
        let mut end = start + 1;
        if keyed[start].0.is_some() {
            while end < keyed.len() && keyed[end].0 == keyed[start].0 {
                end += 1;
            }
        }
        let mut run: Vec<&str> = keyed[start..end].iter().map(|e| e.1).collect();
        run.sort();
        sorted.extend(run);
        start = end;
    }
    format!(
        "{}{}{}",
        &line[..=colon],
        sorted.join(", "),
        &line[end - 1..]
    )
}

/// `"key": value` split at the colon after the key.
fn split_key(entry: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in entry.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return entry[i + 1..].strip_prefix(": ").map(|v| (&entry[..=i], v)),
            _ => {}
        }
    }
    None
}

/// Splits `a, b, c` at the commas outside strings, brackets and braces.
fn split_top_level(body: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut in_string, mut escaped, mut from) =
        (Vec::new(), 0, false, false, 0);
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' | '[' if !in_string => depth += 1,
            '}' | ']' if !in_string => depth -= 1,
            ',' if !in_string && depth == 0 => {
                parts.push(body[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(body[from..].trim());
    parts
}

#[test]
fn normalising_json_sorts_only_ties() {
    let a = r#"{"type": "map", "data": {"@m": {"b": 1, "a": 1, "c,\"x": 2}}}"#;
    let b = r#"{"type": "map", "data": {"@m": {"a": 1, "b": 1, "c,\"x": 2}}}"#;
    assert_eq!(normalise_json(a), normalise_json(b));
    assert_eq!(normalise_json(b), b);
    let c = r#"{"type": "map", "data": {"@m": {"c,\"x": 2, "a": 1, "b": 1}}}"#;
    assert_ne!(normalise_json(c), normalise_json(b));
    let s1 = r#"{"type": "stats", "data": {"@s": {"2": {"count": 1, "average": 3, "total": 3}, "1": {"count": 2, "average": 3, "total": 6}}}}"#;
    let s2 = r#"{"type": "stats", "data": {"@s": {"1": {"count": 2, "average": 3, "total": 6}, "2": {"count": 1, "average": 3, "total": 3}}}}"#;
    assert_eq!(normalise_json(s1), normalise_json(s2));
    let h1 = r#"{"type": "hist", "data": {"@h": {"y": [{"min": 2, "max": 3, "count": 1}], "x": [{"min": 4, "max": 7, "count": 1}]}}}"#;
    let h2 = r#"{"type": "hist", "data": {"@h": {"x": [{"min": 4, "max": 7, "count": 1}], "y": [{"min": 2, "max": 3, "count": 1}]}}}"#;
    assert_eq!(normalise_json(h1), normalise_json(h2));
    // Not keyed: left alone.
    let plain = r#"{"type": "stats", "data": {"@st": {"count": 2, "average": 5, "total": 10}}}"#;
    assert_eq!(normalise_json(plain), plain);
    // A struct value is an object too (0.26): its fields keep their order
    // unless neighbours tie, which both sides then sort the same way.
    let record = r#"{"type": "map", "data": {"@r": {"b": 2, "a": 1}}}"#;
    assert_eq!(normalise_json(record), record);
}

#[test]
fn what_0_26_prints_differently() {
    let bucket = format!("{:<16}{:>8} |{:<52}|\n", "[1]", 1, "@".repeat(52));
    let bt = format!(
        "@cc: 0\n@c: 0\n@h: \n{bucket}\n@s: count 2, average 3, total 6\n\
         @p: {{ .ptr = 4096, .n = 5 }}\n@k[[-23,3]]: 1\n"
    );
    let want = format!(
        "@c: 0\n@h:\n{bucket}\n@s: {{ .count = 2, .average = 3, .total = 6 }}\n\
         @p: {{ .ptr = 0x1000, .n = 5 }}\n@k[[233,3]]: 1\n"
    );
    assert_eq!(as_in_0_26(&bt), want);
    assert_eq!(without_blank_lines("a\n\n\nb\n\n"), "a\nb\n");
    assert_eq!(
        json_as_in_0_26(r#"{"type": "attached_probes", "data": {"probes": 2}}"#).as_deref(),
        Some(r#"{"type": "attached_probes", "count": 2, "data": {"probes": 2}}"#)
    );
    assert_eq!(
        json_as_in_0_26(r#"{"type": "map", "data": {"@cc": 0}}"#),
        None
    );
    assert_eq!(
        json_as_in_0_26(r#"{"type": "map", "data": {"@k": {"[-23,3]": 7309623665904058378}}}"#)
            .as_deref(),
        Some(r#"{"type": "map", "data": {"@k": {"[233,3]": "7309623665904058378"}}}"#)
    );
}

#[test]
fn normalising_sorts_only_ties() {
    let bt = "Attaching 1 probe...\n@c[2]: 5\n@c[1]: 5\n@c[9]: 7\n@s[b]: x\n@s[a]: x\n";
    let sdt = "Attaching 1 probe...\n@c[1]: 5\n@c[2]: 5\n@c[9]: 7\n@s[b]: x\n@s[a]: x\n";
    assert_eq!(normalise(bt), normalise(sdt));
    // A different order of different values is still a difference, and so
    // is a different order of string values (sorted by key, not value).
    assert_ne!(
        normalise("@c[9]: 7\n@c[1]: 5\n"),
        normalise("@c[1]: 5\n@c[9]: 7\n")
    );
    assert_ne!(
        normalise("@s[b]: x\n@s[a]: x\n"),
        normalise("@s[a]: x\n@s[b]: x\n")
    );
    // Stats lines tie on their average.
    assert_eq!(
        normalise("@s[2]: { .count = 1, .average = 3, .total = 3 }\n@s[1]: { .count = 2, .average = 3, .total = 6 }\n"),
        normalise("@s[1]: { .count = 2, .average = 3, .total = 6 }\n@s[2]: { .count = 1, .average = 3, .total = 3 }\n"),
    );
    // Histograms of one map with the same total are ties; their buckets
    // stay as they are.
    let bucket = |label: &str, n: u64| format!("{label:<16}{n:>8} |{:<52}|\n", "@".repeat(52));
    let h = |key: &str, label: &str| format!("@h[{key}]:\n{}\n", bucket(label, 2));
    let (a, b) = (h("a", "[1]"), h("b", "[2, 4)"));
    assert_eq!(normalise(&(a.clone() + &b)), normalise(&(b.clone() + &a)));
    let c = format!("@h[c]:\n{}{}\n", bucket("[1]", 1), bucket("[2, 4)", 2));
    assert_ne!(normalise(&(a.clone() + &c)), normalise(&(c + &a)));
}

// ------------------------------------------------------------ the cases

/// Every aggregation, the histogram layouts (zero buckets between, the
/// open ends, K/M labels, bars), multi-part, string and negative keys,
/// negative values, and the order maps and entries print in; as text and
/// as JSON.
#[test]
fn aggregations_and_map_layouts() {
    let Some(case) = Case::new("aggregations") else {
        return;
    };
    let script = case.script(
        "aggregations.bt",
        r#"
BEGIN {
  @calls = count(); @calls = count(); @calls = count();
  @total = sum(40); @total = sum(-15);
  @mean = avg(9); @mean = avg(12); @mean_neg = avg(-9); @mean_neg = avg(-12);
  @low = min(8); @low = min(-6); @low = min(3);
  @high = max(-4); @high = max(17); @high = max(2);
  @spread = stats(30); @spread = stats(-75); @spread = stats(12);
  @by_word["red"] = count(); @by_word["blue"] = count(); @by_word["blue"] = count();
  @mean_by[10] = avg(70); @mean_by[20] = avg(5); @mean_by[30] = avg(33);
  @spread_by[-1] = stats(8); @spread_by[2] = stats(-2); @spread_by[3] = stats(5);
  @low_by[1] = min(4); @low_by[2] = min(-9);
  @high_by[1] = max(6); @high_by[-2] = max(11);
  @plain[5] = 50; @plain[-3] = 2; @plain[8] = -20; @plain[0] = 7; @plain[1000] = 2;
  @named["zeta"] = 4; @named["alpha"] = 4; @named["mid"] = -1;
  @pair[3, "c"] = 30; @pair[-3, "a"] = 10; @pair[1, "b"] = 20;
  @ = -77; @Upper = 1; @_under = 2;
  @word = "text"; @words["k2"] = "two"; @words["k1"] = "one";
  @tuple = (-1, "t", 5); @tuples[2] = (20, "b"); @tuples[1] = (10, "a");

  @h = hist(0); @h = hist(1); @h = hist(1); @h = hist(3); @h = hist(6); @h = hist(9);
  @h = hist(250); @h = hist(1000); @h = hist(1024); @h = hist(2000000); @h = hist(-7);
  @gap = hist(5); @gap = hist(5); @gap = hist(5000);
  $i = 0;
  while ($i < 60) { @bars = hist(40); $i++; }
  @bars = hist(1); @bars = hist(2); @bars = hist(2); @bars = hist(8);
  @hk["b"] = hist(2); @hk["b"] = hist(30); @hk["a"] = hist(7);
  @hk["c"] = hist(4); @hk["c"] = hist(4); @hk["c"] = hist(4);
  @l = lhist(-3, 0, 50, 5); @l = lhist(0, 0, 50, 5); @l = lhist(12, 0, 50, 5);
  @l = lhist(12, 0, 50, 5); @l = lhist(49, 0, 50, 5); @l = lhist(50, 0, 50, 5);
  @l = lhist(700, 0, 50, 5);
  @lk = lhist(1024, 0, 3072, 512); @lk = lhist(3, 0, 3072, 512); @lk = lhist(9999, 0, 3072, 512);
  @lm = lhist(2097152, 0, 4194304, 1048576);
  @luneven = lhist(4, 2, 17, 4); @luneven = lhist(16, 2, 17, 4);
  @lbelow = lhist(0, 10, 30, 10);
  @lkeys[2, "x"] = lhist(3, 0, 10, 1); @lkeys[1, "y"] = lhist(8, 0, 10, 1);
  @lkeys[1, "y"] = lhist(1, 0, 10, 1);
  exit();
}
"#,
    );
    case.same(&[&script]);
    assert_same_json(&case, &["-f", "json", &script]);
}

/// `print()` of maps (with top and div, also of histograms and
/// averages), of integers, strings and tuples; `clear`, `zero`, `delete`,
/// and what empty maps print; as text and as JSON.
#[test]
fn print_clear_zero_delete() {
    let Some(case) = Case::new("print") else {
        return;
    };
    let script = case.script(
        "print.bt",
        r#"
BEGIN {
  @v[1] = 100; @v[2] = 300; @v[3] = 200; @v[4] = 500; @v[5] = 400;
  @h[1] = hist(2); @h[2] = hist(2); @h[2] = hist(9); @h[3] = hist(64); @h[3] = hist(64);
  @h[3] = hist(64);
  @a[1] = avg(4000); @a[2] = avg(1999); @a[3] = avg(-3001);
  @one = 98765;
  printf("top 2:\n"); print(@v, 2);
  printf("top 0:\n"); print(@v, 0);
  printf("top 3, div 100:\n"); print(@v, 3, 100);
  printf("top 9:\n"); print(@v, 9);
  printf("hist top 1:\n"); print(@h, 1);
  printf("hist div 2:\n"); print(@h, 0, 2);
  printf("avg top 2, div 1000:\n"); print(@a, 2, 1000);
  printf("scalar div 100:\n"); print(@one, 0, 100);
  printf("values:\n");
  print(12); print(-12); print("word"); print((7, "x")); print((-1, (2, "y")));
  $n = 31; print($n); $s = "var"; print($s); print((int64)0xffffffffffffffff);
  print((int8)-3); print((uint16)-1); print((uint8)300); print(-(uint32)1); print(~(uint32)0);

  @c = count(); @c = count(); @s = sum(8); @hz = hist(5); @lz = lhist(5, 0, 10, 1);
  @st = stats(5); @av = avg(5); @mn = min(5); @mx = max(5); @kc[1] = count(); @kc[2] = count();
  @int = 9; @str = "abc";
  zero(@c); zero(@s); zero(@hz); zero(@lz); zero(@st); zero(@av); zero(@mn); zero(@mx);
  zero(@kc); zero(@int); zero(@str);
  printf("zeroed:\n");
  print(@c); print(@s); print(@hz); print(@lz); print(@st); print(@av); print(@mn); print(@mx);
  print(@kc); print(@int); print(@str);

  @cc = count(); @ch = hist(3); @cst = stats(1); @cv = 1; @cs = "gone";
  @d[1] = 5; @d[2] = 6; @d[3] = 7;
  clear(@cc); clear(@ch); clear(@cst); clear(@cv); clear(@cs);
  delete(@d[1]); delete(@d[3]); delete(@d[42]);
  printf("cleared:\n");
  print(@cc); print(@ch); print(@cst); print(@cv); print(@cs); print(@d);
  clear(@v); clear(@h);
  printf("end\n");
  exit();
}
"#,
    );
    case.same(&[&script]);
    assert_same_json(&case, &["-f", "json", &script]);
}

/// printf's conversions, flags, widths and precisions, escapes, casts,
/// the arithmetic bpftrace does (unsigned division and right shift, what
/// makes a result unsigned), comparisons, ternaries and strings.
#[test]
fn printf_arithmetic_and_casts() {
    let Some(case) = Case::new("printf") else {
        return;
    };
    let script = case.script(
        "printf.bt",
        r#"
BEGIN {
  printf("%d|%u|%x|%X|%o\n", 1000, 1000, 1000, 1000, 1000);
  printf("%d|%u|%x|%X|%o\n", -2, -2, -2, -2, -2);
  printf("%d|%u|%x|%ld|%lu|%lx\n", 0x200000007, 0x200000007, 0x200000007, 0x200000007, 0x200000007, 0x200000007);
  printf("%ld|%lu|%lld|%llu|%d\n", 0xffffffffffffffff, 0xffffffffffffffff, -9, -9, 0xffffffffffffffff);
  printf("[%-5d] [%5d] [%05d] [%-05d] [%.4d] [%7.2d] [%-5d] [%05d]\n", 73, 73, 73, 73, 73, 73, -7, -7);
  printf("[%hhd] [%hhu] [%hd] [%hu] [%hx] [%zd] [%jd] [%lX] [%llo]\n", 511, 511, 99999, 99999, 99999, 3, 4, 254, 9);
  printf("[%s] [%12s] [%-12s] [%.3s] [%.2s] [%6.3s]\n", "sdt", "right", "left", "cut", "shorten", "shorten");
  printf("[%c] [%c] [%c] [%c]\n", 72, 105, 256 + 33, -190);
  printf("[%p] [%p] [%p]\n", 0, 65536, -1);
  printf("100%% of %d\n", 7);
  printf("no newline;");
  printf(" continued\n");
  printf("[\t] [\"] [\\] [\x53\x44] [\124] [\0]\n");
  printf("%s|%s\n", "two\nlines", "a\ttab");
  printf("casts: %d %d %d %d %d %d\n", (uint8)511, (int8)200, (int16)40000, (uint16)-2, (uint32)-3, (int32)3000000000);
  printf("wrap: %ld %lu\n", 0x7fffffffffffffff + 2, 0xffffffffffffffff + 3);
  printf("div: %ld %ld %ld %ld %ld\n", 17 / 5, -17 / 5, 17 % 5, -17 % 5, -16 >> 2);
  $a = -20; $b = 6; $u8 = (uint8)4; $i8 = (int8)-4; $u32 = (uint32)9; $i32 = (int32)-9;
  printf("vars: %ld %ld %ld %ld %ld\n", $a / $b, $a % $b, $a >> 1, $a << 2, $a * $b);
  printf("mixed: %ld %ld %ld %ld\n", $u8 + $i8, $u32 * $i32, $i32 - $u8, $i8 * 3);
  print($u8 + $i8); print($u32 * $i32); print($i8 * 3); print((uint8)3 + (int8)-5);
  printf("cmp: %d %d %d %d %d %d %d\n", $i8 < 0, $u8 > -1, $i32 < $u32, $i32 < $a, $i8 < $i32, (uint32)1 > -1, -1 > 0);
  printf("logic: %d %d %d %d %d %d %d %d\n", 6 ^ 5, ~0, !0, !9, 3 && 0, 0 || 4, 1 << 6, 6 & 12);
  printf("ternary: %s %d %s\n", 1 ? "yes" : "no", 0 ? 10 : 20, $a < 0 ? "neg" : "pos");
  $x = "abc"; $y = "abc"; $z = "abd";
  printf("str: %d %d %d %d\n", $x == $y, $x != $z, $x == $z, $x == "abc");
  printf("strncmp: %d %d %d\n", strncmp($x, $z, 2), strncmp($x, $z, 3), strncmp("b", "a", 1));
  printf("tuple: %d %s\n", (5, "five").0, (5, "five").1);
  exit();
  printf("after exit\n");
}
"#,
    );
    case.same(&[&script]);
}

/// if/else, while with break and continue, unroll, variables and maps
/// updated in place, and positional parameters (`$1`, `$#`, `str($N)`,
/// hex and negative numbers, missing ones).
#[test]
fn control_flow_and_positional_parameters() {
    let Some(case) = Case::new("control") else {
        return;
    };
    let script = case.script(
        "control.bt",
        r#"
BEGIN {
  printf("%d [%s] [%s] [%s] [%s]\n", $#, str($1), str($2), str($3), str($6));
  printf("%d %d %d %d\n", $1 + 1, $3 * 2, $4, $6);
  $i = 10; $i++; $i++; $i--; printf("i=%d\n", $i);
  $j = 1; $k = $j++; printf("post %d %d\n", $j, $k);
  $j = 1; $k = ++$j; printf("pre %d %d\n", $j, $k);
  @n++; @n++; @n += 7; @n -= 2; printf("@n=%d\n", @n);
  @f = 12; @f *= 5; @f /= 4; @f %= 7; @f <<= 4; @f >>= 2; @f |= 3; @f &= 0x3f; @f ^= 5;
  printf("@f=%d\n", @f);
  @k[7]++; @k[7]++; @k[8]--;
  if (@n > 100) { printf("big\n"); } else if (@n > 5) { printf("medium\n"); } else { printf("small\n"); }
  if ($1 > 40) { printf("$1 > 40\n"); } else { printf("$1 <= 40\n"); }
  if (str($2) == "hello") { printf("hello given\n"); }
  if (0) { printf("never\n"); } else { printf("constant else\n"); }
  unroll(4) { @u++; }
  printf("unrolled %d\n", @u);
  $w = 0; while ($w < 4) { printf("w %d\n", $w); $w++; }
  $w = 0;
  while ($w < 20) {
    $w++;
    if ($w % 2 == 0) { continue; }
    if ($w > 7) { break; }
    printf("odd %d\n", $w);
  }
  $t = (3, "three", -3); print($t); printf("t.1=%s t.2=%d\n", $t.1, $t.2);
  printf("missing key %d\n", @k[99]);
  exit();
}
"#,
    );
    // `--` ends the options, so that `-5` is a parameter.
    case.same(&["--", &script, "42", "hello", "0x20", "-5"]);
}

/// usdt arguments of every width and sign (bpftrace types them uint64),
/// str() of an argument, uprobe arguments,
/// uretprobe `retval`, predicates, and aggregations of those values.
#[test]
fn probe_arguments_and_return_values() {
    let Some(case) = Case::new("probes") else {
        return;
    };
    let script = case.script(
        "probes.bt",
        r#"
usdt:./shop:shop:open { printf("open %s\n", probe); }
usdt:./shop:shop:tick { @ticks[probe] = count(); @tick_hist = hist(arg0); }
usdt:./shop:shop:sale {
  printf("sale %d %d %ld %s | %u %lu | %d %d\n", arg0, arg1, arg1, str(arg2), arg1, arg1, arg1 < 0, arg1 > 100);
  print(arg1);
  @raw = arg1;
  @by_value[(int64)arg1] = arg1;
  @kind[str(arg2)] = sum(arg1);
  @low = min(arg1); @avg = avg(arg1); @stats = stats(arg1); @sum = sum(arg1);
  @lin = lhist(arg1, 0, 200, 50); @log = hist(arg1);
}
usdt:./shop:shop:wide {
  printf("wide %lu %ld %d %x %u | %d %d\n", arg0, arg1, arg1, arg1, arg0, arg1 < 0, arg0 > 0);
  @wide[(int64)arg0] = arg1; @wide_low = min(arg0); @wide_avg = avg(arg1); @wide_hist = hist(arg1);
}
usdt:./shop:shop:narrow {
  printf("narrow %ld %ld %ld %ld | %d %d %d\n", arg0, arg1, arg2, arg3, arg0 < 0, arg1 > 128, (int8)arg0 < 0);
  @n8[(int8)arg0] = count(); @u8[(uint8)arg1] = max(arg1); @i16 = min((int16)arg2);
  @u16 = lhist((uint16)arg3, 59990, 60010, 5);
}
usdt:./shop:shop:order { printf("note %s\n", str(arg1)); }
usdt:./shop:shop:close { printf("close %d %lu %lu\n", arg0, -arg0, ~arg0); print(-arg0); @negated = -arg0; }
uprobe:./shop:refund { printf("refund(%d)\n", arg0); @cents = lhist(arg0, 0, 60, 10); }
uretprobe:./shop:refund { printf("refund -> %d %ld\n", retval, (int32)retval); @ret[(int32)retval] = count(); }
uprobe:./shop:kind_name /arg0 > 0/ { printf("kind_name(%d)\n", arg0); }
uretprobe:./shop:kind_name { printf("kind %s\n", str(retval)); @kinds[str(retval)] = count(); }
uprobe:./shop:scale { @scale_args[arg0, (int32)arg1] = count(); }
uretprobe:./shop:scale { printf("scale -> %ld\n", retval); @scaled = sum(retval); }
END { printf("end\n"); }
"#,
    );
    case.same(&["-c", "./shop 5", &script]);
}

/// C struct definitions in the script: `->` through pointers (also
/// pointers in structs), arrays of structs, nested and anonymous members,
/// unions, bitfields, char and unsigned char arrays, and structs and
/// arrays printed whole (as values, map values and map keys), as text
/// and as JSON.
#[test]
fn structs_defined_in_the_script() {
    let Some(case) = Case::new("structs") else {
        return;
    };
    let script = case.script(
        "structs.bt",
        r#"
struct item { int id; short qty; char name[12]; long price; };
struct order {
  unsigned int number; int count; struct item items[3]; char tag[8];
  char *label; struct order *prev;
};
struct order_head { unsigned int number; int count; struct item items[3]; char tag[8]; };
struct view {
  unsigned char head[4];
  short counts[2];
  void *ptr;
  struct { int a; int b; } inner;
  union { int whole; char text[4]; } either;
  unsigned int low:3;
  unsigned int high:5;
};
usdt:./shop:shop:order {
  $o = (struct order *)arg0;
  printf("order %u count %d tag %s\n", $o->number, $o->count, $o->tag);
  printf("first %d %d %s %ld\n", $o->items[0].id, $o->items[0].qty, $o->items[0].name, $o->items[0].price);
  printf("last %d %d %s %ld\n", $o->items[2].id, $o->items[2].qty, $o->items[2].name, $o->items[2].price);
  printf("deref %d %d %d\n", *(int32 *)(arg0 + 4), (*$o).count, ((struct item *)(arg0 + 8))->id);
  @qty[$o->number, 0] = $o->items[0].qty;
  @qty[$o->number, 2] = $o->items[2].qty;
  @tags[$o->tag] = count();
  @price = sum($o->items[1].price);
  @names[$o->items[1].name, $o->items[1].qty] = $o->items[1].price;
  printf("label %s\n", str($o->label));
  if ($o->prev != 0) {
    printf("prev %u %s %d %s\n", $o->prev->number, $o->prev->tag, $o->prev->items[1].id, str($o->prev->label));
  }
  @labels[str($o->label)] = count();
  print($o->items);
}
usdt:./shop:shop:order /((struct order *)arg0)->number == 1001/ {
  $o = (struct order *)arg0;
  print($o->items[1]);
  print(*(struct order_head *)arg0);
  print($o->tag);
  @item = $o->items[2];
  $v = (struct view *)arg0;
  print(*$v);
  print($v->head);
  print($v->counts);
  print($v->inner);
  @view = *$v;
  @heads[$v->head] = 1;
}
"#,
    );
    case.same(&["-c", "./shop 3", &script]);
    assert_same_json(&case, &["-f", "json", "-c", "./shop 3", &script]);
}

/// Symbols while the traced process lives: `usym`, `ustack` and `func`
/// in printf and print(). (At exit bpftrace prints addresses instead,
/// which `sdt_fixes_what_bpftrace_gets_wrong` covers.)
#[test]
fn symbols_of_a_live_process() {
    let Some(case) = Case::new("symbols") else {
        return;
    };
    let script = case.script(
        "symbols.bt",
        r#"
uprobe:./shop:refund {
  printf("%s %s|\n", usym(reg("ip")), func);
  print(usym(reg("ip")));
  print(ustack(1));
  printf("%s|\n", ustack(1));
}
uprobe:./shop:kind_name { printf("%s %s\n", func, probe); }
"#,
    );
    // The program sleeps 150 ms after each round, so that it still runs
    // when bpftrace looks each symbol up, also on a loaded machine.
    case.same(&["-c", "./shop 3 150", &script]);
}

/// `print(@map)` while tracing (its entries at that moment, with top and
/// div), then `clear`, `zero` and `delete` from a probe, and `exit()` in
/// a probe. The program sleeps between rounds, so that each print sees
/// one state of the maps.
#[test]
fn print_while_tracing() {
    let Some(case) = Case::new("print-live") else {
        return;
    };
    let script = case.script(
        "live.bt",
        r#"
usdt:./shop:shop:sale {
  @by_kind[str(arg2)] = count();
  @delta[arg0, str(arg2)] = arg1;
  @h = hist(arg1);
  @st = stats(arg1);
  @phase[arg0 > 2 ? 1 : 0] = sum(arg0 + 1);
  if (arg0 == 3) {
    // bpftrace prints a map when its record is read, after whatever the
    // probe did next; sdt prints it as it is where print() stands (see
    // tests/run.rs). A delete() before the prints shows the same in both.
    delete(@delta[0, "apple"]);
    print(@by_kind); print(@phase, 1); print(@delta, 2, 10); print(@delta, 0, 7);
    print(@h, 1, 2); print(@st);
    clear(@h);
  }
}
usdt:./shop:shop:close {
  printf("close %d\n", arg0);
  zero(@phase); print(@phase); print(@h);
  exit();
}
"#,
    );
    case.same(&["-c", "./shop 6 25", &script]);
}

/// `-f json`: printf, print() of values and maps, every kind of map at
/// exit. sdt leaves out bpftrace's two stray blank lines (a deliberate
/// fix), so they are dropped from bpftrace's output; everything else,
/// entry order included, must match.
#[test]
fn json_output() {
    let Some(case) = Case::new("json") else {
        return;
    };
    let script = case.script(
        "json.bt",
        r#"
BEGIN {
  printf("quote \" backslash \\ tab \t %d\n", 3);
  printf("no newline");
  printf("ctl \x01 \x1f\n");
  print(4); print("s"); print((1, "a", (-2, "b"))); print(-9); print((uint8)-1);
  @int = 5; @neg = -6; @str = "q\"uote";
  @counts[1] = count(); @counts[2] = count(); @counts[2] = count();
  @by_str["a"] = 1; @by_str["b\"c"] = 2;
  @pair[1, "x"] = 3;
  @h = hist(1); @h = hist(6); @h = hist(-3); @h = hist(0); @h = hist(1000);
  @hk["x"] = hist(3); @hk["y"] = hist(40); @hk["y"] = hist(41);
  @l = lhist(5, 0, 20, 10); @l = lhist(-1, 0, 20, 10); @l = lhist(25, 0, 20, 10);
  @st = stats(4); @st = stats(8); @stk[1] = stats(3);
  @av = avg(10); @avk[7] = avg(3);
  @mn = min(3); @mx = max(3); @c = count();
  @t = (1, "two"); @tk[1] = (2, "x");
  @gone[1] = 1; delete(@gone[1]); @cleared = hist(1); clear(@cleared);
  print(@counts); print(@h); print(@st); print(@counts, 1); print(@av);
  exit();
}
usdt:./shop:shop:tick { @never = count(); }
"#,
    );
    assert_same_json(&case, &["-f", "json", &script]);
    assert_same_json(&case, &["-q", "-f", "json", &script]);
}

/// Runs `args` (with `-f json`) with both tools: the same lines but
/// bpftrace's blank ones, the same exit status, and every line of sdt's
/// output a JSON document.
fn assert_same_json(case: &Case, args: &[&str]) {
    let bt = case.bpftrace(args);
    let sdt = case.sdt(args);
    let bt_out = text(&bt.stdout);
    let want: Vec<String> = bt_out
        .lines()
        .filter(|l| !l.is_empty())
        .filter_map(json_as_in_0_26)
        .map(|l| normalise_json(&l))
        .collect();
    let sdt_out = text(&sdt.stdout);
    let got: Vec<String> = sdt_out.lines().map(normalise_json).collect();
    let (want, got) = (want.join("\n"), got.join("\n"));
    assert!(want == got, "bpftrace {args:?}\n{}", diff(&want, &got));
    assert_eq!(
        bt.status.code(),
        sdt.status.code(),
        "bpftrace {args:?}: exit status"
    );
    for line in sdt_out.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }
}

/// `-q` hides `Attaching...`; `-o FILE` sends everything to the file but
/// the two blank lines before the maps, which bpftrace writes to standard
/// output; also with `-f json`.
#[test]
fn quiet_and_output_file() {
    let Some(case) = Case::new("output") else {
        return;
    };
    let script = case.script(
        "output.bt",
        r#"
BEGIN { printf("begin\n"); @b = 2; }
usdt:./shop:shop:tick /arg0 < 10/ { @ticks = count(); printf("tick %d\n", arg0); }
END { printf("end\n"); }
"#,
    );
    case.same(&["-q", "-c", "./shop 3", &script]);
    for format in ["text", "json"] {
        let file = format!("out.{format}");
        let args = ["-f", format, "-o", &file, "-c", "./shop 3", &script];
        let bt = case.bpftrace(&args);
        let bt_file = std::fs::read_to_string(case.path(&file)).unwrap();
        let sdt = case.sdt(&args);
        let sdt_file = std::fs::read_to_string(case.path(&file)).unwrap();
        assert_eq!(bt.status.code(), sdt.status.code());
        let bt_file = if format == "text" {
            without_blank_lines(&as_in_0_26(&bt_file))
        } else {
            let lines: Vec<String> = bt_file.lines().filter_map(json_as_in_0_26).collect();
            lines.iter().map(|l| format!("{l}\n")).collect()
        };
        let sdt_file = if format == "text" {
            without_blank_lines(&sdt_file)
        } else {
            sdt_file
        };
        assert_eq!(bt_file, sdt_file, "-f {format} -o FILE: the file");
        if format == "text" {
            assert_same(&args, &bt, &sdt);
            assert_eq!(text(&sdt.stdout), "\n\n", "the blank lines go to stdout");
        } else {
            // In JSON mode sdt writes no stray blank lines (a deliberate fix).
            assert_eq!(text(&bt.stdout), "\n\n");
            assert_eq!(text(&sdt.stdout), "");
        }
    }
}

/// `exit()` in BEGIN (END still runs, then the maps), in a probe (nothing
/// after it runs), END's place in the output, interval probes, and
/// tracepoints (which sdt reads without tracefs).
#[test]
fn exit_end_interval_and_tracepoints() {
    let Some(case) = Case::new("exit") else {
        return;
    };
    let begin = case.script(
        "begin.bt",
        r#"
BEGIN { printf("begin\n"); @in_begin = 1; exit(); printf("not printed\n"); }
END { printf("end sees %d\n", @in_begin); @in_end = 2; }
"#,
    );
    case.same(&[&begin]);
    let probe = case.script(
        "probe.bt",
        r#"
BEGIN { printf("begin\n"); }
usdt:./shop:shop:tick /arg0 < 100/ { printf("tick %d %s\n", arg0, probe); @ticks++; }
usdt:./shop:shop:close { printf("close %d\n", arg0); exit(); printf("not printed\n"); @never = 1; }
tracepoint:syscalls:sys_enter_exit_group /pid == cpid/ { printf("not reached: exit() came first\n"); }
END { printf("end after %d ticks\n", @ticks); }
"#,
    );
    case.same(&["-c", "./shop 4", &probe]);
    let interval = case.script(
        "interval.bt",
        r#"
BEGIN { @start = 1; }
interval:ms:40 { @i++; if (@i == 3) { exit(); } printf("interval %d %s\n", @i, probe); }
END { printf("end %d\n", @i); }
"#,
    );
    case.same(&[&interval]);
    let tracepoint = case.script(
        "tracepoint.bt",
        r#"
tracepoint:syscalls:sys_enter_exit_group /pid == cpid/ { printf("%s status %d\n", probe, args->error_code); }
tracepoint:sched:sched_process_exit /pid == cpid/ { printf("exit of %s\n", args->comm); @exits[args->comm] = count(); }
tracepoint:sched:sched_process_exec /pid == cpid/ { printf("exec %s\n", str(args->filename)); }
tracepoint:syscalls:sys_enter_openat /pid == cpid/ {
  printf("open %s %d %d\n", str(args->filename), args->flags, args->dfd);
  @opened[str(args->filename)] = count();
}
tracepoint:syscalls:sys_exit_openat /pid == cpid/ { @fds = hist(args->ret); }
"#,
    );
    case.same(&["-c", "./shop 2", &tracepoint]);
}

/// The same program through `sdt run` (which prints `Attaching...` on
/// standard error instead) and `sdt bpftrace ARGS`.
#[test]
fn sdt_run_and_sdt_bpftrace_commands() {
    let Some(case) = Case::new("forms") else {
        return;
    };
    let script = case.script(
        "forms.bt",
        r#"
usdt:./shop:shop:sale { @sales[str(arg2)] = sum(arg0 + 1); printf("%s\n", str(arg2)); }
END { printf("%d kinds\n", 4); }
"#,
    );
    let args = ["-c", "./shop 4", script.as_str()];
    let bt = case.bpftrace(&args);
    let via_subcommand = case.sdt_subcommand("bpftrace", &args);
    assert_same(&args, &bt, &via_subcommand);
    let run = case.sdt_subcommand("run", &args);
    let bt_stdout = text(&bt.stdout);
    let (attaching, rest) = bt_stdout.split_once('\n').unwrap();
    assert_eq!(normalise(&text(&run.stdout)), normalise(rest));
    assert!(
        text(&run.stderr).contains(attaching),
        "sdt run says `{attaching}` on stderr: {}",
        text(&run.stderr)
    );
}

/// bpftrace's command line as getopt reads it: options after the program
/// file, `--` before parameters; `-l` over a glob of files, uretprobes,
/// and a file's USDT probes; the usage on a bad option; the first line
/// of an error in a script; and `-c`'s exit status, which is not the
/// command's.
#[test]
fn command_line_as_bpftrace_reads_it() {
    let Some(case) = Case::new("command-line") else {
        return;
    };
    std::fs::copy(case.path("shop"), case.path("shop2")).unwrap();
    let script = case.script(
        "after.bt",
        "usdt:./shop:shop:tick { printf(\"tick %d %d\\n\", arg0, $1); @ticks = count(); }\n",
    );
    case.same(&[&script, "-c", "./shop 3", "5", "-q"]);
    case.same(&[
        "-e",
        "usdt:./shop:shop:close { exit(); }",
        "-c",
        "./shop 2 0 7",
    ]);
    for pattern in [
        "uretprobe:./shop:ref*",
        "uprobe:./sho*:refund",
        "uprobe:./shop*:kind_*",
        "usdt:./sho*:shop:t*",
        "usdt:./shop:*",
    ] {
        let out = case.same(&["-l", pattern]);
        assert!(!out.stdout.is_empty(), "-l {pattern} lists something");
    }
    let bt = case.bpftrace(&["-idonotexist"]);
    let sdt = case.sdt(&["-idonotexist"]);
    assert_eq!(bt.status.code(), sdt.status.code(), "a bad option");
    for out in [&bt, &sdt] {
        assert!(text(&out.stderr).contains("USAGE"), "{}", text(&out.stderr));
    }
    // The place bpftrace gives an error, on the first line of each.
    let first_line = |out: &Output| {
        text(&out.stderr)
            .lines()
            .find(|l| l.starts_with("stdin:"))
            .and_then(|l| l.split(" ERROR: ").next().map(str::to_string))
    };
    for program in [
        "BEGIN { @x = nosuch; }",
        "BEGIN { printf(\"%d\\n\", $nope); }",
        "BEGIN { @x = 1 + \"a\"; }",
    ] {
        let bt = case.bpftrace(&["-e", program]);
        let sdt = case.sdt(&["-e", program]);
        assert_eq!(bt.status.code(), sdt.status.code(), "{program}");
        assert_eq!(first_line(&bt), first_line(&sdt), "{program}");
        assert!(first_line(&sdt).is_some(), "{}", text(&sdt.stderr));
    }
}

// ---------------------------------------- sdt only: where bpftrace is wrong

/// What bpftrace 0.17 gets wrong and sdt does right, checked on sdt
/// alone: names of symbols after the process has exited, histogram
/// buckets past 4G, `max()` of negative values, `func` in a uretprobe,
/// text after the last printf conversion, `-c`'s exit status, and JSON
/// without stray blank lines. Also division by zero, which is undefined
/// in bpftrace 0.17 (it prints garbage) and 1 with a located warning in
/// bpftrace 0.25 and later, as in sdt.
#[test]
fn sdt_fixes_what_bpftrace_gets_wrong() {
    let Some(case) = Case::new("fixes") else {
        return;
    };
    let script = case.script(
        "fixes.bt",
        r#"
BEGIN {
  @big = hist(1 << 40); @big = hist(3 << 31); @big = hist(5 << 31);
  @neg_max = max(-8); @neg_max = max(-3); @neg_max = max(-5);
  printf("%d%% done, 100%%\n", 5);
  printf("only 100%%\n");
  $x = 17; $zero = 0;
  printf("x/0=%d x%%0=%d %d %d %d\n", $x / 0, $x % 0, $x / $zero, $x % $zero, 17 / 0);
}
uprobe:./shop:refund { @sym[usym(reg("ip"))] = count(); @stack[ustack(1)] = count(); }
uretprobe:./shop:refund { @ret_func[func] = count(); }
usdt:./shop:shop:sale { @sale_max[arg0] = max(arg1); }
"#,
    );
    // The program lives 4 x 30 ms; it has exited when the maps print.
    // `sdt run` passes on the command's exit status; as `bpftrace`, sdt
    // exits 0 as bpftrace does (`command_line_as_bpftrace_reads_it`).
    let out = case.sdt_subcommand("run", &["-c", "./shop 4 30 7", &script]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "-c passes on the exit status");
    let bucket = |label: &str| format!("\n{label:<16}{:>8} |{}|\n", 1, "@".repeat(52));
    let expect = [
        "5% done, 100%\n".to_string(),
        "only 100%\n".to_string(),
        "x/0=1 x%0=1 1 1 1\n".to_string(),
        format!("@big:{}", bucket("[4G, 8G)")),
        bucket("[8G, 16G)"),
        bucket("[1T, 2T)"),
        "@neg_max: -3\n".to_string(),
        "@ret_func[refund]: 4\n".to_string(),
        "@sale_max[0]: -50\n@sale_max[1]: -13\n@sale_max[2]: 24\n@sale_max[3]: 61\n".to_string(),
        "@stack[\n    refund+0\n]: 4\n".to_string(),
        "@sym[refund]: 4\n".to_string(),
    ];
    for want in &expect {
        assert!(stdout.contains(want), "expected {want:?} in:\n{stdout}");
    }
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("fixes.bt:8:")
                && l.ends_with("WARNING: Divide or modulo by 0 detected. This can lead to unexpected results. 1 is being used as the result."))
            .count(),
        5,
        "{stderr}"
    );
    let json = case.sdt(&[
        "-f",
        "json",
        "-e",
        "BEGIN { @x = 1; printf(\"a\\n\"); exit(); }",
    ]);
    assert_eq!(
        text(&json.stdout),
        "{\"type\": \"attached_probes\", \"count\": 1, \"data\": {\"probes\": 1}}\n\
         {\"type\": \"printf\", \"data\": \"a\\n\"}\n\
         {\"type\": \"map\", \"data\": {\"@x\": 1}}\n"
    );
}

/// The definitions of `tests/fixtures/values/shapes.c`, as a script
/// writes them (the last member of `point` without its `;`, which
/// bpftrace accepts too).
const SHAPE_DEFINITIONS: &str = "
struct point { int32_t x; int32_t y };
struct shape {
  int32_t id;
  int32_t grid[2][3];
  struct point corners[3];
  struct { int16_t lo; int16_t hi; } range;
  union { uint32_t word; uint8_t bytes[4]; } raw;
  char name[8];
  uint8_t mac[6];
  uint64_t big;
};
";

/// Builds `tests/fixtures/values/shapes.c` into the case's directory.
fn build_shapes(case: &Case) {
    C::new("tests/fixtures/values/shapes.c")
        .flags(&["-O2", "-g"])
        .dir(&case.dir)
        .build();
}

/// Values larger than a register that the program holds: a struct read
/// whole into a variable, its members, nested arrays and anonymous
/// members, printed whole, as map values and keys, `%r`, `%rx` and
/// `%rh` of a `buf()`, and strings behind an array of pointers.
#[test]
fn values_held_by_the_program() {
    let Some(case) = Case::new("values") else {
        return;
    };
    build_shapes(&case);
    let script = case.script(
        "values.bt",
        &format!(
            "{SHAPE_DEFINITIONS}{}",
            r#"
usdt:./shapes:shapes:drawn {
  $s = *(struct shape *)arg0;
  printf("%d %d %d %d %d %s\n", $s.id, $s.grid[1][2], $s.corners[2].y, $s.range.lo, $s.range.hi, $s.name);
  printf("%u %d %lu\n", $s.raw.word, $s.raw.bytes[3], $s.big);
  print($s.grid);
  print($s.corners);
  print($s.range);
  printf("%r|%rx|%rh\n", buf($s.mac, 6), buf($s.mac, 6), buf($s.mac, 4));
  $q = (struct point *)(arg0 + 28);
  printf("%d %d\n", $q->x, $q->y);
  @grid[$s.id] = $s.grid;
  @names[$s.name, $s.range.hi] = count();
  printf("%s %s\n", str(*(uint64 *)(arg2 + 8)), str(*(uint64 *)(arg2 + 16)));
  print($s);
}
"#
        ),
    );
    let out = case.same(&["-c", "./shapes", &script]);
    // The values themselves, not only agreement with bpftrace.
    let stdout = text(&out.stdout);
    for want in [
        "7 6 31 -2 300 square\n",
        "67305985 4 18446744073709551615\n",
        "[{ .x = 10, .y = 11 },{ .x = 20, .y = 21 },{ .x = 30, .y = 31 }]\n",
        "\\xde\\xad\\xbe\\xef\\x00\\x01|\\xde\\xad\\xbe\\xef\\x00\\x01|de ad be ef\n",
        "beta gamma\n",
        ".raw = { .word = 67305985, .bytes = [1,2,3,4] }, .name = square, .mac = [222,173,190,239,0,1]",
        "@grid[7]: [[1,2,3],[4,5,6]]\n",
        "@names[square, 300]: 1\n",
    ] {
        assert!(stdout.contains(want), "expected {want:?} in:\n{stdout}");
    }
}

/// What sdt does with such values and bpftrace 0.17 refuses or gets
/// wrong, checked on sdt alone: `==` on integer arrays and buffers,
/// indexes known only at run time, `++` on a pointer moving by the size
/// of its pointee, a tuple variable widened by a later assignment, `?:`
/// on strings of different sizes, and `__attribute__` after a
/// definition's closing brace.
/// The length `str()` takes counts the NUL, as in bpftrace 0.23 and later
/// (0.17 keeps as many bytes as it is given, so this is not compared):
/// `str(p, 3)` keeps 2 bytes, whether the length is a literal or known
/// only at run time; 0 is an empty string; a length past the text keeps
/// the text; `str(p, len + 1)` reads exactly `len` bytes of text that has
/// no NUL there.
#[test]
fn str_lengths_count_the_nul_as_bpftrace_0_23_and_later() {
    let Some(case) = Case::new("str-lengths") else {
        return;
    };
    let script = case.script(
        "lengths.bt",
        r#"
struct order_number { unsigned int number; }
usdt:./shop:shop:sale /arg0 == 2/ {
  $three = 3; $none = 0;
  printf("[%s] [%s] [%s] [%s] [%s]\n", str(arg2, 3), str(arg2, $three), str(arg2, 0), str(arg2, $none), str(arg2, 99));
  @short[str(arg2, 3)] = count();
}
usdt:./shop:shop:order /((struct order_number *)arg0)->number == 1000/ {
  $len = 5;
  printf("note [%s] [%s] [%s]\n", str(arg1, 8), str(arg1, $len + 1), str(str(arg1), 6));
}
"#,
    );
    let out = case.sdt(&["-c", "./shop 4", &script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = without_blank_lines(&text(&out.stdout));
    assert_eq!(
        stdout.lines().skip(1).collect::<Vec<_>>(),
        [
            "note [note:56] [note:] [note:]",
            "[pl] [pl] [] [] [plum]",
            "@short[pl]: 1",
        ],
        "{stdout}"
    );
}

#[test]
fn values_beyond_what_bpftrace_0_17_takes() {
    let Some(case) = Case::new("values-sdt") else {
        return;
    };
    build_shapes(&case);
    let definitions = SHAPE_DEFINITIONS.replacen(
        "int32_t y };",
        "int32_t y } /* as declared */ __attribute__((aligned(4)));",
        1,
    );
    let script = case.script(
        "values.bt",
        &format!(
            "{definitions}{}",
            r#"
usdt:./shapes:shapes:drawn {
  $s = *(struct shape *)arg0;
  $t = *(struct shape *)arg1;
  printf("grid %d %d corners %d\n", $s.grid == $t.grid, $s.grid != $t.grid, buf($s.corners, 24) == buf($t.corners, 24));
  $i = 2;
  printf("index %d %d %d\n", $s.corners[$i].y, $t.corners[$i].y, $s.grid[$i - 1][$i]);
  $p = (int32 *)arg0; $p++;
  $q = (struct point *)(arg0 + 28); $q++; ++$q;
  printf("step %d %d %d\n", *$p, $q->x, $q->y);
  $pair = ("hi", $s.id); print($pair); $pair = ("a longer string", 2); print($pair);
  $name = $s.id > 5 ? $s.name : "a longer name";
  printf("name %s\n", $name);
  // An array's bytes as an integer, and an integer's as an array.
  printf("raw %d %d %d\n", (uint32)$s.raw.bytes == $s.raw.word,
         (uint32)((struct shape *)arg0)->raw.bytes == $s.raw.word,
         ((uint8[4])$s.raw.word)[1] == $s.raw.bytes[1]);
}
uprobe:./shapes:compare { printf("compare %d\n", buf(arg0, 74) == buf(arg1, 74)); }
"#
        ),
    );
    let out = case.sdt_subcommand("run", &["-c", "./shapes", &script]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines,
        [
            "grid 1 0 corners 0",
            "index 31 99 6",
            "step 1 30 31",
            "(hi, 7)",
            "(a longer string, 2)",
            "name square",
            "raw 1 1 1",
            "compare 1",
            "compare 0",
        ]
    );
}

// ------------------------------------------------------------ bad scripts

/// Every class of error in a script: a diagnostic that names the file,
/// line and column, a non-zero exit status, nothing on standard output,
/// and no panic.
#[test]
fn bad_scripts_get_located_diagnostics() {
    let Some(case) = Case::new("errors") else {
        return;
    };
    let cases: &[(&str, &str, &str, &str)] = &[
        // (what, script, location, words of the message)
        (
            "syntax error",
            "BEGIN {\n  printf(\"x\\n\")\n  exit();\n}\n",
            ":3:3",
            "expected `;`",
        ),
        (
            "syntax error",
            "BEGIN { @x = ; }\n",
            ":1:14",
            "expected an expression",
        ),
        (
            "unknown usdt probe",
            "usdt:./shop:shop:nosuch { exit(); }\n",
            ":1:1",
            "No matches for usdt ./shop:shop:nosuch.",
        ),
        (
            "unknown function to probe",
            "BEGIN { }\nuprobe:./shop:nosuchfn { exit(); }\n",
            ":2:1",
            "No matches for uprobe ./shop:nosuchfn.",
        ),
        (
            "unknown probe type",
            "bogus:thing { }\n",
            ":1:1",
            "unknown probe type",
        ),
        (
            "missing file",
            "usdt:./nosuchfile:a:b { }\n",
            ":1:1",
            "nosuchfile",
        ),
        (
            "unknown function",
            "BEGIN { nosuch(1); }\n",
            ":1:9",
            "unknown function",
        ),
        (
            "unknown builtin",
            "BEGIN { @x = nosuchbuiltin; }\n",
            ":1:14",
            "nosuchbuiltin",
        ),
        (
            "unknown map",
            "BEGIN { print(@nosuchmap); }\n",
            ":1:15",
            "@nosuchmap",
        ),
        (
            "unknown variable",
            "BEGIN { printf(\"%d\\n\", $nope); }\n",
            ":1:24",
            "$nope",
        ),
        (
            "unknown struct",
            "usdt:./shop:shop:order { printf(\"%d\\n\", ((struct nosuch *)arg0)->x); }\n",
            ":1:42",
            "struct nosuch",
        ),
        (
            "unknown struct member",
            "struct item { int id; };\n\
             usdt:./shop:shop:order { printf(\"%d\\n\", ((struct item *)arg0)->nosuch); }\n",
            ":2:",
            "nosuch",
        ),
        (
            "type error",
            "BEGIN { @a = \"abc\" + 1; }\n",
            ":1:14",
            "strings",
        ),
        (
            "map type mismatch",
            "BEGIN { @x = 1; }\nEND { @x = \"s\"; }\n",
            ":2:12",
            "@x",
        ),
        (
            "printf arguments",
            "BEGIN { printf(\"%d %d\\n\", 1); }\n",
            ":1:",
            "printf",
        ),
        (
            "argN beyond the probe's arguments",
            "usdt:./shop:shop:tick { printf(\"%d\\n\", arg1); }\n",
            ":1:40",
            "arg1",
        ),
        (
            "argN of a probe without arguments",
            "usdt:./shop:shop:open { @x = arg0; }\n",
            ":1:30",
            "arg0",
        ),
        (
            "verifier rejection",
            "BEGIN {\n  $i = 0;\n  while (1) { $i++; }\n}\n",
            ":3:",
            "verifier",
        ),
    ];
    for (n, (what, script, location, words)) in cases.iter().enumerate() {
        let file = case.script(&format!("bad{n}.bt"), script);
        let out = case.sdt(&["-c", "./shop 1", &file]);
        let stderr = text(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(c) if c != 0),
            "{what}: exit status {:?}\n{stderr}",
            out.status
        );
        assert_eq!(text(&out.stdout), "", "{what}: nothing on stdout");
        assert!(
            stderr.contains(&format!("{file}{location}")),
            "{what}: expected the location {file}{location} in:\n{stderr}"
        );
        assert!(
            stderr.contains(words),
            "{what}: expected `{words}` in:\n{stderr}"
        );
    }
}
