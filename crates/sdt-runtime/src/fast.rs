//! Serving the fast path during a run: programs whose probes the anchors
//! rang register on the socket; their hits are read out of the memory
//! they share and replayed, in time order, through the programs compiled
//! for that ([`sdt_script::FastPlan`]); and what the probes and the
//! kernel's programs sent is put back into one order by time.
//!
//! # Why replaying in time order is enough, and what is held back
//!
//! A replayed hit's output reaches the ring buffer when sdt replays it,
//! after the output of kernel hits that happened later. So every record
//! that says when its hit was (a stamped `printf`, an `sdt trace` event;
//! other records take the time of the one before them) is sorted by that
//! time, and a record is handed on only once no hit before it can still
//! arrive: the rings were read at `T`, so a hit stamped before `T` minus
//! [`IN_FLIGHT`] (a record being written while the rings were read) has
//! been replayed. The rest waits for the next read, or for the end.

use std::collections::HashSet;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use sdt_codegen::layout::{self, replay, OutputInfo};
use sdt_fastpath::{address_of, monotonic_ns, Clock, Entry, Listener, Record, Shared};
use sdt_script::Compilation;
use sdt_trace::Session;

/// How long a hit may take from its time stamp to its record being
/// published, at most, for the order of what sdt prints: a thread
/// preempted between the two, on a busy machine, for several time
/// slices. Output waits this long.
const IN_FLIGHT: u64 = 50_000_000;

/// Hits a replay program runs on at most in one run.
const BATCH_MAX: u64 = 1024;

/// The fast path of one run.
pub(crate) struct FastPath {
    listener: Listener,
    clock: Clock,
    /// Each fast probe's object, as `(device, inode)`.
    objects: Vec<(u64, u64)>,
    /// The processes this run traces (none: every process), and whether
    /// their children are traced too.
    pids: Vec<u32>,
    follow: bool,
    /// The programs registered.
    programs: Vec<Admitted>,
    /// Hits waiting to be replayed, kept for its memory.
    batch: Batch,
    /// Hits lost by programs that have ended.
    lost_before: u64,
    /// Whether a program has registered: from then on, output is sorted.
    pub served: bool,
    /// Hits replayed, and replays of them the kernel refused to run.
    pub replayed: u64,
    pub failed: u64,
    refused: HashSet<u32>,
}

impl FastPath {
    /// Serves `compilation`'s fast path with `listener`, for processes
    /// `pids` (and their children with `follow`).
    pub(crate) fn new(
        compilation: &Compilation,
        listener: Listener,
        pids: &[i32],
        follow: bool,
    ) -> io::Result<FastPath> {
        let objects = compilation
            .fast
            .probes
            .iter()
            .map(|p| rustix::fs::fstat(&*p.file).map(|s| (s.st_dev, s.st_ino)))
            .collect::<Result<_, _>>()?;
        Ok(FastPath {
            listener,
            clock: Clock::calibrate(Duration::from_millis(5)),
            objects,
            pids: pids.iter().map(|&p| p as u32).collect(),
            follow,
            programs: Vec::new(),
            batch: Batch::default(),
            lost_before: 0,
            served: false,
            replayed: 0,
            failed: 0,
            refused: HashSet::new(),
        })
    }

