//! Values as they arrive from the kernel, and how they print.
//!
//! A value is decoded from the bytes of a record or a map entry using its
//! [`Ty`], then rendered the way bpftrace renders it, as text or JSON.
//! What only user space knows (symbol names, probe names, user names,
//! stack frames) comes from an [`Env`].

use std::fmt::Write as _;

use sdt_lang::types::{Ty, TypeRegistry};

/// What rendering needs from the rest of the runtime.
pub trait Env {
    fn registry(&self) -> &TypeRegistry;
    /// The text of a `probe` value.
    fn probe_name(&self, id: u64) -> String;
    /// The text of a `func` value.
    fn func_name(&self, id: u64) -> String;
    /// `symbol+offset` of `addr` in process `pid`, or `None`.
    fn symbol(&mut self, pid: u32, addr: u64) -> Option<Symbol>;
    /// The frames of a recorded user stack.
    fn stack(&mut self, id: u32) -> Vec<u64>;
    /// The name of user `uid`.
    fn user_name(&self, uid: u32) -> Option<String>;
    /// A time format of `strftime`.
    fn time_format(&self, id: u32) -> &str;
    /// Wall-clock nanoseconds since the epoch for a `CLOCK_MONOTONIC` time.
    fn wall_ns(&self, monotonic_ns: u64) -> i128;
}

/// A symbolized address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub offset: u64,
    pub module: String,
}

