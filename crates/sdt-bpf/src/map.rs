//! BPF maps: creation and userspace access to their elements.
//!
//! Keys and values are byte slices of exactly the map's sizes; the
//! compiler that generates programs decides what the bytes mean. Per-CPU
//! maps hold one value per *possible* CPU (not online CPU), each padded to
//! 8 bytes; [`PerCpuValues`] hides that padding.
//!
//! Ring buffers are maps too, but are read through [`RingBuf`](crate::RingBuf),
//! which creates its own map.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::error::{Error, Result};
use crate::sys;

/// Map types this crate creates (`enum bpf_map_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum MapType {
    Hash = 1,
    Array = 2,
    PerCpuHash = 5,
    PerCpuArray = 6,
    /// Stack traces for `bpf_get_stackid`: `u32` keys (stack ids), values
    /// of `8 * depth` bytes (instruction pointers).
    StackTrace = 7,
    /// A hash map that evicts its least recently used entries when full.
    LruHash = 9,
    LruPerCpuHash = 10,
    RingBuf = 27,
    /// A value per thread, kept with the thread and freed when it exits
    /// (`BPF_MAP_TYPE_TASK_STORAGE`): `u32` keys that are never used,
    /// `max_entries` 0 and [`F_NO_PREALLOC`]. Programs reach the current
    /// thread's value with [`Helper::TaskStorageGet`](crate::Helper).
    TaskStorage = 29,
}

impl MapType {
    /// Whether values are stored once per possible CPU.
    pub const fn is_per_cpu(self) -> bool {
        matches!(
            self,
            MapType::PerCpuHash | MapType::PerCpuArray | MapType::LruPerCpuHash
        )
    }
}

/// `BPF_ANY`: create or replace.
pub const UPDATE_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
pub const UPDATE_NOEXIST: u64 = 1;
/// `BPF_EXIST`: replace only.
pub const UPDATE_EXIST: u64 = 2;
/// `BPF_F_NO_PREALLOC`: allocate hash elements on demand.
pub const F_NO_PREALLOC: u32 = 1;
/// `BPF_F_STACK_BUILD_ID`: a stack-trace map whose frames are
/// [`STACK_BUILD_ID_FRAME`]-byte `struct bpf_stack_build_id`s (the build
/// ID of the object and the file offset in it) rather than addresses.
pub const F_STACK_BUILD_ID: u32 = 1 << 5;
/// The size of one frame of a [`F_STACK_BUILD_ID`] map: a status word
/// (`i32` at 0: 0 empty, 1 build ID and offset, 2 only the address), the
/// build ID (20 bytes at 4, zero-padded), and the file offset or the
/// address (`u64` at 24).
pub const STACK_BUILD_ID_FRAME: u32 = 32;

/// The shape of a map to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSpec {
    pub map_type: MapType,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    /// `map_flags`, e.g. [`F_NO_PREALLOC`].
    pub flags: u32,
    /// Shown by `bpftool map`; at most 15 of the characters `[A-Za-z0-9_.]` are kept.
    pub name: String,
}

impl MapSpec {
    /// A map spec without flags or name.
    pub fn new(map_type: MapType, key_size: u32, value_size: u32, max_entries: u32) -> MapSpec {
        MapSpec {
            map_type,
            key_size,
            value_size,
            max_entries,
            flags: 0,
            name: String::new(),
        }
    }

    /// Sets the name.
    pub fn name(mut self, name: impl Into<String>) -> MapSpec {
        self.name = name.into();
        self
    }

    /// Sets `map_flags`.
    pub fn flags(mut self, flags: u32) -> MapSpec {
        self.flags = flags;
        self
    }
}

/// A BPF map, closed on drop (programs that use it keep it alive in the kernel).
#[derive(Debug)]
pub struct Map {
    fd: sys::MapFd,
    spec: MapSpec,
}

impl Map {
    /// Creates a map. A task storage map is described to the kernel by
    /// BTF, which this writes: the kernel requires it for that type.
    pub fn create(spec: &MapSpec) -> Result<Map> {
        let types = match spec.map_type {
            MapType::TaskStorage => Some(
                crate::btf::storage_types(spec.value_size)
                    .map_err(|e| Error::sys("loading the BTF of a task storage map", e))?,
            ),
            _ => None,
        };
        let fd = sys::map_create(&sys::MapCreate {
            map_type: spec.map_type as u32,
            key_size: spec.key_size,
            value_size: spec.value_size,
            max_entries: spec.max_entries,
            flags: spec.flags,
            name: &spec.name,
            per_cpu: spec.map_type.is_per_cpu(),
            btf: types
                .as_ref()
                .map(|t| (t.btf.as_fd(), t.key_type, t.value_type)),
        })
        .map_err(|e| Error::sys("creating BPF map", e))?;
        Ok(Map {
            fd,
            spec: spec.clone(),
        })
    }

    /// The same map through a descriptor of its own, for another thread:
    /// the kernel keeps the map while either is open, and reads and
    /// updates through both see the same elements.
    pub fn try_clone(&self) -> Result<Map> {
        Ok(Map {
            fd: self
                .fd
                .try_clone()
                .map_err(|e| Error::sys("duplicating a map descriptor", e))?,
            spec: self.spec.clone(),
        })
    }

    /// How the map was created.
    pub fn spec(&self) -> &MapSpec {
        &self.spec
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.len() != self.fd.key_size() {
            return Err(Error::Invalid(format!(
                "key of {} bytes for map `{}` with {}-byte keys",
                key.len(),
                self.spec.name,
                self.fd.key_size()
            )));
        }
        Ok(())
    }

