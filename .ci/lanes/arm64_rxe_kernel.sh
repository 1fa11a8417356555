#!/usr/bin/env bash
# The arm64 lane's second kernel: Debian trixie's arm64-16k (Linux 6.12 with
# 16 KiB pages), with the modules a soft-RoCE device needs.
#
#   .ci/lanes/arm64_rxe_kernel.sh DIR      fills DIR (once); prints the vmlinuz path
#
# Why this kernel: the cloud kernel of the lane's first boot has no rdma_rxe
# (CONFIG_RDMA_RXE is not set there) and 4 KiB pages; this one has both
# rdma_rxe and pages of another size than x86-64's, as arm64 servers often
# run (NVIDIA's Grace kernels use 64 KiB).
#
# DIR/boot/vmlinuz-RELEASE and DIR/lib/modules/RELEASE/: the .ko.xz files of
# rdma_rxe, ib_uverbs, dummy, crc32_generic (rxe asks the crypto API for
# "crc32") and their dependencies, listed in modules.load each after what it
# depends on (read from each module's own "depends=" field: no kmod here).
# tests/c/arm64_init.c loads them when the running kernel is RELEASE.
# apt runs with private lists (tests/realdevice/debian_apt.sh).
set -euo pipefail

dir=${1:?usage: arm64_rxe_kernel.sh DIR}
WANTED="dummy crc32_generic ib_uverbs rdma_rxe"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
found=$(ls "$dir"/boot/vmlinuz-* 2>/dev/null | head -n 1 || true)
if [ -n "$found" ]; then echo "$found"; exit 0; fi

st="$dir/apt"
. "$(dirname "${BASH_SOURCE[0]}")/../../tests/realdevice/debian_apt.sh"
# shellcheck disable=SC2046
apt-get $(apt_for "$st" trixie arm64) update -qq >&2
pkg=$(apt_image "$st" trixie arm64 linux-image-arm64-16k)
[ -n "$pkg" ] || { echo "arm64_rxe_kernel: no linux-image-arm64-16k in trixie" >&2; exit 1; }
apt_download "$st" trixie arm64 "$st/root" "$pkg"
release=$(ls "$st/root/usr/lib/modules")
tree="$st/root/usr/lib/modules/$release"
out="$dir/lib/modules/$release"
mkdir -p "$out"

# add MODULE: MODULE's dependencies first, then MODULE (each once).
added=" "
add() {
  case $added in *" $1 "*) return ;; esac
  local ko deps d
  ko=$(find "$tree" -name "$1.ko.xz" | head -n 1)
  [ -n "$ko" ] || { echo "arm64_rxe_kernel: no $1.ko.xz in $pkg" >&2; exit 1; }
  deps=$(xz -dc "$ko" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n 1 | tr ',' ' ')
  for d in $deps; do add "$d"; done
  cp "$ko" "$out/"
  echo "$1.ko.xz" >>"$out/modules.load"
  added="$added$1 "
}
: >"$out/modules.load"
for m in $WANTED; do add "$m"; done
mkdir -p "$dir/boot"
cp "$st/root/boot/vmlinuz-$release" "$dir/boot/"
rm -rf "$st"
echo "arm64_rxe_kernel: $pkg, modules: $(tr '\n' ' ' <"$out/modules.load")" >&2
echo "$dir/boot/vmlinuz-$release"
