#!/usr/bin/env bash
# bench/run.sh: `sdt run` against bpftrace 0.17 on the same scripts, in one
# run, so that the ratios share the machine's state.
#
#   (1) start-up and exit: `-c /usr/bin/true` with a 10-probe script (ten
#       libc uprobes counted), whole-process wall time from hyperfine, and
#       CPU time (user + sys).
#   (2) compile: a generated 500-line script (50 probe blocks with maps,
#       aggregations, conditions, printf), `sdt run --dump` against
#       `bpftrace --emit-elf` (bpftrace's dry-run compile), hyperfine.
#   (3) per-hit costs, measured inside the traced program: a C loop fires
#       sdtbench:hit(i, 2i, i^0x5a5a) $HITS times and times itself, so
#       start-up and tear-down stay out of it; per hit = (traced loop -
#       untraced loop) / hits, median of $REPS rounds. Runs:
#         - sdt `{}` (the floor on this site for sdt: trap, dispatch and the
#           process-tree filter), sdt `@ = count()`, the same with
#           --no-follow (no filter), bpftrace `@ = count()`;
#         - printf of the 3 arguments with -o FILE (tmpfs), sdt and
#           bpftrace, and the lines each delivered;
#         - a uretprobe latency hist: uprobe + uretprobe on work(), called
#           $CALLS times by bench/run/calls.c, sdt and bpftrace.
#   (4) peak RSS (GNU time %M) of every tracer run above.
#
# Read the ratios, not the absolute numbers: the machine is small (2
# cores) and shared. Knobs: HITS (2000000), CALLS (1000000), REPS (3),
# STARTS (10). Needs root, bpftrace, hyperfine, cc and <sys/sdt.h>
# (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps
if [[ ! -x /usr/bin/time ]]; then # GNU time, for peak RSS
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
fi

