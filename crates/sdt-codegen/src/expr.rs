//! Lowering expressions.
//!
//! A scalar expression becomes an [`Op`]: a constant, or an 8-byte stack
//! slot holding the value. Anything larger (a string, a tuple, a copied
//! struct) is written into memory, usually scratch memory: either where
//! the caller wants it ([`Gen::write_value`]) or into a temporary
//! ([`Gen::aggregate`]). Reads of the traced program's memory go through
//! `bpf_probe_read_user`, reads of a tracepoint's record through direct
//! context loads.

use sdt_bpf::{AluOp, Helper, Insn, JmpOp, Label, Reg, Size};

use super::loops::Search;
use super::mem::{Mem, ARG_SLOT};
use super::user::UserRead;
use super::{ArgAccess, Gen, Ids, CTX};
use crate::layout::{self, ReadWhat};
use sdt_lang::ast::{BinOp, UnOp};
use sdt_lang::diag::{Diagnostic, Span};
use sdt_lang::hir::{HelperValue, Output, Param, TExpr, TKind};
use sdt_lang::types::{Shown, Space, Ty};

pub(super) type R<T> = Result<T, Diagnostic>;

/// A scalar value: known now, or in a stack slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Imm(i64),
    Slot(i16),
}

/// Where a value larger than a word is written: `size` bytes of it, then
/// zeros up to `padded`.
#[derive(Clone, Copy)]
struct Area {
    dst: Mem,
    size: u32,
    padded: u32,
}

/// `pt_regs` offsets of the x86-64 argument registers, in order.
const ARG_REGS: [i16; 6] = [112, 104, 96, 88, 72, 64];
/// `pt_regs` offsets of `rax`, `rip` and `rsp`.
const RAX: i16 = 80;
const RIP: i16 = 128;
const RSP: i16 = 152;

