//! Argument specs: where each probe argument lives when the probe fires.
//!
//! `<sys/sdt.h>` asks the compiler to print every argument as an assembler
//! operand, prefixed by its size: `[-]SIZE[f]@OPERAND`, one per argument,
//! separated by spaces. A minus sign means signed, an `f` floating point.
//! The operand is whatever the compiler chose: a register, a memory
//! reference or a constant, in the assembler syntax of the target. So the
//! grammar depends on the architecture, and compilers emit forms that no
//! tracer can read, such as `%xmm0` or `sym@GOTPCREL(%rip)`.
//!
//! Parsing therefore never fails as a whole. Each argument comes out as an
//! [`Arg`], and an operand that cannot be read becomes
//! [`Location::Unsupported`] with a reason for a human. One bad argument
//! never hides the probe or its other arguments.
//!
//! An argument that is a global or static variable is the memory at a
//! symbol: gcc writes it relative to the instruction pointer, as
//! `counter(%rip)`, `8+table(%rip)` (position-independent code) or
//! `table+8(%rip)`, and in code that is not position-independent also as
//! `table+12(,%rcx,4)`. Such an operand is a [`Location::Symbol`], not an
//! unsupported one: the note says exactly where the value is, and a
//! reader that has the file's symbol table can find it wherever the file
//! is loaded (the symbol's link-time address moved by the load bias).
//! Whether the symbol is in the table is a property of the file, not of
//! the spec, so it is decided by whoever reads the value, for that
//! argument alone. What stays unsupported is what names no memory at a
//! symbol: an entry of the global offset table (`sym@GOTPCREL(%rip)`),
//! thread-local storage (`%fs:sym@tpoff`), a displacement from an
//! instruction the note does not record (`16(%rip)`).
//!
//! Parsing is lazy and allocation-free: [`Args`] walks the spec string of a
//! site and borrows from it, so listing probes without their arguments costs
//! nothing here.

use std::fmt;

use crate::Arch;

/// One argument of a probe site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arg<'a> {
    /// The argument's spec exactly as the note records it, e.g. `-4@112(%rsp)`.
    pub spec: &'a str,
    /// Size in bytes: 1, 2, 4 or 8. `None` only when the spec has no valid
    /// `SIZE@` prefix, and then `location` is [`Location::Unsupported`].
    pub size: Option<u8>,
    /// The value is signed (the spec's size has a leading `-`).
    pub signed: bool,
    /// The value is floating point (the spec's size has an `f` suffix).
    pub float: bool,
    /// Where the value is when the probe fires.
    pub location: Location<'a>,
}

/// Where an argument's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location<'a> {
    /// In a register.
    Register(Register),
    /// In memory at `base + index * scale + offset`.
    Memory(Memory),
    /// In memory at a symbol's address plus a constant, plus registers
    /// where the operand adds them: a global or static variable, or a
    /// part of one.
    Symbol(SymbolMemory<'a>),
    /// A constant folded in by the compiler, as a 64-bit two's complement value.
    Constant(i64),
    /// Somewhere this crate cannot describe; the reason says why.
    Unsupported(Unsupported<'a>),
}

/// A register operand, or the part of one that the operand names.
///
/// The value is `(register >> (8 * offset))` truncated to `width` bytes, where
/// `register` is the full-width register `name` as the kernel saves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Register {
    /// Canonical full-width name, the way the architecture's `pt_regs`
    /// calls it: `rax` for `%eax`, `x3` for `w3`, `a0` for `x10`, `r15`.
    pub name: &'static str,
    /// Bytes of the register that the operand names: 1, 2, 4 or 8.
    pub width: u8,
    /// Byte position of the operand above the least significant byte: 0 for
    /// every supported operand; 1 for `%ah`..`%dh`, which are refused.
    pub offset: u8,
}

/// A memory operand: the value is at `base + index * scale + offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Memory {
    /// Canonical name of the base register; `None` for `(,%rax,4)` and for
    /// register 0 where the architecture reads it as zero (s390x, ppc64).
    pub base: Option<&'static str>,
    /// Canonical name of the index register, if any.
    pub index: Option<&'static str>,
    /// What the index is multiplied by: 1, 2, 4 or 8 (1 when there is no index).
    pub scale: u8,
    /// Constant displacement in bytes.
    pub offset: i64,
}

