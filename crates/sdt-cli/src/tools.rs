//! The language tools: `sdt calls`, `sdt flow`, `sdt gc`, ... — BCC's
//! `ucalls`, `uflow` and `ugc` as sdt subcommands.
//!
//! Each tool is a program in sdt's own language (the `.bt` files next to
//! this module, shipped inside the binary and shown by `--print-program`)
//! with placeholders for the probe names, which come from one table of
//! runtimes ([`runtimes`]). The program runs as `sdt run` runs it, but its
//! `printf` and map output arrives as data (a
//! [`Receiver`](sdt_runtime::Receiver)), from which the tool lays
//! out BCC-like tables or JSON.

mod calls;
mod dbslower;
mod flow;
mod gc;
mod objnew;
mod readline;
pub mod runtimes;
mod stat;
mod threads;

use std::cell::Cell;
use std::io::{self, Write};
use std::process::ExitCode;
use std::rc::Rc;

use clap::Args;
use sdt_lang::check::CheckOptions;
use sdt_runtime::run::RunOptions;
use sdt_runtime::run::{Runner, Summary};
use sdt_runtime::Receiver;
use sdt_trace::Scope;

pub use self::calls::{run as calls, CallsArgs};
pub use self::dbslower::{run as dbslower, DbslowerArgs};
pub use self::flow::{run as flow, FlowArgs};
pub use self::gc::{run as gc, GcArgs};
pub use self::objnew::{run as objnew, ObjnewArgs};
pub use self::readline::{run as readline, ReadlineArgs};
use self::runtimes::{Detected, Needs};
pub use self::stat::{run as stat, StatArgs};
pub use self::threads::{run as threads, ThreadsArgs};
use crate::traced::Traced;

/// Options every language tool takes.
#[derive(Args, Debug)]
pub struct Common {
    /// The language: java, python, ruby or php (found from -p or -c when
    /// not given).
    #[arg(short = 'l', value_name = "LANG")]
    pub lang: Option<String>,

    #[command(flatten)]
    pub target: Target,
}

/// What every tool traces and how it prints.
#[derive(Args, Debug)]
pub struct Target {
    /// Trace this process (and the processes it starts) only (default:
    /// every process of the program, including those that start later).
    #[arg(short = 'p', value_name = "PID", conflicts_with = "command")]
    pub pid: Option<i32>,

    /// Run CMD, trace it, and stop when it ends; its runtime's probes are
    /// switched on through its environment.
    #[arg(short = 'c', value_name = "CMD", long_help = crate::traced::COMMAND_HELP)]
    pub command: Option<String>,

    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Print the program the tool runs (for `sdt run`) and exit.
    #[arg(long)]
    pub print_program: bool,
}

/// Fills a tool's program: each `{{NAME}}` is replaced by its value.
pub fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut text = template.to_string();
    for (name, value) in values {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    debug_assert!(!text.contains("{{"), "unfilled placeholder in\n{text}");
    text
}

/// The `usdt:` prefix of the detected runtime's probes.
pub fn probe_prefix(detected: &Detected) -> String {
    format!(
        "usdt:{}:{}",
        detected.object.display(),
        detected.language.provider
    )
}

/// The `interval:s:N` block that prints the maps `report` every N
/// seconds, or nothing.
pub fn interval_block(interval: Option<u64>, report: &str) -> String {
    match interval {
        Some(seconds) => format!("interval:s:{seconds} {{\n{report}}}\n"),
        None => String::new(),
    }
}

/// Counts the reports a tool has printed, to stop after `limit` (the
/// COUNT of `INTERVAL COUNT`): the run stops, and the report END would
/// add is not printed. A tool with keys (`stat`'s screen) adds its own
/// reason to stop with [`Reports::or_when`].
#[derive(Clone)]
pub struct Reports {
    printed: Rc<Cell<u64>>,
    limit: Option<u64>,
    /// Asked between steps of the run (every few milliseconds).
    quit: Option<Rc<dyn Fn() -> bool>>,
}

impl Reports {
    pub fn new(limit: Option<u64>) -> Reports {
        Reports {
            printed: Rc::new(Cell::new(0)),
            limit,
            quit: None,
        }
    }

    /// Also stops the run when `quit` says so.
    pub fn or_when(self, quit: impl Fn() -> bool + 'static) -> Reports {
        Reports {
            quit: Some(Rc::new(quit)),
            ..self
        }
    }

    pub fn add(&self) {
        self.printed.set(self.printed.get() + 1);
    }

    /// All the reports asked for are printed.
    pub fn full(&self) -> bool {
        self.limit.is_some_and(|n| self.printed.get() >= n)
    }

    /// The run should stop: all the reports are printed, or the tool
    /// asked to quit.
    fn ended(&self) -> bool {
        self.full() || self.quit.as_ref().is_some_and(|quit| quit())
    }
}

