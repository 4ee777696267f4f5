//! Corrupt and truncated DWARF gives errors, never a panic: the fixture's
//! `.debug_info` is damaged byte by byte and cut short, and every lookup
//! and layout is tried on the result.

use object::{Object, ObjectSection, ObjectSymbol};
use sdt_testing::fixture::C;
use sdt_types::{DebugInfo, Lookup};

fn fixture() -> Option<Vec<u8>> {
    build(&[])
}

fn build(flags: &[&str]) -> Option<Vec<u8>> {
    if !sdt_testing::require(sdt_testing::have("cc"), "a C compiler (cc)") {
        return None;
    }
    let out = C::new("tests/fixtures/types/subsys.c")
        .flags(&["-g", "-O2"])
        .flags(flags)
        .build();
    Some(std::fs::read(out).unwrap())
}

/// Everything a user of the crate does with a file.
fn exercise(bytes: Vec<u8>) {
    let functions: Vec<u64> = object::File::parse(&*bytes)
        .map(|f| {
            f.symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text)
                .map(|s| s.address())
                .collect()
        })
        .unwrap_or_default();
    let Ok(Some(info)) = DebugInfo::from_elf_bytes(bytes) else {
        return;
    };
    for address in functions {
        let _ = info.parameter_lines(address);
        if let Ok(Some(f)) = info.function_at(address) {
            for p in f.params {
                let _ = info.passed_as(p.ty);
            }
        }
    }
    for line in [1, 40, 80, 120, 160] {
        let _ = info.line_address(&sdt_types::SourceLine {
            file: "subsys.c".into(),
            line,
            column: None,
        });
    }
    for name in [
        "struct subsystem",
        "enum subsystem_state",
        "listener_t",
        "struct nothing",
    ] {
        if let Ok(Lookup::Found(id)) = info.find(name) {
            let _ = sdt_types::layout(&info, id).map(|l| l.to_text());
            let _ = sdt_types::bpftrace_definitions(&info, id);
        }
    }
}

#[test]
fn the_intact_fixture_reads() {
    let Some(bytes) = fixture() else { return };
    let info = DebugInfo::from_elf_bytes(bytes)
        .unwrap()
        .expect("built with -g");
    let Lookup::Found(id) = info.find("struct subsystem").unwrap() else {
        panic!("struct subsystem is defined")
    };
    let layout = sdt_types::layout(&info, id).unwrap();
    let subnqn = layout.members.iter().find(|m| m.name == "subnqn").unwrap();
    assert_eq!((subnqn.offset, subnqn.size), (4, 256));
}

#[test]
fn damaged_debug_info_gives_errors_not_panics() {
    damage(".debug_info");
}

#[test]
fn damaged_line_tables_and_address_ranges_give_errors_not_panics() {
    damage(".debug_line");
    damage(".debug_aranges");
}

/// Damages `section` of the fixture every way, and reads the result.
fn damage(section: &str) {
    let Some(bytes) = fixture() else { return };
    let (start, size) = {
        let file = object::File::parse(&*bytes).unwrap();
        let section = file.section_by_name(section).unwrap();
        section.file_range().unwrap()
    };
    let (start, size) = (start as usize, size as usize);
    // Truncated: the section's bytes cut at many points (the ELF header
    // still claims the full size, so the cut lands inside the section).
    for cut in (0..size).step_by(size / 40 + 1) {
        let mut damaged = bytes.clone();
        for b in &mut damaged[start + cut..start + size] {
            *b = 0;
        }
        exercise(damaged);
    }
    // Corrupted: one byte at a time set to values that break lengths,
    // forms and references.
    for at in (0..size).step_by(7) {
        for value in [0x00, 0xff, 0x80] {
            let mut damaged = bytes.clone();
            damaged[start + at] = value;
            exercise(damaged);
        }
    }
    // A file that ends inside .debug_info.
    exercise(bytes[..start + size / 2].to_vec());
}

#[test]
fn a_compressed_section_claiming_an_impossible_size_is_an_error() {
    let Some(mut bytes) = build(&["-gz=zlib"]) else {
        return;
    };
    let start = {
        let file = object::File::parse(&*bytes).unwrap();
        let section = file.section_by_name(".debug_info").unwrap();
        section.file_range().unwrap().0 as usize
    };
    // Elf64_Chdr: ch_type, ch_reserved, then ch_size.
    bytes[start + 8..start + 16].copy_from_slice(&(1u64 << 58).to_le_bytes());
    let err = DebugInfo::from_elf_bytes(bytes).expect_err("an impossible size");
    assert!(err.to_string().contains("claims"), "{err}");
}
