//! Maps as metrics: the one mapping from a map's values to metric
//! families that every metrics format shares (Prometheus' text in
//! [`prometheus`](crate::prometheus), OTLP in the `sdt-otlp` crate), so
//! that the two never disagree on what a map is.
//!
//! | map | metric |
//! | --- | --- |
//! | `count()`, `sum()` | counter |
//! | plain integers, `min()`, `max()`, `avg()` | gauge |
//! | `hist()`, `lhist()` | histogram: cumulative buckets, sum, count |
//! | `stats()` | summary without quantiles: count and sum |
//!
//! A histogram bucket holds integers, so its upper bound is inclusive and
//! exact: bpftrace's `[4, 8)` is `le="7"`, the largest value it holds, and
//! a value lands in the same bucket here as in bpftrace's picture. The
//! last, open bucket is `+Inf`, which every histogram has.
//!
//! Names are checked here ([`is_metric_name`], [`is_label_name`]); what
//! they are is the caller's choice.

use crate::model::{Datum, MapKind, MapPrint, MapValue};
use crate::text::{datum, Context};

/// What a metric family measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (until the program clears it).
    Counter,
    /// Goes up and down.
    Gauge,
    Histogram,
    /// A count and a sum, without quantiles.
    Summary,
}

impl Kind {
    /// The name Prometheus' `# TYPE` line gives it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }

    /// The kind a map's values are, or `None` for maps whose values are
    /// not numbers (strings, stacks, records), which have no metric.
    pub fn of(map: &MapPrint) -> Option<Kind> {
        Some(match map.kind {
            MapKind::Count | MapKind::Sum => Kind::Counter,
            // A time series' gauge is its latest interval's value.
            MapKind::Min | MapKind::Max | MapKind::Avg | MapKind::TSeries => Kind::Gauge,
            MapKind::Hist | MapKind::Lhist => Kind::Histogram,
            MapKind::Stats => Kind::Summary,
            MapKind::Plain => {
                let numbers = map.rows.iter().all(|r| {
                    matches!(
                        r.value,
                        MapValue::Datum(Datum::Int { .. }) | MapValue::Number(_)
                    )
                });
                if !numbers {
                    return None;
                }
                Kind::Gauge
            }
        })
    }
}

/// Metrics of one name: a family of series that differ by their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The name, without the `_total` a Prometheus counter adds.
    pub name: String,
    pub help: String,
    pub kind: Kind,
    pub series: Vec<Series>,
}

/// One series: its labels, in order, and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Vec<(String, String)>,
    pub value: Value,
}

/// A series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter or a gauge.
    Number(i128),
    /// A gauge that is no integer (seconds a program took to load).
    Float(f64),
    Histogram {
        /// `(inclusive upper bound, count of values up to it)`, ascending;
        /// the `+Inf` bucket is `count`.
        buckets: Vec<(i128, u64)>,
        count: u64,
        sum: i128,
    },
    Summary {
        count: u64,
        sum: i128,
    },
}

/// How one map is named as a metric.
#[derive(Clone, Copy, Debug)]
pub struct Naming<'a> {
    /// The family's name.
    pub name: &'a str,
    pub help: &'a str,
    /// A label name for each part of the key, in order.
    pub labels: &'a [String],
    /// Labels every series gets first (`program="..."`).
    pub constant: &'a [(String, String)],
}

impl Family {
    /// A family of one series per label set.
    pub fn new(name: &str, help: &str, kind: Kind, series: Vec<Series>) -> Family {
        Family {
            name: name.to_string(),
            help: help.to_string(),
            kind,
            series,
        }
    }

    /// The metric of a map's entries, or `None` for a map whose values
    /// are not numbers. `sums` holds the sum of each histogram row's
    /// values, in row order (`sdt_runtime::MapSnapshot::sums`); rows of a
    /// plain map whose value is not an integer are left out.
    pub fn of_map(map: &MapPrint, sums: &[i128], naming: &Naming<'_>) -> Option<Family> {
        let kind = Kind::of(map)?;
        let mut histograms = 0;
        let series = map
            .rows
            .iter()
            .filter_map(|row| {
                let value = match &row.value {
                    MapValue::Number(n) => Value::Number(*n),
                    series @ MapValue::Series { .. } => Value::Number(series.number()),
                    MapValue::Datum(d @ Datum::Int { .. }) => Value::Number(d.as_int()),
                    MapValue::Datum(_) => return None,
                    MapValue::Stats { count, total, .. } => Value::Summary {
                        count: *count,
                        sum: *total,
                    },
                    MapValue::Buckets(buckets) => {
                        let mut cumulative = 0u64;
                        let mut bounds = Vec::with_capacity(buckets.len());
                        for b in buckets {
                            cumulative += b.count;
                            if let Some(high) = b.high {
                                bounds.push((high - 1, cumulative));
                            }
                        }
                        let sum = sums.get(histograms).copied().unwrap_or(0);
                        histograms += 1;
                        Value::Histogram {
                            buckets: bounds,
                            count: cumulative,
                            sum,
                        }
                    }
                };
                let mut labels = naming.constant.to_vec();
                for (i, part) in row.key.iter().enumerate() {
                    let name = naming
                        .labels
                        .get(i)
                        .cloned()
                        .unwrap_or_else(|| format!("key{i}"));
                    labels.push((name, datum(part, Context::Key)));
                }
                Some(Series { labels, value })
            })
            .collect();
        Some(Family::new(naming.name, naming.help, kind, series))
    }
}

