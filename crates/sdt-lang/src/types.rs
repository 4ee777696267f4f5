//! The types of the language, and the C types that scripts read.
//!
//! Values in BPF registers are 64 bits wide; a [`Ty::Int`] remembers the
//! width and signedness a value had in the traced program, so that casts
//! truncate and printing shows the right sign. Strings, buffers, tuples and
//! structs are fixed-size byte blocks, which is what map keys and ring
//! buffer records need.
//!
//! C types come from struct, union, enum and typedef definitions in the
//! script ([`crate::cdecl`]) or from the traced binary's debug
//! information. They live in a [`TypeRegistry`] and are referred to by
//! index, because they are recursive (`struct node { struct node *next; }`).

use std::collections::HashMap;
use std::fmt;

/// A type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// Nothing: the type of a statement-like call such as `printf`.
    Void,
    /// `true` or `false`: a 0 or 1 in a register, one byte in C memory.
    Bool,
    Int {
        bytes: u8,
        signed: bool,
    },
    /// An integer whose values have names.
    Enum {
        id: EnumId,
        bytes: u8,
        signed: bool,
    },
    /// An address, in the traced process's memory or the kernel's.
    Ptr(Box<Ty>, Space),
    Array {
        elem: Box<Ty>,
        len: u64,
    },
    Record(RecordId),
    /// A NUL-terminated string of at most `size - 1` bytes, in a buffer of
    /// `size` bytes padded with NULs.
    Str {
        size: u32,
    },
    /// Bytes of a known length, from `buf()`: printed with `%r`.
    Buf {
        size: u32,
    },
    Tuple(Vec<Ty>),
    /// A value that prints in its own way: see [`Shown`].
    Shown(Shown),
    /// An aggregation, which only a map holds.
    Agg(Agg),
}

/// Whose memory a pointer points into, which decides how it is read:
/// `bpf_probe_read_user` or `bpf_probe_read_kernel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// The traced process's (the current task's user memory).
    User,
    /// The kernel's: `curtask` and what kernel structs point at.
    Kernel,
}

/// The aggregating functions, as map value types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Agg {
    Count,
    Sum {
        signed: bool,
    },
    Avg {
        signed: bool,
    },
    Min {
        signed: bool,
    },
    Max {
        signed: bool,
    },
    Stats {
        signed: bool,
    },
    Hist {
        bits: u8,
    },
    Lhist {
        min: i64,
        max: i64,
        step: i64,
    },
    /// `tseries(value, interval, count[, how])`: a value for each of the
    /// last `count` intervals of `interval_ns`, the interval's number
    /// modulo `count` in the key.
    TSeries {
        interval_ns: u64,
        count: u32,
        how: TSeriesAgg,
    },
}

/// How `tseries()` keeps the values of one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TSeriesAgg {
    /// The last value.
    Last,
    Sum,
    Avg,
    Min,
    Max,
}

impl TSeriesAgg {
    /// The aggregation `tseries()`'s last argument names.
    pub fn named(name: &str) -> Option<TSeriesAgg> {
        Some(match name {
            "avg" => TSeriesAgg::Avg,
            "max" => TSeriesAgg::Max,
            "min" => TSeriesAgg::Min,
            "sum" => TSeriesAgg::Sum,
            _ => return None,
        })
    }
}

