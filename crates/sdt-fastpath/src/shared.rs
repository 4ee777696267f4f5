//! A program's shared memory, mapped: the table the tracer fills, the
//! heartbeat it keeps, and the rings it reads.
//!
//! The unsafe code here is the mapping itself and the atomics over it.
//! Records are copied out of a ring before they are parsed, and every
//! length in them is checked against what the ring can hold: the program
//! writes this memory, and nothing it writes may make the tracer read out
//! of bounds, loop, or panic.

use std::io;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::mm::{self, MapFlags, ProtFlags};
use rustix::net::{self, SendFlags};

use crate::clock::{tsc, Clock};
use crate::layout::{self, entry, header, record, ring};

/// A probe the tracer wants from a program: its semaphore's address in
/// that process, the slot its records carry, and whether to copy its
/// strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub semaphore: u64,
    pub slot: u32,
    pub capture: bool,
}

/// One hit, copied out of a ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub slot: u32,
    /// The time stamp counter at the hit ([`Clock::ns`] makes it a time).
    pub tsc: u64,
    pub tid: u32,
    /// The thread's name when it took its ring.
    pub comm: [u8; 16],
    /// The arguments' register values.
    pub args: Vec<u64>,
    /// The bytes of each string argument that were copied, by argument.
    pub strings: Vec<(usize, Vec<u8>)>,
}

/// A program's shared memory, mapped.
pub struct Shared {
    base: NonNull<u8>,
    socket: OwnedFd,
    /// The process, as this tracer numbers it.
    pub pid: u32,
    /// Records dropped because a ring said something impossible.
    pub corrupt: u64,
}

// SAFETY: the mapping is only accessed through atomics and bounded
// copies; the pointer moves between threads like the OwnedFd beside it.
unsafe impl Send for Shared {}

