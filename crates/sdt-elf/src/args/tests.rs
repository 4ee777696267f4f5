use super::*;

fn r(name: &'static str, width: u8) -> Location<'static> {
    Location::Register(reg(name, width))
}

fn mem(base: &'static str, offset: i64) -> Location<'static> {
    Location::Memory(Memory {
        base: Some(base),
        index: None,
        scale: 1,
        offset,
    })
}

fn indexed(
    base: Option<&'static str>,
    index: &'static str,
    scale: u8,
    offset: i64,
) -> Location<'static> {
    Location::Memory(Memory {
        base,
        index: Some(index),
        scale,
        offset,
    })
}

/// The location of a single operand.
fn loc(arch: Arch, operand: &str) -> Location<'_> {
    parse_operand(arch, operand)
}

fn is_unsupported(location: Location<'_>) -> bool {
    matches!(location, Location::Unsupported(_))
}

#[test]
fn size_sign_and_float() {
    let arg = Arg::parse(Arch::X86_64, "-4@%eax");
    assert_eq!(
        arg,
        Arg {
            spec: "-4@%eax",
            size: Some(4),
            signed: true,
            float: false,
            location: r("rax", 4),
        }
    );
    assert_eq!(arg.operand(), "%eax");
    let arg = Arg::parse(Arch::X86_64, "8f@-8(%rbp)");
    assert_eq!((arg.size, arg.signed, arg.float), (Some(8), false, true));
    assert_eq!(arg.location, mem("rbp", -8));
    let arg = Arg::parse(Arch::X86_64, "-8f@%rax");
    assert_eq!((arg.size, arg.signed, arg.float), (Some(8), true, true));
    for size in ["1", "2", "4", "8"] {
        let spec = format!("{size}@%rax");
        assert_eq!(
            Arg::parse(Arch::X86_64, &spec).size,
            Some(size.parse().unwrap())
        );
    }
}

#[test]
fn bad_sizes_are_unsupported() {
    for spec in [
        "3@%rax", "16@%rax", "@%rax", "-@%rax", "f@%rax", "x@%rax", "%rax", "", "4", "--4@%rax",
        "4ff@%rax",
    ] {
        let arg = Arg::parse(Arch::X86_64, spec);
        assert_eq!(arg.size, None, "{spec}");
        assert!(is_unsupported(arg.location), "{spec}");
    }
    let arg = Arg::parse(Arch::X86_64, "4@");
    assert_eq!(arg.size, Some(4));
    assert!(is_unsupported(arg.location));
}

#[test]
fn splits_on_spaces_outside_brackets() {
    let specs: Vec<_> = args(Arch::Aarch64, "8@x0  -4@[sp, 16] 8@[x1, -8]\t1@5 ")
        .map(|a| a.spec)
        .collect();
    assert_eq!(specs, ["8@x0", "-4@[sp, 16]", "8@[x1, -8]", "1@5"]);
    assert_eq!(args(Arch::X86_64, "").count(), 0);
    assert_eq!(args(Arch::X86_64, "   ").count(), 0);
    // An unbalanced bracket swallows the rest, but never panics.
    let specs: Vec<_> = args(Arch::Aarch64, "8@[x0 8@x1").map(|a| a.spec).collect();
    assert_eq!(specs, ["8@[x0 8@x1"]);
    let specs: Vec<_> = args(Arch::Aarch64, "8@]x0 8@x1").map(|a| a.spec).collect();
    assert_eq!(specs, ["8@]x0", "8@x1"]);
}

#[test]
fn one_bad_argument_does_not_hide_the_others() {
    let got: Vec<_> = args(Arch::X86_64, "8@%rdi 8@%xmm0 4@garbage!! -4@%esi").collect();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].location, r("rdi", 8));
    assert_eq!(
        got[1].location,
        Location::Unsupported(Unsupported::VectorRegister("%xmm0"))
    );
    assert!(is_unsupported(got[2].location));
    assert_eq!(got[3].location, r("rsi", 4));
}

