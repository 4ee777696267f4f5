//! Reads of the traced process's memory that fault its pages in, and
//! whether this kernel can do them.
//!
//! A BPF program that may not sleep cannot take a page fault:
//! `bpf_probe_read_user*` fail with -EFAULT (-14) on a page the process
//! has never touched, e.g. the `.rodata` page of a string literal that it
//! passes to a probe but never reads itself. A *sleepable* uprobe program
//! (`BPF_F_SLEEPABLE`) may call `bpf_copy_from_user` (a helper, Linux
//! 5.10) and the `bpf_copy_from_user_str` kfunc (Linux 6.12), which
//! fault the page in as the process itself would. Sleepable uprobe
//! programs came with Linux 6.0 (perf uprobes) and 6.6 (uprobe_multi).
//!
//! sdt reads the traced process's memory that way where all of this is
//! there, and [`FaultingReads::detect`] finds out by loading a tiny
//! program that uses each piece (a task storage map, the kfunc, the
//! helper), not by the kernel's version or `bpftool feature probe`,
//! which misreports helpers on some kernels. What it finds is cached for
//! the life of the process.
//!
//! A sleepable program runs with migration disabled but may be switched
//! out while a fault waits for the page; another traced thread may then
//! run on the same CPU, so memory that must survive a read cannot be
//! per-CPU: it is per thread, a task storage map
//! ([`MapType::TaskStorage`]). The probe creates one too.

use std::sync::OnceLock;

use crate::insn::{Helper, Insn, Reg, Size};
use crate::map::{Map, MapSpec, MapType, F_NO_PREALLOC};
use crate::program::{LoadOptions, Program};
use crate::{Builder, Error};

/// The name of the kfunc that reads a string, faulting pages in.
pub const COPY_FROM_USER_STR: &str = "bpf_copy_from_user_str";

/// What a sleepable program needs to read a string: the kfunc's BTF id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultingReads {
    /// The BTF id of `bpf_copy_from_user_str` in this kernel.
    pub copy_from_user_str: u32,
}

impl FaultingReads {
    /// Whether this kernel runs sleepable uprobe programs that read with
    /// `bpf_copy_from_user_str` and `bpf_copy_from_user` and keep memory
    /// in a task storage map; if not, why, in a sentence that fits after
    /// "because". Needs the privileges loading needs (else the answer is
    /// no, with the kernel's word).
    pub fn detect() -> Result<FaultingReads, String> {
        static FOUND: OnceLock<Result<FaultingReads, String>> = OnceLock::new();
        FOUND.get_or_init(probe).clone()
    }
}

fn probe() -> Result<FaultingReads, String> {
    let id = match crate::kernel_btf::kernel_func_id(COPY_FROM_USER_STR) {
        Ok(Some(id)) => id,
        Ok(None) => {
            return Err(format!(
                "this kernel has no {COPY_FROM_USER_STR} kfunc in its BTF (Linux 6.12 and later have it)"
            ))
        }
        Err(e) => return Err(e.to_string()),
    };
    let storage = Map::create(
        &MapSpec::new(MapType::TaskStorage, 4, 8, 0)
            .flags(F_NO_PREALLOC)
            .name("sdt_probe"),
    )
    .map_err(|e| format!("this kernel cannot create a task storage map ({e})"))?;
    let insns = probe_program(&storage, id).map_err(|e| e.to_string())?;
    let options = LoadOptions {
        name: "sdt_faulting".into(),
        sleepable: true,
        ..LoadOptions::default()
    };
    match Program::load(&insns, &options) {
        Ok(_) => Ok(FaultingReads {
            copy_from_user_str: id,
        }),
        Err(Error::Verifier { log, .. }) => Err(format!(
            "this kernel refused a sleepable uprobe program that uses them: {}",
            log.summary()
        )),
        Err(e) => Err(format!(
            "this kernel refused a sleepable uprobe program ({e})"
        )),
    }
}

/// A program that uses every piece: the current thread's storage, the
/// string kfunc into it, the helper into the stack.
fn probe_program(storage: &Map, kfunc: u32) -> crate::Result<Vec<Insn>> {
    use Reg::*;
    let mut b = Builder::new();
    let out = b.label();
    b.call(Helper::GetCurrentTaskBtf);
    b.push(Insn::mov64_reg(R2, R0));
    b.ld_map(R1, storage);
    b.push(Insn::mov64_imm(R3, 0));
    b.push(Insn::mov64_imm(R4, TASK_STORAGE_CREATE));
    b.call(Helper::TaskStorageGet);
    b.jump_imm(crate::JmpOp::Eq, R0, 0, out);
    b.push(Insn::mov64_reg(R1, R0));
    b.push(Insn::mov64_imm(R2, 8));
    b.push(Insn::mov64_imm(R3, 0));
    b.push(Insn::mov64_imm(R4, 0));
    b.push(Insn::call_kfunc(kfunc));
    b.push(Insn::st(Size::DW, R10, -8, 0));
    b.push(Insn::mov64_reg(R1, R10));
    b.push(Insn::alu64_imm(crate::AluOp::Add, R1, -8));
    b.push(Insn::mov64_imm(R2, 8));
    b.push(Insn::mov64_imm(R3, 0));
    b.call(Helper::CopyFromUser);
    b.bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    Ok(b.finish()?)
}

/// `BPF_LOCAL_STORAGE_GET_F_CREATE`: make the thread's value, zeroed, if
/// it has none.
pub const TASK_STORAGE_CREATE: i32 = 1;
