//! What could not be paired, counted and said (see the crate
//! documentation): method entries and returns ([`Unpaired`], for `calls
//! -L` and `flow`), and starts and ends of timed events ([`UnpairedSpans`],
//! for `gc` and `dbslower`).
//!
//! Each is said in sentences, on standard error or under `calls`' table,
//! and as data in JSON (an `unpaired` note), with the same counts.

use std::collections::BTreeMap;

use sdt_output::{Cell, Event, MapPrint, Note, Sink};

/// How a method is shown: `class.method`, or the method alone when the
/// runtime gives no class (PHP's functions).
pub fn method_name(class: &str, method: &str) -> String {
    if class.is_empty() {
        method.to_string()
    } else {
        format!("{class}.{method}")
    }
}

/// Method entries and returns that could not be paired, by `(class,
/// method)`.
#[derive(Default)]
pub struct Unpaired {
    /// Returns whose entry was not seen: calls that began before tracing
    /// did, or whose entry the runtime does not report.
    pub returns_without_entry: BTreeMap<(String, String), u64>,
    /// Entries whose return never came: a deeper return closed a frame
    /// below them (an exception the runtime does not report, a coroutine
    /// or fiber switch, a `longjmp`), or their thread ended.
    pub entries_without_return: BTreeMap<(String, String), u64>,
    /// Calls open when tracing ended, in threads still running.
    pub running_at_end: u64,
    /// Calls open when tracing ended in threads that had ended, whose
    /// names were not kept (the pairing is in the kernel).
    pub unnamed_without_return: u64,
}

impl Unpaired {
    /// Counts `depth` calls left open in thread `tid` when tracing ended.
    pub fn open_at_end(&mut self, tid: i128, depth: u64) {
        if thread_alive(tid) {
            self.running_at_end += depth;
        } else {
            self.unnamed_without_return += depth;
        }
    }

    /// One sentence per kind of unpaired event there is.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(line) = summary(
            &self.returns_without_entry,
            0,
            ("return without an entry", "returns without an entry"),
            "calls that began before tracing, or whose entry the runtime does not report",
        ) {
            lines.push(line);
        }
        if let Some(line) = summary(
            &self.entries_without_return,
            self.unnamed_without_return,
            ("entry without a return", "entries without a return"),
            "left by an exception the runtime does not report, a coroutine switch, a longjmp or a thread that ended",
        ) {
            lines.push(line);
        }
        if self.running_at_end > 0 {
            lines.push(format!(
                "{} still running when tracing ended",
                plural(self.running_at_end, "call", "calls")
            ));
        }
        lines
    }

    /// The counts as a note: `{"unpaired": {"returns_without_entry":
    /// [{"class", "method", "count"}], "entries_without_return": [...],
    /// "unnamed_entries_without_return", "running_at_end"}}` in JSON.
    pub fn note(&self) -> Note {
        let rows = |counts: &BTreeMap<(String, String), u64>| {
            let rows = by_count(counts).into_iter().map(|((class, method), n)| {
                Cell::Fields(vec![
                    ("class", Cell::Text(class)),
                    ("method", Cell::Text(method)),
                    ("count", Cell::Int(n.into())),
                ])
            });
            Cell::List(rows.collect())
        };
        note(
            self.lines(),
            vec![
                ("returns_without_entry", rows(&self.returns_without_entry)),
                ("entries_without_return", rows(&self.entries_without_return)),
                (
                    "unnamed_entries_without_return",
                    Cell::Int(self.unnamed_without_return.into()),
                ),
                ("running_at_end", Cell::Int(self.running_at_end.into())),
            ],
        )
    }
}

