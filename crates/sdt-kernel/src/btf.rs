//! BTF, the kernel's own description of its C types
//! (`/sys/kernel/btf/vmlinux`, and `/sys/kernel/btf/MODULE` for modules).
//!
//! # Why a parser of our own
//!
//! A script names two or three kernel types (`struct task_struct` and
//! what its members lead to), and vmlinux's BTF describes some 130,000.
//! This parser reads the blob where it lies: one pass records where each
//! type starts, and a type is decoded only when asked for, borrowing its
//! name from the blob. The crates that parse BTF did not fit: `btf-rs` is
//! LGPL-2.1, which sdt, MIT or Apache-2.0 and linked statically, cannot
//! take in; `btfparse` and `btf` decode every type of the file into owned
//! values up front, and `aya-obj`'s parser serves aya's loader (its
//! relocations and sanitizing) rather than looking types up. The format
//! is small, stable and documented (the kernel's `Documentation/bpf/btf.rst`),
//! so the part sdt needs is a few hundred lines.
//!
//! # The format, as read here
//!
//! A 24-byte header (magic `0xeb9f`, version 1, the offsets and lengths of
//! the type and string sections after it), then the types, each a 12-byte
//! `btf_type` (name offset, `info` with the kind, a flag and a count, then
//! a size or a type id) followed by what its kind adds (members, enum
//! values, array bounds), then the strings. Type ids count from 1 (0 is
//! `void`) in file order. A module's BTF is *split*: its ids and string
//! offsets continue after those of vmlinux, which [`Btf::parse_split`]
//! takes as its base. Everything read is checked against the blob's
//! bounds, so a corrupt file gives a [`BtfError`], never a panic.

use std::sync::Arc;

/// A type's number in its BTF (0 is `void`).
pub type TypeId = u32;

/// What a blob could not be read as.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    #[error("not BTF: the magic number is wrong")]
    BadMagic,
    #[error("BTF version {0} is not supported (only 1 is)")]
    BadVersion(u8),
    #[error("the BTF is truncated or its sections lie outside it")]
    Truncated,
    #[error("BTF type {id} has unknown kind {kind}")]
    BadKind { id: TypeId, kind: u32 },
    #[error("BTF has no type {0}")]
    BadId(TypeId),
}

type R<T> = Result<T, BtfError>;

const MAGIC: u16 = 0xeb9f;
const HEADER: usize = 24;
const TYPE: usize = 12;

/// The kernel's `BTF_KIND_*` numbers.
mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// One BTF blob: vmlinux's, or a module's split over it.
#[derive(Debug)]
pub struct Btf {
    data: Vec<u8>,
    types: std::ops::Range<usize>,
    strings: std::ops::Range<usize>,
    /// Where each type of this blob starts in `data`, by id - `first_id`.
    starts: Vec<u32>,
    /// The id of this blob's first type: 1, or one past the base's last.
    first_id: TypeId,
    /// Bytes of the base's strings, which this blob's offsets count on.
    string_base: u32,
    base: Option<Arc<Btf>>,
}

/// A decoded type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    Void,
    Int {
        name: &'a str,
        size: u32,
        signed: bool,
        /// Bits of the value (a `bool` has 1, a `_Bool` bitfield less).
        bits: u8,
    },
    Ptr(TypeId),
    Array {
        elem: TypeId,
        len: u32,
    },
    /// A struct or union.
    Record {
        name: &'a str,
        union: bool,
        size: u32,
        members: Vec<Member<'a>>,
    },
    Enum {
        name: &'a str,
        size: u32,
        signed: bool,
        values: Vec<(&'a str, i64)>,
    },
    /// A struct or union declared but not defined here.
    Fwd {
        name: &'a str,
        union: bool,
    },
    Typedef {
        name: &'a str,
        ty: TypeId,
    },
    /// `const`, `volatile` or `restrict`: the type it qualifies.
    Qualified(TypeId),
    /// A type tag (`__user` where the kernel was built with them).
    Tag {
        name: &'a str,
        ty: TypeId,
    },
    Float {
        size: u32,
    },
    /// A function, its prototype, a variable, a data section or a
    /// declaration tag: nothing a value has.
    Other,
}

