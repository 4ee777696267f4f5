//! The front end of the bpftrace language as sdt compiles it: script text
//! in, a checked and typed program ([`hir::Program`]) out.
//!
//! The passes, in order: [`lexer`] and [`parser`] make the syntax tree
//! ([`ast`]); [`attach`] reads attach points and [`cdecl`] the C
//! definitions a script holds; [`check`] resolves every name, infers and
//! checks every type, and lowers the tree to [`hir`], which is all the code
//! generator reads; [`macros`] expands macro uses in the tree before that.
//! [`config`] resolves a script's `config = { ... }` block and the
//! `BPFTRACE_*` environment, [`getopt`] named program parameters.
//! [`diag`] locates every error at its line and column;
//! [`format`] parses `printf` formats, [`types`] is the type system.
//!
//! What comes in: the text, the positional parameters, and what each
//! attach point resolved to ([`check::AttachInfo`]). What goes out: the
//! HIR, or diagnostics. This crate must never depend on the kernel, on
//! ELF or DWARF, or on any other sdt crate: the facts it needs about the
//! traced files (C types, symbols) reach it through [`check::Objects`],
//! which the binder implements. So the front end can be fuzzed, tested
//! and used without privileges or files.

#![forbid(unsafe_code)]

pub mod ast;
pub mod attach;
pub mod cdecl;
pub mod check;
pub mod config;
pub mod diag;
pub mod format;
pub mod getopt;
pub mod hir;
pub mod lexer;
pub mod macros;
pub mod parser;
pub mod perf;
mod rewrite;
pub mod types;
