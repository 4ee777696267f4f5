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

mod diagnostics;
mod include;
mod info;
mod listing;
mod output;

use std::collections::HashMap;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use sdt_lang::ast::Script;
use sdt_lang::check::{CheckOptions, MAX_STRLEN};
use sdt_lang::config::{Config, ConfigError};
use sdt_lang::diag::Diagnostics;
use sdt_lang::getopt::{self, BindError};
use sdt_output::tee::Tee;
use sdt_output::{Format, Losses, Sink};
use sdt_runtime::run::{RunOptions, Runner, Summary};
use sdt_runtime::traced::Traced;
use sdt_script::Compilation;
use sdt_serve::fleet::{Fleet, FleetError};
use sdt_serve::program::ProgramFiles;

use self::output::{Buffering, Output};
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

    /// Trace this process (and the processes it starts, unless
    /// --no-follow); stop when it ends. Tracepoints see only these
    /// processes too.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pid: Option<String>,

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

/// bpftrace's largest PID (`PID_MAX_LIMIT` on 64-bit machines).
const PID_MAX: u64 = 0x40_0000;

/// The environment variable bpftrace's test engine sets to learn when the
/// probes are attached.
const NOTIFY: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";

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
    run(args, Mode::Bpftrace)
}

pub fn run(args: RunArgs, mode: Mode) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    if args.info {
        info::print();
        return Ok(ExitCode::SUCCESS);
    }
    let pid = args.pid.as_deref().map(parse_pid).transpose()?;
    let format = Format::named(&args.format).ok_or_else(|| {
        let names: Vec<String> = sdt_output::FORMATS
            .iter()
            .map(|f| format!("'{}'", f.name))
            .collect();
        anyhow::anyhow!(
            "Invalid output format \"{}\"\nValid formats: {}",
            args.format,
            names.join(", ")
        )
    })?;
    let (positional, named) = split_parameters(&args.args);
    if args.list {
        return list(&args, mode, pid, &positional);
    }
    let (name, source, params) = script_source(&args, &positional)?;
    let script = match sdt_lang::parser::parse(&source) {
        Ok(script) => script,
        Err(d) => return Ok(report(&d.into(), mode, &name, &source)),
    };
    let Prepared { script, config } = match prepare(script, &args, mode, &name, &source)? {
        Ok(prepared) => prepared,
        Err(code) => return Ok(code),
    };
    let declared = getopt::declarations(&source);
    match getopt::bind(&declared, &named) {
        Ok(()) => {}
        Err(e) => return Ok(named_parameter_error(e, mode)),
    }
    let traced = Traced::start(pid, args.command.as_deref())?;
    let run = Run {
        args: &args,
        mode,
        format,
        config,
        name: &name,
        source: &source,
        params,
        named,
        started,
    };
    run.start(script, traced)
}

/// A parsed script with its includes read, its probes filtered, and the
/// configuration it runs with.
struct Prepared {
    script: Script,
    config: Config,
}

/// Reads the includes, filters the probes, resolves the configuration;
/// an error in the script is reported and its exit status returned.
fn prepare(
    mut script: Script,
    args: &RunArgs,
    mode: Mode,
    name: &str,
    source: &str,
) -> anyhow::Result<Result<Prepared, ExitCode>> {
    let base = Path::new(name).parent().filter(|_| name != "stdin");
    for file in &args.include {
        if include::locate(file, &args.include_dirs, base).is_none() {
            anyhow::bail!("--include {}: file not found", file.display());
        }
    }
    if let Err(d) = include::read(&mut script, &args.include, &args.include_dirs, base) {
        return Ok(Err(report(&d, mode, name, source)));
    }
    if let Some(filter) = &args.probe_filter {
        let regex = regex::Regex::new(filter)
            .with_context(|| format!("--probe-filter {filter}: not a regular expression"))?;
        filter_probes(&mut script, &regex);
    }
    let env = |variable: &str| std::env::var(variable).ok();
    let resolved = match sdt_lang::config::resolve(&script.config, &env) {
        Ok(r) => r,
        Err(ConfigError::Script(errors)) => {
            return Ok(Err(report(&Diagnostics(errors), mode, name, source)))
        }
        Err(ConfigError::Environment(why)) => anyhow::bail!("{why}"),
    };
    if !args.no_warnings && !resolved.warnings.is_empty() {
        report(&Diagnostics(resolved.warnings), mode, name, source);
    }
    Ok(Ok(Prepared {
        script,
        config: resolved.config,
    }))
}

