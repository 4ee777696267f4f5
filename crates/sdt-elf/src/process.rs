//! The ELF objects a running process has mapped, opened so that what sdt
//! reads is the file the process maps.
//!
//! A process's probes are the probes of its executable and of every shared
//! library it has loaded, which `/proc/PID/maps` lists with the device and
//! inode of each file. The path on a maps line is only a name, in the
//! process's mount namespace, and the process may change what it names
//! after mapping the file: mount over a directory, swap a directory for a
//! symlink, rename a new file over the old one. A name that the traced
//! process controls must never decide which file a tracer running as root
//! reads or attaches to. So every object is opened without trusting its
//! name:
//!
//! 1. **`/proc/PID/map_files/START-END`** is the mapped file itself, found
//!    through the mapping, not through a name; deleted files and memfds
//!    included. Opening it needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE).
//! 2. **Without that privilege**, the path is resolved with `openat2` and
//!    `RESOLVE_IN_ROOT` from the process's root directory: `..` and
//!    absolute symlinks stay inside that root instead of escaping to ours,
//!    and magic links (`/proc/self/...`) are not followed.
//!
//! Either way the file is first opened with `O_PATH`, which reads nothing
//! and has no side effects even on a FIFO or a device, and `fstat` must
//! give the device and inode that the maps line names, or the object is
//! refused with a reason that names it. Only then is it reopened for
//! reading, through `/proc/self/fd/N`, which the kernel resolves to the
//! same open file without a name lookup. The descriptor stays open in the
//! [`ElfFile`], so a tracer can attach to that same inode.
//!
//! All of the process's files are read through one descriptor of its
//! `/proc/PID` directory. That directory belongs to the process that had
//! the PID when it was opened: if that process exits and another one gets
//! its PID, reads through it fail instead of describing the newcomer.
//!
//! **memfd objects.** A shared object loaded from a `memfd` (run-time
//! probes: `sdt::dynamic`, libstapsdt) has no path; the maps call it
//! `/memfd:NAME (deleted)`. When the process holds a descriptor open on it,
//! as both of those libraries do while the object is loaded, the object is
//! named `/proc/PID/fd/N` after the lowest such descriptor: a name that
//! root can open, and the one bcc and bpftrace give it (`bpftrace -p PID`
//! finds the probes of `usdt:/proc/PID/fd/N:...` and reads their
//! arguments; through any other name of the object it cannot). The file
//! is still opened through `map_files` and checked like any other.
//!
//! **btrfs.** `/proc/PID/maps` gives the device of the filesystem, but
//! `fstat` on btrfs gives a device of the subvolume. Where the two differ,
//! the device of the mount the file was opened on, from
//! `/proc/PID/mountinfo`, is compared instead. Inode numbers repeat across
//! subvolumes, so on btrfs the check of a file found by name (step 2) is
//! weaker than elsewhere; a file found through `map_files` is the mapped
//! file regardless.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::{
    fstat, makedev, openat, openat2, statat, statx, AtFlags, Dir, FileType, Mode, OFlags,
    ResolveFlags, StatxFlags,
};
use rustix::io::Errno;

use crate::{ElfFile, Error, FileId};

/// One file that a process maps with an executable mapping, and that is an
/// ELF file or could not be checked.
#[derive(Clone, Debug)]
pub struct MappedObject {
    /// The process.
    pub pid: u32,
    /// The path as the process names it, without the ` (deleted)` marker;
    /// for a memfd that the process holds open, `/proc/PID/fd/N` (see the
    /// module docs). It is what users see; nothing opens it.
    pub path: PathBuf,
    /// The file was deleted (or is a memfd not named by a descriptor)
    /// while still mapped.
    pub deleted: bool,
    /// The device and inode that the maps line names.
    pub id: FileId,
    /// The mapped file, opened and checked against `id`; or why it could
    /// not be opened safely.
    file: Result<ElfFile, String>,
}

