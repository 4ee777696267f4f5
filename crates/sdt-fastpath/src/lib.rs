//! The tracer's side of the `sdt` crate's fast path: probes that write
//! their hits into memory the traced program shares, with no trap and no
//! system call (see `sdt::fastpath` for the program's side and why).
//!
//! * [`Listener`]: the abstract socket `sdt-fastpath`, on which a program
//!   whose probes `sdt` rang registers. One tracer at a time has it: a
//!   second one finds it taken and keeps to the kernel's path.
//! * [`Pending`] → [`Shared`]: a program that asked, checked (by the
//!   caller: is it a process this run traces?), its memory mapped, the
//!   probes wanted written into its table, and answered.
//! * [`Shared::drain`]: every hit written since the last look, as a
//!   [`Record`], in each thread's order.
//! * [`Clock`]: the time stamp counter the hits carry, as the kernel's
//!   `CLOCK_MONOTONIC`, so that they sort among the kernel's records.
//!
//! Nothing here trusts the program: every length and position read from
//! the shared memory is checked, and a ring that says something
//! impossible is emptied and counted, never followed.

#![deny(unsafe_code)]

mod clock;
mod listener;
mod maps;
#[allow(unsafe_code)] // maps the memory a program shares: see its doc
mod shared;

pub use clock::{monotonic_ns, Clock};
pub use listener::{Listener, Pending};
pub use maps::address_of;
pub use sdt::fastpath::layout;
pub use shared::{Entry, Record, Shared};