#[test]
fn x86_64_every_register_and_sub_register() {
    let families = [
        ("rax", ["rax", "eax", "ax", "al"]),
        ("rbx", ["rbx", "ebx", "bx", "bl"]),
        ("rcx", ["rcx", "ecx", "cx", "cl"]),
        ("rdx", ["rdx", "edx", "dx", "dl"]),
        ("rsi", ["rsi", "esi", "si", "sil"]),
        ("rdi", ["rdi", "edi", "di", "dil"]),
        ("rbp", ["rbp", "ebp", "bp", "bpl"]),
        ("rsp", ["rsp", "esp", "sp", "spl"]),
        ("r8", ["r8", "r8d", "r8w", "r8b"]),
        ("r9", ["r9", "r9d", "r9w", "r9b"]),
        ("r10", ["r10", "r10d", "r10w", "r10b"]),
        ("r11", ["r11", "r11d", "r11w", "r11b"]),
        ("r12", ["r12", "r12d", "r12w", "r12b"]),
        ("r13", ["r13", "r13d", "r13w", "r13b"]),
        ("r14", ["r14", "r14d", "r14w", "r14b"]),
        ("r15", ["r15", "r15d", "r15w", "r15b"]),
    ];
    for (full, names) in families {
        for (name, width) in names.iter().zip([8, 4, 2, 1]) {
            assert_eq!(
                loc(Arch::X86_64, &format!("%{name}")),
                r(full, width),
                "%{name}"
            );
        }
    }
}

#[test]
fn x86_high_bytes_vectors_and_unknowns() {
    for (name, full) in [("ah", "rax"), ("bh", "rbx"), ("ch", "rcx"), ("dh", "rdx")] {
        let operand = format!("%{name}");
        let location = loc(Arch::X86_64, &operand);
        let Location::Unsupported(Unsupported::HighByteRegister { register, .. }) = location else {
            panic!("{operand}: {location:?}");
        };
        assert_eq!(
            register,
            Register {
                name: full,
                width: 1,
                offset: 1
            }
        );
        let reason = Unsupported::HighByteRegister {
            operand: &operand,
            register,
        }
        .to_string();
        assert!(reason.contains("high-byte"), "{reason}");
    }
    for operand in [
        "%xmm0", "%xmm15", "%ymm3", "%zmm31", "%st(0)", "%st", "%mm1", "%k1",
    ] {
        assert_eq!(
            loc(Arch::X86_64, operand),
            Location::Unsupported(Unsupported::VectorRegister(operand)),
            "{operand}"
        );
    }
    for operand in ["%foo", "%r16", "%r8l", "%eflags", "%r8x"] {
        assert_eq!(
            loc(Arch::X86_64, operand),
            Location::Unsupported(Unsupported::UnknownRegister {
                operand,
                arch: Arch::X86_64
            }),
            "{operand}"
        );
    }
    assert_eq!(
        loc(Arch::X86_64, "%rip"),
        Location::Unsupported(Unsupported::PcRelative("%rip"))
    );
}

#[test]
fn x86_64_memory() {
    assert_eq!(loc(Arch::X86_64, "-8(%rbp)"), mem("rbp", -8));
    assert_eq!(loc(Arch::X86_64, "(%rdi)"), mem("rdi", 0));
    assert_eq!(loc(Arch::X86_64, "112(%rsp)"), mem("rsp", 112));
    assert_eq!(loc(Arch::X86_64, "0x10(%r12)"), mem("r12", 16));
    assert_eq!(loc(Arch::X86_64, "-0x10(%r12)"), mem("r12", -16));
    assert_eq!(
        loc(Arch::X86_64, "16(%rsp,%rax,8)"),
        indexed(Some("rsp"), "rax", 8, 16)
    );
    assert_eq!(
        loc(Arch::X86_64, "(%rbx,%rcx)"),
        indexed(Some("rbx"), "rcx", 1, 0)
    );
    assert_eq!(
        loc(Arch::X86_64, "(%rbx,%rcx,2)"),
        indexed(Some("rbx"), "rcx", 2, 0)
    );
    assert_eq!(
        loc(Arch::X86_64, "-4(%rbx,%r9,4)"),
        indexed(Some("rbx"), "r9", 4, -4)
    );
    assert_eq!(loc(Arch::X86_64, "(,%rax,4)"), indexed(None, "rax", 4, 0));
    assert_eq!(loc(Arch::X86_64, "8(,%rax,4)"), indexed(None, "rax", 4, 8));
}