/// A member of a struct or union.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// Empty for an anonymous struct or union member.
    pub name: &'a str,
    pub ty: TypeId,
    /// Bits from the start of the record.
    pub bit_offset: u32,
    /// Bits of a bitfield; 0 for a whole member.
    pub bits: u32,
}

impl Btf {
    /// Parses a complete BTF blob, such as `/sys/kernel/btf/vmlinux`.
    pub fn parse(data: Vec<u8>) -> R<Btf> {
        Btf::with_base(data, None)
    }

    /// Parses a module's split BTF, whose ids and strings continue those
    /// of `base`.
    pub fn parse_split(data: Vec<u8>, base: Arc<Btf>) -> R<Btf> {
        Btf::with_base(data, Some(base))
    }

    /// Reads the running kernel's BTF.
    pub fn vmlinux() -> std::io::Result<Btf> {
        let data = std::fs::read("/sys/kernel/btf/vmlinux")?;
        Btf::parse(data).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    fn with_base(data: Vec<u8>, base: Option<Arc<Btf>>) -> R<Btf> {
        // BTF is in the byte order of the machine that wrote it, and sdt
        // reads the kernel it runs on: a blob of the other order reads as
        // a wrong magic number.
        let magic = data.get(..2).ok_or(BtfError::Truncated)?;
        if u16::from_ne_bytes([magic[0], magic[1]]) != MAGIC {
            return Err(BtfError::BadMagic);
        }
        let version = *data.get(2).ok_or(BtfError::Truncated)?;
        if version != 1 {
            return Err(BtfError::BadVersion(version));
        }
        let word = |at: usize| read_u32(&data, at);
        let header_len = word(4)? as usize;
        if header_len < HEADER {
            return Err(BtfError::Truncated);
        }
        let section = |off: usize, len: usize| -> R<std::ops::Range<usize>> {
            let start = header_len
                .checked_add(word(off)? as usize)
                .ok_or(BtfError::Truncated)?;
            let end = start
                .checked_add(word(len)? as usize)
                .ok_or(BtfError::Truncated)?;
            if end > data.len() {
                return Err(BtfError::Truncated);
            }
            Ok(start..end)
        };
        let types = section(8, 12)?;
        let strings = section(16, 20)?;
        let (first_id, string_base) = match &base {
            Some(b) => (b.next_id(), b.string_len()),
            None => (1, 0),
        };
        let mut btf = Btf {
            data,
            types,
            strings,
            starts: Vec::new(),
            first_id,
            string_base,
            base,
        };
        btf.index()?;
        Ok(btf)
    }

    /// Records where each type starts.
    fn index(&mut self) -> R<()> {
        let mut at = self.types.start;
        while at < self.types.end {
            let id = self.first_id + self.starts.len() as u32;
            self.starts
                .push(u32::try_from(at).map_err(|_| BtfError::Truncated)?);
            at = at
                .checked_add(TYPE + self.extra(id, at)?)
                .ok_or(BtfError::Truncated)?;
        }
        if at != self.types.end {
            return Err(BtfError::Truncated);
        }
        Ok(())
    }

    /// Bytes that follow the `btf_type` at `at`.
    fn extra(&self, id: TypeId, at: usize) -> R<usize> {
        let info = read_u32(&self.data, at + 4)?;
        let vlen = (info & 0xffff) as usize;
        Ok(match info >> 24 & 0x1f {
            kind::INT | kind::VAR | kind::DECL_TAG => 4,
            kind::ARRAY => 12,
            kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * vlen,
            kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
            kind::PTR
            | kind::FWD
            | kind::TYPEDEF
            | kind::VOLATILE
            | kind::CONST
            | kind::RESTRICT
            | kind::FUNC
            | kind::FLOAT
            | kind::TYPE_TAG => 0,
            other => return Err(BtfError::BadKind { id, kind: other }),
        })
    }

    /// One past the last id, here or in the base.
    fn next_id(&self) -> TypeId {
        self.first_id + self.starts.len() as u32
    }

    fn string_len(&self) -> u32 {
        self.string_base + self.strings.len() as u32
    }

    /// How many types there are, the base's included.
    pub fn len(&self) -> usize {
        self.next_id() as usize - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The string at `offset` of the string section (the base's first).
    fn string(&self, offset: u32) -> &str {
        if offset < self.string_base {
            return self.base.as_ref().map_or("", |b| b.string(offset));
        }
        let start = self.strings.start + (offset - self.string_base) as usize;
        let bytes = self.data.get(start..self.strings.end).unwrap_or_default();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..end]).unwrap_or("")
    }

    /// The blob that holds `id`, and where its type starts.
    fn locate(&self, id: TypeId) -> R<(&Btf, usize)> {
        if id < self.first_id {
            return match &self.base {
                Some(b) => b.locate(id),
                None => Err(BtfError::BadId(id)),
            };
        }
        let start = self
            .starts
            .get((id - self.first_id) as usize)
            .ok_or(BtfError::BadId(id))?;
        Ok((self, *start as usize))
    }

    /// The type `id`.
    pub fn get(&self, id: TypeId) -> R<Kind<'_>> {
        if id == 0 {
            return Ok(Kind::Void);
        }
        let (btf, at) = self.locate(id)?;
        btf.decode(id, at)
    }

