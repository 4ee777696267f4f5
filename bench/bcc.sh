#!/usr/bin/env bash
# bench/bcc.sh: BCC's tools as sdt runs them, beside bpftrace 0.17 doing
# the same count or histogram by hand, on one program: N calls of
# malloc(64), each freed (bench/bcc/allocs.c).
#
# Wall time of the whole command (start, attach, N probe hits, report)
# from hyperfine, medians of RUNS:
#   - alone;
#   - `sdt funccount --cmd CMD c:malloc` and bpftrace's
#     `uprobe:LIBC:malloc { @[probe] = count(); }`;
#   - `sdt funclatency -c CMD c:malloc` and bpftrace's entry/return pair
#     into `hist()`;
#   - `sdt memleak -c CMD` (every allocator function of libc, with a user
#     stack per allocation), which bpftrace has no one-line form of.
# Ratios: sdt / bpftrace, and each / alone. Knobs: N (200000), RUNS (5).
# Needs root, cc, hyperfine and bpftrace (scripts/install-deps).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps
cargo build --release -p sdt-cli >/dev/null 2>&1
sdt=$root/target/release/sdt
N=${N:-200000}
RUNS=${RUNS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/allocs" bench/bcc/allocs.c
libc=$(ldd "$work/allocs" | awk '/libc.so/ { print $3 }')
cmd="$work/allocs $N"

hyperfine -N --runs "$RUNS" --export-json "$work/r.json" \
  "$cmd" \
  "$sdt funccount --cmd '$cmd' c:malloc" \
  "bpftrace -e 'uprobe:$libc:malloc { @[probe] = count(); }' -c '$cmd'" \
  "$sdt funclatency -c '$cmd' c:malloc" \
  "bpftrace -e 'uprobe:$libc:malloc { @s[tid] = nsecs; } uretprobe:$libc:malloc /@s[tid]/ { @ns = hist(nsecs - @s[tid]); delete(@s[tid]); }' -c '$cmd'" \
  "$sdt memleak -c '$cmd'" >/dev/null 2>&1
python3 - "$work/r.json" "$N" <<'PY'
import json, sys
r = [x["median"] for x in json.load(open(sys.argv[1]))["results"]]
alone = r[0]
print(f"N = {sys.argv[2]} calls of malloc; wall-time medians")
print(f"{'what':<28} {'sdt_s':>8} {'bpftrace_s':>11} {'sdt/bpftrace':>13} {'sdt/alone':>10}")
print(f"{'alone':<28} {alone:8.3f}")
for name, s, b in [("funccount c:malloc", r[1], r[2]), ("funclatency c:malloc", r[3], r[4])]:
    print(f"{name:<28} {s:8.3f} {b:11.3f} {s/b:13.2f} {s/alone:10.2f}")
print(f"{'memleak':<28} {r[5]:8.3f} {'-':>11} {'-':>13} {r[5]/alone:10.2f}")
PY
