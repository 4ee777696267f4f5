//! Every system call and every `unsafe` block of the crate.
//!
//! Each function here builds one kernel argument structure, makes one
//! call, and wraps what comes back in an owning type: file descriptors in
//! [`OwnedFd`] (closed on drop), mappings in [`Mmap`] (unmapped on drop).
//! Pointers handed to the kernel always come from borrows that the
//! function holds for the duration of the call, together with the length
//! the kernel will use for them; where the kernel derives that length
//! from an object (a map's value size), the object carries it and the
//! function checks it. Callers above this module can therefore not cause
//! memory unsafety whatever they pass.
//!
//! `union bpf_attr` and `struct perf_event_attr` are built as zeroed byte
//! buffers with fields written at the offsets of the kernel UAPI headers
//! (`include/uapi/linux/bpf.h`, `include/uapi/linux/perf_event.h`). A
//! zeroed buffer larger than the fields we set is what the kernel wants:
//! it rejects non-zero bytes it does not understand.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::OnceLock;
use std::time::Duration;

use rustix::event::{epoll, Timespec};
use rustix::io::Errno;
use rustix::ioctl::{ioctl, opcode, IntegerSetter, NoArg, Opcode};
use rustix::mm::{self, MapFlags, ProtFlags};

use crate::insn::Insn;

// `enum bpf_cmd`.
const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_MAP_GET_NEXT_KEY: u32 = 4;
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_TEST_RUN: u32 = 10;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_RAW_TRACEPOINT_OPEN: u32 = 17;
const BPF_BTF_LOAD: u32 = 18;
const BPF_LINK_CREATE: u32 = 28;

/// Size of our `union bpf_attr` buffer: more than any command we issue uses.
const ATTR_SIZE: usize = 160;

/// A zeroed kernel argument structure with typed writes at byte offsets:
/// `union bpf_attr` by default, `struct perf_event_attr` as [`PerfAttr`].
#[repr(C, align(8))]
struct Attr<const N: usize = ATTR_SIZE>([u8; N]);

impl<const N: usize> Attr<N> {
    fn new() -> Attr<N> {
        Attr([0; N])
    }

    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }

    fn ptr<T>(&mut self, off: usize, p: *const T) -> &mut Self {
        self.u64(off, p as usize as u64)
    }

    fn get_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().unwrap())
    }
}

