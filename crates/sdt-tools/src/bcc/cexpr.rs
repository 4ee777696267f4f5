//! BCC's C expressions in sdt's language.
//!
//! `trace` and `argdist` take predicates, format arguments and
//! expressions in C, which BCC compiles with clang. sdt's language is
//! bpftrace's, whose expressions are C's: the same operators and
//! precedence, casts to integer types, `->` on typed pointers, string and
//! number literals. So an expression is carried over token by token and
//! only names change: BCC's `arg1` is sdt's `arg0`, `$pid` (the thread)
//! is `tid`, a parameter of the probe's signature is the argument it
//! names cast to its type, `STRCMP("lit", s)` compares a prefix. What
//! cannot be carried over is refused here, in a message that names it,
//! rather than in the compiler's words about a program the user never
//! wrote.

use std::fmt::Write as _;

use anyhow::{anyhow, bail};

/// What kind of probe an expression is evaluated in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A function's entry (`p:`).
    Entry,
    /// A function's return (`r:`).
    Return,
    /// A USDT probe (`u:`).
    Usdt,
    /// A kernel tracepoint (`t:`).
    Tracepoint,
}

/// A parameter of a probe's signature: `size_t size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its C type, qualifiers and `__user` left out: `size_t`, `char *`.
    pub ty: String,
    pub name: String,
}

/// The variable that holds a parameter's value at entry, by its name.
pub type EntryVar<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What names mean in one probe's expressions.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub kind: Kind,
    pub signature: &'a [Param],
    /// argdist's return probes: the variable that holds a parameter's
    /// value at entry (`$entry(size)`), if the tool keeps one.
    pub entry: Option<EntryVar<'a>>,
    /// argdist's return probes: the variable of `$latency`.
    pub latency: Option<&'a str>,
}

impl<'a> Scope<'a> {
    /// Names in a probe of `kind` with `signature`, without argdist's
    /// `$entry` and `$latency`.
    pub fn new(kind: Kind, signature: &'a [Param]) -> Scope<'a> {
        Scope {
            kind,
            signature,
            entry: None,
            latency: None,
        }
    }
}

/// Parses a signature's parameter list (the text between the
/// parentheses): `size_t size, char *buf`; `void` or nothing is none.
pub fn signature(text: &str) -> anyhow::Result<Vec<Param>> {
    let text = text.trim();
    if text.is_empty() || text == "void" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|param| {
            let words = param
                .replace('*', " * ")
                .split_whitespace()
                .filter(|w| !["const", "volatile", "__user"].contains(w))
                .map(str::to_string)
                .collect::<Vec<_>>();
            match words.split_last() {
                Some((name, ty)) if !ty.is_empty() && is_identifier(name) => Ok(Param {
                    ty: ty.join(" ").replace(" *", "*").replace('*', " *"),
                    name: name.clone(),
                }),
                _ => bail!("'{}' is not a parameter (TYPE NAME)", param.trim()),
            }
        })
        .collect()
}

fn is_identifier(word: &str) -> bool {
    word.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a C type is to sdt: an integer type of its own name, a string
/// (`char *`), or anything else (a pointer, a struct), left as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Integer(&'static str),
    String,
    Other(String),
}

/// The C type `text` (`u64`, `unsigned int`, `char *`) as sdt sees it.
pub fn c_type(text: &str) -> Type {
    let words: Vec<&str> = text
        .split_whitespace()
        .filter(|w| !["const", "volatile", "__user"].contains(w))
        .collect();
    let name = words.join(" ").replace(" *", "*");
    if name == "char*" {
        return Type::String;
    }
    let integer = match name.as_str() {
        "u8" | "__u8" | "uint8_t" | "unsigned char" | "uint8" | "bool" | "_Bool" => "uint8",
        "s8" | "__s8" | "int8_t" | "char" | "signed char" | "int8" => "int8",
        "u16" | "__u16" | "uint16_t" | "unsigned short" | "unsigned short int" | "uint16"
        | "umode_t" => "uint16",
        "s16" | "__s16" | "int16_t" | "short" | "short int" | "signed short" | "int16" => "int16",
        "u32" | "__u32" | "uint32_t" | "unsigned" | "unsigned int" | "uint32" | "uid_t"
        | "gid_t" | "gfp_t" | "dev_t" | "mode_t" => "uint32",
        "s32" | "__s32" | "int32_t" | "int" | "signed" | "signed int" | "int32" | "pid_t" => {
            "int32"
        }
        "u64"
        | "__u64"
        | "uint64_t"
        | "unsigned long"
        | "unsigned long int"
        | "unsigned long long"
        | "unsigned long long int"
        | "size_t"
        | "uintptr_t"
        | "uint64"
        | "sector_t" => "uint64",
        "s64" | "__s64" | "int64_t" | "long" | "long int" | "long long" | "long long int"
        | "ssize_t" | "off_t" | "loff_t" | "intptr_t" | "int64" => "int64",
        _ => return Type::Other(name),
    };
    Type::Integer(integer)
}

