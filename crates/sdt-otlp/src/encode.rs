//! Metric families and spans as OTLP protobuf messages.
//!
//! Counters are monotonic cumulative sums, gauges gauges, histograms
//! cumulative explicit-bucket histograms (OTLP's bounds are inclusive
//! upper bounds, as Prometheus' `le`, so the buckets are the same),
//! summaries summaries without quantiles. Every point starts at the time
//! the pusher started, so a backend sees one unbroken cumulative series.
//! Labels become attributes. Spans each start a trace of their own, with
//! `process.pid` and `thread.id` among their attributes; the resource
//! names the service (`service.name`) and the machine (`host.name`).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans};
use sdt_output::metrics::{Family, Kind, Value};

use crate::span::{Attribute, Span};

/// Who sends: the resource every metric and span belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub service_name: String,
    pub host_name: String,
}

impl Origin {
    fn resource(&self) -> Resource {
        Resource {
            attributes: vec![
                string("service.name", &self.service_name),
                string("host.name", &self.host_name),
            ],
            ..Default::default()
        }
    }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "sdt".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// An integer as OTLP's `int64`, saturating.
fn int64(n: i128) -> i64 {
    i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
}

/// `families` as one export request; points are stamped `now_ns` and
/// start at `start_ns` (Unix nanoseconds).
pub fn metrics(
    families: &[Family],
    origin: &Origin,
    start_ns: u64,
    now_ns: u64,
) -> ExportMetricsServiceRequest {
    let cumulative = AggregationTemporality::Cumulative as i32;
    let metrics = families
        .iter()
        .map(|family| {
            let number =
                |labels: &[(String, String)], value: number_data_point::Value| NumberDataPoint {
                    attributes: labels.iter().map(|(k, v)| string(k, v)).collect(),
                    start_time_unix_nano: start_ns,
                    time_unix_nano: now_ns,
                    value: Some(value),
                    ..Default::default()
                };
            let numbers = || {
                family
                    .series
                    .iter()
                    .filter_map(|s| match s.value {
                        Value::Number(n) => {
                            Some(number(&s.labels, number_data_point::Value::AsInt(int64(n))))
                        }
                        Value::Float(x) => {
                            Some(number(&s.labels, number_data_point::Value::AsDouble(x)))
                        }
                        _ => None,
                    })
                    .collect()
            };
            let data = match family.kind {
                Kind::Counter => metric::Data::Sum(Sum {
                    data_points: numbers(),
                    aggregation_temporality: cumulative,
                    is_monotonic: true,
                }),
                Kind::Gauge => metric::Data::Gauge(Gauge {
                    data_points: numbers(),
                }),
                Kind::Histogram => metric::Data::Histogram(Histogram {
                    data_points: family
                        .series
                        .iter()
                        .filter_map(|s| match &s.value {
                            Value::Histogram {
                                buckets,
                                count,
                                sum,
                            } => {
                                // OTLP counts each bucket alone; the last
                                // one, past every bound, is +Inf.
                                let mut below = 0;
                                let mut counts: Vec<u64> = buckets
                                    .iter()
                                    .map(|(_, cumulative)| {
                                        let n = cumulative - below;
                                        below = *cumulative;
                                        n
                                    })
                                    .collect();
                                counts.push(count - below);
                                Some(HistogramDataPoint {
                                    attributes: s
                                        .labels
                                        .iter()
                                        .map(|(k, v)| string(k, v))
                                        .collect(),
                                    start_time_unix_nano: start_ns,
                                    time_unix_nano: now_ns,
                                    count: *count,
                                    sum: Some(*sum as f64),
                                    bucket_counts: counts,
                                    explicit_bounds: buckets
                                        .iter()
                                        .map(|(le, _)| *le as f64)
                                        .collect(),
                                    ..Default::default()
                                })
                            }
                            _ => None,
                        })
                        .collect(),
                    aggregation_temporality: cumulative,
                }),
                Kind::Summary => metric::Data::Summary(Summary {
                    data_points: family
                        .series
                        .iter()
                        .filter_map(|s| match s.value {
                            Value::Summary { count, sum } => Some(SummaryDataPoint {
                                attributes: s.labels.iter().map(|(k, v)| string(k, v)).collect(),
                                start_time_unix_nano: start_ns,
                                time_unix_nano: now_ns,
                                count,
                                sum: sum as f64,
                                ..Default::default()
                            }),
                            _ => None,
                        })
                        .collect(),
                }),
            };
            Metric {
                name: family.name.clone(),
                description: family.help.clone(),
                data: Some(data),
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(origin.resource()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// `spans` as one export request, each with the ids `ids` gives it:
/// `(trace id, span id)`.
pub fn spans(
    spans: &[Span],
    origin: &Origin,
    mut ids: impl FnMut() -> ([u8; 16], [u8; 8]),
) -> ExportTraceServiceRequest {
    let spans = spans
        .iter()
        .map(|span| {
            let (trace_id, span_id) = ids();
            let mut attributes = vec![
                int("process.pid", i64::from(span.pid)),
                int("thread.id", i64::from(span.tid)),
            ];
            attributes.extend(span.attributes.iter().map(|(k, v)| match v {
                Attribute::Int(n) => int(k, *n),
                Attribute::Str(s) => string(k, s),
            }));
            opentelemetry_proto::tonic::trace::v1::Span {
                trace_id: trace_id.to_vec(),
                span_id: span_id.to_vec(),
                name: span.name.clone(),
                kind: SpanKind::Internal as i32,
                start_time_unix_nano: span.start_unix_ns,
                end_time_unix_nano: span.end_unix_ns,
                attributes,
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(origin.resource()),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use sdt_output::metrics::Series;

    fn origin() -> Origin {
        Origin {
            service_name: "svc".into(),
            host_name: "h".into(),
        }
    }

    #[test]
    fn histograms_count_each_bucket_alone() {
        let family = Family::new(
            "lat",
            "",
            Kind::Histogram,
            vec![Series {
                labels: vec![("op".into(), "read".into())],
                value: Value::Histogram {
                    buckets: vec![(0, 1), (7, 3)],
                    count: 5,
                    sum: 311,
                },
            }],
        );
        let request = metrics(&[family], &origin(), 1, 2);
        let metric = &request.resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(Data::Histogram(h)) = &metric.data else {
            panic!("{metric:?}");
        };
        let point = &h.data_points[0];
        assert_eq!(point.bucket_counts, [1, 2, 2]);
        assert_eq!(point.explicit_bounds, [0.0, 7.0]);
        assert_eq!((point.count, point.sum), (5, Some(311.0)));
        assert_eq!(point.start_time_unix_nano, 1);
    }

    #[test]
    fn counters_are_monotonic_cumulative_sums() {
        let family = Family::new(
            "reqs",
            "",
            Kind::Counter,
            vec![Series {
                labels: Vec::new(),
                value: Value::Number(9),
            }],
        );
        let request = metrics(&[family], &origin(), 1, 2);
        let metric = &request.resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(Data::Sum(sum)) = &metric.data else {
            panic!("{metric:?}");
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsInt(9))
        );
    }
}
