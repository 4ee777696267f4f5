//! Attach points: what `usdt:...`, `uprobe:...`, `tracepoint:...`,
//! `interval:...`, `BEGIN` and `END` mean, before anything is looked up.
//!
//! The lexer has already split an attach point at its colons (honouring
//! quotes); this module decides what each field is, substitutes
//! positional parameters, and refuses the probe types that belong to the
//! kernel (kprobes, kfuncs, profile) with a message that says so.

use crate::diag::{Diagnostic, Span};
use crate::hir::ProbeKind;
use crate::lexer::RawAttachPoint;

/// A parsed attach point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachSpec {
    Begin,
    End,
    Interval {
        period_ns: u64,
        /// The unit as written, which listings show.
        unit: TimeUnit,
    },
    Usdt {
        /// A path, a program or library name, a glob over a process's
        /// objects, or nothing (with `-p` or `-c`).
        path: Option<String>,
        /// Any provider when absent.
        provider: Option<String>,
        name: String,
    },
    Uprobe {
        path: Option<String>,
        target: FuncTarget,
        ret: bool,
    },
    Tracepoint {
        category: String,
        name: String,
    },
}

/// The unit of a period (`interval:ms:100`), as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    S,
    Ms,
    Us,
    Ns,
    /// Times a second.
    Hz,
}

impl TimeUnit {
    /// As a probe writes it.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::S => "s",
            TimeUnit::Ms => "ms",
            TimeUnit::Us => "us",
            TimeUnit::Ns => "ns",
            TimeUnit::Hz => "hz",
        }
    }

    fn named(text: &str) -> Option<TimeUnit> {
        [
            TimeUnit::S,
            TimeUnit::Ms,
            TimeUnit::Us,
            TimeUnit::Ns,
            TimeUnit::Hz,
        ]
        .into_iter()
        .find(|u| u.name() == text)
    }

    /// The period of `count` of this unit, in nanoseconds; `None` when it
    /// does not fit, or is less than one.
    pub fn period_ns(self, count: u64) -> Option<u64> {
        let ns = match self {
            TimeUnit::S => count.checked_mul(1_000_000_000)?,
            TimeUnit::Ms => count.checked_mul(1_000_000)?,
            TimeUnit::Us => count.checked_mul(1_000)?,
            TimeUnit::Ns => count,
            TimeUnit::Hz => 1_000_000_000u64.checked_div(count)?,
        };
        (ns > 0).then_some(ns)
    }
}

/// Where in a file a uprobe goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FuncTarget {
    /// A symbol, or a glob over symbols (mangled or demangled names).
    Symbol(String),
    /// A symbol plus a byte offset into it.
    Offset { symbol: String, offset: u64 },
    /// A virtual address in the file.
    Address(u64),
    /// The code of a line of a source file, through the file's DWARF
    /// (`uprobe:PATH@FILE:LINE[:COLUMN]`, as bpftrace 0.26 writes it).
    SourceLine {
        file: String,
        line: u64,
        column: Option<u64>,
    },
}

impl AttachSpec {
    /// The kind of probe, which decides what its block may use.
    pub fn kind(&self) -> ProbeKind {
        match self {
            AttachSpec::Begin => ProbeKind::Begin,
            AttachSpec::End => ProbeKind::End,
            AttachSpec::Interval { .. } => ProbeKind::Interval,
            AttachSpec::Usdt { .. } => ProbeKind::Usdt,
            AttachSpec::Uprobe { ret: false, .. } => ProbeKind::Uprobe,
            AttachSpec::Uprobe { ret: true, .. } => ProbeKind::Uretprobe,
            AttachSpec::Tracepoint { .. } => ProbeKind::Tracepoint,
        }
    }
}

