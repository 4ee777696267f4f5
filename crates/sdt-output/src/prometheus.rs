//! Prometheus' text exposition format (version 0.0.4), for a scrape of
//! `/metrics`: metric families ([`crate::metrics`]) as text.
//!
//! Each family is one `# HELP` and one `# TYPE` line, then its samples.
//! Counters get the `_total` suffix Prometheus' conventions ask for;
//! histograms their cumulative `_bucket{le=...}` samples ending with
//! `le="+Inf"`, then `_sum` and `_count`; summaries `_sum` and `_count`.
//! Values are integers and are written as such. Label values and help
//! texts are escaped as the format says (`\\`, `\"`, `\n`).

use crate::metrics::{Family, Kind, Value};

/// The `Content-Type` of what [`render`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Writes `families` (merged: one per name) to `out`.
pub fn render(families: &[Family], out: &mut String) {
    for family in families {
        let name = match family.kind {
            Kind::Counter if !family.name.ends_with("_total") => format!("{}_total", family.name),
            _ => family.name.clone(),
        };
        out.push_str("# HELP ");
        out.push_str(&name);
        out.push(' ');
        escape(&family.help, false, out);
        out.push_str("\n# TYPE ");
        out.push_str(&name);
        out.push(' ');
        out.push_str(family.kind.name());
        out.push('\n');
        for series in &family.series {
            let labels = &series.labels;
            match &series.value {
                Value::Number(n) => sample(out, &name, "", labels, None, &n.to_string()),
                Value::Float(x) => sample(out, &name, "", labels, None, &float(*x)),
                Value::Histogram {
                    buckets,
                    count,
                    sum,
                } => {
                    for (le, cumulative) in buckets {
                        let le = le.to_string();
                        let bound = Some(("le", le.as_str()));
                        let cumulative = cumulative.to_string();
                        sample(out, &name, "_bucket", labels, bound, &cumulative);
                    }
                    let (count, sum) = (count.to_string(), sum.to_string());
                    let inf = Some(("le", "+Inf"));
                    sample(out, &name, "_bucket", labels, inf, &count);
                    sample(out, &name, "_sum", labels, None, &sum);
                    sample(out, &name, "_count", labels, None, &count);
                }
                Value::Summary { count, sum } => {
                    sample(out, &name, "_sum", labels, None, &sum.to_string());
                    sample(out, &name, "_count", labels, None, &count.to_string());
                }
            }
        }
    }
}

/// `name{labels,extra} value`.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(String, String)],
    extra: Option<(&str, &str)>,
    value: &str,
) {
    out.push_str(name);
    out.push_str(suffix);
    let all = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(extra);
    let mut first = true;
    for (key, value) in all {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(key);
        out.push_str("=\"");
        escape(value, true, out);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// A float as the format spells it: Go's `NaN`, `+Inf`, `-Inf`.
fn float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        x.to_string()
    }
}

/// Escapes a help text (`\\`, `\n`) or a label value (also `\"`).
fn escape(text: &str, quote: bool, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Series;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_kind_in_the_text_format() {
        let families = [
            Family::new(
                "sdt_reqs",
                "requests",
                Kind::Counter,
                vec![Series {
                    labels: labels(&[("method", "GET"), ("path", "/a\"b\\c\nd")]),
                    value: Value::Number(42),
                }],
            ),
            Family::new(
                "sdt_depth",
                "queue depth\nnow",
                Kind::Gauge,
                vec![
                    Series {
                        labels: Vec::new(),
                        value: Value::Number(-3),
                    },
                    Series {
                        labels: labels(&[("q", "b")]),
                        value: Value::Float(0.25),
                    },
                ],
            ),
            Family::new(
                "sdt_lat",
                "",
                Kind::Histogram,
                vec![Series {
                    labels: labels(&[("op", "read")]),
                    value: Value::Histogram {
                        buckets: vec![(0, 1), (7, 3)],
                        count: 4,
                        sum: 311,
                    },
                }],
            ),
            Family::new(
                "sdt_size",
                "",
                Kind::Summary,
                vec![Series {
                    labels: Vec::new(),
                    value: Value::Summary { count: 2, sum: 10 },
                }],
            ),
        ];
        let mut out = String::new();
        render(&families, &mut out);
        assert_eq!(
            out,
            "# HELP sdt_reqs_total requests\n\
             # TYPE sdt_reqs_total counter\n\
             sdt_reqs_total{method=\"GET\",path=\"/a\\\"b\\\\c\\nd\"} 42\n\
             # HELP sdt_depth queue depth\\nnow\n\
             # TYPE sdt_depth gauge\n\
             sdt_depth -3\n\
             sdt_depth{q=\"b\"} 0.25\n\
             # HELP sdt_lat \n\
             # TYPE sdt_lat histogram\n\
             sdt_lat_bucket{op=\"read\",le=\"0\"} 1\n\
             sdt_lat_bucket{op=\"read\",le=\"7\"} 3\n\
             sdt_lat_bucket{op=\"read\",le=\"+Inf\"} 4\n\
             sdt_lat_sum{op=\"read\"} 311\n\
             sdt_lat_count{op=\"read\"} 4\n\
             # HELP sdt_size \n\
             # TYPE sdt_size summary\n\
             sdt_size_sum 10\n\
             sdt_size_count 2\n"
        );
    }
}