/// Issues `bpf(cmd, attr)`.
///
/// Every caller stores in `attr` only pointers to memory it borrows across
/// this call, sized as the kernel will access it.
fn bpf(cmd: u32, attr: &mut Attr) -> io::Result<i64> {
    // SAFETY: `attr` is a writable buffer of `ATTR_SIZE` bytes, valid for the
    // whole call. The pointers stored inside it are valid per this
    // function's contract, which every caller in this module upholds.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr.0.as_mut_ptr(),
            ATTR_SIZE as libc::c_long,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Issues a `bpf` command that returns a new file descriptor.
fn bpf_fd(cmd: u32, attr: &mut Attr) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: on success these commands return a new descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Copies `name` into a 16-byte, NUL-terminated object name, keeping only
/// the characters the kernel accepts (alphanumerics, `_` and `.`).
fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let valid = name
        .bytes()
        .filter(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.');
    for (slot, b) in out[..15].iter_mut().zip(valid) {
        *slot = b;
    }
    out
}

// ---- maps -------------------------------------------------------------

/// What `BPF_MAP_CREATE` needs.
pub(crate) struct MapCreate<'a> {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    pub name: &'a str,
    /// Per-CPU maps copy one 8-byte-aligned value per possible CPU.
    pub per_cpu: bool,
    /// The BTF that describes keys and values, and the type ids of each,
    /// for the map types that need it (task storage).
    pub btf: Option<(BorrowedFd<'a>, u32, u32)>,
}

/// A map file descriptor together with the buffer sizes the kernel copies
/// for it, so that element operations can check the caller's buffers.
#[derive(Debug)]
pub(crate) struct MapFd {
    fd: OwnedFd,
    key_size: usize,
    value_len: usize,
}

/// Creates a map.
pub(crate) fn map_create(m: &MapCreate<'_>) -> io::Result<MapFd> {
    let value_len = if m.per_cpu {
        (m.value_size as usize).next_multiple_of(8) * possible_cpus()?
    } else {
        m.value_size as usize
    };
    let name = object_name(m.name);
    let mut attr = Attr::new();
    attr.u32(0, m.map_type)
        .u32(4, m.key_size)
        .u32(8, m.value_size)
        .u32(12, m.max_entries)
        .u32(16, m.flags);
    attr.0[28..44].copy_from_slice(&name);
    if let Some((btf, key_type, value_type)) = m.btf {
        attr.u32(48, btf.as_raw_fd() as u32)
            .u32(52, key_type)
            .u32(56, value_type);
    }
    let fd = bpf_fd(BPF_MAP_CREATE, &mut attr)?;
    Ok(MapFd {
        fd,
        key_size: m.key_size as usize,
        value_len,
    })
}

impl MapFd {
    /// A second descriptor of the same map (`F_DUPFD_CLOEXEC`).
    pub fn try_clone(&self) -> io::Result<MapFd> {
        Ok(MapFd {
            fd: self.fd.try_clone()?,
            key_size: self.key_size,
            value_len: self.value_len,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Bytes of one key.
    pub fn key_size(&self) -> usize {
        self.key_size
    }

    /// Bytes the kernel copies for one value (all CPUs for per-CPU maps).
    pub fn value_len(&self) -> usize {
        self.value_len
    }

    fn check(&self, key: &[u8], value: Option<usize>) {
        assert_eq!(key.len(), self.key_size, "map key buffer size");
        if let Some(len) = value {
            assert_eq!(len, self.value_len, "map value buffer size");
        }
    }

    fn elem_attr(&self, key: &[u8]) -> Attr {
        let mut attr = Attr::new();
        attr.u32(0, self.fd.as_raw_fd() as u32).ptr(8, key.as_ptr());
        attr
    }

    /// Copies the value under `key` into `value`; `Ok(false)` if absent.
    ///
    /// # Panics
    /// If the buffers are not exactly the map's key and value sizes.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        self.check(key, Some(value.len()));
        let mut attr = self.elem_attr(key);
        attr.ptr(16, value.as_mut_ptr());
        absent_is_false(bpf(BPF_MAP_LOOKUP_ELEM, &mut attr))
    }

    /// Stores `value` under `key` (`flags`: `BPF_ANY`, `BPF_NOEXIST`, `BPF_EXIST`).
    ///
    /// # Panics
    /// If the buffers are not exactly the map's key and value sizes.
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check(key, Some(value.len()));
        let mut attr = self.elem_attr(key);
        attr.ptr(16, value.as_ptr()).u64(24, flags);
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// Removes `key`; `Ok(false)` if it was absent.
    ///
    /// # Panics
    /// If the key buffer is not exactly the map's key size.
    pub fn delete(&self, key: &[u8]) -> io::Result<bool> {
        self.check(key, None);
        let mut attr = self.elem_attr(key);
        absent_is_false(bpf(BPF_MAP_DELETE_ELEM, &mut attr))
    }

    /// Writes the key after `key` (the first key if `None`) into `next`;
    /// `Ok(false)` at the end.
    ///
    /// # Panics
    /// If the buffers are not exactly the map's key size.
    pub fn next_key(&self, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
        self.check(next, None);
        let mut attr = Attr::new();
        attr.u32(0, self.fd.as_raw_fd() as u32);
        if let Some(key) = key {
            self.check(key, None);
            attr.ptr(8, key.as_ptr());
        }
        attr.ptr(16, next.as_mut_ptr());
        absent_is_false(bpf(BPF_MAP_GET_NEXT_KEY, &mut attr))
    }
}

fn absent_is_false(r: io::Result<i64>) -> io::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if Errno::from_io_error(&e) == Some(Errno::NOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Number of possible CPUs, as per-CPU maps count them: the CPUs listed
/// in `/sys/devices/system/cpu/possible`.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    static CPUS: OnceLock<usize> = OnceLock::new();
    if let Some(n) = CPUS.get() {
        return Ok(*n);
    }
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let n = parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot parse /sys/devices/system/cpu/possible: {text:?}"),
        )
    })?;
    Ok(*CPUS.get_or_init(|| n))
}

