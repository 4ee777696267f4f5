//! BCC's `funclatency`: how long calls of functions take, as a log2
//! histogram, with the average.
//!
//! An entry probe keeps the time per thread, the return probe adds the
//! time since to the histogram (in the unit asked, divided before
//! bucketing as BCC divides) and to the total, in nanoseconds. As in
//! BCC, a call inside a traced call overwrites the outer one's start, so
//! only the innermost is timed; with `-l LEVEL`, the starts are kept by
//! depth, up to LEVEL deep, and every level is timed.

use std::process::ExitCode;

use anyhow::bail;
use sdt_output::{Cell, Column, Datum, Event, Histogram, Layout, Sink, Table};

use super::target::{self, Matcher, Point};
use super::{log2_slots, report_blocks, reports_in, time_of_day, Maps, Program, Reported, Run};
use crate::execute::Reports;
use crate::report::Report;
use crate::Common;

/// What `funclatency` is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `LIB:FUNC`, with globs.
    pub pattern: String,
    /// The pattern is a regular expression (`-r`).
    pub regex: bool,
    /// Seconds between reports (`-i`).
    pub interval: Option<u64>,
    /// Seconds to trace (`-d`).
    pub duration: Option<u64>,
    /// A time line before each report (`-T`).
    pub timestamp: bool,
    /// Microseconds (`-u`).
    pub microseconds: bool,
    /// Milliseconds (`-m`; wins over `-u`).
    pub milliseconds: bool,
    /// A histogram for each function (`-F`).
    pub per_function: bool,
    /// Time nested calls up to this deep (`-l`).
    pub level: Option<u32>,
    /// Print the program on standard error (`-v`).
    pub verbose: bool,
}

impl Options {
    /// The unit's name and nanoseconds.
    fn unit(&self) -> (&'static str, u64) {
        if self.milliseconds {
            ("msecs", 1_000_000)
        } else if self.microseconds {
            ("usecs", 1_000)
        } else {
            ("nsecs", 1)
        }
    }
}

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let pattern = &options.pattern;
    let Some((library, function)) = pattern.split_once(':') else {
        bail!(
            "{pattern}: kernel functions (kprobes) are not traced: sdt traces user space; \
             name a library or program (LIB:FUNC)"
        );
    };
    if function.contains(':') {
        bail!("unrecognized pattern format '{pattern}'");
    }
    let Some(path) = target::for_functions(library) else {
        bail!("can't resolve library {library}");
    };
    let functions = target::functions(&path, &Matcher::new(function, options.regex)?)?;
    if functions.is_empty() {
        bail!("0 functions matched by \"{pattern}\". Exiting.");
    }
    // Per function, as BCC: with -F, or for a library traced everywhere.
    let per_function = options.per_function || common.pid().is_none();
    let interval = options.interval.or(options.duration);
    let program = program(&path, &functions, options, per_function, interval);
    let reports = Reports::new(reports_in(interval.unwrap_or(1), options.duration));
    let report = Latency {
        options: options.clone(),
        maps: Maps::default(),
        reports: reports.clone(),
    };
    let banner = format!(
        "Tracing {} functions for \"{pattern}\"... Hit Ctrl-C to end.",
        functions.len()
    );
    let mut run = Run::new(common, program);
    run.verbose = options.verbose;
    run.reports = Some(reports);
    run.run(report, move |out, _| out.event(Event::Heading(&banner)))
}

fn program(
    path: &std::path::Path,
    functions: &[String],
    options: &Options,
    per_function: bool,
    interval: Option<u64>,
) -> Program {
    let points = |ret: bool| -> String {
        let points: Vec<String> = functions
            .iter()
            .map(|function| {
                let path = path.to_path_buf();
                let function = function.clone();
                match ret {
                    false => Point::Entry {
                        path,
                        function,
                        offset: 0,
                    },
                    true => Point::Return { path, function },
                }
                .attach()
            })
            .collect();
        points.join(",\n")
    };
    let (_, divisor) = options.unit();
    let key = if per_function { "[func, pid]" } else { "" };
    let indent = if options.level.is_some() {
        "    "
    } else {
        "  "
    };
    let record = format!(
        "{indent}@latency{key} = hist($latency / {divisor});\n{indent}@total = sum($latency);\n{indent}@count = count();\n"
    );
    let mut program = Program::new(&format!(
        "sdt funclatency: how long calls of {} take",
        options.pattern
    ));
    let timing = match options.level {
        None => format!(
            "{} {{\n  @start[tid] = nsecs;\n}}\n{} /has_key(@start, tid)/ {{\n  $latency = nsecs - @start[tid];\n  delete(@start, tid);\n{record}}}\n",
            points(false),
            points(true)
        ),
        // `++` first: the depth's type is known before it is read.
        Some(level) => format!(
            "{} {{\n  @depth[tid]++;\n  $depth = @depth[tid] - 1;\n  if ($depth < {level}) {{\n    @start[tid, $depth] = nsecs;\n  }}\n}}\n\
             {} /@depth[tid] > 0/ {{\n  @depth[tid]--;\n  $depth = @depth[tid];\n  if ($depth == 0) {{\n    delete(@depth, tid);\n  }}\n  if (has_key(@start, (tid, $depth))) {{\n    $latency = nsecs - @start[tid, $depth];\n    delete(@start, (tid, $depth));\n{record}  }}\n}}\n",
            points(false),
            points(true)
        ),
    };
    program.add(&options.pattern, &timing);
    program.add(
        &options.pattern,
        &report_blocks(
            interval,
            "  print(@latency);\n  print(@total);\n  print(@count);\n  clear(@latency);\n  clear(@total);\n  clear(@count);\n",
        ),
    );
    program
}