impl Shared {
    /// Maps `memory`, checking its size and its header.
    pub(crate) fn map(memory: OwnedFd, socket: OwnedFd, pid: u32) -> io::Result<Shared> {
        let stat = rustix::fs::fstat(&memory)?;
        if (stat.st_size as u64) < layout::SHARED_SIZE as u64 {
            return Err(io::Error::other(
                "the shared memory is smaller than its layout",
            ));
        }
        // SAFETY: a new shared mapping of a descriptor we hold, at an
        // address the kernel picks; unmapped in `Drop` only.
        let base = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                layout::SHARED_SIZE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &memory,
                0,
            )
        }?;
        let base =
            NonNull::new(base as *mut u8).ok_or_else(|| io::Error::other("mmap gave null"))?;
        let shared = Shared {
            base,
            socket,
            pid,
            corrupt: 0,
        };
        let valid = shared.u64(header::MAGIC).load(Ordering::Acquire) == layout::MAGIC
            && shared.u32(header::VERSION).load(Ordering::Relaxed) == layout::VERSION
            && shared.u64(header::SIZE).load(Ordering::Relaxed) == layout::SHARED_SIZE as u64;
        if !valid {
            return Err(io::Error::other("the shared memory's header is not sdt's"));
        }
        Ok(shared)
    }

    fn u64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= layout::SHARED_SIZE && offset % 8 == 0);
        let field = self.base.as_ptr().wrapping_add(offset) as *const AtomicU64;
        // SAFETY: an 8-aligned field inside the mapping, which lives as
        // long as `self`; both sides access it only atomically.
        unsafe { &*field }
    }

    fn u32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= layout::SHARED_SIZE && offset % 4 == 0);
        let field = self.base.as_ptr().wrapping_add(offset) as *const AtomicU32;
        // SAFETY: as `u64`, for a 4-aligned field.
        unsafe { &*field }
    }

    /// Fills the table, and says the tracer reads.
    pub(crate) fn start(&self, entries: &[Entry], clock: &Clock) {
        self.u64(header::TSC_HZ)
            .store(clock.hz(), Ordering::Relaxed);
        self.set_table(entries);
        self.heartbeat();
    }

    /// Replaces the table: the probes the tracer wants now.
    pub fn set_table(&self, entries: &[Entry]) {
        for i in 0..layout::TABLE_ENTRIES {
            let at = layout::HEADER_SIZE + i * layout::ENTRY_SIZE;
            self.u64(at + entry::SEMAPHORE).store(0, Ordering::Relaxed);
        }
        for e in entries {
            let mut index = layout::table_index(e.semaphore);
            for _ in 0..layout::TABLE_ENTRIES {
                let at = layout::HEADER_SIZE + index * layout::ENTRY_SIZE;
                if self.u64(at + entry::SEMAPHORE).load(Ordering::Relaxed) == 0 {
                    self.u32(at + entry::SLOT).store(e.slot, Ordering::Relaxed);
                    let flags = if e.capture { layout::CAPTURE } else { 0 };
                    self.u32(at + entry::FLAGS).store(flags, Ordering::Relaxed);
                    self.u64(at + entry::SEMAPHORE)
                        .store(e.semaphore, Ordering::Release);
                    break;
                }
                index = (index + 1) & (layout::TABLE_ENTRIES - 1);
            }
        }
        self.u32(header::EPOCH).fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn answer(&self, status: u32) -> io::Result<()> {
        net::send(&self.socket, &status.to_le_bytes(), SendFlags::NOSIGNAL)?;
        Ok(())
    }

    /// Tells the program the tracer still reads: it writes for two more
    /// seconds of the counter, and stops if no heartbeat moves that on.
    pub fn heartbeat(&self) {
        let hz = self.u64(header::TSC_HZ).load(Ordering::Relaxed);
        let deadline = tsc().saturating_add(hz.saturating_mul(2));
        self.u64(header::DEADLINE)
            .store(deadline, Ordering::Release);
    }

    /// Whether the program has ended (its end of the socket is closed).
    pub fn ended(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            net::recv(&self.socket, &mut byte, net::RecvFlags::DONTWAIT),
            Ok((_, 0))
        )
    }

    /// Records that found no room, or no ring, in the program.
    pub fn lost(&self) -> u64 {
        let in_rings: u64 = (0..layout::RING_COUNT)
            .map(|i| self.u64(ring_at(i) + ring::LOST).load(Ordering::Relaxed))
            .sum();
        in_rings + self.u64(header::NO_RING).load(Ordering::Relaxed)
    }

    /// Hands every record written since the last call to `f`, ring by
    /// ring (each ring in its thread's order); returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(Record)) -> usize {
        let mut count = 0;
        for i in 0..layout::RING_COUNT {
            count += self.drain_ring(ring_at(i), &mut f);
        }
        count
    }

    fn drain_ring(&mut self, at: usize, f: &mut impl FnMut(Record)) -> usize {
        let head = self.u64(at + ring::HEAD).load(Ordering::Acquire);
        let mut tail = self.u64(at + ring::TAIL).load(Ordering::Relaxed);
        if head == tail {
            return 0;
        }
        let data = at + layout::RING_HEADER;
        let mut comm = [0u8; 16];
        self.copy(at + ring::COMM, &mut comm);
        let mut count = 0;
        let mut buffer = Vec::new();
        while tail < head {
            let offset = (tail % layout::RING_DATA as u64) as usize;
            let available = (head - tail).min((layout::RING_DATA - offset) as u64) as usize;
            let mut len_bytes = [0u8; 4];
            if available < 8 {
                self.corrupt += 1;
                tail = head;
                break;
            }
            self.copy(data + offset, &mut len_bytes);
            let len = u32::from_ne_bytes(len_bytes);
            let size = (len & !layout::PAD) as usize;
            if size < 8 || size % 8 != 0 || size > available {
                self.corrupt += 1;
                tail = head;
                break;
            }
            if len & layout::PAD == 0 {
                buffer.resize(size, 0);
                self.copy(data + offset, &mut buffer);
                match parse(&buffer, comm) {
                    Some(record) => {
                        f(record);
                        count += 1;
                    }
                    None => self.corrupt += 1,
                }
            }
            tail += size as u64;
        }
        self.u64(at + ring::TAIL).store(tail, Ordering::Release);
        count
    }

    /// Copies bytes out of the mapping.
    fn copy(&self, offset: usize, out: &mut [u8]) {
        if offset + out.len() > layout::SHARED_SIZE {
            return;
        }
        let from = self.base.as_ptr().wrapping_add(offset);
        // SAFETY: `out.len()` bytes at `offset` are inside the mapping
        // (checked above); they are a published record or a field the
        // producer does not change while it is read.
        unsafe { std::ptr::copy_nonoverlapping(from, out.as_mut_ptr(), out.len()) };
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.u64(header::DEADLINE).store(0, Ordering::Release);
        // SAFETY: the mapping made in `map`, unmapped once; nothing of it
        // is borrowed past `self`.
        let _ = unsafe { mm::munmap(self.base.as_ptr().cast(), layout::SHARED_SIZE) };
    }
}

