//! eBPF instructions: registers, opcodes and the 8-byte encoding.
//!
//! Every instruction is `code u8`, `dst:4 src:4`, `off i16`, `imm i32`
//! (see the kernel's `Documentation/bpf/standardization/instruction-set.rst`).
//! The constructors here are the only place that knows opcode bits; the
//! [`Builder`](crate::Builder) adds labels on top and the
//! [`disasm`](crate::disasm) module reads the bits back.
//!
//! We write this by hand rather than depend on a crate because the
//! encoding is small, fixed by the kernel ABI, and the rest of the project
//! (code generation, disassembly, tests) wants to see every bit.

use std::fmt;

/// Instruction classes (low three bits of `code`).
pub(crate) mod class {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const ST: u8 = 0x02;
    pub const STX: u8 = 0x03;
    pub const ALU: u8 = 0x04;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const ALU64: u8 = 0x07;
}

/// Load/store modes (top three bits of `code` for memory classes).
pub(crate) mod mode {
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const MEMSX: u8 = 0x80;
    pub const ATOMIC: u8 = 0xc0;
}

/// Operand source bit for ALU and JMP classes.
pub(crate) const SRC_X: u8 = 0x08;

/// Jump opcodes that are not comparisons.
pub(crate) mod jmp {
    pub const JA: u8 = 0x00;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
}

/// `bpf_get_stackid` flag: walk the user-space stack instead of the kernel's.
pub const STACKID_USER: u64 = 1 << 8;

/// `src_reg` of an `ld_imm64` whose immediate is a map file descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;
/// `src` of an `ld_imm64` that loads the address of a map's value.
pub const PSEUDO_MAP_VALUE: u8 = 2;
/// `src_reg` of a `call` whose immediate is a relative BPF-to-BPF call.
pub const PSEUDO_CALL: u8 = 1;
/// `src_reg` of a `call` whose immediate is the BTF type id of a kernel
/// function (a kfunc) in the kernel's own BTF (`BPF_PSEUDO_KFUNC_CALL`).
pub const PSEUDO_KFUNC_CALL: u8 = 2;
/// `src` of an `ld_imm64` whose immediate is the distance, in slots, to a
/// function of the same program (`BPF_PSEUDO_FUNC`): the callback a helper
/// such as `bpf_for_each_map_elem` calls.
pub const PSEUDO_FUNC: u8 = 4;

/// A BPF register. `R10` is the read-only frame pointer.
///
/// Calling convention: `R0` holds return values, `R1`–`R5` carry helper
/// arguments and are clobbered by every call, `R6`–`R9` survive calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Reg {
    R0 = 0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

impl Reg {
    /// The register's number, 0 to 10.
    pub const fn index(self) -> u8 {
        self as u8
    }

    /// The register with number `n`, if there is one.
    pub const fn from_index(n: u8) -> Option<Reg> {
        use Reg::*;
        Some(match n {
            0 => R0,
            1 => R1,
            2 => R2,
            3 => R3,
            4 => R4,
            5 => R5,
            6 => R6,
            7 => R7,
            8 => R8,
            9 => R9,
            10 => R10,
            _ => return None,
        })
    }

    /// Whether a helper call leaves this register unchanged (`R6`–`R10`).
    pub const fn survives_calls(self) -> bool {
        self as u8 >= 6
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.index())
    }
}

/// Arithmetic and logic operations (`BPF_ALU` / `BPF_ALU64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AluOp {
    Add = 0x00,
    Sub = 0x10,
    Mul = 0x20,
    Div = 0x30,
    Or = 0x40,
    And = 0x50,
    Lsh = 0x60,
    Rsh = 0x70,
    Neg = 0x80,
    Mod = 0x90,
    Xor = 0xa0,
    Mov = 0xb0,
    Arsh = 0xc0,
}

impl AluOp {
    pub(crate) fn from_bits(op: u8) -> Option<AluOp> {
        use AluOp::*;
        [
            Add, Sub, Mul, Div, Or, And, Lsh, Rsh, Neg, Mod, Xor, Mov, Arsh,
        ]
        .into_iter()
        .find(|o| *o as u8 == op)
    }
}

