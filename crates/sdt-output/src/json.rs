//! JSON: bpftrace's objects (`{"type": "map", "data": {...}}`), one per
//! line, and `sdt trace`'s one object per hit and final summary.
//!
//! bpftrace 0.26's spelling is kept: tuples and arrays are arrays without
//! spaces, structs are objects, enumerators and pointers are their
//! numbers, other symbolic values are strings, an integer a double cannot
//! hold exactly is a string, and a map's keys are their texts without
//! spaces, several keys joined with commas. Unlike bpftrace 0.17, no line
//! is anything but JSON (0.26 agrees).

use std::fmt::Write as _;
use std::io::Write;

use crate::model::{
    Arg, Bucket, Cell, Column, Datum, Hint, Histogram, Hit, Losses, MapKind, MapPrint, MapValue,
    Note, Printed, Stream, Table, TextKind, TraceSummary,
};
use crate::text::{self, Context};
use crate::{Event, Out, Sink};

/// The JSON format.
pub struct Json<'w> {
    out: Out<'w>,
    line: Vec<u8>,
}

impl<'w> Json<'w> {
    pub fn new(out: Box<dyn Write + 'w>) -> Json<'w> {
        Json {
            out: Out::new(out),
            line: Vec::with_capacity(512),
        }
    }

    fn object(&mut self, kind: &str, data: &str) {
        let line = format!("{{\"type\": \"{kind}\", \"data\": {data}}}\n");
        self.out.write(line.as_bytes());
    }
}

impl Json<'_> {
    fn printf(&mut self, printf: &mut dyn Printed) {
        let data = string(printf.text());
        self.object("printf", &data);
    }

    fn value(&mut self, value: &Datum) {
        self.object("value", &datum(value));
    }

    fn map(&mut self, map: &MapPrint) {
        if let Some(line) = self::map(map) {
            self.out.write(line.as_bytes());
            self.out.write(b"\n");
        }
    }

    fn text(&mut self, kind: TextKind, text: &[u8]) {
        let kind = match kind {
            TextKind::Time => "time",
            TextKind::Join => "join",
            TextKind::System => "syscall",
            TextKind::Cat => "cat",
        };
        self.object(kind, &string(text));
    }

    fn attached(&mut self, probes: usize) {
        // bpftrace gives the number twice, as `count` and in `data`.
        let line = format!(
            "{{\"type\": \"attached_probes\", \"count\": {probes}, \"data\": {{\"probes\": {probes}}}}}\n"
        );
        self.out.write(line.as_bytes());
    }

    fn lost(&mut self, losses: &Losses) {
        if losses.events > 0 {
            let line = format!(
                "{{\"type\": \"lost_events\", \"count\": {n}, \"data\": {{\"events\": {n}}}}}\n",
                n = losses.events
            );
            self.out.write(line.as_bytes());
        }
        if losses.hits > 0 {
            let line = format!(
                "{{\"type\": \"lost_hits\", \"count\": {n}, \"data\": {{\"hits\": {n}}}}}\n",
                n = losses.hits
            );
            self.out.write(line.as_bytes());
        }
        if !losses.failed_reads.is_empty() {
            let mut line = String::from("{\"type\": \"failed_reads\", \"data\": [");
            for (n, read) in losses.failed_reads.iter().enumerate() {
                if n > 0 {
                    line.push_str(", ");
                }
                let _ = write!(
                    line,
                    "{{\"read\": {}, \"at\": {}, \"probe\": {}, \"count\": {}, \"error\": {}}}",
                    string(read.what.as_bytes()),
                    string(read.at.as_bytes()),
                    string(read.probe.as_bytes()),
                    read.count,
                    read.error
                );
            }
            line.push_str("]}\n");
            self.out.write(line.as_bytes());
        }
    }

    fn hit(&mut self, hit: &Hit<'_>) {
        self.line.clear();
        hit_object(&mut self.line, hit);
        self.out.write(&self.line);
    }

    /// `{"summary":{"events":N,"lost":N,"sites":N}}`, with `"hints":[...]`
    /// when there are any.
    fn summary(&mut self, summary: &TraceSummary) {
        let hints = if summary.hints.is_empty() {
            String::new()
        } else {
            let hints: Vec<String> = summary.hints.iter().map(hint_object).collect();
            format!(",\"hints\":[{}]", hints.join(","))
        };
        let line = format!(
            "{{\"summary\":{{\"events\":{},\"lost\":{},\"sites\":{}{hints}}}}}\n",
            summary.events, summary.lost, summary.sites
        );
        self.out.write(line.as_bytes());
    }

