//! Discovery of USDT probes: ELF bytes in, probes out.
//!
//! A USDT probe is a no-op instruction in a program plus an ELF note that
//! says where it is, what it is called and where its arguments are. This
//! crate reads those notes and everything a tracer or a listing needs with
//! them; it knows nothing of BPF.
//!
//! * [`ElfFile::open`] maps a file and [`ElfFile::probes`] (or [`parse`] on
//!   bytes) returns its [`Probes`]: every `provider:name` in first-seen
//!   order, each with all of its [`Site`]s, and with file offsets ready for
//!   `perf_event_open` and the kernel's semaphore counter.
//! * [`Site::args`] parses a site's argument specs into [`Arg`]s with a
//!   structured [`Location`] for x86-64, i386, aarch64, riscv64, s390x and
//!   ppc64.
//! * [`ElfFile::symbol_memory`] finds the variable that an argument such
//!   as `8+table(%rip)` ([`Location::Symbol`]) names in the file's symbol
//!   table.
//! * [`classify`] checks that a site holds a no-op before anything attaches
//!   there.
//! * [`mapped_objects`] lists the ELF objects of a running process, each
//!   opened as the very file the process maps (never by a name the process
//!   could have changed), and [`resolve`] finds a program or library by
//!   name; [`needed_libraries`] finds the libraries a program links, as
//!   the dynamic loader would.
//! * [`ProbePattern`] selects probes with a `provider:name` glob.
//! * [`functions`] lists function symbols for uprobes, demangled, and
//!   [`is_instruction_boundary`] checks an offset into one.
//!
//! Nothing in here panics on hostile input: malformed files are errors,
//! malformed notes are skipped and reported, malformed arguments are
//! described as unsupported.
//!
//! `unsafe` is denied but in one place: [`ElfFile::open`] maps the file
//! (`memmap2`), which Rust calls unsafe because another process could
//! truncate the file under the mapping and make reads fault. Listing the
//! probes of a 30 MB library does not justify copying it. Other system
//! calls (opening files under `/proc`) come from `rustix`.
//!
//! ```no_run
//! let file = sdt_elf::ElfFile::open("/usr/bin/python3")?;
//! for probe in file.probes()?.iter() {
//!     for site in probe.sites {
//!         println!("{}:{} at {:#x}", probe.provider, probe.name, site.address);
//!         for arg in site.args() {
//!             println!("  {:?} {:?}", arg.size, arg.location);
//!         }
//!     }
//! }
//! # Ok::<(), sdt_elf::Error>(())
//! ```

#![deny(unsafe_code)]

mod arch;
mod args;
mod error;
mod file;
mod insn;
mod needed;
mod pattern;
mod probes;
mod process;
mod resolve;
mod symbols;
mod zip;

pub use arch::Arch;
pub use args::{
    args, parse_operand, Arg, Args, Location, Memory, Register, SymbolMemory, Unsupported,
};
pub use error::{ElfError, Error, SymbolError};
pub use file::{ElfFile, FileId};
pub use insn::{classify, site_code, SiteInstruction, MAX_INSTRUCTION_LEN};
pub use needed::{dependencies, needed_libraries, Dependencies};
pub use pattern::ProbePattern;
pub use probes::{parse, Anchor, NoteAddresses, Probe, Probes, Semaphore, Site, SkippedNote};
pub use process::{mapped_objects, MappedObject};
pub use resolve::{
    cached_libraries, find_in_path, find_library, find_soname, library_dirs, resolve, LD_SO_CACHE,
};
pub use symbols::{data_symbols, demangle, functions, is_instruction_boundary, Function};
pub use zip::{stored_member, ZipError};
