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
//!
//! **Pairing.** Tools that pair an event with a later one (a method's
//! entry with its return, a collection's start with its end, a query's
//! start with its done) never trust the two to balance: a runtime may
//! report a return whose entry it did not (CPython 3.11 calls a profile
//! function written in Python without reporting its entry), tracing may
//! start in the middle of a call, and a coroutine switch, a `longjmp` or
//! an exiting thread leaves entries without returns. What could not be
//! paired is counted and reported ([`Unpaired`]), never dropped silently
//! and never allowed to shift the pairing of what comes after.
//!
//! **BCC's names.** Run as `ucalls`, `uflow`, `ugc`, `uobjnew`,
//! `uthreads`, `ustat`, `dbslower` or `bashreadline` (a link to the
//! binary), sdt takes that BCC tool's command line ([`bcc`]).

pub mod bcc;
mod calls;
mod dbslower;
mod flow;
mod gc;
mod launch;
mod objnew;
mod readline;
pub mod runtimes;
mod stat;
mod threads;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::process::ExitCode;
use std::rc::Rc;

use clap::Args;
use sdt_lang::check::CheckOptions;
use sdt_runtime::run::RunOptions;
use sdt_runtime::run::{Runner, Summary};
use sdt_runtime::{Datum, MapRow, Receiver};
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
    /// The language: java, python, ruby or php. Found from -p or -c when
    /// not given (through env, a script's #! line, PATH and the libraries
    /// the program links); given, every installed copy of that runtime is
    /// traced wherever it runs in the traced process tree (a wrapper
    /// script that execs it, a child process).
    #[arg(short = 'l', value_name = "LANG")]
    pub lang: Option<String>,

    #[command(flatten)]
    pub target: Target,
}

impl Common {
    /// The target, with BCC's positional PID (when given) as `-p`.
    pub fn with_pid(mut self, positional: PositionalPid) -> Common {
        self.target.pid = self.target.pid.or(positional.process);
        self
    }
}

