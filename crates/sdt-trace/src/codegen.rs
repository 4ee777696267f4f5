//! The BPF program behind `sdt trace`, generated per argument shape.
//!
//! Every site whose arguments live in the same places (the same
//! [`ArgSource`]s) shares one program; sites that differ get their own, so
//! each site's arguments are read exactly as its note says, with no spec
//! tables or run-time decoding in the kernel. Which site fired travels in
//! the record: the attach cookie where the kernel offers cookies, a
//! constant baked into a per-site program where it does not.
//!
//! One hit becomes one ring-buffer record of a size fixed per program
//! (`bpf_ringbuf_reserve` needs a constant size):
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | `u64` `bpf_ktime_get_ns()`, taken right after the reservation |
//! | 8 | `u64` `bpf_get_current_pid_tgid()` |
//! | 16 | `u64` site id |
//! | 24 | `[u8; 16]` `comm` |
//! | 40 | `u64` per argument, already narrowed and sign-extended |
//! | then | `i64` per string argument: bytes read including one for the end (`len + 1`), or a negative error |
//! | then | `[u8; 256]` per string argument |
//!
//! Taking the timestamp after the reservation keeps ring order and time
//! order as close as two CPUs racing for the ring allow; the reader
//! finishes the job (see `session`).
//!
//! Records are submitted without waking the reader until an eighth of the
//! ring is waiting; the reader polls on a short timeout in between. One
//! wake-up per event costs an interrupt and a context switch each, which is
//! most of the cost of a hit when events come fast.
//!
//! When the ring is full the program cannot send the event, so it adds one
//! to a per-CPU counter instead, and the reader reports the sum: an event
//! is either delivered or counted, never silently gone.

use sdt_bpf::arg::ArgSource;
use sdt_bpf::{
    AluOp, Builder, CodegenError, Helper, Insn, JmpOp, Map, Reg, Size, QUERY_AVAIL_DATA,
    SUBMIT_FORCE_WAKEUP, SUBMIT_NO_WAKEUP,
};

pub(crate) const TIME: usize = 0;
pub(crate) const PID_TGID: usize = 8;
pub(crate) const SITE: usize = 16;
pub(crate) const COMM: usize = 24;
pub(crate) const COMM_LEN: usize = 16;
pub(crate) const ARGS: usize = 40;
/// Bytes read for each `-s` argument, including the terminating NUL.
pub const STRING_LEN: usize = 256;

/// Where the arguments of a group of sites are, and which of them are read
/// as strings: everything a program depends on besides maps and site ids.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    pub args: Vec<ArgSource>,
    /// Arguments read as strings, each index `< args.len()`, sorted.
    pub strings: Vec<StringArg>,
}

impl Shape {
    pub fn record_len(&self) -> usize {
        self.string_results() + self.strings.len() * (8 + STRING_LEN)
    }

    /// Offset of the `i64` result of reading the `n`-th string.
    pub fn string_result(&self, n: usize) -> usize {
        self.string_results() + 8 * n
    }

    /// Offset of the bytes of the `n`-th string.
    pub fn string_bytes(&self, n: usize) -> usize {
        self.string_results() + 8 * self.strings.len() + STRING_LEN * n
    }

    fn string_results(&self) -> usize {
        ARGS + 8 * self.args.len()
    }
}

/// An argument to read as a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringArg {
    /// The argument that holds the string's address.
    pub arg: usize,
    /// The argument that holds its length in bytes, for strings without a
    /// terminating NUL (the `sdt` crate passes `&str` as pointer and
    /// length); `None` reads up to a NUL.
    pub len_arg: Option<usize>,
}

/// How a program learns which site fired.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SiteId {
    /// `bpf_get_attach_cookie`: one program serves many sites.
    Cookie,
    /// A constant: one program per site.
    Constant(u32),
}

