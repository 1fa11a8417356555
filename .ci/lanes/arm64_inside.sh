#!/bin/sh
# The arm64 lane's work inside the VM: /init (tests/c/arm64_init.c) runs this
# as /harness on Debian's arm64 kernels, in the bookworm userland that
# .ci/lanes/arm64.sh packed with the aarch64 wheel installed (no compiler
# here).  Every line that the host reads starts with "arm64-lane:"; the
# tests print one line each (-v), which is the host watchdog's sign of life.
# The kernel's command line names the boot: rdmaspawn.boot=cloud (the demo,
# the doctor, one pytest run) or rdmaspawn.boot=rxe (a soft-RoCE device on
# 16 KiB pages, one pytest run).
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root LANG=C.UTF-8 TMPDIR=/tmp
export RDMASPAWN_REQUIRE_VERBS=1
unset RDMASPAWN_CLONE
set -f  # the subset's test ids hold brackets
cd /lane || exit 1
failed=0

say() { echo "arm64-lane: $*"; echo "arm64-lane: [uptime $(cut -d' ' -f1 /proc/uptime)s]"; }
check() {  # check NAME COMMAND...: a step that must exit 0
  name=$1; shift
  say "step $name"
  if "$@"; then say "result $name passed"; else say "result $name FAILED ($?)"; failed=1; fi
}

# pytest_run NAME [VAR=VALUE...]: /lane/subset.NAME (one pytest argument a line).
pytest_run() {
  run=$1; shift
  say "pytest $run: $(tr '\n' ' ' </lane/subset.$run)"
  : >/tmp/pytest.log
  # shellcheck disable=SC2046
  env "$@" python3 -m pytest -v -p no:cacheprovider --durations=5 $(cat /lane/subset.$run) \
    >/tmp/pytest.log 2>&1 &
  pid=$!
  # The log goes to the console line by line: a file first, so that pytest
  # sees no terminal and a slow console never blocks it.
  tail -n +1 -f /tmp/pytest.log --pid=$pid
  wait $pid
  rc=$?
  say "pytest $run exit $rc"
  [ $rc -eq 0 ] || failed=1
}

page=$(python3 -c 'import os; print(os.sysconf("SC_PAGESIZE"))')  # no getconf here
say "kernel $(uname -r) $(uname -m), $(python3 --version), $(nproc) CPUs, $page-byte pages"
case $(cat /proc/cmdline) in
  *rdmaspawn.boot=rxe*)
    # What this boot is for: pages of another size than x86-64's, and rxe0.
    check "16 KiB pages" test "$page" = 16384
    rxe() {
      ip link add d0 type dummy && ip link set d0 up &&
        rdma link add rxe0 type rxe netdev d0 && rdma link show rxe0/1
    }
    check "soft-RoCE rxe0 over a dummy netdev" rxe
    # What libibverbs 44 marks on this kernel, for the record (not a step):
    # RDMA netlink's copy-on-fork, ibv_is_fork_initialized() before and
    # after ibv_fork_init(), and whether ibv_dontfork_range() then marks a
    # page "dc" (tests/realdevice/fork_marks.py).
    # (no sed in this userland: the shell prefixes each line)
    python3 tests/realdevice/fork_marks.py 2>&1 |
      while IFS= read -r line; do echo "arm64-lane: fork-marks: $line"; done
    # test_repair_integrity_rxe.py's huge page (32 MiB here, the default size).
    echo 2 >/proc/sys/vm/nr_hugepages
    mkdir -p /tmp/rxe-out
    pytest_run rxe RDMASPAWN_REQUIRE_RXE=1 RDMASPAWN_REQUIRE_PYVERBS=1 RDMASPAWN_RXE_OUT=/tmp/rxe-out
    # What the controls measured (tests/realdevice/record.py), one line each:
    # test_repair_integrity_rxe.py's control child, the marks, the bytes read.
    # (python globs: set -f is on here)
    python3 -c 'import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    print("arm64-lane: record:", os.path.basename(f), json.dumps(json.load(open(f))))' /tmp/rxe-out
    say "done, failed=$failed"
    exit $failed ;;
esac
check "rdmaspawn demo" python3 -m rdmaspawn demo
# The doctor's text, with the clone path it names checked (dash's case: no
# second interpreter): clone3 by default, clone under RDMASPAWN_CLONE=clone.
doctor() {  # doctor EXPECTED [VAR=VALUE]: rdmaspawn doctor names EXPECTED
  out=$(env ${2:-} rdmaspawn doctor); rc=$?
  echo "$out"
  case $out in *"rdmaspawn's clone path: $1 "*) return $rc ;; esac
  echo "arm64-lane: the doctor did not name the clone path $1"; return 1
}
check "rdmaspawn doctor" doctor clone3
check "rdmaspawn doctor (RDMASPAWN_CLONE=clone)" doctor clone RDMASPAWN_CLONE=clone

# /lane/subset.clone3 on the clone3 path (.ci/lanes/arm64.sh says where
# glibc's clone() on arm64 runs).
pytest_run clone3
say "done, failed=$failed"
exit $failed
