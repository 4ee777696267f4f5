//! What `sdt run` prints where bpftrace 0.26 prints differently from 0.17,
//! run for real and compared byte for byte with what 0.26's output code
//! writes: pointers in hex, `stats()` as a record, histogram headers
//! without a trailing space, no line for a map without entries, integer
//! literals above `INT64_MAX` and keys printed unsigned, and the JSON
//! records (structs as objects, enumerators and pointers as numbers,
//! `syscall`, `count` in `attached_probes`).
//!
//! The scripts need BPF, so these tests need root: with `CI=true` a
//! missing privilege fails them; elsewhere they print a loud SKIP.

mod list_common;

use list_common::{assert_no_panic, sdt};

/// Runs `sdt ARGS`; returns its standard output after checking it
/// succeeded, or `None` without the privileges.
fn stdout_of(args: &[&str]) -> Option<String> {
    if !sdt_testing::require_root() {
        return None;
    }
    let out = sdt().args(args).output().expect("run sdt");
    assert_no_panic(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sdt {args:?} failed: {:?}\n{stderr}",
        out.status
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn pointers_print_in_hex() {
    let Some(out) = stdout_of(&[
        "run",
        "-e",
        "struct S { int n; char *name; } BEGIN { @p = (int32 *)0x32; @p -= 6; \
         @k[(uint8 *)0x10] = 1; print((int8 *)0x7f00); \
         printf(\"%d %x\\n\", (int8 *)0x20, (int16 *)0x20); exit(); }",
    ]) else {
        return;
    };
    // Arithmetic scales by the pointee (4 bytes): 0x32 - 24 = 0x1a.
    assert_eq!(out, "0x7f00\n32 20\n\n\n@k[0x10]: 1\n@p: 0x1a\n");
}

#[test]
fn aggregations_print_as_bpftrace_0_26() {
    let Some(out) = stdout_of(&[
        "run",
        "-e",
        "BEGIN { @s = stats(1); @s = stats(2); @s = stats(3); @n[1] = stats(-10); \
         @n[1] = stats(-5); @n[1] = stats(5); @a = avg(4); @h = hist(2); @h = hist(20); \
         @l[7] = lhist(3, 0, 10, 5); exit(); }",
    ]) else {
        return;
    };
    let bar = "@".repeat(52);
    let empty = " ".repeat(52);
    let bucket = |label: &str, n: u32, bar: &str| format!("{label:<16}{n:>8} |{bar}|\n");
    let want = format!(
        "\n\n@a: 4\n@h:\n{}{}{}{}\n@l[7]:\n{}\n\
         @n[1]: {{ .count = 3, .average = -3, .total = -10 }}\n\
         @s: {{ .count = 3, .average = 2, .total = 6 }}\n",
        bucket("[2, 4)", 1, &bar),
        bucket("[4, 8)", 0, &empty),
        bucket("[8, 16)", 0, &empty),
        bucket("[16, 32)", 1, &bar),
        bucket("[0, 5)", 1, &bar),
    );
    assert_eq!(out, want);
}

#[test]
fn maps_without_entries_print_nothing() {
    let Some(out) = stdout_of(&[
        "run",
        "-e",
        "BEGIN { @c = count(); @k[1] = count(); @h = hist(3); @s[1] = stats(2); @v = 5; \
         @d = count(); @kept = 1; clear(@c); clear(@k); clear(@h); clear(@s); delete(@v); \
         delete(@d); print(@c); printf(\"between\\n\"); exit(); }",
    ]) else {
        return;
    };
    assert_eq!(out, "between\n\n\n@kept: 1\n");
}

#[test]
fn unsigned_literals_and_keys_print_unsigned() {
    let Some(out) = stdout_of(&[
        "run",
        "-e",
        "BEGIN { $a = 10223372036854775807; print($a); print(0xffffffffffffffff); \
         print(-1); @x = ~10; @m[18446744073709551615] = 0; @n[-1] = 1; exit(); }",
    ]) else {
        return;
    };
    assert_eq!(
        out,
        "10223372036854775807\n18446744073709551615\n-1\n\n\n\
         @m[18446744073709551615]: 0\n@n[-1]: 1\n@x: 18446744073709551605\n"
    );
}

#[test]
fn json_records_as_bpftrace_0_26() {
    let Some(out) = stdout_of(&[
        "bpftrace",
        "--unsafe",
        "-f",
        "json",
        "-e",
        "struct Foo { int m; int n; } enum { FOO = 333 }; \
         BEGIN { system(\"echo a b\"); $f = FOO; print($f); print((int8 *)0x10); \
         @t = (0, (struct Foo *)0); print(18446744073709551615); @k[\"a b\", 2] = 1; \
         @s = stats(4); @h = hist(1); @h = hist(4); exit(); }",
    ]) else {
        return;
    };
    let want = [
        r#"{"type": "attached_probes", "count": 1, "data": {"probes": 1}}"#,
        r#"{"type": "syscall", "data": "a b\n"}"#,
        r#"{"type": "value", "data": 333}"#,
        r#"{"type": "value", "data": 16}"#,
        // A double cannot hold it exactly: a string.
        r#"{"type": "value", "data": "18446744073709551615"}"#,
        r#"{"type": "hist", "data": {"@h": [{"min": 1, "max": 1, "count": 1},{"min": 2, "max": 3, "count": 0},{"min": 4, "max": 7, "count": 1}]}}"#,
        // Keys lose their spaces.
        r#"{"type": "map", "data": {"@k": {"ab,2": 1}}}"#,
        r#"{"type": "stats", "data": {"@s": {"count": 1, "average": 4, "total": 4}}}"#,
        r#"{"type": "map", "data": {"@t": [0,0]}}"#,
    ];
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got, want);
}