/// The CPUs that are online now.
pub(crate) fn online_cpus() -> io::Result<Vec<i32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    cpu_ids(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot parse /sys/devices/system/cpu/online: {text:?}"),
        )
    })
}

/// The CPUs in a list like `0-3,6,8-9`.
fn cpu_ids(text: &str) -> Option<Vec<i32>> {
    let mut ids = Vec::new();
    for part in text.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<i32>().ok()?, hi.parse::<i32>().ok()?),
            None => {
                let n = part.parse::<i32>().ok()?;
                (n, n)
            }
        };
        if hi < lo {
            return None;
        }
        ids.extend(lo..=hi);
    }
    (!ids.is_empty()).then_some(ids)
}

/// Counts the CPUs in a list like `0-3,6,8-9`.
fn parse_cpu_list(text: &str) -> Option<usize> {
    cpu_ids(text).map(|ids| ids.len())
}

// ---- programs ---------------------------------------------------------

/// What `BPF_PROG_LOAD` needs.
pub(crate) struct ProgLoad<'a> {
    pub prog_type: u32,
    pub expected_attach_type: u32,
    pub insns: &'a [Insn],
    pub license: &'a CStr,
    /// `prog_flags`, e.g. [`F_SLEEPABLE`].
    pub flags: u32,
    pub name: &'a str,
    /// The BTF of the program's functions and `(first slot, type id)` of
    /// each, for a program of several functions.
    pub func_info: Option<(BorrowedFd<'a>, &'a [[u32; 2]])>,
}

/// A failed load: the error, and the log size the kernel wanted
/// (`log_true_size`, 0 where the kernel does not report it).
pub(crate) struct LoadFailure {
    pub error: io::Error,
    pub log_true_size: u32,
}

/// `BPF_F_SLEEPABLE`, a `prog_flags` bit.
pub(crate) const F_SLEEPABLE: u32 = 1 << 4;

/// Loads a program. With `log`, the verifier writes its log at `log_level`
/// into the buffer, NUL-terminated.
pub(crate) fn prog_load(
    p: &ProgLoad<'_>,
    log: Option<(&mut [u8], u32)>,
) -> Result<OwnedFd, LoadFailure> {
    let name = object_name(p.name);
    let mut attr = Attr::new();
    attr.u32(0, p.prog_type)
        .u32(4, p.insns.len() as u32)
        .ptr(8, p.insns.as_ptr())
        .ptr(16, p.license.as_ptr())
        .u32(44, p.flags)
        .u32(68, p.expected_attach_type);
    attr.0[48..64].copy_from_slice(&name);
    if let Some((btf, records)) = p.func_info {
        attr.u32(72, btf.as_raw_fd() as u32)
            .u32(76, 8)
            .ptr(80, records.as_ptr())
            .u32(88, records.len() as u32);
    }
    if let Some((buf, level)) = log {
        attr.u32(24, level)
            .u32(28, u32::try_from(buf.len()).unwrap_or(u32::MAX))
            .ptr(32, buf.as_mut_ptr());
    }
    // The kernel answers EAGAIN when it was interrupted mid-verification.
    let mut tries = 0;
    loop {
        match bpf_fd(BPF_PROG_LOAD, &mut attr) {
            Err(e) if Errno::from_io_error(&e) == Some(Errno::AGAIN) && tries < 5 => tries += 1,
            Ok(fd) => return Ok(fd),
            Err(error) => {
                return Err(LoadFailure {
                    error,
                    log_true_size: attr.get_u32(140),
                })
            }
        }
    }
}

/// Loads BTF type information (`BPF_BTF_LOAD`).
pub(crate) fn btf_load(blob: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.ptr(0, blob.as_ptr()).u32(16, blob.len() as u32);
    bpf_fd(BPF_BTF_LOAD, &mut attr)
}

/// Runs a program once with an empty context (`BPF_PROG_TEST_RUN`) and
/// returns its return value. Raw tracepoint programs run this way in the
/// calling task, on the calling CPU.
pub(crate) fn prog_test_run(prog: BorrowedFd<'_>) -> io::Result<u32> {
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32);
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(attr.get_u32(4))
}

