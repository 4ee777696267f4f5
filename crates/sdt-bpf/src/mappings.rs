//! Where traced processes map their files, as the kernel reports it.
//!
//! Turning a user-space address into a symbol needs the mappings of the
//! process it came from. `/proc/PID/maps` has them only while the process
//! lives, and a short `-c` command, or a child, can be gone before its
//! addresses are printed. So sdt does what `perf record` does: it opens a
//! perf event that counts nothing (`PERF_COUNT_SW_DUMMY`) on the traced
//! process, one per CPU, and reads from its ring buffer the records the
//! kernel writes when the process maps a file executable (`MMAP2`), forks
//! (`FORK`) and execs (`COMM` with the exec flag). With `inherit`, the
//! kernel copies the event into every child at `fork`, so the tree is
//! covered. These events have no BPF program attached, so a child's exit
//! does not wait on them.
//!
//! Each record ends with its time (`sample_id_all`), and the records of
//! all CPUs are merged in time order, so that a child's `exec` on one CPU
//! is applied after the `fork` another CPU reported.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::sys;

/// Data pages of each CPU's buffer: room for the mappings of dozens of
/// `exec`s between two reads.
const DATA_PAGES: usize = 16;

/// Offsets in the buffer's first page (`struct perf_event_mmap_page`).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

/// Record types and flags (`enum perf_event_type`, `PERF_RECORD_MISC_*`).
const RECORD_LOST: u32 = 2;
const RECORD_COMM: u32 = 3;
const RECORD_EXIT: u32 = 4;
const RECORD_FORK: u32 = 7;
const RECORD_MMAP2: u32 = 10;
const MISC_COMM_EXEC: u16 = 1 << 13;
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// The `sample_id` every record ends with: pid, tid, time.
const SAMPLE_ID: usize = 16;

/// A file mapped executable by a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub pid: u32,
    pub start: u64,
    pub len: u64,
    /// The file offset of `start`.
    pub pgoff: u64,
    /// The file's device (as `st_dev` encodes it, see `makedev(3)`) and
    /// inode number, where the kernel reported them.
    pub device: Option<u64>,
    pub inode: Option<u64>,
    /// The path, as the process's mount namespace names it.
    pub path: String,
}

/// What a traced process did to its address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessEvent {
    Map(Mapped),
    /// `pid` was forked from `parent`, and starts with its mappings.
    Fork {
        pid: u32,
        parent: u32,
    },
    /// `pid` called `exec`: its old mappings are gone.
    Exec {
        pid: u32,
    },
    /// Process `pid` (its last thread) exited.
    Exit {
        pid: u32,
    },
    /// Records the kernel dropped because a buffer was full.
    Lost(u64),
}

/// The mapping records of a process (tree), one buffer per CPU.
#[derive(Debug)]
pub struct MappingEvents {
    buffers: Vec<Buffer>,
}

#[derive(Debug)]
struct Buffer {
    // The mapping goes before the event so that it is unmapped first.
    map: sys::Mmap,
    data_offset: usize,
    data_size: u64,
    event: OwnedFd,
}

impl MappingEvents {
    /// Starts recording for process `pid`, and for the processes it forks
    /// from then on if `inherit`. With `wake`, each buffer's descriptor
    /// (see [`fds`](Self::fds)) is readable as soon as a record is in it;
    /// else only once it is half full.
    pub fn open(pid: i32, inherit: bool, wake: bool) -> Result<MappingEvents> {
        let cpus = sys::online_cpus().map_err(|e| Error::sys("reading online CPUs", e))?;
        let page = sys::page_size();
        let buffers = cpus
            .into_iter()
            .map(|cpu| {
                let event = sys::perf_event_open_mappings(pid, cpu, inherit, wake)
                    .map_err(|e| Error::sys("opening a perf event for mappings", e))?;
                let map = sys::Mmap::map(event.as_fd(), 0, page * (1 + DATA_PAGES), true)
                    .map_err(|e| Error::sys("mapping a perf buffer", e))?;
                let offset = map.atomic_u64(DATA_OFFSET).load(Ordering::Relaxed) as usize;
                let size = map.atomic_u64(DATA_SIZE).load(Ordering::Relaxed);
                // Kernels before 4.1 leave these 0: the data follows the
                // first page.
                let (data_offset, data_size) = if size == 0 {
                    (page, (page * DATA_PAGES) as u64)
                } else {
                    (offset, size)
                };
                Ok(Buffer {
                    map,
                    data_offset,
                    data_size,
                    event,
                })
            })
            .collect::<Result<_>>()?;
        Ok(MappingEvents { buffers })
    }

    /// The buffers' descriptors, to wait on.
    pub fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.buffers.iter().map(|b| b.event.as_fd())
    }

    /// Every record written since the last call, in time order.
    pub fn drain(&mut self) -> Vec<ProcessEvent> {
        let mut timed = Vec::new();
        for buffer in &mut self.buffers {
            buffer.drain(&mut timed);
        }
        timed.sort_by_key(|&(time, _)| time);
        timed.into_iter().map(|(_, event)| event).collect()
    }
}

impl Buffer {
    fn drain(&mut self, out: &mut Vec<(u64, ProcessEvent)>) {
        let head = self.map.atomic_u64(DATA_HEAD).load(Ordering::Acquire);
        let tail_word = self.map.atomic_u64(DATA_TAIL);
        let mut tail = tail_word.load(Ordering::Relaxed);
        while tail < head {
            let header = self.copy(tail, 8);
            let size = u64::from(u16::from_ne_bytes([header[6], header[7]]));
            if size < 8 || tail + size > head {
                // A malformed record: skip what is there rather than loop.
                tail = head;
                break;
            }
            let record = self.copy(tail, size as usize);
            if let Some(event) = parse(&record) {
                out.push(event);
            }
            tail += size;
        }
        tail_word.store(tail, Ordering::Release);
    }

