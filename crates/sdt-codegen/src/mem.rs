//! Where values live while a program runs: 8-byte slots of the BPF stack
//! for scalars, and the per-CPU scratch map for everything larger.
//!
//! Both areas are allocated at compile time by bumping an offset.
//! Variables get homes for the whole program; temporaries are released
//! when the statement that needed them ends ([`Frame::mark`],
//! [`Frame::release`]), so a long probe does not run out of stack.

use sdt_bpf::{AluOp, Builder, Insn, Reg, Size};

use sdt_lang::types::{Ty, TypeRegistry};

/// A stack slot reserved for reading USDT arguments from memory.
pub const ARG_SLOT: i16 = -8;
/// A stack slot for the `u32` keys of array maps (scratch, lost, tree).
pub const KEY_SLOT: i16 = -16;
/// Bytes below the frame pointer used by the two reserved slots.
const RESERVED: u32 = 16;

/// A place in the program's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mem {
    /// `R10 + offset` (negative).
    Stack(i16),
    /// `R9 + offset`.
    Scratch(u32),
}

impl Mem {
    /// The base register and offset of byte `at` of this place.
    pub fn at(self, at: u32) -> (Reg, i16) {
        match self {
            Mem::Stack(off) => (Reg::R10, off + at as i16),
            Mem::Scratch(off) => (Reg::R9, (off + at) as i16),
        }
    }

    /// The place `at` bytes further on.
    pub fn offset(self, at: u32) -> Mem {
        match self {
            Mem::Stack(off) => Mem::Stack(off + at as i16),
            Mem::Scratch(off) => Mem::Scratch(off + at),
        }
    }

    /// `dst = &place[at]`.
    pub fn address(self, b: &mut Builder, dst: Reg, at: u32) {
        let (base, off) = self.at(at);
        b.push(Insn::mov64_reg(dst, base));
        if off != 0 {
            b.push(Insn::alu64_imm(AluOp::Add, dst, i32::from(off)));
        }
    }

    pub fn load(self, b: &mut Builder, size: Size, dst: Reg, at: u32) {
        let (base, off) = self.at(at);
        b.push(Insn::ldx(size, dst, base, off));
    }

    pub fn store(self, b: &mut Builder, size: Size, at: u32, src: Reg) {
        let (base, off) = self.at(at);
        b.push(Insn::stx(size, base, off, src));
    }

    pub fn store_imm(self, b: &mut Builder, size: Size, at: u32, imm: i32) {
        let (base, off) = self.at(at);
        b.push(Insn::st(size, base, off, imm));
    }
}

/// A position of the allocators, to release temporaries to.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    stack: u32,
    scratch: u32,
}

/// The compile-time allocator of one program's memory.
#[derive(Debug)]
pub struct Frame {
    /// Bytes of stack in use below the frame pointer.
    stack: u32,
    stack_max: u32,
    scratch: u32,
    scratch_max: u32,
}

impl Frame {
    pub fn new() -> Frame {
        Frame {
            stack: RESERVED,
            stack_max: RESERVED,
            scratch: 0,
            scratch_max: 0,
        }
    }

    /// The frame of a callback: its own stack, and the scratch memory
    /// from `scratch_from` on, past what its caller holds at the call.
    pub fn callback(scratch_from: u32) -> Frame {
        Frame {
            scratch: scratch_from,
            scratch_max: scratch_from,
            ..Frame::new()
        }
    }

    /// A home for a variable of a program whose loops run as callbacks:
    /// scratch memory, which every function of the program reaches.
    pub fn alloc_shared(&mut self, ty: &Ty, registry: &TypeRegistry) -> Mem {
        self.scratch(ty.value_size(registry))
    }

    /// An 8-byte aligned stack area of `bytes`.
    pub fn stack(&mut self, bytes: u32) -> Mem {
        self.stack += bytes.next_multiple_of(8).max(8);
        self.stack_max = self.stack_max.max(self.stack);
        // Offsets past the 512-byte limit are reported by `stack_size`
        // after generation; saturate so that the arithmetic stays sane.
        Mem::Stack(-(self.stack.min(i16::MAX as u32) as i16))
    }

    /// An 8-byte aligned scratch area of `bytes`.
    pub fn scratch(&mut self, bytes: u32) -> Mem {
        Mem::Scratch(self.scratch_offset(bytes))
    }

    /// An 8-byte aligned scratch area of `bytes`, by its offset.
    pub fn scratch_offset(&mut self, bytes: u32) -> u32 {
        let at = self.scratch;
        self.scratch += bytes.next_multiple_of(8).max(8);
        self.scratch_max = self.scratch_max.max(self.scratch);
        at.min(i16::MAX as u32)
    }

    /// A temporary 8-byte stack slot.
    pub fn slot(&mut self) -> i16 {
        match self.stack(8) {
            Mem::Stack(off) => off,
            Mem::Scratch(_) => unreachable!("stack() returns stack memory"),
        }
    }

    /// A home for a value of `ty`: the stack for scalars, scratch memory
    /// for the rest.
    pub fn alloc_for(&mut self, ty: &Ty, registry: &TypeRegistry) -> Mem {
        let size = ty.value_size(registry);
        if ty.is_scalar() {
            self.stack(size)
        } else {
            self.scratch(size)
        }
    }

    pub fn mark(&self) -> Mark {
        Mark {
            stack: self.stack,
            scratch: self.scratch,
        }
    }

    /// Frees every allocation made since `mark`.
    pub fn release(&mut self, mark: Mark) {
        self.stack = mark.stack;
        self.scratch = mark.scratch;
    }

    /// The scratch bytes allocated now.
    pub fn scratch_in_use(&self) -> u32 {
        self.scratch
    }

    pub fn stack_size(&self) -> u32 {
        self.stack_max
    }

    pub fn scratch_size(&self) -> u32 {
        self.scratch_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_are_released_to_a_mark() {
        let mut f = Frame::new();
        let home = f.stack(8);
        assert_eq!(home, Mem::Stack(-24));
        let mark = f.mark();
        assert_eq!(f.slot(), -32);
        assert_eq!(f.scratch(13), Mem::Scratch(0));
        assert_eq!(f.scratch(8), Mem::Scratch(16));
        f.release(mark);
        assert_eq!(f.slot(), -32);
        assert_eq!(f.scratch(8), Mem::Scratch(0));
        assert_eq!(f.stack_size(), 32);
        assert_eq!(f.scratch_size(), 24);
    }

    #[test]
    fn places_compute_base_and_offset() {
        assert_eq!(Mem::Stack(-32).at(8), (Reg::R10, -24));
        assert_eq!(Mem::Scratch(64).at(8), (Reg::R9, 72));
        assert_eq!(Mem::Scratch(8).offset(8), Mem::Scratch(16));
    }
}
