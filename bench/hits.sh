#!/usr/bin/env bash
# bench/hits.sh: what sdt's per-probe hit counter costs a traced program.
#
# sdt counts the hits of the probes that wait for a runtime's switch
# (CPython's function__entry, the JVM's method probes, ...; see
# crates/sdt-languages), so that it can say at the end of a run that one
# fired zero times and name the switch. Every other probe's program is
# unchanged, so the cost is the counted program's time over the same
# program's without the counter. bench/hits/loop.c fires
# python:function__entry (counted) and sdtbench:hit (not counted), same
# site shape, same arguments, $HITS times each, interleaved, while one
# tracer attaches the same program to both.
#
# The time of a hit on this shared 2-core VM swings by hundreds of ns
# from run to run (the trap, the scheduler), far more than a few
# instructions cost, so the programs are timed by the kernel: with BPF
# run-time statistics on (bench/hits/stats.c holds BPF_ENABLE_STATS for
# the bench's duration only), bpftool gives each program's run_cnt and
# run_time_ns, read while they are attached. Per measure, the median of
# $REPS runs:
#
#   - sdt `{ }` and `@ = count()`: ns per run of the counted probe's
#     program, of the uncounted one's, and the difference;
#   - bpftrace 0.17's `@ = count()` on the same probes, beside: its
#     programs count nothing of their own.
#
# Knobs: HITS (2000000), REPS (7). Needs root, bpftrace, bpftool, jq, cc
# and <sys/sdt.h> (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps

HITS=${HITS:-2000000}
REPS=${REPS:-7}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-hits.XXXXXX)
trap 'rm -rf -- "$work"' EXIT
cc -O2 -Wall -o "$work/loop" bench/hits/loop.c
cc -O2 -Wall -o "$work/stats" bench/hits/stats.c

if [[ ${1:-} != --measure ]]; then
  echo "hits.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2
  exec "$work/stats" env WORK="$work" HITS="$HITS" REPS="$REPS" bash "$0" --measure
fi

loop=$work/loop
both="usdt:$loop:python:function__entry, usdt:$loop:sdtbench:hit"

# measure NAME TRACER ARGS...: the loop, waiting; TRACER attached to it by
# PID; once attached, the loop fires, and the tracer's programs (by the
# tracer's PID) are read with bpftool before the loop is let go. Writes
# "counted_ns_per_run plain_ns_per_run" to $WORK/NAME.
measure() {
  local name=$1
  shift
  # Programs loaded from now on have larger ids (bpftool without pid
  # information cannot tell whose a program is).
  local first
  first=$(bpftool -j prog show | jq '[.[].id] | max // 0')
  coproc LOOP { exec "$loop" "$HITS"; }
  local pid=$LOOP_PID in=${LOOP[1]} out=${LOOP[0]}
  "$@" -p "$pid" -e "$both { $SCRIPT }" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local tracer=$!
  for _ in $(seq 1 200); do
    grep -q 'Attaching' "$WORK/$name.out" "$WORK/$name.err" 2>/dev/null && break
    sleep 0.05
  done
  sleep 0.5
  echo go >&"$in"
  local fired
  read -r fired <&"$out"
  bpftool -j prog show >"$WORK/$name.progs"
  echo end >&"$in"
  wait "$tracer" || true
  wait "$pid" 2>/dev/null || true
  # The tracer's two probe programs: loaded since, each run once per hit
  # of its probe, in the order of the attach points (sdt names them
  # usdt_0, the counted probe's, and usdt_1).
  jq -r --argjson first "$first" --argjson hits "$HITS" '
    [.[] | select(.id > $first and .type == "kprobe" and .run_cnt == $hits)]
    | sort_by(.id) | map(.run_time_ns / .run_cnt) | @tsv' "$WORK/$name.progs" >"$WORK/$name"
  jq -r --argjson first "$first" --argjson hits "$HITS" '
    [.[] | select(.id > $first and .type == "kprobe" and .run_cnt == $hits) | .name] | @tsv' \
    "$WORK/$name.progs" >"$WORK/$name.names"
  if [[ $(wc -w <"$WORK/$name") != 2 ]]; then
    echo "hits.sh: $name: did not find the tracer's two programs with $HITS runs ($fired)" >&2
    cat "$WORK/$name.err" >&2
    exit 1
  fi
}

for ((r = 1; r <= REPS; r++)); do
  echo "hits.sh: round $r/$REPS" >&2
  SCRIPT="" measure "empty-$r" "$root/target/release/sdt" run
  SCRIPT="@ = count();" measure "count-$r" "$root/target/release/sdt" run
  SCRIPT="@ = count();" measure "bt-$r" bpftrace
done

if [[ $(cat "$WORK/empty-1.names") != $'usdt_0\tusdt_1' ]]; then
  echo "hits.sh: sdt's programs are not usdt_0 (counted) and usdt_1: $(cat "$WORK/empty-1.names")" >&2
  exit 1
fi
col() { for ((r = 1; r <= REPS; r++)); do cut -f"$2" "$WORK/$1-$r"; done | sort -n | awk '{v[NR] = $1} END {printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
diffs() { for ((r = 1; r <= REPS; r++)); do awk '{print $1 - $2}' "$WORK/$1-$r"; done | sort -n | awk '{v[NR] = $1} END {printf "%+.1f (%+.1f to %+.1f)", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR]}'; }

echo
echo "sdt's hit counter: ns per run of the BPF program (kernel's run_time_ns / run_cnt), medians of $REPS runs of $HITS hits"
echo
echo "| program | counted probe (python:function__entry) | uncounted probe (sdtbench:hit) | difference: median (range) |"
echo "| --- | --- | --- | --- |"
echo "| sdt \`{ }\` | $(col empty 1) | $(col empty 2) | $(diffs empty) |"
echo "| sdt \`@ = count()\` | $(col count 1) | $(col count 2) | $(diffs count) |"
echo "| bpftrace 0.17 \`@ = count()\` | $(col bt 1) | $(col bt 2) | $(diffs bt) |"
