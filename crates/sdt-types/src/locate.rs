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

/// The file with `path`'s DWARF, mapped.
pub(crate) fn find(path: &Path) -> Result<(PathBuf, Arc<Owner>), Error> {
    let owner = map(path)?;
    let file = parse(path, owner.bytes())?;
    if has_dwarf(path, owner.bytes())? {
        return Ok((path.to_path_buf(), owner));
    }
    let mut looked = vec![format!("{}", path.display())];
    let mut candidates = Vec::new();
    if let Ok(Some(id)) = file.build_id() {
        if id.len() >= 2 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            candidates.push(PathBuf::from(format!(
                "{DEBUG_ROOT}/.build-id/{}/{}.debug",
                &hex[..2],
                &hex[2..]
            )));
        }
    }
    if let Ok(Some((name, _crc))) = file.gnu_debuglink() {
        let name = Path::new(std::str::from_utf8(name).unwrap_or_default());
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let dir = real.parent().unwrap_or(Path::new("/"));
        candidates.push(dir.join(name));
        candidates.push(dir.join(".debug").join(name));
        candidates.push(
            Path::new(DEBUG_ROOT)
                .join(dir.strip_prefix("/").unwrap_or(dir))
                .join(name),
        );
    }
    for candidate in candidates {
        if candidate.as_os_str().is_empty() || candidate == path {
            continue;
        }
        looked.push(format!("{}", candidate.display()));
        let Ok(owner) = map(&candidate) else {
            continue;
        };
        if has_dwarf(&candidate, owner.bytes())? {
            return Ok((candidate, owner));
        }
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
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let elf_error = |e: object::Error| Error::Elf {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let whole = Bytes::whole(owner.clone());
    let load = |id: gimli::SectionId| -> Result<Reader, Error> {
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
    };
    gimli::Dwarf::load(load)
}

/// The split DWARF (`.dwo`) files that the skeleton units of `dwarf`
/// name, each once, where they exist: `DW_AT_dwo_name`, relative to
/// `DW_AT_comp_dir` when not absolute. Only unit headers and skeleton
/// root entries are read.
pub(crate) fn split_dwarf_files(
    path: &Path,
    dwarf: &gimli::Dwarf<Reader>,
) -> Result<Vec<PathBuf>, Error> {
    let fail = |e: gimli::Error| Error::Dwarf {
        path: path.to_path_buf(),
        offset: 0,
        message: e.to_string(),
    };
    let mut files = Vec::new();
    let mut headers = dwarf.units();
    while let Some(header) = headers.next().map_err(fail)? {
        if !matches!(header.type_(), gimli::UnitType::Skeleton(_)) {
            continue;
        }
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
            continue;
        };
        let file = match text(gimli::DW_AT_comp_dir) {
            Some(dir) => Path::new(&dir).join(&name),
            None => PathBuf::from(&name),
        };
        if file.is_file() && !files.contains(&file) {
            files.push(file);
        }
    }
    Ok(files)
}

/// Opened debug information, shared by every probe of one run: one entry
/// per object path, and one [`DebugInfo`] per separate debug file (so
/// objects with one build-id share it).
#[derive(Default)]
pub struct Cache {
    by_path: HashMap<PathBuf, Result<Rc<DebugInfo>, Rc<Error>>>,
    by_debug_file: HashMap<PathBuf, Rc<DebugInfo>>,
}

impl Cache {
    pub fn open(&mut self, path: &Path) -> Result<Rc<DebugInfo>, Rc<Error>> {
        if let Some(known) = self.by_path.get(path) {
            return known.clone();
        }
        let opened = find(path).map_err(Rc::new).and_then(|(debug_file, owner)| {
            if let Some(info) = self.by_debug_file.get(&debug_file) {
                return Ok(info.clone());
            }
            let info =
                Rc::new(DebugInfo::from_owner(path, debug_file.clone(), owner).map_err(Rc::new)?);
            self.by_debug_file.insert(debug_file, info.clone());
            Ok(info)
        });
        self.by_path.insert(path.to_path_buf(), opened.clone());
        opened
    }
}