    fn check_value(&self, len: usize) -> Result<()> {
        if self.spec.map_type.is_per_cpu() {
            return Err(Error::Invalid(format!(
                "map `{}` is per-CPU: use the per-CPU accessors",
                self.spec.name
            )));
        }
        if len != self.spec.value_size as usize {
            return Err(Error::Invalid(format!(
                "value of {len} bytes for map `{}` with {}-byte values",
                self.spec.name, self.spec.value_size
            )));
        }
        Ok(())
    }

    /// The value under `key`, or `None`.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_key(key)?;
        self.check_value(self.spec.value_size as usize)?;
        let mut value = vec![0; self.fd.value_len()];
        let found = self
            .fd
            .lookup(key, &mut value)
            .map_err(|e| Error::sys("looking up map element", e))?;
        Ok(found.then_some(value))
    }

    /// Stores `value` under `key`; `flags` is [`UPDATE_ANY`],
    /// [`UPDATE_NOEXIST`] or [`UPDATE_EXIST`].
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<()> {
        self.check_key(key)?;
        self.check_value(value.len())?;
        self.fd
            .update(key, value, flags)
            .map_err(|e| Error::sys("updating map element", e))
    }

    /// Removes `key`; `false` if it was absent. Array elements cannot be deleted.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.check_key(key)?;
        self.fd
            .delete(key)
            .map_err(|e| Error::sys("deleting map element", e))
    }

    /// The per-CPU values under `key`, or `None`.
    pub fn lookup_per_cpu(&self, key: &[u8]) -> Result<Option<PerCpuValues>> {
        self.check_key(key)?;
        self.check_per_cpu()?;
        let mut buf = vec![0; self.fd.value_len()];
        let found = self
            .fd
            .lookup(key, &mut buf)
            .map_err(|e| Error::sys("looking up map element", e))?;
        Ok(found.then_some(PerCpuValues {
            buf,
            value_size: self.spec.value_size as usize,
        }))
    }

    /// Stores one value per possible CPU under `key`.
    pub fn update_per_cpu(&self, key: &[u8], values: &[&[u8]], flags: u64) -> Result<()> {
        self.check_key(key)?;
        self.check_per_cpu()?;
        let size = self.spec.value_size as usize;
        let stride = size.next_multiple_of(8);
        if values.len() * stride != self.fd.value_len() || values.iter().any(|v| v.len() != size) {
            return Err(Error::Invalid(format!(
                "map `{}` needs {} values of {size} bytes, one per possible CPU",
                self.spec.name,
                self.fd.value_len() / stride
            )));
        }
        let mut buf = vec![0; self.fd.value_len()];
        for (chunk, v) in buf.chunks_mut(stride).zip(values) {
            chunk[..size].copy_from_slice(v);
        }
        self.fd
            .update(key, &buf, flags)
            .map_err(|e| Error::sys("updating map element", e))
    }

    fn check_per_cpu(&self) -> Result<()> {
        if !self.spec.map_type.is_per_cpu() {
            return Err(Error::Invalid(format!(
                "map `{}` is not per-CPU",
                self.spec.name
            )));
        }
        Ok(())
    }

    /// Iterates over the keys. Keys deleted or added during iteration may
    /// or may not be seen; a key deleted under the cursor restarts the
    /// walk from the first key (the kernel's behaviour for hash maps).
    pub fn keys(&self) -> Keys<'_> {
        Keys {
            map: self,
            prev: None,
            done: false,
        }
    }
}

impl AsFd for Map {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.fd()
    }
}

impl AsRawFd for Map {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.fd().as_raw_fd()
    }
}

/// Iterator over a map's keys, from [`Map::keys`].
#[derive(Debug)]
pub struct Keys<'a> {
    map: &'a Map,
    prev: Option<Vec<u8>>,
    done: bool,
}

impl Iterator for Keys<'_> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut next = vec![0; self.map.fd.key_size()];
        match self.map.fd.next_key(self.prev.as_deref(), &mut next) {
            Ok(true) => {
                self.prev = Some(next.clone());
                Some(Ok(next))
            }
            Ok(false) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(Error::sys("iterating map keys", e)))
            }
        }
    }
}

/// One value per possible CPU, from [`Map::lookup_per_cpu`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerCpuValues {
    buf: Vec<u8>,
    value_size: usize,
}

impl PerCpuValues {
    /// Number of values (the number of possible CPUs).
    pub fn len(&self) -> usize {
        self.buf.len() / self.value_size.next_multiple_of(8).max(1)
    }

    /// Whether there are no values (never true for a real map).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of CPU `cpu`.
    pub fn get(&self, cpu: usize) -> Option<&[u8]> {
        let start = cpu.checked_mul(self.value_size.next_multiple_of(8))?;
        self.buf.get(start..start.checked_add(self.value_size)?)
    }

    /// The values in CPU order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).filter_map(|cpu| self.get(cpu))
    }
}

/// Number of CPUs online now.
pub fn online_cpus() -> Result<usize> {
    sys::online_cpus()
        .map(|ids| ids.len())
        .map_err(|e| Error::sys("reading online CPUs", e))
}

/// Number of possible CPUs: the count of per-CPU values the kernel copies.
pub fn possible_cpus() -> Result<usize> {
    sys::possible_cpus().map_err(|e| Error::sys("reading possible CPUs", e))
}
