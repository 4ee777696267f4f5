//! Tracing the processes of one cgroup v2 directory and of its
//! descendants: a pod, a container, a systemd service.
//!
//! # Why this design
//!
//! A cgroup is how a cluster names a group of processes, and the group
//! changes as it runs: a pod's containers restart, a service forks
//! workers. So membership is asked when a probe fires, not listed when
//! tracing starts: each program starts with a filter that returns at once
//! unless the current task's cgroup is the directory or below it. The
//! filter calls `bpf_get_current_ancestor_cgroup_id(level)`, which gives
//! the id of the current task's ancestor cgroup at the directory's depth
//! in the v2 hierarchy; the task is in the subtree when that id is the
//! directory's. It needs no map (`bpf_current_task_under_cgroup` needs a
//! cgroup array, which sleepable programs may not use), and it costs a
//! helper call per hit.
//!
//! Ids and depths are of the cgroup v2 hierarchy, which every process has
//! a place in, also on hosts that mount cgroup v1 controllers beside it
//! (v2 then lives at `/sys/fs/cgroup/unified`): the `0::PATH` line of
//! `/proc/PID/cgroup`. A directory's cgroup id is its inode number on the
//! cgroup2 file system (what `name_to_handle_at` also returns).
//!
//! The depth the helper wants is absolute, while paths are shown relative
//! to the reader's cgroup namespace (a container's own, where it has one)
//! and a mount may show a subtree. So the depth is added up from three
//! parts: how deep sdt's namespace root is (the `..` that lead from it up
//! to the root, in `/proc/1/cgroup` of the host's init, which a pod with
//! `hostPID` sees), where the mount's root is (mountinfo's root field), and
//! how far below the mount point the directory is.

use std::path::{Component, Path, PathBuf};

use sdt_bpf::{Builder, Helper, Insn, JmpOp, Reg};

use crate::Error;

/// The cgroup2 file system's magic number (`CGROUP2_SUPER_MAGIC`).
const CGROUP2_MAGIC: i64 = 0x6367_7270;

/// A cgroup v2 directory whose processes, and its descendants', are
/// traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    /// The directory, as found on this machine.
    pub dir: PathBuf,
    /// Its path in the v2 hierarchy, as `/proc/PID/cgroup` names it
    /// (`/kubepods/pod1234/...`): the label metrics carry.
    pub name: String,
    /// Its cgroup id.
    pub id: u64,
    /// Its depth below the root of the hierarchy (the root is 0).
    pub level: u32,
}

impl Cgroup {
    /// The cgroup `given` names: a directory of a cgroup2 mount
    /// (`/sys/fs/cgroup/system.slice/x.service`), or a path in the v2
    /// hierarchy as `/proc/PID/cgroup` shows it (`/system.slice/x.service`),
    /// found under this machine's cgroup2 mount.
    pub fn find(given: &Path) -> Result<Cgroup, Error> {
        let mounts = cgroup2_mounts();
        let Some((first, _)) = mounts.first() else {
            return Err(Error::Cgroup(
                "this machine has no cgroup v2 hierarchy mounted (no cgroup2 in /proc/self/mountinfo)"
                    .into(),
            ));
        };
        let within = |dir: &Path| {
            mounts
                .iter()
                .filter(|(point, _)| dir.starts_with(point))
                .max_by_key(|(point, _)| point.as_os_str().len())
                .cloned()
        };
        let dir = std::fs::canonicalize(given).ok().filter(|d| d.is_dir());
        let (dir, mount) = match dir.as_deref().and_then(|d| Some((d, within(d)?))) {
            Some((dir, mount)) => (dir.to_path_buf(), mount),
            None => {
                let relative = given.strip_prefix("/").unwrap_or(given);
                (first.join(relative), mounts[0].clone())
            }
        };
        let (point, root) = mount;
        let stat = rustix::fs::stat(&dir).map_err(|e| {
            Error::Cgroup(format!(
                "{}: no such cgroup ({}; cgroup v2 is mounted at {})",
                given.display(),
                std::io::Error::from(e),
                first.display()
            ))
        })?;
        let fs = rustix::fs::statfs(&dir).map_err(|e| Error::Cgroup(e.to_string()))?;
        if fs.f_type as i64 != CGROUP2_MAGIC || !dir.is_dir() {
            return Err(Error::Cgroup(format!(
                "{} is not a cgroup v2 directory (cgroup v2 is mounted at {})",
                given.display(),
                first.display()
            )));
        }
        // The path as sdt's namespace names it: the mount's root, then
        // what is below the mount point.
        let below = dir.strip_prefix(&point).unwrap_or(Path::new(""));
        let mut parts: Vec<String> = Vec::new();
        let mut up = 0;
        for component in Path::new(&root).join(below).components() {
            match component {
                Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
                Component::ParentDir if parts.pop().is_none() => up += 1,
                _ => {}
            }
        }
        let depth = (namespace_depth() + parts.len() as u32).saturating_sub(up);
        Ok(Cgroup {
            name: format!("/{}", parts.join("/")),
            level: depth,
            id: stat.st_ino,
            dir,
        })
    }
}

