//! The manual's links: every relative link in README.md, docs/*.md and
//! bench/README.md names a file that exists and, with a `#fragment` into a
//! Markdown file, a heading that file has (as GitHub spells its anchors).
//! And every page of docs/ is listed in the README, where newcomers look.
//!
//! No dependencies: it reads a few files and runs in milliseconds.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files of the manual, relative to the repository's root.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("bench/README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| PathBuf::from("docs").join(e.unwrap().file_name()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text outside fenced code blocks and inline code spans: code is
/// blanked (newlines kept), so that `a[i](x)` in code is not a link.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fenced = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
        } else if fenced {
            out.push('\n');
        } else {
            out.push_str(line);
        }
    }
    // Inline code: a run of N backticks up to the next run of exactly N.
    let bytes = out.as_bytes();
    let mut blanked = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            blanked.push(bytes[i]);
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let fence = &out[i..i + run];
        let close = out[i + run..]
            .match_indices(fence)
            .find(|(at, _)| bytes.get(i + run + at + run) != Some(&b'`'))
            .map(|(at, _)| i + run + at);
        match close {
            Some(end) => {
                blanked.extend(bytes[i..end + run].iter().map(|&b| {
                    if b == b'\n' {
                        b'\n'
                    } else {
                        b' '
                    }
                }));
                i = end + run;
            }
            None => {
                blanked.extend_from_slice(fence.as_bytes());
                i += run;
            }
        }
    }
    String::from_utf8(blanked).unwrap()
}

/// The targets of inline links `[text](target)` and of reference
/// definitions `[name]: target`, with the line each is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let prose = prose(text);
    let line_of = |at: usize| prose[..at].matches('\n').count() + 1;
    let mut links = Vec::new();
    for (at, _) in prose.match_indices("](") {
        let rest = &prose[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            links.push((line_of(at), target.to_string()));
        }
    }
    let mut offset = 0;
    for line in prose.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(close) = trimmed.find("]: ") {
            if trimmed.starts_with('[') && !trimmed[..close].contains(']') {
                let target = trimmed[close + 3..].split_whitespace().next();
                links.push((line_of(offset), target.unwrap_or("").to_string()));
            }
        }
        offset += line.len();
    }
    links
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (letters,
/// digits, `-`, `_` and spaces kept), spaces as `-`; a repeated anchor
/// gets `-1`, `-2`, ...
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
    }
    seen
}

#[test]
fn every_relative_link_of_the_manual_resolves() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(root.join(&page)).unwrap();
        let dir = page.parent().unwrap();
        for (line, target) in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                root.join(&page)
            } else {
                root.join(dir).join(path)
            };
            let at = format!("{}:{line}: {target}", page.display());
            if !file.exists() {
                broken.push(format!("{at}: no such file"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if file.extension().is_some_and(|e| e == "md")
                && !anchors(&fs::read_to_string(&file).unwrap()).contains(fragment)
            {
                broken.push(format!("{at}: no heading with that anchor"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 10,
        "only {checked} relative links found: is the parser broken?"
    );
}

#[test]
fn the_readme_lists_every_page_of_the_manual() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let linked: HashSet<String> = links(&readme).into_iter().map(|(_, t)| t).collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .map(|p| p.display().to_string())
        .filter(|p| p.starts_with("docs/") && !linked.contains(p))
        .collect();
    assert!(missing.is_empty(), "not linked from README.md: {missing:?}");
}

#[test]
fn anchors_are_spelled_as_github_spells_them() {
    let got = anchors("# `sdt list` and `sdt trace`\n## The `-c` command\n## Types from DWARF\n```\n# not a heading\n```\n## Types from DWARF\n");
    let want: HashSet<String> = [
        "sdt-list-and-sdt-trace",
        "the--c-command",
        "types-from-dwarf",
        "types-from-dwarf-1",
    ]
    .map(String::from)
    .into();
    assert_eq!(got, want);
    let found = links("[a](x.md) `[b](y.md)` [c\nd](z.md#e)\n```\n[f](w.md)\n```\n[r]: ref.md\n");
    let targets: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(targets, ["x.md", "z.md#e", "ref.md"]);
}
