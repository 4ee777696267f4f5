//! Programs that replay hits of the fast path.
//!
//! A probe of the `sdt` crate can hand its hit to sdt through memory the
//! program shares, without entering the kernel (see `sdt::fastpath`). The
//! hit still has to run the script's logic against the same maps, ring
//! buffer and counters as every other hit, so that a script's output is
//! the same whichever way its hits arrive. sdt does this by compiling the
//! probe's program a second time, as a `BPF_PROG_TYPE_SYSCALL` program
//! that sdt runs itself (`BPF_PROG_TEST_RUN`) on a context built from the
//! hit's record ([`layout::replay`]): one code generator, one verifier,
//! one set of maps, rather than a second implementation of the language
//! in user space that would have to agree with the first on every
//! aggregation, integer width and string rule.
//!
//! The replayed program differs from the kernel's in what it asks about
//! the hit, which comes from the context instead of the kernel: the time,
//! process and thread, user, thread name, probe and site, arguments, and
//! the strings the probe copied. A probe whose program needs anything
//! else of the moment of the hit (stacks, `curtask`, the CPU, registers,
//! memory of the process other than the strings its hits copy, signals)
//! keeps the kernel's path: [`blocker`] says why, for `--dump` and `-v`.

use sdt_bpf::{AluOp, Insn, Reg, Size};
use sdt_lang::check::helper;
use sdt_lang::hir::{Output, Program, TExpr, TKind, TStmt};
use sdt_lang::types::Shown;
use sdt_lang::types::Ty;

use super::mem::Mem;
use super::{ArgAccess, Gen, CTX};
use crate::layout::replay;

/// What a replayed program reads from its context instead of asking the
/// kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Current {
    Time,
    PidTgid,
    UidGid,
}

impl Current {
    /// The helper whose value this replaces, by its kernel id.
    fn of_helper(id: u32) -> Option<Current> {
        match id {
            helper::KTIME_GET_NS => Some(Current::Time),
            helper::GET_CURRENT_PID_TGID => Some(Current::PidTgid),
            helper::GET_CURRENT_UID_GID => Some(Current::UidGid),
            _ => None,
        }
    }

    fn offset(self) -> i16 {
        (match self {
            Current::Time => replay::TIME,
            Current::PidTgid => replay::PID_TGID,
            Current::UidGid => replay::UID_GID,
        }) as i16
    }

    fn helper(self) -> sdt_bpf::Helper {
        match self {
            Current::Time => sdt_bpf::Helper::KtimeGetNs,
            Current::PidTgid => sdt_bpf::Helper::GetCurrentPidTgid,
            Current::UidGid => sdt_bpf::Helper::GetCurrentUidGid,
        }
    }
}

impl Gen<'_> {
    /// Whether this program replays hits of the fast path.
    pub(super) fn replays(&self) -> bool {
        matches!(self.unit.args, ArgAccess::Replay(_))
    }

    /// `R0` = the time, process and thread, or user of the hit: from the
    /// context when replaying, else from the kernel.
    pub(super) fn current(&mut self, what: Current) {
        if self.replays() {
            self.b
                .push(Insn::ldx(Size::DW, Reg::R0, CTX, what.offset()));
        } else {
            self.b.call(what.helper());
        }
    }

    /// A helper without arguments whose value a replay takes from its
    /// context instead, if `id` is one.
    pub(super) fn replayed_helper(&mut self, id: u32) -> bool {
        match Current::of_helper(id) {
            Some(what) if self.replays() => {
                self.current(what);
                true
            }
            _ => false,
        }
    }

    /// The thread's name, 16 bytes at `at` in `dst`.
    pub(super) fn current_comm(&mut self, dst: Mem, at: u32) {
        if self.replays() {
            for half in 0..2 {
                let from = (replay::COMM + 8 * half) as i16;
                self.b.push(Insn::ldx(Size::DW, Reg::R0, CTX, from));
                dst.store(&mut self.b, Size::DW, at + 8 * half, Reg::R0);
            }
        } else {
            dst.address(&mut self.b, Reg::R1, at);
            self.b.push(Insn::mov64_imm(Reg::R2, 16));
            self.b.call(sdt_bpf::Helper::GetCurrentComm);
        }
    }

    /// `R0` = argument `n` of a replayed hit, narrowed to its width as the
    /// kernel's reading of the site would.
    pub(super) fn replayed_arg(&mut self, n: usize) {
        let width = match &self.unit.args {
            ArgAccess::Replay(widths) => widths.get(n).copied().unwrap_or_default(),
            _ => ArgWidth::default(),
        };
        let at = (replay::ARGS + 8 * n as u32) as i16;
        self.b.push(Insn::ldx(Size::DW, Reg::R0, CTX, at));
        let shift = 64 - 8 * i32::from(width.size.clamp(1, 8));
        if shift > 0 {
            self.b.push(Insn::alu64_imm(AluOp::Lsh, Reg::R0, shift));
            let back = if width.signed {
                AluOp::Arsh
            } else {
                AluOp::Rsh
            };
            self.b.push(Insn::alu64_imm(back, Reg::R0, shift));
        }
    }

    /// `R3` = where the tracer keeps the bytes argument `n` copied.
    pub(super) fn captured_address(&mut self, n: usize, into: Reg) {
        let at = (replay::CAPTURED + 8 * n as u32) as i16;
        self.b.push(Insn::ldx(Size::DW, into, CTX, at));
    }

    /// The argument a read of the process's memory starts at, when this
    /// program replays and the address is an argument as it is.
    pub(super) fn captured_arg(&self, ptr: &TExpr) -> Option<usize> {
        if !self.replays() {
            return None;
        }
        direct_arg(ptr)
    }
}

