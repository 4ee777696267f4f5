//! C types, functions and source lines from the DWARF of a traced object.
//!
//! `sdt run` resolves `(struct foo *)arg0` through the debug information
//! of the object that holds the probe, types a uprobe's `args` from the
//! function's parameters ([`DebugInfo::function_at`]), and puts a probe on
//! a source line through the line tables ([`DebugInfo::line_address`]);
//! `sdt types` prints the types. This crate has that one job: find an
//! object's DWARF, look things up in it and describe them in a small
//! neutral model ([`Type`], [`Function`]), one DIE at a time, so that each
//! user converts only what it reads.
//!
//! Where the DWARF comes from ([`DebugInfo::open_with`]): the file itself
//! (DWARF 4 or 5, plain, `.zdebug_*` or `SHF_COMPRESSED`), else a
//! separate debug file, looked for in the directories the user names
//! (`--debuginfo`), then by build-id under
//! `/usr/lib/debug/.build-id/xx/yyyy.debug`, then by the name
//! `.gnu_debuglink` gives (beside the file, in its `.debug/` folder, or
//! under `/usr/lib/debug`); one of another build (another build-id, or
//! another CRC) is passed over. A skeleton unit of split DWARF holds no
//! types: the `.dwo` file it names is read as a further part, and a
//! [`TypeId`] says which part it is in; units whose `.dwo` file is not
//! there are looked for in the DWARF package (`FILE.dwp`) beside the
//! file, where `dwp` gathers them.
//!
//! Laziness: opening a file reads unit headers only (to find `.dwo`
//! files). The first lookup builds a name index from the top-level
//! entries of each compilation unit only; entries with children are
//! skipped through their `DW_AT_sibling` attribute where the compiler
//! wrote one (GCC does, on every such entry but a unit's last, so in
//! GCC's units an entry without one ends the scan), so function bodies
//! and struct members are not decoded. The index covers every unit
//! because a name defined differently in two units must be reported, not
//! picked at random. Types are then read one DIE (and its direct
//! children) at a time. Sections are mapped, not read; only the
//! compressed ones that types need (entries, abbreviations, strings) are
//! inflated, once; line tables and location lists are loaded only for
//! [`DebugInfo::register_variables_at`], [`DebugInfo::function_at`] and
//! [`DebugInfo::line_address`].
//!
//! Gimli does the DWARF decoding and `object` the ELF parsing and
//! decompression: both are the standard Rust crates for the job and
//! return errors, never panic, on corrupt input (see the `types` fuzz
//! target).
//!
//! `unsafe` is denied but in two places: files are mapped (`memmap2`),
//! which Rust calls unsafe because another process could truncate a file
//! under the mapping and make reads fault, as every debugger risks; and
//! the bytes gimli reads are promised not to move (`StableDeref`), so that
//! gimli reads the mapping itself instead of a copy of each section.

#![deny(unsafe_code)]

mod function;
mod layout;
mod lines;
mod locate;
mod named;
mod site;

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use gimli::{AttributeValue, Reader as _, RunTimeEndian, UnitOffset};

pub use function::{Function, Parameter, PassedAs};
pub use layout::{bpftrace_definitions, layout, Layout, LayoutMember};
pub use lines::{LineLookup, SourceLine};
pub use locate::Cache;
pub use named::NamedError;
pub use site::RegisterVariable;

/// A type, named by the offset of its DIE in `.debug_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeId(pub u64);

/// How a base type's bits read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Signed,
    Unsigned,
    Bool,
    Float,
}

/// One C type, as one DWARF entry describes it. References to other
/// types are [`TypeId`]s; `None` means `void`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Base {
        name: String,
        size: u64,
        encoding: Encoding,
    },
    Pointer {
        target: Option<TypeId>,
    },
    /// `dims` from the outermost: `int a[2][3]` has `[Some(2), Some(3)]`;
    /// a flexible array member has `None`.
    Array {
        elem: TypeId,
        dims: Vec<Option<u64>>,
    },
    Record(Record),
    Enum(Enum),
    Typedef {
        name: String,
        target: Option<TypeId>,
    },
    /// `const`, `volatile`, `restrict` or `_Atomic`: the same layout.
    Qualified {
        qualifier: &'static str,
        target: Option<TypeId>,
    },
    /// A function type: only pointers to it are values.
    Function,
}

/// A struct or union.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub is_union: bool,
    /// `None` for an anonymous one.
    pub name: Option<String>,
    /// `None` when only declared (`struct foo;`).
    pub size: Option<u64>,
    pub members: Vec<Member>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// `None` for an anonymous struct or union member, or a C++ base class.
    pub name: Option<String>,
    pub ty: TypeId,
    /// Byte offset from the start of the record; for a bitfield, the
    /// byte that holds its first bit.
    pub offset: u64,
    pub bitfield: Option<Bitfield>,
}

/// Where a bitfield's bits are, counted from bit 0 (the least
/// significant bit of byte 0) of the record, as on little-endian
/// machines; DWARF 4's `DW_AT_bit_offset` is converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bitfield {
    pub bit_offset: u64,
    pub bits: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enum {
    pub name: Option<String>,
    pub size: u64,
    pub signed: bool,
    pub values: Vec<(String, i64)>,
}

