//! Where a function's parameters are at its entry, by the x86-64 System V
//! calling convention: what a uprobe on the function's first instruction
//! can read of them.
//!
//! DWARF says what the parameters are; the ABI says where the caller put
//! them. Each parameter is classified by its type, one eightbyte at a
//! time (integers, pointers and enums are INTEGER, `float` and `double`
//! SSE, `long double` X87; a struct or union of at most 16 bytes merges
//! its members' classes per eightbyte, anything larger or misaligned goes
//! to MEMORY), then given registers in order: INTEGER eightbytes take
//! `rdi`, `rsi`, `rdx`, `rcx`, `r8`, `r9`, SSE ones `xmm0` to `xmm7`, and
//! a parameter that does not fit in what is left goes whole to the stack,
//! as MEMORY ones do, at the next eightbyte (sixteen for 16-byte-aligned
//! types) above the return address. A function that returns a MEMORY
//! value takes the address for it in `rdi` first.
//!
//! What a uprobe can read: the integer registers, which the kernel saves
//! in `pt_regs`, and the stack, which is user memory. Not the SSE
//! registers, so a `double` parameter, or a struct with a `double` in
//! it, is unreadable; it still takes its SSE register, so the integer
//! parameters after it are found where they are (`f(double d, int n)`
//! has `n` in `rdi`, not `rsi`). C++ classes that are not trivially
//! copyable are passed by address: DWARF says so (`DW_CC_pass_by_reference`),
//! and where a C++ class says nothing this parameter, and every later one,
//! is left unread rather than guessed.
//!
//! Written by hand: no crate classifies DWARF types by a calling
//! convention; compilers do it on their own type systems.

use sdt_types::{DebugInfo, Encoding, Error, Function, PassedAs, Type, TypeId};

/// Where a parameter is at the function's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// In these integer registers (their `pt_regs` offsets), eight bytes
    /// of the value each, in order.
    Registers(Vec<i16>),
    /// In memory, this many bytes above the stack pointer.
    Stack(u64),
    /// At the address this register holds.
    Reference(i16),
    /// Not readable by a uprobe, and why.
    Unreadable(String),
}

/// `pt_regs` offsets of `rdi`, `rsi`, `rdx`, `rcx`, `r8` and `r9`.
const INTEGER_REGISTERS: [i16; 6] = [112, 104, 96, 88, 72, 64];
const INTEGER_NAMES: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];
/// `pt_regs` offset of `rsp`.
pub(crate) const STACK_POINTER: i16 = 152;
const SSE_REGISTERS: usize = 8;

/// An eightbyte's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    None,
    Integer,
    Sse,
    SseUp,
    X87,
    Memory,
}

fn merge(a: Class, b: Class) -> Class {
    use Class::*;
    match (a, b) {
        (x, y) if x == y => x,
        (None, x) | (x, None) => x,
        (Memory, _) | (_, Memory) => Memory,
        (Integer, _) | (_, Integer) => Integer,
        (X87 | SseUp, _) | (_, X87 | SseUp) => Memory,
        _ => Sse,
    }
}

/// How a value of a type is passed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Passing {
    /// In registers, one class per eightbyte (none for an empty struct).
    Eightbytes(Vec<Class>),
    Memory,
}