/// Runs a syscall program once with `context` (`BPF_PROG_TEST_RUN`'s
/// `ctx_in`, which the kernel copies back after the run) and returns its
/// return value.
pub(crate) fn prog_run_with_context(prog: BorrowedFd<'_>, context: &mut [u8]) -> io::Result<u32> {
    let len = u32::try_from(context.len())
        .map_err(|_| io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()))?;
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32)
        .u32(40, len)
        .ptr(48, context.as_mut_ptr().cast_const());
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(attr.get_u32(4))
}

/// Attaches a raw tracepoint program to the tracepoint `name`
/// (`BPF_RAW_TRACEPOINT_OPEN`), which needs no tracefs.
pub(crate) fn raw_tracepoint_open(name: &CStr, prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.ptr(0, name.as_ptr()).u32(8, prog.as_raw_fd() as u32);
    bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// What `BPF_OBJ_GET_INFO_BY_FD` tells about a program.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProgInfo {
    pub id: u32,
    pub xlated_len: u32,
    pub verified_insns: u32,
}

// Offsets in `struct bpf_prog_info`.
const PROG_INFO_ID: usize = 4;
const PROG_INFO_XLATED_LEN: usize = 20;
const PROG_INFO_XLATED_INSNS: usize = 32;
const PROG_INFO_VERIFIED_INSNS: usize = 216;
const PROG_INFO_SIZE: usize = 232;

/// Reads a program's info; with `xlated`, also copies up to
/// `xlated.len()` of the kernel's translated instructions.
pub(crate) fn prog_info(prog: BorrowedFd<'_>, xlated: Option<&mut [Insn]>) -> io::Result<ProgInfo> {
    #[repr(C, align(8))]
    struct Info([u8; PROG_INFO_SIZE]);
    let mut info = Info([0; PROG_INFO_SIZE]);
    if let Some(buf) = xlated {
        let bytes = u32::try_from(std::mem::size_of_val(buf)).unwrap_or(u32::MAX) & !7;
        info.0[PROG_INFO_XLATED_LEN..PROG_INFO_XLATED_LEN + 4]
            .copy_from_slice(&bytes.to_ne_bytes());
        info.0[PROG_INFO_XLATED_INSNS..PROG_INFO_XLATED_INSNS + 8]
            .copy_from_slice(&(buf.as_mut_ptr() as usize as u64).to_ne_bytes());
    }
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32)
        .u32(4, PROG_INFO_SIZE as u32)
        .ptr(8, info.0.as_mut_ptr());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let u32_at = |off: usize| u32::from_ne_bytes(info.0[off..off + 4].try_into().unwrap());
    Ok(ProgInfo {
        id: u32_at(PROG_INFO_ID),
        xlated_len: u32_at(PROG_INFO_XLATED_LEN),
        verified_insns: u32_at(PROG_INFO_VERIFIED_INSNS),
    })
}

// ---- links ------------------------------------------------------------

/// `BPF_PERF_EVENT` attach type.
pub(crate) const ATTACH_PERF_EVENT: u32 = 41;
/// `BPF_TRACE_UPROBE_MULTI` attach type.
pub(crate) const ATTACH_UPROBE_MULTI: u32 = 48;

/// Links `prog` to a perf event with a cookie. `event: None` passes
/// `target_fd = -1`, which is how the feature probe asks.
pub(crate) fn link_create_perf_event(
    prog: BorrowedFd<'_>,
    event: Option<BorrowedFd<'_>>,
    cookie: u64,
) -> io::Result<OwnedFd> {
    let target = event.map_or(-1, |e| e.as_raw_fd());
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32)
        .u32(4, target as u32)
        .u32(8, ATTACH_PERF_EVENT)
        .u64(16, cookie);
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

/// What a `BPF_TRACE_UPROBE_MULTI` link needs.
pub(crate) struct UprobeMulti<'a> {
    pub path: &'a CStr,
    pub offsets: &'a [u64],
    pub ref_ctr_offsets: Option<&'a [u64]>,
    pub cookies: Option<&'a [u64]>,
    pub retprobe: bool,
    pub pid: u32,
}