/// A memory operand that names a symbol: the value is at
/// `symbol + offset + base + index * scale`, where `symbol` is the
/// symbol's address in the running process, that is its link-time address
/// in the file's symbol table moved by the file's load bias.
///
/// `counter(%rip)`, `8+table(%rip)` and `table+8(%rip)` have no registers:
/// `(%rip)` only says how the instruction encodes the symbol's address.
/// `table+12(,%rcx,4)` has an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SymbolMemory<'a> {
    /// The symbol's name as the operand writes it, such as `counter`,
    /// `buf.0` or `state.lto_priv.0`.
    pub symbol: &'a str,
    /// Constant displacement in bytes from the symbol.
    pub offset: i64,
    /// Canonical name of a base register added to the address, if any.
    pub base: Option<&'static str>,
    /// Canonical name of an index register added to the address, if any.
    pub index: Option<&'static str>,
    /// What the index is multiplied by: 1, 2, 4 or 8 (1 when there is no index).
    pub scale: u8,
}

impl fmt::Display for SymbolMemory<'_> {
    /// The address in words: `table+8`, `table+12 + rcx*4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol)?;
        match self.offset {
            0 => {}
            offset if offset < 0 => write!(f, "-{}", offset.unsigned_abs())?,
            offset => write!(f, "+{offset}")?,
        }
        if let Some(base) = self.base {
            write!(f, " + {base}")?;
        }
        if let Some(index) = self.index {
            write!(f, " + {index}*{}", self.scale)?;
        }
        Ok(())
    }
}

/// Why an operand cannot be described as a [`Location`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsupported<'a> {
    /// `%ah`, `%bh`, `%ch` or `%dh`: bits 8 to 15 of a register. `register`
    /// says exactly which bits, for a reader that wants to support them.
    HighByteRegister {
        /// The operand text.
        operand: &'a str,
        /// The bits the operand names.
        register: Register,
    },
    /// A floating-point, vector or other register that uprobes do not save
    /// in `pt_regs` (`%xmm0`, `d0`, `fa0`, `%f2`).
    VectorRegister(&'a str),
    /// The instruction pointer itself (`%rip`), or a displacement from it
    /// that names no symbol (`16(%rip)`): relative to an instruction that
    /// the note does not record.
    PcRelative(&'a str),
    /// An operand that computes with a symbol's address in a way other
    /// than "memory at a symbol plus a constant": the address itself as a
    /// constant (`$sym`), a difference of symbols (`a-b(%rip)`), a
    /// negated symbol.
    Symbolic(&'a str),
    /// A symbol with a relocation operator (`sym@GOTPCREL(%rip)`,
    /// `sym@GOTOFF(%ebx)`, `sym@GOTTPOFF(%rip)`): an entry of the global
    /// offset table or a thread-local offset, not the variable itself.
    Relocation {
        /// The operand text.
        operand: &'a str,
        /// The operator after `@`, such as `GOTPCREL`.
        operator: &'a str,
    },
    /// An x86 segment override (`%fs:0x28`), that is thread-local storage.
    SegmentOverride(&'a str),
    /// A register name that the architecture does not have.
    UnknownRegister {
        /// The operand text.
        operand: &'a str,
        /// The architecture whose registers were searched.
        arch: Arch,
    },
    /// The spec does not follow the grammar; the text says how.
    Malformed(&'static str),
    /// Operands of this architecture are not decoded.
    Arch(Arch),
}

impl fmt::Display for Unsupported<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Unsupported::HighByteRegister { operand, register } => write!(
                f,
                "`{operand}` is bits 8-15 of {}, a high-byte register that is not supported",
                register.name
            ),
            Unsupported::VectorRegister(op) => write!(
                f,
                "`{op}` is a floating-point or vector register, which uprobes do not save"
            ),
            Unsupported::PcRelative(op) if !op.contains('(') => write!(
                f,
                "`{op}` is the instruction pointer itself, which a probe does not see \
                 as the program's instruction did"
            ),
            Unsupported::PcRelative(op) => write!(
                f,
                "`{op}` is relative to the instruction pointer but names no symbol, \
                 and the note does not record the instruction it is relative to"
            ),
            Unsupported::Symbolic(op) => write!(
                f,
                "`{op}` computes with a symbol's address; only the memory at a symbol \
                 plus a constant is supported"
            ),
            Unsupported::Relocation { operand, operator } => {
                let upper = operator.to_ascii_uppercase();
                if [
                    "TPOFF",
                    "NTPOFF",
                    "GOTTPOFF",
                    "GOTNTPOFF",
                    "INDNTPOFF",
                    "DTPOFF",
                    "DTPMOD",
                ]
                .iter()
                .any(|tls| upper.starts_with(tls))
                    || upper.starts_with("TLS")
                {
                    write!(
                        f,
                        "`{operand}` is an offset into thread-local storage, \
                         which is not supported"
                    )
                } else if upper.starts_with("GOT") {
                    write!(
                        f,
                        "`{operand}` is an entry of the global offset table, not the \
                         variable itself, which is not supported"
                    )
                } else {
                    write!(
                        f,
                        "`{operand}` uses the relocation `@{operator}`, which is not supported"
                    )
                }
            }
            Unsupported::SegmentOverride(op) => write!(
                f,
                "`{op}` uses a segment register (thread-local storage), which is not supported"
            ),
            Unsupported::UnknownRegister { operand, arch } => {
                write!(f, "`{operand}` is not a {arch} register")
            }
            Unsupported::Malformed(reason) => f.write_str(reason),
            Unsupported::Arch(arch) => {
                write!(f, "argument operands of {arch} files are not decoded")
            }
        }
    }
}

/// Iterates over the arguments in a site's spec string; see [`args`].
#[derive(Clone, Debug)]
pub struct Args<'a> {
    arch: Arch,
    rest: &'a str,
}

