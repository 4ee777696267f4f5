//! `sdt run`, and `bpftrace` when sdt is installed under that name: the
//! bpftrace language on user-space probes.
//!
//! The command line is bpftrace's, parsed as `getopt_long` parses it:
//! options may come before or after the program file and its positional
//! parameters, the last of a repeated option counts, and after `--` every
//! word is a parameter, `--NAME=VALUE` a named one (`getopt()`). Under the
//! name `bpftrace` (or `sdt bpftrace`), sdt also speaks as bpftrace does:
//! `Attaching N probes...` on standard output, `ERROR: ...` for errors,
//! a first line of bpftrace's shape for each error in a script, the usage
//! on a bad option, and bpftrace's exit statuses.

use std::collections::HashMap;
use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use sdt_job::{Buffering, Failure, Hooks, Job, Output, Prepared, Request, Source, Target, Voice};
use sdt_list::points;
use sdt_output::tee::Tee;
use sdt_output::{Format, Sink};
use sdt_serve::fleet::{Fleet, FleetError, FleetOptions};
use sdt_serve::program::ProgramFiles;

use crate::pictures::TimelineArgs;

const AFTER_HELP: &str = "\
PROBES:
  usdt:PATH:[PROVIDER:]NAME     a USDT probe; PATH may be a program or library name, a
                                glob over files (usdt:./bin/app*:*), or, with -p or -c,
                                empty (usdt::NAME) or a glob over the process's objects,
                                which also means the objects it maps later (dlopen,
                                probes defined at run time): attached when they appear
  uprobe:PATH:FUNCTION          a function's entry; also FUNCTION+OFFSET or an address;
                                globs match mangled and demangled C++ and Rust names, and
                                PATH may be a glob over files; `args.NAME` reads a
                                parameter, typed from DWARF
  uprobe:PATH@FILE:LINE[:COL]   the code of a source line, from DWARF line tables
  uretprobe:PATH:FUNCTION       a function's return
  tracepoint:CATEGORY:NAME      a kernel tracepoint, e.g. tracepoint:syscalls:sys_enter_openat
  interval:s:N, interval:ms:N   every N seconds or milliseconds (also us, hz)
  BEGIN, END                    before the first probe and after the last
  $1                            a positional parameter may be a whole attach point

EXAMPLES:
  sdt run -e 'usdt:python3.11:python:function__entry { @[str(arg1)] = count(); }' -c 'python3.11 app.py'
  sdt run -p \"$(pgrep -n postgres)\" -e 'usdt::postgresql:query__start { printf(\"%s\\n\", str(arg0)); }'
  sdt run -e 'uretprobe:libc:malloc /pid == $1/ { @bytes = hist(retval); }' 1234
  sdt run script.bt ARG1 ARG2 -- --limit=10      # $1, $2, and getopt(\"limit\", 5)
  sdt run -l 'usdt:/usr/lib/postgresql/15/bin/postgres:*'
  sdt run -l script.bt                           # the probes the script would attach to
  sdt run -lv 'uprobe:libc:fopen'                # with its parameters, from DWARF

