#!/usr/bin/env bash
# CI lane: this run's aarch64 wheel on a real arm64 kernel (issue 21).
#
#   CI_REPO=... CI_WORK=... CI_WHEELHOUSE=... RDMASPAWN_ARM64_KERNEL=... \
#     bash .ci/lanes/arm64.sh
#
# 1. A Debian bookworm arm64 userland with python3 (3.11) and libibverbs:
#    mmdebstrap --variant=extract (no binfmt, no arm64 dpkg on the host),
#    stripped to what runs (docs, locales, the stdlib's tests out).
# 2. pytest and cffi's aarch64 wheel installed into it from PyPI by the
#    host's pip (--platform manylinux_2_28_aarch64 --python-version 3.11);
#    then, once scripts/build-wheels has put it in $CI_WHEELHOUSE, this run's
#    rdmaspawn-*-manylinux_2_28_aarch64.whl, into site-packages (so the
#    .pth hook is live) with its console script: no compiler in the VM.
# 3. The userland, the tests and .ci/lanes/arm64_inside.sh (as /harness)
#    packed as the initramfs of Debian's arm64 cloud kernel, booted under
#    qemu-system-aarch64 (TCG, 2 CPUs, 2 GiB) with tests/c/arm64_init.c as
#    /init.  Inside: rdmaspawn demo, doctor (also under
#    RDMASPAWN_CLONE=clone), and SUBSET below on the clone3() path.
# 4. The same initramfs on a second kernel, trixie's arm64-16k
#    (.ci/lanes/arm64_rxe_kernel.sh: 16 KiB pages, and rdma_rxe, which the
#    cloud kernel lacks; 1 CPU), whose modules /init loads: a soft-RoCE device rxe0
#    over a dummy netdev, then RXE_SUBSET: real registrations on it through
#    libibverbs and through Debian's python3-pyverbs, the doctor and every
#    spawn way beside them, and the planted hazard, on 16 KiB pages.
#
# A hang is told from slowness by progress (tests/vm_watchdog.sh): qemu is
# killed when the console has printed nothing while qemu got
# $RDMASPAWN_VM_SILENCE seconds of CPU per vCPU (default 120; pytest -v
# prints a line per test), or for $RDMASPAWN_VM_SILENCE_WALL seconds of wall
# clock (default 900: a guest hung while idle).  A VM starved by a loaded
# machine gets little CPU: it is slow, not hung.  Output: progress lines, the
# consoles, then each pytest's closing lines and "LANE: N passed, N failed"
# (N: tests of the three pytest runs plus the steps: demo, doctor, rxe0, the
# page size).  Exit status 0 only if all passed.
#
# Environment: CI_REPO, CI_WORK (scratch, removed at the end),
# CI_WHEELHOUSE, RDMASPAWN_ARM64_KERNEL (else tests/c/arm64_vm.sh
# --fetch-kernel fetches it); PYTHON, the host CPython whose pip installs
# into the userland (default: the newest pyenv CPython, else python3);
# RDMASPAWN_VM_CPU (default max,pauth-impdef=on: TCG's architected pointer
# authentication is several times slower); RDMASPAWN_WHEEL_WAIT (seconds to
# wait for the wheel, default 1200); RDMASPAWN_ARM64_BOOTS (default
# "cloud rxe": which of the two boots run).  Needs mmdebstrap,
# qemu-system-arm, cpio, xz-utils, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross.
set -uo pipefail