/// Parses the arguments of a spec string such as `8@%rbx -4@112(%rsp)`.
///
/// Arguments are separated by whitespace outside brackets, because aarch64
/// writes memory operands as `[sp, 16]`.
pub fn args(arch: Arch, specs: &str) -> Args<'_> {
    Args { arch, rest: specs }
}

impl<'a> Iterator for Args<'a> {
    type Item = Arg<'a>;

    fn next(&mut self) -> Option<Arg<'a>> {
        let rest = self.rest.trim_start();
        if rest.is_empty() {
            self.rest = rest;
            return None;
        }
        let mut depth = 0u32;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' | '(' => depth += 1,
                    ']' | ')' => depth = depth.saturating_sub(1),
                    _ => {}
                }
                depth == 0 && c.is_whitespace()
            })
            .map_or(rest.len(), |(i, _)| i);
        let (spec, tail) = rest.split_at(end);
        self.rest = tail;
        Some(Arg::parse(self.arch, spec))
    }
}

impl<'a> Arg<'a> {
    /// Parses one argument spec, `[-]SIZE[f]@OPERAND`. Never fails: problems
    /// are reported as [`Location::Unsupported`].
    pub fn parse(arch: Arch, spec: &'a str) -> Arg<'a> {
        let unsupported = |size, signed, float, why| Arg {
            spec,
            size,
            signed,
            float,
            location: Location::Unsupported(why),
        };
        let Some((prefix, operand)) = spec.split_once('@') else {
            return unsupported(
                None,
                false,
                false,
                Unsupported::Malformed("expected SIZE@OPERAND"),
            );
        };
        let (signed, digits) = match prefix.strip_prefix('-') {
            Some(digits) => (true, digits),
            None => (false, prefix),
        };
        let (float, digits) = match digits.strip_suffix('f') {
            Some(digits) => (true, digits),
            None => (false, digits),
        };
        let size = match digits {
            "1" => 1,
            "2" => 2,
            "4" => 4,
            "8" => 8,
            _ => {
                return unsupported(
                    None,
                    signed,
                    float,
                    Unsupported::Malformed("the size before `@` must be 1, 2, 4 or 8"),
                )
            }
        };
        Arg {
            spec,
            size: Some(size),
            signed,
            float,
            location: parse_operand(arch, operand),
        }
    }

    /// The operand text after `@`, or the whole spec if it has no `@`.
    pub fn operand(&self) -> &'a str {
        self.spec.split_once('@').map_or(self.spec, |(_, op)| op)
    }
}

/// Parses an operand in the assembler syntax of `arch`.
pub fn parse_operand(arch: Arch, operand: &str) -> Location<'_> {
    if operand.is_empty() {
        return Location::Unsupported(Unsupported::Malformed("the operand after `@` is empty"));
    }
    match arch {
        Arch::X86_64 => x86::operand(operand, x86::Mode::Long),
        Arch::I386 => x86::operand(operand, x86::Mode::Protected),
        Arch::Aarch64 => aarch64::operand(operand),
        Arch::Riscv64 => riscv64::operand(operand),
        Arch::S390x => s390x::operand(operand),
        Arch::Ppc64 | Arch::Ppc64le => ppc64::operand(operand, arch),
        Arch::Other(_) => Location::Unsupported(Unsupported::Arch(arch)),
    }
}

const BAD_NUMBER: Unsupported<'static> =
    Unsupported::Malformed("a number is malformed or too large");
const BAD_MEMORY: Unsupported<'static> = Unsupported::Malformed("a memory operand is malformed");
const ABSOLUTE: Unsupported<'static> =
    Unsupported::Malformed("an absolute memory address is not supported");

