//! The program's side of the fast path: registering with a tracer, and
//! writing hits into the shared rings. See the module above for why.

use core::cell::Cell;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

use super::layout::{self, entry, header, record, ring};

/// No tracer yet, or the last one went away: try to register.
const IDLE: u8 = 0;
/// A thread is registering; the others wait for it.
const BUSY: u8 = 1;
/// Registered: hits go to the shared memory.
const READY: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The shared memory, once registered.
static SHARED: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
/// The socket to the tracer, kept open: its end tells the tracer that the
/// process has ended.
static SOCKET: AtomicI32 = AtomicI32::new(-1);
/// Hits to let pass before trying to register again, and how many the
/// next failure waits.
static SKIP: AtomicU64 = AtomicU64::new(0);
static BACKOFF: AtomicU64 = AtomicU64::new(1);
/// The most hits a failed registration waits for.
const MAX_BACKOFF: u64 = 1 << 20;

/// One argument of a hit: its register value, and what of the memory it
/// points to is copied.
#[derive(Clone, Copy)]
pub struct Arg {
    value: u64,
    /// Bytes to copy from `value` as an address: none, a NUL-terminated
    /// string, or this many.
    copy: Copy,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Copy {
    None,
    CStr,
    Bytes(u64),
}

/// The arguments of a hit, as the probe macros collect them: only those
/// pushed are ever written or read, so a hit pays for no more.
pub struct Args {
    items: [core::mem::MaybeUninit<Arg>; 12],
    len: usize,
}

impl Default for Args {
    fn default() -> Self {
        Self::new()
    }
}

impl Args {
    /// No arguments yet.
    #[inline(always)]
    pub const fn new() -> Args {
        Args {
            items: [const { core::mem::MaybeUninit::uninit() }; 12],
            len: 0,
        }
    }

