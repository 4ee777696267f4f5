//! Every builtin of the language, in one table.
//!
//! A builtin is a variable (`pid`), a function (`str(p)`), or both
//! (`ustack`, `ustack(5)`). Its [`Builtin`] entry holds everything about
//! it: its name, how many arguments it takes, whether it computes a value,
//! is a statement or is an aggregation, and the function that checks its
//! arguments and gives its typed HIR. That HIR says how it is lowered, as
//! data the code generator reads without knowing the builtin: most
//! variables are a kernel helper's result narrowed ([`HelperValue`]) or a
//! value fixed when the programs are generated ([`Param`]). How a value
//! prints follows from its type ([`Ty`]). So a new builtin of these kinds
//! is one entry here and its tests; one that needs a new shape of code
//! (a read of traced memory, a record to user space) also adds that shape
//! to the HIR and the code generator.
//!
//! Numbered families (`arg0`..`arg11`, `sarg0`..) are not entries: the
//! checker reads them by their prefix.

use super::{Checker, Scope, Stop, R};
use crate::ast::{Expr, ExprKind};
use crate::diag::{did_you_mean, suggest, Diagnostic, Span};
use crate::hir::{HelperValue, Output, Param, ProbeKind, TExpr, TKind, TStmt};
use crate::types::{Agg, Shown, Space, StackMode, TSeriesAgg, Ty, INT64, UINT32, UINT64};

/// The kernel's ids (`enum bpf_func_id`) of the helpers builtins lower to.
/// The front end calls nothing; these are data for the code generator.
pub mod helper {
    pub const KTIME_GET_NS: u32 = 5;
    pub const GET_PRANDOM_U32: u32 = 7;
    pub const GET_SMP_PROCESSOR_ID: u32 = 8;
    pub const GET_CURRENT_PID_TGID: u32 = 14;
    pub const GET_CURRENT_UID_GID: u32 = 15;
    pub const GET_CURRENT_COMM: u32 = 16;
    pub const GET_CURRENT_TASK: u32 = 35;
    pub const GET_NUMA_NODE_ID: u32 = 42;
    pub const GET_CURRENT_CGROUP_ID: u32 = 80;
    pub const KTIME_GET_BOOT_NS: u32 = 125;
    pub const KTIME_GET_TAI_NS: u32 = 208;
    pub const JIFFIES64: u32 = 118;
}

/// One builtin.
pub(crate) struct Builtin {
    pub name: &'static str,
    pub shape: Shape,
    pub role: Role,
    /// Checks a use of the builtin and gives its HIR.
    pub check: fn(&mut Checker<'_>, &Use<'_>, &mut Scope) -> R<Checked>,
}

/// How a builtin is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A name alone: `pid`.
    Variable,
    /// A call with `min..=max` arguments: `str(p)`.
    Function { min: usize, max: usize },
    /// Either: `ustack` and `ustack(perf, 5)`.
    Both { min: usize, max: usize },
}

/// What a builtin is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// It computes a value.
    Value,
    /// It is a statement of its own (`printf`, `clear`).
    Statement,
    /// It is assigned to a map (`@m = count()`).
    Aggregation,
}

/// A use of a builtin: its arguments (none for a variable) and where.
pub(crate) struct Use<'a> {
    pub name: &'a str,
    pub args: &'a [Expr],
    pub span: Span,
}

/// What a use of a builtin checks to.
pub(crate) enum Checked {
    Value(TExpr),
    Statement(TStmt),
    Aggregation(Agg, Option<TExpr>),
}

/// The builtins, by name.
pub(crate) const BUILTINS: &[Builtin] = &[
    // Variables of the current task and time.
    Builtin {
        name: "pid",
        shape: Shape::Both { min: 0, max: 1 },
        role: Role::Value,
        check: pid_or_tid,
    },
    Builtin {
        name: "tid",
        shape: Shape::Both { min: 0, max: 1 },
        role: Role::Value,
        check: pid_or_tid,
    },
    variable("uid", |c, u, _| {
        helper(c, u, helper::GET_CURRENT_UID_GID, 0, 32, UINT32)
    }),
    variable("gid", |c, u, _| {
        helper(c, u, helper::GET_CURRENT_UID_GID, 32, 32, UINT32)
    }),
    Builtin {
        name: "nsecs",
        shape: Shape::Both { min: 0, max: 1 },
        role: Role::Value,
        check: nsecs,
    },
    variable("elapsed", elapsed),
    variable("cpu", |c, u, _| {
        helper(c, u, helper::GET_SMP_PROCESSOR_ID, 0, 32, UINT32)
    }),
    variable("ncpus", |_, u, _| {
        value(u, TKind::Param(Param::OnlineCpus), UINT64)
    }),
    variable("jiffies", |c, u, _| {
        helper(c, u, helper::JIFFIES64, 0, 64, UINT64)
    }),
    variable("usermode", usermode),
    variable("probetype", probetype),
    variable("has_cpid", |_, u, _| {
        value(u, TKind::Param(Param::HasCpid), crate::types::BOOL)
    }),
    variable("cgroup", |c, u, _| {
        helper(c, u, helper::GET_CURRENT_CGROUP_ID, 0, 64, UINT64)
    }),
    variable("rand", |c, u, _| {
        helper(c, u, helper::GET_PRANDOM_U32, 0, 32, UINT32)
    }),
    variable("numaid", |c, u, _| {
        helper(c, u, helper::GET_NUMA_NODE_ID, 0, 32, UINT32)
    }),
    variable("curtask", curtask),
    variable("cpid", |_, u, _| {
        value(u, TKind::Param(Param::Cpid), UINT32)
    }),
    variable("comm", comm),
    variable("username", username),
    variable("probe", |_, u, _| {
        value(u, TKind::Probe, Ty::Shown(Shown::Probe))
    }),
    variable("func", func),
    variable("retval", retval),
    variable("args", |c, u, scope| {
        Ok(Checked::Value(c.args_record(u.span, scope)?))
    }),
    variable("ctx", |c, u, _| {
        Err(c.error(Diagnostic::error(
            u.span,
            "`ctx` is not supported; use argN, args or reg()",
        )))
    }),
    // Functions that compute values.
    Builtin {
        name: "ustack",
        shape: Shape::Both { min: 0, max: 2 },
        role: Role::Value,
        check: ustack,
    },
    Builtin {
        name: "kstack",
        shape: Shape::Both { min: 0, max: 2 },
        role: Role::Value,
        check: kstack,
    },
    function("ksym", 1, 1, ksym),
    function("kaddr", 1, 1, kaddr),
    function("str", 1, 2, str),
    function("buf", 1, 3, buf),
    function("usym", 1, 1, usym),
    function("uaddr", 1, 1, uaddr),
    function("uptr", 1, 1, pointer),
    function("kptr", 1, 1, pointer),
    function("reg", 1, 1, reg),
    function("strncmp", 3, 3, strncmp),
    function("strcontains", 2, 2, strcontains),
    function("strstr", 2, 2, strstr),
    function("strlen", 1, 1, strlen),
    function("str_concat", 2, 2, str_concat),
    function("sizeof", 1, 1, sizeof_value),
    function("has_key", 2, 2, has_key),
    function("len", 1, 1, len),
    function("find", 3, 3, find_entry),
    function("delete", 1, 2, delete),
    function("ntop", 1, 2, ntop),
    function("strerror", 1, 1, strerror),
    function("is_err", 1, 1, is_err),
    function("signal_name", 1, 1, signal_name),
    function("strftime", 2, 2, strftime),
    function("bswap", 1, 1, bswap),
    function("getopt", 1, 3, getopt),
    function("cgroupid", 1, 1, |c, u, _| {
        Err(c.error(Diagnostic::error(u.span, "cgroupid() is not supported yet")))
    }),
    // Statements.
    statement("printf", 0, usize::MAX, formatted),
    statement("system", 0, usize::MAX, formatted),
    statement("cat", 0, usize::MAX, formatted),
    statement("errorf", 0, usize::MAX, formatted),
    statement("warnf", 0, usize::MAX, formatted),
    statement("assert", 2, 2, assert),
    statement("print", 1, 3, print),
    statement("clear", 1, 1, clear_or_zero),
    statement("zero", 1, 1, clear_or_zero),
    statement("exit", 0, 1, exit),
    statement("time", 0, 1, time),
    statement("join", 1, 2, join),
    statement("signal", 0, usize::MAX, |c, u, _| {
        Err(c.error(
            Diagnostic::error(
                u.span,
                "signal() is not supported: sdt never changes the traced program",
            )
            .hint("the traced program comes first; stop it from outside if you must"),
        ))
    }),
    statement("__sdt_event", 0, usize::MAX, sdt_event),
    // Aggregations.
    aggregation("count", 0, 0, count),
    aggregation("sum", 1, 1, sum_like),
    aggregation("avg", 1, 1, sum_like),
    aggregation("min", 1, 1, sum_like),
    aggregation("max", 1, 1, sum_like),
    aggregation("stats", 1, 1, sum_like),
    aggregation("hist", 1, 2, hist),
    aggregation("lhist", 4, 4, lhist),
    aggregation("tseries", 3, 4, tseries),
];

