//! BCC's `stackcount`: how often each user stack reaches the functions,
//! USDT probes or tracepoints a pattern matches.
//!
//! One block counts by `ustack` at every point (by command name, process
//! and stack with `-P` or `-p`). The report shows each stack leaf first
//! with its count, least frequent first, as BCC does; with `-f`, folded
//! lines (`comm;root;...;leaf count`) for flame graphs. Only user
//! stacks: BCC's kernel stacks (and its `-K`, `-d`) are not walked.

use std::process::ExitCode;

use sdt_output::{Cell, Column, Datum, Event, Layout, MapPrint, MapValue, Sink, Stack, Table};

use super::target::{self, Point};
use super::{report_blocks, reports_in, sym, time_of_day, Maps, Program, Run};
use crate::execute::Reports;
use crate::report::Report;
use crate::Common;

/// What `stackcount` is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `[p:]LIB:FUNC`, `t:CAT:EVENT` or `u:LIB:PROBE`, with globs.
    pub pattern: String,
    /// The pattern is a regular expression (`-r`).
    pub regex: bool,
    /// Count only on this CPU (`-c`).
    pub cpu: Option<u32>,
    /// Seconds between reports (`-i`).
    pub interval: Option<u64>,
    /// Seconds to trace (`-D`).
    pub duration: Option<u64>,
    /// A time line before each report (`-T`).
    pub timestamp: bool,
    /// Frames with their offset (`-s`).
    pub offset: bool,
    /// Stacks apart for each process, with its name and PID (`-P`).
    pub per_process: bool,
    /// Frames after their address (`-v`).
    pub verbose: bool,
    /// Folded output (`-f`).
    pub folded: bool,
    /// Print the program on standard error (`--debug`).
    pub debug: bool,
}

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let points = target::pattern_points(&options.pattern, options.regex)?;
    let interval = options.interval.or(options.duration);
    let keyed = options.per_process || common.pid().is_some();
    let program = program(&points, options, keyed, interval);
    let reports = Reports::new(reports_in(interval.unwrap_or(1), options.duration));
    let report = Stacks {
        options: options.clone(),
        // With -p, BCC keys by process but shows no process line.
        process_line: options.per_process && common.pid().is_none(),
        keyed,
        maps: Maps::default(),
        reports: reports.clone(),
    };
    let banner = (!options.folded).then(|| {
        format!(
            "Tracing {} functions for \"{}\"... Hit Ctrl-C to end.",
            points.len(),
            options.pattern
        )
    });
    let mut run = Run::new(common, program);
    run.verbose = options.debug;
    run.reports = Some(reports);
    run.run(report, move |out, _| {
        if let Some(banner) = &banner {
            out.event(Event::Heading(banner));
        }
    })
}

fn program(points: &[Point], options: &Options, keyed: bool, interval: Option<u64>) -> Program {
    let attach: Vec<String> = points.iter().map(Point::attach).collect();
    let filter = options
        .cpu
        .map_or(String::new(), |cpu| format!(" /cpu == {cpu}/"));
    let key = if keyed { "comm, pid, ustack" } else { "ustack" };
    let mut program = Program::new(&format!(
        "sdt stackcount: the user stacks that reach {}",
        options.pattern
    ));
    program.add(
        &options.pattern,
        &format!(
            "{}{filter} {{\n  @stacks[{key}] = count();\n}}\n",
            attach.join(",\n")
        ),
    );
    program.add(
        &options.pattern,
        &report_blocks(interval, "  print(@stacks);\n  clear(@stacks);\n"),
    );
    program
}

/// One stack counted: its process (empty without `-P` or `-p`), frames
/// and count.
struct Counted<'a> {
    comm: String,
    pid: i128,
    stack: &'a Stack,
    count: i128,
}

/// `stackcount`'s report.
struct Stacks {
    options: Options,
    process_line: bool,
    /// Stacks are counted by process too (`-P`, `-p`).
    keyed: bool,
    maps: Maps,
    reports: Reports,
}