#[test]
fn x86_64_memory_refusals() {
    assert_eq!(
        loc(Arch::X86_64, "sym(%rip)"),
        Location::Unsupported(Unsupported::PcRelative("sym(%rip)"))
    );
    assert_eq!(
        loc(Arch::X86_64, "sym+8(%rip)"),
        Location::Unsupported(Unsupported::PcRelative("sym+8(%rip)"))
    );
    assert_eq!(
        loc(Arch::X86_64, "16(%rip)"),
        Location::Unsupported(Unsupported::PcRelative("16(%rip)"))
    );
    assert_eq!(
        loc(Arch::X86_64, "counter(%rbx)"),
        Location::Unsupported(Unsupported::Symbolic("counter(%rbx)"))
    );
    assert_eq!(
        loc(Arch::X86_64, "counter"),
        Location::Unsupported(Unsupported::Symbolic("counter"))
    );
    assert_eq!(
        loc(Arch::X86_64, "$sym"),
        Location::Unsupported(Unsupported::Symbolic("$sym"))
    );
    assert_eq!(
        loc(Arch::X86_64, "%fs:0x28"),
        Location::Unsupported(Unsupported::SegmentOverride("%fs:0x28"))
    );
    for operand in [
        "(%eax)",        // narrow address register
        "(%rax,%rsp)",   // rsp cannot index
        "(%rax,%rbx,3)", // bad scale
        "(%rax,%rbx,8,1)",
        "()",
        "(,)",
        "8(",
        "8)",
        "((%rax))",
        "(%rax",
        "5(%xmm0)",
        "junk(%rax",
        "1-(%rax)",
        "$",
        "$1x",
        "$--1",
        "%",
        "12",
        "!",
        "a:b",
    ] {
        assert!(
            is_unsupported(loc(Arch::X86_64, operand)),
            "{operand}: {:?}",
            loc(Arch::X86_64, operand)
        );
    }
}

#[test]
fn x86_constants() {
    assert_eq!(loc(Arch::X86_64, "$5"), Location::Constant(5));
    assert_eq!(loc(Arch::X86_64, "$-9"), Location::Constant(-9));
    assert_eq!(loc(Arch::X86_64, "$0"), Location::Constant(0));
    assert_eq!(loc(Arch::X86_64, "$0x7f"), Location::Constant(127));
    assert_eq!(
        loc(Arch::X86_64, "$-9223372036854775808"),
        Location::Constant(i64::MIN)
    );
    assert_eq!(
        loc(Arch::X86_64, "$18446744073709551615"),
        Location::Constant(-1)
    );
    assert!(is_unsupported(loc(Arch::X86_64, "$18446744073709551616")));
    assert!(is_unsupported(loc(Arch::X86_64, "$-9223372036854775809")));
}

#[test]
fn i386_registers() {
    assert_eq!(loc(Arch::I386, "%eax"), r("eax", 4));
    assert_eq!(loc(Arch::I386, "%ax"), r("eax", 2));
    assert_eq!(loc(Arch::I386, "%al"), r("eax", 1));
    assert_eq!(loc(Arch::I386, "%esi"), r("esi", 4));
    assert_eq!(loc(Arch::I386, "%si"), r("esi", 2));
    assert_eq!(loc(Arch::I386, "-4(%ebp)"), mem("ebp", -4));
    assert_eq!(
        loc(Arch::I386, "8(%esp,%ecx,4)"),
        indexed(Some("esp"), "ecx", 4, 8)
    );
    assert_eq!(loc(Arch::I386, "$-3"), Location::Constant(-3));
    assert!(matches!(
        loc(Arch::I386, "%ah"),
        Location::Unsupported(Unsupported::HighByteRegister {
            register: Register { name: "eax", .. },
            ..
        })
    ));
    for operand in ["%rax", "%r8", "%sil", "(%rax)"] {
        assert!(is_unsupported(loc(Arch::I386, operand)), "{operand}");
    }
}

