//! From probe specs to the exact sites to attach to.
//!
//! Planning reads ELF files only; it loads nothing into the kernel, so it
//! runs without privileges and everything it refuses is refused before any
//! uprobe exists. For each matching note it decides, per site:
//!
//! * where to attach: the file offset of the note's address, after
//!   checking that the bytes there are a no-op. A uprobe on anything else
//!   would corrupt the traced program, so such a site is refused;
//! * which file to attach to: the open file whose bytes were checked,
//!   passed to the kernel as `/proc/self/fd/N`. The kernel then resolves
//!   no name that the traced process could have pointed elsewhere since
//!   (see `sdt_elf::mapped_objects`), and the probe offsets, the semaphore
//!   offsets and the no-op check all describe the inode the uprobe is on;
//! * which semaphore the kernel should raise (`ref_ctr_offset`);
//! * how to read every argument, as a [`sdt_bpf::arg::ArgSource`], or why
//!   it cannot be read (`%xmm0`, `%ah`, a variable that a stripped file no
//!   longer names). That refuses the argument, not the site: a program
//!   that counts hits, or reads the other arguments, still traces it, and
//!   one that reads the argument is told why it cannot.
//!
//! A global or static variable is an argument too: gcc passes one as
//! `8+table(%rip)`, the memory at a symbol plus a constant. The note does
//! not record the instruction that the operand is relative to, so the
//! address comes from the symbol table: the symbol's link-time address
//! plus the offset, moved by the load bias of the file in the process
//! that hit the probe. A uprobe sees the instruction pointer at the
//! probe's own address, the site's link-time address moved by that same
//! bias, so the variable is a constant distance from the saved `rip`:
//! `symbol + offset - site`. That holds for every process at once,
//! whatever each one's bias (PIE, a library loaded anywhere, or none for
//! an executable that is not position-independent), without knowing any
//! of them.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sdt_bpf::arg::ArgSource;
use sdt_elf::{Arch, Arg, ElfFile, FileId, Location, MappedObject, SiteInstruction};

use crate::{Error, ProbeSpec};

/// Where the probes are looked for.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Trace only these processes; specs without a target mean every
    /// object they map.
    pub pids: Vec<i32>,
    /// The executable that specs without a target mean (the program of
    /// `sdt trace -c`); takes precedence over the process's objects.
    pub default_target: Option<PathBuf>,
    /// Where separate debug files are looked for first (`--debuginfo`),
    /// for DWARF that attach points need (a source line).
    pub debug_dirs: Vec<PathBuf>,
    /// Whether uprobes may go where sdt cannot check the code: at a
    /// function whose symbol has no size (`--unsafe`).
    pub allow_unsafe: bool,
}

/// One site to attach to.
#[derive(Clone, Debug)]
pub struct PlannedSite {
    pub provider: String,
    pub name: String,
    /// The object's path as the user or the traced process sees it.
    pub path: PathBuf,
    /// The path the kernel attaches to: `/proc/self/fd/N` of `attach_fd`.
    pub attach_path: PathBuf,
    /// The open file that was checked; it stays open as long as the site,
    /// so `attach_path` names it until the uprobe is attached.
    pub attach_fd: Arc<OwnedFd>,
    /// The probe's address, as `sdt list` shows it.
    pub address: u64,
    /// File offset of the no-op instruction to put the uprobe on: the note's address.
    pub attach_offset: u64,
    /// File offset of the semaphore, if the site has one.
    pub semaphore_offset: Option<u64>,
    pub args: Vec<PlannedArg>,
}

/// How one argument is read and shown.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlannedArg {
    /// How to read it, or why it cannot be read.
    pub source: Result<ArgSource, Unreadable>,
    pub size: u8,
    pub signed: bool,
    pub float: bool,
}

/// Why an argument cannot be read: its spec and the reason, for a human,
/// such as "`-4@8+state(%rip)`: `state` is not in the file's symbol
/// table (...)".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unreadable(Arc<str>);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The result of planning.
#[derive(Debug, Default)]
pub struct Plan {
    pub sites: Vec<PlannedSite>,
    /// Sites that were refused and notes that were skipped, one line each.
    pub warnings: Vec<String>,
}

/// An object to look for probes in: its name for the user, and the open
/// file or why it could not be opened safely.
pub(crate) struct Object {
    pub path: PathBuf,
    pub file: Result<ElfFile, sdt_elf::Error>,
}

