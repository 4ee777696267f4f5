//! `sdt run --serve/--otlp` (a program's maps as metrics and its spans,
//! while it runs) and `sdt serve DIR` (every program of a directory,
//! always on). The work is `sdt-serve`'s and `sdt-otlp`'s; this is the
//! command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser};
use sdt_otlp::PushOptions;
use sdt_serve::exporter::DEFAULT_SERIES_LIMIT;
use sdt_serve::fleet::FleetOptions;
use sdt_serve::http::parse_address;
use sdt_serve::naming::DEFAULT_PREFIX;
use sdt_serve::serve::ServeOptions;
use sdt_serve::service::ServiceOptions;

/// Options for metrics and OpenTelemetry, shared by `sdt run` and `sdt serve`.
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// Prefix of metric names (a program's `// sdt: prefix = ...` wins).
    #[arg(long, value_name = "PREFIX", default_value = DEFAULT_PREFIX)]
    pub metrics_prefix: String,

    /// Series exported per map at most; keys past it are left out and
    /// counted in sdt_dropped_series_total.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SERIES_LIMIT)]
    pub series_limit: usize,

    /// Push the metrics, and spans (`// sdt: span` pragmas), to an
    /// OpenTelemetry collector over OTLP/HTTP (protobuf): URL is its base,
    /// such as http://127.0.0.1:4318 (/v1/metrics and /v1/traces are
    /// added). A collector that is down or slow never slows tracing.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// Seconds between metric pushes.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10.0,
        requires = "otlp"
    )]
    pub otlp_interval: f64,

    /// The service.name of what is pushed.
    #[arg(long, value_name = "NAME", default_value = "sdt", requires = "otlp")]
    pub service_name: String,
}

impl FleetArgs {
    /// What to do, if anything: `serve` is `--serve`'s address.
    pub fn options(&self, serve: Option<&str>) -> anyhow::Result<Option<FleetOptions>> {
        if serve.is_none() && self.otlp.is_none() {
            return Ok(None);
        }
        Ok(Some(FleetOptions {
            serve: serve
                .map(parse_address)
                .transpose()
                .map_err(anyhow::Error::msg)?,
            otlp: self.push_options()?,
            prefix: self.metrics_prefix.clone(),
            series_limit: self.series_limit,
        }))
    }

    fn push_options(&self) -> anyhow::Result<Option<PushOptions>> {
        self.otlp
            .as_deref()
            .map(|url| push_options(url, self.otlp_interval, &self.service_name))
            .transpose()
    }
}

fn push_options(url: &str, interval: f64, service_name: &str) -> anyhow::Result<PushOptions> {
    anyhow::ensure!(
        url.starts_with("http://"),
        "--otlp {url}: give the collector's http:// address (TLS is left to a local collector)"
    );
    anyhow::ensure!(
        interval.is_finite() && interval >= 0.1,
        "--otlp-interval must be at least 0.1 seconds"
    );
    Ok(PushOptions::new(
        url,
        Duration::from_secs_f64(interval),
        service_name,
    ))
}

/// `--otlp` of a tool that sends spans (no metrics): `sdt dbslower`,
/// and what `calls`, `flow` and `gc` pair (`sdt_otlp::ToolSpans`).
#[derive(Args, Debug, Clone)]
pub struct SpanArgs {
    /// Also send what the tool times (each slow query, collection or call)
    /// as a span to an OpenTelemetry collector over
    /// OTLP/HTTP (protobuf): URL is its base, such as
    /// http://127.0.0.1:4318 (/v1/traces is added). A collector that is
    /// down or slow never slows tracing.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// The service.name of the spans.
    #[arg(long, value_name = "NAME", default_value = "sdt", requires = "otlp")]
    pub service_name: String,
}

