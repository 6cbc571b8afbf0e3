#!/usr/bin/env bash
# Container entrypoint. `inflight serve`, configured by INFLIGHT_* environment variables, each set and
# non-empty one becoming its flag; arguments are appended after them (so they win). A first argument naming
# another command (bench, generate, make-model) runs that command as given: the compose `bench` service.
set -euo pipefail

# variable=flag of `inflight serve`. tests/docker/check_docker.py checks that every flag exists and that
# every variable docker-compose.yml sets is listed here.
readonly FLAG_OF_VARIABLE=(
  INFLIGHT_CONFIG=--config
  INFLIGHT_MODEL=--model
  INFLIGHT_HOST=--host
  INFLIGHT_PORT=--port
  INFLIGHT_SERVED_MODEL_NAME=--served-model-name
  INFLIGHT_API_KEY=--api-key
  INFLIGHT_NO_WEBUI=--no-webui
  INFLIGHT_MAX_NUM_SEQS=--max-num-seqs
  INFLIGHT_MAX_NUM_BATCHED_TOKENS=--max-num-batched-tokens
  INFLIGHT_MAX_STEP_MS=--max-step-ms
  INFLIGHT_PREFILL_ORDER=--prefill-order
  INFLIGHT_MAX_MODEL_LEN=--max-model-len
  INFLIGHT_KV_CACHE_DTYPE=--kv-cache-dtype
  INFLIGHT_KV_QUANT_GROUP=--kv-quant-group
  INFLIGHT_KV_STATIC_AMAX=--kv-static-amax
  INFLIGHT_KV_CACHE_MEMORY=--kv-cache-memory
  INFLIGHT_KV_BLOCK_SIZE=--kv-block-size
  INFLIGHT_DEVICE=--device
  INFLIGHT_GPU_MEMORY_UTILIZATION=--gpu-memory-utilization
  INFLIGHT_THREADS=--threads
  INFLIGHT_HTTP_THREADS=--http-threads
  INFLIGHT_MAX_CONNECTIONS=--max-connections
  INFLIGHT_MAX_QUEUE=--max-queue
  INFLIGHT_LOG_LEVEL=--log-level
  INFLIGHT_CHAT_TEMPLATE=--chat-template
  INFLIGHT_SHUTDOWN_GRACE_SECONDS=--shutdown-grace-seconds
)
# Flags that take no value: the variable set to 1 or true gives the flag alone.
readonly SWITCHES=" --no-webui "
INFLIGHT_BIN="${INFLIGHT_BIN:-inflight}"

case "${1:-}" in
  bench | generate | make-model) exec "$INFLIGHT_BIN" "$@" ;;
  serve) shift ;;
esac

args=()
for pair in "${FLAG_OF_VARIABLE[@]}"; do
  variable="${pair%%=*}"
  if [ -n "${!variable:-}" ]; then
    flag="${pair#*=}"
    if [[ "$SWITCHES" == *" $flag "* ]]; then
      case "${!variable}" in 1 | true) args+=("$flag") ;; esac
    else
      args+=("$flag" "${!variable}")
    fi
  fi
done
exec "$INFLIGHT_BIN" serve "${args[@]}" "$@"
