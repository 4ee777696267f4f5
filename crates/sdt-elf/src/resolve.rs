//! Finding a program or library by name, the way a user names it.
//!
//! `sdt list python3.11` and `sdt list libstdc++` should work without a
//! path, as `uprobe:libc:malloc` does in bpftrace. The rules, in order:
//!
//! 1. A name with a `/` is a path and is taken as it is, and so is a bare
//!    name of a file in the current directory (`sdt list a.out`, as with
//!    `readelf`).
//! 2. Any other bare name is looked up as an executable ELF file in `PATH`. Scripts
//!    of the same name, such as pyenv's shims, are passed over: they have no
//!    probes, and the user means the program.
//! 3. Otherwise it is a library. `NAME` matches the files `libNAME.so*` and
//!    `NAME.so*` (`libc`, `c` and `libc.so.6` all find `libc.so.6`), first in
//!    the dynamic loader's cache, `/etc/ld.so.cache`, then in the standard
//!    library directories.
//!
//! The loader cache is read directly rather than by running `ldconfig -p`:
//! its format is small and documented in glibc's `dl-cache.h`, parsing it
//! costs microseconds, and it avoids depending on a program's output format
//! and on `ldconfig` being in `PATH`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::Error;

/// Where the dynamic loader keeps its cache.
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// Resolves a user-supplied program or library name to a path; see the
/// module documentation for the rules.
pub fn resolve(name: &str) -> Result<PathBuf, Error> {
    if name.contains('/') || Path::new(name).is_file() {
        return Ok(PathBuf::from(name));
    }
    let not_found = || Error::NotFound {
        name: name.to_owned(),
    };
    if name.is_empty() {
        return Err(not_found());
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    if let Some(found) = find_in_path(name, &path_var) {
        return Ok(found);
    }
    find_library(name).ok_or_else(not_found)
}

/// Finds an executable ELF file called `name` in a `PATH`-style list.
pub fn find_in_path(name: &str, path_var: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var).find_map(|dir| {
        let candidate = dir.join(name);
        let meta = std::fs::metadata(&candidate).ok()?;
        let executable = meta.is_file() && meta.permissions().mode() & 0o111 != 0;
        (executable && is_elf(&candidate)).then_some(candidate)
    })
}

/// Finds a shared library by name through the loader cache, then the
/// standard directories.
pub fn find_library(name: &str) -> Option<PathBuf> {
    let stems = library_stems(name);
    if let Ok(cache) = std::fs::read(LD_SO_CACHE) {
        if let Some(entries) = parse_ld_cache(&cache) {
            let found = entries
                .into_iter()
                .filter(|e| HOST.is_none_or(|(_, flags)| e.flags & 0xffff == flags))
                .find(|e| stems.iter().any(|stem| matches_stem(e.soname, stem)));
            if let Some(entry) = found {
                return Some(PathBuf::from(entry.path));
            }
        }
    }
    library_dirs().into_iter().find_map(|dir| {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|file| stems.iter().any(|stem| matches_stem(file, stem)))
            .collect();
        names.sort();
        // `libc.so` is often a linker script: only ELF files count.
        names
            .into_iter()
            .map(|file| dir.join(file))
            .find(|path| is_elf(path))
    })
}

/// Finds the library file a `DT_NEEDED` entry names (`libruby-3.1.so.3.1`),
/// exactly that name, as the loader does once the program's own paths are
/// searched: in the loader cache, then in the standard directories.
pub fn find_soname(soname: &str) -> Option<PathBuf> {
    if let Ok(cache) = std::fs::read(LD_SO_CACHE) {
        let found = parse_ld_cache(&cache).and_then(|entries| {
            entries
                .into_iter()
                .filter(|e| HOST.is_none_or(|(_, flags)| e.flags & 0xffff == flags))
                .find(|e| e.soname == soname)
                .map(|e| PathBuf::from(e.path))
        });
        if found.is_some() {
            return found;
        }
    }
    library_dirs()
        .into_iter()
        .map(|dir| dir.join(soname))
        .find(|path| is_elf(path))
}

/// The native libraries the loader cache lists, each once: where a file
/// named only by its build ID may be, when no process names it any more.
pub fn cached_libraries() -> Vec<PathBuf> {
    let Ok(cache) = std::fs::read(LD_SO_CACHE) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = parse_ld_cache(&cache)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| HOST.is_none_or(|(_, flags)| e.flags & 0xffff == flags))
        .map(|e| PathBuf::from(e.path))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// This machine's Debian multiarch tuple and the loader-cache flags of its
