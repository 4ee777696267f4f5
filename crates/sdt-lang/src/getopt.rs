//! Named program parameters: `getopt("name", default, "description")` in
//! a script, and `--name=value` after `--` on the command line.
//!
//! bpftrace keeps their values in global variables that it fills in when
//! it loads the program. sdt compiles after the command line is read, so
//! each `getopt()` is simply a constant: the value given, or the default.
//! The default's kind decides the parameter's type: none or `true`/`false`
//! a bool (a bare `--name` sets it), a string a string, a number an
//! unsigned integer, a negative number a signed one.
//!
//! The command line is checked against the parameters a script declares
//! before anything is compiled ([`declarations`], [`bind`]), so that
//! `--help` can list them and an unexpected or malformed one is refused
//! with bpftrace's words, without a place in the script.

use std::collections::{BTreeMap, HashMap};

use crate::ast::{Expr, ExprKind};
use crate::diag::Span;
use crate::lexer::{Lexer, Tok};

/// A parameter's value, or its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Text(String),
}

/// One `getopt()` of a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declaration {
    pub name: String,
    pub default: Value,
    pub description: String,
}

/// Reads a `getopt(...)` call's arguments: literals only, as in bpftrace.
pub fn declaration(args: &[Expr]) -> Result<Declaration, (Span, String)> {
    let Some(first) = args.first() else {
        return Err((Span::default(), "getopt() takes a name".into()));
    };
    let ExprKind::Str(name) = &first.kind else {
        return Err((
            first.span,
            "the first argument of getopt() must be a string literal".into(),
        ));
    };
    let default = match args.get(1).map(|e| (&e.kind, e.span)) {
        None => Value::Bool(false),
        Some((ExprKind::Ident(word), _)) if word == "true" => Value::Bool(true),
        Some((ExprKind::Ident(word), _)) if word == "false" => Value::Bool(false),
        Some((ExprKind::Str(text), _)) => Value::Text(String::from_utf8_lossy(text).into()),
        Some((ExprKind::Int(n), span)) if *n < 0 => Value::Signed(
            i64::try_from(*n).map_err(|_| (span, "the default does not fit in 64 bits".into()))?,
        ),
        Some((ExprKind::Int(n), span)) => Value::Unsigned(
            u64::try_from(*n).map_err(|_| (span, "the default does not fit in 64 bits".into()))?,
        ),
        Some((_, span)) => {
            return Err((
                span,
                "the default of getopt() must be a string, integer or boolean literal".into(),
            ))
        }
    };
    let description = match args.get(2).map(|e| (&e.kind, e.span)) {
        None => String::new(),
        Some((ExprKind::Str(text), _)) => String::from_utf8_lossy(text).into(),
        Some((_, span)) => {
            return Err((
                span,
                "the description of getopt() must be a string literal".into(),
            ))
        }
    };
    Ok(Declaration {
        name: String::from_utf8_lossy(name).into(),
        default,
        description,
    })
}

/// The `getopt()` calls of a script, found in its tokens, one per name
/// (the first with a description gives it). A script that does not lex is
/// read up to where it stops; compiling it reports why.
pub fn declarations(source: &str) -> Vec<Declaration> {
    let mut tokens = Vec::new();
    let mut lexer = Lexer::new(source);
    loop {
        match lexer.next_token() {
            Ok(t) if t.tok == Tok::Eof => break,
            Ok(t) => tokens.push(t),
            // Attach points are not made of tokens: skip what does not lex.
            Err(_) => {
                let at = lexer.offset();
                let step = source[at..].chars().next().map_or(1, char::len_utf8);
                lexer.seek(at + step);
            }
        }
    }
    let mut found: BTreeMap<String, Declaration> = BTreeMap::new();
    let punct = |i: usize, p: &'static str| tokens.get(i).is_some_and(|t| t.tok == Tok::Punct(p));
    for (i, t) in tokens.iter().enumerate() {
        if t.tok != Tok::Ident("getopt".into()) || !punct(i + 1, "(") {
            continue;
        }
        // Literal arguments rebuilt as expressions, to be read as the
        // checker reads them.
        let mut args = Vec::new();
        let mut at = i + 2;
        while let Some(token) = tokens.get(at) {
            let (kind, next) = match &token.tok {
                Tok::Str(bytes) => (ExprKind::Str(bytes.clone()), at + 1),
                Tok::Int(n) => (ExprKind::Int((*n).into()), at + 1),
                Tok::Ident(word) => (ExprKind::Ident(word.clone()), at + 1),
                Tok::Punct("-") => match tokens.get(at + 1).map(|t| &t.tok) {
                    Some(Tok::Int(n)) => (ExprKind::Int(-i128::from(*n)), at + 2),
                    _ => break,
                },
                _ => break,
            };
            args.push(Expr {
                kind,
                span: token.span,
            });
            at = next;
            if !punct(at, ",") {
                break;
            }
            at += 1;
        }
        if let Ok(d) = declaration(&args) {
            let entry = found.entry(d.name.clone()).or_insert(d.clone());
            if entry.description.is_empty() {
                entry.description = d.description;
            }
        }
    }
    found.into_values().collect()
}

/// Named parameters as given after `--`: `name` → the text after `=`, or
/// `None` for a bare `--name`.
pub type Given = HashMap<String, Option<String>>;

/// Why the command line's named parameters cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindError {
    /// `--help` was given: the parameters the script takes, one a line
    /// with its description.
    Help(Vec<String>),
    /// Names the script does not declare; and the ones it does.
    Unexpected {
        unexpected: Vec<String>,
        expected: Vec<String>,
    },
    /// A value that is not of the parameter's type.
    Invalid(String),
}

