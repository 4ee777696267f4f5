//! The language tools' command lines: `sdt calls`, `sdt flow`, `sdt gc`,
//! ... Each is parsed here and run by `sdt-tools` (which holds the tools
//! themselves: their programs, the runtime table and their reports) with
//! the output format chosen.
//!
//! **BCC's names.** Run as `ucalls`, `uflow`, `ugc`, `uobjnew`,
//! `uthreads`, `ustat`, `dbslower` or `bashreadline` (a link to the
//! binary), sdt takes that BCC tool's command line ([`bcc`]).

pub mod bcc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sdt_output::Format;
use sdt_tools::{calls, dbslower, flow, gc, objnew, readline, stat, threads};

/// Options every language tool takes.
#[derive(Args, Debug)]
pub struct Common {
    /// The language: java, python, ruby or php. Found from -p or -c when
    /// not given (through env, a script's #! line, PATH and the libraries
    /// the program links); given, every installed copy of that runtime is
    /// traced wherever it runs in the traced process tree (a wrapper
    /// script that execs it, a child process).
    #[arg(short = 'l', value_name = "LANG")]
    pub lang: Option<String>,

    #[command(flatten)]
    pub target: Target,
}

impl Common {
    /// The target, with BCC's positional PID (when given) as `-p`.
    fn with_pid(mut self, positional: PositionalPid) -> Common {
        self.target.pids.extend(positional.process);
        self
    }

    fn tools(self) -> sdt_tools::Common {
        sdt_tools::Common {
            lang: self.lang,
            ..self.target.tools()
        }
    }
}

/// BCC's positional `PID`, for the tools where it clashes with none of
/// sdt's own arguments (`flow`, `gc`, `threads`; `calls` and `objnew` take
/// `INTERVAL [COUNT]` there, and BCC's form under BCC's names).
#[derive(Args, Debug)]
pub struct PositionalPid {
    /// The process to trace, as with -p (BCC's positional form).
    #[arg(value_name = "PID", conflicts_with_all = ["pids", "command"])]
    pub process: Option<i32>,
}

/// What every tool traces and how it prints.
#[derive(Args, Debug)]
pub struct Target {
    /// Trace these processes (and the processes they start) only:
    /// -p PID,PID (default: every process of the program, including
    /// those that start later).
    #[arg(
        short = 'p',
        value_name = "PID[,PID]",
        value_delimiter = ',',
        conflicts_with = "command"
    )]
    pub pids: Vec<i32>,

    /// Trace only the processes in this cgroup v2 directory and below it
    /// (a pod, a container, a service), also those that start there later.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Run CMD, trace it, and stop when it ends; its runtime's probes are
    /// switched on through its environment.
    #[arg(short = 'c', value_name = "CMD", long_help = crate::COMMAND_HELP)]
    pub command: Option<String>,

    /// One JSON object per line instead of a table.
    #[arg(
        long = "json",
        num_args = 0,
        default_value = "text",
        default_missing_value = "json",
        hide_default_value = true,
        value_parser = format_named
    )]
    pub format: Format,

    /// Print the program the tool runs (for `sdt run`) and exit.
    #[arg(long)]
    pub print_program: bool,
}

/// The format `--json` names (`json`) or its absence does (`text`).
fn format_named(name: &str) -> Result<Format, String> {
    Format::named(name).ok_or_else(|| format!("`{name}` is not an output format"))
}

impl Target {
    fn tools(self) -> sdt_tools::Common {
        sdt_tools::Common {
            lang: None,
            pids: self.pids,
            cgroup: self.cgroup,
            command: self.command,
            format: self.format,
            print_program: self.print_program,
            pictures: sdt_tools::Pictures::default(),
        }
    }
}

#[derive(Args, Debug)]
#[command(about = calls::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt calls -c 'python3 app.py'           calls of every function, by count\n  \
    sdt calls -L -T 10 -p 1234              the 10 slowest methods, by total time\n  \
    sdt calls -l java 5 3                    every JVM: three 5-second reports\n\n\
    With -L, returns without an entry and entries without a return are not\n\
    timed: they are counted and shown under the table.")]
pub struct CallsArgs {
    #[command(flatten)]
    common: Common,

    #[command(flatten)]
    options: CallsOptions,

    /// Also write the calls' stacks, built from the runtime's entries and
    /// returns (`<module>;main;fib;fib`), as an interactive SVG flame
    /// graph to FILE: widths by calls, or with -L by time spent.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<std::path::PathBuf>,

