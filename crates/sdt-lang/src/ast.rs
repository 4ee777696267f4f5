//! The syntax tree of a script, as the parser builds it.
//!
//! Every node keeps the [`Span`] of the text it came from, so that later
//! passes can point at the exact place a problem is about. Compound
//! assignments (`$x += 1`) are kept as written; the checker gives them
//! meaning.

use crate::diag::Span;
use crate::lexer::RawAttachPoint;

/// A whole script.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Script {
    /// C definitions (`struct`, `union`, `enum`, `typedef`) in source order.
    pub definitions: Vec<CDefinition>,
    /// `#include` and `#define` lines, without the `#`.
    pub directives: Vec<(Span, String)>,
    /// `config = { NAME = VALUE; ... }` entries.
    pub config: Vec<ConfigEntry>,
    /// `import "PATH";` statements, resolved before checking.
    pub imports: Vec<Import>,
    /// `macro name(params) { ... }` definitions, expanded by the parser.
    pub macros: Vec<Macro>,
    /// `let @name = hash(N);` declarations.
    pub map_declarations: Vec<MapDeclaration>,
    pub probes: Vec<Probe>,
}

/// `import "PATH";`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    pub path: String,
    pub span: Span,
}

/// `macro name($var, @map, expr) { body }`.
#[derive(Clone, Debug, PartialEq)]
pub struct Macro {
    pub name: String,
    pub params: Vec<MacroParam>,
    pub body: Block,
    /// The body's last expression, without `;`: the macro's value.
    pub value: Option<Box<Expr>>,
    pub span: Span,
}

/// How a macro parameter is passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MacroParam {
    /// `$name`: the caller's variable, which the body may change.
    Var(String),
    /// `@name`: the caller's map, which the body may change.
    Map(String),
    /// `name`: an expression, evaluated where the body uses it.
    Expr(String),
}

/// `let @name = KIND(ENTRIES);`: a map of a chosen kind and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDeclaration {
    pub name: String,
    /// `hash`, `lruhash`, `percpuhash` or `percpulruhash`.
    pub kind: String,
    pub kind_span: Span,
    pub entries: u64,
    pub span: Span,
}

/// The text of one C definition, parsed into types by the checker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CDefinition {
    pub text: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Expr,
    pub span: Span,
}

/// `attach, attach /predicate/ { body }`.
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    pub attach_points: Vec<RawAttachPoint>,
    pub predicate: Option<Expr>,
    pub body: Block,
    pub span: Span,
}

pub type Block = Vec<Stmt>;

/// What a `for` loop walks.
#[derive(Clone, Debug, PartialEq)]
pub enum ForIter {
    Map {
        name: String,
        span: Span,
    },
    /// `start..end`: from `start` up to, not including, `end`.
    Range {
        start: Expr,
        end: Expr,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Expr(Expr),
    /// `$name = value` or `$name op= value` (`op` is then `Some`).
    AssignVar {
        name: String,
        name_span: Span,
        op: Option<BinOp>,
        value: Expr,
    },
    /// `@name[keys] = value` or `@name[keys] op= value`.
    AssignMap {
        map: MapRef,
        op: Option<BinOp>,
        value: Expr,
    },
    If {
        cond: Expr,
        then: Block,
        otherwise: Option<Block>,
    },
    /// `unroll (N) { ... }`: the body repeated N times.
    Unroll {
        count: Expr,
        body: Block,
    },
    While {
        cond: Expr,
        body: Block,
    },
    /// `for ($kv : @map) { ... }` or `for ($i : start..end) { ... }`.
    For {
        var: String,
        var_span: Span,
        iter: ForIter,
        body: Block,
    },
    /// `let $name [: type] [= value];`: a variable of this block.
    Let {
        name: String,
        name_span: Span,
        ty: Option<TypeName>,
        value: Option<Expr>,
    },
    Break,
    Continue,
    Return,
}

/// `@name` or `@name[k1, k2]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MapRef {
    pub name: String,
    pub keys: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer literal; a leading minus is folded in.
    Int(i128),
    Str(Vec<u8>),
    /// A bare identifier: a builtin (`pid`, `arg0`), an enum value, or a
    /// stack mode (`perf`, `bpftrace`).
    Ident(String),
    Var(String),
    Map(MapRef),
    /// `$N`.
    Param(u32),
    /// `$#`.
    ParamCount,
    Call {
        name: String,
        name_span: Span,
        args: Vec<Expr>,
    },
    Unary {
        op: UnOp,
        expr: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    Cast {
        ty: TypeName,
        expr: Box<Expr>,
    },
    /// `expr.field`, or `expr->field` when `arrow`.
    Field {
        expr: Box<Expr>,
        field: String,
        field_span: Span,
        arrow: bool,
    },
    /// `expr.N` on a tuple.
    TupleIndex {
        expr: Box<Expr>,
        index: u32,
    },
    Index {
        expr: Box<Expr>,
        index: Box<Expr>,
    },
    Tuple(Vec<Expr>),
    /// `(name=value, ...)`: a record, a tuple whose items have names.
    Record(Vec<(String, Expr)>),
    /// `x++`, `++x`, `x--`, `--x` on a variable or a map.
    IncDec {
        target: Box<Expr>,
        increment: bool,
        prefix: bool,
    },
    /// `sizeof(type)`.
    SizeofType(TypeName),
    /// `offsetof(struct name, field)`.
    Offsetof {
        ty: TypeName,
        field: String,
    },
    /// `{ statements; value }`: a block whose last expression, written
    /// without `;`, is its value (none when it ends with a statement).
    Block {
        stmts: Block,
        value: Option<Box<Expr>>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!x`
    Not,
    /// `~x`
    BitNot,
    /// `*p`
    Deref,
    /// `&x`
    AddrOf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        use BinOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            BitAnd => "&",
            BitOr => "|",
            BitXor => "^",
            Shl => "<<",
            Shr => ">>",
            Eq => "==",
            Ne => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            And => "&&",
            Or => "||",
        }
    }

    pub fn is_comparison(self) -> bool {
        use BinOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }
}

/// A type as written in a cast or `sizeof`: `uint8`, `struct foo *`,
/// `int32[4]`, `typeof($x)`.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeName {
    /// `uint8`, `int`, `struct foo`, `union u`, `enum e`, or a typedef name.
    pub name: String,
    pub pointers: u8,
    /// `[N]` or `[]` after the name.
    pub array: Option<ArrayLen>,
    /// `typeof(EXPR)` (bpftrace 0.25): the type of an expression, which
    /// is never run. `name` is then `typeof`.
    pub of: Option<Box<Expr>>,
    pub span: Span,
}

/// The length in `type[N]`, or `[]`, where a cast takes it from the value
/// (`(int8[])x` is as many bytes as `x` has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayLen {
    Known(u64),
    FromValue,
}
