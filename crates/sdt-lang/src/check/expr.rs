//! Expressions: builtins, operators, casts, and reading C data.

use super::{Checker, Scope, Stop, UsdtArg, R};
use crate::ast::{ArrayLen, BinOp, Expr, ExprKind, MapRef, Stmt, TypeName, UnOp};
use crate::diag::{did_you_mean, suggest, Diagnostic, Span};
use crate::hir::{ProbeKind, TExpr, TKind};
use crate::types::{Space, Ty, BOOL, INT64, UINT64};

use super::builtins::{self, Checked, Role, Use};

/// What `x++`, `--x` and the like say, besides their target.
#[derive(Clone, Copy)]
struct IncDec {
    /// 1 or -1.
    delta: i64,
    /// `++x`: the value after the step.
    prefix: bool,
    /// Where the variable or map element is written.
    target: Span,
    /// The whole expression.
    span: Span,
}

impl Checker<'_> {
    /// Checks an expression: each kind of expression has its own method,
    /// below this one or, for the larger families (calls, fields, casts,
    /// operators), further down the file.
    pub(crate) fn expr(&mut self, e: &Expr, scope: &mut Scope) -> R<TExpr> {
        let span = e.span;
        match &e.kind {
            ExprKind::Int(n) => self.int_literal(*n, span),
            ExprKind::Str(bytes) => Ok(TExpr {
                kind: TKind::Str(bytes.clone()),
                ty: Ty::Str {
                    size: bytes.len() as u32 + 1,
                },
                span,
            }),
            ExprKind::Ident(name) => self.ident(name, span, scope),
            ExprKind::Var(name) => self.var(name, span, scope),
            ExprKind::Map(map) => self.map_read(map, span, scope),
            ExprKind::Param(n) => self.param(*n, span),
            ExprKind::ParamCount => Ok(TExpr::int(self.options.params.len() as i64, INT64, span)),
            ExprKind::Call { name, args, .. } => self.call_value(name, args, span, scope),
            ExprKind::Unary { op, expr } => self.unary(*op, expr, span, scope),
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, span, scope),
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => self.ternary(cond, then, otherwise, span, scope),
            ExprKind::Cast { ty, expr } => {
                if ty.array == Some(ArrayLen::FromValue) {
                    let value = self.expr(expr, scope)?;
                    let value = self.value(value)?;
                    let target = self.array_to_fit(ty, &value)?;
                    return self.cast(value, target, span);
                }
                let target = self.type_in_scope(ty, scope)?;
                let value = self.expr(expr, scope)?;
                self.cast(value, target, span)
            }
            ExprKind::Field {
                expr,
                field,
                field_span,
                arrow,
            } => self.member(expr, field, *field_span, *arrow, span, scope),
            ExprKind::TupleIndex { expr, index } => self.tuple_index(expr, *index, span, scope),
            ExprKind::Index { expr, index } => {
                let base = self.expr(expr, scope)?;
                let index = self.expr(index, scope)?;
                self.index(base, index, span)
            }
            ExprKind::Tuple(items) => self.tuple(items, span, scope),
            ExprKind::Record(fields) => self.record(fields, span, scope),
            ExprKind::IncDec {
                target,
                increment,
                prefix,
            } => self.inc_dec(target, *increment, *prefix, span, scope),
            ExprKind::Block { stmts, value } => {
                self.block_value(stmts, value.as_deref(), span, scope)
            }
            ExprKind::SizeofType(ty) => {
                let t = self.type_in_scope(ty, scope)?;
                Ok(TExpr::int(
                    self.registry.bpftrace_size(&t) as i64,
                    UINT64,
                    span,
                ))
            }
            ExprKind::Offsetof { ty, field } => self.offsetof(ty, field, span),
        }
    }

    /// `$name`: a variable this probe assigned in a block still open.
    fn var(&mut self, name: &str, span: Span, scope: &mut Scope) -> R<TExpr> {
        if let Some(i) = scope.lookup(name) {
            // `let $x;` read before any assignment: the integer 0.
            if scope.vars[i].1 == Ty::Void {
                scope.vars[i].1 = INT64;
            }
            return Ok(TExpr {
                kind: TKind::Var(i),
                ty: scope.vars[i].1.clone(),
                span,
            });
        }
        if self.read_after_block(name, span, scope) && !self.final_pass {
            // Read again once the variable is one for the whole probe.
            return Err(Stop);
        }
        if scope.ended(name) {
            return Err(self.error(
                Diagnostic::error(span, format!("${name} is not seen here"))
                    .label("assigned only inside a block that has ended")
                    .hint(format!(
                        "a variable belongs to the block where it is first assigned; declare it before that block with `let ${name};`"
                    )),
            ));
        }
        let names = scope.visible_names();
        let mut d = Diagnostic::error(span, format!("${name} is used before it is assigned"))
            .label("not assigned yet in this probe");
        if let Some(h) = did_you_mean(&suggest(
            &format!("${name}"),
            names.iter().map(String::as_str),
        )) {
            d = d.hint(h);
        }
        Err(self.error(d))
    }

    /// `@name[keys]` read: its value, or an aggregation's single value.
    fn map_read(&mut self, map: &MapRef, span: Span, scope: &mut Scope) -> R<TExpr> {
        let keys = self.map_keys(map, scope)?;
        let id = self.known_map(&map.name, map.span)?;
        let decl = self.maps[id].clone();
        if decl.keys.len() != keys.len() {
            return Err(self.error(
                Diagnostic::error(
                    map.span,
                    format!(
                        "@{} has {} key{}, but {} {} given here",
                        map.name,
                        decl.keys.len(),
                        super::plural(decl.keys.len()),
                        keys.len(),
                        if keys.len() == 1 { "is" } else { "are" }
                    ),
                )
                .related(decl.span, "first assigned here"),
            ));
        }
        let Ty::Agg(agg) = decl.value else {
            return Ok(TExpr {
                kind: TKind::MapGet { map: id, keys },
                ty: decl.value,
                span,
            });
        };
        let Some(ty) = agg.read_type() else {
            return Err(self.error(
                Diagnostic::error(
                    span,
                    format!(
                        "@{} holds {}(), which has no single value to read in a probe",
                        map.name,
                        agg.name()
                    ),
                )
                .hint("print it with print(); count(), sum(), min(), max() and avg() can be read"),
            ));
        };
        Ok(TExpr {
            kind: TKind::AggGet { map: id, keys },
            ty,
            span,
        })
    }

    /// `cond ? then : otherwise`.
    fn ternary(
        &mut self,
        cond: &Expr,
        then: &Expr,
        otherwise: &Expr,
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let cond = self.expr(cond, scope)?;
        let cond = self.condition(cond)?;
        let then = self.expr(then, scope)?;
        let then = self.value(then)?;
        let otherwise = self.expr(otherwise, scope)?;
        let otherwise = self.value(otherwise)?;
        let ty = self.ternary_type(&then, &otherwise, span)?;
        Ok(TExpr {
            kind: TKind::Ternary {
                cond: Box::new(cond),
                then: Box::new(then),
                otherwise: Box::new(otherwise),
            },
            ty,
            span,
        })
    }

    /// `base.field` or `base->field`; on `args`, a uprobe's parameter or a
    /// USDT argument by its DWARF name.
    fn member(
        &mut self,
        base: &Expr,
        field: &str,
        field_span: Span,
        arrow: bool,
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let on_args = matches!(&base.kind, ExprKind::Ident(n) if n == "args");
        // A uprobe's `args` are its function's parameters.
        if on_args && matches!(scope.kind, ProbeKind::Uprobe | ProbeKind::Uretprobe) {
            return self.uprobe_arg(field, field_span, span, scope.kind);
        }
        // A USDT probe's `args` are its arguments as DWARF names them,
        // when there is an object to read DWARF from.
        if on_args && scope.kind == ProbeKind::Usdt && self.current_target.object.is_some() {
            return self.usdt_arg(field, field_span, span);
        }
        let base = self.expr(base, scope)?;
        // A struct parameter that a uprobe read from registers.
        if matches!(base.kind, TKind::Fields(_)) && !arrow {
            return self.fields_member(base, field, field_span, span);
        }
        self.field(base, field, field_span, arrow, span, scope)
    }

    /// `tuple.N`.
    fn tuple_index(&mut self, tuple: &Expr, index: u32, span: Span, scope: &mut Scope) -> R<TExpr> {
        let tuple = self.expr(tuple, scope)?;
        let tuple = self.value(tuple)?;
        let Ty::Tuple(items) = &tuple.ty else {
            return Err(self.error(Diagnostic::error(
                span,
                format!(
                    "`.{index}` needs a tuple, not {}",
                    tuple.ty.display(&self.registry)
                ),
            )));
        };
        let Some(item) = items.get(index as usize).cloned() else {
            return Err(self.error(Diagnostic::error(
                span,
                format!(
                    "the tuple has {} items; `.{index}` is out of range",
                    items.len()
                ),
            )));
        };
        Ok(TExpr {
            kind: TKind::TupleIndex {
                tuple: Box::new(tuple),
                index: index as usize,
            },
            ty: item,
            span,
        })
    }

    /// `(a, b, ...)`: each item widened as a map key or value would be.
    fn tuple(&mut self, items: &[Expr], span: Span, scope: &mut Scope) -> R<TExpr> {
        let mut values = Vec::new();
        for item in items {
            let v = self.expr(item, scope)?;
            let v = self.value(v)?;
            self.not_void(&v)?;
            values.push(v);
        }
        // Items keep their types (`(int8)1` is one byte to `sizeof`).
        let ty = Ty::Tuple(values.iter().map(|v| v.ty.clone()).collect());
        Ok(TExpr {
            kind: TKind::Tuple(values),
            ty,
            span,
        })
    }

    /// `x++`, `--x` and the like, on a variable or a map element: by the
    /// size of what a pointer points to, or by one.
    fn inc_dec(
        &mut self,
        target: &Expr,
        increment: bool,
        prefix: bool,
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let step = IncDec {
            delta: if increment { 1 } else { -1 },
            prefix,
            target: target.span,
            span,
        };
        match &target.kind {
            ExprKind::Var(name) => self.var_inc_dec(name, step, scope),
            ExprKind::Map(map) => self.map_inc_dec(map, step, scope),
            // The parser makes `++` and `--` of nothing else.
            _ => Err(self.error(Diagnostic::error(
                target.span,
                "`++` and `--` need a variable or a map element",
            ))),
        }
    }

    fn var_inc_dec(&mut self, name: &str, step: IncDec, scope: &mut Scope) -> R<TExpr> {
        let IncDec {
            delta,
            prefix,
            target,
            span,
        } = step;
        let Some(var) = scope.lookup(name) else {
            return Err(self.error(Diagnostic::error(
                target,
                format!("${name} is used before it is assigned"),
            )));
        };
        let ty = scope.vars[var].1.clone();
        let Some(step) = self.incdec_step(&ty) else {
            return Err(self.error(Diagnostic::error(
                target,
                format!(
                    "`++` and `--` need an integer or a pointer; ${name} is {}",
                    ty.display(&self.registry)
                ),
            )));
        };
        Ok(TExpr {
            kind: TKind::VarIncDec {
                var,
                delta: delta * step,
                prefix,
            },
            ty,
            span,
        })
    }

    /// A map not yet assigned starts as an integer.
    fn map_inc_dec(&mut self, map: &MapRef, step: IncDec, scope: &mut Scope) -> R<TExpr> {
        let IncDec {
            delta,
            prefix,
            target,
            span,
        } = step;
        let keys = self.map_keys(map, scope)?;
        let id = self.learn_map(map, &keys, INT64, span)?;
        let ty = self.maps[id].value.clone();
        let Some(step) = self.incdec_step(&ty) else {
            return Err(self.error(Diagnostic::error(
                target,
                format!(
                    "`++` and `--` need an integer or a pointer; @{} holds {}",
                    map.name,
                    ty.display(&self.registry)
                ),
            )));
        };
        Ok(TExpr {
            kind: TKind::MapIncDec {
                map: id,
                keys,
                delta: delta * step,
                prefix,
            },
            ty,
            span,
        })
    }

    /// `{ stmts; value }`: the variables it assigns end with it.
    fn block_value(
        &mut self,
        stmts: &[Stmt],
        value: Option<&Expr>,
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        scope.blocks.push(Vec::new());
        let body = self.statements(stmts, scope);
        let value = match value {
            Some(v) => self.expr(v, scope).and_then(|v| self.value(v)),
            None => Err(self.error(
                Diagnostic::error(span, "this block gives no value")
                    .hint("end it with an expression and no `;`: { let $x = 1; $x + 1 }"),
            )),
        };
        scope.blocks.pop();
        let value = value?;
        let ty = value.ty.clone();
        Ok(TExpr {
            kind: TKind::Block {
                stmts: body,
                value: Box::new(value),
            },
            ty,
            span,
        })
    }

    /// `offsetof(struct s, a.b)`: the offset of a member, through nested
    /// records.
    fn offsetof(&mut self, ty: &TypeName, field: &str, span: Span) -> R<TExpr> {
        let Ty::Record(id) = self.resolve_type(ty)? else {
            return Err(self.error(Diagnostic::error(
                ty.span,
                "offsetof() needs a struct or union",
            )));
        };
        let mut record = id;
        let mut offset = 0;
        for part in field.split('.') {
            let Some(found) = self.registry.field(record, part) else {
                return Err(self.unknown_field(record, part, span));
            };
            offset += found.offset;
            record = match found.ty {
                Ty::Record(inner) => inner,
                _ => record,
            };
        }
        Ok(TExpr::int(offset as i64, UINT64, span))
    }

    fn int_literal(&mut self, n: i128, span: Span) -> R<TExpr> {
        if let Ok(v) = i64::try_from(n) {
            return Ok(TExpr::int(v, INT64, span));
        }
        // As in bpftrace 0.22 and later, a literal above i64::MAX is a
        // uint64: `0xffffffffffffffff` is 18446744073709551615.
        if let Ok(v) = u64::try_from(n) {
            return Ok(TExpr::int(v as i64, UINT64, span));
        }
        Err(self.error(Diagnostic::error(
            span,
            "this integer does not fit in 64 bits",
        )))
    }

    fn param(&mut self, n: u32, span: Span) -> R<TExpr> {
        let value = self.positional(n).unwrap_or_default().to_string();
        let as_int = value
            .strip_prefix('-')
            .map(|v| crate::lexer::parse_int(v).ok().map(|x| -(x as i128)))
            .unwrap_or_else(|| crate::lexer::parse_int(&value).ok().map(i128::from));
        match as_int {
            Some(v) => self.int_literal(v, span),
            // An absent parameter is 0 where a number is wanted and the
            // empty string where a string is, as in bpftrace.
            None if value.is_empty() => Ok(TExpr::int(0, INT64, span)),
            None => Ok(TExpr {
                kind: TKind::Str(value.clone().into_bytes()),
                ty: Ty::Str {
                    size: value.len() as u32 + 1,
                },
                span,
            }),
        }
    }

    fn ident(&mut self, name: &str, span: Span, scope: &mut Scope) -> R<TExpr> {
        let typed = |kind, ty| Ok(TExpr { kind, ty, span });
        match name {
            "true" => return typed(TKind::Int(1), BOOL),
            "false" => return typed(TKind::Int(0), BOOL),
            _ => {}
        }
        if let Some(builtin) = builtins::find(name, self.options.internal) {
            let use_ = Use {
                name,
                args: &[],
                span,
            };
            return match self.builtin(builtin, &use_, false, scope)? {
                Checked::Value(v) => Ok(v),
                _ => Err(Stop),
            };
        }
        if let Some(n) = name.strip_prefix("arg").and_then(|n| n.parse::<u8>().ok()) {
            return self.arg(n, span, scope);
        }
        if let Some(n) = name.strip_prefix("sarg").and_then(|n| n.parse::<u8>().ok()) {
            if scope.kind != ProbeKind::Uprobe {
                return Err(self.error(Diagnostic::error(
                    span,
                    format!("`{name}` is only available in uprobe probes"),
                )));
            }
            return typed(TKind::SArg(n), INT64);
        }
        if let Some(value) = self.defines.get(name).cloned() {
            return self.expr(&value, scope);
        }
        if let Some((id, value)) = self.registry.enumerator(name) {
            let def = self.registry.enum_def(id);
            let ty = Ty::Enum {
                id,
                bytes: def.bytes,
                signed: def.signed,
            };
            return typed(TKind::Int(value), ty);
        }
        let mut d = Diagnostic::error(span, format!("unknown identifier `{name}`"));
        let mut known: Vec<&str> = builtins::names(false).collect();
        known.extend(["arg0", "arg1", "arg2", "arg3", "sarg0", "sarg1"]);
        if let Some(h) = did_you_mean(&suggest(name, known)) {
            d = d.hint(h);
        } else {
            d = d.hint("variables start with `$` and maps with `@`");
        }
        Err(self.error(d))
    }

    fn arg(&mut self, n: u8, span: Span, scope: &Scope) -> R<TExpr> {
        match scope.kind {
            ProbeKind::Usdt if n < 12 => {}
            ProbeKind::Uprobe | ProbeKind::Uretprobe if n < 6 => {}
            ProbeKind::Usdt => {
                return Err(self.error(Diagnostic::error(
                    span,
                    "USDT probes have at most 12 arguments (arg0 to arg11)",
                )))
            }
            ProbeKind::Uprobe | ProbeKind::Uretprobe => {
                return Err(self.error(
                    Diagnostic::error(
                        span,
                        format!("arg{n} is not in a register: uprobes read arg0 to arg5"),
                    )
                    .hint("read later arguments from the stack with sargN"),
                ))
            }
            ProbeKind::Tracepoint => {
                return Err(self.error(
                    Diagnostic::error(
                        span,
                        format!("arg{n} is not available in tracepoint probes"),
                    )
                    .hint("read the tracepoint's fields as args.NAME"),
                ))
            }
            other => {
                return Err(self.error(Diagnostic::error(
                    span,
                    format!("arg{n} is not available in {} probes", other.name()),
                )))
            }
        }
        self.args_read |= 1 << n;
        Ok(TExpr {
            kind: TKind::Arg(n),
            ty: UINT64,
            span,
        })
    }

    pub(crate) fn args_record(&mut self, span: Span, scope: &Scope) -> R<TExpr> {
        if matches!(scope.kind, ProbeKind::Uprobe | ProbeKind::Uretprobe) {
            return self.uprobe_args(span, scope.kind);
        }
        match &scope.tracepoint {
            Some((id, _)) => Ok(TExpr {
                kind: TKind::CtxRecord,
                ty: Ty::Record(*id),
                span,
            }),
            None => Err(self.error(
                Diagnostic::error(
                    span,
                    format!("`args` is not available in {} probes", scope.kind.name()),
                )
                .hint(if scope.kind.is_uprobe() {
                    "read arguments as arg0, arg1, ..."
                } else {
                    "`args` holds a tracepoint's fields"
                }),
            )),
        }
    }

    /// Turns a place into a value: a `char[N]` into a string, another
    /// struct or array into a copy of its bytes. As in bpftrace, only
    /// (signed) `char` arrays are strings: `unsigned char b[4]` is a list
    /// of four numbers.
    pub(crate) fn value(&mut self, e: TExpr) -> R<TExpr> {
        if !e.is_place() {
            return Ok(e);
        }
        let span = e.span;
        Ok(match &e.ty {
            Ty::Array { elem, len }
                if matches!(
                    **elem,
                    Ty::Int {
                        bytes: 1,
                        signed: true
                    }
                ) =>
            {
                let size = (*len as u32).clamp(1, super::MAX_STRLEN - 1) + 1;
                TExpr {
                    kind: TKind::ArrayStr(Box::new(e)),
                    ty: Ty::Str { size },
                    span,
                }
            }
            ty => {
                let size = self.registry.c_size(ty);
                if size > u64::from(super::MAX_STRLEN) {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!(
                            "{} is {size} bytes, more than a value may hold ({})",
                            ty.display(&self.registry),
                            super::MAX_STRLEN
                        ),
                    )));
                }
                let ty = ty.clone();
                TExpr {
                    kind: TKind::CopyPlace(Box::new(e)),
                    ty,
                    span,
                }
            }
        })
    }

    pub(crate) fn not_void(&mut self, e: &TExpr) -> R<()> {
        if e.ty == Ty::Void {
            return Err(self.error(Diagnostic::error(e.span, "this call returns no value")));
        }
        Ok(())
    }

    /// A value tested for truth: an integer or a pointer.
    pub(crate) fn condition(&mut self, e: TExpr) -> R<TExpr> {
        let e = self.value(e)?;
        if matches!(
            e.ty,
            Ty::Int { .. } | Ty::Bool | Ty::Enum { .. } | Ty::Ptr(..)
        ) {
            return Ok(e);
        }
        Err(self.error(
            Diagnostic::error(
                e.span,
                format!(
                    "a condition must be an integer, not {}",
                    e.ty.display(&self.registry)
                ),
            )
            .hint(if e.ty.is_string() {
                "compare strings with == or strncmp()"
            } else {
                "compare it with something"
            }),
        ))
    }

    fn unary(&mut self, op: UnOp, operand: &Expr, span: Span, scope: &mut Scope) -> R<TExpr> {
        let value = self.expr(operand, scope)?;
        match op {
            UnOp::Deref => {
                let value = self.value(value)?;
                let Ty::Ptr(pointee, _) = value.ty.clone() else {
                    return Err(self.error(
                        Diagnostic::error(
                            span,
                            format!(
                                "`*` needs a pointer, not {}",
                                value.ty.display(&self.registry)
                            ),
                        )
                        .hint("cast it first: *(uint32 *)arg0"),
                    ));
                };
                self.pointee_place(value, *pointee, span)
            }
            // A variable's address (bpftrace 0.24 and later): it lives in
            // the program's own memory, the kernel's, while the probe runs.
            UnOp::AddrOf if matches!(value.kind, TKind::Var(_)) => Ok(TExpr {
                ty: Ty::Ptr(Box::new(value.ty.clone()), Space::Kernel),
                kind: TKind::AddrOf(Box::new(value)),
                span,
            }),
            UnOp::AddrOf => {
                if !matches!(
                    value.kind,
                    TKind::UserPlace(_)
                        | TKind::Field { .. }
                        | TKind::Index { .. }
                        | TKind::Load { .. }
                ) {
                    return Err(self.error(Diagnostic::error(
                        span,
                        "`&` needs a variable, or a field or an element of traced memory",
                    )));
                }
                let (place, ty) = match value.kind {
                    TKind::Load { place, .. } => (*place, value.ty),
                    _ => (value.clone(), value.ty.clone()),
                };
                if super::expr_is_ctx(&place) {
                    return Err(self.error(Diagnostic::error(
                        span,
                        "a tracepoint's fields have no address in the traced program",
                    )));
                }
                let space = place_space(&place);
                Ok(TExpr {
                    kind: TKind::AddrOf(Box::new(place)),
                    ty: Ty::Ptr(Box::new(ty), space),
                    span,
                })
            }
            UnOp::Neg | UnOp::BitNot | UnOp::Not => {
                let value = self.value(value)?;
                if !value.ty.is_integer() && !matches!(value.ty, Ty::Ptr(..)) {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!(
                            "`{}` needs an integer, not {}",
                            match op {
                                UnOp::Neg => "-",
                                UnOp::BitNot => "~",
                                _ => "!",
                            },
                            value.ty.display(&self.registry)
                        ),
                    )));
                }
                // `-` and `~` keep their operand's type, as in bpftrace:
                // `-arg0` is a uint64, `~(uint32)0` is 4294967295. A
                // positive literal is unsigned to bpftrace 0.22 and later,
                // so `~10` is 18446744073709551605.
                if let (UnOp::BitNot, ExprKind::Int(n)) = (op, &operand.kind) {
                    if let Ok(v) = u64::try_from(*n) {
                        return Ok(TExpr::int(!v as i64, UINT64, span));
                    }
                }
                if let (UnOp::Neg | UnOp::BitNot, TKind::Int(v)) = (op, &value.kind) {
                    let folded = if op == UnOp::Neg {
                        v.wrapping_neg()
                    } else {
                        !v
                    };
                    return Ok(TExpr::int(
                        value.ty.truncate(folded),
                        value.ty.clone(),
                        span,
                    ));
                }
                let ty = match (op, &value.ty) {
                    (UnOp::Not, _) => BOOL,
                    (_, Ty::Ptr(..)) => UINT64,
                    (_, ty) => super::widen(ty),
                };
                Ok(TExpr {
                    kind: TKind::Unary {
                        op,
                        expr: Box::new(value),
                    },
                    ty,
                    span,
                })
            }
        }
    }

    /// What `*ptr` is: a scalar read, or a place for a struct or array.
    pub(crate) fn pointee_place(&mut self, ptr: TExpr, pointee: Ty, span: Span) -> R<TExpr> {
        self.complete(&pointee, span)?;
        match pointee {
            Ty::Void => Err(self.error(
                Diagnostic::error(span, "cannot read through a `void *`")
                    .hint("cast it to a pointer type first"),
            )),
            Ty::Record(id) if self.registry.record(id).incomplete => Err(self.error(
                Diagnostic::error(
                    span,
                    format!(
                        "`{}` is declared but not defined",
                        self.registry.record(id).name
                    ),
                )
                .hint("define the struct in the script"),
            )),
            ty @ (Ty::Record(_) | Ty::Array { .. } | Ty::Tuple(_)) => Ok(TExpr {
                kind: TKind::UserPlace(Box::new(ptr)),
                ty,
                span,
            }),
            ty if ty.is_scalar() => {
                let place = TExpr {
                    kind: TKind::UserPlace(Box::new(ptr)),
                    ty: ty.clone(),
                    span,
                };
                Ok(TExpr {
                    kind: TKind::Load {
                        place: Box::new(place),
                        bitfield: None,
                    },
                    ty,
                    span,
                })
            }
            other => Err(self.error(Diagnostic::error(
                span,
                format!(
                    "cannot read a {} through a pointer",
                    other.display(&self.registry)
                ),
            ))),
        }
    }

    pub(crate) fn binary(
        &mut self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let l = self.expr(lhs, scope)?;
        let l = self.value(l)?;
        let r = self.expr(rhs, scope)?;
        let r = self.value(r)?;
        self.not_void(&l)?;
        self.not_void(&r)?;
        let (l, r) = match self.value_equality(op, l, r, span)? {
            Ok(equality) => return Ok(equality),
            Err(sides) => sides,
        };
        for side in [&l, &r] {
            // Compared, but no arithmetic.
            let printable_only = matches!(side.ty, Ty::Shown(_));
            if !side.ty.is_scalar() || (printable_only && !op.is_comparison()) {
                return Err(self.error(Diagnostic::error(
                    side.span,
                    format!(
                        "`{}` needs integers, and this is {}",
                        op.symbol(),
                        side.ty.display(&self.registry)
                    ),
                )));
            }
        }
        if matches!(op, BinOp::And | BinOp::Or) {
            return Ok(TExpr {
                kind: TKind::Logical {
                    and: op == BinOp::And,
                    lhs: Box::new(l),
                    rhs: Box::new(r),
                },
                ty: BOOL,
                span,
            });
        }
        // Pointer arithmetic scales by the pointee's size, as in C.
        let (l, r) = match (&l.ty, &r.ty, op) {
            (Ty::Ptr(p, _), t, BinOp::Add | BinOp::Sub) if t.is_integer() => {
                let size = self.registry.c_size(p).max(1) as i64;
                let scaled = scale(r, size);
                (l, scaled)
            }
            (t, Ty::Ptr(p, _), BinOp::Add) if t.is_integer() => {
                let size = self.registry.c_size(p).max(1) as i64;
                (scale(l, size), r)
            }
            _ => (l, r),
        };
        let ty = if op.is_comparison()
            || (l.ty == BOOL
                && r.ty == BOOL
                && matches!(op, BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor))
        {
            BOOL
        } else if let (Ty::Ptr(..), Ty::Ptr(..), BinOp::Sub) = (&l.ty, &r.ty, op) {
            INT64
        } else if let Ty::Ptr(..) = l.ty {
            l.ty.clone()
        } else if let (Ty::Ptr(..), BinOp::Add) = (&r.ty, op) {
            r.ty.clone()
        } else {
            Ty::arithmetic(&l.ty, &r.ty)
        };
        if let (TKind::Int(a), TKind::Int(b)) = (&l.kind, &r.kind) {
            if let Some(v) = fold(op, *a, *b, Ty::arithmetic(&l.ty, &r.ty).is_signed()) {
                return Ok(TExpr::int(v, ty, span));
            }
        }
        Ok(TExpr {
            kind: TKind::Binary {
                op,
                lhs: Box::new(l),
                rhs: Box::new(r),
            },
            ty,
            span,
        })
    }

    pub(crate) fn cast(&mut self, value: TExpr, target: Ty, span: Span) -> R<TExpr> {
        // As in C, an array in traced memory cast to a pointer is the
        // address of its first element: `(struct s *)$p->one_element_array`.
        let value = match (&target, &value.ty) {
            (Ty::Ptr(..), Ty::Array { elem, .. })
                if value.is_place()
                    && !super::expr_is_ctx(&value)
                    && !super::in_program_memory(&value) =>
            {
                TExpr {
                    ty: Ty::Ptr(elem.clone(), place_space(&value)),
                    span: value.span,
                    kind: TKind::AddrOf(Box::new(value)),
                }
            }
            _ => value,
        };
        let value = self.value(value)?;
        match (&target, &value.ty) {
            // A number or pointer is true when it is not zero, a string
            // when it is not empty.
            (Ty::Bool, Ty::Bool) => Ok(TExpr { span, ..value }),
            (Ty::Bool, from) if from.is_scalar() => Ok(match value.kind {
                TKind::Int(v) => TExpr::int(i64::from(v != 0), BOOL, span),
                _ => TExpr {
                    kind: TKind::Binary {
                        op: BinOp::Ne,
                        rhs: Box::new(TExpr::int(0, value.ty.clone(), span)),
                        lhs: Box::new(value),
                    },
                    ty: BOOL,
                    span,
                },
            }),
            (Ty::Bool, Ty::Str { .. }) => Ok(TExpr {
                kind: TKind::StrEq {
                    lhs: Box::new(value),
                    rhs: Box::new(TExpr {
                        kind: TKind::Str(Vec::new()),
                        ty: Ty::Str { size: 1 },
                        span,
                    }),
                    negate: true,
                },
                ty: BOOL,
                span,
            }),
            (Ty::Int { .. } | Ty::Enum { .. }, from) if from.is_scalar() => Ok(match value.kind {
                TKind::Int(v) => TExpr::int(target.truncate(v), target, span),
                _ => TExpr {
                    kind: TKind::IntCast(Box::new(value)),
                    ty: target,
                    span,
                },
            }),
            // A pointer keeps whose memory it points into; an integer
            // takes the space the target type was resolved with.
            (Ty::Ptr(pointee, space), from) if from.is_scalar() => Ok(TExpr {
                ty: Ty::Ptr(pointee.clone(), from.space().unwrap_or(*space)),
                span,
                ..value
            }),
            // An integer's bytes, lowest first, as an array of at most 8
            // bytes (bpftrace 0.19 and later; booleans 0.24).
            (Ty::Array { elem, .. }, Ty::Int { .. } | Ty::Bool)
                if bytes_like(elem) && self.registry.c_size(&target) <= 8 =>
            {
                let bytes = self.registry.c_size(&target) as u8;
                let int = Ty::Int {
                    bytes,
                    signed: value.ty.is_signed(),
                };
                let part = self.cast(value, int, span)?;
                Ok(TExpr {
                    kind: TKind::Fields(vec![(0, part)]),
                    ty: target,
                    span,
                })
            }
            // A string's bytes, its NUL and the padding after included
            // (bpftrace 0.24.2 and later).
            (Ty::Array { elem, len }, Ty::Str { size })
                if matches!(**elem, Ty::Int { bytes: 1, .. }) && *len == u64::from(*size) =>
            {
                Ok(TExpr {
                    kind: TKind::Retype(Box::new(value)),
                    ty: target,
                    span,
                })
            }
            // An array's bytes read as one integer of the same size.
            (Ty::Int { bytes, .. }, Ty::Array { elem, .. })
                if bytes_like(elem) && self.registry.c_size(&value.ty) == u64::from(*bytes) =>
            {
                let place = TExpr {
                    kind: TKind::Field {
                        base: Box::new(value),
                        offset: 0,
                    },
                    ty: target.clone(),
                    span,
                };
                Ok(TExpr {
                    kind: TKind::Load {
                        place: Box::new(place),
                        bitfield: None,
                    },
                    ty: target,
                    span,
                })
            }
            (to, from) => Err(self.error(
                Diagnostic::error(
                    span,
                    format!(
                        "cannot cast {} to {}",
                        from.display(&self.registry),
                        to.display(&self.registry)
                    ),
                )
                .hint(if matches!(to, Ty::Record(_)) {
                    "cast to a pointer and use ->: ((struct foo *)arg0)->field"
                } else {
                    "casts convert integers and pointers"
                }),
            )),
        }
    }

    /// `type[]` in a cast: an array of as many elements as the value's
    /// bytes make (`(int8[])12345` is `int8[8]`: integer literals are 64
    /// bits wide).
    fn array_to_fit(&mut self, ty: &TypeName, value: &TExpr) -> R<Ty> {
        let elem = self.resolve_type(&TypeName {
            array: None,
            ..ty.clone()
        })?;
        let elem_size = self.registry.c_size(&elem);
        let bytes = match value.ty {
            Ty::Int { .. } | Ty::Bool | Ty::Str { .. } | Ty::Array { .. } => {
                self.registry.c_size(&value.ty)
            }
            _ => {
                return Err(self.error(Diagnostic::error(
                    ty.span,
                    format!(
                        "Could not determine size of the array: {} has no bytes to count",
                        value.ty.display(&self.registry)
                    ),
                )))
            }
        };
        if elem_size == 0 || bytes % elem_size != 0 {
            return Err(self.error(Diagnostic::error(
                ty.span,
                format!("Cannot determine array size: the element size is incompatible with the cast integer size ({bytes} bytes in elements of {elem_size})"),
            )));
        }
        Ok(Ty::Array {
            elem: Box::new(elem),
            len: bytes / elem_size,
        })
    }

    /// A type written where variables are seen: `typeof(EXPR)` is the
    /// type of the expression, which is checked but never run.
    pub(crate) fn type_in_scope(&mut self, ty: &TypeName, scope: &mut Scope) -> R<Ty> {
        let Some(of) = &ty.of else {
            return self.resolve_type(ty);
        };
        let value = self.expr(of, scope)?;
        let value = self.value(value)?;
        self.not_void(&value)?;
        let mut t = value.ty;
        // A pointer to it points where its own pointers do, else as a
        // written type's (see `resolve_type`).
        let space = match &t {
            Ty::Record(id) if self.registry.is_kernel(*id) => Space::Kernel,
            Ty::Ptr(_, space) => *space,
            _ => self.default_space,
        };
        for _ in 0..ty.pointers {
            t = Ty::Ptr(Box::new(t), space);
        }
        if let Some(ArrayLen::Known(len)) = ty.array {
            t = Ty::Array {
                elem: Box::new(t),
                len,
            };
        }
        Ok(t)
    }

    pub(crate) fn resolve_type(&mut self, ty: &crate::ast::TypeName) -> R<Ty> {
        let from_script = crate::cdecl::base_type(&self.registry, &ty.name);
        let found = match from_script {
            Some(t) => Some(t),
            None => {
                let target = self.current_target.clone();
                match self.objects.c_type(&target, &ty.name, &mut self.registry) {
                    Ok(found) => found,
                    Err(refusal) => return Err(self.refused(ty.span, refusal)),
                }
            }
        };
        let Some(mut t) = found else {
            let mut d = Diagnostic::error(ty.span, format!("unknown type `{}`", ty.name));
            let names: Vec<&str> = self
                .registry
                .type_names()
                .chain(crate::parser::INT_TYPE_NAMES.iter().copied())
                .collect();
            if let Some(h) = did_you_mean(&suggest(&ty.name, names)) {
                d = d.hint(h);
            } else if ty.name.starts_with("struct")
                || ty.name.starts_with("union")
                || ty.name.starts_with("enum")
            {
                d = d.hint("define it at the top of the script in C, as in a header");
            }
            return Err(self.error(d));
        };
        // A pointer to a kernel struct points into the kernel; others
        // into the probe's default memory (see `default_space`).
        let space = match &t {
            Ty::Record(id) if self.registry.is_kernel(*id) => Space::Kernel,
            _ => self.default_space,
        };
        for _ in 0..ty.pointers {
            t = Ty::Ptr(Box::new(t), space);
        }
        match ty.array {
            Some(ArrayLen::Known(len)) => {
                t = Ty::Array {
                    elem: Box::new(t),
                    len,
                }
            }
            Some(ArrayLen::FromValue) => {
                return Err(self.error(
                    Diagnostic::error(ty.span, "`[]` takes its length from a value cast to it")
                        .hint("write the length here, as in int8[4]"),
                ))
            }
            None => {}
        }
        if t == Ty::Void {
            return Err(self.error(Diagnostic::error(ty.span, "cannot cast to void")));
        }
        Ok(t)
    }

    fn field(
        &mut self,
        base: TExpr,
        field: &str,
        field_span: Span,
        arrow: bool,
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        // `args.f` and `args->f` both name a tracepoint field.
        let is_ctx = matches!(base.kind, TKind::CtxRecord);
        let place = match (&base.ty, arrow) {
            // A struct in memory, a tracepoint's record, or a struct value
            // (`$s = *ptr; $s.m`). As in bpftrace 0.26, `->` is `.`.
            (Ty::Record(_), _) => base,
            // `.` reads through a pointer to a struct, as `->` does
            // (bpftrace 0.25 and later prefer it).
            (Ty::Ptr(pointee, _), _) => {
                let pointee = (**pointee).clone();
                if !matches!(pointee, Ty::Record(_)) {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!(
                            "`{}` needs a struct or a pointer to one, not {}",
                            if arrow { "->" } else { "." },
                            base.ty.display(&self.registry)
                        ),
                    )));
                }
                self.pointee_place(base, pointee, span)?
            }
            (Ty::Tuple(_), _) => {
                return Err(self.error(Diagnostic::error(
                    field_span,
                    "tuple items are read by position: $t.0, $t.1, ...",
                )))
            }
            (other, _) => {
                return Err(self.error(
                    Diagnostic::error(
                        span,
                        format!("{} has no fields", other.display(&self.registry)),
                    )
                    .hint("cast a pointer to a struct type first: ((struct foo *)arg0)->field"),
                ))
            }
        };
        let Ty::Record(id) = place.ty else {
            unreachable!("checked above")
        };
        if let (true, Some((_, data_locs))) = (is_ctx, &scope.tracepoint) {
            if let Some(&offset) = data_locs.get(field) {
                return Ok(TExpr {
                    kind: TKind::DataLoc { offset },
                    ty: Ty::Str {
                        size: self.options.strlen,
                    },
                    span,
                });
            }
        }
        let Some(found) = self.registry.field(id, field) else {
            return Err(self.unknown_field(id, field, field_span));
        };
        let member = TExpr {
            kind: TKind::Field {
                base: Box::new(place),
                offset: found.offset,
            },
            ty: found.ty.clone(),
            span,
        };
        Ok(self.load_if_scalar(member, found.bitfield))
    }

    pub(crate) fn unknown_field(
        &mut self,
        id: crate::types::RecordId,
        field: &str,
        span: Span,
    ) -> Stop {
        let record = self.registry.record(id);
        let names = self.registry.field_names(id);
        let mut d = Diagnostic::error(span, format!("{} has no field `{field}`", record.name));
        d = match did_you_mean(&suggest(field, names.iter().copied())) {
            Some(h) => d.hint(h),
            None if !names.is_empty() => d.hint(format!("its fields are {}", names.join(", "))),
            None => d,
        };
        self.error(d)
    }

    /// A scalar member is read; a struct or array member stays a place.
    fn load_if_scalar(&self, member: TExpr, bitfield: Option<(u8, u8)>) -> TExpr {
        if member.ty.is_scalar() {
            let ty = member.ty.clone();
            let span = member.span;
            TExpr {
                kind: TKind::Load {
                    place: Box::new(member),
                    bitfield,
                },
                ty,
                span,
            }
        } else {
            member
        }
    }

    fn index(&mut self, base: TExpr, index: TExpr, span: Span) -> R<TExpr> {
        let index = self.value(index)?;
        if !index.ty.is_integer() {
            return Err(self.error(Diagnostic::error(index.span, "an index must be an integer")));
        }
        let (place, elem) = match base.ty.clone() {
            // An array in memory or an array value.
            Ty::Array { elem, len } => {
                self.constant_index_in_bounds(&index, len)?;
                (base, *elem)
            }
            Ty::Str { size } => {
                self.constant_index_in_bounds(&index, u64::from(size))?;
                (base, Ty::int(1, true))
            }
            Ty::Tuple(_) => return self.tuple_item(base, index, span),
            Ty::Ptr(pointee, _) => {
                let elem = *pointee;
                self.complete(&elem, span)?;
                if elem == Ty::Void {
                    return Err(self.error(Diagnostic::error(span, "cannot index a `void *`")));
                }
                let array = Ty::Array {
                    elem: Box::new(elem.clone()),
                    len: 0,
                };
                let place = TExpr {
                    kind: TKind::UserPlace(Box::new(base)),
                    ty: array,
                    span,
                };
                (place, elem)
            }
            other => {
                return Err(self.error(
                    Diagnostic::error(
                        span,
                        format!("{} cannot be indexed", other.display(&self.registry)),
                    )
                    .hint("index arrays and pointers; map keys go in @map[key]"),
                ))
            }
        };
        let stride = self.registry.c_size(&elem);
        let element = TExpr {
            kind: TKind::Index {
                base: Box::new(place),
                index: Box::new(index),
                stride,
            },
            ty: elem,
            span,
        };
        Ok(self.load_if_scalar(element, None))
    }
}

