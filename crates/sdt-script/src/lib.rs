//! A bpftrace script compiled for sdt: the passes, in order, parse
//! ([`sdt_lang::parser`]), bind attach points to sites ([`sdt_bind`]),
//! check ([`sdt_lang::check`]) and lower ([`sdt_codegen`]).
//!
//! What comes in: the script's text and [`Options`] (its parameters, what
//! is traced, how programs will attach). What goes out: a [`Compilation`],
//! everything the runtime needs to load, attach and run the programs and
//! to read what they send: the checked program, the generated programs
//! and maps, where each attaches, and the names of probes and functions.
//! Everything here reads files but loads nothing into the kernel, so
//! `--dump` works without privileges and every error is found before
//! anything is attached. The runtime depends on this crate, never the
//! other way round.

#![forbid(unsafe_code)]

mod fast;
mod later;

use std::collections::HashMap;

use sdt_bpf::arg::ArgSource;
use sdt_bpf::{Mechanism, PerfEvent, PerfType, ProgramType, Sampling};
use sdt_trace::{Attach, AttachSite, PlannedSite, ProgramSpec, Scope};

use sdt_bind::{Bound, ObjectFacts, Target};
use sdt_codegen::{ArgAccess, Compiled, Ids, Unit};
use sdt_lang::ast::Script;
use sdt_lang::attach::{AttachSpec, TimeUnit};
use sdt_lang::check::{self, CheckOptions, NoObjects};
use sdt_lang::config::MissingProbes;
use sdt_lang::diag::{Diagnostic, Diagnostics};
use sdt_lang::hir::{ProbeInstance, ProbeKind, Program};
use sdt_lang::perf::CounterKind;

pub use fast::{FastPlan, FastProbe};
use later::LaterPoint;
pub use later::{Added, Growth, Later};

/// The names of `probe` and `func` values, by the ids the programs send.
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub probes: Vec<String>,
    pub funcs: Vec<String>,
}

/// What compiling needs besides the script.
#[derive(Clone, Debug)]
pub struct Options {
    pub check: CheckOptions,
    pub scope: Scope,
    /// How programs will be attached: without cookies, each site gets a
    /// program of its own.
    pub mechanism: Mechanism,
    /// What an attach point that matches nothing does (`missing_probes`).
    pub missing_probes: MissingProbes,
    pub codegen: sdt_codegen::Options,
    /// USDT probes whose hits are counted, as `(provider, name)`: the
    /// programs of their sites add one to counter N of the hits map for
    /// the Nth, at each hit (see [`Compilation::counted`]).
    pub counted: Vec<(String, String)>,
    /// Whether probes of the `sdt` crate built with its `fastpath`
    /// feature may deliver their hits through shared memory (see
    /// [`FastPlan`]); the run must then serve them.
    pub fastpath: bool,
}

/// What a program is run for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Begin,
    End,
    /// Run every `period_ns`.
    Interval {
        period_ns: u64,
    },
    /// Attached to probes.
    Probe,
    /// Run by sdt on hits of the fast path ([`FastPlan`]).
    Replay,
}

/// A compiled script, ready to load.
#[derive(Default)]
pub struct Compilation {
    pub script: Script,
    pub bound: Vec<Vec<Bound>>,
    pub program: Program,
    pub compiled: Compiled,
    pub names: Names,
    /// What each program is run for, and where it attaches.
    pub roles: Vec<Role>,
    pub attach: Vec<Attach>,
    /// Every USDT site, by the site id in cookies.
    pub sites: Vec<PlannedSite>,
    /// Probes as bpftrace counts them, for `Attaching N probes...`.
    pub probe_count: usize,
    /// Sites refused and notes skipped, one line each. (Warnings about
    /// places in the script are the program's, located.)
    pub warnings: Vec<String>,
    /// The script's text and the name messages give it (`stdin` for
    /// `-e`), for messages about places in it at run time (`errorf`).
    pub source: String,
    pub source_name: String,
    /// Attach points left out because they match nothing
    /// (`missing_probes = warn`), as warnings placed in the script.
    pub skipped: Vec<Diagnostic>,
    /// What attaching to objects mapped later needs (see [`Growth`]).
    pub later: Later,
    /// The probes whose hits are counted, by counter (see
    /// [`Options::counted`]).
    pub counted: Vec<(String, String)>,
    /// The probes whose hits come through shared memory.
    pub fast: FastPlan,
}