/// Generates the program for `shape`. Records wake the reader only once
/// `wake_at` bytes are waiting in the ring.
pub(crate) fn program(
    shape: &Shape,
    site: SiteId,
    ring: &Map,
    wake_at: u32,
    lost: &Map,
) -> Result<Vec<Insn>, CodegenError> {
    const CTX: Reg = Reg::R6;
    const RECORD: Reg = Reg::R7;
    let off = |n: usize| n as i16;

    let mut b = Builder::new();
    let full = b.label();
    let done = b.label();

    b.push(Insn::mov64_reg(CTX, Reg::R1));
    b.ld_map(Reg::R1, ring)
        .push(Insn::mov64_imm(Reg::R2, shape.record_len() as i32))
        .push(Insn::mov64_imm(Reg::R3, 0))
        .call(Helper::RingbufReserve)
        .jump_imm(JmpOp::Eq, Reg::R0, 0, full)
        .push(Insn::mov64_reg(RECORD, Reg::R0));

    b.call(Helper::KtimeGetNs)
        .push(Insn::stx(Size::DW, RECORD, off(TIME), Reg::R0));
    b.call(Helper::GetCurrentPidTgid)
        .push(Insn::stx(Size::DW, RECORD, off(PID_TGID), Reg::R0));
    match site {
        SiteId::Cookie => {
            b.push(Insn::mov64_reg(Reg::R1, CTX))
                .call(Helper::GetAttachCookie)
                .push(Insn::stx(Size::DW, RECORD, off(SITE), Reg::R0));
        }
        SiteId::Constant(id) => {
            b.load_imm(Reg::R0, i64::from(id)).push(Insn::stx(
                Size::DW,
                RECORD,
                off(SITE),
                Reg::R0,
            ));
        }
    }
    b.push(Insn::mov64_reg(Reg::R1, RECORD))
        .push(Insn::alu64_imm(AluOp::Add, Reg::R1, COMM as i32))
        .push(Insn::mov64_imm(Reg::R2, COMM_LEN as i32))
        .call(Helper::GetCurrentComm);

    for (n, source) in shape.args.iter().enumerate() {
        source.emit_load(&mut b, CTX, -8, Reg::R8)?;
        b.push(Insn::stx(Size::DW, RECORD, off(ARGS + 8 * n), Reg::R8));
    }
    for (n, string) in shape.strings.iter().enumerate() {
        b.push(Insn::mov64_reg(Reg::R1, RECORD))
            .push(Insn::alu64_imm(
                AluOp::Add,
                Reg::R1,
                shape.string_bytes(n) as i32,
            ));
        let stored = b.label();
        match string.len_arg {
            None => {
                b.push(Insn::mov64_imm(Reg::R2, STRING_LEN as i32))
                    .push(Insn::ldx(
                        Size::DW,
                        Reg::R3,
                        RECORD,
                        off(ARGS + 8 * string.arg),
                    ))
                    .call(Helper::ProbeReadUserStr);
            }
            Some(len_arg) => {
                // Read min(length, STRING_LEN - 1) bytes; the bound also
                // tells the verifier the size is safe. R9 keeps the length
                // across the call, to report it the way probe_read_user_str
                // reports its count (including one byte for the end).
                let bounded = b.label();
                b.push(Insn::ldx(
                    Size::DW,
                    Reg::R2,
                    RECORD,
                    off(ARGS + 8 * len_arg),
                ))
                .jump_imm(JmpOp::Le, Reg::R2, STRING_LEN as i32 - 1, bounded)
                .push(Insn::mov64_imm(Reg::R2, STRING_LEN as i32 - 1))
                .bind(bounded)
                .push(Insn::mov64_reg(Reg::R9, Reg::R2))
                .push(Insn::ldx(
                    Size::DW,
                    Reg::R3,
                    RECORD,
                    off(ARGS + 8 * string.arg),
                ))
                .call(Helper::ProbeReadUser)
                .jump_imm(JmpOp::Slt, Reg::R0, 0, stored)
                .push(Insn::mov64_reg(Reg::R0, Reg::R9))
                .push(Insn::alu64_imm(AluOp::Add, Reg::R0, 1));
            }
        }
        b.bind(stored).push(Insn::stx(
            Size::DW,
            RECORD,
            off(shape.string_result(n)),
            Reg::R0,
        ));
    }

    // Submit without waking the reader, unless the ring is filling up: a
    // wake-up is an interrupt and a context switch per event, which cost
    // more than the rest of the program. The reader also polls on a short
    // timeout, so a lone event still arrives promptly.
    let submit = b.label();
    b.ld_map(Reg::R1, ring)
        .push(Insn::mov64_imm(Reg::R2, QUERY_AVAIL_DATA))
        .call(Helper::RingbufQuery)
        .push(Insn::mov64_imm(Reg::R2, SUBMIT_NO_WAKEUP))
        .jump_imm(JmpOp::Lt, Reg::R0, wake_at as i32, submit)
        .push(Insn::mov64_imm(Reg::R2, SUBMIT_FORCE_WAKEUP))
        .bind(submit)
        .push(Insn::mov64_reg(Reg::R1, RECORD))
        .call(Helper::RingbufSubmit)
        .jump(done);

    // The ring is full: count the event as lost in the per-CPU counter.
    b.bind(full)
        .push(Insn::st(Size::W, Reg::R10, -4, 0))
        .ld_map(Reg::R1, lost)
        .push(Insn::mov64_reg(Reg::R2, Reg::R10))
        .push(Insn::alu64_imm(AluOp::Add, Reg::R2, -4))
        .call(Helper::MapLookupElem)
        .jump_imm(JmpOp::Eq, Reg::R0, 0, done)
        .push(Insn::mov64_imm(Reg::R1, 1))
        .push(Insn::atomic_add(Size::DW, Reg::R0, 0, Reg::R1));

    b.bind(done).push(Insn::mov64_imm(Reg::R0, 0)).exit();
    b.finish()
}
