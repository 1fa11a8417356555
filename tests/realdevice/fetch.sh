#!/usr/bin/env bash
# Fetch what the soft-RoCE VM needs, without installing anything:
#   - the kernels: Debian bookworm's linux-image-amd64 (6.1: reports
#     copy-on-fork over RDMA netlink) and bullseye's (5.10: predates it);
#   - busybox-static (the VM's /init and its insmod/depmod);
#   - libibverbs1 + ibverbs-providers of each rdma-core release the matrix
#     covers: bullseye 33.2, bookworm 44.0, trixie 56.1, sid (65.0), with
#     the libc6 of trixie and sid (their libibverbs needs glibc 2.38).
# apt runs with private lists (apt-get download, then dpkg-deb -x:
# debian_apt.sh), so the machine's own apt state is not touched.
#
#   tests/realdevice/fetch.sh DIR     fills DIR (skips what is already there)
#
# DIR/kernel/<suite>/{vmlinuz,lib/modules/VERSION/...} with modules.dep,
# DIR/verbs/<suite>/usr/lib/x86_64-linux-gnu/{libibverbs.so.1,libibverbs/},
# DIR/busybox.
set -euo pipefail

dir=${1:?usage: fetch.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
KERNEL_SUITES="bookworm bullseye"
VERBS_SUITES="bullseye bookworm trixie sid"

# A private apt state per suite, in DIR/apt/SUITE (debian_apt.sh); amd64 only.
. "$(dirname "${BASH_SOURCE[0]}")/debian_apt.sh"
opts_of() { apt_for "$dir/apt/$1" "$1" amd64; }
# download SUITE OUTDIR PACKAGE...: fetch and unpack PACKAGEs of SUITE into OUTDIR.
download() { local s=$1; shift; apt_download "$dir/apt/$s" "$s" amd64 "$@"; }
image_of() { apt_image "$dir/apt/$1" "$1" amd64 linux-image-amd64; }

# The package lists first, one update per suite, the suites at once.
pids=()
for s in $VERBS_SUITES; do
  [ -n "$(ls "$dir/apt/$s/lists/"*Packages* 2>/dev/null)" ] && continue
  # shellcheck disable=SC2046
  apt-get $(opts_of "$s") update -qq & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { echo "fetch: apt-get update failed" >&2; exit 1; }; done

if [ ! -x "$dir/busybox" ]; then
  download bookworm "$dir/bb" busybox-static
  mv "$dir/bb/bin/busybox" "$dir/busybox" && rm -rf "$dir/bb"
fi
pids=()
for s in $KERNEL_SUITES; do
  [ -f "$dir/kernel/$s/vmlinuz" ] && continue
  (
    img=$(image_of "$s")
    [ -n "$img" ] || { echo "fetch: no linux-image-amd64 in $s" >&2; exit 1; }
    rm -rf "$dir/kernel/$s.tmp"
    download "$s" "$dir/kernel/$s.tmp" "$img"
    t="$dir/kernel/$s.tmp"
    cp "$t"/boot/vmlinuz-* "$t/vmlinuz"
    # Keep only the modules the VM loads (9p over virtio-pci, soft-RoCE, the
    # dummy netdev under it), in load order: modules.load lists them, each
    # after its dependencies (from busybox depmod's modules.dep).
    v=$(ls "$t/lib/modules")
    "$dir/busybox" depmod -b "$t" "$v"
    mkdir -p "$t/ko"
    # crc32_generic: rdma_rxe asks the crypto API for "crc32" (a soft dependency).
    for m in virtio_pci 9pnet_virtio 9p dummy crc32_generic ib_uverbs rdma_rxe; do
      awk -v m="/$m.ko:" 'index($0, m) {
            n = split($0, f, /:? +/); for (i = n; i >= 1; i--) print f[i] }' \
        "$t/lib/modules/$v/modules.dep"
    done | sed 's/:$//' | awk '!seen[$0]++' >"$t/modules.load"
    while read -r ko; do cp "$t/lib/modules/$v/$ko" "$t/ko/"; done <"$t/modules.load"
    sed -i 's|.*/||' "$t/modules.load"
    find "$t" -mindepth 1 -maxdepth 1 ! -name ko ! -name vmlinuz ! -name modules.load -exec rm -rf {} +
    mv "$t" "$dir/kernel/$s"
    echo "fetch: kernel $s: $img"
  ) & pids+=($!)
done
for s in $VERBS_SUITES; do
  [ -f "$dir/verbs/$s/.done" ] && continue
  (
    rm -rf "$dir/verbs/$s"
    # trixie's and sid's libibverbs need glibc 2.38: their libc6 comes too,
    # loaded through its own ld.so (.ci/lanes/rxe.sh, verbs_env).
    extra=""; case $s in trixie|sid) extra=libc6 ;; esac
    # shellcheck disable=SC2086
    download "$s" "$dir/verbs/$s" libibverbs1 ibverbs-providers $extra
    touch "$dir/verbs/$s/.done"
    echo "fetch: libibverbs $s: $(ls "$dir/verbs/$s"/usr/lib/x86_64-linux-gnu/libibverbs.so.1.*)"
  ) & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ $rc -eq 0 ] && rm -rf "$dir/apt"
exit $rc