impl MappedObject {
    /// The mapped file, open and mapped. Its descriptor is the checked
    /// one, so everything read from it, and anything attached through it,
    /// is the file the process maps. An object that could not be opened
    /// safely gives an error that names it and says why.
    pub fn file(&self) -> Result<&ElfFile, Error> {
        self.file.as_ref().map_err(|reason| Error::Unverified {
            pid: self.pid,
            path: self.path.clone(),
            reason: reason.clone(),
        })
    }
}

/// Lists the ELF objects that process `pid` has executable mappings of, in
/// the order of their first mapping, each opened as the module docs say.
/// A file that cannot be opened safely is still listed, with the reason
/// ([`MappedObject::file`]); one that is not ELF is left out.
pub fn mapped_objects(pid: u32) -> Result<Vec<MappedObject>, Error> {
    let proc_path = PathBuf::from(format!("/proc/{pid}"));
    let process_error = |path: PathBuf, errno: Errno| {
        if errno == Errno::NOENT || errno == Errno::SRCH {
            Error::NoSuchProcess { pid }
        } else {
            Error::Process {
                pid,
                path,
                source: errno.into(),
            }
        }
    };
    let proc = rustix::fs::open(
        &proc_path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| process_error(proc_path.clone(), e))?;
    let maps_path = proc_path.join("maps");
    let mut maps = String::new();
    openat(
        &proc,
        "maps",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .map_err(|e| process_error(maps_path.clone(), e))?
    .read_to_string(&mut maps)
    .map_err(|source| match source.raw_os_error() {
        Some(code) => process_error(maps_path.clone(), Errno::from_raw_os_error(code)),
        None => Error::Process {
            pid,
            path: maps_path.clone(),
            source,
        },
    })?;

    let mut objects: Vec<MappedObject> = Vec::new();
    let mut descriptors = None;
    for mapping in parse_maps(&maps) {
        if !mapping.executable {
            continue;
        }
        let (path, deleted) = match mapping.memfd() {
            true => {
                let held = descriptors.get_or_insert_with(|| held_descriptors(&proc));
                match held.get(&mapping.id) {
                    Some(fd) => (PathBuf::from(format!("/proc/{pid}/fd/{fd}")), false),
                    None => (mapping.path.clone(), mapping.deleted),
                }
            }
            false => (mapping.path.clone(), mapping.deleted),
        };
        if objects.iter().any(|o| o.path == path && o.id == mapping.id) {
            continue;
        }
        let file = open_mapped(&proc, pid, &mapping)
            .and_then(|file| ElfFile::from_file(file, &mapping.path).map_err(|e| e.with_causes()));
        // A file that cannot be checked is kept, to be reported by name.
        // One that is not ELF is not an object.
        if file
            .as_ref()
            .is_ok_and(|f| !f.data().starts_with(b"\x7fELF"))
        {
            continue;
        }
        objects.push(MappedObject {
            pid,
            path,
            deleted,
            id: mapping.id,
            file,
        });
    }
    Ok(objects)
}

/// The files the process holds descriptors on, each with its lowest
/// descriptor number. Empty when `/proc/PID/fd` cannot be read.
fn held_descriptors(proc: &OwnedFd) -> HashMap<FileId, u32> {
    let mut held = HashMap::new();
    let Ok(fds) = openat(
        proc,
        "fd",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return held;
    };
    let Ok(entries) = Dir::read_from(&fds) else {
        return held;
    };
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .ok()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Follows the descriptor's magic link to what it is open on.
        if let Ok(stat) = statat(&fds, entry.file_name(), AtFlags::empty()) {
            let id = FileId {
                device: stat.st_dev,
                inode: stat.st_ino,
            };
            held.entry(id)
                .and_modify(|n: &mut u32| *n = (*n).min(fd))
                .or_insert(fd);
        }
    }
    held
}