    /// The output format: text (the table), json (one object per line,
    /// as --json), or folded: the calls' stacks as `frame;frame count`
    /// lines on standard output (counted by calls, or with -L in
    /// nanoseconds spent), the input of flamegraph.pl, inferno and
    /// speedscope, with the table on standard error.
    #[arg(short = 'f', long = "format", value_name = "FORMAT", value_parser = crate::format_parser(), conflicts_with = "format")]
    output_format: Option<Format>,

    #[command(flatten)]
    timeline: crate::pictures::TimelineArgs,

    #[command(flatten)]
    spans: crate::fleet::SpanArgs,

    #[command(flatten)]
    every: Every,
}

/// BCC's `ucalls [-l LANG] [-L] [-T TOP] [-m] PID [INTERVAL]`.
#[derive(Args, Debug)]
pub struct UcallsArgs {
    #[command(flatten)]
    common: Common,

    #[command(flatten)]
    options: CallsOptions,

    #[command(flatten)]
    pid: PositionalPid,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,
}

/// The options `calls` and `ucalls` share.
#[derive(Args, Debug)]
pub struct CallsOptions {
    /// Also time each call; sort by total time.
    #[arg(short = 'L', long)]
    latency: bool,

    /// Show only the top N methods.
    #[arg(short = 'T', long = "top", value_name = "N")]
    top: Option<usize>,

    /// Times in milliseconds instead of microseconds.
    #[arg(short = 'm', long)]
    milliseconds: bool,
}

impl CallsOptions {
    fn tools(self, interval: Option<u64>, count: Option<u64>) -> calls::Options {
        calls::Options {
            latency: self.latency,
            top: self.top,
            milliseconds: self.milliseconds,
            interval,
            count,
        }
    }
}

/// `INTERVAL [COUNT]`, for the tools that report at intervals.
#[derive(Args, Debug)]
pub struct Every {
    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT", requires = "interval")]
    count: Option<u64>,
}

pub fn calls(args: CallsArgs) -> anyhow::Result<ExitCode> {
    let Every { interval, count } = args.every;
    let mut pictures: Vec<Box<dyn sdt_output::Sink>> = Vec::new();
    if let Some(path) = &args.flamegraph {
        let title = if args.options.latency {
            "sdt calls -L: time spent, by call stack"
        } else {
            "sdt calls: calls, by call stack"
        };
        pictures.push(Box::new(crate::pictures::flamegraph(path)?.titled(title)));
    }
    pictures.extend(args.timeline.sink([])?);
    let options = args.options.tools(interval, count);
    args.spans.around(pictures, false, |pictures, _| {
        let mut common = sdt_tools::Common {
            pictures,
            ..args.common.tools()
        };
        if let Some(format) = args.output_format {
            common.format = format;
        }
        calls::run(&common, &options)
    })
}

/// `ucalls`: BCC's positional PID, then its INTERVAL.
fn ucalls(args: UcallsArgs) -> anyhow::Result<ExitCode> {
    let common = args.common.with_pid(args.pid).tools();
    calls::run(&common, &args.options.tools(args.interval, None))
}

#[derive(Args, Debug)]
#[command(about = flow::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt flow -c 'python3 app.py' -M handle_      calls of methods named handle_*\n  \
    sdt flow -p 1234 -C com/example/             calls of classes in com.example\n  \
    sdt flow -l python 1234                      BCC's form: the PID last\n\n\
    Depth counts only the calls shown: a filtered-out caller adds no indentation.\n\
    A return without an entry is not shown, an entry without a return has no\n\
    return line; both are counted and reported on standard error at the end.")]
pub struct FlowArgs {
    #[command(flatten)]
    common: Common,

    /// Show only methods of classes whose name starts with CLASS (for
    /// Python: whose file name does).
    #[arg(short = 'C', long = "class", value_name = "CLASS")]
    class: Option<String>,

    /// Show only methods whose name starts with METHOD.
    #[arg(short = 'M', long = "method", value_name = "METHOD")]
    method: Option<String>,

    #[command(flatten)]
    timeline: crate::pictures::TimelineArgs,

    #[command(flatten)]
    spans: crate::fleet::SpanArgs,

    #[command(flatten)]
    pid: PositionalPid,
}

pub fn flow(args: FlowArgs) -> anyhow::Result<ExitCode> {
    let (class, method) = (args.class, args.method);
    let pictures = args.timeline.sink([])?.into_iter().collect();
    args.spans.around(pictures, false, |pictures, _| {
        let common = sdt_tools::Common {
            pictures,
            ..args.common.with_pid(args.pid).tools()
        };
        flow::run(&common, &flow::Options { class, method })
    })
}

#[derive(Args, Debug)]
#[command(about = gc::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt gc -c 'java -jar app.jar'      every collection of the command\n  \
    sdt gc -l ruby -m 10               collections over 10 ms in every Ruby process\n\n\
    A collection is, for Java, gc__begin to gc__end; for Python, gc__start to\n\
    gc__done; for Ruby, the marking phase (gc__mark__begin to gc__mark__end).")]
