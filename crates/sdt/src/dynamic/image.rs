//! The ELF shared object that holds a run-time provider's probes.
//!
//! The image is as small as a shared object that `dlopen` accepts and every
//! USDT reader understands can be, built with the `object` crate's ELF
//! writer. Addresses equal file offsets, so the same numbers serve the
//! notes, the symbols and the segments:
//!
//! | segment | sections | holds |
//! | --- | --- | --- |
//! | `R` at 0 | `.dynsym`, `.dynstr`, `.hash`, `.stapsdt.base` | what `dlopen` and `dlsym` read; the base the notes record |
//! | `R X` on the next page | `.text` | one 8-byte function per probe: `nop5; ret; int3; int3` |
//! | `RW` on the next page | `.dynamic`, `.probes` | the dynamic table; one 16-bit semaphore per probe |
//! | none | `.note.stapsdt`, `.shstrtab` | one note per probe; section names |
//!
//! Each probe's function is called with its argument slots in the System V
//! calling convention's registers, so the note describes them where they
//! are at the function's first instruction: `%rdi`, `%rsi`, `%rdx`, `%rcx`,
//! `%r8`, `%r9`, then the caller's stack (`8(%rsp)`, `16(%rsp)`, ..., above
//! the return address). The site is the 5-byte no-op the `sdt` crate uses,
//! for the same reason: the kernel can turn a traced one into a call instead
//! of a trap. That call pushes below the stack pointer, which is harmless
//! here: at a function's first instruction nothing lives below it.
//!
//! `PT_GNU_STACK` says the object needs no executable stack; without it
//! glibc would make every thread's stack executable when loading it.

use std::format;
use std::string::String;
use std::vec::Vec;

use object::elf;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, SectionIndex, Sym, Writer};
use object::write::StringId;
use object::Endianness;

use super::{ArgType, ProbeDef};

const PAGE: usize = 0x1000;

/// A probe's function: the 5-byte no-op the note points at, `ret`, and
/// two `int3` of padding to the next function.
const FUNCTION: [u8; 8] = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3, 0xcc, 0xcc];

/// The registers of the first six argument slots, by width: 8, 4, 2, 1.
const REGISTERS: [[&str; 4]; 6] = [
    ["rdi", "edi", "di", "dil"],
    ["rsi", "esi", "si", "sil"],
    ["rdx", "edx", "dx", "dl"],
    ["rcx", "ecx", "cx", "cl"],
    ["r8", "r8d", "r8w", "r8b"],
    ["r9", "r9d", "r9w", "r9b"],
];

/// The symbol names through which the loader finds a probe.
pub(crate) fn function_symbol(provider: &str, probe: &str) -> String {
    format!("{provider}.{probe}")
}

pub(crate) fn semaphore_symbol(provider: &str, probe: &str) -> String {
    format!("{provider}.{probe}.semaphore")
}

/// The argument specs of a probe, space-separated, as its note gives them.
pub(crate) fn arg_specs(args: &[ArgType]) -> String {
    let mut specs = Vec::new();
    let mut slot = 0;
    for &arg in args {
        match arg {
            ArgType::Bytes => {
                specs.push(spec(8, false, slot));
                specs.push(spec(8, false, slot + 1));
            }
            _ => {
                let (size, signed) = arg.size_and_sign();
                specs.push(spec(size, signed, slot));
            }
        }
        slot += arg.slots();
    }
    specs.join(" ")
}

/// `[-]SIZE@OPERAND` for argument slot `slot`.
fn spec(size: u8, signed: bool, slot: usize) -> String {
    let sign = if signed { "-" } else { "" };
    match REGISTERS.get(slot) {
        Some(names) => {
            let name = match size {
                8 => names[0],
                4 => names[1],
                2 => names[2],
                _ => names[3],
            };
            format!("{sign}{size}@%{name}")
        }
        // Above the return address; a narrower value is the slot's low
        // bytes, which on little-endian x86-64 start at the slot.
        None => format!("{sign}{size}@{}(%rsp)", 8 * (slot - REGISTERS.len() + 1)),
    }
}

/// Where the loader finds each probe: the addresses (before relocation)
/// of its function and semaphore, in the order of the definitions.
#[derive(Debug)]
pub(crate) struct Layout {
    pub functions: Vec<u64>,
    pub semaphores: Vec<u64>,
}

