//! Reads of the traced process's memory, and the count of those that
//! failed.
//!
//! **Why reads fault pages in.** A program that may not sleep reads with
//! `bpf_probe_read_user` and `bpf_probe_read_user_str`, which cannot take
//! a page fault: a page the process has never touched reads as -EFAULT.
//! That is the common case for string literals, which a C program passes
//! to a probe (`"GET"`, `"POST"`) without ever reading them itself, so
//! their `.rodata` page may never have been faulted in; bpftrace then
//! shows an empty string for every hit. Where the kernel can
//! ([`sdt_bpf::FaultingReads`]), a uprobe program that reads the
//! process's memory is loaded sleepable, and reads with the
//! `bpf_copy_from_user_str` kfunc and the `bpf_copy_from_user` helper,
//! which fault the page in as the process itself would, with the same
//! results as the helpers they replace (bytes written with the NUL, or a
//! negative error and a zeroed destination). Reading straight through
//! the faulting calls costs nothing measurable on a resident page (see
//! bench/strings.sh), so there is no fast path to try first; the price is
//! paid once per page that was not resident, by the traced thread, which
//! waits for the page as it would have had it read the string itself.
//!
//! **What a sleepable program gives up.** While a fault waits, the thread
//! may be switched out and another traced thread run on the same CPU, so
//! a sleepable program keeps its scratch memory per thread (a task storage
//! map, see [`layout::TASK_SCRATCH_MAP`]), never per CPU. It cannot use a
//! stack-trace map, so a program that records `ustack` stays
//! non-sleepable (its reads do not fault, and say so when they fail), and
//! the compilation notes it.
//!
//! **Counting failures.** Every read site (a `str()`, `buf()`, member
//! read, `join()`, or a string of `sdt trace`) has two counters in the
//! lost map: how many reads failed, and the last error. A failed read
//! adds to them on its own path, so a read that succeeds costs one jump.
//! The runtime reports every site whose count is not zero at the end of
//! the run, and in metrics while it runs: a value that could not be read
//! never passes for an empty string unsaid.

use sdt_bpf::{AluOp, Helper, Insn, JmpOp, Reg, Size};

use super::mem::KEY_SLOT;
use super::Gen;
use crate::layout::{self, ReadSite, ReadWhat};

/// How a read of the traced process's memory reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UserRead {
    /// Exactly `R2` bytes.
    Bytes,
    /// A string of at most `R2` bytes with its NUL.
    Str,
}

impl Gen<'_> {
    /// Reads the traced process's memory: `R1` is where to, `R2` how many
    /// bytes, `R3` the address. Leaves the result in `R0` (0, or for a
    /// string the bytes written with the NUL; a negative error, with the
    /// destination zeroed, when the read failed) and counts a failure
    /// against `what`. Clobbers `R1`–`R5`.
    pub(super) fn read_user(&mut self, read: UserRead, what: ReadWhat) {
        self.user_reads += 1;
        match (read, self.faulting) {
            (UserRead::Bytes, None) => {
                self.b.call(Helper::ProbeReadUser);
            }
            (UserRead::Str, None) => {
                self.b.call(Helper::ProbeReadUserStr);
            }
            (UserRead::Bytes, Some(_)) => {
                self.b.call(Helper::CopyFromUser);
            }
            (UserRead::Str, Some(kfunc)) => {
                self.b.push(Insn::mov64_imm(Reg::R4, 0));
                self.b.push(Insn::call_kfunc(kfunc.copy_from_user_str));
                // The kfunc returns an `int`: -14 arrives as 4294967282.
                self.b.push(Insn::alu64_imm(AluOp::Lsh, Reg::R0, 32));
                self.b.push(Insn::alu64_imm(AluOp::Arsh, Reg::R0, 32));
            }
        }
        let site = self.read_site(what);
        let ok = self.b.label();
        self.b.jump_imm(JmpOp::Sge, Reg::R0, 0, ok);
        let error = self.frame.slot();
        self.b.push(Insn::stx(Size::DW, Reg::R10, error, Reg::R0));
        let (count, last) = layout::read_failure_counters(self.program.maps.len(), site);
        self.count_lost(count);
        let stored = self.b.label();
        self.b
            .push(Insn::st(Size::W, Reg::R10, KEY_SLOT, last as i32));
        self.b.ld_map_index(Reg::R1, layout::LOST_MAP);
        self.b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
        self.b
            .push(Insn::alu64_imm(AluOp::Add, Reg::R2, i32::from(KEY_SLOT)));
        self.b.call(Helper::MapLookupElem);
        self.b.jump_imm(JmpOp::Eq, Reg::R0, 0, stored);
        self.b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R10, error));
        self.b.push(Insn::stx(Size::DW, Reg::R0, 0, Reg::R1));
        self.b.bind(stored);
        self.b.push(Insn::ldx(Size::DW, Reg::R0, Reg::R10, error));
        self.b.bind(ok);
    }

    /// How USDT arguments in memory are read: faulting pages in where
    /// the program's other reads do.
    pub(super) fn arg_reader(&self) -> Helper {
        match self.faulting {
            Some(_) => Helper::CopyFromUser,
            None => Helper::ProbeReadUser,
        }
    }

    /// The index of the read site `what` of this program's probe
    /// instance, registered the first time: the same in every program of
    /// the instance, and in every compilation of the same units.
    fn read_site(&mut self, what: ReadWhat) -> u32 {
        let site = ReadSite {
            instance: self.unit.instance,
            what,
        };
        let sites = &mut self.shared.read_sites;
        match sites.iter().position(|s| *s == site) {
            Some(i) => i as u32,
            None => {
                sites.push(site);
                sites.len() as u32 - 1
            }
        }
    }
}