impl Compilation {
    /// Whether attach points also mean objects that the traced process
    /// maps after the start, to attach through a [`Growth`].
    pub fn attaches_later(&self) -> bool {
        !self.later.points.is_empty()
    }

    /// The programs with their attach targets, for the session.
    pub fn program_specs(&self) -> Vec<ProgramSpec> {
        program_specs(&self.compiled.programs, &self.attach)
    }
}

/// Generated programs with their attach targets, for the session.
fn program_specs(programs: &[sdt_codegen::CompiledProgram], attach: &[Attach]) -> Vec<ProgramSpec> {
    programs
        .iter()
        .zip(attach)
        .map(|(p, attach)| ProgramSpec {
            name: p.name.clone(),
            prog_type: p.prog_type,
            insns: p.insns.clone(),
            attach: attach.clone(),
            sleepable: p.sleepable,
        })
        .collect()
}

/// Compiles script text.
pub fn compile(source: &str, options: &Options) -> Result<Compilation, Diagnostics> {
    compile_named("stdin", source, options)
}

/// Compiles script text that messages call `name`.
pub fn compile_named(
    name: &str,
    source: &str,
    options: &Options,
) -> Result<Compilation, Diagnostics> {
    let script = sdt_lang::parser::parse(source)?;
    compile_parsed(name, source, script, options)
}

/// Compiles a script already parsed from `source`, which messages call
/// `name`.
pub fn compile_parsed(
    name: &str,
    source: &str,
    script: Script,
    options: &Options,
) -> Result<Compilation, Diagnostics> {
    let mut compilation = compile_script(script, options)?;
    compilation.source = source.to_string();
    compilation.source_name = name.to_string();
    Ok(compilation)
}

/// Compiles a parsed script. Where its probes could take the fast path
/// but a program cannot be made for it (a replayed program needs more
/// stack, say), every probe takes the kernel's path instead, and
/// [`FastPlan::kernel`] says why.
pub fn compile_script(script: Script, options: &Options) -> Result<Compilation, Diagnostics> {
    if !options.fastpath {
        return compile_lowered(script, options);
    }
    match compile_lowered(script.clone(), options) {
        Ok(compilation) => Ok(compilation),
        Err(fast_errors) => {
            let kernel_only = Options {
                fastpath: false,
                ..options.clone()
            };
            let mut compilation = compile_lowered(script, &kernel_only)?;
            compilation.fast.kernel.extend(
                fast_errors
                    .0
                    .iter()
                    .map(|d| format!("every probe takes the kernel's path: {}", d.message)),
            );
            Ok(compilation)
        }
    }
}

