//! A function's parameters, as its DWARF declares them: what `args` of a
//! uprobe reads and what `-lv` lists.
//!
//! The function is found by its entry address, not by its name, so that
//! two `static` functions of one name in different compilation units, and
//! C++ overloads, are told apart: the subprogram whose code starts at the
//! address (`DW_AT_low_pc`, or the first of its `DW_AT_ranges` for a
//! function split into hot and cold parts). Its parameters are its own
//! `DW_TAG_formal_parameter` children, named and typed through
//! `DW_AT_abstract_origin` or `DW_AT_specification` where the concrete
//! entry leaves that to its declaration (an out-of-line copy of an inline
//! function, a C++ method defined outside its class). With split DWARF,
//! the unit around the address is a skeleton and the function is in the
//! `.dwo` file it names, whose addresses are read through the skeleton's
//! `.debug_addr`.
//!
//! Where the values are at the function's entry is the calling
//! convention's business, not DWARF's: this module only says what the
//! parameters are, and whether the compiler changed how the function is
//! called (`DW_CC_nocall`), in which case their registers mean nothing.

use std::rc::Rc;

use gimli::{AttributeValue, UnitOffset};

use crate::{DebugInfo, Error, PartUnit, Reader, Type, TypeId};

/// A function, as DWARF declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: Option<String>,
    pub params: Vec<Parameter>,
    /// `None` for `void`.
    pub returns: Option<TypeId>,
    /// The compiler changed how the function is called (GCC's and LLVM's
    /// `DW_CC_nocall`): its parameters are not where the ABI puts them.
    pub nocall: bool,
    /// The function is C++, whose classes may be passed by reference
    /// without DWARF's `DW_AT_calling_convention` saying so.
    pub cplusplus: bool,
    /// The function takes more arguments than it names (`...`).
    pub variadic: bool,
}

/// One parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameter {
    /// `None` for an unnamed one (`int f(int)`).
    pub name: Option<String>,
    pub ty: TypeId,
    /// Made by the compiler: C++'s `this`.
    pub artificial: bool,
}

/// How a struct, union or class is passed by value, where DWARF says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassedAs {
    /// The caller passes the address of a copy (C++ classes that are not
    /// trivially copyable).
    Reference,
    /// As the ABI passes plain data.
    Value,
    /// DWARF does not say.
    Unsaid,
}

/// A split unit, with the DWARF of its `.dwo` file joined to the main
/// file's addresses.
type SplitUnit = (Rc<gimli::Dwarf<Reader>>, PartUnit);

/// `DW_CC_nocall`, `DW_CC_pass_by_reference`, `DW_CC_pass_by_value`.
const NOCALL: u64 = 3;
const BY_REFERENCE: u64 = 4;
const BY_VALUE: u64 = 5;

impl DebugInfo {
    /// The function whose code starts at `address` (a link-time
    /// address), or `None` when no compilation unit describes it.
    pub fn function_at(&self, address: u64) -> Result<Option<Function>, Error> {
        let dwarf = self.full_dwarf()?;
        let Some(unit) = self.unit_at(&dwarf, address)? else {
            return Ok(None);
        };
        let (dwarf, unit) = match unit.dwo_id {
            Some(id) => match self.split_unit(&dwarf, &unit, id)? {
                Some(found) => found,
                None => return Ok(None),
            },
            None => (dwarf, PartUnit::main(unit)),
        };
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let mut tree = unit.entries_tree(None).map_err(fail)?;
        let root = tree.root().map_err(fail)?;
        let cplusplus = matches!(
            root.entry().attr_value(gimli::DW_AT_language),
            Some(AttributeValue::Language(
                gimli::DW_LANG_C_plus_plus
                    | gimli::DW_LANG_C_plus_plus_03
                    | gimli::DW_LANG_C_plus_plus_11
                    | gimli::DW_LANG_C_plus_plus_14
            ))
        );
        let Some(offset) = self.subprogram_at(&dwarf, &unit, root, address, 0)? else {
            return Ok(None);
        };
        self.function(&unit, offset, cplusplus).map(Some)
    }