AS BPFTRACE:
  Installed under the name `bpftrace` (ln -s \"$(command -v sdt)\" ~/bin/bpftrace), or run as
  `sdt bpftrace ARGS`, sdt takes bpftrace's command line and prints what bpftrace prints:
  `Attaching N probes...` on standard output, `ERROR: ...` messages, a first line of
  bpftrace's form (`FILE:LINE:COL-COL: ERROR: ...`) above each located error, and exit
  status 1 for errors. With __BPFTRACE_NOTIFY_PROBES_ATTACHED in the environment, that
  word is printed on standard output once every probe is attached.

CONFIG (config = { NAME = VALUE; ... } in a script, or BPFTRACE_NAME in the environment,
which wins):
  max_strlen          bytes of a string from str(), NUL included (default 64, at most 4096;
                      also BPFTRACE_STRLEN)
  max_map_keys        entries of each map (default 4096; also BPFTRACE_MAP_KEYS_MAX)
  max_cat_bytes       bytes cat() prints of a file (default 10240)
  print_maps_on_exit  print the maps at the end (default true)
  missing_probes      error (default), warn or ignore: an attach point that matches nothing
  Accepted and checked, with no effect in sdt: cache_user_symbols, cpp_demangle,
  lazy_symbolication, license, log_size, max_bpf_progs, max_probes, on_stack_limit,
  perf_rb_pages, show_debug_info, stack_mode, str_trunc_trailer, use_blazesym, unstable_*.

Tracing needs root, or the capabilities CAP_BPF, CAP_PERFMON and, for tracepoints,
CAP_SYS_ADMIN.";

/// Run a bpftrace program on user-space probes.
#[derive(Parser, Debug)]
#[command(
    name = "sdt run",
    after_help = AFTER_HELP,
    args_override_self = true,
    help_template = "{about}\n\nUSAGE:\n    {usage}\n\n{all-args}{after-help}",
    override_usage = "sdt run [OPTIONS] (-e PROGRAM | FILE) [ARG]... [-- --NAME=VALUE...]\n    \
                      sdt run -l [PATTERN | FILE]"
)]
pub struct RunArgs {
    /// The program text (of several -e, the last counts, as in bpftrace).
    #[arg(short = 'e', value_name = "PROGRAM")]
    program: Option<String>,

    /// The program file (or `-` for standard input), then its positional
    /// parameters $1, $2, ...; with -e, every word is a parameter. Options
    /// may come between them; after `--`, every word is a parameter, and
    /// `--NAME=VALUE` (or `--NAME`) gives the program's getopt("NAME");
    /// `-- --help` lists those the program takes.
    #[arg(value_name = "FILE|ARG")]
    args: Vec<String>,

