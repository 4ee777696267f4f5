//! Timelines: what every thread did, in the Chrome Trace Event format
//! (JSON), which Perfetto UI, `chrome://tracing` and speedscope open.
//!
//! One track per thread, named `comm (tid)`, under its process, named
//! `comm (pid)` after its main thread, or else the first of its threads
//! seen (process names are written at the end, when that is known). What goes on them:
//!
//! - **A probe hit** (`sdt trace`): an instant event named
//!   `provider:name`, with the hit's arguments (`arg0`, ...).
//! - **A pair of hits** (`sdt trace`): a complete event (a slice) from
//!   the opening hit to the closing one, when both probes are traced
//!   ([`Timeline::pairing`]). Two probe names pair when they are the
//!   same stem, the same separator (`__`, `-`, `_` or none) and then an
//!   opening and a closing word: `entry` with `return` or `exit`; `start`
//!   with `done`, `end` or `stop`; `begin` with `end` (letter case
//!   aside): `function__entry`/`function__return`,
//!   `query-start`/`query-done`, `gc_begin`/`gc_end`, `Xstart`/`Xdone`.
//!   Each thread keeps a stack of its open slices, so nested calls pair
//!   correctly. A closing hit closes the nearest open slice of its pair
//!   whose string arguments (those read with `-s`) are the same as its
//!   own, where both have some; the open slices above that one never
//!   closed. What does not pair (a closing hit with nothing open, an
//!   opening hit never closed, one still open at the end) is kept as an
//!   instant event with an `unpaired` argument, counted, and reported
//!   when the run ends, never dropped silently. A slice is named after
//!   its stem, with the opening hit's strings: `python:function(fib.py,
//!   fib)`; its arguments are the opening's and the closing's.
//! - **A `printf`** (`sdt run`, compiled with its stamp): an instant
//!   event named after the line, on the thread that printed it.
//! - **A span** a tool paired itself ([`Sink::span`]): a slice.
//!
//! Times are the kernel's, taken when the probe fired, in the one global
//! order of the ring buffer, never the time the record was read; the
//! file gives them in microseconds with three decimals, so that they are
//! exact to the nanosecond. Events are written as they come, a slice
//! when it closes; viewers sort them.
//!
//! **Size.** After [`DEFAULT_LIMIT`] events (or the limit given), nothing
//! more is added (but the names of the processes seen, at the end): that is said at once on the notes writer (standard
//! error), and the count of what was left out when the run ends. The
//! file is closed properly either way.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Write};

use crate::json::{self, lossy_string};
use crate::model::{Arg, Hit, Printed, Span, Thread};
use crate::{Event, Out, Sink};

/// Events a timeline holds unless told otherwise: about 150 MB of JSON.
pub const DEFAULT_LIMIT: u64 = 1_000_000;

/// Open slices one thread keeps: deeper than this, the oldest is given
/// up as never closed (a probe pair whose closing side never fires would
/// otherwise grow without bound).
const MAX_OPEN: usize = 10_000;

/// Opening words and the words that close them.
const WORDS: &[(&str, &[&str])] = &[
    ("entry", &["return", "exit"]),
    ("start", &["done", "end", "stop"]),
    ("begin", &["end"]),
];

/// Separators between a probe name's stem and its word, longest first
/// so that `a__start` is `a` and `__`, not `a_` and `_`.
const SEPARATORS: &[&str] = &["__", "-", "_", ""];

/// Why an event is shown as an instant although it belongs to a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unpaired {
    /// A closing hit with no open slice of its pair.
    CloseWithoutOpen,
    /// An opening hit that a later closing hit went past.
    OpenWithoutClose,
    /// An opening hit still open when the run ended.
    OpenAtEnd,
}

impl Unpaired {
    fn words(self) -> &'static str {
        match self {
            Unpaired::CloseWithoutOpen => "closing without an opening",
            Unpaired::OpenWithoutClose => "opening never closed",
            Unpaired::OpenAtEnd => "still open at the end",
        }
    }
}

/// A probe's part in a pair.
#[derive(Clone, Debug)]
struct Boundary {
    /// Which pair.
    pair: usize,
    opens: bool,
    /// The slice's name: `provider:stem`.
    slice: String,
}

