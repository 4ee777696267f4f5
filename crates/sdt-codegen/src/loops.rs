//! `for` loops: each body runs as a callback, of `bpf_loop` for a range
//! and of `bpf_for_each_map_elem` for a map.
//!
//! A loop in the program's own code is walked by the verifier once per
//! iteration it can prove, so a long range or a loop with branches soon
//! exceeds what it will check; a callback is checked once, whatever the
//! number of iterations, and the kernel bounds how many there are. This
//! is the only way to walk a hash map's entries at all.
//!
//! A callback is a function of its own, emitted after the program's code
//! (see [`Gen::emit_callbacks`]). What it gets, and how it reaches the
//! rest of the program:
//!
//! * **Registers and stack are its own.** R6 to R9 start undefined, and
//!   the caller's stack is not at R10. Its temporaries use its own stack,
//!   whose size adds to its caller's under the kernel's 512-byte limit.
//! * **The caller's context** travels in a small [`area`] on the caller's
//!   stack, whose address is the callback's context argument: the
//!   callback reloads R6 from it, and sets its `returned` word when the
//!   body runs `return` or `exit()`, which the caller then honours.
//! * **Variables** of a program with loops live in scratch memory, not
//!   on the stack: the callback looks the per-CPU scratch map up again
//!   and finds the same memory, so the body reads and writes the same
//!   variables as the code around the loop. Its scratch temporaries start
//!   past what the caller holds when it calls.
//!
//! `continue` returns 0 (go on), `break` returns 1 (stop).
//!
//! `strcontains()` uses the same machinery for its search: a `bpf_loop`
//! over the haystack's start positions, each comparing the needle byte by
//! byte, so that the verifier checks one position's comparison rather
//! than every pair of positions.

use sdt_bpf::{AluOp, Helper, Insn, JmpOp, Label, Reg, Size};

use super::expr::R;
use super::mem::{Frame, Mem};
use super::{Gen, CTX, SCRATCH};
use crate::layout;
use sdt_lang::hir::{MapId, TExpr, TStmt, VarId};
use sdt_lang::types::Ty;

/// Offsets in the area a loop's caller shares with its callback.
mod area {
    /// The program's context pointer.
    pub const CTX: u32 = 0;
    /// Set by the callback when the body ran `return` or `exit()`.
    pub const RETURNED: u32 = 8;
    /// A range's first value.
    pub const START: u32 = 16;
    pub const SIZE: u32 = 24;
}

/// The most iterations `bpf_loop` runs; a longer range stops there.
pub const MAX_ITERATIONS: i32 = 1 << 23;

/// What a loop's callback starts with.
#[derive(Clone, Copy, Debug)]
enum Head {
    /// `R1` is the iteration number, `R2` the area.
    Range { var: VarId },
    /// `R2` points at the entry's key, `R3` at its value, `R4` is the area.
    Map { var: VarId, map: MapId },
    /// `R1` is a start position in the haystack, `R2` the area; both
    /// strings are in scratch memory, the haystack followed by zeros.
    Contains {
        haystack: u32,
        haystack_len: u32,
        needle: u32,
        needle_len: u32,
        search: Search,
    },
}

/// What a search of one string in another gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Search {
    /// 1 if found, else 0 (`strcontains`).
    Contains,
    /// Where the needle first starts, else -1 (`strstr`).
    Index,
}

/// A loop body to emit as a callback after the program's code.
pub(super) struct Callback {
    label: Label,
    head: Head,
    /// A copy of the body: bodies may sit in expressions (`{ ... }`),
    /// which the generator does not hold for the whole run.
    body: Vec<TStmt>,
    scratch_from: u32,
    /// The function that calls it, by index in [`Gen::functions`].
    caller: usize,
}

/// One function of the program and its stack, for the kernel's limit on
/// the stack of a chain of calls.
#[derive(Clone, Copy, Debug)]
pub(super) struct Function {
    pub stack: u32,
    pub caller: Option<usize>,
}

