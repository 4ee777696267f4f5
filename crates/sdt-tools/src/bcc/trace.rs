//! BCC's `trace`: a line for each hit of the probes given, with a
//! message formatted from its arguments.
//!
//! A probe is BCC's spec, one shell word:
//! `[{p,r}]:LIB:FUNC[+OFFSET][(SIGNATURE)] [(PREDICATE)] ["FORMAT"[, ARGS]]`,
//! `u:LIB:[PROVIDER:]PROBE ...` or `t:CATEGORY:EVENT ...`. Each becomes
//! a block of the program whose predicate is the spec's (and the
//! filters' `-L`, `--uid`, `-n`; `-c`'s cgroup is the job's), and which
//! sends the probe's number, the time, CPU, process, thread, command
//! name, the format's arguments and, with `-U`, the user stack. The message is formatted
//! here, as BCC formats it in Python: each conversion casts its value
//! to its C type (`%u` of -1 is 4294967295), so `-f` filters what is
//! shown.

use std::process::ExitCode;

use anyhow::{anyhow, bail};
use regex::Regex;
use sdt_output::{Cell, Column, Datum, Event, Layout, Sink, Stack, Stream};

use super::cexpr::{self, Kind, Param, Scope};
use super::target::{self, Point};
use super::{frame_sym, time_of_day, Program, Run};
use crate::execute::Reports;
use crate::report::Report;
use crate::Common;

/// What `trace` is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The probe specs.
    pub probes: Vec<String>,
    /// Only this thread (`-L`).
    pub tid: Option<i32>,
    /// Only this user (`--uid`).
    pub uid: Option<u32>,
    /// Bytes read for `%s` (`-Z`, default 80).
    pub string_size: u32,
    /// Keep events of sdt's own process (`-S`).
    pub include_self: bool,
    /// Stop after this many events (`-M`).
    pub max_events: Option<u64>,
    /// A TIME column of seconds since the start (`-t`), ...
    pub timestamp: bool,
    /// ... since the epoch (`-u` with `-t`).
    pub unix_timestamp: bool,
    /// A TIME column of the time of day (`-T`).
    pub time: bool,
    /// A CPU column (`-C`).
    pub cpu: bool,
    /// Only commands whose name holds this (`-n`).
    pub name: Option<String>,
    /// Only messages that hold this (`-f`).
    pub msg_filter: Option<String>,
    /// The kernel stack under each event (`-K`; empty at uprobes and
    /// USDT probes, as in BCC), ...
    pub kernel_stack: bool,
    /// ... and the user stack (`-U`), ...
    pub user_stack: bool,
    /// ... each frame after its address (`-a`).
    pub address: bool,
    /// Count identical events and print them at `-M` (`-A`).
    pub aggregate: bool,
    /// Print the program on standard error (`-v`).
    pub verbose: bool,
    /// Pages of ring buffer per CPU, as BCC's `-b` (the one ring sdt has
    /// gets as many in all).
    pub buffer_pages: Option<u32>,
    /// Headers for the expressions' types and constants (`-I`).
    pub includes: Vec<std::path::PathBuf>,
}

/// One of `trace`'s probes, parsed.
#[derive(Clone, Debug)]
struct Probe {
    /// The spec as given.
    raw: String,
    kind: Kind,
    points: Vec<Point>,
    signature: Vec<Param>,
    predicate: Option<String>,
    /// The format, split at its conversions; `None` without one.
    format: Option<Vec<Piece>>,
    args: Vec<String>,
    /// What FUNC shows.
    shown: String,
}

/// A piece of a format string.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Conversion(Conversion),
}

/// BCC's conversions, each a C type its value is cast to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conversion {
    Str,
    Int,
    UInt,
    Long,
    ULong,
    Short,
    UShort,
    Hex,
    LongHex,
    Char,
    UserSymbol,
    KernelSymbol,
}

impl Conversion {
    /// `%s`'s value is a string, `%U`'s a symbol; the others a number.
    fn text(self) -> bool {
        matches!(
            self,
            Conversion::Str | Conversion::UserSymbol | Conversion::KernelSymbol
        )
    }