/// Why debug information could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not an ELF file sdt can read: {message}", path.display())]
    Elf { path: PathBuf, message: String },
    #[error(
        "{} has no debug information (looked in {}); install the package's debug symbols (Debian: the -dbg or -dbgsym package) or rebuild it with -g",
        path.display(),
        looked.join(", ")
    )]
    NoDebugInfo { path: PathBuf, looked: Vec<String> },
    #[error("{}: corrupt DWARF at .debug_info offset {offset:#x}: {message}", path.display())]
    Dwarf {
        path: PathBuf,
        offset: u64,
        message: String,
    },
}

/// The answer to a lookup by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(TypeId),
    /// Defined differently in several compilation units: each with the
    /// name of its unit.
    Ambiguous(Vec<(TypeId, String)>),
    /// No such name; close names, best first.
    Missing(Vec<String>),
}

pub(crate) type Reader = gimli::EndianReader<RunTimeEndian, Bytes>;

/// The children of a type's entry, as [`DebugInfo::get`] walks them.
type Children<'abbrev, 'tree> = gimli::EntriesTreeIter<'abbrev, 'tree, Reader>;

/// The entry of the type being read, with what every kind of type needs.
struct TypeEntry<'a> {
    id: TypeId,
    unit: &'a PartUnit,
    entry: &'a gimli::DebuggingInformationEntry<Reader>,
    /// `DW_AT_type`: what it points to, names, qualifies or holds.
    target: Option<TypeId>,
    /// `DW_AT_byte_size`.
    size: Option<u64>,
}

/// Section bytes: a slice of a mapped file, or an inflated section.
#[derive(Clone)]
pub(crate) struct Bytes {
    owner: Arc<Owner>,
    start: usize,
    end: usize,
}

pub(crate) enum Owner {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Owner {
    fn bytes(&self) -> &[u8] {
        match self {
            Owner::Mapped(m) => m,
            Owner::Owned(v) => v,
        }
    }
}

impl Bytes {
    fn whole(owner: Arc<Owner>) -> Bytes {
        let end = owner.bytes().len();
        Bytes {
            owner,
            start: 0,
            end,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.owner.bytes()[self.start..self.end]
    }
}

// SAFETY: the bytes live in the `Arc`'s heap allocation or mapping, which
// does not move when a `Bytes` is moved.
#[allow(unsafe_code)]
unsafe impl gimli::StableDeref for Bytes {}
// SAFETY: a clone points at the same bytes.
#[allow(unsafe_code)]
unsafe impl gimli::CloneStableDeref for Bytes {}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.end - self.start)
    }
}

/// The DWARF of one object, and a lazily built index of its type names.
pub struct DebugInfo {
    /// The object asked about.
    pub path: PathBuf,
    /// Where its DWARF was found: `path` or a separate debug file.
    pub debug_file: PathBuf,
    /// The DWARF of `debug_file`, then that of each split DWARF (`.dwo`)
    /// file its skeleton units name.
    parts: Vec<Part>,
    /// Where each part after the first comes from.
    split: Vec<Split>,
    /// The DWARF package that some of the parts are in.
    package: Option<gimli::DwarfPackage<Reader>>,
    /// Each `.dwo` part with every section, joined to the main file's
    /// addresses, once a function was looked up in it.
    full_dwo: RefCell<HashMap<usize, Rc<gimli::Dwarf<Reader>>>>,
    /// The file holding the DWARF, for [`DebugInfo::register_variables_at`],
    /// which also needs the sections that type lookups never load.
    owner: Arc<Owner>,
    full: RefCell<Option<Rc<gimli::Dwarf<Reader>>>>,
    index: RefCell<Option<Rc<Index>>>,
    /// Units read so far, by their offset in [`TypeId`]'s numbering.
    units: RefCell<HashMap<u64, Rc<PartUnit>>>,
}

/// Where a part of split DWARF is.
enum Split {
    /// A `.dwo` file.
    File(PathBuf),
    /// The unit of this id in the DWARF package.
    Package(gimli::DwoId),
}

/// One file of DWARF.
struct Part {
    dwarf: gimli::Dwarf<Reader>,
}

/// A unit and the part it is in.
pub(crate) struct PartUnit {
    part: usize,
    unit: gimli::Unit<Reader>,
}

impl Deref for PartUnit {
    type Target = gimli::Unit<Reader>;
    fn deref(&self) -> &gimli::Unit<Reader> {
        &self.unit
    }
}

impl PartUnit {
    pub(crate) fn main(unit: gimli::Unit<Reader>) -> PartUnit {
        PartUnit { part: 0, unit }
    }

    /// `offset` in this unit's part, in [`TypeId`]'s numbering.
    fn id(&self, offset: u64) -> u64 {
        ((self.part as u64) << PART_SHIFT) | offset
    }
}

/// A [`TypeId`] holds the part above this bit and the offset in the
/// part's `.debug_info` below it.
const PART_SHIFT: u32 = 40;

impl fmt::Debug for DebugInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DebugInfo({})", self.debug_file.display())
    }
}

