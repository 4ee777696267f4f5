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
use std::path::PathBuf;
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
}

/// Finds the sites of `uprobe:TARGET:FUNCTION`; `text` is the attach
/// point, for messages.
pub fn plan_functions(
    target: Option<&str>,
    function: &FunctionTarget,
    text: &str,
    scope: &Scope,
) -> Result<Vec<FunctionSite>, Error> {
    let objects = objects(target, text, scope, &mut None, &mut HashMap::new())?;
    let mut sites = Vec::new();
    let mut candidates = Vec::new();
    let explicit = crate::plan::named_explicitly(target, scope);
    let searched: Vec<PathBuf> = objects.iter().map(|o| o.path.clone()).collect();
    for object in objects {
        let file = match object.file {
            Ok(file) => file,
            // Objects of a process that cannot be opened safely are
            // skipped when the user did not name them.
            Err(_) if !explicit => continue,
            Err(e) => return Err(Error::Elf(e)),
        };
        let file = &file;
        let functions = match sdt_elf::functions(file.data()) {
            Ok(functions) => functions,
            Err(_) if !explicit => continue,
            Err(source) => {
                return Err(Error::Elf(sdt_elf::Error::Elf {
                    path: object.path.clone(),
                    source,
                }))
            }
        };
        let site = |f: &Function, symbol: String, offset: u64| -> Result<FunctionSite, Error> {
            let refuse = |why: String| Error::BadSpec {
                spec: text.to_string(),
                why,
            };
            let start = f.file_offset.ok_or_else(|| {
                refuse(format!(
                    "{} is not in an executable segment of {}",
                    f.name,
                    object.path.display()
                ))
            })?;
            if f.size == 0 && offset == 0 && !scope.allow_unsafe {
                return Err(Error::SizeUnknown {
                    function: f.display_name().to_string(),
                });
            }
            if offset > 0 {
                if f.size > 0 && offset >= f.size {
                    return Err(Error::OffsetOutside {
                        function: f.display_name().to_string(),
                        size: f.size,
                        offset,
                    });
                }
                let code = usize::try_from(start)
                    .ok()
                    .and_then(|s| file.data().get(s..s + f.size.max(offset + 16) as usize))
                    .unwrap_or_default();
                match sdt_elf::is_instruction_boundary(code, offset) {
                    Some(true) => {}
                    Some(false) => {
                        return Err(refuse(format!(
                            "offset {offset} is inside an instruction of {}; a uprobe there would corrupt the program",
                            f.display_name()
                        )))
                    }
                    None => {
                        return Err(refuse(format!(
                            "cannot decode {} up to offset {offset}, so sdt cannot check that it starts an instruction",
                            f.display_name()
                        )))
                    }
                }
            }
            Ok(FunctionSite {
                path: object.path.clone(),
                attach_path: PathBuf::from(format!(
                    "/proc/self/fd/{}",
                    file.descriptor().as_raw_fd()
                )),
                attach_fd: Arc::clone(file.descriptor()),
                symbol,
                function: f.display_name().to_string(),
                address: f.address + offset,
                offset,
                file_offset: start + offset,
            })
        };
        match function {
            FunctionTarget::Symbol(pattern) => {
                let glob = Glob::new(pattern)
                    .map(|g| g.compile_matcher())
                    .map_err(|e| Error::BadSpec {
                        spec: text.to_string(),
                        why: e.kind().to_string(),
                    })?;
                for f in &functions {
                    let name = if glob.is_match(&f.name) {
                        f.name.clone()
                    } else if let Some(d) = f.demangled.as_deref().filter(|d| {
                        glob.is_match(d)
                            || d.split('(').next().is_some_and(|bare| glob.is_match(bare))
                    }) {
                        d.to_string()
                    } else {
                        candidates.push(f.display_name().to_string());
                        continue;
                    };
                    sites.push(site(f, name, 0)?);
                }
            }
            FunctionTarget::Offset { symbol, offset } => {
                let found = functions.iter().find(|f| {
                    f.name == *symbol
                        || f.demangled
                            .as_deref()
                            .is_some_and(|d| d == symbol || d.split('(').next() == Some(symbol))
                });
                match found {
                    Some(f) => sites.push(site(f, format!("{symbol}+{offset}"), *offset)?),
                    None => {
                        candidates.extend(functions.iter().map(|f| f.display_name().to_string()))
                    }
                }
            }
            FunctionTarget::Address(_) | FunctionTarget::SourceLine(_) => {
                let (address, name) = match function {
                    FunctionTarget::SourceLine(at) => (
                        line_address(at, &object.path, file, &scope.debug_dirs, text)?,
                        format!("{}:{}", at.file, at.line),
                    ),
                    FunctionTarget::Address(a) => (*a, a.to_string()),
                    _ => unreachable!("matched above"),
                };
                let address = &address;
                let found = functions
                    .iter()
                    .find(|f| (f.address..f.address + f.size.max(1)).contains(address));
                match found {
                    Some(f) => sites.push(site(f, name, address - f.address)?),
                    None => {
                        return Err(Error::AddressOutside {
                            path: object.path.clone(),
                            address: *address,
                        })
                    }
                }
            }
        }
    }
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
