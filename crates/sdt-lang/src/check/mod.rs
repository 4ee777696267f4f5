//! The checker: names resolved, types inferred and checked, syntax tree
//! to [`hir::Program`].
//!
//! Maps are global and their types come from every assignment in the
//! script, in any probe, so the checker runs over the whole script until
//! no assignment teaches it anything new about a map, and only the last
//! run reports errors. Variables belong to one probe block and take their
//! type from their first assignment, in text order, as in bpftrace.
//!
//! A variable belongs to the block that first assigns it (bpftrace 0.22
//! and later). Scripts written for older bpftrace assign a variable in
//! both arms of an `if` and read it after; such a read, which 0.22 and
//! later refuse, is taken as before 0.22: that variable is one for the
//! whole probe, zero until assigned, and a warning says so. The run that
//! finds such a read notes the variable and runs again, so that its first
//! assignment already defines it at the probe's level.
//!
//! Each probe block is checked once per attach point, and once per
//! tracepoint of a tracepoint glob, because `args` differs between
//! tracepoints.

mod builtins;
pub use builtins::helper;
mod calls;
mod expr;
mod objects;
mod uprobe_args;
mod values;

use std::collections::HashMap;

use crate::ast::{self, BinOp, Expr, ExprKind, Script, Stmt, StmtKind};
use crate::diag::{did_you_mean, suggest, Diagnostic, Diagnostics, Span};
use crate::hir::{MapDecl, MapId, ProbeInstance, ProbeKind, Program, TExpr, TKind, TStmt, VarId};
use crate::types::{Agg, Field, Record, RecordId, Space, Ty, TypeRegistry};

pub use self::objects::{
    FunctionArgs, FunctionParam, NoObjects, Objects, ParamPlace, Refusal, UsdtArg,
};

/// What the checker needs to know from outside the script.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Positional parameters: `$1` is `params[0]`.
    pub params: Vec<String>,
    /// Bytes of a string buffer, including the NUL (`BPFTRACE_STRLEN`).
    pub strlen: u32,
    /// Whether `system()` and `signal()` are allowed (`--unsafe`).
    pub allow_unsafe: bool,
    /// Named program parameters (`-- --name=value`), read by `getopt()`:
    /// the value as given, `None` for a bare `--name`.
    pub named_params: HashMap<String, Option<String>>,
    /// Whether `__sdt_event(...)`, the statement behind `sdt trace`, may
    /// be used. Scripts from users never have it.
    pub internal: bool,
    /// How `ustack` prints when the call gives no mode (`stack_mode`).
    pub stack_mode: crate::types::StackMode,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            params: Vec::new(),
            strlen: DEFAULT_STRLEN,
            allow_unsafe: false,
            named_params: HashMap::new(),
            internal: false,
            stack_mode: crate::types::StackMode::Bpftrace,
        }
    }
}

/// bpftrace's default string size.
pub const DEFAULT_STRLEN: u32 = 64;
/// The largest string buffer: strings live in a per-CPU scratch map, not
/// on the 512-byte BPF stack, so this is bounded by the scratch map.
pub const MAX_STRLEN: u32 = 4096;

/// What one attach point expands to, as far as the checker cares.
#[derive(Clone, Debug)]
pub struct AttachInfo {
    pub kind: ProbeKind,
    /// One entry per instance: one for most probes, one per tracepoint
    /// for a tracepoint glob.
    pub targets: Vec<TargetInfo>,
}

#[derive(Clone, Debug, Default)]
pub struct TargetInfo {
    /// The tracepoint's record format, for `args`.
    pub tracepoint: Option<TracepointFormat>,
    /// The object that holds the probe, whose DWARF names the C types
    /// the script does not define, as the user or the process names it.
    pub object: Option<std::path::PathBuf>,
    /// Where that object is read: the descriptor that planning opened and
    /// checked (`/proc/self/fd/N`), so that a traced process cannot steer
    /// the type lookup to another file by a name it controls.
    pub object_file: Option<std::path::PathBuf>,
    /// A USDT probe's sites, for `args.NAME`.
    pub usdt_sites: Vec<UsdtSite>,
    /// The functions a uprobe attaches to, for `args`.
    pub functions: Vec<FunctionEntry>,
}

/// One function a uprobe attaches to, as far as its parameters go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionEntry {
    /// The object, as the user or the process names it.
    pub object: std::path::PathBuf,
    /// Where it is read (see [`TargetInfo::object_file`]).
    pub object_file: std::path::PathBuf,
    /// The symbol as matched, for messages.
    pub symbol: String,
    /// The link-time address of the function's first instruction.
    pub address: u64,
    /// How far into the function the probe is: 0 at its entry.
    pub offset: u64,
}

/// One USDT site, as far as typing its arguments goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtSite {
    /// The site's link-time address.
    pub address: u64,
    /// For each argument, its register's offset in `pt_regs` when it is
    /// in a register.
    pub registers: Vec<Option<i16>>,
}

/// A field of a tracepoint's record, as its tracefs `format` file
/// describes it: `sdt-trace` reads it, the checker types `args` by it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracepointField {
    pub name: String,
    /// The declaration without the name: `const char *`, `char[16]`,
    /// `__data_loc char[]`.
    pub c_type: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
}

/// A tracepoint's record, from its `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracepointFormat {
    /// `category:name`.
    pub name: String,
    pub fields: Vec<TracepointField>,
}

/// Checks `script`; `attach[i][j]` describes attach point `j` of probe
/// `i`, and `objects` answers what the probes' objects hold.
/// What a division or modulo by zero prints, in bpftrace's words; its
/// result is 1.
const ZERO_DIVISION: &str =
    "Divide or modulo by 0 detected. This can lead to unexpected results. 1 is being used as the result.";

/// What an update of a full map prints, in bpftrace's words (0.24 and
/// later); the update is dropped.
const MAP_FULL: &str = "Map full; can't update element. Try increasing max_map_keys config or manually setting the max entries in a map declaration e.g. `let @a = hash(5000)`";

pub fn check(
    script: &Script,
    attach: &[Vec<AttachInfo>],
    options: &CheckOptions,
    objects: &mut dyn Objects,
) -> Result<Program, Diagnostics> {
    if let Some(import) = script.imports.first() {
        return Err(Diagnostic::error(
            import.span,
            format!("import \"{}\": sdt does not import files", import.path),
        )
        .hint("sdt compiles one script with no C compiler: paste the file's macros, probes and C definitions into this one")
        .into());
    }
    let mut checker = Checker::new(script, options, objects)?;
    // Learn map types until nothing changes, then check for real.
    for _ in 0..64 {
        checker.final_pass = false;
        checker.learned = false;
        checker.run(script, attach);
        if !checker.learned {
            break;
        }
    }
    checker.final_pass = true;
    checker.errors.clear();
    let probes = checker.run(script, attach);
    let mut warnings = std::mem::take(&mut checker.warnings);
    warnings.extend(checker.apply_declarations(&script.map_declarations));
    if !checker.errors.is_empty() {
        return Err(Diagnostics(checker.errors));
    }
    let zero_division = checker.formats.len() as u32;
    checker.formats.push(
        crate::format::Format::parse(ZERO_DIVISION.as_bytes())
            .expect("the zero-division warning is a valid format"),
    );
    let map_full = checker.formats.len() as u32;
    checker.formats.push(
        crate::format::Format::parse(MAP_FULL.as_bytes())
            .expect("the full-map warning is a valid format"),
    );
    Ok(Program {
        warnings,
        zero_division,
        map_full,
        registry: checker.registry,
        maps: checker.maps,
        probes,
        formats: checker.formats,
        time_formats: checker.time_formats,
        join_separators: checker.join_separators,
        strlen: options.strlen,
        type_notes: checker.objects.notes(),
    })
}

