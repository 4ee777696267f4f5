//! Decoding the records the generated programs write (layout in `codegen`).

use crate::codegen::{self, Shape};
use crate::plan::{PlannedArg, PlannedSite};
use crate::session::TracedSite;

/// One probe hit.
#[derive(Debug)]
pub struct Event<'a> {
    /// `CLOCK_MONOTONIC` nanoseconds. Never less than the previous event's:
    /// two CPUs can take their timestamps in the opposite order from the one
    /// in which they reserved ring space, by a few nanoseconds, and the ring
    /// order is the true one.
    pub time_ns: u64,
    /// Process ID.
    pub pid: u32,
    /// Thread ID.
    pub tid: u32,
    /// The thread's name, up to 15 bytes.
    pub comm: &'a [u8],
    /// Where the probe fired.
    pub site: &'a PlannedSite,
    record: &'a [u8],
    shape: &'a Shape,
}

/// An argument's value, interpreted the way its spec says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    /// An argument read with `-s`: the bytes before the NUL, or, if the
    /// pointer could not be read, the kernel's error number (negative) and
    /// the pointer.
    Str(Result<&'a [u8], (i64, u64)>),
}

impl<'a> Event<'a> {
    pub(crate) fn decode(
        record: &'a [u8],
        sites: &'a [TracedSite],
        shapes: &'a [Shape],
        not_before: u64,
    ) -> Option<Event<'a>> {
        let site = sites.get(usize::try_from(read_u64(record, codegen::SITE)?).ok()?)?;
        let shape = shapes.get(site.shape)?;
        if record.len() < shape.record_len() {
            return None;
        }
        let pid_tgid = read_u64(record, codegen::PID_TGID)?;
        let comm = &record[codegen::COMM..codegen::COMM + codegen::COMM_LEN];
        let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(comm.len())];
        Some(Event {
            time_ns: read_u64(record, codegen::TIME)?.max(not_before),
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            comm,
            site: &site.site,
            record,
            shape,
        })
    }

    /// The arguments in order; strings where `-s` asked for them.
    pub fn args(&self) -> impl ExactSizeIterator<Item = Value<'a>> + '_ {
        self.site.args.iter().enumerate().map(|(n, arg)| {
            let raw = read_u64(self.record, codegen::ARGS + 8 * n).unwrap_or_default();
            match self.shape.strings.iter().position(|s| s.arg == n) {
                Some(slot) => Value::Str(self.string(slot, raw)),
                None => number(arg, raw),
            }
        })
    }

    fn string(&self, slot: usize, pointer: u64) -> Result<&'a [u8], (i64, u64)> {
        let result =
            read_u64(self.record, self.shape.string_result(slot)).unwrap_or_default() as i64;
        if result <= 0 {
            return Err((result, pointer));
        }
        let start = self.shape.string_bytes(slot);
        let len = (result as usize)
            .saturating_sub(1)
            .min(codegen::STRING_LEN - 1);
        Ok(&self.record[start..start + len])
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

fn read_u64(record: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
}
