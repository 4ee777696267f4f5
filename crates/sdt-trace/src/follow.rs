//! Following a process tree: the traced process and every process it
//! forks from then on, and nothing else.
//!
//! # Why this design
//!
//! The kernel offers no uprobe that follows children by itself:
//!
//! * A uprobe link filtered to one process skips its children: they
//!   inherit the breakpoints and the raised semaphores through `fork()`,
//!   trap on every hit, and the program never runs for them.
//! * A uprobe event defined through tracefs, with a perf event that the
//!   kernel copies into each child (`inherit`), does follow. But each
//!   child's exit then waits for an RCU grace period per event (about
//!   30 ms each here: 73 ms per `fork()` with two probes), a program runs
//!   for the first child only once that child has exited, and the event
//!   definitions are global state that a killed tracer leaves behind.
//! * An inherited perf event of the uprobe PMU makes `fork()` fail with
//!   EFAULT in the traced process.
//!
//! So the uprobes are attached for every process, and each program starts
//! with a filter ([`Follow::filter`]) that returns at once unless the
//! current process belongs to the tree. The tree is kept in the kernel,
//! by two raw tracepoint programs that need neither tracefs nor BTF:
//!
//! * `sched_process_fork` runs in the parent. If the parent is in the
//!   tree, it records the child's `task_struct` pointer (its second
//!   argument) in `tasks`. The child is recorded before it can run, so
//!   none of its hits is missed.
//! * The filter admits a process whose thread-group id is in `tgids`, or
//!   whose current task is in `tasks`; the latter also enters the task's
//!   thread-group id in `tgids`, so that a child needs no offsets into
//!   `task_struct` to be known by its PID.
//! * `sched_process_exit` forgets the task and, when the whole thread
//!   group is dead, its thread-group id, so that a recycled PID is not
//!   traced.
//!
//! The cost falls on other processes that map the same file: they trap
//! on the probed instructions (about half a microsecond per hit) and the
//! kernel raises USDT semaphores in them too. `--no-follow` attaches for
//! the one process and costs others nothing.
//!
//! Thread-group ids are those of the initial PID namespace, which is what
//! `bpf_get_current_pid_tgid` returns; [`Follow::attach`] refuses to run
//! from another namespace rather than follow the wrong processes.

use std::collections::{BTreeMap, BTreeSet};

use sdt_bpf::{
    AluOp, Attachment, Builder, Helper, Insn, JmpOp, Label, LoadOptions, Map, MapSpec, MapType,
    Program, ProgramType, Reg, Size, F_NO_PREALLOC,
};

use crate::Error;

/// Processes (and tasks) the tree can hold at once.
const CAPACITY: u32 = 65536;
/// Stack slots used by the generated code.
const TGID_SLOT: i16 = -8;
const TASK_SLOT: i16 = -16;
const ONE_SLOT: i16 = -24;

/// The maps and programs that keep the traced trees.
pub(crate) struct Follow {
    maps: TreeMaps,
    fork: Program,
    /// The processes the trees grow from.
    roots: Vec<i32>,
}

/// The tree, and the code that reads and changes it.
struct TreeMaps {
    /// The first root's thread-group id, known without a lookup: in most
    /// traces it is the process that hits the probes most.
    root: i32,
    /// Thread-group ids in the tree (`u32` → `u8`).
    tgids: Map,
    /// `task_struct` pointers of forked tasks not yet known by thread-group
    /// id (`u64` → `u8`).
    tasks: Map,
    /// Per-CPU count of processes that could not be entered in the tree.
    failures: Map,
}

impl Follow {
    /// Creates the maps and loads the fork program, for the trees rooted
    /// at the processes `roots` (at least one).
    pub fn load(roots: &[i32]) -> Result<Follow, Error> {
        let Some(&root) = roots.first() else {
            return Err(Error::Follow("no process to follow".into()));
        };
        let hash = |key_size, name| {
            Map::create(
                &MapSpec::new(MapType::Hash, key_size, 1, CAPACITY)
                    .flags(F_NO_PREALLOC)
                    .name(name),
            )
            .map_err(Error::Bpf)
        };
        let maps = TreeMaps {
            root,
            tgids: hash(4, "sdt_tgids")?,
            tasks: hash(8, "sdt_tasks")?,
            failures: Map::create(
                &MapSpec::new(MapType::PerCpuArray, 4, 8, 1).name("sdt_untraced"),
            )
            .map_err(Error::Bpf)?,
        };
        let fork = maps.load("sdt_fork", |m, b| m.fork_program(b))?;
        Ok(Follow {
            maps,
            fork,
            roots: roots.to_vec(),
        })
    }

    /// The instructions to put before a uprobe program: they return 0 at
    /// once unless the current process is in the tree, and otherwise fall
    /// through to the program with its context in `R1`. Map references
    /// hold descriptors, so they go in after the program's own references
    /// were relocated.
    pub fn filter(&self) -> Result<Vec<Insn>, Error> {
        let mut b = Builder::new();
        let traced = b.label();
        b.push(Insn::mov64_reg(Reg::R6, Reg::R1));
        self.maps.in_tree(&mut b, traced);
        b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
        b.bind(traced);
        b.push(Insn::mov64_reg(Reg::R1, Reg::R6));
        b.finish().map_err(codegen_error)
    }

