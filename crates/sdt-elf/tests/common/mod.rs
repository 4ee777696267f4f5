//! Helpers shared by the integration tests.

pub mod elf_writer;
