//! Places: where a struct, an array, or a member of one is, and reading
//! from them.
//!
//! A place is in one of four memories, each read its own way:
//!
//! * the traced process ([`Place::User`]), through
//!   `bpf_probe_read_user`, which may fail (the bytes then read as 0);
//! * the kernel, where a kernel pointer points ([`Place::KernelPtr`]:
//!   `curtask` and the structs it leads to), through
//!   `bpf_probe_read_kernel`, which may fail the same way;
//! * the tracepoint's record ([`Place::Ctx`]), by direct loads from the
//!   context, which the verifier checks offset by offset;
//! * the program's own memory: a value it holds (a struct copied into a
//!   variable, an array in a map value). At an offset known when the
//!   program is generated ([`Place::Mem`]) it is read with plain loads. At
//!   an offset computed at run time ([`Place::Kernel`], an index that is
//!   not a constant) it is read through `bpf_probe_read_kernel` from an
//!   address checked against the value's bounds: an index past the end
//!   reads 0, as an unreadable address of the traced process does, and
//!   the verifier, which cannot follow an index it does not know, has
//!   nothing to refuse.

use sdt_bpf::{AluOp, Helper, Insn, JmpOp, Reg, Size};

use super::expr::{narrow_to, Op, R};
use super::mem::Mem;
use super::user::UserRead;
use super::{Gen, CTX};
use crate::layout::ReadWhat;
use sdt_lang::diag::Diagnostic;
use sdt_lang::diag::Span;
use sdt_lang::hir::{TExpr, TKind};
use sdt_lang::types::{Space, Ty};

/// Where a struct, array or field is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Place {
    /// In the traced process, at the address in `slot` plus `off`.
    User { slot: i16, off: i64 },
    /// In the kernel, at the address in `slot` plus `off`.
    KernelPtr { slot: i16, off: i64 },
    /// In the tracepoint's record, at `off`.
    Ctx { off: i64 },
    /// In the program's memory, where it is known now.
    Mem(Mem),
    /// In the program's memory, at the address in `slot` plus `off`
    /// (0 when an index fell outside the value).
    Kernel { slot: i16, off: i64 },
}

