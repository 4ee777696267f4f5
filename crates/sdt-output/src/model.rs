//! What a run produces, as data: the values, map prints and probe hits a
//! sink is handed. Everything that needs the traced system to be
//! understood (symbols, probe names, user names, times) is already
//! resolved here, so that a sink only lays things out.

use std::path::Path;

/// A value, resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Datum {
    /// An integer: `value`'s bits, read signed or not.
    Int {
        value: u64,
        signed: bool,
    },
    /// `true` or `false`.
    Bool(bool),
    /// A string: its bytes before the NUL.
    Str(Vec<u8>),
    /// Bytes without a printable type (`buf()`): shown escaped.
    Buf(Vec<u8>),
    /// Something symbolic, already put into words: a symbol, a probe or
    /// function name, a user name, an error message, a time.
    Text(String),
    /// A number that prints as words in text but as the number in JSON,
    /// as bpftrace 0.26 has them: an enumerator (`FOO`), a pointer
    /// (`0x7ffd1234`).
    Symbolic {
        text: String,
        number: u64,
    },
    /// A user stack.
    Stack(Stack),
    Tuple(Vec<Datum>),
    /// A struct or union: its fields in order.
    Record(Vec<(String, Datum)>),
    /// An array of the traced program's memory.
    Array(Vec<Datum>),
}

impl Datum {
    /// A signed integer.
    pub fn int(value: i64) -> Datum {
        Datum::Int {
            value: value as u64,
            signed: true,
        }
    }

    /// The number, or 0 for what is not one.
    pub fn as_int(&self) -> i128 {
        match *self {
            Datum::Int {
                value,
                signed: true,
            } => i128::from(value as i64),
            Datum::Int {
                value,
                signed: false,
            } => i128::from(value),
            Datum::Bool(b) => i128::from(b),
            Datum::Symbolic { number, .. } => i128::from(number),
            _ => 0,
        }
    }

    /// The value as `printf("%s")` shows it; strings are their bytes
    /// (invalid UTF-8 escaped as `\xNN`).
    pub fn to_text(&self) -> String {
        crate::text::datum(self, crate::text::Context::Printf)
    }
}

/// A user or kernel stack, innermost frame first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stack {
    pub frames: Vec<Frame>,
    pub style: StackStyle,
    /// A kernel stack (`kstack`): its frames are the kernel's, with no
    /// object to name in `perf` mode, and folded stacks mark them `_[k]`
    /// as `perf script` folded through `stackcollapse-perf --kernel` does.
    pub kernel: bool,
}

/// How a stack's frames print, as bpftrace's stack modes say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackStyle {
    /// `symbol+offset`, indented.
    #[default]
    Bpftrace,
    /// As `perf script`: the address, `symbol+offset` and the object.
    Perf,
    /// The address in hex, alone.
    Raw,
    /// The object's build id and the address's offset in the file; the
    /// address where that is not known.
    BuildId,
}

/// One frame of a stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// The function (demangled) and the offset into it, when known.
    pub symbol: Option<(String, u64)>,
    /// The object the address is in, when known.
    pub module: Option<String>,
    /// The build id of that object and the address's offset in its file,
    /// when known (for `StackStyle::BuildId`).
    pub build_id: Option<(Vec<u8>, u64)>,
}

/// The kind of a map's values, which decides how it prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// Plain values (`@x = 1`).
    Plain,
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Stats,
    Hist,
    Lhist,
    TSeries,
}

/// A map printed by `print(@m)` or at the end of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct MapPrint {
    /// `@name`.
    pub name: String,
    pub kind: MapKind,
    /// Whether the map has keys (`@x[k]`) rather than one value (`@x`).
    pub keyed: bool,
    /// The entries in the order they print, `print`'s `top` applied.
    pub rows: Vec<MapRow>,
    /// `print`'s `div` (1 when not given): a sink shows numbers, integer
    /// values, bucket counts and `stats()`'s average divided by it. Values
    /// arrive undivided, so that a histogram's bars keep their exact
    /// proportions.
    pub div: u64,
}

/// One entry of a printed map.
#[derive(Clone, Debug, PartialEq)]
pub struct MapRow {
    /// Each part of the key; empty for a map without keys.
    pub key: Vec<Datum>,
    pub value: MapValue,
}