#[test]
fn aarch64() {
    for n in 0..=30 {
        let x = format!("x{n}");
        let name = [
            "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
            "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25",
            "x26", "x27", "x28", "x29", "x30",
        ][n];
        assert_eq!(loc(Arch::Aarch64, &x), r(name, 8));
        assert_eq!(loc(Arch::Aarch64, &format!("w{n}")), r(name, 4));
    }
    assert_eq!(loc(Arch::Aarch64, "sp"), r("sp", 8));
    assert_eq!(loc(Arch::Aarch64, "[x0]"), mem("x0", 0));
    assert_eq!(loc(Arch::Aarch64, "[sp, 16]"), mem("sp", 16));
    assert_eq!(loc(Arch::Aarch64, "[sp,#16]"), mem("sp", 16));
    assert_eq!(loc(Arch::Aarch64, "[x1, -8]"), mem("x1", -8));
    assert_eq!(loc(Arch::Aarch64, "[x29, #-0x10]"), mem("x29", -16));
    assert_eq!(loc(Arch::Aarch64, "5"), Location::Constant(5));
    assert_eq!(loc(Arch::Aarch64, "-5"), Location::Constant(-5));
    assert_eq!(loc(Arch::Aarch64, "#7"), Location::Constant(7));
    assert_eq!(loc(Arch::Aarch64, "xzr"), Location::Constant(0));
    for operand in ["d0", "v1", "s31", "q2", "b0"] {
        assert_eq!(
            loc(Arch::Aarch64, operand),
            Location::Unsupported(Unsupported::VectorRegister(operand))
        );
    }
    for operand in [
        "x31", "w31", "x01", "[w0]", "[x0, x1]", "[x0", "[x0, ]", "[]", "x", "%x0", "foo",
        "[x0, 8]!",
    ] {
        assert!(is_unsupported(loc(Arch::Aarch64, operand)), "{operand}");
    }
}

#[test]
fn riscv64() {
    assert_eq!(loc(Arch::Riscv64, "a0"), r("a0", 8));
    assert_eq!(loc(Arch::Riscv64, "x10"), r("a0", 8));
    assert_eq!(loc(Arch::Riscv64, "s0"), r("s0", 8));
    assert_eq!(loc(Arch::Riscv64, "fp"), r("s0", 8));
    assert_eq!(loc(Arch::Riscv64, "x8"), r("s0", 8));
    assert_eq!(loc(Arch::Riscv64, "sp"), r("sp", 8));
    assert_eq!(loc(Arch::Riscv64, "ra"), r("ra", 8));
    assert_eq!(loc(Arch::Riscv64, "t6"), r("t6", 8));
    assert_eq!(loc(Arch::Riscv64, "x31"), r("t6", 8));
    assert_eq!(loc(Arch::Riscv64, "s11"), r("s11", 8));
    assert_eq!(loc(Arch::Riscv64, "zero"), Location::Constant(0));
    assert_eq!(loc(Arch::Riscv64, "8(sp)"), mem("sp", 8));
    assert_eq!(loc(Arch::Riscv64, "-8(s0)"), mem("s0", -8));
    assert_eq!(loc(Arch::Riscv64, "(a1)"), mem("a1", 0));
    assert_eq!(loc(Arch::Riscv64, "-24(x8)"), mem("s0", -24));
    assert_eq!(loc(Arch::Riscv64, "5"), Location::Constant(5));
    assert_eq!(loc(Arch::Riscv64, "-5"), Location::Constant(-5));
    for operand in ["fa0", "ft1", "fs2", "f31"] {
        assert_eq!(
            loc(Arch::Riscv64, operand),
            Location::Unsupported(Unsupported::VectorRegister(operand))
        );
    }
    for operand in ["x32", "a8", "8(zero)", "8(fa0)", "8(", "foo", "%a0"] {
        assert!(is_unsupported(loc(Arch::Riscv64, operand)), "{operand}");
    }
}

#[test]
fn s390x() {
    assert_eq!(loc(Arch::S390x, "%r2"), r("r2", 8));
    assert_eq!(loc(Arch::S390x, "%r15"), r("r15", 8));
    assert_eq!(loc(Arch::S390x, "160(%r15)"), mem("r15", 160));
    assert_eq!(loc(Arch::S390x, "(%r2)"), mem("r2", 0));
    assert_eq!(
        loc(Arch::S390x, "8(%r1,%r2)"),
        indexed(Some("r2"), "r1", 1, 8)
    );
    assert_eq!(loc(Arch::S390x, "8(%r0,%r2)"), mem("r2", 8));
    assert_eq!(loc(Arch::S390x, "8(%r2,%r0)"), mem("r2", 8));
    assert_eq!(loc(Arch::S390x, "8(,%r2)"), mem("r2", 8));
    assert_eq!(loc(Arch::S390x, "5"), Location::Constant(5));
    assert_eq!(loc(Arch::S390x, "-5"), Location::Constant(-5));
    assert_eq!(
        loc(Arch::S390x, "%f0"),
        Location::Unsupported(Unsupported::VectorRegister("%f0"))
    );
    for operand in ["%r16", "%x", "8(%r0)", "8(%r1,%r2,%r3)", "r2", "8(r2)"] {
        assert!(is_unsupported(loc(Arch::S390x, operand)), "{operand}");
    }
}

