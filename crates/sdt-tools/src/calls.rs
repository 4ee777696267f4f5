//! `sdt calls`: method calls counted, or timed with `-L`, by class and
//! method, like BCC's `ucalls`.
//!
//! Counting needs only the entries. Timing pairs each return with its
//! entry, in the kernel, by what identifies the function rather than by
//! depth alone (see `programs/calls_latency.bt` and
//! [`Frame`]): a return without an entry, or an
//! entry without a return, is counted on its own and shown under the
//! table, and the calls around it are still timed exactly.

use std::collections::BTreeMap;
use std::process::ExitCode;

use sdt_output::calls::{CallStacks, Weight};
use sdt_output::{Cell, Column, Datum, Event, MapPrint, MapRow, Sink, Table, Thread};

use crate::execute::{interval_block, Reports, ToolJob};
use crate::pairing::{method_name, Unpaired};
use crate::report::{unsigned, Report};
use crate::runtimes::{Frame, Probes};
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    columns: &[
        Column::text("METHOD").width(50),
        Column::json("class"),
        Column::json("method"),
        Column::both("calls", "# CALLS").width(8).right(),
    ],
    summary: "Count method calls (with -L: and the time spent in them) of a Java, Python, Ruby or PHP program, by class and method",
    program: include_str!("programs/calls.bt"),
    ..Tool::new("calls", "ucalls", Traces::Runtime(Probes::Methods))
};

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let report = if options.latency {
        "  print(@returns_without_entry);\n  print(@entries_without_return);\n  print(@nsecs);\n  print(@calls);\n  clear(@returns_without_entry);\n  clear(@entries_without_return);\n  clear(@nsecs);\n  clear(@calls);\n"
    } else {
        "  print(@calls);\n  clear(@calls);\n"
    };
    let mut template = if options.latency {
        LATENCY
    } else {
        TOOL.program
    }
    .to_string();
    // The pictures, and folded stacks, are drawn from every entry and
    // return.
    let drawn = common.pictures.any() || common.format.shows_stacks;
    if drawn {
        template.push_str(EVENTS);
    }
    let reports = Reports::new(options.count);
    let job = ToolJob::on_runtime(&TOOL, common, &template, |language| {
        let mut values = vec![
            ("INTERVAL", interval_block(options.interval, report)),
            ("REPORT", report.to_string()),
        ];
        if let (true, Some(calls)) = (options.latency, &language.calls) {
            values.extend(frame_values(&calls.frame));
        }
        values
    })?;
    let mut columns = TOOL.columns.to_vec();
    if options.latency {
        let unit = if options.milliseconds {
            "TIME (ms)"
        } else {
            "TIME (us)"
        };
        columns.extend([TIME[0], TIME[1].titled(unit)]);
    }
    let table = Calls {
        columns,
        latency: options.latency,
        top: options.top,
        divisor: if options.milliseconds { 1e6 } else { 1e3 },
        nsecs: Vec::new(),
        unpaired: Unpaired::default(),
        reports: reports.clone(),
        stacks: drawn.then(|| {
            CallStacks::new(if options.latency {
                Weight::Time
            } else {
                Weight::Calls
            })
        }),
    };
    job.stopping(&reports).run(table)
}

/// The program of `-L`, which pairs and times the calls.
const LATENCY: &str = include_str!("programs/calls_latency.bt");

/// What the program adds for `--flamegraph` and `--timeline`: every
/// entry and return, from which each thread's stack of calls is built.
const EVENTS: &str = include_str!("programs/calls_events.bt");

/// The columns `-L` adds: the time spent in the calls.
const TIME: [Column; 2] = [
    Column::json("total_ns"),
    Column::text("TIME (us)").width(16).right().decimals(2),
];

/// `calls`' own options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Also time each call; sort by total time.
    pub latency: bool,
    /// Show only the top N methods.
    pub top: Option<usize>,
    /// Times in milliseconds instead of microseconds.
    pub milliseconds: bool,
    /// Print a report every INTERVAL seconds (default: once, at the end).
    pub interval: Option<u64>,
    /// Stop after COUNT reports.
    pub count: Option<u64>,
}

/// The placeholders of `calls_latency.bt` that keep a frame's identity,
/// and for Java the lengths of its names.
fn frame_values(frame: &Frame) -> Vec<(&'static str, String)> {
    let [a, b] = frame.ids;
    vec![
        ("ID_A", a.to_string()),
        ("ID_B", b.to_string()),
        (
            "LENGTHS",
            frame.lengths.map_or(String::new(), |l| format!(", {l}")),
        ),
        (
            "READ_LENGTHS",
            match frame.lengths {
                Some(_) => "      $lengths = $f.3;\n".to_string(),
                None => String::new(),
            },
        ),
        ("POPPED_CLASS", frame.class.to_string()),
        ("POPPED_METHOD", frame.method.to_string()),
    ]
}

