#!/usr/bin/env bash
# bench/profile.sh: `profile:hz:99` of one busy process, sdt against
# bpftrace 0.17, in one run, rounds interleaved so that the machine's
# drifting load falls on both alike.
#
# The target is tests/fixtures/kernel/busy.c: three threads spinning in
# one function. Each round starts it for BUSY seconds, then runs each
# tracer for WINDOW seconds (stopped with SIGINT, as a person stops it)
# on the one-liner users type for a CPU flame graph of a process:
#
#   profile:hz:99 /pid == $1/ { @[ustack] = count(); }
#
# and measures, per tracer run:
#   - CPU time of the tracer (user + sys, GNU time), which is what
#     profiling costs the machine beyond the sampled process;
#   - samples delivered: the counts of the printed map, summed; and that
#     over what 99 Hz of the target's CPU time while the tracer ran should
#     give (its utime + stime from /proc/PID/stat before and after: the
#     machine is shared, so the target gets what CPU it gets);
#   - peak RSS of the tracer (GNU time %M).
# Medians of ROUNDS rounds, and ratios sdt / bpftrace.
#
# Knobs: ROUNDS (5), WINDOW (8), BUSY (WINDOW + 4). Needs root, bpftrace
# and cc (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps
if [[ ! -x /usr/bin/time ]]; then # GNU time, for CPU time and peak RSS
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
fi

ROUNDS=${ROUNDS:-5}
WINDOW=${WINDOW:-8}
BUSY=${BUSY:-$((WINDOW + 4))}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-profile.XXXXXX)
busy_pid=
cleanup() {
  if [[ -n $busy_pid ]]; then kill "$busy_pid" 2>/dev/null || true; fi
  rm -rf -- "$work"
}
trap cleanup EXIT
cc -O1 -g -fno-omit-frame-pointer -pthread -o "$work/busy" tests/fixtures/kernel/busy.c

script='profile:hz:99 /pid == $1/ { @[ustack] = count(); }'

# trace NAME TRACER...: TRACER (with the script and the busy pid) for
# WINDOW seconds under GNU time; its output to $work/NAME.out, and
# "user sys maxrss_kb" to $work/NAME.time. (`--foreground`: timeout
# otherwise signals its whole process group as well, and the second
# SIGINT that reaches the tracer ends it before it prints.)
trace() {
  local name=$1
  shift
  local before
  before=$(target_ticks)
  /usr/bin/time -f '%U %S %M' -o "$work/$name.time" \
    timeout --foreground -s INT "$WINDOW" "$@" "$script" "$busy_pid" >"$work/$name.out" 2>"$work/$name.err" || true
  echo $(($(target_ticks) - before)) >"$work/$name.ticks"
  if ! grep -q ']: [0-9]' "$work/$name.out"; then
    echo "profile.sh: $name printed no samples" >&2
    cat "$work/$name.err" >&2
    exit 1
  fi
}
# The target's CPU time so far (user + system), in clock ticks.
target_ticks() { awk '{print $14 + $15}' "/proc/$busy_pid/stat"; }
ticks_per_s=$(getconf CLK_TCK)
# Samples over 99 Hz of the target's CPU time during the window.
share() { awk -v s="$(samples "$1")" -v t="$(cat "$work/$1.ticks")" -v hz="$ticks_per_s" 'BEGIN {printf "%.3f\n", (t > 0 ? s / (99 * t / hz) : 0)}'; }
samples() { sed -n 's/^\]: \([0-9]*\)$/\1/p' "$work/$1.out" | awk '{s += $1} END {print s + 0}'; }
# GNU time's last line is ours (a status line may come before it).
cpu_s() { tail -n1 "$work/$1.time" | awk '{printf "%.2f\n", $1 + $2}'; }
rss_kb() { tail -n1 "$work/$1.time" | awk '{print $3}'; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3g" : "-"), a / b}'; }

echo "profile.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  for tracer in sdt bpftrace; do
    "$work/busy" "$BUSY" "$work/busy.report" &
    busy_pid=$!
    sleep 0.5
    echo "profile.sh: round $r/$ROUNDS, $tracer" >&2
    if [[ $tracer == sdt ]]; then
      trace "sdt-$r" "$sdt" run -e
    else
      trace "bt-$r" bpftrace -e
    fi
    kill "$busy_pid" 2>/dev/null || true
    wait "$busy_pid" 2>/dev/null || true
    busy_pid=
  done
done

row() { # row MEASURE FUNCTION UNIT
  local s b
  s=$(for ((r = 1; r <= ROUNDS; r++)); do "$2" "sdt-$r"; done | median)
  b=$(for ((r = 1; r <= ROUNDS; r++)); do "$2" "bt-$r"; done | median)
  printf '| %s | %s%s | %s%s | %s |\n' "$1" "$s" "$3" "$b" "$3" "$(ratio "$s" "$b")"
}
echo
echo "profile:hz:99 of a process with 3 busy threads, $WINDOW s windows, median of $ROUNDS rounds"
echo
echo "| measure | sdt | bpftrace 0.17 | ratio |"
echo "| --- | --- | --- | --- |"
row "tracer CPU time (user + sys)" cpu_s " s"
row "samples delivered" samples ""
row "samples / (99 Hz x target CPU time)" share ""
row "peak RSS" rss_kb " KiB"
