//! Whole-blob input: the kernel's BTF as `sdt-kernel` reads it (the
//! header and sections, the index of every type, the decoding of each,
//! names, layouts), and the same bytes cut in two as a module's split BTF
//! over a base.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sdt_kernel::{Btf, Kind};

/// Decodes every type (up to a bound), lays it out, and looks up what it
/// names, as the binder does for a script's casts.
fn walk(btf: &Btf) {
    let mut names = Vec::new();
    for id in 0..=(btf.len().min(4096) as u32) {
        let Ok(kind) = btf.get(id) else { continue };
        let _ = btf.size_of(id);
        let _ = btf.align_of(id);
        match kind {
            Kind::Record { name, union, .. } if !name.is_empty() => {
                names.push(format!("{} {name}", if union { "union" } else { "struct" }))
            }
            Kind::Typedef { name, .. } | Kind::Int { name, .. } => names.push(name.to_string()),
            Kind::Enum { name, .. } => names.push(format!("enum {name}")),
            _ => {}
        }
    }
    for name in names.iter().take(32) {
        if let Some(id) = btf.find(name) {
            let _ = btf.get(id);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(btf) = Btf::parse(data.to_vec()) {
        walk(&btf);
    }
    let (base, module) = data.split_at(data.len() / 2);
    if let Ok(base) = Btf::parse(base.to_vec()) {
        if let Ok(split) = Btf::parse_split(module.to_vec(), Arc::new(base)) {
            walk(&split);
        }
    }
});
