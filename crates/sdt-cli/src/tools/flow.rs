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
use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_output::calls::{CallStacks, Weight};
use sdt_output::Thread;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{
    attach_points, execute, fill, method_name, prepare, report_unpaired, thread_alive, Common,
    PositionalPid, Prepared, Unpaired, NAME_LEN,
};
use crate::pictures::{TimelineArgs, ToolTimeline};

const FLOW: &str = include_str!("flow.bt");

/// Show each method entry and return of a Java, Python, Ruby or PHP
/// program, indented by call depth, per thread.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt flow -c 'python3 app.py' -M handle_      calls of methods named handle_*\n  \
    sdt flow -p 1234 -C com/example/             calls of classes in com.example\n  \
    sdt flow -l python 1234                      BCC's form: the PID last\n  \
    sdt flow --timeline calls.json -c 'ruby app.rb'   each call also a slice\n\n\
    Depth counts only the calls shown: a filtered-out caller adds no indentation.\n\
    A return without an entry is not shown, an entry without a return has no\n\
    return line; both are counted and reported on standard error at the end.")]
pub struct FlowArgs {
    #[command(flatten)]
    common: Common,

    /// Show only methods of classes whose name starts with CLASS (for
    /// Python: whose file name does).
    #[arg(short = 'C', long = "class", value_name = "CLASS")]
    class: Option<String>,

    /// Show only methods whose name starts with METHOD.
    #[arg(short = 'M', long = "method", value_name = "METHOD")]
    method: Option<String>,

    #[command(flatten)]
    timeline: TimelineArgs,

    #[command(flatten)]
    pid: PositionalPid,
}

pub fn run(args: FlowArgs) -> anyhow::Result<ExitCode> {
    let common = args.common.with_pid(args.pid);
    let detected = prepare(&common)?;
    let language = detected.language;
    let Some(calls) = &language.calls else {
        anyhow::bail!("{} has no method probes", language.name);
    };
    let program = fill(
        FLOW,
        &[
            ("ENTRY", attach_points(&detected, calls.entry)),
            ("RETURN", attach_points(&detected, calls.ret)),
            ("CLASS", calls.class.to_string()),
            ("METHOD", calls.method.to_string()),
        ],
    );
    let json = common.target.json;
    let mut flow = Flow {
        class: args.class,
        method: args.method,
        json,
        stacks: HashMap::new(),
        first_ns: None,
        header: false,
        unpaired: Unpaired::default(),
        timeline: ToolTimeline::new(&args.timeline)?,
        spans: CallStacks::new(Weight::Calls),
    };
    let status = execute(
        &common.target,
        Prepared::Runtime {
            detected,
            needs: Needs::MethodProbes,
        },
        &program,
        Box::new(&mut flow),
        None,
        NAME_LEN,
    )?;
    flow.finish()?;
    Ok(status)
}

/// An open call.
struct Frame {
    class: String,
    method: String,
    /// Whether it passes `-C` and `-M`, so is shown and indents.
    shown: bool,
}

struct Flow {
    class: Option<String>,
    method: Option<String>,
    json: bool,
    /// The open calls of each `(pid, tid)`, outermost first.
    stacks: HashMap<(i128, i128), Vec<Frame>>,
    /// Time of the first event: times are shown from it.
    first_ns: Option<i128>,
    header: bool,
    unpaired: Unpaired,
    /// Each call shown, as a slice, paired as above.
    timeline: ToolTimeline,
    spans: CallStacks,
}

impl Flow {
    fn shows(&self, class: &str, method: &str) -> bool {
        self.class
            .as_ref()
            .is_none_or(|c| class.starts_with(c.as_str()))
            && self
                .method
                .as_ref()
                .is_none_or(|m| method.starts_with(m.as_str()))
    }

    /// Reports what could not be paired, the calls still open included.
    fn finish(mut self) -> anyhow::Result<()> {
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
        report_unpaired(&self.unpaired.lines(), self.unpaired.json(), self.json);
        self.timeline.finish()
    }

    fn print(
        &mut self,
        entry: bool,
        (pid, tid, ns): (i128, i128, i128),
        depth: usize,
        frame: &Frame,
    ) {
        let (class, method) = (&frame.class, &frame.method);
        let first = *self.first_ns.get_or_insert(ns);
        let mut out = io::stdout().lock();
        if self.json {
            let line = serde_json::json!({
                "event": if entry { "entry" } else { "return" },
                "pid": pid as u64, "tid": tid as u64, "time_ns": (ns - first) as u64,
                "depth": depth, "class": class, "method": method,
            });
            let _ = writeln!(out, "{line}");
            return;
        }
        if !self.header {
            self.header = true;
            let _ = writeln!(out, "{:<7} {:<7} {:<12} METHOD", "PID", "TID", "TIME(us)");
        }
        let _ = writeln!(
            out,
            "{pid:<7} {tid:<7} {:<12.3} {}{} {}",
            (ns - first) as f64 / 1000.0,
            "  ".repeat(depth),
            if entry { "->" } else { "<-" },
            method_name(class, method)
        );
    }
}

impl Receiver for &mut Flow {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [direction, pid, tid, ns, class, method, comm] = args.as_slice() else {
            return;
        };
        let (class, method) = (class.text(), method.text());
        let entry = direction.text() == "->";
        let (pid, tid, ns) = (pid.int(), tid.int(), ns.int());
        let frame = Frame {
            shown: self.shows(&class, &method),
            class,
            method,
        };
        if frame.shown {
            if let Some(timeline) = self.timeline.sink() {
                let comm = comm.text();
                let thread = Thread {
                    pid: pid as u32,
                    tid: tid as u32,
                    comm: comm.as_bytes(),
                };
                let name = method_name(&frame.class, &frame.method);
                match entry {
                    true => self.spans.entry(thread, ns as u64, &name),
                    false => self.spans.exit(thread, ns as u64, &name, Some(timeline)),
                }
            }
        }
        let stack = self.stacks.entry((pid, tid)).or_default();
        let shown_below = |stack: &[Frame]| stack.iter().filter(|f| f.shown).count();
        if entry {
            let depth = shown_below(stack);
            if frame.shown {
                self.print(true, (pid, tid, ns), depth, &frame);
            }
            self.stacks.entry((pid, tid)).or_default().push(frame);
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
            self.stacks.remove(&(pid, tid));
        }
        if frame.shown {
            self.print(false, (pid, tid, ns), depth, &frame);
        }
    }

    fn map(&mut self, _: &str, _: Vec<MapRow>) {}
}
