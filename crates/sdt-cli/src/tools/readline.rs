//! `sdt readline`: the lines every bash reads interactively, through a
//! uretprobe on bash's `readline`, like BCC's `bashreadline`.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::{execute, fill, Prepared, Target, TEXT_LEN};

const READLINE: &str = include_str!("readline.bt");

/// Show the commands bash reads interactively, with the PID of the shell.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt readline                 every interactive bash on the machine\n  \
    sdt readline -p $$           this shell\n\n\
    Only lines read through readline show: interactive shells, not scripts.")]
pub struct ReadlineArgs {
    #[command(flatten)]
    target: Target,

    /// The file whose `readline` is probed: bash (default: bash in
    /// PATH), or the libreadline.so a bash built with the system's
    /// readline loads (`-s` as in BCC's bashreadline).
    #[arg(
        short = 'x',
        long = "exe",
        short_alias = 's',
        alias = "shared",
        value_name = "PATH"
    )]
    exe: Option<PathBuf>,
}

pub fn run(args: ReadlineArgs) -> anyhow::Result<ExitCode> {
    let bash = match &args.exe {
        Some(exe) => exe.clone(),
        None => sdt_elf::resolve("bash")?,
    };
    let program = fill(READLINE, &[("BASH", bash.display().to_string())]);
    let table = Lines {
        json: args.target.json,
        first_ns: None,
        header: false,
    };
    execute(
        &args.target,
        Prepared::Programs(vec![bash]),
        &program,
        Box::new(table),
        None,
        TEXT_LEN,
    )
}

struct Lines {
    json: bool,
    first_ns: Option<i128>,
    header: bool,
}

impl Receiver for Lines {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [pid, ns, line] = args.as_slice() else {
            return;
        };
        let ns = ns.int();
        let first = *self.first_ns.get_or_insert(ns);
        let mut out = io::stdout().lock();
        if self.json {
            let json = serde_json::json!({
                "pid": pid.int() as u64, "time_ns": (ns - first) as u64, "command": line.text(),
            });
            let _ = writeln!(out, "{json}");
            return;
        }
        if !self.header {
            self.header = true;
            let _ = writeln!(out, "{:<12} {:<7} COMMAND", "TIME(s)", "PID");
        }
        let _ = writeln!(
            out,
            "{:<12.6} {:<7} {}",
            (ns - first) as f64 / 1e9,
            pid.int(),
            line.text()
        );
    }

    fn map(&mut self, _: &str, _: Vec<MapRow>) {}
}