/// Conditional jump comparisons (`BPF_JMP` / `BPF_JMP32`).
///
/// The names follow the kernel's: `Gt`/`Ge`/`Lt`/`Le` are unsigned,
/// `Sgt`/`Sge`/`Slt`/`Sle` signed, `Set` tests `dst & src != 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum JmpOp {
    Eq = 0x10,
    Gt = 0x20,
    Ge = 0x30,
    Set = 0x40,
    Ne = 0x50,
    Sgt = 0x60,
    Sge = 0x70,
    Lt = 0xa0,
    Le = 0xb0,
    Slt = 0xc0,
    Sle = 0xd0,
}

impl JmpOp {
    pub(crate) fn from_bits(op: u8) -> Option<JmpOp> {
        use JmpOp::*;
        [Eq, Gt, Ge, Set, Ne, Sgt, Sge, Lt, Le, Slt, Sle]
            .into_iter()
            .find(|o| *o as u8 == op)
    }

    /// The comparison that is true exactly when this one is false.
    pub const fn negate(self) -> Option<JmpOp> {
        use JmpOp::*;
        Some(match self {
            Eq => Ne,
            Ne => Eq,
            Gt => Le,
            Le => Gt,
            Ge => Lt,
            Lt => Ge,
            Sgt => Sle,
            Sle => Sgt,
            Sge => Slt,
            Slt => Sge,
            Set => return None,
        })
    }
}

/// Memory access widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Size {
    /// 4 bytes (`u32`).
    W = 0x00,
    /// 2 bytes (`u16`).
    H = 0x08,
    /// 1 byte (`u8`).
    B = 0x10,
    /// 8 bytes (`u64`).
    DW = 0x18,
}

impl Size {
    /// The width with this many bytes (1, 2, 4 or 8).
    pub const fn from_bytes(n: usize) -> Option<Size> {
        Some(match n {
            1 => Size::B,
            2 => Size::H,
            4 => Size::W,
            8 => Size::DW,
            _ => return None,
        })
    }

    /// Number of bytes accessed.
    pub const fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }

    pub(crate) fn from_bits(bits: u8) -> Size {
        match bits & 0x18 {
            0x00 => Size::W,
            0x08 => Size::H,
            0x10 => Size::B,
            _ => Size::DW,
        }
    }
}

/// Kernel helper functions callable with [`Insn::call`].
///
/// The numeric value is the helper id of the kernel UAPI (`enum bpf_func_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
#[non_exhaustive]
pub enum Helper {
    MapLookupElem = 1,
    MapUpdateElem = 2,
    MapDeleteElem = 3,
    KtimeGetNs = 5,
    GetPrandomU32 = 7,
    GetSmpProcessorId = 8,
    GetCurrentPidTgid = 14,
    GetCurrentUidGid = 15,
    GetCurrentComm = 16,
    GetStackid = 27,
    GetCurrentTask = 35,
    GetNumaNodeId = 42,
    GetStack = 67,
    GetCurrentCgroupId = 80,
    ProbeReadUser = 112,
    ProbeReadKernel = 113,
    ProbeReadUserStr = 114,
    ProbeReadKernelStr = 115,
    GetCurrentAncestorCgroupId = 123,
    KtimeGetBootNs = 125,
    RingbufOutput = 130,
    RingbufReserve = 131,
    RingbufSubmit = 132,
    RingbufDiscard = 133,
    RingbufQuery = 134,
    /// Sleepable programs only: may fault the pages in.
    CopyFromUser = 148,
    TaskStorageGet = 156,
    GetCurrentTaskBtf = 158,
    ForEachMapElem = 164,
    GetAttachCookie = 174,
    Loop = 181,
    MapLookupPercpuElem = 195,
}

