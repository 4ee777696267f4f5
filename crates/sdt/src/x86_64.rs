//! The probe site, its note and its semaphore, in x86-64 assembly.
//!
//! Everything a probe emits is written by one `asm!` block at the site, so
//! the note's addresses are the site's own and no build script or linker
//! script is needed. Symbols shared by many sites (`_.stapsdt.base` and the
//! semaphores) are defined by every block that uses them, guarded by
//! `.ifndef` within an object file and by COMDAT groups across object files.

/// The assembler name of the semaphore of `provider:name`. The dots cannot
/// occur in Rust identifiers, so distinct probes never share a name.
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_semaphore_symbol {
    ($p:ident, $n:ident) => {
        concat!("__sdt_sema.", stringify!($p), ".", stringify!($n))
    };
}

/// Defines the semaphore of `provider:name` unless this object file already
/// has: two bytes in `.probes`, hidden (one per executable or shared
/// library, as tracers expect), in a COMDAT group so that the linker keeps
/// one copy for all crates.
///
/// Each semaphore's section also refers to `_.sdt.probes.page`, an empty
/// piece of `.probes` aligned to a page, so that wherever a semaphore is
/// kept the output section `.probes` starts on a page of its own. Without
/// that, the linker may put the semaphores on the file page that also ends
/// the RELRO segment (lld does, when `.data` is small). The kernel raises a
/// semaphore by its file offset in the first writable mapping of that
/// offset, and at `exec` that is the RELRO mapping, which the loader then
/// zeroes and write-protects: a process started after the tracer attached
/// (`sdt trace -c`, system-wide tracing) would never see its semaphore
/// raised.
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __sdt_semaphore_definition {
    ($p:ident, $n:ident) => {
        concat!(
            ".ifndef _.sdt.probes.page\n",
            ".pushsection .probes, \"awG\", @progbits, _.sdt.probes.page, comdat\n",
            ".weak _.sdt.probes.page\n",
            ".hidden _.sdt.probes.page\n",
            ".balign 4096\n",
            "_.sdt.probes.page:\n",
            ".popsection\n",
            ".endif\n",
            ".ifndef ", $crate::__sdt_semaphore_symbol!($p, $n), "\n",
            ".pushsection .probes, \"awG\", @progbits, ", $crate::__sdt_semaphore_symbol!($p, $n), ", comdat\n",
            // Keeps the page-aligned piece wherever the semaphore is kept.
            ".reloc ., R_X86_64_NONE, _.sdt.probes.page\n",
            ".weak ", $crate::__sdt_semaphore_symbol!($p, $n), "\n",
            ".hidden ", $crate::__sdt_semaphore_symbol!($p, $n), "\n",
            ".type ", $crate::__sdt_semaphore_symbol!($p, $n), ", @object\n",
            ".size ", $crate::__sdt_semaphore_symbol!($p, $n), ", 2\n",
            ".balign 2\n",
            $crate::__sdt_semaphore_symbol!($p, $n), ":\n",
            ".2byte 0\n",
            ".popsection\n",
            ".endif",
        )
    };
}

/// Defines `_.stapsdt.base` unless this object file already has, exactly as
/// `<sys/sdt.h>` does, so C and Rust objects linked together share it.
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_base_definition {
    () => {
        concat!(
            ".ifndef _.stapsdt.base\n",
            ".pushsection .stapsdt.base, \"aG\", @progbits, .stapsdt.base, comdat\n",
            ".weak _.stapsdt.base\n",
            ".hidden _.stapsdt.base\n",
            "_.stapsdt.base:\n",
            ".space 1\n",
            ".size _.stapsdt.base, 1\n",
            ".popsection\n",
            ".endif",
        )
    };
}

/// The assembler name of the fast path's cache of `provider:name`'s slot,
/// and of its anchor.
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_fast_symbol {
    (cache, $p:ident, $n:ident) => {
        concat!("__sdt_fast.", stringify!($p), ".", stringify!($n))
    };
    (anchor, $p:ident, $n:ident) => {
        concat!("__sdt_anchor.", stringify!($p), ".", stringify!($n))
    };
}

