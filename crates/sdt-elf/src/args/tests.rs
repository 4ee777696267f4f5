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
        loc(Arch::X86_64, "16(%rip)"),
        Location::Unsupported(Unsupported::PcRelative("16(%rip)"))
    );
    assert_eq!(
        loc(Arch::X86_64, "(%rip)"),
        Location::Unsupported(Unsupported::PcRelative("(%rip)"))
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
    assert!(reason("16(%rip)").contains("instruction pointer"));
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
        "8@a@",
        "8@@GOTPCREL(%rip)",
        "8@+",
        "8@-",
        "8@a+",
        "8@é+a(%rip)",
        "8@a+é(%rip)",
        "8@+-+(%rip)",
        "8@0x+a(%rip)",
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

fn symbol(
    symbol: &'static str,
    offset: i64,
    base: Option<&'static str>,
    index: Option<&'static str>,
    scale: u8,
) -> Location<'static> {
    Location::Symbol(SymbolMemory {
        symbol,
        offset,
        base,
        index,
        scale,
    })
}

fn global(name: &'static str, offset: i64) -> Location<'static> {
    symbol(name, offset, None, None, 1)
}

#[test]
fn x86_64_symbols_relative_to_the_instruction_pointer() {
    // What gcc 12 writes for globals, statics, static locals, struct
    // fields and array elements: the offset after the symbol without
    // -fPIE, before it with -fPIE or -fPIC.
    for (operand, want) in [
        ("g_tgt_state(%rip)", global("g_tgt_state", 0)),
        ("8+g_nvme_ctrlr(%rip)", global("g_nvme_ctrlr", 8)),
        ("g_nvme_ctrlr+8(%rip)", global("g_nvme_ctrlr", 8)),
        ("399996+big(%rip)", global("big", 399996)),
        ("slocal.1(%rip)", global("slocal.1", 0)),
        ("8+slocal_s.0(%rip)", global("slocal_s.0", 8)),
        ("counter.lto_priv.0(%rip)", global("counter.lto_priv.0", 0)),
        ("lbuf.lto_priv.1+16(%rip)", global("lbuf.lto_priv.1", 16)),
        (
            "_ZN4core3fmt5write17h0123456789abcdefE(%rip)",
            global("_ZN4core3fmt5write17h0123456789abcdefE", 0),
        ),
        // Spellings gcc does not use but the assembler accepts.
        ("cores-0x10(%rip)", global("cores", -16)),
        ("-8+cores(%rip)", global("cores", -8)),
        ("+8+cores(%rip)", global("cores", 8)),
        ("0x10+cores+4-2(%rip)", global("cores", 18)),
        ("4+cores-0x4(%rip)", global("cores", 0)),
        ("cores(%eip)", global("cores", 0)),
        (
            "cores+9223372036854775807+1(%rip)",
            global("cores", i64::MIN),
        ),
    ] {
        assert_eq!(loc(Arch::X86_64, operand), want, "{operand}");
    }
    // SPDK's bdev_nvme_ctrlr_release, as the note has it.
    let specs: Vec<Arg<'_>> = args(Arch::X86_64, "-4@8+g_nvme_ctrlr(%rip) 8@%rax").collect();
    assert_eq!(specs.len(), 2);
    assert_eq!(
        (specs[0].size, specs[0].signed, specs[0].location),
        (Some(4), true, global("g_nvme_ctrlr", 8))
    );
    assert_eq!(specs[1].location, r("rax", 8));
}

#[test]
fn x86_symbols_with_registers_or_none() {
    // Without -fPIE: an array element by an index register, the memory at
    // an absolute symbol, a symbol off a base register.
    assert_eq!(
        loc(Arch::X86_64, "garr(,%rcx,4)"),
        symbol("garr", 0, None, Some("rcx"), 4)
    );
    assert_eq!(
        loc(Arch::X86_64, "garr2+12(,%rdi,4)"),
        symbol("garr2", 12, None, Some("rdi"), 4)
    );
    assert_eq!(
        loc(Arch::X86_64, "counter(%rbx)"),
        symbol("counter", 0, Some("rbx"), None, 1)
    );
    assert_eq!(
        loc(Arch::X86_64, ".LC0(%rdx)"),
        symbol(".LC0", 0, Some("rdx"), None, 1)
    );
    assert_eq!(
        loc(Arch::X86_64, "8+tab(%rbx,%rcx,8)"),
        symbol("tab", 8, Some("rbx"), Some("rcx"), 8)
    );
    assert_eq!(loc(Arch::X86_64, "counter"), global("counter", 0));
    assert_eq!(loc(Arch::X86_64, "counter+4"), global("counter", 4));
    assert_eq!(loc(Arch::I386, "counter+4"), global("counter", 4));
    assert_eq!(
        loc(Arch::I386, "table(,%eax,4)"),
        symbol("table", 0, None, Some("eax"), 4)
    );
}

#[test]
fn x86_symbols_that_cannot_be_read() {
    let relocation =
        |operand, operator| Location::Unsupported(Unsupported::Relocation { operand, operator });
    // -fPIC: a function's or an exported variable's address from the GOT.
    assert_eq!(
        loc(Arch::X86_64, "f@GOTPCREL(%rip)"),
        relocation("f@GOTPCREL(%rip)", "GOTPCREL")
    );
    assert_eq!(
        loc(Arch::X86_64, "tl@GOTTPOFF(%rip)"),
        relocation("tl@GOTTPOFF(%rip)", "GOTTPOFF")
    );
    assert_eq!(
        loc(Arch::I386, "x@GOTOFF(%ebx)"),
        relocation("x@GOTOFF(%ebx)", "GOTOFF")
    );
    assert_eq!(loc(Arch::I386, "x@GOT+4"), relocation("x@GOT+4", "GOT"));
    // -fPIE: thread-local storage.
    assert_eq!(
        loc(Arch::X86_64, "%fs:tl@tpoff"),
        Location::Unsupported(Unsupported::SegmentOverride("%fs:tl@tpoff"))
    );
    assert_eq!(
        loc(Arch::X86_64, "tl@tpoff"),
        relocation("tl@tpoff", "tpoff")
    );
    for operand in [
        "a+b(%rip)",
        "8-a(%rip)",
        "-a(%rip)",
        "a-b",
        "$sym",
        "$sym+8",
    ] {
        assert_eq!(
            loc(Arch::X86_64, operand),
            Location::Unsupported(Unsupported::Symbolic(operand)),
            "{operand}"
        );
    }
    for operand in [
        "a++8(%rip)",
        "a+(%rip)",
        "+(%rip)",
        "8+(%rip)",
        "a@(%rip)",
        "a@GOT@GOT(%rip)",
        "a@-(%rip)",
        "a+8(%rip,%rax,2)",
        "(%rax,%rip)",
        "a(%rip",
        "9a(%rip)",
        "a+0xg(%rip)",
        "a+99999999999999999999(%rip)",
        "a-18446744073709551617(%rip)",
        "a b(%rip)",
        "é(%rip)",
    ] {
        let location = loc(Arch::X86_64, operand);
        assert!(
            matches!(location, Location::Unsupported(Unsupported::Malformed(_))),
            "{operand}: {location:?}"
        );
    }
}

#[test]
fn unreadable_symbols_say_why() {
    let why = |operand| match loc(Arch::X86_64, operand) {
        Location::Unsupported(why) => why.to_string(),
        other => panic!("{operand}: {other:?}"),
    };
    assert!(why("f@GOTPCREL(%rip)").contains("global offset table"));
    assert!(why("tl@GOTTPOFF(%rip)").contains("thread-local"));
    assert!(why("tl@tpoff").contains("thread-local"));
    assert!(why("%fs:tl@tpoff").contains("thread-local"));
    assert!(why("x@PLT").contains("`@PLT`"));
    assert!(why("16(%rip)").contains("names no symbol"));
    assert!(why("%rip").contains("instruction pointer itself"));
    assert!(why("a+b(%rip)").contains("symbol plus a constant"));
}

#[test]
fn symbol_memory_in_words() {
    let shown = |operand| match loc(Arch::X86_64, operand) {
        Location::Symbol(m) => m.to_string(),
        other => panic!("{operand}: {other:?}"),
    };
    assert_eq!(shown("gl(%rip)"), "gl");
    assert_eq!(shown("8+gs(%rip)"), "gs+8");
    assert_eq!(shown("gs-8(%rip)"), "gs-8");
    assert_eq!(
        shown("gs-9223372036854775808(%rip)"),
        "gs-9223372036854775808"
    );
    assert_eq!(shown("garr2+12(,%rdi,4)"), "garr2+12 + rdi*4");
    assert_eq!(shown("tab(%rbx,%rcx,8)"), "tab + rbx + rcx*8");
}
