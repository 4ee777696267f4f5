//! `sdt calls`: method calls counted, or timed with `-L`, by class and
//! method, like BCC's `ucalls`.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{
    execute, fill, interval_block, prepare, probe_prefix, Common, Prepared, Reports, NAME_LEN,
};

const COUNTS: &str = include_str!("calls.bt");
const LATENCY: &str = include_str!("calls_latency.bt");

/// Count method calls (with -L: and the time spent in them) of a Java,
/// Python, Ruby or PHP program, by class and method.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt calls -c 'python3 app.py'           calls of every function, by count\n  \
    sdt calls -L -T 10 -p 1234              the 10 slowest methods, by total time\n  \
    sdt calls -l java 5 3                    every JVM: three 5-second reports")]
pub struct CallsArgs {
    #[command(flatten)]
    common: Common,

    /// Also time each call; sort by total time.
    #[arg(short = 'L', long)]
    latency: bool,

    /// Show only the top N methods.
    #[arg(short = 'T', long = "top", value_name = "N")]
    top: Option<usize>,

    /// Times in milliseconds instead of microseconds.
    #[arg(short = 'm', long)]
    milliseconds: bool,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT", requires = "interval")]
    count: Option<u64>,
}

pub fn run(args: CallsArgs) -> anyhow::Result<ExitCode> {
    let detected = prepare(&args.common)?;
    let language = detected.language;
    let Some(calls) = &language.calls else {
        anyhow::bail!("{} has no method probes", language.name);
    };
    let report = if args.latency {
        "  print(@nsecs);\n  print(@calls);\n  clear(@nsecs);\n  clear(@calls);\n"
    } else {
        "  print(@calls);\n  clear(@calls);\n"
    };
    let program = fill(
        if args.latency { LATENCY } else { COUNTS },
        &[
            ("PROBE", probe_prefix(&detected)),
            ("ENTRY", calls.entry.to_string()),
            ("RETURN", calls.ret.to_string()),
            ("CLASS", calls.class.to_string()),
            ("METHOD", calls.method.to_string()),
            ("INTERVAL", interval_block(args.interval, report)),
        ],
    );
    let reports = Reports::new(args.count);
    let table = Table {
        latency: args.latency,
        top: args.top,
        milliseconds: args.milliseconds,
        json: args.common.target.json,
        nsecs: Vec::new(),
        reports: reports.clone(),
    };
    let stop = Some(reports);
    execute(
        &args.common.target,
        Prepared::Runtime {
            detected,
            needs: Needs::MethodProbes,
        },
        &program,
        Box::new(table),
        stop,
        NAME_LEN,
    )
}

/// Builds the report from `@nsecs` and `@calls`.
struct Table {
    latency: bool,
    top: Option<usize>,
    milliseconds: bool,
    json: bool,
    /// `@nsecs` of the report being built.
    nsecs: Vec<MapRow>,
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
        match name {
            "@nsecs" => self.nsecs = rows,
            "@calls" => {
                let nsecs = std::mem::take(&mut self.nsecs);
                self.print(rows, &nsecs);
                self.reports.add();
            }
            _ => {}
        }
    }
}

impl Table {
    fn print(&self, calls: Vec<MapRow>, nsecs: &[MapRow]) {
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
            let _ = writeln!(out, "{}", serde_json::json!({ "methods": rows }));
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
            let name = if l.class.is_empty() {
                l.method.clone()
            } else {
                format!("{}.{}", l.class, l.method)
            };
            if self.latency {
                let time = l.nsecs as f64 / divisor;
                let _ = writeln!(out, "{name:<50} {:>8} {time:>16.2}", l.calls);
            } else {
                let _ = writeln!(out, "{name:<50} {:>8}", l.calls);
            }
        }
        let _ = writeln!(out);
        let _ = out.flush();
    }
}