/// What the checker would learn about each attach point if every one
/// matched (for checking without files: fuzzing, tests, `compile_offline` in
/// `sdt-script`).
pub fn offline_attach(
    script: &Script,
    params: &[String],
) -> Result<Vec<Vec<AttachInfo>>, Diagnostic> {
    let mut attach_info = Vec::new();
    for probe in &script.probes {
        let mut points = Vec::new();
        for raw in &probe.attach_points {
            let kind = crate::attach::parse(raw, params)?.kind();
            let tracepoint = (kind == ProbeKind::Tracepoint).then(|| TracepointFormat {
                name: "syscalls:sys_enter_openat".into(),
                fields: openat_fields(),
            });
            points.push(AttachInfo {
                kind,
                targets: vec![TargetInfo {
                    tracepoint,
                    object: None,
                    object_file: None,
                    usdt_sites: Vec::new(),
                    functions: Vec::new(),
                }],
            });
        }
        attach_info.push(points);
    }
    Ok(attach_info)
}

/// The fields of `syscalls:sys_enter_openat` on x86-64, as tracefs
/// describes them.
fn openat_fields() -> Vec<TracepointField> {
    [
        ("common_type", "unsigned short", 0, 2, false),
        ("common_flags", "unsigned char", 2, 1, false),
        ("common_preempt_count", "unsigned char", 3, 1, false),
        ("common_pid", "int", 4, 4, true),
        ("__syscall_nr", "int", 8, 4, true),
        ("dfd", "int", 16, 8, false),
        ("filename", "const char *", 24, 8, false),
        ("flags", "int", 32, 8, false),
        ("mode", "umode_t", 40, 8, false),
    ]
    .into_iter()
    .map(|(name, c_type, offset, size, signed)| TracepointField {
        name: name.into(),
        c_type: c_type.into(),
        offset,
        size,
        signed,
    })
    .collect()
}

/// A diagnostic was recorded; the construct is skipped.
pub(crate) struct Stop;

pub(crate) type R<T> = Result<T, Stop>;

pub(crate) struct Checker<'o> {
    options: &'o CheckOptions,
    objects: &'o mut dyn Objects,
    pub(crate) registry: TypeRegistry,
    /// `#define NAME VALUE` constants.
    defines: HashMap<String, Expr>,
    pub(crate) maps: Vec<MapDecl>,
    map_index: HashMap<String, MapId>,
    pub(crate) formats: Vec<crate::format::Format>,
    pub(crate) time_formats: Vec<String>,
    pub(crate) join_separators: Vec<String>,
    errors: Vec<Diagnostic>,
    /// Warnings of the last run (see [`Checker::warn`]).
    warnings: Vec<Diagnostic>,
    /// Whether this run reports errors (the last one).
    final_pass: bool,
    /// Whether this run learned something new about a map.
    learned: bool,
    /// What the probe instance being checked attaches to.
    current_target: TargetInfo,
    /// Whose memory an integer cast to a pointer points into, in the
    /// probe instance being checked (see [`default_space`]).
    default_space: Space,
    /// The current probe instance needs a program per site.
    per_site: bool,
    /// The current probe instance has `for` loops.
    loops: bool,
    /// The arguments the current probe instance reads, one bit each.
    args_read: u16,
    /// The probe instance being checked: block, attach point, target.
    current_instance: (usize, usize, usize),
    /// Where each variable of the current instance is first assigned.
    var_definitions: Vec<Span>,
    /// The type each variable has at the end of its probe, learned on
    /// the previous run, so that a read before a later assignment widens
    /// it (`$t = ("a", 1); print($t); $t = ("longer", 2);`) sees the
    /// layout the variable really has.
    var_types: HashMap<VarKey, Ty>,
    /// Variables that a probe block reads after the block that assigned
    /// them has ended, by probe block and name, with where the first such
    /// read is: bpftrace before 0.22 had one variable for the whole probe.
    probe_wide: HashMap<(usize, String), Span>,
}

/// A variable: its probe instance, its name, and where it is first
/// assigned.
type VarKey = ((usize, usize, usize), String, u32);

/// What is known inside one probe block instance.
///
/// A variable belongs to the block where it is first assigned or
/// declared with `let`, and is seen in that block and the blocks inside
/// it only, as in bpftrace 0.22 and later.
pub(crate) struct Scope {
    pub kind: ProbeKind,
    /// Every variable of the instance, by [`VarId`]: its name and type.
    pub vars: Vec<(String, Ty)>,
    /// The names seen in each open block, innermost last.
    pub blocks: Vec<Vec<(String, VarId)>>,
    /// Types given by `let $x: type`, which assignments convert to.
    pub declared: HashMap<VarId, Ty>,
    /// The tracepoint's record and its `__data_loc` fields.
    pub tracepoint: Option<(RecordId, HashMap<String, u32>)>,
    pub loops: u32,
    /// Names given to a block on purpose, with `let` or as a loop's
    /// variable: a read after that block is an error, never taken as
    /// before bpftrace 0.22.
    pub block_scoped: std::collections::HashSet<String>,
    /// Variables defined for the whole probe as bpftrace before 0.22
    /// did, which the probe's code first sets to zero.
    pub probe_wide: Vec<VarId>,
}

