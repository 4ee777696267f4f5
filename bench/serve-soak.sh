#!/usr/bin/env bash
# bench/serve-soak.sh: `sdt run --serve` and `sdt serve` side by side for a
# long time under one steady load, each scraped by Debian's Prometheus every
# second. Every minute, for each: RSS, open file descriptors, CPU used in
# that minute, and the median and largest scrape time Prometheus measured
# in that minute. All must stay flat. Not run in CI (an hour by default).
#
#   (1) bench/serve/paced.c fires sdtbench:hit RATE times a second;
#   (2) `sdt run --serve` runs one script on it with a counter, a histogram
#       and a map of KEYS keys;
#   (3) `sdt serve` runs the same three maps as three programs;
#   (4) prometheus scrapes both every second (jobs "run" and "serve");
#   (5) each minute, for each sdt: VmRSS, the count of /proc/PID/fd, the
#       CPU (utime + stime from /proc/PID/stat) used since the last sample
#       as a share of one core, and the median and maximum of Prometheus'
#       scrape_duration_seconds over the last minute; and the machine's
#       load average, since the machine may be shared.
#
# It ends with the samples, the change of each from the second sample to
# the last (the first minute fills the maps), the scrapes that failed, and
# the hits Prometheus saw against those fired. Knobs: SECONDS_TOTAL (3600),
# RATE (100000), KEYS (1000), SDT (a built sdt; skips the cargo build).
# Needs root, cc, curl, prometheus (scripts/install-deps).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
for tool in cc curl prometheus; do
  command -v "$tool" >/dev/null || { bash scripts/install-deps; break; }
done

SECONDS_TOTAL=${SECONDS_TOTAL:-3600}
RATE=${RATE:-100000}
KEYS=${KEYS:-1000}
if [[ -n ${SDT:-} ]]; then
  sdt=$SDT
else
  sdt=$root/target/release/sdt
  cargo build --release --quiet -p sdt-cli --target-dir "$root/target"
fi
run_port=19438 serve_port=19439 prom=127.0.0.1:19490
tick=$(getconf CLK_TCK)

work=$(mktemp -d /dev/shm/sdt-bench-soak.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf -- "$work"
}
trap cleanup EXIT
cc -O2 -Wall -o "$work/paced" bench/serve/paced.c
hit="usdt:$work/paced:sdtbench:hit"
mkdir "$work/programs"
echo "$hit { @hits = count(); }" >"$work/programs/hits.bt"
echo "$hit { @spread = hist(arg0 % 100000); }" >"$work/programs/spread.bt"
echo "$hit { @keys[arg0 % $KEYS] = count(); }" >"$work/programs/keys.bt"
echo "$hit { @hits = count(); @spread = hist(arg0 % 100000); @keys[arg0 % $KEYS] = count(); }" >"$work/run.bt"

"$sdt" serve --listen "127.0.0.1:$serve_port" "$work/programs" 2>"$work/serve.err" &
serve_pid=$!
pids+=("$serve_pid")
"$sdt" run --serve "127.0.0.1:$run_port" "$work/run.bt" >"$work/run.out" 2>"$work/run.err" &
run_pid=$!
pids+=("$run_pid")
until [[ $(grep -c ': up:' "$work/serve.err" || true) -ge 3 ]]; do sleep 0.1; done
until curl -sf "http://127.0.0.1:$run_port/metrics" | grep -q '^sdt_probes_attached.* [1-9]'; do
  kill -0 "$run_pid" || { cat "$work/run.err" >&2; exit 1; }
  sleep 0.1
done

cat >"$work/prometheus.yml" <<YML
global: { scrape_interval: 1s, scrape_timeout: 1s }
scrape_configs:
  - job_name: run
    static_configs: [{ targets: ["127.0.0.1:$run_port"] }]
  - job_name: serve
    static_configs: [{ targets: ["127.0.0.1:$serve_port"] }]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="$prom" >"$work/prometheus.log" 2>&1 &
pids+=("$!")
until curl -sf "http://$prom/-/ready" >/dev/null; do sleep 0.1; done