/// A replay program that runs on a batch of hits ([`replay::BATCH_RECORDS`]):
/// `bpf_loop` over them, each copied from the tracer's memory into scratch
/// memory at `record_at` and handed to `body` (the probe's program,
/// generated for one hit) as its context, in a call of its own. One run,
/// one system call, for a whole batch: the call, not the program, is what
/// a replayed hit cost.
pub(crate) fn batched(record_at: u32, body: &[Insn]) -> Vec<Insn> {
    use sdt_bpf::{Builder, Helper, JmpOp};
    let mut b = Builder::new();
    let callback = b.label();
    let out = b.label();
    // The program: R6 = the batch; bpf_loop(count, callback, &records).
    b.push(Insn::mov64_reg(Reg::R6, Reg::R1));
    b.push(Insn::ldx(
        Size::DW,
        Reg::R1,
        Reg::R6,
        replay::BATCH_RECORDS as i16,
    ));
    b.push(Insn::stx(Size::DW, Reg::R10, -8, Reg::R1));
    b.push(Insn::ldx(
        Size::DW,
        Reg::R1,
        Reg::R6,
        replay::BATCH_COUNT as i16,
    ));
    b.ld_func(Reg::R2, callback);
    b.push(Insn::mov64_reg(Reg::R3, Reg::R10));
    b.push(Insn::alu64_imm(AluOp::Add, Reg::R3, -8));
    b.push(Insn::mov64_imm(Reg::R4, 0));
    b.call(Helper::Loop);
    b.push(Insn::mov64_imm(Reg::R0, 0));
    b.exit();
    // The callback: R1 = the hit's number, R2 = where the records are.
    b.bind(callback);
    b.push(Insn::mov64_reg(Reg::R6, Reg::R1));
    b.push(Insn::mov64_reg(Reg::R7, Reg::R2));
    b.push(Insn::st(Size::W, Reg::R10, -4, 0));
    b.ld_map_index(Reg::R1, crate::layout::SCRATCH_MAP);
    b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
    b.push(Insn::alu64_imm(AluOp::Add, Reg::R2, -4));
    b.call(Helper::MapLookupElem);
    b.jump_imm(JmpOp::Eq, Reg::R0, 0, out);
    b.push(Insn::alu64_imm(AluOp::Add, Reg::R0, record_at as i32));
    b.push(Insn::mov64_reg(Reg::R8, Reg::R0));
    b.push(Insn::ldx(Size::DW, Reg::R3, Reg::R7, 0));
    b.push(Insn::mov64_reg(Reg::R1, Reg::R6));
    b.push(Insn::alu64_imm(AluOp::Mul, Reg::R1, replay::SIZE as i32));
    b.push(Insn::alu64_reg(AluOp::Add, Reg::R3, Reg::R1));
    b.push(Insn::mov64_reg(Reg::R1, Reg::R8));
    b.push(Insn::mov64_imm(Reg::R2, replay::SIZE as i32));
    b.call(Helper::CopyFromUser);
    b.jump_imm(JmpOp::Ne, Reg::R0, 0, out);
    b.push(Insn::mov64_reg(Reg::R1, Reg::R8));
    let call_at = b.len();
    b.push(Insn::call_local(0));
    b.bind(out);
    b.push(Insn::mov64_imm(Reg::R0, 0));
    b.exit();
    let mut insns = b.finish().expect("the driver's labels are bound");
    insns[call_at] = Insn::call_local((insns.len() - call_at - 1) as i32);
    insns.extend_from_slice(body);
    insns
}

