//! `libsdt.so`: the C interface of the `sdt` crate's run-time probes
//! (`sdt::dynamic`), so that C, C++, Python (`ctypes`), Node and any
//! language with a C foreign-function interface can define probes while
//! they run. The header is `include/libsdt.h`; `cargo build -p sdt-capi`
//! makes the library.
//!
//! A `sdt_provider *` is a box holding the provider's definition and,
//! while it is loaded, the loaded probes; a `const sdt_probe *` points
//! into those, and is valid until they are unloaded. Failures return
//! -1 or NULL and leave a message for `sdt_last_error`, per thread.
//! Nothing here unwinds into C: the functions cannot panic on any input
//! that the header allows.
//!
//! Every exported function is `unsafe` in spirit and some in fact: a C
//! ABI takes raw pointers and C strings whose validity only the caller
//! can promise, which is what the header documents. That is the crate's
//! whole job, so it allows `unsafe` code; each dereference says what it
//! relies on.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

use probes::dynamic::{ArgType, LoadedProvider, Probe, Provider};

/// `sdt_provider`: a definition, and its probes while loaded.
pub struct SdtProvider {
    definition: Provider,
    loaded: Option<LoadedProvider>,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(message: impl std::fmt::Display) -> c_int {
    let text = CString::new(message.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    -1
}

/// A string argument, or why it is not one.
///
/// # Safety
/// `text` is NULL or points to a NUL-terminated string.
unsafe fn text<'a>(text: *const c_char, what: &str) -> Result<&'a str, String> {
    if text.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: not NULL (checked above), so by this function's contract a
    // NUL-terminated string, which the caller keeps alive for `'a`.
    unsafe { CStr::from_ptr(text) }
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))
}

fn arg_type(value: c_int) -> Option<ArgType> {
    use ArgType::*;
    Some(match value {
        1 => U8,
        2 => U16,
        3 => U32,
        4 => U64,
        5 => I8,
        6 => I16,
        7 => I32,
        8 => I64,
        9 => Ptr,
        10 => Str,
        11 => Bytes,
        _ => return None,
    })
}

