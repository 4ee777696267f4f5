//! `sdt trace`: print every hit of one or more USDT probes, with arguments.

mod child;
mod output;
mod signals;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use sdt_trace::{Options, ProbeSpec, Scope, Session, StringArg};

use self::child::HeldChild;
use self::output::Printer;

const AFTER_HELP: &str = "\
PROBES:
  [TARGET:]PROVIDER:NAME, where PROVIDER and NAME may hold globs (* ? [..]).
  TARGET is a path, a program name found through PATH, or a library name
  found through the loader cache (libc, libstdc++, libpython3.11). Without
  TARGET, -p means every object the process maps and -c means the command's
  executable. A leading `usdt:` is accepted, as in bpftrace.

SCOPE:
  -p PID     trace one process; sdt ends when it ends
  -c CMD     start CMD, attach before its first instruction, trace only it,
             and exit with its exit status
  neither    trace every process that runs the file, including ones started
             later, until Ctrl-C

OUTPUT:
  One line per hit: seconds since start, PID, TID, command name, probe, and
  every argument, signed or unsigned as its spec says. Bytes from strings are
  printed as they are when printable and escaped (\\n, \\xNN) otherwise.
  --json prints one JSON object per hit and a final summary object:
    {\"time_ns\":..,\"pid\":..,\"tid\":..,\"comm\":\"..\",\"provider\":\"..\",\"name\":\"..\",
     \"path\":\"..\",\"address\":..,\"args\":[1,-2,\"str\"]}
    {\"summary\":{\"events\":N,\"lost\":N,\"sites\":N}}
  Events that the ring buffer had no room for are counted and reported at
  exit (stderr, or the summary object); none is lost silently.

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

    /// Trace only this process, and stop when it exits.
    #[arg(short, long, value_name = "PID", conflicts_with = "command")]
    pid: Option<i32>,

    /// Run this command (split like a shell would) and trace only it.
    #[arg(short, long, value_name = "CMD")]
    command: Option<String>,

    /// Read argument N as a string: up to a NUL, or with N:M, of the length
    /// in argument M (how the sdt crate passes &str); at most 255 bytes
    /// (repeatable).
    #[arg(short = 's', long = "string", value_name = "N[:M]", value_parser = parse_string_arg)]
    strings: Vec<StringArg>,

    /// Print JSON: one object per event, then a summary object.
    #[arg(long)]
    json: bool,

    /// Write events to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Ring-buffer size: a power of two with an optional K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size)]
    buffer_size: u32,

    /// Print the generated BPF programs to stderr before tracing.
    #[arg(long)]
    dump: bool,

    /// Attach with this kernel mechanism instead of the best available
    /// one (uprobe-multi, perf-link or perf-ioctl): for testing the paths
    /// older kernels take.
    #[arg(long, value_name = "MECHANISM", value_parser = parse_mechanism, hide_short_help = true)]
    attach_with: Option<sdt_bpf::Mechanism>,
}

fn parse_mechanism(text: &str) -> Result<sdt_bpf::Mechanism, String> {
    use sdt_bpf::Mechanism::*;
    [UprobeMulti, PerfLink, PerfIoctl]
        .into_iter()
        .find(|m| m.name().replace('_', "-") == text)
        .ok_or_else(|| format!("`{text}` is not one of uprobe-multi, perf-link, perf-ioctl"))
}

pub fn run(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let specs = args
        .probes
        .iter()
        .map(|p| ProbeSpec::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    let argv = match &args.command {
        Some(command) => {
            let argv = shlex::split(command)
                .filter(|argv| !argv.is_empty())
                .with_context(|| format!("cannot split -c command `{command}` into words"))?;
            Some(argv)
        }
        None => None,
    };
    // Before any thread exists, so that every thread inherits the mask.
    let signals = signals::Signals::block()?;

    let mut child = argv.as_deref().map(HeldChild::spawn).transpose()?;
    let scope = Scope {
        pid: args.pid.or(child.as_ref().map(HeldChild::pid)),
        default_target: match &argv {
            Some(argv) => Some(sdt_elf::resolve(&argv[0]).map_err(anyhow::Error::from)?),
            None => None,
        },
    };
    // Opened before anything else so that a process that exits while sdt
    // starts up still ends the trace, instead of failing to be found.
    let exit_fd = match scope.pid {
        Some(pid) => match sdt_bpf::process_exit_fd(pid) {
            Ok(fd) => Some(fd),
            Err(_) => bail!("no process with PID {pid}"),
        },
        None => None,
    };
    let started = start(&specs, &scope, &args);
    let (mut session, mut printer) = match started {
        Ok(started) => started,
        Err(err) => {
            if let Some(child) = child.take() {
                child.abandon();
            }
            return Err(err);
        }
    };

    signals.watch(&mut session)?;
    if let Some(fd) = &exit_fd {
        session.watch(fd.as_fd(), PROCESS_EXIT)?;
    }
    let mut running = match child.take() {
        Some(held) => Some(held.release()?),
        None => None,
    };
    // After the command is released, so the message costs it nothing; in
    // one write, so that scripts waiting for it never see half of it.
    let sites = session.sites().len();
    let live = format!(
        "sdt: tracing {sites} site{} ({}); Ctrl-C to stop\n",
        if sites == 1 { "" } else { "s" },
        session.mechanism().name()
    );
    let _ = io::stderr().write_all(live.as_bytes());

    let mut stop_signal = None;
    loop {
        let ready = session.poll(|event| printer.event(event))?;
        printer.flush();
        if printer.broken() {
            break;
        }
        if ready.contains(&signals::TOKEN) {
            stop_signal = signals.take();
            break;
        }
        if ready.contains(&PROCESS_EXIT) {
            break;
        }
    }

    let summary = session.finish(|event| printer.event(event))?;
    printer.summary(&summary);
    printer.flush();
    if let Some(err) = printer.error() {
        if err.kind() != io::ErrorKind::BrokenPipe {
            bail!("cannot write events: {err}");
        }
    }
    if summary.lost > 0 {
        eprintln!(
            "sdt: {} events lost because the ring buffer was full; try --buffer-size {} or -o FILE",
            summary.lost,
            size_text(u64::from(args.buffer_size) * 4)
        );
    }

    match running.take() {
        Some(mut child) => {
            if let Some(signal) = stop_signal {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(child.id() as i32, signal) };
            }
            let status = child.wait().context("waiting for the -c command")?;
            Ok(exit_code(status))
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

const PROCESS_EXIT: u64 = 2;

fn start(
    specs: &[ProbeSpec],
    scope: &Scope,
    args: &TraceArgs,
) -> anyhow::Result<(Session, Printer)> {
    let plan = sdt_trace::plan(specs, scope)?;
    for warning in &plan.warnings {
        eprintln!("sdt: warning: {warning}");
    }
    let options = Options {
        string_args: args.strings.clone(),
        buffer_size: args.buffer_size,
        pid: scope.pid,
        mechanism: args.attach_with,
    };
    let out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(io::stdout().lock()),
    };
    let session = Session::start(plan, &options)?;
    if args.dump {
        for (name, insns) in session.programs() {
            eprintln!("program {name}:\n{}", sdt_bpf::disasm::disassemble(insns));
        }
    }
    let printer = Printer::new(BufWriter::with_capacity(1 << 16, out), args.json);
    Ok((session, printer))
}

fn parse_string_arg(text: &str) -> Result<StringArg, String> {
    let index = |s: &str| {
        s.parse::<usize>()
            .map_err(|_| format!("`{s}` is not an argument number"))
    };
    Ok(match text.split_once(':') {
        Some((arg, len)) => StringArg {
            arg: index(arg)?,
            len_arg: Some(index(len)?),
        },
        None => StringArg {
            arg: index(text)?,
            len_arg: None,
        },
    })
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal) as u8),
        _ => ExitCode::FAILURE,
    }
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

fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_args() {
        let nul = StringArg {
            arg: 3,
            len_arg: None,
        };
        assert_eq!(parse_string_arg("3"), Ok(nul));
        let counted = StringArg {
            arg: 1,
            len_arg: Some(2),
        };
        assert_eq!(parse_string_arg("1:2"), Ok(counted));
        assert!(parse_string_arg("x").is_err());
        assert!(parse_string_arg("1:").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(
            parse_size("4M"),
            Ok(sdt_trace::DEFAULT_BUFFER_SIZE),
            "the --help default"
        );
        assert_eq!(parse_size("32M"), Ok(32 << 20));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("65536"), Ok(65536));
        assert!(parse_size("3M").is_err());
        assert!(parse_size("1K").is_err());
        assert!(parse_size("8X").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert_eq!(size_text(128 << 20), "128M");
    }
}
