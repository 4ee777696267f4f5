//! Statically defined tracing (USDT) probes for Rust programs.
//!
//! A probe is a named point in a program that a tracer can attach to while
//! the program runs. Untraced, a probe costs one load and one branch that is
//! never taken; its arguments are not even computed. Traced, it hands typed
//! arguments to bpftrace, perf, gdb, SystemTap, libbpf tools or `sdt`.
//!
//! ```
//! sdt::provider! {
//!     /// Probes of the order pipeline.
//!     mod shop {
//!         /// An order was accepted: its id, the amount in cents, the item.
//!         fn order_placed(id: u64, cents: i64, item: &str);
//!         /// An order could not be charged.
//!         fn payment_failed(id: u64, code: i32);
//!     }
//! }
//!
//! fn place(id: u64, cents: i64, item: &String) {
//!     // Typed: arguments are checked against the declaration and converted
//!     // (here `&String` to `&str`), and computed only while traced.
//!     shop::order_placed!(id, cents, item);
//!
//!     // Untyped: any provider and name, each argument's type picks its spec.
//!     sdt::probe!(shop, order_checked, id, item.len());
//!
//!     // Do expensive work for a probe only while someone is tracing it.
//!     if sdt::enabled!(shop, payment_failed) {
//!         let code = i32::try_from(id % 7).unwrap_or(-1);
//!         shop::payment_failed!(id, -code);
//!     }
//! }
//! # place(1, 2, &String::from("tea"));
//! ```
//!
//! # Finding and tracing probes
//!
//! ```text
//! $ sdt list ./target/release/myprog
//! ./target/release/myprog shop:order_placed
//! $ sdt trace -c ./target/release/myprog -s 2:3 shop:order_placed
//! 0.000977353 25796 25796 myprog shop:order_placed arg0=7 arg1=250 arg2="tea" arg3=3
//! $ bpftrace -p "$(pidof myprog)" -e 'usdt:./target/release/myprog:shop:order_placed
//!       { printf("%d %d %s\n", arg0, arg1, str(arg2, arg3 + 1)); }'
//! ```
//!
//! `readelf -n`, `gdb` (`info probes`, `break -probe-stap shop:order_placed`)
//! and `perf` (`perf buildid-cache --add`, then `perf list sdt`) see the
//! probes too.
//!
//! Every probe has a semaphore, so a tracer must enable the probe for its
//! events to happen. `sdt` does that through the kernel (`ref_ctr_offset`)
//! for every process that maps the file, from its first instruction on, and
//! so do libbpf and gdb. bpftrace 0.17 does it only for the process given
//! with `-p PID`; perf 6.1 does not do it.
//!
//! # Arguments
//!
//! Up to twelve argument slots, each described by a spec derived from the
//! argument's type through the sealed [`Argument`] trait:
//!
//! * Integers, `bool` and `char` keep their size and signedness: an `i32`
//!   that is `-7` is `-4@%eax` in the note and reads back as `-7`.
//! * Raw pointers, `NonNull` and references pass their address; a `&CStr`
//!   is read with `str(argN)`.
//! * `&str` and `&[u8]` take **two slots, pointer then length**: for a
//!   `&str` in slots 2 and 3, `str(arg2, arg3 + 1)` reads the text (the
//!   length `str()` takes counts a NUL, in bpftrace 0.23 and later and in
//!   sdt; bpftrace 0.22 and earlier read it with `str(arg2, arg3)`), and
//!   `sdt trace -s 2:3` prints it. Count them when numbering the
//!   arguments that follow.
//! * Floats are refused at compile time: pass `x.to_bits()` or an integer in
//!   fixed-point units.
//!
//! # What the probe is, and why
//!
//! Each probe site is the 5-byte no-op `0f 1f 44 00 00`, described by an ELF
//! note of the layout `<sys/sdt.h>` writes, so that every existing reader
//! finds it:
//!
//! * `.note.stapsdt` holds one note per site: owner `stapsdt`, type 3, then
//!   the site's address, the address of `.stapsdt.base`, the address of the
//!   semaphore, and the strings provider, name and argument specs. The
//!   note's address is the first byte of the 5-byte no-op.
//! * `.stapsdt.base` is the one-byte section readers use to correct the
//!   addresses of a prelinked file. It is shared with C objects built with
//!   `<sys/sdt.h>` (same symbol, same COMDAT group). Notes are not allocated
//!   sections, and linkers do not follow their relocations when they collect
//!   unused sections, so every site also holds an `R_X86_64_NONE` relocation
//!   to `.stapsdt.base`: the section lives as long as one probe does, under
//!   `--gc-sections`, fat or thin LTO, and with bfd, gold or lld.
//! * `.note.sdt.keep` holds one byte per site and a relocation to it. The
//!   section is retained (`SHF_GNU_RETAIN`, and gold keeps `.note*`), so a
//!   function that holds a probe is kept even when nothing calls it. Without
//!   it, `--gc-sections` would drop such a function from a library crate
//!   and leave its note pointing at address 0 (lld) or fail the link
//!   (gold).
//! * `.probes` holds the semaphores: one 16-bit counter per provider and
//!   name in each linked object (executable or shared library), shared by all
//!   of that probe's sites in every crate. It is a hidden symbol defined in
//!   a COMDAT group named after it, so the linker keeps exactly one. A tracer
//!   raises it while attached; the probe computes its arguments and reaches
//!   its site only while it is non-zero.
//!
//! Why a 5-byte no-op: Linux 6.18 and later rewrite a traced 5-byte no-op,
//! after its first hit, into a call to a trampoline that enters the uprobe
//! machinery through a system call instead of a breakpoint trap, which the
//! kernel's authors measured at about half the cost of a trap. The note
//! points at the 5-byte no-op itself, not at a 1-byte `nop` in front of it
//! (the `nop; nop5` layout of libbpf's `usdt.h`), so every tool that
//! attaches at the note's address — bpftrace, perf, gdb, `sdt` — gets the
//! fast path. libbpf attaches at the note's address too: it moves one byte
//! forward only when it finds a `nop` followed by a 5-byte no-op. Older
//! kernels trap on the first byte exactly as they do on a 1-byte `nop`.
//! Whether the call is cheaper than the trap depends on the machine: on
//! the virtual machine this crate was developed on, `bench/probe.sh`
//! measured it 10–15% dearer in CPU time (about 525 ns against 460 ns a
//! hit, for hand-written C sites too), so measure where it matters.
//!
//! Why that is safe: the call pushes a return address below the stack
//! pointer, into the x86-64 red zone where a leaf function may keep live
//! data. The probe's `asm!` block is deliberately *not* `options(nostack)`,
//! and without that option Rust guarantees the block may push to the stack,
//! so the compiler keeps nothing live below the stack pointer across a
//! probe site. The crate's tests trace a leaf function that keeps locals in
//! memory around a probe, many times, on the fast path, and compare its
//! results with untraced ones; the same test shows that a hand-written site
//! that stores into the red zone is corrupted. Adding `nostack` to the
//! probe's `asm!` makes the compiler put that function's locals in the red
//! zone, and the traced test then fails.
//!
//! Tool limits worth knowing: bpftrace 0.17 reads only `arg0` to `arg5`,
//! and raises one semaphore per probe name (which is why this crate shares
//! one semaphore among all sites of a probe).
//!
//! On targets other than x86-64 Linux the macros compile, type-check their
//! arguments, and do nothing: no probe is emitted and no argument is
//! computed.
//!
//! # Provider files and probes defined at run time
//!
//! * [`include_provider!`] declares the probes of a DTrace provider file
//!   (`.d`), shared with C code that fires them through `dtrace -h`'s
//!   header; the `sdt-dtrace` crate turns the file into [`provider!`]
//!   declarations in a build script.
//! * The `dynamic` feature adds [`dynamic`]: probes defined while the
//!   program runs, for JIT compilers, interpreters and plugin hosts. It is
//!   the only part of the crate with dependencies (`object` to write the
//!   ELF object the probes live in, `libc` to load it); without the
//!   feature the crate is `no_std` and depends on nothing. The
//!   `sdt-capi` crate makes it a C library, `libsdt.so`.
//! * The `fastpath` feature lets a hit reach `sdt` without entering the
//!   kernel: through memory the program shares with `sdt`, while `sdt`
//!   traces the program ([`fastpath`], with `std` and `libc`). Other
//!   tracers still see every hit at the probe's site. A disabled probe
//!   costs the same with or without it.
//!
//! # Unsafe code
//!
//! The macros expand to two `unsafe` blocks in the instrumented crate,
//! because Rust has no safe way to emit a site and its note or to read a
//! semaphore the kernel changes: both are inline assembly (`asm!`), which
//! is `unsafe`. One block is the probe site (a no-op, shown above to be
//! safe under a tracer), the other loads the probe's semaphore for
//! `enabled!`; each says why in a `SAFETY` comment. A crate that says
//! `#![forbid(unsafe_code)]` can still use the probes, as `sdt-example`
//! does: the lint does not look inside other crates' macros. The crate's
//! own code denies `unsafe`, but for the `dynamic` module, which loads the
//! object it generates (`dlopen`, `dlsym` and `dlclose`, C functions with
//! no safe wrapper), calls its probes through function pointers, and reads
//! their semaphores as the kernel changes them.