/// Builds the shared object for `provider`'s `probes`.
///
/// The `object` crate's ELF writer works in two passes: everything is
/// reserved first, which fixes every offset, then written in the same
/// order. [`Plan::reserve`] is the first pass; the `write_*` methods are
/// the second, part by part.
pub(crate) fn build(
    provider: &str,
    probes: &[ProbeDef],
) -> Result<(Vec<u8>, Layout), object::write::Error> {
    let names: Vec<(String, String)> = probes
        .iter()
        .map(|p| {
            (
                function_symbol(provider, &p.name),
                semaphore_symbol(provider, &p.name),
            )
        })
        .collect();
    let mut image = Vec::new();
    let mut writer = Writer::new(Endianness::Little, true, &mut image);
    let plan = Plan::reserve(&mut writer, provider, probes, &names);
    plan.write_headers(&mut writer)?;
    plan.write_dynamic_symbols(&mut writer, &names);
    plan.write_contents(&mut writer)?;
    plan.write_section_headers(&mut writer);
    debug_assert_eq!(writer.reserved_len(), image.len());
    Ok((image, plan.layout))
}

/// What the first pass reserved: section names and indices, symbol
/// names, and the offset of every part of the file.
struct Plan {
    base_name: StringId,
    text_name: StringId,
    text_index: SectionIndex,
    probes_name: StringId,
    probes_index: SectionIndex,
    note_name: StringId,
    /// Each probe's function and semaphore symbol names.
    symbols: Vec<(StringId, StringId)>,
    symbol_count: u32,
    hash_buckets: u32,
    dynsym_offset: usize,
    dynstr_offset: usize,
    hash_offset: usize,
    base_offset: usize,
    read_only_end: usize,
    text_offset: usize,
    text_end: usize,
    dynamic_offset: usize,
    probes_offset: usize,
    writable_end: usize,
    notes: Vec<u8>,
    note_offset: usize,
    layout: Layout,
}

/// The entries of `.dynamic`, `DT_NULL` included.
const DYNAMIC_ENTRIES: usize = 6;

