#!/bin/sh
# nbdkit-early-hangup-abort.sh VERSION: exits 0 if nbdkit VERSION aborts
# when a client hangs up with replies still to send ("raw_send_socket:
# Assertion `sock >= 0' failed"), 1 if not, 2 if VERSION is not a
# version.  The assertion came with "server: Give client EOF when we are
# done writing" (1.32.4 on the stable branch, 1.33.3 in development) and
# went with "server: Don't assert on send if client hangs up early"
# (9d82aa4f, 1.33.10, so stable 1.34.0).  plugin/plugq.c's --dump-plugin
# key plugq_nbdkit_early_hangup_abort says the same of the nbdkit plugq
# was built with; the man page's SECURITY says what it costs.
set -eu
case ${1:-} in
  [0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "usage: $0 MAJOR.MINOR.MICRO" >&2; exit 2 ;;
esac
IFS=. read -r major minor micro <<EOV
$1
EOV
micro=${micro%%[!0-9]*}
[ "$major" = 1 ] || exit 1
if [ "$minor" = 32 ] && [ "$micro" -ge 4 ]; then exit 0; fi
if [ "$minor" = 33 ] && [ "$micro" -ge 3 ] && [ "$micro" -le 9 ]; then exit 0; fi
exit 1
