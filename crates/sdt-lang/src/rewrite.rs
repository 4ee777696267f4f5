//! Rewriting the syntax tree: the walk over every statement and
//! expression is written once here, and a rewriter says only what it
//! changes (the names of variables and maps, and expressions it replaces
//! once their parts are rewritten). Macro expansion uses two: one that
//! finds the uses, one that binds a use's parameters.

use crate::ast::*;
use crate::diag::{Diagnostic, Span};

pub(crate) trait Rewrite {
    /// A scratch variable's name, wherever it stands.
    fn var(&mut self, name: String) -> String {
        name
    }

    /// A map's name, wherever it stands.
    fn map(&mut self, name: String, _span: Span) -> Result<String, Diagnostic> {
        Ok(name)
    }

    /// An expression whose parts are rewritten already.
    fn after(&mut self, e: Expr) -> Result<Expr, Diagnostic> {
        Ok(e)
    }

    fn block(&mut self, stmts: Block) -> Result<Block, Diagnostic> {
        stmts.into_iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, stmt: Stmt) -> Result<Stmt, Diagnostic> {
        let kind = match stmt.kind {
            StmtKind::Expr(e) => StmtKind::Expr(self.expr(e)?),
            StmtKind::AssignVar {
                name,
                name_span,
                op,
                value,
            } => StmtKind::AssignVar {
                name: self.var(name),
                name_span,
                op,
                value: self.expr(value)?,
            },
            StmtKind::AssignMap { map, op, value } => StmtKind::AssignMap {
                map: self.map_ref(map)?,
                op,
                value: self.expr(value)?,
            },
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => StmtKind::If {
                cond: self.expr(cond)?,
                then: self.block(then)?,
                otherwise: otherwise.map(|b| self.block(b)).transpose()?,
            },
            StmtKind::Unroll { count, body } => StmtKind::Unroll {
                count: self.expr(count)?,
                body: self.block(body)?,
            },
            StmtKind::While { cond, body } => StmtKind::While {
                cond: self.expr(cond)?,
                body: self.block(body)?,
            },
            StmtKind::For {
                var,
                var_span,
                iter,
                body,
            } => StmtKind::For {
                var: self.var(var),
                var_span,
                iter: match iter {
                    ForIter::Range { start, end } => ForIter::Range {
                        start: self.expr(start)?,
                        end: self.expr(end)?,
                    },
                    ForIter::Map { name, span } => ForIter::Map {
                        name: self.map(name, span)?,
                        span,
                    },
                },
                body: self.block(body)?,
            },
            StmtKind::Let {
                name,
                name_span,
                ty,
                value,
            } => StmtKind::Let {
                name: self.var(name),
                name_span,
                ty: ty.map(|t| self.type_name(t)).transpose()?,
                value: value.map(|v| self.expr(v)).transpose()?,
            },
            other @ (StmtKind::Break | StmtKind::Continue | StmtKind::Return) => other,
        };
        Ok(Stmt {
            kind,
            span: stmt.span,
        })
    }

    fn map_ref(&mut self, map: MapRef) -> Result<MapRef, Diagnostic> {
        Ok(MapRef {
            name: self.map(map.name, map.span)?,
            keys: self.exprs(map.keys)?,
            span: map.span,
        })
    }

    fn exprs(&mut self, exprs: Vec<Expr>) -> Result<Vec<Expr>, Diagnostic> {
        exprs.into_iter().map(|e| self.expr(e)).collect()
    }

    fn boxed(&mut self, e: Expr) -> Result<Box<Expr>, Diagnostic> {
        Ok(Box::new(self.expr(e)?))
    }

    /// A type, whose `typeof(EXPR)` holds an expression.
    fn type_name(&mut self, ty: TypeName) -> Result<TypeName, Diagnostic> {
        let of = ty.of.map(|e| self.boxed(*e)).transpose()?;
        Ok(TypeName { of, ..ty })
    }

    fn expr(&mut self, e: Expr) -> Result<Expr, Diagnostic> {
        let span = e.span;
        let kind = match e.kind {
            ExprKind::Var(name) => ExprKind::Var(self.var(name)),
            ExprKind::Map(map) => ExprKind::Map(self.map_ref(map)?),
            ExprKind::Call {
                name,
                name_span,
                args,
            } => ExprKind::Call {
                name,
                name_span,
                args: self.exprs(args)?,
            },
            ExprKind::Unary { op, expr } => ExprKind::Unary {
                op,
                expr: self.boxed(*expr)?,
            },
            ExprKind::Binary { op, lhs, rhs } => ExprKind::Binary {
                op,
                lhs: self.boxed(*lhs)?,
                rhs: self.boxed(*rhs)?,
            },
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => ExprKind::Ternary {
                cond: self.boxed(*cond)?,
                then: self.boxed(*then)?,
                otherwise: self.boxed(*otherwise)?,
            },
            ExprKind::Cast { ty, expr } => ExprKind::Cast {
                ty: self.type_name(ty)?,
                expr: self.boxed(*expr)?,
            },
            ExprKind::SizeofType(ty) => ExprKind::SizeofType(self.type_name(ty)?),
            ExprKind::Field {
                expr,
                field,
                field_span,
                arrow,
            } => ExprKind::Field {
                expr: self.boxed(*expr)?,
                field,
                field_span,
                arrow,
            },
            ExprKind::TupleIndex { expr, index } => ExprKind::TupleIndex {
                expr: self.boxed(*expr)?,
                index,
            },
            ExprKind::Index { expr, index } => ExprKind::Index {
                expr: self.boxed(*expr)?,
                index: self.boxed(*index)?,
            },
            ExprKind::Tuple(items) => ExprKind::Tuple(self.exprs(items)?),
            ExprKind::Record(fields) => ExprKind::Record(
                fields
                    .into_iter()
                    .map(|(name, value)| Ok((name, self.expr(value)?)))
                    .collect::<Result<_, Diagnostic>>()?,
            ),
            ExprKind::IncDec {
                target,
                increment,
                prefix,
            } => ExprKind::IncDec {
                target: self.boxed(*target)?,
                increment,
                prefix,
            },
            ExprKind::Block { stmts, value } => ExprKind::Block {
                stmts: self.block(stmts)?,
                value: value.map(|v| self.boxed(*v)).transpose()?,
            },
            other => other,
        };
        self.after(Expr { kind, span })
    }
}
