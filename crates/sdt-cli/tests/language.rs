//! The language bpftrace 0.22 to 0.26 added, run for real: each script's
//! output is what bpftrace's documentation of that release says it
//! prints (booleans, `for` loops over ranges and maps, `let` and block
//! scoping, block expressions, macros, reading aggregations in a probe,
//! `has_key`, `len`, `delete` as a value, map declarations, durations).
//!
//! The scripts need BPF, so these tests need root: with `CI=true` a
//! missing privilege fails them; elsewhere they print a loud SKIP.

mod list_common;

use list_common::{assert_no_panic, sdt};

/// Runs `sdt run -e SCRIPT`; returns stdout and stderr after checking it
/// succeeded, or `None` without the privileges.
fn run(script: &str) -> Option<(String, String)> {
    if !sdt_testing::require_root() {
        return None;
    }
    let out = sdt().args(["run", "-e", script]).output().expect("run sdt");
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "sdt run -e {script:?} failed: {:?}\n{stderr}",
        out.status
    );
    Some((stdout, stderr))
}

/// The lines a script printed, without the blank lines and map dumps of
/// its end.
fn lines(script: &str) -> Option<Vec<String>> {
    let (stdout, _) = run(script)?;
    Some(
        stdout
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// Checks that `script` fails with a message containing `wanted`.
fn fails_with(script: &str, wanted: &str) {
    let out = sdt().args(["run", "-e", script]).output().expect("run sdt");
    assert_no_panic(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{script:?} was accepted");
    assert!(stderr.contains(wanted), "{script:?}: {stderr}");
}

#[test]
fn booleans_print_as_words_and_count_as_numbers() {
    let Some(out) = lines(
        r#"BEGIN {
            $t = 1 < 2;
            print($t);
            print(!$t);
            printf("%d %s %d\n", $t, $t, (bool)7);
            print((true, false, strcontains("haystack", "st"), strcontains("abc", "x")));
            print((bool)"" == false && (bool)"x");
            @m[2 > 1] = 1;
            @m[false] = 2;
            for ($kv : @m) { printf("%s=%d\n", $kv.0, $kv.1); }
            print($t + 1);
            exit();
        }
        END { clear(@m); }"#,
    ) else {
        return;
    };
    let mut sorted_pairs: Vec<String> = out[5..7].to_vec();
    sorted_pairs.sort();
    assert_eq!(
        out[..5],
        [
            "true",
            "false",
            "1 true 1",
            "(true, false, true, false)",
            "true"
        ]
    );
    assert_eq!(sorted_pairs, ["false=2", "true=1"]);
    assert_eq!(out[7], "2");
}

#[test]
fn for_loops_walk_ranges_once_and_stop_on_break_return_and_exit() {
    let Some(out) = lines(
        r#"BEGIN {
            $a = 5;
            for ($i : 0..$a) { printf("i%d\n", $i); $a--; }
            for ($i : 3..1) { printf("never\n"); }
            $sum = 0;
            for ($i : -2..100000) {
                if ($i == 0) { continue; }
                if ($i > 2) { break; }
                $sum += $i;
            }
            printf("sum %d\n", $sum);
            for ($i : 0..3) {
                for ($j : 0..3) {
                    if ($j > $i) { break; }
                    printf("%d%d ", $i, $j);
                }
            }
            printf("\n");
            for ($i : 0..10) { if ($i == 2) { exit(); } printf("e%d\n", $i); }
            printf("not after exit\n");
        }"#,
    ) else {
        return;
    };
    assert_eq!(
        out,
        [
            "i0",
            "i1",
            "i2",
            "i3",
            "i4",
            "sum 0",
            "00 10 11 20 21 22 ",
            "e0",
            "e1"
        ]
    );
}

#[test]
fn for_loops_over_maps_see_keys_values_and_merged_aggregations() {
    let Some(out) = lines(
        r#"BEGIN {
            @single[10] = 20;
            @multi[1, "a"] = 5;
            @calls["x"] = count(); @calls["x"] = count(); @calls["y"] = count();
            @lo = min(7); @lo = min(-3);
            @mean = avg(10); @mean = avg(21);
            for ($kv : @single) { printf("single %d %d\n", $kv.0, $kv.1); }
            for ($kv : @multi) { printf("multi %d %s %d\n", $kv.0.0, $kv.0.1, $kv.1); }
            $total = 0;
            for ($kv : @calls) { $total += $kv.1; }
            printf("total %d\n", $total);
            if (@calls["x"] > 1 && @calls["z"] == 0) { printf("read %d %d %d\n", (uint64)@calls["x"], @lo, @mean); }
            @gone[1] = 1; @gone[2] = 2; @gone[3] = 3;
            for ($kv : @gone) { if ($kv.0 != 2) { delete(@gone, $kv.0); } }
            printf("left %d\n", len(@gone));
            exit();
        }
        END { clear(@single); clear(@multi); clear(@calls); clear(@gone); clear(@lo); clear(@mean); }"#,
    ) else {
        return;
    };
    assert_eq!(
        out,
        [
            "single 10 20",
            "multi 1 a 5",
            "total 3",
            "read 2 -3 15",
            "left 1"
        ]
    );
}

