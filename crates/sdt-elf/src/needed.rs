//! The shared libraries a program loads at start: its `DT_NEEDED`
//! entries, found the way the dynamic loader finds them.
//!
//! A runtime's probes are often not in the program a command starts but
//! in a library it links: `ruby` links `libruby`, and a program that
//! embeds Python (uWSGI, a C program calling `Py_Initialize`) links
//! `libpython3.x.so`. Reading the program's dynamic section tells which,
//! before the program runs.
//!
//! The search order is glibc's (`ld.so(8)`): `DT_RPATH` when the file has
//! no `DT_RUNPATH`, then `LD_LIBRARY_PATH`, then `DT_RUNPATH`, then the
//! loader cache and the standard directories ([`find_soname`]). `$ORIGIN`
//! in a path is the program's directory. Only the program's own entries
//! are read, not those of the libraries it needs: what a library loads in
//! turn, or what the program loads later with `dlopen`, is not seen here.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile, FileHeader};
use object::{elf, Endianness};

use crate::resolve::find_soname;
use crate::ElfError;

/// What a program's dynamic section asks of the loader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependencies {
    /// The `DT_NEEDED` entries, in order: library file names
    /// (`libpython3.11.so.1.0`), or paths when they hold a `/`.
    pub needed: Vec<String>,
    /// The directories of `DT_RPATH`, as written (`$ORIGIN/../lib`).
    pub rpath: Vec<String>,
    /// The directories of `DT_RUNPATH`, as written.
    pub runpath: Vec<String>,
}

/// Reads the dynamic section of an ELF file. A file without one (a static
/// program) has no dependencies.
pub fn dependencies(data: &[u8]) -> Result<Dependencies, ElfError> {
    match object::File::parse(data).map_err(|_| ElfError::NotElf)? {
        object::File::Elf32(file) => read_dynamic(&file),
        object::File::Elf64(file) => read_dynamic(&file),
        _ => Err(ElfError::NotElf),
    }
}

fn read_dynamic<'data, Elf: FileHeader<Endian = Endianness>>(
    file: &ElfFile<'data, Elf>,
) -> Result<Dependencies, ElfError> {
    let table = file
        .elf_dynamic_table()
        .map_err(|_| ElfError::Corrupt("the dynamic section"))?;
    let mut found = Dependencies::default();
    for entry in table.iter() {
        let list = match entry.tag {
            elf::DT_NEEDED => &mut found.needed,
            elf::DT_RPATH => &mut found.rpath,
            elf::DT_RUNPATH => &mut found.runpath,
            _ => continue,
        };
        let Ok(bytes) = table.string(entry) else {
            continue;
        };
        let text = String::from_utf8_lossy(bytes);
        if entry.tag == elf::DT_NEEDED {
            list.push(text.into_owned());
        } else {
            list.extend(text.split(':').filter(|d| !d.is_empty()).map(str::to_owned));
        }
    }
    Ok(found)
}

/// The libraries `program` needs, each found as the loader would find it
/// with `ld_library_path` as `LD_LIBRARY_PATH`; those not found are left
/// out.
pub fn needed_libraries(
    program: &Path,
    data: &[u8],
    ld_library_path: Option<&OsStr>,
) -> Result<Vec<PathBuf>, ElfError> {
    let deps = dependencies(data)?;
    let origin = std::fs::canonicalize(program)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let expand = |dir: &String| {
        PathBuf::from(
            dir.replace("${ORIGIN}", &origin.to_string_lossy())
                .replace("$ORIGIN", &origin.to_string_lossy()),
        )
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    if deps.runpath.is_empty() {
        dirs.extend(deps.rpath.iter().map(expand));
    }
    dirs.extend(std::env::split_paths(ld_library_path.unwrap_or_default()));
    dirs.extend(deps.runpath.iter().map(expand));
    Ok(deps
        .needed
        .iter()
        .filter_map(|name| {
            if name.contains('/') {
                let path = PathBuf::from(name);
                return path.is_file().then_some(path);
            }
            dirs.iter()
                .map(|dir| dir.join(name))
                .find(|path| path.is_file())
                .or_else(|| find_soname(name))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dynamically linked program on every machine that runs the
    /// tests: the test binary itself needs libc.
    #[test]
    fn finds_libc_among_the_needed_libraries_of_this_test() {
        let me = std::env::current_exe().unwrap();
        let data = std::fs::read(&me).unwrap();
        let deps = dependencies(&data).unwrap();
        assert!(
            deps.needed.iter().any(|n| n.starts_with("libc.so")),
            "{deps:?}"
        );
        let found = needed_libraries(&me, &data, None).unwrap();
        assert!(
            found.iter().any(|p| p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("libc.so")),
            "{found:?}"
        );
    }

    #[test]
    fn a_file_that_is_not_elf_is_an_error_not_a_panic() {
        assert!(dependencies(b"#!/bin/sh\n").is_err());
        assert!(dependencies(b"").is_err());
    }
}
