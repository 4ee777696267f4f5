//! Removing the instructions no path reaches.
//!
//! The kernel's verifier refuses a program with an instruction that no
//! path from the first one reaches ("unreachable insn"). The generator
//! makes such code whenever a script does: statements after `exit()` or
//! `return`, the untaken branch of a constant condition (`if (0)`,
//! `1 ? a : b`, `5 && 0`), the rest of a loop body after `break`. Rather
//! than make every construct aware of what follows it, each finished
//! program goes through this pass, which keeps only the reachable slots
//! and re-targets the jumps. A callback (code a helper calls, named by a
//! `BPF_PSEUDO_FUNC` load) is reached from the load that names it.

use sdt_bpf::Insn;

use sdt_lang::diag::Span;

/// `code & 0xf0` of `ja`, `call` and `exit` in the JMP class.
const JA: u8 = 0x00;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// The JMP class (`code & 7`).
const CLASS_JMP: u8 = 0x05;

/// Where control can go after slot `i`: the fall-through and the jump
/// target, if any. Returns `None` for a fall-through past `exit` or `ja`.
fn successors(insns: &[Insn], i: usize) -> (Option<usize>, Option<usize>) {
    let insn = insns[i];
    let target = |off: i64| usize::try_from(i as i64 + 1 + off).ok();
    if insn.is_ld_imm64() {
        let callback = (insn.src() == sdt_bpf::PSEUDO_FUNC)
            .then(|| target(i64::from(insn.imm)))
            .flatten();
        return (Some(i + 2), callback);
    }
    let op = insn.code & 0xf0;
    if insn.class() == CLASS_JMP {
        match op {
            EXIT => return (None, None),
            JA => return (None, target(i64::from(insn.off))),
            CALL if insn.src() == sdt_bpf::PSEUDO_CALL => {
                return (Some(i + 1), target(i64::from(insn.imm)))
            }
            _ => {}
        }
    }
    if insn.is_branch() {
        return (Some(i + 1), target(i64::from(insn.off)));
    }
    (Some(i + 1), None)
}