/// Opens the file of `mapping` for reading, checked to be the mapped file.
fn open_mapped(proc: &OwnedFd, pid: u32, mapping: &Mapping) -> Result<File, String> {
    // The kernel names these entries without the zero padding of the maps.
    let (start, end) = mapping.range;
    let map_file = format!("map_files/{start:x}-{end:x}");
    let fd = match openat(
        proc,
        &map_file,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) if e == Errno::PERM || e == Errno::ACCESS => open_in_root(proc, pid, mapping, e)?,
        Err(e) if e == Errno::NOENT => return Err("it is no longer mapped".into()),
        Err(e) => return Err(format!("cannot open /proc/{pid}/{map_file}: {e}")),
    };
    check(proc, fd.as_fd(), mapping)?;
    // An O_PATH descriptor can be neither read nor mapped. Reopening it
    // through our own descriptor table reaches the same file, by no name.
    let reopen = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(&reopen, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map(File::from)
        .map_err(|e| format!("cannot open it for reading: {e}"))
}

/// Resolves the mapping's path inside the process's root, for when
/// `map_files` is closed to us.
fn open_in_root(
    proc: &OwnedFd,
    pid: u32,
    mapping: &Mapping,
    map_files_error: Errno,
) -> Result<OwnedFd, String> {
    if mapping.deleted {
        return Err(format!(
            "it was deleted, and only /proc/{pid}/map_files still reaches it, which needs \
             CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE ({map_files_error})"
        ));
    }
    let root = openat(
        proc,
        "root",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open /proc/{pid}/root: {e}"))?;
    openat2(
        &root,
        &mapping.path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| format!("cannot open it inside the root directory of process {pid}: {e}"))
}

/// Checks that `fd` is a regular file with the device and inode the maps
/// line names.
fn check(proc: &OwnedFd, fd: BorrowedFd<'_>, mapping: &Mapping) -> Result<(), String> {
    let stat = fstat(fd).map_err(|e| format!("cannot stat it: {e}"))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(format!(
            "its path now leads to something other than a regular file; the process maps {}",
            mapping.id
        ));
    }
    let found = FileId {
        device: stat.st_dev,
        inode: stat.st_ino,
    };
    let same_device =
        || found.device == mapping.id.device || mount_device(proc, fd) == Some(mapping.id.device);
    if found.inode != mapping.id.inode || !same_device() {
        return Err(format!(
            "the process maps {} but its path now leads to {found}: the file was replaced, or \
             a mount or symlink changed what the path names",
            mapping.id
        ));
    }
    Ok(())
}

/// The device of the mount that `fd` was opened on, as the process's
/// `mountinfo` gives it: the filesystem's device, which is what the maps
/// lines give even where `fstat` does not (btrfs).
fn mount_device(proc: &OwnedFd, fd: BorrowedFd<'_>) -> Option<u64> {
    let mount_id = statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)
        .ok()?
        .stx_mnt_id;
    let mut mountinfo = String::new();
    File::from(
        openat(
            proc,
            "mountinfo",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?,
    )
    .read_to_string(&mut mountinfo)
    .ok()?;
    mountinfo.lines().find_map(|line| {
        // ID PARENT-ID MAJOR:MINOR ROOT MOUNT-POINT ...
        let mut fields = line.split(' ');
        if fields.next()?.parse::<u64>().ok()? != mount_id {
            return None;
        }
        let (major, minor) = fields.nth(1)?.split_once(':')?;
        Some(makedev(major.parse().ok()?, minor.parse().ok()?))
    })
}

/// A file-backed line of `/proc/PID/maps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    /// Start and end address, which name its `/proc/PID/map_files` entry.
    range: (u64, u64),
    executable: bool,
    /// The device and inode of the mapped file.
    id: FileId,
    path: PathBuf,
    deleted: bool,
}

impl Mapping {
    /// Whether the mapping is of a `memfd`.
    fn memfd(&self) -> bool {
        self.deleted
            && self
                .path
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(b"/memfd:")
    }
}

