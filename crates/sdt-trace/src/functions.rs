//! From `uprobe:PATH:FUNCTION` to the file offsets to attach at.
//!
//! A function is named by its symbol (a glob, over mangled and demangled
//! names), by a symbol and a byte offset into it, by an address, or by a
//! line of its source, whose address the file's DWARF line tables give.
//! Every offset is checked before anything attaches: it must be in an
//! executable segment and, unless it is a function's first byte, start an
//! instruction, decoded from the function's start. A uprobe in the middle
//! of an instruction would corrupt the traced program.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::Glob;
use sdt_elf::Function;

use crate::plan::{objects, suggest};
use crate::{Error, Scope};

/// Where in a file a uprobe goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FunctionTarget {
    /// A symbol, or a glob over symbols.
    Symbol(String),
    /// A byte offset into a function.
    Offset { symbol: String, offset: u64 },
    /// A virtual address in the file.
    Address(u64),
    /// The code of a source line, found in the file's DWARF line tables.
    SourceLine(sdt_types::SourceLine),
}

/// One place to put a uprobe.
#[derive(Clone, Debug)]
pub struct FunctionSite {
    /// The object as the user or the traced process names it.
    pub path: PathBuf,
    /// The path the kernel attaches to: `/proc/self/fd/N` of `attach_fd`.
    pub attach_path: PathBuf,
    /// The open file whose symbols were read; it stays open as long as
    /// the site, so that `attach_path` names it until the uprobe is on.
    pub attach_fd: Arc<OwnedFd>,
    /// The symbol as the user matched it: its raw name, or its demangled
    /// name when only that matched. For an address, the address.
    pub symbol: String,
    /// The function's name for `func`: demangled where possible.
    pub function: String,
    pub address: u64,
    /// How far the probe is into the function: 0 at its first instruction.
    pub offset: u64,
    /// The file offset of the instruction to probe.
    pub file_offset: u64,
    /// Whether the place is where `--unsafe` put it, unchecked: an
    /// address in a file that is not ELF (a flat binary), taken as the
    /// file offset, as bpftrace 0.26 takes it.
    pub unchecked: bool,
}

/// Finds the sites of `uprobe:TARGET:FUNCTION`; `text` is the attach
/// point, for messages.
pub fn plan_functions(
    target: Option<&str>,
    function: &FunctionTarget,
    text: &str,
    scope: &Scope,
) -> Result<Vec<FunctionSite>, Error> {
    // `archive.zip!/lib/x.so`: a program stored in a ZIP archive.
    let (target, member) = match target.and_then(|t| t.split_once("!/")) {
        Some((archive, member)) => (Some(archive), Some(member)),
        None => (target, None),
    };
    let objects = objects(
        target,
        text,
        scope,
        &mut HashMap::new(),
        &mut HashMap::new(),
    )?;
    let mut found = Found::default();
    let explicit = crate::plan::named_explicitly(target, scope);
    let searched: Vec<PathBuf> = objects.iter().map(|o| o.path.clone()).collect();
    for object in objects {
        let file = match (object.file, member) {
            (Ok(archive), Some(member)) => {
                let range =
                    sdt_elf::stored_member(archive.data(), member).map_err(|e| Error::BadSpec {
                        spec: text.to_string(),
                        why: format!("{}: {e}", object.path.display()),
                    })?;
                Ok(archive.member(range))
            }
            (file, _) => file,
        };
        // With --unsafe, an address in a file that is not ELF (code
        // copied out of a program, a JIT's cache) is its file offset.
        if let (Ok(flat), FunctionTarget::Address(address), true, true, None) =
            (&file, function, scope.allow_unsafe, explicit, member)
        {
            if sdt_elf::functions(flat.data()).is_err() {
                found.sites.push(flat_site(&object.path, flat, *address));
                continue;
            }
        }
        let Some((file, functions)) = open(file, &object.path, explicit)? else {
            continue;
        };
        let object = InObject {
            path: &object.path,
            file: &file,
            functions,
            text,
            scope,
        };
        match function {
            FunctionTarget::Symbol(pattern) => object.by_symbol(pattern, &mut found)?,
            FunctionTarget::Offset { symbol, offset } => {
                object.by_offset(symbol, *offset, &mut found)?
            }
            FunctionTarget::Address(a) => object.by_address(*a, a.to_string(), &mut found)?,
            FunctionTarget::SourceLine(at) => {
                let address = line_address(at, object.path, &file, &scope.debug_dirs, text)?;
                object.by_address(address, format!("{}:{}", at.file, at.line), &mut found)?
            }
        }
    }
    let Found {
        mut sites,
        candidates,
    } = found;
    // One uprobe per place, however many names point there.
    sites.sort_by(|a, b| (&a.attach_path, a.file_offset).cmp(&(&b.attach_path, b.file_offset)));
    sites.dedup_by(|a, b| a.attach_path == b.attach_path && a.file_offset == b.file_offset);
    if sites.is_empty() {
        let wanted = match function {
            FunctionTarget::Symbol(s) | FunctionTarget::Offset { symbol: s, .. } => s.clone(),
            FunctionTarget::Address(a) => a.to_string(),
            FunctionTarget::SourceLine(at) => format!("{}:{}", at.file, at.line),
        };
        return Err(Error::ProbeNotFound {
            spec: text.to_string(),
            searched,
            suggestions: suggest(&wanted, candidates),
        });
    }
    Ok(sites)
}

