//! Attaching to objects that the traced process tree maps while it is
//! traced: a library it `dlopen`s, or a provider it defines at run time,
//! whose object did not exist when the script was compiled.
//!
//! The kernel records every executable mapping of the tree
//! ([`sdt_bpf::MappingEvents`]), and wakes the run as soon as it has (the
//! buffers' watermark is one byte). At each step of the run, the processes
//! that mapped something new are listed again through `sdt_elf`, which
//! opens each object through `/proc/PID/map_files` and checks that it is
//! the file mapped (so a memfd or a deleted file is read too), and every
//! object not looked at before goes to [`sdt_script::Growth::add`], whose
//! programs are loaded and attached into the running session. An object
//! is looked at once, by device and inode, however many processes map it.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

use sdt_bpf::{MappingEvents, ProcessEvent};
use sdt_elf::FileId;
use sdt_script::{Compilation, Growth};
use sdt_trace::Session;

use crate::Runtime;

/// Attach points that waited for objects mapped after the start and
/// never found their probe in one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unattached {
    /// Each attach point.
    pub specs: Vec<Waited>,
    /// The programs the traced processes were seen running (by
    /// `/proc/PID/exe`), each once, in the order seen.
    pub programs: Vec<PathBuf>,
}

/// An attach point that waited for objects mapped later.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waited {
    /// As written in the script.
    pub text: String,
    /// The object, as written, if one was (a glob over the process's).
    pub target: Option<String>,
    /// Its `provider:name` pattern.
    pub probe: String,
}

/// The watch over the traced trees' new objects.
pub(crate) struct LaterObjects {
    /// The mappings of each traced tree, one recorder per root.
    events: Vec<MappingEvents>,
    growth: Growth,
    /// Objects already handed to the growth, by the device and inode
    /// that the kernel's records and the maps name them by: a mapping of
    /// one of them needs no listing.
    seen: HashSet<FileId>,
    /// Processes of the tree that have mapped something, to list again
    /// when the kernel dropped records.
    processes: BTreeSet<u32>,
    /// Processes to list at the next poll whatever the records say.
    unlisted: BTreeSet<u32>,
    /// The programs the listed processes ran, each once, in the order
    /// seen: what to name when an attach point never found its probe.
    programs: Vec<PathBuf>,
}

impl LaterObjects {
    /// Starts recording the mappings of `pids` (and, with `follow`, of
    /// the processes they fork). With `scan`, the objects `pids` map now
    /// are looked at too, at the first [`poll`](Self::poll): those mapped
    /// between the script's planning and now. Every object goes to the
    /// growth once, however many of the processes map it, also one that
    /// some attach point already has sites in: another attach point may
    /// mean it too, and the growth skips only those that have sites there.
    pub fn open(
        compilation: &Compilation,
        pids: &[u32],
        follow: bool,
        scan: bool,
    ) -> Result<LaterObjects, sdt_bpf::Error> {
        let events = pids
            .iter()
            .map(|&pid| MappingEvents::open(pid as i32, follow, true))
            .collect::<Result<_, _>>()?;
        let mut later = LaterObjects {
            events,
            growth: Growth::new(compilation),
            seen: HashSet::new(),
            processes: pids.iter().copied().collect(),
            unlisted: BTreeSet::new(),
            programs: Vec::new(),
        };
        if scan {
            later.unlisted.extend(pids);
        }
        Ok(later)
    }

    /// The descriptors that are readable when the tree has mapped
    /// something, to wake the run at once.
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::BorrowedFd<'_>> {
        self.events.iter().flat_map(MappingEvents::fds)
    }

    /// Marks an object as looked at; whether it was new.
    fn look_at(&mut self, id: FileId) -> bool {
        self.seen.insert(id)
    }

    /// What was never attached, and the programs seen running.
    pub fn unattached(&self, compilation: &Compilation) -> Unattached {
        Unattached {
            specs: self
                .growth
                .unattached(compilation)
                .into_iter()
                .map(|spec| Waited {
                    text: spec.text.clone(),
                    target: spec.target.clone(),
                    probe: spec.probe.clone(),
                })
                .collect(),
            programs: self.programs.clone(),
        }
    }

    /// Attaches to what the tree mapped since the last call; returns
    /// what to tell the user, one line each.
    pub fn poll(
        &mut self,
        compilation: &Compilation,
        session: &mut Session,
        runtime: &mut Runtime<'_>,
    ) -> Vec<String> {
        let mut to_list = std::mem::take(&mut self.unlisted);
        let events: Vec<ProcessEvent> = self.events.iter_mut().flat_map(|e| e.drain()).collect();
        for event in events {
            match event {
                ProcessEvent::Map(mapped) => {
                    // Anonymous executable memory (`//anon`: JIT code) and
                    // the kernel's own (`[vdso]`) are not files.
                    let file = mapped.path.starts_with('/')
                        && !mapped.path.starts_with("//")
                        && mapped.inode != Some(0);
                    let known = match (mapped.device, mapped.inode) {
                        (Some(device), Some(inode)) => {
                            self.seen.contains(&FileId { device, inode })
                        }
                        _ => false,
                    };
                    if file && !known {
                        to_list.insert(mapped.pid);
                    }
                }
                ProcessEvent::Lost(_) => to_list.extend(self.processes.iter().copied()),
                ProcessEvent::Fork { .. }
                | ProcessEvent::Exec { .. }
                | ProcessEvent::Exit { .. } => {}
            }
        }
        let mut notices = Vec::new();
        for pid in to_list {
            // A process that has already gone left nothing to attach to.
            let Ok(objects) = sdt_elf::mapped_objects(pid) else {
                self.processes.remove(&pid);
                continue;
            };
            self.processes.insert(pid);
            if let Ok(program) = std::fs::read_link(format!("/proc/{pid}/exe")) {
                if !self.programs.contains(&program) {
                    self.programs.push(program);
                }
            }
            for object in objects {
                if !self.look_at(object.id) {
                    continue;
                }
                let added = self.growth.add(compilation, &object);
                notices.extend(added.warnings);
                if added.programs.is_empty() {
                    continue;
                }
                // Whatever attaches, its records decode.
                runtime.grow(&self.growth);
                match session.add(added.programs) {
                    Ok(sites) => {
                        notices.push(format!(
                            "attached {} ({sites} site{}) in process {pid}",
                            added.probes.join(", "),
                            if sites == 1 { "" } else { "s" }
                        ));
                    }
                    Err(e) => notices.push(format!(
                        "could not attach to {}: {}",
                        object.path.display(),
                        e
                    )),
                }
            }
        }
        notices
    }
}
