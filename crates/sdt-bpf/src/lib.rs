//! The kernel interface of `sdt`: eBPF programs for user-space probes,
//! without clang, LLVM or libbpf.
//!
//! The pieces, in the order a tracer uses them:
//!
//! * [`Insn`], [`Builder`]: instructions and a builder with labels; the
//!   [`arg`] module emits the code that reads a USDT argument, and
//!   [`x86_64`] knows where registers live in `pt_regs`.
//! * [`Map`], [`RingBuf`]: maps, read and written from userspace; the
//!   ring buffer that carries events out of the kernel.
//! * [`Program::load`]: loading, with the verifier's log on rejection;
//!   [`FaultingReads::detect`]: whether programs may fault the traced
//!   process's pages in (sleepable uprobes, the kfunc that reads strings,
//!   found by name in the kernel's BTF with [`kernel_func_id`]).
//! * [`Features::detect`], [`UprobeAttach::attach`]: finding out what the
//!   kernel supports and attaching to probe sites; the returned
//!   [`Attachment`] detaches on drop. [`PerfEvent::attach`] attaches to a
//!   perf event on every CPU (`profile`, `software`, `hardware`).
//! * [`disasm`]: listings in the kernel's own format, for `--dump`.
//! * [`MappingEvents`]: where traced processes map their files, recorded
//!   by the kernel, for symbolizing addresses after a process is gone.
//!
//! All `unsafe` code is in one private module, `sys`; the crate denies it
//! everywhere else. The kernel interface cannot do without it: `bpf(2)`
//! and `perf_event_open(2)` take argument structures that hold pointers
//! into our memory, and a ring buffer is memory the kernel writes. `sys`
//! wraps each call into a function over owned or borrowed safe types:
//! file descriptors are [`OwnedFd`](std::os::fd::OwnedFd)s and mappings
//! are unmapped on drop, so nothing outlives the value that owns it. The
//! calls come from `rustix` (epoll, `mmap`, `ioctl`, the page size, and
//! errno values throughout), but for `bpf(2)` and `perf_event_open(2)`,
//! which rustix does not wrap and `libc::syscall` makes. A pidfd to watch
//! comes from `sdt-proc`.
//!
//! A minimal program that sends each probe hit's `pid_tgid` to a ring
//! buffer:
//!
//! ```no_run
//! use sdt_bpf::{
//!     Builder, Features, Helper, Insn, JmpOp, LoadOptions, Program, Reg::*, RingBuf,
//!     Size, UprobeAttach, UprobeSite,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ring = RingBuf::new(1 << 16)?;
//! let mut b = Builder::new();
//! let out = b.label();
//! b.ld_map(R1, ring.map());
//! b.push(Insn::mov64_imm(R2, 8)).push(Insn::mov64_imm(R3, 0));
//! b.call(Helper::RingbufReserve);
//! b.jump_imm(JmpOp::Eq, R0, 0, out);
//! b.push(Insn::mov64_reg(R7, R0));
//! b.call(Helper::GetCurrentPidTgid);
//! b.push(Insn::stx(Size::DW, R7, 0, R0));
//! b.push(Insn::mov64_reg(R1, R7)).push(Insn::mov64_imm(R2, 0));
//! b.call(Helper::RingbufSubmit);
//! b.bind(out);
//! b.push(Insn::mov64_imm(R0, 0)).exit();
//!
//! let mechanism = Features::detect()?.best_mechanism().ok_or("no uprobe support")?;
//! let opts = LoadOptions {
//!     name: "hits".into(),
//!     expected_attach_type: mechanism.expected_attach_type(),
//!     ..LoadOptions::default()
//! };
//! let program = Program::load(&b.finish()?, &opts)?;
//! let request = UprobeAttach {
//!     path: "/usr/bin/python3".into(),
//!     sites: vec![UprobeSite::new(0x1234)],
//!     pid: None,
//!     retprobe: false,
//! };
//! let _attached = request.attach(&program, mechanism)?;
//! # let mut ring = ring;
//! ring.poll(None, |record| println!("{:?}", record))?;
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_code)]

pub mod arg;
mod btf;
mod builder;
pub mod disasm;
mod error;
mod faulting;
mod insn;
mod kernel_btf;
pub mod map;
mod mappings;
mod perf_event;
mod program;
mod ringbuf;
#[allow(unsafe_code)] // the kernel interface; see the crate doc
mod sys;
mod tracepoint;
mod uprobe;
pub mod x86_64;

pub use builder::{Builder, Label};
pub use error::{CodegenError, Error, Result, VerifierLog};
pub use faulting::{FaultingReads, COPY_FROM_USER_STR, TASK_STORAGE_CREATE};
pub use insn::{
    AluOp, Helper, Insn, JmpOp, Reg, Size, PSEUDO_CALL, PSEUDO_FUNC, PSEUDO_KFUNC_CALL,
    PSEUDO_MAP_FD, STACKID_USER,
};
pub use kernel_btf::{func_id, kernel_func_id, VMLINUX_BTF};
pub use map::{
    online_cpus, possible_cpus, Map, MapSpec, MapType, PerCpuValues, F_NO_PREALLOC,
    F_STACK_BUILD_ID, STACK_BUILD_ID_FRAME,
};
pub use mappings::{Mapped, MappingEvents, ProcessEvent};
pub use perf_event::{PerfEvent, PerfType, Sampling};
pub use program::{relocate_maps, AttachType, LoadOptions, Program, ProgramInfo, ProgramType};
pub use ringbuf::{Poll, RingBuf, QUERY_AVAIL_DATA, SUBMIT_FORCE_WAKEUP, SUBMIT_NO_WAKEUP};
pub use tracepoint::{attach_raw_tracepoint, attach_tracepoint};
pub use uprobe::{Attachment, Features, Mechanism, UprobeAttach, UprobePmu, UprobeSite};