/// `getopt(name[, default[, description]])`: a named program parameter,
/// a constant once the command line is known (see [`crate::getopt`]).
fn getopt(c: &mut Checker<'_>, u: &Use<'_>, _: &mut Scope) -> R<Checked> {
    use crate::getopt::{declaration, value as given, Value};
    let d = declaration(u.args).map_err(|(span, why)| c.error(Diagnostic::error(span, why)))?;
    let text = c.options.named_params.get(&d.name);
    let v = match text {
        Some(text) => given(&d, text.as_deref()),
        None => Ok(d.default.clone()),
    };
    let (kind, ty) = match v.map_err(|why| c.error(Diagnostic::error(u.span, why)))? {
        Value::Bool(b) => (TKind::Int(b.into()), crate::types::BOOL),
        Value::Unsigned(n) => (TKind::Int(n as i64), UINT64),
        Value::Signed(n) => (TKind::Int(n), INT64),
        Value::Text(s) => {
            let size = s.len() as u32 + 1;
            (TKind::Str(s.into_bytes()), Ty::Str { size })
        }
    };
    value(u, kind, ty)
}

type CheckFn = fn(&mut Checker<'_>, &Use<'_>, &mut Scope) -> R<Checked>;

const fn variable(name: &'static str, check: CheckFn) -> Builtin {
    Builtin {
        name,
        shape: Shape::Variable,
        role: Role::Value,
        check,
    }
}

const fn function(name: &'static str, min: usize, max: usize, check: CheckFn) -> Builtin {
    Builtin {
        name,
        shape: Shape::Function { min, max },
        role: Role::Value,
        check,
    }
}

const fn statement(name: &'static str, min: usize, max: usize, check: CheckFn) -> Builtin {
    Builtin {
        name,
        shape: Shape::Function { min, max },
        role: Role::Statement,
        check,
    }
}

const fn aggregation(name: &'static str, min: usize, max: usize, check: CheckFn) -> Builtin {
    Builtin {
        name,
        shape: Shape::Function { min, max },
        role: Role::Aggregation,
        check,
    }
}

/// The builtin named `name`, as `internal` scripts may see it. Every
/// builtin also answers to `__builtin_NAME`, the name bpftrace 0.24's
/// standard library gives the builtin behind each of its helpers.
pub(crate) fn find(name: &str, internal: bool) -> Option<&'static Builtin> {
    let name = name.strip_prefix("__builtin_").unwrap_or(name);
    BUILTINS
        .iter()
        .find(|b| b.name == name && (internal || !b.name.starts_with("__")))
}

/// Names a script may use in the shape asked, for suggestions.
pub(crate) fn names(call: bool) -> impl Iterator<Item = &'static str> {
    BUILTINS
        .iter()
        .filter(move |b| {
            !b.name.starts_with("__")
                && match b.shape {
                    Shape::Variable => !call,
                    Shape::Function { .. } => call,
                    Shape::Both { .. } => true,
                }
        })
        .map(|b| b.name)
}

impl Checker<'_> {
    /// Checks `use_` of `builtin`, written as a call or not.
    pub(crate) fn builtin(
        &mut self,
        builtin: &Builtin,
        use_: &Use<'_>,
        call: bool,
        scope: &mut Scope,
    ) -> R<Checked> {
        let arity = match (builtin.shape, call) {
            (Shape::Variable, false) => None,
            (Shape::Both { .. }, false) => None,
            // `pid()` is `pid`, as in bpftrace 0.24 and later.
            (Shape::Variable, true) if use_.args.is_empty() => None,
            (Shape::Variable, true) => {
                return Err(self.error(
                    Diagnostic::error(use_.span, format!("`{}` is not a function", use_.name))
                        .hint(format!("write `{}` without parentheses", use_.name)),
                ))
            }
            (Shape::Function { .. }, false) => {
                return Err(self.error(
                    Diagnostic::error(use_.span, format!("`{}` is a function", use_.name))
                        .hint(format!("call it: {}(...)", use_.name)),
                ))
            }
            (Shape::Function { min, max } | Shape::Both { min, max }, true) => Some((min, max)),
        };
        if let Some((min, max)) = arity {
            self.arity(use_.name, use_.args, min, max, use_.span)?;
        }
        (builtin.check)(self, use_, scope)
    }
}

fn value(use_: &Use<'_>, kind: TKind, ty: Ty) -> R<Checked> {
    Ok(Checked::Value(TExpr {
        kind,
        ty,
        span: use_.span,
    }))
}

fn helper(
    _: &mut Checker<'_>,
    use_: &Use<'_>,
    helper: u32,
    shift: u8,
    bits: u8,
    ty: Ty,
) -> R<Checked> {
    value(
        use_,
        TKind::Helper(HelperValue {
            helper,
            shift,
            bits,
        }),
        ty,
    )
}

/// `nsecs`, or `nsecs(CLOCK)`: nanoseconds of the monotonic clock (the
/// default), of the boot clock (which counts suspended time too), or TAI.
fn nsecs(c: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    // `sw_tai` is bpftrace's TAI for kernels without the TAI helper; this
    // one has it, so both read the kernel's TAI clock.
    const CLOCKS: [(&str, u32); 4] = [
        ("monotonic", helper::KTIME_GET_NS),
        ("boot", helper::KTIME_GET_BOOT_NS),
        ("tai", helper::KTIME_GET_TAI_NS),
        ("sw_tai", helper::KTIME_GET_TAI_NS),
    ];
    let clock = match use_.args.first() {
        None => "monotonic",
        Some(Expr {
            kind: ExprKind::Ident(name),
            ..
        }) => name,
        Some(other) => {
            return Err(c.error(
                Diagnostic::error(other.span, "nsecs() takes the name of a clock")
                    .hint("monotonic, boot, tai or sw_tai"),
            ))
        }
    };
    match CLOCKS.iter().find(|(name, _)| *name == clock) {
        Some(&(_, id)) => helper(c, use_, id, 0, 64, UINT64),
        None => {
            let mut d = Diagnostic::error(use_.args[0].span, format!("`{clock}` is not a clock"));
            d = d.hint(
                did_you_mean(&suggest(clock, CLOCKS.iter().map(|c| c.0)))
                    .unwrap_or_else(|| "the clocks are monotonic, boot, tai and sw_tai".into()),
            );
            Err(c.error(d))
        }
    }
}

