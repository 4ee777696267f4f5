//! Probes in objects that the traced process maps after tracing started: a
//! library it `dlopen`s, or a provider it defines at run time (the `sdt`
//! crate's `dynamic` module, libstapsdt), whose object does not exist
//! while the script is compiled.
//!
//! Under `-p` or `-c`, a USDT attach point without a file, or with a glob
//! over the process's objects, means every object the process maps, also
//! later ([`sdt_trace::selects_later_objects`]). When one appears, the
//! runtime hands it to [`Growth::add`], which plans the attach points'
//! sites in it, lowers them as the first compilation lowered its own
//! sites, and generates their programs by compiling the script again with
//! the new units after the old ones. Code generation is deterministic and
//! registers each output layout once, so the old programs' output ids keep
//! their meaning and the new programs load against the maps that already
//! exist; [`Growth::add`] checks that the maps come out the same.
//!
//! An object is planned for each attach point that may mean it, and once
//! for each: the runtime hands every object it finds to [`Growth::add`],
//! also one that some attach point already has sites in (one that named
//! it by path, before the process mapped it), and the growth skips only
//! the attach points that already have sites there.
//!
//! Only the scratch map depends on which units are compiled (its size is
//! the most any program needs), so the first compilation reserves it: for
//! each such attach point it also compiles, and then drops, a program for
//! a site with all twelve arguments, the largest record a site can need.

use std::collections::HashMap;

use sdt_bpf::arg::ArgSource;
use sdt_codegen::layout::OutputInfo;
use sdt_codegen::{ArgAccess, Ids, Unit};
use sdt_elf::{FileId, MappedObject};
use sdt_trace::{PlannedSite, ProbeSpec, ProgramSpec};

use crate::{Compilation, Lowering, Names};

/// An attach point that also means objects mapped later.
#[derive(Clone, Debug)]
pub(crate) struct LaterPoint {
    /// Its probe instance.
    pub instance: usize,
    pub spec: ProbeSpec,
    /// The object as the script wrote it, for probe names.
    pub written: Option<String>,
}

/// What a compilation keeps to grow later; only [`Growth`] reads it.
#[derive(Clone, Debug, Default)]
pub struct Later {
    pub(crate) points: Vec<LaterPoint>,
    /// The units of the compilation's programs, in order.
    pub(crate) units: Vec<Unit>,
    /// The units compiled only to reserve room (see the module docs).
    pub(crate) reserve: Vec<Unit>,
    pub(crate) codegen: sdt_codegen::Options,
    pub(crate) cookies: bool,
}

impl Later {
    /// The unit that reserves room for attach point `point`'s programs.
    pub(crate) fn reserve_unit(point: &LaterPoint) -> Unit {
        Unit {
            instance: point.instance,
            prog_type: sdt_bpf::ProgramType::Kprobe,
            args: ArgAccess::Usdt((0..12).map(|_| Some(ArgSource::Const(0))).collect()),
            ids: Ids::Cookie,
            name: "reserve".to_string(),
            display: String::new(),
            site_address: None,
            counted: None,
        }
    }
}

/// The tables of a compilation that has grown: every probe name, site and
/// output layout so far, by the ids the programs send.
pub struct Growth {
    lowering: Lowering,
    /// The output layouts, the compilation's first.
    pub outputs: Vec<OutputInfo>,
    /// The probe instances of the attach points that have sites in an
    /// object mapped later.
    attached: std::collections::HashSet<usize>,
    /// The objects each attach point (by probe instance) has sites in, by
    /// the device and inode of the file opened (as `fstat` gives them: on
    /// btrfs the device differs from the one the process's maps name).
    covered: std::collections::HashSet<(usize, FileId)>,
}

/// What one object added.
#[derive(Default)]
pub struct Added {
    /// The programs to load and attach; their map references hold
    /// indices into the compilation's maps.
    pub programs: Vec<ProgramSpec>,
    /// The probes attached, as `usdt:PATH:PROVIDER:NAME`, each once.
    pub probes: Vec<String>,
    /// Sites refused and notes skipped, one line each.
    pub warnings: Vec<String>,
}

impl Growth {
    /// Starts from what `compilation` has.
    pub fn new(compilation: &Compilation) -> Growth {
        let names = compilation.names.clone();
        let probe_ids = ids_of(&names.probes);
        let func_ids = ids_of(&names.funcs);
        Growth {
            lowering: Lowering {
                names,
                probe_ids,
                func_ids,
                sites: compilation.sites.clone(),
                units: compilation.later.units.clone(),
                roles: Vec::new(),
                attach: Vec::new(),
                cookies: compilation.later.cookies,
                counted: compilation.counted.clone(),
                warnings: Vec::new(),
                // Objects mapped after the start keep the kernel's path.
                fast: crate::fast::FastLowering::new(false),
            },
            outputs: compilation.compiled.outputs.clone(),
            attached: std::collections::HashSet::new(),
            covered: covered_at_start(compilation),
        }
    }