/// A token of a C expression.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Number(String),
    Str(String),
    Punct(String),
    Space,
}

fn tokens(text: &str) -> anyhow::Result<Vec<Token>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            out.push(Token::Space);
        } else if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `arg1@user`: the memory is the user's, which it always is here.
            if chars[i..].starts_with(&['@', 'u', 's', 'e', 'r']) {
                i += 5;
            }
            out.push(Token::Ident(word));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            let number: String = chars[start..i].iter().collect();
            // C's suffixes (`10UL`) mean nothing to sdt; hex digits stay.
            let hex = number.starts_with("0x") || number.starts_with("0X");
            let digits = number.trim_end_matches(['u', 'U', 'l', 'L']);
            let digits = if hex || !digits.is_empty() {
                digits
            } else {
                &number
            };
            out.push(Token::Number(digits.to_string()));
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            if i >= chars.len() {
                bail!("unterminated string in '{text}'");
            }
            i += 1;
            out.push(Token::Str(chars[start..i].iter().collect()));
        } else if c == '\'' {
            let (value, len) = match chars.get(i + 1..i + 4) {
                Some(['\\', e, '\'']) => (escape(*e), 4),
                _ => match chars.get(i + 1..i + 3) {
                    Some([ch, '\'']) => (Some(*ch as u32), 3),
                    _ => (None, 0),
                },
            };
            let value = value.ok_or_else(|| anyhow!("bad character literal in '{text}'"))?;
            out.push(Token::Number(value.to_string()));
            i += len;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let punct = if [
                "->", "&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "++", "--",
            ]
            .contains(&two.as_str())
            {
                two
            } else {
                c.to_string()
            };
            i += punct.chars().count();
            out.push(Token::Punct(punct));
        }
    }
    Ok(out)
}

fn escape(c: char) -> Option<u32> {
    Some(match c {
        'n' => 10,
        't' => 9,
        'r' => 13,
        '0' => 0,
        '\\' => 92,
        '\'' => 39,
        '"' => 34,
        _ => return None,
    })
}

/// Translates the C expression `text` to sdt's language in `scope`.
pub fn translate(text: &str, scope: &Scope<'_>) -> anyhow::Result<String> {
    let tokens = tokens(text)?;
    let mut out = String::new();
    let mut i = 0;
    while i < tokens.len() {
        i = translate_one(&tokens, i, scope, &mut out)?;
    }
    Ok(out.trim().to_string())
}

/// Translates the token at `i` (with what it takes after it) into `out`;
/// returns the index after it.
fn translate_one(
    tokens: &[Token],
    i: usize,
    scope: &Scope<'_>,
    out: &mut String,
) -> anyhow::Result<usize> {
    let next_punct = |at: usize, p: &str| {
        tokens[at..]
            .iter()
            .find(|t| **t != Token::Space)
            .is_some_and(|t| *t == Token::Punct(p.to_string()))
    };
    match &tokens[i] {
        Token::Space => out.push(' '),
        Token::Number(n) | Token::Str(n) | Token::Punct(n) => out.push_str(n),
        Token::Ident(word) if word == "STRCMP" && next_punct(i + 1, "(") => {
            return strcmp(tokens, i + 1, scope, out);
        }
        Token::Ident(word) if word == "$entry" && next_punct(i + 1, "(") => {
            let (args, end) = call_args(tokens, i + 1)?;
            let words: Vec<&Token> = args
                .iter()
                .flatten()
                .filter(|t| **t != Token::Space)
                .collect();
            let (1, [Token::Ident(name)]) = (args.len(), words.as_slice()) else {
                bail!("$entry() takes a parameter's name");
            };
            let name = name.clone();
            let entry = scope
                .entry
                .ok_or_else(|| anyhow!("$entry({name}) is only for return probes (r:)"))?;
            let var = entry(&name).ok_or_else(|| anyhow!("$entry({name}): no such param"))?;
            out.push_str(&var);
            return Ok(end);
        }
        Token::Ident(word) => out.push_str(&name(word, scope)?),
    }
    Ok(i + 1)
}

