//! Running a tool: its program filled in, compiled and run as `sdt run`
//! runs a program, with its output handed to the tool's logic.
//!
//! The runtime writes what the program produces into a [`Sink`]; for a
//! tool that sink is an [`Adapter`], which gives the `printf`s and maps,
//! as data, to the tool's [`Report`]. The report writes what it makes of
//! them into the sink of the format the user chose. The run ends at
//! Ctrl-C, at the end of the `-p` or `-c` process, or when the reports
//! asked for are printed ([`Reports`]); then the losses are told, and
//! the report says what is left (what could not be paired).

use std::cell::Cell;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use sdt_lang::check::CheckOptions;
use sdt_output::{
    Datum, Hit, Losses, MapPrint, Note, Printed, Sink, Stream, Table, TextKind, TraceSummary,
};
use sdt_runtime::run::{RunOptions, Runner};
use sdt_runtime::traced::Traced;

use crate::report::Report;
use crate::runtimes::{self, Detected, Language};
use crate::{Common, Tool, Traces};

/// Fills a tool's program: each `{{NAME}}` is replaced by its value.
pub(crate) fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut text = template.to_string();
    for (name, value) in values {
        text = text.replace(&format!("{{{{{name}}}}}"), value);
    }
    debug_assert!(!text.contains("{{"), "unfilled placeholder in\n{text}");
    text
}

/// The `interval:s:N` block that prints the maps `report` every N
/// seconds, or nothing.
pub(crate) fn interval_block(interval: Option<u64>, report: &str) -> String {
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
pub(crate) struct Reports {
    printed: Rc<Cell<u64>>,
    limit: Option<u64>,
    /// Asked between steps of the run (every few milliseconds).
    quit: Option<Rc<dyn Fn() -> bool>>,
}

impl Reports {
    pub(crate) fn new(limit: Option<u64>) -> Reports {
        Reports {
            printed: Rc::new(Cell::new(0)),
            limit,
            quit: None,
        }
    }

    /// Also stops the run when `quit` says so.
    pub(crate) fn or_when(self, quit: impl Fn() -> bool + 'static) -> Reports {
        Reports {
            quit: Some(Rc::new(quit)),
            ..self
        }
    }

    pub(crate) fn add(&self) {
        self.printed.set(self.printed.get() + 1);
    }

    /// All the reports asked for are printed.
    pub(crate) fn full(&self) -> bool {
        self.limit.is_some_and(|n| self.printed.get() >= n)
    }

    /// The run should stop: all the reports are printed, or the tool
    /// asked to quit.
    fn ended(&self) -> bool {
        self.full() || self.quit.as_ref().is_some_and(|quit| quit())
    }
}

/// A tool about to run: its program, filled in, and what it traces.
pub(crate) struct Job<'a> {
    pub tool: &'static Tool,
    pub common: &'a Common,
    pub program: String,
    /// The runtime whose probes are traced, which the `-c` command gets
    /// switched on ([`Traces::Runtime`]).
    pub language: Option<&'static Language>,
    /// The files whose probes are traced, for the message that tracing
    /// has started.
    pub objects: Vec<PathBuf>,
    /// The reports to stop after (`INTERVAL COUNT`), if any.
    pub reports: Option<Reports>,
}

