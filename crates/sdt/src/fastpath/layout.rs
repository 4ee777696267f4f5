//! The memory a traced program shares with `sdt` for the fast path: its
//! layout, byte for byte, which the program (this crate) writes and the
//! tracer reads. Both sides take every offset from here.
//!
//! ```text
//! 0        header: magic, version, sizes, the tracer's heartbeat (one page)
//! 4096     probe table: TABLE_ENTRIES entries of 16 bytes, open addressing
//!          on the semaphore's address: which probes the tracer wants
//! RINGS_AT rings: RING_COUNT rings of RING_SIZE bytes, each one thread's
//! ```
//!
//! A ring is written by one thread and read by the tracer: a header of
//! 64 bytes (the producer's position, the consumer's position, the thread
//! that owns it, its name, the records it had no room for), then the
//! data. Positions only grow; a record starts at `pos % data size`. A
//! record never wraps: one that would is preceded by a padding record to
//! the end of the data. Every record is a multiple of 8 bytes:
//!
//! ```text
//! 0   u32  length in bytes, this header included (a padding record: PAD | length)
//! 4   u32  the probe's slot in the table
//! 8   u64  the time stamp counter when the probe fired
//! 16  u32  the thread id
//! 20  u16  argument count (at most 12)
//! 22  u16  bytes of captured strings that follow the arguments
//! 24  u64 × count: the arguments' register values
//! ..  captured strings: for each, u16 argument index, u16 length, the bytes,
//!     padded to 4 bytes
//! ```
//!
//! The producer publishes a record by a release store of its position;
//! the tracer frees room by a release store of its own.

/// `b"SDTFAST1"` as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SDTFAST1");
/// The layout's version; the tracer refuses another.
pub const VERSION: u32 = 1;

/// Bytes of the header.
pub const HEADER_SIZE: usize = 4096;
/// Entries of the probe table (a power of two).
pub const TABLE_ENTRIES: usize = 4096;
/// Bytes of one table entry.
pub const ENTRY_SIZE: usize = 16;
/// Where the rings start.
pub const RINGS_AT: usize = HEADER_SIZE + TABLE_ENTRIES * ENTRY_SIZE;
/// Rings, one per thread that fires a probe.
pub const RING_COUNT: usize = 64;
/// Bytes of each ring, its header included (a power of two).
pub const RING_SIZE: usize = 1 << 20;
/// Bytes of a ring's header.
pub const RING_HEADER: usize = 64;
/// Bytes of a ring's data.
pub const RING_DATA: usize = RING_SIZE - RING_HEADER;
/// Bytes of the whole shared memory.
pub const SHARED_SIZE: usize = RINGS_AT + RING_COUNT * RING_SIZE;

/// Header fields, by offset.
pub mod header {
    /// `u64`: [`MAGIC`](super::MAGIC).
    pub const MAGIC: usize = 0;
    /// `u32`: [`VERSION`](super::VERSION).
    pub const VERSION: usize = 8;
    /// `u32`: the process's id, as it sees itself.
    pub const PID: usize = 12;
    /// `u64`: [`SHARED_SIZE`](super::SHARED_SIZE).
    pub const SIZE: usize = 16;
    /// `u32`: the process's user id.
    pub const UID: usize = 24;
    /// `u32`: the process's group id.
    pub const GID: usize = 28;
    /// `u32`, the tracer's: bumped each time the table changes, so that
    /// a probe looks its slot up again.
    pub const EPOCH: usize = 32;
    /// `u64`, the tracer's: the time stamp counter until which it will
    /// have looked at the rings again (it moves it on as it reads, two
    /// seconds ahead); 0 once it is done. A program past it writes no more.
    pub const DEADLINE: usize = 40;
    /// `u64`, the tracer's: the time stamp counter's ticks a second.
    pub const TSC_HZ: usize = 48;
    /// `u64`, the program's: records it had no ring for (more threads than
    /// rings).
    pub const NO_RING: usize = 56;
}

/// Table entry fields, by offset in the entry.
pub mod entry {
    /// `u64`: the probe's semaphore's address in the process; 0 when free.
    pub const SEMAPHORE: usize = 0;
    /// `u32`: the probe's slot, which its records carry.
    pub const SLOT: usize = 8;
    /// `u32`: [`CAPTURE`](super::CAPTURE) bits.
    pub const FLAGS: usize = 12;
}

/// Entry flag: copy the bytes of string arguments into each record.
pub const CAPTURE: u32 = 1;

/// Ring header fields, by offset in the ring.
pub mod ring {
    /// `u64`: bytes written, the producer's.
    pub const HEAD: usize = 0;
    /// `u64`: bytes read, the tracer's.
    pub const TAIL: usize = 8;
    /// `u32`: the thread that owns the ring; 0 when free.
    pub const OWNER: usize = 16;
    /// `u64`: records that found no room.
    pub const LOST: usize = 24;
    /// 16 bytes: the owner's name (`comm`) when it took the ring.
    pub const COMM: usize = 32;
}

/// Record fields, by offset in the record.
pub mod record {
    /// `u32`: the record's bytes, or [`PAD`](super::PAD) and the bytes
    /// skipped to the end of the data.
    pub const LEN: usize = 0;
    /// `u32`: the probe's slot in the table.
    pub const SLOT: usize = 4;
    /// `u64`: the time stamp counter at the hit.
    pub const TSC: usize = 8;
    /// `u32`: the thread.
    pub const TID: usize = 16;
    /// `u16`: how many arguments follow the header.
    pub const ARGS: usize = 20;
    /// `u16`: bytes of captured strings after the arguments.
    pub const STRINGS: usize = 22;
    /// Where the arguments start.
    pub const HEADER: usize = 24;
}

/// The length bit of a padding record.
pub const PAD: u32 = 1 << 31;
/// Bytes of a string argument copied at most.
pub const MAX_CAPTURE: usize = 1024;

/// The table entry a semaphore's address starts looking at.
pub fn table_index(semaphore: u64) -> usize {
    // Fibonacci hashing: the addresses are 2 bytes apart.
    (semaphore.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (TABLE_ENTRIES - 1)
}

/// The name of the socket a tracer that wants the fast path listens on,
/// in the abstract namespace. One tracer at a time has it; it checks who
/// connects (`SO_PEERCRED`), and the program checks who listens.
pub const SOCKET_NAME: &[u8] = b"sdt-fastpath";

/// The message a program sends with its shared memory: magic, version,
/// its size.
pub const HELLO_SIZE: usize = 24;
