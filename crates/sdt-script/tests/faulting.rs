//! Which programs read the traced process's memory through calls that
//! fault pages in (sleepable programs), and that the kernel's verifier
//! accepts them with every construct of the language around their reads.
//!
//! The programs attach to `tests/fixtures/strings`' probe, which passes a
//! string, its length and a struct. They are loaded, never attached.

use std::path::PathBuf;

use sdt_codegen::{Faulting, Machine};
use sdt_lang::check::CheckOptions;

/// The fixture's PIE program, or `None` (a SKIP, a failure in CI)
/// without root or a C compiler.
fn fixture() -> Option<PathBuf> {
    if !sdt_testing::require_root()
        || !sdt_testing::require(sdt_testing::have("cc"), "a C compiler (cc)")
    {
        return None;
    }
    Some(
        sdt_testing::fixture::C::new("tests/fixtures/strings/untouched.c")
            .source("tests/fixtures/strings/requests.c")
            .flags(&["-O2", "-g"])
            .build(),
    )
}

fn options(machine: Machine) -> sdt_script::Options {
    sdt_script::Options {
        check: CheckOptions::default(),
        scope: Default::default(),
        mechanism: sdt_trace::mechanism(None).expect("a uprobe mechanism"),
        missing_probes: sdt_lang::config::Config::default().missing_probes,
        codegen: sdt_codegen::Options {
            machine,
            ..Default::default()
        },
        counted: Vec::new(),
        fastpath: false,
    }
}

/// Compiles `body` as the block of the fixture's `fleet:req`.
fn compile(body: &str, machine: Machine) -> sdt_script::Compilation {
    let fixture = fixture().expect("checked by the caller");
    let text = format!("usdt:{}:fleet:req {{ {body} }}", fixture.display());
    sdt_script::compile(&text, &options(machine))
        .unwrap_or_else(|e| panic!("{body}: {}", e.0[0].message))
}

/// Creates the maps and loads every program, as a run would.
fn load(compilation: &sdt_script::Compilation) {
    let maps: Vec<_> = compilation
        .compiled
        .maps
        .iter()
        .map(|m| m.spec.clone())
        .collect();
    if let Err(e) = sdt_trace::Session::load(
        &maps,
        compilation.program_specs(),
        sdt_trace::mechanism(None).unwrap(),
        Default::default(),
    ) {
        panic!("{}: {e:?}", compilation.source);
    }
}

fn probed() -> Machine {
    let machine = Machine::probed();
    assert!(
        matches!(machine.faulting, Faulting::Yes(_)) || !sdt_testing::in_ci(),
        "CI's kernel runs sleepable uprobes with bpf_copy_from_user_str: {:?}",
        sdt_bpf::FaultingReads::detect()
    );
    machine
}

fn calls_kfunc(compilation: &sdt_script::Compilation) -> bool {
    compilation.compiled.programs.iter().any(|p| {
        p.insns
            .iter()
            .any(|i| i.code == 0x85 && i.src() == sdt_bpf::PSEUDO_KFUNC_CALL)
    })
}

#[test]
fn a_program_that_reads_strings_is_sleepable_and_keeps_scratch_per_thread() {
    if fixture().is_none() {
        return;
    }
    let machine = probed();
    let Faulting::Yes(_) = machine.faulting else {
        return;
    };
    let c = compile("@[str(arg0)] = count();", machine);
    let program = &c.compiled.programs[0];
    assert!(program.sleepable);
    assert!(calls_kfunc(&c));
    let scratch = &c.compiled.maps[sdt_codegen::layout::TASK_SCRATCH_MAP as usize];
    assert_eq!(scratch.spec.map_type, sdt_bpf::MapType::TaskStorage);
    assert!(scratch.used);
    assert_eq!(c.compiled.read_sites.len(), 1);
    load(&c);

    // Without the kernel's word, the same script reads as before.
    let c = compile("@[str(arg0)] = count();", Machine::current());
    assert!(!c.compiled.programs[0].sleepable);
    assert!(!calls_kfunc(&c));
    assert_ne!(
        c.compiled.maps[sdt_codegen::layout::TASK_SCRATCH_MAP as usize]
            .spec
            .map_type,
        sdt_bpf::MapType::TaskStorage
    );
    assert_eq!(c.compiled.read_sites.len(), 1, "failures are still counted");
    load(&c);
}

#[test]
fn a_program_that_reads_no_memory_or_records_ustack_does_not_sleep() {
    if fixture().is_none() {
        return;
    }
    let machine = probed();
    let c = compile("@ = count(); @x[arg1] = sum(arg2);", machine);
    assert!(!c.compiled.programs[0].sleepable);
    assert!(c.compiled.read_sites.is_empty());
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    load(&c);

    let c = compile("@[str(arg0), ustack] = count();", machine);
    assert!(!c.compiled.programs[0].sleepable);
    assert!(!calls_kfunc(&c));
    if let Faulting::Yes(_) = machine.faulting {
        assert!(
            c.warnings.iter().any(|w| w
                .contains("fleet:req reads the traced process's memory only from pages")
                && w.contains("ustack")),
            "{:?}",
            c.warnings
        );
    }
    load(&c);
}

/// Every construct that lives in scratch memory or runs as a callback,
/// around reads that may sleep: the verifier must take each.
#[test]
fn the_verifier_accepts_sleepable_reads_in_every_construct() {
    if fixture().is_none() {
        return;
    }
    let machine = probed();
    for body in [
        // Strings in keys, values, variables, tuples, printf.
        r#"$m = str(arg0); @by[$m, arg1 % 3] = count(); @last = $m; printf("%s %d\n", $m, arg1);"#,
        // A run-time length, a buffer, a struct's char array and member.
        r#"@n[str(arg0, arg2)] = count(); @b[buf(arg0, arg2)] = count();
           @s[((struct request *)arg3)->method, ((struct request *)arg3)->id] = count();"#,
        // Comparisons and searches, which run as bpf_loop callbacks.
        r#"if (str(arg0) == "GET" && strcontains(str(arg0), "E")) { @get = count(); }
           @at[strstr(str(arg0), "T")] = count();"#,
        // Loops whose bodies read, and map walks beside reads.
        r#"for ($i : 0..3) { @l[str(arg0), $i] = count(); }
           @k[str(arg0)] = 1; for ($kv : @k) { @w[$kv.0] = count(); }
           print(@k); clear(@w); zero(@n2); @n2 = count();"#,
        r#"$i = 0; while ($i < 2) { @wh[str(arg0)] = count(); $i++; }"#,
        // join() reads an array of pointers, then each string.
        r#"join(arg3);"#,
    ] {
        let c = compile(body, machine);
        if let Faulting::Yes(_) = machine.faulting {
            assert!(c.compiled.programs[0].sleepable, "{body}");
        }
        load(&c);
    }
}