    /// The socket programs register on, to wait for.
    pub(crate) fn socket(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// Whether a program sends hits this way.
    pub(crate) fn serving(&self) -> bool {
        !self.programs.is_empty()
    }

    /// Answers the programs that asked: those this run traces get their
    /// probes' table, the others keep the kernel's path.
    pub(crate) fn accept(&mut self, compilation: &Compilation) {
        while let Ok(Some(pending)) = self.listener.accept() {
            if !self.traces(pending.pid) {
                self.refused.insert(pending.pid);
                pending.refuse();
                continue;
            }
            let entries = self.entries(compilation, pending.pid);
            let ids = status(pending.pid)
                .map(|s| (u64::from(s.gid) << 32) | u64::from(s.uid))
                .unwrap_or(u64::from(pending.uid));
            let threads = Threads::of(pending.pid);
            if let Ok(shared) = pending.admit(&entries, &self.clock) {
                self.programs.push(Admitted {
                    shared,
                    ids,
                    threads,
                });
                self.served = true;
            }
        }
    }

    fn traces(&self, pid: u32) -> bool {
        if self.pids.is_empty() || self.pids.contains(&pid) {
            return true;
        }
        if !self.follow {
            return false;
        }
        let mut at = pid;
        // A parent's chain is short; the bound keeps a racing reuse of
        // process ids from looping.
        for _ in 0..64 {
            match status(at) {
                Some(s) if s.ppid > 1 => {
                    if self.pids.contains(&s.ppid) {
                        return true;
                    }
                    at = s.ppid;
                }
                _ => return false,
            }
        }
        false
    }

    /// The table for process `pid`: each fast probe whose semaphore it maps.
    fn entries(&self, compilation: &Compilation, pid: u32) -> Vec<Entry> {
        (compilation.fast.probes.iter().zip(&self.objects))
            .enumerate()
            .filter_map(|(slot, (probe, &(dev, ino)))| {
                let semaphore = address_of(pid, dev, ino, probe.semaphore_offset).ok()??;
                Some(Entry {
                    semaphore,
                    slot: slot as u32,
                    capture: probe.capture != 0,
                })
            })
            .collect()
    }

    /// Reads every program's rings and replays what they hold, in time
    /// order; returns the time up to which every hit has been replayed.
    pub(crate) fn drain(&mut self, compilation: &Compilation, session: &Session) -> u64 {
        let read_at = monotonic_ns();
        self.clock.refine();
        let mut hits: Vec<(u32, u64, Record)> = Vec::new();
        let mut ended = Vec::new();
        for (i, program) in self.programs.iter_mut().enumerate() {
            let Admitted {
                shared,
                ids,
                threads,
            } = program;
            // Asked before the rings are read: a program that had ended
            // then wrote nothing after this read.
            if shared.ended() {
                ended.push(i);
            }
            let (pid, ids) = (shared.pid, *ids);
            shared.drain(|mut r| {
                if let Some(threads) = threads.as_mut() {
                    r.tid = threads.outside(r.tid);
                }
                hits.push((pid, ids, r));
            });
            shared.heartbeat();
        }
        for i in ended.into_iter().rev() {
            let program = self.programs.swap_remove(i);
            self.lost_before += program.shared.lost();
        }
        hits.sort_by_key(|(_, _, r)| r.tsc);
        let mut batch = std::mem::take(&mut self.batch);
        for (pid, ids, hit) in &hits {
            self.replay(compilation, session, &mut batch, (*pid, *ids), hit);
        }
        self.run(session, &mut batch);
        self.batch = batch;
        read_at.saturating_sub(IN_FLIGHT)
    }

    /// Hits the programs had no room for.
    pub(crate) fn lost(&self) -> u64 {
        self.lost_before + self.programs.iter().map(|p| p.shared.lost()).sum::<u64>()
    }

    /// Adds `hit` to `batch` for each program that replays its probe,
    /// running the batch first when it is another program's or full.
    fn replay(
        &mut self,
        compilation: &Compilation,
        session: &Session,
        batch: &mut Batch,
        (pid, ids): (u32, u64),
        hit: &Record,
    ) {
        let Some(probe) = compilation.fast.probes.get(hit.slot as usize) else {
            self.failed += 1;
            return;
        };
        self.replayed += 1;
        for &(program, cookie) in &probe.replays {
            if batch.program != Some(program) || batch.count >= BATCH_MAX {
                self.run(session, batch);
                batch.program = Some(program);
            }
            let at = batch.records.len();
            batch.records.resize(at + replay::SIZE as usize, 0);
            let context = &mut batch.records[at..];
            let mut put = |field: u32, value: u64| {
                context[field as usize..][..8].copy_from_slice(&value.to_ne_bytes());
            };
            put(replay::TIME, self.clock.ns(hit.tsc));
            put(
                replay::PID_TGID,
                (u64::from(pid) << 32) | u64::from(hit.tid),
            );
            put(replay::UID_GID, ids);
            put(replay::COOKIE, cookie);
            for (n, &value) in hit.args.iter().take(replay::ARGS_MAX as usize).enumerate() {
                put(replay::ARGS + 8 * n as u32, value);
            }
            context[replay::COMM as usize..][..16].copy_from_slice(&hit.comm);
            for (n, bytes) in &hit.strings {
                if *n < replay::ARGS_MAX as usize {
                    let field = at + (replay::CAPTURED + 8 * *n as u32) as usize;
                    batch.strings_at.push((field, batch.strings.len()));
                    // The bytes and a NUL: a string read stops there, and a
                    // buffer read takes no more than the copy's length.
                    batch.strings.extend_from_slice(bytes);
                    batch.strings.push(0);
                }
            }
            batch.count += 1;
        }
    }

    /// Runs `batch`'s program on its hits, and empties it.
    fn run(&mut self, session: &Session, batch: &mut Batch) {
        let Some(program) = batch.program.take() else {
            return;
        };
        // Zeros after the last copy: a read of a copy cut at
        // MAX_CAPTURE bytes, for a longer length, stays in this memory.
        let end = batch.strings.len();
        batch
            .strings
            .resize(end + sdt_fastpath::layout::MAX_CAPTURE, 0);
        // Where the copies are, now that they have all been made.
        let base = batch.strings.as_ptr() as u64;
        for &(field, offset) in &batch.strings_at {
            let address = base + offset as u64;
            batch.records[field..][..8].copy_from_slice(&address.to_ne_bytes());
        }
        let mut context = [0u8; replay::BATCH_SIZE as usize];
        let records = batch.records.as_ptr() as u64;
        context[replay::BATCH_RECORDS as usize..][..8].copy_from_slice(&records.to_ne_bytes());
        context[replay::BATCH_COUNT as usize..][..8].copy_from_slice(&batch.count.to_ne_bytes());
        if session.replay(program, &mut context).is_err() {
            self.failed += batch.count;
        }
        batch.records.clear();
        batch.strings.clear();
        batch.strings_at.clear();
        batch.count = 0;
    }
}

/// Hits waiting to be replayed by one program, in one run.
#[derive(Default)]
pub(crate) struct Batch {
    program: Option<usize>,
    /// Their contexts, one after another.
    records: Vec<u8>,
    count: u64,
    /// The bytes of the strings they copied, each with a NUL.
    strings: Vec<u8>,
    /// `(where in records the copy's address goes, where in strings it is)`.
    strings_at: Vec<(usize, usize)>,
}

/// A program that registered.
struct Admitted {
    shared: Shared,
    /// Its `gid << 32 | uid`.
    ids: u64,
    /// Its threads' ids as sdt sees them, when it runs in a PID namespace
    /// below sdt's: its hits carry the ids it sees itself.
    threads: Option<Threads>,
}

/// The thread ids of a process in a PID namespace below sdt's: as the
/// process sees them, to as sdt's namespace does (the `NSpid` lines of
/// `/proc/PID/task/*/status`, outermost first).
struct Threads {
    pid: u32,
    outside: std::collections::HashMap<u32, u32>,
}

impl Threads {
    /// `None` when process `pid` sees the same ids as sdt.
    fn of(pid: u32) -> Option<Threads> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let nested = ns_ids(&status).is_some_and(|ids| ids.len() > 1);
        nested.then(|| {
            let mut threads = Threads {
                pid,
                outside: Default::default(),
            };
            threads.read();
            threads
        })
    }

