#!/usr/bin/env bash
# Benchmark `sdt list -v` against `readelf -n` and `bpftrace -l`, side by side:
#
#   1. the largest libjvm.so installed (a real 30 MB library, ~570 probes);
#   2. a generated ELF with 20,000 probes (all three tools finish);
#   3. a generated ELF with 400,000 probes. bpftrace 0.17's listing is
#      quadratic in the number of probes (2.8 s for 20,000), so it gets one
#      run with a time limit (BPFTRACE_LIMIT seconds, default 60) instead of
#      the ~20 minutes it would need.
#
# The generated files are assembled from a `.rept` loop of sys/sdt.h-style
# notes (one nop and one note per probe, each with its own name and three
# arguments), which takes a few seconds for 400,000 probes.
#
# Usage: bench/list.sh            (needs hyperfine, readelf, bpftrace, cc, python3)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet -p sdt-cli
SDT="${CARGO_TARGET_DIR:-$PWD/target}/release/sdt"
LIMIT="${BPFTRACE_LIMIT:-60}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

for tool in hyperfine readelf bpftrace cc python3; do
    command -v "$tool" >/dev/null || { echo "bench/list.sh: $tool is required" >&2; exit 1; }
done

# generate N OUT: an x86-64 executable with N probes `bench:probeK`.
generate() {
    cat >"$WORK/gen.s" <<ASM
        .macro probe
990:    nop
        .pushsection .note.stapsdt,"","note"
        .balign 4
        .4byte 992f-991f, 994f-993f, 3
991:    .asciz "stapsdt"
992:    .balign 4
993:    .8byte 990b, _.stapsdt.base, 0
        .asciz "bench"
        .asciz "probe\\@"
        .asciz "-4@%edi 8@%rsi 8@-8(%rbp)"
994:    .balign 4
        .popsection
        .endm

        .text
        .globl _start
_start:
        .rept $1
        probe
        .endr
        ret

        .section .stapsdt.base,"aG",@progbits,.stapsdt.base,comdat
        .weak _.stapsdt.base
        .hidden _.stapsdt.base
_.stapsdt.base:
        .space 1
ASM
    cc -nostdlib -no-pie -o "$2" "$WORK/gen.s"
}

# ratios JSON: the first command's mean time relative to each other one.
ratios() {
    python3 - "$1" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
first = results[0]
for other in results[1:]:
    print(f"  {first['command']} / {other['command']}: {first['mean'] / other['mean']:.3f}"
          f"  ({first['mean'] * 1000:.1f} ms vs {other['mean'] * 1000:.1f} ms)")
PY
}

JVM="$(ls -S /usr/lib/jvm/*/lib/server/libjvm.so | head -n 1)"
echo "== libjvm: $JVM ($(readelf -n "$JVM" | grep -c NT_STAPSDT) probe notes)"
hyperfine -N --warmup 3 --export-json "$WORK/jvm.json" \
    -n "sdt list -v" "$SDT list -v $JVM" \
    -n "readelf -n" "readelf -n $JVM" \
    -n "bpftrace -l" "bpftrace -l usdt:$JVM:*"
ratios "$WORK/jvm.json"

generate 20000 "$WORK/probes-20k"
echo "== generated ELF with 20,000 probes"
hyperfine -N --warmup 1 --export-json "$WORK/20k.json" \
    -n "sdt list -v" "$SDT list -v $WORK/probes-20k" \
    -n "readelf -n" "readelf -n $WORK/probes-20k" \
    -n "bpftrace -l" "bpftrace -l usdt:$WORK/probes-20k:*"
ratios "$WORK/20k.json"

echo "== generating an ELF with 400,000 probes"
time generate 400000 "$WORK/probes-400k"
echo "== generated ELF with 400,000 probes ($(du -h "$WORK/probes-400k" | cut -f1))"
hyperfine -N --warmup 1 --runs 5 --export-json "$WORK/400k.json" \
    -n "sdt list -v" "$SDT list -v $WORK/probes-400k" \
    -n "sdt list" "$SDT list $WORK/probes-400k" \
    -n "sdt list --json" "$SDT list --json $WORK/probes-400k" \
    -n "readelf -n" "readelf -n $WORK/probes-400k"
ratios "$WORK/400k.json"

echo "== bpftrace -l on 400,000 probes, one run, limit ${LIMIT} s"
start=$(date +%s.%N)
if timeout "$LIMIT" bpftrace -l "usdt:$WORK/probes-400k:*" >/dev/null; then
    python3 -c "import sys; print(f'  bpftrace -l: {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$start" "$(date +%s.%N)"
else
    echo "  bpftrace -l: did not finish within ${LIMIT} s (killed)"
    python3 - "$WORK/400k.json" "$LIMIT" <<'PY'
import json, sys
sdt = json.load(open(sys.argv[1]))["results"][0]["mean"]
print(f"  sdt list -v / bpftrace -l: < {sdt / float(sys.argv[2]):.4f}")
PY
fi
