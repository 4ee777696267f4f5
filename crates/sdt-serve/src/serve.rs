//! `sdt serve DIR` as a whole: the endpoint, the pusher, the service of
//! the directory's programs, until SIGINT or SIGTERM.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sdt_job::Signals;
use sdt_otlp::{PushOptions, Pusher, Stats};
use sdt_output::metrics::Source;

use crate::exporter::Exporter;
use crate::http::MetricsServer;
use crate::service::{Service, ServiceOptions};

/// How long the end waits for the collector.
const LAST_PUSH: Duration = Duration::from_secs(2);

/// What `sdt serve` is asked to do.
pub struct ServeOptions {
    /// The directory of programs.
    pub dir: PathBuf,
    /// Where `/metrics` is served.
    pub listen: SocketAddr,
    /// Series exported per map at most.
    pub series_limit: usize,
    /// Push metrics and spans to a collector.
    pub push: Option<PushOptions>,
    /// Reload when the directory changes, not only on SIGHUP.
    pub watch: bool,
    /// How the programs are compiled, but for their spans' destination,
    /// which the pusher gives.
    pub service: ServiceOptions,
}

/// Serves the programs of the directory until SIGINT or SIGTERM; returns
/// what the pusher did, if there was one. `signals` must have been
/// blocked before any thread started.
pub fn serve(options: ServeOptions, signals: &Signals) -> io::Result<Option<Stats>> {
    if !options.dir.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory of programs",
            options.dir.display()
        )));
    }
    let exporter = Arc::new(Exporter::new(options.series_limit));
    let pusher = options
        .push
        .map(|push| Pusher::start(push, Some(exporter.clone())))
        .transpose()?;
    let mut sources: Vec<Arc<dyn Source>> = vec![exporter.clone()];
    sources.extend(pusher.as_ref().map(Pusher::health));
    let server = MetricsServer::start(options.listen, Arc::new(sources))?;
    eprintln!(
        "sdt serve: {}: metrics at http://{}/metrics",
        options.dir.display(),
        server.address()
    );
    let service = ServiceOptions {
        spans: pusher.as_ref().map(Pusher::spans),
        ..options.service
    };
    Service::new(&options.dir, service, exporter).run_until_stopped(signals, options.watch)?;
    drop(server);
    Ok(pusher.map(|p| p.finish(LAST_PUSH)))
}
