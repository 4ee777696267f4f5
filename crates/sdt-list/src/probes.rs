//! `sdt list`: the probes of files and running processes.
//!
//! All discovery lives in `sdt-elf`; this module turns command-line words
//! into targets and probes into text or JSON. The JSON view is defined here
//! rather than derived from the library's types, so that the library can
//! change without breaking the schema documented in docs/json.md.

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use sdt_elf::{Arg, ElfFile, Location, ProbePattern, Probes, Site, SymbolMemory};
use serde::Serialize;

/// One object to list: where to open it and how to show it.
struct Target {
    /// The path shown to the user: as given or resolved, or as the process
    /// sees it.
    shown: String,
    /// The process it came from, if any.
    pid: Option<u32>,
    file: ElfFile,
}

/// What to list and how.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Files or program and library names, optionally followed by a
    /// pattern on `PROVIDER:NAME`.
    pub words: Vec<OsString>,
    /// Processes whose every object is listed.
    pub pids: Vec<u32>,
    /// One JSON array of probes.
    pub json: bool,
    /// Every site, with addresses, semaphores and arguments.
    pub verbose: bool,
}

/// Lists the probes `args` asks for on standard output.
pub fn list(args: &Request) -> anyhow::Result<ExitCode> {
    let (paths, pattern) = split_positionals(&args.words)?;
    if paths.is_empty() && args.pids.is_empty() {
        bail!(
            "nothing to list: give a FILE, a program or library NAME, or -p PID \
             (for example `sdt list /usr/bin/python3 'python:*'`)"
        );
    }

    let mut targets = Vec::new();
    for path in paths {
        targets.push(Target {
            shown: path.display().to_string(),
            pid: None,
            file: ElfFile::open(&path)?,
        });
    }
    for &pid in &args.pids {
        for object in sdt_elf::mapped_objects(pid)? {
            let mut shown = object.path.display().to_string();
            if object.deleted {
                shown.push_str(" (deleted)");
            }
            // What the process maps, opened without trusting its name;
            // an object that cannot be is named, and the others listed.
            match object.file() {
                Ok(file) => targets.push(Target {
                    shown,
                    pid: Some(pid),
                    file: file.clone(),
                }),
                Err(err) => warn(&err.with_causes()),
            }
        }
    }
    // Parse everything before printing anything, so that a bad file fails
    // the command cleanly. A process maps many files: one that cannot be
    // parsed is worth a warning, not the whole listing.
    let mut listed = Vec::new();
    for target in &targets {
        match (target.file.probes(), target.pid) {
            (Ok(probes), _) => listed.push((target, probes)),
            (Err(err), Some(pid)) => warn(&format!("process {pid}: {}", err.with_causes())),
            (Err(err), None) => return Err(err.into()),
        }
    }

    let stdout = io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let printed =
        print(&mut out, &listed, pattern.as_ref(), args).and_then(|n| out.flush().map(|()| n));
    if matches!(printed, Ok(0)) {
        // An empty listing must never look like a failure to look.
        explain_nothing(&listed, pattern.as_ref(), &args.pids);
    }
    let printed = printed.map(|_| ());
    match printed {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `sdt list | head`: the reader is gone, which is not an error.
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(err) => Err(err).context("cannot write the listing"),
    }
}

/// Splits positionals into target paths and an optional final pattern.
fn split_positionals(words: &[OsString]) -> anyhow::Result<(Vec<PathBuf>, Option<ProbePattern>)> {
    let mut paths = Vec::new();
    let mut pattern = None;
    for (i, word) in words.iter().enumerate() {
        let pattern_text = word
            .to_str()
            .filter(|text| i + 1 == words.len() && text.contains([':', '*', '?', '[', '{']));
        let resolved = match word.to_str() {
            Some(name) if !name.contains('/') => sdt_elf::resolve(name),
            _ => Ok(PathBuf::from(word)),
        };
        match (resolved, pattern_text) {
            (Ok(path), Some(text)) if !path.exists() => pattern = Some(ProbePattern::new(text)?),
            (Ok(path), _) => paths.push(path),
            (Err(_), Some(text)) => pattern = Some(ProbePattern::new(text)?),
            (Err(err), None) => return Err(err.into()),
        }
    }
    Ok((paths, pattern))
}

