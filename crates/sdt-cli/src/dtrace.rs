//! `sdt dtrace`: SystemTap's `dtrace` command for C builds (`-h` header,
//! `-G` semaphores object). The command line and everything it does live
//! in `sdt-dtrace`.

use std::ffi::OsString;
use std::process::ExitCode;

use sdt_dtrace::command::{Request, USAGE};

/// Write the C header (-h) or the semaphores object (-G) of a DTrace
/// provider file, as SystemTap's dtrace does; `sdt dtrace --help` for more.
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct DtraceArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

pub fn run(args: DtraceArgs) -> anyhow::Result<ExitCode> {
    run_args(&args.args)
}

/// `dtrace ARGS`, also when sdt is installed under the name `dtrace`.
pub fn run_args(args: &[OsString]) -> anyhow::Result<ExitCode> {
    match Request::parse(args) {
        Ok(Request::Help) => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Request::Run(invocation)) => {
            invocation.run()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            eprintln!("sdt dtrace: {why}\n\n{USAGE}");
            Ok(ExitCode::from(2))
        }
    }
}
