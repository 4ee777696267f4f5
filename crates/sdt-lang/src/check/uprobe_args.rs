//! `args` in a uprobe: the traced function's parameters, named and typed
//! by its DWARF, as bpftrace has them since 0.19 (`args.n`, the older
//! `args->n`, `print(args)`, `@ = args`).
//!
//! Where each parameter is at the function's entry is the binder's answer
//! ([`super::Objects::function_args`]): in registers, on the stack, at an
//! address a register holds, or out of a uprobe's reach (an SSE
//! register). This module turns that place into a read of the right
//! width and type: a register is cast to the parameter's type, a struct
//! passed in registers is put together from them, and what is in memory
//! is a place like any other, so that `args.node->name` and `args.w.a`
//! read through it. A parameter that cannot be read is an error where the
//! script names it, never a wrong value; so is `args` in a uretprobe (the
//! registers hold other things by the time the function returns) and in
//! a probe past a function's first instruction.

use super::objects::{FunctionArgs, FunctionParam, ParamPlace};
use super::{Checker, R};
use crate::ast::BinOp;
use crate::diag::{did_you_mean, suggest, Diagnostic, Span};
use crate::hir::{ProbeKind, TExpr, TKind};
use crate::types::{Ty, UINT64};

impl Checker<'_> {
    /// `args.NAME` (or `args->NAME`) in a uprobe.
    pub(crate) fn uprobe_arg(
        &mut self,
        name: &str,
        name_span: Span,
        span: Span,
        kind: ProbeKind,
    ) -> R<TExpr> {
        let args = self.function_args(span, kind)?;
        let Some(param) = args.params.iter().find(|p| p.name == name) else {
            let names: Vec<&str> = args.params.iter().map(|p| p.name.as_str()).collect();
            let mut d = Diagnostic::error(
                name_span,
                format!("{} has no parameter `{name}`", args.function),
            );
            d = match did_you_mean(&suggest(name, names.iter().copied())) {
                Some(h) => d.hint(h),
                None if names.is_empty() => d.hint("it takes no parameters"),
                None => d.hint(format!("its parameters are {}", names.join(", "))),
            };
            return Err(self.error(d));
        };
        self.param_value(&args, param, span)
    }

    /// `args` as a whole in a uprobe: a struct of every parameter.
    pub(crate) fn uprobe_args(&mut self, span: Span, kind: ProbeKind) -> R<TExpr> {
        let args = self.function_args(span, kind)?;
        if args.params.is_empty() {
            return Err(self.error(Diagnostic::error(
                span,
                format!("{} takes no parameters, so `args` is empty", args.function),
            )));
        }
        let mut parts = Vec::new();
        for p in &args.params {
            let value = self.param_value(&args, p, span)?;
            let value = self.value(value)?;
            parts.push((p.offset as u32, value));
        }
        Ok(TExpr {
            kind: TKind::Fields(parts),
            ty: Ty::Record(args.record),
            span,
        })
    }

    fn function_args(&mut self, span: Span, kind: ProbeKind) -> R<FunctionArgs> {
        if kind == ProbeKind::Uretprobe {
            return Err(self.error(
                Diagnostic::error(
                    span,
                    "`args` is not available in uretprobes: by the time a function returns, its parameters' registers hold other values",
                )
                .hint("keep what you need in a map keyed by tid in a uprobe on the function, and read it here"),
            ));
        }
        let target = self.current_target.clone();
        match self.objects.function_args(&target, &mut self.registry) {
            Ok(args) => Ok(args),
            Err(refusal) => Err(self.refused(span, refusal)),
        }
    }

    /// The value of parameter `p` at the function's entry.
    fn param_value(&mut self, args: &FunctionArgs, p: &FunctionParam, span: Span) -> R<TExpr> {
        let register = |offset: i16| TExpr {
            kind: TKind::Reg(offset),
            ty: UINT64,
            span,
        };
        let address = |base: TExpr, offset: u64, ty: &Ty| TExpr {
            kind: TKind::Binary {
                op: BinOp::Add,
                lhs: Box::new(base),
                rhs: Box::new(TExpr::int(offset as i64, UINT64, span)),
            },
            ty: Ty::ptr(ty.clone()),
            span,
        };
        match &p.place {
            ParamPlace::Registers(registers) if p.ty.is_scalar() => match registers.first() {
                Some(r) => self.cast(register(*r), p.ty.clone(), span),
                None => Err(self.unreadable(args, p, "it is in no register", span)),
            },
            ParamPlace::Registers(registers) => {
                // Eight bytes per register; the bytes past the value's
                // end are cleared, so that equal structs are equal keys.
                let size = self.registry.c_size(&p.ty);
                let mut parts = Vec::new();
                for (i, r) in registers.iter().enumerate() {
                    let at = 8 * i as u64;
                    let left = size.saturating_sub(at);
                    parts.push((at as u32, masked(register(*r), 8 * left, span)));
                }
                Ok(TExpr {
                    kind: TKind::Fields(parts),
                    ty: p.ty.clone(),
                    span,
                })
            }
            ParamPlace::Stack { sp, offset } => {
                let ptr = address(register(*sp), *offset, &p.ty);
                self.pointee_place(ptr, p.ty.clone(), span)
            }
            ParamPlace::Reference(r) => {
                let ptr = address(register(*r), 0, &p.ty);
                self.pointee_place(ptr, p.ty.clone(), span)
            }
            ParamPlace::Unreadable(why) => Err(self.unreadable(args, p, why, span)),
        }
    }

    /// `.NAME` of a struct put together from registers (a struct
    /// parameter passed by value in them): the bits of the register that
    /// hold the member, shifted down and cut to its type.
    pub(crate) fn fields_member(
        &mut self,
        base: TExpr,
        name: &str,
        name_span: Span,
        span: Span,
    ) -> R<TExpr> {
        let (TKind::Fields(parts), Ty::Record(id)) = (&base.kind, &base.ty) else {
            return Err(self.error(Diagnostic::error(span, "not a struct")));
        };
        let Some(found) = self.registry.field(*id, name) else {
            let names: Vec<String> = self
                .registry
                .field_names(*id)
                .into_iter()
                .map(String::from)
                .collect();
            let mut d = Diagnostic::error(
                name_span,
                format!("{} has no field `{name}`", base.ty.display(&self.registry)),
            );
            if let Some(h) = did_you_mean(&suggest(name, names.iter().map(String::as_str))) {
                d = d.hint(h);
            }
            return Err(self.error(d));
        };
        self.bits_at(parts, found.offset, &found.ty, found.bitfield, span)
    }

    /// The value of type `ty` at byte `offset` of the struct made of
    /// `parts`, each an eight-byte register value or a struct of them.
    fn bits_at(
        &mut self,
        parts: &[(u32, TExpr)],
        offset: u64,
        ty: &Ty,
        bitfield: Option<(u8, u8)>,
        span: Span,
    ) -> R<TExpr> {
        let size = self.registry.c_size(ty);
        if !ty.is_scalar() {
            // A struct or array member: its bytes, eight at a time, so
            // that one lying across two registers keeps both halves.
            let mut inner = Vec::new();
            for at in (0..size).step_by(8) {
                let bytes = self.bytes_at(parts, offset + at, (size - at).min(8), span)?;
                inner.push((at as u32, bytes));
            }
            return Ok(TExpr {
                kind: TKind::Fields(inner),
                ty: ty.clone(),
                span,
            });
        }
        let Some((bit, bits)) = bitfield else {
            let value = self.bytes_at(parts, offset, size.min(8), span)?;
            return self.cast(value, ty.clone(), span);
        };
        let (bit, bits) = (u64::from(bit), u64::from(bits));
        let value = self.bytes_at(parts, offset, (bit + bits).div_ceil(8), span)?;
        let mut value = shifted(value, bit, span);
        value = masked(value, bits, span);
        if ty.is_signed() && bits > 0 {
            // Sign-extended: flip the sign bit, then take it away.
            let sign = 1i64 << (bits - 1);
            value = binary(BinOp::BitXor, value, sign, span);
            value = binary(BinOp::Sub, value, sign, span);
        }
        self.cast(value, ty.clone(), span)
    }

    /// Bytes `offset..offset + len` (at most eight) of the struct made of
    /// `parts`, as an integer with the rest of its bits cleared.
    fn bytes_at(&mut self, parts: &[(u32, TExpr)], offset: u64, len: u64, span: Span) -> R<TExpr> {
        let holder = parts.iter().find(|(at, part)| {
            let size = self.registry.c_size(&part.ty).max(8);
            (u64::from(*at)..u64::from(*at) + size).contains(&offset)
        });
        let Some((at, part)) = holder else {
            return Err(self.error(Diagnostic::error(
                span,
                "this member is in no register of the struct",
            )));
        };
        let within = offset - u64::from(*at);
        if let TKind::Fields(inner) = &part.kind {
            return self.bytes_at(inner, within, len, span);
        }
        if !part.ty.is_scalar() {
            return Err(self.error(Diagnostic::error(
                span,
                "reading a member of this struct value is not supported",
            )));
        }
        let here = len.min(8 - within);
        let low = masked(shifted(part.clone(), 8 * within, span), 8 * here, span);
        if here == len {
            return Ok(low);
        }
        // The rest is at the start of the next register.
        let high = self.bytes_at(parts, offset + here, len - here, span)?;
        let high = binary(BinOp::Shl, high, (8 * here) as i64, span);
        Ok(TExpr {
            kind: TKind::Binary {
                op: BinOp::BitOr,
                lhs: Box::new(low),
                rhs: Box::new(high),
            },
            ty: UINT64,
            span,
        })
    }

    fn unreadable(
        &mut self,
        args: &FunctionArgs,
        p: &FunctionParam,
        why: &str,
        span: Span,
    ) -> super::Stop {
        self.error(
            Diagnostic::error(
                span,
                format!(
                    "parameter `{}` of {} cannot be read at its entry: {why}",
                    p.name, args.function
                ),
            )
            .hint("read the other parameters by name, or this one where the function passes it on"),
        )
    }
}

/// `lhs OP rhs` on 64-bit unsigned integers.
fn binary(op: BinOp, lhs: TExpr, rhs: i64, span: Span) -> TExpr {
    TExpr {
        kind: TKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(TExpr::int(rhs, UINT64, span)),
        },
        ty: UINT64,
        span,
    }
}

/// `value >> bits`, or `value` itself when there is nothing to shift.
fn shifted(value: TExpr, bits: u64, span: Span) -> TExpr {
    if bits == 0 {
        return value;
    }
    binary(BinOp::Shr, value, bits as i64, span)
}

/// The low `bits` of `value`, or `value` itself when that is all of it.
fn masked(value: TExpr, bits: u64, span: Span) -> TExpr {
    if bits >= 64 {
        return value;
    }
    binary(BinOp::BitAnd, value, ((1u64 << bits) - 1) as i64, span)
}
