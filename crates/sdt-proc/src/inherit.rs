//! The signal state sdt was started with, so that the `-c` command gets
//! exactly that state, as a shell would pass it on.
//!
//! A shell starts a command with the signal mask it has and with every
//! signal it ignores still ignored (`exec` keeps `SIG_IGN` and resets
//! handlers to the default). sdt cannot simply pass on its own state,
//! because by the time it starts the command that state has changed:
//!
//! * Rust's runtime sets SIGPIPE to `SIG_IGN` before `main` runs, whatever
//!   sdt's parent gave it;
//! * sdt blocks SIGINT, SIGTERM and SIGHUP to read them from a signalfd;
//! * glibc's `posix_spawn` sets its two internal signals (32 and 33) to
//!   `SIG_IGN` in the child when the parent has handlers for them, and
//!   `exec` keeps that.
//!
//! So the state is read once, by a function in `.init_array` that the
//! loader runs before Rust's runtime starts, and the command is spawned
//! with that mask and with every signal not ignored then set back to its
//! default (`POSIX_SPAWN_SETSIGMASK` and `POSIX_SPAWN_SETSIGDEF`).
//!
//! The state is read from `/proc/thread-self/status` (`SigBlk`, `SigIgn`),
//! which is exact for every signal. This module is most of the crate's
//! `unsafe` code (see the crate doc): without `/proc`, reading
//! dispositions needs `sigaction(2)`, which no safe wrapper offers without
//! also changing them; putting SIGPIPE back needs `signal(2)`; and a
//! signal set that holds glibc's internal signals must be written word by
//! word, because `sigaddset` refuses them.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nix::sys::signal::{SigHandler, SigSet, Signal};

/// Signals 1 to 64, as bits `signal - 1`.
const SIGNALS: std::ops::RangeInclusive<i32> = 1..=64;

static CAPTURED: AtomicBool = AtomicBool::new(false);
static BLOCKED: AtomicU64 = AtomicU64::new(0);
static IGNORED: AtomicU64 = AtomicU64::new(0);

/// Runs before `main` (and before Rust's runtime touches SIGPIPE).
#[used]
#[link_section = ".init_array"]
static CAPTURE_AT_START: extern "C" fn() = capture;

extern "C" fn capture() {
    let (blocked, ignored) = current();
    BLOCKED.store(blocked, Ordering::Relaxed);
    IGNORED.store(ignored, Ordering::Relaxed);
    CAPTURED.store(true, Ordering::Release);
}

/// The calling thread's signal mask and the process's ignored signals,
/// as bit sets: as the kernel reports them, which also covers glibc's
/// internal signals that its `sigaction` refuses to describe, or, without
/// `/proc`, through the C library.
fn current() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let field = |name: &str| {
        let value = status.lines().find_map(|l| l.strip_prefix(name))?;
        u64::from_str_radix(value.trim(), 16).ok()
    };
    match (field("SigBlk:"), field("SigIgn:")) {
        (Some(blocked), Some(ignored)) => (blocked, ignored),
        _ => from_libc(),
    }
}

/// [`current`] through the C library.
fn from_libc() -> (u64, u64) {
    let blocked = bits_of(&SigSet::thread_get_mask().unwrap_or_else(|_| SigSet::empty()));
    let mut ignored = 0;
    for signal in SIGNALS {
        let bit = 1u64 << (signal - 1);
        let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: a null new action only reads the disposition into `old`,
        // which is valid for writes.
        let read = unsafe { libc::sigaction(signal, std::ptr::null(), old.as_mut_ptr()) };
        // SAFETY: sigaction succeeded, so it filled `old` (it was zeroed before).
        if read == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN {
            ignored |= bit;
        }
    }
    (blocked, ignored)
}

/// The signal mask and ignored signals sdt was started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// Blocked signals, bit `n - 1` for signal `n`.
    pub blocked: u64,
    /// Ignored signals, bit `n - 1` for signal `n`.
    pub ignored: u64,
}

impl Inherited {
    /// What the process was started with. Should the loader not have run
    /// the capture (a program that does not link this module's object),
    /// the state now stands in for it, with SIGPIPE taken as not ignored.
    pub fn at_start() -> Inherited {
        // Referring to the entry keeps its object, and so the
        // `.init_array` slot, in every program that asks.
        std::hint::black_box(&CAPTURE_AT_START);
        if CAPTURED.load(Ordering::Acquire) {
            return Inherited {
                blocked: BLOCKED.load(Ordering::Relaxed),
                ignored: IGNORED.load(Ordering::Relaxed),
            };
        }
        let (blocked, ignored) = current();
        Inherited {
            blocked,
            ignored: ignored & !(1 << (Signal::SIGPIPE as i32 - 1)),
        }
    }

