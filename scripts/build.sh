#!/usr/bin/env bash
# Configures and builds inflight (Release, Ninja). Usage: scripts/build.sh [build-dir] [extra cmake args...]
# The one build command: scripts/test.sh (and so CI) and docker/Dockerfile* all run it. INFLIGHT_BUILD_TARGET
# builds one target instead of all (the images: inflight).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
if [ $# -gt 0 ]; then shift; fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j"$(nproc)" ${INFLIGHT_BUILD_TARGET:+--target "$INFLIGHT_BUILD_TARGET"}
