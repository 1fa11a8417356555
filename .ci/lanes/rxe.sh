#!/usr/bin/env bash
# CI lane: real RDMA.  A soft-RoCE device (rdma_rxe) in Debian's own kernels
# under qemu-system-x86_64 (TCG: no /dev/kvm), real registrations on it, and
# the rdma-core matrix (issue 19).
#
#   bash .ci/lanes/rxe.sh      with CI_REPO, CI_WORK, CI_PYENV (and CI_WHEELHOUSE)
#
# 1. At once: tests/realdevice/fetch.sh (the 6.1 and 5.10 kernels, busybox,
#    libibverbs 33.2/44.0/56.1/65.0: apt-get download with private lists),
#    and a venv per CPython (3.9 and 3.13: both fork paths of subprocess)
#    with pytest, then the x86_64 wheel from CI_WHEELHOUSE (polled for;
#    without CI_WHEELHOUSE a wheel built from a copy of CI_REPO).
# 2. Three VMs at once (tests/realdevice/rxe_vm.sh), the host's / read-only
#    over 9p, rxe0 over a dummy netdev in each (the list, and what each
#    runs: VMS and job() below).  Linux 6.1 (reports copy-on-fork) runs
#    tests/realdevice/test_rxe.py on CPython 3.13 beside the matrix of the
#    four libibverbs (matrix.sh), then test_torch_rxe.py on CPython 3.11
#    with torch (a DataLoader's fork workers after a real registration).
#    Linux 5.10 (predates it) runs test_rxe.py on CPython 3.9 beside the
#    matrix, then test_repair_integrity_rxe.py (the repair's refusal there).
#    Both hold malloc's registration alone (RDMASPAWN_RXE_KINDS); the arm64
#    lane's soft-RoCE boot holds all three kinds.
#    A second 6.1 VM runs, on Debian's /usr/bin/python3 in a venv that sees
#    python3-pyverbs, test_pyverbs_rxe.py (registrations made by rdma-core's
#    own bindings), test_repair_integrity_rxe.py (the fork repair's data
#    after a fork: a loopback queue pair's RDMA WRITE and SEND) and
#    test_ucx_rxe.py (Open MPI + UCX + mpi4py ranks on rxe0, with UCX's
#    defaults and with its purge on fork off: their spawns and their
#    doctor).  A VM is killed by tests/vm_watchdog.sh when its console has
#    been silent while qemu got 300 s of CPU (progress, not a total, tells
#    a hang from slowness; tests/realdevice/rxe_vm.sh says why 300).
# 3. On the host: tests/realdevice/test_matrix.py on both kernels' results,
#    which also checks docs/rdma-core-matrix.md against this run (the run's
#    own table is kept as $CI_WORK/rdma-core-matrix.md).
# The log ends with each pytest's closing line and "LANE: N passed, N failed";
# the exit status is non-zero on any failure.
#
# Needs (beyond .ci/run's APT_PACKAGES): qemu-system-x86 (installed here when
# missing); iproute2's rdma, cpio, the system's ibverbs-providers and
# python3-pyverbs (with python3-venv), openmpi-bin, libucx0 and
# python3-mpi4py are used in the VM.  RDMASPAWN_RXE_CACHE: reuse a fetch.sh directory (default: one
# in CI_WORK, so a run downloads everything itself).
set -uo pipefail
exec </dev/null

repo=${CI_REPO:?CI_REPO: the checkout}
work=${CI_WORK:?CI_WORK: an empty scratch directory}
pyenv=${CI_PYENV:-$HOME/.pyenv/versions}
wheelhouse=${CI_WHEELHOUSE:-}
cache=${RDMASPAWN_RXE_CACHE:-$work/cache}
MINORS="3.13 3.9"
WHEEL_WAIT=${RDMASPAWN_RXE_WHEEL_WAIT:-900}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 DEBIAN_FRONTEND=noninteractive
work=$(cd "$work" && pwd)
start=$SECONDS
say() { printf '[rxe %4ds] %s\n' "$((SECONDS - start))" "$*"; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT
trap "exit 143" TERM INT HUP

if ! command -v qemu-system-x86_64 >/dev/null; then
  say "installing qemu-system-x86"
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    qemu-system-x86 >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; exit 1; }
fi

# The set-up ahead of the rest in the CPU's queue (about 80 s of CPU: the
# fetch, the venvs, torch): the VMs are the longest part of CI and wait for
# all of it; beside a loaded CI's other jobs the fetch alone took 305 s for
# its 37 s of CPU.  The VMs themselves start at the lane's own priority.
say "fetching kernels, busybox and four libibverbs into $cache"
(renice -n -5 -p "$BASHPID" >/dev/null 2>&1; exec bash "$repo/tests/realdevice/fetch.sh" "$cache") \
  >"$work/fetch.log" 2>&1 &
