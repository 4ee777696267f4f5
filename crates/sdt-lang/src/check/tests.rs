use super::*;
use crate::hir::Output;
use crate::types::Agg;

/// Checks `src` with positional parameters `params`; the rendered
/// errors, if any. Also used by the other checker tests.
pub(super) fn run(src: &str, params: &[&str]) -> Result<Program, String> {
    let script = crate::parser::parse(src).map_err(|d| d.message)?;
    let params: Vec<String> = params.iter().map(|s| s.to_string()).collect();
    let attach = offline_attach(&script, &params).map_err(|d| d.message)?;
    let options = CheckOptions {
        params,
        ..CheckOptions::default()
    };
    check(&script, &attach, &options, &mut NoObjects).map_err(|d| d.to_text("test.bt", src))
}

pub(super) fn ok(src: &str) -> Program {
    run(src, &[]).unwrap_or_else(|e| panic!("{src}\n{e}"))
}

pub(super) fn err(src: &str) -> String {
    match run(src, &[]) {
        Ok(_) => panic!("{src} was accepted"),
        Err(e) => e,
    }
}

fn map<'p>(p: &'p Program, name: &str) -> &'p MapDecl {
    p.maps.iter().find(|m| m.name == name).unwrap()
}

#[test]
fn map_types_come_from_every_probe() {
    let p = ok("END { print(@names); printf(\"%d\\n\", @n); }\n\
                usdt:/bin/x:p:a { @names[comm, pid] = str(arg0); @n = 1; }\n\
                usdt:/bin/x:p:b { @names[\"longer than sixteen bytes\", 1] = comm; }");
    let names = map(&p, "names");
    // `pid` (unsigned) and `1` (signed) unify to a signed key.
    assert_eq!(names.keys, [Ty::Str { size: 26 }, crate::types::INT64]);
    assert_eq!(names.value, Ty::Str { size: 64 });
    assert_eq!(map(&p, "n").value, crate::types::INT64);
}

#[test]
fn aggregations() {
    let p = ok(
        "usdt:/bin/x:p:a { @c[probe] = count(); @s = sum(arg0); @h = hist(arg1); \
                @l[comm] = lhist(arg2, 0, 100, 10); @st = stats(arg0); @mn = min(arg0); }",
    );
    assert_eq!(map(&p, "c").value, Ty::Agg(crate::types::Agg::Count));
    assert!(map(&p, "h").is_histogram());
    assert!(map(&p, "l").is_per_cpu());
    assert_eq!(map(&p, "l").keys.len(), 1);
    assert!(matches!(
        p.probes[0].body[3],
        TStmt::Aggregate {
            agg: crate::types::Agg::Lhist {
                min: 0,
                max: 100,
                step: 10
            },
            ..
        }
    ));
}

#[test]
fn printf_formats_are_checked() {
    let p = ok("BEGIN { printf(\"%s %d %-5x %c\\n\", comm, pid, 255, 65); }");
    // The printf's, and the zero-division and full-map warnings every
    // program has.
    assert_eq!(p.formats.len(), 3);
    assert_eq!(p.zero_division, 1);
    assert_eq!(p.map_full, 2);
    assert!(
        matches!(&p.probes[0].body[0], TStmt::Output(Output::Printf { args, .. }) if args.len() == 4)
    );
    assert!(err("BEGIN { printf(\"%d %d\\n\", 1); }").contains("2 conversions but 1 value"));
    assert!(err("BEGIN { printf(\"%d\\n\", comm); }").contains("wants an integer"));
    let e = err("BEGIN { printf(\"%y\\n\", 1); }");
    assert!(e.contains("`%y` is not a conversion"), "{e}");
    assert!(e.contains("test.bt:1:18"), "{e}");
}

