#!/usr/bin/env bash
# Configures and builds inflight (Release, Ninja). Usage: scripts/build.sh [build-dir] [extra cmake args...]
# The one build command: scripts/test.sh (and so CI) and docker/Dockerfile* all run it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
if [ $# -gt 0 ]; then shift; fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j"$(nproc)"
