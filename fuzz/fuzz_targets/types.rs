//! Whole-file input: an ELF file's DWARF read by `sdt-types` (section
//! loading and decompression, the name index, every lookup, layout and
//! bpftrace definitions of what the index holds; functions at addresses
//! and source lines through the line tables).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sdt_types::{DebugInfo, Lookup, SourceLine};

fuzz_target!(|data: &[u8]| {
    let Ok(Some(info)) = DebugInfo::from_elf_bytes(data.to_vec()) else {
        return;
    };
    // Functions where the fixture's are, and lines of its source.
    for address in (0x1000..0x1800).step_by(0x10) {
        let _ = info.parameter_lines(address);
    }
    for line in [1, 40, 80, 120] {
        let _ = info.line_address(&SourceLine {
            file: "subsys.c".into(),
            line,
            column: None,
        });
    }
    let Ok(names) = info.names() else {
        return;
    };
    for name in names.iter().take(64) {
        if let Ok(Lookup::Found(id)) = info.find(name) {
            if let Ok(layout) = sdt_types::layout(&info, id) {
                let _ = layout.to_text();
            }
            let _ = sdt_types::bpftrace_definitions(&info, id);
        }
    }
});
