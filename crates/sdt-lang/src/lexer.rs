//! Tokens of the bpftrace language.
//!
//! The lexer is pulled by the parser one token at a time, because one part
//! of the language is not made of ordinary tokens: an attach point such as
//! `usdt:/usr/lib/libfoo.so:foo:bar*` holds paths, globs and colons, and is
//! read as raw text by [`Lexer::attach_point`] when the parser is at the
//! start of a probe. Everything else follows C: identifiers, integers in
//! decimal, octal (a leading `0`) and hex, with `_` separators, an
//! exponent form (`1e6`) and `u`/`l` suffixes; strings with C escapes;
//! `//` and `/* */` comments; and a `#!` first line.

use crate::diag::{Diagnostic, Span};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// `$name`.
    Var(String),
    /// `@name`, or `@` alone (the empty name).
    Map(String),
    /// `$1`, `$2`, ...
    Param(u32),
    /// `$#`.
    ParamCount,
    Int(u64),
    Str(Vec<u8>),
    /// A preprocessor line: `#include <...>`, `#define ...`, without the `#`.
    Directive(String),
    Punct(&'static str),
    Eof,
}

impl Tok {
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(name) => format!("`{name}`"),
            Tok::Var(name) => format!("`${name}`"),
            Tok::Map(name) => format!("`@{name}`"),
            Tok::Param(n) => format!("`${n}`"),
            Tok::ParamCount => "`$#`".into(),
            Tok::Int(n) => format!("`{n}`"),
            Tok::Str(_) => "a string".into(),
            Tok::Directive(_) => "a `#` directive".into(),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "the end of the script".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Operators and punctuation, longest first so that the first match is
/// the longest one.
const PUNCTS: &[&str] = &[
    "<<=", ">>=", "->", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "==", "!=",
    "<=", ">=", "<<", ">>", "&&", "||", "..", "{", "}", "(", ")", "[", "]", ",", ";", ":", "?",
    ".", "+", "-", "*", "/", "%", "&", "|", "^", "~", "!", "<", ">", "=",
];

pub struct Lexer<'s> {
    src: &'s str,
    pos: usize,
}

/// One attach point as written: its fields split at colons outside
/// quotes, with quotes removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawAttachPoint {
    pub text: String,
    pub fields: Vec<String>,
    pub span: Span,
}

impl<'s> Lexer<'s> {
    pub fn new(src: &'s str) -> Lexer<'s> {
        let mut lexer = Lexer { src, pos: 0 };
        if src.starts_with("#!") {
            lexer.pos = src.find('\n').unwrap_or(src.len());
        }
        lexer
    }

    pub fn source(&self) -> &'s str {
        self.src
    }

    /// The byte offset of the next unread character.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Continues reading at byte `at` (a character boundary).
    pub fn seek(&mut self, at: usize) {
        self.pos = at.min(self.src.len());
    }

    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    fn peek_char(&self) -> Option<char> {
        self.rest().chars().next()
    }

    /// Skips whitespace and comments.
    pub fn skip_trivia(&mut self) -> Result<(), Diagnostic> {
        loop {
            let rest = self.rest();
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if trimmed.starts_with("//") {
                self.pos += trimmed.find('\n').unwrap_or(trimmed.len());
            } else if let Some(body) = trimmed.strip_prefix("/*") {
                let start = self.pos;
                match body.find("*/") {
                    Some(end) => self.pos += end + 4,
                    None => {
                        return Err(Diagnostic::error(
                            Span::new(start, start + 2),
                            "unterminated comment",
                        )
                        .label("this comment never ends")
                        .hint("close it with `*/`"))
                    }
                }
            } else {
                return Ok(());
            }
        }
    }

