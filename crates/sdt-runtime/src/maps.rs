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
use sdt_lang::types::{Agg, TSeriesAgg};
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
    /// Bucket index to count, and the sum of the values counted.
    Buckets {
        counts: BTreeMap<u64, u64>,
        sum: i128,
    },
    /// A time series: each interval's number (from the entry's first with
    /// a value to the map's last) with its value, if it has one.
    Series(Vec<(u64, Option<i64>)>),
}

impl Merged {
    /// The number the entries are sorted by, for numeric maps.
    fn sort_key(&self) -> Option<i128> {
        match self {
            Merged::Int(v) => Some(*v),
            Merged::Avg { count, total } | Merged::Stats { count, total } => {
                Some(average(*total, *count))
            }
            Merged::Buckets { counts, .. } => Some(counts.values().map(|&c| i128::from(c)).sum()),
            // Time series by their latest interval with a value.
            Merged::Series(points) => points
                .iter()
                .rev()
                .find(|(_, v)| v.is_some())
                .map(|(n, _)| i128::from(*n)),
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
        Some(Agg::Hist { .. } | Agg::Lhist { .. } | Agg::TSeries { .. }) => {
            unreachable!("histograms and time series are merged by bucket")
        }
    })
}

/// One printable entry: the user key and the merged value.
struct Row {
    key: Vec<u8>,
    value: Merged,
}

