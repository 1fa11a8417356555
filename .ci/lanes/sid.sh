#!/usr/bin/env bash
# CI lane: CPython 3.14 and 3.15, Debian sid's, in a chroot.
#
#   CI_REPO=... CI_WORK=... [CI_WHEELHOUSE=...] bash .ci/lanes/sid.sh
#
# pyenv here has 3.9-3.13 only; Debian sid packages python3.14 and
# python3.15. The chroot also brings a second glibc (2.43) and rdma-core 65,
# so the engine and the doctor meet both.
#
# 1. mmdebstrap builds a sid chroot in CI_WORK (about 3 minutes; the
#    archive's sid Release file has expired, hence Check-Valid-Until=false).
# 2. Inside it, in a private mount namespace (unshare -m: /proc, /dev and
#    /sys are mounted there only, and vanish with it), entered through
#    sid-reset-signals.py (a backgrounded shell hands its children SIGINT
#    ignored), sid-inside.sh runs per version: a venv, `pip install
#    -e '.[test]'` of a scratch copy (as .ci/run does), the project's pytest selection
#    SID_PYTEST_ARGS (default: every test but the C-only ones and the
#    conformance run; .ci/run narrows each version's) with --durations=30,
#    and CPython's own test_subprocess under patch(). tests/test_wheel.py,
#    where selected, installs CI_WHEELHOUSE's x86_64 wheel.
# 3. Still inside: scripts/build-wheels with Debian's python3.15 (its
#    pyconfig.h includes a multiarch header; 3.15 lists the suffix
#    ".abi3-x86_64-linux-gnu.so" first). Outside: pyenv's oldest CPython
#    (3.9) runs tests/test_wheel.py on that wheel.
# 4. A summary: times, each run's closing lines, then "LANE: N passed, N failed"
#    (N counts the runs: a suite, a test_subprocess, the wheel build, ...).
#
# A hang is told from slowness by output: a run that prints nothing for
# SID_QUIET_LIMIT seconds (default 600) is killed. The exit status is
# non-zero if anything failed. Environment: CI_REPO, CI_WORK (required),
# CI_WHEELHOUSE, SID_PYTEST_ARGS (SID_PYTEST_ARGS_3_14 and so on, where set,
# for one version), SID_CONFORMANCE_ARGS (the conformance
# runner's options and patterns; default: every test), SID_VERSIONS (default "3.14 3.15"),
# SID_QUIET_LIMIT, SID_MIRROR (default http://deb.debian.org/debian). Each run's log is
# left in CI_WORK/out (V.suite.log, V.conformance.log, V.times; versions: the
# chroot's CPython, glibc and rdma-core).
#
# Another Debian release's chroot (.ci/lanes/debian.sh): SID_SUITE (default
# sid), SID_PYTHON_PACKAGES (default python3.V, python3.V-dev and
# python3.V-venv for each version) and SID_WHEELS=0 (no build-wheels inside,
# no wheel on 3.9: steps 3 and the wheel's run); SID_BUILD_ONLY=1 stops once
# today's tarball is in the cache (debian.sh builds its releases' at once).
set -uo pipefail
exec </dev/null

