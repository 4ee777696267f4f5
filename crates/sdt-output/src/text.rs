//! Text: what bpftrace prints, and `sdt trace`'s one line per hit.
//!
//! Maps follow bpftrace 0.26 byte for byte (`@name[k1, k2]: value` lines,
//! `hist`'s 52-column bars, `stats()` as a record, pointers in hex),
//! except where bpftrace is wrong: `hist` buckets go on past `[2G, 4G)`.
//! Values print as bpftrace prints them, which depends a little on where
//! they are ([`Context`]): a stack in a key is indented less than one in a
//! value.
//!
//! The tools' reports are aligned columns under a header, as BCC's tools
//! print them, set apart as their [`Layout`] says; cells of a column
//! shown `below` (a stack's frames) go under their row. Log2 histograms
//! are BCC's: `     nsecs               : count     distribution` over
//! rows of `%10d -> %-10d : %-8d |stars|`, twice as wide when a count
//! lies past 2^32.
//!
//! Hits are the hot path of `sdt trace` (millions a second can arrive),
//! so each is formatted into a reused buffer with `itoa` rather than
//! through `format!`. Their strings come from the traced process and
//! never reach the terminal raw: printable UTF-8 is kept, everything else
//! is escaped.

use std::fmt::Write as _;
use std::io::Write;

use crate::model::{
    Align, Arg, Bucket, Cell, Column, Datum, Histogram, Hit, Layout, MapKind, MapPrint, MapValue,
    Printed, StackStyle, Stream, Table, TextKind,
};
use crate::{Event, Out, Sink};

/// Where a value is printed, which changes a few renderings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// A `printf` argument or `print()` of a value.
    Printf,
    /// A map key.
    Key,
    /// A map value.
    Value,
}

/// The text format.
pub struct Text<'w> {
    out: Out<'w>,
    /// Where the two newlines before the final maps go, when not into
    /// the output: bpftrace writes them to standard output even with `-o`.
    separator: Option<Box<dyn Write + 'w>>,
    /// `CLOCK_MONOTONIC` at start: hits show the seconds since.
    start_ns: u64,
    line: Vec<u8>,
    /// The streams whose header is written.
    headed: Vec<&'static str>,
}