/// Creates one uprobe_multi link over every offset.
///
/// # Panics
/// If `ref_ctr_offsets` or `cookies` is not as long as `offsets`.
pub(crate) fn link_create_uprobe_multi(
    prog: BorrowedFd<'_>,
    u: &UprobeMulti<'_>,
) -> io::Result<OwnedFd> {
    let cnt = u.offsets.len();
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32)
        .u32(8, ATTACH_UPROBE_MULTI)
        .ptr(16, u.path.as_ptr())
        .ptr(24, u.offsets.as_ptr())
        .u32(
            48,
            u32::try_from(cnt).map_err(|_| io::ErrorKind::InvalidInput)?,
        )
        .u32(52, u.retprobe as u32)
        .u32(56, u.pid);
    if let Some(r) = u.ref_ctr_offsets {
        assert_eq!(r.len(), cnt, "ref_ctr_offsets length");
        attr.ptr(32, r.as_ptr());
    }
    if let Some(c) = u.cookies {
        assert_eq!(c.len(), cnt, "cookies length");
        attr.ptr(40, c.as_ptr());
    }
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

// ---- perf events --------------------------------------------------------

/// `PERF_EVENT_IOC_ENABLE`: `_IO('$', 0)`.
const PERF_EVENT_IOC_ENABLE: Opcode = opcode::none(b'$', 0);
/// `PERF_EVENT_IOC_SET_BPF`: `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: Opcode = opcode::write::<u32>(b'$', 8);
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `PERF_ATTR_SIZE_VER1`: the first version with `config2`.
const PERF_ATTR_SIZE: usize = 72;

/// A zeroed `struct perf_event_attr`.
type PerfAttr = Attr<PERF_ATTR_SIZE>;

impl PerfAttr {
    /// An event of PMU `kind` (`type`) and `config`, its size filled in.
    fn event(kind: u32, config: u64) -> PerfAttr {
        let mut attr = PerfAttr::new();
        attr.u32(0, kind)
            .u32(4, PERF_ATTR_SIZE as u32)
            .u64(8, config);
        attr
    }
}

/// `perf_event_attr.flags` bits.
const PERF_FLAG_DISABLED: u64 = 1 << 0;

/// Issues `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
///
/// Every caller stores in `attr` only pointers to memory it borrows across
/// this call (the kernel copies what they point at).
fn perf_event_open(attr: &PerfAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a `perf_event_attr` of the size it declares, valid
    // for the whole call; the pointers stored inside it are valid per this
    // function's contract, which every caller in this module upholds.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.0.as_ptr(),
            pid as libc::c_long,
            cpu as libc::c_long,
            -1 as libc::c_long,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A uprobe perf event to open.
pub(crate) struct PerfUprobe<'a> {
    /// The uprobe PMU's type number.
    pub pmu_type: u32,
    /// `config`: retprobe bit and ref_ctr offset, already placed.
    pub config: u64,
    pub path: &'a CStr,
    pub offset: u64,
    pub pid: i32,
    pub cpu: i32,
}

/// Opens a disabled uprobe perf event.
pub(crate) fn perf_event_open_uprobe(p: &PerfUprobe<'_>) -> io::Result<OwnedFd> {
    let mut attr = PerfAttr::event(p.pmu_type, p.config);
    attr.u64(40, PERF_FLAG_DISABLED)
        .ptr(56, p.path.as_ptr()) // config1
        .u64(64, p.offset); // config2
                            // `attr` points at `p.path`, which outlives the call.
    perf_event_open(&attr, p.pid, p.cpu)
}

/// `PERF_TYPE_SOFTWARE` and its `PERF_COUNT_SW_DUMMY` event.
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
/// `perf_event_attr.sample_type`: `PERF_SAMPLE_TID | PERF_SAMPLE_TIME`.
pub(crate) const SAMPLE_TID_TIME: u64 = (1 << 1) | (1 << 2);