    /// Trace these processes (PID or PID,PID,...; and the processes they
    /// start, unless --no-follow); stop when they have all ended.
    /// Tracepoints see only these processes too.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID[,PID]",
        conflicts_with = "command"
    )]
    pid: Option<String>,

    /// Trace only the processes in this cgroup v2 directory and below it
    /// (a pod, a container, a systemd service), including those that
    /// start there later: a directory of the cgroup2 mount
    /// (/sys/fs/cgroup/system.slice/x.service) or a path as
    /// /proc/PID/cgroup shows it (/system.slice/x.service). Metrics
    /// served with --serve carry it as the label `cgroup`.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,

    /// Run CMD (split like a shell would), trace it and the processes it
    /// starts, and exit with its exit status when it ends.
    #[arg(short = 'c', long = "cmd", value_name = "CMD", long_help = crate::COMMAND_HELP)]
    command: Option<String>,

    /// Trace only the -p or -c process itself, not the processes it starts.
    ///
    /// Following children attaches the probes for every process that maps
    /// the probed files, and each program then checks that the process is
    /// in the traced tree: other processes that run the probed code trap
    /// into the kernel at each probe (about half a microsecond) and see
    /// their semaphores raised. With --no-follow they are untouched.
    #[arg(long)]
    no_follow: bool,

    /// Write the program's output to FILE.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,

    /// Output format: text, json (one JSON object per line), or folded
    /// (maps keyed by ustack as folded stacks for flame graphs, the rest as
    /// text on standard error).
    #[arg(short = 'f', value_name = "FORMAT", default_value = "text")]
    format: String,

    /// Also write the maps keyed by ustack as an interactive SVG flame
    /// graph to FILE when the run ends; with several such maps, one file
    /// each, named with the map's name before FILE's extension
    /// (flame@stacks.svg).
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,

    #[command(flatten)]
    timeline: TimelineArgs,

    /// Quiet: no `Attaching N probes...`.
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,

    /// Verbose: sites refused, attach details, the command's exit status.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    /// Output buffering: none, line or full (default: line on a terminal,
    /// full otherwise, flushed at least every 20 ms).
    #[arg(short = 'B', value_name = "MODE", value_parser = ["none", "line", "full"])]
    buffering: Option<String>,

    /// List probes: those a PATTERN matches (`uprobe:./app*:read*`,
    /// `*sched_switch*`, `interval:*`), those a program (-e or FILE) would
    /// attach to, or, with -p alone, every probe of the process; with -v
    /// (`-lv`), a uprobe's parameters from DWARF and a tracepoint's fields.
    #[arg(short = 'l', long = "list")]
    list: bool,

    /// Print the resolved sites and every generated program, then exit.
    #[arg(long, visible_alias = "dry-run")]
    dump: bool,

    /// Allow system(), and uprobes on functions of unknown size.
    #[arg(long = "unsafe", conflicts_with = "serve")]
    allow_unsafe: bool,

    /// Serve the maps as Prometheus metrics at http://ADDR/metrics while
    /// the program runs. ADDR is PORT (on loopback) or HOST:PORT; names
    /// and labels come from the program's `// sdt:` pragmas and
    /// FILE.conf beside it (see docs/fleet.md).
    #[arg(long, value_name = "ADDR")]
    serve: Option<String>,

    #[command(flatten)]
    fleet: crate::fleet::FleetArgs,

    /// Look for separate debug files in DIR first (absolute, or relative
    /// to the traced file's directory; several with `:` or by repeating
    /// the option), before /usr/lib/debug and beside the file.
    ///
    /// DWARF types casts, `args` of uprobes and `-lv`, and places
    /// `uprobe:FILE@SOURCE:LINE`. A debug file is found by the traced
    /// file's build-id (DIR/.build-id/xx/yyyy.debug), by the name its
    /// .gnu_debuglink gives, or as FILE.debug, and is used only if it
    /// belongs to the file (same build-id, else the debuglink's CRC).
    #[arg(long, value_name = "DIR[:DIR]", value_delimiter = ':', action = clap::ArgAction::Append)]
    debuginfo: Vec<PathBuf>,

    /// Attach only the probes whose attach point, as written, matches
    /// REGEX (BEGIN and END always run).
    #[arg(long, value_name = "REGEX")]
    probe_filter: Option<String>,

    /// Read the C definitions (struct, union, enum, typedef, #define
    /// NAME NUMBER) of FILE, as an #include of it would.
    #[arg(long = "include", value_name = "FILE")]
    include: Vec<PathBuf>,

    /// Look for #include and --include files in DIR too.
    #[arg(short = 'I', value_name = "DIR")]
    include_dirs: Vec<PathBuf>,

    /// Do not use these kernel features: uprobe_multi (attach each site
    /// with a perf link instead); kprobe_multi and kprobe_session are
    /// accepted and have no effect.
    #[arg(long, value_name = "FEATURE[,FEATURE]")]
    no_feature: Option<String>,

    /// Print what this machine's kernel and sdt support, as bpftrace --info.
    #[arg(long)]
    info: bool,

    /// Accepted for bpftrace compatibility; sdt always raises semaphores
    /// through the kernel, for every process that maps the file.
    #[arg(long)]
    usdt_file_activation: bool,

    /// Do not print warnings.
    #[arg(long)]
    no_warnings: bool,

    /// Accepted for bpftrace compatibility; sdt reports no errors of
    /// helpers at run time (a failed read gives zeros).
    #[arg(short = 'k', long = "warnings", action = clap::ArgAction::Count)]
    warnings: u8,

    /// Accepted for bpftrace compatibility and does nothing: sdt has no
    /// LLVM IR to verify (it generates BPF directly, and the kernel's
    /// verifier checks every program).
    #[arg(long)]
    verify_llvm_ir: bool,

    /// Accepted for bpftrace compatibility and does nothing.
    #[arg(short = 'b', long = "btf", hide = true)]
    btf: bool,

    /// Accepted for bpftrace compatibility and does nothing: the file
    /// lists kernel functions, and sdt traces user space.
    #[arg(long, value_name = "FILE")]
    traceable_functions: Option<PathBuf>,

    /// Attach with this kernel mechanism: uprobe-multi, perf-link or
    /// perf-ioctl (for testing the paths older kernels take).
    #[arg(long, value_name = "MECHANISM", value_parser = crate::parse_mechanism, hide_short_help = true)]
    attach_with: Option<sdt_bpf::Mechanism>,

    /// Ring-buffer size: a power of two with an optional K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = crate::parse_size, hide_short_help = true)]
    buffer_size: u32,
}

