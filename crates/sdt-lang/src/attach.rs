//! Attach points: what `usdt:...`, `uprobe:...`, `tracepoint:...`,
//! `interval:...`, `profile:...`, `software:...`, `hardware:...`,
//! `BEGIN` and `END` mean, before anything is looked up.
//!
//! The lexer has already split an attach point at its colons (honouring
//! quotes); this module decides what each field is, substitutes
//! positional parameters, and refuses the probe types that attach to
//! kernel code (kprobes, kfuncs, watchpoints) with a message that says
//! so.

use crate::diag::{Diagnostic, Span};
use crate::hir::ProbeKind;
use crate::lexer::RawAttachPoint;
use crate::perf::{CounterEvent, CounterKind};

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
    /// `profile:hz:99`, `profile:ms:10`: the CPU clock sampled on every
    /// CPU, `count` times a second (`Hz`) or every `count` units.
    Profile {
        unit: TimeUnit,
        count: u64,
    },
    /// `software:EVENT[:COUNT]`, `hardware:EVENT[:COUNT]`: every `count`
    /// occurrences of a perf event, on every CPU.
    Counter {
        event: &'static CounterEvent,
        /// The name as written (an alias stays an alias), for `probe`.
        written: String,
        /// As written; the event's default when absent.
        count: Option<u64>,
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
            AttachSpec::Profile { .. } => ProbeKind::Profile,
            AttachSpec::Counter { event, .. } => match event.kind {
                CounterKind::Software => ProbeKind::Software,
                CounterKind::Hardware => ProbeKind::Hardware,
            },
        }
    }

    /// The name the `probe` builtin gives a probe of this kind that
    /// stands for itself alone (not a USDT probe, uprobe or tracepoint,
    /// whose names come from what they resolved to), as bpftrace writes
    /// it: `profile:hz:99`, `software:cs`, `software:faults:10`.
    pub fn own_name(&self) -> Option<String> {
        Some(match self {
            AttachSpec::Begin => "BEGIN".to_string(),
            AttachSpec::End => "END".to_string(),
            AttachSpec::Interval { period_ns, .. } => interval_name(*period_ns),
            AttachSpec::Profile { unit, count } => format!("profile:{}:{count}", unit.name()),
            AttachSpec::Counter {
                event,
                written,
                count,
            } => match count {
                Some(n) => format!("{}:{written}:{n}", event.kind.name()),
                None => format!("{}:{written}", event.kind.name()),
            },
            _ => return None,
        })
    }
}