/// Builds the report from the maps, which arrive in this order: `@depth`
/// (the calls still open, at the end only), the unpaired events,
/// `@nsecs`, then `@calls`, which closes the report.
struct Calls {
    columns: Vec<Column>,
    latency: bool,
    top: Option<usize>,
    /// Nanoseconds in the unit of the times shown.
    divisor: f64,
    /// `@nsecs` of the report being built.
    nsecs: Vec<MapRow>,
    /// What could not be paired, for the report being built.
    unpaired: Unpaired,
    reports: Reports,
    /// Each thread's calls, for `--flamegraph` and `--timeline`.
    stacks: Option<CallStacks>,
}

/// One method's line.
struct Line {
    class: String,
    method: String,
    calls: i128,
    nsecs: i128,
}

/// The class and method of a `[class, method]` key.
fn class_and_method(key: &[Datum]) -> (String, String) {
    let mut names = key.iter().map(Datum::to_text);
    (
        names.next().unwrap_or_default(),
        names.next().unwrap_or_default(),
    )
}

/// Counts by `(class, method)`.
fn by_method(map: &MapPrint) -> BTreeMap<(String, String), u64> {
    map.rows
        .iter()
        .map(|row| (class_and_method(&row.key), row.value.number().max(0) as u64))
        .collect()
}

impl Report for Calls {
    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        let Some(stacks) = &mut self.stacks else {
            return;
        };
        let [entry, pid, tid, comm, ns, class, method] = args else {
            return;
        };
        let name = method_name(&class.to_text(), &method.to_text());
        let comm = comm.to_text();
        let thread = Thread {
            pid: pid.as_int() as u32,
            tid: tid.as_int() as u32,
            comm: comm.as_bytes(),
        };
        let ns = ns.as_int() as u64;
        if entry.as_int() == 1 {
            stacks.entry(thread, ns, &name);
        } else {
            stacks.exit(thread, ns, &name, Some(out));
        }
    }

    fn end(&mut self, out: &mut dyn Sink) {
        let Some(stacks) = &mut self.stacks else {
            return;
        };
        let folded = stacks.finish();
        let unpaired = stacks.unpaired();
        if unpaired != Default::default() {
            eprintln!(
                "sdt: the call stacks hold {} returns without an entry and {} calls without a return (pictures only)",
                unpaired.returns_without_entry, unpaired.entries_without_return,
            );
        }
        let counted = if self.latency { "ns" } else { "calls" };
        out.event(Event::Stacks {
            name: "the calls' stacks",
            counted,
            stacks: &folded,
        });
    }

    fn map(&mut self, map: &MapPrint, out: &mut dyn Sink) {
        match map.name.as_str() {
            "@depth" => {
                for row in &map.rows {
                    let tid = row.key.first().map_or(0, Datum::as_int);
                    self.unpaired
                        .open_at_end(tid, row.value.number().max(0) as u64);
                }
            }
            "@returns_without_entry" => self.unpaired.returns_without_entry = by_method(map),
            "@entries_without_return" => self.unpaired.entries_without_return = by_method(map),
            "@nsecs" => self.nsecs = map.rows.clone(),
            "@calls" => {
                let table = self.table(&map.rows);
                out.event(Event::Table(&table));
                self.reports.add();
            }
            _ => {}
        }
    }
}

impl Calls {
    /// The report, from `@calls` and what came before it; ready for the
    /// next.
    fn table(&mut self, calls: &[MapRow]) -> Table {
        let nsecs = std::mem::take(&mut self.nsecs);
        let unpaired = std::mem::take(&mut self.unpaired);
        let mut lines: Vec<Line> = calls
            .iter()
            .map(|row| {
                let (class, method) = class_and_method(&row.key);
                Line {
                    class,
                    method,
                    calls: row.value.number(),
                    nsecs: nsecs
                        .iter()
                        .find(|n| n.key == row.key)
                        .map_or(0, |n| n.value.number()),
                }
            })
            .collect();
        let latency = self.latency;
        lines.sort_by(|a, b| {
            let key = |l: &Line| if latency { l.nsecs } else { l.calls };
            key(b)
                .cmp(&key(a))
                .then_with(|| (&a.class, &a.method).cmp(&(&b.class, &b.method)))
        });
        if let Some(top) = self.top {
            lines.truncate(top);
        }
        let rows = lines
            .into_iter()
            .map(|l| {
                let mut row = vec![
                    Cell::Text(method_name(&l.class, &l.method)),
                    Cell::Text(l.class),
                    Cell::Text(l.method),
                    unsigned(l.calls),
                ];
                if latency {
                    row.push(unsigned(l.nsecs));
                    row.push(Cell::Float(l.nsecs as f64 / self.divisor));
                }
                row
            })
            .collect();
        Table {
            key: "methods",
            columns: self.columns.clone(),
            rows,
            fields: Vec::new(),
            notes: if latency {
                vec![unpaired.note()]
            } else {
                Vec::new()
            },
            layout: sdt_output::Layout::sdt(),
        }
    }
}