/// The places of `f`'s parameters.
pub(crate) fn places(info: &DebugInfo, f: &Function) -> Result<Vec<Place>, Error> {
    let mut integers = 0;
    let mut sses = 0;
    let mut stack = 0u64;
    if let Some(returns) = f.returns {
        if returned_in_memory(info, returns, f.cplusplus)? {
            integers = 1;
        }
    }
    let mut lost: Option<String> = None;
    let mut places = Vec::new();
    for (i, p) in f.params.iter().enumerate() {
        if let Some(why) = &lost {
            places.push(Place::Unreadable(why.clone()));
            continue;
        }
        let name = p.name.clone().unwrap_or_else(|| format!("arg{i}"));
        let stripped = info.strip(Some(p.ty))?;
        let record = match stripped {
            Some(t) => matches!(info.get(t)?, Type::Record(_)).then_some(t),
            None => None,
        };
        if let Some(record) = record {
            match info.passed_as(record)? {
                PassedAs::Reference => {
                    if integers < INTEGER_REGISTERS.len() {
                        places.push(Place::Reference(INTEGER_REGISTERS[integers]));
                        integers += 1;
                    } else {
                        places.push(Place::Unreadable(
                            "it is passed by reference, and the reference is on the stack".into(),
                        ));
                        stack += 8;
                    }
                    continue;
                }
                PassedAs::Unsaid if f.cplusplus => {
                    places.push(Place::Unreadable(format!(
                        "DWARF does not say whether `{name}`, of a C++ class, is passed by value or by reference"
                    )));
                    lost = Some(format!(
                        "it comes after `{name}`, of a C++ class that DWARF does not say how it is passed"
                    ));
                    continue;
                }
                _ => {}
            }
        }
        let size = info.size_of(Some(p.ty))?;
        let passing = passing(info, p.ty, size)?;
        let in_registers = match &passing {
            Passing::Eightbytes(classes) => {
                let need_int = classes.iter().filter(|c| **c == Class::Integer).count();
                let need_sse = classes
                    .iter()
                    .filter(|c| matches!(c, Class::Sse | Class::SseUp))
                    .count();
                (integers + need_int <= INTEGER_REGISTERS.len() && sses + need_sse <= SSE_REGISTERS)
                    .then_some(classes)
            }
            Passing::Memory => None,
        };
        match in_registers {
            Some(classes) => {
                let mut registers = Vec::new();
                let mut first_sse = None;
                for class in classes {
                    match class {
                        Class::Integer => {
                            registers.push(INTEGER_REGISTERS[integers]);
                            integers += 1;
                        }
                        Class::Sse => {
                            first_sse.get_or_insert(sses);
                            sses += 1;
                        }
                        _ => {}
                    }
                }
                places.push(match first_sse {
                    None => Place::Registers(registers),
                    Some(xmm) => Place::Unreadable(format!(
                        "{} in %xmm{xmm}, which uprobes do not save",
                        if registers.is_empty() {
                            "it is passed"
                        } else {
                            "part of it is passed"
                        }
                    )),
                });
            }
            None => {
                let align = if alignment(info, Some(p.ty), 0)? >= 16 {
                    16
                } else {
                    8
                };
                stack = stack.next_multiple_of(align);
                places.push(Place::Stack(8 + stack));
                stack += size.next_multiple_of(8);
            }
        }
    }
    Ok(places)
}

/// The name of the register at `pt_regs` offset `offset`, for messages.
pub(crate) fn register_name(offset: i16) -> &'static str {
    INTEGER_REGISTERS
        .iter()
        .position(|r| *r == offset)
        .map_or("?", |i| INTEGER_NAMES[i])
}

/// Whether a function returning `returns` takes the address to return
/// it at as a hidden first argument.
fn returned_in_memory(info: &DebugInfo, returns: TypeId, cplusplus: bool) -> Result<bool, Error> {
    let stripped = info.strip(Some(returns))?;
    let Some(t) = stripped else { return Ok(false) };
    if let Type::Record(_) = info.get(t)? {
        match info.passed_as(t)? {
            PassedAs::Reference => return Ok(true),
            PassedAs::Unsaid if cplusplus => {}
            _ => {}
        }
    }
    let size = info.size_of(Some(returns))?;
    Ok(match passing(info, returns, size)? {
        Passing::Memory => true,
        // X87 values come back in st0, not through memory.
        Passing::Eightbytes(_) => false,
    })
}

fn passing(info: &DebugInfo, ty: TypeId, size: u64) -> Result<Passing, Error> {
    if size > 16 {
        return Ok(Passing::Memory);
    }
    let mut classes = vec![Class::None; size.div_ceil(8) as usize];
    if !leaves(info, Some(ty), 0, &mut classes, 0)? {
        return Ok(Passing::Memory);
    }
    if classes
        .iter()
        .any(|c| matches!(c, Class::Memory | Class::X87))
    {
        return Ok(Passing::Memory);
    }
    // An SSEUP not after an SSE is SSE.
    for i in 0..classes.len() {
        if classes[i] == Class::SseUp && (i == 0 || classes[i - 1] != Class::Sse) {
            classes[i] = Class::Sse;
        }
    }
    // Eightbytes of padding only still take their place in a register
    // pair, as INTEGER (GCC and Clang agree).
    for c in &mut classes {
        if *c == Class::None {
            *c = Class::Integer;
        }
    }
    Ok(Passing::Eightbytes(classes))
}