impl Agg {
    pub fn name(self) -> &'static str {
        match self {
            Agg::Count => "count",
            Agg::Sum { .. } => "sum",
            Agg::Avg { .. } => "avg",
            Agg::Min { .. } => "min",
            Agg::Max { .. } => "max",
            Agg::Stats { .. } => "stats",
            Agg::Hist { .. } => "hist",
            Agg::Lhist { .. } => "lhist",
            Agg::TSeries { .. } => "tseries",
        }
    }

    /// Bytes of the per-CPU value: one to three `u64`s. Histograms keep,
    /// per bucket (the bucket is in the key), the count and the sum of the
    /// values counted there: the sum is what a Prometheus histogram's
    /// `_sum` reports. A time series keeps, per interval (its number
    /// modulo the count is in the key), the value, what decides how
    /// another value changes it (the time it was set, or how many values
    /// an average has), and the interval's number.
    pub fn value_size(self) -> u32 {
        match self {
            Agg::Count | Agg::Sum { .. } => 8,
            Agg::TSeries { .. } => 24,
            _ => 16,
        }
    }

    /// The type of the aggregation's value read in an expression (its
    /// per-CPU values merged), or `None` when it has no single number.
    pub fn read_type(self) -> Option<Ty> {
        match self {
            Agg::Count => Some(UINT64),
            Agg::Sum { signed }
            | Agg::Min { signed }
            | Agg::Max { signed }
            | Agg::Avg { signed } => Some(Ty::Int { bytes: 8, signed }),
            Agg::Stats { .. } | Agg::Hist { .. } | Agg::Lhist { .. } | Agg::TSeries { .. } => None,
        }
    }

    pub fn is_histogram(self) -> bool {
        matches!(self, Agg::Hist { .. } | Agg::Lhist { .. })
    }

    /// Whether the key holds a bucket after the user's keys: a
    /// histogram's, or a time series' interval.
    pub fn has_bucket(self) -> bool {
        self.is_histogram() || matches!(self, Agg::TSeries { .. })
    }
}

/// A value that prints in its own way: a number or a few words in the
/// kernel, text that only user space can make when it prints (a symbol, a
/// name, a message, a time).
///
/// Each kind's facts are here: its name in messages, the bytes it takes,
/// whether it is a scalar (an integer in a register, which `==` and `<`
/// compare but arithmetic refuses), and the number `printf`'s integer
/// conversions see. How it prints is one match arm in `sdt-runtime`'s
/// `value::render_shown`, which matches every kind with no fallback. So
/// adding one takes: a variant here, with an arm in each method below; its
/// rendering there; and the builtin that makes it (an entry in
/// `check/builtins.rs` giving `Ty::Shown(Shown::New)`). The compiler
/// points at every place that is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shown {
    /// A code address, printed as a symbol of its process (`usym`): the
    /// address, then the process id.
    USym,
    /// A user stack (`ustack`): a stack id, then the process id.
    UStack { mode: StackMode, depth: u32 },
    /// A kernel stack (`kstack`): a stack id, negative for none (a probe
    /// that interrupted user code has no kernel stack).
    KStack { mode: StackMode, depth: u32 },
    /// A kernel address, printed as the kernel symbol it is in (`ksym`).
    KSym,
    /// A probe's full name (`probe`), by its id.
    Probe,
    /// The traced function's name (`func`), by its id.
    Func,
    /// A user id printed as a name (`username`).
    Username,
    /// An errno value printed as its message (`strerror`).
    Strerror,
    /// A signal number printed as its description (`signal_name`).
    SignalName,
    /// An IP address printed in its usual notation (`ntop`): IPv4 in the
    /// low 4 bytes of an integer (network order, as in `struct in_addr`),
    /// or IPv6 as 16 bytes.
    Inet { v6: bool },
    /// A timestamp to print with a time format (`strftime`), by the
    /// format's id.
    Timestamp { format: u32 },
}

/// How a stack prints: bpftrace's modes (`ustack(perf)`, the
/// `stack_mode` configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StackMode {
    /// `symbol+offset`, indented.
    #[default]
    Bpftrace,
    /// As `perf script`: the address, `symbol+offset` and the object.
    Perf,
    /// The address alone (bpftrace 0.18 and later).
    Raw,
    /// The object's build id and the file offset, for symbolizing
    /// elsewhere (bpftrace 0.25 and later).
    BuildId,
}

