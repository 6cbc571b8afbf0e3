#!/usr/bin/env bash
# The chaos soak: `inflight serve` on loopback under mixed load and faults for SECONDS, then checks that
# nothing is left behind (see scripts/soak.py). Usage: scripts/soak.sh SECONDS [build-dir] [soak.py flags]
# Needs a built build-dir (default build) and Python 3. Exit status 0 only when every check holds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:?usage: scripts/soak.sh SECONDS [build-dir] [soak.py flags...]}"
shift
build="${1:-$root/build}"
if [ $# -gt 0 ]; then shift; fi
exec python3 "$root/scripts/soak.py" "$seconds" --inflight "$build/inflight" \
  --model "$root/tests/data/models/stories260K/stories260K.gguf" "$@"
