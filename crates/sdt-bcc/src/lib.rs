//! BCC's tools' command lines, and what each runs.
//!
//! Runbooks, blog posts and the documents that teach USDT type BCC's
//! tools: `tplist -l ./app`, `trace 'u:./app:probe "%u", arg1' -T`,
//! `funccount 'c:malloc*'`, `stackcount -f -p PID u:./app:probe`. BCC
//! needs clang and kernel headers at run time; sdt answers to the same
//! command lines with programs in its own language:
//!
//! | name | what | runs |
//! | --- | --- | --- |
//! | `tplist` | USDT probes of a file or process, or the kernel's tracepoints | `sdt_list::tplist` |
//! | `trace` | a line for each hit, with a message | `sdt_tools::bcc::trace` |
//! | `argdist` | counts and log2 histograms of expressions | `sdt_tools::bcc::argdist` |
//! | `funccount` | calls of functions, probes and tracepoints | `sdt_tools::bcc::funccount` |
//! | `funclatency` | how long functions take, as a histogram | `sdt_tools::bcc::funclatency` |
//! | `stackcount` | the user stacks that reach a probe | `sdt_tools::bcc::stackcount` |
//! | `memleak` | allocations not freed, by stack | `sdt_tools::bcc::memleak` |
//!
//! Each is reachable three ways: as the program's name (a link named
//! `funccount`, `funccount.py` or Debian's `funccount-bpfcc`), as `sdt
//! NAME ...`, and, for `trace` and `stackcount`, whose names sdt's own
//! commands already have, as `sdt trace`/`sdt stackcount` when the
//! arguments read as BCC's ([`subcommand`] says how that is told).
//!
//! Every tool takes BCC's options with BCC's meanings, and sdt's own:
//! `--cmd CMD` (BCC's `-c` means something else in most of them),
//! `--json` and `--print-program`. A BCC option sdt cannot honour (kernel
//! allocations, build-id symbol files) is refused in one line that names
//! it.

#![forbid(unsafe_code)]

mod argdist;
mod form;
mod funccount;
mod funclatency;
mod memleak;
mod stackcount;
mod tplist;
mod trace;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

pub use form::subcommand;

/// BCC's tools, by name.
#[derive(Parser)]
#[command(multicall = true, version, propagate_version = true)]
enum Bcc {
    Tplist(tplist::Args),
    Trace(trace::Args),
    Argdist(argdist::Args),
    Funccount(funccount::Args),
    Funclatency(funclatency::Args),
    Stackcount(stackcount::Args),
    Memleak(memleak::Args),
}

/// The tools this crate has, by BCC's names.
pub const TOOLS: [&str; 7] = [
    "tplist",
    "trace",
    "argdist",
    "funccount",
    "funclatency",
    "stackcount",
    "memleak",
];

/// A program name as BCC's tool name: without BCC's `.py` or Debian's
/// `-bpfcc` suffix.
pub fn bcc_name(invoked_as: &str) -> &str {
    invoked_as
        .strip_suffix(".py")
        .or_else(|| invoked_as.strip_suffix("-bpfcc"))
        .unwrap_or(invoked_as)
}

/// The tool of this crate a program name stands for, if any.
pub fn tool_named(invoked_as: &str) -> Option<&'static str> {
    let name = bcc_name(invoked_as);
    TOOLS.into_iter().find(|tool| *tool == name)
}

/// Runs BCC's `tool` with `args` (the words after its name).
pub fn run(tool: &str, args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let argv = std::iter::once(OsString::from(tool)).chain(args);
    match Bcc::parse_from(argv) {
        Bcc::Tplist(args) => tplist::run(args),
        Bcc::Trace(args) => trace::run(args),
        Bcc::Argdist(args) => argdist::run(args),
        Bcc::Funccount(args) => funccount::run(args),
        Bcc::Funclatency(args) => funclatency::run(args),
        Bcc::Stackcount(args) => stackcount::run(args),
        Bcc::Memleak(args) => memleak::run(args),
    }
}

/// sdt's own options, which every tool here takes besides BCC's.
#[derive(clap::Args, Debug)]
struct Sdt {
    /// Run CMD (split as a shell splits it), trace it and the processes
    /// it starts, and stop when it ends, with its exit status. Held
    /// before its first instruction until the probes are attached.
    #[arg(long = "cmd", value_name = "CMD", conflicts_with = "pid")]
    command: Option<String>,

    /// One JSON object per event or report instead of BCC's text.
    #[arg(long)]
    json: bool,

    /// Print the program the tool runs (for `sdt run`) and exit.
    #[arg(long)]
    print_program: bool,
}

impl Sdt {
    /// What every tool is told, for process `pid` (`-p`) or the command.
    fn common(self, pid: Option<i32>) -> sdt_tools::Common {
        sdt_tools::Common {
            lang: None,
            pids: pid.into_iter().collect(),
            cgroup: None,
            command: self.command,
            format: if self.json {
                sdt_output::Format::JSON
            } else {
                sdt_output::Format::TEXT
            },
            print_program: self.print_program,
            pictures: sdt_tools::Pictures::default(),
        }
    }
}

/// An option of BCC's that sdt cannot honour, refused in one line.
fn refuse(tool: &str, option: &str, why: &str) -> anyhow::Error {
    anyhow::anyhow!("{tool}: {option} is not supported: {why}")
}

/// Why `memleak`'s kernel mode is refused.
const USER_SPACE: &str = "sdt's memleak traces a process's allocators, in user space";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_parsers_are_consistent() {
        Bcc::command().debug_assert();
    }

    #[test]
    fn every_tool_s_help_shows_bcc_s_usage_and_examples() {
        for tool in TOOLS {
            let help = match Bcc::try_parse_from([tool, "--help"]) {
                Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.to_string(),
                _ => panic!("{tool} --help"),
            };
            assert!(help.contains(&format!("Usage: {tool} [-h]")), "{help}");
            assert!(help.contains("\nexamples:\n"), "{help}");
        }
    }

    #[test]
    fn names_with_and_without_suffixes() {
        assert_eq!(tool_named("trace"), Some("trace"));
        assert_eq!(tool_named("funccount.py"), Some("funccount"));
        assert_eq!(tool_named("memleak-bpfcc"), Some("memleak"));
        assert_eq!(tool_named("ucalls"), None);
        assert_eq!(bcc_name("ucalls-bpfcc"), "ucalls");
        assert_eq!(tool_named("sdt"), None);
    }
}
