//! A disassembler printing the text of the kernel's verifier log and of
//! `bpftool prog dump xlated`, so that `--dump` output can be compared
//! with both line by line:
//!
//! ```text
//!    0: (bf) r6 = r1
//!    1: (79) r1 = *(u64 *)(r6 +112)
//!    2: (15) if r1 == 0x0 goto pc+3
//!    3: (85) call bpf_probe_read_user#112
//!    4: (18) r1 = map[fd:5]
//!    6: (95) exit
//! ```
//!
//! Line numbers count slots, so the line after an `ld_imm64` is two higher.

use std::collections::HashMap;
use std::fmt::Write;

use crate::insn::{
    class, jmp, mode, AluOp, Helper, Insn, JmpOp, Size, PSEUDO_CALL, PSEUDO_KFUNC_CALL, SRC_X,
};

/// `src_reg` of an `ld_imm64` that points into a map value.
/// Atomic operation modifier: also return the old value.
const ATOMIC_FETCH: i32 = 0x01;
const ATOMIC_XCHG: i32 = 0xe0 | ATOMIC_FETCH;
const ATOMIC_CMPXCHG: i32 = 0xf0 | ATOMIC_FETCH;

/// A listing of instructions as built, before loading.
pub fn disassemble(insns: &[Insn]) -> String {
    Disassembler::new().listing(insns)
}

/// Disassembly settings.
#[derive(Clone, Debug, Default)]
pub struct Disassembler {
    xlated: bool,
    call_names: HashMap<i32, String>,
    kfunc_names: HashMap<i32, String>,
    map_names: HashMap<i32, String>,
}

impl Disassembler {
    /// Settings for instructions as built: map references are file
    /// descriptors, call immediates are helper ids.
    pub fn new() -> Disassembler {
        Disassembler::default()
    }

    /// Reads instructions as the kernel translated them: map references
    /// are map ids and call immediates are address deltas, which only the
    /// names given to [`call_names`](Self::call_names) can resolve.
    pub fn xlated(mut self, xlated: bool) -> Disassembler {
        self.xlated = xlated;
        self
    }

    /// Names for call immediates, overriding the helper-id table.
    pub fn call_names(mut self, names: HashMap<i32, String>) -> Disassembler {
        self.call_names = names;
        self
    }

    /// Names kernel functions (kfuncs) by their BTF ids: otherwise a call
    /// of one reads `call kfunc#ID`.
    pub fn kfunc_names(mut self, names: HashMap<i32, String>) -> Disassembler {
        self.kfunc_names = names;
        self
    }

    /// Names for map references by their immediate (a file descriptor, or
    /// an index before [`relocate_maps`](crate::relocate_maps)), printed
    /// as `map[name]`.
    pub fn map_names(mut self, names: HashMap<i32, String>) -> Disassembler {
        self.map_names = names;
        self
    }

