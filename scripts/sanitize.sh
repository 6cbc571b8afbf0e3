#!/usr/bin/env bash
# Builds inflight with sanitizers, in a build folder of its own, and runs tests under them.
#   scripts/sanitize.sh asan [build-dir] [cmake args...]   AddressSanitizer + UBSan; ctest but 7
#   scripts/sanitize.sh tsan [build-dir] [cmake args...]   ThreadSanitizer; the engine and server tests
# The kernels at -O1 (INFLIGHT_KERNEL_OPT: their tests run long sweeps), the test executables' own code at -O0,
# line tables (-g1: file and line in every report). The rest: -O0 under ASan (its build of every target took
# 603 s against 782 on 2 cores, its tests 363-390 s against 345), -O1 under TSan (three targets: -O0 saved 41 s
# of build, and its tests ran 218 s against 135). No micro-benchmarks. Reports of every process (the tests and
# the `inflight serve` children they start) are written to <build-dir>/sanitizer-logs; any report fails the
# script, as does a failing test. A report is fixed, never silenced (a suppression only with a comment proving
# it false).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-}"
case "$mode" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    opt=-O0
    targets=(all)
    tests=""
    # The soak's checks are timed (a burst must outrun the accept loop, requests must finish in the run);
    # under ASan on a busy machine they failed without any sanitizer report. It runs in the normal suite, and
    # against an ASan server by hand (docs/RELIABILITY.md). The web page's browser test runs JavaScript
    # against routes the server tests already cover, and the docker checks read files: neither is a
    # sanitizer's business, and together they were 40 s of the stage. The docs checks read Markdown; the
    # missing-data check runs the suites a second time, with no data (the normal suite runs it); the JSON Schema
    # Test Suite's 16 000 cases go through the compilers that test_grammar and the fuzz targets run under ASan.
    exclude='^(soak|webui|docker_.*|docs|docs_selftest|missing_data|json_schema_suite)$'
    ;;
  tsan)
    flags="-fsanitize=thread"
    opt=-O1
    targets=(inflight test_engine test_server)
    tests='^(engine|server)$'
    exclude=''
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [build-dir] [cmake args...]" >&2
    exit 2
    ;;
esac
shift
build="${1:-$root/build-$mode}"
if [ $# -gt 0 ]; then shift; fi
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -g1" -DINFLIGHT_TEST_OPT=-O0 \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" -DINFLIGHT_BUILD_BENCH=OFF -DINFLIGHT_KERNEL_OPT=-O1 \
  -DINFLIGHT_CUDA=OFF \
  "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
t1=$(date +%s)
echo "sanitize $mode: build $((t1 - t0)) s"

logs="$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
# The structured-output check over real vocabularies (ctest tokenizers) with 2 seeds a schema instead of 8: under
# ASan its 144 answers took 4 minutes; 2 seeds keep every schema and vocabulary.
export INFLIGHT_STRUCTURED_SEEDS=2
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=1:second_deadlock_stack=1"
status=0
if [ -n "$tests" ]; then
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -R "$tests" || status=$?
else
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -E "$exclude" || status=$?
fi
t2=$(date +%s)
echo "sanitize $mode: tests $((t2 - t1)) s"
if compgen -G "$logs/*" >/dev/null; then
  for f in "$logs"/*; do
    echo "=== $f"
    cat "$f"
  done
  echo "sanitize $mode: sanitizer reports above" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize $mode: tests failed" >&2
  exit "$status"
fi
echo "sanitize $mode: no reports, every test passed ($((t2 - t0)) s)"
