//! Attaching programs to kernel tracepoints.
//!
//! Two ways, for two kinds of program:
//!
//! * [`attach_tracepoint`]: a tracepoint program on a tracefs event by
//!   its id (`events/CATEGORY/NAME/id`). The program gets the event's
//!   record. One perf event on CPU 0 for all processes is enough: the
//!   kernel runs the program wherever the tracepoint fires.
//! * [`attach_raw_tracepoint`]: a raw tracepoint program by the
//!   tracepoint's name, which needs no tracefs at all. The program gets
//!   the tracepoint's arguments.

use std::ffi::CString;
use std::os::fd::AsFd;

use crate::error::{Error, Result};
use crate::program::Program;
use crate::sys;
use crate::uprobe::{Attachment, Mechanism};

/// Attaches a tracepoint program (`ProgramType::Tracepoint`) to the
/// tracefs event with `id`, through a perf link where the kernel has them.
pub fn attach_tracepoint(program: &Program, id: u64, mechanism: Mechanism) -> Result<Attachment> {
    let event = sys::perf_event_open_tracepoint(id)
        .map_err(|e| Error::sys("opening tracepoint perf event", e))?;
    let mut links = Vec::new();
    if mechanism == Mechanism::PerfIoctl {
        sys::perf_event_set_bpf(event.as_fd(), program.as_fd())
            .map_err(|e| Error::sys("attaching program to tracepoint", e))?;
    } else {
        let link = sys::link_create_perf_event(program.as_fd(), Some(event.as_fd()), 0)
            .map_err(|e| Error::sys("linking program to tracepoint", e))?;
        links.push(link);
    }
    sys::perf_event_enable(event.as_fd()).map_err(|e| Error::sys("enabling tracepoint", e))?;
    Ok(Attachment::new(mechanism, links, vec![event]))
}

/// Attaches a raw tracepoint program (`ProgramType::RawTracepoint`) to
/// the tracepoint `name`, such as `sched_process_fork`.
pub fn attach_raw_tracepoint(program: &Program, name: &str) -> Result<Attachment> {
    let c_name = CString::new(name)
        .map_err(|_| Error::Invalid(format!("tracepoint name {name:?} contains a NUL byte")))?;
    let link = sys::raw_tracepoint_open(&c_name, program.as_fd())
        .map_err(|e| Error::sys("attaching to a raw tracepoint", e))?;
    Ok(Attachment::new(Mechanism::PerfLink, vec![link], Vec::new()))
}