#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(any(feature = "dynamic", feature = "fastpath"))]
extern crate std;

mod arg;
#[cfg(feature = "dynamic")]
#[allow(unsafe_code)] // it loads the probes it generates and calls them: see its doc
pub mod dynamic;
// The layout is always here, for the tracer; the writing of hits only with
// the `fastpath` feature.
#[allow(unsafe_code)] // it shares memory with a tracer and writes hits into it: see its doc
pub mod fastpath;
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod unsupported;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86_64;

pub use arg::Argument;

/// Internals of the macros. Not public API: may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::arg::{PtrLen, Slot};

    /// Marks the branch that calls it as rarely taken, so the compiler moves
    /// a probe's argument computation and site out of the hot path.
    #[cold]
    #[inline(always)]
    pub fn cold() {}

    /// How many argument slots an `A` takes.
    pub const fn slots<A: crate::Argument>() -> usize {
        if A::SPEC == 0 {
            2
        } else {
            1
        }
    }

    /// The bits of the argument slots whose bytes the fast path copies,
    /// for each argument's `(slots, captured)`: bit N for `argN`.
    pub const fn capture_mask(args: &[(usize, bool)]) -> u64 {
        let (mut mask, mut slot, mut i) = (0u64, 0, 0);
        while i < args.len() {
            if args[i].1 && slot < 64 {
                mask |= 1 << slot;
            }
            slot += args[i].0;
            i += 1;
        }
        mask
    }

    /// Type-checks and converts a typed probe's argument, as a function
    /// argument would be (deref coercion included), with temporaries living
    /// to the end of the probe statement.
    #[inline(always)]
    pub fn typed<T: crate::Argument>(value: T) -> T {
        value
    }

    #[cfg(feature = "fastpath")]
    pub use crate::fastpath::{hit as fast_hit, Args as FastArgs};

    /// Without the fast path, what a probe collects for it is nothing.
    #[cfg(not(feature = "fastpath"))]
    #[derive(Default)]
    pub struct FastArgs;

    #[cfg(not(feature = "fastpath"))]
    impl FastArgs {
        #[inline(always)]
        pub const fn new() -> FastArgs {
            FastArgs
        }
        #[inline(always)]
        pub fn value(&mut self, _: u64) {}
        #[inline(always)]
        pub fn c_str(&mut self, _: u64) {}
        #[inline(always)]
        pub fn bytes(&mut self, _: u64, _: u64) {}
    }

    /// Without the fast path, no probe has a cache.
    #[cfg(not(feature = "fastpath"))]
    pub static NO_CACHE: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

    /// Without the fast path, a hit goes to the kernel only.
    #[cfg(not(feature = "fastpath"))]
    #[inline(always)]
    pub fn fast_hit(_: usize, _: &core::sync::atomic::AtomicU64, _: &FastArgs) {}
}

