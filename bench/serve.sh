#!/usr/bin/env bash
# bench/serve.sh: what serving metrics costs.
#
#   (1) a scrape of 10,000 series: one map of 10,000 keys served by
#       `sdt serve`; wall time of each of $SCRAPES scrapes (curl), and
#       sdt's CPU time (user + sys, from /proc/PID/stat) per scrape.
#   (2) per-hit overhead of `@ = count()` served (`sdt serve`, a program
#       attached by path) against the same program under `sdt run`
#       (attached by path too, no -c, so neither filters by process): a C
#       loop fires sdtbench:hit $HITS times and times itself; per hit =
#       (traced loop - untraced loop) / hits, median of $REPS rounds.
#   (3) peak RSS (VmHWM) of `sdt serve` with 10 programs, after they
#       counted $HITS hits and were scraped.
#
# The hour-long soak is bench/serve-soak.sh (not run in CI). Read ratios,
# not absolute numbers: the machine is small (2 cores) and shared. Knobs:
# HITS (2000000), REPS (3), SCRAPES (50). Needs root, cc, curl and
# <sys/sdt.h> (scripts/install-deps).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps

HITS=${HITS:-2000000}
REPS=${REPS:-3}
SCRAPES=${SCRAPES:-50}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-serve.XXXXXX)
server=""
stop_server() {
  if [[ -n $server ]]; then
    kill -INT "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
  fi
}
trap 'stop_server; rm -rf -- "$work"' EXIT
cc -O2 -Wall -o "$work/loop" bench/trace/loop.c
loop=$work/loop
hit="usdt:$loop:sdtbench:hit"

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3g" : "-"), a / b}'; }
loop_ns() { "$loop" "$HITS" 2>&1 >/dev/null | sed -n 's/^sdtbench: hits=[0-9]* loop_ns=\([0-9]*\)$/\1/p'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# start_serving DIR PORT: sdt serve in the background, once its programs are up.
start_serving() {
  local dir=$1 port=$2 n
  n=$(ls "$dir"/*.bt | wc -l)
  "$sdt" serve --listen "127.0.0.1:$port" "$dir" 2>"$work/serve.err" &
  server=$!
  for _ in $(seq 200); do
    if [[ $(grep -c ': up:' "$work/serve.err" || true) -ge $n ]]; then return; fi
    sleep 0.05
  done
  echo "serve.sh: sdt serve did not start:" >&2
  cat "$work/serve.err" >&2
  exit 1
}
# metric PORT SERIES: the value of one sample.
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v s="$2" '$1 == s {print $2}'; }

echo "serve.sh: sdt $(git -C "$root" rev-parse --short HEAD), Linux $(uname -r), $(nproc) cores" >&2

# ---- (1) a scrape of 10,000 series
mkdir "$work/wide"
echo "$hit { @keys[arg0 % 10000] = count(); }" >"$work/wide/wide.bt"
export BPFTRACE_MAP_KEYS_MAX=10000
start_serving "$work/wide" 19436
"$loop" 100000 2>/dev/null
series=$(curl -sf http://127.0.0.1:19436/metrics | grep -c '^sdt_keys_total{')
if [[ $series != 10000 ]]; then
  echo "serve.sh: (1) got $series series, want 10000" >&2
  exit 1
fi
echo "serve.sh: (1) $SCRAPES scrapes of $series series" >&2
ticks0=$(cpu_ticks "$server")
for ((i = 0; i < SCRAPES; i++)); do
  curl -sf -o "$work/scrape.txt" -w '%{time_total}\n' http://127.0.0.1:19436/metrics
done >"$work/scrapes"
ticks1=$(cpu_ticks "$server")
scrape_bytes=$(stat -c %s "$work/scrape.txt")
scrape_ms=$(awk '{print $1 * 1000}' "$work/scrapes" | median)
scrape_cpu=$(awk -v t=$((ticks1 - ticks0)) -v n="$SCRAPES" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t * 1000 / hz / n}')
stop_server
unset BPFTRACE_MAP_KEYS_MAX

# ---- (2) per-hit overhead, served and run
mkdir "$work/count"
echo "$hit { @hits = count(); }" >"$work/count/count.bt"
for ((r = 1; r <= REPS; r++)); do
  echo "serve.sh: (2) round $r/$REPS" >&2
  loop_ns >>"$work/none"
  start_serving "$work/count" 19437
  loop_ns >>"$work/served"
  got=$(metric 19437 'sdt_hits_total{program="count"}')
  [[ $got == "$HITS" ]] || { echo "serve.sh: served count $got, want $HITS" >&2; exit 1; }
  stop_server
  "$sdt" run -e "$hit { @hits = count(); }" >"$work/run.out" 2>"$work/run.err" &
  server=$!
  until grep -q Attaching "$work/run.err"; do sleep 0.05; done
  loop_ns >>"$work/run"
  stop_server
  grep -q "@hits: $HITS" "$work/run.out" || { echo "serve.sh: sdt run did not count $HITS" >&2; exit 1; }
done
per_hit() { awk -v t="$(median <"$work/$1")" -v u="$(median <"$work/none")" -v n="$HITS" 'BEGIN {printf "%.0f", (t - u) / n}'; }
served_ns=$(per_hit served)
run_ns=$(per_hit run)

# ---- (3) peak RSS of sdt serve with 10 programs
mkdir "$work/ten"
programs=(
  "@hits = count();"
  "@by_key[arg0 % 100] = count();"
  "@sum = sum(arg1);"
  "@hist = hist(arg0);"
  "@lhist = lhist(arg0 % 1000, 0, 1000, 10);"
  "@stats = stats(arg1);"
  "@max[arg0 % 10] = max(arg2);"
  "@avg = avg(arg2);"
  "@by_comm[comm] = count();"
  "@last = arg0;"
)
for i in "${!programs[@]}"; do
  echo "$hit { ${programs[$i]} }" >"$work/ten/p$i.bt"
done
start_serving "$work/ten" 19438
"$loop" "$HITS" 2>/dev/null
curl -sf -o /dev/null http://127.0.0.1:19438/metrics
up=$(curl -sf http://127.0.0.1:19438/metrics | grep -c '^sdt_up{.*} 1$')
[[ $up == 10 ]] || { echo "serve.sh: $up of 10 programs up" >&2; exit 1; }
hwm_kb=$(awk '/^VmHWM/ {print $2}' "/proc/$server/status")
stop_server

echo
echo "sdt serve (one run; the machine is small and shared)"
echo
echo "| measure | value |"
echo "| --- | --- |"
echo "| scrape of 10,000 series ($((scrape_bytes / 1024)) KiB), wall ms, median of $SCRAPES | $scrape_ms |"
echo "| sdt's CPU per scrape of 10,000 series, ms (user + sys) | $scrape_cpu |"
echo "| count() per hit, served by sdt serve (ns) | $served_ns |"
echo "| count() per hit, sdt run (ns) | $run_ns |"
echo "| served over run | $(ratio "$served_ns" "$run_ns") |"
echo "| peak RSS of sdt serve, 10 programs (MB) | $(awk -v k="$hwm_kb" 'BEGIN {printf "%.1f", k / 1024}') |"
