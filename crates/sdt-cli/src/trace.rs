//! `sdt trace` (being written).
use std::process::ExitCode;

/// Trace probes.
#[derive(clap::Args)]
pub struct TraceArgs {}

pub fn run(_args: TraceArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet implemented")
}
