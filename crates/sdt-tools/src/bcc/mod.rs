//! BCC's tools for user space: `trace`, `argdist`, `funccount`,
//! `funclatency`, `stackcount` and `memleak`, with BCC's probe specs and
//! BCC's reports, for machines where BCC cannot run (it compiles C with
//! clang against kernel headers at run time).
//!
//! Each tool makes a program in sdt's own language from its options and
//! probe specs (`--print-program` shows it, to read or to run with
//! `sdt run`), runs it as every tool runs its program ([`execute`]), and
//! turns what the program prints into BCC's report: tables, rows, log2
//! histograms and headings, laid out by the output's sinks in BCC's
//! shapes, or as JSON. The command lines are `sdt-bcc`'s; what they mean
//! is here, as plain options structs.
//!
//! What BCC can do and sdt cannot is refused in one line that names it:
//! kernel functions (kprobes), since sdt attaches to user space and
//! tracepoints, and `memleak`'s kernel mode. Tracepoints (`t:CAT:EVENT`)
//! are in, with their kernel stacks.
//!
//! [`execute`]: crate::execute

pub mod argdist;
mod cexpr;
pub mod funccount;
pub mod funclatency;
pub mod memleak;
pub mod stackcount;
mod target;
pub mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

use sdt_job::{Failure, Job, Request};
use sdt_output::{Bucket, Datum, Frame, MapPrint, Sink, Stack};

use crate::execute::{execute, Reports};
use crate::report::Report;
use crate::Common;

/// A BCC tool's program, with the probe spec each part was made from, so
/// that an error the compiler finds in a part is said of its spec.
#[derive(Clone, Debug, Default)]
pub(crate) struct Program {
    text: String,
    /// `(first line, spec)` of each part, in order.
    origins: Vec<(usize, String)>,
}

impl Program {
    /// A program that starts with `comment` (`// sdt funccount: ...`).
    pub fn new(comment: &str) -> Program {
        Program {
            text: format!("// {comment}\n"),
            origins: Vec::new(),
        }
    }

