//! `funclatency`'s command line.

use std::process::ExitCode;

use crate::Sdt;

const AFTER_HELP: &str = "\
pattern:
  LIB:FUNC, where LIB is a library or program (c is libc.so.6) and FUNC a
  function's name; a * matches anything (BCC's globs), -r takes a regular
  expression. Kernel functions (FUNC alone) are not supported: sdt traces
  user space.

output:
  A log2 histogram of the calls' durations (one per function and process
  with -F, or without -p), then avg = N UNIT, total: N UNIT, count: N; after
  each interval and at Ctrl-C (or when the command or process ends). --json:
  {\"unit\", \"buckets\": [{\"low\", \"high\", \"count\"}], \"function\", \"pid\"} per
  histogram and {\"average\": [{\"avg\", \"total\", \"count\", \"unit\"}]}.

examples:
  funclatency c:read                       read()'s durations in every process, in ns
  funclatency -m -p 1234 './server:handle_*'   handlers of process 1234, in ms
  funclatency -u -i 1 -d 10 c:malloc       malloc() in us, every second for 10 s
  funclatency -F -r 'c:(read|write)$'      read() and write(), apart
  funclatency -m -c './app 5' './app:slow' a command's slow() calls";

/// Time calls of functions, as a log2 histogram (BCC's funclatency).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "funclatency [-h] [-p PID] [-c CMD] [-i INTERVAL] [-d DURATION] [-T] [-u] [-m] [-F] [-r]\n                   [-l LEVEL] [-v] [--json] [--print-program] pattern")]
pub struct Args {
    /// The functions (see below).
    #[arg(value_name = "pattern")]
    pattern: String,

    /// Trace only this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<i32>,

    /// Run CMD, trace it, and stop when it ends (as --cmd).
    #[arg(short = 'c', value_name = "CMD", conflicts_with_all = ["pid", "command"])]
    c: Option<String>,

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

    /// Microseconds.
    #[arg(short = 'u', long = "microseconds")]
    microseconds: bool,

    /// Milliseconds.
    #[arg(short = 'm', long = "milliseconds")]
    milliseconds: bool,

    /// A histogram for each function.
    #[arg(short = 'F', long = "function")]
    function: bool,

    /// The pattern is a regular expression.
    #[arg(short = 'r', long = "regexp")]
    regexp: bool,

    /// Time calls nested in traced calls up to LEVEL deep (otherwise
    /// only the innermost).
    #[arg(short = 'l', long = "level", value_name = "LEVEL",
          value_parser = clap::value_parser!(u32).range(1..))]
    level: Option<u32>,

    /// Print the program on standard error before tracing.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    #[command(flatten)]
    sdt: Sdt,
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    args.sdt.command = args.sdt.command.or(args.c);
    let options = sdt_tools::bcc::funclatency::Options {
        pattern: args.pattern,
        regex: args.regexp,
        interval: args.interval,
        duration: args.duration,
        timestamp: args.timestamp,
        microseconds: args.microseconds,
        milliseconds: args.milliseconds,
        per_function: args.function,
        level: args.level,
        verbose: args.verbose,
    };
    sdt_tools::bcc::funclatency::run(&args.sdt.common(args.pid), &options)
}