/// `e * size`, folded when `e` is a constant.
fn scale(e: TExpr, size: i64) -> TExpr {
    if size == 1 {
        return e;
    }
    let span = e.span;
    let ty = e.ty.clone();
    if let TKind::Int(v) = e.kind {
        return TExpr::int(v.wrapping_mul(size), ty, span);
    }
    TExpr {
        kind: TKind::Binary {
            op: BinOp::Mul,
            lhs: Box::new(e),
            rhs: Box::new(TExpr::int(size, INT64, span)),
        },
        ty,
        span,
    }
}

/// Folds an operation on two constants, if it is defined.
fn fold(op: BinOp, a: i64, b: i64, signed: bool) -> Option<i64> {
    use BinOp::*;
    let (ua, ub) = (a as u64, b as u64);
    Some(match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        // bpftrace divides unsigned and shifts right logically, also
        // signed operands. Dividing by zero is left to run time, which
        // warns where it happens and gives 1, as bpftrace 0.25 does.
        Div | Mod if b == 0 => return None,
        Div => (ua / ub) as i64,
        Mod => (ua % ub) as i64,
        BitAnd => a & b,
        BitOr => a | b,
        BitXor => a ^ b,
        Shl => ua.checked_shl(ub.try_into().ok()?).unwrap_or(0) as i64,
        Shr => ua.checked_shr(ub.try_into().ok()?).unwrap_or(0) as i64,
        Eq => i64::from(a == b),
        Ne => i64::from(a != b),
        Lt if signed => i64::from(a < b),
        Le if signed => i64::from(a <= b),
        Gt if signed => i64::from(a > b),
        Ge if signed => i64::from(a >= b),
        Lt => i64::from(ua < ub),
        Le => i64::from(ua <= ub),
        Gt => i64::from(ua > ub),
        Ge => i64::from(ua >= ub),
        And | Or => return None,
    })
}