    /// The unit of the `.dwo` file that a skeleton unit names, with the
    /// skeleton's address base, and that file's DWARF with the sections
    /// it takes from the main file.
    fn split_unit(
        &self,
        main: &gimli::Dwarf<Reader>,
        skeleton: &gimli::Unit<Reader>,
        id: gimli::DwoId,
    ) -> Result<Option<SplitUnit>, Error> {
        for part in 1..self.parts.len() {
            let dwarf = &self.parts[part].dwarf;
            let fail = |e: gimli::Error| self.corrupt(0, e);
            let mut headers = dwarf.units();
            while let Some(header) = headers.next().map_err(fail)? {
                let own = match header.type_() {
                    gimli::UnitType::SplitCompilation(own) => Some(own),
                    _ => None,
                };
                let matches = match own {
                    Some(own) => own == id,
                    // DWARF 4's GNU split units name their id in the root.
                    None => {
                        let unit = self.unit(self.part_id(part, header.offset()))?;
                        let mut cursor = unit.entries();
                        let root = cursor.next_dfs().map_err(fail)?;
                        matches!(
                            root.and_then(|r| r.attr_value(gimli::DW_AT_GNU_dwo_id)),
                            Some(AttributeValue::DwoId(own)) if own == id
                        )
                    }
                };
                if !matches {
                    continue;
                }
                let full = self.full_dwo(part, main)?;
                let mut unit = full.unit(header).map_err(fail)?;
                unit.copy_relocated_attributes(skeleton);
                return Ok(Some((full, PartUnit { part, unit })));
            }
        }
        Ok(None)
    }

    /// The numbering [`TypeId`] uses for a unit of part `part`.
    fn part_id(&self, part: usize, offset: gimli::UnitSectionOffset) -> u64 {
        ((part as u64) << crate::PART_SHIFT) | offset.0 as u64
    }

