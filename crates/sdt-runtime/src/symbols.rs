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
//!
//! System-wide (no `-p`, no `-c`) nothing names the processes to follow,
//! and a process (a PostgreSQL backend, a short command) is often gone by
//! the time its stacks print. Two things hold there:
//!
//! - Stack frames are recorded by the kernel as the build ID of their
//!   object and the offset in that file (`BPF_F_STACK_BUILD_ID`, see
//!   sdt-codegen's `Options::build_id_stacks`): that names the same code
//!   whichever process mapped the object and however long ago. The stack
//!   map holds whole stacks as the kernel walks them, so the choice costs
//!   no instruction in the programs; only the kernel's work at each stack
//!   (it reads each object's build ID note) and the map's size (32 bytes
//!   a frame rather than 8) grow. Under `-p` and `-c` the tree's mappings
//!   are recorded, so addresses stay as exact and cheaper.
//! - When a program records user addresses (`usym`, `ustack`), the
//!   kernel's records of every process's mappings are kept from the
//!   start ([`Symbols::watch_everything`]), with the files held open, and
//!   read at each step of the run; those of the oldest processes that
//!   exited are dropped past [`KEEP_EXITED`]. So `usym` of an address,
//!   and frames the kernel gave as addresses, are named after the process
//!   has gone.
//!
//! A frame recorded by build ID is named from the file with that build
//! ID, looked for in this order: the objects sdt attached to and the
//! libraries they need (found as the loader finds them); the files the
//! frame's process mapped (recorded, or read from `/proc` while it
//! lives); the libraries of the loader cache; and the objects that debug
//! packages link under `/usr/lib/debug/.build-id/` (a `.debug` file alone
//! has the object's addresses but not its file offsets, so it does not
//! do). An object found nowhere is said once, on standard error, with its
//! build ID; its frames show the build ID as their object, and the file
//! offset. The kernel gives a frame's address rather than its build ID
//! when it cannot read the object's note without sleeping (the note's
//! page is not in the page cache) or the process's memory map is busy;
//! such a frame is named through the process's mappings.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

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

/// One frame of a recorded stack, as the stack map holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawFrame {
    /// An address of the process (or of the kernel).
    Address(u64),
    /// An offset in the file with this build ID (zero-padded to 20
    /// bytes, as the kernel writes it).
    InObject { build_id: [u8; 20], offset: u64 },
}

/// A file found by its build ID.
#[derive(Clone)]
struct Object {
    file: std::sync::Arc<File>,
    path: String,
}

/// The debug files installed by build ID (`debuginfod` and distributions'
/// `-dbg` packages): `ab/cdef….debug` for build ID `abcdef…`.
const DEBUG_BY_BUILD_ID: &str = "/usr/lib/debug/.build-id";

/// With the mappings of every process on the machine recorded, how many
/// processes that have exited keep theirs (a few dozen open files and a
/// few kilobytes each at most; files are shared).
const KEEP_EXITED: usize = 4096;

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
    events: Vec<MappingEvents>,
    /// Each open file's build id, by `dev:inode`, once read.
    build_ids: HashMap<(u64, u64), Option<Vec<u8>>>,
    /// The kernel's symbols, read from `/proc/kallsyms` when a kernel
    /// address is first resolved (an empty table if it cannot be read).
    kernel: Option<sdt_kernel::KernelSymbols>,
    /// With records of every process on the machine, the processes that
    /// exited, oldest first: past [`KEEP_EXITED`] of them, the mappings
    /// of the oldest are forgotten, so that a long run stays bounded.
    exited: Option<std::collections::VecDeque<u32>>,
    /// Files by build ID, for frames recorded by build ID; `None` for a
    /// build ID looked for everywhere and not found.
    by_build_id: HashMap<[u8; 20], Option<Object>>,
    /// Files that frames may name by build ID (the objects attached to),
    /// not read yet; each is read with the libraries it needs.
    candidates: Vec<PathBuf>,
    /// Files already read for their build ID, by path and by `dev:inode`.
    indexed: HashSet<PathBuf>,
    indexed_files: HashSet<(u64, u64)>,
    /// Whether the loader cache's libraries have been read.
    cache_indexed: bool,
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
            events: Vec::new(),
            exited: None,
            build_ids: HashMap::new(),
            kernel: None,
            by_build_id: HashMap::new(),
            candidates: Vec::new(),
            indexed: HashSet::new(),
            indexed_files: HashSet::new(),
            cache_indexed: false,
        }
    }
}

