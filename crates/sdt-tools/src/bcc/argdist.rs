//! BCC's `argdist`: how often each value of some expressions comes at
//! a probe (`-C`), or their log2 histogram (`-H`).
//!
//! A specifier is
//! `{p,r,t,u}:LIB:FUNC(SIGNATURE)[:TYPE[,TYPE...]:EXPR[,EXPR...][:FILTER]][#LABEL]`.
//! Each becomes a block that counts by its expressions (cast to their
//! types; `char*` read as strings) or adds one to a histogram; a return
//! probe that uses `$latency` or `$entry(PARAM)` gets an entry probe
//! that keeps the time and the parameters per thread. Every interval a
//! block prints the maps, and the report shows them as BCC does: the
//! time, then each `-C` probe's counts under its label, least frequent
//! first, then each `-H` probe's histogram.

use std::process::ExitCode;

use anyhow::{anyhow, bail};
use regex::Regex;
use sdt_output::{Cell, Column, Datum, Event, Histogram, Layout, MapPrint, MapValue, Sink, Table};

use super::cexpr::{self, Kind, Param, Scope, Type};
use super::target::{self, Point};
use super::{log2_slots, report_blocks, reports_in, time_of_day, Maps, Program, Reported, Run};
use crate::execute::Reports;
use crate::report::Report;
use crate::Common;

/// What `argdist` is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `-C` specifiers, in order.
    pub counts: Vec<String>,
    /// `-H` specifiers, in order.
    pub histograms: Vec<String>,
    /// Only this thread (`-t`).
    pub tid: Option<i32>,
    /// Bytes of a `char*` value (`-z`, default 80).
    pub string_size: u32,
    /// Seconds between reports (`-i`, default 1).
    pub interval: u64,
    /// Seconds to trace (`-d`).
    pub duration: Option<u64>,
    /// Reports to print (`-n`).
    pub number: Option<u64>,
    /// Print the program on standard error (`-v`).
    pub verbose: bool,
    /// Keep counting across reports (`-c`).
    pub cumulative: bool,
    /// Only the N most frequent values (`-T`).
    pub top: Option<usize>,
    /// Headers for the expressions' types and constants (`-I`).
    pub includes: Vec<std::path::PathBuf>,
}

/// One specifier, parsed.
#[derive(Clone, Debug)]
struct Spec {
    raw: String,
    histogram: bool,
    kind: Kind,
    points: Vec<Point>,
    signature: Vec<Param>,
    /// `(type, expression)` pairs; none for a count of calls.
    exprs: Vec<(String, String)>,
    /// The expression is the one a return probe has without any
    /// (`int:$retval`), shown as `retval`.
    default_retval: bool,
    filter: Option<String>,
    label: Option<String>,
}

impl Spec {
    /// The expression as the report shows it: as written, `$entry(x)`
    /// as `x`; the default `$retval` as `retval`.
    fn shown(&self, expr: &str) -> String {
        if self.default_retval {
            return "retval".into();
        }
        let entry = Regex::new(r"\$entry\(\s*(\w+)\s*\)").expect("a valid regex");
        entry.replace_all(expr, "$1").into_owned()
    }

    /// What the report calls it: the label, else the spec (counts) or the
    /// expression (histograms).
    fn title(&self) -> String {
        if let Some(label) = &self.label {
            return label.clone();
        }
        match (self.histogram, self.exprs.first()) {
            (false, _) => self.raw.clone(),
            (true, Some((_, expr))) => self.shown(expr),
            (true, None) => "retval".into(),
        }
    }
}