#[test]
fn variables_belong_to_their_block_and_blocks_give_values() {
    let Some(out) = lines(
        r#"BEGIN {
            let $unset;
            print($unset);
            let $narrow: uint8 = 200;
            $narrow += 100;
            print($narrow);
            $v = { let $w = 20; $w + 1 };
            print($v);
            $w = 1;
            print(if ($v > 20) { "big" } else { "small" });
            print({ if $v > 20 { if $v > 30 { 3 } else { 2 } } else if $v > 10 { 1 } else { 0 } });
            if $w == 1 { let $inner = 5; $w = $inner; }
            print($w);
            @seen[1] = 1;
            _ = has_key(@seen, 1);
            exit();
        }
        END { clear(@seen); }"#,
    ) else {
        return;
    };
    assert_eq!(out, ["0", "44", "21", "big", "2", "5"]);
    fails_with(
        "BEGIN { if (1) { let $b = 2; } print($b); }",
        "$b is not seen here",
    );
    fails_with("BEGIN { let $a = 1; let $a = 2; }", "already declared");
}

/// `&$var` (bpftrace 0.24 and later): a variable's address in the
/// program's own memory, read back through it as any kernel pointer, and
/// a pointer type written with `typeof(TYPE *)`.
#[test]
fn variables_have_addresses_that_read_back() {
    let Some(out) = lines(
        r#"struct bits { unsigned long long low:1; unsigned long long next:1; unsigned long long two:2; }
        BEGIN {
            $n = 41;
            $p = &$n;
            printf("%d %s\n", *$p + 1, $p != 0 ? "non-zero" : "zero");
            print(($p, *$p));
            $t = (1, "hello", 2);
            print(*(&$t));
            $s = "hi!";
            $c = (int8 *)&$s;
            printf("%c %c %c\n", *$c, *($c + 1), *($c + 2));
            $word = (uint64)0x1e;
            print(*(struct bits *)&$word);
            let $size: typeof(size_t) = 9;
            let $at: typeof(size_t *) = &$size;
            print(*$at);
            exit();
        }"#,
    ) else {
        return;
    };
    assert_eq!(out[0], "42 non-zero");
    let (address, value) = out[1]
        .trim_matches(['(', ')'])
        .split_once(", ")
        .expect("a pair");
    assert!(address.starts_with("0x") && address.len() > 10, "{address}");
    assert_eq!(value, "41");
    assert_eq!(
        out[2..],
        [
            "(1, hello, 2)",
            "h i !",
            "{ .low = 0, .next = 1, .two = 3 }",
            "9"
        ]
    );
}

