//! Reads of the traced process's memory that failed, by read site, from
//! the counters the programs keep in the lost map (see sdt-codegen's
//! `user` module): what each site read, where in the script, in which
//! probe, how often it failed and with which error.

use sdt_codegen::layout::{self, ReadWhat};
use sdt_output::FailedRead;
use sdt_script::Compilation;

/// The read sites of a compilation, named for people.
#[derive(Clone, Debug, Default)]
pub struct ReadSites {
    /// `(what, at, probe)` by read site.
    names: Vec<(String, String, String)>,
    /// User maps: the read sites' counters follow theirs.
    maps: usize,
}

impl ReadSites {
    /// The read sites of `compilation`'s programs.
    pub fn new(compilation: &Compilation) -> ReadSites {
        let source = &compilation.source;
        let names = compilation
            .compiled
            .read_sites
            .iter()
            .map(|site| {
                let probe = compilation
                    .program
                    .probes
                    .get(site.instance)
                    .and_then(|p| {
                        let block = compilation.script.probes.get(p.block)?;
                        Some(block.attach_points.get(p.attach_point)?.text.clone())
                    })
                    .unwrap_or_default();
                let (what, at) = match site.what {
                    ReadWhat::Expr(span) => (
                        source.get(span.range()).unwrap_or("a read").to_string(),
                        format!("{}:{}", compilation.source_name, span.location(source)),
                    ),
                    ReadWhat::EventArg(n) => (format!("arg{n} as a string"), String::new()),
                };
                (what, at, probe)
            })
            .collect();
        ReadSites {
            names,
            maps: compilation.program.maps.len(),
        }
    }

    /// The sites whose reads failed, from `per_cpu(index)`, each CPU's
    /// value of counter `index` of the lost map.
    pub fn failed(&self, per_cpu: impl Fn(u32) -> Vec<u64>) -> Vec<FailedRead> {
        self.names
            .iter()
            .enumerate()
            .filter_map(|(site, (what, at, probe))| {
                let (count, last) = layout::read_failure_counters(self.maps, site as u32);
                let count: u64 = per_cpu(count).iter().sum();
                if count == 0 {
                    return None;
                }
                // Each CPU keeps the last error it saw: any will do.
                let error = per_cpu(last)
                    .into_iter()
                    .map(|e| e as i64)
                    .find(|&e| e != 0)
                    .unwrap_or(0);
                Some(FailedRead {
                    what: what.clone(),
                    at: at.clone(),
                    probe: probe.clone(),
                    count,
                    error,
                })
            })
            .collect()
    }
}