impl Gen<'_> {
    pub(super) fn load_op(&mut self, op: Op, reg: Reg) {
        match op {
            Op::Imm(v) => {
                self.b.load_imm(reg, v);
            }
            Op::Slot(s) => {
                self.b.push(Insn::ldx(Size::DW, reg, Reg::R10, s));
            }
        }
    }

    /// Stores `reg` in a new temporary slot.
    pub(super) fn spill(&mut self, reg: Reg) -> Op {
        Op::Slot(self.spill_slot(reg))
    }

    /// Stores `reg` in a new temporary slot and returns the slot.
    pub(super) fn spill_slot(&mut self, reg: Reg) -> i16 {
        let slot = self.frame.slot();
        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, reg));
        slot
    }

    /// Evaluates a scalar expression: a dispatch to the lowering of each
    /// kind, grouped as values of the probe, operators, strings, and maps.
    pub(super) fn scalar(&mut self, e: &TExpr) -> R<Op> {
        match &e.kind {
            // What the probe sees: constants, variables, registers, helpers.
            TKind::Int(v) => Ok(Op::Imm(*v)),
            TKind::Param(p) => Ok(Op::Imm(self.param(*p))),
            TKind::Var(i) => Ok(self.var_value(*i)),
            TKind::Helper(h) => self.helper_value(*h),
            TKind::NsPid { thread } => Ok(self.ns_pid(*thread)),
            TKind::UserMode => Ok(self.user_mode()),
            TKind::Arg(n) => self.arg(*n, e.span),
            TKind::SArg(n) => Ok(self.stack_arg(*n, e.span)),
            TKind::Retval => Ok(self.ctx_reg(RAX)),
            TKind::Reg(off) => Ok(self.ctx_reg(*off)),
            TKind::UAddr(address) => self.uaddr(*address, e.span),
            TKind::Probe => Ok(self.identity(true)),
            TKind::Func => Ok(self.identity(false)),
            TKind::Load { place, bitfield } => self.load_place(place, &e.ty, *bitfield),
            TKind::AddrOf(place) => match place.kind {
                // A variable's own memory, on the stack or in scratch.
                TKind::Var(i) => {
                    self.vars[i].address(&mut self.b, Reg::R0, 0);
                    Ok(self.spill(Reg::R0))
                }
                _ => self.place_address(place),
            },
            // Operators.
            TKind::Unary { op, expr } => self.unary(*op, expr),
            TKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, e.span),
            TKind::Logical { .. } | TKind::StrEq { .. } | TKind::StrNCmp { .. } => {
                self.truth_value(e)
            }
            TKind::Ternary {
                cond,
                then,
                otherwise,
            } => self.ternary(cond, then, otherwise),
            TKind::IntCast(inner) => self.int_cast(inner, &e.ty),
            TKind::Bswap(inner) => self.bswap(inner),
            TKind::Strftime(inner) | TKind::Retype(inner) | TKind::Convert(inner) => {
                self.scalar(inner)
            }
            TKind::Block { stmts, value } => {
                self.block(stmts)?;
                self.scalar(value)
            }
            TKind::TupleIndex { tuple, index } => self.tuple_item(tuple, *index),
            TKind::VarIncDec { var, delta, prefix } => Ok(self.var_inc_dec(*var, *delta, *prefix)),
            // Strings.
            TKind::StrContains { haystack, needle } => {
                self.str_search_value(haystack, needle, Search::Contains)
            }
            TKind::StrStr { haystack, needle } => {
                self.str_search_value(haystack, needle, Search::Index)
            }
            TKind::StrLen(s) => {
                let size = self.value_size(&s.ty);
                let s = self.aggregate(s)?;
                Ok(Op::Slot(self.str_len(s, size)))
            }
            // Maps.
            TKind::MapGet { map, keys } => self.map_get(*map, keys),
            TKind::AggGet { map, keys } => self.agg_get(*map, keys),
            TKind::Delete { map, keys } => self.delete(*map, keys),
            TKind::Find { map, keys, var } => self.find(*map, keys, *var),
            TKind::HasKey { map, keys } => self.has_key(*map, keys),
            TKind::MapLen(map) => {
                self.count_entries(*map);
                Ok(self.spill(Reg::R0))
            }
            TKind::StackLen(stack) => self.stack_len(stack),
            TKind::KStack => Ok(self.kstack()),
            TKind::MapIncDec {
                map,
                keys,
                delta,
                prefix,
            } => self.map_inc_dec(*map, keys, *delta, *prefix),
            _ => Err(internal_error(
                e,
                "used as a number",
                &self.program.registry,
            )),
        }
    }

    /// A variable's value: its own stack slot, or a copy of it in one.
    fn var_value(&mut self, var: usize) -> Op {
        match self.vars[var] {
            Mem::Stack(off) => Op::Slot(off),
            other => {
                other.load(&mut self.b, Size::DW, Reg::R0, 0);
                self.spill(Reg::R0)
            }
        }
    }

    /// 1 if the probe interrupted user space: the privilege level of the
    /// interrupted code is the low two bits of `cs` in `pt_regs`, 3 for
    /// user space.
    fn user_mode(&mut self) -> Op {
        const CS: i16 = 136;
        if self.replays() {
            // Every probe of the fast path fires in the process's code.
            return Op::Imm(1);
        }
        let kernel = self.b.label();
        self.b.push(Insn::ldx(Size::DW, Reg::R1, CTX, CS));
        self.b.push(Insn::alu64_imm(AluOp::And, Reg::R1, 3));
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.jump_imm(JmpOp::Ne, Reg::R1, 3, kernel);
        self.b.push(Insn::mov64_imm(Reg::R0, 1));
        self.b.bind(kernel);
        self.spill(Reg::R0)
    }

    /// `sargN`: the word `N + 1` words above the stack pointer, read from
    /// the traced program's stack.
    fn stack_arg(&mut self, n: u8, span: Span) -> Op {
        let slot = self.frame.slot();
        self.b.push(Insn::ldx(Size::DW, Reg::R3, CTX, RSP));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R3, 8 * (i32::from(n) + 1)));
        self.read_user_into(Mem::Stack(slot), 8, span);
        Op::Slot(slot)
    }

    /// `-x`, `~x`, `!x`.
    fn unary(&mut self, op: UnOp, expr: &TExpr) -> R<Op> {
        let v = self.scalar(expr)?;
        self.load_op(v, Reg::R0);
        match op {
            UnOp::Neg => {
                self.b.push(Insn::alu64_imm(AluOp::Neg, Reg::R0, 0));
            }
            UnOp::BitNot => {
                self.b.push(Insn::alu64_imm(AluOp::Xor, Reg::R0, -1));
            }
            UnOp::Not => self.truth(JmpOp::Eq),
            // The checker makes places of these.
            UnOp::Deref | UnOp::AddrOf => {
                return Err(internal_error(
                    expr,
                    "under `*` or `&`",
                    &self.program.registry,
                ))
            }
        }
        Ok(self.spill(Reg::R0))
    }

    /// A condition (`&&`, `||`, string comparisons) as 1 or 0.
    fn truth_value(&mut self, e: &TExpr) -> R<Op> {
        let skip = self.b.label();
        let slot = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, slot, 0));
        self.cond_jump(e, skip, false)?;
        self.b.push(Insn::st(Size::DW, Reg::R10, slot, 1));
        self.b.bind(skip);
        Ok(Op::Slot(slot))
    }

    /// `cond ? then : otherwise`, of scalars.
    fn ternary(&mut self, cond: &TExpr, then: &TExpr, otherwise: &TExpr) -> R<Op> {
        let slot = self.frame.slot();
        let else_ = self.b.label();
        let end = self.b.label();
        self.cond_jump(cond, else_, false)?;
        let t = self.scalar(then)?;
        self.load_op(t, Reg::R0);
        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, Reg::R0));
        self.b.jump(end);
        self.b.bind(else_);
        let o = self.scalar(otherwise)?;
        self.load_op(o, Reg::R0);
        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, Reg::R0));
        self.b.bind(end);
        Ok(Op::Slot(slot))
    }

    /// `(int32)x` and the like: truncated, and sign- or zero-extended.
    fn int_cast(&mut self, inner: &TExpr, ty: &Ty) -> R<Op> {
        let v = self.scalar(inner)?;
        if let Op::Imm(x) = v {
            return Ok(Op::Imm(ty.truncate(x)));
        }
        self.load_op(v, Reg::R0);
        narrow_to(&mut self.b, Reg::R0, ty);
        Ok(self.spill(Reg::R0))
    }

    /// `bswap(x)`: the bytes of `x`'s own size, reversed.
    fn bswap(&mut self, inner: &TExpr) -> R<Op> {
        let v = self.scalar(inner)?;
        self.load_op(v, Reg::R0);
        self.b.push(Insn::bswap64(Reg::R0));
        let bytes = match inner.ty {
            Ty::Int { bytes, .. } | Ty::Enum { bytes, .. } => bytes,
            _ => 8,
        };
        if bytes < 8 {
            self.b.push(Insn::alu64_imm(
                AluOp::Rsh,
                Reg::R0,
                64 - 8 * i32::from(bytes),
            ));
        }
        Ok(self.spill(Reg::R0))
    }

    /// `tuple.N`, read as a number.
    fn tuple_item(&mut self, tuple: &TExpr, index: usize) -> R<Op> {
        let Ty::Tuple(items) = &tuple.ty else {
            return Err(internal_error(
                tuple,
                "indexed as a tuple",
                &self.program.registry,
            ));
        };
        let offsets = Ty::tuple_offsets(items, &self.program.registry);
        let at = offsets[index];
        let mem = self.aggregate(tuple)?;
        mem.load(&mut self.b, Size::DW, Reg::R0, at);
        Ok(self.spill(Reg::R0))
    }

    /// `$x++`, `--$x` and the like; `delta` is already scaled for
    /// pointers.
    fn var_inc_dec(&mut self, var: usize, delta: i64, prefix: bool) -> Op {
        let home = self.vars[var];
        let result = self.frame.slot();
        home.load(&mut self.b, Size::DW, Reg::R1, 0);
        if !prefix {
            self.b.push(Insn::stx(Size::DW, Reg::R10, result, Reg::R1));
        }
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R1, delta as i32));
        home.store(&mut self.b, Size::DW, 0, Reg::R1);
        if prefix {
            self.b.push(Insn::stx(Size::DW, Reg::R10, result, Reg::R1));
        }
        Op::Slot(result)
    }

    /// `strcontains()` (1 or 0) and `strstr()` (an index or -1).
    fn str_search_value(&mut self, haystack: &TExpr, needle: &TExpr, search: Search) -> R<Op> {
        let h = self.aggregate(haystack)?;
        let n = self.aggregate(needle)?;
        let (hl, nl) = (self.value_size(&haystack.ty), self.value_size(&needle.ty));
        Ok(Op::Slot(self.str_search(h, hl, n, nl, search)))
    }
}