fn ring_at(i: usize) -> usize {
    layout::RINGS_AT + i * layout::RING_SIZE
}

/// A record's fields, from its bytes; `None` when they do not add up.
fn parse(bytes: &[u8], comm: [u8; 16]) -> Option<Record> {
    let u16_at = |at: usize| Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let count = usize::from(u16_at(record::ARGS)?);
    if count > 12 {
        return None;
    }
    let args: Vec<u64> = (0..count)
        .map(|i| u64_at(record::HEADER + 8 * i))
        .collect::<Option<_>>()?;
    let mut at = record::HEADER + 8 * count;
    let end = at + usize::from(u16_at(record::STRINGS)?);
    if end > bytes.len() {
        return None;
    }
    let mut strings = Vec::new();
    while at + 4 <= end {
        let index = usize::from(u16_at(at)?);
        let len = usize::from(u16_at(at + 2)?);
        let text = bytes.get(at + 4..at + 4 + len)?;
        if index >= count {
            return None;
        }
        strings.push((index, text.to_vec()));
        at += 4 + len.div_ceil(4) * 4;
    }
    Some(Record {
        slot: u32_at(record::SLOT)?,
        tsc: u64_at(record::TSC)?,
        tid: u32_at(record::TID)?,
        comm,
        args,
        strings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(args: &[u64], strings: &[(u16, &[u8])]) -> Vec<u8> {
        let mut tail = Vec::new();
        for (i, s) in strings {
            tail.extend(i.to_ne_bytes());
            tail.extend((s.len() as u16).to_ne_bytes());
            tail.extend(*s);
            tail.resize(tail.len().next_multiple_of(4), 0);
        }
        let size = (24 + 8 * args.len() + tail.len()).next_multiple_of(8);
        let mut b = Vec::new();
        b.extend((size as u32).to_ne_bytes());
        b.extend(7u32.to_ne_bytes());
        b.extend(99u64.to_ne_bytes());
        b.extend(42u32.to_ne_bytes());
        b.extend((args.len() as u16).to_ne_bytes());
        b.extend((tail.len() as u16).to_ne_bytes());
        for a in args {
            b.extend(a.to_ne_bytes());
        }
        b.extend(tail);
        b.resize(size, 0);
        b
    }

    #[test]
    fn records_parse_and_lies_are_refused() {
        let bytes = record(&[1, 2], &[(0, b"GET")]);
        let r = parse(&bytes, *b"worker\0\0\0\0\0\0\0\0\0\0").unwrap();
        assert_eq!((r.slot, r.tsc, r.tid), (7, 99, 42));
        assert_eq!(r.args, [1, 2]);
        assert_eq!(r.strings, [(0, b"GET".to_vec())]);
        // A string past the end, too many arguments, a string of an
        // argument that does not exist.
        let mut long = record(&[1], &[(0, b"abcd")]);
        long[35] = 0xff;
        assert!(parse(&long, [0; 16]).is_none());
        let mut many = record(&[1], &[]);
        many[20] = 13;
        assert!(parse(&many, [0; 16]).is_none());
        assert!(parse(&record(&[1], &[(3, b"x")]), [0; 16]).is_none());
        assert!(parse(&[0; 5], [0; 16]).is_none());
    }
}
