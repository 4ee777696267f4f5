//! Real uprobes on functions of this test binary, for every attach
//! mechanism: arguments from registers and memory, cookies, PID filters,
//! return probes, semaphores and ring-buffer overflow.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{file_offset, privileged, uprobe_lock};
use sdt_bpf::arg::ArgSource;
use sdt_bpf::x86_64::{function_arg_offset, pt_regs_offset};
use sdt_bpf::{
    AluOp, Builder, Error, Features, Helper, Insn, JmpOp, LoadOptions, Map, MapSpec, MapType,
    Mechanism, Program, Reg::*, RingBuf, Size, UprobeAttach, UprobeSite,
};

#[no_mangle]
#[inline(never)]
pub extern "C" fn sdt_bpf_test_target(a: u64, b: i32) -> u64 {
    black_box(a).wrapping_add(black_box(b) as u64)
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn sdt_bpf_test_other(a: u64, b: i32) -> u64 {
    black_box(a) ^ black_box(b) as u64
}

#[no_mangle]
#[inline(never)]
/// # Safety
/// `p` points to at least `index + 1` words.
pub unsafe extern "C" fn sdt_bpf_test_mem(p: *const u64, index: u64) -> u64 {
    // SAFETY: the caller promises `index + 1` words at `p`, so the
    // `index`th word is in the same allocation.
    let word = unsafe { p.add(black_box(index) as usize) };
    // SAFETY: `word` is in bounds (above), and the caller's words are
    // initialised `u64`s.
    unsafe { black_box(word.read()) }
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn sdt_bpf_test_sema_site(a: u64) -> u64 {
    black_box(a).rotate_left(3)
}

/// USDT-style semaphores: in a section of their own so that they are
/// file-backed (not `.bss`) in a writable segment, as `sys/sdt.h` does.
#[no_mangle]
#[link_section = ".probes"]
pub static mut SDT_BPF_TEST_SEMA: u16 = 0;
#[no_mangle]
#[link_section = ".probes"]
pub static mut SDT_BPF_TEST_SEMA2: u16 = 0;

/// How many times the kernel counts one attachment of a site at file
/// offset `offset` in this process: once per mapping of the executable
/// that covers the offset. That is normally the text mapping alone, but a
/// panic's backtrace printer maps the whole file again to read debug info.
fn mappings_covering(offset: u64) -> u16 {
    let exe = std::env::current_exe().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let covering = maps.lines().filter(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(off), Some(path)) = (f.first(), f.get(2), f.get(5)) else {
            return false;
        };
        let (start, end) = range.split_once('-').unwrap();
        let len = u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap();
        let off = u64::from_str_radix(off, 16).unwrap();
        std::path::Path::new(path) == exe && off <= offset && offset < off + len
    });
    covering.count() as u16
}

fn sema() -> u16 {
    let semaphore = &raw const SDT_BPF_TEST_SEMA;
    // SAFETY: an aligned read of an initialised `u16` static that only the
    // kernel writes; volatile, since the compiler cannot see those writes.
    unsafe { std::ptr::read_volatile(semaphore) }
}

const ALL: [Mechanism; 3] = [
    Mechanism::UprobeMulti,
    Mechanism::PerfLink,
    Mechanism::PerfIoctl,
];

/// Whether this kernel can do `m`; all of them are expected in CI.
fn supported(m: Mechanism) -> bool {
    let f = Features::detect().unwrap();
    sdt_testing::require(f.supports(m), &format!("{} support ({f:?})", m.name()))
}

fn reg(name: &str, size: u8, signed: bool) -> ArgSource {
    ArgSource::Reg {
        ctx_offset: pt_regs_offset(name).unwrap(),
        size,
        signed,
    }
}

/// Record layout written by [`program`].
struct Record {
    ktime: u64,
    pid_tgid: u64,
    cookie: u64,
    args: Vec<u64>,
}

impl Record {
    fn parse(bytes: &[u8], nargs: usize) -> Record {
        assert_eq!(bytes.len(), 24 + 8 * nargs);
        let word = |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        Record {
            ktime: word(0),
            pid_tgid: word(1),
            cookie: word(2),
            args: (0..nargs).map(|i| word(3 + i)).collect(),
        }
    }
}

