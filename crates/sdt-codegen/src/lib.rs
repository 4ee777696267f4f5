//! Lowering: the checked program to eBPF instructions, one program per
//! probe instance and argument shape.
//!
//! What comes in: the checked program ([`sdt_lang::hir::Program`]) and one
//! [`Unit`] per program to generate (a probe instance and how its program
//! reads arguments and knows its probe). What goes out: instructions that
//! name maps by index, the maps to create, and the [`layout`] of every
//! record the programs send, which is the contract with the runtime. It
//! reads no file and loads nothing: it must never depend on the binder,
//! the runtime or the kernel beyond `sdt-bpf`'s instruction builder.
//!
//! Written by hand, because no crate generates BPF from a language that
//! is not C, and because every instruction here is read by the kernel's
//! verifier, whose rules shape the code:
//!
//! * **Registers.** `R6` holds the context, `R9` the scratch memory when a
//!   program needs it, `R7` and `R8` hold what must survive a helper call
//!   for a few instructions. Every value an expression computes goes to
//!   an 8-byte stack slot, so that nothing is lost in the registers that
//!   helper calls clobber; the verifier tracks spilled values exactly.
//! * **Memory.** Strings, tuples, struct copies, map keys that hold them,
//!   and records for user space live in a per-CPU scratch map, not on the
//!   512-byte stack; a program looks the scratch map up once, at entry.
//!   Scalars and small keys stay on the stack.
//! * **Maps are referenced by index.** Map references hold the map's
//!   index in [`Compiled::maps`] until [`sdt_bpf::relocate_maps`] puts file
//!   descriptors in, so that programs can be generated, dumped and
//!   checked without privileges.
//! * **Arguments are compiled per site.** A USDT probe's sites may keep
//!   an argument in different places; sites with the same places share a
//!   program (see `sdt_bpf::arg`), and the attach cookie says which probe
//!   fired.

#![forbid(unsafe_code)]

mod dce;
mod expr;
pub mod layout;
mod loops;
mod mem;
mod percpu;
mod place;
mod replay;
mod stmt;
mod user;
mod walk;

use std::collections::HashMap;

use sdt_bpf::arg::ArgSource;
use sdt_bpf::{Builder, FaultingReads, Insn, MapSpec, MapType, ProgramType, Reg, F_NO_PREALLOC};

use crate::layout::OutputInfo;
use sdt_lang::diag::{Diagnostic, Span};
use sdt_lang::hir::{ProbeInstance, ProbeKind, Program};
use sdt_lang::types::Ty;

use self::mem::{Frame, Mem};
pub use self::replay::{blocker as replay_blocker, ArgWidth};

/// How a program reads `argN`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ArgAccess {
    /// No arguments (BEGIN, END, interval, tracepoints).
    None,
    /// A USDT site's arguments, as its note says; `None` for one that
    /// cannot be read, which only `sdt trace`'s events take (as 0, shown
    /// as unreadable), since sites where the program reads it are not
    /// traced.
    Usdt(Vec<Option<ArgSource>>),
    /// The x86-64 calling convention's argument registers.
    Registers,
    /// A hit of the fast path, replayed from its record: the arguments
    /// are values in the context ([`layout::replay`]), each of this width.
    Replay(Vec<ArgWidth>),
}

/// How a program knows which probe fired, for `probe`, `func` and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ids {
    /// Fixed: the program serves one probe.
    Const { probe: u32, site: u32 },
    /// From the attach cookie: probe id in the high 32 bits, site (or
    /// function) id in the low 32 bits.
    Cookie,
    /// From a replayed hit's context, laid out as the cookie.
    Replayed,
}

