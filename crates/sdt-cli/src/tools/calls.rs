//! `sdt calls`: method calls counted, or timed with `-L`, by class and
//! method, like BCC's `ucalls`.
//!
//! Counting needs only the entries. Timing pairs each return with its
//! entry, in the kernel, by what identifies the function rather than by
//! depth alone (see `calls_latency.bt` and [`Frame`]): a return without an
//! entry, or an entry without a return, is counted on its own and shown
//! under the table, and the calls around it are still timed exactly.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sdt_output::calls::{CallStacks, Weight};
use sdt_output::flamegraph::Flamegraph;
use sdt_output::{Sink, Thread};
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::{Frame, Needs};
use super::{
    attach_points, execute, fill, interval_block, method_name, plural, prepare, Common,
    PositionalPid, Prepared, Reports, Unpaired, NAME_LEN,
};
use crate::pictures::TimelineArgs;

const COUNTS: &str = include_str!("calls.bt");
const LATENCY: &str = include_str!("calls_latency.bt");
const EVENTS: &str = include_str!("calls_events.bt");

/// Count method calls (with -L: and the time spent in them) of a Java,
/// Python, Ruby or PHP program, by class and method.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt calls -c 'python3 app.py'           calls of every function, by count\n  \
    sdt calls -L -T 10 -p 1234              the 10 slowest methods, by total time\n  \
    sdt calls -l java 5 3                    every JVM: three 5-second reports\n  \
    sdt calls -L --flamegraph fib.svg -c 'python3 fib.py'   time by call stack\n\n\
    With -L, returns without an entry and entries without a return are not\n\
    timed: they are counted and shown under the table.")]
pub struct CallsArgs {
    #[command(flatten)]
    common: Common,

    #[command(flatten)]
    options: CallsOptions,

    #[command(flatten)]
    pictures: CallPictures,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT", requires = "interval")]
    count: Option<u64>,
}

/// BCC's `ucalls [-l LANG] [-L] [-T TOP] [-m] PID [INTERVAL]`.
#[derive(Args, Debug)]
pub struct UcallsArgs {
    #[command(flatten)]
    common: Common,

    #[command(flatten)]
    options: CallsOptions,

    #[command(flatten)]
    pid: PositionalPid,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,
}

/// The options `calls` and `ucalls` share.
#[derive(Args, Debug)]
pub struct CallsOptions {
    /// Also time each call; sort by total time.
    #[arg(short = 'L', long)]
    latency: bool,

    /// Show only the top N methods.
    #[arg(short = 'T', long = "top", value_name = "N")]
    top: Option<usize>,

    /// Times in milliseconds instead of microseconds.
    #[arg(short = 'm', long)]
    milliseconds: bool,
}

pub fn run(args: CallsArgs) -> anyhow::Result<ExitCode> {
    calls(
        args.common,
        args.options,
        args.pictures,
        args.interval,
        args.count,
    )
}

/// `ucalls`: BCC's positional PID, then its INTERVAL.
pub fn ucalls(args: UcallsArgs) -> anyhow::Result<ExitCode> {
    calls(
        args.common.with_pid(args.pid),
        args.options,
        CallPictures::default(),
        args.interval,
        None,
    )
}

