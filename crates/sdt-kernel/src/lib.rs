//! What the running kernel says about itself, for scripts that look at
//! the kernel's side of a traced process: the C types of its BTF
//! ([`btf`]: `struct task_struct` for `curtask`, the types of casts and
//! tracepoint fields) and the addresses of its symbols ([`kallsyms`]:
//! `kaddr()`, `ksym()`, `kstack`).
//!
//! Both are read from files the kernel makes (`/sys/kernel/btf/*`,
//! `/proc/kallsyms`), never from headers: the machines sdt serves have
//! none. Both parsers take bytes and never panic on what they read, so
//! a corrupt or hostile file is an error, not a crash (the BTF parser has
//! a fuzz target). This crate knows nothing of the language: the binder
//! turns what it finds into the checker's types.

#![forbid(unsafe_code)]

pub mod btf;
pub mod kallsyms;

pub use btf::{Btf, BtfError, Kind, Member, TypeId};
pub use kallsyms::KernelSymbols;