    /// The attach points that mean objects mapped later, yet have no
    /// site: none matched when the script was planned, and none in any
    /// object mapped since. What the user wrote, for messages.
    pub fn unattached<'c>(&self, compilation: &'c Compilation) -> Vec<&'c ProbeSpec> {
        compilation
            .later
            .points
            .iter()
            .filter(|point| {
                let instance = &compilation.program.probes[point.instance];
                let at_start =
                    match &compilation.bound[instance.block][instance.attach_point].target {
                        sdt_bind::Target::Usdt(sites) => !sites.is_empty(),
                        _ => true,
                    };
                !at_start && !self.attached.contains(&point.instance)
            })
            .map(|point| &point.spec)
            .collect()
    }

    pub fn names(&self) -> &Names {
        &self.lowering.names
    }

    /// Every site so far, by the site id in cookies.
    pub fn sites(&self) -> &[PlannedSite] {
        &self.lowering.sites
    }

    /// Plans `object`, newly mapped by a traced process, for every attach
    /// point that means it, and generates the programs for its sites.
    /// Nothing changes when that fails.
    pub fn add(&mut self, compilation: &Compilation, object: &MappedObject) -> Added {
        let mut added = Added::default();
        let mut lowering = self.lowering.clone();
        let first_unit = lowering.units.len();
        let mut attached = Vec::new();
        let id = object.file().ok().map(sdt_elf::ElfFile::id);
        for point in &compilation.later.points {
            if id.is_some_and(|id| self.covered.contains(&(point.instance, id))) {
                continue;
            }
            let plan = sdt_trace::plan_mapped(&point.spec, object);
            added.warnings.extend(plan.warnings);
            if plan.sites.is_empty() {
                continue;
            }
            let instance = &compilation.program.probes[point.instance];
            let first_site = lowering.sites.len();
            if let Err(d) = lowering.usdt(
                &compilation.program,
                point.instance,
                instance,
                &plan.sites,
                point.written.as_deref(),
            ) {
                added.warnings.push(format!(
                    "{} in {}: {}",
                    d.message,
                    object.path.display(),
                    d.hints.join("; ")
                ));
                continue;
            }
            attached.push(point.instance);
            for site in &lowering.sites[first_site..] {
                let probe = format!(
                    "usdt:{}:{}:{}",
                    site.path.display(),
                    site.provider,
                    site.name
                );
                if !added.probes.contains(&probe) {
                    added.probes.push(probe);
                }
            }
        }
        added.warnings.append(&mut lowering.warnings);
        if lowering.units.len() == first_unit {
            return added;
        }
        let later = &compilation.later;
        let units: Vec<Unit> = lowering
            .units
            .iter()
            .chain(&later.reserve)
            .cloned()
            .collect();
        let compiled = match sdt_codegen::compile(&compilation.program, &units, &later.codegen) {
            Ok(compiled) => compiled,
            Err(errors) => {
                let why: Vec<String> = errors.into_iter().map(|d| d.message).collect();
                added.warnings.push(format!(
                    "not tracing {}: {}",
                    object.path.display(),
                    why.join("; ")
                ));
                added.probes.clear();
                return added;
            }
        };
        let same_maps = compiled.maps.len() == compilation.compiled.maps.len()
            && compiled
                .maps
                .iter()
                .zip(&compilation.compiled.maps)
                .all(|(new, old)| new.spec == old.spec);
        if !same_maps {
            added.warnings.push(format!(
                "not tracing {}: its programs need maps other than those created at the start",
                object.path.display()
            ));
            added.probes.clear();
            return added;
        }
        added.programs = crate::program_specs(
            &compiled.programs[first_unit..lowering.units.len()],
            &lowering.attach,
        );
        lowering.roles.clear();
        lowering.attach.clear();
        self.lowering = lowering;
        if let Some(id) = id {
            self.covered
                .extend(attached.iter().map(|&instance| (instance, id)));
        }
        self.attached.extend(attached);
        self.outputs = compiled.outputs;
        added
    }
}

/// The objects that each attach point meaning objects mapped later has
/// sites in from the start.
fn covered_at_start(compilation: &Compilation) -> std::collections::HashSet<(usize, FileId)> {
    use std::os::unix::fs::MetadataExt;
    let mut covered = std::collections::HashSet::new();
    for point in &compilation.later.points {
        let instance = &compilation.program.probes[point.instance];
        let sdt_bind::Target::Usdt(sites) =
            &compilation.bound[instance.block][instance.attach_point].target
        else {
            continue;
        };
        for site in sites {
            // The descriptor is the site's, checked when it was planned;
            // a copy of it gives its `fstat`.
            let Ok(meta) = site
                .attach_fd
                .try_clone()
                .map(std::fs::File::from)
                .and_then(|file| file.metadata())
            else {
                continue;
            };
            covered.insert((
                point.instance,
                FileId {
                    device: meta.dev(),
                    inode: meta.ino(),
                },
            ));
        }
    }
    covered
}

/// Each name's index.
fn ids_of(names: &[String]) -> HashMap<String, u32> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect()
}