/// Where cgroup2 is mounted, from `/proc/self/mountinfo`: each mount
/// point, with the root of the hierarchy it shows.
fn cgroup2_mounts() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (mount, rest) = line.split_once(" - ")?;
            let fstype = rest.split_whitespace().next()?;
            let mut fields = mount.split_whitespace();
            let root = fields.nth(3)?;
            let point = fields.next()?;
            (fstype == "cgroup2").then(|| (PathBuf::from(unescape(point)), unescape(root)))
        })
        .collect()
}

/// How deep the root of sdt's cgroup namespace is in the hierarchy: the
/// `..` that lead up from it to the cgroup of the host's init; 0 where
/// sdt sees the whole hierarchy, or cannot tell.
fn namespace_depth() -> u32 {
    let text = std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    Path::new(path)
        .components()
        .take_while(|c| matches!(c, Component::RootDir | Component::ParentDir))
        .filter(|c| matches!(c, Component::ParentDir))
        .count() as u32
}

/// A mountinfo field, whose spaces and backslashes are written in octal.
fn unescape(field: &str) -> String {
    let mut out = Vec::new();
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The instructions to put before a program that should run only for
/// processes in `cgroup` or below: they return 0 at once unless the
/// current task's ancestor at the cgroup's depth is that cgroup, and
/// otherwise fall through with the context in `R1`.
pub(crate) fn cgroup_filter(cgroup: &Cgroup) -> Result<Vec<Insn>, Error> {
    let mut b = Builder::new();
    let traced = b.label();
    b.push(Insn::mov64_reg(Reg::R6, Reg::R1));
    b.push(Insn::mov64_imm(Reg::R1, cgroup.level as i32));
    b.call(Helper::GetCurrentAncestorCgroupId);
    for insn in Insn::ld_imm64(Reg::R1, cgroup.id) {
        b.push(insn);
    }
    b.jump_reg(JmpOp::Eq, Reg::R0, Reg::R1, traced);
    b.push(Insn::mov64_imm(Reg::R0, 0)).exit();
    b.bind(traced);
    b.push(Insn::mov64_reg(Reg::R1, Reg::R6));
    b.finish()
        .map_err(|e| Error::Bpf(sdt_bpf::Error::Invalid(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_fields_are_unescaped() {
        assert_eq!(unescape("/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/x\134y"), r"/x\y");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn the_root_of_the_hierarchy_is_level_0() {
        let Some((mount, _)) = cgroup2_mounts().into_iter().next() else {
            eprintln!("SKIP: no cgroup2 mount here");
            return;
        };
        let root = Cgroup::find(&mount).unwrap();
        assert_eq!((root.level, root.name.as_str()), (0, "/"));
        // The same directory named as /proc/PID/cgroup names it.
        assert_eq!(Cgroup::find(Path::new("/")).unwrap().id, root.id);
        let missing = Cgroup::find(Path::new("/no/such/sdt/cgroup")).unwrap_err();
        assert!(missing.to_string().contains("no such cgroup"), "{missing}");
        let not_cgroup = Cgroup::find(Path::new("/proc")).unwrap_err();
        assert!(
            not_cgroup.to_string().contains("no such cgroup")
                || not_cgroup.to_string().contains("not a cgroup"),
            "{not_cgroup}"
        );
    }
}
