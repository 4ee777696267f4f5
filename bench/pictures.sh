#!/usr/bin/env bash
# bench/pictures.sh: what the pictures cost.
#
#   (1) folded stacks of a map with 10,000 distinct user stacks
#       (bench/pictures/stacks.c: ten functions, four levels deep, each
#       path hit $REPEAT times). sdt: `sdt run -f folded`. bpftrace 0.17
#       has no folded output: it prints the map, and an awk script folds
#       it as FlameGraph's stackcollapse-bpftrace does (frames root first,
#       offsets dropped, equal stacks added up). Measured: the time from
#       the program's last hit (it prints the wall clock, then fires the
#       probe whose exit() ends the run) to the folded lines in a file, and
#       how many distinct stacks each recorded (a stack whose bucket in the
#       kernel's stack map is taken is lost, and both tools count those).
#       bpftrace symbolizes stacks only of a live process it attached to
#       with -p (under -c it prints bare addresses), so it runs with -p and
#       the program waits $WAIT seconds before its first hit; sdt runs with
#       -c. Both with BPFTRACE_MAP_KEYS_MAX=65536, which sizes the stack
#       map of either.
#   (2) --timeline writing speed: $HITS hits of a 3-argument probe
#       (bench/trace/loop.c) under `sdt trace -o /dev/null`, with and
#       without `--timeline FILE`: the CPU time (user + sys) the timeline
#       adds per event, events per second of that, and bytes per event of
#       the file. Median of $REPS rounds.
#   (3) the `printf` stamp: `sdt run` printing 3 arguments per hit to a
#       file, with and without --timeline (which compiles every printf
#       with its time and thread, and writes an event per line): the cost
#       per hit inside the traced loop, median of $REPS rounds.
#
# Knobs: REPEAT (10), WAIT (5), HITS (1000000), REPS (3). Needs root,
# bpftrace, cc and <sys/sdt.h> (scripts/install-deps).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps
if [[ ! -x /usr/bin/time ]]; then # GNU time, for CPU time
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
fi

REPEAT=${REPEAT:-10}
WAIT=${WAIT:-5}
HITS=${HITS:-1000000}
REPS=${REPS:-3}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-pictures.XXXXXX)
stacks_pid=
cleanup() {
  if [[ -n $stacks_pid ]]; then kill "$stacks_pid" 2>/dev/null || true; fi
  rm -rf -- "$work"
}
trap cleanup EXIT
cc -O0 -g -fno-omit-frame-pointer -o "$work/stacks" bench/pictures/stacks.c
cc -O2 -Wall -o "$work/loop" bench/trace/loop.c
stacks=$work/stacks
loop=$work/loop
export BPFTRACE_MAP_KEYS_MAX=65536

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
now_ns() { date +%s%N; }
done_ns() { sed -n 's/^sdtbench: done_ns=\([0-9]*\)$/\1/p' "$1"; }
loop_ns() { sed -n 's/^sdtbench: hits=[0-9]* loop_ns=\([0-9]*\)$/\1/p' "$1"; }
cpu_ms() { awk '{printf "%.0f\n", ($1 + $2) * 1000}' "$1"; }

echo "pictures.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2

# ---- (1) folded stacks
script="usdt:$stacks:sdtbench:leaf { @[ustack] = count(); } usdt:$stacks:sdtbench:done { exit(); }"
echo "pictures.sh: (1) sdt run -f folded" >&2
# exit() ends the run; sdt then ends the waiting program with SIGTERM and
# exits with its status, 143.
status=0
"$sdt" run -f folded -c "$stacks $REPEAT" -e "$script" >"$work/sdt.folded" 2>"$work/sdt.err" || status=$?
if ((status != 0 && status != 143)); then
  cat "$work/sdt.err" >&2
  exit 1
fi
sdt_end=$(now_ns)
sdt_ms=$(awk -v a="$(done_ns "$work/sdt.err")" -v b="$sdt_end" 'BEGIN {printf "%.0f", (b - a) / 1e6}')
sdt_stacks=$(grep -vc '^\[no stack\] ' "$work/sdt.folded" || true)
sdt_lost=$(sed -n 's/^sdt: \([0-9]*\) stacks could not be recorded$/\1/p' "$work/sdt.err")

echo "pictures.sh: (1) bpftrace -p, then awk (about a minute and a half)" >&2
"$stacks" "$REPEAT" "$WAIT" 2>"$work/bt-program.err" &
stacks_pid=$!
bpftrace -p "$stacks_pid" -e "$script" >"$work/bt.out" 2>"$work/bt.err"
# FlameGraph's stackcollapse-bpftrace, as awk: `@[`, a frame a line
# (innermost first, `name+offset`), `]: count`.
awk '
  /^@\[$/ { n = 0; next }
  /^\]: [0-9]+$/ {
    line = ""
    for (i = n; i >= 1; i--) line = line (line == "" ? "" : ";") frame[i]
    sum[line] += $2
    next
  }
  n >= 0 && /^ +/ { f = $1; sub(/\+[0-9]+$/, "", f); frame[++n] = f }
  END { for (s in sum) print s, sum[s] }
