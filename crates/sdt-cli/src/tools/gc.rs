//! `sdt gc`: each garbage collection and its duration, like BCC's `ugc`.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{execute, fill, prepare, probe_prefix, Common, Prepared, NAME_LEN};

const GC: &str = include_str!("gc.bt");

/// Show each garbage collection of a Java, Python or Ruby program, with
/// its duration.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt gc -c 'java -jar app.jar'      every collection of the command\n  \
    sdt gc -l ruby -m 10               collections over 10 ms in every Ruby process\n\n\
    A collection is, for Java, gc__begin to gc__end; for Python, gc__start to\n\
    gc__done; for Ruby, the marking phase (gc__mark__begin to gc__mark__end).")]
pub struct GcArgs {
    #[command(flatten)]
    common: Common,

    /// Show only collections that took at least MIN milliseconds.
    #[arg(short = 'm', long = "min", value_name = "MIN")]
    min_ms: Option<u64>,
}

pub fn run(args: GcArgs) -> anyhow::Result<ExitCode> {
    let detected = prepare(&args.common)?;
    let language = detected.language;
    let Some(gc) = &language.gc else {
        anyhow::bail!("{} has no garbage-collection probes", language.name);
    };
    let program = fill(
        GC,
        &[
            ("PROBE", probe_prefix(&detected)),
            ("BEGIN", gc.begin.to_string()),
            ("END", gc.end.to_string()),
        ],
    );
    let table = Collections {
        min_ns: args.min_ms.map_or(0, |ms| i128::from(ms) * 1_000_000),
        json: args.common.target.json,
        first_ns: None,
        header: false,
    };
    execute(
        &args.common.target,
        Prepared::Runtime {
            detected,
            needs: Needs::Plain,
        },
        &program,
        Box::new(table),
        None,
        NAME_LEN,
    )
}

struct Collections {
    min_ns: i128,
    json: bool,
    first_ns: Option<i128>,
    header: bool,
}

impl Receiver for Collections {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [pid, tid, start, took] = args.as_slice() else {
            return;
        };
        let (start, took) = (start.int(), took.int());
        let first = *self.first_ns.get_or_insert(start);
        if took < self.min_ns {
            return;
        }
        let mut out = io::stdout().lock();
        if self.json {
            let line = serde_json::json!({
                "pid": pid.int() as u64, "tid": tid.int() as u64,
                "start_ns": (start - first) as u64, "duration_ns": took as u64,
            });
            let _ = writeln!(out, "{line}");
            return;
        }
        if !self.header {
            self.header = true;
            let _ = writeln!(
                out,
                "{:<7} {:<7} {:<12} {:>12}",
                "PID", "TID", "START(s)", "TIME(us)"
            );
        }
        let _ = writeln!(
            out,
            "{:<7} {:<7} {:<12.6} {:>12.2}",
            pid.int(),
            tid.int(),
            (start - first) as f64 / 1e9,
            took as f64 / 1000.0
        );
    }

    fn map(&mut self, _: &str, _: Vec<MapRow>) {}
}
