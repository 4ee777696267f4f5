//! Probe discovery on ELF files that the tests build byte by byte: both
//! classes and byte orders, prelinked files, stripped section headers,
//! and every way a note can be broken.

mod common;

use common::elf_writer::*;
use sdt_elf::{
    classify, parse, site_code, Arch, ElfError, ElfFile, Location, Memory, NoteAddresses, Register,
    Semaphore, SiteInstruction,
};

fn reg(name: &'static str, width: u8) -> Location<'static> {
    Location::Register(Register {
        name,
        width,
        offset: 0,
    })
}

#[test]
fn elf64_little_endian_probes_sites_and_semaphores() {
    let mut elf = Elf::x86_64();
    elf.probe(
        TEXT_ADDR + 0x10,
        DATA_ADDR + 0x20,
        "app",
        "start",
        "-4@%edi 8@%rsi",
    )
    .probe(TEXT_ADDR + 0x30, 0, "app", "tick", "")
    .probe(
        TEXT_ADDR + 0x50,
        DATA_ADDR + 0x22,
        "app",
        "start",
        "8@-8(%rbp) 1@$0",
    );
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(probes.arch, Arch::X86_64);
    assert!(probes.skipped.is_empty());
    let list: Vec<_> = probes
        .iter()
        .map(|p| (p.provider, p.name, p.sites.len()))
        .collect();
    assert_eq!(list, [("app", "start", 2), ("app", "tick", 1)]);

    let start = probes.iter().next().unwrap();
    let site = start.sites[0];
    assert_eq!(
        site.note,
        NoteAddresses {
            pc: TEXT_ADDR + 0x10,
            base: STAPSDT_BASE,
            semaphore: DATA_ADDR + 0x20
        }
    );
    assert_eq!(site.address, TEXT_ADDR + 0x10);
    assert_eq!(site.file_offset, Some(TEXT_OFFSET + 0x10));
    assert_eq!(
        site.semaphore,
        Some(Semaphore {
            address: DATA_ADDR + 0x20,
            file_offset: Some(DATA_OFFSET + 0x20)
        })
    );
    let args: Vec<_> = site
        .args()
        .map(|a| (a.size, a.signed, a.location))
        .collect();
    assert_eq!(
        args,
        [
            (Some(4), true, reg("rdi", 4)),
            (Some(8), false, reg("rsi", 8))
        ]
    );

    // The second site keeps its own spec and semaphore.
    let second = start.sites[1];
    assert_eq!(second.file_offset, Some(TEXT_OFFSET + 0x50));
    assert_eq!(
        second.semaphore.unwrap().file_offset,
        Some(DATA_OFFSET + 0x22)
    );
    let args: Vec<_> = second.args().map(|a| a.location).collect();
    assert_eq!(
        args,
        [
            Location::Memory(Memory {
                base: Some("rbp"),
                index: None,
                scale: 1,
                offset: -8
            }),
            Location::Constant(0)
        ]
    );

    let tick = probes.iter().nth(1).unwrap();
    assert_eq!(tick.sites[0].semaphore, None);
    assert_eq!(tick.sites[0].args().count(), 0);
    assert_eq!(probes.sites().len(), 3);
}

#[test]
fn elf32_little_endian() {
    let mut elf = Elf::new(false, false, EM_386);
    elf.probe(
        TEXT_ADDR + 4,
        DATA_ADDR + 8,
        "p32",
        "n",
        "-4@%eax 4@8(%esp)",
    );
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(probes.arch, Arch::I386);
    let site = probes.iter().next().unwrap().sites[0];
    assert_eq!(site.note.pc, TEXT_ADDR + 4);
    assert_eq!(site.note.base, STAPSDT_BASE);
    assert_eq!(site.file_offset, Some(TEXT_OFFSET + 4));
    assert_eq!(site.semaphore.unwrap().file_offset, Some(DATA_OFFSET + 8));
    assert_eq!(site.args().next().unwrap().location, reg("eax", 4));
}

#[test]
fn big_endian_in_both_classes() {
    for (is_64, machine, arch) in [
        (true, EM_S390, Arch::S390x),
        (false, EM_PPC, Arch::Other(EM_PPC)),
    ] {
        let mut elf = Elf::new(is_64, true, machine);
        elf.probe(
            TEXT_ADDR + 0x40,
            DATA_ADDR + 2,
            "be",
            "probe",
            "8@%r2 -4@160(%r15)",
        );
        let data = elf.build();
        let probes = parse(&data).unwrap();
        assert_eq!(probes.arch, arch);
        let probe = probes.iter().next().unwrap();
        assert_eq!((probe.provider, probe.name), ("be", "probe"));
        let site = probe.sites[0];
        assert_eq!(site.note.pc, TEXT_ADDR + 0x40, "is_64={is_64}");
        assert_eq!(site.file_offset, Some(TEXT_OFFSET + 0x40));
        assert_eq!(site.semaphore.unwrap().file_offset, Some(DATA_OFFSET + 2));
        assert_eq!(site.arg_spec, "8@%r2 -4@160(%r15)");
    }
    // On s390x the arguments decode.
    let mut elf = Elf::new(true, true, EM_S390);
    elf.probe(TEXT_ADDR, 0, "be", "probe", "8@%r2");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(
        probes.iter().next().unwrap().sites[0]
            .args()
            .next()
            .unwrap()
            .location,
        reg("r2", 8)
    );
}

#[test]
fn prelink_correction_moves_pc_and_semaphore() {
    // Linked with .stapsdt.base at 0x301f00, then moved by +0x100000.
    let link_base = STAPSDT_BASE - 0x10_0000;
    let mut elf = Elf::x86_64();
    elf.probe_with_base(
        TEXT_ADDR + 0x10 - 0x10_0000,
        link_base,
        DATA_ADDR + 4 - 0x10_0000,
        "pre",
        "linked",
        "",
    );
    let data = elf.build();
    let probes = parse(&data).unwrap();
    let site = probes.iter().next().unwrap().sites[0];
    assert_eq!(
        site.note.pc,
        TEXT_ADDR + 0x10 - 0x10_0000,
        "raw fields are kept"
    );
    assert_eq!(site.note.base, link_base);
    assert_eq!(site.address, TEXT_ADDR + 0x10);
    assert_eq!(site.file_offset, Some(TEXT_OFFSET + 0x10));
    assert_eq!(
        site.semaphore,
        Some(Semaphore {
            address: DATA_ADDR + 4,
            file_offset: Some(DATA_OFFSET + 4)
        })
    );
}

#[test]
fn prelink_correction_in_elf32_wraps_at_32_bits() {
    let mut elf = Elf::new(false, false, EM_386);
    // The section moved down by 0x1000.
    elf.stapsdt_base = Some(STAPSDT_BASE);
    elf.probe_with_base(TEXT_ADDR + 0x1010, STAPSDT_BASE + 0x1000, 0, "p", "n", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    let site = probes.iter().next().unwrap().sites[0];
    assert_eq!(site.address, TEXT_ADDR + 0x10);
}

#[test]
fn no_correction_without_base_or_section() {
    let mut elf = Elf::x86_64();
    elf.probe_with_base(TEXT_ADDR + 8, 0, 0, "p", "zero_base", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(
        probes.iter().next().unwrap().sites[0].address,
        TEXT_ADDR + 8
    );

    let mut elf = Elf::x86_64();
    elf.stapsdt_base = None;
    elf.probe_with_base(TEXT_ADDR + 8, 0x1234, 0, "p", "no_section", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(
        probes.iter().next().unwrap().sites[0].address,
        TEXT_ADDR + 8
    );
}

#[test]
fn stripped_section_headers_use_pt_note() {
    let mut elf = Elf::x86_64();
    elf.sections = false;
    elf.note_segment = true;
    elf.note(b"GNU\0", 3, &[0xab; 20]) // a build ID: not ours
        .probe(TEXT_ADDR + 0x20, DATA_ADDR, "stripped", "probe", "8@%rax")
        .note(b"stapsdt\0", 4, b"wrong type");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert!(probes.skipped.is_empty(), "{:?}", probes.skipped);
    let names: Vec<_> = probes.iter().map(|p| p.name).collect();
    assert_eq!(names, ["probe"]);
    let site = probes.iter().next().unwrap().sites[0];
    assert_eq!(site.file_offset, Some(TEXT_OFFSET + 0x20));
}

#[test]
fn no_notes_at_all() {
    let mut elf = Elf::x86_64();
    elf.sections = false;
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert!(probes.is_empty());
    assert_eq!(probes.len(), 0);
}

#[test]
fn addresses_outside_segments_have_no_file_offset() {
    let mut elf = Elf::x86_64();
    // The probe in the data segment (not executable), the semaphore in text
    // (not writable), and a probe outside every segment.
    elf.probe(DATA_ADDR + 0x10, TEXT_ADDR + 0x10, "odd", "in_data", "")
        .probe(0x10, 0, "odd", "nowhere", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    let sites: Vec<_> = probes.iter().map(|p| p.sites[0]).collect();
    assert_eq!(sites[0].file_offset, None);
    assert_eq!(sites[0].semaphore.unwrap().file_offset, None);
    assert_eq!(sites[1].file_offset, None);
}

#[test]
fn corrupt_notes_are_skipped_and_the_rest_is_kept() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, 0, "good", "first", "8@%rdi");
    // Too short for three addresses.
    elf.note(b"stapsdt\0", 3, &[0; 16]);
    // No NUL after the provider, the name, the arguments.
    let mut addresses = Vec::new();
    for v in [TEXT_ADDR, STAPSDT_BASE, 0u64] {
        addresses.extend(v.to_le_bytes());
    }
    let with = |tail: &[u8]| [addresses.as_slice(), tail].concat();
    elf.note(b"stapsdt\0", 3, &with(b"prov"));
    elf.note(b"stapsdt\0", 3, &with(b"prov\0name"));
    elf.note(b"stapsdt\0", 3, &with(b"prov\0name\08@%rax"));
    // Not UTF-8.
    elf.note(b"stapsdt\0", 3, &with(b"pr\xffov\0name\0\0"));
    // Arguments omitted entirely: accepted, with no arguments.
    elf.note(b"stapsdt\0", 3, &with(b"old\0noargs\0"));
    elf.probe(TEXT_ADDR + 1, 0, "good", "second", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    let names: Vec<_> = probes
        .iter()
        .map(|p| format!("{}:{}", p.provider, p.name))
        .collect();
    assert_eq!(names, ["good:first", "old:noargs", "good:second"]);
    let reasons: Vec<_> = probes.skipped.iter().map(|s| s.reason).collect();
    assert_eq!(
        reasons,
        [
            "the note is too short for its three addresses",
            "the provider is not NUL-terminated",
            "the probe name is not NUL-terminated",
            "the argument spec is not NUL-terminated",
            "the note's strings are not UTF-8",
        ]
    );
    // Offsets point at the note headers, in the notes area.
    for skipped in &probes.skipped {
        assert!(skipped.offset > NOTES_OFFSET && skipped.offset < NOTES_OFFSET + 0x200);
        assert!(skipped
            .to_string()
            .contains("skipped the probe note at file offset 0x"));
    }
}

#[test]
fn a_note_with_bad_sizes_ends_the_section() {
    for (namesz, descsz) in [(0xffff_fff0, 4), (8, 0xffff_fff0), (8, 4000), (400, 4)] {
        let mut elf = Elf::x86_64();
        elf.probe(TEXT_ADDR, 0, "good", "before", "");
        elf.raw_note(namesz, descsz, 3, b"stapsdt\0", &[0; 24]);
        elf.probe(TEXT_ADDR, 0, "lost", "after", "");
        let data = elf.build();
        let probes = parse(&data).unwrap();
        let names: Vec<_> = probes.iter().map(|p| p.name).collect();
        if namesz == 400 {
            // The framing swallows what follows but stays inside the section.
            assert!(names.starts_with(&["before"]));
        } else {
            assert_eq!(names, ["before"], "namesz={namesz:#x} descsz={descsz:#x}");
            assert_eq!(probes.skipped.len(), 1);
            assert!(probes.skipped[0].reason.contains("past the end"));
        }
    }
}

#[test]
fn truncated_header_in_the_note_section() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, 0, "good", "only", "");
    elf.notes.extend_from_slice(&[8, 0, 0]); // 3 stray bytes
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(probes.len(), 1);
    assert_eq!(probes.skipped.len(), 1);
}

#[test]
fn not_elf_and_truncated_files() {
    assert_eq!(parse(b"").unwrap_err(), ElfError::NotElf);
    assert_eq!(
        parse(b"#!/bin/sh\necho hi\n").unwrap_err(),
        ElfError::NotElf
    );
    assert!(matches!(
        parse(b"\x7fELF").unwrap_err(),
        ElfError::Corrupt(_)
    ));

    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, DATA_ADDR, "p", "n", "8@%rax");
    let data = elf.build();
    for len in 0..data.len() {
        // Never a panic; a cut through headers is an error.
        let _ = parse(&data[..len]);
    }
    for len in [10, 40, 63, 100] {
        assert!(parse(&data[..len]).is_err(), "len {len}");
    }
    // Section headers cut off.
    let err = parse(&data[..data.len() - 10]).unwrap_err();
    assert!(err.to_string().contains("section headers"), "{err}");
}

#[test]
fn notes_section_beyond_the_file_is_reported() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR, 0, "p", "n", "");
    let mut data = elf.build();
    // Patch the .note.stapsdt section's size (section 1, sh_size at +32).
    let shoff = u64::from_le_bytes(data[40..48].try_into().unwrap()) as usize;
    data[shoff + 64 + 32..shoff + 64 + 40].copy_from_slice(&u64::MAX.to_le_bytes());
    let probes = parse(&data).unwrap();
    assert!(probes.is_empty());
    assert_eq!(probes.skipped.len(), 1);
}

