#!/usr/bin/env bash
# Time to resolve one struct through a separate debug file found by
# build-id: `sdt types` against pahole on the same struct.
#   bench/types.sh                  libjvm.so's JavaThread (Debian openjdk-17-dbg,
#                                   ~150 MB of DWARF), else libc's _IO_FILE (libc6-dbg)
#   bench/types.sh FILE NAME        any file and struct
set -euo pipefail
sdt=${SDT:-target/release/sdt}
jvm=/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so
if (($# == 2)); then
  file=$1 name=$2
elif [[ -e $jvm ]] && "$sdt" types "$jvm" 'struct JavaThread' >/dev/null 2>&1; then
  file=$jvm name=JavaThread
else
  file=/lib/x86_64-linux-gnu/libc.so.6 name=_IO_FILE
fi
runs=${RUNS:-3}
hyperfine -N --warmup 1 -r "$runs" \
  "$sdt types $file 'struct $name'" \
  "pahole -C $name $file"