#[test]
fn structs_from_the_script() {
    let p = ok("struct point { int x; int y; };\n\
                struct shape { char name[16]; struct point corners[4]; struct shape *next; unsigned flag : 1; };\n\
                usdt:/bin/x:p:a {\n\
                  $s = (struct shape *)arg0;\n\
                  printf(\"%s %d %d %d\\n\", $s->name, $s->corners[2].y, $s->next->corners[0].x, $s->flag);\n\
                  @by_name[$s->name] = count();\n\
                }");
    let by_name = map(&p, "by_name");
    assert_eq!(by_name.keys, [Ty::Str { size: 17 }]);
    let e = err("struct point { int x; };\nusdt:/bin/x:p:a { printf(\"%d\\n\", ((struct point *)arg0)->z); }");
    assert!(
        e.contains("struct point has no field `z`") || e.contains("point has no field `z`"),
        "{e}"
    );
    assert!(
        e.contains("its fields are x") || e.contains("did you mean"),
        "{e}"
    );
    let e = err("usdt:/bin/x:p:a { printf(\"%d\\n\", ((struct nope *)arg0)->z); }");
    assert!(e.contains("unknown type `struct nope`"), "{e}");
    // `.` reads through a pointer as `->` does (bpftrace 0.25).
    ok("struct p { int x; };\nusdt:/bin/x:p:a { $v = ((struct p *)arg0).x; }");
    let e = err("usdt:/bin/x:p:a { $v = ((uint64 *)arg0).x; }");
    assert!(e.contains("`.` needs a struct or a pointer to one"), "{e}");
}

#[test]
fn tracepoint_args() {
    let p = ok("tracepoint:syscalls:sys_enter_openat /pid == 1/ { printf(\"%s %d\\n\", str(args->filename), args.dfd); }");
    assert_eq!(p.probes[0].kind, ProbeKind::Tracepoint);
    let e = err("tracepoint:syscalls:sys_enter_openat { printf(\"%d\\n\", args->filenme); }");
    assert!(e.contains("did you mean `filename`?"), "{e}");
    assert!(err("tracepoint:syscalls:sys_enter_openat { @ = arg0; }").contains("args.NAME"));
    assert!(err("usdt:/bin/x:p:a { @ = args->x; }").contains("`args` is not available in usdt"));
}

#[test]
fn builtins_belong_to_their_probes() {
    ok("uretprobe:/bin/x:f { @[retval] = count(); }");
    assert!(err("uprobe:/bin/x:f { @[retval] = count(); }").contains("only available in uretprobe"));
    assert!(err("uprobe:/bin/x:f { @ = arg6; }").contains("sargN"));
    assert!(err("BEGIN { @ = comn; }").contains("did you mean `comm`?"));
    ok("BEGIN { @ = kstack; }");
    assert!(err("interval:s:1 { @ = usermode; }").contains("not known in interval"));
    ok("profile:hz:99 { @[kstack, ustack, usermode, reg(\"ip\")] = count(); }");
    assert!(err("profile:hz:99 { @ = func; }").contains("not available in profile"));
    assert!(err("software:faults:1 { @ = retval; }").contains("only available in uretprobe"));
    assert!(err("hardware:cycles { @ = arg0; }").contains("arg0"));
}

#[test]
fn kstack_in_a_probe_of_a_process_warns() {
    let p = ok("uprobe:/bin/x:f { @[kstack(perf, 5)] = count(); }");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.message.contains("always empty")),
        "{:?}",
        p.warnings
    );
    let p = ok("tracepoint:a:b { @[kstack(3)] = count(); @n = len(kstack); }");
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(
        p.maps[0].keys[0],
        Ty::Shown(crate::types::Shown::KStack {
            mode: crate::types::StackMode::Bpftrace,
            depth: 3
        })
    );
    assert!(err("tracepoint:a:b { @ = kstack(200); }").contains("between 1 and 127"));
    assert!(err("BEGIN { @ = ksym(\"x\"); }").contains("ksym() takes a kernel address"));
    // No kernel symbols are read without a kernel: an error at the call.
    assert!(err("BEGIN { @ = kaddr(\"schedule\"); }")
        .contains("Failed to resolve kernel symbol: schedule"));
}

#[test]
fn kptr_and_uptr_say_whose_memory() {
    let p = ok("uprobe:/bin/x:f { $k = kptr(arg0); $u = uptr((uint8 *)arg1); $c = (uint32 *)$k; }");
    let vars = &p.probes[0].vars;
    assert_eq!(vars[0], Ty::kernel_ptr(Ty::Void));
    assert_eq!(vars[1], Ty::ptr(Ty::int(1, false)));
    assert_eq!(vars[2], Ty::kernel_ptr(Ty::int(4, false)));
    // An integer cast in a probe of a process points into the process; in
    // a perf-event probe, into the kernel.
    let p =
        ok("uprobe:/bin/x:f { $p = (uint64 *)arg0; } profile:hz:9 { $q = (uint64 *)reg(\"sp\"); }");
    assert_eq!(p.probes[0].vars[0].space(), Some(crate::types::Space::User));
    assert_eq!(
        p.probes[1].vars[0].space(),
        Some(crate::types::Space::Kernel)
    );
}