/// Merges the class of every scalar of a value of `ty` at `offset` into
/// `classes`; `false` when one is misaligned (a packed struct), which
/// makes the value MEMORY.
fn leaves(
    info: &DebugInfo,
    ty: Option<TypeId>,
    offset: u64,
    classes: &mut [Class],
    depth: u32,
) -> Result<bool, Error> {
    let Some(id) = ty else { return Ok(true) };
    if depth > 64 {
        return Ok(false);
    }
    let mark = |offset: u64, size: u64, class: Class, classes: &mut [Class]| -> bool {
        if size == 0 {
            return true;
        }
        let first = (offset / 8) as usize;
        let last = ((offset + size - 1) / 8) as usize;
        for (i, c) in classes.iter_mut().enumerate().take(last + 1).skip(first) {
            // The upper half of a 16-byte float is SSEUP.
            let this = if class == Class::Sse && i > first {
                Class::SseUp
            } else {
                class
            };
            *c = merge(*c, this);
        }
        true
    };
    Ok(match info.get(id)? {
        Type::Base {
            name,
            size,
            encoding,
        } => {
            if size > 0 && offset % size.min(16) != 0 {
                return Ok(false);
            }
            let class = match encoding {
                Encoding::Float if name.contains("long double") => Class::X87,
                Encoding::Float => Class::Sse,
                _ => Class::Integer,
            };
            mark(offset, size, class, classes)
        }
        Type::Pointer { .. } | Type::Function => {
            if offset % 8 != 0 {
                return Ok(false);
            }
            mark(offset, 8, Class::Integer, classes)
        }
        Type::Enum(e) => {
            if e.size > 0 && offset % e.size != 0 {
                return Ok(false);
            }
            mark(offset, e.size, Class::Integer, classes)
        }
        Type::Typedef { target, .. } | Type::Qualified { target, .. } => {
            leaves(info, target, offset, classes, depth + 1)?
        }
        Type::Array { elem, dims } => {
            let count = dims
                .iter()
                .fold(1u64, |n, d| n.saturating_mul(d.unwrap_or(0)));
            let elem_size = info.size_of(Some(elem))?;
            if elem_size == 0 {
                return Ok(true);
            }
            for i in 0..count.min(16) {
                if !leaves(info, Some(elem), offset + i * elem_size, classes, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
        Type::Record(r) => {
            for m in &r.members {
                let ok = match m.bitfield {
                    Some(b) => mark(
                        offset + b.bit_offset / 8,
                        (b.bit_offset % 8 + b.bits).div_ceil(8),
                        Class::Integer,
                        classes,
                    ),
                    None => leaves(info, Some(m.ty), offset + m.offset, classes, depth + 1)?,
                };
                if !ok {
                    return Ok(false);
                }
            }
            true
        }
    })
}

/// A type's alignment, as far as the stack slot of a parameter goes.
fn alignment(info: &DebugInfo, ty: Option<TypeId>, depth: u32) -> Result<u64, Error> {
    let Some(id) = ty else { return Ok(1) };
    if depth > 64 {
        return Ok(8);
    }
    Ok(match info.get(id)? {
        Type::Base { size, .. } => size.clamp(1, 16),
        Type::Pointer { .. } | Type::Function => 8,
        Type::Enum(e) => e.size.clamp(1, 8),
        Type::Typedef { target, .. } | Type::Qualified { target, .. } => {
            alignment(info, target, depth + 1)?
        }
        Type::Array { elem, .. } => alignment(info, Some(elem), depth + 1)?,
        Type::Record(r) => {
            let mut most = 1;
            for m in &r.members {
                most = most.max(alignment(info, Some(m.ty), depth + 1)?);
            }
            most
        }
    })
}