/// Finds and checks every site the specs select.
pub fn plan(specs: &[ProbeSpec], scope: &Scope) -> Result<Plan, Error> {
    let mut plan = Plan::default();
    let mut files: HashMap<PathBuf, ElfFile> = HashMap::new();
    // The same file under two names is attached to once.
    let mut seen: HashSet<(FileId, u64)> = HashSet::new();
    let mut process_objects = ProcessObjects::new();

    for spec in specs {
        let objects = objects_for(spec, scope, &mut process_objects, &mut files)?;
        let searched: Vec<PathBuf> = objects.iter().map(|o| o.path.clone()).collect();
        let explicit = named_explicitly(spec.target.as_deref(), scope);
        let mut matched = 0usize;
        let mut candidates = Vec::new();
        for object in objects {
            let file = match object.file {
                Ok(file) => file,
                Err(e) if !explicit => {
                    plan.warnings.push(format!("skipping {}", e.with_causes()));
                    continue;
                }
                // The user named this object: one that cannot be read
                // safely is an error, never a fall-back to another file.
                Err(e) => return Err(Error::Elf(e)),
            };
            let probes = match file.probes() {
                Ok(probes) => probes,
                Err(e) if !explicit => {
                    plan.warnings
                        .push(format!("skipping {}: {e}", object.path.display()));
                    continue;
                }
                Err(e) => return Err(Error::Elf(e)),
            };
            matched += plan_object(
                spec,
                &file,
                &object.path,
                &probes,
                &mut seen,
                &mut plan,
                &mut candidates,
            );
        }
        if matched == 0 {
            return Err(Error::ProbeNotFound {
                spec: spec.text.clone(),
                searched,
                suggestions: suggest(&spec.probe, candidates),
            });
        }
    }
    if plan.sites.is_empty() {
        return Err(Error::NoUsableSite {
            reasons: plan.warnings.clone(),
        });
    }
    Ok(plan)
}

/// Whether `spec` also means the objects that the traced process (tree)
/// maps after tracing has started: with `-p` or `-c`, a spec without a
/// target (every object of the process) or with a glob over its objects.
/// A spec that names a file means that file, loaded or not.
pub fn selects_later_objects(spec: &ProbeSpec, scope: &Scope) -> bool {
    !scope.pids.is_empty() && spec.target.as_deref().is_none_or(is_glob)
}

/// Plans the sites `spec` selects among the probes of one object, into
/// `plan`, skipping sites already in `seen`; returns how many probes
/// matched. Probes that did not match go to `candidates`, for
/// suggestions.
fn plan_object(
    spec: &ProbeSpec,
    file: &ElfFile,
    path: &Path,
    probes: &sdt_elf::Probes<'_>,
    seen: &mut HashSet<(FileId, u64)>,
    plan: &mut Plan,
    candidates: &mut Vec<String>,
) -> usize {
    let mut matched = 0;
    for probe in probes.iter() {
        if !spec.matches(probe.provider, probe.name) {
            candidates.push(format!("{}:{}", probe.provider, probe.name));
            continue;
        }
        matched += 1;
        for site in probe.sites {
            match plan_site(file, path, probe.provider, probe.name, site) {
                Ok(planned) => {
                    if seen.insert((file.id(), planned.attach_offset)) {
                        plan.sites.push(planned);
                    }
                }
                Err(why) => plan.warnings.push(format!(
                    "not tracing {}:{} at {:#x} in {}: {why}",
                    probe.provider,
                    probe.name,
                    site.address,
                    path.display()
                )),
            }
        }
    }
    matched
}

/// The sites `spec` selects in one object that a traced process mapped
/// after tracing started (a library it loaded, a provider it defined at
/// run time): none is not an error. An object that cannot be read safely
/// gives a warning and no site.
pub fn plan_mapped(spec: &ProbeSpec, object: &MappedObject) -> Plan {
    let mut plan = Plan::default();
    if let Some(target) = spec.target.as_deref() {
        let selected = globset::Glob::new(target)
            .is_ok_and(|g| glob_selects(&g.compile_matcher(), &object.path));
        if !selected {
            return plan;
        }
    }
    let file = match object.file() {
        Ok(file) => file,
        Err(e) => {
            plan.warnings.push(format!("skipping {}", e.with_causes()));
            return plan;
        }
    };
    match file.probes() {
        Ok(probes) => {
            plan_object(
                spec,
                file,
                &object.path,
                &probes,
                &mut HashSet::new(),
                &mut plan,
                &mut Vec::new(),
            );
        }
        Err(e) => plan
            .warnings
            .push(format!("skipping {}: {e}", object.path.display())),
    }
    plan
}