struct Index {
    /// `struct foo`, `union foo`, `enum foo` or a typedef's `foo`.
    names: HashMap<String, Vec<Candidate>>,
    /// The offsets of every unit, ascending.
    units: Vec<u64>,
}

#[derive(Clone, Copy)]
struct Candidate {
    id: TypeId,
    declaration: bool,
}

#[derive(PartialEq)]
enum Shape {
    Record(Option<u64>, Vec<(Option<String>, u64, Option<Bitfield>)>),
    Enum(u64, Vec<(String, i64)>),
    Other(Option<Type>),
}

/// Deeper than this, a chain of types is taken to be a loop.
const MAX_DEPTH: u32 = 64;

impl DebugInfo {
    /// Finds the DWARF of `path` (see the module docs for where). Only
    /// headers are read.
    pub fn open(path: &Path) -> Result<DebugInfo, Error> {
        DebugInfo::open_with(path, &[])
    }

    /// [`DebugInfo::open`], looking for a separate debug file in `dirs`
    /// first (absolute, or relative to the directory of `path`), as
    /// `--debuginfo` asks.
    pub fn open_with(path: &Path, dirs: &[PathBuf]) -> Result<DebugInfo, Error> {
        let (debug_file, owner) = locate::find(path, dirs)?;
        DebugInfo::from_owner(path, debug_file, owner)
    }

    /// Reads the DWARF of an ELF file held in memory (for tests and
    /// fuzzing). `Ok(None)` when it has none.
    pub fn from_elf_bytes(bytes: Vec<u8>) -> Result<Option<DebugInfo>, Error> {
        let path = PathBuf::from("(memory)");
        let owner = Arc::new(Owner::Owned(bytes));
        if !locate::has_dwarf(&path, owner.bytes())? {
            return Ok(None);
        }
        DebugInfo::from_owner(&path, path.clone(), owner).map(Some)
    }

    fn from_owner(path: &Path, debug_file: PathBuf, owner: Arc<Owner>) -> Result<DebugInfo, Error> {
        let dwarf = locate::load_dwarf(&debug_file, owner.clone(), false, false)?;
        let mut parts = vec![Part { dwarf }];
        let mut split = Vec::new();
        let (dwo_files, unfound) = locate::split_dwarf_files(&debug_file, &parts[0].dwarf)?;
        for dwo in dwo_files {
            let owner = locate::map(&dwo)?;
            let mut dwarf = locate::load_dwarf(&dwo, owner, false, true)?;
            dwarf.file_type = gimli::DwarfFileType::Dwo;
            parts.push(Part { dwarf });
            split.push(Split::File(dwo));
        }
        // Units whose .dwo is not there may be in a package beside.
        let mut package = None;
        if !unfound.is_empty() {
            if let Some(dwp) = locate::package_beside(&[&debug_file, path]) {
                let loaded = locate::load_package(&dwp, locate::map(&dwp)?)?;
                for id in unfound {
                    let found = loaded
                        .find_cu(id, &parts[0].dwarf)
                        .map_err(|e| Error::Dwarf {
                            path: dwp.clone(),
                            offset: 0,
                            message: e.to_string(),
                        })?;
                    if let Some(dwarf) = found {
                        parts.push(Part { dwarf });
                        split.push(Split::Package(id));
                    }
                }
                package = Some(loaded);
            }
        }
        Ok(DebugInfo {
            path: path.to_path_buf(),
            debug_file,
            parts,
            split,
            package,
            full_dwo: RefCell::new(HashMap::new()),
            owner,
            full: RefCell::new(None),
            index: RefCell::new(None),
            units: RefCell::new(HashMap::new()),
        })
    }

    fn corrupt(&self, offset: u64, e: impl fmt::Display) -> Error {
        Error::Dwarf {
            path: self.debug_file.clone(),
            offset,
            message: e.to_string(),
        }
    }

    fn index(&self) -> Result<Rc<Index>, Error> {
        if let Some(index) = &*self.index.borrow() {
            return Ok(index.clone());
        }
        let index = Rc::new(self.build_index()?);
        *self.index.borrow_mut() = Some(index.clone());
        Ok(index)
    }

    fn build_index(&self) -> Result<Index, Error> {
        let mut names: HashMap<String, Vec<Candidate>> = HashMap::new();
        let mut units = Vec::new();
        for (part, Part { dwarf }) in self.parts.iter().enumerate() {
            let mut headers = dwarf.units();
            loop {
                let header = match headers.next() {
                    Ok(Some(h)) => h,
                    Ok(None) => break,
                    Err(e) => return Err(self.corrupt(units.last().copied().unwrap_or(0), e)),
                };
                if matches!(header.type_(), gimli::UnitType::Skeleton(_)) {
                    continue;
                }
                let start = ((part as u64) << PART_SHIFT) | header.offset().0 as u64;
                units.push(start);
                let unit = self.unit(start)?;
                let fail = |e: gimli::Error| self.corrupt(start, e);
                // The unit's entry, then its children one by one, each
                // subtree skipped (through DW_AT_sibling where present).
                let mut cursor = unit.entries();
                let Some(root) = cursor.next_dfs().map_err(fail)? else {
                    continue;
                };
                // GCC gives DW_AT_sibling to every entry with children except
                // the last child: in its units, such an entry without one ends
                // the unit, and its subtree (often a large function) need not
                // be walked to find that out.
                let gcc = match root.attr_value(gimli::DW_AT_producer) {
                    Some(producer) => dwarf
                        .attr_string(&unit, producer)
                        .is_ok_and(|p| p.to_slice().is_ok_and(|p| p.starts_with(b"GNU "))),
                    None => false,
                };
                if !cursor.next_entry().map_err(fail)? {
                    continue;
                }
                while let Some(entry) = cursor.current() {
                    if let Some((key, candidate)) = self.index_entry(&unit, entry)? {
                        names.entry(key).or_default().push(candidate);
                    }
                    if gcc && entry.has_children() && entry.attr(gimli::DW_AT_sibling).is_none() {
                        break;
                    }
                    cursor.next_sibling().map_err(fail)?;
                }
            }
        }
        Ok(Index { names, units })
    }

