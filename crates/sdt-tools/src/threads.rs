//! `sdt threads`: threads as they start and stop, with their names, like
//! BCC's `uthreads`.

use std::process::ExitCode;

use sdt_output::{Cell, Column};

use crate::execute::ToolJob;
use crate::report::{unsigned, Rows};
use crate::runtimes::Probes;
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    columns: &[
        Column::json("time_ns"),
        Column::text("TIME(s)").width(12).decimals(6),
        Column::both("pid", "PID").width(7),
        Column::both("tid", "TID").width(7),
        Column::both("event", "EVENT").width(6),
        Column::both("name", "NAME"),
    ],
    summary: "Show the threads of a Java program as they start and stop, with their names",
    program: include_str!("programs/threads.bt"),
    ..Tool::new("threads", "uthreads", Traces::Runtime(Probes::Threads))
};

pub fn run(common: &Common) -> anyhow::Result<ExitCode> {
    let job = ToolJob::on_runtime(&TOOL, common, TOOL.program, |_| Vec::new())?;
    job.run(Rows::new(&TOOL, TOOL.columns.to_vec(), |args, clock| {
        let [kind, pid, id, ns, name] = args else {
            return None;
        };
        let mut row = clock.since(ns.as_int(), 1e9).to_vec();
        row.extend([pid, id].map(|n| unsigned(n.as_int())));
        row.extend([kind, name].map(|t| Cell::Text(t.to_text())));
        Some(row)
    }))
}
