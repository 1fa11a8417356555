#!/bin/bash
# The part of .ci/lanes/sid.sh that runs inside the Debian sid chroot, as
#   /lane/sid-inside.sh VERSION...
# with the repository copied to /lane/repo and its results going to
# /lane/out/. For each CPython VERSION (Debian's python3.14, python3.15): a
# fresh venv, `pip install -e '.[test]'` of a scratch copy (as .ci/run does),
# the project's pytest selection ($SID_PYTEST_ARGS) and CPython's own
# test_subprocess under patch() (tests/conformance/run_stdlib_subprocess_tests.py).
#
# Leaves per version: out/V.suite.log, out/V.conformance.log, and
# out/V.times ("suite SECONDS", "conformance SECONDS" lines); then the
# newest VERSION builds the wheels into out/wheels (out/wheels.rc). The exit
# status is non-zero if any step of any version failed. SID_WHEELS=0: no wheels.
set -uo pipefail

# The selection, in shell words (eval'd: it holds a quoted -m expression).
: "${SID_PYTEST_ARGS:=tests -m 'not conformance' --ignore=tests/test_c_harness.py --ignore=tests/test_arm64_vm.py}"
out=/lane/out
mkdir -p "$out"
failed=0

say() { printf '=== sid [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

run_version() {
  local v=$1 src=/lane/src-$1 venv=/lane/venv-$1 t0 rc
  say "$v: venv and pip install -e '.[test]'"
  rm -rf "$src" "$venv"
  cp -a /lane/repo "$src" || return 1
  "python$v" -m venv "$venv" || return 1
  # A pip before 21.3 (bullseye's 20.3) cannot install a pyproject.toml
  # checkout editable (PEP 660): the venv's pip is upgraded first.
  if ! "$venv/bin/python" -c 'import sys, pip
sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (21, 3))'; then
    say "$v: pip $("$venv/bin/python" -m pip --version | cut -d' ' -f2) is too old: pip install --upgrade pip"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip || return 1
  fi
  (cd "$src" && "$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]') \
    || return 1

  # SID_PYTEST_ARGS_3_14 and so on: one version's own selection.
  local own=SID_PYTEST_ARGS_${v//./_}
  eval "set -- ${!own:-$SID_PYTEST_ARGS}"
  say "$v: python -m pytest $* --durations=30"
  t0=$(date +%s)
  (cd "$src" && RDMASPAWN_REQUIRE_VERBS=1 "$venv/bin/python" -m pytest "$@" --durations=30 \
    -p no:cacheprovider) 2>&1 | tee "$out/$v.suite.log"
  rc=${PIPESTATUS[0]}
  echo "suite $(( $(date +%s) - t0 ))" >>"$out/$v.times"

  say "$v: CPython's test_subprocess under rdmaspawn.patch()"
  t0=$(date +%s)
  # SID_CONFORMANCE_ARGS: the runner's options and test patterns (default: all).
  (cd "$src" && eval "\"$venv/bin/python\" -u tests/conformance/run_stdlib_subprocess_tests.py \
    ${SID_CONFORMANCE_ARGS:-}") 2>&1 \
    | tee "$out/$v.conformance.log"
  local crc=${PIPESTATUS[0]}
  echo "conformance $(( $(date +%s) - t0 ))" >>"$out/$v.times"
  echo "suite_rc $rc" >>"$out/$v.times"
  echo "conformance_rc $crc" >>"$out/$v.times"
  [ "$rc" -eq 0 ] && [ "$crc" -eq 0 ]
}

for v in "$@"; do
  : >"$out/$v.times"
  run_version "$v" || { failed=1; say "$v: FAILED"; }
done

[ "${SID_WHEELS:-1}" = 1 ] || exit "$failed"
# The newest builds the wheels (Debian's multiarch pyconfig.h, 3.15's abi3
# suffixes); sid.sh installs the x86_64 one on the oldest CPython.
newest=${*: -1}
say "scripts/build-wheels with python$newest"
(cd /lane/repo && PYTHON="python$newest" bash scripts/build-wheels --arch x86_64 "$out/wheels")
echo "build-wheels $?" >"$out/wheels.rc"
exit "$failed"
