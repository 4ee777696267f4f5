//! A program builder with labels.
//!
//! BPF jumps are relative: `off` counts instruction *slots* after the jump,
//! and an `ld_imm64` fills two slots. Code generators want to say "jump to
//! the end" before the end exists, so the builder hands out [`Label`]s,
//! records every jump that names one, and patches the offsets in
//! [`Builder::finish`]. Because the builder stores slots (an `ld_imm64` is
//! pushed as its two halves), a label's position *is* its slot index and
//! no separate slot accounting is needed.

use std::os::fd::AsRawFd;

use crate::error::CodegenError;
use crate::insn::{Helper, Insn, JmpOp, Reg};
use crate::map::Map;

/// A jump target inside one [`Builder`]. Create with [`Builder::label`],
/// place with [`Builder::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(usize);

/// Accumulates instructions and resolves labels.
///
/// ```
/// use sdt_bpf::{Builder, Helper, Insn, JmpOp, Reg::*};
///
/// let mut b = Builder::new();
/// let out = b.label();
/// b.call(Helper::GetCurrentPidTgid);
/// b.jump_imm(JmpOp::Eq, R0, 0, out);
/// b.push(Insn::mov64_imm(R0, 1));
/// b.bind(out);
/// b.exit();
/// let insns = b.finish().unwrap();
/// assert_eq!(insns[1].off, 1);
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label, Fixup)>,
    errors: Vec<CodegenError>,
}

/// Which field of an instruction a label's distance goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fixup {
    /// A jump's `off`, in slots after the jump.
    Jump,
    /// A function reference's `imm`, in slots after the reference's first
    /// slot, as the kernel counts `BPF_PSEUDO_FUNC` (see
    /// [`Builder::ld_func`]).
    Function,
}

impl Builder {
    /// An empty program.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Number of slots emitted so far; also the slot the next
    /// instruction will occupy.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether nothing has been emitted yet.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// The slots emitted so far (jumps to labels not yet patched).
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// A new label, not yet placed.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Places `label` at the next slot. Binding a label twice is an
    /// error reported by [`finish`](Builder::finish).
    pub fn bind(&mut self, label: Label) -> &mut Self {
        let here = self.insns.len();
        match self.labels[label.0] {
            Some(first) => self.errors.push(CodegenError::LabelBoundTwice {
                first,
                second: here,
            }),
            None => self.labels[label.0] = Some(here),
        }
        self
    }

    /// A new label placed at the next slot, for backward jumps.
    pub fn here(&mut self) -> Label {
        let l = self.label();
        self.bind(l);
        l
    }

    /// Appends one instruction slot. Jumps pushed this way keep their
    /// literal offsets.
    pub fn push(&mut self, insn: Insn) -> &mut Self {
        self.insns.push(insn);
        self
    }

    /// Appends several slots, e.g. the pair returned by [`Insn::ld_imm64`].
    pub fn extend(&mut self, insns: impl IntoIterator<Item = Insn>) -> &mut Self {
        self.insns.extend(insns);
        self
    }

    /// `dst = imm` for any 64-bit value: one `mov` when the value fits a
    /// sign-extended 32-bit immediate, else a two-slot `ld_imm64`.
    pub fn load_imm(&mut self, dst: Reg, imm: i64) -> &mut Self {
        match i32::try_from(imm) {
            Ok(small) => self.push(Insn::mov64_imm(dst, small)),
            Err(_) => self.extend(Insn::ld_imm64(dst, imm as u64)),
        }
    }

    /// `dst = &map`: a two-slot map reference. The map's file descriptor
    /// must stay open until the program is loaded.
    pub fn ld_map(&mut self, dst: Reg, map: &Map) -> &mut Self {
        self.extend(Insn::ld_map_fd(dst, map.as_raw_fd()))
    }

    /// `dst = &map[index]`: a map reference that holds an index instead
    /// of a file descriptor, for code generated before its maps exist.
    /// [`relocate_maps`](crate::relocate_maps) turns indices into
    /// descriptors before loading.
    pub fn ld_map_index(&mut self, dst: Reg, index: u32) -> &mut Self {
        self.extend(Insn::ld_map_fd(dst, index as i32))
    }

    /// `dst = &map[index] value + offset`: like
    /// [`ld_map_index`](Builder::ld_map_index), for a value's address
    /// ([`Insn::ld_map_value`]).
    pub fn ld_map_value_index(&mut self, dst: Reg, index: u32, offset: u32) -> &mut Self {
        self.extend(Insn::ld_map_value(dst, index as i32, offset))
    }

    /// `dst = &function at label`: a two-slot reference to code of the
    /// same program that starts at `function`, for a helper that calls it
    /// back (`bpf_for_each_map_elem`). The function must come after the
    /// program's own code, end in `exit`, and be reached only this way.
    pub fn ld_func(&mut self, dst: Reg, function: Label) -> &mut Self {
        self.fixups
            .push((self.insns.len(), function, Fixup::Function));
        self.extend(Insn::ld_func(dst, 0))
    }

    /// `if dst op imm goto target`.
    pub fn jump_imm(&mut self, op: JmpOp, dst: Reg, imm: i32, target: Label) -> &mut Self {
        self.branch(Insn::jmp_imm(op, dst, imm, 0), target)
    }