/// `interval:s:1`, `interval:ms:250`, as bpftrace names them.
fn interval_name(ns: u64) -> String {
    if ns % 1_000_000_000 == 0 {
        format!("interval:s:{}", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("interval:ms:{}", ns / 1_000_000)
    } else if ns % 1_000 == 0 {
        format!("interval:us:{}", ns / 1_000)
    } else {
        format!("interval:ns:{ns}")
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
        "profile" | "p" => parse_profile(rest).map_err(|why| {
            Diagnostic::error(span, why)
                .hint("write it as profile:hz:N, profile:s:N, profile:ms:N or profile:us:N")
        })?,
        "software" | "s" => parse_counter(CounterKind::Software, rest, span)?,
        "hardware" | "h" => parse_counter(CounterKind::Hardware, rest, span)?,
        "kprobe" | "k" | "kretprobe" | "kr" | "kfunc" | "f" | "kretfunc" | "fr" | "fentry" | "fexit" | "rawtracepoint" | "rt" => {
            return Err(Diagnostic::error(span, format!("`{kind}` probes trace the kernel, and sdt traces user space"))
                .hint("use usdt, uprobe or uretprobe for programs, a tracepoint (tracepoint:syscalls:...) for what they ask of the kernel, or profile:hz:99 to sample them"))
        }
        "watchpoint" | "w" | "asyncwatchpoint" | "aw" | "iter" | "it" => {
            return Err(Diagnostic::error(span, format!("`{kind}` probes are not supported by sdt"))
                .hint("sdt runs usdt, uprobe, uretprobe, tracepoint, profile, software, hardware, interval, BEGIN and END probes"))
        }
        _ => {
            let known = [
                "usdt", "uprobe", "uretprobe", "tracepoint", "interval", "profile", "software",
                "hardware", "begin", "end",
            ];
            let mut d = Diagnostic::error(span, format!("unknown probe type `{kind}`"));
            if let Some(hint) = crate::diag::did_you_mean(&crate::diag::suggest(kind, known)) {
                d = d.hint(hint);
            } else {
                d = d.hint("probe types are usdt, uprobe, uretprobe, tracepoint, profile, software, hardware, interval, begin and end");
            }
            return Err(d);
        }
    };
    Ok(spec)
}

fn parse_interval(rest: &[String]) -> Option<AttachSpec> {
    let (unit, count) = rate(rest)?;
    let period_ns = unit.period_ns(count)?;
    Some(AttachSpec::Interval { period_ns, unit })
}

/// `UNIT:N`, or `Nunit` in one field (`100ms`); `None` for a count of 0.
fn rate(rest: &[String]) -> Option<(TimeUnit, u64)> {
    let (unit, count) = match rest {
        [unit, count] => (unit.as_str(), crate::lexer::parse_int(count).ok()?),
        [text] => {
            let digits = text.find(|c: char| !c.is_ascii_digit())?;
            (&text[digits..], text[..digits].parse().ok()?)
        }
        _ => return None,
    };
    (count > 0).then_some(())?;
    Some((TimeUnit::named(unit)?, count))
}

/// `profile:hz:N`, `profile:s:N`, `profile:ms:N`, `profile:us:N`.
fn parse_profile(rest: &[String]) -> Result<AttachSpec, String> {
    let Some((unit, count)) = rate(rest) else {
        return Err(match rest {
            [unit, _] if TimeUnit::named(unit).is_none() => {
                format!("{unit} is not an accepted unit of time")
            }
            [_, _] => "profile frequency should be a positive integer".to_string(),
            _ => "profile probe must have unit of time".to_string(),
        });
    };
    if unit == TimeUnit::Ns || unit.period_ns(count).is_none() {
        return Err(format!(
            "profile:{}:{count} is not a rate sdt can sample at",
            unit.name()
        ));
    }
    Ok(AttachSpec::Profile { unit, count })
}

/// `software:EVENT[:COUNT]` or `hardware:EVENT[:COUNT]`.
fn parse_counter(kind: CounterKind, rest: &[String], span: Span) -> Result<AttachSpec, Diagnostic> {
    let what = kind.name();
    let (name, count) = match rest {
        [name] => (name, None),
        [name, count] if count.is_empty() => (name, None),
        [name, count] => (name, Some(count)),
        _ => {
            return Err(Diagnostic::error(
                span,
                format!("{what} probe must have a {what} event name"),
            )
            .hint(format!("write it as {what}:EVENT or {what}:EVENT:COUNT")))
        }
    };
    if name.contains(['*', '?', '[']) {
        return Err(Diagnostic::error(
            span,
            format!("wildcards are not allowed for {what} probe type"),
        )
        .hint(format!("`sdt run -l '{what}:*'` lists the events")));
    }
    let Some(event) = kind.find(name) else {
        let names = kind
            .events()
            .iter()
            .flat_map(|e| std::iter::once(e.name).chain(e.alias));
        let mut d = Diagnostic::error(span, format!("{name} is not a {what} probe"));
        if let Some(h) = crate::diag::did_you_mean(&crate::diag::suggest(name, names)) {
            d = d.hint(h);
        }
        return Err(d.hint(format!("`sdt run -l '{what}:*'` lists the events")));
    };
    let count = match count {
        None => None,
        Some(text) => match crate::lexer::parse_int(text) {
            Ok(0) => {
                return Err(Diagnostic::error(
                    span,
                    format!("{what} count should be a positive integer"),
                ))
            }
            Ok(n) => Some(n),
            Err(_) => {
                return Err(Diagnostic::error(
                    span,
                    format!("{what} probe can only have an integer count"),
                ))
            }
        },
    };
    Ok(AttachSpec::Counter {
        event,
        written: name.clone(),
        count,
    })
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
        assert!(spec("watchpoint:0x10:8:w", &[]).is_err());
        let err = spec("kprobe:do_nanosleep", &[]).unwrap_err();
        assert!(err.message.contains("kernel"), "{}", err.message);
        let err = spec("usdtt:/bin/x:a:b", &[]).unwrap_err();
        assert!(err.hints.iter().any(|h| h.contains("usdt")), "{err:?}");
    }

    #[test]
    fn profile_forms() {
        let p = spec("profile:hz:99", &[]).unwrap();
        assert_eq!(
            p,
            AttachSpec::Profile {
                unit: TimeUnit::Hz,
                count: 99
            }
        );
        assert_eq!(p.kind(), ProbeKind::Profile);
        assert_eq!(p.own_name().unwrap(), "profile:hz:99");
        assert_eq!(
            spec("p:ms:10", &[]).unwrap().own_name().unwrap(),
            "profile:ms:10"
        );
        assert_eq!(
            spec("profile:s:$1", &["2"]).unwrap(),
            AttachSpec::Profile {
                unit: TimeUnit::S,
                count: 2
            }
        );
        let err = spec("profile:hz:0", &[]).unwrap_err();
        assert!(err.message.contains("positive"), "{}", err.message);
        let err = spec("profile:days:3", &[]).unwrap_err();
        assert_eq!(err.message, "days is not an accepted unit of time");
        assert!(spec("profile", &[]).is_err());
        assert!(spec("profile:ns:100", &[]).is_err());
    }

    #[test]
    fn counter_forms() {
        let s = spec("software:faults:1", &[]).unwrap();
        let AttachSpec::Counter {
            event,
            written,
            count,
        } = &s
        else {
            panic!("{s:?}")
        };
        assert_eq!((event.name, event.config), ("page-faults", 2));
        assert_eq!((written.as_str(), *count), ("faults", Some(1)));
        assert_eq!(s.kind(), ProbeKind::Software);
        assert_eq!(s.own_name().unwrap(), "software:faults:1");
        let cs = spec("s:cs", &[]).unwrap();
        assert_eq!(cs.own_name().unwrap(), "software:cs");
        assert_eq!(
            spec("software:cpu:1e6", &[]).unwrap().own_name().unwrap(),
            "software:cpu:1000000"
        );
        let h = spec("hardware:cycles:100000", &[]).unwrap();
        assert_eq!(h.kind(), ProbeKind::Hardware);
        let err = spec("software:cycles", &[]).unwrap_err();
        assert_eq!(err.message, "cycles is not a software probe");
        let err = spec("software:page-fault", &[]).unwrap_err();
        assert!(
            err.hints.iter().any(|h| h.contains("page-faults")),
            "{err:?}"
        );
        assert!(spec("software:faults:0", &[])
            .unwrap_err()
            .message
            .contains("positive"));
        assert!(spec("software:faults:x", &[])
            .unwrap_err()
            .message
            .contains("integer count"));
        assert!(spec("hardware:*", &[])
            .unwrap_err()
            .message
            .contains("wildcards"));
        assert!(spec("software", &[]).is_err());
    }
}
