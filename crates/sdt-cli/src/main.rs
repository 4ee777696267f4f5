//! `sdt`: find and trace user-space statically defined tracing probes.
//!
//! The binary is deliberately thin: argument parsing and the choice of an
//! output format live here, every piece of real logic lives in a library
//! crate (`sdt-elf` for discovery, `sdt-script` for the language,
//! `sdt-trace` for the engine, `sdt-bpf` for the kernel interface,
//! `sdt-proc` for process control, `sdt-runtime` for running a program,
//! `sdt-output` for the formats, `sdt-tools` for the language tools).
//!
//! Installed (or linked) under the name `bpftrace`, the binary takes
//! bpftrace's command line, so that wrappers written for bpftrace run it;
//! under the name of one of BCC's tools (`ucalls`, `trace`, ...), that
//! tool's command line (`tools::bcc`, and `sdt-bcc` also for `sdt trace`).

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod dtrace;
mod fleet;
mod list;
mod pictures;
mod run;
mod stackcount;
mod tools;
mod trace;
mod types;

/// The `-c` option's `--help`, the same for every command that takes it.
pub const COMMAND_HELP: &str = "\
Run CMD (split into words like a shell would, then found in PATH), trace it and the \
processes it starts, and exit with its exit status when it ends. A probe that names \
no file is looked for in the program CMD runs in the end: past `env`, and for a \
script, the interpreter its #! line names.

CMD starts as a shell would start it: with the signal mask, ignored signals, \
environment and open descriptors sdt itself was given, and held just before its \
first instruction until the probes are attached. Output of BEGIN comes before \
anything CMD prints.

On SIGINT, SIGTERM or SIGHUP (Ctrl-C), or when the program calls exit(), sdt stops \
tracing, sends SIGTERM to CMD if it still runs (as bpftrace does), runs END and \
prints the maps, then waits for CMD at most half a second from the stop before \
killing it with SIGKILL (bpftrace kills it at once). sdt then exits with CMD's \
status (128+N for a signal N). A second SIGINT, SIGTERM or SIGHUP ends sdt at \
once, killing CMD.";