/// Opens a perf event that counts nothing and reports, in its ring
/// buffer, the executable mappings, `fork`s, `exec`s and exits of process
/// `pid` (and of its children, with `inherit`) on `cpu`. Each record ends
/// with the pid, tid and time ([`SAMPLE_TID_TIME`]).
pub(crate) fn perf_event_open_mappings(
    pid: i32,
    cpu: i32,
    inherit: bool,
    wake: bool,
) -> io::Result<OwnedFd> {
    // flags: inherit (1), mmap (8), comm (9), task (13), watermark (14),
    // sample_id_all (18), mmap2 (23), comm_exec (24).
    let flags = (u64::from(inherit) << 1)
        | (1 << 8)
        | (1 << 9)
        | (1 << 13)
        | (u64::from(wake) << 14)
        | (1 << 18)
        | (1 << 23)
        | (1 << 24);
    let mut attr = PerfAttr::event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY);
    attr.u64(24, SAMPLE_TID_TIME).u64(40, flags);
    if wake {
        // wakeup_watermark: readable as soon as one byte is written.
        attr.u32(48, 1);
    }
    perf_event_open(&attr, pid, cpu)
}

/// `perf_event_attr.flags` bit `freq`: `sample_freq` rather than a period.
const PERF_FLAG_FREQ: u64 = 1 << 10;

/// Opens a disabled perf event that counts `event` on `cpu` for every
/// process, overflowing as its sampling says.
pub(crate) fn perf_event_open_counter(
    event: &crate::perf_event::PerfEvent,
    cpu: i32,
) -> io::Result<OwnedFd> {
    use crate::perf_event::Sampling;
    let mut attr = PerfAttr::event(event.kind.raw(), event.config);
    let (every, freq) = match event.sampling {
        Sampling::Period(n) => (n, 0),
        Sampling::Frequency(n) => (n, PERF_FLAG_FREQ),
    };
    attr.u64(16, every).u64(40, PERF_FLAG_DISABLED | freq);
    perf_event_open(&attr, -1, cpu)
}

/// `PERF_TYPE_TRACEPOINT`.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// Opens a disabled perf event for tracepoint `id`, for every process (on
/// CPU 0: a program attached to it runs wherever the tracepoint fires).
pub(crate) fn perf_event_open_tracepoint(id: u64) -> io::Result<OwnedFd> {
    let mut attr = PerfAttr::event(PERF_TYPE_TRACEPOINT, id);
    attr.u64(16, 1) // sample_period
        .u64(40, PERF_FLAG_DISABLED);
    perf_event_open(&attr, -1, 0)
}

/// Attaches `prog` to a perf event the old way (no cookie).
pub(crate) fn perf_event_set_bpf(event: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    let fd = prog.as_raw_fd() as usize;
    // SAFETY: PERF_EVENT_IOC_SET_BPF takes its argument as an integer (the
    // program's descriptor), not as a pointer, as this setter passes it.
    let setter = unsafe { IntegerSetter::<PERF_EVENT_IOC_SET_BPF>::new_usize(fd) };
    // SAFETY: `event` is a live perf event descriptor (borrowed), and the
    // setter passes an integer: no memory is read or written.
    unsafe { ioctl(event, setter) }?;
    Ok(())
}

