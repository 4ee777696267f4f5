"""Defines the provider `late` at run time, LOADS times, through libsdt.so,
and measures how long after each `load` its probe is enabled: how long a
tracer takes to attach to an object that did not exist when it started.

python3 loads.py LIBSDT LOADS [PATIENCE_S]: prints one line,
`loads=N attached=N min=..ms median=..ms max=..ms`, over the loads that a
tracer attached to within PATIENCE_S seconds (default 2).
"""
import ctypes
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../crates/sdt-capi/python"))
import libsdt  # noqa: E402
from libsdt import U64  # noqa: E402

library, loads = sys.argv[1], int(sys.argv[2])
patience = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
sdt = libsdt.load(library)
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