    /// One line per instruction, `N: (code) text`.
    pub fn listing(&self, insns: &[Insn]) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < insns.len() {
            let insn = insns[i];
            let next = insns.get(i + 1).copied();
            let _ = writeln!(out, "{i:>4}: ({:02x}) {}", insn.code, self.body(insn, next));
            i += if insn.is_ld_imm64() { 2 } else { 1 };
        }
        out
    }

    /// The text of one instruction, `(code) text`. `next` is the following
    /// slot, read only by `ld_imm64`.
    pub fn text(&self, insn: Insn, next: Option<Insn>) -> String {
        format!("({:02x}) {}", insn.code, self.body(insn, next))
    }

    /// The text of one instruction without its opcode.
    fn body(&self, insn: Insn, next: Option<Insn>) -> String {
        let code = insn.code;
        match insn.class() {
            class::ALU | class::ALU64 => alu(insn),
            class::LDX => ldx(insn),
            class::ST if code & 0xe0 == mode::MEM => format!(
                "*({} *)(r{} {:+}) = {}",
                size_name(code),
                insn.dst(),
                insn.off,
                insn.imm
            ),
            class::STX => stx(insn),
            class::LD if insn.is_ld_imm64() => self.ld_imm64(insn, next),
            class::JMP | class::JMP32 => self.jump(insn),
            _ => "unknown".to_owned(),
        }
    }

    fn ld_imm64(&self, insn: Insn, next: Option<Insn>) -> String {
        let Some(next) = next else {
            return format!("r{} = <truncated ld_imm64>", insn.dst());
        };
        let word = (insn.imm as u32 as u64) | ((next.imm as u32 as u64) << 32);
        let what = if self.xlated { "id" } else { "fd" };
        match insn.src() {
            crate::insn::PSEUDO_MAP_FD => match self.map_names.get(&insn.imm) {
                Some(name) => format!("r{} = map[{name}]", insn.dst()),
                None => format!("r{} = map[{what}:{}]", insn.dst(), insn.imm),
            },
            crate::insn::PSEUDO_MAP_VALUE => match self.map_names.get(&insn.imm) {
                Some(name) => format!("r{} = map[{name}][0]+{}", insn.dst(), next.imm),
                None => format!("r{} = map[{what}:{}][0]+{}", insn.dst(), insn.imm, next.imm),
            },
            crate::insn::PSEUDO_FUNC => format!("r{} = func pc{:+}", insn.dst(), insn.imm),
            _ => format!("r{} = {word:#x}", insn.dst()),
        }
    }

    fn jump(&self, insn: Insn) -> String {
        let code = insn.code;
        let op = code & 0xf0;
        let w = if insn.class() == class::JMP32 {
            'w'
        } else {
            'r'
        };
        match op {
            jmp::CALL if insn.src() == PSEUDO_CALL => format!("call pc{:+}", insn.imm),
            jmp::CALL if insn.src() == PSEUDO_KFUNC_CALL => match self.kfunc_names.get(&insn.imm) {
                Some(name) => format!("call {name}#{}", insn.imm),
                None => format!("call kfunc#{}", insn.imm),
            },
            jmp::CALL => {
                let name = self.call_names.get(&insn.imm).map(String::as_str);
                let name = name.or_else(|| {
                    (!self.xlated)
                        .then(|| Helper::from_id(insn.imm).map(Helper::name))
                        .flatten()
                });
                match name {
                    Some(name) => format!("call {name}#{}", insn.imm),
                    None => format!("call unknown#{}", insn.imm),
                }
            }
            jmp::EXIT => "exit".to_owned(),
            jmp::JA if insn.class() == class::JMP => format!("goto pc{:+}", insn.off),
            jmp::JA => format!("gotol pc{:+}", insn.imm),
            _ => {
                let Some(cmp) = JmpOp::from_bits(op) else {
                    return "unknown".to_owned();
                };
                let rhs = if code & SRC_X != 0 {
                    format!("{w}{}", insn.src())
                } else {
                    format!("{:#x}", insn.imm as u32)
                };
                format!(
                    "if {w}{} {} {rhs} goto pc{:+}",
                    insn.dst(),
                    jmp_op_text(cmp),
                    insn.off
                )
            }
        }
    }
}

