//! Running a compiled script: BEGIN before the first probe, records as
//! they come, intervals on time, END after the last probe, then the maps.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use sdt_bpf::{Map, Mechanism};
use sdt_trace::{Options as SessionOptions, Session};

use crate::later::LaterObjects;
pub use crate::later::{Unattached, Waited};
use crate::{Action, Entry, Maps, Runtime};
use sdt_codegen::layout;
use sdt_lang::hir::MapId;
use sdt_script::{Compilation, Role};

/// The longest a record waits in the ring before the reader sees it: the
/// programs wake the reader only when the ring fills up or a record asks
/// for action, so the reader looks on its own this often.
pub const DELIVERY_INTERVAL: Duration = Duration::from_millis(20);

/// How often the rings of the fast path are read: a thread's ring holds
/// about 16,000 hits, which a thread firing a million a second fills in
/// 16 ms.
const FAST_INTERVAL: Duration = Duration::from_millis(2);

/// The token of the descriptors that say the traced tree has mapped
/// something; callers' tokens are small.
const MAPPED: u64 = u64::MAX;

/// The token of the socket programs register on for the fast path.
const FAST: u64 = u64::MAX - 1;

/// The least time between two wake-ups by mappings.
const MAPPED_SPACING: Duration = Duration::from_millis(1);

/// A script loaded into the kernel, and the runtime that prints its output.
pub struct Runner<'c> {
    compilation: &'c Compilation,
    session: Session,
    runtime: Runtime<'c>,
    /// Interval programs: `(program, period, next run)`.
    intervals: Vec<(usize, Duration, Instant)>,
    /// `exit()` was called.
    exit: Option<Option<i64>>,
    /// Objects the traced tree maps from now on, for attach points that
    /// mean them.
    later: Option<LaterObjects>,
    /// When a mapping last woke [`step`](Self::step).
    last_mapped_wakeup: Option<Instant>,
    /// The fast path, when the run serves one.
    fast: Option<crate::fast::FastPath>,
    /// Records put back in the order of their hits, while it does.
    reorder: crate::fast::Reorder,
    /// Every hit before this time has been replayed.
    replayed_until: u64,
}

/// What went wrong, if anything, and what was lost, at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records the ring buffer had no room for.
    pub lost_events: u64,
    /// Stacks that could not be recorded.
    pub lost_stacks: u64,
    /// `(map name, updates refused because the map was full)`.
    pub full_maps: Vec<(String, u64)>,
    /// Hits dropped because the kernel had no memory for a thread's
    /// scratch space.
    pub lost_hits: u64,
    /// Reads of the traced process's memory that failed, by place.
    pub failed_reads: Vec<sdt_output::FailedRead>,
    /// The code `exit(N)` gave, if any.
    pub exit_code: Option<i64>,
    /// Whether the program called `exit()`.
    pub exited: bool,
    /// The hits of each counted probe ([`sdt_script::Options::counted`]).
    pub counted: Vec<ProbeHits>,
    /// Attach points that waited for objects mapped later, in vain.
    pub unattached: Unattached,
    /// Hits of the fast path that found no room in their thread's ring.
    pub fast_lost: u64,
    /// Hits of the fast path replayed, and those the kernel refused to run.
    pub fast_replayed: u64,
    pub fast_failed: u64,
}

/// How often a counted probe fired, counted by its programs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeHits {
    pub provider: String,
    pub name: String,
    /// Its sites attached, at the start and later: 0 when nothing had it.
    pub sites: usize,
    /// Its hits while the run lasted.
    pub hits: u64,
}

/// How a run ended.
pub struct Finished<'c> {
    pub summary: Summary,
    pub runtime: Runtime<'c>,
    /// What still holds the (stopped) probes attached: descriptors to
    /// close, in order (see `sdt_proc::release_elsewhere`).
    pub attached: Vec<std::os::fd::OwnedFd>,
}

/// What one [`Runner::step`] saw.
#[derive(Clone, Debug, Default)]
pub struct Step {
    /// Tokens of watched descriptors that are ready.
    pub ready: Vec<u64>,
    /// `exit()` was called.
    pub exit: bool,
    /// What attaching to newly mapped objects did, one line each, for
    /// the user.
    pub notices: Vec<String>,
}