/// Removes the attach points `--probe-filter` does not match, and the
/// probes left with none; BEGIN and END stay.
fn filter_probes(script: &mut Script, regex: &regex::Regex) {
    for probe in &mut script.probes {
        probe.attach_points.retain(|ap| {
            let kind = ap.fields[0].to_ascii_lowercase();
            (ap.fields.len() == 1 && (kind == "begin" || kind == "end")) || regex.is_match(&ap.text)
        });
    }
    script.probes.retain(|p| !p.attach_points.is_empty());
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
fn split_parameters(words: &[String]) -> (Vec<String>, getopt::Given) {
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

/// Reports a named parameter the program does not take, or `--help`.
fn named_parameter_error(e: BindError, mode: Mode) -> ExitCode {
    let prefix = |kind: &str| match mode {
        Mode::Bpftrace => format!("{}: ", kind.to_ascii_uppercase()),
        Mode::Sdt => format!("sdt: {kind}: "),
    };
    match e {
        BindError::Help(options) if options.is_empty() => {
            eprintln!("{}no custom program options defined.", prefix("hint"));
        }
        BindError::Help(options) => {
            eprintln!("{}expected program options:", prefix("hint"));
            for option in options {
                eprintln!("{option}");
            }
        }
        BindError::Unexpected {
            unexpected,
            expected,
        } => {
            let list = |names: &[String]| {
                names
                    .iter()
                    .map(|n| format!("--{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            eprintln!(
                "{}unexpected program command line options: {}",
                prefix("error"),
                list(&unexpected)
            );
            if expected.is_empty() {
                eprintln!("{}no custom program options defined.", prefix("hint"));
            } else {
                eprintln!(
                    "{}expected program options: {}",
                    prefix("hint"),
                    list(&expected)
                );
            }
        }
        BindError::Invalid(why) => eprintln!("{}{why}", prefix("error")),
    }
    ExitCode::from(EXIT_SCRIPT_ERROR)
}

/// `-l`: the probes of a pattern, of a program, or of the `-p` process.
fn list(
    args: &RunArgs,
    mode: Mode,
    pid: Option<i32>,
    positional: &[String],
) -> anyhow::Result<ExitCode> {
    if positional.len() > 1 {
        anyhow::bail!("-l takes one pattern or program file, not {positional:?}");
    }
    let word = positional.first().map(String::as_str);
    let program = match (&args.program, word) {
        (Some(text), _) => Some(("stdin".to_string(), text.clone())),
        (None, Some(file)) if Path::new(file).is_file() => {
            Some((file.to_string(), read_file(file)?))
        }
        _ => None,
    };
    let Some((name, source)) = program else {
        let pattern = word.unwrap_or("");
        if pattern.contains('.') && !pattern.contains([':', '*']) {
            eprintln!(
                "{}It appears that '{pattern}' is a filename but the file does not exist. Treating '{pattern}' as a search pattern.",
                match mode {
                    Mode::Bpftrace => "WARNING: ",
                    Mode::Sdt => "sdt: warning: ",
                }
            );
        }
        return listing::list(pattern, pid, args.verbose, &args.debuginfo);
    };
    let script = match sdt_lang::parser::parse(&source) {
        Ok(script) => script,
        Err(d) => return Ok(report(&d.into(), mode, &name, &source)),
    };
    let params = match &args.program {
        Some(_) => positional.to_vec(),
        None => Vec::new(),
    };
    match listing::list_program(&script, &params, pid, args.verbose, &args.debuginfo) {
        Ok(listed) => listed,
        Err(d) => Ok(report(&d, mode, &name, &source)),
    }
}

/// The script's name for messages, its text, and its positional parameters.
fn script_source(
    args: &RunArgs,
    positional: &[String],
) -> anyhow::Result<(String, String, Vec<String>)> {
    if let Some(program) = &args.program {
        return Ok(("stdin".to_string(), program.clone(), positional.to_vec()));
    }
    let Some((file, params)) = positional.split_first() else {
        anyhow::bail!("no program: give one with -e 'PROGRAM' or as a file (see sdt run --help)");
    };
    let source = if file == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the program from standard input")?;
        return Ok(("stdin".to_string(), text, params.to_vec()));
    } else {
        read_file(file)?
    };
    Ok((file.clone(), source, params.to_vec()))
}

/// A program file's text, or bpftrace's message for one that cannot be read.
fn read_file(file: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("failed to open file '{file}': {}", os_message(&e)))
}

/// An I/O error's message without Rust's ` (os error N)`.
pub fn os_message(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Everything a run is started with.
struct Run<'a> {
    args: &'a RunArgs,
    mode: Mode,
    format: Format,
    config: Config,
    name: &'a str,
    source: &'a str,
    params: Vec<String>,
    named: getopt::Given,
    /// When sdt started, for the program's load time in its metrics.
    started: std::time::Instant,
}

impl Run<'_> {
    fn strlen(&self) -> u32 {
        let wanted = self.config.max_strlen;
        if wanted > u64::from(MAX_STRLEN) {
            self.warn(&format!(
                "max_strlen {wanted} is more than sdt's {MAX_STRLEN}: strings are cut at {MAX_STRLEN} bytes"
            ));
        }
        wanted.clamp(1, u64::from(MAX_STRLEN)) as u32
    }

    fn warn(&self, text: &str) {
        if self.args.no_warnings {
            return;
        }
        match self.mode {
            Mode::Bpftrace => eprintln!("WARNING: {text}"),
            Mode::Sdt => eprintln!("sdt: warning: {text}"),
        }
    }

    /// `--include` and `--probe-filter` applied again, to the text the
    /// fleet compiles (they worked on the script already).
    fn reprepare(&self, mut script: Script) -> Result<Script, Diagnostics> {
        let base = Path::new(self.name)
            .parent()
            .filter(|_| self.name != "stdin");
        let args = self.args;
        include::read(&mut script, &args.include, &args.include_dirs, base)?;
        if let Some(regex) = args
            .probe_filter
            .as_deref()
            .and_then(|f| regex::Regex::new(f).ok())
        {
            filter_probes(&mut script, &regex);
        }
        Ok(script)
    }

    fn start(&self, script: Script, traced: Traced) -> anyhow::Result<ExitCode> {
        let args = self.args;
        let wanted = match (&args.attach_with, &args.no_feature) {
            (Some(m), _) => Some(*m),
            (None, Some(features)) if features.split(',').any(|f| f.trim() == "uprobe_multi") => {
                Some(sdt_bpf::Mechanism::PerfLink)
            }
            _ => None,
        };
        let mechanism = if args.dump {
            wanted.unwrap_or(sdt_bpf::Mechanism::UprobeMulti)
        } else {
            sdt_trace::mechanism(wanted)?
        };
        let options = sdt_script::Options {
            check: CheckOptions {
                params: self.params.clone(),
                strlen: self.strlen(),
                allow_unsafe: args.allow_unsafe,
                named_params: self.named.clone(),
                internal: false,
            },
            scope: sdt_trace::Scope {
                debug_dirs: args.debuginfo.clone(),
                ..traced.scope(args.allow_unsafe)
            },
            mechanism,
            missing_probes: self.config.missing_probes,
            codegen: sdt_codegen::Options {
                wake_at: args.buffer_size / 8,
                start_ns: monotonic_ns(),
                cpid: traced.cpid(),
                map_entries: u32::try_from(self.config.max_map_keys.max(1)).unwrap_or(u32::MAX),
                ring_size: args.buffer_size,
                stamp_printf: args.timeline.timeline.is_some(),
                machine: sdt_codegen::Machine::current(),
            },
        };
        let (text, compilation, fleet) = match args.fleet.options(args.serve.as_deref())? {
            None => match sdt_script::compile_parsed(self.name, self.source, script, &options) {
                Ok(c) => (self.source.to_string(), c, None),
                Err(diagnostics) => {
                    return Ok(report(&diagnostics, self.mode, self.name, self.source))
                }
            },
            Some(fleet_options) => {
                // The fleet adds the blocks of span pragmas to the text, so
                // it compiles text: prepared again as the script was.
                let compile = |text: &str| {
                    let parsed = sdt_lang::parser::parse(text).map_err(Diagnostics::from)?;
                    let prepared = self.reprepare(parsed)?;
                    sdt_script::compile_parsed(self.name, text, prepared, &options)
                };
                let files = if args.program.is_some() {
                    ProgramFiles::inline(self.source.to_string())
                } else {
                    ProgramFiles::new(self.name.as_ref(), self.source.to_string())
                };
                match Fleet::compile(&fleet_options, files, &compile, self.started) {
                    Ok((text, compilation, fleet)) => {
                        (text, compilation, Some((fleet, fleet_options)))
                    }
                    Err(FleetError::Script { text, diagnostics }) => {
                        return Ok(report(&diagnostics, self.mode, self.name, &text))
                    }
                    Err(FleetError::Config(e)) => {
                        eprintln!("{e}");
                        return Ok(ExitCode::from(EXIT_SCRIPT_ERROR));
                    }
                }
            }
        };
        let source = text.as_str();
        if !args.no_warnings && !compilation.skipped.is_empty() {
            let skipped = Diagnostics(compilation.skipped.clone());
            diagnostics::print(&skipped, self.mode == Mode::Bpftrace, self.name, source);
        }
        for warning in &compilation.warnings {
            self.warn(warning);
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
        let fleet = match fleet {
            Some((mut fleet, fleet_options)) => {
                fleet.start(&fleet_options)?;
                if let Some(address) = fleet.address() {
                    eprintln!("sdt: serving metrics at http://{address}/metrics");
                }
                Some(fleet)
            }
            None => None,
        };

        let notify = std::env::var_os(NOTIFY).is_some();
        let buffering = match args.buffering.as_deref() {
            Some("none") => Buffering::None,
            Some("full") => Buffering::Full,
            Some(_) => Buffering::Line,
            // BEGIN's output waits in the buffer for the notification.
            None if notify => Buffering::Full,
            None if args.output.is_none() && io::stdout().is_terminal() => Buffering::Line,
            None => Buffering::Full,
        };
        let out = Box::new(Output::open(args.output.as_deref(), buffering)?);
        let sink: Box<dyn Sink> = match self.format {
            // bpftrace ends a program with two newlines on standard output,
            // also with -o, where the file does not get them.
            format
                if format == Format::TEXT
                    && self.mode == Mode::Bpftrace
                    && args.output.is_some() =>
            {
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
        let sink = match &fleet {
            Some(fleet) => fleet.sink(sink),
            None => sink,
        };
        let run = RunOptions {
            mechanism,
            pid: traced.pid,
            follow: !args.no_follow,
            allow_unsafe: args.allow_unsafe,
            filter_tracepoints: args.pid.is_some(),
            max_cat_bytes: self.config.max_cat_bytes,
        };
        let mut runner = Runner::load(&compilation, &run, sink)
            .map_err(|e| load_error(e, &compilation, self.name, source))?;
        if !args.quiet {
            let count = compilation.probe_count;
            match self.mode {
                Mode::Bpftrace => runner.runtime().sink().attached(count),
                Mode::Sdt => eprintln!(
                    "Attaching {count} probe{}...",
                    if count == 1 { "" } else { "s" }
                ),
            }
            runner.runtime().flush();
        }
        let attached = |runner: &mut Runner<'_>, probes: usize| {
            if let Some(fleet) = &fleet {
                if let Err(e) = fleet.up(runner, probes) {
                    eprintln!("sdt: cannot read the maps for metrics: {e:#}");
                }
            }
            if notify {
                // Before what BEGIN printed, which is still buffered, and
                // on standard output whatever -o says, as bpftrace prints
                // it: bpftrace prints BEGIN's output once it has attached.
                let mut stdout = io::stdout().lock();
                let _ = writeln!(stdout, "{NOTIFY}");
                let _ = stdout.flush();
            }
        };
        let print_maps = self.config.print_maps_on_exit;
        let mut ended = traced.run(runner, print_maps, &|| false, attached)?;
        report_losses(&ended.summary, ended.runtime.sink());
        if let Some(fleet) = fleet {
            crate::fleet::report_push(fleet.finish());
        }
        ended.runtime.sink().finish();
        if let Some(e) = ended.runtime.error() {
            if e.kind() != io::ErrorKind::BrokenPipe {
                anyhow::bail!("cannot write the output: {e}");
            }
        }
        let exit_code = ended.summary.exit_code.map_or(0, |c| c as u8);
        match (ended.command_status, self.mode) {
            // bpftrace's status is the program's (exit(N)), whatever the
            // command's was.
            (Some(code), Mode::Bpftrace) => {
                if args.verbose {
                    eprintln!("sdt: the command exited with status {code}");
                }
                Ok(ExitCode::from(exit_code))
            }
            (Some(code), Mode::Sdt) => {
                if args.verbose {
                    eprintln!("sdt: the command exited with status {code}");
                }
                Ok(ExitCode::from(code))
            }
            (None, _) => Ok(ExitCode::from(exit_code)),
        }
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
        eprintln!("sdt: {n} updates of {map} were dropped because it was full; raise max_map_keys (BPFTRACE_MAX_MAP_KEYS)");
    }
}

/// Prints diagnostics and returns bpftrace's exit status for them.
fn report(diagnostics: &Diagnostics, mode: Mode, name: &str, source: &str) -> ExitCode {
    diagnostics::print(diagnostics, mode == Mode::Bpftrace, name, source);
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

/// Entries of each map of a served program: BPFTRACE_MAP_KEYS_MAX, as
/// bpftrace, else 4096.
pub fn map_entries() -> anyhow::Result<u32> {
    match std::env::var("BPFTRACE_MAP_KEYS_MAX") {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("BPFTRACE_MAP_KEYS_MAX={v} is not a number")),
        Err(_) => Ok(4096),
    }
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
