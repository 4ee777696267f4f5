//! Probes defined while the program runs: for JIT compilers, interpreters
//! that let their users declare probes, and plugin hosts. Enabled by the
//! `dynamic` feature.
//!
//! ```no_run
//! use sdt::dynamic::{Arg, ArgType, Provider};
//!
//! let provider = Provider::new("myjit")?
//!     .probe("compiled", &[ArgType::U64, ArgType::Str])?
//!     .probe("deopt", &[ArgType::Bytes, ArgType::I32])?
//!     .load()?;
//! let compiled = provider.probe("compiled").expect("defined above");
//! compiled.fire(&[Arg::from(0x7f00_1000u64), Arg::from(c"fib")]);
//! if compiled.enabled() {
//!     // Work only a tracer needs.
//! }
//! // Unloading gives the definition back, to load again with more probes.
//! let provider = provider.unload().probe("inlined", &[ArgType::U32])?.load()?;
//! # Ok::<(), sdt::dynamic::Error>(())
//! ```
//!
//! `sdt list -p PID` lists these probes, and `sdt trace -p`, `sdt run -p`,
//! bpftrace, gdb and every other USDT reader trace them: a loaded provider
//! is a shared object mapped into the process, with the notes, base section
//! and semaphores that `<sys/sdt.h>` gives a compiled program. `sdt list`
//! names it `/proc/PID/fd/N` after the `memfd` the process holds, the path
//! bpftrace takes (`usdt:/proc/PID/fd/N:myjit:compiled`).
//!
//! # How it works
//!
//! [`Provider::load`] writes an ELF shared object in memory (with the
//! `object` crate's writer; see [`Provider::image`]) in which every probe
//! is a tiny function: the 5-byte no-op that the note points at, then
//! `ret`. Firing a probe calls that function with its argument slots in
//! the calling convention's registers (`%rdi`, `%rsi`, `%rdx`, `%rcx`,
//! `%r8`, `%r9`, then the stack), and the note says so, so a tracer reads
//! the arguments exactly where a compiled probe would have them. Each probe
//! has its own 16-bit semaphore in the object's writable segment.
//!
//! The object is loaded from a `memfd`, so no file is left behind; where a
//! `memfd` cannot be used (a seccomp policy, `vm.memfd_noexec=2`, no
//! `/proc`), from a private temporary file that is unlinked as soon as it
//! is loaded ([`LoadedProvider::backing`] says which).
//!
//! # Cost
//!
//! [`Probe::enabled`] is one load of the semaphore through a pointer and a
//! compare: a disabled [`Probe::fire`] costs what a disabled compile-time
//! probe does, within a nanosecond (`bench/probe.sh`). `fire` allocates
//! nothing. Arguments are values, so compute expensive ones only when
//! [`Probe::enabled`] says a tracer is attached.
//!
//! # Arguments
//!
//! | [`ArgType`] | slots | spec | pass ([`Arg`]) | read it (bpftrace) |
//! | --- | --- | --- | --- | --- |
//! | `U8`..`U64`, `I8`..`I64` | 1 | `1@`..`-8@` | any integer | `argN` |
//! | `Ptr` | 1 | `8@` | a raw pointer | `argN` |
//! | `Str` | 1 | `8@` | `&CStr`: a NUL-terminated string | `str(argN)` |
//! | `Bytes` | 2: pointer, then length | `8@ 8@` | `&str` or `&[u8]` | `str(argN, argM + 1)`, M = N + 1 |
//!
//! A `&str` is not NUL-terminated, so it is passed the way the `sdt`
//! crate's compiled probes pass one: pointer and length in two slots
//! (the `+ 1` is for the NUL that `str()`'s length counts, as in bpftrace
//! 0.23 and later). A
//! probe takes at most 12 slots; bpftrace 0.17 reads the first six.
//!
//! # Unloading
//!
//! [`LoadedProvider::unload`] (or dropping it) `dlclose`s the object, and
//! the mapping goes away: a tracer that attached to it is left attached to
//! a file that no process maps, so it sees no more hits, and the kernel
//! has nothing to lower the semaphores in. A provider loaded again is a new
//! file: tracers attach to it anew (`sdt trace -p` looks at the process's
//! objects when it starts).