impl<'a> Job<'a> {
    /// A tool that traces a runtime's probes ([`Traces::Runtime`]): the
    /// runtime found (see [`runtimes::detect`]), and `template` filled
    /// with the placeholders of its probes and `more` (which the runtime
    /// found may decide).
    pub(crate) fn on_runtime(
        tool: &'static Tool,
        common: &'a Common,
        template: &str,
        more: impl FnOnce(&'static Language) -> Vec<(&'static str, String)>,
    ) -> anyhow::Result<Job<'a>> {
        let Traces::Runtime(probes) = tool.traces else {
            anyhow::bail!("sdt {} traces no runtime (a bug in sdt)", tool.name);
        };
        let Detected { language, objects } = runtimes::detect(
            common.lang.as_deref(),
            common.pid,
            common.command.as_deref(),
        )?;
        let mut values = runtimes::placeholders(language, probes, &objects)?;
        values.extend(more(language));
        Ok(Job {
            tool,
            common,
            program: fill(template, &values),
            language: Some(language),
            objects,
            reports: None,
        })
    }

    /// Stops the run after these reports.
    pub(crate) fn stopping(self, reports: &Reports) -> Job<'a> {
        Job {
            reports: Some(reports.clone()),
            ..self
        }
    }

    /// Runs the program, keeping the tool's strings to its `strlen`;
    /// `report` gets its output. Returns the exit status (the command's,
    /// with `-c`).
    pub(crate) fn run(self, report: impl Report + 'static) -> anyhow::Result<ExitCode> {
        let Job {
            tool,
            common,
            program,
            language,
            objects,
            reports,
        } = self;
        if common.print_program {
            print!("{program}");
            return Ok(ExitCode::SUCCESS);
        }
        // For -c, the runtime's probes are switched on in the command's
        // environment; otherwise sdt can only say what is needed.
        let _switched = match (tool.traces, language, &common.command) {
            (Traces::Runtime(probes), Some(language), Some(_)) => {
                Some(runtimes::switch_on(language, probes)?)
            }
            (Traces::Runtime(probes), Some(language), None) => {
                if let Some(advice) = runtimes::advice(language, probes, common.pid) {
                    eprintln!("sdt: note: {advice}");
                }
                None
            }
            _ => None,
        };
        let traced = Traced::start(common.pid, common.command.as_deref())?;
        let mechanism = sdt_trace::mechanism(None)?;
        let options = sdt_script::Options {
            check: CheckOptions {
                strlen: tool.strlen(),
                ..CheckOptions::default()
            },
            scope: traced.scope(false),
            mechanism,
            missing_probes: Default::default(),
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
        let compilation = sdt_script::compile(&program, &options).map_err(|d| {
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
            filter_tracepoints: false,
            max_cat_bytes: u64::MAX,
        };
        let adapter = Adapter {
            report,
            out: sdt_output::tee::Tee::of(
                common.format.sink(Box::new(io::stdout())),
                common.pictures.take(),
            ),
            reports: reports.clone(),
        };
        let runner = Runner::load(&compilation, &run, Box::new(adapter))?;
        let stop = || reports.as_ref().is_some_and(Reports::ended);
        // On standard error, whatever the format: it says when tracing
        // starts.
        let started = |_: &mut Runner<'_>, _: usize| {
            eprintln!(
                "Tracing {} in {}... Ctrl-C to end.",
                match common.pid {
                    Some(pid) => format!("process {pid}"),
                    None if common.command.is_some() => "the command".to_string(),
                    None => "every process".to_string(),
                },
                runtimes::list(&objects)
            );
        };
        let mut ended = traced.run(runner, false, &stop, started)?;
        let summary = &ended.summary;
        ended.runtime.sink().lost(&Losses {
            events: summary.lost_events,
            stacks: summary.lost_stacks,
            full_maps: summary.full_maps.clone(),
        });
        // The pictures are written, or closed, now.
        ended.runtime.sink().finish();
        let _ = io::stdout().flush();
        if let Some(e) = ended.runtime.error() {
            if e.kind() != io::ErrorKind::BrokenPipe {
                anyhow::bail!("cannot write the output: {e}");
            }
        }
        Ok(match ended.command_status {
            Some(code) => ExitCode::from(code),
            None => ExitCode::SUCCESS,
        })
    }
}

/// The sink a tool's program writes to: its `printf`s and maps go to the
/// tool's [`Report`], as data, with the sink of the user's format to
/// write into; once the reports asked for are printed, nothing more.
///
/// The losses come last, once the run has ended ([`Job::run`] hands them
/// over): they are told, then the report says what it has left.
struct Adapter<'w, R> {
    report: R,
    out: Box<dyn Sink + 'w>,
    reports: Option<Reports>,
}

impl<R> Adapter<'_, R> {
    fn done(&self) -> bool {
        self.reports.as_ref().is_some_and(Reports::full)
    }
}

