"""Defines the provider `late` at run time, LOADS times, through libsdt.so,
and measures how long after each `load` its probe is enabled: how long a
tracer takes to attach to an object that did not exist when it started.

python3 loads.py LIBSDT LOADS [PATIENCE_S]: prints one line,
`loads=N attached=N min=..ms median=..ms max=..ms`, over the loads that a
tracer attached to within PATIENCE_S seconds (default 2).
"""
import ctypes
import sys
import time

libsdt, loads = sys.argv[1], int(sys.argv[2])
patience = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
sdt = ctypes.CDLL(libsdt)
sdt.sdt_provider_new.restype = ctypes.c_void_p
sdt.sdt_provider_new.argtypes = [ctypes.c_char_p]
sdt.sdt_provider_add_probe.argtypes = [
    ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_size_t]
sdt.sdt_provider_load.argtypes = [ctypes.c_void_p]
sdt.sdt_provider_unload.argtypes = [ctypes.c_void_p]
sdt.sdt_provider_probe.restype = ctypes.c_void_p
sdt.sdt_provider_probe.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
sdt.sdt_probe_enabled.argtypes = [ctypes.c_void_p]

U64 = 4
provider = sdt.sdt_provider_new(b"late")
sdt.sdt_provider_add_probe(provider, b"loaded", (ctypes.c_int * 1)(U64), 1)
waits = []
for _ in range(loads):
    sdt.sdt_provider_load(provider)
    probe = sdt.sdt_provider_probe(provider, b"loaded")
    start = time.monotonic()
    while not sdt.sdt_probe_enabled(probe) and time.monotonic() - start < patience:
        time.sleep(0.0002)
    if sdt.sdt_probe_enabled(probe):
        waits.append((time.monotonic() - start) * 1000)
    sdt.sdt_provider_unload(provider)
waits.sort()
if waits:
    n = len(waits)
    print(f"loads={loads} attached={n} min={waits[0]:.1f}ms "
          f"median={waits[n // 2]:.1f}ms max={waits[-1]:.1f}ms")
else:
    print(f"loads={loads} attached=0")