/// Checks `given` against the script's declarations.
pub fn bind(declared: &[Declaration], given: &Given) -> Result<(), BindError> {
    let known = |name: &str| declared.iter().any(|d| d.name == name);
    if given.contains_key("help") && !known("help") {
        return Err(BindError::Help(
            declared
                .iter()
                .map(|d| match d.description.as_str() {
                    "" => format!("--{}", d.name),
                    text => format!("--{}: {text}", d.name),
                })
                .collect(),
        ));
    }
    let mut unexpected: Vec<String> = given.keys().filter(|n| !known(n)).cloned().collect();
    if !unexpected.is_empty() {
        unexpected.sort();
        return Err(BindError::Unexpected {
            unexpected,
            expected: declared.iter().map(|d| d.name.clone()).collect(),
        });
    }
    for d in declared {
        if let Some(text) = given.get(&d.name) {
            value(d, text.as_deref()).map_err(BindError::Invalid)?;
        }
    }
    Ok(())
}

/// The value of parameter `d`, given as `text` (`None` for a bare
/// `--name`, absent: the default).
pub fn value(d: &Declaration, text: Option<&str>) -> Result<Value, String> {
    let invalid = |value: &str, why: &str| {
        format!(
            "program command line option --{} {why} (value: {value})",
            d.name
        )
    };
    let Some(text) = text else {
        return match d.default {
            Value::Bool(_) => Ok(Value::Bool(true)),
            Value::Text(_) => Err(invalid("true", "expects a string")),
            _ => Err(invalid("true", "expects an integer")),
        };
    };
    let number = |text: &str| -> Result<(bool, u64), String> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if !digits.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(invalid(text, "invalid integer"));
        }
        crate::lexer::parse_int(digits)
            .map(|n| (negative, n))
            .map_err(|_| invalid(text, "invalid trailing bytes"))
    };
    match &d.default {
        Value::Bool(_) => match text.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(Value::Bool(true)),
            "false" | "0" => Ok(Value::Bool(false)),
            _ => Err(invalid(text, "expects a boolean (e.g. 'true')")),
        },
        Value::Text(_) => Ok(Value::Text(text.to_string())),
        Value::Unsigned(_) => match number(text)? {
            (false, n) => Ok(Value::Unsigned(n)),
            (true, _) => Err(invalid(text, "invalid integer")),
        },
        Value::Signed(_) => {
            let (negative, n) = number(text)?;
            let n = i128::from(n) * if negative { -1 } else { 1 };
            i64::try_from(n)
                .map(Value::Signed)
                .map_err(|_| invalid(text, "value is out of range"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_read_from_the_tokens() {
        let found = declarations(
            "uprobe:/bin/x:f* /arg0/ { @[getopt(\"b\", -1)] = 1; } \
             BEGIN { print((getopt(\"a\", 10, \"A number\"), getopt(\"c\"), getopt(\"d\", \"hi\"), getopt(\"e\", true), getopt(\"a\", 10))); }",
        );
        let names: Vec<(&str, &Value, &str)> = found
            .iter()
            .map(|d| (d.name.as_str(), &d.default, d.description.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("a", &Value::Unsigned(10), "A number"),
                ("b", &Value::Signed(-1), ""),
                ("c", &Value::Bool(false), ""),
                ("d", &Value::Text("hi".into()), ""),
                ("e", &Value::Bool(true), ""),
            ]
        );
    }

    #[test]
    fn values_follow_the_default_s_kind() {
        let d = |default| Declaration {
            name: "x".into(),
            default,
            description: String::new(),
        };
        assert_eq!(
            value(&d(Value::Unsigned(1)), Some("0xffffffffffffffff")),
            Ok(Value::Unsigned(u64::MAX))
        );
        assert_eq!(
            value(&d(Value::Signed(-1)), Some("-10")),
            Ok(Value::Signed(-10))
        );
        assert_eq!(
            value(&d(Value::Bool(true)), Some("False")),
            Ok(Value::Bool(false))
        );
        assert_eq!(value(&d(Value::Bool(false)), None), Ok(Value::Bool(true)));
        assert_eq!(
            value(&d(Value::Unsigned(10)), Some("False")),
            Err("program command line option --x invalid integer (value: False)".into())
        );
        assert_eq!(
            value(&d(Value::Unsigned(10)), Some("12z")),
            Err("program command line option --x invalid trailing bytes (value: 12z)".into())
        );
        assert!(value(&d(Value::Text("a".into())), None).is_err());
    }

    #[test]
    fn the_command_line_is_checked_against_the_declarations() {
        let declared = declarations("BEGIN { getopt(\"aa\", 1, \"Aa\"); getopt(\"bb\"); }");
        let given = |pairs: &[(&str, Option<&str>)]| -> Given {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect()
        };
        assert_eq!(bind(&declared, &given(&[("aa", Some("3"))])), Ok(()));
        assert_eq!(
            bind(&declared, &given(&[("help", None)])),
            Err(BindError::Help(vec!["--aa: Aa".into(), "--bb".into()]))
        );
        assert_eq!(
            bind(&declared, &given(&[("cc", None)])),
            Err(BindError::Unexpected {
                unexpected: vec!["cc".into()],
                expected: vec!["aa".into(), "bb".into()]
            })
        );
        assert!(matches!(
            bind(&declared, &given(&[("aa", Some("x"))])),
            Err(BindError::Invalid(_))
        ));
    }
}
