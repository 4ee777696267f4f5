//! `sdt objnew`: allocations counted by class, like BCC's `uobjnew`.
//!
//! Without bytes: OpenJDK 17's `object__alloc` passes 0 as the size of
//! nearly every allocation (measured: 999 of 1,000 `new Foo()`), so a
//! byte count would be silently short, and Ruby's `object__create` gives
//! no size.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{
    attach_points, execute, fill, interval_block, prepare, Common, PositionalPid, Prepared,
    Reports, NAME_LEN,
};

const OBJNEW: &str = include_str!("objnew.bt");

/// Count the objects a Java or Ruby program allocates, by class.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt objnew -c 'java -cp . App'       allocations of the command, by class\n  \
    sdt objnew -C 10 -p 1234 5            every 5 s, the 10 classes allocated most\n\n\
    Java's allocation probe needs -XX:+ExtendedDTraceProbes, which sdt sets for -c.\n\
    Ruby's object__create counts objects created with new (not strings,\n\
    arrays and hashes, which have probes of their own). No bytes: OpenJDK 17\n\
    gives 0 as the size of nearly every allocation, and Ruby gives none.")]
pub struct ObjnewArgs {
    #[command(flatten)]
    common: Common,

    /// Show the N classes allocated most often.
    #[arg(short = 'C', long = "top-count", value_name = "N")]
    top_count: Option<usize>,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT", requires = "interval")]
    count: Option<u64>,
}

/// BCC's `uobjnew [-l LANG] [-C N] PID [INTERVAL]`.
#[derive(Args, Debug)]
pub struct UobjnewArgs {
    #[command(flatten)]
    common: Common,

    /// Show the N classes allocated most often.
    #[arg(short = 'C', long = "top-count", value_name = "N")]
    top_count: Option<usize>,

    #[command(flatten)]
    pid: PositionalPid,

    /// Print a report every INTERVAL seconds (default: once, at the end).
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,
}

pub fn run(args: ObjnewArgs) -> anyhow::Result<ExitCode> {
    objnew(args.common, args.top_count, args.interval, args.count)
}

/// `uobjnew`: BCC's positional PID, then its INTERVAL.
pub fn uobjnew(args: UobjnewArgs) -> anyhow::Result<ExitCode> {
    objnew(
        args.common.with_pid(args.pid),
        args.top_count,
        args.interval,
        None,
    )
}

fn objnew(
    common: Common,
    top_count: Option<usize>,
    interval: Option<u64>,
    count: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let detected = prepare(&common)?;
    let language = detected.language;
    let Some(alloc) = &language.alloc else {
        anyhow::bail!("{} has no allocation probes", language.name);
    };
    let program = fill(
        OBJNEW,
        &[
            ("ALLOC", attach_points(&detected, alloc.probe)),
            ("CLASS", alloc.class.to_string()),
            (
                "INTERVAL",
                interval_block(interval, "  print(@objects);\n  clear(@objects);\n"),
            ),
        ],
    );
    let reports = Reports::new(count);
    let table = Table {
        top: top_count,
        json: common.target.json,
        reports: reports.clone(),
    };
    let stop = Some(reports);
    execute(
        &common.target,
        Prepared::Runtime {
            detected,
            needs: Needs::Allocations,
        },
        &program,
        Box::new(table),
        stop,
        NAME_LEN,
    )
}

struct Table {
    top: Option<usize>,
    json: bool,
    reports: Reports,
}

impl Receiver for Table {
    fn printf(&mut self, _: u32, _: Vec<Datum>) {}

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        if self.reports.full() {
            return;
        }
        if name == "@objects" {
            self.print(rows);
            self.reports.add();
        }
    }
}

impl Table {
    fn print(&self, objects: Vec<MapRow>) {
        let mut lines: Vec<(String, i128)> = objects
            .into_iter()
            .map(|row| {
                let class = row.keys.first().map(Datum::text).unwrap_or_default();
                (class, row.value.int())
            })
            .collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if let Some(top) = self.top {
            lines.truncate(top);
        }
        let mut out = io::stdout().lock();
        if self.json {
            let rows: Vec<_> = lines
                .iter()
                .map(|(class, count)| serde_json::json!({ "class": class, "objects": *count as u64 }))
                .collect();
            let _ = writeln!(out, "{}", serde_json::json!({ "classes": rows }));
            return;
        }
        let _ = writeln!(out, "{:<50} {:>10}", "NAME/TYPE", "# ALLOCS");
        for (class, count) in &lines {
            let _ = writeln!(out, "{class:<50} {count:>10}");
        }
        let _ = writeln!(out);
        let _ = out.flush();
    }
}