impl<'o> Checker<'o> {
    fn new(
        script: &Script,
        options: &'o CheckOptions,
        objects: &'o mut dyn Objects,
    ) -> Result<Checker<'o>, Diagnostics> {
        let mut registry = TypeRegistry::default();
        let mut errors = Vec::new();
        for definition in &script.definitions {
            if let Err(e) = crate::cdecl::define(&mut registry, &definition.text, definition.span) {
                errors.push(e);
            }
        }
        let mut defines = HashMap::new();
        for (span, text) in &script.directives {
            if let Some(rest) = text.strip_prefix("define") {
                match parse_define(rest, *span) {
                    Ok(Some((name, value))) => {
                        defines.insert(name, value);
                    }
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
            // `#include` lines name kernel or system headers that sdt
            // cannot read; scripts that need their types define them.
        }
        if !errors.is_empty() {
            return Err(Diagnostics(errors));
        }
        let checker = Checker {
            options,
            objects,
            registry,
            defines,
            maps: Vec::new(),
            map_index: HashMap::new(),
            formats: Vec::new(),
            time_formats: Vec::new(),
            join_separators: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            default_space: Space::User,
            final_pass: false,
            learned: false,
            current_target: TargetInfo::default(),
            per_site: false,
            loops: false,
            args_read: 0,
            current_instance: (0, 0, 0),
            var_definitions: Vec::new(),
            var_types: HashMap::new(),
            probe_wide: HashMap::new(),
        };
        Ok(checker)
    }

    /// Gives each declared map its kind and size; returns warnings.
    fn apply_declarations(&mut self, declarations: &[ast::MapDeclaration]) -> Vec<Diagnostic> {
        const KINDS: [(&str, bool, bool); 4] = [
            ("hash", false, false),
            ("lruhash", true, false),
            ("percpuhash", false, true),
            ("percpulruhash", true, true),
        ];
        let mut warnings = Vec::new();
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for d in declarations {
            if let Some(first) = seen.insert(&d.name, d.span) {
                self.error(
                    Diagnostic::error(d.span, format!("@{} is declared twice", d.name))
                        .related(first, "first declared here"),
                );
                continue;
            }
            let Some(&(_, lru, per_cpu)) = KINDS.iter().find(|(k, _, _)| *k == d.kind) else {
                let mut e =
                    Diagnostic::error(d.kind_span, format!("`{}` is not a kind of map", d.kind));
                e = match did_you_mean(&suggest(&d.kind, KINDS.iter().map(|(k, _, _)| *k))) {
                    Some(h) => e.hint(h),
                    None => e.hint("the kinds are hash, lruhash, percpuhash and percpulruhash"),
                };
                self.error(e);
                continue;
            };
            let entries = match u32::try_from(d.entries) {
                Ok(n) if n > 0 => n,
                _ => {
                    self.error(Diagnostic::error(
                        d.span,
                        format!("a map holds 1 to {} entries, not {}", u32::MAX, d.entries),
                    ));
                    continue;
                }
            };
            let Some(&id) = self.map_index.get(&d.name) else {
                // bpftrace's words, which wrappers may look for.
                warnings.push(
                    Diagnostic::warning(d.span, format!("Unused map: @{}", d.name))
                        .hint("it is declared, but no probe uses it"),
                );
                continue;
            };
            let decl = &self.maps[id];
            if per_cpu != decl.is_per_cpu() {
                let e = if per_cpu {
                    Diagnostic::error(
                        d.kind_span,
                        format!("@{} is a {}, which holds aggregations such as count(), but a probe assigns it plain values", d.name, d.kind),
                    )
                    .hint(format!("declare it {}", if lru { "lruhash" } else { "hash" }))
                } else {
                    Diagnostic::error(
                        d.kind_span,
                        format!(
                            "@{} holds {}, which keeps a value per CPU, but is declared {}",
                            d.name,
                            decl.value.display(&self.registry),
                            d.kind
                        ),
                    )
                    .hint(format!(
                        "declare it {}",
                        if lru { "percpulruhash" } else { "percpuhash" }
                    ))
                };
                self.error(e.related(decl.span, "assigned here"));
                continue;
            }
            self.maps[id].declared = Some(crate::hir::Declared {
                lru,
                per_cpu,
                entries,
            });
        }
        warnings
    }

    /// What an object could not answer, placed at `span`.
    pub(crate) fn refused(&mut self, span: Span, refusal: Refusal) -> Stop {
        let mut d = Diagnostic::error(span, refusal.message);
        if let Some(label) = refusal.label {
            d = d.label(label);
        }
        for hint in refusal.hints {
            d = d.hint(hint);
        }
        self.error(d)
    }

    /// A warning, said once however many instances check the place.
    pub(crate) fn warn(&mut self, d: Diagnostic) {
        let said = (self.warnings.iter()).any(|w| w.span == d.span && w.message == d.message);
        if self.final_pass && !said {
            self.warnings.push(d);
        }
    }

    pub(crate) fn error(&mut self, d: Diagnostic) -> Stop {
        if self.final_pass {
            self.errors.push(d);
        }
        Stop
    }

    fn run(&mut self, script: &Script, attach: &[Vec<AttachInfo>]) -> Vec<ProbeInstance> {
        self.formats.clear();
        self.time_formats.clear();
        self.join_separators.clear();
        let mut instances = Vec::new();
        for (block, probe) in script.probes.iter().enumerate() {
            let Some(points) = attach.get(block) else {
                continue;
            };
            for (attach_point, info) in points.iter().enumerate() {
                for (target, target_info) in info.targets.iter().enumerate() {
                    if let Some(instance) =
                        self.instance(probe, block, attach_point, target, info.kind, target_info)
                    {
                        instances.push(instance);
                    }
                }
            }
        }
        instances
    }

    fn instance(
        &mut self,
        probe: &ast::Probe,
        block: usize,
        attach_point: usize,
        target: usize,
        kind: ProbeKind,
        info: &TargetInfo,
    ) -> Option<ProbeInstance> {
        self.current_target = info.clone();
        self.default_space = default_space(kind, info);
        self.current_instance = (block, attach_point, target);
        self.var_definitions.clear();
        self.per_site = false;
        self.loops = false;
        self.args_read = 0;
        let tracepoint = info
            .tracepoint
            .as_ref()
            .and_then(|format| self.tracepoint_record(format, probe.span));
        let mut scope = Scope {
            kind,
            vars: Vec::new(),
            blocks: vec![Vec::new()],
            declared: HashMap::new(),
            tracepoint,
            loops: 0,
            block_scoped: Default::default(),
            probe_wide: Vec::new(),
        };
        let predicate = match &probe.predicate {
            Some(p) => {
                let e = self.expr(p, &mut scope).ok()?;
                Some(self.condition(e).ok()?)
            }
            None => None,
        };
        let mut body = self.block(&probe.body, &mut scope);
        // Zero where the block that assigns them does not run.
        body.splice(0..0, scope.probe_wide.iter().map(|&v| TStmt::ZeroVar(v)));
        Some(ProbeInstance {
            block,
            attach_point,
            target,
            kind,
            span: probe.attach_points[attach_point].span,
            // A variable declared with `let $x;` and never assigned is
            // an integer, 0.
            vars: scope
                .vars
                .into_iter()
                .map(|(_, t)| {
                    if t == Ty::Void {
                        crate::types::INT64
                    } else {
                        t
                    }
                })
                .collect(),
            predicate,
            body,
            per_site: self.per_site,
            loops: self.loops,
            args_read: self.args_read,
        })
    }

    /// Builds the record type of a tracepoint's format.
    fn tracepoint_record(
        &mut self,
        format: &TracepointFormat,
        span: Span,
    ) -> Option<(RecordId, HashMap<String, u32>)> {
        let mut fields = Vec::new();
        let mut data_locs = HashMap::new();
        let mut size = 0u64;
        for f in &format.fields {
            size = size.max(u64::from(f.offset) + u64::from(f.size));
            if f.c_type.contains("__data_loc") {
                data_locs.insert(f.name.clone(), f.offset);
                fields.push(Field {
                    name: f.name.clone(),
                    ty: Ty::int(4, false),
                    offset: u64::from(f.offset),
                    bitfield: None,
                });
                continue;
            }
            let ty = self.tracepoint_field_type(f, self.default_space);
            fields.push(Field {
                name: f.name.clone(),
                ty,
                offset: u64::from(f.offset),
                bitfield: None,
            });
        }
        if fields.is_empty() {
            self.error(Diagnostic::error(
                span,
                format!("tracepoint {} has no fields", format.name),
            ));
        }
        let id = self.registry.add_record(Record {
            name: format!("tracepoint {}", format.name),
            is_union: false,
            size,
            align: 8,
            fields,
            incomplete: false,
        });
        Some((id, data_locs))
    }

    /// The statements of a block, in a scope of their own.
    fn block(&mut self, stmts: &[Stmt], scope: &mut Scope) -> Vec<TStmt> {
        scope.blocks.push(Vec::new());
        let out = self.statements(stmts, scope);
        scope.blocks.pop();
        out
    }

    fn statements(&mut self, stmts: &[Stmt], scope: &mut Scope) -> Vec<TStmt> {
        let mut out = Vec::new();
        for (i, stmt) in stmts.iter().enumerate() {
            if let Ok(s) = self.stmt(stmt, scope) {
                if let (Some(s), Some(next)) = (&s, stmts.get(i + 1)) {
                    if leaves(s) {
                        // bpftrace's words (0.25 and later).
                        self.warn(
                            Diagnostic::warning(next.span, "Unreachable statement.")
                                .label("the statement before never lets the code come here"),
                        );
                    }
                }
                out.extend(s);
            }
        }
        out
    }

    fn stmt(&mut self, stmt: &Stmt, scope: &mut Scope) -> R<Option<TStmt>> {
        Ok(Some(match &stmt.kind {
            StmtKind::Expr(e) => return self.expr_stmt(e, scope),
            StmtKind::AssignVar {
                name,
                name_span,
                op,
                value,
            } => {
                let value = match op {
                    None => self.expr(value, scope)?,
                    Some(op) => {
                        let current = Expr {
                            kind: ExprKind::Var(name.clone()),
                            span: *name_span,
                        };
                        self.binary(*op, &current, value, stmt.span, scope)?
                    }
                };
                return self.assign_var(name, *name_span, value, scope).map(Some);
            }
            StmtKind::Let {
                name,
                name_span,
                ty,
                value,
            } => return self.let_stmt(name, *name_span, ty.as_ref(), value.as_ref(), scope),
            StmtKind::AssignMap { map, op, value } => {
                return self.assign_map(map, *op, value, stmt.span, scope).map(Some)
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                let cond = self.expr(cond, scope)?;
                let cond = self.condition(cond)?;
                let then = self.block(then, scope);
                let otherwise = otherwise
                    .as_ref()
                    .map(|b| self.block(b, scope))
                    .unwrap_or_default();
                TStmt::If {
                    cond,
                    then,
                    otherwise,
                }
            }
            StmtKind::Unroll { count, body } => {
                let n = self.expr(count, scope)?;
                // bpftrace's words, which its users and tests know.
                let TKind::Int(n_value) = n.kind else {
                    return Err(self.error(
                        Diagnostic::error(count.span, "invalid unroll value")
                            .label("the count must be a constant")
                            .hint("write unroll (5) { ... }"),
                    ));
                };
                if !(1..=100).contains(&n_value) {
                    let limit = if n_value < 1 {
                        "unroll minimum value is 1"
                    } else {
                        "unroll maximum value is 100"
                    };
                    return Err(self.error(
                        Diagnostic::error(count.span, limit)
                            .label(format!("{n_value} times"))
                            .hint("for more repetitions, use while or for ($i : 0..N)"),
                    ));
                }
                let body = self.block(body, scope);
                TStmt::Unroll {
                    count: n_value as u32,
                    body,
                }
            }
            StmtKind::While { cond, body } => {
                let cond = self.expr(cond, scope)?;
                let cond = self.condition(cond)?;
                scope.loops += 1;
                let body = self.block(body, scope);
                scope.loops -= 1;
                TStmt::While {
                    cond,
                    body,
                    span: stmt.span,
                }
            }
            StmtKind::For {
                var,
                var_span,
                iter,
                body,
            } => {
                return self
                    .for_stmt(var, *var_span, iter, body, stmt.span, scope)
                    .map(Some)
            }
            StmtKind::Break | StmtKind::Continue if scope.loops == 0 => {
                return Err(self.error(Diagnostic::error(
                    stmt.span,
                    "`break` and `continue` belong inside a loop",
                )))
            }
            StmtKind::Break => TStmt::Break,
            StmtKind::Continue => TStmt::Continue,
            StmtKind::Return => TStmt::Return,
        }))
    }

    /// `$name = value`, where `value` is checked.
    fn assign_var(
        &mut self,
        name: &str,
        name_span: Span,
        value: TExpr,
        scope: &mut Scope,
    ) -> R<TStmt> {
        let mut value = self.value(value)?;
        self.not_void(&value)?;
        if let Ty::Agg(agg) = value.ty {
            return Err(self.error(
                Diagnostic::error(
                    value.span,
                    format!("{}() can only be assigned to a map", agg.name()),
                )
                .hint(format!("write @{name} = {}(...)", agg.name())),
            ));
        }
        if let Some(var) = scope.lookup(name) {
            if let Ty::Record(holds) = scope.vars[var].1 {
                value = self.record_in_order(value, holds, scope)?;
            }
            if let Some(declared) = scope.declared.get(&var).cloned() {
                if declared.is_integer() && value.ty.is_integer() {
                    let span = value.span;
                    if let TKind::Int(v) = value.kind {
                        if declared.truncate(v) != v || (v < 0 && !declared.is_signed()) {
                            return Err(self.error(
                                Diagnostic::error(
                                    span,
                                    format!(
                                        "{v} does not fit in ${name}'s type, {}",
                                        declared.display(&self.registry)
                                    ),
                                )
                                .hint("cast it if the cut is meant: (type)value"),
                            ));
                        }
                    }
                    value = self.cast(value, declared, span)?;
                }
            }
        }
        let var = self.define_var(scope, name, value.ty.clone(), name_span)?;
        Ok(TStmt::AssignVar { var, value })
    }

    /// A record literal for a variable that holds records of the same
    /// names in another order (`$a = (x=1, y=2); $a = (y=3, x=4)`): laid
    /// out in the variable's order, its values evaluated in the order
    /// written, as bpftrace 0.25 does. Anything else is left as it is.
    fn record_in_order(&mut self, value: TExpr, holds: RecordId, scope: &mut Scope) -> R<TExpr> {
        let Ty::Record(made) = value.ty else {
            return Ok(value);
        };
        let TKind::Retype(tuple) = &value.kind else {
            return Ok(value);
        };
        let TKind::Tuple(items) = &tuple.kind else {
            return Ok(value);
        };
        if made == holds {
            return Ok(value);
        }
        let names = |id: RecordId, registry: &TypeRegistry| -> Vec<(String, Ty)> {
            (registry.record(id).fields.iter())
                .map(|f| (f.name.clone(), f.ty.clone()))
                .collect()
        };
        let (wanted, written) = (names(holds, &self.registry), names(made, &self.registry));
        let mut sorted = (wanted.clone(), written.clone());
        sorted.0.sort_by(|a, b| a.0.cmp(&b.0));
        sorted.1.sort_by(|a, b| a.0.cmp(&b.0));
        if sorted.0 != sorted.1 {
            return Ok(value);
        }
        // Each value into a variable of its own, in the order written,
        // then the record from those, in the variable's order.
        let span = value.span;
        let mut stmts = Vec::new();
        let mut temps = HashMap::new();
        for ((name, _), item) in written.iter().zip(items) {
            let temp = format!("\0record{}.{name}", span.start);
            let var = self.define_var(scope, &temp, item.ty.clone(), span)?;
            stmts.push(TStmt::AssignVar {
                var,
                value: item.clone(),
            });
            temps.insert(name.clone(), (var, item.ty.clone()));
        }
        let parts = (wanted.iter())
            .map(|(name, _)| {
                let (var, ty) = temps[name].clone();
                TExpr {
                    kind: TKind::Var(var),
                    ty: widen(&ty),
                    span,
                }
            })
            .collect::<Vec<_>>();
        let tuple = TExpr {
            ty: Ty::Tuple(parts.iter().map(|p| p.ty.clone()).collect()),
            kind: TKind::Tuple(parts),
            span,
        };
        Ok(TExpr {
            kind: TKind::Block {
                stmts,
                value: Box::new(TExpr {
                    kind: TKind::Retype(Box::new(tuple)),
                    ty: Ty::Record(holds),
                    span,
                }),
            },
            ty: Ty::Record(holds),
            span,
        })
    }

    /// `let $name [: type] [= value];`: a new variable of this block.
    fn let_stmt(
        &mut self,
        name: &str,
        name_span: Span,
        ty: Option<&ast::TypeName>,
        value: Option<&Expr>,
        scope: &mut Scope,
    ) -> R<Option<TStmt>> {
        if let Some(var) = scope.lookup(name) {
            let first = scope
                .blocks
                .iter()
                .flatten()
                .find(|(_, id)| *id == var)
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            return Err(self.error(
                Diagnostic::error(name_span, format!("${first} is already declared"))
                    .hint("a variable is declared once in a block and the blocks inside it; assign it without `let`"),
            ));
        }
        scope.block_scoped.insert(name.to_string());
        let declared = match ty {
            Some(t) => Some(self.type_in_scope(t, scope)?),
            None => None,
        };
        let var = scope.vars.len();
        scope
            .vars
            .push((name.to_string(), declared.clone().unwrap_or(Ty::Void)));
        self.var_definitions.push(name_span);
        if let Some(blocks) = scope.blocks.last_mut() {
            blocks.push((name.to_string(), var));
        }
        if let Some(t) = declared {
            scope.declared.insert(var, t);
        }
        match value {
            Some(v) => {
                let v = self.expr(v, scope)?;
                self.assign_var(name, name_span, v, scope).map(Some)
            }
            None => Ok(Some(TStmt::ZeroVar(var))),
        }
    }

    /// `for ($v : @map) { ... }` or `for ($i : start..end) { ... }`.
    fn for_stmt(
        &mut self,
        var: &str,
        var_span: Span,
        iter: &ast::ForIter,
        body: &[Stmt],
        span: Span,
        scope: &mut Scope,
    ) -> R<TStmt> {
        let (head, var_ty) = match iter {
            ast::ForIter::Range { start, end } => {
                let bound = |e: &Expr, this: &mut Self, scope: &mut Scope| -> R<TExpr> {
                    let v = this.expr(e, scope)?;
                    let v = this.value(v)?;
                    if !v.ty.is_integer() {
                        return Err(this.error(Diagnostic::error(
                            e.span,
                            format!(
                                "a range's ends must be integers, not {}",
                                v.ty.display(&this.registry)
                            ),
                        )));
                    }
                    Ok(v)
                };
                let start = bound(start, self, scope)?;
                let end = bound(end, self, scope)?;
                let ty = Ty::arithmetic(&start.ty, &end.ty);
                (ForHead::Range { start, end }, ty)
            }
            ast::ForIter::Map { name, span } => {
                let map = self.known_map(name, *span)?;
                let decl = self.maps[map].clone();
                let key = match decl.keys.as_slice() {
                    [] => {
                        return Err(self.error(
                            Diagnostic::error(*span, format!("@{name} has no keys to walk"))
                                .hint("a for loop walks a map with keys: @m[k] = v"),
                        ))
                    }
                    [one] => one.clone(),
                    many => Ty::Tuple(many.to_vec()),
                };
                let value = match &decl.value {
                    Ty::Agg(agg) => match agg.read_type() {
                        Some(t) => t,
                        None => {
                            return Err(self.error(Diagnostic::error(
                                *span,
                                format!(
                                    "@{name} holds {}(), whose entries cannot be read in a probe",
                                    agg.name()
                                ),
                            )))
                        }
                    },
                    other => other.clone(),
                };
                (ForHead::Map(map), Ty::Tuple(vec![key, value]))
            }
        };
        self.loops = true;
        scope.blocks.push(Vec::new());
        scope.block_scoped.insert(var.to_string());
        let id = self.define_var(scope, var, var_ty, var_span)?;
        scope.loops += 1;
        let body = self.statements(body, scope);
        scope.loops -= 1;
        scope.blocks.pop();
        Ok(match head {
            ForHead::Range { start, end } => TStmt::ForRange {
                var: id,
                start,
                end,
                body,
                span,
            },
            ForHead::Map(map) => TStmt::ForMap {
                var: id,
                map,
                body,
                span,
            },
        })
    }

    fn expr_stmt(&mut self, e: &Expr, scope: &mut Scope) -> R<Option<TStmt>> {
        // `c ? printf("a") : printf("b")`: a ternary whose value is not
        // used chooses between statements, as `if` does.
        if let ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } = &e.kind
        {
            let cond = self.expr(cond, scope)?;
            let cond = self.condition(cond)?;
            let then = self.expr_stmt(then, scope)?;
            let otherwise = self.expr_stmt(otherwise, scope)?;
            return Ok(Some(TStmt::If {
                cond,
                then: then.into_iter().collect(),
                otherwise: otherwise.into_iter().collect(),
            }));
        }
        if let ExprKind::Block { stmts, value } = &e.kind {
            scope.blocks.push(Vec::new());
            let mut body = self.statements(stmts, scope);
            if let Some(value) = value {
                if let Ok(Some(s)) = self.expr_stmt(value, scope) {
                    body.push(s);
                }
            }
            scope.blocks.pop();
            return Ok(Some(TStmt::Block(body)));
        }
        if let ExprKind::Call { name, args, .. } = &e.kind {
            if let Some(builtin) = builtins::find(name, self.options.internal) {
                let use_ = builtins::Use {
                    name,
                    args,
                    span: e.span,
                };
                match builtin.role {
                    builtins::Role::Statement => {
                        return match self.builtin(builtin, &use_, true, scope)? {
                            builtins::Checked::Statement(stmt) => Ok(Some(stmt)),
                            _ => Err(Stop),
                        };
                    }
                    builtins::Role::Aggregation => {
                        return Err(self.error(
                            Diagnostic::error(
                                e.span,
                                format!("{name}() must be assigned to a map"),
                            )
                            .hint(format!("write @name = {name}(...)")),
                        ))
                    }
                    builtins::Role::Value => {}
                }
            }
        }
        let value = self.expr(e, scope)?;
        if let Ty::Agg(agg) = value.ty {
            return Err(self.error(
                Diagnostic::error(
                    e.span,
                    format!("the result of {}() is not used", agg.name()),
                )
                .hint(format!("assign it to a map: @name = {}(...)", agg.name())),
            ));
        }
        Ok(Some(TStmt::Expr(value)))
    }