/// Maps read and changed as values.
impl Gen<'_> {
    /// `@m[k]`: the value, or 0 where there is none.
    fn map_get(&mut self, map: usize, keys: &[TExpr]) -> R<Op> {
        let key = self.build_key(map, keys, None)?;
        let slot = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, slot, 0));
        self.lookup(layout::user_map(map), key);
        let missing = self.b.label();
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, missing);
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R0, 0));
        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, Reg::R1));
        self.b.bind(missing);
        Ok(Op::Slot(slot))
    }

    /// An aggregation's value, merged across CPUs.
    fn agg_get(&mut self, map: usize, keys: &[TExpr]) -> R<Op> {
        let key = self.build_key(map, keys, None)?;
        key.address(&mut self.b, Reg::R0, 0);
        let key = self.spill_slot(Reg::R0);
        Ok(match self.program.maps[map].aggregation() {
            Some(agg) => self.merged_aggregation(map, agg, key),
            None => Op::Imm(0),
        })
    }

    /// `delete(@m[k])`: 1 if there was an element.
    fn delete(&mut self, map: usize, keys: &[TExpr]) -> R<Op> {
        let key = self.build_key(map, keys, None)?;
        self.b.ld_map_index(Reg::R1, layout::user_map(map));
        key.address(&mut self.b, Reg::R2, 0);
        self.b.call(Helper::MapDeleteElem);
        Ok(self.truth_of_zero(Reg::R0))
    }

    /// `has_key()` with a variable to copy the value into: 1 and the copy
    /// if there is an element, else 0.
    fn find(&mut self, map: usize, keys: &[TExpr], var: usize) -> R<Op> {
        let key = self.build_key(map, keys, None)?;
        let size = self.program.maps[map].value_size(&self.program.registry);
        let home = self.vars[var];
        let absent = self.b.label();
        let result = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, result, 0));
        self.lookup(layout::user_map(map), key);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, absent);
        let var_size = self.value_size(&self.instance.vars[var]);
        self.copy_from_reg(Reg::R0, home, size.min(var_size.next_multiple_of(8)));
        self.b.push(Insn::st(Size::DW, Reg::R10, result, 1));
        self.b.bind(absent);
        Ok(Op::Slot(result))
    }

    /// `has_key(@m, k)`: 1 or 0.
    fn has_key(&mut self, map: usize, keys: &[TExpr]) -> R<Op> {
        let key = self.build_key(map, keys, None)?;
        self.lookup(layout::user_map(map), key);
        self.b.push(Insn::mov64_reg(Reg::R1, Reg::R0));
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        let absent = self.b.label();
        self.b.jump_imm(JmpOp::Eq, Reg::R1, 0, absent);
        self.b.push(Insn::mov64_imm(Reg::R0, 1));
        self.b.bind(absent);
        Ok(self.spill(Reg::R0))
    }

    /// `@m[k]++` and the like: a missing element counts from 0.
    fn map_inc_dec(&mut self, map: usize, keys: &[TExpr], delta: i64, prefix: bool) -> R<Op> {
        let key = self.build_key(map, keys, None)?;
        let old = self.frame.slot();
        let new = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, old, 0));
        self.lookup(layout::user_map(map), key);
        let missing = self.b.label();
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, missing);
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R0, 0));
        self.b.push(Insn::stx(Size::DW, Reg::R10, old, Reg::R1));
        self.b.bind(missing);
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, old));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R1, delta as i32));
        self.b.push(Insn::stx(Size::DW, Reg::R10, new, Reg::R1));
        self.update(map, key, Mem::Stack(new), 0)?;
        Ok(Op::Slot(if prefix { new } else { old }))
    }
}

