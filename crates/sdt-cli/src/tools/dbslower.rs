//! `sdt dbslower`: PostgreSQL queries slower than a threshold, with their
//! duration and text, like BCC's `dbslower`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::{execute, fill, Prepared, Target, TEXT_LEN};

const DBSLOWER: &str = include_str!("dbslower.bt");

/// Show PostgreSQL queries slower than a threshold, with their duration
/// and text.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt dbslower                          queries of 1 ms or more, every server\n  \
    sdt dbslower -m 100 -p \"$(pgrep -o postgres)\"   one server and its backends\n\n\
    A query is timed from query__start to query__done in the backend that\n\
    runs it. The query text is cut at 256 bytes.")]
pub struct DbslowerArgs {
    #[command(flatten)]
    target: Target,

    /// Show queries that took at least THRESHOLD milliseconds.
    #[arg(
        short = 'm',
        long = "threshold",
        value_name = "THRESHOLD",
        default_value_t = 1
    )]
    threshold_ms: u64,

    /// The PostgreSQL server program (default: the -p process's, the -c
    /// command's, or the newest /usr/lib/postgresql/*/bin/postgres).
    #[arg(short = 'x', long = "exe", value_name = "PATH")]
    exe: Option<PathBuf>,
}

pub fn run(args: DbslowerArgs) -> anyhow::Result<ExitCode> {
    let postgres = server(&args)?;
    let file = sdt_elf::ElfFile::open(&postgres)
        .with_context(|| format!("cannot open {}", postgres.display()))?;
    if !file.probes()?.iter().any(|p| p.provider == "postgresql") {
        anyhow::bail!(
            "{} has no postgresql probes: this PostgreSQL was built without --enable-dtrace",
            postgres.display()
        );
    }
    let program = fill(
        DBSLOWER,
        &[
            ("POSTGRES", postgres.display().to_string()),
            ("THRESHOLD_MS", args.threshold_ms.to_string()),
            ("THRESHOLD_NS", (args.threshold_ms * 1_000_000).to_string()),
        ],
    );
    let table = Queries {
        json: args.target.json,
        first_ns: None,
        header: false,
    };
    execute(
        &args.target,
        Prepared::Program(postgres),
        &program,
        Box::new(table),
        None,
        TEXT_LEN,
    )
}

/// The server program to trace.
fn server(args: &DbslowerArgs) -> anyhow::Result<PathBuf> {
    if let Some(exe) = &args.exe {
        return Ok(exe.clone());
    }
    if let Some(pid) = args.target.pid {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("cannot read the program of process {pid}"))?;
        return Ok(Path::new(&format!("/proc/{pid}/root"))
            .join(exe.to_string_lossy().trim_start_matches('/')));
    }
    if let Some(command) = &args.target.command {
        let argv = shlex::split(command).unwrap_or_default();
        return Ok(sdt_elf::resolve(argv.first().map_or("", String::as_str))?);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let path = e.path().join("bin/postgres");
            path.exists().then_some((version, path))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, path)| path).ok_or_else(|| {
        anyhow::anyhow!("no /usr/lib/postgresql/*/bin/postgres: name the server with -x PATH")
    })
}

struct Queries {
    json: bool,
    first_ns: Option<i128>,
    header: bool,
}

impl Receiver for Queries {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [pid, start, took, query] = args.as_slice() else {
            return;
        };
        let (start, took) = (start.int(), took.int());
        let first = *self.first_ns.get_or_insert(start);
        let mut out = io::stdout().lock();
        if self.json {
            let line = serde_json::json!({
                "pid": pid.int() as u64, "start_ns": (start - first) as u64,
                "duration_ns": took as u64, "query": query.text(),
            });
            let _ = writeln!(out, "{line}");
            return;
        }
        if !self.header {
            self.header = true;
            let _ = writeln!(out, "{:<12} {:<7} {:>10} QUERY", "TIME(s)", "PID", "MS");
        }
        let _ = writeln!(
            out,
            "{:<12.6} {:<7} {:>10.3} {}",
            (start - first) as f64 / 1e9,
            pid.int(),
            took as f64 / 1e6,
            query.text()
        );
    }

    fn map(&mut self, _: &str, _: Vec<MapRow>) {}
}