mod image;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod loader;

use core::ffi::{c_void, CStr};
use core::fmt;
use std::boxed::Box;
use std::string::{String, ToString};
use std::vec::Vec;

/// The most argument slots a probe takes, as in the compile-time macros.
pub const MAX_SLOTS: usize = 12;

/// The type of a probe argument, which decides its spec in the note.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgType {
    /// An unsigned 8-bit integer (also `bool`).
    U8,
    /// An unsigned 16-bit integer.
    U16,
    /// An unsigned 32-bit integer.
    U32,
    /// An unsigned 64-bit integer.
    U64,
    /// A signed 8-bit integer.
    I8,
    /// A signed 16-bit integer.
    I16,
    /// A signed 32-bit integer.
    I32,
    /// A signed 64-bit integer.
    I64,
    /// An address.
    Ptr,
    /// A NUL-terminated string, passed as its address.
    Str,
    /// A byte string or `&str`, passed as two slots: address, then length.
    Bytes,
}

impl ArgType {
    /// How many argument slots the type takes: 2 for [`ArgType::Bytes`],
    /// else 1.
    pub const fn slots(self) -> usize {
        match self {
            ArgType::Bytes => 2,
            _ => 1,
        }
    }

    fn size_and_sign(self) -> (u8, bool) {
        match self {
            ArgType::U8 => (1, false),
            ArgType::U16 => (2, false),
            ArgType::U32 => (4, false),
            ArgType::U64 | ArgType::Ptr | ArgType::Str | ArgType::Bytes => (8, false),
            ArgType::I8 => (1, true),
            ArgType::I16 => (2, true),
            ArgType::I32 => (4, true),
            ArgType::I64 => (8, true),
        }
    }

    /// Whether `arg` is a value of this type.
    fn accepts(self, arg: &Arg<'_>) -> bool {
        match self {
            ArgType::Ptr => matches!(arg, Arg::Ptr(_) | Arg::U64(_)),
            ArgType::Str => matches!(arg, Arg::Str(_) | Arg::Ptr(_)),
            ArgType::Bytes => matches!(arg, Arg::Bytes(_)),
            _ => matches!(arg, Arg::U64(_) | Arg::I64(_)),
        }
    }
}

/// A value passed to [`Probe::fire`]. Convert with `Arg::from`: integers,
/// `bool`, `&CStr`, `&str`, `&[u8]` and raw pointers.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// An unsigned integer, for any integer type.
    U64(u64),
    /// A signed integer, for any integer type.
    I64(i64),
    /// An address, for [`ArgType::Ptr`] or [`ArgType::Str`].
    Ptr(*const c_void),
    /// A NUL-terminated string, for [`ArgType::Str`].
    Str(&'a CStr),
    /// Bytes with their length, for [`ArgType::Bytes`].
    Bytes(&'a [u8]),
}

macro_rules! from_integer {
    ($variant:ident as $wide:ty: $($ty:ty),*) => {$(
        impl From<$ty> for Arg<'_> {
            #[inline]
            fn from(value: $ty) -> Self {
                Arg::$variant(value as $wide)
            }
        }
    )*};
}
from_integer!(U64 as u64: u8, u16, u32, u64, usize, bool);
from_integer!(I64 as i64: i8, i16, i32, i64, isize);

impl<'a> From<&'a CStr> for Arg<'a> {
    #[inline]
    fn from(value: &'a CStr) -> Self {
        Arg::Str(value)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    #[inline]
    fn from(value: &'a str) -> Self {
        Arg::Bytes(value.as_bytes())
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    #[inline]
    fn from(value: &'a [u8]) -> Self {
        Arg::Bytes(value)
    }
}

impl<T> From<*const T> for Arg<'_> {
    #[inline]
    fn from(value: *const T) -> Self {
        Arg::Ptr(value.cast())
    }
}

impl<T> From<*mut T> for Arg<'_> {
    #[inline]
    fn from(value: *mut T) -> Self {
        Arg::Ptr(value.cast_const().cast())
    }
}

