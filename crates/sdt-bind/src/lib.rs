//! Binding: each attach point of a script to the sites, functions or
//! tracepoints it names, and the facts the checker needs from those files.
//!
//! This is where the language meets the traced system. What comes in: the
//! parsed script ([`sdt_lang::ast`]), its positional parameters and the
//! scope (a process, a command, or everything). What goes out: each
//! attach point [`Bound`] to what it names, as `sdt-trace`'s planning
//! found it, so that every safety check on a site (a no-op at a USDT
//! site, an instruction boundary for a uprobe) stays in one place; and
//! [`ObjectFacts`], which answers the checker's questions about those
//! files (C types from DWARF, `args.NAME` of USDT probes, a uprobe's
//! `args` and where each parameter is, symbols for `uaddr()`).
//!
//! It sits between the front end, which reads no file, and the code
//! generator, which knows nothing of files: it must never depend on
//! either of `sdt-codegen` and `sdt-runtime`.

#![forbid(unsafe_code)]

mod abi;
mod kernel;
mod params;
mod types;

pub use types::ObjectFacts;

use std::collections::HashMap;

use sdt_trace::{FunctionSite, FunctionTarget, PlannedSite, Scope, TraceFs, Tracepoint};

use sdt_lang::ast::Script;
use sdt_lang::attach::{self, AttachSpec};
use sdt_lang::check::{AttachInfo, FunctionEntry, TargetInfo, TracepointFormat, UsdtSite};
use sdt_lang::config::MissingProbes;
use sdt_lang::diag::{Diagnostic, Diagnostics, Span};
use sdt_lang::hir::ProbeKind;

/// One attach point, resolved.
#[derive(Clone, Debug)]
pub struct Bound {
    pub spec: AttachSpec,
    /// The attach point as written, with positional parameters in.
    pub text: String,
    pub span: Span,
    pub target: Target,
    /// Sites that were refused and notes that were skipped.
    pub warnings: Vec<String>,
    /// A USDT attach point that also means objects the traced process
    /// maps later (see [`sdt_trace::selects_later_objects`]): the spec to
    /// plan them with. Such an attach point may match nothing at start.
    pub later: Option<sdt_trace::ProbeSpec>,
    /// Such an attach point that matches nothing at start, with the
    /// probes whose names are close to it (`did you mean`): what to say
    /// of it is the session's, which knows what the traced process runs.
    pub pending: Option<Vec<String>>,
}

/// What an attach point resolved to.
#[derive(Clone, Debug)]
pub enum Target {
    /// BEGIN, END, an interval, or a perf event (`profile`, `software`,
    /// `hardware`): nothing to look up.
    Plain,
    Usdt(Vec<PlannedSite>),
    Functions(Vec<FunctionSite>),
    /// One or more tracepoints (a glob), each its own probe instance.
    Tracepoints(Vec<Tracepoint>),
}

impl Bound {
    pub fn kind(&self) -> ProbeKind {
        self.spec.kind()
    }

    /// How many probes bpftrace (0.24 and later) counts: each USDT probe
    /// of each file once however many sites it has, each matched function
    /// and each tracepoint.
    pub fn probe_count(&self) -> usize {
        match &self.target {
            Target::Plain => 1,
            Target::Usdt(sites) => sites
                .iter()
                .map(|s| (&s.path, &s.provider, &s.name))
                .collect::<std::collections::HashSet<_>>()
                .len(),
            Target::Functions(sites) => sites.len(),
            Target::Tracepoints(tps) => tps.len(),
        }
    }

