//! A type's layout as `sdt types` shows it: members with offsets, sizes
//! and the holes between them, enumerators with their values; and the
//! same types as C definitions that bpftrace reads.

use std::collections::HashSet;
use std::fmt::Write;

use crate::{DebugInfo, Error, Type, TypeId};

/// One struct, union, enum or typedef, laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `struct`, `union`, `enum` or `typedef`.
    pub kind: &'static str,
    pub name: String,
    pub size: u64,
    pub members: Vec<LayoutMember>,
    pub enumerators: Vec<(String, i64)>,
    /// For a typedef: the type it names.
    pub target: Option<String>,
    /// Bytes after the last member.
    pub padding: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutMember {
    /// Empty for an anonymous struct or union.
    pub name: String,
    /// The member as C declares it: `char subnqn[256]`.
    pub declaration: String,
    pub type_name: String,
    pub offset: u64,
    pub size: u64,
    /// `(bit offset within the storage unit at `offset`, bits)`.
    pub bitfield: Option<(u64, u64)>,
    /// Bytes of hole before this member.
    pub hole_before: u64,
}

/// Lays out the type at `id`.
pub fn layout(info: &DebugInfo, id: TypeId) -> Result<Layout, Error> {
    Ok(match info.get(id)? {
        Type::Record(r) => {
            let size = r.size.unwrap_or(0);
            let mut members = Vec::new();
            let mut end = 0u64;
            for m in &r.members {
                let msize = info.size_of(Some(m.ty))?;
                let name = m.name.clone().unwrap_or_default();
                let mut declaration = info.declarator(Some(m.ty), &name)?;
                // A bitfield is shown, as pahole does, at the start of
                // its declared type's storage unit, with the bit in it.
                let (start, stop, bitfield) = match m.bitfield {
                    Some(b) => {
                        declaration += &format!(":{}", b.bits);
                        let unit = msize.max(1);
                        let mut start = b.bit_offset / unit.saturating_mul(8) * unit;
                        if b.bit_offset + b.bits > start.saturating_add(unit).saturating_mul(8) {
                            start = b.bit_offset / 8;
                        }
                        (
                            start,
                            start.saturating_add(unit),
                            Some((b.bit_offset - start * 8, b.bits)),
                        )
                    }
                    None => (m.offset, m.offset.saturating_add(msize), None),
                };
                let hole_before = if r.is_union {
                    0
                } else {
                    start.saturating_sub(end)
                };
                members.push(LayoutMember {
                    name,
                    declaration,
                    type_name: info.c_name(Some(m.ty))?,
                    offset: start,
                    size: msize,
                    bitfield,
                    hole_before,
                });
                end = end.max(stop);
            }
            Layout {
                kind: if r.is_union { "union" } else { "struct" },
                name: r.name.unwrap_or_else(|| "(anonymous)".into()),
                size,
                members,
                enumerators: Vec::new(),
                target: None,
                padding: size.saturating_sub(end),
            }
        }
        Type::Enum(e) => Layout {
            kind: "enum",
            name: e.name.unwrap_or_else(|| "(anonymous)".into()),
            size: e.size,
            members: Vec::new(),
            enumerators: e.values,
            target: None,
            padding: 0,
        },
        Type::Typedef { name, target } => Layout {
            kind: "typedef",
            name,
            size: info.size_of(target)?,
            members: Vec::new(),
            enumerators: Vec::new(),
            target: Some(info.c_name(target)?),
            padding: 0,
        },
        other => Layout {
            kind: "type",
            name: info.c_name(Some(id))?,
            size: info.size_of(Some(id))?,
            members: Vec::new(),
            enumerators: Vec::new(),
            target: Some(format!("{other:?}")),
            padding: 0,
        },
    })
}

impl Layout {
    /// Text in the manner of pahole: one member a line with its offset
    /// and size, holes and padding called out.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        match self.kind {
            "enum" => {
                let _ = writeln!(out, "enum {} {{", self.name);
                for (name, value) in &self.enumerators {
                    let _ = writeln!(out, "\t{name} = {value},");
                }
                let _ = writeln!(out, "}};\t/* size: {} */", self.size);
            }
            "typedef" => {
                let _ = writeln!(
                    out,
                    "typedef {} {};\t/* size: {} */",
                    self.target.as_deref().unwrap_or("void"),
                    self.name,
                    self.size
                );
            }
            "struct" | "union" => {
                let _ = writeln!(out, "{} {} {{", self.kind, self.name);
                let mut holes = 0;
                let mut hole_bytes = 0;
                for m in &self.members {
                    if m.hole_before > 0 {
                        holes += 1;
                        hole_bytes += m.hole_before;
                        let _ = writeln!(out, "\n\t/* XXX {} bytes hole */\n", m.hole_before);
                    }
                    let decl = format!("{};", m.declaration);
                    let position = match m.bitfield {
                        Some((bit, _)) => format!("{:>5}:{:<2}{:>4}", m.offset, bit, m.size),
                        None => format!("{:>5}{:>7}", m.offset, m.size),
                    };
                    let _ = writeln!(out, "\t{decl:<48} /* {position} */");
                }
                if self.padding > 0 {
                    let _ = writeln!(out, "\n\t/* XXX {} bytes padding */", self.padding);
                }
                let _ = writeln!(
                    out,
                    "\n\t/* size: {}, members: {}, holes: {holes}, sum holes: {hole_bytes}, padding: {} */",
                    self.size,
                    self.members.len(),
                    self.padding
                );
                let _ = writeln!(out, "}};");
            }
            _ => {
                let _ = writeln!(out, "{}\t/* size: {} */", self.name, self.size);
            }
        }
        out
    }
}

