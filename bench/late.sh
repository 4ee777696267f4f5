#!/usr/bin/env bash
# Attaching to objects that did not exist when the tracer started: a Python
# program defines a provider at run time (libsdt.so through ctypes), LOADS
# times, each load a new memfd object, and measures how long after each
# load its probe is enabled. sdt trace -c attaches to each; bpftrace 0.17,
# run the same way, plans its probes once, before the command runs. Needs
# root, bpftrace and python3.
#
#   bash bench/late.sh           # LOADS=50
set -euo pipefail
cd "$(dirname "$0")/.."

loads=${LOADS:-50}
cargo build --quiet --release -p sdt-cli -p sdt-capi
out=${CARGO_TARGET_DIR:-$PWD/target}/release
program="python3 $PWD/bench/late/loads.py $out/libsdt.so $loads"

echo "sdt trace -c, $loads loads:"
"$out/sdt" trace -c "$program" late:loaded 2>/dev/null
echo "bpftrace 0.17 -c, 3 loads (each waits 2 s):"
bpftrace -c "$(readlink -f /usr/bin/python3) $PWD/bench/late/loads.py $out/libsdt.so 3" \
  -e 'usdt:*:late:loaded { @ = count(); }' 2>&1 | grep -v '^$' || true
