//! Values larger than a register: comparing them, choosing between them,
//! and the type two of them share.
//!
//! Strings, buffers, tuples, arrays and struct copies are blocks of bytes
//! in the program's memory, so `==` on them compares bytes, and `?:` on
//! them writes one arm or the other into a block big enough for both.

use super::{unify, Checker, R};
use crate::ast::{BinOp, Expr, ExprKind};
use crate::diag::{Diagnostic, Span};
use crate::hir::{TExpr, TKind};
use crate::types::{Ty, BOOL};

/// Whether `==` and `!=` compare values of this type byte by byte.
fn compared_as_bytes(ty: &Ty) -> bool {
    match ty {
        Ty::Str { .. } | Ty::Buf { .. } => true,
        Ty::Array { elem, .. } => {
            elem.is_integer()
                || matches!(**elem, Ty::Ptr(..) | Ty::Array { .. }) && compared_as_bytes(elem)
        }
        Ty::Tuple(items) => items.iter().all(|t| t.is_scalar() || compared_as_bytes(t)),
        _ => false,
    }
}

impl Checker<'_> {
    /// A constant index must fall inside an array of `len` elements (0:
    /// of unknown length).
    pub(crate) fn constant_index_in_bounds(&mut self, index: &TExpr, len: u64) -> R<()> {
        if let TKind::Int(i) = index.kind {
            if i < 0 || (len > 0 && i as u64 >= len) {
                return Err(self.error(Diagnostic::error(
                    index.span,
                    format!("the index {i} is out of bounds for array of size {len}"),
                )));
            }
        }
        Ok(())
    }

    /// `$t[i]` on a tuple: item `i`, which must be a constant.
    pub(crate) fn tuple_item(&mut self, tuple: TExpr, index: TExpr, span: Span) -> R<TExpr> {
        let Ty::Tuple(items) = &tuple.ty else {
            unreachable!("called for tuples")
        };
        let TKind::Int(i) = index.kind else {
            return Err(self.error(
                Diagnostic::error(index.span, "a tuple's index must be a constant")
                    .hint("each item of a tuple may have its own type: write $t[0] or $t.0"),
            ));
        };
        let Some(item) = usize::try_from(i).ok().and_then(|i| items.get(i)).cloned() else {
            return Err(self.error(Diagnostic::error(
                index.span,
                format!(
                    "the tuple has {} items; index {i} is out of range",
                    items.len()
                ),
            )));
        };
        let tuple = self.value(tuple)?;
        Ok(TExpr {
            kind: TKind::TupleIndex {
                tuple: Box::new(tuple),
                index: i as usize,
            },
            ty: item,
            span,
        })
    }

    /// The text a positional parameter stands for where `str()` reads
    /// it: `$N`, or `$N + K` (its text from byte K on, as bpftrace allows
    /// pointer arithmetic on it).
    pub(crate) fn parameter_text(&mut self, e: &Expr) -> R<Option<Vec<u8>>> {
        let (n, skip) = match &e.kind {
            ExprKind::Param(n) => (*n, 0),
            ExprKind::Binary {
                op: BinOp::Add,
                lhs,
                rhs,
            } => match (&lhs.kind, &rhs.kind) {
                (ExprKind::Param(n), ExprKind::Int(k)) | (ExprKind::Int(k), ExprKind::Param(n)) => {
                    (*n, *k)
                }
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let text = self.positional(n).unwrap_or_default().as_bytes().to_vec();
        match usize::try_from(skip).ok().filter(|&k| k <= text.len()) {
            Some(k) => Ok(Some(text[k..].to_vec())),
            None => Err(self.error(Diagnostic::error(
                e.span,
                format!(
                    "${n} + {skip} is outside ${n}, which has {} bytes",
                    text.len()
                ),
            ))),
        }
    }

    /// How far `++` moves a value of `ty`: 1 for an integer, the size of
    /// what a pointer points at (as C's pointer arithmetic does).
    pub(crate) fn incdec_step(&self, ty: &Ty) -> Option<i64> {
        match ty {
            t if t.is_integer() => Some(1),
            Ty::Ptr(pointee, _) => Some(self.registry.c_size(pointee).max(1) as i64),
            _ => None,
        }
    }

    /// `a == b` or `a != b` on values larger than a register, if either
    /// side is one; both sides back when both are scalars.
    pub(crate) fn value_equality(
        &mut self,
        op: BinOp,
        l: TExpr,
        r: TExpr,
        span: Span,
    ) -> R<Result<TExpr, (TExpr, TExpr)>> {
        if l.ty.is_scalar() && r.ty.is_scalar() {
            return Ok(Err((l, r)));
        }
        let hint = "strings, buffers, integer arrays and tuples compare with == and != \
                    (strings also with strncmp())";
        if !matches!(op, BinOp::Eq | BinOp::Ne) {
            let other = if l.ty.is_scalar() { &r.ty } else { &l.ty };
            let what = match other {
                Ty::Str { .. } => "strings".to_string(),
                other => other.display(&self.registry).to_string(),
            };
            return Err(self.error(
                Diagnostic::error(span, format!("`{}` does not apply to {what}", op.symbol()))
                    .hint(hint),
            ));
        }
        let Some(shared) = unify(&l.ty, &r.ty) else {
            return Err(self.error(
                Diagnostic::error(
                    span,
                    format!(
                        "cannot compare {} with {}",
                        l.ty.display(&self.registry),
                        r.ty.display(&self.registry)
                    ),
                )
                .hint(hint),
            ));
        };
        if !compared_as_bytes(&shared) {
            return Err(self.error(Diagnostic::error(
                span,
                format!(
                    "`{}` compares strings, buffers, integer arrays and tuples, not {}",
                    op.symbol(),
                    shared.display(&self.registry)
                ),
            )));
        }
        let lhs = convert(l, &shared);
        let rhs = convert(r, &shared);
        Ok(Ok(TExpr {
            kind: TKind::StrEq {
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
                negate: op == BinOp::Ne,
            },
            ty: BOOL,
            span,
        }))
    }

    /// The type of `c ? a : b`: one that holds both arms.
    pub(crate) fn ternary_type(&mut self, then: &TExpr, otherwise: &TExpr, span: Span) -> R<Ty> {
        let (a, b) = (&then.ty, &otherwise.ty);
        if a.is_scalar() && b.is_scalar() {
            return Ok(if a == b {
                super::widen(a)
            } else {
                Ty::arithmetic(a, b)
            });
        }
        match unify(&super::widen(a), &super::widen(b)) {
            Some(t) if !matches!(t, Ty::Void | Ty::Agg(_)) => Ok(t),
            _ => Err(self.error(Diagnostic::error(
                span,
                format!(
                    "the two sides of `?:` have different types: {} and {}",
                    a.display(&self.registry),
                    b.display(&self.registry)
                ),
            ))),
        }
    }
}

/// `e` laid out as `ty`, which holds it (strings: as long or longer).
fn convert(e: TExpr, ty: &Ty) -> TExpr {
    if e.ty == *ty || matches!(ty, Ty::Str { .. } | Ty::Buf { .. }) {
        // Strings and buffers compare as their padded bytes already.
        return e;
    }
    let span = e.span;
    TExpr {
        kind: TKind::Convert(Box::new(e)),
        ty: ty.clone(),
        span,
    }
}

#[cfg(test)]
mod tests;