/// Statically defined tracing for Linux: list and trace USDT probes, and
/// run bpftrace programs on them.
#[derive(Parser)]
#[command(
    name = "sdt",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = "EXAMPLES:\n  \
        sdt list python3.11                     the probes of a program in PATH\n  \
        sdt list -v -p 1234                     every probe a process maps, in detail\n  \
        sdt trace -c 'python3.11 app.py' -s 1 python:function__entry\n  \
        sdt trace -p 1234 'postgresql:query__*'\n  \
        sdt run -e 'usdt::python:function__entry { @[str(arg1)] = count(); }' -c 'python3.11 app.py'\n  \
        sdt calls -L -c 'python3.11 app.py'      count calls; also flow, gc, objnew, threads, stat\n  \
        sdt serve /etc/sdt                       every program of a directory, as Prometheus metrics\n  \
        sdt stackcount -f folded -c ./app app:slow  the user stacks that reach a probe, for flame graphs\n  \
        sdt types ./server 'struct request'      a C type from the debug information, laid out like pahole\n  \
        sdt funccount 'c:malloc*'               BCC's tplist, trace, argdist, funccount, funclatency,\n                                          stackcount and memleak, with BCC's command lines\n\n\
        Run `sdt help COMMAND` (list, trace, run, types, calls, ...) for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    List(list::ListArgs),
    Trace(trace::TraceArgs),
    // Boxed: its many options make it far larger than the others.
    Run(Box<run::RunArgs>),
    Types(types::TypesArgs),
    Stackcount(stackcount::StackcountArgs),
    Calls(tools::CallsArgs),
    Flow(tools::FlowArgs),
    Gc(tools::GcArgs),
    Objnew(tools::ObjnewArgs),
    Threads(tools::ThreadsArgs),
    Dbslower(tools::DbslowerArgs),
    Readline(tools::ReadlineArgs),
    Stat(tools::StatArgs),
    Serve(fleet::ServeArgs),
    Dtrace(dtrace::DtraceArgs),
    /// Print shell completions: `sdt completions bash > /etc/bash_completion.d/sdt`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (sdt.1, sdt-run.1, ...) into DIR:
    /// `sdt manpages /usr/local/share/man/man1`.
    Manpages {
        #[arg(value_name = "DIR")]
        dir: std::path::PathBuf,
    },
    /// Closes probes handed over by an sdt that has exited (internal).
    #[command(name = "__release", hide = true)]
    Release {
        socket: std::path::PathBuf,
    },
    /// Take bpftrace's command line: `sdt bpftrace ARGS` is `bpftrace ARGS`.
    #[command(disable_help_flag = true)]
    Bpftrace {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == sdt_proc::hold::HOLD_ARG) {
        // The -c command, waiting to become itself (see sdt_proc::hold).
        sdt_proc::hold::main(argv.split_off(2));
    }
    let invoked_as = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // How errors are worded: bpftrace's way under its name.
    let mut as_bpftrace = invoked_as == "bpftrace";
    let result = if as_bpftrace {
        argv.remove(0);
        run::bpftrace(argv)
    } else if invoked_as == "dtrace" {
        dtrace::run_args(&argv[1..])
    } else if let Some(tool) = sdt_bcc::tool_named(&invoked_as) {
        sdt_bcc::run(tool, argv.split_off(1))
    } else if let Some(tool) = sdt_bcc::subcommand(&argv[1..]) {
        sdt_bcc::run(tool, argv.split_off(2))
    } else if let Some(tool) = tools::bcc::tool_named(&invoked_as) {
        argv.remove(0);
        tools::bcc::run(tool, argv)
    } else {
        match Cli::parse().command {
            Command::List(args) => list::run(args),
            Command::Trace(args) => trace::run(args),
            Command::Run(args) => run::run(*args, sdt_job::Voice::Sdt),
            Command::Calls(args) => tools::calls(args),
            Command::Flow(args) => tools::flow(args),
            Command::Gc(args) => tools::gc(args),
            Command::Objnew(args) => tools::objnew(args),
            Command::Threads(args) => tools::threads(args),
            Command::Dbslower(args) => tools::dbslower(args),
            Command::Readline(args) => tools::readline(args),
            Command::Stat(args) => tools::stat(args),
            Command::Serve(args) => fleet::serve(args),
            Command::Types(args) => types::run(args),
            Command::Stackcount(args) => stackcount::run(args),
            Command::Dtrace(args) => dtrace::run(args),
            Command::Completions { shell } => {
                let mut cli = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(shell, &mut cli, "sdt", &mut std::io::stdout());
                Ok(ExitCode::SUCCESS)
            }
            Command::Manpages { dir } => std::fs::create_dir_all(&dir)
                .and_then(|()| {
                    clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), &dir)
                })
                .map(|()| ExitCode::SUCCESS)
                .map_err(|e| anyhow::anyhow!("cannot write man pages into {}: {e}", dir.display())),
            Command::Bpftrace { args } => {
                as_bpftrace = true;
                // Scripts and wrappers look for a process named bpftrace.
                let _ = rustix::thread::set_name(c"bpftrace");
                run::bpftrace(args)
            }
            Command::Release { socket } => {
                if let Ok(fds) = sdt_proc::receive(&socket) {
                    sdt_job::close_all(fds);
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    };
    match result {
        Ok(code) => code,
        Err(err) if as_bpftrace => {
            eprintln!("ERROR: {err:#}");
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("sdt: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn parse_mechanism(text: &str) -> Result<sdt_bpf::Mechanism, String> {
    use sdt_bpf::Mechanism::*;
    [UprobeMulti, PerfLink, PerfIoctl]
        .into_iter()
        .find(|m| m.name().replace('_', "-") == text)
        .ok_or_else(|| format!("`{text}` is not one of uprobe-multi, perf-link, perf-ioctl"))
}

/// `-f FORMAT`: one of the output formats, by name (`--help` lists them).
fn format_parser() -> impl clap::builder::TypedValueParser<Value = sdt_output::Format> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(sdt_output::Format::names()).map(|name| {
        // Only the names of formats are possible values.
        sdt_output::Format::named(&name).unwrap_or(sdt_output::Format::TEXT)
    })
}

fn parse_size(text: &str) -> Result<u32, String> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let shift = match unit
        .to_ascii_uppercase()
        .trim_end_matches('B')
        .trim_end_matches('I')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(format!("unknown unit `{unit}`: use K, M or G")),
    };
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_shl(shift))
        .filter(|&n| n >> shift == digits.parse::<u64>().unwrap_or(0))
        .ok_or_else(|| format!("`{text}` is not a size"))?;
    let page = 4096;
    if !bytes.is_power_of_two() || bytes < page || bytes > 1 << 31 {
        return Err(format!("{text} must be a power of two between 4K and 2G"));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M"), Ok(4 << 20), "the --help default");
        assert_eq!(parse_size("32M"), Ok(32 << 20));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("65536"), Ok(65536));
        assert!(parse_size("3M").is_err());
        assert!(parse_size("1K").is_err());
        assert!(parse_size("8X").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