    /// What the checker needs to know.
    pub fn info(&self) -> AttachInfo {
        let targets = match &self.target {
            Target::Tracepoints(tps) => tps
                .iter()
                .map(|tp| TargetInfo {
                    tracepoint: Some(TracepointFormat {
                        name: format!("{}:{}", tp.category, tp.name),
                        fields: tp.fields.clone(),
                    }),
                    object: None,
                    object_file: None,
                    usdt_sites: Vec::new(),
                    functions: Vec::new(),
                })
                .collect(),
            Target::Usdt(sites) => {
                let object = sites.first().map(|s| s.path.clone());
                vec![TargetInfo {
                    tracepoint: None,
                    object_file: sites.first().map(|s| s.attach_path.clone()),
                    usdt_sites: sites
                        .iter()
                        .filter(|s| Some(&s.path) == object.as_ref())
                        .map(|s| UsdtSite {
                            address: s.address,
                            registers: s
                                .args
                                .iter()
                                .map(|a| match a.source {
                                    Ok(sdt_bpf::arg::ArgSource::Reg { ctx_offset, .. }) => {
                                        Some(ctx_offset)
                                    }
                                    _ => None,
                                })
                                .collect(),
                        })
                        .collect(),
                    object,
                    functions: Vec::new(),
                }]
            }
            Target::Functions(sites) => vec![TargetInfo {
                tracepoint: None,
                object: sites.first().map(|s| s.path.clone()),
                object_file: sites.first().map(|s| s.attach_path.clone()),
                usdt_sites: Vec::new(),
                functions: sites
                    .iter()
                    .map(|s| FunctionEntry {
                        object: s.path.clone(),
                        object_file: s.attach_path.clone(),
                        symbol: s.function.clone(),
                        address: s.address - s.offset,
                        offset: s.offset,
                    })
                    .collect(),
            }],
            Target::Plain => vec![TargetInfo::default()],
        };
        AttachInfo {
            kind: self.kind(),
            targets,
        }
    }
}

/// Every attach point of a script, resolved.
#[derive(Debug, Default)]
pub struct Bindings {
    /// `bound[probe][attach point]`, without the missing ones.
    pub bound: Vec<Vec<Bound>>,
    /// Attach points that match nothing, left out as `missing_probes`
    /// allows: `(probe, attach point)` and why.
    pub missing: Vec<(usize, usize, Diagnostic)>,
}

impl Bindings {
    /// Removes the missing attach points from `script`, and the probes
    /// left with none (here too), so that the script and `bound` agree.
    pub fn prune(&mut self, script: &mut Script) {
        for (probe, point, _) in self.missing.iter().rev() {
            script.probes[*probe].attach_points.remove(*point);
        }
        script.probes.retain(|p| !p.attach_points.is_empty());
        self.bound.retain(|points| !points.is_empty());
    }
}

/// Resolves every attach point of `script`. One that matches nothing is
/// an error, or, as `missing` says, left out (see [`Bindings::prune`]);
/// when nothing at all matches, it is an error whatever `missing` says.
pub fn bind(
    script: &Script,
    params: &[String],
    scope: &Scope,
    missing: MissingProbes,
) -> Result<Bindings, Diagnostics> {
    let mut tracefs: Option<TraceFs> = None;
    let mut plans = PlanCache::default();
    let mut errors = Vec::new();
    let mut bindings = Bindings::default();
    let mut any = false;
    for (p, probe) in script.probes.iter().enumerate() {
        let mut points = Vec::new();
        for (a, raw) in probe.attach_points.iter().enumerate() {
            let result = attach::parse(raw, params)
                .map_err(|d| (d, false))
                .and_then(|spec| {
                    let text = raw
                        .fields
                        .iter()
                        .map(|f| substitute(f, params))
                        .collect::<Vec<_>>()
                        .join(":");
                    resolve(spec, text, raw.span, scope, &mut tracefs, &mut plans)
                });
            match result {
                Ok(b) => {
                    any = true;
                    points.push(b);
                }
                Err((d, true)) if missing != MissingProbes::Error => {
                    bindings.missing.push((p, a, d));
                }
                Err((d, _)) => errors.push(d),
            }
        }
        bindings.bound.push(points);
    }
    if !any && errors.is_empty() && !bindings.missing.is_empty() {
        errors.extend(bindings.missing.drain(..).map(|m| m.2));
    }
    if errors.is_empty() {
        Ok(bindings)
    } else {
        Err(Diagnostics(errors))
    }
}

fn substitute(field: &str, params: &[String]) -> String {
    let mut out = field.to_string();
    for (i, p) in params.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), p);
    }
    out
}

/// USDT plans by `(path, provider:name)`: scripts often attach several
/// blocks to one probe, and planning reads and checks the file each time.
/// Each is its sites, the warnings about them, and, for an attach point
/// that waits for objects mapped later and matches nothing yet, the
/// names close to it.
#[derive(Default)]
struct PlanCache(HashMap<PlanKey, Plan>);