/// Exit status of a script error, as bpftrace.
const EXIT_SCRIPT_ERROR: u8 = 1;

/// bpftrace's largest PID (`PID_MAX_LIMIT` on 64-bit machines).
const PID_MAX: u64 = 0x40_0000;

/// `bpftrace ARGS`: bpftrace's command line, its help, and its usage on a
/// bad option.
pub fn bpftrace(args: Vec<std::ffi::OsString>) -> anyhow::Result<ExitCode> {
    let mut command = RunArgs::command()
        .name("bpftrace")
        .bin_name("bpftrace")
        .override_usage(
            "bpftrace [OPTIONS] FILE [ARG]... [-- --NAME=VALUE...]\n    \
             bpftrace [OPTIONS] - <stdin input>\n    \
             bpftrace [OPTIONS] -e 'program' [ARG]...\n    \
             bpftrace -l [PATTERN | FILE]",
        )
        .about("sdt, run as bpftrace: bpftrace's language on user-space probes")
        .arg(
            clap::Arg::new("version")
                .short('V')
                .long("version")
                .action(clap::ArgAction::SetTrue)
                .help("Print the version"),
        );
    let argv = std::iter::once(std::ffi::OsString::from("bpftrace")).chain(args.iter().cloned());
    let usage = command.render_help();
    let matches = match command.try_get_matches_from_mut(argv) {
        Ok(m) => m,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {
            print!("{usage}");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            eprintln!("ERROR: {}", first.trim_start_matches("error: "));
            eprint!("{usage}");
            return Ok(ExitCode::from(1));
        }
    };
    if matches.get_flag("version") {
        println!("bpftrace v0.17.0 (sdt {})", env!("CARGO_PKG_VERSION"));
        return Ok(ExitCode::SUCCESS);
    }
    let args = RunArgs::from_arg_matches(&matches)?;
    if args.program.is_none() && args.args.is_empty() && !args.list && !args.info {
        eprintln!("ERROR: USAGE: filename or -e 'program' required.");
        eprint!("{usage}");
        return Ok(ExitCode::from(1));
    }
    run(args, Voice::Bpftrace)
}