impl Symbols {
    /// Follows the mappings of the processes `events` records.
    pub fn watch(&mut self, events: MappingEvents) {
        self.events.push(events);
    }

    /// Follows the mappings of every process on the machine, which
    /// `events` records; those of processes long gone are forgotten.
    pub fn watch_everything(&mut self, events: MappingEvents) {
        self.exited = Some(Default::default());
        self.watch(events);
    }

    /// Applies the kernel's records of mappings now, before its buffers
    /// fill: for records of every process on the machine, at each step
    /// of the run.
    pub(crate) fn keep_up(&mut self) {
        self.apply_events();
    }

    /// Applies the records the kernel wrote since the last call.
    fn apply_events(&mut self) {
        let drained: Vec<ProcessEvent> = self.events.iter_mut().flat_map(|e| e.drain()).collect();
        for event in drained {
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
                ProcessEvent::Exit { pid } => {
                    let Some(exited) = self.exited.as_mut() else {
                        continue;
                    };
                    exited.push_back(pid);
                    if exited.len() > KEEP_EXITED {
                        let oldest = exited.pop_front().unwrap_or_default();
                        self.processes.remove(&oldest);
                        self.seen.remove(&oldest);
                    }
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
        self.symbol_in(&file, file_offset, module)
    }

    /// The symbol at `file_offset` in `file`, which is `module`.
    fn symbol_in(&self, file: &File, file_offset: u64, module: String) -> Option<Symbol> {
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

    /// Files that stack frames recorded by build ID may be in: the
    /// objects attached to. They (and the libraries they need) are read
    /// for their build IDs only when a frame asks.
    pub fn add_objects<'a>(&mut self, paths: impl IntoIterator<Item = &'a Path>) {
        for path in paths {
            if !self.indexed.contains(path) && !self.candidates.iter().any(|c| c == path) {
                self.candidates.push(path.to_path_buf());
            }
        }
    }

    /// The frame at `offset` in the file with `build_id`, which process
    /// `pid` mapped: its symbol and file when found (see the module
    /// docs); else the build ID in place of the file, and the offset.
    pub fn object_frame(
        &mut self,
        pid: u32,
        build_id: &[u8; 20],
        offset: u64,
    ) -> sdt_output::Frame {
        let object = self.object(pid, build_id);
        let symbol = object
            .as_ref()
            .and_then(|o| self.symbol_in(&o.file, offset, o.path.clone()));
        sdt_output::Frame {
            addr: offset,
            module: Some(match &object {
                Some(o) => o.path.clone(),
                None => format!("build-id:{}", hex(build_id)),
            }),
            symbol: symbol.map(|s| (s.name, s.offset)),
            build_id: Some((trimmed(build_id).to_vec(), offset)),
        }
    }

    /// The file with `build_id`, looked for where the module docs say.
    fn object(&mut self, pid: u32, build_id: &[u8; 20]) -> Option<Object> {
        if let Some(known) = self.by_build_id.get(build_id) {
            return known.clone();
        }
        while let Some(path) = self.candidates.pop() {
            self.index_path(&path, true);
        }
        if !self.by_build_id.contains_key(build_id) {
            self.index_process(pid);
        }
        if !self.by_build_id.contains_key(build_id) && !self.cache_indexed {
            self.cache_indexed = true;
            for library in sdt_elf::cached_libraries() {
                self.index_path(&library, false);
            }
        }
        if !self.by_build_id.contains_key(build_id) {
            self.index_debug_link(build_id);
        }
        if !self.by_build_id.contains_key(build_id) {
            eprintln!(
                "sdt: stack frames in the object with build ID {} show the build ID and the file offset: \
                 no file with it is among the objects attached to, the libraries they need, \
                 the files process {pid} mapped, the loader cache's libraries, or {DEBUG_BY_BUILD_ID}",
                hex(build_id)
            );
            self.by_build_id.insert(*build_id, None);
        }
        self.by_build_id.get(build_id).cloned().flatten()
    }

    /// Reads the build ID of the file at `path` and, with `needed`, of
    /// the libraries it needs.
    fn index_path(&mut self, path: &Path, needed: bool) {
        if !self.indexed.insert(path.to_path_buf()) {
            return;
        }
        let Ok(file) = File::open(path) else {
            return;
        };
        let Some(elf) = self.index_file(file, path) else {
            return;
        };
        if needed {
            for library in sdt_elf::needed_libraries(path, elf.data(), None).unwrap_or_default() {
                self.index_path(&library, false);
            }
        }
    }

    /// Reads the build ID of an open file, which messages call `path`.
    fn index_file(&mut self, file: File, path: &Path) -> Option<sdt_elf::ElfFile> {
        let shared = std::sync::Arc::new(file.try_clone().ok()?);
        let elf = sdt_elf::ElfFile::from_file(file, path).ok()?;
        let id = elf.id();
        if !self.indexed_files.insert((id.device, id.inode)) {
            return Some(elf);
        }
        if let Some(build_id) = elf.build_id().and_then(|b| padded(&b)) {
            self.by_build_id.entry(build_id).or_insert(Some(Object {
                file: shared,
                path: path.display().to_string(),
            }));
        }
        Some(elf)
    }

    /// Reads the build IDs of the objects process `pid` maps, if it lives.
    fn index_process(&mut self, pid: u32) {
        self.apply_events();
        self.refresh(pid);
        let files: Vec<(std::sync::Arc<File>, String)> = self
            .processes
            .get(&pid)
            .map(|maps| {
                maps.iter()
                    .map(|m| (m.file.clone(), m.path.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (file, path) in files {
            if let Ok(copy) = file.try_clone() {
                self.index_file(copy, Path::new(&path));
            }
        }
    }

    /// Looks for the object of `build_id` where debug packages link it
    /// (`ab/cdef…`, beside `ab/cdef….debug`). A `.debug` file alone does
    /// not do: it keeps the object's addresses but not its file offsets,
    /// which are what the kernel recorded.
    fn index_debug_link(&mut self, build_id: &[u8; 20]) {
        let text = hex(build_id);
        if text.len() < 3 {
            return;
        }
        let path = PathBuf::from(format!("{DEBUG_BY_BUILD_ID}/{}/{}", &text[..2], &text[2..]));
        self.index_path(&path, false);
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

/// A build ID as the kernel writes it in a stack: zero-padded to 20 bytes.
fn padded(build_id: &[u8]) -> Option<[u8; 20]> {
    let mut out = [0u8; 20];
    out.get_mut(..build_id.len())?.copy_from_slice(build_id);
    Some(out)
}

/// A build ID without the kernel's zero padding (build IDs are 20 bytes
/// but for rare 16- and 8-byte ones).
fn trimmed(build_id: &[u8; 20]) -> &[u8] {
    let len = if build_id[16..].iter().all(|&b| b == 0) {
        if build_id[8..16].iter().all(|&b| b == 0) {
            8
        } else {
            16
        }
    } else {
        20
    };
    &build_id[..len]
}

/// A build ID in hex, without the kernel's zero padding.
fn hex(build_id: &[u8; 20]) -> String {
    trimmed(build_id)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
