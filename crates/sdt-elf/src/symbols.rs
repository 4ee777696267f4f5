//! Function symbols, for uprobes: names (also demangled), addresses and
//! the file offsets a uprobe attaches at; and whether an offset into a
//! function starts an instruction.
//!
//! Symbols come from `.symtab` and `.dynsym` (a stripped file still has
//! the latter). C++ and Rust names are demangled so that a pattern can
//! name `ns::Class::method` or `crate::module::function`. The instruction
//! check decodes x86-64 code with `iced-x86` from the function's start: a
//! uprobe in the middle of an instruction would corrupt the program.

use std::collections::HashMap;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::{ElfError, SymbolError, SymbolMemory};

/// A function defined in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The name as the symbol table has it (mangled for C++ and Rust).
    pub name: String,
    /// The demangled name, without Rust's hash, when the name is mangled.
    pub demangled: Option<String>,
    pub address: u64,
    pub size: u64,
    /// Where the function's first byte is in the file, through the
    /// executable segment that holds it.
    pub file_offset: Option<u64>,
}

impl Function {
    /// The name to show: demangled where possible.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }
}

/// Every function symbol of an ELF file, once per address and name, in
/// address order.
pub fn functions(data: &[u8]) -> Result<Vec<Function>, ElfError> {
    let file = object::File::parse(data).map_err(|_| ElfError::NotElf)?;
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .filter(|s| {
            matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0)
        })
        .map(|s| {
            let (offset, size) = s.file_range();
            (s.address(), size.min(s.size()), offset)
        })
        .collect();
    let file_offset = |address: u64| {
        segments.iter().find_map(|&(vaddr, size, offset)| {
            let delta = address.checked_sub(vaddr)?;
            (delta < size).then_some(offset + delta)
        })
    };
    let mut functions: Vec<Function> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            if name.is_empty() {
                return None;
            }
            // `name@@VERSION` in .dynsym: the version is not part of the name.
            let name = name.split('@').next().unwrap_or(&name).to_string();
            Some(Function {
                demangled: demangle(&name),
                address: s.address(),
                size: s.size(),
                file_offset: file_offset(s.address()),
                name,
            })
        })
        .collect();
    functions.sort_by(|a, b| (a.address, &a.name).cmp(&(b.address, &b.name)));
    functions.dedup_by(|a, b| a.address == b.address && a.name == b.name);
    Ok(functions)
}

/// What reading an argument such as `8+table(%rip)` needs from a file:
/// the addresses of the symbols it may name and the address ranges the
/// file loads.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    /// Every defined data, code or untyped symbol of `.symtab` and
    /// `.dynsym`, by name. A name that two different addresses share (two
    /// `static` variables of one name in different source files) maps to
    /// `None`: which one the compiler meant cannot be told.
    addresses: HashMap<String, Option<u64>>,
    /// `[start, end)` of every `PT_LOAD` segment in memory.
    loaded: Vec<(u64, u64)>,
}

impl SymbolTable {
    pub(crate) fn read(data: &[u8]) -> Result<SymbolTable, ElfError> {
        let file = object::File::parse(data).map_err(|_| ElfError::NotElf)?;
        let mut addresses: HashMap<String, Option<u64>> = HashMap::new();
        for s in file.symbols().chain(file.dynamic_symbols()) {
            if !s.is_definition()
                || !matches!(
                    s.kind(),
                    SymbolKind::Data | SymbolKind::Text | SymbolKind::Unknown
                )
            {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            let name = name.split('@').next().unwrap_or(name);
            if name.is_empty() {
                continue;
            }
            addresses
                .entry(name.to_string())
                .and_modify(|a| {
                    if *a != Some(s.address()) {
                        *a = None;
                    }
                })
                .or_insert(Some(s.address()));
        }
        let loaded = file
            .segments()
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .collect();
        Ok(SymbolTable { addresses, loaded })
    }

    /// The link-time address where `memory` starts before its registers
    /// are added: its symbol's address plus its offset. The symbol must be
    /// in a loaded segment, and without registers so must all `size`
    /// bytes of the value, or the address would not move with the file.
    pub(crate) fn address(&self, memory: &SymbolMemory<'_>, size: u8) -> Result<u64, SymbolError> {
        let name = memory.symbol;
        if name.starts_with(".L") {
            return Err(SymbolError::AssemblerLabel(name.to_string()));
        }
        let symbol = match self.addresses.get(name) {
            Some(Some(address)) => *address,
            Some(None) => return Err(SymbolError::Ambiguous(name.to_string())),
            None => return Err(SymbolError::Missing(name.to_string())),
        };
        let address = symbol.wrapping_add(memory.offset as u64);
        let in_segment = |start: u64, len: u64| {
            self.loaded.iter().any(|&(from, to)| {
                start >= from && start.checked_add(len).is_some_and(|end| end <= to)
            })
        };
        let registers = memory.base.is_some() || memory.index.is_some();
        let loaded = if registers {
            in_segment(symbol, 1)
        } else {
            in_segment(address, u64::from(size))
        };
        if !loaded {
            let shown = SymbolMemory {
                base: None,
                index: None,
                ..*memory
            };
            return Err(SymbolError::NotLoaded {
                symbol: shown.to_string(),
                address,
            });
        }
        Ok(address)
    }
}

/// The definitions of a data symbol (or function, or untyped symbol)
/// named `name`: link-time address and size, once per address. More than
/// one means two `static` variables of one name, which `uaddr()` cannot
/// choose between.
pub fn data_symbols(data: &[u8], name: &str) -> Result<Vec<(u64, u64)>, ElfError> {
    let file = object::File::parse(data).map_err(|_| ElfError::NotElf)?;
    let mut found: Vec<(u64, u64)> = Vec::new();
    for s in file.symbols().chain(file.dynamic_symbols()) {
        let defined = s.is_definition()
            && matches!(
                s.kind(),
                SymbolKind::Data | SymbolKind::Text | SymbolKind::Unknown
            );
        let named = s.name().is_ok_and(|n| n.split('@').next() == Some(name));
        if defined && named && !found.iter().any(|&(a, _)| a == s.address()) {
            found.push((s.address(), s.size()));
        }
    }
    Ok(found)
}

/// The demangled form of a C++ or Rust symbol, if it is one.
pub fn demangle(name: &str) -> Option<String> {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return Some(format!("{rust:#}"));
    }
    if name.starts_with("_Z") {
        let symbol = cpp_demangle::Symbol::new(name).ok()?;
        return symbol.demangle().ok();
    }
    None
}