fn alu(insn: Insn) -> String {
    let code = insn.code;
    let w = if insn.class() == class::ALU64 {
        'r'
    } else {
        'w'
    };
    let (d, s) = (insn.dst(), insn.src());
    const END: u8 = 0xd0;
    if code & 0xf0 == END {
        let kind = match (insn.class(), code & SRC_X != 0) {
            (class::ALU64, _) => "bswap",
            (_, true) => "be",
            (_, false) => "le",
        };
        return format!("r{d} = {kind}{} r{d}", insn.imm);
    }
    let Some(op) = AluOp::from_bits(code & 0xf0) else {
        return "unknown".to_owned();
    };
    if op == AluOp::Neg {
        return format!("{w}{d} = -{w}{d}");
    }
    if op == AluOp::Mov && code & SRC_X != 0 && insn.off != 0 {
        return format!("{w}{d} = (s{}){w}{s}", insn.off);
    }
    let signed = insn.off == 1 && matches!(op, AluOp::Div | AluOp::Mod);
    let text = match op {
        AluOp::Add => "+=",
        AluOp::Sub => "-=",
        AluOp::Mul => "*=",
        AluOp::Div if signed => "s/=",
        AluOp::Div => "/=",
        AluOp::Or => "|=",
        AluOp::And => "&=",
        AluOp::Lsh => "<<=",
        AluOp::Rsh => ">>=",
        AluOp::Mod if signed => "s%=",
        AluOp::Mod => "%=",
        AluOp::Xor => "^=",
        AluOp::Mov => "=",
        AluOp::Arsh => "s>>=",
        AluOp::Neg => unreachable!("handled above"),
    };
    if code & SRC_X != 0 {
        format!("{w}{d} {text} {w}{s}")
    } else {
        format!("{w}{d} {text} {}", insn.imm)
    }
}

fn ldx(insn: Insn) -> String {
    let (d, s, off) = (insn.dst(), insn.src(), insn.off);
    match insn.code & 0xe0 {
        mode::MEM => format!("r{d} = *({} *)(r{s} {off:+})", size_name(insn.code)),
        mode::MEMSX => {
            let bits = Size::from_bits(insn.code).bytes() * 8;
            format!("r{d} = *(s{bits} *)(r{s} {off:+})")
        }
        _ => "unknown".to_owned(),
    }
}

fn stx(insn: Insn) -> String {
    let (d, s, off) = (insn.dst(), insn.src(), insn.off);
    let size = size_name(insn.code);
    match insn.code & 0xe0 {
        mode::MEM => format!("*({size} *)(r{d} {off:+}) = r{s}"),
        mode::ATOMIC => {
            let suffix = if insn.code & 0x18 == Size::DW as u8 {
                "64"
            } else {
                ""
            };
            match insn.imm {
                ATOMIC_XCHG => {
                    format!("r{s} = atomic{suffix}_xchg(({size} *)(r{d} {off:+}), r{s})")
                }
                ATOMIC_CMPXCHG => {
                    format!("r0 = atomic{suffix}_cmpxchg(({size} *)(r{d} {off:+}), r0, r{s})")
                }
                imm => {
                    let (name, text) = match AluOp::from_bits((imm & !ATOMIC_FETCH) as u8) {
                        Some(AluOp::Add) => ("add", "+="),
                        Some(AluOp::And) => ("and", "&="),
                        Some(AluOp::Or) => ("or", "|="),
                        Some(AluOp::Xor) => ("xor", "^="),
                        _ => return "unknown".to_owned(),
                    };
                    if imm & ATOMIC_FETCH != 0 {
                        format!(
                            "r{s} = atomic{suffix}_fetch_{name}(({size} *)(r{d} {off:+}), r{s})"
                        )
                    } else {
                        format!("lock *({size} *)(r{d} {off:+}) {text} r{s}")
                    }
                }
            }
        }
        _ => "unknown".to_owned(),
    }
}

fn size_name(code: u8) -> &'static str {
    match Size::from_bits(code) {
        Size::B => "u8",
        Size::H => "u16",
        Size::W => "u32",
        Size::DW => "u64",
    }
}

