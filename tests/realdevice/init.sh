#!/bin/busybox sh
# /init of the soft-RoCE VM (tests/realdevice/rxe_vm.sh builds the initramfs:
# busybox, the kernel modules of modules.load, this script).
#
# The host's / arrives read-only over 9p (tag "host"), the job directory
# read-write (tag "job").  A tmpfs becomes the new root, with the paths the
# job names in its "binds" file (/usr, /etc, pyenv, the checkout, the venvs)
# bound in from the 9p mount: chrooting into the 9p tree itself, or an
# overlay of it, hides the new /proc.  Then a soft-RoCE device rxe0 over a
# dummy netdev, and the job's job.sh runs as root in the new root; its exit
# status goes to the console ("rxe-vm: job exit N") and the VM powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "rxe-vm: $*" >/dev/console; }
fail() { say "$*"; say "job exit 125"; poweroff -f; }

# A module's dependencies may follow it in modules.load: retry until none is left.
left=$(cat /modules.load)
for pass in 1 2 3 4; do
  next=""
  for m in $left; do insmod "/ko/$m" 2>/dev/null || next="$next $m"; done
  left=$next
done
[ -z "$left" ] || fail "modules not loaded:$left"

job=$(sed -n 's/.*rxe.job=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p /host /job /new
# 9p's largest message (msize) per kernel, as measured under TCG (one VM
# alone, a Python loop of stat() on a missing file, listdir(), open()+read()
# of a 40 KiB file): Linux 5.10 paid for every request in proportion to msize
# (10 ms, 31 ms and 30 ms at 512000; 0.5 ms, 4.0 ms and 2.1 ms at 16384;
# `import rdmaspawn` took 5.7-7.7 s against 2.0 s), Linux 6.1 did not (0.4,
# 3.7-6.7 and 1.7 ms at either size) and reads big files (torch's libraries)
# faster with the large one (64 MiB: 1.4 s against 2.6 s).
case $(uname -r) in
  [1-5].*) msize=16384 ;;
  *) msize=512000 ;;
esac
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=$msize,cache=loose host /host ||
  fail "cannot mount the host's /"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=$msize job /job || fail "cannot mount $job"
mount -t tmpfs -o mode=755 root /new
mkdir -p /new/proc /new/sys /new/dev /new/tmp /new/run /new/var/tmp
mount -t proc proc /new/proc
mount -t sysfs sys /new/sys
mount -t devtmpfs dev /new/dev
mkdir -p /new/dev/shm /new/dev/pts
mount -t tmpfs -o mode=1777 shm /new/dev/shm
mount -t devpts devpts /new/dev/pts
mount -t tmpfs -o mode=1777 tmp /new/tmp
mount -t tmpfs -o mode=1777 vartmp /new/var/tmp
mount -t tmpfs -o mode=755 run /new/run
# The binds after the tmpfs mounts, which would hide a bind below /tmp.
for p in $(cat /job/binds); do
  mkdir -p "/new$p" && mount --bind "/host$p" "/new$p" || fail "cannot bind $p"
done
# Debian is usr-merged: /bin, /sbin, /lib, /lib64 are links into /usr.
for l in bin sbin lib lib64; do [ -e "/new/$l" ] || ln -s "usr/$l" "/new/$l"; done
mkdir -p "/new$job" && mount --bind /job "/new$job"

# A host name: Open MPI's mpirun refuses the kernel's "(none)".
hostname rxe-vm
ip link set lo up
ip link add d0 type dummy && ip link set d0 up || fail "no dummy netdev"
say "kernel $(uname -r), modules loaded"
chroot /new /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
  TERM=dumb /bin/bash "$job/job.sh" </dev/null >/dev/console 2>&1
say "job exit $?"
sync
poweroff -f
