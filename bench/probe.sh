#!/usr/bin/env bash
# The sdt crate (compile-time probes, and run-time ones from sdt::dynamic)
# against a C <sys/sdt.h> probe and the `probe` crate, in one run, disabled
# and enabled. Needs root, bpftrace, cc and <sys/sdt.h>.
#
#   bash bench/probe.sh          # REPS=5 runs of each, the best one counts
#
# Disabled: ns per iteration of a loop whose probe has an expensive argument
# (about a hundred multiplications), against the same loop without a probe.
# Every implementation skips the argument while disabled: sdt by design, C
# through its semaphore (as `dtrace -h` headers do), the run-time probe
# through `enabled()`, the probe crate through `probe_lazy!`.
#
# Enabled: ns per hit while bpftrace 0.17 runs `count()` on the probe:
# (traced - untraced) / hits, with a cheap argument. bpftrace raises
# semaphores only for the process it is given with -p, so each program
# waits until its probe is enabled before it starts its clock.
#
# Costs are measured in the thread's CPU time (user + system), which other
# load on the machine inflates far less than wall-clock time; wall-clock
# figures are printed too.
set -euo pipefail
cd "$(dirname "$0")/.."

reps=${REPS:-5}
n_disabled=${N_DISABLED:-200000000}
n_enabled=${N_ENABLED:-1000000}
target=${CARGO_TARGET_DIR:-$PWD/target}/bench-probe

cargo build --quiet --release --manifest-path bench/probe/Cargo.toml --target-dir "$target"
cargo build --quiet --release -p sdt-cli
sdt=${CARGO_TARGET_DIR:-$PWD/target}/release/sdt
cc -O2 -Wall -o "$target/bench-c" bench/probe/c/bench.c
rust=$target/release/sdt-bench-probe
c=$target/bench-c

# best CMD...: runs CMD $reps times, prints the "wall cpu" line of the run
# with the least CPU time.
best() {
  for _ in $(seq "$reps"); do "$@"; done | sort -g -k2 | head -1
}

# runtime_path PID NAME: the path of the run-time object of process PID
# that holds bench:NAME, as `sdt list -p` prints it (/proc/PID/fd/N).
runtime_path() {
  local path
  for _ in $(seq 1000); do
    path=$("$sdt" list -p "$1" "bench:$2" 2>/dev/null | awk '{ print $1; exit }')
    [[ -n $path ]] && { echo "$path"; return; }
    sleep 0.01
  done
  echo "no run-time probe bench:$2 in process $1" >&2
  exit 1
}