impl Helper {
    /// Every helper this crate names.
    pub const ALL: &'static [Helper] = &[
        Helper::MapLookupElem,
        Helper::MapUpdateElem,
        Helper::MapDeleteElem,
        Helper::KtimeGetNs,
        Helper::GetPrandomU32,
        Helper::GetSmpProcessorId,
        Helper::GetCurrentPidTgid,
        Helper::GetCurrentUidGid,
        Helper::GetCurrentComm,
        Helper::GetStackid,
        Helper::GetCurrentTask,
        Helper::GetNumaNodeId,
        Helper::GetStack,
        Helper::GetCurrentCgroupId,
        Helper::ProbeReadUser,
        Helper::ProbeReadKernel,
        Helper::ProbeReadUserStr,
        Helper::ProbeReadKernelStr,
        Helper::GetCurrentAncestorCgroupId,
        Helper::KtimeGetBootNs,
        Helper::RingbufOutput,
        Helper::RingbufReserve,
        Helper::RingbufSubmit,
        Helper::RingbufDiscard,
        Helper::RingbufQuery,
        Helper::CopyFromUser,
        Helper::TaskStorageGet,
        Helper::GetCurrentTaskBtf,
        Helper::ForEachMapElem,
        Helper::GetAttachCookie,
        Helper::Loop,
        Helper::MapLookupPercpuElem,
    ];

    /// The kernel's helper id.
    pub const fn id(self) -> i32 {
        self as i32
    }

    /// The helper with kernel id `id`, if this crate names it.
    pub fn from_id(id: i32) -> Option<Helper> {
        Helper::ALL.iter().copied().find(|h| h.id() == id)
    }

    /// The kernel's name for the helper, as verifier logs and bpftool print it.
    pub const fn name(self) -> &'static str {
        match self {
            Helper::MapLookupElem => "bpf_map_lookup_elem",
            Helper::MapUpdateElem => "bpf_map_update_elem",
            Helper::MapDeleteElem => "bpf_map_delete_elem",
            Helper::KtimeGetNs => "bpf_ktime_get_ns",
            Helper::GetPrandomU32 => "bpf_get_prandom_u32",
            Helper::GetSmpProcessorId => "bpf_get_smp_processor_id",
            Helper::GetCurrentPidTgid => "bpf_get_current_pid_tgid",
            Helper::GetCurrentUidGid => "bpf_get_current_uid_gid",
            Helper::GetCurrentComm => "bpf_get_current_comm",
            Helper::GetStackid => "bpf_get_stackid",
            Helper::GetCurrentTask => "bpf_get_current_task",
            Helper::GetNumaNodeId => "bpf_get_numa_node_id",
            Helper::GetStack => "bpf_get_stack",
            Helper::GetCurrentCgroupId => "bpf_get_current_cgroup_id",
            Helper::GetCurrentAncestorCgroupId => "bpf_get_current_ancestor_cgroup_id",
            Helper::ProbeReadUser => "bpf_probe_read_user",
            Helper::ProbeReadKernel => "bpf_probe_read_kernel",
            Helper::ProbeReadUserStr => "bpf_probe_read_user_str",
            Helper::ProbeReadKernelStr => "bpf_probe_read_kernel_str",
            Helper::KtimeGetBootNs => "bpf_ktime_get_boot_ns",
            Helper::RingbufOutput => "bpf_ringbuf_output",
            Helper::RingbufReserve => "bpf_ringbuf_reserve",
            Helper::RingbufSubmit => "bpf_ringbuf_submit",
            Helper::RingbufDiscard => "bpf_ringbuf_discard",
            Helper::RingbufQuery => "bpf_ringbuf_query",
            Helper::CopyFromUser => "bpf_copy_from_user",
            Helper::TaskStorageGet => "bpf_task_storage_get",
            Helper::GetCurrentTaskBtf => "bpf_get_current_task_btf",
            Helper::ForEachMapElem => "bpf_for_each_map_elem",
            Helper::GetAttachCookie => "bpf_get_attach_cookie",
            Helper::Loop => "bpf_loop",
            Helper::MapLookupPercpuElem => "bpf_map_lookup_percpu_elem",
        }
    }
}

