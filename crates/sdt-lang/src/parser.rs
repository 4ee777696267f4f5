//! The parser: text to [`Script`], by recursive descent.
//!
//! The grammar is bpftrace's: C definitions and `#` directives first,
//! then probes, each a comma-separated list of attach points, an optional
//! `/predicate/` and a block. Statements end with `;` except the last one
//! of a block and those that end with a block (`if`, `while`, `unroll`,
//! `for`). Expressions use C's precedence, with the ternary lowest and
//! assignment a statement, not an expression.
//!
//! A `/` inside a predicate is the end of the predicate when the next
//! thing after it is `{`; otherwise it divides, as in bpftrace.

use crate::ast::*;
use crate::diag::{Diagnostic, Span};
use crate::lexer::{Lexer, Tok, Token};

/// Parses a whole script.
pub fn parse(source: &str) -> Result<Script, Diagnostic> {
    let mut script = Parser::new(source).script()?;
    crate::macros::expand(&mut script)?;
    Ok(script)
}

/// Integer types a cast may name, with C's names for them.
pub const INT_TYPE_NAMES: &[&str] = &[
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int8_t", "int16_t",
    "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "char", "short", "int",
    "long", "bool", "_Bool", "size_t", "ssize_t", "void",
];

struct Parser<'s> {
    lexer: Lexer<'s>,
    peeked: Option<Token>,
    /// Inside `/.../`: a `/` followed by `{` ends the predicate.
    in_predicate: bool,
    /// Typedef names defined in the script, which may start a cast.
    typedefs: Vec<String>,
}

