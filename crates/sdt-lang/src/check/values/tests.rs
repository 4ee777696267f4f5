//! Values larger than a register, as the checker types them.

use crate::check::tests::{err, ok, run};
use crate::hir::{Program, TExpr, TKind, TStmt};
use crate::types::Ty;

/// The value of the `n`th statement of the only probe, an assignment.
fn assigned(p: &Program, n: usize) -> &TExpr {
    match &p.probes[0].body[n] {
        TStmt::AssignVar { value, .. } | TStmt::AssignMap { value, .. } => value,
        other => panic!("{other:?}"),
    }
}

const SHAPES: &str = "struct point { int32_t x; int32_t y }\n\
    struct shape { int32_t id; int32_t grid[2][3]; struct point corners[3]; char name[8] }\n";

#[test]
fn buffers_are_values() {
    let p = ok(
        "BEGIN { @k[buf(\"key\", 8), 1] = 1; $b = buf(\"hi\", 2); @v = $b; \
                $e = $b == buf(\"hi\", 2); printf(\"%r %rx %rh\\n\", $b, $b, @v); }",
    );
    assert_eq!(p.maps[0].keys[0], Ty::Buf { size: 8 });
    assert_eq!(p.maps[1].value, Ty::Buf { size: 2 });
    assert!(matches!(
        assigned(&p, 3).kind,
        TKind::StrEq { negate: false, .. }
    ));
    let e = err("BEGIN { $b = buf(\"hi\", 2) < buf(\"a\", 1); }");
    assert!(e.contains("`<` does not apply to buffer[2]"), "{e}");
    let e = err("BEGIN { $b = buf(\"hi\", 2) == \"hi\"; }");
    assert!(e.contains("cannot compare buffer[2] with string[3]"), "{e}");
    let e = err("BEGIN { $b = buf(1, \"x\"); }");
    assert!(e.contains("length must be an integer"), "{e}");
}

#[test]
fn struct_and_array_values_are_read_in_place() {
    let p = ok(&format!(
        "{SHAPES}uprobe:/bin/x:f {{ $s = *(struct shape *)arg0; $id = $s.id; \
         $g = $s.grid; $v = $g[1][2]; $c = $s.corners[2].y; $n = $s.name; \
         @a[0] = ((struct shape *)arg0)->grid; $m = @a[0][1][0]; $i = 1; $d = $g[$i][0]; }}"
    ));
    let vars = &p.probes[0].vars;
    assert!(matches!(vars[0], Ty::Record(_)));
    assert_eq!(vars[2].to_string_in(&p), "int32[2][3]");
    assert_eq!(vars[5], Ty::Str { size: 9 });
    for n in [1, 3, 4, 6, 7, 8] {
        assert_eq!(vars[n].to_string_in(&p), "int64", "var {n}");
    }
    let e = err(&format!(
        "{SHAPES}uprobe:/bin/x:f {{ $s = *(struct shape *)arg0; $v = $s.grid[2][0]; }}"
    ));
    assert!(
        e.contains("the index 2 is out of bounds for array of size 2"),
        "{e}"
    );
    let e = err(&format!(
        "{SHAPES}uprobe:/bin/x:f {{ $s = *(struct shape *)arg0; $v = $s.nope; }}"
    ));
    assert!(e.contains("has no field `nope`"), "{e}");
}

#[test]
fn arrays_and_tuples_compare_byte_by_byte() {
    let p = ok(&format!(
        "{SHAPES}uprobe:/bin/x:f {{ $a = (struct shape *)arg0; $b = (struct shape *)arg1; \
         $e = $a->grid == $b->grid; $t = (1, \"ab\") != (2, \"abc\"); }}"
    ));
    assert!(matches!(assigned(&p, 2).kind, TKind::StrEq { .. }));
    // The tuple with the shorter string is laid out as the longer one.
    let TKind::StrEq { lhs, rhs, negate } = &assigned(&p, 3).kind else {
        panic!()
    };
    assert!(*negate);
    assert!(matches!(lhs.kind, TKind::Convert(_)));
    assert_eq!(lhs.ty, rhs.ty);
    let e = err(&format!(
        "{SHAPES}uprobe:/bin/x:f {{ $a = (struct shape *)arg0; $e = $a->corners == $a->corners; }}"
    ));
    assert!(
        e.contains("compares strings, buffers, integer arrays and tuples, not struct point[3]"),
        "{e}"
    );
}

