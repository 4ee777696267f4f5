//! Values as they arrive from the kernel, and what they mean.
//!
//! A value is decoded from the bytes of a record or a map entry using its
//! [`Ty`], then resolved into a [`Datum`] for the output: what only user
//! space knows (symbol names, probe names, user names, stack frames,
//! times of day) comes from an [`Env`]. How a datum prints is the output
//! format's business.
//!
//! The values that print in their own way ([`Shown`]: symbols, names,
//! messages, addresses, times) stay their bytes until [`render_shown`]
//! turns them into a datum: one match over every kind, with no fallback,
//! so a new kind does not compile until it says how it shows. What else a
//! new kind takes is in [`Shown`]'s documentation.

use sdt_lang::types::{Shown, StackMode, Ty, TypeRegistry};
use sdt_output::{Datum, Frame, Stack, StackStyle};

use crate::symbols::RawFrame;

/// What rendering needs from the rest of the runtime.
pub trait Env {
    fn registry(&self) -> &TypeRegistry;
    /// The text of a `probe` value.
    fn probe_name(&self, id: u64) -> String;
    /// The text of a `func` value.
    fn func_name(&self, id: u64) -> String;
    /// `symbol+offset` of `addr` in process `pid`, or `None`.
    fn symbol(&mut self, pid: u32, addr: u64) -> Option<Symbol>;
    /// The path of the object mapped at `addr` in `pid`, for an address
    /// without a symbol.
    fn module(&mut self, pid: u32, addr: u64) -> Option<String> {
        let _ = (pid, addr);
        None
    }
    /// The build id of the object mapped at `addr` in `pid`, and the
    /// address's offset in its file.
    fn build_id(&mut self, pid: u32, addr: u64) -> Option<(Vec<u8>, u64)> {
        let _ = (pid, addr);
        None
    }
    /// The frames of a recorded stack.
    fn stack(&mut self, id: u32) -> Vec<RawFrame>;
    /// The frame at `offset` in the object with `build_id`, which process
    /// `pid` mapped (a stack recorded by build ID).
    fn object_frame(&mut self, pid: u32, build_id: &[u8; 20], offset: u64) -> Frame {
        let _ = (pid, build_id);
        Frame {
            addr: offset,
            symbol: None,
            module: None,
            build_id: None,
        }
    }
    /// `symbol+offset` of kernel address `addr`, or `None`.
    fn kernel_symbol(&mut self, addr: u64) -> Option<Symbol> {
        let _ = addr;
        None
    }
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
    Bool(bool),
    Enum {
        id: sdt_lang::types::EnumId,
        value: i64,
    },
    /// An address: printed in hex, as bpftrace 0.22 and later do.
    Ptr(u64),
    Str(&'a [u8]),
    Buf(&'a [u8]),
    Tuple(Vec<Value<'a>>),
    /// A value that prints in its own way, and its bytes.
    Shown(Shown, &'a [u8]),
    /// A struct or union: its fields in order.
    Record(Vec<(String, Value<'a>)>),
    /// An array of the traced program's memory (char arrays are strings).
    Array(Vec<Value<'a>>),
    /// Bytes of no printable type.
    Bytes(&'a [u8]),
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
        Ty::Bool => Value::Bool(u64_at(bytes, 0) != 0),
        Ty::Enum { id, .. } => Value::Enum {
            id: *id,
            value: u64_at(bytes, 0) as i64,
        },
        Ty::Ptr(..) => Value::Ptr(u64_at(bytes, 0)),
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
        Ty::Shown(shown) => {
            let size = (shown.value_size() as usize).min(bytes.len());
            Value::Shown(*shown, &bytes[..size])
        }
        // An array value of its own (`(int8[])"hi"`) is a list of numbers,
        // as in bpftrace, also of `int8`; a `char` array inside a struct
        // is a string.
        Ty::Array { elem, len } => elements(elem, *len, bytes, registry),
        Ty::Record(_) => decode_c(ty, None, bytes, registry),
        Ty::Void | Ty::Agg(_) => Value::Bytes(bytes),
    }
}

/// The `len` elements of an array laid out as in C.
fn elements<'a>(elem: &Ty, len: u64, bytes: &'a [u8], registry: &TypeRegistry) -> Value<'a> {
    let size = registry.c_size(elem) as usize;
    Value::Array(
        (0..len as usize)
            .map(|i| {
                let from = (i * size).min(bytes.len());
                decode_c(elem, None, &bytes[from..], registry)
            })
            .collect(),
    )
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
        Ty::Ptr(..) => Value::Ptr(int(8, false)),
        Ty::Bool => Value::Bool(int(1, false) != 0),
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
            elements(elem, *len, bytes, registry)
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

/// A value, resolved for the output.
pub fn resolve(value: &Value<'_>, env: &mut dyn Env) -> Datum {
    match value {
        Value::Int { value, signed } => Datum::Int {
            value: *value,
            signed: *signed,
        },
        Value::Bool(b) => Datum::Bool(*b),
        Value::Enum { id, value } => {
            let def = env.registry().enum_def(*id);
            Datum::Symbolic {
                text: match def.name_of(*value) {
                    Some(name) => name.to_string(),
                    None if def.signed => value.to_string(),
                    None => (*value as u64).to_string(),
                },
                number: *value as u64,
            }
        }
        Value::Ptr(addr) => Datum::Symbolic {
            text: format!("{addr:#x}"),
            number: *addr,
        },
        Value::Str(bytes) => Datum::Str(bytes.to_vec()),
        Value::Buf(bytes) | Value::Bytes(bytes) => Datum::Buf(bytes.to_vec()),
        Value::Record(fields) => Datum::Record(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), resolve(v, env)))
                .collect(),
        ),
        Value::Array(items) => Datum::Array(items.iter().map(|v| resolve(v, env)).collect()),
        Value::Tuple(items) => Datum::Tuple(items.iter().map(|v| resolve(v, env)).collect()),
        Value::Shown(shown, bytes) => render_shown(*shown, bytes, env),
    }
}

/// How a value that prints in its own way shows: one arm per kind, each
/// reading the kind's bytes (see [`Shown`] for their layout).
pub fn render_shown(shown: Shown, bytes: &[u8], env: &mut dyn Env) -> Datum {
    let word = u64_at(bytes, 0);
    let pid = u64_at(bytes, 8) as u32;
    match shown {
        Shown::USym => Datum::Text(match env.symbol(pid, word) {
            Some(sym) => sym.name,
            None => format!("{word:#x}"),
        }),
        Shown::UStack { mode, depth } => {
            Datum::Stack(user_stack(word as i64, pid, mode, depth, env))
        }
        Shown::KStack { mode, depth } => Datum::Stack(kernel_stack(word as i64, mode, depth, env)),
        Shown::KSym => Datum::Text(match env.kernel_symbol(word) {
            Some(sym) => sym.name,
            None => format!("{word:#x}"),
        }),
        Shown::Probe => Datum::Text(env.probe_name(word)),
        Shown::Func => Datum::Text(env.func_name(word)),
        Shown::Username => {
            let uid = word as u32;
            Datum::Text(env.user_name(uid).unwrap_or_else(|| uid.to_string()))
        }
        Shown::Strerror => Datum::Text(strerror(word as i64)),
        Shown::SignalName => Datum::Text(signal_name(word as i64)),
        Shown::Inet { v6: false } => {
            let mut octets = [0u8; 4];
            if let Some(b) = bytes.get(..4) {
                octets.copy_from_slice(b);
            }
            Datum::Text(std::net::Ipv4Addr::from(octets).to_string())
        }
        Shown::Inet { v6: true } => {
            let mut octets = [0u8; 16];
            if let Some(b) = bytes.get(..16) {
                octets.copy_from_slice(b);
            }
            Datum::Text(std::net::Ipv6Addr::from(octets).to_string())
        }
        Shown::Timestamp { format } => {
            let wall = env.wall_ns(word);
            Datum::Text(format_time(env.time_format(format), wall))
        }
    }
}

/// The number `printf`'s integer conversions print for a value that
/// prints in its own way, and whether it is signed; `None` where they
/// print its text.
pub fn shown_number(shown: Shown, bytes: &[u8]) -> Option<(u64, bool)> {
    let ty = shown.number()?;
    Some((ty.truncate(u64_at(bytes, 0) as i64) as u64, ty.is_signed()))
}

/// The frames of stack `id` (none if negative) of process `pid`,
/// symbolized, at most `depth` of them.
fn user_stack(id: i64, pid: u32, mode: StackMode, depth: u32, env: &mut dyn Env) -> Stack {
    let addrs = if id < 0 {
        Vec::new()
    } else {
        env.stack(id as u32)
    };
    let frames = addrs
        .into_iter()
        .take(depth as usize)
        .map(|raw| match raw {
            RawFrame::Address(addr) => {
                let sym = env.symbol(pid, addr);
                Frame {
                    addr,
                    module: match &sym {
                        Some(s) => Some(s.module.clone()),
                        None => env.module(pid, addr),
                    },
                    symbol: sym.map(|s| (s.name, s.offset)),
                    build_id: match mode {
                        StackMode::BuildId => env.build_id(pid, addr),
                        _ => None,
                    },
                }
            }
            RawFrame::InObject { build_id, offset } => env.object_frame(pid, &build_id, offset),
        })
        .collect();
    Stack {
        frames,
        style: stack_style(mode),
        kernel: false,
    }
}

/// How a stack of `mode` prints.
fn stack_style(mode: StackMode) -> StackStyle {
    match mode {
        StackMode::Bpftrace => StackStyle::Bpftrace,
        StackMode::Perf => StackStyle::Perf,
        StackMode::Raw => StackStyle::Raw,
        StackMode::BuildId => StackStyle::BuildId,
    }
}

/// The frames of kernel stack `id` (none if negative), symbolized
/// through `/proc/kallsyms`, at most `depth` of them. The kernel has no
/// build id to give: in `build_id` mode its frames print as addresses.
fn kernel_stack(id: i64, mode: StackMode, depth: u32, env: &mut dyn Env) -> Stack {
    let addrs = if id < 0 {
        Vec::new()
    } else {
        env.stack(id as u32)
    };
    let frames = addrs
        .into_iter()
        .take(depth as usize)
        .map(|raw| match raw {
            RawFrame::Address(addr) => Frame {
                addr,
                symbol: env.kernel_symbol(addr).map(|s| (s.name, s.offset)),
                module: None,
                build_id: None,
            },
            // The kernel records its own frames by address, also in a
            // map of build IDs.
            RawFrame::InObject { offset, .. } => Frame {
                addr: offset,
                symbol: None,
                module: None,
                build_id: None,
            },
        })
        .collect();
    Stack {
        frames,
        style: stack_style(mode),
        kernel: true,
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

/// A signal's description as glibc's `strsignal(3)` words it on x86-64,
/// for 0 to 64 (SIGRTMAX); "N/A" past that, as bpftrace prints it.
pub fn signal_name(signal: i64) -> String {
    const STANDARD: [&str; 31] = [
        "Hangup",
        "Interrupt",
        "Quit",
        "Illegal instruction",
        "Trace/breakpoint trap",
        "Aborted",
        "Bus error",
        "Floating point exception",
        "Killed",
        "User defined signal 1",
        "Segmentation fault",
        "User defined signal 2",
        "Broken pipe",
        "Alarm clock",
        "Terminated",
        "Stack fault",
        "Child exited",
        "Continued",
        "Stopped (signal)",
        "Stopped",
        "Stopped (tty input)",
        "Stopped (tty output)",
        "Urgent I/O condition",
        "CPU time limit exceeded",
        "File size limit exceeded",
        "Virtual timer expired",
        "Profiling timer expired",
        "Window changed",
        "I/O possible",
        "Power failure",
        "Bad system call",
    ];
    // glibc keeps 32 and 33 for itself; SIGRTMIN is 34.
    const RT_MIN: i64 = 34;
    match signal {
        1..=31 => STANDARD[signal as usize - 1].to_string(),
        0 | 32 | 33 => format!("Unknown signal {signal}"),
        RT_MIN..=64 => format!("Real-time signal {}", signal - RT_MIN),
        _ => "N/A".to_string(),
    }
}

/// Formats a wall-clock time (ns since the epoch) with a `strftime`
/// format, in local time; `%f` is microseconds.
pub fn format_time(format: &str, wall_ns: i128) -> String {
    use chrono::TimeZone;
    use std::fmt::Write as _;
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

#[cfg(test)]
mod tests {
    use super::*;

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
        fn stack(&mut self, _: u32) -> Vec<crate::symbols::RawFrame> {
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
                field("p", Ty::ptr(Ty::Void), 16, None),
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
        let v = resolve(&decode(&Ty::Record(outer), &bytes, &reg), &mut env);
        use sdt_output::text::{datum, Context};
        assert_eq!(
            datum(&v, Context::Value),
            "{ .x = -7, .b = [233,3], .name = ab, .in = { .s = -2 }, .lo = 5, .hi = 21, .p = 0x1000 }"
        );
        assert_eq!(
            sdt_output::json::datum(&v),
            "{\"x\": -7, \"b\": [233,3], \"name\": \"ab\", \"in\": {\"s\": -2}, \
             \"lo\": 5, \"hi\": 21, \"p\": 4096}"
        );
        // In a key, array elements print as their type says, as in values.
        let b = resolve(
            &decode(&array(Ty::int(1, false), 2), &bytes[4..], &reg),
            &mut env,
        );
        assert_eq!(datum(&b, Context::Key), "[233,3]");
        assert_eq!(datum(&b, Context::Value), "[233,3]");
    }

    #[test]
    fn signals_are_named_as_strsignal_names_them() {
        assert_eq!(signal_name(2), "Interrupt");
        assert_eq!(signal_name(0), "Unknown signal 0");
        assert_eq!(signal_name(34), "Real-time signal 0");
        assert_eq!(signal_name(64), "Real-time signal 30");
        assert_eq!(signal_name(65), "N/A");
        assert_eq!(signal_name(-1), "N/A");
    }

    #[test]
    fn shown_values_print_their_own_way_and_printf_sees_their_numbers() {
        let reg = TypeRegistry::default();
        let mut env = Plain(reg.clone());
        let shown = |kind: Shown, bytes: &[u8], env: &mut Plain| {
            let v = decode(&Ty::Shown(kind), bytes, &reg);
            assert_eq!(v, Value::Shown(kind, &bytes[..kind.value_size() as usize]));
            let text = sdt_output::text::datum(&resolve(&v, env), sdt_output::text::Context::Value);
            (text, shown_number(kind, bytes))
        };
        let word = |v: i64| v.to_ne_bytes().repeat(2);
        assert_eq!(
            shown(Shown::Strerror, &word(2), &mut env),
            ("No such file or directory".into(), Some((2, true)))
        );
        assert_eq!(
            shown(Shown::SignalName, &word(9), &mut env),
            ("Killed".into(), Some((9, true)))
        );
        // A user id is 32 bits, whatever the word above it holds.
        assert_eq!(
            shown(Shown::Username, &word(-1), &mut env),
            ("4294967295".into(), Some((u64::from(u32::MAX), false)))
        );
        assert_eq!(
            shown(Shown::Probe, &word(3), &mut env),
            ("3".into(), Some((3, false)))
        );
        let mut v4 = vec![127, 0, 0, 1];
        v4.resize(16, 0xff);
        assert_eq!(
            shown(Shown::Inet { v6: false }, &v4, &mut env),
            ("127.0.0.1".into(), None)
        );
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(
            shown(Shown::Inet { v6: true }, &v6, &mut env),
            ("::1".into(), None)
        );
        // An address without a symbol is shown in hex.
        let mut usym = 0x1234u64.to_ne_bytes().to_vec();
        usym.extend(7u64.to_ne_bytes());
        assert_eq!(
            shown(Shown::USym, &usym, &mut env),
            ("0x1234".into(), Some((0x1234, false)))
        );
    }

    #[test]
    fn strerror_has_no_suffix() {
        assert_eq!(strerror(2), "No such file or directory");
    }
}
