//! Output: one trait, [`Sink`], receives everything a run produces as
//! [`Event`]s, and each output format is one implementation of it in a
//! file of its own, which handles the events it shows.
//!
//! What comes in: the resolved data of [`model`]: `printf` records, map
//! prints, values, the text of `time()`, `join()`, `system()` and `cat()`,
//! probe hits of `sdt trace`, what was lost, how many probes attached, the
//! summary at the end, and the tools' reports (tables, rows of a stream,
//! notes, log2 histograms, and the headings of BCC's tools' reports).
//! What goes out: bytes on a writer, laid out by
//! the format. A format never asks the traced system anything: the
//! runtime has resolved symbols, names and times before a value gets
//! here, so this crate depends on no other sdt crate, and none of them on
//! a format's internals.
//!
//! Formats: [`text`] (bpftrace's text, and `sdt trace`'s lines) and
//! [`json`] (bpftrace's JSON objects, and `sdt trace`'s NDJSON), and
//! [`folded`] (stacks for flame graphs). A new format is a new file
//! implementing [`Sink`], plus one line in [`FORMATS`].
//!
//! Metrics are read from maps while a program runs rather than written as
//! it goes, so they are no sink: [`metrics`] turns map snapshots into
//! metric families, and [`prometheus`] writes those as a scrape of
//! `/metrics` reads them.
//!
//! Pictures are sinks too, written beside the chosen format rather than
//! instead of it: [`flamegraph`] (an SVG of the stack-keyed maps, written
//! when the run ends) and [`timeline`] (a Chrome Trace Event file of
//! what every thread did, written as it happens). [`tee::Tee`] hands one
//! run to several sinks, and [`Sink::finish`] tells each that the run is
//! over, which a sink that writes its file at the end needs. [`calls`]
//! builds a runtime's call stacks from its entries and returns, for
//! both.

#![forbid(unsafe_code)]

pub mod calls;
pub mod flamegraph;
pub mod folded;
pub mod json;
pub mod metrics;
pub mod model;
pub mod prometheus;
pub mod tee;
pub mod text;
pub mod timeline;

use std::io::{self, Write};

pub use model::{
    Align, Arg, Bucket, Cell, Column, Datum, FailedRead, Frame, Hint, Histogram, Hit, Layout,
    Losses, MapKind, MapPrint, MapRow, MapValue, Note, Printed, Span, Stack, StackStyle, Stamp,
    Stream, Table, TextKind, Thread, TraceSummary,
};