#[test]
fn strings_compare_and_do_not_add() {
    let p = ok("usdt:/bin/x:p:a /comm == \"bash\"/ { if (str(arg0) != \"x\") { @ = 1; } }");
    assert!(matches!(
        p.probes[0].predicate.as_ref().unwrap().kind,
        TKind::StrEq { negate: false, .. }
    ));
    assert!(err("BEGIN { @ = comm + 1; }").contains("does not apply to strings"));
    assert!(err("BEGIN { if (comm) { } }").contains("compare strings"));
    assert!(err("BEGIN { @ = comm == 1; }").contains("cannot compare"));
}

#[test]
fn maps_must_agree_with_themselves() {
    let e = err("BEGIN { @x = 1; } END { @x = \"s\"; }");
    assert!(
        e.contains("@x holds string[2] here but int64 elsewhere"),
        "{e}"
    );
    assert!(e.contains("first assigned here"), "{e}");
    assert!(
        err("BEGIN { @x[1] = 1; @x[1, 2] = 1; }").contains("1 key here but with")
            || err("BEGIN { @x[1] = 1; @x[1, 2] = 1; }").contains("2 keys here")
    );
    assert!(err("BEGIN { print(@missing); }").contains("@missing is never assigned"));
    let e = err("BEGIN { @count = 1; print(@cont); }");
    assert!(e.contains("did you mean `@count`?"), "{e}");
    ok("BEGIN { @c = count(); @d = @c + 1; if (@c > 1) { @e = (uint64)@c; } }");
    assert!(err("BEGIN { @h = hist(1); @d = @h + 1; }").contains("no single value"));
    assert!(err("BEGIN { $x = count(); }").contains("must be assigned to a map"));
    assert!(err("BEGIN { count(); }").contains("must be assigned to a map"));
}

#[test]
fn variables_are_per_probe_and_ordered() {
    ok("BEGIN { $x = 1; $x += 2; $x++; @ = $x; } END { $x = \"s\"; print($x); }");
    assert!(err("BEGIN { @ = $y; }").contains("$y is used before it is assigned"));
    assert!(err("BEGIN { $x = 1; $x = \"s\"; }").contains("$x holds int64"));
}

#[test]
fn positional_parameters() {
    let p = run(
        "BEGIN { printf(\"%s %d %d\\n\", str($1), $2, $#); @[$3] = 1; }",
        &["hello", "42"],
    )
    .unwrap();
    let TStmt::Output(Output::Printf { args, .. }) = &p.probes[0].body[0] else {
        panic!()
    };
    assert!(matches!(args[0].kind, TKind::Str(ref s) if s == b"hello"));
    assert!(matches!(args[1].kind, TKind::Int(42)));
    assert!(matches!(args[2].kind, TKind::Int(2)));
    assert_eq!(map(&p, "").keys, [crate::types::INT64]);
    // A number's text, not a read at its address.
    let p = run("BEGIN { printf(\"%s|%s\\n\", str($1), str($2)); }", &["42"]).unwrap();
    let TStmt::Output(Output::Printf { args, .. }) = &p.probes[0].body[0] else {
        panic!()
    };
    assert!(matches!(args[0].kind, TKind::Str(ref s) if s == b"42"));
    assert!(matches!(args[1].kind, TKind::Str(ref s) if s.is_empty()));
}