fn calls(
    common: Common,
    options: CallsOptions,
    pictures: CallPictures,
    interval: Option<u64>,
    count: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let detected = prepare(&common)?;
    let language = detected.language;
    let Some(calls) = &language.calls else {
        anyhow::bail!("{} has no method probes", language.name);
    };
    let report = if options.latency {
        "  print(@returns_without_entry);\n  print(@entries_without_return);\n  print(@nsecs);\n  print(@calls);\n  clear(@returns_without_entry);\n  clear(@entries_without_return);\n  clear(@nsecs);\n  clear(@calls);\n"
    } else {
        "  print(@calls);\n  clear(@calls);\n"
    };
    let mut values = vec![
        ("ENTRY", attach_points(&detected, calls.entry)),
        ("RETURN", attach_points(&detected, calls.ret)),
        ("CLASS", calls.class.to_string()),
        ("METHOD", calls.method.to_string()),
        ("INTERVAL", interval_block(interval, report)),
        ("REPORT", report.to_string()),
    ];
    if options.latency {
        values.extend(frame_values(&calls.frame));
    }
    let mut program = fill(if options.latency { LATENCY } else { COUNTS }, &values);
    if pictures.wanted() {
        program.push_str(&fill(EVENTS, &values));
    }
    let reports = Reports::new(count);
    let table = Table {
        latency: options.latency,
        top: options.top,
        milliseconds: options.milliseconds,
        json: common.target.json,
        nsecs: Vec::new(),
        unpaired: Unpaired::default(),
        reports: reports.clone(),
    };
    let stop = Some(reports);
    let prepared = Prepared::Runtime {
        detected,
        needs: Needs::MethodProbes,
    };
    if !pictures.wanted() || common.target.print_program {
        return execute(
            &common.target,
            prepared,
            &program,
            Box::new(table),
            stop,
            NAME_LEN,
        );
    }
    let weight = if options.latency {
        Weight::Time
    } else {
        Weight::Calls
    };
    let mut drawn = pictures.start(table, weight)?;
    let status = execute(
        &common.target,
        prepared,
        &program,
        Box::new(&mut drawn),
        stop,
        NAME_LEN,
    )?;
    drawn.finish(options.latency)?;
    Ok(status)
}

/// `--flamegraph` and `--timeline` of `sdt calls`.
#[derive(Args, Debug, Default)]
struct CallPictures {
    /// Also write the calls' stacks, built from the runtime's entries and
    /// returns (`<module>;main;fib;fib`), as an interactive SVG flame
    /// graph to FILE: widths by calls, or with -L by time spent.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,

    #[command(flatten)]
    timeline: TimelineArgs,
}

impl CallPictures {
    fn wanted(&self) -> bool {
        self.flamegraph.is_some() || self.timeline.timeline.is_some()
    }

    /// The sinks, made before tracing starts so that a path that cannot
    /// be written fails now.
    fn start(&self, table: Table, weight: Weight) -> anyhow::Result<Drawn> {
        let flamegraph = match &self.flamegraph {
            Some(path) => Some(crate::pictures::flamegraph(path)?),
            None => None,
        };
        Ok(Drawn {
            table,
            stacks: CallStacks::new(weight),
            flamegraph,
            timeline: self.timeline.sink([])?,
        })
    }
}

/// The table, and the pictures of the calls' entries and returns.
struct Drawn {
    table: Table,
    stacks: CallStacks,
    flamegraph: Option<Flamegraph<'static>>,
    timeline: Option<Box<dyn Sink>>,
}

impl Drawn {
    /// Writes the flame graph and closes the timeline; says what the
    /// stacks could not pair.
    fn finish(mut self, latency: bool) -> anyhow::Result<()> {
        let folded = self.stacks.finish();
        let unpaired = self.stacks.unpaired();
        if unpaired != Default::default() {
            eprintln!(
                "sdt: the call stacks hold {} without an entry and {} without a return (pictures only)",
                plural(unpaired.returns_without_entry, "return", "returns"),
                plural(unpaired.entries_without_return, "call", "calls"),
            );
        }
        if let Some(flamegraph) = self.flamegraph {
            let (title, counted) = if latency {
                ("sdt calls -L: time spent, by call stack", "ns")
            } else {
                ("sdt calls: calls, by call stack", "calls")
            };
            let mut flamegraph = flamegraph.titled(title);
            flamegraph.stacks("the calls' stacks", counted, folded);
            flamegraph.finish();
            if let Some(e) = flamegraph.error() {
                anyhow::bail!("cannot write the flame graph: {e}");
            }
        }
        if let Some(timeline) = &mut self.timeline {
            timeline.finish();
            if let Some(e) = timeline.error() {
                anyhow::bail!("cannot write the timeline: {e}");
            }
        }
        Ok(())
    }
}

impl Receiver for &mut Drawn {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [entry, pid, tid, comm, ns, class, method] = args.as_slice() else {
            return;
        };
        let name = method_name(&class.text(), &method.text());
        let comm = comm.text();
        let thread = Thread {
            pid: pid.int() as u32,
            tid: tid.int() as u32,
            comm: comm.as_bytes(),
        };
        let ns = ns.int() as u64;
        if entry.int() == 1 {
            self.stacks.entry(thread, ns, &name);
        } else {
            let timeline = self.timeline.as_mut().map(|t| &mut **t as &mut dyn Sink);
            self.stacks.exit(thread, ns, &name, timeline);
        }
    }

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        self.table.map(name, rows);
    }
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
struct Table {
    latency: bool,
    top: Option<usize>,
    milliseconds: bool,
    json: bool,
    /// `@nsecs` of the report being built.
    nsecs: Vec<MapRow>,
    /// What could not be paired, for the report being built.
    unpaired: Unpaired,
    reports: Reports,
}