/// An opening hit waiting for its closing one.
struct Open {
    pair: usize,
    time_ns: u64,
    pid: u32,
    comm: Vec<u8>,
    /// `provider:name`, for when it stays an instant.
    probe: String,
    slice: String,
    /// Its arguments as a JSON object.
    args: Vec<u8>,
    /// Its string arguments, which a closing hit must match.
    strings: Vec<Vec<u8>>,
}

/// The timeline sink.
pub struct Timeline<'w> {
    out: Out<'w>,
    /// Where the timeline says it is full, and what it could not pair.
    notes: Box<dyn Write + 'w>,
    /// The file's name, for those notes.
    name: String,
    limit: u64,
    /// Events written, but the names of processes.
    written: u64,
    left_out: u64,
    /// Whether an event was written (the next needs a comma).
    any: bool,
    /// Probes that open or close a slice, by provider and name.
    pairs: HashMap<String, HashMap<String, Boundary>>,
    /// Each thread's open slices, innermost last.
    open: HashMap<u32, Vec<Open>>,
    unpaired: BTreeMap<(String, Unpaired), u64>,
    threads: HashSet<u32>,
    /// Each process seen: a name, and whether it is its main thread's.
    processes: BTreeMap<u32, (Vec<u8>, bool)>,
    finished: bool,
    /// The output's first error, naming the file.
    failed: Option<io::Error>,
    line: Vec<u8>,
}

impl<'w> Timeline<'w> {
    /// A timeline written to `out`, which `name` names in what it says on
    /// `notes`.
    pub fn new(out: Box<dyn Write + 'w>, name: &str, notes: Box<dyn Write + 'w>) -> Timeline<'w> {
        let mut out = Out::new(out);
        out.write(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        Timeline {
            out,
            notes,
            name: name.to_string(),
            limit: DEFAULT_LIMIT,
            written: 0,
            left_out: 0,
            any: false,
            pairs: HashMap::new(),
            open: HashMap::new(),
            unpaired: BTreeMap::new(),
            threads: HashSet::new(),
            processes: BTreeMap::new(),
            finished: false,
            failed: None,
            line: Vec::with_capacity(512),
        }
    }