/// A decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Int {
        value: u64,
        signed: bool,
    },
    Enum {
        id: sdt_lang::types::EnumId,
        value: i64,
    },
    Str(&'a [u8]),
    Buf(&'a [u8]),
    Tuple(Vec<Value<'a>>),
    USym {
        addr: u64,
        pid: u32,
    },
    UStack {
        id: i64,
        pid: u32,
        perf: bool,
        depth: u32,
    },
    Probe(u64),
    Func(u64),
    Username(u32),
    Strerror(i64),
    Inet(std::net::IpAddr),
    Timestamp {
        ns: u64,
        format: u32,
    },
    /// A struct or union: its fields in order.
    Record(Vec<(String, Value<'a>)>),
    /// An array of the traced program's memory (char arrays are strings),
    /// with the width of its elements when they are integers: in a map
    /// key, bpftrace shows them signed at that width (`[-23,3]` for the
    /// bytes 233, 3).
    Array {
        items: Vec<Value<'a>>,
        int_bytes: u8,
    },
    /// Bytes of no printable type.
    Bytes(&'a [u8]),
}

/// Where a value is printed, which changes a few renderings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// A `printf` argument or `print()` of a value.
    Printf,
    /// A map key.
    Key,
    /// A map value.
    Value,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .unwrap_or(0)
}

/// Decodes a value of `ty` from its bytes.
pub fn decode<'a>(ty: &Ty, bytes: &'a [u8], registry: &TypeRegistry) -> Value<'a> {
    match ty {
        Ty::Int { signed, .. } => Value::Int {
            value: u64_at(bytes, 0),
            signed: *signed,
        },
        Ty::Enum { id, .. } => Value::Enum {
            id: *id,
            value: u64_at(bytes, 0) as i64,
        },
        Ty::Ptr(_) => Value::Int {
            value: u64_at(bytes, 0),
            signed: false,
        },
        Ty::Str { size } => {
            let b = &bytes[..bytes.len().min(*size as usize)];
            Value::Str(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
        }
        Ty::Buf { size } => {
            let len = (u64_at(bytes, 0) as usize).min(*size as usize);
            Value::Buf(bytes.get(8..8 + len).unwrap_or_default())
        }
        Ty::Tuple(items) => {
            let offsets = Ty::tuple_offsets(items, registry);
            Value::Tuple(
                items
                    .iter()
                    .zip(offsets)
                    .map(|(t, at)| {
                        decode(t, bytes.get(at as usize..).unwrap_or_default(), registry)
                    })
                    .collect(),
            )
        }
        Ty::USym => Value::USym {
            addr: u64_at(bytes, 0),
            pid: u64_at(bytes, 8) as u32,
        },
        Ty::UStack { perf_mode, depth } => Value::UStack {
            id: u64_at(bytes, 0) as i64,
            pid: u64_at(bytes, 8) as u32,
            perf: *perf_mode,
            depth: *depth,
        },
        Ty::Probe => Value::Probe(u64_at(bytes, 0)),
        Ty::Func => Value::Func(u64_at(bytes, 0)),
        Ty::Username => Value::Username(u64_at(bytes, 0) as u32),
        Ty::Strerror => Value::Strerror(u64_at(bytes, 0) as i64),
        Ty::Inet { v6: false } => {
            let mut octets = [0u8; 4];
            octets.copy_from_slice(&bytes.get(..4).unwrap_or(&[0; 4])[..4]);
            Value::Inet(std::net::Ipv4Addr::from(octets).into())
        }
        Ty::Inet { v6: true } => {
            let mut octets = [0u8; 16];
            if let Some(b) = bytes.get(..16) {
                octets.copy_from_slice(b);
            }
            Value::Inet(std::net::Ipv6Addr::from(octets).into())
        }
        Ty::Timestamp { format } => Value::Timestamp {
            ns: u64_at(bytes, 0),
            format: *format,
        },
        Ty::Record(_) | Ty::Array { .. } => decode_c(ty, None, bytes, registry),
        Ty::Void | Ty::Agg(_) => Value::Bytes(bytes),
    }
}

/// Decodes a value laid out as in the traced program's memory (a struct
/// or array copied from it): integers take their C width there, and a
/// bitfield is `bits` bits at `shift` in its storage unit.
fn decode_c<'a>(
    ty: &Ty,
    bitfield: Option<(u8, u8)>,
    bytes: &'a [u8],
    registry: &TypeRegistry,
) -> Value<'a> {
    let int = |width: u8, signed: bool| -> u64 {
        let width = usize::from(width.clamp(1, 8));
        let mut raw = [0u8; 8];
        let have = bytes.len().min(width);
        let mut v = if cfg!(target_endian = "little") {
            raw[..have].copy_from_slice(&bytes[..have]);
            u64::from_le_bytes(raw)
        } else {
            raw[8 - have..].copy_from_slice(&bytes[..have]);
            u64::from_be_bytes(raw)
        };
        let (shift, bits) = match bitfield {
            Some((shift, bits)) => (u32::from(shift), u32::from(bits)),
            None => (0, 8 * width as u32),
        };
        v >>= shift;
        if bits < 64 {
            v &= (1u64 << bits) - 1;
            if signed && bits > 0 && v >> (bits - 1) & 1 == 1 {
                v |= !0u64 << bits;
            }
        }
        v
    };
    match ty {
        Ty::Int {
            bytes: width,
            signed,
        } => Value::Int {
            value: int(*width, *signed),
            signed: *signed,
        },
        Ty::Enum {
            id,
            bytes: width,
            signed,
        } => Value::Enum {
            id: *id,
            value: int(*width, *signed) as i64,
        },
        Ty::Ptr(_) => Value::Int {
            value: int(8, false),
            signed: false,
        },
        // `char name[16]` is a string, as in bpftrace; other arrays are
        // lists of their elements.
        Ty::Array { elem, len } => {
            let size = registry.c_size(elem) as usize;
            let total = (size.saturating_mul(*len as usize)).min(bytes.len());
            if matches!(
                **elem,
                Ty::Int {
                    bytes: 1,
                    signed: true
                }
            ) {
                let b = &bytes[..total];
                return Value::Str(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]);
            }
            let int_bytes = match **elem {
                Ty::Int { bytes, .. } | Ty::Enum { bytes, .. } => bytes,
                _ => 0,
            };
            Value::Array {
                items: (0..*len as usize)
                    .map(|i| {
                        let from = (i * size).min(bytes.len());
                        decode_c(elem, None, &bytes[from..], registry)
                    })
                    .collect(),
                int_bytes,
            }
        }
        Ty::Record(id) => {
            let mut fields = Vec::new();
            record_fields(*id, bytes, registry, &mut fields);
            Value::Record(fields)
        }
        other => decode(other, bytes, registry),
    }
}