/// native libraries (`FLAG_ELF_LIBC6` plus the architecture's flag from
/// `dl-cache.h`). Elsewhere, every cache entry is accepted.
const HOST: Option<(&str, i32)> = if cfg!(target_arch = "x86_64") {
    Some(("x86_64-linux-gnu", 0x0303))
} else if cfg!(target_arch = "aarch64") {
    Some(("aarch64-linux-gnu", 0x0a03))
} else if cfg!(target_arch = "riscv64") {
    Some(("riscv64-linux-gnu", 0x1003))
} else if cfg!(target_arch = "s390x") {
    Some(("s390x-linux-gnu", 0x0403))
} else if cfg!(target_arch = "powerpc64") {
    Some(("powerpc64le-linux-gnu", 0x0503))
} else if cfg!(target_arch = "x86") {
    Some(("i386-linux-gnu", 0x0003))
} else {
    None
};

/// Library directories searched after the cache: this machine's multiarch
/// directories first, then the traditional ones.
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some((multiarch, _)) = HOST {
        dirs.push(Path::new("/lib").join(multiarch));
        dirs.push(Path::new("/usr/lib").join(multiarch));
    }
    dirs.extend(["/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"].map(PathBuf::from));
    dirs
}

/// The file-name stems a library name stands for: `libNAME` and `NAME`.
fn library_stems(name: &str) -> Vec<String> {
    // `libc.so.6` names the file itself; cut it back to its stem.
    let name = name.find(".so").map_or(name, |i| {
        let rest = &name[i + 3..];
        if rest.is_empty() || rest.starts_with('.') {
            &name[..i]
        } else {
            name
        }
    });
    let mut stems = vec![format!("lib{name}")];
    if name.starts_with("lib") {
        stems.insert(0, name.to_owned());
    } else {
        stems.push(name.to_owned());
    }
    stems
}

/// Whether a file name is `STEM.so` or `STEM.so.VERSION`.
fn matches_stem(file: &str, stem: &str) -> bool {
    file.strip_prefix(stem)
        .and_then(|rest| rest.strip_prefix(".so"))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// One entry of the loader cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CacheEntry<'a> {
    flags: i32,
    soname: &'a str,
    path: &'a str,
}

