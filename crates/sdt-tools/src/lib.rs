//! The language tools: `sdt calls`, `sdt flow`, `sdt gc`, ... — BCC's
//! `ucalls`, `uflow`, `ugc` and friends, as programs in sdt's own language.
//!
//! Each tool is a [`Tool`]: its program (the `.bt` files in `programs/`,
//! shipped inside the binary and shown by `--print-program`) with
//! placeholders for probe names, which come from the one table of
//! runtimes (`sdt_languages`, read through [`runtimes`]); which of a
//! runtime's probes it uses, and so what must
//! be switched on for them to fire; and the columns of its report. The
//! program runs as `sdt run` runs it; its output comes back as data
//! through [`sdt_output::Sink`], to the tool's logic (pairing entries with
//! returns, sorting, rates), which writes its reports into the sink of
//! the format the user chose: a [`Table`](sdt_output::Table) per report,
//! or a row of a [`Stream`](sdt_output::Stream) per event.
//!
//! What comes in: parsed options ([`Common`] and each tool's own) and a
//! [`Format`]. What goes out: the reports on standard
//! output in that format (or `stat`'s full-screen view on a terminal,
//! which is a view of the last report, not a format), notes and warnings
//! on standard error, and the `-c` command's exit status. This crate must
//! never depend on the command line (`sdt-cli`), which only parses options
//! and picks the format; nor lay out a report itself: a report is data,
//! and how it looks is the sink's business.
//!
//! **Pairing.** Tools that pair an event with a later one (a method's
//! entry with its return, a collection's start with its end, a query's
//! start with its done) never trust the two to balance: a runtime may
//! report a return whose entry it did not (CPython 3.11 calls a profile
//! function written in Python without reporting its entry), tracing may
//! start in the middle of a call, and a coroutine switch, a `longjmp` or
//! an exiting thread leaves entries without returns. What could not be
//! paired is counted and reported ([`pairing`]), never dropped silently
//! and never allowed to shift the pairing of what comes after.

#![forbid(unsafe_code)]

pub mod bcc;
pub mod calls;
pub mod dbslower;
mod execute;
pub mod flow;
pub mod gc;
pub mod objnew;
pub mod pairing;
pub mod readline;
mod report;
pub mod runtimes;
pub mod stackcount;
pub mod stat;
pub mod threads;
pub mod trace;

use sdt_output::{Column, Format};

use self::runtimes::Probes;

/// A tool, as data: what the shared code needs to know of it.
#[derive(Debug)]
pub struct Tool {
    /// Its subcommand: `calls`.
    pub name: &'static str,
    /// The BCC tool it stands for, whose command line it takes when the
    /// binary is run under that name: `ucalls`.
    pub bcc: &'static str,
    /// Whose probes it traces.
    pub traces: Traces,
    /// What it shows, in one sentence without its period (as `--help`
    /// shows it).
    pub summary: &'static str,
    /// Its program, with `{{PLACEHOLDERS}}` for the probes and options.
    pub program: &'static str,
    /// Its report's columns, as the default options show them.
    pub columns: &'static [Column],
}

impl Tool {
    /// A tool with its names and what it traces, to be completed with
    /// its summary, program and columns.
    pub const fn new(name: &'static str, bcc: &'static str, traces: Traces) -> Tool {
        Tool {
            name,
            bcc,
            traces,
            summary: "",
            program: "",
            columns: &[],
        }
    }

    /// Bytes kept of each string its program reads, NUL included: a
    /// runtime's names of classes, methods and files, or a program's
    /// texts (a query, a command line).
    pub fn strlen(&self) -> u32 {
        match self.traces {
            Traces::Runtime(_) | Traces::Runtimes => NAME_LEN,
            Traces::Programs => TEXT_LEN,
        }
    }
}

/// Whose probes a tool traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traces {
    /// A language runtime's (found from `-l`, `-p` or `-c`): these of its
    /// probes, which may need switching on (see [`runtimes::switch_on`]).
    Runtime(Probes),
    /// Every runtime installed, or the one `-l`, `-p` or `-c` names, with
    /// its probes as they are: nothing is switched on (`stat`).
    Runtimes,
    /// Programs the tool finds itself (a database server, bash), whose
    /// probes are always on.
    Programs,
}

/// Every tool.
pub const TOOLS: &[&Tool] = &[
    &calls::TOOL,
    &flow::TOOL,
    &gc::TOOL,
    &objnew::TOOL,
    &threads::TOOL,
    &stat::TOOL,
    &dbslower::TOOL,
    &readline::TOOL,
];

/// What every tool is told, besides its own options.
#[derive(Clone, Debug)]
pub struct Common {
    /// The language (`-l`): `java`, `python`, `ruby` or `php`. Found from
    /// `pids` or `command` when not given; given, every installed copy of
    /// that runtime is traced wherever it runs in the traced trees.
    pub lang: Option<String>,
    /// Trace these processes and the processes they start only.
    pub pids: Vec<i32>,
    /// Trace only the processes of this cgroup v2 directory, and below.
    pub cgroup: Option<std::path::PathBuf>,
    /// Run this command, trace it, and stop when it ends.
    pub command: Option<String>,
    /// How the reports are written.
    pub format: Format,
    /// Print the program instead of running it.
    pub print_program: bool,
    /// Sinks that are written beside the reports (`--flamegraph`,
    /// `--timeline`, made by the command line): what a tool pairs itself
    /// goes to them as spans, and its own stacks as stacks.
    pub pictures: Pictures,
}

impl Common {
    /// The first `-p` process: the one whose runtime or server the tool
    /// looks for (the others are traced alike).
    pub fn pid(&self) -> Option<i32> {
        self.pids.first().copied()
    }
}

/// The sinks written beside a tool's reports; taken by the run.
#[derive(Clone, Default)]
pub struct Pictures(pub std::rc::Rc<std::cell::RefCell<Vec<Box<dyn sdt_output::Sink>>>>);

impl Pictures {
    pub fn new(sinks: Vec<Box<dyn sdt_output::Sink>>) -> Pictures {
        Pictures(std::rc::Rc::new(std::cell::RefCell::new(sinks)))
    }

    /// Whether any was asked for.
    pub fn any(&self) -> bool {
        !self.0.borrow().is_empty()
    }

    fn take(&self) -> Vec<Box<dyn sdt_output::Sink>> {
        std::mem::take(&mut *self.0.borrow_mut())
    }
}

impl std::fmt::Debug for Pictures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pictures({})", self.0.borrow().len())
    }
}

/// Bytes kept of each string (NUL included): names of classes and
/// methods, and Python's file names, which are paths.
const NAME_LEN: u32 = 128;
/// Bytes kept of a query or a command line.
const TEXT_LEN: u32 = 256;

/// A string of sdt's language holding `text`, so that any path or name
/// is one word of an attach point.
pub(crate) fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
