//! Probe specs as the user writes them: `[usdt:][TARGET:]PROVIDER:NAME`.
//!
//! The spec is split from the right, because provider and name never
//! contain a colon while a path, in rare cases, does. A leading `usdt:` is
//! accepted so that bpftrace users can paste their probe names.

use std::fmt;

use sdt_elf::ProbePattern;

use crate::Error;

/// One probe spec: which file (if the user said) and which probes in it.
#[derive(Clone, Debug)]
pub struct ProbeSpec {
    /// The text the user gave, for messages.
    pub text: String,
    /// A path, a program name found through `PATH`, or a library name found
    /// through the loader cache; `None` means "the process's objects" (with
    /// `-p`) or "the command's executable" (with `-c`).
    pub target: Option<String>,
    /// The `provider:name` part, which may hold globs.
    pub probe: String,
    pub(crate) pattern: ProbePattern,
}

impl ProbeSpec {
    /// Parses `[usdt:][TARGET:]PROVIDER:NAME`.
    pub fn parse(text: &str) -> Result<ProbeSpec, Error> {
        let bad = |why: &str| Error::BadSpec {
            spec: text.to_string(),
            why: why.to_string(),
        };
        let body = text.strip_prefix("usdt:").unwrap_or(text);
        let mut parts = body.rsplitn(3, ':');
        let name = parts.next().unwrap_or_default();
        let provider = parts.next().ok_or_else(|| {
            bad("expected PROVIDER:NAME, with TARGET: in front unless -p or -c is given")
        })?;
        let target = parts.next();
        if provider.is_empty() || name.is_empty() {
            return Err(bad(
                "the provider and the name must not be empty (use * to match any)",
            ));
        }
        if provider.contains('/') {
            return Err(bad(&format!(
                "`{provider}` looks like a path, not a provider; write TARGET:PROVIDER:NAME"
            )));
        }
        if target == Some("") {
            return Err(bad("the target before the provider is empty"));
        }
        let probe = format!("{provider}:{name}");
        let pattern = ProbePattern::new(&probe).map_err(|e| bad(&e.to_string()))?;
        Ok(ProbeSpec {
            text: text.to_string(),
            target: target.map(str::to_string),
            probe,
            pattern,
        })
    }

    /// A spec from its parts, as a script's `usdt:PATH:[PROVIDER:]NAME`
    /// gives them: no provider means any provider. `text` is shown in
    /// messages.
    pub fn new(
        text: &str,
        target: Option<&str>,
        provider: Option<&str>,
        name: &str,
    ) -> Result<ProbeSpec, Error> {
        let probe = format!("{}:{name}", provider.unwrap_or("*"));
        let pattern = ProbePattern::new(&probe).map_err(|e| Error::BadSpec {
            spec: text.to_string(),
            why: e.to_string(),
        })?;
        Ok(ProbeSpec {
            text: text.to_string(),
            target: target.map(str::to_string),
            probe,
            pattern,
        })
    }

    /// Whether `provider:name` is selected by this spec.
    pub fn matches(&self, provider: &str, name: &str) -> bool {
        self.pattern.matches(provider, name)
    }
}

impl fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_from_the_right() {
        let s = ProbeSpec::parse("/usr/bin/python3.11:python:function__entry").unwrap();
        assert_eq!(s.target.as_deref(), Some("/usr/bin/python3.11"));
        assert_eq!(s.probe, "python:function__entry");

        let s = ProbeSpec::parse("usdt:libc:libc:setjmp").unwrap();
        assert_eq!(s.target.as_deref(), Some("libc"));

        let s = ProbeSpec::parse("/odd:dir/bin:p:n").unwrap();
        assert_eq!(s.target.as_deref(), Some("/odd:dir/bin"));
        assert_eq!(s.probe, "p:n");

        let s = ProbeSpec::parse("python:function__*").unwrap();
        assert_eq!(s.target, None);
        assert!(s.matches("python", "function__entry"));
        assert!(!s.matches("python", "line"));
    }

    #[test]
    fn rejects_incomplete_specs() {
        for bad in ["", "justaname", ":name", "provider:", ":p:n"] {
            assert!(ProbeSpec::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
