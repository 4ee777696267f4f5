//! sdt's maps as metrics, for dashboards instead of terminals.
//!
//! What comes in: programs, each run as a job of `sdt-job`, and a
//! [`MapReader`] on each one's maps. What goes out: Prometheus' `/metrics` ([`http`]), and metric
//! families for any other consumer (the OTLP pusher) through
//! [`Source`](sdt_output::metrics::Source).
//!
//! - [`config`]: pragmas (`// sdt: labels @reqs = method, status`) and the
//!   config file beside a program: how its maps are named, which spans it
//!   sends.
//! - [`labels`]: label names read from a map's key expressions.
//! - [`naming`]: every map of a program as a metric, checked.
//! - [`exporter`]: the programs that are up or down, and what a scrape
//!   reads of them, with the series limit and sdt's own health.
//! - [`http`]: the endpoint.
//! - [`fleet`]: one program's metrics and spans while `sdt run` runs it.
//! - [`spans`]: a script's span pragmas as probes whose records become
//!   OTLP spans.
//! - [`service`]: `sdt serve DIR`, a directory of programs reloaded on
//!   SIGHUP and when it changes ([`watch`]); [`serve`], the whole
//!   command: the endpoint, the pusher and the service.
//!
//! [`MapReader`]: sdt_job::MapReader

#![forbid(unsafe_code)]

pub mod config;
pub mod exporter;
pub mod fleet;
pub mod http;
pub mod labels;
pub mod naming;
pub mod program;
pub mod serve;
pub mod service;
pub mod spans;
pub mod watch;