# What runs on arm64 (TCG runs a Python process several times slower than
# the host, so chosen tests, not whole modules).  SUBSET on the clone3()
# path: the engine (errors, pidfd), the drop-in fork_exec, patch(), the
# hazard, the declarative setup, the .pth hook, rdmaspawn run (with a
# multiprocessing Pool, which needs the VM's /dev/shm).  Each of these costs
# the VM 20-35 s beside a loaded CI.  glibc's clone() on arm64: the doctor
# under RDMASPAWN_CLONE=clone and test_clonepath.py's spawn here, the C
# harness's second pass on the same kernel (tests/test_arm64_vm.py), and
# the Python layer on that path on x86-64.  A second pytest run of the
# engine's tests with RDMASPAWN_CLONE=clone here (10 tests) took 101-134 s
# of the 2-vCPU VM and checked nothing those do not.
SUBSET="tests/test_errors.py::test_engine_reports_step_and_reaps
  tests/test_errors.py::test_engine_pidfd
  tests/test_pidfd.py::test_send_signal_goes_through_the_pidfd
  tests/test_pidfd.py::test_popen_has_a_pidfd_closed_when_reaped
  tests/test_forkexec.py::test_every_call_is_started_in_c_and_only_a_preexec_fn_in_python
  tests/test_forkexec.py::test_c_fork_exec_reports_a_failed_exec_as_cpythons_child_does
  tests/test_patch.py::test_patch_routes_through_the_engine_and_unpatch_restores
  tests/test_patch.py::test_module_is_a_drop_in_for_subprocess
  tests/test_hazard_spawn.py::test_every_rdmaspawn_path_survives[verbs]
  tests/test_declarative.py::test_setup_failure_is_an_oserror_naming_the_step
  tests/test_declarative.py::test_setup_runs_in_order_for_privileges
  tests/test_declarative.py::test_unrecognised_preexec_fn_still_refused_with_hazard
  tests/test_autostart.py::test_hook_is_installed_beside_the_package
  tests/test_autostart.py::test_on_applies_everything
  tests/test_autostart.py::test_minus_I_keeps_the_hook
  tests/test_run.py::test_every_child_survives_under_run[popen]
  tests/test_run.py::test_every_child_survives_under_run[pool]
  tests/test_run.py::test_console_script_and_environment
  tests/test_clonepath.py::test_variable_moves_spawns_to_clone
  tests/test_guard.py::test_forks_without_dontfork_memory_read_no_smaps
  tests/test_guard.py::test_a_refused_child_never_runs_the_program"
# On the soft-RoCE boot, on 16 KiB pages: libibverbs' own registrations
# (tests/realdevice, run as the rxe lane runs them on x86-64), pyverbs'
# (Debian's python3-pyverbs, for the userland's CPython 3.11), the hazard
# planted with madvise(), and what reads pages: the guard, the doctor,
# /proc's readers.  Not plant("verbs"): with rxe0 there, libibverbs 44
# learns that Linux 6.12 copies registered pages on fork and marks nothing
# for ibv_dontfork_range() (real registrations still are marked:
# test_rxe.py); hence the two tests deselected below, which hold one.
# test_repair_integrity_rxe.py: the fork repair's data on such a mark (a
# loopback RC queue pair's WRITE and SEND after the fork), with its control.
# Of the guard, the tests of what it reads and of its held fork (raw arm64
# system calls), not those of its wrappers, exports and warnings' wording;
# of the doctor and /proc's readers, the tests that read pages and mappings,
# not those of arguments, permissions, wording or parsing: those do not
# depend on the page size or the architecture and run on every x86-64
# CPython.
RXE_SUBSET="tests/realdevice/test_rxe.py
  tests/realdevice/test_pyverbs_rxe.py
  tests/realdevice/test_repair_integrity_rxe.py
  tests/test_hazard.py::test_fork_works_without_the_hazard
  tests/test_hazard.py::test_fork_child_segfaults[madvise]
  tests/test_hazard.py::test_arena_page_is_dontfork[madvise]
  tests/test_hazard_spawn.py::test_every_rdmaspawn_path_survives[madvise]
  tests/test_guard.py::test_raise_mode_refuses_every_fork_path
  tests/test_guard.py::test_warn_mode_warns_and_forks
  tests/test_guard.py::test_warn_mode_with_the_real_hazard_is_caught_in_raise_mode
  tests/test_guard.py::test_no_dontfork_memory_no_interference
  tests/test_guard.py::test_forks_without_dontfork_memory_read_no_smaps
  tests/test_guard.py::test_a_refused_child_never_runs_the_program
  tests/test_guard.py::test_a_fork_at_the_descriptor_limit_goes_ahead
  tests/test_guard.py::test_held_children_of_two_threads_exit_when_the_parent_dies
  tests/test_doctor_lone_page.py
  tests/test_doctor.py::test_clean_process_is_ok
  tests/test_doctor.py::test_planted_hazard_in_other_process_is_named
  tests/test_doctor.py::test_planted_hazard_in_self
  tests/test_doctor.py::test_shm_mapping_is_its_own_kind
  tests/test_doctor.py::test_every_protection_case
  tests/test_doctor.py::test_scan_reports_hazard_skips_clean_counts_vanished
  tests/test_doctor.py::test_all_cli_text_and_json_lines
  tests/test_procfs.py::test_all_mappings_of_self_are_sane
  tests/test_procfs.py::test_clean_process_has_no_dontfork
  tests/test_procfs.py::test_madvise_dontfork_is_found_exactly
  tests/test_procfs.py::test_is_dontfork_and_mapping_at
  tests/test_procfs.py::test_thread_heap_base
  tests/test_procfs.py::test_one_dontfork_among_1000_mappings
  tests/test_devicememo.py"