impl StackMode {
    /// The mode a name (as bpftrace takes it) stands for.
    pub fn named(name: &str) -> Option<StackMode> {
        Some(match name {
            "bpftrace" => StackMode::Bpftrace,
            "perf" => StackMode::Perf,
            "raw" => StackMode::Raw,
            "build_id" => StackMode::BuildId,
            _ => return None,
        })
    }
}

impl Shown {
    /// How the type reads in messages.
    pub fn name(self) -> &'static str {
        match self {
            Shown::USym => "usym",
            Shown::UStack { .. } => "ustack",
            Shown::KStack { .. } => "kstack",
            Shown::KSym => "ksym",
            Shown::Probe => "probe",
            Shown::Func => "func",
            Shown::Username => "username",
            Shown::Strerror => "strerror",
            Shown::SignalName => "signal_name",
            Shown::Inet { .. } => "inet",
            Shown::Timestamp { .. } => "timestamp",
        }
    }

    /// Bytes a value takes in a map key, a map value or a record.
    pub fn value_size(self) -> u32 {
        match self {
            Shown::Probe
            | Shown::KStack { .. }
            | Shown::KSym
            | Shown::Func
            | Shown::Username
            | Shown::Strerror
            | Shown::SignalName
            | Shown::Inet { v6: false }
            | Shown::Timestamp { .. } => 8,
            // Two words: the address or stack id, and the process.
            Shown::USym | Shown::UStack { .. } => 16,
            Shown::Inet { v6: true } => 16,
        }
    }

    /// Whether a value is one word in a register.
    pub fn is_scalar(self) -> bool {
        self.value_size() == 8
    }

    /// The number that `printf`'s integer conversions (`%d`, `%x`, ...)
    /// print for a value, as the integer type it is read as from the
    /// value's first word; `None` where they print its text.
    pub fn number(self) -> Option<Ty> {
        match self {
            Shown::USym | Shown::KSym | Shown::Probe | Shown::Func | Shown::Timestamp { .. } => {
                Some(UINT64)
            }
            Shown::Username => Some(UINT32),
            Shown::Strerror | Shown::SignalName => Some(INT64),
            Shown::UStack { .. } | Shown::KStack { .. } | Shown::Inet { .. } => None,
        }
    }
}

pub const INT64: Ty = Ty::Int {
    bytes: 8,
    signed: true,
};
pub const UINT64: Ty = Ty::Int {
    bytes: 8,
    signed: false,
};
pub const BOOL: Ty = Ty::Bool;
pub const UINT8: Ty = Ty::Int {
    bytes: 1,
    signed: false,
};
pub const UINT32: Ty = Ty::Int {
    bytes: 4,
    signed: false,
};

impl Ty {
    pub fn int(bytes: u8, signed: bool) -> Ty {
        Ty::Int { bytes, signed }
    }

    /// A pointer into the traced process's memory.
    pub fn ptr(pointee: Ty) -> Ty {
        Ty::Ptr(Box::new(pointee), Space::User)
    }

    /// A pointer into the kernel's memory.
    pub fn kernel_ptr(pointee: Ty) -> Ty {
        Ty::Ptr(Box::new(pointee), Space::Kernel)
    }

    /// Whose memory a pointer points into; `None` for other types.
    pub fn space(&self) -> Option<Space> {
        match self {
            Ty::Ptr(_, space) => Some(*space),
            _ => None,
        }
    }

    /// Whether values of this type are integers in a register. Booleans
    /// are: as in bpftrace, they take part in arithmetic as 0 and 1.
    pub fn is_integer(&self) -> bool {
        matches!(self, Ty::Int { .. } | Ty::Enum { .. } | Ty::Bool)
    }

    /// Whether values are scalars: integers, pointers and the
    /// integer-backed values that print in their own way.
    pub fn is_scalar(&self) -> bool {
        match self {
            Ty::Int { .. } | Ty::Bool | Ty::Enum { .. } | Ty::Ptr(..) => true,
            Ty::Shown(shown) => shown.is_scalar(),
            _ => false,
        }
    }

