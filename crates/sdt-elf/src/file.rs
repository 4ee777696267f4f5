//! An ELF file, open and memory-mapped.
//!
//! Mapping instead of reading means the kernel pages in only what the
//! parser touches: the headers and the note section. A 30 MB `libjvm.so`
//! costs a few page faults, not 30 MB of copying.
//!
//! The file stays open for as long as any clone of the [`ElfFile`] lives,
//! and its descriptor can be shared ([`ElfFile::descriptor`]). A tracer
//! that attaches through that descriptor (as `/proc/self/fd/N`) puts its
//! uprobes on the very inode whose notes and instructions were read here:
//! the probe offsets, the semaphore offsets and the no-op check all come
//! from the same file, whatever happens to its name meanwhile.

use std::fmt;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;

use crate::insn::{classify, site_code, SiteInstruction};
use crate::symbols::SymbolTable;
use crate::{parse, ElfError, Error, Probes, Site, SymbolError, SymbolMemory};

/// An open, memory-mapped ELF file. Clones share the descriptor and the
/// mapping.
#[derive(Clone, Debug)]
pub struct ElfFile {
    path: PathBuf,
    id: FileId,
    fd: Arc<OwnedFd>,
    map: Option<Arc<Mmap>>,
    /// The part of the file that is the ELF image: all of it, or a member
    /// of an archive (see [`ElfFile::member`]).
    range: Option<std::ops::Range<usize>>,
    /// Symbol addresses and loaded ranges, read on first use; see
    /// [`ElfFile::symbol_memory`].
    symbols: Arc<OnceLock<SymbolTable>>,
}

/// Which file an open file is: its device and inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// The device, as `st_dev` encodes it (see `makedev(3)`).
    pub device: u64,
    /// The inode number.
    pub inode: u64,
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {}:{} inode {}",
            rustix::fs::major(self.device),
            rustix::fs::minor(self.device),
            self.inode
        )
    }
}

impl ElfFile {
    /// Opens and maps `path`. Fails if the file cannot be read; whether it
    /// is ELF is checked by [`ElfFile::probes`].
    pub fn open(path: impl Into<PathBuf>) -> Result<ElfFile, Error> {
        let path = path.into();
        match File::open(&path) {
            Ok(file) => ElfFile::from_file(file, path),
            Err(source) => Err(Error::Open { path, source }),
        }
    }

    /// Maps a file that is already open. `path` is only the name that
    /// messages and [`ElfFile::path`] give it: nothing opens it again.
    pub fn from_file(file: File, path: impl Into<PathBuf>) -> Result<ElfFile, Error> {
        let path = path.into();
        let open_error = |source| Error::Open {
            path: path.clone(),
            source,
        };
        let meta = file.metadata().map_err(open_error)?;
        if !meta.is_file() {
            return Err(open_error(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        use std::os::unix::fs::MetadataExt;
        let id = FileId {
            device: meta.dev(),
            inode: meta.ino(),
        };
        // An empty file cannot be mapped, and is not ELF anyway.
        let map = if meta.len() == 0 {
            None
        } else {
            // SAFETY: the map is only ever read as bytes. If another process
            // truncates the file meanwhile, reads past the new end fault
            // (SIGBUS); every tool that maps files accepts that risk, and
            // listing probes does not justify copying 30 MB libraries.
            #[allow(unsafe_code)]
            let map = unsafe { Mmap::map(&file) }.map_err(open_error)?;
            Some(Arc::new(map))
        };
        Ok(ElfFile {
            path,
            id,
            fd: Arc::new(file.into()),
            map,
            range: None,
            symbols: Arc::default(),
        })
    }

    /// The path the file was opened by, or the name it was given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The device and inode of the open file.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// The open descriptor, shared: it stays open while a clone of it or
    /// of this file lives.
    pub fn descriptor(&self) -> &Arc<OwnedFd> {
        &self.fd
    }

    /// The file's contents: the ELF image's bytes (a member's, for a
    /// member of an archive).
    pub fn data(&self) -> &[u8] {
        let all = self.map.as_deref().map(|m| &m[..]).unwrap_or_default();
        match &self.range {
            Some(range) => all.get(range.clone()).unwrap_or_default(),
            None => all,
        }
    }

    /// Where [`data`](ElfFile::data) starts in the file: 0, or a member's
    /// offset in its archive. A file offset in the image plus this is the
    /// offset in the open file, which the kernel attaches at.
    pub fn base(&self) -> u64 {
        self.range.as_ref().map_or(0, |r| r.start as u64)
    }

    /// The image stored at `range` of this file (a member of a ZIP
    /// archive, see [`crate::stored_member`]), sharing its descriptor.
    pub fn member(&self, range: std::ops::Range<usize>) -> ElfFile {
        ElfFile {
            range: Some(range),
            symbols: Arc::default(),
            ..self.clone()
        }
    }

    /// The file's GNU build id (its `NT_GNU_BUILD_ID` note), if it is ELF
    /// and has one.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        use object::Object;
        let file = object::File::parse(self.data()).ok()?;
        file.build_id().ok().flatten().map(<[u8]>::to_vec)
    }

    /// Parses the file's probes; see [`parse`].
    pub fn probes(&self) -> Result<Probes<'_>, Error> {
        parse(self.data()).map_err(|source: ElfError| Error::Elf {
            path: self.path.clone(),
            source,
        })
    }

    /// The link-time address of the memory that an argument such as
    /// `8+table(%rip)` names, before the registers it adds, if any: the
    /// address of its symbol in this file's symbol table, plus its
    /// offset. The process has that memory at this address moved by the
    /// file's load bias. `size` is the argument's size, which must lie in
    /// a segment the file loads.
    ///
    /// Fails if the file does not define the symbol (a stripped file keeps
    /// only the symbols it exports), defines it twice at different
    /// addresses, or does not load the address.
    pub fn symbol_memory(&self, memory: &SymbolMemory<'_>, size: u8) -> Result<u64, SymbolError> {
        self.symbols
            .get_or_init(|| SymbolTable::read(self.data()).unwrap_or_default())
            .address(memory, size)
    }

    /// Classifies the instruction at a site of this file; see
    /// [`crate::classify`].
    pub fn site_instruction(&self, site: &Site<'_>) -> SiteInstruction {
        classify(site.arch, site_code(self.data(), site))
    }
}
