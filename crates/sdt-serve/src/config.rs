//! How a program's maps are named as metrics, and which spans it sends:
//! pragmas in the script, and a small config file beside it.
//!
//! A pragma is a line comment that starts with `// sdt:`, so plain
//! bpftrace reads the script unchanged; a config file (`NAME.conf` beside
//! `NAME.bt`) holds the same directives, one a line, without the `//
//! sdt:` (`#` starts a comment there). The config file comes after the
//! script: what it says wins.
//!
//! ```text
//! // sdt: prefix = myapp_
//! // sdt: labels @reqs = method, status
//! // sdt: name @reqs = http_requests
//! // sdt: help @reqs = Requests by method and status
//! // sdt: hide @start, @method
//! // sdt: span query = usdt:./server:query__start .. usdt:./server:query__done with text = str(arg0)
//! // sdt: cgroup = /kubepods/besteffort/pod1234
//! ```
//!
//! `cgroup` traces only the processes of that cgroup v2 directory and
//! below it (as `--cgroup` does), and labels the program's series with it.
//!
//! Nothing here knows the program: [`crate::naming`] checks what the
//! directives name against the compiled maps.

use std::collections::BTreeMap;
use std::fmt;

use sdt_job::program::{Diagnostic, Span};

/// What a program's pragmas and config file say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// The metric name prefix, instead of the default.
    pub prefix: Option<Located<String>>,
    /// Only the processes of this cgroup v2 directory, and below.
    pub cgroup: Option<Located<String>>,
    /// By map, as written (`@reqs`).
    pub maps: BTreeMap<String, MapConfig>,
    pub spans: Vec<SpanConfig>,
}

/// A value and where it was written, for errors about it later.
#[derive(Clone, Debug, PartialEq)]
pub struct Located<T> {
    pub value: T,
    pub at: Origin,
}

/// A place in the script or its config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Which file: the script or its config.
    pub file: FileKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Script,
    Config,
}

/// Directives about one map.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapConfig {
    /// The metric's name, before the prefix.
    pub name: Option<Located<String>>,
    pub help: Option<String>,
    pub labels: Option<Located<Vec<String>>>,
    pub hidden: bool,
    /// Where the map was first named.
    pub at: Option<Origin>,
}

/// `span NAME = START .. END with ATTR = EXPR, ...`: a span from each hit
/// of `START` to the next hit of `END` in the same thread.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanConfig {
    pub name: String,
    /// Attach points, as the script would write them.
    pub start: String,
    pub end: String,
    /// Attributes, read at `START`: names and expressions of the language.
    /// Empty: the start probe's arguments, `arg0`... as integers.
    pub attributes: Vec<(String, String)>,
    pub at: Origin,
}

/// A directive that cannot be read, with the text it is in.
#[derive(Clone, Debug)]
pub struct ConfigError {
    /// The file's name, as errors show it.
    pub file: String,
    pub source: String,
    pub diagnostic: Box<Diagnostic>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.diagnostic.to_text(&self.file, &self.source).trim_end())
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// `FILE:LINE:COLUMN: error: MESSAGE`, for a log.
    pub fn one_line(&self) -> String {
        let (line, column) = self.diagnostic.line_column(&self.source);
        format!(
            "{}:{line}:{column}: error: {}",
            self.file, self.diagnostic.message
        )
    }
}

/// The pragma's marker.
const PRAGMA: &str = "sdt:";

const DIRECTIVES: &str = "prefix, name, help, labels, hide, span, cgroup";

impl Config {
    /// Reads the pragmas of `script` and then the directives of its config
    /// file, if it has one. `names` are the two files' names, for errors.
    pub fn read(script: (&str, &str), config: Option<(&str, &str)>) -> Result<Config, ConfigError> {
        let mut result = Config::default();
        result.add(script.0, script.1, FileKind::Script)?;
        if let Some((name, text)) = config {
            result.add(name, text, FileKind::Config)?;
        }
        Ok(result)
    }

