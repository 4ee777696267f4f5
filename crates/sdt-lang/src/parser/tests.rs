use super::*;

/// An expression as an S-expression, to check structure and precedence.
fn sexp(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(n) => n.to_string(),
        ExprKind::Str(s) => format!("{:?}", String::from_utf8_lossy(s)),
        ExprKind::Ident(n) => n.clone(),
        ExprKind::Var(n) => format!("${n}"),
        ExprKind::Map(m) => {
            if m.keys.is_empty() {
                format!("@{}", m.name)
            } else {
                let keys: Vec<String> = m.keys.iter().map(sexp).collect();
                format!("@{}[{}]", m.name, keys.join(" "))
            }
        }
        ExprKind::Param(n) => format!("${n}"),
        ExprKind::ParamCount => "$#".into(),
        ExprKind::Call { name, args, .. } => {
            let args: Vec<String> = args.iter().map(sexp).collect();
            format!("({name} {})", args.join(" "))
        }
        ExprKind::Unary { op, expr } => format!("({op:?} {})", sexp(expr)),
        ExprKind::Binary { op, lhs, rhs } => {
            format!("({} {} {})", op.symbol(), sexp(lhs), sexp(rhs))
        }
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => format!("(? {} {} {})", sexp(cond), sexp(then), sexp(otherwise)),
        ExprKind::Cast { ty, expr } => format!(
            "(cast {}{} {})",
            ty.name,
            "*".repeat(ty.pointers as usize),
            sexp(expr)
        ),
        ExprKind::Field {
            expr, field, arrow, ..
        } => format!(
            "({} {} {field})",
            if *arrow { "->" } else { "." },
            sexp(expr)
        ),
        ExprKind::TupleIndex { expr, index } => format!("(. {} {index})", sexp(expr)),
        ExprKind::Index { expr, index } => format!("([] {} {})", sexp(expr), sexp(index)),
        ExprKind::Tuple(items) => {
            let items: Vec<String> = items.iter().map(sexp).collect();
            format!("(tuple {})", items.join(" "))
        }
        ExprKind::Record(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(name, value)| format!("{name}={}", sexp(value)))
                .collect();
            format!("(record {})", fields.join(" "))
        }
        ExprKind::IncDec {
            target,
            increment,
            prefix,
        } => format!(
            "({}{} {})",
            if *prefix { "pre" } else { "post" },
            if *increment { "++" } else { "--" },
            sexp(target)
        ),
        ExprKind::SizeofType(ty) => format!("(sizeof {})", ty.name),
        ExprKind::Offsetof { ty, field } => format!("(offsetof {} {field})", ty.name),
        ExprKind::Block { stmts, value } => format!(
            "(block {}{})",
            stmts.len(),
            value
                .as_ref()
                .map(|v| format!(" {}", sexp(v)))
                .unwrap_or_default()
        ),
    }
}

fn expr(src: &str) -> String {
    let script = parse(&format!("BEGIN {{ {src}; }}")).unwrap();
    match &script.probes[0].body[0].kind {
        StmtKind::Expr(e) => sexp(e),
        other => panic!("not an expression statement: {other:?}"),
    }
}

fn error(src: &str) -> Diagnostic {
    parse(src).expect_err(&format!("{src:?} parsed"))
}

#[test]
fn precedence_follows_c() {
    assert_eq!(expr("1 + 2 * 3"), "(+ 1 (* 2 3))");
    assert_eq!(expr("1 - 2 - 3"), "(- (- 1 2) 3)");
    assert_eq!(
        expr("a == 1 && b < 2 || !c"),
        "(|| (&& (== a 1) (< b 2)) (Not c))"
    );
    assert_eq!(expr("x & 1 == 1"), "(& x (== 1 1))");
    assert_eq!(expr("1 << 2 + 3"), "(<< 1 (+ 2 3))");
    assert_eq!(expr("a ? b : c ? d : e"), "(? a b (? c d e))");
    assert_eq!(expr("-5 * -x"), "(* -5 (Neg x))");
    assert_eq!(expr("~$x | 0x10"), "(| (BitNot $x) 16)");
}

