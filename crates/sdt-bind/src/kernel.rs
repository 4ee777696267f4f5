//! The kernel's C types, from its BTF, for the checker: `curtask`'s
//! `struct task_struct`, casts to kernel structs, and the structs that
//! tracepoint fields point at.
//!
//! The kernel's types point at one another by the thousand (a task leads
//! to its memory map, its files, its cgroups, ...), so converting one with
//! everything it reaches would convert most of the kernel. A struct is
//! converted whole, with the members it holds by value; a struct only
//! pointed at becomes a record with its name and size, and its members
//! are read when the checker first looks into it
//! ([`KernelTypes::complete`]). Every record made here is marked as the
//! kernel's, and every pointer points into the kernel's memory, except
//! where the kernel's BTF tags it `__user`.

use std::collections::HashMap;
use std::sync::Arc;

use sdt_kernel::{Btf, Kind, TypeId};
use sdt_lang::check::Refusal;
use sdt_lang::types::{EnumDef, Field, Record, RecordId, Space, Ty, TypeRegistry};

type R<T> = Result<T, Refusal>;

/// The kernel's BTF, once read, and what was converted from it.
#[derive(Default)]
pub(crate) struct KernelTypes {
    /// `None` until first asked; then the BTF, or why there is none.
    btf: Option<Result<Arc<Btf>, String>>,
    converted: HashMap<TypeId, Ty>,
    /// Names looked up, and what they named: a lookup walks every type,
    /// and the checker asks again at each pass and each tracepoint.
    found: HashMap<String, Option<TypeId>>,
    /// Records whose members are still to be read, by their BTF type.
    pending: HashMap<RecordId, TypeId>,
}

impl KernelTypes {
    fn btf(&mut self) -> Result<Arc<Btf>, String> {
        self.btf
            .get_or_insert_with(|| {
                Btf::vmlinux().map(Arc::new).map_err(|e| {
                    format!("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux): {e}")
                })
            })
            .clone()
    }

    /// The type `name` names in the kernel's BTF, if any.
    pub(crate) fn find(&mut self, name: &str, registry: &mut TypeRegistry) -> R<Option<Ty>> {
        let Ok(btf) = self.btf() else {
            return Ok(None);
        };
        let found = *self
            .found
            .entry(name.to_string())
            .or_insert_with(|| btf.find(name));
        let Some(id) = found else {
            return Ok(None);
        };
        let ty = self.convert(&btf, id, registry, 0)?;
        if let Ty::Record(record) = ty {
            self.complete(record, registry)?;
        }
        Ok(Some(ty))
    }

    /// Reads the members of `record` if it was only named so far.
    pub(crate) fn complete(&mut self, record: RecordId, registry: &mut TypeRegistry) -> R<()> {
        let Some(id) = self.pending.remove(&record) else {
            return Ok(());
        };
        let btf = self.btf().map_err(Refusal::new)?;
        let Kind::Record { members, .. } = btf.get(id).map_err(bad)? else {
            return Ok(());
        };
        let mut fields = Vec::with_capacity(members.len());
        for m in &members {
            let ty = self.convert(&btf, m.ty, registry, 1)?;
            // An anonymous struct or union member is looked into by the
            // names of its own members: it must have them.
            if let (true, Ty::Record(inner)) = (m.name.is_empty(), &ty) {
                self.complete(*inner, registry)?;
            }
            let (offset, bitfield) = placement(registry, &ty, m.bit_offset, m.bits, m.name)?;
            fields.push(Field {
                name: m.name.to_string(),
                ty,
                offset,
                bitfield,
            });
        }
        registry.record_mut(record).fields = fields;
        Ok(())
    }

