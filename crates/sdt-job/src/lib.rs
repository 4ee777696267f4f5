//! The session layer: every front end's way from a script to a finished
//! run.
//!
//! `sdt run`, `sdt trace`, `sdt stackcount`, the language tools and
//! `sdt serve` differ in their arguments and in where the output goes,
//! never in how a script becomes a run. So each is three steps:
//!
//! 1. **Arguments → [`Request`]**: plain data, filled in by the front end:
//!    the script's [`Source`] with its parameters, includes and probe
//!    filter, the [`Target`] (`-p`, `-c`, everything), the limits, and the
//!    [`Voice`] messages speak in (sdt's own, or bpftrace's).
//! 2. **Request → [`Job`]**: [`Job::compile`] reads the includes, filters
//!    the probes, resolves the configuration (the script's `config`
//!    block, then `BPFTRACE_*`), binds named parameters, starts the
//!    target (a `-c` command held before its first instruction), and
//!    compiles. Every error is a [`Failure`], found before anything is
//!    attached, that each voice reports its own way.
//! 3. **Job → sink → [`Outcome`]**: [`Job::run`] loads the programs
//!    (mapping a verifier's rejection back to the script), attaches, runs
//!    until a stop signal, `exit()`, the end of the traced process or the
//!    front end's own reason, then END and the maps; it reports what was
//!    lost, finishes the sink and gives the exit status.
//!
//! A front end that needs more (the fleet's span blocks, `sdt trace`'s
//! summary record) hooks in at named points ([`Job::prepare`] and
//! [`Prepared::compile_text`], [`Hooks`]) rather than re-doing the
//! sequence. `--dump` is here too, so that a script means the same under
//! every front end.
//!
//! Why one layer: before it, four front ends each assembled the
//! compiler's options and wrote out load → run → losses → finish → exit
//! status themselves, and `#include` worked under `sdt run` but not under
//! `sdt serve`.

#![forbid(unsafe_code)]

mod diagnostics;
mod failure;
mod hints;
mod include;
pub mod info;
mod inspect;
mod job;
mod output;
mod prepare;
mod request;
mod target;

pub use diagnostics::{bpftrace_line, print_diagnostics};
pub use failure::Failure;
pub use job::{size_text, Hooks, Job, Outcome, Started, NOTIFY};
pub use output::{Buffering, Output};
pub use prepare::Prepared;
pub use request::{os_message, Named, Request, Source, Target, Voice};
pub use target::close_all;

/// What front ends read of a compiled program: its maps, its script and
/// the types of its values, for naming metrics and reading spans.
pub mod program {
    pub use sdt_bind::Target as BoundTarget;
    pub use sdt_lang::ast::{Block, Expr, ExprKind, MapRef, Script, StmtKind};
    pub use sdt_lang::check::DEFAULT_STRLEN;
    pub use sdt_lang::diag::{Diagnostic, Diagnostics, Span};
    pub use sdt_lang::hir::{MapDecl, StringArg};
    pub use sdt_lang::parser::parse;
    pub use sdt_lang::types::{Agg, Ty, INT64, UINT64};
    pub use sdt_script::{compile_offline, Compilation};
}

/// How programs attach, for a front end that lets the user choose.
pub use sdt_bpf::Mechanism;
/// What a `-c` command runs in the end, for a front end that must know
/// (a language tool finding the runtime).
pub use sdt_proc::launch;
/// The stop signals, for a front end that waits on them itself (`sdt serve`).
pub use sdt_proc::Signals;
/// What a running job hands out: its maps, read from another thread.
pub use sdt_runtime::scrape::MapReader;
/// Sdt's own maps (what a span pragma adds) start with this.
pub use sdt_runtime::INTERNAL_MAP_PREFIX;
/// A probe as `sdt trace` takes it: `[TARGET:]PROVIDER:NAME`.
pub use sdt_trace::ProbeSpec;

/// The kernel mechanism programs attach with: `wanted` if this kernel
/// has it, else the best one it has.
pub fn mechanism(wanted: Option<Mechanism>) -> anyhow::Result<Mechanism> {
    Ok(sdt_trace::mechanism(wanted)?)
}
