//! `sdt stat`: a top-like view of every Java, Python, Ruby and PHP
//! process on the machine, like BCC's `ustat`: method calls, collections,
//! allocations, class loads, exceptions and thread starts per second.
//!
//! On a terminal (standard output and standard input) it is a
//! full-screen view (`screen`), redrawn once an interval. Otherwise (a
//! pipe, a file, `--json`) one report is written per interval, in the
//! format asked for, for logs and pipes.

mod screen;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::rc::Rc;

use sdt_output::{Cell, Column, Event, Format, MapPrint, Sink, Table};

use self::screen::Screen;
use crate::execute::{fill, Reports, ToolJob};
use crate::report::{unsigned, Report};
use crate::runtimes::{self, Probes, LANGUAGES};
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    columns: &[
        Column::both("pid", "PID").width(8),
        Column::both("language", "LANG").width(7),
        KINDS[0].column,
        KINDS[1].column,
        KINDS[2].column,
        KINDS[3].column,
        KINDS[4].column,
        KINDS[5].column,
        // JSON keeps more of the command line than text shows.
        Column::json("cmdline"),
        Column::text("CMDLINE"),
    ],
    summary: "Watch every process of the language runtimes: method calls, garbage collections, allocations, class loads, exceptions and threads per second",
    program: include_str!("programs/stat.bt"),
    ..Tool::new("stat", "ustat", Traces::Runtimes)
};

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let (pid, command) = (common.pid(), common.command.as_deref());
    let detected: Vec<runtimes::Detected> = match &common.lang {
        Some(lang) => vec![runtimes::detect(Some(lang), pid, command)?],
        // The one runtime of the process or the command.
        None if pid.is_some() || command.is_some() => vec![runtimes::detect(None, pid, command)?],
        // Every runtime installed with probes.
        None => LANGUAGES
            .iter()
            .filter_map(|l| runtimes::detect(Some(l.name), None, None).ok())
            .collect(),
    };
    let mut probes = String::new();
    let mut shown = Vec::new();
    let mut used = BTreeSet::new();
    for detected in detected {
        let language = detected.language;
        if let Some(advice) = runtimes::advice(language, Probes::Methods, pid) {
            eprintln!("sdt: note: {advice}");
        }
        let mut add = |kind: &'static str, probe: Option<&str>| {
            if let Some(probe) = probe {
                probes.push_str(&format!(
                    "{} {{\n  {kind}[pid, \"{}\"] = count();\n}}\n",
                    detected.attach_points(probe),
                    language.name
                ));
                used.insert(kind);
            }
        };
        add("@calls", language.calls.as_ref().map(|c| c.entry));
        add("@gc", language.gc.as_ref().map(|g| g.begin));
        add("@objects", language.alloc.as_ref().map(|a| a.probe));
        add("@threads", language.threads.as_ref().map(|t| t.start));
        add("@classes", language.class_load);
        add("@exceptions", language.exception);
        shown.push(detected.shown());
    }
    if shown.is_empty() {
        anyhow::bail!("no Java, Python, Ruby or PHP with probes found: name one with -l LANG");
    }
    let mut report = String::new();
    for kind in KINDS.iter().filter(|k| used.contains(k.map)) {
        report.push_str(&format!("  print({0});\n  clear({0});\n", kind.map));
    }
    let program = fill(
        TOOL.program,
        &[
            ("INTERVAL", options.interval.to_string()),
            ("PROBES", probes.trim_end().to_string()),
            ("REPORT", report),
        ],
    );
    let mut reports = Reports::new(options.count);
    let on_terminal = io::stdout().is_terminal() && io::stdin().is_terminal();
    let screen = if common.format == Format::TEXT && on_terminal && !common.print_program {
        let screen = Rc::new(RefCell::new(Screen::open(options.interval)?));
        let keys = Rc::clone(&screen);
        reports = reports.or_when(move || keys.borrow_mut().quit_asked());
        Some(screen)
    } else {
        None
    };
    let view = View {
        interval: options.interval,
        screen,
        rows: BTreeMap::new(),
        reports: reports.clone(),
    };
    let job = ToolJob {
        tool: &TOOL,
        common,
        program,
        language: None,
        shown: shown.join(", "),
        reports: Some(reports),
    };
    job.run(view)
}

/// A kind of event that `stat` counts.
struct Kind {
    /// The map its program counts it in.
    map: &'static str,
    /// Its column of rates.
    column: Column,
}

