#!/usr/bin/env bats
# The Debian package (debian/, README "A Debian package").  setup_file
# builds it once with dpkg-buildpackage -us -uc -b from the source tree as
# make dist ships it (make distdir into this file's folder: never in the
# source tree), and unpacks it with dpkg -x into a throw-away root (never
# the machine's own system).  The tests serve a disk from the unpacked
# plugin, run the unpacked plugq-stat, check where every file lands and
# run lintian.
#
# The build compiles plugq once more (about a minute on 2 cores), so it
# runs in the gcc-checked pass only: under the sanitizer pass
# (PLUGQ_SANITIZED) it would be the same uninstrumented build again.
# Without dpkg-buildpackage, or with build dependencies missing
# (scripts/install-deps.sh installs them), every test skips with the
# reason.

load helpers

TOP="${top_srcdir:-$BATS_TEST_DIRNAME/..}"

setup_file() {
  export PKG_SKIP= PKG_DIR="$BATS_FILE_TMPDIR/pkg" PKG_ROOT="$BATS_FILE_TMPDIR/root"
  if [ -n "${PLUGQ_SANITIZED:-}" ]; then
    export PKG_SKIP="the package is built in the gcc-checked pass; here it would be the same uninstrumented build again"
    return 0
  fi
  local tool
  for tool in dpkg-buildpackage dpkg-architecture dpkg-checkbuilddeps; do
    command -v "$tool" >/dev/null || {
      export PKG_SKIP="$tool is not installed (Debian package dpkg-dev)"
      return 0
    }
  done
  local builddir=${top_builddir:-${PLUGIN%/.libs/*}} version src
  version=$(sed -n 's/^AC_INIT(\[plugq\], \[\([^]]*\)\].*/\1/p' "$TOP/configure.ac")
  [ -n "$version" ] || { echo "no AC_INIT version in $TOP/configure.ac" >&2; return 1; }
  src=$PKG_DIR/plugq-$version
  mkdir -p "$PKG_DIR"
  make -s -C "$builddir" distdir distdir="$src" >"$PKG_DIR/distdir.log" 2>&1 \
    || { cat "$PKG_DIR/distdir.log" >&2; return 1; }
  if ! (cd "$src" && dpkg-checkbuilddeps) >"$PKG_DIR/builddeps.log" 2>&1; then
    export PKG_SKIP="build dependencies missing (scripts/install-deps.sh installs them): $(cat "$PKG_DIR/builddeps.log")"
    return 0
  fi
  # nocheck: CI runs the unit tests dh_auto_test would run, on this same
  # code, in the gcc-checked pass.
  if ! (cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=2" \
          timeout 600 dpkg-buildpackage -us -uc -b) >"$PKG_DIR/build.log" 2>&1; then
    tail -n 60 "$PKG_DIR/build.log" >&2
    return 1
  fi
  export PKG_VERSION=$version
  export PKG_ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
  export PKG_MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
  export PKG_DEB="$PKG_DIR/nbdkit-plugin-plugq_${version}_$PKG_ARCH.deb"
  [ -f "$PKG_DEB" ] || { ls "$PKG_DIR" >&2; echo "no $PKG_DEB" >&2; return 1; }
  dpkg -x "$PKG_DEB" "$PKG_ROOT"
}

setup() {
  [ -z "${PKG_SKIP:-}" ] || skip "$PKG_SKIP"
  plugq_setup
  T=$BATS_TEST_TMPDIR
  INSTALLED_PLUGIN=$PKG_ROOT/usr/lib/$PKG_MULTIARCH/nbdkit/plugins/nbdkit-plugq-plugin.so
}

teardown() {
  [ -z "${PKG_SKIP:-}" ] || return 0
  plugq_teardown
}

# am_list NAME: the entries of Makefile.am's variable NAME, one per line.
am_list() {
  sed -n "/^$1 +\{0,1\}= /,/^[^[:space:]]/{s/^$1 +\{0,1\}= //;s/^[[:space:]]*//;s/[[:space:]]*\\\\$//;/^[^[:space:]#]\{1,\}$/p}" \
    "$TOP/Makefile.am" | tr ' ' '\n' | sed '/^$/d'
}

@test "package: nbdkit-plugin-plugq_VERSION_ARCH.deb, depending on nbdkit and librbd" {
  run dpkg-deb -f "$PKG_DEB" Package Version Architecture
  assert_output "Package: nbdkit-plugin-plugq
Version: $PKG_VERSION
Architecture: $PKG_ARCH"
  run dpkg-deb -f "$PKG_DEB" Depends
  assert_output --regexp '(^|[ ,])nbdkit \(>= [0-9.]+\)'
  assert_output --partial "librbd1"
  assert_output --partial "python3"
}

@test "package: the plugin lands in nbdkit's plugindir, so nbdkit plugq works by name" {
  local plugindir
  plugindir=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
  [ -n "$plugindir" ] || fail "nbdkit --dump-config names no plugindir"
  assert_file_exists "$PKG_ROOT$plugindir/nbdkit-plugq-plugin.so"
  assert_equal "$PKG_ROOT$plugindir/nbdkit-plugq-plugin.so" "$INSTALLED_PLUGIN"
  # Nothing else there: no libtool .la beside it.
  run ls "$PKG_ROOT$plugindir"
  assert_output "nbdkit-plugq-plugin.so"
  run nbdkit "$INSTALLED_PLUGIN" --dump-plugin
  assert_success
  assert_line --regexp '^plugq_backends=.*rbd'
}

@test "package: the unpacked plugin serves a disk; the unpacked plugq-stat reads its stats" {
  make_file "$T/disk.img" $((64 * MiB))
  PLUGIN=$INSTALLED_PLUGIN start_plugq disk=d file="$T/disk.img" stats="$T/stats.json"
  nbdsh_run d \
    'h.pwrite(b"\x5a" * 4096, 8192, nbd.CMD_FLAG_FUA)' \
    'assert h.pread(4096, 8192) == b"\x5a" * 4096'
  stop_plugq
  run cmp -n 4096 -i 8192:0 "$T/disk.img" <(printf '\x5a%.0s' $(seq 4096))
  assert_success
  run "$PKG_ROOT/usr/bin/plugq-stat" "$T/stats.json"
  assert_success
  assert_line --regexp '^d( |$)'
  run "$PKG_ROOT/usr/bin/plugq-stat" --json "$T/stats.json"
  assert_success
  echo "$output" | jq -e . >/dev/null
}

@test "package: every command in /usr/bin with its man page, the plugin's page, the units (not enabled), plugq.env a conffile" {
  local scripts script
  scripts=$(am_list dist_bin_SCRIPTS; am_list bin_SCRIPTS)
  [ -n "$scripts" ] || fail "no bin_SCRIPTS or dist_bin_SCRIPTS found in Makefile.am"
  for script in $scripts; do
    assert_file_executable "$PKG_ROOT/usr/bin/$(basename "$script")"
  done
  # The plugin's page, and one for every command in /usr/bin.
  for page in nbdkit-plugq-plugin $(ls "$PKG_ROOT/usr/bin"); do
    run env MANPATH="$PKG_ROOT/usr/share/man" man -w 1 "$page"
    assert_success
    assert_output "$PKG_ROOT/usr/share/man/man1/$page.1.gz"
  done
  # The units as in contrib/: sysconfdir is /etc, so they read
  # /etc/plugq/plugq.env, which is the example, kept as a conffile.
  cmp "$TOP/contrib/plugq.service" "$PKG_ROOT/lib/systemd/system/plugq.service"
  cmp "$TOP/contrib/plugq.socket" "$PKG_ROOT/lib/systemd/system/plugq.socket"
  cmp "$TOP/contrib/plugq.env" "$PKG_ROOT/etc/plugq/plugq.env"
  run bash -c "dpkg-deb --ctrl-tarfile '$PKG_DEB' | tar -xO ./conffiles"
  assert_output "/etc/plugq/plugq.env"
  # Installing enables nothing: postinst enables a unit only where it was
  # enabled before (an upgrade), and starts units only through
  # deb-systemd-invoke, which leaves disabled ones alone.
  [ ! -e "$PKG_ROOT/etc/systemd" ] || fail "the package ships /etc/systemd (an enabled unit)"
  dpkg-deb --ctrl-tarfile "$PKG_DEB" | tar -xO ./postinst >"$T/postinst"
  run awk '/was-enabled/ { inside = 1; next }
           inside && /^[ \t]*fi[ \t]*$/ { inside = 0 }
           /deb-systemd-helper enable/ && !inside { print; bad = 1 }
           /systemctl .*(enable|start)/ { print; bad = 1 }
           END { exit bad }' "$T/postinst"
  assert_success
  grep -q "deb-systemd-invoke .*'plugq.socket'" "$T/postinst"
}

@test "package: lintian reports no errors on the .deb and the .changes" {
  command -v lintian >/dev/null || skip "lintian is not installed"
  run lintian "$PKG_DEB" "$PKG_DIR/plugq_${PKG_VERSION}_$PKG_ARCH.changes"
  echo "$output" | grep '^[WI]:' | sed 's/^/# lintian: /' >&3 || true
  refute_line --regexp '^E:'
}
