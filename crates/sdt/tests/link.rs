//! The emitted sections survive every build and link configuration.
//!
//! The fixture is built in debug, in release without LTO and with thin and
//! fat LTO, each with the bfd, gold and lld linkers and `--gc-sections`.
//! `readelf` must then find every probe with a consistent layout: each
//! note's base is the address of `.stapsdt.base`, each site is the 5-byte
//! no-op in an executable segment, and each semaphore is a zeroed, aligned
//! counter in `.probes`, which starts a page, one per provider and name
//! shared by all its sites.
//! The fixture's `sdt-fixture-shared` crate has a probing function that
//! nothing calls: no note may point at it once the linker has dropped it.

mod common;

use std::collections::HashMap;

use common::{fixture, stdout_of, Config, Elf, Linker, Lto};

const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Probes of the fixture and how many sites each has at least.
const PROBES: [(&str, &str, usize); 5] = [
    ("fixture", "values", 1),
    ("fixture", "untyped", 1),
    // One site in the binary, one in the `sdt-fixture-shared` crate.
    ("fixture", "shared", 2),
    ("redzone", "safe", 1),
    // The hand-written site of the red-zone experiment: no semaphore.
    ("redzone", "hazard", 1),
];

fn check(config: Config) {
    let path = fixture(config);
    let elf = Elf::read(&path);
    let context = format!("{config:?} ({})", path.display());

    check_linker(&elf, config.linker, &context);

    let base = elf
        .section(".stapsdt.base")
        .unwrap_or_else(|| panic!("{context}: no .stapsdt.base section"));
    assert_eq!(base.size, 1, "{context}: .stapsdt.base size");
    let probes = elf
        .section(".probes")
        .unwrap_or_else(|| panic!("{context}: no .probes section"));
    // On a page of its own, which no other segment maps: the kernel raises
    // a semaphore in the first writable mapping of its file offset.
    assert_eq!(probes.addr % 4096, 0, "{context}: .probes not page-aligned");
    assert_eq!(
        probes.offset % 4096,
        0,
        "{context}: .probes not page-aligned in the file"
    );

    for (provider, name, sites) in PROBES {
        let found = elf.notes_of(provider, name).len();
        assert!(
            found >= sites,
            "{context}: {provider}:{name} has {found} notes, expected at least {sites}"
        );
    }

    let mut semaphores: HashMap<(&str, &str), u64> = HashMap::new();
    for note in &elf.notes {
        let what = format!(
            "{context}: {}:{} at {:#x}",
            note.provider, note.name, note.pc
        );
        assert_eq!(
            note.base, base.addr,
            "{what}: note base != sh_addr(.stapsdt.base)"
        );
        let text = elf
            .load_of(note.pc)
            .unwrap_or_else(|| panic!("{what}: site in no segment"));
        assert!(text.flags.contains('E'), "{what}: site not executable");
        assert_eq!(
            elf.bytes_at(note.pc, 5),
            NOP5,
            "{what}: site is not a 5-byte no-op"
        );

        if (note.provider.as_str(), note.name.as_str()) == ("redzone", "hazard") {
            assert_eq!(note.semaphore, 0, "{what}");
            continue;
        }
        let sem = note.semaphore;
        assert!(
            (probes.addr..probes.addr + probes.size).contains(&sem),
            "{what}: semaphore {sem:#x} outside .probes"
        );
        assert_eq!(sem % 2, 0, "{what}: semaphore {sem:#x} misaligned");
        let data = elf.load_of(sem).expect("semaphore in a segment");
        assert!(data.flags.contains('W'), "{what}: semaphore not writable");
        assert_eq!(elf.bytes_at(sem, 2), [0, 0], "{what}: semaphore not zero");
        let shared = *semaphores
            .entry((&note.provider, &note.name))
            .or_insert(sem);
        assert_eq!(
            sem, shared,
            "{what}: sites of one probe with different semaphores"
        );
    }
    let mut distinct: Vec<u64> = semaphores.values().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        semaphores.len(),
        "{context}: probes share a semaphore"
    );

    let values = elf.notes_of("fixture", "values");
    check_specs(&values[0].args, &[-4, 8, 8, 8, -1, 1, 8, 2], &context);
    check_specs(
        &elf.notes_of("fixture", "untyped")[0].args,
        &[8, -8],
        &context,
    );
}