/// How a compilation runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The kernel mechanism programs attach with.
    pub mechanism: Mechanism,
    /// The traced processes (none: every process).
    pub pids: Vec<i32>,
    /// Only processes of this cgroup v2 directory (and below).
    pub cgroup: Option<sdt_trace::Cgroup>,
    /// Whether the processes it starts are traced too.
    pub follow: bool,
    /// Whether `system()` may run commands (`--unsafe`).
    pub allow_unsafe: bool,
    /// Whether tracepoints see only the traced process (`-p`), as uprobes do.
    pub filter_tracepoints: bool,
    /// Bytes `cat()` prints of a file.
    pub max_cat_bytes: u64,
}

impl<'c> Runner<'c> {
    /// Creates the maps and loads every program, whose output goes to
    /// `sink`; attaches nothing.
    pub fn load(
        compilation: &'c Compilation,
        options: &RunOptions,
        sink: Box<dyn sdt_output::Sink + 'c>,
    ) -> Result<Runner<'c>, sdt_trace::Error> {
        let RunOptions {
            mechanism,
            ref pids,
            ref cgroup,
            follow,
            allow_unsafe,
            filter_tracepoints,
            max_cat_bytes,
        } = *options;
        let maps: Vec<_> = compilation
            .compiled
            .maps
            .iter()
            .map(|m| m.spec.clone())
            .collect();
        let session = Session::load(
            &maps,
            compilation.program_specs(),
            mechanism,
            SessionOptions {
                pids: pids.clone(),
                cgroup: cgroup.clone(),
                follow,
                mechanism: Some(mechanism),
                filter_tracepoints,
            },
        )?;
        let mut runtime = Runtime::new(compilation, allow_unsafe, sink);
        runtime.limit_cat(max_cat_bytes);
        let now = Instant::now();
        let intervals = compilation
            .roles
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Role::Interval { period_ns } => {
                    let period = Duration::from_nanos(*period_ns);
                    Some((i, period, now + period))
                }
                _ => None,
            })
            .collect();
        Ok(Runner {
            compilation,
            session,
            runtime,
            intervals,
            exit: None,
            later: None,
            last_mapped_wakeup: None,
            fast: None,
            reorder: crate::fast::Reorder::default(),
            replayed_until: 0,
        })
    }

    /// Serves the compilation's fast path ([`sdt_script::FastPlan`]) with
    /// `listener`: programs of the traced processes that register on it
    /// send their hits through shared memory, which this run replays.
    /// Called before [`attach`](Self::attach), whose anchors ring them.
    pub fn serve_fast(
        &mut self,
        listener: sdt_fastpath::Listener,
        pids: &[i32],
        follow: bool,
    ) -> Result<(), sdt_trace::Error> {
        let fast = crate::fast::FastPath::new(self.compilation, listener, pids, follow)
            .map_err(sdt_trace::Error::FastPath)?;
        self.session.watch(fast.socket(), FAST)?;
        self.fast = Some(fast);
        Ok(())
    }

    pub(crate) fn compilation(&self) -> &'c Compilation {
        self.compilation
    }

    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// A handle that reads the maps from another thread while this runs;
    /// see [`MapReader`](crate::scrape::MapReader).
    pub fn map_reader(&self) -> io::Result<crate::scrape::MapReader> {
        crate::scrape::MapReader::new(self)
    }

    /// Whether the script has nothing but BEGIN and END, which a run
    /// without a `-c` command ends right after BEGIN, as bpftrace 0.24
    /// and later do: nothing else could ever fire.
    pub fn only_begin_and_end(&self) -> bool {
        !self.compilation.attaches_later()
            && self
                .compilation
                .roles
                .iter()
                .all(|r| matches!(r, Role::Begin | Role::End))
    }

    pub fn runtime(&mut self) -> &mut Runtime<'c> {
        &mut self.runtime
    }

    pub fn mechanism(&self) -> Mechanism {
        self.session.mechanism()
    }

    /// Runs every program of `role`, in script order, and handles what
    /// they sent.
    fn run_role(&mut self, role: Role) -> Result<(), sdt_trace::Error> {
        let programs: Vec<usize> = self
            .compilation
            .roles
            .iter()
            .enumerate()
            .filter(|(_, r)| **r == role)
            .map(|(i, _)| i)
            .collect();
        for program in programs {
            self.session.trigger(program)?;
            self.drain();
        }
        Ok(())
    }

    /// Runs BEGIN. Returns whether it called `exit()`.
    pub fn begin(&mut self) -> Result<bool, sdt_trace::Error> {
        self.run_role(Role::Begin)?;
        Ok(self.exit.is_some())
    }

    /// Attaches every probe; returns how many sites and tracepoints.
    pub fn attach(&mut self) -> Result<usize, sdt_trace::Error> {
        self.session.attach()
    }

    /// Also ends [`step`](Self::step) when `fd` is readable.
    pub fn watch(&mut self, fd: BorrowedFd<'_>, token: u64) -> Result<(), sdt_trace::Error> {
        self.session.watch(fd, token)
    }

    /// Remembers the mappings of the traced process (and of its children,
    /// where they are followed) for symbols; see [`Runtime::track`].
    pub fn track(&mut self, pid: u32) -> bool {
        let follow = self.session.following();
        self.runtime.track(pid, follow)
    }

    /// System-wide, where the programs record user addresses (`usym`,
    /// `ustack`): remembers the mappings of every process from now on
    /// (see [`Runtime::track_everything`]). `false` if the kernel would
    /// not record them.
    pub fn track_everything(&mut self) -> bool {
        !self.compilation.compiled.user_addresses || self.runtime.track_everything()
    }

    /// Attaches the attach points that mean objects mapped later (a
    /// library loaded with `dlopen`, a provider defined at run time) to
    /// those that processes `pids` (and, where followed, their children)
    /// map from now on, at each [`step`](Self::step). With `scan`, the
    /// objects they map now are looked at too (`-p`: those mapped since
    /// planning; not a `-c` command that has not called exec yet).
    /// Returns `false` if the kernel would not record the mappings; does
    /// nothing, and returns `true`, when no attach point needs it.
    pub fn attach_later_objects(&mut self, pids: &[u32], scan: bool) -> bool {
        if !self.compilation.attaches_later() {
            return true;
        }
        let follow = self.session.following();
        let Ok(later) = LaterObjects::open(self.compilation, pids, follow, scan) else {
            return false;
        };
        // Without the wake-up, a mapping is seen at the next delivery
        // interval, 20 ms later at most.
        for fd in later.fds() {
            if self.session.watch(fd, MAPPED).is_err() {
                break;
            }
        }
        self.later = Some(later);
        true
    }

    /// Waits for records (at most until the next interval is due), handles
    /// them, runs due intervals.
    pub fn step(&mut self) -> Result<Step, sdt_trace::Error> {
        let now = Instant::now();
        let next = self.intervals.iter().map(|i| i.2).min();
        // Programs of the fast path fill their rings without waking sdt:
        // it looks more often while one sends hits.
        let interval = match &self.fast {
            Some(fast) if fast.serving() => FAST_INTERVAL,
            _ => DELIVERY_INTERVAL,
        };
        let timeout = next
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or(interval)
            .min(interval);
        let mut records = Vec::new();
        let mut ready = self.session.poll(timeout, |r| records.push(r.to_vec()))?;
        if ready.contains(&MAPPED) {
            ready.retain(|&token| token != MAPPED);
            self.space_mapping_wakeups();
        }
        ready.retain(|&token| token != FAST);
        self.replay_fast(&mut records);
        self.deliver(records);
        let now = Instant::now();
        let due: Vec<usize> = self
            .intervals
            .iter()
            .filter(|i| i.2 <= now)
            .map(|i| i.0)
            .collect();
        for entry in &mut self.intervals {
            if entry.2 <= now {
                entry.2 += entry.1;
                if entry.2 < now {
                    entry.2 = now + entry.1;
                }
            }
        }
        for program in due {
            if self.exit.is_some() {
                break;
            }
            self.session.trigger(program)?;
            self.drain();
        }
        self.runtime.keep_up_with_mappings();
        let notices = match &mut self.later {
            Some(later) if self.exit.is_none() => {
                later.poll(self.compilation, &mut self.session, &mut self.runtime)
            }
            _ => Vec::new(),
        };
        self.runtime.flush();
        Ok(Step {
            ready,
            exit: self.exit.is_some(),
            notices,
        })
    }

    /// Keeps wake-ups by mappings at least [`MAPPED_SPACING`] apart, so
    /// that a program that maps executable memory in a loop does not keep
    /// sdt switching in and out for each mapping; what arrives meanwhile
    /// is handled together. (20,000 mappings in a row: 487 ms without
    /// the spacing, 387 ms with it, 185 ms untraced; see docs/targets.md.)
    fn space_mapping_wakeups(&mut self) {
        let now = Instant::now();
        if let Some(last) = self.last_mapped_wakeup {
            let due = last + MAPPED_SPACING;
            if now < due {
                std::thread::sleep(due - now);
            }
        }
        self.last_mapped_wakeup = Some(Instant::now());
    }

    fn drain(&mut self) {
        let mut records = Vec::new();
        self.session.consume(|r| records.push(r.to_vec()));
        self.deliver(records);
    }

    /// Answers programs that registered for the fast path, replays the
    /// hits they sent, and adds what that output to `records`.
    fn replay_fast(&mut self, records: &mut Vec<Vec<u8>>) {
        let Some(fast) = &mut self.fast else {
            return;
        };
        fast.accept(self.compilation);
        self.replayed_until = fast.drain(self.compilation, &self.session);
        self.session.consume(|r| records.push(r.to_vec()));
    }

    /// Handles records: in the order of their hits once the fast path has
    /// served a program (see the `fast` module), else as they came.
    fn deliver(&mut self, records: Vec<Vec<u8>>) {
        // Once a program has sent hits this way, for the rest of the run:
        // its last hits may come with the kernel's in one batch after it
        // has gone.
        let served = self.fast.as_ref().is_some_and(|f| f.served);
        let records = if served {
            self.reorder
                .take(self.compilation, records, self.replayed_until)
        } else {
            records
        };
        for record in records {
            self.record(&record);
        }
    }

    fn record(&mut self, record: &[u8]) {
        if self.exit.is_some() {
            // After exit(), bpftrace prints nothing more but END's output.
            return;
        }
        let maps = SessionMaps {
            session: &self.session,
            compilation: self.compilation,
        };
        if let Action::Exit(code) = self.runtime.handle(record, &maps) {
            self.exit = Some(code);
        }
    }

    /// Stops the probes, handles what they had sent, runs END, and, unless
    /// `print_maps` is false, prints every map.
    ///
    /// The probes stop at once: each attached program first reads a flag
    /// that this sets. Detaching them makes the kernel wait for a grace
    /// period (tens of milliseconds per link, more for tracepoints), which
    /// nobody needs to sit through once the output is printed, so that is
    /// left to whoever takes [`Finished::attached`].
    pub fn finish(mut self, print_maps: bool) -> Result<Finished<'c>, sdt_trace::Error> {
        // Hits of the fast path so far are replayed before the programs
        // are told to stop, since replays obey that too.
        let mut records = Vec::new();
        self.replay_fast(&mut records);
        self.replayed_until = u64::MAX;
        self.deliver(records);
        let stopped = self
            .session
            .map(layout::CONTROL_MAP as usize)
            .is_some_and(|control| {
                let (key, value) = (0u32.to_ne_bytes(), layout::STOPPED.to_ne_bytes());
                control.update(&key, &value, 0).is_ok()
            });
        if !stopped {
            // Probes that could not be told to stop are detached now.
            self.session.detach();
        }
        self.drain();
        let exited = self.exit.is_some();
        let exit_code = self.exit.flatten();
        // END's records are handled even after exit().
        self.exit = None;
        self.run_role(Role::End)?;
        if print_maps {
            let maps = SessionMaps {
                session: &self.session,
                compilation: self.compilation,
            };
            self.runtime.print_all_maps(&maps);
        }
        self.runtime.flush();
        let lost = |index| self.session.per_cpu_sum(layout::LOST_MAP as usize, index);
        let full_maps = self
            .compilation
            .program
            .maps
            .iter()
            .enumerate()
            .map(|(i, m)| (m.display_name(), lost(layout::LOST_MAP_UPDATES + i as u32)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let counted = self
            .compilation
            .counted
            .iter()
            .enumerate()
            .map(|(i, (provider, name))| ProbeHits {
                provider: provider.clone(),
                name: name.clone(),
                sites: self.runtime.sites_of(provider, name),
                hits: self
                    .session
                    .per_cpu_sum(layout::HITS_MAP as usize, i as u32),
            })
            .collect();
        let unattached = self
            .later
            .as_ref()
            .map(|later| later.unattached(self.compilation))
            .unwrap_or_default();
        let failed_reads = crate::reads::ReadSites::new(self.compilation).failed(|index| {
            self.session
                .per_cpu_values(layout::LOST_MAP as usize, index)
        });
        let fast = self.fast.take();
        let summary = Summary {
            fast_lost: fast.as_ref().map_or(0, |f| f.lost()),
            fast_replayed: fast.as_ref().map_or(0, |f| f.replayed),
            fast_failed: fast.as_ref().map_or(0, |f| f.failed),
            lost_events: lost(layout::LOST_EVENTS),
            lost_stacks: lost(layout::LOST_STACKS),
            full_maps,
            lost_hits: lost(layout::LOST_HITS),
            failed_reads,
            exit_code,
            exited,
            counted,
            unattached,
        };
        let attached = self.session.take_attachments();
        Ok(Finished {
            summary,
            runtime: self.runtime,
            attached,
        })
    }
}