/// A program that sends `{ktime, pid_tgid, cookie, args...}` to `ring`.
fn program(ring: &RingBuf, args: &[ArgSource], m: Mechanism) -> Program {
    let size = 24 + 8 * args.len() as i32;
    let mut b = Builder::new();
    let out = b.label();
    b.push(Insn::mov64_reg(R6, R1));
    b.ld_map(R1, ring.map())
        .push(Insn::mov64_imm(R2, size))
        .push(Insn::mov64_imm(R3, 0))
        .call(Helper::RingbufReserve)
        .jump_imm(JmpOp::Eq, R0, 0, out)
        .push(Insn::mov64_reg(R7, R0));
    b.call(Helper::KtimeGetNs)
        .push(Insn::stx(Size::DW, R7, 0, R0));
    b.call(Helper::GetCurrentPidTgid)
        .push(Insn::stx(Size::DW, R7, 8, R0));
    b.push(Insn::mov64_reg(R1, R6))
        .call(Helper::GetAttachCookie)
        .push(Insn::stx(Size::DW, R7, 16, R0));
    for (i, arg) in args.iter().enumerate() {
        arg.emit_store(&mut b, R6, -8, R7, 24 + 8 * i as i16)
            .unwrap();
    }
    b.push(Insn::mov64_reg(R1, R7))
        .push(Insn::mov64_imm(R2, 0))
        .call(Helper::RingbufSubmit);
    b.bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    load(b, &format!("test_{}", m.name()), m)
}

/// Loads the program `b` built, for attaching with `m`.
fn load(b: Builder, name: &str, m: Mechanism) -> Program {
    let insns = b.finish().unwrap();
    let options = LoadOptions {
        name: name.into(),
        expected_attach_type: m.expected_attach_type(),
        ..LoadOptions::default()
    };
    Program::load(&insns, &options)
        .unwrap_or_else(|e| panic!("{e}\n{}", sdt_bpf::disasm::disassemble(&insns)))
}

/// Collects `n` records, waiting up to a second, and checks that no more come.
fn collect(ring: &mut RingBuf, n: usize, nargs: usize) -> Vec<Record> {
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while records.len() < n && Instant::now() < deadline {
        ring.poll(Some(Duration::from_millis(100)), |r| {
            records.push(Record::parse(r, nargs))
        })
        .unwrap();
    }
    ring.consume(|r| records.push(Record::parse(r, nargs)));
    assert_eq!(records.len(), n, "records received");
    records
}

fn target_site(cookie: u64) -> UprobeSite {
    UprobeSite {
        cookie,
        ..UprobeSite::new(file_offset("sdt_bpf_test_target"))
    }
}

fn request(sites: Vec<UprobeSite>, pid: Option<i32>) -> UprobeAttach {
    UprobeAttach {
        path: std::env::current_exe().unwrap(),
        sites,
        pid,
        retprobe: false,
    }
}

fn this_process() -> u32 {
    std::process::id()
}

#[test]
fn register_arguments_for_every_mechanism() {
    if !privileged("register_arguments_for_every_mechanism") {
        return;
    }
    let _lock = uprobe_lock();
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let mut ring = RingBuf::new(1 << 16).unwrap();
        let args = [
            reg("rdi", 8, false),
            reg("rsi", 4, true),
            reg("rsi", 4, false),
        ];
        let prog = program(&ring, &args, m);
        let cookie = if m.supports_cookies() { 0xc00c1e } else { 0 };
        let attached = request(vec![target_site(cookie)], None)
            .attach(&prog, m)
            .unwrap_or_else(|e| panic!("{}: {e}", m.name()));
        assert_eq!(attached.mechanism(), m);
        drop(prog); // the attachment keeps the program loaded

        const N: u64 = 10;
        for i in 0..N {
            sdt_bpf_test_target(black_box(i * 3), black_box(-(i as i32) - 1));
        }
        let records = collect(&mut ring, N as usize, args.len());
        let mut last = 0;
        for (i, r) in (0..N).zip(&records) {
            assert_eq!(r.args[0], i * 3, "{}: rdi", m.name());
            assert_eq!(
                r.args[1] as i64,
                -(i as i64) - 1,
                "{}: signed esi",
                m.name()
            );
            assert_eq!(
                r.args[2],
                u64::from((-(i as i32) - 1) as u32),
                "{}: unsigned esi",
                m.name()
            );
            assert_eq!(r.pid_tgid >> 32, u64::from(this_process()));
            assert_eq!(r.cookie, cookie, "{}: cookie", m.name());
            assert!(r.ktime >= last && r.ktime > 0);
            last = r.ktime;
        }

        drop(attached);
        sdt_bpf_test_target(1, 2);
        assert_eq!(ring.consume(|_| {}), 0, "{}: fired after detach", m.name());
    }
}