    /// Whether `signal` was ignored.
    pub fn ignores(&self, signal: i32) -> bool {
        SIGNALS.contains(&signal) && self.ignored & (1 << (signal - 1)) != 0
    }

    /// The mask, as a signal set.
    pub(crate) fn mask(&self) -> SigSet {
        set_of(self.blocked)
    }

    /// Every signal that was not ignored: each gets its default action in
    /// the command.
    pub(crate) fn defaults(&self) -> SigSet {
        set_of(!self.ignored)
    }
}

/// Bits in one word of a `sigset_t`: the kernel's layout is an array of
/// `unsigned long`, signal `n` at bit `n - 1` counted across the words.
const WORD_BITS: usize = libc::c_ulong::BITS as usize;
/// Words that hold signals 1 to 64.
const WORDS: usize = 64 / WORD_BITS;

/// The signal set of `bits`, real-time and internal signals included.
fn set_of(bits: u64) -> SigSet {
    let mut words = [0 as libc::c_ulong; WORDS];
    for (i, word) in words.iter_mut().enumerate() {
        *word = (bits >> (i * WORD_BITS)) as libc::c_ulong;
    }
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: sigset_t is at least 64 bits of `unsigned long` words on
    // Linux, so the `WORDS` words are written within it, and `words` is a
    // distinct local array.
    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), set.as_mut_ptr().cast(), WORDS) };
    // SAFETY: every byte of `set` is initialised: zeroed, then partly
    // overwritten with the words; zeroed bytes are the empty set.
    let set = unsafe { set.assume_init() };
    // SAFETY: `set` is an initialised sigset_t (above), all that
    // `from_sigset_t_unchecked` asks.
    unsafe { SigSet::from_sigset_t_unchecked(set) }
}

/// The signals 1 to 64 of `set`, as bits.
fn bits_of(set: &SigSet) -> u64 {
    let raw: &libc::sigset_t = set.as_ref();
    let mut words = [0 as libc::c_ulong; WORDS];
    // SAFETY: sigset_t holds at least WORDS initialised words.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (raw as *const libc::sigset_t).cast::<libc::c_ulong>(),
            words.as_mut_ptr(),
            WORDS,
        );
    }
    words.iter().enumerate().fold(0, |bits, (i, &word)| {
        #[allow(clippy::useless_conversion)] // `unsigned long` is 32 bits on some targets
        let word = u64::from(word);
        bits | word << (i * WORD_BITS)
    })
}

/// Sets SIGPIPE back to its default action if the process was started
/// with it not ignored: Rust's runtime ignores it before `main`.
pub(crate) fn restore_sigpipe() {
    if !Inherited::at_start().ignores(Signal::SIGPIPE as i32) {
        // SAFETY: SIG_DFL installs no handler, so nothing can run at an
        // unexpected time.
        let _ = unsafe { nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_at_start_is_captured_before_rust_ignores_sigpipe() {
        let inherited = Inherited::at_start();
        assert!(
            CAPTURED.load(Ordering::Acquire),
            "the loader ran the capture"
        );
        // The test harness's runtime ignores SIGPIPE now; whether it was
        // ignored at start is what the parent gave, which the status file
        // of a fresh process shows the same way.
        let (_, now) = current();
        assert!(
            now & (1 << (Signal::SIGPIPE as i32 - 1)) != 0,
            "Rust ignores SIGPIPE"
        );
        let (blocked, ignored) = from_libc();
        assert_eq!(blocked, current().0, "both readings agree on the mask");
        // glibc describes neither of its internal signals, 32 and 33.
        assert_eq!(ignored, now & !(3 << 31), "and on what is ignored");
        assert_eq!(bits_of(&inherited.mask()), inherited.blocked);
        assert_eq!(bits_of(&inherited.defaults()), !inherited.ignored);
    }

    #[test]
    fn sets_hold_every_signal_glibc_keeps_for_itself() {
        for bits in [0, u64::MAX, 1 << 31 | 1 << 32, 1 << 63 | 1, 0x4003] {
            assert_eq!(bits_of(&set_of(bits)), bits, "{bits:#x}");
        }
        // SAFETY: reading an initialised set.
        let has_32 = unsafe { libc::sigismember(set_of(1 << 31).as_ref(), 32) };
        assert_eq!(has_32, 1, "signal 32 is bit 31");
    }
}
