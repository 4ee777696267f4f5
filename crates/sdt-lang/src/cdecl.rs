//! C definitions in scripts: `struct`, `union`, `enum` and `typedef`.
//!
//! Scripts such as SPDK's copy struct definitions from C headers so that
//! `((struct foo *)arg0)->field` can be read. bpftrace hands them to
//! clang; sdt has no compiler to hand them to, so this module parses the
//! declaration subset of C that such definitions use (base and
//! fixed-width integer types, pointers, arrays, function pointers, nested
//! and anonymous records, bitfields, enums with constant expressions,
//! `__attribute__((packed))`) and lays the records out by the x86-64
//! System V rules, the way the compiler of the traced program did.

use crate::diag::{Diagnostic, Span};
use crate::types::{EnumDef, Field, Record, RecordId, Ty, TypeRegistry};

/// Parses `text` (one or more definitions) into `registry`. `span` is where
/// the text sits in the script, for errors.
pub fn define(registry: &mut TypeRegistry, text: &str, span: Span) -> Result<(), Diagnostic> {
    let tokens = tokenize(text).map_err(|(at, why)| error(span, text, at, why))?;
    let mut p = DeclParser {
        tokens,
        pos: 0,
        registry,
        anonymous: 0,
    };
    while !p.done() {
        p.definition()
            .map_err(|(at, why)| error(span, text, at, why))?;
    }
    Ok(())
}

/// Resolves a type name as written in a cast (`uint8`, `struct foo`,
/// `unsigned long`, `my_typedef_t`), without pointers.
pub fn base_type(registry: &TypeRegistry, name: &str) -> Option<Ty> {
    let words: Vec<&str> = name.split_whitespace().collect();
    match words.as_slice() {
        [kw @ ("struct" | "union" | "enum"), tag] => registry.tag(kw, tag).cloned(),
        _ => builtin_type(&words).or_else(|| match words.as_slice() {
            [one] => registry.typedef(one).cloned(),
            _ => None,
        }),
    }
}

fn error(span: Span, text: &str, at: usize, why: String) -> Diagnostic {
    let start = span.start as usize + at.min(text.len());
    Diagnostic::error(
        Span::new(start, start + 1),
        format!("in a C definition: {why}"),
    )
}

/// Integer types by their C and bpftrace names.
fn builtin_type(words: &[&str]) -> Option<Ty> {
    let int = |bytes, signed| Some(Ty::Int { bytes, signed });
    let mut signed = true;
    let mut explicit_sign = false;
    let mut rest: Vec<&str> = Vec::new();
    for w in words {
        match *w {
            "unsigned" => {
                signed = false;
                explicit_sign = true;
            }
            "signed" => explicit_sign = true,
            "const" | "volatile" | "restrict" | "__restrict" => {}
            other => rest.push(other),
        }
    }
    match rest.as_slice() {
        [] if explicit_sign => int(4, signed),
        ["char"] => int(1, signed),
        ["short"] | ["short", "int"] => int(2, signed),
        ["int"] => int(4, signed),
        ["long"] | ["long", "int"] | ["long", "long"] | ["long", "long", "int"] => int(8, signed),
        _ if explicit_sign => None,
        ["_Bool"] | ["bool"] => Some(Ty::Bool),
        ["float"] => int(4, true),
        ["double"] => int(8, true),
        ["long", "double"] | ["__int128"] | ["__int128_t"] => int(16, true),
        ["unsigned __int128"] | ["__uint128_t"] => int(16, false),
        ["void"] => Some(Ty::Void),
        [one] => match *one {
            "int8" | "int8_t" | "s8" | "__s8" => int(1, true),
            "int16" | "int16_t" | "s16" | "__s16" => int(2, true),
            "int32" | "int32_t" | "s32" | "__s32" | "pid_t" => int(4, true),
            "int64" | "int64_t" | "s64" | "__s64" | "ssize_t" | "off_t" | "intptr_t"
            | "ptrdiff_t" | "loff_t" | "time_t" => int(8, true),
            "uint8" | "uint8_t" | "u8" | "__u8" => int(1, false),
            "uint16" | "uint16_t" | "u16" | "__u16" => int(2, false),
            "uint32" | "uint32_t" | "u32" | "__u32" | "uid_t" | "gid_t" => int(4, false),
            "uint64" | "uint64_t" | "u64" | "__u64" | "size_t" | "uintptr_t" => int(8, false),
            _ => None,
        },
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq)]
enum CTok {
    Ident(String),
    Int(i128),
    Punct(char),
}

