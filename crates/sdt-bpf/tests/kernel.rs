//! Maps, program loading and the verifier log, against the running kernel.

mod common;

use common::privileged;
use sdt_bpf::map::{UPDATE_ANY, UPDATE_NOEXIST};
use sdt_bpf::{
    possible_cpus, Builder, Error, Features, Helper, Insn, LoadOptions, Map, MapSpec, MapType,
    Program, Reg::*, RingBuf, Size,
};

fn key(k: u32) -> [u8; 4] {
    k.to_ne_bytes()
}

#[test]
fn hash_map_round_trips_and_iterates() {
    if !privileged("hash_map_round_trips_and_iterates") {
        return;
    }
    let map = Map::create(&MapSpec::new(MapType::Hash, 4, 8, 16).name("test_hash")).unwrap();
    assert_eq!(map.lookup(&key(1)).unwrap(), None);
    for k in 1..=3u32 {
        map.update(&key(k), &(u64::from(k) * 100).to_ne_bytes(), UPDATE_ANY)
            .unwrap();
    }
    assert_eq!(
        map.lookup(&key(2)).unwrap(),
        Some(200u64.to_ne_bytes().to_vec())
    );
    assert!(map
        .update(&key(2), &0u64.to_ne_bytes(), UPDATE_NOEXIST)
        .is_err());
    let mut keys: Vec<u32> = map
        .keys()
        .map(|k| u32::from_ne_bytes(k.unwrap().try_into().unwrap()))
        .collect();
    keys.sort();
    assert_eq!(keys, [1, 2, 3]);
    assert!(map.delete(&key(2)).unwrap());
    assert!(!map.delete(&key(2)).unwrap());
    assert_eq!(map.keys().count(), 2);
    assert!(matches!(map.lookup(&[0; 3]), Err(Error::Invalid(_))));
    assert!(matches!(
        map.update(&key(1), &[0; 4], UPDATE_ANY),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn array_map_round_trips() {
    if !privileged("array_map_round_trips") {
        return;
    }
    let map = Map::create(&MapSpec::new(MapType::Array, 4, 16, 4)).unwrap();
    assert_eq!(map.lookup(&key(3)).unwrap(), Some(vec![0; 16]));
    map.update(&key(3), &[7; 16], UPDATE_ANY).unwrap();
    assert_eq!(map.lookup(&key(3)).unwrap(), Some(vec![7; 16]));
    assert_eq!(map.lookup(&key(4)).unwrap(), None);
    assert_eq!(map.keys().count(), 4);
}

#[test]
fn per_cpu_maps_hold_one_value_per_possible_cpu() {
    if !privileged("per_cpu_maps_hold_one_value_per_possible_cpu") {
        return;
    }
    let cpus = possible_cpus().unwrap();
    for ty in [MapType::PerCpuArray, MapType::PerCpuHash] {
        // A 4-byte value is padded to 8 per CPU in the kernel's buffer.
        let map = Map::create(&MapSpec::new(ty, 4, 4, 8)).unwrap();
        let values: Vec<[u8; 4]> = (0..cpus as u32).map(|c| (c + 10).to_ne_bytes()).collect();
        let slices: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
        map.update_per_cpu(&key(1), &slices, UPDATE_ANY).unwrap();
        let got = map.lookup_per_cpu(&key(1)).unwrap().unwrap();
        assert_eq!(got.len(), cpus);
        assert_eq!(got.iter().collect::<Vec<_>>(), slices);
        assert!(matches!(map.lookup(&key(1)), Err(Error::Invalid(_))));
        assert!(map
            .update_per_cpu(&key(1), &slices[..cpus - 1], UPDATE_ANY)
            .is_err());
    }
}

#[test]
fn ring_buffer_size_is_checked() {
    if !privileged("ring_buffer_size_is_checked") {
        return;
    }
    assert!(matches!(RingBuf::new(4096 + 1), Err(Error::Invalid(_))));
    assert!(matches!(RingBuf::new(2048), Err(Error::Invalid(_))));
    let ring = RingBuf::new(1 << 14).unwrap();
    assert_eq!(ring.map().spec().map_type, MapType::RingBuf);
    assert_eq!(ring.pending(), 0);
}

#[test]
fn loads_a_program_and_reads_it_back() {
    if !privileged("loads_a_program_and_reads_it_back") {
        return;
    }
    let counts = Map::create(&MapSpec::new(MapType::Array, 4, 8, 1)).unwrap();
    let mut b = Builder::new();
    let out = b.label();
    b.push(Insn::st(Size::W, R10, -4, 0))
        .ld_map(R1, &counts)
        .push(Insn::mov64_reg(R2, R10))
        .push(Insn::alu64_imm(sdt_bpf::AluOp::Add, R2, -4))
        .call(Helper::MapLookupElem)
        .jump_imm(sdt_bpf::JmpOp::Eq, R0, 0, out)
        .push(Insn::mov64_imm(R1, 1))
        .push(Insn::atomic_add(Size::DW, R0, 0, R1))
        .bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    let insns = b.finish().unwrap();
    let prog = Program::load(
        &insns,
        &LoadOptions {
            name: "count-test".into(),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert_eq!(prog.name(), "count-test");
    let info = prog.info().unwrap();
    assert!(info.id > 0);
    let xlated = prog.xlated().unwrap();
    assert_eq!(xlated.len(), info.xlated_insns as usize);
    let text = prog.xlated_text().unwrap();
    assert!(text.contains("map[id:"), "{text}");
    assert!(text.contains("exit"), "{text}");
}

#[test]
fn verifier_rejection_carries_the_log() {
    if !privileged("verifier_rejection_carries_the_log") {
        return;
    }
    // Reads a misaligned word of pt_regs: the verifier refuses.
    let insns = [
        Insn::ldx(Size::DW, R0, R1, 4),
        Insn::mov64_imm(R0, 0),
        Insn::exit(),
    ];
    let err = Program::load(&insns, &LoadOptions::default()).unwrap_err();
    let Error::Verifier { log, .. } = &err else {
        panic!("expected a verifier error, got {err}");
    };
    assert!(log.as_str().contains("invalid bpf_context access"), "{log}");
    assert!(log.summary().contains("invalid bpf_context access"));
    assert!(err.to_string().contains("invalid bpf_context access"));

    // A program without exit: the log names the problem too.
    let err = Program::load(&[Insn::mov64_imm(R0, 0)], &LoadOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Verifier { .. }), "{err}");
}

#[test]
fn detects_uprobe_features() {
    if !privileged("detects_uprobe_features") {
        return;
    }
    let f = Features::detect().unwrap();
    eprintln!("{f:?}");
    assert!(f.uprobe_pmu.is_some(), "no uprobe PMU: {f:?}");
    assert!(f.best_mechanism().is_some());
    if f.uprobe_multi {
        assert_eq!(f.best_mechanism(), Some(sdt_bpf::Mechanism::UprobeMulti));
    }
}

#[test]
fn xlated_text_matches_bpftool() {
    if !privileged("xlated_text_matches_bpftool") {
        return;
    }
    let ring = RingBuf::new(4096).unwrap();
    let mut b = Builder::new();
    let out = b.label();
    b.push(Insn::mov64_reg(R6, R1))
        .ld_map(R1, ring.map())
        .push(Insn::mov64_imm(R2, 16))
        .push(Insn::mov64_imm(R3, 0))
        .call(Helper::RingbufReserve)
        .jump_imm(sdt_bpf::JmpOp::Eq, R0, 0, out)
        .push(Insn::mov64_reg(R7, R0))
        .call(Helper::KtimeGetNs)
        .push(Insn::stx(Size::DW, R7, 0, R0))
        .push(Insn::mov64_reg(R1, R7))
        .push(Insn::mov64_imm(R2, 0))
        .call(Helper::RingbufSubmit)
        .bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    let prog = Program::load(&b.finish().unwrap(), &LoadOptions::default()).unwrap();
    let id = prog.info().unwrap().id.to_string();
    let dump = std::process::Command::new("bpftool")
        .args(["prog", "dump", "xlated", "id", &id])
        .output();
    let bpftool = match dump {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
        other => {
            sdt_testing::require(false, &format!("a working bpftool ({other:?})"));
            return;
        }
    };
    let ours = prog.xlated_text().unwrap();
    assert!(ours.contains("call bpf_ringbuf_reserve#"), "{ours}");
    assert_eq!(ours.trim_end(), bpftool.trim_end());
}

#[test]
fn long_verifier_logs_are_kept_whole() {
    if !privileged("long_verifier_logs_are_kept_whole") {
        return;
    }
    // 100,000 logged instructions make a log of several MiB, more than the
    // first buffer; the error must still start at instruction 0.
    let mut insns = vec![Insn::mov64_imm(R0, 0); 100_000];
    insns.push(Insn::ldx(Size::DW, R0, R1, 4));
    insns.push(Insn::exit());
    let err = Program::load(&insns, &LoadOptions::default()).unwrap_err();
    let Error::Verifier { log, .. } = &err else {
        panic!("expected a verifier error, got {err}");
    };
    assert!(
        log.as_str().len() > 1 << 20,
        "log of {} bytes",
        log.as_str().len()
    );
    assert!(
        log.as_str()
            .lines()
            .take(3)
            .any(|l| l.starts_with("0: (b7) r0 = 0")),
        "{}",
        &log.as_str()[..200]
    );
    assert!(log.summary().contains("invalid bpf_context access"));
}

#[test]
fn stack_trace_map_is_created_empty() {
    if !privileged("stack_trace_map_is_created_empty") {
        return;
    }
    let map = Map::create(&MapSpec::new(MapType::StackTrace, 4, 8 * 32, 64)).unwrap();
    assert_eq!(map.keys().count(), 0);
    assert_eq!(map.lookup(&key(0)).unwrap(), None);
}

#[test]
fn ring_records_that_wrap_around_the_end_arrive_whole() {
    if !privileged("ring_records_that_wrap_around_the_end_arrive_whole") {
        return;
    }
    // Records of 1000 bytes (1008 with the header) in a 4096-byte ring:
    // every fifth one wraps around the end of the data area.
    const WORDS: i16 = 125;
    let mut ring = RingBuf::new(4096).unwrap();
    let counter = Map::create(&MapSpec::new(MapType::Array, 4, 8, 1)).unwrap();
    let mut b = Builder::new();
    let out = b.label();
    b.push(Insn::st(Size::W, R10, -4, 0))
        .ld_map(R1, &counter)
        .push(Insn::mov64_reg(R2, R10))
        .push(Insn::alu64_imm(sdt_bpf::AluOp::Add, R2, -4))
        .call(Helper::MapLookupElem)
        .jump_imm(sdt_bpf::JmpOp::Eq, R0, 0, out)
        .push(Insn::ldx(Size::DW, R7, R0, 0))
        .push(Insn::alu64_imm(sdt_bpf::AluOp::Add, R7, 1))
        .push(Insn::stx(Size::DW, R0, 0, R7))
        .ld_map(R1, ring.map())
        .push(Insn::mov64_imm(R2, i32::from(WORDS) * 8))
        .push(Insn::mov64_imm(R3, 0))
        .call(Helper::RingbufReserve)
        .jump_imm(sdt_bpf::JmpOp::Eq, R0, 0, out);
    for word in 0..WORDS {
        b.push(Insn::stx(Size::DW, R0, word * 8, R7));
    }
    b.push(Insn::mov64_reg(R1, R0))
        .push(Insn::mov64_imm(R2, 0))
        .call(Helper::RingbufSubmit)
        .bind(out);
    b.push(Insn::mov64_imm(R0, 0)).exit();
    let program = Program::load(
        &b.finish().unwrap(),
        &LoadOptions {
            name: "wrap-test".into(),
            prog_type: sdt_bpf::ProgramType::RawTracepoint,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let mut seen = Vec::new();
    for _ in 0..20 {
        program.test_run().unwrap();
        ring.consume(|record| {
            assert_eq!(record.len(), WORDS as usize * 8);
            let words: Vec<u64> = record
                .chunks(8)
                .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
                .collect();
            assert!(
                words.iter().all(|&w| w == words[0]),
                "torn record {words:?}"
            );
            seen.push(words[0]);
        });
    }
    assert_eq!(seen, (1..=20).collect::<Vec<u64>>());
}

#[test]
fn a_callback_walks_a_map_and_deletes_as_it_goes() {
    if !privileged("a_callback_walks_a_map_and_deletes_as_it_goes") {
        return;
    }
    // `bpf_for_each_map_elem` with a callback that deletes each entry it
    // is given: the program returns how many it saw, and the map is empty
    // afterwards. The callback is a second function, which the kernel
    // accepts only with BTF function information.
    let map = Map::create(&MapSpec::new(MapType::Hash, 4, 8, 64).name("walked")).unwrap();
    for k in 0..10u32 {
        map.update(&key(k), &u64::from(k).to_ne_bytes(), UPDATE_ANY)
            .unwrap();
    }
    let mut b = Builder::new();
    let callback = b.label();
    b.ld_map(R1, &map)
        .ld_func(R2, callback)
        .push(Insn::mov64_imm(R3, 0))
        .push(Insn::mov64_imm(R4, 0))
        .call(Helper::ForEachMapElem)
        .exit();
    b.bind(callback);
    // r1 = map, r2 = key, r3 = value, r4 = context.
    b.ld_map(R1, &map)
        .call(Helper::MapDeleteElem)
        .push(Insn::mov64_imm(R0, 0))
        .exit();
    let insns = b.finish().unwrap();
    let prog = Program::load(
        &insns,
        &LoadOptions {
            name: "walk".into(),
            prog_type: sdt_bpf::ProgramType::RawTracepoint,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert_eq!(prog.test_run().unwrap(), 10);
    assert_eq!(map.keys().count(), 0);
    let text = sdt_bpf::disasm::Disassembler::new().listing(&insns);
    assert!(text.contains("= func pc+"), "{text}");
}

/// A syscall program runs from user space on a context of the caller's
/// bytes: it reads two words of it, writes their sum back into it, and
/// returns the sum, which is how records made without entering the kernel
/// can be handed to programs.
#[test]
fn a_syscall_program_reads_and_writes_the_context_it_is_given() {
    if !privileged("a syscall program run with a context") {
        return;
    }
    use sdt_bpf::Reg;
    let mut b = Builder::new();
    b.push(Insn::ldx(Size::DW, Reg::R2, Reg::R1, 0))
        .push(Insn::ldx(Size::DW, Reg::R3, Reg::R1, 8))
        .push(Insn::alu64_reg(sdt_bpf::AluOp::Add, Reg::R2, Reg::R3))
        .push(Insn::stx(Size::DW, Reg::R1, 16, Reg::R2))
        .push(Insn::mov64_reg(Reg::R0, Reg::R2))
        .exit();
    let insns = b.finish().unwrap();
    // Loaded sleepable whatever the options say, as the kernel wants.
    let prog = Program::load(
        &insns,
        &LoadOptions {
            name: "replay".into(),
            prog_type: sdt_bpf::ProgramType::Syscall,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let mut context = [0u8; 24];
    context[..8].copy_from_slice(&40u64.to_ne_bytes());
    context[8..16].copy_from_slice(&2u64.to_ne_bytes());
    assert_eq!(prog.run_with_context(&mut context).unwrap(), 42);
    assert_eq!(u64::from_ne_bytes(context[16..].try_into().unwrap()), 42);
    // A context shorter than what the program reads is refused.
    let mut short = [0u8; 8];
    assert!(prog.run_with_context(&mut short).is_err());
}
