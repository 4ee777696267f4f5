//! Telling `sdt trace ...` and `sdt stackcount ...` written BCC's way
//! from the same commands written sdt's way.
//!
//! sdt had both commands before it answered to BCC's, with probe specs
//! and options of their own, and those command lines keep their meaning.
//! BCC's are told apart by what only BCC's have:
//!
//! * `trace`: a probe spec with BCC's type (`p:LIB:FUNC`, `r:`, `u:`,
//!   `t:`, three parts at least: `p:*` is sdt's provider `p`) or
//!   with a predicate or format after the probe (a space, `(` or `"` in
//!   the word), or an option only BCC's `trace` has (`-T`, `-t`, `-C`,
//!   `-U`, `-M`, `-n`, `-f`, `-Z`, `-L`, ...).
//! * `stackcount`: a pattern with BCC's type (`p:`, `t:`, `u:`, three
//!   parts at least), an option only BCC's `stackcount` has (`-i`,
//!   `-D`, `-T`, `-r`, `-s`, `-v`, `-d`, `-K`, `-U`, `--debug`), or `-f`
//!   not followed by a format's name (BCC's `-f` is a flag: folded
//!   output; sdt's takes `text`, `folded` or `json`, also as `--format`).
//!
//! The lists are of BCC's options, which do not change, so that an option
//! sdt's commands gain later keeps them sdt's.
//!
//! What fits both (`sdt trace c:malloc`, `sdt stackcount -p 1 app:probe`)
//! keeps sdt's meaning: there a `LIB:NAME` is a USDT probe, which BCC
//! writes `u:LIB:NAME`.

use std::ffi::OsString;

/// The tool of this crate that `sdt ARGS` runs, if any: `tplist`,
/// `argdist`, `funccount`, `funclatency` and `memleak` always; `trace`
/// and `stackcount` when the words after them read as BCC's.
pub fn subcommand(args: &[OsString]) -> Option<&'static str> {
    let name = args.first()?.to_str()?;
    let tool = crate::TOOLS.into_iter().find(|t| *t == name)?;
    let rest: Vec<&str> = args[1..].iter().filter_map(|a| a.to_str()).collect();
    let bcc = match tool {
        "trace" => trace_is_bcc(&rest),
        "stackcount" => stackcount_is_bcc(&rest),
        _ => true,
    };
    bcc.then_some(tool)
}

/// Options only BCC's `trace` has: any of them makes the command BCC's.
const BCC_TRACE: &[&str] = &[
    "-b",
    "-L",
    "-v",
    "-Z",
    "-S",
    "-M",
    "-t",
    "-u",
    "-T",
    "-C",
    "-n",
    "-f",
    "-B",
    "-K",
    "-U",
    "-a",
    "-I",
    "-A",
    "--buffer-pages",
    "--tid",
    "--uid",
    "--verbose",
    "--string-size",
    "--include-self",
    "--max-events",
    "--timestamp",
    "--unix-timestamp",
    "--time",
    "--print_cpu",
    "--cgroup-path",
    "--name",
    "--msg-filter",
    "--bin_cmp",
    "--sym_file_list",
    "--kernel-stack",
    "--user-stack",
    "--address",
    "--include",
    "--aggregate",
];

/// sdt's `trace` options that take a value, which is not a probe.
const SDT_TRACE_VALUES: &[&str] = &[
    "-p",
    "-c",
    "-s",
    "-o",
    "--pid",
    "--command",
    "--string",
    "--output",
    "--buffer-size",
    "--timeline",
    "--timeline-limit",
    "--attach-with",
];

fn trace_is_bcc(args: &[&str]) -> bool {
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if *word == "--" {
            return words.any(|w| bcc_spec(w));
        }
        match option_name(word) {
            Some(option) if BCC_TRACE.contains(&option) => return true,
            Some(option) if SDT_TRACE_VALUES.contains(&option) && word.len() == option.len() => {
                words.next();
            }
            Some(_) => {}
            None if bcc_spec(word) => return true,
            None => {}
        }
    }
    false
}

/// A probe spec only BCC's `trace` takes: BCC's type, or a signature,
/// predicate or format after the probe.
fn bcc_spec(word: &str) -> bool {
    let after_head = word
        .find([' ', '\t', '('])
        .map(|at| word[at..].trim_start());
    typed(word, &["p", "r", "u", "t"])
        || after_head.is_some_and(|rest| rest.starts_with(['(', '"']))
}

/// A probe with one of BCC's `types` and at least three parts
/// (`p:LIB:FUNC`): `p:*` is sdt's provider `p`, which BCC would read as a
/// library named `p`.
fn typed(word: &str, types: &[&str]) -> bool {
    let head = word.split([' ', '\t', '(']).next().unwrap_or(word);
    let parts: Vec<&str> = head.split(':').collect();
    parts.len() >= 3 && types.contains(&parts[0])
}

/// Options only BCC's `stackcount` has (and `-f` alone).
const BCC_STACKCOUNT: &[&str] = &[
    "-i",
    "-D",
    "-T",
    "-r",
    "-s",
    "-K",
    "-U",
    "-v",
    "-d",
    "--interval",
    "--duration",
    "--timestamp",
    "--regexp",
    "--offset",
    "--kernel-stacks-only",
    "--user-stacks-only",
    "--verbose",
    "--delimited",
    "--folded",
    "--debug",
    "--cpu",
    "--perpid",
];

