# The VM lanes' watchdog: tells a hung VM from a starved one (issue 27).
# Sourced (bash) by tests/realdevice/rxe_vm.sh, tests/c/arm64_vm.sh and
# .ci/lanes/arm64.sh; tests/test_vm_watchdog.py tests it with fake VMs.
#
#   vm_watch PID LOG CPU_SECONDS WALL_SECONDS [NAME]
#
# Waits while process PID runs.  Progress is LOG (the VM's console file)
# growing.  Silence is counted in the CPU time PID got since LOG last grew
# (user + system, fields 14 and 15 of /proc/PID/stat), not in wall-clock
# time: on a loaded machine a starved VM is slow, not hung, and gets little
# CPU.  A guest hung while idle gets little CPU too: WALL_SECONDS of silence
# catches it.  On either limit: one line on stderr that says which, SIGTERM
# to PID (SIGKILL 5 s later if it is still there) and status 124.  When PID
# exits by itself: status 0 (the caller reaps it with `wait`).
#
# VM_WATCH_POLL: seconds between looks (default 1; the tests use less).
# VM_WATCH_HOOK: a command run after each look (rxe_vm.sh prints the
# console's new lines with it); it is not timed.
# On return VM_WATCH_CPU holds the CPU seconds PID had at the last look: what
# the VM cost the machine, for the lanes' logs.

vm_watch() {
  local pid=$1 log=$2 cpu_limit=$3 wall_limit=$4 name=${5:-vm_watch}
  local poll=${VM_WATCH_POLL:-1} ticks stat size last_size=-1 cpu last_cpu=0 last=$SECONDS
  ticks=$(getconf CLK_TCK)
  VM_WATCH_CPU=0
  # Each look reads /proc with bash's own read and words: a look a second
  # per VM, for the whole of CI, in the lanes' 2 cores' CPU.
  while kill -0 "$pid" 2>/dev/null; do
    stat=""
    read -r stat <"/proc/$pid/stat" 2>/dev/null
    # The command name (field 2) may hold spaces: count from after its ")".
    # Fields from the state on (1: state, 12 and 13: utime, stime).
    stat=${stat##*) }
    case $stat in ""|Z*) break ;; esac  # gone, or exited and not yet reaped
    # shellcheck disable=SC2086  # split into the fields on purpose
    set -- $stat
    cpu=$(( ${12} + ${13} ))
    VM_WATCH_CPU=$((cpu / ticks))
    size=$(stat -c %s "$log" 2>/dev/null || echo 0)
    if [ "$size" != "$last_size" ]; then
      last_size=$size last_cpu=$cpu last=$SECONDS
    elif [ $(( (cpu - last_cpu) / ticks )) -ge "$cpu_limit" ] ||
         [ $((SECONDS - last)) -ge "$wall_limit" ]; then
      echo "$name: no output for $(( (cpu - last_cpu) / ticks ))s of the VM's CPU" \
           "($((SECONDS - last))s of wall clock; limits ${cpu_limit}s, ${wall_limit}s):" \
           "a hang; killing $pid" >&2
      kill "$pid" 2>/dev/null
      local i
      for i in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$pid" 2>/dev/null || return 124
        sleep 0.5
      done
      kill -KILL "$pid" 2>/dev/null
      return 124
    fi
    ${VM_WATCH_HOOK:-}
    sleep "$poll"
  done
  ${VM_WATCH_HOOK:-}
  return 0
}
