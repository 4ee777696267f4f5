#!/usr/bin/env bash
# bench/serve-soak.sh: `sdt serve` for a long time under a steady load,
# scraped by Debian's Prometheus every second; RSS and open file
# descriptors of sdt sampled every minute. Both must stay flat. Not run in
# CI (an hour by default).
#
#   (1) bench/serve/paced.c fires sdtbench:hit RATE times a second;
#   (2) sdt serve runs three programs on it (a counter, a histogram, a map
#       of 1,000 keys);
#   (3) prometheus scrapes sdt every second;
#   (4) each minute: sdt's VmRSS and its count of open descriptors.
#
# It ends with the samples, the change of each from the second sample to
# the last (the first minute fills the maps), and the hits Prometheus saw
# against those fired. Knobs: SECONDS_TOTAL (3600), RATE (100000). Needs
# root, cc, curl, prometheus (scripts/install-deps).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps

SECONDS_TOTAL=${SECONDS_TOTAL:-3600}
RATE=${RATE:-100000}
sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

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
echo "$hit { @keys[arg0 % 1000] = count(); }" >"$work/programs/keys.bt"

"$sdt" serve --listen 127.0.0.1:19439 "$work/programs" 2>"$work/serve.err" &
sdt_pid=$!
pids+=("$sdt_pid")
until [[ $(grep -c ': up:' "$work/serve.err" || true) -ge 3 ]]; do sleep 0.1; done

cat >"$work/prometheus.yml" <<YML
global: { scrape_interval: 1s }
scrape_configs:
  - job_name: sdt
    static_configs: [{ targets: ["127.0.0.1:19439"] }]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:19490 >"$work/prometheus.log" 2>&1 &
pids+=("$!")

"$work/paced" "$RATE" "$SECONDS_TOTAL" >"$work/paced.out" &
paced_pid=$!
pids+=("$paced_pid")

echo "serve-soak.sh: sdt $(git -C "$root" rev-parse --short HEAD), $SECONDS_TOTAL s at $RATE hits/s" >&2
echo "| minute | RSS (KiB) | open fds |" >"$work/samples"
echo "| --- | --- | --- |" >>"$work/samples"
minute=0
while kill -0 "$paced_pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$sdt_pid/status")
  fds=$(ls "/proc/$sdt_pid/fd" | wc -l)
  echo "| $minute | $rss | $fds |" >>"$work/samples"
  echo "serve-soak.sh: minute $minute: RSS $rss KiB, $fds fds" >&2
  for ((s = 0; s < 60; s++)); do
    kill -0 "$paced_pid" 2>/dev/null || break
    sleep 1
  done
  minute=$((minute + 1))
done
wait "$paced_pid" || true
fired=$(sed -n 's/^paced: fired=//p' "$work/paced.out")
sleep 3
seen=$(curl -sf 'http://127.0.0.1:19490/api/v1/query?query=sdt_hits_total' |
  sed -n 's/.*"value":\[[0-9.]*,"\([0-9]*\)"\].*/\1/p')
echo
cat "$work/samples"
echo
awk -F'|' 'NR > 2 {rss[++n] = $3; fds[n] = $4}
  END {if (n >= 2) printf "RSS change after the first minute: %+d KiB; fds: %+d\n", rss[n] - rss[2], fds[n] - fds[2]}' "$work/samples"
echo "hits fired: $fired; sdt_hits_total in Prometheus: ${seen:-none}"