/// `sdt run ARGS`, or bpftrace's command line in bpftrace's `voice`.
pub fn run(args: RunArgs, voice: Voice) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    if args.info {
        sdt_job::info::print();
        return Ok(ExitCode::SUCCESS);
    }
    let pids = args
        .pid
        .as_deref()
        .map(parse_pids)
        .transpose()?
        .unwrap_or_default();
    let format = Format::named(&args.format).ok_or_else(|| {
        let names: Vec<String> = Format::names().map(|name| format!("'{name}'")).collect();
        anyhow::anyhow!(
            "Invalid output format \"{}\"\nValid formats: {}",
            args.format,
            names.join(", ")
        )
    })?;
    let (positional, named) = split_parameters(&args.args);
    if args.list {
        return list(&args, voice, pids.first().copied(), &positional);
    }
    let (source, params) = script_source(&args, &positional)?;
    let request = args.request(source, params, named, pids, voice)?;
    let prepared = match Job::prepare(request) {
        Ok(prepared) => prepared,
        Err(failure) => return failure.report(voice),
    };
    let (job, fleet) = match args.fleet.options(args.serve.as_deref())? {
        None => match prepared.compile() {
            Ok(job) => (job, None),
            Err(failure) => return failure.report(voice),
        },
        Some(options) => match served(prepared, &args, voice, options, started)? {
            Ok((job, fleet)) => (job, Some(fleet)),
            Err(code) => return Ok(code),
        },
    };
    job.print_warnings(args.verbose);
    if args.dump {
        job.dump(&mut io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(fleet) = &fleet {
        if let Some(address) = fleet.address() {
            eprintln!("sdt: serving metrics at http://{address}/metrics");
        }
    }
    let sink = args.sink(format, voice, fleet.as_ref())?;
    let hooks = Hooks {
        started: Box::new(|started| {
            if let Some(fleet) = &fleet {
                let up = started
                    .map_reader()
                    .map(|reader| fleet.up(reader, started.probes(), started.labels()));
                if let Err(e) = up {
                    eprintln!("sdt: cannot read the maps for metrics: {e:#}");
                }
            }
        }),
        ..Hooks::default()
    };
    let outcome = match job.run(sink, hooks) {
        Ok(outcome) => outcome,
        Err(failure) => return failure.report(voice),
    };
    if let Some(fleet) = fleet {
        crate::fleet::report_push(fleet.finish());
    }
    if args.verbose && outcome.summary.fast_replayed > 0 {
        eprintln!(
            "sdt: {} hits came by the fast path",
            outcome.summary.fast_replayed
        );
    }
    if let (Some(code), true) = (outcome.command_status, args.verbose) {
        eprintln!("sdt: the command exited with status {code}");
    }
    Ok(ExitCode::from(outcome.status))
}

/// The job of a program whose maps are served (`--serve`) or pushed
/// (`--otlp`): compiled with the blocks its span pragmas add, its maps
/// named as metrics, its endpoint listening. An error in the script or
/// its pragmas is reported here, and its exit status returned.
fn served(
    prepared: Prepared,
    args: &RunArgs,
    voice: Voice,
    options: FleetOptions,
    started: std::time::Instant,
) -> anyhow::Result<Result<(Job, Fleet), ExitCode>> {
    let source = prepared.source();
    let files = if args.program.is_some() {
        ProgramFiles::inline(source.text.clone())
    } else {
        ProgramFiles::new(source.name.as_ref(), source.text.clone())
    };
    let compile = |text: &str| prepared.compile_text(text);
    let (text, compilation, mut fleet) = match Fleet::compile(&options, files, &compile, started) {
        Ok(compiled) => compiled,
        Err(FleetError::Script { text, diagnostics }) => {
            return prepared.failure(diagnostics, text).report(voice).map(Err);
        }
        Err(FleetError::Config(e)) => {
            eprintln!("{e}");
            return Ok(Err(ExitCode::from(EXIT_SCRIPT_ERROR)));
        }
    };
    fleet.start(&options)?;
    Ok(Ok((prepared.into_job(text, compilation), fleet)))
}

impl RunArgs {
    /// The job these arguments ask for.
    fn request(
        &self,
        source: Source,
        params: Vec<String>,
        named: sdt_job::Named,
        pids: Vec<i32>,
        voice: Voice,
    ) -> anyhow::Result<Request> {
        if let Some(filter) = &self.probe_filter {
            regex::Regex::new(filter)
                .with_context(|| format!("--probe-filter {filter}: not a regular expression"))?;
        }
        let mechanism = match (&self.attach_with, &self.no_feature) {
            (Some(m), _) => Some(*m),
            (None, Some(features)) if features.split(',').any(|f| f.trim() == "uprobe_multi") => {
                Some(sdt_job::Mechanism::PerfLink)
            }
            _ => None,
        };
        let target = match (pids.is_empty(), &self.command) {
            (false, _) => Target::Pids(pids),
            (true, Some(command)) => Target::Command(command.clone()),
            (true, None) => Target::Everything,
        };
        Ok(Request {
            params,
            named,
            includes: self.include.clone(),
            include_dirs: self.include_dirs.clone(),
            probe_filter: self.probe_filter.clone(),
            target,
            cgroup: self.cgroup.clone(),
            follow: !self.no_follow,
            ring_size: self.buffer_size,
            suggest_buffer_size: true,
            mechanism,
            allow_unsafe: self.allow_unsafe,
            debug_dirs: self.debuginfo.clone(),
            stamp_printf: self.timeline.timeline.is_some(),
            voice,
            warnings: !self.no_warnings,
            announce: !self.quiet,
            // bpftrace 0.24's line, beside 0.23's (see docs/language.md).
            confirm_attached: !self.quiet && voice == Voice::Bpftrace && self.format == "text",
            compile_only: self.dump,
            ..Request::new(source)
        })
    }

    /// Where the output goes: the format on standard output or `-o`,
    /// buffered as `-B` says, the pictures beside it, the fleet's spans
    /// taken out of it.
    fn sink(
        &self,
        format: Format,
        voice: Voice,
        fleet: Option<&Fleet>,
    ) -> anyhow::Result<Box<dyn Sink>> {
        let notify = std::env::var_os(sdt_job::NOTIFY).is_some();
        let buffering = match self.buffering.as_deref() {
            Some("none") => Buffering::None,
            Some("full") => Buffering::Full,
            Some(_) => Buffering::Line,
            // BEGIN's output waits in the buffer for the notification.
            None if notify => Buffering::Full,
            None if self.output.is_none() && io::stdout().is_terminal() => Buffering::Line,
            None => Buffering::Full,
        };
        let out = Box::new(Output::open(self.output.as_deref(), buffering)?);
        let sink: Box<dyn Sink> = match format {
            // bpftrace ends a program with two newlines on standard output,
            // also with -o, where the file does not get them.
            format
                if format == Format::TEXT && voice == Voice::Bpftrace && self.output.is_some() =>
            {
                Box::new(sdt_output::text::Text::new(out).separator_to(Box::new(io::stdout())))
            }
            format => format.sink(out),
        };
        let mut pictures: Vec<Box<dyn Sink>> = Vec::new();
        if let Some(path) = &self.flamegraph {
            pictures.push(Box::new(crate::pictures::flamegraph(path)?));
        }
        pictures.extend(self.timeline.sink([])?);
        let sink = Tee::of(sink, pictures);
        Ok(match fleet {
            Some(fleet) => fleet.sink(sink),
            None => sink,
        })
    }
}

/// `-p PID[,PID...]`, each checked as bpftrace checks its one PID.
fn parse_pids(text: &str) -> anyhow::Result<Vec<i32>> {
    text.split(',').map(parse_pid).collect()
}

/// bpftrace's check of `-p`: a decimal number no larger than the largest
/// PID, before anything else is read.
fn parse_pid(text: &str) -> anyhow::Result<i32> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        anyhow::bail!("Failed to parse pid: invalid integer: {text}");
    }
    let pid: u64 = text
        .parse()
        .map_err(|_| anyhow::anyhow!("Failed to parse pid: invalid trailing bytes: {text}"))?;
    if pid > PID_MAX {
        anyhow::bail!("Pid out of range: {pid}");
    }
    Ok(pid as i32)
}