/// Parses the new ("glibc-ld.so.cache1.1") format of `/etc/ld.so.cache`,
/// alone or after the old "ld.so-1.7.0" table that older glibc wrote first.
/// Returns `None` for anything else. Entries come in the loader's order of
/// preference.
///
/// The layout, from glibc's `sysdeps/generic/dl-cache.h`: a 48-byte header
/// (magic and version, 20 bytes; `nlibs` u32; string-table length u32; a
/// flags byte whose value 2 means little-endian and 3 big-endian; 3 bytes of
/// padding; extension offset u32; 12 unused bytes), then `nlibs` entries of
/// 24 bytes (flags i32, key u32, value u32, OS version u32, hwcap u64). Key
/// and value are offsets of NUL-terminated strings from the header's start.
fn parse_ld_cache(data: &[u8]) -> Option<Vec<CacheEntry<'_>>> {
    const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
    let start = if data.starts_with(NEW_MAGIC) {
        0
    } else if data.starts_with(OLD_MAGIC) {
        // Old header: 11-byte magic padded to 12, nlibs u32, 12-byte entries;
        // the new table follows, aligned to 8.
        let old_nlibs = u32::from_ne_bytes(data.get(12..16)?.try_into().ok()?) as usize;
        old_nlibs.checked_mul(12)?.checked_add(16 + 7)? & !7
    } else {
        return None;
    };
    let cache = data.get(start..)?;
    if !cache.starts_with(NEW_MAGIC) {
        return None;
    }
    let little = match cache.get(28)? {
        0 => cfg!(target_endian = "little"),
        2 => true,
        3 => false,
        _ => return None,
    };
    let u32_at = |offset: usize| -> Option<u32> {
        let bytes: [u8; 4] = cache.get(offset..offset.checked_add(4)?)?.try_into().ok()?;
        Some(if little {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        })
    };
    let string_at = |offset: u32| -> Option<&str> {
        let bytes = cache.get(offset as usize..)?;
        let nul = bytes.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&bytes[..nul]).ok()
    };
    let nlibs = u32_at(20)? as usize;
    // Each entry takes 24 bytes: a count larger than the file is corrupt.
    if nlibs > cache.len() / 24 {
        return None;
    }
    (0..nlibs)
        .map(|i| {
            let entry = 48 + i * 24;
            Some(CacheEntry {
                flags: u32_at(entry)? as i32,
                soname: string_at(u32_at(entry + 4)?)?,
                path: string_at(u32_at(entry + 8)?)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a new-format cache with the given entries, little-endian.
    fn cache(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let table_end = 48 + entries.len() * 24;
        let mut table = Vec::new();
        for &(flags, key, value) in entries {
            let key_at = table_end + strings.len();
            strings.extend_from_slice(key.as_bytes());
            strings.push(0);
            let value_at = table_end + strings.len();
            strings.extend_from_slice(value.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_le_bytes());
            table.extend_from_slice(&(key_at as u32).to_le_bytes());
            table.extend_from_slice(&(value_at as u32).to_le_bytes());
            table.extend_from_slice(&[0; 12]);
        }
        let mut out = b"glibc-ld.so.cache1.1".to_vec();
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        out.extend_from_slice(&[2, 0, 0, 0]);
        out.extend_from_slice(&[0; 16]);
        assert_eq!(out.len(), 48);
        out.extend(table);
        out.extend(strings);
        out
    }

    #[test]
    fn parses_new_format() {
        let data = cache(&[
            (0x0303, "libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
            (0x0003, "libc.so.6", "/lib/i386-linux-gnu/libc.so.6"),
        ]);
        let entries = parse_ld_cache(&data).unwrap();
        assert_eq!(
            entries,
            [
                CacheEntry {
                    flags: 0x0303,
                    soname: "libz.so.1",
                    path: "/lib/x86_64-linux-gnu/libz.so.1"
                },
                CacheEntry {
                    flags: 3,
                    soname: "libc.so.6",
                    path: "/lib/i386-linux-gnu/libc.so.6"
                },
            ]
        );
    }

    #[test]
    fn parses_new_format_after_old_table() {
        let mut data = b"ld.so-1.7.0\0".to_vec();
        data.extend_from_slice(&1u32.to_ne_bytes());
        data.extend_from_slice(&[0; 12]); // one old entry
        data.extend_from_slice(&[0; 4]); // pad 28 to 32
        data.extend(cache(&[(0x0303, "libm.so.6", "/lib/libm.so.6")]));
        let entries = parse_ld_cache(&data).unwrap();
        assert_eq!(entries[0].soname, "libm.so.6");
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert_eq!(parse_ld_cache(b""), None);
        assert_eq!(parse_ld_cache(b"glibc-ld.so.cache1.1"), None);
        let mut data = cache(&[(0x0303, "libz.so.1", "/lib/libz.so.1")]);
        data[20] = 0xff; // nlibs far too large
        assert_eq!(parse_ld_cache(&data), None);
        let data = cache(&[(0x0303, "libz.so.1", "/lib/libz.so.1")]);
        for len in 0..data.len() {
            let _ = parse_ld_cache(&data[..len]);
        }
    }

    #[test]
    fn stems_and_matching() {
        assert_eq!(library_stems("c"), ["libc", "c"]);
        assert_eq!(library_stems("libc"), ["libc", "liblibc"]);
        assert_eq!(library_stems("libc.so.6"), ["libc", "liblibc"]);
        assert_eq!(library_stems("libstdc++"), ["libstdc++", "liblibstdc++"]);
        assert!(matches_stem("libc.so.6", "libc"));
        assert!(matches_stem("libc.so", "libc"));
        assert!(!matches_stem("libcap.so.2", "libc"));
        assert!(!matches_stem("libc.sox", "libc"));
        assert!(matches_stem("libpython3.11.so.1.0", "libpython3.11"));
    }

    #[test]
    fn finds_system_libraries() {
        for name in ["libc", "c", "libc.so.6"] {
            let path = resolve(name).unwrap();
            assert_eq!(path.file_name().unwrap(), "libc.so.6", "{name}");
        }
        let err = resolve("no-such-thing-sdt").unwrap_err().to_string();
        assert!(err.contains("no-such-thing-sdt"), "{err}");
    }

    #[test]
    fn finds_programs_in_path() {
        let found = find_in_path("sh", OsStr::new("/nonexistent:/bin:/usr/bin")).unwrap();
        assert!(found.ends_with("sh"));
        assert_eq!(find_in_path("sh", OsStr::new("/nonexistent")), None);
    }
}