pub struct GcArgs {
    #[command(flatten)]
    common: Common,

    /// Show only collections that took at least MIN milliseconds.
    #[arg(short = 'm', long = "min", value_name = "MIN")]
    min_ms: Option<u64>,

    #[command(flatten)]
    timeline: crate::pictures::TimelineArgs,

    #[command(flatten)]
    spans: crate::fleet::SpanArgs,

    #[command(flatten)]
    pid: PositionalPid,
}

/// BCC's `ugc [-l LANG] [-m] [-M MIN] PID`.
#[derive(Args, Debug)]
pub struct UgcArgs {
    #[command(flatten)]
    common: Common,

    /// Times in milliseconds instead of microseconds.
    #[arg(short = 'm', long)]
    milliseconds: bool,

    /// Show only collections that took at least MIN milliseconds.
    #[arg(short = 'M', long = "minimum", value_name = "MIN")]
    min_ms: Option<u64>,

    #[command(flatten)]
    pid: PositionalPid,
}

pub fn gc(args: GcArgs) -> anyhow::Result<ExitCode> {
    let pictures = args.timeline.sink([])?.into_iter().collect();
    args.spans.around(pictures, false, |pictures, _| {
        gc_in(args.common.with_pid(args.pid), args.min_ms, false, pictures)
    })
}

/// `ugc`: BCC's options (`-m` is the unit there, `-M` the minimum).
fn ugc(args: UgcArgs) -> anyhow::Result<ExitCode> {
    gc_in(
        args.common.with_pid(args.pid),
        args.min_ms,
        args.milliseconds,
        sdt_tools::Pictures::default(),
    )
}

/// `gc` with its options, however they were given.
fn gc_in(
    common: Common,
    min_ms: Option<u64>,
    milliseconds: bool,
    pictures: sdt_tools::Pictures,
) -> anyhow::Result<ExitCode> {
    let options = gc::Options {
        min_ms,
        milliseconds,
    };
    let common = sdt_tools::Common {
        pictures,
        ..common.tools()
    };
    gc::run(&common, &options)
}

#[derive(Args, Debug)]
#[command(about = objnew::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt objnew -c 'java -cp . App'       allocations of the command, by class\n  \
    sdt objnew -C 10 -p 1234 5            every 5 s, the 10 classes allocated most\n\n\
    Java's allocation probe needs -XX:+ExtendedDTraceProbes, which sdt sets for -c.\n\
    Ruby's object__create counts objects created with new (not strings,\n\
    arrays and hashes, which have probes of their own). No bytes: OpenJDK 17\n\
    gives 0 as the size of nearly every allocation, and Ruby gives none.")]
pub struct ObjnewArgs {
    #[command(flatten)]
    common: Common,

    /// Show the N classes allocated most often.
    #[arg(short = 'C', long = "top-count", value_name = "N")]
    top_count: Option<usize>,

    #[command(flatten)]
    every: Every,
}

/// BCC's `uobjnew [-l LANG] [-C N] PID [INTERVAL]`.
#[derive(Args, Debug)]
pub struct UobjnewArgs {
    #[command(flatten)]
    common: Common,

    /// Show the N classes allocated most often.
    #[arg(short = 'C', long = "top-count", value_name = "N")]
    top_count: Option<usize>,

    #[command(flatten)]
    pid: PositionalPid,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,
}

pub fn objnew(args: ObjnewArgs) -> anyhow::Result<ExitCode> {
    let Every { interval, count } = args.every;
    objnew_in(args.common, args.top_count, interval, count)
}

/// `uobjnew`: BCC's positional PID, then its INTERVAL.
fn uobjnew(args: UobjnewArgs) -> anyhow::Result<ExitCode> {
    let common = args.common.with_pid(args.pid);
    objnew_in(common, args.top_count, args.interval, None)
}

/// `objnew` with its options, however they were given.
fn objnew_in(
    common: Common,
    top: Option<usize>,
    interval: Option<u64>,
    count: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let options = objnew::Options {
        top,
        interval,
        count,
    };
    objnew::run(&common.tools(), &options)
}

#[derive(Args, Debug)]
#[command(about = threads::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt threads -c 'java -cp . App'\n  \
    sdt threads -l java --json          threads of every JVM, as JSON lines\n  \
    sdt threads 1234                    BCC's form: the PID last\n\n\
    Java's thread__start and thread__stop give the thread's name and its\n\
    kernel thread id; Python, Ruby and PHP have no thread probes.")]
pub struct ThreadsArgs {
    #[command(flatten)]
    common: Common,