/// Parses a specifier, in BCC's words where it fails.
fn parse(raw: &str, histogram: bool, pid: Option<i32>) -> anyhow::Result<Spec> {
    let (text, label) = match raw.matches('#').count() {
        1 => {
            let (text, label) = raw.split_once('#').unwrap_or((raw, ""));
            (text, Some(label.to_string()))
        }
        0 => (raw, None),
        _ => (raw.split('#').next().unwrap_or(raw), None),
    };
    let parts: Vec<&str> = text.trim().split(':').collect();
    if parts.len() < 3 {
        bail!("at least the probe type, library, and function signature must be specified");
    }
    if parts.len() > 6 {
        bail!("extraneous ':'-separated parts detected");
    }
    let kind = match parts[0] {
        "p" => Kind::Entry,
        "r" => Kind::Return,
        "t" => Kind::Tracepoint,
        "u" => Kind::Usdt,
        other => bail!("probe type must be 'p', 'r', 't', or 'u' but got '{other}'"),
    };
    let call = Regex::new(r"^(\S+?)\((.*)\)$").expect("a valid regex");
    let captures = call
        .captures(parts[2])
        .ok_or_else(|| anyhow!("function signature '{}' has an invalid format", parts[2]))?;
    let function = &captures[1];
    let signature = match kind {
        Kind::Entry | Kind::Return => cexpr::signature(&captures[2])?,
        _ => Vec::new(),
    };
    let points = match kind {
        Kind::Entry | Kind::Return => vec![target::function_point(
            kind == Kind::Return,
            parts[1],
            function,
            0,
        )?],
        Kind::Usdt => target::usdt_points(parts[1], function, pid)?,
        Kind::Tracepoint => vec![Point::Tracepoint {
            category: parts[1].to_string(),
            event: function.to_string(),
        }],
    };
    let default_retval = parts.len() < 5 && kind == Kind::Return;
    let exprs = if parts.len() < 5 {
        match (kind, histogram) {
            (Kind::Return, _) => vec![("int".to_string(), "$retval".to_string())],
            (_, true) => bail!("histograms must have expr"),
            _ => Vec::new(),
        }
    } else {
        let split = |text: &str| -> Vec<String> {
            text.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let (types, exprs) = (split(parts[3]), split(parts[4]));
        if types.is_empty() {
            bail!("no expr types specified");
        }
        if exprs.is_empty() {
            bail!("no exprs specified");
        }
        if types.len() != exprs.len() {
            bail!("mismatched # of exprs and types");
        }
        if histogram && exprs.len() > 1 {
            bail!("histograms can only have 1 expr");
        }
        types.into_iter().zip(exprs).collect()
    };
    Ok(Spec {
        raw: raw.to_string(),
        histogram,
        kind,
        points,
        signature,
        exprs,
        default_retval,
        filter: parts
            .get(5)
            .map(|f| f.to_string())
            .filter(|f| !f.trim().is_empty()),
        label,
    })
}

/// The blocks of spec `n`: an entry probe if its return probe needs
/// one, then the probe that counts.
fn blocks(spec: &Spec, n: usize, options: &Options) -> anyhow::Result<String> {
    let texts: Vec<&str> = spec
        .exprs
        .iter()
        .map(|(_, e)| e.as_str())
        .chain(spec.filter.as_deref())
        .collect();
    let entry_names: Vec<String> = {
        let entry = Regex::new(r"\$entry\(\s*(\w+)\s*\)").expect("a valid regex");
        let mut names: Vec<String> = texts
            .iter()
            .flat_map(|t| entry.captures_iter(t).map(|c| c[1].to_string()))
            .collect();
        names.sort();
        names.dedup();
        names
    };
    let latency = texts.iter().any(|t| t.contains("$latency"));
    let mut text = String::new();
    let attach: Vec<String> = spec.points.iter().map(Point::attach).collect();
    let needs_entry = spec.kind == Kind::Return && (latency || !entry_names.is_empty());
    let mut preamble = String::new();
    if needs_entry {
        let Some(Point::Return { path, function }) = spec.points.first() else {
            bail!("$latency and $entry() are for return probes (r:)");
        };
        let entry_point = Point::Entry {
            path: path.clone(),
            function: function.clone(),
            offset: 0,
        };
        let entry_scope = Scope::new(Kind::Entry, &spec.signature);
        let mut saved = format!("  @entry{n}_ns[tid] = nsecs;\n");
        for name in &entry_names {
            if !spec.signature.iter().any(|p| &p.name == name) {
                bail!("$entry({name}): no such param");
            }
            let value = cexpr::translate(name, &entry_scope)?;
            saved.push_str(&format!("  @entry{n}_{name}[tid] = {value};\n"));
        }
        text.push_str(&format!("{} {{\n{saved}}}\n", entry_point.attach()));
        preamble.push_str(&format!("  $latency = nsecs - @entry{n}_ns[tid];\n"));
        preamble.push_str(&format!("  delete(@entry{n}_ns, tid);\n"));
        for name in &entry_names {
            preamble.push_str(&format!(
                "  $entry_{name} = @entry{n}_{name}[tid];\n  delete(@entry{n}_{name}, tid);\n"
            ));
        }
    }
    let entry_var = |name: &str| Some(format!("$entry_{name}"));
    let scope = Scope {
        kind: spec.kind,
        signature: &spec.signature,
        entry: needs_entry.then_some(&entry_var as cexpr::EntryVar<'_>),
        latency: (needs_entry && latency).then_some("$latency"),
    };
    let mut keys = Vec::new();
    for (ty, expr) in &spec.exprs {
        let value = cexpr::translate(expr, &scope)?;
        keys.push(match cexpr::c_type(ty) {
            Type::Integer(ty) => format!("({ty})({value})"),
            Type::String if value == "comm" => value,
            Type::String => format!("str({value}, {})", options.string_size),
            Type::Other(_) if spec.histogram => {
                bail!("histograms need an integer type, not {ty}")
            }
            Type::Other(_) => value,
        });
    }
    let update = match (spec.histogram, keys.as_slice()) {
        (true, [value]) => format!("@h{n} = hist({value});"),
        (true, _) => bail!("histograms must have expr"),
        (false, []) => format!("@c{n} = count();"),
        (false, keys) => format!("@c{n}[{}] = count();", keys.join(", ")),
    };
    let mut conditions = Vec::new();
    if let Some(tid) = options.tid {
        conditions.push(format!("tid == {tid}"));
    }
    if let Some(filter) = &spec.filter {
        conditions.push(cexpr::translate(filter, &scope)?);
    }
    let guard = if needs_entry {
        format!(" /has_key(@entry{n}_ns, tid)/")
    } else {
        String::new()
    };
    let body = match conditions.as_slice() {
        [] => format!("  {update}\n"),
        some => format!(
            "  if ({}) {{\n    {update}\n  }}\n",
            some.iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" && ")
        ),
    };
    text.push_str(&format!(
        "{}{guard} {{\n{preamble}{body}}}\n",
        attach.join(",\n")
    ));
    Ok(text)
}

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    if options.counts.is_empty() && options.histograms.is_empty() {
        bail!("at least one specifier is required");
    }
    let specs: Vec<Spec> = options
        .counts
        .iter()
        .map(|raw| (raw, false))
        .chain(options.histograms.iter().map(|raw| (raw, true)))
        .map(|(raw, histogram)| {
            parse(raw, histogram, common.pid())
                .map_err(|e| anyhow!("error parsing probe '{raw}': {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut program = Program::new("sdt argdist: values of expressions at probes");
    let mut print = String::new();
    for (n, spec) in specs.iter().enumerate() {
        let text = blocks(spec, n, options)
            .map_err(|e| anyhow!("error parsing probe '{}': {e}", spec.raw))?;
        program.add(&spec.raw, &text);
        let map = if spec.histogram { "h" } else { "c" };
        print.push_str(&format!("  print(@{map}{n});\n"));
        if !options.cumulative {
            print.push_str(&format!("  clear(@{map}{n});\n"));
        }
    }
    program.add("", &report_blocks(Some(options.interval), &print));
    let limit = match (
        options.number,
        reports_in(options.interval, options.duration),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let reports = Reports::new(limit);
    let report = Distributions {
        specs,
        top: options.top,
        maps: Maps::default(),
        reports: reports.clone(),
    };
    let mut run = Run::new(common, program);
    run.errors = "error parsing probe";
    run.strlen = Some(options.string_size.clamp(1, 4095) + 1);
    run.includes = options.includes.clone();
    run.verbose = options.verbose;
    run.reports = Some(reports);
    run.run(report, |_, _| {})
}

/// `argdist`'s report.
struct Distributions {
    specs: Vec<Spec>,
    top: Option<usize>,
    maps: Maps,
    reports: Reports,
}

impl Distributions {
    fn counts(&self, n: usize, spec: &Spec, map: Option<&MapPrint>, time: &str) -> Table {
        let mut rows: Vec<(i128, String, Vec<Cell>)> = map
            .map(|map| {
                map.rows
                    .iter()
                    .map(|row| {
                        let values: Vec<String> = row.key.iter().map(Datum::to_text).collect();
                        let event = if spec.exprs.is_empty() {
                            "total calls".to_string()
                        } else {
                            spec.exprs
                                .iter()
                                .zip(&values)
                                .map(|((_, expr), value)| format!("{} = {value}", spec.shown(expr)))
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        let cells = row.key.iter().map(|k| match k {
                            Datum::Int { .. } => Cell::Int(k.as_int()),
                            other => Cell::Text(other.to_text()),
                        });
                        (row.value.number(), event, cells.collect())
                    })
                    .collect()
            })
            .unwrap_or_default();
        rows.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        if let Some(top) = self.top {
            rows.drain(..rows.len().saturating_sub(top));
        }
        Table {
            key: "counts",
            columns: vec![
                Column::both("count", "COUNT").width(10),
                Column::both("event", "EVENT"),
                Column::json("values"),
            ],
            rows: rows
                .into_iter()
                .map(|(count, event, values)| {
                    vec![Cell::Int(count), Cell::Text(event), Cell::List(values)]
                })
                .collect(),
            fields: vec![
                ("time", Cell::Text(time.to_string())),
                ("probe", Cell::Text(spec.title())),
                ("n", Cell::Int(n as i128)),
            ],
            notes: Vec::new(),
            layout: Layout {
                above: vec![spec.title()],
                indent: "\t",
                ..Layout::default()
            },
        }
    }

    fn report(&self, maps: &Reported, out: &mut dyn Sink) {
        let time = time_of_day();
        out.event(Event::Heading(&format!("[{time}]")));
        for (n, spec) in self.specs.iter().enumerate() {
            if spec.histogram {
                let slots = match maps.get(&format!("@h{n}")).and_then(|m| m.rows.first()) {
                    Some(row) => match &row.value {
                        MapValue::Buckets(buckets) => log2_slots(buckets),
                        _ => Vec::new(),
                    },
                    None => Vec::new(),
                };
                out.event(Event::Histogram(&Histogram {
                    key: "buckets",
                    label: spec.title(),
                    slots,
                    fields: vec![
                        ("time", Cell::Text(time.clone())),
                        ("probe", Cell::Text(spec.title())),
                    ],
                    above: Vec::new(),
                }));
            } else {
                let table = self.counts(n, spec, maps.get(&format!("@c{n}")), &time);
                out.event(Event::Table(&table));
            }
        }
    }
}

impl Report for Distributions {
    fn map(&mut self, map: &MapPrint, _: &mut dyn Sink) {
        self.maps.add(map);
    }

    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        if let Some((maps, _)) = self.maps.ended(args) {
            self.report(&maps, out);
            self.reports.add();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specifier_errors_read_as_bcc_s() {
        let error = |spec: &str, histogram| parse(spec, histogram, None).unwrap_err().to_string();
        assert_eq!(
            error("p:c", false),
            "at least the probe type, library, and function signature must be specified"
        );
        assert_eq!(
            error("p:c:malloc():a:b:c:d", false),
            "extraneous ':'-separated parts detected"
        );
        assert_eq!(
            error("x:c:malloc()", false),
            "probe type must be 'p', 'r', 't', or 'u' but got 'x'"
        );
        assert_eq!(
            error("p:c:malloc", false),
            "function signature 'malloc' has an invalid format"
        );
        assert_eq!(error("p:c:malloc()", true), "histograms must have expr");
        assert_eq!(
            error("p:c:malloc(size_t size):size_t,int:size", false),
            "mismatched # of exprs and types"
        );
        assert_eq!(
            error("p:c:malloc(size_t size)::size", false),
            "no expr types specified"
        );
        assert_eq!(
            error("p:c:malloc(size_t size):int,int:size,size", true),
            "histograms can only have 1 expr"
        );
        assert!(error("p::__kmalloc(size_t size)", false).contains("kernel functions"));
    }

    #[test]
    fn labels_and_shown_expressions() {
        let spec = parse(
            "r:c:malloc(size_t size):u64:$entry(size)#big ones",
            false,
            None,
        )
        .unwrap();
        assert_eq!(spec.label.as_deref(), Some("big ones"));
        assert_eq!(spec.shown("$entry(size) + 1"), "size + 1");
        let spec = parse("r:c:malloc()", true, None).unwrap();
        assert_eq!(spec.title(), "retval");
        assert_eq!(spec.exprs, [("int".to_string(), "$retval".to_string())]);
        let spec = parse("p:c:malloc(size_t size)#a#b", false, None).unwrap();
        assert_eq!(spec.label, None);
        assert_eq!(spec.title(), "p:c:malloc(size_t size)#a#b");
    }

    #[test]
    fn return_probes_keep_what_they_need_at_entry() {
        let spec = parse(
            "r:c:malloc(size_t size):u64,u64:$entry(size),$latency:$latency > 0",
            false,
            None,
        )
        .unwrap();
        let text = blocks(&spec, 0, &Options::default()).unwrap();
        assert!(text.contains("uprobe:"), "{text}");
        assert!(
            text.contains("@entry0_size[tid] = ((uint64)arg0);"),
            "{text}"
        );
        assert!(text.contains("/has_key(@entry0_ns, tid)/"), "{text}");
        assert!(
            text.contains("@c0[(uint64)($entry_size), (uint64)($latency)] = count();"),
            "{text}"
        );
        assert!(text.contains("if (($latency > 0))"), "{text}");
        let spec = parse("r:c:malloc(size_t size):u64:$entry(nope)", false, None).unwrap();
        assert!(blocks(&spec, 0, &Options::default())
            .unwrap_err()
            .to_string()
            .contains("$entry(nope): no such param"));
    }
}