/// An argument's width as its site's note gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArgWidth {
    /// Bytes: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
}

impl Default for ArgWidth {
    fn default() -> Self {
        ArgWidth {
            size: 8,
            signed: false,
        }
    }
}

/// `argN`, or `argN` cast to a pointer or an integer.
fn direct_arg(e: &TExpr) -> Option<usize> {
    match &e.kind {
        TKind::Arg(n) => Some(usize::from(*n)),
        TKind::IntCast(inner) | TKind::Retype(inner) => direct_arg(inner),
        _ => None,
    }
}

/// The builtin a kernel helper's value stands for, in messages.
fn builtin_of(helper_id: u32) -> &'static str {
    match helper_id {
        helper::GET_CURRENT_TASK => "curtask",
        helper::GET_SMP_PROCESSOR_ID => "cpu",
        helper::GET_CURRENT_CGROUP_ID => "cgroup",
        helper::GET_NUMA_NODE_ID => "numaid",
        helper::JIFFIES64 => "jiffies",
        helper::KTIME_GET_BOOT_NS => "nsecs(boot)",
        helper::KTIME_GET_TAI_NS => "nsecs(tai)",
        _ => "a kernel helper's value",
    }
}

/// Why the program of probe instance `instance` cannot replay hits of the
/// fast path, if it cannot: `captured` has bit N set when the hits copy
/// the bytes `argN` points to.
pub fn blocker(program: &Program, instance: usize, captured: u64) -> Option<String> {
    let probe = program.probes.get(instance)?;
    let check = Blockers { captured };
    probe
        .predicate
        .iter()
        .find_map(|p| check.expr(p))
        .or_else(|| check.stmts(&probe.body))
}

struct Blockers {
    captured: u64,
}

impl Blockers {
    fn stmts(&self, stmts: &[TStmt]) -> Option<String> {
        stmts.iter().find_map(|s| self.stmt(s))
    }

