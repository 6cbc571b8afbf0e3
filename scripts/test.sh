#!/usr/bin/env bash
# Builds inflight (Release) and runs every test. Usage: scripts/test.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
bash "$root/scripts/build.sh" "$build"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
