//! The engine under `sdt run` and `sdt trace`: what to attach to, and a
//! session that loads, attaches and reads generated programs.
//!
//! * [`ProbeSpec`] and [`plan()`] turn USDT probe specs into checked sites:
//!   a no-op at each site, its semaphore, and how to read each argument.
//!   Planning reads ELF files only and loads nothing into the kernel, so
//!   every refusal happens before anything is attached.
//! * [`plan_functions`] does the same for uprobes: symbols (demangled
//!   too), offsets checked to start an instruction.
//! * [`TraceFs`] finds tracepoints and their record formats, without
//!   mounting tracefs.
//! * [`Session`] creates maps, loads programs, attaches them (with
//!   semaphores raised by the kernel), runs the ones triggered by hand,
//!   and reads the ring buffer.
//!
//! The compiler that generates the programs is `sdt-script`; this crate
//! knows nothing of the language, and takes from `sdt-lang` only the
//! type of a tracepoint's field, which the checker types `args` by.

#![forbid(unsafe_code)]

mod cgroup;
mod follow;
mod functions;
mod plan;
mod session;
mod spec;
mod tracefs;

use std::path::PathBuf;

pub use cgroup::Cgroup;
pub use functions::{plan_functions, FunctionSite, FunctionTarget};
pub use plan::{
    glob_files, plan, plan_mapped, selects_later_objects, Plan, PlannedArg, PlannedSite, Scope,
    Unreadable,
};
pub use session::{mechanism, Attach, AttachSite, Options, ProgramSpec, Session};
pub use spec::ProbeSpec;
pub use tracefs::{parse_format, TraceFs, Tracepoint, TracepointField};

/// Everything that can stop a trace from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid probe `{spec}`: {why}")]
    BadSpec { spec: String, why: String },

    #[error(
        "no probe matches `{spec}` in {}{}",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        if suggestions.is_empty() { String::new() } else { format!("; did you mean {}?", suggestions.join(" or ")) }
    )]
    ProbeNotFound {
        spec: String,
        searched: Vec<PathBuf>,
        suggestions: Vec<String>,
    },

    #[error("no site can be traced:\n  {}", reasons.join("\n  "))]
    NoUsableSite { reasons: Vec<String> },

    #[error("address {address:#x} is not inside a known function of {}, so sdt cannot check that it starts an instruction", path.display())]
    AddressOutside { path: PathBuf, address: u64 },

    #[error("{function} is {size} bytes long; offset {offset} is past its end")]
    OffsetOutside {
        function: String,
        size: u64,
        offset: u64,
    },

    #[error("{function} has no size in the symbol table, so sdt cannot check that it is code; --unsafe attaches anyway")]
    SizeUnknown { function: String },

    #[error("invalid PID {0}")]
    BadPid(i32),

    #[error(transparent)]
    Elf(sdt_elf::Error),

    #[error(transparent)]
    Bpf(sdt_bpf::Error),

    #[error("{source}")]
    Load {
        program: String,
        source: sdt_bpf::Error,
    },

    #[error("{0}")]
    Tracefs(String),

    #[error("{0}")]
    Follow(String),

    #[error("cannot serve the fast path: {0}")]
    FastPath(std::io::Error),

    #[error("cannot attach {probe}")]
    PerfEvent {
        probe: String,
        source: sdt_bpf::Error,
    },

    #[error("{0}")]
    Cgroup(String),

    #[error("cannot attach to {}", path.display())]
    Attach {
        path: PathBuf,
        source: sdt_bpf::Error,
    },

    #[error("this kernel supports no way to attach BPF programs to uprobes (uprobe_multi, perf links or perf events)")]
    NoUprobes,

    #[error("this kernel cannot attach uprobes with {0}")]
    MechanismUnsupported(&'static str),
}
