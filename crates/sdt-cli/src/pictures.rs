//! `--flamegraph FILE` and `--timeline FILE`: pictures written beside
//! the chosen output, each a sink of `sdt-output` that the run's
//! [`Tee`](sdt_output::tee::Tee) feeds.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sdt_output::flamegraph::Flamegraph;
use sdt_output::timeline::{Timeline, DEFAULT_LIMIT};
use sdt_output::Sink;

/// The timeline options of every command that can write one.
#[derive(clap::Args, Debug, Clone)]
pub struct TimelineArgs {
    /// Also write a timeline of what every thread did to FILE, in the
    /// Chrome Trace Event format that Perfetto UI (ui.perfetto.dev),
    /// chrome://tracing and speedscope open: one track per thread.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,

    /// Events the timeline holds at most; after that, sdt adds nothing to
    /// it and says so.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT, requires = "timeline")]
    pub timeline_limit: u64,
}

impl Default for TimelineArgs {
    /// No timeline.
    fn default() -> TimelineArgs {
        TimelineArgs {
            timeline: None,
            timeline_limit: DEFAULT_LIMIT,
        }
    }
}

impl TimelineArgs {
    /// The timeline sink, if one was asked for; the probes
    /// (`(provider, name)`) whose hits it pairs into slices.
    pub fn sink<'p>(
        &self,
        probes: impl IntoIterator<Item = (&'p str, &'p str)>,
    ) -> anyhow::Result<Option<Box<dyn Sink>>> {
        let Some(path) = &self.timeline else {
            return Ok(None);
        };
        let file = create(path)?;
        let timeline = Timeline::new(
            Box::new(BufWriter::with_capacity(1 << 16, file)),
            &path.display().to_string(),
            Box::new(io::stderr()),
        )
        .limit(self.timeline_limit)
        .pairing(probes);
        Ok(Some(Box::new(timeline)))
    }
}

/// The flame graph sink for `--flamegraph FILE`, which is written when
/// the run ends; a path that cannot be written fails now, before
/// anything is traced (an existing file is left as it is until then).
pub fn flamegraph(path: &Path) -> anyhow::Result<Flamegraph<'static>> {
    let writable = if path.exists() {
        std::fs::OpenOptions::new().write(true).open(path).map(drop)
    } else {
        File::create(path).and_then(|_| std::fs::remove_file(path))
    };
    writable.with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Flamegraph::new(path, Box::new(io::stderr())))
}

fn create(path: &Path) -> anyhow::Result<File> {
    File::create(path).with_context(|| format!("cannot create {}", path.display()))
}
