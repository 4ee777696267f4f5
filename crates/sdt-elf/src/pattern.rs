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
    provider: Part,
    name: Part,
}

/// One side of the colon. Most patterns name a probe exactly, and a
/// compiled glob is a regular expression that takes far longer to build
/// than a string comparison: scripts with many probes would pay for it.
#[derive(Clone, Debug)]
enum Part {
    Exact(String),
    Glob(GlobMatcher),
}

impl Part {
    fn is_match(&self, text: &str) -> bool {
        match self {
            Part::Exact(s) => s == text,
            Part::Glob(g) => g.is_match(text),
        }
    }
}

/// Characters that make a pattern a glob, in `globset`'s syntax.
const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

impl ProbePattern {
    /// Compiles a pattern; see the module documentation for the syntax.
    pub fn new(pattern: &str) -> Result<ProbePattern, Error> {
        let (provider, name) = pattern.split_once(':').unwrap_or(("*", pattern));
        let compile = |glob: &str| {
            if !glob.contains(GLOB_CHARS) {
                return Ok(Part::Exact(glob.to_owned()));
            }
            Glob::new(glob)
                .map(|g| Part::Glob(g.compile_matcher()))
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

        let p = ProbePattern::new("python:gc__start").unwrap();
        assert!(p.matches("python", "gc__start"));
        assert!(!p.matches("python", "gc__start2"));
        assert!(!p.matches("python", "gc__star"));

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
