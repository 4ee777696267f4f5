//! `sdt gc`: each garbage collection and its duration, like BCC's `ugc`.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{
    attach_points, execute, fill, prepare, Common, PositionalPid, Prepared, UnpairedSpans, NAME_LEN,
};
use crate::pictures::{TimelineArgs, ToolTimeline};

const GC: &str = include_str!("gc.bt");

/// Show each garbage collection of a Java, Python or Ruby program, with
/// its duration.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt gc -c 'java -jar app.jar'      every collection of the command\n  \
    sdt gc -l ruby -m 10               collections over 10 ms in every Ruby process\n  \
    sdt gc --timeline gc.json -p 1234  each collection also a slice on its thread\n\n\
    A collection is, for Java, gc__begin to gc__end; for Python, gc__start to\n\
    gc__done; for Ruby, the marking phase (gc__mark__begin to gc__mark__end).")]
pub struct GcArgs {
    #[command(flatten)]
    common: Common,

    /// Show only collections that took at least MIN milliseconds.
    #[arg(short = 'm', long = "min", value_name = "MIN")]
    min_ms: Option<u64>,

    #[command(flatten)]
    timeline: TimelineArgs,

    #[command(flatten)]
    pid: PositionalPid,
}

/// BCC's `ugc [-l LANG] [-m] [-M MIN] PID`.
#[derive(Args, Debug)]
pub struct UgcArgs {
    #[command(flatten)]
    common: Common,

    /// Times in milliseconds instead of microseconds.
    #[arg(short = 'm', long)]
    milliseconds: bool,

    /// Show only collections that took at least MIN milliseconds.
    #[arg(short = 'M', long = "minimum", value_name = "MIN")]
    min_ms: Option<u64>,

    #[command(flatten)]
    pid: PositionalPid,
}

pub fn run(args: GcArgs) -> anyhow::Result<ExitCode> {
    gc(
        args.common.with_pid(args.pid),
        args.min_ms,
        false,
        args.timeline,
    )
}

/// `ugc`: BCC's options (`-m` is the unit there, `-M` the minimum).
pub fn ugc(args: UgcArgs) -> anyhow::Result<ExitCode> {
    gc(
        args.common.with_pid(args.pid),
        args.min_ms,
        args.milliseconds,
        TimelineArgs::default(),
    )
}

fn gc(
    common: Common,
    min_ms: Option<u64>,
    milliseconds: bool,
    timeline: TimelineArgs,
) -> anyhow::Result<ExitCode> {
    let detected = prepare(&common)?;
    let language = detected.language;
    let Some(gc) = &language.gc else {
        anyhow::bail!("{} has no garbage-collection probes", language.name);
    };
    let program = fill(
        GC,
        &[
            ("BEGIN", attach_points(&detected, gc.begin)),
            ("END", attach_points(&detected, gc.end)),
        ],
    );
    let json = common.target.json;
    let mut table = Collections {
        min_ns: min_ms.map_or(0, |ms| i128::from(ms) * 1_000_000),
        milliseconds,
        json,
        first_ns: None,
        header: false,
        timeline: ToolTimeline::new(&timeline)?,
        unpaired: UnpairedSpans::new(
            "@collecting",
            ("collection", "collections"),
            (
                "the runtime reported no end before the next begin, or the thread ended",
                "collections that began before tracing did",
            ),
        ),
    };
    let status = execute(
        &common.target,
        Prepared::Runtime {
            detected,
            needs: Needs::Plain,
        },
        &program,
        Box::new(&mut table),
        None,
        NAME_LEN,
    )?;
    table.unpaired.report(json);
    table.timeline.finish()?;
    Ok(status)
}

struct Collections {
    min_ns: i128,
    milliseconds: bool,
    json: bool,
    first_ns: Option<i128>,
    header: bool,
    /// Each collection shown, as a slice.
    timeline: ToolTimeline,
    unpaired: UnpairedSpans,
}

impl Receiver for &mut Collections {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [pid, tid, start, took, comm] = args.as_slice() else {
            return;
        };
        let (start, took) = (start.int(), took.int());
        let first = *self.first_ns.get_or_insert(start);
        if took < self.min_ns {
            return;
        }
        let thread = (pid.int(), tid.int(), comm.text());
        let thread = (thread.0, thread.1, thread.2.as_str());
        self.timeline.span(thread, start, start + took, "gc");
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
            let unit = if self.milliseconds {
                "TIME(ms)"
            } else {
                "TIME(us)"
            };
            let _ = writeln!(
                out,
                "{:<7} {:<7} {:<12} {:>12}",
                "PID", "TID", "START(s)", unit
            );
        }
        let divisor = if self.milliseconds { 1e6 } else { 1e3 };
        let _ = writeln!(
            out,
            "{:<7} {:<7} {:<12.6} {:>12.2}",
            pid.int(),
            tid.int(),
            (start - first) as f64 / 1e9,
            took as f64 / divisor
        );
    }

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        self.unpaired.map(name, &rows);
    }
}
