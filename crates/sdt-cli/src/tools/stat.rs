//! `sdt stat`: a top-like view of every Java, Python, Ruby and PHP
//! process on the machine, like BCC's `ustat`: method calls, collections,
//! allocations, class loads, exceptions and thread starts per second.
//!
//! On a terminal the table is redrawn in place every interval (with ANSI
//! escapes, not a widget library: one table is all it shows); otherwise
//! one table is printed per interval, for logs and pipes.

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_script::runtime::{Datum, MapRow, Receiver};

use super::runtimes::{self, Needs, LANGUAGES};
use super::{execute, fill, Prepared, Reports, Target, NAME_LEN};

const STAT: &str = include_str!("stat.bt");

/// The kinds of event, as map names and column titles, in column order.
/// `@calls` is printed last in each report: it closes it.
const KINDS: &[(&str, &str)] = &[
    ("@gc", "GC/s"),
    ("@objects", "OBJNEW/s"),
    ("@classes", "CLOAD/s"),
    ("@exceptions", "EXC/s"),
    ("@threads", "THR/s"),
    ("@calls", "METHOD/s"),
];

/// Watch every process of the language runtimes: method calls, garbage
/// collections, allocations, class loads, exceptions and threads per
/// second.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt stat                  every Java, Python, Ruby and PHP process, every second\n  \
    sdt stat -l python 5 3    Python processes: three 5-second reports\n\n\
    Method and allocation rates are 0 for processes whose probes are off (see\n\
    the README: Java needs -XX:+ExtendedDTraceProbes, PHP USE_ZEND_DTRACE=1,\n\
    CPython 3.11 a profile function, Ruby a TracePoint).")]
pub struct StatArgs {
    #[command(flatten)]
    target: Target,

    /// Only this language: java, python, ruby or php (default: every one
    /// installed with probes).
    #[arg(short = 'l', value_name = "LANG")]
    lang: Option<String>,

    /// Seconds between reports.
    #[arg(value_name = "INTERVAL", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT")]
    count: Option<u64>,
}

pub fn run(args: StatArgs) -> anyhow::Result<ExitCode> {
    let languages: Vec<&str> = match &args.lang {
        Some(lang) => vec![runtimes::language(lang)?.name],
        None => LANGUAGES.iter().map(|l| l.name).collect(),
    };
    let mut probes = String::new();
    let mut objects = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for name in languages {
        let detected =
            match runtimes::detect(Some(name), args.target.pid, args.target.command.as_deref()) {
                Ok(d) => d,
                Err(e) if args.lang.is_some() => return Err(e),
                // Not installed, without probes, or not what -p runs.
                Err(_) => continue,
            };
        if let Some(advice) =
            runtimes::advice(detected.language, Needs::MethodProbes, args.target.pid)
        {
            eprintln!("sdt: note: {advice}");
        }
        let language = detected.language;
        let prefix = super::probe_prefix(&detected);
        let mut add = |kind: &'static str, probe: Option<&str>| {
            if let Some(probe) = probe {
                probes.push_str(&format!(
                    "{prefix}:{probe} {{\n  {kind}[pid, \"{}\"] = count();\n}}\n",
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
        objects.push(detected.object);
    }
    let Some(first) = objects.first().cloned() else {
        anyhow::bail!("no Java, Python, Ruby or PHP with probes found: name one with -l LANG");
    };
    let mut report = String::new();
    for (kind, _) in KINDS.iter().filter(|(k, _)| used.contains(k)) {
        report.push_str(&format!("  print({kind});\n  clear({kind});\n"));
    }
    let program = fill(
        STAT,
        &[
            ("INTERVAL", args.interval.to_string()),
            ("PROBES", probes.trim_end().to_string()),
            ("REPORT", report),
        ],
    );
    let reports = Reports::new(args.count);
    let view = View {
        interval: args.interval,
        json: args.target.json,
        live: !args.target.json && io::stdout().is_terminal(),
        rows: BTreeMap::new(),
        reports: reports.clone(),
    };
    let stop = Some(reports);
    execute(
        &args.target,
        Prepared::Program(first),
        &program,
        Box::new(view),
        stop,
        NAME_LEN,
    )
}

/// Counts of the report being built, by `(pid, language)`, one per kind.
type Counts = BTreeMap<(i128, String), [i128; 6]>;

struct View {
    interval: u64,
    json: bool,
    /// Redraw in place.
    live: bool,
    rows: Counts,
    reports: Reports,
}

impl Receiver for View {
    fn printf(&mut self, _: u32, _: Vec<Datum>) {}

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        if self.reports.full() {
            return;
        }
        let Some(column) = KINDS.iter().position(|(k, _)| *k == name) else {
            return;
        };
        for row in rows {
            let mut keys = row.keys.into_iter();
            let (pid, language) = (
                keys.next().map_or(0, |k| k.int()),
                keys.next().map(|k| k.text()).unwrap_or_default(),
            );
            self.rows.entry((pid, language)).or_default()[column] = row.value.int();
        }
        if name == "@calls" {
            let rows = std::mem::take(&mut self.rows);
            self.print(&rows);
            self.reports.add();
        }
    }
}

/// A process's command line, as `ps` shows it, cut to `width`.
fn cmdline(pid: i128, width: usize) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: String = String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .replace('\0', " ");
    text.chars().take(width).collect()
}

impl View {
    fn print(&self, rows: &Counts) {
        let seconds = self.interval as f64;
        let mut out = io::stdout().lock();
        let mut sorted: Vec<_> = rows.iter().collect();
        // The busiest first, as top.
        sorted.sort_by(|a, b| b.1[5].cmp(&a.1[5]).then(a.0.cmp(b.0)));
        if self.json {
            let processes: Vec<_> = sorted
                .iter()
                .map(|((pid, language), counts)| {
                    let mut row = serde_json::json!({
                        "pid": *pid as u64, "language": language, "cmdline": cmdline(*pid, 200),
                    });
                    for ((kind, _), count) in KINDS.iter().zip(counts.iter()) {
                        row[format!("{}_per_s", &kind[1..])] =
                            serde_json::json!(*count as f64 / seconds);
                    }
                    row
                })
                .collect();
            let _ = writeln!(
                out,
                "{}",
                serde_json::json!({ "interval_s": self.interval, "processes": processes })
            );
            return;
        }
        if self.live {
            // Home, clear: a fresh screen each time, as top.
            let _ = write!(out, "\x1b[H\x1b[2J");
        }
        let _ = write!(out, "{:<8} {:<7}", "PID", "LANG");
        for (_, title) in KINDS {
            let _ = write!(out, " {title:>9}");
        }
        let _ = writeln!(out, " CMDLINE");
        for ((pid, language), counts) in sorted {
            let _ = write!(out, "{pid:<8} {language:<7}");
            for count in counts {
                let _ = write!(out, " {:>9.1}", *count as f64 / seconds);
            }
            let _ = writeln!(out, " {}", cmdline(*pid, 40));
        }
        if !self.live {
            let _ = writeln!(out);
        }
        let _ = out.flush();
    }
}
