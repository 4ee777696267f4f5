//! Label names that read well, from the expressions a map's keys are
//! made of where the script first assigns it: `@reqs[comm, pid]` gives
//! `comm` and `pid`, `str(arg1)` gives `arg1`, `str(args.query)` gives
//! `query`, `$method` gives `method`, `ustack` gives `stack`. Whatever has
//! no name of its own (`arg0 + 1`, a literal) is `key0`, `key1`... by its
//! place in the key.
//!
//! They come from the syntax tree, before types: a name is about how the
//! script spells the key, not about what it holds.

use sdt_job::program::{Block, Expr, ExprKind, MapRef, Script, StmtKind};

/// The key expressions of the first assignment to `@name`, or of its
/// first use with keys when it is never assigned with them.
pub fn first_keys<'s>(script: &'s Script, name: &str) -> Option<&'s [Expr]> {
    let mut assigned = None;
    let mut used = None;
    for probe in &script.probes {
        if let Some(p) = &probe.predicate {
            uses(p, name, &mut used);
        }
        walk(&probe.body, name, &mut assigned, &mut used);
        if assigned.is_some() {
            break;
        }
    }
    assigned.or(used).map(|m: &MapRef| m.keys.as_slice())
}

fn walk<'s>(
    block: &'s Block,
    name: &str,
    assigned: &mut Option<&'s MapRef>,
    used: &mut Option<&'s MapRef>,
) {
    for stmt in block {
        if assigned.is_some() {
            return;
        }
        match &stmt.kind {
            StmtKind::AssignMap { map, value, .. } => {
                if map.name == name && !map.keys.is_empty() {
                    *assigned = Some(map);
                    return;
                }
                uses(value, name, used);
            }
            StmtKind::Expr(e)
            | StmtKind::AssignVar { value: e, .. }
            | StmtKind::Let { value: Some(e), .. } => uses(e, name, used),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                uses(cond, name, used);
                walk(then, name, assigned, used);
                if let Some(block) = otherwise {
                    walk(block, name, assigned, used);
                }
            }
            StmtKind::Unroll { body, .. } | StmtKind::For { body, .. } => {
                walk(body, name, assigned, used)
            }
            StmtKind::While { cond, body } => {
                uses(cond, name, used);
                walk(body, name, assigned, used);
            }
            StmtKind::Let { value: None, .. }
            | StmtKind::Break
            | StmtKind::Continue
            | StmtKind::Return => {}
        }
    }
}

/// Notes the first keyed use of `@name` in `e`.
fn uses<'s>(e: &'s Expr, name: &str, used: &mut Option<&'s MapRef>) {
    if used.is_some() {
        return;
    }
    match &e.kind {
        ExprKind::Map(m) => {
            if m.name == name && !m.keys.is_empty() {
                *used = Some(m);
            } else {
                m.keys.iter().for_each(|k| uses(k, name, used));
            }
        }
        ExprKind::Call { args, .. } | ExprKind::Tuple(args) => {
            args.iter().for_each(|a| uses(a, name, used))
        }
        ExprKind::Unary { expr, .. }
        | ExprKind::Cast { expr, .. }
        | ExprKind::Field { expr, .. }
        | ExprKind::TupleIndex { expr, .. }
        | ExprKind::IncDec { target: expr, .. } => uses(expr, name, used),
        ExprKind::Binary { lhs, rhs, .. }
        | ExprKind::Index {
            expr: lhs,
            index: rhs,
        } => {
            uses(lhs, name, used);
            uses(rhs, name, used);
        }
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => {
            uses(cond, name, used);
            uses(then, name, used);
            uses(otherwise, name, used);
        }
        _ => {}
    }
}

/// A label name for the key part `e`, at `index` of the key.
pub fn label_of(e: &Expr, index: usize) -> String {
    named(e).unwrap_or_else(|| format!("key{index}"))
}

fn named(e: &Expr) -> Option<String> {
    match &e.kind {
        ExprKind::Ident(name) => Some(match name.as_str() {
            "ustack" => "stack".to_string(),
            other => other.to_string(),
        }),
        ExprKind::Var(name) => Some(name.clone()),
        ExprKind::Field { field, .. } => Some(field.clone()),
        ExprKind::Param(n) => Some(format!("param{n}")),
        ExprKind::Map(m) if m.keys.is_empty() && !m.name.is_empty() => Some(m.name.clone()),
        ExprKind::Cast { expr, .. } => named(expr),
        ExprKind::Call { name, args, .. } => match (name.as_str(), args.first()) {
            ("ustack", _) => Some("stack".into()),
            ("str" | "buf" | "uaddr" | "ntop" | "strerror" | "bswap", Some(inner)) => named(inner),
            ("usym" | "func", _) => Some("function".into()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(script: &str, map: &str) -> Vec<String> {
        let script = sdt_job::program::parse(script).unwrap();
        first_keys(&script, map)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, e)| label_of(e, i))
            .collect()
    }

    #[test]
    fn names_come_from_the_key_expressions() {
        let script = "
            usdt:./s:p:a /@seen[pid] == 0/ { @reqs[comm, pid, str(arg1), arg2 + 1, $1] = count(); }
            usdt:./s:p:b { $method = str(arg0); @lat[$method, args.status, probe] = hist(arg3); }
            uprobe:./s:f { @stacks[ustack, (uint32)tid] = count(); @[1] = count(); }";
        assert_eq!(
            labels(script, "reqs"),
            ["comm", "pid", "arg1", "key3", "param1"]
        );
        assert_eq!(labels(script, "lat"), ["method", "status", "probe"]);
        assert_eq!(labels(script, "stacks"), ["stack", "tid"]);
        assert_eq!(labels(script, ""), ["key0"]);
        assert_eq!(labels(script, "seen"), ["pid"], "a use when never assigned");
    }

    #[test]
    fn the_first_assignment_decides() {
        let script = "
            usdt:./s:p:a { if (arg0) { @m[tid] = 1; } }
            usdt:./s:p:b { @m[cpu] = 2; }";
        assert_eq!(labels(script, "m"), ["tid"]);
    }
}
