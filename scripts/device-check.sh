#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU (H100 / H200; Ampere and later).
#
#   scripts/device-check.sh --bundle [build-dir]   # here: build the CUDA tests and benchmarks (sm_80 + sm_90),
#                                                  # copy them, the Debian libraries they load and the
#                                                  # reference data they read into build-device/
#   scripts/device-check.sh                        # there: run them from build-device/, summary in $OUT
#
# The CUDA runtime is linked statically; cuBLAS comes from the GPU machine's CUDA install or its Python wheels.
# Without $OUT the results go to build-device/out. Budget: 8 minutes. BENCH_ATTENTION_ARGS (default --quick)
# and BENCH_ENGINE_ARGS choose the benchmarks' cases; SKIP_TESTS=1 runs only the benchmarks.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/build-device"

if [ "${1:-}" = "--bundle" ]; then
  set -e
  build="${2:-$root/build-cuda}"
  # Hopper machine code only (the GPU machines are H100 / H200): a quarter of the size of sm_80 + sm_90 + PTX.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFLIGHT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${BUNDLE_CUDA_ARCHITECTURES:-90-real}" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target inflight test_kernels_cuda test_engine_cuda test_server \
    bench_attention_cuda bench_engine
  rm -rf "$bundle"
  mkdir -p "$bundle/data/golden" "$bundle/data/models/stories260K" "$bundle/lib"
  cp "$build/inflight" "$build/tests/test_kernels_cuda" "$build/tests/test_engine_cuda" "$build/tests/test_server" \
     "$build/bench/bench_attention_cuda" "$build/bench/bench_engine" "$bundle/"
  cp -r "$root/tests/data/golden/gqa" "$root/tests/data/golden/stories260K_greedy.json" "$bundle/data/golden/"
  cp "$root/tests/data/models/stories260K/stories260K.gguf" "$bundle/data/models/stories260K/"
  # The Debian libraries the engine loads (spdlog, fmt, sentencepiece, PCRE2, utf8proc); not libc, libstdc++
  # or CUDA's.
  ldd "$build/inflight" "$build/tests/test_server" "$build/bench/bench_engine" | awk '$3 ~ /^\/lib/ && $1 !~ /^lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt)\.so/ {print $3}' |
    sort -u | xargs -r cp -L -t "$bundle/lib"
  # One gzip'd tar: the binaries' device code compresses to half, and what travels to the GPU machine is limited.
  tar -C "$bundle" -czf "$root/build-device.tgz" .
  rm -rf "$bundle" && mkdir -p "$bundle" && mv "$root/build-device.tgz" "$bundle/bundle.tgz"
  du -sh "$bundle"
  exit 0
fi
[ -f "$bundle/bundle.tgz" ] && [ ! -x "$bundle/test_kernels_cuda" ] && tar -C "$bundle" -xzf "$bundle/bundle.tgz"

out="${OUT:-$bundle/out}"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

[ -x "$bundle/test_kernels_cuda" ] || { say "no bundle: run scripts/device-check.sh --bundle first"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"

# cuBLAS (the engine and the attention benchmark): the toolkit's, else the Python wheels'.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
  if ls "$dir"/libcublas.so.* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"; fi
done

export LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}"

# Each test case in a process of its own (a crash or a hang costs one case, not the rest), line-buffered so a
# killed case still leaves its output; -s prints every case's measured error, passing or not.
rc=0
run_cases() {  # binary [doctest filters...]
  local name=$1 bin="$bundle/$1" count i start case_rc failed=0
  shift
  count=$("$bin" "$@" --count 2>/dev/null | sed -n 's/.*unskipped test cases passing the current filters: \([0-9]*\).*/\1/p')
  if [ "${count:-0}" -eq 0 ]; then  # skipped (no usable GPU) or a broken binary: nothing ran, which is no pass
    say "$name: NOTHING RAN: $("$bin" "$@" --count 2>&1 | head -1)"
    rc=1
    return
  fi
  for i in $(seq 1 "${count:-0}"); do
    start=$(date +%s)
    timeout 150 stdbuf -oL -eL "$bin" "$@" --first=$i --last=$i -s >"$out/$name.$i.log" 2>&1
    case_rc=$?
    [ $case_rc -eq 0 ] || failed=1
    say "$name case $i: exit $case_rc ($(( $(date +%s) - start )) s): $(grep -m1 'TEST CASE' "$out/$name.$i.log" | sed 's/.*TEST CASE: *//')"
    grep -E 'ERROR|FATAL|max \|cuda - ref\||max \|logit|tokens equal|abort|error' "$out/$name.$i.log" | head -30 >>"$summary"
  done
  cat "$out/$name".[0-9]*.log >"$out/$name.log" 2>/dev/null; rm -f "$out/$name".[0-9]*.log
  say "$name: $([ $failed -eq 0 ] && echo passed || echo FAILED), ${count:-0} cases"
  [ $failed -eq 0 ] || rc=1
}
export INFLIGHT_TEST_DATA="$bundle/data" INFLIGHT_BINARY_PATH="$bundle/inflight"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  run_cases test_kernels_cuda
  run_cases test_engine_cuda
  export INFLIGHT_TEST_DEVICE=cuda  # the server under test runs the model on the GPU
  run_cases test_server "--test-suite=serve generation"
  unset INFLIGHT_TEST_DEVICE
fi

start=$(date +%s)
timeout "${BENCH_TIMEOUT:-150}" stdbuf -oL "$bundle/bench_attention_cuda" ${BENCH_ATTENTION_ARGS:---quick} \
  >"$out/bench_attention.log" 2>&1
say "bench_attention_cuda: exit $? ($(( $(date +%s) - start )) s)"
grep -v '^{' "$out/bench_attention.log" >>"$summary"

# The whole model: TinyLlama-1.1B's shape with random f16 weights, written first to the temp folder.
start=$(date +%s)
timeout "${BENCH_TIMEOUT:-150}" stdbuf -oL "$bundle/bench_engine" \
  ${BENCH_ENGINE_ARGS:-preset:tinyllama-1.1b:f16 --device cuda --concurrency 1,16,64 --rounds 2} \
  >"$out/bench_engine.log" 2>&1
say "bench_engine: exit $? ($(( $(date +%s) - start )) s)"
tail -12 "$out/bench_engine.log" >>"$summary"
exit $rc