fn elapsed(_: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let now = TExpr {
        kind: TKind::Helper(HelperValue {
            helper: helper::KTIME_GET_NS,
            shift: 0,
            bits: 64,
        }),
        ty: UINT64,
        span: use_.span,
    };
    let start = TExpr {
        kind: TKind::Param(Param::StartNs),
        ty: UINT64,
        span: use_.span,
    };
    value(
        use_,
        TKind::Binary {
            op: crate::ast::BinOp::Sub,
            lhs: Box::new(now),
            rhs: Box::new(start),
        },
        UINT64,
    )
}

/// `pid`, `tid`, `pid(curr_ns)`, `pid(init)`: as seen from sdt's PID
/// namespace (the default) or from the initial one.
fn pid_or_tid(c: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let thread = use_.name.ends_with("tid");
    let namespace =
        match use_.args.first() {
            None => "curr_ns",
            Some(Expr {
                kind: ExprKind::Ident(name),
                ..
            }) if name == "curr_ns" || name == "init" => name,
            Some(other) => return Err(c.error(
                Diagnostic::error(other.span, format!("{}() takes curr_ns or init", use_.name))
                    .hint("curr_ns: as sdt's PID namespace sees it; init: as the initial one does"),
            )),
        };
    if namespace == "init" {
        let shift = if thread { 0 } else { 32 };
        return helper(c, use_, helper::GET_CURRENT_PID_TGID, shift, 32, UINT32);
    }
    value(use_, TKind::NsPid { thread }, UINT32)
}

/// 1 where the probe interrupted user-space code: always in probes of
/// processes; `BEGIN` and `END` run for sdt itself, from user space.
fn usermode(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    match scope.kind {
        k if k.is_uprobe() || k.is_perf_event() => {
            value(use_, TKind::UserMode, crate::types::UINT8)
        }
        ProbeKind::Begin | ProbeKind::End => value(use_, TKind::Int(1), crate::types::UINT8),
        other => Err(c.error(Diagnostic::error(
            use_.span,
            format!(
                "usermode is not known in {} probes, which do not interrupt a process's code",
                other.name()
            ),
        ))),
    }
}

/// The probe's type: `usdt`, `uprobe`, ..., `special` for `BEGIN`/`END`.
fn probetype(_: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let name = match scope.kind {
        ProbeKind::Begin | ProbeKind::End => "special",
        other => other.name(),
    };
    value(
        use_,
        TKind::Str(name.as_bytes().to_vec()),
        Ty::Str {
            size: name.len() as u32 + 1,
        },
    )
}

/// `curtask`: the current task, a `struct task_struct *` into the kernel
/// where the kernel's BTF describes it (so `curtask->real_parent->tgid`
/// reads), else its address as an integer.
fn curtask(c: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let ty = match c.kernel_type("struct task_struct") {
        Some(task @ Ty::Record(_)) => Ty::kernel_ptr(task),
        _ => UINT64,
    };
    helper(c, use_, helper::GET_CURRENT_TASK, 0, 64, ty)
}

fn comm(_: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    value(
        use_,
        TKind::HelperString {
            helper: helper::GET_CURRENT_COMM,
            size: 16,
        },
        Ty::Str { size: 16 },
    )
}

fn username(_: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let uid = TExpr {
        kind: TKind::Helper(HelperValue {
            helper: helper::GET_CURRENT_UID_GID,
            shift: 0,
            bits: 32,
        }),
        ty: UINT32,
        span: use_.span,
    };
    value(
        use_,
        TKind::Retype(Box::new(uid)),
        Ty::Shown(Shown::Username),
    )
}

fn func(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    if !matches!(
        scope.kind,
        ProbeKind::Uprobe | ProbeKind::Uretprobe | ProbeKind::Usdt
    ) {
        return Err(c.error(Diagnostic::error(
            use_.span,
            format!("`func` is not available in {} probes", scope.kind.name()),
        )));
    }
    value(use_, TKind::Func, Ty::Shown(Shown::Func))
}

fn retval(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    if scope.kind != ProbeKind::Uretprobe {
        return Err(c.error(
            Diagnostic::error(
                use_.span,
                format!(
                    "`retval` is only available in uretprobe probes, not {}",
                    scope.kind.name()
                ),
            )
            .hint("attach a uretprobe:PATH:FUNCTION to read the return value"),
        ));
    }
    value(use_, TKind::Retval, UINT64)
}

