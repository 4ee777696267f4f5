//! Types from the traced object's DWARF, for casts the script's own C
//! definitions do not cover.
//!
//! A probe's object is the file that holds its USDT site or function (the
//! first one, when an attach point matches several). A name is looked up
//! there only when the script does not define it, so a script definition
//! always wins. What is found is converted into the [`TypeRegistry`] once
//! per object and DIE, on demand: only the types a script names, and the
//! types their members reach, are read. Typedefs and qualifiers dissolve
//! into the types they name; `char` arrays stay arrays of `int8`, which
//! `printf("%s")` and `str` read as strings bounded by the array size;
//! floating-point members read as unsigned integers of their size.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use sdt_types::{DebugInfo, Lookup, Type, TypeId};

use super::{Checker, R};
use crate::diag::{did_you_mean, suggest, Diagnostic, Span};
use crate::hir::{TExpr, TKind};
use crate::types::{EnumDef, Field, Record, Ty};

/// Opened debug information and what was converted from it.
#[derive(Default)]
pub(crate) struct DwarfTypes {
    cache: sdt_types::Cache,
    converted: HashMap<(PathBuf, TypeId), Ty>,
    /// The typed arguments of a probe's sites, by object and addresses.
    site_args: HashMap<(PathBuf, Vec<u64>), Rc<SiteArgs>>,
    /// What `-v` tells, in order, once each.
    notes: Vec<String>,
}

impl DwarfTypes {
    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    pub(crate) fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}

/// `args.NAME` of a USDT probe: each name with its argument's index and
/// type, or `None` when the sites disagree about it.
type SiteArgs = HashMap<String, Option<(usize, TypeId, String)>>;

/// Where a DWARF register is saved in the kernel's `pt_regs`.
#[cfg(target_arch = "x86_64")]
fn pt_regs_offset(register: u16) -> Option<i16> {
    // DWARF numbers rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8..r15.
    const SLOTS: [i16; 16] = [10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0];
    SLOTS.get(usize::from(register)).map(|slot| slot * 8)
}