#[test]
fn ternaries_unify_their_arms_or_choose_statements() {
    let p = ok(
        "BEGIN { $t = nsecs ? (\"long string\", \"a\") : (\"b\", \"longer string\"); \
                $b = nsecs ? buf(\"hi\", 2) : buf(\"bye\", 3); nsecs ? printf(\"a\") : exit(); }",
    );
    let vars = &p.probes[0].vars;
    assert_eq!(
        vars[0],
        Ty::Tuple(vec![Ty::Str { size: 12 }, Ty::Str { size: 14 }])
    );
    assert_eq!(vars[1], Ty::Buf { size: 3 });
    let TStmt::If {
        then, otherwise, ..
    } = &p.probes[0].body[2]
    else {
        panic!("{:?}", p.probes[0].body[2])
    };
    assert!(matches!(then[..], [TStmt::Output(_)]));
    assert!(matches!(otherwise[..], [TStmt::Output(_)]));
    let e = err("BEGIN { $x = nsecs ? 1 : \"one\"; }");
    assert!(e.contains("different types: int64 and string[4]"), "{e}");
}

#[test]
fn strings_and_tuples_are_indexed() {
    let p = ok(
        "BEGIN { $s = \"foo\"; $c = $s[0]; $t = (1, \"two\", 3); $u = $t[1 + 1]; \
                $v = $t[1]; $i = 5; $d = $s[$i]; }",
    );
    let vars = &p.probes[0].vars;
    assert_eq!(vars[1], crate::types::INT64);
    assert_eq!(vars[3], crate::types::INT64);
    assert_eq!(vars[4], Ty::Str { size: 4 });
    let e = err("BEGIN { $t = (1, 2); $i = 1; $u = $t[$i]; }");
    assert!(e.contains("a tuple's index must be a constant"), "{e}");
    let e = err("BEGIN { $t = (1, 2); $u = $t[2]; }");
    assert!(
        e.contains("the tuple has 2 items; index 2 is out of range"),
        "{e}"
    );
    let e = err("BEGIN { $s = \"foo\"; $c = $s[4]; }");
    assert!(
        e.contains("the index 4 is out of bounds for array of size 4"),
        "{e}"
    );
}

/// How a type reads, with the program's registry.
trait ShowIn {
    fn to_string_in(&self, p: &Program) -> String;
}

impl ShowIn for Ty {
    fn to_string_in(&self, p: &Program) -> String {
        self.display(&p.registry).to_string()
    }
}

/// The types of `args.FIELD` for fields of `c_types` in tracepoint
/// `name` (`category:event`).
fn tracepoint_field_types(name: &str, c_types: &[&str]) -> Vec<Ty> {
    use crate::check::{AttachInfo, CheckOptions, TargetInfo, TracepointField, TracepointFormat};
    let fields = c_types
        .iter()
        .enumerate()
        .map(|(i, c_type)| TracepointField {
            name: format!("f{i}"),
            c_type: c_type.to_string(),
            offset: 8 * i as u32,
            size: 8,
            signed: false,
        })
        .collect();
    let reads: String = (0..c_types.len())
        .map(|i| format!("$v{i} = args.f{i}; "))
        .collect();
    let src = format!("tracepoint:{name} {{ {reads} }}");
    let script = crate::parser::parse(&src).unwrap();
    let attach = vec![vec![AttachInfo {
        kind: crate::hir::ProbeKind::Tracepoint,
        targets: vec![TargetInfo {
            tracepoint: Some(TracepointFormat {
                name: name.to_string(),
                fields,
            }),
            ..TargetInfo::default()
        }],
    }]];
    let options = CheckOptions::default();
    let p = crate::check::check(&script, &attach, &options, &mut crate::check::NoObjects)
        .unwrap_or_else(|e| panic!("{}", e.to_text("test.bt", &src)));
    p.probes[0].vars.clone()
}

