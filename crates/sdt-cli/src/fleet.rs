//! `sdt run --serve` (a program's maps served as Prometheus metrics while
//! it runs) and `sdt serve DIR` (every program of a directory, always on).
//! The work is `sdt-serve`'s; this is the command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser};
use sdt_runtime::run::Runner;
use sdt_script::Compilation;
use sdt_serve::exporter::{Exporter, Running, DEFAULT_SERIES_LIMIT};
use sdt_serve::http::{parse_address, MetricsServer};
use sdt_serve::naming::{Naming, DEFAULT_PREFIX};
use sdt_serve::program::ProgramFiles;
use sdt_serve::service::{Service, ServiceOptions};

const SERVE_HELP: &str = "\
Every *.bt file of DIR is a program, with its optional config file (NAME.conf beside \
NAME.bt). Each runs with its probes attached system-wide by path, so programs started \
later, or restarted, are traced. Their maps are served as one set of Prometheus metrics, \
each series labelled program=\"NAME\".

A program that cannot be read, compiled or attached is served as sdt_up{program=\"NAME\"} 0, \
with the reason in one line on standard error; the others run on. SIGHUP reloads: \
changed, new and failed programs are started (again), removed ones stopped, and the \
others keep running with their counters. SIGINT or SIGTERM stops sdt.

Served programs never run commands: system() is refused. The endpoint serves metrics \
only (GET /metrics); nothing is ever loaded over HTTP.

EXAMPLES:
  sdt serve /etc/sdt                       metrics at http://127.0.0.1:9436/metrics
  sdt serve --listen 0.0.0.0:9436 /etc/sdt reachable from other machines
  kill -HUP \"$(pidof sdt)\"                 reload after editing a program

Tracing needs root, or the capabilities CAP_BPF and CAP_PERFMON (contrib/sdt.service).";

/// Run every program of a directory and serve their maps as metrics.
#[derive(Parser, Debug)]
#[command(name = "sdt serve", after_help = SERVE_HELP)]
pub struct ServeArgs {
    /// The directory of programs (*.bt) and their config files (*.conf).
    #[arg(value_name = "DIR")]
    dir: PathBuf,

    /// Where to serve /metrics: PORT (on loopback) or HOST:PORT.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9436")]
    listen: String,

    #[command(flatten)]
    metrics: MetricsArgs,

    /// Ring-buffer size of each program: a power of two with an optional
    /// K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = crate::parse_size)]
    buffer_size: u32,
}

/// `sdt serve DIR`.
pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before any thread starts, so that every thread leaves them to this one.
    let signals = sdt_proc::Signals::block()?;
    anyhow::ensure!(
        args.dir.is_dir(),
        "{} is not a directory of programs",
        args.dir.display()
    );
    let address = parse_address(&args.listen).map_err(anyhow::Error::msg)?;
    let exporter = Arc::new(Exporter::new(args.metrics.series_limit));
    let server = MetricsServer::start(address, exporter.clone())?;
    eprintln!(
        "sdt serve: {}: metrics at http://{}/metrics",
        args.dir.display(),
        server.address()
    );
    let options = ServiceOptions {
        prefix: args.metrics.metrics_prefix.clone(),
        ring_size: args.buffer_size,
        map_entries: crate::run::map_entries()?,
        mechanism: sdt_trace::mechanism(None)?,
    };
    Service::new(&args.dir, options, exporter).run_until_stopped(&signals)?;
    Ok(ExitCode::SUCCESS)
}

/// Options for serving metrics, shared by `sdt run` and `sdt serve`.
#[derive(Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Prefix of metric names (a program's `// sdt: prefix = ...` wins).
    #[arg(long, value_name = "PREFIX", default_value = DEFAULT_PREFIX)]
    pub metrics_prefix: String,

    /// Series exported per map at most; keys past it are left out and
    /// counted in sdt_dropped_series_total.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SERIES_LIMIT)]
    pub series_limit: usize,
}

/// A program's maps, served while it runs.
pub struct Served {
    exporter: Arc<Exporter>,
    _server: MetricsServer,
    files: ProgramFiles,
    naming: Naming,
    started: Instant,
}

impl Served {
    /// Checks how the program's maps are named (an error points at the
    /// pragma or config line) and starts serving `/metrics` on `address`;
    /// the program shows as down until [`up`](Self::up).
    pub fn start(
        address: &str,
        metrics: &MetricsArgs,
        files: ProgramFiles,
        compilation: &Compilation,
        started: Instant,
    ) -> anyhow::Result<Served> {
        let address = parse_address(address).map_err(anyhow::Error::msg)?;
        let config = files.config().map_err(|e| anyhow::anyhow!("{e}"))?;
        let naming = files
            .naming(
                &config,
                &compilation.script,
                &compilation.program.maps,
                &metrics.metrics_prefix,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let exporter = Arc::new(Exporter::new(metrics.series_limit));
        exporter.down(&files.name);
        let server = MetricsServer::start(address, exporter.clone())?;
        eprintln!(
            "sdt: serving metrics at http://{}/metrics",
            server.address()
        );
        Ok(Served {
            exporter,
            _server: server,
            files,
            naming,
            started,
        })
    }

    /// The program's probes are attached: its maps are metrics now.
    pub fn up(&self, runner: &Runner<'_>, probes: usize) -> anyhow::Result<()> {
        let reader = runner.map_reader()?;
        self.exporter.up(
            &self.files.name,
            Running {
                reader,
                naming: self.naming.clone(),
                probes,
                load: self.started.elapsed(),
            },
        );
        Ok(())
    }
}
