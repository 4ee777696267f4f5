//! `sdt run`, and `bpftrace` when sdt is installed under that name: the
//! bpftrace language on user-space probes.

mod listing;
mod output;

use std::io::{self, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sdt_lang::check::{CheckOptions, DEFAULT_STRLEN, MAX_STRLEN};
use sdt_lang::diag::Diagnostics;
use sdt_output::tee::Tee;
use sdt_output::{Format, Losses, Sink};
use sdt_runtime::run::{RunOptions, Runner, Summary};
use sdt_script::Compilation;
use sdt_trace::Scope;

use self::output::{Buffering, Output};
use crate::pictures::TimelineArgs;
use crate::traced::Traced;

const AFTER_HELP: &str = "\
PROBES:
  usdt:PATH:[PROVIDER:]NAME     a USDT probe; PATH may be a program or library name,
                                or, with -p, empty (usdt::NAME) or a glob over the
                                process's objects
  uprobe:PATH:FUNCTION          a function's entry; also FUNCTION+OFFSET or an address;
                                globs match mangled and demangled C++ and Rust names
  uretprobe:PATH:FUNCTION       a function's return
  tracepoint:CATEGORY:NAME      a kernel tracepoint, e.g. tracepoint:syscalls:sys_enter_openat
  interval:s:N, interval:ms:N   every N seconds or milliseconds (also us, hz)
  BEGIN, END                    before the first probe and after the last

EXAMPLES:
  sdt run -e 'usdt:python3.11:python:function__entry { @[str(arg1)] = count(); }' -c 'python3.11 app.py'
  sdt run -p \"$(pgrep -n postgres)\" -e 'usdt::postgresql:query__start { printf(\"%s\\n\", str(arg0)); }'
  sdt run -e 'uretprobe:libc:malloc /pid == $1/ { @bytes = hist(retval); }' 1234
  sdt run script.bt ARG1 ARG2
  sdt run -l 'usdt:/usr/lib/postgresql/15/bin/postgres:*'

AS BPFTRACE:
  Installed under the name `bpftrace` (ln -s \"$(command -v sdt)\" ~/bin/bpftrace), or run as
  `sdt bpftrace ARGS`, sdt takes bpftrace's command line and prints what bpftrace prints,
  such as `Attaching N probes...` on standard output.

ENVIRONMENT:
  BPFTRACE_STRLEN          bytes of a string from str(), NUL included (default 64, at most 4096)
  BPFTRACE_MAP_KEYS_MAX    entries of each map (default 4096)

Tracing needs root, or the capabilities CAP_BPF, CAP_PERFMON and, for tracepoints,
CAP_SYS_ADMIN.";

/// Run a bpftrace program on user-space probes.
#[derive(Parser, Debug)]
#[command(
    name = "sdt run",
    after_help = AFTER_HELP,
    override_usage = "sdt run [OPTIONS] (-e PROGRAM | FILE) [ARG]...\n       sdt run -l [PATTERN]"
)]
pub struct RunArgs {
    /// The program text.
    #[arg(short = 'e', value_name = "PROGRAM")]
    program: Option<String>,

    /// The program file (or `-` for standard input), then its positional
    /// parameters $1, $2, ...; with -e, every word is a parameter.
    #[arg(
        value_name = "FILE|ARG",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<String>,

    /// Trace this process (and the processes it starts, unless
    /// --no-follow); stop when it ends.
    #[arg(short = 'p', value_name = "PID", conflicts_with = "command")]
    pid: Option<i32>,

    /// Run CMD (split like a shell would), trace it and the processes it
    /// starts, and exit with its exit status when it ends.
    #[arg(short = 'c', value_name = "CMD", long_help = crate::traced::COMMAND_HELP)]
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
    #[arg(short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,

    /// Output format: text, json (one JSON object per line), or folded
    /// (maps keyed by ustack as folded stacks for flame graphs, the rest as
    /// text on standard error).
    #[arg(short = 'f', value_name = "FORMAT", default_value = "text", value_parser = parse_format)]
    format: Format,