    fn assign_map(
        &mut self,
        map: &ast::MapRef,
        op: Option<BinOp>,
        value: &Expr,
        span: Span,
        scope: &mut Scope,
    ) -> R<TStmt> {
        let keys = self.map_keys(map, scope)?;
        if op.is_none() {
            let aggregation = match &value.kind {
                ExprKind::Call { name, args, .. } => builtins::find(name, self.options.internal)
                    .filter(|b| b.role == builtins::Role::Aggregation)
                    .map(|b| (b, name, args)),
                _ => None,
            };
            if let Some((builtin, name, args)) = aggregation {
                let use_ = builtins::Use {
                    name,
                    args,
                    span: value.span,
                };
                if let builtins::Checked::Aggregation(agg, arg) =
                    self.builtin(builtin, &use_, true, scope)?
                {
                    let id = self.learn_map(map, &keys, Ty::Agg(agg), value.span)?;
                    return Ok(TStmt::Aggregate {
                        map: id,
                        keys,
                        agg,
                        value: arg,
                        span,
                    });
                }
            }
        }
        let value = match op {
            None => self.expr(value, scope)?,
            Some(op) => {
                // A map only ever updated (`@n += x`) starts at 0, as in
                // bpftrace: the update is its assignment.
                if !self.map_index.contains_key(&map.name) {
                    self.learn_map(map, &keys, crate::types::INT64, span)?;
                }
                let current = Expr {
                    kind: ExprKind::Map(map.clone()),
                    span: map.span,
                };
                self.binary(op, &current, value, span, scope)?
            }
        };
        let value = self.value(value)?;
        self.not_void(&value)?;
        let id = self.learn_map(map, &keys, value.ty.clone(), value.span)?;
        Ok(TStmt::AssignMap {
            map: id,
            keys,
            value,
            span,
        })
    }