#[cfg(target_arch = "aarch64")]
fn pt_regs_offset(register: u16) -> Option<i16> {
    (register <= 30).then(|| register as i16 * 8)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn pt_regs_offset(_register: u16) -> Option<i16> {
    None
}

/// Where `object`'s types come from, for `-v`: the object itself (opened
/// as `file`), or a separate debug file.
fn types_note(object: &Path, file: Option<&Path>, info: &DebugInfo) -> String {
    if info.debug_file == object || Some(info.debug_file.as_path()) == file {
        format!("C types of {} from its own DWARF", object.display())
    } else {
        format!(
            "C types of {} from the DWARF in {}",
            object.display(),
            info.debug_file.display()
        )
    }
}

impl Checker<'_> {
    /// `name` (`struct foo`, `enum bar`, a typedef) from the DWARF of the
    /// current probe's object. `Ok(None)`: the probe has no object.
    pub(crate) fn dwarf_type(&mut self, name: &str, span: Span) -> R<Option<Ty>> {
        let Some(object) = self.current_object.clone() else {
            return Ok(None);
        };
        let info = match self
            .dwarf
            .cache
            .open(self.current_object_file.as_deref().unwrap_or(&object))
        {
            Ok(info) => {
                let note = types_note(&object, self.current_object_file.as_deref(), &info);
                self.dwarf.note(note);
                info
            }
            Err(e) => {
                return Err(self.error(
                    Diagnostic::error(span, format!("unknown type `{name}`"))
                        .label(e.to_string())
                        .hint("or define the type at the top of the script in C"),
                ))
            }
        };
        let found = info.find(name).map_err(|e| {
            self.error(Diagnostic::error(
                span,
                format!("reading the type `{name}`: {e}"),
            ))
        });
        match found? {
            Lookup::Found(id) => self.convert(&info, id, span, 0).map(Some),
            Lookup::Ambiguous(defs) => Err(self.error(
                Diagnostic::error(
                    span,
                    format!(
                        "`{name}` is defined differently in two compilation units of {}: {} and {}",
                        info.debug_file.display(),
                        defs[0].1,
                        defs[1].1
                    ),
                )
.hint(format!(
                    "define the one you mean at the top of the script, where it wins; `sdt types --bpftrace --unit {} {} '{name}'` prints it",
                    defs[0].1.rsplit('/').next().unwrap_or(&defs[0].1),
                    object.display()
                )),
            )),
            Lookup::Missing(close) => {
                let mut d = Diagnostic::error(
                    span,
                    format!(
                        "unknown type `{name}`: the debug information of {} does not define it",
                        object.display()
                    ),
                );
                if let Some(h) = did_you_mean(&close) {
                    d = d.hint(h);
                }
                Err(self.error(d))
            }
        }
    }

    fn convert(&mut self, info: &Rc<DebugInfo>, id: TypeId, span: Span, depth: u32) -> R<Ty> {
        let key = (info.path.clone(), id);
        if let Some(ty) = self.dwarf.converted.get(&key) {
            return Ok(ty.clone());
        }
        if depth > 64 {
            return Err(self.error(Diagnostic::error(span, "type nests too deeply")));
        }
        let ty = match self.read(info, id, span)? {
            Type::Base { size, encoding, .. } => match size {
                1 | 2 | 4 | 8 => Ty::int(size as u8, encoding == sdt_types::Encoding::Signed),
                _ => Ty::Array {
                    elem: Box::new(Ty::int(1, false)),
                    len: size,
                },
            },
            Type::Pointer { target } => {
                let pointee = match target {
                    None => Ty::Void,
                    Some(t) => match self.read(info, t, span)? {
                        // A pointer to a function is an address.
                        Type::Function => Ty::Void,
                        _ => self.convert(info, t, span, depth + 1)?,
                    },
                };
                Ty::Ptr(Box::new(pointee))
            }
            Type::Typedef { target, .. } | Type::Qualified { target, .. } => match target {
                None => Ty::Void,
                Some(t) => self.convert(info, t, span, depth + 1)?,
            },
            Type::Array { elem, dims } => {
                let mut ty = self.convert(info, elem, span, depth + 1)?;
                for d in dims.iter().rev() {
                    ty = Ty::Array {
                        elem: Box::new(ty),
                        len: d.unwrap_or(0),
                    };
                }
                ty
            }
            Type::Enum(e) => {
                let bytes = match e.size {
                    1 | 2 | 4 | 8 => e.size as u8,
                    _ => 4,
                };
                let def = EnumDef {
                    name: e.name.unwrap_or_else(|| "(anonymous)".into()),
                    bytes,
                    signed: e.signed,
                    values: e.values,
                };
                Ty::Enum {
                    id: self.registry.add_enum(def),
                    bytes,
                    signed: e.signed,
                }
            }
            Type::Function => Ty::Void,
            Type::Record(r) => {
                // Recorded before its fields, which may point back at it.
                let record = self.registry.add_record(Record {
                    name: r.name.clone().unwrap_or_else(|| "(anonymous)".into()),
                    is_union: r.is_union,
                    size: r.size.unwrap_or(0),
                    align: 1,
                    fields: Vec::new(),
                    incomplete: r.size.is_none(),
                });
                self.dwarf.converted.insert(key.clone(), Ty::Record(record));
                let mut fields = Vec::new();
                let mut align = 1;
                for m in &r.members {
                    let ty = self.convert(info, m.ty, span, depth + 1)?;
                    align = align.max(self.registry.c_align(&ty));
                    let (offset, bitfield) = match m.bitfield {
                        None => (m.offset, None),
                        Some(b) => {
                            // A bitfield is read as its declared type's
                            // storage unit, aligned, and shifted.
                            let unit = self.registry.c_size(&ty).clamp(1, 8);
                            let mut start = b.bit_offset / (unit * 8) * unit;
                            if b.bit_offset + b.bits > start.saturating_add(unit).saturating_mul(8)
                            {
                                start = b.bit_offset / 8;
                            }
                            let within = b.bit_offset - start * 8;
                            if within + b.bits > 64 {
                                return Err(self.error(Diagnostic::error(
                                    span,
                                    format!(
                                        "bitfield `{}` straddles 8 bytes",
                                        m.name.as_deref().unwrap_or("")
                                    ),
                                )));
                            }
                            (start, Some((within as u8, b.bits as u8)))
                        }
                    };
                    fields.push(Field {
                        name: m.name.clone().unwrap_or_default(),
                        ty,
                        offset,
                        bitfield,
                    });
                }
                let rec = self.registry.record_mut(record);
                rec.fields = fields;
                rec.align = align;
                return Ok(Ty::Record(record));
            }
        };
        self.dwarf.converted.insert(key, ty.clone());
        Ok(ty)
    }

    /// `args.NAME` in a USDT probe: the argument that, at the probe's
    /// sites, sits in the register where DWARF says variable NAME lives,
    /// cast to NAME's type.
    pub(crate) fn usdt_arg(&mut self, name: &str, name_span: Span, span: Span) -> R<TExpr> {
        let args = self.site_args(span)?;
        match args.get(name) {
            Some(Some((index, id, _))) => {
                let (index, id) = (*index, *id);
                let object = self
                    .current_object
                    .clone()
                    .expect("site args need an object");
                let info = self
                    .dwarf
                    .cache
                    .open(self.current_object_file.as_deref().unwrap_or(&object))
                    .map_err(|e| self.error(Diagnostic::error(span, e.to_string())))?;
                let ty = self.convert(&info, id, span, 0)?;
                self.args_read |= 1u16.checked_shl(index as u32).unwrap_or(0);
                let value = TExpr {
                    kind: TKind::Arg(index as u8),
                    ty: crate::types::UINT64,
                    span,
                };
                if !ty.is_scalar() {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!(
                            "args.{name} is a {}, which a register cannot hold",
                            ty.display(&self.registry)
                        ),
                    )));
                }
                self.cast(value, ty, span)
            }
            Some(None) => Err(self.error(
                Diagnostic::error(
                    name_span,
                    format!("the probe's sites pass `{name}` as different arguments or types"),
                )
                .hint("read it as argN with a cast"),
            )),
            None => {
                let mut names: Vec<&str> = args
                    .iter()
                    .filter(|(_, v)| v.is_some())
                    .map(|(k, _)| k.as_str())
                    .collect();
                names.sort();
                let mut d = Diagnostic::error(
                    name_span,
                    format!("no argument of this probe is the variable `{name}`"),
                );
                d = match did_you_mean(&suggest(name, names.iter().copied())) {
                    Some(h) => d.hint(h),
                    None if !names.is_empty() => d.hint(format!("its typed arguments are {}", names.join(", "))),
                    None => d.hint(
                        "DWARF names no variable held in an argument's register at its sites (arguments that are expressions, constants or in memory have no name); read argN with a cast",
                    ),
                };
                Err(self.error(d))
            }
        }
    }

    fn site_args(&mut self, span: Span) -> R<Rc<SiteArgs>> {
        let Some(object) = self.current_object.clone() else {
            return Err(self.error(Diagnostic::error(
                span,
                "this probe has no object to read DWARF from",
            )));
        };
        let addresses: Vec<u64> = self.current_sites.iter().map(|s| s.address).collect();
        let key = (object.clone(), addresses);
        if let Some(known) = self.dwarf.site_args.get(&key) {
            return Ok(known.clone());
        }
        let info = match self
            .dwarf
            .cache
            .open(self.current_object_file.as_deref().unwrap_or(&object))
        {
            Ok(info) => {
                let note = types_note(&object, self.current_object_file.as_deref(), &info);
                self.dwarf.note(note);
                info
            }
            Err(e) => {
                return Err(self.error(
                    Diagnostic::error(span, "args.NAME needs the probe object's debug information")
                        .label(e.to_string()),
                ))
            }
        };
        let mut args: SiteArgs = HashMap::new();
        for site in self.current_sites.clone() {
            let variables = info
                .register_variables_at(site.address)
                .map_err(|e| self.error(Diagnostic::error(span, e.to_string())))?;
            for (index, register) in site.registers.iter().enumerate() {
                let Some(register) = register else { continue };
                let Some(v) = variables
                    .iter()
                    .find(|v| pt_regs_offset(v.register) == Some(*register))
                else {
                    continue;
                };
                let type_name = info
                    .c_name(Some(v.ty))
                    .map_err(|e| self.error(Diagnostic::error(span, e.to_string())))?;
                let entry =
                    args.entry(v.name.clone())
                        .or_insert(Some((index, v.ty, type_name.clone())));
                if matches!(entry, Some((i, _, t)) if *i != index || *t != type_name) {
                    *entry = None;
                }
            }
        }
        let sites: Vec<String> = key.1.iter().map(|a| format!("{a:#x}")).collect();
        let mut typed: Vec<String> = args
            .iter()
            .map(|(name, v)| match v {
                Some((index, _, ty)) => format!("args.{name} = ({ty})arg{index}"),
                None => format!("args.{name}: differs between sites"),
            })
            .collect();
        typed.sort();
        self.dwarf.note(if typed.is_empty() {
            format!(
                "the USDT sites at {} of {}: DWARF names no variable in an argument's register; their arguments stay integers",
                sites.join(", "),
                object.display()
            )
        } else {
            format!(
                "the USDT sites at {} of {}: {}",
                sites.join(", "),
                object.display(),
                typed.join(", ")
            )
        });
        let args = Rc::new(args);
        self.dwarf.site_args.insert(key, args.clone());
        Ok(args)
    }

    fn read(&mut self, info: &DebugInfo, id: TypeId, span: Span) -> R<Type> {
        info.get(id)
            .map_err(|e| self.error(Diagnostic::error(span, e.to_string())))
    }
}
