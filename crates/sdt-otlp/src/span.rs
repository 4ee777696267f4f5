//! Spans: what sdt sees as a duration (an entry and its return, a start
//! and its done), sent to a collector.
//!
//! Programs do not send spans themselves: they `printf` a record whose
//! arguments hold the span's times, thread and attributes (a tool's
//! program does already, and a script's `// sdt: span` pragma adds such a
//! probe pair). A [`SpanRule`] says which `printf` is a span and which
//! argument is what, and [`SpanSink`] sits in front of the run's own sink:
//! the records a rule names become spans handed to the pusher, without
//! waiting; everything else goes on to the output as before.
//!
//! The language tools pair entries with returns themselves and hand each
//! pair to their sinks as an [`sdt_output::Span`] (a timeline draws it as
//! a slice); [`ToolSpans`] is the sink beside theirs that sends each as a
//! span.

use std::collections::HashMap;
use std::io;

use sdt_output::{Datum, Event, Sink};

use crate::pusher::SpanSender;

/// A finished span.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub name: String,
    /// Nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub attributes: Vec<(String, Attribute)>,
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attribute {
    Int(i64),
    Str(String),
}

impl Attribute {
    fn of(datum: &Datum) -> Attribute {
        match datum {
            Datum::Int { .. } => Attribute::Int(datum.as_int() as i64),
            other => Attribute::Str(other.to_text()),
        }
    }
}

/// Where a span's times are among a record's arguments, all
/// `CLOCK_MONOTONIC` nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Its start and its end.
    StartEnd { start: usize, end: usize },
    /// Its end and how long it took.
    EndDuration { end: usize, duration: usize },
}

/// Which `printf` records are spans, and how to read one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanRule {
    /// The `printf`'s format, by its index in the program.
    pub format: u32,
    pub name: String,
    pub timing: Timing,
    /// The arguments that hold the process and the thread.
    pub pid: usize,
    pub tid: usize,
    /// Attribute names and the arguments that hold them.
    pub attributes: Vec<(String, usize)>,
}

impl SpanRule {
    /// The span a record with arguments `args` stands for; `None` when a
    /// time is missing. `wall_offset` turns `CLOCK_MONOTONIC` into Unix
    /// time.
    pub fn span(&self, args: &[Datum], wall_offset: i128) -> Option<Span> {
        let ns = |i: usize| args.get(i).map(Datum::as_int);
        let (start, end) = match self.timing {
            Timing::StartEnd { start, end } => (ns(start)?, ns(end)?),
            Timing::EndDuration { end, duration } => {
                let end = ns(end)?;
                (end - ns(duration)?, end)
            }
        };
        let unix = |t: i128| u64::try_from(t + wall_offset).unwrap_or(0);
        Some(Span {
            name: self.name.clone(),
            start_unix_ns: unix(start),
            end_unix_ns: unix(end.max(start)),
            pid: ns(self.pid).unwrap_or(0) as u32,
            tid: ns(self.tid).unwrap_or(0) as u32,
            attributes: self
                .attributes
                .iter()
                .filter_map(|(name, i)| Some((name.clone(), Attribute::of(args.get(*i)?))))
                .collect(),
        })
    }
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC`, now.
pub fn wall_offset() -> i128 {
    use rustix::time::{clock_gettime, ClockId};
    let ns =
        |t: rustix::time::Timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    ns(clock_gettime(ClockId::Realtime)) - ns(clock_gettime(ClockId::Monotonic))
}

/// A sink that turns the records its rules name into spans and passes
/// everything else to `inner`.
pub struct SpanSink<'a> {
    inner: Box<dyn Sink + 'a>,
    rules: HashMap<u32, SpanRule>,
    spans: SpanSender,
    wall_offset: i128,
}

impl<'a> SpanSink<'a> {
    pub fn new(inner: Box<dyn Sink + 'a>, rules: Vec<SpanRule>, spans: SpanSender) -> SpanSink<'a> {
        SpanSink {
            inner,
            rules: rules.into_iter().map(|r| (r.format, r)).collect(),
            spans,
            wall_offset: wall_offset(),
        }
    }
}

impl Sink for SpanSink<'_> {
    fn event(&mut self, mut event: Event<'_>) {
        if let Event::Printf(printf) = &mut event {
            if let Some(rule) = self.rules.get(&printf.format()) {
                if let Some(span) = rule.span(&printf.args(), self.wall_offset) {
                    self.spans.send(span);
                }
                return;
            }
        }
        self.inner.event(event);
    }

    fn flush(&mut self) {
        self.inner.flush()
    }

    fn error(&self) -> Option<&io::Error> {
        self.inner.error()
    }
}

/// A sink that sends what a tool paired (`Sink::span`) as spans, and
/// ignores the rest, which the tool's own output shows.
pub struct ToolSpans {
    spans: SpanSender,
    wall_offset: i128,
}

impl ToolSpans {
    pub fn new(spans: SpanSender) -> ToolSpans {
        ToolSpans {
            spans,
            wall_offset: wall_offset(),
        }
    }
}

impl Sink for ToolSpans {
    fn event(&mut self, event: Event<'_>) {
        let Event::Span(span) = event else {
            return;
        };
        let unix = |t: u64| u64::try_from(i128::from(t) + self.wall_offset).unwrap_or(0);
        self.spans.send(Span {
            name: span.name.to_string(),
            start_unix_ns: unix(span.start_ns),
            end_unix_ns: unix(span.end_ns),
            pid: span.thread.pid,
            tid: span.thread.tid,
            attributes: span
                .args
                .iter()
                .map(|(name, datum)| (name.to_string(), Attribute::of(datum)))
                .collect(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_becomes_a_span() {
        let rule = SpanRule {
            format: 3,
            name: "query".into(),
            timing: Timing::StartEnd { start: 0, end: 1 },
            pid: 2,
            tid: 3,
            attributes: vec![("text".into(), 4), ("rows".into(), 5)],
        };
        let args = [
            Datum::int(1_000),
            Datum::int(5_000),
            Datum::int(42),
            Datum::int(43),
            Datum::Str(b"select 1".to_vec()),
            Datum::int(7),
        ];
        let span = rule.span(&args, 10).unwrap();
        assert_eq!(
            span,
            Span {
                name: "query".into(),
                start_unix_ns: 1_010,
                end_unix_ns: 5_010,
                pid: 42,
                tid: 43,
                attributes: vec![
                    ("text".into(), Attribute::Str("select 1".into())),
                    ("rows".into(), Attribute::Int(7)),
                ],
            }
        );
        let by_duration = SpanRule {
            timing: Timing::EndDuration {
                end: 1,
                duration: 0,
            },
            ..rule
        };
        let span = by_duration.span(&args, 0).unwrap();
        assert_eq!((span.start_unix_ns, span.end_unix_ns), (4_000, 5_000));
        assert_eq!(by_duration.span(&args[..1], 0), None, "no end time");
    }
}