    /// Holds at most `events` events.
    pub fn limit(mut self, events: u64) -> Timeline<'w> {
        self.limit = events;
        self
    }

    /// Pairs the hits of these probes (`(provider, name)`, every probe
    /// the run may report) into slices where their names pair.
    pub fn pairing<'p>(mut self, probes: impl IntoIterator<Item = (&'p str, &'p str)>) -> Self {
        let probes: Vec<(&str, &str)> = probes.into_iter().collect();
        self.pair(&probes);
        self
    }

    /// Adds the pairs among `probes` not known yet.
    fn pair(&mut self, probes: &[(&str, &str)]) {
        for &(provider, name) in probes {
            let Some((stem, separator, word)) = split(name) else {
                continue;
            };
            let Some((_, closers)) = WORDS.iter().find(|(open, _)| *open == word) else {
                continue;
            };
            let closing = closers.iter().find_map(|closer| {
                let wanted = format!("{stem}{separator}{closer}");
                probes
                    .iter()
                    .find(|(p, n)| *p == provider && n.eq_ignore_ascii_case(&wanted))
                    .map(|(_, n)| *n)
            });
            let Some(closing) = closing else { continue };
            let known = self.pairs.entry(provider.to_string()).or_default();
            if known.contains_key(closing) || known.contains_key(name) {
                continue;
            }
            // Each pair adds two probes.
            let pair = self.pairs.values().map(HashMap::len).sum::<usize>() / 2;
            let slice = format!("{provider}:{stem}");
            let known = self.pairs.entry(provider.to_string()).or_default();
            for (probe, opens) in [(name, true), (closing, false)] {
                let boundary = Boundary {
                    pair,
                    opens,
                    slice: slice.clone(),
                };
                known.insert(probe.to_string(), boundary);
            }
        }
    }

    /// Whether another event fits; counts it as left out if not.
    fn room(&mut self) -> bool {
        if self.written < self.limit {
            return true;
        }
        if self.left_out == 0 {
            let _ = writeln!(
                self.notes,
                "sdt: the timeline {} has reached its limit of {} events: later events are left out",
                self.name, self.limit
            );
        }
        self.left_out += 1;
        false
    }

    /// Writes the event in `self.line`.
    fn emit(&mut self) {
        self.write_line();
        self.written += 1;
    }

    /// Writes the event in `self.line` without counting it.
    fn write_line(&mut self) {
        if std::mem::replace(&mut self.any, true) {
            self.out.write(b",\n");
        }
        self.out.write(&self.line);
        self.note_failure();
    }

    /// Keeps the output's first error, with the file's name.
    fn note_failure(&mut self) {
        if self.failed.is_none() {
            if let Some(e) = self.out.error() {
                self.failed = Some(io::Error::new(e.kind(), format!("{}: {e}", self.name)));
            }
        }
    }

    /// Names the thread's track the first time, and remembers a name for
    /// its process: its main thread's, else the first thread's seen.
    fn meet(&mut self, thread: Thread<'_>) {
        if !self.threads.contains(&thread.tid) && self.room() {
            self.threads.insert(thread.tid);
            self.metadata("thread_name", thread, thread.tid);
            self.emit();
        }
        let main = thread.tid == thread.pid;
        match self.processes.get_mut(&thread.pid) {
            Some(named) if main && !named.1 => *named = (thread.comm.to_vec(), true),
            Some(_) => {}
            None => {
                self.processes
                    .insert(thread.pid, (thread.comm.to_vec(), main));
            }
        }
    }

    /// A `process_name` or `thread_name` event: `comm (id)`.
    fn metadata(&mut self, what: &str, thread: Thread<'_>, id: u32) {
        let mut name = thread.comm.to_vec();
        name.extend_from_slice(format!(" ({id})").as_bytes());
        self.line.clear();
        self.line.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"");
        self.line.extend_from_slice(what.as_bytes());
        self.line.push(b'"');
        ids(&mut self.line, thread.pid, thread.tid);
        self.line.extend_from_slice(b",\"args\":{\"name\":");
        lossy_string(&mut self.line, &name);
        self.line.extend_from_slice(b"}}");
    }

    /// An instant event; `args` is a JSON object's members, or empty.
    fn instant(
        &mut self,
        name: &[u8],
        category: &str,
        time_ns: u64,
        thread: Thread<'_>,
        args: &[u8],
    ) {
        self.meet(thread);
        if !self.room() {
            return;
        }
        self.line.clear();
        self.line
            .extend_from_slice(b"{\"ph\":\"i\",\"s\":\"t\",\"name\":");
        lossy_string(&mut self.line, name);
        self.line.extend_from_slice(b",\"cat\":");
        lossy_string(&mut self.line, category.as_bytes());
        self.line.extend_from_slice(b",\"ts\":");
        micros(&mut self.line, time_ns);
        ids(&mut self.line, thread.pid, thread.tid);
        self.line.extend_from_slice(b",\"args\":{");
        self.line.extend_from_slice(args);
        self.line.extend_from_slice(b"}}");
        self.emit();
    }

    /// A complete event: a slice from `start_ns` to `end_ns`.
    fn slice(&mut self, name: &[u8], start_ns: u64, end_ns: u64, thread: Thread<'_>, args: &[u8]) {
        self.meet(thread);
        if !self.room() {
            return;
        }
        self.line.clear();
        self.line.extend_from_slice(b"{\"ph\":\"X\",\"name\":");
        lossy_string(&mut self.line, name);
        self.line.extend_from_slice(b",\"cat\":\"sdt\",\"ts\":");
        micros(&mut self.line, start_ns);
        self.line.extend_from_slice(b",\"dur\":");
        micros(&mut self.line, end_ns.saturating_sub(start_ns));
        ids(&mut self.line, thread.pid, thread.tid);
        self.line.extend_from_slice(b",\"args\":{");
        self.line.extend_from_slice(args);
        self.line.extend_from_slice(b"}}");
        self.emit();
    }

    /// An opening hit that stays an instant, and why.
    fn give_up(&mut self, open: Open, tid: u32, why: Unpaired) {
        *self.unpaired.entry((open.probe.clone(), why)).or_default() += 1;
        let mut args = open.args;
        unpaired_arg(&mut args, why);
        let thread = Thread {
            pid: open.pid,
            tid,
            comm: &open.comm,
        };
        let category = open.probe.split(':').next().unwrap_or_default().to_string();
        self.instant(
            open.probe.as_bytes(),
            &category,
            open.time_ns,
            thread,
            &args,
        );
    }

    fn close(&mut self, hit: &Hit<'_>, pair: usize, args: Vec<u8>) {
        let strings = strings(hit);
        let stack = self.open.entry(hit.tid).or_default();
        let matched = stack.iter().rposition(|o| {
            o.pair == pair && (o.strings.is_empty() || strings.is_empty() || o.strings == strings)
        });
        let Some(at) = matched else {
            let probe = format!("{}:{}", hit.provider, hit.name);
            *self
                .unpaired
                .entry((probe.clone(), Unpaired::CloseWithoutOpen))
                .or_default() += 1;
            let mut args = args;
            unpaired_arg(&mut args, Unpaired::CloseWithoutOpen);
            self.instant(
                probe.as_bytes(),
                hit.provider,
                hit.time_ns,
                hit.thread(),
                &args,
            );
            return;
        };
        let mut above = stack.split_off(at);
        let open = above.remove(0);
        for never_closed in above {
            self.give_up(never_closed, hit.tid, Unpaired::OpenWithoutClose);
        }
        let mut name = open.slice.clone().into_bytes();
        if !open.strings.is_empty() {
            name.push(b'(');
            for (i, s) in open.strings.iter().enumerate() {
                if i > 0 {
                    name.extend_from_slice(b", ");
                }
                name.extend_from_slice(s);
            }
            name.push(b')');
        }
        let mut both = b"\"entry\":{".to_vec();
        both.extend_from_slice(&open.args);
        both.extend_from_slice(b"},\"return\":{");
        both.extend_from_slice(&args);
        both.push(b'}');
        self.slice(&name, open.time_ns, hit.time_ns, hit.thread(), &both);
    }
}