    #[command(flatten)]
    pid: PositionalPid,
}

pub fn threads(args: ThreadsArgs) -> anyhow::Result<ExitCode> {
    threads::run(&args.common.with_pid(args.pid).tools())
}

#[derive(Args, Debug)]
#[command(about = stat::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt stat                  every Java, Python, Ruby and PHP process, every second\n  \
    sdt stat -l python 5 3    Python processes: three 5-second reports\n\n\
    Method and allocation rates are 0 for processes whose probes are off (see\n\
    docs/tools.md: Java needs -XX:+ExtendedDTraceProbes, PHP USE_ZEND_DTRACE=1,\n\
    CPython 3.11 a profile function, Ruby a TracePoint).")]
pub struct StatArgs {
    #[command(flatten)]
    target: Target,

    /// Only this language: java, python, ruby or php (default: every one
    /// installed with probes).
    #[arg(short = 'l', value_name = "LANG")]
    lang: Option<String>,

    /// Seconds between reports.
    #[arg(value_name = "INTERVAL", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT")]
    count: Option<u64>,
}

pub fn stat(args: StatArgs) -> anyhow::Result<ExitCode> {
    let common = sdt_tools::Common {
        lang: args.lang,
        ..args.target.tools()
    };
    let options = stat::Options {
        interval: args.interval,
        count: args.count,
    };
    stat::run(&common, &options)
}

#[derive(Args, Debug)]
#[command(about = dbslower::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt dbslower                          PostgreSQL queries of 1 ms or more, every server\n  \
    sdt dbslower postgres -m 100 -p \"$(pgrep -o postgres)\"   one server and its backends\n  \
    sdt dbslower mysql -m 1000            MySQL or MariaDB, as BCC's dbslower takes it\n\n\
    A query is timed from query__start to query__done in the thread that\n\
    runs it. The query text is cut at 256 bytes. A query without a done\n\
    (PostgreSQL reports none for a query that fails) is counted, not timed.\n\
    With --otlp, each slow query is also sent as a span named after the\n\
    engine's provider, with db.system.name, db.query.text, process.pid\n\
    and thread.id.")]
pub struct DbslowerArgs {
    /// The server: postgres (or postgresql), mysql or mariadb (default:
    /// postgres, or what -x, -p or -c runs).
    #[arg(value_name = "ENGINE", value_parser = ["postgres", "postgresql", "mysql", "mariadb"])]
    engine: Option<String>,

    #[command(flatten)]
    target: Target,

    /// Show queries that took at least THRESHOLD milliseconds.
    #[arg(
        short = 'm',
        long = "threshold",
        value_name = "THRESHOLD",
        default_value_t = 1
    )]
    threshold_ms: u64,

    /// The server program (default: the -p process's, the one the -c
    /// command runs, or the newest /usr/lib/postgresql/*/bin/postgres;
    /// for MySQL, mariadbd or mysqld in PATH).
    #[arg(short = 'x', long = "exe", value_name = "PATH")]
    exe: Option<PathBuf>,

    #[command(flatten)]
    spans: crate::fleet::SpanArgs,

    #[command(flatten)]
    timeline: crate::pictures::TimelineArgs,
}

pub fn dbslower(args: DbslowerArgs) -> anyhow::Result<ExitCode> {
    let pictures = args.timeline.sink([])?.into_iter().collect();
    args.spans.around(pictures, true, |pictures, spans| {
        let options = dbslower::Options {
            engine: args.engine.as_deref().and_then(dbslower::Engine::named),
            threshold_ms: args.threshold_ms,
            exe: args.exe,
            spans,
        };
        let common = sdt_tools::Common {
            pictures,
            ..args.target.tools()
        };
        dbslower::run(&common, &options)
    })
}

#[derive(Args, Debug)]
#[command(about = readline::TOOL.summary, after_help = "EXAMPLES:\n  \
    sdt readline                 every interactive bash on the machine\n  \
    sdt readline -p $$           this shell\n\n\
    Only lines read through readline show: interactive shells, not scripts.")]
pub struct ReadlineArgs {
    #[command(flatten)]
    target: Target,

    /// The file whose `readline` is probed: bash (default: bash in
    /// PATH), or the libreadline.so a bash built with the system's
    /// readline loads (`-s` as in BCC's bashreadline).
    #[arg(short = 'x', long = "exe", value_name = "PATH")]
    #[arg(short_alias = 's', alias = "shared")]
    exe: Option<PathBuf>,
}

pub fn readline(args: ReadlineArgs) -> anyhow::Result<ExitCode> {
    let options = readline::Options { exe: args.exe };
    readline::run(&args.target.tools(), &options)
}