/// The arguments of the call whose `(` is the next token from `at`,
/// each without spaces; and the index after its `)`.
fn call_args(tokens: &[Token], at: usize) -> anyhow::Result<(Vec<Vec<Token>>, usize)> {
    let open = (at..tokens.len())
        .find(|&j| tokens[j] != Token::Space)
        .filter(|&j| tokens[j] == Token::Punct("(".into()))
        .ok_or_else(|| anyhow!("expected ("))?;
    let mut depth = 0;
    let mut args = vec![Vec::new()];
    for (j, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct(p) if p == "(" => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            Token::Punct(p) if p == ")" => {
                depth -= 1;
                if depth == 0 {
                    return Ok((args, j + 1));
                }
            }
            Token::Punct(p) if p == "," && depth == 1 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(token.clone());
        }
    }
    bail!("unbalanced parentheses")
}

/// `STRCMP("lit", EXPR)`: whether the string at EXPR starts with the
/// literal's bytes (BCC compares as many as the literal has).
fn strcmp(
    tokens: &[Token],
    at: usize,
    scope: &Scope<'_>,
    out: &mut String,
) -> anyhow::Result<usize> {
    let (args, end) = call_args(tokens, at)?;
    let trimmed = |arg: &Vec<Token>| -> Vec<Token> {
        arg.iter()
            .filter(|t| **t != Token::Space)
            .cloned()
            .collect()
    };
    let [literal, expr] = args.as_slice() else {
        bail!("STRCMP takes a string literal and an expression");
    };
    let literal = trimmed(literal);
    let [Token::Str(literal)] = literal.as_slice() else {
        bail!("STRCMP's first argument must be a string literal");
    };
    let bytes = unescaped_len(literal);
    let mut inner = String::new();
    let mut j = 0;
    while j < expr.len() {
        j = translate_one(expr, j, scope, &mut inner)?;
    }
    let inner = inner.trim();
    let _ = write!(out, "(strncmp(str({inner}), {literal}, {bytes}) == 0)");
    Ok(end)
}

/// Bytes a C string literal (quotes included) holds, without its NUL.
fn unescaped_len(literal: &str) -> usize {
    let body = &literal[1..literal.len() - 1];
    let mut n = 0;
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            chars.next();
        }
        n += c.len_utf8().max(1);
    }
    n
}

/// What the name `word` is in sdt's language, in `scope`.
fn name(word: &str, scope: &Scope<'_>) -> anyhow::Result<String> {
    if let Some(n) = word
        .strip_prefix("arg")
        .and_then(|n| n.parse::<usize>().ok())
    {
        let most = match scope.kind {
            Kind::Tracepoint => bail!("{word} is not in tracepoints: use args->FIELD"),
            Kind::Usdt => 12,
            Kind::Entry | Kind::Return => 6,
        };
        if n == 0 || n > most {
            bail!("{word}: arguments are arg1 to arg{most}");
        }
        return Ok(format!("arg{}", n - 1));
    }
    Ok(match word {
        "retval" | "$retval" => {
            if scope.kind != Kind::Return {
                bail!("{word} is only in return probes (r:)");
            }
            "retval".into()
        }
        "$uid" => "uid".into(),
        "$gid" => "gid".into(),
        // BCC's $pid is the thread, $tgid the process.
        "$pid" => "tid".into(),
        "$tgid" | "$PID" => "pid".into(),
        "$cpu" => "cpu".into(),
        "$task" => "curtask".into(),
        "$COMM" => "comm".into(),
        "$latency" => match scope.latency {
            Some(var) => var.into(),
            None => bail!("$latency is only for return probes (r:)"),
        },
        "NULL" => "0".into(),
        _ if word.starts_with('$') => bail!(
            "unknown variable {word} (there are $uid, $gid, $pid, $tgid, $cpu, $task, \
             $retval, $latency, $entry(PARAM), $PID and $COMM)"
        ),
        _ => match scope.signature.iter().position(|p| p.name == word) {
            Some(n) => parameter(&scope.signature[n], n, scope.kind)?,
            // BCC's kernel names for integer types: `(u64)x`.
            None if is_kernel_integer(word) => match c_type(word) {
                Type::Integer(ty) => ty.into(),
                _ => word.into(),
            },
            None => word.into(),
        },
    })
}