/// Splits the words after the options into positional parameters and
/// named ones: a word that starts with `--` can only have come after `--`
/// (before it, it would have been taken as an option), and is `--NAME` or
/// `--NAME=VALUE`.
fn split_parameters(words: &[String]) -> (Vec<String>, sdt_job::Named) {
    let mut positional = Vec::new();
    let mut named = HashMap::new();
    for word in words {
        match word.strip_prefix("--").filter(|rest| !rest.is_empty()) {
            Some(rest) => {
                let (name, value) = match rest.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_string())),
                    None => (rest, None),
                };
                named.insert(name.to_string(), value);
            }
            None => positional.push(word.clone()),
        }
    }
    (positional, named)
}

/// `-l`: the probes of a pattern, of a program, or of the `-p` process.
fn list(
    args: &RunArgs,
    voice: Voice,
    pid: Option<i32>,
    positional: &[String],
) -> anyhow::Result<ExitCode> {
    if positional.len() > 1 {
        anyhow::bail!("-l takes one pattern or program file, not {positional:?}");
    }
    let word = positional.first().map(String::as_str);
    let (source, params) = match (&args.program, word) {
        (Some(text), _) => (Source::inline(text.clone()), positional.to_vec()),
        (None, Some(file)) if Path::new(file).is_file() => (Source::file(file)?, Vec::new()),
        _ => {
            let pattern = word.unwrap_or("");
            if pattern.contains('.') && !pattern.contains([':', '*']) {
                eprintln!("{}", voice.warning(&format!(
                    "It appears that '{pattern}' is a filename but the file does not exist. Treating '{pattern}' as a search pattern."
                )));
            }
            return points::list(pattern, pid, args.verbose, &args.debuginfo);
        }
    };
    match points::list_program(&source.text, &params, pid, args.verbose, &args.debuginfo) {
        Ok(listed) => listed,
        Err(diagnostics) => Failure::Script {
            diagnostics,
            name: source.name,
            text: source.text,
        }
        .report(voice),
    }
}

