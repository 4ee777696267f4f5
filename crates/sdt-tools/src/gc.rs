//! `sdt gc`: each garbage collection and its duration, like BCC's `ugc`.

use std::process::ExitCode;

use sdt_output::{Cell, Column};

use crate::execute::ToolJob;
use crate::pairing::UnpairedSpans;
use crate::report::{unsigned, Rows};
use crate::runtimes::Probes;
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    columns: &[
        Column::both("pid", "PID").width(7),
        Column::both("tid", "TID").width(7),
        Column::json("start_ns"),
        Column::text("START(s)").width(12).decimals(6),
        Column::json("duration_ns"),
        Column::text("TIME(us)").width(12).right().decimals(2),
    ],
    summary: "Show each garbage collection of a Java, Python or Ruby program, with its duration",
    program: include_str!("programs/gc.bt"),
    ..Tool::new("gc", "ugc", Traces::Runtime(Probes::Collections))
};

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let job = ToolJob::on_runtime(&TOOL, common, TOOL.program, |_| Vec::new())?;
    let mut columns = TOOL.columns.to_vec();
    let divisor = if options.milliseconds {
        columns[5] = columns[5].titled("TIME(ms)");
        1e6
    } else {
        1e3
    };
    let min_ns = options.min_ms.map_or(0, |ms| i128::from(ms) * 1_000_000);
    let rows = Rows::new(&TOOL, columns, move |args, clock| {
        let [pid, tid, start, took, _comm] = args else {
            return None;
        };
        // Times count from the first collection, shown or not.
        let [start_ns, start_s] = clock.since(start.as_int(), 1e9);
        let took = took.as_int();
        (took >= min_ns).then(|| {
            vec![
                unsigned(pid.as_int()),
                unsigned(tid.as_int()),
                start_ns,
                start_s,
                unsigned(took),
                Cell::Float(took as f64 / divisor),
            ]
        })
    });
    let rows = rows.slices(|args| {
        let [pid, tid, start, took, comm] = args else {
            return None;
        };
        let thread = (pid.as_int(), tid.as_int(), comm.to_text());
        let start = start.as_int();
        Some((thread, start, start + took.as_int(), "gc".to_string()))
    });
    job.run(rows.pairing(UnpairedSpans::new(
        "@collecting",
        ("collection", "collections"),
        (
            "the runtime reported no end before the next begin, or the thread ended",
            "collections that began before tracing did",
        ),
    )))
}

/// `gc`'s own options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Show only collections that took at least this many milliseconds.
    pub min_ms: Option<u64>,
    /// Durations in milliseconds instead of microseconds.
    pub milliseconds: bool,
}
