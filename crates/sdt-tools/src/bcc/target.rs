//! Where BCC's tools put their probes: the library or program a name
//! stands for, found as BCC finds it, and the functions, USDT probes and
//! tracepoints a pattern matches, as BCC matches them.
//!
//! BCC has two resolvers, and the order matters. For a function
//! (`p:c:malloc`, `funccount c:read*`) it looks for a library first
//! (`c` is `libc.so.6`), then for a program in `PATH`; for USDT probes
//! (`u:node:gc__start`, `tplist -l`) a program first, then a library.
//! A name with a `/` is a path in both.
//!
//! Patterns are globs that BCC turns into regular expressions by
//! replacing each `*` with `.*` and anchoring both ends, escaping nothing
//! else (so a `.` still matches any character, as in BCC); with `-r`,
//! the user's regular expression, anchored at the start only, as
//! Python's `re.match` anchors it.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use regex::Regex;

/// The library or program whose functions `name` means: a path as it
/// is, else a library in the loader cache, else a program in `PATH`.
pub fn for_functions(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    sdt_elf::find_library(name).or_else(|| in_path(name))
}

/// The program or library whose USDT probes `name` means: a path as it
/// is, else a program in `PATH`, else a library in the loader cache.
pub fn for_usdt(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    in_path(name).or_else(|| sdt_elf::find_library(name))
}

fn in_path(name: &str) -> Option<PathBuf> {
    sdt_elf::find_in_path(name, &std::env::var_os("PATH").unwrap_or_default())
}

/// A BCC pattern, as a regular expression.
#[derive(Clone, Debug)]
pub struct Matcher {
    regex: Regex,
}

impl Matcher {
    /// A glob (`*` only), as BCC makes it a regular expression; or, with
    /// `regex`, the user's, anchored at the start.
    pub fn new(pattern: &str, regex: bool) -> anyhow::Result<Matcher> {
        let text = if regex {
            format!("^(?:{pattern})")
        } else {
            format!("^{}$", pattern.replace('*', ".*"))
        };
        let regex = Regex::new(&text).map_err(|e| anyhow!("bad pattern '{pattern}': {e}"))?;
        Ok(Matcher { regex })
    }

    /// The regular expression, as BCC's messages show it (`^foo$`).
    pub fn text(&self) -> &str {
        let text = self.regex.as_str();
        text.strip_prefix("^(?:")
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or(text)
    }

    pub fn matches(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }
}

