//! Mapping an image into the process: a `memfd`, or a private temporary
//! file where a `memfd` cannot be used, then `dlopen`. This module holds
//! all of the run-time probes' `unsafe` system and loader calls.
//!
//! **Why `dlopen`** and not `mmap` by hand: the loader registers the object
//! with the process (`dl_iterate_phdr`, the debugger's link map), so gdb,
//! stack unwinders and symbolizers see the probe functions like any
//! library's, and `dlclose` undoes everything.
//!
//! **Why a `memfd`:** it is a file that no directory names, so nothing is
//! left behind however the process ends. The loader opens it as
//! `/proc/self/fd/N`. The descriptor stays open while the object is loaded,
//! so that no other object can be loaded under the same name meanwhile
//! (glibc would hand back the first one). It is created with `MFD_EXEC`,
//! which kernels that refuse executable `memfd`s by default
//! (`vm.memfd_noexec`) require; older kernels do not know the flag and get
//! the call without it.
//!
//! **The fallback** is for where that fails: a seccomp policy that denies
//! `memfd_create`, `vm.memfd_noexec=2`, or no `/proc`. The image is written
//! to a new file of mode 0600 in `$TMPDIR` (else `/tmp`), loaded by its
//! path, and unlinked at once, loaded or not.
//!
//! **Why the `libc` crate:** `dlopen`, `dlsym`, `dlclose` and `dlerror` are
//! C library functions that no system-call crate wraps; `memfd_create` and
//! `mkostemp` come from the same place.

use std::ffi::{CStr, CString};
use std::format;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::string::{String, ToString};
use std::vec::Vec;

use core::ffi::c_void;
use core::ptr::NonNull;

use super::{Backing, Error};

/// A loaded image: the loader's handle, and the `memfd` it was loaded from.
pub(crate) struct Loaded {
    handle: NonNull<c_void>,
    /// Held so that `/proc/self/fd/N` names no other object while loaded.
    _memfd: Option<OwnedFd>,
    pub backing: Backing,
}

// SAFETY: the handle is an opaque token that this type never dereferences:
// it is only passed to `dlsym` (from `&self`) and `dlclose` (once, from
// `Drop`), and glibc's loader takes its own lock in both, so calling them
// from any thread, or `dlsym` from several at once, is sound.
unsafe impl Send for Loaded {}
// SAFETY: as for `Send`: `&self` only reaches `dlsym`, which is thread-safe.
unsafe impl Sync for Loaded {}

impl Loaded {
    /// Loads `image`, naming the `memfd` or temporary file after `provider`.
    pub fn load(image: &[u8], provider: &str) -> Result<Loaded, Error> {
        let mut attempts = Vec::new();
        match memfd(image, provider).and_then(|fd| {
            let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
            open(&path).map(|handle| (handle, fd))
        }) {
            Ok((handle, fd)) => {
                return Ok(Loaded {
                    handle,
                    _memfd: Some(fd),
                    backing: Backing::Memfd,
                })
            }
            Err(why) => attempts.push(format!("from a memfd: {why}")),
        }
        let dir = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute())
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        match temp_file(image, provider, &dir) {
            Ok((path, fd)) => {
                let loaded = path
                    .to_str()
                    .ok_or_else(|| "a path that is not UTF-8".to_string())
                    .and_then(open);
                // Loaded or not, the file has no more use: the mapping
                // keeps the object alive.
                let _ = std::fs::remove_file(&path);
                drop(fd);
                match loaded {
                    Ok(handle) => {
                        return Ok(Loaded {
                            handle,
                            _memfd: None,
                            backing: Backing::TempFile,
                        })
                    }
                    Err(why) => attempts.push(format!("from {}: {why}", path.display())),
                }
            }
            Err(why) => attempts.push(format!("from a file in {}: {why}", dir.display())),
        }
        Err(Error::Load { attempts })
    }

    /// The address of symbol `name`.
    pub fn symbol(&self, name: &str) -> Result<usize, Error> {
        let missing = || Error::Load {
            attempts: std::vec![format!("the loaded object lacks the symbol `{name}`")],
        };
        let name = CString::new(name).map_err(|_| missing())?;
        // SAFETY: the handle is open and the name NUL-terminated.
        let address = unsafe { libc::dlsym(self.handle.as_ptr(), name.as_ptr()) };
        if address.is_null() {
            return Err(missing());
        }
        Ok(address as usize)
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: the handle came from `dlopen` and is closed once. The
        // probes that point into the object borrow the provider this
        // belongs to, so none is left to be fired.
        unsafe { libc::dlclose(self.handle.as_ptr()) };
    }
}

/// `dlopen(path)`, refusing a name that already names a loaded object.
fn open(path: &str) -> Result<NonNull<c_void>, String> {
    let c_path = CString::new(path).map_err(|_| "a path with a NUL byte".to_string())?;
    // SAFETY: the path is NUL-terminated; RTLD_NOLOAD loads nothing.
    let existing = unsafe {
        libc::dlopen(
            c_path.as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NOLOAD,
        )
    };
    if let Some(existing) = NonNull::new(existing) {
        // SAFETY: drops the reference that RTLD_NOLOAD just took.
        unsafe { libc::dlclose(existing.as_ptr()) };
        return Err(format!("{path} already names a loaded object"));
    }
    // SAFETY: the path is NUL-terminated. The object has no constructors,
    // dependencies or relocations: loading it runs no code.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    NonNull::new(handle).ok_or_else(dl_error)
}

/// The loader's last error message.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string that stays
    // valid until the next loader call on this thread.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "dlopen failed".into();
    }
    // SAFETY: `message` is not NULL (checked above), so it is the
    // NUL-terminated string dlerror returned, valid until this thread's next
    // loader call; it is copied into a `String` before any such call.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

/// A `memfd` holding `image`.
fn memfd(image: &[u8], provider: &str) -> Result<OwnedFd, String> {
    let name = CString::new(format!("sdt-{provider}")).map_err(|e| e.to_string())?;
    // SAFETY: the name is NUL-terminated.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_EXEC) };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // A kernel older than 6.3 knows no MFD_EXEC; its memfds are executable.
        // SAFETY: the name is NUL-terminated and outlives the call.
        fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    }
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    write_all(&fd, image)?;
    Ok(fd)
}

/// A new file of mode 0600 in `dir` holding `image`, and its path.
fn temp_file(
    image: &[u8],
    provider: &str,
    dir: &std::path::Path,
) -> Result<(PathBuf, OwnedFd), String> {
    let template = dir.join(format!("sdt-{provider}-XXXXXX"));
    let template = template
        .to_str()
        .ok_or_else(|| "a directory whose name is not UTF-8".to_string())?;
    let mut template = CString::new(template)
        .map_err(|e| e.to_string())?
        .into_bytes_with_nul();
    // SAFETY: the template is a writable, NUL-terminated buffer ending in
    // XXXXXX, which mkostemp replaces.
    let fd = unsafe { libc::mkostemp(template.as_mut_ptr().cast(), libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    template.pop();
    let path = PathBuf::from(String::from_utf8(template).map_err(|e| e.to_string())?);
    if let Err(why) = write_all(&fd, image) {
        let _ = std::fs::remove_file(&path);
        return Err(why);
    }
    Ok((path, fd))
}

fn write_all(fd: &OwnedFd, image: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut file = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?);
    file.write_all(image)
        .map_err(|e| format!("writing the image: {e}"))
}