    /// The index key of a top-level entry that defines or declares a
    /// named type.
    fn index_entry(
        &self,
        unit: &PartUnit,
        entry: &gimli::DebuggingInformationEntry<Reader>,
    ) -> Result<Option<(String, Candidate)>, Error> {
        let keyword = match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => "struct ",
            gimli::DW_TAG_union_type => "union ",
            gimli::DW_TAG_enumeration_type => "enum ",
            gimli::DW_TAG_typedef => "",
            _ => return Ok(None),
        };
        let Some(name) = self.name(unit, entry)? else {
            return Ok(None);
        };
        let id = unit.id(entry
            .offset()
            .to_debug_info_offset(&unit.header)
            .map_or(0, |o| o.0 as u64));
        let declaration = matches!(
            entry.attr_value(gimli::DW_AT_declaration),
            Some(AttributeValue::Flag(true))
        );
        Ok(Some((
            format!("{keyword}{name}"),
            Candidate {
                id: TypeId(id),
                declaration,
            },
        )))
    }

    fn unit(&self, start: u64) -> Result<Rc<PartUnit>, Error> {
        if let Some(unit) = self.units.borrow().get(&start) {
            return Ok(unit.clone());
        }
        let fail = |e: gimli::Error| self.corrupt(start, e);
        let part = (start >> PART_SHIFT) as usize;
        let Some(Part { dwarf }) = self.parts.get(part) else {
            return Err(self.corrupt(start, "no such unit"));
        };
        let file_type = dwarf.file_type;
        let local = start & ((1 << PART_SHIFT) - 1);
        let header = dwarf
            .unit_header(gimli::DebugInfoOffset(local as usize))
            .map_err(fail)?;
        // Only what type entries need: the abbreviations and the base of
        // string offsets. `Dwarf::unit` would also parse the line program,
        // whose section is never loaded here (see `locate::load_dwarf`).
        let abbreviations = dwarf.abbreviations(&header).map_err(fail)?;
        let encoding = header.encoding();
        let mut str_offsets_base =
            gimli::DebugStrOffsetsBase::default_for_encoding_and_file(encoding, file_type);
        {
            let mut cursor = header.entries(&abbreviations);
            if let Some(root) = cursor.next_dfs().map_err(fail)? {
                if let Some(AttributeValue::DebugStrOffsetsBase(base)) =
                    root.attr_value(gimli::DW_AT_str_offsets_base)
                {
                    str_offsets_base = base;
                }
            }
        }
        let unit = Rc::new(PartUnit {
            part,
            unit: gimli::Unit {
                abbreviations,
                name: None,
                comp_dir: None,
                low_pc: 0,
                str_offsets_base,
                addr_base: gimli::DebugAddrBase(0),
                loclists_base: gimli::DebugLocListsBase::default_for_encoding_and_file(
                    encoding, file_type,
                ),
                rnglists_base: gimli::DebugRngListsBase::default_for_encoding_and_file(
                    encoding, file_type,
                ),
                line_program: None,
                dwo_id: None,
                header,
            },
        });
        self.units.borrow_mut().insert(start, unit.clone());
        Ok(unit)
    }

    fn name(
        &self,
        unit: &PartUnit,
        entry: &gimli::DebuggingInformationEntry<Reader>,
    ) -> Result<Option<String>, Error> {
        let Some(value) = entry.attr_value(gimli::DW_AT_name) else {
            return Ok(None);
        };
        let offset = unit.header.offset().0 as u64;
        let s = self.parts[unit.part]
            .dwarf
            .attr_string(unit, value)
            .map_err(|e| self.corrupt(offset, e))?;
        Ok(Some(
            s.to_string_lossy()
                .map_err(|e| self.corrupt(offset, e))?
                .into_owned(),
        ))
    }

    /// Looks up `struct NAME`, `union NAME`, `enum NAME` or a typedef
    /// `NAME`. Copies of one definition in several units are one type;
    /// a definition wins over a declaration.
    pub fn find(&self, name: &str) -> Result<Lookup, Error> {
        let index = self.index()?;
        let key = normalize(name);
        let Some(candidates) = index.names.get(&key) else {
            return Ok(Lookup::Missing(similar(&key, index.names.keys())));
        };
        let defined: Vec<Candidate> = candidates
            .iter()
            .filter(|c| !c.declaration)
            .copied()
            .collect();
        let Some(first) = defined.first() else {
            return Ok(Lookup::Found(candidates[0].id));
        };
        let first_shape = self.shape(first.id)?;
        let mut different = vec![*first];
        for c in &defined[1..] {
            if self.shape(c.id)? != first_shape {
                different.push(*c);
                break;
            }
        }
        if different.len() == 1 {
            return Ok(Lookup::Found(first.id));
        }
        let mut named = Vec::new();
        for c in different {
            named.push((c.id, self.unit_name(&index, c.id)?));
        }
        Ok(Lookup::Ambiguous(named))
    }

    /// The definition of `name` in the first compilation unit whose name
    /// contains `unit`: how to pick one of an ambiguous name's definitions.
    pub fn find_in_unit(&self, name: &str, unit: &str) -> Result<Option<TypeId>, Error> {
        let index = self.index()?;
        let Some(candidates) = index.names.get(&normalize(name)) else {
            return Ok(None);
        };
        for c in candidates.iter().filter(|c| !c.declaration) {
            if self.unit_name(&index, c.id)?.contains(unit) {
                return Ok(Some(c.id));
            }
        }
        Ok(None)
    }

    /// Every name [`DebugInfo::find`] knows, as it takes them.
    pub fn names(&self) -> Result<Vec<String>, Error> {
        let mut names: Vec<String> = self.index()?.names.keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    /// What tells two definitions apart: sizes, member names, offsets
    /// and bitfields, enumerators, and what a typedef names. Member types
    /// are not compared: a type whose members sit at the same offsets
    /// with the same names reads the same way.
    fn shape(&self, id: TypeId) -> Result<Shape, Error> {
        let id = self.strip(Some(id))?;
        let Some(id) = id else {
            return Ok(Shape::Other(None));
        };
        Ok(match self.get(id)? {
            Type::Record(r) => Shape::Record(
                r.size,
                r.members
                    .into_iter()
                    .map(|m| (m.name, m.offset, m.bitfield))
                    .collect(),
            ),
            Type::Enum(e) => Shape::Enum(e.size, e.values),
            other => Shape::Other(Some(other)),
        })
    }

    fn unit_name(&self, index: &Index, id: TypeId) -> Result<String, Error> {
        let start = unit_of(&index.units, id.0);
        let unit = self.unit(start)?;
        let fail = |e: gimli::Error| self.corrupt(start, e);
        let mut tree = unit.entries_tree(None).map_err(fail)?;
        let root = tree.root().map_err(fail)?;
        Ok(self
            .name(&unit, root.entry())?
            .unwrap_or_else(|| format!("the unit at {start:#x}")))
    }

    /// The unit that holds the entry `id`, and the entry's offset in it.
    fn locate(&self, id: TypeId) -> Result<(Rc<PartUnit>, UnitOffset), Error> {
        let index = self.index()?;
        let start = unit_of(&index.units, id.0);
        let unit = self.unit(start)?;
        let offset =
            id.0.checked_sub(start)
                .and_then(|o| usize::try_from(o).ok())
                .ok_or_else(|| self.corrupt(id.0, "type reference outside any unit"))?;
        Ok((unit, UnitOffset(offset)))
    }

    /// Part `part` (a `.dwo` file) with every section, and the sections
    /// a split unit takes from the main file (`main`).
    fn full_dwo(
        &self,
        part: usize,
        main: &gimli::Dwarf<Reader>,
    ) -> Result<Rc<gimli::Dwarf<Reader>>, Error> {
        if let Some(d) = self.full_dwo.borrow().get(&part) {
            return Ok(d.clone());
        }
        let dwarf = match (self.split.get(part.wrapping_sub(1)), &self.package) {
            (Some(Split::File(path)), _) => {
                let mut dwarf = locate::load_dwarf(path, locate::map(path)?, true, true)?;
                dwarf.make_dwo(main);
                dwarf
            }
            (Some(Split::Package(id)), Some(package)) => package
                .find_cu(*id, main)
                .map_err(|e| self.corrupt(0, e))?
                .ok_or_else(|| self.corrupt(0, "a split unit left its package"))?,
            _ => return Err(self.corrupt(0, "no such split DWARF file")),
        };
        let dwarf = Rc::new(dwarf);
        self.full_dwo.borrow_mut().insert(part, dwarf.clone());
        Ok(dwarf)
    }

    /// Reads the type at `id`: the entry's tag says which kind of type it
    /// is, and each kind with more to read than a name and a target has a
    /// method of its own.
    pub fn get(&self, id: TypeId) -> Result<Type, Error> {
        let (unit, offset) = self.locate(id)?;
        let fail = |e: gimli::Error| self.corrupt(id.0, e);
        let mut tree = unit.entries_tree(Some(offset)).map_err(fail)?;
        let root = tree.root().map_err(fail)?;
        let entry = root.entry().clone();
        let at = TypeEntry {
            id,
            unit: &unit,
            target: self.type_ref(&unit, &entry)?,
            size: udata(&entry, gimli::DW_AT_byte_size),
            entry: &entry,
        };
        let target = at.target;
        let tag = entry.tag();
        Ok(match tag {
            gimli::DW_TAG_base_type => self.base_type(&at)?,
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => Type::Pointer { target },
            gimli::DW_TAG_typedef => Type::Typedef {
                name: self.name(&unit, &entry)?.unwrap_or_default(),
                target,
            },
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => Type::Qualified {
                qualifier: match tag {
                    gimli::DW_TAG_const_type => "const",
                    gimli::DW_TAG_volatile_type => "volatile",
                    gimli::DW_TAG_restrict_type => "restrict",
                    _ => "_Atomic",
                },
                target,
            },
            gimli::DW_TAG_subroutine_type => Type::Function,
            gimli::DW_TAG_array_type => self.array(&at, root.children())?,
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                Type::Record(self.record(&at, root.children())?)
            }
            gimli::DW_TAG_enumeration_type => Type::Enum(self.enumeration(&at, root.children())?),
            gimli::DW_TAG_unspecified_type => Type::Base {
                name: self.name(&unit, &entry)?.unwrap_or_else(|| "void".into()),
                size: 0,
                encoding: Encoding::Unsigned,
            },
            other => return Err(self.corrupt(id.0, format!("{other} is not a type"))),
        })
    }

    /// `int`, `char`, `_Bool`, `double` and the like.
    fn base_type(&self, at: &TypeEntry) -> Result<Type, Error> {
        let encoding = match at.entry.attr_value(gimli::DW_AT_encoding) {
            Some(AttributeValue::Encoding(e)) => e,
            _ => gimli::DW_ATE_signed,
        };
        Ok(Type::Base {
            name: self.name(at.unit, at.entry)?.unwrap_or_default(),
            size: at.size.unwrap_or(0),
            encoding: match encoding {
                gimli::DW_ATE_signed | gimli::DW_ATE_signed_char => Encoding::Signed,
                gimli::DW_ATE_boolean => Encoding::Bool,
                gimli::DW_ATE_float => Encoding::Float,
                _ => Encoding::Unsigned,
            },
        })
    }

    /// An array: its element type and one length per dimension (`None`
    /// where unknown, as in `int a[]`).
    fn array(&self, at: &TypeEntry, mut children: Children) -> Result<Type, Error> {
        let fail = |e: gimli::Error| self.corrupt(at.id.0, e);
        let mut dims = Vec::new();
        while let Some(child) = children.next().map_err(fail)? {
            let e = child.entry();
            if e.tag() != gimli::DW_TAG_subrange_type {
                continue;
            }
            let len = udata(e, gimli::DW_AT_count).or_else(|| {
                let lower = udata(e, gimli::DW_AT_lower_bound).unwrap_or(0);
                udata(e, gimli::DW_AT_upper_bound).map(|u| u.wrapping_sub(lower).wrapping_add(1))
            });
            dims.push(len);
        }
        if dims.is_empty() {
            dims.push(None);
        }
        Ok(Type::Array {
            elem: at
                .target
                .ok_or_else(|| self.corrupt(at.id.0, "array without an element type"))?,
            dims,
        })
    }

    /// A struct, class or union and its members (a declaration has no
    /// size).
    fn record(&self, at: &TypeEntry, mut children: Children) -> Result<Record, Error> {
        let fail = |e: gimli::Error| self.corrupt(at.id.0, e);
        let is_union = at.entry.tag() == gimli::DW_TAG_union_type;
        let declaration = matches!(
            at.entry.attr_value(gimli::DW_AT_declaration),
            Some(AttributeValue::Flag(true))
        );
        let mut members = Vec::new();
        while let Some(child) = children.next().map_err(fail)? {
            members.extend(self.member(at, child.entry(), is_union)?);
        }
        Ok(Record {
            is_union,
            name: self.name(at.unit, at.entry)?,
            size: if declaration { None } else { at.size },
            members,
        })
    }

    /// A record's child, if it is a member with a place in the record.
    fn member(
        &self,
        at: &TypeEntry,
        e: &gimli::DebuggingInformationEntry<Reader>,
        is_union: bool,
    ) -> Result<Option<Member>, Error> {
        // A C++ base class is laid out like an unnamed member, and its
        // members are reached the same way.
        if e.tag() != gimli::DW_TAG_member && e.tag() != gimli::DW_TAG_inheritance {
            return Ok(None);
        }
        // Static members (C++) have no location.
        let location = udata(e, gimli::DW_AT_data_member_location);
        if location.is_none() && !is_union && e.attr(gimli::DW_AT_data_bit_offset).is_none() {
            return Ok(None);
        }
        let Some(ty) = self.type_ref(at.unit, e)? else {
            return Ok(None);
        };
        let location = location.unwrap_or(0);
        let bitfield = match udata(e, gimli::DW_AT_bit_size) {
            None => None,
            Some(bits) => Some(self.bitfield(at.id, e, location, bits)?),
        };
        Ok(Some(Member {
            name: self.name(at.unit, e)?,
            ty,
            offset: bitfield.map_or(location, |b| b.bit_offset / 8),
            bitfield,
        }))
    }

    /// Where a bitfield member of `bits` bits starts, in bits from the
    /// start of the record.
    fn bitfield(
        &self,
        id: TypeId,
        e: &gimli::DebuggingInformationEntry<Reader>,
        location: u64,
        bits: u64,
    ) -> Result<Bitfield, Error> {
        let bit_offset = if let Some(b) = udata(e, gimli::DW_AT_data_bit_offset) {
            b
        } else {
            // DWARF 4: counted from the most significant bit of a storage
            // unit of DW_AT_byte_size.
            let storage = udata(e, gimli::DW_AT_byte_size).unwrap_or(4);
            let from_msb = udata(e, gimli::DW_AT_bit_offset).unwrap_or(0);
            location
                .checked_add(storage)
                .and_then(|end| end.checked_mul(8))
                .and_then(|end| end.checked_sub(from_msb.checked_add(bits)?))
                .ok_or_else(|| self.corrupt(id.0, "bitfield outside its storage"))?
        };
        // Sane bounds keep every later sum in range.
        if bits > 64 || bit_offset >= 1 << 48 {
            return Err(self.corrupt(id.0, "bitfield out of range"));
        }
        Ok(Bitfield { bit_offset, bits })
    }

    /// An enum and its enumerators; signed if its underlying type is, or
    /// if any value is negative.
    fn enumeration(&self, at: &TypeEntry, mut children: Children) -> Result<Enum, Error> {
        let fail = |e: gimli::Error| self.corrupt(at.id.0, e);
        let mut signed = self.signed_base(at.target)?;
        let mut values = Vec::new();
        while let Some(child) = children.next().map_err(fail)? {
            let e = child.entry();
            if e.tag() != gimli::DW_TAG_enumerator {
                continue;
            }
            let value = match e.attr_value(gimli::DW_AT_const_value) {
                Some(AttributeValue::Sdata(v)) => {
                    signed |= v < 0;
                    v
                }
                Some(AttributeValue::Udata(v)) => v as i64,
                Some(AttributeValue::Data1(v)) => i64::from(v),
                Some(AttributeValue::Data2(v)) => i64::from(v),
                Some(AttributeValue::Data4(v)) => i64::from(v),
                Some(AttributeValue::Data8(v)) => v as i64,
                _ => continue,
            };
            values.push((self.name(at.unit, e)?.unwrap_or_default(), value));
        }
        Ok(Enum {
            name: self.name(at.unit, at.entry)?,
            size: at.size.unwrap_or(4),
            signed,
            values,
        })
    }

    /// Whether an enum's underlying type, where given, is signed: through
    /// typedefs and qualifiers, to a depth of [`MAX_DEPTH`].
    fn signed_base(&self, mut base: Option<TypeId>) -> Result<bool, Error> {
        let mut depth = 0;
        while let Some(t) = base {
            depth += 1;
            if depth > MAX_DEPTH {
                break;
            }
            match self.get(t)? {
                Type::Base { encoding, .. } => return Ok(encoding == Encoding::Signed),
                Type::Typedef { target, .. } | Type::Qualified { target, .. } => base = target,
                _ => break,
            }
        }
        Ok(false)
    }

    fn type_ref(
        &self,
        unit: &PartUnit,
        entry: &gimli::DebuggingInformationEntry<Reader>,
    ) -> Result<Option<TypeId>, Error> {
        Ok(match entry.attr_value(gimli::DW_AT_type) {
            None => None,
            Some(AttributeValue::UnitRef(o)) => Some(TypeId(
                unit.id(o
                    .to_debug_info_offset(&unit.header)
                    .ok_or_else(|| self.corrupt(0, "type reference outside its unit"))?
                    .0 as u64),
            )),
            Some(AttributeValue::DebugInfoRef(o)) => Some(TypeId(unit.id(o.0 as u64))),
            Some(other) => {
                let at = entry
                    .offset()
                    .to_debug_info_offset(&unit.header)
                    .map_or(0, |o| o.0 as u64);
                return Err(self.corrupt(at, format!("unsupported type reference {other:?}")));
            }
        })
    }

    /// The size of a value of `id` (`void` and functions: 1, as in GNU C).
    pub fn size_of(&self, id: Option<TypeId>) -> Result<u64, Error> {
        self.size_at(id, 0)
    }

    fn size_at(&self, id: Option<TypeId>, depth: u32) -> Result<u64, Error> {
        let Some(id) = id else { return Ok(1) };
        if depth > MAX_DEPTH {
            return Err(self.corrupt(id.0, "type refers to itself"));
        }
        Ok(match self.get(id)? {
            Type::Base { size, .. } => size,
            Type::Pointer { .. } => 8,
            Type::Array { elem, dims } => {
                let elem = self.size_at(Some(elem), depth + 1)?;
                dims.iter()
                    .fold(elem, |acc, d| acc.saturating_mul(d.unwrap_or(0)))
            }
            Type::Record(r) => r.size.unwrap_or(0),
            Type::Enum(e) => e.size,
            Type::Typedef { target, .. } | Type::Qualified { target, .. } => {
                self.size_at(target, depth + 1)?
            }
            Type::Function => 1,
        })
    }

    /// How C spells the type: `struct foo *`, `char[256]`, `uint32_t`.
    pub fn c_name(&self, id: Option<TypeId>) -> Result<String, Error> {
        self.declarator(id, "")
    }

    /// A declaration of `name` with type `id`: `char subnqn[256]`,
    /// `struct node *next`, `void (*cb)()`.
    pub fn declarator(&self, id: Option<TypeId>, name: &str) -> Result<String, Error> {
        self.declare(id, name.to_string(), 0, false)
    }

    /// [`DebugInfo::declarator`] with typedefs spelled out as the types
    /// they name, for readers that take no typedefs (bpftrace).
    pub fn declarator_without_typedefs(
        &self,
        id: Option<TypeId>,
        name: &str,
    ) -> Result<String, Error> {
        self.declare(id, name.to_string(), 0, true)
    }

    fn declare(
        &self,
        id: Option<TypeId>,
        inner: String,
        depth: u32,
        through_typedefs: bool,
    ) -> Result<String, Error> {
        let join = |base: &str, inner: &str| {
            if inner.is_empty() {
                base.to_string()
            } else {
                format!("{base} {inner}")
            }
        };
        let Some(id) = id else {
            return Ok(join("void", &inner));
        };
        if depth > MAX_DEPTH {
            return Ok(join("...", &inner));
        }
        Ok(match self.get(id)? {
            Type::Base { name, .. } => join(&name, &inner),
            Type::Typedef { target, .. } if through_typedefs => {
                self.declare(target, inner, depth + 1, true)?
            }
            Type::Typedef { name, .. } => join(&name, &inner),
            Type::Record(r) => {
                let kw = if r.is_union { "union" } else { "struct" };
                join(
                    &format!("{kw} {}", r.name.as_deref().unwrap_or("(anonymous)")),
                    &inner,
                )
            }
            Type::Enum(e) => join(
                &format!("enum {}", e.name.as_deref().unwrap_or("(anonymous)")),
                &inner,
            ),
            Type::Qualified { qualifier, target } => {
                if matches!(
                    target.map(|t| self.get(t)).transpose()?,
                    Some(Type::Pointer { .. })
                ) {
                    self.declare(
                        target,
                        format!("{qualifier} {inner}").trim_end().to_string(),
                        depth + 1,
                        through_typedefs,
                    )?
                } else {
                    format!(
                        "{qualifier} {}",
                        self.declare(target, inner, depth + 1, through_typedefs)?
                    )
                }
            }
            Type::Pointer { target } => {
                let pointee = target.map(|t| self.get(t)).transpose()?;
                let inner = format!("*{inner}");
                match pointee {
                    Some(Type::Array { .. }) | Some(Type::Function) => {
                        self.declare(target, format!("({inner})"), depth + 1, through_typedefs)?
                    }
                    _ => self.declare(target, inner, depth + 1, through_typedefs)?,
                }
            }
            Type::Array { elem, dims } => {
                let mut inner = inner;
                for d in dims {
                    match d {
                        Some(n) => inner += &format!("[{n}]"),
                        None => inner += "[]",
                    }
                }
                self.declare(Some(elem), inner, depth + 1, through_typedefs)?
            }
            Type::Function => join("void", &format!("{inner}()")),
        })
    }

    /// Follows typedefs and qualifiers to the type they name.
    pub fn strip(&self, mut id: Option<TypeId>) -> Result<Option<TypeId>, Error> {
        for _ in 0..MAX_DEPTH {
            let Some(t) = id else { return Ok(None) };
            match self.get(t)? {
                Type::Typedef { target, .. } | Type::Qualified { target, .. } => id = target,
                _ => return Ok(Some(t)),
            }
        }
        Err(self.corrupt(id.map_or(0, |t| t.0), "typedef refers to itself"))
    }
}