impl SpanArgs {
    /// Runs a tool whose pictures are `pictures`, with `--otlp` where to
    /// send spans: what it pairs (a sink beside the pictures sends its
    /// [`Event::Span`](sdt_output::Event::Span)s) unless `own_spans`, or
    /// what it makes itself, through the sender `tool` is given. The
    /// pusher sends what is left at the end and says what it dropped.
    pub fn around(
        &self,
        mut pictures: Vec<Box<dyn sdt_output::Sink>>,
        own_spans: bool,
        tool: impl FnOnce(sdt_tools::Pictures, Option<sdt_otlp::SpanSender>) -> anyhow::Result<ExitCode>,
    ) -> anyhow::Result<ExitCode> {
        let pusher = self.start()?;
        let spans = pusher.as_ref().map(sdt_otlp::Pusher::spans);
        if let (Some(spans), false) = (&spans, own_spans) {
            pictures.push(Box::new(sdt_otlp::ToolSpans::new(spans.clone())));
        }
        let status = tool(sdt_tools::Pictures::new(pictures), spans);
        report_push(pusher.map(|p| p.finish(Duration::from_secs(2))));
        status
    }

    /// The pusher of the spans, when `--otlp` is given.
    fn start(&self) -> anyhow::Result<Option<sdt_otlp::Pusher>> {
        let Some(url) = &self.otlp else {
            return Ok(None);
        };
        // No metrics source: the interval is not used.
        let options = push_options(url, 1.0, &self.service_name)?;
        // The stop signals are blocked before the pushing thread starts,
        // as the tracer blocks them before its own (`Traced::start`), so
        // that no thread of sdt takes Ctrl-C by default and ends sdt
        // before the last records are read.
        drop(sdt_job::Signals::block()?);
        Ok(Some(sdt_otlp::Pusher::start(options, None)?))
    }
}

/// Reports what the pusher did when it dropped something.
pub fn report_push(stats: Option<sdt_otlp::Stats>) {
    if let Some(stats) = stats {
        if stats.spans_dropped > 0 || stats.metrics_dropped > 0 {
            eprintln!(
                "sdt: otlp: {} spans sent, {} dropped; {} metric pushes, {} failed (is the collector up?)",
                stats.spans_sent,
                stats.spans_dropped,
                stats.metrics_pushed + stats.metrics_dropped,
                stats.metrics_dropped
            );
        }
    }
}

const SERVE_HELP: &str = "\
Every *.bt file of DIR is a program, with its optional config file (NAME.conf beside \
NAME.bt). Each runs with its probes attached system-wide by path, so programs started \
later, or restarted, are traced. Their maps are served as one set of Prometheus metrics, \
each series labelled program=\"NAME\".

A program that cannot be read, compiled or attached is served as sdt_up{program=\"NAME\"} 0, \
with the reason in one line on standard error; the others run on. SIGHUP reloads: \
changed, new and failed programs are started (again), removed ones stopped, and the \
others keep running with their counters. A change to DIR reloads too (a file \
written, renamed or removed, a Kubernetes ConfigMap updated), trying again only \
the failed programs whose files changed; --no-watch turns that off. SIGINT or \
SIGTERM stops sdt.

Served programs never run commands: system() is refused. The endpoint serves metrics \
only (GET /metrics); nothing is ever loaded over HTTP.

EXAMPLES:
  sdt serve /etc/sdt                       metrics at http://127.0.0.1:9436/metrics
  sdt serve --listen 0.0.0.0:9436 /etc/sdt reachable from other machines
  sdt serve --otlp http://127.0.0.1:4318 /etc/sdt
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
    fleet: FleetArgs,

    /// Ring-buffer size of each program: a power of two with an optional
    /// K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = crate::parse_size)]
    buffer_size: u32,

    /// Reload on SIGHUP only, not when DIR changes.
    #[arg(long)]
    no_watch: bool,
}

/// `sdt serve DIR`.
pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before any thread starts, so that every thread leaves them to this one.
    let signals = sdt_job::Signals::block()?;
    let options = ServeOptions {
        dir: args.dir,
        listen: parse_address(&args.listen).map_err(anyhow::Error::msg)?,
        series_limit: args.fleet.series_limit,
        push: args.fleet.push_options()?,
        watch: !args.no_watch,
        service: ServiceOptions {
            prefix: args.fleet.metrics_prefix.clone(),
            ring_size: args.buffer_size,
            mechanism: sdt_job::mechanism(None)?,
            spans: None,
        },
    };
    report_push(sdt_serve::serve::serve(options, &signals)?);
    Ok(ExitCode::SUCCESS)
}