/// The fields of record `id` at the start of `bytes`; the fields of an
/// anonymous member are its parent's.
fn record_fields<'a>(
    id: sdt_lang::types::RecordId,
    bytes: &'a [u8],
    registry: &TypeRegistry,
    out: &mut Vec<(String, Value<'a>)>,
) {
    for field in &registry.record(id).fields {
        let at = (field.offset as usize).min(bytes.len());
        let here = &bytes[at..];
        match (&field.ty, field.name.is_empty()) {
            (Ty::Record(inner), true) => record_fields(*inner, here, registry, out),
            (ty, _) => out.push((
                field.name.clone(),
                decode_c(ty, field.bitfield, here, registry),
            )),
        }
    }
}

/// A string as bpftrace prints it: its bytes as they are, newlines and
/// tabs included. Only bytes that are not UTF-8, which a `String` cannot
/// hold, become `\xNN`.
pub fn raw_text(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `%r`: printable ASCII as it is, other bytes as `\xNN`.
pub fn escape_buffer(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// The text of a value.
pub fn text(value: &Value<'_>, context: Context, env: &mut dyn Env) -> String {
    match value {
        Value::Int { value, signed } => {
            // bpftrace prints integer keys signed, whatever their type.
            if *signed || context == Context::Key {
                (*value as i64).to_string()
            } else {
                value.to_string()
            }
        }
        Value::Enum { id, value } => {
            let def = env.registry().enum_def(*id);
            match def.name_of(*value) {
                Some(name) => name.to_string(),
                None if def.signed => value.to_string(),
                None => (*value as u64).to_string(),
            }
        }
        Value::Str(bytes) => raw_text(bytes),
        Value::Buf(bytes) => escape_buffer(bytes),
        Value::Bytes(bytes) => escape_buffer(bytes),
        // bpftrace's spelling: `{ .x = 1, .name = abc }` and `[1,2,3]`.
        Value::Record(fields) => {
            let inner = if context == Context::Key {
                Context::Key
            } else {
                Context::Printf
            };
            let parts: Vec<String> = fields
                .iter()
                .map(|(name, v)| format!(".{name} = {}", text(v, inner, env)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        Value::Array { items, int_bytes } => {
            let parts: Vec<String> = items
                .iter()
                .map(|v| match (v, context) {
                    (Value::Int { value, .. }, Context::Key) if (1..8).contains(int_bytes) => {
                        let shift = 64 - 8 * u32::from(*int_bytes);
                        (((value << shift) as i64) >> shift).to_string()
                    }
                    (v, Context::Key) => text(v, Context::Key, env),
                    (v, _) => text(v, Context::Printf, env),
                })
                .collect();
            format!("[{}]", parts.join(","))
        }
        Value::Tuple(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|v| text(v, Context::Printf, env))
                .collect();
            format!("({})", parts.join(", "))
        }
        Value::USym { addr, pid } => match env.symbol(*pid, *addr) {
            Some(sym) => sym.name,
            None => format!("{addr:#x}"),
        },
        Value::UStack {
            id,
            pid,
            perf,
            depth,
        } => {
            let frames = if *id < 0 {
                Vec::new()
            } else {
                env.stack(*id as u32)
            };
            let indent = if context == Context::Key {
                "    "
            } else {
                "        "
            };
            let mut out = String::from("\n");
            for addr in frames.into_iter().take(*depth as usize) {
                let sym = env.symbol(*pid, addr);
                if *perf {
                    let (name, module) = match &sym {
                        Some(s) => (format!("{}+{}", s.name, s.offset), s.module.clone()),
                        None => (format!("{addr:#x}"), "[unknown]".to_string()),
                    };
                    let _ = writeln!(out, "\t{addr:x} {name} ({module})");
                } else {
                    let name = match sym {
                        Some(s) => format!("{}+{}", s.name, s.offset),
                        None => format!("{addr:#x}"),
                    };
                    let _ = writeln!(out, "{indent}{name}");
                }
            }
            out
        }
        Value::Probe(id) => env.probe_name(*id),
        Value::Func(id) => env.func_name(*id),
        Value::Username(uid) => env.user_name(*uid).unwrap_or_else(|| uid.to_string()),
        Value::Strerror(errno) => strerror(*errno),
        Value::Inet(addr) => addr.to_string(),
        Value::Timestamp { ns, format } => {
            let wall = env.wall_ns(*ns);
            format_time(env.time_format(*format), wall)
        }
    }
}

/// The message of an errno value, as `strerror(3)` words it.
pub fn strerror(errno: i64) -> String {
    let text = std::io::Error::from_raw_os_error(errno as i32).to_string();
    match text.rfind(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Formats a wall-clock time (ns since the epoch) with a `strftime`
/// format, in local time; `%f` is microseconds.
pub fn format_time(format: &str, wall_ns: i128) -> String {
    use chrono::TimeZone;
    let secs = (wall_ns.div_euclid(1_000_000_000)) as i64;
    let nanos = wall_ns.rem_euclid(1_000_000_000) as u32;
    let Some(time) = chrono::Local.timestamp_opt(secs, nanos).single() else {
        return String::new();
    };
    let format = format.replace("%f", &format!("{:06}", nanos / 1000));
    let mut out = String::new();
    if write!(out, "{}", time.format(&format)).is_err() {
        return format;
    }
    out
}

/// A value as JSON, in bpftrace's spelling: tuples are arrays without
/// spaces, everything symbolic is a string.
pub fn json(value: &Value<'_>, env: &mut dyn Env) -> String {
    match value {
        Value::Int { value, signed } => {
            if *signed {
                (*value as i64).to_string()
            } else {
                value.to_string()
            }
        }
        Value::Enum { .. }
        | Value::Probe(_)
        | Value::Func(_)
        | Value::USym { .. }
        | Value::UStack { .. }
        | Value::Username(_)
        | Value::Strerror(_)
        | Value::Inet(_)
        | Value::Timestamp { .. } => json_string(text(value, Context::Value, env).as_bytes()),
        Value::Str(bytes) => json_string(bytes),
        Value::Buf(bytes) | Value::Bytes(bytes) => json_string(escape_buffer(bytes).as_bytes()),
        Value::Tuple(items) | Value::Array { items, .. } => {
            let parts: Vec<String> = items.iter().map(|v| json(v, env)).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Record(fields) => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(name, v)| format!("{}: {}", json_string(name.as_bytes()), json(v, env)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
    }
}

/// A JSON string: `"`, `\` and control bytes escaped; other bytes kept.
pub fn json_string(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\u{:04x}", b);
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_and_json_strings_escape() {
        assert_eq!(escape_buffer(b"ab\x01"), "ab\\x01");
        assert_eq!(json_string(b"a\"b\\\n\x01"), "\"a\\\"b\\\\\\n\\u0001\"");
    }

    #[test]
    fn strings_print_raw_as_in_bpftrace() {
        assert_eq!(raw_text(b"a\nb\tc \xe2\x9c\x93"), "a\nb\tc \u{2713}");
        assert_eq!(raw_text(b"bad\xff"), "bad\\xff");
    }

    #[test]
    fn decodes_strings_to_their_nul() {
        let reg = TypeRegistry::default();
        let v = decode(&Ty::Str { size: 8 }, b"abc\0zzzz", &reg);
        assert_eq!(v, Value::Str(b"abc"));
        let items = [sdt_lang::types::INT64, Ty::Str { size: 4 }];
        let mut bytes = (-2i64).to_ne_bytes().to_vec();
        bytes.extend_from_slice(b"hi\0\0\0\0\0\0");
        assert_eq!(
            decode(&Ty::Tuple(items.to_vec()), &bytes, &reg),
            Value::Tuple(vec![
                Value::Int {
                    value: (-2i64) as u64,
                    signed: true
                },
                Value::Str(b"hi")
            ])
        );
    }

    /// An `Env` for values that need nothing from the runtime.
    struct Plain(TypeRegistry);

    impl Env for Plain {
        fn registry(&self) -> &TypeRegistry {
            &self.0
        }
        fn probe_name(&self, id: u64) -> String {
            id.to_string()
        }
        fn func_name(&self, id: u64) -> String {
            id.to_string()
        }
        fn symbol(&mut self, _: u32, _: u64) -> Option<Symbol> {
            None
        }
        fn stack(&mut self, _: u32) -> Vec<u64> {
            Vec::new()
        }
        fn user_name(&self, _: u32) -> Option<String> {
            None
        }
        fn time_format(&self, _: u32) -> &str {
            ""
        }
        fn wall_ns(&self, ns: u64) -> i128 {
            i128::from(ns)
        }
    }

    #[test]
    fn structs_and_arrays_print_as_in_bpftrace() {
        use sdt_lang::types::{Field, Record};
        let mut reg = TypeRegistry::default();
        let field = |name: &str, ty: Ty, offset, bitfield| Field {
            name: name.into(),
            ty,
            offset,
            bitfield,
        };
        let inner = reg.add_record(Record {
            name: "inner".into(),
            is_union: false,
            size: 2,
            align: 2,
            fields: vec![field("s", Ty::int(2, true), 0, None)],
            incomplete: false,
        });
        let array = |elem: Ty, len| Ty::Array {
            elem: Box::new(elem),
            len,
        };
        // struct outer { int x; unsigned char b[2]; char name[4];
        //                struct inner in; unsigned lo:3, hi:5; void *p; };
        let outer = reg.add_record(Record {
            name: "outer".into(),
            is_union: false,
            size: 24,
            align: 8,
            fields: vec![
                field("x", Ty::int(4, true), 0, None),
                field("b", array(Ty::int(1, false), 2), 4, None),
                field("name", array(Ty::int(1, true), 4), 6, None),
                field("in", Ty::Record(inner), 10, None),
                field("lo", Ty::int(4, false), 12, Some((0, 3))),
                field("hi", Ty::int(4, false), 12, Some((3, 5))),
                field("p", Ty::Ptr(Box::new(Ty::Void)), 16, None),
            ],
            incomplete: false,
        });
        let mut bytes = Vec::new();
        bytes.extend((-7i32).to_le_bytes());
        bytes.extend([233, 3]);
        bytes.extend(*b"ab\0z");
        bytes.extend((-2i16).to_le_bytes());
        bytes.extend([0b1010_1101, 0, 0, 0]);
        bytes.extend(4096u64.to_le_bytes());
        let mut env = Plain(reg.clone());
        let v = decode(&Ty::Record(outer), &bytes, &reg);
        assert_eq!(
            text(&v, Context::Value, &mut env),
            "{ .x = -7, .b = [233,3], .name = ab, .in = { .s = -2 }, .lo = 5, .hi = 21, .p = 4096 }"
        );
        assert_eq!(
            json(&v, &mut env),
            "{ \"x\": -7, \"b\": [233,3], \"name\": \"ab\", \"in\": { \"s\": -2 }, \
             \"lo\": 5, \"hi\": 21, \"p\": 4096 }"
        );
        // In a key, array elements are signed at their own width.
        let b = decode(&array(Ty::int(1, false), 2), &bytes[4..], &reg);
        assert_eq!(text(&b, Context::Key, &mut env), "[-23,3]");
        assert_eq!(text(&b, Context::Value, &mut env), "[233,3]");
    }

    #[test]
    fn strerror_has_no_suffix() {
        assert_eq!(strerror(2), "No such file or directory");
    }
}
