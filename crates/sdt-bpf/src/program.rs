//! Loading programs, with the verifier's log on rejection.
//!
//! The first load runs without a log: logging makes verification slower
//! and most programs pass. Only when the kernel refuses do we load again
//! with `log_level = 1` and a buffer that grows until the whole log fits,
//! so that the error carries the verifier's explanation.
//!
//! Uprobe programs are `BPF_PROG_TYPE_KPROBE`; tracepoints, raw
//! tracepoints and perf events have types of their own ([`ProgramType`]).
//! Every program has license "GPL", because `probe_read_user`,
//! `probe_read_kernel` and `get_stackid` are GPL-only helpers.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::io::Errno;

use crate::disasm::Disassembler;
use crate::error::{Error, Result, VerifierLog};
use crate::insn::{Insn, PSEUDO_CALL};
use crate::sys;

/// The kind of a program, which decides its context and where it attaches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProgramType {
    /// `BPF_PROG_TYPE_KPROBE`, which is also the type of uprobe programs:
    /// the context is the traced task's `pt_regs`.
    #[default]
    Kprobe,
    /// `BPF_PROG_TYPE_TRACEPOINT`: the context is the tracepoint's record,
    /// laid out as its tracefs `format` file says.
    Tracepoint,
    /// `BPF_PROG_TYPE_RAW_TRACEPOINT`: the context is the tracepoint's
    /// arguments. Such programs can also be run from user space
    /// ([`Program::test_run`]).
    RawTracepoint,
    /// `BPF_PROG_TYPE_PERF_EVENT`: run when a perf event overflows; the
    /// context is `struct bpf_perf_event_data`, the interrupted task's
    /// `pt_regs` first.
    PerfEvent,
    /// `BPF_PROG_TYPE_SYSCALL`: attached to nothing, only run from user
    /// space ([`Program::run_with_context`]) with a context of bytes the
    /// caller gives, which the program may read and write. It is always
    /// loaded sleepable, and it runs in the calling task: the way to hand the kernel records
    /// that were made without entering it.
    Syscall,
}

impl ProgramType {
    fn raw(self) -> u32 {
        match self {
            ProgramType::Kprobe => 2,
            ProgramType::Tracepoint => 5,
            ProgramType::RawTracepoint => 17,
            ProgramType::PerfEvent => 7,
            ProgramType::Syscall => 31,
        }
    }
}

/// First log buffer size on a failed load.
const LOG_START: usize = 1 << 20;
/// Largest log buffer we grow to.
const LOG_MAX: usize = 256 << 20;

/// `expected_attach_type` of a program, fixed at load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttachType {
    /// Through a perf event (`BPF_PERF_EVENT`); the default for kprobe programs.
    PerfEvent,
    /// Through a uprobe_multi link (`BPF_TRACE_UPROBE_MULTI`).
    UprobeMulti,
}

impl AttachType {
    fn raw(self) -> u32 {
        match self {
            AttachType::PerfEvent => sys::ATTACH_PERF_EVENT,
            AttachType::UprobeMulti => sys::ATTACH_UPROBE_MULTI,
        }
    }
}

/// How to load a program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Shown by `bpftool prog`; at most 15 of `[A-Za-z0-9_.]` are kept.
    pub name: String,
    /// Needed for uprobe_multi attachment; see
    /// [`Mechanism::expected_attach_type`](crate::Mechanism::expected_attach_type).
    pub expected_attach_type: Option<AttachType>,
    pub prog_type: ProgramType,
    /// `BPF_F_SLEEPABLE`: the program may sleep, so it may fault in the
    /// traced process's pages ([`Helper::CopyFromUser`](crate::Helper),
    /// the `bpf_copy_from_user_str` kfunc). Only uprobe programs can be
    /// sleepable (see [`FaultingReads`](crate::FaultingReads)).
    pub sleepable: bool,
}

/// A loaded program, unloaded when dropped and no attachment holds it.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    name: String,
    expected_attach_type: Option<AttachType>,
}

/// What the kernel reports about a loaded program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgramInfo {
    /// The id that `bpftool prog dump xlated id N` takes.
    pub id: u32,
    /// Instructions the verifier walked (0 on kernels that do not say).
    pub verified_insns: u32,
    /// Slots after the kernel's rewrites.
    pub xlated_insns: u32,
}

impl Program {
    /// Loads a uprobe program (`BPF_PROG_TYPE_KPROBE`, license GPL).
    ///
    /// On rejection the error is [`Error::Verifier`] with the full log.
    pub fn load(insns: &[Insn], opts: &LoadOptions) -> Result<Program> {
        let name = if opts.name.is_empty() {
            "sdt"
        } else {
            &opts.name
        };
        let functions = crate::btf::func_info(insns)?;
        let req = sys::ProgLoad {
            prog_type: opts.prog_type.raw(),
            expected_attach_type: opts.expected_attach_type.map_or(0, AttachType::raw),
            insns,
            license: c"GPL",
            // The kernel loads syscall programs only as sleepable ones.
            flags: if opts.sleepable || opts.prog_type == ProgramType::Syscall {
                sys::F_SLEEPABLE
            } else {
                0
            },
            name,
            func_info: functions
                .as_ref()
                .map(|f| (f.btf.as_fd(), f.records.as_slice())),
        };
        let fd = match sys::prog_load(&req, None) {
            Ok(fd) => fd,
            Err(f) if Errno::from_io_error(&f.error) == Some(Errno::PERM) => {
                return Err(Error::sys("loading BPF program", f.error))
            }
            Err(_) => load_with_log(&req)?,
        };
        Ok(Program {
            fd,
            name: name.to_owned(),
            expected_attach_type: opts.expected_attach_type,
        })
    }

