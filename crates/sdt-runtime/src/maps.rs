//! Printing maps, as bpftrace prints them.
//!
//! Aggregations are kept per CPU in the kernel and merged here. The
//! layouts follow bpftrace 0.17 byte for byte (`@name[k1, k2]: value`
//! lines sorted by value, `hist`'s 52-column bars, the blank lines after
//! some kinds of map, the JSON objects), except where bpftrace is wrong:
//! `hist` buckets go on past `[2G, 4G)` instead of saturating there, and
//! a `max()` of only negative values prints its maximum instead of nothing.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::value::{decode, json, json_string, text, Context, Env, Value};
use sdt_lang::hir::MapDecl;
use sdt_lang::types::{Agg, Ty};

/// One map entry as read from the kernel: the key, and the value of each
/// CPU (one value for maps that are not per-CPU).
pub type Entry = (Vec<u8>, Vec<Vec<u8>>);

/// A merged value.
#[derive(Clone, Debug, PartialEq)]
enum Merged {
    /// A plain value, in its map's value layout.
    Plain(Vec<u8>),
    Int(i128),
    Avg {
        count: u64,
        total: i128,
    },
    Stats {
        count: u64,
        total: i128,
    },
    /// Bucket index to count.
    Buckets(BTreeMap<u64, u64>),
}

impl Merged {
    /// The number the entries are sorted by, for numeric maps.
    fn sort_key(&self) -> Option<i128> {
        match self {
            Merged::Int(v) => Some(*v),
            Merged::Avg { count, total } | Merged::Stats { count, total } => {
                Some(average(*total, *count))
            }
            Merged::Buckets(b) => Some(b.values().map(|&c| i128::from(c)).sum()),
            Merged::Plain(_) => None,
        }
    }
}