fetch_pid=$!; pids+=("$fetch_pid")

newest() { ls -d "$pyenv/$1".* 2>/dev/null | sort -V | tail -n 1; }
# The venvs are made without pip, and one pip fills them all (pip --python
# runs its own code under the venv's interpreter): a venv's own pip, from
# ensurepip, cost 5-6 s of CPU each here (3.9: 10.9 s for venv and pytest
# with it, 5.7 s without).
pip_py="$(newest 3.13)/bin/python"
[ -x "$pip_py" ] || { say "no CPython 3.13 under $pyenv"; exit 1; }
pip_into() { "$pip_py" -m pip --python "$1/bin/python" install -q "${@:2}"; }
# The venvs with pytest and cffi at once, while the wheel is still on its way.
for m in $MINORS; do
  base=$(newest "$m")
  [ -n "$base" ] || { say "no CPython $m under $pyenv"; exit 1; }
  (
    renice -n -5 -p "$BASHPID" >/dev/null 2>&1
    "$base/bin/python" -m venv --without-pip "$work/venv-$m" &&
    pip_into "$work/venv-$m" pytest "cffi>=1.15"
  ) >"$work/venv-$m.log" 2>&1 &
  pids+=($!)
done
# CPython 3.11 with torch (the CPU wheel CI's torch run uses), for the 6.1
# VM's DataLoader job (test_torch_rxe.py).  torch without pip's bytecode
# (--no-compile): compiling all of it was 22 of the install's 32 CPU-s here.
# What the job imports gets its bytecode from a DataLoader run here instead
# (the VM can write none: PYTHONDONTWRITEBYTECODE, and / is read-only).
(
  renice -n -5 -p "$BASHPID" >/dev/null 2>&1
  "$(newest 3.11)/bin/python" -m venv --without-pip "$work/venv-torch" &&
  pip_into "$work/venv-torch" pytest "cffi>=1.15" &&
  pip_into "$work/venv-torch" --no-compile "torch==${TORCH_VERSION:-2.13.0}" &&
  env -u PYTHONDONTWRITEBYTECODE "$work/venv-torch/bin/python" -c 'import multiprocessing, torch
from torch.utils.data import DataLoader
assert sorted(int(x) for b in DataLoader([torch.tensor([i]) for i in range(8)], batch_size=4,
              num_workers=2, multiprocessing_context=multiprocessing.get_context("fork"))
              for x in b) == list(range(8))'
) >"$work/venv-torch.log" 2>&1 &
pids+=($!)
# Debian's own CPython, seeing Debian's python3-pyverbs: the wheel (abi3)
# goes in below as for the pyenv ones.
(
  renice -n -5 -p "$BASHPID" >/dev/null 2>&1
  /usr/bin/python3 -m venv --without-pip --system-site-packages "$work/venv-pyverbs" &&
  pip_into "$work/venv-pyverbs" pytest "cffi>=1.15" &&
  "$work/venv-pyverbs/bin/python" -c "import pyverbs.mr, mpi4py"
) >"$work/venv-pyverbs.log" 2>&1 &
pids+=($!)

# The wheel: CI's own x86_64 one, or one built here from a copy of the repo.
wheel=""
if [ -n "$wheelhouse" ]; then
  say "waiting for the x86_64 wheel in $wheelhouse"
  waited=0
  while :; do
    wheel=$(ls "$wheelhouse"/rdmaspawn-*-manylinux_2_28_x86_64.whl 2>/dev/null | head -n 1)
    [ -n "$wheel" ] && break
    [ "$waited" -ge "$WHEEL_WAIT" ] && { say "no wheel after ${WHEEL_WAIT}s"; exit 1; }
    [ $((waited % 60)) -eq 0 ] && say "still waiting for the wheel (${waited}s)"
    sleep 5; waited=$((waited + 5))
  done
else
  say "building a wheel from a copy of $repo"
  mkdir -p "$work/src" "$work/wheel"
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
     xargs -0 cp --parents -t "$work/src" 2>/dev/null)
  "$pip_py" -m pip wheel -q --no-deps -w "$work/wheel" "$work/src" \
    >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; exit 1; }
  wheel=$(ls "$work"/wheel/rdmaspawn-*.whl | head -n 1)
fi
say "wheel: $(basename "$wheel")"
fail_setup=0
for p in "${pids[@]}"; do wait "$p" || fail_setup=1; done
pids=()
for m in $MINORS pyverbs torch; do
  pip_into "$work/venv-$m" --no-deps "$wheel" >>"$work/venv-$m.log" 2>&1 || fail_setup=1