#[test]
fn constants_fold_and_casts_truncate() {
    // As in bpftrace, `/`, `%` and `>>` are unsigned on 64 bits; a literal
    // above i64::MAX is an int64; an unsigned side makes a sum unsigned.
    // Dividing by zero is left to run time, which warns and gives 1.
    let p = ok(
        "BEGIN { @a = (uint8)300; @b = (int8)255; @c = 1 << 4 | 1; @d = -5 / 2; \
                @e = -7 % 3; @f = -8 >> 1; @g = 0xffffffffffffffff; @h = (uint32)1 > -1; }",
    );
    let values: Vec<i64> = p.probes[0]
        .body
        .iter()
        .map(|s| match s {
            TStmt::AssignMap {
                value:
                    TExpr {
                        kind: TKind::Int(v),
                        ..
                    },
                ..
            } => *v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        values,
        [
            44,
            -1,
            17,
            (-5i64 as u64 / 2) as i64,
            0,
            (-8i64 as u64 >> 1) as i64,
            -1,
            0,
        ]
    );
    let division = ok("BEGIN { @i = 9 / 0; }");
    assert!(matches!(
        &division.probes[0].body[0],
        TStmt::AssignMap {
            value: TExpr {
                kind: TKind::Binary { op: BinOp::Div, .. },
                ..
            },
            ..
        }
    ));
    assert!(
        !map(&p, "g").value.is_signed(),
        "0xffffffffffffffff is a uint64 (bpftrace 0.22 and later)"
    );
}

#[test]
fn enums_and_defines() {
    let p = ok("#define LIMIT 10\nenum state { IDLE, BUSY = 4 };\nBEGIN { @x = BUSY + LIMIT; $s = (enum state)1; @s = $s; }");
    assert!(matches!(
        p.probes[0].body[0],
        TStmt::AssignMap {
            value: TExpr {
                kind: TKind::Int(14),
                ..
            },
            ..
        }
    ));
    assert!(matches!(map(&p, "s").value, Ty::Enum { .. }));
}

#[test]
fn variables_belong_to_their_block() {
    ok("BEGIN { $a = 1; if ($a) { $b = 2; $a = $b; } let $c; if ($a) { $c = 3; } print($c); }");
    // A name given to a block on purpose stays there.
    let e = err("BEGIN { if (1) { let $b = 2; } print($b); }");
    assert!(e.contains("$b is not seen here"), "{e}");
    let e = err("BEGIN { for ($i : 0..3) { } print($i); }");
    assert!(e.contains("$i is not seen here"), "{e}");
    assert!(err("BEGIN { let $a = 1; let $a = 2; }").contains("already declared"));
    ok("BEGIN { for ($i : 0..3) { $x = $i; } for ($i : 1..2) { $x = \"s\"; } }");
    ok("BEGIN { let $u: uint8 = 200; $u = 5; $v = { let $w = 2; $w * 2 }; }");
    assert!(err("BEGIN { let $u: uint8 = 300; }").contains("does not fit"));
    assert!(err("BEGIN { let $u: uint16 = -1; }").contains("does not fit"));
    assert!(err("BEGIN { $v = { 1; }; }").contains("gives no value"));
}

/// `$x` assigned in a block and read after it, as scripts for bpftrace
/// before 0.22 do: one variable for the whole probe, with one warning.
#[test]
fn a_variable_read_after_its_block_is_one_for_the_probe() {
    let src =
        "BEGIN { if (1) { $pct = 5; } else { $pct = 0; } print($pct); printf(\"%d\\n\", $pct); }";
    let p = ok(src);
    let body = &p.probes[0].body;
    // One variable, zeroed first, assigned in both arms.
    assert!(matches!(body[0], TStmt::ZeroVar(0)), "{body:?}");
    let TStmt::If {
        then, otherwise, ..
    } = &body[1]
    else {
        panic!("{body:?}")
    };
    assert!(matches!(then[0], TStmt::AssignVar { var: 0, .. }));
    assert!(matches!(otherwise[0], TStmt::AssignVar { var: 0, .. }));
    assert_eq!(p.probes[0].vars.len(), 1);
    // Warned once, at the first read after the block.
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    let w = &p.warnings[0];
    assert!(w
        .message
        .contains("$pct is read after the block that assigns it"));
    assert!(w.message.contains("0.22"));
    assert_eq!(&src[w.span.start as usize..w.span.end as usize], "$pct");
    assert_eq!(w.span.start as usize, src.find("print($pct)").unwrap() + 6);
    // Where only bpftrace 0.22 and later accept a script (one name, two
    // types, in two blocks), their rule holds, without a word.
    let p = ok("BEGIN { if (1) { $x = 1; print($x); } else { $x = \"one\"; print($x); } }");
    assert!(p.warnings.is_empty());
    assert_eq!(p.probes[0].vars.len(), 2);
    // Each probe block is its own.
    let p = ok("BEGIN { if (1) { $a = 1; } print($a); } END { if (1) { $a = 2; } print($a); }");
    assert_eq!(p.warnings.len(), 2);
    // Assigned in a loop, read after it.
    ok("BEGIN { $i = 0; while ($i < 3) { $last = $i; $i++; } print($last); }");
}

#[test]
fn a_tuple_key_is_its_items() {
    let p = ok("BEGIN { $t = (3, \"c\"); @m[(1, \"a\")] = 1; @m[2, \"bb\"] = 2; @m[$t] = 3; }");
    let m = map(&p, "m");
    assert_eq!(m.keys, [crate::types::INT64, Ty::Str { size: 3 }]);
    // The variable is read item by item.
    let TStmt::AssignMap { keys, .. } = &p.probes[0].body[3] else {
        panic!()
    };
    assert!(matches!(keys[1].kind, TKind::TupleIndex { index: 1, .. }));
    // A tuple inside the keys stays one; its integers, of any width, are
    // laid out alike.
    let p = ok("BEGIN { @o[(1, (2, 3))] = 1; }");
    assert_eq!(map(&p, "o").keys.len(), 2);
    ok("BEGIN { @a[1, (\"hello\", (int8)5)] = 0; $h = has_key(@a, (1, (\"hello\", 5))); }");
}

/// What wrappers and bpftrace's users look for, in bpftrace's words.
#[test]
fn unreachable_code_and_unroll_limits_in_bpftrace_s_words() {
    let src = "BEGIN { @a = 1; exit(); @a = 2; @a = 3; } \
               END { $i = 0; while ($i < 3) { $i++; if ($i > 1) { break; } else { continue; } @b = 1; } }";
    let p = ok(src);
    let at: Vec<&str> = (p.warnings.iter())
        .filter(|w| w.message == "Unreachable statement.")
        .map(|w| &src[w.span.start as usize..w.span.end as usize])
        .collect();
    assert_eq!(at, ["@a = 2", "@b = 1"]);
    assert!(ok("BEGIN { if (1) { exit(); } @a = 1; }")
        .warnings
        .is_empty());
    assert!(err("BEGIN { unroll (101) { } }").contains("unroll maximum value is 100"));
    assert!(err("BEGIN { unroll (0) { } }").contains("unroll minimum value is 1"));
    assert!(err("BEGIN { unroll (pid) { } }").contains("invalid unroll value"));
}

#[test]
fn stack_modes_come_from_the_call_or_the_configuration() {
    use crate::types::{Shown, StackMode};
    let mode = |p: &Program| match &p.probes[0].body[0] {
        TStmt::AssignVar { value, .. } => value.ty.clone(),
        other => panic!("{other:?}"),
    };
    let stack = |mode, depth| Ty::Shown(Shown::UStack { mode, depth });
    assert_eq!(
        mode(&ok("uprobe:/bin/x:f { $s = ustack; }")),
        stack(StackMode::Bpftrace, 127)
    );
    assert_eq!(
        mode(&ok("uprobe:/bin/x:f { $s = ustack(raw); }")),
        stack(StackMode::Raw, 127)
    );
    assert_eq!(
        mode(&ok("uprobe:/bin/x:f { $s = ustack(build_id, 3); }")),
        stack(StackMode::BuildId, 3)
    );
    assert_eq!(
        mode(&ok("uprobe:/bin/x:f { $s = ustack(perf); }")),
        stack(StackMode::Perf, 127)
    );
    assert!(
        err("uprobe:/bin/x:f { $s = ustack(fast); }").contains("Error parsing stack mode: fast")
    );
    assert!(err("uprobe:/bin/x:f { $s = ustack(3, raw); }")
        .contains("Expected stack mode as first argument"));
    // `stack_mode` of the configuration, for a bare `ustack`.
    let src = "uprobe:/bin/x:f { $s = ustack(2); $t = ustack(perf); }";
    let script = crate::parser::parse(src).unwrap();
    let attach = offline_attach(&script, &[]).unwrap();
    let options = CheckOptions {
        stack_mode: StackMode::Raw,
        ..CheckOptions::default()
    };
    let p = check(&script, &attach, &options, &mut NoObjects).unwrap();
    assert_eq!(mode(&p), stack(StackMode::Raw, 2));
}

#[test]
fn time_series_take_literal_bounds_and_an_aggregation() {
    let p = ok("BEGIN { @a[1] = tseries(pid, 100ms, 5, \"avg\"); @b = tseries(2, 1s, 1); }");
    assert_eq!(
        map(&p, "a").value,
        Ty::Agg(Agg::TSeries {
            interval_ns: 100_000_000,
            count: 5,
            how: crate::types::TSeriesAgg::Avg
        })
    );
    assert!(map(&p, "a").has_bucket() && !map(&p, "a").is_histogram());
    for (src, wanted) in [
        (
            "tseries(1, 0, 2)",
            "tseries() interval_ns must be >= 1 (0 provided)",
        ),
        (
            "tseries(1, 1s, 0)",
            "tseries() num_intervals must be >= 1 (0 provided)",
        ),
        (
            "tseries(1, 1s, 1000000)",
            "tseries() num_intervals must be < 1000000 (1000000 provided)",
        ),
        (
            "tseries(1, pid, 2)",
            "tseries: invalid interval_ns value (must be non-negative literal)",
        ),
        (
            "tseries(1, 1s, pid)",
            "tseries: invalid num_intervals value (must be non-negative literal)",
        ),
        (
            "tseries(1, 1s, 2, \"x\")",
            "aggregation functions: avg, max, min, sum (\"x\" provided)",
        ),
        ("tseries(\"s\", 1s, 2)", "integer"),
    ] {
        let e = err(&format!("BEGIN {{ @t = {src}; }}"));
        assert!(e.contains(wanted), "{src}: {e}");
    }
    assert!(err("BEGIN { $x = tseries(1, 1s, 2); }").contains("assigned to a map"));
}

#[test]
fn for_loops_walk_ranges_and_maps() {
    ok("BEGIN { @m[1, \"a\"] = 2; for ($kv : @m) { print(($kv.0.0, $kv.0.1, $kv.1)); } }");
    ok("BEGIN { @c[comm] = count(); for ($kv : @c) { if ($kv.1 > 1) { break; } } }");
    assert!(err("BEGIN { @x = 1; for ($kv : @x) { } }").contains("no keys to walk"));
    assert!(err("BEGIN { for ($i : 0..\"a\") { } }").contains("must be integers"));
    assert!(err("BEGIN { @h[1] = hist(1); for ($kv : @h) { } }").contains("cannot be read"));
}

#[test]
fn calls_have_arities_and_names() {
    assert!(err("BEGIN { @ = hist(); }").contains("hist() takes 1 to 2 arguments, not 0"));
    let e = err("BEGIN { prinft(\"x\"); }");
    assert!(e.contains("`printf`"), "{e}");
    assert!(err("BEGIN { @ = lhist(1, 10, 0, 1); }").contains("min < max"));
    assert!(err("BEGIN { system(\"ls\"); }").contains("--unsafe"));
    assert!(err("BEGIN { $x = printf(\"a\"); }").contains("returns no value"));
    assert!(err("BEGIN { break; }").contains("inside a loop"));
    ok("BEGIN { $i = 0; while ($i < 10) { $i++; if ($i == 5) { break; } } unroll(3) { @u++; } exit(); }");
}

#[test]
fn several_errors_are_reported_together() {
    let e = err("BEGIN { @ = nope1; @y = nope2; }");
    assert!(e.contains("nope1") && e.contains("nope2"), "{e}");
}

#[test]
fn aggregations_of_unsigned_values_are_signed_as_in_bpftrace() {
    // A usdt argument is a uint64; bpftrace's min, max, avg and stats
    // still treat it as an int64 (a -50 stays -50), and only sum() keeps
    // the value's sign.
    let p = ok(
        "usdt:/bin/x:p:a { @mn = min(arg0); @mx = max(arg0); @av = avg(arg0); \
                @st = stats(arg0); @su = sum(arg0); @si = sum((int32)arg0); }",
    );
    let agg = |name: &str| match map(&p, name).value {
        Ty::Agg(a) => a,
        ref other => panic!("{name}: {other:?}"),
    };
    assert_eq!(agg("mn"), Agg::Min { signed: true });
    assert_eq!(agg("mx"), Agg::Max { signed: true });
    assert_eq!(agg("av"), Agg::Avg { signed: true });
    assert_eq!(agg("st"), Agg::Stats { signed: true });
    assert_eq!(agg("su"), Agg::Sum { signed: false });
    assert_eq!(agg("si"), Agg::Sum { signed: true });
}

#[test]
fn an_unsigned_side_makes_arithmetic_unsigned() {
    let p = ok("BEGIN { @a = (uint8)3 + (int8)-5; @b = (uint32)1 > -1; @c = (int8)-3 < 5; }");
    let values: Vec<i64> = p.probes[0]
        .body
        .iter()
        .map(|s| match s {
            TStmt::AssignMap {
                value:
                    TExpr {
                        kind: TKind::Int(v),
                        ..
                    },
                ..
            } => *v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(values, [-2, 0, 1]);
    assert!(
        !map(&p, "a").value.is_signed(),
        "(uint8) + (int8) is unsigned"
    );
}

#[test]
fn negation_keeps_its_operands_type() {
    // As in bpftrace: `-arg0` is a uint64, `~(uint32)0` is 4294967295.
    let p = ok("usdt:/bin/x:p:a { @n = -arg0; @c = ~(uint32)0; @d = -(uint32)1; @s = -(int8)3; }");
    assert_eq!(map(&p, "n").value, crate::types::UINT64);
    let consts: Vec<i64> = p.probes[0]
        .body
        .iter()
        .filter_map(|s| match s {
            TStmt::AssignMap {
                value:
                    TExpr {
                        kind: TKind::Int(v),
                        ..
                    },
                ..
            } => Some(*v),
            _ => None,
        })
        .collect();
    assert_eq!(consts, [0xffff_ffff, 0xffff_ffff, -3]);
}

#[test]
fn only_char_arrays_are_strings() {
    // As in bpftrace: `char name[4]` reads as a string, `unsigned char
    // b[4]` as an array of four numbers.
    let p = ok("struct s { char name[4]; unsigned char b[4]; };\n\
                usdt:/bin/x:p:a { @name = ((struct s *)arg0)->name; @b = ((struct s *)arg0)->b; }");
    assert_eq!(map(&p, "name").value, Ty::Str { size: 5 });
    assert!(
        matches!(map(&p, "b").value, Ty::Array { len: 4, .. }),
        "{:?}",
        map(&p, "b").value
    );
}

#[test]
fn arrays_in_traced_memory_decay_to_pointers_in_casts() {
    // SPDK's sched.bt declares per-thread stats as one-element arrays and
    // casts them to pointers: the cast is the array's address, as in C.
    let p = ok("struct stats { uint64_t busy; uint64_t idle; };\n\
                struct info { uint32_t lcore; uint64_t id; struct stats total[1]; struct stats now[1]; };\n\
                usdt:/bin/x:p:a { $i = (struct info *)arg0; $s = (struct stats *)$i->now; @ = $s->idle; }");
    let TStmt::AssignVar { value, .. } = &p.probes[0].body[1] else {
        panic!("{:?}", p.probes[0].body[1])
    };
    assert!(matches!(value.ty, Ty::Ptr(..)), "{value:?}");
    let TKind::AddrOf(place) = &value.kind else {
        panic!("{value:?}")
    };
    assert!(
        matches!(place.kind, TKind::Field { offset: 32, .. }),
        "{place:?}"
    );
    // Cast to an integer of its size, an array is its bytes (bpftrace
    // 0.19 and later); to another size, it is refused.
    let p = ok("struct s { int a[2]; };\nusdt:/bin/x:p:a { $v = (uint64)((struct s *)arg0)->a; }");
    let TStmt::AssignVar { value, .. } = &p.probes[0].body[0] else {
        panic!("{:?}", p.probes[0].body[0])
    };
    assert!(matches!(value.kind, TKind::Load { .. }), "{value:?}");
    let e = err("struct s { int a[2]; };\nusdt:/bin/x:p:a { $v = (uint32)((struct s *)arg0)->a; }");
    assert!(e.contains("cannot cast int32[2] to uint32"), "{e}");
}

#[test]
fn formats_that_fit_only_as_bpftrace_reads_them() {
    // SPDK's sched.bt: as C, `% c` would be a conversion and `%\n` an
    // error; as bpftrace reads it, two conversions for two values.
    let p = ok("BEGIN { printf(\"busy:%2d% core_busy:%2d%\\n\", 1, 2); }");
    assert_eq!(p.formats[0].specs().count(), 2);
    // sdt's own flags still count where the values fit them.
    let p = ok("BEGIN { printf(\"% d|%+d\\n\", 1, 2); }");
    assert_eq!(p.formats[0].specs().count(), 2);
    // Neither way fits: the C reading's error.
    assert!(err("BEGIN { printf(\"%d %d\\n\", 1); }").contains("2 conversions but 1 value"));
    assert!(err("BEGIN { printf(\"%y\\n\", 1); }").contains("`%y` is not a conversion"));
}
