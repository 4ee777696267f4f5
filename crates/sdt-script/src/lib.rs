//! The bpftrace language for user-space probes, compiled straight to eBPF.

#![forbid(unsafe_code)]

pub mod ast;
pub mod attach;
pub mod bind;
pub mod cdecl;
pub mod check;
pub mod codegen;
pub mod diag;
pub mod driver;
pub mod event;
pub mod format;
pub mod hir;
pub mod layout;
pub mod lexer;
pub mod parser;
pub mod run;
pub mod runtime;
pub mod types;
