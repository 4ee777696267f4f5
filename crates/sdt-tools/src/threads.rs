//! `sdt threads`: threads as they start and stop, with their names, like
//! BCC's `uthreads`.

use std::process::ExitCode;

use sdt_output::{Cell, Column};

use crate::execute::Job;
use crate::report::{unsigned, Rows};
use crate::runtimes::Probes;
use crate::{Common, Tool, Traces, NAME_LEN};

pub const TOOL: Tool = Tool {
    name: "threads",
    bcc: "uthreads",
    summary: "Show the threads of a Java program as they start and stop, with their names",
    program: include_str!("programs/threads.bt"),
    traces: Traces::Runtime(Probes::Threads),
    strlen: NAME_LEN,
    columns: &[
        Column::json("time_ns"),
        Column::text("TIME(s)").width(12).decimals(6),
        Column::both("pid", "PID").width(7),
        Column::both("tid", "TID").width(7),
        Column::both("event", "EVENT").width(6),
        Column::both("name", "NAME"),
    ],
};

pub fn run(common: &Common) -> anyhow::Result<ExitCode> {
    let job = Job::on_runtime(&TOOL, common, TOOL.program, |_| Vec::new())?;
    job.run(Rows::new(&TOOL, TOOL.columns.to_vec(), |args, clock| {
        let [kind, pid, id, ns, name] = args else {
            return None;
        };
        let [time_ns, time_s] = clock.since(ns.as_int(), 1e9);
        Some(vec![
            time_ns,
            time_s,
            unsigned(pid.as_int()),
            unsigned(id.as_int()),
            Cell::Text(kind.to_text()),
            Cell::Text(name.to_text()),
        ])
    }))
}
