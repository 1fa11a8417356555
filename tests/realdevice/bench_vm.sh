#!/usr/bin/env bash
# The fork repair's cost on real registrations (issue 47): boot the soft-RoCE
# VM (rxe_vm.sh) on each kernel and run `python -m rdmaspawn.bench.repaircost
# --real` and `--vmas` there, the tables on the console.  Linux 6.1 reports
# copy-on-fork (the repair starts), 5.10 does not (it refuses: no repaired
# column there).
#
#   bash tests/realdevice/bench_vm.sh [ARGS for --real...]     (root: 9p export of /)
#
# Environment: BENCH_KERNELS (default "bookworm bullseye": 6.1, 5.10);
# BENCH_VMAS (default 1: also --vmas, with BENCH_VMAS_ARGS); BENCH_REAL2 (the
# arguments of a second --real, no --doc: e.g. "--placement malloc --variants
# marked,repaired,unmarked,swept --sizes 0,64,512"); RDMASPAWN_RXE_CACHE
# (fetch.sh's directory, default ~/.cache/rdmaspawn/rxe); BENCH_WORK (a
# scratch directory, default a new one under /tmp; its vm-SUITE/bench.log
# keeps each VM's output); CI_PYENV (default ~/.pyenv/versions: CPython 3.13,
# as the lane's 6.1 VM); BENCH_DOC (a page of the checkout, e.g.
# docs/real-device-tests.md: the 6.1 VM's run writes its two blocks there,
# --doc, copied back once the VM exits 0); RDMASPAWN_VM_MEM (default here
# 5120M: a GiB registered in each of three processes, and one fork child's
# copy of it) and RDMASPAWN_VM_SMP: rxe_vm.sh's.
# The wheel is built from this checkout's files (tracked and untracked, as
# the lane builds it), so a run measures the working tree.
set -uo pipefail
exec </dev/null
# One group, read whole before it runs: bash reads a script as it goes, and
# an edit to this file during a run (minutes) would land in the middle of it.
{
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${RDMASPAWN_RXE_CACHE:-$HOME/.cache/rdmaspawn/rxe}
pyenv=${CI_PYENV:-$HOME/.pyenv/versions}
work=${BENCH_WORK:-$(mktemp -d /tmp/rdmaspawn-bench.XXXXXX)}
kernels=${BENCH_KERNELS:-bookworm bullseye}
export RDMASPAWN_VM_MEM=${RDMASPAWN_VM_MEM:-5120M}
doc=${BENCH_DOC:-}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
mkdir -p "$work" && work=$(cd "$work" && pwd)
start=$SECONDS
say() { printf '[bench %4ds] %s\n' "$((SECONDS - start))" "$*"; }

say "fetch.sh into $cache"
bash "$here/fetch.sh" "$cache" >"$work/fetch.log" 2>&1 || { cat "$work/fetch.log"; exit 1; }
py=$(ls -d "$pyenv"/3.13.* 2>/dev/null | sort -V | tail -n 1)/bin/python
[ -x "$py" ] || { say "no CPython 3.13 under $pyenv"; exit 1; }
say "the wheel from $repo ($(git -C "$repo" describe --always --dirty)), a venv of $py"
rm -rf "$work/src" "$work/wheel" "$work/venv"
mkdir -p "$work/src" "$work/wheel"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
   xargs -0 cp --parents -t "$work/src" 2>/dev/null)
{ "$py" -m pip wheel -q --no-deps -w "$work/wheel" "$work/src" &&
  "$py" -m venv --without-pip "$work/venv" &&
  "$py" -m pip --python "$work/venv/bin/python" install -q "cffi>=1.15" "$work"/wheel/*.whl
} >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
mkdir -p "$work/tests"
cp -r "$here" "$work/tests/" && cp "$repo/tests/vm_watchdog.sh" "$work/tests/"

q() { [ $# -eq 0 ] || printf '%q ' "$@"; }  # no arguments: not one empty one
rc=0
for suite in $kernels; do
  job="$work/vm-$suite"
  mkdir -p "$job"
  printf '%s\n' /usr /etc "$pyenv" "$work" >"$job/binds"
  # The page's copy in the job directory: the VM cannot write the checkout.
  docarg=""
  if [ -n "$doc" ] && [ "$suite" = bookworm ]; then
    cp "$repo/$doc" "$job/page.md" && docarg="--doc $job/page.md"
  fi
  # The job: rxe0, then the benchmark in /tmp (a tmpfs: the VM's / is the
  # host's, read-only), its output also kept in the job directory.
  cat >"$job/job.sh" <<JOB
set -o pipefail
export PYTHONDONTWRITEBYTECODE=1
rdma link add rxe0 type rxe netdev d0 || { echo "bench: no rxe0"; exit 3; }
echo "bench: \$(rdma system show | head -n 1); \$(grep MemTotal /proc/meminfo)"
cd /tmp
rc=0
# The guest's own clock and CPU for each run (bash's time counts the children).
TIMEFORMAT="bench: %R s wall, %U s user, %S s sys"
time "$work/venv/bin/python" -m rdmaspawn.bench.repaircost --real $docarg $(q "$@") || rc=1
if [ -n "${BENCH_REAL2:-}" ]; then
  time "$work/venv/bin/python" -m rdmaspawn.bench.repaircost --real ${BENCH_REAL2:-} || rc=1
fi
if [ "${BENCH_VMAS:-1}" = 1 ]; then
  time "$work/venv/bin/python" -m rdmaspawn.bench.repaircost --vmas $docarg ${BENCH_VMAS_ARGS:-} || rc=1
fi
exit \$rc
JOB
  say "booting $suite (RDMASPAWN_VM_MEM=$RDMASPAWN_VM_MEM)"
  t0=$SECONDS
  bash "$work/tests/realdevice/rxe_vm.sh" "$cache" "$suite" "$job" 2>&1 | tee "$job/bench.log"
  vm_rc=${PIPESTATUS[0]}
  say "$suite: exit $vm_rc, $((SECONDS - t0)) s of wall clock ($(grep -o 'qemu used .*' "$job/bench.log"))"
  [ "$vm_rc" -eq 0 ] || rc=1
  if [ -n "$docarg" ] && [ "$vm_rc" -eq 0 ]; then
    cp "$job/page.md" "$repo/$doc" && say "wrote the blocks into $doc"
  fi
done
exit $rc
}
