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

use sdt_output::{
    Cell, Datum, Hit, Losses, MapPrint, Note, Printed, Sink, Stream, Table, TextKind, TraceSummary,
};

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
    fn printf(&mut self, printf: &mut dyn Printed) {
        match self.rules.get(&printf.format()) {
            Some(rule) => {
                if let Some(span) = rule.span(&printf.args(), self.wall_offset) {
                    self.spans.send(span);
                }
            }
            None => self.inner.printf(printf),
        }
    }

    fn value(&mut self, value: &Datum) {
        self.inner.value(value)
    }

    fn map(&mut self, map: &MapPrint) {
        self.inner.map(map)
    }

    fn text(&mut self, kind: TextKind, text: &[u8]) {
        self.inner.text(kind, text)
    }

    fn attached(&mut self, probes: usize) {
        self.inner.attached(probes)
    }

    fn maps_follow(&mut self) {
        self.inner.maps_follow()
    }

    fn lost(&mut self, losses: &Losses) {
        self.inner.lost(losses)
    }

    fn hit(&mut self, hit: &Hit<'_>) {
        self.inner.hit(hit)
    }

    fn summary(&mut self, summary: &TraceSummary) {
        self.inner.summary(summary)
    }

    fn table(&mut self, table: &Table) {
        self.inner.table(table)
    }

    fn row(&mut self, stream: &Stream, row: &[Cell]) {
        self.inner.row(stream, row)
    }

    fn note(&mut self, note: &Note) {
        self.inner.note(note)
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
    fn span(&mut self, span: &sdt_output::Span<'_>) {
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

    fn printf(&mut self, _: &mut dyn Printed) {}
    fn value(&mut self, _: &Datum) {}
    fn map(&mut self, _: &MapPrint) {}
    fn text(&mut self, _: TextKind, _: &[u8]) {}
    fn attached(&mut self, _: usize) {}
    fn maps_follow(&mut self) {}
    fn lost(&mut self, _: &Losses) {}
    fn hit(&mut self, _: &Hit<'_>) {}
    fn summary(&mut self, _: &TraceSummary) {}
    fn table(&mut self, _: &Table) {}
    fn row(&mut self, _: &Stream, _: &[Cell]) {}
    fn note(&mut self, _: &Note) {}
    fn flush(&mut self) {}
    fn error(&self) -> Option<&io::Error> {
        None
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