/// Says on stderr why nothing was listed: which objects have no probes,
/// or that none matched the pattern.
fn explain_nothing(listed: &[(&Target, Probes<'_>)], pattern: Option<&ProbePattern>, pids: &[u32]) {
    let with_probes: Vec<&str> = listed
        .iter()
        .filter(|(_, probes)| !probes.is_empty())
        .map(|(t, _)| t.shown.as_str())
        .collect();
    let searched: Vec<&str> = listed.iter().map(|(t, _)| t.shown.as_str()).collect();
    let whose = if pids.is_empty() {
        String::new()
    } else {
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        format!(" of process {}", pids.join(", "))
    };
    if with_probes.is_empty() {
        match searched.as_slice() {
            [one] => eprintln!("sdt: {one} has no USDT probes"),
            _ => eprintln!(
                "sdt: none of the {} objects{whose} has USDT probes ({})",
                searched.len(),
                searched.join(", ")
            ),
        }
    } else if pattern.is_some() {
        eprintln!(
            "sdt: no probe matches the pattern in {}",
            with_probes.join(", ")
        );
    }
}

/// Prints the listing; returns how many probes it printed.
fn print(
    out: &mut impl Write,
    listed: &[(&Target, Probes<'_>)],
    pattern: Option<&ProbePattern>,
    args: &Request,
) -> io::Result<usize> {
    let mut first = true;
    let mut printed = 0;
    if args.json {
        out.write_all(b"[")?;
    }
    for (target, probes) in listed {
        let arch = probes.arch.to_string();
        for skipped in &probes.skipped {
            warn(&format!("{}: {skipped}", target.shown));
        }
        for probe in probes.iter() {
            if pattern.is_some_and(|p| !p.matches(probe.provider, probe.name)) {
                continue;
            }
            if args.json {
                out.write_all(if first { b"\n" } else { b",\n" })?;
                serde_json::to_writer(&mut *out, &json_probe(target, &arch, probe))?;
            } else {
                writeln!(out, "{} {}:{}", target.shown, probe.provider, probe.name)?;
                if args.verbose {
                    for site in probe.sites {
                        print_site(out, site, &target.file)?;
                    }
                }
            }
            first = false;
            printed += 1;
        }
    }
    if args.json {
        out.write_all(if first { b"]\n" } else { b"\n]\n" })?;
    }
    Ok(printed)
}

fn print_site(out: &mut impl Write, site: &Site<'_>, file: &ElfFile) -> io::Result<()> {
    write!(out, "  site {:#x}", site.address)?;
    match site.file_offset {
        Some(offset) => write!(out, " (file offset {offset:#x})")?,
        None => write!(out, " (in no executable segment: cannot be traced)")?,
    }
    if site.address != site.note.pc {
        write!(
            out,
            " [prelinked: note pc {:#x}, base {:#x}]",
            site.note.pc, site.note.base
        )?;
    }
    writeln!(out)?;
    if let Some(semaphore) = site.semaphore {
        write!(out, "    semaphore {:#x}", semaphore.address)?;
        match semaphore.file_offset {
            Some(offset) => writeln!(out, " (file offset {offset:#x})")?,
            None => writeln!(out, " (in no writable segment)")?,
        }
    }
    for (i, arg) in site.args().enumerate() {
        print_arg(out, i, &arg, file)?;
    }
    Ok(())
}

/// An argument in words: `arg0: 8-byte unsigned in %rbp`. The memory at a
/// symbol is shown with its address in `file`, or why it has none there.
fn print_arg(out: &mut impl Write, i: usize, arg: &Arg<'_>, file: &ElfFile) -> io::Result<()> {
    let kind = match (arg.float, arg.signed) {
        (true, _) => "float",
        (false, true) => "signed",
        (false, false) => "unsigned",
    };
    write!(out, "    arg{i}: ")?;
    match (arg.location, arg.size) {
        (Location::Register(_), Some(size)) => {
            writeln!(out, "{size}-byte {kind} in {}", arg.operand())
        }
        (Location::Memory(_), Some(size)) => {
            writeln!(out, "{size}-byte {kind} at {}", arg.operand())
        }
        (Location::Symbol(m), Some(size)) => {
            write!(out, "{size}-byte {kind} at {m} (`{}`", arg.operand())?;
            match file.symbol_memory(&m, size) {
                Ok(address) if m.base.is_none() && m.index.is_none() => {
                    writeln!(out, ", address {address:#x} in the file)")
                }
                Ok(address) => {
                    let start = SymbolMemory {
                        base: None,
                        index: None,
                        ..m
                    };
                    writeln!(out, ", {start} at {address:#x} in the file)")
                }
                Err(why) => writeln!(out, "), which cannot be read: {why}"),
            }
        }
        (Location::Constant(value), Some(size)) => {
            writeln!(out, "{size}-byte {kind} constant {value}")
        }
        (Location::Unsupported(why), _) => writeln!(out, "unsupported `{}`: {why}", arg.spec),
        // The parser gives every decoded argument a size.
        (_, None) => writeln!(out, "unsupported `{}`", arg.spec),
    }
}

fn warn(message: &str) {
    eprintln!("sdt: warning: {message}");
}

// The JSON view; docs/json.md documents it and must change with it.

#[derive(Serialize)]
struct JsonProbe<'a> {
    path: &'a str,
    pid: Option<u32>,
    arch: &'a str,
    provider: &'a str,
    name: &'a str,
    sites: JsonSites<'a>,
}

/// Serialises sites as they are converted, without collecting them first.
struct JsonSites<'a>(&'a [Site<'a>]);

impl Serialize for JsonSites<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(json_site))
    }
}

/// Serialises the arguments of a site as they are parsed.
struct JsonArgs<'a>(Site<'a>);