/// A map entry's value, merged across CPUs.
#[derive(Clone, Debug, PartialEq)]
pub enum MapValue {
    /// A plain value.
    Datum(Datum),
    /// `count`, `sum`, `min`, `max`, `avg`.
    Number(i128),
    Stats {
        count: u64,
        average: i128,
        total: i128,
    },
    /// `hist` and `lhist`: the buckets from the first with a count to the
    /// last, empty ones between included.
    Buckets(Vec<Bucket>),
    /// `tseries`: the intervals of `interval_ns` from this entry's first
    /// with a value to the map's last, each by its start (nanoseconds
    /// since the Unix epoch, UTC) with its value, if it has one.
    Series {
        interval_ns: u64,
        points: Vec<(i128, Option<i64>)>,
    },
}

impl MapValue {
    /// The number an entry is known by: the value, a histogram's total
    /// count, `stats()`'s average; 0 for plain values that are not
    /// numbers.
    pub fn number(&self) -> i128 {
        match self {
            MapValue::Datum(d) => d.as_int(),
            MapValue::Number(n) => *n,
            MapValue::Stats { average, .. } => *average,
            MapValue::Buckets(b) => b.iter().map(|b| i128::from(b.count)).sum(),
            MapValue::Series { points, .. } => points
                .iter()
                .rev()
                .find_map(|(_, v)| *v)
                .map_or(0, i128::from),
        }
    }
}

/// A histogram bucket: values in `[low, high)`; an open end is `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub low: Option<i128>,
    pub high: Option<i128>,
    pub count: u64,
}

/// Text a program produces other than `printf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextKind {
    /// `time()`.
    Time,
    /// `join()`.
    Join,
    /// What a `system()` command printed.
    System,
    /// A file `cat()` read.
    Cat,
}

/// A `printf` record: its text and its arguments, made only when a sink
/// asks (most sinks want one and not the other).
pub trait Printed {
    /// The index of its format in the program.
    fn format(&self) -> u32;
    /// The formatted text.
    fn text(&mut self) -> &[u8];
    /// The arguments as data.
    fn args(&mut self) -> Vec<Datum>;
    /// When and on which thread it was made, if the program was compiled
    /// to record that (for a timeline); `None` otherwise.
    fn stamp(&self) -> Option<Stamp<'_>> {
        None
    }
}

/// What could not be done at full fidelity, counted by the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// Records the ring buffer had no room for.
    pub events: u64,
    /// Stacks that could not be recorded.
    pub stacks: u64,
    /// `(map name, updates refused because the map was full)`.
    pub full_maps: Vec<(String, u64)>,
    /// Hits dropped: the kernel had no memory for the thread's scratch
    /// space, or, on the fast path, the thread's ring was full.
    pub hits: u64,
    /// Reads of the traced process's memory that failed, by place.
    pub failed_reads: Vec<FailedRead>,
}

impl Losses {
    pub fn any(&self) -> bool {
        self.events > 0
            || self.stacks > 0
            || !self.full_maps.is_empty()
            || self.hits > 0
            || !self.failed_reads.is_empty()
    }
}

/// Reads of the traced process's memory at one place that failed, as the
/// kernel counted them: what they read showed as zeros (an empty string).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedRead {
    /// What was read: the script's text there (`str(arg1)`), or for `sdt
    /// trace` which argument (`arg1 as a string`).
    pub what: String,
    /// Where in the script (`script.bt:3:14`); empty where the program
    /// is sdt's own.
    pub at: String,
    /// The probe, as the script names it.
    pub probe: String,
    /// Reads that failed.
    pub count: u64,
    /// The last failure's error, negative (-14 is EFAULT).
    pub error: i64,
}

impl FailedRead {
    /// `str(arg1) at script.bt:3:14 in usdt:./app:p:n failed 12 times,
    /// error -14 (EFAULT)`.
    pub fn sentence(&self) -> String {
        let at = if self.at.is_empty() {
            String::new()
        } else {
            format!(" at {}", self.at)
        };
        let name = match self.error {
            -14 => " (EFAULT: a bad address, or a page not in memory that could not be faulted in)",
            -22 => " (EINVAL)",
            -7 => " (E2BIG)",
            _ => "",
        };
        format!(
            "{}{at} in {} failed {} time{}, error {}{name}",
            self.what,
            self.probe,
            self.count,
            if self.count == 1 { "" } else { "s" },
            self.error
        )
    }
}

/// One hit of a USDT probe, as `sdt trace` shows it.
#[derive(Clone, Copy, Debug)]
pub struct Hit<'a> {
    /// `CLOCK_MONOTONIC` nanoseconds; never less than the previous hit's.
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// The thread's name, up to 15 bytes.
    pub comm: &'a [u8],
    pub provider: &'a str,
    pub name: &'a str,
    /// The object, as the user or the process names it.
    pub path: &'a Path,
    /// The probe's address in it.
    pub address: u64,
    /// The arguments, `args[..count]`: a probe has at most twelve.
    pub args: [Arg<'a>; 12],
    pub count: usize,
}