/// C definitions of the type at `id` and of every type it holds by
/// value, dependencies first, with typedefs spelled out (bpftrace's
/// parser takes struct, union and enum definitions only), then a `BEGIN` block that fills one map of
/// names per enum (`@NAME_names[value] = "ENUMERATOR"`), for bpftrace.
/// Types reached only through pointers are not defined: C needs no
/// definition for a pointer to a struct.
pub fn bpftrace_definitions(info: &DebugInfo, id: TypeId) -> Result<String, Error> {
    let mut emitter = Emitter {
        info,
        done: HashSet::new(),
        defs: String::new(),
        enums: Vec::new(),
    };
    emitter.define(id, 0)?;
    let mut out = emitter.defs;
    if !emitter.enums.is_empty() {
        out += "\nBEGIN\n{\n";
        for (name, values) in &emitter.enums {
            for (enumerator, value) in values {
                let _ = writeln!(out, "\t@{name}_names[{value}] = \"{enumerator}\";");
            }
        }
        out += "}\n";
    }
    Ok(out)
}

struct Emitter<'a> {
    info: &'a DebugInfo,
    done: HashSet<TypeId>,
    defs: String,
    enums: Vec<(String, Vec<(String, i64)>)>,
}

impl Emitter<'_> {
    /// Defines `id` and what it holds by value, once each.
    fn define(&mut self, id: TypeId, depth: u32) -> Result<(), Error> {
        if depth > crate::MAX_DEPTH || !self.done.insert(id) {
            return Ok(());
        }
        match self.info.get(id)? {
            Type::Record(r) => {
                for m in &r.members {
                    self.define_held(m.ty, depth + 1)?;
                }
                if r.name.is_some() {
                    let body = self.body(id, 1, depth)?;
                    let _ = writeln!(self.defs, "{body};\n");
                }
            }
            Type::Enum(e) => {
                if let Some(name) = &e.name {
                    let _ = writeln!(self.defs, "enum {name} {{");
                    for (n, v) in &e.values {
                        let _ = writeln!(self.defs, "\t{n} = {v},");
                    }
                    let _ = writeln!(self.defs, "}};\n");
                    self.enums.push((name.clone(), e.values.clone()));
                }
            }
            // bpftrace takes no typedefs: members spell out what they name.
            Type::Typedef {
                target: Some(t), ..
            } => self.define_held(t, depth + 1)?,
            _ => {}
        }
        Ok(())
    }

    /// Defines what a member of type `id` needs: named records, enums and
    /// typedefs held by value, through arrays and qualifiers, and
    /// typedefs named through pointers.
    fn define_held(&mut self, id: TypeId, depth: u32) -> Result<(), Error> {
        if depth > crate::MAX_DEPTH {
            return Ok(());
        }
        match self.info.get(id)? {
            Type::Array { elem, .. } => self.define_held(elem, depth + 1),
            Type::Qualified {
                target: Some(t), ..
            } => self.define_held(t, depth + 1),
            Type::Pointer { target: Some(t) } => match self.info.get(t)? {
                Type::Typedef { .. } | Type::Pointer { .. } | Type::Qualified { .. } => {
                    self.define_held(t, depth + 1)
                }
                _ => Ok(()),
            },
            Type::Record(r) if r.name.is_none() => {
                for m in &r.members {
                    self.define_held(m.ty, depth + 1)?;
                }
                Ok(())
            }
            Type::Record(_) | Type::Enum(_) | Type::Typedef { .. } => self.define(id, depth + 1),
            _ => Ok(()),
        }
    }

    /// `struct name { ... }`, anonymous members written in place.
    fn body(&self, id: TypeId, indent: usize, depth: u32) -> Result<String, Error> {
        let Type::Record(r) = self.info.get(id)? else {
            return Ok(String::new());
        };
        let kw = if r.is_union { "union" } else { "struct" };
        let mut out = match &r.name {
            Some(n) => format!("{kw} {n} {{\n"),
            None => format!("{kw} {{\n"),
        };
        let tabs = "\t".repeat(indent);
        for m in &r.members {
            let name = m.name.clone().unwrap_or_default();
            let held = self.info.strip(Some(m.ty))?;
            let anonymous = match held.map(|t| self.info.get(t)).transpose()? {
                Some(Type::Record(inner)) => inner.name.is_none(),
                _ => false,
            };
            let mut decl = if let (true, Some(held)) = (anonymous && depth < crate::MAX_DEPTH, held)
            {
                let inner = self.body(held, indent + 1, depth + 1)?;
                if name.is_empty() {
                    inner
                } else {
                    format!("{inner} {name}")
                }
            } else {
                self.info.declarator_without_typedefs(Some(m.ty), &name)?
            };
            if let Some(b) = m.bitfield {
                decl += &format!(":{}", b.bits);
            }
            let _ = writeln!(out, "{tabs}{decl};");
        }
        out += &"\t".repeat(indent - 1);
        out += "}";
        Ok(out)
    }
}
