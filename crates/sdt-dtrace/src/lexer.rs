//! Tokens of a provider file, with `#` directive lines handled on the way.
//!
//! A provider file is C-like text. The lexer gives the parser tokens with
//! the byte range each was written at, and deals with what the C
//! preprocessor would, within limits that are checked (see the crate
//! documentation): comments, `#pragma` (ignored), object-like `#define`
//! and `#undef` (applied: a use expands to the definition's tokens, which
//! carry the range of the use), and the line markers the preprocessor
//! writes (`# 12 "probes.d"`), so that positions in preprocessed text name
//! the original file and line. Any other directive is an error that says
//! to run the preprocessor.

use std::collections::HashMap;
use std::ops::Range;

use crate::diag::{Diagnostic, Source};

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    /// Where the token was written; for a token from a `#define`, where
    /// the macro was used.
    pub span: Range<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Ident(String),
    Number(String),
    /// A string or character literal, as written.
    Literal(String),
    /// One punctuation character.
    Punct(char),
}

impl Token {
    pub fn is_punct(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }

    pub fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(name) => Some(name),
            _ => None,
        }
    }

    pub fn is_ident(&self, word: &str) -> bool {
        self.ident() == Some(word)
    }
}

/// How deep one macro may expand into others before it counts as a loop.
const MAX_EXPANSION_DEPTH: usize = 64;

/// Splits `source` into tokens, applying directives.
pub fn tokens(source: &Source) -> Result<Vec<Token>, Diagnostic> {
    let text = source.text();
    let bytes = text.as_bytes();
    let mut macros: HashMap<String, Vec<Kind>> = HashMap::new();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
            let end = text[i + 2..]
                .find("*/")
                .ok_or_else(|| source.error(i..i + 2, "this comment is never closed"))?;
            // A comment is whitespace; one that spans lines keeps the next
            // line's start a line start.
            i += 2 + end + 2;
            continue;
        }
        if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
            continue;
        }
        if c == b'#' && line_start {
            i = directive(source, i, &mut macros)?;
            continue;
        }
        line_start = false;
        let start = i;
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            Kind::Ident(text[start..i].to_string())
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
            Kind::Number(text[start..i].to_string())
        } else if c == b'"' || c == b'\'' {
            i = literal_end(source, i)?;
            Kind::Literal(text[start..i].to_string())
        } else if c.is_ascii_punctuation() {
            i += 1;
            Kind::Punct(c as char)
        } else {
            let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
            return Err(source.error(i..i + ch.len_utf8(), format!("unexpected character {ch:?}")));
        };
        let span = start..i;
        match &kind {
            Kind::Ident(name) if macros.contains_key(name) => {
                expand(source, name, &span, &macros, &mut Vec::new(), &mut out)?;
            }
            _ => out.push(Token { kind, span }),
        }
    }
    Ok(out)
}

/// Appends the expansion of macro `name`, used at `span`, to `out`.
fn expand(
    source: &Source,
    name: &str,
    span: &Range<usize>,
    macros: &HashMap<String, Vec<Kind>>,
    active: &mut Vec<String>,
    out: &mut Vec<Token>,
) -> Result<(), Diagnostic> {
    if active.len() >= MAX_EXPANSION_DEPTH {
        return Err(source.error(span.clone(), "macros expand into each other too deeply"));
    }
    active.push(name.to_string());
    for kind in macros.get(name).into_iter().flatten() {
        match kind {
            // As in cpp, a macro does not expand inside its own expansion.
            Kind::Ident(inner) if macros.contains_key(inner) && !active.contains(inner) => {
                expand(source, inner, span, macros, active, out)?;
            }
            _ => out.push(Token {
                kind: kind.clone(),
                span: span.clone(),
            }),
        }
    }
    active.pop();
    Ok(())
}