/// The objects a spec means. Files named by the user are opened once and
/// shared between specs; the process's objects are listed once.
fn objects_for(
    spec: &ProbeSpec,
    scope: &Scope,
    process_objects: &mut ProcessObjects,
    files: &mut HashMap<PathBuf, ElfFile>,
) -> Result<Vec<Object>, Error> {
    objects(
        spec.target.as_deref(),
        &spec.text,
        scope,
        process_objects,
        files,
    )
}

/// The objects a target names: a path, a program or library name, or,
/// with a process, a glob over the objects it maps; with no target, the
/// `-c` command's executable or every object of the process. `text` is
/// the spec, for messages.
pub(crate) fn objects(
    target: Option<&str>,
    text: &str,
    scope: &Scope,
    process_objects: &mut ProcessObjects,
    files: &mut HashMap<PathBuf, ElfFile>,
) -> Result<Vec<Object>, Error> {
    let mut named = |path: PathBuf| -> Result<Object, Error> {
        let file = match files.get(&path) {
            Some(file) => file.clone(),
            None => {
                let file = ElfFile::open(&path).map_err(Error::Elf)?;
                files.insert(path.clone(), file.clone());
                file
            }
        };
        Ok(Object {
            path,
            file: Ok(file),
        })
    };
    let pids = scope.pids.as_slice();
    let objects =
        match (target, pids, &scope.default_target) {
            (Some(target), [_, ..], None) => {
                in_processes(target, text, pids, process_objects, &mut named)?
            }
            // A glob over files: each match that is an ELF file.
            (Some(target), _, _) if is_glob(target) => {
                let paths = glob_files(target)?;
                if paths.is_empty() {
                    return Err(Error::Elf(sdt_elf::Error::NotFound {
                        name: target.to_string(),
                    }));
                }
                paths
                    .into_iter()
                    .map(|path| Object {
                        file: ElfFile::open(&path),
                        path,
                    })
                    .collect()
            }
            (Some(target), _, _) => vec![named(sdt_elf::resolve(target).map_err(Error::Elf)?)?],
            // Before `-c`'s command has called exec, its process maps sdt
            // itself, so the command's program is what an omitted target means.
            (None, _, Some(program)) => vec![named(program.clone())?],
            (None, [_, ..], None) => {
                let mut all = Vec::new();
                for &pid in pids {
                    all.extend(mapped(process_objects, pid)?.iter().map(in_process));
                }
                all
            }
            (None, [], None) => return Err(Error::BadSpec {
                spec: text.to_string(),
                why:
                    "say which file: TARGET:PROVIDER:NAME, or trace a process with -p PID or -c CMD"
                        .into(),
            }),
        };
    Ok(objects)
}

/// The objects of the traced processes that `target` names: a glob picks
/// among them by path or file name; a path or name, the objects it is
/// (`/proc/PID/root/usr/bin/x`, as `bpftrace -l -p PID` names objects, is
/// the process's own `/usr/bin/x`); a name none of them maps is the file
/// it resolves to.
fn in_processes(
    target: &str,
    text: &str,
    pids: &[i32],
    process_objects: &mut ProcessObjects,
    named: &mut dyn FnMut(PathBuf) -> Result<Object, Error>,
) -> Result<Vec<Object>, Error> {
    let glob = is_glob(target)
        .then(|| globset::Glob::new(target).map(|g| g.compile_matcher()))
        .transpose()
        .map_err(|e| Error::BadSpec {
            spec: text.to_string(),
            why: e.kind().to_string(),
        })?;
    let mut found = Vec::new();
    let mut resolved = None;
    for &pid in pids {
        let inside = target
            .strip_prefix(&format!("/proc/{pid}/root/"))
            .map(|rest| format!("/{rest}"));
        let target = inside.as_deref().unwrap_or(target);
        resolved = sdt_elf::resolve(target).ok();
        found.extend(
            mapped(process_objects, pid)?
                .iter()
                .filter(|o| match &glob {
                    Some(g) => glob_selects(g, &o.path),
                    None => names_object(target, resolved.as_deref(), &o.path),
                })
                .map(in_process),
        );
    }
    if !found.is_empty() || glob.is_some() {
        return Ok(found);
    }
    let path = resolved.ok_or_else(|| {
        Error::Elf(sdt_elf::Error::NotFound {
            name: target.to_string(),
        })
    })?;
    Ok(vec![named(path)?])
}

fn in_process(object: &MappedObject) -> Object {
    Object {
        path: object.path.clone(),
        file: object.file().cloned(),
    }
}

