# What the lanes .ci/lanes/arm64.sh and .ci/lanes/sid.sh both do, and how
# .ci/run sums a lane's log up; sourced by the three (bash).

# wait_for_wheel DIR GLOB LIMIT: the path of the first DIR/GLOB that reads
# as a whole zip (scripts/build-wheels copies it in while another lane
# waits), waiting up to LIMIT seconds, a line on stderr each 60 s; status 1
# and no path if none came.  PYTHON (default python3) reads the zip.
wait_for_wheel() {
  local dir=$1 glob=$2 limit=$3 waited=0 wheel
  while :; do
    # shellcheck disable=SC2086  # GLOB is a pattern
    wheel=$(ls "$dir"/$glob 2>/dev/null | head -n 1)
    if [ -n "$wheel" ] && "${PYTHON:-python3}" -c \
         'import sys, zipfile; sys.exit(zipfile.ZipFile(sys.argv[1]).testzip() is not None)' \
         "$wheel" 2>/dev/null; then
      echo "$wheel"
      return 0
    fi
    [ "$waited" -lt "$limit" ] || return 1
    [ $((waited % 60)) -ne 0 ] || [ "$waited" -eq 0 ] ||
      echo "still waiting for $glob in $dir (${waited}s)" >&2
    sleep 5; waited=$((waited + 5))
  done
}

# closing_lines LOG PATTERN N: LOG from its first line matching PATTERN (a
# sed address: no "/") to the end; without such a line, its last N lines.
closing_lines() {
  if grep -q "$2" "$1" 2>/dev/null; then
    sed -n "/$2/,\$p" "$1"
  else
    tail -n "$3" "$1" 2>/dev/null
  fi
}

# lane_closing LOG: a lane's failing tests (also those a VM's name labels,
# "[6.1] FAILED ..."), each pytest's closing line, its VM times, a VM the
# watchdog killed or that exited non-zero, a pytest run with no result, each
# test_subprocess run's verdict with its rerun of what failed under load
# (unittest's own "FAILED (failures=N)" line is left out: alone it reads as
# the run's verdict when the rerun passed), and the lane's own
# "LANE: N passed, N failed" line.
lane_closing() {
  grep -E '^((\[[^]]+\] )?(FAILED|ERROR) [^(]|(\[[^]]+\] )?=+ .*(passed|failed|error).* in [0-9.]+s.*=+$|LANE: |.*the VM ran [0-9]+ s|.*qemu used [0-9]+ s of CPU|.*it used [0-9]+ s of CPU|.*a hang; killing|.*: no pytest result$|VM [^ ]+: exit [0-9]+$|rdmaspawn conformance, |.*rerun alone: |.*engine spawns: )' "$1" |
    awk '!seen[$0]++'
}
