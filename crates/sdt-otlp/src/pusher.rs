//! The pusher: a thread of its own that sends metrics at an interval and
//! spans in batches, so that a collector that is down or slow never
//! holds up tracing.
//!
//! - **Handing over never waits.** Spans go through a bounded channel:
//!   [`SpanSender::send`] puts a span in or, when the channel is full,
//!   drops it and counts it.
//! - **Spans are retried.** A batch that fails (no answer within the
//!   timeout, a refused connection, 429 or 5xx) is sent again, waiting
//!   from half a second, twice as long each time, up to 30 seconds. A
//!   batch the collector rejects for good (another 4xx) is dropped and
//!   counted.
//! - **Memory is bounded.** At most `max_spans` wait, in the channel and
//!   in the batches not yet sent together; past that the oldest go first,
//!   counted.
//! - **Metrics are not retried:** they are cumulative, so the next push
//!   carries everything a failed one had. A failed push is counted.
//! - **The end is bounded.** [`Pusher::finish`] pushes the metrics once
//!   more and sends what spans are left, for at most the time it is given;
//!   what is still unsent then is counted as dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;
use sdt_output::metrics::{Family, Kind, Series, Source, Value};

use crate::encode::{self, Origin};
use crate::span::Span;

/// How and where to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// The collector's base URL (`http://host:4318`); metrics go to
    /// `/v1/metrics` under it, spans to `/v1/traces`.
    pub endpoint: String,
    /// How often metrics are pushed.
    pub interval: Duration,
    pub origin: Origin,
    /// How long one request may take, connecting included.
    pub timeout: Duration,
    /// Spans waiting at most, sent or not.
    pub max_spans: usize,
    /// Spans in one request at most.
    pub batch: usize,
}

impl PushOptions {
    /// Defaults for `endpoint`: metrics every `interval`, 5 s per
    /// request, 8,192 spans waiting, 512 a request.
    pub fn new(endpoint: &str, interval: Duration, service_name: &str) -> PushOptions {
        PushOptions {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            interval,
            origin: Origin {
                service_name: service_name.to_string(),
                host_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_default(),
            },
            timeout: Duration::from_secs(5),
            max_spans: 8192,
            batch: 512,
        }
    }
}

/// What the pusher did, counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub spans_sent: u64,
    /// Spans dropped: the channel or the queue was full, the collector
    /// rejected them, or they were left at the end.
    pub spans_dropped: u64,
    pub metrics_pushed: u64,
    /// Metric pushes that failed.
    pub metrics_dropped: u64,
    /// Requests that failed, retried or not.
    pub failures: u64,
}

#[derive(Default)]
struct Counters {
    spans_sent: AtomicU64,
    spans_dropped: AtomicU64,
    metrics_pushed: AtomicU64,
    metrics_dropped: AtomicU64,
    failures: AtomicU64,
    /// Spans handed over and not yet sent or dropped.
    queued: AtomicU64,
    stop: AtomicBool,
}

