//! Reading an aggregation in a probe: `if (@calls > 5)`, `(uint64)@bytes`,
//! `@avg_ns[$k] * 2`, a `for` loop over a `count()` map.
//!
//! Aggregations live in per-CPU maps, so that every CPU adds to its own
//! value without atomics. A read merges them where it stands, in the
//! kernel: one `bpf_map_lookup_percpu_elem` per possible CPU, unrolled,
//! summed for `count` and `sum`, the least or greatest value set for
//! `min` and `max`, the integer mean for `avg`. User space never takes
//! part, so the value is the one at this moment of this probe.

use sdt_bpf::{AluOp, Helper, Insn, JmpOp, Reg, Size};

use super::expr::Op;
use super::Gen;
use crate::layout;
use sdt_lang::hir::MapId;
use sdt_lang::types::Agg;

impl Gen<'_> {
    /// The merged value of `map`'s entry whose key's address is in stack
    /// slot `key`; 0 when no CPU has the entry.
    pub(super) fn merged_aggregation(&mut self, map: MapId, agg: Agg, key: i16) -> Op {
        // First word: the total (count, sum, min or max); second: the
        // count of `avg`, or whether `min`/`max` have a value yet.
        let total = self.frame.slot();
        let second = self.frame.slot();
        self.b.push(Insn::st(Size::DW, Reg::R10, total, 0));
        self.b.push(Insn::st(Size::DW, Reg::R10, second, 0));
        for cpu in 0..self.options.machine.possible_cpus {
            let next = self.b.label();
            self.b.ld_map_index(Reg::R1, layout::user_map(map));
            self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, key));
            self.b.push(Insn::mov64_imm(Reg::R3, cpu as i32));
            self.b.call(Helper::MapLookupPercpuElem);
            self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, next);
            match agg {
                // (Histograms and time series are not read in probes.)
                Agg::Count
                | Agg::Sum { .. }
                | Agg::Hist { .. }
                | Agg::Lhist { .. }
                | Agg::TSeries { .. } => {
                    self.add_to_slot(total, 0);
                }
                Agg::Avg { .. } | Agg::Stats { .. } => {
                    self.add_to_slot(second, 0);
                    self.add_to_slot(total, 8);
                }
                Agg::Min { signed } | Agg::Max { signed } => {
                    let set = self.b.label();
                    // Skip a CPU that has no value yet.
                    self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R0, 8));
                    self.b.jump_imm(JmpOp::Eq, Reg::R1, 0, next);
                    self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R0, 0));
                    self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, second));
                    self.b.jump_imm(JmpOp::Eq, Reg::R2, 0, set);
                    self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, total));
                    let keep = match (matches!(agg, Agg::Min { .. }), signed) {
                        (true, true) => JmpOp::Sge,
                        (true, false) => JmpOp::Ge,
                        (false, true) => JmpOp::Sle,
                        (false, false) => JmpOp::Le,
                    };
                    self.b.jump_reg(keep, Reg::R1, Reg::R2, next);
                    self.b.bind(set);
                    self.b.push(Insn::stx(Size::DW, Reg::R10, total, Reg::R1));
                    self.b.push(Insn::st(Size::DW, Reg::R10, second, 1));
                }
            }
            self.b.bind(next);
        }
        if let Agg::Avg { signed } | Agg::Stats { signed } = agg {
            self.mean(total, second, signed);
        }
        Op::Slot(total)
    }

    /// `*slot += *(u64 *)(R0 + at)`.
    fn add_to_slot(&mut self, slot: i16, at: i16) {
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R0, at));
        self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, slot));
        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R2, Reg::R1));
        self.b.push(Insn::stx(Size::DW, Reg::R10, slot, Reg::R2));
    }

    /// `*sum = *sum / *count`, rounding toward zero, 0 when the count is.
    fn mean(&mut self, sum: i16, count: i16, signed: bool) {
        let done = self.b.label();
        let positive = self.b.label();
        self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, count));
        self.b.jump_imm(JmpOp::Eq, Reg::R2, 0, done);
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, sum));
        if signed {
            self.b.jump_imm(JmpOp::Sge, Reg::R1, 0, positive);
            self.b.push(Insn::alu64_imm(AluOp::Neg, Reg::R1, 0));
            self.b.push(Insn::alu64_reg(AluOp::Div, Reg::R1, Reg::R2));
            self.b.push(Insn::alu64_imm(AluOp::Neg, Reg::R1, 0));
            self.b.push(Insn::stx(Size::DW, Reg::R10, sum, Reg::R1));
            self.b.jump(done);
        }
        self.b.bind(positive);
        self.b.push(Insn::alu64_reg(AluOp::Div, Reg::R1, Reg::R2));
        self.b.push(Insn::stx(Size::DW, Reg::R10, sum, Reg::R1));
        self.b.bind(done);
    }
}