    /// The entry, among `node`'s children (and those of namespaces in it),
    /// of the subprogram whose code starts at `address`.
    fn subprogram_at(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &PartUnit,
        node: gimli::EntriesTreeNode<'_, '_, Reader>,
        address: u64,
        depth: u32,
    ) -> Result<Option<UnitOffset>, Error> {
        if depth > crate::MAX_DEPTH {
            return Ok(None);
        }
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let mut children = node.children();
        while let Some(child) = children.next().map_err(fail)? {
            let entry = child.entry();
            match entry.tag() {
                gimli::DW_TAG_subprogram => {
                    let starts_here = match entry.attr_value(gimli::DW_AT_entry_pc) {
                        Some(AttributeValue::Addr(a)) => a == address,
                        _ => {
                            // A function split into hot and cold parts
                            // starts where its symbol is: at one of its
                            // ranges, not always the lowest.
                            let mut ranges = dwarf.die_ranges(unit, entry).map_err(fail)?;
                            let mut starts = false;
                            while let Some(r) = ranges.next().map_err(fail)? {
                                starts |= r.begin == address;
                            }
                            starts
                        }
                    };
                    if starts_here {
                        return Ok(Some(entry.offset()));
                    }
                }
                gimli::DW_TAG_namespace => {
                    if let Some(found) =
                        self.subprogram_at(dwarf, unit, child, address, depth + 1)?
                    {
                        return Ok(Some(found));
                    }
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// Reads the subprogram at `offset` of `unit`.
    fn function(
        &self,
        unit: &PartUnit,
        offset: UnitOffset,
        cplusplus: bool,
    ) -> Result<Function, Error> {
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let entry = unit.entry(offset).map_err(fail)?;
        // The declaration this entry completes, for what it leaves out.
        let origins = self.origins(unit, &entry)?;
        let described = |at: gimli::DwAt| {
            std::iter::once(&entry)
                .chain(&origins)
                .find(|e| e.attr(at).is_some())
        };
        let name = match described(gimli::DW_AT_name) {
            Some(e) => self.name(unit, e)?,
            None => None,
        };
        let returns = match described(gimli::DW_AT_type) {
            Some(e) => self.type_ref(unit, e)?,
            None => None,
        };
        let nocall = std::iter::once(&entry).chain(&origins).any(|e| {
            e.attr_value(gimli::DW_AT_calling_convention)
                .and_then(|v| v.udata_value())
                == Some(NOCALL)
        });
        let mut params = Vec::new();
        let mut variadic = false;
        for holder in std::iter::once(offset).chain(origins.iter().map(|e| e.offset())) {
            let mut tree = unit.entries_tree(Some(holder)).map_err(fail)?;
            let root = tree.root().map_err(fail)?;
            let mut children = root.children();
            while let Some(child) = children.next().map_err(fail)? {
                let e = child.entry();
                match e.tag() {
                    gimli::DW_TAG_formal_parameter => {
                        params.push(self.parameter(unit, e)?);
                    }
                    gimli::DW_TAG_unspecified_parameters => variadic = true,
                    _ => {}
                }
            }
            if !params.is_empty() || variadic {
                break;
            }
        }
        Ok(Function {
            name,
            params,
            returns,
            nocall,
            cplusplus,
            variadic,
        })
    }

    /// The entries `entry` refers to for its name and type: its abstract
    /// origin or specification, and theirs, nearest first.
    fn origins(
        &self,
        unit: &PartUnit,
        entry: &gimli::DebuggingInformationEntry<Reader>,
    ) -> Result<Vec<gimli::DebuggingInformationEntry<Reader>>, Error> {
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let mut found = Vec::new();
        let mut current = entry.clone();
        for _ in 0..4 {
            let next = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
                .into_iter()
                .find_map(|at| match current.attr_value(at) {
                    Some(AttributeValue::UnitRef(o)) => Some(o),
                    _ => None,
                });
            let Some(next) = next else { break };
            current = unit.entry(next).map_err(fail)?;
            found.push(current.clone());
        }
        Ok(found)
    }

    fn parameter(
        &self,
        unit: &PartUnit,
        entry: &gimli::DebuggingInformationEntry<Reader>,
    ) -> Result<Parameter, Error> {
        let origins = self.origins(unit, entry)?;
        let all = || std::iter::once(entry).chain(&origins);
        let name = match all().find(|e| e.attr(gimli::DW_AT_name).is_some()) {
            Some(e) => self.name(unit, e)?,
            None => None,
        };
        let ty = match all().find(|e| e.attr(gimli::DW_AT_type).is_some()) {
            Some(e) => self.type_ref(unit, e)?,
            None => None,
        };
        let at = entry
            .offset()
            .to_debug_info_offset(&unit.header)
            .map_or(0, |o| o.0 as u64);
        let ty = ty.ok_or_else(|| self.corrupt(at, "a parameter without a type"))?;
        let artificial = all().any(|e| {
            matches!(
                e.attr_value(gimli::DW_AT_artificial),
                Some(AttributeValue::Flag(true))
            )
        });
        Ok(Parameter {
            name,
            ty,
            artificial,
        })
    }

    /// How a record type is passed by value, where its DWARF says
    /// (`DW_AT_calling_convention`, which compilers give C++ classes).
    pub fn passed_as(&self, id: TypeId) -> Result<PassedAs, Error> {
        let value = self.with_entry(id, |e| {
            e.attr_value(gimli::DW_AT_calling_convention)
                .and_then(|v| v.udata_value())
        })?;
        Ok(match value {
            Some(BY_REFERENCE) => PassedAs::Reference,
            Some(BY_VALUE) => PassedAs::Value,
            _ => PassedAs::Unsaid,
        })
    }

    /// A type as bpftrace's `-lv` spells it: `int`, `char*`, `struct Foo*`,
    /// `const char*`, `char* const`. Where bpftrace has no spelling
    /// (arrays, functions, `volatile`), as C does.
    pub fn bpftrace_type_name(&self, id: Option<TypeId>) -> Result<String, Error> {
        self.bpftrace_name(id, 0)
    }

    fn bpftrace_name(&self, id: Option<TypeId>, depth: u32) -> Result<String, Error> {
        let Some(t) = id else {
            return Ok("void".into());
        };
        if depth > crate::MAX_DEPTH {
            return Ok("...".into());
        }
        Ok(match self.get(t)? {
            Type::Base { name, .. } | Type::Typedef { name, .. } => name,
            Type::Pointer { target } => match target.map(|t| self.get(t)).transpose()? {
                Some(Type::Function) | Some(Type::Array { .. }) => self.c_name(id)?,
                _ => format!("{}*", self.bpftrace_name(target, depth + 1)?),
            },
            Type::Record(r) => format!(
                "{} {}",
                if r.is_union { "union" } else { "struct" },
                r.name.as_deref().unwrap_or("<anonymous>")
            ),
            Type::Enum(e) => format!("enum {}", e.name.as_deref().unwrap_or("<anonymous>")),
            Type::Qualified {
                qualifier: "const",
                target,
            } => match target.map(|t| self.get(t)).transpose()? {
                Some(Type::Pointer { .. }) => {
                    format!("{} const", self.bpftrace_name(target, depth + 1)?)
                }
                _ => format!("const {}", self.bpftrace_name(target, depth + 1)?),
            },
            _ => self.c_name(id)?,
        })
    }

    /// The parameters of the function that starts at `address`, one
    /// `TYPE NAME` each, as bpftrace's `-lv` lists them; `None` when no
    /// unit describes the function.
    pub fn parameter_lines(&self, address: u64) -> Result<Option<Vec<String>>, Error> {
        let Some(f) = self.function_at(address)? else {
            return Ok(None);
        };
        let mut lines = Vec::new();
        for p in &f.params {
            let ty = self.bpftrace_type_name(Some(p.ty))?;
            lines.push(match &p.name {
                Some(name) => format!("{ty} {name}"),
                None => ty,
            });
        }
        Ok(Some(lines))
    }

    /// Runs `read` on the entry of `id`.
    fn with_entry<T>(
        &self,
        id: TypeId,
        read: impl FnOnce(&gimli::DebuggingInformationEntry<Reader>) -> T,
    ) -> Result<T, Error> {
        let (unit, offset) = self.locate(id)?;
        let entry = unit.entry(offset).map_err(|e| self.corrupt(id.0, e))?;
        Ok(read(&entry))
    }
}