/// Parses a decimal or `0x` hexadecimal integer with an optional sign.
/// Values above `i64::MAX` wrap to their two's complement, so that
/// `18446744073709551615` and `-1` are the same 64-bit constant.
fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) if !hex.starts_with(['+', '-']) => u64::from_str_radix(hex, 16).ok()?,
        Some(_) => return None,
        None if digits.starts_with(['+', '-']) => return None,
        None => digits.parse::<u64>().ok()?,
    };
    if negative {
        if magnitude > 1 << 63 {
            return None;
        }
        Some((magnitude as i64).wrapping_neg())
    } else {
        Some(magnitude as i64)
    }
}

fn reg(name: &'static str, width: u8) -> Register {
    Register {
        name,
        width,
        offset: 0,
    }
}

/// Whether `text` looks like a name rather than punctuation or a number, so
/// that it can be called an unknown register rather than garbage.
fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '.')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// An x86 displacement: a number, or a symbol plus a number.
#[derive(Debug, PartialEq, Eq)]
enum Displacement<'a> {
    Number(i64),
    Symbol(&'a str, i64),
}

/// Parses a displacement as GNU as prints one: numbers (decimal or `0x`
/// hexadecimal) and at most one symbol, joined by `+` and `-`, with an
/// optional sign in front. gcc writes `8+table` in position-independent
/// code and `table+8` elsewhere; both mean `table` plus 8. The empty
/// text is the number 0. A symbol that is subtracted, or a second symbol,
/// is [`Unsupported::Symbolic`]; `sym@OPERATOR` is
/// [`Unsupported::Relocation`]. `operand` is the whole operand, for messages.
fn displacement<'a>(text: &'a str, operand: &'a str) -> Result<Displacement<'a>, Unsupported<'a>> {
    const BAD: Unsupported<'static> = Unsupported::Malformed("a displacement is malformed");
    if let Some((_, after)) = text.split_once('@') {
        let operator = &after[..after.find(['+', '-']).unwrap_or(after.len())];
        if operator.is_empty() || !operator.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(BAD);
        }
        return Err(Unsupported::Relocation { operand, operator });
    }
    if text.is_empty() {
        return Ok(Displacement::Number(0));
    }
    let mut symbol = None;
    let mut total = 0i64;
    // Each term runs from its sign (none for a first term without one)
    // to the next sign.
    let mut start = 0;
    loop {
        let signed = text[start..].starts_with(['+', '-']);
        let body = if signed { start + 1 } else { start };
        let end = text[body..]
            .find(['+', '-'])
            .map_or(text.len(), |at| body + at);
        let term = &text[body..end];
        if term.starts_with(|c: char| c.is_ascii_digit()) {
            let value = parse_int(&text[start..end]).ok_or(BAD_NUMBER)?;
            total = total.wrapping_add(value);
        } else if is_identifier(term) {
            if symbol.is_some() || text[start..].starts_with('-') {
                return Err(Unsupported::Symbolic(operand));
            }
            symbol = Some(term);
        } else {
            return Err(BAD);
        }
        if end == text.len() {
            break;
        }
        start = end;
    }
    Ok(match symbol {
        Some(symbol) => Displacement::Symbol(symbol, total),
        None => Displacement::Number(total),
    })
}

/// Splits `DISP(INNER)` into its displacement and inner text.
fn split_parens(operand: &str) -> Option<(&str, &str)> {
    let (disp, rest) = operand.split_once('(')?;
    let inner = rest.strip_suffix(')')?;
    (!inner.contains(['(', ')'])).then_some((disp, inner))
}

/// A register number `0..count` written in decimal without sign or leading zeros.
fn register_number(text: &str, count: u8) -> Option<u8> {
    if text.is_empty() || text.len() > 2 || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    let n: u8 = text.parse().ok()?;
    (n < count).then_some(n)
}

mod x86 {
    //! AT&T syntax, as GCC and Clang print it on x86-64 and i386.

    use super::*;

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(super) enum Mode {
        /// 64-bit registers and r8-r15 exist.
        Long,
        /// 32-bit x86: eax is the widest.
        Protected,
    }

    impl Mode {
        fn arch(self) -> Arch {
            match self {
                Mode::Long => Arch::X86_64,
                Mode::Protected => Arch::I386,
            }
        }
    }

    /// Full-width registers in `pt_regs` order of the encoding: the eight
    /// legacy ones, then r8-r15. In 32-bit mode the first eight are named
    /// `eax`.. instead.
    const LONG: [&str; 16] = [
        "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15",
    ];
    const PROTECTED: [&str; 8] = ["eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp"];

