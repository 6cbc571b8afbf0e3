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

# start_server LOG ARGS...: starts `inflight serve` on a free port; sets $pid and $port.
start_server() {
  local log=$1
  shift
  : >"$log"  # before the server opens it: the loop below reads it at once
  "$inflight" serve --model "$model" --port 0 --api-key test-key --kv-cache-memory 64M "$@" >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 300); do
    port="$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log" | head -n1)"
    [ -n "$port" ] && grep -q "ready: serving" "$log" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "inflight serve exited at start-up"; exit 1; }
    sleep 0.1
  done
  cat "$log"
  echo "inflight serve did not become ready"
  exit 1
}
# The model's own (llama2) template, and ChatML, which renders tool messages (a turn with a tool result).
start_server "$work/server.log"
pid_main=$pid port_main=$port
trap 'kill -9 "$pid_main" "${pid_chatml:-}" 2>/dev/null || true' EXIT
start_server "$work/server-chatml.log" --chat-template chatml
pid_chatml=$pid port_chatml=$port

status=0
(cd "$work" && node openai_client_check.mjs "http://127.0.0.1:$port_main/v1" test-key "http://127.0.0.1:$port_chatml/v1") ||
  status=$?
for p in "$pid_main" "$pid_chatml"; do
  kill -TERM "$p"
  wait "$p" || { echo "inflight serve did not exit 0 on SIGTERM"; status=1; }
done
trap - EXIT
[ "$status" -eq 0 ] || cat "$work/server.log" "$work/server-chatml.log"
exit "$status"
