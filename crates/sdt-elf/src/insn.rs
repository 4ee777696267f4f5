//! Checking the instruction at a probe site before attaching to it.
//!
//! A uprobe replaces the first byte of an instruction with a breakpoint and
//! later executes the original instruction out of line. At a wrong offset it
//! corrupts the traced program. The probe macros always emit a no-op at the
//! site, so a tracer that finds anything else there should refuse: the file
//! does not match its notes, or the offset is wrong.
//!
//! This module is pure: it classifies bytes. [`site_code`] fetches the bytes
//! of a site from a file's contents.

use crate::{Arch, Site};

/// Longest instruction this module looks at: the x86 limit.
pub const MAX_INSTRUCTION_LEN: usize = 15;

/// What the bytes at a probe site are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteInstruction {
    /// A no-op instruction of `len` bytes starts at the site.
    ///
    /// libbpf's x86-64 convention of a one-byte `nop` followed by a
    /// five-byte `nopl` is a one-byte no-op here: attaching one byte later,
    /// where the kernel would turn the uprobe into a call, is unsafe in C
    /// code, because the call's return address lands in the red zone.
    Nop {
        /// Length of the no-op in bytes.
        len: u8,
    },
    /// Something other than a no-op: attaching here is unsafe.
    NotNop,
    /// No-ops of this architecture are not known, so nothing was checked.
    Unknown,
}

/// Classifies the instruction at the start of `code` for `arch`.
///
/// `code` should hold at least [`MAX_INSTRUCTION_LEN`] bytes when the file
/// has them; an instruction cut short is [`SiteInstruction::NotNop`].
pub fn classify(arch: Arch, code: &[u8]) -> SiteInstruction {
    let nop = |len: usize| SiteInstruction::Nop { len: len as u8 };
    let found = match arch {
        Arch::X86_64 | Arch::I386 => x86_nop_len(code),
        // A64 instructions are little-endian even on big-endian systems.
        Arch::Aarch64 => code.starts_with(&[0x1f, 0x20, 0x03, 0xd5]).then_some(4),
        // `addi x0, x0, 0`, or the compressed `c.nop`.
        Arch::Riscv64 => {
            if code.starts_with(&[0x13, 0x00, 0x00, 0x00]) {
                Some(4)
            } else {
                code.starts_with(&[0x01, 0x00]).then_some(2)
            }
        }
        // `bc 0,D(X,B)` and `bcr 0,R`: a branch with an empty condition mask.
        // `<sys/sdt.h>` emits `nop 0`, which is `47 00 00 00`.
        Arch::S390x => match code {
            [0x47, x, _, _, ..] if x >> 4 == 0 => Some(4),
            [0x07, x, ..] if x >> 4 == 0 => Some(2),
            _ => None,
        },
        // `ori 0,0,0`, in the file's byte order.
        Arch::Ppc64 => code.starts_with(&[0x60, 0x00, 0x00, 0x00]).then_some(4),
        Arch::Ppc64le => code.starts_with(&[0x00, 0x00, 0x00, 0x60]).then_some(4),
        Arch::Other(_) => return SiteInstruction::Unknown,
    };
    found.map_or(SiteInstruction::NotNop, nop)
}

