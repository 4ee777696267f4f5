//! Turning addresses of traced processes into symbol names (`usym`,
//! `ustack`), also after those processes have exited.
//!
//! bpftrace resolves symbols through the live process when it prints, so a
//! map printed after a `-c` command has ended shows bare addresses. Here
//! each process's executable mappings are remembered, with the mapped
//! files held open. For a traced process (tree) they come from the
//! kernel's own records of every `mmap`, `fork` and `exec`
//! ([`sdt_bpf::MappingEvents`]), so nothing depends on reading
//! `/proc/PID/maps` before the process is gone; other processes, and
//! anything the records missed, are read from `/proc/PID/maps` when an
//! address is not found. The symbol lookup itself, with demangling of C++
//! and Rust names, is `blazesym`'s. Kernel addresses (`ksym`, `kstack`)
//! are looked up in `/proc/kallsyms`, read once when the first is.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use sdt_bpf::{Mapped, MappingEvents, ProcessEvent};

use super::value::Symbol;

/// One executable mapping of a process.
#[derive(Clone)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// The mapped file, open, so that it can be read after the process
    /// has gone.
    file: std::sync::Arc<File>,
    /// The path as the process names it, for `ustack(perf)`.
    path: String,
}

/// Symbolizes addresses of processes.
pub struct Symbols {
    symbolizer: Symbolizer,
    processes: HashMap<u32, Vec<Mapping>>,
    /// The text of each process's maps when last read, to skip re-reading
    /// what has not changed.
    seen: HashMap<u32, String>,
    /// Open files by `dev:inode`, shared between processes.
    files: HashMap<(u64, u64), std::sync::Arc<File>>,
    /// The kernel's records of the traced processes' mappings.
    events: Option<MappingEvents>,
    /// Each open file's build id, by `dev:inode`, once read.
    build_ids: HashMap<(u64, u64), Option<Vec<u8>>>,
    /// The kernel's symbols, read from `/proc/kallsyms` when a kernel
    /// address is first resolved (an empty table if it cannot be read).
    kernel: Option<sdt_kernel::KernelSymbols>,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols {
            // blazesym would also "demangle" plain C names as C++ types
            // (`c` as `char`); sdt-elf demangles only mangled names.
            symbolizer: Symbolizer::builder().enable_demangling(false).build(),
            processes: HashMap::new(),
            seen: HashMap::new(),
            files: HashMap::new(),
            events: None,
            build_ids: HashMap::new(),
            kernel: None,
        }
    }
}

impl Symbols {
    /// Follows the mappings of the processes `events` records.
    pub fn watch(&mut self, events: MappingEvents) {
        self.events = Some(events);
    }

    /// Applies the records the kernel wrote since the last call.
    fn apply_events(&mut self) {
        let Some(events) = self.events.as_mut() else {
            return;
        };
        for event in events.drain() {
            match event {
                ProcessEvent::Map(mapped) => self.mapped(mapped),
                ProcessEvent::Fork { pid, parent } => {
                    let inherited = self.processes.get(&parent).cloned().unwrap_or_default();
                    self.processes.insert(pid, inherited);
                    self.seen.remove(&pid);
                }
                ProcessEvent::Exec { pid } => {
                    self.processes.insert(pid, Vec::new());
                    self.seen.remove(&pid);
                }
                // What was dropped is read from /proc on a miss.
                ProcessEvent::Lost(_) => {}
            }
        }
    }

    /// A new executable mapping replaces whatever it overlaps.
    fn mapped(&mut self, m: Mapped) {
        if !m.path.starts_with('/') {
            return;
        }
        let end = m.start.saturating_add(m.len);
        let range = format!("{:x}-{end:x}", m.start);
        let Some(file) = self.open(m.pid, &range, &m.path, m.inode.unwrap_or(0)) else {
            return;
        };
        let mappings = self.processes.entry(m.pid).or_default();
        mappings.retain(|old| old.end <= m.start || old.start >= end);
        mappings.push(Mapping {
            start: m.start,
            end,
            offset: m.pgoff,
            file,
            path: m.path.trim_end_matches(" (deleted)").to_string(),
        });
        self.seen.remove(&m.pid);
    }

