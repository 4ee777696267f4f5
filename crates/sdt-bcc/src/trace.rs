//! `trace`'s command line.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{refuse, Sdt};

const AFTER_HELP: &str = "\
probes:
  [p:]LIB:FUNC[+OFFSET][(SIGNATURE)] [(PREDICATE)] [\"FORMAT\"[, ARG...]]
  r:LIB:FUNC[(SIGNATURE)] ...       a function's return; retval is its value
  u:LIB:[PROVIDER:]PROBE ...        a USDT probe; arg1.. are its arguments
  t:CATEGORY:EVENT ...              a kernel tracepoint; args->FIELD its fields
  Each probe is one shell word. LIB is a path, a library (c is libc.so.6) or a
  program in PATH. PREDICATE and ARGs are C: arg1..arg6 (a function's
  arguments), retval, $uid, $gid, $pid (the thread), $tgid (the process),
  $cpu, $task, a signature's parameters by name, STRCMP(\"text\", EXPR).
  FORMAT takes %s %d %u %ld %lu %lld %llu %hd %hu %x %lx %llx %c %K %U.
  Kernel functions (p::FUNC, kprobes) are not supported: sdt attaches to
  user space and tracepoints.

output:
  [TIME] [CPU] PID TID COMM FUNC MESSAGE, one line per event (BCC's columns);
  -K and -U put the kernel and user stacks under each event. --json: one
  object per event (time_ns, cpu, pid, tid, comm, func, message, kernel_stack
  with -K, user_stack with -U, count with -A).

examples:
  trace 'u:./simple-c:test-probe \"%u\", arg1' -T -p $(pidof simple-c)
  trace 'u:/lib64/libc.so.6:memory_sbrk_more \"%u\", arg1' -T
  trace 'p:c:open(char *path) \"%s\", path'         open()'s file names
  trace 'r:c:malloc (retval == 0) \"failed\"' -U     failed mallocs, with stacks
  trace -p 1234 'r:c:read \"%d\", retval' -M 10      ten reads' results
  trace -t -C 't:sched:sched_process_exec \"%s\", args->comm'
  sdt trace --cmd ./app 'u:./app:request \"%s %d\", arg1, arg2'";

/// Print a line for each hit of probes, with a message (BCC's trace).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP, override_usage = "trace [-h] [-b BUFFER_PAGES] [-p PID] [-L TID] [--uid UID] [-v] [-Z STRING_SIZE] [-S]\n             [-M MAX_EVENTS] [-t] [-u] [-T] [-C] [-c CGROUP_PATH] [-n NAME] [-f MSG_FILTER]\n             [-U] [-a] [-I header] [-A] [--cmd CMD] [--json] [--print-program]\n             probe [probe ...]")]
pub struct Args {
    /// Probes (see below).
    #[arg(required = true, value_name = "probe")]
    probes: Vec<String>,

    /// Pages of ring buffer per CPU (sdt has one ring buffer of as many
    /// pages in all).
    #[arg(short = 'b', long = "buffer-pages", value_name = "BUFFER_PAGES")]
    buffer_pages: Option<u32>,

    /// Trace only this process.
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with = "tid")]
    pid: Option<i32>,

    /// Trace only this thread.
    #[arg(short = 'L', long = "tid", value_name = "TID")]
    tid: Option<i32>,

    /// Trace only this user's processes.
    #[arg(long = "uid", value_name = "UID")]
    uid: Option<u32>,

    /// Print the program on standard error before tracing.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    /// Bytes read for each %s.
    #[arg(
        short = 'Z',
        long = "string-size",
        value_name = "STRING_SIZE",
        default_value_t = 80
    )]
    string_size: u32,

    /// Also show events of this process (sdt's own).
    #[arg(short = 'S', long = "include-self")]
    include_self: bool,

    /// Stop after this many events.
    #[arg(short = 'M', long = "max-events", value_name = "MAX_EVENTS")]
    max_events: Option<u64>,

    /// A TIME column: seconds since tracing started.
    #[arg(short = 't', long = "timestamp")]
    timestamp: bool,

    /// With -t: seconds since the epoch.
    #[arg(short = 'u', long = "unix-timestamp")]
    unix_timestamp: bool,

    /// A TIME column: the time of day.
    #[arg(short = 'T', long = "time")]
    time: bool,

    /// A CPU column.
    #[arg(short = 'C', long = "print_cpu")]
    cpu: bool,

    /// Trace only tasks in this cgroup v2 directory, or below it.
    #[arg(short = 'c', long = "cgroup-path", value_name = "CGROUP_PATH")]
    cgroup: Option<PathBuf>,

    /// Show only events of commands whose name holds NAME.
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    name: Option<String>,

    /// Show only events whose message holds MSG_FILTER.
    #[arg(short = 'f', long = "msg-filter", value_name = "MSG_FILTER")]
    msg_filter: Option<String>,

    /// Not supported: STRCMP of binary literals.
    #[arg(short = 'B', long = "bin_cmp")]
    bin_cmp: bool,

    /// Not supported: symbolization through build ids of these files.
    #[arg(short = 's', long = "sym_file_list", value_name = "SYM_FILE_LIST")]
    sym_file_list: Option<String>,

    /// Print the kernel stack under each event (t: probes; it is empty at
    /// uprobes and USDT probes, which fire in user mode).
    #[arg(short = 'K', long = "kernel-stack")]
    kernel_stack: bool,

    /// Print the user stack under each event.
    #[arg(short = 'U', long = "user-stack")]
    user_stack: bool,

    /// Print each stack frame's address before it.
    #[arg(short = 'a', long = "address")]
    address: bool,

    /// A header whose types and constants the expressions use
    /// (repeatable).
    #[arg(short = 'I', long = "include", value_name = "header")]
    includes: Vec<PathBuf>,

    /// Count identical events, and print them with their counts at -M.
    #[arg(short = 'A', long = "aggregate", requires = "max_events")]
    aggregate: bool,

    #[command(flatten)]
    sdt: Sdt,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.bin_cmp {
        return Err(refuse(
            "trace",
            "-B",
            "STRCMP compares a string literal's text",
        ));
    }
    if args.sym_file_list.is_some() {
        return Err(refuse(
            "trace",
            "-s",
            "sdt symbolizes from the files the process maps",
        ));
    }
    let options = sdt_tools::bcc::trace::Options {
        probes: args.probes,
        tid: args.tid,
        uid: args.uid,
        string_size: args.string_size,
        include_self: args.include_self,
        max_events: args.max_events,
        timestamp: args.timestamp,
        unix_timestamp: args.unix_timestamp,
        time: args.time,
        cpu: args.cpu,
        name: args.name,
        msg_filter: args.msg_filter,
        kernel_stack: args.kernel_stack,
        user_stack: args.user_stack,
        address: args.address,
        aggregate: args.aggregate,
        verbose: args.verbose,
        buffer_pages: args.buffer_pages,
        includes: args.includes,
    };
    let common = sdt_tools::Common {
        // Tasks in the cgroup or below it, as BCC's -c filters them.
        cgroup: args.cgroup,
        ..args.sdt.common(args.pid)
    };
    sdt_tools::bcc::trace::run(&common, &options)
}
