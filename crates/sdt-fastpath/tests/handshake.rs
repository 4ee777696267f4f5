//! The fast path end to end, below the language: a program built with the
//! `sdt` crate's `fastpath` feature, its probes rung through their anchors
//! (no uprobe at any site), registers on the socket, and every hit arrives
//! in the shared rings with its arguments and strings, exactly.

use std::time::{Duration, Instant};

use sdt_bpf::{Insn, LoadOptions, Program, ProgramType, Reg, UprobeAttach, UprobeSite};
use sdt_fastpath::{address_of, Clock, Entry, Listener, Record};
use sdt_testing::fastpath::Running;
use sdt_testing::require_root;

/// A program that does nothing, to hold the anchors' uprobes.
fn nothing() -> Program {
    let insns = [Insn::mov64_imm(Reg::R0, 0), Insn::exit()];
    let options = LoadOptions {
        name: "sdt_anchor".into(),
        expected_attach_type: None,
        prog_type: ProgramType::Kprobe,
        sleepable: false,
    };
    Program::load(&insns, &options).unwrap()
}

#[test]
fn hits_arrive_in_the_shared_rings_exactly_with_no_uprobe_at_any_site() {
    if !require_root() {
        return;
    }
    let Some(program) = sdt_testing::fastpath::program() else {
        return;
    };
    let file = sdt_elf::ElfFile::open(&program).unwrap();
    let probes = file.probes().unwrap();
    assert_eq!(probes.anchors.len(), 2, "one anchor per semaphore");
    // `hit(u64, i32, &CStr)` copies arg2; `text(u64, &str)` arg1, its
    // pointer (arg2 is the length).
    let mut masks: Vec<u64> = probes.anchors.iter().map(|a| a.capture).collect();
    masks.sort();
    assert_eq!(masks, [0b010, 0b100]);
    let stat = rustix::fs::stat(&program).unwrap();
    let mut fixture = Running::start(&program);
    let pid = fixture.pid();
    let listener = Listener::bind().unwrap();
    // Ring: each anchor's uprobe raises its probe's semaphore.
    let holder = nothing();
    let sites = probes
        .anchors
        .iter()
        .map(|a| UprobeSite {
            offset: a.file_offset.unwrap(),
            ref_ctr_offset: a.semaphore.file_offset,
            cookie: 0,
        })
        .collect();
    let attached = UprobeAttach {
        path: program.clone(),
        sites,
        pid: None,
        retprobe: false,
    }
    .attach(&holder, sdt_bpf::Mechanism::PerfLink)
    .unwrap();
    let clock = Clock::calibrate(Duration::from_millis(10));
    fixture.send("5 2");
    // The first hit registers: answer it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let pending = loop {
        if let Some(p) = listener.accept().unwrap() {
            break p;
        }
        assert!(Instant::now() < deadline, "the program never registered");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(pending.pid, pid);
    let entries: Vec<Entry> = probes
        .anchors
        .iter()
        .enumerate()
        .map(|(slot, a)| Entry {
            semaphore: address_of(
                pid,
                stat.st_dev,
                stat.st_ino,
                a.semaphore.file_offset.unwrap(),
            )
            .unwrap()
            .expect("the semaphore is mapped"),
            slot: slot as u32,
            capture: true,
        })
        .collect();
    let mut shared = pending.admit(&entries, &clock).unwrap();
    assert_eq!(fixture.answer(), "fired 5\n");
    let mut records: Vec<Record> = Vec::new();
    shared.drain(|r| records.push(r));
    // 2 threads × 5 × 2 probes, the first hit of each thread included.
    assert_eq!(records.len(), 20, "{records:#?}");
    assert_eq!(shared.lost(), 0);
    let hit_slot = |name: &str| {
        let wanted = probes.iter().find(|p| p.name == name).unwrap();
        let semaphore = wanted.sites[0].semaphore.unwrap().address;
        probes
            .anchors
            .iter()
            .position(|a| a.semaphore.address == semaphore)
            .unwrap() as u32
    };
    let (hit, text) = (hit_slot("hit"), hit_slot("text"));
    for thread in 0..2 {
        let name = format!("thread-{thread}").into_bytes();
        let mine: Vec<&Record> = records
            .iter()
            .filter(|r| r.slot == hit && r.strings.first().map(|s| &s.1) == Some(&name))
            .collect();
        let values: Vec<(u64, u64)> = mine.iter().map(|r| (r.args[0], r.args[1])).collect();
        let expected: Vec<(u64, u64)> = (1..=5)
            .map(|i| (i, (-(i as i64)) as i32 as i64 as u64))
            .collect();
        assert_eq!(values, expected, "thread {thread}");
        assert!(mine.windows(2).all(|w| w[0].tsc <= w[1].tsc));
        assert!(mine.iter().all(|r| r.tid == mine[0].tid && r.tid != 0));
    }
    let words: Vec<(u64, Vec<u8>)> = records
        .iter()
        .filter(|r| r.slot == text)
        .map(|r| (r.args[0], r.strings[0].1.clone()))
        .collect();
    assert_eq!(words.len(), 10);
    for (i, word) in &words {
        assert_eq!(
            word,
            if i % 2 == 0 {
                &b"even"[..]
            } else {
                &b"odd"[..]
            }
        );
    }
    // The time stamps read as the monotonic clock, within the run.
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let now = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    assert!(records
        .iter()
        .all(|r| clock.ns(r.tsc) <= now && now - clock.ns(r.tsc) < 10_000_000_000));
    // Detached, the semaphores fall: the program runs on untraced.
    drop(attached);
    drop(shared);
    fixture.send("3");
    assert_eq!(fixture.answer(), "fired 3\n");
}
