//! What a tool's logic looks like: a [`Report`] takes its program's
//! output as data and writes reports into the sink the user chose.
//!
//! Most tools print one row for each `printf` of their program ([`Rows`]):
//! `gc`, `threads`, `dbslower`, `readline`. `flow` pairs entries and
//! returns before it prints; `calls`, `objnew` and `stat` make a table of
//! the maps their program prints.

use sdt_output::{Cell, Column, Datum, Event, MapPrint, Sink, Span, Stream, Thread};

use crate::pairing::{self, UnpairedSpans};
use crate::Tool;

/// What a tool makes of its program's output: the tool's logic, between
/// the runtime and the sink the user chose, into which it writes its
/// reports.
pub(crate) trait Report {
    /// A `printf` of the program, as data.
    fn printf(&mut self, _args: &[Datum], _out: &mut dyn Sink) {}
    /// A map the program printed.
    fn map(&mut self, _map: &MapPrint, _out: &mut dyn Sink) {}
    /// The run has ended: what is left to say.
    fn end(&mut self, _out: &mut dyn Sink) {}
}

/// A number as the tools' JSON has always shown it: as an unsigned
/// 64-bit integer.
pub(crate) fn unsigned(n: i128) -> Cell {
    Cell::Int((n as u64).into())
}

/// Times shown from the first event's, as tools show an event's time:
/// nanoseconds for JSON, and a unit for text.
#[derive(Default)]
pub(crate) struct Clock {
    first_ns: Option<i128>,
}

impl Clock {
    /// The time `ns` as two cells: the nanoseconds since the first time
    /// given (this one, the first time), and those in a unit of
    /// `divisor` nanoseconds.
    pub(crate) fn since(&mut self, ns: i128, divisor: f64) -> [Cell; 2] {
        let since = ns - *self.first_ns.get_or_insert(ns);
        [unsigned(since), Cell::Float(since as f64 / divisor)]
    }
}

/// A report of one row for each `printf`, made by `row` from its
/// arguments (`None`: the event is not shown), and, for the tools that
/// time a span from its start to its end in the kernel, what could not
/// be paired there.
pub(crate) struct Rows<F> {
    stream: Stream,
    clock: Clock,
    spans: Option<UnpairedSpans>,
    row: F,
    /// What a shown row was as a slice on its thread, for a timeline.
    slice: Option<Box<SliceOf>>,
}

/// A row's event as a slice: `((pid, tid, comm), start_ns, end_ns,
/// name)`, from the kernel's `nsecs`.
pub(crate) type Slice = ((i128, i128, String), i128, i128, String);

/// What makes a row's slice from its arguments.
type SliceOf = dyn Fn(&[Datum]) -> Option<Slice>;

impl<F> Rows<F>
where
    F: FnMut(&[Datum], &mut Clock) -> Option<Vec<Cell>>,
{
    /// Rows in `columns` (the tool's, or a variant of them).
    pub(crate) fn new(tool: &Tool, columns: Vec<Column>, row: F) -> Rows<F> {
        Rows {
            stream: Stream {
                name: tool.name,
                columns,
                layout: sdt_output::Layout::default(),
            },
            clock: Clock::default(),
            spans: None,
            row,
            slice: None,
        }
    }

    /// Also gives each row shown to the sink as a span (a timeline's
    /// slice), made by `slice` from the same arguments.
    pub(crate) fn slices(self, slice: impl Fn(&[Datum]) -> Option<Slice> + 'static) -> Rows<F> {
        Rows {
            slice: Some(Box::new(slice)),
            ..self
        }
    }

    /// Also counts the spans the program could not pair, from the maps
    /// its END prints, and says so at the end.
    pub(crate) fn pairing(self, spans: UnpairedSpans) -> Rows<F> {
        Rows {
            spans: Some(spans),
            ..self
        }
    }
}

impl<F> Report for Rows<F>
where
    F: FnMut(&[Datum], &mut Clock) -> Option<Vec<Cell>>,
{
    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        if let Some(row) = (self.row)(args, &mut self.clock) {
            out.event(Event::Row(&self.stream, &row));
            if let Some(((pid, tid, comm), start, end, name)) =
                self.slice.as_ref().and_then(|slice| slice(args))
            {
                out.event(Event::Span(&Span {
                    thread: Thread {
                        pid: pid as u32,
                        tid: tid as u32,
                        comm: comm.as_bytes(),
                    },
                    start_ns: start.max(0) as u64,
                    end_ns: end.max(0) as u64,
                    name: &name,
                    args: &[],
                }));
            }
        }
    }

    fn map(&mut self, map: &MapPrint, _: &mut dyn Sink) {
        if let Some(spans) = &mut self.spans {
            spans.map(map);
        }
    }

    fn end(&mut self, out: &mut dyn Sink) {
        if let Some(spans) = &self.spans {
            pairing::tell(&spans.note(), out);
        }
    }
}