fn compile_lowered(mut script: Script, options: &Options) -> Result<Compilation, Diagnostics> {
    let mut bindings = sdt_bind::bind(
        &script,
        &options.check.params,
        &options.scope,
        options.missing_probes,
    )?;
    bindings.prune(&mut script);
    let skipped: Vec<Diagnostic> = match options.missing_probes {
        MissingProbes::Warn => bindings
            .missing
            .iter()
            .map(|(_, _, d)| Diagnostic {
                message: format!("{} Skipping.", d.message),
                warning: true,
                ..d.clone()
            })
            .collect(),
        _ => Vec::new(),
    };
    let bound = bindings.bound;
    let attach_info: Vec<Vec<_>> = bound
        .iter()
        .map(|points| points.iter().map(Bound::info).collect())
        .collect();
    let mut objects = ObjectFacts::with_debug_dirs(options.scope.debug_dirs.clone());
    let program = check::check(&script, &attach_info, &options.check, &mut objects)?;
    let mut lowering = Lowering {
        names: Names::default(),
        probe_ids: HashMap::new(),
        func_ids: HashMap::new(),
        sites: Vec::new(),
        units: Vec::new(),
        roles: Vec::new(),
        attach: Vec::new(),
        cookies: options.mechanism.supports_cookies(),
        counted: options.counted.clone(),
        warnings: Vec::new(),
        fast: fast::FastLowering::new(options.fastpath),
    };
    for (index, instance) in program.probes.iter().enumerate() {
        let b = &bound[instance.block][instance.attach_point];
        lowering
            .instance(&program, index, instance, b)
            .map_err(|d| Diagnostics(vec![d]))?;
    }
    let later_points: Vec<LaterPoint> = program
        .probes
        .iter()
        .enumerate()
        .filter_map(|(instance, p)| {
            let b = &bound[p.block][p.attach_point];
            let spec = b.later.clone()?;
            let written = match &b.spec {
                AttachSpec::Usdt { path, .. } => path.clone(),
                _ => None,
            };
            Some(LaterPoint {
                instance,
                spec,
                written,
            })
        })
        .collect();
    let reserve: Vec<Unit> = later_points.iter().map(Later::reserve_unit).collect();
    let codegen = sdt_codegen::Options {
        hit_counters: options.counted.len() as u32,
        ..options.codegen.clone()
    };
    let mut compiled = sdt_codegen::compile(
        &program,
        &[lowering.units.as_slice(), &reserve].concat(),
        &codegen,
    )
    .map_err(Diagnostics)?;
    // The reserving programs are never loaded.
    compiled.programs.truncate(lowering.units.len());
    let mut fast = std::mem::take(&mut lowering.fast);
    if !fast.anchor_sites.is_empty() {
        fast.plan.anchors = Some(compiled.programs.len());
        compiled
            .programs
            .push(fast::anchor_program(&lowering.units));
        lowering.roles.push(Role::Probe);
        lowering.attach.push(Attach::Uprobe {
            sites: fast.anchor_sites,
            retprobe: false,
        });
    }
    let later = Later {
        points: later_points,
        units: lowering.units.clone(),
        reserve,
        codegen,
        cookies: lowering.cookies,
    };
    let probe_count = bound.iter().flatten().map(Bound::probe_count).sum();
    let faulting = faulting_notes(&script, &program, &compiled, &options.codegen);
    let warnings = bound
        .iter()
        .flatten()
        .flat_map(|b| b.warnings.clone())
        .chain(lowering.warnings)
        .chain(faulting)
        .collect();
    Ok(Compilation {
        script,
        bound,
        program,
        compiled,
        names: lowering.names,
        roles: lowering.roles,
        attach: lowering.attach,
        sites: lowering.sites,
        probe_count,
        warnings,
        source: String::new(),
        source_name: "stdin".to_string(),
        skipped,
        later,
        counted: options.counted.clone(),
        fast: fast.plan,
    })
}

/// What to say about reads of the traced process's memory that cannot
/// fault pages in: once, why the kernel cannot, if it cannot and a
/// program reads that memory; else, for each probe whose programs read
/// without faulting although the kernel could, why.
fn faulting_notes(
    script: &Script,
    program: &Program,
    compiled: &Compiled,
    codegen: &sdt_codegen::Options,
) -> Vec<String> {
    if compiled.read_sites.is_empty() {
        return Vec::new();
    }
    match codegen.machine.faulting {
        sdt_codegen::Faulting::NotAsked => return Vec::new(),
        sdt_codegen::Faulting::No => {
            // Asked before, so the answer is known: this asks nothing.
            let why = sdt_bpf::FaultingReads::detect().err().unwrap_or_default();
            return vec![format!(
                "strings and other memory of the traced process are read only from pages it has in memory, because {why}; a read of a page it has not touched yet (a string literal it never read itself) fails, and is counted"
            )];
        }
        sdt_codegen::Faulting::Yes(_) => {}
    }
    compiled
        .nonfaulting
        .iter()
        .map(|(instance, why)| {
            let probe = program
                .probes
                .get(*instance)
                .and_then(|p| script.probes.get(p.block)?.attach_points.get(p.attach_point))
                .map_or("a probe", |a| a.text.as_str());
            format!(
                "{probe} reads the traced process's memory only from pages it has in memory ({why}); reads that fail are counted"
            )
        })
        .collect()
}