    fn add(&mut self, name: &str, text: &str, kind: FileKind) -> Result<(), ConfigError> {
        let error = |span: Span, message: String, hint: &str| {
            let mut diagnostic = Diagnostic::error(span, message);
            if !hint.is_empty() {
                diagnostic = diagnostic.hint(hint.to_string());
            }
            ConfigError {
                file: name.to_string(),
                source: text.to_string(),
                diagnostic: Box::new(diagnostic),
            }
        };
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            let start = offset;
            offset += line.len();
            let Some((at, directive)) = directive_of(line, kind) else {
                continue;
            };
            let at = start + at;
            let directive = directive.trim_end();
            let origin = |from: usize, len: usize| Origin {
                file: kind,
                span: Span::new(at + from, at + from + len),
            };
            let whole = origin(0, directive.len());
            let (word, rest) = split_word(directive);
            let rest_at = directive.len() - rest.len();
            match word {
                "prefix" => {
                    let value = after_equals(rest)
                        .ok_or_else(|| error(whole.span, "expected `prefix = NAME`".into(), ""))?;
                    self.prefix = Some(Located {
                        value: value.to_string(),
                        at: whole,
                    });
                }
                "cgroup" => {
                    let value = after_equals(rest)
                        .ok_or_else(|| error(whole.span, "expected `cgroup = PATH`".into(), ""))?;
                    self.cgroup = Some(Located {
                        value: value.to_string(),
                        at: whole,
                    });
                }
                "name" | "help" | "labels" => {
                    let (map, value) = map_and_value(rest).ok_or_else(|| {
                        error(
                            whole.span,
                            format!("expected `{word} @MAP = ...`"),
                            "name the map as the script does: `@reqs`, or `@` alone",
                        )
                    })?;
                    let entry = self.map(map, origin(rest_at, map.len()));
                    let at = origin(directive.len() - value.len(), value.len());
                    match word {
                        "name" => {
                            entry.name = Some(Located {
                                value: value.to_string(),
                                at,
                            })
                        }
                        "help" => entry.help = Some(value.to_string()),
                        _ => {
                            let labels: Vec<String> =
                                value.split(',').map(|l| l.trim().to_string()).collect();
                            if labels.iter().any(String::is_empty) {
                                return Err(error(
                                    at.span,
                                    "an empty label name".into(),
                                    "write one name for each part of the key: `labels @m = a, b`",
                                ));
                            }
                            entry.labels = Some(Located { value: labels, at });
                        }
                    }
                }
                "hide" => {
                    let mut from = rest_at;
                    for map in rest.split(',') {
                        let trimmed = map.trim();
                        let lead = map.len() - map.trim_start().len();
                        if !trimmed.starts_with('@') {
                            return Err(error(
                                origin(from, map.len()).span,
                                format!("`{trimmed}` is not a map"),
                                "expected `hide @MAP, @MAP...`",
                            ));
                        }
                        self.map(trimmed, origin(from + lead, trimmed.len())).hidden = true;
                        from += map.len() + 1;
                    }
                }
                "span" => {
                    let span = parse_span(rest).map_err(|message| {
                        error(
                            whole.span,
                            message,
                            "expected `span NAME = START .. END`, then optionally `with ATTR = EXPR, ...`",
                        )
                    })?;
                    self.spans.push(SpanConfig { at: whole, ..span });
                }
                other => {
                    return Err(error(
                        origin(0, other.len()).span,
                        format!("`{other}` is no sdt directive"),
                        &format!("directives: {DIRECTIVES}"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn map(&mut self, name: &str, at: Origin) -> &mut MapConfig {
        let entry = self.maps.entry(name.to_string()).or_default();
        entry.at.get_or_insert(at);
        entry
    }
}

/// Where a line's directive starts, and its text: after `// sdt:` in a
/// script; any line but blank ones and `#` comments in a config file,
/// which may also spell the pragma out.
fn directive_of(line: &str, kind: FileKind) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    let lead = line.len() - trimmed.len();
    if let Some(comment) = trimmed.strip_prefix("//") {
        let body = comment.trim_start();
        let after = body.strip_prefix(PRAGMA)?;
        let text = after.trim_start();
        return Some((line.len() - text.len(), text));
    }
    match kind {
        FileKind::Script => None,
        FileKind::Config if trimmed.trim_end().is_empty() || trimmed.starts_with('#') => None,
        FileKind::Config => Some((lead, trimmed)),
    }
}

/// The first word and the rest, trimmed.
fn split_word(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(text.len());
    (&text[..end], text[end..].trim_start())
}

/// `= VALUE` to `VALUE`.
fn after_equals(text: &str) -> Option<&str> {
    let value = text.strip_prefix('=')?.trim();
    (!value.is_empty()).then_some(value)
}

/// `@MAP = VALUE`.
fn map_and_value(text: &str) -> Option<(&str, &str)> {
    let (map, rest) = split_word(text);
    if !map.starts_with('@') {
        return None;
    }
    Some((map, after_equals(rest)?))
}

/// `NAME = START .. END [with ATTR = EXPR, ...]`.
fn parse_span(text: &str) -> Result<SpanConfig, String> {
    let (name, rest) = split_word(text);
    if name.is_empty() {
        return Err("a span needs a name".into());
    }
    let rest = rest
        .strip_prefix('=')
        .ok_or_else(|| format!("expected `=` after the span's name `{name}`"))?
        .trim();
    let (probes, attributes) = match find_word(rest, "with") {
        Some(at) => (&rest[..at], Some(&rest[at + 4..])),
        None => (rest, None),
    };
    let (start, end) = probes
        .split_once("..")
        .ok_or_else(|| "expected two probes, `START .. END`".to_string())?;
    let (start, end) = (start.trim(), end.trim());
    if start.is_empty() || end.is_empty() || start.contains(char::is_whitespace) {
        return Err("expected two probes, `START .. END`".into());
    }
    let attributes = match attributes {
        None => Vec::new(),
        Some(list) => split_top_level(list)
            .into_iter()
            .map(|item| {
                let (attr, expr) = item
                    .split_once('=')
                    .filter(|(a, e)| !a.trim().is_empty() && !e.trim().is_empty())
                    .ok_or_else(|| format!("expected `ATTR = EXPR`, not `{}`", item.trim()))?;
                Ok((attr.trim().to_string(), expr.trim().to_string()))
            })
            .collect::<Result<_, String>>()?,
    };
    Ok(SpanConfig {
        name: name.to_string(),
        start: start.to_string(),
        end: end.to_string(),
        attributes,
        at: Origin {
            file: FileKind::Script,
            span: Span::default(),
        },
    })
}

/// Where `word` stands alone in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    text.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        before.is_some_and(char::is_whitespace) && after.is_some_and(char::is_whitespace)
    })
}

/// Splits at commas outside parentheses and strings:
/// `a = str(arg0, 8), b = 1` is two items.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    let mut items = Vec::new();
    for (at, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '[' if !quoted => depth += 1,
            ')' | ']' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                items.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(script: &str) -> Config {
        Config::read(("t.bt", script), None).unwrap()
    }

    fn error(script: &str, config: Option<&str>) -> String {
        let config = config.map(|c| ("t.conf", c));
        Config::read(("t.bt", script), config)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn pragmas_are_comments_and_the_config_file_wins() {
        let script = "\
// sdt: labels @reqs = method, status
usdt:./s:p:req { @reqs[str(arg0), arg1] = count(); } // sdt: not read, not at the start
  //sdt: name @reqs = requests
// an ordinary comment
// sdt: hide @start, @tmp
";
        let config = read(script);
        let reqs = &config.maps["@reqs"];
        assert_eq!(reqs.labels.as_ref().unwrap().value, ["method", "status"]);
        assert_eq!(reqs.name.as_ref().unwrap().value, "requests");
        assert!(config.maps["@start"].hidden && config.maps["@tmp"].hidden);
        let conf = "# names for Grafana\nname @reqs = http_requests\nprefix = web_\n\n";
        let both = Config::read(("t.bt", script), Some(("t.conf", conf))).unwrap();
        assert_eq!(
            both.maps["@reqs"].name.as_ref().unwrap().value,
            "http_requests"
        );
        assert_eq!(both.prefix.unwrap().value, "web_");
    }

    #[test]
    fn spans_with_and_without_attributes() {
        let config = read(
            "// sdt: span query = usdt:/bin/pg:query__start .. usdt:/bin/pg:query__done with text = str(arg0, 64), user = uid\n\
             // sdt: span gc = usdt:/bin/j:gc__begin .. usdt:/bin/j:gc__end\n",
        );
        let query = &config.spans[0];
        assert_eq!(query.name, "query");
        assert_eq!(query.start, "usdt:/bin/pg:query__start");
        assert_eq!(query.end, "usdt:/bin/pg:query__done");
        assert_eq!(
            query.attributes,
            [
                ("text".to_string(), "str(arg0, 64)".to_string()),
                ("user".to_string(), "uid".to_string())
            ]
        );
        assert!(config.spans[1].attributes.is_empty());
    }

    #[test]
    fn errors_point_at_the_directive() {
        let e = error("\n// sdt: lables @x = a\n", None);
        assert!(e.contains("`lables` is no sdt directive"), "{e}");
        assert!(e.contains("t.bt:2:"), "{e}");
        let e = error("", Some("labels x = a\n"));
        assert!(e.contains("expected `labels @MAP = ...`"), "{e}");
        assert!(e.contains("t.conf:1:1"), "{e}");
        let e = error("// sdt: span q = usdt:a:b\n", None);
        assert!(e.contains("START .. END"), "{e}");
        let e = error("// sdt: labels @x = a,,b\n", None);
        assert!(e.contains("empty label name"), "{e}");
    }
}
