//! A live tracing session: maps created, programs loaded and attached,
//! records read.
//!
//! The session knows nothing of what the programs do; a compiler hands it
//! map specs and programs whose map references hold indices into those
//! specs ([`sdt_bpf::relocate_maps`]).
//!
//! Start-up order matters for the traced programs: every map is created
//! and every program loaded before anything is attached ([`Session::load`],
//! then [`Session::attach`]), so a verifier rejection leaves no uprobe and
//! no raised semaphore behind, and programs that are run by hand (BEGIN)
//! can run before the first probe fires. Shut-down runs the other way
//! round: [`Session::detach`] first (the kernel lowers the semaphores it
//! raised), then whatever the programs had already written is drained. If
//! sdt dies instead, the kernel closes its file descriptors, which
//! detaches and lowers the semaphores just the same.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Duration;

use sdt_bpf::{
    Attachment, Features, Insn, LoadOptions, Map, MapSpec, MapType, Mechanism, Program,
    ProgramType, RingBuf, UprobeAttach, UprobeSite,
};

use crate::cgroup::Cgroup;
use crate::follow::Follow;
use crate::Error;

/// A program to load, and where it goes.
#[derive(Clone, Debug)]
pub struct ProgramSpec {
    pub name: String,
    pub prog_type: ProgramType,
    /// Map references hold indices into the session's map specs.
    pub insns: Vec<Insn>,
    pub attach: Attach,
    /// Loaded with `BPF_F_SLEEPABLE`: it reads the traced process's
    /// memory through calls that may fault pages in (uprobes only).
    pub sleepable: bool,
}

/// Where a program is attached.
#[derive(Clone, Debug)]
pub enum Attach {
    /// Uprobes (or uretprobes) at these sites.
    Uprobe {
        sites: Vec<AttachSite>,
        retprobe: bool,
    },
    /// A tracefs tracepoint, by id.
    Tracepoint { id: u64 },
    /// A raw tracepoint, by name (no tracefs needed).
    RawTracepoint { name: String },
    /// A perf event on every online CPU (`profile`, `software`,
    /// `hardware`). With a traced process, the program first checks that
    /// the sampled task belongs to it (and its tree, when followed).
    PerfEvent {
        event: sdt_bpf::PerfEvent,
        /// The probe as messages name it (`hardware:cycles`).
        probe: String,
    },
    /// Not attached: run by [`Session::trigger`] (BEGIN, END, interval).
    Triggered,
}

/// One uprobe site.
#[derive(Clone, Debug)]
pub struct AttachSite {
    /// The object as the user or the traced process names it, for messages.
    pub path: PathBuf,
    /// The path the kernel opens: `/proc/self/fd/N` of `attach_fd`.
    pub attach_path: PathBuf,
    /// Keeps `attach_path` naming the checked file until it is attached.
    pub attach_fd: std::sync::Arc<std::os::fd::OwnedFd>,
    pub offset: u64,
    /// The USDT semaphore's file offset, raised by the kernel.
    pub ref_ctr_offset: Option<u64>,
    /// What `bpf_get_attach_cookie` returns at this site.
    pub cookie: u64,
}

/// How to attach.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Attach uprobes for these processes only (none: every process).
    pub pids: Vec<i32>,
    /// With `pids`: also for every process they fork from then on, as
    /// `perf record` follows children (see the `follow` module for how,
    /// and what it costs other processes).
    pub follow: bool,
    /// The mechanism to use; the best the kernel offers if `None`.
    pub mechanism: Option<Mechanism>,
    /// With `pids`: tracepoints too run their programs only for those
    /// processes (and their trees, when followed), as bpftrace's `-p` does.
    pub filter_tracepoints: bool,
    /// Only processes in this cgroup v2 directory or below it: every
    /// program runs only for them (see the `cgroup` module).
    pub cgroup: Option<Cgroup>,
}

/// Which attach mechanism to use: the one asked for, if the kernel has it,
/// else the best it has. Needs the privileges that loading needs.
pub fn mechanism(wanted: Option<Mechanism>) -> Result<Mechanism, Error> {
    let features = Features::detect().map_err(Error::Bpf)?;
    match wanted {
        Some(m) if features.supports(m) => Ok(m),
        Some(m) => Err(Error::MechanismUnsupported(m.name())),
        None => features.best_mechanism().ok_or(Error::NoUprobes),
    }
}