    /// Looks up a register name (without `%`).
    fn register<'a>(
        name: &'a str,
        operand: &'a str,
        mode: Mode,
    ) -> Result<Register, Unsupported<'a>> {
        // (index into LONG, width in bytes)
        #[rustfmt::skip]
        let found = match name {
            "rax" => (0, 8), "eax" => (0, 4), "ax" => (0, 2), "al" => (0, 1),
            "rbx" => (1, 8), "ebx" => (1, 4), "bx" => (1, 2), "bl" => (1, 1),
            "rcx" => (2, 8), "ecx" => (2, 4), "cx" => (2, 2), "cl" => (2, 1),
            "rdx" => (3, 8), "edx" => (3, 4), "dx" => (3, 2), "dl" => (3, 1),
            "rsi" => (4, 8), "esi" => (4, 4), "si" => (4, 2), "sil" => (4, 1),
            "rdi" => (5, 8), "edi" => (5, 4), "di" => (5, 2), "dil" => (5, 1),
            "rbp" => (6, 8), "ebp" => (6, 4), "bp" => (6, 2), "bpl" => (6, 1),
            "rsp" => (7, 8), "esp" => (7, 4), "sp" => (7, 2), "spl" => (7, 1),
            "r8" => (8, 8), "r8d" => (8, 4), "r8w" => (8, 2), "r8b" => (8, 1),
            "r9" => (9, 8), "r9d" => (9, 4), "r9w" => (9, 2), "r9b" => (9, 1),
            "r10" => (10, 8), "r10d" => (10, 4), "r10w" => (10, 2), "r10b" => (10, 1),
            "r11" => (11, 8), "r11d" => (11, 4), "r11w" => (11, 2), "r11b" => (11, 1),
            "r12" => (12, 8), "r12d" => (12, 4), "r12w" => (12, 2), "r12b" => (12, 1),
            "r13" => (13, 8), "r13d" => (13, 4), "r13w" => (13, 2), "r13b" => (13, 1),
            "r14" => (14, 8), "r14d" => (14, 4), "r14w" => (14, 2), "r14b" => (14, 1),
            "r15" => (15, 8), "r15d" => (15, 4), "r15w" => (15, 2), "r15b" => (15, 1),
            "ah" => (16, 1), "bh" => (17, 1), "ch" => (18, 1), "dh" => (19, 1),
            _ => (usize::MAX, 0),
        };
        let unknown = Unsupported::UnknownRegister {
            operand,
            arch: mode.arch(),
        };
        match (found, mode) {
            // %ah..%dh: bits 8-15 of the first four registers.
            ((high @ 16..=19, _), _) => {
                let family = high - 16;
                Err(Unsupported::HighByteRegister {
                    operand,
                    register: Register {
                        name: if mode == Mode::Long {
                            LONG[family]
                        } else {
                            PROTECTED[family]
                        },
                        width: 1,
                        offset: 1,
                    },
                })
            }
            ((family @ 0..=15, width), Mode::Long) => Ok(reg(LONG[family], width)),
            // 32-bit x86 has no 64-bit registers, no r8-r15 and no
            // sil/dil/bpl/spl.
            ((family @ 0..=7, width), Mode::Protected)
                if width != 8 && (width > 1 || family < 4) =>
            {
                Ok(reg(PROTECTED[family], width))
            }
            ((0..=15, _), Mode::Protected) => Err(unknown),
            _ if ["xmm", "ymm", "zmm", "mm", "st", "k"].iter().any(|prefix| {
                name.strip_prefix(prefix).is_some_and(|n| {
                    n.is_empty() || n.starts_with(|c: char| c.is_ascii_digit() || c == '(')
                })
            }) =>
            {
                Err(Unsupported::VectorRegister(operand))
            }
            _ if name == "rip" || name == "eip" => Err(Unsupported::PcRelative(operand)),
            _ => Err(unknown),
        }
    }

    /// A register that may appear inside an address: full width only.
    fn address_register<'a>(
        text: &'a str,
        operand: &'a str,
        mode: Mode,
    ) -> Result<&'static str, Unsupported<'a>> {
        let name = text.trim().strip_prefix('%').ok_or(BAD_MEMORY)?;
        if name == "rip" || name == "eip" {
            // Only a base can be the instruction pointer (handled by the caller).
            return Err(BAD_MEMORY);
        }
        let r = register(name, operand, mode)?;
        let full = if mode == Mode::Long { 8 } else { 4 };
        if r.width != full {
            return Err(Unsupported::Malformed(
                "an address register narrower than the address size is not supported",
            ));
        }
        Ok(r.name)
    }

    pub(super) fn operand(operand: &str, mode: Mode) -> Location<'_> {
        match parse(operand, mode) {
            Ok(location) => location,
            Err(why) => Location::Unsupported(why),
        }
    }

    fn parse(operand: &str, mode: Mode) -> Result<Location<'_>, Unsupported<'_>> {
        if let Some(imm) = operand.strip_prefix('$') {
            return match parse_int(imm) {
                Some(value) => Ok(Location::Constant(value)),
                None if is_identifier(imm.split(['+', '-']).next().unwrap_or("")) => {
                    Err(Unsupported::Symbolic(operand))
                }
                None => Err(BAD_NUMBER),
            };
        }
        if let Some((segment, _)) = operand.split_once(':') {
            if segment.starts_with('%') {
                return Err(Unsupported::SegmentOverride(operand));
            }
            return Err(Unsupported::Malformed("unexpected `:` in the operand"));
        }
        if let Some(name) = operand.strip_prefix('%') {
            return register(name, operand, mode).map(Location::Register);
        }
        let Some((disp, inner)) = split_parens(operand) else {
            // A bare displacement is the memory at that absolute address.
            return match displacement(operand, operand) {
                Ok(Displacement::Symbol(symbol, offset)) => Ok(Location::Symbol(SymbolMemory {
                    symbol,
                    offset,
                    base: None,
                    index: None,
                    scale: 1,
                })),
                Ok(Displacement::Number(_)) => Err(ABSOLUTE),
                Err(Unsupported::Malformed(_)) => {
                    Err(Unsupported::Malformed("unrecognised operand"))
                }
                Err(why) => Err(why),
            };
        };
        let mut parts = inner.split(',');
        let base_text = parts.next().unwrap_or("").trim();
        let index_text = parts.next();
        let scale_text = parts.next();
        if parts.next().is_some() {
            return Err(BAD_MEMORY);
        }
        if base_text == "%rip" || base_text == "%eip" {
            if index_text.is_some() {
                return Err(BAD_MEMORY);
            }
            // Relative to the instruction that uses it, which the note
            // does not record: readable only as the symbol it names.
            return match displacement(disp, operand)? {
                Displacement::Symbol(symbol, offset) => Ok(Location::Symbol(SymbolMemory {
                    symbol,
                    offset,
                    base: None,
                    index: None,
                    scale: 1,
                })),
                Displacement::Number(_) => Err(Unsupported::PcRelative(operand)),
            };
        }
        let base = if base_text.is_empty() {
            None
        } else {
            Some(address_register(base_text, operand, mode)?)
        };
        let index = match index_text {
            Some(text) => {
                let index = address_register(text, operand, mode)?;
                if index == "rsp" || index == "esp" {
                    return Err(BAD_MEMORY);
                }
                Some(index)
            }
            None => None,
        };
        let scale = match scale_text.map(str::trim) {
            None => 1,
            Some("1") => 1,
            Some("2") => 2,
            Some("4") => 4,
            Some("8") => 8,
            Some(_) => return Err(Unsupported::Malformed("the scale must be 1, 2, 4 or 8")),
        };
        if base.is_none() && index.is_none() {
            return Err(BAD_MEMORY);
        }
        let offset = match displacement(disp, operand)? {
            Displacement::Number(offset) => offset,
            Displacement::Symbol(symbol, offset) => {
                return Ok(Location::Symbol(SymbolMemory {
                    symbol,
                    offset,
                    base,
                    index,
                    scale,
                }))
            }
        };
        Ok(Location::Memory(Memory {
            base,
            index,
            scale,
            offset,
        }))
    }
}