/// sdt's `stackcount` options that take a value, which is not a probe.
const SDT_STACKCOUNT_VALUES: &[&str] = &["-p", "-c", "-o", "--flamegraph"];

fn stackcount_is_bcc(args: &[&str]) -> bool {
    let formats: Vec<&str> = sdt_output::Format::names().collect();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if *word == "--" {
            return words.any(|w| bcc_pattern(w));
        }
        let Some(option) = option_name(word) else {
            if bcc_pattern(word) {
                return true;
            }
            continue;
        };
        let attached = word.len() > option.len();
        if BCC_STACKCOUNT.contains(&option) {
            return true;
        }
        if option == "-f" || option == "--format" {
            // BCC's -f is a flag; sdt's takes a format's name.
            let value = if attached {
                word[option.len()..].trim_start_matches('=')
            } else {
                match words.next() {
                    Some(value) => value,
                    None => return option == "-f",
                }
            };
            if !formats.contains(&value) {
                return true;
            }
        } else if SDT_STACKCOUNT_VALUES.contains(&option) && !attached {
            words.next();
        }
    }
    false
}

/// A pattern only BCC's `stackcount` takes.
fn bcc_pattern(word: &str) -> bool {
    typed(word, &["p", "t", "u"])
}

/// The option a word is (`-T` of `-T`, `-p` of `-p1234`, `--pid` of
/// `--pid=1`), or `None` for a word that is no option.
fn option_name(word: &str) -> Option<&str> {
    if let Some(long) = word.strip_prefix("--") {
        if long.is_empty() {
            return None;
        }
        return Some(word.split('=').next().unwrap_or(word));
    }
    let short = word.strip_prefix('-')?;
    let first = short.chars().next()?;
    (!first.is_ascii_digit()).then(|| &word[..1 + first.len_utf8()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(words: &[&str]) -> Option<&'static str> {
        let args: Vec<OsString> = words.iter().map(OsString::from).collect();
        subcommand(&args)
    }

    #[test]
    fn trace_is_bcc_s_when_only_bcc_s_reads_that_way() {
        // The LWN article's command lines.
        assert_eq!(
            tool(&["trace", "u:./simple-c:test-probe \"%u\", arg1", "-T"]),
            Some("trace")
        );
        assert_eq!(tool(&["trace", "-T", "c:memory_sbrk_more"]), Some("trace"));
        assert_eq!(tool(&["trace", "-p", "1", "r:c:malloc"]), Some("trace"));
        assert_eq!(tool(&["trace", "-M", "3", "c:x"]), Some("trace"));
        assert_eq!(tool(&["trace", "--user-stack", "c:x"]), Some("trace"));
        // sdt's own.
        assert_eq!(tool(&["trace", "-c", "python3 app.py", "python:*"]), None);
        assert_eq!(tool(&["trace", "-p", "1234", "-s", "1", "app:probe"]), None);
        assert_eq!(tool(&["trace", "--json", "-o", "x y", "libc:setjmp"]), None);
        assert_eq!(tool(&["trace", "c:malloc"]), None);
        assert_eq!(tool(&["trace", "--json", "-p", "1", "p:*", "lib:*"]), None);
        assert_eq!(tool(&["trace", "u:probe"]), None);
        assert_eq!(
            tool(&[
                "trace",
                "--timeline",
                "t.json",
                "--timeline-limit",
                "5",
                "--no-follow",
                "a:b"
            ]),
            None
        );
        assert_eq!(tool(&["trace", "-tT", "a:b"]), Some("trace"));
        assert_eq!(tool(&["trace", "/odd dir/x:p:n*"]), None);
        assert_eq!(tool(&["trace", "c:open(char *p) \"%s\", p"]), Some("trace"));
    }

    #[test]
    fn stackcount_is_bcc_s_when_only_bcc_s_reads_that_way() {
        assert_eq!(
            tool(&["stackcount", "-f", "-p", "1", "u:./app:probe"]),
            Some("stackcount")
        );
        assert_eq!(
            tool(&["stackcount", "-f", "-p", "1", "app:probe"]),
            Some("stackcount")
        );
        assert_eq!(tool(&["stackcount", "app:probe", "-f"]), Some("stackcount"));
        assert_eq!(
            tool(&["stackcount", "-P", "c:malloc", "-D", "5"]),
            Some("stackcount")
        );
        assert_eq!(tool(&["stackcount", "p:c:malloc"]), Some("stackcount"));
        // sdt's own.
        assert_eq!(
            tool(&["stackcount", "-f", "folded", "-c", "./app", "app:slow"]),
            None
        );
        assert_eq!(
            tool(&["stackcount", "--format=json", "-P", "uprobe:libc:malloc"]),
            None
        );
        assert_eq!(tool(&["stackcount", "-fjson", "app:slow"]), None);
        assert_eq!(tool(&["stackcount", "-o", "x", "-P", "app:slow"]), None);
        assert_eq!(
            tool(&["stackcount", "--flamegraph", "a.svg", "-p", "2", "app:x"]),
            None
        );
    }

    #[test]
    fn the_other_tools_are_always_bcc_s() {
        for name in ["tplist", "argdist", "funccount", "funclatency", "memleak"] {
            assert_eq!(tool(&[name]), Some(name));
        }
        assert_eq!(tool(&["list", "-p", "1"]), None);
        assert_eq!(tool(&[]), None);
    }
}