/// Why a provider could not be defined or loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A provider or probe name that tracers could not name in a probe
    /// spec: it must be a C identifier of at most 64 bytes.
    InvalidName {
        /// `"provider"` or `"probe"`.
        what: &'static str,
        /// The name given.
        name: String,
    },
    /// Two probes of one provider with the same name.
    DuplicateProbe(String),
    /// A probe with more than [`MAX_SLOTS`] argument slots.
    TooManySlots {
        /// The probe.
        probe: String,
        /// The slots its arguments take.
        slots: usize,
    },
    /// The object could not be built or loaded; one line per way tried.
    Load {
        /// What each way of loading said.
        attempts: Vec<String>,
    },
    /// Run-time probes exist on x86-64 Linux only.
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidName { what, name } => write!(
                f,
                "invalid {what} name {name:?}: use letters, digits and `_`, not starting with a \
                 digit, at most 64 bytes"
            ),
            Error::DuplicateProbe(name) => write!(f, "the probe `{name}` is defined twice"),
            Error::TooManySlots { probe, slots } => write!(
                f,
                "the probe `{probe}` takes {slots} argument slots, more than {MAX_SLOTS} \
                 (a Bytes argument takes two)"
            ),
            Error::Load { attempts } => {
                write!(f, "cannot load the probes: {}", attempts.join("; "))
            }
            Error::Unsupported => {
                f.write_str("probes defined at run time exist on x86-64 Linux only")
            }
        }
    }
}

impl std::error::Error for Error {}

/// One probe's definition.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ProbeDef {
    name: String,
    args: Vec<ArgType>,
}

/// A provider being defined: a name and its probes. [`load`](Self::load)
/// makes the probes live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provider {
    name: String,
    probes: Vec<ProbeDef>,
}

fn check_name(what: &'static str, name: &str) -> Result<(), Error> {
    let mut bytes = name.bytes();
    let valid = name.len() <= 64
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidName {
            what,
            name: name.to_string(),
        })
    }
}

impl Provider {
    /// A provider named `name`, with no probes yet. Names are C
    /// identifiers, as in compiled probes.
    pub fn new(name: &str) -> Result<Provider, Error> {
        check_name("provider", name)?;
        Ok(Provider {
            name: name.to_string(),
            probes: Vec::new(),
        })
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds the probe `name` with arguments of the types `args`.
    pub fn probe(mut self, name: &str, args: &[ArgType]) -> Result<Provider, Error> {
        self.add_probe(name, args)?;
        Ok(self)
    }

    /// Adds the probe `name`, for callers that hold the provider by
    /// reference; [`probe`](Self::probe) is the chaining form.
    pub fn add_probe(&mut self, name: &str, args: &[ArgType]) -> Result<(), Error> {
        check_name("probe", name)?;
        if self.probes.iter().any(|p| p.name == name) {
            return Err(Error::DuplicateProbe(name.to_string()));
        }
        let slots = args.iter().map(|a| a.slots()).sum();
        if slots > MAX_SLOTS {
            return Err(Error::TooManySlots {
                probe: name.to_string(),
                slots,
            });
        }
        self.probes.push(ProbeDef {
            name: name.to_string(),
            args: args.to_vec(),
        });
        Ok(())
    }

    /// The ELF shared object that [`load`](Self::load) maps, for
    /// inspection with `readelf -n` or `sdt list`.
    pub fn image(&self) -> Result<Vec<u8>, Error> {
        image::build(&self.name, &self.probes)
            .map(|(image, _)| image)
            .map_err(|e| Error::Load {
                attempts: std::vec![e.to_string()],
            })
    }

    /// Builds the provider's object and loads it: from now on its probes
    /// can be traced and fired.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub fn load(self) -> Result<LoadedProvider, Error> {
        let (image, layout) = image::build(&self.name, &self.probes).map_err(|e| Error::Load {
            attempts: std::vec![e.to_string()],
        })?;
        let loaded = loader::Loaded::load(&image, &self.name)?;
        let mut probes = Vec::with_capacity(self.probes.len());
        for (i, def) in self.probes.iter().enumerate() {
            let function = loaded.symbol(&image::function_symbol(&self.name, &def.name))?;
            let semaphore = loaded.symbol(&image::semaphore_symbol(&self.name, &def.name))?;
            // The symbols must be where the image put them, relative to
            // each other: anything else is not our object.
            let bias = function.wrapping_sub(layout.functions[i] as usize);
            if semaphore.wrapping_sub(layout.semaphores[i] as usize) != bias {
                return Err(Error::Load {
                    attempts: std::vec!["the loaded object is not the one built".to_string()],
                });
            }
            probes.push(Probe {
                semaphore: semaphore as *const u16,
                function,
                slots: def.args.iter().map(|a| a.slots()).sum(),
                name: def.name.clone(),
                args: def.args.clone().into_boxed_slice(),
            });
        }
        Ok(LoadedProvider {
            probes: probes.into_boxed_slice(),
            loaded,
            definition: self,
        })
    }

