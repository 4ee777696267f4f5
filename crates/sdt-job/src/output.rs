//! Where a script's output goes, and how it is buffered (`-o`, `-B`).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context;

/// `-B`: when output is flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffering {
    /// After every write.
    None,
    /// After every line.
    Line,
    /// When the buffer is full, and at least every time the runner looks
    /// for records (every 20 ms), so nothing sits unseen for long.
    Full,
}

/// Standard output or a file, buffered as asked.
pub struct Output {
    inner: BufWriter<Box<dyn Write>>,
    buffering: Buffering,
}

impl Output {
    pub fn open(path: Option<&Path>, buffering: Buffering) -> anyhow::Result<Output> {
        let sink: Box<dyn Write> = match path {
            Some(path) => Box::new(
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
            ),
            None => Box::new(io::stdout()),
        };
        Ok(Output {
            inner: BufWriter::with_capacity(1 << 16, sink),
            buffering,
        })
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        match self.buffering {
            Buffering::None => self.inner.flush()?,
            Buffering::Line if buf[..n].contains(&b'\n') => self.inner.flush()?,
            _ => {}
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
