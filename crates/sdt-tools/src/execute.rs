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
use std::process::ExitCode;
use std::rc::Rc;

use sdt_job::{Hooks, Job, Request, Source, Target};
use sdt_output::{Event, Losses, Note, Sink};

use crate::report::Report;
use crate::runtimes::{self, Language};
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
pub(crate) struct ToolJob<'a> {
    pub tool: &'static Tool,
    pub common: &'a Common,
    pub program: String,
    /// The runtime whose probes are traced, which the `-c` command gets
    /// switched on ([`Traces::Runtime`]).
    pub language: Option<&'static Language>,
    /// Where the probes are traced (files, or what the command maps), for
    /// the message that tracing has started.
    pub shown: String,
    /// The reports to stop after (`INTERVAL COUNT`), if any.
    pub reports: Option<Reports>,
}

impl<'a> ToolJob<'a> {
    /// A tool that traces a runtime's probes ([`Traces::Runtime`]): the
    /// runtime found (see [`runtimes::detect`]), and `template` filled
    /// with the placeholders of its probes and `more` (which the runtime
    /// found may decide).
    pub(crate) fn on_runtime(
        tool: &'static Tool,
        common: &'a Common,
        template: &str,
        more: impl FnOnce(&'static Language) -> Vec<(&'static str, String)>,
    ) -> anyhow::Result<ToolJob<'a>> {
        let Traces::Runtime(probes) = tool.traces else {
            anyhow::bail!("sdt {} traces no runtime (a bug in sdt)", tool.name);
        };
        let detected = runtimes::detect(
            common.lang.as_deref(),
            common.pid(),
            common.command.as_deref(),
        )?;
        let language = detected.language;
        let mut values = runtimes::placeholders(&detected, probes)?;
        values.extend(more(language));
        Ok(ToolJob {
            tool,
            common,
            program: fill(template, &values),
            language: Some(language),
            shown: detected.shown(),
            reports: None,
        })
    }

    /// Stops the run after these reports.
    pub(crate) fn stopping(self, reports: &Reports) -> ToolJob<'a> {
        ToolJob {
            reports: Some(reports.clone()),
            ..self
        }
    }

    /// Runs the program, keeping the tool's strings to its `strlen`;
    /// `report` gets its output. Returns the exit status (the command's,
    /// with `-c`).
    pub(crate) fn run(self, report: impl Report + 'static) -> anyhow::Result<ExitCode> {
        let ToolJob {
            tool,
            common,
            program,
            language,
            shown,
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
                if let Some(advice) = runtimes::advice(language, probes, common.pid()) {
                    eprintln!("sdt: note: {advice}");
                }
                None
            }
            _ => None,
        };
        let request = Request {
            strlen: Some(tool.strlen()),
            ..common.request(program)
        };
        let job = Job::compile(request).map_err(|failure| {
            anyhow::anyhow!(
                "the tool's program does not compile (a bug in sdt): {}",
                failure.without_script()
            )
        })?;
        // On standard error, whatever the format: it says when tracing
        // starts.
        let started = move |_: &mut dyn Sink| {
            eprintln!(
                "Tracing {} in {}... Ctrl-C to end.",
                match common.pids.as_slice() {
                    [pid] => format!("process {pid}"),
                    [_, ..] => format!("processes {}", list_of(&common.pids)),
                    [] if common.command.is_some() => "the command".to_string(),
                    [] => "every process".to_string(),
                },
                shown
            );
        };
        execute(job, common, report, reports, started)
    }
}

impl Common {
    /// A request to run `program` on what these options trace, as the
    /// tools run theirs: maps of 4,096 entries, printed by the program
    /// itself.
    pub(crate) fn request(&self, program: String) -> Request {
        let target = match (self.pids.as_slice(), &self.command) {
            ([_, ..], _) => Target::Pids(self.pids.clone()),
            ([], Some(command)) => Target::Command(command.clone()),
            ([], None) => Target::Everything,
        };
        Request {
            target,
            cgroup: self.cgroup.clone(),
            // As `sdt run`: a full map is reported, never silent.
            map_entries: Some(4096),
            print_maps: false,
            ..Request::new(Source::inline(program))
        }
    }
}