/// Parses the lines of `/proc/PID/maps` that map a file: those whose path
/// starts with `/`. `[heap]`, `[vdso]` and anonymous mappings are left out.
fn parse_maps(text: &str) -> impl Iterator<Item = Mapping> + '_ {
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
        let dev = field();
        let inode = field();
        let path = rest.trim_start();
        if !path.starts_with('/') {
            return None;
        }
        let (start, end) = range.split_once('-')?;
        let range = (
            u64::from_str_radix(start, 16).ok()?,
            u64::from_str_radix(end, 16).ok()?,
        );
        let (major, minor) = dev.split_once(':')?;
        let id = FileId {
            device: makedev(
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            ),
            inode: inode.parse().ok()?,
        };
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(path) => (path, true),
            None => (path, false),
        };
        Some(Mapping {
            range,
            executable: perms.as_bytes().get(2) == Some(&b'x'),
            id,
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
7f0000100000-7f0000101000 r-xp 00000000 fd:1a 77        /opt/my lib/libx.so (deleted)
7f0000200000-7f0000201000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0         [vdso]
";
        let got: Vec<_> = parse_maps(maps).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].path, PathBuf::from("/usr/bin/app"));
        assert!(!got[0].executable);
        assert!(got[1].executable);
        assert_eq!(got[1].range, (0x55d0c8a01000, 0x55d0c8a02000));
        assert_eq!(
            got[1].id,
            FileId {
                device: makedev(8, 1),
                inode: 1234
            }
        );
        assert_eq!(
            got[2],
            Mapping {
                range: (0x7f0000000000, 0x7f0000001000),
                executable: true,
                id: FileId {
                    device: makedev(0, 1),
                    inode: 99
                },
                path: PathBuf::from("/memfd:jit"),
                deleted: true,
            }
        );
        assert_eq!(got[3].path, PathBuf::from("/opt/my lib/libx.so"));
        assert!(got[3].deleted);
        // Device numbers are hexadecimal.
        assert_eq!(got[3].id.device, makedev(0xfd, 0x1a));
        assert_eq!(got[3].id.to_string(), "device 253:26 inode 77");
    }

    #[test]
    fn own_process_has_its_executable_opened_and_checked() {
        let objects = mapped_objects(std::process::id()).expect("read own maps");
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let object = objects
            .iter()
            .find(|o| o.path == exe)
            .unwrap_or_else(|| panic!("{exe:?} not in {objects:?}"));
        let file = object.file().expect("own executable opens");
        let meta = std::fs::metadata(&exe).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (file.id().device, file.id().inode),
            (meta.dev(), meta.ino())
        );
        assert_eq!(file.id(), object.id);
        assert_eq!(file.path(), exe, "the process's name for it");
        // The descriptor is the file itself, not a name for it.
        let held =
            std::fs::read_link(format!("/proc/self/fd/{}", file.descriptor().as_raw_fd())).unwrap();
        assert_eq!(held, exe);
    }

    #[test]
    fn a_mismatch_is_refused_by_name() {
        // A maps line whose inode is not the file's: what a process that
        // changed what the path names looks like.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let line = format!(
            "00400000-00401000 r-xp 00000000 00:00 1 {}\n",
            exe.display()
        );
        let mapping = parse_maps(&line).next().unwrap();
        let proc = rustix::fs::open(
            "/proc/self",
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let fd = rustix::fs::open(&exe, OFlags::PATH, Mode::empty()).unwrap();
        let why = check(&proc, fd.as_fd(), &mapping).unwrap_err();
        assert!(why.contains("device 0:0 inode 1"), "{why}");
    }

    #[test]
    fn missing_process_is_a_clear_error() {
        // PIDs are at most 2^22 on Linux.
        let err = mapped_objects(u32::MAX).unwrap_err();
        assert!(matches!(err, Error::NoSuchProcess { .. }), "{err}");
    }
}
