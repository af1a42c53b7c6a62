#!/usr/bin/env bash
# Builds plugq in every configuration CI checks and runs every test:
#   gcc   -Werror build with lock checks: unit, model and all Bats client tests
#   clang -Werror build (warnings only)
#   make dist: the source tarball, checked by scripts/check-dist.sh
#   ASan+UBSan build: unit, model and client tests but the kernel guest;
#     the real-client scenarios in two of their four combinations
#   TSan build: every unit and model test (most of them run threads)
#   libFuzzer: the queue fuzzer over its corpus, briefly
# Ends with one line "N passed, N failed, N skipped" over all of them.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${BUILDROOT:-$top/_build}
export PATH=/usr/bin:$PATH          # python3 with the nbd module
passed=0 failed=0 skipped=0
status=0

# Adds automake's "# PASS: / # FAIL: / # SKIP: / # ERROR:" counts of one run.
count_run() {
  local log=$1 n
  n=$(sed -n 's/^# PASS: *//p' "$log" | tail -1); passed=$((passed + ${n:-0}))
  n=$(sed -n 's/^# SKIP: *//p' "$log" | tail -1); skipped=$((skipped + ${n:-0}))
  n=$(sed -n 's/^# FAIL: *//p' "$log" | tail -1); failed=$((failed + ${n:-0}))
  n=$(sed -n 's/^# ERROR: *//p' "$log" | tail -1); failed=$((failed + ${n:-0}))
  n=$(sed -n 's/^# XPASS: *//p' "$log" | tail -1); failed=$((failed + ${n:-0}))
}

stage() { printf '\n=== %s ===\n' "$*"; }

# make check in BUILDDIR with extra make arguments; counts its results.
run_check() {
  local dir=$1; shift
  local log=$dir/check.out
  (cd "$dir" && make -j"$(nproc)" check "$@") >"$log" 2>&1
  local rc=$?
  grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS):' "$log" | grep -v '^PASS' || true
  grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$log"
  if [ $rc -ne 0 ]; then
    status=1
    for f in $(cd "$dir" && grep -lE '^(not ok|FAIL|ERROR)' $(find . -name '*.log' ! -name 'test-suite.log' ! -name 'config.log' ! -name 'make.log' ! -name 'configure.log') 2>/dev/null); do
      echo "--- $dir/$f"; tail -n 60 "$dir/$f"
    done
    grep -qE '^# TOTAL:' "$log" || { tail -n 80 "$log"; failed=$((failed + 1)); }
  fi
  count_run "$log"
}

build() {
  local dir=$1; shift
  if ! "$top/scripts/build.sh" "$dir" "$@"; then
    echo "build failed in $dir"; failed=$((failed + 1)); status=1
    return 1
  fi
}

# am_list NAME: the entries of Makefile.am's list NAME, one per line, in
# its order (longest first), so a new test is never left out.
am_list() {
  sed -n "/^$1 = /,/^[^[:space:]]/{s/^[[:space:]]\{1,\}\([^[:space:]\\]\{1,\}\).*/\1/p}" "$top/Makefile.am"
}
unit_tests=$(am_list unit_tests | tr '\n' ' ')
# Every client suite but the kernel guest (one run of it is enough).
asan_client_tests=$(am_list client_tests | grep -v kernel.bats | tr '\n' ' ')

# install-deps installs librbd: the rbd= backend and its tests must be
# built and run here, not skipped because configure missed it.
rbd=--with-rbd=yes

stage "gcc -Werror: unit, model and client tests"
# Its own directory: _build/gcc stays the build without checks that
# setup.sh serve installs and the benchmarks measure.
build "$out/gcc-checked" CC=gcc --enable-lock-checks $rbd && run_check "$out/gcc-checked"

stage "clang -Werror build"
build "$out/clang" CC=clang $rbd && echo "clang build: no warnings"

stage "bench programs: gcc and clang -Werror"
mkdir -p "$out"
if make -C "$top/bench" warnings >"$out/bench-warnings.log" 2>&1; then
  echo "bench programs: no warnings"
else
  cat "$out/bench-warnings.log"; echo "bench programs failed to build"
  failed=$((failed + 1)); status=1
fi

stage "source tarball: make dist"
# Bounded: a make target named like a shipped folder once made
# `make dist` run the benchmarks.
rm -f "$out"/clang/plugq-*.tar.gz
if [ -d "$out/clang" ] && (cd "$out/clang" && timeout 300 make dist) >"$out/dist.log" 2>&1 \
   && "$top/scripts/check-dist.sh" "$out"/clang/plugq-*.tar.gz; then
  echo "PASS: make dist ships every tracked file and nothing built"; passed=$((passed + 1))
else
  tail -n 20 "$out/dist.log"; echo "FAIL: make dist"; failed=$((failed + 1)); status=1
fi

stage "AddressSanitizer + UBSan: unit, model and client tests"
# The plugin runs inside an uninstrumented nbdkit with the sanitizer
# runtime preloaded (scripts/nbdkit-sanitized); its reports land in files
# that are checked here, so a report fails the run.
san="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
sanlogs=$out/asan/sanitizer-logs
rm -rf "$sanlogs"
if build "$out/asan" CC=gcc --enable-lock-checks $rbd CFLAGS="$san" LDFLAGS="-fsanitize=address,undefined"; then
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  PLUGQ_SANITIZER_LOGS=$sanlogs PLUGQ_SANITIZED=1 \
    run_check "$out/asan" NBDKIT="$top/scripts/nbdkit-sanitized" \
      TESTS="$asan_client_tests $unit_tests"
  if [ -n "$(ls -A "$sanlogs" 2>/dev/null)" ]; then
    echo "FAIL: sanitizer reports from nbdkit + plugq:"
    cat "$sanlogs"/* | head -n 80
    failed=$((failed + 1)); status=1
  else
    echo "PASS: no sanitizer reports from nbdkit + plugq"; passed=$((passed + 1))
  fi
fi

stage "ThreadSanitizer: unit and model tests"
build "$out/tsan" CC=gcc --enable-lock-checks $rbd CFLAGS="-O1 -g -fsanitize=thread" LDFLAGS="-fsanitize=thread" \
  && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" PLUGQ_MODEL_SEEDS=16 \
     run_check "$out/tsan" TESTS="$unit_tests"

stage "libFuzzer: queue fuzzer, 30 s"
if build "$out/fuzz" CC=clang --enable-fuzzer --enable-lock-checks CFLAGS="-O1 -g -fsanitize=address,undefined" \
     LDFLAGS="-fsanitize=address,undefined"; then
  (cd "$out/fuzz" && make server/tests/fuzz_queue >/dev/null 2>&1) || true
  if [ -x "$out/fuzz/server/tests/fuzz_queue" ]; then
    # libFuzzer adds inputs to its corpus directory: work on a copy.
    corpus=$out/fuzz/corpus; rm -rf "$corpus"; cp -r "$top/server/tests/fuzz-corpus" "$corpus"
    if "$out/fuzz/server/tests/fuzz_queue" -max_total_time=30 -max_len=4096 -timeout=20 \
         "$corpus" >"$out/fuzz/fuzz.log" 2>&1; then
      echo "PASS: fuzz_queue"; passed=$((passed + 1))
    else
      echo "FAIL: fuzz_queue"; tail -n 40 "$out/fuzz/fuzz.log"; failed=$((failed + 1)); status=1
    fi
  else
    echo "FAIL: fuzz_queue did not build"; failed=$((failed + 1)); status=1
  fi
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