    /// `value` cast to the conversion's type and printed.
    fn show(self, value: &Datum) -> String {
        let n = value.as_int() as u64;
        match self {
            Conversion::Str | Conversion::UserSymbol | Conversion::KernelSymbol => value.to_text(),
            Conversion::Int => (n as i32).to_string(),
            Conversion::UInt => (n as u32).to_string(),
            Conversion::Long => (n as i64).to_string(),
            Conversion::ULong => n.to_string(),
            Conversion::Short => (n as i16).to_string(),
            Conversion::UShort => (n as u16).to_string(),
            Conversion::Hex => format!("{:x}", n as u32),
            Conversion::LongHex => format!("{n:x}"),
            Conversion::Char => char::from(n as u8).to_string(),
        }
    }
}

/// Splits BCC's format string at its conversions: `%s %d %u %ld %lu
/// %lld %llu %hd %hu %x %lx %llx %c %U`, without flags or widths; `%%`
/// is a `%`.
fn format(text: &str) -> anyhow::Result<Vec<Piece>> {
    const NAMES: [(&str, Conversion); 15] = [
        ("llu", Conversion::ULong),
        ("lld", Conversion::Long),
        ("llx", Conversion::LongHex),
        ("lu", Conversion::ULong),
        ("ld", Conversion::Long),
        ("lx", Conversion::LongHex),
        ("hu", Conversion::UShort),
        ("hd", Conversion::Short),
        ("s", Conversion::Str),
        ("u", Conversion::UInt),
        ("d", Conversion::Int),
        ("x", Conversion::Hex),
        ("c", Conversion::Char),
        ("U", Conversion::UserSymbol),
        ("K", Conversion::KernelSymbol),
    ];
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('%') {
            literal.push('%');
            rest = after;
            continue;
        }
        let Some((name, conversion)) = NAMES.iter().find(|(n, _)| after.starts_with(n)) else {
            let shown: String = after.chars().take(4).collect();
            bail!(
                "'%{shown}': BCC's trace takes %s, %d, %u, %ld, %lu, %lld, %llu, %hd, %hu, \
                 %x, %lx, %llx, %c, %K and %U, without flags or widths"
            );
        };
        if !literal.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut literal)));
        }
        pieces.push(Piece::Conversion(*conversion));
        rest = &after[name.len()..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

/// Parses a spec (BCC's grammar, in its words where it fails).
fn parse(raw: &str, pid: Option<i32>) -> anyhow::Result<Probe> {
    let head = Regex::new(r"^([^ \t(]+)(\([^(]*\))?(.*)$").expect("a valid regex");
    let text = raw.trim();
    let captures = head
        .captures(text)
        .ok_or_else(|| anyhow!("expected a probe"))?;
    let head = &captures[1];
    let signature = captures.get(2).map(|m| m.as_str());
    let rest = captures.get(3).map_or("", |m| m.as_str());
    let parts: Vec<&str> = head.split(':').collect();
    let (kind, library, last) = match parts.as_slice() {
        [function] => ("p", String::new(), *function),
        [library, function] => ("p", library.to_string(), *function),
        [kind, middle @ .., last] => (*kind, middle.join(":"), *last),
        [] => bail!("expected a probe"),
    };
    let kind = match kind {
        "" | "p" => Kind::Entry,
        "r" => Kind::Return,
        "u" => Kind::Usdt,
        "t" => Kind::Tracepoint,
        other => {
            bail!("probe type must be '', 'p', 't', 'r', or 'u', but got '{other}'")
        }
    };
    let (function, offset) = match last.split_once('+') {
        Some((function, offset)) => (function, Some(offset)),
        None => (last, None),
    };
    let offset = match offset {
        None => 0,
        Some(text) => {
            let parsed = match text.strip_prefix("0x").or(text.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.map_err(|_| {
                anyhow!("invalid offset format  '{text}', must be decimal or hexadecimal")
            })?
        }
    };
    if offset != 0 && kind != Kind::Entry {
        bail!("an offset into a function is only for entry probes (p:)");
    }
    let signature = match signature {
        Some(_) if matches!(kind, Kind::Usdt | Kind::Tracepoint) => bail!(
            "USDT and tracepoint probes can't have a function signature; use arg1, arg2, ... instead"
        ),
        Some(text) => cexpr::signature(&text[1..text.len() - 1])?,
        None => Vec::new(),
    };
    let (predicate, action) = predicate(rest)?;
    let (format, args) = action_of(action)?;
    let (points, shown) = points(kind, &library, function, offset, pid)?;
    Ok(Probe {
        raw: raw.to_string(),
        kind,
        points,
        signature,
        predicate,
        format,
        args,
        shown,
    })
}

/// The predicate in parentheses at the start of `rest`, if any, and what
/// follows it.
fn predicate(rest: &str) -> anyhow::Result<(Option<String>, &str)> {
    let rest = rest.trim_start();
    if !rest.starts_with('(') {
        return Ok((None, rest));
    }
    let mut depth = 0;
    for (at, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Ok((Some(rest[1..at].to_string()), &rest[at + 1..]));
                }
            }
            _ => {}
        }
    }
    bail!("unmatched end of predicate")
}

