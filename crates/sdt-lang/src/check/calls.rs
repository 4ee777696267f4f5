//! Function calls: output (`printf`, `print`, `time`, ...), map
//! operations, aggregations, and the functions that compute values.

use super::{Checker, Scope, R};
use crate::ast::{Expr, ExprKind};
use crate::diag::{did_you_mean, suggest, Diagnostic, Span};
use crate::format::{Conv, Format};
use crate::hir::{Output, ProbeKind, TExpr, TKind, TStmt};
use crate::types::{Agg, Ty, INT64, UINT64};

/// Every function a script may call, for suggestions.
const FUNCTIONS: &[&str] = &[
    "printf",
    "print",
    "clear",
    "zero",
    "delete",
    "exit",
    "time",
    "strftime",
    "str",
    "buf",
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "stats",
    "hist",
    "lhist",
    "usym",
    "uaddr",
    "uptr",
    "kptr",
    "reg",
    "strncmp",
    "strcontains",
    "strerror",
    "ntop",
    "system",
    "cat",
    "signal",
    "join",
    "bswap",
    "sizeof",
    "offsetof",
    "ustack",
    "cgroupid",
];

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

impl Checker<'_> {
    fn arity(&mut self, name: &str, args: &[Expr], min: usize, max: usize, span: Span) -> R<()> {
        if (min..=max).contains(&args.len()) {
            return Ok(());
        }
        let wanted = if min == max {
            format!("{min} argument{}", super::plural(min))
        } else {
            format!("{min} to {max} arguments")
        };
        Err(self.error(Diagnostic::error(
            span,
            format!("{name}() takes {wanted}, not {}", args.len()),
        )))
    }

    /// A constant string argument.
    fn literal_string(&mut self, e: &Expr, what: &str) -> R<Vec<u8>> {
        match &e.kind {
            ExprKind::Str(s) => Ok(s.clone()),
            ExprKind::Param(_) => {
                let n = match e.kind {
                    ExprKind::Param(n) => n,
                    _ => unreachable!(),
                };
                Ok(self.positional(n).unwrap_or_default().as_bytes().to_vec())
            }
            _ => Err(self.error(Diagnostic::error(
                e.span,
                format!("{what} must be a string literal"),
            ))),
        }
    }

    /// A constant integer argument.
    fn literal_int(&mut self, e: &Expr, scope: &mut Scope, what: &str) -> R<i64> {
        let value = self.expr(e, scope)?;
        match value.kind {
            TKind::Int(v) => Ok(v),
            _ => Err(self.error(Diagnostic::error(
                e.span,
                format!("{what} must be a constant integer"),
            ))),
        }
    }

    fn map_arg(&mut self, e: &Expr, function: &str) -> R<(usize, Vec<Expr>)> {
        match &e.kind {
            ExprKind::Map(map) => Ok((self.known_map(&map.name, map.span)?, map.keys.clone())),
            _ => Err(self.error(
                Diagnostic::error(e.span, format!("{function}() takes a map"))
                    .hint(format!("write {function}(@name)")),
            )),
        }
    }

    fn format_of(&mut self, e: &Expr, args: &[TExpr], function: &str) -> R<u32> {
        let text = self.literal_string(e, &format!("the format of {function}()"))?;
        let format = match Format::parse(&text) {
            Ok(format) if format.specs().count() == args.len() => format,
            // A format that fits its values only as bpftrace reads formats
            // (any `%` but a bpftrace conversion is text) is read that way.
            parsed => match Format::parse_bpftrace(&text) {
                strict if strict.specs().count() == args.len() => strict,
                _ => parsed.map_err(|(at, why)| {
                    let start = e.span.start as usize + 1 + at;
                    self.error(
                        Diagnostic::error(Span::new(start, start + 1), why)
                            .related(e.span, "in this format"),
                    )
                })?,
            },
        };
        let specs: Vec<_> = format.specs().copied().collect();
        if specs.len() != args.len() {
            return Err(self.error(
                Diagnostic::error(
                    e.span,
                    format!(
                        "{function}() has {} conversion{} but {} value{}",
                        specs.len(),
                        super::plural(specs.len()),
                        args.len(),
                        super::plural(args.len())
                    ),
                )
                .hint("each % conversion takes one value; write %% for a literal %"),
            ));
        }
        for (spec, arg) in specs.iter().zip(args) {
            let integer_like = arg.ty.is_integer() || matches!(arg.ty, Ty::Ptr(_));
            let ok = match spec.conv {
                Conv::Str => !matches!(arg.ty, Ty::Agg(_) | Ty::Void),
                Conv::Raw => matches!(arg.ty, Ty::Buf { .. } | Ty::Str { .. }),
                Conv::Char => arg.ty.is_integer(),
                _ => integer_like,
            };
            if !ok {
                let wanted = match spec.conv {
                    Conv::Raw => "a buffer from buf()",
                    Conv::Str => "a value",
                    _ => "an integer",
                };
                return Err(self.error(
                    Diagnostic::error(
                        arg.span,
                        format!(
                            "this {function}() conversion wants {wanted}, and this is {}",
                            arg.ty.display(&self.registry)
                        ),
                    )
                    .hint(if arg.ty.is_string() {
                        "print strings with %s"
                    } else {
                        "check the conversion for this value"
                    }),
                ));
            }
        }
        self.formats.push(format);
        Ok(self.formats.len() as u32 - 1)
    }

    fn values(&mut self, args: &[Expr], scope: &mut Scope) -> R<Vec<TExpr>> {
        let mut out = Vec::new();
        for a in args {
            let v = self.expr(a, scope)?;
            let v = self.value(v)?;
            self.not_void(&v)?;
            out.push(v);
        }
        Ok(out)
    }

    /// Calls that are statements; `None` for calls that compute a value.
    pub(crate) fn call_stmt(
        &mut self,
        name: &str,
        args: &[Expr],
        span: Span,
        scope: &mut Scope,
    ) -> R<Option<TStmt>> {
        let output = |o| Ok(Some(TStmt::Output(o)));
        match name {
            "printf" | "system" | "cat" => {
                if args.is_empty() {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!("{name}() needs a format string"),
                    )));
                }
                if name == "system" && !self.options.allow_unsafe {
                    return Err(self.error(
                        Diagnostic::error(span, "system() runs commands, which is unsafe")
                            .hint("allow it with --unsafe"),
                    ));
                }
                let values = self.values(&args[1..], scope)?;
                let format = self.format_of(&args[0], &values, name)?;
                match name {
                    "printf" => output(Output::Printf {
                        format,
                        args: values,
                    }),
                    "system" => output(Output::System {
                        format,
                        args: values,
                    }),
                    _ => output(Output::Cat {
                        format,
                        args: values,
                    }),
                }
            }
            "print" => {
                self.arity(name, args, 1, 3, span)?;
                if let ExprKind::Map(map) = &args[0].kind {
                    if map.keys.is_empty() {
                        let id = self.known_map(&map.name, map.span)?;
                        let top = match args.get(1) {
                            Some(e) => self
                                .literal_int(e, scope, "the number of entries to print")?
                                .max(0) as u64,
                            None => 0,
                        };
                        let div = match args.get(2) {
                            Some(e) => self.literal_int(e, scope, "the divisor")?.max(1) as u64,
                            None => 1,
                        };
                        return output(Output::PrintMap { map: id, top, div });
                    }
                }
                if args.len() > 1 {
                    return Err(self.error(Diagnostic::error(
                        span,
                        "print() of a value takes no other arguments",
                    )));
                }
                let value = self.expr(&args[0], scope)?;
                let value = self.value(value)?;
                self.not_void(&value)?;
                if let Ty::Agg(_) = value.ty {
                    return Err(self.error(Diagnostic::error(
                        span,
                        "print() of an aggregation needs its map: print(@name)",
                    )));
                }
                output(Output::PrintValue(value))
            }
            "clear" | "zero" => {
                self.arity(name, args, 1, 1, span)?;
                let (id, keys) = self.map_arg(&args[0], name)?;
                if !keys.is_empty() {
                    return Err(self.error(Diagnostic::error(
                        args[0].span,
                        format!("{name}() takes a whole map, without a key"),
                    )));
                }
                output(if name == "clear" {
                    Output::Clear(id)
                } else {
                    Output::Zero(id)
                })
            }
            "delete" => {
                self.arity(name, args, 1, 2, span)?;
                let ExprKind::Map(map) = &args[0].kind else {
                    return Err(self.error(Diagnostic::error(
                        args[0].span,
                        "delete() takes a map element: delete(@m[key])",
                    )));
                };
                let mut map = map.clone();
                if let Some(key) = args.get(1) {
                    map.keys.push(key.clone());
                }
                let id = self.known_map(&map.name, map.span)?;
                let keys = self.map_keys(&map, scope)?;
                if keys.len() != self.maps[id].keys.len() {
                    return Err(self.error(
                        Diagnostic::error(
                            map.span,
                            format!(
                                "@{} has {} key{}",
                                map.name,
                                self.maps[id].keys.len(),
                                super::plural(self.maps[id].keys.len())
                            ),
                        )
                        .hint("to empty the whole map, use clear(@map)"),
                    ));
                }
                Ok(Some(TStmt::Delete { map: id, keys }))
            }
            "exit" => {
                self.arity(name, args, 0, 1, span)?;
                let code = match args.first() {
                    Some(e) => {
                        let v = self.expr(e, scope)?;
                        if !v.ty.is_integer() {
                            return Err(self.error(Diagnostic::error(
                                e.span,
                                "the exit code must be an integer",
                            )));
                        }
                        Some(v)
                    }
                    None => None,
                };
                output(Output::Exit(code))
            }
            "time" => {
                self.arity(name, args, 0, 1, span)?;
                let format = match args.first() {
                    Some(e) => String::from_utf8_lossy(&self.literal_string(e, "the time format")?)
                        .into_owned(),
                    None => "%H:%M:%S\n".to_string(),
                };
                self.time_formats.push(format);
                output(Output::Time(self.time_formats.len() as u32 - 1))
            }
            "join" => {
                self.arity(name, args, 1, 2, span)?;
                let array = self.expr(&args[0], scope)?;
                let array = self.value(array)?;
                if !matches!(array.ty, Ty::Ptr(_) | Ty::Int { .. }) {
                    return Err(self.error(Diagnostic::error(
                        args[0].span,
                        "join() takes a pointer to an array of string pointers (char **)",
                    )));
                }
                let separator = match args.get(1) {
                    Some(e) => String::from_utf8_lossy(&self.literal_string(e, "the separator")?)
                        .into_owned(),
                    None => " ".to_string(),
                };
                self.join_separators.push(separator);
                output(Output::Join {
                    array,
                    separator: self.join_separators.len() as u32 - 1,
                })
            }
            "__sdt_event" if self.options.internal => {
                // Pairs of (argument read as a string, argument holding its
                // length or -1).
                let mut strings = Vec::new();
                for pair in args.chunks(2) {
                    let arg = self.literal_int(&pair[0], scope, "a string argument")?;
                    let len = match pair.get(1) {
                        Some(e) => self.literal_int(e, scope, "a length argument")?,
                        None => -1,
                    };
                    strings.push(crate::hir::StringArg {
                        arg: arg.max(0) as usize,
                        len_arg: usize::try_from(len).ok(),
                    });
                }
                output(Output::Event { strings })
            }
            "signal" => Err(self.error(
                Diagnostic::error(
                    span,
                    "signal() is not supported: sdt never changes the traced program",
                )
                .hint("the traced program comes first; stop it from outside if you must"),
            )),
            "count" | "sum" | "avg" | "min" | "max" | "stats" | "hist" | "lhist" => Err(self
                .error(
                    Diagnostic::error(span, format!("{name}() must be assigned to a map"))
                        .hint(format!("write @name = {name}(...)")),
                )),
            _ => Ok(None),
        }
    }

    /// An aggregation call (the right side of `@m[k] = count()`), with its
    /// argument; `None` if `name` is not an aggregation.
    pub(crate) fn aggregation(
        &mut self,
        name: &str,
        args: &[Expr],
        span: Span,
        scope: &mut Scope,
    ) -> R<Option<(Agg, Option<TExpr>)>> {
        let agg = match name {
            "count" => {
                self.arity(name, args, 0, 0, span)?;
                return Ok(Some((Agg::Count, None)));
            }
            "sum" | "avg" | "min" | "max" | "stats" => {
                self.arity(name, args, 1, 1, span)?;
                let v = self.integer_arg(name, &args[0], scope)?;
                // Only sum() follows its value's sign. bpftrace compares,
                // averages and totals every other one as an int64, so that
                // a usdt argument (a uint64) of -5 is -5 there, not 2^64-5.
                let signed = v.ty.is_signed();
                let agg = match name {
                    "sum" => Agg::Sum { signed },
                    "avg" => Agg::Avg { signed: true },
                    "min" => Agg::Min { signed: true },
                    "max" => Agg::Max { signed: true },
                    _ => Agg::Stats { signed: true },
                };
                return Ok(Some((agg, Some(v))));
            }
            "hist" => {
                self.arity(name, args, 1, 2, span)?;
                let v = self.integer_arg(name, &args[0], scope)?;
                let bits = match args.get(1) {
                    Some(e) => self.literal_int(e, scope, "hist()'s second argument")?,
                    None => 0,
                };
                if !(0..=5).contains(&bits) {
                    return Err(self.error(Diagnostic::error(
                        args[1].span,
                        "hist()'s second argument must be between 0 and 5",
                    )));
                }
                (Agg::Hist { bits: bits as u8 }, v)
            }
            "lhist" => {
                self.arity(name, args, 4, 4, span)?;
                let v = self.integer_arg(name, &args[0], scope)?;
                let min = self.literal_int(&args[1], scope, "lhist()'s minimum")?;
                let max = self.literal_int(&args[2], scope, "lhist()'s maximum")?;
                let step = self.literal_int(&args[3], scope, "lhist()'s step")?;
                if step <= 0 || max <= min {
                    return Err(self.error(
                        Diagnostic::error(span, "lhist() needs min < max and a step above 0").hint(
                            "lhist(value, min, max, step), for example lhist($ms, 0, 100, 10)",
                        ),
                    ));
                }
                if (max - min) / step > 1000 {
                    return Err(self.error(
                        Diagnostic::error(span, "lhist() would have more than 1000 buckets")
                            .hint("use a larger step"),
                    ));
                }
                (Agg::Lhist { min, max, step }, v)
            }
            _ => return Ok(None),
        };
        Ok(Some((agg.0, Some(agg.1))))
    }

    fn integer_arg(&mut self, name: &str, e: &Expr, scope: &mut Scope) -> R<TExpr> {
        let v = self.expr(e, scope)?;
        let v = self.value(v)?;
        if !v.ty.is_integer() && !matches!(v.ty, Ty::Ptr(_)) {
            return Err(self.error(Diagnostic::error(
                e.span,
                format!(
                    "{name}() needs an integer, not {}",
                    v.ty.display(&self.registry)
                ),
            )));
        }
        Ok(v)
    }

    /// Calls that compute a value.
    pub(crate) fn call_expr(
        &mut self,
        name: &str,
        args: &[Expr],
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let typed = |kind, ty| Ok(TExpr { kind, ty, span });
        match name {
            "str" => {
                self.arity(name, args, 1, 2, span)?;
                // `str($1)` is the parameter's text, also when it is a
                // number (`str($1)` of 42 is "42", not a read at address 42).
                if let (crate::ast::ExprKind::Param(n), None) = (&args[0].kind, args.get(1)) {
                    let text = self.positional(*n).unwrap_or_default().as_bytes().to_vec();
                    let size = text.len() as u32 + 1;
                    return typed(TKind::Str(text), Ty::Str { size });
                }
                let ptr = self.expr(&args[0], scope)?;
                if ptr.ty.is_string() && args.len() == 1 {
                    return Ok(ptr);
                }
                if ptr.is_place() {
                    return self.value(ptr);
                }
                let ptr = self.value(ptr)?;
                if !matches!(ptr.ty, Ty::Int { .. } | Ty::Ptr(_)) {
                    return Err(self.error(Diagnostic::error(
                        args[0].span,
                        format!(
                            "str() reads a string from an address, and this is {}",
                            ptr.ty.display(&self.registry)
                        ),
                    )));
                }
                let len = match args.get(1) {
                    Some(e) => {
                        let v = self.expr(e, scope)?;
                        let v = self.value(v)?;
                        if !v.ty.is_integer() {
                            return Err(self.error(Diagnostic::error(
                                e.span,
                                "str()'s length must be an integer",
                            )));
                        }
                        Some(Box::new(v))
                    }
                    None => None,
                };
                typed(
                    TKind::StrRead {
                        ptr: Box::new(ptr),
                        len,
                    },
                    Ty::Str {
                        size: self.options.strlen,
                    },
                )
            }
            "buf" => {
                self.arity(name, args, 1, 3, span)?;
                let ptr = self.expr(&args[0], scope)?;
                let (ptr, len, size) = if ptr.is_place() {
                    if args.len() > 1 {
                        return Err(self
                            .error(Diagnostic::error(span, "buf() of an array takes no length")));
                    }
                    let size = self
                        .registry
                        .c_size(&ptr.ty)
                        .min(u64::from(super::MAX_STRLEN)) as u32;
                    let addr = TExpr {
                        kind: TKind::AddrOf(Box::new(ptr)),
                        ty: UINT64,
                        span,
                    };
                    (addr, TExpr::int(i64::from(size), UINT64, span), size)
                } else {
                    let ptr = self.value(ptr)?;
                    let Some(len) = args.get(1) else {
                        return Err(self.error(Diagnostic::error(
                            span,
                            "buf() of an address needs a length: buf(ptr, len)",
                        )));
                    };
                    let len = self.expr(len, scope)?;
                    let len = self.value(len)?;
                    let size = match (args.get(2), &len.kind) {
                        (Some(e), _) => {
                            self.literal_int(e, scope, "buf()'s maximum length")? as u32
                        }
                        (None, TKind::Int(v)) => *v as u32,
                        (None, _) => self.options.strlen,
                    };
                    (ptr, len, size.clamp(1, super::MAX_STRLEN))
                };
                if matches!(ptr.kind, TKind::AddrOf(ref p) if super::expr_is_ctx(p)) {
                    return Err(self.error(Diagnostic::error(
                        span,
                        "buf() of a tracepoint field is not supported",
                    )));
                }
                typed(
                    TKind::BufRead {
                        ptr: Box::new(ptr),
                        len: Box::new(len),
                    },
                    Ty::Buf { size },
                )
            }
            "usym" => {
                self.arity(name, args, 1, 1, span)?;
                let v = self.expr(&args[0], scope)?;
                let v = self.value(v)?;
                if !matches!(v.ty, Ty::Int { .. } | Ty::Ptr(_)) {
                    return Err(
                        self.error(Diagnostic::error(args[0].span, "usym() takes an address"))
                    );
                }
                typed(TKind::USym(Box::new(v)), Ty::USym)
            }
            "ustack" => {
                self.arity(name, args, 0, 2, span)?;
                let mut perf_mode = false;
                let mut depth = 127u32;
                for a in args {
                    match &a.kind {
                        ExprKind::Ident(mode) if mode == "perf" => perf_mode = true,
                        ExprKind::Ident(mode) if mode == "bpftrace" => perf_mode = false,
                        _ => {
                            let n = self.literal_int(a, scope, "ustack()'s depth")?;
                            if !(1..=127).contains(&n) {
                                return Err(self.error(Diagnostic::error(
                                    a.span,
                                    "ustack()'s depth must be between 1 and 127",
                                )));
                            }
                            depth = n as u32;
                        }
                    }
                }
                typed(TKind::UStack, Ty::UStack { perf_mode, depth })
            }
            "uaddr" => {
                self.arity(name, args, 1, 1, span)?;
                let symbol = self.literal_string(&args[0], "uaddr()'s symbol name")?;
                let symbol = String::from_utf8_lossy(&symbol).into_owned();
                self.uaddr(&symbol, scope.kind, args[0].span, span)
            }
            "uptr" | "kptr" => {
                self.arity(name, args, 1, 1, span)?;
                let v = self.expr(&args[0], scope)?;
                self.value(v)
            }
            "reg" => {
                self.arity(name, args, 1, 1, span)?;
                if !scope.kind.is_uprobe() {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!("reg() is not available in {} probes", scope.kind.name()),
                    )));
                }
                let reg = self.literal_string(&args[0], "reg()'s register name")?;
                let reg = String::from_utf8_lossy(&reg).into_owned();
                match REGISTERS.iter().find(|(n, _)| *n == reg) {
                    Some((_, offset)) => typed(TKind::Reg(*offset), UINT64),
                    None => {
                        let mut d = Diagnostic::error(
                            args[0].span,
                            format!("`{reg}` is not an x86-64 register in pt_regs"),
                        );
                        if let Some(h) = did_you_mean(&suggest(&reg, REGISTERS.iter().map(|r| r.0)))
                        {
                            d = d.hint(h);
                        }
                        Err(self.error(d))
                    }
                }
            }
            "strncmp" => {
                self.arity(name, args, 3, 3, span)?;
                let values = self.values(&args[..2], scope)?;
                let n = self.literal_int(&args[2], scope, "strncmp()'s length")?;
                let [lhs, rhs] = <[TExpr; 2]>::try_from(values).map_err(|_| crate::check::Stop)?;
                for side in [&lhs, &rhs] {
                    if !side.ty.is_string() {
                        return Err(self.error(Diagnostic::error(
                            side.span,
                            format!(
                                "strncmp() compares strings, and this is {}",
                                side.ty.display(&self.registry)
                            ),
                        )));
                    }
                }
                typed(
                    TKind::StrNCmp {
                        lhs: Box::new(lhs),
                        rhs: Box::new(rhs),
                        n: n.clamp(0, i64::from(super::MAX_STRLEN)) as u32,
                    },
                    INT64,
                )
            }
            "strcontains" => {
                self.arity(name, args, 2, 2, span)?;
                let values = self.values(args, scope)?;
                let [haystack, needle] =
                    <[TExpr; 2]>::try_from(values).map_err(|_| crate::check::Stop)?;
                for side in [&haystack, &needle] {
                    if !side.ty.is_string() {
                        return Err(self.error(Diagnostic::error(
                            side.span,
                            "strcontains() takes two strings",
                        )));
                    }
                }
                typed(
                    TKind::StrContains {
                        haystack: Box::new(haystack),
                        needle: Box::new(needle),
                    },
                    INT64,
                )
            }
            "ntop" => {
                self.arity(name, args, 1, 2, span)?;
                const AF_INET: i64 = 2;
                const AF_INET6: i64 = 10;
                let family = match args.len() {
                    2 => Some(self.literal_int(&args[0], scope, "the address family")?),
                    _ => None,
                };
                let addr = args.last().expect("arity checked");
                let v = self.expr(addr, scope)?;
                let v = self.value(v)?;
                let sixteen_bytes = matches!(
                    &v.ty,
                    Ty::Array { elem, len: 16 } if matches!(**elem, Ty::Int { bytes: 1, .. })
                );
                let v6 = match family {
                    None | Some(AF_INET) if v.ty.is_integer() => false,
                    None | Some(AF_INET6) if sixteen_bytes => true,
                    _ => {
                        return Err(self.error(
                            Diagnostic::error(
                                addr.span,
                                format!(
                                    "ntop() cannot read an address from {}",
                                    v.ty.display(&self.registry)
                                ),
                            )
                            .hint(
                                "ntop() takes an IPv4 address as an integer (AF_INET, 2) \
                                 or an IPv6 address as 16 bytes, such as a uint8[16] member (AF_INET6, 10)",
                            ),
                        ))
                    }
                };
                typed(TKind::Retype(Box::new(v)), Ty::Inet { v6 })
            }
            "strerror" => {
                self.arity(name, args, 1, 1, span)?;
                let v = self.expr(&args[0], scope)?;
                let v = self.value(v)?;
                if !v.ty.is_integer() {
                    return Err(self.error(Diagnostic::error(
                        args[0].span,
                        "strerror() takes an errno value",
                    )));
                }
                typed(TKind::Retype(Box::new(v)), Ty::Strerror)
            }
            "strftime" => {
                self.arity(name, args, 2, 2, span)?;
                let format =
                    String::from_utf8_lossy(&self.literal_string(&args[0], "strftime()'s format")?)
                        .into_owned();
                let v = self.expr(&args[1], scope)?;
                let v = self.value(v)?;
                if !v.ty.is_integer() {
                    return Err(self.error(Diagnostic::error(
                        args[1].span,
                        "strftime() takes a time in nanoseconds, such as nsecs",
                    )));
                }
                self.time_formats.push(format);
                typed(
                    TKind::Strftime(Box::new(v)),
                    Ty::Timestamp {
                        format: self.time_formats.len() as u32 - 1,
                    },
                )
            }
            "bswap" => {
                self.arity(name, args, 1, 1, span)?;
                let v = self.expr(&args[0], scope)?;
                let v = self.value(v)?;
                if !v.ty.is_integer() {
                    return Err(
                        self.error(Diagnostic::error(args[0].span, "bswap() takes an integer"))
                    );
                }
                let ty = v.ty.clone();
                typed(TKind::Bswap(Box::new(v)), ty)
            }
            "cgroupid" => {
                Err(self.error(Diagnostic::error(span, "cgroupid() is not supported yet")))
            }
            "printf" | "print" | "clear" | "zero" | "delete" | "exit" | "time" | "join"
            | "system" | "cat" | "signal" => Err(self.error(
                Diagnostic::error(span, format!("{name}() returns no value"))
                    .hint(format!("call {name}() as a statement of its own")),
            )),
            "count" | "sum" | "avg" | "min" | "max" | "stats" | "hist" | "lhist" => Err(self
                .error(
                    Diagnostic::error(span, format!("{name}() must be assigned to a map"))
                        .hint(format!("write @name = {name}(...)")),
                )),
            _ => {
                let mut d = Diagnostic::error(span, format!("unknown function `{name}`"));
                if let Some(h) = did_you_mean(&suggest(name, FUNCTIONS.iter().copied())) {
                    d = d.hint(h);
                }
                Err(self.error(d))
            }
        }
    }
}

