//! BCC's `tplist`: the USDT probes of a library, program or process
//! (`-l`, `-p`), or the kernel's tracepoints, in BCC's shapes.
//!
//! USDT probes print as `PATH PROVIDER:NAME`, each `provider:name` once,
//! in the order found (ELF note order; for `-p`, the order of the
//! process's mappings), `PATH` being the file it was first found in
//! (under `/proc/PID/root` for a process). `-v` adds the semaphore and
//! how many locations and arguments; `-vv` each location and each
//! argument as BCC words them: `8 unsigned bytes @ ax`, `4 signed   bytes
//! @ *(bp - 20)`. Tracepoints print as `CATEGORY:EVENT`, `-v` adding
//! their fields; they are read through tracefs, which need not be
//! mounted (see `sdt_trace::TraceFs`). A filter is a shell-style glob on
//! the whole `provider:name` or `category:event`.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use globset::{Glob, GlobMatcher};
use sdt_elf::{Arg, ElfFile, Location, Site};
use serde::Serialize;

use crate::probes::{json_site, JsonSite};

/// What `tplist` is asked.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The process whose probes to list (`-p`).
    pub pid: Option<u32>,
    /// The library or program whose probes to list (`-l`).
    pub lib: Option<String>,
    /// `-v` (1) or `-vv` (2).
    pub verbosity: u8,
    /// A glob on `provider:name` or `category:event`.
    pub filter: Option<String>,
    /// One JSON array instead of BCC's lines.
    pub json: bool,
}

/// Lists what `request` asks for on standard output.
pub fn list(request: &Request) -> anyhow::Result<ExitCode> {
    let filter = match &request.filter {
        Some(glob) => Some(
            Glob::new(glob)
                .with_context(|| format!("bad filter '{glob}'"))?
                .compile_matcher(),
        ),
        None => None,
    };
    let out = io::stdout().lock();
    let mut out = BufWriter::new(out);
    let written = if request.pid.is_some() || request.lib.is_some() {
        usdt(request, filter.as_ref(), &mut out)
    } else {
        tracepoints(request, filter.as_ref(), &mut out)
    };
    match written.and_then(|()| out.flush().map_err(Into::into)) {
        Err(e)
            if e.downcast_ref::<io::Error>().map(io::Error::kind)
                == Some(io::ErrorKind::BrokenPipe) =>
        {
            Ok(ExitCode::SUCCESS)
        }
        other => other.map(|()| ExitCode::SUCCESS),
    }
}

/// One file to read probes from: where it is opened, how it is shown.
struct File {
    shown: String,
    elf: ElfFile,
}

/// A `provider:name`, with every place it is in.
struct Probe<'a> {
    provider: &'a str,
    name: &'a str,
    /// The file it was first found in.
    path: &'a str,
    semaphore: u64,
    /// Each site with the file it is in, sorted by path and address,
    /// each once.
    locations: Vec<(&'a str, Site<'a>)>,
}

fn files(request: &Request) -> anyhow::Result<Vec<File>> {
    let root = |pid: u32, path: &Path| -> String {
        if path.starts_with("/proc") {
            path.display().to_string()
        } else {
            format!("/proc/{pid}/root{}", path.display())
        }
    };
    match (&request.lib, request.pid) {
        (Some(lib), pid) => {
            let Ok(path) = sdt_elf::resolve(lib) else {
                bail!("USDT failed to instrument path {lib}");
            };
            let shown = match pid {
                Some(_) if !path.is_absolute() => {
                    bail!("with -p, the library must be an absolute path (got {lib})")
                }
                Some(pid) => root(pid, &path),
                None => path.display().to_string(),
            };
            let opened = PathBuf::from(&shown);
            let elf = ElfFile::open(&opened)
                .map_err(|_| anyhow::anyhow!("USDT failed to instrument path {lib}"))?;
            Ok(vec![File { shown, elf }])
        }
        (None, Some(pid)) => {
            let objects = sdt_elf::mapped_objects(pid)
                .map_err(|_| anyhow::anyhow!("USDT failed to instrument PID {pid}"))?;
            Ok(objects
                .into_iter()
                .filter_map(|object| {
                    let elf = object.file().ok()?.clone();
                    Some(File {
                        shown: root(pid, &object.path),
                        elf,
                    })
                })
                .collect())
        }
        (None, None) => Ok(Vec::new()),
    }
}

