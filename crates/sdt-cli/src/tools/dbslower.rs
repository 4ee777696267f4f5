//! `sdt dbslower`: PostgreSQL or MySQL/MariaDB queries slower than a
//! threshold, with their duration and text, like BCC's `dbslower`.
//!
//! Both servers have `query__start` (the query's text first) and
//! `query__done` probes, under the providers `postgresql` and `mysql`.
//! Distributions often build MySQL and MariaDB without them (Debian's
//! MariaDB has none; MySQL 8 removed them): sdt then says so in one line,
//! with the command that shows it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::{execute, fill, Prepared, Target, UnpairedSpans, TEXT_LEN};
use crate::pictures::{TimelineArgs, ToolTimeline};

const DBSLOWER: &str = include_str!("dbslower.bt");

/// Show PostgreSQL or MySQL/MariaDB queries slower than a threshold,
/// with their duration and text.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt dbslower                          PostgreSQL queries of 1 ms or more, every server\n  \
    sdt dbslower postgres -m 100 -p \"$(pgrep -o postgres)\"   one server and its backends\n  \
    sdt dbslower mysql -m 1000            MySQL or MariaDB, as BCC's dbslower takes it\n\n\
    A query is timed from query__start to query__done in the thread that\n\
    runs it. The query text is cut at 256 bytes. A query without a done\n\
    (PostgreSQL reports none for a query that fails) is counted, not timed.")]
pub struct DbslowerArgs {
    /// The server: postgres (or postgresql), mysql or mariadb (default:
    /// postgres, or what -x, -p or -c runs).
    #[arg(value_name = "ENGINE", value_parser = ["postgres", "postgresql", "mysql", "mariadb"])]
    engine: Option<String>,

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

    /// The server program (default: the -p process's, the one the -c
    /// command runs, or the newest /usr/lib/postgresql/*/bin/postgres;
    /// for MySQL, mariadbd or mysqld in PATH).
    #[arg(short = 'x', long = "exe", value_name = "PATH")]
    exe: Option<PathBuf>,

    #[command(flatten)]
    timeline: TimelineArgs,
}

/// A database server's probes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    Postgres,
    Mysql,
}

impl Engine {
    fn provider(self) -> &'static str {
        match self {
            Engine::Postgres => "postgresql",
            Engine::Mysql => "mysql",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Engine::Postgres => "PostgreSQL",
            Engine::Mysql => "MySQL/MariaDB",
        }
    }
}

pub fn run(args: DbslowerArgs) -> anyhow::Result<ExitCode> {
    let named = args.engine.as_deref().map(|e| match e {
        "mysql" | "mariadb" => Engine::Mysql,
        _ => Engine::Postgres,
    });
    let server = server(&args, named)?;
    let file = sdt_elf::ElfFile::open(&server)
        .with_context(|| format!("cannot open {}", server.display()))?;
    let probes = file.probes()?;
    let has = |engine: Engine| probes.iter().any(|p| p.provider == engine.provider());
    // Without ENGINE, the server's probes say which it is.
    let engine = named.unwrap_or(if has(Engine::Mysql) {
        Engine::Mysql
    } else {
        Engine::Postgres
    });
    if !has(engine) {
        anyhow::bail!(
            "{} has no {} probes: this {} was built without them ({}); `sdt list {} '{}:*'` shows the probes it has",
            server.display(),
            engine.provider(),
            engine.name(),
            match engine {
                Engine::Postgres => "configure --enable-dtrace",
                Engine::Mysql => "cmake -DENABLE_DTRACE=ON; Debian's MariaDB and MySQL 8 have none",
            },
            server.display(),
            engine.provider()
        );
    }
    let attach = |probe: &str| format!("usdt:{}:{}:{probe}", server.display(), engine.provider());
    let program = fill(
        DBSLOWER,
        &[
            ("ENGINE", engine.name().to_string()),
            ("START", attach("query__start")),
            ("DONE", attach("query__done")),
            ("THRESHOLD_MS", args.threshold_ms.to_string()),
            ("THRESHOLD_NS", (args.threshold_ms * 1_000_000).to_string()),
        ],
    );
    let json = args.target.json;
    let mut table = Queries {
        json,
        first_ns: None,
        header: false,
        timeline: ToolTimeline::new(&args.timeline)?,
        unpaired: UnpairedSpans::new(
            "@started",
            ("query", "queries"),
            (
                "the query failed (PostgreSQL reports no done then) or its backend ended",
                "queries that began before tracing did",
            ),
        ),
    };
    let status = execute(
        &args.target,
        Prepared::Programs(vec![server]),
        &program,
        Box::new(&mut table),
        None,
        TEXT_LEN,
    )?;
    table.unpaired.report(json);
    table.timeline.finish()?;
    Ok(status)
}

/// The server program to trace.
fn server(args: &DbslowerArgs, engine: Option<Engine>) -> anyhow::Result<PathBuf> {
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
        // The program the command runs, past `env` and scripts.
        return super::launch::read(command)?.program.ok_or_else(|| {
            anyhow::anyhow!(
                "cannot tell which program `{command}` runs: name the server with -x PATH"
            )
        });
    }
    if engine == Some(Engine::Mysql) {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = path;
        dirs.push(":/usr/sbin:/usr/libexec:/usr/local/mysql/bin");
        return ["mariadbd", "mysqld"]
            .into_iter()
            .find_map(|name| sdt_elf::find_in_path(name, &dirs))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no MySQL or MariaDB server here (mariadbd or mysqld in PATH, /usr/sbin or /usr/libexec): name it with -x PATH"
                )
            });
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
    /// Each query shown, as a slice named by its text.
    timeline: ToolTimeline,
    unpaired: UnpairedSpans,
}

impl Receiver for &mut Queries {
    fn printf(&mut self, _: u32, args: Vec<Datum>) {
        let [pid, start, took, query, tid, comm] = args.as_slice() else {
            return;
        };
        let (start, took) = (start.int(), took.int());
        let comm = comm.text();
        let thread = (pid.int(), tid.int(), comm.as_str());
        self.timeline
            .span(thread, start, start + took, &query.text());
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

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        self.unpaired.map(name, &rows);
    }
}