: "${CI_REPO:?CI_REPO must name the checkout}" "${CI_WORK:?CI_WORK must name a scratch directory}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lane_lib.sh"
suite=${SID_SUITE:-sid}
versions=${SID_VERSIONS:-"3.14 3.15"}
wheels=${SID_WHEELS:-1}
build_only=${SID_BUILD_ONLY:-0}
quiet_limit=${SID_QUIET_LIMIT:-600}
mirror=${SID_MIRROR:-http://deb.debian.org/debian}
export SID_PYTEST_ARGS="${SID_PYTEST_ARGS:-}" SID_CONFORMANCE_ARGS="${SID_CONFORMANCE_ARGS:-}"
root=$CI_WORK/$suite
start=$SECONDS
passed=0
failed=0
runner=""

say() { printf '=== sid.sh %s [%4ds] %s\n' "$suite" "$((SECONDS - start))" "$*"; }
result() {  # result NAME OK|FAILED
  if [ "$2" = OK ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  printf '%-44s %s\n' "$1" "$2" >>"$CI_WORK/results"
}

# Processes still running with the chroot as their root (a daemon a test
# left behind), by pid: they would keep its files busy.
chroot_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
  done
}

cleanup() {
  [ -n "$runner" ] && kill -- "-$runner" 2>/dev/null
  local pid
  for pid in $(chroot_pids); do kill -KILL "$pid" 2>/dev/null; done
  # The mounts lived in the runner's namespace only; this is a check.
  if findmnt -rn -o TARGET | grep -q "^$root/"; then
    say "mounts left under $root (not removing it):"; findmnt -rn -o TARGET | grep "^$root/"
  else
    rm -rf --one-file-system "$root"
  fi
  rm -rf "$CI_WORK/venv-oldest" "$CI_WORK/enter.sh"
}
trap cleanup EXIT

# run_watched LOG CMD...: CMD in its own session, its output into LOG and
# onto stdout; killed (status 124) after quiet_limit seconds without output.
run_watched() {
  local log=$1; shift
  : >"$log"
  setsid "$@" >"$log" 2>&1 &
  runner=$!
  tail -n +1 -f --pid="$runner" "$log" &
  local tailer=$! size=-1 quiet=0 now
  while kill -0 "$runner" 2>/dev/null; do
    sleep 10
    now=$(stat -c %s "$log")
    if [ "$now" = "$size" ]; then quiet=$((quiet + 10)); else quiet=0; size=$now; fi
    if [ "$quiet" -ge "$quiet_limit" ]; then
      say "no output for ${quiet}s: a hang; killing it"
      kill -- "-$runner" 2>/dev/null; sleep 5; kill -KILL -- "-$runner" 2>/dev/null
      wait "$runner"; runner=""; wait "$tailer"; return 124
    fi
  done
  wait "$runner"; local rc=$?
  runner=""
  wait "$tailer"
  return "$rc"
}

# --- 1. the chroot ---------------------------------------------------------
packages="${SID_PYTHON_PACKAGES:-$(for v in $versions; do echo "python$v python$v-dev python$v-venv"; done)}
  gcc libc6-dev libibverbs1 ibverbs-providers ca-certificates mount python3-minimal"
# CPython's test package (test_subprocess and test.support) is unpacked, not
# installed: its postinst byte-compiles its 2000-odd modules, minutes of the
# lane on a busy machine, for the one test module the lane imports.
testsuites=$(for v in $versions; do echo "libpython$v-testsuite"; done)
# Built as a tarball, kept for the day under the cache (a rerun unpacks it in
# seconds; a fresh CI machine builds it); older ones are removed.
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rdmaspawn
key=$(echo "$packages $testsuites $mirror" | md5sum | cut -c1-8)
tarball=$cache/$suite-$(date -u +%Y%m%d)-$key.tar
mkdir -p "$cache" "$root"
find "$cache" -maxdepth 1 -name "$suite-*.tar" ! -name "$(basename "$tarball")" -delete
t0=$SECONDS
if [ -s "$tarball" ]; then
  say "unpacking today's $suite chroot from $tarball"
else
  say "mmdebstrap $suite into $tarball"
fi
# Not niced: the chroot is the start of CI's longest lane. No fsync per file
# (force-unsafe-io): a throwaway tree needs no crash safety.
if { [ -s "$tarball" ] || { mmdebstrap --variant=apt --format=tar --quiet \
       --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Languages "none"' \
       --dpkgopt='force-unsafe-io' \
       --customize-hook="chroot \"\$1\" sh -ec 'cd /tmp && apt-get download -q $(echo $testsuites) && for d in *.deb; do dpkg-deb -x \$d /; done && rm -f *.deb'" \
       --include="$(echo $packages | tr ' ' ',')" "$suite" "$tarball.part" "$mirror" \
       >"$CI_WORK/mmdebstrap.log" 2>&1 && mv "$tarball.part" "$tarball"; }; } \
   && { [ "$build_only" = 1 ] || tar -C "$root" -xf "$tarball"; }; then
  result "$suite chroot ($((SECONDS - t0))s)" OK
else
  rm -f "$tarball.part"
  tail -n 30 "$CI_WORK/mmdebstrap.log"; result "$suite chroot" FAILED
  cat "$CI_WORK/results"; echo "LANE: $passed passed, $failed failed"; exit 1
fi
if [ "$build_only" = 1 ]; then say "$tarball ready in $((SECONDS - t0))s"; exit 0; fi
say "chroot built in $((SECONDS - t0))s: $(chroot "$root" dpkg-query -W -f '${Package} ${Version}, ' \
  $(for v in $versions; do echo "python$v"; done) libc6 libibverbs1)"
# What ran where, for the record (.ci/lanes/debian_table.py): "python3.V
# 3.V.N" per version, then glibc's and rdma-core's Debian versions.
{ for v in $versions; do
    echo "python$v $(chroot "$root" "python$v" -c 'import platform; print(platform.python_version())')"
  done
  chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' libc6 libibverbs1; } >"$CI_WORK/versions"

# --- 2. the repository, the wheel, the runs inside -------------------------
mkdir -p "$root/lane/repo" "$root/lane/out"
tar -C "$CI_REPO" -cf - --exclude=./.git --exclude='*.so' --exclude='*.o' \
  --exclude=./build --exclude=./dist --exclude=./wheelhouse --exclude='*.egg-info' \
  --exclude='./.venv*' --exclude=__pycache__ --exclude=.pytest_cache . | tar -C "$root/lane/repo" -xf -
cp "$here/sid-inside.sh" "$here/sid-reset-signals.py" "$root/lane/"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# pip inside trusts what pip outside trusts (a proxy's CA, where there is one).
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/lane/ca.crt"
wheel_env=""
if [ -n "${CI_WHEELHOUSE:-}" ]; then
  say "waiting for the x86_64 wheel in $CI_WHEELHOUSE"
  whl=$(wait_for_wheel "$CI_WHEELHOUSE" 'rdmaspawn-*-manylinux_*_x86_64.whl' 1800)
  if [ -n "$whl" ]; then
    mkdir -p "$root/lane/wheelhouse" && cp "$whl" "$root/lane/wheelhouse/"
    wheel_env="RDMASPAWN_WHEEL=/lane/wheelhouse/$(basename "$whl")"
  else
    say "no wheel in CI_WHEELHOUSE after 1800s: tests/test_wheel.py builds its own"
  fi
fi

# Per-version selections (SID_PYTEST_ARGS_3_14 for 3.14, ...) go in too.
per_version=""
for v in $versions; do
  name=SID_PYTEST_ARGS_${v//./_}
  [ -z "${!name:-}" ] || per_version+=" $name=\"\$$name\""
  export "${name?}"
done
# In a private mount namespace: nothing mounted here outlives it.
cat >"$CI_WORK/enter.sh" <<EOF
set -e
# The root a mount point of its own: unshare(1) inside (tests/test_demo.py)
# can then make its mounts private.
mount --bind '$root' '$root'
mount -t proc proc '$root/proc'
mount --rbind /dev '$root/dev'
mount --rbind -o ro /sys '$root/sys'
mount -t tmpfs tmpfs '$root/tmp'
exec chroot '$root' /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \\
  LANG=C.UTF-8 PIP_CERT=/lane/ca.crt SSL_CERT_FILE=/lane/ca.crt \\
  SID_PYTEST_ARGS="\$SID_PYTEST_ARGS" SID_CONFORMANCE_ARGS="\${SID_CONFORMANCE_ARGS:-}" SID_WHEELS=$wheels \\
  $per_version $wheel_env \\
  /usr/bin/python${versions%% *} /lane/sid-reset-signals.py /bin/bash /lane/sid-inside.sh $versions
EOF
say "inside the chroot (unshare -m): $versions"
run_watched "$CI_WORK/inside.log" unshare -m --propagation private /bin/sh "$CI_WORK/enter.sh"
inside_rc=$?
# The logs (with --durations=30) and the wheels, out of the chroot before it goes.
rm -rf "$CI_WORK/out" && cp -r "$root/lane/out" "$CI_WORK/out"
[ "$inside_rc" = 124 ] && say "the run inside was killed as hung"

# "CPython 3.14" in sid, "bookworm: CPython 3.11" in another release.
tag=CPython; [ "$suite" = sid ] || tag="$suite: CPython"
for v in $versions; do
  times=$root/lane/out/$v.times
  get() { awk -v k="$1" '$1 == k {print $2}' "$times" 2>/dev/null; }
  [ "$(get suite_rc)" = 0 ] && ok=OK || ok=FAILED
  result "$tag $v: suite ($(get suite)s)" "$ok"
  [ "$(get conformance_rc)" = 0 ] && ok=OK || ok=FAILED
  result "$tag $v: test_subprocess patched ($(get conformance)s)" "$ok"
done

# --- 3. the wheel a 3.15 built, on the oldest CPython ------------------------
[ "$wheels" = 1 ] && {
built=$(ls "$root"/lane/out/wheels/rdmaspawn-*-manylinux_*_x86_64.whl 2>/dev/null | head -n 1)
if [ -n "$built" ] && grep -q "build-wheels 0" "$root/lane/out/wheels.rc" 2>/dev/null; then
  result "build-wheels with Debian's python${versions##* }" OK
  cp "$built" "$CI_WORK/"
  built=$CI_WORK/$(basename "$built")
else
  result "build-wheels with Debian's python${versions##* }" FAILED
  built=""
fi
oldest=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.9.* 2>/dev/null | sort -V | tail -n 1)
if [ -n "$built" ] && [ -n "$oldest" ]; then
  say "tests/test_wheel.py on $oldest with $(basename "$built")"
  "$oldest/bin/python" -m venv "$CI_WORK/venv-oldest" \
    && "$CI_WORK/venv-oldest/bin/python" -m pip install -q --disable-pip-version-check pytest \
    && (cd "$root/lane/repo" && RDMASPAWN_WHEEL="$built" \
        run_watched "$CI_WORK/oldest.log" "$CI_WORK/venv-oldest/bin/python" -m pytest \
        -p no:cacheprovider -q tests/test_wheel.py) \
    && ok=OK || ok=FAILED
  result "CPython $(basename "$oldest"): a 3.15-built wheel" "$ok"
else
  [ -z "$oldest" ] && say "no pyenv CPython 3.9 under ${PYENV_ROOT:-$HOME/.pyenv}"
  result "CPython 3.9: a 3.15-built wheel (not run)" FAILED
fi
}

# --- 4. summary ----------------------------------------------------------------
echo
say "summary ($((SECONDS - start))s in all)"
cat "$CI_WORK/results"
for v in $versions; do
  echo "--- $tag $v: suite"
  closing_lines "$root/lane/out/$v.suite.log" '= short test summary info =' 1
  echo "--- $tag $v: test_subprocess under patch()"
  closing_lines "$root/lane/out/$v.conformance.log" '^rdmaspawn conformance' 5
done
[ -f "$CI_WORK/oldest.log" ] && { echo "--- the 3.15-built wheel on 3.9"; tail -n 1 "$CI_WORK/oldest.log"; }
echo "LANE: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$inside_rc" = 0 ]
