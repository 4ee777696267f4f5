//! Which Rust values can be probe arguments, and how a tracer reads them.
//!
//! A USDT argument is described to tracers by a spec such as `-4@%eax`: a
//! size in bytes (negative when signed) and where the value lives. The size
//! and signedness must come from the argument's type, not from the caller, so
//! they are associated constants of the sealed [`Argument`] trait. The probe
//! macros read them through `const` operands of the `asm!` block that writes
//! the spec, which is why a spec is always exactly right for the type.
//!
//! Every argument occupies one general-purpose register at the probe site:
//!
//! * Integers, `bool`, `char`, raw pointers and references are widened to 64
//!   bits (sign-extended when signed) and the spec names the sub-register of
//!   the type's width, e.g. `-4@%eax` for an `i32` or `8@%rdi` for a pointer.
//! * `&str` and `&[u8]` become two argument slots, pointer then length in
//!   bytes, so that `str(argN, argM + 1)` (M = N + 1; the length `str()`
//!   takes counts a NUL) in bpftrace reads the text. The pair
//!   is stored in a small `repr(C)` record in the probing function's frame,
//!   its address goes in the register, and the two specs read the record:
//!   `8@(%rdx) 8@8(%rdx)`. This keeps a probe of twelve strings within the
//!   registers x86-64 has to give.

use core::ffi::CStr;
use core::ptr::NonNull;

/// A value that can be passed to a probe.
///
/// Implemented for:
///
/// | type | slots | spec | how to read it (bpftrace) |
/// | --- | --- | --- | --- |
/// | `u8`, `u16`, `u32`, `u64`, `usize`, `bool`, `char` | 1 | `1@`…`8@` | `argN` |
/// | `i8`, `i16`, `i32`, `i64`, `isize` | 1 | `-1@`…`-8@` | `argN` (sign is kept) |
/// | `*const T`, `*mut T`, `NonNull<T>`, `&T`, `&mut T` (`T: Sized`) | 1 | `8@` | `argN` is the address |
/// | `&CStr` | 1 | `8@` | `str(argN)` |
/// | `&str`, `&[u8]` | 2: pointer, then length in bytes | `8@(%r) 8@8(%r)` | `str(argN, argM + 1)`, `buf(argN, argM)` (M = N + 1) |
///
/// Pass a `String` as `s.as_str()`: `&String` is an ordinary reference, and
/// its probe argument is the address of the `String` itself.
///
/// The trait is sealed: the set of types is the set that every USDT reader
/// decodes the same way. Floats are refused at compile time:
///
/// ```compile_fail
/// let ratio = 0.5f64;
/// sdt::probe!(physics, step, ratio); // `f64` cannot be a probe argument (a float: pass `x.to_bits()`…)
/// ```
///
/// ```
/// let ratio = 0.5f64;
/// sdt::probe!(physics, step, ratio.to_bits());
/// ```
///
/// So are more than twelve slots (checked when the probe is compiled to
/// code, so `cargo check` does not see it):
///
/// ```compile_fail
/// let s = "seven strings are fourteen slots";
/// sdt::probe!(too, many, s, s, s, s, s, s, s);
/// ```
// The message carries the advice because rustc shows only the message when
// it also suggests borrowing, which it does since references are arguments.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a probe argument (a float: pass `x.to_bits()`; a `String`: `s.as_str()`)",
    label = "not a probe argument",
    note = "probe arguments are integers, `bool`, `char`, raw pointers, references (passed as their address), `&CStr`, `&str` and `&[u8]`",
    note = "a float has no argument form that every tracer reads: pass `x.to_bits()` and convert it back in the tracer, or pass an integer in fixed-point units (e.g. microseconds, cents)",
    note = "pass a `String` as `s.as_str()` and a `Vec<u8>` as `v.as_slice()`"
)]
pub trait Argument: sealed::Sealed {
    /// What lives at the probe site: a widened register value or a
    /// pointer/length record.
    #[doc(hidden)]
    type Slot: Slot;

    /// The spec's size: 1, 2, 4 or 8, negated when signed; 0 for a
    /// pointer/length pair.
    #[doc(hidden)]
    const SPEC: i8;

    #[doc(hidden)]
    fn into_slot(self) -> Self::Slot;

    /// Whether the fast path copies the bytes the argument points to
    /// (`&CStr`, `&str`, `&[u8]`), so that a tracer reads them from the
    /// hit's record rather than from the program's memory.
    #[doc(hidden)]
    const CAPTURED: bool = false;