/// `u8` to `u64`, `s8` to `s64`, `__u8` to `__s64`: integer types the
/// kernel names, which sdt's language does not.
fn is_kernel_integer(word: &str) -> bool {
    let bare = word.strip_prefix("__").unwrap_or(word);
    bare.strip_prefix(['u', 's'])
        .is_some_and(|bits| ["8", "16", "32", "64"].contains(&bits))
}

/// A signature's parameter `n` as an expression: the argument cast to
/// its type.
fn parameter(param: &Param, n: usize, kind: Kind) -> anyhow::Result<String> {
    if n >= 6 {
        bail!(
            "{}: only the first six parameters are in registers",
            param.name
        );
    }
    if kind == Kind::Tracepoint || kind == Kind::Usdt {
        bail!("USDT and tracepoint probes can't have a function signature; use arg1, arg2, ... instead");
    }
    Ok(match c_type(&param.ty) {
        Type::Integer(ty) => format!("(({ty})arg{n})"),
        Type::String => format!("arg{n}"),
        Type::Other(ty) if ty.starts_with("struct ") && ty.ends_with('*') => {
            format!("(({})arg{n})", param.ty)
        }
        Type::Other(_) => format!("arg{n}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str, signature: &str) -> String {
        let params = super::signature(signature).unwrap();
        translate(text, &Scope::new(Kind::Entry, &params)).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn signatures_are_parameters() {
        assert_eq!(
            signature("size_t size, const char __user *buf").unwrap(),
            [
                Param {
                    ty: "size_t".into(),
                    name: "size".into()
                },
                Param {
                    ty: "char *".into(),
                    name: "buf".into()
                }
            ]
        );
        assert!(signature("void").unwrap().is_empty());
        assert!(signature("size").is_err());
    }

    #[test]
    fn names_become_sdt_s() {
        assert_eq!(
            entry("arg1 > 10 && $pid != $tgid", ""),
            "arg0 > 10 && tid != pid"
        );
        assert_eq!(
            entry("size % 2 == 0", "size_t size"),
            "((uint64)arg0) % 2 == 0"
        );
        assert_eq!(entry("(int)fd < 0", "int fd"), "(int)((int32)arg0) < 0");
        assert_eq!(entry("(u64)arg2 & 0xffUL", ""), "(uint64)arg1 & 0xff");
        assert_eq!(entry("c == 'a'", "char c"), "((int8)arg0) == 97");
        assert_eq!(entry("arg1@user", ""), "arg0");
        assert_eq!(
            entry("ts->tv_nsec", "struct timespec *ts"),
            "((struct timespec *)arg0)->tv_nsec"
        );
        assert_eq!(
            entry("STRCMP(\"ab\\n\", path) && 1", "char *path"),
            "(strncmp(str(arg0), \"ab\\n\", 3) == 0) && 1"
        );
        let ret = Scope::new(Kind::Return, &[]);
        assert_eq!(
            translate("(int)retval < 0", &ret).unwrap(),
            "(int)retval < 0"
        );
    }

    #[test]
    fn what_cannot_be_carried_over_is_named() {
        assert_eq!(
            entry("retval", ""),
            "ERR retval is only in return probes (r:)"
        );
        assert_eq!(entry("arg7", ""), "ERR arg7: arguments are arg1 to arg6");
        assert!(entry("$foo", "").starts_with("ERR unknown variable $foo"));
        assert!(entry("$latency", "").contains("only for return probes"));
        assert!(entry("\"abc", "").contains("unterminated string"));
        let tp = Scope::new(Kind::Tracepoint, &[]);
        assert!(translate("arg1", &tp)
            .unwrap_err()
            .to_string()
            .contains("args->FIELD"));
        assert_eq!(
            translate("args->nr_sector > 8", &tp).unwrap(),
            "args->nr_sector > 8"
        );
    }

    #[test]
    fn types_are_sdt_s() {
        assert_eq!(c_type("u64"), Type::Integer("uint64"));
        assert_eq!(c_type("unsigned int"), Type::Integer("uint32"));
        assert_eq!(c_type("char *"), Type::String);
        assert_eq!(c_type("char*"), Type::String);
        assert_eq!(c_type("const char *"), Type::String);
        assert_eq!(c_type("struct foo *"), Type::Other("struct foo*".into()));
    }
}