done
if [ $fail_setup -ne 0 ]; then
  cat "$work/fetch.log" "$work"/venv-*.log; say "setup failed"; exit 1
fi
say "fetched: $(tr '\n' ' ' <"$work/fetch.log")"
mkdir -p "$work/tests"
cp -r "$repo/tests/realdevice" "$work/tests/"
cp "$repo/tests/vm_watchdog.sh" "$work/tests/"  # rxe_vm.sh sources it from ../

# The VMs: NAME:SUITE, one job directory each (read-write in it); binds:
# what the VM sees of the host.  Three at once, not two: the 6.1 tests
# (test_rxe.py and the matrix, then the DataLoader) and the 6.1 stack
# (pyverbs, the repair's data, Open MPI + UCX) each took 7-9 minutes of a
# loaded CI in one VM, so the lane waited for the 6.1 VM alone for about 8
# minutes after the 5.10 one had finished; a boot costs under a minute.
VMS="6.1:bookworm 6.1-stack:bookworm 5.10:bullseye"
for vm in $VMS; do
  mkdir -p "$work/vm-${vm%%:*}"
  printf '%s\n' /usr /etc "$pyenv" "$work" "$(cd "$cache" && pwd)" >"$work/vm-${vm%%:*}/binds"
done
tests="$work/tests/realdevice"
# pytest_in VM VENV LOG TESTS [VAR=VALUE...]: a job's lines that run pytest
# on TESTS (realdevice/ files) with VENV's Python, its output in the VM's LOG.
pytest_in() {
  local vm=$1 venv=$2 log=$3 tests=$4; shift 4
  cat <<JOB
$* RDMASPAWN_RXE_OUT="$work/vm-$vm/out" "$work/venv-$venv/bin/python" -m pytest \\
  -p no:cacheprovider -v --durations=10 -o console_output_style=classic $tests 2>&1 |
  tee "$work/vm-$vm/$log" || rc=1
JOB
}
# job VM: the VM's job.  6.1 and 5.10: test_rxe.py (3.13, vfork in
# subprocess, on 6.1, which reports copy-on-fork; 3.9, fork in subprocess, on
# 5.10, which predates it) beside the matrix of the four libibverbs; then on
# 6.1 the DataLoader (CPython 3.11 with torch), on 5.10 the fork repair's
# test (there: its refusal) on Debian's CPython with pyverbs.  6.1-stack: on
# Debian's CPython with pyverbs, rdma-core's own registrations, the repair's
# data after a fork and Open MPI + UCX.
job() {
  cat <<JOB
set -o pipefail
export PYTHONDONTWRITEBYTECODE=1 RDMASPAWN_REQUIRE_RXE=1
rdma link add rxe0 type rxe netdev d0 || { echo "rxe-lane: no rxe0"; exit 3; }
echo "rxe-lane: \$(rdma link show rxe0/1)"
cd "$work/tests"
mkdir -p "$work/vm-$1/out"
rc=0
JOB
  case $1 in
    6.1|5.10)
      # The matrix beside the tests, in a mount namespace of its own where an
      # empty /etc/libibverbs.d leaves only the matrix's provider
      # (RDMAV_DRIVERS), not also the machine's librxe of its own rdma-core.
      cat <<JOB
unshare -m sh -c 'mount -t tmpfs none /etc/libibverbs.d && exec bash "\$0" "\$@"' \\
  "$tests/matrix.sh" "$cache" "$work/venv-3.13/bin/python" "$work/vm-$1/matrix.jsonl" &
matrix=\$!
JOB
      # malloc's registration alone on x86-64 (RDMASPAWN_RXE_KINDS): the
      # bytearray's and the page of its own are held by the arm64 lane's
      # soft-RoCE boot (Linux 6.12, 16 KiB pages), the other kernel that
      # reports copy-on-fork; each took this VM 21-26 s (pytest's durations).
      if [ "$1" = 6.1 ]; then
        pytest_in "$1" 3.13 pytest.log realdevice/test_rxe.py RDMASPAWN_RXE_KINDS=malloc
      else
        pytest_in "$1" 3.9 pytest.log realdevice/test_rxe.py RDMASPAWN_RXE_KINDS=malloc
      fi
      if [ "$1" = 6.1 ]; then
        pytest_in "$1" torch torch-pytest.log realdevice/test_torch_rxe.py RDMASPAWN_REQUIRE_TORCH=1
      else
        echo "echo 2 >/proc/sys/vm/nr_hugepages  # test_repair_integrity_rxe.py's huge page"
        pytest_in "$1" pyverbs pyverbs-pytest.log realdevice/test_repair_integrity_rxe.py \
          RDMASPAWN_REQUIRE_PYVERBS=1
      fi
      echo 'wait $matrix || rc=1' ;;
    6.1-stack)
      echo "echo 2 >/proc/sys/vm/nr_hugepages  # test_repair_integrity_rxe.py's huge page"
      pytest_in "$1" pyverbs pyverbs-pytest.log \
        "realdevice/test_pyverbs_rxe.py realdevice/test_repair_integrity_rxe.py realdevice/test_ucx_rxe.py" \
        RDMASPAWN_REQUIRE_PYVERBS=1 RDMASPAWN_REQUIRE_UCX=1 ;;
  esac
  echo 'exit $rc'
}
for vm in $VMS; do job "${vm%%:*}" >"$work/vm-${vm%%:*}/job.sh"; done

