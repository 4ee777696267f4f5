//! `sdt`: find and trace user-space statically defined tracing probes.
//!
//! The binary is deliberately thin: argument parsing and output formatting
//! live here, every piece of real logic lives in a library crate
//! (`sdt-elf` for discovery, `sdt-bpf` for the kernel interface).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod list;
mod trace;

/// Statically defined tracing for Linux: list and trace USDT probes.
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
        sdt trace -p 1234 'postgresql:query__*'\n\n\
        Run `sdt help list` or `sdt help trace` for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    List(list::ListArgs),
    Trace(trace::TraceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::List(args) => list::run(args),
        Command::Trace(args) => trace::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("sdt: {err:#}");
            ExitCode::from(2)
        }
    }
}