    pub fn is_signed(&self) -> bool {
        matches!(
            self,
            Ty::Int { signed: true, .. } | Ty::Enum { signed: true, .. }
        )
    }

    pub fn is_string(&self) -> bool {
        matches!(self, Ty::Str { .. })
    }

    /// Bytes a value takes in a map key, a map value or a record.
    /// Integers always take 8, as in registers.
    pub fn value_size(&self, registry: &TypeRegistry) -> u32 {
        match self {
            Ty::Void => 0,
            Ty::Int { .. } | Ty::Bool | Ty::Enum { .. } | Ty::Ptr(..) => 8,
            Ty::Shown(shown) => shown.value_size(),
            Ty::Str { size } => *size,
            // The length read, then the bytes.
            Ty::Buf { size } => 8 + size,
            Ty::Tuple(items) => items
                .iter()
                .map(|t| t.value_size(registry).next_multiple_of(8))
                .sum(),
            Ty::Array { elem, len } => {
                (registry.c_size(elem) * len).min(u64::from(u32::MAX)) as u32
            }
            Ty::Record(id) => registry.record(*id).size as u32,
            Ty::Agg(agg) => agg.value_size(),
        }
    }

    /// `v` truncated to this integer type's width, then extended by its
    /// sign; other types leave it alone.
    pub fn truncate(&self, v: i64) -> i64 {
        match self {
            Ty::Int { bytes, signed } | Ty::Enum { bytes, signed, .. } if *bytes < 8 => {
                let shift = 64 - 8 * u32::from(*bytes);
                if *signed {
                    (v << shift) >> shift
                } else {
                    ((v as u64) << shift >> shift) as i64
                }
            }
            _ => v,
        }
    }

    /// The type of `a op b`, as bpftrace gives it: a 64-bit integer that
    /// is signed only when both sides are signed. An unsigned side of any
    /// width (or a pointer) makes the result, and comparisons, unsigned:
    /// `(uint8)3 + (int8)-5` is 18446744073709551614, `(uint32)1 > -1` is
    /// false.
    pub fn arithmetic(a: &Ty, b: &Ty) -> Ty {
        Ty::Int {
            bytes: 8,
            signed: a.is_signed() && b.is_signed(),
        }
    }

    /// Offsets of a tuple's items in its value.
    pub fn tuple_offsets(items: &[Ty], registry: &TypeRegistry) -> Vec<u32> {
        let mut at = 0;
        items
            .iter()
            .map(|t| {
                let here = at;
                at += t.value_size(registry).next_multiple_of(8);
                here
            })
            .collect()
    }

    /// How the type reads in messages.
    pub fn display<'a>(&'a self, registry: &'a TypeRegistry) -> TyDisplay<'a> {
        TyDisplay { ty: self, registry }
    }
}

pub struct TyDisplay<'a> {
    ty: &'a Ty,
    registry: &'a TypeRegistry,
}

