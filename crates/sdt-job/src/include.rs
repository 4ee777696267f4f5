//! `#include` lines, `--include FILE` and `-I DIR`: C definitions from
//! header files.
//!
//! bpftrace runs clang over the headers. sdt has no C compiler and needs
//! none for what a script takes from a header: its type definitions and
//! its numeric constants. So each header (and every header it includes,
//! found the way a C compiler looks) is read for its top-level `struct`,
//! `union`, `enum` and `typedef` definitions, which sdt's own C parser
//! reads, and its `#define NAME NUMBER` lines. What the parser cannot read
//! (function declarations, macros with arguments, compiler extensions) is
//! left out; `#if` is not evaluated, so a definition made twice under
//! different conditions keeps its first form. A header that cannot be
//! found is an error at its `#include` line, never silently skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sdt_lang::ast::{CDefinition, Script};
use sdt_lang::diag::{Diagnostic, Diagnostics, Span};
use sdt_lang::types::TypeRegistry;

/// Headers include headers; this many levels are followed.
const MAX_DEPTH: usize = 16;

/// Where `<...>` headers are looked for after `-I` directories.
const SYSTEM_DIRS: &[&str] = &[
    "/usr/local/include",
    "/usr/include/x86_64-linux-gnu",
    "/usr/include",
];

/// Reads the headers of the script's `#include` lines and of `--include`
/// into its definitions, ahead of the script's own. `base` is the
/// script's directory, where `"..."` headers are looked for first.
pub fn read(
    script: &mut Script,
    includes: &[PathBuf],
    dirs: &[PathBuf],
    base: Option<&Path>,
) -> Result<(), Diagnostics> {
    let mut reader = Reader {
        dirs,
        seen: HashSet::new(),
        definitions: Vec::new(),
        defines: Vec::new(),
    };
    let mut errors = Vec::new();
    for file in includes {
        // Checked by `locate` before: a missing one is a command-line error.
        if let Some(path) = locate(file, dirs, base) {
            reader.header(&path, Span::default(), 0);
        }
    }
    let directives: Vec<(Span, String)> = script.directives.clone();
    for (span, text) in &directives {
        let Some((name, quoted)) = include_target(text) else {
            continue;
        };
        match find(&name, quoted, base, dirs) {
            Some(path) => reader.header(&path, *span, 0),
            None => errors.push(not_found(*span, &name, dirs)),
        }
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    // Only what sdt's C parser reads, in order, so that each definition
    // may use the ones before it.
    let mut registry = TypeRegistry::default();
    let kept: Vec<CDefinition> = reader
        .definitions
        .into_iter()
        .filter(|d| sdt_lang::cdecl::define(&mut registry, &d.text, d.span).is_ok())
        .collect();
    script.definitions.splice(0..0, kept);
    script.directives.splice(0..0, reader.defines);
    Ok(())
}

fn not_found(span: Span, name: &str, dirs: &[PathBuf]) -> Diagnostic {
    let mut looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    looked.extend(SYSTEM_DIRS.iter().map(|d| d.to_string()));
    Diagnostic::error(span, format!("'{name}' file not found"))
        .label("no such header")
        .hint(format!(
            "sdt looked beside the script and in {}; add a directory with -I DIR",
            looked.join(", ")
        ))
}

/// `include "x.h"` or `include <x.h>`: the name, and whether it is quoted.
fn include_target(directive: &str) -> Option<(String, bool)> {
    let rest = directive.strip_prefix("include")?.trim();
    if let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) {
        return Some((name.to_string(), true));
    }
    let name = rest.strip_prefix('<')?.split('>').next()?;
    Some((name.to_string(), false))
}

struct Reader<'a> {
    dirs: &'a [PathBuf],
    seen: HashSet<PathBuf>,
    /// Definitions, each placed at the `#include` that brought it in.
    definitions: Vec<CDefinition>,
    /// `define NAME VALUE` directives, placed the same way.
    defines: Vec<(Span, String)>,
}

/// Where an `--include FILE` is: the path itself, or as `#include "FILE"`
/// would find it.
pub fn locate(file: &Path, dirs: &[PathBuf], base: Option<&Path>) -> Option<PathBuf> {
    if file.is_file() {
        return Some(file.to_path_buf());
    }
    find(&file.to_string_lossy(), true, base, dirs)
}