    fn decode(&self, id: TypeId, at: usize) -> R<Kind<'_>> {
        let word = |n: usize| read_u32(&self.data, at + 4 * n);
        let name = self.string(word(0)?);
        let info = word(1)?;
        let size_or_type = word(2)?;
        let vlen = (info & 0xffff) as usize;
        let flag = info >> 31 == 1;
        let body = at + TYPE;
        let body_word = |n: usize| read_u32(&self.data, body + 4 * n);
        Ok(match info >> 24 & 0x1f {
            kind::INT => {
                let encoding = body_word(0)?;
                Kind::Int {
                    name,
                    size: size_or_type,
                    signed: encoding >> 24 & 1 == 1,
                    bits: (encoding & 0xff) as u8,
                }
            }
            kind::PTR => Kind::Ptr(size_or_type),
            kind::ARRAY => Kind::Array {
                elem: body_word(0)?,
                len: body_word(2)?,
            },
            kind::STRUCT | kind::UNION => {
                let mut members = Vec::with_capacity(vlen);
                for m in 0..vlen {
                    let offset = body_word(3 * m + 2)?;
                    let (bit_offset, bits) = if flag {
                        (offset & 0xff_ffff, offset >> 24)
                    } else {
                        (offset, 0)
                    };
                    members.push(Member {
                        name: self.string(body_word(3 * m)?),
                        ty: body_word(3 * m + 1)?,
                        bit_offset,
                        bits,
                    });
                }
                Kind::Record {
                    name,
                    union: info >> 24 & 0x1f == kind::UNION,
                    size: size_or_type,
                    members,
                }
            }
            kind::ENUM => {
                let values = (0..vlen)
                    .map(|v| {
                        let raw = body_word(2 * v + 1)?;
                        let value = if flag {
                            i64::from(raw as i32)
                        } else {
                            i64::from(raw)
                        };
                        Ok((self.string(body_word(2 * v)?), value))
                    })
                    .collect::<R<_>>()?;
                Kind::Enum {
                    name,
                    size: size_or_type,
                    signed: flag,
                    values,
                }
            }
            kind::ENUM64 => {
                let values = (0..vlen)
                    .map(|v| {
                        let low = u64::from(body_word(3 * v + 1)?);
                        let high = u64::from(body_word(3 * v + 2)?);
                        Ok((self.string(body_word(3 * v)?), (high << 32 | low) as i64))
                    })
                    .collect::<R<_>>()?;
                Kind::Enum {
                    name,
                    size: size_or_type,
                    signed: flag,
                    values,
                }
            }
            kind::FWD => Kind::Fwd { name, union: flag },
            kind::TYPEDEF => Kind::Typedef {
                name,
                ty: size_or_type,
            },
            kind::VOLATILE | kind::CONST | kind::RESTRICT => Kind::Qualified(size_or_type),
            kind::TYPE_TAG => Kind::Tag {
                name,
                ty: size_or_type,
            },
            kind::FLOAT => Kind::Float { size: size_or_type },
            kind::FUNC | kind::FUNC_PROTO | kind::VAR | kind::DATASEC | kind::DECL_TAG => {
                Kind::Other
            }
            other => return Err(BtfError::BadKind { id, kind: other }),
        })
    }

    /// The type a C name names: `struct task_struct`, `union u`, `enum e`,
    /// or a typedef or base type (`pid_t`, `unsigned int`). A definition
    /// wins over a forward declaration; `None` when there is neither.
    pub fn find(&self, c_name: &str) -> Option<TypeId> {
        let c_name = c_name.trim();
        let (wanted, name): (&[u32], &str) = match c_name.split_once(' ') {
            Some(("struct", tag)) => (&[kind::STRUCT], tag.trim()),
            Some(("union", tag)) => (&[kind::UNION], tag.trim()),
            Some(("enum", tag)) => (&[kind::ENUM, kind::ENUM64], tag.trim()),
            _ => (&[kind::TYPEDEF, kind::INT, kind::FLOAT], c_name),
        };
        let mut declared = None;
        for id in 1..self.next_id() {
            let Ok((btf, at)) = self.locate(id) else {
                continue;
            };
            let (Ok(name_off), Ok(info)) = (read_u32(&btf.data, at), read_u32(&btf.data, at + 4))
            else {
                continue;
            };
            let k = info >> 24 & 0x1f;
            let fwd_union = info >> 31 == 1;
            let is_fwd_of = k == kind::FWD
                && (wanted == [kind::STRUCT] && !fwd_union || wanted == [kind::UNION] && fwd_union);
            if !(wanted.contains(&k) || is_fwd_of) || btf.string(name_off) != name {
                continue;
            }
            if k == kind::FWD {
                declared.get_or_insert(id);
            } else {
                return Some(id);
            }
        }
        declared
    }

    /// The bytes a value of type `id` takes (0 for `void` and functions).
    pub fn size_of(&self, id: TypeId) -> R<u64> {
        self.layout(id, 0).map(|(size, _)| size)
    }

    /// The alignment of type `id`, as C lays it out.
    pub fn align_of(&self, id: TypeId) -> R<u64> {
        self.layout(id, 0).map(|(_, align)| align)
    }

    fn layout(&self, id: TypeId, depth: u32) -> R<(u64, u64)> {
        if depth > 64 {
            return Err(BtfError::BadId(id));
        }
        Ok(match self.get(id)? {
            Kind::Int { size, .. } | Kind::Float { size } | Kind::Enum { size, .. } => {
                (u64::from(size), u64::from(size.clamp(1, 8)))
            }
            Kind::Ptr(_) => (8, 8),
            Kind::Array { elem, len } => {
                let (size, align) = self.layout(elem, depth + 1)?;
                (size.saturating_mul(u64::from(len)), align)
            }
            Kind::Record { size, members, .. } => {
                let mut align = 1;
                for m in members {
                    if m.bits == 0 {
                        align = align.max(self.layout(m.ty, depth + 1)?.1);
                    }
                }
                (u64::from(size), align)
            }
            Kind::Typedef { ty, .. } | Kind::Qualified(ty) | Kind::Tag { ty, .. } => {
                self.layout(ty, depth + 1)?
            }
            Kind::Void | Kind::Fwd { .. } | Kind::Other => (0, 1),
        })
    }
}

