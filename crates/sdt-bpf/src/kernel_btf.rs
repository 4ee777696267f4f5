//! Kernel functions (kfuncs) by name, from the kernel's own BTF.
//!
//! A program calls a kfunc by the BTF type id of its `FUNC` in
//! `/sys/kernel/btf/vmlinux` ([`Insn::call_kfunc`](crate::Insn::call_kfunc)).
//! The id differs from build to build of the kernel (63613 for
//! `bpf_copy_from_user_str` on one 6.18 build), so it is looked up by
//! name on the machine that loads the program, never written down.
//!
//! Why by hand: finding one `FUNC` by name is a walk over the type
//! records that reads each one's kind and length and compares names only
//! for functions: a few dozen lines, where a BTF crate would parse and
//! keep every type of a 5 MB file. The walk stops, returning nothing, at
//! the first record it cannot read, so bytes that are not BTF (the file
//! is the kernel's, but the parser is fuzzed as if it were anyone's)
//! give "not found", never a panic.

use std::os::fd::AsFd;

use crate::error::{Error, Result};

/// Where the kernel publishes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const KIND_FUNC: u32 = 12;

/// The BTF type id of the kernel function `name`, from the running
/// kernel's BTF; `None` if the kernel has no such function (or no BTF).
///
/// The file is mapped where the kernel allows it (Linux 6.16): read, it
/// comes a page per system call, 1,347 calls and about 4 ms for this
/// kernel's 5.5 MB.
pub fn kernel_func_id(name: &str) -> Result<Option<u32>> {
    let file = match std::fs::File::open(VMLINUX_BTF) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::sys("opening the kernel's BTF", e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::sys("reading the kernel's BTF", e))?
        .len() as usize;
    if let Ok(mapped) = crate::sys::Mmap::map_file(file.as_fd(), len) {
        return Ok(func_id(mapped.bytes(0, len), name));
    }
    let mut btf = Vec::with_capacity(len);
    std::io::Read::read_to_end(&mut &file, &mut btf)
        .map_err(|e| Error::sys("reading the kernel's BTF", e))?;
    Ok(func_id(&btf, name))
}

/// The id of the `FUNC` type named `name` in the BTF blob `btf`, if it
/// has one and the blob can be read up to it.
pub fn func_id(btf: &[u8], name: &str) -> Option<u32> {
    let u16_at = |at: usize| Some(u16::from_ne_bytes(btf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(btf.get(at..at + 4)?.try_into().ok()?));
    if u16_at(0)? != MAGIC {
        return None;
    }
    let header = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
    let types = btf.get(header.checked_add(type_off)?..)?.get(..type_len)?;
    let strings = btf.get(header.checked_add(str_off)?..)?.get(..str_len)?;
    let wanted = name.as_bytes();
    let word = |at: usize| Some(u32::from_ne_bytes(types.get(at..at + 4)?.try_into().ok()?));
    let (mut at, mut id) = (0usize, 1u32);
    while at < types.len() {
        let (name_off, info) = (word(at)? as usize, word(at + 4)?);
        let kind = (info >> 24) & 0x1f;
        if kind == KIND_FUNC {
            let text = strings.get(name_off..)?;
            let end = text.iter().position(|&b| b == 0)?;
            if &text[..end] == wanted {
                return Some(id);
            }
        }
        at = at.checked_add(12 + tail_len(kind, info & 0xffff)?)?;
        id = id.checked_add(1)?;
    }
    None
}

/// Bytes that follow a type record of `kind` with `vlen` members; `None`
/// for a kind this walk does not know, where it must stop.
fn tail_len(kind: u32, vlen: u32) -> Option<usize> {
    let vlen = vlen as usize;
    Some(match kind {
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
        2 | 7..=12 | 16 | 18 => 0,
        // INT, VAR, DECL_TAG
        1 | 14 | 17 => 4,
        // ARRAY
        3 => 12,
        // STRUCT, UNION, DATASEC, ENUM64
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM, FUNC_PROTO
        6 | 13 => 8 * vlen,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob of `types` (words) and `strings`.
    fn blob(types: &[u32], strings: &[u8]) -> Vec<u8> {
        let type_len = 4 * types.len() as u32;
        let mut out = MAGIC.to_ne_bytes().to_vec();
        out.extend([1, 0]);
        for field in [24, 0, type_len, type_len, strings.len() as u32] {
            out.extend(field.to_ne_bytes());
        }
        types.iter().for_each(|w| out.extend(w.to_ne_bytes()));
        out.extend(strings);
        out
    }

    #[test]
    fn finds_a_function_past_records_of_every_length() {
        let strings = b"\0int\0s\0f\0g\0";
        let types = [
            // [1] INT int
            1,
            1 << 24,
            4,
            32,
            // [2] STRUCT s with two members
            5,
            4 << 24 | 2,
            8,
            0,
            1,
            0,
            0,
            1,
            32,
            // [3] FUNC_PROTO with one parameter
            0,
            13 << 24 | 1,
            1,
            0,
            1,
            // [4] FUNC f, [5] FUNC g
            7,
            12 << 24,
            3,
            9,
            12 << 24,
            3,
        ];
        let b = blob(&types, strings);
        assert_eq!(func_id(&b, "f"), Some(4));
        assert_eq!(func_id(&b, "g"), Some(5));
        // A struct is not a function, and a prefix is not the name.
        assert_eq!(func_id(&b, "s"), None);
        assert_eq!(func_id(&b, "in"), None);
    }

    #[test]
    fn bytes_that_are_not_btf_find_nothing() {
        assert_eq!(func_id(b"", "f"), None);
        assert_eq!(func_id(&[0xff; 64], "f"), None);
        let mut b = blob(&[0, 31 << 24, 0], b"\0");
        assert_eq!(func_id(&b, "f"), None, "unknown kind");
        b.truncate(30);
        assert_eq!(func_id(&b, "f"), None, "cut short");
    }

    #[test]
    fn the_running_kernel_names_the_string_kfunc_if_it_has_btf() {
        // Whatever the kernel, the lookup answers without error; where it
        // has BTF with the kfunc (Linux 6.12+), the id is a FUNC's.
        let id = kernel_func_id("bpf_copy_from_user_str").expect("readable BTF");
        if let (Some(id), Ok(btf)) = (id, std::fs::read(VMLINUX_BTF)) {
            assert_eq!(func_id(&btf, "bpf_copy_from_user_str"), Some(id));
            assert!(id > 1);
        }
        assert_eq!(kernel_func_id("no_such_function_anywhere").unwrap(), None);
    }
}