impl<'a> Hit<'a> {
    pub fn args(&self) -> &[Arg<'a>] {
        &self.args[..self.count.min(12)]
    }

    /// The thread that hit the probe.
    pub fn thread(&self) -> Thread<'a> {
        Thread {
            pid: self.pid,
            tid: self.tid,
            comm: self.comm,
        }
    }
}

/// An argument's value, interpreted the way its spec says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg<'a> {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    /// An argument read as a string: the bytes before the NUL, or, if the
    /// pointer could not be read, the kernel's error (negative) and the
    /// pointer.
    Str(Result<&'a [u8], (i64, u64)>),
    /// The argument cannot be read at this site.
    Unreadable,
}

/// The counts at the end of `sdt trace`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Hits delivered.
    pub events: u64,
    /// Hits the ring buffer had no room for.
    pub lost: u64,
    /// Sites attached.
    pub sites: usize,
    /// Why the trace may show nothing ([`Hint`]), said during the run.
    pub hints: Vec<Hint>,
}

/// What sdt says about why a run may show nothing, for a reader of
/// JSON; standard error has the same sentence, as a warning or a hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hint {
    /// What it is about: `no_probe` (the traced program has no such
    /// probe), `wrapper` (the command reaches its program through a
    /// script that decides what it runs), `loaded` (the probe is in an
    /// object the program loads when it runs), `unattached` (an attach
    /// point never found its probe), `switch` (probes that wait for a
    /// runtime's switch fired too little).
    pub kind: &'static str,
    /// The attach points or probes it is about.
    pub probes: Vec<String>,
    /// The sentence.
    pub text: String,
}

/// A thread of a traced process: what a timeline makes a track of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thread<'a> {
    pub pid: u32,
    pub tid: u32,
    /// Its name, up to 15 bytes.
    pub comm: &'a [u8],
}

/// When, and on which thread, a record was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp<'a> {
    /// `CLOCK_MONOTONIC` nanoseconds, as the kernel took them; never less
    /// than the previous record's.
    pub time_ns: u64,
    pub thread: Thread<'a>,
}

/// Something a thread did from one time to another (a method call, a
/// collection, a query), paired by whoever knows the pair: a tool that
/// matched an entry with its return. Timelines show it as a slice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span<'a> {
    pub thread: Thread<'a>,
    /// `CLOCK_MONOTONIC` nanoseconds at its start and its end.
    pub start_ns: u64,
    pub end_ns: u64,
    pub name: &'a str,
    /// What it carries besides its name, by name.
    pub args: &'a [(&'a str, Datum)],
}

/// How a column's cells line up in text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column of a tool's report (`sdt calls`, `sdt flow`, ...): where it
/// shows, and how text lays it out.
///
/// A column shows in text when it has a header, in JSON when it has a
/// key, in both when it has both. Text and JSON often show the same fact
/// differently (`flow`'s indented tree against its `depth`, `class` and
/// `method`; a time in microseconds against one in nanoseconds), so a
/// report gives each its own column rather than one column converting
/// for the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// Its key in each JSON object, if JSON shows it.
    pub key: Option<&'static str>,
    /// Its header in text, if text shows it.
    pub header: Option<&'static str>,
    /// The least width in text (the header's and each cell's); wider
    /// ones are not cut.
    pub width: usize,
    pub align: Align,
    /// Digits after the point of a [`Cell::Float`] in text.
    pub decimals: usize,
    /// Text shows the cell under its row rather than in it, each line
    /// after this indent: a list one item a line (a stack's frames),
    /// anything else on one line; an empty text or list shows nothing.
    pub below: Option<&'static str>,
}

impl Column {
    /// A column in text and JSON.
    pub const fn both(key: &'static str, header: &'static str) -> Column {
        Column {
            key: Some(key),
            header: Some(header),
            width: 0,
            align: Align::Left,
            decimals: 0,
            below: None,
        }
    }

    /// A column only text shows.
    pub const fn text(header: &'static str) -> Column {
        Column {
            key: None,
            ..Column::both("", header)
        }
    }

    /// A column only JSON shows.
    pub const fn json(key: &'static str) -> Column {
        Column {
            header: None,
            ..Column::both(key, "")
        }
    }

    /// At least `width` wide in text.
    pub const fn width(self, width: usize) -> Column {
        Column { width, ..self }
    }

    /// Aligned to the right in text.
    pub const fn right(self) -> Column {
        Column {
            align: Align::Right,
            ..self
        }
    }

    /// Floats with `decimals` digits after the point in text.
    pub const fn decimals(self, decimals: usize) -> Column {
        Column { decimals, ..self }
    }

