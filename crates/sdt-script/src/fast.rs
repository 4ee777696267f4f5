//! Which USDT sites take the fast path, and what that needs: the probes
//! whose hits arrive through memory the traced program shares, the
//! programs that replay them, and the anchors whose uprobes raise their
//! semaphores (see `sdt::fastpath` and `sdt_codegen`'s `replay` module).
//!
//! A site takes the fast path when all of these hold: the run asked for
//! it ([`crate::Options::fastpath`]); its object has an anchor for the
//! site's semaphore (it was built with the `sdt` crate's `fastpath`
//! feature); and the probe's program needs nothing that only the kernel
//! knows at the hit ([`sdt_codegen::replay_blocker`]). Every site of that
//! semaphore in the object then takes it, since the program hands over
//! each hit of the probe, whichever site fired. Any other site keeps the
//! kernel's path, and [`FastPlan::kernel`] says why when it had an anchor.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use sdt_codegen::ArgWidth;
use sdt_elf::Anchor;
use sdt_trace::{AttachSite, PlannedSite};

/// The fast path of a compilation.
#[derive(Clone, Debug, Default)]
pub struct FastPlan {
    /// The probes whose hits come through shared memory: a probe's
    /// index here is its slot in the program's table.
    pub probes: Vec<FastProbe>,
    /// The program attached at every anchor, which does nothing: its
    /// uprobes are there to raise the semaphores.
    pub anchors: Option<usize>,
    /// Probes with an anchor that keep the kernel's path, and why, one
    /// line each.
    pub kernel: Vec<String>,
}

impl FastPlan {
    /// Whether any probe may take the fast path.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }
}

/// One probe (a semaphore in an object) whose hits come through shared
/// memory.
#[derive(Clone, Debug)]
pub struct FastProbe {
    /// `usdt:PATH:PROVIDER:NAME`, for messages.
    pub display: String,
    /// The object, open: its device and inode find the semaphore in a
    /// process's mappings.
    pub file: Arc<OwnedFd>,
    /// The path the kernel opens it by.
    object: PathBuf,
    /// The semaphore's offset in the file.
    pub semaphore_offset: u64,
    /// Bit N set when hits copy the bytes `argN` points to.
    pub capture: u64,
    /// The programs that replay each hit (indices into the compiled
    /// programs), with the cookie each is given.
    pub replays: Vec<(usize, u64)>,
}

/// What lowering collects for the fast path.
#[derive(Clone, Default)]
pub(crate) struct FastLowering {
    pub enabled: bool,
    /// Each object's anchors, by the path the kernel opens.
    anchors: HashMap<PathBuf, Vec<Anchor>>,
    pub plan: FastPlan,
    /// Where the anchors' uprobes go.
    pub anchor_sites: Vec<AttachSite>,
}

impl FastLowering {
    pub fn new(enabled: bool) -> FastLowering {
        FastLowering {
            enabled,
            ..FastLowering::default()
        }
    }

    /// The anchor of `site`'s semaphore, if the fast path may serve it.
    pub fn anchor(&mut self, site: &PlannedSite) -> Option<Anchor> {
        if !self.enabled {
            return None;
        }
        let semaphore = site.semaphore_offset?;
        let anchors = self
            .anchors
            .entry(site.attach_path.clone())
            .or_insert_with(|| {
                sdt_elf::ElfFile::open(&site.attach_path)
                    .ok()
                    .and_then(|file| file.probes().ok().map(|p| p.anchors))
                    .unwrap_or_default()
            });
        anchors
            .iter()
            .find(|a| a.semaphore.file_offset == Some(semaphore) && a.file_offset.is_some())
            .copied()
    }

    /// Registers a probe instance's program that replays the hits of
    /// `site`'s probe, unless the instance has one for that probe: the
    /// slot of the probe, and whether a new program is needed.
    pub fn probe(&mut self, site: &PlannedSite, anchor: Anchor, display: &str) -> usize {
        let semaphore = anchor.semaphore.file_offset.unwrap_or_default();
        let anchor_offset = anchor.file_offset.unwrap_or_default();
        if !self
            .anchor_sites
            .iter()
            .any(|a| a.attach_path == site.attach_path && a.offset == anchor_offset)
        {
            self.anchor_sites.push(AttachSite {
                path: site.path.clone(),
                attach_path: site.attach_path.clone(),
                attach_fd: site.attach_fd.clone(),
                offset: anchor_offset,
                ref_ctr_offset: Some(semaphore),
                cookie: 0,
            });
        }
        let same = |p: &FastProbe| p.semaphore_offset == semaphore && p.object == site.attach_path;
        match self.plan.probes.iter().position(same) {
            Some(slot) => slot,
            None => {
                self.plan.probes.push(FastProbe {
                    display: display.to_string(),
                    file: site.attach_fd.clone(),
                    object: site.attach_path.clone(),
                    semaphore_offset: semaphore,
                    capture: anchor.capture,
                    replays: Vec::new(),
                });
                self.plan.probes.len() - 1
            }
        }
    }
}

/// The widths of a site's arguments, for its replayed program.
pub(crate) fn widths(site: &PlannedSite) -> Vec<ArgWidth> {
    site.args
        .iter()
        .map(|a| ArgWidth {
            size: a.size.clamp(1, 8),
            signed: a.signed,
        })
        .collect()
}

/// The program attached at the anchors: it returns at once, and never
/// runs anyway, since nothing calls an anchor.
pub(crate) fn anchor_program(units: &[sdt_codegen::Unit]) -> sdt_codegen::CompiledProgram {
    use sdt_bpf::{Insn, Reg};
    let unit = sdt_codegen::Unit {
        instance: units.first().map_or(0, |u| u.instance),
        prog_type: sdt_bpf::ProgramType::Kprobe,
        args: sdt_codegen::ArgAccess::None,
        ids: sdt_codegen::Ids::Const { probe: 0, site: 0 },
        name: "sdt_anchors".into(),
        display: "the fast path's anchors".into(),
        site_address: None,
        counted: None,
    };
    sdt_codegen::CompiledProgram {
        name: unit.name.clone(),
        display: unit.display.clone(),
        prog_type: unit.prog_type,
        insns: vec![Insn::mov64_imm(Reg::R0, 0), Insn::exit()],
        spans: Vec::new(),
        unit,
        sleepable: false,
    }
}