impl<'s> Parser<'s> {
    fn new(source: &'s str) -> Parser<'s> {
        Parser {
            lexer: Lexer::new(source),
            peeked: None,
            in_predicate: false,
            typedefs: Vec::new(),
        }
    }

    fn peek(&mut self) -> Result<&Token, Diagnostic> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lexer.next_token()?);
        }
        Ok(self.peeked.as_ref().expect("just filled"))
    }

    fn next(&mut self) -> Result<Token, Diagnostic> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lexer.next_token(),
        }
    }

    fn at(&mut self, punct: &str) -> Result<bool, Diagnostic> {
        Ok(matches!(&self.peek()?.tok, Tok::Punct(p) if *p == punct))
    }

    fn at_ident(&mut self, word: &str) -> Result<bool, Diagnostic> {
        Ok(matches!(&self.peek()?.tok, Tok::Ident(w) if w == word))
    }

    fn eat(&mut self, punct: &str) -> Result<Option<Span>, Diagnostic> {
        if self.at(punct)? {
            Ok(Some(self.next()?.span))
        } else {
            Ok(None)
        }
    }

    fn expect(&mut self, punct: &str, context: &str) -> Result<Span, Diagnostic> {
        match self.eat(punct)? {
            Some(span) => Ok(span),
            None => {
                let found = self.peek()?.clone();
                Err(unexpected(&found, &format!("`{punct}` {context}")))
            }
        }
    }

    fn script(mut self) -> Result<Script, Diagnostic> {
        let mut script = Script::default();
        loop {
            self.lexer.skip_trivia()?;
            let start = self.lexer.offset();
            let rest = &self.lexer.source()[start..];
            if rest.is_empty() {
                break;
            }
            if rest.starts_with('#') {
                let Token { tok, span } = self.lexer.next_token()?;
                if let Tok::Directive(text) = tok {
                    script.directives.push((span, text));
                }
                continue;
            }
            if ["struct", "union", "enum", "typedef"]
                .iter()
                .any(|w| self.lexer.at_word(w))
            {
                if !script.probes.is_empty() {
                    let end = start + rest.find([' ', '\n', '\t']).unwrap_or(rest.len());
                    return Err(Diagnostic::error(
                        Span::new(start, end),
                        "C definitions must come before the first probe",
                    )
                    .hint("move this definition to the top of the script"));
                }
                let definition = self.c_definition()?;
                if let Some(name) = typedef_name(&definition.text) {
                    self.typedefs.push(name);
                }
                script.definitions.push(definition);
                continue;
            }
            if self.lexer.at_word("config") && self.config_follows() {
                self.config(&mut script)?;
                continue;
            }
            if self.lexer.at_word("import") && self.word_then(6, '"') {
                let start = self.next()?.span;
                let token = self.next()?;
                let Tok::Str(path) = token.tok else {
                    return Err(unexpected(&token, "the file to import, in quotes"));
                };
                let end = self.expect(";", "after the import")?;
                script.imports.push(Import {
                    path: String::from_utf8_lossy(&path).into_owned(),
                    span: start.to(end),
                });
                continue;
            }
            if self.lexer.at_word("macro") && self.word_then(5, ' ') {
                script.macros.push(self.macro_definition()?);
                continue;
            }
            if self.lexer.at_word("let") && self.word_then(3, '@') {
                script.map_declarations.push(self.map_declaration()?);
                continue;
            }
            script.probes.push(self.probe()?);
        }
        if script.probes.is_empty() {
            let end = self.lexer.source().len();
            return Err(Diagnostic::error(
                Span::new(end, end),
                "the script has no probes",
            )
            .hint("a probe looks like: usdt:/path/to/program:provider:name { printf(\"hit\\n\"); }"));
        }
        Ok(script)
    }

    /// Whether the word of `len` bytes at the current offset is followed,
    /// after blanks, by `next` (for `' '`: by any blank).
    fn word_then(&self, len: usize, next: char) -> bool {
        let rest = &self.lexer.source()[self.lexer.offset() + len..];
        if next == ' ' {
            return rest.starts_with(char::is_whitespace);
        }
        rest.trim_start().starts_with(next)
    }

    /// `macro name(params) { body }`; the parameters may be left out.
    fn macro_definition(&mut self) -> Result<Macro, Diagnostic> {
        let start = self.next()?.span; // macro
        let token = self.next()?;
        let Tok::Ident(name) = token.tok else {
            return Err(unexpected(&token, "the macro's name"));
        };
        let mut params = Vec::new();
        if self.eat("(")?.is_some() {
            while self.eat(")")?.is_none() {
                let token = self.next()?;
                params.push(match token.tok {
                    Tok::Var(v) => MacroParam::Var(v),
                    Tok::Map(m) => MacroParam::Map(m),
                    Tok::Ident(i) => MacroParam::Expr(i),
                    _ => {
                        return Err(unexpected(
                            &token,
                            "a parameter: `$var`, `@map` or a name for an expression",
                        ))
                    }
                });
                if self.eat(",")?.is_none() && !self.at(")")? {
                    let found = self.peek()?.clone();
                    return Err(unexpected(&found, "`,` or `)` after the parameter"));
                }
            }
        }
        let open = self.expect("{", "to open the macro's body")?;
        let (body, value) = self.block_body(open, true)?;
        Ok(Macro {
            name,
            params,
            body,
            value: value.map(Box::new),
            span: start.to(self.span_here()),
        })
    }

    /// `let @name = KIND(ENTRIES);`.
    fn map_declaration(&mut self) -> Result<MapDeclaration, Diagnostic> {
        let start = self.next()?.span; // let
        let token = self.next()?;
        let Tok::Map(name) = token.tok else {
            return Err(unexpected(&token, "a map name"));
        };
        self.expect("=", "after the map's name")?;
        let kind = self.next()?;
        let Tok::Ident(kind_name) = kind.tok else {
            return Err(unexpected(&kind, "a map kind such as `hash(1024)`"));
        };
        self.expect("(", "after the map kind")?;
        let size = self.next()?;
        let Tok::Int(entries) = size.tok else {
            return Err(unexpected(&size, "the map's number of entries"));
        };
        self.expect(")", "after the number of entries")?;
        let end = self.expect(";", "after the map declaration")?;
        Ok(MapDeclaration {
            name,
            kind: kind_name,
            kind_span: kind.span,
            entries,
            span: start.to(end),
        })
    }

    fn config_follows(&self) -> bool {
        let rest = &self.lexer.source()[self.lexer.offset() + "config".len()..];
        rest.trim_start().starts_with('=')
    }

    /// `config = { NAME = VALUE; ... }`.
    fn config(&mut self, script: &mut Script) -> Result<(), Diagnostic> {
        self.next()?; // config
        self.expect("=", "after `config`")?;
        self.expect("{", "to open the config block")?;
        while self.eat("}")?.is_none() {
            let token = self.next()?;
            let Tok::Ident(name) = token.tok else {
                return Err(unexpected(&token, "a config option name"));
            };
            self.expect("=", "after the config option name")?;
            let value = self.expr()?;
            let span = token.span.to(value.span);
            script.config.push(ConfigEntry { name, value, span });
            if self.eat(";")?.is_none() && !self.at("}")? {
                let found = self.peek()?.clone();
                return Err(unexpected(&found, "`;` between config options"));
            }
        }
        Ok(())
    }

    /// Reads a C definition as text: up to the `}` that closes its first
    /// `{` and an optional `;`, or up to a `;` at depth 0.
    fn c_definition(&mut self) -> Result<CDefinition, Diagnostic> {
        let source = self.lexer.source();
        let start = self.lexer.offset();
        let mut depth = 0usize;
        let mut end = None;
        let bytes = source.as_bytes();
        let mut i = start;
        while i < bytes.len() {
            match bytes[i] {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        // `__attribute__((packed))` after the brace belongs
                        // to the definition (bpftrace 0.26).
                        let close = i + 1 + attributes_len(&source[i + 1..]);
                        let after = source[close..].trim_start();
                        // `} name;` (typedef) or `} ;`: run to the `;`.
                        let semi = after.find(';');
                        let next_brace = after.find('{');
                        end = match semi {
                            Some(s) if next_brace.is_none_or(|b| s < b) => {
                                Some(source.len() - after.len() + s + 1)
                            }
                            _ => Some(close),
                        };
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = Some(i + 1);
                    break;
                }
                b'/' if bytes.get(i + 1) == Some(&b'/') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                    continue;
                }
                b'/' if bytes.get(i + 1) == Some(&b'*') => {
                    i = source[i + 2..]
                        .find("*/")
                        .map_or(bytes.len(), |e| i + 2 + e + 2);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        let Some(end) = end else {
            return Err(Diagnostic::error(
                Span::new(start, source.len()),
                "this C definition never ends",
            )
            .hint("close it with `};`"));
        };
        self.lexer.seek(end);
        Ok(CDefinition {
            text: source[start..end].to_string(),
            span: Span::new(start, end),
        })
    }

    fn probe(&mut self) -> Result<Probe, Diagnostic> {
        let start = self.lexer.offset();
        let mut attach_points = Vec::new();
        loop {
            let point = self.lexer.attach_point()?;
            if point.text.is_empty() {
                let found = self.peek()?.clone();
                return Err(unexpected(
                    &found,
                    "a probe (such as `usdt:PATH:PROVIDER:NAME` or `BEGIN`)",
                ));
            }
            attach_points.push(point);
            self.lexer.skip_trivia()?;
            if self.lexer.source()[self.lexer.offset()..].starts_with(',') {
                self.next()?;
                continue;
            }
            break;
        }
        let predicate = if self.at("/")? {
            let open = self.next()?.span;
            self.in_predicate = true;
            let expr = self.expr();
            self.in_predicate = false;
            let expr = expr?;
            if self.eat("/")?.is_none() {
                let found = self.peek()?.clone();
                return Err(unexpected(&found, "`/` to end the predicate")
                    .related(open, "the predicate starts here"));
            }
            Some(expr)
        } else {
            None
        };
        if !self.at("{")? {
            let found = self.peek()?.clone();
            let mut d = unexpected(&found, "`{` to start the probe's actions");
            if let Tok::Ident(_) | Tok::Punct(":") = found.tok {
                d = d.hint("an attach point has no spaces; quote a path that has some");
            }
            return Err(d);
        }
        let body = self.block()?;
        let end = self.last_end();
        Ok(Probe {
            attach_points,
            predicate,
            body,
            span: Span::new(start, end),
        })
    }

    fn last_end(&self) -> usize {
        self.lexer.offset()
    }

    fn block(&mut self) -> Result<Block, Diagnostic> {
        let open = self.expect("{", "to open a block")?;
        let (mut stmts, value) = self.block_body(open, false)?;
        if let Some(value) = value {
            let span = value.span;
            stmts.push(Stmt {
                kind: StmtKind::Expr(value),
                span,
            });
        }
        Ok(stmts)
    }

    /// The statements of a block whose `{` is read, up to its `}`, and
    /// the last expression when no `;` follows it (the block's value).
    /// Where a value is wanted (`value_wanted`), an `if` that ends the
    /// block, each of whose arms gives a value, gives the block's
    /// (bpftrace 0.25 and later: `{ if c { a } else { b } }`).
    fn block_body(
        &mut self,
        open: Span,
        value_wanted: bool,
    ) -> Result<(Block, Option<Expr>), Diagnostic> {
        let mut stmts = Vec::new();
        loop {
            while self.eat(";")?.is_some() {}
            if self.eat("}")?.is_some() {
                return Ok((stmts, None));
            }
            if self.peek()?.tok == Tok::Eof {
                let found = self.peek()?.clone();
                return Err(unexpected(&found, "`}` to close the block")
                    .related(open, "the block opens here"));
            }
            if self.at_ident("if")? {
                let start = self.peek()?.span;
                let (kind, value) = self.if_parts()?;
                if let Some(value) = value.filter(|_| value_wanted) {
                    if self.eat("}")?.is_some() {
                        return Ok((stmts, Some(value)));
                    }
                }
                let span = start.to(self.span_here());
                stmts.push(Stmt { kind, span });
                continue;
            }
            let (stmt, needs_semicolon) = self.stmt()?;
            if needs_semicolon && self.eat(";")?.is_none() {
                if self.eat("}")?.is_some() {
                    if let StmtKind::Expr(value) = stmt.kind {
                        return Ok((stmts, Some(value)));
                    }
                    stmts.push(stmt);
                    return Ok((stmts, None));
                }
                let found = self.peek()?.clone();
                return Err(unexpected(&found, "`;` after the statement"));
            }
            stmts.push(stmt);
        }
    }

    /// `(` if present; returns whether it was.
    fn open_paren(&mut self) -> Result<bool, Diagnostic> {
        Ok(self.eat("(")?.is_some())
    }

    /// One statement, and whether a `;` must follow it: a keyword's
    /// statement, or an expression that may be assigned to.
    fn stmt(&mut self) -> Result<(Stmt, bool), Diagnostic> {
        let start = self.peek()?.span;
        let keyword = match &self.peek()?.tok {
            Tok::Ident(w) => w.clone(),
            _ => String::new(),
        };
        // A statement that ends with a block needs no `;`.
        let block_stmt = |kind, span| Ok((Stmt { kind, span }, false));
        match keyword.as_str() {
            "if" => block_stmt(self.if_stmt()?, start.to(self.span_here())),
            "unroll" => block_stmt(self.unroll_stmt()?, start),
            "while" => block_stmt(self.while_stmt()?, start),
            "for" => block_stmt(self.for_stmt()?, start),
            "let" => Ok((self.let_stmt(start)?, true)),
            "break" => Ok((self.jump_stmt(StmtKind::Break)?, true)),
            "continue" => Ok((self.jump_stmt(StmtKind::Continue)?, true)),
            "return" => Ok((self.return_stmt()?, true)),
            _ => self.expr_or_assignment(),
        }
    }

    /// `unroll (N) { ... }`.
    fn unroll_stmt(&mut self) -> Result<StmtKind, Diagnostic> {
        self.next()?;
        self.expect("(", "after `unroll`")?;
        let count = self.expr()?;
        self.expect(")", "after the unroll count")?;
        let body = self.block()?;
        Ok(StmtKind::Unroll { count, body })
    }

    /// `while COND { ... }`.
    fn while_stmt(&mut self) -> Result<StmtKind, Diagnostic> {
        self.next()?;
        let cond = self.expr()?;
        let body = self.block()?;
        Ok(StmtKind::While { cond, body })
    }

    /// `for $x : @map { ... }` or `for ($i : START..END) { ... }`.
    fn for_stmt(&mut self) -> Result<StmtKind, Diagnostic> {
        self.next()?;
        let parenthesized = self.open_paren()?;
        let var = self.next()?;
        let Tok::Var(name) = var.tok else {
            return Err(unexpected(&var, "a variable such as `$kv`"));
        };
        self.expect(":", "between the variable and what it walks")?;
        let first = self.unary()?;
        let iter = if self.eat("..")?.is_some() {
            let end = self.unary()?;
            ForIter::Range { start: first, end }
        } else {
            match first.kind {
                ExprKind::Map(map) if map.keys.is_empty() => ForIter::Map {
                    name: map.name,
                    span: map.span,
                },
                _ => {
                    return Err(Diagnostic::error(
                        first.span,
                        "a for loop walks a map (`@m`) or a range (`start..end`)",
                    ))
                }
            }
        };
        if parenthesized {
            self.expect(")", "to close the loop's head")?;
        }
        let body = self.block()?;
        Ok(StmtKind::For {
            var: name,
            var_span: var.span,
            iter,
            body,
        })
    }

    /// `let $x`, with a type and a value if given.
    fn let_stmt(&mut self, start: Span) -> Result<Stmt, Diagnostic> {
        self.next()?;
        let var = self.next()?;
        let Tok::Var(name) = var.tok else {
            return Err(unexpected(&var, "a variable such as `$x`"));
        };
        let ty = match self.eat(":")? {
            Some(colon) => Some(self.type_name(colon)?),
            None => None,
        };
        let value = match self.eat("=")? {
            Some(_) => Some(self.expr()?),
            None => None,
        };
        let span = start.to(value.as_ref().map_or(var.span, |v| v.span));
        Ok(Stmt {
            kind: StmtKind::Let {
                name,
                name_span: var.span,
                ty,
                value,
            },
            span,
        })
    }

    /// `break` or `continue`: the keyword alone.
    fn jump_stmt(&mut self, kind: StmtKind) -> Result<Stmt, Diagnostic> {
        let span = self.next()?.span;
        Ok(Stmt { kind, span })
    }

    /// `return` or `return VALUE`: the value is evaluated and dropped,
    /// since a probe's own return value means nothing to sdt.
    fn return_stmt(&mut self) -> Result<Stmt, Diagnostic> {
        let span = self.next()?.span;
        let kind = StmtKind::Return;
        if self.at(";")? || self.at("}")? {
            return Ok(Stmt { kind, span });
        }
        let value = self.expr()?;
        let whole = span.to(value.span);
        let stmts = vec![
            Stmt {
                span: value.span,
                kind: StmtKind::Expr(value),
            },
            Stmt { kind, span },
        ];
        Ok(Stmt {
            kind: StmtKind::Expr(Expr {
                kind: ExprKind::Block { stmts, value: None },
                span: whole,
            }),
            span: whole,
        })
    }

    /// An expression statement, or an assignment (`=`, `+=`, ...) to a
    /// variable or a map, and whether a `;` must follow it.
    fn expr_or_assignment(&mut self) -> Result<(Stmt, bool), Diagnostic> {
        let target = self.expr()?;
        let op = match &self.peek()?.tok {
            Tok::Punct(p) => assignment_op(p),
            _ => None,
        };
        let Some(op) = op else {
            let span = target.span;
            // A block ends at its `}`, as an `if` does.
            let needs_semicolon = !matches!(target.kind, ExprKind::Block { .. });
            return Ok((
                Stmt {
                    kind: StmtKind::Expr(target),
                    span,
                },
                needs_semicolon,
            ));
        };
        let op_span = self.next()?.span;
        let value = self.expr()?;
        let span = target.span.to(value.span);
        let kind = match target.kind {
            // `_ = expr`: the value is thrown away on purpose.
            ExprKind::Ident(name) if name == "_" && op.is_none() => StmtKind::Expr(value),
            ExprKind::Var(name) => StmtKind::AssignVar {
                name,
                name_span: target.span,
                op,
                value,
            },
            ExprKind::Map(map) => StmtKind::AssignMap { map, op, value },
            ExprKind::TupleIndex { .. } => {
                return Err(Diagnostic::error(target.span, "tuples cannot be changed")
                    .hint("make a new tuple and assign that instead"))
            }
            _ => {
                return Err(Diagnostic::error(
                    target.span,
                    "only a variable ($name) or a map (@name) can be assigned to",
                )
                .related(op_span, "assignment"))
            }
        };
        Ok((Stmt { kind, span }, true))
    }

    fn span_here(&self) -> Span {
        let at = self.lexer.offset();
        Span::new(at, at)
    }

    fn if_stmt(&mut self) -> Result<StmtKind, Diagnostic> {
        Ok(self.if_parts()?.0)
    }

    /// `if c { ... } [else ...]`: the statement, and, when each arm ends
    /// with a value (and there is an `else`), the value it gives as an
    /// expression, `c ? { ... } : { ... }`.
    fn if_parts(&mut self) -> Result<(StmtKind, Option<Expr>), Diagnostic> {
        let start = self.next()?.span; // if
        let cond = self.expr()?;
        let then = self.arm()?;
        let otherwise = if self.at_ident("else")? {
            self.next()?;
            if self.at_ident("if")? {
                let at = self.peek()?.span;
                let (kind, value) = self.if_parts()?;
                let span = at.to(self.span_here());
                Some(Arm {
                    block: vec![Stmt { kind, span }],
                    value,
                })
            } else {
                Some(self.arm()?)
            }
        } else {
            None
        };
        let value = match (
            &then.value,
            otherwise.as_ref().and_then(|o| o.value.as_ref()),
        ) {
            (Some(a), Some(b)) => Some(Expr {
                span: start.to(b.span),
                kind: ExprKind::Ternary {
                    cond: Box::new(cond.clone()),
                    then: Box::new(a.clone()),
                    otherwise: Box::new(b.clone()),
                },
            }),
            _ => None,
        };
        let kind = StmtKind::If {
            cond,
            then: then.block,
            otherwise: otherwise.map(|o| o.block),
        };
        Ok((kind, value))
    }

    /// An arm of an `if`, `{ ... }`.
    fn arm(&mut self) -> Result<Arm, Diagnostic> {
        let open = self.expect("{", "to open a block")?;
        let (mut block, value) = self.block_body(open, true)?;
        let span = open.to(self.span_here());
        let value_form = value.as_ref().map(|v| Expr {
            kind: ExprKind::Block {
                stmts: block.clone(),
                value: Some(Box::new(v.clone())),
            },
            span,
        });
        if let Some(v) = value {
            let span = v.span;
            block.push(Stmt {
                kind: StmtKind::Expr(v),
                span,
            });
        }
        Ok(Arm {
            block,
            value: value_form,
        })
    }

    pub fn expr(&mut self) -> Result<Expr, Diagnostic> {
        let cond = self.binary(0)?;
        if self.eat("?")?.is_none() {
            return Ok(cond);
        }
        if self.eat(":")?.is_some() {
            return self.elvis(cond);
        }
        let then = self.expr()?;
        self.expect(":", "in the conditional expression `c ? a : b`")?;
        let otherwise = self.expr()?;
        let span = cond.span.to(otherwise.span);
        Ok(Expr {
            kind: ExprKind::Ternary {
                cond: Box::new(cond),
                then: Box::new(then),
                otherwise: Box::new(otherwise),
            },
            span,
        })
    }

    /// `value ?: fallback`: the value when it is true, else the fallback;
    /// the value is evaluated once, into a variable of a block.
    fn elvis(&mut self, value: Expr) -> Result<Expr, Diagnostic> {
        let fallback = self.expr()?;
        let span = value.span.to(fallback.span);
        let name = format!("elvis@{}", value.span.start);
        let var = |span| Expr {
            kind: ExprKind::Var(name.clone()),
            span,
        };
        let vspan = value.span;
        let bind = Stmt {
            kind: StmtKind::Let {
                name: name.clone(),
                name_span: vspan,
                ty: None,
                value: Some(value),
            },
            span: vspan,
        };
        let choice = Expr {
            kind: ExprKind::Ternary {
                cond: Box::new(var(vspan)),
                then: Box::new(var(vspan)),
                otherwise: Box::new(fallback),
            },
            span,
        };
        Ok(Expr {
            kind: ExprKind::Block {
                stmts: vec![bind],
                value: Some(Box::new(choice)),
            },
            span,
        })
    }

    /// Binary operators by precedence climbing; `min` is the lowest
    /// precedence accepted.
    fn binary(&mut self, min: u8) -> Result<Expr, Diagnostic> {
        let mut lhs = self.unary()?;
        while let Tok::Punct(p) = self.peek()?.tok {
            let Some((op, prec)) = binary_op(p) else {
                break;
            };
            if prec < min {
                break;
            }
            if op == BinOp::Div && self.in_predicate && self.slash_ends_predicate() {
                break;
            }
            self.next()?;
            let rhs = self.binary(prec + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary {
                    op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
                span,
            };
        }
        Ok(lhs)
    }

    /// Whether the peeked `/` is followed by `{`.
    fn slash_ends_predicate(&self) -> bool {
        let Some(peeked) = &self.peeked else {
            return false;
        };
        let after = &self.lexer.source()[peeked.span.end as usize..];
        let after = after.trim_start();
        after.is_empty() || after.starts_with('{')
    }

    fn unary(&mut self) -> Result<Expr, Diagnostic> {
        let token = self.peek()?.clone();
        let op = match token.tok {
            Tok::Punct("-") => Some(UnOp::Neg),
            Tok::Punct("!") => Some(UnOp::Not),
            Tok::Punct("~") => Some(UnOp::BitNot),
            Tok::Punct("*") => Some(UnOp::Deref),
            Tok::Punct("&") => Some(UnOp::AddrOf),
            _ => None,
        };
        if let Some(op) = op {
            self.next()?;
            let operand = self.unary()?;
            let span = token.span.to(operand.span);
            // A negative literal is one literal, as in C's constant folding.
            if let (UnOp::Neg, ExprKind::Int(n)) = (op, &operand.kind) {
                return Ok(Expr {
                    kind: ExprKind::Int(-*n),
                    span,
                });
            }
            return Ok(Expr {
                kind: ExprKind::Unary {
                    op,
                    expr: Box::new(operand),
                },
                span,
            });
        }
        if let Tok::Punct(p @ ("++" | "--")) = token.tok {
            self.next()?;
            let target = self.unary()?;
            let span = token.span.to(target.span);
            check_incdec_target(&target, p)?;
            return Ok(Expr {
                kind: ExprKind::IncDec {
                    target: Box::new(target),
                    increment: p == "++",
                    prefix: true,
                },
                span,
            });
        }
        if token.tok == Tok::Punct("(") {
            if let Some(ty) = self.try_cast_type()? {
                let operand = self.unary()?;
                let span = ty.span.to(operand.span);
                return Ok(Expr {
                    kind: ExprKind::Cast {
                        ty,
                        expr: Box::new(operand),
                    },
                    span,
                });
            }
        }
        self.postfix()
    }

    /// At `(`: if a type name and `)` follow, consumes them and returns
    /// the type.
    fn try_cast_type(&mut self) -> Result<Option<TypeName>, Diagnostic> {
        let Some(open) = &self.peeked else {
            return Ok(None);
        };
        let open_span = open.span;
        if !self.type_follows(open_span.end) {
            return Ok(None);
        }
        self.next()?; // (
        let ty = self.type_name(open_span)?;
        let close = self.expect(")", "to end the cast")?;
        Ok(Some(TypeName {
            span: open_span.to(close),
            ..ty
        }))
    }

    /// Whether the text from byte `at` starts a type inside parentheses:
    /// a type word, an integer type's or a typedef's name, or
    /// `name *...)`, a pointer to a type the script or the binary's debug
    /// information defines.
    fn type_follows(&self, at: u32) -> bool {
        let after = self.lexer.source()[at as usize..].trim_start();
        let word: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        matches!(
            word.as_str(),
            "struct" | "union" | "enum" | "unsigned" | "signed" | "typeof"
        ) || INT_TYPE_NAMES.contains(&word.as_str())
            || self.typedefs.contains(&word)
            || (!word.is_empty() && {
                let rest = after[word.len()..].trim_start();
                rest.starts_with('*') && rest.trim_start_matches(['*', ' ']).starts_with(')')
            })
    }

    /// A type: `[struct|union|enum] name`, C's multi-word integer names,
    /// then `*`s and an optional `[N]` (or `[]`, in a cast).
    fn type_name(&mut self, start: Span) -> Result<TypeName, Diagnostic> {
        let mut words = Vec::new();
        let mut of = None;
        let mut inner_pointers = 0u8;
        let typeof_done = self.at_ident("typeof")?;
        if typeof_done {
            self.next()?;
            let open = self.expect("(", "after `typeof`")?;
            if self.type_follows(open.end) {
                // `typeof(TYPE)` is the type itself.
                let inner = self.type_name(open)?;
                self.expect(")", "to end `typeof(...)`")?;
                if inner.array.is_some() || inner.of.is_some() {
                    return Ok(inner);
                }
                inner_pointers = inner.pointers;
                words.push(inner.name);
            } else {
                of = Some(Box::new(self.expr()?));
                self.expect(")", "to end `typeof(...)`")?;
                words.push("typeof".to_string());
            }
        }
        if !typeof_done {
            self.type_words(&mut words)?;
        }
        if words.is_empty()
            || matches!(
                words.last().map(String::as_str),
                Some("struct" | "union" | "enum")
            )
        {
            let found = self.peek()?.clone();
            return Err(unexpected(&found, "a type name"));
        }
        let mut pointers = inner_pointers;
        while self.eat("*")?.is_some() {
            pointers = pointers.saturating_add(1);
        }
        let array = if self.eat("[")?.is_some() {
            let token = self.next()?;
            match token.tok {
                Tok::Int(n) => {
                    self.expect("]", "after the array length")?;
                    Some(crate::ast::ArrayLen::Known(n))
                }
                Tok::Punct("]") => Some(crate::ast::ArrayLen::FromValue),
                _ => return Err(unexpected(&token, "an array length or `]`")),
            }
        } else {
            None
        };
        let end = self.span_here();
        Ok(TypeName {
            name: words.join(" "),
            pointers,
            array,
            of,
            span: start.to(end),
        })
    }

    /// The words of a type's name: `struct`, `union` or `enum` and a
    /// name, C's integer words (`unsigned long`), or one name.
    fn type_words(&mut self, words: &mut Vec<String>) -> Result<(), Diagnostic> {
        loop {
            let token = self.peek()?.clone();
            match token.tok {
                Tok::Ident(w) => {
                    let tag = matches!(w.as_str(), "struct" | "union" | "enum");
                    let modifier = matches!(
                        w.as_str(),
                        "unsigned" | "signed" | "long" | "short" | "const"
                    );
                    let continues = words.last().is_none_or(|l: &String| {
                        matches!(
                            l.as_str(),
                            "struct"
                                | "union"
                                | "enum"
                                | "unsigned"
                                | "signed"
                                | "long"
                                | "short"
                                | "const"
                        )
                    });
                    if !continues {
                        break;
                    }
                    self.next()?;
                    if w != "const" {
                        words.push(w);
                    }
                    if !(tag || modifier) {
                        break;
                    }
                }
                _ => break,
            }
        }
        Ok(())
    }

    fn postfix(&mut self) -> Result<Expr, Diagnostic> {
        let mut expr = self.primary()?;
        loop {
            if self.eat(".")?.is_some() {
                let token = self.next()?;
                expr = match token.tok {
                    Tok::Ident(field) => field_expr(expr, field, token.span, false),
                    Tok::Int(n) => {
                        let span = expr.span.to(token.span);
                        Expr {
                            kind: ExprKind::TupleIndex {
                                expr: Box::new(expr),
                                index: u32::try_from(n).unwrap_or(u32::MAX),
                            },
                            span,
                        }
                    }
                    _ => {
                        return Err(unexpected(
                            &token,
                            "a field name or a tuple index after `.`",
                        ))
                    }
                };
            } else if self.eat("->")?.is_some() {
                let token = self.next()?;
                let Tok::Ident(field) = token.tok else {
                    return Err(unexpected(&token, "a field name after `->`"));
                };
                expr = field_expr(expr, field, token.span, true);
            } else if self.eat("[")?.is_some() {
                let index = self.expr()?;
                let close = self.expect("]", "to close the index")?;
                let span = expr.span.to(close);
                expr = Expr {
                    kind: ExprKind::Index {
                        expr: Box::new(expr),
                        index: Box::new(index),
                    },
                    span,
                };
            } else if let Tok::Punct(p @ ("++" | "--")) = self.peek()?.tok {
                check_incdec_target(&expr, p)?;
                let op = self.next()?.span;
                let span = expr.span.to(op);
                expr = Expr {
                    kind: ExprKind::IncDec {
                        target: Box::new(expr),
                        increment: p == "++",
                        prefix: false,
                    },
                    span,
                };
            } else {
                return Ok(expr);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, Diagnostic> {
        let token = self.next()?;
        let span = token.span;
        let kind = match token.tok {
            Tok::Int(n) => ExprKind::Int(i128::from(n)),
            Tok::Str(s) => ExprKind::Str(s),
            Tok::Var(name) => ExprKind::Var(name),
            Tok::Param(n) => ExprKind::Param(n),
            Tok::ParamCount => ExprKind::ParamCount,
            Tok::Map(name) => {
                let mut keys = Vec::new();
                let mut end = span;
                if self.eat("[")?.is_some() {
                    keys = self.args("]")?;
                    end = self.expect("]", "to close the map key")?;
                    if keys.is_empty() {
                        return Err(Diagnostic::error(span.to(end), "an empty map key")
                            .hint("write `@name` for a map without a key"));
                    }
                }
                return Ok(Expr {
                    kind: ExprKind::Map(MapRef {
                        name,
                        keys,
                        span: span.to(end),
                    }),
                    span: span.to(end),
                });
            }
            Tok::Ident(name) if name == "if" => return self.if_expr(span),
            Tok::Ident(name) => {
                if self.at("(")? {
                    return self.call(name, span);
                }
                ExprKind::Ident(name)
            }
            Tok::Punct("{") => {
                let (stmts, value) = self.block_body(span, true)?;
                let end = self.span_here();
                return Ok(Expr {
                    kind: ExprKind::Block {
                        stmts,
                        value: value.map(Box::new),
                    },
                    span: span.to(end),
                });
            }
            Tok::Punct("(") => {
                let first = self.expr()?;
                if let ExprKind::Ident(name) = &first.kind {
                    if self.eat("=")?.is_some() {
                        return self.record(name.clone(), span);
                    }
                }
                if self.eat(",")?.is_some() {
                    let mut items = vec![first];
                    items.extend(self.args(")")?);
                    let close = self.expect(")", "to close the tuple")?;
                    return Ok(Expr {
                        kind: ExprKind::Tuple(items),
                        span: span.to(close),
                    });
                }
                let close = self.expect(")", "to close the parenthesis")?;
                return Ok(Expr {
                    span: span.to(close),
                    ..first
                });
            }
            _ => return Err(unexpected(&token, "an expression")),
        };
        Ok(Expr { kind, span })
    }

    /// `if c { a } else { b }` where a value is wanted: `c ? {a} : {b}`.
    fn if_expr(&mut self, start: Span) -> Result<Expr, Diagnostic> {
        let cond = self.expr()?;
        let then = self.block_expr()?;
        if !self.at_ident("else")? {
            let found = self.peek()?.clone();
            return Err(unexpected(
                &found,
                "`else`: an `if` that gives a value needs both arms",
            ));
        }
        self.next()?;
        let otherwise = if self.at_ident("if")? {
            let span = self.next()?.span;
            self.if_expr(span)?
        } else {
            self.block_expr()?
        };
        let span = start.to(otherwise.span);
        Ok(Expr {
            kind: ExprKind::Ternary {
                cond: Box::new(cond),
                then: Box::new(then),
                otherwise: Box::new(otherwise),
            },
            span,
        })
    }

    /// `{ ... }` as an expression.
    fn block_expr(&mut self) -> Result<Expr, Diagnostic> {
        let open = self.expect("{", "to open a block")?;
        let (stmts, value) = self.block_body(open, true)?;
        Ok(Expr {
            kind: ExprKind::Block {
                stmts,
                value: value.map(Box::new),
            },
            span: open.to(self.span_here()),
        })
    }

    /// The rest of a record, `(first=value, name=value, ...)`, after
    /// `(first=`.
    fn record(&mut self, first: String, open: Span) -> Result<Expr, Diagnostic> {
        let mut fields = vec![(first, self.expr()?)];
        while self.eat(",")?.is_some() {
            let token = self.next()?;
            let Tok::Ident(name) = token.tok else {
                return Err(unexpected(
                    &token,
                    "a field name: records are (name=value, ...)",
                ));
            };
            if fields.iter().any(|(n, _)| *n == name) {
                return Err(Diagnostic::error(
                    token.span,
                    format!("the record names `{name}` twice"),
                ));
            }
            self.expect("=", "after the record's field name")?;
            fields.push((name, self.expr()?));
        }
        let close = self.expect(")", "to close the record")?;
        Ok(Expr {
            kind: ExprKind::Record(fields),
            span: open.to(close),
        })
    }

    fn call(&mut self, name: String, name_span: Span) -> Result<Expr, Diagnostic> {
        let open = self.expect("(", "to start the arguments")?;
        if name == "sizeof" || name == "offsetof" {
            let is_type = {
                let after = &self.lexer.source()[open.end as usize..];
                let word: String = after
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                matches!(
                    word.as_str(),
                    "struct" | "union" | "enum" | "unsigned" | "signed" | "typeof"
                ) || INT_TYPE_NAMES.contains(&word.as_str())
                    || self.typedefs.contains(&word)
            };
            if is_type || name == "offsetof" {
                let ty = self.type_name(open)?;
                let kind = if name == "sizeof" {
                    ExprKind::SizeofType(ty)
                } else {
                    self.expect(",", "between the type and the field")?;
                    // `offsetof(struct a, b.c)`: a member of a member.
                    let mut path = Vec::new();
                    loop {
                        let token = self.next()?;
                        let Tok::Ident(field) = token.tok else {
                            return Err(unexpected(&token, "a field name"));
                        };
                        path.push(field);
                        if self.eat(".")?.is_none() {
                            break;
                        }
                    }
                    ExprKind::Offsetof {
                        ty,
                        field: path.join("."),
                    }
                };
                let close = self.expect(")", "to close the call")?;
                return Ok(Expr {
                    kind,
                    span: name_span.to(close),
                });
            }
        }
        let args = self.args(")")?;
        let close = self.expect(")", "to close the arguments")?;
        Ok(Expr {
            kind: ExprKind::Call {
                name,
                name_span,
                args,
            },
            span: name_span.to(close),
        })
    }

    /// Comma-separated expressions up to (not including) `close`.
    fn args(&mut self, close: &str) -> Result<Vec<Expr>, Diagnostic> {
        let mut args = Vec::new();
        if self.at(close)? {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(",")?.is_none() {
                return Ok(args);
            }
        }
    }
}

fn field_expr(expr: Expr, field: String, field_span: Span, arrow: bool) -> Expr {
    let span = expr.span.to(field_span);
    Expr {
        kind: ExprKind::Field {
            expr: Box::new(expr),
            field,
            field_span,
            arrow,
        },
        span,
    }
}

fn check_incdec_target(target: &Expr, op: &str) -> Result<(), Diagnostic> {
    match target.kind {
        ExprKind::Var(_) | ExprKind::Map(_) => Ok(()),
        _ => Err(Diagnostic::error(
            target.span,
            format!("`{op}` applies to a variable or a map only"),
        )),
    }
}

fn assignment_op(p: &str) -> Option<Option<BinOp>> {
    use BinOp::*;
    Some(match p {
        "=" => None,
        "+=" => Some(Add),
        "-=" => Some(Sub),
        "*=" => Some(Mul),
        "/=" => Some(Div),
        "%=" => Some(Mod),
        "&=" => Some(BitAnd),
        "|=" => Some(BitOr),
        "^=" => Some(BitXor),
        "<<=" => Some(Shl),
        ">>=" => Some(Shr),
        _ => return None,
    })
}

/// The operator and its precedence (higher binds tighter).
fn binary_op(p: &str) -> Option<(BinOp, u8)> {
    use BinOp::*;
    Some(match p {
        "||" => (Or, 1),
        "&&" => (And, 2),
        "|" => (BitOr, 3),
        "^" => (BitXor, 4),
        "&" => (BitAnd, 5),
        "==" => (Eq, 6),
        "!=" => (Ne, 6),
        "<" => (Lt, 7),
        "<=" => (Le, 7),
        ">" => (Gt, 7),
        ">=" => (Ge, 7),
        "<<" => (Shl, 8),
        ">>" => (Shr, 8),
        "+" => (Add, 9),
        "-" => (Sub, 9),
        "*" => (Mul, 10),
        "/" => (Div, 10),
        "%" => (Mod, 10),
        _ => return None,
    })
}

/// Bytes of `text` taken by the `__attribute__((...))` groups (and the
/// blanks and comments around them) it starts with; 0 if none.
fn attributes_len(text: &str) -> usize {
    let skip_blanks = |at: usize| -> usize {
        let mut at = at;
        loop {
            let rest = &text[at..];
            let trimmed = rest.trim_start();
            at += rest.len() - trimmed.len();
            match trimmed.strip_prefix("/*") {
                Some(comment) => match comment.find("*/") {
                    Some(end) => at += 2 + end + 2,
                    None => return at,
                },
                None => return at,
            }
        }
    };
    let mut taken = 0;
    loop {
        let at = skip_blanks(taken);
        let rest = &text[at..];
        let Some(word) = ["__attribute__", "__attribute"].into_iter().find(|w| {
            rest.starts_with(w)
                && !rest[w.len()..].starts_with(|c: char| c == '_' || c.is_ascii_alphanumeric())
        }) else {
            return taken;
        };
        let open = skip_blanks(at + word.len());
        if !text[open..].starts_with('(') {
            return taken;
        }
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in text[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return taken;
        };
        taken = end;
    }
}

/// The name a `typedef` definition introduces: the last identifier before
/// its final `;`.
fn typedef_name(text: &str) -> Option<String> {
    let text = text.trim();
    if !text.starts_with("typedef") {
        return None;
    }
    let body = text.trim_end_matches(';').trim_end();
    let body = body.strip_suffix(']').map_or(body, |b| {
        b.rsplit_once('[').map_or(b, |(head, _)| head.trim_end())
    });
    let name: String = body
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    (!name.is_empty()).then_some(name)
}

/// An arm of an `if`: its statements (its value, if any, the last), and
/// its value as an expression when it ends with one.
struct Arm {
    block: Block,
    value: Option<Expr>,
}

fn unexpected(found: &Token, wanted: &str) -> Diagnostic {
    Diagnostic::error(
        found.span,
        format!("expected {wanted}, found {}", found.tok.describe()),
    )
}

#[cfg(test)]
mod tests;
