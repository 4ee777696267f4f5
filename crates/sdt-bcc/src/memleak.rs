//! `memleak`'s command line.

use std::process::ExitCode;

use crate::{refuse, USER_SPACE};

const AFTER_HELP: &str = "\
what is traced:
  The allocators of the C library (or of -O OBJ): malloc, calloc, realloc,
  posix_memalign, memalign, aligned_alloc, valloc, pvalloc and mmap, with
  free, realloc and munmap freeing. Kernel allocations (no -p or -c) and
  --percpu are not supported: sdt traces user space.

output:
  Every INTERVAL seconds, and when tracing ends (Ctrl-C, or the end of the
  -c command or -p process): [HH:MM:SS] Top N stacks with outstanding
  allocations:, then for the N stacks with the most bytes (or allocations,
  --sort count) still allocated and at least -o ms old, largest last,
  `N bytes in M allocations from stack` and its frames as
  `0xADDRESS func+0xOFF [module]`. With -a, each allocation's address and
  size first. --json: {\"time\", \"top\", \"stacks\": [{\"bytes\",
  \"allocations\", \"frames\"}]} per report.

examples:
  memleak -p 1234                   every 5 s, the top 10 stacks of process 1234
  memleak -p 1234 -a 10 3           with each allocation, every 10 s, 3 times
  memleak -o 0 -c './app --test'    what a command never frees, when it ends
  memleak -z 4096 -T 3 -p 1234      only allocations of 4 KiB or more
  memleak -O /usr/lib/libjemalloc.so.2 --symbols-prefix je_ -p 1234";

/// Show allocations not freed, by the stack that made them (BCC's
/// memleak).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "memleak [-h] [-p PID] [-t] [-a] [-o OLDER] [-c COMMAND] [--combined-only] [-s SAMPLE_RATE]\n               [-T TOP] [-z MIN_SIZE] [-Z MAX_SIZE] [-O OBJ] [--sort KEY]\n               [--symbols-prefix PREFIX] [--json] [--print-program] [interval] [count]")]
pub struct Args {
    /// The process to trace.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pid: Option<i32>,

    /// A line for each allocation and free instead of reports.
    #[arg(short = 't', long = "trace")]
    trace: bool,

    /// Also list each outstanding allocation's address and size.
    #[arg(short = 'a', long = "show-allocs")]
    show_allocs: bool,

    /// Only allocations at least OLDER milliseconds old.
    #[arg(
        short = 'o',
        long = "older",
        value_name = "OLDER",
        default_value_t = 500
    )]
    older: u64,

    /// Run COMMAND (split as a shell splits it), trace it, and stop when
    /// it ends.
    #[arg(
        short = 'c',
        long = "command",
        visible_alias = "cmd",
        value_name = "COMMAND"
    )]
    command: Option<String>,

    /// Report totals by stack only (-o and -a then do nothing).
    #[arg(long = "combined-only")]
    combined_only: bool,

    /// Not supported: kernel allocations.
    #[arg(long = "wa-missing-free")]
    wa_missing_free: bool,

    /// Record one allocation in about SAMPLE_RATE.
    #[arg(short = 's', long = "sample-rate", value_name = "SAMPLE_RATE", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    sample_rate: u64,

    /// Show the TOP stacks.
    #[arg(short = 'T', long = "top", value_name = "TOP", default_value_t = 10)]
    top: usize,

    /// Only allocations of at least MIN_SIZE bytes.
    #[arg(short = 'z', long = "min-size", value_name = "MIN_SIZE")]
    min_size: Option<u64>,

    /// Only allocations of at most MAX_SIZE bytes.
    #[arg(short = 'Z', long = "max-size", value_name = "MAX_SIZE")]
    max_size: Option<u64>,

    /// The library or program whose allocators to trace.
    #[arg(short = 'O', long = "obj", value_name = "OBJ", default_value = "c")]
    obj: String,

    /// Not supported: the kernel's percpu allocator.
    #[arg(long = "percpu")]
    percpu: bool,

    /// Rank stacks by bytes or by allocations.
    #[arg(long = "sort", value_name = "KEY", default_value = "size",
          value_parser = ["size", "count"])]
    sort: String,

    /// Put before every allocator's name (je_ for jemalloc's).
    #[arg(long = "symbols-prefix", value_name = "PREFIX", default_value = "")]
    symbols_prefix: String,

    /// Print the program on standard error before tracing.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    /// One JSON object per report instead of BCC's text.
    #[arg(long)]
    json: bool,

    /// Print the program the tool runs (for `sdt run`) and exit.
    #[arg(long)]
    print_program: bool,

    /// Seconds between reports.
    #[arg(value_name = "interval", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,

    /// Reports to print.
    #[arg(value_name = "count")]
    count: Option<u64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.percpu {
        return Err(refuse("memleak", "--percpu", USER_SPACE));
    }
    if args.wa_missing_free {
        return Err(refuse(
            "memleak",
            "--wa-missing-free (kernel allocations)",
            USER_SPACE,
        ));
    }
    let options = sdt_tools::bcc::memleak::Options {
        trace: args.trace,
        show_allocs: args.show_allocs,
        older_ms: args.older,
        combined_only: args.combined_only,
        sample_rate: args.sample_rate,
        top: args.top,
        min_size: args.min_size,
        max_size: args.max_size,
        obj: args.obj,
        sort_by_count: args.sort == "count",
        symbols_prefix: args.symbols_prefix,
        interval: args.interval,
        count: args.count,
        verbose: args.verbose,
    };
    let sdt = crate::Sdt {
        command: args.command,
        json: args.json,
        print_program: args.print_program,
    };
    sdt_tools::bcc::memleak::run(&sdt.common(args.pid), &options)
}