/// Tokens with their byte offsets in the definition text.
fn tokenize(text: &str) -> Result<Vec<(usize, CTok)>, (usize, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if text[i..].starts_with("//") {
            i += text[i..].find('\n').unwrap_or(text.len() - i);
        } else if text[i..].starts_with("/*") {
            i += text[i..]
                .find("*/")
                .map(|e| e + 2)
                .unwrap_or(text.len() - i);
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let len = text[i..]
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(text.len() - i);
            out.push((i, CTok::Ident(text[i..i + len].to_string())));
            i += len;
        } else if c.is_ascii_digit() {
            let len = text[i..]
                .find(|ch: char| !(ch.is_ascii_alphanumeric()))
                .unwrap_or(text.len() - i);
            let value = crate::lexer::parse_int(&text[i..i + len])
                .map_err(|why| (i, format!("bad number `{}`: {why}", &text[i..i + len])))?;
            out.push((i, CTok::Int(i128::from(value))));
            i += len;
        } else if b"{}[]();,*:=+-<>|&~()".contains(&c) {
            out.push((i, CTok::Punct(c as char)));
            i += 1;
        } else {
            return Err((i, format!("unexpected character `{}`", c as char)));
        }
    }
    Ok(out)
}

type PResult<T> = Result<T, (usize, String)>;

struct DeclParser<'r> {
    tokens: Vec<(usize, CTok)>,
    pos: usize,
    registry: &'r mut TypeRegistry,
    anonymous: u32,
}

/// A declarator's effect on a base type, outermost last.
#[derive(Debug)]
enum Derivation {
    Pointer,
    Array(u64),
    Function,
}

