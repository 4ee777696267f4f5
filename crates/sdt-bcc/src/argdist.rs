//! `argdist`'s command line.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::Sdt;

const AFTER_HELP: &str = "\
specifiers:
  {p,r,t,u}:{LIB,CATEGORY}:FUNCTION(SIGNATURE)[:TYPE[,TYPE...]:EXPR[,EXPR...][:FILTER]][#LABEL]
  p:LIB:FUNC(...)   a function's entry; the signature names its parameters
  r:LIB:FUNC(...)   its return: $retval, $latency (ns since the entry),
                    $entry(PARAM) (a parameter's value at the entry)
  t:CAT:EVENT()     a kernel tracepoint: args->FIELD
  u:LIB:PROBE()     a USDT probe: arg1, arg2, ...
  The parentheses are needed even when empty. TYPEs are C's (int, u64,
  size_t, char* for strings); EXPRs and the FILTER are C, with $PID, $COMM
  and STRCMP(\"text\", EXPR). Without TYPE and EXPR, -C counts the calls and
  r: probes take int:$retval. Kernel functions (p::FUNC) are not supported:
  sdt traces user space.

output:
  Every interval: [HH:MM:SS], then each -C probe's label (or specifier)
  and its values counted, least frequent first, then each -H probe's log2
  histogram. At the end of tracing (Ctrl-C, or the end of the --cmd
  command or -p process) what was counted since the last report is shown
  too. --json: {\"time\", \"probe\", \"counts\": [{\"count\", \"event\",
  \"values\"}]} and {\"time\", \"probe\", \"buckets\": [...]} objects.

examples:
  argdist -C 'p:c:malloc(size_t size):size_t:size'        malloc() sizes, counted
  argdist -H 'p:c:malloc(size_t size):size_t:size' -i 5   as a histogram, every 5 s
  argdist -C 'r:c:read():int:$retval#read results' -n 3
  argdist -H 'r:c:write(int fd):u64:$latency/1000:fd == 1'   writes to stdout, in us
  argdist -C 'u:./simple-c:test-probe():u64:arg1' -p 1234
  argdist -C 't:syscalls:sys_enter_openat():char*:args->filename' -T 5";

/// Count the values of expressions at probes, or make log2 histograms
/// of them (BCC's argdist).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "argdist [-h] [-p PID] [-t TID] [-z STRING_SIZE] [-i INTERVAL] [-d DURATION] [-n COUNT]\n               [-v] [-c] [-T TOP] [-H specifier] [-C specifier] [-I header] [--cmd CMD]\n               [--json] [--print-program]")]
pub struct Args {
    /// Trace only this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<i32>,

    /// Trace only this thread.
    #[arg(short = 't', long = "tid", value_name = "TID")]
    tid: Option<i32>,

    /// Bytes of a char* value.
    #[arg(
        short = 'z',
        long = "string-size",
        value_name = "STRING_SIZE",
        default_value_t = 80
    )]
    string_size: u32,

    /// Print a report every INTERVAL seconds.
    #[arg(short = 'i', long = "interval", value_name = "INTERVAL", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,

    /// Stop after DURATION seconds.
    #[arg(short = 'd', long = "duration", value_name = "DURATION",
          value_parser = clap::value_parser!(u64).range(1..))]
    duration: Option<u64>,

    /// Stop after COUNT reports.
    #[arg(short = 'n', long = "number", value_name = "COUNT",
          value_parser = clap::value_parser!(u64).range(1..))]
    number: Option<u64>,

    /// Print the program on standard error before tracing.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    /// Keep counting across reports.
    #[arg(short = 'c', long = "cumulative")]
    cumulative: bool,

    /// Show only the TOP most frequent values.
    #[arg(short = 'T', long = "top", value_name = "TOP")]
    top: Option<usize>,

    /// A histogram probe (repeatable).
    #[arg(short = 'H', long = "histogram", value_name = "specifier")]
    histograms: Vec<String>,

    /// A counting probe (repeatable).
    #[arg(short = 'C', long = "count", value_name = "specifier")]
    counts: Vec<String>,

    /// A header whose types and constants the expressions use
    /// (repeatable).
    #[arg(short = 'I', long = "include", value_name = "header")]
    includes: Vec<PathBuf>,

    #[command(flatten)]
    sdt: Sdt,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = sdt_tools::bcc::argdist::Options {
        counts: args.counts,
        histograms: args.histograms,
        tid: args.tid,
        string_size: args.string_size,
        interval: args.interval,
        duration: args.duration,
        number: args.number,
        verbose: args.verbose,
        cumulative: args.cumulative,
        top: args.top,
        includes: args.includes,
    };
    sdt_tools::bcc::argdist::run(&args.sdt.common(args.pid), &options)
}
