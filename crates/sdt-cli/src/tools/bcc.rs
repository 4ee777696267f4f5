//! BCC's command lines, for the binary linked under a BCC tool's name.
//!
//! Scripts, runbooks and a decade of blog posts type `ucalls -l python
//! 1234`, `ugc -l java 1234` and `dbslower mysql -m 1000`. Linked (or
//! installed) as `ucalls`, `uflow`, `ugc`, `uobjnew`, `uthreads`,
//! `ustat`, `dbslower` or `bashreadline` (also with BCC's `.py` or
//! Debian's `-bpfcc` suffix), sdt runs the matching tool with that tool's
//! command line, as clap's multicall mode parses it (`trace`, `funccount`,
//! ... are `sdt-bcc`'s):
//!
//! | name | command line | as |
//! | --- | --- | --- |
//! | `ucalls` | `[-l LANG] [-L] [-T N] [-m] PID [INTERVAL]` | `sdt calls` |
//! | `uflow` | `[-l LANG] [-C CLASS] [-M METHOD] PID` | `sdt flow` |
//! | `ugc` | `[-l LANG] [-m] [-M MIN] PID` (`-m`: milliseconds) | `sdt gc` |
//! | `uobjnew` | `[-l LANG] [-C N] PID [INTERVAL]` | `sdt objnew` |
//! | `uthreads` | `[-l java] PID` | `sdt threads` |
//! | `ustat` | `[-l LANG] [INTERVAL [COUNT]]` | `sdt stat` |
//! | `dbslower` | `{mysql,postgres} [-p PID] [-m MS] [-x PATH]` | `sdt dbslower` |
//! | `bashreadline` | `[-s SHARED]` | `sdt readline` |
//!
//! Where sdt's own command line already reads the same way (`uflow`,
//! `uthreads`, `ustat`, `dbslower`, `bashreadline`) it is the same parser;
//! `ucalls`, `ugc` and `uobjnew` differ from `sdt calls`, `sdt gc` and
//! `sdt objnew` where BCC's meaning clashes with sdt's (`PID INTERVAL`
//! against `INTERVAL COUNT`, and `ugc -m`), so they have parsers of their
//! own. Every sdt option (`-p`, `-c`, `--json`, ...) works under both.
//! BCC's options that have no meaning here (`-S` for system calls or
//! sizes, `-v`) are refused by the parser, with its usage.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use super::{
    DbslowerArgs, FlowArgs, ReadlineArgs, StatArgs, ThreadsArgs, UcallsArgs, UgcArgs, UobjnewArgs,
};

/// The BCC tools sdt answers to, by name.
#[derive(Parser)]
#[command(multicall = true, version, propagate_version = true)]
enum Bcc {
    /// Count method calls, as `sdt calls` (BCC's command line).
    Ucalls(UcallsArgs),
    /// Show method entries and returns, as `sdt flow`.
    Uflow(FlowArgs),
    /// Show garbage collections, as `sdt gc` (BCC's command line).
    Ugc(UgcArgs),
    /// Count allocations by class, as `sdt objnew` (BCC's command line).
    Uobjnew(UobjnewArgs),
    /// Show threads as they start and stop, as `sdt threads`.
    Uthreads(ThreadsArgs),
    /// Watch the runtimes' processes, as `sdt stat`.
    Ustat(StatArgs),
    /// Show slow database queries, as `sdt dbslower`.
    Dbslower(DbslowerArgs),
    /// Show the commands bash reads, as `sdt readline`.
    Bashreadline(ReadlineArgs),
}

/// The BCC tool a program name stands for (`ucalls`, `ucalls.py`,
/// `ucalls-bpfcc`), if any.
pub fn tool_named(invoked_as: &str) -> Option<&'static str> {
    let name = sdt_bcc::bcc_name(invoked_as);
    sdt_tools::TOOLS
        .iter()
        .map(|tool| tool.bcc)
        .find(|bcc| *bcc == name)
}

/// Runs BCC's `tool` with `args` (argv without its first word).
pub fn run(tool: &str, args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let argv = std::iter::once(OsString::from(tool)).chain(args);
    match Bcc::parse_from(argv) {
        Bcc::Ucalls(args) => super::ucalls(args),
        Bcc::Uflow(args) => super::flow(args),
        Bcc::Ugc(args) => super::ugc(args),
        Bcc::Uobjnew(args) => super::uobjnew(args),
        Bcc::Uthreads(args) => super::threads(args),
        Bcc::Ustat(args) => super::stat(args),
        Bcc::Dbslower(args) => super::dbslower(args),
        Bcc::Bashreadline(args) => super::readline(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_parsers_are_consistent() {
        Bcc::command().debug_assert();
    }

    #[test]
    fn bcc_names_with_and_without_suffixes() {
        let names = ["ucalls", "dbslower.py", "ugc-bpfcc", "sdt", "trace"].map(tool_named);
        assert_eq!(
            names,
            [Some("ucalls"), Some("dbslower"), Some("ugc"), None, None]
        );
    }

    #[test]
    fn ucalls_takes_pid_then_interval() {
        let Bcc::Ucalls(args) =
            Bcc::try_parse_from(["ucalls", "-l", "python", "-L", "1234", "5"]).unwrap()
        else {
            panic!("not ucalls");
        };
        let text = format!("{args:?}");
        assert!(text.contains("process: Some(1234)"), "{text}");
        assert!(text.contains("interval: Some(5)"), "{text}");
        assert!(Bcc::try_parse_from(["ucalls", "-p", "1", "2"]).is_err());
    }

    #[test]
    fn ugc_takes_m_as_its_unit_and_big_m_as_minimum() {
        let Bcc::Ugc(args) =
            Bcc::try_parse_from(["ugc", "-l", "java", "-m", "-M", "10", "99"]).unwrap()
        else {
            panic!("not ugc");
        };
        let text = format!("{args:?}");
        assert!(text.contains("milliseconds: true"), "{text}");
        assert!(text.contains("min_ms: Some(10)"), "{text}");
        assert!(text.contains("process: Some(99)"), "{text}");
    }

    #[test]
    fn dbslower_takes_the_engine_first() {
        assert!(Bcc::try_parse_from(["dbslower", "mysql", "-m", "1000"]).is_ok());
        assert!(Bcc::try_parse_from(["dbslower", "postgres", "-p", "1", "-m", "5"]).is_ok());
        assert!(Bcc::try_parse_from(["dbslower", "oracle"]).is_err());
        assert!(Bcc::try_parse_from(["bashreadline", "-s", "/lib/libreadline.so.8"]).is_ok());
    }
}
