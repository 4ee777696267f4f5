//! The x86-64 `struct pt_regs`: the context of a uprobe program.
//!
//! A uprobe program receives the traced thread's user registers as a
//! pointer to `struct pt_regs` in `R1`. The verifier accepts only aligned
//! 8-byte loads from it, so narrower registers (`%eax`, `%dil`) are read
//! as their full 64-bit register and narrowed afterwards; mapping a
//! sub-register name to its full register is the argument parser's job.

/// Size of `struct pt_regs` in bytes.
pub const PT_REGS_SIZE: usize = 168;

/// Offsets in `struct pt_regs`, by canonical 64-bit register name, in
/// struct order.
const PT_REGS: [(&str, i16); 21] = [
    ("r15", 0),
    ("r14", 8),
    ("r13", 16),
    ("r12", 24),
    ("rbp", 32),
    ("rbx", 40),
    ("r11", 48),
    ("r10", 56),
    ("r9", 64),
    ("r8", 72),
    ("rax", 80),
    ("rcx", 88),
    ("rdx", 96),
    ("rsi", 104),
    ("rdi", 112),
    ("orig_rax", 120),
    ("rip", 128),
    ("cs", 136),
    ("eflags", 144),
    ("rsp", 152),
    ("ss", 160),
];

/// Registers of the first six integer arguments of a function call
/// (System V ABI): what a uprobe at a function's entry reads as `argN`.
pub const FUNCTION_ARGS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];

/// Register of an integer return value: what a uretprobe reads.
pub const RETURN_VALUE: &str = "rax";

/// Offset of a 64-bit register in `struct pt_regs`: `"rax"` → 80.
/// Sub-register names (`eax`, `al`) are not accepted.
pub fn pt_regs_offset(name: &str) -> Option<i16> {
    PT_REGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, off)| *off)
}

/// Offset of the `n`th (0-based) integer function argument, for `n < 6`.
pub fn function_arg_offset(n: usize) -> Option<i16> {
    pt_regs_offset(FUNCTION_ARGS.get(n)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_kernel_layout() {
        assert_eq!(pt_regs_offset("rax"), Some(80));
        assert_eq!(pt_regs_offset("rdi"), Some(112));
        assert_eq!(pt_regs_offset("rsp"), Some(152));
        assert_eq!(pt_regs_offset("eax"), None);
        assert_eq!(function_arg_offset(1), Some(104));
        assert_eq!(function_arg_offset(6), None);
        for (i, (_, off)) in PT_REGS.iter().enumerate() {
            assert_eq!(*off as usize, i * 8);
        }
        assert_eq!(PT_REGS.len() * 8, PT_REGS_SIZE);
    }
}
