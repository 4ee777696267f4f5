"""libsdt.so through ctypes, with its functions' types declared: the
binding that the tests' scripts and bench/late.sh use, and that a Python
program can copy."""
import ctypes

# enum sdt_arg_type
U64, I32, STR, BYTES = 4, 7, 10, 11


def load(path):
    """libsdt.so at `path`, its functions typed."""
    sdt = ctypes.CDLL(path)
    sdt.sdt_provider_new.restype = ctypes.c_void_p
    sdt.sdt_provider_new.argtypes = [ctypes.c_char_p]
    sdt.sdt_provider_add_probe.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_size_t]
    sdt.sdt_provider_load.argtypes = [ctypes.c_void_p]
    sdt.sdt_provider_unload.argtypes = [ctypes.c_void_p]
    sdt.sdt_provider_free.argtypes = [ctypes.c_void_p]
    sdt.sdt_provider_probe.restype = ctypes.c_void_p
    sdt.sdt_provider_probe.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    sdt.sdt_probe_enabled.argtypes = [ctypes.c_void_p]
    sdt.sdt_probe_fire.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    sdt.sdt_last_error.restype = ctypes.c_char_p
    return sdt