const fn rate(key: &'static str, header: &'static str) -> Column {
    Column::both(key, header).width(9).right().decimals(1)
}

/// The kinds of event, in column order. `@calls` is printed last in each
/// report: it closes it.
const KINDS: [Kind; 6] = [
    Kind {
        map: "@gc",
        column: rate("gc_per_s", "GC/s"),
    },
    Kind {
        map: "@objects",
        column: rate("objects_per_s", "OBJNEW/s"),
    },
    Kind {
        map: "@classes",
        column: rate("classes_per_s", "CLOAD/s"),
    },
    Kind {
        map: "@exceptions",
        column: rate("exceptions_per_s", "EXC/s"),
    },
    Kind {
        map: "@threads",
        column: rate("threads_per_s", "THR/s"),
    },
    Kind {
        map: "@calls",
        column: rate("calls_per_s", "METHOD/s"),
    },
];

/// The column of method calls, in [`KINDS`]: the default order.
const CALLS: usize = 5;

/// `stat`'s own options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seconds between reports.
    pub interval: u64,
    /// Stop after COUNT reports.
    pub count: Option<u64>,
}

/// Counts of the report being built, by `(pid, language)`, one per kind.
type Counts = BTreeMap<(i128, String), [i128; 6]>;

struct View {
    interval: u64,
    /// The terminal's screen, redrawn, instead of the sink.
    screen: Option<Rc<RefCell<Screen>>>,
    rows: Counts,
    reports: Reports,
}

impl Report for View {
    fn map(&mut self, map: &MapPrint, out: &mut dyn Sink) {
        let Some(column) = KINDS.iter().position(|k| k.map == map.name) else {
            return;
        };
        for row in &map.rows {
            let mut key = row.key.iter();
            let (pid, language) = (
                key.next().map_or(0, |k| k.as_int()),
                key.next().map(|k| k.to_text()).unwrap_or_default(),
            );
            self.rows.entry((pid, language)).or_default()[column] = row.value.number();
        }
        if column != CALLS {
            return;
        }
        let rows = std::mem::take(&mut self.rows);
        let processes = processes(&rows, self.interval, CALLS);
        self.reports.add();
        match &self.screen {
            Some(screen) => {
                let mut screen = screen.borrow_mut();
                screen.show(processes);
                // The last report stays on the terminal after the screen
                // closes.
                screen.keep_last = self.reports.full();
            }
            None => out.event(Event::Table(&table(&processes, self.interval))),
        }
    }
}

/// One process's row: its rates per second.
struct Process {
    pid: i128,
    language: String,
    cmdline: String,
    rates: [f64; 6],
}

/// The processes of a report, the busiest (by `KINDS[sort]`) first, as
/// top; equal ones by PID.
fn processes(rows: &Counts, interval: u64, sort: usize) -> Vec<Process> {
    let seconds = interval as f64;
    let mut processes: Vec<Process> = rows
        .iter()
        .map(|((pid, language), counts)| Process {
            pid: *pid,
            language: language.clone(),
            cmdline: cmdline(*pid, 200),
            rates: counts.map(|count| count as f64 / seconds),
        })
        .collect();
    sort_by(&mut processes, sort);
    processes
}

fn sort_by(processes: &mut [Process], column: usize) {
    processes.sort_by(|a, b| {
        b.rates[column]
            .total_cmp(&a.rates[column])
            .then(a.pid.cmp(&b.pid))
    });
}

/// A process's command line, as `ps` shows it.
fn cmdline(pid: i128, width: usize) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: String = String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .replace('\0', " ");
    text.chars().take(width).collect()
}

/// A report: `{"interval_s", "processes": [...]}` in JSON.
fn table(processes: &[Process], interval: u64) -> Table {
    let rows = processes
        .iter()
        .map(|p| {
            let mut row = vec![unsigned(p.pid), Cell::Text(p.language.clone())];
            row.extend(p.rates.map(Cell::Float));
            row.push(Cell::Text(p.cmdline.clone()));
            row.push(Cell::Text(p.cmdline.chars().take(40).collect()));
            row
        })
        .collect();
    Table {
        key: "processes",
        columns: TOOL.columns.to_vec(),
        rows,
        fields: vec![("interval_s", Cell::Int(interval.into()))],
        notes: Vec::new(),
        layout: sdt_output::Layout::sdt(),
    }
}
