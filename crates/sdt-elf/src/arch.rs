//! The instruction set a file was built for.
//!
//! Argument specs are assembler operands, so their grammar depends on the
//! architecture (`%rax` on x86-64, `x0` on aarch64, `3` meaning r3 on
//! PowerPC). The probe's no-op instruction differs too. Both are decided by
//! the ELF header's `e_machine` and, where one machine number covers two
//! register widths, its class.

use std::fmt;

use object::elf;

/// The architecture of an ELF file, as far as probe discovery cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arch {
    /// x86-64, including the x32 ABI (ELF32 files with `EM_X86_64`).
    X86_64,
    /// 32-bit x86.
    I386,
    /// 64-bit Arm.
    Aarch64,
    /// 64-bit RISC-V.
    Riscv64,
    /// 64-bit IBM Z.
    S390x,
    /// 64-bit PowerPC, big-endian.
    Ppc64,
    /// 64-bit PowerPC, little-endian: same operands as [`Arch::Ppc64`], but
    /// instructions are stored in the other byte order.
    Ppc64le,
    /// Anything else. Probes are still listed, but argument operands are not
    /// decoded and probe sites are not checked.
    Other(u16),
}

impl Arch {
    /// Maps an ELF header's `e_machine`, class and byte order to an
    /// architecture.
    pub fn from_elf(e_machine: u16, is_64: bool, big_endian: bool) -> Arch {
        match (e_machine, is_64) {
            (elf::EM_X86_64, _) => Arch::X86_64,
            (elf::EM_386, false) => Arch::I386,
            (elf::EM_AARCH64, true) => Arch::Aarch64,
            (elf::EM_RISCV, true) => Arch::Riscv64,
            (elf::EM_S390, true) => Arch::S390x,
            (elf::EM_PPC64, true) if big_endian => Arch::Ppc64,
            (elf::EM_PPC64, true) => Arch::Ppc64le,
            (machine, _) => Arch::Other(machine),
        }
    }
}

/// A short lower-case name, stable for machine-readable output: `x86-64`,
/// `i386`, `aarch64`, `riscv64`, `s390x`, `ppc64`, `ppc64le`, or `e_machine N`.
impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Arch::X86_64 => f.write_str("x86-64"),
            Arch::I386 => f.write_str("i386"),
            Arch::Aarch64 => f.write_str("aarch64"),
            Arch::Riscv64 => f.write_str("riscv64"),
            Arch::S390x => f.write_str("s390x"),
            Arch::Ppc64 => f.write_str("ppc64"),
            Arch::Ppc64le => f.write_str("ppc64le"),
            Arch::Other(machine) => write!(f, "e_machine {machine}"),
        }
    }
}
