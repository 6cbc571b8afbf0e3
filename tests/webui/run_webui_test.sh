#!/usr/bin/env bash
# ctest `webui`: the built-in web page in a real browser (Debian's chromium, driven by the npm package
# playwright-core) against `inflight serve` on stories260K: webui_check.mjs starts the servers itself.
# node_modules is cached in <work dir> (under the build folder); screenshots go to <work dir>/screenshots.
# Exit 77 (ctest: skipped) when node, npm or chromium is missing, or the npm registry cannot be reached.
# Usage: run_webui_test.sh <inflight binary> <stories260K.gguf> <work dir>
set -euo pipefail
inflight="$1"
model="$2"
work="$3"
if [ -n "${INFLIGHT_TEST_DATA:-}" ]; then model="$INFLIGHT_TEST_DATA/models/stories260K/stories260K.gguf"; fi
if [ ! -f "$model" ]; then echo "missing test data: $model" >&2; exit 1; fi
here="$(cd "$(dirname "$0")" && pwd)"
chromium="${INFLIGHT_CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$chromium" ]; then
  echo "SKIPPED: no chromium at $chromium for the web page test (scripts/install-deps.sh installs Debian's chromium)"
  exit 77
fi
. "$here/../npm_workdir.sh"
npm_workdir "$here" "$work" playwright-core "the web page test"
cp "$here/webui_check.mjs" "$work/"
rm -rf "$work/screenshots"
mkdir -p "$work/screenshots"
cd "$work"
exec node webui_check.mjs "$inflight" "$model" "$work/screenshots" "$chromium"
