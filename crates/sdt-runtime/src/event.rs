//! The events of `sdt trace`: one record per hit with every argument of
//! the site, decoded for printing. `sdt trace` compiles to a script whose
//! probes each run `__sdt_event()`, so it shares every pass with `sdt run`.

use sdt_trace::{PlannedArg, PlannedSite};

use sdt_codegen::layout::{event, OutputInfo};
use sdt_lang::hir::StringArg;
use sdt_script::Compilation;

/// One probe hit.
#[derive(Debug)]
pub struct Event<'a> {
    /// `CLOCK_MONOTONIC` nanoseconds. Never less than the previous event's:
    /// two CPUs can take their timestamps in the opposite order from the one
    /// in which they reserved ring space, by a few nanoseconds, and the ring
    /// order is the true one.
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// The thread's name, up to 15 bytes.
    pub comm: &'a [u8],
    /// Where the probe fired.
    pub site: &'a PlannedSite,
    record: &'a [u8],
    strings: &'a [StringArg],
}

/// An argument's value, interpreted the way its spec says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    /// An argument read as a string: the bytes before the NUL, or, if the
    /// pointer could not be read, the kernel's error (negative) and the
    /// pointer.
    Str(Result<&'a [u8], (i64, u64)>),
    /// The argument cannot be read at this site (the site's
    /// [`PlannedArg::source`] says why).
    Unreadable,
}

fn u64_at(record: &[u8], at: u32) -> Option<u64> {
    let at = at as usize;
    Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
}

impl<'a> Event<'a> {
    /// Decodes an event record; `None` for another kind of record or a
    /// malformed one.
    pub fn decode(
        record: &'a [u8],
        compilation: &'a Compilation,
        not_before: u64,
    ) -> Option<Event<'a>> {
        let id = u64_at(record, 0)? as usize;
        let OutputInfo::Event { strings, .. } = compilation.compiled.outputs.get(id)? else {
            return None;
        };
        let cookie = u64_at(record, event::COOKIE)?;
        let site = compilation.sites.get(cookie as u32 as usize)?;
        let pid_tgid = u64_at(record, event::PID_TGID)?;
        let comm = record.get(event::COMM as usize..(event::COMM + 16) as usize)?;
        let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(comm.len())];
        let needed = event::ARGS as usize
            + 8 * site.args.len()
            + strings.len() * (8 + event::STRING_LEN as usize);
        if record.len() < needed {
            return None;
        }
        Some(Event {
            time_ns: u64_at(record, event::TIME)?.max(not_before),
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            comm,
            site,
            record,
            strings,
        })
    }

    /// The arguments in order; strings where they were asked for.
    pub fn args(&self) -> impl ExactSizeIterator<Item = Value<'a>> + '_ {
        let strings_at = event::ARGS + 8 * self.site.args.len() as u32;
        self.site.args.iter().enumerate().map(move |(n, arg)| {
            let raw = u64_at(self.record, event::ARGS + 8 * n as u32).unwrap_or_default();
            if arg.source.is_err() {
                return Value::Unreadable;
            }
            match self.strings.iter().position(|s| s.arg == n) {
                Some(slot) => {
                    let result = u64_at(self.record, strings_at + 8 * slot as u32)
                        .unwrap_or_default() as i64;
                    if result <= 0 {
                        return Value::Str(Err((result, raw)));
                    }
                    let start = (strings_at
                        + 8 * self.strings.len() as u32
                        + event::STRING_LEN * slot as u32) as usize;
                    let len = (result as usize)
                        .saturating_sub(1)
                        .min(event::STRING_LEN as usize - 1);
                    Value::Str(Ok(self.record.get(start..start + len).unwrap_or_default()))
                }
                None => number(arg, raw),
            }
        })
    }
}

fn number(arg: &PlannedArg, raw: u64) -> Value<'static> {
    match (arg.float, arg.size) {
        (true, 4) => Value::Float(f64::from(f32::from_bits(raw as u32))),
        (true, _) => Value::Float(f64::from_bits(raw)),
        (false, _) if arg.signed => Value::Signed(raw as i64),
        (false, _) => Value::Unsigned(raw),
    }
}
