//! The engine behind `sdt trace`: USDT probe specs in, decoded events out.
//!
//! The pipeline, one module each:
//!
//! 1. [`ProbeSpec`] parses `[TARGET:]PROVIDER:NAME` as the user wrote it.
//! 2. [`plan()`] finds the matching sites through `sdt-elf`, checks that each
//!    holds a no-op, and decides how to read each argument. It touches no
//!    kernel interface, so every refusal happens before anything is attached.
//! 3. [`Session::start`] generates one BPF program per argument shape
//!    (`codegen`), loads them and attaches them through `sdt-bpf`, with
//!    semaphores raised by the kernel.
//! 4. [`Session::poll`] turns ring-buffer records into [`Event`]s, and
//!    [`Session::finish`] detaches, drains and returns the exact counts.
//!
//! This crate sits between the discovery and kernel crates and the CLI so
//! that the CLI only parses arguments and prints, and so that a future
//! script engine can reuse the planning and per-site argument code.

mod codegen;
mod event;
mod plan;
mod session;
mod spec;

use std::path::PathBuf;

pub use codegen::{StringArg, STRING_LEN};
pub use event::{Event, Value};
pub use plan::{plan, Plan, PlannedArg, PlannedSite, Scope};
pub use session::{Options, Session, Summary, DEFAULT_BUFFER_SIZE, DELIVERY_INTERVAL};
pub use spec::ProbeSpec;

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

    #[error("invalid PID {0}")]
    BadPid(i32),

    #[error(transparent)]
    Elf(sdt_elf::Error),

    #[error(transparent)]
    Bpf(sdt_bpf::Error),

    #[error("{0}\nThis is a bug in sdt: it generated a program the kernel refuses. Please report it with the output of --dump.")]
    Load(sdt_bpf::Error),

    #[error("cannot attach to {}", path.display())]
    Attach {
        path: PathBuf,
        source: sdt_bpf::Error,
    },

    #[error("internal error generating BPF code (a bug in sdt): {0}")]
    Codegen(sdt_bpf::CodegenError),

    #[error("this kernel supports no way to attach BPF programs to uprobes (uprobe_multi, perf links or perf events)")]
    NoUprobes,

    #[error("this kernel cannot attach uprobes with {0}")]
    MechanismUnsupported(&'static str),

    #[error("too many sites to trace with one program per site")]
    TooManySites,
}
