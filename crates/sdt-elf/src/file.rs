//! An ELF file on disk, memory-mapped.
//!
//! Mapping instead of reading means the kernel pages in only what the
//! parser touches: the headers and the note section. A 30 MB `libjvm.so`
//! costs a few page faults, not 30 MB of copying.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::insn::{classify, site_code, SiteInstruction};
use crate::{parse, ElfError, Error, Probes, Site};

/// An open, memory-mapped ELF file.
#[derive(Debug)]
pub struct ElfFile {
    path: PathBuf,
    map: Option<Mmap>,
}

impl ElfFile {
    /// Opens and maps `path`. Fails if the file cannot be read; whether it
    /// is ELF is checked by [`ElfFile::probes`].
    pub fn open(path: impl Into<PathBuf>) -> Result<ElfFile, Error> {
        let path = path.into();
        let open_error = |source| Error::Open {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(open_error)?;
        let meta = file.metadata().map_err(open_error)?;
        if !meta.is_file() {
            return Err(Error::Open {
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
                path,
            });
        }
        // An empty file cannot be mapped, and is not ELF anyway.
        let map = if meta.len() == 0 {
            None
        } else {
            // SAFETY: the map is only ever read as bytes. If another process
            // truncates the file meanwhile, reads past the new end fault
            // (SIGBUS); every tool that maps files accepts that risk, and
            // listing probes does not justify copying 30 MB libraries.
            Some(unsafe { Mmap::map(&file) }.map_err(open_error)?)
        };
        Ok(ElfFile { path, map })
    }

    /// The path the file was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's contents.
    pub fn data(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Parses the file's probes; see [`parse`].
    pub fn probes(&self) -> Result<Probes<'_>, Error> {
        parse(self.data()).map_err(|source: ElfError| Error::Elf {
            path: self.path.clone(),
            source,
        })
    }

    /// Classifies the instruction at a site of this file; see
    /// [`crate::classify`].
    pub fn site_instruction(&self, site: &Site<'_>) -> SiteInstruction {
        classify(site.arch, site_code(self.data(), site))
    }
}
