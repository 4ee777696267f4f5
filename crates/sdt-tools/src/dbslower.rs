//! `sdt dbslower`: PostgreSQL or MySQL/MariaDB queries slower than a
//! threshold, with their duration and text, like BCC's `dbslower`.
//!
//! Both servers have `query__start` (the query's text first) and
//! `query__done` probes, under the providers `postgresql` and `mysql`.
//! Distributions often build MySQL and MariaDB without them (Debian's
//! MariaDB has none; MySQL 8 removed them): sdt then says so in one line,
//! with the command that shows it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use sdt_output::{Cell, Column};

use crate::execute::{fill, ToolJob};
use crate::pairing::UnpairedSpans;
use crate::report::{unsigned, Rows};
use crate::{Common, Tool, Traces};

pub const TOOL: Tool = Tool {
    columns: &[
        Column::json("start_ns"),
        Column::text("TIME(s)").width(12).decimals(6),
        Column::both("pid", "PID").width(7),
        Column::json("duration_ns"),
        Column::text("MS").width(10).right().decimals(3),
        Column::both("query", "QUERY"),
    ],
    summary: "Show PostgreSQL or MySQL/MariaDB queries slower than a threshold, with their duration and text",
    program: include_str!("programs/dbslower.bt"),
    ..Tool::new("dbslower", "dbslower", Traces::Programs)
};

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    let named = options.engine;
    let server = server(common, options)?;
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
        TOOL.program,
        &[
            ("ENGINE", engine.name().to_string()),
            ("START", attach("query__start")),
            ("DONE", attach("query__done")),
            ("THRESHOLD_MS", options.threshold_ms.to_string()),
            (
                "THRESHOLD_NS",
                (options.threshold_ms * 1_000_000).to_string(),
            ),
        ],
    );
    let job = ToolJob {
        tool: &TOOL,
        common,
        program,
        language: None,
        shown: server.display().to_string(),
        reports: None,
    };
    let spans = options.spans.clone().map(|sender| QuerySpans {
        sender,
        system: engine.provider(),
        wall_offset: sdt_otlp::span::wall_offset(),
    });
    let rows = Rows::new(&TOOL, TOOL.columns.to_vec(), move |args, clock| {
        let [pid, start, took, query, tid, _comm] = args else {
            return None;
        };
        if let Some(spans) = &spans {
            let text = query.to_text();
            spans.send(
                pid.as_int(),
                tid.as_int(),
                start.as_int(),
                took.as_int(),
                &text,
            );
        }
        let [start_ns, start_s] = clock.since(start.as_int(), 1e9);
        let took = took.as_int();
        Some(vec![
            start_ns,
            start_s,
            unsigned(pid.as_int()),
            unsigned(took),
            Cell::Float(took as f64 / 1e6),
            Cell::Text(query.to_text()),
        ])
    });
    let rows = rows.slices(|args| {
        let [pid, start, took, query, tid, comm] = args else {
            return None;
        };
        let thread = (pid.as_int(), tid.as_int(), comm.to_text());
        let start = start.as_int();
        Some((thread, start, start + took.as_int(), query.to_text()))
    });
    job.run(rows.pairing(UnpairedSpans::new(
        "@started",
        ("query", "queries"),
        (
            "the query failed (PostgreSQL reports no done then) or its backend ended",
            "queries that began before tracing did",
        ),
    )))
}

/// Slow queries as OpenTelemetry spans.
struct QuerySpans {
    sender: sdt_otlp::SpanSender,
    /// `db.system.name`: `postgresql` or `mysql`.
    system: &'static str,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC`.
    wall_offset: i128,
}

impl QuerySpans {
    fn send(&self, pid: i128, tid: i128, start: i128, took: i128, query: &str) {
        use sdt_otlp::span::Attribute;
        let unix = |t: i128| u64::try_from(t + self.wall_offset).unwrap_or(0);
        self.sender.send(sdt_otlp::Span {
            name: self.system.to_string(),
            start_unix_ns: unix(start),
            end_unix_ns: unix(start + took),
            pid: pid as u32,
            tid: tid as u32,
            attributes: vec![
                ("db.system.name".into(), Attribute::Str(self.system.into())),
                ("db.query.text".into(), Attribute::Str(query.into())),
            ],
        });
    }
}

/// `dbslower`'s own options.
#[derive(Clone, Default)]
pub struct Options {
    /// The server (default: PostgreSQL, or what `exe`, `-p` or `-c`
    /// runs).
    pub engine: Option<Engine>,
    /// Show queries that took at least this many milliseconds.
    pub threshold_ms: u64,
    /// The server program (default: the `-p` process's, the one the `-c`
    /// command runs, or the newest `/usr/lib/postgresql/*/bin/postgres`;
    /// for MySQL, `mariadbd` or `mysqld` in `PATH`).
    pub exe: Option<PathBuf>,
    /// Where each slow query also goes as a span (`--otlp`).
    pub spans: Option<sdt_otlp::SpanSender>,
}

/// A database server's probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Mysql,
}

impl Engine {
    /// The server BCC's `dbslower` names so: `postgres` (or
    /// `postgresql`), `mysql` or `mariadb`.
    pub fn named(name: &str) -> Option<Engine> {
        match name {
            "postgres" | "postgresql" => Some(Engine::Postgres),
            "mysql" | "mariadb" => Some(Engine::Mysql),
            _ => None,
        }
    }

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

/// The server program to trace.
fn server(common: &Common, options: &Options) -> anyhow::Result<PathBuf> {
    if let Some(exe) = &options.exe {
        return Ok(exe.clone());
    }
    if let Some(pid) = common.pid() {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("cannot read the program of process {pid}"))?;
        return Ok(Path::new(&format!("/proc/{pid}/root"))
            .join(exe.to_string_lossy().trim_start_matches('/')));
    }
    if let Some(command) = &common.command {
        // The program the command runs, past `env` and scripts.
        return sdt_job::launch::read(command)?.program.ok_or_else(|| {
            anyhow::anyhow!(
                "cannot tell which program `{command}` runs: name the server with -x PATH"
            )
        });
    }
    if options.engine == Some(Engine::Mysql) {
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