impl Gen<'_> {
    /// Where a place is.
    pub(super) fn place(&mut self, e: &TExpr) -> R<Place> {
        Ok(match &e.kind {
            TKind::UserPlace(ptr) => {
                let v = self.scalar(ptr)?;
                let slot = self.in_slot(v);
                match ptr.ty.space() {
                    Some(Space::Kernel) => Place::KernelPtr { slot, off: 0 },
                    _ => Place::User { slot, off: 0 },
                }
            }
            TKind::CtxRecord => Place::Ctx { off: 0 },
            TKind::Field { base, offset } => {
                let base = self.place(base)?;
                self.offset_place(base, *offset as i64)
            }
            TKind::Index {
                base,
                index,
                stride,
            } => {
                let len = elements(&base.ty);
                let base = self.place(base)?;
                let idx = self.scalar(index)?;
                let stride = *stride as i64;
                match (base, idx) {
                    (base, Op::Imm(i)) => self.offset_place(base, i.wrapping_mul(stride)),
                    (base @ (Place::User { slot, off } | Place::KernelPtr { slot, off }), idx) => {
                        self.load_op(idx, Reg::R0);
                        self.b
                            .push(Insn::alu64_imm(AluOp::Mul, Reg::R0, stride as i32));
                        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, slot));
                        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R0, Reg::R1));
                        let slot = self.spilled(Reg::R0);
                        match base {
                            Place::KernelPtr { .. } => Place::KernelPtr { slot, off },
                            _ => Place::User { slot, off },
                        }
                    }
                    (Place::Ctx { .. }, _) => {
                        return Err(Diagnostic::error(
                            index.span,
                            "an index into a tracepoint field must be a constant",
                        ))
                    }
                    (Place::Mem(mem), idx) => {
                        let slot = self.frame.slot();
                        self.b.push(Insn::st(Size::DW, Reg::R10, slot, 0));
                        let outside = self.b.label();
                        self.load_op(idx, Reg::R0);
                        self.b.jump_imm(
                            JmpOp::Ge,
                            Reg::R0,
                            len.min(i32::MAX as u64) as i32,
                            outside,
                        );
                        self.b
                            .push(Insn::alu64_imm(AluOp::Mul, Reg::R0, stride as i32));
                        mem.address(&mut self.b, Reg::R1, 0);
                        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R0, Reg::R1));
                        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, Reg::R0));
                        self.b.bind(outside);
                        Place::Kernel { slot, off: 0 }
                    }
                    (Place::Kernel { slot, off }, idx) => {
                        // Still 0 when an outer index fell outside.
                        let outside = self.b.label();
                        let address = self.frame.slot();
                        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, slot));
                        self.b.push(Insn::stx(Size::DW, Reg::R10, address, Reg::R1));
                        self.b.jump_imm(JmpOp::Eq, Reg::R1, 0, outside);
                        self.load_op(idx, Reg::R0);
                        let zero = self.b.label();
                        self.b
                            .jump_imm(JmpOp::Ge, Reg::R0, len.min(i32::MAX as u64) as i32, zero);
                        self.b
                            .push(Insn::alu64_imm(AluOp::Mul, Reg::R0, stride as i32));
                        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R0, Reg::R1));
                        self.b.push(Insn::stx(Size::DW, Reg::R10, address, Reg::R0));
                        self.b.jump(outside);
                        self.b.bind(zero);
                        self.b.push(Insn::st(Size::DW, Reg::R10, address, 0));
                        self.b.bind(outside);
                        Place::Kernel { slot: address, off }
                    }
                }
            }
            // Any other expression of a struct, array or string type is a
            // value the program holds.
            _ if !e.ty.is_scalar() => Place::Mem(self.aggregate(e)?),
            _ => {
                return Err(Diagnostic::error(
                    e.span,
                    format!(
                        "internal error: {} is not in memory (a bug in sdt)",
                        e.ty.display(&self.program.registry)
                    ),
                ))
            }
        })
    }

    /// The place `by` bytes after `place`.
    fn offset_place(&mut self, place: Place, by: i64) -> Place {
        match place {
            Place::User { slot, off } => Place::User {
                slot,
                off: off + by,
            },
            Place::KernelPtr { slot, off } => Place::KernelPtr {
                slot,
                off: off + by,
            },
            Place::Ctx { off } => Place::Ctx { off: off + by },
            Place::Kernel { slot, off } => Place::Kernel {
                slot,
                off: off + by,
            },
            // The checker keeps constant indexes inside the value.
            Place::Mem(mem) => Place::Mem(mem.offset(by.clamp(0, i64::from(u16::MAX)) as u32)),
        }
    }

    /// A stack slot that holds `v`.
    fn in_slot(&mut self, v: Op) -> i16 {
        match v {
            Op::Slot(s) => s,
            Op::Imm(_) => {
                self.load_op(v, Reg::R0);
                self.spilled(Reg::R0)
            }
        }
    }

    fn spilled(&mut self, reg: Reg) -> i16 {
        let slot = self.frame.slot();
        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, reg));
        slot
    }

    /// `R3 = the address in slot + off`.
    fn address_in_r3(&mut self, slot: i16, off: i64) {
        self.b.push(Insn::ldx(Size::DW, Reg::R3, Reg::R10, slot));
        self.add_const(Reg::R3, off);
    }

    /// `R3 = the address of a place in the program's memory`; a place
    /// that an index put outside its value stays at 0.
    fn kernel_address_in_r3(&mut self, slot: i16, off: i64) {
        let outside = self.b.label();
        self.b.push(Insn::ldx(Size::DW, Reg::R3, Reg::R10, slot));
        self.b.jump_imm(JmpOp::Eq, Reg::R3, 0, outside);
        self.add_const(Reg::R3, off);
        self.b.bind(outside);
    }

    /// Reads `size` bytes of the traced process at the address in R3
    /// into `dst`, counting a failure against the expression at `span`.
    pub(super) fn read_user_into(&mut self, dst: Mem, size: u32, span: Span) {
        dst.address(&mut self.b, Reg::R1, 0);
        self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
        self.read_user(UserRead::Bytes, ReadWhat::Expr(span));
    }

    /// `bpf_probe_read_kernel(dst, size, R3)`; the address must be in R3.
    fn read_kernel_into(&mut self, dst: Mem, size: u32) {
        dst.address(&mut self.b, Reg::R1, 0);
        self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
        self.b.call(Helper::ProbeReadKernel);
    }

    /// Copies `size` bytes of a place into `dst`; a read of the traced
    /// process that fails counts against the expression at `span`.
    pub(super) fn read_place(&mut self, place: Place, size: u32, dst: Mem, span: Span) {
        match place {
            Place::User { slot, off } => {
                self.address_in_r3(slot, off);
                self.read_user_into(dst, size, span);
            }
            Place::KernelPtr { slot, off } => {
                self.address_in_r3(slot, off);
                self.read_kernel_into(dst, size);
            }
            Place::Kernel { slot, off } => {
                self.kernel_address_in_r3(slot, off);
                self.read_kernel_into(dst, size);
            }
            Place::Mem(src) => self.copy_exact(src, dst, size),
            Place::Ctx { off } => {
                // Direct context loads, each aligned to its own size.
                let mut at = 0u32;
                while at < size {
                    let here = off + i64::from(at);
                    let chunk = [8u32, 4, 2, 1]
                        .into_iter()
                        .find(|c| here % i64::from(*c) == 0 && at + c <= size)
                        .unwrap_or(1);
                    let width = Size::from_bytes(chunk as usize).unwrap_or(Size::B);
                    self.b.push(Insn::ldx(width, Reg::R0, CTX, here as i16));
                    dst.store(&mut self.b, width, at, Reg::R0);
                    at += chunk;
                }
            }
        }
    }

    /// Copies exactly `size` bytes between places of the program's
    /// memory, so that nothing after a member is taken with it.
    pub(super) fn copy_exact(&mut self, src: Mem, dst: Mem, size: u32) {
        if size > 128 {
            src.address(&mut self.b, Reg::R3, 0);
            self.read_kernel_into(dst, size);
            return;
        }
        let mut at = 0u32;
        while at < size {
            let chunk = [8u32, 4, 2, 1]
                .into_iter()
                .find(|c| at + c <= size)
                .unwrap_or(1);
            let width = Size::from_bytes(chunk as usize).unwrap_or(Size::B);
            src.load(&mut self.b, width, Reg::R0, at);
            dst.store(&mut self.b, width, at, Reg::R0);
            at += chunk;
        }
    }

    /// Reads a `char` array place as a string of `size` bytes (its length
    /// and a NUL) into `dst`, which is zeroed.
    pub(super) fn read_place_str(&mut self, place: Place, size: u32, dst: Mem, span: Span) {
        let len = size - 1;
        match place {
            Place::User { slot, off } => {
                self.address_in_r3(slot, off);
                dst.address(&mut self.b, Reg::R1, 0);
                self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
                self.read_user(UserRead::Str, ReadWhat::Expr(span));
            }
            Place::KernelPtr { slot, off } => {
                self.address_in_r3(slot, off);
                dst.address(&mut self.b, Reg::R1, 0);
                self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
                self.b.call(Helper::ProbeReadKernelStr);
            }
            Place::Ctx { .. } | Place::Mem(_) | Place::Kernel { .. } => {
                // Copy the bytes out, then read them again as a string so
                // that nothing after the NUL is kept.
                let raw = self.frame.scratch(len);
                self.read_place(place, len, raw, span);
                raw.address(&mut self.b, Reg::R3, 0);
                dst.address(&mut self.b, Reg::R1, 0);
                self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
                self.b.call(Helper::ProbeReadKernelStr);
            }
        }
        // An array with no NUL still ends in one.
        dst.store_imm(&mut self.b, Size::B, len, 0);
    }

    /// Reads a scalar of type `ty` from a place.
    pub(super) fn load_place(
        &mut self,
        place: &TExpr,
        ty: &Ty,
        bitfield: Option<(u8, u8)>,
    ) -> R<Op> {
        let size = self.program.registry.c_size(&place.ty) as u32;
        let Some(width) = Size::from_bytes(size as usize) else {
            return Err(Diagnostic::error(
                place.span,
                format!("reading a {size}-byte value is not supported"),
            ));
        };
        let p = self.place(place)?;
        match p {
            Place::User { .. } | Place::KernelPtr { .. } | Place::Kernel { .. } => {
                let tmp = self.frame.slot();
                self.b.push(Insn::st(Size::DW, Reg::R10, tmp, 0));
                self.read_place(p, size, Mem::Stack(tmp), place.span);
                self.b.push(Insn::ldx(width, Reg::R0, Reg::R10, tmp));
            }
            Place::Ctx { off } => {
                self.b.push(Insn::ldx(width, Reg::R0, CTX, off as i16));
            }
            Place::Mem(mem) => mem.load(&mut self.b, width, Reg::R0, 0),
        }
        match bitfield {
            Some((bit, bits)) => {
                // Move the field to the top, then back down with its sign.
                let top = 64 - i32::from(bit) - i32::from(bits);
                if top > 0 {
                    self.b.push(Insn::alu64_imm(AluOp::Lsh, Reg::R0, top));
                }
                let down = if ty.is_signed() {
                    AluOp::Arsh
                } else {
                    AluOp::Rsh
                };
                self.b
                    .push(Insn::alu64_imm(down, Reg::R0, 64 - i32::from(bits)));
            }
            None => narrow_to(&mut self.b, Reg::R0, ty),
        }
        Ok(self.spill(Reg::R0))
    }

    /// The address of a place in the traced process.
    pub(super) fn place_address(&mut self, e: &TExpr) -> R<Op> {
        match self.place(e)? {
            Place::User { slot, off } | Place::KernelPtr { slot, off } => {
                self.address_in_r3(slot, off);
                Ok(self.spill(Reg::R3))
            }
            Place::Ctx { .. } | Place::Mem(_) | Place::Kernel { .. } => Err(Diagnostic::error(
                e.span,
                "only memory of the traced process has an address here",
            )),
        }
    }
}

/// How many elements an indexed value has, for the bounds of a run-time
/// index (0 for memory of unknown length, where none is checked).
fn elements(ty: &Ty) -> u64 {
    match ty {
        Ty::Array { len, .. } => *len,
        Ty::Str { size } => u64::from(*size),
        _ => 0,
    }
}
