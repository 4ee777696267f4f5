//! The fast path: probes that reach `sdt` through memory the program
//! shares with it, with no trap and no system call on a hit.
//!
//! # Why
//!
//! An enabled USDT probe enters the kernel at every hit: a trap, or the
//! kernel's call-based path, about a microsecond on the machines this
//! crate is tested on. For a service that fires a probe a hundred thousand
//! times a second and is traced all the time, that is a tenth of a core.
//! A probe of this crate can instead write its hit into a ring that `sdt`
//! reads, for a few tens of nanoseconds.
//!
//! # How
//!
//! * **The doorbell.** With this feature, every probe's semaphore comes with
//!   an *anchor*: a one-byte `nop` in a function nothing calls, and an ELF
//!   note (owner `sdt`, type 1) that names the anchor and the semaphore.
//!   `sdt` attaches a uprobe at the anchor with the semaphore as its
//!   reference counter: the kernel raises the semaphore in every process
//!   that maps the file, and no breakpoint is ever hit, because the anchor
//!   never runs. The probe's site, the 5-byte `nop` every other tracer
//!   attaches to, stays as it is.
//! * **The handshake.** A probe whose semaphore is raised connects, once per
//!   process, to the abstract socket `sdt-fastpath`, which a tracer that
//!   wants the fast path listens on before it rings (one tracer at a time;
//!   it checks, by `SO_PEERCRED`, that the process is one it traces). It checks the peer's
//!   credentials (`SO_PEERCRED`: root, or its own user: a peer that could
//!   read its memory anyway), creates the shared memory itself (a
//!   `memfd`), and sends it over the socket (`SCM_RIGHTS`). The tracer
//!   writes into it which probes it wants ([`layout`]), and answers.
//!   Nothing of the tracer's is ever mapped, and the tracer writes nothing
//!   but that shared memory.
//! * **A hit** takes a time stamp (`rdtsc`), looks its probe up (once per
//!   table change: the slot is cached beside the semaphore), and writes a
//!   record into its thread's ring: the arguments, and the bytes of string
//!   arguments (`&str`, `&[u8]`, `&CStr`), copied, since the tracer reads
//!   them later. Then it runs the probe's site as always, so that kernel
//!   tracers (bpftrace, perf, gdb, `sdt` for probes it does not take this
//!   way) see every hit.
//! * **Never blocking.** A full ring, or a thread with no ring left, counts
//!   the hit as lost, for the tracer to report. A tracer that stops
//!   looking at the rings (its heartbeat falls more than two seconds
//!   behind) is written to no more; a killed tracer detaches its anchors
//!   with its uprobes, the semaphores fall, and the probes cost what they
//!   cost untraced.
//!
//! Connecting fails fast (no one listens) when a semaphore is raised by a
//! kernel tracer only; the probe then tries again after twice as many hits
//! each time, up to a million.

//!
//! The layout of the shared memory ([`layout`]) is always compiled, for
//! the tracer; the writing of hits only with the `fastpath` feature.

pub mod layout;
#[cfg(feature = "fastpath")]
mod producer;

#[cfg(feature = "fastpath")]
pub use producer::{hit, Arg, Args};
