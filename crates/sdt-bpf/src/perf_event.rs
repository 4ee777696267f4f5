//! Attaching programs to perf events that sample or count on every CPU:
//! the CPU clock of `profile:hz:99`, the software events the kernel
//! counts (page faults, context switches) and the hardware events the
//! CPU's PMU counts.
//!
//! A perf event counts on one CPU (or for one task); a program attached
//! to it runs each time it overflows, in the context of whatever task was
//! running there, with that task's registers. So sampling every process
//! takes one event per online CPU (`pid = -1, cpu = N`), each with the
//! program attached, which is what `perf record -a` and bpftrace open.
//! The CPU clock turns a frequency into a fixed hrtimer period when the
//! event is created, so `sample_freq = 99` samples exactly every
//! 1e9/99 ns of each CPU's time; the other events fire every
//! `sample_period` occurrences. Every event is opened disabled, the
//! program attached (through a perf link where the kernel has them, which
//! is what `BPF_PROG_TYPE_PERF_EVENT` programs take, or the older ioctl),
//! and then enabled; if any CPU's event cannot be opened, nothing stays
//! attached.

use std::os::fd::AsFd;

use crate::error::{Error, Result};
use crate::program::Program;
use crate::sys;
use crate::uprobe::{Attachment, Mechanism};

/// The PMU of an event: `perf_event_attr.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PerfType {
    /// `PERF_TYPE_HARDWARE`: counted by the CPU.
    Hardware,
    /// `PERF_TYPE_SOFTWARE`: counted by the kernel.
    Software,
}

impl PerfType {
    pub(crate) fn raw(self) -> u32 {
        match self {
            PerfType::Hardware => 0,
            PerfType::Software => 1,
        }
    }
}

/// How often the program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sampling {
    /// Every this many events (for the CPU clock: nanoseconds).
    Period(u64),
    /// This many times a second (`freq = 1`).
    Frequency(u64),
}

/// A perf event to open on every online CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PerfEvent {
    pub kind: PerfType,
    /// `perf_event_attr.config`: which event of the PMU.
    pub config: u64,
    pub sampling: Sampling,
}

impl PerfEvent {
    /// `PERF_COUNT_SW_CPU_CLOCK`, `freq` times a second on each CPU.
    pub fn cpu_clock(freq: u64) -> PerfEvent {
        PerfEvent {
            kind: PerfType::Software,
            config: 0,
            sampling: Sampling::Frequency(freq),
        }
    }

    /// Attaches `program` (a [`ProgramType::PerfEvent`](crate::ProgramType::PerfEvent)
    /// program) to this event on every online CPU, for every process.
    ///
    /// A machine without the CPU's counters (most virtual machines)
    /// refuses hardware events with [`Error::NoHardwareCounters`].
    pub fn attach(&self, program: &Program, mechanism: Mechanism) -> Result<Attachment> {
        let cpus = sys::online_cpus().map_err(|e| Error::sys("reading the online CPUs", e))?;
        let mut links = Vec::new();
        let mut events = Vec::new();
        for cpu in cpus {
            let event = sys::perf_event_open_counter(self, cpu).map_err(|e| self.open_error(e))?;
            if mechanism == Mechanism::PerfIoctl {
                sys::perf_event_set_bpf(event.as_fd(), program.as_fd())
                    .map_err(|e| Error::sys("attaching a program to a perf event", e))?;
            } else {
                links.push(
                    sys::link_create_perf_event(program.as_fd(), Some(event.as_fd()), 0)
                        .map_err(|e| Error::sys("linking a program to a perf event", e))?,
                );
            }
            events.push(event);
        }
        for event in &events {
            sys::perf_event_enable(event.as_fd())
                .map_err(|e| Error::sys("enabling a perf event", e))?;
        }
        Ok(Attachment::new(mechanism, links, events))
    }

    fn open_error(&self, e: std::io::Error) -> Error {
        let missing = matches!(
            rustix::io::Errno::from_io_error(&e),
            Some(rustix::io::Errno::NOENT | rustix::io::Errno::OPNOTSUPP)
        );
        match self.kind {
            PerfType::Hardware if missing => Error::NoHardwareCounters { error: e },
            _ => Error::sys("opening a perf event", e),
        }
    }
}