/// Where metric families come from at each scrape or push: what they
/// are then, read at the time.
pub trait Source: Send + Sync {
    fn families(&self) -> Vec<Family>;
}

/// Several sources, one after the other.
impl Source for Vec<std::sync::Arc<dyn Source>> {
    fn families(&self) -> Vec<Family> {
        self.iter().flat_map(|s| s.families()).collect()
    }
}

/// Families with the same name put together, in the order they first
/// come. A family whose kind differs from the first of its name cannot
/// join it: it is left out, and its name returned.
pub fn merge(families: Vec<Family>) -> (Vec<Family>, Vec<String>) {
    let mut merged: Vec<Family> = Vec::with_capacity(families.len());
    let mut conflicts = Vec::new();
    for family in families {
        match merged.iter_mut().find(|f| f.name == family.name) {
            Some(f) if f.kind == family.kind => f.series.extend(family.series),
            Some(_) => conflicts.push(family.name),
            None => merged.push(family),
        }
    }
    (merged, conflicts)
}

/// Whether `name` can name a metric: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `name` can name a label: `[a-zA-Z_][a-zA-Z0-9_]*`, and not
/// `__...`, which Prometheus keeps for itself.
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bucket, MapRow};

    fn map(kind: MapKind, rows: Vec<MapRow>) -> MapPrint {
        MapPrint {
            name: "@m".into(),
            kind,
            keyed: true,
            rows,
            div: 1,
        }
    }

    fn row(key: &str, value: MapValue) -> MapRow {
        MapRow {
            key: vec![Datum::Str(key.as_bytes().to_vec())],
            value,
        }
    }

    const LABELS: &[String] = &[];

    fn naming(labels: &[String]) -> Naming<'_> {
        Naming {
            name: "m",
            help: "",
            labels,
            constant: &[],
        }
    }

    #[test]
    fn kinds_follow_the_table() {
        let n = |k| Kind::of(&map(k, vec![row("a", MapValue::Number(1))]));
        assert_eq!(n(MapKind::Count), Some(Kind::Counter));
        assert_eq!(n(MapKind::Sum), Some(Kind::Counter));
        assert_eq!(n(MapKind::Avg), Some(Kind::Gauge));
        assert_eq!(n(MapKind::Min), Some(Kind::Gauge));
        assert_eq!(n(MapKind::Stats), Some(Kind::Summary));
        assert_eq!(n(MapKind::Hist), Some(Kind::Histogram));
        let text = map(
            MapKind::Plain,
            vec![row("a", MapValue::Datum(Datum::Str(b"x".to_vec())))],
        );
        assert_eq!(Kind::of(&text), None, "strings are no metric");
        let ints = map(
            MapKind::Plain,
            vec![row("a", MapValue::Datum(Datum::int(-3)))],
        );
        let family = Family::of_map(&ints, &[], &naming(LABELS)).unwrap();
        assert_eq!(family.kind, Kind::Gauge);
        assert_eq!(family.series[0].value, Value::Number(-3));
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_inclusive_bounds() {
        let b = |low, high, count| Bucket { low, high, count };
        // hist of 0, 5, 6 and 300: [0], [1], [2, 4), [4, 8), ..., [256, 512).
        let buckets = vec![
            b(Some(0), Some(1), 1),
            b(Some(1), Some(2), 0),
            b(Some(2), Some(4), 0),
            b(Some(4), Some(8), 2),
            b(Some(256), Some(512), 1),
            b(Some(512), None, 0),
        ];
        let h = map(MapKind::Hist, vec![row("GET", MapValue::Buckets(buckets))]);
        let labels = ["method".to_string()];
        let family = Family::of_map(&h, &[311], &naming(&labels)).unwrap();
        assert_eq!(
            family.series,
            [Series {
                labels: vec![("method".into(), "GET".into())],
                value: Value::Histogram {
                    buckets: vec![(0, 1), (1, 1), (3, 1), (7, 3), (511, 4)],
                    count: 4,
                    sum: 311,
                },
            }]
        );
    }

    #[test]
    fn merging_keeps_one_family_per_name_and_refuses_other_kinds() {
        let f = |name: &str, kind| Family::new(name, "", kind, Vec::new());
        let (merged, conflicts) = merge(vec![
            f("a", Kind::Counter),
            f("b", Kind::Gauge),
            f("a", Kind::Counter),
            f("b", Kind::Histogram),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(conflicts, ["b"]);
    }

    #[test]
    fn names() {
        assert!(is_metric_name("sdt_reqs"));
        assert!(is_metric_name("a:b"));
        assert!(!is_metric_name("1a"));
        assert!(!is_metric_name(""));
        assert!(is_label_name("method"));
        assert!(!is_label_name("__name"));
        assert!(!is_label_name("a-b"));
    }
}