"$work/paced" "$RATE" "$SECONDS_TOTAL" >"$work/paced.out" &
paced_pid=$!
pids+=("$paced_pid")

# The one value of an instant query, or "-" when it has none.
query() {
  curl -sf --get "http://$prom/api/v1/query" --data-urlencode "query=$1" |
    sed -n 's/.*"value":\[[0-9.]*,"\([^"]*\)"\].*/\1/p' | grep . || echo -
}
# Seconds as milliseconds with one decimal, "-" left alone.
ms() { [[ $1 == - ]] && echo - || awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
# utime + stime of PID, in clock ticks (the fields after "pid (comm) ").
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

echo "serve-soak.sh: sdt $(git -C "$root" rev-parse --short HEAD), $SECONDS_TOTAL s at $RATE hits/s, $KEYS keys" >&2
{
  echo "| minute | load (1 min) | run RSS (KiB) | run fds | run CPU (%) | run scrape median / max (ms) | serve RSS (KiB) | serve fds | serve CPU (%) | serve scrape median / max (ms) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$work/samples"
declare -A last_ticks
for name in run serve; do
  pid_var=${name}_pid
  last_ticks[$name]=$(cpu_ticks "${!pid_var}")
done
last_time=$EPOCHREALTIME
minute=0
while kill -0 "$paced_pid" 2>/dev/null; do
  now=$EPOCHREALTIME
  row="| $minute | $(cut -d' ' -f1 /proc/loadavg)"
  for name in run serve; do
    pid_var=${name}_pid
    pid=${!pid_var}
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" | wc -l)
    ticks=$(cpu_ticks "$pid")
    cpu=$(awk -v t=$((ticks - last_ticks[$name])) -v hz="$tick" -v now="$now" -v then="$last_time" \
      'BEGIN { if (now - then >= 1) printf "%.1f", 100 * t / hz / (now - then); else print "-" }')
    last_ticks[$name]=$ticks
    median=$(ms "$(query "quantile_over_time(0.5, scrape_duration_seconds{job=\"$name\"}[1m])")")
    max=$(ms "$(query "max_over_time(scrape_duration_seconds{job=\"$name\"}[1m])")")
    row+=" | $rss | $fds | $cpu | $median / $max"
  done
  last_time=$now
  echo "$row |" >>"$work/samples"
  echo "serve-soak.sh: $row |" >&2
  for ((s = 0; s < 60; s++)); do
    kill -0 "$paced_pid" 2>/dev/null || break
    sleep 1
  done
  minute=$((minute + 1))
done
wait "$paced_pid" || true
fired=$(sed -n 's/^paced: fired=//p' "$work/paced.out")
sleep 3
echo
cat "$work/samples"
echo
# Columns of a row split on "|": 3 load, then per sdt RSS, fds, CPU, scrape.
awk -F'|' 'NR > 2 { n++; for (c = 4; c <= 11; c++) v[n, c] = $c }
  function scrape(s, i) { split(s, p, "/"); return p[i] + 0 }
  END {
    if (n < 2) exit
    for (c = 4; c <= 8; c += 4) {
      printf "%s after the first minute: RSS %+d KiB, fds %+d, CPU %+.1f points, scrape median %+.1f ms, max %+.1f ms\n",
        c == 4 ? "sdt run --serve" : "sdt serve", v[n, c] - v[2, c], v[n, c + 1] - v[2, c + 1],
        v[n, c + 2] - v[2, c + 2], scrape(v[n, c + 3], 1) - scrape(v[2, c + 3], 1),
        scrape(v[n, c + 3], 2) - scrape(v[2, c + 3], 2)
    }
  }' "$work/samples"
span=$((SECONDS_TOTAL + 120))s
for name in run serve; do
  echo "$name: hits fired $fired; sdt_hits_total in Prometheus $(query "sdt_hits_total{job=\"$name\"}");" \
    "scrapes $(query "count_over_time(up{job=\"$name\"}[$span])"), failed $(query "count_over_time(up{job=\"$name\"}[$span]) - sum_over_time(up{job=\"$name\"}[$span])")"
done
