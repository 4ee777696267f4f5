#!/usr/bin/env bash
# Time to resolve one struct through a separate debug file: sdt types vs
# pahole, on libc's struct _IO_FILE (Debian libc6-dbg, found by build-id),
# or on FILE and NAME given as arguments.
set -euo pipefail
sdt=${SDT:-target/release/sdt}
file=${1:-/lib/x86_64-linux-gnu/libc.so.6}
name=${2:-_IO_FILE}
hyperfine -N --warmup 2 -r 20 \
  "$sdt types $file 'struct $name'" \
  "pahole -C $name $file"
