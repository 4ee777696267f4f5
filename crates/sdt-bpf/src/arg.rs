//! Code that reads a USDT argument, compiled per site.
//!
//! A USDT argument spec (`-4@%eax`, `8@16(%rsp,%rax,8)`, `1@$0`) names a
//! register, a memory operand or a constant. The argument parser (in
//! `sdt-elf`) turns the architecture's names into [`ArgSource`]s in terms
//! of `pt_regs` offsets, and this module emits straight-line code for
//! them: no spec tables, no run-time interpretation as in libbpf's
//! `usdt.bpf.h`.
//!
//! * A register is one aligned 8-byte context load, then, for narrower
//!   sizes, a left shift by `64 - 8*size` and a right shift back
//!   (arithmetic if signed), because the verifier accepts only 8-byte
//!   loads from `pt_regs`.
//! * Memory is the address computed from context registers, then
//!   `bpf_probe_read_user` of exactly `size` bytes into a stack slot that
//!   was zeroed first (so a failed read yields 0 and the verifier sees
//!   initialised memory), then a load that zero-extends and, if signed,
//!   the same shift pair.
//! * A constant is an immediate.
//!
//! The helper call clobbers `R0`–`R5`, so for memory arguments the context
//! register must be one of `R6`–`R9` (keep the context in `R6`).

use crate::builder::Builder;
use crate::error::CodegenError;
use crate::insn::{AluOp, Helper, Insn, Reg, Size};

/// Where an argument's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgSource {
    /// A register: `size` low bytes of the 8-byte `pt_regs` slot at `ctx_offset`.
    Reg {
        ctx_offset: i16,
        size: u8,
        signed: bool,
    },
    /// `size` bytes of user memory at
    /// `reg[base] + reg[index] * scale + disp`.
    Mem {
        base_ctx_offset: i16,
        /// `(ctx_offset, scale)` of the index register.
        index: Option<(i16, u8)>,
        disp: i64,
        size: u8,
        signed: bool,
    },
    /// A constant.
    Const(i64),
}

fn invalid(msg: String) -> CodegenError {
    CodegenError::InvalidArg(msg)
}

fn check_ctx_offset(off: i16) -> Result<(), CodegenError> {
    if off < 0 || off % 8 != 0 {
        return Err(invalid(format!(
            "context offset {off} is not an aligned 8-byte register slot"
        )));
    }
    Ok(())
}

fn check_size(size: u8) -> Result<Size, CodegenError> {
    Size::from_bytes(size as usize)
        .ok_or_else(|| invalid(format!("argument size {size} is not 1, 2, 4 or 8")))
}

impl ArgSource {
    /// Emits code that leaves the argument in `dst`, sign- or
    /// zero-extended to 64 bits.
    ///
    /// `ctx` holds the `pt_regs` pointer and is preserved. `scratch` is an
    /// 8-byte-aligned stack offset (from `R10`, e.g. `-8`) that memory
    /// arguments use; `R0`–`R5` may be clobbered.
    pub fn emit_load(
        &self,
        b: &mut Builder,
        ctx: Reg,
        scratch: i16,
        dst: Reg,
    ) -> Result<(), CodegenError> {
        self.emit_load_with(b, ctx, scratch, dst, Helper::ProbeReadUser)
    }