impl Gen<'_> {
    /// A slot holding 1 if `reg` is 0, else 0 (a helper's success).
    fn truth_of_zero(&mut self, reg: Reg) -> Op {
        let done = self.b.label();
        self.b.push(Insn::mov64_reg(Reg::R1, reg));
        self.b.push(Insn::mov64_imm(Reg::R0, 1));
        self.b.jump_imm(JmpOp::Eq, Reg::R1, 0, done);
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.bind(done);
        self.spill(Reg::R0)
    }

    /// The frames of a stack: `bpf_get_stack` of this moment's user or
    /// kernel stack, the one `ustack` or `kstack` records in the same
    /// probe, into scratch memory; its byte count over 8. Probes of no
    /// task have none, and probes of processes no kernel stack.
    fn stack_len(&mut self, stack: &TExpr) -> R<Op> {
        let (depth, flags) = match stack.ty {
            Ty::Shown(Shown::UStack { depth, .. }) => (depth, sdt_bpf::STACKID_USER),
            Ty::Shown(Shown::KStack { depth, .. }) if !self.kind().is_uprobe() => (depth, 0),
            _ => return Ok(Op::Imm(0)),
        };
        if !self.kind().has_task() {
            return Ok(Op::Imm(0));
        }
        let bytes = 8 * depth.clamp(1, layout::STACK_DEPTH);
        let buffer = self.frame.scratch(bytes);
        let done = self.b.label();
        self.b.push(Insn::mov64_reg(Reg::R1, CTX));
        buffer.address(&mut self.b, Reg::R2, 0);
        self.b.push(Insn::mov64_imm(Reg::R3, bytes as i32));
        self.b.push(Insn::mov64_imm(Reg::R4, flags as i32));
        self.b.call(Helper::GetStack);
        self.b.jump_imm(JmpOp::Sge, Reg::R0, 0, done);
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.bind(done);
        self.b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R0, 3));
        Ok(self.spill(Reg::R0))
    }

    /// `kstack`: the id of this moment's kernel stack in the stack map,
    /// or -1 for none. Where the probe interrupted user code (always, in
    /// a probe of a process) the kernel has no stack, which is no loss;
    /// a stack the map had no room for is counted as lost.
    fn kstack(&mut self) -> Op {
        if !self.kind().has_task() || self.kind().is_uprobe() {
            return Op::Imm(-1);
        }
        const EFAULT: i32 = -14;
        self.shared.stacks = true;
        self.uses_stack_map = true;
        self.b.push(Insn::mov64_reg(Reg::R1, CTX));
        self.b.ld_map_index(Reg::R2, layout::STACK_MAP);
        self.b.push(Insn::mov64_imm(Reg::R3, 0));
        self.b.call(Helper::GetStackid);
        let slot = self.spill_slot(Reg::R0);
        let (done, none) = (self.b.label(), self.b.label());
        self.b.jump_imm(JmpOp::Sge, Reg::R0, 0, done);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, EFAULT, none);
        self.count_lost(layout::LOST_STACKS);
        self.b.bind(none);
        self.b.push(Insn::st(Size::DW, Reg::R10, slot, -1));
        self.b.bind(done);
        Op::Slot(slot)
    }

    /// `R0 = (R0 <op> 0) ? 1 : 0`.
    fn truth(&mut self, op: JmpOp) {
        let yes = self.b.label();
        let end = self.b.label();
        self.b.jump_imm(op, Reg::R0, 0, yes);
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.jump(end);
        self.b.bind(yes);
        self.b.push(Insn::mov64_imm(Reg::R0, 1));
        self.b.bind(end);
    }

    /// `reg += v`.
    pub(super) fn add_const(&mut self, reg: Reg, v: i64) {
        if v == 0 {
            return;
        }
        match i32::try_from(v) {
            Ok(small) => {
                self.b.push(Insn::alu64_imm(AluOp::Add, reg, small));
            }
            Err(_) => {
                let tmp = if reg == Reg::R1 { Reg::R2 } else { Reg::R1 };
                self.b.load_imm(tmp, v);
                self.b.push(Insn::alu64_reg(AluOp::Add, reg, tmp));
            }
        }
    }

    fn ctx_reg(&mut self, off: i16) -> Op {
        self.b.push(Insn::ldx(Size::DW, Reg::R0, CTX, off));
        self.spill(Reg::R0)
    }

    /// `uaddr()`: the symbol's link-time address moved by the load bias of
    /// the probe's object, which is where the probe is now (the
    /// instruction pointer, at a usdt or uprobe site) minus where it was
    /// linked.
    fn uaddr(&mut self, address: u64, span: Span) -> R<Op> {
        let Some(site) = self.unit.site_address else {
            return Err(Diagnostic::error(
                span,
                "uaddr() needs a program per probe site (internal error)",
            ));
        };
        self.b.push(Insn::ldx(Size::DW, Reg::R0, CTX, RIP));
        self.b
            .extend(Insn::ld_imm64(Reg::R1, address.wrapping_sub(site)));
        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R0, Reg::R1));
        Ok(self.spill(Reg::R0))
    }

    /// The probe id (high half of the cookie) or the site id (low half).
    fn identity(&mut self, probe: bool) -> Op {
        match self.unit.ids {
            Ids::Const { probe: p, site } => Op::Imm(i64::from(if probe { p } else { site })),
            Ids::Cookie | Ids::Replayed => {
                if self.unit.ids == Ids::Replayed {
                    let at = crate::layout::replay::COOKIE as i16;
                    self.b.push(Insn::ldx(Size::DW, Reg::R0, CTX, at));
                } else {
                    self.b.push(Insn::mov64_reg(Reg::R1, CTX));
                    self.b.call(Helper::GetAttachCookie);
                }
                if probe {
                    self.b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R0, 32));
                } else {
                    self.b.push(Insn::mov32_reg(Reg::R0, Reg::R0));
                }
                self.spill(Reg::R0)
            }
        }
    }

    /// A kernel helper's result, narrowed as the builtin says.
    fn helper_value(&mut self, h: HelperValue) -> R<Op> {
        if !self.replayed_helper(h.helper) {
            self.call_helper(h.helper);
        }
        if h.shift > 0 {
            self.b
                .push(Insn::alu64_imm(AluOp::Rsh, Reg::R0, i32::from(h.shift)));
        }
        match h.bits {
            32 => {
                self.b.push(Insn::mov32_reg(Reg::R0, Reg::R0));
            }
            bits if bits < 64 => {
                self.b.load_imm(Reg::R1, (1i64 << bits) - 1);
                self.b.push(Insn::alu64_reg(AluOp::And, Reg::R0, Reg::R1));
            }
            _ => {}
        }
        Ok(self.spill(Reg::R0))
    }

    /// Calls the helper the front end names by its kernel id.
    pub(super) fn call_helper(&mut self, id: u32) {
        self.b.push(Insn::call_id(id as i32));
    }

    /// A value fixed when the programs are generated.
    fn param(&self, p: Param) -> i64 {
        match p {
            Param::Cpid => i64::from(self.options.cpid),
            Param::StartNs => self.options.start_ns as i64,
            Param::OnlineCpus => i64::from(self.options.machine.online_cpus),
            Param::HasCpid => i64::from(self.options.cpid != 0),
        }
    }

    /// The current process (or thread) id as sdt's PID namespace sees
    /// it: `bpf_get_ns_current_pid_tgid` when sdt runs in a namespace of
    /// its own, 0 for a task outside it.
    fn ns_pid(&mut self, thread: bool) -> Op {
        const GET_NS_CURRENT_PID_TGID: i32 = 120;
        let namespace = self
            .options
            .machine
            .pid_namespace
            .filter(|_| !self.replays());
        let Some((dev, ino)) = namespace else {
            return match self.helper_value(HelperValue {
                helper: Helper::GetCurrentPidTgid as u32,
                shift: if thread { 0 } else { 32 },
                bits: 32,
            }) {
                Ok(op) => op,
                Err(_) => Op::Imm(0),
            };
        };
        let info = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, info, 0));
        self.b.load_imm(Reg::R1, dev as i64);
        self.b.load_imm(Reg::R2, ino as i64);
        self.b.push(Insn::mov64_reg(Reg::R3, Reg::R10));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R3, i32::from(info)));
        self.b.push(Insn::mov64_imm(Reg::R4, 8));
        self.b.push(Insn::call_id(GET_NS_CURRENT_PID_TGID));
        // `struct bpf_pidns_info { u32 pid; u32 tgid; }`.
        self.b.push(Insn::ldx(
            Size::W,
            Reg::R0,
            Reg::R10,
            info + if thread { 0 } else { 4 },
        ));
        self.spill(Reg::R0)
    }

    /// `argN`, written at `span`.
    fn arg(&mut self, n: u8, span: Span) -> R<Op> {
        match &self.unit.args {
            ArgAccess::Usdt(sources) => {
                let Some(source) = sources.get(usize::from(n)).copied() else {
                    return Err(Diagnostic::error(
                        span,
                        format!(
                            "{} has {} argument{}; arg{n} does not exist",
                            self.unit.display,
                            sources.len(),
                            if sources.len() == 1 { "" } else { "s" }
                        ),
                    )
                    .hint("`sdt list -v` shows each probe's arguments"));
                };
                // Lowering leaves out the sites where a read argument
                // cannot be read.
                let Some(source) = source else {
                    return Err(self.error(format!(
                        "internal error: arg{n} of {} cannot be read",
                        self.unit.display
                    )));
                };
                let reader = self.arg_reader();
                source
                    .emit_load_with(&mut self.b, CTX, ARG_SLOT, Reg::R0, reader)
                    .map_err(|e| self.error(format!("internal error reading arg{n}: {e}")))?;
                Ok(self.spill(Reg::R0))
            }
            ArgAccess::Registers => Ok(self.ctx_reg(ARG_REGS[usize::from(n)])),
            ArgAccess::Replay(widths) if usize::from(n) < widths.len() => {
                self.replayed_arg(usize::from(n));
                Ok(self.spill(Reg::R0))
            }
            ArgAccess::Replay(widths) => Err(Diagnostic::error(
                span,
                format!(
                    "{} has {} arguments; arg{n} does not exist",
                    self.unit.display,
                    widths.len()
                ),
            )),
            ArgAccess::None => Err(self.error(format!("arg{n} is not available here"))),
        }
    }

    fn binary(&mut self, op: BinOp, lhs: &TExpr, rhs: &TExpr, span: Span) -> R<Op> {
        let signed = Ty::arithmetic(&lhs.ty, &rhs.ty).is_signed();
        if op.is_comparison() {
            let skip = self.b.label();
            let slot = self.frame.slot();
            let (l, r) = (self.scalar(lhs)?, self.scalar(rhs)?);
            self.b.push(Insn::st(Size::DW, Reg::R10, slot, 1));
            self.compare_jump(op, signed, l, r, skip, true);
            self.b.push(Insn::st(Size::DW, Reg::R10, slot, 0));
            self.b.bind(skip);
            return Ok(Op::Slot(slot));
        }
        let l = self.scalar(lhs)?;
        let r = self.scalar(rhs)?;
        self.load_op(l, Reg::R0);
        let alu = match op {
            BinOp::Add => AluOp::Add,
            BinOp::Sub => AluOp::Sub,
            BinOp::Mul => AluOp::Mul,
            BinOp::Div => AluOp::Div,
            BinOp::Mod => AluOp::Mod,
            BinOp::BitAnd => AluOp::And,
            BinOp::BitOr => AluOp::Or,
            BinOp::BitXor => AluOp::Xor,
            BinOp::Shl => AluOp::Lsh,
            // As in bpftrace, `>>` shifts in zeros and `/` and `%` divide
            // unsigned, whatever the operands' signs.
            BinOp::Shr => AluOp::Rsh,
            _ => unreachable!("comparisons and logic are handled above"),
        };
        if matches!(alu, AluOp::Div | AluOp::Mod) && !matches!(r, Op::Imm(v) if v != 0) {
            return self.divide_checked(alu, l, r, span);
        }
        match r {
            // A negative immediate would be sign-extended, then divided by
            // as unsigned: fine, that is the 64-bit value it stands for.
            // The verifier refuses a division by an immediate 0, though
            // one by a register that holds 0 is defined (it gives 0).
            Op::Imm(v)
                if i32::try_from(v).is_ok()
                    && !(v == 0 && matches!(alu, AluOp::Div | AluOp::Mod)) =>
            {
                self.b.push(Insn::alu64_imm(alu, Reg::R0, v as i32));
            }
            _ => {
                self.load_op(r, Reg::R1);
                self.b.push(Insn::alu64_reg(alu, Reg::R0, Reg::R1));
            }
        }
        Ok(self.spill(Reg::R0))
    }

    /// `l / r` or `l % r` where `r` may be 0: then the result is 1 and a
    /// warning placed at `span` is printed, as bpftrace 0.25 and later do
    /// (the kernel's division by 0 would give 0 without a word).
    fn divide_checked(&mut self, alu: AluOp, l: Op, r: Op, span: Span) -> R<Op> {
        let result = self.frame.slot();
        let divide = self.b.label();
        let done = self.b.label();
        self.load_op(r, Reg::R1);
        self.b.jump_imm(JmpOp::Ne, Reg::R1, 0, divide);
        self.output(&Output::Message {
            format: self.program.zero_division,
            args: Vec::new(),
            error: false,
            span,
        })?;
        self.b.push(Insn::st(Size::DW, Reg::R10, result, 1));
        self.b.jump(done);
        self.b.bind(divide);
        self.load_op(l, Reg::R0);
        self.load_op(r, Reg::R1);
        self.b.push(Insn::alu64_reg(alu, Reg::R0, Reg::R1));
        self.b.push(Insn::stx(Size::DW, Reg::R10, result, Reg::R0));
        self.b.bind(done);
        Ok(Op::Slot(result))
    }

    /// Jumps to `target` when `l op r` is `when`.
    fn compare_jump(&mut self, op: BinOp, signed: bool, l: Op, r: Op, target: Label, when: bool) {
        let op = if when { op } else { negate(op) };
        let jmp = match (op, signed) {
            (BinOp::Eq, _) => JmpOp::Eq,
            (BinOp::Ne, _) => JmpOp::Ne,
            (BinOp::Lt, true) => JmpOp::Slt,
            (BinOp::Le, true) => JmpOp::Sle,
            (BinOp::Gt, true) => JmpOp::Sgt,
            (BinOp::Ge, true) => JmpOp::Sge,
            (BinOp::Lt, false) => JmpOp::Lt,
            (BinOp::Le, false) => JmpOp::Le,
            (BinOp::Gt, false) => JmpOp::Gt,
            (BinOp::Ge, false) => JmpOp::Ge,
            _ => unreachable!("only comparisons jump"),
        };
        self.load_op(l, Reg::R1);
        match r {
            Op::Imm(v) if i32::try_from(v).is_ok() => {
                self.b.jump_imm(jmp, Reg::R1, v as i32, target);
            }
            _ => {
                self.load_op(r, Reg::R2);
                self.b.jump_reg(jmp, Reg::R1, Reg::R2, target);
            }
        }
    }

    /// Jumps to `target` when the truth of `e` is `when`.
    pub(super) fn cond_jump(&mut self, e: &TExpr, target: Label, when: bool) -> R<()> {
        match &e.kind {
            TKind::Int(v) => {
                if (*v != 0) == when {
                    self.b.jump(target);
                }
            }
            TKind::Binary { op, lhs, rhs } if op.is_comparison() => {
                let signed = Ty::arithmetic(&lhs.ty, &rhs.ty).is_signed();
                let l = self.scalar(lhs)?;
                let r = self.scalar(rhs)?;
                self.compare_jump(*op, signed, l, r, target, when);
            }
            TKind::Logical { and, lhs, rhs } => {
                // `a && b` is false when either is; `a || b` true when either is.
                if *and != when {
                    self.cond_jump(lhs, target, when)?;
                    self.cond_jump(rhs, target, when)?;
                } else {
                    let skip = self.b.label();
                    self.cond_jump(lhs, skip, !when)?;
                    self.cond_jump(rhs, target, when)?;
                    self.b.bind(skip);
                }
            }
            TKind::Unary {
                op: UnOp::Not,
                expr,
            } => self.cond_jump(expr, target, !when)?,
            TKind::StrEq { lhs, rhs, negate } => {
                let a = self.aggregate(lhs)?;
                let b = self.aggregate(rhs)?;
                let (sa, sb) = (self.value_size(&lhs.ty), self.value_size(&rhs.ty));
                // Equal strings jump to `target` when `when != negate`.
                self.compare_bytes(a, sa, b, sb, None, target, when != *negate);
            }
            TKind::StrNCmp { lhs, rhs, n } => {
                let a = self.aggregate(lhs)?;
                let b = self.aggregate(rhs)?;
                let (sa, sb) = (self.value_size(&lhs.ty), self.value_size(&rhs.ty));
                // strncmp() is 0 (false) when the prefixes are equal.
                self.compare_bytes(a, sa, b, sb, Some(*n), target, !when);
            }
            _ => {
                let v = self.scalar(e)?;
                self.load_op(v, Reg::R1);
                self.b
                    .jump_imm(if when { JmpOp::Ne } else { JmpOp::Eq }, Reg::R1, 0, target);
            }
        }
        Ok(())
    }

    /// Compares two NUL-padded strings (their first `limit` bytes, or all
    /// of them), 8 bytes at a time, treating bytes past the shorter one as
    /// NUL; jumps to `target` if equality is `when`.
    #[allow(clippy::too_many_arguments)]
    fn compare_bytes(
        &mut self,
        a: Mem,
        sa: u32,
        b: Mem,
        sb: u32,
        limit: Option<u32>,
        target: Label,
        when: bool,
    ) {
        let len = limit
            .unwrap_or(sa.max(sb))
            .min(sa.max(sb).next_multiple_of(8));
        let differ = self.b.label();
        let equal = self.b.label();
        let words = len.div_ceil(8);
        for w in 0..words {
            let at = w * 8;
            let load = |g: &mut Self, mem: Mem, size: u32, reg: Reg| {
                if at < size.next_multiple_of(8) {
                    mem.load(&mut g.b, Size::DW, reg, at);
                } else {
                    g.b.push(Insn::mov64_imm(reg, 0));
                }
            };
            load(self, a, sa, Reg::R1);
            load(self, b, sb, Reg::R2);
            let tail = len - at;
            if tail < 8 {
                // Only the low `tail` bytes count (little-endian).
                let shift = 64 - 8 * tail as i32;
                for r in [Reg::R1, Reg::R2] {
                    self.b.push(Insn::alu64_imm(AluOp::Lsh, r, shift));
                }
            }
            self.b.jump_reg(JmpOp::Ne, Reg::R1, Reg::R2, differ);
        }
        self.b.bind(equal);
        if when {
            self.b.jump(target);
            self.b.bind(differ);
        } else {
            let end = self.b.label();
            self.b.jump(end);
            self.b.bind(differ);
            self.b.jump(target);
            self.b.bind(end);
        }
    }

    /// The memory holding the value of a non-scalar expression.
    pub(super) fn aggregate(&mut self, e: &TExpr) -> R<Mem> {
        match &e.kind {
            TKind::Var(i) => Ok(self.vars[*i]),
            TKind::TupleIndex { tuple, index } => {
                let Ty::Tuple(items) = &tuple.ty else {
                    unreachable!("the checker only indexes tuples")
                };
                let at = Ty::tuple_offsets(items, &self.program.registry)[*index];
                Ok(self.aggregate(tuple)?.offset(at))
            }
            _ => {
                let size = self.value_size(&e.ty).next_multiple_of(8).max(8);
                let dst = self.frame.scratch(size);
                self.aggregate_into(e, dst)?;
                Ok(dst)
            }
        }
    }

    /// Writes the value of `e`, in the layout of its own type, at `dst`.
    pub(super) fn aggregate_into(&mut self, e: &TExpr, dst: Mem) -> R<()> {
        let size = self.value_size(&e.ty);
        // What `dst` holds: the value, then zeros to a whole word.
        let area = Area {
            dst,
            size,
            padded: size.next_multiple_of(8).max(8),
        };
        match &e.kind {
            // Strings and buffers.
            TKind::Str(bytes) => self.store_bytes(dst, bytes, area.padded),
            TKind::HelperString { helper, .. }
                if self.replays() && *helper == sdt_lang::check::helper::GET_CURRENT_COMM =>
            {
                self.current_comm(dst, 0);
            }
            TKind::HelperString { helper, size } => {
                dst.address(&mut self.b, Reg::R1, 0);
                self.b.push(Insn::mov64_imm(Reg::R2, *size as i32));
                self.call_helper(*helper);
            }
            TKind::StrRead { ptr, len } => self.str_read(ptr, len.as_deref(), area, e.span)?,
            TKind::Concat(parts) => self.concat(parts, area)?,
            TKind::ArrayStr(place) => {
                let p = self.place(place)?;
                self.zero(dst, area.padded);
                self.read_place_str(p, size, dst, e.span);
            }
            TKind::DataLoc { offset } => self.data_loc(*offset, area),
            TKind::BufRead { ptr, len } => self.buf_read(e, ptr, len, area)?,
            // Composite values.
            TKind::Tuple(items) => self.tuple_into(e, items, area)?,
            TKind::CopyPlace(place) => {
                let p = self.place(place)?;
                self.zero(dst, area.padded);
                self.read_place(p, size, dst, e.span);
            }
            TKind::Fields(parts) => self.fields_into(parts, area)?,
            // Addresses and stacks, symbolized when printed.
            TKind::USym(addr) => self.usym(addr, dst)?,
            TKind::UStack => self.ustack(dst),
            // Values that come from elsewhere.
            TKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                let else_ = self.b.label();
                let end = self.b.label();
                self.cond_jump(cond, else_, false)?;
                self.write_value(then, dst, &e.ty)?;
                self.b.jump(end);
                self.b.bind(else_);
                self.write_value(otherwise, dst, &e.ty)?;
                self.b.bind(end);
            }
            TKind::MapGet { map, keys } => self.map_get_into(*map, keys, area)?,
            TKind::Var(_) | TKind::TupleIndex { .. } => {
                let src = self.aggregate(e)?;
                self.copy(src, dst, area.padded);
            }
            TKind::Block { stmts, value } => {
                self.block(stmts)?;
                self.write_value(value, dst, &e.ty)?;
            }
            _ if e.ty.is_scalar() => {
                let v = self.scalar(e)?;
                self.load_op(v, Reg::R0);
                dst.store(&mut self.b, Size::DW, 0, Reg::R0);
            }
            // The same bytes, printed another way (`ntop` of 16 bytes).
            TKind::Retype(inner) => self.write_value(inner, dst, &inner.ty)?,
            TKind::Convert(inner) => self.write_value(inner, dst, &e.ty)?,
            _ => {
                return Err(Diagnostic::error(
                    e.span,
                    format!(
                        "internal error: cannot make a value of {} (a bug in sdt)",
                        e.ty.display(&self.program.registry)
                    ),
                ))
            }
        }
        Ok(())
    }

    /// `str(ptr)` or `str(ptr, len)`: from the traced process at an
    /// address, or a string value cut short.
    fn str_read(&mut self, ptr: &TExpr, len: Option<&TExpr>, area: Area, span: Span) -> R<()> {
        let Area { dst, size, padded } = area;
        let source = if let Some(n) = self.captured_arg(ptr) {
            self.captured_address(n, Reg::R0);
            Err(self.spill(Reg::R0))
        } else if ptr.ty.is_scalar() {
            Err(self.scalar(ptr)?)
        } else {
            Ok(self.aggregate(ptr)?)
        };
        let n = match len {
            Some(len) => Some(self.scalar(len)?),
            None => None,
        };
        self.zero(dst, padded);
        match n {
            None => {
                self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
            }
            Some(Op::Imm(v)) => {
                let n = v.clamp(0, i64::from(size));
                self.b.push(Insn::mov64_imm(Reg::R2, n as i32));
            }
            Some(n) => {
                // Read min(len, size) bytes, NUL included (a negative
                // length, unsigned, is more than the size).
                let ok = self.b.label();
                self.load_op(n, Reg::R2);
                self.b.jump_imm(JmpOp::Le, Reg::R2, size as i32, ok);
                self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
                self.b.bind(ok);
            }
        }
        dst.address(&mut self.b, Reg::R1, 0);
        match source {
            Err(address) => {
                self.load_op(address, Reg::R3);
                if ptr.ty.space() == Some(Space::Kernel) {
                    self.b.call(Helper::ProbeReadKernelStr);
                } else {
                    self.read_user(UserRead::Str, ReadWhat::Expr(span));
                }
            }
            Ok(string) => {
                string.address(&mut self.b, Reg::R3, 0);
                self.b.call(Helper::ProbeReadKernelStr);
            }
        }
        Ok(())
    }

    /// Strings one after another, cut to `area`'s size. Each part is read
    /// with `bpf_probe_read_kernel_str` where the text so far ends, which
    /// writes its NUL and says how far it got. That end is a run-time
    /// offset, so the parts go into a temporary of twice the size: the
    /// verifier bounds offset and length apart, and the largest offset
    /// (`size - 2`) plus the largest length (`size`) fits there. The first
    /// `size - 1` bytes, then a NUL, are the value.
    fn concat(&mut self, parts: &[TExpr], area: Area) -> R<()> {
        let Area { dst, size, padded } = area;
        let full = size.saturating_sub(1);
        let joined = self.frame.scratch(2 * size);
        self.zero(joined, size.next_multiple_of(8));
        let len = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, len, 0));
        for part in parts {
            let text = self.aggregate(part)?;
            let next = self.b.label();
            self.b.push(Insn::ldx(Size::DW, Reg::R4, Reg::R10, len));
            self.b.jump_imm(JmpOp::Ge, Reg::R4, full as i32, next);
            joined.address(&mut self.b, Reg::R1, 0);
            self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R1, Reg::R4));
            self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
            self.b.push(Insn::alu64_reg(AluOp::Sub, Reg::R2, Reg::R4));
            text.address(&mut self.b, Reg::R3, 0);
            self.b.call(Helper::ProbeReadKernelStr);
            // The bytes written, NUL included; the NUL is where the next
            // part starts.
            self.b.jump_imm(JmpOp::Sle, Reg::R0, 0, next);
            self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, len));
            self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R1, Reg::R0));
            self.b.push(Insn::alu64_imm(AluOp::Sub, Reg::R1, 1));
            self.b.push(Insn::stx(Size::DW, Reg::R10, len, Reg::R1));
            self.b.bind(next);
        }
        self.zero(dst, padded);
        self.copy_exact(joined, dst, full);
        Ok(())
    }

    /// A tracepoint's `__data_loc` string: the low 16 bits of the field
    /// at `offset` are where in the record the string starts.
    fn data_loc(&mut self, offset: u32, area: Area) {
        let Area { dst, size, padded } = area;
        self.zero(dst, padded);
        self.b.push(Insn::ldx(Size::W, Reg::R3, CTX, offset as i16));
        self.b.push(Insn::alu64_imm(AluOp::And, Reg::R3, 0xffff));
        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R3, CTX));
        dst.address(&mut self.b, Reg::R1, 0);
        self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
        self.b.call(Helper::ProbeReadKernelStr);
    }

    /// `buf(ptr, len)`: its length, then at most `cap` bytes read from
    /// the traced process (or taken from a value).
    fn buf_read(&mut self, e: &TExpr, ptr: &TExpr, len: &TExpr, area: Area) -> R<()> {
        let Area { dst, padded, .. } = area;
        let Ty::Buf { size: cap } = e.ty else {
            return Err(internal_error(e, "made by buf()", &self.program.registry));
        };
        if !ptr.ty.is_scalar() {
            let have = self.value_size(&ptr.ty);
            return self.buf_of_value(ptr, len, cap, have, dst, padded);
        }
        let p = match self.captured_arg(ptr) {
            Some(n) => {
                self.captured_address(n, Reg::R0);
                self.spill(Reg::R0)
            }
            None => self.scalar(ptr)?,
        };
        let n = self.scalar(len)?;
        self.zero(dst, padded);
        let ok = self.b.label();
        self.load_op(n, Reg::R2);
        self.b.jump_imm(JmpOp::Le, Reg::R2, cap as i32, ok);
        self.b.push(Insn::mov64_imm(Reg::R2, cap as i32));
        self.b.bind(ok);
        dst.store(&mut self.b, Size::DW, 0, Reg::R2);
        self.load_op(p, Reg::R3);
        dst.address(&mut self.b, Reg::R1, 8);
        if ptr.ty.space() == Some(Space::Kernel) {
            self.b.call(Helper::ProbeReadKernel);
        } else {
            self.read_user(UserRead::Bytes, ReadWhat::Expr(e.span));
        }
        Ok(())
    }

    /// `(a, b, ...)`: each item at its offset in the tuple's layout.
    fn tuple_into(&mut self, e: &TExpr, items: &[TExpr], area: Area) -> R<()> {
        let Ty::Tuple(types) = &e.ty else {
            return Err(internal_error(e, "made as a tuple", &self.program.registry));
        };
        let offsets = Ty::tuple_offsets(types, &self.program.registry);
        self.zero(area.dst, area.padded);
        for ((item, ty), at) in items.iter().zip(types).zip(offsets) {
            self.write_value(item, area.dst.offset(at), ty)?;
        }
        Ok(())
    }

    /// A struct a uprobe read from registers, member by member, each at
    /// its offset and of its C size.
    fn fields_into(&mut self, parts: &[(u32, TExpr)], area: Area) -> R<()> {
        let dst = area.dst;
        self.zero(dst, area.padded);
        for (at, part) in parts {
            if !part.ty.is_scalar() {
                self.aggregate_into(part, dst.offset(*at))?;
                continue;
            }
            let width = match self.program.registry.c_size(&part.ty) {
                1 => Size::B,
                2 => Size::H,
                4 => Size::W,
                _ => Size::DW,
            };
            let v = self.scalar(part)?;
            self.load_op(v, Reg::R0);
            dst.store(&mut self.b, width, *at, Reg::R0);
        }
        Ok(())
    }

    /// `usym(addr)`: the address and the process it belongs to.
    fn usym(&mut self, addr: &TExpr, dst: Mem) -> R<()> {
        let a = self.scalar(addr)?;
        self.shared.user_addresses = true;
        self.load_op(a, Reg::R0);
        dst.store(&mut self.b, Size::DW, 0, Reg::R0);
        self.store_tgid(dst, 8);
        Ok(())
    }

    /// `ustack`: a stack id (or -1 for none) and the process.
    fn ustack(&mut self, dst: Mem) {
        if !self.kind().has_task() {
            // BEGIN, END and interval interrupt no process of their own:
            // the stack is empty, as in bpftrace.
            dst.store_imm(&mut self.b, Size::DW, 0, -1);
            dst.store_imm(&mut self.b, Size::DW, 8, 0);
            return;
        }
        self.shared.stacks = true;
        self.shared.user_addresses = true;
        self.uses_stack_map = true;
        self.b.push(Insn::mov64_reg(Reg::R1, CTX));
        self.b.ld_map_index(Reg::R2, layout::STACK_MAP);
        self.b
            .push(Insn::mov64_imm(Reg::R3, sdt_bpf::STACKID_USER as i32));
        self.b.call(Helper::GetStackid);
        dst.store(&mut self.b, Size::DW, 0, Reg::R0);
        let ok = self.b.label();
        self.b.jump_imm(JmpOp::Sge, Reg::R0, 0, ok);
        self.count_lost(layout::LOST_STACKS);
        self.b.bind(ok);
        self.store_tgid(dst, 8);
    }

    /// The current process's id (the thread group's), at `at` in `dst`.
    fn store_tgid(&mut self, dst: Mem, at: u32) {
        self.b.call(Helper::GetCurrentPidTgid);
        self.b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R0, 32));
        dst.store(&mut self.b, Size::DW, at, Reg::R0);
    }

    /// `@m[k]` as a value larger than a word: a copy of the element, or
    /// zeros where there is none.
    fn map_get_into(&mut self, map: usize, keys: &[TExpr], area: Area) -> R<()> {
        let Area { dst, padded, .. } = area;
        let key = self.build_key(map, keys, None)?;
        let value_size = self.program.maps[map].value_size(&self.program.registry);
        self.lookup(layout::user_map(map), key);
        let missing = self.b.label();
        let end = self.b.label();
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, missing);
        self.copy_from_reg(Reg::R0, dst, value_size.min(padded));
        self.b.jump(end);
        self.b.bind(missing);
        self.zero(dst, padded);
        self.b.bind(end);
        Ok(())
    }

    /// A buffer of `len` bytes (at most `cap`) at `dst`, zero-padded to
    /// `padded` bytes: the bytes of a value of `have` bytes (a string, an
    /// array), then zeros.
    #[allow(clippy::too_many_arguments)]
    fn buf_of_value(
        &mut self,
        string: &TExpr,
        len: &TExpr,
        cap: u32,
        have: u32,
        dst: Mem,
        padded: u32,
    ) -> R<()> {
        let src = self.aggregate(string)?;
        let n = self.scalar(len)?;
        self.zero(dst, padded);
        let (capped, copied) = (self.b.label(), self.b.label());
        self.load_op(n, Reg::R2);
        self.b.jump_imm(JmpOp::Le, Reg::R2, cap as i32, capped);
        self.b.push(Insn::mov64_imm(Reg::R2, cap as i32));
        self.b.bind(capped);
        dst.store(&mut self.b, Size::DW, 0, Reg::R2);
        self.b.jump_imm(JmpOp::Le, Reg::R2, have as i32, copied);
        self.b.push(Insn::mov64_imm(Reg::R2, have as i32));
        self.b.bind(copied);
        src.address(&mut self.b, Reg::R3, 0);
        dst.address(&mut self.b, Reg::R1, 8);
        self.b.call(Helper::ProbeReadKernel);
        Ok(())
    }

    /// Writes `e` at `dst` in the layout of `ty`, which may be wider than
    /// `e`'s own type (a map's unified key or value type).
    pub(super) fn write_value(&mut self, e: &TExpr, dst: Mem, ty: &Ty) -> R<()> {
        if ty.is_scalar() {
            let v = self.scalar(e)?;
            self.load_op(v, Reg::R0);
            dst.store(&mut self.b, Size::DW, 0, Reg::R0);
            return Ok(());
        }
        if e.ty == *ty {
            return self.aggregate_into(e, dst);
        }
        match (&e.kind, ty) {
            (TKind::Tuple(items), Ty::Tuple(types)) => {
                let offsets = Ty::tuple_offsets(types, &self.program.registry);
                self.zero(dst, self.value_size(ty).next_multiple_of(8));
                for ((item, t), at) in items.iter().zip(types).zip(offsets) {
                    self.write_value(item, dst.offset(at), t)?;
                }
                Ok(())
            }
            _ => {
                let src = self.aggregate(e)?;
                self.convert(src, &e.ty, dst, ty);
                Ok(())
            }
        }
    }

    /// Copies a value of type `from` at `src` into the layout of `to` at `dst`.
    fn convert(&mut self, src: Mem, from: &Ty, dst: Mem, to: &Ty) {
        let registry = &self.program.registry;
        match (from, to) {
            (Ty::Tuple(xs), Ty::Tuple(ys)) if xs.len() == ys.len() => {
                let (xo, yo) = (
                    Ty::tuple_offsets(xs, registry),
                    Ty::tuple_offsets(ys, registry),
                );
                let pairs: Vec<_> = xs
                    .iter()
                    .cloned()
                    .zip(ys.iter().cloned())
                    .zip(xo.into_iter().zip(yo))
                    .collect();
                for ((x, y), (a, b)) in pairs {
                    self.convert(src.offset(a), &x, dst.offset(b), &y);
                }
            }
            _ => {
                let have = from.value_size(registry).next_multiple_of(8);
                let want = to.value_size(registry).next_multiple_of(8);
                self.copy(src, dst, have.min(want));
                if want > have {
                    self.zero(dst.offset(have), want - have);
                }
            }
        }
    }

    /// Stores constant bytes, NUL-padded to `len`.
    fn store_bytes(&mut self, dst: Mem, bytes: &[u8], len: u32) {
        for at in (0..len).step_by(8) {
            let mut word = [0u8; 8];
            for (i, slot) in word.iter_mut().enumerate() {
                *slot = bytes.get(at as usize + i).copied().unwrap_or(0);
            }
            let v = i64::from_le_bytes(word);
            match i32::try_from(v) {
                Ok(small) => dst.store_imm(&mut self.b, Size::DW, at, small),
                Err(_) => {
                    self.b.load_imm(Reg::R0, v);
                    dst.store(&mut self.b, Size::DW, at, Reg::R0);
                }
            }
        }
    }

    /// Zeroes `len` bytes (a multiple of 8).
    pub(super) fn zero(&mut self, dst: Mem, len: u32) {
        if len <= 128 || matches!(dst, Mem::Stack(_)) {
            for at in (0..len).step_by(8) {
                dst.store_imm(&mut self.b, Size::DW, at, 0);
            }
        } else {
            // A failed read zeroes its destination: one helper call instead
            // of hundreds of stores.
            dst.address(&mut self.b, Reg::R1, 0);
            self.b.push(Insn::mov64_imm(Reg::R2, len as i32));
            self.b.push(Insn::mov64_imm(Reg::R3, 0));
            self.b.call(Helper::ProbeReadKernel);
        }
    }

    /// Copies `len` bytes (a multiple of 8) between program memory.
    pub(super) fn copy(&mut self, src: Mem, dst: Mem, len: u32) {
        if src == dst {
            return;
        }
        if len <= 128 {
            for at in (0..len).step_by(8) {
                src.load(&mut self.b, Size::DW, Reg::R0, at);
                dst.store(&mut self.b, Size::DW, at, Reg::R0);
            }
        } else {
            src.address(&mut self.b, Reg::R3, 0);
            dst.address(&mut self.b, Reg::R1, 0);
            self.b.push(Insn::mov64_imm(Reg::R2, len as i32));
            self.b.call(Helper::ProbeReadKernel);
        }
    }

    /// Copies `len` bytes from the memory `reg` points at (a map value).
    pub(super) fn copy_from_reg(&mut self, reg: Reg, dst: Mem, len: u32) {
        if len <= 128 {
            for at in (0..len).step_by(8) {
                self.b.push(Insn::ldx(Size::DW, Reg::R1, reg, at as i16));
                dst.store(&mut self.b, Size::DW, at, Reg::R1);
            }
        } else {
            self.b.push(Insn::mov64_reg(Reg::R3, reg));
            dst.address(&mut self.b, Reg::R1, 0);
            self.b.push(Insn::mov64_imm(Reg::R2, len as i32));
            self.b.call(Helper::ProbeReadKernel);
        }
    }
}