mod aarch64 {
    //! Arm syntax: `x0`, `w1`, `sp`, `[x0]`, `[sp, 16]`, `#5` or `5`.

    use super::*;

    const X: [&str; 31] = [
        "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "x29", "x30",
    ];

    enum Name {
        Register(Register),
        Zero,
    }

    fn register(name: &str) -> Option<Name> {
        let found = match name {
            "sp" => reg("sp", 8),
            "wsp" => reg("sp", 4),
            "fp" => reg("x29", 8),
            "lr" => reg("x30", 8),
            "xzr" | "wzr" => return Some(Name::Zero),
            _ => {
                let (width, number) = if let Some(n) = name.strip_prefix('x') {
                    (8, n)
                } else {
                    (4, name.strip_prefix('w')?)
                };
                reg(X[usize::from(register_number(number, 31)?)], width)
            }
        };
        Some(Name::Register(found))
    }

    fn is_vector(name: &str) -> bool {
        name.strip_prefix(['v', 'q', 'd', 's', 'h', 'b', 'z', 'p'])
            .is_some_and(|n| register_number(n.split('.').next().unwrap_or(""), 32).is_some())
    }

    fn immediate(text: &str) -> Option<i64> {
        parse_int(text.strip_prefix('#').unwrap_or(text))
    }