    /// Shown by text under its row, each line after `indent`.
    pub const fn below(self, indent: &'static str) -> Column {
        Column {
            below: Some(indent),
            ..self
        }
    }

    /// The same column under another header (`TIME(ms)` for `TIME(us)`).
    pub const fn titled(self, header: &'static str) -> Column {
        Column {
            header: Some(header),
            ..self
        }
    }
}

/// One value of a report: a cell of a row, or the value of a [`Note`].
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A count, an id, a time in nanoseconds.
    Int(i128),
    /// A rate or a time in a unit; text shows it with its column's
    /// decimals.
    Float(f64),
    Text(String),
    /// A list (for JSON: a note's list of names).
    List(Vec<Cell>),
    /// Named values, in order (for JSON: a note's counts).
    Fields(Vec<(&'static str, Cell)>),
}

/// A report printed whole (`sdt calls`, `sdt objnew`, `sdt stat`): once
/// at the end, or once an interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The JSON key of its list of rows (`methods`).
    pub key: &'static str,
    pub columns: Vec<Column>,
    /// One cell a column each.
    pub rows: Vec<Vec<Cell>>,
    /// Values that JSON shows before the rows (`stat`'s `interval_s`).
    pub fields: Vec<(&'static str, Cell)>,
    /// What the report says besides its rows: under them in text, after
    /// them in JSON.
    pub notes: Vec<Note>,
    /// How text sets it apart.
    pub layout: Layout,
}

/// How text sets a report apart from what comes before and after it:
/// sdt's tools end a table with a blank line; BCC's tools start a report
/// with one, put a time or a probe's label above it, indent it with a
/// tab, or leave a blank line after each stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Lines above the header (a time, a label); JSON carries what they
    /// say as fields.
    pub above: Vec<String>,
    /// What the header and each row start with (`\t`).
    pub indent: &'static str,
    /// A blank line before it (before the lines above).
    pub blank_before: bool,
    /// A blank line after it.
    pub blank_after: bool,
    /// A blank line after each row (after the cells shown under it).
    pub blank_between: bool,
}

impl Layout {
    /// sdt's tools' tables: a blank line after each.
    pub fn sdt() -> Layout {
        Layout {
            blank_after: true,
            ..Layout::default()
        }
    }
}

/// A report printed a row at a time, as events come (`sdt flow`,
/// `sdt gc`, ...): text shows its header before its first row. A row
/// without cells shows only the header (once), for a tool that shows it
/// as soon as tracing starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// Its name, the same for all its rows.
    pub name: &'static str,
    pub columns: Vec<Column>,
    /// How text sets its rows apart (`above` goes above the header;
    /// `blank_before` and `blank_after` are not used).
    pub layout: Layout,
}

/// A log2 histogram, laid out in text as BCC's tools lay one out
/// (`funclatency`, `argdist -H`): a row for each power of two from
/// `0 -> 1` up to the highest with a count, with a bar of stars; nothing
/// at all when no slot has a count.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// The JSON key of its buckets.
    pub key: &'static str,
    /// What is counted, above the counts in text: `nsecs`, an expression.
    pub label: String,
    /// `slots[i]` counts the values whose highest set bit is bit `i - 1`
    /// (values 0 and 1 in slot 1, 2 and 3 in slot 2, 4 to 7 in slot 3);
    /// slot 0 is not shown. At most 65 slots.
    pub slots: Vec<u64>,
    /// Values JSON shows before the buckets (the function, the unit).
    pub fields: Vec<(&'static str, Cell)>,
    /// Lines text shows above it when it has counts (`Function = f`).
    pub above: Vec<String>,
}

impl Histogram {
    /// The lowest and highest value of slot `i`, as BCC labels it.
    pub fn range(i: usize) -> (u128, u128) {
        let high = (1u128 << i) - 1;
        let low = (1u128 << i) >> 1;
        if low == high {
            (low.saturating_sub(1), high)
        } else {
            (low, high)
        }
    }

    /// The slots shown: 1 to the highest with a count.
    pub fn shown(&self) -> &[u64] {
        match self.slots.iter().rposition(|&n| n > 0) {
            Some(last) if last > 0 => &self.slots[1..=last],
            _ => &[],
        }
    }
}

/// What a report says besides its rows, in words for text and as data
/// for JSON: what could not be paired, what was lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// Its JSON key (`unpaired`, `lost`).
    pub key: &'static str,
    /// In text, the line above its sentences.
    pub heading: &'static str,
    /// In text, one sentence a line; a note without any is not shown.
    pub lines: Vec<String>,
    /// In JSON, its value.
    pub value: Cell,
}
