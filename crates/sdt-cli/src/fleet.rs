//! `sdt run --serve`: a program's maps served as Prometheus metrics while
//! it runs. The work is `sdt-serve`'s; this is the command line.

use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use sdt_runtime::run::Runner;
use sdt_script::Compilation;
use sdt_serve::exporter::{Exporter, Running, DEFAULT_SERIES_LIMIT};
use sdt_serve::http::{parse_address, MetricsServer};
use sdt_serve::naming::{Naming, DEFAULT_PREFIX};
use sdt_serve::program::ProgramFiles;

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