    /// Runs the program once in this task, with an empty context, and
    /// returns what it returned. Only raw tracepoint programs can be run
    /// this way.
    pub fn test_run(&self) -> Result<u32> {
        sys::prog_test_run(self.fd.as_fd()).map_err(|e| Error::sys("running BPF program", e))
    }

    /// Runs a [`ProgramType::Syscall`] program once in this task, with
    /// `context` as its context, and returns what it returned. What the
    /// program wrote into the context is in `context` afterwards. The
    /// verifier refuses a program that reads past the context it was
    /// checked for; the kernel refuses a run whose context is shorter
    /// than what the program reads.
    pub fn run_with_context(&self, context: &mut [u8]) -> Result<u32> {
        sys::prog_run_with_context(self.fd.as_fd(), context)
            .map_err(|e| Error::sys("running BPF program", e))
    }

    /// The name given at load time.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The attach type fixed at load time.
    pub fn expected_attach_type(&self) -> Option<AttachType> {
        self.expected_attach_type
    }

    /// The kernel's id and statistics for this program.
    pub fn info(&self) -> Result<ProgramInfo> {
        let i = sys::prog_info(self.fd.as_fd(), None)
            .map_err(|e| Error::sys("reading program info", e))?;
        Ok(ProgramInfo {
            id: i.id,
            verified_insns: i.verified_insns,
            xlated_insns: i.xlated_len / 8,
        })
    }

    /// The instructions as the kernel runs them, after its rewrites
    /// (inlined helpers, map addresses): what `bpftool prog dump xlated`
    /// shows. Map references read `map[id:N]`; helper calls hold kernel
    /// address deltas (see [`xlated_text`](Program::xlated_text)).
    pub fn xlated(&self) -> Result<Vec<Insn>> {
        let info = self.info()?;
        let mut insns = vec![Insn::default(); info.xlated_insns as usize];
        sys::prog_info(self.fd.as_fd(), Some(&mut insns))
            .map_err(|e| Error::sys("reading translated program", e))?;
        Ok(insns)
    }

    /// A listing of [`xlated`](Program::xlated), in bpftool's format, with
    /// helper calls named from `/proc/kallsyms` where it is readable.
    pub fn xlated_text(&self) -> Result<String> {
        let insns = self.xlated()?;
        let imms: HashSet<i32> = insns
            .iter()
            .filter(|i| i.code == 0x85 && i.src() != PSEUDO_CALL)
            .map(|i| i.imm)
            .collect();
        let names = kernel_call_names(&imms).unwrap_or_default();
        Ok(Disassembler::new()
            .xlated(true)
            .call_names(names)
            .listing(&insns))
    }
}

impl AsFd for Program {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Program {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Replaces each map reference's immediate, an index into `maps`, with
/// that map's file descriptor, so that a code generator can emit programs
/// before any map exists. Fails on an index with no map.
pub fn relocate_maps(insns: &mut [Insn], maps: &[&crate::Map]) -> Result<()> {
    for insn in insns.iter_mut().filter(|i| i.is_map_ref()) {
        let map = usize::try_from(insn.imm)
            .ok()
            .and_then(|i| maps.get(i))
            .ok_or_else(|| Error::Invalid(format!("map reference {} has no map", insn.imm)))?;
        insn.imm = map.as_raw_fd();
    }
    Ok(())
}

/// Loads again with a verifier log and turns the failure into an error
/// that carries it.
fn load_with_log(req: &sys::ProgLoad<'_>) -> Result<OwnedFd> {
    let mut size = LOG_START;
    loop {
        let mut buf = vec![0u8; size];
        let failure = match sys::prog_load(req, Some((&mut buf, 1))) {
            // Passing on the second try is rare but possible (e.g. EAGAIN).
            Ok(fd) => return Ok(fd),
            Err(f) => f,
        };
        if Errno::from_io_error(&failure.error) == Some(Errno::NOSPC) && size < LOG_MAX {
            size = (failure.log_true_size as usize + 1)
                .max(size * 4)
                .min(LOG_MAX);
            continue;
        }
        if Errno::from_io_error(&failure.error) == Some(Errno::PERM) {
            return Err(Error::sys("loading BPF program", failure.error));
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        return Err(Error::Verifier {
            name: req.name.to_owned(),
            error: failure.error,
            log: VerifierLog(String::from_utf8_lossy(&buf[..end]).into_owned()),
        });
    }
}

/// Maps helper-call immediates of a translated program to kernel symbol
/// names: the kernel stores `function address - __bpf_call_base` there.
fn kernel_call_names(imms: &HashSet<i32>) -> Option<HashMap<i32, String>> {
    if imms.is_empty() {
        return Some(HashMap::new());
    }
    let syms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let entries = || {
        syms.lines().filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let name = f.nth(1)?;
            Some((addr, name))
        })
    };
    let base = entries()
        .find(|(_, n)| *n == "__bpf_call_base")
        .map(|(a, _)| a)
        .filter(|a| *a != 0)?;
    let wanted: HashMap<u64, i32> = imms
        .iter()
        .map(|&imm| (base.wrapping_add(imm as i64 as u64), imm))
        .collect();
    Some(
        entries()
            .filter_map(|(a, n)| wanted.get(&a).map(|imm| (*imm, n.to_owned())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_skips_statistics() {
        let log = VerifierLog(
            "0: (bf) r6 = r1\n1: (79) r0 = *(u64 *)(r6 +4)\n\
             invalid bpf_context access off=4 size=8\n\
             processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0\n\n"
                .to_owned(),
        );
        assert!(log
            .summary()
            .ends_with("invalid bpf_context access off=4 size=8"));
        assert_eq!(
            log.last_lines(1),
            ["processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0"]
        );
        assert_eq!(
            VerifierLog::default().summary(),
            "(the verifier wrote no log)"
        );
    }
}