/// A probe name's stem, separator and opening or closing word.
fn split(name: &str) -> Option<(&str, &'static str, &'static str)> {
    let words = WORDS
        .iter()
        .flat_map(|(open, closers)| std::iter::once(open).chain(closers.iter()));
    for separator in SEPARATORS {
        for word in words.clone() {
            let suffix = separator.len() + word.len();
            if name.len() <= suffix || !name.is_char_boundary(name.len() - suffix) {
                continue;
            }
            let (stem, end) = name.split_at(name.len() - suffix);
            if end.starts_with(separator) && end[separator.len()..].eq_ignore_ascii_case(word) {
                return Some((stem, separator, word));
            }
        }
    }
    None
}

/// `,"pid":P,"tid":T`.
fn ids(line: &mut Vec<u8>, pid: u32, tid: u32) {
    let mut num = itoa::Buffer::new();
    line.extend_from_slice(b",\"pid\":");
    line.extend_from_slice(num.format(pid).as_bytes());
    line.extend_from_slice(b",\"tid\":");
    line.extend_from_slice(num.format(tid).as_bytes());
}

/// Nanoseconds as microseconds with three decimals, exactly.
fn micros(line: &mut Vec<u8>, ns: u64) {
    let mut num = itoa::Buffer::new();
    line.extend_from_slice(num.format(ns / 1000).as_bytes());
    let fraction = ns % 1000;
    line.push(b'.');
    line.push(b'0' + (fraction / 100) as u8);
    line.push(b'0' + (fraction / 10 % 10) as u8);
    line.push(b'0' + (fraction % 10) as u8);
}

/// Adds `"unpaired":"why"` to a JSON object's members.
fn unpaired_arg(args: &mut Vec<u8>, why: Unpaired) {
    if !args.is_empty() {
        args.push(b',');
    }
    args.extend_from_slice(b"\"unpaired\":");
    lossy_string(args, why.words().as_bytes());
}

/// A hit's arguments as a JSON object's members: `"arg0":1,...`.
fn hit_args(hit: &Hit<'_>) -> Vec<u8> {
    let mut args = Vec::new();
    let mut num = itoa::Buffer::new();
    for (n, value) in hit.args().iter().enumerate() {
        if n > 0 {
            args.push(b',');
        }
        args.extend_from_slice(b"\"arg");
        args.extend_from_slice(num.format(n).as_bytes());
        args.extend_from_slice(b"\":");
        match *value {
            Arg::Unsigned(v) => args.extend_from_slice(num.format(v).as_bytes()),
            Arg::Signed(v) => args.extend_from_slice(num.format(v).as_bytes()),
            Arg::Float(v) if v.is_finite() => args.extend_from_slice(v.to_string().as_bytes()),
            Arg::Str(Ok(bytes)) => lossy_string(&mut args, bytes),
            Arg::Float(_) | Arg::Str(Err(_)) | Arg::Unreadable => args.extend_from_slice(b"null"),
        }
    }
    args
}