/// The most probes a pattern may match: BCC's `BCC_PROBE_LIMIT`, 1,000
/// unless that variable says otherwise.
pub fn probe_limit() -> usize {
    std::env::var("BCC_PROBE_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The functions of `path` whose symbol name `matcher` matches, each
/// once (by name and by address, the first kept), in address order;
/// functions of no known size are left out, as sdt attaches only where
/// it can check the code.
pub fn functions(path: &Path, matcher: &Matcher) -> anyhow::Result<Vec<String>> {
    let file = sdt_elf::ElfFile::open(path)?;
    let mut names: Vec<String> = Vec::new();
    let mut addresses = std::collections::HashSet::new();
    for function in sdt_elf::functions(file.data())? {
        if function.size == 0 || function.file_offset.is_none() {
            continue;
        }
        if matcher.matches(&function.name)
            && !names.contains(&function.name)
            && addresses.insert(function.address)
        {
            names.push(function.name);
        }
    }
    Ok(names)
}

/// The names of every function of `path` sdt can attach to, aliases
/// (`malloc` beside `__libc_malloc`) included.
pub fn function_names(path: &Path) -> anyhow::Result<std::collections::HashSet<String>> {
    let file = sdt_elf::ElfFile::open(path)?;
    Ok(sdt_elf::functions(file.data())?
        .into_iter()
        .filter(|f| f.size > 0 && f.file_offset.is_some())
        .map(|f| f.name)
        .collect())
}

/// The USDT probes of `path` whose name (not provider) `matcher`
/// matches, as `(provider, name)`, each once, in the file's order.
pub fn usdt_probes(path: &Path, matcher: &Matcher) -> anyhow::Result<Vec<(String, String)>> {
    let file = sdt_elf::ElfFile::open(path)?;
    let probes = file.probes()?;
    Ok(probes
        .iter()
        .filter(|p| matcher.matches(p.name))
        .map(|p| (p.provider.to_string(), p.name.to_string()))
        .collect())
}

/// The kernel's tracepoints whose `category:event` `matcher` matches.
pub fn tracepoints(matcher: &Matcher) -> anyhow::Result<Vec<(String, String)>> {
    let fs = sdt_trace::TraceFs::open()?;
    Ok(fs
        .names("*", "*")?
        .into_iter()
        .filter(|(category, event)| matcher.matches(&format!("{category}:{event}")))
        .collect())
}

/// What a probe of BCC's is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Point {
    /// A function's entry (`p:LIB:FUNC`, with an offset into it).
    Entry {
        path: PathBuf,
        function: String,
        offset: u64,
    },
    /// A function's return (`r:LIB:FUNC`).
    Return { path: PathBuf, function: String },
    /// A USDT probe (`u:LIB:PROBE`).
    Usdt {
        path: PathBuf,
        provider: String,
        name: String,
    },
    /// A kernel tracepoint (`t:CAT:EVENT`).
    Tracepoint { category: String, event: String },
}

impl Point {
    /// The attach point in sdt's language; `probe` shows it without the
    /// quotes.
    pub fn attach(&self) -> String {
        match self {
            Point::Entry {
                path,
                function,
                offset,
            } => {
                let offset = match offset {
                    0 => String::new(),
                    n => format!("+{n}"),
                };
                format!("uprobe:{}:{}{offset}", path_word(path), name_word(function))
            }
            Point::Return { path, function } => {
                format!("uretprobe:{}:{}", path_word(path), name_word(function))
            }
            Point::Usdt {
                path,
                provider,
                name,
            } => format!(
                "usdt:{}:{}:{}",
                path_word(path),
                crate::quoted(provider),
                crate::quoted(name)
            ),
            Point::Tracepoint { category, event } => format!("tracepoint:{category}:{event}"),
        }
    }

    /// What the `probe` builtin gives for it.
    pub fn probe_name(&self) -> String {
        match self {
            Point::Entry {
                path,
                function,
                offset,
            } => match offset {
                0 => format!("uprobe:{}:{function}", path.display()),
                n => format!("uprobe:{}:{function}+{n}", path.display()),
            },
            Point::Return { path, function } => {
                format!("uretprobe:{}:{function}", path.display())
            }
            Point::Usdt {
                path,
                provider,
                name,
            } => format!("usdt:{}:{provider}:{name}", path.display()),
            Point::Tracepoint { category, event } => format!("tracepoint:{category}:{event}"),
        }
    }
}

fn path_word(path: &Path) -> String {
    crate::quoted(&path.display().to_string())
}

/// A function's name as one word of an attach point: quoted when it
/// holds what would end the word (`ns::f(int)`).
fn name_word(name: &str) -> String {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.$@".contains(c));
    if plain {
        name.to_string()
    } else {
        crate::quoted(name)
    }
}

/// A function's entry (or with `ret`, its return) in `library`, which
/// must have it: BCC's `p:LIB:FUNC` and `r:LIB:FUNC`.
pub fn function_point(
    ret: bool,
    library: &str,
    function: &str,
    offset: u64,
) -> anyhow::Result<Point> {
    if library.is_empty() {
        bail!(
            "kernel functions (kprobes) are not traced: sdt traces user space; \
             name a library or program (p:LIB:FUNC)"
        );
    }
    let path = for_functions(library).ok_or_else(|| anyhow!("unable to find library {library}"))?;
    let exact = Matcher::new(&regex::escape(function), true)?;
    if !functions(&path, &exact)?.iter().any(|f| f == function) {
        bail!(
            "could not determine address of symbol {function} in {}",
            path.display()
        );
    }
    let function = function.to_string();
    Ok(match ret {
        false => Point::Entry {
            path,
            function,
            offset,
        },
        true => Point::Return { path, function },
    })
}

/// The USDT probes `[PROVIDER:]NAME` in `library` (found as BCC finds
/// it, or, with `pid`, among the objects the process maps): BCC's
/// `u:LIB:PROBE`.
pub fn usdt_points(library: &str, probe: &str, pid: Option<i32>) -> anyhow::Result<Vec<Point>> {
    let path = usdt_path(library, pid)?;
    let (provider, name) = match probe.split_once(':') {
        Some((provider, name)) => (Some(provider), name),
        None => (None, probe),
    };
    let file = sdt_elf::ElfFile::open(&path)?;
    let points: Vec<Point> = file
        .probes()?
        .iter()
        .filter(|p| p.name == name && provider.is_none_or(|want| want == p.provider))
        .map(|p| Point::Usdt {
            path: path.clone(),
            provider: p.provider.to_string(),
            name: p.name.to_string(),
        })
        .collect();
    if points.is_empty() {
        bail!("unrecognized USDT probe {name}");
    }
    Ok(points)
}

/// The file a `u:` spec's library names.
fn usdt_path(library: &str, pid: Option<i32>) -> anyhow::Result<PathBuf> {
    if let Some(path) = for_usdt(library) {
        return Ok(path);
    }
    if let Some(pid) = pid {
        let objects = sdt_elf::mapped_objects(pid as u32)?;
        let found = objects.into_iter().find(|o| {
            let file = o.path.file_name().map(|f| f.to_string_lossy().into_owned());
            file.is_some_and(|f| f == library || f.starts_with(&format!("lib{library}.so")))
        });
        if let Some(object) = found {
            return Ok(object.path);
        }
    }
    bail!("USDT failed to instrument path {library}")
}

/// BCC's pattern of functions, tracepoints or USDT probes
/// (`funccount`, `stackcount`): `[p:]LIB:FUNC`, `t:CAT:EVENT`,
/// `u:LIB:PROBE`; a kernel function (`FUNC`, `p::FUNC`) is refused.
pub fn pattern_points(pattern: &str, regex: bool) -> anyhow::Result<Vec<Point>> {
    let parts: Vec<&str> = pattern.split(':').collect();
    let (kind, library, name) = match parts.as_slice() {
        [function] => ("p", "", *function),
        [library, function] => ("p", *library, *function),
        [kind, library, name] => (*kind, *library, *name),
        _ => bail!("Too many ':'-separated components in pattern {pattern}"),
    };
    if !["p", "t", "u"].contains(&kind) {
        bail!("Type must be 'p', 't', or 'u', but got {kind}");
    }
    if kind == "p" && library.is_empty() {
        bail!(
            "{pattern}: kernel functions (kprobes) are not traced: sdt traces user space; \
             name a library or program (LIB:FUNC), a USDT probe (u:LIB:PROBE) or a \
             tracepoint (t:CAT:EVENT)"
        );
    }
    let matcher = Matcher::new(name, regex)?;
    let points: Vec<Point> = match kind {
        "t" => {
            let matcher = Matcher::new(&format!("{library}:{name}"), regex)?;
            tracepoints(&matcher)?
                .into_iter()
                .map(|(category, event)| Point::Tracepoint { category, event })
                .collect()
        }
        _ => {
            let Some(path) = for_functions(library) else {
                bail!("unable to find library {library}");
            };
            if kind == "u" {
                usdt_probes(&path, &matcher)?
                    .into_iter()
                    .map(|(provider, name)| Point::Usdt {
                        path: path.clone(),
                        provider,
                        name,
                    })
                    .collect()
            } else {
                functions(&path, &matcher)?
                    .into_iter()
                    .map(|function| Point::Entry {
                        path: path.clone(),
                        function,
                        offset: 0,
                    })
                    .collect()
            }
        }
    };
    if points.is_empty() {
        let regex = match kind {
            "t" => Matcher::new(&format!("{library}:{name}"), regex)?,
            _ => matcher,
        };
        bail!("No functions matched by pattern {}", regex.text());
    }
    let limit = probe_limit();
    if points.len() > limit {
        bail!(
            "maximum of {limit} probes allowed, attempted {}",
            points.len()
        );
    }
    Ok(points)
}

/// The name a report shows for a probe BCC's way: a function's symbol,
/// a tracepoint's `category:event`, a USDT probe's name without its
/// provider.
pub fn shown_name(point: &Point) -> String {
    match point {
        Point::Entry { function, .. } | Point::Return { function, .. } => function.clone(),
        Point::Usdt { name, .. } => name.clone(),
        Point::Tracepoint { category, event } => format!("{category}:{event}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_bcc_regular_expressions() {
        let glob = Matcher::new("read*", false).unwrap();
        assert_eq!(glob.text(), "^read.*$");
        assert!(glob.matches("readv") && glob.matches("read") && !glob.matches("pread"));
        // A `.` is not escaped, as in BCC.
        assert!(Matcher::new("a.c", false).unwrap().matches("abc"));
        // -r: anchored at the start only.
        let regex = Matcher::new("(write|read)", true).unwrap();
        assert_eq!(regex.text(), "(write|read)");
        assert!(regex.matches("readv") && !regex.matches("pread"));
        assert!(Matcher::new("(", true).is_err());
    }

    #[test]
    fn pattern_errors_read_as_bcc_s() {
        let error = |p: &str| pattern_points(p, false).unwrap_err().to_string();
        assert_eq!(
            error("a:b:c:d"),
            "Too many ':'-separated components in pattern a:b:c:d"
        );
        assert_eq!(
            error("x:c:malloc"),
            "Type must be 'p', 't', or 'u', but got x"
        );
        assert_eq!(
            error("no-such-library-anywhere:f"),
            "unable to find library no-such-library-anywhere"
        );
        assert!(error("vfs_read").contains("kernel functions (kprobes) are not traced"));
        assert!(error("p::vfs_read").contains("kernel functions"));
    }

    #[test]
    fn attach_points_quote_what_needs_it() {
        let entry = Point::Entry {
            path: "/bin/x y".into(),
            function: "ns::f(int)".into(),
            offset: 16,
        };
        assert_eq!(entry.attach(), "uprobe:\"/bin/x y\":\"ns::f(int)\"+16");
        assert_eq!(entry.probe_name(), "uprobe:/bin/x y:ns::f(int)+16");
        let usdt = Point::Usdt {
            path: "./simple-c".into(),
            provider: "simple-c".into(),
            name: "test-probe".into(),
        };
        assert_eq!(
            usdt.attach(),
            "usdt:\"./simple-c\":\"simple-c\":\"test-probe\""
        );
        assert_eq!(shown_name(&usdt), "test-probe");
    }
}
