//! BCC's `funccount`: calls of the functions, USDT probes or
//! tracepoints a pattern matches, counted.
//!
//! The pattern is matched here, as BCC matches it (see [`target`]), so
//! that the banner says how many were found and each gets an attach
//! point of its own in one block that counts by `probe`.

use std::collections::HashMap;
use std::process::ExitCode;

use sdt_output::{Cell, Column, Datum, Event, Layout, MapPrint, Sink, Table};

use super::target::{self, Point};
use super::{report_blocks, reports_in, time_of_day, Maps, Program, Run};
use crate::execute::Reports;
use crate::report::Report;
use crate::Common;

/// What `funccount` is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `[p:]LIB:FUNC`, `t:CAT:EVENT` or `u:LIB:PROBE`, with globs.
    pub pattern: String,
    /// The pattern is a regular expression (`-r`).
    pub regex: bool,
    /// Seconds between reports (`-i`).
    pub interval: Option<u64>,
    /// Seconds to trace (`-d`).
    pub duration: Option<u64>,
    /// A time line before each report (`-T`).
    pub timestamp: bool,
    /// Count only on this CPU (`-c`).
    pub cpu: Option<u32>,
    /// Print the program on standard error (`-D`).
    pub debug: bool,
}

/// BCC's report: `FUNC` and `COUNT`.
const COLUMNS: [Column; 2] = [
    Column::both("func", "FUNC").width(36),
    Column::both("count", "COUNT").width(8).right(),
];

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let points = target::pattern_points(&options.pattern, options.regex)?;
    let interval = options.interval.or(options.duration);
    let reports = reports_in(interval.unwrap_or(1), options.duration);
    let program = program(&points, options.cpu, interval, &options.pattern);
    let names = points
        .iter()
        .map(|p| (p.probe_name(), target::shown_name(p)))
        .collect();
    let reports = Reports::new(reports);
    let report = Counts {
        names,
        timestamp: options.timestamp,
        maps: Maps::default(),
        reports: reports.clone(),
    };
    let banner = format!(
        "Tracing {} functions for \"{}\"... Hit Ctrl-C to end.",
        points.len(),
        options.pattern
    );
    let mut run = Run::new(common, program);
    run.verbose = options.debug;
    run.reports = Some(reports);
    run.run(report, move |out, _| out.event(Event::Heading(&banner)))
}

/// One block counting by `probe` at every point; reports as asked.
fn program(points: &[Point], cpu: Option<u32>, interval: Option<u64>, pattern: &str) -> Program {
    let attach: Vec<String> = points.iter().map(Point::attach).collect();
    let filter = cpu.map_or(String::new(), |cpu| format!(" /cpu == {cpu}/"));
    let mut program = Program::new(&format!("sdt funccount: calls of {pattern}, counted"));
    program.add(
        pattern,
        &format!(
            "{}{filter} {{\n  @counts[probe] = count();\n}}\n",
            attach.join(",\n")
        ),
    );
    program.add(
        pattern,
        &report_blocks(interval, "  print(@counts);\n  clear(@counts);\n"),
    );
    program
}

/// `funccount`'s report.
struct Counts {
    /// What each probe's `probe` is, and the name the report shows.
    names: HashMap<String, String>,
    timestamp: bool,
    maps: Maps,
    reports: Reports,
}

impl Counts {
    fn table(&self, counts: Option<&MapPrint>) -> Table {
        let mut rows: Vec<(String, i128)> = counts
            .map(|map| {
                map.rows
                    .iter()
                    .map(|row| {
                        let probe = row.key.first().map(Datum::to_text).unwrap_or_default();
                        let name = self.names.get(&probe).cloned().unwrap_or(probe);
                        (name, row.value.number())
                    })
                    .filter(|(_, count)| *count > 0)
                    .collect()
            })
            .unwrap_or_default();
        rows.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let time = time_of_day();
        Table {
            key: "functions",
            columns: COLUMNS.to_vec(),
            rows: rows
                .into_iter()
                .map(|(name, count)| vec![Cell::Text(name), Cell::Int(count)])
                .collect(),
            fields: vec![("time", Cell::Text(time.clone()))],
            notes: Vec::new(),
            layout: Layout {
                above: if self.timestamp {
                    vec![time]
                } else {
                    Vec::new()
                },
                blank_before: true,
                ..Layout::default()
            },
        }
    }
}

impl Report for Counts {
    fn map(&mut self, map: &MapPrint, _: &mut dyn Sink) {
        self.maps.add(map);
    }

    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        if let Some((maps, _)) = self.maps.ended(args) {
            out.event(Event::Table(&self.table(maps.get("@counts"))));
            self.reports.add();
        }
    }

    fn end(&mut self, out: &mut dyn Sink) {
        out.event(Event::Heading("Detaching..."));
    }
}