/// With the `fastpath` feature: defines, once per object file and in COMDAT
/// groups across them, the 8 bytes that cache the probe's slot, its anchor
/// (a one-byte `nop` in a function nothing calls) and the note that tells
/// `sdt` where the anchor and the semaphore are (owner `sdt`, type 1:
/// anchor, semaphore, `_.stapsdt.base`, and the `{capture}` operand: bit N
/// set when the fast path copies the bytes `argN` points to). The cache keeps the anchor alive
/// under `--gc-sections`; see the `fastpath` module for why.
#[cfg(feature = "fastpath")]
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __sdt_fast_definition {
    ($p:ident, $n:ident) => {
        concat!(
            ".ifndef ", $crate::__sdt_fast_symbol!(cache, $p, $n), "\n",
            ".pushsection .data.sdt.fast, \"awG\", @progbits, ", $crate::__sdt_fast_symbol!(cache, $p, $n), ", comdat\n",
            ".reloc ., R_X86_64_NONE, ", $crate::__sdt_fast_symbol!(anchor, $p, $n), "\n",
            ".weak ", $crate::__sdt_fast_symbol!(cache, $p, $n), "\n",
            ".hidden ", $crate::__sdt_fast_symbol!(cache, $p, $n), "\n",
            ".type ", $crate::__sdt_fast_symbol!(cache, $p, $n), ", @object\n",
            ".size ", $crate::__sdt_fast_symbol!(cache, $p, $n), ", 8\n",
            ".balign 8\n",
            $crate::__sdt_fast_symbol!(cache, $p, $n), ":\n",
            ".8byte 0\n",
            ".popsection\n",
            ".pushsection .text.sdt.anchor, \"axG\", @progbits, ", $crate::__sdt_fast_symbol!(anchor, $p, $n), ", comdat\n",
            ".weak ", $crate::__sdt_fast_symbol!(anchor, $p, $n), "\n",
            ".hidden ", $crate::__sdt_fast_symbol!(anchor, $p, $n), "\n",
            ".type ", $crate::__sdt_fast_symbol!(anchor, $p, $n), ", @function\n",
            $crate::__sdt_fast_symbol!(anchor, $p, $n), ":\n",
            ".byte 0x90\n",
            ".size ", $crate::__sdt_fast_symbol!(anchor, $p, $n), ", 1\n",
            ".popsection\n",
            ".pushsection .note.sdt.fast, \"G\", @note, ", $crate::__sdt_fast_symbol!(anchor, $p, $n), ", comdat\n",
            ".balign 4\n",
            ".4byte 4, 32, 1\n",
            ".asciz \"sdt\"\n",
            ".8byte ", $crate::__sdt_fast_symbol!(anchor, $p, $n), ", ",
            $crate::__sdt_semaphore_symbol!($p, $n), ", _.stapsdt.base, {capture}\n",
            ".popsection\n",
            ".endif",
        )
    };
}

/// The address of `provider:name`'s semaphore and its fast path's cache.
#[cfg(feature = "fastpath")]
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_fast_probe {
    ($p:ident, $n:ident, $capture:expr) => {{
        let semaphore: usize;
        let cache: usize;
        // SAFETY: the block computes two addresses of this object file's
        // own symbols, which it defines if the file has not yet.
        unsafe {
            ::core::arch::asm!(
                $crate::__sdt_base_definition!(),
                $crate::__sdt_semaphore_definition!($p, $n),
                $crate::__sdt_fast_definition!($p, $n),
                concat!("lea ", $crate::__sdt_semaphore_symbol!($p, $n), "(%rip), {semaphore}"),
                concat!("lea ", $crate::__sdt_fast_symbol!(cache, $p, $n), "(%rip), {cache}"),
                semaphore = out(reg) semaphore,
                cache = out(reg) cache,
                capture = const $capture,
                options(att_syntax, nostack, preserves_flags, pure, nomem),
            );
        }
        let cache = cache as *const ::core::sync::atomic::AtomicU64;
        // SAFETY: `cache` is 8 bytes of `.data`, aligned to 8, that only the
        // fast path uses, and only as an atomic.
        (semaphore, unsafe { &*cache })
    }};
}