impl<'w> Text<'w> {
    pub fn new(out: Box<dyn Write + 'w>) -> Text<'w> {
        Text {
            out: Out::new(out),
            separator: None,
            start_ns: monotonic_ns(),
            line: Vec::with_capacity(512),
            headed: Vec::new(),
        }
    }

    /// Writes the newlines before the final maps to `to` instead of the
    /// output.
    pub fn separator_to(mut self, to: Box<dyn Write + 'w>) -> Text<'w> {
        self.separator = Some(to);
        self
    }
}

impl Text<'_> {
    fn printf(&mut self, printf: &mut dyn Printed) {
        self.out.write(printf.text());
    }

    fn value(&mut self, value: &Datum) {
        let line = datum(value, Context::Printf) + "\n";
        self.out.write(line.as_bytes());
    }

    fn map(&mut self, map: &MapPrint) {
        self.out.write(self::map(map).as_bytes());
    }

    fn text(&mut self, kind: TextKind, text: &[u8]) {
        self.out.write(text);
        if kind == TextKind::Join {
            self.out.write(b"\n");
        }
    }

    fn attached(&mut self, probes: usize) {
        let line = format!(
            "Attaching {probes} probe{}...\n",
            if probes == 1 { "" } else { "s" }
        );
        self.out.write(line.as_bytes());
    }

    fn maps_follow(&mut self) {
        match &mut self.separator {
            None => self.out.write(b"\n\n"),
            // Like bpftrace, which writes them with printf: a closed
            // standard output does not stop the maps.
            Some(to) => {
                let _ = to.write_all(b"\n\n").and_then(|()| to.flush());
            }
        }
    }

    fn hit(&mut self, hit: &Hit<'_>) {
        self.line.clear();
        hit_line(&mut self.line, hit, self.start_ns);
        self.out.write(&self.line);
    }

    /// As its layout says: the lines above, the header, each row (with
    /// what shows under it), the notes that have sentences under a
    /// heading each.
    fn table(&mut self, table: &Table) {
        let layout = &table.layout;
        let mut text = String::new();
        if layout.blank_before {
            text.push('\n');
        }
        text.push_str(&above(&layout.above));
        text.push_str(&header(&table.columns, layout.indent));
        for row in &table.rows {
            text.push_str(&row_lines(&table.columns, row, layout));
        }
        for note in table.notes.iter().filter(|n| !n.lines.is_empty()) {
            let _ = writeln!(text, "\n{}", note.heading);
            for line in &note.lines {
                let _ = writeln!(text, "  {line}");
            }
        }
        if layout.blank_after {
            text.push('\n');
        }
        self.out.write(text.as_bytes());
    }

    /// The header before the stream's first row (or its first empty
    /// row, which shows nothing else).
    fn row(&mut self, stream: &Stream, row: &[Cell]) {
        if !self.headed.contains(&stream.name) {
            self.headed.push(stream.name);
            let mut text = above(&stream.layout.above);
            text.push_str(&header(&stream.columns, stream.layout.indent));
            self.out.write(text.as_bytes());
        }
        if !row.is_empty() {
            let text = row_lines(&stream.columns, row, &stream.layout);
            self.out.write(text.as_bytes());
        }
    }

    fn histogram(&mut self, histogram: &Histogram) {
        self.out.write(histogram_lines(histogram).as_bytes());
    }
}

impl Sink for Text<'_> {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Printf(printf) => self.printf(printf),
            Event::Value(value) => self.value(value),
            Event::Map(map) => self.map(map),
            Event::Text(kind, text) => self.text(kind, text),
            Event::Attached(probes) => self.attached(probes),
            Event::MapsFollow => self.maps_follow(),
            Event::Hit(hit) => self.hit(hit),
            Event::Table(table) => self.table(table),
            Event::Row(stream, row) => self.row(stream, row),
            Event::Heading(line) => {
                self.out.write(line.as_bytes());
                self.out.write(b"\n");
            }
            Event::Histogram(histogram) => self.histogram(histogram),
            // Losses and `sdt trace`'s summary are told on standard
            // error, by whoever ran the program; so are the notes after
            // a stream, by the tool.
            Event::Lost(_)
            | Event::Summary(_)
            | Event::Hint(_)
            | Event::Note(_)
            | Event::ProbesAdded(_)
            | Event::Span(_)
            | Event::Stacks { .. } => {}
        }
    }

    fn flush(&mut self) {
        self.out.flush();
    }

    fn error(&self) -> Option<&std::io::Error> {
        self.out.error()
    }
}

/// A string as bpftrace prints it: its bytes as they are, newlines and
/// tabs included. Only bytes that are not UTF-8, which a `String` cannot
/// hold, become `\xNN`.
pub fn raw_text(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `%r`: printable ASCII as it is, other bytes as `\xNN`.
pub fn escape_buffer(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Every byte as two hex digits, each after `prefix`, with `separator`
/// between them: `%rx` (`\x48\x69`) and `%rh` (`48 69`).
pub fn hex_buffer(bytes: &[u8], prefix: &str, separator: &str) -> String {
    let mut out = String::new();
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push_str(separator);
        }
        let _ = write!(out, "{prefix}{b:02x}");
    }
    out
}