/// What a tool traces: a language runtime's probes, which may need
/// switching on, or a program's.
pub enum Prepared {
    Runtime { detected: Detected, needs: Needs },
    Program(std::path::PathBuf),
}

impl Prepared {
    fn object(&self) -> &std::path::Path {
        match self {
            Prepared::Runtime { detected, .. } => &detected.object,
            Prepared::Program(path) => path,
        }
    }
}

/// Detects the runtime of a language tool.
pub fn prepare(common: &Common) -> anyhow::Result<runtimes::Detected> {
    runtimes::detect(
        common.lang.as_deref(),
        common.target.pid,
        common.target.command.as_deref(),
    )
}

/// Bytes kept of each string (NUL included): names of classes and
/// methods, and Python's file names, which are paths.
pub const NAME_LEN: u32 = 128;
/// Bytes kept of a query or a command line.
pub const TEXT_LEN: u32 = 256;

/// Runs a tool's program, keeping `strlen` bytes of each string:
/// `receiver` gets its output; the run stops at
/// Ctrl-C, at the end of the `-p`/`-c` process, or after `stop_after`
/// reports (see [`Reports`]). Returns the exit status (the command's, with `-c`).
pub fn execute<'c>(
    common: &Target,
    prepared: Prepared,
    program: &str,
    receiver: Box<dyn Receiver + 'c>,
    reports: Option<Reports>,
    strlen: u32,
) -> anyhow::Result<ExitCode> {
    if common.print_program {
        print!("{program}");
        return Ok(ExitCode::SUCCESS);
    }
    // For -c, the runtime's probes are switched on in the command's
    // environment; otherwise sdt can only say what is needed.
    let _switched = match (&prepared, &common.command) {
        (Prepared::Runtime { detected, needs }, Some(_)) => {
            Some(runtimes::switch_on(detected.language, *needs)?)
        }
        (Prepared::Runtime { detected, needs }, None) => {
            if let Some(advice) = runtimes::advice(detected.language, *needs, common.pid) {
                eprintln!("sdt: note: {advice}");
            }
            None
        }
        (Prepared::Program(_), _) => None,
    };
    let traced = Traced::start(common.pid, common.command.as_deref())?;
    let mechanism = sdt_trace::mechanism(None)?;
    let options = sdt_script::Options {
        check: CheckOptions {
            params: Vec::new(),
            strlen,
            allow_unsafe: false,
            internal: false,
        },
        scope: Scope {
            pid: traced.pid,
            default_target: traced.program.clone(),
        },
        mechanism,
        codegen: sdt_codegen::Options {
            wake_at: (4 << 20) / 8,
            start_ns: 0,
            cpid: traced.cpid(),
            // As `sdt run`: a full map is reported, never silent.
            map_entries: 4096,
            ring_size: 4 << 20,
            possible_cpus: sdt_codegen::possible_cpus(),
        },
    };
    let compilation = sdt_script::compile(program, &options).map_err(|d| {
        anyhow::anyhow!(
            "the tool's program does not compile (a bug in sdt): {}",
            d.0.first().map_or(String::new(), |d| d.message.clone())
        )
    })?;
    let run = RunOptions {
        mechanism,
        pid: traced.pid,
        follow: true,
        allow_unsafe: false,
    };
    let sink = sdt_output::Format::Text.sink(Box::new(io::sink()));
    let mut runner = Runner::load(&compilation, &run, sink)?;
    runner.runtime().set_receiver(receiver);
    let stop = || reports.as_ref().is_some_and(Reports::ended);
    // On standard error, also with --json: it says when tracing starts.
    let started = |_: &mut Runner<'_>, _: usize| {
        eprintln!(
            "Tracing {} in {}... Ctrl-C to end.",
            match common.pid {
                Some(pid) => format!("process {pid}"),
                None if common.command.is_some() => "the command".to_string(),
                None => "every process".to_string(),
            },
            prepared.object().display()
        );
    };
    let ended = traced.run(runner, false, &stop, started)?;
    report_losses(&ended.summary, common.json);
    let _ = io::stdout().flush();
    Ok(match ended.command_status {
        Some(code) => ExitCode::from(code),
        None => ExitCode::SUCCESS,
    })
}

/// A count is never silently short: every loss is said, on standard error
/// (and as a JSON line with --json).
fn report_losses(summary: &Summary, json: bool) {
    let mut lost = Vec::new();
    if summary.lost_events > 0 {
        lost.push(format!(
            "{} events lost because the ring buffer was full",
            summary.lost_events
        ));
    }
    for (map, n) in &summary.full_maps {
        lost.push(format!("{n} updates of {map} dropped because it was full"));
    }
    for line in &lost {
        eprintln!("sdt: warning: {line}; the figures above are short");
    }
    if json && !lost.is_empty() {
        println!("{}", serde_json::json!({ "lost": lost }));
    }
}
