//! The kernel's symbols, from `/proc/kallsyms`: an address for a name
//! (`kaddr("jiffies")`) and a name for an address (`ksym`, `kstack`).
//!
//! The file lists every symbol of the kernel and its modules as
//! `ADDRESS TYPE NAME [MODULE]`. Whether the addresses are real depends
//! on the reader, not the file: with `kptr_restrict` or without
//! CAP_SYSLOG (and `perf_event_paranoid` above 1) every address reads
//! as zero. Such a table is empty here, which [`KernelSymbols::hidden`]
//! tells apart from a kernel without symbols, so that messages can say
//! why.
//!
//! The table keeps all names in one string and sorts `(address, name)`
//! pairs once; a name for an address is a binary search, the symbol that
//! starts at or below it.

use std::io;

/// The kernel's symbols, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    names: String,
    /// `(address, start of the name in names, its length)`, by address.
    symbols: Vec<(u64, u32, u32)>,
    /// Lines whose address read as zero: symbols hidden from this reader.
    hidden: usize,
    /// Symbols of data (types `d`, `b`, `r`), which a kernel built
    /// without `CONFIG_KALLSYMS_ALL` lists only a few dozen of.
    data: usize,
}

/// A symbol an address falls in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    pub name: &'a str,
    /// Bytes from the symbol's start.
    pub offset: u64,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> io::Result<KernelSymbols> {
        Ok(KernelSymbols::parse(&std::fs::read_to_string(
            "/proc/kallsyms",
        )?))
    }

    /// The symbols of a `/proc/kallsyms` text; lines it cannot read are
    /// left out.
    pub fn parse(text: &str) -> KernelSymbols {
        let mut table = KernelSymbols::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(address), Some(kind), Some(name)) =
                (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let Ok(address) = u64::from_str_radix(address, 16) else {
                continue;
            };
            if address == 0 {
                table.hidden += 1;
                continue;
            }
            let (Ok(start), Ok(len)) =
                (u32::try_from(table.names.len()), u32::try_from(name.len()))
            else {
                break;
            };
            if matches!(kind, "d" | "D" | "b" | "B" | "r" | "R") {
                table.data += 1;
            }
            table.names.push_str(name);
            table.symbols.push((address, start, len));
        }
        table.symbols.sort_by_key(|s| s.0);
        table
    }

    /// Whether the file listed symbols whose addresses this reader may
    /// not see (all zero), and none it may.
    pub fn hidden(&self) -> bool {
        self.symbols.is_empty() && self.hidden > 0
    }

    /// Whether the table lists the kernel's variables, not only its
    /// functions: a kernel built without `CONFIG_KALLSYMS_ALL` lists a
    /// few dozen section markers and no variable (`jiffies`).
    pub fn lists_variables(&self) -> bool {
        self.data > 1000
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    fn name(&self, entry: &(u64, u32, u32)) -> &str {
        let (start, len) = (entry.1 as usize, entry.2 as usize);
        self.names.get(start..start + len).unwrap_or("")
    }

    /// The address of the first symbol called `name`, as bpftrace's
    /// `kaddr()` takes it.
    pub fn address(&self, name: &str) -> Option<u64> {
        // The first in the file's order: the lowest address among equals
        // is as good, and the table no longer knows the file's order.
        self.symbols
            .iter()
            .find(|s| self.name(s) == name)
            .map(|s| s.0)
    }

    /// The symbol `address` is in: the one that starts at it or closest
    /// below it. Addresses below the first symbol (all of user space)
    /// have none.
    pub fn symbol(&self, address: u64) -> Option<KernelSymbol<'_>> {
        let at = self.symbols.partition_point(|s| s.0 <= address);
        let entry = self.symbols.get(at.checked_sub(1)?)?;
        Some(KernelSymbol {
            name: self.name(entry),
            offset: address - entry.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81001000 T do_nanosleep
ffffffff82a05000 D jiffies
ffffffffc0200000 t helper\t[kvm]
not a line
ffffffff81000800 T startup_64
";

    #[test]
    fn names_and_addresses() {
        let k = KernelSymbols::parse(TEXT);
        assert_eq!(k.len(), 5);
        assert_eq!(k.address("jiffies"), Some(0xffffffff82a05000));
        assert_eq!(k.address("helper"), Some(0xffffffffc0200000));
        assert_eq!(k.address("nope"), None);
        assert_eq!(
            k.symbol(0xffffffff81001005),
            Some(KernelSymbol {
                name: "do_nanosleep",
                offset: 5
            })
        );
        assert_eq!(k.symbol(0xffffffff81000900).unwrap().name, "startup_64");
        assert_eq!(k.symbol(0x7fff_0000_1000), None);
        assert!(!k.hidden());
    }

    #[test]
    fn zero_addresses_are_hidden_symbols() {
        let k = KernelSymbols::parse("0000000000000000 T _stext\n0000000000000000 D jiffies\n");
        assert!(k.is_empty());
        assert!(k.hidden());
        assert_eq!(k.address("jiffies"), None);
        assert!(!KernelSymbols::parse("").hidden());
    }
}