/// Where a header is: beside the including file for `"..."`, then in the
/// `-I` directories, then the system's.
fn find(name: &str, quoted: bool, beside: Option<&Path>, dirs: &[PathBuf]) -> Option<PathBuf> {
    let here = quoted.then(|| beside.unwrap_or(Path::new(".")).to_path_buf());
    here.into_iter()
        .chain(dirs.iter().cloned())
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

impl Reader<'_> {
    fn header(&mut self, path: &Path, span: Span, depth: usize) {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if depth > MAX_DEPTH || !self.seen.insert(canonical) {
            return;
        }
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let (code, directives) = split_preprocessor(&text);
        for directive in directives {
            if let Some((name, quoted)) = include_target(&directive) {
                // A header's own includes that cannot be found are left
                // out, as what sdt reads of them is optional.
                if let Some(found) = find(&name, quoted, path.parent(), self.dirs) {
                    self.header(&found, span, depth + 1);
                }
            } else if directive.starts_with("define") {
                self.defines.push((span, directive));
            }
        }
        for statement in top_level_statements(&code) {
            let text = statement.trim_start_matches("__extension__").trim_start();
            if ["struct", "union", "enum", "typedef"]
                .iter()
                .any(|w| text.starts_with(w))
            {
                self.definitions.push(CDefinition {
                    text: text.to_string(),
                    span,
                });
            }
        }
    }
}

/// Splits C text into its code without comments, and its preprocessor
/// directives (without `#`, continuation lines joined).
fn split_preprocessor(text: &str) -> (String, Vec<String>) {
    let mut code = String::new();
    let mut directives = Vec::new();
    let without_comments = strip_comments(text);
    let mut lines = without_comments.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(directive) = trimmed.strip_prefix('#') {
            let mut joined = directive.trim().to_string();
            while joined.ends_with('\\') {
                joined.pop();
                match lines.next() {
                    Some(next) => joined.push_str(next),
                    None => break,
                }
            }
            directives.push(joined.trim().to_string());
        } else {
            code.push_str(line);
            code.push('\n');
        }
    }
    (code, directives)
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |end| &after[end + 2..]);
            out.push(' ');
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |end| &after[end..]);
        } else if rest.starts_with('"') {
            let end = rest[1..]
                .find('"')
                .map_or(rest.len(), |e| e + 2)
                .min(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Statements at brace depth 0, each up to and including its `;`.
fn top_level_statements(code: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in code.chars() {
        current.push(c);
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ';' if depth == 0 => {
                statements.push(current.trim().to_string());
                current.clear();
            }
            _ => {}
        }
    }
    statements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_and_constants_of_a_header_and_the_headers_it_includes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("sub/inner.h"),
            "#define LIMIT 42 /* a limit */\ntypedef unsigned int counter_t;\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("outer.h"),
            "#ifndef OUTER_H\n#define OUTER_H\n#include \"sub/inner.h\"\n\
             extern int helper(int, char *);\n\
             struct pair { counter_t a; int b; };\n\
             static inline int f(void) { return 1; }\n\
             #define SQUARE(x) ((x) * (x))\n#endif\n",
        )
        .unwrap();
        let mut script =
            sdt_lang::parser::parse("#include \"outer.h\"\nBEGIN { exit(); }").unwrap();
        read(&mut script, &[], &[], Some(dir.path())).unwrap();
        let texts: Vec<&str> = script.definitions.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "typedef unsigned int counter_t;",
                "struct pair { counter_t a; int b; };"
            ]
        );
        assert!(script
            .directives
            .iter()
            .any(|(_, d)| d.starts_with("define LIMIT 42")));
    }

    #[test]
    fn a_missing_header_is_an_error_at_its_line() {
        let source = "#include <lol/no.h>\nBEGIN { }";
        let mut script = sdt_lang::parser::parse(source).unwrap();
        let errors = read(&mut script, &[], &[], None).unwrap_err();
        assert_eq!(errors.0.len(), 1);
        assert_eq!(errors.0[0].message, "'lol/no.h' file not found");
        assert_eq!(errors.0[0].line_column(source), (1, 1));
    }
}