/// The maps of a session, as the runtime reads them.
struct SessionMaps<'s> {
    session: &'s Session,
    compilation: &'s Compilation,
}

impl SessionMaps<'_> {
    fn map(&self, id: MapId) -> io::Result<&Map> {
        self.session
            .map(layout::user_map(id) as usize)
            .ok_or_else(|| io::Error::other(format!("no map {id}")))
    }
}

fn bpf_io(e: sdt_bpf::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl Maps for SessionMaps<'_> {
    fn entries(&self, id: MapId) -> io::Result<Vec<Entry>> {
        read_entries(
            self.map(id)?,
            self.compilation.program.maps[id].is_per_cpu(),
        )
    }

    fn stack(&self, id: u32) -> Vec<crate::RawFrame> {
        match self.session.map(layout::STACK_MAP as usize) {
            Some(map) => read_stack(map, id),
            None => Vec::new(),
        }
    }
}

/// Every entry of `map`, with one value per CPU when `per_cpu`.
pub(crate) fn read_entries(map: &Map, per_cpu: bool) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for key in map.keys() {
        let key = key.map_err(bpf_io)?;
        let values = if per_cpu {
            match map.lookup_per_cpu(&key).map_err(bpf_io)? {
                Some(values) => values.iter().map(<[u8]>::to_vec).collect(),
                None => continue,
            }
        } else {
            match map.lookup(&key).map_err(bpf_io)? {
                Some(value) => vec![value],
                None => continue,
            }
        };
        entries.push((key, values));
    }
    Ok(entries)
}

