//! Lowering statements: assignments, map updates, aggregations, control
//! flow, and the records sent to user space.

use sdt_bpf::{
    AluOp, Helper, Insn, JmpOp, Reg, Size, QUERY_AVAIL_DATA, SUBMIT_FORCE_WAKEUP, SUBMIT_NO_WAKEUP,
};

use super::expr::{Op, R};
use super::mem::{Mem, KEY_SLOT};
use super::replay::Current;
use super::user::UserRead;
use super::{Gen, CTX};
use crate::layout::{self, Field, OutputInfo, ReadWhat, HEADER};
use sdt_lang::hir::{MapId, Output, TExpr, TStmt};
use sdt_lang::types::{Agg, TSeriesAgg, Ty};

/// `-EEXIST`: an insertion lost a race with another CPU, which is fine.
const EEXIST: i32 = -17;

/// Keys of scalars up to this size are built on the stack.
const STACK_KEY_MAX: u32 = 64;

impl Gen<'_> {
    pub(super) fn block(&mut self, stmts: &[TStmt]) -> R<()> {
        for stmt in stmts {
            let mark = self.frame.mark();
            self.stmt(stmt)?;
            self.frame.release(mark);
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &TStmt) -> R<()> {
        if let Some(span) = stmt_span(stmt) {
            self.span = span;
            self.mark_span();
        }
        match stmt {
            TStmt::Expr(e) => {
                // Only side effects matter (`@x++`, a call).
                if e.ty.is_scalar() {
                    self.scalar(e)?;
                } else {
                    self.aggregate(e)?;
                }
            }
            TStmt::AssignVar { var, value } => {
                let home = self.vars[*var];
                let ty = self.instance.vars[*var].clone();
                self.write_value(value, home, &ty)?;
            }
            TStmt::AssignMap {
                map, keys, value, ..
            } => {
                let decl = &self.program.maps[*map];
                let ty = decl.value.clone();
                let size = decl.value_size(&self.program.registry);
                let key = self.build_key(*map, keys, None)?;
                let buffer = if ty.is_scalar() {
                    self.frame.stack(8)
                } else {
                    self.frame.scratch(size)
                };
                self.write_value(value, buffer, &ty)?;
                self.update(*map, key, buffer, 0)?;
            }
            TStmt::Aggregate {
                map,
                keys,
                agg,
                value,
                ..
            } => self.aggregate_stmt(*map, keys, *agg, value.as_ref())?,
            TStmt::If {
                cond,
                then,
                otherwise,
            } => {
                let else_ = self.b.label();
                let end = self.b.label();
                self.cond_jump(cond, else_, false)?;
                self.block(then)?;
                if !otherwise.is_empty() {
                    self.b.jump(end);
                }
                self.b.bind(else_);
                self.block(otherwise)?;
                self.b.bind(end);
            }
            TStmt::While { cond, body, .. } => {
                let top = self.b.here();
                let end = self.b.label();
                self.cond_jump(cond, end, false)?;
                self.loops.push((top, end));
                self.block(body)?;
                self.loops.pop();
                self.b.jump(top);
                self.b.bind(end);
            }
            TStmt::Unroll { count, body } => {
                for _ in 0..*count {
                    self.block(body)?;
                }
            }
            TStmt::ForRange {
                var,
                start,
                end,
                body,
                ..
            } => self.for_range(*var, start, end, body)?,
            TStmt::ForMap { var, map, body, .. } => self.for_map(*var, *map, body),
            TStmt::ZeroVar(var) => {
                let size = self.value_size(&self.instance.vars[*var]);
                let home = self.vars[*var];
                self.zero(home, size.next_multiple_of(8));
            }
            TStmt::Block(body) => self.block(body)?,
            TStmt::Break | TStmt::Continue => {
                let Some(&(top, end)) = self.loops.last() else {
                    return Err(self.error("`break` and `continue` belong inside a loop"));
                };
                self.b.jump(if matches!(stmt, TStmt::Break) {
                    end
                } else {
                    top
                });
            }
            TStmt::Return => {
                let exit = self.exit;
                self.b.jump(exit);
            }
            TStmt::Output(output) => self.output(output)?,
        }
        Ok(())
    }

    /// Builds the key of `map` from `keys`, and the histogram bucket if
    /// given; returns where it is.
    pub(super) fn build_key(&mut self, map: MapId, keys: &[TExpr], bucket: Option<Op>) -> R<Mem> {
        let decl = &self.program.maps[map];
        let registry = &self.program.registry;
        let size = decl.key_size(registry);
        let offsets = decl.key_offsets(registry);
        let bucket_at = decl.bucket_offset(registry);
        let types = decl.keys.clone();
        let all_scalar = types.iter().all(Ty::is_scalar);
        let key = if all_scalar && size <= STACK_KEY_MAX {
            self.frame.stack(size)
        } else {
            self.frame.scratch(size)
        };
        if keys.is_empty() && bucket.is_none() {
            key.store_imm(&mut self.b, Size::DW, 0, 0);
            return Ok(key);
        }
        if !all_scalar {
            self.zero(key, size.next_multiple_of(8));
        }
        for ((k, ty), at) in keys.iter().zip(&types).zip(offsets) {
            self.write_value(k, key.offset(at), ty)?;
        }
        if let Some(bucket) = bucket {
            self.load_op(bucket, Reg::R0);
            key.store(&mut self.b, Size::DW, bucket_at, Reg::R0);
        }
        Ok(key)
    }

    /// `R0 = bpf_map_lookup_elem(map, key)`.
    pub(super) fn lookup(&mut self, map: u32, key: Mem) {
        self.b.ld_map_index(Reg::R1, map);
        key.address(&mut self.b, Reg::R2, 0);
        self.b.call(Helper::MapLookupElem);
    }

    /// Updates user map `map` and counts a refusal (a full map).
    pub(super) fn update(&mut self, map: MapId, key: Mem, value: Mem, flags: i32) -> R<()> {
        self.b.ld_map_index(Reg::R1, layout::user_map(map));
        key.address(&mut self.b, Reg::R2, 0);
        value.address(&mut self.b, Reg::R3, 0);
        self.b.push(Insn::mov64_imm(Reg::R4, flags));
        self.b.call(Helper::MapUpdateElem);
        let ok = self.b.label();
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, ok);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, EEXIST, ok);
        self.count_full_update(map)?;
        self.b.bind(ok);
        Ok(())
    }

    /// An update a full map refused: counted (the end of the run says how
    /// many), and, the first time on this CPU, a warning placed at the
    /// statement, in bpftrace's words. (bpftrace warns at every one.)
    fn count_full_update(&mut self, map: MapId) -> R<()> {
        let done = self.b.label();
        let index = layout::LOST_MAP_UPDATES + map as u32;
        self.b
            .push(Insn::st(Size::W, Reg::R10, KEY_SLOT, index as i32));
        self.b.ld_map_index(Reg::R1, layout::LOST_MAP);
        self.b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R2, i32::from(KEY_SLOT)));
        self.b.call(Helper::MapLookupElem);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, done);
        // This CPU's counter: no other program runs on it meanwhile.
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R0, 0));
        self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R1, 1));
        self.b.push(Insn::stx(Size::DW, Reg::R0, 0, Reg::R1));
        self.b.jump_imm(JmpOp::Ne, Reg::R1, 1, done);
        self.output(&Output::Message {
            format: self.program.map_full,
            args: Vec::new(),
            error: false,
            span: self.span,
        })?;
        self.b.bind(done);
        Ok(())
    }

    /// Adds one to counter `index` of the lost map.
    pub(super) fn count_lost(&mut self, index: u32) {
        self.count(layout::LOST_MAP, index);
    }

    /// Adds one to counter `index` of the per-CPU array `map`: a lookup
    /// (which the kernel inlines for per-CPU arrays) and an atomic add,
    /// since another program on this CPU may run between the two (a
    /// sleepable or preempted one).
    pub(super) fn count(&mut self, map: u32, index: u32) {
        let done = self.b.label();
        self.b
            .push(Insn::st(Size::W, Reg::R10, KEY_SLOT, index as i32));
        self.b.ld_map_index(Reg::R1, map);
        self.b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R2, i32::from(KEY_SLOT)));
        self.b.call(Helper::MapLookupElem);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, done);
        self.b.push(Insn::mov64_imm(Reg::R1, 1));
        self.b.push(Insn::atomic_add(Size::DW, Reg::R0, 0, Reg::R1));
        self.b.bind(done);
    }

    fn aggregate_stmt(
        &mut self,
        map: MapId,
        keys: &[TExpr],
        agg: Agg,
        value: Option<&TExpr>,
    ) -> R<()> {
        let v = match value {
            Some(e) => Some(self.scalar(e)?),
            None => None,
        };
        // A time series' interval: its number since the epoch, and that
        // modulo the count kept, which is the bucket.
        let mut interval = None;
        let bucket = match (agg, v) {
            (Agg::Hist { bits }, Some(v)) => Some(self.hist_bucket(v, bits)),
            (Agg::Lhist { min, max, step }, Some(v)) => Some(self.lhist_bucket(v, min, max, step)),
            (
                Agg::TSeries {
                    interval_ns, count, ..
                },
                Some(_),
            ) => {
                let (now, number, bucket) = self.tseries_interval(interval_ns, count);
                interval = Some((now, number));
                Some(bucket)
            }
            _ => None,
        };
        let key = self.build_key(map, keys, bucket)?;
        let map_index = layout::user_map(map);
        // Look the entry up, creating it zeroed the first time.
        let have = self.b.label();
        let done = self.b.label();
        self.lookup(map_index, key);
        self.b.jump_imm(JmpOp::Ne, Reg::R0, 0, have);
        let zero = self.frame.stack(agg.value_size());
        self.zero(zero, agg.value_size());
        self.update(map, key, zero, sdt_bpf::map::UPDATE_NOEXIST as i32)?;
        self.lookup(map_index, key);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, done);
        self.b.bind(have);
        // R0 points at this CPU's value; R7 keeps it across loads of `v`.
        self.b.push(Insn::mov64_reg(Reg::R7, Reg::R0));
        match agg {
            Agg::Count => self.add_at(0, Op::Imm(1)),
            Agg::Sum { .. } => self.add_at(0, v.unwrap_or(Op::Imm(0))),
            Agg::Avg { .. } | Agg::Stats { .. } | Agg::Hist { .. } | Agg::Lhist { .. } => {
                self.add_at(0, Op::Imm(1));
                self.add_at(8, v.unwrap_or(Op::Imm(0)));
            }
            Agg::Min { signed } | Agg::Max { signed } => {
                let is_min = matches!(agg, Agg::Min { .. });
                let set = self.b.label();
                let v = v.unwrap_or(Op::Imm(0));
                self.load_op(v, Reg::R1);
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, 8));
                self.b.jump_imm(JmpOp::Eq, Reg::R2, 0, set);
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, 0));
                let keep = match (is_min, signed) {
                    (true, true) => JmpOp::Sge,
                    (true, false) => JmpOp::Ge,
                    (false, true) => JmpOp::Sle,
                    (false, false) => JmpOp::Le,
                };
                self.b.jump_reg(keep, Reg::R1, Reg::R2, done);
                self.b.bind(set);
                self.b.push(Insn::stx(Size::DW, Reg::R7, 0, Reg::R1));
                self.b.push(Insn::st(Size::DW, Reg::R7, 8, 1));
            }
            Agg::TSeries { how, .. } => {
                let (now, number) = interval.expect("a time series has its interval");
                self.tseries_update(how, v.unwrap_or(Op::Imm(0)), now, number);
            }
        }
        self.b.bind(done);
        Ok(())
    }

    /// The wall-clock time now, the number of the `interval_ns`-long
    /// interval it is in, and that modulo `count`: three slots.
    fn tseries_interval(&mut self, interval_ns: u64, count: u32) -> (i16, i16, Op) {
        self.current(Current::Time);
        self.b.load_imm(Reg::R1, self.options.wall_offset_ns as i64);
        self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R0, Reg::R1));
        let now = self.spill_slot(Reg::R0);
        self.b.load_imm(Reg::R1, interval_ns as i64);
        self.b.push(Insn::alu64_reg(AluOp::Div, Reg::R0, Reg::R1));
        let number = self.spill_slot(Reg::R0);
        self.b.load_imm(Reg::R1, i64::from(count));
        self.b.push(Insn::alu64_reg(AluOp::Mod, Reg::R0, Reg::R1));
        (now, number, self.spill(Reg::R0))
    }

    /// Puts `v` in this CPU's value of an interval (R7 points at it:
    /// value, then the time it was set or the count of an average, then
    /// the interval's number). What the value held is dropped when it is
    /// of an earlier interval that had the same bucket.
    fn tseries_update(&mut self, how: TSeriesAgg, v: Op, now: i16, number: i16) {
        let (value, meta, at) = (0, 8, 16);
        let fresh = self.b.label();
        let merge = self.b.label();
        let done = self.b.label();
        self.load_op(v, Reg::R3);
        self.b.push(Insn::ldx(Size::DW, Reg::R4, Reg::R10, number));
        self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, at));
        self.b.jump_reg(JmpOp::Ne, Reg::R2, Reg::R4, fresh);
        self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, meta));
        self.b.jump_imm(JmpOp::Eq, Reg::R2, 0, fresh);
        self.b.jump(merge);
        // The first value of this interval.
        self.b.bind(fresh);
        self.b.push(Insn::stx(Size::DW, Reg::R7, value, Reg::R3));
        self.b.push(Insn::stx(Size::DW, Reg::R7, at, Reg::R4));
        match how {
            TSeriesAgg::Last => {
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, now));
                self.b.push(Insn::stx(Size::DW, Reg::R7, meta, Reg::R2));
            }
            _ => {
                self.b.push(Insn::st(Size::DW, Reg::R7, meta, 1));
            }
        }
        self.b.jump(done);
        // Another value of the same interval.
        self.b.bind(merge);
        match how {
            TSeriesAgg::Last => {
                self.b.push(Insn::stx(Size::DW, Reg::R7, value, Reg::R3));
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R10, now));
                self.b.push(Insn::stx(Size::DW, Reg::R7, meta, Reg::R2));
            }
            TSeriesAgg::Sum | TSeriesAgg::Avg => {
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, value));
                self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R2, Reg::R3));
                self.b.push(Insn::stx(Size::DW, Reg::R7, value, Reg::R2));
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, meta));
                self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R2, 1));
                self.b.push(Insn::stx(Size::DW, Reg::R7, meta, Reg::R2));
            }
            TSeriesAgg::Min | TSeriesAgg::Max => {
                self.b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R7, value));
                let keep = if how == TSeriesAgg::Min {
                    JmpOp::Sge
                } else {
                    JmpOp::Sle
                };
                self.b.jump_reg(keep, Reg::R3, Reg::R2, done);
                self.b.push(Insn::stx(Size::DW, Reg::R7, value, Reg::R3));
            }
        }
        self.b.bind(done);
    }

    /// `*(u64 *)(R7 + at) += v`; the value is this CPU's own.
    fn add_at(&mut self, at: i16, v: Op) {
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R7, at));
        match v {
            Op::Imm(x) if i32::try_from(x).is_ok() => {
                self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R1, x as i32));
            }
            other => {
                self.load_op(other, Reg::R2);
                self.b.push(Insn::alu64_reg(AluOp::Add, Reg::R1, Reg::R2));
            }
        }
        self.b.push(Insn::stx(Size::DW, Reg::R7, at, Reg::R1));
    }

    /// The power-of-two bucket of `v`: 0 for negative values, 1 for 0,
    /// then `2 + floor(log2 v)`.
    fn hist_bucket(&mut self, v: Op, bits: u8) -> Op {
        let _ = bits;
        let done = self.b.label();
        let positive = self.b.label();
        self.load_op(v, Reg::R1);
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.jump_imm(JmpOp::Slt, Reg::R1, 0, done);
        self.b.push(Insn::mov64_imm(Reg::R0, 1));
        self.b.jump_imm(JmpOp::Eq, Reg::R1, 0, done);
        self.b.bind(positive);
        // R0 = 2 + log2(R1), by halving the search range.
        self.b.push(Insn::mov64_imm(Reg::R0, 2));
        for shift in [32, 16, 8, 4, 2, 1] {
            let skip = self.b.label();
            self.b.push(Insn::mov64_reg(Reg::R2, Reg::R1));
            self.b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R2, shift));
            self.b.jump_imm(JmpOp::Eq, Reg::R2, 0, skip);
            self.b.push(Insn::mov64_reg(Reg::R1, Reg::R2));
            self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R0, shift));
            self.b.bind(skip);
        }
        self.b.bind(done);
        self.spill(Reg::R0)
    }

    /// The linear bucket of `v`: 0 below `min`, `1 + (v - min) / step`
    /// inside, one past the last full step from the last full step on.
    fn lhist_bucket(&mut self, v: Op, min: i64, max: i64, step: i64) -> Op {
        let steps = (max - min) / step;
        let top = min + steps * step;
        let done = self.b.label();
        self.load_op(v, Reg::R1);
        self.b.push(Insn::mov64_imm(Reg::R0, 0));
        self.b.load_imm(Reg::R2, min);
        self.b.jump_reg(JmpOp::Slt, Reg::R1, Reg::R2, done);
        self.b.load_imm(Reg::R0, steps + 1);
        self.b.load_imm(Reg::R2, top);
        self.b.jump_reg(JmpOp::Sge, Reg::R1, Reg::R2, done);
        self.b.push(Insn::mov64_reg(Reg::R0, Reg::R1));
        self.b.load_imm(Reg::R2, min);
        self.b.push(Insn::alu64_reg(AluOp::Sub, Reg::R0, Reg::R2));
        self.b.load_imm(Reg::R2, step);
        self.b.push(Insn::alu64_reg(AluOp::Div, Reg::R0, Reg::R2));
        self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R0, 1));
        self.b.bind(done);
        self.spill(Reg::R0)
    }

    pub(super) fn output(&mut self, output: &Output) -> R<()> {
        let registry = &self.program.registry;
        let stamped = self.options.stamp_printf && matches!(output, Output::Printf { .. });
        let start = if stamped { layout::stamp::END } else { HEADER };
        let fields = |args: &[TExpr]| -> Vec<Field> {
            let types: Vec<Ty> = args.iter().map(|a| a.ty.clone()).collect();
            Ty::tuple_offsets(&types, registry)
                .into_iter()
                .zip(types)
                .map(|(at, ty)| Field {
                    ty,
                    offset: start + at,
                })
                .collect()
        };
        let (info, args, urgent): (OutputInfo, Vec<&TExpr>, bool) = match output {
            Output::Printf { format, args } => (
                OutputInfo::Printf {
                    format: *format,
                    fields: fields(args),
                    stamped,
                },
                args.iter().collect(),
                false,
            ),
            Output::System { format, args } => (
                OutputInfo::System {
                    format: *format,
                    fields: fields(args),
                },
                args.iter().collect(),
                true,
            ),
            Output::Message {
                format,
                args,
                error,
                span,
            } => (
                OutputInfo::Message {
                    format: *format,
                    fields: fields(args),
                    error: *error,
                    span: *span,
                },
                args.iter().collect(),
                true,
            ),
            Output::Cat { format, args } => (
                OutputInfo::Cat {
                    format: *format,
                    fields: fields(args),
                },
                args.iter().collect(),
                true,
            ),
            Output::PrintMap { map, top, div } => return self.print_map(*map, *top, *div),
            Output::PrintValue(value) => (
                OutputInfo::PrintValue {
                    field: Field {
                        ty: value.ty.clone(),
                        offset: HEADER,
                    },
                },
                vec![value],
                false,
            ),
            Output::Clear(map) => {
                self.clear_map(*map);
                return Ok(());
            }
            Output::Zero(map) => {
                self.zero_map(*map);
                return Ok(());
            }
            Output::Exit(code) => (
                OutputInfo::Exit {
                    has_code: code.is_some(),
                },
                code.iter().collect(),
                true,
            ),
            Output::Time(format) => (OutputInfo::Time { format: *format }, Vec::new(), false),
            Output::Join { array, separator } => return self.join(array, *separator),
            Output::Event { strings } => return self.event(strings),
        };
        let id = self.output_id(info.clone());
        let field_list = match &info {
            OutputInfo::Printf { fields, .. }
            | OutputInfo::Message { fields, .. }
            | OutputInfo::System { fields, .. }
            | OutputInfo::Cat { fields, .. } => fields.clone(),
            OutputInfo::PrintValue { field } => vec![field.clone()],
            OutputInfo::Exit { has_code: true } => vec![Field {
                ty: sdt_lang::types::INT64,
                offset: HEADER,
            }],
            _ => Vec::new(),
        };
        let size = field_list.last().map_or(start, |f| {
            f.offset + self.value_size(&f.ty).next_multiple_of(8)
        });
        let all_scalar = field_list.iter().all(|f| f.ty.is_scalar());
        let record = if all_scalar && size <= 128 {
            self.frame.stack(size)
        } else {
            self.frame.scratch(size)
        };
        record.store_imm(&mut self.b, Size::DW, 0, id as i32);
        if stamped {
            self.stamp(record);
        }
        for (arg, field) in args.iter().zip(&field_list) {
            self.write_value(arg, record.offset(field.offset), &field.ty)?;
        }
        self.send(record, size, urgent);
        if matches!(output, Output::Exit(_)) {
            if self.replays() {
                // The hits replayed after this one, in this batch or a
                // later one, were after the exit: like the kernel's hits
                // once sdt has read the exit, they do nothing.
                self.b.ld_map_value_index(Reg::R1, layout::CONTROL_MAP, 0);
                self.b.load_imm(Reg::R2, layout::STOPPED as i64);
                self.b.push(Insn::stx(Size::DW, Reg::R1, 0, Reg::R2));
            }
            let exit = self.exit;
            self.b.jump(exit);
        }
        Ok(())
    }

    /// The time, thread and thread name of a record ([`layout::stamp`]).
    fn stamp(&mut self, record: Mem) {
        use layout::stamp;
        self.current(Current::Time);
        record.store(&mut self.b, Size::DW, stamp::TIME, Reg::R0);
        self.current(Current::PidTgid);
        record.store(&mut self.b, Size::DW, stamp::PID_TGID, Reg::R0);
        self.current_comm(record, stamp::COMM);
    }

    /// `bpf_ringbuf_output` of a record, counting it as lost when the ring
    /// is full. Records wake the reader only when the ring fills up or
    /// when they ask user space to act (`urgent`); otherwise the reader
    /// finds them when it next looks.
    pub(super) fn send(&mut self, record: Mem, size: u32, urgent: bool) {
        if urgent {
            self.b.push(Insn::mov64_imm(Reg::R4, SUBMIT_FORCE_WAKEUP));
        } else {
            let submit = self.b.label();
            self.b.ld_map_index(Reg::R1, layout::RING_MAP);
            self.b.push(Insn::mov64_imm(Reg::R2, QUERY_AVAIL_DATA));
            self.b.call(Helper::RingbufQuery);
            self.b.push(Insn::mov64_imm(Reg::R4, SUBMIT_NO_WAKEUP));
            self.b
                .jump_imm(JmpOp::Lt, Reg::R0, self.options.wake_at as i32, submit);
            self.b.push(Insn::mov64_imm(Reg::R4, SUBMIT_FORCE_WAKEUP));
            self.b.bind(submit);
        }
        self.b.ld_map_index(Reg::R1, layout::RING_MAP);
        record.address(&mut self.b, Reg::R2, 0);
        self.b.push(Insn::mov64_imm(Reg::R3, size as i32));
        self.b.call(Helper::RingbufOutput);
        let ok = self.b.label();
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, ok);
        self.count_lost(layout::LOST_EVENTS);
        self.b.bind(ok);
    }

    /// `join(argv)`: the strings of a NULL-terminated array of pointers.
    fn join(&mut self, array: &TExpr, separator: u32) -> R<()> {
        let strlen = self.program.strlen;
        let info = OutputInfo::Join {
            separator,
            size: strlen,
        };
        let id = self.output_id(info);
        let size = HEADER + 8 + layout::JOIN_MAX * strlen.next_multiple_of(8);
        let record = self.frame.scratch(size);
        let base = self.scalar(array)?;
        self.zero(record, size);
        record.store_imm(&mut self.b, Size::DW, 0, id as i32);
        let end = self.b.label();
        let pointer = self.frame.slot();
        for i in 0..layout::JOIN_MAX {
            // pointer = argv[i]; stop at NULL.
            self.load_op(base, Reg::R3);
            self.b
                .push(Insn::alu64_imm(AluOp::Add, Reg::R3, 8 * i as i32));
            self.b.push(Insn::st(Size::DW, Reg::R10, pointer, 0));
            self.read_user_into(Mem::Stack(pointer), 8, array.span);
            self.b.push(Insn::ldx(Size::DW, Reg::R3, Reg::R10, pointer));
            self.b.jump_imm(JmpOp::Eq, Reg::R3, 0, end);
            record.store_imm(&mut self.b, Size::DW, HEADER, i as i32 + 1);
            record.address(
                &mut self.b,
                Reg::R1,
                HEADER + 8 + i * strlen.next_multiple_of(8),
            );
            self.b.push(Insn::mov64_imm(Reg::R2, strlen as i32));
            self.read_user(UserRead::Str, ReadWhat::Expr(array.span));
        }
        self.b.bind(end);
        self.send(record, size, false);
        Ok(())
    }

    /// `R3` = where the string of argument `arg` is: the argument, or,
    /// replaying, the copy the hit carried.
    fn string_address(&mut self, record: Mem, arg: usize) {
        if self.replays() {
            self.captured_address(arg, Reg::R3);
        } else {
            let at = layout::event::ARGS + 8 * arg as u32;
            record.load(&mut self.b, Size::DW, Reg::R3, at);
        }
    }

    /// One `sdt trace` event: time, pid/tid, cookie, comm, every argument
    /// of the site, and the strings asked for.
    fn event(&mut self, strings: &[sdt_lang::hir::StringArg]) -> R<()> {
        use layout::event;
        let args = match &self.unit.args {
            super::ArgAccess::Usdt(sources) => sources.clone(),
            // Read below from the context, by number.
            super::ArgAccess::Replay(widths) => vec![None; widths.len()],
            _ => Vec::new(),
        };
        let strings: Vec<sdt_lang::hir::StringArg> = strings
            .iter()
            .copied()
            .filter(|s| s.arg < args.len() && s.len_arg.is_none_or(|l| l < args.len()))
            .collect();
        let info = OutputInfo::Event {
            args: args.len() as u32,
            strings: strings.clone(),
        };
        let id = self.output_id(info);
        let strings_at = event::ARGS + 8 * args.len() as u32;
        let size = strings_at + strings.len() as u32 * (8 + event::STRING_LEN);
        let record = self.frame.scratch(size);
        record.store_imm(&mut self.b, Size::DW, 0, id as i32);
        self.current(Current::Time);
        record.store(&mut self.b, Size::DW, event::TIME, Reg::R0);
        self.current(Current::PidTgid);
        record.store(&mut self.b, Size::DW, event::PID_TGID, Reg::R0);
        match self.unit.ids {
            super::Ids::Cookie => {
                self.b.push(Insn::mov64_reg(Reg::R1, CTX));
                self.b.call(Helper::GetAttachCookie);
            }
            super::Ids::Replayed => {
                let at = layout::replay::COOKIE as i16;
                self.b.push(Insn::ldx(Size::DW, Reg::R0, CTX, at));
            }
            super::Ids::Const { probe, site } => {
                self.b
                    .load_imm(Reg::R0, (i64::from(probe) << 32) | i64::from(site));
            }
        }
        record.store(&mut self.b, Size::DW, event::COOKIE, Reg::R0);
        self.current_comm(record, event::COMM);
        for (n, source) in args.iter().enumerate() {
            if self.replays() {
                self.replayed_arg(n);
                record.store(&mut self.b, Size::DW, event::ARGS + 8 * n as u32, Reg::R0);
                continue;
            }
            // An argument that cannot be read is recorded as 0; the
            // reader knows from the site that it is not a value.
            let source = source.unwrap_or(sdt_bpf::arg::ArgSource::Const(0));
            let reader = self.arg_reader();
            source
                .emit_load_with(&mut self.b, CTX, super::mem::ARG_SLOT, Reg::R0, reader)
                .map_err(|e| self.error(format!("internal error reading arg{n}: {e}")))?;
            record.store(&mut self.b, Size::DW, event::ARGS + 8 * n as u32, Reg::R0);
        }
        for (i, s) in strings.iter().enumerate() {
            let result_at = strings_at + 8 * i as u32;
            let bytes_at = strings_at + 8 * strings.len() as u32 + event::STRING_LEN * i as u32;
            let stored = self.b.label();
            match s.len_arg {
                None => {
                    self.string_address(record, s.arg);
                    record.address(&mut self.b, Reg::R1, bytes_at);
                    self.b
                        .push(Insn::mov64_imm(Reg::R2, event::STRING_LEN as i32));
                    self.read_user(UserRead::Str, ReadWhat::EventArg(s.arg as u32));
                }
                Some(len_arg) => {
                    // min(length, STRING_LEN - 1) bytes; R8 keeps the
                    // length to report it as probe_read_user_str would.
                    let bounded = self.b.label();
                    record.load(
                        &mut self.b,
                        Size::DW,
                        Reg::R2,
                        event::ARGS + 8 * len_arg as u32,
                    );
                    self.b
                        .jump_imm(JmpOp::Le, Reg::R2, event::STRING_LEN as i32 - 1, bounded);
                    self.b
                        .push(Insn::mov64_imm(Reg::R2, event::STRING_LEN as i32 - 1));
                    self.b.bind(bounded);
                    self.b.push(Insn::mov64_reg(Reg::R8, Reg::R2));
                    self.string_address(record, s.arg);
                    record.address(&mut self.b, Reg::R1, bytes_at);
                    self.read_user(UserRead::Bytes, ReadWhat::EventArg(s.arg as u32));
                    self.b.jump_imm(JmpOp::Slt, Reg::R0, 0, stored);
                    self.b.push(Insn::mov64_reg(Reg::R0, Reg::R8));
                    self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R0, 1));
                }
            }
            self.b.bind(stored);
            record.store(&mut self.b, Size::DW, result_at, Reg::R0);
        }
        self.send(record, size, false);
        Ok(())
    }
}

fn stmt_span(stmt: &TStmt) -> Option<sdt_lang::diag::Span> {
    match stmt {
        TStmt::Expr(e) => Some(e.span),
        TStmt::AssignVar { value, .. } => Some(value.span),
        TStmt::AssignMap { span, .. } => Some(*span),
        TStmt::Aggregate { span, .. }
        | TStmt::While { span, .. }
        | TStmt::ForRange { span, .. }
        | TStmt::ForMap { span, .. } => Some(*span),
        TStmt::If { cond, .. } => Some(cond.span),
        TStmt::Output(Output::Printf { args, .. }) => args.first().map(|a| a.span),
        _ => None,
    }
}