impl Checker<'_> {
    /// `args.NAME` in a USDT probe: the argument that, at the probe's
    /// sites, sits in the register where DWARF says variable NAME lives,
    /// cast to NAME's type.
    pub(crate) fn usdt_arg(&mut self, name: &str, name_span: Span, span: Span) -> R<TExpr> {
        let target = self.current_target.clone();
        let found = self.objects.usdt_arg(&target, name, &mut self.registry);
        match found {
            Ok(UsdtArg::Typed { index, ty }) => {
                self.args_read |= 1u16.checked_shl(index as u32).unwrap_or(0);
                let value = TExpr {
                    kind: TKind::Arg(index as u8),
                    ty: crate::types::UINT64,
                    span,
                };
                if !ty.is_scalar() {
                    return Err(self.error(Diagnostic::error(
                        span,
                        format!(
                            "args.{name} is a {}, which a register cannot hold",
                            ty.display(&self.registry)
                        ),
                    )));
                }
                self.cast(value, ty, span)
            }
            Ok(UsdtArg::Differs) => Err(self.error(
                Diagnostic::error(
                    name_span,
                    format!("the probe's sites pass `{name}` as different arguments or types"),
                )
                .hint("read it as argN with a cast"),
            )),
            Ok(UsdtArg::Unknown { mut names }) => {
                names.sort();
                let mut d = Diagnostic::error(
                    name_span,
                    format!("no argument of this probe is the variable `{name}`"),
                );
                d = match did_you_mean(&suggest(name, names.iter().map(String::as_str))) {
                    Some(h) => d.hint(h),
                    None if !names.is_empty() => d.hint(format!("its typed arguments are {}", names.join(", "))),
                    None => d.hint(
                        "DWARF names no variable held in an argument's register at its sites (arguments that are expressions, constants or in memory have no name); read argN with a cast",
                    ),
                };
                Err(self.error(d))
            }
            Err(refusal) => Err(self.refused(span, refusal)),
        }
    }
}

