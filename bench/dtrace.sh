#!/usr/bin/env bash
# `sdt dtrace` against SystemTap's `dtrace` (a Python script, Debian's
# systemtap-sdt-dev) on the same provider file, in one run: the header
# (-h) and the semaphores' object (-G), with hyperfine. Needs hyperfine,
# cc and /usr/bin/dtrace.
#
#   bash bench/dtrace.sh                 # tests/fixtures/dtrace/postgresql-like.d
#   bash bench/dtrace.sh path/to/probes.d
set -euo pipefail
cd "$(dirname "$0")/.."

file=$(realpath "${1:-tests/fixtures/dtrace/postgresql-like.d}")
cargo build --quiet --release -p sdt-cli
sdt=${CARGO_TARGET_DIR:-$PWD/target}/release/sdt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# compare MODE: runs both tools with -MODE, prints their medians and the ratio.
compare() {
  hyperfine --warmup 3 --min-runs 20 -N --style none --export-json "$1.json" \
    -n sdt "$sdt dtrace -$1 -s $file -o sdt.$2" \
    -n systemtap "/usr/bin/dtrace -$1 -s $file -o stap.$2" >/dev/null
  python3 - "$1" "$1.json" <<'PY'
import json, sys
runs = {r["command"]: r for r in json.load(open(sys.argv[2]))["results"]}
sdt, stap = runs["sdt"]["median"] * 1000, runs["systemtap"]["median"] * 1000
print(f"dtrace -{sys.argv[1]}: sdt median {sdt:.1f} ms, SystemTap median {stap:.1f} ms, "
      f"ratio sdt/SystemTap {sdt / stap:.3f}")
PY
}
echo "provider file: $file"
compare h h
compare G o