impl fmt::Display for TyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.registry;
        match self.ty {
            Ty::Void => f.write_str("none"),
            Ty::Bool => f.write_str("bool"),
            Ty::Int { bytes, signed } => {
                write!(f, "{}int{}", if *signed { "" } else { "u" }, bytes * 8)
            }
            Ty::Enum { id, .. } => write!(f, "enum {}", r.enum_def(*id).name),
            Ty::Ptr(inner, _) => write!(f, "{} *", inner.display(r)),
            // C's order: `int32[2][3]` is two arrays of three.
            Ty::Array { .. } => {
                let mut dims = Vec::new();
                let mut inner = self.ty;
                while let Ty::Array { elem, len } = inner {
                    dims.push(*len);
                    inner = elem;
                }
                write!(f, "{}", inner.display(r))?;
                dims.iter().try_for_each(|len| write!(f, "[{len}]"))
            }
            Ty::Record(id) => {
                let rec = r.record(*id);
                write!(
                    f,
                    "{} {}",
                    if rec.is_union { "union" } else { "struct" },
                    rec.name
                )
            }
            Ty::Str { size } => write!(f, "string[{size}]"),
            Ty::Buf { size } => write!(f, "buffer[{size}]"),
            Ty::Tuple(items) => {
                f.write_str("(")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", t.display(r))?;
                }
                f.write_str(")")
            }
            Ty::Shown(shown) => f.write_str(shown.name()),
            Ty::Agg(agg) => write!(f, "{}()", agg.name()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnumId(pub u32);

/// A struct or union.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The tag, or a made-up name for an anonymous one.
    pub name: String,
    pub is_union: bool,
    pub size: u64,
    pub align: u64,
    pub fields: Vec<Field>,
    /// Declared (`struct x;`) but never defined.
    pub incomplete: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Empty for an anonymous struct or union member, whose own fields
    /// are reachable by name through it.
    pub name: String,
    pub ty: Ty,
    pub offset: u64,
    /// `(bit offset within the field's storage unit at `offset`, bits)`.
    pub bitfield: Option<(u8, u8)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumDef {
    pub name: String,
    pub bytes: u8,
    pub signed: bool,
    pub values: Vec<(String, i64)>,
}

impl EnumDef {
    /// The name of `value`, if one enumerator has it.
    pub fn name_of(&self, value: i64) -> Option<&str> {
        self.values
            .iter()
            .find(|(_, v)| *v == value)
            .map(|(n, _)| n.as_str())
    }
}

/// A field found by name, possibly through anonymous members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundField {
    pub ty: Ty,
    pub offset: u64,
    pub bitfield: Option<(u8, u8)>,
}

/// Every C type a script can name.
#[derive(Clone, Debug, Default)]
pub struct TypeRegistry {
    records: Vec<Record>,
    enums: Vec<EnumDef>,
    /// `struct foo` / `union foo` / `enum foo` to their definitions.
    tags: HashMap<String, Ty>,
    typedefs: HashMap<String, Ty>,
    /// Enumerator names to their enum and value.
    enumerators: HashMap<String, (EnumId, i64)>,
    /// Records that describe the kernel's memory (from its BTF).
    kernel: std::collections::HashSet<RecordId>,
}

impl TypeRegistry {
    pub fn record(&self, id: RecordId) -> &Record {
        &self.records[id.0 as usize]
    }

    pub fn record_mut(&mut self, id: RecordId) -> &mut Record {
        &mut self.records[id.0 as usize]
    }

    pub fn enum_def(&self, id: EnumId) -> &EnumDef {
        &self.enums[id.0 as usize]
    }

    /// Adds a record and returns its id.
    pub fn add_record(&mut self, record: Record) -> RecordId {
        self.records.push(record);
        RecordId(self.records.len() as u32 - 1)
    }

    /// The id of a record equal to `record`, added if there is none: a
    /// script's records (`(a=1, b=2)`) are made again at each pass of the
    /// checker, and one shape is one type.
    pub fn record_like(&mut self, record: Record) -> RecordId {
        match self.records.iter().position(|r| *r == record) {
            Some(i) => RecordId(i as u32),
            None => self.add_record(record),
        }
    }

    /// Marks record `id` as one of the kernel's (from its BTF): pointers
    /// to it point into the kernel's memory.
    pub fn mark_kernel(&mut self, id: RecordId) {
        self.kernel.insert(id);
    }

    pub fn is_kernel(&self, id: RecordId) -> bool {
        self.kernel.contains(&id)
    }

    pub fn add_enum(&mut self, def: EnumDef) -> EnumId {
        let id = EnumId(self.enums.len() as u32);
        for (name, value) in &def.values {
            self.enumerators.insert(name.clone(), (id, *value));
        }
        self.enums.push(def);
        id
    }

