//! The grammar of provider files:
//!
//! ```text
//! file      = { provider | typedef | aggregate | translator | inline | ";" }
//! provider  = "provider" NAME "{" { probe } "}" [ ";" ]
//! probe     = "probe" NAME "(" [ params ] ")" [ ":" "(" [ params ] ")" ] [ ";" ]
//! params    = "void" | param { "," param }
//! param     = C declaration: qualifiers, a type, stars, an optional name and array size
//! typedef   = "typedef" C declaration ";"
//! aggregate = ( "struct" | "union" | "enum" ) [ NAME ] [ "{" ... "}" ] ";"
//! translator= "translator" ... "{" ... "}" [ ";" ]
//! inline    = "inline" ... ";"
//! ```
//!
//! Parameters and typedefs are kept as tokens: what they mean matters to
//! the Rust route only, which resolves them ([`crate::types`]). The C
//! header passes arguments through to `<sys/sdt.h>`, whatever their types,
//! as SystemTap's `dtrace` does. Translated argument lists (after `:`) are
//! parsed and dropped: `<sys/sdt.h>` probes have none.

use std::ops::Range;

use crate::diag::{Diagnostic, Source};
use crate::lexer::{self, Kind, Token};

/// A parsed provider file.
#[derive(Debug)]
pub struct ProviderFile {
    pub(crate) source: Source,
    /// The providers, in file order.
    pub providers: Vec<Provider>,
    pub(crate) typedefs: Vec<Typedef>,
}

/// One `provider NAME { ... }`.
#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    pub probes: Vec<Probe>,
    pub(crate) span: Range<usize>,
}

/// One `probe NAME(...)`.
#[derive(Clone, Debug)]
pub struct Probe {
    pub name: String,
    pub params: Vec<Param>,
    pub(crate) span: Range<usize>,
}

/// One parameter: its tokens, macros expanded.
#[derive(Clone, Debug)]
pub struct Param {
    pub(crate) tokens: Vec<Token>,
}

#[derive(Clone, Debug)]
pub(crate) struct Typedef {
    pub name: String,
    /// The type's tokens, without the name.
    pub tokens: Vec<Token>,
}

impl ProviderFile {
    /// Parses `text`, the contents of the file `name`.
    pub fn parse(name: &str, text: String) -> Result<ProviderFile, Diagnostic> {
        let source = Source::new(name, text);
        let tokens = lexer::tokens(&source)?;
        let mut parser = Parser {
            source: &source,
            tokens: &tokens,
            at: 0,
        };
        let (providers, typedefs) = parser.file()?;
        Ok(ProviderFile {
            source,
            providers,
            typedefs,
        })
    }

    /// An error about the text at `span`.
    pub(crate) fn error(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        self.source.error(span, message)
    }

    /// The file's name, as given.
    pub fn name(&self) -> &str {
        self.source.name()
    }

    /// The parameter's tokens as written, space-separated (runs of `*`
    /// joined), as SystemTap's header shows them in its comments: a
    /// macro's use appears as its name.
    pub(crate) fn written(&self, param: &Param) -> String {
        let mut words: Vec<&str> = Vec::new();
        let mut previous: Option<Range<usize>> = None;
        for token in &param.tokens {
            if previous.as_ref() == Some(&token.span) {
                continue;
            }
            let text = &self.source.text()[token.span.clone()];
            match (words.last_mut(), &previous) {
                (Some(last), Some(p))
                    if text == "*" && last.ends_with('*') && p.end == token.span.start =>
                {
                    let start = p.end - last.len();
                    *last = &self.source.text()[start..token.span.end];
                }
                _ => words.push(text),
            }
            previous = Some(token.span.clone());
        }
        words.join(" ")
    }
}