/// One 8-byte eBPF instruction slot.
///
/// The layout is the kernel's `struct bpf_insn`, so a `&[Insn]` can be
/// handed to `BPF_PROG_LOAD` as is. `ld_imm64` occupies two slots, which is
/// why its constructors return `[Insn; 2]`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct Insn {
    /// Opcode: class, size/mode or operation, source bit.
    pub code: u8,
    regs: u8,
    /// Signed offset: memory displacement or jump distance in slots.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

const _: () = assert!(std::mem::size_of::<Insn>() == 8);

impl Insn {
    /// An instruction from its raw fields. `dst` and `src` are 4-bit
    /// register numbers; higher bits are discarded.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        // The kernel's bitfield order follows the byte order: dst is the
        // low nibble on little-endian hosts and the high one on big-endian.
        let regs = if cfg!(target_endian = "little") {
            (dst & 0xf) | ((src & 0xf) << 4)
        } else {
            ((dst & 0xf) << 4) | (src & 0xf)
        };
        Insn {
            code,
            regs,
            off,
            imm,
        }
    }

    /// Destination register number (0–15).
    pub const fn dst(self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs & 0xf
        } else {
            self.regs >> 4
        }
    }

    /// Source register number (0–15).
    pub const fn src(self) -> u8 {
        if cfg!(target_endian = "little") {
            self.regs >> 4
        } else {
            self.regs & 0xf
        }
    }

    /// Instruction class (`code & 7`).
    pub const fn class(self) -> u8 {
        self.code & 0x07
    }

    /// The 8 bytes the kernel reads, in host byte order.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// Decodes 8 bytes in host byte order.
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            regs: b[1],
            off: i16::from_ne_bytes([b[2], b[3]]),
            imm: i32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    // ---- arithmetic -------------------------------------------------

    /// `dst op= imm` on 64 bits (the immediate is sign-extended).
    pub const fn alu64_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
        Insn::new(class::ALU64 | op as u8, dst as u8, 0, 0, imm)
    }

    /// `dst op= src` on 64 bits.
    pub const fn alu64_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
        Insn::new(class::ALU64 | op as u8 | SRC_X, dst as u8, src as u8, 0, 0)
    }

    /// `dst s/= src` or `dst s%= src`: signed division and remainder
    /// (`off = 1`, Linux 6.6+). Other operations are built unsigned.
    pub const fn alu64_reg_signed(op: AluOp, dst: Reg, src: Reg) -> Insn {
        let off = if matches!(op, AluOp::Div | AluOp::Mod) {
            1
        } else {
            0
        };
        Insn::new(
            class::ALU64 | op as u8 | SRC_X,
            dst as u8,
            src as u8,
            off,
            0,
        )
    }

    /// `dst = bswap64(dst)`: reverses the byte order of all 8 bytes
    /// (Linux 6.6+).
    pub const fn bswap64(dst: Reg) -> Insn {
        Insn::new(class::ALU64 | 0xd0, dst as u8, 0, 0, 64)
    }

    /// `wdst op= imm` on the low 32 bits; the upper half is zeroed.
    pub const fn alu32_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
        Insn::new(class::ALU | op as u8, dst as u8, 0, 0, imm)
    }

    /// `wdst op= wsrc` on the low 32 bits; the upper half is zeroed.
    pub const fn alu32_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
        Insn::new(class::ALU | op as u8 | SRC_X, dst as u8, src as u8, 0, 0)
    }

    /// `dst = imm` (sign-extended to 64 bits).
    pub const fn mov64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::alu64_imm(AluOp::Mov, dst, imm)
    }

    /// `dst = src`.
    pub const fn mov64_reg(dst: Reg, src: Reg) -> Insn {
        Insn::alu64_reg(AluOp::Mov, dst, src)
    }

    /// `wdst = imm` (upper 32 bits zeroed).
    pub const fn mov32_imm(dst: Reg, imm: i32) -> Insn {
        Insn::alu32_imm(AluOp::Mov, dst, imm)
    }

    /// `wdst = wsrc` (upper 32 bits zeroed).
    pub const fn mov32_reg(dst: Reg, src: Reg) -> Insn {
        Insn::alu32_reg(AluOp::Mov, dst, src)
    }

    // ---- memory -----------------------------------------------------

    /// `dst = *(size *)(src + off)`, zero-extended.
    pub const fn ldx(size: Size, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(
            class::LDX | mode::MEM | size as u8,
            dst as u8,
            src as u8,
            off,
            0,
        )
    }

    /// `*(size *)(dst + off) = src`.
    pub const fn stx(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(
            class::STX | mode::MEM | size as u8,
            dst as u8,
            src as u8,
            off,
            0,
        )
    }

    /// `*(size *)(dst + off) = imm`.
    pub const fn st(size: Size, dst: Reg, off: i16, imm: i32) -> Insn {
        Insn::new(class::ST | mode::MEM | size as u8, dst as u8, 0, off, imm)
    }

    /// `lock *(size *)(dst + off) += src`: an atomic add without fetch.
    /// `size` must be [`Size::W`] or [`Size::DW`].
    pub const fn atomic_add(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(
            class::STX | mode::ATOMIC | size as u8,
            dst as u8,
            src as u8,
            off,
            AluOp::Add as i32,
        )
    }

    /// `dst = imm` for a full 64-bit immediate. Occupies two slots.
    pub const fn ld_imm64(dst: Reg, imm: u64) -> [Insn; 2] {
        Insn::ld_imm64_raw(dst, 0, imm)
    }

    /// `dst = map[fd]`: loads a map pointer. The kernel swaps the file
    /// descriptor for the map's address at load time. Occupies two slots.
    pub const fn ld_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
        Insn::ld_imm64_raw(dst, PSEUDO_MAP_FD, fd as u32 as u64)
    }

    /// `dst = &map[fd] value + offset`: the address of an array map's first
    /// value, known at load time, so that reading it needs no helper call.
    /// Occupies two slots.
    pub const fn ld_map_value(dst: Reg, fd: i32, offset: u32) -> [Insn; 2] {
        Insn::ld_imm64_raw(
            dst,
            PSEUDO_MAP_VALUE,
            ((offset as u64) << 32) | fd as u32 as u64,
        )
    }

    /// `dst = &function`, the function `distance` slots after the second
    /// slot of this instruction (see [`PSEUDO_FUNC`]). Occupies two slots.
    pub const fn ld_func(dst: Reg, distance: i32) -> [Insn; 2] {
        Insn::ld_imm64_raw(dst, PSEUDO_FUNC, distance as u32 as u64)
    }

    const fn ld_imm64_raw(dst: Reg, src: u8, imm: u64) -> [Insn; 2] {
        [
            Insn::new(
                class::LD | mode::IMM | Size::DW as u8,
                dst as u8,
                src,
                0,
                imm as u32 as i32,
            ),
            Insn::new(0, 0, 0, 0, (imm >> 32) as u32 as i32),
        ]
    }

    // ---- control flow -----------------------------------------------

    /// `if dst op imm goto pc+off` (64-bit compare). `off` counts slots
    /// after this one; the [`Builder`](crate::Builder) computes it from labels.
    pub const fn jmp_imm(op: JmpOp, dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(class::JMP | op as u8, dst as u8, 0, off, imm)
    }

    /// `if dst op src goto pc+off` (64-bit compare).
    pub const fn jmp_reg(op: JmpOp, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(class::JMP | op as u8 | SRC_X, dst as u8, src as u8, off, 0)
    }

    /// `if wdst op imm goto pc+off` (32-bit compare).
    pub const fn jmp32_imm(op: JmpOp, dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(class::JMP32 | op as u8, dst as u8, 0, off, imm)
    }

    /// `if wdst op wsrc goto pc+off` (32-bit compare).
    pub const fn jmp32_reg(op: JmpOp, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(
            class::JMP32 | op as u8 | SRC_X,
            dst as u8,
            src as u8,
            off,
            0,
        )
    }

    /// `goto pc+off`.
    pub const fn ja(off: i16) -> Insn {
        Insn::new(class::JMP | jmp::JA, 0, 0, off, 0)
    }

    /// Calls a kernel helper. Arguments in `R1`–`R5`, result in `R0`.
    /// A call of the kernel helper with id `id`, named by [`Helper`] or
    /// not (the kernel's list grows faster than any crate's).
    pub const fn call_id(id: i32) -> Insn {
        Insn::new(class::JMP | jmp::CALL, 0, 0, 0, id)
    }

    pub const fn call(helper: Helper) -> Insn {
        Insn::new(class::JMP | jmp::CALL, 0, 0, 0, helper as i32)
    }

    /// Calls the kernel function (kfunc) whose `FUNC` type has id `btf_id`
    /// in the kernel's BTF (see [`kernel_func_id`](crate::kernel_func_id)).
    /// Arguments in `R1`–`R5`, result in `R0`, as for helpers; a kfunc
    /// that returns `int` leaves the upper half of `R0` undefined.
    pub const fn call_kfunc(btf_id: u32) -> Insn {
        Insn::new(
            class::JMP | jmp::CALL,
            0,
            PSEUDO_KFUNC_CALL,
            0,
            btf_id as i32,
        )
    }

    /// Calls a function of the same program that starts `distance`
    /// instructions after the one following this call
    /// (`BPF_PSEUDO_CALL`). Arguments in `R1`–`R5`, result in `R0`; the
    /// function has a stack frame of its own.
    pub const fn call_local(distance: i32) -> Insn {
        Insn::new(class::JMP | jmp::CALL, 0, PSEUDO_CALL, 0, distance)
    }

    /// Returns from the program with the value in `R0`.
    pub const fn exit() -> Insn {
        Insn::new(class::JMP | jmp::EXIT, 0, 0, 0, 0)
    }

    /// Whether this is the first slot of a map reference
    /// ([`ld_map_fd`](Insn::ld_map_fd), [`ld_map_value`](Insn::ld_map_value)),
    /// whose immediate is a map's file descriptor, or, before
    /// [`relocate_maps`](crate::relocate_maps), an index into the maps of
    /// a program.
    pub const fn is_map_ref(self) -> bool {
        self.is_ld_imm64() && (self.src() == PSEUDO_MAP_FD || self.src() == PSEUDO_MAP_VALUE)
    }

    /// Whether this slot starts a two-slot `ld_imm64`.
    pub const fn is_ld_imm64(self) -> bool {
        self.code == class::LD | mode::IMM | Size::DW as u8
    }

    /// Whether this is a jump whose `off` field is a branch distance
    /// (conditional jumps and `ja`; not `call` or `exit`).
    pub const fn is_branch(self) -> bool {
        let op = self.code & 0xf0;
        match self.class() {
            class::JMP => op != jmp::CALL && op != jmp::EXIT,
            class::JMP32 => op != jmp::CALL && op != jmp::EXIT && op != jmp::JA,
            _ => false,
        }
    }
}