say "booting $VMS"
# Each VM's script in the background with its own pid (a process
# substitution labels its lines), so that cleanup can stop it, and its qemu.
declare -A vm_rc vm_pid
for vm in $VMS; do
  k=${vm%%:*}
  bash "$tests/rxe_vm.sh" "$cache" "${vm#*:}" "$work/vm-$k" > >(sed -u "s/^/[$k] /") 2>&1 &
  vm_pid[$k]=$!; pids+=("${vm_pid[$k]}")
done
for vm in $VMS; do k=${vm%%:*}; wait "${vm_pid[$k]}"; vm_rc[$k]=$?; done
pids=()
say "VMs done: $(for vm in $VMS; do printf '%s exit %s, ' "${vm%%:*}" "${vm_rc[${vm%%:*}]}"; done)"

say "the matrix: tests/realdevice/test_matrix.py"
"$work/venv-3.13/bin/python" "$tests/matrix_table.py" "$work"/vm-*/matrix.jsonl \
  >"$work/rdma-core-matrix.md" 2>"$work/table.log" || cat "$work/table.log"
(cd "$work/tests" && RDMASPAWN_REQUIRE_RXE=1 \
   RDMASPAWN_RXE_MATRIX="$work/vm-6.1/matrix.jsonl:$work/vm-5.10/matrix.jsonl" \
   RDMASPAWN_RXE_DOC="$repo/docs/rdma-core-matrix.md" \
   "$work/venv-3.13/bin/python" -m pytest -p no:cacheprovider -q realdevice/test_matrix.py \
   >"$work/matrix-pytest.log" 2>&1)
matrix_rc=$?
if [ $matrix_rc -ne 0 ]; then
  cat "$work/matrix-pytest.log"
  diff -u "$repo/docs/rdma-core-matrix.md" "$work/rdma-core-matrix.md" | head -n 80
fi

# The summary: each pytest's closing line, then the lane's own.
passed=0 failed=0
count() {  # count NAME LOG: print LOG's closing line, add up its counts
  local last
  last=$(grep -E '^(\[[0-9.]+\] )?=*.*(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$2" |
         tail -n 1 | sed 's/^\[[0-9.]*\] //')
  if [ -z "$last" ]; then echo "$1: no pytest result"; failed=$((failed + 1)); return; fi
  echo "$1: $last"
  local p f e
  p=$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$last" | grep -oE '[0-9]+' || echo 0)
  e=$(grep -oE '[0-9]+ errors?' <<<"$last" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p)); failed=$((failed + f + e))
}
echo
count "test_rxe.py on 3.13 (Linux 6.1)" "$work/vm-6.1/pytest.log"
count "test_rxe.py on 3.9 (Linux 5.10)" "$work/vm-5.10/pytest.log"
count "test_pyverbs_rxe.py, test_repair_integrity_rxe.py, test_ucx_rxe.py on Debian's 3.11 (Linux 6.1)" \
  "$work/vm-6.1-stack/pyverbs-pytest.log"
count "test_repair_integrity_rxe.py on Debian's 3.11 (Linux 5.10)" "$work/vm-5.10/pyverbs-pytest.log"
count "test_torch_rxe.py on 3.11 + torch (Linux 6.1)" "$work/vm-6.1/torch-pytest.log"
count "test_matrix.py (6.1 and 5.10)" "$work/matrix-pytest.log"
status=0
for vm in $VMS; do
  k=${vm%%:*}
  if [ "${vm_rc[$k]}" -ne 0 ]; then echo "VM $k: exit ${vm_rc[$k]}"; status=1; fi
done
[ $failed -eq 0 ] && [ $matrix_rc -eq 0 ] || status=1
say "done"
echo "LANE: $passed passed, $failed failed"
exit $status
