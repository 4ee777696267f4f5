//! What an argument's C type means to a probe: its size and sign, or that
//! it is a string or another pointer.
//!
//! Only what a probe argument can be is resolved: the C integer types in
//! any spelling, `_Bool` and `bool`, the fixed-width and system typedefs
//! that real provider files use (`uint32_t`, `size_t`, `pid_t`, Solaris'
//! `uint_t`, DTrace's `string` ...), typedefs and object-like macros
//! declared in the file, and pointers to anything. Sizes are those of
//! LP64 Linux, where `<sys/sdt.h>` probes live. A `char *` (in any
//! qualification) is a string; so is DTrace's `string`.

use std::ops::Range;

use crate::diag::Diagnostic;
use crate::lexer::{Kind, Token};
use crate::parse::{Param, ProviderFile};

/// What a probe argument is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// An integer of `size` bytes (1, 2, 4 or 8).
    Int { size: u8, signed: bool },
    /// An integer as wide as a pointer: `size_t`, `uintptr_t`, `ssize_t`...
    Size { signed: bool },
    /// `_Bool`, `bool`.
    Bool,
    /// A NUL-terminated string: `char *`, `const char *`, `string`.
    Str,
    /// Any other pointer, or an array (which a parameter is a pointer to).
    Pointer,
    /// `float`, `double`, `long double`.
    Float,
    /// `void`, not as a pointer.
    Void,
    /// A `struct` or `union` passed by value.
    Aggregate,
}

/// A type before pointers and arrays are applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    Arg(ArgType),
    /// `char`, `signed char`: a pointer to one is a string.
    Char {
        signed: bool,
    },
}

impl Base {
    fn value(self) -> ArgType {
        match self {
            Base::Arg(t) => t,
            Base::Char { signed } => ArgType::Int { size: 1, signed },
        }
    }
}

const QUALIFIERS: [&str; 4] = ["const", "volatile", "restrict", "userland"];

/// The builtin typedefs, as on LP64 Linux (and DTrace's own names).
fn builtin(name: &str) -> Option<Base> {
    use ArgType::*;
    let int = |size, signed| Some(Base::Arg(Int { size, signed }));
    match name {
        "int8_t" => int(1, true),
        "int16_t" => int(2, true),
        "int32_t" => int(4, true),
        "int64_t" => int(8, true),
        "uint8_t" | "u_int8_t" | "uchar_t" => int(1, false),
        "uint16_t" | "u_int16_t" | "ushort_t" => int(2, false),
        "uint32_t" | "u_int32_t" | "uint_t" | "uid_t" | "gid_t" | "mode_t" | "id_t" => {
            int(4, false)
        }
        "uint64_t" | "u_int64_t" | "ulong_t" | "u_longlong_t" | "dev_t" | "ino_t" => int(8, false),
        "pid_t" => int(4, true),
        "off_t" | "off64_t" | "time_t" | "clock_t" | "hrtime_t" | "longlong_t" | "loff_t" => {
            int(8, true)
        }
        "size_t" | "uintptr_t" => Some(Base::Arg(Size { signed: false })),
        "ssize_t" | "intptr_t" | "ptrdiff_t" => Some(Base::Arg(Size { signed: true })),
        "bool" | "boolean_t" => Some(Base::Arg(Bool)),
        "string" => Some(Base::Arg(Str)),
        "caddr_t" => Some(Base::Arg(Pointer)),
        _ => None,
    }
}

/// How deep typedefs may refer to each other.
const MAX_TYPEDEF_DEPTH: usize = 32;

impl ProviderFile {
    /// What the parameter's type means.
    pub fn arg_type(&self, param: &Param) -> Result<ArgType, Diagnostic> {
        self.resolve(&param.tokens, 0)
    }