/// One method's line.
struct Line {
    class: String,
    method: String,
    calls: i128,
    nsecs: i128,
}

impl Receiver for Table {
    fn printf(&mut self, _: u32, _: Vec<Datum>) {}

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        if self.reports.full() {
            return;
        }
        let by_method = |rows: Vec<MapRow>| {
            rows.into_iter()
                .map(|row| {
                    let mut keys = row.keys.into_iter().map(|k| k.text());
                    let class = keys.next().unwrap_or_default();
                    let method = keys.next().unwrap_or_default();
                    ((class, method), row.value.int().max(0) as u64)
                })
                .collect()
        };
        match name {
            "@depth" => {
                for row in rows {
                    let tid = row.keys.first().map_or(0, Datum::int);
                    self.unpaired
                        .open_at_end(tid, row.value.int().max(0) as u64);
                }
            }
            "@returns_without_entry" => self.unpaired.returns_without_entry = by_method(rows),
            "@entries_without_return" => self.unpaired.entries_without_return = by_method(rows),
            "@nsecs" => self.nsecs = rows,
            "@calls" => {
                let nsecs = std::mem::take(&mut self.nsecs);
                let unpaired = std::mem::take(&mut self.unpaired);
                self.print(rows, &nsecs, &unpaired);
                self.reports.add();
            }
            _ => {}
        }
    }
}

impl Table {
    fn print(&self, calls: Vec<MapRow>, nsecs: &[MapRow], unpaired: &Unpaired) {
        let mut lines: Vec<Line> = calls
            .into_iter()
            .map(|row| {
                let nsecs = nsecs
                    .iter()
                    .find(|n| n.keys == row.keys)
                    .map_or(0, |n| n.value.int());
                let mut keys = row.keys.into_iter().map(|k| k.text());
                Line {
                    class: keys.next().unwrap_or_default(),
                    method: keys.next().unwrap_or_default(),
                    calls: row.value.int(),
                    nsecs,
                }
            })
            .collect();
        lines.sort_by(|a, b| {
            let key = |l: &Line| if self.latency { l.nsecs } else { l.calls };
            key(b)
                .cmp(&key(a))
                .then_with(|| (&a.class, &a.method).cmp(&(&b.class, &b.method)))
        });
        if let Some(top) = self.top {
            lines.truncate(top);
        }
        let mut out = io::stdout().lock();
        if self.json {
            let rows: Vec<_> = lines
                .iter()
                .map(|l| {
                    let mut row = serde_json::json!({
                        "class": l.class, "method": l.method, "calls": l.calls as u64,
                    });
                    if self.latency {
                        row["total_ns"] = serde_json::json!(l.nsecs as u64);
                    }
                    row
                })
                .collect();
            let mut report = serde_json::json!({ "methods": rows });
            if self.latency {
                report["unpaired"] = unpaired.json();
            }
            let _ = writeln!(out, "{report}");
            return;
        }
        let unit = if self.milliseconds { "ms" } else { "us" };
        let divisor = if self.milliseconds {
            1_000_000.0
        } else {
            1_000.0
        };
        if self.latency {
            let _ = writeln!(
                out,
                "{:<50} {:>8} {:>16}",
                "METHOD",
                "# CALLS",
                format!("TIME ({unit})")
            );
        } else {
            let _ = writeln!(out, "{:<50} {:>8}", "METHOD", "# CALLS");
        }
        for l in &lines {
            let name = method_name(&l.class, &l.method);
            if self.latency {
                let time = l.nsecs as f64 / divisor;
                let _ = writeln!(out, "{name:<50} {:>8} {time:>16.2}", l.calls);
            } else {
                let _ = writeln!(out, "{name:<50} {:>8}", l.calls);
            }
        }
        if !unpaired.is_empty() {
            let _ = writeln!(out, "\nNot paired, so not in the table:");
            for line in unpaired.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        let _ = writeln!(out);
        let _ = out.flush();
    }
}