PACKAGES="python3,dash,coreutils,libibverbs1,ibverbs-providers,python3-pyverbs,iproute2"

repo=${CI_REPO:?} work=${CI_WORK:?} wheelhouse=${CI_WHEELHOUSE:?}
silence=${RDMASPAWN_VM_SILENCE:-120}
silence_wall=${RDMASPAWN_VM_SILENCE_WALL:-900}
. "$repo/tests/vm_watchdog.sh"
. "$repo/.ci/lanes/lane_lib.sh"
start=$SECONDS
say() { printf '[arm64 %4ds] %s\n' "$((SECONDS - start))" "$*"; }
die() { say "FAILED: $*"; echo "LANE: 0 passed, 1 failed"; exit 1; }
boot_pids=()
cleanup() {
  # Each boot's subshell kills its qemu as it exits.
  for p in "${boot_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work/root" "$work/initrd.cpio" "$work/wheel-target" "$work"/console* "$work"/*.log
}
trap cleanup EXIT

if [ -z "${PYTHON:-}" ]; then
  PYTHON=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python 2>/dev/null |
           grep -E '/3\.[0-9]+\.[0-9]+/bin' | sort -V | tail -n 1)
  PYTHON=${PYTHON:-python3}
fi
boots=${RDMASPAWN_ARM64_BOOTS:-"cloud rxe"}
kernel=${RDMASPAWN_ARM64_KERNEL:-$(bash "$repo/tests/c/arm64_vm.sh" --fetch-kernel)} \
  || die "no arm64 kernel"
say "the soft-RoCE boot's kernel: .ci/lanes/arm64_rxe_kernel.sh"
rxe_kernel=$(bash "$repo/.ci/lanes/arm64_rxe_kernel.sh" \
  "${XDG_CACHE_HOME:-$HOME/.cache}/rdmaspawn/arm64-16k-kernel") || die "no arm64-16k kernel"
rxe_modules=$(dirname "$(dirname "$rxe_kernel")")/lib/modules
root="$work/root"
site="$root/usr/local/lib/python3.11/dist-packages"

# --- 1. userland --------------------------------------------------------------
say "userland: mmdebstrap --variant=extract arm64 bookworm ($PACKAGES)"
mmdebstrap --quiet --variant=extract --architectures=arm64 --include="$PACKAGES" \
  bookworm "$root" http://deb.debian.org/debian >"$work/mmdebstrap.log" 2>&1 \
  || { tail -n 20 "$work/mmdebstrap.log"; die "mmdebstrap"; }
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,linda} "$root"/var/cache/* \
  "$root"/var/lib/apt/lists/* "$root"/usr/lib/python3.11/{test,idlelib,tkinter,turtledemo,lib2to3,ensurepip,pydoc_data} \
  "$root"/usr/lib/python3.11/distutils/tests
# Perl (about 60 MiB) comes with usrmerge, which rdma-core's dependencies
# bring (init-system-helpers); nothing here runs it.
rm -rf "$root"/usr/share/perl "$root"/usr/lib/aarch64-linux-gnu/perl "$root"/usr/lib/aarch64-linux-gnu/perl-base \
  "$root"/usr/lib/aarch64-linux-gnu/libperl.so.* "$root"/usr/bin/perl*
find "$root" -name __pycache__ -prune -exec rm -rf {} +
# What base-passwd's maintainer script would write (extract runs none).
printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh" \
  >"$root/etc/passwd"
printf '%s\n' "root:x:0:" "nogroup:x:65534:" >"$root/etc/group"
say "userland: $(du -sm "$root" | cut -f1) MiB"

# --- 2. pytest and cffi for aarch64, the init -----------------------------------
pip_target() {  # pip_target DIR ARGS...: aarch64 CPython 3.11 wheels into DIR
  local dir=$1; shift
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-compile --target "$dir" \
    --platform manylinux_2_28_aarch64 --python-version 3.11 --implementation cp \
    --only-binary=:all: "$@"
}
say "pip ($("$PYTHON" --version)): pytest, cffi for aarch64 CPython 3.11"
pip_target "$site" pytest cffi >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; die "pip pytest cffi"; }
rm -rf "$site/bin"
aarch64-linux-gnu-gcc -std=gnu11 -O2 -static -Wall -Wextra -Werror \
  -o "$root/init" "$repo/tests/c/arm64_init.c" || die "compiling /init"
install -m 755 "$repo/.ci/lanes/arm64_inside.sh" "$root/harness"
mkdir -p "$root/lane" "$root/root"
cp -a "$repo/tests" "$repo/pyproject.toml" "$root/lane/"
rm -rf "$root/lane/tests/conformance" "$root/lane/tests/torch_job"
set -f
printf '%s\n' $SUBSET >"$root/lane/subset.clone3"
printf '%s\n' $RXE_SUBSET >"$root/lane/subset.rxe"
set +f
# The 16k kernel's modules, where /init looks for the running kernel's.
mkdir -p "$root/lib/modules" && cp -a "$rxe_modules/." "$root/lib/modules/"

# --- 3. this run's wheel --------------------------------------------------------
say "waiting for rdmaspawn-*-manylinux_2_28_aarch64.whl in $wheelhouse"
wheel=$(wait_for_wheel "$wheelhouse" 'rdmaspawn-*-manylinux_2_28_aarch64.whl' \
  "${RDMASPAWN_WHEEL_WAIT:-1200}") || die "no aarch64 wheel after ${RDMASPAWN_WHEEL_WAIT:-1200}s"
say "installing $(basename "$wheel")"
pip_target "$work/wheel-target" --no-deps "$wheel" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log"; die "pip install the wheel"; }
script="$work/wheel-target/bin/rdmaspawn"
[ -f "$script" ] || die "the wheel has no rdmaspawn console script"
# pip wrote the host's interpreter into the script: the VM's is /usr/bin/python3.
sed '1s|.*|#!/usr/bin/python3|' "$script" >"$root/usr/bin/rdmaspawn" && chmod 755 "$root/usr/bin/rdmaspawn"
rm -rf "$work/wheel-target/bin"
cp -a "$work/wheel-target/." "$site/"
[ -f "$site/rdmaspawn-autostart.pth" ] || die "the wheel's .pth hook is not in site-packages"

# Debian compiles the stdlib's .pyc in python3's maintainer scripts, which
# extract never runs: without them every interpreter in the VM compiles what
# it imports, under TCG.  A host CPython 3.11 (same .pyc format) compiles them
# here; unchecked-hash, so that no timestamp decides.
py311=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11.*/bin/python 2>/dev/null | sort -V | tail -n 1)
if [ -n "$py311" ]; then
  say "compiling the userland's .pyc with $("$py311" --version)"
  "$py311" -m compileall -q -j 0 --invalidation-mode unchecked-hash -s "$root" -p / \
    "$root/usr/lib/python3.11" "$site" >"$work/compileall.log" 2>&1 \
    || { tail -n 20 "$work/compileall.log"; die "compileall"; }