/// Whether a glob over a process's objects picks the one at `path`: by
/// its whole path or by its file name.
fn glob_selects(glob: &globset::GlobMatcher, path: &Path) -> bool {
    glob.is_match(path) || path.file_name().is_some_and(|n| glob.is_match(n))
}

pub(crate) fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Whether the objects of a target were named by the user, so that one
/// that cannot be read is an error rather than skipped: a path or name
/// is; a glob, or the objects of a process, are not.
pub(crate) fn named_explicitly(target: Option<&str>, scope: &Scope) -> bool {
    match target {
        Some(target) => !is_glob(target),
        None => scope.pids.is_empty(),
    }
}

/// The files a glob such as `./bin/app*` or `/opt/*/lib/libx.so` matches,
/// in order; directories and what cannot be read are left out.
pub fn glob_files(pattern: &str) -> Result<Vec<PathBuf>, Error> {
    let paths = glob::glob(pattern).map_err(|e| Error::BadSpec {
        spec: pattern.to_string(),
        why: e.msg.to_string(),
    })?;
    // The glob crate drops a leading `./`; names are shown as written.
    let here = pattern.starts_with("./");
    Ok(paths
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .map(|p| {
            if here && p.is_relative() && !p.starts_with(".") {
                Path::new(".").join(p)
            } else {
                p
            }
        })
        .collect())
}

/// The objects of process `pid`, listed on first use.
fn mapped(process_objects: &mut ProcessObjects, pid: i32) -> Result<&[MappedObject], Error> {
    let objects = match process_objects.entry(pid) {
        std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
        std::collections::hash_map::Entry::Vacant(new) => {
            let id = u32::try_from(pid).map_err(|_| Error::BadPid(pid))?;
            new.insert(sdt_elf::mapped_objects(id).map_err(Error::Elf)?)
        }
    };
    Ok(objects)
}

/// The objects each traced process maps, listed once.
pub(crate) type ProcessObjects = HashMap<i32, Vec<MappedObject>>;

/// Whether the user's `target` names the mapped object at `path`: the same
/// path, the path `target` resolves to, or a library name such as `libc`
/// for `/usr/lib/x86_64-linux-gnu/libc.so.6`.
fn names_object(target: &str, resolved: Option<&Path>, path: &Path) -> bool {
    if Path::new(target) == path || resolved == Some(path) {
        return true;
    }
    let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if target.contains('/') {
        return false;
    }
    file_name == target
        || [format!("{target}.so"), format!("lib{target}.so")]
            .iter()
            .any(|stem| file_name == stem || file_name.starts_with(&format!("{stem}.")))
}

fn plan_site(
    file: &ElfFile,
    path: &Path,
    provider: &str,
    name: &str,
    site: &sdt_elf::Site<'_>,
) -> Result<PlannedSite, String> {
    if site.arch != Arch::X86_64 {
        return Err(format!(
            "tracing {} files is not supported yet, only x86-64",
            site.arch
        ));
    }
    let file_offset = site
        .file_offset
        .ok_or("the probe address is not in an executable segment of the file")?;
    // Always at the note's address, even where libbpf's convention (`nop`
    // then a 5-byte nop) would attach one byte later: the kernel turns a
    // uprobe on a 5-byte nop into a call that writes below the stack
    // pointer, which corrupts a C leaf function that keeps data in the red
    // zone. Probes of the `sdt` crate point their notes at the 5-byte nop
    // themselves, because Rust keeps nothing in the red zone around them.
    let attach_offset = match file.site_instruction(site) {
        SiteInstruction::Nop { .. } => file_offset,
        SiteInstruction::NotNop => {
            return Err(format!(
                "the instruction at file offset {file_offset:#x} is not a no-op; a uprobe there \
                 would corrupt the program, so sdt refuses (does the file match its notes?)"
            ))
        }
        SiteInstruction::Unknown => return Err("cannot check the instruction at the site".into()),
    };
    let semaphore_offset = match site.semaphore {
        None => None,
        Some(semaphore) => {
            let offset = semaphore
                .file_offset
                .ok_or("the semaphore is not in a writable segment of the file")?;
            if offset % 2 != 0 {
                return Err(format!(
                    "the semaphore's file offset {offset:#x} is not 2-byte aligned"
                ));
            }
            Some(offset)
        }
    };
    let args = site
        .args()
        .map(|arg| PlannedArg {
            source: plan_arg(&arg, file, site.address)
                .map_err(|why| Unreadable(format!("`{}`: {why}", arg.spec).into())),
            // An argument without a valid size cannot be read; 8 bytes is
            // the width of the slot it is shown in.
            size: arg.size.unwrap_or(8),
            signed: arg.signed,
            float: arg.float,
        })
        .collect();
    Ok(PlannedSite {
        provider: provider.to_string(),
        name: name.to_string(),
        path: path.to_path_buf(),
        attach_path: PathBuf::from(format!("/proc/self/fd/{}", file.descriptor().as_raw_fd())),
        attach_fd: Arc::clone(file.descriptor()),
        address: site.address,
        attach_offset,
        semaphore_offset,
        args,
    })
}