    /// `{"type": "hint", "data": {"kind": ..., "probes": [...], "text": ...}}`.
    fn hint(&mut self, hint: &Hint) {
        self.object("hint", &hint_object(hint));
    }

    /// `{FIELDS, "KEY": [ROWS], NOTES}`.
    fn table(&mut self, table: &Table) {
        let mut line = vec![b'{'];
        for (key, value) in &table.fields {
            write_key(&mut line, key);
            write_cell(&mut line, value);
            line.push(b',');
        }
        write_key(&mut line, table.key);
        line.push(b'[');
        for (n, row) in table.rows.iter().enumerate() {
            if n > 0 {
                line.push(b',');
            }
            write_row(&mut line, &table.columns, row);
        }
        line.push(b']');
        for note in &table.notes {
            line.push(b',');
            write_key(&mut line, note.key);
            write_cell(&mut line, &note.value);
        }
        line.extend_from_slice(b"}\n");
        self.out.write(&line);
    }

    /// An object of the columns JSON shows; none for an empty row (which
    /// only asks text for its header).
    fn row(&mut self, stream: &Stream, row: &[Cell]) {
        if row.is_empty() {
            return;
        }
        let mut line = Vec::new();
        write_row(&mut line, &stream.columns, row);
        line.push(b'\n');
        self.out.write(&line);
    }

    /// `{FIELDS, "KEY": [{"low": L, "high": H, "count": N}, ...]}`, the
    /// buckets as text shows them: from `0 -> 1` to the last with a count.
    fn histogram(&mut self, histogram: &Histogram) {
        let mut line = vec![b'{'];
        for (key, value) in &histogram.fields {
            write_key(&mut line, key);
            write_cell(&mut line, value);
            line.push(b',');
        }
        write_key(&mut line, histogram.key);
        let buckets = histogram.shown().iter().enumerate().map(|(n, &count)| {
            let (low, high) = Histogram::range(n + 1);
            Cell::Fields(vec![
                ("low", Cell::Int(low as i128)),
                ("high", Cell::Int(high as i128)),
                ("count", Cell::Int(count.into())),
            ])
        });
        write_cell(&mut line, &Cell::List(buckets.collect()));
        line.extend_from_slice(b"}\n");
        self.out.write(&line);
    }

    /// `{"KEY": VALUE}`.
    fn note(&mut self, note: &Note) {
        let mut line = Vec::new();
        write_object(&mut line, [(note.key, &note.value)]);
        line.push(b'\n');
        self.out.write(&line);
    }
}

impl Sink for Json<'_> {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Printf(printf) => self.printf(printf),
            Event::Value(value) => self.value(value),
            Event::Map(map) => self.map(map),
            Event::Text(kind, text) => self.text(kind, text),
            Event::Attached(probes) => self.attached(probes),
            Event::Lost(losses) => self.lost(losses),
            Event::Hit(hit) => self.hit(hit),
            Event::Summary(summary) => self.summary(summary),
            Event::Hint(hint) => self.hint(hint),
            Event::Table(table) => self.table(table),
            Event::Row(stream, row) => self.row(stream, row),
            Event::Note(note) => self.note(note),
            Event::Histogram(histogram) => self.histogram(histogram),
            // What a heading says, the objects carry as data.
            Event::Heading(_) => {}
            Event::MapsFollow | Event::ProbesAdded(_) | Event::Span(_) | Event::Stacks { .. } => {}
        }
    }

    fn flush(&mut self) {
        self.out.flush();
    }

    fn error(&self) -> Option<&std::io::Error> {
        self.out.error()
    }
}

/// `{"kind": ..., "probes": [...], "text": ...}`.
fn hint_object(hint: &Hint) -> String {
    let probes: Vec<String> = hint.probes.iter().map(|p| string(p.as_bytes())).collect();
    format!(
        "{{\"kind\": {}, \"probes\": [{}], \"text\": {}}}",
        string(hint.kind.as_bytes()),
        probes.join(", "),
        string(hint.text.as_bytes())
    )
}