impl fmt::Debug for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Insn {{ code: {:#04x}, dst: {}, src: {}, off: {}, imm: {} }}",
            self.code,
            self.dst(),
            self.src(),
            self.off,
            self.imm
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Reg::*;

    fn bytes(i: Insn) -> [u8; 8] {
        i.to_bytes()
    }

    #[test]
    fn encodes_alu() {
        assert_eq!(
            bytes(Insn::mov64_reg(R6, R1)),
            [0xbf, 0x16, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::mov64_imm(R0, 1)),
            [0xb7, 0x00, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu64_imm(AluOp::Add, R1, -8)),
            [0x07, 0x01, 0, 0, 0xf8, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            bytes(Insn::alu64_reg(AluOp::Add, R1, R2)),
            [0x0f, 0x21, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu64_imm(AluOp::Lsh, R3, 32)),
            [0x67, 0x03, 0, 0, 32, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu64_imm(AluOp::Arsh, R3, 32)),
            [0xc7, 0x03, 0, 0, 32, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu64_imm(AluOp::Rsh, R3, 32)),
            [0x77, 0x03, 0, 0, 32, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::mov32_imm(R2, 7)),
            [0xb4, 0x02, 0, 0, 7, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::mov32_reg(R2, R3)),
            [0xbc, 0x32, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu32_imm(AluOp::And, R4, 0xff)),
            [0x54, 0x04, 0, 0, 0xff, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu32_reg(AluOp::Xor, R4, R5)),
            [0xac, 0x54, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::alu64_imm(AluOp::Neg, R1, 0)),
            [0x87, 0x01, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn encodes_memory() {
        assert_eq!(
            bytes(Insn::ldx(Size::DW, R1, R6, 80)),
            [0x79, 0x61, 80, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::ldx(Size::W, R1, R6, 4)),
            [0x61, 0x61, 4, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::ldx(Size::H, R1, R6, 2)),
            [0x69, 0x61, 2, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::ldx(Size::B, R1, R6, 1)),
            [0x71, 0x61, 1, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::stx(Size::DW, R10, -8, R1)),
            [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::stx(Size::B, R10, -1, R1)),
            [0x73, 0x1a, 0xff, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::st(Size::DW, R10, -16, 0)),
            [0x7a, 0x0a, 0xf0, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::st(Size::W, R10, -4, 5)),
            [0x62, 0x0a, 0xfc, 0xff, 5, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::atomic_add(Size::DW, R0, 0, R1)),
            [0xdb, 0x10, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn encodes_ld_imm64_in_two_slots() {
        let [a, b] = Insn::ld_imm64(R1, 0x1122_3344_5566_7788);
        assert_eq!(bytes(a), [0x18, 0x01, 0, 0, 0x88, 0x77, 0x66, 0x55]);
        assert_eq!(bytes(b), [0x00, 0x00, 0, 0, 0x44, 0x33, 0x22, 0x11]);
        let [a, b] = Insn::ld_map_fd(R1, 5);
        assert_eq!(bytes(a), [0x18, 0x11, 0, 0, 5, 0, 0, 0]);
        assert_eq!(bytes(b), [0; 8]);
        assert!(a.is_ld_imm64());
    }

    #[test]
    fn encodes_control_flow() {
        assert_eq!(
            bytes(Insn::jmp_imm(JmpOp::Eq, R0, 0, 3)),
            [0x15, 0x00, 3, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::jmp_reg(JmpOp::Ne, R1, R2, -2)),
            [0x5d, 0x21, 0xfe, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::jmp_imm(JmpOp::Sgt, R3, -1, 1)),
            [0x65, 0x03, 1, 0, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            bytes(Insn::jmp32_imm(JmpOp::Lt, R3, 4, 1)),
            [0xa6, 0x03, 1, 0, 4, 0, 0, 0]
        );
        assert_eq!(
            bytes(Insn::jmp32_reg(JmpOp::Sle, R3, R4, 1)),
            [0xde, 0x43, 1, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes(Insn::ja(-1)), [0x05, 0, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(
            bytes(Insn::call(Helper::ProbeReadUser)),
            [0x85, 0, 0, 0, 112, 0, 0, 0]
        );
        assert_eq!(bytes(Insn::exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn round_trips_bytes() {
        let i = Insn::jmp_reg(JmpOp::Sge, R9, R8, -300);
        assert_eq!(Insn::from_bytes(i.to_bytes()), i);
        assert_eq!((i.dst(), i.src()), (9, 8));
    }

    #[test]
    fn helpers_have_kernel_ids_and_names() {
        for h in Helper::ALL {
            assert_eq!(Helper::from_id(h.id()), Some(*h));
            assert!(h.name().starts_with("bpf_"));
        }
        assert_eq!(Helper::GetAttachCookie.id(), 174);
        assert_eq!(Helper::from_id(9999), None);
    }

    #[test]
    fn classifies_branches() {
        assert!(Insn::ja(0).is_branch());
        assert!(Insn::jmp_imm(JmpOp::Eq, R0, 0, 0).is_branch());
        assert!(Insn::jmp32_imm(JmpOp::Eq, R0, 0, 0).is_branch());
        assert!(!Insn::call(Helper::KtimeGetNs).is_branch());
        assert!(!Insn::exit().is_branch());
        assert_eq!(JmpOp::Lt.negate(), Some(JmpOp::Ge));
    }
}
