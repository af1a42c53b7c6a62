#!/usr/bin/env bash
# Installs everything plugq needs to build, test and benchmark on Debian 12.
# Idempotent: apt-get skips what is already there.
set -euo pipefail

packages=(
  build-essential autoconf automake libtool pkg-config clang libclang-rt-14-dev
  nbdkit nbdkit-plugin-dev libnbd-dev libnbd-bin python3-libnbd
  libev-dev libjansson-dev libbsd-dev
  bats bats-assert bats-support bats-file jq
  # the stats-format=prometheus test's parser (prometheus_client.parser)
  python3-prometheus-client
  qemu-utils fio nbd-server nbd-client
  openssl iproute2 strace procps
  # the service test: systemd-socket-activate and systemd-analyze
  systemd
  # bench: GNU time for client CPU (lib.sh), valgrind for 'make -C bench cost',
  # gnuplot for the plots of 'make bench' (bench/report.py)
  time valgrind gnuplot-nox
  # the kernel NBD client test's guest (client-tests/kernel)
  qemu-system-x86 busybox-static socat kmod cpio e2fsprogs
  # the rbd= backend and its tests' throw-away cluster (no mgr needed);
  # qemu's rbd: driver for the bench's comparison
  ceph-mon ceph-osd ceph-common librbd-dev librados-dev qemu-block-extra
  # the Debian package (debian/) and its test (client-tests/package.bats)
  debhelper dh-python dpkg-dev fakeroot lintian
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
