//! From probe specs to the exact sites to attach to.
//!
//! Planning reads ELF files only; it loads nothing into the kernel, so it
//! runs without privileges and everything it refuses is refused before any
//! uprobe exists. For each matching note it decides, per site:
//!
//! * where to attach: the file offset of the note's address, after
//!   checking that the bytes there are a no-op. A uprobe on anything else
//!   would corrupt the traced program, so such a site is refused;
//! * which semaphore the kernel should raise (`ref_ctr_offset`);
//! * how to read every argument, as a [`sdt_bpf::arg::ArgSource`]. A site
//!   with an argument that cannot be read (`%xmm0`, `%ah`) is refused with
//!   a message that names it, and the other sites are still traced.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use sdt_bpf::arg::ArgSource;
use sdt_elf::{Arch, Arg, ElfFile, Location, SiteInstruction};

use crate::{Error, ProbeSpec};

/// Where the probes are looked for.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Trace only this process; specs without a target mean every object it maps.
    pub pid: Option<i32>,
    /// The executable that specs without a target mean (the program of
    /// `sdt trace -c`); takes precedence over the process's objects.
    pub default_target: Option<PathBuf>,
}

/// One site to attach to.
#[derive(Clone, Debug)]
pub struct PlannedSite {
    pub provider: String,
    pub name: String,
    /// The object's path as the user or the traced process sees it.
    pub path: PathBuf,
    /// The path the kernel opens (under `/proc/PID/root` for a process).
    pub attach_path: PathBuf,
    /// The probe's address, as `sdt list` shows it.
    pub address: u64,
    /// File offset of the no-op instruction to put the uprobe on: the note's address.
    pub attach_offset: u64,
    /// File offset of the semaphore, if the site has one.
    pub semaphore_offset: Option<u64>,
    pub args: Vec<PlannedArg>,
}

/// How one argument is read and shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedArg {
    pub source: ArgSource,
    pub size: u8,
    pub signed: bool,
    pub float: bool,
}

/// The result of planning.
#[derive(Debug, Default)]
pub struct Plan {
    pub sites: Vec<PlannedSite>,
    /// Sites that were refused and notes that were skipped, one line each.
    pub warnings: Vec<String>,
}

/// An object to look for probes in.
struct Object {
    path: PathBuf,
    open_path: PathBuf,
}

/// Finds and checks every site the specs select.
pub fn plan(specs: &[ProbeSpec], scope: &Scope) -> Result<Plan, Error> {
    let mut plan = Plan::default();
    let mut files: HashMap<PathBuf, ElfFile> = HashMap::new();
    let mut seen: HashSet<(PathBuf, u64)> = HashSet::new();
    let mut process_objects = None;

    for spec in specs {
        let objects = objects_for(spec, scope, &mut process_objects)?;
        let explicit = spec.target.is_some() || scope.pid.is_none();
        let mut matched = 0usize;
        let mut candidates = Vec::new();
        for object in &objects {
            let file = match files.get(&object.open_path) {
                Some(file) => file,
                None => {
                    let opened = ElfFile::open(&object.open_path).map_err(Error::Elf);
                    let opened = match opened {
                        Ok(file) => file,
                        Err(e) if !explicit => {
                            plan.warnings
                                .push(format!("skipping {}: {e}", object.path.display()));
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    files.entry(object.open_path.clone()).or_insert(opened)
                }
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
            for probe in probes.iter() {
                if !spec.matches(probe.provider, probe.name) {
                    candidates.push(format!("{}:{}", probe.provider, probe.name));
                    continue;
                }
                matched += 1;
                for site in probe.sites {
                    let planned = plan_site(file, object, probe.provider, probe.name, site);
                    match planned {
                        Ok(planned) => {
                            if seen.insert((planned.attach_path.clone(), planned.attach_offset)) {
                                plan.sites.push(planned);
                            }
                        }
                        Err(why) => plan.warnings.push(format!(
                            "not tracing {}:{} at {:#x} in {}: {why}",
                            probe.provider,
                            probe.name,
                            site.address,
                            object.path.display()
                        )),
                    }
                }
            }
        }
        if matched == 0 {
            return Err(Error::ProbeNotFound {
                spec: spec.text.clone(),
                searched: objects.iter().map(|o| o.path.clone()).collect(),
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

fn objects_for(
    spec: &ProbeSpec,
    scope: &Scope,
    process_objects: &mut Option<Vec<sdt_elf::MappedObject>>,
) -> Result<Vec<Object>, Error> {
    let mut mapped = |pid: i32| -> Result<Vec<sdt_elf::MappedObject>, Error> {
        if process_objects.is_none() {
            let pid = u32::try_from(pid).map_err(|_| Error::BadPid(pid))?;
            *process_objects = Some(sdt_elf::mapped_objects(pid).map_err(Error::Elf)?);
        }
        Ok(process_objects.clone().unwrap_or_default())
    };
    let objects =
        match (&spec.target, scope.pid, &scope.default_target) {
            (Some(target), Some(pid), None) => {
                let resolved = sdt_elf::resolve(target).ok();
                let in_process: Vec<Object> = mapped(pid)?
                    .into_iter()
                    .filter(|o| names_object(target, resolved.as_deref(), &o.path))
                    .map(|o| Object {
                        path: o.path,
                        open_path: o.open_path,
                    })
                    .collect();
                if in_process.is_empty() {
                    let path = resolved.ok_or_else(|| {
                        Error::Elf(sdt_elf::Error::NotFound {
                            name: target.clone(),
                        })
                    })?;
                    vec![Object {
                        open_path: path.clone(),
                        path,
                    }]
                } else {
                    in_process
                }
            }
            (Some(target), _, _) => {
                let path = sdt_elf::resolve(target).map_err(Error::Elf)?;
                vec![Object {
                    open_path: path.clone(),
                    path,
                }]
            }
            // Before `-c`'s command has called exec, its process maps sdt
            // itself, so the command's program is what an omitted target means.
            (None, _, Some(program)) => vec![Object {
                path: program.clone(),
                open_path: program.clone(),
            }],
            (None, Some(pid), None) => mapped(pid)?
                .into_iter()
                .map(|o| Object {
                    path: o.path,
                    open_path: o.open_path,
                })
                .collect(),
            (None, None, None) => return Err(Error::BadSpec {
                spec: spec.text.clone(),
                why:
                    "say which file: TARGET:PROVIDER:NAME, or trace a process with -p PID or -c CMD"
                        .into(),
            }),
        };
    Ok(objects)
}

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
    object: &Object,
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
        .enumerate()
        .map(|(n, arg)| plan_arg(&arg).map_err(|why| format!("arg{n} `{}`: {why}", arg.spec)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PlannedSite {
        provider: provider.to_string(),
        name: name.to_string(),
        path: object.path.clone(),
        attach_path: object.open_path.clone(),
        address: site.address,
        attach_offset,
        semaphore_offset,
        args,
    })
}

fn plan_arg(arg: &Arg<'_>) -> Result<PlannedArg, String> {
    let size = arg.size.ok_or("the spec has no valid size")?;
    let reg = |name: &str| {
        sdt_bpf::x86_64::pt_regs_offset(name)
            .ok_or_else(|| format!("register {name} is not saved in pt_regs"))
    };
    let source = match arg.location {
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
        Location::Constant(value) => ArgSource::Const(narrow(value, size, arg.signed)),
        Location::Unsupported(why) => return Err(why.to_string()),
    };
    Ok(PlannedArg {
        source,
        size,
        signed: arg.signed,
        float: arg.float,
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
fn suggest(wanted: &str, mut candidates: Vec<String>) -> Vec<String> {
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