    /// Checks a map's key expressions, as values.
    pub(crate) fn map_keys(&mut self, map: &ast::MapRef, scope: &mut Scope) -> R<Vec<TExpr>> {
        let mut keys = Vec::new();
        for k in &map.keys {
            let key = self.expr(k, scope)?;
            let key = self.value(key)?;
            self.not_void(&key)?;
            if let Ty::Agg(_) = key.ty {
                return Err(self.error(Diagnostic::error(
                    k.span,
                    "an aggregation cannot be a map key",
                )));
            }
            keys.push(key);
        }
        Ok(spread_tuple_key(keys))
    }

    /// Records that `map` holds `value` under `keys`, unifying with what
    /// is known; returns its id.
    pub(crate) fn learn_map(
        &mut self,
        map: &ast::MapRef,
        keys: &[TExpr],
        value: Ty,
        span: Span,
    ) -> R<MapId> {
        let key_types: Vec<Ty> = keys.iter().map(|k| widen(&k.ty)).collect();
        let value = widen(&value);
        let Some(&id) = self.map_index.get(&map.name) else {
            self.maps.push(MapDecl {
                name: map.name.clone(),
                keys: key_types,
                value,
                span,
                declared: None,
            });
            self.map_index.insert(map.name.clone(), self.maps.len() - 1);
            self.learned = true;
            return Ok(self.maps.len() - 1);
        };
        let decl = self.maps[id].clone();
        if decl.keys.len() != key_types.len() {
            return Err(self.error(
                Diagnostic::error(
                    map.span,
                    format!(
                        "@{} is used with {} key{} here but with {} elsewhere",
                        map.name,
                        key_types.len(),
                        plural(key_types.len()),
                        decl.keys.len()
                    ),
                )
                .related(decl.span, "first used here"),
            ));
        }
        let mut new_keys = Vec::new();
        for (i, (old, new)) in decl.keys.iter().zip(&key_types).enumerate() {
            match unify(old, new) {
                Some(t) => new_keys.push(t),
                None => {
                    return Err(self.error(
                        Diagnostic::error(
                            keys[i].span,
                            format!(
                                "key {} of @{} is {} here but {} elsewhere",
                                i + 1,
                                map.name,
                                new.display(&self.registry),
                                old.display(&self.registry)
                            ),
                        )
                        .related(decl.span, "first used here"),
                    ))
                }
            }
        }
        let Some(new_value) = unify(&decl.value, &value) else {
            if let (Ty::Agg(Agg::TSeries { .. }), Ty::Agg(Agg::TSeries { .. })) =
                (&decl.value, &value)
            {
                return Err(self.error(
                    Diagnostic::error(span, "Different tseries bounds in a single map unsupported")
                        .related(decl.span, "first assigned here")
                        .hint("give each interval and count a map of its own"),
                ));
            }
            return Err(self.error(
                Diagnostic::error(
                    span,
                    format!(
                        "@{} holds {} here but {} elsewhere",
                        map.name,
                        value.display(&self.registry),
                        decl.value.display(&self.registry)
                    ),
                )
                .related(decl.span, "first assigned here")
                .hint("a map holds one type of value; use another map for this one"),
            ));
        };
        if new_keys != decl.keys || new_value != decl.value {
            self.learned = true;
            let m = &mut self.maps[id];
            m.keys = new_keys;
            m.value = new_value;
        }
        Ok(id)
    }