impl<R: Report> Sink for Adapter<'_, R> {
    fn printf(&mut self, printf: &mut dyn Printed) {
        if !self.done() {
            self.report.printf(&printf.args(), &mut *self.out);
        }
    }

    fn map(&mut self, map: &MapPrint) {
        if !self.done() {
            self.report.map(map, &mut *self.out);
        }
    }

    fn finish(&mut self) {
        self.out.finish();
    }

    /// A count is never silently short: every loss is said, on standard
    /// error, and as a note (`{"lost": [...]}` in JSON).
    fn lost(&mut self, losses: &Losses) {
        let mut lines = Vec::new();
        if losses.events > 0 {
            lines.push(format!(
                "{} events lost because the ring buffer was full",
                losses.events
            ));
        }
        for (map, n) in &losses.full_maps {
            lines.push(format!("{n} updates of {map} dropped because it was full"));
        }
        for line in &lines {
            eprintln!("sdt: warning: {line}; the figures above are short");
        }
        if !lines.is_empty() {
            let value =
                sdt_output::Cell::List(lines.iter().cloned().map(sdt_output::Cell::Text).collect());
            self.out.note(&Note {
                key: "lost",
                heading: "Lost, so the figures are short:",
                lines,
                value,
            });
        }
        self.report.end(&mut *self.out);
    }

    fn table(&mut self, table: &Table) {
        self.out.table(table);
    }

    fn row(&mut self, stream: &Stream, row: &[sdt_output::Cell]) {
        self.out.row(stream, row);
    }

    fn note(&mut self, note: &Note) {
        self.out.note(note);
    }

    fn flush(&mut self) {
        self.out.flush();
    }

    fn error(&self) -> Option<&io::Error> {
        self.out.error()
    }

    // The tools' programs print nothing else.
    fn value(&mut self, _: &Datum) {}
    fn text(&mut self, _: TextKind, _: &[u8]) {}
    fn attached(&mut self, _: usize) {}
    fn maps_follow(&mut self) {}
    fn hit(&mut self, _: &Hit<'_>) {}
    fn summary(&mut self, _: &TraceSummary) {}
}

#[cfg(test)]
mod tests {
    use sdt_output::{Format, MapKind, MapRow, MapValue};

    use super::*;

    /// Keeps the maps it is given, and counts one report for each.
    struct Kept {
        maps: Rc<Cell<usize>>,
        reports: Reports,
        ended: Rc<Cell<bool>>,
    }

    impl Report for Kept {
        fn map(&mut self, map: &MapPrint, out: &mut dyn Sink) {
            assert_eq!(map.rows[0].key, [Datum::int(1)]);
            assert_eq!(map.rows[0].value.number(), 5);
            self.maps.set(self.maps.get() + 1);
            self.reports.add();
            out.note(&Note {
                key: "report",
                heading: "",
                lines: Vec::new(),
                value: sdt_output::Cell::Int(self.maps.get() as i128),
            });
        }

        fn end(&mut self, _: &mut dyn Sink) {
            self.ended.set(true);
        }
    }

    #[test]
    fn a_report_gets_maps_as_data_until_its_reports_are_printed_then_the_losses() {
        let mut bytes = Vec::new();
        let reports = Reports::new(Some(2));
        let (maps, ended) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(false)));
        let mut adapter = Adapter {
            report: Kept {
                maps: Rc::clone(&maps),
                reports: reports.clone(),
                ended: Rc::clone(&ended),
            },
            out: Format::JSON.sink(Box::new(&mut bytes)),
            reports: Some(reports.clone()),
        };
        let map = MapPrint {
            name: "@x".into(),
            kind: MapKind::Count,
            keyed: true,
            rows: vec![MapRow {
                key: vec![Datum::int(1)],
                value: MapValue::Number(5),
            }],
            div: 1,
        };
        for _ in 0..3 {
            adapter.map(&map);
        }
        assert!(reports.ended());
        adapter.lost(&Losses {
            events: 3,
            stacks: 0,
            full_maps: vec![("@x".into(), 2)],
        });
        drop(adapter);
        assert_eq!(maps.get(), 2, "the third is past COUNT");
        assert!(ended.get());
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "{\"report\":1}\n{\"report\":2}\n\
             {\"lost\":[\"3 events lost because the ring buffer was full\",\
             \"2 updates of @x dropped because it was full\"]}\n"
        );
    }
}