/// The mode and depth of `ustack(...)` or `kstack(...)`: `ustack`,
/// `ustack(N)`, `ustack(MODE)`, `ustack(MODE, N)`; without a mode, the
/// configuration's `stack_mode`.
fn stack_args(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<(StackMode, u32)> {
    let mut mode = c.options.stack_mode;
    let mut depth = 127u32;
    for (i, a) in use_.args.iter().enumerate() {
        match &a.kind {
            ExprKind::Ident(name) if i == 0 => {
                mode = StackMode::named(name).ok_or_else(|| {
                    c.error(
                        Diagnostic::error(a.span, format!("Error parsing stack mode: {name}"))
                            .hint("the modes are bpftrace, perf, raw and build_id"),
                    )
                })?;
            }
            _ if i == 1 && !matches!(use_.args[0].kind, ExprKind::Ident(_)) => {
                return Err(c.error(Diagnostic::error(
                    use_.args[0].span,
                    "Expected stack mode as first argument",
                )));
            }
            _ => {
                let what = format!("{}()'s depth", use_.name);
                let n = c.literal_int(a, scope, &what)?;
                if !(1..=127).contains(&n) {
                    return Err(c.error(Diagnostic::error(
                        a.span,
                        format!("{what} must be between 1 and 127"),
                    )));
                }
                depth = n as u32;
            }
        }
    }
    Ok((mode, depth))
}

fn ustack(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (mode, depth) = stack_args(c, use_, scope)?;
    value(
        use_,
        TKind::UStack,
        Ty::Shown(Shown::UStack { mode, depth }),
    )
}

/// `kstack`: the kernel's stack where the probe fired. A probe of a
/// process interrupts user code, where the kernel has no stack: it is
/// empty there, as in bpftrace, and the checker says so.
fn kstack(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (mode, depth) = stack_args(c, use_, scope)?;
    if scope.kind.is_uprobe() {
        c.warn(
            Diagnostic::warning(
                use_.span,
                format!(
                    "kstack is always empty in a {} probe, which interrupts user code",
                    scope.kind.name()
                ),
            )
            .hint("kernel stacks come from tracepoints, and from profile and software probes that sample the kernel"),
        );
    }
    value(
        use_,
        TKind::KStack,
        Ty::Shown(Shown::KStack { mode, depth }),
    )
}

/// `ksym(addr)`: a kernel address, printed as the symbol it is in.
fn ksym(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = c.expr(&use_.args[0], scope)?;
    let v = c.value(v)?;
    if !matches!(v.ty, Ty::Int { .. } | Ty::Ptr(..)) && v.ty != Ty::Shown(Shown::KSym) {
        return Err(c.error(Diagnostic::error(
            use_.args[0].span,
            format!(
                "ksym() takes a kernel address, and this is {}",
                v.ty.display(&c.registry)
            ),
        )));
    }
    value(use_, TKind::Retype(Box::new(v)), Ty::Shown(Shown::KSym))
}

/// `kaddr("name")`: the address of a kernel symbol, from
/// `/proc/kallsyms` when the script is compiled.
fn kaddr(c: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let name = c.literal_string(&use_.args[0], "kaddr()'s symbol name")?;
    let name = String::from_utf8_lossy(&name).into_owned();
    match c.objects.kernel_symbol(&name) {
        Ok(address) => value(use_, TKind::Int(address as i64), UINT64),
        Err(refusal) => Err(c.refused(use_.span, refusal)),
    }
}

fn str(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let args = use_.args;
    // A length counts the NUL, as in bpftrace 0.23 and later: `str(p, 5)`
    // keeps at most 4 bytes. (bpftrace up to 0.22 kept 5.) A `&str` of
    // the `sdt` crate is read whole with `str(argN, argN+1 + 1)`.
    let len = match args.get(1) {
        Some(e) => {
            let v = c.expr(e, scope)?;
            let v = c.value(v)?;
            if !v.ty.is_integer() {
                return Err(c.error(Diagnostic::error(
                    e.span,
                    "str()'s length must be an integer",
                )));
            }
            Some(v)
        }
        None => None,
    };
    let strlen = c.options.strlen;
    let size = match len.as_ref().map(|l| (&l.kind, l.span)) {
        Some((&TKind::Int(n), span)) if n < 0 => {
            return Err(c.error(Diagnostic::error(
                span,
                format!("str() cannot use a negative length ({n})"),
            )))
        }
        Some((&TKind::Int(n), span)) if n > i64::from(strlen) => {
            c.warn(Diagnostic::warning(
                span,
                format!("length param ({n}) is too long and will be shortened to {strlen} bytes (see BPFTRACE_MAX_STRLEN)"),
            ));
            strlen
        }
        Some((&TKind::Int(n), _)) => n.max(1) as u32,
        _ => strlen,
    };
    // `str($1)` is the parameter's text, also when it is a number
    // (`str($1)` of 42 is "42", not a read at address 42), and
    // `str($1 + 2)` its text from the third byte.
    if let Some(text) = c.parameter_text(&args[0])? {
        let keep = match len.as_ref().map(|l| &l.kind) {
            Some(TKind::Int(_)) => text.len().min(size as usize - 1),
            _ => text.len(),
        };
        let text = text[..keep].to_vec();
        let size = text.len() as u32 + 1;
        return value(use_, TKind::Str(text), Ty::Str { size });
    }
    let ptr = c.expr(&args[0], scope)?;
    if ptr.is_place() {
        return Ok(Checked::Value(c.value(ptr)?));
    }
    let ptr = c.value(ptr)?;
    if let (Ty::Str { size: have }, None) = (&ptr.ty, &len) {
        let _ = have;
        return Ok(Checked::Value(ptr));
    }
    let size = match ptr.ty {
        // A string value is cut to the length.
        Ty::Str { size: have } => size.min(have),
        Ty::Int { .. } | Ty::Ptr(..) => size,
        _ => {
            return Err(c.error(Diagnostic::error(
                args[0].span,
                format!(
                    "str() reads a string from an address, and this is {}",
                    ptr.ty.display(&c.registry)
                ),
            )))
        }
    };
    value(
        use_,
        TKind::StrRead {
            ptr: Box::new(ptr),
            len: len.map(Box::new),
        },
        Ty::Str { size },
    )
}

fn buf(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (args, span) = (use_.args, use_.span);
    let ptr = c.expr(&args[0], scope)?;
    // An array in the traced process is read at its address; a string or
    // another value the program holds gives its own bytes (`buf("k", 3)`).
    // Either has a size of its own, the most a buffer of it holds.
    let (ptr, own_size) = if ptr.is_place() && !super::in_program_memory(&ptr) {
        if super::expr_is_ctx(&ptr) {
            return Err(c.error(Diagnostic::error(
                span,
                "buf() of a tracepoint field is not supported",
            )));
        }
        let size = c.registry.c_size(&ptr.ty);
        let addr = TExpr {
            kind: TKind::AddrOf(Box::new(ptr)),
            ty: UINT64,
            span,
        };
        (addr, Some(size))
    } else {
        let ptr = c.value(ptr)?;
        let size = (!ptr.ty.is_scalar()).then(|| c.registry.c_size(&ptr.ty));
        (ptr, size)
    };
    if !matches!(
        ptr.ty,
        Ty::Int { .. } | Ty::Ptr(..) | Ty::Str { .. } | Ty::Array { .. } | Ty::Record(_)
    ) {
        return Err(c.error(Diagnostic::error(
            args[0].span,
            format!(
                "buf() reads bytes from an address or a value, and this is {}",
                ptr.ty.display(&c.registry)
            ),
        )));
    }
    let own_size = own_size.map(|s| s.min(u64::from(super::MAX_STRLEN)) as u32);
    let len = match (args.get(1), own_size) {
        (Some(len), _) => {
            let len = c.expr(len, scope)?;
            let len = c.value(len)?;
            if !len.ty.is_integer() {
                return Err(c.error(Diagnostic::error(
                    len.span,
                    "buf()'s length must be an integer",
                )));
            }
            len
        }
        (None, Some(size)) => TExpr::int(i64::from(size), UINT64, span),
        (None, None) => {
            return Err(c.error(Diagnostic::error(
                span,
                "buf() of an address needs a length: buf(ptr, len)",
            )))
        }
    };
    let size = match (args.get(2), &len.kind) {
        (Some(e), _) => c.literal_int(e, scope, "buf()'s maximum length")?,
        (None, TKind::Int(v)) => *v,
        (None, _) => i64::from(own_size.unwrap_or(c.options.strlen)),
    };
    let size = size.clamp(1, i64::from(super::MAX_STRLEN)) as u32;
    value(
        use_,
        TKind::BufRead {
            ptr: Box::new(ptr),
            len: Box::new(len),
        },
        Ty::Buf { size },
    )
}

fn usym(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = c.expr(&use_.args[0], scope)?;
    let v = c.value(v)?;
    if !matches!(v.ty, Ty::Int { .. } | Ty::Ptr(..)) {
        return Err(c.error(Diagnostic::error(
            use_.args[0].span,
            "usym() takes an address",
        )));
    }
    value(use_, TKind::USym(Box::new(v)), Ty::Shown(Shown::USym))
}

fn uaddr(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let symbol = c.literal_string(&use_.args[0], "uaddr()'s symbol name")?;
    let symbol = String::from_utf8_lossy(&symbol).into_owned();
    Ok(Checked::Value(c.uaddr(
        &symbol,
        scope.kind,
        use_.args[0].span,
        use_.span,
    )?))
}

/// `kptr(p)`, `uptr(p)`: `p` pointing into the kernel's memory or the
/// traced process's; an integer becomes a `void *` there.
fn pointer(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let space = if use_.name.ends_with("kptr") {
        Space::Kernel
    } else {
        Space::User
    };
    let v = c.expr(&use_.args[0], scope)?;
    let v = c.value(v)?;
    let ty = match &v.ty {
        Ty::Ptr(pointee, _) => Ty::Ptr(pointee.clone(), space),
        t if t.is_integer() => Ty::Ptr(Box::new(Ty::Void), space),
        other => {
            return Err(c.error(Diagnostic::error(
                use_.args[0].span,
                format!(
                    "{}() takes an address, and this is {}",
                    use_.name,
                    other.display(&c.registry)
                ),
            )))
        }
    };
    Ok(Checked::Value(TExpr { ty, ..v }))
}

/// Registers by the names `reg()` takes, at their `pt_regs` offsets.
const REGISTERS: &[(&str, i16)] = &[
    ("r15", 0),
    ("r14", 8),
    ("r13", 16),
    ("r12", 24),
    ("bp", 32),
    ("rbp", 32),
    ("bx", 40),
    ("rbx", 40),
    ("r11", 48),
    ("r10", 56),
    ("r9", 64),
    ("r8", 72),
    ("ax", 80),
    ("rax", 80),
    ("cx", 88),
    ("rcx", 88),
    ("dx", 96),
    ("rdx", 96),
    ("si", 104),
    ("rsi", 104),
    ("di", 112),
    ("rdi", 112),
    ("orig_ax", 120),
    ("orig_rax", 120),
    ("ip", 128),
    ("rip", 128),
    ("cs", 136),
    ("flags", 144),
    ("eflags", 144),
    ("sp", 152),
    ("rsp", 152),
    ("ss", 160),
];

fn reg(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    // Probes of processes and perf events have the interrupted task's
    // registers as their context.
    if !scope.kind.is_uprobe() && !scope.kind.is_perf_event() {
        return Err(c.error(Diagnostic::error(
            use_.span,
            format!("reg() is not available in {} probes", scope.kind.name()),
        )));
    }
    let reg = c.literal_string(&use_.args[0], "reg()'s register name")?;
    let reg = String::from_utf8_lossy(&reg).into_owned();
    match REGISTERS.iter().find(|(n, _)| *n == reg) {
        Some((_, offset)) => value(use_, TKind::Reg(*offset), UINT64),
        None => {
            let mut d = Diagnostic::error(
                use_.args[0].span,
                format!("`{reg}` is not an x86-64 register in pt_regs"),
            );
            if let Some(h) = did_you_mean(&suggest(&reg, REGISTERS.iter().map(|r| r.0))) {
                d = d.hint(h);
            }
            Err(c.error(d))
        }
    }
}

/// Two checked string values.
fn two_strings(c: &mut Checker<'_>, args: &[Expr], scope: &mut Scope, what: &str) -> R<[TExpr; 2]> {
    let values = c.values(args, scope)?;
    let pair = <[TExpr; 2]>::try_from(values).map_err(|_| Stop)?;
    for side in &pair {
        if !side.ty.is_string() {
            return Err(c.error(Diagnostic::error(
                side.span,
                format!("{what}, and this is {}", side.ty.display(&c.registry)),
            )));
        }
    }
    Ok(pair)
}

fn strncmp(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let [lhs, rhs] = two_strings(c, &use_.args[..2], scope, "strncmp() compares strings")?;
    let n = c.literal_int(&use_.args[2], scope, "strncmp()'s length")?;
    value(
        use_,
        TKind::StrNCmp {
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
            n: n.clamp(0, i64::from(super::MAX_STRLEN)) as u32,
        },
        INT64,
    )
}

fn strcontains(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let [haystack, needle] = two_strings(c, use_.args, scope, "strcontains() takes two strings")?;
    value(
        use_,
        TKind::StrContains {
            haystack: Box::new(haystack),
            needle: Box::new(needle),
        },
        crate::types::BOOL,
    )
}

/// `is_err(ptr)` (bpftrace 0.26's standard library): whether a value is
/// a kernel `ERR_PTR`, an error code from -4095 to -1 passed as a pointer.
/// Computed as `(uint64)(ptr + 4095) < 4095`, one comparison.
fn is_err(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let arg = &use_.args[0];
    let v = c.expr(arg, scope)?;
    let v = c.value(v)?;
    if !v.ty.is_integer() && !matches!(v.ty, Ty::Ptr(..)) {
        return Err(c.error(Diagnostic::error(
            arg.span,
            format!(
                "is_err() takes a pointer or an integer, not {}",
                v.ty.display(&c.registry)
            ),
        )));
    }
    let span = use_.span;
    let word = c.cast(v, UINT64, span)?;
    let shifted = TExpr {
        kind: TKind::Binary {
            op: crate::ast::BinOp::Add,
            lhs: Box::new(word),
            rhs: Box::new(TExpr::int(4095, UINT64, span)),
        },
        ty: UINT64,
        span,
    };
    value(
        use_,
        TKind::Binary {
            op: crate::ast::BinOp::Lt,
            lhs: Box::new(shifted),
            rhs: Box::new(TExpr::int(4095, UINT64, span)),
        },
        crate::types::BOOL,
    )
}

/// `sizeof(EXPR)`: the size of the expression's type, known when the
/// script compiles (the expression is never run). `sizeof(TYPE)` is
/// parsed as a type.
fn sizeof_value(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = c.expr(&use_.args[0], scope)?;
    let v = c.value(v)?;
    c.not_void(&v)?;
    let size = c.registry.bpftrace_size(&v.ty);
    value(use_, TKind::Int(size as i64), UINT64)
}

fn strstr(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let [haystack, needle] = two_strings(c, use_.args, scope, "strstr() takes two strings")?;
    value(
        use_,
        TKind::StrStr {
            haystack: Box::new(haystack),
            needle: Box::new(needle),
        },
        INT64,
    )
}

/// The most bytes `str_concat()` gives, NUL included: bpftrace's
/// `string[1024]`.
const STR_CONCAT_MAX: u32 = 1024;

/// `str_concat(s1, s2)`: the two strings one after the other, as in
/// bpftrace 0.26. Its string holds both whole (bpftrace's holds 1024
/// bytes, so the same text up to that), and at most 1023 characters.
fn str_concat(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let mut parts = Vec::new();
    // The characters each part can hold, without its NUL.
    let mut chars = 0;
    for arg in use_.args {
        let v = c.expr(arg, scope)?;
        let v = c.value(v)?;
        let Ty::Str { size } = v.ty else {
            return Err(c.error(
                Diagnostic::error(
                    arg.span,
                    format!(
                        "str_concat() joins two strings, and this is {}",
                        v.ty.display(&c.registry)
                    ),
                )
                .hint("make a string of it first, with str()"),
            ));
        };
        chars += size.saturating_sub(1);
        parts.push(v);
    }
    let size = chars.saturating_add(1).min(STR_CONCAT_MAX);
    value(use_, TKind::Concat(parts), Ty::Str { size })
}

/// `strlen(s)` of a string, or of a `char` array or pointer, read as
/// `str()` reads it.
fn strlen(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let arg = &use_.args[0];
    let v = c.expr(arg, scope)?;
    let v = c.value(v)?;
    let s = if v.ty.is_string() {
        v
    } else if matches!(v.ty, Ty::Ptr(..) | Ty::Array { .. }) {
        let call = Expr {
            kind: ExprKind::Call {
                name: "str".to_string(),
                name_span: arg.span,
                args: vec![arg.clone()],
            },
            span: arg.span,
        };
        let s = c.expr(&call, scope)?;
        c.value(s)?
    } else {
        return Err(c.error(Diagnostic::error(
            arg.span,
            format!(
                "strlen() takes a string, a char array or a pointer to one, and this is {}",
                v.ty.display(&c.registry)
            ),
        )));
    };
    value(use_, TKind::StrLen(Box::new(s)), UINT64)
}

fn ntop(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    const AF_INET: i64 = 2;
    const AF_INET6: i64 = 10;
    let args = use_.args;
    let family = match args.len() {
        2 => Some(c.literal_int(&args[0], scope, "the address family")?),
        _ => None,
    };
    let addr = &args[args.len() - 1];
    let v = c.expr(addr, scope)?;
    let v = c.value(v)?;
    let sixteen_bytes = matches!(
        &v.ty,
        Ty::Array { elem, len: 16 } if matches!(**elem, Ty::Int { bytes: 1, .. })
    );
    let v6 = match family {
        None | Some(AF_INET) if v.ty.is_integer() => false,
        None | Some(AF_INET6) if sixteen_bytes => true,
        _ => {
            return Err(c.error(
                Diagnostic::error(
                    addr.span,
                    format!(
                        "ntop() cannot read an address from {}",
                        v.ty.display(&c.registry)
                    ),
                )
                .hint(
                    "ntop() takes an IPv4 address as an integer (AF_INET, 2) \
                     or an IPv6 address as 16 bytes, such as a uint8[16] member (AF_INET6, 10)",
                ),
            ))
        }
    };
    value(
        use_,
        TKind::Retype(Box::new(v)),
        Ty::Shown(Shown::Inet { v6 }),
    )
}

/// The one argument, which must be an integer.
fn integer(c: &mut Checker<'_>, e: &Expr, scope: &mut Scope, message: &str) -> R<TExpr> {
    let v = c.expr(e, scope)?;
    let v = c.value(v)?;
    if !v.ty.is_integer() {
        return Err(c.error(Diagnostic::error(e.span, message.to_string())));
    }
    Ok(v)
}

fn strerror(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = integer(c, &use_.args[0], scope, "strerror() takes an errno value")?;
    value(use_, TKind::Retype(Box::new(v)), Ty::Shown(Shown::Strerror))
}

/// `signal_name(N)`: the signal's description, as `strsignal(3)` gives
/// it, made in user space.
fn signal_name(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = integer(
        c,
        &use_.args[0],
        scope,
        "signal_name() takes a signal number",
    )?;
    value(
        use_,
        TKind::Retype(Box::new(v)),
        Ty::Shown(Shown::SignalName),
    )
}

fn strftime(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let format = c.literal_string(&use_.args[0], "strftime()'s format")?;
    let format = String::from_utf8_lossy(&format).into_owned();
    let v = integer(
        c,
        &use_.args[1],
        scope,
        "strftime() takes a time in nanoseconds, such as nsecs",
    )?;
    c.time_formats.push(format);
    let format = c.time_formats.len() as u32 - 1;
    value(
        use_,
        TKind::Strftime(Box::new(v)),
        Ty::Shown(Shown::Timestamp { format }),
    )
}

fn bswap(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = integer(c, &use_.args[0], scope, "bswap() takes an integer")?;
    let ty = v.ty.clone();
    value(use_, TKind::Bswap(Box::new(v)), ty)
}

fn statement_of(output: Output) -> R<Checked> {
    Ok(Checked::Statement(TStmt::Output(output)))
}

/// `printf`, `system` and `cat`: a format and its values.
fn formatted(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (name, args, span) = (use_.name, use_.args, use_.span);
    if args.is_empty() {
        return Err(c.error(Diagnostic::error(
            span,
            format!("{name}() needs a format string"),
        )));
    }
    if name == "system" && !c.options.allow_unsafe {
        return Err(c.error(
            Diagnostic::error(span, "system() runs commands, which is unsafe")
                .hint("allow it with --unsafe"),
        ));
    }
    let values = c.values(&args[1..], scope)?;
    let format = c.format_of(&args[0], &values, name)?;
    statement_of(match name {
        "printf" => Output::Printf {
            format,
            args: values,
        },
        "system" => Output::System {
            format,
            args: values,
        },
        "errorf" | "warnf" => Output::Message {
            format,
            args: values,
            error: name == "errorf",
            span,
        },
        _ => Output::Cat {
            format,
            args: values,
        },
    })
}

/// `assert(condition, message)`: unless the condition holds, the message
/// as an error with its place in the script, and the run ends with 1.
fn assert(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let cond = c.expr(&use_.args[0], scope)?;
    let cond = c.condition(cond)?;
    let message = c.literal_string(&use_.args[1], "assert()'s message")?;
    let mut format = Vec::new();
    for &b in &message {
        // The message is text: a `%` in it is a percent sign.
        if b == b'%' {
            format.push(b'%');
        }
        format.push(b);
    }
    let format = match crate::format::Format::parse(&format) {
        Ok(f) => f,
        Err((_, why)) => return Err(c.error(Diagnostic::error(use_.args[1].span, why))),
    };
    c.formats.push(format);
    let span = use_.span;
    let failed = TExpr {
        kind: TKind::Unary {
            op: crate::ast::UnOp::Not,
            expr: Box::new(cond),
        },
        ty: crate::types::BOOL,
        span,
    };
    Ok(Checked::Statement(TStmt::If {
        cond: failed,
        then: vec![
            TStmt::Output(Output::Message {
                format: c.formats.len() as u32 - 1,
                args: Vec::new(),
                error: true,
                span,
            }),
            TStmt::Output(Output::Exit(Some(TExpr::int(1, INT64, span)))),
        ],
        otherwise: Vec::new(),
    }))
}

/// `find(@m, key, $v)`: true when the map has the key, and then `$v`
/// holds its value.
fn find_entry(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let ExprKind::Var(name) = &use_.args[2].kind else {
        return Err(c.error(
            Diagnostic::error(use_.args[2].span, "find() puts the value in a variable")
                .hint("find(@m, key, $value)"),
        ));
    };
    let head = Use {
        name: use_.name,
        args: &use_.args[..2],
        span: use_.span,
    };
    if let ExprKind::Map(m) = &use_.args[0].kind {
        let id = c.known_map(&m.name, m.span)?;
        if c.maps[id].keys.is_empty() {
            return Err(c.error(Diagnostic::error(
                use_.args[0].span,
                "find() needs a map with keys",
            )));
        }
    }
    let (map, keys) = map_entry_args(
        c,
        &head,
        scope,
        "find() takes a map, a key and a variable: find(@m, key, $value)",
    )?;
    let value_ty = match &c.maps[map].value {
        Ty::Agg(_) => {
            return Err(c.error(Diagnostic::error(
                use_.args[0].span,
                "find() reads plain values; read an aggregation as @m[key]",
            )))
        }
        other => other.clone(),
    };
    let var = c.define_var(scope, name, value_ty, use_.args[2].span)?;
    value(use_, TKind::Find { map, keys, var }, crate::types::BOOL)
}

fn print(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (args, span) = (use_.args, use_.span);
    if let ExprKind::Map(map) = &args[0].kind {
        if map.keys.is_empty() {
            let id = c.known_map(&map.name, map.span)?;
            let top = match args.get(1) {
                Some(e) => c
                    .literal_int(e, scope, "the number of entries to print")?
                    .max(0) as u64,
                None => 0,
            };
            let div = match args.get(2) {
                Some(e) => c.literal_int(e, scope, "the divisor")?.max(1) as u64,
                None => 1,
            };
            return statement_of(Output::PrintMap { map: id, top, div });
        }
    }
    if args.len() > 1 {
        return Err(c.error(Diagnostic::error(
            span,
            "print() of a value takes no other arguments",
        )));
    }
    let v = c.expr(&args[0], scope)?;
    let v = c.value(v)?;
    c.not_void(&v)?;
    if let Ty::Agg(_) = v.ty {
        return Err(c.error(Diagnostic::error(
            span,
            "print() of an aggregation needs its map: print(@name)",
        )));
    }
    statement_of(Output::PrintValue(v))
}

fn clear_or_zero(c: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let (id, keys) = c.map_arg(&use_.args[0], use_.name)?;
    if !keys.is_empty() {
        return Err(c.error(Diagnostic::error(
            use_.args[0].span,
            format!("{}() takes a whole map, without a key", use_.name),
        )));
    }
    statement_of(if use_.name == "clear" {
        Output::Clear(id)
    } else {
        Output::Zero(id)
    })
}

/// `delete(@m[k])`, `delete(@m, k)` or `delete(@m)` for a map without
/// keys: removes the entry, and is true when there was one.
fn delete(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (map, keys) = map_entry_args(
        c,
        use_,
        scope,
        "delete() takes a map element: delete(@m[key]) or delete(@m, key)",
    )?;
    value(use_, TKind::Delete { map, keys }, crate::types::BOOL)
}

/// `has_key(@m, k)`: whether the map has an entry for the key.
fn has_key(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    if let ExprKind::Map(m) = &use_.args[0].kind {
        let id = c.known_map(&m.name, m.span)?;
        if c.maps[id].keys.is_empty() {
            return Err(c.error(
                Diagnostic::error(use_.args[0].span, "has_key() needs a map with keys")
                    .hint("a map without keys (@m = ...) has its one value or none"),
            ));
        }
    }
    let (map, keys) = map_entry_args(
        c,
        use_,
        scope,
        "has_key() takes a map and a key: has_key(@m, key)",
    )?;
    value(use_, TKind::HasKey { map, keys }, crate::types::BOOL)
}

/// The map and key of `f(@m[k])` or `f(@m, k)`, where `k` may be a tuple
/// of the keys of a map with several (`f(@m, (a, b))` is `f(@m[a, b])`).
fn map_entry_args(
    c: &mut Checker<'_>,
    use_: &Use<'_>,
    scope: &mut Scope,
    usage: &str,
) -> R<(usize, Vec<TExpr>)> {
    let args = use_.args;
    let map = match &args[0].kind {
        ExprKind::Map(map) if args.len() == 1 || map.keys.is_empty() => map,
        _ => return Err(c.error(Diagnostic::error(args[0].span, usage))),
    };
    let id = c.known_map(&map.name, map.span)?;
    let expected = c.maps[id].keys.len();
    let mut map = map.clone();
    match args.get(1) {
        Some(Expr {
            kind: ExprKind::Tuple(items),
            ..
        }) if expected > 1 && items.len() == expected => map.keys.extend(items.iter().cloned()),
        Some(key) => map.keys.push(key.clone()),
        None => {}
    }
    let keys = c.map_keys(&map, scope)?;
    if keys.len() != expected {
        return Err(c.error(
            Diagnostic::error(
                map.span,
                format!(
                    "@{} has {expected} key{}, but {} {} given",
                    map.name,
                    super::plural(expected),
                    keys.len(),
                    if keys.len() == 1 { "is" } else { "are" }
                ),
            )
            .hint("to empty the whole map, use clear(@map)"),
        ));
    }
    let decl = c.maps[id].clone();
    for (i, (key, ty)) in keys.iter().zip(&decl.keys).enumerate() {
        // The key fits where it is laid out as the map's keys are (an
        // integer in a tuple takes 8 bytes whatever its width).
        let fits = match super::unify(ty, &super::widen(&key.ty)) {
            Some(unified) => {
                super::stored(&unified) == super::stored(ty) || matches!(ty, Ty::Int { .. })
            }
            None => false,
        };
        if !fits {
            return Err(c.error(
                Diagnostic::error(
                    key.span,
                    format!(
                        "key {} of @{} is {}, not {}",
                        i + 1,
                        map.name,
                        ty.display(&c.registry),
                        key.ty.display(&c.registry)
                    ),
                )
                .related(decl.span, "first used here"),
            ));
        }
    }
    Ok((id, keys))
}

/// `len(@m)`: the map's number of entries; `len(ustack)`: a stack's
/// number of frames.
fn len(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let arg = &use_.args[0];
    if let ExprKind::Map(map) = &arg.kind {
        let id = c.known_map(&map.name, map.span)?;
        if !map.keys.is_empty() || c.maps[id].keys.is_empty() {
            return Err(c.error(
                Diagnostic::error(arg.span, "len() needs a whole map with keys")
                    .hint("len(@m) counts the entries of a map written @m[key] = value"),
            ));
        }
        return value(use_, TKind::MapLen(id), INT64);
    }
    let v = c.expr(arg, scope)?;
    let v = c.value(v)?;
    match v.ty {
        Ty::Shown(Shown::UStack { .. } | Shown::KStack { .. }) => {
            value(use_, TKind::StackLen(Box::new(v)), INT64)
        }
        _ => Err(c.error(Diagnostic::error(
            arg.span,
            format!(
                "len() counts a map's entries or a stack's frames, not {}",
                v.ty.display(&c.registry)
            ),
        ))),
    }
}

fn exit(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let code = match use_.args.first() {
        Some(e) => Some(integer(c, e, scope, "the exit code must be an integer")?),
        None => None,
    };
    statement_of(Output::Exit(code))
}

fn time(c: &mut Checker<'_>, use_: &Use<'_>, _: &mut Scope) -> R<Checked> {
    let format = match use_.args.first() {
        Some(e) => String::from_utf8_lossy(&c.literal_string(e, "the time format")?).into_owned(),
        None => "%H:%M:%S\n".to_string(),
    };
    c.time_formats.push(format);
    statement_of(Output::Time(c.time_formats.len() as u32 - 1))
}

fn join(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let args = use_.args;
    let array = c.expr(&args[0], scope)?;
    let array = c.value(array)?;
    if !matches!(array.ty, Ty::Ptr(..) | Ty::Int { .. }) {
        return Err(c.error(Diagnostic::error(
            args[0].span,
            "join() takes a pointer to an array of string pointers (char **)",
        )));
    }
    let separator = match args.get(1) {
        Some(e) => String::from_utf8_lossy(&c.literal_string(e, "the separator")?).into_owned(),
        None => " ".to_string(),
    };
    c.join_separators.push(separator);
    statement_of(Output::Join {
        array,
        separator: c.join_separators.len() as u32 - 1,
    })
}

/// `sdt trace`'s statement: one hit with every argument of its site, and
/// pairs of (argument read as a string, argument holding its length or
/// -1). Only sdt's own scripts may use it.
fn sdt_event(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let mut strings = Vec::new();
    for pair in use_.args.chunks(2) {
        let arg = c.literal_int(&pair[0], scope, "a string argument")?;
        let len = match pair.get(1) {
            Some(e) => c.literal_int(e, scope, "a length argument")?,
            None => -1,
        };
        strings.push(crate::hir::StringArg {
            arg: arg.max(0) as usize,
            len_arg: usize::try_from(len).ok(),
        });
    }
    statement_of(Output::Event { strings })
}

fn count(_: &mut Checker<'_>, _: &Use<'_>, _: &mut Scope) -> R<Checked> {
    Ok(Checked::Aggregation(Agg::Count, None))
}

/// `sum`, `avg`, `min`, `max` and `stats` of one integer.
fn sum_like(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let v = c.integer_arg(use_.name, &use_.args[0], scope)?;
    // Only sum() follows its value's sign. bpftrace compares, averages
    // and totals every other one as an int64, so that a usdt argument (a
    // uint64) of -5 is -5 there, not 2^64-5.
    let signed = v.ty.is_signed();
    let agg = match use_.name {
        "sum" => Agg::Sum { signed },
        "avg" => Agg::Avg { signed: true },
        "min" => Agg::Min { signed: true },
        "max" => Agg::Max { signed: true },
        _ => Agg::Stats { signed: true },
    };
    Ok(Checked::Aggregation(agg, Some(v)))
}

fn hist(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let args = use_.args;
    let v = c.integer_arg(use_.name, &args[0], scope)?;
    let bits = match args.get(1) {
        Some(e) => c.literal_int(e, scope, "hist()'s second argument")?,
        None => 0,
    };
    if !(0..=5).contains(&bits) {
        return Err(c.error(Diagnostic::error(
            args[1].span,
            "hist()'s second argument must be between 0 and 5",
        )));
    }
    Ok(Checked::Aggregation(
        Agg::Hist { bits: bits as u8 },
        Some(v),
    ))
}

fn lhist(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let (args, span) = (use_.args, use_.span);
    let v = c.integer_arg(use_.name, &args[0], scope)?;
    let min = c.literal_int(&args[1], scope, "lhist()'s minimum")?;
    let max = c.literal_int(&args[2], scope, "lhist()'s maximum")?;
    let step = c.literal_int(&args[3], scope, "lhist()'s step")?;
    if step <= 0 || max <= min {
        return Err(c.error(
            Diagnostic::error(span, "lhist() needs min < max and a step above 0")
                .hint("lhist(value, min, max, step), for example lhist($ms, 0, 100, 10)"),
        ));
    }
    if (max - min) / step > 1000 {
        return Err(c.error(
            Diagnostic::error(span, "lhist() would have more than 1000 buckets")
                .hint("use a larger step"),
        ));
    }
    Ok(Checked::Aggregation(Agg::Lhist { min, max, step }, Some(v)))
}

/// `tseries(value, interval, count[, how])` (bpftrace 0.24): the interval
/// a non-negative literal number of nanoseconds (`100ms`), the count of
/// intervals kept a literal below a million, `how` one of `"avg"`,
/// `"max"`, `"min"` and `"sum"` (else the last value of an interval).
fn tseries(c: &mut Checker<'_>, use_: &Use<'_>, scope: &mut Scope) -> R<Checked> {
    let args = use_.args;
    let v = c.integer_arg(use_.name, &args[0], scope)?;
    let mut literal = |c: &mut Checker<'_>, e: &Expr, what: &str| -> R<u64> {
        let value = c.expr(e, scope)?;
        match value.kind {
            TKind::Int(n) if n >= 0 => Ok(n as u64),
            _ => Err(c.error(Diagnostic::error(
                e.span,
                format!("tseries: invalid {what} value (must be non-negative literal)"),
            ))),
        }
    };
    let interval_ns = literal(c, &args[1], "interval_ns")?;
    let count = literal(c, &args[2], "num_intervals")?;
    for (n, what, span) in [
        (interval_ns, "interval_ns", args[1].span),
        (count, "num_intervals", args[2].span),
    ] {
        if n < 1 {
            return Err(c.error(Diagnostic::error(
                span,
                format!("tseries() {what} must be >= 1 ({n} provided)"),
            )));
        }
    }
    if count >= 1_000_000 {
        return Err(c.error(Diagnostic::error(
            args[2].span,
            format!("tseries() num_intervals must be < 1000000 ({count} provided)"),
        )));
    }
    let how = match args.get(3) {
        None => TSeriesAgg::Last,
        Some(e) => {
            let name = c.literal_string(e, "tseries()'s aggregation")?;
            let name = String::from_utf8_lossy(&name).into_owned();
            TSeriesAgg::named(&name).ok_or_else(|| {
                c.error(Diagnostic::error(
                    e.span,
                    format!("tseries() expects one of the following aggregation functions: avg, max, min, sum (\"{name}\" provided)"),
                ))
            })?
        }
    };
    Ok(Checked::Aggregation(
        Agg::TSeries {
            interval_ns,
            count: count as u32,
            how,
        },
        Some(v),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_shapes_sane() {
        for (i, b) in BUILTINS.iter().enumerate() {
            assert!(
                BUILTINS[i + 1..].iter().all(|o| o.name != b.name),
                "{} twice",
                b.name
            );
            if let Shape::Function { min, max } | Shape::Both { min, max } = b.shape {
                assert!(min <= max, "{}", b.name);
            }
        }
        assert!(find("__sdt_event", false).is_none());
        assert!(find("__sdt_event", true).is_some());
        assert!(names(true).any(|n| n == "str"));
        assert!(names(false).all(|n| n != "str"));
    }

    /// The helper a script's only `nsecs` lowers to, or the error.
    fn clock(script: &str) -> Result<u32, String> {
        let parsed = crate::parser::parse(script).map_err(|d| d.message)?;
        let attach = super::super::offline_attach(&parsed, &[]).map_err(|d| d.message)?;
        let options = super::super::CheckOptions::default();
        let program = super::super::check(&parsed, &attach, &options, &mut super::super::NoObjects)
            .map_err(|d| d.to_text("test.bt", script))?;
        let crate::hir::TStmt::AssignMap { value, .. } = &program.probes[0].body[0] else {
            return Err("no assignment".into());
        };
        match value.kind {
            TKind::Helper(h) => Ok(h.helper),
            _ => Err(format!("{:?}", value.kind)),
        }
    }

    #[test]
    fn nsecs_reads_the_clock_it_names() {
        assert_eq!(clock("BEGIN { @t = nsecs; }"), Ok(helper::KTIME_GET_NS));
        assert_eq!(
            clock("BEGIN { @t = nsecs(monotonic); }"),
            Ok(helper::KTIME_GET_NS)
        );
        assert_eq!(
            clock("BEGIN { @t = nsecs(boot); }"),
            Ok(helper::KTIME_GET_BOOT_NS)
        );
        assert_eq!(
            clock("BEGIN { @t = nsecs(tai); }"),
            Ok(helper::KTIME_GET_TAI_NS)
        );
        let wrong = clock("BEGIN { @t = nsecs(boo); }").unwrap_err();
        assert!(wrong.contains("`boo` is not a clock"), "{wrong}");
        assert!(wrong.contains("boot"), "{wrong}");
        let not_a_name = clock("BEGIN { @t = nsecs(1); }").unwrap_err();
        assert!(
            not_a_name.contains("takes the name of a clock"),
            "{not_a_name}"
        );
        let too_many = clock("BEGIN { @t = nsecs(boot, tai); }").unwrap_err();
        assert!(
            too_many.contains("nsecs() takes 0 to 1 arguments"),
            "{too_many}"
        );
    }

    /// The HIR of the value a script's first map assignment stores, or
    /// the error.
    fn assigned(script: &str) -> Result<TExpr, String> {
        let parsed = crate::parser::parse(script).map_err(|d| d.message)?;
        let attach = super::super::offline_attach(&parsed, &[]).map_err(|d| d.message)?;
        let options = super::super::CheckOptions::default();
        let program = super::super::check(&parsed, &attach, &options, &mut super::super::NoObjects)
            .map_err(|d| d.to_text("test.bt", script))?;
        program.probes[0]
            .body
            .iter()
            .find_map(|s| match s {
                crate::hir::TStmt::AssignMap { value, .. } => Some(value.clone()),
                _ => None,
            })
            .ok_or_else(|| "no map assignment".to_string())
    }

    #[test]
    fn str_concat_joins_two_strings_in_a_string_that_holds_both() {
        let joined =
            assigned(r#"BEGIN { $dir = "/var/"; @path = str_concat($dir, "log"); }"#).unwrap();
        // "/var/" and "log": 8 characters and a NUL.
        assert_eq!(joined.ty, Ty::Str { size: 9 });
        let TKind::Concat(parts) = &joined.kind else {
            panic!("{:?}", joined.kind);
        };
        assert!(matches!(&parts[1].kind, TKind::Str(s) if s == b"log"));
        // As in bpftrace, no more than 1024 bytes.
        let long = format!(
            r#"BEGIN {{ @s = str_concat("{0}", "{0}"); }}"#,
            "x".repeat(600)
        );
        assert_eq!(assigned(&long).unwrap().ty, Ty::Str { size: 1024 });
        let number = assigned(r#"BEGIN { @s = str_concat("pid ", pid); }"#).unwrap_err();
        assert!(
            number.contains("str_concat() joins two strings, and this is uint32"),
            "{number}"
        );
        let one = assigned(r#"BEGIN { @s = str_concat("a"); }"#).unwrap_err();
        assert!(one.contains("str_concat() takes 2 arguments"), "{one}");
    }
}