/// A script written for bpftrace before 0.22 assigns a variable inside a
/// block and reads it after: it runs as then, one variable for the whole
/// probe (0 where no assignment ran), with one warning for each variable.
#[test]
fn variables_read_after_their_block_run_as_before_bpftrace_0_22() {
    let Some((stdout, stderr)) = run(r#"BEGIN {
            $n = 7;
            if ($n > 5) { $size = "big"; $half = $n / 2; } else { $size = "small"; $half = 0; }
            printf("%s %d\n", $size, $half);
            if ($n > 100) { $huge = 1; }
            printf("%d %s %d\n", $huge, $size, $half + $huge);
            $i = 0;
            while ($i < 3) { $last = $i * 10; $i++; }
            print($last);
            exit();
        }"#)
    else {
        return;
    };
    let out: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(out, ["big 3", "0 big 3", "20"]);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    let names: Vec<&str> = warnings
        .iter()
        .map(|w| w.split(' ').nth(1).unwrap_or_default())
        .collect();
    assert_eq!(names, ["$size", "$half", "$huge", "$last"], "{stderr}");
    assert!(
        warnings
            .iter()
            .all(|w| w.contains("bpftrace 0.22 and later")),
        "{stderr}"
    );
}

#[test]
fn macros_bind_variables_maps_and_expressions() {
    let Some(out) = lines(
        r#"
        macro one() { 1 }
        macro add_one(x) { x + 1 }
        macro add_two(x) { add_one(x) + 1 }
        macro add_one_to_each($a, @b) { $a += 1; @b += 1; }
        macro side_effects(x) { x; x; x; }
        macro shadow(x) { $y = x * 10; $y }
        BEGIN {
            print(one());
            print(one);
            $a = 10;
            print(add_one($a));
            print(add_one(1 + 1));
            @b = 5;
            add_one_to_each($a, @b);
            print($a + @b);
            side_effects({ printf("hi") });
            printf("\n");
            print(add_two(1));
            $y = 2;
            print((shadow(3), $y));
            exit();
        }
        END { clear(@b); }"#,
    ) else {
        return;
    };
    assert_eq!(out, ["1", "1", "11", "3", "17", "hihihi", "3", "(30, 2)"]);
    fails_with("macro m() { @x = 1; } BEGIN { m(); }", "not passed to it");
}

/// A macro of the script takes the place of a builtin of the same name
/// and number of arguments (bpftrace 0.26), also as `printf`'s format; one
/// of another number leaves the builtin in place. `typeof(EXPR)` (0.25)
/// types a variable after a macro's argument, and the macro's own
/// variable stays its own.
#[test]
fn macros_override_builtins_and_take_types_of_arguments() {
    let Some(out) = lines(
        r#"
        macro cpu() { "hi %d\n" }
        macro strlen(a, b) { a + b }
        macro add(x) { let $y: typeof(x); if (true) { $y = 1 } x + $y }
        BEGIN {
            printf(cpu(), 5);
            print((strlen("four"), strlen(2, 3)));
            $y = 40;
            print((add(1), add((uint8)250), $y));
            $s = "abc";
            print((sizeof(typeof($s)), sizeof(typeof((1, (int8)2)))));
            exit();
        }"#,
    ) else {
        return;
    };
    assert_eq!(out, ["hi 5", "(4, 5)", "(2, 251, 40)", "(4, 16)"]);
}

