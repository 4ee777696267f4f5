#!/usr/bin/env bash
# bench/trace.sh: `sdt trace` against bpftrace 0.17 on the same USDT probes.
#
# Measures, in one run so that the ratios share the machine's state:
#   (a) per-hit overhead: a C loop fires sdtbench:hit(i, 2i, i^0x5a5a)
#       $HITS times and times itself (clock_gettime around the loop), so
#       tracer start-up and tear-down stay out of the number. Runs: untraced;
#       bpftrace with an empty action (`{}` compiles to `r0 = 0; exit`: the
#       floor, the price of the uprobe trap and BPF dispatch alone, since sdt
#       has no mode that attaches without sending events); `sdt trace -o
#       /dev/null`; bpftrace printf of the same three arguments -o /dev/null.
#       Per hit = (traced loop - untraced loop) / hits. Median of $REPS runs.
#   (b) delivered events: the same two tracers once more with -o FILE (on
#       tmpfs), lines counted against the known number of hits.
#   (c) start-up: a fixture that fires one probe once. Both tracers run it
#       with -c, which holds the child before exec until the probes are
#       attached, so the fixture's main() runs only once tracing is live; it
#       prints now - $SDTBENCH_T0 (taken by this script just before the
#       tracer starts): launch-to-live. The fixture run with no tracer shows
#       what the harness itself costs. hyperfine gives the whole run's wall
#       time (start + tear-down) and CPU time (user + sys), which is the
#       steadier number on a loaded machine. Then the same for a generated
#       fixture with 10,000 more sites (sdtbench:s0..s9999), traced as
#       'sdtbench:*'. bpftrace 0.17 cannot attach 10,001 sites in useful time
#       (about a second per site with this many notes in the file, and as
#       long again to detach), so it gets the 11-site subset 'sdtbench:s999*'
#       (bpftrace globs only know `*`), and so does sdt, for a like-for-like
#       ratio; bpftrace's 10,001-site time is extrapolated and said to be so.
#   (d) peak RSS (/usr/bin/time %M) of each tracer in the runs above. The
#       fixtures are tiny, so the children's RSS does not hide the tracer's.
#
# The machine is small and shared (2 cores): read the ratios, not the
# absolute numbers. Knobs: HITS (2000000), REPS (3), STARTS (10).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [[ -f scripts/install-deps ]]; then bash scripts/install-deps; fi
if [[ ! -x /usr/bin/time ]]; then # GNU time, for peak RSS
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
fi

HITS=${HITS:-2000000}
REPS=${REPS:-3}
STARTS=${STARTS:-10}

# The repository's default target dir, whatever CARGO_TARGET_DIR says.
# Built every time (a no-op when fresh) so that the numbers are the tree's.
sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

# tmpfs, so that the -o FILE runs measure the tracers and not the disk.
work=$(mktemp -d /dev/shm/sdt-bench-trace.XXXXXX)
trap 'rm -rf -- "$work"' EXIT

cc -O2 -Wall -o "$work/loop" bench/trace/loop.c
cc -O2 -Wall -o "$work/once" bench/trace/once.c
printf '    STAP_PROBE(sdtbench, s%d);\n' {0..9999} >"$work/many-sites.h"
cc -O2 -Wall -DMANY_SITES -I"$work" -o "$work/many" bench/trace/once.c

