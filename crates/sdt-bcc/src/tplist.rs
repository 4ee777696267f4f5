//! `tplist`'s command line.

use std::process::ExitCode;

const AFTER_HELP: &str = "\
output:
  With -l or -p, the USDT probes: `PATH PROVIDER:NAME`, each probe once;
  -v adds `PROVIDER:NAME [sema 0xADDRESS]` with how many locations and
  arguments it has, -vv each location (`location #N PATH 0xADDRESS`) with
  each argument (`argument #N 8 unsigned bytes @ ax`). With neither, the
  kernel's tracepoints, `CATEGORY:EVENT`, with -v their fields (read
  through tracefs, mounted or not). The filter is a shell glob on the
  whole PROVIDER:NAME or CATEGORY:EVENT. --json: one array, of probes
  ({path, provider, name, semaphore, locations: [{path, arguments, address,
  file_offset, args, ...}]}) or tracepoints ({category, event, fields}).

examples:
  tplist -l /lib64/libc.so.6               the C library's probes
  tplist -vv -l ./simple-c                 a program's probes and their arguments
  tplist -l c 'libc:memory_*'              by library name, filtered
  tplist -p 1234                           every probe process 1234 maps
  tplist 'sched:*'                         the scheduler's tracepoints
  tplist -v block:block_rq_complete        a tracepoint's fields";

/// List USDT probes or kernel tracepoints (BCC's tplist).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "tplist [-h] [-p PID] [-l LIB] [-v] [--json] [filter]")]
pub struct Args {
    /// List the USDT probes of this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<u32>,

    /// List the USDT probes of this library or program (a path, a
    /// library name such as c, or a program in PATH).
    #[arg(short = 'l', long = "lib", value_name = "LIB")]
    lib: Option<String>,

    /// More detail: -v and -vv.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbosity: u8,

    /// One JSON array instead of BCC's lines.
    #[arg(long)]
    json: bool,

    /// Only what this glob matches (PROVIDER:NAME or CATEGORY:EVENT).
    #[arg(value_name = "filter")]
    filter: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    sdt_list::tplist::list(&sdt_list::tplist::Request {
        pid: args.pid,
        lib: args.lib,
        verbosity: args.verbosity,
        filter: args.filter,
        json: args.json,
    })
}