/// Narrows a register to an integer type's width and sign.
pub(super) fn narrow_to(b: &mut sdt_bpf::Builder, reg: Reg, ty: &Ty) {
    let (bytes, signed) = match ty {
        Ty::Int { bytes, signed } | Ty::Enum { bytes, signed, .. } => (*bytes, *signed),
        _ => return,
    };
    if bytes >= 8 {
        return;
    }
    let shift = 64 - 8 * i32::from(bytes);
    b.push(Insn::alu64_imm(AluOp::Lsh, reg, shift));
    b.push(Insn::alu64_imm(
        if signed { AluOp::Arsh } else { AluOp::Rsh },
        reg,
        shift,
    ));
}

fn negate(op: BinOp) -> BinOp {
    match op {
        BinOp::Eq => BinOp::Ne,
        BinOp::Ne => BinOp::Eq,
        BinOp::Lt => BinOp::Ge,
        BinOp::Ge => BinOp::Lt,
        BinOp::Gt => BinOp::Le,
        BinOp::Le => BinOp::Gt,
        other => other,
    }
}

/// An error for an expression that the checker should not have let
/// through to here: a bug in sdt, said as such rather than a panic.
fn internal_error(e: &TExpr, what: &str, registry: &sdt_lang::types::TypeRegistry) -> Diagnostic {
    Diagnostic::error(
        e.span,
        format!(
            "internal error: {} {what} (a bug in sdt)",
            e.ty.display(registry)
        ),
    )
}