/// Parses an attach point; `params` are the positional parameters
/// (`$1` is `params[0]`).
pub fn parse(raw: &RawAttachPoint, params: &[String]) -> Result<AttachSpec, Diagnostic> {
    let span = raw.span;
    let mut fields: Vec<String> = raw
        .fields
        .iter()
        .map(|f| substitute_params(f, params, span))
        .collect::<Result<_, _>>()?;
    // A positional parameter may be a whole attach point (`$1` given as
    // `interval:ms:100`): its colons then separate fields.
    if raw.fields.len() == 1 && raw.fields[0].contains('$') && fields[0].contains(':') {
        fields = fields[0].split(':').map(str::to_string).collect();
    }
    // Probe types are case-insensitive (bpftrace 0.24): `begin`, `BEGIN`,
    // `Usdt`. One-letter short forms keep their case, since `U` (usdt) and
    // `u` (uprobe) differ only by it.
    let lower = fields[0].to_ascii_lowercase();
    let kind = if fields[0].len() == 1 {
        fields[0].as_str()
    } else {
        lower.as_str()
    };
    let rest = &fields[1..];
    let wrong = |usage: &str| {
        Diagnostic::error(span, format!("`{}` is not a valid {kind} probe", raw.text))
            .hint(format!("write it as {usage}"))
    };
    let spec = match kind {
        "begin" | "end" if rest.is_empty() => {
            if kind == "begin" {
                AttachSpec::Begin
            } else {
                AttachSpec::End
            }
        }
        "begin" | "end" => return Err(wrong(&fields[0])),
        "interval" | "i" => parse_interval(rest).ok_or_else(|| {
            wrong("interval:s:N, interval:ms:N, interval:us:N, interval:hz:N or interval:100ms")
        })?,
        "usdt" | "U" => {
            let nonempty = |s: &String| (!s.is_empty()).then(|| s.clone());
            match rest {
                [name] if !name.is_empty() => AttachSpec::Usdt {
                    path: None,
                    provider: None,
                    name: name.clone(),
                },
                [path, name] if !name.is_empty() => AttachSpec::Usdt {
                    path: nonempty(path),
                    provider: None,
                    name: name.clone(),
                },
                [path, provider, name] if !name.is_empty() => AttachSpec::Usdt {
                    path: nonempty(path),
                    provider: nonempty(provider),
                    name: name.clone(),
                },
                _ => return Err(wrong("usdt:PATH:PROVIDER:NAME, usdt:PATH:NAME, or usdt::NAME with -p")),
            }
        }
        "uprobe" | "u" | "uretprobe" | "ur" => {
            let ret = kind.starts_with("ur");
            let usage = "uprobe:PATH:FUNCTION, uprobe:PATH:FUNCTION+OFFSET, uprobe:PATH:ADDRESS or uprobe:PATH@SOURCE.c:LINE";
            if let Some(target) = parse_source_line(rest) {
                if ret {
                    return Err(Diagnostic::error(span, "a uretprobe goes on a function, not a source line")
                        .hint("name the function: uretprobe:PATH:FUNCTION"));
                }
                let path = rest[0].rsplit_once('@').map(|(p, _)| p.to_string());
                return Ok(AttachSpec::Uprobe {
                    path: path.filter(|p| !p.is_empty()),
                    target: target.map_err(|why| Diagnostic::error(span, why).hint(format!("write it as {usage}")))?,
                    ret,
                });
            }
            let (path, function) = match rest {
                [function] => (None, function.clone()),
                [path, function] => (Some(path.clone()).filter(|p| !p.is_empty()), function.clone()),
                // `uprobe:PATH:cpp:NAME`: a language prefix, as in newer bpftrace.
                [path, lang, function] if lang == "cpp" || lang == "c" => {
                    (Some(path.clone()).filter(|p| !p.is_empty()), function.clone())
                }
                _ => return Err(wrong(usage)),
            };
            if function.is_empty() {
                return Err(wrong(usage));
            }
            let target = parse_function(&function).map_err(|why| {
                Diagnostic::error(span, format!("`{function}`: {why}")).hint(format!("write it as {usage}"))
            })?;
            if ret && !matches!(target, FuncTarget::Symbol(_)) {
                return Err(Diagnostic::error(span, "a uretprobe goes on a function, not an offset or address")
                    .hint("name the function: uretprobe:PATH:FUNCTION"));
            }
            AttachSpec::Uprobe { path, target, ret }
        }
        "tracepoint" | "t" => match rest {
            [category, name] if !category.is_empty() && !name.is_empty() => AttachSpec::Tracepoint {
                category: category.clone(),
                name: name.clone(),
            },
            _ => return Err(wrong("tracepoint:CATEGORY:NAME, for example tracepoint:syscalls:sys_enter_openat")),
        },
        "kprobe" | "k" | "kretprobe" | "kr" | "kfunc" | "f" | "kretfunc" | "fr" | "fentry" | "fexit" | "rawtracepoint" | "rt" => {
            return Err(Diagnostic::error(span, format!("`{kind}` probes trace the kernel, and sdt traces user space"))
                .hint("use usdt, uprobe or uretprobe for programs, or a tracepoint (tracepoint:syscalls:...) for what they ask of the kernel"))
        }
        "profile" | "p" | "software" | "s" | "hardware" | "h" | "watchpoint" | "w" | "asyncwatchpoint" | "aw" | "iter" | "it" => {
            return Err(Diagnostic::error(span, format!("`{kind}` probes are not supported by sdt"))
                .hint("sdt runs usdt, uprobe, uretprobe, tracepoint, interval, BEGIN and END probes"))
        }
        _ => {
            let known = [
                "usdt", "uprobe", "uretprobe", "tracepoint", "interval", "begin", "end",
            ];
            let mut d = Diagnostic::error(span, format!("unknown probe type `{kind}`"));
            if let Some(hint) = crate::diag::did_you_mean(&crate::diag::suggest(kind, known)) {
                d = d.hint(hint);
            } else {
                d = d.hint("probe types are usdt, uprobe, uretprobe, tracepoint, interval, begin and end");
            }
            return Err(d);
        }
    };
    Ok(spec)
}