    /// Binds `struct name` (or `union`/`enum`) to `ty`.
    pub fn set_tag(&mut self, keyword: &str, name: &str, ty: Ty) {
        self.tags.insert(format!("{keyword} {name}"), ty);
    }

    pub fn tag(&self, keyword: &str, name: &str) -> Option<&Ty> {
        self.tags.get(&format!("{keyword} {name}"))
    }

    pub fn set_typedef(&mut self, name: &str, ty: Ty) {
        self.typedefs.insert(name.to_string(), ty);
    }

    pub fn typedef(&self, name: &str) -> Option<&Ty> {
        self.typedefs.get(name)
    }

    pub fn enumerator(&self, name: &str) -> Option<(EnumId, i64)> {
        self.enumerators.get(name).copied()
    }

    /// Every `struct`/`union`/`enum` tag and typedef name, for suggestions.
    pub fn type_names(&self) -> impl Iterator<Item = &str> {
        self.tags
            .keys()
            .chain(self.typedefs.keys())
            .map(String::as_str)
    }

    /// The size of a value of `ty` in the traced program's memory.
    pub fn c_size(&self, ty: &Ty) -> u64 {
        match ty {
            Ty::Int { bytes, .. } | Ty::Enum { bytes, .. } => u64::from(*bytes),
            Ty::Bool => 1,
            Ty::Ptr(..) => 8,
            Ty::Array { elem, len } => self.c_size(elem).saturating_mul(*len),
            Ty::Record(id) => self.record(*id).size,
            Ty::Void => 1,
            other => u64::from(other.value_size(self)),
        }
    }

    /// The size bpftrace gives a value of `ty` (`sizeof`): C's for C
    /// types; a tuple is laid out as a C struct of its items, each aligned
    /// as bpftrace aligns it in a tuple (see [`TypeRegistry::tuple_align`]),
    /// the whole to its largest alignment. (sdt keeps each item in 8 bytes
    /// of its own; this is the size a script asks about.)
    pub fn bpftrace_size(&self, ty: &Ty) -> u64 {
        match ty {
            Ty::Tuple(items) => {
                let mut end = 0u64;
                for item in items {
                    end = end.next_multiple_of(self.tuple_align(item));
                    end += self.bpftrace_size(item);
                }
                end.next_multiple_of(self.tuple_align(ty))
            }
            other => self.c_size(other),
        }
    }

    /// The alignment of `ty` inside a tuple, as bpftrace 0.19 and later
    /// give it: 1 for strings and the other values kept as bytes, a
    /// tuple's or C type's own, an array's element's, else the size up to
    /// 2, 4 up to 4 bytes, and 8.
    pub fn tuple_align(&self, ty: &Ty) -> u64 {
        match ty {
            Ty::Str { .. } | Ty::Buf { .. } => 1,
            Ty::Shown(Shown::Inet { .. } | Shown::Timestamp { .. }) => 1,
            Ty::Tuple(items) => items.iter().map(|t| self.tuple_align(t)).max().unwrap_or(1),
            Ty::Record(id) => self.record(*id).align.max(1),
            Ty::Array { elem, .. } => self.tuple_align(elem),
            other => match self.c_size(other) {
                0..=2 => self.c_size(other).max(1),
                3..=4 => 4,
                _ => 8,
            },
        }
    }

    pub fn c_align(&self, ty: &Ty) -> u64 {
        match ty {
            Ty::Int { bytes, .. } | Ty::Enum { bytes, .. } => u64::from(*bytes).max(1),
            Ty::Ptr(..) => 8,
            Ty::Array { elem, .. } => self.c_align(elem),
            Ty::Record(id) => self.record(*id).align.max(1),
            _ => 1,
        }
    }

