//! `-l`: the probes there are, one `TYPE:PATH:...` line each, sorted, as
//! bpftrace lists them.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use globset::Glob;

/// Lists the probes matching `pattern` (every probe of the process with
/// `-p` and no pattern); with `verbose`, a uprobe's parameters from the
/// DWARF of its file (separate debug files looked for in `debug_dirs`
/// first).
pub fn list(
    pattern: &str,
    pid: Option<i32>,
    verbose: bool,
    debug_dirs: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    let pattern = if pattern.is_empty() { "*" } else { pattern };
    let mut lines = BTreeSet::new();
    let (kind, rest) = pattern.split_once(':').unwrap_or((pattern, "*"));
    let kind = match kind {
        "U" => "usdt",
        "u" => "uprobe",
        "ur" => "uretprobe",
        "t" => "tracepoint",
        other => other,
    };
    let wants = |k: &str| {
        Glob::new(kind)
            .map(|g| g.compile_matcher().is_match(k))
            .unwrap_or(false)
    };
    match pid {
        Some(pid) => process(pid, pattern, &wants, &mut lines)?,
        None => {
            let (path, probe) = rest.split_once(':').unwrap_or((rest, "*"));
            if wants("usdt") && !path.contains('*') {
                usdt_file(path, path, probe, &mut lines)?;
            }
            if (wants("uprobe") || wants("uretprobe")) && !path.contains('*') {
                let params = verbose.then_some(debug_dirs);
                uprobe_file(path, path, probe, params, &mut lines)?;
            }
            if wants("tracepoint") {
                tracepoints(rest, verbose, &mut lines)?;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn matcher(glob: &str) -> anyhow::Result<globset::GlobMatcher> {
    Ok(Glob::new(glob)?.compile_matcher())
}

/// Opens the file a listing pattern names, and the name its lines show:
/// the pattern's own path when it gave one, else the resolved path.
fn open_listed(shown: &str, path: &str) -> anyhow::Result<(String, sdt_elf::ElfFile)> {
    let resolved = sdt_elf::resolve(path)?;
    let shown = if shown.contains('/') {
        shown.to_string()
    } else {
        resolved.display().to_string()
    };
    Ok((shown, sdt_elf::ElfFile::open(&resolved)?))
}

fn usdt_file(
    shown: &str,
    path: &str,
    probe: &str,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let (shown, file) = open_listed(shown, path)?;
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
    shown: &str,
    path: &str,
    symbol: &str,
    params: Option<&[PathBuf]>,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let (shown, file) = open_listed(shown, path)?;
    let glob = matcher(symbol)?;
    // Without debug information the functions are listed alone.
    let dwarf = params
        .and_then(|dirs| sdt_types::DebugInfo::open_with(&sdt_elf::resolve(path).ok()?, dirs).ok());
    for f in sdt_elf::functions(file.data())? {
        if glob.is_match(&f.name) || f.demangled.as_deref().is_some_and(|d| glob.is_match(d)) {
            let mut line = format!("uprobe:{shown}:{}", f.name);
            let described = dwarf.as_ref().map(|d| d.parameter_lines(f.address));
            for param in described.and_then(Result::ok).flatten().unwrap_or_default() {
                line.push_str(&format!("\n    {param}"));
            }
            lines.insert(line);
        }
    }
    Ok(())
}

/// A process's probes: the executable's uprobes, and the USDT probes of
/// every object it maps, under `/proc/PID/root` as bpftrace names them.
fn process(
    pid: i32,
    pattern: &str,
    wants: &dyn Fn(&str) -> bool,
    lines: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let objects = sdt_elf::mapped_objects(pid as u32)?;
    let filter = matcher(pattern)?;
    for (i, object) in objects.iter().enumerate() {
        let Ok(file) = object.file() else {
            continue;
        };
        let shown = format!("/proc/{pid}/root{}", object.path.display());
        if wants("usdt") {
            if let Ok(probes) = file.probes() {
                for p in probes.iter() {
                    let line = format!("usdt:{shown}:{}:{}", p.provider, p.name);
                    if filter.is_match(&line) {
                        lines.insert(line);
                    }
                }
            }
        }
        // The executable's functions only, as bpftrace: a library's are many.
        if i == 0 && wants("uprobe") {
            if let Ok(functions) = sdt_elf::functions(file.data()) {
                for f in functions {
                    let line = format!("uprobe:{shown}:{}", f.name);
                    if filter.is_match(&line) {
                        lines.insert(line);
                    }
                }
            }
        }
    }
    Ok(())
}

fn tracepoints(rest: &str, verbose: bool, lines: &mut BTreeSet<String>) -> anyhow::Result<()> {
    let (category, name) = rest.split_once(':').unwrap_or((rest, "*"));
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
