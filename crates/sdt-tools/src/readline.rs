//! `sdt readline`: the lines every bash reads interactively, through a
//! uretprobe on bash's `readline`, like BCC's `bashreadline`.

use std::path::PathBuf;
use std::process::ExitCode;

use sdt_output::{Cell, Column};

use crate::execute::{fill, ToolJob};
use crate::report::{unsigned, Rows};
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    columns: &[
        Column::json("time_ns"),
        Column::text("TIME(s)").width(12).decimals(6),
        Column::both("pid", "PID").width(7),
        Column::both("command", "COMMAND"),
    ],
    summary: "Show the commands bash reads interactively, with the PID of the shell",
    program: include_str!("programs/readline.bt"),
    ..Tool::new("readline", "bashreadline", Traces::Programs)
};

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let bash = match &options.exe {
        Some(exe) => exe.clone(),
        None => sdt_elf::resolve("bash")?,
    };
    let job = ToolJob {
        tool: &TOOL,
        common,
        program: fill(TOOL.program, &[("BASH", bash.display().to_string())]),
        language: None,
        shown: bash.display().to_string(),
        reports: None,
    };
    job.run(Rows::new(&TOOL, TOOL.columns.to_vec(), |args, clock| {
        let [pid, ns, line] = args else {
            return None;
        };
        let [time_ns, time_s] = clock.since(ns.as_int(), 1e9);
        Some(vec![
            time_ns,
            time_s,
            unsigned(pid.as_int()),
            Cell::Text(line.to_text()),
        ])
    }))
}

/// `readline`'s own options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The file whose `readline` is probed: bash (default: bash in
    /// `PATH`), or the libreadline.so a bash built with the system's
    /// readline loads.
    pub exe: Option<PathBuf>,
}