    /// What the fast path records of the slot: its value, and for a
    /// string, its bytes.
    #[doc(hidden)]
    #[inline(always)]
    fn fast(slot: &Self::Slot, args: &mut crate::__private::FastArgs) {
        args.value(slot.register());
    }
}

/// The value an [`Argument`] leaves at the probe site.
#[doc(hidden)]
pub trait Slot {
    /// The value for the argument's register.
    fn register(&self) -> u64;
}

impl PtrLen {
    /// The fast path's two arguments, with the bytes to copy.
    #[inline(always)]
    pub fn fast(&self, args: &mut crate::__private::FastArgs) {
        args.bytes(self.ptr as usize as u64, self.len as u64);
    }
}

impl Slot for u64 {
    #[inline(always)]
    fn register(&self) -> u64 {
        *self
    }
}

/// A pointer and a length in bytes, in this order, as `&str` and `&[u8]`
/// arguments present them to tracers.
#[doc(hidden)]
#[repr(C)]
pub struct PtrLen {
    ptr: *const u8,
    len: usize,
}

impl Slot for PtrLen {
    /// The record's own address: the specs `8@(%r) 8@8(%r)` read its fields.
    #[inline(always)]
    fn register(&self) -> u64 {
        self as *const Self as usize as u64
    }
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! integer {
    ($($ty:ty => $spec:literal as $wide:ty),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Argument for $ty {
            type Slot = u64;
            const SPEC: i8 = $spec;
            #[inline(always)]
            fn into_slot(self) -> u64 {
                // Through the signed 64-bit type when signed, so the upper
                // bits are a sign extension whichever width a reader uses.
                self as $wide as u64
            }
        }
    )*};
}

integer! {
    u8 => 1 as u64,
    u16 => 2 as u64,
    u32 => 4 as u64,
    u64 => 8 as u64,
    usize => 8 as u64,
    i8 => -1 as i64,
    i16 => -2 as i64,
    i32 => -4 as i64,
    i64 => -8 as i64,
    isize => -8 as i64,
    bool => 1 as u64,
    char => 4 as u64,
}

macro_rules! address {
    ($(impl<$t:ident $(: ?$unsized:ident)?> for $ty:ty;)*) => {$(
        impl<$t $(: ?$unsized)?> sealed::Sealed for $ty {}
        impl<$t $(: ?$unsized)?> Argument for $ty {
            type Slot = u64;
            const SPEC: i8 = 8;
            #[inline(always)]
            fn into_slot(self) -> u64 {
                // `cast` drops the metadata of a wide pointer.
                (self as *const $t).cast::<u8>() as usize as u64
            }
        }
    )*};
}

address! {
    impl<T: ?Sized> for *const T;
    impl<T: ?Sized> for *mut T;
    impl<T> for &T;
    impl<T> for &mut T;
}

impl<T: ?Sized> sealed::Sealed for NonNull<T> {}
impl<T: ?Sized> Argument for NonNull<T> {
    type Slot = u64;
    const SPEC: i8 = 8;
    #[inline(always)]
    fn into_slot(self) -> u64 {
        self.as_ptr().into_slot()
    }
}

impl sealed::Sealed for &CStr {}
impl Argument for &CStr {
    const CAPTURED: bool = true;
    type Slot = u64;
    const SPEC: i8 = 8;
    #[inline(always)]
    fn into_slot(self) -> u64 {
        self.as_ptr().into_slot()
    }
    #[inline(always)]
    fn fast(slot: &u64, args: &mut crate::__private::FastArgs) {
        args.c_str(*slot);
    }
}

impl sealed::Sealed for &[u8] {}
impl Argument for &[u8] {
    const CAPTURED: bool = true;
    type Slot = PtrLen;
    const SPEC: i8 = 0;
    #[inline(always)]
    fn into_slot(self) -> PtrLen {
        PtrLen {
            ptr: self.as_ptr(),
            len: self.len(),
        }
    }
    #[inline(always)]
    fn fast(slot: &PtrLen, args: &mut crate::__private::FastArgs) {
        slot.fast(args);
    }
}

impl sealed::Sealed for &str {}
impl Argument for &str {
    const CAPTURED: bool = true;
    type Slot = PtrLen;
    const SPEC: i8 = 0;
    #[inline(always)]
    fn into_slot(self) -> PtrLen {
        self.as_bytes().into_slot()
    }
    #[inline(always)]
    fn fast(slot: &PtrLen, args: &mut crate::__private::FastArgs) {
        slot.fast(args);
    }
}