/// Fires the probe `provider:name` with up to twelve argument slots.
///
/// ```
/// let (id, bytes, peer) = (7u64, -3i32, "10.0.0.1");
/// sdt::probe!(net, recv, id, bytes, peer);
/// sdt::probe!(net, tick);
/// ```
///
/// The arguments are expressions that are evaluated only while the probe is
/// enabled, left to right, and then passed by value. Each argument's type
/// must implement [`Argument`]; `&str` and `&[u8]` take two slots.
///
/// `provider` and `name` are identifiers. All sites with the same provider
/// and name in one executable or shared library share one semaphore, so a
/// tracer that enables the probe sees every site.
#[macro_export]
macro_rules! probe {
    ($provider:ident, $name:ident $(, $arg:expr)* $(,)?) => {
        if $crate::enabled!($provider, $name) {
            $crate::__private::cold();
            $crate::__sdt_site!(
                ($provider, $name) [] [$($arg),*]
                [a0 A0 s0 a1 A1 s1 a2 A2 s2 a3 A3 s3 a4 A4 s4 a5 A5 s5
                 a6 A6 s6 a7 A7 s7 a8 A8 s8 a9 A9 s9 a10 A10 s10 a11 A11 s11]
            )
        }
    };
}

/// Tells whether a tracer has enabled the probe `provider:name`.
///
/// Use it to skip work that only a probe needs:
///
/// ```
/// # fn summary() -> &'static str { "3 orders" }
/// if sdt::enabled!(shop, report) {
///     let text = summary();
///     sdt::probe!(shop, report, text);
/// }
/// ```
///
/// The answer comes from the probe's semaphore, a counter in memory that
/// tracers raise: one load, no system call. `probe!` makes the same test
/// itself, so wrapping a `probe!` in `enabled!` is only worth it for work
/// outside the probe's arguments.
#[macro_export]
macro_rules! enabled {
    ($provider:ident, $name:ident $(,)?) => {
        $crate::__sdt_enabled!($provider, $name)
    };
}