/// Decodes an x86 no-op: `90`, or `0f 1f /0` with any ModRM addressing
/// form (what assemblers emit as multi-byte padding), after any number of
/// `66` (operand size) and `2e` (CS segment) prefixes, which change nothing.
fn x86_nop_len(code: &[u8]) -> Option<usize> {
    let prefixes = code.iter().take_while(|&&b| b == 0x66 || b == 0x2e).count();
    let len = match code.get(prefixes..)? {
        [0x90, ..] => prefixes + 1,
        [0x0f, 0x1f, modrm, rest @ ..] => {
            let (mode, reg, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
            if reg != 0 {
                return None;
            }
            let sib = mode != 0b11 && rm == 0b100;
            let disp = match mode {
                0b00 if rm == 0b101 => 4,
                0b00 if sib && rest.first()? & 7 == 0b101 => 4,
                0b01 => 1,
                0b10 => 4,
                _ => 0,
            };
            prefixes + 3 + usize::from(sib) + disp
        }
        _ => return None,
    };
    (len <= MAX_INSTRUCTION_LEN && len <= code.len()).then_some(len)
}

/// The bytes of the file at a site: up to [`MAX_INSTRUCTION_LEN`] bytes from
/// its file offset, fewer at the end of the file, none if the site has no
/// file offset. `data` is the whole file.
pub fn site_code<'data>(data: &'data [u8], site: &Site<'_>) -> &'data [u8] {
    let Some(start) = site.file_offset.and_then(|o| usize::try_from(o).ok()) else {
        return &[];
    };
    let Some(rest) = data.get(start..) else {
        return &[];
    };
    &rest[..rest.len().min(MAX_INSTRUCTION_LEN)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nop(len: u8) -> SiteInstruction {
        SiteInstruction::Nop { len }
    }

    /// The site bytes followed by unrelated code, as in a real function.
    fn at_site(bytes: &[u8]) -> Vec<u8> {
        let mut code = bytes.to_vec();
        code.extend_from_slice(&[0x48, 0x89, 0xe5, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc]);
        code
    }

    #[test]
    fn x86_multi_byte_nops() {
        let forms: &[&[u8]] = &[
            &[0x90],
            &[0x66, 0x90],
            &[0x0f, 0x1f, 0x00],
            &[0x0f, 0x1f, 0x40, 0x00],
            &[0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
            &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
            &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
            &[
                0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
            ],
            &[0x0f, 0x1f, 0xc0], // nopl %eax
        ];
        for arch in [Arch::X86_64, Arch::I386] {
            for form in forms {
                assert_eq!(
                    classify(arch, &at_site(form)),
                    nop(form.len() as u8),
                    "{form:02x?}"
                );
                // Exactly the instruction, at the end of the file.
                assert_eq!(classify(arch, form), nop(form.len() as u8), "{form:02x?}");
            }
        }
    }

    #[test]
    fn x86_nop_then_five_byte_nop_is_a_one_byte_nop() {
        let code = at_site(&[0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00]);
        assert_eq!(classify(Arch::X86_64, &code), nop(1));
        // A nop followed by other code is a plain one-byte nop.
        assert_eq!(classify(Arch::X86_64, &at_site(&[0x90])), nop(1));
    }

    #[test]
    fn x86_anything_else_is_refused() {
        let refused: &[&[u8]] = &[
            &[],
            &[0xcc],                   // int3: someone else's breakpoint
            &[0x55],                   // push %rbp
            &[0x48, 0x89, 0xe5],       // mov %rsp,%rbp
            &[0x0f, 0x1f],             // cut short
            &[0x0f, 0x1f, 0x44, 0x00], // cut short
            &[0x0f, 0x1f, 0x48, 0x00], // 0f 1f /1 is not a nop
            &[0x0f, 0x0b],             // ud2
            &[0x66],
            &[0x48, 0x0f, 0x1f, 0x00], // REX prefixes are not accepted
            &[0xe8, 0x00, 0x00, 0x00, 0x00],
        ];
        for code in refused {
            assert_eq!(
                classify(Arch::X86_64, code),
                SiteInstruction::NotNop,
                "{code:02x?}"
            );
        }
        let too_long = [0x66; 14]
            .iter()
            .chain(&[0x90])
            .copied()
            .collect::<Vec<_>>();
        assert_eq!(classify(Arch::X86_64, &too_long), nop(15));
        let too_long = [0x66; 15]
            .iter()
            .chain(&[0x90])
            .copied()
            .collect::<Vec<_>>();
        assert_eq!(classify(Arch::X86_64, &too_long), SiteInstruction::NotNop);
    }

    #[test]
    fn other_architectures() {
        assert_eq!(
            classify(Arch::Aarch64, &[0x1f, 0x20, 0x03, 0xd5, 0xc0]),
            nop(4)
        );
        assert_eq!(
            classify(Arch::Aarch64, &[0xd5, 0x03, 0x20, 0x1f]),
            SiteInstruction::NotNop
        );
        assert_eq!(
            classify(Arch::Aarch64, &[0x1f, 0x20, 0x03]),
            SiteInstruction::NotNop
        );
        assert_eq!(classify(Arch::Riscv64, &[0x13, 0, 0, 0]), nop(4));
        assert_eq!(classify(Arch::Riscv64, &[0x01, 0x00, 0x13]), nop(2));
        assert_eq!(
            classify(Arch::Riscv64, &[0x93, 0, 0, 0]),
            SiteInstruction::NotNop
        );
        assert_eq!(classify(Arch::S390x, &[0x47, 0x00, 0x00, 0x00]), nop(4));
        assert_eq!(classify(Arch::S390x, &[0x07, 0x00]), nop(2));
        assert_eq!(
            classify(Arch::S390x, &[0x47, 0xf0, 0x10, 0x00]),
            SiteInstruction::NotNop
        );
        assert_eq!(classify(Arch::Ppc64, &[0x60, 0, 0, 0]), nop(4));
        assert_eq!(classify(Arch::Ppc64le, &[0, 0, 0, 0x60]), nop(4));
        assert_eq!(
            classify(Arch::Ppc64, &[0, 0, 0, 0x60]),
            SiteInstruction::NotNop
        );
        assert_eq!(classify(Arch::Other(40), &[0; 4]), SiteInstruction::Unknown);
    }
}