/// Loaded programs, their maps and, once attached, their attachments.
pub struct Session {
    // Attachments go first so that they are detached before anything else
    // is closed.
    attachments: Vec<Attachment>,
    /// What keeps the followed process tree.
    follow: Option<Follow>,
    programs: Vec<(Program, Attach)>,
    ring: RingBuf,
    /// Maps by index; the ring buffer's slot is `None` (it is `ring`).
    maps: Vec<Option<Map>>,
    mechanism: Mechanism,
    options: Options,
}

impl Session {
    /// Creates the maps, then loads every program. Nothing is attached yet.
    pub fn load(
        maps: &[MapSpec],
        programs: Vec<ProgramSpec>,
        mechanism: Mechanism,
        options: Options,
    ) -> Result<Session, Error> {
        let mut ring = None;
        let mut created = Vec::with_capacity(maps.len());
        for spec in maps {
            if spec.map_type == MapType::RingBuf {
                if ring.is_some() {
                    return Err(Error::Bpf(sdt_bpf::Error::Invalid(
                        "more than one ring buffer".into(),
                    )));
                }
                ring = Some(RingBuf::new(spec.max_entries).map_err(Error::Bpf)?);
                created.push(None);
            } else {
                created.push(Some(Map::create(spec).map_err(Error::Bpf)?));
            }
        }
        let ring =
            ring.ok_or_else(|| Error::Bpf(sdt_bpf::Error::Invalid("no ring buffer map".into())))?;
        let follow = match options.follow {
            true if !options.pids.is_empty() => Some(Follow::load(&options.pids)?),
            _ => None,
        };
        let mut loaded = Vec::with_capacity(programs.len());
        for spec in programs {
            let program =
                load_program(&spec, &created, &ring, follow.as_ref(), &options, mechanism)?;
            loaded.push((program, spec.attach));
        }
        Ok(Session {
            attachments: Vec::new(),
            follow,
            programs: loaded,
            ring,
            maps: created,
            mechanism,
            options,
        })
    }

    /// Whether the uprobes follow the process's children.
    pub fn following(&self) -> bool {
        self.follow.is_some()
    }

    /// The attach mechanism in use.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Attaches every program that is not triggered by hand; returns the
    /// number of sites and tracepoints attached.
    pub fn attach(&mut self) -> Result<usize, Error> {
        let mut count = 0;
        // Followed: the tree is kept before any uprobe can fire.
        if let Some(follow) = &self.follow {
            self.attachments.extend(follow.attach()?);
        }
        let pids = self.uprobe_pids();
        // The kernel runs the programs of one uprobe newest first (those of
        // a tracepoint oldest first): uprobes attached last to first run
        // in the script's order, as in bpftrace.
        let is_uprobe = |a: &Attach| matches!(a, Attach::Uprobe { .. });
        let uprobes = self.programs.iter().rev().filter(|p| is_uprobe(&p.1));
        let others = self.programs.iter().filter(|p| !is_uprobe(&p.1));
        for (program, attach) in uprobes.chain(others) {
            match attach {
                Attach::Uprobe { sites, retprobe } => {
                    count += sites.len();
                    for &pid in &pids {
                        self.attachments.extend(attach_uprobes(
                            program,
                            sites,
                            *retprobe,
                            pid,
                            self.mechanism,
                        )?);
                    }
                }
                Attach::Tracepoint { id } => {
                    let attachment = sdt_bpf::attach_tracepoint(program, *id, self.mechanism)
                        .map_err(Error::Bpf)?;
                    self.attachments.push(attachment);
                    count += 1;
                }
                Attach::PerfEvent { event, probe } => {
                    let attachment = event.attach(program, self.mechanism).map_err(|source| {
                        Error::PerfEvent {
                            probe: probe.clone(),
                            source,
                        }
                    })?;
                    self.attachments.push(attachment);
                    count += 1;
                }
                Attach::RawTracepoint { name } => {
                    let attachment =
                        sdt_bpf::attach_raw_tracepoint(program, name).map_err(Error::Bpf)?;
                    self.attachments.push(attachment);
                }
                Attach::Triggered => {}
            }
        }
        Ok(count)
    }