#[test]
fn postfix_and_casts() {
    assert_eq!(
        expr("((struct foo *)arg0)->bar.baz[2]"),
        "([] (. (-> (cast struct foo* arg0) bar) baz) 2)"
    );
    assert_eq!(expr("(uint8)arg1 + 1"), "(+ (cast uint8 arg1) 1)");
    assert_eq!(expr("*(uint32 *)arg0"), "(Deref (cast uint32* arg0))");
    assert_eq!(expr("(my_t *)arg0"), "(cast my_t* arg0)");
    assert_eq!(expr("(unsigned long)$x"), "(cast unsigned long $x)");
    assert_eq!(expr("(a) + 1"), "(+ a 1)");
    assert_eq!(expr("$t.0 + $t.1"), "(+ (. $t 0) (. $t 1))");
    assert_eq!(expr("(1, \"a\", comm)"), "(tuple 1 \"a\" comm)");
    assert_eq!(
        expr("(a=1, b=(x=2, y=3))"),
        "(record a=1 b=(record x=2 y=3))"
    );
    assert_eq!(expr("@m[pid, comm]++"), "(post++ @m[pid comm])");
    assert_eq!(expr("--$x"), "(pre-- $x)");
    assert_eq!(expr("sizeof(struct foo)"), "(sizeof struct foo)");
    assert_eq!(expr("sizeof($x)"), "(sizeof $x)");
    assert_eq!(
        expr("offsetof(struct foo, bar)"),
        "(offsetof struct foo bar)"
    );
    assert_eq!(expr("args.filename"), "(. args filename)");
    assert_eq!(expr("args->filename"), "(-> args filename)");
    assert_eq!(expr("printf(\"%d\\n\", $1)"), "(printf \"%d\\n\" $1)");
    assert_eq!(expr("ustack(perf, 3)"), "(ustack perf 3)");
    assert_eq!(expr("@ + $#"), "(+ @ $#)");
}