impl Counters {
    fn stats(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            spans_sent: get(&self.spans_sent),
            spans_dropped: get(&self.spans_dropped),
            metrics_pushed: get(&self.metrics_pushed),
            metrics_dropped: get(&self.metrics_dropped),
            failures: get(&self.failures),
        }
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` queued spans are gone: sent, or dropped if not `sent`.
    fn gone(&self, n: u64, sent: bool) {
        self.queued.fetch_sub(n, Ordering::Relaxed);
        Counters::add(
            if sent {
                &self.spans_sent
            } else {
                &self.spans_dropped
            },
            n,
        );
    }
}

/// Hands spans to the pusher without waiting; cheap to clone.
#[derive(Clone)]
pub struct SpanSender {
    channel: SyncSender<Span>,
    counters: Arc<Counters>,
}

impl SpanSender {
    /// Queues `span`, or drops and counts it when the queue is full.
    pub fn send(&self, span: Span) {
        match self.channel.try_send(span) {
            Ok(()) => Counters::add(&self.counters.queued, 1),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                Counters::add(&self.counters.spans_dropped, 1);
            }
        }
    }
}

/// The pushing thread; see the module doc.
pub struct Pusher {
    sender: SpanSender,
    counters: Arc<Counters>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Pusher {
    /// Starts pushing `metrics` (if any) every interval, and the spans
    /// given to [`spans`](Self::spans).
    pub fn start(
        options: PushOptions,
        metrics: Option<Arc<dyn Source>>,
    ) -> std::io::Result<Pusher> {
        let counters = Arc::new(Counters::default());
        let (channel, spans) = mpsc::sync_channel(options.max_spans.max(1));
        let (finished, done) = mpsc::sync_channel(1);
        let worker = Worker {
            agent: ureq::Agent::config_builder()
                .timeout_global(Some(options.timeout))
                .http_status_as_error(false)
                .build()
                .into(),
            start_ns: unix_ns(),
            options,
            metrics,
            spans,
            queue: VecDeque::new(),
            counters: Arc::clone(&counters),
            ids: Ids::new(),
        };
        let thread = std::thread::Builder::new()
            .name("sdt-otlp".into())
            .spawn(move || {
                worker.run();
                let _ = finished.send(());
            })?;
        Ok(Pusher {
            sender: SpanSender {
                channel,
                counters: Arc::clone(&counters),
            },
            counters,
            done,
            thread: Some(thread),
        })
    }

    /// Where spans go.
    pub fn spans(&self) -> SpanSender {
        self.sender.clone()
    }

    pub fn stats(&self) -> Stats {
        self.counters.stats()
    }

    /// The pusher's own counts as metric families, for `/metrics`.
    pub fn health(&self) -> Arc<dyn Source> {
        Arc::new(Health(Arc::clone(&self.counters)))
    }

    /// Pushes the metrics once more and sends the spans left, waiting at
    /// most `within`; returns what was done in all. Spans still unsent
    /// then are counted as dropped, and the thread is left to end alone.
    pub fn finish(mut self, within: Duration) -> Stats {
        self.counters.stop.store(true, Ordering::Relaxed);
        match self.done.recv_timeout(within) {
            Ok(()) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
            }
            Err(_) => {
                // Stuck on a collector: what it holds will not be sent.
                let mut stats = self.counters.stats();
                stats.spans_dropped += self.counters.queued.load(Ordering::Relaxed);
                return stats;
            }
        }
        self.counters.stats()
    }
}

/// The thread's state.
struct Worker {
    agent: ureq::Agent,
    options: PushOptions,
    metrics: Option<Arc<dyn Source>>,
    spans: Receiver<Span>,
    /// Batches not yet sent, oldest first.
    queue: VecDeque<Span>,
    counters: Arc<Counters>,
    start_ns: u64,
    ids: Ids,
}

/// The first wait after a failure, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(30));

/// Spans wait at most this long for a fuller batch.
const LINGER: Duration = Duration::from_millis(500);

impl Worker {
    fn run(mut self) {
        let mut next_metrics = Instant::now() + self.options.interval;
        let mut next_spans = Instant::now() + LINGER;
        let mut backoff = BACKOFF.0;
        let mut retry_at: Option<Instant> = None;
        loop {
            let stop = self.counters.stop.load(Ordering::Relaxed);
            if stop {
                break;
            }
            let wake = [Some(next_metrics), Some(next_spans), retry_at]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(next_metrics);
            let wait = wake
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match self.spans.recv_timeout(wait) {
                Ok(span) => self.enqueue(span),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {}
            }
            self.drain_channel();
            let now = Instant::now();
            if now >= next_metrics {
                self.push_metrics();
                next_metrics = now + self.options.interval;
            }
            let full = self.queue.len() >= self.options.batch;
            let due = retry_at.map_or(full || now >= next_spans, |at| now >= at);
            if due && !self.queue.is_empty() {
                if self.send_batch() {
                    retry_at = None;
                    backoff = BACKOFF.0;
                } else {
                    retry_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(BACKOFF.1);
                }
            }
            if now >= next_spans {
                next_spans = now + LINGER;
            }
        }
        // The end: metrics once more, then the spans, while they go.
        self.push_metrics();
        self.drain_channel();
        while !self.queue.is_empty() && self.send_batch() {}
        self.counters.gone(self.queue.len() as u64, false);
    }

    fn drain_channel(&mut self) {
        while let Ok(span) = self.spans.try_recv() {
            self.enqueue(span);
        }
    }

    /// Queues a span, dropping the oldest past the bound.
    fn enqueue(&mut self, span: Span) {
        if self.queue.len() >= self.options.max_spans {
            self.queue.pop_front();
            self.counters.gone(1, false);
        }
        self.queue.push_back(span);
    }

    fn push_metrics(&mut self) {
        let Some(source) = &self.metrics else {
            return;
        };
        let families = source.families();
        let request = encode::metrics(&families, &self.options.origin, self.start_ns, unix_ns());
        match self.post("/v1/metrics", request.encode_to_vec()) {
            Outcome::Sent => Counters::add(&self.counters.metrics_pushed, 1),
            Outcome::Retry | Outcome::Rejected => Counters::add(&self.counters.metrics_dropped, 1),
        }
    }

    /// Sends the oldest batch; `false` if it should be tried again.
    fn send_batch(&mut self) -> bool {
        let n = self.queue.len().min(self.options.batch);
        let batch: Vec<Span> = self.queue.range(..n).cloned().collect();
        let ids = &mut self.ids;
        let request = encode::spans(&batch, &self.options.origin, || ids.next());
        match self.post("/v1/traces", request.encode_to_vec()) {
            outcome @ (Outcome::Sent | Outcome::Rejected) => {
                self.queue.drain(..n);
                self.counters
                    .gone(n as u64, matches!(outcome, Outcome::Sent));
                true
            }
            Outcome::Retry => false,
        }
    }

    fn post(&self, path: &str, body: Vec<u8>) -> Outcome {
        let url = format!("{}{path}", self.options.endpoint);
        let result = self
            .agent
            .post(&url)
            .header("Content-Type", "application/x-protobuf")
            .send(&body[..]);
        let outcome = match result {
            Ok(response) => match response.status().as_u16() {
                200..=299 => Outcome::Sent,
                408 | 429 | 500..=599 => Outcome::Retry,
                _ => Outcome::Rejected,
            },
            Err(_) => Outcome::Retry,
        };
        if !matches!(outcome, Outcome::Sent) {
            Counters::add(&self.counters.failures, 1);
        }
        outcome
    }
}

enum Outcome {
    Sent,
    /// The collector could not take it now.
    Retry,
    /// The collector will never take it.
    Rejected,
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Trace and span ids: unique, not secret (they name spans, they guard
/// nothing), so SplitMix64 seeded from the clock, the process and the
/// standard library's per-process random hash keys does, without a
/// random-number crate.
struct Ids(u64);

impl Ids {
    fn new() -> Ids {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(unix_ns());
        hasher.write_u32(std::process::id());
        Ids(hasher.finish())
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next(&mut self) -> ([u8; 16], [u8; 8]) {
        let mut trace = [0; 16];
        trace[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        trace[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        (trace, self.next_u64().to_le_bytes())
    }
}

/// The pusher's counts as metrics.
struct Health(Arc<Counters>);

impl Source for Health {
    fn families(&self) -> Vec<Family> {
        let stats = self.0.stats();
        let counter = |name: &str, help: &str, n: u64| {
            Family::new(
                name,
                help,
                Kind::Counter,
                vec![Series {
                    labels: Vec::new(),
                    value: Value::Number(i128::from(n)),
                }],
            )
        };
        vec![
            counter(
                "sdt_otlp_spans_dropped",
                "Spans not sent: the queue was full, the collector rejected them, or they were left at the end",
                stats.spans_dropped,
            ),
            counter(
                "sdt_otlp_metrics_dropped",
                "Metric pushes that failed (the next push carries their values)",
                stats.metrics_dropped,
            ),
            counter(
                "sdt_otlp_export_failures",
                "OTLP requests that failed, retried or not",
                stats.failures,
            ),
        ]
    }
}
