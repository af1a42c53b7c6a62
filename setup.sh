#!/usr/bin/env bash
# plugq in one command on a fresh Debian 12 machine (as root):
#   ./setup.sh serve   install dependencies, build, install, serve the default disk
#   ./setup.sh test    install dependencies, then build and run every test
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-serve}

"$top/scripts/install-deps.sh"

# Which nbdkit will serve, and a warning if a client can abort it (the man
# page's SECURITY).
report_nbdkit() {
  local v
  v=$(nbdkit --version 2>/dev/null | awk '{ print $2 }') || true
  if [ -z "$v" ]; then
    echo "setup.sh: no nbdkit on PATH" >&2
    return 0
  fi
  echo "setup.sh: nbdkit $v ($(command -v nbdkit))"
  if "$top/scripts/nbdkit-early-hangup-abort.sh" "$v"; then
    cat >&2 <<MSG
setup.sh: WARNING: nbdkit $v aborts when a client pipelines reads and hangs
  up without reading the replies, taking every disk down (fixed in nbdkit
  1.34).  Serve trusted clients only, or require TLS with client
  certificates; prefer nbdkit 1.34 or later.  man nbdkit-plugq-plugin,
  SECURITY.
MSG
  fi
}
report_nbdkit

case "$cmd" in
serve)
  "$top/scripts/build.sh" "$top/_build/gcc"
  make -C "$top/_build/gcc" install >/dev/null
  cat <<'MSG'
plugq is installed; serving the embedded default disk (1 GiB, memory,
export "default") on 127.0.0.1:10809.  In another terminal:

  nbdinfo nbd://127.0.0.1                      # size, block sizes, flags
  nbdinfo --list nbd://127.0.0.1               # every export
  qemu-img info nbd://127.0.0.1
  nbd-client 127.0.0.1 10809 /dev/nbd0 -N default   # Linux kernel client

Stop with Ctrl-C.  Other disks and volumes: man nbdkit-plugq-plugin
MSG
  exec nbdkit -f -i 127.0.0.1 -p 10809 plugq
  ;;
test)
  exec "$top/scripts/test-all.sh"
  ;;
*)
  echo "usage: $0 serve|test" >&2
  exit 2
  ;;
esac
