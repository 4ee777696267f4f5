//! `sdt list`: the probes of files and running processes; the work is
//! `sdt-list`'s.

use std::ffi::OsString;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Targets and patterns:
  A FILE is a path, or the bare name of a file in the current directory.
  Another NAME without a `/` is looked up as a program in PATH, then as a
  library: NAME finds libNAME.so* or NAME.so* in the loader cache
  (/etc/ld.so.cache) and the standard library directories, so `libc`, `c`
  and `libstdc++` all work.

  The last argument is a PATTERN, not a target, when it is not a file and
  contains `:` or a glob character (* ? [ {). A PATTERN is PROVIDER:NAME with
  a glob on each side; without a `:`, it matches the probe name alone.

Output:
  By default, one line per probe: `PATH PROVIDER:NAME`.
  -v adds every site with its address and file offset, its semaphore, and
  each argument decoded: size, signedness, and register, memory or constant.
  --json prints one JSON array with one object per probe. Each object has
  path, pid, arch, provider, name and sites; each site has the note's raw
  pc, base and semaphore, the corrected address, file_offset,
  semaphore_address, semaphore_offset and args.
  Malformed notes are skipped with a warning on stderr. The exit status is 0
  on success, even when nothing matches, and 2 on errors.

Examples:
  sdt list /usr/bin/python3.11               every probe of CPython
  sdt list python3.11 'python:function__*'   found through PATH, filtered
  sdt list libjvm '*:gc*'                    the JVM's GC probes, via the loader cache
  sdt list -v libstdc++                      sites, semaphores and arguments
  sdt list -p 1234                           every object that process 1234 maps
  sdt list --json ./a.out | jq '.[].name'    probe names, for scripts";

/// List the USDT probes of ELF files and running processes.
#[derive(clap::Args, Debug)]
#[command(
    after_help = AFTER_HELP,
    override_usage = "sdt list [-v] [--json] [-p PID]... [FILE|NAME]... [PATTERN]"
)]
pub struct ListArgs {
    /// Show every site with addresses, file offsets, semaphores and arguments.
    #[arg(short, long)]
    verbose: bool,

    /// Print one JSON array of probes with every site and argument.
    #[arg(long)]
    json: bool,

    /// List the probes of every ELF object that process PID maps. Repeatable.
    #[arg(short, long = "pid", value_name = "PID")]
    pids: Vec<u32>,

    /// Files or program and library names, optionally followed by a PATTERN
    /// on PROVIDER:NAME.
    #[arg(value_name = "FILE|NAME")]
    targets: Vec<OsString>,
}

pub fn run(args: ListArgs) -> anyhow::Result<ExitCode> {
    sdt_list::probes::list(&sdt_list::probes::Request {
        words: args.targets,
        pids: args.pids,
        json: args.json,
        verbose: args.verbose,
    })
}