    /// The name the parameter declares, if any.
    pub(crate) fn param_name<'t>(&self, param: &'t Param) -> Option<&'t str> {
        let (_, rest) = self.specifier(&param.tokens, 0).ok()?;
        param.tokens[rest..]
            .iter()
            .filter(|t| !t.is_punct('*') && !QUALIFIERS.iter().any(|q| t.is_ident(q)))
            .find_map(Token::ident)
    }

    fn resolve(&self, tokens: &[Token], depth: usize) -> Result<ArgType, Diagnostic> {
        if tokens.iter().any(|t| t.is_punct('(')) {
            // A function pointer.
            return Ok(ArgType::Pointer);
        }
        let (base, rest) = self.specifier(tokens, depth)?;
        let mut pointers = 0;
        let mut named = false;
        let mut arrays = 0;
        let mut in_array = false;
        for token in &tokens[rest..] {
            match &token.kind {
                _ if in_array => in_array = !token.is_punct(']'),
                Kind::Punct('*') if !named => pointers += 1,
                Kind::Punct('[') => {
                    arrays += 1;
                    in_array = true;
                }
                Kind::Ident(q) if QUALIFIERS.contains(&q.as_str()) => {}
                Kind::Ident(_) if !named => named = true,
                _ => {
                    return Err(self.error(
                        token.span.clone(),
                        format!(
                            "unexpected `{}` in an argument type",
                            &self.source.text()[token.span.clone()]
                        ),
                    ))
                }
            }
        }
        Ok(match (base, pointers + arrays) {
            (_, 0) => base.value(),
            (Base::Char { .. }, 1) => ArgType::Str,
            _ => ArgType::Pointer,
        })
    }

    /// The type specifier at the start of `tokens` (qualifiers aside), and
    /// where the declarator after it starts.
    fn specifier(&self, tokens: &[Token], depth: usize) -> Result<(Base, usize), Diagnostic> {
        let span = span_of(tokens);
        let mut words: Vec<&str> = Vec::new();
        let mut at = 0;
        while let Some(token) = tokens.get(at) {
            let Some(word) = token.ident() else { break };
            if QUALIFIERS.contains(&word) {
                at += 1;
                continue;
            }
            match word {
                "unsigned" | "signed" | "char" | "short" | "int" | "long" | "float" | "double"
                | "void" | "_Bool" => {
                    words.push(word);
                    at += 1;
                }
                "struct" | "union" | "enum" if words.is_empty() => {
                    let tag = tokens.get(at + 1).and_then(Token::ident);
                    if tag.is_none() {
                        return Err(
                            self.error(token.span.clone(), format!("`{word}` needs a name"))
                        );
                    }
                    let base = match word {
                        // An enum's values are `int`s.
                        "enum" => ArgType::Int {
                            size: 4,
                            signed: true,
                        },
                        _ => ArgType::Aggregate,
                    };
                    return Ok((Base::Arg(base), at + 2));
                }
                _ if words.is_empty() => {
                    let base = self.named(word, &token.span, depth)?;
                    return Ok((base, at + 1));
                }
                // A name after the type's keywords: the parameter's.
                _ => break,
            }
        }
        let base = keywords(&words).ok_or_else(|| {
            let what = if words.is_empty() {
                "expected a type".to_string()
            } else {
                format!("`{}` is not a C type", words.join(" "))
            };
            self.error(span.clone(), what)
        })?;
        Ok((base, at))
    }

    /// The type called `name`: a typedef of the file or a builtin one.
    fn named(&self, name: &str, span: &Range<usize>, depth: usize) -> Result<Base, Diagnostic> {
        if depth > MAX_TYPEDEF_DEPTH {
            return Err(self.error(
                span.clone(),
                format!("the typedef `{name}` refers to itself"),
            ));
        }
        if let Some(typedef) = self.typedefs.iter().rev().find(|t| t.name == name) {
            let t = self.resolve(&typedef.tokens, depth + 1)?;
            // A typedef of `char` keeps pointers to it strings.
            let plain_char = typedef.tokens.iter().all(|t| {
                t.ident()
                    .is_some_and(|w| w == "char" || w == "signed" || QUALIFIERS.contains(&w))
            });
            return Ok(match t {
                ArgType::Int { size: 1, signed } if plain_char => Base::Char { signed },
                t => Base::Arg(t),
            });
        }
        builtin(name).ok_or_else(|| {
            self.error(
                span.clone(),
                format!(
                    "unknown type `{name}`: declare it in the file (`typedef unsigned int \
                     {name};` or `#define {name} unsigned int`)"
                ),
            )
        })
    }
}