    fn exprs<'e>(&self, exprs: impl IntoIterator<Item = &'e TExpr>) -> Option<String> {
        exprs.into_iter().find_map(|e| self.expr(e))
    }

    fn stmt(&self, stmt: &TStmt) -> Option<String> {
        match stmt {
            TStmt::Expr(e) | TStmt::AssignVar { value: e, .. } => self.expr(e),
            TStmt::AssignMap { keys, value, .. } => self.exprs(keys).or_else(|| self.expr(value)),
            TStmt::Aggregate { keys, value, .. } => {
                self.exprs(keys).or_else(|| self.exprs(value.iter()))
            }
            TStmt::If {
                cond,
                then,
                otherwise,
            } => self
                .expr(cond)
                .or_else(|| self.stmts(then))
                .or_else(|| self.stmts(otherwise)),
            TStmt::While { cond, body, .. } => self.expr(cond).or_else(|| self.stmts(body)),
            TStmt::ForRange {
                start, end, body, ..
            } => self
                .expr(start)
                .or_else(|| self.expr(end))
                .or_else(|| self.stmts(body)),
            TStmt::Unroll { body, .. } | TStmt::ForMap { body, .. } | TStmt::Block(body) => {
                self.stmts(body)
            }
            TStmt::ZeroVar(_) | TStmt::Break | TStmt::Continue | TStmt::Return => None,
            TStmt::Output(output) => self.output(output),
        }
    }

    fn output(&self, output: &Output) -> Option<String> {
        match output {
            Output::Printf { args, .. }
            | Output::System { args, .. }
            | Output::Message { args, .. }
            | Output::Cat { args, .. } => self.exprs(args),
            Output::PrintValue(e) => self.expr(e),
            Output::Exit(code) => self.exprs(code.iter()),
            Output::Join { .. } => Some("join() reads the process's memory".into()),
            Output::Event { strings } => strings
                .iter()
                .find(|s| self.captured & (1 << s.arg.min(63)) == 0)
                .map(|s| {
                    format!(
                        "arg{} is read as a string but its hits do not copy it",
                        s.arg
                    )
                }),
            Output::PrintMap { .. } | Output::Clear(_) | Output::Zero(_) | Output::Time(_) => None,
        }
    }

    /// A read of the process's memory at `ptr`: served from the hit's
    /// copy when `ptr` is an argument the hits copy.
    fn read(&self, ptr: &TExpr, what: &str) -> Option<String> {
        if !ptr.ty.is_scalar() {
            return self.expr(ptr);
        }
        match direct_arg(ptr) {
            Some(n) if n < 64 && self.captured & (1 << n) != 0 => None,
            Some(n) => Some(format!(
                "{what}(arg{n}) reads the process's memory, and its hits do not copy arg{n}"
            )),
            None => Some(format!(
                "{what}() of an address other than an argument reads the process's memory"
            )),
        }
    }

    fn expr(&self, e: &TExpr) -> Option<String> {
        if let Ty::Shown(Shown::UStack { .. } | Shown::KStack { .. }) = e.ty {
            return Some("a stack is only known in the kernel".into());
        }
        let kernel_only = |what: &str| Some(format!("{what} is only known in the kernel"));
        match &e.kind {
            TKind::Int(_)
            | TKind::Str(_)
            | TKind::Var(_)
            | TKind::Param(_)
            | TKind::NsPid { .. }
            | TKind::UserMode
            | TKind::Arg(_)
            | TKind::Probe
            | TKind::Func
            | TKind::VarIncDec { .. }
            | TKind::MapLen(_) => None,
            TKind::Helper(h) => match Current::of_helper(h.helper) {
                Some(_) => None,
                None if h.helper == helper::GET_PRANDOM_U32 => None,
                None => kernel_only(builtin_of(h.helper)),
            },
            TKind::HelperString { helper: id, .. } => {
                (*id != helper::GET_CURRENT_COMM).then(|| "a kernel helper's string".into())
            }
            TKind::SArg(_) | TKind::Reg(_) | TKind::Retval => kernel_only("a register"),
            TKind::UAddr(_) => kernel_only("where the probe's code is"),
            TKind::CtxRecord | TKind::DataLoc { .. } => kernel_only("a tracepoint's record"),
            TKind::UserPlace(_) | TKind::Load { .. } | TKind::AddrOf(_) => {
                Some("it reads memory through a pointer".into())
            }
            TKind::Field { .. } | TKind::Index { .. } | TKind::ArrayStr(_) => {
                Some("it reads memory through a pointer".into())
            }
            TKind::CopyPlace(_) => Some("it copies memory through a pointer".into()),
            TKind::USym(_) => kernel_only("the process's mappings at the hit"),
            TKind::UStack | TKind::KStack | TKind::StackLen(_) => {
                Some("a stack is only known in the kernel".into())
            }
            TKind::StrRead { ptr, len } => self
                .read(ptr, "str")
                .or_else(|| self.exprs(len.iter().map(|l| &**l))),
            TKind::BufRead { ptr, len } => self.read(ptr, "buf").or_else(|| self.expr(len)),
            TKind::MapGet { keys, .. }
            | TKind::AggGet { keys, .. }
            | TKind::MapIncDec { keys, .. }
            | TKind::Delete { keys, .. }
            | TKind::Find { keys, .. }
            | TKind::HasKey { keys, .. } => self.exprs(keys),
            TKind::Unary { expr: inner, .. }
            | TKind::StrLen(inner)
            | TKind::IntCast(inner)
            | TKind::Strftime(inner)
            | TKind::Bswap(inner)
            | TKind::Retype(inner)
            | TKind::Convert(inner) => self.expr(inner),
            TKind::Binary { lhs, rhs, .. }
            | TKind::Logical { lhs, rhs, .. }
            | TKind::StrEq { lhs, rhs, .. }
            | TKind::StrNCmp { lhs, rhs, .. }
            | TKind::StrContains {
                haystack: lhs,
                needle: rhs,
            }
            | TKind::StrStr {
                haystack: lhs,
                needle: rhs,
            } => self.expr(lhs).or_else(|| self.expr(rhs)),
            TKind::Ternary {
                cond,
                then,
                otherwise,
            } => self
                .expr(cond)
                .or_else(|| self.expr(then))
                .or_else(|| self.expr(otherwise)),
            TKind::Fields(parts) => self.exprs(parts.iter().map(|(_, e)| e)),
            TKind::Concat(items) | TKind::Tuple(items) => self.exprs(items),
            TKind::TupleIndex { tuple, .. } => self.expr(tuple),
            TKind::Block { stmts, value } => self.stmts(stmts).or_else(|| self.expr(value)),
        }
    }
}