/// Compiles as if every attach point matched something: each USDT probe
/// one site whose twelve arguments are constants, each uprobe one
/// function, each tracepoint a record like `syscalls:sys_enter_openat`'s.
/// It reads no file and touches no kernel interface: the fuzz target
/// drives the parser, the checker and the code generator through it.
pub fn compile_offline(
    source: &str,
    params: &[String],
) -> Result<(Program, Compiled), Diagnostics> {
    let script = sdt_lang::parser::parse(source)?;
    let attach_info = check::offline_attach(&script, params)?;
    let options = CheckOptions {
        params: params.to_vec(),
        ..CheckOptions::default()
    };
    let program = check::check(&script, &attach_info, &options, &mut NoObjects)?;
    let units: Vec<Unit> = program
        .probes
        .iter()
        .enumerate()
        .map(|(instance, p)| {
            let (prog_type, args) = match p.kind {
                ProbeKind::Begin | ProbeKind::End | ProbeKind::Interval => {
                    (ProgramType::RawTracepoint, ArgAccess::None)
                }
                ProbeKind::Usdt => (
                    ProgramType::Kprobe,
                    ArgAccess::Usdt((0..12).map(|n| Some(ArgSource::Const(n))).collect()),
                ),
                ProbeKind::Uprobe | ProbeKind::Uretprobe => {
                    (ProgramType::Kprobe, ArgAccess::Registers)
                }
                ProbeKind::Tracepoint => (ProgramType::Tracepoint, ArgAccess::None),
                ProbeKind::Profile | ProbeKind::Software | ProbeKind::Hardware => {
                    (ProgramType::PerfEvent, ArgAccess::None)
                }
            };
            Unit {
                instance,
                prog_type,
                args,
                ids: Ids::Cookie,
                name: format!("p{instance}"),
                display: p.kind.name().to_string(),
                site_address: None,
                counted: None,
            }
        })
        .collect();
    let compiled = sdt_codegen::compile(&program, &units, &sdt_codegen::Options::default())
        .map_err(Diagnostics)?;
    Ok((program, compiled))
}

/// Turns bound probe instances into code generation units.
#[derive(Clone)]
struct Lowering {
    names: Names,
    probe_ids: HashMap<String, u32>,
    func_ids: HashMap<String, u32>,
    sites: Vec<PlannedSite>,
    units: Vec<Unit>,
    roles: Vec<Role>,
    attach: Vec<Attach>,
    cookies: bool,
    /// The probes whose hits are counted (see [`Options::counted`]).
    counted: Vec<(String, String)>,
    /// Sites left out because the script reads an argument there that
    /// cannot be read, one line each.
    warnings: Vec<String>,
    fast: fast::FastLowering,
}

impl Lowering {
    fn probe_id(&mut self, name: String) -> u32 {
        if let Some(&id) = self.probe_ids.get(&name) {
            return id;
        }
        self.names.probes.push(name.clone());
        let id = self.names.probes.len() as u32 - 1;
        self.probe_ids.insert(name, id);
        id
    }