/// The type that C's type keywords spell, in any order.
fn keywords(words: &[&str]) -> Option<Base> {
    let count = |w: &str| words.iter().filter(|&&x| x == w).count();
    let (unsigned, signed) = (count("unsigned"), count("signed"));
    let (char, short, int, long) = (count("char"), count("short"), count("int"), count("long"));
    let (float, double, void, boolean) = (
        count("float"),
        count("double"),
        count("void"),
        count("_Bool"),
    );
    if words.is_empty()
        || unsigned + signed > 1
        || int > 1
        || char + short + float + double + void + boolean > 1
    {
        return None;
    }
    let sign_given = unsigned + signed == 1;
    let is_signed = unsigned == 0;
    let int_like = |size| {
        Some(Base::Arg(ArgType::Int {
            size,
            signed: is_signed,
        }))
    };
    match (char, short, long, float + double + void + boolean) {
        (1, 0, 0, 0) if int == 0 => {
            if unsigned == 1 {
                int_like(1)
            } else {
                // `char` is signed on x86-64 and a string when pointed to.
                Some(Base::Char { signed: true })
            }
        }
        (0, 1, 0, 0) => int_like(2),
        (0, 0, 0, 0) => int_like(4),
        (0, 0, 1 | 2, 0) => int_like(8),
        (0, 0, 0, 1) if int == 0 && !sign_given => Some(Base::Arg(match () {
            _ if boolean == 1 => ArgType::Bool,
            _ if void == 1 => ArgType::Void,
            _ => ArgType::Float,
        })),
        (0, 0, 1, 1) if double == 1 && int == 0 && !sign_given => Some(Base::Arg(ArgType::Float)),
        _ => None,
    }
}

fn span_of(tokens: &[Token]) -> Range<usize> {
    match (tokens.first(), tokens.last()) {
        (Some(first), Some(last)) => first.span.start..last.span.end.max(first.span.start),
        _ => 0..0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(decls: &str, params: &str) -> Vec<Result<ArgType, String>> {
        let file = ProviderFile::parse(
            "t.d",
            format!("{decls}\nprovider p {{ probe q({params}); }};"),
        )
        .unwrap();
        file.providers[0].probes[0]
            .params
            .iter()
            .map(|p| file.arg_type(p).map_err(|d| d.to_string()))
            .collect()
    }

    fn int(size: u8, signed: bool) -> Result<ArgType, String> {
        Ok(ArgType::Int { size, signed })
    }

    #[test]
    fn c_integer_spellings() {
        let got = types(
            "",
            "char, unsigned char, short int, unsigned, int x, long, unsigned long long int, \
             signed, long unsigned, _Bool, uint16_t, size_t, ssize_t, pid_t",
        );
        assert_eq!(
            got,
            [
                int(1, true),
                int(1, false),
                int(2, true),
                int(4, false),
                int(4, true),
                int(8, true),
                int(8, false),
                int(4, true),
                int(8, false),
                Ok(ArgType::Bool),
                int(2, false),
                Ok(ArgType::Size { signed: false }),
                Ok(ArgType::Size { signed: true }),
                int(4, true),
            ]
        );
    }

    #[test]
    fn strings_and_pointers() {
        let got = types(
            "typedef char mychar; typedef const char *cstr; struct s;",
            "const char *, char * const name, string, mychar *, cstr, unsigned char *, \
             char **, struct s *, void *, int buf[4], void (*)(int), enum e",
        );
        use ArgType::*;
        assert_eq!(
            got,
            [
                Ok(Str),
                Ok(Str),
                Ok(Str),
                Ok(Str),
                Ok(Str),
                Ok(Pointer),
                Ok(Pointer),
                Ok(Pointer),
                Ok(Pointer),
                Ok(Pointer),
                Ok(Pointer),
                int(4, true),
            ]
        );
    }

    #[test]
    fn typedefs_and_macros_of_the_file() {
        let got = types(
            "#define Oid unsigned int\n#define bool unsigned char\ntypedef Oid rel_t;\n\
             typedef rel_t *relp;",
            "Oid, bool, rel_t, relp",
        );
        assert_eq!(
            got,
            [
                int(4, false),
                int(1, false),
                int(4, false),
                Ok(ArgType::Pointer)
            ]
        );
    }

    #[test]
    fn values_that_are_not_integers() {
        use ArgType::*;
        let got = types("struct s;", "double, long double, float, struct s, void");
        assert_eq!(
            got,
            [Ok(Float), Ok(Float), Ok(Float), Ok(Aggregate), Ok(Void)]
        );
    }

    #[test]
    fn unknown_and_malformed_types_are_errors_at_their_place() {
        let got = types("", "int, Foo");
        let err = got[1].as_ref().unwrap_err();
        assert!(err.starts_with("t.d:2:27: unknown type `Foo`"), "{err}");
        let got = types("typedef a b; typedef b a;", "a");
        assert!(got[0].as_ref().unwrap_err().contains("refers to itself"));
        for bad in [
            "unsigned float",
            "short char",
            "int int",
            "long long long x y",
        ] {
            assert!(types("", bad)[0].is_err(), "{bad}");
        }
    }
}
