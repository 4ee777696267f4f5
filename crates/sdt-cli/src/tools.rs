//! The language tools: `sdt calls`, `sdt flow`, `sdt gc`, ... — BCC's
//! `ucalls`, `uflow` and `ugc` as sdt subcommands.
//!
//! Each tool is a program in sdt's own language (the `.bt` files next to
//! this module, shipped inside the binary and shown by `--print-program`)
//! with placeholders for the probe names, which come from one table of
//! runtimes ([`runtimes`]). The program runs as `sdt run` runs it, but its
//! `printf` and map output arrives as data (a
//! [`Receiver`](sdt_script::runtime::Receiver)), from which the tool lays
//! out BCC-like tables or JSON.

mod calls;
mod flow;
mod gc;
mod objnew;
pub mod runtimes;
mod threads;

use std::cell::Cell;
use std::io::{self, Write};
use std::process::ExitCode;
use std::rc::Rc;

use clap::Args;
use sdt_script::check::{CheckOptions, DEFAULT_STRLEN};
use sdt_script::driver;
use sdt_script::run::{Runner, Summary};
use sdt_script::runtime::{Receiver, Settings};
use sdt_trace::Scope;

pub use self::calls::{run as calls, CallsArgs};
pub use self::flow::{run as flow, FlowArgs};
pub use self::gc::{run as gc, GcArgs};
pub use self::objnew::{run as objnew, ObjnewArgs};
use self::runtimes::{Detected, Needs};
pub use self::threads::{run as threads, ThreadsArgs};
use crate::traced::Traced;

/// Options every tool takes.
#[derive(Args, Debug)]
pub struct Common {
    /// The language: java, python, ruby or php (found from -p or -c when
    /// not given).
    #[arg(short = 'l', value_name = "LANG")]
    pub lang: Option<String>,

    /// Trace this process only (default: every process of the runtime,
    /// including those that start later).
    #[arg(short = 'p', value_name = "PID", conflicts_with = "command")]
    pub pid: Option<i32>,

    /// Run CMD, trace it, and stop when it ends; its runtime's probes are
    /// switched on through its environment.
    #[arg(short = 'c', value_name = "CMD")]
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

/// Counts the reports a tool has printed, to stop after `count`.
#[derive(Clone, Default)]
pub struct Reports(Rc<Cell<u64>>);

impl Reports {
    pub fn add(&self) {
        self.0.set(self.0.get() + 1);
    }
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A tool ready to run: its detected runtime and its program.
pub struct Prepared {
    pub detected: Detected,
    pub needs: Needs,
}

/// Detects the runtime and, for `-c`, switches its probes on; explains
/// what cannot be switched on.
pub fn prepare(common: &Common, needs: Needs) -> anyhow::Result<Prepared> {
    let detected = runtimes::detect(
        common.lang.as_deref(),
        common.pid,
        common.command.as_deref(),
    )?;
    Ok(Prepared { detected, needs })
}

/// Runs a tool's program: `receiver` gets its output; the run stops at
/// Ctrl-C, at the end of the `-p`/`-c` process, or after `stop_after`
/// reports. Returns the exit status (the command's, with `-c`).
pub fn execute<'c>(
    common: &Common,
    prepared: Prepared,
    program: &str,
    receiver: Box<dyn Receiver + 'c>,
    reports: Option<(Reports, u64)>,
) -> anyhow::Result<ExitCode> {
    if common.print_program {
        print!("{program}");
        return Ok(ExitCode::SUCCESS);
    }
    let language = prepared.detected.language;
    let _switched = match &common.command {
        Some(_) => runtimes::switch_on(language, prepared.needs)?,
        None => {
            if let Some(advice) = runtimes::advice(language, prepared.needs, common.pid) {
                eprintln!("sdt: note: {advice}");
            }
            runtimes::switch_on(language, Needs::Plain)?
        }
    };
    let traced = Traced::start(common.pid, common.command.as_deref())?;
    let mechanism = sdt_trace::mechanism(None)?;
    let options = driver::Options {
        check: CheckOptions {
            params: Vec::new(),
            strlen: DEFAULT_STRLEN.max(128),
            allow_unsafe: false,
            internal: false,
        },
        scope: Scope {
            pid: traced.pid,
            default_target: traced.program.clone(),
        },
        mechanism,
        codegen: sdt_script::codegen::Options {
            wake_at: (4 << 20) / 8,
            start_ns: 0,
            cpid: traced.cpid(),
            map_entries: 65536,
            ring_size: 4 << 20,
        },
    };
    let compilation = driver::compile(program, &options).map_err(|d| {
        anyhow::anyhow!(
            "the tool's program does not compile (a bug in sdt): {}",
            d.0.first().map_or(String::new(), |d| d.message.clone())
        )
    })?;
    let settings = Settings {
        json: common.json,
        allow_unsafe: false,
    };
    let mut runner = Runner::load(
        &compilation,
        mechanism,
        traced.pid,
        true,
        settings,
        Box::new(io::sink()),
    )?;
    runner.runtime().set_receiver(receiver);
    let stop = || reports.as_ref().is_some_and(|(r, n)| r.get() >= *n);
    let mut no_events = |_: &[u8]| {};
    let started = |_: &mut Runner<'_>, _: usize| {
        if !common.json {
            eprintln!(
                "Tracing {} in {}... Ctrl-C to end.",
                match common.pid {
                    Some(pid) => format!("process {pid}"),
                    None if common.command.is_some() => "the command".to_string(),
                    None => format!("every {} process", language.name),
                },
                prepared.detected.object.display()
            );
        }
    };
    let ended = traced.run(runner, false, &mut no_events, &stop, started)?;
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