/// A JSON string: `"`, `\` and control bytes escaped; other bytes kept,
/// bytes that are not UTF-8 as `\u00NN`.
pub fn string(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\u{:04x}", b);
        }
    }
    out.push('"');
    out
}

/// A value as JSON, in bpftrace's spelling.
pub fn datum(value: &Datum) -> String {
    match value {
        Datum::Int { value, signed } => {
            if *signed {
                let v = *value as i64;
                number(v.to_string(), v as f64 as i128 == i128::from(v))
            } else {
                number(
                    value.to_string(),
                    *value as f64 as u128 == u128::from(*value),
                )
            }
        }
        Datum::Symbolic { number: n, .. } => {
            number(n.to_string(), *n as f64 as u128 == u128::from(*n))
        }
        Datum::Bool(b) => b.to_string(),
        Datum::Text(_) | Datum::Stack(_) => string(text::datum(value, Context::Value).as_bytes()),
        Datum::Str(bytes) => string(bytes),
        Datum::Buf(bytes) => string(text::escape_buffer(bytes).as_bytes()),
        Datum::Tuple(items) | Datum::Array(items) => {
            let parts: Vec<String> = items.iter().map(datum).collect();
            format!("[{}]", parts.join(","))
        }
        Datum::Record(fields) => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(name, v)| format!("{}: {}", string(name.as_bytes()), datum(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// An integer's digits, quoted when a double cannot hold it exactly (JSON
/// readers take numbers as doubles), as bpftrace does.
fn number(digits: String, exact: bool) -> String {
    if exact {
        digits
    } else {
        format!("\"{digits}\"")
    }
}

fn bucket(bucket: &Bucket, count: u64) -> String {
    match (bucket.low, bucket.high) {
        (None, Some(hi)) => format!("{{\"max\": {}, \"count\": {count}}}", hi - 1),
        (Some(lo), None) => format!("{{\"min\": {lo}, \"count\": {count}}}"),
        (Some(lo), Some(hi)) => {
            format!("{{\"min\": {lo}, \"max\": {}, \"count\": {count}}}", hi - 1)
        }
        (None, None) => String::new(),
    }
}

/// A map as one JSON object, or nothing for an empty map.
pub fn map(map: &MapPrint) -> Option<String> {
    let name = string(map.name.as_bytes());
    let kind = match map.kind {
        MapKind::Hist | MapKind::Lhist => "hist",
        MapKind::Avg | MapKind::Stats => "stats",
        MapKind::TSeries => "tseries",
        _ => "map",
    };
    if map.rows.is_empty() {
        return None;
    }
    let div = map.div.max(1);
    let values: Vec<(String, String)> = map
        .rows
        .iter()
        .map(|row| {
            let value = match &row.value {
                MapValue::Buckets(buckets) => {
                    let parts: Vec<String> =
                        buckets.iter().map(|b| bucket(b, b.count / div)).collect();
                    format!("[{}]", parts.join(","))
                }
                MapValue::Number(v) => (v / i128::from(div)).to_string(),
                MapValue::Stats {
                    count,
                    average,
                    total,
                } => format!(
                    "{{\"count\": {count}, \"average\": {}, \"total\": {total}}}",
                    average / i128::from(div)
                ),
                MapValue::Datum(v) => text::divided(v, div).unwrap_or_else(|| datum(v)),
                // The intervals that have a value.
                MapValue::Series { points, .. } => {
                    let parts: Vec<String> = (points.iter())
                        .filter_map(|(start, v)| {
                            let v = (*v)?;
                            let start = string(text::utc(*start).as_bytes());
                            Some(format!("{{\"interval_start\": {start}, \"value\": {v}}}"))
                        })
                        .collect();
                    format!("[{}]", parts.join(", "))
                }
            };
            let parts: Vec<String> = row
                .key
                .iter()
                .map(|k| text::datum(k, Context::Key))
                .collect();
            // bpftrace 0.26 takes the spaces out of a key's text.
            let key = parts.join(",").replace(' ', "");
            (string(key.as_bytes()), value)
        })
        .collect();
    let data = if map.keyed {
        let parts: Vec<String> = values
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!("{{{}}}", parts.join(", "))
    } else {
        values
            .into_iter()
            .map(|(_, v)| v)
            .next()
            .unwrap_or_default()
    };
    Some(format!(
        "{{\"type\": \"{kind}\", \"data\": {{{name}: {data}}}}}"
    ))
}

/// A report's value as JSON, without spaces; a float that is not finite
/// as `null`.
pub fn cell(cell: &Cell) -> String {
    let mut out = Vec::new();
    write_cell(&mut out, cell);
    String::from_utf8_lossy(&out).into_owned()
}

fn write_cell(out: &mut Vec<u8>, cell: &Cell) {
    match cell {
        Cell::Int(v) => out.extend_from_slice(v.to_string().as_bytes()),
        // Debug, not Display: the shortest text that reads back the same,
        // with a `.0` on whole numbers, as JSON writers spell floats.
        Cell::Float(v) if v.is_finite() => out.extend_from_slice(format!("{v:?}").as_bytes()),
        Cell::Float(_) => out.extend_from_slice(b"null"),
        Cell::Text(text) => lossy_string(out, text.as_bytes()),
        Cell::List(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_cell(out, item);
            }
            out.push(b']');
        }
        Cell::Fields(fields) => write_object(out, fields.iter().map(|(k, v)| (*k, v))),
    }
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    lossy_string(out, key.as_bytes());
    out.push(b':');
}

fn write_object<'c>(out: &mut Vec<u8>, fields: impl IntoIterator<Item = (&'c str, &'c Cell)>) {
    out.push(b'{');
    for (n, (key, value)) in fields.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_key(out, key);
        write_cell(out, value);
    }
    out.push(b'}');
}

/// A report's row as an object: its cells in the columns JSON shows.
fn write_row(out: &mut Vec<u8>, columns: &[Column], row: &[Cell]) {
    let shown = columns
        .iter()
        .zip(row)
        .filter_map(|(column, cell)| Some((column.key?, cell)));
    write_object(out, shown);
}

fn hit_object(line: &mut Vec<u8>, hit: &Hit<'_>) {
    let mut num = itoa::Buffer::new();
    line.extend_from_slice(b"{\"time_ns\":");
    line.extend_from_slice(num.format(hit.time_ns).as_bytes());
    line.extend_from_slice(b",\"pid\":");
    line.extend_from_slice(num.format(hit.pid).as_bytes());
    line.extend_from_slice(b",\"tid\":");
    line.extend_from_slice(num.format(hit.tid).as_bytes());
    line.extend_from_slice(b",\"comm\":");
    lossy_string(line, hit.comm);
    line.extend_from_slice(b",\"provider\":");
    lossy_string(line, hit.provider.as_bytes());
    line.extend_from_slice(b",\"name\":");
    lossy_string(line, hit.name.as_bytes());
    line.extend_from_slice(b",\"path\":");
    lossy_string(line, hit.path.as_os_str().as_encoded_bytes());
    line.extend_from_slice(b",\"address\":");
    line.extend_from_slice(num.format(hit.address).as_bytes());
    line.extend_from_slice(b",\"args\":[");
    for (n, value) in hit.args().iter().enumerate() {
        if n > 0 {
            line.push(b',');
        }
        match *value {
            Arg::Unsigned(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Arg::Signed(v) => line.extend_from_slice(num.format(v).as_bytes()),
            Arg::Float(v) if v.is_finite() => line.extend_from_slice(v.to_string().as_bytes()),
            Arg::Float(_) => line.extend_from_slice(b"null"),
            Arg::Str(Ok(bytes)) => lossy_string(line, bytes),
            Arg::Str(Err(_)) | Arg::Unreadable => line.extend_from_slice(b"null"),
        }
    }
    line.extend_from_slice(b"]}\n");
}

/// Appends `bytes` as a JSON string, as strict JSON readers want it:
/// bytes that are not UTF-8 become U+FFFD.
pub(crate) fn lossy_string(line: &mut Vec<u8>, bytes: &[u8]) {
    line.push(b'"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => line.extend_from_slice(b"\\\""),
            '\\' => line.extend_from_slice(b"\\\\"),
            '\n' => line.extend_from_slice(b"\\n"),
            '\r' => line.extend_from_slice(b"\\r"),
            '\t' => line.extend_from_slice(b"\\t"),
            '\u{8}' => line.extend_from_slice(b"\\b"),
            '\u{c}' => line.extend_from_slice(b"\\f"),
            c if (c as u32) < 0x20 => {
                line.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => {
                let mut utf8 = [0; 4];
                line.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
    }
    line.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Layout;

    #[test]
    fn strings_escape() {
        assert_eq!(string(b"a\"b\\\n\x01"), "\"a\\\"b\\\\\\n\\u0001\"");
        let mut line = Vec::new();
        lossy_string(&mut line, b"q\"\x08\xff");
        assert_eq!(String::from_utf8(line).unwrap(), "\"q\\\"\\b\u{fffd}\"");
    }

    #[test]
    fn reports_are_one_object_a_line_keyed_by_their_json_columns() {
        let mut out = Vec::new();
        let mut json = Json::new(Box::new(&mut out));
        let columns = vec![
            Column::both("pid", "PID").width(7),
            Column::text("TIME(s)").decimals(6),
            Column::json("rate"),
            Column::both("name", "NAME"),
        ];
        let row = |pid: i128, rate: f64, name: &str| {
            vec![
                Cell::Int(pid),
                Cell::Float(1.5),
                Cell::Float(rate),
                Cell::Text(name.into()),
            ]
        };
        let stream = Stream {
            name: "test",
            columns: columns.clone(),
            layout: Layout::default(),
        };
        json.row(&stream, &row(42, 101.0, "a \"quoted\"\nname"));
        json.row(&stream, &[]);
        json.table(&Table {
            key: "rows",
            columns,
            rows: vec![row(1, 0.1 + 0.2, "x"), row(2, f64::NAN, "y")],
            fields: vec![("interval_s", Cell::Int(5))],
            notes: vec![Note {
                key: "unpaired",
                heading: "",
                lines: Vec::new(),
                value: Cell::Fields(vec![("running_at_end", Cell::Int(0))]),
            }],
            layout: Layout::sdt(),
        });
        let mut slots = vec![0; 4];
        slots[3] = 2;
        json.histogram(&Histogram {
            key: "buckets",
            label: "usecs".into(),
            slots,
            fields: vec![("unit", Cell::Text("usecs".into()))],
            above: vec!["not in JSON".into()],
        });
        json.note(&Note {
            key: "lost",
            heading: "",
            lines: vec!["3 events lost".into()],
            value: Cell::List(vec![Cell::Text("3 events lost".into())]),
        });
        drop(json);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"pid\":42,\"rate\":101.0,\"name\":\"a \\\"quoted\\\"\\nname\"}\n\
             {\"interval_s\":5,\"rows\":[{\"pid\":1,\"rate\":0.30000000000000004,\"name\":\"x\"},\
             {\"pid\":2,\"rate\":null,\"name\":\"y\"}],\"unpaired\":{\"running_at_end\":0}}\n\
             {\"unit\":\"usecs\",\"buckets\":[{\"low\":0,\"high\":1,\"count\":0},\
             {\"low\":2,\"high\":3,\"count\":0},{\"low\":4,\"high\":7,\"count\":2}]}\n\
             {\"lost\":[\"3 events lost\"]}\n"
        );
    }

    #[test]
    fn structs_and_arrays_as_bpftrace_spells_them() {
        let record = Datum::Record(vec![
            ("x".into(), Datum::int(-7)),
            ("name".into(), Datum::Str(b"ab".to_vec())),
            (
                "b".into(),
                Datum::Array(vec![
                    Datum::Int {
                        value: 233,
                        signed: false,
                    },
                    Datum::Int {
                        value: 3,
                        signed: false,
                    },
                ]),
            ),
        ]);
        assert_eq!(
            datum(&record),
            "{\"x\": -7, \"name\": \"ab\", \"b\": [233,3]}"
        );
        let pointer = Datum::Symbolic {
            text: "0x10".into(),
            number: 16,
        };
        assert_eq!(datum(&pointer), "16");
        assert_eq!(datum(&Datum::int(-1)), "-1");
        let huge = Datum::Int {
            value: u64::MAX,
            signed: false,
        };
        assert_eq!(datum(&huge), "\"18446744073709551615\"");
        assert_eq!(datum(&Datum::int(1 << 53)), "9007199254740992");
        assert_eq!(datum(&Datum::int((1 << 53) + 1)), "\"9007199254740993\"");
    }
}