impl Checker<'_> {
    /// `uaddr("symbol")`: where a global of the probe's object is in the
    /// traced process. The symbol table gives its link-time address;
    /// the program adds the distance between the probe's run-time and
    /// link-time addresses, so it is right for PIE and shared libraries too.
    fn uaddr(&mut self, symbol: &str, kind: ProbeKind, arg_span: Span, span: Span) -> R<TExpr> {
        if !matches!(kind, ProbeKind::Usdt | ProbeKind::Uprobe) {
            return Err(self.error(
                Diagnostic::error(
                    span,
                    format!("uaddr() is not available in {} probes", kind.name()),
                )
                .hint(
                    "use it in a usdt or uprobe probe: there the probe's address tells where \
                     its object is loaded (in a uretprobe, save it in a map keyed by tid)",
                ),
            ));
        }
        let Some(object) = self.current_target.object.clone() else {
            return Err(self.error(Diagnostic::error(span, "this probe has no object")));
        };
        let target = self.current_target.clone();
        let definitions = match self.objects.data_symbols(&target, symbol) {
            Ok(d) => d,
            Err(refusal) => return Err(self.refused(span, refusal)),
        };
        match definitions[..] {
            [(address, size)] => {
                // bpftrace's rule: the symbol's size picks the pointee.
                let bytes = match size {
                    1 | 2 | 4 => size as u8,
                    _ => 8,
                };
                self.per_site = true;
                Ok(TExpr {
                    kind: TKind::UAddr(address),
                    ty: Ty::Ptr(Box::new(Ty::int(bytes, false))),
                    span,
                })
            }
            [] => Err(self.error(
                Diagnostic::error(
                    arg_span,
                    format!("{} defines no symbol `{symbol}`", object.display()),
                )
                .hint("uaddr() reads the symbol table of the probe's own object"),
            )),
            _ => Err(self.error(Diagnostic::error(
                arg_span,
                format!(
                    "{} defines `{symbol}` at {} addresses (static variables of one name \
                     in several source files); uaddr() cannot tell which is meant",
                    object.display(),
                    definitions.len()
                ),
            ))),
        }
    }
}