/// BCC's positional `PID`, for the tools where it clashes with none of
/// sdt's own arguments (`flow`, `gc`, `threads`; `calls` and `objnew` take
/// `INTERVAL [COUNT]` there, and BCC's form under BCC's names).
#[derive(Args, Debug)]
pub struct PositionalPid {
    /// The process to trace, as with -p (BCC's positional form).
    #[arg(value_name = "PID", conflicts_with_all = ["pid", "command"])]
    pub process: Option<i32>,
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

/// The attach points of the runtime's probe `name` in each of the
/// detected runtime's files, for one probe block.
pub fn attach_points(detected: &Detected, name: &str) -> String {
    let points: Vec<String> = detected
        .objects
        .iter()
        .map(|object| {
            format!(
                "usdt:{}:{}:{name}",
                object.display(),
                detected.language.provider
            )
        })
        .collect();
    points.join(",\n")
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
/// switching on, or programs' probes.
pub enum Prepared {
    Runtime { detected: Detected, needs: Needs },
    Programs(Vec<std::path::PathBuf>),
}

impl Prepared {
    fn objects(&self) -> &[std::path::PathBuf] {
        match self {
            Prepared::Runtime { detected, .. } => &detected.objects,
            Prepared::Programs(paths) => paths,
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
        (Prepared::Programs(_), _) => None,
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
            stamp_printf: false,
            machine: sdt_codegen::Machine::current(),
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
    let sink = sdt_output::Format::TEXT.sink(Box::new(io::sink()));
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
            runtimes::list(prepared.objects())
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

/// How a method is shown: `class.method`, or the method alone when the
/// runtime gives no class (PHP's functions).
pub fn method_name(class: &str, method: &str) -> String {
    if class.is_empty() {
        method.to_string()
    } else {
        format!("{class}.{method}")
    }
}

/// Method entries and returns that could not be paired (see the module
/// documentation), by `(class, method)`.
#[derive(Default)]
pub struct Unpaired {
    /// Returns whose entry was not seen: calls that began before tracing
    /// did, or whose entry the runtime does not report.
    pub returns_without_entry: BTreeMap<(String, String), u64>,
    /// Entries whose return never came: a deeper return closed a frame
    /// below them (an exception the runtime does not report, a coroutine
    /// or fiber switch, a `longjmp`), or their thread ended.
    pub entries_without_return: BTreeMap<(String, String), u64>,
    /// Calls open when tracing ended, in threads still running.
    pub running_at_end: u64,
    /// Calls open when tracing ended in threads that had ended, whose
    /// names were not kept (the pairing is in the kernel).
    pub unnamed_without_return: u64,
}

impl Unpaired {
    /// Counts `depth` calls left open in thread `tid` when tracing ended.
    pub fn open_at_end(&mut self, tid: i128, depth: u64) {
        if thread_alive(tid) {
            self.running_at_end += depth;
        } else {
            self.unnamed_without_return += depth;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.returns_without_entry.is_empty()
            && self.entries_without_return.is_empty()
            && self.running_at_end == 0
            && self.unnamed_without_return == 0
    }

    /// One sentence per kind of unpaired event there is.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(line) = summary(
            &self.returns_without_entry,
            0,
            ("return without an entry", "returns without an entry"),
            "calls that began before tracing, or whose entry the runtime does not report",
        ) {
            lines.push(line);
        }
        if let Some(line) = summary(
            &self.entries_without_return,
            self.unnamed_without_return,
            ("entry without a return", "entries without a return"),
            "left by an exception the runtime does not report, a coroutine switch, a longjmp or a thread that ended",
        ) {
            lines.push(line);
        }
        if self.running_at_end > 0 {
            lines.push(format!(
                "{} still running when tracing ended",
                plural(self.running_at_end, "call", "calls")
            ));
        }
        lines
    }

    pub fn json(&self) -> serde_json::Value {
        let rows = |counts: &BTreeMap<(String, String), u64>| {
            let rows: Vec<_> = by_count(counts)
                .into_iter()
                .map(|((class, method), n)| {
                    serde_json::json!({ "class": class, "method": method, "count": n })
                })
                .collect();
            rows
        };
        serde_json::json!({
            "returns_without_entry": rows(&self.returns_without_entry),
            "entries_without_return": rows(&self.entries_without_return),
            "unnamed_entries_without_return": self.unnamed_without_return,
            "running_at_end": self.running_at_end,
        })
    }
}

/// Whether thread `tid` (a kernel thread id, as `tid` gives it) still
/// runs: it exists and is not a zombie waiting to be reaped (the state
/// after the command's name in `/proc/TID/stat`).
pub fn thread_alive(tid: i128) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// `N what (the names with most, ...): why`, or nothing for none.
fn summary(
    counts: &BTreeMap<(String, String), u64>,
    unnamed: u64,
    (one, many): (&str, &str),
    why: &str,
) -> Option<String> {
    let total = counts.values().sum::<u64>() + unnamed;
    if total == 0 {
        return None;
    }
    let sorted = by_count(counts);
    let mut names: Vec<String> = sorted
        .iter()
        .take(3)
        .map(|((class, method), n)| format!("{} {n}", method_name(class, method)))
        .collect();
    if sorted.len() > 3 {
        names.push(format!("{} more", sorted.len() - 3));
    }
    if unnamed > 0 {
        names.push(format!("{unnamed} open in threads that ended"));
    }
    Some(format!(
        "{total} {} ({}): {why}",
        if total == 1 { one } else { many },
        names.join(", ")
    ))
}

fn by_count<K: Clone + Ord>(counts: &BTreeMap<K, u64>) -> Vec<(K, u64)> {
    let mut sorted: Vec<(K, u64)> = counts.iter().map(|(k, n)| (k.clone(), *n)).collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sorted
}

pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Says at the end of a run what could not be paired: each line on
/// standard error, and with --json one `{"unpaired": ...}` line on
/// standard output. Nothing when everything paired.
pub fn report_unpaired(lines: &[String], value: serde_json::Value, json: bool) {
    if lines.is_empty() {
        return;
    }
    for line in lines {
        eprintln!("sdt: not paired: {line}");
    }
    if json {
        println!("{}", serde_json::json!({ "unpaired": value }));
    }
}

/// Starts and ends of a timed event (a collection, a query) that could
/// not be paired, from the maps a tool's `END` prints: `open` (the events
/// still open, by thread), `@starts_without_end` and
/// `@ends_without_start`.
pub struct UnpairedSpans {
    /// The map of open events, keyed by thread (`@collecting`).
    open: &'static str,
    /// The event's name, singular and plural.
    event: (&'static str, &'static str),
    /// Why a start has no end, and why an end has no start.
    why: (&'static str, &'static str),
    starts_without_end: u64,
    ends_without_start: u64,
    running_at_end: u64,
}

impl UnpairedSpans {
    pub fn new(
        open: &'static str,
        event: (&'static str, &'static str),
        why: (&'static str, &'static str),
    ) -> UnpairedSpans {
        UnpairedSpans {
            open,
            event,
            why,
            starts_without_end: 0,
            ends_without_start: 0,
            running_at_end: 0,
        }
    }

    /// Takes in a map the tool's program printed; others are ignored.
    pub fn map(&mut self, name: &str, rows: &[MapRow]) {
        let total = || {
            rows.iter()
                .map(|r| r.value.int().max(0) as u64)
                .sum::<u64>()
        };
        if name == self.open {
            // One open in a thread that has ended will never end.
            for row in rows {
                if thread_alive(row.keys.first().map_or(0, Datum::int)) {
                    self.running_at_end += 1;
                } else {
                    self.starts_without_end += 1;
                }
            }
        } else if name == "@starts_without_end" {
            self.starts_without_end += total();
        } else if name == "@ends_without_start" {
            self.ends_without_start += total();
        }
    }

    /// Says what could not be paired; see [`report_unpaired`].
    pub fn report(&self, json: bool) {
        let (one, many) = self.event;
        let mut lines = Vec::new();
        if self.starts_without_end > 0 {
            lines.push(format!(
                "{} started without an end, not timed: {}",
                plural(self.starts_without_end, one, many),
                self.why.0
            ));
        }
        if self.ends_without_start > 0 {
            lines.push(format!(
                "{} ended without a start: {}",
                plural(self.ends_without_start, one, many),
                self.why.1
            ));
        }
        if self.running_at_end > 0 {
            lines.push(format!(
                "{} still going on when tracing ended",
                plural(self.running_at_end, one, many)
            ));
        }
        let value = serde_json::json!({
            "starts_without_end": self.starts_without_end,
            "ends_without_start": self.ends_without_start,
            "running_at_end": self.running_at_end,
        });
        report_unpaired(&lines, value, json);
    }
}