/// Declares the typed probes of a DTrace provider file, as [`provider!`]
/// would: one module per provider, one macro per probe.
///
/// The build script turns the file into declarations with the
/// `sdt-dtrace` crate (a build dependency), and this macro includes them:
///
/// ```ignore
/// // build.rs
/// fn main() {
///     sdt_dtrace::Builder::new("src/probes.d").generate();
/// }
///
/// // src/main.rs
/// sdt::include_provider!("probes.d");
///
/// fn commit(xid: u32) {
///     postgresql::transaction__commit!(xid);
/// }
/// ```
///
/// The argument is the provider file's name without its directory. The
/// probes get the provider, names and argument sizes that C code firing
/// them through `dtrace -h`'s header gets; a `char *` argument is a
/// `&CStr`, one argument as in C. Errors in the file stop the build with
/// its line and column. See the `sdt-dtrace` crate for the types a file
/// may use.
#[macro_export]
macro_rules! include_provider {
    ($file:literal) => {
        include!(concat!(env!("OUT_DIR"), "/sdt-dtrace/", $file, ".rs"));
    };
}

/// Declares typed probes.
///
/// ```
/// sdt::provider! {
///     /// Cache probes.
///     pub mod cache {
///         /// A lookup missed: the key and the table's size.
///         fn miss(key: &[u8], size: usize);
///     }
/// }
///
/// let key = b"user:42".to_vec();
/// cache::miss!(&key, 1024); // `&Vec<u8>` is converted to `&[u8]`
/// ```
///
/// For each `fn name(args);` the module gets a macro `name!` that takes
/// exactly the declared arguments. Each is converted to its declared type as
/// a function argument would be, and like every probe argument it is
/// evaluated only while the probe is enabled: the macro expands to a
/// [`probe!`] whose arguments are the caller's expressions wrapped in a
/// type-checking identity function. The provider's name is the module's.
///
/// The macros are visible in the declaring crate (`pub(crate)`), which is
/// where a probe's sites are. Declared types are resolved where the probe
/// is fired, so write types other than primitives with full paths
/// (`&::core::ffi::CStr`).
#[macro_export]
macro_rules! provider {
    (
        $(#[$attr:meta])*
        $vis:vis mod $provider:ident {
            $(
                $(#[$probe_attr:meta])*
                fn $name:ident($($arg:ident : $ty:ty),* $(,)?);
            )*
        }
    ) => {
        $(#[$attr])*
        $vis mod $provider {
            $(
                $crate::__sdt_typed_probe! {
                    ($) $provider $name [$(#[$probe_attr])*] [$($arg: $ty),*]
                }
            )*
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_typed_probe {
    (
        ($d:tt) $provider:ident $name:ident [$($attr:tt)*] [$($arg:ident: $ty:ty),*]
    ) => {
        $($attr)*
        #[allow(unused_macros)]
        macro_rules! $name {
            ($($d $arg:expr),* $d(,)?) => {
                $crate::probe!(
                    $provider, $name $(, $crate::__private::typed::<$ty>($d $arg))*
                )
            };
        }
        #[allow(unused_imports)]
        pub(crate) use $name;
    };
}

/// Pairs each argument expression with the identifiers its site uses: value,
/// type parameter, spec operand. Refuses a thirteenth argument.
#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_site {
    (($p:ident, $n:ident) [$($done:tt)*] [] [$($spare:ident)*]) => {
        $crate::__sdt_emit!(($p, $n) $($done)*)
    };
    (
        ($p:ident, $n:ident) [$($done:tt)*] [$next:expr $(, $rest:expr)*]
        [$a:ident $t:ident $s:ident $($spare:ident)*]
    ) => {
        $crate::__sdt_site!(($p, $n) [$($done)* ($next) $a $t $s] [$($rest),*] [$($spare)*])
    };
    (($p:ident, $n:ident) [$($done:tt)*] [$($rest:expr),+] []) => {
        ::core::compile_error!("a probe takes at most 12 arguments")
    };
}
