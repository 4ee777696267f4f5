//! bpftrace's `-l`: the probes there are, one `TYPE:TARGET:...` line
//! each, sorted, as bpftrace lists them.
//!
//! A pattern is `TYPE:TARGET:NAME` with globs in every part; without a
//! colon (`*sched_switch*`) it is a name of any type. User-space probes
//! need files to look in: the TARGET (a path, a name found as programs
//! and libraries are found, or a glob over files such as `./bin/app*`),
//! or the `-p` process's objects; a pattern whose type is a glob lists
//! them only with one of those. With a program (`-e` or a file), the
//! probes each of its attach points resolves to are listed.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use globset::{Glob, GlobMatcher};
use sdt_bind::{Bound, Target};
use sdt_lang::attach::AttachSpec;
use sdt_lang::diag::Diagnostics;
use sdt_lang::perf::CounterKind;
use sdt_trace::Scope;

/// The probe types sdt lists, with their one-letter forms.
const TYPES: &[(&str, &str)] = &[
    ("usdt", "U"),
    ("uprobe", "u"),
    ("uretprobe", "ur"),
    ("tracepoint", "t"),
    ("interval", "i"),
    ("profile", "p"),
    ("software", "s"),
    ("hardware", "h"),
];

/// The units of `interval` and `profile` probes, listed as bpftrace
/// lists them.
const INTERVAL_UNITS: &[&str] = &["hz", "ms", "s", "us"];

/// Lists the probes matching `pattern` (every probe of the process with
/// `-p` and no pattern); with `verbose`, a uprobe's parameters from the
/// DWARF of its file (separate debug files looked for in `debug_dirs`
/// first) and a tracepoint's fields.
pub fn list(
    pattern: &str,
    pid: Option<i32>,
    verbose: bool,
    debug_dirs: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    if let Some(c) = pattern
        .chars()
        .find(|c| c.is_control() || c.is_whitespace())
    {
        anyhow::bail!("invalid character {c:?} in search expression `{pattern}`");
    }
    let mut lines = BTreeSet::new();
    match (pattern, pid) {
        // As bpftrace: the uprobes and USDT probes, not each uretprobe too.
        ("" | "*", Some(pid)) => process(pid, "*", &|l| !l.starts_with("uretprobe:"), &mut lines)?,
        _ => {
            let pattern = match pattern {
                "" => "*:*".to_string(),
                p if !p.contains(':') => format!("*:{p}"),
                p => p.to_string(),
            };
            search(&pattern, pid, verbose, debug_dirs, &mut lines)?;
        }
    }
    print(lines)
}

fn print(lines: BTreeSet<String>) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The names and aliases of the perf events of `kind`.
fn event_names(kind: CounterKind) -> Vec<&'static str> {
    kind.events()
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.alias))
        .collect()
}

fn matcher(glob: &str) -> anyhow::Result<GlobMatcher> {
    Ok(Glob::new(glob)?.compile_matcher())
}

fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Lists a `TYPE:...` pattern.
fn search(
    pattern: &str,
    pid: Option<i32>,
    verbose: bool,
    debug_dirs: &[PathBuf],
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let parts: Vec<&str> = pattern.split(':').collect();
    let kind = parts[0];
    let kinds = matcher(kind)?;
    let rest = &parts[1..];
    let target = rest.first().copied().filter(|_| rest.len() >= 2);
    // User-space types need files: a named type, a process, or a file.
    let user_space =
        !is_glob(kind) || pid.is_some() || target.is_some_and(|t| !t.is_empty() && !is_glob(t));
    for &(name, short) in TYPES {
        if !(kinds.is_match(name) || kind == short) {
            continue;
        }
        match name {
            "tracepoint" => {
                let (category, event) = match rest {
                    [category, event] => (*category, *event),
                    [event] => ("*", *event),
                    _ => continue,
                };
                tracepoints(category, event, verbose, lines)?;
            }
            "interval" | "profile" | "software" | "hardware" => {
                // One line per unit, or per event name and alias, each
                // ending in `:` where the rate or count goes.
                let names: Vec<&str> = match name {
                    "software" => event_names(CounterKind::Software),
                    "hardware" => event_names(CounterKind::Hardware),
                    _ => INTERVAL_UNITS.to_vec(),
                };
                let wanted = matcher(&format!("{}:", rest.join(":")))?;
                for item in names {
                    let line = format!("{item}:");
                    if wanted.is_match(&line) || rest == ["*"] {
                        lines.insert(format!("{name}:{line}"));
                    }
                }
            }
            _ if !user_space => {}
            _ if pid.is_some() && target.is_none_or(|t| t.is_empty() || t == "*") => {
                // Every object of the process, named as bpftrace names them.
                let tail = if rest.len() >= 2 { &rest[1..] } else { rest };
                let line = format!("{name}:*:{}", tail.join(":"));
                let filter = matcher(&line)?;
                process(
                    pid.unwrap_or_default(),
                    "*",
                    &|l: &str| filter.is_match(l) && l.starts_with(name),
                    lines,
                )?;
            }
            _ => {
                let Some(target) = target else { continue };
                let tail = &rest[1..];
                for (shown, path) in files(target, pid)? {
                    let listed = match name {
                        "usdt" => usdt_file(&shown, &path, &tail.join(":"), lines),
                        _ => {
                            let params = verbose.then_some(debug_dirs);
                            uprobe_file(name, &shown, &path, &tail.join(":"), params, lines)
                        }
                    };
                    // A glob may match files that are not ELF: they have
                    // no probes. A file named alone must be readable.
                    if listed.is_err() && !is_glob(target) {
                        return listed;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The files a listing target names: a glob over files, each shown as it
/// matched; else the file a name resolves to, shown as written when it is
/// a path.
fn files(target: &str, pid: Option<i32>) -> anyhow::Result<Vec<(String, PathBuf)>> {
    if is_glob(target) {
        return Ok(sdt_trace::glob_files(target)?
            .into_iter()
            .map(|p| (p.display().to_string(), p))
            .collect());
    }
    let resolved = match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}/root{target}")),
        None => sdt_elf::resolve(target)?,
    };
    let shown = if target.contains('/') {
        target.to_string()
    } else {
        resolved.display().to_string()
    };
    Ok(vec![(shown, resolved)])
}

fn usdt_file(
    shown: &str,
    path: &std::path::Path,
    probe: &str,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let file = sdt_elf::ElfFile::open(path)?;
    let pattern = sdt_elf::ProbePattern::new(
        if probe.contains(':') {
            probe.to_string()
        } else {
            format!("*:{probe}")
        }
        .as_str(),
    )?;
    for p in file.probes()?.iter() {
        if pattern.matches(p.provider, p.name) {
            lines.insert(format!("usdt:{shown}:{}:{}", p.provider, p.name));
        }
    }
    Ok(())
}

/// The functions of a file matching `symbol`; with `params` (the
/// `--debuginfo` directories), each with its parameters from DWARF, an
/// indented `TYPE NAME` line each, as bpftrace's `-lv` shows them.
fn uprobe_file(
    kind: &str,
    shown: &str,
    path: &std::path::Path,
    symbol: &str,
    params: Option<&[PathBuf]>,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let file = sdt_elf::ElfFile::open(path)?;
    let glob = matcher(symbol)?;
    // Without debug information the functions are listed alone.
    let dwarf = params.and_then(|dirs| sdt_types::DebugInfo::open_with(path, dirs).ok());
    for f in sdt_elf::functions(file.data())? {
        if glob.is_match(&f.name) || f.demangled.as_deref().is_some_and(|d| glob.is_match(d)) {
            let mut line = format!("{kind}:{shown}:{}", f.name);
            if kind == "uprobe" {
                line.push_str(&parameter_lines(dwarf.as_ref(), f.address));
            }
            lines.insert(line);
        }
    }
    Ok(())
}

/// The parameters of the function at `address` as `-lv` shows them, an
/// indented `TYPE NAME` line each; nothing without DWARF describing it.
fn parameter_lines(dwarf: Option<&sdt_types::DebugInfo>, address: u64) -> String {
    let described = dwarf.map(|d| d.parameter_lines(address));
    let params = described.and_then(Result::ok).flatten().unwrap_or_default();
    params.iter().map(|p| format!("\n    {p}")).collect()
}

/// A process's probes: the executable's functions, and the USDT probes of
/// every object it maps, under `/proc/PID/root` as bpftrace names them;
/// the lines `keep` takes.
fn process(
    pid: i32,
    pattern: &str,
    keep: &dyn Fn(&str) -> bool,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let objects = sdt_elf::mapped_objects(pid as u32)?;
    let filter = matcher(pattern)?;
    for (i, object) in objects.iter().enumerate() {
        let Ok(file) = object.file() else {
            continue;
        };
        let shown = format!("/proc/{pid}/root{}", object.path.display());
        let mut add = |line: String| {
            if filter.is_match(&line) && keep(&line) {
                lines.insert(line);
            }
        };
        if let Ok(probes) = file.probes() {
            for p in probes.iter() {
                add(format!("usdt:{shown}:{}:{}", p.provider, p.name));
            }
        }
        // The executable's functions only, as bpftrace: a library's are many.
        if i == 0 {
            if let Ok(functions) = sdt_elf::functions(file.data()) {
                for f in functions {
                    add(format!("uprobe:{shown}:{}", f.name));
                    add(format!("uretprobe:{shown}:{}", f.name));
                }
            }
        }
    }
    Ok(())
}

fn tracepoints(
    category: &str,
    name: &str,
    verbose: bool,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let fs = sdt_trace::TraceFs::open()?;
    for (c, n) in fs.names(category, name)? {
        let mut line = format!("tracepoint:{c}:{n}");
        if verbose {
            if let Ok(tp) = fs.tracepoint(&c, &n) {
                for f in tp.fields.iter().filter(|f| !f.name.starts_with("common_")) {
                    line.push_str(&format!("\n    {} {}", f.c_type, f.name));
                }
            }
        }
        lines.insert(line);
    }
    Ok(())
}

/// `-l` with a program: the probes its attach points resolve to (BEGIN
/// and END are not probes to list). An attach point that resolves to
/// nothing is reported as it would be when running: the errors in
/// `source` are handed back.
pub fn list_program(
    source: &str,
    params: &[String],
    pid: Option<i32>,
    verbose: bool,
    debug_dirs: &[PathBuf],
) -> Result<anyhow::Result<ExitCode>, Diagnostics> {
    let script = sdt_lang::parser::parse(source)?;
    let scope = Scope {
        pids: pid.into_iter().collect(),
        default_target: None,
        allow_unsafe: true,
        debug_dirs: debug_dirs.to_vec(),
    };
    let bindings = sdt_bind::bind(&script, params, &scope, Default::default())?;
    let mut lines = BTreeSet::new();
    let mut dwarf = HashMap::new();
    for b in bindings.bound.iter().flatten() {
        let mut found = probe_lines(b);
        if verbose {
            add_parameters(b, &mut found, debug_dirs, &mut dwarf);
        }
        lines.extend(found);
    }
    if verbose {
        // The fields of each tracepoint, as `-lv PATTERN` shows them.
        let mut detailed = BTreeSet::new();
        for line in lines {
            match line
                .strip_prefix("tracepoint:")
                .and_then(|r| r.split_once(':'))
            {
                Some((c, n)) => {
                    if let Err(e) = tracepoints(c, n, true, &mut detailed) {
                        return Ok(Err(e));
                    }
                }
                None => {
                    detailed.insert(line);
                }
            }
        }
        return Ok(print(detailed));
    }
    Ok(print(lines))
}

/// Appends to the lines of a uprobe at functions' entries (`found`, one
/// per site) their parameters from DWARF, each file's read once.
fn add_parameters(
    b: &Bound,
    found: &mut [String],
    debug_dirs: &[PathBuf],
    dwarf: &mut HashMap<PathBuf, Option<sdt_types::DebugInfo>>,
) {
    let (Target::Functions(functions), AttachSpec::Uprobe { ret: false, .. }) =
        (&b.target, &b.spec)
    else {
        return;
    };
    for (line, f) in found.iter_mut().zip(functions) {
        if f.offset != 0 {
            continue;
        }
        let info = dwarf
            .entry(f.path.clone())
            .or_insert_with(|| sdt_types::DebugInfo::open_with(&f.path, debug_dirs).ok());
        line.push_str(&parameter_lines(info.as_ref(), f.address));
    }
}

/// The lines of one resolved attach point.
fn probe_lines(b: &Bound) -> Vec<String> {
    let written = |path: &Option<String>, actual: &std::path::Path| match path {
        Some(p) if p.contains('/') && !is_glob(p) => p.clone(),
        _ => actual.display().to_string(),
    };
    match (&b.target, &b.spec) {
        (Target::Usdt(sites), AttachSpec::Usdt { path, .. }) => sites
            .iter()
            .map(|s| format!("usdt:{}:{}:{}", written(path, &s.path), s.provider, s.name))
            .collect(),
        (Target::Functions(functions), AttachSpec::Uprobe { path, ret, .. }) => functions
            .iter()
            .map(|f| {
                let kind = if *ret { "uretprobe" } else { "uprobe" };
                format!("{kind}:{}:{}", written(path, &f.path), f.symbol)
            })
            .collect(),
        (Target::Tracepoints(tps), _) => tps
            .iter()
            .map(|tp| format!("tracepoint:{}:{}", tp.category, tp.name))
            .collect(),
        (Target::Plain, AttachSpec::Interval { unit, .. }) => {
            vec![format!("interval:{}:", unit.name())]
        }
        (Target::Plain, AttachSpec::Profile { unit, .. }) => {
            vec![format!("profile:{}:", unit.name())]
        }
        (Target::Plain, AttachSpec::Counter { event, written, .. }) => {
            vec![format!("{}:{written}:", event.kind.name())]
        }
        _ => Vec::new(),
    }
}