/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sdt_provider_new(name: *const c_char) -> *mut SdtProvider {
    // SAFETY: `name` is NULL or NUL-terminated, as `text` needs (this
    // function's contract); the name is copied before returning.
    let provider = unsafe { text(name, "the provider's name") }
        .and_then(|name| Provider::new(name).map_err(|e| e.to_string()));
    match provider {
        Ok(definition) => Box::into_raw(Box::new(SdtProvider {
            definition,
            loaded: None,
        })),
        Err(why) => {
            fail(why);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// `provider` is NULL or from `sdt_provider_new` and not freed; `name` is
/// NULL or a NUL-terminated string; `types` points to `count` values.
#[no_mangle]
pub unsafe extern "C" fn sdt_provider_add_probe(
    provider: *mut SdtProvider,
    name: *const c_char,
    types: *const c_int,
    count: usize,
) -> c_int {
    // SAFETY: by this function's contract `provider` is NULL or a live box
    // from `sdt_provider_new`; C holds no other reference across the call.
    let Some(provider) = (unsafe { provider.as_mut() }) else {
        return fail("the provider is NULL");
    };
    if provider.loaded.is_some() {
        return fail("the provider is loaded: unload it before adding probes");
    }
    // SAFETY: `name` is NULL or NUL-terminated, as `text` needs (this
    // function's contract), and outlives this call, the borrow's life.
    let name = match unsafe { text(name, "the probe's name") } {
        Ok(name) => name,
        Err(why) => return fail(why),
    };
    if count > 0 && types.is_null() {
        return fail("the argument types are NULL");
    }
    let values: &[c_int] = if count == 0 {
        &[]
    } else {
        // SAFETY: not NULL (checked above) and, by this function's
        // contract, pointing to `count` initialised `c_int`s that live
        // through this call; they are only read.
        unsafe { std::slice::from_raw_parts(types, count) }
    };
    let mut args = Vec::with_capacity(count);
    for (i, &value) in values.iter().enumerate() {
        match arg_type(value) {
            Some(t) => args.push(t),
            None => return fail(format!("argument {i} of `{name}` has no type {value}")),
        }
    }
    match provider.definition.add_probe(name, &args) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// # Safety
/// `provider` is NULL or from `sdt_provider_new` and not freed.
#[no_mangle]
pub unsafe extern "C" fn sdt_provider_load(provider: *mut SdtProvider) -> c_int {
    // SAFETY: by this function's contract `provider` is NULL or a live box
    // from `sdt_provider_new`; C holds no other reference across the call.
    let Some(provider) = (unsafe { provider.as_mut() }) else {
        return fail("the provider is NULL");
    };
    if provider.loaded.is_some() {
        return fail("the provider is already loaded");
    }
    match provider.definition.clone().load() {
        Ok(loaded) => {
            provider.loaded = Some(loaded);
            0
        }
        Err(e) => fail(e),
    }
}

/// # Safety
/// `provider` is NULL or from `sdt_provider_new` and not freed; no probe
/// of it is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn sdt_provider_unload(provider: *mut SdtProvider) -> c_int {
    // SAFETY: by this function's contract `provider` is NULL or a live box
    // from `sdt_provider_new`; C holds no other reference across the call.
    let Some(provider) = (unsafe { provider.as_mut() }) else {
        return fail("the provider is NULL");
    };
    match provider.loaded.take() {
        Some(loaded) => {
            drop(loaded);
            0
        }
        None => fail("the provider is not loaded"),
    }
}

/// # Safety
/// `provider` is NULL or from `sdt_provider_new` and not freed.
#[no_mangle]
pub unsafe extern "C" fn sdt_provider_free(provider: *mut SdtProvider) {
    if !provider.is_null() {
        // SAFETY: from `Box::into_raw` in `sdt_provider_new`, freed once.
        drop(unsafe { Box::from_raw(provider) });
    }
}

/// # Safety
/// `provider` is NULL or from `sdt_provider_new` and not freed; `name` is
/// NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sdt_provider_probe(
    provider: *const SdtProvider,
    name: *const c_char,
) -> *const Probe {
    // SAFETY: by this function's contract `provider` is NULL or a live box
    // from `sdt_provider_new`; it is only read.
    let Some(provider) = (unsafe { provider.as_ref() }) else {
        fail("the provider is NULL");
        return std::ptr::null();
    };
    let Some(loaded) = &provider.loaded else {
        fail("the provider is not loaded");
        return std::ptr::null();
    };
    // SAFETY: `name` is NULL or NUL-terminated, as `text` needs (this
    // function's contract), and outlives this call, the borrow's life.
    let name = match unsafe { text(name, "the probe's name") } {
        Ok(name) => name,
        Err(why) => {
            fail(why);
            return std::ptr::null();
        }
    };
    match loaded.probe(name) {
        Some(probe) => probe,
        None => {
            fail(format!(
                "the provider `{}` has no probe `{name}`",
                loaded.name()
            ));
            std::ptr::null()
        }
    }
}

/// # Safety
/// `probe` is NULL or from `sdt_provider_probe`, its provider still loaded.
#[no_mangle]
pub unsafe extern "C" fn sdt_probe_enabled(probe: *const Probe) -> c_int {
    // SAFETY: by this function's contract `probe` is NULL or points into a
    // provider that is still loaded, so at a live `Probe`; it is only read.
    unsafe { probe.as_ref() }.is_some_and(Probe::enabled).into()
}

/// # Safety
/// `probe` is NULL or from `sdt_provider_probe`, its provider still loaded;
/// `slots` points to `count` values.
#[no_mangle]
pub unsafe extern "C" fn sdt_probe_fire(
    probe: *const Probe,
    slots: *const u64,
    count: usize,
) -> c_int {
    // SAFETY: by this function's contract `probe` is NULL or points into a
    // provider that is still loaded, so at a live `Probe`; it is only read.
    let Some(probe) = (unsafe { probe.as_ref() }) else {
        return fail("the probe is NULL");
    };
    if !probe.enabled() {
        return 0;
    }
    if count != probe.slots() || (count > 0 && slots.is_null()) {
        return fail(format!(
            "the probe `{}` takes {} argument slots, not {count}",
            probe.name(),
            probe.slots()
        ));
    }
    let values: &[u64] = if count == 0 {
        &[]
    } else {
        // SAFETY: not NULL (checked above) and, by this function's
        // contract, pointing to `count` initialised `u64`s that live
        // through this call; they are only read.
        unsafe { std::slice::from_raw_parts(slots, count) }
    };
    probe.fire_slots(values);
    0
}

/// The message of this thread's last failure; valid until its next call.
#[no_mangle]
pub extern "C" fn sdt_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