/// A uprobe at `address` of a file that is not ELF, taken as its file
/// offset: nothing can be checked there (`--unsafe`).
fn flat_site(path: &Path, file: &sdt_elf::ElfFile, address: u64) -> FunctionSite {
    FunctionSite {
        path: path.to_path_buf(),
        attach_path: PathBuf::from(format!("/proc/self/fd/{}", file.descriptor().as_raw_fd())),
        attach_fd: Arc::clone(file.descriptor()),
        symbol: format!("{address:#x}"),
        function: format!("{address:#x}"),
        address,
        offset: 0,
        file_offset: address,
        unchecked: true,
    }
}

/// The sites found so far, and the names that did not match, for a
/// suggestion when nothing does.
#[derive(Default)]
struct Found {
    sites: Vec<FunctionSite>,
    candidates: Vec<String>,
}

/// An object's file and functions; `None` for an object of a process
/// that cannot be read safely, skipped when the user did not name it.
fn open(
    file: Result<sdt_elf::ElfFile, sdt_elf::Error>,
    path: &Path,
    explicit: bool,
) -> Result<Option<(sdt_elf::ElfFile, Vec<Function>)>, Error> {
    let file = match file {
        Ok(file) => file,
        Err(_) if !explicit => return Ok(None),
        Err(e) => return Err(Error::Elf(e)),
    };
    match sdt_elf::functions(file.data()) {
        Ok(functions) => Ok(Some((file, functions))),
        Err(_) if !explicit => Ok(None),
        Err(source) => Err(Error::Elf(sdt_elf::Error::Elf {
            path: path.to_path_buf(),
            source,
        })),
    }
}

/// One object's functions, and the sites in them.
struct InObject<'a> {
    path: &'a Path,
    file: &'a sdt_elf::ElfFile,
    functions: Vec<Function>,
    /// The attach point, for messages.
    text: &'a str,
    scope: &'a Scope,
}

