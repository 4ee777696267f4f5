//! A string built from parts (`TKind::Concat`), run in the kernel.
//!
//! No builtin of the language makes one yet, so each test compiles
//! `BEGIN { @s = "..."; }`, puts a concatenation in place of the literal
//! in the checked HIR, generates the programs again, loads them (the
//! verifier must accept the run-time offsets the parts are written at),
//! runs BEGIN and reads `@s` back.

use sdt_lang::check::CheckOptions;
use sdt_lang::hir::{TExpr, TKind, TStmt};
use sdt_lang::types::Ty;

/// `@s` after BEGIN stored the parts, concatenated into a string of
/// `size` bytes; `None` (a SKIP, or a failure in CI) without root.
fn concatenated(parts: &[&[u8]], size: u32) -> Option<Vec<u8>> {
    if !sdt_testing::require_root() {
        return None;
    }
    let options = sdt_script::Options {
        check: CheckOptions::default(),
        scope: Default::default(),
        mechanism: sdt_trace::mechanism(None).expect("a uprobe mechanism"),
        missing_probes: sdt_lang::config::Config::default().missing_probes,
        codegen: Default::default(),
        counted: Vec::new(),
        fastpath: false,
    };
    let mut compilation =
        sdt_script::compile(r#"BEGIN { @s = "placeholder"; }"#, &options).expect("compiles");
    let program = &mut compilation.program;
    let Some(TStmt::AssignMap { map, value, .. }) = program.probes[0].body.first_mut() else {
        panic!("BEGIN starts with the assignment");
    };
    let string = |bytes: &[u8]| TExpr {
        kind: TKind::Str(bytes.to_vec()),
        ty: Ty::Str {
            size: bytes.len() as u32 + 1,
        },
        span: value.span,
    };
    *value = TExpr {
        kind: TKind::Concat(parts.iter().map(|p| string(p)).collect()),
        ty: Ty::Str { size },
        span: value.span,
    };
    let map = *map;
    program.maps[map].value = Ty::Str { size };
    let units: Vec<_> = compilation
        .compiled
        .programs
        .iter()
        .map(|p| p.unit.clone())
        .collect();
    compilation.compiled =
        sdt_codegen::compile(&compilation.program, &units, &options.codegen).expect("generates");
    let maps: Vec<_> = compilation
        .compiled
        .maps
        .iter()
        .map(|m| m.spec.clone())
        .collect();
    let session = sdt_trace::Session::load(
        &maps,
        compilation.program_specs(),
        options.mechanism,
        sdt_trace::Options {
            mechanism: Some(options.mechanism),
            ..Default::default()
        },
    )
    .expect("the verifier accepts the program");
    session.trigger(0).expect("BEGIN runs");
    let stored = session
        .map(sdt_codegen::layout::user_map(map) as usize)
        .expect("@s's map");
    let key = stored
        .keys()
        .next()
        .expect("@s has its entry")
        .expect("a key");
    let value = stored.lookup(&key).expect("lookup").expect("@s's value");
    assert_eq!(value.len(), size.next_multiple_of(8) as usize);
    Some(value)
}

/// The text up to the first NUL, and whether every byte after it is 0.
fn text(value: &[u8]) -> (String, bool) {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    (
        String::from_utf8_lossy(&value[..end]).into_owned(),
        value[end..].iter().all(|&b| b == 0),
    )
}

#[test]
fn parts_follow_one_another_each_to_its_nul() {
    let Some(value) = concatenated(&[b"/var", b"", b"/log/", b"syslog"], 32) else {
        return;
    };
    assert_eq!(text(&value), ("/var/log/syslog".to_string(), true));
}

#[test]
fn what_does_not_fit_is_cut_and_a_nul_ends_it() {
    // 16 bytes hold 15 characters: the second part is cut, the third
    // does not start.
    let Some(value) = concatenated(&[b"0123456789", b"abcdefghij", b"XYZ"], 16) else {
        return;
    };
    assert_eq!(text(&value), ("0123456789abcde".to_string(), true));
    // Longer than a copy by words (128 bytes), into a larger string.
    let long = [b'x'; 200];
    let Some(value) = concatenated(&[&long, b"-", &long], 300) else {
        return;
    };
    let (joined, padded) = text(&value);
    assert_eq!(joined.len(), 299);
    assert!(joined.starts_with(&"x".repeat(200)) && joined[200..].starts_with('-'));
    assert!(padded);
}