/// The format string and its arguments: the first `"..."`, then what
/// follows its `,`, split at each `,` not right after a `"`.
fn action_of(action: &str) -> anyhow::Result<(Option<Vec<Piece>>, Vec<String>)> {
    let action = action.trim();
    if action.is_empty() {
        return Ok((None, Vec::new()));
    }
    let quoted = Regex::new(r#"^[^"]*"([^"]*)",?(.*)$"#).expect("a valid regex");
    let captures = quoted
        .captures(action)
        .ok_or_else(|| anyhow!("expected format string in \"s"))?;
    let pieces = format(&captures[1])?;
    let mut args = Vec::new();
    let mut current = String::new();
    let mut previous = ' ';
    for c in captures[2].chars() {
        if c == ',' && previous != '"' {
            args.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        previous = c;
    }
    args.push(current);
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    let conversions = pieces
        .iter()
        .filter(|p| matches!(p, Piece::Conversion(_)))
        .count();
    if conversions != args.len() {
        bail!(
            "the format has {conversions} conversions but {} arguments follow it",
            args.len()
        );
    }
    Ok((Some(pieces), args))
}

/// Where a probe goes, and what FUNC shows for it.
fn points(
    kind: Kind,
    library: &str,
    function: &str,
    offset: u64,
    pid: Option<i32>,
) -> anyhow::Result<(Vec<Point>, String)> {
    match kind {
        Kind::Entry | Kind::Return => {
            let point = target::function_point(kind == Kind::Return, library, function, offset)?;
            Ok((vec![point], function.to_string()))
        }
        Kind::Usdt => {
            let (library, probe) = match library.split_once(':') {
                Some((library, provider)) => (library, format!("{provider}:{function}")),
                None => (library, function.to_string()),
            };
            Ok((target::usdt_points(library, &probe, pid)?, probe))
        }
        Kind::Tracepoint => {
            if library.contains(':') || library.is_empty() {
                bail!("a tracepoint is t:CATEGORY:EVENT");
            }
            let point = Point::Tracepoint {
                category: library.to_string(),
                event: function.to_string(),
            };
            Ok((vec![point], function.to_string()))
        }
    }
}

/// Builds the program: a block for each probe.
fn program(probes: &[Probe], options: &Options, common: &Common) -> anyhow::Result<Program> {
    let mut filters = Vec::new();
    if let Some(tid) = options.tid {
        filters.push(format!("tid == {tid}"));
    }
    if let Some(uid) = options.uid {
        filters.push(format!("uid == {uid}"));
    }
    if let Some(name) = &options.name {
        filters.push(format!("strcontains(comm, {})", crate::quoted(name)));
    }
    if !options.include_self && options.tid.is_none() && common.pid().is_none() {
        filters.push(format!("pid != {}", std::process::id()));
    }
    let mut program = Program::new("sdt trace (BCC's): a line for each hit");
    for (n, probe) in probes.iter().enumerate() {
        let scope = Scope::new(probe.kind, &probe.signature);
        let error = |e: anyhow::Error| anyhow!("error in probe '{}': {e}", probe.raw);
        let mut conditions = filters.clone();
        if let Some(predicate) = &probe.predicate {
            conditions.insert(0, cexpr::translate(predicate, &scope).map_err(error)?);
        }
        let mut values = vec![
            n.to_string(),
            "nsecs".into(),
            "cpu".into(),
            "pid".into(),
            "tid".into(),
            "comm".into(),
        ];
        let conversions = probe.format.iter().flatten().filter_map(|p| match p {
            Piece::Conversion(c) => Some(*c),
            Piece::Text(_) => None,
        });
        for (conversion, arg) in conversions.zip(&probe.args) {
            let expr = cexpr::translate(arg, &scope).map_err(error)?;
            values.push(match conversion {
                Conversion::Str => format!("str({expr}, {})", options.string_size),
                Conversion::UserSymbol => format!("usym({expr})"),
                Conversion::KernelSymbol => format!("ksym({expr})"),
                _ => expr,
            });
        }
        if options.user_stack {
            values.push("ustack".into());
        }
        if options.kernel_stack {
            values.push("kstack".into());
        }
        let kinds: Vec<&str> = std::iter::repeat_n("%d", 5)
            .chain(std::iter::once("%s"))
            .chain(probe.format.iter().flatten().filter_map(|p| match p {
                Piece::Conversion(c) if c.text() => Some("%s"),
                Piece::Conversion(_) => Some("%d"),
                Piece::Text(_) => None,
            }))
            .chain(options.user_stack.then_some("%s"))
            .chain(options.kernel_stack.then_some("%s"))
            .collect();
        let points: Vec<String> = probe.points.iter().map(Point::attach).collect();
        let predicate = match conditions.as_slice() {
            [] => String::new(),
            some => format!(
                " /{}/",
                some.iter()
                    .map(|c| format!("({c})"))
                    .collect::<Vec<_>>()
                    .join(" && ")
            ),
        };
        program.add(
            &probe.raw,
            &format!(
                "{}{predicate} {{\n  printf(\"{}\\n\", {});\n}}\n",
                points.join(",\n"),
                kinds.join(" "),
                values.join(", ")
            ),
        );
    }
    Ok(program)
}

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let probes = options
        .probes
        .iter()
        .map(|raw| parse(raw, common.pid()).map_err(|e| anyhow!("error in probe '{raw}': {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let program = program(&probes, options, common)?;
    let reports = options.max_events.map(|n| Reports::new(Some(n)));
    let stream = stream(&probes, options);
    let start = (super::monotonic_ns(), unix_now());
    let report = Trace {
        probes: probes
            .iter()
            .map(|p| (p.shown.clone(), p.format.clone()))
            .collect(),
        options: options.clone(),
        stream: stream.clone(),
        start,
        reports: reports.clone(),
        aggregated: Vec::new(),
        printed_aggregate: false,
    };
    let string_size = options.string_size.clamp(1, 4095);
    let mut run = Run::new(common, program);
    run.strlen = Some(string_size + 1);
    run.ring_size = options.buffer_pages.map(ring_size);
    run.includes = options.includes.clone();
    run.verbose = options.verbose;
    run.reports = reports;
    run.run(report, move |out, _| out.event(Event::Row(&stream, &[])))
}

/// BCC's per-CPU pages as one ring buffer: as many pages in all, a power
/// of two between 4 KiB and 1 GiB.
fn ring_size(pages: u32) -> u32 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let bytes = u64::from(pages.max(1)) * 4096 * cpus;
    bytes.next_power_of_two().clamp(4096, 1 << 30) as u32
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// BCC's columns: `[TIME] [CPU] PID TID COMM FUNC -`, the stack under
/// each event with `-U`, the count under each with `-A`.
fn stream(probes: &[Probe], options: &Options) -> Stream {
    let mut columns = Vec::new();
    if options.timestamp || options.time {
        let width = if options.timestamp && options.unix_timestamp {
            17
        } else {
            8
        };
        columns.push(Column::text("TIME").width(width));
    }
    columns.push(Column::json("time_ns"));
    columns.push(if options.cpu {
        Column::both("cpu", "CPU").width(3)
    } else {
        Column::json("cpu")
    });
    let any_format = probes.iter().any(|p| p.format.is_some());
    columns.extend([
        Column::both("pid", "PID").width(7),
        Column::both("tid", "TID").width(7),
        Column::both("comm", "COMM").width(15),
        Column::both("func", "FUNC").width(16),
        Column::both("message", if any_format { "-" } else { "" }),
    ]);
    let stacks = options.user_stack || options.kernel_stack;
    if stacks {
        columns.push(Column::text("").below("        "));
    }
    if options.kernel_stack {
        columns.push(Column::json("kernel_stack"));
    }
    if options.user_stack {
        columns.push(Column::json("user_stack"));
    }
    if options.aggregate {
        columns.push(Column::text("").below(""));
        columns.push(Column::json("count"));
    }
    Stream {
        name: "trace",
        columns,
        layout: Layout {
            blank_between: stacks || options.aggregate,
            ..Layout::default()
        },
    }
}

/// `trace`'s report: a row for each event (or, with `-A`, the events
/// counted).
struct Trace {
    /// What FUNC shows for each probe, and its format.
    probes: Vec<(String, Option<Vec<Piece>>)>,
    options: Options,
    stream: Stream,
    /// `CLOCK_MONOTONIC` and the time since the epoch at the start.
    start: (u64, f64),
    reports: Option<Reports>,
    /// With `-A`: each event's cells and how often it came.
    aggregated: Vec<(Vec<Cell>, u64)>,
    printed_aggregate: bool,
}

impl Trace {
    /// The TIME column's text.
    fn time(&self, ns: u64) -> String {
        let since = ns.saturating_sub(self.start.0) as f64 / 1e9;
        let (text, width) = match (self.options.timestamp, self.options.unix_timestamp) {
            (true, true) => (format!("{:.6}", self.start.1 + since), 17),
            (true, false) => (format!("{since:.6}"), 8),
            (false, _) => (time_of_day(), 8),
        };
        text.chars().take(width).collect()
    }

    /// The message of probe `n` from its values.
    fn message(&self, n: usize, values: &[Datum]) -> String {
        let Some(Some(pieces)) = self.probes.get(n).map(|p| &p.1) else {
            return String::new();
        };
        let mut values = values.iter();
        pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.clone(),
                Piece::Conversion(c) => values.next().map(|v| c.show(v)).unwrap_or_default(),
            })
            .collect()
    }

    /// The row of an event, from the values the program sent.
    fn row(&self, args: &[Datum]) -> Option<Vec<Cell>> {
        let [index, ns, cpu, pid, tid, comm, rest @ ..] = args else {
            return None;
        };
        let n = index.as_int() as usize;
        let ns = ns.as_int() as u64;
        let message = self.message(n, rest);
        if let Some(filter) = &self.options.msg_filter {
            if !message.contains(filter.as_str()) {
                return None;
            }
        }
        let mut row = Vec::new();
        if self.options.timestamp || self.options.time {
            row.push(Cell::Text(self.time(ns)));
        }
        row.extend([
            Cell::Int(ns.into()),
            Cell::Int(cpu.as_int()),
            Cell::Int(pid.as_int()),
            Cell::Int(tid.as_int()),
            Cell::Text(comm.to_text()),
            Cell::Text(self.probes.get(n).map(|p| p.0.clone()).unwrap_or_default()),
            Cell::Text(message),
        ]);
        // The stacks come last: the user stack, then the kernel's.
        let mut stacks = rest.iter().rev().filter_map(|d| match d {
            Datum::Stack(stack) => Some(stack),
            _ => None,
        });
        let kernel = self.options.kernel_stack.then(|| stacks.next()).flatten();
        let user = self.options.user_stack.then(|| stacks.next()).flatten();
        let shown: Vec<(&Stack, &sdt_output::Frame)> = kernel
            .into_iter()
            .chain(user)
            .flat_map(|stack| stack.frames.iter().map(move |f| (stack, f)))
            .collect();
        if !shown.is_empty() || self.options.kernel_stack || self.options.user_stack {
            let text = shown.iter().map(|(stack, f)| {
                let address = if self.options.address {
                    format!("{:>16x} ", f.addr)
                } else {
                    String::new()
                };
                Cell::Text(format!("{address}{}", frame_sym(stack, f, true, true)))
            });
            row.push(Cell::List(text.collect()));
        }
        let json = |stack: Option<&Stack>| {
            let frames = stack.map(|s| s.frames.iter().map(move |f| frame_sym(s, f, true, true)));
            Cell::List(frames.into_iter().flatten().map(Cell::Text).collect())
        };
        if self.options.kernel_stack {
            row.push(json(kernel));
        }
        if self.options.user_stack {
            row.push(json(user));
        }
        Some(row)
    }

    /// `-A`: the events counted, most frequent first.
    fn print_aggregate(&mut self, out: &mut dyn Sink) {
        if self.printed_aggregate {
            return;
        }
        self.printed_aggregate = true;
        let mut counted = std::mem::take(&mut self.aggregated);
        counted.sort_by_key(|c| std::cmp::Reverse(c.1));
        for (mut row, count) in counted {
            row.push(Cell::Text(format!("-->COUNT {count}")));
            row.push(Cell::Int(count.into()));
            out.event(Event::Row(&self.stream, &row));
        }
    }
}

impl Report for Trace {
    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        let Some(row) = self.row(args) else { return };
        if let Some(reports) = &self.reports {
            reports.add();
        }
        if self.options.aggregate {
            // The same event is the same text: the time and thread are
            // left out of what is compared, as BCC's -A compares lines
            // whose time it does not print unless asked.
            match self
                .aggregated
                .iter_mut()
                .find(|(r, _)| same_event(r, &row))
            {
                Some((_, count)) => *count += 1,
                None => self.aggregated.push((row, 1)),
            }
            if self.reports.as_ref().is_some_and(Reports::full) {
                self.print_aggregate(out);
            }
        } else {
            out.event(Event::Row(&self.stream, &row));
        }
    }

    fn end(&mut self, out: &mut dyn Sink) {
        if self.options.aggregate {
            self.print_aggregate(out);
        }
    }
}

/// Two events' rows say the same: every cell text shows but the time
/// sdt keeps for JSON.
fn same_event(a: &[Cell], b: &[Cell]) -> bool {
    let time_ns = |row: &[Cell]| -> Vec<Cell> {
        let mut row = row.to_vec();
        let at = usize::from(row.first().is_some_and(|c| matches!(c, Cell::Text(_))));
        if let Some(cell) = row.get_mut(at) {
            *cell = Cell::Int(0);
        }
        row
    };
    time_ns(a) == time_ns(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_split_at_bcc_s_conversions() {
        assert_eq!(
            format("%u bytes, 100%% %s").unwrap(),
            [
                Piece::Conversion(Conversion::UInt),
                Piece::Text(" bytes, 100% ".into()),
                Piece::Conversion(Conversion::Str),
            ]
        );
        assert_eq!(
            format("%llx-%hd").unwrap(),
            [
                Piece::Conversion(Conversion::LongHex),
                Piece::Text("-".into()),
                Piece::Conversion(Conversion::Short),
            ]
        );
        assert!(format("%5d").unwrap_err().to_string().contains("'%5d'"));
        assert_eq!(
            format("%K").unwrap(),
            [Piece::Conversion(Conversion::KernelSymbol)]
        );
    }

    #[test]
    fn conversions_cast_as_c_does() {
        let minus_one = Datum::int(-1);
        assert_eq!(Conversion::UInt.show(&minus_one), "4294967295");
        assert_eq!(Conversion::Int.show(&Datum::int(0xffff_ffff)), "-1");
        assert_eq!(Conversion::Hex.show(&Datum::int(0x1_0000_00ff)), "ff");
        assert_eq!(
            Conversion::LongHex.show(&Datum::int(0x1_0000_00ff)),
            "1000000ff"
        );
        assert_eq!(Conversion::UShort.show(&minus_one), "65535");
        assert_eq!(Conversion::Char.show(&Datum::int(65)), "A");
    }

    #[test]
    fn specs_split_as_bcc_splits_them() {
        let (found, action) = predicate(" (arg1 > (2 + 1)) \"%d\", arg1").unwrap();
        assert_eq!(found.as_deref(), Some("arg1 > (2 + 1)"));
        let (format, args) = action_of(action).unwrap();
        assert_eq!(format.unwrap().len(), 1);
        assert_eq!(args, ["arg1"]);
        assert_eq!(
            predicate("(a > b").unwrap_err().to_string(),
            "unmatched end of predicate"
        );
        let (_, args) = action_of("\"%s %d\" , arg1,arg2 ").unwrap();
        assert_eq!(args, ["arg1", "arg2"]);
        assert!(action_of("arg1")
            .unwrap_err()
            .to_string()
            .contains("expected format string"));
        assert!(action_of("\"%d %d\", arg1").is_err());
        let error = |spec: &str| parse(spec, None).unwrap_err().to_string();
        assert_eq!(
            error("x:a:b"),
            "probe type must be '', 'p', 't', 'r', or 'u', but got 'x'"
        );
        assert!(error("do_sys_open").contains("kernel functions"));
        assert!(error("r::do_sys_open").contains("kernel functions"));
        assert!(error("u:c:probe(int x)").contains("can't have a function signature"));
        assert_eq!(
            error("p:c:malloc+zz"),
            "invalid offset format  'zz', must be decimal or hexadecimal"
        );
        assert_eq!(
            error("p:no-such-library-at-all:f"),
            "unable to find library no-such-library-at-all"
        );
    }

    #[test]
    fn ring_buffers_hold_bcc_s_pages() {
        assert!(ring_size(64) >= 64 * 4096);
        assert!(ring_size(64).is_power_of_two());
        assert_eq!(ring_size(u32::MAX), 1 << 30);
    }
}