fn parse_interval(rest: &[String]) -> Option<AttachSpec> {
    let (unit, count) = match rest {
        [unit, count] => (unit.as_str(), count.parse::<u64>().ok()?),
        [text] => {
            let digits = text.find(|c: char| !c.is_ascii_digit())?;
            (&text[digits..], text[..digits].parse().ok()?)
        }
        _ => return None,
    };
    if count == 0 {
        return None;
    }
    let unit = TimeUnit::named(unit)?;
    let period_ns = unit.period_ns(count)?;
    Some(AttachSpec::Interval { period_ns, unit })
}

/// `PATH@FILE:LINE` or `PATH@FILE:LINE:COLUMN`, split at the colons:
/// `None` when the fields are not that (a path may hold an `@`).
fn parse_source_line(rest: &[String]) -> Option<Result<FuncTarget, String>> {
    let (first, numbers) = rest.split_first()?;
    let (_, file) = first.rsplit_once('@')?;
    let digits = |t: &String| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    if numbers.is_empty() || numbers.len() > 2 || !numbers.iter().all(digits) {
        return None;
    }
    let number = |text: &String, what: &str| -> Result<u64, String> {
        match text.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("`{text}` is not a {what} number")),
        }
    };
    if file.is_empty() {
        return Some(Err("the source file after `@` is missing".into()));
    }
    Some((|| {
        Ok(FuncTarget::SourceLine {
            file: file.to_string(),
            line: number(&numbers[0], "line")?,
            column: numbers.get(1).map(|c| number(c, "column")).transpose()?,
        })
    })())
}

fn parse_function(text: &str) -> Result<FuncTarget, String> {
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16)
            .map(FuncTarget::Address)
            .map_err(|_| "not a valid hex address".to_string());
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        return text
            .parse()
            .map(FuncTarget::Address)
            .map_err(|_| "not a valid address".to_string());
    }
    // `name+offset`, but not a C++ `operator+`.
    if let Some((symbol, offset)) = text.rsplit_once('+') {
        if !symbol.is_empty() && !symbol.ends_with("operator") && !offset.is_empty() {
            let offset = crate::lexer::parse_int(offset)
                .map_err(|why| format!("the offset after `+` is not a number: {why}"))?;
            return Ok(FuncTarget::Offset {
                symbol: symbol.to_string(),
                offset,
            });
        }
    }
    Ok(FuncTarget::Symbol(text.to_string()))
}

