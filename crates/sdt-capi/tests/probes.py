"""Run-time probes from Python through libsdt.so, for tests/python.rs.

python3 probes.py LIBSDT HITS ROUNDS [--stay-traced]: defines the provider `pyapp` with the
probe `request(u64 status, str path, bytes body)`, and in each later round
one more probe `roundR(i32)`. Each round, one line per step on standard
output: `loaded R enabled=0`; once a tracer has enabled `request` (and half
a second more), `request` fires HITS times with (200 + i, "/index.html",
b"<html>") and each `roundR` HITS times with (-i); `fired R`; once no
tracer has `request` enabled, `detached R`; then the provider is unloaded
and `unloaded R mapped=False`. With --stay-traced, it does not wait for
the tracer to detach (one that started it with -c stays until it exits).
"""
import ctypes
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import libsdt  # noqa: E402  (crates/sdt-capi/python)
from libsdt import BYTES, I32, STR, U64

library, hits, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stay_traced = "--stay-traced" in sys.argv[4:]

sdt = libsdt.load(library)


def check(result):
    if result != 0:
        raise RuntimeError(sdt.sdt_last_error().decode())


def add_probe(provider, name, *types):
    check(sdt.sdt_provider_add_probe(
        provider, name, (ctypes.c_int * len(types))(*types), len(types)))


def fire(probe, *slots):
    """Fires `probe`; each slot is an integer (negative ones wrap to 64 bits)."""
    values = (ctypes.c_uint64 * len(slots))(*(s & 0xFFFF_FFFF_FFFF_FFFF for s in slots))
    check(sdt.sdt_probe_fire(probe, values, len(slots)))


def wait_until(what, done):
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > 60:
            sys.exit(f"probes.py: waited a minute for {what}")
        time.sleep(0.005)


def say(line):
    print(line, flush=True)


provider = sdt.sdt_provider_new(b"pyapp")
add_probe(provider, b"request", U64, STR, BYTES)
path = ctypes.create_string_buffer(b"/index.html")
body = b"<html>"
body_buffer = ctypes.create_string_buffer(body, len(body))
for round in range(1, rounds + 1):
    if round > 1:
        add_probe(provider, f"round{round}".encode(), I32)
    check(sdt.sdt_provider_load(provider))
    request = sdt.sdt_provider_probe(provider, b"request")
    say(f"loaded {round} enabled={sdt.sdt_probe_enabled(request)}")
    wait_until("a tracer", lambda: sdt.sdt_probe_enabled(request))
    time.sleep(0.5)
    for i in range(hits):
        fire(request, 200 + i, ctypes.addressof(path), ctypes.addressof(body_buffer), len(body))
    for later in range(2, round + 1):
        probe = sdt.sdt_provider_probe(provider, f"round{later}".encode())
        for i in range(hits):
            fire(probe, -i)
    say(f"fired {round}")
    if not stay_traced:
        wait_until("the tracer to detach", lambda: not sdt.sdt_probe_enabled(request))
        say(f"detached {round}")
    check(sdt.sdt_provider_unload(provider))
    with open("/proc/self/maps") as maps:
        mapped = "sdt-pyapp" in maps.read()
    say(f"unloaded {round} mapped={mapped}")
sdt.sdt_provider_free(provider)