    /// The map `name`, which must be assigned somewhere in the script.
    pub(crate) fn known_map(&mut self, name: &str, span: Span) -> R<MapId> {
        if let Some(&id) = self.map_index.get(name) {
            return Ok(id);
        }
        let names: Vec<String> = self.map_index.keys().map(|n| format!("@{n}")).collect();
        let mut d = Diagnostic::error(span, format!("@{name} is never assigned"))
            .label("used here")
            .hint("a map must be assigned in some probe before it can be read or printed");
        if let Some(h) = did_you_mean(&suggest(
            &format!("@{name}"),
            names.iter().map(String::as_str),
        )) {
            d = d.hint(h);
        }
        Err(self.error(d))
    }

    /// The variable `name` seen here, now holding `ty`: a new one of the
    /// innermost block if none is seen.
    pub(crate) fn define_var(
        &mut self,
        scope: &mut Scope,
        name: &str,
        ty: Ty,
        span: Span,
    ) -> R<VarId> {
        let ty = widen(&ty);
        if let Some(i) = scope.lookup(name) {
            let old = scope.vars[i].1.clone();
            if old == Ty::Void {
                // `let $x;` then its first assignment.
                let ty = match self.var_definitions.get(i) {
                    Some(&definition) => self.learned_var_type(name, definition, &ty),
                    None => None,
                }
                .unwrap_or(ty);
                self.remember_var_type(i, name, &ty);
                scope.vars[i].1 = ty;
                return Ok(i);
            }
            if scope.declared.contains_key(&i) && old.is_integer() && ty.is_integer() {
                return Ok(i);
            }
            return match unify(&old, &ty) {
                Some(t) => {
                    self.remember_var_type(i, name, &t);
                    scope.vars[i].1 = t;
                    Ok(i)
                }
                None => Err(self.error(Diagnostic::error(
                    span,
                    format!(
                        "${name} holds {} but is assigned {} here",
                        old.display(&self.registry),
                        ty.display(&self.registry)
                    ),
                ))),
            };
        }
        // What later assignments widen it to, as the previous run found.
        let ty = self.learned_var_type(name, span, &ty).unwrap_or(ty);
        let id = scope.vars.len();
        scope.vars.push((name.to_string(), ty.clone()));
        self.var_definitions.push(span);
        self.remember_var_type(id, name, &ty);
        let probe_wide = self.probe_wide_read(name, span, scope);
        let block = if probe_wide {
            scope.probe_wide.push(id);
            scope.blocks.first_mut()
        } else {
            scope.blocks.last_mut()
        };
        if let Some(block) = block {
            block.push((name.to_string(), id));
        }
        Ok(id)
    }

