#!/usr/bin/env bash
# CI lane: the Debian releases' own CPythons, each in a chroot of its release:
#   bullseye (Debian 11)  python3.9  (3.9.2),  glibc 2.31, rdma-core 33
#   bookworm (Debian 12)  python3.11 (3.11.2), glibc 2.36, rdma-core 44
#   trixie   (Debian 13)  python3.13 (3.13.5), glibc 2.41, rdma-core 56
#
#   CI_REPO=... CI_WORK=... bash .ci/lanes/debian.sh [--doc PAGE]
#
# Each release is .ci/lanes/sid.sh's chroot with SID_SUITE set (the tarball
# cached for the day under ~/.cache/rdmaspawn/ as sid's is): the release's
# python3, python3-venv and python3-dev, gcc, libibverbs1, ibverbs-providers
# and libpython3.V-testsuite; inside, a venv of its python3 (pip upgraded
# first where it is older than 21.3: bullseye's 20.3), the README's test
# command with .ci/run's CORE selection (CORE_TESTS and CORE_DESELECT, read
# from .ci/run) under RDMASPAWN_REQUIRE_VERBS=1, and CPython's own
# test_subprocess under patch(). No wheels (SID_WHEELS=0): the sid lane
# builds and tests them.
#
# The chroots' tarballs are built first, all at once (SID_BUILD_ONLY=1):
# downloads overlap unpacking (three builds, 77 CPU-s either way, took 43-44 s
# at once and 69-71 s one after another on a 2-core machine; measured twice
# each). The releases' tests then run one after another: on 2 cores they
# would only take turns. DEBIAN_SUITES narrows them ("bookworm:3.11"). Then the table of what ran
# where (.ci/lanes/debian_table.py), written between docs/install.md's
# markers with --doc PAGE, and "LANE: N passed, N failed" summed over the
# releases. Each release's log and results: CI_WORK/SUITE/.
set -uo pipefail
exec </dev/null

: "${CI_REPO:?CI_REPO must name the checkout}" "${CI_WORK:?CI_WORK must name a scratch directory}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suites=${DEBIAN_SUITES:-"bullseye:3.9 bookworm:3.11 trixie:3.13"}
doc=()
[ "${1:-}" = --doc ] && doc=(--doc "$2")
export RDMASPAWN_REQUIRE_VERBS=1
# .ci/run's CORE selection, from .ci/run: one place for it.
eval "$(sed -n '/^CORE_TESTS="/,/"$/p; /^CORE_DESELECT=/p' "$here/../run")"
: "${CORE_TESTS:?no CORE_TESTS in .ci/run}"
start=$SECONDS
passed=0
failed=0

unset CI_WHEELHOUSE  # nothing here installs a wheel
# sid SUITE VERSION DIR [VAR=VALUE...]: sid.sh for the release SUITE's python3.
sid() {
  mkdir -p "$3"
  env CI_WORK="$3" SID_SUITE="$1" SID_VERSIONS="$2" SID_WHEELS=0 \
    SID_PYTHON_PACKAGES="python3 python3-venv python3-dev" \
    SID_PYTEST_ARGS="$(echo $CORE_TESTS $CORE_DESELECT) -m 'not conformance'" \
    "${@:4}" bash "$here/sid.sh"
}
printf '=== debian.sh [%4ds] the chroots, at once: %s\n' "$((SECONDS - start))" "$suites"
for spec in $suites; do
  sid "${spec%%:*}" "${spec#*:}" "$CI_WORK/${spec%%:*}/build" SID_BUILD_ONLY=1 \
    >"$CI_WORK/${spec%%:*}.build.log" 2>&1 &
done
wait
# (A failed build's "LANE:" line is its release's; the next step says it again.)
for spec in $suites; do sed "s/^LANE: /${spec%%:*} build: /" "$CI_WORK/${spec%%:*}.build.log"; done

for spec in $suites; do
  suite=${spec%%:*} v=${spec#*:}
  printf '=== debian.sh [%4ds] %s: Debian'"'"'s python%s\n' "$((SECONDS - start))" "$suite" "$v"
  # sid.sh's own "LANE:" line becomes "SUITE: ...": the lane has one.
  sid "$suite" "$v" "$CI_WORK/$suite" 2>&1 | sed -u "s/^LANE: /$suite: /" | tee "$CI_WORK/$suite/lane.log"
  rc=${PIPESTATUS[0]}
  counts=$(sed -n "s/^$suite: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p" "$CI_WORK/$suite/lane.log")
  # No count, or a non-zero exit that no count says (a hang killed inside): one more.
  if [ -z "$counts" ]; then
    failed=$((failed + 1))
  else
    passed=$((passed + ${counts% *})) failed=$((failed + ${counts#* }))
    [ "$rc" = 0 ] || [ "${counts#* }" != 0 ] || failed=$((failed + 1))
  fi
done

echo
printf '=== debian.sh [%4ds] what ran where\n' "$((SECONDS - start))"
python3 "$here/debian_table.py" "$CI_WORK" ${doc[@]+"${doc[@]}"} || failed=$((failed + 1))
echo "LANE: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
