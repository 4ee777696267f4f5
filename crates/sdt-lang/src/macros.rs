//! Macros: `macro name($var, @map, expr) { ...; value }`, expanded in the
//! syntax tree before anything is checked.
//!
//! A use, `name(args)` or a bare `name` for a macro without parameters,
//! becomes a block expression: the macro's body with its parameters bound
//! and its own variables renamed, so that it can neither see nor change
//! the caller's variables except those passed in (bpftrace calls them
//! hygienic). How each parameter is bound:
//!
//! * `$x` takes a variable of the caller, which the body uses (and may
//!   change) under the parameter's name;
//! * `@m` takes a map of the caller, likewise;
//! * `x` takes any expression, which the body evaluates wherever it
//!   names `x` (once per use, as a text substitution would).
//!
//! A macro is found by its name and number of parameters, so a macro may
//! share a builtin's name with another arity and leave the builtin in
//! place; with the same arity it takes the builtin's place. Macros may
//! use other macros, in any order of definition, but not themselves.

use std::collections::HashMap;

use crate::ast::*;
use crate::diag::{Diagnostic, Span};

/// How deep expansions may nest: far beyond any script that means it.
const MAX_DEPTH: usize = 64;

/// Expands every macro use in `script`'s probes.
pub fn expand(script: &mut Script) -> Result<(), Diagnostic> {
    if script.macros.is_empty() {
        return Ok(());
    }
    let mut by_signature: HashMap<(String, usize), &Macro> = HashMap::new();
    for m in &script.macros {
        if let Some(first) = by_signature.insert((m.name.clone(), m.params.len()), m) {
            return Err(Diagnostic::error(
                m.span,
                format!(
                    "macro {} with {} parameter{} is defined twice",
                    m.name,
                    m.params.len(),
                    if m.params.len() == 1 { "" } else { "s" }
                ),
            )
            .related(first.span, "first defined here"));
        }
    }
    let mut expander = Expander {
        macros: by_signature,
        active: Vec::new(),
        uses: 0,
    };
    let mut probes = std::mem::take(&mut script.probes);
    for probe in &mut probes {
        if let Some(p) = probe.predicate.take() {
            probe.predicate = Some(expander.expr(p)?);
        }
        probe.body = expander.block(std::mem::take(&mut probe.body))?;
    }
    script.probes = probes;
    Ok(())
}

struct Expander<'m> {
    macros: HashMap<(String, usize), &'m Macro>,
    /// The macros being expanded, innermost last, to refuse recursion.
    active: Vec<String>,
    /// Uses expanded so far, which makes each renamed variable unique.
    uses: usize,
}

impl Expander<'_> {
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
                name,
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
                var,
                var_span,
                iter: match iter {
                    ForIter::Range { start, end } => ForIter::Range {
                        start: self.expr(start)?,
                        end: self.expr(end)?,
                    },
                    map @ ForIter::Map { .. } => map,
                },
                body: self.block(body)?,
            },
            StmtKind::Let {
                name,
                name_span,
                ty,
                value,
            } => StmtKind::Let {
                name,
                name_span,
                ty,
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
            keys: self.exprs(map.keys)?,
            ..map
        })
    }

    fn exprs(&mut self, exprs: Vec<Expr>) -> Result<Vec<Expr>, Diagnostic> {
        exprs.into_iter().map(|e| self.expr(e)).collect()
    }

    fn boxed(&mut self, e: Expr) -> Result<Box<Expr>, Diagnostic> {
        Ok(Box::new(self.expr(e)?))
    }

    fn expr(&mut self, e: Expr) -> Result<Expr, Diagnostic> {
        let span = e.span;
        let kind = match e.kind {
            ExprKind::Call {
                name,
                name_span,
                args,
            } => {
                let args = self.exprs(args)?;
                if self.macros.contains_key(&(name.clone(), args.len())) {
                    return self.use_macro(&name, args, span);
                }
                ExprKind::Call {
                    name,
                    name_span,
                    args,
                }
            }
            ExprKind::Ident(name) if self.macros.contains_key(&(name.clone(), 0)) => {
                return self.use_macro(&name, Vec::new(), span)
            }
            ExprKind::Map(map) => ExprKind::Map(self.map_ref(map)?),
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
                ty,
                expr: self.boxed(*expr)?,
            },
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
        Ok(Expr { kind, span })
    }

    /// The block a use of macro `name` becomes; `args` are expanded.
    fn use_macro(&mut self, name: &str, args: Vec<Expr>, span: Span) -> Result<Expr, Diagnostic> {
        let Some(&definition) = self.macros.get(&(name.to_string(), args.len())) else {
            return Err(Diagnostic::error(
                span,
                format!("no macro {name} takes these arguments"),
            ));
        };
        if self.active.iter().any(|m| m == name) {
            return Err(Diagnostic::error(span, format!("macro {name} uses itself"))
                .related(definition.span, "defined here")
                .hint("macros are expanded where they are used, so they cannot recurse"));
        }
        if self.active.len() >= MAX_DEPTH {
            return Err(Diagnostic::error(
                span,
                format!("macros nest more than {MAX_DEPTH} deep here"),
            ));
        }
        self.uses += 1;
        let mut binding = Binding {
            macro_name: name,
            suffix: format!("{name}#{}", self.uses),
            vars: HashMap::new(),
            maps: HashMap::new(),
            exprs: HashMap::new(),
        };
        for (param, arg) in definition.params.iter().zip(args) {
            let arg_span = arg.span;
            match (param, arg.kind) {
                (MacroParam::Var(p), ExprKind::Var(v)) => {
                    binding.vars.insert(p.clone(), v);
                }
                (MacroParam::Map(p), ExprKind::Map(m)) if m.keys.is_empty() => {
                    binding.maps.insert(p.clone(), m.name);
                }
                (MacroParam::Expr(p), kind) => {
                    binding.exprs.insert(
                        p.clone(),
                        Expr {
                            kind,
                            span: arg_span,
                        },
                    );
                }
                (MacroParam::Var(p), _) => {
                    return Err(Diagnostic::error(
                        arg_span,
                        format!("macro {name} takes a variable as ${p}"),
                    )
                    .related(definition.span, "defined here"))
                }
                (MacroParam::Map(p), _) => {
                    return Err(Diagnostic::error(
                        arg_span,
                        format!("macro {name} takes a whole map as @{p}"),
                    )
                    .related(definition.span, "defined here"))
                }
            }
        }
        let stmts = binding.block(definition.body.clone())?;
        let value = match &definition.value {
            Some(v) => Some(Box::new(binding.expr((**v).clone())?)),
            None => None,
        };
        self.active.push(name.to_string());
        let expanded = self.expr(Expr {
            kind: ExprKind::Block { stmts, value },
            span,
        });
        self.active.pop();
        expanded
    }
}

