#!/usr/bin/env bash
# bench/tools.sh: what `sdt calls` costs a method-call-heavy program, and
# whether the tool adds anything on top of `sdt run` running the same
# program by hand.
#
# For Python 3.11 and Ruby, recursive fib(N) (bench/tools/fib.*), wall
# time from hyperfine, three ways:
#   - alone, with the runtime's method probes switched on as the tool
#     switches them on (a profile function for Python, a TracePoint for
#     Ruby), so that the slowdown shown is the tracing's, not the hook's;
#   - under `sdt run` with the program `sdt calls --print-program` prints,
#     keeping 128 bytes of each string as the tool does;
#   - under `sdt calls`;
#   - under `sdt calls -L`, which also pairs each return with its entry
#     in the kernel (a stack of open calls per thread) to time it.
# Slowdown = traced / alone. Knobs: N (25), RUNS (5). Needs root and
# hyperfine, python3.11, ruby (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps
cargo build --release -p sdt-cli >/dev/null 2>&1
sdt=$root/target/release/sdt
N=${N:-25}
RUNS=${RUNS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The hooks the tool installs through the environment (see
# crates/sdt-tools/src/runtimes.rs), installed the same way here.
mkdir -p "$work/py"
printf 'import sys, threading\nsys.setprofile(slice)\nthreading.setprofile(slice)\n' >"$work/py/sitecustomize.py"
printf '$sdt_tracepoint = TracePoint.new(:call, :return) {}\n$sdt_tracepoint.enable\n' >"$work/tp.rb"

declare -A cmd=(
  [python]="/usr/bin/python3.11 bench/tools/fib.py $N"
  [ruby]="ruby bench/tools/fib.rb $N"
)
declare -A hook=(
  [python]="PYTHONPATH=$work/py"
  [ruby]="RUBYOPT=-r$work/tp.rb"
)

printf '%-8s %12s %12s %12s %14s %10s %10s %12s\n' language alone_s "sdt run_s" "sdt calls_s" "sdt calls -L_s" run_x calls_x "calls -L_x"
for lang in python ruby; do
  "$sdt" calls -l "$lang" --print-program >"$work/$lang.bt"
  hyperfine -N --runs "$RUNS" --export-json "$work/$lang.json" \
    "env ${hook[$lang]} ${cmd[$lang]}" \
    "env ${hook[$lang]} BPFTRACE_STRLEN=128 $sdt run -q -c '${cmd[$lang]}' $work/$lang.bt" \
    "$sdt calls -c '${cmd[$lang]}'" \
    "$sdt calls -L -c '${cmd[$lang]}'" >/dev/null 2>&1
  python3 - "$work/$lang.json" "$lang" <<'PY'
import json, sys
r = [x["median"] for x in json.load(open(sys.argv[1]))["results"]]
print(f"{sys.argv[2]:<8} {r[0]:12.3f} {r[1]:12.3f} {r[2]:12.3f} {r[3]:14.3f} {r[1]/r[0]:10.2f} {r[2]/r[0]:10.2f} {r[3]/r[0]:12.2f}")
PY
done