/// Drops every slot that no path from slot 0 reaches, fixes the jump
/// offsets, and moves the statement `spans` to the kept code.
pub(super) fn remove_unreachable(insns: &mut Vec<Insn>, spans: &mut [(usize, Span)]) {
    let n = insns.len();
    let mut reached = vec![false; n];
    let mut work = vec![0usize];
    while let Some(i) = work.pop() {
        if i >= n || reached[i] {
            continue;
        }
        reached[i] = true;
        if insns[i].is_ld_imm64() && i + 1 < n {
            reached[i + 1] = true;
        }
        let (next, jump) = successors(insns, i);
        work.extend(next);
        work.extend(jump);
    }
    if reached.iter().all(|&r| r) {
        return;
    }
    // new_index[i]: the slot `i` moves to, or the slot of the next kept
    // instruction when `i` goes.
    let mut new_index = Vec::with_capacity(n + 1);
    let mut kept = 0usize;
    for &r in &reached {
        new_index.push(kept);
        kept += usize::from(r);
    }
    new_index.push(kept);
    let mut out = Vec::with_capacity(kept);
    let mut i = 0;
    while i < n {
        if !reached[i] {
            i += 1;
            continue;
        }
        let mut insn = insns[i];
        let (_, jump) = successors(insns, i);
        if let Some(target) = jump {
            let distance = new_index[target] as i64 - new_index[i] as i64 - 1;
            let calls = insn.class() == CLASS_JMP && insn.code & 0xf0 == CALL;
            if calls || insn.is_ld_imm64() {
                insn.imm = distance as i32;
            } else {
                // Removing slots only shortens jumps.
                insn.off = distance as i16;
            }
        }
        out.push(insn);
        i += 1;
    }
    *insns = out;
    for (start, _) in spans.iter_mut() {
        *start = new_index[(*start).min(n)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdt_bpf::{Builder, JmpOp, Reg::*};

    fn span() -> Span {
        Span::default()
    }

    #[test]
    fn keeps_a_program_without_dead_code() {
        let mut b = Builder::new();
        let end = b.label();
        b.push(Insn::mov64_imm(R0, 0));
        b.jump_imm(JmpOp::Eq, R0, 0, end);
        b.push(Insn::mov64_imm(R0, 1));
        b.bind(end);
        b.exit();
        let before = b.finish().unwrap();
        let mut insns = before.clone();
        remove_unreachable(&mut insns, &mut []);
        assert_eq!(insns.len(), before.len());
        assert_eq!(insns[1].off, before[1].off);
    }

    #[test]
    fn drops_code_after_a_jump_and_after_exit_and_retargets() {
        // 0: ja end          (constant-true condition)
        // 1: r0 = 1          dead
        // 2,3: r1 = big      dead (two slots)
        // 4: end: if r0 == 0 goto out
        // 5: r0 = 2
        // 6: out: exit
        // 7: r0 = 3          dead (after exit)
        // 8: exit            dead
        let mut b = Builder::new();
        let end = b.label();
        let out = b.label();
        b.jump(end);
        b.push(Insn::mov64_imm(R0, 1));
        b.load_imm(R1, 0x1_0000_0000);
        b.bind(end);
        b.jump_imm(JmpOp::Eq, R0, 0, out);
        b.push(Insn::mov64_imm(R0, 2));
        b.bind(out);
        b.exit();
        b.push(Insn::mov64_imm(R0, 3));
        b.exit();
        let mut insns = b.finish().unwrap();
        let mut spans = vec![(0, span()), (1, span()), (4, span()), (7, span())];
        remove_unreachable(&mut insns, &mut spans);
        assert_eq!(insns.len(), 4, "{insns:?}");
        assert_eq!(insns[0].off, 0, "the ja now jumps to the next slot");
        assert_eq!(insns[1].off, 1, "the conditional jump still skips one slot");
        assert_eq!(insns[2].imm, 2);
        let starts: Vec<usize> = spans.iter().map(|s| s.0).collect();
        assert_eq!(starts, [0, 1, 1, 4]);
    }

    #[test]
    fn a_callback_is_kept_and_its_reference_retargeted() {
        // 0,1: r2 = func callback
        // 2: ja end
        // 3: r0 = 1          dead
        // 4: end: exit
        // 5: r0 = 7          dead (after exit, before the callback)
        // 6: callback: r0 = 0
        // 7: exit
        let mut b = Builder::new();
        let end = b.label();
        let callback = b.label();
        b.ld_func(R2, callback);
        b.jump(end);
        b.push(Insn::mov64_imm(R0, 1));
        b.bind(end);
        b.exit();
        b.push(Insn::mov64_imm(R0, 7));
        b.bind(callback);
        b.push(Insn::mov64_imm(R0, 0));
        b.exit();
        let mut insns = b.finish().unwrap();
        remove_unreachable(&mut insns, &mut []);
        assert_eq!(insns.len(), 6, "{insns:?}");
        // The callback moved from slot 6 to slot 4: 0 + imm + 1 = 4.
        assert_eq!(insns[0].imm, 3);
        assert_eq!(insns[4].imm, 0);
    }

    #[test]
    fn a_backward_loop_stays_intact() {
        let mut b = Builder::new();
        let top = b.here();
        let end = b.label();
        b.jump_imm(JmpOp::Gt, R1, 10, end);
        b.push(Insn::alu64_imm(sdt_bpf::AluOp::Add, R1, 1));
        b.jump(top);
        b.push(Insn::mov64_imm(R0, 9)); // dead
        b.bind(end);
        b.exit();
        let mut insns = b.finish().unwrap();
        remove_unreachable(&mut insns, &mut []);
        assert_eq!(insns.len(), 4);
        assert_eq!(insns[0].off, 2);
        assert_eq!(insns[2].off, -3);
    }
}
