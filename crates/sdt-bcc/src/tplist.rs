//! stub
use std::process::ExitCode;
#[derive(clap::Args, Debug)]
pub struct Args {}
pub fn run(_: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("todo")
}
