//! `sdt trace`: print every hit of one or more USDT probes, with arguments.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sdt_job::program::StringArg;
use sdt_job::{Failure, Hooks, Job, Outcome, Request, Source, Target};
use sdt_output::tee::Tee;
use sdt_output::{Event, Format, TraceSummary};

use crate::pictures::TimelineArgs;

const AFTER_HELP: &str = "\
PROBES:
  [TARGET:]PROVIDER:NAME, where PROVIDER and NAME may hold globs (* ? [..]).
  TARGET is a path, a program name found through PATH, or a library name
  found through the loader cache (libc, libstdc++, libpython3.11). Without
  TARGET (or with a glob over the process's objects), -p means every object
  the process maps and -c the command's executable, and both also mean every
  object the traced processes map from then on: a library loaded with dlopen,
  probes defined at run time (sdt::dynamic, libstapsdt). A probe that matches
  nothing yet is waited for, with a warning; each object attached later is
  reported on stderr. A leading `usdt:` is accepted, as in bpftrace.

SCOPE:
  -p PID     trace one process and the processes it starts from then on
             (--no-follow: that process only); sdt ends when it ends
  -c CMD     start CMD, attach before its first instruction, trace it and
             the processes it starts, and exit with its exit status
  neither    trace every process that runs the file, including ones started
             later, until Ctrl-C

OUTPUT:
  One line per hit: seconds since start, PID, TID, command name, probe, and
  every argument, signed or unsigned as its spec says. Bytes from strings are
  printed as they are when printable and escaped (\\n, \\xNN) otherwise.
  An argument that cannot be read at a site (such as %xmm0, or a static
  variable that a stripped file no longer names) is printed as <unreadable>
  (null in JSON), and a warning at start says why.
  --json prints one JSON object per hit and a final summary object:
    {\"time_ns\":..,\"pid\":..,\"tid\":..,\"comm\":\"..\",\"provider\":\"..\",\"name\":\"..\",
     \"path\":\"..\",\"address\":..,\"args\":[1,-2,\"str\"]}
    {\"summary\":{\"events\":N,\"lost\":N,\"sites\":N}}
  Events that the ring buffer had no room for are counted and reported at
  exit (stderr, or the summary object); none is lost silently.
  --timeline FILE also writes a timeline (Chrome Trace Event JSON, for
  Perfetto UI, chrome://tracing or speedscope): one track per thread, each
  hit an instant event with its arguments, and the hits of probes whose
  names pair (X__entry/X__return, X-start/X-done, X_begin/X_end, ...) a
  slice from one to the other on their thread.

EXAMPLES:
  sdt trace -c 'python3.11 script.py' -s 0 -s 1 python:function__entry
  sdt trace -c sdt-example -s 1:2 shop:order_received     # a Rust &str
  sdt trace -p \"$(pgrep -n postgres)\" -s 0 postgresql:query__start
  sdt trace --json -o hits.ndjson /usr/lib/postgresql/15/bin/postgres:postgresql:transaction__*
  sdt trace libstdc++:libstdcxx:throw

Tracing needs root, or the capabilities CAP_BPF and CAP_PERFMON.";

/// Print every hit of USDT probes with its arguments.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct TraceArgs {
    /// Probes to trace: [TARGET:]PROVIDER:NAME (see below).
    #[arg(required = true, value_name = "PROBE")]
    probes: Vec<String>,

    /// Trace only these processes (and the processes they start), and stop
    /// when they have all exited: -p PID,PID or -p PID -p PID.
    #[arg(
        short,
        long = "pid",
        value_name = "PID[,PID]",
        value_delimiter = ',',
        conflicts_with = "command"
    )]
    pids: Vec<i32>,

    /// Trace only the processes in this cgroup v2 directory and below it
    /// (a pod, a container, a service), also those that start there later.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,

    /// Run this command (split like a shell would) and trace it and the
    /// processes it starts.
    #[arg(short, long, value_name = "CMD", long_help = crate::COMMAND_HELP)]
    command: Option<String>,

    /// With -p or -c, trace only that process, not the processes it starts.
    ///
    /// Following children attaches the probes for every process that maps
    /// the probed files, and each program then checks that the process is
    /// in the traced tree: other processes that run the probed code trap
    /// into the kernel at each probe (about half a microsecond) and see
    /// their semaphores raised. With --no-follow they are untouched.
    #[arg(long)]
    no_follow: bool,

    /// Read argument N as a string: up to a NUL, or with N:M, of the length
    /// in argument M (how the sdt crate passes &str); at most 255 bytes
    /// (repeatable).
    #[arg(short = 's', long = "string", value_name = "N[:M]", value_parser = sdt_tools::trace::string_arg)]
    strings: Vec<StringArg>,

    /// Print JSON: one object per event, then a summary object.
    #[arg(long)]
    json: bool,

    /// Write events to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Ring-buffer size: a power of two with an optional K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = crate::parse_size)]
    buffer_size: u32,

    #[command(flatten)]
    timeline: TimelineArgs,

    /// Print the generated BPF programs to stderr before tracing.
    #[arg(long)]
    dump: bool,

    /// Attach with this kernel mechanism instead of the best available
    /// one (uprobe-multi, perf-link or perf-ioctl): for testing the paths
    /// older kernels take.
    #[arg(long, value_name = "MECHANISM", value_parser = crate::parse_mechanism, hide_short_help = true)]
    attach_with: Option<sdt_bpf::Mechanism>,
}

pub fn run(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let target = match (args.pids.is_empty(), &args.command) {
        (false, _) => Target::Pids(args.pids.clone()),
        (true, Some(command)) => Target::Command(command.clone()),
        (true, None) => Target::Everything,
    };
    let request = Request {
        target,
        cgroup: args.cgroup.clone(),
        follow: !args.no_follow,
        ring_size: args.buffer_size,
        suggest_buffer_size: true,
        mechanism: args.attach_with,
        internal: true,
        print_maps: false,
        // In the summary (`--json`), so that every other line is a hit.
        hint_records: false,
        ..Request::new(Source::inline(sdt_tools::trace::program(
            &args.probes,
            &args.strings,
        )?))
    };
    // The script is sdt's own: what is wrong is said of the spec it came
    // from, with the hints, without the script.
    let job = Job::compile(request).map_err(Failure::without_script)?;
    job.print_warnings(false);
    let compilation = job.compilation();
    // A site is traced even where one of its arguments cannot be read.
    for site in &compilation.sites {
        for (n, arg) in site.args.iter().enumerate() {
            if let Err(why) = &arg.source {
                eprintln!(
                    "sdt: warning: {}:{} at {:#x} in {}: arg{n} {why}; it is shown as {}",
                    site.provider,
                    site.name,
                    site.address,
                    site.path.display(),
                    if args.json { "null" } else { "<unreadable>" }
                );
            }
        }
    }
    if args.dump {
        job.dump(&mut io::stderr().lock())?;
    }
    let out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(io::stdout().lock()),
    };
    let out = Box::new(BufWriter::with_capacity(1 << 16, out));
    let format = if args.json {
        Format::JSON
    } else {
        Format::TEXT
    };
    let probes = compilation
        .sites
        .iter()
        .map(|s| (s.provider.as_str(), s.name.as_str()));
    let timeline = args.timeline.sink(probes)?;
    let sink = Tee::of(format.sink(out), timeline.into_iter().collect());
    let sites = compilation.sites.len();
    let later = if compilation.attaches_later() {
        " and what matches in objects it maps from now on"
    } else {
        ""
    };
    let hooks = Hooks {
        started: Box::new(|started| {
            // After the command is released, so the message costs it
            // nothing; in one write, so that scripts waiting for it never
            // see half of it.
            let live = format!(
                "sdt: tracing {sites} site{}{later} ({}); Ctrl-C to stop\n",
                if sites == 1 { "" } else { "s" },
                started.mechanism().name()
            );
            let _ = io::stderr().write_all(live.as_bytes());
        }),
        ending: Box::new(|sink, outcome| sink.event(Event::Summary(&summary(outcome)))),
        ..Hooks::default()
    };
    // A closed pipe or a full disk stops the trace (the output has
    // failed, which the run loop sees).
    let outcome = job.run(sink, hooks).map_err(Failure::without_script)?;
    if !args.json {
        let summary = summary(&outcome);
        let fast = match outcome.summary.fast_replayed {
            0 => String::new(),
            n => format!(" ({n} events by the fast path)"),
        };
        eprintln!(
            "sdt: {} events, {} lost, {} sites{fast}",
            summary.events, summary.lost, summary.sites
        );
    }
    Ok(ExitCode::from(outcome.status))
}

/// The counts at the end: every hit delivered, or lost.
fn summary(outcome: &Outcome) -> TraceSummary {
    TraceSummary {
        events: outcome.hits.delivered,
        lost: outcome.summary.lost_events + outcome.hits.undecodable + outcome.summary.fast_lost,
        sites: outcome.sites,
        hints: outcome.hints.clone(),
    }
}