' "$work/bt.out" | sort >"$work/bt.folded"
bt_end=$(now_ns)
kill "$stacks_pid" 2>/dev/null || true
wait "$stacks_pid" 2>/dev/null || true
stacks_pid=
bt_ms=$(awk -v a="$(done_ns "$work/bt-program.err")" -v b="$bt_end" 'BEGIN {printf "%.0f", (b - a) / 1e6}')
bt_stacks=$(grep -vc '^ ' "$work/bt.folded" || true)
total() { awk '{s += $NF} END {print s}' "$1"; }
sdt_hits=$(total "$work/sdt.folded")
bt_hits=$(total "$work/bt.folded")
# sdt keeps every hit: those whose stack was lost under `[no stack]`.
if [[ $sdt_hits != $((REPEAT * 10000)) ]]; then
  echo "pictures.sh: sdt's folded lines hold $sdt_hits hits, not $((REPEAT * 10000))" >&2
  exit 1
fi

# ---- (2) timeline writing, (3) printf stamp
hit="usdt:$loop:sdtbench:hit"
print3="$hit { printf(\"%d %d %d\\n\", arg0, arg1, arg2); }"
limit=$((HITS * 4))
for ((r = 1; r <= REPS; r++)); do
  echo "pictures.sh: (2, 3) round $r/$REPS" >&2
  /usr/bin/time -f "%U %S" -o "$work/plain-$r.cpu" \
    "$sdt" trace -o /dev/null -c "$loop $HITS" "$hit" 2>"$work/plain-$r.err"
  /usr/bin/time -f "%U %S" -o "$work/tl-$r.cpu" \
    "$sdt" trace -o /dev/null --timeline "$work/tl.json" --timeline-limit "$limit" \
    -c "$loop $HITS" "$hit" 2>"$work/tl-$r.err"
  tl_bytes=$(stat -c %s "$work/tl.json")
  tl_events=$(grep -c '"ph":"i"' "$work/tl.json")
  rm -f "$work/tl.json"
  if [[ $tl_events != "$HITS" ]]; then
    echo "pictures.sh: the timeline holds $tl_events hits, not $HITS" >&2
    cat "$work/tl-$r.err" >&2
    exit 1
  fi
  "$loop" "$HITS" 2>"$work/none-$r.err"
  "$sdt" run -o "$work/p.out" -c "$loop $HITS" -e "$print3" 2>"$work/printf-$r.err"
  "$sdt" run -o "$work/p.out" --timeline "$work/ptl.json" --timeline-limit "$limit" \
    -c "$loop $HITS" -e "$print3" 2>"$work/printfTl-$r.err"
  rm -f "$work/p.out" "$work/ptl.json"
done
plain=$(for ((r = 1; r <= REPS; r++)); do cpu_ms "$work/plain-$r.cpu"; done | median)
tl=$(for ((r = 1; r <= REPS; r++)); do cpu_ms "$work/tl-$r.cpu"; done | median)
per_hit() {
  local t u
  t=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$work/$1-$r.err"; done | median)
  u=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$work/none-$r.err"; done | median)
  awk -v t="$t" -v u="$u" -v n="$HITS" 'BEGIN {printf "%.0f", (t - u) / n}'
}

echo
echo "Pictures (one run; the machine is small and shared)"
echo
echo "| measure | sdt | bpftrace 0.17 + awk |"
echo "| --- | --- | --- |"
echo "| last hit to folded lines in a file, 10,000 distinct stacks, $((REPEAT * 10000)) hits | $sdt_ms ms | $bt_ms ms |"
echo "| distinct stacks recorded of 10,000 | $sdt_stacks | $bt_stacks |"
echo "| hits in the folded lines, of $((REPEAT * 10000)) | $sdt_hits (${sdt_lost:-0} as \`[no stack]\`, and reported) | $bt_hits (the rest dropped, not reported) |"
echo
echo "| --timeline, $HITS hits of a 3-argument probe (median of $REPS) | |"
echo "| --- | --- |"
echo "| sdt trace CPU, without / with the timeline | $plain ms / $tl ms |"
echo "| timeline CPU per event | $(awk -v a="$tl" -v b="$plain" -v n="$HITS" 'BEGIN {printf "%.0f ns", (a - b) * 1e6 / n}') |"
echo "| timeline events written per second of CPU | $(awk -v a="$tl" -v b="$plain" -v n="$HITS" 'BEGIN {printf "%.2f M", n / ((a - b) / 1000) / 1e6}') |"
echo "| file size per event | $(awk -v s="$tl_bytes" -v n="$HITS" 'BEGIN {printf "%.0f bytes", s / n}') |"
echo "| sdt run, printf of 3 arguments per hit, without / with --timeline | $(per_hit printf) ns / $(per_hit printfTl) ns |"