impl InObject<'_> {
    /// Every function whose name (or demangled name, with or without its
    /// parameters) matches the glob `pattern`.
    fn by_symbol(&self, pattern: &str, found: &mut Found) -> Result<(), Error> {
        let glob = Glob::new(pattern)
            .map(|g| g.compile_matcher())
            .map_err(|e| self.refuse(e.kind().to_string()))?;
        for f in &self.functions {
            let name = if glob.is_match(&f.name) {
                f.name.clone()
            } else if let Some(d) = f.demangled.as_deref().filter(|d| {
                glob.is_match(d) || d.split('(').next().is_some_and(|bare| glob.is_match(bare))
            }) {
                d.to_string()
            } else {
                found.candidates.push(f.display_name().to_string());
                continue;
            };
            found.sites.push(self.site(f, name, 0)?);
        }
        Ok(())
    }

    /// `offset` bytes into the function named `symbol`.
    fn by_offset(&self, symbol: &str, offset: u64, found: &mut Found) -> Result<(), Error> {
        let function = self.functions.iter().find(|f| {
            f.name == symbol
                || f.demangled
                    .as_deref()
                    .is_some_and(|d| d == symbol || d.split('(').next() == Some(symbol))
        });
        match function {
            Some(f) => found
                .sites
                .push(self.site(f, format!("{symbol}+{offset}"), offset)?),
            None => found
                .candidates
                .extend(self.functions.iter().map(|f| f.display_name().to_string())),
        }
        Ok(())
    }

    /// The function that holds `address`, which `name` names.
    fn by_address(&self, address: u64, name: String, found: &mut Found) -> Result<(), Error> {
        let function = self
            .functions
            .iter()
            .find(|f| (f.address..f.address + f.size.max(1)).contains(&address));
        let Some(f) = function else {
            return Err(Error::AddressOutside {
                path: self.path.to_path_buf(),
                address,
            });
        };
        found.sites.push(self.site(f, name, address - f.address)?);
        Ok(())
    }

    /// The site `offset` bytes into `f`, checked: in an executable
    /// segment, of a function whose size is known (unless `--unsafe`),
    /// and at the start of an instruction.
    fn site(&self, f: &Function, symbol: String, offset: u64) -> Result<FunctionSite, Error> {
        let start = f.file_offset.ok_or_else(|| {
            self.refuse(format!(
                "{} is not in an executable segment of {}",
                f.name,
                self.path.display()
            ))
        })?;
        if f.size == 0 && offset == 0 && !self.scope.allow_unsafe {
            return Err(Error::SizeUnknown {
                function: f.display_name().to_string(),
            });
        }
        if offset > 0 {
            self.check_boundary(f, start, offset)?;
        }
        let file = self.file;
        Ok(FunctionSite {
            path: self.path.to_path_buf(),
            attach_path: PathBuf::from(format!("/proc/self/fd/{}", file.descriptor().as_raw_fd())),
            attach_fd: Arc::clone(file.descriptor()),
            symbol,
            function: f.display_name().to_string(),
            address: f.address + offset,
            offset,
            file_offset: file.base() + start + offset,
            unchecked: false,
        })
    }

    /// Refuses an `offset` into `f` (whose code starts at file offset
    /// `start`) that is outside it or not the start of an instruction:
    /// a uprobe there would corrupt the traced program.
    fn check_boundary(&self, f: &Function, start: u64, offset: u64) -> Result<(), Error> {
        if f.size > 0 && offset >= f.size {
            return Err(Error::OffsetOutside {
                function: f.display_name().to_string(),
                size: f.size,
                offset,
            });
        }
        let code = usize::try_from(start)
            .ok()
            .and_then(|s| {
                self.file
                    .data()
                    .get(s..s + f.size.max(offset + 16) as usize)
            })
            .unwrap_or_default();
        match sdt_elf::is_instruction_boundary(code, offset) {
            Some(true) => Ok(()),
            Some(false) => Err(self.refuse(format!(
                "offset {offset} is inside an instruction of {}; a uprobe there would corrupt the program",
                f.display_name()
            ))),
            None => Err(self.refuse(format!(
                "cannot decode {} up to offset {offset}, so sdt cannot check that it starts an instruction",
                f.display_name()
            ))),
        }
    }

    fn refuse(&self, why: String) -> Error {
        Error::BadSpec {
            spec: self.text.to_string(),
            why,
        }
    }
}

/// The address of the code of source line `at` in `file` (the object
/// named `path`), from its DWARF.
fn line_address(
    at: &sdt_types::SourceLine,
    path: &std::path::Path,
    file: &sdt_elf::ElfFile,
    debug_dirs: &[PathBuf],
    text: &str,
) -> Result<u64, Error> {
    let refuse = |why: String| Error::BadSpec {
        spec: text.to_string(),
        why,
    };
    let opened = PathBuf::from(format!("/proc/self/fd/{}", file.descriptor().as_raw_fd()));
    let info = sdt_types::DebugInfo::open_with(&opened, debug_dirs).map_err(|e| {
        refuse(match e {
            sdt_types::Error::NoDebugInfo { looked, .. } => format!(
                "a source line needs the debug information of {}, and it has none (looked in {}); install its debug symbols (Debian: the -dbg or -dbgsym package) or build it with -g",
                path.display(),
                looked.join(", ")
            ),
            other => other.to_string(),
        })
    })?;
    let found = info.line_address(at).map_err(|e| refuse(e.to_string()))?;
    let line = match at.column {
        Some(c) => format!("{}:{c}", at.line),
        None => at.line.to_string(),
    };
    match found {
        sdt_types::LineLookup::Found { address, .. } => Ok(address),
        sdt_types::LineLookup::NoFile { close } => Err(refuse(format!(
            "no source file `{}` in the line tables of {}{}",
            at.file,
            path.display(),
            match close.first() {
                Some(c) => format!(" (did you mean `{c}`?)"),
                None => String::new(),
            }
        ))),
        sdt_types::LineLookup::Ambiguous(paths) => Err(refuse(format!(
            "`{}` names several source files of {}: {}; give more of its path",
            at.file,
            path.display(),
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        sdt_types::LineLookup::NoCode {
            path: source,
            before,
            after,
        } => {
            let nearest: Vec<String> = [before, after]
                .into_iter()
                .flatten()
                .map(|l| l.to_string())
                .collect();
            Err(refuse(format!(
                "line {line} of {} has no code{}",
                source.display(),
                if nearest.is_empty() {
                    String::new()
                } else {
                    format!(" (the nearest lines with code: {})", nearest.join(" and "))
                }
            )))
        }
    }
}
