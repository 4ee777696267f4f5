//! `clear()`, `zero()` and `print()` of a whole map, done in the kernel
//! where the statement stands.
//!
//! Done by user space when a record asking for it arrived, these reach
//! the map after whatever the probes did in the meantime: a `clear(@v)`
//! in one probe then wipes the updates that later hits of another probe
//! made, and a `print(@m)` shows them. Instead, each statement walks the
//! map with `bpf_for_each_map_elem`, whose callback, a function of its
//! own after the program's code, deletes or zeroes each entry, or copies
//! it into a record:
//!
//! * `clear(@m)` deletes every entry, as the statement runs.
//! * `zero(@m)` sets every value to zero; for a per-CPU map, every CPU's
//!   value, through `bpf_map_lookup_percpu_elem`.
//! * `print(@m)` is a snapshot: one [`OutputInfo::MapEntry`] record per
//!   entry, with the key and every CPU's value, then the
//!   [`OutputInfo::PrintMap`] record that says how many entries the walk
//!   saw. Each record carries the thread and a nonce of the walk, since
//!   other threads' records may come between them.
//!
//! The callback gets the map in R1, the key in R2, the value in R3 and
//! the context pointer (here the walk's nonce, on the caller's stack) in
//! R4, and returns 0 to go on. It has a stack frame of its own and may use
//! R6 to R9: the caller's are restored when the walk returns.

use sdt_bpf::{AluOp, Helper, Insn, JmpOp, Label, Reg, Size};

use super::expr::R;
use super::mem::Mem;
use super::Gen;
use crate::layout::{self, OutputInfo};
use sdt_lang::hir::MapId;

/// What a walk does with each entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Walk {
    /// Visits each entry and does nothing: the walk's count is `len()`.
    Count(MapId),
    Clear(MapId),
    Zero(MapId),
    /// Copies each entry into a record with this output id.
    Snapshot {
        map: MapId,
        entry_id: u32,
    },
}

/// Offsets in a snapshot record: the header, then these, then the key
/// and the values (see [`layout::snapshot`]).
use layout::snapshot;