#[test]
fn cookies_tell_sites_apart() {
    if !privileged("cookies_tell_sites_apart") {
        return;
    }
    let _lock = uprobe_lock();
    for m in [Mechanism::UprobeMulti, Mechanism::PerfLink] {
        if !supported(m) {
            continue;
        }
        let mut ring = RingBuf::new(1 << 16).unwrap();
        let args = [reg("rdi", 8, false)];
        let prog = program(&ring, &args, m);
        let other = UprobeSite {
            cookie: 2,
            ..UprobeSite::new(file_offset("sdt_bpf_test_other"))
        };
        let _attached = request(vec![target_site(1), other], None)
            .attach(&prog, m)
            .unwrap();
        sdt_bpf_test_target(10, 0);
        sdt_bpf_test_other(20, 0);
        sdt_bpf_test_target(30, 0);
        let seen: Vec<(u64, u64)> = collect(&mut ring, 3, 1)
            .iter()
            .map(|r| (r.cookie, r.args[0]))
            .collect();
        assert_eq!(seen, [(1, 10), (2, 20), (1, 30)], "{}", m.name());
    }
}

#[test]
fn ioctl_attach_refuses_cookies() {
    if !privileged("ioctl_attach_refuses_cookies") || !supported(Mechanism::PerfIoctl) {
        return;
    }
    let ring = RingBuf::new(4096).unwrap();
    let prog = program(&ring, &[], Mechanism::PerfIoctl);
    let err = request(vec![target_site(7)], None)
        .attach(&prog, Mechanism::PerfIoctl)
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(!Mechanism::PerfIoctl.supports_cookies());
}

#[test]
fn program_must_match_mechanism() {
    if !privileged("program_must_match_mechanism") || !supported(Mechanism::UprobeMulti) {
        return;
    }
    let ring = RingBuf::new(4096).unwrap();
    let prog = program(&ring, &[], Mechanism::PerfLink);
    let err = request(vec![target_site(0)], None)
        .attach(&prog, Mechanism::UprobeMulti)
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
}

#[test]
fn pid_filter_selects_the_process() {
    if !privileged("pid_filter_selects_the_process") {
        return;
    }
    let _lock = uprobe_lock();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let mut ring = RingBuf::new(1 << 16).unwrap();
        let prog = program(&ring, &[reg("rdi", 8, false)], m);

        let mine = request(vec![target_site(0)], Some(this_process() as i32))
            .attach(&prog, m)
            .unwrap();
        sdt_bpf_test_target(5, 0);
        assert_eq!(collect(&mut ring, 1, 1)[0].args[0], 5, "{}", m.name());
        drop(mine);

        let theirs = request(vec![target_site(0)], Some(child.id() as i32))
            .attach(&prog, m)
            .unwrap();
        sdt_bpf_test_target(6, 0);
        assert_eq!(
            ring.consume(|_| {}),
            0,
            "{}: fired outside the PID filter",
            m.name()
        );
        drop(theirs);
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn memory_arguments() {
    if !privileged("memory_arguments") {
        return;
    }
    let _lock = uprobe_lock();
    let rdi = function_arg_offset(0).unwrap();
    let rsi = function_arg_offset(1).unwrap();
    let args = [
        // *(u64 *)rdi
        ArgSource::Mem {
            base_ctx_offset: rdi,
            index: None,
            disp: 0,
            size: 8,
            signed: false,
        },
        // *(u64 *)(rdi + rsi*8 + 8)
        ArgSource::Mem {
            base_ctx_offset: rdi,
            index: Some((rsi, 8)),
            disp: 8,
            size: 8,
            signed: false,
        },
        // *(s32 *)(rdi + 24)
        ArgSource::Mem {
            base_ctx_offset: rdi,
            index: None,
            disp: 24,
            size: 4,
            signed: true,
        },
        // *(u8 *)(rdi + 8)
        ArgSource::Mem {
            base_ctx_offset: rdi,
            index: None,
            disp: 8,
            size: 1,
            signed: false,
        },
        ArgSource::Const(-9),
    ];
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let mut ring = RingBuf::new(1 << 16).unwrap();
        let prog = program(&ring, &args, m);
        let site = UprobeSite::new(file_offset("sdt_bpf_test_mem"));
        let _attached = request(vec![site], None).attach(&prog, m).unwrap();
        let words: [u64; 4] = [
            0x1122_3344_5566_7788,
            0xaaaa_bbbb_cccc_ddee,
            0xbbbb,
            u64::from((-5i32) as u32) | 0xffff_0000_0000_0000,
        ];
        // SAFETY: `words` has 4 words; the function reads the second.
        unsafe { sdt_bpf_test_mem(words.as_ptr(), 1) };
        let r = &collect(&mut ring, 1, args.len())[0];
        assert_eq!(r.args[0], words[0], "{}", m.name());
        assert_eq!(r.args[1], words[2], "{}", m.name());
        assert_eq!(r.args[2] as i64, -5, "{}", m.name());
        assert_eq!(r.args[3], 0xee, "{}", m.name());
        assert_eq!(r.args[4] as i64, -9, "{}", m.name());
    }
}

