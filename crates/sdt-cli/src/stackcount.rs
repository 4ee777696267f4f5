//! `sdt stackcount`: how often each user stack reaches some probes, like
//! BCC's `stackcount` for user space.
//!
//! The tool is a program in sdt's own language, made from the probes
//! given (`--print-program` shows it): every probe counts its hits by
//! `ustack` in one map, which `sdt run` then prints as it prints any map:
//! as text, as folded stacks with `-f folded`, and as a flame graph with
//! `--flamegraph FILE`. So the stacks here and in `sdt run` are the same
//! stacks, folded by the same code.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Parser;
use sdt_trace::ProbeSpec;

use crate::run::{self, RunArgs};

/// Count the user stacks that reach USDT probes, uprobes or uretprobes.
#[derive(clap::Args, Debug)]
#[command(after_help = "PROBES:\n  \
    [usdt:][TARGET:]PROVIDER:NAME    a USDT probe, as `sdt trace` takes it (globs allowed)\n  \
    uprobe:TARGET:FUNCTION           a function's entry (globs allowed)\n  \
    uretprobe:TARGET:FUNCTION        a function's return\n\n\
    Stacks are walked through frame pointers: a program built without them gives\n\
    short stacks.\n\n\
EXAMPLES:\n  \
    sdt stackcount -c ./server app:slow_path                 stacks as text, at the end\n  \
    sdt stackcount -f folded -p 1234 'libc:malloc' > s.folded\n  \
    sdt stackcount --flamegraph alloc.svg -p 1234 uprobe:libc:malloc\n  \
    sdt stackcount -P -f folded -c ./prefork-server app:request   each worker apart\n  \
    sdt stackcount --print-program -c ./server 'app:*'       the program it runs")]
pub struct StackcountArgs {
    /// Probes whose stacks to count (see below).
    #[arg(required = true, value_name = "PROBE")]
    probes: Vec<String>,

    /// Trace only this process (and the processes it starts), and stop
    /// when it ends.
    #[arg(short = 'p', value_name = "PID", conflicts_with = "command")]
    pid: Option<i32>,

    /// Run CMD, trace it and the processes it starts, and stop when it ends.
    #[arg(short = 'c', value_name = "CMD", long_help = crate::COMMAND_HELP)]
    command: Option<String>,

    /// Output format: text (each stack, leaf first, with its count), folded
    /// (`frame;frame count`, root first, for flame graph tools) or json.
    #[arg(short = 'f', value_name = "FORMAT", default_value = "text",
          value_parser = crate::format_parser())]
    format: sdt_output::Format,

    /// Also write the stacks as an interactive SVG flame graph to FILE.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,

    /// Write the output to FILE.
    #[arg(short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,

    /// Count each process's stacks apart, as BCC's -P does: the command
    /// name and PID come first in the key, so they are the root frames of
    /// folded stacks and flame graphs (`server;1234;main;...`).
    #[arg(short = 'P', long = "per-process")]
    per_process: bool,

    /// Print the program the tool runs (for `sdt run`) and exit.
    #[arg(long)]
    print_program: bool,
}

pub fn run(args: StackcountArgs) -> anyhow::Result<ExitCode> {
    let program = program(&args.probes, args.per_process)?;
    if args.print_program {
        print!("{program}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut argv: Vec<OsString> = vec!["sdt run".into(), "-f".into(), args.format.name.into()];
    if let Some(pid) = args.pid {
        argv.extend(["-p".into(), pid.to_string().into()]);
    }
    if let Some(command) = args.command {
        argv.extend(["-c".into(), command.into()]);
    }
    if let Some(path) = args.flamegraph {
        argv.extend(["--flamegraph".into(), path.into()]);
    }
    if let Some(path) = args.output {
        argv.extend(["-o".into(), path.into()]);
    }
    argv.extend(["-e".into(), program.into()]);
    let run_args = RunArgs::try_parse_from(argv)?;
    run::run(run_args, sdt_job::Voice::Sdt)
}

/// The program that counts the stacks at `probes`: one block, every probe
/// an attach point of it; `per_process`, by process too.
fn program(probes: &[String], per_process: bool) -> anyhow::Result<String> {
    let points = probes
        .iter()
        .map(|p| attach_point(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let key = if per_process {
        "comm, pid, ustack"
    } else {
        "ustack"
    };
    Ok(format!(
        "// sdt stackcount: how often each user stack reaches the probes.\n{} {{\n  @[{key}] = count();\n}}\n",
        points.join(",\n")
    ))
}

/// A probe as `sdt trace` or bpftrace's `uprobe:`/`uretprobe:` take it,
/// as an attach point of sdt's language.
fn attach_point(probe: &str) -> anyhow::Result<String> {
    for kind in ["uprobe", "uretprobe"] {
        let Some(rest) = probe.strip_prefix(kind).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
        let Some((target, function)) = rest.split_once(':') else {
            bail!("`{probe}`: expected {kind}:TARGET:FUNCTION");
        };
        if target.is_empty() || function.is_empty() {
            bail!("`{probe}`: expected {kind}:TARGET:FUNCTION, neither empty");
        }
        // A C++ or Rust name (`shop::checkout(int)`) is one only quoted.
        let plain = function
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_*?.$@".contains(c));
        let function = if plain {
            function.to_string()
        } else {
            quoted(function)
        };
        return Ok(format!("{kind}:{}:{function}", quoted(target)));
    }
    let spec = ProbeSpec::parse(probe)?;
    let (provider, name) = spec.probe.split_once(':').unwrap_or(("*", &spec.probe));
    let target = spec.target.as_deref().map(quoted).unwrap_or_default();
    Ok(format!("usdt:{target}:{provider}:{name}"))
}

/// A target as a string of the language, so that any path is one.
fn quoted(target: &str) -> String {
    format!("\"{}\"", target.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_become_one_block_counting_by_stack() {
        let probes = [
            "app:slow_path".to_string(),
            "usdt:/bin/x:p:n*".to_string(),
            "uprobe:libc:malloc".to_string(),
            "uretprobe:/a \"b\":f".to_string(),
            "uprobe:x:shop::checkout(int)".to_string(),
        ];
        assert_eq!(
            program(&probes, false).unwrap(),
            "// sdt stackcount: how often each user stack reaches the probes.\n\
             usdt::app:slow_path,\n\
             usdt:\"/bin/x\":p:n*,\n\
             uprobe:\"libc\":malloc,\n\
             uretprobe:\"/a \\\"b\\\"\":f,\n\
             uprobe:\"x\":\"shop::checkout(int)\" {\n  @[ustack] = count();\n}\n"
        );
    }

    #[test]
    fn per_process_keys_by_command_and_pid_first() {
        assert!(program(&["app:slow".to_string()], true)
            .unwrap()
            .contains("@[comm, pid, ustack] = count();"));
    }

    #[test]
    fn bad_probes_are_refused() {
        for bad in ["uprobe:libc", "uprobe::malloc", "slow_path", "a::b"] {
            assert!(program(&[bad.to_string()], false).is_err(), "{bad}");
        }
    }
}