/// The frames of stack `id` in the stack map: addresses, or, in a map of
/// build IDs, `struct bpf_stack_build_id`s (see
/// [`sdt_bpf::STACK_BUILD_ID_FRAME`]).
pub(crate) fn read_stack(map: &Map, id: u32) -> Vec<crate::RawFrame> {
    use crate::RawFrame;
    let Ok(Some(bytes)) = map.lookup(&id.to_ne_bytes()) else {
        return Vec::new();
    };
    let word =
        |c: &[u8], at: usize| u64::from_ne_bytes(c[at..at + 8].try_into().unwrap_or_default());
    if map.spec().flags & sdt_bpf::F_STACK_BUILD_ID == 0 {
        return bytes
            .chunks_exact(8)
            .map(|c| word(c, 0))
            .take_while(|&ip| ip != 0)
            .map(RawFrame::Address)
            .collect();
    }
    const VALID: i32 = 1;
    const IP: i32 = 2;
    bytes
        .chunks_exact(sdt_bpf::STACK_BUILD_ID_FRAME as usize)
        .map_while(|c| {
            let status = i32::from_ne_bytes(c[..4].try_into().unwrap_or_default());
            match status {
                VALID => Some(RawFrame::InObject {
                    build_id: c[4..24].try_into().unwrap_or_default(),
                    offset: word(c, 24),
                }),
                IP => Some(RawFrame::Address(word(c, 24))),
                _ => None,
            }
        })
        .collect()
}