    /// [`emit_load`](Self::emit_load), reading memory arguments with
    /// `read`: [`Helper::ProbeReadUser`], or in a sleepable program
    /// [`Helper::CopyFromUser`], which faults the page in (both take the
    /// same arguments and zero the slot when they fail).
    pub fn emit_load_with(
        &self,
        b: &mut Builder,
        ctx: Reg,
        scratch: i16,
        dst: Reg,
        read: Helper,
    ) -> Result<(), CodegenError> {
        if !matches!(read, Helper::ProbeReadUser | Helper::CopyFromUser) {
            return Err(invalid(format!(
                "{} does not read user memory",
                read.name()
            )));
        }
        if dst == ctx || dst == Reg::R10 {
            return Err(invalid(format!(
                "cannot load an argument into {dst}: it holds the context or the frame"
            )));
        }
        match *self {
            ArgSource::Reg {
                ctx_offset,
                size,
                signed,
            } => {
                check_ctx_offset(ctx_offset)?;
                check_size(size)?;
                b.push(Insn::ldx(Size::DW, dst, ctx, ctx_offset));
                narrow(b, dst, size, signed, true);
            }
            ArgSource::Mem {
                base_ctx_offset,
                index,
                disp,
                size,
                signed,
            } => {
                let width = check_size(size)?;
                check_ctx_offset(base_ctx_offset)?;
                if !ctx.survives_calls() || ctx == Reg::R10 {
                    return Err(invalid(format!(
                        "context in {ctx} would not survive the probe_read_user call; keep it in r6-r9"
                    )));
                }
                if !(-512..=-8).contains(&scratch) || scratch % 8 != 0 {
                    return Err(invalid(format!(
                        "scratch stack offset {scratch} is not an aligned 8-byte slot of the frame"
                    )));
                }
                if let Some((index_offset, scale)) = index {
                    check_ctx_offset(index_offset)?;
                    if scale == 0 {
                        return Err(invalid("index scale 0".into()));
                    }
                }
                // r3 = address
                b.push(Insn::ldx(Size::DW, Reg::R3, ctx, base_ctx_offset));
                if let Some((index_offset, scale)) = index {
                    b.push(Insn::ldx(Size::DW, Reg::R2, ctx, index_offset));
                    match scale {
                        1 => {}
                        s if s.is_power_of_two() => {
                            b.push(Insn::alu64_imm(
                                AluOp::Lsh,
                                Reg::R2,
                                s.trailing_zeros() as i32,
                            ));
                        }
                        s => {
                            b.push(Insn::alu64_imm(AluOp::Mul, Reg::R2, i32::from(s)));
                        }
                    }
                    b.push(Insn::alu64_reg(AluOp::Add, Reg::R3, Reg::R2));
                }
                if disp != 0 {
                    match i32::try_from(disp) {
                        Ok(d) => {
                            b.push(Insn::alu64_imm(AluOp::Add, Reg::R3, d));
                        }
                        Err(_) => {
                            b.load_imm(Reg::R2, disp);
                            b.push(Insn::alu64_reg(AluOp::Add, Reg::R3, Reg::R2));
                        }
                    }
                }
                // bpf_probe_read_user(r10 + scratch, size, address)
                b.push(Insn::st(Size::DW, Reg::R10, scratch, 0))
                    .push(Insn::mov64_reg(Reg::R1, Reg::R10))
                    .push(Insn::alu64_imm(AluOp::Add, Reg::R1, i32::from(scratch)))
                    .push(Insn::mov64_imm(Reg::R2, i32::from(size)))
                    .call(read)
                    .push(Insn::ldx(width, dst, Reg::R10, scratch));
                narrow(b, dst, size, signed, false);
            }
            ArgSource::Const(v) => {
                b.load_imm(dst, v);
            }
        }
        Ok(())
    }

    /// Emits code that stores the argument, extended to 64 bits, at
    /// `*(u64 *)(base + off)`: a stack slot (`base` = `R10`) or a reserved
    /// ring-buffer record. The value passes through `R0`.
    ///
    /// For memory arguments `base` must survive the helper call (`R6`–`R10`).
    pub fn emit_store(
        &self,
        b: &mut Builder,
        ctx: Reg,
        scratch: i16,
        base: Reg,
        off: i16,
    ) -> Result<(), CodegenError> {
        let calls = matches!(self, ArgSource::Mem { .. });
        if base == Reg::R0 || (calls && !base.survives_calls()) {
            return Err(invalid(format!(
                "cannot store an argument through {base}: it would be clobbered"
            )));
        }
        self.emit_load(b, ctx, scratch, Reg::R0)?;
        b.push(Insn::stx(Size::DW, base, off, Reg::R0));
        Ok(())
    }
}