impl Gen<'_> {
    /// `for ($var : start..end) { body }`.
    pub(super) fn for_range(
        &mut self,
        var: VarId,
        start: &TExpr,
        end: &TExpr,
        body: &[TStmt],
    ) -> R<()> {
        let start = self.scalar(start)?;
        let end = self.scalar(end)?;
        let area = self.frame.stack(area::SIZE);
        let skip = self.b.label();
        let bounded = self.b.label();
        self.load_op(start, Reg::R1);
        area.store(&mut self.b, Size::DW, area::START, Reg::R1);
        self.load_op(end, Reg::R2);
        self.b.push(Insn::alu64_reg(AluOp::Sub, Reg::R2, Reg::R1));
        self.b.jump_imm(JmpOp::Sle, Reg::R2, 0, skip);
        self.b
            .jump_imm(JmpOp::Sle, Reg::R2, MAX_ITERATIONS, bounded);
        self.b.push(Insn::mov64_imm(Reg::R2, MAX_ITERATIONS));
        self.b.bind(bounded);
        let callback = self.defer(Head::Range { var }, body);
        self.prepare_area(area);
        self.b.push(Insn::mov64_reg(Reg::R1, Reg::R2));
        self.b.ld_func(Reg::R2, callback);
        area.address(&mut self.b, Reg::R3, 0);
        self.b.push(Insn::mov64_imm(Reg::R4, 0));
        self.b.call(Helper::Loop);
        self.after_loop(area);
        self.b.bind(skip);
        Ok(())
    }

    /// `for ($var : @map) { body }`.
    pub(super) fn for_map(&mut self, var: VarId, map: MapId, body: &[TStmt]) {
        let area = self.frame.stack(area::SIZE);
        let callback = self.defer(Head::Map { var, map }, body);
        self.prepare_area(area);
        self.b.ld_map_index(Reg::R1, layout::user_map(map));
        self.b.ld_func(Reg::R2, callback);
        area.address(&mut self.b, Reg::R3, 0);
        self.b.push(Insn::mov64_imm(Reg::R4, 0));
        self.b.call(Helper::ForEachMapElem);
        self.after_loop(area);
    }

    /// Searches the string at `haystack` for the one at `needle`;
    /// returns a slot holding what `search` asks for.
    pub(super) fn str_search(
        &mut self,
        haystack: Mem,
        haystack_len: u32,
        needle: Mem,
        needle_len: u32,
        search: Search,
    ) -> i16 {
        let padded = haystack_len.next_multiple_of(8) + needle_len.next_multiple_of(8);
        let hay_at = self.frame.scratch_offset(padded);
        let hay_copy = Mem::Scratch(hay_at);
        self.zero(hay_copy, padded);
        self.copy(haystack, hay_copy, haystack_len.next_multiple_of(8));
        let needle_at = self.frame.scratch_offset(needle_len);
        self.copy(
            needle,
            Mem::Scratch(needle_at),
            needle_len.next_multiple_of(8),
        );
        let area = self.frame.stack(area::SIZE);
        let callback = self.defer(
            Head::Contains {
                haystack: hay_at,
                haystack_len,
                needle: needle_at,
                needle_len,
                search,
            },
            &[],
        );
        self.prepare_area(area);
        area.store_imm(&mut self.b, Size::DW, area::START, 0);
        self.b.push(Insn::mov64_imm(Reg::R1, haystack_len as i32));
        self.b.ld_func(Reg::R2, callback);
        area.address(&mut self.b, Reg::R3, 0);
        self.b.push(Insn::mov64_imm(Reg::R4, 0));
        self.b.call(Helper::Loop);
        area.load(&mut self.b, Size::DW, Reg::R0, area::START);
        if search == Search::Index {
            // The callback stores the position plus one.
            self.b.push(Insn::alu64_imm(AluOp::Sub, Reg::R0, 1));
        }
        self.spill_slot(Reg::R0)
    }

    /// The length of the string at `s`, of `size` bytes at most with its
    /// NUL: what `bpf_probe_read_kernel_str` copies, less the NUL.
    pub(super) fn str_len(&mut self, s: Mem, size: u32) -> i16 {
        let copy = self.frame.scratch(size.next_multiple_of(8));
        let zero = self.b.label();
        let done = self.b.label();
        copy.address(&mut self.b, Reg::R1, 0);
        self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
        s.address(&mut self.b, Reg::R3, 0);
        self.b.call(Helper::ProbeReadKernelStr);
        self.b.jump_imm(JmpOp::Sle, Reg::R0, 0, zero);
        self.b.push(Insn::alu64_imm(AluOp::Sub, Reg::R0, 1));
        self.b.jump(done);
        self.b.bind(zero);
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.bind(done);
        self.spill_slot(Reg::R0)
    }

    /// One start position of `strcontains()`: sets the area's result and
    /// stops when the needle matches there, or where the haystack ends.
    fn contains_at(
        &mut self,
        haystack: u32,
        haystack_len: u32,
        needle: u32,
        needle_len: u32,
        search: Search,
    ) {
        let area_slot = self.frame.slot();
        let index = self.frame.slot();
        let stop = self.b.label();
        let next = self.b.label();
        let found = self.b.label();
        self.b
            .jump_imm(JmpOp::Ge, Reg::R1, haystack_len as i32, stop);
        self.b
            .push(Insn::stx(Size::DW, Reg::R10, area_slot, Reg::R2));
        self.b.push(Insn::stx(Size::DW, Reg::R10, index, Reg::R1));
        self.look_up_scratch(stop);
        self.b.push(Insn::ldx(Size::DW, Reg::R7, Reg::R10, index));
        self.b.push(Insn::mov64_reg(Reg::R3, SCRATCH));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R3, haystack as i32));
        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R3, Reg::R7));
        for j in 0..needle_len {
            self.b
                .push(Insn::ldx(Size::B, Reg::R4, SCRATCH, (needle + j) as i16));
            self.b.jump_imm(JmpOp::Eq, Reg::R4, 0, found);
            self.b.push(Insn::ldx(Size::B, Reg::R5, Reg::R3, j as i16));
            if j == 0 {
                // The haystack ends at its NUL, as a C string: what
                // follows it is never searched.
                self.b.jump_imm(JmpOp::Eq, Reg::R5, 0, stop);
            }
            self.b.jump_reg(JmpOp::Ne, Reg::R5, Reg::R4, next);
        }
        self.b.bind(found);
        self.b
            .push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, area_slot));
        match search {
            Search::Contains => {
                self.b
                    .push(Insn::st(Size::DW, Reg::R1, area::START as i16, 1));
            }
            Search::Index => {
                self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R7, 1));
                self.b
                    .push(Insn::stx(Size::DW, Reg::R1, area::START as i16, Reg::R7));
            }
        }
        self.b.bind(stop);
        self.b.push(Insn::mov64_imm(Reg::R0, 1)).exit();
        self.b.bind(next);
        self.b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
    }

    fn defer(&mut self, head: Head, body: &[TStmt]) -> Label {
        let label = self.b.label();
        self.callbacks.push(Callback {
            label,
            head,
            body: body.to_vec(),
            scratch_from: self.frame.scratch_in_use(),
            caller: self.function,
        });
        label
    }

    /// The context pointer, and `returned` cleared.
    fn prepare_area(&mut self, area: Mem) {
        area.store(&mut self.b, Size::DW, area::CTX, CTX);
        area.store_imm(&mut self.b, Size::DW, area::RETURNED, 0);
    }

    /// Leaves the probe if the body ran `return` or `exit()`.
    fn after_loop(&mut self, area: Mem) {
        area.load(&mut self.b, Size::DW, Reg::R1, area::RETURNED);
        let exit = self.exit;
        self.b.jump_imm(JmpOp::Ne, Reg::R1, 0, exit);
    }

    /// Emits the loop bodies the program's code asked for, and those
    /// their own loops ask for.
    pub(super) fn emit_callbacks(&mut self) -> R<()> {
        let mut next = 0;
        while next < self.callbacks.len() {
            let callback = &mut self.callbacks[next];
            let (label, head, body, scratch_from, caller) = (
                callback.label,
                callback.head,
                std::mem::take(&mut callback.body),
                callback.scratch_from,
                callback.caller,
            );
            let frame = std::mem::replace(&mut self.frame, Frame::callback(scratch_from));
            let exit = self.exit;
            let loops = std::mem::take(&mut self.loops);
            let function = self.function;
            self.function = self.functions.len();
            self.functions.push(Function {
                stack: 0,
                caller: Some(caller),
            });
            let result = self.callback_body(label, head, &body);
            self.functions[self.function].stack = self.frame.stack_size();
            self.scratch_peak = self.scratch_peak.max(self.frame.scratch_size());
            self.frame = frame;
            self.exit = exit;
            self.loops = loops;
            self.function = function;
            result?;
            next += 1;
        }
        Ok(())
    }

    fn callback_body(&mut self, label: Label, head: Head, body: &[TStmt]) -> R<()> {
        self.b.bind(label);
        if let Head::Contains {
            haystack,
            haystack_len,
            needle,
            needle_len,
            search,
        } = head
        {
            self.contains_at(haystack, haystack_len, needle, needle_len, search);
            return Ok(());
        }
        let area_slot = self.frame.slot();
        let next = self.b.label();
        let stop = self.b.label();
        let returned = self.b.label();
        match head {
            Head::Range { var } => {
                let index = self.frame.slot();
                self.b
                    .push(Insn::stx(Size::DW, Reg::R10, area_slot, Reg::R2));
                self.b
                    .push(Insn::ldx(Size::DW, Reg::R3, Reg::R2, area::START as i16));
                self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R1, Reg::R3));
                self.b.push(Insn::stx(Size::DW, Reg::R10, index, Reg::R1));
                self.b
                    .push(Insn::ldx(Size::DW, CTX, Reg::R2, area::CTX as i16));
                self.look_up_scratch(stop);
                self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, index));
                self.vars[var].store(&mut self.b, Size::DW, 0, Reg::R1);
            }
            Head::Map { var, map } => {
                let key = self.frame.slot();
                let value = self.frame.slot();
                self.b
                    .push(Insn::stx(Size::DW, Reg::R10, area_slot, Reg::R4));
                self.b.push(Insn::stx(Size::DW, Reg::R10, key, Reg::R2));
                self.b.push(Insn::stx(Size::DW, Reg::R10, value, Reg::R3));
                self.b
                    .push(Insn::ldx(Size::DW, CTX, Reg::R4, area::CTX as i16));
                self.look_up_scratch(stop);
                self.entry_into_var(var, map, key, value);
            }
            Head::Contains { .. } => {}
        }
        let exit = std::mem::replace(&mut self.exit, returned);
        self.loops.push((next, stop));
        let result = self.block(body);
        self.loops.pop();
        self.exit = exit;
        result?;
        self.b.bind(next);
        self.b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
        self.b.bind(returned);
        self.b
            .push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, area_slot));
        self.b
            .push(Insn::st(Size::DW, Reg::R1, area::RETURNED as i16, 1));
        self.b.bind(stop);
        self.b.push(Insn::mov64_imm(Reg::R0, 1)).exit();
        Ok(())
    }

    /// `R9 = &scratch[0]`, the memory the program's code found, or stop
    /// the loop if the lookup fails (it cannot: the program has it).
    fn look_up_scratch(&mut self, stop: Label) {
        super::look_up_scratch(&mut self.b, self.faulting.is_some(), false);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, stop);
        self.b.push(Insn::mov64_reg(SCRATCH, Reg::R0));
    }

    /// `$var = (key, value)` from the entry whose key and value pointers
    /// are in the stack slots `key` and `value`.
    fn entry_into_var(&mut self, var: VarId, map: MapId, key: i16, value: i16) {
        let registry = &self.program.registry;
        let decl = &self.program.maps[map];
        let Ty::Tuple(parts) = &self.instance.vars[var] else {
            return;
        };
        let offsets = Ty::tuple_offsets(parts, registry);
        let key_size = decl.key_size(registry);
        let home = self.vars[var];
        self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, key));
        for at in (0..key_size).step_by(8) {
            self.b
                .push(Insn::ldx(Size::DW, Reg::R1, Reg::R2, at as i16));
            home.store(&mut self.b, Size::DW, at, Reg::R1);
        }
        let value_home = home.offset(offsets[1]);
        match decl.aggregation() {
            Some(agg) => {
                let merged = self.merged_aggregation(map, agg, key);
                self.load_op(merged, Reg::R1);
                value_home.store(&mut self.b, Size::DW, 0, Reg::R1);
            }
            None => {
                let size = decl.value_size(registry);
                self.b.push(Insn::ldx(Size::DW, Reg::R3, Reg::R10, value));
                for at in (0..size).step_by(8) {
                    self.b
                        .push(Insn::ldx(Size::DW, Reg::R1, Reg::R3, at as i16));
                    value_home.store(&mut self.b, Size::DW, at, Reg::R1);
                }
            }
        }
    }

    /// The most stack a chain of calls from the program's code to a
    /// callback uses, each frame rounded as the kernel rounds it.
    pub(super) fn deepest_stack(&self) -> u32 {
        let frame = |f: &Function| f.stack.max(1).next_multiple_of(32);
        (0..self.functions.len())
            .map(|mut i| {
                let mut total = 0;
                loop {
                    let f = &self.functions[i];
                    total += frame(f);
                    match f.caller {
                        Some(c) => i = c,
                        None => break total,
                    }
                }
            })
            .max()
            .unwrap_or(0)
    }
}