#[test]
fn map_functions_and_declared_maps() {
    let script = r#"
        let @lru = lruhash(2);
        let @small = hash(1);
        let @per = percpulruhash(1);
        let @unused = hash(4);
        BEGIN {
            @c[0] = count(); @s[0] = sum(3); @s[0] = sum(9);
            if (@s[0] == 12) { printf("%d %d\n", (int64)@c[0], (int64)@s[0]); }
            @m[1] = 1; @m[2] = 2;
            printf("%d %s %s\n", len(@m), has_key(@m, 2), has_key(@m, 3));
            $first = delete(@m, 1);
            $again = delete(@m[1]);
            printf("%s %s %d\n", $first, $again, len(@m));
            @lru[0] = 0; @lru[1] = 1; @lru[2] = 2;
            @small[1] = 1; @small[2] = 2;
            @per[1] = count(); @per[2] = count();
            printf("%d %d %d\n", len(@lru), len(@small), len(@per));
            printf("%lld %d\n", 1m, 100ms);
            exit();
        }
        END { clear(@c); clear(@s); clear(@m); clear(@lru); clear(@small); clear(@per); }"#;
    let Some((stdout, stderr)) = run(script) else {
        return;
    };
    let out: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        out,
        [
            "1 12",
            "2 true false",
            "true false 1",
            "2 1 1",
            "60000000000 100000000"
        ]
    );
    assert!(stderr.contains("warning: Unused map: @unused"), "{stderr}");
    assert!(
        stderr.contains("updates of @small were dropped"),
        "{stderr}"
    );
    // Where it happens, once (per CPU), in bpftrace's words.
    let full: Vec<&str> = stderr.lines().filter(|l| l.contains("Map full")).collect();
    assert_eq!(full.len(), 1, "{stderr}");
    assert!(
        full[0].ends_with(": WARNING: Map full; can't update element. Try increasing max_map_keys config or manually setting the max entries in a map declaration e.g. `let @a = hash(5000)`"),
        "{stderr}"
    );
    let at = full[0].split(": WARNING").next().unwrap();
    let (line, columns) = at.strip_prefix("stdin:").unwrap().split_once(':').unwrap();
    let (start, end) = columns.split_once('-').unwrap();
    let (start, end): (usize, usize) = (start.parse().unwrap(), end.parse().unwrap());
    let source_line = script
        .lines()
        .nth(line.parse::<usize>().unwrap() - 1)
        .unwrap();
    assert_eq!(
        &source_line[start - 1..end - 1],
        "@small[2] = 2",
        "{full:?}"
    );
    fails_with(
        "let @a = hash(8); BEGIN { @a = count(); }",
        "declare it percpuhash",
    );
}

#[test]
fn builtins_of_the_standard_library() {
    if !sdt_testing::require_root() {
        return;
    }
    let out = sdt()
        .args([
            "run",
            "-e",
            r#"BEGIN {
            printf("%d %d %s %d %d\n", ncpus > 0, jiffies > 0, probetype, usermode, has_cpid);
            printf("%d %d %d\n", pid() == pid, __builtin_tid == tid(curr_ns), pid(init) == pid);
            printf("%d\n", comm() == comm); printf("%d %d %d %d %d\n", is_err((int64)-1), is_err((int64)-4095), is_err((int64)-4096), is_err(0), is_err((int8 *)-22));
            errorf("bad %d, %s", 10, "two");
            warnf("careful");
            @map[2] = (1, "hello");
            let $val;
            if (find(@map, 2, $val)) { print($val); }
            if (!find(@map, 3, $val)) { print("no 3"); }
            assert(1 == 1, "holds");
            assert(1 == 2, "broken: 100%");
            print("after a failed assert");
        }
        END { clear(@map); }"#,
        ])
        .output()
        .expect("run sdt");
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines,
        [
            "1 1 special 1 0",
            "1 1 1",
            "1",
            "1 1 0 0 1",
            "(1, hello)",
            "no 3"
        ],
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "a failed assert exits 1");
    for wanted in [
        "stdin:5:13-44: ERROR: bad 10, two",
        "stdin:6:13-29: WARNING: careful",
        "stdin:12:13-43: ERROR: broken: 100%",
    ] {
        assert!(stderr.contains(wanted), "{wanted:?} in {stderr}");
    }
}

