# Sourced (bash): Debian packages fetched with a private apt state, so that
# the machine's own lists, architectures and dpkg database are left alone
# (no `dpkg --add-architecture`, no `apt-get update` of the system).
# tests/realdevice/fetch.sh and .ci/lanes/arm64_rxe_kernel.sh use it.
#
# STATE is a directory of its own per suite and architecture: it holds the
# sources.list, the lists and the downloaded .debs.

# apt_for STATE SUITE ARCH: apt-get's options for SUITE's main on ARCH.
apt_for() {
  local st=$1 suite=$2 arch=$3
  if [ ! -f "$st/sources.list" ]; then
    mkdir -p "$st/lists/partial" "$st/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
      "http://deb.debian.org/debian $suite main" >"$st/sources.list"
  fi
  echo -o Dir::Etc::SourceList="$st/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$st/lists" -o Dir::Cache="$st/cache" \
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Acquire::Languages=none \
    -o Dir::State::status=/dev/null -o Debug::NoLocking=1 \
    -o APT::Sandbox::User=root -o APT::Architecture="$arch" -o APT::Architectures::="$arch"
}

# apt_download STATE SUITE ARCH OUTDIR PACKAGE...: fetch the PACKAGEs and
# unpack them into OUTDIR (dpkg-deb -x: no maintainer scripts).
apt_download() {
  local st=$1 suite=$2 arch=$3 out=$4; shift 4
  local opts; opts=$(apt_for "$st" "$suite" "$arch")
  local deb; deb=$(mktemp -d "$st/debs.XXXXXX")
  mkdir -p "$out"
  # shellcheck disable=SC2086
  (cd "$deb" && apt-get $opts download "$@" >/dev/null)
  local p
  for p in "$@"; do dpkg-deb -x "$deb/${p}"_*.deb "$out"; done
  rm -rf "$deb"
}

# apt_image STATE SUITE ARCH METAPACKAGE: the versioned linux-image package
# a metapackage (linux-image-amd64, linux-image-arm64-16k) points at.
apt_image() {
  local opts; opts=$(apt_for "$1" "$2" "$3")
  # shellcheck disable=SC2086
  apt-cache $opts depends "$4" | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
