#!/usr/bin/env bash
# Builds libFuzzer targets (clang, AddressSanitizer + UBSan) and runs each for SECONDS over its seed corpus.
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]     TARGET: http config gguf safetensors tokenizer bpe jinja sse
#                                                           json_schema regex gbnf
#   scripts/fuzz.sh all SECONDS                              every target, as many at a time as there are cores
# The committed seeds (tests/fuzz/corpus/TARGET) are read, never written; new inputs go to
# <build>/corpus/TARGET, a crashing input to <build>/artifacts/TARGET/. Exit status: non-zero on a finding.
# The build folder: $INFLIGHT_FUZZ_BUILD, default build-fuzz. Line tables only (-g1), and the kernels at -O0: no
# target runs a matrix or attention kernel, and the SIMD files were half of the build's time at -O1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=(http config gguf safetensors tokenizer bpe jinja sse json_schema regex gbnf)
target="${1:-}"
seconds="${2:-}"
if [ -z "$target" ] || [ -z "$seconds" ]; then
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS [libFuzzer flags...]   (targets: ${targets[*]})" >&2
  exit 2
fi
shift 2
if [ "$target" = all ]; then
  selected=("${targets[@]}")
elif [[ " ${targets[*]} " =~ " $target " ]]; then
  selected=("$target")
else
  echo "fuzz.sh: unknown target '$target' (targets: ${targets[*]})" >&2
  exit 2
fi
build="${INFLIGHT_FUZZ_BUILD:-$root/build-fuzz}"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [ ! -f "$build/build.ninja" ]; then
  CXX="${CXX_FUZZ:-clang++}" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DINFLIGHT_FUZZ=ON -DINFLIGHT_BUILD_TESTS=OFF -DINFLIGHT_CUDA=OFF \
    -DINFLIGHT_BUILD_BENCH=OFF -DINFLIGHT_KERNEL_OPT=-O0 "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target "${selected[@]/#/fuzz_}"

run_one() {  # target, libFuzzer flags...
  local t=$1
  shift
  local seeds="$root/tests/fuzz/corpus/$t" work="$build/corpus/$t" artifacts="$build/artifacts/$t"
  mkdir -p "$work" "$artifacts"
  local dict=()
  if [ -f "$root/tests/fuzz/$t.dict" ]; then dict=(-dict="$root/tests/fuzz/$t.dict"); fi
  echo "fuzz $t: ${seconds} s over $seeds"
  # -timeout: one input slower than 10 s is a hang; -rss_limit_mb: a finding when an input makes it grow past.
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${dict[@]}" "$@" "$work" "$seeds"
}

if [ ${#selected[@]} -eq 1 ]; then
  run_one "$target" "$@"
  exit
fi
# Every target: one per core at a time, each into its own log, printed when it ends.
logs="$build/logs"
mkdir -p "$logs"
status=0
declare -A pids=()
finish() {  # waits for one running target, prints its log, records a failure
  local done_pid t rc=0
  wait -n -p done_pid || rc=$?
  for t in "${!pids[@]}"; do
    if [ "${pids[$t]}" = "$done_pid" ]; then
      cat "$logs/$t.log"
      if [ "$rc" -ne 0 ]; then
        echo "fuzz $t: FAILED (exit $rc)" >&2
        status=1
      fi
      unset "pids[$t]"
    fi
  done
}
for t in "${selected[@]}"; do
  while [ ${#pids[@]} -ge "$(nproc)" ]; do finish; done
  run_one "$t" "$@" >"$logs/$t.log" 2>&1 &
  pids[$t]=$!
done
while [ ${#pids[@]} -gt 0 ]; do finish; done
exit $status
