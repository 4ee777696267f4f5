//! `sdt flow`: method entries and returns, indented by call depth per
//! thread, like BCC's `uflow`.

use std::collections::HashMap;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{execute, fill, prepare, probe_prefix, Common, Prepared, NAME_LEN};

const FLOW: &str = include_str!("flow.bt");

/// Show each method entry and return of a Java, Python, Ruby or PHP
/// program, indented by call depth, per thread.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt flow -c 'python3 app.py' -M handle_      calls of methods named handle_*\n  \
    sdt flow -p 1234 -C com/example/             calls of classes in com.example\n\n\
    Depth counts only the calls shown: a filtered-out caller adds no indentation.")]
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
}

pub fn run(args: FlowArgs) -> anyhow::Result<ExitCode> {
    let detected = prepare(&args.common)?;
    let language = detected.language;
    let Some(calls) = &language.calls else {
        anyhow::bail!("{} has no method probes", language.name);
    };
    let program = fill(
        FLOW,
        &[
            ("PROBE", probe_prefix(&detected)),
            ("ENTRY", calls.entry.to_string()),
            ("RETURN", calls.ret.to_string()),
            ("CLASS", calls.class.to_string()),
            ("METHOD", calls.method.to_string()),
        ],
    );
    let flow = Flow {
        class: args.class.clone(),
        method: args.method.clone(),
        json: args.common.target.json,
        depth: HashMap::new(),
        first_ns: None,
        header: false,
    };
    execute(
        &args.common.target,
        Prepared::Runtime {
            detected,
            needs: Needs::MethodProbes,
        },
        &program,
        Box::new(flow),
        None,
        NAME_LEN,
    )
}

struct Flow {
    class: Option<String>,
    method: Option<String>,
    json: bool,
    /// Depth of each `(pid, tid)`, over the calls shown.
    depth: HashMap<(i128, i128), usize>,
    /// Time of the first event: times are shown from it.
    first_ns: Option<i128>,
    header: bool,
}

impl Receiver for Flow {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [direction, pid, tid, ns, class, method] = args.as_slice() else {
            return;
        };
        let (class, method) = (class.text(), method.text());
        if self
            .class
            .as_ref()
            .is_some_and(|c| !class.starts_with(c.as_str()))
            || self
                .method
                .as_ref()
                .is_some_and(|m| !method.starts_with(m.as_str()))
        {
            return;
        }
        let entry = direction.text() == "->";
        let (pid, tid, ns) = (pid.int(), tid.int(), ns.int());
        let first = *self.first_ns.get_or_insert(ns);
        let depth = self.depth.entry((pid, tid)).or_default();
        if !entry {
            *depth = depth.saturating_sub(1);
        }
        let shown_depth = *depth;
        if entry {
            *depth += 1;
        }
        let mut out = io::stdout().lock();
        if self.json {
            let line = serde_json::json!({
                "event": if entry { "entry" } else { "return" },
                "pid": pid as u64, "tid": tid as u64, "time_ns": (ns - first) as u64,
                "depth": shown_depth, "class": class, "method": method,
            });
            let _ = writeln!(out, "{line}");
            return;
        }
        if !self.header {
            self.header = true;
            let _ = writeln!(out, "{:<7} {:<7} {:<12} METHOD", "PID", "TID", "TIME(us)");
        }
        let name = if class.is_empty() {
            method
        } else {
            format!("{class}.{method}")
        };
        let _ = writeln!(
            out,
            "{pid:<7} {tid:<7} {:<12.3} {}{} {name}",
            (ns - first) as f64 / 1000.0,
            "  ".repeat(shown_depth),
            if entry { "->" } else { "<-" }
        );
    }

    fn map(&mut self, _: &str, _: Vec<MapRow>) {}
}
