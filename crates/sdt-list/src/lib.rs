//! What probes there are, listed: [`probes`] for `sdt list` (the USDT
//! probes of files and processes, as text or JSON), [`points`] for
//! bpftrace's `-l` (the attach points a pattern or a program matches, one
//! `TYPE:TARGET:NAME` line each), and [`tplist`] for BCC's `tplist` (USDT
//! probes or kernel tracepoints, in BCC's shapes).
//!
//! Listing reads files and `/proc`, never the kernel's BPF interface, so
//! it needs no privileges beyond reading what it lists.

#![forbid(unsafe_code)]

pub mod points;
pub mod probes;
pub mod tplist;