/// One program to generate: a probe instance, compiled for one way of
/// reading its arguments.
#[derive(Clone, Debug)]
pub struct Unit {
    /// Index into [`Program::probes`].
    pub instance: usize,
    pub prog_type: ProgramType,
    pub args: ArgAccess,
    pub ids: Ids,
    /// The name the kernel shows (`bpftool prog`).
    pub name: String,
    /// The probe's name for messages: `usdt:/bin/x:p:n`.
    pub display: String,
    /// The link-time address of the one site this program serves, when
    /// the program needs it (`uaddr()`).
    pub site_address: Option<u64>,
    /// The counter of the hits map ([`layout::HITS_MAP`]) that each hit
    /// of this program adds one to, if its probe is counted.
    pub counted: Option<u32>,
}

/// Settings that hold for every program of a script.
#[derive(Clone, Debug)]
pub struct Options {
    /// Records wake the reader once this many bytes wait in the ring.
    pub wake_at: u32,
    /// `CLOCK_MONOTONIC` at start, for `elapsed`.
    pub start_ns: u64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` at start, wrapping: what makes
    /// the kernel's monotonic time a wall-clock time, so that `tseries()`
    /// intervals begin where the wall clock's do.
    pub wall_offset_ns: u64,
    /// The `-c` command's PID, for `cpid`.
    pub cpid: u32,
    /// Entries of each user map.
    pub map_entries: u32,
    /// Bytes of the ring buffer.
    pub ring_size: u32,
    /// Whether each `printf` record carries the time and thread of the
    /// hit ([`layout::stamp`]), for a timeline. Off, a `printf` costs
    /// nothing for it.
    pub stamp_printf: bool,
    /// What the programs know about the machine they run on.
    pub machine: Machine,
    /// Counters in the hits map ([`layout::HITS_MAP`]): one per probe
    /// whose hits the session counts.
    pub hit_counters: u32,
    /// Whether the stack map records each frame as the build ID of its
    /// object and the offset in that file ([`sdt_bpf::F_STACK_BUILD_ID`])
    /// rather than as an address: for a run that does not record the
    /// traced processes' mappings (system-wide), whose stacks must still
    /// name their functions once those processes have gone.
    pub build_id_stacks: bool,
}

/// Facts about the machine, fixed into the programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// CPUs the kernel may bring up: a per-CPU map holds a value for each.
    pub possible_cpus: u32,
    /// CPUs online when the programs were made (`ncpus`).
    pub online_cpus: u32,
    /// The device and inode of sdt's PID namespace, when it is not the
    /// initial one: `pid` and `tid` are then numbers as seen from it.
    pub pid_namespace: Option<(u64, u64)>,
    /// Whether uprobe programs can read the traced process's memory
    /// through calls that fault pages in (see the `user` module), and
    /// with which kfunc.
    pub faulting: Faulting,
}

/// Whether uprobe programs may fault the traced process's pages in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Faulting {
    /// The kernel was not asked (offline): they may not.
    #[default]
    NotAsked,
    /// The kernel cannot ([`sdt_bpf::FaultingReads::detect`] says why).
    No,
    /// The kernel can, with this kfunc.
    Yes(FaultingReads),
}

impl Machine {
    /// This machine, as sdt sees it (reads sysfs and `/proc/self/ns/pid`),
    /// and what its kernel lets programs do, found by loading tiny
    /// programs ([`sdt_bpf::FaultingReads::detect`]; without the
    /// privileges to load, the answer is what programs cannot do).
    pub fn probed() -> Machine {
        Machine {
            faulting: match sdt_bpf::FaultingReads::detect() {
                Ok(reads) => Faulting::Yes(reads),
                Err(_) => Faulting::No,
            },
            ..Machine::current()
        }
    }

    /// This machine, as sdt sees it (reads sysfs and `/proc/self/ns/pid`),
    /// without asking the kernel anything: programs made for it read as
    /// programs that cannot sleep.
    pub fn current() -> Machine {
        let possible_cpus = possible_cpus();
        Machine {
            possible_cpus,
            online_cpus: sdt_bpf::online_cpus().map_or(possible_cpus, |n| n as u32),
            pid_namespace: pid_namespace(),
            faulting: Faulting::NotAsked,
        }
    }
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            possible_cpus: 1,
            online_cpus: 1,
            pid_namespace: None,
            faulting: Faulting::NotAsked,
        }
    }
}

/// The inode of the initial PID namespace (`PROC_PID_INIT_INO`).
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// sdt's PID namespace, unless it is the initial one.
fn pid_namespace() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata("/proc/self/ns/pid").ok()?;
    (ns.ino() != INITIAL_PID_NAMESPACE).then(|| (ns.dev(), ns.ino()))
}

impl Default for Options {
    fn default() -> Self {
        Options {
            wake_at: 1 << 19,
            start_ns: 0,
            wall_offset_ns: 0,
            cpid: 0,
            map_entries: 4096,
            ring_size: 4 << 20,
            stamp_printf: false,
            machine: Machine::current(),
            hit_counters: 0,
            build_id_stacks: false,
        }
    }
}

/// The number of possible CPUs (which needs no privilege to read), or 1.
pub fn possible_cpus() -> u32 {
    sdt_bpf::possible_cpus().map_or(1, |n| n as u32)
}

/// A generated program.
#[derive(Clone, Debug)]
pub struct CompiledProgram {
    pub name: String,
    pub display: String,
    pub prog_type: ProgramType,
    /// Map references hold indices into [`Compiled::maps`].
    pub insns: Vec<Insn>,
    /// Where the code for each statement starts, to map a verifier
    /// rejection back to the script.
    pub spans: Vec<(usize, Span)>,
    /// The unit it was generated for.
    pub unit: Unit,
    /// Loaded sleepable: its reads of the traced process's memory fault
    /// pages in.
    pub sleepable: bool,
}

/// A map to create, with what it is for.
#[derive(Clone, Debug)]
pub struct MapDef {
    pub spec: MapSpec,
    /// Whether any program uses it; unused fixed maps are still created
    /// small, so that map indices stay fixed.
    pub used: bool,
}

/// Everything generated for a script.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    pub maps: Vec<MapDef>,
    pub programs: Vec<CompiledProgram>,
    /// What each output id means.
    pub outputs: Vec<OutputInfo>,
    /// Bytes of scratch memory per CPU (and per thread, for sleepable
    /// programs).
    pub scratch_size: u32,
    /// Where the programs read the traced process's memory: the read
    /// sites whose failures the lost map counts
    /// ([`layout::read_failure_counters`]).
    pub read_sites: Vec<layout::ReadSite>,
    /// Probe instances whose programs read the traced process's memory
    /// without faulting pages in although the kernel could, with why.
    pub nonfaulting: Vec<(usize, &'static str)>,
    /// Whether a program records addresses of the traced process to name
    /// later (`usym`, `ustack`): the runtime then needs its mappings.
    pub user_addresses: bool,
}

impl Compiled {
    /// Names of the maps by index, for disassembly listings.
    pub fn map_names(&self) -> HashMap<i32, String> {
        self.maps
            .iter()
            .enumerate()
            .map(|(i, m)| (i as i32, m.spec.name.clone()))
            .collect()
    }
}

/// The largest scratch area: the kernel's limit for a per-CPU map value.
pub const MAX_SCRATCH: u32 = 32 * 1024;

/// Generates every unit's program.
pub fn compile(
    program: &Program,
    units: &[Unit],
    options: &Options,
) -> Result<Compiled, Vec<Diagnostic>> {
    let mut shared = Shared::default();
    let mut programs = Vec::new();
    let mut errors = Vec::new();
    let mut nonfaulting = Vec::new();
    for unit in units {
        match generate(program, unit, options, &mut shared) {
            Ok((mut p, why)) => {
                if let Some(why) = why {
                    if !nonfaulting.contains(&(unit.instance, why)) {
                        nonfaulting.push((unit.instance, why));
                    }
                }
                dce::remove_unreachable(&mut p.insns, &mut p.spans);
                programs.push(p);
            }
            Err(d) => errors.push(d),
        }
    }
    if !errors.is_empty() {
        errors.dedup_by(|a, b| a.message == b.message && a.span == b.span);
        return Err(errors);
    }
    let registry = &program.registry;
    let mut scratch_size = shared.scratch.max(8).next_multiple_of(8);
    // Replay programs copy each hit of a batch past what the others use.
    if programs
        .iter()
        .any(|p| matches!(p.unit.args, ArgAccess::Replay(_)))
    {
        let record_at = scratch_size;
        scratch_size += layout::replay::SIZE;
        for p in &mut programs {
            if matches!(p.unit.args, ArgAccess::Replay(_)) {
                let body = std::mem::take(&mut p.insns);
                p.insns = replay::batched(record_at, &body);
                let driver = p.insns.len() - body.len();
                for (at, _) in &mut p.spans {
                    *at += driver;
                }
            }
        }
    }
    let mut maps = vec![
        MapDef {
            spec: MapSpec::new(MapType::RingBuf, 0, 0, options.ring_size).name("sdt_ring"),
            used: true,
        },
        MapDef {
            spec: MapSpec::new(
                MapType::PerCpuArray,
                4,
                8,
                layout::read_failure_counters(program.maps.len(), shared.read_sites.len() as u32).0,
            )
            .name("sdt_lost"),
            used: true,
        },
        MapDef {
            spec: MapSpec::new(MapType::PerCpuArray, 4, scratch_size, 1).name("sdt_scratch"),
            used: scratch_size > 8 || shared.scratch > 0,
        },
        MapDef {
            spec: MapSpec::new(
                MapType::StackTrace,
                4,
                layout::stack_frame_size(options.build_id_stacks) * layout::STACK_DEPTH,
                // A stack whose hash bucket another stack holds is lost
                // (and counted): with many distinct stacks, a larger map
                // loses fewer. Like bpftrace, BPFTRACE_MAP_KEYS_MAX sizes
                // it too, never below 16384.
                if shared.stacks {
                    options.map_entries.max(16384)
                } else {
                    1
                },
            )
            .flags(if options.build_id_stacks {
                sdt_bpf::F_STACK_BUILD_ID
            } else {
                0
            })
            .name("sdt_stacks"),
            used: shared.stacks,
        },
        MapDef {
            spec: MapSpec::new(MapType::Array, 4, 8, 1).name("sdt_control"),
            used: true,
        },
        MapDef {
            spec: MapSpec::new(MapType::PerCpuArray, 4, 8, options.hit_counters.max(1))
                .name("sdt_hits"),
            used: options.hit_counters > 0,
        },
        MapDef {
            spec: if shared.task_scratch {
                MapSpec::new(MapType::TaskStorage, 4, scratch_size, 0).flags(F_NO_PREALLOC)
            } else {
                MapSpec::new(MapType::Array, 4, 8, 1)
            }
            .name("sdt_tscratch"),
            used: shared.task_scratch,
        },
    ];
    for decl in &program.maps {
        let lru = decl.declared.is_some_and(|d| d.lru);
        let map_type = match (decl.is_per_cpu(), lru) {
            (true, false) => MapType::PerCpuHash,
            (true, true) => MapType::LruPerCpuHash,
            (false, false) => MapType::Hash,
            (false, true) => MapType::LruHash,
        };
        let entries = decl.declared.map_or(options.map_entries, |d| d.entries);
        maps.push(MapDef {
            spec: MapSpec::new(
                map_type,
                decl.key_size(registry),
                decl.value_size(registry),
                entries,
            )
            .name(format!("m_{}", decl.name)),
            used: true,
        });
    }
    Ok(Compiled {
        maps,
        programs,
        outputs: shared.outputs,
        scratch_size,
        read_sites: shared.read_sites,
        nonfaulting,
        user_addresses: shared.user_addresses,
    })
}

/// Generates one unit's program: sleepable, with reads that fault pages
/// in, where the machine allows, the program reads the traced process's
/// memory and needs nothing a sleepable program cannot have; otherwise as
/// a program that does not sleep, with why not when it reads memory.
fn generate(
    program: &Program,
    unit: &Unit,
    options: &Options,
    shared: &mut Shared,
) -> Result<(CompiledProgram, Option<&'static str>), Diagnostic> {
    let plain = Gen::new(program, unit, options, shared, None).generate()?;
    let Faulting::Yes(faulting) = options.machine.faulting else {
        return Ok((plain.program, None));
    };
    if plain.user_reads == 0 || unit.prog_type != ProgramType::Kprobe {
        return Ok((plain.program, None));
    }
    if plain.uses_stack_map {
        return Ok((
            plain.program,
            Some("ustack needs a stack-trace map, which a program that faults pages in cannot use"),
        ));
    }
    let sleepable = Gen::new(program, unit, options, shared, Some(faulting)).generate()?;
    shared.task_scratch |= sleepable.program.sleepable && sleepable.scratch;
    Ok((sleepable.program, None))
}

/// What all programs of a script share while they are generated.
#[derive(Default)]
struct Shared {
    outputs: Vec<OutputInfo>,
    /// The most scratch memory one program needs.
    scratch: u32,
    /// Whether a program records user stacks.
    stacks: bool,
    /// Whether a program records user addresses (`usym`, `ustack`).
    user_addresses: bool,
    /// Read sites by index (see the `user` module).
    read_sites: Vec<layout::ReadSite>,
    /// Whether a sleepable program uses scratch memory, which is then
    /// per thread.
    task_scratch: bool,
}

/// A generated program, with what decides how it is loaded.
struct Generated {
    program: CompiledProgram,
    /// Reads of the traced process's memory it makes.
    user_reads: u32,
    /// Whether it records stacks in the stack-trace map.
    uses_stack_map: bool,
    /// Whether it uses scratch memory.
    scratch: bool,
}

/// The generator of one program.
struct Gen<'a> {
    program: &'a Program,
    unit: &'a Unit,
    instance: &'a ProbeInstance,
    options: &'a Options,
    shared: &'a mut Shared,
    b: Builder,
    frame: Frame,
    /// Where each variable lives.
    vars: Vec<Mem>,
    /// The label of the program's end (for `return` and predicates).
    exit: sdt_bpf::Label,
    /// `(continue, break)` labels of the enclosing loops.
    loops: Vec<(sdt_bpf::Label, sdt_bpf::Label)>,
    spans: Vec<(usize, Span)>,
    /// The statement being generated, for errors.
    span: Span,
    /// Map walks and their callbacks' labels (see [`walk`]).
    walks: Vec<(sdt_bpf::Label, walk::Walk)>,
    /// Loop bodies to emit as callbacks (see [`loops`]).
    callbacks: Vec<loops::Callback>,
    /// The program's functions: its code, then each loop callback.
    functions: Vec<loops::Function>,
    /// The function being generated.
    function: usize,
    /// The most scratch memory a callback uses.
    scratch_peak: u32,
    /// Reads of the traced process's memory fault pages in, with this
    /// kfunc: the program is sleepable.
    faulting: Option<FaultingReads>,
    /// Reads of the traced process's memory emitted so far.
    user_reads: u32,
    /// Whether the program records stacks in the stack-trace map.
    uses_stack_map: bool,
}

/// The context pointer, kept for the whole program.
const CTX: Reg = Reg::R6;
/// The scratch memory pointer.
const SCRATCH: Reg = Reg::R9;

impl<'a> Gen<'a> {
    fn new(
        program: &'a Program,
        unit: &'a Unit,
        options: &'a Options,
        shared: &'a mut Shared,
        faulting: Option<FaultingReads>,
    ) -> Gen<'a> {
        let instance = &program.probes[unit.instance];
        let mut b = Builder::new();
        let exit = b.label();
        Gen {
            program,
            unit,
            instance,
            options,
            shared,
            b,
            frame: Frame::new(),
            vars: Vec::new(),
            exit,
            loops: Vec::new(),
            spans: Vec::new(),
            span: instance.span,
            walks: Vec::new(),
            callbacks: Vec::new(),
            functions: vec![loops::Function {
                stack: 0,
                caller: None,
            }],
            function: 0,
            scratch_peak: 0,
            faulting,
            user_reads: 0,
            uses_stack_map: false,
        }
    }

    fn error(&self, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(self.span, message)
    }

    fn generate(mut self) -> Result<Generated, Diagnostic> {
        self.b.push(Insn::mov64_reg(CTX, Reg::R1));
        if !matches!(
            self.kind(),
            ProbeKind::Begin | ProbeKind::End | ProbeKind::Interval
        ) {
            // Once the run has ended, an attached probe does nothing.
            let exit = self.exit;
            self.b.ld_map_value_index(Reg::R1, layout::CONTROL_MAP, 0);
            self.b
                .push(Insn::ldx(sdt_bpf::Size::DW, Reg::R1, Reg::R1, 0));
            self.b.jump_imm(sdt_bpf::JmpOp::Ne, Reg::R1, 0, exit);
        }
        if let Some(counter) = self.unit.counted {
            self.count(layout::HITS_MAP, counter);
        }
        for ty in &self.instance.vars {
            let home = if self.instance.loops {
                self.frame.alloc_shared(ty, &self.program.registry)
            } else {
                self.frame.alloc_for(ty, &self.program.registry)
            };
            self.vars.push(home);
        }
        if let Some(predicate) = &self.instance.predicate {
            self.span = predicate.span;
            self.mark_span();
            let exit = self.exit;
            self.cond_jump(predicate, exit, false)?;
        }
        let instance = self.instance;
        self.block(&instance.body)?;
        self.b.bind(self.exit);
        self.b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
        self.functions[0].stack = self.frame.stack_size();
        self.emit_callbacks()?;
        self.emit_walks();

        let scratch = self.frame.scratch_size().max(self.scratch_peak);
        if scratch > MAX_SCRATCH {
            return Err(Diagnostic::error(
                self.instance.span,
                format!("this probe needs {scratch} bytes of scratch memory, more than the {MAX_SCRATCH} available"),
            )
            .hint("use shorter strings (BPFTRACE_STRLEN) or fewer string values in one statement"));
        }
        // A map walk's callback frame (16 bytes, rounded up to 32) counts
        // too, below the deepest chain of loop callbacks.
        let walk_frame = if self.walks.is_empty() { 0 } else { 32 };
        // A replay program runs as a function of the batch's loop: two
        // frames of 32 bytes above it (see the `replay` module).
        let batch_frames = if self.replays() { 64 } else { 0 };
        let stack = self.deepest_stack() + walk_frame + batch_frames;
        if stack > 512 {
            return Err(Diagnostic::error(
                self.instance.span,
                format!("this probe needs {stack} bytes of BPF stack, more than 512"),
            )
            .hint(if self.functions.len() > 1 {
                "split long expressions into several statements, or nest fewer loops"
            } else {
                "split long expressions into several statements"
            }));
        }
        self.shared.scratch = self.shared.scratch.max(scratch);
        let mut insns = self.b.finish().map_err(|e| {
            Diagnostic::error(
                self.instance.span,
                format!("internal error generating code (a bug in sdt): {e}"),
            )
        })?;
        let mut spans = self.spans;
        // Whether the program needs the scratch pointer is only known once
        // its body is generated, so the load is spliced in after the first
        // instruction (`r6 = r1`), where no jump crosses it.
        let uses_scratch = self.frame.scratch_size() > 0;
        if uses_scratch {
            let prologue = scratch_prologue(self.faulting.is_some());
            let at = 1;
            let extra = prologue.len();
            insns.splice(at..at, prologue);
            for (start, _) in &mut spans {
                if *start >= at {
                    *start += extra;
                }
            }
        }
        Ok(Generated {
            program: CompiledProgram {
                name: self.unit.name.clone(),
                display: self.unit.display.clone(),
                prog_type: self.unit.prog_type,
                insns,
                spans,
                unit: self.unit.clone(),
                sleepable: self.faulting.is_some(),
            },
            user_reads: self.user_reads,
            uses_stack_map: self.uses_stack_map,
            scratch: uses_scratch,
        })
    }

    fn mark_span(&mut self) {
        self.spans.push((self.b.len(), self.span));
    }

    /// Returns early unless the current process is in the tree map.
    /// Registers the layout of an output record and returns its id.
    fn output_id(&mut self, info: OutputInfo) -> u32 {
        if let Some(i) = self.shared.outputs.iter().position(|o| *o == info) {
            return i as u32;
        }
        self.shared.outputs.push(info);
        self.shared.outputs.len() as u32 - 1
    }

    fn kind(&self) -> ProbeKind {
        self.instance.kind
    }

    fn value_size(&self, ty: &Ty) -> u32 {
        ty.value_size(&self.program.registry)
    }
}

/// `R9 = &scratch[0]`: this CPU's, or for a sleepable program
/// (`per_thread`) this thread's, made the first time. A per-CPU lookup
/// cannot fail; when the kernel has no memory for a thread's, the hit is
/// counted as lost and the program returns.
fn scratch_prologue(per_thread: bool) -> Vec<Insn> {
    use sdt_bpf::{AluOp, Helper, JmpOp, Size};
    let mut b = Builder::new();
    let go = b.label();
    look_up_scratch(&mut b, per_thread, true);
    b.jump_imm(JmpOp::Ne, Reg::R0, 0, go);
    if per_thread {
        // `count_lost(LOST_HITS)`, which the generator's own cannot do
        // here, before the program's code.
        let done = b.label();
        b.push(Insn::st(
            Size::W,
            Reg::R10,
            mem::KEY_SLOT,
            layout::LOST_HITS as i32,
        ));
        b.ld_map_index(Reg::R1, layout::LOST_MAP);
        b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
        b.push(Insn::alu64_imm(
            AluOp::Add,
            Reg::R2,
            i32::from(mem::KEY_SLOT),
        ));
        b.call(Helper::MapLookupElem);
        b.jump_imm(JmpOp::Eq, Reg::R0, 0, done);
        b.push(Insn::mov64_imm(Reg::R1, 1));
        b.push(Insn::atomic_add(Size::DW, Reg::R0, 0, Reg::R1));
        b.bind(done);
    }
    b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
    b.bind(go);
    b.push(Insn::mov64_reg(SCRATCH, Reg::R0));
    b.finish().expect("the prologue's labels are bound")
}

/// `R0 = &scratch[0]` (or NULL): this CPU's, or with `per_thread` this
/// thread's, which `create` makes if it has none yet.
pub(crate) fn look_up_scratch(b: &mut Builder, per_thread: bool, create: bool) {
    use sdt_bpf::{AluOp, Helper, Size};
    if per_thread {
        b.call(Helper::GetCurrentTaskBtf);
        b.push(Insn::mov64_reg(Reg::R2, Reg::R0));
        b.ld_map_index(Reg::R1, layout::TASK_SCRATCH_MAP);
        b.push(Insn::mov64_imm(Reg::R3, 0));
        b.push(Insn::mov64_imm(
            Reg::R4,
            if create {
                sdt_bpf::TASK_STORAGE_CREATE
            } else {
                0
            },
        ));
        b.call(Helper::TaskStorageGet);
    } else {
        b.push(Insn::st(Size::W, Reg::R10, mem::KEY_SLOT, 0));
        b.ld_map_index(Reg::R1, layout::SCRATCH_MAP);
        b.push(Insn::mov64_reg(Reg::R2, Reg::R10));
        b.push(Insn::alu64_imm(
            AluOp::Add,
            Reg::R2,
            i32::from(mem::KEY_SLOT),
        ));
        b.call(Helper::MapLookupElem);
    }
}