impl Stacks {
    fn counted<'a>(&self, map: Option<&'a MapPrint>) -> Vec<Counted<'a>> {
        static EMPTY: Stack = Stack {
            frames: Vec::new(),
            perf: false,
        };
        let mut counted: Vec<Counted<'a>> = map
            .map(|map| {
                map.rows
                    .iter()
                    .map(|row| {
                        let (comm, pid, stack) = match row.key.as_slice() {
                            [comm, pid, Datum::Stack(stack)] => {
                                (comm.to_text(), pid.as_int(), stack)
                            }
                            [Datum::Stack(stack)] => (String::new(), -1, stack),
                            _ => (String::new(), -1, &EMPTY),
                        };
                        let count = match &row.value {
                            MapValue::Number(n) => *n,
                            other => other.number(),
                        };
                        Counted {
                            comm,
                            pid,
                            stack,
                            count,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        counted.sort_by(|a, b| {
            a.count
                .cmp(&b.count)
                .then_with(|| (&a.comm, a.pid).cmp(&(&b.comm, b.pid)))
                .then_with(|| frames_of(a.stack).cmp(&frames_of(b.stack)))
        });
        counted
    }

    /// BCC's text: each stack leaf first, `comm [pid]` with `-P`, its
    /// count, a blank line.
    fn table(&self, counted: &[Counted<'_>], time: &str) -> Table {
        let rows = counted
            .iter()
            .map(|c| {
                let frames = c.stack.frames.iter().map(|f| {
                    let address = if self.options.verbose {
                        format!("{:<16x} ", f.addr)
                    } else {
                        String::new()
                    };
                    Cell::Text(format!("{address}{}", sym(f, false, self.options.offset)))
                });
                let process = if self.process_line {
                    format!("{} [{}]", c.comm, c.pid)
                } else {
                    String::new()
                };
                let mut row = vec![
                    Cell::List(frames.collect()),
                    Cell::Text(process),
                    Cell::Int(c.count),
                    Cell::List(frames_of(c.stack).into_iter().map(Cell::Text).collect()),
                ];
                if self.keyed {
                    row.extend([Cell::Text(c.comm.clone()), Cell::Int(c.pid)]);
                }
                row
            })
            .collect();
        let mut columns = vec![
            Column::text("").below("  "),
            Column::text("").below("    "),
            Column::both("count", "").below("    "),
            Column::json("frames"),
        ];
        // JSON names the process only when stacks are counted by it.
        if self.keyed {
            columns.extend([Column::json("comm"), Column::json("pid")]);
        }
        Table {
            key: "stacks",
            columns,
            rows,
            fields: vec![("time", Cell::Text(time.to_string()))],
            notes: Vec::new(),
            layout: Layout {
                above: if self.options.timestamp {
                    vec![time.to_string()]
                } else {
                    Vec::new()
                },
                blank_before: true,
                blank_between: true,
                ..Layout::default()
            },
        }
    }

    /// BCC's `-f`: `comm;root;...;leaf count`, the command name empty
    /// without `-P` or `-p`.
    fn folded(counted: &[Counted<'_>]) -> Vec<(String, i128)> {
        counted
            .iter()
            .map(|c| {
                let mut parts = vec![c.comm.clone()];
                parts.extend(frames_of(c.stack).into_iter().rev());
                (parts.join(";"), c.count)
            })
            .collect()
    }
}

/// A stack's frames by name, leaf first.
fn frames_of(stack: &Stack) -> Vec<String> {
    stack.frames.iter().map(|f| sym(f, false, false)).collect()
}

impl Report for Stacks {
    fn map(&mut self, map: &MapPrint, _: &mut dyn Sink) {
        self.maps.add(map);
    }

    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        let Some((maps, _)) = self.maps.ended(args) else {
            return;
        };
        let counted = self.counted(maps.get("@stacks"));
        let time = time_of_day();
        if self.options.folded {
            if self.options.timestamp {
                out.event(Event::Heading(&time));
            }
            out.event(Event::Stacks {
                name: "@stacks",
                counted: "hits",
                stacks: &Self::folded(&counted),
            });
        } else {
            out.event(Event::Table(&self.table(&counted, &time)));
        }
        self.reports.add();
    }

    fn end(&mut self, out: &mut dyn Sink) {
        if !self.options.folded {
            out.event(Event::Heading("Detaching..."));
        }
    }
}
