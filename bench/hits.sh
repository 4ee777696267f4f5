#!/usr/bin/env bash
# bench/hits.sh: what sdt's per-probe hit counter costs a traced program.
#
# sdt counts the hits of the probes that wait for a runtime's switch
# (CPython's function__entry, the JVM's method probes, ...; see
# crates/sdt-languages), so that it can say at the end of a run that one
# fired zero times and name the switch. Every other probe's program is
# unchanged. bench/hits/loop.c fires either python:function__entry (which
# sdt counts) or sdtbench:hit (which it does not) $HITS times, same site,
# same arguments, and times its own loop; per hit = (traced loop -
# untraced loop) / hits, median of $REPS rounds, the runs interleaved so
# that drifting noise hits all alike:
#
#   - sdt `{ }` and `@ = count()` on each probe: the counted probe's
#     programs add one lookup of a per-CPU array and an atomic add;
#   - bpftrace 0.17's `@ = count()` on the counted probe, beside, which
#     counts nothing of its own.
#
# Read the differences and ratios, not the absolute numbers: the machine
# is small (2 cores) and shared. Knobs: HITS (2000000), REPS (9). Needs
# root, bpftrace, cc and <sys/sdt.h> (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps

HITS=${HITS:-2000000}
REPS=${REPS:-9}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-hits.XXXXXX)
trap 'rm -rf -- "$work"' EXIT
cc -O2 -Wall -o "$work/loop" bench/hits/loop.c
loop=$work/loop

# run NAME CMD...: CMD with stderr to $work/NAME.err; a failing run stops
# the bench.
run() {
  local name=$1
  shift
  if ! "$@" >/dev/null 2>"$work/$name.err"; then
    echo "hits.sh: run $name failed: $*" >&2
    cat "$work/$name.err" >&2
    exit 1
  fi
}
loop_ns() { sed -n 's/^sdtbench: hits=[0-9]* loop_ns=\([0-9]*\).*$/\1/p' "$work/$1.err"; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "hits.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2
counted="usdt:$loop:python:function__entry"
plain="usdt:$loop:sdtbench:hit"
for ((r = 1; r <= REPS; r++)); do
  echo "hits.sh: round $r/$REPS" >&2
  run "none-plain-$r" "$loop" "$HITS" plain
  run "none-counted-$r" "$loop" "$HITS" counted
  run "empty-plain-$r" "$sdt" run -c "$loop $HITS plain" -e "$plain { }"
  run "empty-counted-$r" "$sdt" run -c "$loop $HITS counted" -e "$counted { }"
  run "count-plain-$r" "$sdt" run -c "$loop $HITS plain" -e "$plain { @ = count(); }"
  run "count-counted-$r" "$sdt" run -c "$loop $HITS counted" -e "$counted { @ = count(); }"
  run "bt-counted-$r" bpftrace -c "$loop $HITS counted" -e "$counted { @ = count(); }"
done
# The counted probe's runs must have counted every hit: no hint at the end.
if grep -q 'fired 0 times' "$work"/*-counted-*.err; then
  echo "hits.sh: a counted run said its probe fired 0 times" >&2
  exit 1
fi
declare -A per_hit
for k in empty-plain empty-counted count-plain count-counted bt-counted; do
  base=none-${k#*-}
  t=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$k-$r"; done | median)
  u=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$base-$r"; done | median)
  per_hit[$k]=$(awk -v t="$t" -v u="$u" -v n="$HITS" 'BEGIN {printf "%.1f", (t - u) / n}')
done
# The counter's cost, paired within each round (counted run minus its
# untraced loop, minus the same for the plain probe), so that a round's
# drift cancels: the median, and the smallest and largest round.
paired() {
  for ((r = 1; r <= REPS; r++)); do
    awk -v c="$(loop_ns "$1-counted-$r")" -v cu="$(loop_ns "none-counted-$r")" \
      -v p="$(loop_ns "$1-plain-$r")" -v pu="$(loop_ns "none-plain-$r")" -v n="$HITS" \
      'BEGIN {printf "%.1f\n", ((c - cu) - (p - pu)) / n}'
  done
}
spread() { sort -n | awk '{v[NR] = $1} END {printf "%+.1f (%+.1f to %+.1f)", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3f" : "-"), a / b}'; }

echo
echo "sdt's hit counter, per hit (ns; medians of $REPS rounds of $HITS hits)"
echo
echo "| program | not counted (sdtbench:hit) | counted (python:function__entry) | counter's cost, paired by round: median (range) |"
echo "| --- | --- | --- | --- |"
echo "| sdt \`{ }\` | ${per_hit[empty-plain]} | ${per_hit[empty-counted]} | $(paired empty | spread) |"
echo "| sdt \`@ = count()\` | ${per_hit[count-plain]} | ${per_hit[count-counted]} | $(paired count | spread) |"
echo "| bpftrace 0.17 \`@ = count()\` | | ${per_hit[bt-counted]} | sdt/bpftrace $(ratio "${per_hit[count-counted]}" "${per_hit[bt-counted]}") |"
