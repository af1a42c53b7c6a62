# shellcheck shell=bash
# Network namespaces for the cross-host tests (client-tests/netns.bats).
#
#   front namespace                        back-end namespace i (1..3)
#   pq<ID>f<i>  10.231.<i>.1/30  <-veth->  pq<ID>b<i>  10.231.<i>.2/30
#                                          nbdkit -i 10.231.<i>.2 -p 10809
#
# The front plugq runs in the front namespace and is reached by the test
# on a unix socket (unix sockets are not tied to a network namespace).
# Every address and route exists only inside these namespaces: the front
# namespace's only routes are the /30 links, so no traffic can leave them.
#
# Names are unique per test run and test (NETNS_RUN from netns_file_setup
# plus the test number); netns_teardown removes what the test made, even
# after a failure, and netns_file_teardown removes anything of this run
# that is still there.

NETNS_PORT=10809

# netns_file_setup: from setup_file.
netns_file_setup() {
  NETNS_RUN=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  export NETNS_RUN
}

# netns_file_teardown: from teardown_file: namespaces of this run that a
# killed test left behind.
netns_file_teardown() {
  local ns
  [ -n "${NETNS_RUN:-}" ] || return 0
  command -v ip >/dev/null 2>&1 || return 0
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^pq-$NETNS_RUN-" || true); do
    ip netns pids "$ns" 2>/dev/null | while read -r pid; do
      grep -qa nbdkit "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    done
    ip netns del "$ns" 2>/dev/null || true
  done
}

# netns_setup: the front namespace.  Skips the test, with the reason,
# where namespaces or veth pairs cannot be made.
netns_setup() {
  NETNS_MADE=()
  NETNS_BACKEND_PIDFILES=()
  NETNS_TAG="${NETNS_RUN:?netns_file_setup not run}${BATS_TEST_NUMBER:-0}"
  NETNS_FRONT="pq-$NETNS_RUN-$BATS_TEST_NUMBER-front"
  local err
  if [ "$(id -u)" -ne 0 ]; then
    skip "network namespaces need root (running as uid $(id -u))"
  fi
  if ! command -v ip >/dev/null 2>&1; then
    skip "no 'ip' command (iproute2 is not installed)"
  fi
  if ! err=$(ip netns add "$NETNS_FRONT" 2>&1); then
    skip "cannot make a network namespace here: ip netns add: $err"
  fi
  NETNS_MADE+=("$NETNS_FRONT")
  ip -n "$NETNS_FRONT" link set lo up
}

# netns_backend_ns I: the name of back-end I's namespace.
netns_backend_ns() {
  printf 'pq-%s-%s-b%s\n' "$NETNS_RUN" "$BATS_TEST_NUMBER" "$1"
}

# netns_addr I: back-end I's address; netns_uri I [EXPORT]: its NBD URI.
netns_addr() { printf '10.231.%s.2\n' "$1"; }
netns_uri() { printf 'nbd://%s:%s/%s\n' "$(netns_addr "$1")" "$NETNS_PORT" "${2-}"; }

# netns_link I: back-end I's namespace and its veth link to the front.
# Skips the test if veth pairs cannot be made.
netns_link() {
  local i=$1 ns f b err
  ns=$(netns_backend_ns "$i")
  f="pq${NETNS_TAG}f$i"
  b="pq${NETNS_TAG}b$i"
  ip netns add "$ns" || return 1
  NETNS_MADE+=("$ns")
  # Made inside the front namespace with its peer inside the back-end's:
  # neither end ever exists in the root namespace.
  if ! err=$(ip -n "$NETNS_FRONT" link add "$f" type veth peer name "$b" netns "$ns" 2>&1); then
    skip "cannot make a veth pair here: ip link add type veth: $err"
  fi
  ip -n "$NETNS_FRONT" addr add "10.231.$i.1/30" dev "$f" &&
    ip -n "$ns" addr add "10.231.$i.2/30" dev "$b" &&
    ip -n "$NETNS_FRONT" link set "$f" up &&
    ip -n "$ns" link set "$b" up &&
    ip -n "$ns" link set lo up
}

# netns_check_routes: the front namespace routes only to the test's /30
# links (no default route, nothing else).
netns_check_routes() {
  local routes bad
  routes=$(ip -n "$NETNS_FRONT" -4 route show)
  bad=$(grep -v '^10\.231\.[0-9]*\.0/30 ' <<<"$routes" || true)
  if [ -n "$bad" ] || grep -q default <<<"$routes"; then
    echo "front namespace has routes besides its own links: $routes" >&2
    return 1
  fi
}

# netns_start_backend I NBDKIT-ARGS...: nbdkit (daemonized) in back-end
# I's namespace, listening on its address only; returns once a client in
# the front namespace gets an answer from it.  Its pid file is
# $BATS_TEST_TMPDIR/backend-I.pid.
netns_start_backend() {
  local i=$1 ns pidf out
  shift
  ns=$(netns_backend_ns "$i")
  pidf="$BATS_TEST_TMPDIR/backend-$i.pid"
  out="$BATS_TEST_TMPDIR/backend-$i.out"
  rm -f "$pidf"
  NETNS_BACKEND_PIDFILES+=("$pidf")
  if ! timeout 20 ip netns exec "$ns" "$NBDKIT" -i "$(netns_addr "$i")" \
       -p "$NETNS_PORT" -P "$pidf" "$@" </dev/null >"$out" 2>&1 3>&-; then
    echo "back-end $i did not start: $(cat "$out")" >&2
    return 1
  fi
  # nbdkit 1.32 listens before it forks; its child writes the pid file.
  wait_for_file "$pidf" || return 1
  local n
  for ((n = 0; n < 100; n++)); do
    if ip netns exec "$NETNS_FRONT" nbdinfo --size "$(netns_uri "$i")" \
         >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.05
  done
  echo "back-end $i does not answer at $(netns_uri "$i") from the front namespace" >&2
  return 1
}

# netns_kill_backend I: SIGKILL back-end I and wait (bounded) until it is
# gone.
netns_kill_backend() {
  local pidf="$BATS_TEST_TMPDIR/backend-$1.pid" pid n
  pid=$(cat "$pidf")
  kill -KILL "$pid"
  for ((n = 0; n < 200; n++)); do
    _pid_gone "$pid" && { rm -f "$pidf"; return 0; }
    sleep 0.05
  done
  echo "back-end $1 (pid $pid) still there 10 s after SIGKILL" >&2
  return 1
}

# netns_teardown: back-ends killed, namespaces (and with them the veths)
# deleted.  Fails if something of this test is left.
netns_teardown() {
  local f pid n ns rc=0
  for f in "${NETNS_BACKEND_PIDFILES[@]}"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if grep -qa nbdkit "/proc/$pid/cmdline" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      for ((n = 0; n < 200; n++)); do
        _pid_gone "$pid" && break
        sleep 0.05
      done
    fi
    rm -f "$f"
  done
  NETNS_BACKEND_PIDFILES=()
  for ((n = ${#NETNS_MADE[@]} - 1; n >= 0; n--)); do
    ns=${NETNS_MADE[n]}
    # Anything still running in this test's namespace (a back-end whose
    # pid file never appeared) is ended by its pid first.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null || true
    done
    ip netns del "$ns" 2>/dev/null || true
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns"; then
      echo "network namespace $ns could not be deleted" >&2
      rc=1
    fi
  done
  NETNS_MADE=()
  if ip -o link show 2>/dev/null | grep -q "pq${NETNS_TAG}[fb]"; then
    echo "veth devices of this test left in the root namespace" >&2
    rc=1
  fi
  return $rc
}