# run NAME CMD...: run CMD under GNU time; its stderr goes to $work/NAME.err
# and its peak RSS (KiB) to $work/NAME.rss. A failing run stops the bench.
# (bpftrace 0.17 prints "couldn't set RLIMIT_MEMLOCK" here and goes on: the
# kernel charges BPF memory to the cgroup, so that limit no longer matters.)
run() {
  local name=$1
  shift
  if ! /usr/bin/time -f %M -o "$work/$name.rss" "$@" >/dev/null 2>"$work/$name.err"; then
    echo "trace.sh: run $name failed: $*" >&2
    cat "$work/$name.err" >&2
    exit 1
  fi
}
loop_ns() { sed -n 's/^sdtbench: hits=[0-9]* loop_ns=\([0-9]*\)$/\1/p' "$work/$1.err"; }
live_us() { sed -n 's/^sdtbench: live_us=\(-\{0,1\}[0-9]*\)$/\1/p' "$work/$1.err"; }
rss_kb() { tail -n1 "$work/$1.rss"; }
# sdt's exit summary: "sdt: E events, L lost, S sites" -> "E L".
sdt_summary() { sed -n 's/^sdt: \([0-9]*\) events, \([0-9]*\) lost, [0-9]* sites$/\1 \2/p' "$work/$1.err"; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
maximum() { sort -n | tail -n1; }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3gx" : "-"), a / b}'; }
need() { # need WHAT GOT WANT: a run that did not deliver is not a measurement
  if [[ $2 != "$3" ]]; then
    echo "trace.sh: $1: got '$2', want '$3'" >&2
    exit 1
  fi
}

loop=$work/loop
hit="$loop:sdtbench:hit"
bt_floor="usdt:$hit {}"
bt_print="usdt:$hit { printf(\"%d %d %d\n\", arg0, arg1, arg2); }"

echo "trace.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2

# ---- (a) per-hit overhead, interleaved so that drifting noise hits all alike
for ((r = 1; r <= REPS; r++)); do
  echo "trace.sh: (a) round $r/$REPS" >&2
  run "a-none-$r" "$loop" "$HITS"
  run "a-floor-$r" bpftrace -e "$bt_floor" -c "$loop $HITS"
  run "a-sdt-$r" "$sdt" trace -o /dev/null -c "$loop $HITS" sdtbench:hit
  run "a-bt-$r" bpftrace -o /dev/null -e "$bt_print" -c "$loop $HITS"
  read -r events lost <<<"$(sdt_summary "a-sdt-$r")"
  need "sdt events in round $r" "$events+$lost" "$HITS+0"
done
declare -A loop_med per_hit rss_max
for k in none floor sdt bt; do
  loop_med[$k]=$(for ((r = 1; r <= REPS; r++)); do loop_ns "a-$k-$r"; done | median)
  rss_max[$k]=$(for ((r = 1; r <= REPS; r++)); do rss_kb "a-$k-$r"; done | maximum)
  per_hit[$k]=$(awk -v t="${loop_med[$k]}" -v u="${loop_med[none]}" -v n="$HITS" 'BEGIN {printf "%.0f", (t - u) / n}')
done

# ---- (b) delivered events: the same runs with -o FILE
echo "trace.sh: (b) delivered events" >&2
run b-sdt "$sdt" trace -o "$work/b-sdt.out" -c "$loop $HITS" sdtbench:hit
run b-bt bpftrace -o "$work/b-bt.out" -e "$bt_print" -c "$loop $HITS"
b_sdt_lines=$(grep -c ' sdtbench:hit arg0=' "$work/b-sdt.out" || true)
read -r b_sdt_events b_sdt_lost <<<"$(sdt_summary b-sdt)"
b_bt_lines=$(grep -cE '^-?[0-9]+ -?[0-9]+ -?[0-9]+$' "$work/b-bt.out" || true)
# bpftrace reports perf-buffer overruns as "Lost N events" in its output.
b_bt_lost=$(sed -n 's/^Lost \([0-9]*\) events$/\1/p' "$work/b-bt.out" | awk '{s += $1} END {print s + 0}')
rm -f "$work/b-sdt.out" "$work/b-bt.out" # ~200 MB of tmpfs

# ---- (c) start-up, one site
echo "trace.sh: (c) start-up, one site" >&2
once=$work/once
bt_once="usdt:$once:sdtbench:once { printf(\"%d\n\", arg0); }"
for ((r = 1; r <= STARTS; r++)); do
  # The harness alone (bash -> time -> fixture), to read the others against.
  SDTBENCH_T0=$EPOCHREALTIME run "c1-none-$r" "$once"
  SDTBENCH_T0=$EPOCHREALTIME run "c1-sdt-$r" "$sdt" trace -o "$work/c1-sdt.out" -c "$once" sdtbench:once
  need "sdt one-site event" "$(sed 's/^[0-9.]* [0-9]* [0-9]* //' "$work/c1-sdt.out")" "once sdtbench:once arg0=42"
  SDTBENCH_T0=$EPOCHREALTIME run "c1-bt-$r" bpftrace -o "$work/c1-bt.out" -e "$bt_once" -c "$once"
  need "bpftrace one-site event" "$(grep -vx 'Attaching 1 probe...' "$work/c1-bt.out" | grep -v '^$')" 42
done
# Diagnostic: what the ring buffer's size does to RSS (see the notes).
run c1-sdt-1m "$sdt" trace --buffer-size 1M -o /dev/null -c "$once" sdtbench:once
hyperfine -N --style none --warmup 2 --runs "$STARTS" --export-csv "$work/c1.csv" \
  -n sdt "$sdt trace -o /dev/null -c $once sdtbench:once" \
  -n bpftrace "bpftrace -o /dev/null -e '$bt_once' -c $once" >/dev/null 2>&1

# ---- (c) start-up, 10,001 sites (and the 11-site subset bpftrace can do)
echo "trace.sh: (c) start-up, 10,001 sites" >&2
many=$work/many
many_runs=$(((STARTS + 1) / 2))
for ((r = 1; r <= many_runs; r++)); do
  SDTBENCH_T0=$EPOCHREALTIME run "cm-none-$r" "$many"
  SDTBENCH_T0=$EPOCHREALTIME run "cm-sdt-$r" "$sdt" trace -o "$work/cm-sdt.out" -c "$many" 'sdtbench:*'
  need "sdt 10,001-site events" "$(wc -l <"$work/cm-sdt.out")" 10001
  SDTBENCH_T0=$EPOCHREALTIME run "cs-sdt-$r" "$sdt" trace -o "$work/cs-sdt.out" -c "$many" 'sdtbench:s999*'
  need "sdt 11-site events" "$(wc -l <"$work/cs-sdt.out")" 11
done
hyperfine -N --style none --warmup 1 --runs "$many_runs" --export-csv "$work/cm.csv" \
  -n sdt "$sdt trace -o /dev/null -c $many sdtbench:*" \
  -n sdt11 "$sdt trace -o /dev/null -c $many sdtbench:s999*" >/dev/null 2>&1
echo "trace.sh: (c) bpftrace on 11 of the 10,001 sites (about 15 s)" >&2
SDTBENCH_T0=$EPOCHREALTIME run cs-bt-1 bpftrace -o "$work/cs-bt.out" -e "usdt:$many:sdtbench:s999* { printf(\"hit\n\"); }" -c "$many"
need "bpftrace 11-site events" "$(grep -cx hit "$work/cs-bt.out")" 11

# series PREFIX COUNT FN: FN of each run PREFIX-1 .. PREFIX-COUNT
series() { for ((r = 1; r <= $2; r++)); do "$3" "$1-$r"; done; }
live() { series "$1" "$2" live_us | "$3"; }
minimum() { sort -n | head -n1; }
ms() { awk -v u="$1" 'BEGIN {printf "%.1f", u / 1000}'; }
# hyperfine's CSV: command,mean,stddev,median,user,system,min,max (seconds)
hf() { awk -F, -v n="$2" -v f="$3" '$1 == n {
  if (f == "wall") printf "%.0f +- %.0f", $2 * 1000, $3 * 1000
  else if (f == "cpu") printf "%.1f", ($5 + $6) * 1000
  else print $2 * 1000 }' "$work/$1.csv"; }
# crow LABEL PREFIX COUNT [CSV NAME]: one row of the start-up table
crow() {
  local whole=- cpu=- rss=-
  if (($# > 3)); then whole=$(hf "$4" "$5" wall) cpu=$(hf "$4" "$5" cpu); fi
  [[ $2 == *-none ]] || rss="$(mb "$(series "$2" "$3" rss_kb | maximum)") MB"
  printf '  %-42s %8s %8s %12s %8s %10s\n' "$1" "$(ms "$(live "$2" "$3" median)")" "$(ms "$(live "$2" "$3" minimum)")" "$whole" "$cpu" "$rss"
}

# ---- the table
verdict() { awk "BEGIN {print ($1) ? \"met\" : \"MISSED\"}"; }
echo
echo "sdt trace vs bpftrace 0.17 (one run; compare ratios, the machine is small and shared)"
echo
echo "(a) per-hit overhead: $HITS hits of sdtbench:hit(3 ints), loop timed inside the fixture, median of $REPS"
printf '  %-34s %10s %9s %10s\n' run "loop ms" "ns/hit" "peak RSS"
row() { printf '  %-34s %10.1f %9s %10s\n' "$1" "$(awk -v n="${loop_med[$2]}" 'BEGIN {print n / 1e6}')" "$3" "$4"; }
row untraced none - -
row "floor: bpftrace, empty action {}" floor "${per_hit[floor]}" "$(mb "${rss_max[floor]}") MB"
row "sdt trace -o /dev/null" sdt "${per_hit[sdt]}" "$(mb "${rss_max[sdt]}") MB"
row "bpftrace printf -o /dev/null" bt "${per_hit[bt]}" "$(mb "${rss_max[bt]}") MB"
echo "  sdt/bpftrace per hit: $(ratio "${per_hit[sdt]}" "${per_hit[bt]}") (goal <= 1: $(verdict "${per_hit[sdt]} <= ${per_hit[bt]}"))." \
  "sdt/floor: $(ratio "${per_hit[sdt]}" "${per_hit[floor]}"), $((per_hit[sdt] - per_hit[floor])) ns/hit above the floor"
echo
echo "(b) delivered events, -o FILE on tmpfs, of $HITS fired"
printf '  %-10s %9s lines  %s\n' sdt "$b_sdt_lines" "(summary: $b_sdt_events events, $b_sdt_lost lost; loop $(awk -v n="$(loop_ns b-sdt)" 'BEGIN {printf "%.0f", n / 1e6}') ms)"
printf '  %-10s %9s lines  %s\n' bpftrace "$b_bt_lines" "(\"Lost N events\" reported: $b_bt_lost; loop $(awk -v n="$(loop_ns b-bt)" 'BEGIN {printf "%.0f", n / 1e6}') ms)"
echo "  lost: sdt $((HITS - b_sdt_lines)) (goal 0: $(verdict "$b_sdt_lines == $HITS")), bpftrace $((HITS - b_bt_lines))"
echo
echo "(c) start-up: launch -> probe live = the fixture's main() under -c (ms, median and min);"
echo "    whole run = start + tear-down (hyperfine mean +- sd, ms); CPU = user + sys of the whole run (ms)"
printf '  %-42s %8s %8s %12s %8s %10s\n' run "live med" "min" "whole run" "CPU" "peak RSS"
crow "no tracer, 1 site (harness only)" c1-none "$STARTS"
crow "sdt, 1 site" c1-sdt "$STARTS" c1 sdt
crow "bpftrace, 1 site" c1-bt "$STARTS" c1 bpftrace
crow "no tracer, 10,001 sites" cm-none "$many_runs"
crow "sdt, 10,001 sites 'sdtbench:*'" cm-sdt "$many_runs" cm sdt
crow "sdt, 11 of 10,001 sites 's999*'" cs-sdt "$many_runs" cm sdt11
crow "bpftrace, 11 of 10,001 sites 's999*' (1 run)" cs-bt 1
c1_sdt_live=$(live c1-sdt "$STARTS" median)
cm_sdt_live=$(live cm-sdt "$many_runs" median)
c1_sdt_rss=$(series c1-sdt "$STARTS" rss_kb | maximum)
cm_sdt_rss=$(series cm-sdt "$many_runs" rss_kb | maximum)
cs_bt_live=$(live_us cs-bt-1)
echo "  1 site: sdt/bpftrace to live $(ratio "$c1_sdt_live" "$(live c1-bt "$STARTS" median)")," \
  "whole run $(ratio "$(hf c1 sdt mean)" "$(hf c1 bpftrace mean)"); goal <= 20 ms to live: $(verdict "$c1_sdt_live <= 20000")"
echo "  10,001 sites: goal < 1 s to live: $(verdict "$cm_sdt_live < 1000000");" \
  "11-site subset sdt/bpftrace to live $(ratio "$(live cs-sdt "$many_runs" median)" "$cs_bt_live");" \
  "bpftrace on all 10,001 at its 11-site rate: ~$(awk -v u="$cs_bt_live" 'BEGIN {printf "%.0f", u / 11 * 10001 / 6e7}') min (extrapolated, not run)"
echo
echo "(d) peak RSS (max over the runs above)"
echo "  $HITS-hit runs: sdt $(mb "${rss_max[sdt]}") MB vs bpftrace $(mb "${rss_max[bt]}") MB ($(ratio "${rss_max[sdt]}" "${rss_max[bt]}"));" \
  "1 site: sdt $(mb "$c1_sdt_rss") MB vs bpftrace $(mb "$(series c1-bt "$STARTS" rss_kb | maximum)") MB;" \
  "10,001 sites: sdt $(mb "$cm_sdt_rss") MB; goal sdt <= 15 MB (1 site and $HITS hits): $(verdict "${rss_max[sdt]} <= 15360 && $c1_sdt_rss <= 15360")"
echo "  diagnostic: sdt, 1 site, --buffer-size 1M instead of the default: $(mb "$(rss_kb c1-sdt-1m)") MB (every page of the ring is resident)"