    #[inline(always)]
    fn push(&mut self, arg: Arg) {
        if let Some(item) = self.items.get_mut(self.len) {
            item.write(arg);
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[Arg] {
        let pushed = &self.items[..self.len];
        // SAFETY: the first `len` items were written by `push`, and
        // `MaybeUninit<Arg>` has the layout of `Arg`.
        unsafe { &*(pushed as *const [core::mem::MaybeUninit<Arg>] as *const [Arg]) }
    }

    /// A value.
    #[inline(always)]
    pub fn value(&mut self, value: u64) {
        self.push(Arg {
            value,
            copy: Copy::None,
        });
    }

    /// The address of a NUL-terminated string, whose bytes are copied.
    #[inline(always)]
    pub fn c_str(&mut self, address: u64) {
        self.push(Arg {
            value: address,
            copy: Copy::CStr,
        });
    }

    /// A pointer and a length, as two arguments; the bytes are copied.
    #[inline(always)]
    pub fn bytes(&mut self, address: u64, len: u64) {
        self.push(Arg {
            value: address,
            copy: Copy::Bytes(len),
        });
        self.value(len);
    }
}

/// A hit of the probe whose semaphore is at `semaphore`, with `cache`
/// (8 bytes beside the semaphore) to keep its slot in.
#[inline(never)]
pub fn hit(semaphore: usize, cache: &AtomicU64, args: &Args) {
    let tsc = tsc();
    let Some(base) = shared(tsc) else {
        return;
    };
    let Some((slot, capture)) = slot(base, semaphore as u64, cache) else {
        return;
    };
    match thread_ring(base) {
        Some((ring, tid)) => write(ring, slot, tsc, tid, args, capture),
        None => {
            counter(base, header::NO_RING).fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn tsc() -> u64 {
    // SAFETY: `rdtsc` reads the time stamp counter and changes nothing;
    // every x86-64 processor has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The shared memory, if a tracer reads it; registers first if it is
/// time to try.
fn shared(tsc: u64) -> Option<*mut u8> {
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => {
                let base = SHARED.load(Ordering::Acquire);
                if alive(base, tsc) {
                    return Some(base);
                }
                // The tracer is gone: register anew when it is time.
                let _ = STATE.compare_exchange(READY, IDLE, Ordering::AcqRel, Ordering::Relaxed);
                SKIP.store(0, Ordering::Relaxed);
                return None;
            }
            BUSY => std::thread::yield_now(),
            _ => {
                if SKIP.load(Ordering::Relaxed) > 0 {
                    SKIP.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                if STATE
                    .compare_exchange(IDLE, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
                {
                    continue;
                }
                match register() {
                    Some(base) => {
                        SHARED.store(base, Ordering::Release);
                        BACKOFF.store(1, Ordering::Relaxed);
                        STATE.store(READY, Ordering::Release);
                    }
                    None => {
                        let wait = BACKOFF.load(Ordering::Relaxed);
                        BACKOFF.store((wait * 2).min(MAX_BACKOFF), Ordering::Relaxed);
                        SKIP.store(wait, Ordering::Relaxed);
                        STATE.store(IDLE, Ordering::Release);
                        return None;
                    }
                }
            }
        }
    }
}

fn counter(base: *mut u8, offset: usize) -> &'static AtomicU64 {
    let field = base.wrapping_add(offset) as *const AtomicU64;
    // SAFETY: `base` is the start of the shared mapping (or of a ring in
    // it), which is never unmapped, and every offset given is an 8-aligned
    // field inside it.
    unsafe { &*field }
}

fn counter32(base: *mut u8, offset: usize) -> &'static AtomicU32 {
    let field = base.wrapping_add(offset) as *const AtomicU32;
    // SAFETY: as `counter`, for a 4-aligned field.
    unsafe { &*field }
}

/// Whether the tracer still reads the rings: it has not said it is done,
/// and it has not fallen behind its own deadline.
fn alive(base: *mut u8, tsc: u64) -> bool {
    tsc <= counter(base, header::DEADLINE).load(Ordering::Relaxed)
}

/// The probe's slot and whether to copy its strings, if the tracer wants
/// it; the answer is kept in `cache` until the table changes.
fn slot(base: *mut u8, semaphore: u64, cache: &AtomicU64) -> Option<(u32, bool)> {
    let epoch = counter32(base, header::EPOCH).load(Ordering::Acquire);
    let cached = cache.load(Ordering::Relaxed);
    // (epoch + 1) << 32 | flags << 31 | slot + 1; 0 means never looked up.
    let answer = if cached >> 32 == u64::from(epoch) + 1 {
        cached as u32
    } else {
        let answer = look_up(base, semaphore);
        cache.store(
            ((u64::from(epoch) + 1) << 32) | u64::from(answer),
            Ordering::Relaxed,
        );
        answer
    };
    let slot = answer & 0x7fff_ffff;
    (slot != 0).then(|| (slot - 1, answer >> 31 == 1))
}

/// The table's answer for a semaphore: slot + 1 (0: not wanted), and the
/// capture flag in the top bit.
fn look_up(base: *mut u8, semaphore: u64) -> u32 {
    let mut index = layout::table_index(semaphore);
    for _ in 0..layout::TABLE_ENTRIES {
        let at = layout::HEADER_SIZE + index * layout::ENTRY_SIZE;
        let address = counter(base, at + entry::SEMAPHORE).load(Ordering::Acquire);
        if address == 0 {
            return 0;
        }
        if address == semaphore {
            let slot = counter32(base, at + entry::SLOT).load(Ordering::Relaxed);
            let flags = counter32(base, at + entry::FLAGS).load(Ordering::Relaxed);
            let capture = u32::from(flags & layout::CAPTURE != 0) << 31;
            return (slot + 1).min(0x7fff_ffff) | capture;
        }
        index = (index + 1) & (layout::TABLE_ENTRIES - 1);
    }
    0
}

/// This thread's ring in the shared memory at `base`, taken at its first
/// hit: read at every hit, so a plain `const` thread-local without a
/// destructor, which compiles to a load relative to the thread pointer.
struct Owned {
    base: Cell<*mut u8>,
    ring: Cell<*mut u8>,
    tid: Cell<u32>,
}

/// Gives the ring back when the thread ends; touched only when a ring is
/// taken.
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let _ = OWNED.try_with(|owned| {
            let ring = owned.ring.get();
            if !ring.is_null() && SHARED.load(Ordering::Acquire) == owned.base.get() {
                counter32(ring, ring::OWNER).store(0, Ordering::Release);
            }
        });
    }
}

std::thread_local! {
    static OWNED: Owned = const {
        Owned {
            base: Cell::new(core::ptr::null_mut()),
            ring: Cell::new(core::ptr::null_mut()),
            tid: Cell::new(0),
        }
    };
    static RELEASE: Release = const { Release };
}

fn thread_ring(base: *mut u8) -> Option<(*mut u8, u32)> {
    OWNED
        .try_with(|owned| {
            if owned.base.get() == base && !owned.ring.get().is_null() {
                return Some((owned.ring.get(), owned.tid.get()));
            }
            if owned.tid.get() == 0 {
                // SAFETY: gettid takes no argument and cannot fail.
                owned.tid.set(unsafe { libc::gettid() } as u32);
            }
            let ring = take_ring(base, owned.tid.get())?;
            owned.base.set(base);
            owned.ring.set(ring);
            // Registers the destructor that gives the ring back.
            let _ = RELEASE.try_with(|_| ());
            Some((ring, owned.tid.get()))
        })
        .ok()
        .flatten()
}

/// Takes a free ring for thread `tid`, and writes its name into it.
fn take_ring(base: *mut u8, tid: u32) -> Option<*mut u8> {
    for i in 0..layout::RING_COUNT {
        let ring = base.wrapping_add(layout::RINGS_AT + i * layout::RING_SIZE);
        let owner = counter32(ring, ring::OWNER);
        if owner
            .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            let mut name = [0u8; 16];
            // SAFETY: PR_GET_NAME writes at most 16 bytes into `name`.
            unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
            // SAFETY: the ring's header is RING_HEADER bytes inside the
            // mapping; only this thread writes its name while it owns it.
            let header = unsafe { core::slice::from_raw_parts_mut(ring, layout::RING_HEADER) };
            header[ring::COMM..ring::COMM + 16].copy_from_slice(&name);
            return Some(ring);
        }
    }
    None
}

/// Bytes a captured string takes: its index and length, then its bytes,
/// padded to 4.
fn captured_size(len: usize) -> usize {
    4 + len.div_ceil(4) * 4
}

/// The bytes of argument `arg` that are copied, at most MAX_CAPTURE.
fn captured(arg: &Arg) -> &[u8] {
    let bytes = match arg.copy {
        Copy::None => return &[],
        // SAFETY: a `&str` or `&[u8]` argument: `len` bytes at the
        // address, valid for the probe's duration.
        Copy::Bytes(len) => unsafe {
            core::slice::from_raw_parts(arg.value as *const u8, len as usize)
        },
        Copy::CStr => {
            let start = arg.value as *const core::ffi::c_char;
            // SAFETY: a `&CStr` argument: bytes up to a NUL, valid for the
            // probe's duration.
            unsafe { core::ffi::CStr::from_ptr(start) }.to_bytes()
        }
    };
    &bytes[..bytes.len().min(layout::MAX_CAPTURE)]
}

/// The data area of a ring, which the thread that owns it writes.
fn data<'a>(ring: *mut u8) -> &'a mut [u8] {
    // SAFETY: RING_DATA bytes after the ring's header are inside the
    // shared mapping, never unmapped; only the ring's owner (this thread)
    // writes them, and the tracer reads only what the owner published.
    unsafe {
        core::slice::from_raw_parts_mut(ring.wrapping_add(layout::RING_HEADER), layout::RING_DATA)
    }
}

/// Writes one record into `ring`, or counts it lost when there is no room.
fn write(ring: *mut u8, slot: u32, tsc: u64, tid: u32, args: &Args, capture: bool) {
    let args = args.as_slice();
    let mut copied: [&[u8]; 12] = [&[]; 12];
    let mut strings = 0;
    if capture {
        for (bytes, arg) in copied.iter_mut().zip(args) {
            if arg.copy != Copy::None {
                *bytes = captured(arg);
                strings += captured_size(bytes.len());
            }
        }
    }
    let size = (record::HEADER + 8 * args.len() + strings).next_multiple_of(8);
    let head = counter(ring, ring::HEAD).load(Ordering::Relaxed);
    let tail = counter(ring, ring::TAIL).load(Ordering::Acquire);
    let mut at = (head % layout::RING_DATA as u64) as usize;
    let pad = if at + size > layout::RING_DATA {
        layout::RING_DATA - at
    } else {
        0
    };
    if head + (pad + size) as u64 - tail > layout::RING_DATA as u64 {
        // Only the ring's owner counts its losses: no locked instruction.
        let lost = counter(ring, ring::LOST);
        lost.store(lost.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        return;
    }
    let data = data(ring);
    if pad > 0 {
        data[at..at + 4].copy_from_slice(&(layout::PAD | pad as u32).to_ne_bytes());
        at = 0;
    }
    let rec = &mut data[at..at + size];
    rec[record::LEN..][..4].copy_from_slice(&(size as u32).to_ne_bytes());
    rec[record::SLOT..][..4].copy_from_slice(&slot.to_ne_bytes());
    rec[record::TSC..][..8].copy_from_slice(&tsc.to_ne_bytes());
    rec[record::TID..][..4].copy_from_slice(&tid.to_ne_bytes());
    rec[record::ARGS..][..2].copy_from_slice(&(args.len() as u16).to_ne_bytes());
    rec[record::STRINGS..][..2].copy_from_slice(&(strings as u16).to_ne_bytes());
    let mut out = record::HEADER;
    for arg in args {
        rec[out..out + 8].copy_from_slice(&arg.value.to_ne_bytes());
        out += 8;
    }
    for (i, (arg, bytes)) in args.iter().zip(&copied).enumerate() {
        if !capture || arg.copy == Copy::None {
            continue;
        }
        rec[out..out + 2].copy_from_slice(&(i as u16).to_ne_bytes());
        rec[out + 2..out + 4].copy_from_slice(&(bytes.len() as u16).to_ne_bytes());
        rec[out + 4..out + 4 + bytes.len()].copy_from_slice(bytes);
        out += captured_size(bytes.len());
    }
    counter(ring, ring::HEAD).store(head + (pad + size) as u64, Ordering::Release);
}

/// Connects to the tracer listening for this process, checks who it is,
/// shares the memory, and waits for the tracer to fill its table.
fn register() -> Option<*mut u8> {
    // SAFETY: getpid takes nothing and cannot fail.
    let pid = unsafe { libc::getpid() } as u32;
    // SAFETY: as getpid.
    let uid = unsafe { libc::getuid() };
    // SAFETY: as getpid.
    let gid = unsafe { libc::getgid() };
    let socket = connect()?;
    let peer_ok = peer_may_read_us(socket, uid);
    let base = peer_ok.then(|| share(socket, pid, uid, gid)).flatten();
    match base {
        Some(base) => {
            static FORK: std::sync::Once = std::sync::Once::new();
            // SAFETY: `after_fork` is an `extern "C"` function that only
            // stores into atomics and closes a descriptor of its own.
            FORK.call_once(|| unsafe {
                libc::pthread_atfork(None, None, Some(after_fork));
            });
            let old = SOCKET.swap(socket, Ordering::AcqRel);
            if old >= 0 {
                // SAFETY: the old socket is ours and no longer used.
                unsafe { libc::close(old) };
            }
            Some(base)
        }
        None => {
            // SAFETY: `socket` is ours and not kept.
            unsafe { libc::close(socket) };
            None
        }
    }
}

/// In a child of `fork`: the shared memory is the parent's (and so is
/// its thread's ring), so the child registers on its own, if a tracer
/// wants it, at its first hit.
extern "C" fn after_fork() {
    SHARED.store(core::ptr::null_mut(), Ordering::Relaxed);
    SKIP.store(0, Ordering::Relaxed);
    BACKOFF.store(1, Ordering::Relaxed);
    let socket = SOCKET.swap(-1, Ordering::Relaxed);
    if socket >= 0 {
        // SAFETY: the child's copy of the parent's socket, no longer used.
        unsafe { libc::close(socket) };
    }
    STATE.store(IDLE, Ordering::Release);
}

/// A socket connected to `sdt-fastpath` in the abstract namespace.
fn connect() -> Option<i32> {
    // SAFETY: socket takes no pointer.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut address: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = layout::SOCKET_NAME;
    // The abstract namespace: a NUL, then the name.
    for (to, &from) in address.sun_path[1..].iter_mut().zip(name) {
        *to = from as libc::c_char;
    }
    let size = core::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    // SAFETY: `address` is a valid sockaddr_un of `size` bytes.
    let connected = unsafe {
        libc::connect(
            fd,
            &address as *const libc::sockaddr_un as *const libc::sockaddr,
            size as libc::socklen_t,
        )
    };
    if connected != 0 {
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// Whether the peer could read this process's memory anyway: root, or
/// the same user.
fn peer_may_read_us(socket: i32, uid: u32) -> bool {
    // SAFETY: an all-zero ucred is valid.
    let mut cred: libc::ucred = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes a ucred of `len` bytes into `cred`.
    let got = unsafe {
        libc::getsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    got == 0 && (cred.uid == 0 || cred.uid == uid)
}

/// Creates the shared memory, sends it to the tracer and waits for its
/// answer (two seconds at most); the mapping on success.
fn share(socket: i32, pid: u32, uid: u32, gid: u32) -> Option<*mut u8> {
    // SAFETY: the name is a NUL-terminated string.
    let memfd = unsafe { libc::memfd_create(c"sdt-fastpath".as_ptr(), libc::MFD_CLOEXEC) };
    if memfd < 0 {
        return None;
    }
    let base = map(memfd).and_then(|base| {
        write_header(base, pid, uid, gid);
        (send(socket, memfd) && answered(socket)).then_some(base)
    });
    // SAFETY: the tracer has its own copy of the descriptor; ours is not
    // needed once mapped.
    unsafe { libc::close(memfd) };
    base
}

fn map(memfd: i32) -> Option<*mut u8> {
    // SAFETY: ftruncate on a descriptor we own.
    if unsafe { libc::ftruncate(memfd, layout::SHARED_SIZE as libc::off_t) } != 0 {
        return None;
    }
    // SAFETY: a new shared mapping of our own descriptor, at an address the
    // kernel picks; checked for failure, and never unmapped.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            layout::SHARED_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            memfd,
            0,
        )
    };
    (base != libc::MAP_FAILED).then_some(base as *mut u8)
}

fn write_header(base: *mut u8, pid: u32, uid: u32, gid: u32) {
    counter(base, header::MAGIC).store(layout::MAGIC, Ordering::Relaxed);
    counter32(base, header::VERSION).store(layout::VERSION, Ordering::Relaxed);
    counter32(base, header::PID).store(pid, Ordering::Relaxed);
    counter(base, header::SIZE).store(layout::SHARED_SIZE as u64, Ordering::Relaxed);
    counter32(base, header::UID).store(uid, Ordering::Relaxed);
    counter32(base, header::GID).store(gid, Ordering::Release);
}

/// Sends the hello message with the shared memory's descriptor.
fn send(socket: i32, memfd: i32) -> bool {
    let mut hello = [0u8; layout::HELLO_SIZE];
    hello[..8].copy_from_slice(&layout::MAGIC.to_le_bytes());
    hello[8..12].copy_from_slice(&layout::VERSION.to_le_bytes());
    hello[16..24].copy_from_slice(&(layout::SHARED_SIZE as u64).to_le_bytes());
    let mut iov = libc::iovec {
        iov_base: hello.as_mut_ptr() as *mut libc::c_void,
        iov_len: hello.len(),
    };
    // Room for one descriptor's control message, aligned as cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: an all-zero msghdr is valid; it is filled in below.
    let mut message: libc::msghdr = unsafe { core::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: CMSG_SPACE computes a size.
    message.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as usize;
    // SAFETY: the control buffer holds CMSG_SPACE(4) bytes: the first
    // header is at its start.
    let first = unsafe { libc::CMSG_FIRSTHDR(&message) };
    // SAFETY: `first` points at the start of the control buffer, aligned as
    // a u64 array is, which a cmsghdr needs.
    let cmsg = unsafe { &mut *first };
    cmsg.cmsg_level = libc::SOL_SOCKET;
    cmsg.cmsg_type = libc::SCM_RIGHTS;
    // SAFETY: CMSG_LEN computes a size.
    cmsg.cmsg_len = unsafe { libc::CMSG_LEN(4) } as usize;
    // SAFETY: CMSG_DATA points inside the control buffer.
    let fd_at = unsafe { libc::CMSG_DATA(cmsg) } as *mut i32;
    // SAFETY: 4 bytes at `fd_at` are inside the control buffer.
    unsafe { fd_at.write_unaligned(memfd) };
    // SAFETY: `message` points at live buffers.
    let sent = unsafe { libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL) };
    sent == hello.len() as isize
}

/// Waits for the tracer's `0`: its table is filled in.
fn answered(socket: i32) -> bool {
    let timeout = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    let mut answer = [0u8; 4];
    // SAFETY: SO_RCVTIMEO reads a timeval of the size given.
    unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &timeout as *const libc::timeval as *const libc::c_void,
            core::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    // SAFETY: recv writes at most 4 bytes into `answer`.
    let got = unsafe { libc::recv(socket, answer.as_mut_ptr() as *mut libc::c_void, 4, 0) };
    got == 4 && u32::from_le_bytes(answer) == 0
}
