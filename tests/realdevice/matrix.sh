#!/usr/bin/env bash
# The rdma-core matrix on this kernel: run inside the soft-RoCE VM.
#
#   tests/realdevice/matrix.sh CACHE PYTHON OUT
#
# For each libibverbs of CACHE/verbs (fetch.sh), one matrix_probe.py (a cell
# per way of turning fork protection on), its JSON lines (with the suite
# added) appended to OUT.  The library is selected with
# LD_LIBRARY_PATH, its own rxe provider with RDMAV_DRIVERS (an absolute path:
# libibverbs dlopens it with its provider suffix, -rdmavNN.so), and for the
# releases that need a newer glibc than the machine's, through their own
# ld.so.  Exit status 1 if a probe failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${1:?usage: matrix.sh CACHE PYTHON OUT}
python=${2:?}
out=${3:?}
rc=0
for suite in bullseye bookworm trixie sid; do
  lib="$cache/verbs/$suite/usr/lib/x86_64-linux-gnu"
  [ -f "$lib/libibverbs.so.1" ] || { echo "matrix: no libibverbs for $suite"; rc=1; continue; }
  run=("$python")
  [ -x "$lib/ld-linux-x86-64.so.2" ] && run=("$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$python")
  probe_err=$(mktemp)
  # libibverbs warns on stderr about every provider of /etc/libibverbs.d it
  # cannot find: shown only when the probe fails.
  if env LD_LIBRARY_PATH="$lib" RDMAV_DRIVERS="$lib/libibverbs/librxe" \
       "${run[@]}" "$here/matrix_probe.py" 2>"$probe_err" >"$probe_err.out"; then
    sed "s/}\$/, \"suite\": \"$suite\"}/" "$probe_err.out" | tee -a "$out"
  else
    cat "$probe_err.out" "$probe_err"; echo "matrix: probe $suite failed"; rc=1
  fi
  rm -f "$probe_err" "$probe_err.out"
done
exit $rc
