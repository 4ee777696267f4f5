//! The BPF ring buffer (map type 27), read from userspace.
//!
//! One ring buffer shared by all CPUs keeps events in the order they were
//! reserved, which per-CPU perf buffers cannot. Programs reserve a record,
//! fill it, and submit it; when the ring is full `bpf_ringbuf_reserve`
//! returns NULL and the program should count the drop in a map, because
//! the kernel keeps no drop counter for ring buffers.
//!
//! The map is consumed through two shared mappings:
//!
//! * the *consumer page* (read-write) holds `consumer_pos`, which we advance;
//! * the *producer area* (read-only) is one page holding `producer_pos`,
//!   then the data area. The kernel offers the data area twice in a row,
//!   so that a record that wraps around the end is contiguous, but every
//!   page of the mapping counts as resident, so we map it once and copy
//!   the rare record that wraps.
//!
//! Each record starts with an 8-byte header: `u32 len` with bit 31 BUSY
//! (reserved, not yet submitted) and bit 30 DISCARD, then `u32 pg_off`.
//! Positions only grow; the offset into the data area is `pos & (size-1)`.
//! Records are 8-byte aligned.
//!
//! Wake-ups: the kernel signals the map's file descriptor (we wait with
//! epoll) only when the consumer had caught up with the producer, so every
//! wake-up must be followed by draining everything available. The same
//! epoll set can watch other descriptors ([`RingBuf::watch`]), a pidfd or
//! a signalfd, so that one wait ends on data, on process exit and on a
//! signal alike.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::map::{Map, MapSpec, MapType};
use crate::sys;

/// `bpf_ringbuf_submit` flag: do not wake the reader for this record.
pub const SUBMIT_NO_WAKEUP: i32 = 1;
/// `bpf_ringbuf_submit` flag: wake the reader even if it has not caught up.
pub const SUBMIT_FORCE_WAKEUP: i32 = 2;
/// `bpf_ringbuf_query` flag: bytes submitted and not yet consumed.
pub const QUERY_AVAIL_DATA: i32 = 0;

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HEADER: u64 = 8;

/// Epoll token of the ring buffer itself; watched descriptors use their
/// index + 1.
const RING_TOKEN: u64 = 0;

/// A ring-buffer map and its reader.
#[derive(Debug)]
pub struct RingBuf {
    // The mappings go before the map so that they are unmapped first.
    consumer: sys::Mmap,
    producer: sys::Mmap,
    data_start: usize,
    mask: u64,
    /// A record that wraps around the end of the data area, made whole.
    wrapped: Vec<u8>,
    epoll: sys::Epoll,
    watched: Vec<u64>,
    ready: Vec<u64>,
    map: Map,
}

/// What one [`RingBuf::poll`] saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Poll {
    /// Records passed to the callback.
    pub records: usize,
    /// Tokens of watched descriptors that are readable (see [`RingBuf::watch`]).
    pub ready: Vec<u64>,
}

impl RingBuf {
    /// Creates a ring buffer of `size` data bytes: a power of two and a
    /// multiple of the page size (4096 here).
    pub fn new(size: u32) -> Result<RingBuf> {
        let page = sys::page_size();
        if !size.is_power_of_two() || (size as usize) % page != 0 {
            return Err(Error::Invalid(format!(
                "ring buffer size {size} must be a power of two and a multiple of the page size ({page})"
            )));
        }
        let map = Map::create(&MapSpec::new(MapType::RingBuf, 0, 0, size).name("sdt_ringbuf"))?;
        let mmap_err = |e| Error::sys("mapping ring buffer", e);
        let consumer = sys::Mmap::map(map.as_fd(), 0, page, true).map_err(mmap_err)?;
        let producer =
            sys::Mmap::map(map.as_fd(), page, page + size as usize, false).map_err(mmap_err)?;
        let epoll = sys::Epoll::new().map_err(|e| Error::sys("creating epoll instance", e))?;
        epoll
            .add(map.as_fd(), RING_TOKEN)
            .map_err(|e| Error::sys("watching ring buffer", e))?;
        Ok(RingBuf {
            consumer,
            producer,
            data_start: page,
            mask: u64::from(size) - 1,
            wrapped: Vec::new(),
            epoll,
            watched: Vec::new(),
            ready: Vec::new(),
            map,
        })
    }

