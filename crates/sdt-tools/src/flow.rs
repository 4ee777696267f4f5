//! `sdt flow`: method entries and returns, indented by call depth per
//! thread, like BCC's `uflow`.
//!
//! The kernel sends every entry and return; the pairing is done here, on
//! a stack of open calls per thread, by class and method name. A return
//! closes the nearest open call of the same method: the calls above it
//! never returned (their entries stay in the tree, with no return line),
//! and a return that closes none had no entry and is not shown. Both are
//! counted and reported when tracing ends, with the calls still open
//! then, so the tree shown is the program's, whatever the runtime left
//! unpaired.

use std::collections::HashMap;
use std::process::ExitCode;

use sdt_output::calls::{CallStacks, Weight};
use sdt_output::{Cell, Column, Datum, Event, Sink, Stream, Thread};

use crate::execute::ToolJob;
use crate::pairing::{self, method_name, thread_alive, Unpaired};
use crate::report::{unsigned, Clock, Report};
use crate::runtimes::Probes;
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    // Text shows the tree (indentation, arrow, name); JSON its parts.
    columns: &[
        Column::json("event"),
        Column::both("pid", "PID").width(7),
        Column::both("tid", "TID").width(7),
        Column::json("time_ns"),
        Column::text("TIME(us)").width(12).decimals(3),
        Column::json("depth"),
        Column::json("class"),
        Column::json("method"),
        Column::text("METHOD"),
    ],
    summary: "Show each method entry and return of a Java, Python, Ruby or PHP program, indented by call depth, per thread",
    program: include_str!("programs/flow.bt"),
    ..Tool::new("flow", "uflow", Traces::Runtime(Probes::Methods))
};

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let job = ToolJob::on_runtime(&TOOL, common, TOOL.program, |_| Vec::new())?;
    let mut flow = Flow::new(options);
    if common.pictures.any() {
        flow.spans = Some(CallStacks::new(Weight::Calls));
    }
    job.run(flow)
}

/// `flow`'s own options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Show only methods of classes whose name starts with this (for
    /// Python: whose file name does).
    pub class: Option<String>,
    /// Show only methods whose name starts with this.
    pub method: Option<String>,
}

/// An open call.
struct Frame {
    class: String,
    method: String,
    /// Whether it passes `-C` and `-M`, so is shown and indents.
    shown: bool,
}

struct Flow {
    options: Options,
    stream: Stream,
    /// The open calls of each `(pid, tid)`, outermost first.
    stacks: HashMap<(i128, i128), Vec<Frame>>,
    clock: Clock,
    unpaired: Unpaired,
    /// The calls shown, paired again as slices for a timeline.
    spans: Option<CallStacks>,
}

impl Flow {
    fn new(options: &Options) -> Flow {
        Flow {
            options: options.clone(),
            stream: Stream {
                name: TOOL.name,
                columns: TOOL.columns.to_vec(),
                layout: sdt_output::Layout::default(),
            },
            stacks: HashMap::new(),
            clock: Clock::default(),
            unpaired: Unpaired::default(),
            spans: None,
        }
    }

    fn shows(&self, class: &str, method: &str) -> bool {
        let starts = |name: &str, prefix: &Option<String>| {
            prefix.as_ref().is_none_or(|p| name.starts_with(p.as_str()))
        };
        starts(class, &self.options.class) && starts(method, &self.options.method)
    }

    fn row(
        &mut self,
        entry: bool,
        (pid, tid, ns): (i128, i128, i128),
        depth: usize,
        frame: &Frame,
        out: &mut dyn Sink,
    ) {
        let (class, method) = (&frame.class, &frame.method);
        let arrow = if entry { "->" } else { "<-" };
        let [time_ns, time_us] = self.clock.since(ns, 1e3);
        let row = [
            Cell::Text(if entry { "entry" } else { "return" }.into()),
            unsigned(pid),
            unsigned(tid),
            time_ns,
            time_us,
            Cell::Int(depth as i128),
            Cell::Text(class.clone()),
            Cell::Text(method.clone()),
            Cell::Text(format!(
                "{}{arrow} {}",
                "  ".repeat(depth),
                method_name(class, method)
            )),
        ];
        out.event(Event::Row(&self.stream, &row));
    }
}