#[test]
fn pid_and_tid_are_seen_from_sdts_pid_namespace() {
    if !sdt_testing::require_root()
        || !sdt_testing::require(sdt_testing::have("unshare"), "unshare")
    {
        return;
    }
    let out = std::process::Command::new("unshare")
        .args(["--fork", "--pid", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_sdt"))
        .args([
            "run",
            "-e",
            r#"BEGIN { printf("%d %d %d %d %d\n", pid, pid(curr_ns), tid, pid(init) > 1, tid(init) == pid(init)); exit(); }"#,
        ])
        .output()
        .expect("run unshare");
    assert_no_panic(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().next(),
        Some("1 1 1 1 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn string_functions_search_measure_and_name() {
    let Some(lines) = lines(
        r#"BEGIN {
            $s = "hello world";
            printf("%d %d %d %d\n", strstr($s, "world"), strstr($s, "xyz"), strstr("abcabc", "cab"), strstr($s, "h"));
            printf("%d %d %d %d\n", strlen($s), strlen(""), strlen(str($1)), strlen(comm));
            // Both strings end at their first NUL, as C strings.
            $nul = "hello\0world";
            print((strcontains($nul, "world"), strcontains($s, "wo\0rld"), strcontains($nul, "wo\0rld"), strstr($nul, "lo"), strstr($nul, "wor")));
            print(signal_name(2));
            print(signal_name(0));
            print(signal_name(36));
            print(signal_name(1024));
            @by_signal[signal_name(15)] = count();
        }"#,
    ) else {
        return;
    };
    assert_eq!(
        lines,
        [
            "6 -1 2 0",
            "11 0 0 3",
            "(false, true, false, 3, -1)",
            "Interrupt",
            "Unknown signal 0",
            "Real-time signal 2",
            "N/A",
            "@by_signal[Terminated]: 1",
        ]
    );
}

/// bpftrace 0.26's `str_concat()`, with its own test's path built in
/// steps, nested, as a map key, and longer than `strlen`'s default.
#[test]
fn str_concat_joins_strings_as_bpftrace_does() {
    let Some(lines) = lines(
        r#"BEGIN {
            $filename = "system.journal";
            $path = str_concat("var", "/");
            $path = str_concat("/", $path);
            $path = str_concat($path, "log/");
            $path = str_concat($path, $filename);
            print($path);
            printf("%s|%d|%s\n", str_concat($path, ""), strlen(str_concat("", "abc")),
                str_concat(str_concat("a", "b"), "c"));
            @by[str_concat("a", "b")] = count();
            @long = strlen(str_concat(str_concat(
                "0123456789012345678901234567890123456789012345678901234567890123456789", "x"), "y"));
            exit();
        }"#,
    ) else {
        return;
    };
    assert_eq!(
        lines,
        [
            "/var/log/system.journal",
            "/var/log/system.journal|3|abc",
            "@by[ab]: 1",
            "@long: 72",
        ]
    );
    fails_with(
        r#"BEGIN { print(str_concat("pid ", pid)); }"#,
        "str_concat() joins two strings, and this is uint32",
    );
}

#[test]
fn a_script_of_only_begin_and_end_ends_by_itself() {
    let Some(lines) = lines(r#"BEGIN { printf("begin\n"); } END { printf("end\n"); }"#) else {
        return;
    };
    assert_eq!(lines, ["begin", "end"]);
}

#[test]
fn pointers_step_by_their_pointee_and_sizeof_takes_expressions() {
    let Some(lines) = lines(
        r#"struct Foo { int x; long y; }
        BEGIN {
            $q = (int32 *)8; $q++; printf("%d ", (uint64)$q); $q -= 2; printf("%d ", (uint64)$q);
            $f = (struct Foo *)0; ++$f; printf("%d\n", (uint64)$f);
            $x = 1; $s = "abc";
            printf("%d %d %d %d\n", sizeof($x), sizeof($s), sizeof(*$f), sizeof(struct Foo));
            printf("%d\n", nsecs(sw_tai) > nsecs(monotonic));
        }"#,
    ) else {
        return;
    };
    assert_eq!(lines, ["12 4 16", "8 4 16 16", "1"]);
}

#[test]
fn an_import_is_refused_where_it_stands_never_ignored() {
    fails_with(
        "import \"helpers.bt\";\nBEGIN { printf(\"x\\n\"); }",
        "stdin:1:1",
    );
    fails_with(
        "import \"helpers.bt\";\nBEGIN { printf(\"x\\n\"); }",
        "sdt does not import files",
    );
}

#[test]
fn records_are_named_tuples_read_by_name_and_printed_as_structs() {
    let Some(lines) = lines(
        r#"begin {
            $v = 99;
            $t = (a=0, b=1, c="str", d=(5, 6), e=$v);
            printf("%d %d %s %d %d %d\n", $t.a, $t.b, $t.c, $t.d.0, $t.d.1, $t.e);
            $w = (x=1, y=2);
            print((a=0, c="str", d=(5, 6), e=$w));
            @r[1] = (m=3, n="hi");
        }"#,
    ) else {
        return;
    };
    assert_eq!(
        lines,
        [
            "0 1 str 5 6 99",
            "{ .a = 0, .c = str, .d = (5, 6), .e = { .x = 1, .y = 2 } }",
            "@r[1]: { .m = 3, .n = hi }",
        ]
    );
    fails_with("BEGIN { $r = (a=1, a=2); }", "names `a` twice");
}

/// A variable keeps the field order of the first record it holds: a
/// record of the same names in another order is laid out in it, its
/// values evaluated in the order written (bpftrace 0.25).
#[test]
fn records_of_another_order_keep_the_variables_and_run_as_written() {
    let Some(lines) = lines(
        r#"begin {
            $a = (foo={ printf("1"); 1 }, bar={ printf("2"); 2 });
            $a = (bar={ printf("3"); 3 }, foo={ printf("4\n"); 4 });
            print($a);
            printf("%d %d\n", $a.foo, $a.bar);
        }"#,
    ) else {
        return;
    };
    assert_eq!(lines, ["1234", "{ .foo = 4, .bar = 3 }", "4 3"]);
}

