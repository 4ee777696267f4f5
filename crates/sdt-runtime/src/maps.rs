//! Maps as they print: merged, sorted and resolved into a [`MapPrint`].
//!
//! Aggregations are kept per CPU in the kernel and merged here. The order
//! follows bpftrace 0.17 (numeric maps by value, histograms by their
//! total, the rest by key; ties by key so that runs agree), except where
//! bpftrace is wrong: `hist` buckets go on past `[2G, 4G)` instead of
//! saturating there, and a `max()` of only negative values prints its
//! maximum instead of nothing. How a map looks is the output format's
//! business.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use sdt_lang::hir::MapDecl;
use sdt_lang::types::Agg;
use sdt_output::{Bucket, MapKind, MapPrint, MapValue};

use super::value::{decode, resolve, Env};

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

/// The buckets to show: from the first non-empty to the last, with the
/// empty ones between.
fn shown_buckets(agg: Agg, buckets: &BTreeMap<u64, u64>) -> Vec<Bucket> {
    let nonzero: Vec<u64> = buckets
        .iter()
        .filter(|(_, &c)| c > 0)
        .map(|(&i, _)| i)
        .collect();
    let (Some(&first), Some(&last)) = (nonzero.first(), nonzero.last()) else {
        return Vec::new();
    };
    (first..=last)
        .map(|i| {
            let (low, high) = bucket_range(agg, i);
            Bucket {
                low,
                high,
                count: buckets.get(&i).copied().unwrap_or(0),
            }
        })
        .collect()
}

/// The kind of `decl`'s values, for the output.
fn kind(decl: &MapDecl) -> MapKind {
    match decl.aggregation() {
        None => MapKind::Plain,
        Some(Agg::Count) => MapKind::Count,
        Some(Agg::Sum { .. }) => MapKind::Sum,
        Some(Agg::Min { .. }) => MapKind::Min,
        Some(Agg::Max { .. }) => MapKind::Max,
        Some(Agg::Avg { .. }) => MapKind::Avg,
        Some(Agg::Stats { .. }) => MapKind::Stats,
        Some(Agg::Hist { .. }) => MapKind::Hist,
        Some(Agg::Lhist { .. }) => MapKind::Lhist,
    }
}

/// A map's entries as they print: merged, sorted, the last `top` kept
/// (all when 0), with `div` for the output to divide by.
pub fn map_print(
    decl: &MapDecl,
    entries: Vec<Entry>,
    top: u64,
    div: u64,
    env: &mut dyn Env,
) -> MapPrint {
    let registry = env.registry().clone();
    let mut rows = rows(decl, entries, &registry);
    sort(decl, &mut rows, &registry);
    if top > 0 && rows.len() as u64 > top {
        rows.drain(..rows.len() - top as usize);
    }
    let offsets = decl.key_offsets(&registry);
    let rows = rows
        .into_iter()
        .map(|row| {
            let key = decl
                .keys
                .iter()
                .zip(&offsets)
                .map(|(ty, at)| {
                    let v = decode(
                        ty,
                        row.key.get(*at as usize..).unwrap_or_default(),
                        &registry,
                    );
                    resolve(&v, env)
                })
                .collect();
            let value = match row.value {
                Merged::Plain(bytes) => {
                    MapValue::Datum(resolve(&decode(&decl.value, &bytes, &registry), env))
                }
                Merged::Int(v) => MapValue::Number(v),
                Merged::Avg { count, total } => MapValue::Number(average(total, count)),
                Merged::Stats { count, total } => MapValue::Stats {
                    count,
                    average: average(total, count),
                    total,
                },
                Merged::Buckets(buckets) => MapValue::Buckets(shown_buckets(
                    decl.aggregation().unwrap_or(Agg::Count),
                    &buckets,
                )),
            };
            sdt_output::MapRow { key, value }
        })
        .collect();
    MapPrint {
        name: decl.display_name(),
        kind: kind(decl),
        keyed: !decl.keys.is_empty(),
        rows,
        div: div.max(1),
    }
}

#[cfg(test)]
mod tests;