    /// Whether the variable `name`, first assigned at `assigned`, is read
    /// after its block has ended, and so is one for the whole probe as
    /// before bpftrace 0.22; says so once.
    fn probe_wide_read(&mut self, name: &str, assigned: Span, scope: &Scope) -> bool {
        if scope.block_scoped.contains(name) {
            return false;
        }
        let key = (self.current_instance.0, name.to_string());
        let Some(&read) = self.probe_wide.get(&key) else {
            return false;
        };
        self.warn(
            Diagnostic::warning(
                read,
                format!(
                    "${name} is read after the block that assigns it: bpftrace 0.22 and later scope a variable to its block and refuse this; sdt takes it as earlier bpftrace did, as one variable for the whole probe, 0 until assigned"
                ),
            )
            .related(assigned, "first assigned here, inside a block")
            .hint(format!(
                "declare it before the block with `let ${name};` to write it for bpftrace 0.22 and later"
            )),
        );
        true
    }

    /// A read of `name` that no open block has, where an ended block
    /// assigned it: the variable is one for the whole probe, as before
    /// bpftrace 0.22, from the next run on. Whether that is so.
    pub(crate) fn read_after_block(&mut self, name: &str, span: Span, scope: &Scope) -> bool {
        if scope.block_scoped.contains(name) || !scope.ended(name) {
            return false;
        }
        let key = (self.current_instance.0, name.to_string());
        if let std::collections::hash_map::Entry::Vacant(entry) = self.probe_wide.entry(key) {
            entry.insert(span);
            self.learned = true;
        }
        true
    }

    fn var_key(&self, name: &str, definition: Span) -> VarKey {
        (self.current_instance, name.to_string(), definition.start)
    }

    fn learned_var_type(&self, name: &str, definition: Span, ty: &Ty) -> Option<Ty> {
        let learned = self.var_types.get(&self.var_key(name, definition))?;
        unify(learned, ty)
    }

    /// Notes that variable `var` holds `ty`; a type not seen before means
    /// another run.
    fn remember_var_type(&mut self, var: VarId, name: &str, ty: &Ty) {
        let Some(&definition) = self.var_definitions.get(var) else {
            return;
        };
        let key = self.var_key(name, definition);
        if self.var_types.get(&key) != Some(ty) {
            self.var_types.insert(key, ty.clone());
            self.learned = true;
        }
    }

    fn positional(&self, n: u32) -> Option<&str> {
        (n as usize)
            .checked_sub(1)
            .and_then(|i| self.options.params.get(i))
            .map(String::as_str)
    }
}

/// What a checked `for` loop walks.
enum ForHead {
    Range { start: TExpr, end: TExpr },
    Map(MapId),
}

impl Scope {
    /// The variable `name` as seen from the innermost block.
    pub(crate) fn lookup(&self, name: &str) -> Option<VarId> {
        self.blocks
            .iter()
            .rev()
            .flat_map(|b| b.iter().rev())
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }

    /// The names seen here, for suggestions.
    pub(crate) fn visible_names(&self) -> Vec<String> {
        self.blocks
            .iter()
            .flatten()
            .map(|(n, _)| format!("${n}"))
            .collect()
    }

    /// Whether `name` is a variable of a block that has ended, to explain
    /// why it is not seen.
    pub(crate) fn ended(&self, name: &str) -> bool {
        self.vars.iter().any(|(n, _)| n == name)
    }
}

/// Whether a statement never lets control go on to the next one:
/// `return`, `break`, `continue`, `exit()`, or an `if` both of whose arms
/// are such.
fn leaves(stmt: &TStmt) -> bool {
    let ends = |stmts: &[TStmt]| stmts.iter().any(leaves);
    match stmt {
        TStmt::Return | TStmt::Break | TStmt::Continue => true,
        TStmt::Output(crate::hir::Output::Exit(_)) => true,
        TStmt::If {
            then, otherwise, ..
        } => ends(then) && ends(otherwise),
        TStmt::Block(body) => ends(body),
        _ => false,
    }
}

/// Keys as bpftrace 0.22 and later take them: several keys are one tuple,
/// so a key that is a tuple (`@m[(1, "a")]`, `@m[$t]`) is the same as its
/// items (`@m[1, "a"]`), and the map is written and printed as one with
/// several keys. A tuple that is not written out is read item by item.
fn spread_tuple_key(keys: Vec<TExpr>) -> Vec<TExpr> {
    let items = match keys.as_slice() {
        [TExpr {
            ty: Ty::Tuple(items),
            ..
        }] if items.len() > 1 => items.clone(),
        _ => return keys,
    };
    let Some(key) = keys.into_iter().next() else {
        return Vec::new();
    };
    match key.kind {
        TKind::Tuple(parts) => parts,
        _ => (items.iter().enumerate())
            .map(|(index, ty)| TExpr {
                kind: TKind::TupleIndex {
                    tuple: Box::new(key.clone()),
                    index,
                },
                ty: ty.clone(),
                span: key.span,
            })
            .collect(),
    }
}

/// The type a value has once stored in a variable or a map: integers of
/// any width become 64-bit, as in registers. A tuple keeps its items'
/// types, which its layout in bpftrace (`sizeof`) depends on; each item
/// takes 8 bytes anyway (see [`Ty::value_size`]).
pub(crate) fn widen(ty: &Ty) -> Ty {
    match ty {
        Ty::Int { signed, .. } => Ty::Int {
            bytes: 8,
            signed: *signed,
        },
        other => other.clone(),
    }
}

