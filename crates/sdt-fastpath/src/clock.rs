//! The time stamp counter, which a probe reads in a few nanoseconds, as
//! `CLOCK_MONOTONIC`, which the kernel's records carry.
//!
//! The counter ticks at a constant rate on every processor this runs on
//! (`constant_tsc`). Its rate is measured from two readings of both
//! clocks, the first when the clock is made and the latest
//! ([`Clock::refine`]), so it grows more exact the longer a run lasts; a
//! counter value is read as a time from the latest reading, so that the
//! error is that reading's (tens of nanoseconds) and not the rate's over
//! the whole run. Hits of the fast path and the kernel's sort by these
//! times, and consecutive hits of one thread can be a few hundred
//! nanoseconds apart.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// The counter's rate and a point where both clocks were read.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    tsc0: u64,
    ns0: u64,
    tsc1: u64,
    ns1: u64,
}

/// The time stamp counter now.
pub fn tsc() -> u64 {
    // SAFETY: `rdtsc` reads a counter and changes nothing; every x86-64
    // processor has it.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock the kernel's records
/// carry, and that [`Clock::ns`] reads hits as.
pub fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Both clocks, read as close together as can be: the counter around the
/// monotonic clock, from the tightest of a few tries.
fn pair() -> (u64, u64) {
    (0..5)
        .map(|_| {
            let before = tsc();
            let ns = monotonic_ns();
            let after = tsc();
            (after - before, before / 2 + after / 2, ns)
        })
        .min_by_key(|&(spread, _, _)| spread)
        .map(|(_, tsc, ns)| (tsc, ns))
        .unwrap_or((tsc(), monotonic_ns()))
}

impl Clock {
    /// Measures the counter against the monotonic clock over `over`.
    pub fn calibrate(over: Duration) -> Clock {
        let (tsc0, ns0) = pair();
        std::thread::sleep(over);
        let (tsc1, ns1) = pair();
        Clock {
            tsc0,
            ns0,
            tsc1,
            ns1,
        }
    }

    /// Reads both clocks again, for a better rate.
    pub fn refine(&mut self) {
        let (tsc1, ns1) = pair();
        self.tsc1 = tsc1;
        self.ns1 = ns1;
    }

    /// Counter ticks a second.
    pub fn hz(&self) -> u64 {
        let ticks = self.tsc1.saturating_sub(self.tsc0) as u128;
        let ns = self.ns1.saturating_sub(self.ns0).max(1) as u128;
        (ticks * 1_000_000_000 / ns) as u64
    }

    /// The monotonic time at counter value `tsc`, from the latest reading.
    pub fn ns(&self, tsc: u64) -> u64 {
        let ticks = self.tsc1.saturating_sub(self.tsc0).max(1) as i128;
        let ns = self.ns1.saturating_sub(self.ns0) as i128;
        let since = tsc as i128 - self.tsc1 as i128;
        (self.ns1 as i128 + since * ns / ticks).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_reads_as_the_monotonic_clock() {
        let mut clock = Clock::calibrate(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(30));
        clock.refine();
        assert!(clock.hz() > 100_000_000, "{} Hz", clock.hz());
        let (t, ns) = pair();
        let off = clock.ns(t) as i64 - ns as i64;
        // Within 100 microseconds, on a loaded virtual machine.
        assert!(off.abs() < 100_000, "{off} ns off");
    }
}