#[test]
fn tracepoint_pointers_keep_every_level() {
    let char_ptr = Ty::ptr(Ty::int(1, true));
    let types = tracepoint_field_types(
        "syscalls:sys_enter_execve",
        &["const char *const *", "const char *", "unsigned long *"],
    );
    assert_eq!(
        types,
        [
            Ty::ptr(char_ptr.clone()),
            char_ptr,
            Ty::ptr(crate::types::UINT64)
        ]
    );
}

#[test]
fn tracepoint_pointers_are_the_kernels_outside_system_calls() {
    // A system call's pointers are what the process passed; other
    // tracepoints' point into the kernel, as bpftrace reads them.
    let types = tracepoint_field_types("sched:sched_foo", &["void *", "const char *"]);
    assert_eq!(types[0].space(), Some(crate::types::Space::Kernel));
    assert_eq!(types[1], Ty::kernel_ptr(Ty::int(1, true)));
}

#[test]
fn str_of_parameters_and_string_values() {
    let p = run(
        "uprobe:/bin/x:f { $a = str($1); $b = str($1 + 2); $c = str($1, 3); $d = str($2); \
         $s = \"hello\"; $e = str($s, 3); $f = str(arg0, 5); }",
        &["hello", "42"],
    )
    .unwrap();
    let texts: Vec<Option<&[u8]>> = (0..4)
        .map(|n| match &assigned(&p, n).kind {
            TKind::Str(text) => Some(&text[..]),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [
            Some(&b"hello"[..]),
            Some(&b"llo"[..]),
            // A length counts the NUL (bpftrace 0.23 and later).
            Some(&b"he"[..]),
            Some(&b"42"[..])
        ]
    );
    assert!(matches!(assigned(&p, 5).kind, TKind::StrRead { .. }));
    assert_eq!(p.probes[0].vars[5], Ty::Str { size: 3 });
    assert_eq!(p.probes[0].vars[6], Ty::Str { size: 5 });
    let p = run("BEGIN { $a = str(\"hello\", 9999); }", &[]).unwrap();
    assert_eq!(p.probes[0].vars[0], Ty::Str { size: 6 });
    assert_eq!(
        p.warnings[0].message,
        "length param (9999) is too long and will be shortened to 64 bytes (see BPFTRACE_MAX_STRLEN)"
    );
    let e = run("BEGIN { $a = str(arg0, -1); }", &[]).unwrap_err();
    assert!(e.contains("str() cannot use a negative length (-1)"), "{e}");
    let e = run("BEGIN { $a = str($1 + 6); }", &["hello"]).unwrap_err();
    assert!(e.contains("$1 + 6 is outside $1, which has 5 bytes"), "{e}");
}

#[test]
fn pointers_step_by_their_pointees_size() {
    let p = ok(
        "struct s { int32_t a; int32_t b; char c[28] }\n\
                BEGIN { @p = (int32 *)32; @p++; $q = (struct s *)1024; $q--; --$q; $i = 1; $i++; }",
    );
    let deltas: Vec<i64> = p.probes[0]
        .body
        .iter()
        .filter_map(|s| match s {
            TStmt::Expr(TExpr {
                kind: TKind::MapIncDec { delta, .. } | TKind::VarIncDec { delta, .. },
                ..
            }) => Some(*delta),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, [4, -36, -36, 1]);
    let e = err("BEGIN { $s = \"x\"; $s++; }");
    assert!(
        e.contains("need an integer or a pointer; $s is string[2]"),
        "{e}"
    );
}

#[test]
fn a_variable_has_one_layout_from_its_first_read_on() {
    let p = ok("BEGIN { $t = (\"hi\", 1); print($t); $t = (\"longer string\", 2); print($t.0); }");
    let wide = Ty::Tuple(vec![Ty::Str { size: 14 }, crate::types::INT64]);
    assert_eq!(p.probes[0].vars[0], wide);
    let TStmt::Output(crate::hir::Output::PrintValue(first)) = &p.probes[0].body[1] else {
        panic!("{:?}", p.probes[0].body[1])
    };
    assert_eq!(first.ty, wide, "the first print reads the final layout");
}