/// The text of a value in `context`.
pub fn datum(value: &Datum, context: Context) -> String {
    match value {
        Datum::Int { value, signed } => {
            if *signed {
                (*value as i64).to_string()
            } else {
                value.to_string()
            }
        }
        Datum::Bool(b) => b.to_string(),
        Datum::Str(bytes) => raw_text(bytes),
        Datum::Buf(bytes) => escape_buffer(bytes),
        Datum::Text(text) | Datum::Symbolic { text, .. } => text.clone(),
        // bpftrace's spelling: `{ .x = 1, .name = abc }` and `[1,2,3]`.
        Datum::Record(fields) => {
            let inner = if context == Context::Key {
                Context::Key
            } else {
                Context::Printf
            };
            let parts: Vec<String> = fields
                .iter()
                .map(|(name, v)| format!(".{name} = {}", datum(v, inner)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        Datum::Array(items) => {
            let inner = if context == Context::Key {
                Context::Key
            } else {
                Context::Printf
            };
            let parts: Vec<String> = items.iter().map(|v| datum(v, inner)).collect();
            format!("[{}]", parts.join(","))
        }
        Datum::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(|v| datum(v, Context::Printf)).collect();
            format!("({})", parts.join(", "))
        }
        Datum::Stack(stack) => {
            let indent = if context == Context::Key {
                "    "
            } else {
                "        "
            };
            let mut out = String::from("\n");
            for frame in &stack.frames {
                let name = match &frame.symbol {
                    Some((name, offset)) => format!("{name}+{offset}"),
                    None => format!("{:#x}", frame.addr),
                };
                let _ = match stack.style {
                    StackStyle::Bpftrace => writeln!(out, "{indent}{name}"),
                    StackStyle::Perf if stack.kernel => writeln!(out, "\t{:x} {name}", frame.addr),
                    StackStyle::Perf => {
                        let module = match (&frame.symbol, &frame.module) {
                            (Some(_), Some(module)) => module.as_str(),
                            _ => "[unknown]",
                        };
                        writeln!(out, "\t{:x} {name} ({module})", frame.addr)
                    }
                    StackStyle::Raw => writeln!(out, "{:x}", frame.addr),
                    StackStyle::BuildId => match &frame.build_id {
                        Some((id, offset)) => {
                            let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
                            writeln!(out, "{id} {offset:#04x}")
                        }
                        None => writeln!(out, "{:x}", frame.addr),
                    },
                };
            }
            out
        }
    }
}

/// A number with a binary unit when it is an exact multiple of one:
/// `1K`, `3M`, `512`.
pub fn unit_label(n: i128) -> String {
    if n == 0 {
        return "0".into();
    }
    for (shift, unit) in [
        (60, "E"),
        (50, "P"),
        (40, "T"),
        (30, "G"),
        (20, "M"),
        (10, "K"),
    ] {
        let scale = 1i128 << shift;
        if n % scale == 0 {
            return format!("{}{unit}", n / scale);
        }
    }
    n.to_string()
}

fn bucket_label(kind: MapKind, bucket: &Bucket) -> String {
    match (bucket.low, bucket.high) {
        (Some(lo), Some(hi)) if kind == MapKind::Hist && hi - lo == 1 => {
            format!("[{}]", unit_label(lo))
        }
        (None, Some(hi)) => format!("(..., {})", unit_label(hi)),
        (Some(lo), None) => format!("[{}, ...)", unit_label(lo)),
        (Some(lo), Some(hi)) => format!("[{}, {})", unit_label(lo), unit_label(hi)),
        (None, None) => String::new(),
    }
}

fn histogram(kind: MapKind, buckets: &[Bucket], div: u64, out: &mut String) {
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(0);
    for bucket in buckets {
        let bar = if max == 0 {
            0
        } else {
            (bucket.count as f64 / max as f64 * 52.0) as usize
        };
        let _ = writeln!(
            out,
            "{:<16}{:>8} |{:<52}|",
            bucket_label(kind, bucket),
            bucket.count / div,
            "@".repeat(bar)
        );
    }
}

/// The text of a key: `[k1, k2]`, or nothing for a map without a key.
fn key(map: &MapPrint, key: &[Datum]) -> String {
    if !map.keyed {
        return String::new();
    }
    let parts: Vec<String> = key.iter().map(|k| datum(k, Context::Key)).collect();
    format!("[{}]", parts.join(", "))
}

/// A map as bpftrace 0.26 prints it: one `@name[key]: value` line per
/// entry, a histogram under its `@name[key]:` line and followed by a blank
/// line, and nothing at all for a map without entries (a scalar map that
/// was cleared or deleted included).
pub fn map(map: &MapPrint) -> String {
    let name = &map.name;
    let mut out = String::new();
    let div = map.div.max(1);
    for row in &map.rows {
        let key = key(map, &row.key);
        match &row.value {
            MapValue::Buckets(buckets) => {
                let _ = writeln!(out, "{name}{key}:");
                histogram(map.kind, buckets, div, &mut out);
                out.push('\n');
            }
            MapValue::Series { points, .. } => {
                let _ = writeln!(out, "{name}{key}:");
                series::series(points, &mut out);
            }
            MapValue::Number(v) => {
                let _ = writeln!(out, "{name}{key}: {}", v / i128::from(div));
            }
            MapValue::Stats {
                count,
                average,
                total,
            } => {
                let _ = writeln!(
                    out,
                    "{name}{key}: {{ .count = {count}, .average = {}, .total = {total} }}",
                    average / i128::from(div)
                );
            }
            MapValue::Datum(value) => {
                let shown = divided(value, div).unwrap_or_else(|| datum(value, Context::Value));
                let _ = writeln!(out, "{name}{key}: {shown}");
                if matches!(value, Datum::Stack(_)) {
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// An integer value divided by `print`'s `div`, when there is one.
pub(crate) fn divided(value: &Datum, div: u64) -> Option<String> {
    match *value {
        Datum::Int { value, signed } if div > 1 => Some(if signed {
            ((value as i64) / div as i64).to_string()
        } else {
            (value / div).to_string()
        }),
        _ => None,
    }
}

/// Lines above a report, each ended.
fn above(lines: &[String]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// A report's header line: the headers of the columns text shows in
/// rows, after `indent`; none when every such header is empty.
fn header(columns: &[Column], indent: &str) -> String {
    let inline = || columns.iter().filter(|c| c.below.is_none());
    if inline().all(|c| c.header.is_none_or(str::is_empty)) {
        return String::new();
    }
    let headers = inline().filter_map(|c| Some((c, c.header?.to_string())));
    format!("{indent}{}", aligned(headers))
}

/// A report's row as text: its cells in the columns text shows in rows
/// (after `indent`, when there are any), then the cells of columns shown
/// below it, then a blank line when the layout has one between rows.
fn row_lines(columns: &[Column], row: &[Cell], layout: &Layout) -> String {
    let shown = || columns.iter().zip(row).filter(|(c, _)| c.header.is_some());
    let mut text = String::new();
    if shown().any(|(c, _)| c.below.is_none()) {
        let cells = shown()
            .filter(|(c, _)| c.below.is_none())
            .map(|(c, cell)| (c, self::cell(cell, c.decimals)));
        text.push_str(layout.indent);
        text.push_str(&aligned(cells));
    }
    for (column, cell) in shown() {
        let Some(indent) = column.below else { continue };
        let items = match cell {
            Cell::List(items) => items.iter().collect(),
            Cell::Text(text) if text.is_empty() => Vec::new(),
            other => vec![other],
        };
        for item in items {
            let _ = writeln!(text, "{indent}{}", self::cell(item, column.decimals));
        }
    }
    if layout.blank_between {
        text.push('\n');
    }
    text
}

/// A log2 histogram as BCC prints it: nothing without counts; else the
/// lines above, the header with the label, and a row for each slot from
/// `0 -> 1` to the highest with a count, with up to 40 stars (20, and
/// wider numbers, when that slot is past 2^32).
pub fn histogram_lines(histogram: &Histogram) -> String {
    let shown = histogram.shown();
    if shown.is_empty() {
        return String::new();
    }
    let (indent, label, number, bar) = if shown.len() > 32 {
        (15, 29, 20, 20)
    } else {
        (5, 19, 10, 40)
    };
    let mut text = above(&histogram.above);
    let _ = writeln!(
        text,
        "{:indent$}{:<label$} : count     distribution",
        "", histogram.label
    );
    let max = shown.iter().copied().max().unwrap_or(1).max(1);
    for (n, &count) in shown.iter().enumerate() {
        let (low, high) = Histogram::range(n + 1);
        let stars = (u128::from(count) * bar as u128 / u128::from(max)).min(bar as u128);
        let _ = writeln!(
            text,
            "{low:>number$} -> {high:<number$} : {count:<8} |{:<bar$}|",
            "*".repeat(stars as usize),
        );
    }
    text
}

/// Texts padded to their columns' widths, with a space between.
fn aligned<'c>(texts: impl Iterator<Item = (&'c Column, String)>) -> String {
    let mut line = String::new();
    for (n, (column, text)) in texts.enumerate() {
        if n > 0 {
            line.push(' ');
        }
        let width = column.width;
        let _ = match column.align {
            Align::Left => write!(line, "{text:<width$}"),
            Align::Right => write!(line, "{text:>width$}"),
        };
    }
    line.push('\n');
    line
}

/// A report's value as text; floats with `decimals` digits.
fn cell(cell: &Cell, decimals: usize) -> String {
    match cell {
        Cell::Int(v) => v.to_string(),
        Cell::Float(v) => format!("{v:.decimals$}"),
        Cell::Text(text) => text.clone(),
        // Notes' values, which text shows as sentences instead.
        Cell::List(_) | Cell::Fields(_) => crate::json::cell(cell),
    }
}

fn hit_line(line: &mut Vec<u8>, hit: &Hit<'_>, start_ns: u64) {
    let mut num = itoa::Buffer::new();
    let since = hit.time_ns.saturating_sub(start_ns);
    let nanos = (since % 1_000_000_000) as u32;
    line.extend_from_slice(num.format(since / 1_000_000_000).as_bytes());
    line.push(b'.');
    let digits = num.format(nanos);
    line.extend(std::iter::repeat_n(b'0', 9 - digits.len()));
    line.extend_from_slice(digits.as_bytes());
    line.push(b' ');
    line.extend_from_slice(num.format(hit.pid).as_bytes());
    line.push(b' ');
    line.extend_from_slice(num.format(hit.tid).as_bytes());
    line.push(b' ');
    escape_text(line, hit.comm, false);
    line.push(b' ');
    line.extend_from_slice(hit.provider.as_bytes());
    line.push(b':');
    line.extend_from_slice(hit.name.as_bytes());
    for (n, value) in hit.args().iter().enumerate() {
        line.extend_from_slice(b" arg");
        line.extend_from_slice(num.format(n).as_bytes());
        line.push(b'=');
        match *value {
            Arg::Unsigned(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Arg::Signed(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Arg::Float(v) => line.extend_from_slice(v.to_string().as_bytes()),
            Arg::Str(Ok(bytes)) => {
                line.push(b'"');
                escape_text(line, bytes, true);
                line.push(b'"');
            }
            Arg::Str(Err((errno, pointer))) => {
                line.extend_from_slice(
                    format!("<unreadable {pointer:#x}: error {errno}>").as_bytes(),
                );
            }
            Arg::Unreadable => line.extend_from_slice(b"<unreadable>"),
        }
    }
    line.push(b'\n');
}

/// Appends `bytes`, keeping printable UTF-8 and escaping the rest.
fn escape_text(line: &mut Vec<u8>, bytes: &[u8], quoted: bool) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => line.extend_from_slice(b"\\n"),
                '\t' => line.extend_from_slice(b"\\t"),
                '\r' => line.extend_from_slice(b"\\r"),
                '\\' => line.extend_from_slice(b"\\\\"),
                '"' if quoted => line.extend_from_slice(b"\\\""),
                ' ' if !quoted => line.extend_from_slice(b"\\x20"),
                c if c.is_control() => {
                    line.extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes())
                }
                c => {
                    let mut utf8 = [0; 4];
                    line.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        for byte in chunk.invalid() {
            line.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
        }
    }
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

mod series;
pub(crate) use series::utc;

#[cfg(test)]
mod tests;