/// Receives what a run produces, in the order it happens: one
/// [`Event`] at a time. A sink handles the events it cares about and
/// ignores the rest; a sink that passes events on (a tee, the folded
/// format's text for what is not a stack) passes each whole.
pub trait Sink {
    /// Something the run produced.
    fn event(&mut self, event: Event<'_>);
    /// Pushes what is buffered to the writer.
    fn flush(&mut self) {}
    /// The run is over: nothing else will come. Called once, last, after
    /// the maps, the losses and the summary. A sink that writes its file
    /// at the end (a flame graph) or must close what it wrote (a
    /// timeline's JSON) does it here; the default flushes. Whatever fails
    /// here shows in [`error`](Sink::error).
    fn finish(&mut self) {
        self.flush();
    }
    /// The first error writing the output (a closed pipe, a full disk);
    /// nothing is written after it.
    fn error(&self) -> Option<&io::Error> {
        None
    }
}

/// What a run produces, in three kinds: what the program printed, what
/// happened to the run, and the language tools' reports.
pub enum Event<'a> {
    // What the program printed.
    /// A `printf`.
    Printf(&'a mut dyn Printed),
    /// `print(value)`.
    Value(&'a Datum),
    /// `print(@m)` where it stands, or a map at the end of the run.
    Map(&'a MapPrint),
    /// `time()`, `join()`, and what `system()` and `cat()` produced.
    Text(TextKind, &'a [u8]),

    // What happened to the run.
    /// The probes are attached: bpftrace's `Attaching N probes...`.
    Attached(usize),
    /// The run has ended and its maps follow.
    MapsFollow,
    /// Probes were attached during the run (in objects mapped after the
    /// start): every probe the run may now report, as `(provider, name)`.
    ProbesAdded(&'a [(&'a str, &'a str)]),
    /// What was lost during the run.
    Lost(&'a Losses),
    /// One hit of a probe traced by `sdt trace`.
    Hit(&'a Hit<'a>),
    /// `sdt trace`'s counts at the end.
    Summary(&'a TraceSummary),
    /// Why the run may show nothing: for JSON, which standard error's
    /// text does not reach.
    Hint(&'a Hint),

    // The language tools' reports.
    /// A report, whole (`sdt calls`, once an interval).
    Table(&'a Table),
    /// One row of a report that streams (`sdt flow`): a cell for each of
    /// the stream's columns.
    Row(&'a Stream, &'a [Cell]),
    /// What a tool says after a stream's last row: what could not be
    /// paired, what was lost.
    Note(&'a Note),
    /// A line of a tool's report that carries no data of its own (that
    /// tracing started, a time, `Detaching...`): text shows it; JSON,
    /// whose objects carry the data, leaves it out.
    Heading(&'a str),
    /// A log2 histogram (BCC's `funclatency`, `argdist -H`).
    Histogram(&'a Histogram),
    /// Something a thread did over a time, paired by a tool that knows
    /// the pair.
    Span(&'a Span<'a>),
    /// Folded stacks that are no map's (a tool's own, built by
    /// [`calls`]), named `name`, their counts counting `counted`.
    Stacks {
        name: &'a str,
        counted: &'a str,
        stacks: &'a [(String, i128)],
    },
}

impl Event<'_> {
    /// The same event, borrowed again, to hand to one sink of several.
    pub fn reborrow(&mut self) -> Event<'_> {
        match self {
            Event::Printf(printf) => Event::Printf(&mut **printf),
            Event::Value(value) => Event::Value(value),
            Event::Map(map) => Event::Map(map),
            Event::Text(kind, text) => Event::Text(*kind, text),
            Event::Attached(probes) => Event::Attached(*probes),
            Event::MapsFollow => Event::MapsFollow,
            Event::ProbesAdded(probes) => Event::ProbesAdded(probes),
            Event::Lost(losses) => Event::Lost(losses),
            Event::Hit(hit) => Event::Hit(hit),
            Event::Summary(summary) => Event::Summary(summary),
            Event::Hint(hint) => Event::Hint(hint),
            Event::Table(table) => Event::Table(table),
            Event::Row(stream, row) => Event::Row(stream, row),
            Event::Note(note) => Event::Note(note),
            Event::Heading(line) => Event::Heading(line),
            Event::Histogram(histogram) => Event::Histogram(histogram),
            Event::Span(span) => Event::Span(span),
            Event::Stacks {
                name,
                counted,
                stacks,
            } => Event::Stacks {
                name,
                counted,
                stacks,
            },
        }
    }
}

/// An output format: its name, as `-f` takes it, and how to make its sink.
#[derive(Clone, Copy)]
pub struct Format {
    pub name: &'static str,
    /// Whether it shows stacks ([`Event::Stacks`], maps keyed by stacks)
    /// and little else: a tool then builds its stacks for it.
    pub shows_stacks: bool,
    make: for<'w> fn(Box<dyn Write + 'w>) -> Box<dyn Sink + 'w>,
}

/// Every format; a new one is one line here.
pub const FORMATS: &[Format] = &[
    Format::TEXT,
    Format::JSON,
    Format {
        shows_stacks: true,
        ..Format::new("folded", |w| Box::new(folded::Folded::new(w)))
    },
];

impl Format {
    pub const TEXT: Format = Format::new("text", |w| Box::new(text::Text::new(w)));
    pub const JSON: Format = Format::new("json", |w| Box::new(json::Json::new(w)));

    const fn new(
        name: &'static str,
        make: for<'w> fn(Box<dyn Write + 'w>) -> Box<dyn Sink + 'w>,
    ) -> Format {
        Format {
            name,
            shows_stacks: false,
            make,
        }
    }

    /// The names of every format, as `-f` takes them.
    pub fn names() -> impl Iterator<Item = &'static str> {
        FORMATS.iter().map(|f| f.name)
    }

    /// The format named `name`.
    pub fn named(name: &str) -> Option<Format> {
        FORMATS.iter().find(|f| f.name == name).copied()
    }

    /// A sink of this format writing to `out`.
    pub fn sink<'w>(self, out: Box<dyn Write + 'w>) -> Box<dyn Sink + 'w> {
        (self.make)(out)
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        self.name == other.name
    }
}

impl Eq for Format {}

impl std::fmt::Debug for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Writes to an output and keeps the first error, after which nothing is
/// written: a sink's way to its writer.
pub(crate) struct Out<'w> {
    writer: Box<dyn Write + 'w>,
    error: Option<io::Error>,
}

impl<'w> Out<'w> {
    pub(crate) fn new(writer: Box<dyn Write + 'w>) -> Out<'w> {
        Out {
            writer,
            error: None,
        }
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.writer.write_all(bytes) {
                self.error = Some(e);
            }
        }
    }

    pub(crate) fn flush(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.writer.flush() {
                self.error = Some(e);
            }
        }
    }

    pub(crate) fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }
}