impl Report for Flow {
    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        let [direction, pid, tid, ns, class, method, comm] = args else {
            return;
        };
        let (class, method) = (class.to_text(), method.to_text());
        let entry = direction.to_text() == "->";
        let event = (pid.as_int(), tid.as_int(), ns.as_int());
        let frame = Frame {
            shown: self.shows(&class, &method),
            class,
            method,
        };
        if let (true, Some(spans)) = (frame.shown, &mut self.spans) {
            let comm = comm.to_text();
            let on = Thread {
                pid: event.0 as u32,
                tid: event.1 as u32,
                comm: comm.as_bytes(),
            };
            let name = method_name(&frame.class, &frame.method);
            match entry {
                true => spans.entry(on, event.2 as u64, &name),
                false => spans.exit(on, event.2 as u64, &name, Some(&mut *out)),
            }
        }
        let thread = (event.0, event.1);
        let shown_below = |stack: &[Frame]| stack.iter().filter(|f| f.shown).count();
        let stack = self.stacks.entry(thread).or_default();
        if entry {
            let depth = shown_below(stack);
            if frame.shown {
                self.row(true, event, depth, &frame, out);
            }
            self.stacks.entry(thread).or_default().push(frame);
            return;
        }
        let Some(at) = stack
            .iter()
            .rposition(|f| f.class == frame.class && f.method == frame.method)
        else {
            *self
                .unpaired
                .returns_without_entry
                .entry((frame.class, frame.method))
                .or_default() += 1;
            return;
        };
        for frame in stack.drain(at + 1..) {
            *self
                .unpaired
                .entries_without_return
                .entry((frame.class, frame.method))
                .or_default() += 1;
        }
        stack.pop();
        let depth = shown_below(stack);
        if stack.is_empty() {
            self.stacks.remove(&thread);
        }
        if frame.shown {
            self.row(false, event, depth, &frame, out);
        }
    }

    /// Reports what could not be paired, the calls still open included.
    fn end(&mut self, out: &mut dyn Sink) {
        for ((_, tid), stack) in std::mem::take(&mut self.stacks) {
            if thread_alive(tid) {
                self.unpaired.running_at_end += stack.len() as u64;
            } else {
                for frame in stack {
                    *self
                        .unpaired
                        .entries_without_return
                        .entry((frame.class, frame.method))
                        .or_default() += 1;
                }
            }
        }
        pairing::tell(&self.unpaired.note(), out);
    }
}

#[cfg(test)]
mod tests {
    use sdt_output::Format;

    use super::*;

    /// What `flow` writes in `format` for these events of one thread
    /// (`->` or `<-`, then the method, of class `C`), 10 µs apart.
    fn flow(options: &Options, format: Format, events: &[(&str, &str)]) -> String {
        let mut bytes = Vec::new();
        let mut out = format.sink(Box::new(&mut bytes));
        let mut flow = Flow::new(options);
        let text = |s: &str| Datum::Str(s.as_bytes().to_vec());
        for (n, (arrow, method)) in events.iter().enumerate() {
            let (pid, tid) = (Datum::int(0), Datum::int(0));
            let ns = Datum::int(1_000_000 + n as i64 * 10_000);
            let args = [
                text(arrow),
                pid,
                tid,
                ns,
                text("C"),
                text(method),
                text("x"),
            ];
            flow.printf(&args, &mut *out);
        }
        flow.end(&mut *out);
        drop(out);
        String::from_utf8(bytes).unwrap()
    }

    /// `a` calls `b`, which never returns; `a` returns; a return comes
    /// whose entry never came.
    const UNPAIRED: &[(&str, &str)] = &[("->", "a"), ("->", "b"), ("<-", "a"), ("<-", "z")];

    #[test]
    fn a_return_closes_its_entry_and_what_never_returned_is_counted() {
        let json = flow(&Options::default(), Format::JSON, UNPAIRED);
        assert_eq!(
            json,
            "{\"event\":\"entry\",\"pid\":0,\"tid\":0,\"time_ns\":0,\"depth\":0,\"class\":\"C\",\"method\":\"a\"}\n\
             {\"event\":\"entry\",\"pid\":0,\"tid\":0,\"time_ns\":10000,\"depth\":1,\"class\":\"C\",\"method\":\"b\"}\n\
             {\"event\":\"return\",\"pid\":0,\"tid\":0,\"time_ns\":20000,\"depth\":0,\"class\":\"C\",\"method\":\"a\"}\n\
             {\"unpaired\":{\"returns_without_entry\":[{\"class\":\"C\",\"method\":\"z\",\"count\":1}],\
             \"entries_without_return\":[{\"class\":\"C\",\"method\":\"b\",\"count\":1}],\
             \"unnamed_entries_without_return\":0,\"running_at_end\":0}}\n"
        );
    }

    #[test]
    fn the_tree_indents_only_under_the_calls_shown() {
        let options = Options {
            class: None,
            method: Some("t".into()),
        };
        let events = [
            ("->", "top"),
            ("->", "hidden"),
            ("->", "tree"),
            ("<-", "tree"),
            ("<-", "hidden"),
            ("<-", "top"),
        ];
        assert_eq!(
            flow(&options, Format::TEXT, &events),
            "PID     TID     TIME(us)     METHOD\n\
             0       0       0.000        -> C.top\n\
             0       0       20.000         -> C.tree\n\
             0       0       30.000         <- C.tree\n\
             0       0       50.000       <- C.top\n"
        );
    }
}