/// Whether byte `offset` of x86-64 `code` (a function from its first
/// byte) starts an instruction. `None` if the code cannot be decoded up to
/// there.
pub fn is_instruction_boundary(code: &[u8], offset: u64) -> Option<bool> {
    use iced_x86::{Decoder, DecoderOptions};
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    while decoder.can_decode() {
        let ip = decoder.ip();
        if ip == offset {
            return Some(true);
        }
        if ip > offset {
            return Some(false);
        }
        let insn = decoder.decode();
        if insn.is_invalid() {
            return None;
        }
    }
    (decoder.ip() == offset).then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Data symbols under names of their own, for the test to look up
    // (`no_mangle` counts as unsafe: two objects could export one name).
    #[allow(unsafe_code)]
    #[no_mangle]
    #[used]
    static SDT_ELF_TEST_FIRST: [u64; 2] = [1, 2];
    #[allow(unsafe_code)]
    #[no_mangle]
    #[used]
    static SDT_ELF_TEST_SECOND: u64 = 3;

    #[test]
    fn data_symbols_are_where_the_program_finds_them() {
        // Link-time addresses differ by what the running program's do,
        // wherever it is loaded: what reading `sym(%rip)` relies on.
        let file = crate::ElfFile::open(std::env::current_exe().unwrap()).unwrap();
        let at = |symbol, offset, size| {
            file.symbol_memory(
                &SymbolMemory {
                    symbol,
                    offset,
                    base: None,
                    index: None,
                    scale: 1,
                },
                size,
            )
        };
        let first = at("SDT_ELF_TEST_FIRST", 8, 8).unwrap();
        let second = at("SDT_ELF_TEST_SECOND", 0, 8).unwrap();
        let running = |p: *const u64| p as u64;
        assert_eq!(
            second.wrapping_sub(first),
            running(std::ptr::addr_of!(SDT_ELF_TEST_SECOND))
                .wrapping_sub(running(&SDT_ELF_TEST_FIRST[1]))
        );
        assert_eq!(
            at("sdt_elf_no_such_symbol", 0, 4),
            Err(SymbolError::Missing("sdt_elf_no_such_symbol".into()))
        );
        assert_eq!(
            at(".LC0", 0, 4),
            Err(SymbolError::AssemblerLabel(".LC0".into()))
        );
        // Far past the end of every segment: never read.
        assert!(matches!(
            at("SDT_ELF_TEST_SECOND", 1 << 40, 8),
            Err(SymbolError::NotLoaded { .. })
        ));
    }

    #[test]
    fn boundaries_of_real_instructions() {
        // push rbp; mov rbp, rsp; mov eax, 0x1; pop rbp; ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x5d, 0xc3,
        ];
        let starts: Vec<u64> = (0..code.len() as u64)
            .filter(|&o| is_instruction_boundary(&code, o) == Some(true))
            .collect();
        assert_eq!(starts, [0, 1, 4, 9, 10]);
        assert_eq!(is_instruction_boundary(&code, 2), Some(false));
    }

    #[test]
    fn demangles_cpp_and_rust() {
        assert_eq!(
            demangle("_ZN2ns1K4methEi").as_deref(),
            Some("ns::K::meth(int)")
        );
        assert_eq!(
            demangle("_ZN11sdt_example5place17h0123456789abcdefE").as_deref(),
            Some("sdt_example::place")
        );
        assert_eq!(demangle("malloc"), None);
    }

    /// A function that stays a symbol of its own in release builds too,
    /// where a test function may be inlined into the harness's closure.
    #[inline(never)]
    fn never_inlined(x: u64) -> u64 {
        std::hint::black_box(x) + 1
    }

    #[test]
    fn finds_own_functions() {
        assert_eq!(never_inlined(std::hint::black_box(1)), 2);
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let all = functions(&exe).unwrap();
        let me = all
            .iter()
            .find(|f| f.display_name().ends_with("symbols::tests::never_inlined"))
            .expect("this test's function is a symbol");
        assert!(me.size > 0);
        assert!(me.file_offset.is_some());
    }
}