/// The end of the string or character literal that starts at `start`.
fn literal_end(source: &Source, start: usize) -> Result<usize, Diagnostic> {
    let bytes = source.text().as_bytes();
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() && bytes[i] != b'\n' {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(source.error(start..start + 1, "this literal is never closed"))
}

/// Handles the directive line at `start` (its `#`); returns where the next
/// line starts.
fn directive(
    source: &Source,
    start: usize,
    macros: &mut HashMap<String, Vec<Kind>>,
) -> Result<usize, Diagnostic> {
    let text = source.text();
    // The line, with backslash-newline continuations.
    let mut end = start;
    loop {
        match text[end..].find('\n') {
            Some(n) if text[..end + n].ends_with('\\') => end += n + 1,
            Some(n) => {
                end += n;
                break;
            }
            None => {
                end = text.len();
                break;
            }
        }
    }
    let line = &text[start + 1..end];
    let body = line.trim_start();
    let word_at = start + 1 + (line.len() - body.len());
    let word_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(body.len());
    let word = &body[..word_len];
    let rest = body[word_len..].trim();
    let word_span = word_at..word_at + word_len.max(1);
    match word {
        // A line marker from the preprocessor: `# LINE "FILE" FLAGS`.
        _ if word.bytes().all(|b| b.is_ascii_digit()) && !word.is_empty() => {
            source.mark_line(end + 1, word, rest);
        }
        "line" => source.mark_line(end + 1, rest.split_whitespace().next().unwrap_or(""), {
            rest.split_once(char::is_whitespace).map_or("", |(_, f)| f)
        }),
        // `#pragma D ...` (stability attributes and the like) means nothing
        // to a header or to probes; an empty `#` is a null directive.
        "pragma" | "ident" | "" => {}
        "define" => {
            let after_word = &body[word_len..];
            let rest_at = word_at + word_len + (after_word.len() - after_word.trim_start().len());
            let name_len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..name_len];
            if name.is_empty() || name.as_bytes()[0].is_ascii_digit() {
                return Err(source.error(word_span, "`#define` needs a macro name"));
            }
            let name_span = rest_at..rest_at + name_len;
            if rest[name_len..].starts_with('(') {
                return Err(source.error(
                    name_span,
                    format!(
                        "`{name}` is a function-like macro, which needs the C preprocessor: \
                         run with -C (sdt dtrace) or .preprocess() (the build helper)"
                    ),
                ));
            }
            let replacement = rest[name_len..].replace("\\\n", " ");
            let tokens = tokens(&Source::new(source.name(), replacement)).map_err(|e| {
                source.error(name_span, format!("in this definition: {}", e.message))
            })?;
            macros.insert(
                name.to_string(),
                tokens.into_iter().map(|t| t.kind).collect(),
            );
        }
        "undef" => {
            macros.remove(rest.split_whitespace().next().unwrap_or(""));
        }
        _ => {
            return Err(source.error(
                word_span,
                format!(
                    "`#{word}` needs the C preprocessor: run with -C (sdt dtrace) or \
                     .preprocess() (the build helper)"
                ),
            ))
        }
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Kind> {
        tokens(&Source::new("t.d", text.to_string()))
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    fn ident(s: &str) -> Kind {
        Kind::Ident(s.to_string())
    }

    #[test]
    fn comments_and_pragmas_are_whitespace() {
        let got = kinds("/* a\n b */ x // y\n#pragma D attributes Evolving\n  # pragma z\nz");
        assert_eq!(got, vec![ident("x"), ident("z")]);
    }

    #[test]
    fn object_like_macros_expand_where_used() {
        let source = Source::new(
            "t.d",
            "#define Oid unsigned int\n#define Two Oid Oid\nprobe(Two);\n#undef Oid\nOid".into(),
        );
        let got = tokens(&source).unwrap();
        let names: Vec<_> = got.iter().filter_map(|t| t.ident()).collect();
        assert_eq!(
            names,
            ["probe", "unsigned", "int", "unsigned", "int", "Oid"]
        );
        // Expanded tokens carry the span of the use.
        let use_at = source.text().find("Two);").unwrap();
        assert_eq!(got[2].span, use_at..use_at + 3);
    }

    #[test]
    fn a_macro_does_not_expand_in_itself() {
        assert_eq!(kinds("#define a a b\na"), vec![ident("a"), ident("b")]);
        assert_eq!(
            kinds("#define a b\n#define b a\na"),
            vec![ident("a")],
            "a -> b -> a stops at a"
        );
    }

    #[test]
    fn directives_that_need_cpp_are_refused_with_their_position() {
        let source = Source::new("t.d", "provider x {};\n  #include <sys/types.h>\n".into());
        let err = tokens(&source).unwrap_err();
        assert_eq!((err.line, err.column), (2, 4));
        assert!(err.message.contains("-C"), "{}", err.message);
        let err = tokens(&Source::new("t.d", "#define F(x) x\n".into())).unwrap_err();
        assert!(err.message.contains("function-like"), "{}", err.message);
    }

    #[test]
    fn bad_characters_and_open_comments_are_errors() {
        let err = tokens(&Source::new("t.d", "probe x(é);".into())).unwrap_err();
        assert_eq!((err.line, err.column), (1, 9));
        let err = tokens(&Source::new("t.d", "x /* never".into())).unwrap_err();
        assert_eq!((err.line, err.column), (1, 3));
    }
}