    /// Also write the maps keyed by ustack as an interactive SVG flame
    /// graph to FILE when the run ends; with several such maps, one file
    /// each, named with the map's name before FILE's extension
    /// (flame@stacks.svg).
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,

    #[command(flatten)]
    timeline: TimelineArgs,

    /// Quiet: no `Attaching N probes...`.
    #[arg(short = 'q')]
    quiet: bool,

    /// Verbose: sites refused, attach details, the command's exit status.
    #[arg(short = 'v')]
    verbose: bool,

    /// Output buffering: none, line or full (default: line on a terminal,
    /// full otherwise, flushed at least every 20 ms).
    #[arg(short = 'B', value_name = "MODE", value_parser = ["none", "line", "full"])]
    buffering: Option<String>,

    /// List probes matching PATTERN (all of the -p process's without one).
    #[arg(short = 'l', value_name = "PATTERN", num_args = 0..=1, default_missing_value = "")]
    list: Option<String>,

    /// Print the resolved sites and every generated program, then exit.
    #[arg(long, visible_alias = "dry-run")]
    dump: bool,

    /// Allow system().
    #[arg(long = "unsafe")]
    allow_unsafe: bool,

    /// Accepted for bpftrace compatibility; sdt always raises semaphores
    /// through the kernel.
    #[arg(long, hide = true)]
    usdt_file_activation: bool,

    /// Accepted for bpftrace compatibility.
    #[arg(long, hide = true)]
    no_warnings: bool,

    /// Attach with this kernel mechanism: uprobe-multi, perf-link or
    /// perf-ioctl (for testing the paths older kernels take).
    #[arg(long, value_name = "MECHANISM", value_parser = crate::parse_mechanism, hide_short_help = true)]
    attach_with: Option<sdt_bpf::Mechanism>,

    /// Ring-buffer size: a power of two with an optional K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = crate::parse_size, hide_short_help = true)]
    buffer_size: u32,
}

/// How the command line was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `sdt run`.
    Sdt,
    /// As `bpftrace`: bpftrace's messages on standard output.
    Bpftrace,
}

/// Exit status of a script error, as bpftrace.
const EXIT_SCRIPT_ERROR: u8 = 1;

pub fn run(args: RunArgs, mode: Mode) -> anyhow::Result<ExitCode> {
    if let Some(pattern) = &args.list {
        return listing::list(pattern, args.pid, args.verbose);
    }
    let (name, source, params) = script_source(&args)?;
    let traced = Traced::start(args.pid, args.command.as_deref())?;
    start_and_run(&args, mode, &name, &source, params, traced)
}

/// The script's name for messages, its text, and its positional parameters.
fn script_source(args: &RunArgs) -> anyhow::Result<(String, String, Vec<String>)> {
    if let Some(program) = &args.program {
        return Ok(("stdin".to_string(), program.clone(), args.args.clone()));
    }
    let Some((file, params)) = args.args.split_first() else {
        anyhow::bail!("no program: give one with -e 'PROGRAM' or as a file (see sdt run --help)");
    };
    let source = if file == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the program from standard input")?;
        text
    } else {
        std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the program file {file}"))?
    };
    Ok((file.clone(), source, params.to_vec()))
}

fn strlen() -> anyhow::Result<u32> {
    match std::env::var("BPFTRACE_STRLEN") {
        Ok(v) => {
            let n: u32 = v
                .trim()
                .parse()
                .with_context(|| format!("BPFTRACE_STRLEN={v} is not a number"))?;
            anyhow::ensure!(
                (1..=MAX_STRLEN).contains(&n),
                "BPFTRACE_STRLEN={n} must be between 1 and {MAX_STRLEN}"
            );
            Ok(n)
        }
        Err(_) => Ok(DEFAULT_STRLEN),
    }
}

fn map_entries() -> anyhow::Result<u32> {
    match std::env::var("BPFTRACE_MAP_KEYS_MAX") {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("BPFTRACE_MAP_KEYS_MAX={v} is not a number")),
        Err(_) => Ok(4096),
    }
}