# traced BIN PROBES CMD...: runs CMD (which waits for its probe) under
# `bpftrace -p`, counting hits of the probe in PROBES' first word; prints
# "wall cpu hits". A probe written @NAME is a run-time probe: in the
# object `sdt list -p` names, not in BIN.
traced() {
  local bin=$1 probes=$2 script='' out path name
  shift 2
  out=$(mktemp)
  "$@" --wait >"$out" &
  local pid=$!
  for probe in $probes; do
    name=${probe#@}
    path=$bin
    [[ $probe == @* ]] && path=$(runtime_path "$pid" "$name")
    script+="usdt:$path:bench:$name { @[\"$name\"] = count(); } "
  done
  local counts
  counts=$(bpftrace -p "$pid" -e "$script" 2>/dev/null)
  wait "$pid"
  local first=${probes%% *}
  first=${first#@}
  echo "$(cat "$out") $(awk -v p="@[$first]:" '$1 == p { print $2 }' <<<"$counts")"
  rm -f "$out"
}

# sdt_traced BIN PROBES CMD...: like `traced`, with `sdt trace -p` writing
# every event to a file on tmpfs; prints "wall cpu hits". A run-time probe
# (@NAME) is found among the process's objects.
sdt_traced() {
  local bin=$1 probes=$2 specs=() out events
  shift 2
  out=$(mktemp)
  events=$(mktemp -p /dev/shm)
  for probe in $probes; do
    if [[ $probe == @* ]]; then specs+=("bench:${probe#@}"); else specs+=("$bin:bench:$probe"); fi
  done
  "$@" --wait >"$out" &
  local pid=$!
  "$sdt" trace -p "$pid" -o "$events" "${specs[@]}" 2>/dev/null
  wait "$pid"
  local first=${probes%% *}
  first=${first#@}
  echo "$(cat "$out") $(grep -c " bench:$first" "$events" || true)"
  rm -f "$out" "$events"
}

# best_traced BIN PROBES CMD...: the best of $reps traced runs.
best_traced() {
  for _ in $(seq "$reps"); do traced "$@"; done | sort -g -k2 | head -1
}
best_sdt_traced() {
  for _ in $(seq "$reps"); do sdt_traced "$@"; done | sort -g -k2 | head -1
}

field() { awk -v i="$2" '{ print $i }' <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "# Probe cost: sdt crate vs <sys/sdt.h> vs probe crate"
echo
echo "kernel $(uname -r), $(bpftrace --version), $reps runs each, best run counts"
echo
echo "## Disabled, expensive argument, $n_disabled iterations (ns/iteration)"
echo
printf '| %-26s | %8s | %8s | %14s |\n' loop cpu wall "cpu - no probe"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..28})" ---------- ---------- ----------------
declare -A disabled
for row in "Rust, no probe|$rust none" "sdt crate|$rust sdt" "run-time (sdt::dynamic)|$rust dynamic" \
           "probe crate (probe_lazy!)|$rust probe" "C, no probe|$c none" "C <sys/sdt.h> + semaphore|$c sdt"; do
  label=${row%%|*}
  read -r -a cmd <<<"${row#*|}"
  disabled[$label]=$(best "${cmd[@]}" expensive "$n_disabled")
done
for label in "Rust, no probe" "sdt crate" "run-time (sdt::dynamic)" "probe crate (probe_lazy!)" "C, no probe" \
             "C <sys/sdt.h> + semaphore"; do
  base="Rust, no probe"
  [[ $label == C* ]] && base="C, no probe"
  r=${disabled[$label]}
  delta=$(awk -v a="$(field "$r" 2)" -v b="$(field "${disabled[$base]}" 2)" 'BEGIN { printf "%+.3f", a - b }')
  printf '| %-26s | %8s | %8s | %14s |\n' "$label" "$(field "$r" 2)" "$(field "$r" 1)" "$delta"
done

# enabled TITLE RUNNER: the enabled table, with RUNNER (best_traced or
# best_sdt_traced) running each traced case.
enabled() {
  local title=$1 runner=$2
  echo
  echo "## Enabled, traced by $title, $n_enabled hits (ns/hit)"
  echo
  printf '| %-26s | %9s | %9s | %11s | %12s | %8s | %10s |\n' probe untraced traced "cpu per hit" "wall per hit" hits "cpu vs C"
  printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..28})" ----------- ----------- ------------- -------------- ---------- ------------
  declare -A per_hit
  local rows=("C <sys/sdt.h>|$c|hit|$c sdt"
        "sdt crate|$rust|sdt_cheap ready|$rust sdt"
        "run-time (sdt::dynamic)|$rust|@dyn_cheap ready|$rust dynamic"
        "probe crate|$rust|probe_cheap ready|$rust probe")
  for row in "${rows[@]}"; do
    IFS='|' read -r label bin probes command <<<"$row"
    read -r -a cmd <<<"$command"
    untraced=$(best "${cmd[@]}" cheap "$n_enabled")
    traced_run=$("$runner" "$bin" "$probes" "${cmd[@]}" cheap "$n_enabled")
    hits=$(field "$traced_run" 3)
    if [[ $hits != "$n_enabled" ]]; then
      echo "$label: $title saw ${hits:-no} hits, expected $n_enabled" >&2
      exit 1
    fi
    cost=$(awk -v t="$(field "$traced_run" 2)" -v u="$(field "$untraced" 2)" -v n="$n_enabled" -v h="$hits" \
      'BEGIN { printf "%.1f", (t - u) * n / h }')
    wall=$(awk -v t="$(field "$traced_run" 1)" -v u="$(field "$untraced" 1)" 'BEGIN { printf "%.1f", t - u }')
    per_hit[$label]=$cost
    printf '| %-26s | %9s | %9s | %11s | %12s | %8s | %10s |\n' "$label" "$(field "$untraced" 2)" \
      "$(field "$traced_run" 2)" "$cost" "$wall" "$hits" "$(ratio "$cost" "${per_hit[C <sys/sdt.h>]}")"
  done
}

enabled "bpftrace count()" best_traced
enabled "sdt trace (every event written to tmpfs)" best_sdt_traced
