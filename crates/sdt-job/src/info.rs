//! `--info`: what this machine's kernel and sdt support, in the sections
//! and `name: yes|no` lines of `bpftrace --info`, which tools (bpftrace's
//! own test runner among them) search for a feature's line.
//!
//! A feature is `yes` only when the kernel has it and sdt uses it: sdt
//! attaches to no kernel function, so kprobes and kfuncs are `no`
//! whatever the kernel offers; perf events (`profile`, `software`,
//! `hardware`), kernel reads and the kernel's BTF (`curtask`, casts) are
//! `yes` where the kernel has them.

/// Prints the report on standard output.
pub fn print() {
    let uname = rustix::system::uname();
    let features = sdt_bpf::Features::detect().ok();
    let yes = |b: bool| if b { "yes" } else { "no" };
    let uprobe_multi = features.as_ref().is_some_and(|f| f.uprobe_multi);
    let uprobes = features
        .as_ref()
        .is_some_and(|f| f.uprobe_pmu.is_some() || f.uprobe_multi);
    let semaphores = features.as_ref().is_some_and(|f| f.ref_ctr);
    let faulting = match sdt_bpf::FaultingReads::detect() {
        Ok(_) => "yes".to_string(),
        Err(why) => format!("no, because {why}"),
    };
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    let module_btf = std::fs::read_dir("/sys/kernel/btf")
        .is_ok_and(|d| d.flatten().any(|e| e.file_name() != "vmlinux"));
    let sections: &[(&str, Vec<(&str, String)>)] = &[
        (
            "System",
            vec![
                (
                    "OS",
                    format!(
                        "{} {} {}",
                        uname.sysname().to_string_lossy(),
                        uname.release().to_string_lossy(),
                        uname.version().to_string_lossy()
                    ),
                ),
                ("Arch", uname.machine().to_string_lossy().into_owned()),
            ],
        ),
        (
            "Build",
            vec![
                ("version", format!("sdt {}", env!("CARGO_PKG_VERSION"))),
                ("LLVM", "none (sdt generates BPF itself)".into()),
                ("bfd", "no".into()),
                (
                    "libdw (DWARF support)",
                    "yes (sdt reads DWARF itself)".into(),
                ),
                ("libsystemd (systemd notify support)", "no".into()),
                ("blazesym (advanced symbolization)", "no".into()),
                ("dwunwind (DWARF stack unwinding)", "no".into()),
            ],
        ),
        (
            "Kernel helpers",
            vec![
                ("probe_read_user", yes(uprobes).into()),
                ("probe_read_user_str", yes(uprobes).into()),
                (
                    "copy_from_user",
                    yes(sdt_bpf::FaultingReads::detect().is_ok()).into(),
                ),
                ("probe_read_kernel", "yes".into()),
                ("get_current_cgroup_id", "yes".into()),
                ("send_signal", "no".into()),
                ("override_return", "no".into()),
                ("get_boot_ns", "yes".into()),
                ("get_tai_ns", "yes".into()),
                ("get_func_ip", "yes".into()),
                ("dpath", "no".into()),
                ("skboutput", "no".into()),
                ("lookup_percpu_elem", "no".into()),
                ("jiffies64", "no".into()),
            ],
        ),
        (
            "Kernel features",
            vec![
                ("Instruction limit", "1000000".into()),
                ("Loop support", "yes".into()),
                ("btf", yes(btf).into()),
                ("module btf", yes(module_btf).into()),
                ("map batch", "no".into()),
                (
                    "uprobe refcount (depends on Build:bcc bpf_attach_uprobe refcount)",
                    yes(semaphores).into(),
                ),
                (
                    "sleepable uprobes (reads that fault pages in, with the bpf_copy_from_user_str kfunc)",
                    faulting,
                ),
            ],
        ),
        (
            "Map types",
            vec![
                ("hash", "yes".into()),
                ("percpu hash", "yes".into()),
                ("array", "yes".into()),
                ("percpu array", "yes".into()),
                ("stack_trace", "yes".into()),
                ("perf_event_array", "no".into()),
                ("ringbuf", "yes".into()),
            ],
        ),
        (
            "Probe types",
            vec![
                ("kprobe", "no".into()),
                // sdt mounts a private tracefs instance when it needs one.
                ("tracepoint", "yes".into()),
                ("uprobe", yes(uprobes).into()),
                ("usdt", yes(uprobes).into()),
                ("perf_event", "yes".into()),
                ("kfunc", "no".into()),
                ("fentry", "no".into()),
                ("kprobe_multi", "no".into()),
                ("kprobe_session", "no".into()),
                ("uprobe_multi", yes(uprobe_multi).into()),
                ("iter", "no".into()),
            ],
        ),
    ];
    for (title, lines) in sections {
        println!("{title}");
        for (name, value) in lines {
            println!("  {name}: {value}");
        }
        println!();
    }
}