fn start_and_run(
    args: &RunArgs,
    mode: Mode,
    name: &str,
    source: &str,
    params: Vec<String>,
    traced: Traced,
) -> anyhow::Result<ExitCode> {
    let mechanism = if args.dump {
        args.attach_with.unwrap_or(sdt_bpf::Mechanism::UprobeMulti)
    } else {
        sdt_trace::mechanism(args.attach_with)?
    };
    let options = sdt_script::Options {
        check: CheckOptions {
            params,
            strlen: strlen()?,
            allow_unsafe: args.allow_unsafe,
            internal: false,
        },
        scope: Scope {
            pid: traced.pid,
            default_target: traced.program.clone(),
        },
        mechanism,
        codegen: sdt_codegen::Options {
            wake_at: args.buffer_size / 8,
            start_ns: monotonic_ns(),
            cpid: traced.cpid(),
            map_entries: map_entries()?,
            ring_size: args.buffer_size,
            stamp_printf: args.timeline.timeline.is_some(),
            machine: sdt_codegen::Machine::current(),
        },
    };
    let compilation = match sdt_script::compile_named(name, source, &options) {
        Ok(c) => c,
        Err(diagnostics) => return Ok(report(&diagnostics, name, source)),
    };
    for warning in &compilation.warnings {
        eprintln!("sdt: warning: {warning}");
    }
    if args.verbose {
        for note in &compilation.program.type_notes {
            eprintln!("sdt: {note}");
        }
    }
    if args.dump {
        dump(&compilation);
        return Ok(ExitCode::SUCCESS);
    }

    let buffering = match args.buffering.as_deref() {
        Some("none") => Buffering::None,
        Some("full") => Buffering::Full,
        Some(_) => Buffering::Line,
        None if args.output.is_none() && io::stdout().is_terminal() => Buffering::Line,
        None => Buffering::Full,
    };
    let out = Box::new(Output::open(args.output.as_deref(), buffering)?);
    let sink: Box<dyn Sink> = match args.format {
        // bpftrace ends a program with two newlines on standard output,
        // also with -o, where the file does not get them.
        format if format == Format::TEXT && mode == Mode::Bpftrace && args.output.is_some() => {
            Box::new(sdt_output::text::Text::new(out).separator_to(Box::new(io::stdout())))
        }
        format => format.sink(out),
    };
    let mut pictures: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(path) = &args.flamegraph {
        pictures.push(Box::new(crate::pictures::flamegraph(path)?));
    }
    pictures.extend(args.timeline.sink([])?);
    let sink = Tee::of(sink, pictures);
    let run = RunOptions {
        mechanism,
        pid: traced.pid,
        follow: !args.no_follow,
        allow_unsafe: args.allow_unsafe,
    };
    let mut runner = Runner::load(&compilation, &run, sink)
        .map_err(|e| load_error(e, &compilation, name, source))?;
    if !args.quiet {
        let count = compilation.probe_count;
        match mode {
            Mode::Bpftrace => runner.runtime().sink().attached(count),
            Mode::Sdt => eprintln!(
                "Attaching {count} probe{}...",
                if count == 1 { "" } else { "s" }
            ),
        }
        runner.runtime().flush();
    }
    let mut ended = traced.run(runner, true, &|| false, |_, _| {})?;
    report_losses(&ended.summary, ended.runtime.sink());
    ended.runtime.sink().finish();
    if let Some(e) = ended.runtime.error() {
        if e.kind() != io::ErrorKind::BrokenPipe {
            anyhow::bail!("cannot write the output: {e}");
        }
    }
    match ended.command_status {
        Some(code) => {
            if args.verbose {
                eprintln!("sdt: the command exited with status {code}");
            }
            Ok(ExitCode::from(code))
        }
        None => Ok(ExitCode::from(
            ended.summary.exit_code.map_or(0, |c| c as u8),
        )),
    }
}