/// Checks that the linker that was asked for is the one that linked.
fn check_linker(elf: &Elf, linker: Linker, context: &str) {
    let gold = elf.section(".note.gnu.gold-version").is_some();
    let comment = if elf.section(".comment").is_some() {
        stdout_of("readelf", &["-p", ".comment", elf.path.to_str().unwrap()])
    } else {
        String::new()
    };
    let lld = comment.contains("LLD");
    match linker {
        Linker::Default => {}
        Linker::Bfd => assert!(!gold && !lld, "{context}: not linked by bfd"),
        Linker::Gold => assert!(gold, "{context}: not linked by gold"),
        Linker::Lld => assert!(lld, "{context}: not linked by lld"),
    }
}

/// Checks a note's argument specs: their sizes, and for each register
/// operand that the register's width is the size. A pair of memory
/// operands `8@(%r) 8@8(%r)` is a `&str` or `&[u8]`.
fn check_specs(args: &str, sizes: &[i32], context: &str) {
    let specs: Vec<(i32, &str)> = args
        .split(' ')
        .map(|spec| {
            let (size, operand) = spec.split_once('@').expect("SIZE@OPERAND");
            (size.parse().expect("integer size"), operand)
        })
        .collect();
    let found: Vec<i32> = specs.iter().map(|(size, _)| *size).collect();
    assert_eq!(found, sizes, "{context}: sizes of {args:?}");
    let mut pending_pair: Option<&str> = None;
    for (size, operand) in specs {
        if let Some(register) = operand.strip_prefix('%') {
            assert_eq!(
                register_width(register),
                Some(size.unsigned_abs()),
                "{context}: {size}@{operand} in {args:?}"
            );
        } else if let Some(register) = operand.strip_prefix("(%") {
            pending_pair = Some(register);
        } else {
            let register = operand.strip_prefix("8(%").expect("pointer/length pair");
            assert_eq!(pending_pair.take(), Some(register), "{context}: {args:?}");
        }
    }
}

/// The width in bytes of an x86-64 general-purpose register name.
fn register_width(name: &str) -> Option<u32> {
    const LEGACY: [&str; 8] = ["ax", "bx", "cx", "dx", "si", "di", "bp", "sp"];
    const BYTES: [&str; 8] = ["al", "bl", "cl", "dl", "sil", "dil", "bpl", "spl"];
    if let Some(number) = name
        .strip_prefix('r')
        .filter(|n| n.starts_with(|c: char| c.is_ascii_digit()))
    {
        let digits = number.trim_end_matches(['d', 'w', 'b']);
        if !matches!(digits.parse::<u8>(), Ok(8..=15)) {
            return None;
        }
        return Some(match &number[digits.len()..] {
            "" => 8,
            "d" => 4,
            "w" => 2,
            "b" => 1,
            _ => return None,
        });
    }
    if BYTES.contains(&name) {
        return Some(1);
    }
    if LEGACY.contains(&name) {
        return Some(2);
    }
    let (prefix, rest) = name.split_at(1);
    LEGACY.contains(&rest).then_some(match prefix {
        "e" => 4,
        "r" => 8,
        _ => return None,
    })
}

macro_rules! configs {
    ($($test:ident: $release:expr, $lto:ident, $linker:ident;)*) => {$(
        #[test]
        fn $test() {
            check(Config { release: $release, lto: Lto::$lto, linker: Linker::$linker });
        }
    )*};
}

configs! {
    debug_default: false, Off, Default;
    release_default: true, Off, Default;
    release_bfd: true, Off, Bfd;
    release_gold: true, Off, Gold;
    release_lld: true, Off, Lld;
    thin_lto_bfd: true, Thin, Bfd;
    thin_lto_gold: true, Thin, Gold;
    thin_lto_lld: true, Thin, Lld;
    fat_lto_bfd: true, Fat, Bfd;
    fat_lto_gold: true, Fat, Gold;
    fat_lto_lld: true, Fat, Lld;
}

#[test]
fn register_widths() {
    assert_eq!(register_width("rax"), Some(8));
    assert_eq!(register_width("eax"), Some(4));
    assert_eq!(register_width("ax"), Some(2));
    assert_eq!(register_width("al"), Some(1));
    assert_eq!(register_width("sil"), Some(1));
    assert_eq!(register_width("r9w"), Some(2));
    assert_eq!(register_width("r15d"), Some(4));
    assert_eq!(register_width("r8b"), Some(1));
    assert_eq!(register_width("r8"), Some(8));
    assert_eq!(register_width("r16"), None);
    assert_eq!(register_width("xmm0"), None);
}