/// A hit's string arguments.
fn strings(hit: &Hit<'_>) -> Vec<Vec<u8>> {
    hit.args()
        .iter()
        .filter_map(|a| match a {
            Arg::Str(Ok(bytes)) => Some(bytes.to_vec()),
            _ => None,
        })
        .collect()
}

impl Timeline<'_> {
    fn printf(&mut self, printf: &mut dyn Printed) {
        let Some(stamp) = printf.stamp() else {
            return;
        };
        let (time_ns, pid, tid) = (stamp.time_ns, stamp.thread.pid, stamp.thread.tid);
        let comm = stamp.thread.comm.to_vec();
        let text = printf.text();
        let line = text.strip_suffix(b"\n").unwrap_or(text).to_vec();
        let thread = Thread {
            pid,
            tid,
            comm: &comm,
        };
        self.instant(&line, "printf", time_ns, thread, b"");
    }

    fn hit(&mut self, hit: &Hit<'_>) {
        let args = hit_args(hit);
        let boundary = self
            .pairs
            .get(hit.provider)
            .and_then(|names| names.get(hit.name))
            .cloned();
        match boundary {
            None => {
                let name = format!("{}:{}", hit.provider, hit.name);
                self.instant(
                    name.as_bytes(),
                    hit.provider,
                    hit.time_ns,
                    hit.thread(),
                    &args,
                );
            }
            Some(b) if b.opens => {
                let open = Open {
                    pair: b.pair,
                    time_ns: hit.time_ns,
                    pid: hit.pid,
                    comm: hit.comm.to_vec(),
                    probe: format!("{}:{}", hit.provider, hit.name),
                    slice: b.slice,
                    args,
                    strings: strings(hit),
                };
                let stack = self.open.entry(hit.tid).or_default();
                stack.push(open);
                if stack.len() > MAX_OPEN {
                    let oldest = stack.remove(0);
                    self.give_up(oldest, hit.tid, Unpaired::OpenWithoutClose);
                }
            }
            Some(b) => self.close(hit, b.pair, args),
        }
    }

    fn span(&mut self, span: &Span<'_>) {
        let mut args = Vec::new();
        for (i, (name, value)) in span.args.iter().enumerate() {
            if i > 0 {
                args.push(b',');
            }
            lossy_string(&mut args, name.as_bytes());
            args.push(b':');
            args.extend_from_slice(json::datum(value).as_bytes());
        }
        self.slice(
            span.name.as_bytes(),
            span.start_ns,
            span.end_ns,
            span.thread,
            &args,
        );
    }
}

impl Sink for Timeline<'_> {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::ProbesAdded(probes) => self.pair(probes),
            Event::Printf(printf) => self.printf(printf),
            Event::Hit(hit) => self.hit(hit),
            Event::Span(span) => self.span(span),
            _ => {}
        }
    }

    fn flush(&mut self) {
        self.out.flush();
        self.note_failure();
    }

    fn finish(&mut self) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let mut threads: Vec<(u32, Vec<Open>)> = self.open.drain().collect();
        threads.sort_by_key(|(tid, _)| *tid);
        for (tid, stack) in threads {
            for open in stack {
                self.give_up(open, tid, Unpaired::OpenAtEnd);
            }
        }
        for (pid, (comm, _)) in std::mem::take(&mut self.processes) {
            let thread = Thread {
                pid,
                tid: pid,
                comm: &comm,
            };
            self.metadata("process_name", thread, pid);
            // One for each process seen: not held to the limit.
            self.write_line();
        }
        self.out.write(b"\n]}\n");
        self.flush();
        if self.failed.is_some() {
            // The file is broken: what it would have said is moot.
            return;
        }
        if !self.unpaired.is_empty() {
            let parts: Vec<String> = self
                .unpaired
                .iter()
                .map(|((probe, why), n)| format!("{n} {probe} {}", why.words()))
                .collect();
            let _ = writeln!(
                self.notes,
                "sdt: the timeline {} shows as instants what it could not pair: {}",
                self.name,
                parts.join(", ")
            );
        }
        if self.left_out > 0 {
            let _ = writeln!(
                self.notes,
                "sdt: the timeline {} holds {} events; {} more were left out (--timeline-limit raises the limit)",
                self.name, self.written, self.left_out
            );
        }
        let _ = self.notes.flush();
    }

    fn error(&self) -> Option<&io::Error> {
        self.failed.as_ref()
    }
}

#[cfg(test)]
mod tests;