fn jmp_op_text(op: JmpOp) -> &'static str {
    match op {
        JmpOp::Eq => "==",
        JmpOp::Gt => ">",
        JmpOp::Ge => ">=",
        JmpOp::Set => "&",
        JmpOp::Ne => "!=",
        JmpOp::Sgt => "s>",
        JmpOp::Sge => "s>=",
        JmpOp::Lt => "<",
        JmpOp::Le => "<=",
        JmpOp::Slt => "s<",
        JmpOp::Sle => "s<=",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::Reg::*;

    fn text(i: Insn) -> String {
        Disassembler::new().text(i, None)
    }

    #[test]
    fn formats_like_the_kernel() {
        assert_eq!(text(Insn::mov64_reg(R6, R1)), "(bf) r6 = r1");
        assert_eq!(text(Insn::mov64_imm(R0, 0)), "(b7) r0 = 0");
        assert_eq!(text(Insn::mov32_imm(R2, -1)), "(b4) w2 = -1");
        assert_eq!(text(Insn::alu64_imm(AluOp::Add, R1, -8)), "(07) r1 += -8");
        assert_eq!(text(Insn::alu64_reg(AluOp::Add, R1, R2)), "(0f) r1 += r2");
        assert_eq!(text(Insn::alu64_imm(AluOp::Lsh, R1, 32)), "(67) r1 <<= 32");
        assert_eq!(
            text(Insn::alu64_imm(AluOp::Arsh, R1, 32)),
            "(c7) r1 s>>= 32"
        );
        assert_eq!(text(Insn::alu64_imm(AluOp::Neg, R1, 0)), "(87) r1 = -r1");
        assert_eq!(text(Insn::alu32_reg(AluOp::Xor, R3, R4)), "(ac) w3 ^= w4");
        assert_eq!(
            text(Insn::ldx(Size::DW, R1, R6, 80)),
            "(79) r1 = *(u64 *)(r6 +80)"
        );
        assert_eq!(
            text(Insn::stx(Size::W, R10, -8, R1)),
            "(63) *(u32 *)(r10 -8) = r1"
        );
        assert_eq!(
            text(Insn::st(Size::DW, R10, -16, 0)),
            "(7a) *(u64 *)(r10 -16) = 0"
        );
        assert_eq!(
            text(Insn::atomic_add(Size::DW, R0, 0, R1)),
            "(db) lock *(u64 *)(r0 +0) += r1"
        );
        assert_eq!(
            text(Insn::call(Helper::ProbeReadUser)),
            "(85) call bpf_probe_read_user#112"
        );
        assert_eq!(
            text(Insn::jmp_imm(JmpOp::Eq, R0, 0, 3)),
            "(15) if r0 == 0x0 goto pc+3"
        );
        assert_eq!(
            text(Insn::jmp_imm(JmpOp::Sgt, R1, -1, -2)),
            "(65) if r1 s> 0xffffffff goto pc-2"
        );
        assert_eq!(
            text(Insn::jmp_reg(JmpOp::Ne, R1, R2, 1)),
            "(5d) if r1 != r2 goto pc+1"
        );
        assert_eq!(
            text(Insn::jmp32_imm(JmpOp::Lt, R1, 4, 1)),
            "(a6) if w1 < 0x4 goto pc+1"
        );
        assert_eq!(text(Insn::ja(5)), "(05) goto pc+5");
        assert_eq!(text(Insn::exit()), "(95) exit");
        assert_eq!(
            text(Insn::new(0x85, 0, 0, 0, 4242)),
            "(85) call unknown#4242"
        );
    }

    #[test]
    fn lists_ld_imm64_over_two_slots() {
        let mut insns = vec![Insn::mov64_reg(R6, R1)];
        insns.extend(Insn::ld_imm64(R1, 0xdead_beef_0000_0001));
        insns.extend(Insn::ld_map_fd(R2, 7));
        insns.push(Insn::exit());
        assert_eq!(
            disassemble(&insns),
            "   0: (bf) r6 = r1\n\
             \x20  1: (18) r1 = 0xdeadbeef00000001\n\
             \x20  3: (18) r2 = map[fd:7]\n\
             \x20  5: (95) exit\n"
        );
        let xlated = Disassembler::new()
            .xlated(true)
            .call_names(HashMap::from([(-40, "bpf_ktime_get_ns".to_owned())]));
        assert_eq!(
            xlated.text(Insn::ld_map_fd(R2, 7)[0], Some(Insn::default())),
            "(18) r2 = map[id:7]"
        );
        assert_eq!(
            xlated.text(Insn::new(0x85, 0, 0, 0, -40), None),
            "(85) call bpf_ktime_get_ns#-40"
        );
    }
}