impl Serialize for JsonArgs<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.args().map(json_arg))
    }
}

#[derive(Serialize)]
pub(crate) struct JsonSite<'a> {
    note: JsonNote,
    address: u64,
    file_offset: Option<u64>,
    semaphore_address: Option<u64>,
    semaphore_offset: Option<u64>,
    args: JsonArgs<'a>,
}

#[derive(Serialize)]
struct JsonNote {
    pc: u64,
    base: u64,
    semaphore: u64,
}

#[derive(Serialize)]
struct JsonArg<'a> {
    spec: &'a str,
    size: Option<u8>,
    signed: bool,
    float: bool,
    location: JsonLocation<'a>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum JsonLocation<'a> {
    Register {
        register: &'static str,
        width: u8,
        offset: u8,
    },
    Memory {
        base: Option<&'static str>,
        index: Option<&'static str>,
        scale: u8,
        offset: i64,
    },
    Symbol {
        symbol: &'a str,
        offset: i64,
        base: Option<&'static str>,
        index: Option<&'static str>,
        scale: u8,
    },
    Constant {
        value: i64,
    },
    Unsupported {
        reason: String,
    },
}

fn json_probe<'a>(target: &'a Target, arch: &'a str, probe: sdt_elf::Probe<'a>) -> JsonProbe<'a> {
    JsonProbe {
        path: &target.shown,
        pid: target.pid,
        arch,
        provider: probe.provider,
        name: probe.name,
        sites: JsonSites(probe.sites),
    }
}

pub(crate) fn json_site<'a>(site: &Site<'a>) -> JsonSite<'a> {
    JsonSite {
        note: JsonNote {
            pc: site.note.pc,
            base: site.note.base,
            semaphore: site.note.semaphore,
        },
        address: site.address,
        file_offset: site.file_offset,
        semaphore_address: site.semaphore.map(|s| s.address),
        semaphore_offset: site.semaphore.and_then(|s| s.file_offset),
        args: JsonArgs(*site),
    }
}

fn json_arg(arg: Arg<'_>) -> JsonArg<'_> {
    JsonArg {
        spec: arg.spec,
        size: arg.size,
        signed: arg.signed,
        float: arg.float,
        location: match arg.location {
            Location::Register(r) => JsonLocation::Register {
                register: r.name,
                width: r.width,
                offset: r.offset,
            },
            Location::Memory(m) => JsonLocation::Memory {
                base: m.base,
                index: m.index,
                scale: m.scale,
                offset: m.offset,
            },
            Location::Symbol(m) => JsonLocation::Symbol {
                symbol: m.symbol,
                offset: m.offset,
                base: m.base,
                index: m.index,
                scale: m.scale,
            },
            Location::Constant(value) => JsonLocation::Constant { value },
            Location::Unsupported(why) => JsonLocation::Unsupported {
                reason: why.to_string(),
            },
        },
    }
}