    /// Finds `name` in record `id`, looking into anonymous members.
    pub fn field(&self, id: RecordId, name: &str) -> Option<FoundField> {
        let record = self.record(id);
        for field in &record.fields {
            if field.name == name {
                return Some(FoundField {
                    ty: field.ty.clone(),
                    offset: field.offset,
                    bitfield: field.bitfield,
                });
            }
            if field.name.is_empty() {
                if let Ty::Record(inner) = field.ty {
                    if let Some(mut found) = self.field(inner, name) {
                        found.offset += field.offset;
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// The names of record `id`'s fields, anonymous members' included.
    pub fn field_names(&self, id: RecordId) -> Vec<&str> {
        let mut names = Vec::new();
        for field in &self.record(id).fields {
            match (&field.name[..], &field.ty) {
                ("", Ty::Record(inner)) => names.extend(self.field_names(*inner)),
                (name, _) => names.push(name),
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found_through_anonymous_members() {
        let mut reg = TypeRegistry::default();
        let inner = reg.add_record(Record {
            name: "(anonymous)".into(),
            is_union: true,
            size: 8,
            align: 8,
            fields: vec![Field {
                name: "u".into(),
                ty: UINT64,
                offset: 0,
                bitfield: None,
            }],
            incomplete: false,
        });
        let outer = reg.add_record(Record {
            name: "outer".into(),
            is_union: false,
            size: 16,
            align: 8,
            fields: vec![
                Field {
                    name: "a".into(),
                    ty: INT64,
                    offset: 0,
                    bitfield: None,
                },
                Field {
                    name: String::new(),
                    ty: Ty::Record(inner),
                    offset: 8,
                    bitfield: None,
                },
            ],
            incomplete: false,
        });
        assert_eq!(reg.field(outer, "u").unwrap().offset, 8);
        assert_eq!(reg.field_names(outer), ["a", "u"]);
        assert!(reg.field(outer, "v").is_none());
    }

    #[test]
    fn tuple_items_are_8_byte_aligned() {
        let reg = TypeRegistry::default();
        let items = [INT64, Ty::Str { size: 13 }, UINT32];
        assert_eq!(Ty::tuple_offsets(&items, &reg), [0, 8, 24]);
        assert_eq!(Ty::Tuple(items.to_vec()).value_size(&reg), 32);
    }

    /// What `sizeof` says of a tuple: bpftrace's layout, not sdt's.
    #[test]
    fn tuples_have_bpftrace_s_sizes() {
        let mut reg = TypeRegistry::default();
        let int = |bytes, signed| Ty::Int { bytes, signed };
        let size = |reg: &TypeRegistry, items: &[Ty]| reg.bpftrace_size(&Ty::Tuple(items.to_vec()));
        assert_eq!(size(&reg, &[int(1, true), int(2, true), int(4, true)]), 8);
        assert_eq!(size(&reg, &[int(4, true), int(2, true), int(1, true)]), 8);
        assert_eq!(size(&reg, &[int(1, true), INT64, int(1, true), INT64]), 32);
        // Strings align to 1; the literal 3 is 64 bits, as before 0.25.
        let mixed = [
            int(1, true),
            int(1, true),
            Ty::Str { size: 7 },
            INT64,
            int(4, true),
            INT64,
            int(1, true),
            int(2, true),
            Ty::Str { size: 4 },
        ];
        assert_eq!(size(&reg, &mixed), 48);
        let pair = reg.add_record(Record {
            name: "Foo".into(),
            is_union: false,
            size: 8,
            align: 4,
            fields: Vec::new(),
            incomplete: false,
        });
        assert_eq!(size(&reg, &[int(4, true), Ty::Record(pair)]), 12);
        let array = Ty::Array {
            elem: Box::new(int(4, true)),
            len: 4,
        };
        assert_eq!(size(&reg, &[int(4, true), array]), 20);
        assert_eq!(
            size(
                &reg,
                &[int(1, true), Ty::Tuple(vec![int(2, true), int(1, true)])]
            ),
            6
        );
    }
}
