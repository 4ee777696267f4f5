//! What a front end asks for, as plain data: the script, what it traces,
//! its limits, and how messages speak. Nothing here reads a file, starts
//! a process or touches the kernel; [`Job::compile`](crate::Job::compile)
//! does, once.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sdt_bpf::Mechanism;

/// Named parameters (`-- --NAME=VALUE`), read by `getopt()`: the value
/// as given, `None` for a bare `--NAME`.
pub type Named = HashMap<String, Option<String>>;

/// A script's text and the name messages give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// `stdin` for `-e` and standard input, as bpftrace names them; else
    /// the file as given.
    pub name: String,
    pub text: String,
    /// Where `#include "..."` looks first: the script file's directory.
    pub dir: Option<PathBuf>,
}

impl Source {
    /// A program given on the command line (`-e`), or made by sdt.
    pub fn inline(text: impl Into<String>) -> Source {
        Source {
            name: "stdin".to_string(),
            text: text.into(),
            dir: None,
        }
    }

    /// The program on standard input (`-`).
    pub fn stdin() -> anyhow::Result<Source> {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| anyhow::anyhow!("cannot read the program from standard input: {e}"))?;
        Ok(Source::inline(text))
    }

    /// A program file, or bpftrace's message for one that cannot be read.
    pub fn file(path: &str) -> anyhow::Result<Source> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("failed to open file '{path}': {}", os_message(&e)))?;
        Ok(Source::named(path, text))
    }

    /// A program file's text, already read.
    pub fn named(path: &str, text: String) -> Source {
        Source {
            name: path.to_string(),
            text,
            dir: Path::new(path).parent().map(Path::to_path_buf),
        }
    }
}

/// An I/O error's message without Rust's ` (os error N)`.
pub fn os_message(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// What a job traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every process that runs the probed files, including ones started
    /// later, until the job is stopped.
    Everything,
    /// These processes (`-p PID,PID`), and, when followed, the processes
    /// they start; the job ends when they have all ended.
    Pids(Vec<i32>),
    /// This command (`-c`), started held before its first instruction and
    /// let go once the probes are attached; the job ends when it ends.
    Command(String),
}

/// How messages are worded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voice {
    /// sdt's own: `sdt: warning: ...`, located errors with their hints.
    Sdt,
    /// bpftrace's, for wrappers and test suites that read it: `ERROR:`,
    /// `WARNING:`, `Attaching N probes...` on standard output, and the
    /// exit status of `exit(N)` whatever the `-c` command's.
    Bpftrace,
}

impl Voice {
    /// A warning's line, as this voice words it.
    pub fn warning(self, text: &str) -> String {
        match self {
            Voice::Sdt => format!("sdt: warning: {text}"),
            Voice::Bpftrace => format!("WARNING: {text}"),
        }
    }
}

/// Everything a job is made from.
#[derive(Clone, Debug)]
pub struct Request {
    pub source: Source,
    /// Positional parameters: `$1` is the first.
    pub params: Vec<String>,
    pub named: Named,
    /// Headers read as `#include` would (`--include`).
    pub includes: Vec<PathBuf>,
    /// Where headers are looked for (`-I`).
    pub include_dirs: Vec<PathBuf>,
    /// Attach only the probes whose attach point matches this regular
    /// expression (`--probe-filter`); BEGIN and END always run.
    pub probe_filter: Option<String>,
    pub target: Target,
    /// Only processes in this cgroup v2 directory, or below it
    /// (`--cgroup`): a directory of a cgroup2 mount, or a path as
    /// `/proc/PID/cgroup` shows it.
    pub cgroup: Option<PathBuf>,
    /// Whether the processes the target starts are traced too.
    pub follow: bool,
    /// Tracepoints fire only for the target, also for a `-c` command
    /// (BCC's tools); otherwise only with `-p`, as bpftrace's do.
    pub scope_tracepoints: bool,
    /// Bytes of the ring buffer.
    pub ring_size: u32,
    /// The front end takes `--buffer-size`, which a report of records
    /// lost then suggests.
    pub suggest_buffer_size: bool,
    /// Entries of each map; `None` takes `max_map_keys` from the
    /// configuration.
    pub map_entries: Option<u32>,
    /// Bytes of a string, NUL included; `None` takes `max_strlen` from
    /// the configuration.
    pub strlen: Option<u32>,
    /// The kernel mechanism to attach with; `None` for the best there is.
    pub mechanism: Option<Mechanism>,
    /// `--unsafe`: `system()`, and uprobes where sdt cannot check the code.
    pub allow_unsafe: bool,
    /// Where separate debug files are looked for first (`--debuginfo`).
    pub debug_dirs: Vec<PathBuf>,
    /// The program is sdt's own (`sdt trace`'s): it may use
    /// `__sdt_event`, and the environment's `BPFTRACE_*` do not apply.
    pub internal: bool,
    /// `printf` records carry a time and a thread (for a timeline).
    pub stamp_printf: bool,
    pub voice: Voice,
    /// Whether warnings are printed (`--no-warnings` clears it).
    pub warnings: bool,
    /// Print `Attaching N probes...` once the programs are loaded.
    pub announce: bool,
    /// Print `Attached N probes` on standard error once every probe is
    /// attached, as bpftrace 0.24 and later do (its earlier versions print
    /// only `Attaching N probes...`, on the output).
    pub confirm_attached: bool,
    /// Print the maps at the end (and the configuration's
    /// `print_maps_on_exit` agrees).
    pub print_maps: bool,
    /// In sdt's voice, what the job says of why nothing may fire also
    /// goes to the output, a record each ([`sdt_output::Event::Hint`]);
    /// a front end whose output has a fixed set of records (`sdt trace
    /// --json`) takes them from [`Outcome::hints`](crate::Outcome::hints)
    /// instead.
    pub hint_records: bool,
    /// Compile only (`--dump`): the kernel is not asked which mechanism
    /// it has, so that nothing needs privileges.
    pub compile_only: bool,
    /// The job runs inside a service that outlives it (`sdt serve`): it
    /// takes no stop signals, which the service handles, and detaches its
    /// probes in the background.
    pub in_service: bool,
}

impl Request {
    /// A request for `source`, traced everywhere, with sdt's defaults.
    pub fn new(source: Source) -> Request {
        Request {
            source,
            params: Vec::new(),
            named: HashMap::new(),
            includes: Vec::new(),
            include_dirs: Vec::new(),
            probe_filter: None,
            target: Target::Everything,
            cgroup: None,
            follow: true,
            scope_tracepoints: false,
            ring_size: 4 << 20,
            suggest_buffer_size: false,
            map_entries: None,
            strlen: None,
            mechanism: None,
            allow_unsafe: false,
            debug_dirs: Vec::new(),
            internal: false,
            stamp_printf: false,
            voice: Voice::Sdt,
            warnings: true,
            announce: false,
            confirm_attached: false,
            print_maps: true,
            hint_records: true,
            compile_only: false,
            in_service: false,
        }
    }

    /// The `-p` processes, if any are traced.
    pub fn pids(&self) -> &[i32] {
        match &self.target {
            Target::Pids(pids) => pids,
            _ => &[],
        }
    }

    /// The `-c` command, if one is run.
    pub fn command(&self) -> Option<&str> {
        match &self.target {
            Target::Command(command) => Some(command),
            _ => None,
        }
    }

    /// Prints a warning in this request's voice, unless warnings are off.
    pub(crate) fn warn(&self, text: &str) {
        if self.warnings {
            eprintln!("{}", self.voice.warning(text));
        }
    }
}