    /// `if dst op src goto target`.
    pub fn jump_reg(&mut self, op: JmpOp, dst: Reg, src: Reg, target: Label) -> &mut Self {
        self.branch(Insn::jmp_reg(op, dst, src, 0), target)
    }

    /// `if wdst op imm goto target` (32-bit compare).
    pub fn jump32_imm(&mut self, op: JmpOp, dst: Reg, imm: i32, target: Label) -> &mut Self {
        self.branch(Insn::jmp32_imm(op, dst, imm, 0), target)
    }

    /// `goto target`.
    pub fn jump(&mut self, target: Label) -> &mut Self {
        self.branch(Insn::ja(0), target)
    }

    /// Calls a kernel helper; clobbers `R1`–`R5`, result in `R0`.
    pub fn call(&mut self, helper: Helper) -> &mut Self {
        self.push(Insn::call(helper))
    }

    /// Returns from the program with `R0`.
    pub fn exit(&mut self) -> &mut Self {
        self.push(Insn::exit())
    }

    fn branch(&mut self, insn: Insn, target: Label) -> &mut Self {
        self.fixups.push((self.insns.len(), target, Fixup::Jump));
        self.push(insn)
    }

    /// Patches every labelled jump and returns the finished slots, or the
    /// first mistake found.
    pub fn finish(mut self) -> Result<Vec<Insn>, CodegenError> {
        if let Some(e) = self.errors.into_iter().next() {
            return Err(e);
        }
        for (slot, label, fixup) in self.fixups {
            let target = self.labels[label.0].ok_or(CodegenError::UnboundLabel { slot })?;
            let distance = target as i64 - slot as i64 - 1;
            match fixup {
                Fixup::Jump => {
                    self.insns[slot].off = i16::try_from(distance)
                        .map_err(|_| CodegenError::JumpTooFar { slot, distance })?;
                }
                Fixup::Function => {
                    self.insns[slot].imm = i32::try_from(distance)
                        .map_err(|_| CodegenError::JumpTooFar { slot, distance })?;
                }
            }
        }
        Ok(self.insns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::Reg::*;

    #[test]
    fn resolves_forward_and_backward_jumps() {
        let mut b = Builder::new();
        let top = b.here(); // slot 0
        let end = b.label();
        b.push(Insn::mov64_imm(R0, 0)); // 0
        b.jump_imm(JmpOp::Eq, R0, 0, end); // 1 -> 4: off 2
        b.push(Insn::mov64_imm(R0, 1)); // 2
        b.jump(top); // 3 -> 0: off -4
        b.bind(end);
        b.exit(); // 4
        let insns = b.finish().unwrap();
        assert_eq!(insns[1].off, 2);
        assert_eq!(insns[3].off, -4);
    }

    #[test]
    fn counts_ld_imm64_as_two_slots() {
        let mut b = Builder::new();
        let end = b.label();
        b.jump(end); // 0
        b.load_imm(R1, 0x1_0000_0000); // 1, 2
        b.extend(Insn::ld_map_fd(R2, 3)); // 3, 4
        b.bind(end);
        b.exit(); // 5
        let insns = b.finish().unwrap();
        assert_eq!(insns.len(), 6);
        assert_eq!(insns[0].off, 4);

        let mut b = Builder::new();
        let top = b.here();
        b.load_imm(R1, i64::MIN); // 0, 1
        b.jump(top); // 2 -> 0
        assert_eq!(b.finish().unwrap()[2].off, -3);
    }

    #[test]
    fn function_references_count_from_their_first_slot() {
        let mut b = Builder::new();
        let callback = b.label();
        b.ld_func(R2, callback); // 0, 1
        b.push(Insn::mov64_imm(R0, 0)).exit(); // 2, 3
        b.bind(callback);
        b.push(Insn::mov64_imm(R0, 0)).exit(); // 4, 5
        let insns = b.finish().unwrap();
        assert_eq!(insns[0].src(), crate::insn::PSEUDO_FUNC);
        // The kernel's target: slot + imm + 1.
        assert_eq!(insns[0].imm, 3);
    }

    #[test]
    fn small_immediates_use_one_slot() {
        let mut b = Builder::new();
        b.load_imm(R1, -1).load_imm(R2, i32::MAX as i64);
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn reports_unbound_and_rebound_labels() {
        let mut b = Builder::new();
        let l = b.label();
        b.jump(l);
        assert_eq!(
            b.finish().unwrap_err(),
            CodegenError::UnboundLabel { slot: 0 }
        );

        let mut b = Builder::new();
        let l = b.here();
        b.exit();
        b.bind(l);
        assert!(matches!(
            b.finish(),
            Err(CodegenError::LabelBoundTwice {
                first: 0,
                second: 1
            })
        ));
    }

    #[test]
    fn reports_jumps_too_far() {
        let mut b = Builder::new();
        let end = b.label();
        b.jump(end);
        for _ in 0..40_000 {
            b.push(Insn::mov64_imm(R0, 0));
        }
        b.bind(end);
        assert!(matches!(
            b.finish(),
            Err(CodegenError::JumpTooFar { slot: 0, .. })
        ));
    }
}