/// How to read `arg` of the site at `site_address` in `file`.
fn plan_arg(arg: &Arg<'_>, file: &ElfFile, site_address: u64) -> Result<ArgSource, String> {
    let size = arg.size.ok_or("the spec has no valid size")?;
    let reg = |name: &str| {
        sdt_bpf::x86_64::pt_regs_offset(name)
            .ok_or_else(|| format!("register {name} is not saved in pt_regs"))
    };
    Ok(match arg.location {
        Location::Register(r) => ArgSource::Reg {
            ctx_offset: reg(r.name)?,
            size: size.min(r.width),
            signed: arg.signed,
        },
        Location::Memory(m) => ArgSource::Mem {
            base_ctx_offset: reg(m.base.ok_or("a memory operand without a base register")?)?,
            index: m
                .index
                .map(reg)
                .transpose()?
                .map(|offset| (offset, m.scale)),
            disp: m.offset,
            size,
            signed: arg.signed,
        },
        // The memory at a symbol: `rip` at the probe plus the distance from
        // the site to the symbol (see the module doc). The saved `rip` is
        // one more register to add, so a symbol with a base and an index
        // cannot be read this way.
        Location::Symbol(m) => {
            let address = file.symbol_memory(&m, size).map_err(|e| e.to_string())?;
            let disp = address.wrapping_sub(site_address) as i64;
            let rip = reg("rip")?;
            let (base_ctx_offset, index) = match (m.base, m.index) {
                (None, None) => (rip, None),
                (Some(base), None) => (reg(base)?, Some((rip, 1))),
                (None, Some(index)) => (rip, Some((reg(index)?, m.scale))),
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "`{}` adds two registers to a symbol; with the load bias that is \
                         three terms, and sdt reads a symbol plus one register at most",
                        arg.operand()
                    ))
                }
            };
            ArgSource::Mem {
                base_ctx_offset,
                index,
                disp,
                size,
                signed: arg.signed,
            }
        }
        Location::Constant(value) => ArgSource::Const(narrow(value, size, arg.signed)),
        Location::Unsupported(why) => return Err(why.to_string()),
    })
}

/// Truncates `value` to `size` bytes, then sign- or zero-extends it.
pub(crate) fn narrow(value: i64, size: u8, signed: bool) -> i64 {
    let shift = 64 - 8 * u32::from(size.clamp(1, 8));
    if signed {
        (value << shift) >> shift
    } else {
        ((value as u64) << shift >> shift) as i64
    }
}

/// Up to three probe names close to what the user typed.
pub(crate) fn suggest(wanted: &str, mut candidates: Vec<String>) -> Vec<String> {
    candidates.sort();
    candidates.dedup();
    let literal: String = wanted.chars().filter(|c| !"*?[]{}".contains(*c)).collect();
    let mut scored: Vec<(f64, String)> = candidates
        .into_iter()
        .map(|c| (strsim::normalized_levenshtein(&literal, &c), c))
        .filter(|(score, _)| *score >= 0.5)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrows_like_the_kernel_code() {
        assert_eq!(narrow(-1, 4, false), 0xffff_ffff);
        assert_eq!(narrow(0xff, 1, true), -1);
        assert_eq!(narrow(-9, 8, true), -9);
        assert_eq!(narrow(0x1_0000_0005, 4, true), 5);
    }

    #[test]
    fn library_names_match_mapped_objects() {
        let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(names_object("libc", None, libc));
        assert!(names_object("c", None, libc));
        assert!(names_object("libc.so.6", None, libc));
        assert!(!names_object("libcrypt", None, libc));
        assert!(names_object(
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            None,
            libc
        ));
    }

    #[test]
    fn suggests_close_names_only() {
        let got = suggest(
            "python:function_entry",
            vec!["python:function__entry".into(), "python:gc__start".into()],
        );
        assert_eq!(got, vec!["python:function__entry".to_string()]);
    }
}