/// Without the fast path, nothing to name.
#[cfg(not(feature = "fastpath"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_fast_probe {
    ($p:ident, $n:ident, $capture:expr) => {
        (0usize, &$crate::__private::NO_CACHE)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_enabled {
    ($p:ident, $n:ident) => {{
        let count: u32;
        // SAFETY: the block reads the probe's own semaphore, which it defines
        // if this object file has not yet, and writes only `count`.
        unsafe {
            ::core::arch::asm!(
                $crate::__sdt_semaphore_definition!($p, $n),
                concat!("movzwl ", $crate::__sdt_semaphore_symbol!($p, $n), "(%rip), {count:e}"),
                count = out(reg) count,
                // Not `pure`: the kernel changes the semaphore behind the
                // compiler's back, so every test must really load it.
                options(att_syntax, nostack, preserves_flags, readonly),
            );
        }
        count != 0
    }};
}

/// The argument specs of a site, separated by spaces: `{sN}` is the
/// argument's `Argument::SPEC`, `{aN}` its register.
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_arg_specs {
    () => { "" };
    ($a:ident $s:ident $($ra:ident $rs:ident)*) => {
        concat!(
            $crate::__sdt_arg_spec!($a $s),
            $("\n.ascii \" \"\n", $crate::__sdt_arg_spec!($ra $rs),)*
        )
    };
}

/// One argument's spec, chosen by the assembler from the `const` operand
/// `{s}`: `-4@%eax` names the sub-register of the type's width; a
/// pointer/length record in `%rdx` is `8@(%rdx) 8@8(%rdx)`.
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __sdt_arg_spec {
    ($a:ident $s:ident) => {
        concat!(
            ".if {", stringify!($s), "} == 0\n",
            ".ascii \"8@({", stringify!($a), "}) 8@8({", stringify!($a), "})\"\n",
            ".else\n",
            ".ascii \"{", stringify!($s), "}@\"\n",
            ".if {", stringify!($s), "} == 1 || {", stringify!($s), "} == -1\n",
            ".ascii \"{", stringify!($a), ":l}\"\n",
            ".elseif {", stringify!($s), "} == 2 || {", stringify!($s), "} == -2\n",
            ".ascii \"{", stringify!($a), ":x}\"\n",
            ".elseif {", stringify!($s), "} == 4 || {", stringify!($s), "} == -4\n",
            ".ascii \"{", stringify!($a), ":e}\"\n",
            ".else\n",
            ".ascii \"{", stringify!($a), ":r}\"\n",
            ".endif\n",
            ".endif",
        )
    };
}

/// The probe site: a 5-byte no-op and the note that describes it.
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_emit {
    (($p:ident, $n:ident) $(($arg:expr) $a:ident $t:ident $s:ident)*) => {{
        #[inline(always)]
        fn site<$($t: $crate::Argument),*>($($a: $t),*) {
            const {
                assert!(
                    0 $(+ $crate::__private::slots::<$t>())* <= 12,
                    "a probe takes at most 12 argument slots (`&str` and `&[u8]` take two)",
                )
            };
            $(let $a = $crate::Argument::into_slot($a);)*
            {
                let (semaphore, cache) = $crate::__sdt_fast_probe!(
                    $p,
                    $n,
                    $crate::__private::capture_mask(&[$((
                        $crate::__private::slots::<$t>(),
                        <$t as $crate::Argument>::CAPTURED,
                    )),*])
                );
                let mut fast = $crate::__private::FastArgs::new();
                $(<$t as $crate::Argument>::fast(&$a, &mut fast);)*
                $crate::__private::fast_hit(semaphore, cache, &fast);
            }
            // SAFETY: the block executes one no-op instruction. A tracer may
            // replace it with a breakpoint or a call to a trampoline; both
            // preserve every register, and the call's push below the stack
            // pointer is allowed because the block is not `nostack`. The
            // pointer/length records that the registers point at live until
            // the end of this function.
            unsafe {
                ::core::arch::asm!(
                    // Keeps `.stapsdt.base` alive under `--gc-sections`.
                    ".reloc ., R_X86_64_NONE, _.stapsdt.base",
                    "990: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
                    // `?`: in the site's COMDAT group, if it has one, so the
                    // note goes when the linker drops a duplicate function.
                    ".pushsection .note.stapsdt, \"?\", @note",
                    ".balign 4",
                    ".4byte 992f - 991f, 994f - 993f, 3",
                    "991: .asciz \"stapsdt\"",
                    "992: .balign 4",
                    concat!(
                        "993: .8byte 990b, _.stapsdt.base, ",
                        $crate::__sdt_semaphore_symbol!($p, $n),
                    ),
                    concat!(".asciz \"", stringify!($p), "\""),
                    concat!(".asciz \"", stringify!($n), "\""),
                    $crate::__sdt_arg_specs!($($a $s)*),
                    ".byte 0",
                    "994: .balign 4",
                    ".popsection",
                    // Keeps the site's function alive under `--gc-sections`
                    // (see the crate docs): `R` for bfd and lld, the name
                    // for gold, `?` to go with a discarded COMDAT copy.
                    ".pushsection .note.sdt.keep, \"aR?\", @progbits",
                    ".reloc ., R_X86_64_NONE, 990b",
                    ".byte 0",
                    ".popsection",
                    $crate::__sdt_base_definition!(),
                    $crate::__sdt_semaphore_definition!($p, $n),
                    $(
                        $a = in(reg) $crate::__private::Slot::register(&$a),
                        $s = const <$t as $crate::Argument>::SPEC,
                    )*
                    // Deliberately not `nostack`: see the crate docs.
                    options(att_syntax),
                );
            }
        }
        site($($arg),*)
    }};
}