    /// Loads and attaches more uprobe programs while the session runs
    /// (for objects mapped after the start); returns the number of sites.
    /// The programs' map references hold indices into the session's maps.
    pub fn add(&mut self, programs: Vec<ProgramSpec>) -> Result<usize, Error> {
        let pids = self.uprobe_pids();
        let mut count = 0;
        for spec in programs {
            let Attach::Uprobe { sites, retprobe } = &spec.attach else {
                return Err(Error::Bpf(sdt_bpf::Error::Invalid(format!(
                    "program {} is not a uprobe program",
                    spec.name
                ))));
            };
            let program = load_program(
                &spec,
                &self.maps,
                &self.ring,
                self.follow.as_ref(),
                &self.options,
                self.mechanism,
            )?;
            for &pid in &pids {
                let attachments = attach_uprobes(&program, sites, *retprobe, pid, self.mechanism)?;
                self.attachments.extend(attachments);
            }
            count += sites.len();
            self.programs.push((program, spec.attach));
        }
        Ok(count)
    }

    /// The processes uprobes are attached for, one attachment each:
    /// every process (`None`) when the tree is followed (the programs
    /// filter) or nothing is traced by PID, else each one traced.
    fn uprobe_pids(&self) -> Vec<Option<i32>> {
        match (&self.follow, self.options.pids.as_slice()) {
            (None, pids) if !pids.is_empty() => pids.iter().copied().map(Some).collect(),
            _ => vec![None],
        }
    }

    /// Runs program `index` once, in this task, now.
    pub fn trigger(&self, index: usize) -> Result<(), Error> {
        let (program, _) = self
            .programs
            .get(index)
            .ok_or_else(|| Error::Bpf(sdt_bpf::Error::Invalid(format!("no program {index}"))))?;
        program.test_run().map(|_| ()).map_err(Error::Bpf)
    }

    /// Runs program `index` (a `BPF_PROG_TYPE_SYSCALL` program) once in
    /// this thread on `context`: a hit of the fast path, replayed.
    pub fn replay(&self, index: usize, context: &mut [u8]) -> Result<u32, Error> {
        let (program, _) = self
            .programs
            .get(index)
            .ok_or_else(|| Error::Bpf(sdt_bpf::Error::Invalid(format!("no program {index}"))))?;
        program.run_with_context(context).map_err(Error::Bpf)
    }

    /// Detaches every probe; the kernel lowers the semaphores it raised.
    ///
    /// Closing a uprobe link waits for an RCU grace period (tens of
    /// milliseconds here), so the links are closed from one thread each:
    /// the waits overlap instead of adding up.
    pub fn detach(&mut self) {
        const THREADS: usize = 8;
        let mut attachments = std::mem::take(&mut self.attachments);
        if attachments.len() > 1 {
            let per_thread = attachments.len().div_ceil(THREADS);
            std::thread::scope(|scope| {
                while !attachments.is_empty() {
                    let batch: Vec<Attachment> = attachments
                        .drain(..per_thread.min(attachments.len()))
                        .collect();
                    scope.spawn(move || drop(batch));
                }
            });
        }
    }

    /// Takes what still holds probes attached: the descriptors to close,
    /// in order. Whoever takes them closes them; the rest of the session
    /// (maps, ring buffer, programs) closes at once on drop.
    pub fn take_attachments(&mut self) -> Vec<std::os::fd::OwnedFd> {
        std::mem::take(&mut self.attachments)
            .into_iter()
            .flat_map(Attachment::into_fds)
            .collect()
    }

    /// Processes of a followed tree that could not be followed, because
    /// the kernel's table of them was full.
    pub fn unfollowed(&self) -> u64 {
        self.follow.as_ref().map_or(0, Follow::failures)
    }

    /// Map `index`, or `None` for the ring buffer's slot.
    pub fn map(&self, index: usize) -> Option<&Map> {
        self.maps.get(index).and_then(Option::as_ref)
    }

    /// Also ends [`poll`](Self::poll) when `fd` is readable, reporting `token`.
    pub fn watch(&mut self, fd: BorrowedFd<'_>, token: u64) -> Result<(), Error> {
        self.ring.watch(fd, token).map_err(Error::Bpf)
    }

