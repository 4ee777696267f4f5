//! `sdt threads`: threads as they start and stop, with their names, like
//! BCC's `uthreads`.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::Needs;
use super::{attach_points, execute, fill, prepare, Common, PositionalPid, Prepared, NAME_LEN};

const THREADS: &str = include_str!("threads.bt");

/// Show the threads of a Java program as they start and stop, with their
/// names.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt threads -c 'java -cp . App'\n  \
    sdt threads -l java --json          threads of every JVM, as JSON lines\n  \
    sdt threads 1234                    BCC's form: the PID last\n\n\
    Java's thread__start and thread__stop give the thread's name and its\n\
    kernel thread id; Python, Ruby and PHP have no thread probes.")]
pub struct ThreadsArgs {
    #[command(flatten)]
    common: Common,

    #[command(flatten)]
    pid: PositionalPid,
}

pub fn run(args: ThreadsArgs) -> anyhow::Result<ExitCode> {
    let common = args.common.with_pid(args.pid);
    let detected = prepare(&common)?;
    let language = detected.language;
    let Some(threads) = &language.threads else {
        anyhow::bail!("{} has no thread probes", language.name);
    };
    let program = fill(
        THREADS,
        &[
            ("START", attach_points(&detected, threads.start)),
            ("STOP", attach_points(&detected, threads.stop)),
            ("ID", threads.id.to_string()),
            ("NAME", threads.name.to_string()),
        ],
    );
    let table = Table {
        json: common.target.json,
        first_ns: None,
        header: false,
    };
    execute(
        &common.target,
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

struct Table {
    json: bool,
    first_ns: Option<i128>,
    header: bool,
}

impl Receiver for Table {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [kind, pid, id, ns, name] = args.as_slice() else {
            return;
        };
        let ns = ns.int();
        let first = *self.first_ns.get_or_insert(ns);
        let mut out = io::stdout().lock();
        if self.json {
            let line = serde_json::json!({
                "event": kind.text(), "pid": pid.int() as u64, "tid": id.int() as u64,
                "time_ns": (ns - first) as u64, "name": name.text(),
            });
            let _ = writeln!(out, "{line}");
            return;
        }
        if !self.header {
            self.header = true;
            let _ = writeln!(
                out,
                "{:<12} {:<7} {:<7} {:<6} NAME",
                "TIME(s)", "PID", "TID", "EVENT"
            );
        }
        let _ = writeln!(
            out,
            "{:<12.6} {:<7} {:<7} {:<6} {}",
            (ns - first) as f64 / 1e9,
            pid.int(),
            id.int(),
            kind.text(),
            name.text()
        );
    }

    fn map(&mut self, _: &str, _: Vec<MapRow>) {}
}
