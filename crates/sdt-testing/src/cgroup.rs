//! A cgroup v2 directory made for a test: under the first cgroup2 mount,
//! named for the test and this process, and removed when dropped (once
//! its processes have ended).

use std::path::{Path, PathBuf};

/// A test's own cgroup directory.
pub struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// Makes `sdt-NAME-PID` under the cgroup2 mount; `None` where there
    /// is no writable cgroup v2 hierarchy.
    pub fn create(name: &str) -> Option<Cgroup> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mountinfo.lines().find_map(|line| {
            let (fields, rest) = line.split_once(" - ")?;
            rest.starts_with("cgroup2 ")
                .then(|| fields.split_whitespace().nth(4).map(PathBuf::from))?
        })?;
        let dir = mount.join(format!("sdt-{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Cgroup { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves process `pid` into the cgroup.
    pub fn enter(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", self.dir.display()));
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}
