#!/usr/bin/env bash
# bench/stacks.sh: what recording a user stack costs per hit, with frames
# recorded as addresses (sdt under -c and -p, and sdt system-wide before
# build-ID stacks) against frames recorded by build ID and file offset
# (sdt system-wide now, so that stacks name their functions after the
# process has gone: see docs/pictures.md), beside bpftrace 0.17 under -c
# (addresses), in one run, so that the ratios share the machine's state.
# bpftrace 0.17 system-wide is left out: here it did not end within
# minutes of SIGINT after a run of this loop.
#
# The script is `@[ustack] = count()` on bench/stacks/loop.c, which fires
# sdtbench:hit $HITS times, $DEPTH calls deep (10 frames with main and the
# C library's start), and times its own loop; per hit = (traced loop -
# untraced loop) / hits, median of $REPS rounds, each tracer in turn.
# Under -c the tracer starts the loop; system-wide the tracer runs first,
# the loop starts once it has attached (__BPFTRACE_NOTIFY_PROBES_ATTACHED),
# and SIGINT ends the tracer after the loop has exited. Each run's map is
# checked: one stack, counted $HITS times, whose frames name `descend` and
# `main`.
#
# Read the ratios, not the absolute numbers: the machine is small (2
# cores) and shared. Knobs: HITS (1000000), DEPTH (8), REPS (5). Needs
# root, bpftrace, cc and <sys/sdt.h> (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps

HITS=${HITS:-1000000}
DEPTH=${DEPTH:-8}
REPS=${REPS:-5}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-stacks.XXXXXX)
trap 'rm -rf -- "$work"' EXIT
cc -O2 -fno-omit-frame-pointer -Wall -o "$work/loop" bench/stacks/loop.c
loop=$work/loop
script="usdt:$loop:sdtbench:hit { @[ustack] = count(); }"
notify=__BPFTRACE_NOTIFY_PROBES_ATTACHED

fail() {
  echo "stacks.sh: run $1 failed" >&2
  cat "$work/$1.err" >&2
  exit 1
}
# under NAME TRACER...: the tracer runs the loop with -c.
under() {
  local name=$1
  shift
  "$@" -c "$loop $HITS $DEPTH" -e "$script" >"$work/$name.out" 2>"$work/$name.err" || fail "$name"
}
# wide NAME TRACER...: the tracer traces system-wide; the loop runs once
# it has attached, and its stderr goes to NAME.err after the tracer's.
wide() {
  local name=$1
  shift
  # With job control on, the tracer does not start with SIGINT ignored,
  # as a script's background commands otherwise do.
  set -m
  env "$notify=1" "$@" -e "$script" >"$work/$name.out" 2>"$work/$name.err" &
  local tracer=$!
  set +m
  local waited=0
  until grep -q "$notify" "$work/$name.out" 2>/dev/null; do
    sleep 0.05
    waited=$((waited + 1))
    if ((waited > 600)); then fail "$name"; fi
  done
  "$loop" "$HITS" "$DEPTH" 2>>"$work/$name.loop" || fail "$name"
  kill -INT "$tracer"
  wait "$tracer" || fail "$name"
  cat "$work/$name.loop" >>"$work/$name.err"
}
loop_ns() { sed -n 's/^sdtbench: hits=[0-9]* loop_ns=\([0-9]*\).*$/\1/p' "$work/$1.err" | tail -1; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3g" : "-"), a / b}'; }
# What a run's map says: "named" (one stack, $HITS hits, descend and main
# in it), "addresses" (one stack of $HITS hits without names), or what
# it counted.
verdict() {
  awk -v hits="$HITS" '
    /^@\[/ {stacks++; instack = 1; next}
    instack && /^\]: / {count = $2; instack = 0; next}
    instack && /descend/ {descend = 1}
    instack && /main/ {main = 1}
    END {
      if (stacks == 1 && count == hits) print (descend && main) ? "named" : "addresses";
      else printf "%d stacks, %d hits\n", stacks, count
    }' "$work/$1.out"
}

echo "stacks.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2

kinds=(sdt-c sdt-wide bt-c)
for ((r = 1; r <= REPS; r++)); do
  echo "stacks.sh: round $r/$REPS" >&2
  "$loop" "$HITS" "$DEPTH" 2>"$work/none-$r.err"
  under "sdt-c-$r" "$sdt" run
  wide "sdt-wide-$r" "$sdt" run
  under "bt-c-$r" bpftrace
done
u=$(for ((r = 1; r <= REPS; r++)); do loop_ns "none-$r"; done | median)
declare -A per_hit got
for k in "${kinds[@]}"; do
  t=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$k-$r"; done | median)
  per_hit[$k]=$(awk -v t="$t" -v u="$u" -v n="$HITS" 'BEGIN {printf "%.0f", (t - u) / n}')
  got[$k]=$(verdict "$k-$REPS")
done

echo
echo "Recording \`@[ustack] = count()\` per hit, $((DEPTH + 2)) frames: addresses (-c) against build IDs (system-wide)"
echo "($HITS hits, median of $REPS rounds; untraced loop $(awk -v u="$u" -v n="$HITS" 'BEGIN {printf "%.1f", u / n}') ns/hit; stacks checked in the last round)"
echo
echo "| | ns/hit | / sdt -c | / bpftrace -c | stacks |"
echo "| --- | --- | --- | --- | --- |"
echo "| bpftrace 0.17 -c (addresses) | ${per_hit[bt-c]} | $(ratio "${per_hit[bt-c]}" "${per_hit[sdt-c]}") | 1 | ${got[bt-c]} |"
echo "| sdt -c (addresses, as before) | ${per_hit[sdt-c]} | 1 | $(ratio "${per_hit[sdt-c]}" "${per_hit[bt-c]}") | ${got[sdt-c]} |"
echo "| sdt system-wide (build IDs) | ${per_hit[sdt-wide]} | $(ratio "${per_hit[sdt-wide]}" "${per_hit[sdt-c]}") | $(ratio "${per_hit[sdt-wide]}" "${per_hit[bt-c]}") | ${got[sdt-wide]} |"