/// Several keys are one tuple (bpftrace 0.22 and later): a key that is a
/// tuple, written out or in a variable, is the same as its items, and a
/// map of them prints its keys without the tuple's parentheses; a tuple
/// inside the keys keeps them.
#[test]
fn a_tuple_key_is_the_same_as_several_keys() {
    let Some(lines) = lines(
        r#"BEGIN {
            @m[(1, "one")] = 1;
            @m[2, "two"] = 2;
            $t = (3, "three");
            @m[$t] = 3;
            @m[(1, "one")] += 10;
            print(has_key(@m, (2, "two")));
            delete(@m, $t);
            @n[(7, (8, "x"))] = (9, 10);
            @k[0, 0] = 1; @k[0, 1] = 2; @k[1, 1] = 3;
            for ($kv : @k) { if ($kv.0.1 == 1) { delete(@k, $kv.0); } }
            exit();
        }"#,
    ) else {
        return;
    };
    assert_eq!(
        lines,
        [
            "true",
            "@k[0, 0]: 1",
            "@m[2, two]: 2",
            "@m[1, one]: 11",
            "@n[7, (8, x)]: (9, 10)",
        ]
    );
}

/// Casts between integers and arrays (bpftrace 0.19 and later), of a
/// string to its bytes (0.24.2) and to booleans (0.24): an integer's bytes
/// lowest first; `[]` takes the length from the value; an array's bytes
/// read back as one integer. Arrays print as lists, `int8` ones too.
#[test]
fn casts_between_integers_strings_and_arrays() {
    let Some(lines) = lines(
        r#"BEGIN {
            printf("%x %x\n", ((int8[8])12345)[0], ((int8[])12345)[1]);
            print((int8[])"hello");
            print((bool[2])(uint16)1);
            $x = (uint8[4])0x01020304;
            print($x);
            printf("%x %d\n", (uint32)$x, sizeof((int16[])12345));
            @bytes = (uint8[2])(uint16)0xabcd;
            exit();
        }"#,
    ) else {
        return;
    };
    assert_eq!(
        lines,
        [
            "39 30",
            "[104,101,108,108,111,0]",
            "[true,false]",
            "[4,3,2,1]",
            "1020304 8",
            "@bytes: [205,171]",
        ]
    );
    fails_with(
        "BEGIN { $a = (int16[])\"abc\"; }",
        "cannot cast string[4] to int16[2]",
    );
    fails_with(
        "BEGIN { $a = (int32[])(int8)1; }",
        "Cannot determine array size",
    );
    fails_with(
        "BEGIN { $a = (uint8[16])1; }",
        "cannot cast int64 to uint8[16]",
    );
}