/// Replaces `$N` in an attach point field with positional parameter N.
fn substitute_params(field: &str, params: &[String], span: Span) -> Result<String, Diagnostic> {
    if !field.contains('$') {
        return Ok(field.to_string());
    }
    let mut out = String::new();
    let mut chars = field.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some((_, d)) = chars.peek().filter(|(_, d)| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let n: usize = digits.parse().map_err(|_| {
            Diagnostic::error(
                span,
                "`$` in an attach point must be a positional parameter such as `$1`",
            )
        })?;
        let value = n
            .checked_sub(1)
            .and_then(|i| params.get(i))
            .ok_or_else(|| {
                Diagnostic::error(span, format!("the attach point uses ${n}, but the script was given {} positional parameter{}", params.len(), if params.len() == 1 { "" } else { "s" }))
                    .hint("pass it after the script: sdt run script.bt ARG...")
            })?;
        out.push_str(value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::Lexer;

    fn spec(text: &str, params: &[&str]) -> Result<AttachSpec, Diagnostic> {
        let raw = Lexer::new(text).attach_point().unwrap();
        let params: Vec<String> = params.iter().map(|s| s.to_string()).collect();
        parse(&raw, &params)
    }

    #[test]
    fn usdt_forms() {
        assert_eq!(
            spec("usdt:/bin/x:prov:name", &[]).unwrap(),
            AttachSpec::Usdt {
                path: Some("/bin/x".into()),
                provider: Some("prov".into()),
                name: "name".into()
            }
        );
        assert_eq!(
            spec("usdt:/bin/x:name", &[]).unwrap(),
            AttachSpec::Usdt {
                path: Some("/bin/x".into()),
                provider: None,
                name: "name".into()
            }
        );
        assert_eq!(
            spec("usdt::name", &[]).unwrap(),
            AttachSpec::Usdt {
                path: None,
                provider: None,
                name: "name".into()
            }
        );
        assert_eq!(
            spec("U:$1:p:n*", &["/opt/app"]).unwrap(),
            AttachSpec::Usdt {
                path: Some("/opt/app".into()),
                provider: Some("p".into()),
                name: "n*".into()
            }
        );
        assert!(spec("usdt:$2:p:n", &["x"])
            .unwrap_err()
            .message
            .contains("given 1 positional parameter"));
        assert!(spec("usdt:a:b:c:d", &[]).is_err());
    }

    #[test]
    fn a_parameter_may_be_the_whole_attach_point() {
        assert_eq!(
            spec("$1", &["i:ms:5"]).unwrap(),
            AttachSpec::Interval {
                period_ns: 5_000_000,
                unit: TimeUnit::Ms
            }
        );
        assert_eq!(
            spec("$2", &["x", "usdt:/bin/x:p:n"]).unwrap(),
            AttachSpec::Usdt {
                path: Some("/bin/x".into()),
                provider: Some("p".into()),
                name: "n".into()
            }
        );
    }

    #[test]
    fn uprobe_forms() {
        assert_eq!(
            spec("uprobe:/lib/libc.so.6:malloc", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("/lib/libc.so.6".into()),
                target: FuncTarget::Symbol("malloc".into()),
                ret: false
            }
        );
        assert_eq!(
            spec("u:libc:memcpy+4", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("libc".into()),
                target: FuncTarget::Offset {
                    symbol: "memcpy".into(),
                    offset: 4
                },
                ret: false
            }
        );
        assert_eq!(
            spec("uprobe:/bin/x:0x1234", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("/bin/x".into()),
                target: FuncTarget::Address(0x1234),
                ret: false
            }
        );
        assert_eq!(
            spec(r#"uretprobe:./prog:"ns::f(int)""#, &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("./prog".into()),
                target: FuncTarget::Symbol("ns::f(int)".into()),
                ret: true
            }
        );
        assert_eq!(
            spec("uprobe:./p:cpp:\"A::operator+\"", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("./p".into()),
                target: FuncTarget::Symbol("A::operator+".into()),
                ret: false
            }
        );
        assert!(spec("uretprobe:/bin/x:f+4", &[]).is_err());
    }

    #[test]
    fn source_line_forms() {
        assert_eq!(
            spec("uprobe:./prog@prog.c:42", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("./prog".into()),
                target: FuncTarget::SourceLine {
                    file: "prog.c".into(),
                    line: 42,
                    column: None
                },
                ret: false
            }
        );
        assert_eq!(
            spec("u:/lib/libx.so@src/x.c:7:3", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("/lib/libx.so".into()),
                target: FuncTarget::SourceLine {
                    file: "src/x.c".into(),
                    line: 7,
                    column: Some(3)
                },
                ret: false
            }
        );
        assert!(spec("uprobe:./prog@prog.c:0", &[]).is_err());
        assert!(spec("uprobe:./prog@:4", &[]).is_err());
        assert!(spec("uretprobe:./prog@prog.c:4", &[]).is_err());
        // A path with an `@` that names a function stays a function.
        assert_eq!(
            spec("uprobe:/home/a@b/prog:main", &[]).unwrap(),
            AttachSpec::Uprobe {
                path: Some("/home/a@b/prog".into()),
                target: FuncTarget::Symbol("main".into()),
                ret: false
            }
        );
    }

    #[test]
    fn other_kinds() {
        assert_eq!(spec("BEGIN", &[]).unwrap(), AttachSpec::Begin);
        assert_eq!(
            spec("interval:ms:250", &[]).unwrap(),
            AttachSpec::Interval {
                period_ns: 250_000_000,
                unit: TimeUnit::Ms
            }
        );
        assert_eq!(
            spec("i:s:1", &[]).unwrap(),
            AttachSpec::Interval {
                period_ns: 1_000_000_000,
                unit: TimeUnit::S
            }
        );
        assert_eq!(
            spec("interval:100ms", &[]).unwrap(),
            AttachSpec::Interval {
                period_ns: 100_000_000,
                unit: TimeUnit::Ms
            }
        );
        assert_eq!(
            spec("interval:hz:4", &[]).unwrap(),
            AttachSpec::Interval {
                period_ns: 250_000_000,
                unit: TimeUnit::Hz
            }
        );
        assert!(spec("interval:s:0", &[]).is_err());
        assert_eq!(
            spec("tracepoint:syscalls:sys_enter_*", &[]).unwrap(),
            AttachSpec::Tracepoint {
                category: "syscalls".into(),
                name: "sys_enter_*".into()
            }
        );
        let err = spec("kprobe:do_nanosleep", &[]).unwrap_err();
        assert!(err.message.contains("kernel"), "{}", err.message);
        let err = spec("usdtt:/bin/x:a:b", &[]).unwrap_err();
        assert!(err.hints.iter().any(|h| h.contains("usdt")), "{err:?}");
    }
}
