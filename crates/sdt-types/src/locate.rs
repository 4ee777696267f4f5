//! Finding an object's DWARF: in the file, or in the separate debug file
//! its build-id or `.gnu_debuglink` names.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use object::{Object, ObjectSection, SectionKind};

use crate::{Bytes, DebugInfo, Error, Owner, Reader};

/// Where distributions install separate debug files.
const DEBUG_ROOT: &str = "/usr/lib/debug";

pub(crate) fn map(path: &Path) -> Result<Arc<Owner>, Error> {
    let io = |error| Error::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the mapping is read-only; a file truncated while it is
    // mapped would fault, which is the risk every debugger takes.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    Ok(Arc::new(Owner::Mapped(map)))
}

fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<object::File<'a>, Error> {
    object::File::parse(bytes).map_err(|e| Error::Elf {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Whether the ELF file in `bytes` holds `.debug_info` with contents
/// (not the empty `NOBITS` one a stripped file keeps).
pub(crate) fn has_dwarf(path: &Path, bytes: &[u8]) -> Result<bool, Error> {
    let file = parse(path, bytes)?;
    Ok(file
        .section_by_name(".debug_info")
        .is_some_and(|s| s.kind() != SectionKind::UninitializedData && s.size() > 0))
}

/// The file with `path`'s DWARF, mapped: the file itself, else a
/// separate debug file, looked for first in `dirs` (the user's
/// `--debuginfo` directories, relative ones taken from the file's own
/// directory), then where distributions and debuggers put them.
///
/// In each directory the file is looked for by its build-id
/// (`.build-id/xx/yyyy.debug`), by the name its `.gnu_debuglink` gives
/// (else its own name with `.debug` added, as elfutils does), and, in an
/// absolute directory, by that name under the file's own directory
/// (`/usr/lib/debug/usr/bin/x.debug`). A debug file is used only if it
/// belongs to the file: the same build-id where the file has one, else
/// the CRC that `.gnu_debuglink` records. Debug information of another
/// build would put every field and parameter in the wrong place.
pub(crate) fn find(path: &Path, dirs: &[PathBuf]) -> Result<(PathBuf, Arc<Owner>), Error> {
    let owner = map(path)?;
    let file = parse(path, owner.bytes())?;
    if has_dwarf(path, owner.bytes())? {
        return Ok((path.to_path_buf(), owner));
    }
    let build_id = file.build_id().ok().flatten().filter(|id| id.len() >= 2);
    let debuglink = file
        .gnu_debuglink()
        .ok()
        .flatten()
        .and_then(|(name, crc)| Some((std::str::from_utf8(name).ok()?.to_string(), crc)))
        .filter(|(name, _)| !name.is_empty() && !name.contains('/'));
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = real.parent().unwrap_or(Path::new("/"));
    let name = match &debuglink {
        Some((name, _)) => name.clone(),
        None => format!(
            "{}.debug",
            real.file_name().unwrap_or_default().to_string_lossy()
        ),
    };
    let by_id = build_id.map(|id| {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        PathBuf::from(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]))
    });
    let mut candidates = Vec::new();
    let mut search = |root: &Path, beside: bool| {
        if let Some(by_id) = &by_id {
            candidates.push(root.join(by_id));
        }
        candidates.push(root.join(&name));
        if beside {
            candidates.push(root.join(".debug").join(&name));
        }
        if root.is_absolute() && root != dir {
            candidates.push(root.join(dir.strip_prefix("/").unwrap_or(dir)).join(&name));
        }
    };
    for d in dirs {
        search(&dir.join(d), false);
    }
    search(dir, true);
    search(Path::new(DEBUG_ROOT), false);
    let mut looked = vec![format!("{}", path.display())];
    let mut seen = std::collections::HashSet::new();
    for candidate in candidates {
        if candidate == path || candidate == real || !seen.insert(candidate.clone()) {
            continue;
        }
        let Ok(owner) = map(&candidate) else {
            looked.push(format!("{}", candidate.display()));
            continue;
        };
        if !has_dwarf(&candidate, owner.bytes())? {
            looked.push(format!("{} (no DWARF)", candidate.display()));
            continue;
        }
        let theirs = parse(&candidate, owner.bytes())?;
        let belongs = match (build_id, theirs.build_id().ok().flatten()) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => match &debuglink {
                Some((_, crc)) => crc32fast::hash(owner.bytes()) == *crc,
                // Nothing to tell it by: taken on the user's word, as
                // debuggers do.
                None => true,
            },
        };
        if !belongs {
            looked.push(format!("{} (of another build)", candidate.display()));
            continue;
        }
        return Ok((candidate, owner));
    }
    Err(Error::NoDebugInfo {
        path: path.to_path_buf(),
        looked,
    })
}

