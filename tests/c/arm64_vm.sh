#!/usr/bin/env bash
# Run a static aarch64 program (the C harness) as the only program of a real
# arm64 Linux kernel booted under qemu-system-aarch64.
#
#   tests/c/arm64_vm.sh HARNESS          boot, run HARNESS, print the console
#   tests/c/arm64_vm.sh --fetch-kernel   fetch the kernel only; print its path
#
# Why a VM: qemu-user has no clone3 and runs CLONE_VM|CLONE_VFORK as a plain
# fork, so the aarch64 clone3 entry only runs on a real arm64 kernel.  Booting
# one under TCG takes seconds: the initramfs holds /init (tests/c/arm64_init.c,
# which mounts /proc and /dev, runs /harness and powers off), the same binary
# as /bin/true, the harness as /harness, and /etc/passwd (the harness execs
# /etc/passwd/x for ENOTDIR).
#
# HARNESS: built statically for aarch64 (tests/test_arm64_vm.py does it:
# aarch64-linux-gnu-gcc -static ...).  The kernel: $RDMASPAWN_ARM64_KERNEL,
# else Debian's linux-image-cloud-arm64 (its PL011 console and initramfs
# support are built in), fetched once with apt-get download into
# ${XDG_CACHE_HOME:-~/.cache}/rdmaspawn/arm64-kernel.  apt runs with lists of
# its own there, so the machine needs no `dpkg --add-architecture arm64`.
# Needs qemu-system-arm, cpio, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross.
#
# Environment: RDMASPAWN_VM_STALL (seconds of qemu's CPU per vCPU without
# console output after which the boot counts as hung: qemu is killed and the
# exit status is 124; default 120), RDMASPAWN_VM_STALL_WALL (the same in
# seconds of wall clock, for a guest hung while idle; default 900), RDMASPAWN_VM_CPU (default cortex-a57; "max,pauth-impdef=on" for
# pointer authentication that TCG emulates cheaply), RDMASPAWN_VM_SMP
# (default 2).
# Exit status: 0 when /init reported "harness exit 0"; else non-zero.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rdmaspawn/arm64-kernel

fetch_kernel() {
  local found
  found=$(ls "$cache"/root/boot/vmlinuz-* 2>/dev/null | head -n 1 || true)
  if [ -n "$found" ]; then echo "$found"; return; fi
  mkdir -p "$cache/lists/partial" "$cache/apt/archives/partial" "$cache/deb"
  local apt=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
             -o Dir::State::Lists="$cache/lists" -o Dir::Cache="$cache/apt"
             -o Dir::State::status=/dev/null -o Debug::NoLocking=1
             -o APT::Sandbox::User=root)
  apt-get "${apt[@]}" update -qq >&2
  local pkg
  pkg=$(apt-cache "${apt[@]}" depends linux-image-cloud-arm64 |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
  [ -n "$pkg" ] || { echo "arm64_vm: no linux-image-cloud-arm64 in the apt lists" >&2; exit 1; }
  (cd "$cache/deb" && apt-get "${apt[@]}" download "$pkg" >&2 2>/dev/null)
  dpkg-deb -x "$cache"/deb/"$pkg"_*.deb "$cache/root"
  rm -rf "$cache/deb" "$cache/apt" "$cache/lists"
  ls "$cache"/root/boot/vmlinuz-* | head -n 1
}

if [ "${1:-}" = "--fetch-kernel" ]; then fetch_kernel; exit 0; fi
harness=${1:?usage: arm64_vm.sh HARNESS | --fetch-kernel}
kernel=${RDMASPAWN_ARM64_KERNEL:-$(fetch_kernel)}

work=$(mktemp -d /tmp/rdmaspawn-vm.XXXXXX)
qemu=""
trap '[ -z "$qemu" ] || kill -9 "$qemu" 2>/dev/null || true; rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/bin" "$root/etc"
aarch64-linux-gnu-gcc -std=gnu11 -O2 -static -Wall -Wextra -Werror \
  -o "$root/init" "$here/arm64_init.c"
cp "$root/init" "$root/bin/true"
cp "$harness" "$root/harness"
echo "root:x:0:0:root:/:/bin/true" >"$root/etc/passwd"
(cd "$root" && find . | cpio -o -H newc -R 0:0 --quiet) >"$work/initrd.cpio"

# A hang is told from slowness by progress (../vm_watchdog.sh): qemu is
# killed when the console has printed nothing while qemu got
# RDMASPAWN_VM_STALL seconds of CPU per vCPU (the harness prints a line per
# check), or for RDMASPAWN_VM_STALL_WALL seconds of wall clock (a guest hung
# while idle), however long the whole boot takes on a busy machine.
. "$here/../vm_watchdog.sh"
stall=${RDMASPAWN_VM_STALL:-120}
smp=${RDMASPAWN_VM_SMP:-2}
console="$work/console"
: >"$console"
echo "arm64_vm: booting $kernel (cpu ${RDMASPAWN_VM_CPU:-cortex-a57})"
started=$SECONDS
qemu-system-aarch64 \
  -M virt -cpu "${RDMASPAWN_VM_CPU:-cortex-a57}" -smp "$smp" -m 512M \
  -display none -monitor none -serial "file:$console" -nic none -no-reboot \
  -kernel "$kernel" -initrd "$work/initrd.cpio" \
  -append "console=ttyAMA0 panic=-1 quiet" </dev/null &
qemu=$!
rc=""
vm_watch "$qemu" "$console" $((stall * smp)) "${RDMASPAWN_VM_STALL_WALL:-900}" arm64_vm || rc=124
qrc=0
wait "$qemu" || qrc=$?
rc=${rc:-$qrc}
tr -d '\r' <"$console" >"$work/console.txt"
cat "$work/console.txt"
echo "arm64_vm: the VM ran $((SECONDS - started)) s (qemu used ${VM_WATCH_CPU} s of CPU)"
[ "$rc" -eq 0 ] || { echo "arm64_vm: qemu exit $rc"; exit "$rc"; }
grep -q '^arm64-vm: harness exit 0$' "$work/console.txt"