    /// Starts keeping the trees: attaches the fork and exit programs,
    /// then enters the roots and the descendants they already have. Call
    /// it before the uprobes are attached.
    pub fn attach(&self) -> Result<Vec<Attachment>, Error> {
        if !in_initial_pid_namespace() {
            return Err(Error::Follow(
                "following children needs sdt to run in the initial PID namespace; \
                 use --no-follow to trace the one process"
                    .into(),
            ));
        }
        let fork =
            sdt_bpf::attach_raw_tracepoint(&self.fork, "sched_process_fork").map_err(Error::Bpf)?;
        let exit = self.maps.load("sdt_exit", |m, b| m.exit_program(b, true))?;
        let exit = match sdt_bpf::attach_raw_tracepoint(&exit, "sched_process_exit") {
            Ok(a) => a,
            // Older kernels pass no `group_dead`, and refuse a program
            // that reads it.
            Err(e) if e.errno() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                let exit = self
                    .maps
                    .load("sdt_exit", |m, b| m.exit_program(b, false))?;
                sdt_bpf::attach_raw_tracepoint(&exit, "sched_process_exit").map_err(Error::Bpf)?
            }
            Err(e) => return Err(Error::Bpf(e)),
        };
        // Entered after the fork program is attached, and the descendants
        // listed after that: a process forked meanwhile is either seen by
        // the program or found in /proc.
        let trees = self
            .roots
            .iter()
            .flat_map(|&root| std::iter::once(root).chain(descendants(root)));
        for tgid in trees {
            self.maps
                .tgids
                .update(&(tgid as u32).to_ne_bytes(), &[1], 0)
                .map_err(Error::Bpf)?;
        }
        Ok(vec![fork, exit])
    }

    /// Processes that could not be entered in the tree because it was full.
    pub fn failures(&self) -> u64 {
        match self.maps.failures.lookup_per_cpu(&0u32.to_ne_bytes()) {
            Ok(Some(values)) => values
                .iter()
                .filter_map(|v| v.get(..8)?.try_into().ok().map(u64::from_ne_bytes))
                .sum(),
            _ => 0,
        }
    }
}

impl TreeMaps {
    /// Loads a raw tracepoint program whose body `body` writes, with the
    /// context in `R6`.
    fn load(&self, name: &str, body: fn(&TreeMaps, &mut Builder)) -> Result<Program, Error> {
        let mut b = Builder::new();
        b.push(Insn::mov64_reg(Reg::R6, Reg::R1));
        body(self, &mut b);
        b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
        let insns = b.finish().map_err(codegen_error)?;
        let options = LoadOptions {
            name: name.to_owned(),
            expected_attach_type: None,
            prog_type: ProgramType::RawTracepoint,
            sleepable: false,
        };
        Program::load(&insns, &options).map_err(|source| Error::Load {
            program: name.to_owned(),
            source,
        })
    }

