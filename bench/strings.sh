#!/usr/bin/env bash
# bench/strings.sh: what reading a string costs per hit, with reads that
# fault pages in (sdt's default where the kernel can: sleepable uprobe
# programs and the bpf_copy_from_user_str kfunc) against reads that do
# not (SDT_FAULTING_READS=0, sdt before it, and bpftrace 0.17), in one
# run, so that the ratios share the machine's state.
#
# The script is `@r[str(arg0)] = count()` on bench/strings/loop.c, which
# fires sdtbench:req(method, i) $HITS times, method "GET" for 7 hits in
# 10 and "POST" for 3, and times its own loop; per hit = (traced loop -
# untraced loop) / hits, median of $REPS rounds, each tracer in turn.
#   (1) resident: the strings' pages are in the program's page tables
#       (it read them first), the common case: what faulting reads cost
#       when there is nothing to fault in.
#   (2) never resident: each page is dropped from the page tables before
#       every hit (a minor fault for whoever reads it next; the untraced
#       loop pays for the madvise calls too): what a read that faults
#       costs, and who reads the strings at all.
# Each run's counts are checked: a tracer that delivers the wrong strings
# is reported, not timed as if it worked.
#
# Read the ratios, not the absolute numbers: the machine is small (2
# cores) and shared. Knobs: HITS (1000000), REPS (3). Needs root,
# bpftrace, cc and <sys/sdt.h> (scripts/install-deps installs them).
set -euo pipefail

root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/install-deps

HITS=${HITS:-1000000}
REPS=${REPS:-3}

sdt=$root/target/release/sdt
cargo build --release --quiet -p sdt-cli --target-dir "$root/target"

work=$(mktemp -d /dev/shm/sdt-bench-strings.XXXXXX)
trap 'rm -rf -- "$work"' EXIT
cc -O2 -Wall -o "$work/loop" bench/strings/loop.c
loop=$work/loop
script="usdt:$loop:sdtbench:req { @r[str(arg0)] = count(); }"

# run NAME CMD...: stdout to $work/NAME.out, stderr to $work/NAME.err.
run() {
  local name=$1
  shift
  if ! "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "strings.sh: run $name failed: $*" >&2
    cat "$work/$name.err" >&2
    exit 1
  fi
}
loop_ns() { sed -n 's/^sdtbench: hits=[0-9]* loop_ns=\([0-9]*\).*$/\1/p' "$work/$1.err"; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf (b > 0 ? "%.3g" : "-"), a / b}'; }
# What a run counted: `GET/POST/empty` from its @r lines.
counted() {
  awk '/^@r\[GET\]:/ {g = $2} /^@r\[POST\]:/ {p = $2} /^@r\[\]:/ {e = $2}
       END {printf "%d/%d/%d", g, p, e}' "$work/$1.out"
}
want_all="$((HITS / 10 * 7))/$((HITS / 10 * 3))/0"
want_none="0/0/$HITS"

echo "strings.sh: sdt $(git -C "$root" rev-parse --short HEAD), $(bpftrace --version), Linux $(uname -r), $(nproc) cores" >&2

declare -A per_hit got
for mode in resident zap; do
  arg=""
  if [[ $mode == zap ]]; then arg=zap; fi
  for ((r = 1; r <= REPS; r++)); do
    echo "strings.sh: $mode, round $r/$REPS" >&2
    run "$mode-none-$r" "$loop" "$HITS" $arg
    run "$mode-fault-$r" "$sdt" run -c "$loop $HITS $arg" -e "$script"
    run "$mode-nofault-$r" env SDT_FAULTING_READS=0 "$sdt" run -c "$loop $HITS $arg" -e "$script"
    run "$mode-bt-$r" bpftrace -c "$loop $HITS $arg" -e "$script"
  done
  for k in fault nofault bt; do
    t=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$mode-$k-$r"; done | median)
    u=$(for ((r = 1; r <= REPS; r++)); do loop_ns "$mode-none-$r"; done | median)
    per_hit[$mode-$k]=$(awk -v t="$t" -v u="$u" -v n="$HITS" 'BEGIN {printf "%.0f", (t - u) / n}')
    got[$mode-$k]=$(counted "$mode-$k-$REPS")
  done
done

check() { # check MODE KIND WANT: the strings a run delivered, as a verdict
  if [[ ${got[$1-$2]} == "$3" ]]; then echo "all"; else echo "${got[$1-$2]}"; fi
}

echo
echo "Reading a string per hit: sdt with faulting reads, without (SDT_FAULTING_READS=0), bpftrace 0.17"
echo "($HITS hits, median of $REPS rounds; GET/POST/empty counted in the last round)"
echo
echo "| pages | sdt, faulting (ns/hit) | sdt, not faulting | bpftrace 0.17 | faulting / not | sdt / bpftrace | strings read: sdt faulting, not, bpftrace |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for mode in resident zap; do
  label="resident"
  if [[ $mode == zap ]]; then label="never resident"; fi
  want=$want_all
  echo "| $label | ${per_hit[$mode-fault]} | ${per_hit[$mode-nofault]} | ${per_hit[$mode-bt]} | $(ratio "${per_hit[$mode-fault]}" "${per_hit[$mode-nofault]}") | $(ratio "${per_hit[$mode-fault]}" "${per_hit[$mode-bt]}") | $(check "$mode" fault "$want"), $(check "$mode" nofault "$want"), $(check "$mode" bt "$want") |"
done
echo
echo "(a count other than \"all\" is GET/POST/empty: $want_all is every string; $want_none is none read)"