    fn func_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.func_ids.get(name) {
            return id;
        }
        self.names.funcs.push(name.to_string());
        let id = self.names.funcs.len() as u32 - 1;
        self.func_ids.insert(name.to_string(), id);
        id
    }

    fn push(&mut self, unit: Unit, role: Role, attach: Attach) {
        self.units.push(unit);
        self.roles.push(role);
        self.attach.push(attach);
    }

    fn instance(
        &mut self,
        program: &Program,
        index: usize,
        instance: &ProbeInstance,
        b: &Bound,
    ) -> Result<(), Diagnostic> {
        match &b.target {
            Target::Plain => self.plain(index, b),
            Target::Usdt(planned) => {
                let written = match &b.spec {
                    AttachSpec::Usdt { path, .. } => path.clone(),
                    _ => None,
                };
                self.usdt(program, index, instance, planned, written.as_deref())?;
            }
            Target::Functions(functions) => self.functions(index, instance, functions, b),
            Target::Tracepoints(tps) => {
                let tp = &tps[instance.target];
                let display = format!("tracepoint:{}:{}", tp.category, tp.name);
                let probe = self.probe_id(display.clone());
                let u = unit(
                    index,
                    ProgramType::Tracepoint,
                    ArgAccess::None,
                    Ids::Const { probe, site: 0 },
                    format!("tp_{}", self.units.len()),
                    display,
                );
                self.push(u, Role::Probe, Attach::Tracepoint { id: tp.id });
            }
        }
        Ok(())
    }

    /// A BEGIN, END, interval or perf-event probe: one program, triggered
    /// by hand or on every CPU's event.
    fn plain(&mut self, index: usize, b: &Bound) {
        let n = self.units.len();
        let display = b.spec.own_name().unwrap_or_default();
        let probe = self.probe_id(display.clone());
        let (role, short, attach) = match b.spec {
            AttachSpec::Begin => (Role::Begin, "begin", Attach::Triggered),
            AttachSpec::End => (Role::End, "end", Attach::Triggered),
            AttachSpec::Interval { period_ns, .. } => {
                (Role::Interval { period_ns }, "interval", Attach::Triggered)
            }
            _ => match perf_event(&b.spec) {
                Some(event) => (
                    Role::Probe,
                    "perf",
                    Attach::PerfEvent {
                        event,
                        probe: display.clone(),
                    },
                ),
                None => {
                    unreachable!("plain targets are BEGIN, END, intervals and perf events")
                }
            },
        };
        let prog_type = match attach {
            Attach::PerfEvent { .. } => ProgramType::PerfEvent,
            _ => ProgramType::RawTracepoint,
        };
        let u = unit(
            index,
            prog_type,
            ArgAccess::None,
            Ids::Const { probe, site: 0 },
            format!("{short}_{n}"),
            display,
        );
        self.push(u, role, attach);
    }

    /// A uprobe or uretprobe at `functions`: one program sharing them
    /// through cookies, or one each where it must know its site.
    fn functions(
        &mut self,
        index: usize,
        instance: &ProbeInstance,
        functions: &[sdt_trace::FunctionSite],
        b: &Bound,
    ) {
        // Sites share a program through cookies, unless the program must
        // know its site's address.
        let cookies = self.cookies && !instance.per_site;
        let (written, ret) = match &b.spec {
            AttachSpec::Uprobe { path, ret, .. } => (path.clone(), *ret),
            _ => (None, false),
        };
        let kind_name = if ret { "uretprobe" } else { "uprobe" };
        let mut sites = Vec::new();
        let mut first_display = None;
        for f in functions {
            let display = format!(
                "{kind_name}:{}:{}",
                shown_path(written.as_deref(), &f.path),
                f.symbol
            );
            let probe = self.probe_id(display.clone());
            let func = self.func_id(&f.function);
            let site = AttachSite {
                path: f.path.clone(),
                attach_path: f.attach_path.clone(),
                attach_fd: f.attach_fd.clone(),
                offset: f.file_offset,
                ref_ctr_offset: None,
                cookie: if cookies {
                    (u64::from(probe) << 32) | u64::from(func)
                } else {
                    0
                },
            };
            if cookies {
                first_display.get_or_insert(display);
                sites.push(site);
            } else {
                let u = unit(
                    index,
                    ProgramType::Kprobe,
                    ArgAccess::Registers,
                    Ids::Const { probe, site: func },
                    format!("up_{}", self.units.len()),
                    display,
                );
                let u = Unit {
                    site_address: Some(f.address),
                    ..u
                };
                self.push(
                    u,
                    Role::Probe,
                    Attach::Uprobe {
                        sites: vec![site],
                        retprobe: ret,
                    },
                );
            }
        }
        if !sites.is_empty() {
            let display = first_display.unwrap_or_default();
            let u = unit(
                index,
                ProgramType::Kprobe,
                ArgAccess::Registers,
                Ids::Cookie,
                format!("up_{}", self.units.len()),
                display,
            );
            self.push(
                u,
                Role::Probe,
                Attach::Uprobe {
                    sites,
                    retprobe: ret,
                },
            );
        }
    }

    /// The programs of a USDT probe instance at `planned` sites: sites
    /// whose arguments live in the same places share a program (through
    /// cookies), and sites where an argument the program reads cannot be
    /// read are left out, with a warning; an error if that leaves none.
    fn usdt(
        &mut self,
        program: &Program,
        index: usize,
        instance: &ProbeInstance,
        planned: &[PlannedSite],
        written: Option<&str>,
    ) -> Result<(), Diagnostic> {
        // Sites share a program through cookies, unless the program must
        // know its site's address.
        let cookies = self.cookies && !instance.per_site;
        let unit = |args, ids, name: String, display: String, site_address, counted| Unit {
            instance: index,
            prog_type: ProgramType::Kprobe,
            args,
            ids,
            name,
            display,
            site_address,
            counted,
        };
        // Sites whose arguments live in the same places, and whose hits
        // add to the same counter (if any), share a program.
        let mut groups: Vec<(Shape, Vec<AttachSite>, String)> = Vec::new();
        let mut refused = Vec::new();
        for site in planned {
            if let Some(why) = unreadable_read(site, instance.args_read) {
                refused.push(format!(
                    "not tracing {}:{} at {:#x} in {}: {why}",
                    site.provider,
                    site.name,
                    site.address,
                    site.path.display()
                ));
                continue;
            }
            let display = format!(
                "usdt:{}:{}:{}",
                shown_path(written, &site.path),
                site.provider,
                site.name
            );
            if let Some(anchor) = self.fast.anchor(site) {
                match sdt_codegen::replay_blocker(program, index, anchor.capture) {
                    None => {
                        self.fast_site(index, site, anchor, display);
                        continue;
                    }
                    Some(why) => {
                        let line = format!("{display} takes the kernel's path: {why}");
                        if !self.fast.plan.kernel.contains(&line) {
                            self.fast.plan.kernel.push(line);
                        }
                    }
                }
            }
            let probe = self.probe_id(display.clone());
            self.sites.push(site.clone());
            let site_id = self.sites.len() as u32 - 1;
            let cookie = (u64::from(probe) << 32) | u64::from(site_id);
            let attach_site = AttachSite {
                path: site.path.clone(),
                attach_path: site.attach_path.clone(),
                attach_fd: site.attach_fd.clone(),
                offset: site.attach_offset,
                ref_ctr_offset: site.semaphore_offset,
                cookie: if cookies { cookie } else { 0 },
            };
            let counted = self
                .counted
                .iter()
                .position(|(provider, name)| *provider == site.provider && *name == site.name)
                .map(|n| n as u32);
            let shape = Shape {
                args: site.args.iter().map(|a| a.source.clone().ok()).collect(),
                counted,
            };
            if cookies {
                match groups.iter_mut().find(|g| g.0 == shape) {
                    Some(g) => g.1.push(attach_site),
                    None => groups.push((shape, vec![attach_site], display)),
                }
            } else {
                let u = unit(
                    ArgAccess::Usdt(shape.args),
                    Ids::Const {
                        probe,
                        site: site_id,
                    },
                    format!("usdt_{}", self.units.len()),
                    display,
                    Some(site.address),
                    shape.counted,
                );
                self.push(
                    u,
                    Role::Probe,
                    Attach::Uprobe {
                        sites: vec![attach_site],
                        retprobe: false,
                    },
                );
            }
        }
        if !refused.is_empty() && refused.len() == planned.len() {
            return Err(
                Diagnostic::error(instance.span, "no site of this probe can be traced")
                    .hint(refused.join("; ")),
            );
        }
        self.warnings.extend(refused);
        for (shape, sites, display) in groups {
            let u = unit(
                ArgAccess::Usdt(shape.args),
                Ids::Cookie,
                format!("usdt_{}", self.units.len()),
                display,
                None,
                shape.counted,
            );
            self.push(
                u,
                Role::Probe,
                Attach::Uprobe {
                    sites,
                    retprobe: false,
                },
            );
        }
        Ok(())
    }
}

