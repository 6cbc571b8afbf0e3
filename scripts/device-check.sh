#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU (H100 / H200; Ampere and later).
#
#   scripts/device-check.sh --bundle [build-dir]   # here: build the CUDA tests and benchmark (sm_80 + sm_90),
#                                                  # copy them and the golden data they read into build-device/
#   scripts/device-check.sh                        # there: run them from build-device/, summary in $OUT
#
# The binaries link the CUDA runtime statically; the benchmark takes cuBLAS from the GPU machine's CUDA
# install or its Python wheels. Without $OUT the results go to build-device/out. Budget: 8 minutes.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/build-device"

if [ "${1:-}" = "--bundle" ]; then
  set -e
  build="${2:-$root/build}"
  bash "$root/scripts/build.sh" "$build" >/dev/null
  cmake --build "$build" --target test_kernels_cuda bench_attention_cuda
  rm -rf "$bundle"
  mkdir -p "$bundle/shared/golden"
  cp "$build/tests/test_kernels_cuda" "$build/bench/bench_attention_cuda" "$bundle/"
  cp -r "$root/../shared/golden/gqa" "$bundle/shared/golden/"
  du -sh "$bundle"
  exit 0
fi

out="${OUT:-$bundle/out}"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

[ -x "$bundle/test_kernels_cuda" ] || { say "no bundle: run scripts/device-check.sh --bundle first"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"

# cuBLAS for the benchmark: the toolkit's, else the Python wheels'.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
  if ls "$dir"/libcublas.so.* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"; fi
done

# Each test case in a process of its own (a crash or a hang costs one case, not the rest), line-buffered so a
# killed case still leaves its output; -s prints every case's measured error, passing or not.
count=$("$bundle/test_kernels_cuda" --count 2>/dev/null | sed -n 's/.*unskipped test cases passing the current filters: \([0-9]*\).*/\1/p')
rc=0
for i in $(seq 1 "${count:-0}"); do
  start=$(date +%s)
  INFLIGHT_SHARED_DIR="$bundle/shared" timeout 150 stdbuf -oL -eL "$bundle/test_kernels_cuda" --first=$i --last=$i -s \
    >"$out/test$i.log" 2>&1
  case_rc=$?
  [ $case_rc -eq 0 ] || rc=1
  say "case $i: exit $case_rc ($(( $(date +%s) - start )) s): $(grep -m1 'TEST CASE' "$out/test$i.log" | sed 's/.*TEST CASE: *//')"
  grep -E 'ERROR|FATAL|max \|cuda - ref\||abort|error' "$out/test$i.log" | head -30 >>"$summary"
done
cat "$out"/test*.log >"$out/test.log" 2>/dev/null; rm -f "$out"/test[0-9]*.log
say "cuda tests: $([ $rc -eq 0 ] && echo passed || echo FAILED), $count cases"

start=$(date +%s)
timeout "${BENCH_TIMEOUT:-200}" stdbuf -oL "$bundle/bench_attention_cuda" ${BENCH_ARGS:-} >"$out/bench.log" 2>&1
say "bench: exit $? ($(( $(date +%s) - start )) s)"
grep -v '^{' "$out/bench.log" >>"$summary"
exit $rc