    /// Run-time probes exist on x86-64 Linux only: elsewhere this fails.
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    pub fn load(self) -> Result<LoadedProvider, Error> {
        Err(Error::Unsupported)
    }
}

/// How a provider's object was loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// From a `memfd`: `/proc/PID/maps` shows `/memfd:sdt-PROVIDER (deleted)`.
    Memfd,
    /// From a temporary file, unlinked once loaded: the maps show
    /// `$TMPDIR/sdt-PROVIDER-XXXXXX (deleted)`.
    TempFile,
}

/// A provider whose probes are live. Dropping it unloads them.
pub struct LoadedProvider {
    probes: Box<[Probe]>,
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    loaded: loader::Loaded,
    definition: Provider,
}

impl LoadedProvider {
    /// The probe `name`, if the provider has it.
    pub fn probe(&self, name: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.name == name)
    }

    /// Every probe, in the order they were defined.
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// Where the object was loaded from.
    pub fn backing(&self) -> Backing {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        return self.loaded.backing;
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        unreachable!("nothing loads on this target")
    }

    /// Unloads the probes and returns the definition, to which more probes
    /// can be added before loading it again.
    pub fn unload(self) -> Provider {
        self.definition
    }
}

impl fmt::Debug for LoadedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedProvider")
            .field("name", &self.definition.name)
            .field("probes", &self.probes)
            .finish()
    }
}

/// A live probe. It lives as long as its [`LoadedProvider`].
pub struct Probe {
    /// The probe's semaphore in the loaded object; tracers raise it.
    semaphore: *const u16,
    /// The probe's function in the loaded object.
    function: usize,
    slots: usize,
    name: String,
    args: Box<[ArgType]>,
}

// SAFETY: the pointers are into the loaded object, which lives as long as
// the `LoadedProvider` that owns this probe, whichever thread holds it; the
// semaphore is only read, and the function is reentrant (a no-op and a
// return), so nothing ties a `Probe` to the thread that made it.
unsafe impl Send for Probe {}
// SAFETY: shared use is only reading the semaphore (a volatile `u16` load,
// which cannot tear) and calling the reentrant function, from any number of
// threads at once.
unsafe impl Sync for Probe {}

type Function6 = extern "C" fn(u64, u64, u64, u64, u64, u64);
type Function12 = extern "C" fn(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);

impl Probe {
    /// The probe's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The probe's argument types.
    pub fn args(&self) -> &[ArgType] {
        &self.args
    }

    /// How many argument slots the probe takes ([`ArgType::Bytes`] takes two).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Whether a tracer has enabled the probe: one load of its semaphore.
    #[inline(always)]
    pub fn enabled(&self) -> bool {
        // SAFETY: the semaphore is a 2-byte-aligned `u16` in the loaded
        // object, which outlives `self`. The kernel changes it behind the
        // compiler's back, hence the volatile read.
        unsafe { core::ptr::read_volatile(self.semaphore) != 0 }
    }