    /// The map, for [`Builder::ld_map`](crate::Builder::ld_map).
    pub fn map(&self) -> &Map {
        &self.map
    }

    /// Also wakes [`poll`](Self::poll) when `fd` becomes readable, and
    /// reports `token` in [`Poll::ready`]. Meant for a pidfd (readable when
    /// the process exits) or a signalfd. The watch ends when `fd`'s file
    /// is closed.
    pub fn watch(&mut self, fd: BorrowedFd<'_>, token: u64) -> Result<()> {
        self.epoll
            .add(fd, self.watched.len() as u64 + 1)
            .map_err(|e| Error::sys("watching file descriptor", e))?;
        self.watched.push(token);
        Ok(())
    }

    /// Waits up to `timeout` (forever if `None`) until records arrive or a
    /// watched descriptor is readable, then passes every available record
    /// to `f`, in order. Returns early, with nothing, on a signal.
    pub fn poll(&mut self, timeout: Option<Duration>, f: impl FnMut(&[u8])) -> Result<Poll> {
        self.ready.clear();
        self.epoll
            .wait(&mut self.ready, timeout)
            .map_err(|e| Error::sys("waiting for ring buffer", e))?;
        let records = self.consume(f);
        let ready = self
            .ready
            .iter()
            .filter(|&&t| t != RING_TOKEN)
            .filter_map(|&t| self.watched.get(t as usize - 1).copied())
            .collect();
        Ok(Poll { records, ready })
    }

    /// Passes every record available now to `f`, without waiting, and
    /// returns how many there were. Use it for a final drain.
    pub fn consume(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let consumer_pos = self.consumer.atomic_u64(0);
        let producer_pos = self.producer.atomic_u64(0);
        let mut count = 0;
        let mut cons = consumer_pos.load(Ordering::Acquire);
        loop {
            let mut progressed = false;
            let prod = producer_pos.load(Ordering::Acquire);
            while cons < prod {
                let at = self.data_start + (cons & self.mask) as usize;
                let len = self.producer.atomic_u32(at).load(Ordering::Acquire);
                if len & BUSY != 0 {
                    // Reserved but not yet submitted; later records wait
                    // behind it.
                    break;
                }
                let data_len = len & !(BUSY | DISCARD);
                if len & DISCARD == 0 {
                    let start = at + HEADER as usize;
                    let end = self.data_start + self.mask as usize + 1;
                    if start + data_len as usize <= end {
                        f(self.producer.bytes(start, data_len as usize));
                    } else {
                        let first = end - start;
                        self.wrapped.clear();
                        self.wrapped
                            .extend_from_slice(self.producer.bytes(start, first));
                        self.wrapped.extend_from_slice(
                            self.producer
                                .bytes(self.data_start, data_len as usize - first),
                        );
                        f(&self.wrapped);
                    }
                    count += 1;
                }
                cons += (u64::from(data_len) + HEADER).next_multiple_of(8);
                consumer_pos.store(cons, Ordering::Release);
                progressed = true;
            }
            if !progressed {
                return count;
            }
        }
    }

    /// Bytes submitted but not yet consumed (including headers).
    pub fn pending(&self) -> u64 {
        let prod = self.producer.atomic_u64(0).load(Ordering::Acquire);
        let cons = self.consumer.atomic_u64(0).load(Ordering::Acquire);
        prod.saturating_sub(cons)
    }
}

/// The epoll descriptor, readable when [`RingBuf::poll`] would not block:
/// lets a caller nest the ring buffer in its own event loop.
impl AsFd for RingBuf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.fd()
    }
}