fn usdt(
    request: &Request,
    filter: Option<&GlobMatcher>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let files = files(request)?;
    let parsed: Vec<_> = files.iter().map(|f| (f, f.elf.probes().ok())).collect();
    let mut probes: Vec<Probe<'_>> = Vec::new();
    for (file, found) in &parsed {
        let Some(found) = found else { continue };
        for probe in found.iter() {
            let full = format!("{}:{}", probe.provider, probe.name);
            if filter.is_some_and(|f| !f.is_match(&full)) {
                continue;
            }
            let at = match probes
                .iter()
                .position(|p| p.provider == probe.provider && p.name == probe.name)
            {
                Some(at) => at,
                None => {
                    probes.push(Probe {
                        provider: probe.provider,
                        name: probe.name,
                        path: &file.shown,
                        semaphore: probe.sites.first().map_or(0, |s| s.note.semaphore),
                        locations: Vec::new(),
                    });
                    probes.len() - 1
                }
            };
            let sites = probe.sites.iter().map(|site| (file.shown.as_str(), *site));
            probes[at].locations.extend(sites);
        }
    }
    for probe in &mut probes {
        probe
            .locations
            .sort_by_key(|(path, site)| (*path, site.note.pc));
        probe
            .locations
            .dedup_by_key(|(path, site)| (*path, site.note.pc));
    }
    if request.json {
        let objects: Vec<JsonProbe<'_>> = probes.iter().map(json_probe).collect();
        serde_json::to_writer(&mut *out, &objects)?;
        writeln!(out)?;
        return Ok(());
    }
    for probe in &probes {
        let head = format!("{}:{}", probe.provider, probe.name);
        if request.verbosity == 0 {
            writeln!(out, "{} {head}", probe.path)?;
            continue;
        }
        writeln!(out, "{head} [sema {:#x}]", probe.semaphore)?;
        if request.verbosity == 1 {
            let arguments = probe.locations.first().map_or(0, |(_, s)| s.args().count());
            writeln!(out, "  {} location(s)", probe.locations.len())?;
            writeln!(out, "  {arguments} argument(s)")?;
            continue;
        }
        for (k, (path, site)) in probe.locations.iter().enumerate() {
            writeln!(out, "  location #{} {path} {:#x}", k + 1, site.note.pc)?;
            for (a, arg) in site.args().enumerate() {
                writeln!(out, "    argument #{} {}", a + 1, argument(&arg))?;
            }
        }
    }
    Ok(())
}

fn json_probe<'a>(probe: &'a Probe<'a>) -> JsonProbe<'a> {
    JsonProbe {
        path: probe.path,
        provider: probe.provider,
        name: probe.name,
        semaphore: probe.semaphore,
        locations: probe
            .locations
            .iter()
            .map(|(path, site)| JsonLocation {
                path,
                arguments: site.args().map(|a| argument(&a)).collect(),
                site: json_site(site),
            })
            .collect(),
    }
}

/// An argument as BCC's `-vv` words it: `8 unsigned bytes @ ax`.
pub fn argument(arg: &Arg<'_>) -> String {
    let size = arg.size.unwrap_or(8);
    let signed = if arg.signed { "signed  " } else { "unsigned" };
    format!("{size} {signed} bytes @ {}", place(&arg.location))
}

/// Where an argument is, in BCC's words: a constant, a register by its
/// 16-bit name (`ax`, `r12`), memory as `*(bp - 20)`.
fn place(location: &Location<'_>) -> String {
    let offset = |n: i64| {
        if n < 0 {
            format!("- {}", n.unsigned_abs())
        } else {
            format!("+ {n}")
        }
    };
    let index = |index: Option<&str>, scale: u8| match (index, scale) {
        (Some(index), 1) => format!(" + {}", register(index)),
        (Some(index), scale) => format!(" + {} * {scale}", register(index)),
        (None, _) => String::new(),
    };
    match location {
        Location::Constant(value) => value.to_string(),
        Location::Register(r) => register(r.name).to_string(),
        Location::Memory(m) => format!(
            "*({} {}{})",
            m.base.map_or("0", register),
            offset(m.offset),
            index(m.index, m.scale)
        ),
        Location::Symbol(s) => format!(
            "*(&{} {}{}{})",
            s.symbol,
            offset(s.offset),
            s.base
                .map_or(String::new(), |b| format!(" + {}", register(b))),
            index(s.index, s.scale)
        ),
        Location::Unsupported(why) => format!("unrecognized argument format ({why})"),
    }
}