impl Plan {
    /// The first pass: sections, symbols, then the three segments and the
    /// notes, in file order.
    fn reserve<'a>(
        writer: &mut Writer<'a>,
        provider: &str,
        probes: &[ProbeDef],
        names: &'a [(String, String)],
    ) -> Plan {
        writer.reserve_file_header();
        writer.reserve_program_headers(5);

        writer.reserve_null_section_index();
        writer.reserve_dynsym_section_index();
        writer.reserve_dynstr_section_index();
        writer.reserve_hash_section_index();
        let base_name = writer.add_section_name(b".stapsdt.base");
        writer.reserve_section_index();
        let text_name = writer.add_section_name(b".text");
        let text_index = writer.reserve_section_index();
        writer.reserve_dynamic_section_index();
        let probes_name = writer.add_section_name(b".probes");
        let probes_index = writer.reserve_section_index();
        let note_name = writer.add_section_name(b".note.stapsdt");
        writer.reserve_section_index();
        writer.reserve_shstrtab_section_index();

        writer.reserve_null_dynamic_symbol_index();
        let mut symbols = Vec::new();
        for (function, semaphore) in names {
            let function = writer.add_dynamic_string(function.as_bytes());
            writer.reserve_dynamic_symbol_index();
            let semaphore = writer.add_dynamic_string(semaphore.as_bytes());
            writer.reserve_dynamic_symbol_index();
            symbols.push((function, semaphore));
        }

        // The read-only segment, from the file header on.
        let dynsym_offset = writer.reserve_dynsym();
        let dynstr_offset = writer.reserve_dynstr();
        let symbol_count = writer.dynamic_symbol_count();
        let hash_buckets = (symbol_count / 2).max(1);
        let hash_offset = writer.reserve_hash(hash_buckets, symbol_count);
        let base_offset = writer.reserve(1, 1);
        let read_only_end = writer.reserved_len();

        writer.reserve_until(read_only_end.next_multiple_of(PAGE));
        let text_offset = writer.reserve(FUNCTION.len() * probes.len(), 16);
        let text_end = writer.reserved_len();

        writer.reserve_until(text_end.next_multiple_of(PAGE));
        let dynamic_offset = writer.reserve_dynamic(DYNAMIC_ENTRIES);
        let probes_offset = writer.reserve(2 * probes.len(), 2);
        let writable_end = writer.reserved_len();

        let layout = Layout {
            functions: (0..probes.len())
                .map(|i| (text_offset + i * FUNCTION.len()) as u64)
                .collect(),
            semaphores: (0..probes.len())
                .map(|i| (probes_offset + 2 * i) as u64)
                .collect(),
        };
        let notes = notes(
            provider,
            probes,
            &layout.functions,
            &layout.semaphores,
            base_offset as u64,
        );
        let note_offset = writer.reserve(notes.len(), 4);
        writer.reserve_shstrtab();
        writer.reserve_section_headers();
        Plan {
            base_name,
            text_name,
            text_index,
            probes_name,
            probes_index,
            note_name,
            symbols,
            symbol_count,
            hash_buckets,
            dynsym_offset,
            dynstr_offset,
            hash_offset,
            base_offset,
            read_only_end,
            text_offset,
            text_end,
            dynamic_offset,
            probes_offset,
            writable_end,
            notes,
            note_offset,
            layout,
        }
    }

    /// The file header and the program headers: the three loaded
    /// segments, the dynamic table, and a stack that is not executable.
    fn write_headers(&self, writer: &mut Writer<'_>) -> Result<(), object::write::Error> {
        writer.write_file_header(&FileHeader {
            os_abi: elf::ELFOSABI_NONE,
            abi_version: 0,
            e_type: elf::ET_DYN,
            e_machine: elf::EM_X86_64,
            e_entry: 0,
            e_flags: 0,
        })?;
        writer.write_align_program_headers();
        let load = |offset: usize, end: usize, flags: u32| ProgramHeader {
            p_type: elf::PT_LOAD,
            p_flags: flags,
            p_offset: offset as u64,
            p_vaddr: offset as u64,
            p_paddr: offset as u64,
            p_filesz: (end - offset) as u64,
            p_memsz: (end - offset) as u64,
            p_align: PAGE as u64,
        };
        let (rw, rx) = (elf::PF_R | elf::PF_W, elf::PF_R | elf::PF_X);
        writer.write_program_header(&load(0, self.read_only_end, elf::PF_R));
        writer.write_program_header(&load(self.text_offset, self.text_end, rx));
        writer.write_program_header(&load(self.dynamic_offset, self.writable_end, rw));
        writer.write_program_header(&ProgramHeader {
            p_type: elf::PT_DYNAMIC,
            p_align: 8,
            ..load(self.dynamic_offset, self.probes_offset, rw)
        });
        writer.write_program_header(&ProgramHeader {
            p_type: elf::PT_GNU_STACK,
            p_flags: rw,
            p_offset: 0,
            p_vaddr: 0,
            p_paddr: 0,
            p_filesz: 0,
            p_memsz: 0,
            p_align: 16,
        });
        Ok(())
    }

    /// `.dynsym`, `.dynstr` and `.hash`: a function and a semaphore symbol
    /// per probe, which `dlsym` finds.
    fn write_dynamic_symbols(&self, writer: &mut Writer<'_>, names: &[(String, String)]) {
        writer.write_null_dynamic_symbol();
        let addresses = self.layout.functions.iter().zip(&self.layout.semaphores);
        for (&(function, semaphore), (&at, &semaphore_at)) in self.symbols.iter().zip(addresses) {
            writer.write_dynamic_symbol(&Sym {
                name: Some(function),
                section: Some(self.text_index),
                st_info: (elf::STB_GLOBAL << 4) | elf::STT_FUNC,
                st_other: elf::STV_DEFAULT,
                st_shndx: 0,
                st_value: at,
                st_size: 6,
            });
            writer.write_dynamic_symbol(&Sym {
                name: Some(semaphore),
                section: Some(self.probes_index),
                st_info: (elf::STB_GLOBAL << 4) | elf::STT_OBJECT,
                st_other: elf::STV_DEFAULT,
                st_shndx: 0,
                st_value: semaphore_at,
                st_size: 2,
            });
        }
        writer.write_dynstr();
        writer.write_hash(self.hash_buckets, self.symbol_count, |i| {
            // Symbol 0 is the null symbol; then a function and a semaphore per probe.
            let i = (i as usize).checked_sub(1)?;
            let (function, semaphore) = &names[i / 2];
            let name = if i % 2 == 0 { function } else { semaphore };
            Some(elf::hash(name.as_bytes()))
        });
    }

    /// The base byte, the functions, the dynamic table, the semaphores,
    /// the notes and the section names.
    fn write_contents(&self, writer: &mut Writer<'_>) -> Result<(), object::write::Error> {
        let probes = self.layout.functions.len();
        writer.pad_until(self.base_offset);
        writer.write(&[0]);

        writer.pad_until(self.text_offset);
        for _ in 0..probes {
            writer.write(&FUNCTION);
        }

        writer.pad_until(self.dynamic_offset);
        writer.write_align_dynamic();
        writer.write_dynamic(elf::DT_HASH, self.hash_offset as u64)?;
        writer.write_dynamic(elf::DT_STRTAB, self.dynstr_offset as u64)?;
        writer.write_dynamic(elf::DT_SYMTAB, self.dynsym_offset as u64)?;
        let dynstr_len = writer.dynstr_len();
        writer.write_dynamic(elf::DT_STRSZ, dynstr_len as u64)?;
        writer.write_dynamic(elf::DT_SYMENT, 24)?;
        writer.write_dynamic(elf::DT_NULL, 0)?;
        writer.pad_until(self.probes_offset);
        writer.write(&std::vec![0; 2 * probes]);

        writer.pad_until(self.note_offset);
        writer.write(&self.notes);
        writer.write_shstrtab();
        Ok(())
    }

    /// The section headers, in the order their indices were reserved.
    fn write_section_headers(&self, writer: &mut Writer<'_>) {
        writer.write_null_section_header();
        writer.write_dynsym_section_header(self.dynsym_offset as u64, 1);
        writer.write_dynstr_section_header(self.dynstr_offset as u64);
        writer.write_hash_section_header(self.hash_offset as u64);
        let section =
            |name, sh_type, flags: u32, offset: usize, size: usize, align| SectionHeader {
                name: Some(name),
                sh_type,
                sh_flags: flags.into(),
                sh_addr: if flags & elf::SHF_ALLOC != 0 {
                    offset as u64
                } else {
                    0
                },
                sh_offset: offset as u64,
                sh_size: size as u64,
                sh_link: 0,
                sh_info: 0,
                sh_addralign: align,
                sh_entsize: 0,
            };
        writer.write_section_header(&section(
            self.base_name,
            elf::SHT_PROGBITS,
            elf::SHF_ALLOC,
            self.base_offset,
            1,
            1,
        ));
        writer.write_section_header(&section(
            self.text_name,
            elf::SHT_PROGBITS,
            elf::SHF_ALLOC | elf::SHF_EXECINSTR,
            self.text_offset,
            self.text_end - self.text_offset,
            16,
        ));
        writer.write_dynamic_section_header(self.dynamic_offset as u64);
        writer.write_section_header(&section(
            self.probes_name,
            elf::SHT_PROGBITS,
            elf::SHF_ALLOC | elf::SHF_WRITE,
            self.probes_offset,
            self.writable_end - self.probes_offset,
            2,
        ));
        writer.write_section_header(&section(
            self.note_name,
            elf::SHT_NOTE,
            0,
            self.note_offset,
            self.notes.len(),
            4,
        ));
        writer.write_shstrtab_section_header();
    }
}