/// The script and its positional parameters.
fn script_source(args: &RunArgs, positional: &[String]) -> anyhow::Result<(Source, Vec<String>)> {
    if let Some(program) = &args.program {
        return Ok((Source::inline(program.clone()), positional.to_vec()));
    }
    let Some((file, params)) = positional.split_first() else {
        anyhow::bail!("no program: give one with -e 'PROGRAM' or as a file (see sdt run --help)");
    };
    let source = if file == "-" {
        Source::stdin()?
    } else {
        Source::file(file)?
    };
    Ok((source, params.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_checked_as_bpftrace_checks_them() {
        assert_eq!(parse_pid("1234").unwrap(), 1234);
        let err = |t: &str| parse_pid(t).unwrap_err().to_string();
        assert_eq!(err("a1111"), "Failed to parse pid: invalid integer: a1111");
        assert_eq!(
            err("111a1"),
            "Failed to parse pid: invalid trailing bytes: 111a1"
        );
        assert_eq!(err("5000000"), "Pid out of range: 5000000");
        assert_eq!(parse_pids("12,34").unwrap(), [12, 34]);
        assert!(parse_pids("12,").is_err());
    }

    #[test]
    fn words_after_the_options_are_positional_or_named() {
        let words: Vec<String> = ["pos1", "--aa=20", "--dd", "pos2", "--cc=a=b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (positional, named) = split_parameters(&words);
        assert_eq!(positional, ["pos1", "pos2"]);
        assert_eq!(named.get("aa"), Some(&Some("20".to_string())));
        assert_eq!(named.get("dd"), Some(&None));
        assert_eq!(named.get("cc"), Some(&Some("a=b".to_string())));
    }

    fn parse(words: &[&str]) -> RunArgs {
        RunArgs::try_parse_from(std::iter::once("sdt run").chain(words.iter().copied())).unwrap()
    }

    #[test]
    fn options_may_follow_the_program_file() {
        let a = parse(&["script.bt", "-c", "./prog", "arg", "--no-warnings"]);
        assert_eq!(a.args, ["script.bt", "arg"]);
        assert_eq!(a.command.as_deref(), Some("./prog"));
        assert!(a.no_warnings);
        let a = parse(&["script.bt", "9", "-p", "9", "--usdt-file-activation"]);
        assert_eq!(a.args, ["script.bt", "9"]);
        assert_eq!(a.pid.as_deref(), Some("9"));
        let a = parse(&["-e", "first", "-e", "second", "--", "-5", "--x=1"]);
        assert_eq!(a.program.as_deref(), Some("second"), "the last -e counts");
        assert_eq!(a.args, ["-5", "--x=1"]);
        let a = parse(&[
            "--output",
            "f",
            "--cmd",
            "c",
            "--list",
            "--quiet",
            "--verify-llvm-ir",
        ]);
        assert_eq!(a.output.as_deref(), Some(Path::new("f")));
        assert!(a.list && a.quiet && a.verify_llvm_ir);
        assert!(RunArgs::try_parse_from(["sdt run", "-e", "x", "--aa=20"]).is_err());
        assert!(RunArgs::try_parse_from(["sdt run", "-idonotexist"]).is_err());
    }
}