    fn convert(&mut self, btf: &Btf, id: TypeId, registry: &mut TypeRegistry, depth: u32) -> R<Ty> {
        if let Some(ty) = self.converted.get(&id) {
            return Ok(ty.clone());
        }
        if depth > 64 {
            return Err(Refusal::new("a kernel type nests too deeply"));
        }
        let ty = match btf.get(id).map_err(bad)? {
            Kind::Void | Kind::Other => Ty::Void,
            // Integers of other sizes (`__int128`) are their bytes.
            Kind::Int { size, .. } | Kind::Enum { size, .. } if !matches!(size, 1 | 2 | 4 | 8) => {
                Ty::Array {
                    elem: Box::new(Ty::int(1, false)),
                    len: u64::from(size),
                }
            }
            // C's `char` is signed on the machines sdt runs on, and a
            // signed `char` array reads as a string (`task_struct.comm`).
            Kind::Int { name: "char", .. } => Ty::int(1, true),
            Kind::Int { size, signed, .. } => Ty::int(size as u8, signed),
            // Floating-point members read as unsigned integers of their
            // size, as from DWARF.
            Kind::Float { size } => Ty::int(size.clamp(1, 8) as u8, false),
            Kind::Ptr(target) => {
                let (pointee, space) = self.pointee(btf, target, registry, depth)?;
                Ty::Ptr(Box::new(pointee), space)
            }
            Kind::Array { elem, len } => Ty::Array {
                elem: Box::new(self.convert(btf, elem, registry, depth + 1)?),
                len: u64::from(len),
            },
            Kind::Typedef { ty, .. } | Kind::Qualified(ty) | Kind::Tag { ty, .. } => {
                self.convert(btf, ty, registry, depth + 1)?
            }
            Kind::Enum {
                name,
                size,
                signed,
                values,
            } => {
                let bytes = size as u8;
                let def = EnumDef {
                    name: if name.is_empty() { "(anonymous)" } else { name }.to_string(),
                    bytes,
                    signed,
                    values: values
                        .into_iter()
                        .map(|(n, v)| (n.to_string(), v))
                        .collect(),
                };
                Ty::Enum {
                    id: registry.add_enum(def),
                    bytes,
                    signed,
                }
            }
            Kind::Fwd { name, union } => {
                let record = registry.add_record(Record {
                    name: name.to_string(),
                    is_union: union,
                    size: 0,
                    align: 1,
                    fields: Vec::new(),
                    incomplete: true,
                });
                registry.mark_kernel(record);
                Ty::Record(record)
            }
            Kind::Record {
                name, union, size, ..
            } => {
                let record = registry.add_record(Record {
                    name: if name.is_empty() { "(anonymous)" } else { name }.to_string(),
                    is_union: union,
                    size: u64::from(size),
                    align: btf.align_of(id).map_err(bad)?,
                    fields: Vec::new(),
                    incomplete: false,
                });
                registry.mark_kernel(record);
                self.pending.insert(record, id);
                self.converted.insert(id, Ty::Record(record));
                // Held by value (the caller is not a pointer): its
                // members are part of what holds it.
                if depth > 0 {
                    self.complete(record, registry)?;
                }
                return Ok(Ty::Record(record));
            }
        };
        self.converted.insert(id, ty.clone());
        Ok(ty)
    }

    /// What a pointer to type `target` points at, and into whose memory:
    /// a struct is named, not read (see the module doc), and a `__user`
    /// tag points into the process's memory.
    fn pointee(
        &mut self,
        btf: &Btf,
        target: TypeId,
        registry: &mut TypeRegistry,
        depth: u32,
    ) -> R<(Ty, Space)> {
        let mut at = target;
        let mut space = Space::Kernel;
        for _ in 0..64 {
            match btf.get(at).map_err(bad)? {
                Kind::Tag { name, ty } => {
                    if name == "user" {
                        space = Space::User;
                    }
                    at = ty;
                }
                Kind::Typedef { ty, .. } | Kind::Qualified(ty) => at = ty,
                Kind::Record { .. } => {
                    if let Some(ty) = self.converted.get(&at) {
                        return Ok((ty.clone(), space));
                    }
                    // Depth 0: named only, read when looked into.
                    return Ok((self.convert(btf, at, registry, 0)?, space));
                }
                // A pointer to a function is an address.
                Kind::Other => return Ok((Ty::Void, space)),
                _ => return Ok((self.convert(btf, target, registry, depth + 1)?, space)),
            }
        }
        Err(Refusal::new("a kernel type nests too deeply"))
    }
}

/// Where a member is: its byte offset, and for a bitfield its bits within
/// the storage unit read there (as the DWARF conversion places them).
fn placement(
    registry: &TypeRegistry,
    ty: &Ty,
    bit_offset: u32,
    bits: u32,
    name: &str,
) -> R<(u64, Option<(u8, u8)>)> {
    let (bit_offset, bits) = (u64::from(bit_offset), u64::from(bits));
    if bits == 0 {
        return Ok((bit_offset / 8, None));
    }
    let unit = registry.c_size(ty).clamp(1, 8);
    let mut start = bit_offset / (unit * 8) * unit;
    if bit_offset + bits > (start + unit) * 8 {
        start = bit_offset / 8;
    }
    let within = bit_offset - start * 8;
    if within + bits > 64 {
        return Err(Refusal::new(format!("bitfield `{name}` straddles 8 bytes")));
    }
    Ok((start, Some((within as u8, bits as u8))))
}

fn bad(e: sdt_kernel::BtfError) -> Refusal {
    Refusal::new(format!("the kernel's BTF is unreadable: {e}"))
}
