//! `sdt stackcount`: how often each user stack reaches some probes, like
//! BCC's `stackcount` for user space.
//!
//! The tool is a program in sdt's own language, made from the probes
//! given (`--print-program` shows it): every probe counts its hits by
//! `ustack` in one map, which `sdt run` then prints as it prints any map:
//! as text, as folded stacks with `-f folded`, and as a flame graph with
//! `--flamegraph FILE`. So the stacks here and in `sdt run` are the same
//! stacks, folded by the same code.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::run::{self, RunArgs};

/// Count the user stacks that reach USDT probes, uprobes or uretprobes.
#[derive(clap::Args, Debug)]
#[command(after_help = "PROBES:\n  \
    [usdt:][TARGET:]PROVIDER:NAME    a USDT probe, as `sdt trace` takes it (globs allowed)\n  \
    uprobe:TARGET:FUNCTION           a function's entry (globs allowed)\n  \
    uretprobe:TARGET:FUNCTION        a function's return\n\n\
    Stacks are walked through frame pointers: a program built without them gives\n\
    short stacks.\n\n\
EXAMPLES:\n  \
    sdt stackcount -c ./server app:slow_path                 stacks as text, at the end\n  \
    sdt stackcount -f folded -p 1234 'libc:malloc' > s.folded\n  \
    sdt stackcount --flamegraph alloc.svg -p 1234 uprobe:libc:malloc\n  \
    sdt stackcount -P -f folded -c ./prefork-server app:request   each worker apart\n  \
    sdt stackcount --print-program -c ./server 'app:*'       the program it runs")]
pub struct StackcountArgs {
    /// Probes whose stacks to count (see below).
    #[arg(required = true, value_name = "PROBE")]
    probes: Vec<String>,

    /// Trace only these processes (and the processes they start), and
    /// stop when they have all ended.
    #[arg(short = 'p', value_name = "PID[,PID]", conflicts_with = "command")]
    pid: Option<String>,

    /// Trace only the processes in this cgroup v2 directory and below it.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,

    /// Run CMD, trace it and the processes it starts, and stop when it ends.
    #[arg(short = 'c', value_name = "CMD", long_help = crate::COMMAND_HELP)]
    command: Option<String>,

    /// Output format: text (each stack, leaf first, with its count), folded
    /// (`frame;frame count`, root first, for flame graph tools) or json.
    #[arg(short = 'f', long = "format", value_name = "FORMAT", default_value = "text",
          value_parser = crate::format_parser())]
    format: sdt_output::Format,

    /// Also write the stacks as an interactive SVG flame graph to FILE.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,

    /// Write the output to FILE.
    #[arg(short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,

    /// Count each process's stacks apart, as BCC's -P does: the command
    /// name and PID come first in the key, so they are the root frames of
    /// folded stacks and flame graphs (`server;1234;main;...`).
    #[arg(short = 'P', long = "per-process")]
    per_process: bool,

    /// Print the program the tool runs (for `sdt run`) and exit.
    #[arg(long)]
    print_program: bool,
}

pub fn run(args: StackcountArgs) -> anyhow::Result<ExitCode> {
    let program = sdt_tools::stackcount::program(&args.probes, args.per_process)?;
    if args.print_program {
        print!("{program}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut argv: Vec<OsString> = vec!["sdt run".into(), "-f".into(), args.format.name.into()];
    if let Some(pids) = args.pid {
        argv.extend(["-p".into(), pids.into()]);
    }
    if let Some(cgroup) = args.cgroup {
        argv.extend(["--cgroup".into(), cgroup.into()]);
    }
    if let Some(command) = args.command {
        argv.extend(["-c".into(), command.into()]);
    }
    if let Some(path) = args.flamegraph {
        argv.extend(["--flamegraph".into(), path.into()]);
    }
    if let Some(path) = args.output {
        argv.extend(["-o".into(), path.into()]);
    }
    argv.extend(["-e".into(), program.into()]);
    let run_args = RunArgs::try_parse_from(argv)?;
    run::run(run_args, sdt_job::Voice::Sdt)
}
