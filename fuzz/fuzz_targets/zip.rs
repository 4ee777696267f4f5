//! Whole-file input taken as a ZIP archive: the end of central directory,
//! every central directory entry, the local header of the member found,
//! and the member's bytes read as an ELF image through the same view the
//! tracer uses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for name in ["lib/x.so", "true", ""] {
        if let Ok(range) = sdt_elf::stored_member(data, name) {
            let member = &data[range];
            let _ = sdt_elf::functions(member);
            let _ = sdt_elf::parse(member);
        }
    }
});