#[test]
fn ppc64() {
    for arch in [Arch::Ppc64, Arch::Ppc64le] {
        assert_eq!(loc(arch, "%r3"), r("r3", 8));
        assert_eq!(loc(arch, "3"), r("r3", 8));
        assert_eq!(loc(arch, "31"), r("r31", 8));
        assert_eq!(loc(arch, "8(%r1)"), mem("r1", 8));
        assert_eq!(loc(arch, "8(1)"), mem("r1", 8));
        assert_eq!(loc(arch, "-16(31)"), mem("r31", -16));
        assert_eq!(loc(arch, "i5"), Location::Constant(5));
        assert_eq!(loc(arch, "i-5"), Location::Constant(-5));
        assert_eq!(loc(arch, "9,10"), indexed(Some("r9"), "r10", 1, 0));
        assert_eq!(loc(arch, "0,10"), mem("r10", 0));
        assert_eq!(
            loc(arch, "%f1"),
            Location::Unsupported(Unsupported::VectorRegister("%f1"))
        );
        for operand in [
            "32",
            "-5",
            "8(0)",
            "i",
            "ix",
            "8(%r32)",
            "%r",
            "foo",
            "1,",
            "sym@toc(2)",
        ] {
            assert!(is_unsupported(loc(arch, operand)), "{operand}");
        }
    }
}

#[test]
fn unknown_arch_keeps_size_and_says_why() {
    let arg = Arg::parse(Arch::Other(8), "-4@$1");
    assert_eq!((arg.size, arg.signed), (Some(4), true));
    assert_eq!(
        arg.location,
        Location::Unsupported(Unsupported::Arch(Arch::Other(8)))
    );
    assert_eq!(
        Unsupported::Arch(Arch::Other(8)).to_string(),
        "argument operands of e_machine 8 files are not decoded"
    );
}

#[test]
fn reasons_are_readable() {
    let reason = |operand| match loc(Arch::X86_64, operand) {
        Location::Unsupported(why) => why.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(reason("%xmm0").contains("vector register"));
    assert!(reason("sym(%rip)").contains("instruction pointer"));
    assert!(reason("%fs:8").contains("thread-local"));
    assert_eq!(reason("%bogus"), "`%bogus` is not a x86-64 register");
}

#[test]
fn never_panics_on_odd_input() {
    let odd = [
        "",
        "@",
        "@@",
        "8@@",
        "8@(",
        "8@)",
        "8@[",
        "8@]",
        "8@%",
        "8@$",
        "8@é",
        "8@%é",
        "é@x",
        "8@(%rax,,)",
        "8@[x0,,]",
        "8@9999999999999999999999(%rax)",
        "8@0x(%rax)",
        "8@-(%rax)",
        "8@(é)",
    ];
    for arch in [
        Arch::X86_64,
        Arch::I386,
        Arch::Aarch64,
        Arch::Riscv64,
        Arch::S390x,
        Arch::Ppc64,
        Arch::Other(0),
    ] {
        for spec in odd {
            let _ = Arg::parse(arch, spec);
            let _ = args(arch, spec).count();
        }
    }
}

#[test]
fn x86_64_pc_relative_symbols() {
    let symbol = |operand| match loc(Arch::X86_64, operand) {
        Location::Unsupported(why) => why.pc_relative_symbol(),
        other => panic!("{operand}: {other:?}"),
    };
    assert_eq!(symbol("g_tgt_state(%rip)"), Some(("g_tgt_state", 0)));
    assert_eq!(symbol("cores+8(%rip)"), Some(("cores", 8)));
    assert_eq!(symbol("cores-0x10(%rip)"), Some(("cores", -16)));
    assert_eq!(symbol("table.0(%rip)"), Some(("table.0", 0)));
    // Not a symbol's value: a displacement from the next instruction, a
    // GOT entry, the register itself, a symbol off another register.
    assert_eq!(symbol("16(%rip)"), None);
    assert_eq!(symbol("state@GOTPCREL(%rip)"), None);
    assert_eq!(symbol("%rip"), None);
    assert_eq!(symbol("counter(%rbx)"), None);
}