    fn read(&mut self) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return;
        };
        for task in tasks.flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            if let Some(ids) = ns_ids(&status) {
                if let (Some(&outer), Some(&inner)) = (ids.first(), ids.last()) {
                    self.outside.insert(inner, outer);
                }
            }
        }
    }

    /// Thread `tid`, as the process sees it, as sdt sees it; read again
    /// for a thread not seen before.
    fn outside(&mut self, tid: u32) -> u32 {
        if !self.outside.contains_key(&tid) {
            self.read();
        }
        // A thread gone before it was looked up keeps the id it had
        // inside (looked up once).
        *self.outside.entry(tid).or_insert(tid)
    }
}

/// The ids of an `NSpid:` line, outermost namespace first.
fn ns_ids(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|id| id.parse().ok())
            .collect(),
    )
}

/// What `/proc/PID/status` says of a process's parent and ids.
struct Status {
    ppid: u32,
    uid: u32,
    gid: u32,
}

fn status(pid: u32) -> Option<Status> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    Some(Status {
        ppid: field("PPid:")?,
        uid: field("Uid:")?,
        gid: field("Gid:")?,
    })
}

/// When a record's hit was, if the record says.
pub(crate) fn record_time(compilation: &Compilation, record: &[u8]) -> Option<u64> {
    let id = u64::from_ne_bytes(record.get(..8)?.try_into().ok()?);
    let at = match compilation.compiled.outputs.get(id as usize)? {
        OutputInfo::Printf { stamped: true, .. } => layout::stamp::TIME,
        OutputInfo::Event { .. } => layout::event::TIME,
        _ => return None,
    } as usize;
    Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
}

/// Records put back into the order of their hits' times.
#[derive(Default)]
pub(crate) struct Reorder {
    /// Records not yet handed on, with the time they sort by.
    held: Vec<(u64, Vec<u8>)>,
    /// The time of the last record, which records without one take.
    last: u64,
}

impl Reorder {
    /// Takes `records`, and gives back, in order, those whose hits were
    /// before `until`.
    pub(crate) fn take(
        &mut self,
        compilation: &Compilation,
        records: Vec<Vec<u8>>,
        until: u64,
    ) -> Vec<Vec<u8>> {
        for record in records {
            let time = record_time(compilation, &record).unwrap_or(self.last);
            self.last = time;
            self.held.push((time, record));
        }
        self.held.sort_by_key(|(time, _)| *time);
        let ready = self.held.partition_point(|(time, _)| *time <= until);
        self.held.drain(..ready).map(|(_, r)| r).collect()
    }
}