    /// Jumps to `traced` if the current process is in the tree, entering
    /// its thread-group id if only its task was known; falls through if
    /// it is not.
    fn in_tree(&self, b: &mut Builder, traced: Label) {
        let by_task = b.label();
        let not_traced = b.label();
        b.call(Helper::GetCurrentPidTgid);
        b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R0, 32));
        b.jump_imm(JmpOp::Eq, Reg::R0, self.root, traced);
        b.push(Insn::stx(Size::W, Reg::R10, TGID_SLOT, Reg::R0));
        lookup(b, &self.tgids, TGID_SLOT);
        b.jump_imm(JmpOp::Eq, Reg::R0, 0, by_task);
        b.jump(traced);
        b.bind(by_task);
        b.call(Helper::GetCurrentTask);
        b.push(Insn::stx(Size::DW, Reg::R10, TASK_SLOT, Reg::R0));
        lookup(b, &self.tasks, TASK_SLOT);
        b.jump_imm(JmpOp::Eq, Reg::R0, 0, not_traced);
        self.insert(b, &self.tgids, TGID_SLOT);
        b.jump(traced);
        b.bind(not_traced);
    }

    /// `sched_process_fork(parent, child)`, run in the parent: a child of
    /// the tree joins it.
    fn fork_program(&self, b: &mut Builder) {
        let traced = b.label();
        let done = b.label();
        self.in_tree(b, traced);
        b.jump(done);
        b.bind(traced);
        b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R6, 8));
        b.push(Insn::stx(Size::DW, Reg::R10, TASK_SLOT, Reg::R1));
        self.insert(b, &self.tasks, TASK_SLOT);
        b.bind(done);
    }

    /// `sched_process_exit(task[, group_dead])`: the task leaves the tree,
    /// and its process too once every thread is gone. Where the kernel
    /// passes no `group_dead`, the exit of the thread-group leader stands
    /// for it.
    fn exit_program(&self, b: &mut Builder, has_group_dead: bool) {
        let keep = b.label();
        b.call(Helper::GetCurrentTask);
        b.push(Insn::stx(Size::DW, Reg::R10, TASK_SLOT, Reg::R0));
        delete(b, &self.tasks, TASK_SLOT);
        b.call(Helper::GetCurrentPidTgid);
        b.push(Insn::mov64_reg(Reg::R7, Reg::R0));
        b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R7, 32));
        if has_group_dead {
            b.push(Insn::ldx(Size::DW, Reg::R1, Reg::R6, 8));
            b.push(Insn::alu64_imm(AluOp::And, Reg::R1, 0xff));
            b.jump_imm(JmpOp::Eq, Reg::R1, 0, keep);
        } else {
            b.push(Insn::alu32_reg(AluOp::Mov, Reg::R0, Reg::R0));
            b.jump_reg(JmpOp::Ne, Reg::R0, Reg::R7, keep);
        }
        b.push(Insn::stx(Size::W, Reg::R10, TGID_SLOT, Reg::R7));
        delete(b, &self.tgids, TGID_SLOT);
        b.bind(keep);
    }

    /// `map[key] = 1`, counting a refusal (a full map) as a failure.
    fn insert(&self, b: &mut Builder, map: &Map, key: i16) {
        let done = b.label();
        b.push(Insn::st(Size::B, Reg::R10, ONE_SLOT, 1));
        b.ld_map(Reg::R1, map);
        b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
        b.push(Insn::alu64_imm(AluOp::Add, Reg::R2, key.into()));
        b.push(Insn::mov64_reg(Reg::R3, Reg::R10));
        b.push(Insn::alu64_imm(AluOp::Add, Reg::R3, ONE_SLOT.into()));
        b.push(Insn::mov64_imm(Reg::R4, 0));
        b.call(Helper::MapUpdateElem);
        b.jump_imm(JmpOp::Eq, Reg::R0, 0, done);
        b.push(Insn::st(Size::W, Reg::R10, ONE_SLOT, 0));
        lookup(b, &self.failures, ONE_SLOT);
        b.jump_imm(JmpOp::Eq, Reg::R0, 0, done);
        b.push(Insn::mov64_imm(Reg::R1, 1));
        b.push(Insn::atomic_add(Size::DW, Reg::R0, 0, Reg::R1));
        b.bind(done);
    }
}

/// `R0 = map_lookup_elem(map, R10 + key)`.
fn lookup(b: &mut Builder, map: &Map, key: i16) {
    b.ld_map(Reg::R1, map);
    b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
    b.push(Insn::alu64_imm(AluOp::Add, Reg::R2, key.into()));
    b.call(Helper::MapLookupElem);
}

/// `map_delete_elem(map, R10 + key)`.
fn delete(b: &mut Builder, map: &Map, key: i16) {
    b.ld_map(Reg::R1, map);
    b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
    b.push(Insn::alu64_imm(AluOp::Add, Reg::R2, key.into()));
    b.call(Helper::MapDeleteElem);
}

/// The instructions to put before a program that should run for some
/// processes only (a tracepoint under `-p --no-follow`): they return 0 at
/// once unless the current process is one of `pids`, and otherwise fall
/// through with the context in `R1`.
pub(crate) fn pid_filter(pids: &[i32]) -> Result<Vec<Insn>, Error> {
    let mut b = Builder::new();
    let traced = b.label();
    b.push(Insn::mov64_reg(Reg::R6, Reg::R1));
    b.call(Helper::GetCurrentPidTgid);
    b.push(Insn::alu64_imm(AluOp::Rsh, Reg::R0, 32));
    for &pid in pids {
        b.jump_imm(JmpOp::Eq, Reg::R0, pid, traced);
    }
    b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
    b.bind(traced);
    b.push(Insn::mov64_reg(Reg::R1, Reg::R6));
    b.finish().map_err(codegen_error)
}

fn codegen_error(e: sdt_bpf::CodegenError) -> Error {
    Error::Bpf(sdt_bpf::Error::Invalid(e.to_string()))
}

/// Whether this process sees PIDs as the kernel's tracing helpers do: its
/// `NSpid` line has a single entry.
fn in_initial_pid_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .map(|ids| ids.split_whitespace().count() == 1)
        })
        .unwrap_or(true)
}

/// The processes descended from `root` now, from every `/proc/PID/stat`.
fn descendants(root: i32) -> Vec<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(ppid) = parent_of(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = BTreeSet::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if found.insert(child) {
                queue.push(child);
            }
        }
    }
    found.into_iter().collect()
}

/// The parent PID in `/proc/PID/stat`: the fourth field, after the
/// parenthesised command name (which may itself hold spaces and `)`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_process_among_its_parents_descendants() {
        let parent = parent_of(std::process::id() as i32).unwrap();
        assert!(descendants(parent).contains(&(std::process::id() as i32)));
    }

    #[test]
    fn init_has_no_parent_in_this_namespace() {
        assert_eq!(parent_of(1), Some(0));
    }
}
