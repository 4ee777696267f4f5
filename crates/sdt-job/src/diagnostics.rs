//! Errors and warnings about a script, on standard error.
//!
//! sdt shows each one located and underlined, with hints. As `bpftrace`,
//! the first line of each reads as bpftrace's does,
//! `FILE:LINE:COL-COL: ERROR: message` (`stdin` for `-e` programs; the
//! end column is the one after the last character; a span over several
//! lines is `FILE:LINE-LINE`), because wrappers and test suites look for
//! that line; sdt's own rendering follows it without its header.

use std::io::{IsTerminal, Write};

use codespan_reporting::term::termcolor::{ColorChoice, NoColor, StandardStream};
use sdt_lang::diag::{line_column, Diagnostic, Diagnostics};

use crate::Voice;

/// Prints every diagnostic; bpftrace's voice adds bpftrace's first line.
pub fn print_diagnostics(diagnostics: &Diagnostics, voice: Voice, name: &str, source: &str) {
    let color = if std::io::stderr().is_terminal() {
        ColorChoice::Auto
    } else {
        ColorChoice::Never
    };
    let mut stderr = StandardStream::stderr(color);
    for d in &diagnostics.0 {
        if voice == Voice::Bpftrace {
            let _ = writeln!(stderr, "{}", bpftrace_line(d, name, source));
            let mut rendered = NoColor::new(Vec::new());
            if d.render(name, source, &mut rendered).is_ok() {
                let text = String::from_utf8_lossy(rendered.get_ref()).into_owned();
                // Everything but the header, which the line above replaces.
                let body = text.split_once('\n').map_or("", |(_, body)| body);
                let _ = stderr.write_all(body.as_bytes());
            }
        } else if d.render(name, source, &mut stderr).is_err() {
            eprintln!("{name}: error: {}", d.message);
        }
    }
    let _ = stderr.flush();
}

/// Errors bpftrace finds when it attaches, and reports without a place
/// in the script: their first line is `ERROR: message` alone.
const FOUND_WHEN_ATTACHING: &[&str] = &[
    "Could not resolve address",
    "Offset outside the function bounds",
    "Could not determine boundary",
];

/// `stdin:1:12-26: ERROR: message`, as bpftrace words the first line.
pub fn bpftrace_line(d: &Diagnostic, name: &str, source: &str) -> String {
    let kind = if d.warning { "WARNING" } else { "ERROR" };
    if FOUND_WHEN_ATTACHING
        .iter()
        .any(|start| d.message.starts_with(start))
    {
        return format!("{kind}: {}", d.message);
    }
    let (line, column) = line_column(source, d.span.start as usize);
    let (end_line, end_column) = line_column(source, d.span.end as usize);
    let place = if end_line == line {
        format!("{line}:{column}-{}", end_column.max(column + 1))
    } else {
        format!("{line}-{end_line}")
    };
    format!("{name}:{place}: {kind}: {}", d.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdt_lang::diag::Span;

    #[test]
    fn first_lines_read_as_bpftrace_s() {
        let source = "config = { bad_config=raw } begin {}";
        let start = source.find("bad_config").unwrap();
        let d = Diagnostic::error(
            Span::new(start, start + "bad_config=raw".len()),
            "bad_config: not a known configuration option",
        );
        assert_eq!(
            bpftrace_line(&d, "stdin", source),
            "stdin:1:12-26: ERROR: bad_config: not a known configuration option"
        );
        let two_lines = "BEGIN {\n  x\n}";
        let d = Diagnostic::warning(Span::new(0, two_lines.len()), "w");
        assert_eq!(bpftrace_line(&d, "f.bt", two_lines), "f.bt:1-3: WARNING: w");
        let empty = Diagnostic::error(Span::new(3, 3), "e");
        assert_eq!(
            bpftrace_line(&empty, "stdin", "abcdef"),
            "stdin:1:4-5: ERROR: e"
        );
    }
}