fn average(total: i128, count: u64) -> i128 {
    if count == 0 {
        0
    } else {
        total / i128::from(count)
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .unwrap_or(0)
}

/// Merges the per-CPU values of an entry.
fn merge(decl: &MapDecl, values: &[Vec<u8>]) -> Option<Merged> {
    let signed = |s: bool, v: u64| {
        if s {
            i128::from(v as i64)
        } else {
            i128::from(v)
        }
    };
    Some(match decl.aggregation() {
        None => Merged::Plain(values.first()?.clone()),
        Some(Agg::Count) => Merged::Int(values.iter().map(|v| i128::from(word(v, 0))).sum()),
        Some(Agg::Sum { signed: s }) => {
            let total: i128 = values.iter().map(|v| signed(s, word(v, 0))).sum();
            // The kernel adds with wrapping 64-bit arithmetic.
            Merged::Int(if s {
                i128::from(total as i64)
            } else {
                i128::from(total as u64)
            })
        }
        Some(Agg::Avg { signed: s }) | Some(Agg::Stats { signed: s }) => {
            let count = values.iter().map(|v| word(v, 0)).sum();
            let total: i128 = values.iter().map(|v| signed(s, word(v, 8))).sum();
            let total = if s {
                i128::from(total as i64)
            } else {
                i128::from(total as u64)
            };
            if matches!(decl.aggregation(), Some(Agg::Avg { .. })) {
                Merged::Avg { count, total }
            } else {
                Merged::Stats { count, total }
            }
        }
        Some(agg @ (Agg::Min { signed: s } | Agg::Max { signed: s })) => {
            let set = values
                .iter()
                .filter(|v| word(v, 8) != 0)
                .map(|v| signed(s, word(v, 0)));
            let v = if matches!(agg, Agg::Min { .. }) {
                set.min()
            } else {
                set.max()
            };
            // A zeroed map has entries with nothing set: they print 0.
            Merged::Int(v.unwrap_or(0))
        }
        Some(Agg::Hist { .. } | Agg::Lhist { .. }) => {
            unreachable!("histograms are merged by bucket")
        }
    })
}

/// One printable entry: the user key and the merged value.
struct Row {
    key: Vec<u8>,
    value: Merged,
}

fn rows(decl: &MapDecl, entries: Vec<Entry>, registry: &sdt_lang::types::TypeRegistry) -> Vec<Row> {
    if decl.is_histogram() {
        let bucket_at = decl.bucket_offset(registry) as usize;
        let mut by_key: BTreeMap<Vec<u8>, BTreeMap<u64, u64>> = BTreeMap::new();
        for (key, values) in entries {
            let bucket = word(&key, bucket_at);
            let count: u64 = values.iter().map(|v| word(v, 0)).sum();
            let user_key = key[..bucket_at.min(key.len())].to_vec();
            *by_key
                .entry(user_key)
                .or_default()
                .entry(bucket)
                .or_default() += count;
        }
        return by_key
            .into_iter()
            .map(|(key, buckets)| Row {
                key,
                value: Merged::Buckets(buckets),
            })
            .collect();
    }
    entries
        .into_iter()
        .filter_map(|(key, values)| {
            Some(Row {
                value: merge(decl, &values)?,
                key,
            })
        })
        .collect()
}

/// Compares keys part by part: integers as numbers, the rest as bytes.
fn compare_keys(
    decl: &MapDecl,
    a: &[u8],
    b: &[u8],
    registry: &sdt_lang::types::TypeRegistry,
) -> Ordering {
    let offsets = decl.key_offsets(registry);
    for (ty, at) in decl.keys.iter().zip(offsets) {
        let at = at as usize;
        let size = ty.value_size(registry) as usize;
        let (x, y) = (
            a.get(at..at + size).unwrap_or_default(),
            b.get(at..at + size).unwrap_or_default(),
        );
        let order = if ty.is_integer() {
            let (p, q) = (word(x, 0), word(y, 0));
            if ty.is_signed() {
                (p as i64).cmp(&(q as i64))
            } else {
                p.cmp(&q)
            }
        } else {
            x.cmp(y)
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    Ordering::Equal
}

/// Sorts rows the way bpftrace does: numeric maps by value, histograms by
/// their total count, the rest by key. Ties go by key, so that the order
/// is the same from run to run.
fn sort(decl: &MapDecl, rows: &mut [Row], registry: &sdt_lang::types::TypeRegistry) {
    let numeric = decl.aggregation().is_some() || decl.value.is_integer();
    let signed_values = decl.value.is_signed();
    rows.sort_by(|a, b| {
        let by_value = if numeric {
            match (&a.value, &b.value) {
                (Merged::Plain(x), Merged::Plain(y)) => {
                    let (p, q) = (word(x, 0), word(y, 0));
                    if signed_values {
                        (p as i64).cmp(&(q as i64))
                    } else {
                        p.cmp(&q)
                    }
                }
                (x, y) => x.sort_key().cmp(&y.sort_key()),
            }
        } else {
            Ordering::Equal
        };
        let by_key = if decl.is_histogram() {
            a.key.cmp(&b.key)
        } else {
            compare_keys(decl, &a.key, &b.key, registry)
        };
        by_value.then(by_key)
    });
}

/// The text of a key: `[k1, k2]`, or nothing for a map without a key.
fn key_text(decl: &MapDecl, key: &[u8], env: &mut dyn Env) -> String {
    if decl.keys.is_empty() {
        return String::new();
    }
    let registry = env.registry().clone();
    let offsets = decl.key_offsets(&registry);
    let parts: Vec<String> = decl
        .keys
        .iter()
        .zip(offsets)
        .map(|(ty, at)| {
            let v = decode(ty, key.get(at as usize..).unwrap_or_default(), &registry);
            text(&v, Context::Key, env)
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

fn key_json(decl: &MapDecl, key: &[u8], env: &mut dyn Env) -> String {
    let registry = env.registry().clone();
    let offsets = decl.key_offsets(&registry);
    let parts: Vec<String> = decl
        .keys
        .iter()
        .zip(offsets)
        .map(|(ty, at)| {
            let v = decode(ty, key.get(at as usize..).unwrap_or_default(), &registry);
            text(&v, Context::Key, env)
        })
        .collect();
    json_string(parts.join(",").as_bytes())
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

/// `(lo, hi)` of a bucket: `None` for an open end. Values in `[lo, hi)`.
fn bucket_range(agg: Agg, index: u64) -> (Option<i128>, Option<i128>) {
    match agg {
        Agg::Hist { .. } => match index {
            0 => (None, Some(0)),
            1 => (Some(0), Some(1)),
            i => (Some(1i128 << (i - 2)), Some(1i128 << (i - 1))),
        },
        Agg::Lhist { min, max, step } => {
            let steps = ((max - min) / step) as u64;
            let (min, step) = (i128::from(min), i128::from(step));
            match index {
                0 => (None, Some(min)),
                i if i > steps => (Some(i128::from(max)), None),
                i => (
                    Some(min + (i as i128 - 1) * step),
                    Some(min + i as i128 * step),
                ),
            }
        }
        _ => (None, None),
    }
}

fn bucket_label(agg: Agg, index: u64) -> String {
    match (agg, bucket_range(agg, index)) {
        (Agg::Hist { .. }, (Some(lo), Some(hi))) if hi - lo == 1 => format!("[{}]", unit_label(lo)),
        (_, (None, Some(hi))) => format!("(..., {})", unit_label(hi)),
        (_, (Some(lo), None)) => format!("[{}, ...)", unit_label(lo)),
        (_, (Some(lo), Some(hi))) => format!("[{}, {})", unit_label(lo), unit_label(hi)),
        (_, (None, None)) => String::new(),
    }
}

fn bucket_json(agg: Agg, index: u64, count: u64) -> String {
    match bucket_range(agg, index) {
        (None, Some(hi)) => format!("{{\"max\": {}, \"count\": {count}}}", hi - 1),
        (Some(lo), None) => format!("{{\"min\": {lo}, \"count\": {count}}}"),
        (Some(lo), Some(hi)) => {
            format!("{{\"min\": {lo}, \"max\": {}, \"count\": {count}}}", hi - 1)
        }
        (None, None) => String::new(),
    }
}

/// The buckets to show: from the first non-empty to the last, with the
/// empty ones between.
fn shown_buckets(buckets: &BTreeMap<u64, u64>) -> Vec<(u64, u64)> {
    let nonzero: Vec<u64> = buckets
        .iter()
        .filter(|(_, &c)| c > 0)
        .map(|(&i, _)| i)
        .collect();
    let (Some(&first), Some(&last)) = (nonzero.first(), nonzero.last()) else {
        return Vec::new();
    };
    (first..=last)
        .map(|i| (i, buckets.get(&i).copied().unwrap_or(0)))
        .collect()
}

fn histogram_text(agg: Agg, buckets: &BTreeMap<u64, u64>, div: u64, out: &mut String) {
    let shown = shown_buckets(buckets);
    let max = shown.iter().map(|b| b.1).max().unwrap_or(0);
    for (index, count) in shown {
        let bar = if max == 0 {
            0
        } else {
            (count as f64 / max as f64 * 52.0) as usize
        };
        let _ = writeln!(
            out,
            "{:<16}{:>8} |{:<52}|",
            bucket_label(agg, index),
            count / div.max(1),
            "@".repeat(bar)
        );
    }
}

/// Prints a map as text: `top` > 0 keeps the last `top` entries, `div`
/// divides values.
pub fn print_text(
    decl: &MapDecl,
    entries: Vec<Entry>,
    top: u64,
    div: u64,
    env: &mut dyn Env,
) -> String {
    let registry = env.registry().clone();
    let name = decl.display_name();
    let mut rows = rows(decl, entries, &registry);
    let agg = decl.aggregation();
    let mut out = String::new();
    if rows.is_empty() {
        // bpftrace prints something even for an empty map.
        match agg {
            Some(Agg::Count) if decl.keys.is_empty() => {
                let _ = writeln!(out, "{name}: 0");
            }
            Some(Agg::Avg { .. } | Agg::Stats { .. }) => out.push_str("\n\n"),
            _ => out.push('\n'),
        }
        return out;
    }
    sort(decl, &mut rows, &registry);
    let stats_like = matches!(agg, Some(Agg::Stats { .. }));
    if top > 0 && !stats_like && rows.len() as u64 > top {
        rows.drain(..rows.len() - top as usize);
    }
    let div = if stats_like { 1 } else { div.max(1) };
    for row in &rows {
        let key = key_text(decl, &row.key, env);
        match &row.value {
            Merged::Buckets(buckets) => {
                let _ = writeln!(out, "{name}{key}: ");
                histogram_text(agg.unwrap_or(Agg::Count), buckets, div, &mut out);
                out.push('\n');
            }
            Merged::Int(v) => {
                let _ = writeln!(out, "{name}{key}: {}", v / i128::from(div));
            }
            Merged::Avg { count, total } => {
                let _ = writeln!(
                    out,
                    "{name}{key}: {}",
                    average(*total, *count) / i128::from(div)
                );
            }
            Merged::Stats { count, total } => {
                let _ = writeln!(
                    out,
                    "{name}{key}: count {count}, average {}, total {total}",
                    average(*total, *count)
                );
            }
            Merged::Plain(bytes) => {
                let value = decode(&decl.value, bytes, &registry);
                let mut shown = text(&value, Context::Value, env);
                if let (Value::Int { value: v, signed }, true) = (&value, div > 1) {
                    shown = if *signed {
                        ((*v as i64) / div as i64).to_string()
                    } else {
                        (v / div).to_string()
                    };
                }
                let _ = writeln!(out, "{name}{key}: {shown}");
                if matches!(decl.value, Ty::UStack { .. }) {
                    out.push('\n');
                }
            }
        }
    }
    if matches!(agg, Some(Agg::Avg { .. } | Agg::Stats { .. })) {
        out.push('\n');
    }
    out
}

/// Prints a map as one JSON object, or nothing for an empty map.
pub fn print_json(
    decl: &MapDecl,
    entries: Vec<Entry>,
    top: u64,
    div: u64,
    env: &mut dyn Env,
) -> Option<String> {
    let registry = env.registry().clone();
    let name = json_string(decl.display_name().as_bytes());
    let mut rows = rows(decl, entries, &registry);
    let agg = decl.aggregation();
    let kind = match agg {
        Some(Agg::Hist { .. } | Agg::Lhist { .. }) => "hist",
        Some(Agg::Avg { .. } | Agg::Stats { .. }) => "stats",
        _ => "map",
    };
    if rows.is_empty() {
        return match agg {
            Some(Agg::Count) if decl.keys.is_empty() => {
                Some(format!("{{\"type\": \"map\", \"data\": {{{name}: 0}}}}"))
            }
            _ => None,
        };
    }
    sort(decl, &mut rows, &registry);
    let stats_like = matches!(agg, Some(Agg::Stats { .. }));
    if top > 0 && !stats_like && rows.len() as u64 > top {
        rows.drain(..rows.len() - top as usize);
    }
    let div = if stats_like { 1 } else { div.max(1) };
    let mut values = Vec::new();
    for row in &rows {
        let value = match &row.value {
            Merged::Buckets(buckets) => {
                let parts: Vec<String> = shown_buckets(buckets)
                    .into_iter()
                    .map(|(i, c)| bucket_json(agg.unwrap_or(Agg::Count), i, c / div))
                    .collect();
                format!("[{}]", parts.join(", "))
            }
            Merged::Int(v) => (v / i128::from(div)).to_string(),
            Merged::Avg { count, total } => (average(*total, *count) / i128::from(div)).to_string(),
            Merged::Stats { count, total } => format!(
                "{{\"count\": {count}, \"average\": {}, \"total\": {total}}}",
                average(*total, *count)
            ),
            Merged::Plain(bytes) => {
                let v = decode(&decl.value, bytes, &registry);
                match (&v, div > 1) {
                    (
                        Value::Int {
                            value,
                            signed: true,
                        },
                        true,
                    ) => ((*value as i64) / div as i64).to_string(),
                    (
                        Value::Int {
                            value,
                            signed: false,
                        },
                        true,
                    ) => (value / div).to_string(),
                    _ => json(&v, env),
                }
            }
        };
        values.push((key_json(decl, &row.key, env), value));
    }
    let data = if decl.keys.is_empty() {
        values
            .into_iter()
            .map(|(_, v)| v)
            .next()
            .unwrap_or_default()
    } else {
        let parts: Vec<String> = values
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!("{{{}}}", parts.join(", "))
    };
    Some(format!(
        "{{\"type\": \"{kind}\", \"data\": {{{name}: {data}}}}}"
    ))
}

/// A value handed to a program's [`Receiver`](super::Receiver) instead of
/// being printed: a number, or text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Datum {
    Int(i128),
    Text(String),
}

impl Datum {
    /// The number, or 0 for text.
    pub fn int(&self) -> i128 {
        match self {
            Datum::Int(v) => *v,
            Datum::Text(_) => 0,
        }
    }

    /// The text, or the number written out.
    pub fn text(&self) -> String {
        match self {
            Datum::Int(v) => v.to_string(),
            Datum::Text(t) => t.clone(),
        }
    }
}

/// A decoded value as a [`Datum`]: integers as numbers, strings as their
/// bytes before the NUL, anything else as it would print.
pub fn datum(value: &Value<'_>, context: Context, env: &mut dyn Env) -> Datum {
    match value {
        Value::Int {
            value,
            signed: true,
        } => Datum::Int(i128::from(*value as i64)),
        Value::Int {
            value,
            signed: false,
        } => Datum::Int(i128::from(*value)),
        Value::Str(bytes) => Datum::Text(super::value::raw_text(bytes)),
        other => Datum::Text(text(other, context, env)),
    }
}

/// One map entry as data: each part of its key, and its merged value
/// (a histogram gives its total count, `stats()` its average).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapRow {
    pub keys: Vec<Datum>,
    pub value: Datum,
}

/// Every entry of a map as data, in the order `print` shows them.
pub fn map_rows(decl: &MapDecl, entries: Vec<Entry>, env: &mut dyn Env) -> Vec<MapRow> {
    let registry = env.registry().clone();
    let mut rows = rows(decl, entries, &registry);
    sort(decl, &mut rows, &registry);
    let offsets = decl.key_offsets(&registry);
    rows.into_iter()
        .map(|row| {
            let keys = decl
                .keys
                .iter()
                .zip(&offsets)
                .map(|(ty, at)| {
                    let v = decode(
                        ty,
                        row.key.get(*at as usize..).unwrap_or_default(),
                        &registry,
                    );
                    datum(&v, Context::Key, env)
                })
                .collect();
            let value = match row.value {
                Merged::Plain(bytes) => {
                    datum(&decode(&decl.value, &bytes, &registry), Context::Value, env)
                }
                merged => Datum::Int(merged.sort_key().unwrap_or(0)),
            };
            MapRow { keys, value }
        })
        .collect()
}

#[cfg(test)]
mod tests;