    pub(super) fn operand(operand: &str) -> Location<'_> {
        let fail = Location::Unsupported;
        if let Some(inner) = operand.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return fail(BAD_MEMORY);
            };
            let (base, offset) = match inner.split_once(',') {
                Some((base, offset)) => match immediate(offset.trim()) {
                    Some(offset) => (base.trim(), offset),
                    None if register(offset.trim()).is_some() => {
                        return fail(Unsupported::Malformed(
                            "register-offset addressing is not supported",
                        ))
                    }
                    None => return fail(BAD_MEMORY),
                },
                None => (inner.trim(), 0),
            };
            return match register(base) {
                Some(Name::Register(r)) if r.width == 8 => Location::Memory(Memory {
                    base: Some(r.name),
                    index: None,
                    scale: 1,
                    offset,
                }),
                _ => fail(BAD_MEMORY),
            };
        }
        match register(operand) {
            Some(Name::Register(r)) => return Location::Register(r),
            Some(Name::Zero) => return Location::Constant(0),
            None => {}
        }
        if let Some(value) = immediate(operand) {
            return Location::Constant(value);
        }
        if is_vector(operand) {
            return fail(Unsupported::VectorRegister(operand));
        }
        if is_identifier(operand) {
            return fail(Unsupported::UnknownRegister {
                operand,
                arch: Arch::Aarch64,
            });
        }
        fail(Unsupported::Malformed("unrecognised operand"))
    }
}

mod riscv64 {
    //! RISC-V syntax: ABI or `x` register names, `8(sp)`, plain constants.

    use super::*;

    /// ABI names by register number, as the kernel's `pt_regs` names them.
    const ABI: [&str; 32] = [
        "zero", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
        "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
        "t5", "t6",
    ];

    /// Register number of an ABI or `x` name.
    fn number(name: &str) -> Option<usize> {
        if name == "fp" {
            return Some(8);
        }
        if let Some(n) = name.strip_prefix('x').and_then(|n| register_number(n, 32)) {
            return Some(usize::from(n));
        }
        ABI.iter().position(|&abi| abi == name)
    }

    fn is_float(name: &str) -> bool {
        let digits = name
            .strip_prefix("ft")
            .or_else(|| name.strip_prefix("fs"))
            .or_else(|| name.strip_prefix("fa"))
            .or_else(|| name.strip_prefix('f'))
            .or_else(|| name.strip_prefix('v'));
        digits.is_some_and(|n| register_number(n, 32).is_some())
    }

    pub(super) fn operand(operand: &str) -> Location<'_> {
        let fail = Location::Unsupported;
        if let Some((disp, base)) = split_parens(operand) {
            let offset = if disp.is_empty() {
                0
            } else {
                match parse_int(disp) {
                    Some(offset) => offset,
                    None => return fail(BAD_NUMBER),
                }
            };
            return match number(base.trim()) {
                Some(0) => fail(ABSOLUTE),
                Some(n) => Location::Memory(Memory {
                    base: Some(ABI[n]),
                    index: None,
                    scale: 1,
                    offset,
                }),
                None => fail(BAD_MEMORY),
            };
        }
        match number(operand) {
            Some(0) => return Location::Constant(0),
            Some(n) => return Location::Register(reg(ABI[n], 8)),
            None => {}
        }
        if let Some(value) = parse_int(operand) {
            return Location::Constant(value);
        }
        if is_float(operand) {
            return fail(Unsupported::VectorRegister(operand));
        }
        if is_identifier(operand) {
            return fail(Unsupported::UnknownRegister {
                operand,
                arch: Arch::Riscv64,
            });
        }
        fail(Unsupported::Malformed("unrecognised operand"))
    }
}

mod s390x {
    //! IBM Z syntax: `%r2`, `160(%r15)`, `8(%r1,%r2)` (index, then base),
    //! plain constants. Register 0 in an address means zero.

    use super::*;

    const R: [&str; 16] = [
        "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13",
        "r14", "r15",
    ];

    fn register(text: &str) -> Option<usize> {
        let n = text.trim().strip_prefix("%r")?;
        register_number(n, 16).map(usize::from)
    }

    /// A register inside an address, where r0 stands for zero.
    fn address_register(text: &str) -> Result<Option<&'static str>, Unsupported<'static>> {
        match register(text) {
            Some(0) => Ok(None),
            Some(n) => Ok(Some(R[n])),
            None => Err(BAD_MEMORY),
        }
    }