else
  say "no CPython 3.11 under pyenv: the VM compiles its .pyc itself"
fi
say "packing the initramfs"
(cd "$root" && find . | cpio -o -H newc -R 0:0 --quiet) >"$work/initrd.cpio" || die "cpio"
rm -rf "$root"
say "initramfs: $(du -m "$work/initrd.cpio" | cut -f1) MiB"

# --- 4. the VMs, each watched by tests/vm_watchdog.sh ------------------------------
cpu=${RDMASPAWN_VM_CPU:-max,pauth-impdef=on}
hung=0
# boot NAME KERNEL SMP: boot the initramfs on KERNEL with SMP vCPUs
# (rdmaspawn.boot=NAME on its command line tells the harness which boot this
# is); the console is printed as it comes, each line after "(NAME) ", and
# kept in $work/console-NAME.txt.  Status 1 when the watchdog killed qemu.
# The cloud boot has 2 vCPUs: its engine tests hand the child's state between
# CPUs as a real machine does.  The soft-RoCE boot has one: its tests are
# about pages and registrations, and with one vCPU qemu used 222 s of CPU
# for them where it used 255 s with two (the same run, side by side).
# Both boots at once, each in a subshell of its own: one after the other,
# the second ran alone at the end of CI for 190 s on one of the 2 cores
# (CI's run of stop 44: this lane ended at 2181 s, every other by 1995 s).
boot() {
  local name=$1 kernel=$2 smp=$3 console="$work/console-$1" qpid tail_pid rc=0
  : >"$console"
  say "booting $(basename "$kernel") (-cpu $cpu -smp $smp -m 2G)"
  qemu-system-aarch64 -M virt -cpu "$cpu" -smp "$smp" -m 2G \
    -display none -monitor none -serial "file:$console" -nic none -no-reboot \
    -kernel "$kernel" -initrd "$work/initrd.cpio" \
    -append "console=ttyAMA0 panic=-1 quiet rdmaspawn.boot=$name" </dev/null \
    >"$work/qemu-$name.log" 2>&1 &
  qpid=$!
  trap 'kill "$qpid" 2>/dev/null' EXIT
  trap 'exit 143' TERM INT HUP
  tail -n +1 -f "$console" --pid="$qpid" | sed -u "s/\r$//; s/^/($name) /" &
  tail_pid=$!
  # SMP vCPUs: qemu gets up to SMP times the wall clock's CPU while it runs.
  vm_watch "$qpid" "$console" $((silence * smp)) "$silence_wall" "[arm64] $name boot" || rc=1
  wait "$qpid"; local qemu_rc=$?
  wait "$tail_pid" 2>/dev/null
  say "$name boot: qemu exit $qemu_rc (it used ${VM_WATCH_CPU} s of CPU)"
  [ "$qemu_rc" -eq 0 ] || cat "$work/qemu-$name.log"
  tr -d '\r' <"$console" >"$console.txt"
  return $rc
}
boot_pids=()
for b in $boots; do
  case $b in
    cloud) boot cloud "$kernel" 2 & ;;
    rxe) boot rxe "$rxe_kernel" 1 & ;;
    *) die "RDMASPAWN_ARM64_BOOTS: no boot named $b" ;;
  esac
  boot_pids+=($!)