impl Checker<'_> {
    /// A call where a value is wanted.
    /// `(name=value, ...)`: the values made as a tuple, typed as a
    /// struct whose fields sit where the tuple keeps its items, so that
    /// `.name` reads them and `print` shows `{ .name = value, ... }`.
    fn record(
        &mut self,
        fields: &[(String, crate::ast::Expr)],
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let mut values = Vec::new();
        for (_, value) in fields {
            let v = self.expr(value, scope)?;
            let v = self.value(v)?;
            self.not_void(&v)?;
            values.push(v);
        }
        let items: Vec<Ty> = values.iter().map(|v| super::widen(&v.ty)).collect();
        let offsets = Ty::tuple_offsets(&items, &self.registry);
        let tuple = Ty::Tuple(items.clone());
        let size = tuple.value_size(&self.registry);
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        let id = self.registry.record_like(crate::types::Record {
            name: format!("record ({})", names.join(", ")),
            is_union: false,
            size: u64::from(size),
            align: 8,
            fields: fields
                .iter()
                .zip(items)
                .zip(offsets)
                .map(|(((name, _), ty), offset)| crate::types::Field {
                    name: name.clone(),
                    // A string sits in the record as C's `char[N]`, which
                    // reads back as a string.
                    ty: match ty {
                        Ty::Str { size } => Ty::Array {
                            elem: Box::new(Ty::Int {
                                bytes: 1,
                                signed: true,
                            }),
                            len: u64::from(size),
                        },
                        other => other,
                    },
                    offset: u64::from(offset),
                    bitfield: None,
                })
                .collect(),
            incomplete: false,
        });
        let made = TExpr {
            kind: TKind::Tuple(values),
            ty: tuple,
            span,
        };
        Ok(TExpr {
            kind: TKind::Retype(Box::new(made)),
            ty: Ty::Record(id),
            span,
        })
    }

    pub(crate) fn call_value(
        &mut self,
        name: &str,
        args: &[crate::ast::Expr],
        span: Span,
        scope: &mut Scope,
    ) -> R<TExpr> {
        let Some(builtin) = builtins::find(name, self.options.internal) else {
            let mut d = Diagnostic::error(span, format!("unknown function `{name}`"));
            if let Some(h) = did_you_mean(&suggest(name, builtins::names(true))) {
                d = d.hint(h);
            }
            return Err(self.error(d));
        };
        match builtin.role {
            Role::Value => {}
            Role::Statement => {
                return Err(self.error(
                    Diagnostic::error(span, format!("{name}() returns no value"))
                        .hint(format!("call {name}() as a statement of its own")),
                ))
            }
            Role::Aggregation => {
                return Err(self.error(
                    Diagnostic::error(span, format!("{name}() must be assigned to a map"))
                        .hint(format!("write @name = {name}(...)")),
                ))
            }
        }
        let use_ = Use { name, args, span };
        match self.builtin(builtin, &use_, true, scope)? {
            Checked::Value(v) => Ok(v),
            _ => Err(Stop),
        }
    }
}

/// Whose memory a place is in: the kernel's when it is reached through a
/// kernel pointer, else the traced process's.
pub(crate) fn place_space(place: &TExpr) -> Space {
    match &place.kind {
        TKind::UserPlace(ptr) => ptr.ty.space().unwrap_or(Space::User),
        TKind::Field { base, .. } | TKind::Index { base, .. } | TKind::Load { place: base, .. } => {
            place_space(base)
        }
        _ => Space::User,
    }
}

/// Whether an array of `elem` is bytes an integer's may become: integers
/// and booleans.
fn bytes_like(elem: &Ty) -> bool {
    matches!(elem, Ty::Int { .. } | Ty::Bool)
}
