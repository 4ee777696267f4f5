//! Selecting probes with a `PROVIDER:NAME` glob.
//!
//! The provider and the name are matched separately, so `*` never spans
//! the colon: `python:*` is every probe of the provider `python`, `*:gc*`
//! every probe whose name starts with `gc`. A pattern without a colon is
//! matched against the name alone, as if it were `*:PATTERN`. The globs are
//! `globset`'s: `*`, `?`, `[abc]`, `[!abc]` and `{a,b}`.

use globset::{Glob, GlobMatcher};

use crate::Error;

/// A compiled `PROVIDER:NAME` pattern.
#[derive(Clone, Debug)]
pub struct ProbePattern {
    provider: GlobMatcher,
    name: GlobMatcher,
}

impl ProbePattern {
    /// Compiles a pattern; see the module documentation for the syntax.
    pub fn new(pattern: &str) -> Result<ProbePattern, Error> {
        let (provider, name) = pattern.split_once(':').unwrap_or(("*", pattern));
        let compile = |glob: &str| {
            Glob::new(glob)
                .map(|g| g.compile_matcher())
                .map_err(|source| Error::Pattern {
                    pattern: pattern.to_owned(),
                    source,
                })
        };
        Ok(ProbePattern {
            provider: compile(provider)?,
            name: compile(name)?,
        })
    }

    /// Whether a probe matches.
    pub fn matches(&self, provider: &str, name: &str) -> bool {
        self.provider.is_match(provider) && self.name.is_match(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_provider_and_name_separately() {
        let p = ProbePattern::new("python:function__*").unwrap();
        assert!(p.matches("python", "function__entry"));
        assert!(!p.matches("python", "gc__start"));
        assert!(!p.matches("pythonx", "function__entry"));

        let p = ProbePattern::new("*:gc*").unwrap();
        assert!(p.matches("hotspot", "gc__begin"));
        assert!(p.matches("python", "gc__start"));
        assert!(!p.matches("python", "line"));

        let p = ProbePattern::new("gc*").unwrap();
        assert!(p.matches("anything", "gc__begin"));

        let p = ProbePattern::new("*").unwrap();
        assert!(p.matches("a", "b"));
        // `*` does not span the colon.
        assert!(!ProbePattern::new("py*start")
            .unwrap()
            .matches("python", "gc__start"));
    }

    #[test]
    fn bad_glob_is_an_error() {
        let err = ProbePattern::new("python:[").unwrap_err();
        assert!(err.to_string().contains("python:["), "{err}");
    }
}