#[test]
fn return_probes_read_the_result() {
    if !privileged("return_probes_read_the_result") {
        return;
    }
    let _lock = uprobe_lock();
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let mut ring = RingBuf::new(1 << 16).unwrap();
        let prog = program(&ring, &[reg("rax", 8, false)], m);
        let req = UprobeAttach {
            retprobe: true,
            ..request(vec![target_site(0)], None)
        };
        let _attached = req.attach(&prog, m).unwrap();
        let result = sdt_bpf_test_target(black_box(40), black_box(2));
        assert_eq!(collect(&mut ring, 1, 1)[0].args[0], result, "{}", m.name());
    }
}

#[test]
fn semaphores_count_attachments() {
    if !privileged("semaphores_count_attachments") {
        return;
    }
    let _lock = uprobe_lock();
    let site = UprobeSite {
        ref_ctr_offset: Some(file_offset("SDT_BPF_TEST_SEMA")),
        ..UprobeSite::new(file_offset("sdt_bpf_test_sema_site"))
    };
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let mut ring = RingBuf::new(4096).unwrap();
        let prog = program(&ring, &[reg("rdi", 8, false)], m);
        assert_eq!(sema(), 0, "{}: semaphore before attach", m.name());
        let attached = request(vec![site], None).attach(&prog, m).unwrap();
        assert_eq!(
            sema(),
            mappings_covering(site.offset),
            "{}: semaphore while attached",
            m.name()
        );
        assert!(sema() >= 1);
        sdt_bpf_test_sema_site(77);
        assert_eq!(collect(&mut ring, 1, 1)[0].args[0], 77);
        drop(attached);
        assert_eq!(sema(), 0, "{}: semaphore after detach", m.name());
    }
}

#[test]
fn conflicting_semaphores_are_explained() {
    if !privileged("conflicting_semaphores_are_explained") {
        return;
    }
    let _lock = uprobe_lock();
    let site = UprobeSite {
        ref_ctr_offset: Some(file_offset("SDT_BPF_TEST_SEMA")),
        ..UprobeSite::new(file_offset("sdt_bpf_test_sema_site"))
    };
    let other = UprobeSite {
        ref_ctr_offset: Some(file_offset("SDT_BPF_TEST_SEMA2")),
        ..site
    };
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let ring = RingBuf::new(4096).unwrap();
        let prog = program(&ring, &[], m);
        let _first = request(vec![site], None).attach(&prog, m).unwrap();
        let err = request(vec![other], None).attach(&prog, m).unwrap_err();
        assert!(
            matches!(err, Error::RefCtrConflict { offset, .. } if offset == site.offset),
            "{}: {err}",
            m.name()
        );
    }
}

#[test]
fn missing_file_is_explained() {
    if !privileged("missing_file_is_explained") {
        return;
    }
    for m in ALL {
        if !supported(m) {
            continue;
        }
        let ring = RingBuf::new(4096).unwrap();
        let prog = program(&ring, &[], m);
        let req = UprobeAttach {
            path: "/nonexistent/sdt-bpf-test".into(),
            ..request(vec![UprobeSite::new(0x1000)], None)
        };
        let err = req.attach(&prog, m).unwrap_err();
        assert!(
            matches!(err, Error::FileNotFound { .. }),
            "{}: {err}",
            m.name()
        );
    }
}

