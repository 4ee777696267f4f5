"""A server that forks its workers, each of which defines probes at run
time through libsdt.so, for tests/python.rs.

python3 forked.py LIBSDT WORKERS HITS: forks WORKERS children. Each
defines the provider `pyfork` with the probe `hit(u64 worker, u64 i)`,
loads it (its own memfd object), waits until a tracer has enabled it (a
minute at most), fires it HITS times with (worker, i), unloads it and
exits. The parent waits for them all and prints `workers done`.
"""
import ctypes
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import libsdt  # noqa: E402  (crates/sdt-capi/python)
from libsdt import U64

library, workers, hits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def worker(number):
    sdt = libsdt.load(library)
    provider = sdt.sdt_provider_new(b"pyfork")
    sdt.sdt_provider_add_probe(provider, b"hit", (ctypes.c_int * 2)(U64, U64), 2)
    if sdt.sdt_provider_load(provider) != 0:
        return 1
    probe = sdt.sdt_provider_probe(provider, b"hit")
    start = time.monotonic()
    while not sdt.sdt_probe_enabled(probe):
        if time.monotonic() - start > 60:
            return 2
        time.sleep(0.002)
    for i in range(hits):
        sdt.sdt_probe_fire(probe, (ctypes.c_uint64 * 2)(number, i), 2)
    sdt.sdt_provider_unload(provider)
    return 0


children = []
for number in range(workers):
    pid = os.fork()
    if pid == 0:
        os._exit(worker(number))
    children.append(pid)
failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
if failed:
    sys.exit(f"forked.py: workers {failed} failed")
print("workers done", flush=True)