/// The `.note.stapsdt` section: one note per probe, in the layout of
/// `<sys/sdt.h>`.
fn notes(
    provider: &str,
    probes: &[ProbeDef],
    functions: &[u64],
    semaphores: &[u64],
    base: u64,
) -> Vec<u8> {
    const OWNER: &[u8] = b"stapsdt\0";
    const NT_STAPSDT: u32 = 3;
    let mut notes = Vec::new();
    for (i, probe) in probes.iter().enumerate() {
        let mut desc = Vec::new();
        for address in [functions[i], base, semaphores[i]] {
            desc.extend_from_slice(&address.to_le_bytes());
        }
        for text in [provider, &probe.name, &arg_specs(&probe.args)] {
            desc.extend_from_slice(text.as_bytes());
            desc.push(0);
        }
        notes.extend_from_slice(&(OWNER.len() as u32).to_le_bytes());
        notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        notes.extend_from_slice(&NT_STAPSDT.to_le_bytes());
        notes.extend_from_slice(OWNER);
        notes.extend_from_slice(&desc);
        notes.resize(notes.len().next_multiple_of(4), 0);
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn specs_follow_the_calling_convention() {
        use ArgType::*;
        assert_eq!(arg_specs(&[]), "");
        assert_eq!(
            arg_specs(&[U64, Str, I32, U8, I16, Ptr]),
            "8@%rdi 8@%rsi -4@%edx 1@%cl -2@%r8w 8@%r9"
        );
        // A byte string is a pointer and a length; slots past the sixth
        // are on the stack above the return address.
        assert_eq!(
            arg_specs(&[Bytes, I64, I64, I64, I64, U32, I8]),
            "8@%rdi 8@%rsi -8@%rdx -8@%rcx -8@%r8 -8@%r9 4@8(%rsp) -1@16(%rsp)"
        );
    }

    #[test]
    fn notes_are_four_byte_aligned() {
        let probes = vec![
            ProbeDef {
                name: "a".into(),
                args: vec![ArgType::U64],
            },
            ProbeDef {
                name: "bb".into(),
                args: vec![],
            },
        ];
        let notes = notes("p", &probes, &[16, 24], &[32, 34], 8);
        assert_eq!(notes.len() % 4, 0);
        // The first note's description: pc, base, semaphore, "p\0a\08@%rdi\0".
        let desc_len = u32::from_le_bytes(notes[4..8].try_into().unwrap()) as usize;
        assert_eq!(desc_len, 24 + "p\0a\08@%rdi\0".len());
        assert_eq!(&notes[20..28], &16u64.to_le_bytes());
        assert_eq!(&notes[36..44], &32u64.to_le_bytes());
    }
}
