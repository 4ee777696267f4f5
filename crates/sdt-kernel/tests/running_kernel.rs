//! The running kernel's BTF and symbols, read as sdt reads them, checked
//! against what pahole and /proc say about the same kernel.

use std::process::Command;

use sdt_kernel::{Btf, KernelSymbols, Kind};

/// `pahole`'s offsets of `members` of `struct task_struct` on this kernel.
fn pahole_offsets(members: &[&str]) -> Vec<u64> {
    let out = Command::new("pahole")
        .args(["-C", "task_struct", "/sys/kernel/btf/vmlinux"])
        .output()
        .expect("pahole runs");
    let text = String::from_utf8_lossy(&out.stdout);
    members
        .iter()
        .map(|m| {
            // `\tpid_t   pid;   /*  1264     4 */`
            let line = text
                .lines()
                .find(|l| {
                    l.split(';').next().is_some_and(|decl| {
                        decl.split_whitespace()
                            .last()
                            .map(|w| w.trim_start_matches('*').split('[').next().unwrap_or(w))
                            == Some(m)
                    })
                })
                .unwrap_or_else(|| panic!("pahole lists no member {m}"));
            let comment = line.split("/*").nth(1).unwrap();
            comment.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

#[test]
fn task_struct_members_are_where_pahole_says() {
    if !sdt_testing::require(
        std::path::Path::new("/sys/kernel/btf/vmlinux").exists() && sdt_testing::have("pahole"),
        "the kernel's BTF (/sys/kernel/btf/vmlinux) and pahole",
    ) {
        return;
    }
    let btf = Btf::vmlinux().unwrap();
    assert!(btf.len() > 10_000, "{} types", btf.len());
    let id = btf.find("struct task_struct").expect("task_struct");
    let Kind::Record { members, size, .. } = btf.get(id).unwrap() else {
        panic!("task_struct is not a struct")
    };
    let names = ["pid", "tgid", "real_parent", "comm", "mm"];
    let ours: Vec<u64> = names
        .iter()
        .map(|n| {
            let m = members.iter().find(|m| m.name == *n).unwrap();
            u64::from(m.bit_offset / 8)
        })
        .collect();
    assert_eq!(ours, pahole_offsets(&names));
    assert_eq!(btf.size_of(id).unwrap(), u64::from(size));
    let real_parent = members.iter().find(|m| m.name == "real_parent").unwrap();
    assert!(matches!(btf.get(real_parent.ty).unwrap(), Kind::Ptr(_)));
}

#[test]
fn kallsyms_agrees_with_itself() {
    if !sdt_testing::require_root() {
        return;
    }
    let symbols = KernelSymbols::load().unwrap();
    assert!(!symbols.hidden(), "root sees kernel addresses");
    // Functions are listed on every kernel; data symbols (`jiffies`) only
    // where it was built with CONFIG_KALLSYMS_ALL, which this one is not.
    let schedule = symbols.address("schedule").expect("schedule");
    assert_ne!(schedule, 0);
    let line = std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .find(|l| l.ends_with(" schedule"))
        .map(str::to_string)
        .unwrap();
    assert_eq!(format!("{schedule:016x}"), line[..16]);
    let found = symbols.symbol(schedule + 3).unwrap();
    assert_eq!((found.name, found.offset), ("schedule", 3));
    assert!(symbols.symbol(0x5555_0000_0000).is_none());
}
