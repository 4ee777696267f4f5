#!/usr/bin/env bash
# The fast path of the sdt crate's probes (docs/fastpath.md), in one run:
#
# 1. Disabled: ns per iteration of a loop whose probe has an expensive
#    argument, for the sdt crate without and with its `fastpath` feature
#    and for C <sys/sdt.h> (bench/probe's programs), against no probe.
# 2. Enabled: ns of the program's CPU per hit of `acc:hit(u64, i32, &CStr)`
#    (tests/fixtures/fastpath), traced - untraced, under sdt run (count(),
#    hist(), a string key) and sdt trace -o FILE over the fast path, the
#    same under the kernel's path (SDT_FASTPATH=0), and bpftrace 0.17's
#    count(). The program fires in batches of 250 with a 1 ms sleep
#    after each (250,000 hits a second at most), so that the tracer
#    keeps up and every hit is counted; the script checks the counts.
#    Medians of REPS runs.
# 3. Losses: hits a second each thread sustains (a spinning pace), from 1
#    to 4 threads, under sdt run count(): hits counted and dropped.
#
#   bash bench/fastpath.sh      # REPS=5; needs root, bpftrace, cc, <sys/sdt.h>
set -euo pipefail
cd "$(dirname "$0")/.."

reps=${REPS:-5}
n_disabled=${N_DISABLED:-200000000}
n=${N_ENABLED:-250000}
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/bench-fastpath
mkdir -p "$work"

cargo build --quiet --release -p sdt-cli
cargo build --quiet --release --manifest-path tests/fixtures/fastpath/Cargo.toml --target-dir "$work/fixture"
cargo build --quiet --release --manifest-path bench/probe/Cargo.toml --target-dir "$work/probe"
cargo build --quiet --release --manifest-path bench/probe/Cargo.toml --target-dir "$work/probe-fast" --features fastpath
cc -O2 -Wall -o "$work/bench-c" bench/probe/c/bench.c
sdt=$target/release/sdt
fixture=$work/fixture/release/sdt-fastpath-fixture
rust=$work/probe/release/sdt-bench-probe
rust_fast=$work/probe-fast/release/sdt-bench-probe
c=$work/bench-c

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { for _ in $(seq "$reps"); do "$@"; done | sort -g -k2 | head -1; }
field() { awk -v i="$2" '{ print $i }' <<<"$1"; }

# bpftrace 0.17 needs tracefs: mounted in a namespace of its own.
with_tracefs() {
  unshare --mount --propagation private sh -c \
    '[ -e /sys/kernel/tracing/uprobe_events ] || mount -t tracefs nodev /sys/kernel/tracing || exit 99; exec "$@"' sh "$@"
}

echo "# The fast path: sdt crate probes delivered through shared memory"
echo
echo "kernel $(uname -r), $(bpftrace --version), $(nproc) CPUs; $reps runs each"
echo
echo "## Disabled, expensive argument, $n_disabled iterations (ns/iteration, best run)"
echo
printf '| %-32s | %8s | %14s |\n' loop cpu "cpu - no probe"
printf '| %s | %s | %s |\n' "$(printf -- '-%.0s' {1..32})" -------- --------------
declare -A disabled
rows=("Rust, no probe|$rust none" "sdt crate|$rust sdt" "sdt crate, fastpath feature|$rust_fast sdt"
      "C, no probe|$c none" "C <sys/sdt.h> + semaphore|$c sdt")
for row in "${rows[@]}"; do
  label=${row%%|*}
  read -r -a cmd <<<"${row#*|}"
  disabled[$label]=$(best "${cmd[@]}" expensive "$n_disabled")
done
for row in "${rows[@]}"; do
  label=${row%%|*}
  base="Rust, no probe"
  [[ $label == C* ]] && base="C, no probe"
  r=${disabled[$label]}
  delta=$(awk -v a="$(field "$r" 2)" -v b="$(field "${disabled[$base]}" 2)" 'BEGIN { printf "%+.3f", a - b }')
  printf '| %-32s | %8s | %14s |\n' "$label" "$(field "$r" 2)" "$delta"
done

bench_args=(bench "$n" 250 1000)
script_for() {
  case $1 in
    count) echo "usdt:$fixture:acc:hit { @ = count(); }" ;;
    hist) echo "usdt:$fixture:acc:hit { @ = hist(arg0); @n = count(); }" ;;
    string) echo "usdt:$fixture:acc:hit { @[str(arg2)] = count(); }" ;;
  esac
}

