//! Diagnostics: what went wrong in a script, where, and what to do about it.
//!
//! Every error the compiler reports about a script carries a [`Span`] of
//! the script text, so that the user sees the file, line and column, the
//! offending text underlined, and a hint. Rendering is left to
//! `codespan-reporting`, which lays out source snippets the way rustc does
//! and knows when a terminal wants colour; writing that by hand would buy
//! nothing.

use std::fmt;
use std::ops::Range;

use codespan_reporting::diagnostic::{Diagnostic as Report, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, termcolor::WriteColor};

/// A byte range of the script text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end.max(start) as u32,
        }
    }

    /// The smallest span that covers both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// An error (or warning) about a script, with the place it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    /// Text under the primary span; empty for none.
    pub label: String,
    /// Other places worth showing, each with its own text.
    pub related: Vec<(Span, String)>,
    /// What to do about it, one line each.
    pub hints: Vec<String>,
    pub warning: bool,
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            label: String::new(),
            related: Vec::new(),
            hints: Vec::new(),
            warning: false,
        }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            warning: true,
            ..Diagnostic::error(span, message)
        }
    }

    pub fn label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hints.push(hint.into());
        self
    }

    pub fn related(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.related.push((span, label.into()));
        self
    }

    /// Writes the diagnostic with a snippet of `source`, named `name`.
    pub fn render(
        &self,
        name: &str,
        source: &str,
        out: &mut dyn WriteColor,
    ) -> Result<(), codespan_reporting::files::Error> {
        let file = SimpleFile::new(name, source);
        let clamp = |span: Span| {
            let end = (span.end as usize).min(source.len());
            let start = (span.start as usize).min(end);
            start..end
        };
        let mut labels = vec![Label::primary((), clamp(self.span)).with_message(&self.label)];
        labels.extend(
            self.related
                .iter()
                .map(|(span, text)| Label::secondary((), clamp(*span)).with_message(text)),
        );
        let report = if self.warning {
            Report::warning()
        } else {
            Report::error()
        };
        let report = report
            .with_message(&self.message)
            .with_labels(labels)
            .with_notes(self.hints.iter().map(|h| format!("hint: {h}")).collect());
        term::emit_to_write_style(out, &term::Config::default(), &file, &report)
    }

    /// The diagnostic as plain text, for messages that are not shown on a
    /// terminal (tests, JSON).
    pub fn to_text(&self, name: &str, source: &str) -> String {
        let mut buffer = term::termcolor::NoColor::new(Vec::new());
        match self.render(name, source, &mut buffer) {
            Ok(()) => String::from_utf8_lossy(&buffer.into_inner()).into_owned(),
            Err(_) => format!("{name}: error: {}", self.message),
        }
    }

    /// `line:column` (both from 1) of the start of the span.
    pub fn line_column(&self, source: &str) -> (usize, usize) {
        line_column(source, self.span.start as usize)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Span {
    /// Where the span is, as bpftrace writes it: `LINE:COL-COL` on one
    /// line, `LINE:COL` when it runs on.
    pub fn location(self, source: &str) -> String {
        let (line, column) = line_column(source, self.start as usize);
        let (end_line, end_column) = line_column(source, self.end as usize);
        if end_line == line && end_column > column {
            format!("{line}:{column}-{end_column}")
        } else {
            format!("{line}:{column}")
        }
    }
}

/// `line:column` (both from 1) of byte `offset` of `source`.
pub fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Errors found in a script: usually one, sometimes several independent ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Renders every diagnostic for a terminal or a file.
    pub fn to_text(&self, name: &str, source: &str) -> String {
        self.0.iter().map(|d| d.to_text(name, source)).collect()
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics(vec![d])
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let messages: Vec<&str> = self.0.iter().map(|d| d.message.as_str()).collect();
        f.write_str(&messages.join("; "))
    }
}

impl std::error::Error for Diagnostics {}

/// Up to three names from `candidates` that are close to `wanted`, best first.
pub fn suggest<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut scored: Vec<(f64, &str)> = candidates
        .into_iter()
        .map(|c| (strsim::normalized_damerau_levenshtein(wanted, c), c))
        .filter(|(score, _)| *score >= 0.6)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(3)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// "did you mean `a` or `b`?", or nothing.
pub fn did_you_mean(suggestions: &[String]) -> Option<String> {
    match suggestions {
        [] => None,
        [one] => Some(format!("did you mean `{one}`?")),
        many => Some(format!(
            "did you mean {}?",
            many.iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_columns_count_from_one() {
        let src = "BEGIN {\n  x\n}";
        assert_eq!(line_column(src, 0), (1, 1));
        assert_eq!(line_column(src, 10), (2, 3));
        assert_eq!(line_column(src, 999), (3, 2));
    }

    #[test]
    fn rendering_names_file_line_and_column() {
        let src = "BEGIN { printf(\"%d\\n\", bogus); }";
        let at = src.find("bogus").unwrap();
        let d = Diagnostic::error(Span::new(at, at + 5), "unknown identifier `bogus`")
            .label("not a builtin")
            .hint("did you mean `pid`?");
        let text = d.to_text("script.bt", src);
        assert!(text.contains("error: unknown identifier `bogus`"), "{text}");
        assert!(text.contains("script.bt:1:24"), "{text}");
        assert!(text.contains("^^^^^ not a builtin"), "{text}");
        assert!(text.contains("hint: did you mean `pid`?"), "{text}");
    }

    #[test]
    fn suggestions_are_close_names() {
        let got = suggest("comn", ["comm", "cpu", "pid", "count"]);
        assert_eq!(got.first().map(String::as_str), Some("comm"));
        assert!(suggest("zzzz", ["comm"]).is_empty());
    }
}
