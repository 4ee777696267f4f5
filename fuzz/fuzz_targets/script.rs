//! Scripts through the parser, the checker and the code generator: any
//! text gets a program or diagnostics, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let params = ["1".to_string(), "word".to_string()];
    match sdt_script::compile_offline(text, &params) {
        Ok((_, compiled)) => {
            for program in &compiled.programs {
                assert!(!program.insns.is_empty());
            }
        }
        Err(diagnostics) => {
            for d in &diagnostics.0 {
                // Spans stay inside the text, so rendering them works.
                let _ = d.to_text("fuzz.bt", text);
            }
        }
    }
});