fn rows(decl: &MapDecl, entries: Vec<Entry>, registry: &sdt_lang::types::TypeRegistry) -> Vec<Row> {
    if let Some(Agg::TSeries { count, how, .. }) = decl.aggregation() {
        let bucket_at = decl.bucket_offset(registry) as usize;
        return series_rows(entries, bucket_at, count, how);
    }
    if decl.is_histogram() {
        let bucket_at = decl.bucket_offset(registry) as usize;
        let mut by_key: BTreeMap<Vec<u8>, (BTreeMap<u64, u64>, i64)> = BTreeMap::new();
        for (key, values) in entries {
            let bucket = word(&key, bucket_at);
            let count: u64 = values.iter().map(|v| word(v, 0)).sum();
            // The kernel adds with wrapping 64-bit arithmetic.
            let sum = values
                .iter()
                .fold(0i64, |s, v| s.wrapping_add(word(v, 8) as i64));
            let user_key = key[..bucket_at.min(key.len())].to_vec();
            let (counts, total) = by_key.entry(user_key).or_default();
            *counts.entry(bucket).or_default() += count;
            *total = total.wrapping_add(sum);
        }
        return by_key
            .into_iter()
            .map(|(key, (counts, sum))| Row {
                key,
                value: Merged::Buckets {
                    counts,
                    sum: i128::from(sum),
                },
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

/// A time series' rows: for each user key, each interval's value merged
/// across CPUs (see [`interval_value`]), the intervals kept those of the
/// last `count` up to the latest any key has, as bpftrace shows them.
fn series_rows(entries: Vec<Entry>, bucket_at: usize, count: u32, how: TSeriesAgg) -> Vec<Row> {
    let mut by_key: BTreeMap<Vec<u8>, BTreeMap<u64, i64>> = BTreeMap::new();
    for (key, values) in entries {
        let Some((number, value)) = interval_value(&values, how) else {
            continue;
        };
        let user_key = key[..bucket_at.min(key.len())].to_vec();
        by_key.entry(user_key).or_default().insert(number, value);
    }
    let Some(last) = by_key
        .values()
        .filter_map(|v| v.keys().last())
        .max()
        .copied()
    else {
        return Vec::new();
    };
    let first = last.saturating_sub(u64::from(count) - 1);
    by_key
        .into_iter()
        .filter_map(|(key, values)| {
            let (&start, _) = values.range(first..).next()?;
            let points = (start..=last)
                .map(|n| (n, values.get(&n).copied()))
                .collect();
            Some(Row {
                key,
                value: Merged::Series(points),
            })
        })
        .collect()
}

/// One interval's value from every CPU's: of the latest interval any CPU
/// has in this bucket (an earlier one is what the bucket held before),
/// the last value set, or the sum, average, least or greatest of the
/// CPUs'. Each CPU's value is the value, then the time it was set (for
/// the last value) or how many values it holds, then the interval's
/// number; a CPU that set nothing has zeros.
fn interval_value(values: &[Vec<u8>], how: TSeriesAgg) -> Option<(u64, i64)> {
    let set: Vec<(i64, u64, u64)> = values
        .iter()
        .map(|v| (word(v, 0) as i64, word(v, 8), word(v, 16)))
        .filter(|&(_, meta, _)| meta != 0)
        .collect();
    let number = set.iter().map(|&(_, _, n)| n).max()?;
    let these = set.iter().filter(|&&(_, _, n)| n == number);
    let value = match how {
        TSeriesAgg::Last => these.max_by_key(|&&(_, at, _)| at)?.0,
        TSeriesAgg::Sum => these.fold(0i64, |s, &(v, _, _)| s.wrapping_add(v)),
        TSeriesAgg::Avg => {
            let (sum, n) = these.fold((0i128, 0i128), |(s, n), &(v, c, _)| {
                (s + i128::from(v), n + i128::from(c))
            });
            (sum / n.max(1)) as i64
        }
        TSeriesAgg::Min => these.map(|&(v, _, _)| v).min()?,
        TSeriesAgg::Max => these.map(|&(v, _, _)| v).max()?,
    };
    Some((number, value))
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
        let by_key = if decl.has_bucket() {
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
    buckets_between(agg, buckets, first, last)
}

/// Buckets `first..=last`, empty ones included.
fn buckets_between(agg: Agg, buckets: &BTreeMap<u64, u64>, first: u64, last: u64) -> Vec<Bucket> {
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
        Some(Agg::TSeries { .. }) => MapKind::TSeries,
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
    let agg = decl.aggregation().unwrap_or(Agg::Count);
    resolved(decl, rows, div, env, |counts| shown_buckets(agg, counts))
}

/// A map as metrics read it: [`MapPrint`]'s rows, but every histogram
/// with the same buckets, so that a bucket, once reported, stays: an
/// `lhist` with all of its buckets, a `hist` with its power-of-two buckets
/// from 0 up to the highest bucket any entry of the map has (the bucket
/// of negative values only when one has some), and, row by row, the sum
/// of the values each histogram counted.
#[derive(Clone, Debug, PartialEq)]
pub struct MapSnapshot {
    pub print: MapPrint,
    /// The sum of the values of each histogram row; empty for other maps.
    pub sums: Vec<i128>,
}

/// Every entry of a map, for metrics; see [`MapSnapshot`].
pub fn map_snapshot(decl: &MapDecl, entries: Vec<Entry>, env: &mut dyn Env) -> MapSnapshot {
    let registry = env.registry().clone();
    let mut rows = rows(decl, entries, &registry);
    sort(decl, &mut rows, &registry);
    let sums = rows
        .iter()
        .filter_map(|r| match r.value {
            Merged::Buckets { sum, .. } => Some(sum),
            _ => None,
        })
        .collect();
    let nonzero = |r: &Row| match &r.value {
        Merged::Buckets { counts, .. } => counts
            .iter()
            .filter(|(_, &c)| c > 0)
            .map(|(&i, _)| i)
            .collect(),
        _ => Vec::new(),
    };
    let used: Vec<u64> = rows.iter().flat_map(nonzero).collect();
    let agg = decl.aggregation().unwrap_or(Agg::Count);
    let (first, last) = match agg {
        Agg::Lhist { min, max, step } => (0, ((max - min) / step) as u64 + 1),
        _ => (
            u64::from(!used.contains(&0)),
            used.iter().copied().max().unwrap_or(0),
        ),
    };
    let print = resolved(decl, rows, 1, env, |counts| {
        if first > last {
            Vec::new()
        } else {
            buckets_between(agg, counts, first, last)
        }
    });
    MapSnapshot { print, sums }
}

/// Rows with their keys and values resolved, histograms laid out by
/// `buckets`.
fn resolved(
    decl: &MapDecl,
    rows: Vec<Row>,
    div: u64,
    env: &mut dyn Env,
    buckets: impl Fn(&BTreeMap<u64, u64>) -> Vec<Bucket>,
) -> MapPrint {
    let registry = env.registry().clone();
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
                Merged::Buckets { counts, .. } => MapValue::Buckets(buckets(&counts)),
                Merged::Series(points) => {
                    let interval_ns = match decl.aggregation() {
                        Some(Agg::TSeries { interval_ns, .. }) => interval_ns,
                        _ => 1,
                    };
                    MapValue::Series {
                        interval_ns,
                        points: (points.into_iter())
                            .map(|(n, v)| (i128::from(n) * i128::from(interval_ns), v))
                            .collect(),
                    }
                }
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
