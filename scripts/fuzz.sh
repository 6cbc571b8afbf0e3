#!/usr/bin/env bash
# Builds one libFuzzer target (clang, AddressSanitizer + UBSan) and runs it for SECONDS over its seed corpus.
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]     TARGET: http config gguf safetensors tokenizer bpe jinja sse
#   scripts/fuzz.sh all SECONDS                              each target in turn
# The committed seeds (tests/fuzz/corpus/TARGET) are read, never written; new inputs go to
# <build>/corpus/TARGET, a crashing input to <build>/artifacts/TARGET/. Exit status: non-zero on a finding.
# The build folder: $INFLIGHT_FUZZ_BUILD, default build-fuzz.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=(http config gguf safetensors tokenizer bpe jinja sse)
target="${1:-}"
seconds="${2:-}"
if [ -z "$target" ] || [ -z "$seconds" ]; then
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS [libFuzzer flags...]   (targets: ${targets[*]})" >&2
  exit 2
fi
shift 2
if [ "$target" = all ]; then
  for t in "${targets[@]}"; do "$0" "$t" "$seconds" "$@"; done
  exit 0
fi
if [[ ! " ${targets[*]} " =~ " $target " ]]; then
  echo "fuzz.sh: unknown target '$target' (targets: ${targets[*]})" >&2
  exit 2
fi
build="${INFLIGHT_FUZZ_BUILD:-$root/build-fuzz}"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [ ! -f "$build/build.ninja" ]; then
  CXX="${CXX_FUZZ:-clang++}" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DINFLIGHT_FUZZ=ON -DINFLIGHT_BUILD_TESTS=OFF -DINFLIGHT_CUDA=OFF \
    -DINFLIGHT_BUILD_BENCH=OFF -DINFLIGHT_KERNEL_OPT=-O1 "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target "fuzz_$target"

seeds="$root/tests/fuzz/corpus/$target"
work="$build/corpus/$target"
artifacts="$build/artifacts/$target"
mkdir -p "$work" "$artifacts"
dict=()
if [ -f "$root/tests/fuzz/$target.dict" ]; then dict=(-dict="$root/tests/fuzz/$target.dict"); fi
echo "fuzz $target: ${seconds} s over $seeds"
# -timeout: one input slower than 10 s is a hang; -rss_limit_mb: a finding when an input makes it grow past.
"$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "${dict[@]}" "$@" "$work" "$seeds"