/// Loads the DWARF sections of the ELF file in `owner`: uncompressed
/// ones as slices of it, compressed ones inflated. Without `all`, only
/// the ones types need. A split DWARF file's sections end in `.dwo`.
pub(crate) fn load_dwarf(
    path: &Path,
    owner: Arc<Owner>,
    all: bool,
    dwo: bool,
) -> Result<gimli::Dwarf<Reader>, Error> {
    let file = parse(path, owner.bytes())?;
    gimli::Dwarf::load(sections(path, &file, owner.clone(), all, dwo))
}

/// Loads the DWARF package (`.dwp`) in `owner`, every section.
pub(crate) fn load_package(
    path: &Path,
    owner: Arc<Owner>,
) -> Result<gimli::DwarfPackage<Reader>, Error> {
    let file = parse(path, owner.bytes())?;
    let empty = Reader::new(
        Bytes {
            owner: owner.clone(),
            start: 0,
            end: 0,
        },
        endian(&file),
    );
    // The package's own index is parsed as it loads: its errors are
    // gimli's, the sections' are ours.
    enum Failed {
        Section(Error),
        Index(gimli::Error),
    }
    impl From<gimli::Error> for Failed {
        fn from(e: gimli::Error) -> Failed {
            Failed::Index(e)
        }
    }
    let mut load = sections(path, &file, owner.clone(), true, true);
    gimli::DwarfPackage::load(|id| load(id).map_err(Failed::Section), empty).map_err(|e| match e {
        Failed::Section(e) => e,
        Failed::Index(e) => Error::Dwarf {
            path: path.to_path_buf(),
            offset: 0,
            message: format!("DWARF package index: {e}"),
        },
    })
}

fn endian(file: &object::File<'_>) -> gimli::RunTimeEndian {
    if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// Loads a section of `file` (held by `owner`) by its DWARF id: see
/// [`load_dwarf`].
fn sections<'a>(
    path: &'a Path,
    file: &'a object::File<'a>,
    owner: Arc<Owner>,
    all: bool,
    dwo: bool,
) -> impl FnMut(gimli::SectionId) -> Result<Reader, Error> + 'a {
    let endian = endian(file);
    let elf_error = |e: object::Error| Error::Elf {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let whole = Bytes::whole(owner.clone());
    move |id: gimli::SectionId| -> Result<Reader, Error> {
        let empty = Bytes {
            owner: owner.clone(),
            start: 0,
            end: 0,
        };
        // Types need entries, abbreviations and strings; line tables,
        // location and range lists are never read, so never inflated.
        let needed = all
            || matches!(
                id,
                gimli::SectionId::DebugInfo
                    | gimli::SectionId::DebugAbbrev
                    | gimli::SectionId::DebugStr
                    | gimli::SectionId::DebugStrOffsets
                    | gimli::SectionId::DebugLineStr
            );
        let name = if dwo { id.dwo_name() } else { Some(id.name()) };
        let Some(section) = name
            .and_then(|n| file.section_by_name(n))
            .filter(|_| needed)
        else {
            return Ok(Reader::new(empty, endian));
        };
        if section.kind() == SectionKind::UninitializedData {
            return Ok(Reader::new(empty, endian));
        }
        let compressed = section.compressed_data().map_err(elf_error)?;
        if compressed.format != object::CompressionFormat::None {
            // Deflate and zstd expand at most about 1032 and 32768 to
            // one: a header that claims more is corrupt, and would make
            // the buffer for it fail to allocate.
            let most = (compressed.data.len() as u64 + 64).saturating_mul(32768);
            if compressed.uncompressed_size > most {
                return Err(Error::Elf {
                    path: path.to_path_buf(),
                    message: format!(
                        "section {} claims {} bytes uncompressed from {}",
                        id.name(),
                        compressed.uncompressed_size,
                        compressed.data.len()
                    ),
                });
            }
            let data = compressed.decompress().map_err(elf_error)?.into_owned();
            return Ok(Reader::new(
                Bytes::whole(Arc::new(Owner::Owned(data))),
                endian,
            ));
        }
        let Some((start, size)) = section.file_range() else {
            return Ok(Reader::new(empty, endian));
        };
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
        if end > whole.len() {
            return Err(Error::Elf {
                path: path.to_path_buf(),
                message: format!("section {} runs past the end of the file", id.name()),
            });
        }
        Ok(Reader::new(
            Bytes {
                owner: owner.clone(),
                start,
                end,
            },
            endian,
        ))
    }
}