    /// Fires the probe with `args` if a tracer has enabled it.
    ///
    /// The arguments must match the probe's types in number and kind (any
    /// integer for an integer type; [`Arg::Str`] or [`Arg::Ptr`] for
    /// `Str`; [`Arg::Bytes`] for `Bytes`). A call that does not match
    /// fires nothing; debug builds panic instead, to show the mistake.
    #[inline]
    pub fn fire(&self, args: &[Arg<'_>]) {
        if self.enabled() {
            self.fire_enabled(args);
        }
    }

    #[cold]
    #[inline(never)]
    fn fire_enabled(&self, args: &[Arg<'_>]) {
        let matches = args.len() == self.args.len()
            && self.args.iter().zip(args).all(|(ty, arg)| ty.accepts(arg));
        debug_assert!(
            matches,
            "probe `{}` takes {:?}, fired with {:?}",
            self.name, self.args, args
        );
        if !matches {
            return;
        }
        let mut slots = [0u64; MAX_SLOTS];
        let mut n = 0;
        for arg in args {
            match *arg {
                Arg::U64(v) => slots[n] = v,
                Arg::I64(v) => slots[n] = v as u64,
                Arg::Ptr(p) => slots[n] = p as usize as u64,
                Arg::Str(s) => slots[n] = s.as_ptr() as usize as u64,
                Arg::Bytes(b) => {
                    slots[n] = b.as_ptr() as usize as u64;
                    n += 1;
                    slots[n] = b.len() as u64;
                }
            }
            n += 1;
        }
        self.call(&slots);
    }

    /// Fires the probe with its argument slots as raw 64-bit values, if a
    /// tracer has enabled it: for foreign-function layers, where values
    /// arrive untyped. A `Bytes` argument takes two slots, its address and
    /// its length; a `Str` is an address. Slots past `slots.len()` are 0.
    #[inline]
    pub fn fire_slots(&self, slots: &[u64]) {
        if self.enabled() {
            let mut all = [0u64; MAX_SLOTS];
            let n = slots.len().min(MAX_SLOTS);
            all[..n].copy_from_slice(&slots[..n]);
            self.call(&all);
        }
    }

    #[inline(always)]
    fn call(&self, s: &[u64; MAX_SLOTS]) {
        // `function` is a probe function of the loaded object, which lives
        // as long as `self`: a no-op and a return, which reads no argument
        // and touches no memory, so any signature that passes integers is
        // sound to call it with. The values are only looked at by a tracer,
        // through the note's specs.
        if self.slots <= 6 {
            // SAFETY: `function` is the address of code (above), and a
            // `usize` and an `extern "C" fn` have the same size.
            let function: Function6 = unsafe { core::mem::transmute(self.function) };
            function(s[0], s[1], s[2], s[3], s[4], s[5]);
        } else {
            // SAFETY: as for the six-slot case.
            let function: Function12 = unsafe { core::mem::transmute(self.function) };
            function(
                s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
            );
        }
    }
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("name", &self.name)
            .field("args", &self.args)
            .field("enabled", &self.enabled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_c_identifiers() {
        assert!(Provider::new("my_jit2").is_ok());
        for bad in ["", "2jit", "my-jit", "a:b", "a b", &"x".repeat(65)] {
            assert!(
                matches!(Provider::new(bad), Err(Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn definitions_are_checked() {
        let p = Provider::new("p").unwrap().probe("a", &[]).unwrap();
        assert_eq!(
            p.clone().probe("a", &[ArgType::U8]),
            Err(Error::DuplicateProbe("a".into()))
        );
        let seven_strings = [ArgType::Bytes; 7];
        assert!(matches!(
            p.probe("b", &seven_strings),
            Err(Error::TooManySlots { slots: 14, .. })
        ));
    }

    #[test]
    fn arguments_match_their_types() {
        assert!(ArgType::I32.accepts(&Arg::from(-1i32)));
        assert!(ArgType::U8.accepts(&Arg::from(true)));
        assert!(ArgType::Str.accepts(&Arg::from(c"x")));
        assert!(!ArgType::Str.accepts(&Arg::from("x")));
        assert!(ArgType::Bytes.accepts(&Arg::from("x")));
        assert!(!ArgType::U64.accepts(&Arg::from(c"x")));
    }
}