#[test]
fn full_ring_buffer_drops_are_counted() {
    if !privileged("full_ring_buffer_drops_are_counted") {
        return;
    }
    let _lock = uprobe_lock();
    let m = Features::detect().unwrap().best_mechanism().unwrap();
    let mut ring = RingBuf::new(4096).unwrap();
    let drops = Map::create(&MapSpec::new(MapType::Array, 4, 8, 1).name("drops")).unwrap();

    // reserve 64 bytes; on failure, drops[0] += 1
    let mut b = Builder::new();
    let (dropped, out) = (b.label(), b.label());
    b.ld_map(R1, ring.map())
        .push(Insn::mov64_imm(R2, 64))
        .push(Insn::mov64_imm(R3, 0))
        .call(Helper::RingbufReserve)
        .jump_imm(JmpOp::Eq, R0, 0, dropped)
        .push(Insn::mov64_reg(R1, R0))
        .push(Insn::mov64_imm(R2, 0))
        .call(Helper::RingbufSubmit)
        .jump(out);
    b.bind(dropped);
    b.push(Insn::st(Size::W, R10, -4, 0))
        .ld_map(R1, &drops)
        .push(Insn::mov64_reg(R2, R10))
        .push(Insn::alu64_imm(AluOp::Add, R2, -4))
        .call(Helper::MapLookupElem)
        .jump_imm(JmpOp::Eq, R0, 0, out)
        .push(Insn::mov64_imm(R1, 1))
        .push(Insn::atomic_add(Size::DW, R0, 0, R1));
    b.bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    let prog = load(b, "drops", m);
    let _attached = request(vec![target_site(0)], None)
        .attach(&prog, m)
        .unwrap();

    const CALLS: usize = 200;
    for i in 0..CALLS {
        sdt_bpf_test_target(i as u64, 0);
    }
    let received = ring.consume(|r| assert_eq!(r.len(), 64));
    let dropped = u64::from_ne_bytes(
        drops.lookup(&0u32.to_ne_bytes()).unwrap().unwrap()[..]
            .try_into()
            .unwrap(),
    );
    // 4096 bytes hold 56 records of 64 + 8 header bytes.
    assert_eq!(received, 4096 / 72);
    assert_eq!(received + dropped as usize, CALLS);
}

#[test]
fn poll_wakes_on_watched_descriptors() {
    if !privileged("poll_wakes_on_watched_descriptors") {
        return;
    }
    let mut ring = RingBuf::new(4096).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let exited = sdt_proc::Pidfd::open(child.id() as i32).unwrap();
    use std::os::fd::AsFd;
    ring.watch(exited.as_fd(), 42).unwrap();
    let start = Instant::now();
    let mut polled = ring
        .poll(Some(Duration::from_secs(10)), |_| {
            panic!("no records expected")
        })
        .unwrap();
    while polled.ready.is_empty() && start.elapsed() < Duration::from_secs(10) {
        polled = ring.poll(Some(Duration::from_secs(1)), |_| {}).unwrap();
    }
    assert_eq!(polled.ready, [42]);
    assert_eq!(polled.records, 0);
    child.wait().unwrap();

    // Nothing ready: the timeout ends the wait.
    let mut quiet = RingBuf::new(4096).unwrap();
    let polled = quiet.poll(Some(Duration::from_millis(10)), |_| {}).unwrap();
    assert_eq!(polled, sdt_bpf::Poll::default());
}

#[test]
fn user_stacks_start_at_the_probed_function() {
    if !privileged("user_stacks_start_at_the_probed_function") {
        return;
    }
    let _lock = uprobe_lock();
    let m = Features::detect().unwrap().best_mechanism().unwrap();
    let stacks = Map::create(&MapSpec::new(MapType::StackTrace, 4, 8 * 16, 16)).unwrap();
    let ids = Map::create(&MapSpec::new(MapType::Array, 4, 8, 1)).unwrap();

    // ids[0] = bpf_get_stackid(ctx, stacks, STACKID_USER)
    let mut b = Builder::new();
    let out = b.label();
    b.push(Insn::mov64_reg(R6, R1))
        .ld_map(R2, &stacks)
        .push(Insn::mov64_imm(R3, sdt_bpf::STACKID_USER as i32))
        .call(Helper::GetStackid)
        .push(Insn::mov64_reg(R7, R0))
        .push(Insn::st(Size::W, R10, -4, 0))
        .ld_map(R1, &ids)
        .push(Insn::mov64_reg(R2, R10))
        .push(Insn::alu64_imm(AluOp::Add, R2, -4))
        .call(Helper::MapLookupElem)
        .jump_imm(JmpOp::Eq, R0, 0, out)
        .push(Insn::stx(Size::DW, R0, 0, R7))
        .bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    let prog = load(b, "stacks", m);
    let _attached = request(vec![target_site(0)], None)
        .attach(&prog, m)
        .unwrap();
    sdt_bpf_test_target(1, 1);

    let word =
        |bytes: &[u8], i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    let id = word(&ids.lookup(&0u32.to_ne_bytes()).unwrap().unwrap(), 0) as i64;
    assert!(id >= 0, "bpf_get_stackid failed: {id}");
    let stack = stacks.lookup(&(id as u32).to_ne_bytes()).unwrap().unwrap();
    // The kernel walks user stacks by frame pointer, so further frames
    // exist only where the traced code keeps frame pointers; the probed
    // instruction is always first.
    assert_eq!(
        word(&stack, 0),
        sdt_bpf_test_target as *const () as usize as u64
    );
}