#[test]
fn statements_and_blocks() {
    let script = parse(
        "BEGIN { $x = 1; $x += 2; @m[1] = count(); if ($x > 1) { exit() } else if ($x) { $y = 1 } \
         else { return } unroll (3) { $x++ } while ($x < 10) { $x++; if ($x == 5) { break; } } \
         for ($kv : @m) { print($kv.0) } }",
    )
    .unwrap();
    let kinds: Vec<&str> = script.probes[0]
        .body
        .iter()
        .map(|s| match s.kind {
            StmtKind::AssignVar { op: None, .. } => "assign",
            StmtKind::AssignVar { op: Some(_), .. } => "compound",
            StmtKind::AssignMap { .. } => "map",
            StmtKind::If { .. } => "if",
            StmtKind::Unroll { .. } => "unroll",
            StmtKind::While { .. } => "while",
            StmtKind::For { .. } => "for",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["assign", "compound", "map", "if", "unroll", "while", "for"]
    );
}

#[test]
fn loops_declarations_and_blocks_of_bpftrace_0_24() {
    let script = parse(
        "BEGIN { for ($i : 0..$n) { continue } for $kv : @m { break } let $a; let $b: uint8 = 3; \
         let $c = { let $d = 1; $d + 1 }; { $e = 2; } _ = $c; if $a { } while $b < 5 { $b++ } }",
    )
    .unwrap();
    let body = &script.probes[0].body;
    assert!(matches!(
        &body[0].kind,
        StmtKind::For { iter: ForIter::Range { start, end }, .. }
            if sexp(start) == "0" && sexp(end) == "$n"
    ));
    assert!(matches!(
        &body[1].kind,
        StmtKind::For { iter: ForIter::Map { name, .. }, .. } if name == "m"
    ));
    assert!(matches!(
        &body[2].kind,
        StmtKind::Let {
            ty: None,
            value: None,
            ..
        }
    ));
    assert!(matches!(
        &body[3].kind,
        StmtKind::Let { ty: Some(t), value: Some(_), .. } if t.name == "uint8"
    ));
    match &body[4].kind {
        StmtKind::Let { value: Some(v), .. } => assert_eq!(sexp(v), "(block 1 (+ $d 1))"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        &body[5].kind,
        StmtKind::Expr(Expr {
            kind: ExprKind::Block { value: None, .. },
            ..
        })
    ));
    assert!(matches!(&body[6].kind, StmtKind::Expr(e) if sexp(e) == "$c"));
    assert!(matches!(&body[7].kind, StmtKind::If { .. }));
    assert!(matches!(&body[8].kind, StmtKind::While { .. }));
    let script = parse("BEGIN { $x = if ($y) { 1 } else if $z { 2 } else { 3 } }").unwrap();
    match &script.probes[0].body[0].kind {
        StmtKind::AssignVar { value, .. } => assert_eq!(
            sexp(value),
            "(? $y (block 0 1) (? $z (block 0 2) (block 0 3)))"
        ),
        other => panic!("{other:?}"),
    }
    // An `if` that ends a block that gives a value is that value
    // (bpftrace 0.25), nested too; where no value is wanted, it stays a
    // statement.
    let script = parse(
        "BEGIN { $v = { $w = 1; if $a { if $b { $w } else { 2 } } else if $c { 3 } else { 4 } }; \
         if $a { 5 } else { 6 } }",
    )
    .unwrap();
    let body = &script.probes[0].body;
    match &body[0].kind {
        StmtKind::AssignVar { value, .. } => assert_eq!(
            sexp(value),
            "(block 1 (? $a (block 0 (? $b (block 0 $w) (block 0 2))) (? $c (block 0 3) (block 0 4))))"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(&body[1].kind, StmtKind::If { then, .. } if then.len() == 1));
    // `typeof(EXPR)` where a type is written (bpftrace 0.25).
    let script =
        parse("BEGIN { let $a: typeof($b + 1); $c = (typeof($d) *)0; $e = sizeof(typeof($f)); }")
            .unwrap();
    let body = &script.probes[0].body;
    match &body[0].kind {
        StmtKind::Let { ty: Some(t), .. } => {
            assert_eq!(t.name, "typeof");
            assert_eq!(sexp(t.of.as_deref().unwrap()), "(+ $b 1)");
        }
        other => panic!("{other:?}"),
    }
    match &body[1].kind {
        StmtKind::AssignVar { value, .. } => match &value.kind {
            ExprKind::Cast { ty, .. } => assert!(ty.of.is_some() && ty.pointers == 1),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        &body[2].kind,
        StmtKind::AssignVar { value: Expr { kind: ExprKind::SizeofType(t), .. }, .. } if t.of.is_some()
    ));
    // An arm without a value leaves the `if` a statement of the block.
    let script = parse("BEGIN { $v = { if $a { 1 } else { 2; } }; }").unwrap();
    match &script.probes[0].body[0].kind {
        StmtKind::AssignVar { value, .. } => assert_eq!(sexp(value), "(block 1)"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn top_level_macros_map_declarations_and_imports() {
    let script = parse(
        "import \"lib.bt\";\nmacro add($a, @b, x) { $a += x; @b++; $a }\nmacro one { 1 }\n\
         let @h = lruhash(100);\nBEGIN { }",
    )
    .unwrap();
    assert_eq!(script.imports[0].path, "lib.bt");
    assert_eq!(script.macros.len(), 2);
    assert_eq!(
        script.macros[0].params,
        [
            MacroParam::Var("a".into()),
            MacroParam::Map("b".into()),
            MacroParam::Expr("x".into())
        ]
    );
    assert_eq!(script.macros[0].body.len(), 2);
    assert!(script.macros[0].value.is_some());
    assert!(script.macros[1].params.is_empty());
    assert_eq!(script.map_declarations[0].kind, "lruhash");
    assert_eq!(script.map_declarations[0].entries, 100);
}

#[test]
fn probes_predicates_and_definitions() {
    let script = parse(
        "#!/usr/bin/env bpftrace\n#include <stdio.h>\n\
         struct foo { int a; char name[16]; };\n\
         typedef unsigned long my_t;\n\
         usdt:/usr/bin/app:p:start, uprobe:/lib/libc.so.6:malloc /pid == $1 && @x / 2 > 1/ { @[probe] = count(); }\n\
         END { print(@) }",
    )
    .unwrap();
    assert_eq!(script.directives.len(), 1);
    assert_eq!(script.definitions.len(), 2);
    assert!(script.definitions[0].text.starts_with("struct foo"));
    assert!(script.definitions[0].text.ends_with("};"));
    assert_eq!(script.probes.len(), 2);
    let first = &script.probes[0];
    assert_eq!(first.attach_points.len(), 2);
    assert_eq!(
        first.attach_points[1].fields,
        ["uprobe", "/lib/libc.so.6", "malloc"]
    );
    assert_eq!(
        sexp(first.predicate.as_ref().unwrap()),
        "(&& (== pid $1) (> (/ @x 2) 1))"
    );
    assert_eq!(script.probes[1].attach_points[0].text, "END");
    // A typedef name starts a cast.
    let script = parse("typedef struct s s_t; BEGIN { $p = (s_t)arg0; }").unwrap();
    assert!(matches!(
        &script.probes[0].body[0].kind,
        StmtKind::AssignVar {
            value: Expr {
                kind: ExprKind::Cast { .. },
                ..
            },
            ..
        }
    ));
}

#[test]
fn definitions_end_after_their_attributes() {
    let script = parse(
        "struct a { int x; } struct b { int x; char y } __attribute__((packed))\n\
         struct c { int x; } /* note */ __attribute__ /**/ ((packed)) __attribute__((aligned(1)))\n\
         BEGIN { exit(); }",
    )
    .unwrap();
    let texts: Vec<&str> = script.definitions.iter().map(|d| d.text.trim()).collect();
    assert_eq!(
        texts,
        [
            "struct a { int x; }",
            "struct b { int x; char y } __attribute__((packed))",
            "struct c { int x; } /* note */ __attribute__ /**/ ((packed)) __attribute__((aligned(1)))"
        ]
    );
    assert_eq!(script.probes.len(), 1);
    // A brace in a comment does not open the definition.
    let script = parse("struct d { /* { */ int x; } BEGIN { }").unwrap();
    assert_eq!(script.definitions.len(), 1);
    assert_eq!(script.probes.len(), 1);
}

#[test]
fn config_blocks() {
    let script =
        parse("config = { max_strlen = 128; missing_probes = \"warn\" } BEGIN {}").unwrap();
    assert_eq!(script.config.len(), 2);
    assert_eq!(script.config[0].name, "max_strlen");
}

#[test]
fn errors_point_at_the_problem() {
    let src = "BEGIN { $x = ; }";
    let d = error(src);
    assert_eq!(d.message, "expected an expression, found `;`");
    assert_eq!(d.line_column(src), (1, 14));

    let d = error("BEGIN { printf(\"x\") printf(\"y\") }");
    assert!(
        d.message.contains("`;` after the statement"),
        "{}",
        d.message
    );

    let d = error("BEGIN { if ($x { } }");
    assert!(d.message.contains("`)`"), "{}", d.message);

    let d = error("BEGIN { for ($i : 1) { } }");
    assert!(d.message.contains("walks a map"), "{}", d.message);

    let d = error("BEGIN { $x = if (1) { 2 }; }");
    assert!(d.message.contains("`else`"), "{}", d.message);

    let d = error("BEGIN { $t.0 = 1 }");
    assert!(d.message.contains("tuples cannot be changed"));

    let d = error("BEGIN { 1 = 2 }");
    assert!(d.message.contains("only a variable"));

    let d = error("BEGIN { x");
    assert!(
        d.message.contains("`}`") || d.message.contains("`;`"),
        "{}",
        d.message
    );

    let d = error("");
    assert!(d.message.contains("no probes"));

    let d = error("BEGIN {} struct x { int a; };");
    assert!(d.message.contains("before the first probe"));

    let d = error("struct x { int a;");
    assert!(d.message.contains("never ends"));

    let d = error("BEGIN /pid == 1 { }");
    assert!(d.message.contains("end the predicate") || d.message.contains("expected"));

    let d = error("BEGIN { 3++ }");
    assert!(d.message.contains("applies to a variable or a map"));
}

#[test]
fn never_panics_on_prefixes_of_a_real_script() {
    let src = "struct s { int a; };\nusdt:/bin/x:p:n /arg0 > 1/ { @[str(arg1)] = count(); \
               if (arg2) { printf(\"%s %d\\n\", comm, (int8)arg3); } }\nEND { clear(@); }";
    for end in 0..src.len() {
        if src.is_char_boundary(end) {
            let _ = parse(&src[..end]);
        }
    }
}