type Plan = (Vec<PlannedSite>, Vec<String>, Option<Vec<String>>);

/// The object as written (if any) and the `provider:name` pattern.
type PlanKey = (Option<String>, String);

/// Resolves one attach point; an error says whether the attach point
/// matches nothing (rather than being wrong).
fn resolve(
    spec: AttachSpec,
    text: String,
    span: Span,
    scope: &Scope,
    tracefs: &mut Option<TraceFs>,
    plans: &mut PlanCache,
) -> Result<Bound, (Diagnostic, bool)> {
    let error = |e: sdt_trace::Error| trace_error(e, &spec, span);
    let mut warnings = Vec::new();
    let mut later = None;
    let mut pending = None;
    let target = match &spec {
        AttachSpec::Begin
        | AttachSpec::End
        | AttachSpec::Interval { .. }
        | AttachSpec::Profile { .. }
        | AttachSpec::Counter { .. } => Target::Plain,
        AttachSpec::Usdt {
            path,
            provider,
            name,
        } => {
            let probe =
                sdt_trace::ProbeSpec::new(&text, path.as_deref(), provider.as_deref(), name)
                    .map_err(error)?;
            let key = (probe.target.clone(), probe.probe.clone());
            let waits = sdt_trace::selects_later_objects(&probe, scope);
            let (sites, planned_warnings, waiting) = match plans.0.get(&key) {
                Some(cached) => cached.clone(),
                None => {
                    let planned = match sdt_trace::plan(std::slice::from_ref(&probe), scope) {
                        Ok(plan) => (plan.sites, plan.warnings, None),
                        // Not there yet: attached when an object that has
                        // it is mapped.
                        Err(sdt_trace::Error::ProbeNotFound { suggestions, .. }) if waits => {
                            (Vec::new(), Vec::new(), Some(suggestions))
                        }
                        Err(e) => return Err(error(e)),
                    };
                    plans.0.insert(key, planned.clone());
                    planned
                }
            };
            warnings = planned_warnings;
            pending = waiting;
            later = waits.then_some(probe);
            Target::Usdt(sites)
        }
        AttachSpec::Uprobe { path, target, .. } => {
            let function = match target {
                attach::FuncTarget::Symbol(s) => FunctionTarget::Symbol(s.clone()),
                attach::FuncTarget::Offset { symbol, offset } => FunctionTarget::Offset {
                    symbol: symbol.clone(),
                    offset: *offset,
                },
                attach::FuncTarget::Address(a) => FunctionTarget::Address(*a),
                attach::FuncTarget::SourceLine { file, line, column } => {
                    FunctionTarget::SourceLine(sdt_types::SourceLine {
                        file: file.clone(),
                        line: *line,
                        column: *column,
                    })
                }
            };
            let sites = sdt_trace::plan_functions(path.as_deref(), &function, &text, scope)
                .map_err(error)?;
            if sites.iter().any(|s| s.unchecked) {
                // bpftrace's words, for the place `--unsafe` let through.
                warnings.push(format!(
                    "Could not determine instruction boundary for {text} (binary appears stripped). Misaligned probes can lead to tracee crashes!"
                ));
            }
            Target::Functions(sites)
        }
        AttachSpec::Tracepoint { category, name } => {
            if tracefs.is_none() {
                *tracefs = Some(TraceFs::open().map_err(error)?);
            }
            let fs = tracefs.as_ref().expect("opened above");
            let names = fs.names(category, name).map_err(error)?;
            if names.is_empty() {
                let mut d = Diagnostic::error(
                    span,
                    format!("No matches for tracepoint {category}:{name}."),
                )
                .label("no tracepoint has this name");
                if let Ok(all) = fs.names(category, "*") {
                    let candidates: Vec<String> = all.iter().map(|(_, n)| n.clone()).collect();
                    if let Some(h) = sdt_lang::diag::did_you_mean(&sdt_lang::diag::suggest(
                        name,
                        candidates.iter().map(String::as_str),
                    )) {
                        d = d.hint(h);
                    }
                }
                return Err((
                    d.hint("`sdt run -l 'tracepoint:CATEGORY:*'` lists them"),
                    true,
                ));
            }
            let tps = names
                .iter()
                .map(|(c, n)| fs.tracepoint(c, n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(error)?;
            Target::Tracepoints(tps)
        }
    };
    Ok(Bound {
        spec,
        text,
        span,
        target,
        warnings,
        later,
        pending,
    })
}

/// An engine error about an attach point, as a diagnostic at its span,
/// and whether it means the attach point matches nothing. Messages that
/// wrappers look for are worded as bpftrace's.
fn trace_error(e: sdt_trace::Error, spec: &AttachSpec, span: Span) -> (Diagnostic, bool) {
    match e {
        sdt_trace::Error::ProbeNotFound {
            spec: _,
            searched,
            suggestions,
        } => {
            let files: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
            let mut d = Diagnostic::error(span, format!("No matches for {}.", no_match_name(spec)))
                .label(format!("nothing matches in {}", files.join(", ")));
            if let Some(h) = sdt_lang::diag::did_you_mean(&suggestions) {
                d = d.hint(h);
            }
            (
                d.hint("`sdt list FILE` lists the probes of a file, `sdt run -l PATTERN` the functions too"),
                true,
            )
        }
        sdt_trace::Error::Elf(sdt_elf::Error::NotFound { name }) => (
            Diagnostic::error(span, format!("No matches for {}.", no_match_name(spec)))
                .label(format!("there is no file {name}"))
                .hint("give the file's path, or a program or library name found in PATH or the loader cache"),
            true,
        ),
        sdt_trace::Error::NoUsableSite { reasons } => (
            Diagnostic::error(span, "no site of this probe can be traced").hint(reasons.join("; ")),
            false,
        ),
        sdt_trace::Error::AddressOutside { path, address } => (
            Diagnostic::error(
                span,
                format!("Could not resolve address: {}:{address:#x}", path.display()),
            )
            .label("not inside a function the file's symbols describe")
            .hint("sdt must know the function an address is in to check that it starts an instruction"),
            false,
        ),
        sdt_trace::Error::OffsetOutside { function, size, offset } => (
            Diagnostic::error(
                span,
                format!("Offset outside the function bounds ('{function}' size is {size})"),
            )
            .label(format!("{function} is {size} bytes long; offset {offset} is past its end")),
            false,
        ),
        sdt_trace::Error::SizeUnknown { function } => (
            Diagnostic::error(
                span,
                format!("Could not determine boundary for {function} (symbol has size 0)."),
            )
            .label("sdt cannot check where this function's code is")
            .hint("Use --unsafe to force attachment, if you know it is code"),
            false,
        ),
        other => (Diagnostic::error(span, other.to_string()), false),
    }
}

/// An attach point as bpftrace names it in "No matches for ...".
fn no_match_name(spec: &AttachSpec) -> String {
    let joined = |parts: &[Option<&str>]| {
        parts
            .iter()
            .flatten()
            .copied()
            .collect::<Vec<_>>()
            .join(":")
    };
    match spec {
        AttachSpec::Usdt {
            path,
            provider,
            name,
        } => format!(
            "usdt {}",
            joined(&[path.as_deref(), provider.as_deref(), Some(name)])
        ),
        AttachSpec::Uprobe { path, target, ret } => {
            let function = match target {
                attach::FuncTarget::Symbol(s) => s.clone(),
                attach::FuncTarget::Offset { symbol, offset } => format!("{symbol}+{offset}"),
                attach::FuncTarget::Address(a) => format!("{a:#x}"),
                attach::FuncTarget::SourceLine { file, line, column } => {
                    let at = match column {
                        Some(column) => format!("{file}:{line}:{column}"),
                        None => format!("{file}:{line}"),
                    };
                    let kind = if *ret { "uretprobe" } else { "uprobe" };
                    return format!("{kind} {}@{at}", path.as_deref().unwrap_or_default());
                }
            };
            format!(
                "{} {}",
                if *ret { "uretprobe" } else { "uprobe" },
                joined(&[path.as_deref(), Some(&function)])
            )
        }
        AttachSpec::Tracepoint { category, name } => format!("tracepoint {category}:{name}"),
        other => other.kind().name().to_string(),
    }
}