    /// Adds `part` (whole lines), made from `spec`.
    pub fn add(&mut self, spec: &str, part: &str) {
        let line = self.text.lines().count() + 1;
        self.origins.push((line, spec.to_string()));
        self.text.push_str(part);
        if !part.ends_with('\n') {
            self.text.push('\n');
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The spec that the part holding `line` was made from.
    fn origin(&self, line: usize) -> Option<&str> {
        self.origins
            .iter()
            .rev()
            .find(|(first, _)| *first <= line)
            .map(|(_, spec)| spec.as_str())
    }
}

/// A BCC tool about to run: its program and how to run it.
pub(crate) struct Run<'a> {
    pub common: &'a Common,
    pub program: Program,
    /// How an error in a spec starts: `error in probe` (trace),
    /// `error parsing probe` (argdist); the spec follows in quotes.
    pub errors: &'static str,
    /// Bytes of each string, NUL included (`-Z`, `-z`).
    pub strlen: Option<u32>,
    /// Bytes of the ring buffer (`-b`).
    pub ring_size: Option<u32>,
    /// Entries of each map.
    pub map_entries: u32,
    /// Headers whose types and constants the expressions use (`-I`).
    pub includes: Vec<PathBuf>,
    /// Print the program on standard error before running it (`-v`).
    pub verbose: bool,
    /// The reports to stop after, if any.
    pub reports: Option<Reports>,
}

impl<'a> Run<'a> {
    pub fn new(common: &'a Common, program: Program) -> Run<'a> {
        Run {
            common,
            program,
            errors: "error in probe",
            strlen: None,
            ring_size: None,
            map_entries: 4096,
            includes: Vec::new(),
            verbose: false,
            reports: None,
        }
    }

    /// Compiles and runs the program (or prints it, with
    /// `--print-program`); `report` gets what it prints, `started` says
    /// that tracing has started (and of which process, when one is
    /// traced). BCC's `-p` traces that process alone,
    /// not the processes it starts; a command sdt runs is traced with
    /// its children, as everywhere in sdt.
    pub fn run(
        self,
        report: impl Report + 'static,
        started: impl FnOnce(&mut dyn Sink, Option<i32>),
    ) -> anyhow::Result<ExitCode> {
        let Run {
            common,
            program,
            errors,
            strlen,
            ring_size,
            map_entries,
            includes,
            verbose,
            reports,
        } = self;
        if common.print_program {
            print!("{}", program.text());
            return Ok(ExitCode::SUCCESS);
        }
        if verbose {
            eprint!("{}", program.text());
        }
        let defaults = common.request(program.text().to_string());
        let request = Request {
            follow: common.pid().is_none(),
            // BCC's filters apply to every probe, tracepoints included.
            scope_tracepoints: true,
            strlen,
            ring_size: ring_size.unwrap_or(defaults.ring_size),
            map_entries: Some(map_entries),
            includes,
            ..defaults
        };
        let job = Job::compile(request).map_err(|f| compile_error(f, &program, errors))?;
        job.print_warnings(false);
        let pid = job.pid();
        execute(job, common, report, reports, move |out| started(out, pid))
    }
}

/// A failure to compile a tool's program, said of the spec whose part
/// of it is wrong: `error in probe 'SPEC': MESSAGE`.
fn compile_error(failure: Failure, program: &Program, errors: &str) -> anyhow::Error {
    let origin = match &failure {
        Failure::Script {
            diagnostics, text, ..
        } => diagnostics
            .0
            .first()
            .and_then(|d| program.origin(d.line_column(text).0)),
        _ => None,
    };
    let message = failure.without_script();
    match origin {
        Some(spec) => anyhow::anyhow!("{errors} '{spec}': {message:#}"),
        None => message,
    }
}

/// What ends a report in a tool's program: the maps printed before it
/// are the report's, and `nsecs` the time it was taken.
const REPORT_END: &str = "  printf(\"%s %d\\n\", \"report\", nsecs);\n";

/// A report's blocks: every `interval` seconds (if given) and at the
/// end, `body` (the maps it prints, and what it clears) then the marker
/// of its end.
pub(crate) fn report_blocks(interval: Option<u64>, body: &str) -> String {
    let mut text = String::new();
    if let Some(seconds) = interval {
        text.push_str(&format!("interval:s:{seconds} {{\n{body}{REPORT_END}}}\n"));
    }
    text.push_str(&format!("END {{\n{body}{REPORT_END}}}\n"));
    text
}

/// The maps a tool's program printed since its last report ended.
#[derive(Default)]
pub(crate) struct Maps(Vec<MapPrint>);

impl Maps {
    pub(crate) fn add(&mut self, map: &MapPrint) {
        self.0.retain(|m| m.name != map.name);
        self.0.push(map.clone());
    }

    /// The report has ended, at the time (`nsecs`) the `printf` gives:
    /// the maps it printed, by name; `None` for another `printf`.
    pub(crate) fn ended(&mut self, args: &[Datum]) -> Option<(Reported, u64)> {
        match args {
            [Datum::Str(tag), time] if tag == b"report" => {
                Some((Reported(std::mem::take(&mut self.0)), time.as_int() as u64))
            }
            _ => None,
        }
    }
}

/// The maps of one report.
pub(crate) struct Reported(Vec<MapPrint>);

impl Reported {
    /// The map `name` (`@counts`), if it was printed with entries.
    pub(crate) fn get(&self, name: &str) -> Option<&MapPrint> {
        self.0.iter().find(|m| m.name == name)
    }

