//! `stackcount`'s command line (BCC's; `sdt stackcount` has its own
//! too, which `form` tells apart).

use std::process::ExitCode;

use crate::Sdt;

const AFTER_HELP: &str = "\
patterns:
  [p:]LIB:FUNC      functions of a library or program (c is libc.so.6)
  t:CAT:EVENT       kernel tracepoints
  u:LIB:PROBE       USDT probes of LIB, matched on the probe's name
  A * matches anything (BCC's globs); -r takes a regular expression. Kernel
  functions (FUNC, p::FUNC, kprobes) are not supported: sdt attaches to user
  space and tracepoints. At tracepoints both the kernel and the user stack
  are counted (-K, -U: one); uprobes and USDT probes fire in user mode,
  where only the user stack is. User stacks are walked through frame
  pointers.

output:
  Each stack, leaf first (kernel frames, -d a --, user frames), with its
  count, least frequent first; with -P its process as `comm [pid]`; with -f
  folded lines `comm;root;...;leaf count` (comm empty without -P or -p; user
  frames, then the kernel's) for flamegraph.pl, inferno or speedscope.
  --json: one {\"time\", \"stacks\": [{\"count\", \"frames\", \"kernel_frames\",
  \"comm\", \"pid\"}]} object per report, frames leaf first.

examples:
  stackcount c:malloc                      stacks that call malloc()
  stackcount -f -p 1234 'u:./app:probe' > out.folded
  stackcount -P -D 10 './server:handle_*'  for 10 s, each process apart
  stackcount -s -v 't:syscalls:sys_enter_write'
  sdt stackcount --cmd ./app -f 'u:./app:slow'";

/// Count the user stacks that reach functions, USDT probes or
/// tracepoints (BCC's stackcount).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "stackcount [-h] [-p PID] [-c CPU] [-i INTERVAL] [-D DURATION] [-T] [-r] [-s] [-P] [-U]\n                  [-v] [-d] [-f] [--debug] [--cmd CMD] [--json] [--print-program] pattern")]
pub struct Args {
    /// What to count the stacks of (see below).
    #[arg(value_name = "pattern")]
    pattern: String,

    /// Trace only this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<i32>,

    /// Count only on this CPU.
    #[arg(short = 'c', long = "cpu", value_name = "CPU")]
    cpu: Option<u32>,

    /// Print a report every INTERVAL seconds.
    #[arg(short = 'i', long = "interval", value_name = "INTERVAL",
          value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,

    /// Trace for DURATION seconds.
    #[arg(short = 'D', long = "duration", value_name = "DURATION",
          value_parser = clap::value_parser!(u64).range(1..))]
    duration: Option<u64>,

    /// The time of day before each report.
    #[arg(short = 'T', long = "timestamp")]
    timestamp: bool,

    /// The pattern is a regular expression.
    #[arg(short = 'r', long = "regexp")]
    regexp: bool,

    /// Each frame with its offset into its function.
    #[arg(short = 's', long = "offset")]
    offset: bool,

    /// Count each process's stacks apart, shown as `comm [pid]`.
    #[arg(short = 'P', long = "perpid")]
    perpid: bool,

    /// Kernel stacks only (tracepoints: uprobes and USDT probes fire in
    /// user mode, where the kernel stack is empty).
    #[arg(short = 'K', long = "kernel-stacks-only")]
    kernel_only: bool,

    /// User stacks only.
    #[arg(short = 'U', long = "user-stacks-only")]
    user_only: bool,

    /// Each frame after its address.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    /// A -- between the kernel and the user stack, when both are counted.
    #[arg(short = 'd', long = "delimited")]
    delimited: bool,

    /// Folded output, for flame graphs.
    #[arg(short = 'f', long = "folded")]
    folded: bool,

    /// Print the program on standard error before tracing.
    #[arg(long = "debug")]
    debug: bool,

    #[command(flatten)]
    sdt: Sdt,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = sdt_tools::bcc::stackcount::Options {
        pattern: args.pattern,
        regex: args.regexp,
        cpu: args.cpu,
        interval: args.interval,
        duration: args.duration,
        timestamp: args.timestamp,
        offset: args.offset,
        per_process: args.perpid,
        verbose: args.verbose,
        folded: args.folded,
        debug: args.debug,
        kernel_only: args.kernel_only,
        user_only: args.user_only,
        delimited: args.delimited,
    };
    let folded = args.folded && !args.sdt.json;
    let mut common = args.sdt.common(args.pid);
    if folded {
        common.format = sdt_output::Format::named("folded").unwrap_or(common.format);
    }
    sdt_tools::bcc::stackcount::run(&common, &options)
}