    /// Waits up to `timeout` for records, passes each to `f` in ring
    /// order, and returns the tokens of watched descriptors that are ready.
    pub fn poll(&mut self, timeout: Duration, f: impl FnMut(&[u8])) -> Result<Vec<u64>, Error> {
        Ok(self.ring.poll(Some(timeout), f).map_err(Error::Bpf)?.ready)
    }

    /// Passes every record available now to `f`, without waiting.
    pub fn consume(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.ring.consume(f)
    }

    /// The sum over CPUs of `u64` counter `key` of per-CPU array `map`.
    pub fn per_cpu_sum(&self, map: usize, key: u32) -> u64 {
        self.per_cpu_values(map, key).iter().sum()
    }

    /// Each CPU's `u64` counter `key` of per-CPU array `map` (none if it
    /// cannot be read).
    pub fn per_cpu_values(&self, map: usize, key: u32) -> Vec<u64> {
        let Some(map) = self.map(map) else {
            return Vec::new();
        };
        match map.lookup_per_cpu(&key.to_ne_bytes()) {
            Ok(Some(values)) => values
                .iter()
                .map(|v| {
                    v.get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map(u64::from_ne_bytes)
                        .unwrap_or(0)
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Relocates a program's map references to the session's maps, puts the
/// process filter in front where one applies, and loads it.
fn load_program(
    spec: &ProgramSpec,
    maps: &[Option<Map>],
    ring: &RingBuf,
    follow: Option<&Follow>,
    options: &Options,
    mechanism: Mechanism,
) -> Result<Program, Error> {
    let mut insns = spec.insns.clone();
    let refs: Vec<&Map> = maps
        .iter()
        .map(|m| m.as_ref().unwrap_or(ring.map()))
        .collect();
    sdt_bpf::relocate_maps(&mut insns, &refs).map_err(Error::Bpf)?;
    let expected_attach_type = match spec.attach {
        Attach::Uprobe { .. } => {
            if let Some(follow) = follow {
                insns.splice(0..0, follow.filter()?);
            }
            mechanism.expected_attach_type()
        }
        Attach::Tracepoint { .. } | Attach::PerfEvent { .. }
            if options.filter_tracepoints || matches!(spec.attach, Attach::PerfEvent { .. }) =>
        {
            match (follow, options.pids.as_slice()) {
                (Some(follow), _) => {
                    insns.splice(0..0, follow.filter()?);
                }
                (None, []) => {}
                (None, pids) => {
                    insns.splice(0..0, crate::follow::pid_filter(pids)?);
                }
            }
            None
        }
        _ => None,
    };
    // The cgroup's filter goes first: it is the cheaper test, and it
    // applies to every program that runs in a process's context.
    if let (
        Some(cgroup),
        Attach::Uprobe { .. } | Attach::Tracepoint { .. } | Attach::PerfEvent { .. },
    ) = (&options.cgroup, &spec.attach)
    {
        insns.splice(0..0, crate::cgroup::cgroup_filter(cgroup)?);
    }
    let opts = LoadOptions {
        name: spec.name.clone(),
        expected_attach_type,
        prog_type: spec.prog_type,
        sleepable: spec.sleepable,
    };
    Program::load(&insns, &opts).map_err(|source| Error::Load {
        program: spec.name.clone(),
        source,
    })
}

/// Attaches a uprobe program at `sites`, one attachment per file.
fn attach_uprobes(
    program: &Program,
    sites: &[AttachSite],
    retprobe: bool,
    pid: Option<i32>,
    mechanism: Mechanism,
) -> Result<Vec<Attachment>, Error> {
    let mut by_file: BTreeMap<(&PathBuf, &PathBuf), Vec<UprobeSite>> = BTreeMap::new();
    for site in sites {
        by_file
            .entry((&site.attach_path, &site.path))
            .or_default()
            .push(UprobeSite {
                offset: site.offset,
                ref_ctr_offset: site.ref_ctr_offset,
                cookie: site.cookie,
            });
    }
    let mut attachments = Vec::new();
    for ((attach_path, path), sites) in by_file {
        let request = UprobeAttach {
            path: attach_path.clone(),
            sites,
            pid,
            retprobe,
        };
        let attachment = request
            .attach(program, mechanism)
            .map_err(|source| Error::Attach {
                path: path.clone(),
                source,
            })?;
        attachments.push(attachment);
    }
    Ok(attachments)
}
