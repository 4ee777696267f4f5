//! A script's `// sdt: span NAME = START .. END [with ATTR = EXPR, ...]`
//! pragmas, as probes in sdt's own language.
//!
//! Each pragma becomes two blocks added after the script: `START` notes
//! the time and the attributes by thread, `END` (in a thread where a
//! `START` is open) sends one `printf` record with the start, the end, the
//! process, the thread and the attributes, and forgets them. The record's
//! format starts with a marker that names the span, by which
//! [`rules`] finds it in the compiled program, and [`sdt_otlp::SpanSink`]
//! takes those records out of the output. So a span costs what those two
//! small blocks cost, only when `--otlp` is given, and the script stays
//! plain bpftrace. A `START` seen again before its `END` starts the span
//! over; spans of one pragma do not nest within a thread.
//!
//! Without `with`, the attributes are the start probe's arguments,
//! `arg0`... as integers: for a USDT probe as many as its notes give
//! (found by compiling once without them), for other probes none.
//!
//! The maps this adds are named `@__sdt_span...`: sdt's own, never
//! printed or exported.

use sdt_job::program::BoundTarget as Target;
use sdt_job::program::Compilation;
use sdt_job::program::Diagnostics;
use sdt_otlp::{SpanRule, Timing};

use crate::config::{Config, SpanConfig};
use crate::naming::INTERNAL_MAP_PREFIX;

/// The marker that starts the format of span `index`'s record.
fn marker(index: usize) -> String {
    format!("{INTERNAL_MAP_PREFIX}span{index} ")
}

/// The blocks the span pragmas add, with `attributes(i)` the attributes
/// of span `i`.
fn blocks(spans: &[SpanConfig], attributes: &dyn Fn(usize) -> Vec<(String, String)>) -> String {
    let mut text = String::new();
    for (i, span) in spans.iter().enumerate() {
        let map = |part: &str| format!("@{INTERNAL_MAP_PREFIX}span{i}_{part}");
        let attrs = attributes(i);
        text.push_str(&format!(
            "\n// sdt: what the span pragma `{}` adds\n{} {{ {}[tid] = nsecs;",
            span.name,
            span.start,
            map("start")
        ));
        for (j, (_, expr)) in attrs.iter().enumerate() {
            text.push_str(&format!(" {}[tid] = {expr};", map(&format!("a{j}"))));
        }
        let specs = " %s".repeat(attrs.len());
        let values: String = (0..attrs.len())
            .map(|j| format!(", {}[tid]", map(&format!("a{j}"))))
            .collect();
        text.push_str(&format!(
            " }}\n{} /{}[tid]/ {{ printf(\"{}%d %d %d %d{specs}\\n\", {}[tid], nsecs, pid, tid{values}); delete({}[tid]);",
            span.end,
            map("start"),
            marker(i),
            map("start"),
            map("start"),
        ));
        for j in 0..attrs.len() {
            text.push_str(&format!(" delete({}[tid]);", map(&format!("a{j}"))));
        }
        text.push_str(" }\n");
    }
    text
}

/// Compiles `source` with its span pragmas' blocks added, through
/// `compile`; returns the whole text compiled (for errors), the
/// compilation and the rules that find its spans.
pub fn compile_with_spans(
    source: &str,
    config: &Config,
    compile: &dyn Fn(&str) -> Result<Compilation, Diagnostics>,
) -> Result<(String, Compilation, Vec<SpanRule>), (String, Diagnostics)> {
    let spans = &config.spans;
    if spans.is_empty() {
        let compilation = compile(source).map_err(|d| (source.to_string(), d))?;
        return Ok((source.to_string(), compilation, Vec::new()));
    }
    let given = |i: usize| spans[i].attributes.clone();
    let first_text = format!("{source}{}", blocks(spans, &|i| given(i)));
    let first = compile(&first_text).map_err(|d| (first_text.clone(), d))?;
    if spans.iter().all(|s| !s.attributes.is_empty()) {
        let rules = rules(&first, config);
        return Ok((first_text, first, rules));
    }
    // The start probes' arguments, now that their sites are known.
    let user_blocks = first.script.probes.len() - 2 * spans.len();
    let counts: Vec<usize> = (0..spans.len())
        .map(|i| {
            first.bound.get(user_blocks + 2 * i).map_or(0, |points| {
                points
                    .iter()
                    .filter_map(|b| match &b.target {
                        Target::Usdt(sites) => sites.iter().map(|s| s.args.len()).min(),
                        _ => Some(0),
                    })
                    .min()
                    .unwrap_or(0)
            })
        })
        .collect();
    let defaulted = |i: usize| {
        if spans[i].attributes.is_empty() {
            (0..counts[i])
                .map(|n| (format!("arg{n}"), format!("arg{n}")))
                .collect()
        } else {
            given(i)
        }
    };
    let text = format!("{source}{}", blocks(spans, &defaulted));
    let compilation = compile(&text).map_err(|d| (text.clone(), d))?;
    let mut config = config.clone();
    for (i, span) in config.spans.iter_mut().enumerate() {
        span.attributes = defaulted(i);
    }
    let rules = rules(&compilation, &config);
    Ok((text, compilation, rules))
}

/// The rules that read the span records of `compilation`, whose span
/// blocks came from `config`.
fn rules(compilation: &Compilation, config: &Config) -> Vec<SpanRule> {
    config
        .spans
        .iter()
        .enumerate()
        .filter_map(|(i, span)| {
            let marker = marker(i);
            let format = compilation
                .program
                .formats
                .iter()
                .position(|f| f.text.starts_with(marker.as_bytes()))?;
            Some(SpanRule {
                format: format as u32,
                name: span.name.clone(),
                timing: Timing::StartEnd { start: 0, end: 1 },
                pid: 2,
                tid: 3,
                attributes: span
                    .attributes
                    .iter()
                    .enumerate()
                    .map(|(j, (name, _))| (name.clone(), 4 + j))
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_blocks_are_plain_bpftrace() {
        let config = Config::read(
            (
                "t.bt",
                "// sdt: span q = usdt:./s:p:start .. usdt:./s:p:done with text = str(arg0)\n",
            ),
            None,
        )
        .unwrap();
        let text = blocks(&config.spans, &|i| config.spans[i].attributes.clone());
        assert_eq!(
            text,
            "\n// sdt: what the span pragma `q` adds\n\
             usdt:./s:p:start { @__sdt_span0_start[tid] = nsecs; @__sdt_span0_a0[tid] = str(arg0); }\n\
             usdt:./s:p:done /@__sdt_span0_start[tid]/ { printf(\"__sdt_span0 %d %d %d %d %s\\n\", \
             @__sdt_span0_start[tid], nsecs, pid, tid, @__sdt_span0_a0[tid]); \
             delete(@__sdt_span0_start[tid]); delete(@__sdt_span0_a0[tid]); }\n"
        );
        // The checker takes it as it takes any script.
        let (program, _) = sdt_job::program::compile_offline(&text, &[]).unwrap();
        let compilation = Compilation {
            program,
            ..Compilation::default()
        };
        let rules = rules(&compilation, &config);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].attributes, [("text".to_string(), 4)]);
    }
}