/// Extends the low `size` bytes of `r` to 64 bits. `dirty_high` says
/// whether the upper bytes may hold garbage (a full register) or are
/// already zero (a zero-extending load).
fn narrow(b: &mut Builder, r: Reg, size: u8, signed: bool, dirty_high: bool) {
    if size >= 8 || !(signed || dirty_high) {
        return;
    }
    let shift = 64 - 8 * i32::from(size);
    let back = if signed { AluOp::Arsh } else { AluOp::Rsh };
    b.push(Insn::alu64_imm(AluOp::Lsh, r, shift))
        .push(Insn::alu64_imm(back, r, shift));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disasm::disassemble;
    use crate::insn::Reg::*;

    fn listing(src: ArgSource, dst: Reg) -> String {
        let mut b = Builder::new();
        src.emit_load(&mut b, R6, -8, dst).unwrap();
        disassemble(&b.finish().unwrap())
    }

    #[test]
    fn narrows_registers_with_shifts() {
        let signed_eax = ArgSource::Reg {
            ctx_offset: 80,
            size: 4,
            signed: true,
        };
        assert_eq!(
            listing(signed_eax, R7),
            "   0: (79) r7 = *(u64 *)(r6 +80)\n\
             \x20  1: (67) r7 <<= 32\n\
             \x20  2: (c7) r7 s>>= 32\n"
        );
        let cl = ArgSource::Reg {
            ctx_offset: 88,
            size: 1,
            signed: false,
        };
        assert!(listing(cl, R7).contains("r7 <<= 56\n") && listing(cl, R7).contains("r7 >>= 56\n"));
        let rbp = ArgSource::Reg {
            ctx_offset: 32,
            size: 8,
            signed: false,
        };
        assert_eq!(listing(rbp, R1), "   0: (79) r1 = *(u64 *)(r6 +32)\n");
    }

    #[test]
    fn reads_memory_with_exact_size() {
        let mem = ArgSource::Mem {
            base_ctx_offset: 152,
            index: Some((80, 8)),
            disp: 16,
            size: 4,
            signed: true,
        };
        assert_eq!(
            listing(mem, R7),
            "   0: (79) r3 = *(u64 *)(r6 +152)\n\
             \x20  1: (79) r2 = *(u64 *)(r6 +80)\n\
             \x20  2: (67) r2 <<= 3\n\
             \x20  3: (0f) r3 += r2\n\
             \x20  4: (07) r3 += 16\n\
             \x20  5: (7a) *(u64 *)(r10 -8) = 0\n\
             \x20  6: (bf) r1 = r10\n\
             \x20  7: (07) r1 += -8\n\
             \x20  8: (b7) r2 = 4\n\
             \x20  9: (85) call bpf_probe_read_user#112\n\
             \x20 10: (61) r7 = *(u32 *)(r10 -8)\n\
             \x20 11: (67) r7 <<= 32\n\
             \x20 12: (c7) r7 s>>= 32\n"
        );
        let unsigned = ArgSource::Mem {
            base_ctx_offset: 112,
            index: None,
            disp: 0,
            size: 2,
            signed: false,
        };
        let text = listing(unsigned, R7);
        assert!(text.ends_with("r7 = *(u16 *)(r10 -8)\n"), "{text}");
    }

    #[test]
    fn loads_constants() {
        assert_eq!(listing(ArgSource::Const(-9), R1), "   0: (b7) r1 = -9\n");
        assert_eq!(
            listing(ArgSource::Const(1 << 40), R1),
            "   0: (18) r1 = 0x10000000000\n"
        );
    }

    #[test]
    fn stores_through_a_base_register() {
        let mut b = Builder::new();
        ArgSource::Const(5)
            .emit_store(&mut b, R6, -8, R7, 24)
            .unwrap();
        assert_eq!(
            disassemble(&b.finish().unwrap()),
            "   0: (b7) r0 = 5\n   1: (7b) *(u64 *)(r7 +24) = r0\n"
        );
    }

    #[test]
    fn refuses_what_cannot_work() {
        let mem = ArgSource::Mem {
            base_ctx_offset: 112,
            index: None,
            disp: 0,
            size: 8,
            signed: false,
        };
        let mut b = Builder::new();
        assert!(mem.emit_load(&mut b, R1, -8, R7).is_err(), "ctx clobbered");
        assert!(
            mem.emit_load(&mut b, R6, -4, R7).is_err(),
            "misaligned slot"
        );
        assert!(mem.emit_load(&mut b, R6, -8, R6).is_err(), "dst is ctx");
        assert!(
            mem.emit_store(&mut b, R6, -8, R2, 0).is_err(),
            "base clobbered"
        );
        let odd = ArgSource::Reg {
            ctx_offset: 4,
            size: 8,
            signed: false,
        };
        assert!(odd.emit_load(&mut b, R6, -8, R7).is_err());
        let wide = ArgSource::Reg {
            ctx_offset: 8,
            size: 3,
            signed: false,
        };
        assert!(wide.emit_load(&mut b, R6, -8, R7).is_err());
    }
}