/// Runs a compiled tool's job: its output goes to `report`, whose own
/// output goes to the format of `common`, beside its pictures; `started`
/// says that tracing has started, into that output or elsewhere; the run
/// stops once `reports` are printed. Returns the exit status (the
/// command's, with `-c`).
pub(crate) fn execute(
    job: Job,
    common: &Common,
    report: impl Report + 'static,
    reports: Option<Reports>,
    started: impl FnOnce(&mut dyn Sink),
) -> anyhow::Result<ExitCode> {
    let adapter = Adapter {
        report,
        out: sdt_output::tee::Tee::of(
            common.format.sink(Box::new(io::stdout())),
            common.pictures.take(),
        ),
        reports: reports.clone(),
    };
    let hooks = Hooks {
        started: Box::new(|run| {
            started(run.sink());
            run.flush();
        }),
        stop_asked: Box::new(|| reports.as_ref().is_some_and(Reports::ended)),
        ..Hooks::default()
    };
    let outcome = job
        .run(Box::new(adapter), hooks)
        .map_err(sdt_job::Failure::without_script)?;
    let _ = io::stdout().flush();
    Ok(ExitCode::from(outcome.status))
}

/// `1, 2, 3`.
fn list_of(pids: &[i32]) -> String {
    let words: Vec<String> = pids.iter().map(i32::to_string).collect();
    words.join(", ")
}

/// The sink a tool's program writes to: its `printf`s and maps go to the
/// tool's [`Report`], as data, with the sink of the user's format to
/// write into; once the reports asked for are printed, nothing more.
///
/// The losses come last, once the run has ended ([`ToolJob::run`] hands them
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

impl<R: Report> Adapter<'_, R> {
    /// A count is never silently short: every loss is said as a note
    /// (`{"lost": [...]}` in JSON); the job says it on standard error.
    /// Then the report says what it has left.
    fn lost(&mut self, losses: &Losses) {
        let mut lines = Vec::new();
        if losses.events > 0 {
            lines.push(format!(
                "{} events lost because the ring buffer was full",
                losses.events
            ));
        }
        for (map, n) in &losses.full_maps {
            lines.push(format!(
                "{n} updates of {map} were dropped because it was full"
            ));
        }
        if losses.hits > 0 {
            lines.push(format!(
                "{} hits were dropped because the kernel had no memory for a thread's scratch space",
                losses.hits
            ));
        }
        lines.extend(losses.failed_reads.iter().map(|read| read.sentence()));
        if !lines.is_empty() {
            let value =
                sdt_output::Cell::List(lines.iter().cloned().map(sdt_output::Cell::Text).collect());
            self.out.event(Event::Note(&Note {
                key: "lost",
                heading: "Lost, so the figures are short:",
                lines,
                value,
            }));
        }
        self.report.end(&mut *self.out);
    }
}

impl<R: Report> Sink for Adapter<'_, R> {
    /// The program's `printf`s and maps go to the report, until the
    /// reports asked for are printed; the report's own tables, rows and
    /// notes to the output. The tools' programs print nothing else.
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Printf(printf) if !self.done() => {
                self.report.printf(&printf.args(), &mut *self.out)
            }
            Event::Map(map) if !self.done() => self.report.map(map, &mut *self.out),
            Event::Lost(losses) => self.lost(losses),
            event @ (Event::Table(_)
            | Event::Row(..)
            | Event::Note(_)
            | Event::Heading(_)
            | Event::Histogram(_)
            | Event::Stacks { .. }) => self.out.event(event),
            _ => {}
        }
    }

    fn finish(&mut self) {
        self.out.finish();
    }

    fn flush(&mut self) {
        self.out.flush();
    }

    fn error(&self) -> Option<&io::Error> {
        self.out.error()
    }
}

#[cfg(test)]
mod tests {
    use sdt_output::{Datum, Format, MapKind, MapPrint, MapRow, MapValue};

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
            out.event(Event::Note(&Note {
                key: "report",
                heading: "",
                lines: Vec::new(),
                value: sdt_output::Cell::Int(self.maps.get() as i128),
            }));
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
            adapter.event(Event::Map(&map));
        }
        assert!(reports.ended());
        adapter.event(Event::Lost(&Losses {
            events: 3,
            full_maps: vec![("@x".into(), 2)],
            ..Losses::default()
        }));
        drop(adapter);
        assert_eq!(maps.get(), 2, "the third is past COUNT");
        assert!(ended.get());
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "{\"report\":1}\n{\"report\":2}\n\
             {\"lost\":[\"3 events lost because the ring buffer was full\",\
             \"2 updates of @x were dropped because it was full\"]}\n"
        );
    }
}
