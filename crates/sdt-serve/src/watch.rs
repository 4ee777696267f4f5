//! Knowing when the directory of programs changes, so that `sdt serve`
//! reloads without a signal: in a pod nothing can send one, and kubelet
//! updates a ConfigMap volume by swapping a `..data` symlink.
//!
//! inotify on the directory itself (not recursive) sees every way a
//! program changes: kubelet's update is events on the directory's own
//! entries (a new `..TIMESTAMP/`, `..data_tmp` renamed over `..data`, the
//! `NAME.bt -> ..data/NAME.bt` links), and so is an editor that writes in
//! place or renames over the file. Events come in bursts; they are taken
//! together once [`QUIET`] has passed without one. What decides a reload
//! is the directory's [`Fingerprint`]: the names and contents of its
//! programs and config files, symlinks followed. So an event that changes
//! nothing (a file touched, opened) reloads nothing.
//!
//! Where inotify cannot be had (`fs.inotify.max_user_instances` is per
//! user and shared by every root process on a node), the fingerprint is
//! looked at every [`POLL_WITHOUT_EVENTS`]; with inotify, every
//! [`POLL_WITH_EVENTS`] still, for changes no event reports (a symlink
//! whose target is outside the directory, a network file system).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

/// Events are taken together once this passes without another.
pub const QUIET: Duration = Duration::from_millis(250);
/// ... but no longer than this after the first.
const LONGEST_BURST: Duration = Duration::from_secs(2);
/// How often the fingerprint is looked at without inotify.
pub const POLL_WITHOUT_EVENTS: Duration = Duration::from_secs(10);
/// How often it is looked at with inotify, for what no event reports.
pub const POLL_WITH_EVENTS: Duration = Duration::from_secs(60);

/// The names and contents of a directory's programs (`*.bt`) and config
/// files (`*.conf`), hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// The directory's fingerprint now; an unreadable file counts as its
    /// error, so that it is tried again when that changes.
    pub fn of(dir: &Path) -> io::Result<Fingerprint> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "bt" || e == "conf"))
            .collect();
        files.sort();
        let mut hasher = DefaultHasher::new();
        for path in files {
            path.hash(&mut hasher);
            match std::fs::read(&path) {
                Ok(bytes) => bytes.hash(&mut hasher),
                Err(e) => e.kind().hash(&mut hasher),
            }
        }
        Ok(Fingerprint(hasher.finish()))
    }
}

/// A directory watched for changes.
pub struct Watch {
    dir: PathBuf,
    /// `None` when inotify cannot be had.
    inotify: Option<OwnedFd>,
    seen: Fingerprint,
    /// When the fingerprint is next looked at.
    next_look: Instant,
    /// The first and the latest event of a burst not taken yet.
    burst: Option<(Instant, Instant)>,
}

impl Watch {
    /// Watches `dir`, whose programs now are those of `seen`.
    pub fn new(dir: &Path, seen: Fingerprint) -> Watch {
        let inotify = watch(dir)
            .map_err(|e| {
                eprintln!(
                    "sdt serve: cannot watch {} ({e}); looking for changes every {} s",
                    dir.display(),
                    POLL_WITHOUT_EVENTS.as_secs()
                )
            })
            .ok();
        let mut w = Watch {
            dir: dir.to_path_buf(),
            inotify,
            seen,
            next_look: Instant::now(),
            burst: None,
        };
        w.next_look = Instant::now() + w.poll_interval();
        w
    }

    fn poll_interval(&self) -> Duration {
        match self.inotify {
            Some(_) => POLL_WITH_EVENTS,
            None => POLL_WITHOUT_EVENTS,
        }
    }

    /// The descriptor that is readable when the directory has events.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(|fd| fd.as_fd())
    }

    /// How long the caller may wait before [`due`](Self::due) has
    /// something to say.
    pub fn timeout(&self, now: Instant) -> Duration {
        let burst_end = self
            .burst
            .map(|(first, last)| (last + QUIET).min(first + LONGEST_BURST));
        burst_end
            .map_or(self.next_look, |end| end.min(self.next_look))
            .saturating_duration_since(now)
    }

    /// Reads the events that are there (the descriptor was readable).
    pub fn events(&mut self) {
        let Some(fd) = &self.inotify else {
            return;
        };
        let mut buf = [0u8; 4096];
        let mut any = false;
        while matches!(rustix::io::read(fd, &mut buf), Ok(n) if n > 0) {
            any = true;
        }
        if any {
            let now = Instant::now();
            self.burst = Some(self.burst.map_or((now, now), |(first, _)| (first, now)));
        }
        // The directory itself was replaced or moved: watch it again.
        if watch_again(fd, &self.dir).is_err() {
            self.inotify = None;
        }
    }

    /// Whether the directory's programs changed since last seen: asked
    /// once a burst of events is over, or when it is time to look.
    pub fn due(&mut self, now: Instant) -> bool {
        let burst_over = self
            .burst
            .is_some_and(|(first, last)| now >= last + QUIET || now >= first + LONGEST_BURST);
        if !burst_over && now < self.next_look {
            return false;
        }
        self.burst = None;
        self.next_look = now + self.poll_interval();
        match Fingerprint::of(&self.dir) {
            Ok(now) if now != self.seen => {
                self.seen = now;
                true
            }
            _ => false,
        }
    }
}

fn flags() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::ATTRIB
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
}

fn watch(dir: &Path) -> io::Result<OwnedFd> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    inotify::add_watch(&fd, dir, flags())?;
    Ok(fd)
}

/// Adds the watch again; the kernel gives the same watch for the same
/// directory, and a new one where the path now names another.
fn watch_again(fd: &OwnedFd, dir: &Path) -> io::Result<()> {
    inotify::add_watch(fd, dir, flags())?;
    Ok(())
}