/// Reports what was lost, to the output (which may record it) and on
/// standard error.
fn report_losses(summary: &Summary, sink: &mut dyn Sink) {
    sink.lost(&Losses {
        events: summary.lost_events,
        stacks: summary.lost_stacks,
        full_maps: summary.full_maps.clone(),
    });
    if summary.lost_events > 0 {
        eprintln!(
            "sdt: {} records lost because the ring buffer was full; try a larger --buffer-size or -o FILE",
            summary.lost_events
        );
    }
    if summary.lost_stacks > 0 {
        eprintln!("sdt: {} stacks could not be recorded", summary.lost_stacks);
    }
    for (map, n) in &summary.full_maps {
        eprintln!("sdt: {n} updates of {map} were dropped because it was full; raise BPFTRACE_MAP_KEYS_MAX");
    }
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::named(name).ok_or_else(|| {
        let names: Vec<&str> = sdt_output::FORMATS.iter().map(|f| f.name).collect();
        format!(
            "`{name}` is not an output format: one of {}",
            names.join(", ")
        )
    })
}

/// Prints diagnostics and returns bpftrace's exit status for them.
fn report(diagnostics: &Diagnostics, name: &str, source: &str) -> ExitCode {
    let mut stderr = codespan_reporting::term::termcolor::StandardStream::stderr(
        if io::stderr().is_terminal() {
            codespan_reporting::term::termcolor::ColorChoice::Auto
        } else {
            codespan_reporting::term::termcolor::ColorChoice::Never
        },
    );
    for d in &diagnostics.0 {
        if d.render(name, source, &mut stderr).is_err() {
            eprintln!("{name}: error: {}", d.message);
        }
    }
    let _ = stderr.flush();
    ExitCode::from(EXIT_SCRIPT_ERROR)
}

/// A load failure: a verifier rejection is mapped back to the script.
fn load_error(
    e: sdt_trace::Error,
    compilation: &Compilation,
    name: &str,
    source: &str,
) -> anyhow::Error {
    if let sdt_trace::Error::Load {
        program,
        source: sdt_bpf::Error::Verifier { log, .. },
    } = &e
    {
        if let Some(p) = compilation
            .compiled
            .programs
            .iter()
            .find(|p| &p.name == program)
        {
            let span = verifier_span(log.as_str(), &p.spans)
                .unwrap_or(p.spans.first().map_or_else(Default::default, |s| s.1));
            let d = sdt_lang::diag::Diagnostic::error(span, format!("the kernel's verifier rejected the program for {}", p.display))
                .label("the verifier stopped here")
                .hint(log.summary().lines().last().unwrap_or("").to_string())
                .hint("sdt run --dump prints the program; a loop the verifier cannot bound is the usual cause");
            let text = d.to_text(name, source);
            return anyhow::anyhow!("{}", text.trim_end());
        }
    }
    anyhow::Error::from(e)
}

/// The script span of the last instruction the verifier looked at.
fn verifier_span(
    log: &str,
    spans: &[(usize, sdt_lang::diag::Span)],
) -> Option<sdt_lang::diag::Span> {
    let insn: usize = log
        .lines()
        .rev()
        .find_map(|l| l.split(':').next()?.trim().parse().ok())?;
    spans
        .iter()
        .rev()
        .find(|(start, _)| *start <= insn)
        .map(|s| s.1)
}

/// `--dump`: the sites and the generated programs.
fn dump(compilation: &Compilation) {
    let mut out = io::stdout().lock();
    for b in compilation.bound.iter().flatten() {
        let _ = writeln!(out, "{}", b.text);
        if let sdt_bind::Target::Usdt(sites) = &b.target {
            for s in sites {
                let _ = writeln!(
                    out,
                    "  {}:{} {} {:#x} (file offset {:#x})",
                    s.provider,
                    s.name,
                    s.path.display(),
                    s.address,
                    s.attach_offset
                );
            }
        }
        if let sdt_bind::Target::Functions(fs) = &b.target {
            for f in fs {
                let _ = writeln!(
                    out,
                    "  {} {} {:#x} (file offset {:#x})",
                    f.function,
                    f.path.display(),
                    f.address,
                    f.file_offset
                );
            }
        }
    }
    let names = compilation.compiled.map_names();
    for p in &compilation.compiled.programs {
        let listing = sdt_bpf::disasm::Disassembler::new()
            .map_names(names.clone())
            .listing(&p.insns);
        let _ = writeln!(
            out,
            "\nprogram {} ({}, {} instructions):\n{listing}",
            p.display,
            p.name,
            p.insns.len()
        );
    }
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
