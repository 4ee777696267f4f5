//! Positions and errors: every error names the file, line and column of
//! what it is about, and shows that line with the place underlined.

use std::cell::RefCell;
use std::fmt;
use std::ops::Range;

/// The text of a provider file and how to name positions in it.
#[derive(Debug)]
pub struct Source {
    name: String,
    text: String,
    /// Line markers of preprocessed text: from byte `at` on, lines count
    /// from `line` in `file`. In the order they occur.
    markers: RefCell<Vec<Marker>>,
}

#[derive(Clone, Debug)]
struct Marker {
    at: usize,
    line: u32,
    file: String,
}

impl Source {
    /// `text`, read from the file called `name`.
    pub fn new(name: impl Into<String>, text: String) -> Source {
        Source {
            name: name.into(),
            text,
            markers: RefCell::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Records a line marker (`# LINE "FILE"`): the line that starts at
    /// byte `at` is line `line` of `file` (of the current file when `file`
    /// is empty). A malformed marker is ignored.
    pub(crate) fn mark_line(&self, at: usize, line: &str, file: &str) {
        // Lines count from 1; a marker of line 0 comes from no preprocessor.
        let Some(line) = line.parse::<u32>().ok().filter(|&l| l > 0) else {
            return;
        };
        let file = file
            .trim()
            .strip_prefix('"')
            .and_then(|f| f.split_once('"'))
            .map(|(f, _)| f.to_string());
        let mut markers = self.markers.borrow_mut();
        let file = file
            .or_else(|| markers.last().map(|m| m.file.clone()))
            .unwrap_or_else(|| self.name.clone());
        markers.push(Marker { at, line, file });
    }

    /// An error about the text at `span`.
    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        let mut start = span.start.min(self.text.len());
        while !self.text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = span.end.clamp(start, self.text.len());
        while !self.text.is_char_boundary(end) {
            end += 1;
        }
        let line_start = self.text[..start].rfind('\n').map_or(0, |n| n + 1);
        let line_end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |n| start + n);
        let markers = self.markers.borrow();
        let marker = markers.iter().rev().find(|m| m.at <= start);
        let (file, first_line, counted_from) = match marker {
            Some(m) => (m.file.clone(), m.line, m.at),
            None => (self.name.clone(), 1, 0),
        };
        let newlines = self.text[counted_from..line_start].matches('\n').count() as u32;
        let column = self.text[line_start..start].chars().count() as u32 + 1;
        let width = self.text[start..end.min(line_end)].chars().count().max(1);
        Diagnostic {
            file,
            line: first_line.saturating_add(newlines),
            column,
            message: message.into(),
            line_text: self.text[line_start..line_end].to_string(),
            width,
        }
    }
}

/// An error in a provider file, at a line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as it was named (or as a line marker names it).
    pub file: String,
    /// The line, from 1.
    pub line: u32,
    /// The column, in characters from 1.
    pub column: u32,
    /// What is wrong.
    pub message: String,
    /// The line the error is on.
    pub line_text: String,
    /// How many characters to underline.
    pub width: usize,
}

impl fmt::Display for Diagnostic {
    /// `FILE:LINE:COLUMN: MESSAGE`, then the line with the place
    /// underlined, as compilers print errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )?;
        let number = self.line.to_string();
        let gutter = " ".repeat(number.len());
        // Tabs would shift the underline; show them as spaces.
        let text = self.line_text.replace('\t', " ");
        writeln!(f, "{gutter} |")?;
        writeln!(f, "{number} | {text}")?;
        write!(
            f,
            "{gutter} | {}{}",
            " ".repeat(self.column as usize - 1),
            "^".repeat(self.width)
        )
    }
}

impl std::error::Error for Diagnostic {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let source = Source::new("p.d", "provider p {\n\tprobe é(bad);\n};\n".into());
        let at = source.text().find("bad").unwrap();
        let d = source.error(at..at + 3, "unknown type `bad`");
        assert_eq!(
            (d.file.as_str(), d.line, d.column, d.width),
            ("p.d", 2, 10, 3)
        );
        assert_eq!(
            d.to_string(),
            "p.d:2:10: unknown type `bad`\n  |\n2 |  probe é(bad);\n  |          ^^^"
        );
    }

    #[test]
    fn markers_of_line_0_are_ignored() {
        // Found by the fuzzer: an error reported on line 0.
        let text = "provider p {};\n# 0 \"x.d\"\n*";
        let source = Source::new("p.d", text.into());
        source.mark_line(text.find('*').unwrap(), "0", "\"x.d\"");
        source.mark_line(text.find('*').unwrap(), "4294967295", "\"x.d\"");
        let at = text.find('*').unwrap();
        let d = source.error(at..at + 1, "m");
        assert_eq!((d.file.as_str(), d.line), ("x.d", 4294967295));
        let d = Source::new("p.d", text.into()).error(at..at + 1, "m");
        assert_eq!(d.line, 3);
    }

    #[test]
    fn spans_inside_a_character_are_widened_to_it() {
        let source = Source::new("p.d", "x // é".into());
        let d = source.error(6..7, "m");
        assert_eq!((d.line, d.column, d.width), (1, 6, 1));
    }

    #[test]
    fn line_markers_name_the_original_file() {
        let text = "# 1 \"x.d\"\n# 30 \"probes.d\" 2\n\nprovider p {\n";
        let source = Source::new("-", text.into());
        source.mark_line(text.find("# 30").unwrap(), "1", "\"x.d\"");
        source.mark_line(text.find("\n\n").unwrap() + 1, "30", "\"probes.d\" 2");
        let at = text.find("provider").unwrap();
        let d = source.error(at..at + 8, "m");
        assert_eq!((d.file.as_str(), d.line, d.column), ("probes.d", 31, 1));
    }
}
