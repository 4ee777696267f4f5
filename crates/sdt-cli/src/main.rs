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
#[command(name = "sdt", version, about, long_about = None, propagate_version = true)]
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
