#!/usr/bin/env bash
# Boot Debian's amd64 kernel under qemu-system-x86_64 (TCG: no /dev/kvm
# needed) with the host's / shared read-only over 9p, and run a job in it.
#
#   tests/realdevice/rxe_vm.sh CACHE SUITE JOBDIR
#
# CACHE: what tests/realdevice/fetch.sh filled; SUITE: the kernel (bookworm:
# 6.1, bullseye: 5.10).  JOBDIR (read-write in the VM, at the same path) holds
# job.sh, run with bash as root in the VM, and binds, the host paths the VM
# needs (one a line: /usr and /etc at least).  The VM's soft-RoCE device is
# made by the job (`rdma link add rxe0 type rxe netdev d0`; d0 is up).
#
# The console is printed as it comes.  A watchdog kills qemu when no new
# console line has appeared while qemu got RDMASPAWN_VM_SILENCE seconds of
# CPU (default 300), or for RDMASPAWN_VM_SILENCE_WALL seconds of wall clock
# (default 900: a guest hung while idle): a hang is told from slowness by
# progress, not by a total, and a VM starved by a loaded machine is slow.
# 300, not 120: a CPU-second of a loaded or slower machine runs less of the
# guest, and at 120 CI's run of stop 44 lost the 6.1 VM in
# test_torch_rxe.py (no qemu time, no pytest result: what a kill leaves),
# whose import of torch alone took 64-74 s of qemu's CPU on a quiet machine.
# RDMASPAWN_VM_SMP: the VM's CPUs (default 1: measured beside a loaded CI, a 2-CPU VM
# took 170 s for what one CPU does in 93 s).  RDMASPAWN_VM_MEM: its memory
# (default 1024M; the repair's benchmark registers up to a GiB in each of
# three processes).
# Exit status: the job's; 124 when the watchdog fired; 125 when the VM never
# reported one.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${1:?usage: rxe_vm.sh CACHE SUITE JOBDIR}
suite=${2:?}
job=$(cd "${3:?}" && pwd)
kernel="$cache/kernel/$suite"
silence=${RDMASPAWN_VM_SILENCE:-300}
silence_wall=${RDMASPAWN_VM_SILENCE_WALL:-900}

work=$(mktemp -d /tmp/rdmaspawn-rxe.XXXXXX)
qpid=""
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 143" TERM INT HUP
mkdir -p "$work"/root/{bin,ko,proc,sys,dev}
cp "$cache/busybox" "$work/root/bin/busybox"
cp "$here/init.sh" "$work/root/init"
chmod 755 "$work/root/init"
cp "$kernel"/ko/*.ko "$work/root/ko/"
cp "$kernel/modules.load" "$work/root/modules.load"
(cd "$work/root" && find . | cpio -o -H newc -R 0:0 --quiet) >"$work/initrd"

echo "rxe_vm: booting $suite ($kernel/vmlinuz)"
: >"$work/console"
qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp "${RDMASPAWN_VM_SMP:-1}" \
  -m "${RDMASPAWN_VM_MEM:-1024M}" \
  -display none -monitor none -serial "file:$work/console" -nic none -no-reboot \
  -kernel "$kernel/vmlinuz" -initrd "$work/initrd" \
  -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on \
  -virtfs "local,path=$job,mount_tag=job,security_model=none" \
  -append "console=ttyS0 panic=-1 quiet rxe.job=$job" </dev/null &
qpid=$!

# Print the console as it grows (a line at a time: the watchdog's hook);
# tests/vm_watchdog.sh kills qemu after $silence s of its CPU without output
# (on a loaded machine a starved VM is slow, not hung: issue 27), or after
# $silence_wall s of wall clock (a guest that hangs while idle gets little CPU).
. "$here/../vm_watchdog.sh"
seen=0
print_new_lines() {
  local n
  n=$(wc -l <"$work/console")
  [ "$n" -gt "$seen" ] || return 0
  sed -n "$((seen + 1)),${n}p" "$work/console" | tr -d '\r'
  seen=$n
}
VM_WATCH_HOOK=print_new_lines vm_watch "$qpid" "$work/console" "$silence" "$silence_wall" rxe_vm
if [ $? -eq 124 ]; then
  echo "rxe_vm: the watchdog killed the VM"
  wait "$qpid" 2>/dev/null; qpid=""
  exit 124
fi
wait "$qpid" 2>/dev/null; qpid=""
echo "rxe_vm: qemu used ${VM_WATCH_CPU} s of CPU"
rc=$(tr -d '\r' <"$work/console" | sed -n 's/^rxe-vm: job exit \([0-9]*\)$/\1/p' | tail -n 1)
[ -n "$rc" ] || { echo "rxe_vm: the VM reported no job exit"; exit 125; }
exit "$rc"
