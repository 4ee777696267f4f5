//! BCC's `stackcount`: how often each user stack reaches the functions,
//! USDT probes or tracepoints a pattern matches.
//!
//! One block counts by stack at every point (by command name and process
//! too with `-P` or `-p`): the user stack, and at tracepoints the kernel
//! stack as well, as BCC counts both (`-K`, `-U`: one of them). The
//! report shows each stack leaf first, kernel frames before user ones,
//! with its count, least frequent first, as BCC does; with `-f`, folded
//! lines (`comm;root;...;leaf count`) for flame graphs. Uprobes and USDT
//! probes fire in user mode, where the kernel stack is empty, so there
//! only the user stack is counted.

use std::process::ExitCode;

use anyhow::bail;
use sdt_output::{Cell, Column, Datum, Event, Layout, MapPrint, Sink, Stack, Table};

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
    /// Only kernel stacks (`-K`), ...
    pub kernel_only: bool,
    /// ... only user stacks (`-U`).
    pub user_only: bool,
    /// A `--` between the kernel and user stacks (`-d`).
    pub delimited: bool,
    /// Print the program on standard error (`--debug`).
    pub debug: bool,
}

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    if options.kernel_only && options.user_only {
        bail!("-K and -U are mutually exclusive. If you want both stacks, that is the default.");
    }
    let points = target::pattern_points(&options.pattern, options.regex)?;
    let in_kernel = points.iter().all(|p| matches!(p, Point::Tracepoint { .. }));
    if options.kernel_only && !in_kernel {
        bail!(
            "-K: uprobes and USDT probes fire in user mode, where the kernel stack is empty; \
             kernel stacks are for tracepoints (t:CAT:EVENT)"
        );
    }
    let stacks = Which {
        kernel: in_kernel && !options.user_only,
        user: !options.kernel_only,
    };
    let interval = options.interval.or(options.duration);
    let keyed = options.per_process || common.pid().is_some();
    let program = program(&points, options, keyed, stacks, interval);
    let reports = Reports::new(reports_in(interval.unwrap_or(1), options.duration));
    let report = Stacks {
        options: options.clone(),
        // With -p, BCC keys by process but shows no process line.
        process_line: options.per_process && common.pid().is_none(),
        keyed,
        stacks,
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

/// Which stacks are counted.
#[derive(Clone, Copy)]
struct Which {
    kernel: bool,
    user: bool,
}

fn program(
    points: &[Point],
    options: &Options,
    keyed: bool,
    stacks: Which,
    interval: Option<u64>,
) -> Program {
    let attach: Vec<String> = points.iter().map(Point::attach).collect();
    let filter = options
        .cpu
        .map_or(String::new(), |cpu| format!(" /cpu == {cpu}/"));
    let mut key = Vec::new();
    if keyed {
        key.extend(["comm", "pid"]);
    }
    if stacks.kernel {
        key.push("kstack");
    }
    if stacks.user {
        key.push("ustack");
    }
    let key = key.join(", ");
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

/// One stack counted: its process (empty without `-P` or `-p`), its
/// kernel and user frames, and its count.
struct Counted<'a> {
    comm: String,
    pid: i128,
    kernel: Option<&'a Stack>,
    user: Option<&'a Stack>,
    count: i128,
}

impl Counted<'_> {
    /// Its frames by name, leaf first: the kernel's, then the user's.
    fn names(&self) -> (Vec<String>, Vec<String>) {
        (
            self.kernel.map(frames_of).unwrap_or_default(),
            self.user.map(frames_of).unwrap_or_default(),
        )
    }
}

/// `stackcount`'s report.
struct Stacks {
    options: Options,
    process_line: bool,
    /// Stacks are counted by process too (`-P`, `-p`).
    keyed: bool,
    stacks: Which,
    maps: Maps,
    reports: Reports,
}

impl Stacks {
    fn counted<'a>(&self, map: Option<&'a MapPrint>) -> Vec<Counted<'a>> {
        let mut counted: Vec<Counted<'a>> = map
            .map(|map| {
                map.rows
                    .iter()
                    .map(|row| {
                        let stacks = || {
                            row.key.iter().filter_map(|k| match k {
                                Datum::Stack(stack) => Some(stack),
                                _ => None,
                            })
                        };
                        let (comm, pid) = match (self.keyed, row.key.as_slice()) {
                            (true, [comm, pid, ..]) => (comm.to_text(), pid.as_int()),
                            _ => (String::new(), -1),
                        };
                        Counted {
                            comm,
                            pid,
                            kernel: stacks().find(|s| s.kernel),
                            user: stacks().find(|s| !s.kernel),
                            count: row.value.number(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        counted.sort_by(|a, b| {
            a.count
                .cmp(&b.count)
                .then_with(|| (&a.comm, a.pid).cmp(&(&b.comm, b.pid)))
                .then_with(|| a.names().cmp(&b.names()))
        });
        counted
    }

    /// BCC's text: each stack leaf first, `comm [pid]` with `-P`, its
    /// count, a blank line.
    fn table(&self, counted: &[Counted<'_>], time: &str) -> Table {
        let rows = counted
            .iter()
            .map(|c| {
                let frame = |f: &sdt_output::Frame| {
                    let address = if self.options.verbose {
                        format!("{:<16x} ", f.addr)
                    } else {
                        String::new()
                    };
                    Cell::Text(format!("{address}{}", sym(f, false, self.options.offset)))
                };
                let mut frames: Vec<Cell> = Vec::new();
                if let Some(kernel) = c.kernel {
                    frames.extend(kernel.frames.iter().map(frame));
                }
                if self.options.delimited && self.stacks.kernel && self.stacks.user {
                    frames.push(Cell::Text("  --".into()));
                }
                if let Some(user) = c.user {
                    frames.extend(user.frames.iter().map(frame));
                }
                let process = if self.process_line {
                    format!("{} [{}]", c.comm, c.pid)
                } else {
                    String::new()
                };
                let (kernel, user) = c.names();
                let mut row = vec![
                    Cell::List(frames),
                    Cell::Text(process),
                    Cell::Int(c.count),
                    Cell::List(user.into_iter().map(Cell::Text).collect()),
                ];
                if self.stacks.kernel {
                    row.push(Cell::List(kernel.into_iter().map(Cell::Text).collect()));
                }
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
        if self.stacks.kernel {
            columns.push(Column::json("kernel_frames"));
        }
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
    /// without `-P` or `-p`, the user frames then (after a `-` with
    /// `-d`) the kernel's.
    fn folded(&self, counted: &[Counted<'_>]) -> Vec<(String, i128)> {
        counted
            .iter()
            .map(|c| {
                let (kernel, user) = c.names();
                let mut parts = vec![c.comm.clone()];
                parts.extend(user.into_iter().rev());
                if self.options.delimited && self.stacks.kernel && self.stacks.user {
                    parts.push("-".into());
                }
                parts.extend(kernel.into_iter().rev());
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
                stacks: &self.folded(&counted),
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