impl Lowering {
    /// A site of probe instance `index` whose hits come through shared
    /// memory: one program per instance and probe replays them.
    fn fast_site(
        &mut self,
        index: usize,
        site: &PlannedSite,
        anchor: sdt_elf::Anchor,
        display: String,
    ) {
        let probe = self.probe_id(display.clone());
        self.sites.push(site.clone());
        let site_id = self.sites.len() as u32 - 1;
        let slot = self.fast.probe(site, anchor, &display);
        let served = self.fast.plan.probes[slot]
            .replays
            .iter()
            .any(|&(unit, _)| self.units[unit].instance == index);
        if served {
            return;
        }
        let counted = self
            .counted
            .iter()
            .position(|(provider, name)| *provider == site.provider && *name == site.name)
            .map(|n| n as u32);
        let u = Unit {
            counted,
            ..unit(
                index,
                ProgramType::Syscall,
                ArgAccess::Replay(fast::widths(site)),
                Ids::Replayed,
                format!("replay_{}", self.units.len()),
                display,
            )
        };
        self.fast.plan.probes[slot].replays.push((
            self.units.len(),
            (u64::from(probe) << 32) | u64::from(site_id),
        ));
        self.push(u, Role::Replay, Attach::Triggered);
    }
}

/// A unit of probe instance `index`, attached at no single address.
fn unit(
    index: usize,
    prog_type: ProgramType,
    args: ArgAccess,
    ids: Ids,
    name: String,
    display: String,
) -> Unit {
    Unit {
        instance: index,
        prog_type,
        args,
        ids,
        name,
        display,
        site_address: None,
        counted: None,
    }
}

