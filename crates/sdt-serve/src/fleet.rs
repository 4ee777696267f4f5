//! One program, run once (`sdt run --serve ADDR --otlp URL`): its maps on
//! `/metrics` and pushed to a collector, its spans pushed, while it runs.
//!
//! The steps, in the order the run takes them: [`Fleet::compile`] reads
//! the program's pragmas and config file, compiles it (with the blocks of
//! its span pragmas when spans are pushed) and names its maps, so that
//! every mistake is reported before anything is attached; then the
//! endpoint listens and the pusher starts; [`Fleet::sink`] puts the span
//! sink in front of the run's output; [`Fleet::up`] hands the maps over
//! once the probes are attached; [`Fleet::finish`] pushes one last time.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sdt_job::program::Compilation;
use sdt_job::program::Diagnostics;
use sdt_otlp::{PushOptions, Pusher, SpanRule, SpanSink, Stats};
use sdt_output::metrics::Source;
use sdt_output::Sink;

use crate::config::{Config, ConfigError};
use crate::exporter::{Exporter, Running};
use crate::http::MetricsServer;
use crate::naming::Naming;
use crate::program::ProgramFiles;
use crate::spans::compile_with_spans;

/// What to do with a program's metrics and spans.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// Serve `/metrics` here.
    pub serve: Option<SocketAddr>,
    /// Push metrics and spans.
    pub otlp: Option<PushOptions>,
    pub prefix: String,
    pub series_limit: usize,
}

/// Why a program cannot be run this way.
pub enum FleetError {
    /// The script (with what its span pragmas add: `text`) is wrong.
    Script {
        text: String,
        diagnostics: Diagnostics,
    },
    /// A pragma or the config file is wrong.
    Config(ConfigError),
}

/// A program's metrics and spans, while it runs; see the module doc.
pub struct Fleet {
    files: ProgramFiles,
    naming: Naming,
    rules: Vec<SpanRule>,
    exporter: Arc<Exporter>,
    server: Option<MetricsServer>,
    pusher: Option<Pusher>,
    started: Instant,
}

/// How long the end waits for the collector.
const LAST_PUSH: Duration = Duration::from_secs(2);

impl Fleet {
    /// Compiles the program through `compile`, with its span blocks when
    /// spans are pushed, and names its maps. Returns the text compiled
    /// (the script and what its span pragmas add), for later errors.
    pub fn compile(
        options: &FleetOptions,
        files: ProgramFiles,
        compile: &dyn Fn(&str) -> Result<Compilation, Diagnostics>,
        started: Instant,
    ) -> Result<(String, Compilation, Fleet), FleetError> {
        let config = files.config().map_err(FleetError::Config)?;
        let spans_config = if options.otlp.is_some() {
            config.clone()
        } else {
            Config {
                spans: Vec::new(),
                ..config.clone()
            }
        };
        let (text, compilation, rules) =
            compile_with_spans(&files.script.1, &spans_config, compile)
                .map_err(|(text, diagnostics)| FleetError::Script { text, diagnostics })?;
        let naming = files
            .naming(
                &config,
                &compilation.script,
                &compilation.program.maps,
                &options.prefix,
            )
            .map_err(FleetError::Config)?;
        let exporter = Arc::new(Exporter::new(options.series_limit));
        exporter.down(&files.name);
        let fleet = Fleet {
            files,
            naming,
            rules,
            exporter,
            server: None,
            pusher: None,
            started,
        };
        Ok((text, compilation, fleet))
    }

    /// Starts the endpoint and the pusher that `options` ask for.
    pub fn start(&mut self, options: &FleetOptions) -> io::Result<()> {
        let mut sources: Vec<Arc<dyn Source>> = vec![self.exporter.clone()];
        if let Some(push) = &options.otlp {
            let pusher = Pusher::start(push.clone(), Some(self.exporter.clone()))?;
            sources.push(pusher.health());
            self.pusher = Some(pusher);
        }
        if let Some(address) = options.serve {
            self.server = Some(MetricsServer::start(address, Arc::new(sources))?);
        }
        Ok(())
    }

    /// Where `/metrics` is served, once started.
    pub fn address(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(MetricsServer::address)
    }

    /// `sink`, with the program's span records taken out of it and pushed
    /// when spans are pushed.
    pub fn sink<'a>(&self, sink: Box<dyn Sink + 'a>) -> Box<dyn Sink + 'a> {
        match &self.pusher {
            Some(pusher) => Box::new(SpanSink::new(sink, self.rules.clone(), pusher.spans())),
            None => sink,
        }
    }

    /// The probes are attached: the maps, read through `reader`, are
    /// metrics from now on, each series with `labels` too.
    pub fn up(&self, reader: sdt_job::MapReader, probes: usize, labels: Vec<(String, String)>) {
        self.exporter.up(
            &self.files.name,
            Running {
                reader,
                labels,
                naming: self.naming.clone(),
                probes,
                load: self.started.elapsed(),
            },
        );
    }

    /// Stops serving and pushes one last time; what the pusher did, if
    /// there was one.
    pub fn finish(self) -> Option<Stats> {
        drop(self.server);
        self.pusher.map(|p| p.finish(LAST_PUSH))
    }
}