# One traced run; prints "cpu_ns hits lost". $1: sdt-fast, sdt-kernel,
# trace-fast, trace-kernel or bpftrace; $2: the script's kind.
traced_once() {
  local how=$1 kind=$2 out err
  out=$(mktemp) err=$(mktemp)
  case $how in
    sdt-fast | sdt-kernel)
      local env=()
      [[ $how == sdt-kernel ]] && env=(SDT_FASTPATH=0)
      env "${env[@]}" "$sdt" run -c "$fixture ${bench_args[*]} --wait" -e "$(script_for "$kind")" >"$out" 2>"$err"
      local hits
      hits=$(awk -v key="$([[ $kind == hist ]] && echo @n: || echo @:)" '$1 == key || $1 == "@[bench]:" { print $2 }' "$out")
      echo "$(head -1 "$out" | awk '{ print $1 }') ${hits:-0} $(grep -o '^sdt: [0-9]* hits of the fast path were dropped' "$err" | awk '{ print $2 }' || true)"
      ;;
    trace-fast | trace-kernel)
      local env=() events
      events=$(mktemp -p /dev/shm)
      [[ $how == trace-kernel ]] && env=(SDT_FASTPATH=0)
      env "${env[@]}" "$sdt" trace -c "$fixture ${bench_args[*]} --wait" -o "$events" "$fixture:acc:hit" >"$out" 2>"$err"
      echo "$(awk '{ print $1 }' "$out") $(wc -l <"$events") $(grep -o '[0-9]* lost' "$err" | awk '{ print $1 }')"
      rm -f "$events"
      ;;
    bpftrace)
      "$fixture" "${bench_args[@]}" --wait >"$out" &
      local pid=$!
      local counts
      counts=$(with_tracefs bpftrace -p "$pid" -e "usdt:$fixture:acc:hit { @ = count(); }" 2>/dev/null)
      wait "$pid"
      echo "$(awk '{ print $1 }' "$out") $(awk '$1 == "@:" { print $2 }' <<<"$counts")"
      ;;
  esac
  rm -f "$out" "$err"
}

untraced=$(for _ in $(seq "$reps"); do "$fixture" "${bench_args[@]}" | awk '{ print $1 }'; done | median)

echo
echo "## Enabled: the program's CPU per hit, $n hits in batches of 250 a millisecond (median of $reps)"
echo
echo "Untraced: $(awk -v u="$untraced" -v n="$n" 'BEGIN { printf "%.1f", u / n }') ns per iteration (two reads of the thread's CPU clock a batch included)."
echo
printf '| %-40s | %12s | %12s |\n' "traced by" "ns per hit" "hits seen"
printf '| %s | %s | %s |\n' "$(printf -- '-%.0s' {1..40})" ------------ ------------
declare -A cost
cases=("sdt run count(), fast path|sdt-fast count" "sdt run count(), kernel's path|sdt-kernel count"
       "sdt run hist(), fast path|sdt-fast hist" "sdt run hist(), kernel's path|sdt-kernel hist"
       "sdt run @[str(arg2)], fast path|sdt-fast string" "sdt run @[str(arg2)], kernel's path|sdt-kernel string"
       "sdt trace -o FILE, fast path|trace-fast -" "sdt trace -o FILE, kernel's path|trace-kernel -"
       "bpftrace 0.17 count()|bpftrace -")
for row in "${cases[@]}"; do
  label=${row%%|*}
  read -r how kind <<<"${row#*|}"
  runs=$(for _ in $(seq "$reps"); do traced_once "$how" "$kind"; done)
  cpu=$(awk '{ print $1 }' <<<"$runs" | median)
  hits=$(awk '{ print $2 }' <<<"$runs" | sort -n | head -1)
  # The warm-up hit before the clocks start is counted too.
  if [[ $hits -lt $n ]]; then
    echo "$label: saw $hits hits at least once, expected $n" >&2
  fi
  per=$(awk -v t="$cpu" -v u="$untraced" -v n="$n" 'BEGIN { printf "%.1f", (t - u) / n }')
  cost[$label]=$per
  printf '| %-40s | %12s | %12s |\n' "$label" "$per" "$hits"
done
# Ratios once both paths are known.
echo
for label in "sdt run count()" "sdt run hist()" "sdt run @[str(arg2)]" "sdt trace -o FILE"; do
  f=${cost["$label, fast path"]} k=${cost["$label, kernel's path"]}
  echo "- $label: $f ns over untraced on the fast path, $k on the kernel's path ($(awk -v f="$f" -v k="$k" 'BEGIN { printf "%.3f", f / k }') of it)"
done

echo
echo "## Losses at sustained rates (sdt run count(), the fast path)"
echo
printf '| %8s | %16s | %12s | %12s | %10s |\n' threads "hits/s a thread" fired counted dropped
printf '| %s | %s | %s | %s | %s |\n' -------- ---------------- ------------ ------------ ----------
for threads in 1 2 4; do
  for rate in 100000 300000 1000000; do
    per=$((rate / 2))
    input=$(mktemp)
    echo "pace $per $rate $threads" >"$input"
    out=$("$sdt" run -c "sh -c '$fixture < $input'" -e "usdt:$fixture:acc:hit { @ = count(); }" 2>&1)
    counted=$(awk '$1 == "@:" { print $2 }' <<<"$out")
    dropped=$(grep -o '^sdt: [0-9]* hits of the fast path were dropped' <<<"$out" | awk '{ print $2 }' || true)
    printf '| %8s | %16s | %12s | %12s | %10s |\n' "$threads" "$rate" "$((per * threads))" "${counted:-0}" "${dropped:-0}"
    rm -f "$input"
  done
done