/// `tseries()` (bpftrace 0.24): within one interval (an hour here, so
/// that the test cannot straddle two), the last value, or the sum,
/// average, least or greatest of the values; printed as bpftrace draws
/// it, and in JSON by the interval's start, which is where the wall
/// clock's hour starts.
#[test]
fn time_series_keep_a_value_per_interval() {
    let script = r#"BEGIN {
            @l = tseries(3, 1h, 2); @l = tseries(7, 1h, 2);
            @s["x"] = tseries(3, 1h, 2, "sum"); @s["x"] = tseries(7, 1h, 2, "sum");
            @avg = tseries(3, 1h, 2, "avg"); @avg = tseries(8, 1h, 2, "avg");
            @mn = tseries(3, 1h, 2, "min"); @mn = tseries(-7, 1h, 2, "min");
            @mx = tseries(3, 1h, 2, "max"); @mx = tseries(7, 1h, 2, "max");
            exit();
        }"#;
    let Some((stdout, _)) = run(script) else {
        return;
    };
    let values: Vec<(&str, &str)> = stdout
        .lines()
        .filter(|l| l.starts_with('@') || l.contains(" | ") || l.ends_with('|'))
        .filter_map(|l| l.rsplit_once(" | "))
        .collect();
    let last: Vec<&str> = values.iter().map(|(_, v)| *v).collect();
    assert_eq!(last, ["5", "7", "-7", "7", "10"], "{stdout}");
    // `@l`, drawn: 7 alone, so the scale runs from 6 to 8.
    let l = stdout.split("@l:\n").nth(1).unwrap();
    let lines: Vec<&str> = l.lines().take(6).collect();
    assert_eq!(lines[0], format!("{:19}{:<21}{:>32}", "", 6, 8));
    assert_eq!(lines[1], format!("hh:mm:ss.ns        |{}|", "_".repeat(51)));
    assert!(lines[2].ends_with(&format!(" |{}*{}| 7", " ".repeat(25), " ".repeat(25))));
    assert!(
        lines[2].starts_with(|c: char| c.is_ascii_digit())
            && lines[2][..18].ends_with(":00:00.000000000")
    );
    assert_eq!(lines[3], format!("{:18} v{}v", "", "_".repeat(51)));
    assert_eq!(lines[4], lines[0]);

    let out = sdt()
        .args(["run", "-q", "-f", "json", "-e", script])
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&out.stdout);
    let line = json
        .lines()
        .find(|l| l.contains("\"@s\""))
        .unwrap_or_else(|| panic!("{json}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["type"], "tseries");
    let point = &v["data"]["@s"]["x"][0];
    assert_eq!(point["value"], 10);
    let start = point["interval_start"].as_str().unwrap();
    let hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        * 3600;
    let (date, time) = start.split_once(' ').unwrap();
    // (The hour may have turned since the run.)
    let hours = [hour, hour - 3600].map(|h| format!("{:02}:00:00.000000000", h / 3600 % 24));
    assert!(hours.contains(&time.to_string()), "{start}");
    assert_eq!(date.len(), 10, "{start}");
    fails_with(
        "BEGIN { @a = tseries(1, 1s, 2); @a = tseries(1, 2s, 2); }",
        "Different tseries bounds in a single map unsupported",
    );
    fails_with(
        "BEGIN { @a = tseries(1, 1s, 2, \"mean\"); }",
        "tseries() expects one of the following aggregation functions: avg, max, min, sum (\"mean\" provided)",
    );
}
