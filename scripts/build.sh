#!/usr/bin/env bash
# Configures and builds plugq out of tree: scripts/build.sh BUILDDIR [configure args...]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=$1; shift
if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
  (cd "$top" && { autoreconf -fi >/dev/null 2>&1 || autoreconf -fi; })
fi
mkdir -p "$builddir"
cd "$builddir"
if [ ! -f Makefile ] || [ "$top/configure" -nt Makefile ]; then
  "$top/configure" --enable-werror "$@" >configure.log
fi
make -j"$(nproc)" >make.log 2>&1 || { cat make.log; exit 1; }
