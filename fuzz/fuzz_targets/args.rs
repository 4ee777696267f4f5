//! Argument-spec strings for every architecture, and the nop classifier.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sdt_elf::{Arch, Location};

const ARCHES: [Arch; 8] = [
    Arch::X86_64,
    Arch::I386,
    Arch::Aarch64,
    Arch::Riscv64,
    Arch::S390x,
    Arch::Ppc64,
    Arch::Ppc64le,
    Arch::Other(0),
];

fuzz_target!(|data: &[u8]| {
    for arch in ARCHES {
        let _ = sdt_elf::classify(arch, data);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for arch in ARCHES {
        for arg in sdt_elf::args(arch, text) {
            assert!(text.contains(arg.spec));
            if let Some(size) = arg.size {
                assert!(matches!(size, 1 | 2 | 4 | 8));
            }
            match arg.location {
                Location::Unsupported(why) => {
                    let _ = why.to_string();
                }
                Location::Register(r) => assert!(matches!(r.width, 1 | 2 | 4 | 8)),
                Location::Memory(m) => assert!(matches!(m.scale, 1 | 2 | 4 | 8)),
                Location::Symbol(m) => {
                    assert!(matches!(m.scale, 1 | 2 | 4 | 8));
                    assert!(!m.symbol.is_empty() && arg.spec.contains(m.symbol));
                    let _ = m.to_string();
                }
                Location::Constant(_) => {}
            }
        }
    }
});