    /// The value of the map `name` without keys, 0 if it has none.
    pub(crate) fn number(&self, name: &str) -> i128 {
        self.get(name)
            .and_then(|m| m.rows.first())
            .map_or(0, |r| r.value.number())
    }
}

/// A `hist()`'s buckets as BCC's log2 slots: slot 1 holds 0 and 1, slot
/// `i` the values from 2^(i-1) to 2^i - 1; negative values, which BCC
/// reads as unsigned, the last slot.
pub(crate) fn log2_slots(buckets: &[Bucket]) -> Vec<u64> {
    let mut slots = vec![0u64; 65];
    for bucket in buckets {
        let slot = match (bucket.low, bucket.high) {
            (None, _) => 64,
            (Some(low), _) if low <= 1 => 1,
            (Some(low), _) => (127 - (low as u128).leading_zeros()) as usize + 1,
        };
        slots[slot.min(64)] += bucket.count;
    }
    let last = slots.iter().rposition(|&n| n > 0).unwrap_or(0);
    slots.truncate(last + 1);
    slots
}

/// The local time of day, as BCC's reports show it: `13:30:16`.
pub fn time_of_day() -> String {
    chrono::Local::now().format("%H:%M:%S").to_string()
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the kernel's `nsecs`.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A stack frame as BCC's `sym()` writes it: `name`, then `+0xOFF` with
/// `offset`, then ` [module]` (its file name) with `module`; an unknown
/// function is `[unknown]`, never with an offset.
pub fn sym(frame: &Frame, module: bool, offset: bool) -> String {
    let mut text = match &frame.symbol {
        Some((name, off)) if offset => format!("{name}+{off:#x}"),
        Some((name, _)) => name.clone(),
        None => "[unknown]".to_string(),
    };
    if let (true, Some(path)) = (module, &frame.module) {
        let file = path.rsplit('/').next().unwrap_or(path);
        text.push_str(&format!(" [{file}]"));
    }
    text
}

/// A frame of `stack` as BCC writes it: [`sym`], a kernel stack's
/// frames in the module `kernel` (`vfs_read+0x5 [kernel]`).
pub fn frame_sym(stack: &Stack, frame: &Frame, module: bool, offset: bool) -> String {
    if stack.kernel {
        let kernel = Frame {
            module: Some("kernel".into()),
            ..frame.clone()
        };
        sym(&kernel, module, offset)
    } else {
        sym(frame, module, offset)
    }
}

/// How many reports an interval and a duration give (BCC's loop: a
/// report each interval until the duration has passed), or `None` for
/// no limit.
pub fn reports_in(interval: u64, duration: Option<u64>) -> Option<u64> {
    duration.map(|d| d.div_ceil(interval.max(1)).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_as_bcc_s() {
        let frame = |symbol: Option<(&str, u64)>, module: Option<&str>| Frame {
            addr: 0x1234,
            symbol: symbol.map(|(n, o)| (n.to_string(), o)),
            module: module.map(str::to_string),
            build_id: None,
        };
        let known = frame(Some(("main", 0x6d)), Some("/usr/bin/allocs"));
        assert_eq!(sym(&known, true, true), "main+0x6d [allocs]");
        assert_eq!(sym(&known, false, true), "main+0x6d");
        assert_eq!(sym(&known, false, false), "main");
        let unknown = frame(None, Some("/lib/libc.so.6"));
        assert_eq!(sym(&unknown, true, true), "[unknown] [libc.so.6]");
        assert_eq!(sym(&frame(None, None), true, true), "[unknown]");
    }

    #[test]
    fn programs_know_which_spec_each_line_came_from() {
        let mut program = Program::new("sdt trace");
        program.add("u:a:b", "usdt:a:b {\n  x;\n}\n");
        program.add("p:c:d", "uprobe:c:d { y; }");
        assert_eq!(program.origin(1), None);
        assert_eq!(program.origin(3), Some("u:a:b"));
        assert_eq!(program.origin(5), Some("p:c:d"));
        assert!(program.text().ends_with("{ y; }\n"));
    }

    #[test]
    fn histogram_buckets_become_bcc_s_slots() {
        let bucket = |low: Option<i128>, high: Option<i128>, count| Bucket { low, high, count };
        let slots = log2_slots(&[
            bucket(Some(0), Some(1), 1),
            bucket(Some(1), Some(2), 2),
            bucket(Some(2), Some(4), 3),
            bucket(Some(16), Some(32), 4),
        ]);
        assert_eq!(slots, [0, 3, 3, 0, 0, 4]);
        let negative = log2_slots(&[bucket(None, Some(0), 5)]);
        assert_eq!((negative.len(), negative[64]), (65, 5));
        assert_eq!(log2_slots(&[]), [0]);
    }

    #[test]
    fn durations_make_reports_as_bcc_s_loop_does() {
        assert_eq!(reports_in(1, Some(3)), Some(3));
        assert_eq!(reports_in(2, Some(3)), Some(2));
        assert_eq!(reports_in(5, Some(3)), Some(1));
        assert_eq!(reports_in(5, None), None);
    }
}