/// An x86-64 register by the name BCC gives it: `ax` for `rax`, `r12`
/// as it is; other architectures' as they are.
fn register(name: &str) -> &str {
    match name.strip_prefix('r') {
        Some(family @ ("ax" | "bx" | "cx" | "dx" | "si" | "di" | "bp" | "sp" | "ip")) => family,
        _ => name,
    }
}

fn tracepoints(
    request: &Request,
    filter: Option<&GlobMatcher>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let fs = sdt_trace::TraceFs::open()?;
    let mut json = Vec::new();
    for (category, event) in fs.names("*", "*")? {
        let full = format!("{category}:{event}");
        if filter.is_some_and(|f| !f.is_match(&full)) {
            continue;
        }
        let fields: Vec<(String, String)> = if request.verbosity > 0 || request.json {
            let tracepoint = fs.tracepoint(&category, &event)?;
            tracepoint
                .fields
                .iter()
                .filter(|f| !f.name.starts_with("common_"))
                .map(|f| field(&f.c_type, &f.name))
                .collect()
        } else {
            Vec::new()
        };
        if request.json {
            json.push(JsonTracepoint {
                category,
                event,
                fields: fields
                    .into_iter()
                    .map(|(r#type, name)| JsonField { r#type, name })
                    .collect(),
            });
            continue;
        }
        writeln!(out, "{full}")?;
        for (ty, name) in fields {
            writeln!(out, "    {ty} {name};")?;
        }
    }
    if request.json {
        serde_json::to_writer(&mut *out, &json)?;
        writeln!(out)?;
    }
    Ok(())
}

/// A field's type and name as the format file writes them: the array
/// suffix on the name (`char rwbs[8]`), but `__data_loc char[]` a type.
fn field(c_type: &str, name: &str) -> (String, String) {
    let data_loc = c_type.starts_with("__data_loc");
    match c_type.find('[') {
        Some(at) if !data_loc => (
            c_type[..at].trim_end().to_string(),
            format!("{name}{}", &c_type[at..]),
        ),
        _ => (c_type.to_string(), name.to_string()),
    }
}

#[derive(Serialize)]
struct JsonProbe<'a> {
    path: &'a str,
    provider: &'a str,
    name: &'a str,
    semaphore: u64,
    locations: Vec<JsonLocation<'a>>,
}

#[derive(Serialize)]
struct JsonLocation<'a> {
    path: &'a str,
    /// Each argument as `-vv` words it.
    arguments: Vec<String>,
    #[serde(flatten)]
    site: JsonSite<'a>,
}

#[derive(Serialize)]
struct JsonTracepoint {
    category: String,
    event: String,
    fields: Vec<JsonField>,
}

#[derive(Serialize)]
struct JsonField {
    r#type: String,
    name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdt_elf::Arch;

    fn words(spec: &str) -> String {
        argument(&Arg::parse(Arch::X86_64, spec))
    }

    #[test]
    fn arguments_read_as_bcc_s() {
        assert_eq!(words("8@%rax"), "8 unsigned bytes @ ax");
        assert_eq!(words("-4@-20(%rbp)"), "4 signed   bytes @ *(bp - 20)");
        assert_eq!(
            words("8@8(%rax,%rbx,4)"),
            "8 unsigned bytes @ *(ax + 8 + bx * 4)"
        );
        assert_eq!(
            words("8@16(%rax,%rbx)"),
            "8 unsigned bytes @ *(ax + 16 + bx)"
        );
        assert_eq!(words("-4@$5"), "4 signed   bytes @ 5");
        assert_eq!(words("8@%r12"), "8 unsigned bytes @ r12");
        assert_eq!(
            words("4@counter+16(%rip)"),
            "4 unsigned bytes @ *(&counter + 16)"
        );
        assert_eq!(words("8@(%rsp)"), "8 unsigned bytes @ *(sp + 0)");
        assert!(words("8f@%xmm0").starts_with("8 unsigned bytes @ unrecognized argument format"));
    }

    #[test]
    fn tracepoint_fields_read_as_the_format_file_writes_them() {
        assert_eq!(field("char[8]", "rwbs"), ("char".into(), "rwbs[8]".into()));
        assert_eq!(
            field("__data_loc char[]", "name"),
            ("__data_loc char[]".into(), "name".into())
        );
        assert_eq!(
            field("const char *", "filename"),
            ("const char *".into(), "filename".into())
        );
    }
}
