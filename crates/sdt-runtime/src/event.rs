//! The events of `sdt trace`: one record per hit with every argument of
//! the site, decoded for printing. `sdt trace` compiles to a script whose
//! probes each run `__sdt_event()`, so it shares every pass with `sdt run`.

use sdt_codegen::layout::{event, OutputInfo};
use sdt_output::{Arg, Hit};
use sdt_trace::{PlannedArg, PlannedSite};

fn u64_at(record: &[u8], at: u32) -> Option<u64> {
    let at = at as usize;
    Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes an event record into a hit; `None` for another kind of
/// record or a malformed one. Its time is never less than `not_before`:
/// two CPUs can take their timestamps in the opposite order from the one
/// in which they reserved ring space, by a few nanoseconds, and the ring
/// order is the true one.
pub fn decode<'a>(
    record: &'a [u8],
    outputs: &'a [OutputInfo],
    sites: &'a [PlannedSite],
    not_before: u64,
) -> Option<Hit<'a>> {
    let id = u64_at(record, 0)? as usize;
    let OutputInfo::Event { strings, .. } = outputs.get(id)? else {
        return None;
    };
    let cookie = u64_at(record, event::COOKIE)?;
    let site = sites.get(cookie as u32 as usize)?;
    let pid_tgid = u64_at(record, event::PID_TGID)?;
    let comm = record.get(event::COMM as usize..(event::COMM + 16) as usize)?;
    let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(comm.len())];
    let needed = event::ARGS as usize
        + 8 * site.args.len()
        + strings.len() * (8 + event::STRING_LEN as usize);
    if record.len() < needed {
        return None;
    }
    let strings_at = event::ARGS + 8 * site.args.len() as u32;
    let mut args = [Arg::Unreadable; 12];
    for ((n, arg), slot) in site.args.iter().enumerate().zip(args.iter_mut()) {
        let raw = u64_at(record, event::ARGS + 8 * n as u32).unwrap_or_default();
        *slot = if arg.source.is_err() {
            Arg::Unreadable
        } else {
            match strings.iter().position(|s| s.arg == n) {
                Some(at) => {
                    let result =
                        u64_at(record, strings_at + 8 * at as u32).unwrap_or_default() as i64;
                    if result <= 0 {
                        Arg::Str(Err((result, raw)))
                    } else {
                        let start =
                            (strings_at + 8 * strings.len() as u32 + event::STRING_LEN * at as u32)
                                as usize;
                        let len = (result as usize)
                            .saturating_sub(1)
                            .min(event::STRING_LEN as usize - 1);
                        Arg::Str(Ok(record.get(start..start + len).unwrap_or_default()))
                    }
                }
                None => number(arg, raw),
            }
        };
    }
    Some(Hit {
        time_ns: u64_at(record, event::TIME)?.max(not_before),
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        comm,
        provider: &site.provider,
        name: &site.name,
        path: &site.path,
        address: site.address,
        args,
        count: site.args.len().min(12),
    })
}
fn number(arg: &PlannedArg, raw: u64) -> Arg<'static> {
    match (arg.float, arg.size) {
        (true, 4) => Arg::Float(f64::from(f32::from_bits(raw as u32))),
        (true, _) => Arg::Float(f64::from_bits(raw)),
        (false, _) if arg.signed => Arg::Signed(raw as i64),
        (false, _) => Arg::Unsigned(raw),
    }
}