    /// `len` bytes of the data area from position `pos`, which may wrap
    /// around its end.
    fn copy(&self, pos: u64, len: usize) -> Vec<u8> {
        let at = (pos % self.data_size) as usize;
        let first = len.min(self.data_size as usize - at);
        let mut bytes = self.map.bytes(self.data_offset + at, first).to_vec();
        bytes.extend_from_slice(self.map.bytes(self.data_offset, len - first));
        bytes
    }
}

/// One record, with its time; `None` for the kinds sdt does not use.
fn parse(record: &[u8]) -> Option<(u64, ProcessEvent)> {
    let u16_at = |off: usize| {
        Some(u16::from_ne_bytes(
            record.get(off..off + 2)?.try_into().ok()?,
        ))
    };
    let u32_at = |off: usize| {
        Some(u32::from_ne_bytes(
            record.get(off..off + 4)?.try_into().ok()?,
        ))
    };
    let u64_at = |off: usize| {
        Some(u64::from_ne_bytes(
            record.get(off..off + 8)?.try_into().ok()?,
        ))
    };
    let kind = u32_at(0)?;
    let misc = u16_at(4)?;
    let body_end = record.len().checked_sub(SAMPLE_ID)?;
    let time = u64_at(record.len() - 8)?;
    let event = match kind {
        RECORD_MMAP2 => {
            // Without a build id, the record names the file by device
            // and inode.
            let by_inode = misc & MISC_MMAP_BUILD_ID == 0;
            let inode = by_inode.then(|| u64_at(48)).flatten();
            let device = by_inode
                .then(|| Some(rustix::fs::makedev(u32_at(40)?, u32_at(44)?)))
                .flatten();
            let name = record.get(72..body_end)?;
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            ProcessEvent::Map(Mapped {
                pid: u32_at(8)?,
                start: u64_at(16)?,
                len: u64_at(24)?,
                pgoff: u64_at(32)?,
                device,
                inode,
                path: String::from_utf8_lossy(name).into_owned(),
            })
        }
        RECORD_COMM if misc & MISC_COMM_EXEC != 0 => ProcessEvent::Exec { pid: u32_at(8)? },
        RECORD_FORK => {
            let (pid, parent) = (u32_at(8)?, u32_at(12)?);
            // A new thread shares its process's mappings.
            if pid == parent {
                return None;
            }
            ProcessEvent::Fork { pid, parent }
        }
        RECORD_EXIT => {
            let (pid, tid) = (u32_at(8)?, u32_at(16)?);
            // A thread's exit leaves its process's mappings.
            if pid != tid {
                return None;
            }
            ProcessEvent::Exit { pid }
        }
        RECORD_LOST => ProcessEvent::Lost(u64_at(16)?),
        _ => return None,
    };
    Some((time, event))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8], time: u64) -> Vec<u8> {
        let size = 8 + body.len() + SAMPLE_ID;
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&(size as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&[0; 8]);
        r.extend_from_slice(&time.to_ne_bytes());
        r
    }

    #[test]
    fn parses_an_mmap2_record() {
        let mut body = Vec::new();
        for v in [7u32, 8] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [0x5000u64, 0x2000, 0x1000] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&0xfdu32.to_ne_bytes()); // maj
        body.extend_from_slice(&0x1au32.to_ne_bytes()); // min
        body.extend_from_slice(&42u64.to_ne_bytes()); // ino
        body.extend_from_slice(&[0; 8]); // ino_generation
        body.extend_from_slice(&[0; 8]); // prot, flags
        body.extend_from_slice(b"/usr/bin/x\0\0\0\0\0\0");
        let (time, event) = parse(&record(RECORD_MMAP2, 0, &body, 99)).unwrap();
        assert_eq!(time, 99);
        assert_eq!(
            event,
            ProcessEvent::Map(Mapped {
                pid: 7,
                start: 0x5000,
                len: 0x2000,
                pgoff: 0x1000,
                device: Some(rustix::fs::makedev(0xfd, 0x1a)),
                inode: Some(42),
                path: "/usr/bin/x".into(),
            })
        );
    }

    #[test]
    fn forks_of_processes_and_execs_are_kept_threads_are_not() {
        let fork = |pid: u32, ppid: u32| {
            let mut body = Vec::new();
            for v in [pid, ppid, pid, ppid] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            body.extend_from_slice(&[0; 8]);
            parse(&record(RECORD_FORK, 0, &body, 1)).map(|(_, e)| e)
        };
        assert_eq!(fork(9, 3), Some(ProcessEvent::Fork { pid: 9, parent: 3 }));
        assert_eq!(fork(3, 3), None);
        let comm = record(
            RECORD_COMM,
            MISC_COMM_EXEC,
            &[5, 0, 0, 0, 5, 0, 0, 0, b'x', 0, 0, 0, 0, 0, 0, 0],
            2,
        );
        assert_eq!(
            parse(&comm).map(|(_, e)| e),
            Some(ProcessEvent::Exec { pid: 5 })
        );
    }

    #[test]
    fn truncated_records_are_refused() {
        for len in 0..24 {
            let r = record(RECORD_MMAP2, 0, &[1; 8], 0);
            assert_eq!(parse(&r[..len.min(r.len())]), None);
        }
    }
}