/// `ty` as it is laid out in memory: integers 64 bits wide, also inside
/// tuples, whose items keep their widths for `sizeof` only.
pub(crate) fn stored(ty: &Ty) -> Ty {
    match ty {
        Ty::Tuple(items) => Ty::Tuple(items.iter().map(stored).collect()),
        other => widen(other),
    }
}

/// The type that holds values of both `a` and `b`, if there is one.
pub(crate) fn unify(a: &Ty, b: &Ty) -> Option<Ty> {
    Some(match (a, b) {
        _ if a == b => a.clone(),
        (Ty::Int { signed: s1, .. }, Ty::Int { signed: s2, .. }) => Ty::Int {
            bytes: 8,
            signed: *s1 || *s2,
        },
        (Ty::Int { signed, .. }, Ty::Enum { .. }) | (Ty::Enum { .. }, Ty::Int { signed, .. }) => {
            Ty::Int {
                bytes: 8,
                signed: *signed,
            }
        }
        (Ty::Ptr(..), Ty::Int { .. }) | (Ty::Int { .. }, Ty::Ptr(..)) => a.clone(),
        (Ty::Ptr(..), Ty::Ptr(..)) => a.clone(),
        (Ty::Str { size: x }, Ty::Str { size: y }) => Ty::Str { size: *x.max(y) },
        (Ty::Buf { size: x }, Ty::Buf { size: y }) => Ty::Buf { size: *x.max(y) },
        (Ty::Tuple(xs), Ty::Tuple(ys)) if xs.len() == ys.len() => Ty::Tuple(
            xs.iter()
                .zip(ys)
                .map(|(x, y)| unify(x, y))
                .collect::<Option<Vec<_>>>()?,
        ),
        _ => return None,
    })
}

/// Whether a place is (inside) a tracepoint's record.
pub(crate) fn expr_is_ctx(e: &TExpr) -> bool {
    match &e.kind {
        TKind::CtxRecord => true,
        TKind::Field { base, .. } | TKind::Index { base, .. } => expr_is_ctx(base),
        _ => false,
    }
}

/// Whether a place is (inside) a value the program holds (a variable, a
/// map value, a copy), not memory of the traced process.
pub(crate) fn in_program_memory(e: &TExpr) -> bool {
    match &e.kind {
        TKind::Field { base, .. } | TKind::Index { base, .. } => {
            !base.is_place() || in_program_memory(base)
        }
        _ => false,
    }
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Whose memory an integer cast to a pointer points into in a probe of
/// `kind` (as bpftrace decides it): the traced process's in its probes
/// and in the system-call tracepoints, whose pointers are what the
/// process passed; the kernel's in other tracepoints and in probes that
/// sample the CPU (`profile`, `software`, `hardware`), and wherever no
/// process is traced (`BEGIN`, `END`, `interval`). A pointer keeps its
/// own space through casts; `uptr()` and `kptr()` set it.
fn default_space(kind: ProbeKind, info: &TargetInfo) -> Space {
    match kind {
        k if k.is_uprobe() => Space::User,
        ProbeKind::Tracepoint => match &info.tracepoint {
            Some(tp) if tp.name.starts_with("syscalls:") => Space::User,
            _ => Space::Kernel,
        },
        _ => Space::Kernel,
    }
}

impl Checker<'_> {
    /// The type of a tracepoint field, from its declaration and the size
    /// and sign the format states (which are what the kernel wrote); a
    /// struct, union, enum or typedef it names comes from the script, or
    /// else from the kernel's BTF. Its pointers point into `space`.
    fn tracepoint_field_type(&mut self, f: &TracepointField, space: Space) -> Ty {
        let decl = f.c_type.trim();
        let int = Ty::Int {
            bytes: u8::try_from(f.size)
                .ok()
                .filter(|s| [1, 2, 4, 8].contains(s))
                .unwrap_or(8),
            signed: f.signed,
        };
        if let Some(open) = decl.rfind('[') {
            let len: u64 = decl[open + 1..]
                .trim_end_matches(']')
                .trim()
                .parse()
                .unwrap_or(0);
            let base = decl[..open].trim();
            let elem = if base.ends_with('*') {
                Ty::Ptr(Box::new(Ty::int(1, true)), space)
            } else {
                let words: Vec<&str> = base.split_whitespace().collect();
                let named = crate::cdecl::base_type(&self.registry, &words.join(" "));
                match named {
                    Some(t @ Ty::Int { .. }) => t,
                    _ if len > 0 => Ty::Int {
                        bytes: u8::try_from(u64::from(f.size) / len)
                            .ok()
                            .filter(|s| [1, 2, 4, 8].contains(s))
                            .unwrap_or(1),
                        signed: f.signed,
                    },
                    _ => Ty::int(1, true),
                }
            };
            return Ty::Array {
                elem: Box::new(elem),
                len,
            };
        }
        if decl.ends_with('*') {
            // `const char *const *argv`: every `*` is a level of pointer.
            let spaced = decl.replace('*', " * ");
            let words: Vec<&str> = spaced
                .split_whitespace()
                .filter(|w| !matches!(*w, "const" | "volatile" | "__user"))
                .collect();
            let depth = words.iter().filter(|w| **w == "*").count();
            let base = words
                .into_iter()
                .filter(|w| *w != "*")
                .collect::<Vec<_>>()
                .join(" ");
            let mut ty = crate::cdecl::base_type(&self.registry, &base)
                .or_else(|| self.kernel_type(&base))
                .unwrap_or(Ty::int(1, true));
            for _ in 0..depth {
                ty = Ty::Ptr(Box::new(ty), space);
            }
            return ty;
        }
        int
    }

    /// The type `name` from the kernel's BTF, if the kernel has one.
    pub(crate) fn kernel_type(&mut self, name: &str) -> Option<Ty> {
        self.objects
            .kernel_type(name, &mut self.registry)
            .ok()
            .flatten()
    }

    /// Reads the members of a kernel struct that was only named so far
    /// (reached through a pointer), before a member is looked up.
    pub(crate) fn complete(&mut self, ty: &Ty, span: Span) -> R<()> {
        if let Ty::Record(id) = ty {
            if let Err(refusal) = self.objects.complete_record(*id, &mut self.registry) {
                return Err(self.refused(span, refusal));
            }
        }
        Ok(())
    }
}

/// `#define NAME VALUE` with an integer or string value; other macros are
/// left alone (`None`).
fn parse_define(rest: &str, span: Span) -> Result<Option<(String, Expr)>, Diagnostic> {
    let rest = rest.trim();
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() || rest[name.len()..].starts_with('(') {
        return Ok(None);
    }
    let value = rest[name.len()..].trim();
    if value.is_empty() {
        return Ok(None);
    }
    let parsed = crate::parser::parse(&format!("BEGIN {{ {value}; }}"));
    let Ok(script) = parsed else {
        return Ok(None);
    };
    match script.probes.first().and_then(|p| p.body.first()) {
        Some(Stmt {
            kind: StmtKind::Expr(e),
            ..
        }) if matches!(e.kind, ExprKind::Int(_) | ExprKind::Str(_)) => Ok(Some((
            name,
            Expr {
                kind: e.kind.clone(),
                span,
            },
        ))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests;
