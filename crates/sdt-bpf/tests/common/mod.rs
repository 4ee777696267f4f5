//! Shared by the integration tests: privilege checks and symbol lookup.
#![allow(dead_code)] // each test binary uses a different part

use std::sync::{Mutex, MutexGuard};

use object::{Object, ObjectSegment, ObjectSymbol};
use sdt_bpf::{Map, MapSpec, MapType};

/// Whether BPF works here. Without privileges the test fails under
/// `CI=true` and is skipped, loudly, elsewhere.
pub fn privileged(test: &str) -> bool {
    match Map::create(&MapSpec::new(MapType::Array, 4, 8, 1)) {
        Ok(_) => true,
        Err(e) if e.is_permission_denied() => {
            sdt_testing::require(false, &format!("{test}: BPF ({e})"))
        }
        Err(e) => panic!("{test}: cannot create a BPF map: {e}"),
    }
}

/// Serializes tests that fire uprobes in this process, so that records
/// of one test do not land in another's ring buffer.
pub fn uprobe_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// File offset in this test executable of the symbol `name`: its
/// virtual address translated through the PT_LOAD segment holding it.
pub fn file_offset(name: &str) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let data = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let addr = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("symbol {name} not in {}", exe.display()))
        .address();
    file.segments()
        .find_map(|seg| {
            let (offset, size) = seg.file_range();
            (seg.address() <= addr && addr < seg.address() + size)
                .then(|| addr - seg.address() + offset)
        })
        .unwrap_or_else(|| panic!("symbol {name} at {addr:#x} is in no loaded segment"))
}