struct Parser<'a> {
    source: &'a Source,
    tokens: &'a [Token],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    /// A span for "here": the next token, or the end of the file.
    fn here(&self) -> Range<usize> {
        match self.peek() {
            Some(t) => t.span.clone(),
            None => {
                let end = self.source.text().trim_end().len();
                end.saturating_sub(1)..end
            }
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            Some(t) => format!("`{}`", &self.source.text()[t.span.clone()]),
            None => "the end of the file".into(),
        }
    }

    fn expected(&self, what: &str) -> Diagnostic {
        self.source.error(
            self.here(),
            format!("expected {what}, found {}", self.describe()),
        )
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.peek().is_some_and(|t| t.is_punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), Diagnostic> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{c}`")))
        }
    }

    fn name(&mut self, what: &str) -> Result<(String, Range<usize>), Diagnostic> {
        match self.peek() {
            Some(Token {
                kind: Kind::Ident(name),
                span,
            }) => {
                let found = (name.clone(), span.clone());
                self.at += 1;
                Ok(found)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn file(&mut self) -> Result<(Vec<Provider>, Vec<Typedef>), Diagnostic> {
        let mut providers: Vec<Provider> = Vec::new();
        let mut typedefs = Vec::new();
        while let Some(token) = self.peek() {
            match token.ident() {
                Some("provider") => {
                    let provider = self.provider()?;
                    if let Some(first) = providers.iter().find(|p| p.name == provider.name) {
                        let line = self.source.error(first.span.clone(), "").line;
                        return Err(self.source.error(
                            provider.span,
                            format!(
                                "the provider `{}` is declared again (first on line {line})",
                                provider.name
                            ),
                        ));
                    }
                    providers.push(provider);
                }
                Some("typedef") => typedefs.push(self.typedef()?),
                Some("struct" | "union" | "enum") => self.aggregate()?,
                Some("translator") => self.skip_block()?,
                Some("inline") => self.skip_past(';')?,
                _ if token.is_punct(';') => self.at += 1,
                _ => return Err(self.expected(
                    "`provider`, `typedef`, `struct`, `union`, `enum`, `translator` or `inline`",
                )),
            }
        }
        Ok((providers, typedefs))
    }

    fn provider(&mut self) -> Result<Provider, Diagnostic> {
        self.at += 1;
        let (name, span) = self.name("the provider's name")?;
        self.expect_punct('{')?;
        let mut probes: Vec<Probe> = Vec::new();
        loop {
            match self.peek() {
                Some(t) if t.is_ident("probe") => {
                    let probe = self.probe()?;
                    if let Some(first) = probes.iter().find(|p| p.name == probe.name) {
                        let line = self.source.error(first.span.clone(), "").line;
                        return Err(self.source.error(
                            probe.span,
                            format!(
                                "the probe `{}` is declared again (first on line {line})",
                                probe.name
                            ),
                        ));
                    }
                    probes.push(probe);
                }
                Some(t) if t.is_punct('}') => {
                    self.at += 1;
                    self.eat_punct(';');
                    return Ok(Provider { name, probes, span });
                }
                _ => return Err(self.expected("`probe` or `}`")),
            }
        }
    }

    fn probe(&mut self) -> Result<Probe, Diagnostic> {
        self.at += 1;
        let (name, span) = self.name("the probe's name")?;
        let params = self.params()?;
        // Translated arguments, as DTrace allows: `probe p(int a) : (string b);`
        if self.eat_punct(':') {
            self.params()?;
        }
        self.eat_punct(';');
        Ok(Probe { name, params, span })
    }

    /// `( [params] )`.
    fn params(&mut self) -> Result<Vec<Param>, Diagnostic> {
        self.expect_punct('(')?;
        let mut params = Vec::new();
        if self.eat_punct(')') {
            return Ok(params);
        }
        loop {
            let tokens = self.declaration(&[',', ')'])?;
            if tokens.is_empty() {
                return Err(self.expected("an argument type"));
            }
            params.push(Param { tokens });
            if self.eat_punct(')') {
                break;
            }
            self.expect_punct(',')?;
        }
        // `(void)` declares no arguments, as in C.
        if params.len() == 1 && params[0].tokens.len() == 1 && params[0].tokens[0].is_ident("void")
        {
            params.clear();
        }
        Ok(params)
    }

    /// The tokens up to one of `stops` outside brackets; brackets must
    /// balance, and the stop is not consumed.
    fn declaration(&mut self, stops: &[char]) -> Result<Vec<Token>, Diagnostic> {
        let mut tokens = Vec::new();
        let mut open: Vec<(char, Range<usize>)> = Vec::new();
        loop {
            let Some(token) = self.peek() else {
                return Err(match open.last() {
                    Some((_, span)) => self
                        .source
                        .error(span.clone(), "this bracket is never closed"),
                    None => self.expected(&format!("`{}`", stops[stops.len() - 1])),
                });
            };
            if let Kind::Punct(c) = token.kind {
                if open.is_empty() && stops.contains(&c) {
                    return Ok(tokens);
                }
                // A statement or block that ends here ends the declaration
                // too early.
                if open.is_empty() && matches!(c, ';' | '}' | ')' | ']') {
                    let expected: Vec<String> = stops.iter().map(|s| format!("`{s}`")).collect();
                    return Err(self.expected(&expected.join(" or ")));
                }
                match c {
                    '(' | '[' | '{' => open.push((c, token.span.clone())),
                    ')' | ']' | '}' => {
                        let want = match c {
                            ')' => '(',
                            ']' => '[',
                            _ => '{',
                        };
                        match open.pop() {
                            Some((o, _)) if o == want => {}
                            _ => {
                                return Err(self
                                    .source
                                    .error(token.span.clone(), format!("unbalanced `{c}`")))
                            }
                        }
                    }
                    _ => {}
                }
            }
            tokens.push(token.clone());
            self.at += 1;
        }
    }

    /// `typedef TYPE NAME;`
    fn typedef(&mut self) -> Result<Typedef, Diagnostic> {
        let start = self.here();
        self.at += 1;
        let mut tokens = self.declaration(&[';'])?;
        self.expect_punct(';')?;
        // A body (`typedef struct s { ... } s_t;`) says nothing a probe
        // argument needs: drop it.
        if let Some(open) = tokens.iter().position(|t| t.is_punct('{')) {
            let mut depth = 0;
            let mut close = open;
            for (i, t) in tokens.iter().enumerate().skip(open) {
                depth += usize::from(t.is_punct('{'));
                if t.is_punct('}') {
                    depth -= 1;
                    if depth == 0 {
                        close = i;
                        break;
                    }
                }
            }
            tokens.drain(open..=close);
        }
        // The name is the last identifier outside an array suffix, or, for
        // a function pointer, the one after `(*`.
        let name_at = match tokens.iter().position(|t| t.is_punct('(')) {
            Some(paren) => tokens[paren..]
                .iter()
                .position(|t| t.ident().is_some())
                .map(|i| i + paren),
            None => {
                let end = tokens
                    .iter()
                    .position(|t| t.is_punct('['))
                    .unwrap_or(tokens.len());
                tokens[..end].iter().rposition(|t| t.ident().is_some())
            }
        };
        let Some(name_at) = name_at.filter(|&i| i > 0 || tokens.len() > 1) else {
            return Err(self.source.error(start, "expected `typedef TYPE NAME;`"));
        };
        let name = tokens.remove(name_at);
        Ok(Typedef {
            name: name.ident().unwrap_or_default().to_string(),
            tokens,
        })
    }

    /// `struct NAME { ... };`, `union ...`, `enum ...`: declarations that
    /// arguments can point to; their members do not matter.
    fn aggregate(&mut self) -> Result<(), Diagnostic> {
        self.declaration(&[';'])?;
        self.expect_punct(';')
    }

    /// `translator ... { ... };`
    fn skip_block(&mut self) -> Result<(), Diagnostic> {
        self.declaration(&[';', '{'])?;
        if self.peek().is_some_and(|t| t.is_punct('{')) {
            self.declaration(&[';'])?;
        }
        self.expect_punct(';')
    }

    fn skip_past(&mut self, c: char) -> Result<(), Diagnostic> {
        self.declaration(&[c])?;
        self.expect_punct(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ProviderFile, Diagnostic> {
        ProviderFile::parse("t.d", text.to_string())
    }

    #[test]
    fn providers_probes_and_arguments() {
        let file = parse(
            "provider a { probe x(int, const char *name); probe y(); probe z(void) };\n\
             provider b { probe w(char **argv, unsigned long long) : (string); }",
        )
        .unwrap();
        assert_eq!(file.providers.len(), 2);
        let a = &file.providers[0];
        assert_eq!(a.name, "a");
        let names: Vec<_> = a.probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["x", "y", "z"]);
        assert_eq!(a.probes[0].params.len(), 2);
        assert_eq!(file.written(&a.probes[0].params[1]), "const char * name");
        assert!(a.probes[2].params.is_empty(), "(void) is no argument");
        let w = &file.providers[1].probes[0];
        assert_eq!(file.written(&w.params[0]), "char ** argv");
        assert_eq!(file.written(&w.params[1]), "unsigned long long");
    }

    #[test]
    fn declarations_around_providers_are_read_or_skipped() {
        let file = parse(
            "#pragma D depends_on library net.d\n\
             typedef struct conn { int fd; struct { int x; } in; } conn_t;\n\
             typedef unsigned int id_t;\n\
             struct s { int a; };\n\
             enum e { A = 1, B };\n\
             translator conninfo_t < conn_t *c > { fd = c->fd; };\n\
             inline int LIMIT = 10;\n\
             provider p { probe q(conn_t *, id_t); };",
        )
        .unwrap();
        let names: Vec<_> = file.typedefs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["conn_t", "id_t"]);
        assert_eq!(file.providers[0].probes[0].params.len(), 2);
    }

    #[test]
    fn errors_point_at_the_place() {
        let err = parse("provider p {\n  probe q(int;\n};").unwrap_err();
        assert_eq!((err.line, err.column), (2, 14), "{err}");
        assert!(
            err.message.contains("expected `,` or `)`, found `;`"),
            "{err}"
        );
        let err = parse("provider p {\n  prob q();\n};").unwrap_err();
        assert_eq!((err.line, err.column), (2, 3));
        assert!(err.message.contains("expected `probe` or `}`"), "{err}");
        let err = parse("provider p { probe q(); probe q(int); };").unwrap_err();
        assert!(err.message.contains("declared again"), "{err}");
        assert_eq!(err.column, 31);
        let err = parse("provider p { probe q(, int); };").unwrap_err();
        assert!(err.message.contains("an argument type"), "{err}");
        let err = parse("provider p {").unwrap_err();
        assert!(err.message.contains("the end of the file"), "{err}");
        let err = parse("probe q();").unwrap_err();
        assert!(err.message.contains("expected `provider`"), "{err}");
    }
}