/// One use's parameters, and the renaming of the body's own variables.
struct Binding<'n> {
    macro_name: &'n str,
    /// Appended to the body's own variables.
    suffix: String,
    vars: HashMap<String, String>,
    maps: HashMap<String, String>,
    exprs: HashMap<String, Expr>,
}

impl Binding<'_> {
    fn var(&self, name: String) -> String {
        match self.vars.get(&name) {
            Some(bound) => bound.clone(),
            None => format!("{name}@{}", self.suffix),
        }
    }

    fn map(&self, name: &str, span: Span) -> Result<String, Diagnostic> {
        self.maps.get(name).cloned().ok_or_else(|| {
            Diagnostic::error(
                span,
                format!(
                    "macro {} uses @{name}, which is not passed to it",
                    self.macro_name
                ),
            )
            .hint(format!(
                "add @{name} to the macro's parameters and pass the map in"
            ))
        })
    }

    fn block(&self, stmts: Block) -> Result<Block, Diagnostic> {
        stmts.into_iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&self, stmt: Stmt) -> Result<Stmt, Diagnostic> {
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
                        name: self.map(&name, span)?,
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
                ty,
                value: value.map(|v| self.expr(v)).transpose()?,
            },
            other @ (StmtKind::Break | StmtKind::Continue | StmtKind::Return) => other,
        };
        Ok(Stmt {
            kind,
            span: stmt.span,
        })
    }

    fn map_ref(&self, map: MapRef) -> Result<MapRef, Diagnostic> {
        Ok(MapRef {
            name: self.map(&map.name, map.span)?,
            keys: self.exprs(map.keys)?,
            span: map.span,
        })
    }

    fn exprs(&self, exprs: Vec<Expr>) -> Result<Vec<Expr>, Diagnostic> {
        exprs.into_iter().map(|e| self.expr(e)).collect()
    }

    fn boxed(&self, e: Expr) -> Result<Box<Expr>, Diagnostic> {
        Ok(Box::new(self.expr(e)?))
    }

    fn expr(&self, e: Expr) -> Result<Expr, Diagnostic> {
        let span = e.span;
        let kind = match e.kind {
            ExprKind::Ident(name) => match self.exprs.get(&name) {
                Some(bound) => return Ok(bound.clone()),
                None => ExprKind::Ident(name),
            },
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
                ty,
                expr: self.boxed(*expr)?,
            },
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
        Ok(Expr { kind, span })
    }
}

#[cfg(test)]
mod tests {
    use crate::parser::parse;

    fn body(src: &str) -> String {
        let script = parse(src).unwrap();
        format!("{:?}", script.probes[0].body)
    }

    #[test]
    fn uses_become_blocks_with_parameters_bound() {
        let b = body("macro inc($x) { $x += 1; } BEGIN { $a = 1; inc($a); }");
        assert!(b.contains("Block"), "{b}");
        assert!(
            b.contains("name: \"a\""),
            "the caller's variable is used: {b}"
        );
        let b = body("macro one { $v = 1; $v } BEGIN { $v = one; }");
        assert!(
            b.contains("v@one#1"),
            "the body's own variables are renamed: {b}"
        );
        let b = body("macro add(x) { x + x } BEGIN { print(add(1 + 2)); }");
        assert_eq!(b.matches("Binary").count(), 3, "{b}");
    }

    #[test]
    fn macros_find_each_other_and_builtins_stay_for_other_arities() {
        let b = body("macro a2(x) { a1(x) + 1 } macro a1(x) { x + 1 } BEGIN { print(a2(1)); }");
        assert!(!b.contains("a1"), "{b}");
        let b = body("macro cpu(x) { x } BEGIN { print(cpu); print(cpu(2)); }");
        assert!(b.contains("Ident(\"cpu\")"), "{b}");
    }

    #[test]
    fn misuse_is_a_located_error() {
        let e = parse("macro m() { @x = 1; } BEGIN { m(); }").unwrap_err();
        assert!(e.message.contains("not passed to it"), "{}", e.message);
        let e = parse("macro m($x) { $x } BEGIN { m(1); }").unwrap_err();
        assert!(e.message.contains("takes a variable"), "{}", e.message);
        let e = parse("macro m() { m() } BEGIN { m(); }").unwrap_err();
        assert!(e.message.contains("uses itself"), "{}", e.message);
        let e = parse("macro m() { 1 } macro m() { 2 } BEGIN { }").unwrap_err();
        assert!(e.message.contains("defined twice"), "{}", e.message);
    }
}
