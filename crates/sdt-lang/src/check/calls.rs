//! What the builtins' checks share: arity, constant arguments, a map
//! argument, `printf`-style formats, and `uaddr()`'s symbol lookup.

use super::{Checker, Scope, R};
use crate::ast::{Expr, ExprKind};
use crate::diag::{Diagnostic, Span};
use crate::format::{Conv, Format};
use crate::hir::{ProbeKind, TExpr, TKind};
use crate::types::Ty;

/// Every function a script may call, for suggestions.
impl Checker<'_> {
    pub(crate) fn arity(
        &mut self,
        name: &str,
        args: &[Expr],
        min: usize,
        max: usize,
        span: Span,
    ) -> R<()> {
        if (min..=max).contains(&args.len()) {
            return Ok(());
        }
        let wanted = if min == max {
            format!("{min} argument{}", super::plural(min))
        } else if max == usize::MAX {
            format!("at least {min} argument{}", super::plural(min))
        } else {
            format!("{min} to {max} arguments")
        };
        Err(self.error(Diagnostic::error(
            span,
            format!("{name}() takes {wanted}, not {}", args.len()),
        )))
    }

    /// A constant string argument: a literal, a positional parameter, or a
    /// macro that gives a literal (`macro fmt() { "%d\n" }`), which
    /// expands to a block with nothing in it but that value.
    pub(crate) fn literal_string(&mut self, e: &Expr, what: &str) -> R<Vec<u8>> {
        match &e.kind {
            ExprKind::Str(s) => Ok(s.clone()),
            ExprKind::Param(n) => Ok(self.positional(*n).unwrap_or_default().as_bytes().to_vec()),
            ExprKind::Block {
                stmts,
                value: Some(value),
            } if stmts.is_empty() => self.literal_string(value, what),
            _ => Err(self.error(Diagnostic::error(
                e.span,
                format!("{what} must be a string literal"),
            ))),
        }
    }

    /// A constant integer argument.
    pub(crate) fn literal_int(&mut self, e: &Expr, scope: &mut Scope, what: &str) -> R<i64> {
        let value = self.expr(e, scope)?;
        match value.kind {
            TKind::Int(v) => Ok(v),
            _ => Err(self.error(Diagnostic::error(
                e.span,
                format!("{what} must be a constant integer"),
            ))),
        }
    }

    pub(crate) fn map_arg(&mut self, e: &Expr, function: &str) -> R<(usize, Vec<Expr>)> {
        match &e.kind {
            ExprKind::Map(map) => Ok((self.known_map(&map.name, map.span)?, map.keys.clone())),
            _ => Err(self.error(
                Diagnostic::error(e.span, format!("{function}() takes a map"))
                    .hint(format!("write {function}(@name)")),
            )),
        }
    }

    pub(crate) fn format_of(&mut self, e: &Expr, args: &[TExpr], function: &str) -> R<u32> {
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
            let integer_like = arg.ty.is_integer() || matches!(arg.ty, Ty::Ptr(..));
            let ok = match spec.conv {
                Conv::Str => !matches!(arg.ty, Ty::Agg(_) | Ty::Void),
                c if c.is_raw() => matches!(arg.ty, Ty::Buf { .. } | Ty::Str { .. }),
                Conv::Char => arg.ty.is_integer(),
                _ => integer_like,
            };
            if !ok {
                let wanted = match spec.conv {
                    c if c.is_raw() => "a buffer from buf()",
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

    pub(crate) fn values(&mut self, args: &[Expr], scope: &mut Scope) -> R<Vec<TExpr>> {
        let mut out = Vec::new();
        for a in args {
            let v = self.expr(a, scope)?;
            let v = self.value(v)?;
            self.not_void(&v)?;
            out.push(v);
        }
        Ok(out)
    }

    pub(crate) fn integer_arg(&mut self, name: &str, e: &Expr, scope: &mut Scope) -> R<TExpr> {
        let v = self.expr(e, scope)?;
        let v = self.value(v)?;
        if !v.ty.is_integer() && !matches!(v.ty, Ty::Ptr(..)) {
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
}

impl Checker<'_> {
    /// `uaddr("symbol")`: where a global of the probe's object is in the
    /// traced process. The symbol table gives its link-time address;
    /// the program adds the distance between the probe's run-time and
    /// link-time addresses, so it is right for PIE and shared libraries too.
    pub(crate) fn uaddr(
        &mut self,
        symbol: &str,
        kind: ProbeKind,
        arg_span: Span,
        span: Span,
    ) -> R<TExpr> {
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
                    ty: Ty::ptr(Ty::int(bytes, false)),
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