/// The split DWARF (`.dwo`) files that the skeleton units of `dwarf`
/// name, each once, where they exist: `DW_AT_dwo_name`, relative to
/// `DW_AT_comp_dir` when not absolute. Only unit headers and skeleton
/// root entries are read.
///
/// Also returns the ids of the skeleton units whose `.dwo` file is not
/// there, which a DWARF package may hold ([`package_beside`]).
pub(crate) fn split_dwarf_files(
    path: &Path,
    dwarf: &gimli::Dwarf<Reader>,
) -> Result<(Vec<PathBuf>, Vec<gimli::DwoId>), Error> {
    let fail = |e: gimli::Error| Error::Dwarf {
        path: path.to_path_buf(),
        offset: 0,
        message: e.to_string(),
    };
    let mut files = Vec::new();
    let mut unfound = Vec::new();
    let mut headers = dwarf.units();
    while let Some(header) = headers.next().map_err(fail)? {
        let gimli::UnitType::Skeleton(id) = header.type_() else {
            continue;
        };
        let abbreviations = dwarf.abbreviations(&header).map_err(fail)?;
        let mut cursor = header.entries(&abbreviations);
        let Some(root) = cursor.next_dfs().map_err(fail)? else {
            continue;
        };
        let text = |at| -> Option<String> {
            let value = root.attr_value(at)?;
            let s = match value {
                gimli::AttributeValue::String(s) => s,
                gimli::AttributeValue::DebugStrRef(o) => dwarf.debug_str.get_str(o).ok()?,
                gimli::AttributeValue::DebugLineStrRef(o) => {
                    dwarf.debug_line_str.get_str(o).ok()?
                }
                _ => return None,
            };
            Some(gimli::Reader::to_string_lossy(&s).ok()?.into_owned())
        };
        let Some(name) = text(gimli::DW_AT_dwo_name) else {
            unfound.push(id);
            continue;
        };
        let file = match text(gimli::DW_AT_comp_dir) {
            Some(dir) => Path::new(&dir).join(&name),
            None => PathBuf::from(&name),
        };
        if !file.is_file() {
            unfound.push(id);
        } else if !files.contains(&file) {
            files.push(file);
        }
    }
    Ok((files, unfound))
}

/// The DWARF package (`.dwp`) beside one of `files`, as `dwp` makes it
/// from a program's `.dwo` files: `FILE.dwp`.
pub(crate) fn package_beside(files: &[&Path]) -> Option<PathBuf> {
    files.iter().find_map(|f| {
        let real = std::fs::canonicalize(f).ok()?;
        let mut name = real.into_os_string();
        name.push(".dwp");
        let package = PathBuf::from(name);
        package.is_file().then_some(package)
    })
}

/// Opened debug information, shared by every probe of one run: one entry
/// per object path, and one [`DebugInfo`] per separate debug file (so
/// objects with one build-id share it).
#[derive(Default)]
pub struct Cache {
    /// Where to look for separate debug files first (`--debuginfo`).
    dirs: Vec<PathBuf>,
    by_path: HashMap<PathBuf, Result<Rc<DebugInfo>, Rc<Error>>>,
    by_debug_file: HashMap<PathBuf, Rc<DebugInfo>>,
}

impl Cache {
    /// A cache that looks for separate debug files in `dirs` first (see
    /// [`DebugInfo::open_with`]).
    pub fn with_dirs(dirs: Vec<PathBuf>) -> Cache {
        Cache {
            dirs,
            ..Cache::default()
        }
    }

    pub fn open(&mut self, path: &Path) -> Result<Rc<DebugInfo>, Rc<Error>> {
        if let Some(known) = self.by_path.get(path) {
            return known.clone();
        }
        let opened = find(path, &self.dirs)
            .map_err(Rc::new)
            .and_then(|(debug_file, owner)| {
                if let Some(info) = self.by_debug_file.get(&debug_file) {
                    return Ok(info.clone());
                }
                let info = Rc::new(
                    DebugInfo::from_owner(path, debug_file.clone(), owner).map_err(Rc::new)?,
                );
                self.by_debug_file.insert(debug_file, info.clone());
                Ok(info)
            });
        self.by_path.insert(path.to_path_buf(), opened.clone());
        opened
    }
}