/// `struct  foo` and `struct foo` are one name; a C++ `class foo` is
/// indexed as `struct foo`.
fn normalize(name: &str) -> String {
    let words: Vec<&str> = name.split_whitespace().collect();
    match words.split_first() {
        Some((&"class", rest)) => format!("struct {}", rest.join(" ")),
        _ => words.join(" "),
    }
}

/// The start of the unit that holds `offset`.
fn unit_of(units: &[u64], offset: u64) -> u64 {
    match units.binary_search(&offset) {
        Ok(i) => units[i],
        Err(0) => 0,
        Err(i) => units[i - 1],
    }
}

fn udata(entry: &gimli::DebuggingInformationEntry<Reader>, at: gimli::DwAt) -> Option<u64> {
    entry.attr_value(at).and_then(|v| v.udata_value())
}

/// Up to three of `names` close to `wanted`, best first; only names of
/// the same kind (`struct`, `enum`, ...) are offered.
fn similar<'a>(wanted: &str, names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let kind = |s: &str| s.split_once(' ').map(|(k, _)| k.to_string());
    let mut scored: Vec<(f64, &String)> = names
        .filter(|n| kind(n) == kind(wanted))
        .map(|n| (strsim::jaro_winkler(wanted, n), n))
        .filter(|(score, _)| *score > 0.85)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, n)| n.clone()).collect()
}