    /// Reads (again) the mappings of `pid`; keeps what is known if the
    /// process is gone.
    pub fn refresh(&mut self, pid: u32) {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        // A process that has exited (a zombie) has no mappings left: what
        // was seen before is what its addresses mean.
        if maps.is_empty() || self.seen.get(&pid) == Some(&maps) {
            return;
        }
        let mut mappings = Vec::new();
        for line in maps.lines() {
            let mut fields = line.split_whitespace();
            let (Some(range), Some(perms), Some(offset), Some(_dev), Some(inode)) = (
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
            ) else {
                continue;
            };
            let path: String = fields.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || !path.starts_with('/') {
                continue;
            }
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(offset)) = (
                u64::from_str_radix(start, 16),
                u64::from_str_radix(end, 16),
                u64::from_str_radix(offset, 16),
            ) else {
                continue;
            };
            let inode: u64 = inode.parse().unwrap_or(0);
            let file = match self.open(pid, range, &path, inode) {
                Some(f) => f,
                None => continue,
            };
            mappings.push(Mapping {
                start,
                end,
                offset,
                file,
                path: path.trim_end_matches(" (deleted)").to_string(),
            });
        }
        self.processes.insert(pid, mappings);
        self.seen.insert(pid, maps);
    }

    /// Opens the file behind a mapping: the mapped file itself where
    /// `/proc/PID/map_files` allows, else by its path in the process's
    /// root, else (the process has gone) by its path here; a file whose
    /// inode is not the mapped one is refused.
    fn open(
        &mut self,
        pid: u32,
        range: &str,
        path: &str,
        inode: u64,
    ) -> Option<std::sync::Arc<File>> {
        use std::os::unix::fs::MetadataExt;
        let candidates = [
            PathBuf::from(format!("/proc/{pid}/map_files/{range}")),
            PathBuf::from(format!(
                "/proc/{pid}/root{}",
                path.trim_end_matches(" (deleted)")
            )),
            PathBuf::from(path),
        ];
        for candidate in candidates {
            let Ok(file) = File::open(&candidate) else {
                continue;
            };
            let Ok(meta) = file.metadata() else {
                continue;
            };
            if inode != 0 && meta.ino() != inode {
                continue;
            }
            let key = (meta.dev(), meta.ino());
            return Some(
                self.files
                    .entry(key)
                    .or_insert_with(|| std::sync::Arc::new(file))
                    .clone(),
            );
        }
        None
    }

    /// The symbol at `addr` in `pid`, with the offset into it.
    pub fn symbol(&mut self, pid: u32, addr: u64) -> Option<Symbol> {
        if self.find(pid, addr).is_none() {
            self.apply_events();
        }
        if self.find(pid, addr).is_none() {
            self.refresh(pid);
        }
        let (file, file_offset, module) = self.find(pid, addr)?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        // The symbol tables first, as other tracers do; debug information
        // only where they have nothing (a stripped file whose debug file
        // is installed). Debug information alone would misplace a function
        // split into hot and cold parts: its start address reads as 0.
        [false, true].into_iter().find_map(|debug_syms| {
            let mut elf = Elf::new(path.clone());
            elf.debug_syms = debug_syms;
            let found = self
                .symbolizer
                .symbolize_single(&Source::Elf(elf), Input::FileOffset(file_offset))
                .ok()?;
            match found {
                Symbolized::Sym(sym) => Some(Symbol {
                    name: sdt_elf::demangle(&sym.name).unwrap_or_else(|| sym.name.into_owned()),
                    offset: sym.offset as u64,
                    module: module.clone(),
                }),
                _ => None,
            }
        })
    }

    /// The build id of the object mapped at `addr` in `pid`, and the
    /// address's offset in its file (after [`symbol`](Symbols::symbol)
    /// has looked for it): what `ustack(build_id)` prints, for
    /// symbolizing elsewhere.
    pub fn build_id(&mut self, pid: u32, addr: u64) -> Option<(Vec<u8>, u64)> {
        use std::os::unix::fs::MetadataExt;
        let (file, file_offset, _) = self.find(pid, addr)?;
        let meta = file.metadata().ok()?;
        let id = self
            .build_ids
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| {
                let copy = file.try_clone().ok()?;
                sdt_elf::ElfFile::from_file(copy, "mapped object")
                    .ok()?
                    .build_id()
            })
            .clone()?;
        Some((id, file_offset))
    }

    /// The kernel symbol `addr` is in, with the offset into it (`ksym`,
    /// `kstack`).
    pub fn kernel_symbol(&mut self, addr: u64) -> Option<Symbol> {
        let kernel = self
            .kernel
            .get_or_insert_with(|| sdt_kernel::KernelSymbols::load().unwrap_or_default());
        let found = kernel.symbol(addr)?;
        Some(Symbol {
            name: found.name.to_string(),
            offset: found.offset,
            module: "[kernel.kallsyms]".to_string(),
        })
    }

    /// The path of the object mapped at `addr` in `pid` (after
    /// [`symbol`](Symbols::symbol) has looked for it).
    pub fn module(&mut self, pid: u32, addr: u64) -> Option<String> {
        self.find(pid, addr).map(|(_, _, path)| path)
    }

    fn find(&self, pid: u32, addr: u64) -> Option<(std::sync::Arc<File>, u64, String)> {
        let m = self
            .processes
            .get(&pid)?
            .iter()
            .find(|m| (m.start..m.end).contains(&addr))?;
        Some((m.file.clone(), addr - m.start + m.offset, m.path.clone()))
    }
}
