//! The object of `dtrace -G`: the probes' semaphores.
//!
//! SystemTap's `dtrace -G` compiles a C file that defines them; sdt writes
//! the same object directly, with the `object` crate, so that no C
//! compiler is needed: one section `.probes` (allocated, writable) holding
//! an `unsigned short` per probe, each a global, hidden, 2-byte object
//! symbol `provider_name_semaphore`, plus an empty `.note.GNU-stack` so
//! that the linker does not ask for an executable stack. The objects that
//! DTrace's own `-G` would patch are accepted and left alone, as
//! SystemTap's `dtrace` does: `<sys/sdt.h>` probes need no patching.
//!
//! One difference from SystemTap's object, on purpose: `.probes` is
//! aligned to a page (4 KiB), where SystemTap's is aligned to 2 bytes. lld
//! puts small writable data on the file page that also ends the RELRO
//! segment, and the kernel raises a semaphore, by its file offset, in the
//! first writable mapping of that offset: at `exec`, the RELRO one, which
//! the loader then zeroes and write-protects. Programs linked that way
//! never see a semaphore raised when the tracer attached before they
//! started (`sdt trace -c`, system-wide tracing); on a page of its own,
//! the semaphore is mapped once. The tests show both.

use object::write::{Object, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind, SymbolScope,
};

use crate::header::semaphore_symbol;
use crate::parse::ProviderFile;

/// The machine the object is for: the one sdt was built for.
fn host() -> Option<(Architecture, Endianness)> {
    Some(match std::env::consts::ARCH {
        "x86_64" => (Architecture::X86_64, Endianness::Little),
        "x86" => (Architecture::I386, Endianness::Little),
        "aarch64" => (Architecture::Aarch64, Endianness::Little),
        "riscv64" => (Architecture::Riscv64, Endianness::Little),
        "s390x" => (Architecture::S390x, Endianness::Big),
        "powerpc64" => (Architecture::PowerPc64, Endianness::Big),
        "arm" => (Architecture::Arm, Endianness::Little),
        _ => return None,
    })
}

impl ProviderFile {
    /// The relocatable object of `dtrace -G`, for the machine sdt runs on.
    pub fn semaphores_object(&self) -> Result<Vec<u8>, String> {
        let (architecture, endian) =
            host().ok_or_else(|| format!("no ELF object format for {}", std::env::consts::ARCH))?;
        let mut object = Object::new(BinaryFormat::Elf, architecture, endian);
        let probes = object.add_section(Vec::new(), b".probes".to_vec(), SectionKind::Data);
        // On a page of its own: see the module docs.
        object.set_section_data(probes, Vec::new(), 4096);
        for provider in &self.providers {
            for probe in &provider.probes {
                let offset = object.append_section_data(probes, &[0, 0], 2);
                object.add_symbol(Symbol {
                    name: semaphore_symbol(&provider.name, &probe.name).into_bytes(),
                    value: offset,
                    size: 2,
                    kind: SymbolKind::Data,
                    // Global and hidden: one per executable or library.
                    scope: SymbolScope::Linkage,
                    weak: false,
                    section: SymbolSection::Section(probes),
                    flags: SymbolFlags::None,
                });
            }
        }
        object.add_section(Vec::new(), b".note.GNU-stack".to_vec(), SectionKind::Other);
        object.write().map_err(|e| e.to_string())
    }
}
