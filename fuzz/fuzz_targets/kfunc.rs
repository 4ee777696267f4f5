//! BTF blobs: the walk that finds a kernel function's type id by name
//! (`sdt_bpf::func_id`), for names a blob may or may not hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for name in ["bpf_copy_from_user_str", "", "f", "int"] {
        let _ = sdt_bpf::func_id(data, name);
    }
});
