//! Whole-file input: ELF headers, note framing, note bodies, prelink
//! correction, address translation, then every argument and site check.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(probes) = sdt_elf::parse(data) else {
        return;
    };
    for probe in probes.iter() {
        for site in probe.sites {
            for arg in site.args() {
                let _ = arg.operand();
                if let sdt_elf::Location::Unsupported(why) = arg.location {
                    let _ = why.to_string();
                }
            }
            let _ = sdt_elf::classify(site.arch, sdt_elf::site_code(data, site));
        }
    }
    for skipped in &probes.skipped {
        let _ = skipped.to_string();
    }
});
