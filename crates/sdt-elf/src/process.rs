//! The ELF objects a running process has mapped.
//!
//! A process's probes are the probes of its executable and of every shared
//! library it has loaded, which `/proc/PID/maps` lists. Two complications:
//!
//! * **Containers.** A path in the maps is a path in the process's mount
//!   namespace, which may not be ours. `/proc/PID/root/<path>` reaches the
//!   same file from here.
//! * **Deleted and anonymous files.** An upgraded library that a process
//!   still maps shows up as `/usr/lib/x.so (deleted)`, and a runtime-made
//!   object as `/memfd:name (deleted)`. Neither has a path to open, but
//!   `/proc/PID/map_files/<start>-<end>` still reaches the mapped file.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use crate::Error;

/// One file that a process maps with an executable mapping and that is an
/// ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedObject {
    /// The path as the process sees it, without the ` (deleted)` marker.
    pub path: PathBuf,
    /// The file was deleted (or is a memfd) while still mapped.
    pub deleted: bool,
    /// Where this process can open the file: under `/proc/PID/root` or, for
    /// deleted files, `/proc/PID/map_files`.
    pub open_path: PathBuf,
}

/// Lists the ELF objects that process `pid` has executable mappings of, in
/// the order of their first mapping.
pub fn mapped_objects(pid: u32) -> Result<Vec<MappedObject>, Error> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let maps_path = proc.join("maps");
    let maps = std::fs::read_to_string(&maps_path).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            Error::NoSuchProcess { pid }
        } else {
            Error::Process {
                pid,
                path: maps_path,
                source,
            }
        }
    })?;
    let mut objects: Vec<MappedObject> = Vec::new();
    for mapping in parse_maps(&maps) {
        if !mapping.executable || objects.iter().any(|o| o.path == mapping.path) {
            continue;
        }
        let open_path = if mapping.deleted {
            proc.join("map_files").join(mapping.range)
        } else {
            let relative = mapping.path.strip_prefix("/").unwrap_or(&mapping.path);
            proc.join("root").join(relative)
        };
        // A file that cannot be opened is kept: opening it again later gives
        // the error its due place. One that is not ELF is not an object.
        if is_elf(&open_path).unwrap_or(true) {
            objects.push(MappedObject {
                path: mapping.path,
                deleted: mapping.deleted,
                open_path,
            });
        }
    }
    Ok(objects)
}

fn is_elf(path: &std::path::Path) -> io::Result<bool> {
    let mut magic = [0u8; 4];
    File::open(path)?.read_exact(&mut magic)?;
    Ok(magic == *b"\x7fELF")
}

/// A file-backed line of `/proc/PID/maps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    /// `start-end` in hex, the name of its `/proc/PID/map_files` entry.
    range: &'a str,
    executable: bool,
    path: PathBuf,
    deleted: bool,
}

/// Parses the lines of `/proc/PID/maps` that map a file: those whose path
/// starts with `/`. `[heap]`, `[vdso]` and anonymous mappings are left out.
fn parse_maps(text: &str) -> impl Iterator<Item = Mapping<'_>> {
    text.lines().filter_map(|line| {
        // start-end perms offset dev inode   path
        let mut rest = line;
        let mut field = || {
            let trimmed = rest.trim_start();
            let end = trimmed.find(' ').unwrap_or(trimmed.len());
            let (field, tail) = trimmed.split_at(end);
            rest = tail;
            field
        };
        let range = field();
        let perms = field();
        let _offset = field();
        let _dev = field();
        let _inode = field();
        let path = rest.trim_start();
        if !path.starts_with('/') || !range.contains('-') {
            return None;
        }
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(path) => (path, true),
            None => (path, false),
        };
        Some(Mapping {
            range,
            executable: perms.as_bytes().get(2) == Some(&b'x'),
            // The kernel writes a newline in a path as `\012`.
            path: PathBuf::from(path.replace("\\012", "\n")),
            deleted,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_mappings_only() {
        let maps = "\
55d0c8a00000-55d0c8a01000 r--p 00000000 08:01 1234      /usr/bin/app
55d0c8a01000-55d0c8a02000 r-xp 00001000 08:01 1234      /usr/bin/app
55d0c9000000-55d0c9021000 rw-p 00000000 00:00 0         [heap]
7f0000000000-7f0000001000 r-xp 00000000 00:01 99        /memfd:jit (deleted)
7f0000100000-7f0000101000 r-xp 00000000 08:01 77        /opt/my lib/libx.so (deleted)
7f0000200000-7f0000201000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0         [vdso]
";
        let got: Vec<_> = parse_maps(maps).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].path, PathBuf::from("/usr/bin/app"));
        assert!(!got[0].executable);
        assert!(got[1].executable);
        assert_eq!(got[1].range, "55d0c8a01000-55d0c8a02000");
        assert_eq!(
            got[2],
            Mapping {
                range: "7f0000000000-7f0000001000",
                executable: true,
                path: PathBuf::from("/memfd:jit"),
                deleted: true,
            }
        );
        assert_eq!(got[3].path, PathBuf::from("/opt/my lib/libx.so"));
        assert!(got[3].deleted);
    }

    #[test]
    fn own_process_has_its_executable() {
        let objects = mapped_objects(std::process::id()).expect("read own maps");
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        assert!(
            objects.iter().any(|o| o.path == exe),
            "{exe:?} not in {objects:?}"
        );
        for object in &objects {
            assert!(object
                .open_path
                .starts_with(format!("/proc/{}", std::process::id())));
        }
    }

    #[test]
    fn missing_process_is_a_clear_error() {
        // PIDs are at most 2^22 on Linux.
        let err = mapped_objects(u32::MAX).unwrap_err();
        assert!(matches!(err, Error::NoSuchProcess { .. }), "{err}");
    }
}