/// A histogram's function and process, with per-function keys.
type Section = (String, i128);

/// `funclatency`'s report.
struct Latency {
    options: Options,
    maps: Maps,
    reports: Reports,
}

impl Latency {
    fn report(&self, maps: &Reported, out: &mut dyn Sink) {
        let (unit, divisor) = self.options.unit();
        let time = time_of_day();
        out.event(Event::Heading(""));
        if self.options.timestamp {
            out.event(Event::Heading(&time));
        }
        let mut sections: Vec<(Option<Section>, Vec<u64>)> = maps
            .get("@latency")
            .map(|map| {
                map.rows
                    .iter()
                    .map(|row| {
                        let section = match row.key.as_slice() {
                            [func, pid] => Some((func.to_text(), pid.as_int())),
                            _ => None,
                        };
                        let slots = match &row.value {
                            sdt_output::MapValue::Buckets(buckets) => log2_slots(buckets),
                            _ => Vec::new(),
                        };
                        (section, slots)
                    })
                    .collect()
            })
            .unwrap_or_default();
        sections.sort_by(|a, b| a.0.cmp(&b.0));
        for (section, slots) in sections {
            let mut fields = vec![
                ("time", Cell::Text(time.clone())),
                ("unit", Cell::Text(unit.into())),
            ];
            let mut above = Vec::new();
            if let Some((function, pid)) = section {
                above = vec![String::new(), format!("Function = {function} [{pid}]")];
                fields.push(("function", Cell::Text(function)));
                fields.push(("pid", Cell::Int(pid)));
            }
            out.event(Event::Histogram(&Histogram {
                key: "buckets",
                label: unit.into(),
                slots,
                fields,
                above,
            }));
        }
        let count = maps.number("@count");
        if count > 0 {
            out.event(Event::Table(&average(
                maps.number("@total"),
                count,
                unit,
                divisor,
            )));
        }
    }
}

/// `avg = N UNIT, total: N UNIT, count: N`, between blank lines: the
/// total in the unit, truncated, and the average of that, as BCC
/// computes them.
fn average(total_ns: i128, count: i128, unit: &str, divisor: u64) -> Table {
    let total = (total_ns as f64 / divisor as f64) as i128;
    let average = (total as f64 / count as f64) as i128;
    let text = format!("avg = {average} {unit}, total: {total} {unit}, count: {count}");
    Table {
        key: "average",
        columns: vec![
            Column::text(""),
            Column::json("avg"),
            Column::json("total"),
            Column::json("count"),
            Column::json("unit"),
        ],
        rows: vec![vec![
            Cell::Text(text),
            Cell::Int(average),
            Cell::Int(total),
            Cell::Int(count),
            Cell::Text(unit.into()),
        ]],
        fields: Vec::new(),
        notes: Vec::new(),
        layout: Layout {
            blank_before: true,
            blank_after: true,
            ..Layout::default()
        },
    }
}

impl Report for Latency {
    fn map(&mut self, map: &sdt_output::MapPrint, _: &mut dyn Sink) {
        self.maps.add(map);
    }

    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        if let Some((maps, _)) = self.maps.ended(args) {
            self.report(&maps, out);
            self.reports.add();
        }
    }

    fn end(&mut self, out: &mut dyn Sink) {
        out.event(Event::Heading("Detaching..."));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_are_truncated_as_bcc_s() {
        let table = average(6_543_360, 476, "nsecs", 1);
        assert_eq!(
            table.rows[0][0],
            Cell::Text("avg = 13746 nsecs, total: 6543360 nsecs, count: 476".into())
        );
        let table = average(100_999_999, 5, "msecs", 1_000_000);
        assert_eq!(
            table.rows[0][0],
            Cell::Text("avg = 20 msecs, total: 100 msecs, count: 5".into())
        );
    }
}
