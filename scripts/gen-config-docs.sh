#!/usr/bin/env bash
# Regenerates docs/CONFIGURATION.md with `inflight config-docs`, after building inflight so that the file
# matches the sources. Usage: scripts/gen-config-docs.sh [build-dir] (default: build/)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
cmake --build "$build" --target inflight
# Through a temporary file: a failing command leaves the committed file as it was.
"$build/inflight" config-docs > "$root/docs/CONFIGURATION.md.tmp"
mv "$root/docs/CONFIGURATION.md.tmp" "$root/docs/CONFIGURATION.md"
echo "wrote $root/docs/CONFIGURATION.md"