impl Gen<'_> {
    /// The callback of `walk`, emitted after the program's code.
    fn callback(&mut self, walk: Walk) -> Label {
        if let Some((label, _)) = self.walks.iter().find(|(_, w)| *w == walk) {
            return *label;
        }
        let label = self.b.label();
        self.walks.push((label, walk));
        label
    }

    /// `bpf_for_each_map_elem(map, callback, context, 0)`; the number of
    /// entries walked is left in R0.
    fn walk(&mut self, map: MapId, walk: Walk, context: Option<Mem>) {
        let callback = self.callback(walk);
        self.b.ld_map_index(Reg::R1, layout::user_map(map));
        self.b.ld_func(Reg::R2, callback);
        match context {
            Some(mem) => mem.address(&mut self.b, Reg::R3, 0),
            None => {
                self.b.push(Insn::mov64_imm(Reg::R3, 0));
            }
        }
        self.b.push(Insn::mov64_imm(Reg::R4, 0));
        self.b.call(Helper::ForEachMapElem);
    }

    /// `R0` = the number of entries of `map`.
    pub(super) fn count_entries(&mut self, map: MapId) {
        self.walk(map, Walk::Count(map), None);
    }

    /// `clear(@m)`.
    pub(super) fn clear_map(&mut self, map: MapId) {
        self.walk(map, Walk::Clear(map), None);
    }

    /// `zero(@m)`.
    pub(super) fn zero_map(&mut self, map: MapId) {
        self.walk(map, Walk::Zero(map), None);
    }

    /// `print(@m, top, div)`: the entries as they are now, then the record
    /// that prints them.
    pub(super) fn print_map(&mut self, map: MapId, top: u64, div: u64) -> R<()> {
        let entry_id = self.output_id(OutputInfo::MapEntry { map });
        let print_id = self.output_id(OutputInfo::PrintMap { map, top, div });
        let size = self.snapshot_size(map);
        if size > self.options.ring_size / 2 {
            return Err(self.error(format!(
                "one entry of {} takes {size} bytes with every CPU's value, more than the ring buffer can hold",
                self.program.maps[map].display_name()
            )))
            .map_err(|d| d.hint("raise --buffer-size"));
        }
        let record = self.frame.stack(snapshot::HEADER_END);
        self.b.call(Helper::KtimeGetNs);
        record.store(&mut self.b, Size::DW, snapshot::NONCE, Reg::R0);
        self.walk(
            map,
            Walk::Snapshot { map, entry_id },
            Some(record.offset(snapshot::NONCE)),
        );
        record.store(&mut self.b, Size::DW, snapshot::COUNT, Reg::R0);
        record.store_imm(&mut self.b, Size::DW, 0, print_id as i32);
        self.b.call(Helper::GetCurrentPidTgid);
        record.store(&mut self.b, Size::DW, snapshot::THREAD, Reg::R0);
        self.send(record, snapshot::HEADER_END, true);
        Ok(())
    }

    /// Bytes of one snapshot record of `map`.
    fn snapshot_size(&self, map: MapId) -> u32 {
        let decl = &self.program.maps[map];
        let registry = &self.program.registry;
        let copies = if decl.is_per_cpu() {
            self.options.machine.possible_cpus
        } else {
            1
        };
        snapshot::HEADER_END + decl.key_size(registry) + copies * decl.value_size(registry)
    }

    /// Emits the callbacks the program's walks need, after its code.
    pub(super) fn emit_walks(&mut self) {
        let mut done = 0;
        while done < self.walks.len() {
            let (label, walk) = self.walks[done];
            self.b.bind(label);
            match walk {
                Walk::Count(_) => {}
                Walk::Clear(map) => {
                    self.b.ld_map_index(Reg::R1, layout::user_map(map));
                    self.b.call(Helper::MapDeleteElem);
                }
                Walk::Zero(map) => self.zero_entry(map),
                Walk::Snapshot { map, entry_id } => self.copy_entry(map, entry_id),
            }
            self.b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
            done += 1;
        }
    }

    /// The callback body of `zero(@m)`: every CPU's value of the entry.
    fn zero_entry(&mut self, map: MapId) {
        let decl = &self.program.maps[map];
        let size = decl.value_size(&self.program.registry);
        if !decl.is_per_cpu() {
            for at in (0..size).step_by(8) {
                self.b.push(Insn::st(Size::DW, Reg::R3, at as i16, 0));
            }
            return;
        }
        self.b.push(Insn::mov64_reg(Reg::R6, Reg::R2));
        for cpu in 0..self.options.machine.possible_cpus {
            let next = self.b.label();
            self.lookup_percpu(map, cpu);
            self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, next);
            for at in (0..size).step_by(8) {
                self.b.push(Insn::st(Size::DW, Reg::R0, at as i16, 0));
            }
            self.b.bind(next);
        }
    }

    /// `R0 = bpf_map_lookup_percpu_elem(map, key in R6, cpu)`.
    fn lookup_percpu(&mut self, map: MapId, cpu: u32) {
        self.b.ld_map_index(Reg::R1, layout::user_map(map));
        self.b.push(Insn::mov64_reg(Reg::R2, Reg::R6));
        self.b.push(Insn::mov64_imm(Reg::R3, cpu as i32));
        self.b.call(Helper::MapLookupPercpuElem);
    }

    /// The callback body of `print(@m)`: one record with the entry's key
    /// and values, or a count of one lost record.
    fn copy_entry(&mut self, map: MapId, entry_id: u32) {
        let decl = &self.program.maps[map];
        let registry = &self.program.registry;
        let key_size = decl.key_size(registry);
        let value_size = decl.value_size(registry);
        let per_cpu = decl.is_per_cpu();
        let size = self.snapshot_size(map);
        let lost = self.b.label();
        let done = self.b.label();
        // R6: the key, R7: the value, R8: the nonce's address, R9: the record.
        self.b.push(Insn::mov64_reg(Reg::R6, Reg::R2));
        self.b.push(Insn::mov64_reg(Reg::R7, Reg::R3));
        self.b.push(Insn::mov64_reg(Reg::R8, Reg::R4));
        self.b.ld_map_index(Reg::R1, layout::RING_MAP);
        self.b.push(Insn::mov64_imm(Reg::R2, size as i32));
        self.b.push(Insn::mov64_imm(Reg::R3, 0));
        self.b.call(Helper::RingbufReserve);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, lost);
        self.b.push(Insn::mov64_reg(Reg::R9, Reg::R0));
        self.b.push(Insn::st(Size::DW, Reg::R9, 0, entry_id as i32));
        self.b.call(Helper::GetCurrentPidTgid);
        self.b.push(Insn::stx(
            Size::DW,
            Reg::R9,
            snapshot::THREAD as i16,
            Reg::R0,
        ));
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R8, 0));
        self.b.push(Insn::stx(
            Size::DW,
            Reg::R9,
            snapshot::NONCE as i16,
            Reg::R1,
        ));
        self.b
            .push(Insn::st(Size::DW, Reg::R9, snapshot::COUNT as i16, 0));
        self.copy_kernel(snapshot::HEADER_END, key_size, Reg::R6);
        let values_at = snapshot::HEADER_END + key_size;
        if per_cpu {
            for cpu in 0..self.options.machine.possible_cpus {
                let at = values_at + cpu * value_size;
                let absent = self.b.label();
                let next = self.b.label();
                self.lookup_percpu(map, cpu);
                self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, absent);
                self.b.push(Insn::mov64_reg(Reg::R3, Reg::R0));
                self.copy_kernel(at, value_size, Reg::R3);
                self.b.jump(next);
                self.b.bind(absent);
                for word in (0..value_size).step_by(8) {
                    self.b
                        .push(Insn::st(Size::DW, Reg::R9, (at + word) as i16, 0));
                }
                self.b.bind(next);
            }
        } else {
            self.copy_kernel(values_at, value_size, Reg::R7);
        }
        self.b.push(Insn::mov64_reg(Reg::R1, Reg::R9));
        self.b.push(Insn::mov64_imm(Reg::R2, 0));
        self.b.call(Helper::RingbufSubmit);
        self.b.jump(done);
        self.b.bind(lost);
        self.count_lost(layout::LOST_EVENTS);
        self.b.bind(done);
    }

    /// `bpf_probe_read_kernel(R9 + at, len, src)`: the record is ring
    /// memory, the source a map's key or value.
    fn copy_kernel(&mut self, at: u32, len: u32, src: Reg) {
        if src != Reg::R3 {
            self.b.push(Insn::mov64_reg(Reg::R3, src));
        }
        self.b.push(Insn::mov64_reg(Reg::R1, Reg::R9));
        self.b.push(Insn::alu64_imm(AluOp::Add, Reg::R1, at as i32));
        self.b.push(Insn::mov64_imm(Reg::R2, len as i32));
        self.b.call(Helper::ProbeReadKernel);
    }
}