/// What could not be paired, as a note of a table (under `calls`' table).
fn note(lines: Vec<String>, counts: Vec<(&'static str, Cell)>) -> Note {
    Note {
        key: "unpaired",
        heading: "Not paired, so not in the table:",
        lines,
        value: Cell::Fields(counts),
    }
}

/// Says at the end of a stream what could not be paired: each sentence
/// on standard error, and the note to `out` (a last `{"unpaired": ...}`
/// line in JSON). Nothing when everything paired.
pub fn tell(note: &Note, out: &mut dyn Sink) {
    if note.lines.is_empty() {
        return;
    }
    for line in &note.lines {
        eprintln!("sdt: not paired: {line}");
    }
    out.event(Event::Note(note));
}

/// Whether thread `tid` (a kernel thread id, as `tid` gives it) still
/// runs: it exists and is not a zombie waiting to be reaped (the state
/// after the command's name in `/proc/TID/stat`).
pub fn thread_alive(tid: i128) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// `N what (the names with most, ...): why`, or nothing for none.
fn summary(
    counts: &BTreeMap<(String, String), u64>,
    unnamed: u64,
    (one, many): (&str, &str),
    why: &str,
) -> Option<String> {
    let total = counts.values().sum::<u64>() + unnamed;
    if total == 0 {
        return None;
    }
    let sorted = by_count(counts);
    let mut names: Vec<String> = sorted
        .iter()
        .take(3)
        .map(|((class, method), n)| format!("{} {n}", method_name(class, method)))
        .collect();
    if sorted.len() > 3 {
        names.push(format!("{} more", sorted.len() - 3));
    }
    if unnamed > 0 {
        names.push(format!("{unnamed} open in threads that ended"));
    }
    Some(format!(
        "{total} {} ({}): {why}",
        if total == 1 { one } else { many },
        names.join(", ")
    ))
}

fn by_count<K: Clone + Ord>(counts: &BTreeMap<K, u64>) -> Vec<(K, u64)> {
    let mut sorted: Vec<(K, u64)> = counts.iter().map(|(k, n)| (k.clone(), *n)).collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sorted
}

pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Starts and ends of a timed event (a collection, a query) that could
/// not be paired, from the maps a tool's `END` prints: `open` (the events
/// still open, by thread), `@starts_without_end` and
/// `@ends_without_start`.
pub struct UnpairedSpans {
    /// The map of open events, keyed by thread (`@collecting`).
    open: &'static str,
    /// The event's name, singular and plural.
    event: (&'static str, &'static str),
    /// Why a start has no end, and why an end has no start.
    why: (&'static str, &'static str),
    starts_without_end: u64,
    ends_without_start: u64,
    running_at_end: u64,
}

impl UnpairedSpans {
    pub fn new(
        open: &'static str,
        event: (&'static str, &'static str),
        why: (&'static str, &'static str),
    ) -> UnpairedSpans {
        UnpairedSpans {
            open,
            event,
            why,
            starts_without_end: 0,
            ends_without_start: 0,
            running_at_end: 0,
        }
    }

    /// Takes in a map the tool's program printed; others are ignored.
    pub fn map(&mut self, map: &MapPrint) {
        let total = || {
            map.rows
                .iter()
                .map(|r| r.value.number().max(0) as u64)
                .sum::<u64>()
        };
        if map.name == self.open {
            // One open in a thread that has ended will never end.
            for row in &map.rows {
                if thread_alive(row.key.first().map_or(0, |k| k.as_int())) {
                    self.running_at_end += 1;
                } else {
                    self.starts_without_end += 1;
                }
            }
        } else if map.name == "@starts_without_end" {
            self.starts_without_end += total();
        } else if map.name == "@ends_without_start" {
            self.ends_without_start += total();
        }
    }

    /// What could not be paired, as a note (see [`tell`]).
    pub fn note(&self) -> Note {
        let (one, many) = self.event;
        let mut lines = Vec::new();
        if self.starts_without_end > 0 {
            lines.push(format!(
                "{} started without an end, not timed: {}",
                plural(self.starts_without_end, one, many),
                self.why.0
            ));
        }
        if self.ends_without_start > 0 {
            lines.push(format!(
                "{} ended without a start: {}",
                plural(self.ends_without_start, one, many),
                self.why.1
            ));
        }
        if self.running_at_end > 0 {
            lines.push(format!(
                "{} still going on when tracing ended",
                plural(self.running_at_end, one, many)
            ));
        }
        let count = |n: u64| Cell::Int(n.into());
        note(
            lines,
            vec![
                ("starts_without_end", count(self.starts_without_end)),
                ("ends_without_start", count(self.ends_without_start)),
                ("running_at_end", count(self.running_at_end)),
            ],
        )
    }
}