impl DeclParser<'_> {
    fn done(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    fn at_offset(&self) -> usize {
        self.tokens
            .get(self.pos)
            .or(self.tokens.last())
            .map_or(0, |t| t.0)
    }

    fn peek(&self) -> Option<&CTok> {
        self.tokens.get(self.pos).map(|t| &t.1)
    }

    fn fail<T>(&self, why: impl Into<String>) -> PResult<T> {
        Err((self.at_offset(), why.into()))
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&CTok::Punct(c))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let found = self.is_punct(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect_punct(&mut self, c: char) -> PResult<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.fail(format!("expected `{c}`"))
        }
    }

    fn ident(&mut self) -> Option<String> {
        match self.peek() {
            Some(CTok::Ident(name)) => {
                let name = name.clone();
                self.pos += 1;
                Some(name)
            }
            _ => None,
        }
    }

    fn at_ident(&self, word: &str) -> bool {
        matches!(self.peek(), Some(CTok::Ident(w)) if w == word)
    }

    /// Skips `__attribute__((...))`, noting `packed`.
    fn attributes(&mut self) -> PResult<bool> {
        let mut packed = false;
        while self.at_ident("__attribute__") || self.at_ident("__attribute") {
            self.pos += 1;
            let start = self.pos;
            self.expect_punct('(')?;
            let mut depth = 1;
            while depth > 0 {
                match self.peek() {
                    None => {
                        self.pos = start;
                        return self.fail("unterminated __attribute__");
                    }
                    Some(CTok::Punct('(')) => depth += 1,
                    Some(CTok::Punct(')')) => depth -= 1,
                    Some(CTok::Ident(w)) if w == "packed" || w == "__packed__" => packed = true,
                    _ => {}
                }
                self.pos += 1;
            }
        }
        Ok(packed)
    }

    fn definition(&mut self) -> PResult<()> {
        if self.eat_punct(';') {
            return Ok(());
        }
        let is_typedef = self.at_ident("typedef");
        if is_typedef {
            self.pos += 1;
        }
        let base = self.specifiers()?;
        if !is_typedef {
            // `struct x {...};` or `enum e {...};`, maybe with a variable
            // name that the script has no use for.
            while !self.eat_punct(';') {
                // bpftrace accepts a definition without its final `;`.
                if self.done() {
                    return Ok(());
                }
                let before = self.pos;
                self.declarator(base.clone())?;
                if self.pos == before {
                    return self.fail("expected `;` at the end of the definition");
                }
                self.eat_punct(',');
            }
            return Ok(());
        }
        loop {
            let (name, ty) = self.declarator(base.clone())?;
            let Some(name) = name else {
                return self.fail("a typedef needs a name");
            };
            self.registry.set_typedef(&name, ty);
            if self.eat_punct(';') {
                return Ok(());
            }
            self.expect_punct(',')?;
        }
    }

    /// Type specifiers and qualifiers: the base type of a declaration.
    fn specifiers(&mut self) -> PResult<Ty> {
        self.attributes()?;
        let mut words: Vec<String> = Vec::new();
        loop {
            if self.at_ident("struct") || self.at_ident("union") {
                return self.record_specifier();
            }
            if self.at_ident("enum") {
                return self.enum_specifier();
            }
            let Some(CTok::Ident(w)) = self.peek() else {
                break;
            };
            let w = w.clone();
            let is_word = matches!(
                w.as_str(),
                "unsigned"
                    | "signed"
                    | "char"
                    | "short"
                    | "int"
                    | "long"
                    | "_Bool"
                    | "bool"
                    | "float"
                    | "double"
                    | "void"
                    | "const"
                    | "volatile"
                    | "static"
                    | "extern"
                    | "register"
                    | "inline"
                    | "__extension__"
            );
            if is_word {
                self.pos += 1;
                if !matches!(
                    w.as_str(),
                    "const"
                        | "volatile"
                        | "static"
                        | "extern"
                        | "register"
                        | "inline"
                        | "__extension__"
                ) {
                    words.push(w);
                }
                continue;
            }
            if words.is_empty() {
                // A typedef name or a fixed-width integer name.
                self.pos += 1;
                let ty = builtin_type(&[w.as_str()]).or_else(|| self.registry.typedef(&w).cloned());
                return match ty {
                    Some(ty) => {
                        self.qualifiers();
                        Ok(ty)
                    }
                    None => {
                        self.pos -= 1;
                        self.fail(format!("unknown type `{w}`"))
                    }
                };
            }
            break;
        }
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        match builtin_type(&refs) {
            Some(ty) => Ok(ty),
            None if refs.is_empty() => self.fail("expected a type"),
            None => self.fail(format!("unknown type `{}`", refs.join(" "))),
        }
    }

    fn qualifiers(&mut self) {
        while self.at_ident("const") || self.at_ident("volatile") || self.at_ident("restrict") {
            self.pos += 1;
        }
    }

    fn record_specifier(&mut self) -> PResult<Ty> {
        let keyword = self.ident().unwrap_or_default();
        let is_union = keyword == "union";
        let mut packed = self.attributes()?;
        let tag = self.ident();
        packed |= self.attributes()?;
        if !self.is_punct('{') {
            let Some(tag) = tag else {
                return self.fail(format!("expected a name or `{{` after `{keyword}`"));
            };
            if let Some(ty) = self.registry.tag(&keyword, &tag) {
                return Ok(ty.clone());
            }
            // A forward declaration; a later definition completes it.
            let id = self.registry.add_record(Record {
                name: tag.clone(),
                is_union,
                size: 0,
                align: 1,
                fields: Vec::new(),
                incomplete: true,
            });
            self.registry.set_tag(&keyword, &tag, Ty::Record(id));
            return Ok(Ty::Record(id));
        }
        self.pos += 1; // {
        let id = match tag.as_ref().and_then(|t| self.registry.tag(&keyword, t)) {
            Some(Ty::Record(id)) if self.registry.record(*id).incomplete => *id,
            _ => {
                let name = tag.clone().unwrap_or_else(|| {
                    self.anonymous += 1;
                    format!("(anonymous {keyword} {})", self.anonymous)
                });
                self.registry.add_record(Record {
                    name,
                    is_union,
                    size: 0,
                    align: 1,
                    fields: Vec::new(),
                    incomplete: true,
                })
            }
        };
        if let Some(tag) = &tag {
            self.registry.set_tag(&keyword, tag, Ty::Record(id));
        }
        let mut members: Vec<(String, Ty, Option<u8>)> = Vec::new();
        while !self.eat_punct('}') {
            if self.done() {
                return self.fail(format!("`{keyword}` never closes with `}}`"));
            }
            if self.eat_punct(';') {
                continue;
            }
            let base = self.specifiers()?;
            if self.eat_punct(';') || self.is_punct('}') {
                // An anonymous struct or union member.
                if matches!(base, Ty::Record(_)) {
                    members.push((String::new(), base, None));
                }
                continue;
            }
            loop {
                let (name, ty) = if self.is_punct(':') {
                    (None, base.clone())
                } else {
                    self.declarator(base.clone())?
                };
                let bits = if self.eat_punct(':') {
                    let width = self.const_expr()?;
                    Some(u8::try_from(width).map_err(|_| {
                        (
                            self.at_offset(),
                            format!("bitfield width {width} is too large"),
                        )
                    })?)
                } else {
                    None
                };
                members.push((name.unwrap_or_default(), ty, bits));
                if self.eat_punct(';') {
                    break;
                }
                // As bpftrace does, the last member may leave out its `;`.
                if self.is_punct('}') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.fail("expected `;` after the field");
                }
            }
        }
        packed |= self.attributes()?;
        let record = self.layout(id, is_union, packed, members)?;
        *self.registry.record_mut(id) = record;
        Ok(Ty::Record(id))
    }

    fn layout(
        &self,
        id: RecordId,
        is_union: bool,
        packed: bool,
        members: Vec<(String, Ty, Option<u8>)>,
    ) -> PResult<Record> {
        let registry = &*self.registry;
        let mut fields = Vec::new();
        let mut bit_pos: u64 = 0;
        let mut size: u64 = 0;
        let mut align: u64 = 1;
        for (name, ty, bits) in members {
            if let Ty::Record(inner) = ty {
                if registry.record(inner).incomplete {
                    return self.fail(format!(
                        "field `{name}` has the incomplete type `{}`",
                        registry.record(inner).name
                    ));
                }
            }
            let field_size = registry.c_size(&ty);
            let field_align = if packed { 1 } else { registry.c_align(&ty) };
            if is_union {
                bit_pos = 0;
            }
            match bits {
                Some(width) => {
                    let unit = field_size.max(1) * 8;
                    if u64::from(width) > unit {
                        return self.fail(format!("bitfield `{name}` is wider than its type"));
                    }
                    if width == 0 {
                        bit_pos = bit_pos.next_multiple_of(field_align * 8);
                        continue;
                    }
                    let unit_align = if packed { 8 } else { field_align * 8 };
                    if !packed
                        && bit_pos / unit_align != (bit_pos + u64::from(width) - 1) / unit_align
                    {
                        bit_pos = bit_pos.next_multiple_of(unit_align);
                    }
                    // The storage unit: `field_size` bytes at an offset
                    // aligned for the type, holding the bits.
                    let unit_start = if packed {
                        bit_pos / 8
                    } else {
                        (bit_pos / unit_align) * (unit_align / 8)
                    };
                    let bit_offset = bit_pos - unit_start * 8;
                    if !name.is_empty() {
                        fields.push(Field {
                            name,
                            ty,
                            offset: unit_start,
                            bitfield: Some((bit_offset as u8, width)),
                        });
                    }
                    bit_pos += u64::from(width);
                    if !packed {
                        align = align.max(field_align);
                    }
                }
                None => {
                    bit_pos = bit_pos.next_multiple_of(field_align * 8);
                    fields.push(Field {
                        name,
                        ty,
                        offset: bit_pos / 8,
                        bitfield: None,
                    });
                    bit_pos += field_size * 8;
                    align = align.max(field_align);
                }
            }
            size = size.max(bit_pos.div_ceil(8));
        }
        let name = registry.record(id).name.clone();
        Ok(Record {
            name,
            is_union,
            size: size.next_multiple_of(align),
            align,
            fields,
            incomplete: false,
        })
    }

    fn enum_specifier(&mut self) -> PResult<Ty> {
        self.pos += 1; // enum
        self.attributes()?;
        let tag = self.ident();
        // C23 and C++ `enum name : type`.
        let mut underlying = None;
        if self.eat_punct(':') {
            underlying = Some(self.specifiers()?);
        }
        if !self.eat_punct('{') {
            let Some(tag) = tag else {
                return self.fail("expected a name or `{` after `enum`");
            };
            return match self.registry.tag("enum", &tag) {
                Some(ty) => Ok(ty.clone()),
                None => self.fail(format!("`enum {tag}` is not defined")),
            };
        }
        let mut values = Vec::new();
        let mut next = 0i128;
        while !self.eat_punct('}') {
            let Some(name) = self.ident() else {
                return self.fail("expected an enumerator name");
            };
            if self.eat_punct('=') {
                next = self.const_expr_with(&values)?;
            }
            let value = i64::try_from(next)
                .or_else(|_| u64::try_from(next).map(|v| v as i64))
                .map_err(|_| (self.at_offset(), format!("`{name}` is out of range")))?;
            values.push((name, value));
            next += 1;
            if !self.eat_punct(',') {
                self.expect_punct('}')?;
                break;
            }
        }
        let min = values.iter().map(|v| v.1).min().unwrap_or(0);
        let max = values.iter().map(|v| v.1).max().unwrap_or(0);
        let (bytes, signed) = match underlying {
            Some(Ty::Int { bytes, signed }) => (bytes, signed),
            _ if min < 0 => (
                if min >= i64::from(i32::MIN) && max <= i64::from(i32::MAX) {
                    4
                } else {
                    8
                },
                true,
            ),
            _ => (if max <= i64::from(u32::MAX) { 4 } else { 8 }, false),
        };
        let name = tag.clone().unwrap_or_else(|| "(anonymous)".into());
        let id = self.registry.add_enum(EnumDef {
            name,
            bytes,
            signed,
            values,
        });
        let ty = Ty::Enum { id, bytes, signed };
        if let Some(tag) = tag {
            self.registry.set_tag("enum", &tag, ty.clone());
        }
        Ok(ty)
    }

    /// A declarator: pointers, a name (or a parenthesised declarator),
    /// array dimensions and function parameters.
    fn declarator(&mut self, base: Ty) -> PResult<(Option<String>, Ty)> {
        let (name, derivations) = self.derivations()?;
        let mut ty = base;
        for d in derivations.into_iter().rev() {
            ty = match d {
                Derivation::Pointer => Ty::ptr(ty),
                Derivation::Array(len) => Ty::Array {
                    elem: Box::new(ty),
                    len,
                },
                Derivation::Function => Ty::Void,
            };
        }
        self.attributes()?;
        Ok((name, ty))
    }

    /// The declarator's derivations, innermost first (so that applying
    /// them in reverse to the base type builds the type).
    fn derivations(&mut self) -> PResult<(Option<String>, Vec<Derivation>)> {
        let mut pointers = 0;
        while self.eat_punct('*') {
            pointers += 1;
            self.qualifiers();
        }
        self.attributes()?;
        let (name, mut inner) = if self.is_punct('(') {
            self.pos += 1;
            let nested = self.derivations()?;
            self.expect_punct(')')?;
            nested
        } else {
            (self.ident(), Vec::new())
        };
        let mut suffixes = Vec::new();
        loop {
            if self.eat_punct('[') {
                let len = if self.is_punct(']') {
                    0
                } else {
                    u64::try_from(self.const_expr()?)
                        .map_err(|_| (self.at_offset(), "negative array length".to_string()))?
                };
                self.expect_punct(']')?;
                suffixes.push(Derivation::Array(len));
            } else if self.is_punct('(') {
                self.skip_parens()?;
                suffixes.push(Derivation::Function);
            } else {
                break;
            }
        }
        // `inner` binds tightest, then the suffixes (outer dimension first
        // applies last), then the pointers.
        let mut all = std::mem::take(&mut inner);
        all.extend(suffixes);
        all.extend((0..pointers).map(|_| Derivation::Pointer));
        Ok((name, all))
    }

    fn skip_parens(&mut self) -> PResult<()> {
        let start = self.pos;
        let mut depth = 0;
        loop {
            match self.peek() {
                None => {
                    self.pos = start;
                    return self.fail("unbalanced parentheses");
                }
                Some(CTok::Punct('(')) => depth += 1,
                Some(CTok::Punct(')')) => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos += 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    fn const_expr(&mut self) -> PResult<i128> {
        self.const_expr_with(&[])
    }

    /// A constant expression: integers, enumerators, `+ - * << >> | & ~`
    /// and parentheses, evaluated left to right with C's precedence for
    /// the shifts and bit operators.
    fn const_expr_with(&mut self, local: &[(String, i64)]) -> PResult<i128> {
        self.const_binary(local, 0)
    }

    fn const_binary(&mut self, local: &[(String, i64)], min: u8) -> PResult<i128> {
        let mut lhs = self.const_unary(local)?;
        loop {
            let (prec, op) = match self.peek() {
                Some(CTok::Punct('|')) => (1, '|'),
                Some(CTok::Punct('&')) => (2, '&'),
                Some(CTok::Punct('<')) | Some(CTok::Punct('>')) => (3, 's'),
                Some(CTok::Punct('+')) => (4, '+'),
                Some(CTok::Punct('-')) => (4, '-'),
                Some(CTok::Punct('*')) => (5, '*'),
                _ => return Ok(lhs),
            };
            if prec < min {
                return Ok(lhs);
            }
            let op = if op == 's' {
                let left = self.is_punct('<');
                self.pos += 1;
                if !(self.eat_punct('<') || self.eat_punct('>')) {
                    return self.fail("expected `<<` or `>>`");
                }
                if left {
                    'l'
                } else {
                    'r'
                }
            } else {
                self.pos += 1;
                op
            };
            let rhs = self.const_binary(local, prec + 1)?;
            lhs = match op {
                '|' => lhs | rhs,
                '&' => lhs & rhs,
                'l' => lhs
                    .checked_shl(u32::try_from(rhs).unwrap_or(200))
                    .unwrap_or(0),
                'r' => lhs
                    .checked_shr(u32::try_from(rhs).unwrap_or(200))
                    .unwrap_or(0),
                '+' => lhs.saturating_add(rhs),
                '-' => lhs.saturating_sub(rhs),
                _ => lhs.saturating_mul(rhs),
            };
        }
    }

    fn const_unary(&mut self, local: &[(String, i64)]) -> PResult<i128> {
        if self.eat_punct('-') {
            return Ok(-self.const_unary(local)?);
        }
        if self.eat_punct('~') {
            return Ok(!self.const_unary(local)?);
        }
        if self.eat_punct('(') {
            let value = self.const_binary(local, 0)?;
            self.expect_punct(')')?;
            return Ok(value);
        }
        match self.peek().cloned() {
            Some(CTok::Int(n)) => {
                self.pos += 1;
                Ok(n)
            }
            Some(CTok::Ident(name)) => {
                self.pos += 1;
                if let Some((_, v)) = local.iter().find(|(n, _)| *n == name) {
                    return Ok(i128::from(*v));
                }
                match self.registry.enumerator(&name) {
                    Some((_, v)) => Ok(i128::from(v)),
                    None => {
                        self.pos -= 1;
                        self.fail(format!("`{name}` is not a constant"))
                    }
                }
            }
            _ => self.fail("expected a constant"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{INT64, UINT64};

    fn registry(text: &str) -> TypeRegistry {
        let mut reg = TypeRegistry::default();
        define(&mut reg, text, Span::default()).unwrap();
        reg
    }

    fn record<'r>(reg: &'r TypeRegistry, tag: &str) -> &'r Record {
        let (kw, name) = tag.split_once(' ').unwrap();
        match reg.tag(kw, name) {
            Some(Ty::Record(id)) => reg.record(*id),
            other => panic!("{tag}: {other:?}"),
        }
    }

    fn offsets(reg: &TypeRegistry, tag: &str) -> Vec<(String, u64)> {
        record(reg, tag)
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.offset))
            .collect()
    }

    #[test]
    fn lays_out_like_the_system_v_abi() {
        let reg = registry("struct s { char c; int i; char d; long l; short sh[3]; char *p; };");
        let s = record(&reg, "struct s");
        assert_eq!(s.size, 40);
        assert_eq!(s.align, 8);
        let got: Vec<u64> = s.fields.iter().map(|f| f.offset).collect();
        assert_eq!(got, [0, 4, 8, 16, 24, 32]);
        assert_eq!(
            s.fields[4].ty,
            Ty::Array {
                elem: Box::new(Ty::int(2, true)),
                len: 3
            }
        );
        assert_eq!(s.fields[5].ty, Ty::ptr(Ty::int(1, true)));
    }

    #[test]
    fn nested_unions_bitfields_and_packing() {
        let reg = registry(
            "struct inner { unsigned short a; unsigned char b; };\n\
             struct outer {\n\
               struct inner in;\n\
               union { uint64_t u; int32_t i[2]; } v;\n\
               unsigned int flag : 1, mode : 3;\n\
               unsigned int big : 30;\n\
               struct { int x; };\n\
               void (*callback)(void *, int);\n\
               struct outer *next;\n\
             };\n\
             struct __attribute__((packed)) pk { char c; uint32_t u; };",
        );
        assert_eq!(record(&reg, "struct inner").size, 4);
        let outer = record(&reg, "struct outer");
        type Placed<'a> = (&'a str, u64, Option<(u8, u8)>);
        let fields: Vec<Placed> = outer
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.offset, f.bitfield))
            .collect();
        assert_eq!(
            fields,
            [
                ("in", 0, None),
                ("v", 8, None),
                ("flag", 16, Some((0, 1))),
                ("mode", 16, Some((1, 3))),
                ("big", 20, Some((0, 30))),
                ("", 24, None),
                ("callback", 32, None),
                ("next", 40, None),
            ]
        );
        assert_eq!(outer.size, 48);
        let Ty::Record(id) = reg.tag("struct", "outer").unwrap().clone() else {
            unreachable!()
        };
        assert_eq!(reg.field(id, "x").unwrap().offset, 24);
        assert_eq!(reg.field(id, "next").unwrap().ty, Ty::ptr(Ty::Record(id)));
        assert_eq!(
            offsets(&reg, "struct pk"),
            [("c".into(), 0), ("u".into(), 1)]
        );
        assert_eq!(record(&reg, "struct pk").size, 5);
    }

    #[test]
    fn enums_and_typedefs() {
        let reg = registry(
            "enum state { IDLE, ACTIVE = 5, PAUSED, LAST = (1 << 4) | ACTIVE };\n\
             typedef enum state state_t;\n\
             typedef struct node { struct node *next; uint64_t v; } node_t, *node_p;\n\
             typedef unsigned long long u64_t;\n\
             enum neg { N = -1 };",
        );
        let Some(Ty::Enum {
            id,
            bytes: 4,
            signed: false,
        }) = reg.tag("enum", "state").cloned()
        else {
            panic!("{:?}", reg.tag("enum", "state"))
        };
        let def = reg.enum_def(id);
        assert_eq!(
            def.values,
            [
                ("IDLE".into(), 0),
                ("ACTIVE".into(), 5),
                ("PAUSED".into(), 6),
                ("LAST".into(), 21)
            ]
        );
        assert_eq!(def.name_of(6), Some("PAUSED"));
        assert!(matches!(reg.typedef("state_t"), Some(Ty::Enum { .. })));
        assert!(matches!(reg.typedef("node_t"), Some(Ty::Record(_))));
        assert!(matches!(reg.typedef("node_p"), Some(Ty::Ptr(..))));
        assert_eq!(reg.typedef("u64_t"), Some(&UINT64));
        assert!(matches!(
            reg.tag("enum", "neg"),
            Some(Ty::Enum { signed: true, .. })
        ));
        assert_eq!(base_type(&reg, "unsigned long"), Some(UINT64));
        assert_eq!(base_type(&reg, "int64"), Some(INT64));
        assert_eq!(base_type(&reg, "node_t"), reg.typedef("node_t").cloned());
        assert_eq!(base_type(&reg, "struct missing"), None);
    }

    #[test]
    fn arrays_of_arrays_and_pointers_to_arrays() {
        let reg = registry("struct m { int grid[2][3]; char (*rows)[8]; char *names[4]; };");
        let m = record(&reg, "struct m");
        assert_eq!(
            m.fields[0].ty,
            Ty::Array {
                elem: Box::new(Ty::Array {
                    elem: Box::new(Ty::int(4, true)),
                    len: 3
                }),
                len: 2
            }
        );
        assert!(
            matches!(m.fields[1].ty, Ty::Ptr(ref inner, _) if matches!(**inner, Ty::Array { len: 8, .. }))
        );
        assert!(
            matches!(m.fields[2].ty, Ty::Array { len: 4, ref elem } if matches!(**elem, Ty::Ptr(..)))
        );
        assert_eq!(m.size, 24 + 8 + 32);
    }

    #[test]
    fn the_last_member_may_leave_out_its_semicolon() {
        let reg = registry(
            "struct holder { struct { int m[1] } y; struct { int n } a; const char *s; \
             uint8_t c[4]; uint64_t f[2] };",
        );
        let holder = record(&reg, "struct holder");
        assert_eq!(
            offsets(&reg, "struct holder"),
            [
                ("y".into(), 0),
                ("a".into(), 4),
                ("s".into(), 8),
                ("c".into(), 16),
                ("f".into(), 24)
            ]
        );
        assert_eq!(holder.size, 40);
        assert_eq!(
            holder.fields[4].ty,
            Ty::Array {
                elem: Box::new(UINT64),
                len: 2
            }
        );
        let Ty::Record(y) = holder.fields[0].ty else {
            panic!("{:?}", holder.fields[0].ty)
        };
        assert_eq!(reg.record(y).size, 4);
    }

    #[test]
    fn errors_name_the_problem() {
        for (text, want) in [
            ("struct s { mystery_t x; };", "unknown type `mystery_t`"),
            ("struct s { int x y; }", "expected `;`"),
            ("struct s { struct t inner; };", "incomplete type"),
            ("struct s { int x : 40; };", "wider than its type"),
            ("enum e { A = B };", "`B` is not a constant"),
            ("struct s { int a; ", "never closes"),
            ("typedef int;", "needs a name"),
            ("struct p<<=q { int x;; }", "expected `;`"),
        ] {
            let mut reg = TypeRegistry::default();
            let err = define(&mut reg, text, Span::default()).unwrap_err();
            assert!(err.message.contains(want), "{text}: {}", err.message);
        }
    }
}
