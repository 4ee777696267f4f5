//! Function information for programs made of several functions.
//!
//! A program that hands a callback to a helper (`bpf_for_each_map_elem`)
//! holds more than one function, and the kernel accepts a reference to
//! one only when the load describes every function with BTF: a `FUNC`
//! type per function, static for callbacks, and a record saying where
//! each one starts (`func_info`). Nothing else about the types matters to
//! the verifier for static functions, so every function here gets the
//! same prototype, `long f(void)`, in a BTF blob of a few dozen bytes
//! written by hand: a whole BTF writer (or a compiler that emits one)
//! would be far more than this needs.
//!
//! Task storage maps need BTF too: the kernel wants the types of their
//! keys (a 32-bit `int`) and values, which are bytes to sdt, so a value
//! is described as `char[N]` ([`storage_types`]).

use std::os::fd::OwnedFd;

use crate::error::{Error, Result};
use crate::insn::{Insn, PSEUDO_CALL, PSEUDO_FUNC};
use crate::sys;

/// The code of `call` in the JMP class.
const CALL: u8 = 0x85;

const BTF_MAGIC: u16 = 0xeb9f;
const BTF_VERSION: u8 = 1;
const HEADER_LEN: u32 = 24;
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const INT_SIGNED: u32 = 1 << 24;
const LINKAGE_STATIC: u32 = 0;
const LINKAGE_GLOBAL: u32 = 1;

/// The BTF of a program's functions and where each starts, ready to pass
/// to `BPF_PROG_LOAD`.
pub(crate) struct FuncInfo {
    pub btf: OwnedFd,
    /// `(first slot, FUNC type id)` per function, in slot order.
    pub records: Vec<[u32; 2]>,
}

/// Where the functions of `insns` start: slot 0, then every target of a
/// function reference or a call to a function of the program.
pub(crate) fn function_starts(insns: &[Insn]) -> Vec<u32> {
    let mut starts = vec![0u32];
    for (i, insn) in insns.iter().enumerate() {
        let refers = (insn.is_ld_imm64() && insn.src() == PSEUDO_FUNC)
            || (insn.code == CALL && insn.src() == PSEUDO_CALL);
        if refers {
            if let Ok(start) = u32::try_from(i as i64 + i64::from(insn.imm) + 1) {
                starts.push(start);
            }
        }
    }
    starts.sort_unstable();
    starts.dedup();
    starts
}

/// The function information of `insns`, loaded into the kernel; `None`
/// for a program of one function, which needs none.
pub(crate) fn func_info(insns: &[Insn]) -> Result<Option<FuncInfo>> {
    let starts = function_starts(insns);
    if starts.len() < 2 {
        return Ok(None);
    }
    let blob = blob(starts.len());
    let btf = sys::btf_load(&blob)
        .map_err(|e| Error::sys("loading the BTF of a program's functions", e))?;
    let records = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| [start, FIRST_FUNC + i as u32])
        .collect();
    Ok(Some(FuncInfo { btf, records }))
}

/// The BTF of a task storage map whose values are `value_size` bytes,
/// loaded, with the type ids of its key and value.
pub(crate) struct StorageTypes {
    pub btf: OwnedFd,
    pub key_type: u32,
    pub value_type: u32,
}

/// Loads `int` (1), `char` (2) and `char[value_size]` (3).
pub(crate) fn storage_types(value_size: u32) -> std::io::Result<StorageTypes> {
    let blob = storage_blob(value_size);
    Ok(StorageTypes {
        btf: sys::btf_load(&blob)?,
        key_type: 1,
        value_type: 3,
    })
}

fn storage_blob(value_size: u32) -> Vec<u8> {
    let strings = b"\0int\0char\0";
    let types: [u32; 14] = [
        // [1] INT int: 4 bytes, signed, 32 bits.
        1,
        KIND_INT << 24,
        4,
        INT_SIGNED | 32,
        // [2] INT char: 1 byte, 8 bits.
        5,
        KIND_INT << 24,
        1,
        8,
        // [3] ARRAY char[value_size], indexed by int.
        0,
        KIND_ARRAY << 24,
        0,
        2,
        1,
        value_size,
    ];
    header_and(&types, strings)
}

/// A BTF blob: the header, `types`, then `strings`.
fn header_and(types: &[u32], strings: &[u8]) -> Vec<u8> {
    let type_len = 4 * types.len() as u32;
    let mut out = Vec::new();
    out.extend_from_slice(&BTF_MAGIC.to_ne_bytes());
    out.push(BTF_VERSION);
    out.push(0);
    for field in [HEADER_LEN, 0, type_len, type_len, strings.len() as u32] {
        out.extend_from_slice(&field.to_ne_bytes());
    }
    for word in types {
        out.extend_from_slice(&word.to_ne_bytes());
    }
    out.extend_from_slice(strings);
    out
}

/// The type id of the first `FUNC`: `long` is 1, the prototype 2.
const FIRST_FUNC: u32 = 3;

/// BTF with `long`, `long (void)`, and `functions` functions of that
/// prototype: the first global (the program), the others static.
fn blob(functions: usize) -> Vec<u8> {
    let mut strings = vec![0u8];
    let mut name = |text: &str| {
        let at = strings.len() as u32;
        strings.extend_from_slice(text.as_bytes());
        strings.push(0);
        at
    };
    let long = name("long");
    let mut types: Vec<u32> = vec![
        // [1] INT long: 8 bytes, signed, 64 bits.
        long,
        KIND_INT << 24,
        8,
        INT_SIGNED | 64,
        // [2] FUNC_PROTO long (void).
        0,
        KIND_FUNC_PROTO << 24,
        1,
    ];
    for i in 0..functions {
        let (text, linkage) = if i == 0 {
            ("prog".to_string(), LINKAGE_GLOBAL)
        } else {
            (format!("callback{i}"), LINKAGE_STATIC)
        };
        types.extend([name(&text), KIND_FUNC << 24 | linkage, 2]);
    }
    header_and(&types, &strings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::Reg;

    #[test]
    fn functions_start_where_references_point() {
        let mut insns = Vec::new();
        insns.extend(Insn::ld_func(Reg::R2, 3)); // 0, 1 -> 4
        insns.push(Insn::mov64_imm(Reg::R0, 0)); // 2
        insns.push(Insn::exit()); // 3
        insns.push(Insn::mov64_imm(Reg::R0, 0)); // 4
        insns.push(Insn::exit()); // 5
        assert_eq!(function_starts(&insns), [0, 4]);
        assert_eq!(function_starts(&insns[2..4]), [0]);
    }

    #[test]
    fn the_blob_is_laid_out_as_btf() {
        let b = blob(2);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), BTF_MAGIC);
        let word = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
        let (type_len, str_off, str_len) = (word(12), word(16), word(20));
        // INT (4 words), FUNC_PROTO (3), two FUNCs (3 each).
        assert_eq!(type_len, 4 * (4 + 3 + 3 + 3));
        assert_eq!(str_off, type_len);
        let strings = &b[24 + str_off as usize..];
        assert_eq!(strings.len(), str_len as usize);
        assert_eq!(strings, b"\0long\0prog\0callback1\0");
        // The second function is static.
        let second_func_info = 24 + 4 * (4 + 3 + 3) + 4;
        assert_eq!(word(second_func_info), KIND_FUNC << 24 | LINKAGE_STATIC);
    }
}