done
for p in "${boot_pids[@]}"; do wait "$p" || hung=1; done
boot_pids=()
rm -f "$work/initrd.cpio"

# --- 5. verdict ----------------------------------------------------------------------
passed=0 failed=0
runs_of() {  # runs_of BOOT: the pytest runs the harness makes on BOOT
  case $1 in cloud) echo "clone3" ;; rxe) echo "rxe" ;; esac
}
for b in $boots; do
  console="$work/console-$b.txt"
  steps_ok=$(grep -c '^arm64-lane: result .* passed$' "$console")
  steps_bad=$(grep -c '^arm64-lane: result .* FAILED' "$console")
  passed=$((passed + steps_ok)) failed=$((failed + steps_bad))
  # pytest's closing line: "== 3 failed, 100 passed, 2 deselected in 50.0s ==".
  for n in $(grep -E '^=+ .* in [0-9.]+s' "$console" | grep -oE '[0-9]+ passed' | cut -d' ' -f1); do
    passed=$((passed + n))
  done
  for n in $(grep -E '^=+ .* in [0-9.]+s' "$console" | grep -oE '[0-9]+ (failed|errors?)' | cut -d' ' -f1); do
    failed=$((failed + n))
  done
  want=$(runs_of "$b" | wc -w)
  runs=$(grep -c '^arm64-lane: pytest [a-z0-9]* exit' "$console")
  [ "$runs" -eq "$want" ] || { failed=$((failed + 1)); say "FAILED: $b boot: $runs of $want pytest runs finished"; }
  grep -q '^arm64-vm: harness exit 0$' "$console" || { failed=$((failed + (failed == 0))); say "FAILED: $b boot: the harness did not exit 0"; }
done
[ "$hung" -eq 0 ] || failed=$((failed + (failed == 0)))

say "done in $((SECONDS - start))s"
for b in $boots; do
  for run in $(runs_of "$b"); do
    echo "--- pytest on arm64 ($b boot), $run"
    sed -n "/^arm64-lane: pytest $run: /,/^arm64-lane: pytest $run exit/p" "$work/console-$b.txt" |
      sed -n '/= short test summary info =/,/^=\+ .* in [0-9.]\+s/p;/^=\+ .* in [0-9.]\+s/p' | uniq
  done
done
echo "LANE: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