#[test]
fn site_code_and_classification() {
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR + 0x10, 0, "p", "nop", "")
        .probe(SEGMENT_SIZE + TEXT_ADDR - 2, 0, "p", "at_end", "")
        .probe(0x10, 0, "p", "nowhere", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    let sites: Vec<_> = probes.iter().map(|p| p.sites[0]).collect();
    assert_eq!(site_code(&data, &sites[0]).len(), 15);
    assert_eq!(
        classify(Arch::X86_64, site_code(&data, &sites[0])),
        SiteInstruction::Nop { len: 1 }
    );
    assert_eq!(site_code(&data, &sites[2]), b"");
    assert_eq!(classify(Arch::X86_64, b""), SiteInstruction::NotNop);

    let mut elf = Elf::x86_64();
    elf.text_fill = 0xcc;
    elf.probe(TEXT_ADDR + 0x10, 0, "p", "int3", "");
    let data = elf.build();
    let probes = parse(&data).unwrap();
    let site = probes.iter().next().unwrap().sites[0];
    assert_eq!(
        classify(site.arch, site_code(&data, &site)),
        SiteInstruction::NotNop
    );
}

#[test]
fn elf_file_open_and_errors() {
    let dir = std::env::temp_dir().join(format!("sdt-elf-synthetic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("probes.elf");
    let mut elf = Elf::x86_64();
    elf.probe(TEXT_ADDR + 0x10, 0, "file", "probe", "");
    std::fs::write(&path, elf.build()).unwrap();
    let file = ElfFile::open(&path).unwrap();
    assert_eq!(file.path(), path);
    let probes = file.probes().unwrap();
    let site = probes.iter().next().unwrap().sites[0];
    assert_eq!(
        file.site_instruction(&site),
        SiteInstruction::Nop { len: 1 }
    );

    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let err = ElfFile::open(&empty).unwrap().probes().unwrap_err();
    assert!(
        matches!(
            err,
            sdt_elf::Error::Elf {
                source: ElfError::NotElf,
                ..
            }
        ),
        "{err}"
    );

    let err = ElfFile::open(dir.join("missing")).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    let err = ElfFile::open(&dir).unwrap_err();
    assert!(matches!(err, sdt_elf::Error::Open { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn many_probes_group_in_linear_time() {
    let mut elf = Elf::x86_64();
    let names: Vec<String> = (0..2000).map(|i| format!("p{}", i % 500)).collect();
    for (i, name) in names.iter().enumerate() {
        elf.probe(TEXT_ADDR + (i as u64 % 0x1000), 0, "many", name, "");
    }
    let data = elf.build();
    let probes = parse(&data).unwrap();
    assert_eq!(probes.len(), 500);
    for (i, probe) in probes.iter().enumerate() {
        assert_eq!(probe.name, format!("p{i}"));
        let offsets: Vec<_> = probe.sites.iter().map(|s| s.address - TEXT_ADDR).collect();
        assert_eq!(
            offsets,
            [i as u64, i as u64 + 500, i as u64 + 1000, i as u64 + 1500]
        );
    }
}