fn read_u32(data: &[u8], at: usize) -> R<u32> {
    let bytes = data.get(at..at + 4).ok_or(BtfError::Truncated)?;
    Ok(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob of `types` (each `btf_type` and what follows it, as words)
    /// and `strings`.
    pub(crate) fn blob(types: &[u32], strings: &[u8]) -> Vec<u8> {
        let type_len = 4 * types.len() as u32;
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_ne_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [HEADER as u32, 0, type_len, type_len, strings.len() as u32] {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        for w in types {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(strings);
        out
    }

    const STRINGS: &[u8] = b"\0int\0task\0pid\0parent\0flag\0pid_t\0state\0RUNNING\0";
    const INT: u32 = 1;
    const TASK: u32 = 5;
    const PID: u32 = 10;
    const PARENT: u32 = 14;
    const FLAG: u32 = 21;
    const PID_T: u32 = 26;
    const STATE: u32 = 32;
    const RUNNING: u32 = 38;

    fn sample() -> Btf {
        let info = |k: u32, flag: u32, vlen: u32| flag << 31 | k << 24 | vlen;
        let types = [
            // [1] int: 4 bytes, signed, 32 bits.
            INT,
            info(kind::INT, 0, 0),
            4,
            1 << 24 | 32,
            // [2] typedef pid_t -> 1.
            PID_T,
            info(kind::TYPEDEF, 0, 0),
            1,
            // [3] struct task { pid_t pid; struct task *parent; int flag:3; } (kflag).
            TASK,
            info(kind::STRUCT, 1, 3),
            24,
            PID,
            2,
            0,
            PARENT,
            4,
            64,
            FLAG,
            1,
            3 << 24 | 128,
            // [4] struct task *.
            0,
            info(kind::PTR, 0, 0),
            3,
            // [5] enum state { RUNNING = -1 } (signed).
            STATE,
            info(kind::ENUM, 1, 1),
            4,
            RUNNING,
            u32::MAX,
            // [6] forward declaration of struct task.
            TASK,
            info(kind::FWD, 0, 0),
            0,
        ];
        Btf::parse(blob(&types, STRINGS)).unwrap()
    }

    #[test]
    fn types_are_found_and_decoded() {
        let btf = sample();
        assert_eq!(btf.len(), 6);
        assert_eq!(btf.find("struct task"), Some(3));
        assert_eq!(btf.find("pid_t"), Some(2));
        assert_eq!(btf.find("int"), Some(1));
        assert_eq!(btf.find("enum state"), Some(5));
        assert_eq!(btf.find("struct nope"), None);
        assert_eq!(btf.find("union task"), None);
        let Kind::Record {
            name,
            size,
            members,
            union,
        } = btf.get(3).unwrap()
        else {
            panic!()
        };
        assert_eq!((name, size, union), ("task", 24, false));
        assert_eq!(members.len(), 3);
        assert_eq!(
            (members[1].name, members[1].ty, members[1].bit_offset),
            ("parent", 4, 64)
        );
        assert_eq!((members[2].bit_offset, members[2].bits), (128, 3));
        assert_eq!(btf.get(4).unwrap(), Kind::Ptr(3));
        assert_eq!(
            btf.get(5).unwrap(),
            Kind::Enum {
                name: "state",
                size: 4,
                signed: true,
                values: vec![("RUNNING", -1)]
            }
        );
        assert_eq!(btf.size_of(3).unwrap(), 24);
        assert_eq!(btf.align_of(3).unwrap(), 8);
        assert_eq!(btf.size_of(2).unwrap(), 4);
        assert_eq!(btf.get(0).unwrap(), Kind::Void);
        assert_eq!(btf.get(7), Err(BtfError::BadId(7)));
    }

    #[test]
    fn split_btf_continues_the_base() {
        let base = Arc::new(sample());
        let info = kind::PTR << 24;
        // [7] a pointer to the base's struct task, named by nothing, and a
        // typedef whose name is in the split's own strings.
        let types = [0, info, 3, STRINGS.len() as u32 + 1, kind::TYPEDEF << 24, 7];
        let strings = b"\0task_p\0";
        let module = Btf::parse_split(blob(&types, strings), base.clone()).unwrap();
        assert_eq!(module.len(), 8);
        assert_eq!(module.get(7).unwrap(), Kind::Ptr(3));
        assert_eq!(module.find("struct task"), Some(3));
        let Kind::Typedef { name, ty } = module.get(8).unwrap() else {
            panic!()
        };
        assert_eq!((name, ty), ("task_p", 7));
        assert_eq!(module.find("task_p"), Some(8));
    }

    #[test]
    fn corrupt_blobs_are_errors() {
        let good = blob(&[INT, kind::INT << 24, 4, 32], STRINGS);
        assert!(Btf::parse(good.clone()).is_ok());
        for cut in 0..good.len() {
            assert!(Btf::parse(good[..cut].to_vec()).is_err(), "cut at {cut}");
        }
        let mut bad_kind = good.clone();
        bad_kind[HEADER + 7] = 31;
        assert!(matches!(
            Btf::parse(bad_kind),
            Err(BtfError::BadKind { .. })
        ));
        let mut bad_magic = good;
        bad_magic[0] ^= 0xff;
        assert_eq!(Btf::parse(bad_magic).unwrap_err(), BtfError::BadMagic);
        // A type that points past the end, or at itself.
        let looped = Btf::parse(blob(&[0, kind::TYPEDEF << 24, 1], b"\0")).unwrap();
        assert!(looped.size_of(1).is_err());
        let dangling = Btf::parse(blob(&[0, kind::PTR << 24, 9], b"\0")).unwrap();
        assert_eq!(dangling.get(1).unwrap(), Kind::Ptr(9));
        assert!(dangling.get(9).is_err());
    }
}