HITS=${HITS:-2000000}
CALLS=${CALLS:-1000000}
REPS=${REPS:-3}
STARTS=${STARTS:-10}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-run.XXXXXX)
trap 'rm -rf -- "$work"' EXIT
cc -O2 -Wall -o "$work/loop" bench/trace/loop.c
cc -O2 -Wall -o "$work/calls" bench/run/calls.c
loop=$work/loop
calls=$work/calls
libc=$(ldd /usr/bin/true | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p')

# run NAME CMD...: CMD under GNU time; stderr to $work/NAME.err, peak RSS
# (KiB) to $work/NAME.rss. A failing run stops the bench.
run() {
  local name=$1
  shift
  if ! /usr/bin/time -f %M -o "$work/$name.rss" "$@" >/dev/null 2>"$work/$name.err"; then
    echo "run.sh: run $name failed: $*" >&2
    cat "$work/$name.err" >&2
    exit 1
  fi
}
loop_ns() { sed -n 's/^sdtbench: \(hits\|calls\)=[0-9]* loop_ns=\([0-9]*\).*$/\2/p' "$work/$1.err"; }
rss_kb() { tail -n1 "$work/$1.rss"; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
maximum() { sort -n | tail -n1; }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3g" : "-"), a / b}'; }
verdict() { awk "BEGIN {print ($1) ? \"met\" : \"MISSED\"}"; }
need() { # need WHAT GOT WANT: a run that did not deliver is not a measurement
  if [[ $2 != "$3" ]]; then
    echo "run.sh: $1: got '$2', want '$3'" >&2
    exit 1
  fi
}

echo "run.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2

# ---- (1) start-up and exit, 10 probes
startup_script=""
for f in malloc free calloc realloc open close read write mmap munmap; do
  startup_script+="uprobe:$libc:$f { @[\"$f\"] = count(); } "
done
echo "run.sh: (1) start-up, -c /usr/bin/true with 10 probes" >&2
run s-sdt "$sdt" run -c /usr/bin/true -e "$startup_script"
run s-bt bpftrace -c /usr/bin/true -e "$startup_script"
hyperfine -N --style none --warmup 2 --runs "$STARTS" --export-csv "$work/s.csv" \
  -n sdt "$sdt run -c /usr/bin/true -e '$startup_script'" \
  -n bpftrace "bpftrace -c /usr/bin/true -e '$startup_script'" >/dev/null 2>&1

# ---- (2) compile, 500 lines
{
  echo "struct order { int id; long cents; char name[16]; struct order *next; };"
  for ((k = 0; k < 50; k++)); do
    cat <<BT
usdt:$loop:sdtbench:hit /arg0 % 50 == $k/ {
  \$x = arg1 + $k; \$o = (struct order *)arg2;
  @count_$k = count(); @sum_$k[arg0 % 8] = sum(arg2);
  if (\$x > 100) { @big_$k = hist(\$x); } else { @small_$k = lhist(\$x, 0, 100, 10); }
  @max_$k[comm, pid] = max(arg1); @avg_$k = avg(\$x); @stats_$k = stats(arg2);
  \$y = \$x > 1000 ? \$x / 3 : (\$x << 2) | 1;
  if (\$y == $k && \$o != 0) { printf("%d %s\n", \$o->id, \$o->name); }
  printf("$k %d %d %s %llu\n", arg0, \$y, comm, nsecs);
  @last_$k = \$y;
}
BT
  done
} >"$work/500.bt"
lines=$(wc -l <"$work/500.bt")
echo "run.sh: (2) compile, $lines lines" >&2
run c-sdt "$sdt" run --dump "$work/500.bt"
run c-bt bpftrace --emit-elf "$work/500.elf" "$work/500.bt"
hyperfine -N --style none --warmup 2 --runs "$STARTS" --export-csv "$work/c.csv" \
  -n sdt "$sdt run --dump $work/500.bt" \
  -n bpftrace "bpftrace --emit-elf $work/500.elf $work/500.bt" >/dev/null 2>&1

# ---- (3) per-hit costs, interleaved so that drifting noise hits all alike
hit="usdt:$loop:sdtbench:hit"
print3="$hit { printf(\"%d %d %d\\n\", arg0, arg1, arg2); }"
hist="uprobe:$calls:work { @start[tid] = nsecs; } uretprobe:$calls:work /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }"
printed() { grep -cE '^[0-9]+ [0-9]+ [0-9]+$' "$1" || true; }
for ((r = 1; r <= REPS; r++)); do
  echo "run.sh: (3) round $r/$REPS" >&2
  run "none-$r" "$loop" "$HITS"
  run "empty-$r" "$sdt" run -c "$loop $HITS" -e "$hit { }"
  run "count-$r" "$sdt" run -c "$loop $HITS" -e "$hit { @ = count(); }"
  run "nofollow-$r" "$sdt" run --no-follow -c "$loop $HITS" -e "$hit { @ = count(); }"
  run "btcount-$r" bpftrace -c "$loop $HITS" -e "$hit { @ = count(); }"
  run "printf-$r" "$sdt" run -o "$work/printf.out" -c "$loop $HITS" -e "$print3"
  printf_lines[r]=$(printed "$work/printf.out")
  run "btprintf-$r" bpftrace -o "$work/btprintf.out" -c "$loop $HITS" -e "$print3"
  btprintf_lines[r]=$(printed "$work/btprintf.out")
  rm -f "$work/printf.out" "$work/btprintf.out"
  run "callsnone-$r" "$calls" "$CALLS"
  run "hist-$r" "$sdt" run -c "$calls $CALLS" -e "$hist"
  run "bthist-$r" bpftrace -c "$calls $CALLS" -e "$hist"
done
declare -A per_hit rss
for k in empty count nofollow btcount printf btprintf hist bthist; do
  base=none n=$HITS
  if [[ $k == *hist ]]; then base=callsnone n=$CALLS; fi
  t=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$k-$r"; done | median)
  u=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$base-$r"; done | median)
  per_hit[$k]=$(awk -v t="$t" -v u="$u" -v n="$n" 'BEGIN {printf "%.0f", (t - u) / n}')
  rss[$k]=$(for ((r = 1; r <= REPS; r++)); do rss_kb "$k-$r"; done | maximum)
done
sdt_lines=$(printf '%s\n' "${printf_lines[@]}" | sort -n | head -n1)
bt_lines=$(printf '%s\n' "${btprintf_lines[@]}" | sort -n | head -n1)
need "sdt printf lines (fewest in a round)" "$sdt_lines" "$HITS"

# ---- the table
# hyperfine's CSV: command,mean,stddev,median,user,system,min,max (seconds)
hf() { awk -F, -v n="$2" -v f="$3" '$1 == n {
  if (f == "wall") printf "%.1f", $2 * 1000
  else if (f == "sd") printf "%.1f", $3 * 1000
  else if (f == "cpu") printf "%.1f", ($5 + $6) * 1000 }' "$work/$1.csv"; }
s_ratio=$(ratio "$(hf s sdt wall)" "$(hf s bpftrace wall)")
echo
echo "sdt run vs bpftrace 0.17 (one run; compare ratios, the machine is small and shared)"
echo
echo "| measure | sdt | bpftrace | sdt/bpftrace | goal |"
echo "| --- | --- | --- | --- | --- |"
echo "| start-up and exit, -c true, 10 probes (wall ms, mean of $STARTS) | $(hf s sdt wall) ± $(hf s sdt sd) | $(hf s bpftrace wall) ± $(hf s bpftrace sd) | $s_ratio | ≤ 0.1: $(verdict "$s_ratio <= 0.1") |"
echo "| start-up and exit, CPU ms (user + sys) | $(hf s sdt cpu) | $(hf s bpftrace cpu) | $(ratio "$(hf s sdt cpu)" "$(hf s bpftrace cpu)") | |"
echo "| compile, $lines lines, --dump vs --emit-elf (ms) | $(hf c sdt wall) ± $(hf c sdt sd) | $(hf c bpftrace wall) ± $(hf c bpftrace sd) | $(ratio "$(hf c sdt wall)" "$(hf c bpftrace wall)") | < 20 ms: $(verdict "$(hf c sdt wall) < 20") |"
echo "| count() per hit (ns) | ${per_hit[count]} | ${per_hit[btcount]} | $(ratio "${per_hit[count]}" "${per_hit[btcount]}") | ≤ 1: $(verdict "${per_hit[count]} <= ${per_hit[btcount]}") |"
echo "| count() per hit against sdt's empty program \`{}\` (${per_hit[empty]} ns) | | | $(ratio "${per_hit[count]}" "${per_hit[empty]}") | ≤ 1.1: $(verdict "${per_hit[count]} <= 1.1 * ${per_hit[empty]}") |"
echo "| count() per hit with --no-follow (no tree filter) | ${per_hit[nofollow]} | | $(ratio "${per_hit[nofollow]}" "${per_hit[btcount]}") | |"
echo "| printf per hit, 3 args, $HITS hits to a file (ns) | ${per_hit[printf]} | ${per_hit[btprintf]} | $(ratio "${per_hit[printf]}" "${per_hit[btprintf]}") | ≤ 0.1: $(verdict "${per_hit[printf]} <= 0.1 * ${per_hit[btprintf]}") |"
echo "| printf lines delivered of $HITS (fewest in a round) | $sdt_lines | $bt_lines | | 0 lost: $(verdict "$sdt_lines == $HITS") |"
echo "| hist() per call, uprobe + uretprobe latency (ns) | ${per_hit[hist]} | ${per_hit[bthist]} | $(ratio "${per_hit[hist]}" "${per_hit[bthist]}") | ≤ 1: $(verdict "${per_hit[hist]} <= ${per_hit[bthist]}") |"
peak_sdt=$(printf '%s\n' "$(rss_kb s-sdt)" "$(rss_kb c-sdt)" "${rss[empty]}" "${rss[count]}" "${rss[nofollow]}" "${rss[printf]}" "${rss[hist]}" | maximum)
peak_bt=$(printf '%s\n' "$(rss_kb s-bt)" "$(rss_kb c-bt)" "${rss[btcount]}" "${rss[btprintf]}" "${rss[bthist]}" | maximum)
echo "| peak RSS, all runs above (MB) | $(mb "$peak_sdt") | $(mb "$peak_bt") | $(ratio "$peak_sdt" "$peak_bt") | ≤ 15 MB: $(verdict "$peak_sdt <= 15360") |"