/// Enables a perf event.
pub(crate) fn perf_event_enable(event: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: PERF_EVENT_IOC_ENABLE reads no argument memory (its integer
    // argument is flags, none here), which is what `NoArg` declares.
    let enable = unsafe { NoArg::<PERF_EVENT_IOC_ENABLE>::new() };
    // SAFETY: `event` is a live perf event descriptor (borrowed), and no
    // memory is passed.
    unsafe { ioctl(event, enable) }?;
    Ok(())
}

// ---- memory mappings ------------------------------------------------------

/// The system page size.
pub(crate) fn page_size() -> usize {
    rustix::param::page_size()
}

/// A shared mapping of a file descriptor, unmapped on drop.
///
/// The memory is shared with the kernel, which may change it at any time.
/// Reads therefore go through atomics, or through byte slices whose
/// contents the kernel has promised not to change (committed ring-buffer
/// records); every bit pattern is a valid `u8`, so a broken promise could
/// tear data but not break memory safety.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to the process, not to a thread; `Mmap`
// hands out only shared references tied to `&self`.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` from `offset`, shared, read-only or read-write.
    pub fn map(fd: BorrowedFd<'_>, offset: usize, len: usize, writable: bool) -> io::Result<Mmap> {
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a fresh mapping at an address the kernel picks cannot
        // alias any Rust object.
        let p = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED,
                fd,
                offset as u64,
            )
        }?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(Mmap { ptr, len })
    }

    /// Maps the first `len` bytes of the file `fd`, private and
    /// read-only: a file that no one writes while it is mapped (the
    /// kernel's BTF), read without copying it.
    pub fn map_file(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh mapping at an address the kernel picks cannot
        // alias any Rust object.
        let p = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::PRIVATE,
                fd,
                0,
            )
        }?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(Mmap { ptr, len })
    }

    fn at(&self, off: usize, size: usize, align: usize) -> *mut u8 {
        assert!(
            off.checked_add(size).is_some_and(|end| end <= self.len),
            "mapping access out of bounds"
        );
        assert_eq!(off % align, 0, "misaligned mapping access");
        // SAFETY: `off + size <= len`, so the result stays in the mapping.
        unsafe { self.ptr.as_ptr().add(off) }
    }

    /// The 64-bit word at `off`, for atomic access.
    ///
    /// # Panics
    /// If the word is out of bounds or misaligned.
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        let p = self.at(off, 8, 8);
        // SAFETY: in bounds and aligned (checked above); the mapping lives as
        // long as `self`; other writers (the kernel) use atomic operations
        // too. Loads on a read-only mapping are allowed for lock-free atomics.
        unsafe { AtomicU64::from_ptr(p.cast()) }
    }

    /// The 32-bit word at `off`, for atomic access.
    ///
    /// # Panics
    /// If the word is out of bounds or misaligned.
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        let p = self.at(off, 4, 4);
        // SAFETY: as for `atomic_u64`.
        unsafe { AtomicU32::from_ptr(p.cast()) }
    }

    /// `len` bytes at `off`. Callers ask only for bytes the kernel will not
    /// change while the borrow lives (see the type's documentation).
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        let p = self.at(off, len, 1);
        // SAFETY: in bounds (checked above); the mapping lives as long as
        // `self`; any bit pattern is a valid `u8`.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: we own this mapping, and the borrows handed out by the
        // accessors have ended.
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// ---- waiting ---------------------------------------------------------------

/// An epoll instance.
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        Ok(Epoll(epoll::create(epoll::CreateFlags::CLOEXEC)?))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// Watches `fd` for readability; `wait` reports `token` when it is.
    /// The kernel drops the watch by itself when `fd`'s file is closed.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let data = epoll::EventData::new_u64(token);
        Ok(epoll::add(&self.0, fd, data, epoll::EventFlags::IN)?)
    }

    /// Waits up to `timeout` (forever if `None`) and appends the tokens of
    /// ready descriptors to `ready`. A signal ends the wait early with no
    /// tokens.
    pub fn wait(&self, ready: &mut Vec<u64>, timeout: Option<Duration>) -> io::Result<()> {
        const MAX: usize = 16;
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); MAX];
        // At most what the `int` milliseconds of `epoll_wait` hold; rustix
        // rounds up, so that a short timeout does not become a busy poll.
        let longest = Duration::from_millis(i32::MAX as u64);
        let timeout = timeout.map(|t| {
            let t = t.min(longest);
            Timespec {
                tv_sec: t.as_secs() as i64,
                tv_nsec: i64::from(t.subsec_nanos()),
            }
        });
        match epoll::wait(&self.0, &mut events, timeout.as_ref()) {
            Ok((events, _)) => {
                ready.extend(events.iter().map(|e| e.data.u64()));
                Ok(())
            }
            Err(Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0\n"), Some(1));
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(cpu_ids("0-1,4\n"), Some(vec![0, 1, 4]));
    }

    #[test]
    fn sanitizes_object_names() {
        assert_eq!(&object_name("a-b:c.d_e")[..6], b"abc.d_");
        let long = object_name("abcdefghijklmnopqrstuvwxyz");
        assert_eq!(&long[..15], b"abcdefghijklmno");
        assert_eq!(long[15], 0);
    }
}