/// What sites must have alike to share a program: where each argument
/// is, and the hit counter they add to.
#[derive(PartialEq)]
struct Shape {
    args: Vec<Option<ArgSource>>,
    counted: Option<u32>,
}

/// Why `site` cannot run a program that reads the arguments in `read`
/// (bit N for argN): the first of them that cannot be read there.
fn unreadable_read(site: &PlannedSite, read: u16) -> Option<String> {
    site.args.iter().enumerate().find_map(|(n, arg)| {
        let why = arg.source.as_ref().err()?;
        (n < 16 && read & (1 << n) != 0).then(|| format!("arg{n} {why}"))
    })
}

/// The path a probe's name shows: as written when it is a path, the
/// object's own path when the script gave a name to look up (`libc`) or
/// none.
fn shown_path(written: Option<&str>, path: &std::path::Path) -> String {
    match written {
        Some(w) if w.contains('/') && !w.contains(['*', '?', '[']) => w.to_string(),
        _ => path.display().to_string(),
    }
}

/// The perf event a `profile`, `software` or `hardware` probe samples.
fn perf_event(spec: &AttachSpec) -> Option<PerfEvent> {
    Some(match spec {
        AttachSpec::Profile {
            unit: TimeUnit::Hz,
            count,
        } => PerfEvent::cpu_clock(*count),
        AttachSpec::Profile { unit, count } => PerfEvent {
            sampling: Sampling::Period(unit.period_ns(*count)?),
            ..PerfEvent::cpu_clock(1)
        },
        AttachSpec::Counter { event, count, .. } => PerfEvent {
            kind: match event.kind {
                CounterKind::Software => PerfType::Software,
                CounterKind::Hardware => PerfType::Hardware,
            },
            config: event.config,
            sampling: Sampling::Period(count.unwrap_or(event.default_count)),
        },
        _ => return None,
    })
}
