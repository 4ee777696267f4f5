//! OpenTelemetry for sdt: the metrics of running programs and the spans
//! sdt sees (entry/return and start/done pairs) pushed to a collector over
//! OTLP/HTTP with protobuf bodies.
//!
//! - [`encode`]: metric families ([`sdt_output::metrics`], the same ones
//!   `/metrics` serves) and spans as OTLP messages.
//! - [`span`]: which `printf` records of a program are spans, and a sink
//!   that takes them out of the output.
//! - [`pusher`]: the thread that sends, so that a collector that is down
//!   or slow never holds up tracing; bounded, retried, counted.
//!
//! **Why these crates.** The messages are `opentelemetry-proto`'s, the
//! OpenTelemetry project's own types generated from its `.proto` files,
//! with only `prost` for the wire format (no gRPC, no tonic transport):
//! what a collector decodes is exactly what its definitions say. The whole
//! OpenTelemetry SDK is not used: sdt already has the data (cumulative
//! maps, finished spans), and the SDK's instruments, aggregation and
//! async exporters would only copy it again. HTTP is `ureq` without TLS
//! or compression: a small blocking client that suits one pushing thread
//! (collectors usually run as a local agent, `http://127.0.0.1:4318`).

#![forbid(unsafe_code)]

pub mod encode;
pub mod pusher;
pub mod span;

pub use pusher::{PushOptions, Pusher, SpanSender, Stats};
pub use span::{Span, SpanRule, SpanSink, Timing, ToolSpans};
