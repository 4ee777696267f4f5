//! `sdt list` (being written).
use std::process::ExitCode;

/// List probes.
#[derive(clap::Args)]
pub struct ListArgs {}

pub fn run(_args: ListArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet implemented")
}