    pub(super) fn operand(operand: &str) -> Location<'_> {
        let fail = Location::Unsupported;
        if let Some((disp, inner)) = split_parens(operand) {
            let offset = if disp.is_empty() {
                0
            } else {
                match parse_int(disp) {
                    Some(offset) => offset,
                    None => return fail(BAD_NUMBER),
                }
            };
            let (index, base) = match inner.split_once(',') {
                Some((index, base)) if !index.trim().is_empty() => {
                    (address_register(index), address_register(base))
                }
                Some((_, base)) => (Ok(None), address_register(base)),
                None => (Ok(None), address_register(inner)),
            };
            return match (index, base) {
                (Ok(index), Ok(base)) => {
                    let (base, index) = if base.is_none() {
                        (index, None)
                    } else {
                        (base, index)
                    };
                    match base {
                        Some(_) => Location::Memory(Memory {
                            base,
                            index,
                            scale: 1,
                            offset,
                        }),
                        None => fail(ABSOLUTE),
                    }
                }
                (Err(why), _) | (_, Err(why)) => fail(why),
            };
        }
        if let Some(n) = register(operand) {
            return Location::Register(reg(R[n], 8));
        }
        if let Some(value) = parse_int(operand) {
            return Location::Constant(value);
        }
        if let Some(name) = operand.strip_prefix('%') {
            if name
                .strip_prefix(['f', 'v', 'a', 'c'])
                .is_some_and(|n| register_number(n, 32).is_some())
            {
                return fail(Unsupported::VectorRegister(operand));
            }
            return fail(Unsupported::UnknownRegister {
                operand,
                arch: Arch::S390x,
            });
        }
        fail(Unsupported::Malformed("unrecognised operand"))
    }
}

mod ppc64 {
    //! PowerPC syntax. GCC prints registers as bare numbers unless
    //! `-mregnames` is on, so `3` is r3 and `8(1)` is 8 bytes above r1;
    //! constants carry an `i` prefix (`i5`). Register 0 as a base means zero.

    use super::*;

    const R: [&str; 32] = [
        "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13",
        "r14", "r15", "r16", "r17", "r18", "r19", "r20", "r21", "r22", "r23", "r24", "r25", "r26",
        "r27", "r28", "r29", "r30", "r31",
    ];

    fn register(text: &str) -> Option<usize> {
        let text = text.trim();
        let n = text.strip_prefix("%r").unwrap_or(text);
        register_number(n, 32).map(usize::from)
    }

    pub(super) fn operand(operand: &str, arch: Arch) -> Location<'_> {
        let fail = Location::Unsupported;
        if let Some(imm) = operand.strip_prefix('i') {
            return match parse_int(imm) {
                Some(value) => Location::Constant(value),
                None => fail(BAD_NUMBER),
            };
        }
        if let Some((disp, base)) = split_parens(operand) {
            let offset = if disp.is_empty() {
                0
            } else {
                match parse_int(disp) {
                    Some(offset) => offset,
                    None if is_identifier(disp.split(['+', '-', '@']).next().unwrap_or("")) => {
                        return fail(Unsupported::Symbolic(operand))
                    }
                    None => return fail(BAD_NUMBER),
                }
            };
            return match register(base) {
                Some(0) => fail(ABSOLUTE),
                Some(n) => Location::Memory(Memory {
                    base: Some(R[n]),
                    index: None,
                    scale: 1,
                    offset,
                }),
                None => fail(BAD_MEMORY),
            };
        }
        if let Some((base, index)) = operand.split_once(',') {
            // Indexed form `RA,RB`, where RA = 0 reads as zero.
            return match (register(base), register(index)) {
                (Some(0), Some(index)) => Location::Memory(Memory {
                    base: Some(R[index]),
                    index: None,
                    scale: 1,
                    offset: 0,
                }),
                (Some(base), Some(index)) => Location::Memory(Memory {
                    base: Some(R[base]),
                    index: Some(R[index]),
                    scale: 1,
                    offset: 0,
                }),
                _ => fail(BAD_MEMORY),
            };
        }
        if let Some(n) = register(operand) {
            return Location::Register(reg(R[n], 8));
        }
        let name = operand.strip_prefix('%').unwrap_or(operand);
        if ["f", "v", "vs"].iter().any(|p| {
            name.strip_prefix(p)
                .is_some_and(|n| register_number(n, 64).is_some())
        }) {
            return fail(Unsupported::VectorRegister(operand));
        }
        if is_identifier(name) {
            return fail(Unsupported::UnknownRegister { operand, arch });
        }
        fail(Unsupported::Malformed("unrecognised operand"))
    }
}

#[cfg(test)]
mod tests;
