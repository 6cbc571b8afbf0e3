#!/usr/bin/env bash
# ctest `openai_client`: starts `inflight serve` on stories260K and runs openai_client_check.mjs with the
# official `openai` npm package. node_modules is cached in <work dir> (under the build folder).
# Exit 77 (ctest: skipped) when node or npm is missing, or the npm registry cannot be reached.
# Usage: run_openai_client_test.sh <inflight binary> <stories260K.gguf> <work dir>
set -euo pipefail
inflight="$1"
model="$2"
work="$3"
if [ -n "${INFLIGHT_TEST_DATA:-}" ]; then model="$INFLIGHT_TEST_DATA/models/stories260K/stories260K.gguf"; fi
if [ ! -f "$model" ]; then echo "missing test data: $model" >&2; exit 1; fi
here="$(cd "$(dirname "$0")" && pwd)"

. "$here/../npm_workdir.sh"
npm_workdir "$here" "$work" openai "the OpenAI client test"
cp "$here/openai_client_check.mjs" "$work/"

log="$work/server.log"
"$inflight" serve --model "$model" --port 0 --api-key test-key --kv-cache-memory 64M >"$log" 2>&1 &
pid=$!
trap 'kill -9 "$pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log" | head -n1)"
  [ -n "$port" ] && grep -q "ready: serving" "$log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "inflight serve exited at start-up"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; echo "inflight serve did not become ready"; exit 1; }

status=0
(cd "$work" && node openai_client_check.mjs "http://127.0.0.1:$port/v1" test-key) || status=$?
kill -TERM "$pid"
wait "$pid" || { echo "inflight serve did not exit 0 on SIGTERM"; status=1; }
trap - EXIT
[ "$status" -eq 0 ] || cat "$log"
exit "$status"
