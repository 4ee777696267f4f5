//! `funccount`'s command line.

use std::process::ExitCode;

use crate::Sdt;

const AFTER_HELP: &str = "\
patterns:
  [p:]LIB:FUNC      functions of a library or program (c is libc.so.6)
  t:CAT:EVENT       kernel tracepoints, matched on CAT:EVENT
  u:LIB:PROBE       USDT probes of LIB, matched on the probe's name
  A * matches anything (BCC's globs: other characters are a regular
  expression's); -r takes a regular expression, matched from the start.
  Kernel functions (FUNC, p::FUNC) are not supported: sdt traces user space.

output:
  FUNC and COUNT, after each interval and at Ctrl-C (or when the --cmd
  command or the -p process ends), least called first; --json: one
  {\"time\", \"functions\": [{\"func\", \"count\"}]} object per report.

examples:
  funccount 'c:malloc*'                  calls of libc's malloc, malloc_usable_size, ...
  funccount -i 1 -d 5 -r 'c:(read|write)$'   read() and write(), every second for 5 s
  funccount -p 1234 'u:/usr/bin/python3.11:function__*'   Python's function probes
  funccount 't:sched:sched_process_*'    process tracepoints
  sdt funccount --cmd ./app './app:handle_*'";

/// Count calls of functions, USDT probes or tracepoints (BCC's
/// funccount).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "funccount [-h] [-p PID] [-i INTERVAL] [-d DURATION] [-T] [-r] [-D] [-c CPU] [--cmd CMD]\n                 [--json] [--print-program] pattern")]
pub struct Args {
    /// What to count (see below).
    #[arg(value_name = "pattern")]
    pattern: String,

    /// Trace only this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<i32>,

    /// Print a report every INTERVAL seconds.
    #[arg(short = 'i', long = "interval", value_name = "INTERVAL",
          value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,

    /// Trace for DURATION seconds.
    #[arg(short = 'd', long = "duration", value_name = "DURATION",
          value_parser = clap::value_parser!(u64).range(1..))]
    duration: Option<u64>,

    /// The time of day before each report.
    #[arg(short = 'T', long = "timestamp")]
    timestamp: bool,

    /// The pattern is a regular expression.
    #[arg(short = 'r', long = "regexp")]
    regexp: bool,

    /// Print the program on standard error before tracing.
    #[arg(short = 'D', long = "debug")]
    debug: bool,

    /// Count only calls on this CPU.
    #[arg(short = 'c', long = "cpu", value_name = "CPU")]
    cpu: Option<u32>,

    #[command(flatten)]
    sdt: Sdt,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = sdt_tools::bcc::funccount::Options {
        pattern: args.pattern,
        regex: args.regexp,
        interval: args.interval,
        duration: args.duration,
        timestamp: args.timestamp,
        cpu: args.cpu,
        debug: args.debug,
    };
    sdt_tools::bcc::funccount::run(&args.sdt.common(args.pid), &options)
}