    /// Whether the next word (after trivia) is `word`, followed by a
    /// character that cannot continue an identifier.
    pub fn at_word(&mut self, word: &str) -> bool {
        if self.skip_trivia().is_err() {
            return false;
        }
        let rest = self.rest();
        rest.starts_with(word)
            && !rest[word.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    /// Reads the next token.
    pub fn next_token(&mut self) -> Result<Token, Diagnostic> {
        self.skip_trivia()?;
        let start = self.pos;
        let rest = self.rest();
        let Some(c) = rest.chars().next() else {
            return Ok(Token {
                tok: Tok::Eof,
                span: Span::new(start, start),
            });
        };
        let tok = if c.is_ascii_alphabetic() || c == '_' {
            Tok::Ident(self.take_word().to_string())
        } else if c.is_ascii_digit() {
            self.number()?
        } else if c == '"' {
            Tok::Str(self.string()?)
        } else if c == '$' {
            self.pos += 1;
            match self.peek_char() {
                Some('#') => {
                    self.pos += 1;
                    Tok::ParamCount
                }
                Some(d) if d.is_ascii_digit() => {
                    let digits = self.take_while(|c| c.is_ascii_digit());
                    match digits.parse::<u32>() {
                        Ok(n) if n > 0 => Tok::Param(n),
                        _ => {
                            return Err(Diagnostic::error(
                                Span::new(start, self.pos),
                                format!("`${digits}` is not a positional parameter"),
                            )
                            .hint("positional parameters are $1, $2, ... and $# counts them"))
                        }
                    }
                }
                Some(d) if d.is_ascii_alphabetic() || d == '_' => {
                    Tok::Var(self.take_word().to_string())
                }
                _ => {
                    return Err(Diagnostic::error(
                        Span::new(start, self.pos),
                        "`$` must start a variable name or a positional parameter",
                    )
                    .hint("write `$name`, `$1` or `$#`"))
                }
            }
        } else if c == '@' {
            self.pos += 1;
            let name = match self.peek_char() {
                Some(d) if d.is_ascii_alphabetic() || d == '_' => self.take_word().to_string(),
                _ => String::new(),
            };
            Tok::Map(name)
        } else if c == '#' {
            let line_end = rest.find('\n').unwrap_or(rest.len());
            self.pos += line_end;
            Tok::Directive(rest[1..line_end].trim().to_string())
        } else if let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) {
            self.pos += p.len();
            Tok::Punct(p)
        } else {
            self.pos += c.len_utf8();
            return Err(Diagnostic::error(
                Span::new(start, self.pos),
                format!("unexpected character `{}`", c.escape_debug()),
            ));
        };
        Ok(Token {
            tok,
            span: Span::new(start, self.pos),
        })
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'s str {
        let rest = self.rest();
        let len = rest.find(|c: char| !keep(c)).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn take_word(&mut self) -> &'s str {
        self.take_while(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    fn number(&mut self) -> Result<Tok, Diagnostic> {
        let start = self.pos;
        let text = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
        let span = Span::new(start, self.pos);
        if let Some(ns) = duration(text) {
            return ns.map(Tok::Int).map_err(|why| {
                Diagnostic::error(span, format!("`{text}` is not a valid duration: {why}"))
            });
        }
        parse_int(text).map(Tok::Int).map_err(|why| {
            Diagnostic::error(span, format!("`{text}` is not a valid integer: {why}"))
        })
    }

    fn string(&mut self) -> Result<Vec<u8>, Diagnostic> {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let rest = self.rest();
            let Some(c) = rest.chars().next() else {
                return Err(unterminated(start, self.pos));
            };
            match c {
                '"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                '\n' => return Err(unterminated(start, self.pos)),
                '\\' => {
                    let escape_start = self.pos;
                    self.pos += 1;
                    let Some(e) = self.peek_char() else {
                        return Err(unterminated(start, self.pos));
                    };
                    self.pos += e.len_utf8();
                    match e {
                        'n' => out.push(b'\n'),
                        't' => out.push(b'\t'),
                        'r' => out.push(b'\r'),
                        'a' => out.push(7),
                        'b' => out.push(8),
                        'f' => out.push(12),
                        'v' => out.push(11),
                        'e' => out.push(27),
                        '"' => out.push(b'"'),
                        '\'' => out.push(b'\''),
                        '\\' => out.push(b'\\'),
                        '?' => out.push(b'?'),
                        'x' | 'X' => {
                            let digits = self.take_while_max(2, |c| c.is_ascii_hexdigit());
                            let value = u8::from_str_radix(digits, 16).map_err(|_| {
                                Diagnostic::error(
                                    Span::new(escape_start, self.pos),
                                    "`\\x` must be followed by one or two hex digits",
                                )
                            })?;
                            out.push(value);
                        }
                        '0'..='7' => {
                            self.pos -= 1;
                            let digits = self.take_while_max(3, |c| ('0'..='7').contains(&c));
                            let value = u32::from_str_radix(digits, 8).unwrap_or(0);
                            let byte = u8::try_from(value).map_err(|_| {
                                Diagnostic::error(
                                    Span::new(escape_start, self.pos),
                                    format!("octal escape `\\{digits}` is larger than 255"),
                                )
                            })?;
                            out.push(byte);
                        }
                        other => {
                            return Err(Diagnostic::error(
                                Span::new(escape_start, self.pos),
                                format!("unknown escape `\\{}`", other.escape_debug()),
                            )
                            .hint("escapes are \\n \\t \\r \\\" \\\\ \\xNN and \\NNN (octal)"))
                        }
                    }
                }
                _ => {
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    fn take_while_max(&mut self, max: usize, keep: impl Fn(char) -> bool) -> &'s str {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .take(max)
            .take_while(|(_, c)| keep(*c))
            .map(|(i, c)| i + c.len_utf8())
            .last()
            .unwrap_or(0);
        self.pos += len;
        &rest[..len]
    }

    /// Reads one attach point as raw text: everything up to whitespace, a
    /// `,` or a `{`. A `/` ends it too, except inside the path field of
    /// probe types that take a path, so that `tracepoint:a:b/pid == 1/`
    /// starts a predicate while `uprobe:/bin/bash:readline` keeps its path.
    /// Double quotes protect any character, colons included.
    pub fn attach_point(&mut self) -> Result<RawAttachPoint, Diagnostic> {
        self.skip_trivia()?;
        let start = self.pos;
        let mut fields = vec![String::new()];
        let mut text = String::new();
        let takes_path = |kind: &str| {
            matches!(
                kind,
                "usdt" | "U" | "uprobe" | "u" | "uretprobe" | "ur" | "watchpoint" | "w"
            )
        };
        while let Some(c) = self.peek_char() {
            let field = fields.len() - 1;
            if c.is_whitespace() || c == ',' || c == '{' {
                break;
            }
            if c == '/' && !(field == 1 && takes_path(&fields[0])) {
                break;
            }
            if c == '"' {
                let quoted_start = self.pos;
                let value = self.string()?;
                let value = String::from_utf8(value).map_err(|_| {
                    Diagnostic::error(
                        Span::new(quoted_start, self.pos),
                        "a quoted part of an attach point must be UTF-8",
                    )
                })?;
                text.push_str(&self.src[quoted_start..self.pos]);
                fields[field].push_str(&value);
                continue;
            }
            self.pos += c.len_utf8();
            text.push(c);
            if c == ':' {
                fields.push(String::new());
            } else {
                fields[field].push(c);
            }
        }
        Ok(RawAttachPoint {
            text,
            fields,
            span: Span::new(start, self.pos),
        })
    }
}

fn unterminated(start: usize, end: usize) -> Diagnostic {
    Diagnostic::error(Span::new(start, end), "unterminated string")
        .label("this string has no closing quote")
        .hint("strings end on the same line with `\"`")
}

/// Parses an integer literal: decimal, `0x` hex, `0b` binary, octal with a
/// leading `0`, `_` between digits, an exponent (`5e3`), and C's `u`, `l`,
/// `ll` suffixes, which change nothing here.
/// A duration literal (`100ms`, `1s`, `2h`) in nanoseconds, or `None` when
/// `text` is not decimal digits followed by a unit (bpftrace 0.24).
fn duration(text: &str) -> Option<Result<u64, String>> {
    const UNITS: [(&str, u64); 7] = [
        ("ns", 1),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
    ];
    let digits_end = text.find(|c: char| !c.is_ascii_digit() && c != '_')?;
    let (number, unit) = text.split_at(digits_end);
    let (_, scale) = UNITS.iter().find(|(u, _)| *u == unit)?;
    if number.is_empty() || text.starts_with("0x") {
        return None;
    }
    Some(parse_int(number).and_then(|n| {
        n.checked_mul(*scale)
            .ok_or_else(|| "it does not fit in 64 bits".into())
    }))
}

pub fn parse_int(text: &str) -> Result<u64, String> {
    let lower = text.to_ascii_lowercase();
    let body = lower.trim_end_matches(['u', 'l']);
    if body.is_empty() {
        return Err("no digits".into());
    }
    if body.starts_with('_') || body.ends_with('_') {
        return Err("`_` may only stand between digits".into());
    }
    let digits: String = body.chars().filter(|&c| c != '_').collect();
    let too_large = || "it does not fit in 64 bits".to_string();
    if let Some(hex) = digits.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow => too_large(),
            _ => "bad hex digits".into(),
        });
    }
    if let Some(bin) = digits.strip_prefix("0b") {
        return u64::from_str_radix(bin, 2).map_err(|_| "bad binary digits".to_string());
    }
    if let Some((mantissa, exponent)) = digits.split_once('e') {
        let m: u64 = mantissa
            .parse()
            .map_err(|_| "bad digits before the exponent".to_string())?;
        let e: u32 = exponent.parse().map_err(|_| "bad exponent".to_string())?;
        return 10u64
            .checked_pow(e)
            .and_then(|p| m.checked_mul(p))
            .ok_or_else(too_large);
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return u64::from_str_radix(&digits[1..], 8).map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow => too_large(),
            _ => "a leading 0 makes it octal, and it has digits 8 or 9".into(),
        });
    }
    digits.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => too_large(),
        _ => "bad digits".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(src: &str) -> Vec<Tok> {
        let mut lexer = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            let t = lexer.next_token().unwrap();
            if t.tok == Tok::Eof {
                return out;
            }
            out.push(t.tok);
        }
    }

    #[test]
    fn integers_follow_c() {
        assert_eq!(parse_int("42"), Ok(42));
        assert_eq!(parse_int("0x1F"), Ok(31));
        assert_eq!(parse_int("010"), Ok(8));
        assert_eq!(parse_int("0"), Ok(0));
        assert_eq!(parse_int("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_int("5e3"), Ok(5000));
        assert_eq!(parse_int("10ul"), Ok(10));
        assert_eq!(parse_int("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_int("18446744073709551616").is_err());
        assert!(parse_int("09").is_err());
        assert!(parse_int("1_").is_err());
        assert!(parse_int("1e99").is_err());
    }

    #[test]
    fn durations_are_nanoseconds_and_ranges_lex_apart() {
        use Tok::*;
        assert_eq!(
            tokens("100ms 1s 2m 1_000us 3ns 1h 1d"),
            vec![
                Int(100_000_000),
                Int(1_000_000_000),
                Int(120_000_000_000),
                Int(1_000_000),
                Int(3),
                Int(3_600_000_000_000),
                Int(86_400_000_000_000),
            ]
        );
        assert_eq!(tokens("0..10"), vec![Int(0), Punct(".."), Int(10)]);
        assert!(Lexer::new("99999999999d").next_token().is_err());
        // Hexadecimal digits are not units.
        assert_eq!(tokens("0x1d"), vec![Int(0x1d)]);
    }

    #[test]
    fn tokens_of_a_statement() {
        use Tok::*;
        assert_eq!(
            tokens("@x[$1, comm] += 0x10; // note\n/* block */ $y-- >>= $#"),
            vec![
                Map("x".into()),
                Punct("["),
                Param(1),
                Punct(","),
                Ident("comm".into()),
                Punct("]"),
                Punct("+="),
                Int(16),
                Punct(";"),
                Var("y".into()),
                Punct("--"),
                Punct(">>="),
                ParamCount,
            ]
        );
        assert_eq!(
            tokens("@ = 1"),
            vec![Map(String::new()), Punct("="), Int(1)]
        );
    }

    #[test]
    fn strings_take_c_escapes() {
        assert_eq!(
            tokens(r#""a\tb\n\x41\101\"\\""#),
            vec![Tok::Str(b"a\tb\nAA\"\\".to_vec())]
        );
        let mut lexer = Lexer::new("\"open\nx\"");
        assert!(lexer
            .next_token()
            .unwrap_err()
            .message
            .contains("unterminated"));
        let mut lexer = Lexer::new(r#""\q""#);
        assert!(lexer.next_token().is_err());
    }

    #[test]
    fn attach_points_keep_paths_and_quotes() {
        let mut lexer = Lexer::new("usdt:/usr/lib/x.so:p:n* /pid == 1/ {");
        let ap = lexer.attach_point().unwrap();
        assert_eq!(ap.fields, vec!["usdt", "/usr/lib/x.so", "p", "n*"]);
        assert_eq!(ap.text, "usdt:/usr/lib/x.so:p:n*");

        let mut lexer = Lexer::new("tracepoint:syscalls:sys_enter_openat/pid == 1/");
        let ap = lexer.attach_point().unwrap();
        assert_eq!(
            ap.fields,
            vec!["tracepoint", "syscalls", "sys_enter_openat"]
        );

        let mut lexer = Lexer::new(r#"uprobe:"/a b/c:d":"ns::f",BEGIN"#);
        let ap = lexer.attach_point().unwrap();
        assert_eq!(ap.fields, vec!["uprobe", "/a b/c:d", "ns::f"]);
        assert_eq!(lexer.next_token().unwrap().tok, Tok::Punct(","));
    }

    #[test]
    fn shebang_and_directives() {
        assert_eq!(
            tokens("#!/usr/bin/env bpftrace\n#include <linux/sched.h>\nBEGIN"),
            vec![
                Tok::Directive("include <linux/sched.h>".into()),
                Tok::Ident("BEGIN".into())
            ]
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for src in ["$", "$0", "\u{1F600}", "/* open", "\"\\x\"", "\"\\777\""] {
            let mut lexer = Lexer::new(src);
            let mut failed = false;
            for _ in 0..10 {
                match lexer.next_token() {
                    Ok(t) if t.tok == Tok::Eof => break,
                    Ok(_) => {}
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            assert!(failed, "{src:?} lexed without an error");
        }
    }
}
